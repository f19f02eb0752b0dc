//! Metering: per-started-second billing (issue 3, "Metering").
//!
//! A lease is billed per started second: the billed seconds for a duration
//! of `d` ms are `ceil(d / 1000)`; the charge for `s` seconds is
//! `price per GPU-hour × GPUs × s / 3600` CNY, kept to
//! [`crate::money::INTERNAL_DP`] places.
//!
//! Second `k` (0-based) of a lease starts at `start_ms + 1000 k`. A lease
//! slice over a period [from, to) holds the seconds that *start* inside it,
//! so a lease ending exactly at midnight contributes nothing to the next
//! day, and slices over consecutive periods add up to the lease total
//! because every amount is a difference of one cumulative function
//! ([`cumulative_charge`]).

use crate::money::quantize;
use rust_decimal::Decimal;

/// Billed seconds for a duration of `duration_ms` milliseconds: rounded up
/// to whole seconds; 0 for a zero or negative duration. 400 ms → 1 s,
/// 1000 ms → 1 s, 1001 ms → 2 s.
pub fn billed_seconds(duration_ms: i64) -> u64 {
    if duration_ms <= 0 {
        0
    } else {
        // duration_ms > 0, so this cannot overflow or be negative.
        (duration_ms as u64).div_ceil(1000)
    }
}

/// Number of a lease's seconds that start strictly before `t_ms`
/// (ms since epoch), for a lease starting at `start_ms`:
/// `ceil((t - start) / 1000)`, or 0 when `t <= start`.
pub fn seconds_started_before(start_ms: i64, t_ms: i64) -> u64 {
    if t_ms <= start_ms {
        0
    } else {
        let d = (t_ms as i128) - (start_ms as i128);
        let s = (d + 999) / 1000;
        u64::try_from(s).unwrap_or(u64::MAX)
    }
}

/// Charge in CNY for the first `seconds` seconds at `hourly` CNY per hour
/// (price per GPU-hour × GPUs): `hourly × seconds / 3600`, quantised to 12
/// decimal places. All lease amounts are differences of this function.
pub fn cumulative_charge(hourly: Decimal, seconds: u64) -> Decimal {
    quantize(hourly * Decimal::from(seconds) / Decimal::from(3600))
}

/// Charge in CNY for a whole lease of `duration_ms` at `price_per_gpu_hour`
/// (CNY per GPU-hour) × `gpus`, with no minimum: e.g. 22.50 CNY/GPU-hour,
/// 8 GPUs, 90 s → 22.50 × 8 × 90 / 3600 = 4.50 CNY.
pub fn lease_charge(price_per_gpu_hour: Decimal, gpus: u32, duration_ms: i64) -> Decimal {
    cumulative_charge(
        price_per_gpu_hour * Decimal::from(gpus),
        billed_seconds(duration_ms),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn d(s: &str) -> Decimal {
        Decimal::from_str(s).expect("test literal")
    }

    #[test]
    fn billed_seconds_round_up_per_started_second() {
        assert_eq!(billed_seconds(0), 0);
        assert_eq!(billed_seconds(-5), 0);
        assert_eq!(billed_seconds(1), 1);
        assert_eq!(billed_seconds(400), 1);
        assert_eq!(billed_seconds(1000), 1);
        assert_eq!(billed_seconds(1001), 2);
        assert_eq!(billed_seconds(30 * 86_400_000), 2_592_000);
    }

    #[test]
    fn seconds_started_before_counts_second_starts() {
        assert_eq!(seconds_started_before(1000, 1000), 0);
        assert_eq!(seconds_started_before(1000, 1001), 1);
        assert_eq!(seconds_started_before(1000, 2000), 1);
        assert_eq!(seconds_started_before(1000, 2001), 2);
        assert_eq!(seconds_started_before(1000, 0), 0);
    }

    #[test]
    fn charges_are_price_times_gpus_times_seconds_over_3600() {
        // 22.50 x 8 x 90 / 3600 = 4.50
        assert_eq!(lease_charge(d("22.50"), 8, 90_000), d("4.5"));
        // 22.50 / 3600 = 0.00625 for one second (and for 0.4 s)
        assert_eq!(lease_charge(d("22.50"), 1, 400), d("0.00625"));
        assert_eq!(lease_charge(d("22.50"), 1, 1000), d("0.00625"));
        // 3.25 / 3600 = 0.000902777..., kept to 12 places
        assert_eq!(lease_charge(d("3.25"), 1, 1000), d("0.000902777778"));
        // 30 days of 8 x H100 at 22.50: 720 h x 180 = 129600
        assert_eq!(lease_charge(d("22.50"), 8, 30 * 86_400_000), d("129600"));
    }
}
