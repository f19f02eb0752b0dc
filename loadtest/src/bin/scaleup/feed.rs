//! The buyer's websocket during a run: connected before the bid, it timestamps each lease's
//! `lease_ready` as the buyer receives it (docs/api.md §3.4), and notes fills, ends other than
//! releases, migrations, and every close of the connection.
//!
//! A connection that closes (the server closes a buyer connection whose private events
//! overflow its outbox, docs/api.md §3.7: a 1,000-lease fill is ≥ 3,000 events in one commit)
//! is reconnected at once; events sent while it was away are not replayed, so the run reads
//! the leases' `ready_ms` over REST for what the websocket missed (crate `run`). Every close is
//! recorded with its reason, so the report says how much the websocket saw.

use gpux_client::Client;
use gpux_client::wire::ws::ServerMsg;
use gpux_client::{ClientError, WsSession};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Wait before reconnecting after a failed connect, ms.
pub const RECONNECT_MS: u64 = 50;
/// Longest wait for the first connection, ms.
pub const CONNECT_TIMEOUT_MS: u64 = 15_000;

/// A close of the buyer's websocket.
#[derive(Clone, Debug, Serialize)]
pub struct Close {
    /// When, ms after the run's bid acknowledgement (negative: before it).
    #[serde(skip)]
    pub at: Option<Instant>,
    /// ms after the bid's acknowledgement (filled in by the report).
    pub after_ack_ms: Option<f64>,
    /// Close code and reason, or the error.
    pub reason: String,
}

/// What the websocket saw.
#[derive(Debug, Default)]
pub struct FeedLog {
    /// Connections made.
    pub connects: u32,
    /// Closes and failed connects.
    pub closes: Vec<Close>,
    /// Lease id → (receipt, the event's `at_ms`).
    pub ready: HashMap<String, (Instant, i64)>,
    /// `fill` events.
    pub fills: usize,
    /// Leases that ended other than by release: (lease, reason).
    pub ended: Vec<(String, String)>,
    /// Failovers: (from, to).
    pub migrated: Vec<(String, String)>,
}

/// The running follower.
pub struct Feed {
    /// What it saw so far.
    pub log: Arc<Mutex<FeedLog>>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Feed {
    /// Connects the buyer's websocket and follows it; answers once the first connection is up.
    ///
    /// # Errors
    /// No connection within [`CONNECT_TIMEOUT_MS`].
    pub async fn start(buyer: Client) -> anyhow::Result<Feed> {
        let log = Arc::new(Mutex::new(FeedLog::default()));
        let (stop, stop_rx) = watch::channel(false);
        let (up_tx, up_rx) = oneshot::channel();
        let task = tokio::spawn(follow(buyer, log.clone(), stop_rx, up_tx));
        let feed = Feed { log, stop, task };
        match tokio::time::timeout(Duration::from_millis(CONNECT_TIMEOUT_MS), up_rx).await {
            Ok(Ok(())) => Ok(feed),
            _ => {
                feed.stop().await;
                anyhow::bail!(
                    "the buyer's websocket did not connect within {CONNECT_TIMEOUT_MS} ms"
                )
            }
        }
    }

    /// Stops following.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(Duration::from_millis(CONNECT_TIMEOUT_MS), self.task).await;
    }
}

async fn follow(
    buyer: Client,
    log: Arc<Mutex<FeedLog>>,
    mut stop: watch::Receiver<bool>,
    up: oneshot::Sender<()>,
) {
    let mut up = Some(up);
    loop {
        let session = tokio::select! {
            s = buyer.connect_ws() => s,
            _ = stop.wait_for(|s| *s) => return,
        };
        let mut session = match session {
            Ok(s) => s,
            Err(e) => {
                record_close(&log, format!("connect failed: {e}"));
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(RECONNECT_MS)) => continue,
                    _ = stop.wait_for(|s| *s) => return,
                }
            }
        };
        lock(&log).connects += 1;
        if let Some(tx) = up.take() {
            let _ = tx.send(());
        }
        tokio::select! {
            reason = read_until_closed(&mut session, &log) => record_close(&log, reason),
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// Records every message until the connection ends; answers why it ended.
async fn read_until_closed(session: &mut WsSession, log: &Mutex<FeedLog>) -> String {
    loop {
        match session.next().await {
            Ok(msg) => record(log, msg),
            Err(ClientError::Decode(_)) => {}
            Err(e) => {
                return match session.close_frame() {
                    Some((code, reason)) => format!("closed {code} {reason}"),
                    None => format!("ended: {e}"),
                };
            }
        }
    }
}

fn record(log: &Mutex<FeedLog>, msg: ServerMsg) {
    let now = Instant::now();
    let mut l = lock(log);
    match msg {
        ServerMsg::LeaseReady {
            lease_id, at_ms, ..
        } => {
            l.ready.entry(lease_id).or_insert((now, at_ms));
        }
        ServerMsg::Fill { .. } => l.fills += 1,
        ServerMsg::LeaseEnded {
            lease_id, reason, ..
        } => {
            let reason = serde_json::to_value(reason)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default();
            if reason != "released" {
                l.ended.push((lease_id, reason));
            }
        }
        ServerMsg::LeaseMigrated {
            from_lease_id,
            to_lease_id,
            ..
        } => l.migrated.push((from_lease_id, to_lease_id)),
        _ => {}
    }
}

fn record_close(log: &Mutex<FeedLog>, reason: String) {
    lock(log).closes.push(Close {
        at: Some(Instant::now()),
        after_ack_ms: None,
        reason,
    });
}

/// The log, even if a holder panicked (the data is plain counters and maps).
pub fn lock(log: &Mutex<FeedLog>) -> std::sync::MutexGuard<'_, FeedLog> {
    log.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
