//! Platform summary (issue 3): GMV, fee revenue, SLA credits, GPU-hours
//! sold, by SKU and by region, and utilisation of listed capacity.
//!
//! Definitions (all over lease seconds that start in the period):
//! * `gmv`: amount billed (price × GPUs × billed seconds / 3600), CNY;
//! * `unpaid`: part of `gmv` not collected (insufficient funds), CNY;
//! * `fee_revenue`: platform fee on collected charges, CNY;
//! * `sla_credits`: SLA credits posted in the period, CNY;
//! * `gpu_hours`: billed seconds × GPUs / 3600;
//! * `listed_gpu_hours`: GPU-hours of `ListedCapacity` inside the period;
//! * `utilisation`: `gpu_hours / listed_gpu_hours` (4 places; empty when
//!   nothing was listed; can exceed 1 if listings are incomplete).
//!
//! The `total` row prints each column's rounded exact total; the rows of each grouping
//! are printed column by column with [`allocate`] (largest remainder, issue 17), so they
//! add up exactly to the `total` row, and a SKU or region alone prints the same figures
//! as the total (and as the statements, for an amount alone on them).

use super::table::{Cell, RowBuilder, Table};
use super::{Period, PeriodInfo, slice_nums};
use crate::error::SettlementError;
use crate::ledger::{Ledger, TransferKind};
use crate::money::{FEN_DP, HOURS_DP, allocate, round_dp};
use rust_decimal::Decimal;
use serde::Serialize;
use std::collections::BTreeMap;

/// One row of the platform summary. Money printed CNY (0.01), hours and
/// ratios to 4 places.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SummaryRow {
    /// SKU or region id, or `"total"`.
    pub key: String,
    /// Lease slices with billed seconds in the period.
    pub lease_slices: u64,
    /// GPU-hours sold.
    pub gpu_hours: Decimal,
    /// GPU-hours listed.
    pub listed_gpu_hours: Decimal,
    /// `gpu_hours / listed_gpu_hours`, if anything was listed.
    pub utilisation: Option<Decimal>,
    /// Gross merchandise value (billed), CNY.
    pub gmv: Decimal,
    /// Billed but not collected, CNY.
    pub unpaid: Decimal,
    /// Platform fee revenue, CNY.
    pub fee_revenue: Decimal,
    /// SLA credits granted, CNY.
    pub sla_credits: Decimal,
}

/// The platform summary for one period.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlatformSummary {
    /// The period.
    pub period: PeriodInfo,
    /// One row per SKU, by SKU id.
    pub by_sku: Vec<SummaryRow>,
    /// One row per region, by region id.
    pub by_region: Vec<SummaryRow>,
    /// Totals (equal to the column sums of either grouping).
    pub total: SummaryRow,
}

#[derive(Debug, Clone, Default)]
struct Agg {
    slices: u64,
    gpu_seconds: u128,
    listed_gpu_ms: u128,
    amount: Decimal,
    unpaid: Decimal,
    fee: Decimal,
    sla: Decimal,
}

impl Agg {
    fn add(&mut self, o: &Agg) {
        self.slices += o.slices;
        self.gpu_seconds += o.gpu_seconds;
        self.listed_gpu_ms += o.listed_gpu_ms;
        self.amount += o.amount;
        self.unpaid += o.unpaid;
        self.fee += o.fee;
        self.sla += o.sla;
    }
    fn hours(&self) -> Decimal {
        Decimal::from_i128_with_scale(i128::try_from(self.gpu_seconds).unwrap_or(i128::MAX), 0)
            / Decimal::from(3600)
    }
    fn listed_hours(&self) -> Decimal {
        Decimal::from_i128_with_scale(i128::try_from(self.listed_gpu_ms).unwrap_or(i128::MAX), 0)
            / Decimal::from(3_600_000)
    }
    fn utilisation(&self) -> Option<Decimal> {
        if self.listed_gpu_ms == 0 {
            return None;
        }
        let sold =
            Decimal::from_i128_with_scale(i128::try_from(self.gpu_seconds).unwrap_or(i128::MAX), 0);
        let listed = Decimal::from_i128_with_scale(
            i128::try_from(self.listed_gpu_ms).unwrap_or(i128::MAX),
            0,
        );
        Some(round_dp(sold * Decimal::from(1000) / listed, HOURS_DP))
    }
}

/// The rows of one grouping (key order), each column allocated to its rounded total.
fn allocated_rows(named: &[(&str, Agg)]) -> Vec<SummaryRow> {
    let column = |f: fn(&Agg) -> Decimal, dp: u32| {
        allocate(&named.iter().map(|(_, a)| f(a)).collect::<Vec<_>>(), dp).lines
    };
    let hours = column(Agg::hours, HOURS_DP);
    let listed = column(Agg::listed_hours, HOURS_DP);
    let gmv = column(|a| a.amount, FEN_DP);
    let unpaid = column(|a| a.unpaid, FEN_DP);
    let fee = column(|a| a.fee, FEN_DP);
    let sla = column(|a| a.sla, FEN_DP);
    named
        .iter()
        .enumerate()
        .map(|(i, (key, a))| SummaryRow {
            key: key.to_string(),
            lease_slices: a.slices,
            gpu_hours: hours[i],
            listed_gpu_hours: listed[i],
            utilisation: a.utilisation(),
            gmv: gmv[i],
            unpaid: unpaid[i],
            fee_revenue: fee[i],
            sla_credits: sla[i],
        })
        .collect()
}

impl Ledger {
    /// The platform summary for `period`.
    ///
    /// # Errors
    /// [`SettlementError::NotAccrued`] if an active lease is not accrued
    /// through the period end.
    pub fn platform_summary(&self, period: &Period) -> Result<PlatformSummary, SettlementError> {
        self.check_accrued(self.active.iter(), period.to_ms)?;
        let (from, to) = (period.from_ms, period.to_ms);
        let mut by_sku: BTreeMap<u32, Agg> = BTreeMap::new();
        let mut by_region: BTreeMap<u32, Agg> = BTreeMap::new();
        for st in self.leases.values() {
            let Some(n) = slice_nums(st, from, to) else {
                continue;
            };
            let a = Agg {
                slices: 1,
                gpu_seconds: u128::from(n.billed_seconds) * u128::from(st.gpus),
                listed_gpu_ms: 0,
                amount: n.amount,
                unpaid: n.amount - n.collected,
                fee: n.fee,
                sla: Decimal::ZERO,
            };
            by_sku.entry(st.sku).or_default().add(&a);
            by_region.entry(st.region).or_default().add(&a);
        }
        for t in &self.books.journal {
            if let TransferKind::SlaCredit { lease } = t.kind
                && t.at_ms >= from
                && t.at_ms < to
                && let Some(st) = self.leases.get(&lease)
            {
                by_sku.entry(st.sku).or_default().sla += t.amount;
                by_region.entry(st.region).or_default().sla += t.amount;
            }
        }
        for l in &self.listings {
            let overlap = l.to_ms.min(to) - l.from_ms.max(from);
            if overlap > 0 {
                let gpu_ms = u128::from(overlap.unsigned_abs()) * u128::from(l.gpus);
                by_sku.entry(l.sku).or_default().listed_gpu_ms += gpu_ms;
                by_region.entry(l.region).or_default().listed_gpu_ms += gpu_ms;
            }
        }
        let mut total = Agg::default();
        for a in by_sku.values() {
            total.add(a);
        }
        let rows = |groups: BTreeMap<u32, Agg>| {
            let mut named: Vec<(&str, Agg)> =
                groups.into_iter().map(|(k, a)| (self.name(k), a)).collect();
            named.sort_by(|x, y| x.0.cmp(y.0));
            allocated_rows(&named)
        };
        let by_sku = rows(by_sku);
        let by_region = rows(by_region);
        let total = allocated_rows(&[("total", total)]).remove(0);
        Ok(PlatformSummary {
            period: period.info(),
            by_sku,
            by_region,
            total,
        })
    }
}

/// CSV/XLSX columns of the platform summary, in order.
pub const PLATFORM_COLUMNS: [&str; 11] = [
    "grouping",
    "key",
    "lease_slices",
    "gpu_hours",
    "listed_gpu_hours",
    "utilisation",
    "gmv_cny",
    "unpaid_cny",
    "fee_revenue_cny",
    "sla_credits_cny",
    "period",
];

impl PlatformSummary {
    /// The summary as a table with [`PLATFORM_COLUMNS`]: `sku` rows, then
    /// `region` rows, then the `total` row (whose `period` column holds
    /// `from/to zone`).
    pub fn table(&self) -> Table {
        let h = &PLATFORM_COLUMNS[..];
        let row = |grouping: &str, r: &SummaryRow| {
            RowBuilder::new(h)
                .set("grouping", Cell::Text(grouping.to_string()))
                .set("key", Cell::Text(r.key.clone()))
                .set("lease_slices", Cell::Int(r.lease_slices))
                .set("gpu_hours", Cell::Number(r.gpu_hours))
                .set("listed_gpu_hours", Cell::Number(r.listed_gpu_hours))
                .set(
                    "utilisation",
                    r.utilisation.map(Cell::Number).unwrap_or(Cell::Empty),
                )
                .set("gmv_cny", Cell::Money(r.gmv))
                .set("unpaid_cny", Cell::Money(r.unpaid))
                .set("fee_revenue_cny", Cell::Money(r.fee_revenue))
                .set("sla_credits_cny", Cell::Money(r.sla_credits))
        };
        let mut rows: Vec<Vec<Cell>> = Vec::new();
        rows.extend(self.by_sku.iter().map(|r| row("sku", r).build()));
        rows.extend(self.by_region.iter().map(|r| row("region", r).build()));
        let p = &self.period;
        rows.push(
            row("total", &self.total)
                .set(
                    "period",
                    Cell::Text(format!("{}/{} {}", p.from_local, p.to_local, p.time_zone)),
                )
                .build(),
        );
        Table {
            name: "platform".to_string(),
            header: PLATFORM_COLUMNS.to_vec(),
            rows,
        }
    }
}
