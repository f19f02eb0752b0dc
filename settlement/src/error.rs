//! Errors returned by the ledger, metering and reports.

use crate::ids::{Account, AccountId, LeaseId};
use rust_decimal::Decimal;

/// Everything that can go wrong in `settlement`. No input can make the crate
/// panic; bad input comes back as one of these.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettlementError {
    /// Inputs must be applied in non-decreasing time order (ms since epoch).
    #[error(
        "input at {at_ms} ms is earlier than the ledger clock {clock_ms} ms; apply inputs in time order"
    )]
    ClockWentBackwards {
        /// Time of the refused input, ms since epoch.
        at_ms: i64,
        /// Latest time already applied, ms since epoch.
        clock_ms: i64,
    },
    /// A time outside 1970-01-01 .. 9999-12-31 UTC.
    #[error("time {ms} ms is outside the supported range (1970..10000, ms since epoch)")]
    TimeOutOfRange {
        /// The refused time, ms since epoch.
        ms: i64,
    },
    /// `Accrue { now_ms }` applied at an earlier `at_ms` than `now_ms`.
    #[error("accrual to {now_ms} ms cannot be applied at {at_ms} ms (it would accrue the future)")]
    AccrueInFuture {
        /// Requested accrual instant, ms since epoch.
        now_ms: i64,
        /// Time the input was applied, ms since epoch.
        at_ms: i64,
    },
    /// Amounts on deposits, payouts and adjustments must be > 0 CNY.
    #[error("amount must be positive, got {amount} CNY")]
    NonPositiveAmount {
        /// The refused amount, CNY.
        amount: Decimal,
    },
    /// Amount larger than [`crate::money::MAX_INPUT_AMOUNT`] or finer than
    /// [`crate::money::INTERNAL_DP`] decimal places.
    #[error("amount {amount} CNY is out of range (max 10^15 CNY, at most 12 decimal places)")]
    AmountOutOfRange {
        /// The refused amount, CNY.
        amount: Decimal,
    },
    /// The same idempotency key was used with different content.
    #[error("idempotency key {key:?} was already used with different content; refusing")]
    IdempotencyConflict {
        /// The reused key.
        key: String,
    },
    /// The account does not hold enough to debit `requested`.
    #[error("insufficient funds on {account}: balance {balance} CNY, requested {requested} CNY")]
    InsufficientFunds {
        /// The account that would go below zero.
        account: Account,
        /// Its balance, CNY.
        balance: Decimal,
        /// The refused debit, CNY.
        requested: Decimal,
    },
    /// An account of the wrong kind for this input (e.g. a deposit to a supplier).
    #[error("account {account} cannot be used here: {reason}")]
    InvalidAccount {
        /// The refused account.
        account: Account,
        /// Why.
        reason: &'static str,
    },
    /// A lease start fact for a lease id already known.
    #[error("lease {0} already started")]
    DuplicateLease(LeaseId),
    /// A fact for a lease id never started.
    #[error("lease {0} is unknown (no start fact)")]
    UnknownLease(LeaseId),
    /// A second end fact for a lease.
    #[error("lease {0} already ended")]
    LeaseAlreadyEnded(LeaseId),
    /// A lease start fact with impossible content.
    #[error("lease {lease} is invalid: {reason}")]
    InvalidLease {
        /// The lease.
        lease: LeaseId,
        /// Why.
        reason: &'static str,
    },
    /// End time before start time.
    #[error("lease {lease} ends at {end_ms} ms, before its start {start_ms} ms")]
    EndBeforeStart {
        /// The lease.
        lease: LeaseId,
        /// Start, ms since epoch.
        start_ms: i64,
        /// End, ms since epoch.
        end_ms: i64,
    },
    /// A `DeliveryFailed` fact for a lease the ledger started: it was ready, so it was
    /// delivered; its end comes as `LeaseEnded`.
    #[error(
        "lease {0} was started (ready) in the ledger, so it cannot fail delivery; end it with LeaseEnded"
    )]
    LeaseWasReady(LeaseId),
    /// A lease start fact for a lease recorded as not delivered.
    #[error(
        "lease {0} was recorded as not delivered and can never start; its replacement has a new lease id"
    )]
    DeliveryAlreadyFailed(LeaseId),
    /// A second `DeliveryFailed` fact for a lease with different content (buyer, supplier,
    /// SKU, region, GPUs or time).
    #[error(
        "a different delivery failure was already recorded for lease {0}; refusing (send the same fact to repeat it)"
    )]
    DeliveryFailureConflict(LeaseId),
    /// A failover fact for a lease that did not end by `node_failure`.
    #[error("failover fact for lease {0}, which has not ended by node_failure")]
    NotNodeFailure(LeaseId),
    /// A second failover fact for the same lease.
    #[error("failover for lease {0} was already applied")]
    DuplicateFailover(LeaseId),
    /// Invalid settlement configuration.
    #[error("invalid configuration: {0}")]
    InvalidConfig(&'static str),
    /// A report period with `from >= to` or out of range.
    #[error("invalid period [{from_ms}, {to_ms}) ms")]
    InvalidPeriod {
        /// Period start, ms since epoch.
        from_ms: i64,
        /// Period end, ms since epoch.
        to_ms: i64,
    },
    /// Not an IANA time zone name.
    #[error("unknown IANA time zone {0:?}")]
    UnknownTimeZone(String),
    /// A local date/time that cannot be built (e.g. month 13).
    #[error("invalid local date/time: {0}")]
    InvalidLocalTime(String),
    /// A report was asked for a period an active lease has not been accrued
    /// through yet; apply `Accrue { now_ms >= to }` first.
    #[error(
        "lease {lease} is accrued through {accrued_to_ms} ms only; accrue to at least {to_ms} ms before reporting"
    )]
    NotAccrued {
        /// The lease behind.
        lease: LeaseId,
        /// Instant up to which its seconds are posted, ms since epoch.
        accrued_to_ms: i64,
        /// The report period end, ms since epoch.
        to_ms: i64,
    },
    /// A close of a period that has not ended yet (`to_ms > at_ms`).
    #[error(
        "period ending at {to_ms} ms cannot be closed at {at_ms} ms; close it at or after its end"
    )]
    PeriodNotEnded {
        /// End of the period to close (exclusive), ms since epoch.
        to_ms: i64,
        /// Time the close was applied, ms since epoch.
        at_ms: i64,
    },
    /// A close that does not start where the latest closed period ended (it would overlap a
    /// closed period or leave a gap).
    #[error(
        "periods close in order without gaps or overlaps: the next close must start at {closed_through_ms} ms, not {from_ms} ms"
    )]
    CloseNotContiguous {
        /// Start of the refused close, ms since epoch.
        from_ms: i64,
        /// End of the latest closed period (the lock date), ms since epoch.
        closed_through_ms: i64,
    },
    /// An input that would post into closed (locked) time and cannot be moved to the open
    /// period (docs/settlement.md "Periods and close").
    #[error(
        "{what} at {at_ms} ms falls before {closed_through_ms} ms, where the books are closed; post a correction adjustment in the open period that references the closed period instead"
    )]
    PeriodClosed {
        /// What would have posted there.
        what: &'static str,
        /// Its time, ms since epoch.
        at_ms: i64,
        /// The lock date: end of the latest closed period, ms since epoch.
        closed_through_ms: i64,
    },
    /// A typed adjustment with an invalid reason or reference.
    #[error("invalid adjustment: {0}")]
    InvalidAdjustment(&'static str),
    /// An SLA cash-out larger than the SLA credits the buyer received and has not cashed out.
    #[error(
        "SLA cash-out of {requested} CNY for buyer {buyer} exceeds its SLA credits not yet cashed out ({available} CNY)"
    )]
    SlaCashOutExceeded {
        /// The buyer.
        buyer: AccountId,
        /// SLA credits received minus cashed out, CNY.
        available: Decimal,
        /// The refused amount, CNY.
        requested: Decimal,
    },
    /// A write-off larger than the supplier's debt (its negative payable).
    #[error(
        "write-off of {requested} CNY for supplier {supplier} exceeds its debt of {debt} CNY (write off at most what it owes)"
    )]
    WriteOffExceedsDebt {
        /// The supplier.
        supplier: AccountId,
        /// What it owes the platform (−payable, at least 0), CNY.
        debt: Decimal,
        /// The refused amount, CNY.
        requested: Decimal,
    },
    /// No credit note of this number for this buyer in the closed period with the given
    /// bounds (docs/settlement.md "Credit notes"): ask for a number listed in
    /// `ClosedPeriod::credit_notes`.
    #[error(
        "no credit note {number} of buyer {buyer} in the closed period [{from_ms}, {to_ms}) ms; use a number listed on the closed period"
    )]
    NoSuchCreditNote {
        /// The buyer.
        buyer: AccountId,
        /// The credit-note number asked for.
        number: u64,
        /// Period start (inclusive), ms since epoch.
        from_ms: i64,
        /// Period end (exclusive), ms since epoch.
        to_ms: i64,
    },
    /// A ledger invariant does not hold (Σ balances ≠ 0, a buyer below zero,
    /// the SLA clearing account not at zero, a closed period's trial balance
    /// not zero or changed, invoice numbers with a gap). Returned only by
    /// `Ledger::check_invariants`; indicates a bug, never bad input.
    #[error("ledger invariant violated on {account}: {what} (balance {balance} CNY)")]
    InvariantViolated {
        /// The account concerned (`external_cash` for the sum check).
        account: Account,
        /// Which invariant.
        what: &'static str,
        /// The offending balance or sum, CNY.
        balance: Decimal,
    },
    /// CSV/XLSX/JSON serialisation failed (in-memory; should not happen).
    #[error("export failed: {0}")]
    Export(String),
    /// A lease start or failed delivery carried SLA terms out of bounds (issue 26); the
    /// error names the field ([`crate::SlaTermsError::field`]). Fix the offer's terms.
    #[error("lease {lease}: {error}")]
    InvalidSlaTerms {
        /// The lease.
        lease: LeaseId,
        /// Which term, and its bounds.
        error: crate::sla::SlaTermsError,
    },
}
