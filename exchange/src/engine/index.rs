//! Derived indexes, rebuilt from the canonical state on restore: the offer books, the resting
//! bid books, the preemption victims, the inventory aggregate and the timers.

use super::{Engine, State};
use crate::command::LeaseKind;
use crate::ids::{BidId, LeaseId, NodeId, OfferId, RegionId, SkuId};
use crate::inventory::{Inventory, LevelKey};
use crate::price::Price;
use crate::state::{Lease, LeaseState, Node, NodeStatus};
use rustc_hash::FxHashMap;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

/// Index into per-kind arrays.
pub(crate) fn kind_ix(kind: LeaseKind) -> usize {
    match kind {
        LeaseKind::Spot => 0,
        LeaseKind::Preemptible => 1,
    }
}

/// Timer kinds on the lease timeline; ends sort before starts at the same time.
/// Lease timeline kinds, in the order items at the same time are processed
/// (docs/market-rules.md §11.10): ends, provisioning timeouts, teardowns overdue, starts.
pub(crate) const TIMER_END: u8 = 0;
/// A provisioning lease's deadline.
pub(crate) const TIMER_PROVISION: u8 = 1;
/// An ended lease's teardown deadline (keyed by the lease id; lives in `State::wipes`).
pub(crate) const TIMER_WIPE: u8 = 2;
/// A pending lease's start.
pub(crate) const TIMER_START: u8 = 3;

/// What a listed node contributes to the books and the inventory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Listing {
    pub(crate) offer: OfferId,
    pub(crate) sku: SkuId,
    pub(crate) region: crate::ids::RegionId,
    pub(crate) spot: Price,
    pub(crate) preemptible: Option<Price>,
    pub(crate) priority: u64,
    pub(crate) free: u32,
}

/// Offer book entry: (price, priority, offer id), ascending = best first.
pub(crate) type OfferKey = (Price, u64, OfferId);
/// Bid book entry: (limit descending, priority, bid id), ascending = best first. The book maps
/// it to the fewest free GPUs a node needs to serve the bid (its GPUs for single-node, 1 for
/// spread), so uncross can skip bids without looking them up.
pub(crate) type BidKey = (Reverse<Price>, u64, BidId);
/// Victim entry: (price, newest first).
pub(crate) type VictimKey = (Price, Reverse<LeaseId>);

/// What phase 2 needs to rule a victim out without looking up its lease and node: the lease's
/// buyer and the node's id, size and placement attributes (refiled when any of them changes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct VictimInfo {
    pub(crate) buyer: crate::ids::AccountId,
    pub(crate) node: NodeId,
    /// The node's physical GPUs.
    pub(crate) node_gpus: u32,
    pub(crate) site: crate::state::Site,
}

const SIZES: usize = crate::limits::MAX_NODE_GPUS as usize;

/// One SKU's books, per kind (index [`kind_ix`]).
///
/// Offers are kept twice: the full book in price-time order (with each offer's free GPUs),
/// and partitioned by free count, so a single-node bid for n GPUs merges only the partitions
/// with at least n free. Resting bids are partitioned by the region they are filed under (each
/// region a bid's constraint allows; `None` for bids without a region constraint) and by the
/// GPUs a node needs to serve them (the bid's GPUs for single-node, 1 for spread), so uncross
/// on nodes in regions R with at most f free merges only the partitions of `None` and R up to
/// f — bids restricted to other regions are never walked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SkuBooks {
    pub(crate) offers: [BTreeMap<OfferKey, u32>; 2],
    pub(crate) offers_by_free: [[BTreeSet<OfferKey>; SIZES]; 2],
    /// Per kind: region slot → partitions by GPUs needed. A slot exists only while it holds a
    /// bid.
    pub(crate) bids: [BTreeMap<Option<RegionId>, BidParts>; 2],
}

/// Resting bids of one region slot, partitioned by the GPUs a node needs to serve them.
pub(crate) type BidParts = [BTreeSet<BidKey>; SIZES];

/// The region slots a bid with these allowed regions is filed under.
fn region_slots(regions: &[RegionId]) -> impl Iterator<Item = Option<RegionId>> + '_ {
    let any = regions.is_empty().then_some(None);
    any.into_iter().chain(regions.iter().map(|&r| Some(r)))
}

/// GPUs one node must have free to serve `gpus` under `placement`: all of them for a
/// single-node bid, one for a spread bid (docs/market-rules.md §4, §4.1).
pub(crate) fn node_need(placement: crate::command::Placement, gpus: u32) -> u32 {
    match placement {
        crate::command::Placement::SingleNode => gpus,
        crate::command::Placement::Spread => 1,
        crate::command::Placement::Gang(g) => g.gpus_per_node,
    }
}

fn size_ix(n: u32) -> usize {
    (n.clamp(1, SIZES as u32) - 1) as usize
}

impl SkuBooks {
    fn insert_offer(&mut self, kind: usize, key: OfferKey, free: u32) {
        self.offers[kind].insert(key, free);
        self.offers_by_free[kind][size_ix(free)].insert(key);
    }

    fn set_free(&mut self, kind: usize, key: OfferKey, old: u32, free: u32) {
        if let Some(f) = self.offers[kind].get_mut(&key) {
            *f = free;
        }
        if size_ix(old) != size_ix(free) {
            self.offers_by_free[kind][size_ix(old)].remove(&key);
            self.offers_by_free[kind][size_ix(free)].insert(key);
        }
    }

    fn remove_offer(&mut self, kind: usize, key: &OfferKey, free: u32) {
        self.offers[kind].remove(key);
        self.offers_by_free[kind][size_ix(free)].remove(key);
    }

    fn insert_bid(&mut self, kind: usize, key: BidKey, need: u32, regions: &[RegionId]) {
        for slot in region_slots(regions) {
            self.bids[kind].entry(slot).or_default()[size_ix(need)].insert(key);
        }
    }

    pub(crate) fn remove_bid(
        &mut self,
        kind: usize,
        key: &BidKey,
        need: u32,
        regions: &[RegionId],
    ) {
        for slot in region_slots(regions) {
            if let Some(parts) = self.bids[kind].get_mut(&slot) {
                parts[size_ix(need)].remove(key);
                if parts.iter().all(BTreeSet::is_empty) {
                    self.bids[kind].remove(&slot);
                }
            }
        }
    }

    /// Listed offers of `kind` with at least `n` free GPUs, in book order, with their free
    /// counts.
    pub(crate) fn offers_with_free(&self, kind: usize, n: u32) -> OfferIter<'_> {
        if n <= 1 {
            OfferIter::Full(self.offers[kind].iter())
        } else {
            let parts = (size_ix(n)..SIZES)
                .filter(|&f| !self.offers_by_free[kind][f].is_empty())
                .map(|f| {
                    let mut it = self.offers_by_free[kind][f].iter();
                    let head = it.next().copied();
                    (it, head, f as u32 + 1)
                })
                .collect();
            OfferIter::Merge(parts)
        }
    }

    /// The first resting bid of `kind` after `cursor` (all bids if `None`) in priority order
    /// among those a node in one of `regions` with `free` GPUs could serve (by region
    /// constraint and GPUs needed); with the GPUs it needs.
    pub(crate) fn next_bid(
        &self,
        kind: usize,
        cursor: Option<BidKey>,
        free: u32,
        regions: &[RegionId],
    ) -> Option<(BidKey, u32)> {
        let mut best: Option<(BidKey, u32)> = None;
        let slots = std::iter::once(None).chain(regions.iter().map(|&r| Some(r)));
        for parts in slots.filter_map(|slot| self.bids[kind].get(&slot)) {
            for (f, set) in parts.iter().enumerate().take(size_ix(free) + 1) {
                let next = match cursor {
                    None => set.iter().next(),
                    Some(c) => set
                        .range((std::ops::Bound::Excluded(c), std::ops::Bound::Unbounded))
                        .next(),
                };
                if let Some(&k) = next
                    && best.is_none_or(|(b, _)| k < b)
                {
                    best = Some((k, f as u32 + 1));
                }
            }
        }
        best
    }
}

/// Merges sorted maps into one ascending sequence of (key, value) (k-way, by linear choice of
/// the least head: the number of maps is small — price levels).
pub(crate) struct MergeMaps<'a, K, V> {
    parts: Vec<MergePart<'a, K, V>>,
}

/// One map of a [`MergeMaps`]: its iterator and its current head.
type MergePart<'a, K, V> = (
    std::collections::btree_map::Iter<'a, K, V>,
    Option<(K, &'a V)>,
);

impl<'a, K: Ord + Copy, V> MergeMaps<'a, K, V> {
    pub(crate) fn new(maps: impl Iterator<Item = &'a BTreeMap<K, V>>) -> Self
    where
        K: 'a,
    {
        MergeMaps {
            parts: maps
                .map(|m| {
                    let mut it = m.iter();
                    let head = it.next().map(|(k, v)| (*k, v));
                    (it, head)
                })
                .collect(),
        }
    }
}

impl<'a, K: Ord + Copy, V> Iterator for MergeMaps<'a, K, V> {
    type Item = (K, &'a V);
    fn next(&mut self) -> Option<(K, &'a V)> {
        let mut best: Option<(usize, K)> = None;
        for (i, p) in self.parts.iter().enumerate() {
            if let Some((h, _)) = p.1
                && best.is_none_or(|(_, b)| h < b)
            {
                best = Some((i, h));
            }
        }
        let (i, _) = best?;
        let p = &mut self.parts[i];
        let out = p.1;
        p.1 = p.0.next().map(|(k, v)| (*k, v));
        out
    }
}

/// Iterator over offers in book order: the full book, or a merge of free-count partitions.
pub(crate) enum OfferIter<'a> {
    Full(std::collections::btree_map::Iter<'a, OfferKey, u32>),
    Merge(
        Vec<(
            std::collections::btree_set::Iter<'a, OfferKey>,
            Option<OfferKey>,
            u32,
        )>,
    ),
}

impl Iterator for OfferIter<'_> {
    type Item = (OfferKey, u32);
    fn next(&mut self) -> Option<(OfferKey, u32)> {
        match self {
            OfferIter::Full(it) => it.next().map(|(k, f)| (*k, *f)),
            OfferIter::Merge(parts) => {
                let mut best: Option<usize> = None;
                for (i, p) in parts.iter().enumerate() {
                    if let Some(h) = p.1
                        && best.is_none_or(|b| parts[b].1.is_none_or(|bh| h < bh))
                    {
                        best = Some(i);
                    }
                }
                let i = best?;
                let p = &mut parts[i];
                let out = p.1.map(|k| (k, p.2));
                p.1 = p.0.next().copied();
                out
            }
        }
    }
}

/// A timer entry, ordered by its time first (ms since epoch).
pub(crate) trait Timer: Ord + Copy {
    fn at(&self) -> i64;
}

impl<T: Ord + Copy> Timer for (i64, T) {
    fn at(&self) -> i64 {
        self.0
    }
}

impl<T: Ord + Copy> Timer for (i64, u8, T) {
    fn at(&self) -> i64 {
        self.0
    }
}

/// Timers in a min-heap with lazy deletion: cancelling an entry leaves it in place, and
/// [`Timers::pop_due`] drops entries that are no longer live when they come due (liveness is a
/// function of the canonical state, so the live entries are exactly what a sorted set would
/// hold). Pushing is a heap insert, cancelling is free; when more than half the entries are
/// stale, they are dropped, so memory stays within twice the live count.
#[derive(Clone, Debug)]
pub(crate) struct Timers<K> {
    heap: std::collections::BinaryHeap<Reverse<K>>,
    /// Entries cancelled since the last compaction (an estimate: a cancelled entry may have
    /// been re-pushed with the same key and be live again).
    stale: usize,
}

impl<K: Timer> Default for Timers<K> {
    fn default() -> Self {
        Timers {
            heap: std::collections::BinaryHeap::new(),
            stale: 0,
        }
    }
}

impl<K: Timer> Timers<K> {
    pub(crate) fn push(&mut self, k: K) {
        self.heap.push(Reverse(k));
    }

    /// Notes that `n` entries became stale.
    pub(crate) fn cancelled(&mut self, n: usize) {
        self.stale += n;
    }

    /// Takes out the earliest live entry due at or before `now`, dropping stale ones on the
    /// way; when none is due, compacts if stale entries are the majority.
    pub(crate) fn pop_due(&mut self, now: i64, live: impl Fn(&K) -> bool) -> Option<K> {
        while let Some(&Reverse(k)) = self.heap.peek() {
            if k.at() > now {
                break;
            }
            self.heap.pop();
            if live(&k) {
                return Some(k);
            }
            self.stale = self.stale.saturating_sub(1);
        }
        self.compact(live);
        None
    }

    /// Drops stale and duplicate entries once the stale estimate is the majority (amortized
    /// O(log n) per cancel). Duplicates matter: a key made stale and then live again (an offer's
    /// available-until amended X → Y → X) is pushed again while its old entry is still there.
    fn compact(&mut self, live: impl Fn(&K) -> bool) {
        if self.stale > 1024 && self.stale * 2 > self.heap.len() {
            let mut v = std::mem::take(&mut self.heap).into_vec();
            v.retain(|r| live(&r.0));
            v.sort_unstable();
            v.dedup();
            self.heap = v.into();
            self.stale = 0;
        }
    }

    /// The live entries in order, without duplicates.
    pub(crate) fn live(&self, live: impl Fn(&K) -> bool) -> Vec<K> {
        let mut v: Vec<K> = self.heap.iter().map(|r| r.0).filter(|k| live(k)).collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// Whether a lease timer entry is live: the lease ends (effective end) or, pending, starts
/// at that time.
pub(crate) fn lease_timer_live(
    leases: &FxHashMap<LeaseId, Lease>,
    wipes: &FxHashMap<LeaseId, crate::state::Wipe>,
    &(at, kind, id): &(i64, u8, LeaseId),
) -> bool {
    if kind == TIMER_WIPE {
        return wipes.get(&id).is_some_and(|w| w.deadline_ms == at);
    }
    leases.get(&id).is_some_and(|l| match kind {
        TIMER_END => l.effective_end_ms() == at,
        TIMER_PROVISION => {
            l.state == LeaseState::Provisioning && l.provision_deadline_ms == Some(at)
        }
        _ => l.state == LeaseState::Pending && l.start_ms == at,
    })
}

/// Whether an offer expiry entry is live: the offer is live with that available-until.
pub(crate) fn offer_expiry_live(
    offers: &FxHashMap<OfferId, crate::state::Offer>,
    &(at, id): &(i64, OfferId),
) -> bool {
    offers
        .get(&id)
        .is_some_and(|o| o.terms.available_until_ms == at)
}

/// Whether a GTC expiry entry is live: the bid rests with that expiry.
pub(crate) fn bid_expiry_live(
    bids: &FxHashMap<BidId, crate::state::Bid>,
    &(at, id): &(i64, BidId),
) -> bool {
    bids.get(&id).is_some_and(|b| b.expires_at_ms == Some(at))
}

/// Online nodes by heartbeat deadline: a min-heap with exactly one entry per online node,
/// (time, node) with time at or before the node's last heartbeat. A heartbeat of an online node
/// only updates the node; when an entry comes due and its node has heartbeated since, the entry
/// is filed again at that heartbeat. So a node costs one heap operation per timeout period, not
/// one per heartbeat, and the heap never holds more than the online nodes. (A sorted set by
/// last heartbeat would pay two tree searches on every heartbeat.)
#[derive(Clone, Debug, Default)]
pub(crate) struct HeartbeatQueue(std::collections::BinaryHeap<Reverse<(i64, NodeId)>>);

impl HeartbeatQueue {
    /// Files a node that has just come online (registered, or heartbeating while offline).
    pub(crate) fn push(&mut self, at: i64, node: NodeId) {
        self.0.push(Reverse((at, node)));
    }

    /// Takes out the online nodes whose last heartbeat is before `before`, as (last heartbeat,
    /// node) sorted; refiles the due entries of nodes that heartbeated since.
    pub(crate) fn pop_before(
        &mut self,
        before: i64,
        nodes: &FxHashMap<NodeId, Node>,
    ) -> Vec<(i64, NodeId)> {
        let mut due = Vec::new();
        while let Some(&Reverse((at, id))) = self.0.peek() {
            if at >= before {
                break;
            }
            self.0.pop();
            let Some(node) = nodes.get(&id).filter(|n| n.status == NodeStatus::Online) else {
                continue;
            };
            if node.last_heartbeat_ms < before {
                due.push((node.last_heartbeat_ms, id));
            } else {
                self.push(node.last_heartbeat_ms, id);
            }
        }
        due.sort_unstable();
        due
    }

    /// The filed nodes, sorted.
    pub(crate) fn nodes(&self) -> Vec<NodeId> {
        let mut v: Vec<NodeId> = self.0.iter().map(|r| r.0.1).collect();
        v.sort_unstable();
        v
    }

    /// Refiles every entry at `time(node)` (after heartbeats moved, e.g. by Resume).
    pub(crate) fn refile(&mut self, mut time: impl FnMut(NodeId) -> i64) {
        let entries = std::mem::take(&mut self.0).into_vec();
        self.0 = entries
            .into_iter()
            .map(|Reverse((_, id))| Reverse((time(id), id)))
            .collect();
    }

    /// Whether every entry is at or before its node's last heartbeat.
    pub(crate) fn entries_not_after(&self, nodes: &FxHashMap<NodeId, Node>) -> bool {
        self.0
            .iter()
            .all(|&Reverse((at, id))| nodes.get(&id).is_some_and(|n| at <= n.last_heartbeat_ms))
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Index {
    pub(crate) inventory: Inventory,
    pub(crate) listings: FxHashMap<NodeId, Listing>,
    /// Per SKU: the offer and bid books.
    pub(crate) books: Vec<SkuBooks>,
    /// Per SKU: preemption victims (active preemptible leases without notice, on a node with
    /// an offer), bucketed by the spot price of their node's offer, each bucket in victim order.
    pub(crate) victims_by_spot: Vec<BTreeMap<Price, BTreeMap<VictimKey, VictimInfo>>>,
    /// Attested GPU UUID → the node whose latest attestation matched with it (§12.1).
    pub(crate) gpu_uuids: FxHashMap<String, NodeId>,
    /// The same victims bucketed by their offer's preemptible price (none without one).
    pub(crate) victims_by_pre: Vec<BTreeMap<Price, BTreeMap<VictimKey, VictimInfo>>>,
    /// Where each filed victim is: (SKU, spot bucket, preemptible bucket).
    pub(crate) victim_at: FxHashMap<LeaseId, (SkuId, Price, Option<Price>)>,
    /// Per node with filed victims: the GPUs they hold (bit i = GPU i), so phase 2 can bound
    /// what preempting on a node could yield before looking at its leases.
    pub(crate) victim_gpus: FxHashMap<NodeId, u32>,
    /// Online nodes by last heartbeat.
    pub(crate) heartbeats: HeartbeatQueue,
    /// Lease timeline: (time, TIMER_END | TIMER_START, lease); live while the lease ends
    /// (effective end) or starts (pending) at that time ([`lease_timer_live`]).
    pub(crate) lease_timers: Timers<(i64, u8, LeaseId)>,
    /// GTC expiries: (time, bid); live while the bid rests with that expiry.
    pub(crate) bid_expiry: Timers<(i64, BidId)>,
    /// Client order ids in acceptance order, for forgetting them after the retention window.
    pub(crate) client_order_expiry: std::collections::VecDeque<(i64, super::ClientOrderKey)>,
    /// Client order ids past retention whose bid still rests: bid → key.
    pub(crate) parked_client_orders: FxHashMap<BidId, super::ClientOrderKey>,
    /// Offer available-until times.
    pub(crate) offer_expiry: Timers<(i64, OfferId)>,
    /// Nodes whose listed capacity grew or whose listing or eligibility terms changed since the
    /// last uncross (docs/market-rules.md §6: only they can fill a resting bid).
    pub(crate) dirty: Vec<NodeId>,
    /// (due time, node) of every node with a verification due (§12.2).
    pub(crate) verify_due: std::collections::BTreeSet<(i64, NodeId)>,
    /// (deadline, node) of every verification run under way.
    pub(crate) verify_deadlines: std::collections::BTreeSet<(i64, NodeId)>,
    /// A run's lease id → its node.
    pub(crate) verify_leases: FxHashMap<LeaseId, NodeId>,
    /// Trust requirements of leases ended in the current command, for their failover
    /// (cleared after every command).
    pub(crate) ended_trust: FxHashMap<LeaseId, crate::command::TrustConstraints>,
    /// The highest of today's node scores (`StateExt::day_scores`), `None` when no node has
    /// one: a resting bid requiring more cannot fill before the next midnight (§12.3).
    pub(crate) max_day_score: Option<u32>,
    /// Resting bids parked off the bid books, as (`min_reliability` in bp, bid): each requires
    /// a score above [`Index::max_day_score`], so no node can serve it before the next
    /// midnight's scores (§12.3). Uncross never walks them; the day roll files those a node
    /// now meets back into the books (their keys, and so their priority, unchanged) and parks
    /// those none meets. Invariant: a resting bid is in its books or here, never both.
    pub(crate) parked_trust: std::collections::BTreeSet<(u32, BidId)>,
    /// Nodes with a verification run under way (mirrors `StateExt::verifications`' runs, for
    /// matching's per-offer checks: a hash lookup, not a tree walk).
    pub(crate) verifying: rustc_hash::FxHashSet<NodeId>,
    /// Node → time (ms) of its latest run, for nodes whose latest run was judged `verified`
    /// (mirrors `StateExt::verifications`; `constraints.verified` also needs it not stale and
    /// no run under way, §12.2).
    pub(crate) verified_at: FxHashMap<NodeId, i64>,
    /// Today's node scores (mirrors `StateExt::day_scores`, §12.3), for matching's lookups.
    pub(crate) day_score: FxHashMap<NodeId, u32>,
    /// Live gang member lease → (gang, rank) (mirrors `FabricExt::gangs`, §13).
    pub(crate) lease_gang: FxHashMap<LeaseId, (BidId, u32)>,
    /// Resting gang bids by (SKU, kind), in priority order: kept out of the bid books, tried
    /// whole by `uncross_gangs` (§13.2).
    pub(crate) gang_book: BTreeMap<(SkuId, usize), std::collections::BTreeSet<BidKey>>,
    /// Gangs whose members changed in the current command, settled at its end (§13.3).
    pub(crate) touched_gangs: Vec<BidId>,
    /// Gang members lost in the current command → (gang, rank), for their replacement.
    pub(crate) lost_gang: FxHashMap<LeaseId, (BidId, u32)>,
    /// Members ended `not_delivered` in the current command only because their gang failed
    /// (§13.3): the reliability book does not count them against their nodes.
    pub(crate) gang_collateral: Vec<LeaseId>,
    /// Fabric domains interned: (supplier, name) → id, and back (mirrors
    /// `FabricExt::node_fabric`; ids are this process's own, never compared across restores).
    pub(crate) domain_ids: FxHashMap<(crate::ids::AccountId, String), u32>,
    pub(crate) domain_keys: Vec<(crate::ids::AccountId, String)>,
    /// Node → its interned domain.
    pub(crate) node_domain: FxHashMap<NodeId, u32>,
    /// Nodes of each SKU per gang place (§13.2), and per (SKU, scope) how many places have
    /// each size: a gang larger than every place is refused without a walk.
    pub(crate) place_nodes: FxHashMap<(SkuId, super::gang::PlaceId), u32>,
    pub(crate) place_sizes: FxHashMap<(SkuId, crate::command::GangScope), BTreeMap<u32, u32>>,
}

impl Index {
    pub(crate) fn new(skus: usize) -> Index {
        Index {
            inventory: Inventory::default(),
            listings: FxHashMap::default(),
            books: (0..skus).map(|_| SkuBooks::default()).collect(),
            victims_by_spot: (0..skus).map(|_| BTreeMap::new()).collect(),
            victims_by_pre: (0..skus).map(|_| BTreeMap::new()).collect(),
            victim_at: FxHashMap::default(),
            victim_gpus: FxHashMap::default(),
            gpu_uuids: FxHashMap::default(),
            heartbeats: HeartbeatQueue::default(),
            lease_timers: Timers::default(),
            bid_expiry: Timers::default(),
            offer_expiry: Timers::default(),
            client_order_expiry: std::collections::VecDeque::new(),
            parked_client_orders: FxHashMap::default(),
            dirty: Vec::new(),
            verify_due: std::collections::BTreeSet::new(),
            verify_deadlines: std::collections::BTreeSet::new(),
            verify_leases: FxHashMap::default(),
            ended_trust: FxHashMap::default(),
            max_day_score: None,
            parked_trust: std::collections::BTreeSet::new(),
            verifying: rustc_hash::FxHashSet::default(),
            verified_at: FxHashMap::default(),
            day_score: FxHashMap::default(),
            lease_gang: FxHashMap::default(),
            gang_book: BTreeMap::new(),
            touched_gangs: Vec::new(),
            lost_gang: FxHashMap::default(),
            gang_collateral: Vec::new(),
            domain_ids: FxHashMap::default(),
            domain_keys: Vec::new(),
            node_domain: FxHashMap::default(),
            place_nodes: FxHashMap::default(),
            place_sizes: FxHashMap::default(),
        }
    }

    /// The `min_reliability` (bp) that parks a resting bid with `trust` off the books while no
    /// node's score of today reaches it (§12.3), or `None` if it belongs in the books.
    pub(crate) fn parks(&self, trust: Option<&crate::command::TrustConstraints>) -> Option<u32> {
        trust
            .and_then(|t| t.min_reliability_bp)
            .filter(|&m| self.max_day_score.is_none_or(|mx| mx < m))
    }

    pub(crate) fn add_lease_timers(&mut self, lease: &Lease) {
        self.lease_timers
            .push((lease.effective_end_ms(), TIMER_END, lease.id));
        if lease.state == LeaseState::Pending {
            self.lease_timers
                .push((lease.start_ms, TIMER_START, lease.id));
        }
        if let (LeaseState::Provisioning, Some(d)) = (lease.state, lease.provision_deadline_ms) {
            self.lease_timers.push((d, TIMER_PROVISION, lease.id));
        }
    }

    /// Call before a change that moves the lease's timers (or ends it): its current entries
    /// become stale.
    pub(crate) fn cancel_lease_timers(&mut self, lease: &Lease) {
        self.lease_timers.cancelled(
            1 + usize::from(lease.state == LeaseState::Pending)
                + usize::from(lease.provision_deadline_ms.is_some()),
        );
    }

    /// Files a new resting bid: in its books, or parked when `parked` (its `min_reliability`
    /// from [`Index::parks`]) says no node can serve it today; and its expiry timer.
    pub(crate) fn add_resting_bid(&mut self, bid: &crate::state::Bid, parked: Option<u32>) {
        match parked {
            Some(m) => {
                self.parked_trust.insert((m, bid.id));
            }
            None => self.book_bid(bid),
        }
        if let Some(e) = bid.expires_at_ms {
            self.bid_expiry.push((e, bid.id));
        }
    }

    /// Puts a resting bid in its SKU's bid books (by kind, region slots and GPUs per node).
    pub(crate) fn book_bid(&mut self, bid: &crate::state::Bid) {
        if matches!(bid.placement, crate::command::Placement::Gang(_)) {
            self.gang_book
                .entry((bid.sku, kind_ix(bid.kind)))
                .or_default()
                .insert((Reverse(bid.limit), bid.priority, bid.id));
            return;
        }
        let need = node_need(bid.placement, bid.gpus);
        if let Some(books) = self.books.get_mut(usize::from(bid.sku.0)) {
            books.insert_bid(
                kind_ix(bid.kind),
                (Reverse(bid.limit), bid.priority, bid.id),
                need,
                &bid.constraints.regions,
            );
        }
    }

    /// Takes a resting bid out of its SKU's bid books (a no-op for a parked bid).
    pub(crate) fn unbook_bid(&mut self, bid: &crate::state::Bid) {
        if matches!(bid.placement, crate::command::Placement::Gang(_)) {
            let k = (bid.sku, kind_ix(bid.kind));
            if let Some(set) = self.gang_book.get_mut(&k) {
                set.remove(&(Reverse(bid.limit), bid.priority, bid.id));
                if set.is_empty() {
                    self.gang_book.remove(&k);
                }
            }
            return;
        }
        let need = node_need(bid.placement, bid.gpus);
        if let Some(books) = self.books.get_mut(usize::from(bid.sku.0)) {
            books.remove_bid(
                kind_ix(bid.kind),
                &(Reverse(bid.limit), bid.priority, bid.id),
                need,
                &bid.constraints.regions,
            );
        }
    }

    /// Is this lease a preemption victim candidate (active, preemptible, no notice)?
    pub(crate) fn is_victim(lease: &Lease) -> bool {
        lease.kind == LeaseKind::Preemptible
            && lease.state == LeaseState::Active
            && lease.notice.is_none()
    }

    pub(crate) fn mark_dirty(&mut self, node: NodeId) {
        self.dirty.push(node);
    }
}

/// The lowest `n` set bits of `mask`.
pub(crate) fn lowest_bits(mask: u32, n: u32) -> u32 {
    let mut out = 0;
    let mut m = mask;
    for _ in 0..n {
        if m == 0 {
            break;
        }
        let bit = m & m.wrapping_neg();
        out |= bit;
        m &= !bit;
    }
    out
}

/// Free GPUs of `node` for the offer terms `offer_gpus` (docs/market-rules.md §2).
pub(crate) fn free_for(node: &Node, offer_gpus: u32) -> u32 {
    let claimed = node.occupied_mask().count_ones();
    let unclaimed_healthy = (node.healthy_mask & !node.occupied_mask()).count_ones();
    offer_gpus.saturating_sub(claimed).min(unclaimed_healthy)
}

impl Engine {
    /// What the node should contribute to books and inventory now (None: not listed).
    pub(crate) fn compute_listing(st: &State, idx: &Index, node: &Node) -> Option<Listing> {
        if node.status != NodeStatus::Online
            || node.draining
            || node.held.is_some()
            || idx.verifying.contains(&node.id)
        {
            return None;
        }
        let offer = st.offers.get(&node.offer?)?;
        let free = free_for(node, offer.terms.gpus);
        (free > 0).then_some(Listing {
            offer: offer.id,
            sku: node.sku,
            region: node.region,
            spot: offer.terms.spot_price,
            preemptible: offer.terms.preemptible_price,
            priority: offer.priority,
            free,
        })
    }

    /// Brings a node's listing (books and inventory) in line with the state. Marks the SKU
    /// dirty when capacity grew or terms changed, so uncross looks at it.
    pub(crate) fn relist(&mut self, node_id: NodeId) {
        let new = match self.st.nodes.get(&node_id) {
            Some(node) => Self::compute_listing(&self.st, &self.idx, node),
            None => None,
        };
        let old = self.idx.listings.get(&node_id).copied();
        if old == new {
            return;
        }
        // The common case (a lease began or ended): same listing, another free count. Update
        // in place instead of unlisting and listing again.
        if let (Some(o), Some(n)) = (old, new)
            && (Listing { free: n.free, ..o }) == n
        {
            self.change_free(node_id, &o, n.free);
            return;
        }
        if let Some(o) = old {
            self.unlist(node_id, &o);
        }
        if let Some(n) = new {
            let books = &mut self.idx.books[usize::from(n.sku.0)];
            books.insert_offer(0, (n.spot, n.priority, n.offer), n.free);
            self.idx.inventory.add(
                LevelKey {
                    sku: n.sku,
                    region: n.region,
                    kind: LeaseKind::Spot,
                    price: n.spot,
                },
                n.free,
            );
            if let Some(p) = n.preemptible {
                books.insert_offer(1, (p, n.priority, n.offer), n.free);
                self.idx.inventory.add(
                    LevelKey {
                        sku: n.sku,
                        region: n.region,
                        kind: LeaseKind::Preemptible,
                        price: p,
                    },
                    n.free,
                );
            }
            self.idx.listings.insert(node_id, n);
            let grew = match old {
                None => true,
                Some(o) => {
                    n.free > o.free
                        || o.spot != n.spot
                        || o.preemptible != n.preemptible
                        || o.priority != n.priority
                        || o.region != n.region
                        || o.offer != n.offer
                }
            };
            if grew {
                self.idx.mark_dirty(node_id);
            }
        }
    }

    /// Moves a listed node from `o.free` to `free` GPUs (both > 0), same keys.
    fn change_free(&mut self, node_id: NodeId, o: &Listing, free: u32) {
        let books = &mut self.idx.books[usize::from(o.sku.0)];
        books.set_free(0, (o.spot, o.priority, o.offer), o.free, free);
        self.idx.inventory.change(
            LevelKey {
                sku: o.sku,
                region: o.region,
                kind: LeaseKind::Spot,
                price: o.spot,
            },
            o.free,
            free,
        );
        if let Some(p) = o.preemptible {
            books.set_free(1, (p, o.priority, o.offer), o.free, free);
            self.idx.inventory.change(
                LevelKey {
                    sku: o.sku,
                    region: o.region,
                    kind: LeaseKind::Preemptible,
                    price: p,
                },
                o.free,
                free,
            );
        }
        if let Some(l) = self.idx.listings.get_mut(&node_id) {
            l.free = free;
        }
        if free > o.free {
            self.idx.mark_dirty(node_id);
        }
    }

    fn unlist(&mut self, node_id: NodeId, o: &Listing) {
        let books = &mut self.idx.books[usize::from(o.sku.0)];
        books.remove_offer(0, &(o.spot, o.priority, o.offer), o.free);
        self.idx.inventory.remove(
            LevelKey {
                sku: o.sku,
                region: o.region,
                kind: LeaseKind::Spot,
                price: o.spot,
            },
            o.free,
        );
        if let Some(p) = o.preemptible {
            books.remove_offer(1, &(p, o.priority, o.offer), o.free);
            self.idx.inventory.remove(
                LevelKey {
                    sku: o.sku,
                    region: o.region,
                    kind: LeaseKind::Preemptible,
                    price: p,
                },
                o.free,
            );
        }
        self.idx.listings.remove(&node_id);
    }

    /// Rebuilds every derived index from the canonical state (after restore).
    pub(crate) fn rebuild_index(&mut self) {
        self.idx = Index::new(self.st.catalog.len());
        for (id, v) in &self.ext.verifications {
            if let Some(d) = v.due_ms {
                self.idx.verify_due.insert((d, *id));
            }
            if let Some(r) = v.run {
                self.idx.verify_deadlines.insert((r.deadline_ms, *id));
                self.idx.verify_leases.insert(r.lease, *id);
                self.idx.verifying.insert(*id);
            }
            if let Some(last) = v.last
                && last.judgment.outcome == crate::verify::VerifyOutcome::Verified
            {
                self.idx.verified_at.insert(*id, last.at_ms);
            }
        }
        self.idx.day_score = self.ext.day_scores.iter().map(|(n, s)| (*n, *s)).collect();
        let mut node_ids: Vec<NodeId> = self.st.nodes.keys().copied().collect();
        node_ids.sort_unstable();
        for &id in &node_ids {
            if let Some(f) = self.fab.node_fabric.get(&id).cloned() {
                self.set_fabric(id, &f);
            }
            self.index_place(id, true);
        }
        let mut online = Vec::new();
        for id in node_ids {
            if let Some(node) = self.st.nodes.get(&id)
                && node.status == NodeStatus::Online
            {
                online.push((node.last_heartbeat_ms, id));
            }
            self.relist(id);
        }
        self.idx.heartbeats = HeartbeatQueue(online.into_iter().map(Reverse).collect());
        self.idx.max_day_score = self.ext.day_scores.values().copied().max();
        for (id, a) in &self.ext.attestations {
            if a.mismatch.is_none() {
                for u in &a.uuids {
                    self.idx.gpu_uuids.insert(u.clone(), *id);
                }
            }
        }
        for (bid, gang) in &self.fab.gangs {
            for (rank, m) in gang.members.iter().enumerate() {
                if let Some(l) = m.lease {
                    self.idx.lease_gang.insert(l, (*bid, rank as u32));
                }
            }
        }
        let lease_ids: Vec<LeaseId> = self.st.leases.keys().copied().collect();
        for id in lease_ids {
            if let Some(lease) = self.st.leases.get(&id) {
                self.idx.add_lease_timers(lease);
            }
            self.file_victim(id);
        }
        for w in self.st.wipes.values() {
            self.idx
                .lease_timers
                .push((w.deadline_ms, TIMER_WIPE, w.lease));
        }
        for bid in self.st.bids.values() {
            let parked = self.idx.parks(self.ext.bid_trust.get(&bid.id));
            self.idx.add_resting_bid(bid, parked);
        }
        for offer in self.st.offers.values() {
            self.idx
                .offer_expiry
                .push((offer.terms.available_until_ms, offer.id));
        }
        let retention = self.st.config.client_order_id_retention_ms;
        let now = self.st.now;
        let mut coids: Vec<(i64, super::ClientOrderKey)> = Vec::new();
        for (k, &(bid, at)) in &self.st.client_orders {
            if at.saturating_add(retention) <= now && self.st.bids.contains_key(&bid) {
                self.idx.parked_client_orders.insert(bid, k.clone());
            } else {
                coids.push((at, k.clone()));
            }
        }
        coids.sort_unstable();
        self.idx.client_order_expiry = coids.into();
        self.idx.inventory.forget_touched();
        self.idx.dirty.clear();
    }

    /// Takes a lease out of the victim buckets, if it is filed there.
    pub(crate) fn unfile_victim(&mut self, id: LeaseId) {
        let Some((sku, spot, pre)) = self.idx.victim_at.remove(&id) else {
            return;
        };
        let Some(lease) = self.st.leases.get(&id) else {
            return;
        };
        let key = (lease.price, Reverse(id));
        if let std::collections::hash_map::Entry::Occupied(mut e) =
            self.idx.victim_gpus.entry(lease.node)
        {
            *e.get_mut() &= !lease.gpu_mask;
            if *e.get() == 0 {
                e.remove();
            }
        }
        let ix = usize::from(sku.0);
        for (buckets, price) in [
            (&mut self.idx.victims_by_spot[ix], Some(spot)),
            (&mut self.idx.victims_by_pre[ix], pre),
        ] {
            if let Some(p) = price
                && let Some(set) = buckets.get_mut(&p)
            {
                set.remove(&key);
                if set.is_empty() {
                    buckets.remove(&p);
                }
            }
        }
    }

    /// Files a lease in the victim buckets by its node's current offer, if it is a victim
    /// (refiling it when already filed).
    pub(crate) fn file_victim(&mut self, id: LeaseId) {
        self.unfile_victim(id);
        let Some(lease) = self.st.leases.get(&id) else {
            return;
        };
        if !Index::is_victim(lease) {
            return;
        }
        let Some((node, offer)) = self
            .st
            .nodes
            .get(&lease.node)
            .and_then(|n| n.offer.and_then(|o| self.st.offers.get(&o)).map(|o| (n, o)))
        else {
            return;
        };
        let (spot, pre) = (offer.terms.spot_price, offer.terms.preemptible_price);
        let key = (lease.price, Reverse(id));
        let info = VictimInfo {
            buyer: lease.buyer,
            node: node.id,
            node_gpus: node.gpus,
            site: crate::state::Site::of(node),
        };
        let sku = lease.sku;
        let ix = usize::from(sku.0);
        self.idx.victims_by_spot[ix]
            .entry(spot)
            .or_default()
            .insert(key, info);
        if let Some(p) = pre {
            self.idx.victims_by_pre[ix]
                .entry(p)
                .or_default()
                .insert(key, info);
        }
        self.idx.victim_at.insert(id, (sku, spot, pre));
        *self.idx.victim_gpus.entry(lease.node).or_default() |= lease.gpu_mask;
    }

    /// Refiles every victim on a node (after its offer changed).
    pub(crate) fn refile_node_victims(&mut self, node_id: NodeId) {
        let leases = match self.st.nodes.get(&node_id) {
            Some(n) => n.leases.clone(),
            None => return,
        };
        for id in leases {
            self.file_victim(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Timers;
    use std::cmp::Reverse;

    /// Entries come out in key order whatever the push order; compaction drops exactly the
    /// entries the liveness test rejects, and only once stale entries outnumber live ones.
    #[test]
    fn timers_pop_in_order_and_compact_only_stale_entries() {
        let mut t: Timers<(i64, u64)> = Timers::default();
        for i in 0..3000u64 {
            t.push(((i * 7919 % 3000) as i64, i));
        }
        let live = |k: &(i64, u64)| k.1.is_multiple_of(3);
        t.cancelled(1000);
        t.compact(live);
        assert_eq!(t.heap.len(), 3000, "1000 stale of 3000 is not a majority");
        t.cancelled(1000);
        t.compact(live);
        assert_eq!(
            t.heap.len(),
            1000,
            "2000 stale of 3000: compacted to the live ones"
        );
        assert_eq!(t.live(live).len(), 1000);
        let mut last = None;
        while let Some(k) = t.pop_due(i64::MAX, live) {
            assert!(live(&k));
            assert!(last.is_none_or(|l| l <= k), "{last:?} before {k:?}");
            last = Some(k);
        }
    }

    use crate::catalog::Catalog;
    use crate::command::{Command, Interconnect, Jurisdiction, Meta, NodeSpec, OfferTerms};
    use crate::engine::Engine;
    use crate::ids::{AccountId, NodeId, OfferId, SkuId};
    use crate::limits::EngineConfig;
    use crate::price::Price;

    const T0: i64 = 1_750_000_000_000;

    /// A market with one 8-GPU node (id `1 << 20`) and its offer (id `2 << 20`) until `until`;
    /// returns the engine and a function applying a command at a time (asserting acceptance).
    fn one_offer(until: i64) -> (Engine, impl FnMut(&mut Engine, Command, i64)) {
        let mut seq = 0;
        let mut run = move |e: &mut Engine, c: Command, t: i64| {
            seq += 1;
            let out = e.apply(
                &c,
                Meta {
                    seq,
                    timestamp_ms: t,
                },
            );
            assert!(out.rejection().is_none(), "{c:?}: {:?}", out.events);
        };
        let mut e = Engine::new(EngineConfig::default(), Catalog::builtin());
        let spec = NodeSpec {
            name: "a".into(),
            sku: SkuId(0),
            gpus: 8,
            region: "r0".into(),
            jurisdiction: Jurisdiction(*b"CN"),
            interconnect: Interconnect::Infiniband,
            nvlink: true,
            fabric: None,
        };
        run(
            &mut e,
            Command::RegisterNode {
                account: AccountId(1),
                spec,
            },
            T0,
        );
        run(
            &mut e,
            Command::PostOffer {
                account: AccountId(1),
                node: NodeId(1 << 20),
                terms: terms(until),
            },
            T0,
        );
        (e, run)
    }

    fn terms(until: i64) -> OfferTerms {
        OfferTerms {
            gpus: 8,
            spot_price: Price::from_ticks(1000).unwrap(),
            preemptible_price: None,
            min_lease_s: 0,
            max_lease_s: 3600,
            available_until_ms: until,
            notice_s: 0,
            provision_s: 180,
        }
    }

    /// Found in review: an offer's available-until amended X → Y → X made the old X entry live
    /// again beside the new one, and compaction kept both, so a supplier timing its amends to
    /// the compactions grew the heap by ~0.56 entries per amend (111,281 after 200,000). The
    /// amends here are timed the same way (to the stale estimate); compaction now also drops
    /// duplicates.
    #[test]
    fn offer_expiry_heap_stays_bounded_under_toggling_amends() {
        let (x, y, z) = (T0 + 86_400_000, T0 + 2 * 86_400_000, T0 + 3 * 86_400_000);
        let (mut e, mut run) = one_offer(x);
        let would_compact = |e: &Engine, k: usize| {
            let t = &e.idx.offer_expiry;
            let (stale, len) = (t.stale + k, t.heap.len() + k);
            stale > 1024 && stale * 2 > len
        };
        let mut cur = x;
        for _ in 0..200_000 {
            cur = if cur == x {
                y
            } else if would_compact(&e, 1) || !would_compact(&e, 2) {
                x
            } else if cur == y {
                z
            } else {
                y
            };
            run(
                &mut e,
                Command::AmendOffer {
                    account: AccountId(1),
                    offer: OfferId(2 << 20),
                    terms: terms(cur),
                },
                T0 + 1,
            );
        }
        let len = e.idx.offer_expiry.heap.len();
        assert!(
            len < 4096,
            "offer expiry heap holds {len} entries for one offer"
        );
    }

    /// Found in review: heartbeats of one node at one timestamp (a frozen clock) each queued an
    /// entry. The heap now holds one entry per online node however often it heartbeats, and the
    /// entry is refiled at the last heartbeat when it comes due.
    #[test]
    fn heartbeat_queue_holds_one_entry_per_online_node() {
        let (mut e, mut run) = one_offer(T0 + 86_400_000);
        let node = NodeId(1 << 20);
        let hb = Command::Heartbeat {
            account: AccountId(1),
            node,
            healthy_gpus: 8,
        };
        for i in 0..100_000 {
            run(&mut e, hb.clone(), T0 + 5 + i / 10);
        }
        assert_eq!(e.idx.heartbeats.nodes(), vec![node]);
        // Due 15 s after registration, the entry is refiled at the last heartbeat, not timed out.
        let last = T0 + 5 + 9_999;
        run(&mut e, Command::Tick, T0 + 15_001);
        assert_eq!(e.idx.heartbeats.0.peek(), Some(&Reverse((last, node))));
        assert_eq!(
            e.node(node).map(|n| n.status),
            Some(crate::state::NodeStatus::Online)
        );
        // Silent past the timeout: out of the heap and offline.
        run(&mut e, Command::Tick, last + 15_001);
        assert!(e.idx.heartbeats.nodes().is_empty());
        assert_eq!(
            e.node(node).map(|n| n.status),
            Some(crate::state::NodeStatus::Offline)
        );
    }
}
