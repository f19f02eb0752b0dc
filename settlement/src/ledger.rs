//! The double-entry ledger: accounts, transfers, leases being metered,
//! idempotency, insufficient funds and runway, and leases never delivered.
//!
//! Delivery (issue 15, docs/settlement.md "Delivery"): a lease is started
//! here when its supplier reports it ready, so billing runs from ready to
//! end and never covers provisioning or wiping. A lease never ready is only
//! a [`DeliveryFailure`] record: no transfer, no SLA credit (unless its terms grant a
//! non-delivery credit, issue 26: `credits.rs`), listed on the statements.
//!
//! SLA credits (issue 26, `credits.rs`): each lease keeps its terms from its start and the
//! computation of its failover credit; `Failover` and the monthly availability credit at
//! close are applied there.
//!
//! Close (issue 17, docs/settlement.md "Periods and close", `close.rs`): every instant
//! before the lock date (the end of the latest closed period) is locked. Transfers always
//! post at their input's time, which is after it; facts whose own times lie in locked time
//! are moved out of it (`EndPlan`: a late end keeps the locked seconds as reported and
//! refunds the ones after the true end by a correction that `restates` the closed period;
//! failed deliveries listed at the lock date; listings clipped) or refused (`PeriodClosed`).
//!
//! [`Ledger::apply`] takes one [`Input`] at a time (in time order) and posts
//! transfers. Each transfer moves a positive CNY amount from a debit account
//! to a credit account, so the sum of all balances stays exactly zero.
//!
//! Memory: the ledger keeps every deposit, payout, adjustment and SLA
//! transfer (the journal, for statements), but not the accrual transfers
//! (charges, fees, refunds): those are returned from [`Ledger::apply`] for
//! the caller to persist, and each lease keeps a compact record of which of
//! its seconds are charged and how much of them was collected. Reports are
//! computed from that record.

use crate::close::{Closes, PeriodId};
use crate::config::Config;
use crate::error::SettlementError;
use crate::ids::{Account, AccountId, LeaseId, TransferId};
use crate::input::{EndReason, Input, LeaseStart};
use crate::metering::{billed_seconds, cumulative_charge, seconds_started_before};
use crate::money::{INTERNAL_DP, MAX_INPUT_AMOUNT, quantize};
use rust_decimal::Decimal;
use rust_decimal::prelude::ToPrimitive;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Earliest accepted time: 1970-01-01T00:00:00Z, ms since epoch.
pub const MIN_TIME_MS: i64 = 0;
/// Latest accepted time: 9999-12-31T23:59:59.999Z, ms since epoch.
pub const MAX_TIME_MS: i64 = 253_402_300_799_999;

/// Longest stretch of lease time, in ms, that may go uncharged: the
/// gateway applies `Accrue` at least this often (issue 3: "accrual posts
/// charges at least every 60 s of lease time"); see [`Ledger::accrual_due_ms`].
pub const ACCRUAL_INTERVAL_MS: i64 = 60_000;

/// What a transfer is for; carries the lease or idempotency key behind it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TransferKind {
    /// External cash → buyer (top-up).
    Deposit {
        /// Idempotency key.
        key: String,
    },
    /// Supplier → external cash.
    Payout {
        /// Idempotency key.
        key: String,
    },
    /// Manual adjustment.
    Adjustment {
        /// Idempotency key.
        key: String,
        /// Memo.
        memo: String,
    },
    /// Buyer → supplier: collected charge for lease seconds.
    Charge {
        /// The lease.
        lease: LeaseId,
    },
    /// Supplier → platform fee: fee on a collected charge.
    Fee {
        /// The lease.
        lease: LeaseId,
    },
    /// Supplier → buyer: charge returned because the billing end came
    /// before seconds already accrued (e.g. `node_failure`).
    Refund {
        /// The lease.
        lease: LeaseId,
    },
    /// Platform fee → supplier: fee returned with a refund.
    FeeRefund {
        /// The lease.
        lease: LeaseId,
    },
    /// Supplier → SLA credits: the supplier funds an SLA credit.
    SlaFunding {
        /// The failed lease.
        lease: LeaseId,
    },
    /// SLA credits → buyer: the SLA credit granted.
    SlaCredit {
        /// The failed lease.
        lease: LeaseId,
    },
}

/// One double-entry transfer: `amount` CNY (> 0) from `debit` to `credit`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transfer {
    /// Unique id, in posting order.
    pub id: TransferId,
    /// Posting time, ms since epoch (the `at_ms` of the input).
    pub at_ms: i64,
    /// Account debited (balance decreases).
    pub debit: Account,
    /// Account credited (balance increases).
    pub credit: Account,
    /// Amount, CNY, > 0, at most 12 decimal places.
    pub amount: Decimal,
    /// Why.
    pub kind: TransferKind,
    /// The closed period this transfer corrects (issue 17): set on a late fact's transfers (an
    /// SLA credit for a failure in closed time, the correction for a late end) and on an
    /// adjustment whose reference is `period:<id>`. Posted in the open period all the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restates: Option<PeriodId>,
}

/// A charge that was due but could not be collected because the buyer's
/// balance was exhausted (issue 3: recorded visibly, never taken).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shortfall {
    /// The lease.
    pub lease: LeaseId,
    /// Its buyer.
    pub buyer: AccountId,
    /// Uncollected amount, CNY, > 0.
    pub amount: Decimal,
}

/// The result of applying one input.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Applied {
    /// Transfers posted, in order (empty for facts that move no money).
    pub transfers: Vec<Transfer>,
    /// Charges that could not be collected (insufficient funds); the leases
    /// concerned also appear in [`Ledger::leases_to_end`].
    pub shortfalls: Vec<Shortfall>,
    /// `true` when this was a repeat of an idempotency key: nothing was
    /// posted again and this is the first result.
    pub replayed: bool,
    /// The period a `ClosePeriod` input closed (issue 17).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed: Option<PeriodId>,
}

/// A lease that must end because its buyer cannot pay for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LeaseToEnd {
    /// The lease (send the engine `insufficient_funds` for it).
    pub lease: LeaseId,
    /// Its buyer.
    pub buyer: AccountId,
}

/// Totals of one lease so far (amounts CNY, full internal precision).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseTotals {
    /// The lease.
    pub lease: LeaseId,
    /// Seconds charged so far (the final billed seconds once ended).
    pub billed_seconds: u64,
    /// Amount due for those seconds.
    pub amount: Decimal,
    /// Amount collected from the buyer.
    pub collected: Decimal,
    /// Amount due but not collected (`amount - collected`).
    pub unpaid: Decimal,
    /// Platform fee on `collected`.
    pub fee: Decimal,
    /// SLA credit granted to the buyer for this lease.
    pub sla_credit: Decimal,
    /// Billing end and reason, once ended.
    pub end: Option<(i64, EndReason)>,
}

/// A lease its supplier never delivered (issue 15, docs/settlement.md "Delivery"):
/// recorded from [`Input::DeliveryFailed`] (or a `LeaseEnded` with reason
/// `not_delivered`), charged zero, listed on the supplier's payout statement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryFailure {
    /// The lease.
    pub lease: LeaseId,
    /// Its buyer.
    pub buyer: AccountId,
    /// The supplier that did not deliver it.
    pub supplier: AccountId,
    /// SKU id.
    pub sku: String,
    /// Region id.
    pub region: String,
    /// GPUs of the lease.
    pub gpus: u32,
    /// When it failed, ms since epoch.
    pub at_ms: i64,
}

impl DeliveryFailure {
    /// The record an [`Input::DeliveryFailed`] makes; `None` for any other input.
    pub fn of_input(input: &Input) -> Option<DeliveryFailure> {
        match input {
            Input::DeliveryFailed {
                lease,
                buyer,
                supplier,
                sku,
                region,
                gpus,
                at_ms,
                sla: _,
            } => Some(DeliveryFailure {
                lease: *lease,
                buyer: *buyer,
                supplier: *supplier,
                sku: sku.clone(),
                region: region.clone(),
                gpus: *gpus,
                at_ms: *at_ms,
            }),
            _ => None,
        }
    }
}

/// A run of charged seconds `[from, to)` after the first shortfall, with
/// the amount collected for them (attributed to the earliest seconds).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Segment {
    pub(crate) from: u64,
    pub(crate) to: u64,
    pub(crate) paid: Decimal,
}

/// The true end of a lease whose end fact came after its billing end was locked (issue 17,
/// docs/settlement.md "After close"). The lease keeps the seconds charged in locked time
/// for the service-time view (its `end` is one ms past the lock date, so closed reports do
/// not see it); the seconds after the true end among them were refunded by a correction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LateEnd {
    /// The true billing end, ms since epoch.
    pub(crate) end_ms: i64,
    /// The true billed seconds.
    pub(crate) billed_seconds: u64,
    /// Collected amount refunded by the correction, CNY.
    pub(crate) refund: Decimal,
    /// Fee returned with it, CNY.
    pub(crate) fee_refund: Decimal,
}

/// A lease being metered.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct LeaseState {
    pub(crate) buyer: AccountId,
    pub(crate) supplier: AccountId,
    pub(crate) sku: u32,
    pub(crate) region: u32,
    pub(crate) gpus: u32,
    pub(crate) price: Decimal,
    /// price × gpus, CNY per hour.
    pub(crate) hourly: Decimal,
    pub(crate) start_ms: i64,
    pub(crate) fee_rate: Decimal,
    pub(crate) min_secs: u64,
    pub(crate) end: Option<(i64, EndReason)>,
    /// Seconds [0, posted) are charged.
    pub(crate) posted: u64,
    /// Seconds [0, paid_prefix) are fully collected.
    pub(crate) paid_prefix: u64,
    /// Charged seconds from paid_prefix on, with partial collection.
    pub(crate) tail: Vec<Segment>,
    /// Total collected (= paid_before(posted)).
    pub(crate) paid_total: Decimal,
    /// Cache of `cumulative_charge(hourly, posted)`, CNY.
    pub(crate) due_total: Decimal,
    /// Cache of `fee_on(paid_total)`, CNY.
    pub(crate) fee_total: Decimal,
    pub(crate) sla_credit: Decimal,
    pub(crate) failover_applied: bool,
    /// Set when the end fact came after the billing end was locked (issue 17).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) late_end: Option<LateEnd>,
    /// The lease's SLA terms from its start (issue 26); `None` = the configuration's rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) sla: Option<crate::sla::SlaTerms>,
    /// How its failover credit was computed (issue 26), once `Failover` applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) failover: Option<crate::credits::FailoverCredit>,
}

impl LeaseState {
    /// The true billing end and reason, once ended (`end` is moved past the lock date for a
    /// late end).
    pub(crate) fn true_end(&self) -> Option<(i64, EndReason)> {
        let (end_ms, reason) = self.end?;
        Some((self.late_end.as_ref().map_or(end_ms, |l| l.end_ms), reason))
    }

    /// Collected from the buyer net of a late end's correction, CNY.
    pub(crate) fn net_paid(&self) -> Decimal {
        self.paid_total - self.late_end.as_ref().map_or(Decimal::ZERO, |l| l.refund)
    }

    pub(crate) fn due_before(&self, s: u64) -> Decimal {
        cumulative_charge(self.hourly, s.min(self.posted))
    }

    /// Collected for seconds [0, s).
    pub(crate) fn paid_before(&self, s: u64) -> Decimal {
        let s = s.min(self.posted);
        let mut p = cumulative_charge(self.hourly, s.min(self.paid_prefix));
        for seg in &self.tail {
            if s <= seg.from {
                break;
            }
            if s >= seg.to {
                p += seg.paid;
            } else {
                let due =
                    cumulative_charge(self.hourly, s) - cumulative_charge(self.hourly, seg.from);
                p += seg.paid.min(due);
            }
        }
        p
    }

    /// Whether the most recent charge of this lease was not fully collected.
    pub(crate) fn last_charge_short(&self) -> bool {
        self.tail.last().is_some_and(|seg| {
            let due =
                cumulative_charge(self.hourly, seg.to) - cumulative_charge(self.hourly, seg.from);
            seg.to == self.posted && seg.paid < due
        })
    }

    /// Cumulative fee on a cumulative collected amount.
    pub(crate) fn fee_on(&self, collected: Decimal) -> Decimal {
        quantize(collected * self.fee_rate)
    }

    /// Number of charged seconds attributed to instants before `t_ms`
    /// (seconds that start before `t`). For an ended lease, seconds added by
    /// a minimum billed time belong with its last real second.
    pub(crate) fn secs_before(&self, t_ms: i64) -> u64 {
        if t_ms <= self.start_ms {
            return 0;
        }
        let c = seconds_started_before(self.start_ms, t_ms);
        match self.end {
            Some((end_ms, _)) => {
                let actual = billed_seconds(end_ms - self.start_ms);
                if c >= actual {
                    self.posted
                } else {
                    c.min(self.posted)
                }
            }
            None => c.min(self.posted),
        }
    }

    /// Instant through which seconds are posted, ms since epoch.
    pub(crate) fn accrued_to_ms(&self) -> i64 {
        let ms = i64::try_from(self.posted.saturating_mul(1000)).unwrap_or(i64::MAX);
        self.start_ms.saturating_add(ms)
    }

    /// Adds charged seconds [posted, n) with `paid` of `due` collected.
    fn push_seconds(&mut self, n: u64, paid: Decimal, due: Decimal) {
        let full = paid == due;
        if self.tail.is_empty() && full {
            self.paid_prefix = n;
        } else {
            let hourly = self.hourly;
            let merged = match self.tail.last_mut() {
                Some(last) if full && last.to == self.posted => {
                    let last_due =
                        cumulative_charge(hourly, last.to) - cumulative_charge(hourly, last.from);
                    if last.paid == last_due {
                        last.to = n;
                        last.paid += paid;
                        true
                    } else {
                        false
                    }
                }
                _ => false,
            };
            if !merged {
                self.tail.push(Segment {
                    from: self.posted,
                    to: n,
                    paid,
                });
            }
        }
        self.posted = n;
        self.paid_total += paid;
    }

    /// Removes charged seconds [n, posted); returns the collected amount removed.
    fn truncate_seconds(&mut self, n: u64) -> Decimal {
        let new_paid = self.paid_before(n);
        let removed = self.paid_total - new_paid;
        self.paid_prefix = self.paid_prefix.min(n);
        self.tail.retain(|seg| seg.from < n);
        let hourly = self.hourly;
        if let Some(last) = self.tail.last_mut()
            && last.to > n
        {
            let due = cumulative_charge(hourly, n) - cumulative_charge(hourly, last.from);
            last.paid = last.paid.min(due);
            last.to = n;
        }
        self.posted = n;
        self.paid_total = new_paid;
        removed
    }
}

/// How an end fact applies, given the lock date (issue 17, docs/settlement.md "After close").
pub(crate) struct EndPlan {
    /// The lease's true billed seconds (with a minimum where one applies).
    billed: u64,
    /// Charged seconds that start in locked time: never removed from the lease.
    locked: u64,
    /// The end the service-time view sees: the true end, or one ms past the lock date when
    /// the true end is in locked time (so no closed report sees it).
    view_end_ms: i64,
}

impl EndPlan {
    fn of(st: &LeaseState, end_ms: i64, reason: EndReason, lock: Option<i64>) -> EndPlan {
        let actual = billed_seconds(end_ms - st.start_ms);
        let locked = match lock {
            Some(lock) if st.start_ms < lock => {
                seconds_started_before(st.start_ms, lock).min(st.posted)
            }
            _ => 0,
        };
        // A minimum's seconds belong with the last real second: none when it is locked.
        let billed = if reason == EndReason::NotDelivered {
            0
        } else if reason.buyer_caused() && (locked == 0 || actual > locked) {
            actual.max(st.min_secs)
        } else {
            actual
        };
        let view_end_ms = match lock {
            Some(lock) if locked > 0 && end_ms <= lock => lock + 1,
            _ => end_ms,
        };
        EndPlan {
            billed,
            locked,
            view_end_ms,
        }
    }
}

/// Listed capacity for utilisation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Listing {
    pub(crate) sku: u32,
    pub(crate) region: u32,
    pub(crate) gpus: u32,
    pub(crate) from_ms: i64,
    pub(crate) to_ms: i64,
}

/// Balances, transfer ids and the retained journal.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Books {
    pub(crate) balances: BTreeMap<Account, Decimal>,
    next_id: u64,
    /// Deposits, payouts, adjustments and SLA transfers (not accrual).
    pub(crate) journal: Vec<Transfer>,
    pub(crate) journal_by_account: BTreeMap<Account, Vec<usize>>,
}

impl Books {
    fn balance(&self, a: Account) -> Decimal {
        self.balances.get(&a).copied().unwrap_or(Decimal::ZERO)
    }

    fn post(
        &mut self,
        out: &mut Vec<Transfer>,
        at_ms: i64,
        debit: Account,
        credit: Account,
        amount: Decimal,
        kind: TransferKind,
    ) {
        self.post_ref(out, at_ms, debit, credit, amount, kind, None);
    }

    /// Posts `amount` (nothing if not > 0) from `debit` to `credit`, with the closed period it
    /// restates, if any.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn post_ref(
        &mut self,
        out: &mut Vec<Transfer>,
        at_ms: i64,
        debit: Account,
        credit: Account,
        amount: Decimal,
        kind: TransferKind,
        restates: Option<PeriodId>,
    ) {
        if amount <= Decimal::ZERO {
            return;
        }
        self.next_id += 1;
        *self.balances.entry(debit).or_insert(Decimal::ZERO) -= amount;
        *self.balances.entry(credit).or_insert(Decimal::ZERO) += amount;
        let t = Transfer {
            id: TransferId(self.next_id),
            at_ms,
            debit,
            credit,
            amount,
            kind,
            restates,
        };
        let keep = !matches!(
            t.kind,
            TransferKind::Charge { .. }
                | TransferKind::Fee { .. }
                | TransferKind::Refund { .. }
                | TransferKind::FeeRefund { .. }
        );
        if keep {
            let idx = self.journal.len();
            self.journal_by_account.entry(debit).or_default().push(idx);
            self.journal_by_account.entry(credit).or_default().push(idx);
            self.journal.push(t.clone());
        }
        out.push(t);
    }
}

/// The fields of a legacy `Input::Adjustment`.
struct LegacyAdjustment<'a> {
    key: &'a str,
    debit: Account,
    credit: Account,
    amount: Decimal,
    memo: &'a str,
}

/// The settlement ledger. Pure: no IO, no clock; time comes with each input.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Ledger {
    pub(crate) config: Config,
    clock_ms: Option<i64>,
    pub(crate) books: Books,
    pub(crate) leases: BTreeMap<LeaseId, LeaseState>,
    pub(crate) active: BTreeSet<LeaseId>,
    active_by_buyer: BTreeMap<AccountId, BTreeSet<LeaseId>>,
    pub(crate) leases_by_buyer: BTreeMap<AccountId, Vec<LeaseId>>,
    pub(crate) leases_by_supplier: BTreeMap<AccountId, Vec<LeaseId>>,
    idempotency: BTreeMap<String, (Input, Applied)>,
    pub(crate) listings: Vec<Listing>,
    pub(crate) names: Vec<String>,
    name_ids: BTreeMap<String, u32>,
    /// Leases never delivered, by lease (issue 15; absent from snapshots made before it).
    #[serde(default)]
    pub(crate) delivery_failures: BTreeMap<LeaseId, DeliveryFailure>,
    /// Keys of `delivery_failures` by buyer, in recording order.
    #[serde(default)]
    pub(crate) failures_by_buyer: BTreeMap<AccountId, Vec<LeaseId>>,
    /// Keys of `delivery_failures` by supplier, in recording order.
    #[serde(default)]
    pub(crate) failures_by_supplier: BTreeMap<AccountId, Vec<LeaseId>>,
    /// Closed periods, invoice and statement counters (issue 17; absent before it).
    #[serde(default, skip_serializing_if = "Closes::is_empty")]
    pub(crate) closes: Closes,
    /// SLA credits paid out as cash, by buyer (issue 17; absent before it).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) sla_cash_outs: BTreeMap<AccountId, Decimal>,
    /// Leases never delivered whose terms grant a non-delivery credit (issue 26; absent
    /// before it).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) undelivered_sla: BTreeMap<LeaseId, crate::credits::UndeliveredCredit>,
    /// Monthly availability credits posted at close, by the id of their `SlaCredit`
    /// transfer (issue 26; absent before it).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) availability_credits: BTreeMap<TransferId, crate::credits::AvailabilityCredit>,
}

pub(crate) fn check_time(ms: i64) -> Result<(), SettlementError> {
    if (MIN_TIME_MS..=MAX_TIME_MS).contains(&ms) {
        Ok(())
    } else {
        Err(SettlementError::TimeOutOfRange { ms })
    }
}

pub(crate) fn check_amount(amount: Decimal) -> Result<(), SettlementError> {
    if amount <= Decimal::ZERO {
        return Err(SettlementError::NonPositiveAmount { amount });
    }
    if amount > MAX_INPUT_AMOUNT || amount.scale() > INTERNAL_DP {
        return Err(SettlementError::AmountOutOfRange { amount });
    }
    Ok(())
}

impl Ledger {
    /// An empty ledger with `config`.
    ///
    /// # Errors
    /// [`SettlementError::InvalidConfig`] if `config` fails [`Config::validate`].
    pub fn new(config: Config) -> Result<Self, SettlementError> {
        config.validate()?;
        Ok(Ledger {
            config,
            clock_ms: None,
            books: Books::default(),
            leases: BTreeMap::new(),
            active: BTreeSet::new(),
            active_by_buyer: BTreeMap::new(),
            leases_by_buyer: BTreeMap::new(),
            leases_by_supplier: BTreeMap::new(),
            idempotency: BTreeMap::new(),
            listings: Vec::new(),
            names: Vec::new(),
            name_ids: BTreeMap::new(),
            delivery_failures: BTreeMap::new(),
            failures_by_buyer: BTreeMap::new(),
            failures_by_supplier: BTreeMap::new(),
            closes: Closes::default(),
            sla_cash_outs: BTreeMap::new(),
            undelivered_sla: BTreeMap::new(),
            availability_credits: BTreeMap::new(),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Latest `at_ms` applied (ms since epoch), if any.
    pub fn clock_ms(&self) -> Option<i64> {
        self.clock_ms
    }

    /// Applies one input at `at_ms` (ms since epoch; non-decreasing across
    /// calls) and returns the transfers posted. On error nothing changes.
    ///
    /// A deposit, payout or adjustment whose idempotency key was seen before
    /// returns the first result with `replayed = true` if the content is the
    /// same (whatever `at_ms`), and [`SettlementError::IdempotencyConflict`]
    /// if it differs. A `DeliveryFailed` for a lease already recorded as not
    /// delivered returns an empty result with `replayed = true` if it is the
    /// same fact, and [`SettlementError::DeliveryFailureConflict`] otherwise.
    ///
    /// # Errors
    /// Clock going backwards, times out of range, invalid amounts or leases,
    /// unknown or duplicate leases, payouts beyond the payable, buyer debits
    /// beyond the balance, a failed delivery for a lease that was ready or a
    /// start for one that failed, a close out of order or before its end, a lease start
    /// in closed time, an adjustment beyond its kind's limit; see [`SettlementError`].
    pub fn apply(&mut self, at_ms: i64, input: &Input) -> Result<Applied, SettlementError> {
        if let Some(repeat) = self.repeat_of(input) {
            return repeat;
        }
        check_time(at_ms)?;
        if let Some(clock_ms) = self.clock_ms
            && at_ms < clock_ms
        {
            return Err(SettlementError::ClockWentBackwards { at_ms, clock_ms });
        }
        let mut out = Applied::default();
        self.apply_input(at_ms, input, &mut out)?;
        self.clock_ms = Some(at_ms);
        if let Some(key) = input.idempotency_key() {
            self.idempotency
                .insert(key.to_string(), (input.clone(), out.clone()));
        }
        Ok(out)
    }

    /// One input's effect; on error nothing has changed.
    fn apply_input(
        &mut self,
        at_ms: i64,
        input: &Input,
        out: &mut Applied,
    ) -> Result<(), SettlementError> {
        match input {
            Input::LeaseStarted(start) => self.start_lease(start)?,
            Input::LeaseEnded {
                lease,
                end_ms,
                reason,
            } => self.end_lease(at_ms, *lease, *end_ms, *reason, out)?,
            Input::Failover {
                lease,
                replacement_start_ms,
                replacement_price,
            } => self.failover(
                at_ms,
                *lease,
                *replacement_start_ms,
                replacement_price.as_ref(),
                out,
            )?,
            Input::Deposit { key, buyer, amount } => {
                check_amount(*amount)?;
                self.books.post(
                    &mut out.transfers,
                    at_ms,
                    Account::ExternalCash,
                    Account::Buyer(*buyer),
                    *amount,
                    TransferKind::Deposit { key: key.clone() },
                );
            }
            Input::Payout {
                key,
                supplier,
                amount,
            } => self.payout(at_ms, key, *supplier, *amount, out)?,
            Input::Adjustment {
                key,
                debit,
                credit,
                amount,
                memo,
            } => {
                let a = LegacyAdjustment {
                    key,
                    debit: *debit,
                    credit: *credit,
                    amount: *amount,
                    memo,
                };
                self.legacy_adjustment(at_ms, &a, out)?;
            }
            Input::Adjust(a) => self.adjust(at_ms, a, out)?,
            Input::ClosePeriod {
                key,
                from_ms,
                to_ms,
            } => {
                let id = self.close_period(at_ms, key, *from_ms, *to_ms)?;
                out.closed = Some(id);
                self.availability_credits_at_close(at_ms, id, *from_ms, *to_ms, out);
            }
            Input::DeliveryFailed { sla, .. } => {
                if let Some(failure) = DeliveryFailure::of_input(input) {
                    if let Some(sla) = sla {
                        crate::credits::check_undelivered(failure.lease, sla)?;
                    }
                    let (lease, buyer, supplier, gpus) =
                        (failure.lease, failure.buyer, failure.supplier, failure.gpus);
                    self.record_delivery_failure(failure)?;
                    if let Some(sla) = sla
                        && sla.terms.non_delivery_credit
                    {
                        self.undelivered_sla.insert(
                            lease,
                            crate::credits::UndeliveredCredit {
                                buyer,
                                supplier,
                                gpus,
                                sla: *sla,
                                failover: None,
                            },
                        );
                    }
                }
            }
            Input::Accrue { now_ms } => {
                check_time(*now_ms)?;
                if *now_ms > at_ms {
                    return Err(SettlementError::AccrueInFuture {
                        now_ms: *now_ms,
                        at_ms,
                    });
                }
                self.accrue(at_ms, *now_ms, out);
            }
            Input::ListedCapacity {
                supplier: _,
                sku,
                region,
                gpus,
                from_ms,
                to_ms,
            } => self.list_capacity(sku, region, *gpus, *from_ms, *to_ms)?,
        }
        Ok(())
    }

    fn payout(
        &mut self,
        at_ms: i64,
        key: &str,
        supplier: AccountId,
        amount: Decimal,
        out: &mut Applied,
    ) -> Result<(), SettlementError> {
        check_amount(amount)?;
        let account = Account::Supplier(supplier);
        let balance = self.books.balance(account);
        if balance < amount {
            return Err(SettlementError::InsufficientFunds {
                account,
                balance,
                requested: amount,
            });
        }
        self.books.post(
            &mut out.transfers,
            at_ms,
            account,
            Account::ExternalCash,
            amount,
            TransferKind::Payout {
                key: key.to_string(),
            },
        );
        Ok(())
    }

    /// The untyped adjustment of issue 3 (kept so old journals and snapshots replay).
    fn legacy_adjustment(
        &mut self,
        at_ms: i64,
        a: &LegacyAdjustment<'_>,
        out: &mut Applied,
    ) -> Result<(), SettlementError> {
        check_amount(a.amount)?;
        for acc in [a.debit, a.credit] {
            if acc == Account::SlaCredits {
                return Err(SettlementError::InvalidAccount {
                    account: acc,
                    reason: "the SLA credit clearing account is posted only by failover facts",
                });
            }
        }
        if a.debit == a.credit {
            return Err(SettlementError::InvalidAccount {
                account: a.debit,
                reason: "an adjustment needs two different accounts",
            });
        }
        if let Account::Buyer(_) = a.debit {
            let balance = self.books.balance(a.debit);
            if balance < a.amount {
                return Err(SettlementError::InsufficientFunds {
                    account: a.debit,
                    balance,
                    requested: a.amount,
                });
            }
        }
        self.books.post(
            &mut out.transfers,
            at_ms,
            a.debit,
            a.credit,
            a.amount,
            TransferKind::Adjustment {
                key: a.key.to_string(),
                memo: a.memo.to_string(),
            },
        );
        Ok(())
    }

    /// Records listed capacity; the part before the lock date is dropped (issue 17: the
    /// utilisation of a closed period is final).
    fn list_capacity(
        &mut self,
        sku: &str,
        region: &str,
        gpus: u32,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<(), SettlementError> {
        check_time(from_ms)?;
        check_time(to_ms)?;
        if from_ms > to_ms {
            return Err(SettlementError::InvalidPeriod { from_ms, to_ms });
        }
        let from_ms = match self.closed_through_ms() {
            Some(lock) if to_ms <= lock => return Ok(()),
            Some(lock) => from_ms.max(lock),
            None => from_ms,
        };
        let sku = self.intern(sku);
        let region = self.intern(region);
        self.listings.push(Listing {
            sku,
            region,
            gpus,
            from_ms,
            to_ms,
        });
        Ok(())
    }

    /// The input first applied under idempotency `key` (a deposit, payout, adjustment or
    /// close), or `None` for a key never applied. Reports use it to tell a typed adjustment's
    /// kind from its transfer (the reconciliation's refunds and SLA cash-outs).
    pub(crate) fn input_of_key(&self, key: &str) -> Option<&Input> {
        self.idempotency.get(key).map(|(input, _)| input)
    }

    /// The answer to a repeated input, whatever its time: a deposit, payout or adjustment
    /// whose key was seen (the first result, `replayed`, or a conflict), or a
    /// `DeliveryFailed` for a lease already recorded as not delivered (an empty `replayed`
    /// result, or a conflict). `None` for an input seen for the first time.
    fn repeat_of(&self, input: &Input) -> Option<Result<Applied, SettlementError>> {
        if let Some(key) = input.idempotency_key() {
            let (first, applied) = self.idempotency.get(key)?;
            if first == input {
                let mut again = applied.clone();
                again.replayed = true;
                return Some(Ok(again));
            }
            return Some(Err(SettlementError::IdempotencyConflict {
                key: key.to_string(),
            }));
        }
        let failure = DeliveryFailure::of_input(input)?;
        if self.leases.contains_key(&failure.lease) {
            return None; // a ready lease: refused by `record_delivery_failure`
        }
        let mut first = self.delivery_failures.get(&failure.lease)?.clone();
        if let Some(fact_at_ms) = self.closes.moved_failure(first.lease) {
            first.at_ms = fact_at_ms; // listed at the lock date; compare with the fact itself
        }
        if first == failure {
            Some(Ok(Applied {
                replayed: true,
                ..Applied::default()
            }))
        } else {
            Some(Err(SettlementError::DeliveryFailureConflict(failure.lease)))
        }
    }

    /// Records a lease never delivered (no transfer). Refused for a lease the ledger started
    /// (it was ready), for a time out of range and for an impossible GPU count.
    fn record_delivery_failure(&mut self, f: DeliveryFailure) -> Result<(), SettlementError> {
        if self.leases.contains_key(&f.lease) {
            return Err(SettlementError::LeaseWasReady(f.lease));
        }
        if self.delivery_failures.contains_key(&f.lease) {
            // `repeat_of` answers every repeat first; kept so no path overwrites a record.
            return Err(SettlementError::DeliveryFailureConflict(f.lease));
        }
        check_time(f.at_ms)?;
        if f.gpus == 0 || f.gpus > 100_000 {
            return Err(SettlementError::InvalidLease {
                lease: f.lease,
                reason: "gpus must be 1..=100000",
            });
        }
        self.insert_delivery_failure(f);
        Ok(())
    }

    /// Records a failed delivery; one whose time lies in locked time is listed at the lock
    /// date (issue 17), and its own time kept in `closes`.
    fn insert_delivery_failure(&mut self, mut f: DeliveryFailure) {
        if let Some(lock) = self.closed_through_ms()
            && f.at_ms < lock
        {
            self.closes.record_moved_failure(f.lease, f.at_ms);
            f.at_ms = lock;
        }
        self.failures_by_buyer
            .entry(f.buyer)
            .or_default()
            .push(f.lease);
        self.failures_by_supplier
            .entry(f.supplier)
            .or_default()
            .push(f.lease);
        self.delivery_failures.insert(f.lease, f);
    }

    fn intern(&mut self, name: &str) -> u32 {
        if let Some(id) = self.name_ids.get(name) {
            return *id;
        }
        let id = u32::try_from(self.names.len()).unwrap_or(u32::MAX);
        self.names.push(name.to_string());
        self.name_ids.insert(name.to_string(), id);
        id
    }

    pub(crate) fn name(&self, id: u32) -> &str {
        self.names
            .get(id as usize)
            .map(String::as_str)
            .unwrap_or("")
    }

    fn start_lease(&mut self, s: &LeaseStart) -> Result<(), SettlementError> {
        if self.leases.contains_key(&s.lease) {
            return Err(SettlementError::DuplicateLease(s.lease));
        }
        if self.delivery_failures.contains_key(&s.lease) {
            return Err(SettlementError::DeliveryAlreadyFailed(s.lease));
        }
        check_time(s.start_ms)?;
        if let Some(closed_through_ms) = self.closed_through_ms()
            && s.start_ms < closed_through_ms
        {
            return Err(SettlementError::PeriodClosed {
                what: "a lease start",
                at_ms: s.start_ms,
                closed_through_ms,
            });
        }
        if s.gpus == 0 || s.gpus > 100_000 {
            return Err(SettlementError::InvalidLease {
                lease: s.lease,
                reason: "gpus must be 1..=100000",
            });
        }
        if s.price_per_gpu_hour < Decimal::ZERO
            || s.price_per_gpu_hour > Decimal::from(1_000_000)
            || s.price_per_gpu_hour.scale() > 8
        {
            return Err(SettlementError::InvalidLease {
                lease: s.lease,
                reason: "price per GPU-hour must be in [0, 1000000] CNY with at most 8 decimals",
            });
        }
        if let Some(terms) = &s.sla {
            terms
                .validate()
                .map_err(|error| SettlementError::InvalidSlaTerms {
                    lease: s.lease,
                    error,
                })?;
        }
        let min_secs = self
            .config
            .min_billed_seconds_by_sku
            .get(&s.sku)
            .copied()
            .unwrap_or(0);
        let sku = self.intern(&s.sku);
        let region = self.intern(&s.region);
        let state = LeaseState {
            buyer: s.buyer,
            supplier: s.supplier,
            sku,
            region,
            gpus: s.gpus,
            price: s.price_per_gpu_hour,
            hourly: s.price_per_gpu_hour * Decimal::from(s.gpus),
            start_ms: s.start_ms,
            fee_rate: self.config.fee_rate,
            min_secs,
            end: None,
            posted: 0,
            paid_prefix: 0,
            tail: Vec::new(),
            paid_total: Decimal::ZERO,
            due_total: Decimal::ZERO,
            fee_total: Decimal::ZERO,
            sla_credit: Decimal::ZERO,
            failover_applied: false,
            late_end: None,
            sla: s.sla,
            failover: None,
        };
        self.leases.insert(s.lease, state);
        self.active.insert(s.lease);
        self.active_by_buyer
            .entry(s.buyer)
            .or_default()
            .insert(s.lease);
        self.leases_by_buyer
            .entry(s.buyer)
            .or_default()
            .push(s.lease);
        self.leases_by_supplier
            .entry(s.supplier)
            .or_default()
            .push(s.lease);
        Ok(())
    }

    /// Charges `lease` for seconds [posted, n), collecting what the buyer has.
    fn extend(
        books: &mut Books,
        id: LeaseId,
        st: &mut LeaseState,
        n: u64,
        at_ms: i64,
        out: &mut Applied,
    ) {
        if n <= st.posted {
            return;
        }
        let due_n = cumulative_charge(st.hourly, n);
        let due = due_n - st.due_total;
        let balance = books.balance(Account::Buyer(st.buyer)).max(Decimal::ZERO);
        let paid = due.min(balance);
        st.push_seconds(n, paid, due);
        st.due_total = due_n;
        let fee_after = st.fee_on(st.paid_total);
        let fee = fee_after - st.fee_total;
        st.fee_total = fee_after;
        let buyer = Account::Buyer(st.buyer);
        let supplier = Account::Supplier(st.supplier);
        books.post(
            &mut out.transfers,
            at_ms,
            buyer,
            supplier,
            paid,
            TransferKind::Charge { lease: id },
        );
        books.post(
            &mut out.transfers,
            at_ms,
            supplier,
            Account::PlatformFee,
            fee,
            TransferKind::Fee { lease: id },
        );
        if paid < due {
            out.shortfalls.push(Shortfall {
                lease: id,
                buyer: st.buyer,
                amount: due - paid,
            });
        }
    }

    fn accrue(&mut self, at_ms: i64, now_ms: i64, out: &mut Applied) {
        for id in &self.active {
            if let Some(st) = self.leases.get_mut(id) {
                let n = seconds_started_before(st.start_ms, now_ms);
                Self::extend(&mut self.books, *id, st, n, at_ms, out);
            }
        }
    }

    fn end_lease(
        &mut self,
        at_ms: i64,
        id: LeaseId,
        end_ms: i64,
        reason: EndReason,
        out: &mut Applied,
    ) -> Result<(), SettlementError> {
        let lock = self.closed_through_ms();
        let st = self
            .leases
            .get_mut(&id)
            .ok_or(SettlementError::UnknownLease(id))?;
        if st.end.is_some() {
            return Err(SettlementError::LeaseAlreadyEnded(id));
        }
        check_time(end_ms)?;
        if end_ms < st.start_ms {
            return Err(SettlementError::EndBeforeStart {
                lease: id,
                start_ms: st.start_ms,
                end_ms,
            });
        }
        let plan = EndPlan::of(st, end_ms, reason, lock);
        st.end = Some((plan.view_end_ms, reason));
        let n = plan.billed.max(plan.locked);
        if n >= st.posted {
            Self::extend(&mut self.books, id, st, n, at_ms, out);
        } else {
            Self::refund_after(&mut self.books, id, st, n, at_ms, out);
        }
        if let Some(lock) = lock
            && (plan.billed < plan.locked || plan.view_end_ms != end_ms)
        {
            let restates = self.closes.restated_by(end_ms.min(lock - 1));
            if let Some(st) = self.leases.get_mut(&id) {
                Self::correct_late_end(
                    &mut self.books,
                    id,
                    st,
                    &plan,
                    (end_ms, lock),
                    at_ms,
                    restates,
                    out,
                );
            }
        }
        let Some(st) = self.leases.get(&id) else {
            return Ok(());
        };
        let (buyer, supplier, sku, region, gpus) =
            (st.buyer, st.supplier, st.sku, st.region, st.gpus);
        if reason == EndReason::NotDelivered {
            let failure = DeliveryFailure {
                lease: id,
                buyer,
                supplier,
                sku: self.name(sku).to_string(),
                region: self.name(region).to_string(),
                gpus,
                at_ms: end_ms,
            };
            self.insert_delivery_failure(failure);
        }
        self.active.remove(&id);
        if let Some(set) = self.active_by_buyer.get_mut(&buyer) {
            set.remove(&id);
            if set.is_empty() {
                self.active_by_buyer.remove(&buyer);
            }
        }
        Ok(())
    }

    /// Removes charged seconds [n, posted) and refunds what was collected for them, with the
    /// fee on it.
    fn refund_after(
        books: &mut Books,
        id: LeaseId,
        st: &mut LeaseState,
        n: u64,
        at_ms: i64,
        out: &mut Applied,
    ) {
        let refund = st.truncate_seconds(n);
        st.due_total = cumulative_charge(st.hourly, n);
        let fee_after = st.fee_on(st.paid_total);
        let fee_refund = st.fee_total - fee_after;
        st.fee_total = fee_after;
        let buyer = Account::Buyer(st.buyer);
        let supplier = Account::Supplier(st.supplier);
        books.post(
            &mut out.transfers,
            at_ms,
            supplier,
            buyer,
            refund,
            TransferKind::Refund { lease: id },
        );
        books.post(
            &mut out.transfers,
            at_ms,
            Account::PlatformFee,
            supplier,
            fee_refund,
            TransferKind::FeeRefund { lease: id },
        );
    }

    /// A late end (docs/settlement.md "After close"): records the true end, and refunds the
    /// seconds [billed, locked) charged in locked time by a correction posted now (two
    /// retained `adjustment` transfers that restate the closed period).
    #[allow(clippy::too_many_arguments)]
    fn correct_late_end(
        books: &mut Books,
        id: LeaseId,
        st: &mut LeaseState,
        plan: &EndPlan,
        (end_ms, lock): (i64, i64),
        at_ms: i64,
        restates: Option<PeriodId>,
        out: &mut Applied,
    ) {
        let (paid_locked, paid_billed) = (st.paid_before(plan.locked), st.paid_before(plan.billed));
        let refund = paid_locked - paid_billed;
        let fee_refund = st.fee_on(paid_locked) - st.fee_on(paid_billed);
        st.late_end = Some(LateEnd {
            end_ms,
            billed_seconds: plan.billed,
            refund,
            fee_refund,
        });
        let reference = restates.map_or_else(String::new, |p| format!(" [period:{p}]"));
        let reason = st.end.map_or("", |(_, r)| r.as_str());
        let secs = plan.locked.saturating_sub(plan.billed);
        let memo = format!(
            "correction: lease {id} ended {reason} at {end_ms} ms in closed time; {secs} s charged before {lock} ms refunded{reference}"
        );
        let supplier = Account::Supplier(st.supplier);
        let kind = TransferKind::Adjustment {
            key: format!("late-end:lease:{id}"),
            memo,
        };
        books.post_ref(
            &mut out.transfers,
            at_ms,
            supplier,
            Account::Buyer(st.buyer),
            refund,
            kind,
            restates,
        );
        let kind = TransferKind::Adjustment {
            key: format!("late-end-fee:lease:{id}"),
            memo: format!(
                "correction: fee on the late-end refund of lease {id} returned{reference}"
            ),
        };
        books.post_ref(
            &mut out.transfers,
            at_ms,
            Account::PlatformFee,
            supplier,
            fee_refund,
            kind,
            restates,
        );
    }

    /// Balance of `account` in CNY (`credits - debits`, full precision);
    /// zero for an account never used.
    pub fn balance(&self, account: Account) -> Decimal {
        self.books.balance(account)
    }

    /// All balances by account (CNY), in account order.
    pub fn balances(&self) -> &BTreeMap<Account, Decimal> {
        &self.books.balances
    }

    /// Sum of all balances, CNY. Exactly zero after every input (the
    /// double-entry invariant).
    pub fn sum_of_balances(&self) -> Decimal {
        self.books.balances.values().copied().sum()
    }

    /// Checks the ledger invariants: Σ balances = 0, no buyer below zero,
    /// the SLA clearing account at zero, each lease's collected amount
    /// equal to its recorded charged seconds, and no lease recorded as not
    /// delivered charged or running.
    ///
    /// Cost: O(accounts + leases + failed deliveries); meant for tests and audits, not every input.
    ///
    /// # Errors
    /// [`SettlementError::InvariantViolated`] naming the first account that
    /// breaks an invariant (should never happen; used by tests).
    pub fn check_invariants(&self) -> Result<(), SettlementError> {
        let sum = self.sum_of_balances();
        if !sum.is_zero() {
            return Err(SettlementError::InvariantViolated {
                account: Account::ExternalCash,
                what: "sum of all balances is not zero",
                balance: sum,
            });
        }
        for (a, b) in &self.books.balances {
            let what = match a {
                Account::Buyer(_) if *b < Decimal::ZERO => "buyer balance below zero",
                Account::SlaCredits if !b.is_zero() => "SLA clearing account not at zero",
                _ => continue,
            };
            return Err(SettlementError::InvariantViolated {
                account: *a,
                what,
                balance: *b,
            });
        }
        for (id, f) in &self.delivery_failures {
            let charged = self.leases.get(id).is_some_and(|st| {
                let billed = st.late_end.as_ref().map_or(st.posted, |l| l.billed_seconds);
                billed != 0 || !matches!(st.end, Some((_, EndReason::NotDelivered)))
            });
            if charged || f.lease != *id {
                return Err(SettlementError::InvariantViolated {
                    account: Account::Supplier(f.supplier),
                    what: "a lease recorded as not delivered is charged or still running",
                    balance: Decimal::ZERO,
                });
            }
        }
        self.check_closes()?;
        for st in self.leases.values() {
            if st.paid_total != st.paid_before(st.posted)
                || st.paid_total > st.due_before(st.posted)
                || st.due_total != st.due_before(st.posted)
                || st.fee_total != st.fee_on(st.paid_total)
            {
                return Err(SettlementError::InvariantViolated {
                    account: Account::Buyer(st.buyer),
                    what: "lease collected amount disagrees with its charged seconds",
                    balance: st.paid_total,
                });
            }
        }
        Ok(())
    }

    /// The retained journal: deposits, payouts, adjustments and SLA
    /// transfers in posting order (accrual transfers are only returned by
    /// [`Ledger::apply`]).
    pub fn journal(&self) -> &[Transfer] {
        &self.books.journal
    }

    /// The failed delivery recorded for `lease` (from [`Input::DeliveryFailed`], or a
    /// `LeaseEnded` with reason `not_delivered`), or `None`.
    pub fn delivery_failure(&self, lease: LeaseId) -> Option<&DeliveryFailure> {
        self.delivery_failures.get(&lease)
    }

    /// Totals of one lease so far, or `None` for an unknown lease.
    pub fn lease_totals(&self, lease: LeaseId) -> Option<LeaseTotals> {
        let st = self.leases.get(&lease)?;
        // A late end (issue 17): the true billed seconds, net of the correction.
        let (billed_seconds, fee) = match &st.late_end {
            Some(l) => (l.billed_seconds, st.fee_total - l.fee_refund),
            None => (st.posted, st.fee_on(st.paid_total)),
        };
        let amount = cumulative_charge(st.hourly, billed_seconds);
        let collected = st.net_paid();
        Some(LeaseTotals {
            lease,
            billed_seconds,
            amount,
            collected,
            unpaid: amount - collected,
            fee,
            sla_credit: st.sla_credit,
            end: st.true_end(),
        })
    }

    /// Charges due through `now_ms` (ms since epoch) but not yet posted, for
    /// a buyer's active leases, CNY.
    fn pending(&self, buyer: AccountId, now_ms: i64) -> Decimal {
        let mut pending = Decimal::ZERO;
        if let Some(set) = self.active_by_buyer.get(&buyer) {
            for id in set {
                if let Some(st) = self.leases.get(id) {
                    let n = seconds_started_before(st.start_ms, now_ms);
                    if n > st.posted {
                        pending += cumulative_charge(st.hourly, n)
                            - cumulative_charge(st.hourly, st.posted);
                    }
                }
            }
        }
        pending
    }

    /// What a buyer can still spend at `now_ms` (ms since epoch), CNY:
    /// balance minus charges due through `now_ms` not yet accrued, never
    /// below zero. For the gateway's pre-trade check.
    pub fn available_balance(&self, buyer: AccountId, now_ms: i64) -> Decimal {
        (self.books.balance(Account::Buyer(buyer)) - self.pending(buyer, now_ms)).max(Decimal::ZERO)
    }

    /// Number of a buyer's active leases (O(log buyers)).
    pub fn active_lease_count(&self, buyer: AccountId) -> usize {
        self.active_by_buyer.get(&buyer).map_or(0, BTreeSet::len)
    }

    /// Burn rate of a buyer's active leases, CNY per hour (Σ price × GPUs).
    pub fn burn_rate_per_hour(&self, buyer: AccountId) -> Decimal {
        self.active_by_buyer
            .get(&buyer)
            .map(|set| {
                set.iter()
                    .filter_map(|id| self.leases.get(id))
                    .map(|st| st.hourly)
                    .sum()
            })
            .unwrap_or(Decimal::ZERO)
    }

    /// Runway of a buyer at `now_ms` (ms since epoch): whole seconds until
    /// [`Ledger::available_balance`] reaches zero at the burn rate of its
    /// active leases, `floor(available × 3600 / burn per hour)`. `None` when
    /// nothing burns (no active lease, or only free ones).
    pub fn runway_seconds(&self, buyer: AccountId, now_ms: i64) -> Option<u64> {
        let burn = self.burn_rate_per_hour(buyer);
        if burn <= Decimal::ZERO {
            return None;
        }
        let secs = (self.available_balance(buyer, now_ms) * Decimal::from(3600) / burn).floor();
        Some(secs.to_u64().unwrap_or(u64::MAX))
    }

    /// Leases that must end for insufficient funds at `now_ms` (ms since
    /// epoch), by lease id: every active lease of a buyer whose
    /// [`Ledger::available_balance`] is zero while it burns money, or one of
    /// whose leases' latest charge was not fully collected. (A buyer who tops
    /// up after a shortfall is no longer listed once the next charge is
    /// collected in full; the earlier unpaid amount stays recorded and is
    /// not collected from later deposits.) The gateway sends the engine
    /// `insufficient_funds` for each.
    pub fn leases_to_end(&self, now_ms: i64) -> Vec<LeaseToEnd> {
        let mut out = Vec::new();
        for (buyer, set) in &self.active_by_buyer {
            let burns = self.burn_rate_per_hour(*buyer) > Decimal::ZERO;
            let broke = burns && self.available_balance(*buyer, now_ms).is_zero();
            let unpaid = set
                .iter()
                .filter_map(|id| self.leases.get(id))
                .any(LeaseState::last_charge_short);
            if broke || unpaid {
                out.extend(set.iter().map(|lease| LeaseToEnd {
                    lease: *lease,
                    buyer: *buyer,
                }));
            }
        }
        out.sort();
        out
    }

    /// The instant (ms since epoch) by which the next `Accrue` must be
    /// applied so that no active lease has more than [`ACCRUAL_INTERVAL_MS`]
    /// of lease time uncharged: the earliest `accrued-to + 60 s` over the
    /// active leases. `None` when no lease is active. The gateway can set its
    /// accrual timer from this.
    pub fn accrual_due_ms(&self) -> Option<i64> {
        self.active
            .iter()
            .filter_map(|id| self.leases.get(id))
            .map(|st| st.accrued_to_ms().saturating_add(ACCRUAL_INTERVAL_MS))
            .min()
    }

    /// Ids of active (not yet ended) leases, ascending.
    pub fn active_leases(&self) -> impl Iterator<Item = LeaseId> + '_ {
        self.active.iter().copied()
    }
}
