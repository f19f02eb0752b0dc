//! Cash reconciliation (issue 17, docs/settlement.md "Reconciliation"): every movement
//! through the external-cash account (the bank, GL 1002) in a period, listed with its
//! reference so finance can tick it off against the bank and payment-provider statements.
//!
//! Sections: deposits (cash in), payouts to suppliers, refunds to buyers' banks, SLA
//! cash-outs (cash out), and other adjustments touching external cash (corrections, legacy
//! adjustments; signed, + into the bank). Balances are the **cash held**: debits − credits of
//! `external_cash`, i.e. the trial balance's `external_cash` balance negated (that account is
//! debited by deposits), so a bank statement's balance compares directly.
//!
//! Printed (like the statements): each section allocated with [`allocate_fen`], opening and
//! closing `round_fen` of the exact cash held, and a `rounding` line (尾差) that closes
//! `closing = opening + deposits − payouts − refunds − sla_cash_outs + other + rounding`.
//! The check is made on exact values and is a pair assertion: the movement of the cash held,
//! computed from every transfer of the account whatever its kind, minus the sections' sum,
//! must be zero, so a transfer left out of every section shows.

use super::table::{Cell, RowBuilder, Table};
use super::trial_balance::TrialCheck;
use super::{Period, PeriodInfo, format_local};
use crate::adjust::AdjustmentKind;
use crate::close::PeriodId;
use crate::error::SettlementError;
use crate::ids::{Account, TransferId};
use crate::input::Input;
use crate::ledger::{Ledger, Transfer, TransferKind};
use crate::money::{FEN_DP, allocate_fen, round_fen, rounding_difference};
use rust_decimal::Decimal;
use serde::Serialize;

/// One movement of external cash. Amount printed CNY.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CashMovement {
    /// Transfer id.
    pub transfer_id: TransferId,
    /// Posting time, ms since epoch.
    pub at_ms: i64,
    /// Posting time, local ISO-8601 with offset.
    pub at_local: String,
    /// The other side of the transfer (`buyer:7`, `supplier:100`, …).
    pub counterparty: String,
    /// Idempotency key (the payment provider's or finance's reference), with the memo for
    /// adjustments (`key: memo`).
    pub reference: String,
    /// The closed period this movement restates, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restates: Option<PeriodId>,
    /// Printed amount, CNY: positive in every section but `other`, which is signed (+ into
    /// the bank).
    pub amount: Decimal,
}

/// Section totals (sums of printed lines), CNY.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReconciliationTotals {
    /// Σ deposits (cash in).
    pub deposits: Decimal,
    /// Σ payouts to suppliers (cash out).
    pub payouts: Decimal,
    /// Σ refunds to buyers' banks (cash out).
    pub refunds: Decimal,
    /// Σ SLA credits paid out as cash (cash out).
    pub sla_cash_outs: Decimal,
    /// Σ other adjustments touching external cash (signed, + in).
    pub other: Decimal,
    /// The printed rounding difference (尾差): `closing − (opening + deposits − payouts −
    /// refunds − sla_cash_outs + other)`, 0.00 when every amount is in whole fen.
    pub rounding: Decimal,
}

/// The cash reconciliation of one period. Amounts printed CNY (0.01).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reconciliation {
    /// The period.
    pub period: PeriodInfo,
    /// Cash held at the period start (debits − credits of `external_cash`).
    pub opening_balance: Decimal,
    /// Deposits posted in the period.
    pub deposits: Vec<CashMovement>,
    /// Payouts posted in the period.
    pub payouts: Vec<CashMovement>,
    /// Refunds to buyers' banks (`refund` adjustments).
    pub refunds: Vec<CashMovement>,
    /// SLA cash-outs (`sla_cash_out` adjustments).
    pub sla_cash_outs: Vec<CashMovement>,
    /// Other adjustments touching external cash (signed, + in).
    pub other: Vec<CashMovement>,
    /// Section totals.
    pub totals: ReconciliationTotals,
    /// Cash held at the period end.
    pub closing_balance: Decimal,
    /// `(closing − opening) − (deposits − payouts − refunds − sla_cash_outs + other)` on
    /// exact values: must be zero.
    pub check: TrialCheck,
}

/// The sections of the reconciliation, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    Deposit,
    Payout,
    Refund,
    SlaCashOut,
    Other,
}

impl Ledger {
    /// Which section an external-cash transfer belongs to. A typed adjustment's kind comes
    /// from the input applied under its key.
    fn cash_section(&self, t: &Transfer) -> Section {
        match &t.kind {
            TransferKind::Deposit { .. } => Section::Deposit,
            TransferKind::Payout { .. } => Section::Payout,
            TransferKind::Adjustment { key, .. } => match self.input_of_key(key) {
                Some(Input::Adjust(a)) => match a.kind {
                    AdjustmentKind::Refund { .. } => Section::Refund,
                    AdjustmentKind::SlaCashOut { .. } => Section::SlaCashOut,
                    _ => Section::Other,
                },
                _ => Section::Other,
            },
            _ => Section::Other,
        }
    }

    /// Cash held before `t_ms`: debits − credits of `external_cash`, exact CNY. Scans the
    /// whole journal rather than the per-account index the sections use, so the check
    /// compares two independent sums.
    fn cash_held_before(&self, t_ms: i64) -> Decimal {
        let cash = Account::ExternalCash;
        (self.books.journal.iter())
            .filter(|t| t.at_ms < t_ms)
            .map(|t| match (t.debit == cash, t.credit == cash) {
                (true, false) => t.amount,
                (false, true) => -t.amount,
                _ => Decimal::ZERO,
            })
            .sum()
    }

    /// The cash reconciliation of `period`.
    ///
    /// # Errors
    /// None today (external cash has no lease effects, so nothing needs accruing); the
    /// `Result` keeps the signature of the other reports.
    pub fn reconciliation(&self, period: &Period) -> Result<Reconciliation, SettlementError> {
        let cash = Account::ExternalCash;
        let (opening, closing) = (
            self.cash_held_before(period.from_ms),
            self.cash_held_before(period.to_ms),
        );
        let ts: Vec<&Transfer> = self
            .journal_in(cash, period.from_ms, period.to_ms)
            .collect();
        let mut exact_sum = Decimal::ZERO;
        let mut section = |want: Section| -> (Vec<CashMovement>, Decimal) {
            let mine: Vec<&&Transfer> =
                ts.iter().filter(|t| self.cash_section(t) == want).collect();
            // Cash in is a debit of external cash; every section but `other` is one-sided.
            let signed = |t: &Transfer| {
                if t.debit == cash { t.amount } else { -t.amount }
            };
            let exact: Vec<Decimal> = mine
                .iter()
                .map(|t| match want {
                    Section::Deposit | Section::Other => signed(t),
                    _ => -signed(t),
                })
                .collect();
            exact_sum += mine.iter().map(|t| signed(t)).sum::<Decimal>();
            let printed = allocate_fen(&exact);
            let lines = mine
                .iter()
                .zip(printed.lines)
                .map(|(t, amount)| CashMovement {
                    transfer_id: t.id,
                    at_ms: t.at_ms,
                    at_local: format_local(t.at_ms, period.tz),
                    counterparty: if t.debit == cash { t.credit } else { t.debit }.to_string(),
                    reference: super::buyer::reference(&t.kind),
                    restates: t.restates,
                    amount,
                })
                .collect();
            (lines, printed.total)
        };
        let (deposits, total_deposits) = section(Section::Deposit);
        let (payouts, total_payouts) = section(Section::Payout);
        let (refunds, total_refunds) = section(Section::Refund);
        let (sla_cash_outs, total_cash_outs) = section(Section::SlaCashOut);
        let (other, total_other) = section(Section::Other);
        let (opening_balance, closing_balance) = (round_fen(opening), round_fen(closing));
        let rounding = rounding_difference(
            closing_balance,
            [
                opening_balance,
                total_deposits,
                -total_payouts,
                -total_refunds,
                -total_cash_outs,
                total_other,
            ],
            FEN_DP,
        );
        // Normalised: an exact sum's scale follows its inputs', and a closed period's report
        // must print the same bytes (issue 17).
        let value = (closing - opening - exact_sum).normalize();
        Ok(Reconciliation {
            period: period.info(),
            opening_balance,
            deposits,
            payouts,
            refunds,
            sla_cash_outs,
            other,
            totals: ReconciliationTotals {
                deposits: total_deposits,
                payouts: total_payouts,
                refunds: total_refunds,
                sla_cash_outs: total_cash_outs,
                other: total_other,
                rounding,
            },
            closing_balance,
            check: TrialCheck {
                name: "cash movement equals deposits - payouts - refunds - sla_cash_outs + other"
                    .to_string(),
                ok: value.is_zero(),
                value,
            },
        })
    }
}

/// CSV/XLSX columns of the reconciliation, in order.
pub const RECONCILIATION_COLUMNS: [&str; 10] = [
    "section",
    "transfer_id",
    "reference",
    "counterparty",
    "start",
    "end",
    "restates_period",
    "amount_cny",
    "check_value_cny",
    "check_ok",
];

impl Reconciliation {
    /// The reconciliation as a table with [`RECONCILIATION_COLUMNS`]. Sections in order:
    /// `period` (start/end = period bounds, reference = zone), `opening_balance`,
    /// `deposit`…, `payout`…, `refund`…, `sla_cash_out`…, `other`… (posting time in
    /// `start`), `total_deposits`, `total_payouts`, `total_refunds`, `total_sla_cash_outs`,
    /// `total_other`, `rounding`, `closing_balance`, `check` (name in `reference`, exact
    /// value, `true`/`false`).
    pub fn table(&self) -> Table {
        let tz = self.period.tz();
        let h = &RECONCILIATION_COLUMNS[..];
        let sec = |s: &str| RowBuilder::new(h).set("section", Cell::Text(s.to_string()));
        let money = |s: &str, d: Decimal| sec(s).set("amount_cny", Cell::Money(d)).build();
        let mut rows = vec![
            RowBuilder::period_row(h, &self.period),
            money("opening_balance", self.opening_balance),
        ];
        for (s, lines) in [
            ("deposit", &self.deposits),
            ("payout", &self.payouts),
            ("refund", &self.refunds),
            ("sla_cash_out", &self.sla_cash_outs),
            ("other", &self.other),
        ] {
            for l in lines {
                rows.push(
                    sec(s)
                        .set("transfer_id", Cell::Int(l.transfer_id.0))
                        .set("reference", Cell::Text(l.reference.clone()))
                        .set("counterparty", Cell::Text(l.counterparty.clone()))
                        .set("start", Cell::Time { ms: l.at_ms, tz })
                        .set(
                            "restates_period",
                            l.restates
                                .map_or(Cell::Empty, |p| Cell::Int(u64::from(p.0))),
                        )
                        .set("amount_cny", Cell::Money(l.amount))
                        .build(),
                );
            }
        }
        let t = &self.totals;
        rows.push(money("total_deposits", t.deposits));
        rows.push(money("total_payouts", t.payouts));
        rows.push(money("total_refunds", t.refunds));
        rows.push(money("total_sla_cash_outs", t.sla_cash_outs));
        rows.push(money("total_other", t.other));
        rows.push(money("rounding", t.rounding));
        rows.push(money("closing_balance", self.closing_balance));
        rows.push(
            sec("check")
                .set("reference", Cell::Text(self.check.name.clone()))
                .set("check_value_cny", Cell::Number(self.check.value))
                .set("check_ok", Cell::Text(self.check.ok.to_string()))
                .build(),
        );
        Table {
            name: "reconciliation".to_string(),
            header: RECONCILIATION_COLUMNS.to_vec(),
            rows,
        }
    }
}
