//! The reliability score of nodes and suppliers (docs/market-rules.md §12.3), computed from the
//! engine's own events.
//!
//! [`ReliabilityBook::observe`] is fed every event the engine emits, with the time of the
//! command that emitted it; the queries ([`ReliabilityBook::node`],
//! [`ReliabilityBook::supplier`], [`ReliabilityBook::node_reliability_bp`]) answer for the
//! [`WINDOW_DAYS`] UTC days ending with the day of their `now_ms`. Replaying the same events
//! gives the same book, byte for byte; `tests/reference/reliability.rs` recomputes every score
//! from the raw event history by brute force.
//!
//! Rules kept here:
//! - Pure and exact: integers only (GPU-milliseconds, lease-milliseconds, counts), no clock,
//!   no hash-map iteration; state is `BTreeMap`s, so a snapshot (postcard) is deterministic.
//! - Bounded: per node at most [`WINDOW_DAYS`] daily buckets, and only for days with
//!   activity (a lease ended, a teardown overdue, time offline); buckets older than the window
//!   are dropped whenever the node is touched. Online time is not stored: it is the node's
//!   time in the window since it became known less its offline time, so a node that stays
//!   online and ends no lease holds no bucket. An open lease is tracked from
//!   `LeaseStarted` to its `LeaseEnded`, a wipe from `LeaseWiping` to `LeaseWiped` or
//!   `TeardownOverdue`, and no longer.
//! - A lease counts on the UTC day its end is recorded (the documented simplification: a
//!   lease counts when it ends, all of it, on that day).
//! - Queries take `now_ms` at or after the last observed time (the engine's clock never goes
//!   back).

use crate::event::{EndReason, Event};
use crate::ids::{AccountId, LeaseId, NodeId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Days in the scoring window: the UTC day of the query and the 29 before it (issue 26).
pub const WINDOW_DAYS: i64 = 30;
/// Most lease-GPU-seconds one lease can lose per GPU (a node failure, a non-delivery, an
/// overdue teardown), seconds (issue 26; the SLA outage cap of docs/settlement.md).
pub const LOST_CAP_S: i64 = 3600;
/// Under this many leases ended in the window, a score is `new` (issue 26).
pub const MIN_LEASES: u64 = 10;
/// Under this many delivered lease-hours (per lease, not per GPU) in the window, a score is
/// `new` (issue 26).
pub const MIN_LEASE_HOURS: u64 = 24;
/// Milliseconds in a UTC day.
pub const DAY_MS: i64 = 86_400_000;

const HOUR_MS: u64 = 3_600_000;
const LOST_CAP_MS: i64 = LOST_CAP_S * 1000;

/// The UTC day of a time: days since 1970-01-01.
pub fn utc_day(ms: i64) -> i64 {
    ms.div_euclid(DAY_MS)
}

/// A fraction shown as its numerator and denominator (never a float).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Ratio {
    /// Numerator.
    pub num: u64,
    /// Denominator; 0 when there is nothing to measure.
    pub den: u64,
}

impl Ratio {
    /// `floor(num × 10,000 / den)` in basis points; `None` when `den` is 0.
    pub fn bp(self) -> Option<u32> {
        if self.den == 0 {
            return None;
        }
        let bp = u128::from(self.num) * 10_000 / u128::from(self.den);
        Some(u32::try_from(bp).unwrap_or(u32::MAX))
    }
}

/// A node's or supplier's figures over the window (docs/market-rules.md §12.3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Score {
    /// Delivered lease-GPU-ms / committed lease-GPU-ms (delivered + lost).
    pub reliability: Ratio,
    /// Leases ready / leases that provisioned and ended ready or not delivered (the
    /// supplier's fault).
    pub delivery_rate: Ratio,
    /// `node_failure` ends × 1,000 × 3,600,000 / delivered lease-ms (per lease, not per GPU):
    /// node-failure ends per 1,000 delivered lease-hours.
    pub node_failures_per_1000_lease_hours: Ratio,
    /// Online ms / (online + offline) ms of the node(s) in the window.
    pub heartbeat_coverage: Ratio,
    /// Leases ended in the window (any reason).
    pub leases_ended: u64,
    /// Leases ended `node_failure` in the window.
    pub node_failures: u64,
    /// Teardowns overdue in the window.
    pub teardowns_overdue: u64,
    /// Delivered lease-ms (per lease, not per GPU) in the window.
    pub delivered_lease_ms: u64,
    /// Fewer than [`MIN_LEASES`] leases ended or fewer than [`MIN_LEASE_HOURS`] delivered
    /// lease-hours: too little history to score.
    pub is_new: bool,
}

impl Score {
    /// The reliability in basis points, `floor(delivered × 10,000 / committed)`; `None` when
    /// the score is new (what a bid's `min_reliability` compares against).
    pub fn reliability_bp(&self) -> Option<u32> {
        if self.is_new {
            None
        } else {
            self.reliability.bp()
        }
    }

    /// Lost lease-GPU-ms: committed − delivered.
    pub fn lost_gpu_ms(&self) -> u64 {
        self.reliability.den.saturating_sub(self.reliability.num)
    }
}

/// One UTC day of one node's activity (only days with activity are stored).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Bucket {
    day: i64,
    delivered_gpu_ms: u64,
    lost_gpu_ms: u64,
    delivered_lease_ms: u64,
    offline_ms: u32,
    ended: u32,
    ready: u32,
    not_delivered: u32,
    node_failures: u32,
    overdue: u32,
}

/// The raw sums a [`Score`] is made of.
#[derive(Clone, Copy, Debug, Default)]
struct Totals {
    delivered_gpu_ms: u64,
    lost_gpu_ms: u64,
    delivered_lease_ms: u64,
    online_ms: u64,
    offline_ms: u64,
    ended: u64,
    ready: u64,
    not_delivered: u64,
    node_failures: u64,
    overdue: u64,
}

impl Totals {
    fn add_bucket(&mut self, b: &Bucket) {
        self.delivered_gpu_ms = self.delivered_gpu_ms.saturating_add(b.delivered_gpu_ms);
        self.lost_gpu_ms = self.lost_gpu_ms.saturating_add(b.lost_gpu_ms);
        self.delivered_lease_ms = self.delivered_lease_ms.saturating_add(b.delivered_lease_ms);
        self.offline_ms = self.offline_ms.saturating_add(u64::from(b.offline_ms));
        self.ended = self.ended.saturating_add(u64::from(b.ended));
        self.ready = self.ready.saturating_add(u64::from(b.ready));
        self.not_delivered = self
            .not_delivered
            .saturating_add(u64::from(b.not_delivered));
        self.node_failures = self
            .node_failures
            .saturating_add(u64::from(b.node_failures));
        self.overdue = self.overdue.saturating_add(u64::from(b.overdue));
    }

    fn is_new(&self) -> bool {
        self.ended < MIN_LEASES || self.delivered_lease_ms < MIN_LEASE_HOURS * HOUR_MS
    }

    fn score(&self) -> Score {
        Score {
            reliability: Ratio {
                num: self.delivered_gpu_ms,
                den: self.delivered_gpu_ms.saturating_add(self.lost_gpu_ms),
            },
            delivery_rate: Ratio {
                num: self.ready,
                den: self.ready.saturating_add(self.not_delivered),
            },
            node_failures_per_1000_lease_hours: Ratio {
                num: self.node_failures.saturating_mul(1000 * HOUR_MS),
                den: self.delivered_lease_ms,
            },
            heartbeat_coverage: Ratio {
                num: self.online_ms,
                den: self.online_ms.saturating_add(self.offline_ms),
            },
            leases_ended: self.ended,
            node_failures: self.node_failures,
            teardowns_overdue: self.overdue,
            delivered_lease_ms: self.delivered_lease_ms,
            is_new: self.is_new(),
        }
    }
}

/// One node: its supplier, when it became known (registered, or its first lease for a node
/// registered before the book existed), since when it is offline, its daily buckets (sorted
/// by day, at most [`WINDOW_DAYS`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct NodeBook {
    supplier: AccountId,
    known_ms: i64,
    offline_since_ms: Option<i64>,
    buckets: Vec<Bucket>,
}

impl NodeBook {
    fn new(supplier: AccountId, now_ms: i64) -> Self {
        NodeBook {
            supplier,
            known_ms: now_ms,
            offline_since_ms: None,
            buckets: Vec::new(),
        }
    }

    /// Drops buckets that left the window of `now_ms`.
    fn prune(&mut self, now_ms: i64) {
        let first = first_window_day(now_ms);
        if self.buckets.first().is_some_and(|b| b.day < first) {
            self.buckets.retain(|b| b.day >= first);
            self.buckets.shrink_to_fit();
        }
    }

    /// The bucket of `day`, inserted in day order if missing (capacity kept exact: memory
    /// per node matters, 100,000 nodes are planned).
    fn bucket(&mut self, day: i64) -> &mut Bucket {
        let i = match self.buckets.binary_search_by_key(&day, |b| b.day) {
            Ok(i) => i,
            Err(i) => {
                self.buckets.reserve_exact(1);
                self.buckets.insert(
                    i,
                    Bucket {
                        day,
                        ..Bucket::default()
                    },
                );
                i
            }
        };
        &mut self.buckets[i]
    }

    /// The node went offline at `now_ms` (nothing if it already was).
    fn went_offline(&mut self, now_ms: i64) {
        self.offline_since_ms.get_or_insert(now_ms);
    }

    /// The node is back online at `now_ms`: its offline time, split across UTC days and
    /// clipped to the window of `now_ms`, goes into the buckets.
    fn went_online(&mut self, now_ms: i64) {
        let Some(since) = self.offline_since_ms.take() else {
            return;
        };
        let mut s = since.max(window_start_ms(now_ms));
        while s < now_ms {
            let day = utc_day(s);
            let e = now_ms.min(day.saturating_add(1).saturating_mul(DAY_MS));
            let ms = u32::try_from(e - s).unwrap_or(u32::MAX);
            let b = self.bucket(day);
            b.offline_ms = b.offline_ms.saturating_add(ms);
            s = e;
        }
    }

    /// The sums over the window of `now_ms`; with `coverage`, the open heartbeat interval up
    /// to `now_ms` included.
    fn totals(&self, now_ms: i64, coverage: bool) -> Totals {
        let first = first_window_day(now_ms);
        let today = utc_day(now_ms);
        let mut t = Totals::default();
        for b in &self.buckets {
            if b.day >= first && b.day <= today {
                t.add_bucket(b);
            }
        }
        if coverage {
            let start = window_start_ms(now_ms);
            let since =
                |from: i64| u64::try_from(now_ms.saturating_sub(from.max(start))).unwrap_or(0);
            if let Some(off) = self.offline_since_ms {
                t.offline_ms = t.offline_ms.saturating_add(since(off));
            }
            let known = since(self.known_ms);
            t.online_ms = known.saturating_sub(t.offline_ms);
        }
        t
    }
}

/// The first UTC day of the window of `now_ms`.
fn first_window_day(now_ms: i64) -> i64 {
    utc_day(now_ms).saturating_sub(WINDOW_DAYS - 1)
}

/// Start of the window of `now_ms`: midnight UTC of its first day.
fn window_start_ms(now_ms: i64) -> i64 {
    first_window_day(now_ms).saturating_mul(DAY_MS)
}

/// Where a started lease is in its delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Phase {
    /// Started; not (yet) seen provisioning or ready.
    Started,
    /// Provisioning began (`ProvisionStarted`).
    Provisioning,
    /// Ready (`LeaseReady`) at this time.
    Ready(i64),
}

/// A lease between its `LeaseStarted` and its `LeaseEnded`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct OpenLease {
    node: NodeId,
    gpus: u32,
    start_ms: i64,
    end_ms: i64,
    phase: Phase,
    /// The supplier reported the buyer's launch spec cannot run (§11.3b): its
    /// `not_delivered` end is the buyer's, not the supplier's.
    launch_failed: bool,
}

/// Per node and per supplier reliability over the last [`WINDOW_DAYS`] UTC days, built from
/// the engine's events (docs/market-rules.md §12.3). Stored in the engine's snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReliabilityBook {
    nodes: BTreeMap<NodeId, NodeBook>,
    /// (supplier, node) for every node in `nodes`: the supplier aggregate's index.
    by_supplier: BTreeSet<(AccountId, NodeId)>,
    open: BTreeMap<LeaseId, OpenLease>,
    /// GPUs of each ended lease whose GPUs are wiping.
    wiping: BTreeMap<LeaseId, u32>,
    /// Delivery (§11) was seen on: a started lease delivers only once ready. Off (no
    /// `ProvisionStarted` ever seen), a lease is delivered from its start.
    delivery: bool,
}

impl ReliabilityBook {
    /// An empty book.
    pub fn new() -> Self {
        Self::default()
    }

    /// Nodes known to the book.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Leases tracked between start and end, and wipes tracked between their start and end
    /// (bounded by what is live in the engine).
    pub fn open_counts(&self) -> (usize, usize) {
        (self.open.len(), self.wiping.len())
    }

    /// Daily buckets held for `node` (at most [`WINDOW_DAYS`]).
    pub fn bucket_count(&self, node: NodeId) -> usize {
        self.nodes.get(&node).map_or(0, |n| n.buckets.len())
    }

    /// Marks `lease` as ended by the buyer's launch spec (`ReportLaunchFailed`, §11.3b): call
    /// before observing that command's `LeaseEnded{not_delivered}`, which then loses nothing
    /// and does not count in the delivery rate (the event alone cannot tell it from the
    /// supplier's non-delivery).
    pub fn observe_launch_failed(&mut self, lease: LeaseId) {
        if let Some(l) = self.open.get_mut(&lease) {
            l.launch_failed = true;
        }
    }

    fn node_mut(&mut self, node: NodeId, supplier: AccountId, now_ms: i64) -> &mut NodeBook {
        let n = self.nodes.entry(node).or_insert_with(|| {
            self.by_supplier.insert((supplier, node));
            NodeBook::new(supplier, now_ms)
        });
        n.prune(now_ms);
        n
    }

    /// Takes one event the engine emitted while applying a command at `now_ms`. Events that
    /// do not bear on the score are ignored.
    pub fn observe(&mut self, now_ms: i64, event: &Event) {
        let today = utc_day(now_ms);
        match *event {
            Event::NodeRegistered { node, supplier, .. } => {
                self.node_mut(node, supplier, now_ms);
            }
            Event::NodeOnline { node } => {
                if let Some(n) = self.nodes.get_mut(&node) {
                    n.prune(now_ms);
                    n.went_online(now_ms);
                }
            }
            Event::NodeOffline { node, .. } => {
                if let Some(n) = self.nodes.get_mut(&node) {
                    n.prune(now_ms);
                    n.went_offline(now_ms);
                }
            }
            Event::LeaseStarted {
                lease,
                supplier,
                node,
                gpus,
                start_ms,
                end_ms,
                ..
            } => {
                self.node_mut(node, supplier, now_ms);
                self.open.insert(
                    lease,
                    OpenLease {
                        node,
                        gpus,
                        start_ms,
                        end_ms,
                        phase: Phase::Started,
                        launch_failed: false,
                    },
                );
            }
            Event::ProvisionStarted { lease, .. } => {
                self.delivery = true;
                if let Some(l) = self.open.get_mut(&lease) {
                    l.phase = Phase::Provisioning;
                }
            }
            Event::LeaseReady { lease, at_ms, .. } => {
                self.delivery = true;
                if let Some(l) = self.open.get_mut(&lease) {
                    l.phase = Phase::Ready(at_ms);
                }
            }
            Event::LeaseEnded {
                lease,
                reason,
                at_ms,
                ..
            } => {
                let Some(l) = self.open.remove(&lease) else {
                    return; // never started (a pending lease called off), or not seen
                };
                let delivery = self.delivery;
                let Some(n) = self.nodes.get_mut(&l.node) else {
                    return;
                };
                n.prune(now_ms);
                let b = n.bucket(today);
                b.ended = b.ended.saturating_add(1);
                let ready_ms = match l.phase {
                    Phase::Ready(r) => Some(r),
                    Phase::Started if !delivery => Some(l.start_ms),
                    _ => None,
                };
                let gpus = u64::from(l.gpus);
                if let Some(r) = ready_ms {
                    let ms = u64::try_from(at_ms.saturating_sub(r)).unwrap_or(0);
                    b.delivered_gpu_ms = b.delivered_gpu_ms.saturating_add(gpus.saturating_mul(ms));
                    b.delivered_lease_ms = b.delivered_lease_ms.saturating_add(ms);
                }
                if matches!(l.phase, Phase::Ready(_)) {
                    b.ready = b.ready.saturating_add(1);
                }
                let lost_ms = match reason {
                    EndReason::NodeFailure => {
                        b.node_failures = b.node_failures.saturating_add(1);
                        l.end_ms.saturating_sub(at_ms)
                    }
                    EndReason::NotDelivered if !l.launch_failed => {
                        b.not_delivered = b.not_delivered.saturating_add(1);
                        l.end_ms.saturating_sub(l.start_ms)
                    }
                    _ => 0,
                };
                let lost_ms = u64::try_from(lost_ms.clamp(0, LOST_CAP_MS)).unwrap_or(0);
                b.lost_gpu_ms = b.lost_gpu_ms.saturating_add(gpus.saturating_mul(lost_ms));
            }
            Event::LeaseWiping {
                lease, gpu_mask, ..
            } => {
                self.delivery = true;
                self.wiping.insert(lease, gpu_mask.count_ones());
            }
            Event::LeaseWiped { lease, .. } => {
                self.wiping.remove(&lease);
            }
            Event::TeardownOverdue {
                lease,
                supplier,
                node,
                ..
            } => {
                // The wipe's GPUs; 1 if the wipe was never seen (a book started mid-stream).
                let gpus = self.wiping.remove(&lease).unwrap_or(1);
                let b = self.node_mut(node, supplier, now_ms).bucket(today);
                b.overdue = b.overdue.saturating_add(1);
                let lost = u64::from(gpus).saturating_mul(LOST_CAP_MS as u64);
                b.lost_gpu_ms = b.lost_gpu_ms.saturating_add(lost);
            }
            _ => {}
        }
    }

    /// A node's score over the window of `now_ms` (an unknown node: all zero, `new`).
    pub fn node(&self, node: NodeId, now_ms: i64) -> Score {
        self.nodes
            .get(&node)
            .map_or_else(Totals::default, |n| n.totals(now_ms, true))
            .score()
    }

    /// A supplier's score over the window of `now_ms`: the sums over its nodes (every
    /// numerator and denominator is the sum of its nodes'), `new` by the same thresholds.
    pub fn supplier(&self, supplier: AccountId, now_ms: i64) -> Score {
        let mut t = Totals::default();
        let lo = (supplier, NodeId(0));
        let hi = (supplier, NodeId(u64::MAX));
        for (_, node) in self.by_supplier.range(lo..=hi) {
            if let Some(n) = self.nodes.get(node) {
                let nt = n.totals(now_ms, true);
                t.delivered_gpu_ms = t.delivered_gpu_ms.saturating_add(nt.delivered_gpu_ms);
                t.lost_gpu_ms = t.lost_gpu_ms.saturating_add(nt.lost_gpu_ms);
                t.delivered_lease_ms = t.delivered_lease_ms.saturating_add(nt.delivered_lease_ms);
                t.online_ms = t.online_ms.saturating_add(nt.online_ms);
                t.offline_ms = t.offline_ms.saturating_add(nt.offline_ms);
                t.ended = t.ended.saturating_add(nt.ended);
                t.ready = t.ready.saturating_add(nt.ready);
                t.not_delivered = t.not_delivered.saturating_add(nt.not_delivered);
                t.node_failures = t.node_failures.saturating_add(nt.node_failures);
                t.overdue = t.overdue.saturating_add(nt.overdue);
            }
        }
        t.score()
    }

    /// The node's reliability in basis points over the window of `now_ms`, `None` while it is
    /// `new`: what a bid's `min_reliability` compares against. O(buckets), no allocation.
    pub fn node_reliability_bp(&self, node: NodeId, now_ms: i64) -> Option<u32> {
        let t = self.nodes.get(&node)?.totals(now_ms, false);
        if t.is_new() {
            return None;
        }
        Ratio {
            num: t.delivered_gpu_ms,
            den: t.delivered_gpu_ms.saturating_add(t.lost_gpu_ms),
        }
        .bp()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{BidId, RegionId, SkuId};
    use crate::{LeaseKind, Price};

    const S: i64 = 1000;
    /// Day D of the scripted history: 2024-10-04.
    const D: i64 = 20_000;
    const T0: i64 = D * DAY_MS;
    const S1: AccountId = AccountId(1);
    const S2: AccountId = AccountId(2);
    const N1: NodeId = NodeId(11);
    const N2: NodeId = NodeId(12);
    const N3: NodeId = NodeId(13);

    fn registered(node: NodeId, supplier: AccountId) -> Event {
        Event::NodeRegistered {
            node,
            supplier,
            sku: SkuId(0),
            region: RegionId(0),
            gpus: 8,
        }
    }

    fn started(
        lease: u64,
        node: NodeId,
        supplier: AccountId,
        gpus: u32,
        start: i64,
        end: i64,
    ) -> Event {
        Event::LeaseStarted {
            lease: LeaseId(lease),
            bid: BidId(lease),
            buyer: AccountId(99),
            supplier,
            node,
            sku: SkuId(0),
            region: RegionId(0),
            kind: LeaseKind::Spot,
            gpus,
            gpu_mask: (1u32 << gpus) - 1,
            price: Price::from_ticks(10_000).expect("price"),
            start_ms: start,
            end_ms: end,
        }
    }

    fn provision(lease: u64, node: NodeId, supplier: AccountId, deadline: i64) -> Event {
        Event::ProvisionStarted {
            lease: LeaseId(lease),
            buyer: AccountId(99),
            supplier,
            node,
            deadline_ms: deadline,
        }
    }

    fn ready(lease: u64, node: NodeId, supplier: AccountId, at: i64) -> Event {
        Event::LeaseReady {
            lease: LeaseId(lease),
            buyer: AccountId(99),
            supplier,
            node,
            at_ms: at,
        }
    }

    fn ended(lease: u64, reason: EndReason, at: i64) -> Event {
        Event::LeaseEnded {
            lease: LeaseId(lease),
            buyer: AccountId(99),
            reason,
            at_ms: at,
        }
    }

    fn wiping(lease: u64, node: NodeId, supplier: AccountId, mask: u32, deadline: i64) -> Event {
        Event::LeaseWiping {
            lease: LeaseId(lease),
            buyer: AccountId(99),
            supplier,
            node,
            gpu_mask: mask,
            deadline_ms: deadline,
        }
    }

    fn overdue(lease: u64, node: NodeId, supplier: AccountId) -> Event {
        Event::TeardownOverdue {
            lease: LeaseId(lease),
            buyer: AccountId(99),
            supplier,
            node,
        }
    }

    /// The scripted history of docs/market-rules.md §12.3's worked example, (time, event),
    /// with the leases whose launch spec failed (`observe_launch_failed`).
    pub(crate) fn scripted() -> (Vec<(i64, Event)>, Vec<LeaseId>) {
        let mut h = Vec::new();
        for (n, s) in [(N1, S1), (N2, S1), (N3, S2)] {
            h.push((T0, registered(n, s)));
        }
        // N1, leases 1–10: 2 GPUs, started hourly, ready 60 s later, released 3 h after ready.
        for k in 1..=10i64 {
            let start = T0 + (k - 1) * 3600 * S;
            let rdy = start + 60 * S;
            let end = rdy + 10_800 * S;
            let l = k as u64;
            h.push((start, started(l, N1, S1, 2, start, start + 86_400 * S)));
            h.push((start, provision(l, N1, S1, start + 180 * S)));
            h.push((rdy, ready(l, N1, S1, rdy)));
            h.push((end, ended(l, EndReason::Released, end)));
            h.push((end, wiping(l, N1, S1, 0b11, end + 600 * S)));
        }
        // Lease 11: 4 GPUs, 10 h term, ready at 12:01, node offline 2 h later.
        let start = T0 + 43_200 * S;
        h.push((start, started(11, N1, S1, 4, start, start + 36_000 * S)));
        h.push((start, provision(11, N1, S1, start + 180 * S)));
        h.push((start + 60 * S, ready(11, N1, S1, start + 60 * S)));
        let off = T0 + 50_475 * S;
        let last_hb = T0 + 50_460 * S;
        h.push((
            off,
            Event::NodeOffline {
                node: N1,
                last_heartbeat_ms: last_hb,
            },
        ));
        h.push((off, ended(11, EndReason::NodeFailure, last_hb)));
        h.push((off, wiping(11, N1, S1, 0b1111, off + 600 * S)));
        h.push((off + 3600 * S, Event::NodeOnline { node: N1 }));
        // Lease 12: 1 GPU, 30 min term, never ready; its wipe is then overdue.
        let start = T0 + 60_000 * S;
        h.push((start, started(12, N1, S1, 1, start, start + 1800 * S)));
        h.push((start, provision(12, N1, S1, start + 180 * S)));
        let dl = start + 180 * S;
        h.push((dl, ended(12, EndReason::NotDelivered, dl)));
        h.push((dl, wiping(12, N1, S1, 0b1, dl + 600 * S)));
        h.push((dl + 600 * S, overdue(12, N1, S1)));
        // N2: lease 13, 8 GPUs, released 1 h after ready; lease 14's launch spec fails.
        h.push((
            T0 + 940 * S,
            started(13, N2, S1, 8, T0 + 940 * S, T0 + 90_000 * S),
        ));
        h.push((T0 + 940 * S, provision(13, N2, S1, T0 + 1120 * S)));
        h.push((T0 + 1000 * S, ready(13, N2, S1, T0 + 1000 * S)));
        h.push((T0 + 4600 * S, ended(13, EndReason::Released, T0 + 4600 * S)));
        h.push((
            T0 + 5000 * S,
            started(14, N2, S1, 2, T0 + 5000 * S, T0 + 9000 * S),
        ));
        h.push((T0 + 5000 * S, provision(14, N2, S1, T0 + 5180 * S)));
        h.push((
            T0 + 5100 * S,
            ended(14, EndReason::NotDelivered, T0 + 5100 * S),
        ));
        h.sort_by_key(|(t, _)| *t);
        (h, vec![LeaseId(14)])
    }

    pub(crate) fn feed(h: &[(i64, Event)], launch_failed: &[LeaseId]) -> ReliabilityBook {
        let mut book = ReliabilityBook::new();
        for (t, e) in h {
            if let Event::LeaseEnded { lease, .. } = e
                && launch_failed.contains(lease)
            {
                book.observe_launch_failed(*lease);
            }
            book.observe(*t, e);
        }
        book
    }

    /// Noon of day D+1: the query time of the worked example.
    const NOW: i64 = T0 + 129_600 * S;

    #[test]
    fn scripted_history_node_figures() {
        let (h, lf) = scripted();
        let book = feed(&h, &lf);
        let s = book.node(N1, NOW);
        // Delivered: 10 × 2 × 10,800 + 4 × 7,200 = 244,800 GPU-s; lost: 4 × 3,600 (node
        // failure, capped) + 1 × 1,800 (not delivered: its whole 30 min term) + 1 × 3,600
        // (teardown overdue) = 19,800 GPU-s.
        assert_eq!(
            s.reliability,
            Ratio {
                num: 244_800 * S as u64,
                den: 264_600 * S as u64
            }
        );
        assert_eq!(s.lost_gpu_ms(), 19_800_000);
        assert_eq!(s.reliability_bp(), Some(9251));
        assert_eq!(book.node_reliability_bp(N1, NOW), Some(9251));
        assert_eq!(s.delivery_rate, Ratio { num: 11, den: 12 });
        // 1 failure × 1,000 × 3,600 s / 115,200 delivered lease-s = 31.25 per 1,000 h.
        assert_eq!(s.delivered_lease_ms, 115_200_000);
        assert_eq!(
            s.node_failures_per_1000_lease_hours,
            Ratio {
                num: 3_600_000_000,
                den: 115_200_000
            }
        );
        // Online 0–50,475 s and 54,075–129,600 s; offline 3,600 s.
        assert_eq!(
            s.heartbeat_coverage,
            Ratio {
                num: 126_000_000,
                den: 129_600_000
            }
        );
        assert_eq!(s.heartbeat_coverage.bp(), Some(9722));
        assert_eq!(
            (s.leases_ended, s.node_failures, s.teardowns_overdue),
            (12, 1, 1)
        );
        assert!(!s.is_new);
        // Everything ended and every wipe finished or went overdue, except lease 13 and 14's
        // wipes, never reported here (only leases 1–12 and none of N2's show wipes).
        assert_eq!(book.open_counts(), (0, 11));
    }

    #[test]
    fn supplier_is_the_sum_of_its_nodes() {
        let (h, lf) = scripted();
        let book = feed(&h, &lf);
        let s = book.supplier(S1, NOW);
        let (a, b) = (book.node(N1, NOW), book.node(N2, NOW));
        assert_eq!(s.reliability.num, a.reliability.num + b.reliability.num);
        assert_eq!(s.reliability.den, a.reliability.den + b.reliability.den);
        assert_eq!(
            s.heartbeat_coverage.num,
            a.heartbeat_coverage.num + b.heartbeat_coverage.num
        );
        assert_eq!(s.leases_ended, a.leases_ended + b.leases_ended);
        // N2: 8 × 3,600 GPU-s delivered; the launch-spec failure loses nothing and is not in
        // the delivery rate.
        assert_eq!(
            b.reliability,
            Ratio {
                num: 28_800_000,
                den: 28_800_000
            }
        );
        assert_eq!(b.delivery_rate, Ratio { num: 1, den: 1 });
        assert_eq!(b.leases_ended, 2);
        assert!(b.is_new);
        assert_eq!(
            s.reliability,
            Ratio {
                num: 273_600_000,
                den: 293_400_000
            }
        );
        assert_eq!(s.reliability_bp(), Some(9325));
        assert_eq!(s.delivery_rate, Ratio { num: 12, den: 13 });
        assert_eq!(
            s.heartbeat_coverage,
            Ratio {
                num: 255_600_000,
                den: 259_200_000
            }
        );
        // S2's only node did nothing: new, full coverage.
        let s2 = book.supplier(S2, NOW);
        assert!(s2.is_new);
        assert_eq!(s2.reliability_bp(), None);
        assert_eq!(s2.heartbeat_coverage, book.node(N3, NOW).heartbeat_coverage);
        assert_eq!(
            book.supplier(AccountId(77), NOW),
            book.node(NodeId(77), NOW)
        );
    }

    /// Delivery off: leases delivered from their start; `n` leases of `ms` each on N1.
    fn delivery_off(n: u64, ms: i64) -> ReliabilityBook {
        let mut book = ReliabilityBook::new();
        book.observe(T0, &registered(N1, S1));
        for k in 0..n {
            let start = T0 + k as i64 * ms;
            book.observe(start, &started(k, N1, S1, 1, start, start + ms));
            book.observe(start + ms, &ended(k, EndReason::Expired, start + ms));
        }
        book
    }

    #[test]
    fn new_threshold_edges() {
        let three_h = 3 * 3600 * S;
        let now = T0 + 10 * three_h;
        // 9 leases, 27 lease-hours: new. 10 leases, 30 h: scored.
        assert!(delivery_off(9, three_h).node(N1, now).is_new);
        assert_eq!(delivery_off(9, three_h).node_reliability_bp(N1, now), None);
        let ten = delivery_off(10, three_h).node(N1, now);
        assert!(!ten.is_new);
        assert_eq!(ten.reliability_bp(), Some(10_000));
        assert_eq!(ten.delivery_rate, Ratio { num: 0, den: 0 }); // delivery off
        assert_eq!(
            delivery_off(10, three_h).node_reliability_bp(N1, now),
            Some(10_000)
        );
        // 10 leases of 24 h / 10 − 1 ms: just under 24 lease-hours: new; exactly 24 h: not.
        let tenth = 24 * 3600 * S / 10;
        assert!(delivery_off(10, tenth - 1).node(N1, now).is_new);
        assert!(!delivery_off(10, tenth).node(N1, now).is_new);
    }

    #[test]
    fn day_rollover_drops_old_buckets() {
        let mut book = ReliabilityBook::new();
        book.observe(T0, &registered(N1, S1));
        // Day D: a 2 h lease (delivery off) ends at 02:00; offline from D 12:00 to D+2 12:00.
        book.observe(T0, &started(1, N1, S1, 2, T0, T0 + 7200 * S));
        book.observe(T0 + 7200 * S, &ended(1, EndReason::Released, T0 + 7200 * S));
        book.observe(
            T0 + DAY_MS / 2,
            &Event::NodeOffline {
                node: N1,
                last_heartbeat_ms: 0,
            },
        );
        let back = T0 + 2 * DAY_MS + DAY_MS / 2;
        book.observe(back, &Event::NodeOnline { node: N1 });
        assert_eq!(book.bucket_count(N1), 3); // D, D+1, D+2
        // Last day of the window that holds D: D+29.
        let d29 = T0 + 29 * DAY_MS + DAY_MS / 2;
        let s = book.node(N1, d29);
        assert_eq!(s.reliability.num, 2 * 7200 * 1000);
        assert_eq!(s.leases_ended, 1);
        assert_eq!(
            s.heartbeat_coverage.den,
            29 * DAY_MS as u64 + DAY_MS as u64 / 2
        );
        assert_eq!(
            s.heartbeat_coverage.num,
            s.heartbeat_coverage.den - 2 * DAY_MS as u64
        );
        // D+31 noon: the window is D+2..D+31, so only D+2's 12 offline hours remain.
        let d31 = T0 + 31 * DAY_MS + DAY_MS / 2;
        let s = book.node(N1, d31);
        assert_eq!((s.reliability, s.leases_ended), (Ratio::default(), 0));
        assert_eq!(
            s.heartbeat_coverage.den,
            29 * DAY_MS as u64 + DAY_MS as u64 / 2
        );
        assert_eq!(
            s.heartbeat_coverage.den - s.heartbeat_coverage.num,
            DAY_MS as u64 / 2
        );
        // An event on N1 at D+31 drops the buckets of D and D+1; going offline stores nothing
        // until the node is back.
        book.observe(
            d31,
            &Event::NodeOffline {
                node: N1,
                last_heartbeat_ms: 0,
            },
        );
        assert_eq!(book.bucket_count(N1), 1); // D+2
        assert_eq!(book.node(N1, d31), s);
        // Offline a whole window: coverage 0 of 30 days, one bucket at most per day touched.
        let far = d31 + 100 * DAY_MS;
        book.observe(far, &Event::NodeOnline { node: N1 });
        assert!(book.bucket_count(N1) <= WINDOW_DAYS as usize);
        let s = book.node(N1, far);
        assert_eq!(
            s.heartbeat_coverage,
            Ratio {
                num: 0,
                den: 29 * DAY_MS as u64 + DAY_MS as u64 / 2
            }
        );
    }

    #[test]
    fn unknown_node_and_unseen_leases() {
        let mut book = ReliabilityBook::new();
        // An end with no start (a pending lease called off) and an unknown node's status.
        book.observe(T0, &ended(5, EndReason::NodeFailure, T0));
        book.observe(T0, &Event::NodeOnline { node: N1 });
        assert_eq!(book, ReliabilityBook::new());
        let s = book.node(N1, T0);
        assert!(s.is_new);
        assert_eq!(s.reliability_bp(), None);
        assert_eq!(book.node_reliability_bp(N1, T0), None);
    }

    #[test]
    fn postcard_round_trip() {
        let (h, lf) = scripted();
        let book = feed(&h, &lf);
        let bytes = postcard::to_allocvec(&book).expect("serialize");
        let back: ReliabilityBook = postcard::from_bytes(&bytes).expect("deserialize");
        assert_eq!(back, book);
        assert_eq!(back.node(N1, NOW), book.node(N1, NOW));
        assert_eq!(postcard::to_allocvec(&back).expect("serialize"), bytes);
    }

    /// Memory per node: the map entry (key, record) plus its buckets, estimated from type
    /// sizes (BTreeMap node overhead amortized ≈ 1/11 of a leaf's header per entry, ignored).
    #[test]
    fn bytes_per_node() {
        let entry =
            std::mem::size_of::<(NodeId, NodeBook)>() + std::mem::size_of::<(AccountId, NodeId)>();
        let bucket = std::mem::size_of::<Bucket>();
        let full = entry + WINDOW_DAYS as usize * bucket;
        eprintln!(
            "reliability: {entry} B per node + {bucket} B per active day; {full} B with 30 active days"
        );
        assert!(entry <= 80, "{entry}");
        assert!(bucket <= 64, "{bucket}");
        // Postcard: an idle registered node.
        let mut book = ReliabilityBook::new();
        book.observe(T0, &registered(N1, S1));
        let idle = postcard::to_allocvec(&book).expect("serialize").len();
        eprintln!("reliability: idle node serialized: {idle} B");
        assert!(idle <= 32, "{idle}");
    }
}
