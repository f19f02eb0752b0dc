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
//! * Credit notes (红字, issue 25; docs/settlement.md "Credit notes"): the buyer's goodwill
//!   and SLA credits posted in the period, each assigned to the invoice it corrects (the
//!   period it restates, else the newest invoice with gross left to credit, at most
//!   [`MAX_CREDIT_NOTE_LOOKBACK`] periods back), one [`CreditNoteRecord`] per buyer and
//!   corrected invoice, its gross capped at what that invoice has left; numbered from a
//!   third gapless counter.

use crate::error::SettlementError;
use crate::ids::{Account, AccountId, LeaseId, TransferId};
use crate::ledger::{Ledger, MAX_TIME_MS, Transfer, TransferKind, check_time};
use crate::money::{FEN_DP, allocate_fen, round_dp};
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

/// How many closed periods before the one being closed a credit without a period of its own
/// looks back for an invoice to correct (docs/settlement.md "Credit notes"): 24, two years of
/// monthly closes, so a close does O(24) invoice sums per buyer with credits at most.
pub const MAX_CREDIT_NOTE_LOOKBACK: usize = 24;

/// One numbered invoice: the closed period it belongs to and its number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct InvoiceRef {
    /// The closed period of the invoice.
    pub period: PeriodId,
    /// The invoice number ([`ClosedPeriod::invoices`]).
    pub number: u64,
}

/// A credit note (红字发票) numbered at close (docs/settlement.md "Credit notes"): the
/// buyer's goodwill and SLA credits of the period against one invoice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreditNoteRecord {
    /// The buyer.
    pub buyer: AccountId,
    /// Credit-note number, gapless across closes (its own sequence).
    pub number: u64,
    /// The invoice it corrects.
    pub corrects: InvoiceRef,
    /// Gross credited (价税合计, positive; the document prints it negative), CNY to the fen:
    /// the credits' printed sum, capped at what the corrected invoice had left.
    pub gross: Decimal,
    /// The credit transfers it carries (SLA credits and goodwill credits), in posting order.
    pub credits: Vec<TransferId>,
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
    /// Credit notes numbered at this close, by buyer then corrected invoice (issue 25; absent
    /// from periods closed before it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credit_notes: Vec<CreditNoteRecord>,
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
    /// Last credit-note number issued (0: none; absent from snapshots before issue 25).
    #[serde(default, skip_serializing_if = "is_zero")]
    last_credit_note: u64,
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

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A credit that a credit note carries (docs/settlement.md "Credit notes"): an SLA credit to
/// a buyer, or a goodwill credit (`platform_fee → buyer`, memo `goodwill_credit: …`).
pub(crate) fn is_credit_note_credit(t: &Transfer) -> bool {
    matches!(t.credit, Account::Buyer(_))
        && match &t.kind {
            TransferKind::SlaCredit { .. } => true,
            TransferKind::Adjustment { memo, .. } => {
                t.debit == Account::PlatformFee && memo.starts_with("goodwill_credit: ")
            }
            _ => false,
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

    /// The credit notes numbered when closed period `period` was closed (issue 25).
    pub fn credit_notes(&self, period: PeriodId) -> &[CreditNoteRecord] {
        self.closed_period(period)
            .map_or(&[], |p| p.credit_notes.as_slice())
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
        if from_ms >= to_ms {
            return Err(SettlementError::InvalidPeriod { from_ms, to_ms });
        }
        // A period ending after now has not ended, however far off its end (found in issue
        // 25's review: an end of i64::MAX answered "invalid period").
        if to_ms > at_ms {
            return Err(SettlementError::PeriodNotEnded { to_ms, at_ms });
        }
        if to_ms > MAX_TIME_MS + 1 {
            return Err(SettlementError::InvalidPeriod { from_ms, to_ms });
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
        let id = PeriodId(u32::try_from(self.closes.periods.len() + 1).unwrap_or(u32::MAX));
        let mut invoices = BTreeMap::new();
        let mut last_invoice = self.closes.last_invoice;
        for b in buyers {
            last_invoice += 1;
            invoices.insert(b, last_invoice);
        }
        let credit_notes = self.credit_notes_at_close(id, from_ms, to_ms, &invoices);
        let closes = &mut self.closes;
        closes.last_invoice = last_invoice;
        let mut statements = BTreeMap::new();
        for s in suppliers {
            closes.last_statement += 1;
            statements.insert(s, closes.last_statement);
        }
        closes.last_credit_note += u64::try_from(credit_notes.len()).unwrap_or(0);
        closes.periods.push(ClosedPeriod {
            id,
            key: key.to_string(),
            from_ms,
            to_ms,
            closed_at_ms: at_ms,
            invoices,
            statements,
            credit_notes,
            debits,
        });
        Ok(id)
    }

    /// The credit notes of the period being closed (`id`, [from, to), its buyers' invoice
    /// numbers `invoices`), numbered from the counter's next value (docs/settlement.md
    /// "Credit notes").
    fn credit_notes_at_close(
        &self,
        id: PeriodId,
        from_ms: i64,
        to_ms: i64,
        invoices: &BTreeMap<AccountId, u64>,
    ) -> Vec<CreditNoteRecord> {
        // Credits by buyer, in posting order.
        let mut credits: BTreeMap<AccountId, Vec<&Transfer>> = BTreeMap::new();
        for t in &self.books.journal {
            if t.at_ms >= from_ms
                && t.at_ms < to_ms
                && is_credit_note_credit(t)
                && let Account::Buyer(b) = t.credit
            {
                credits.entry(b).or_default().push(t);
            }
        }
        let mut out = Vec::new();
        let mut next = self.closes.last_credit_note;
        for (buyer, ts) in credits {
            // Candidate invoices, newest first, with what each has left to credit.
            let mut candidates: Vec<(InvoiceRef, i64, i64)> = Vec::new();
            if let Some(n) = invoices.get(&buyer) {
                candidates.push((
                    InvoiceRef {
                        period: id,
                        number: *n,
                    },
                    from_ms,
                    to_ms,
                ));
            }
            let earlier = self
                .closes
                .periods
                .iter()
                .rev()
                .take(MAX_CREDIT_NOTE_LOOKBACK);
            candidates.extend(earlier.filter_map(|p| {
                let number = *p.invoices.get(&buyer)?;
                Some((
                    InvoiceRef {
                        period: p.id,
                        number,
                    },
                    p.from_ms,
                    p.to_ms,
                ))
            }));
            let left: Vec<(InvoiceRef, Decimal)> = candidates
                .into_iter()
                .map(|(r, f, t)| (r, self.invoice_gross(buyer, f, t) - self.credited(r)))
                .collect();
            // Each credit's invoice: the one of the period it restates, if anything is left
            // there; else the newest with something left.
            let mut groups: BTreeMap<InvoiceRef, Vec<&Transfer>> = BTreeMap::new();
            for t in ts {
                let restated = t.restates.and_then(|p| {
                    left.iter()
                        .find(|(r, l)| r.period == p && l.is_sign_positive() && !l.is_zero())
                });
                let newest = || {
                    left.iter()
                        .find(|(_, l)| l.is_sign_positive() && !l.is_zero())
                };
                if let Some((r, _)) = restated.or_else(newest) {
                    groups.entry(*r).or_default().push(t);
                }
            }
            for (corrects, ts) in groups {
                let printed = allocate_fen(&ts.iter().map(|t| t.amount).collect::<Vec<_>>());
                let cap = left
                    .iter()
                    .find(|(r, _)| *r == corrects)
                    .map_or(Decimal::ZERO, |(_, l)| *l);
                next += 1;
                out.push(CreditNoteRecord {
                    buyer,
                    number: next,
                    corrects,
                    gross: printed.total.min(cap),
                    credits: ts.iter().map(|t| t.id).collect(),
                });
            }
        }
        out
    }

    /// The gross (价税合计, CNY to the fen) of `buyer`'s invoice over [`from_ms`, `to_ms`)
    /// (ms since epoch): its collected charges, `round(Σ exact)`, the figure
    /// [`Ledger::buyer_invoice`] prints as `totals.gross`, without building the document
    /// (O(the buyer's leases)). 0 for a range that is no period. The caller makes sure the
    /// range is accrued (a closed period is).
    pub fn invoice_gross(&self, buyer: AccountId, from_ms: i64, to_ms: i64) -> Decimal {
        let sums = self.collected_and_fee(self.leases_by_buyer.get(&buyer), from_ms, to_ms);
        round_dp(sums.0, FEN_DP)
    }

    /// The gross (CNY to the fen) of `supplier`'s self-billing statement over [`from_ms`,
    /// `to_ms`): `round(Σ collected) − round(Σ fee)`, the figure
    /// [`Ledger::supplier_self_billing`] prints as `totals.gross`, without building the
    /// document. As [`Ledger::invoice_gross`] otherwise.
    pub fn self_billing_gross(&self, supplier: AccountId, from_ms: i64, to_ms: i64) -> Decimal {
        let (collected, fee) =
            self.collected_and_fee(self.leases_by_supplier.get(&supplier), from_ms, to_ms);
        round_dp(collected, FEN_DP) - round_dp(fee, FEN_DP)
    }

    /// Exact Σ collected and Σ fee of the slices of `leases` in [from, to).
    fn collected_and_fee(
        &self,
        leases: Option<&Vec<LeaseId>>,
        from_ms: i64,
        to_ms: i64,
    ) -> (Decimal, Decimal) {
        let Ok(period) = crate::reports::Period::new(from_ms, to_ms, "UTC") else {
            return (Decimal::ZERO, Decimal::ZERO);
        };
        let leases = leases.map_or(&[][..], Vec::as_slice);
        self.slices_of(leases, &period)
            .iter()
            .fold((Decimal::ZERO, Decimal::ZERO), |(c, f), s| {
                (c + s.collected, f + s.fee)
            })
    }

    /// Gross credited by credit notes of closed periods against invoice `r`, CNY.
    fn credited(&self, r: InvoiceRef) -> Decimal {
        self.closes
            .periods
            .iter()
            .flat_map(|p| &p.credit_notes)
            .filter(|c| c.corrects == r)
            .map(|c| c.gross)
            .sum()
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
        let (mut invoices, mut statements, mut credit_notes) = (Vec::new(), Vec::new(), Vec::new());
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
            credit_notes.extend(p.credit_notes.iter().map(|c| c.number));
        }
        for (mut numbers, last) in [
            (invoices, self.closes.last_invoice),
            (statements, self.closes.last_statement),
            (credit_notes, self.closes.last_credit_note),
        ] {
            numbers.sort_unstable();
            let gapless = numbers.iter().copied().eq(1..=last);
            if !gapless {
                return Err(invariant(
                    "invoice, statement or credit-note numbers have a gap",
                    Decimal::ZERO,
                ));
            }
        }
        Ok(())
    }
}
