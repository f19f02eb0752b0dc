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
