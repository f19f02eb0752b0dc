//! Periods and close (issue 17; rules and worked examples in docs/settlement.md "Periods and
//! close").
//!
//! Layout: [`PeriodId`], [`ClosedPeriod`] (one per close, with the invoice numbers of its
//! buyers and the self-billing statement numbers of its suppliers), the ledger's close state
//! (`Closes`: closed periods, the two gapless counters, failed deliveries moved out of
//! closed time), and `Ledger`'s close, its read accessors and its invariant check.
//!
//! Rules:
//! * A period closes only once it has ended (`to_ms <= at_ms`), in order without gaps or
//!   overlaps (each close starts at the lock date, `closed_through_ms`, the end of the latest
//!   one), with every active lease accrued through its end. Idempotent by key (shared key
//!   space with deposits, payouts and adjustments).
//! * Every instant before the lock date is locked: the ledger moves or refuses any later fact
//!   that would change what a report over locked time shows (`ledger.rs`, `end_lease`,
//!   `failover`, `DeliveryFailed`, `ListedCapacity`, `LeaseStarted`), so reports of a closed
//!   period regenerate byte for byte.
//! * Pair assertion: the closed period's trial balance is zero at close (exact values), and
//!   [`Ledger::check_invariants`] recomputes it for every closed period and compares its
//!   total debits with the ones recorded at close.
//! * Invoice numbers (one per buyer with activity in the period) and statement numbers (one
//!   per supplier), in account-id order, from counters kept in the ledger: gapless across
//!   closes and across snapshot / replay.

use crate::error::SettlementError;
use crate::ids::{Account, AccountId, LeaseId};
use crate::ledger::{Ledger, MAX_TIME_MS, check_time};
use crate::reports::slice_nums;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// A closed period's id, assigned by the ledger in closing order (1, 2, 3, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PeriodId(pub u32);

impl fmt::Display for PeriodId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One closed period, as recorded at close.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClosedPeriod {
    /// Id, in closing (and time) order.
    pub id: PeriodId,
    /// The close's idempotency key.
    pub key: String,
    /// Start (inclusive), ms since epoch.
    pub from_ms: i64,
    /// End (exclusive), ms since epoch.
    pub to_ms: i64,
    /// When it was closed (the close's `at_ms`), ms since epoch.
    pub closed_at_ms: i64,
    /// Invoice number of each buyer with activity in the period, by buyer.
    pub invoices: BTreeMap<AccountId, u64>,
    /// Self-billing statement number of each supplier with activity in the period.
    pub statements: BTreeMap<AccountId, u64>,
    /// Total debits (= total credits) of the period's trial balance, exact CNY; checked again
    /// by [`Ledger::check_invariants`].
    pub debits: Decimal,
}

/// The ledger's close state (absent from snapshots made before issue 17).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Closes {
    /// Closed periods in id order (= time order: they are contiguous).
    periods: Vec<ClosedPeriod>,
    /// Last invoice number issued (0: none).
    last_invoice: u64,
    /// Last self-billing statement number issued (0: none).
    last_statement: u64,
    /// Failed deliveries whose fact time lay in locked time: the fact's own time, by lease
    /// (the record is listed at the lock date).
    moved_failures: BTreeMap<LeaseId, i64>,
}

impl Closes {
    pub(crate) fn is_empty(&self) -> bool {
        *self == Closes::default()
    }

    /// The lock date: end of the latest closed period, ms since epoch.
    pub(crate) fn closed_through_ms(&self) -> Option<i64> {
        self.periods.last().map(|p| p.to_ms)
    }

    /// The closed period containing `at_ms`, if any.
    pub(crate) fn at(&self, at_ms: i64) -> Option<&ClosedPeriod> {
        let i = self.periods.partition_point(|p| p.to_ms <= at_ms);
        self.periods.get(i).filter(|p| p.from_ms <= at_ms)
    }

    /// The closed period holding `at_ms`, or the first one if `at_ms` lies before it (in
    /// locked time that is no closed period); `None` at or after the lock date.
    pub(crate) fn restated_by(&self, at_ms: i64) -> Option<PeriodId> {
        let through = self.closed_through_ms()?;
        if at_ms >= through {
            return None;
        }
        self.at(at_ms).or(self.periods.first()).map(|p| p.id)
    }

    pub(crate) fn record_moved_failure(&mut self, lease: LeaseId, fact_at_ms: i64) {
        self.moved_failures.insert(lease, fact_at_ms);
    }

    pub(crate) fn moved_failure(&self, lease: LeaseId) -> Option<i64> {
        self.moved_failures.get(&lease).copied()
    }
}

fn invariant(what: &'static str, balance: Decimal) -> SettlementError {
    SettlementError::InvariantViolated {
        account: Account::ExternalCash,
        what,
        balance,
    }
}

impl Ledger {
    /// The lock date: end of the latest closed period (ms since epoch); every instant before
    /// it is locked. `None` before the first close.
    pub fn closed_through_ms(&self) -> Option<i64> {
        self.closes.closed_through_ms()
    }

    /// Every closed period, in id (= time) order.
    pub fn closed_periods(&self) -> &[ClosedPeriod] {
        &self.closes.periods
    }

    /// The closed period `id`, if any.
    pub fn closed_period(&self, id: PeriodId) -> Option<&ClosedPeriod> {
        let i = usize::try_from(id.0).ok()?.checked_sub(1)?;
        self.closes.periods.get(i)
    }

    /// The closed period containing `at_ms` (ms since epoch), if any.
    pub fn closed_period_at(&self, at_ms: i64) -> Option<&ClosedPeriod> {
        self.closes.at(at_ms)
    }

    /// The invoice number of `buyer` for closed period `period`, if it had activity there.
    pub fn invoice_number(&self, period: PeriodId, buyer: AccountId) -> Option<u64> {
        self.closed_period(period)?.invoices.get(&buyer).copied()
    }

    /// The self-billing statement number of `supplier` for closed period `period`, if it had
    /// activity there.
    pub fn statement_number(&self, period: PeriodId, supplier: AccountId) -> Option<u64> {
        self.closed_period(period)?
            .statements
            .get(&supplier)
            .copied()
    }

    /// For a failed delivery whose fact time lay in locked time (so it is listed at the lock
    /// date, [`crate::DeliveryFailure::at_ms`]), the fact's own time, ms since epoch.
    pub fn delivery_failure_fact_ms(&self, lease: LeaseId) -> Option<i64> {
        self.closes.moved_failure(lease)
    }

    /// Closes [`from_ms`, `to_ms`) at `at_ms` (docs/settlement.md "Periods and close").
    pub(crate) fn close_period(
        &mut self,
        at_ms: i64,
        key: &str,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<PeriodId, SettlementError> {
        check_time(from_ms)?;
        if from_ms >= to_ms || to_ms > MAX_TIME_MS + 1 {
            return Err(SettlementError::InvalidPeriod { from_ms, to_ms });
        }
        if to_ms > at_ms {
            return Err(SettlementError::PeriodNotEnded { to_ms, at_ms });
        }
        if let Some(closed_through_ms) = self.closed_through_ms()
            && from_ms != closed_through_ms
        {
            return Err(SettlementError::CloseNotContiguous {
                from_ms,
                closed_through_ms,
            });
        }
        self.check_accrued(self.active.iter(), to_ms)?;
        let debits = self.trial_balance_debits(from_ms, to_ms)?;
        let (buyers, suppliers) = self.activity(from_ms, to_ms);
        let closes = &mut self.closes;
        let id = PeriodId(u32::try_from(closes.periods.len() + 1).unwrap_or(u32::MAX));
        let mut invoices = BTreeMap::new();
        for b in buyers {
            closes.last_invoice += 1;
            invoices.insert(b, closes.last_invoice);
        }
        let mut statements = BTreeMap::new();
        for s in suppliers {
            closes.last_statement += 1;
            statements.insert(s, closes.last_statement);
        }
        closes.periods.push(ClosedPeriod {
            id,
            key: key.to_string(),
            from_ms,
            to_ms,
            closed_at_ms: at_ms,
            invoices,
            statements,
            debits,
        });
        Ok(id)
    }

    /// Total debits of the trial balance of [from, to) on exact values, after checking it is
    /// zero (Σ opening = 0, Σ debits = Σ credits, Σ closing = 0).
    fn trial_balance_debits(&self, from_ms: i64, to_ms: i64) -> Result<Decimal, SettlementError> {
        let (mut opening, mut debits, mut credits) = (Decimal::ZERO, Decimal::ZERO, Decimal::ZERO);
        for (o, t) in self.all_turnover(from_ms, to_ms).values() {
            opening += *o;
            debits += t.debits;
            credits += t.credits;
        }
        if !opening.is_zero() {
            return Err(invariant(
                "closed period: opening balances do not sum to zero",
                opening,
            ));
        }
        if debits != credits {
            return Err(invariant(
                "closed period: debits differ from credits",
                debits - credits,
            ));
        }
        Ok(debits)
    }

    /// Buyers and suppliers with a retained transfer posted in [from, to) or a lease slice
    /// with billed seconds in it.
    fn activity(&self, from_ms: i64, to_ms: i64) -> (BTreeSet<AccountId>, BTreeSet<AccountId>) {
        let (mut buyers, mut suppliers) = (BTreeSet::new(), BTreeSet::new());
        let mut note = |a: Account| match a {
            Account::Buyer(b) => {
                buyers.insert(b);
            }
            Account::Supplier(s) => {
                suppliers.insert(s);
            }
            _ => {}
        };
        for t in &self.books.journal {
            if t.at_ms >= from_ms && t.at_ms < to_ms {
                note(t.debit);
                note(t.credit);
            }
        }
        for st in self.leases.values() {
            if slice_nums(st, from_ms, to_ms).is_some() {
                note(Account::Buyer(st.buyer));
                note(Account::Supplier(st.supplier));
            }
        }
        (buyers, suppliers)
    }

    /// Closed periods contiguous with ids 1..n, each one's trial balance still zero with the
    /// debits recorded at close, invoice and statement numbers gapless.
    pub(crate) fn check_closes(&self) -> Result<(), SettlementError> {
        let mut prev_to: Option<i64> = None;
        let (mut invoices, mut statements) = (Vec::new(), Vec::new());
        for (i, p) in self.closes.periods.iter().enumerate() {
            let id_ok = usize::try_from(p.id.0).is_ok_and(|id| id == i + 1);
            if !id_ok || prev_to.is_some_and(|t| t != p.from_ms) || p.from_ms >= p.to_ms {
                return Err(invariant("closed periods not contiguous", Decimal::ZERO));
            }
            prev_to = Some(p.to_ms);
            let debits = self.trial_balance_debits(p.from_ms, p.to_ms)?;
            if debits != p.debits {
                return Err(invariant(
                    "a closed period's turnover changed",
                    debits - p.debits,
                ));
            }
            invoices.extend(p.invoices.values().copied());
            statements.extend(p.statements.values().copied());
        }
        for (mut numbers, last) in [
            (invoices, self.closes.last_invoice),
            (statements, self.closes.last_statement),
        ] {
            numbers.sort_unstable();
            let gapless = numbers.iter().copied().eq(1..=last);
            if !gapless {
                return Err(invariant(
                    "invoice or statement numbers have a gap",
                    Decimal::ZERO,
                ));
            }
        }
        Ok(())
    }
}
