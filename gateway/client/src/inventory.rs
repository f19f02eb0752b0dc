//! A SKU's live inventory: [`InventoryView`] (the pure rule of docs/api.md §3.5: snapshot,
//! then contiguous deltas) and [`InventoryStream`] (a websocket subscription that keeps the
//! view, checks `first_seq == last + 1` itself, and reconnects by the backoff rule).
//!
//! The stream's loop, per connection: connect (anonymous: public data, no private events to
//! fill the outbox) → `subscribe` → snapshot → deltas. It starts over on a new connection, from
//! a fresh snapshot, after a gap, a close (e.g. 1001 `server_shutdown`), a transport error or
//! a keepalive timeout, waiting `backoff::delay(attempt)` first. A server resync snapshot
//! (`resync: true`, the connection's outbox was full) needs no reconnect: it is the fresh
//! snapshot, and replaces the view. Either way the first update from the fresh snapshot has
//! `resynced: true`. Errors that a retry cannot fix (an unknown SKU, a refused key) end the
//! stream after yielding them once.

use crate::backoff;
use crate::client::Client;
use crate::error::ClientError;
use crate::ws::{WsOptions, WsSession};
use futures_util::Stream;
use gpux_wire::ws::{InventoryDelta, InventorySnapshot, ServerMsg};
use gpux_wire::{KindDto, LevelView};
use rust_decimal::Decimal;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;

/// A level's key: region, kind, price (numeric: `"20.5"` and `"20.5000"` are one level).
/// Ordered by region, then spot before preemptible, then price ascending: the first level of
/// a (region, kind) is its cheapest.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LevelKey {
    /// Region.
    pub region: String,
    /// Spot or preemptible.
    pub kind: KindDto,
    /// CNY per GPU-hour.
    pub price: Decimal,
}

fn kind_rank(k: KindDto) -> u8 {
    match k {
        KindDto::Spot => 0,
        KindDto::Preemptible => 1,
    }
}

impl Ord for LevelKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.region
            .cmp(&other.region)
            .then(kind_rank(self.kind).cmp(&kind_rank(other.kind)))
            .then(self.price.cmp(&other.price))
    }
}

impl PartialOrd for LevelKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl LevelKey {
    /// The key of a level.
    ///
    /// # Errors
    /// [`ViewError::BadPrice`] for a price that is not a decimal string.
    pub fn of(l: &LevelView) -> Result<LevelKey, ViewError> {
        let price = Decimal::from_str_exact(&l.price).map_err(|_| ViewError::BadPrice {
            price: l.price.clone(),
        })?;
        Ok(LevelKey {
            region: l.region.clone(),
            kind: l.kind,
            price,
        })
    }
}

/// Why a message could not be applied to a view.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ViewError {
    /// A delta before any snapshot (ignore it: the snapshot comes).
    #[error("a delta before the snapshot")]
    NoSnapshot,
    /// A delta that does not follow the view: a missed message. Resubscribe.
    #[error("gap: expected first_seq {expected}, got {first_seq}")]
    Gap {
        /// The view's last sequence number + 1.
        expected: u64,
        /// The delta's `first_seq`.
        first_seq: u64,
    },
    /// A price that is not a decimal string (the view is unchanged).
    #[error("level price {price:?} is not a decimal")]
    BadPrice {
        /// The price as sent.
        price: String,
    },
}

/// One SKU's (and region filter's) inventory, as a subscriber keeps it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InventoryView {
    seq: Option<u64>,
    levels: BTreeMap<LevelKey, LevelView>,
}

impl InventoryView {
    /// The last sequence number applied (`None` before the first snapshot).
    pub fn seq(&self) -> Option<u64> {
        self.seq
    }

    /// Levels with free GPUs.
    pub fn levels(&self) -> &BTreeMap<LevelKey, LevelView> {
        &self.levels
    }

    /// Free GPUs over every level.
    pub fn free_gpus(&self) -> u64 {
        self.levels.values().map(|l| u64::from(l.free_gpus)).sum()
    }

    /// The cheapest level of `kind` with at least `gpus` free on one node.
    pub fn best(&self, kind: KindDto, gpus: u32) -> Option<&LevelView> {
        self.levels
            .iter()
            .filter(|(k, l)| k.kind == kind && l.max_single_node >= gpus)
            .min_by(|(a, _), (b, _)| a.price.cmp(&b.price))
            .map(|(_, l)| l)
    }

    /// Replaces the view with a snapshot (step 1 and 3 of docs/api.md §3.5); unchanged on an
    /// error.
    ///
    /// # Errors
    /// [`ViewError::BadPrice`].
    pub fn apply_snapshot(&mut self, s: &InventorySnapshot) -> Result<(), ViewError> {
        let mut levels = BTreeMap::new();
        for l in s.levels.iter().filter(|l| l.free_gpus > 0) {
            levels.insert(LevelKey::of(l)?, l.clone());
        }
        self.levels = levels;
        self.seq = Some(s.seq);
        Ok(())
    }

    /// Applies a delta that follows the view (step 2): each level in order, `free_gpus == 0`
    /// removing it. Unchanged on an error.
    ///
    /// # Errors
    /// [`ViewError::NoSnapshot`], [`ViewError::Gap`], [`ViewError::BadPrice`].
    pub fn apply_delta(&mut self, d: &InventoryDelta) -> Result<(), ViewError> {
        let last = self.seq.ok_or(ViewError::NoSnapshot)?;
        let expected = last.saturating_add(1);
        if d.first_seq != expected {
            return Err(ViewError::Gap {
                expected,
                first_seq: d.first_seq,
            });
        }
        let keys = d
            .levels
            .iter()
            .map(LevelKey::of)
            .collect::<Result<Vec<_>, _>>()?;
        for (k, l) in keys.into_iter().zip(&d.levels) {
            if l.free_gpus == 0 {
                self.levels.remove(&k);
            } else {
                self.levels.insert(k, l.clone());
            }
        }
        self.seq = Some(d.last_seq);
        Ok(())
    }
}

/// What an [`InventoryStream`] yields after each snapshot or delta of its subscription.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InventoryUpdate {
    /// SKU.
    pub sku: String,
    /// Region filter (`None`: every region).
    pub region: Option<String>,
    /// The view's sequence number now (per SKU).
    pub seq: u64,
    /// The commit that produced the message.
    pub commit_seq: u64,
    /// The whole view after the message.
    pub levels: BTreeMap<LevelKey, LevelView>,
    /// The levels the message carried (a snapshot: all of them; a delta: the changed ones,
    /// `free_gpus == 0` for a level gone; may be empty with a region filter).
    pub changed: Vec<LevelView>,
    /// The view started over from a fresh snapshot after a reconnect, a gap or a server
    /// resync (never on the stream's first snapshot).
    pub resynced: bool,
    /// When the feed published a delta, µs since epoch (`None` for snapshots): feed lag is
    /// the receive time minus this.
    pub published_at_us: Option<i64>,
}

/// A live, self-healing subscription to one SKU's inventory ([`Client::subscribe`]). A
/// `futures::Stream` of updates; it ends only after yielding an error a retry cannot fix.
/// Nothing runs until it is polled (inside a Tokio runtime: it sleeps and times out with
/// `tokio::time`); dropping it closes the connection.
pub struct InventoryStream {
    inner: Pin<Box<dyn Stream<Item = Result<InventoryUpdate, ClientError>> + Send>>,
}

impl std::fmt::Debug for InventoryStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InventoryStream")
    }
}

impl Stream for InventoryStream {
    type Item = Result<InventoryUpdate, ClientError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

impl Client {
    /// Follows `sku`'s inventory (optionally one region) over the websocket: snapshot, then
    /// every delta, reconnecting and resubscribing by the backoff rule (module docs).
    pub fn subscribe(&self, sku: &str, region: Option<&str>) -> InventoryStream {
        let f = Follower {
            client: self.clone(),
            sku: sku.to_string(),
            region: region.map(String::from),
            session: None,
            connected_at: Instant::now(),
            view: InventoryView::default(),
            attempt: 0,
            started: false,
            broken: false,
            done: false,
        };
        let s = futures_util::stream::unfold(f, |mut f| async move {
            let item = f.next_update().await?;
            Some((item, f))
        });
        InventoryStream { inner: Box::pin(s) }
    }
}

/// What one message does to the stream.
enum Step {
    /// Yield an update.
    Yield(InventoryUpdate),
    /// Not for the view (or before its snapshot).
    Skip,
    /// A gap, a bad level, a closed or failed connection: start over.
    Restart,
}

/// The state behind an [`InventoryStream`].
struct Follower {
    client: Client,
    sku: String,
    region: Option<String>,
    session: Option<WsSession>,
    connected_at: Instant,
    view: InventoryView,
    /// Failed attempts since the last healthy connection.
    attempt: u32,
    /// A first snapshot was yielded.
    started: bool,
    /// The connection broke since the last snapshot: the next one is a resync.
    broken: bool,
    /// An error a retry cannot fix was yielded.
    done: bool,
}

impl Follower {
    async fn next_update(&mut self) -> Option<Result<InventoryUpdate, ClientError>> {
        if self.done {
            return None;
        }
        loop {
            let Some(session) = self.session.as_mut() else {
                match self.connect().await {
                    Ok(s) => {
                        self.session = Some(s);
                        self.connected_at = Instant::now();
                    }
                    Err(e) if !e.is_retryable() => {
                        self.done = true;
                        return Some(Err(e));
                    }
                    Err(e) => self.wait(e.retry_after()).await,
                }
                continue;
            };
            let step = match session.next().await {
                Ok(ServerMsg::InventorySnapshot(s)) if self.mine(&s.sku, &s.region) => {
                    self.on_snapshot(s)
                }
                Ok(ServerMsg::InventoryDelta(d)) if self.mine(&d.sku, &d.region) => {
                    self.on_delta(d)
                }
                // Trades, pongs, other replies; a message this client cannot read is skipped
                // (a lost delta shows as a gap).
                Ok(_) | Err(ClientError::Decode(_)) => Step::Skip,
                Err(_) => Step::Restart,
            };
            match step {
                Step::Yield(u) => return Some(Ok(u)),
                Step::Skip => {}
                Step::Restart => self.restart().await,
            }
        }
    }

    fn mine(&self, sku: &str, region: &Option<String>) -> bool {
        sku == self.sku && *region == self.region
    }

    async fn connect(&self) -> Result<WsSession, ClientError> {
        let mut s = self
            .client
            .connect_ws_with(WsOptions {
                anonymous: true,
                ..WsOptions::default()
            })
            .await?;
        s.subscribe(&self.sku, self.region.as_deref()).await?;
        Ok(s)
    }

    fn on_snapshot(&mut self, s: InventorySnapshot) -> Step {
        if self.view.apply_snapshot(&s).is_err() {
            return Step::Restart;
        }
        let resynced = self.started && (self.broken || s.resync);
        self.started = true;
        self.broken = false;
        Step::Yield(self.update(s.seq, s.commit_seq, s.levels, resynced, None))
    }

    fn on_delta(&mut self, d: InventoryDelta) -> Step {
        match self.view.apply_delta(&d) {
            Ok(()) => Step::Yield(self.update(
                d.last_seq,
                d.commit_seq,
                d.levels,
                false,
                Some(d.published_at_us),
            )),
            // Before the snapshot (a resync pending): deltas of the old view.
            Err(ViewError::NoSnapshot) => Step::Skip,
            // Start over on a new connection: the next update comes from a snapshot.
            Err(ViewError::Gap { .. } | ViewError::BadPrice { .. }) => Step::Restart,
        }
    }

    fn update(
        &self,
        seq: u64,
        commit_seq: u64,
        changed: Vec<LevelView>,
        resynced: bool,
        published_at_us: Option<i64>,
    ) -> InventoryUpdate {
        InventoryUpdate {
            sku: self.sku.clone(),
            region: self.region.clone(),
            seq,
            commit_seq,
            levels: self.view.levels().clone(),
            changed,
            resynced,
            published_at_us,
        }
    }

    /// Drops the connection and the view, and waits before the next connection.
    async fn restart(&mut self) {
        self.session = None;
        self.broken = true;
        self.view = InventoryView::default();
        if self.connected_at.elapsed() >= Duration::from_millis(backoff::RECONNECT_STABLE_MS) {
            self.attempt = 0;
        }
        self.wait(None).await;
    }

    async fn wait(&mut self, retry_after: Option<Duration>) {
        let d = backoff::delay(self.attempt, retry_after)
            .min(Duration::from_millis(backoff::MAX_RETRY_AFTER_MS));
        self.attempt = self.attempt.saturating_add(1);
        tokio::time::sleep(d).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn level(region: &str, kind: KindDto, price: &str, free: u32) -> LevelView {
        LevelView {
            region: region.into(),
            kind,
            price: price.into(),
            free_gpus: free,
            max_single_node: free.min(8),
            verified_free_gpus: None,
        }
    }

    fn snapshot(seq: u64, levels: Vec<LevelView>) -> InventorySnapshot {
        InventorySnapshot {
            sku: "H100-80G".into(),
            region: None,
            seq,
            commit_seq: 40,
            resync: false,
            levels,
        }
    }

    fn delta(first: u64, last: u64, levels: Vec<LevelView>) -> InventoryDelta {
        InventoryDelta {
            sku: "H100-80G".into(),
            region: None,
            first_seq: first,
            last_seq: last,
            commit_seq: 41,
            committed_at_ms: 1,
            published_at_us: 2,
            levels,
        }
    }

    #[test]
    fn a_view_follows_contiguous_deltas_and_refuses_a_gap() {
        let mut v = InventoryView::default();
        let d = delta(1, 1, vec![level("cn-east-2", KindDto::Spot, "20.0000", 8)]);
        assert_eq!(v.apply_delta(&d), Err(ViewError::NoSnapshot));
        v.apply_snapshot(&snapshot(
            14,
            vec![
                level("cn-east-2", KindDto::Spot, "20.5000", 8),
                level("cn-east-2", KindDto::Preemptible, "14.0000", 8),
            ],
        ))
        .unwrap();
        assert_eq!((v.seq(), v.free_gpus()), (Some(14), 16));

        // 15: spot level down to 6; 16: a new cheaper level.
        v.apply_delta(&delta(
            15,
            16,
            vec![
                level("cn-east-2", KindDto::Spot, "20.5000", 6),
                level("cn-east-2", KindDto::Spot, "19.0000", 2),
            ],
        ))
        .unwrap();
        assert_eq!((v.seq(), v.free_gpus()), (Some(16), 16));
        let best = v.best(KindDto::Spot, 2).unwrap();
        assert_eq!(best.price, "19.0000");
        assert_eq!(v.best(KindDto::Spot, 6).unwrap().price, "20.5000");

        // A gap leaves the view as it was.
        let before = v.clone();
        let gap = delta(
            18,
            18,
            vec![level("cn-east-2", KindDto::Spot, "20.5000", 0)],
        );
        assert_eq!(
            v.apply_delta(&gap),
            Err(ViewError::Gap {
                expected: 17,
                first_seq: 18
            })
        );
        assert_eq!(v, before);

        // free 0 removes the level; "20.5" is the level "20.5000".
        v.apply_delta(&delta(
            17,
            17,
            vec![level("cn-east-2", KindDto::Spot, "20.5", 0)],
        ))
        .unwrap();
        assert_eq!(
            (v.seq(), v.free_gpus(), v.levels().len()),
            (Some(17), 10, 2)
        );

        // A bad price changes nothing.
        let bad = delta(
            18,
            19,
            vec![
                level("cn-east-2", KindDto::Spot, "21.0000", 1),
                level("cn-east-2", KindDto::Spot, "1e3", 1),
            ],
        );
        let before = v.clone();
        assert!(matches!(
            v.apply_delta(&bad),
            Err(ViewError::BadPrice { .. })
        ));
        assert_eq!(v, before);

        // An empty delta (region filter) still advances the sequence.
        v.apply_delta(&delta(18, 19, vec![])).unwrap();
        assert_eq!(v.seq(), Some(19));
    }

    #[test]
    fn levels_sort_by_region_kind_then_numeric_price() {
        let mut v = InventoryView::default();
        v.apply_snapshot(&snapshot(
            1,
            vec![
                level("cn-north-1", KindDto::Spot, "100.0000", 1),
                level("cn-east-2", KindDto::Preemptible, "9.0000", 1),
                level("cn-east-2", KindDto::Spot, "100.0000", 1),
                level("cn-east-2", KindDto::Spot, "20.0000", 1),
                level("cn-east-2", KindDto::Spot, "5.0000", 0),
            ],
        ))
        .unwrap();
        let order: Vec<(&str, KindDto, &str)> = v
            .levels()
            .values()
            .map(|l| (l.region.as_str(), l.kind, l.price.as_str()))
            .collect();
        assert_eq!(
            order,
            vec![
                ("cn-east-2", KindDto::Spot, "20.0000"),
                ("cn-east-2", KindDto::Spot, "100.0000"),
                ("cn-east-2", KindDto::Preemptible, "9.0000"),
                ("cn-north-1", KindDto::Spot, "100.0000"),
            ]
        );
    }
}
