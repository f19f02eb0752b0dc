//! The reconnect and retry rule (docs/api.md §3.8 "Reconnecting"): jittered exponential
//! backoff with full jitter. Before retry `n` (0-based) wait a uniformly random time in
//! `0..=min(RECONNECT_CAP_MS, RECONNECT_BASE_MS × RECONNECT_FACTOR^n)`, but never less than a
//! `Retry-After` the server sent. The random spread keeps many clients cut off by one restart
//! from coming back in one burst; the cap keeps a client's wait after a long outage short.

use std::time::Duration;

/// Ceiling of the first wait, ms.
pub const RECONNECT_BASE_MS: u64 = 100;
/// Growth of the ceiling per failed attempt.
pub const RECONNECT_FACTOR: u64 = 2;
/// Largest ceiling, ms.
pub const RECONNECT_CAP_MS: u64 = 5_000;
/// A connection that stayed up this long counts as healthy: the next failure starts the
/// sequence again from [`RECONNECT_BASE_MS`], ms.
pub const RECONNECT_STABLE_MS: u64 = 5_000;
/// Longest `Retry-After` honoured between two attempts, ms (a longer one ends the retries).
pub const MAX_RETRY_AFTER_MS: u64 = 30_000;

/// The ceiling of the wait before retry `attempt` (0-based), ms.
pub fn ceiling_ms(attempt: u32) -> u64 {
    let growth = RECONNECT_FACTOR.saturating_pow(attempt);
    RECONNECT_BASE_MS
        .saturating_mul(growth)
        .min(RECONNECT_CAP_MS)
}

/// The wait before retry `attempt`: full jitter under [`ceiling_ms`], at least `retry_after`.
pub fn delay(attempt: u32, retry_after: Option<Duration>) -> Duration {
    let jitter = Duration::from_millis(fastrand::u64(0..=ceiling_ms(attempt)));
    jitter.max(retry_after.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceilings_double_from_the_base_up_to_the_cap() {
        let c: Vec<u64> = (0..9).map(ceiling_ms).collect();
        assert_eq!(c, vec![100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
        assert_eq!(ceiling_ms(u32::MAX), RECONNECT_CAP_MS);
    }

    #[test]
    fn delays_stay_under_the_ceiling_and_respect_retry_after() {
        for attempt in 0..12 {
            for _ in 0..200 {
                let d = delay(attempt, None);
                assert!(d <= Duration::from_millis(ceiling_ms(attempt)), "{d:?}");
            }
        }
        // Full jitter spreads over the whole range (not all near the ceiling).
        let small = (0..400)
            .filter(|_| delay(6, None) < Duration::from_millis(2_500))
            .count();
        assert!((100..=300).contains(&small), "{small}");
        let d = delay(0, Some(Duration::from_secs(2)));
        assert_eq!(d, Duration::from_secs(2));
    }
}
