//! # settlement — per-second metering, double-entry ledger, finance reports
//!
//! Issue 3 of the GPU-capacity exchange: turns lease facts and account
//! operations into money, and produces the reports finance closes the
//! books with. Pure like `exchange`: no IO, no clock, no randomness; every
//! input comes with its time (`i64` ms since the Unix epoch, UTC), and
//! reports are returned as bytes (JSON, CSV, XLSX), never written to files.
//! `settlement` does not depend on `exchange`; the gateway maps engine
//! events onto [`Input`].
//!
//! ## Layout
//! * [`ids`] — `AccountId`, `LeaseId`, `TransferId`, and [`Account`] (the
//!   ledger accounts: external cash, platform fee, SLA credits, buyer
//!   prepaid balances, supplier payables).
//! * [`money`] — the one rounding rule ([`money::FEN_ROUNDING`], half away
//!   from zero, 四舍五入), [`money::round_fen`], internal precision, and
//!   [`money::allocate`] (largest remainder, issue 17), which makes printed lines add up
//!   to printed totals.
//! * [`config`] — fee rate (8 %), SLA multiple (10×) and cap (1 h), minimum
//!   billed seconds per market (none by default).
//! * [`input`] — [`Input`]: lease start (at ready)/end/failover facts,
//!   failed deliveries (idempotent per lease), deposits, payouts,
//!   adjustments (idempotent), accrual ticks, listed capacity.
//! * [`metering`] — per-started-second billing and the cumulative charge
//!   function every amount is derived from.
//! * [`sla`] — SLA credits: per-lease [`SlaTerms`] (issue 26: availability promise,
//!   multiple, outage cap, [`CreditCap`], non-delivery credit) with their bounds, the credit
//!   arithmetic, and the monthly availability tiers applied at close.
//! * [`credits`] — SLA credits in the ledger (issue 26): failover by the lease's terms,
//!   non-delivery credits, the monthly availability credit at close, and the statement view
//!   ([`SlaCreditInfo`]).
//! * [`ledger`] — [`Ledger`]: applies inputs, posts [`Transfer`]s, keeps
//!   balances, available balance, runway, leases that must end for
//!   insufficient funds, and when the next accrual is due
//!   ([`ACCRUAL_INTERVAL_MS`]); leases never delivered
//!   ([`DeliveryFailure`], charged zero).
//! * [`reports`] — [`reports::Period`] in any IANA zone and exact
//!   [`LeaseSlice`]s; [`reports::buyer`] statement, [`reports::supplier`]
//!   payout statement, [`reports::platform`] summary,
//!   [`reports::trial_balance`]; each report's `table()`
//!   ([`reports::table`]) renders to [`reports::csv`] and [`reports::xlsx`],
//!   and [`reports::to_json`] serialises it; [`reports::invoice`] (buyer invoices and
//!   supplier self-billing statements with VAT) and [`reports::pdf`] (the printable
//!   invoice, CJK font passed in as bytes).
//! * [`close`] — periods and close (issue 17): [`ClosedPeriod`]s, the lock date, gapless
//!   invoice and self-billing statement numbers; late facts post into the open period with
//!   a reference to the closed one ([`Transfer::restates`]), so closed reports regenerate
//!   byte for byte.
//! * [`adjust`] — typed finance adjustments (issue 17): [`Adjustment`] of an
//!   [`AdjustmentKind`] (goodwill credit, correction, refund, SLA cash-out, write-off) with
//!   a reason and a reference.
//! * [`error`] — [`SettlementError`].
//!
//! ## Invariants (checked by the tests after every step)
//! 1. Double entry: every transfer has a positive amount, one debit and one
//!    credit account, so the sum of all balances is exactly zero.
//! 2. A buyer's balance never goes below zero; a charge that cannot be
//!    collected is recorded as a [`Shortfall`] (never taken) and the lease
//!    shows up in [`Ledger::leases_to_end`].
//! 3. Amounts are `Decimal` CNY; metered amounts are differences of one
//!    cumulative function kept to 12 decimal places, so lease slices over
//!    consecutive periods add up exactly to lease totals.
//! 4. Billing runs from the ledger's start, which is the lease's ready time
//!    (issue 15): never provisioning or wiping; a lease never delivered is
//!    charged zero and earns no SLA credit unless its terms grant a non-delivery credit
//!    (issue 26).
//! 5. Printed amounts use the one rounding rule; printed lines add up to
//!    printed totals; the same inputs give byte-identical CSV (only
//!    `BTreeMap`/`Vec` iteration reaches any output).
//! 6. Closed periods (issue 17) are contiguous, each one's trial balance stays zero with the
//!    turnover recorded at close, and invoice and statement numbers have no gap.
//!
//! The rules with worked examples are in `docs/settlement.md`.
//!
//! ## Example
//!
//! ```
//! use rust_decimal::Decimal;
//! use settlement::reports::csv::to_csv;
//! use settlement::{Account, AccountId, Config, EndReason, Input, LeaseId, LeaseStart, Ledger, Period};
//!
//! # fn main() -> Result<(), settlement::SettlementError> {
//! let t0 = 1_764_432_000_000; // 2025-11-30T00:00:00+08:00, ms since epoch
//! let mut ledger = Ledger::new(Config::default())?;
//! let buyer = AccountId(1);
//! ledger.apply(t0, &Input::Deposit { key: "pay-1".into(), buyer, amount: Decimal::from(100) })?;
//! ledger.apply(t0, &Input::LeaseStarted(LeaseStart {
//!     lease: LeaseId(7),
//!     buyer,
//!     supplier: AccountId(100),
//!     sku: "H100-80G".into(),
//!     region: "cn-east-2".into(),
//!     gpus: 8,
//!     price_per_gpu_hour: Decimal::new(2250, 2), // 22.50 CNY per GPU-hour
//!     start_ms: t0,
//!     sla: None, // the configured rule: 10x the outage charge, capped at the charge so far
//! }))?;
//! ledger.apply(t0 + 60_000, &Input::Accrue { now_ms: t0 + 60_000 })?; // 60 s x 180/3600 = 3.00
//! assert_eq!(ledger.balance(Account::Buyer(buyer)), Decimal::from(97));
//! assert_eq!(ledger.runway_seconds(buyer, t0 + 60_000), Some(1940)); // 97 / 0.05
//! ledger.apply(t0 + 90_000, &Input::LeaseEnded { lease: LeaseId(7), end_ms: t0 + 90_000, reason: EndReason::Released })?;
//! assert!(ledger.sum_of_balances().is_zero());
//!
//! let day = Period::new(t0, t0 + 86_400_000, settlement::DEFAULT_TIME_ZONE)?;
//! let statement = ledger.buyer_statement(buyer, &day)?;
//! assert_eq!(statement.closing_balance, Decimal::new(9550, 2)); // 100 - 4.50
//! let csv: Vec<u8> = to_csv(&statement.table())?;
//! assert!(csv.starts_with(b"section,transfer_id,lease_id"));
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

pub mod adjust;
pub mod close;
pub mod config;
pub mod credits;
pub mod error;
pub mod ids;
pub mod input;
pub mod ledger;
pub mod metering;
pub mod money;
pub mod reports;
pub mod sla;

pub use adjust::{Adjustment, AdjustmentKind};
pub use close::{ClosedPeriod, CreditNoteRecord, InvoiceRef, PeriodId};
pub use config::Config;
pub use credits::{AvailabilityCredit, CreditTerms, FailoverCredit, SlaCreditInfo};
pub use error::SettlementError;
pub use ids::{Account, AccountId, LeaseId, TransferId};
pub use input::{EndReason, Input, LeaseStart, ReplacementPrice, UndeliveredSla};
pub use ledger::{
    ACCRUAL_INTERVAL_MS, Applied, DeliveryFailure, LeaseToEnd, LeaseTotals, Ledger, Shortfall,
    Transfer, TransferKind,
};
pub use money::{FEN_ROUNDING, round_fen};
pub use reports::{DEFAULT_TIME_ZONE, LeaseSlice, Period};
pub use sla::{CreditCap, SlaTerms, SlaTermsError};
