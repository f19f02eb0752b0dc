//! Wall-clock time for the run loop, injected (STYLE model 7: the agent takes a `Clock`, never
//! `SystemTime::now()` inside its logic). A lease's provisioning deadline is placed on this
//! clock from the time left the exchange sends with the lease (`deadline_in_ms`,
//! [`crate::jobs::local_deadline`]), so a host clock that is off does not shorten a hook's
//! budget (issue 25); the heartbeat loop logs the clock's offset from the exchange
//! ([`crate::node::note_clock_offset`]). The provision hook's budget keeps
//! [`crate::jobs::PROVISION_REPORT_MARGIN_MS`] for the report. Waits and timeouts use tokio's
//! monotonic time, not this clock.

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
