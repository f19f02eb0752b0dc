//! Buyer statement (issue 3): opening balance, deposits, adjustments, SLA
//! credits, one line per lease slice (with the lease's ready time and end
//! reason, issue 15), uncollected charges, leases not delivered (0.00),
//! closing balance.
//!
//! Identity (printed, exact to the fen):
//! `closing = opening + deposits + adjustments + credits − charges + unpaid + restatements +
//! rounding`. Restatements (issue 17) are the journal lines posted in the period that restate
//! a closed period (`Transfer::restates`: a late SLA credit, a late end's correction, an
//! adjustment referencing `period:<id>`), listed apart with the period's id.
//! Opening and closing are the rounded exact balances (the figures the app and the trial
//! balance show). Each section is printed with [`allocate_fen`] (largest remainder, issue
//! 17): its lines add up to its total `round(Σ exact)`, and a line alone prints
//! `round_fen(x)`, the same figure every other report prints for it. The few fen by which
//! the rounded sections miss the rounded balances are the `rounding` line (尾差), never
//! hidden inside a charge. Amounts are printed as positive figures rounded once: nothing
//! is negated after rounding, so no line prints `-0.00`.

use super::table::{Cell, RowBuilder, Table};
use super::{LeaseSlice, Period, PeriodInfo};
use crate::close::PeriodId;
use crate::credits::{CreditTerms, SlaCreditInfo};
use crate::error::SettlementError;
use crate::ids::{Account, AccountId, LeaseId, TransferId};
use crate::input::EndReason;
use crate::ledger::{Ledger, Transfer, TransferKind};
use crate::money::{Allocation, FEN_DP, allocate_fen, round_fen, rounding_difference};
use chrono_tz::Tz;
use rust_decimal::Decimal;
use serde::Serialize;

/// A cash movement line (deposit, payout or adjustment). Amount printed CNY.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CashLine {
    /// Transfer id.
    pub transfer_id: TransferId,
    /// Posting time, ms since epoch.
    pub at_ms: i64,
    /// Posting time, local ISO-8601.
    pub at_local: String,
    /// Idempotency key, and memo for adjustments (`key: memo`).
    pub reference: String,
    /// Printed amount, CNY (adjustments signed: + to this account).
    pub amount: Decimal,
}

/// A journal line that restates a closed period (issue 17, `Transfer::restates`): a late
/// fact's SLA credit or deduction, the correction of a late end, or an adjustment that
/// references `period:<id>`. Statements list these in their own `restatement` section,
/// apart from the period's own adjustments and credits. Amount printed CNY, signed: + to
/// the statement's account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RestatementLine {
    /// Transfer id.
    pub transfer_id: TransferId,
    /// Posting time (in this period), ms since epoch.
    pub at_ms: i64,
    /// Posting time, local ISO-8601.
    pub at_local: String,
    /// The closed period it restates.
    pub restates: PeriodId,
    /// What it is: `adjustment`, `sla_credit` (buyer) or `sla_deduction` (supplier).
    pub kind: &'static str,
    /// The lease, for an SLA credit or deduction.
    pub lease: Option<LeaseId>,
    /// Idempotency key and memo (`key: memo`) for an adjustment; empty for SLA lines.
    pub reference: String,
    /// Printed amount, CNY, signed: + to this account.
    pub amount: Decimal,
    /// For an SLA line (issue 26): its basis, the terms it follows and its computation.
    pub sla: Option<SlaCreditInfo>,
}

impl RestatementLine {
    /// The restating journal transfers of `account` in `period` (posting order), printed
    /// signed (+ to the account) with [`allocate_fen`], and their total.
    pub(crate) fn section(
        ledger: &Ledger,
        account: Account,
        period: &Period,
    ) -> (Vec<RestatementLine>, Decimal) {
        let (ts, printed) = ledger.journal_section(account, period, |t| t.restates.is_some(), true);
        let lines = ts
            .iter()
            .zip(printed.lines)
            .map(|(t, amount)| RestatementLine {
                transfer_id: t.id,
                at_ms: t.at_ms,
                at_local: super::format_local(t.at_ms, period.tz),
                restates: t.restates.unwrap_or(PeriodId(0)),
                kind: match t.kind {
                    TransferKind::SlaCredit { .. } => "sla_credit",
                    TransferKind::SlaFunding { .. } => "sla_deduction",
                    _ => "adjustment",
                },
                lease: Ledger::sla_lease(&t.kind),
                reference: reference(&t.kind),
                amount,
                sla: ledger.sla_credit_info(t),
            })
            .collect();
        (lines, printed.total)
    }

    /// Its row in a statement table with `header` (section `restatement`): transfer id,
    /// lease, `reference` = `period:<id> <kind>` then the line's own reference, `start` =
    /// posting time, the signed amount in `amount_cny`.
    pub(crate) fn row(&self, header: &[&'static str], tz: Tz) -> Vec<Cell> {
        let mut text = format!("period:{} {}", self.restates, self.kind);
        if !self.reference.is_empty() {
            text.push_str(&format!(" {}", self.reference));
        }
        RowBuilder::new(header)
            .set("section", Cell::Text("restatement".to_string()))
            .set("transfer_id", Cell::Int(self.transfer_id.0))
            .set(
                "lease_id",
                self.lease.map_or(Cell::Empty, |l| Cell::Int(l.0)),
            )
            .set("reference", Cell::Text(text))
            .set("start", Cell::Time { ms: self.at_ms, tz })
            .set("amount_cny", Cell::Money(self.amount))
            .build()
    }
}

/// The `sla_terms` row that follows an SLA line in a statement table with `header` (issue
/// 26): the line's transfer id and lease, `reference` = [`SlaCreditInfo::summary`] (basis,
/// computation, terms), no amount.
pub(crate) fn sla_terms_row(
    header: &[&'static str],
    transfer_id: TransferId,
    lease: Option<LeaseId>,
    info: &SlaCreditInfo,
) -> Vec<Cell> {
    RowBuilder::new(header)
        .set("section", Cell::Text("sla_terms".to_string()))
        .set("transfer_id", Cell::Int(transfer_id.0))
        .set("lease_id", lease.map_or(Cell::Empty, |l| Cell::Int(l.0)))
        .set("reference", Cell::Text(info.summary()))
        .build()
}

/// An SLA credit line. Amount printed CNY.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CreditLine {
    /// Transfer id.
    pub transfer_id: TransferId,
    /// Posting time, ms since epoch.
    pub at_ms: i64,
    /// Posting time, local ISO-8601.
    pub at_local: String,
    /// The failed lease (for a monthly availability credit: the lease whose terms set the
    /// promise).
    pub lease: LeaseId,
    /// Printed amount, CNY.
    pub amount: Decimal,
    /// Its basis, the terms it follows and its computation (issue 26).
    pub sla: Option<SlaCreditInfo>,
}

/// A lease its supplier never delivered, on a statement: charged nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeliveryFailureLine {
    /// Lease id.
    pub lease: LeaseId,
    /// SKU id.
    pub sku: String,
    /// Region id.
    pub region: String,
    /// GPUs.
    pub gpus: u32,
    /// When the delivery failed, ms since epoch.
    pub at_ms: i64,
    /// When the delivery failed, local ISO-8601.
    pub at_local: String,
    /// Printed amount, CNY: always 0.00.
    pub amount: Decimal,
}

/// One lease slice on a buyer statement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChargeLine {
    /// Lease id.
    pub lease: LeaseId,
    /// SKU id.
    pub sku: String,
    /// Region id.
    pub region: String,
    /// GPUs.
    pub gpus: u32,
    /// When the lease was ready (its billing start), ms since epoch.
    pub ready_ms: i64,
    /// When the lease was ready, local ISO-8601.
    pub ready_local: String,
    /// Slice start, ms since epoch.
    pub start_ms: i64,
    /// Slice end, ms since epoch.
    pub end_ms: i64,
    /// Slice start, local ISO-8601.
    pub start_local: String,
    /// Slice end, local ISO-8601.
    pub end_local: String,
    /// Billed seconds in the slice.
    pub billed_seconds: u64,
    /// Unit price, CNY per GPU-hour (as agreed, unrounded).
    pub unit_price: Decimal,
    /// Printed amount, CNY (allocated; within 0.01 of
    /// unit price × GPUs × billed seconds / 3600).
    pub amount: Decimal,
    /// Why the lease ended, if it ended by the period end; `None` while it runs past it.
    pub end_reason: Option<EndReason>,
    /// The SLA terms the lease's credits follow (issue 26; JSON only).
    pub sla_terms: Option<CreditTerms>,
}

/// A charge due but not collected (insufficient funds), per lease slice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnpaidLine {
    /// Lease id.
    pub lease: LeaseId,
    /// Printed amount, CNY.
    pub amount: Decimal,
}

/// Section totals (sums of the printed lines), CNY.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BuyerTotals {
    /// Σ deposits.
    pub deposits: Decimal,
    /// Σ adjustments (signed).
    pub adjustments: Decimal,
    /// Σ SLA credits.
    pub credits: Decimal,
    /// Σ charge lines.
    pub charges: Decimal,
    /// Σ uncollected charges.
    pub unpaid: Decimal,
    /// Σ restatements (signed, + to the buyer; issue 17).
    pub restatements: Decimal,
    /// The printed rounding difference (尾差), at most ±0.03 CNY (±0.04 with restatements):
    /// `closing − (opening + deposits + adjustments + credits − charges + unpaid +
    /// restatements)` (docs/settlement.md, "Rounding allocation").
    pub rounding: Decimal,
}

/// A buyer statement for one period. All amounts printed CNY (0.01).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BuyerStatement {
    /// The buyer.
    pub buyer: AccountId,
    /// The period.
    pub period: PeriodInfo,
    /// Prepaid balance at the period start.
    pub opening_balance: Decimal,
    /// Deposits posted in the period.
    pub deposits: Vec<CashLine>,
    /// Adjustments posted in the period, but those that restate a closed period.
    pub adjustments: Vec<CashLine>,
    /// SLA credits posted in the period, but those that restate a closed period.
    pub credits: Vec<CreditLine>,
    /// Adjustments and SLA credits posted in the period that restate a closed period
    /// (issue 17), with its id.
    pub restatements: Vec<RestatementLine>,
    /// One line per lease slice with billed seconds in the period.
    pub charges: Vec<ChargeLine>,
    /// Uncollected parts of those slices.
    pub unpaid: Vec<UnpaidLine>,
    /// The buyer's leases whose delivery failed in the period (charged 0.00).
    pub not_delivered: Vec<DeliveryFailureLine>,
    /// Section totals.
    pub totals: BuyerTotals,
    /// Prepaid balance at the period end.
    pub closing_balance: Decimal,
}

/// The `reference` of a journal line: the idempotency key, with the memo for adjustments.
pub(crate) fn reference(kind: &TransferKind) -> String {
    match kind {
        TransferKind::Deposit { key } | TransferKind::Payout { key } => key.clone(),
        TransferKind::Adjustment { key, memo } => format!("{key}: {memo}"),
        _ => String::new(),
    }
}

impl CashLine {
    /// The line of transfer `t` printed as `amount` (CNY), times in `tz`.
    pub(crate) fn of(t: &Transfer, amount: Decimal, tz: Tz) -> CashLine {
        CashLine {
            transfer_id: t.id,
            at_ms: t.at_ms,
            at_local: super::format_local(t.at_ms, tz),
            reference: reference(&t.kind),
            amount,
        }
    }

    /// The lines of a journal section (see `Ledger::journal_section`), and their total.
    pub(crate) fn section(
        (ts, printed): (Vec<&Transfer>, Allocation),
        tz: Tz,
    ) -> (Vec<CashLine>, Decimal) {
        let lines = ts
            .iter()
            .zip(printed.lines)
            .map(|(t, amount)| CashLine::of(t, amount, tz))
            .collect();
        (lines, printed.total)
    }
}

impl CreditLine {
    /// The SLA lines of a journal section (credits or deductions), and their total.
    pub(crate) fn section(
        ledger: &Ledger,
        (ts, printed): (Vec<&Transfer>, Allocation),
        tz: Tz,
    ) -> (Vec<CreditLine>, Decimal) {
        let lines = ts
            .iter()
            .zip(printed.lines)
            .map(|(t, amount)| CreditLine {
                transfer_id: t.id,
                at_ms: t.at_ms,
                at_local: super::format_local(t.at_ms, tz),
                lease: Ledger::sla_lease(&t.kind).unwrap_or(LeaseId(0)),
                amount,
                sla: ledger.sla_credit_info(t),
            })
            .collect();
        (lines, printed.total)
    }
}

impl ChargeLine {
    /// The charge line of slice `s` printed as `amount` (CNY), times in `tz`.
    fn of(s: &LeaseSlice, amount: Decimal, tz: Tz, sla_terms: Option<CreditTerms>) -> ChargeLine {
        let fmt = |ms| super::format_local(ms, tz);
        ChargeLine {
            lease: s.lease,
            sku: s.sku.clone(),
            region: s.region.clone(),
            gpus: s.gpus,
            ready_ms: s.ready_ms,
            ready_local: fmt(s.ready_ms),
            start_ms: s.start_ms,
            end_ms: s.end_ms,
            start_local: fmt(s.start_ms),
            end_local: fmt(s.end_ms),
            billed_seconds: s.billed_seconds,
            unit_price: s.price_per_gpu_hour,
            amount,
            end_reason: s.end_reason,
            sla_terms,
        }
    }
}

impl Ledger {
    /// The statement of `buyer` for `period`.
    ///
    /// # Errors
    /// [`SettlementError::NotAccrued`] if one of the buyer's active leases is
    /// not accrued through the period end.
    pub fn buyer_statement(
        &self,
        buyer: AccountId,
        period: &Period,
    ) -> Result<BuyerStatement, SettlementError> {
        let lease_ids = self
            .leases_by_buyer
            .get(&buyer)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        self.check_accrued(lease_ids.iter(), period.to_ms)?;
        let account = Account::Buyer(buyer);
        let opening = self
            .account_turnover(account, i64::MIN, period.from_ms)
            .net();
        let tz = period.tz;
        // The period's own lines; the restating ones go to `restatements`.
        let section = |want: fn(&TransferKind) -> bool, signed| {
            self.journal_section(
                account,
                period,
                |t| want(&t.kind) && t.restates.is_none(),
                signed,
            )
        };
        let (restatements, total_restatements) = RestatementLine::section(self, account, period);
        let (deposits, total_deposits) = CashLine::section(
            section(|k| matches!(k, TransferKind::Deposit { .. }), false),
            tz,
        );
        let (adjustments, total_adjustments) = CashLine::section(
            section(|k| matches!(k, TransferKind::Adjustment { .. }), true),
            tz,
        );
        let (credits, total_credits) = CreditLine::section(
            self,
            section(|k| matches!(k, TransferKind::SlaCredit { .. }), false),
            tz,
        );
        let slices = self.slices_of(lease_ids, period);
        let closing = opening + self.journal_net(account, period)
            - slices.iter().map(|s| s.collected).sum::<Decimal>();
        let printed = allocate_fen(&slices.iter().map(|s| s.amount).collect::<Vec<_>>());
        let total_charges = printed.total;
        let charges: Vec<ChargeLine> = (slices.iter().zip(printed.lines))
            .map(|(s, amount)| ChargeLine::of(s, amount, tz, self.credit_terms(s.lease)))
            .collect();
        let unpaid_slices: Vec<_> = slices.iter().filter(|s| !s.unpaid.is_zero()).collect();
        let printed = allocate_fen(&unpaid_slices.iter().map(|s| s.unpaid).collect::<Vec<_>>());
        let total_unpaid = printed.total;
        let unpaid: Vec<UnpaidLine> = (unpaid_slices.iter().zip(printed.lines))
            .map(|(s, amount)| UnpaidLine {
                lease: s.lease,
                amount,
            })
            .collect();
        let (opening_balance, closing_balance) = (round_fen(opening), round_fen(closing));
        let rounding = rounding_difference(
            closing_balance,
            [
                opening_balance,
                total_deposits,
                total_adjustments,
                total_credits,
                -total_charges,
                total_unpaid,
                total_restatements,
            ],
            FEN_DP,
        );
        Ok(BuyerStatement {
            buyer,
            period: period.info(),
            opening_balance,
            deposits,
            adjustments,
            credits,
            restatements,
            charges,
            unpaid,
            not_delivered: self.failed_deliveries_in(self.failures_by_buyer.get(&buyer), period),
            totals: BuyerTotals {
                deposits: total_deposits,
                adjustments: total_adjustments,
                credits: total_credits,
                charges: total_charges,
                unpaid: total_unpaid,
                restatements: total_restatements,
                rounding,
            },
            closing_balance,
        })
    }
}

/// CSV/XLSX columns of a buyer statement, in order. Issue 15 appended `ready` (the lease's
/// ready time) and `end_reason` after the issue 3 columns, so their positions are unchanged.
pub const BUYER_COLUMNS: [&str; 14] = [
    "section",
    "transfer_id",
    "lease_id",
    "reference",
    "sku",
    "region",
    "gpus",
    "start",
    "end",
    "billed_seconds",
    "unit_price_cny_per_gpu_hour",
    "amount_cny",
    "ready",
    "end_reason",
];

impl BuyerStatement {
    /// The statement as a table with [`BUYER_COLUMNS`]. Sections in order:
    /// `period` (start/end = period bounds, reference = zone),
    /// `opening_balance`, `deposit`…, `adjustment`…, `sla_credit`… (each followed by its
    /// `sla_terms` row, issue 26: basis, computation and terms in `reference`),
    /// `charge`… (with `ready` and `end_reason`), `unpaid`…, `not_delivered`… (lease, SKU,
    /// region, GPUs, `start` = failure time, 0 billed seconds, 0.00, `end_reason`
    /// `not_delivered`), `restatement`… (issue 17: lines that restate a closed period;
    /// `reference` = `period:<id> <kind> …`, signed amount; an SLA one followed by its
    /// `sla_terms` row), `total_deposits`,
    /// `total_adjustments`, `total_sla_credits`, `total_charges`, `total_unpaid`,
    /// `total_restatements`, `rounding` (issue 17: the printed rounding difference),
    /// `closing_balance`.
    pub fn table(&self) -> Table {
        let tz = self.period.tz();
        let h = &BUYER_COLUMNS[..];
        let sec = |s: &str| RowBuilder::new(h).set("section", Cell::Text(s.to_string()));
        let money = |s: &str, d: Decimal| sec(s).set("amount_cny", Cell::Money(d)).build();
        let mut rows = vec![
            RowBuilder::period_row(h, &self.period),
            money("opening_balance", self.opening_balance),
        ];
        for (s, lines) in [
            ("deposit", &self.deposits),
            ("adjustment", &self.adjustments),
        ] {
            for l in lines {
                rows.push(
                    sec(s)
                        .set("transfer_id", Cell::Int(l.transfer_id.0))
                        .set("reference", Cell::Text(l.reference.clone()))
                        .set("start", Cell::Time { ms: l.at_ms, tz })
                        .set("amount_cny", Cell::Money(l.amount))
                        .build(),
                );
            }
        }
        for l in &self.credits {
            rows.push(
                sec("sla_credit")
                    .set("transfer_id", Cell::Int(l.transfer_id.0))
                    .set("lease_id", Cell::Int(l.lease.0))
                    .set("start", Cell::Time { ms: l.at_ms, tz })
                    .set("amount_cny", Cell::Money(l.amount))
                    .build(),
            );
            if let Some(info) = &l.sla {
                rows.push(sla_terms_row(h, l.transfer_id, Some(l.lease), info));
            }
        }
        for l in &self.charges {
            rows.push(
                sec("charge")
                    .set("lease_id", Cell::Int(l.lease.0))
                    .set("sku", Cell::Text(l.sku.clone()))
                    .set("region", Cell::Text(l.region.clone()))
                    .set("gpus", Cell::Int(u64::from(l.gpus)))
                    .set("start", Cell::Time { ms: l.start_ms, tz })
                    .set("end", Cell::Time { ms: l.end_ms, tz })
                    .set("billed_seconds", Cell::Int(l.billed_seconds))
                    .set("unit_price_cny_per_gpu_hour", Cell::Number(l.unit_price))
                    .set("amount_cny", Cell::Money(l.amount))
                    .set("ready", Cell::Time { ms: l.ready_ms, tz })
                    .set("end_reason", end_reason_cell(l.end_reason))
                    .build(),
            );
        }
        for l in &self.unpaid {
            rows.push(
                sec("unpaid")
                    .set("lease_id", Cell::Int(l.lease.0))
                    .set("amount_cny", Cell::Money(l.amount))
                    .build(),
            );
        }
        for l in &self.not_delivered {
            rows.push(l.row(h, "not_delivered", "amount_cny", tz));
        }
        for l in &self.restatements {
            rows.push(l.row(h, tz));
            if let Some(info) = &l.sla {
                rows.push(sla_terms_row(h, l.transfer_id, l.lease, info));
            }
        }
        rows.push(money("total_deposits", self.totals.deposits));
        rows.push(money("total_adjustments", self.totals.adjustments));
        rows.push(money("total_sla_credits", self.totals.credits));
        rows.push(money("total_charges", self.totals.charges));
        rows.push(money("total_unpaid", self.totals.unpaid));
        rows.push(money("total_restatements", self.totals.restatements));
        rows.push(money("rounding", self.totals.rounding));
        rows.push(money("closing_balance", self.closing_balance));
        Table {
            name: format!("buyer-{}", self.buyer),
            header: BUYER_COLUMNS.to_vec(),
            rows,
        }
    }
}

/// The `end_reason` cell: the reason's snake_case name, empty while the lease runs on.
pub(crate) fn end_reason_cell(reason: Option<EndReason>) -> Cell {
    reason.map_or(Cell::Empty, |r| Cell::Text(r.as_str().to_string()))
}

impl DeliveryFailureLine {
    /// Its row in a statement table with `header`: `section`, lease, SKU, region, GPUs,
    /// `start` = the failure time, 0 billed seconds, 0.00 in `amount_column`, and
    /// `end_reason` `not_delivered`.
    pub(crate) fn row(
        &self,
        header: &[&'static str],
        section: &str,
        amount_column: &str,
        tz: chrono_tz::Tz,
    ) -> Vec<Cell> {
        RowBuilder::new(header)
            .set("section", Cell::Text(section.to_string()))
            .set("lease_id", Cell::Int(self.lease.0))
            .set("sku", Cell::Text(self.sku.clone()))
            .set("region", Cell::Text(self.region.clone()))
            .set("gpus", Cell::Int(u64::from(self.gpus)))
            .set("start", Cell::Time { ms: self.at_ms, tz })
            .set("billed_seconds", Cell::Int(0))
            .set(amount_column, Cell::Money(self.amount))
            .set("end_reason", end_reason_cell(Some(EndReason::NotDelivered)))
            .build()
    }
}
