//! The supplier websocket (docs/api.md §3.4.1): kept open while the agent runs, reconnected
//! with jittered exponential backoff ([`gpux_client::backoff`]; a connection that stayed up
//! [`backoff::RECONNECT_STABLE_MS`] starts the sequence again). A node key's connection gets
//! its node's delivery events only; with an account key, events naming another node are
//! skipped.
//!
//! Events are hints, never state: `lease_assigned`, `lease_ended`, `lease_wiping` and
//! `teardown_overdue` wake the run loop to reconcile from `GET /v1/nodes/{id}/leases`, and so
//! does every (re)connect (events sent while the agent was away are not replayed). The wake-up
//! is a [`Notify`]: any number of events before the run loop gets to them make one reconcile,
//! so nothing queues up here. Notices, readiness, wipes recorded and holds are logged.
//!
//! Bounds: connecting and closing by the client's timeout ([`crate::run::REQUEST_TIMEOUT_MS`]);
//! a read by the client's keepalive (a silent peer is found dead after
//! [`gpux_client::ws::KEEPALIVE_IDLE_MS`] plus the timeout); every wait races the stop.

use crate::error::AgentError;
use crate::run::{REQUEST_TIMEOUT_MS, bounded, is_fatal, sleep_unless_stopping};
use gpux_client::wire::ws::ServerMsg;
use gpux_client::{Client, ClientError, WsSession, backoff};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

/// Follows the node's events until the agent stops (`Ok`) or the exchange refuses the key
/// for good (401, 403).
pub async fn follow(
    client: Client,
    node_id: String,
    wake: Arc<Notify>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), AgentError> {
    let mut attempt: u32 = 0;
    loop {
        let Some(opened) = bounded(&mut stop, REQUEST_TIMEOUT_MS, client.connect_ws()).await else {
            return Ok(());
        };
        let mut retry_after = None;
        match opened.unwrap_or(Err(ClientError::Timeout)) {
            Ok(session) => {
                let up = Instant::now();
                tracing::info!(node = %node_id, "websocket connected");
                wake.notify_one();
                let Some(why) = read(session, &node_id, &wake, &mut stop).await else {
                    return Ok(());
                };
                tracing::warn!(reason = %why, "websocket lost: reconnecting");
                if up.elapsed() >= Duration::from_millis(backoff::RECONNECT_STABLE_MS) {
                    attempt = 0;
                }
            }
            Err(e) if is_fatal(&e) => return Err(AgentError::refused("open the websocket", e)),
            Err(e) => {
                tracing::warn!(error = %e, "websocket connect failed");
                retry_after = e.retry_after();
            }
        }
        let wait = backoff::delay(attempt, retry_after);
        attempt = attempt.saturating_add(1);
        if sleep_unless_stopping(wait, &mut stop).await.is_none() {
            return Ok(());
        }
    }
}

/// Reads events until the connection fails (why) or the agent stops (`None`, after closing it).
async fn read(
    mut session: WsSession,
    node_id: &str,
    wake: &Notify,
    stop: &mut watch::Receiver<bool>,
) -> Option<String> {
    loop {
        let next = tokio::select! {
            m = session.next() => Some(m),
            _ = stop.wait_for(|s| *s) => None,
        };
        let Some(next) = next else {
            let _ = session.close().await; // bounded by the client's timeout
            return None;
        };
        match next {
            Ok(m) => on_event(&m, node_id, wake),
            Err(ClientError::Decode(e)) => {
                tracing::warn!(error = %e, "unreadable websocket message skipped")
            }
            Err(e) => {
                let frame = session
                    .close_frame()
                    .map(|(code, reason)| format!(" (close {code} {reason})"))
                    .unwrap_or_default();
                return Some(format!("{e}{frame}"));
            }
        }
    }
}

/// Logs an event and wakes the run loop for those that change what it must do.
fn on_event(m: &ServerMsg, node_id: &str, wake: &Notify) {
    let ours = |n: &str| n == node_id;
    match m {
        ServerMsg::LeaseAssigned {
            lease_id,
            node_id: n,
            deadline_ms,
            ..
        } if ours(n) => {
            tracing::info!(lease = %lease_id, ?deadline_ms, "lease assigned");
            wake.notify_one();
        }
        ServerMsg::LeaseWiping {
            lease_id,
            node_id: n,
            ..
        } if n.as_deref().is_none_or(ours) => {
            tracing::info!(lease = %lease_id, "lease to wipe");
            wake.notify_one();
        }
        ServerMsg::LeaseEnded {
            lease_id, reason, ..
        } => {
            tracing::info!(lease = %lease_id, ?reason, "lease ended");
            wake.notify_one();
        }
        ServerMsg::TeardownOverdue { lease_id, .. } => {
            tracing::warn!(lease = %lease_id, "teardown overdue: the exchange holds the node");
            wake.notify_one();
        }
        ServerMsg::LeaseNotice {
            lease_id,
            deadline_ms,
            reason,
            ..
        } => tracing::info!(lease = %lease_id, deadline_ms, ?reason, "lease got notice"),
        ServerMsg::NodeHeld {
            node_id: n, reason, ..
        } if ours(n) => {
            tracing::warn!(
                ?reason,
                "node held off the market: the supplier resumes it (POST /v1/nodes/{{id}}/resume)"
            );
        }
        ServerMsg::NodeResumed {
            node_id: Some(n), ..
        } if ours(n) => {
            tracing::info!("node resumed");
        }
        other => tracing::debug!(event = ?other, "websocket message"),
    }
}
