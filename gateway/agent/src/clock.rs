//! Wall-clock time for the run loop, injected (STYLE model 7: the agent takes a `Clock`, never
//! `SystemTime::now()` inside its logic). The agent compares it with the exchange's times —
//! a lease's provisioning deadline — so the host's clock should be synchronized (NTP); the
//! provision hook's budget keeps [`crate::jobs::PROVISION_REPORT_MARGIN_MS`] for that and the
//! report. Waits and timeouts use tokio's monotonic time, not this clock.

/// Where the wall-clock time comes from.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }
}
