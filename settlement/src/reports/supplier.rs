//! Supplier payout statement (issue 3): gross earnings per lease slice
//! (with the lease's ready time and end reason, issue 15), platform fee,
//! net, SLA deductions, adjustments, payouts, payable, and the period's
//! failed deliveries (listed and counted, 0.00 each).
//!
//! Identity (printed): `closing = opening + gross − fee − sla_deductions +
//! adjustments − payouts + restatements + rounding` (restatements, issue 17: the lines posted
//! in the period that restate a closed period, listed apart with its id), and per line `net = gross − fee`. Opening and
//! closing are the rounded exact payables; each column (gross, fee) and section (SLA
//! deductions, adjustments, payouts) is printed with [`allocate_fen`] (largest remainder,
//! issue 17), so a fee alone prints `round_fen(fee)` as on the platform summary. Net is
//! the one derived figure (`gross − fee` as printed): it appears on no other report. The
//! `rounding` line (尾差) closes the identity. Nothing is negated after rounding, so no
//! line prints `-0.00`.

use super::buyer::{CashLine, CreditLine, DeliveryFailureLine, RestatementLine, end_reason_cell};
use super::table::{Cell, RowBuilder, Table};
use super::{LeaseSlice, Period, PeriodInfo};
use crate::error::SettlementError;
use crate::ids::{Account, AccountId, LeaseId};
use crate::input::EndReason;
use crate::ledger::{Ledger, TransferKind};
use crate::money::{FEN_DP, allocate_fen, round_dp, round_fen, rounding_difference};
use rust_decimal::Decimal;
use serde::Serialize;

/// One lease slice on a supplier statement. Amounts printed CNY.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EarningLine {
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
    /// Slice start, ms since epoch.
    pub start_ms: i64,
    /// Slice end, ms since epoch.
    pub end_ms: i64,
    /// Billed seconds in the slice.
    pub billed_seconds: u64,
    /// Unit price, CNY per GPU-hour.
    pub unit_price: Decimal,
    /// Gross earnings: charges collected from the buyer for the slice.
    pub gross: Decimal,
    /// Platform fee on `gross`.
    pub fee: Decimal,
    /// `gross − fee`.
    pub net: Decimal,
    /// Why the lease ended, if it ended by the period end; `None` while it runs past it.
    pub end_reason: Option<EndReason>,
}

/// Section totals (sums of printed lines), CNY.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SupplierTotals {
    /// Σ gross.
    pub gross: Decimal,
    /// Σ platform fee.
    pub fee: Decimal,
    /// Σ net.
    pub net: Decimal,
    /// Σ SLA deductions.
    pub sla_deductions: Decimal,
    /// Σ adjustments (signed, + to the supplier).
    pub adjustments: Decimal,
    /// Σ payouts.
    pub payouts: Decimal,
    /// Σ restatements (signed, + to the supplier; issue 17).
    pub restatements: Decimal,
    /// The printed rounding difference (尾差), at most ±0.03 CNY (±0.04 with restatements):
    /// `closing − (opening + gross − fee − sla_deductions + adjustments − payouts +
    /// restatements)`.
    pub rounding: Decimal,
    /// Number of failed deliveries in the period (a count, not CNY).
    pub failed_deliveries: u64,
}

/// A supplier payout statement for one period. Amounts printed CNY.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SupplierStatement {
    /// The supplier.
    pub supplier: AccountId,
    /// The period.
    pub period: PeriodInfo,
    /// Payable at the period start.
    pub opening_payable: Decimal,
    /// One line per lease slice with billed seconds in the period.
    pub earnings: Vec<EarningLine>,
    /// SLA credits funded from the payable in the period, but those that restate a closed
    /// period.
    pub sla_deductions: Vec<CreditLine>,
    /// Adjustments in the period (signed, + to the supplier), but those that restate a closed
    /// period.
    pub adjustments: Vec<CashLine>,
    /// Payouts in the period.
    pub payouts: Vec<CashLine>,
    /// SLA deductions and adjustments posted in the period that restate a closed period
    /// (issue 17), with its id; signed, + to the supplier.
    pub restatements: Vec<RestatementLine>,
    /// Leases this supplier failed to deliver in the period (charged 0.00).
    pub failed_deliveries: Vec<DeliveryFailureLine>,
    /// Section totals.
    pub totals: SupplierTotals,
    /// Net payable at the period end.
    pub closing_payable: Decimal,
}

impl EarningLine {
    /// The earning line of slice `s` with printed gross `g` and fee `f` (CNY); net is
    /// `g − f` as printed (the one derived figure).
    fn of(s: &LeaseSlice, g: Decimal, f: Decimal) -> EarningLine {
        EarningLine {
            lease: s.lease,
            sku: s.sku.clone(),
            region: s.region.clone(),
            gpus: s.gpus,
            ready_ms: s.ready_ms,
            start_ms: s.start_ms,
            end_ms: s.end_ms,
            billed_seconds: s.billed_seconds,
            unit_price: s.price_per_gpu_hour,
            gross: g,
            fee: f,
            net: round_dp(g - f, FEN_DP),
            end_reason: s.end_reason,
        }
    }
}

impl Ledger {
    /// The payout statement of `supplier` for `period`.
    ///
    /// # Errors
    /// [`SettlementError::NotAccrued`] if one of the supplier's active leases
    /// is not accrued through the period end.
    pub fn supplier_statement(
        &self,
        supplier: AccountId,
        period: &Period,
    ) -> Result<SupplierStatement, SettlementError> {
        let lease_ids = self
            .leases_by_supplier
            .get(&supplier)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        self.check_accrued(lease_ids.iter(), period.to_ms)?;
        let account = Account::Supplier(supplier);
        let opening = self
            .account_turnover(account, i64::MIN, period.from_ms)
            .net();
        let tz = period.tz;
        let slices = self.slices_of(lease_ids, period);
        let closing = opening
            + self.journal_net(account, period)
            + slices.iter().map(|s| s.collected - s.fee).sum::<Decimal>();
        let gross = allocate_fen(&slices.iter().map(|s| s.collected).collect::<Vec<_>>());
        let fees = allocate_fen(&slices.iter().map(|s| s.fee).collect::<Vec<_>>());
        let earnings: Vec<EarningLine> = slices
            .iter()
            .zip(gross.lines.iter().zip(fees.lines.iter()))
            .map(|(s, (g, f))| EarningLine::of(s, *g, *f))
            .collect();
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
        let (sla_deductions, total_sla) = CreditLine::section(
            self,
            section(|k| matches!(k, TransferKind::SlaFunding { .. }), false),
            tz,
        );
        let (adjustments, total_adjustments) = CashLine::section(
            section(|k| matches!(k, TransferKind::Adjustment { .. }), true),
            tz,
        );
        let (payouts, total_payouts) = CashLine::section(
            section(|k| matches!(k, TransferKind::Payout { .. }), false),
            tz,
        );
        let failed_deliveries =
            self.failed_deliveries_in(self.failures_by_supplier.get(&supplier), period);
        let (opening_payable, closing_payable) = (round_fen(opening), round_fen(closing));
        let rounding = rounding_difference(
            closing_payable,
            [
                opening_payable,
                gross.total,
                -fees.total,
                -total_sla,
                total_adjustments,
                -total_payouts,
                total_restatements,
            ],
            FEN_DP,
        );
        let totals = SupplierTotals {
            gross: gross.total,
            fee: fees.total,
            net: round_dp(gross.total - fees.total, FEN_DP),
            sla_deductions: total_sla,
            adjustments: total_adjustments,
            payouts: total_payouts,
            restatements: total_restatements,
            rounding,
            failed_deliveries: failed_deliveries.len() as u64,
        };
        Ok(SupplierStatement {
            supplier,
            period: period.info(),
            opening_payable,
            earnings,
            sla_deductions,
            adjustments,
            payouts,
            restatements,
            failed_deliveries,
            totals,
            closing_payable,
        })
    }
}

/// CSV/XLSX columns of a supplier statement, in order. Issue 15 appended `ready` (the
/// lease's ready time), `end_reason` and `count` (on `total_failed_deliveries`) after the
/// issue 3 columns, so their positions are unchanged.
pub const SUPPLIER_COLUMNS: [&str; 18] = [
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
    "gross_cny",
    "fee_cny",
    "net_cny",
    "amount_cny",
    "ready",
    "end_reason",
    "count",
];

impl SupplierStatement {
    /// The statement as a table with [`SUPPLIER_COLUMNS`]. Sections:
    /// `period`, `opening_payable`, `earning`… (gross/fee/net columns),
    /// `sla_deduction`…, `adjustment`…, `payout`…, `failed_delivery`… (lease,
    /// SKU, region, GPUs, `start` = failure time, 0 billed seconds, 0.00,
    /// `end_reason` `not_delivered`), `restatement`… (issue 17: lines that restate a closed
    /// period; `reference` = `period:<id> <kind> …`, signed amount), `total_gross`,
    /// `total_fee`, `total_net`, `total_sla_deductions`, `total_adjustments`,
    /// `total_payouts`, `total_restatements`, `rounding` (issue 17: the printed rounding difference),
    /// `total_failed_deliveries` (in `count`),
    /// `closing_payable` (amount column). Earning rows carry `ready` and
    /// `end_reason`.
    pub fn table(&self) -> Table {
        let tz = self.period.tz();
        let h = &SUPPLIER_COLUMNS[..];
        let sec = |s: &str| RowBuilder::new(h).set("section", Cell::Text(s.to_string()));
        let money = |s: &str, d: Decimal| sec(s).set("amount_cny", Cell::Money(d)).build();
        let mut rows = vec![
            RowBuilder::period_row(h, &self.period),
            money("opening_payable", self.opening_payable),
        ];
        for l in &self.earnings {
            rows.push(
                sec("earning")
                    .set("lease_id", Cell::Int(l.lease.0))
                    .set("sku", Cell::Text(l.sku.clone()))
                    .set("region", Cell::Text(l.region.clone()))
                    .set("gpus", Cell::Int(u64::from(l.gpus)))
                    .set("start", Cell::Time { ms: l.start_ms, tz })
                    .set("end", Cell::Time { ms: l.end_ms, tz })
                    .set("billed_seconds", Cell::Int(l.billed_seconds))
                    .set("unit_price_cny_per_gpu_hour", Cell::Number(l.unit_price))
                    .set("gross_cny", Cell::Money(l.gross))
                    .set("fee_cny", Cell::Money(l.fee))
                    .set("net_cny", Cell::Money(l.net))
                    .set("ready", Cell::Time { ms: l.ready_ms, tz })
                    .set("end_reason", end_reason_cell(l.end_reason))
                    .build(),
            );
        }
        for l in &self.sla_deductions {
            rows.push(
                sec("sla_deduction")
                    .set("transfer_id", Cell::Int(l.transfer_id.0))
                    .set("lease_id", Cell::Int(l.lease.0))
                    .set("start", Cell::Time { ms: l.at_ms, tz })
                    .set("amount_cny", Cell::Money(l.amount))
                    .build(),
            );
        }
        for (s, lines) in [("adjustment", &self.adjustments), ("payout", &self.payouts)] {
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
        for l in &self.failed_deliveries {
            rows.push(l.row(h, "failed_delivery", "amount_cny", tz));
        }
        for l in &self.restatements {
            rows.push(l.row(h, tz));
        }
        rows.push(money("total_gross", self.totals.gross));
        rows.push(money("total_fee", self.totals.fee));
        rows.push(money("total_net", self.totals.net));
        rows.push(money("total_sla_deductions", self.totals.sla_deductions));
        rows.push(money("total_adjustments", self.totals.adjustments));
        rows.push(money("total_payouts", self.totals.payouts));
        rows.push(money("total_restatements", self.totals.restatements));
        rows.push(money("rounding", self.totals.rounding));
        rows.push(
            sec("total_failed_deliveries")
                .set("count", Cell::Int(self.totals.failed_deliveries))
                .build(),
        );
        rows.push(money("closing_payable", self.closing_payable));
        Table {
            name: format!("supplier-{}", self.supplier),
            header: SUPPLIER_COLUMNS.to_vec(),
            rows,
        }
    }
}
