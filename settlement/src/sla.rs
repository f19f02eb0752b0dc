//! SLA credits for `node_failure` leases (issue 3, "SLA credit").
//!
//! Rule: the buyer of a lease ended by `node_failure` is credited
//! `multiple × charge(outage)`, where the outage runs from the failure (the
//! lease's billing end = last heartbeat) until the replacement lease
//! started, capped at `cap` (default 1 hour); with no replacement the
//! outage is the cap. The outage is billed per started second like a lease.
//! The credit never exceeds what the buyer paid for that lease, and is
//! funded from the supplier's payable. Preemption with notice earns nothing.
//! Seed 004: compensation as a multiple of the fee, not "extra time".
//!
//! Delivery (issue 15, docs/settlement.md "Delivery"): the basis is billed
//! time only. The ledger starts a lease at its ready time, so "what the
//! buyer paid for that lease" covers ready → failure, never provisioning; the
//! replacement counts as started when it is ready. A lease never delivered
//! has no ledger lease and earns no credit.

use crate::metering::{billed_seconds, cumulative_charge};
use crate::money::quantize;
use rust_decimal::Decimal;

/// Outage in ms from the failure at `failure_ms` until `replacement_start_ms`
/// (both ms since epoch), clamped to [0, `cap_ms`]; `cap_ms` when there was
/// no replacement (`None`).
pub fn outage_ms(failure_ms: i64, replacement_start_ms: Option<i64>, cap_ms: i64) -> i64 {
    match replacement_start_ms {
        Some(s) => s.saturating_sub(failure_ms).clamp(0, cap_ms.max(0)),
        None => cap_ms.max(0),
    }
}

/// SLA credit in CNY: `multiple × hourly × ceil(outage_ms / 1000) / 3600`,
/// capped at `lease_collected` (CNY the buyer paid for the lease).
/// `hourly` is price per GPU-hour × GPUs (CNY per hour).
///
/// Example: H100 at 22.50 CNY/GPU-hour × 8 GPUs, failover after 90 s,
/// multiple 10 → 10 × 180 × 90 / 3600 = 45.00 CNY (if the lease collected
/// at least that much).
pub fn sla_credit(
    hourly: Decimal,
    outage_ms: i64,
    multiple: Decimal,
    lease_collected: Decimal,
) -> Decimal {
    let base = cumulative_charge(hourly, billed_seconds(outage_ms));
    let credit = quantize(base * multiple);
    credit.min(lease_collected.max(Decimal::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn d(s: &str) -> Decimal {
        Decimal::from_str(s).expect("test literal")
    }

    #[test]
    fn outage_runs_from_failure_to_replacement_capped() {
        assert_eq!(outage_ms(1_000, Some(91_000), 3_600_000), 90_000);
        assert_eq!(outage_ms(1_000, Some(10_000_000), 3_600_000), 3_600_000);
        assert_eq!(outage_ms(1_000, None, 3_600_000), 3_600_000);
        // A replacement that started before the failure report: no outage.
        assert_eq!(outage_ms(5_000, Some(1_000), 3_600_000), 0);
    }

    #[test]
    fn credit_is_a_multiple_of_the_outage_charge_capped_at_collected() {
        // 180 CNY/h, 90 s -> 4.50, x10 = 45.00
        assert_eq!(sla_credit(d("180"), 90_000, d("10"), d("1000")), d("45"));
        // 0.4 s outage is billed as one second: 180/3600 = 0.05, x10 = 0.50
        assert_eq!(sla_credit(d("180"), 400, d("10"), d("1000")), d("0.5"));
        // capped at what the lease collected
        assert_eq!(
            sla_credit(d("180"), 90_000, d("10"), d("12.34")),
            d("12.34")
        );
        assert_eq!(sla_credit(d("180"), 90_000, d("10"), d("-1")), d("0"));
    }
}
