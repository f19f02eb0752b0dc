//! Derived indexes, rebuilt from the canonical state on restore: the offer books, the resting
//! bid books, the preemption victims, the inventory aggregate and the timers.

use super::{Engine, State};
use crate::command::LeaseKind;
use crate::ids::{BidId, LeaseId, NodeId, OfferId, SkuId};
use crate::inventory::{Inventory, LevelKey};
use crate::price::Price;
use crate::state::{Lease, LeaseState, Node, NodeStatus};
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
pub(crate) const TIMER_END: u8 = 0;
pub(crate) const TIMER_START: u8 = 1;

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

#[derive(Clone, Debug)]
pub(crate) struct Index {
    pub(crate) inventory: Inventory,
    pub(crate) listings: BTreeMap<NodeId, Listing>,
    /// Per SKU, per kind: listed offers → their free GPUs (so a scan can skip offers too
    /// small for a single-node bid without looking them up).
    pub(crate) offer_book: Vec<[BTreeMap<OfferKey, u32>; 2]>,
    /// Per SKU, per kind: resting bids → GPUs a node needs to serve them.
    pub(crate) bid_book: Vec<[BTreeMap<BidKey, u32>; 2]>,
    /// Per SKU: active preemptible leases not under notice.
    pub(crate) victims: Vec<BTreeSet<VictimKey>>,
    /// Per SKU: nodes holding victims, keyed by their offer's spot price → victim count; lets a
    /// spot bid skip preemption when no such node is cheap enough.
    pub(crate) victim_nodes: Vec<BTreeMap<(Price, NodeId), u32>>,
    /// The key each node has in `victim_nodes`.
    pub(crate) victim_node_key: BTreeMap<NodeId, (SkuId, Price)>,
    /// Online nodes by last heartbeat.
    pub(crate) heartbeats: BTreeSet<(i64, NodeId)>,
    /// Lease timeline: (time, TIMER_END | TIMER_START, lease).
    pub(crate) lease_timers: BTreeSet<(i64, u8, LeaseId)>,
    /// GTC expiries.
    pub(crate) bid_expiry: BTreeSet<(i64, BidId)>,
    /// Offer available-until times.
    pub(crate) offer_expiry: BTreeSet<(i64, OfferId)>,
    /// Nodes whose listed capacity grew or whose listing or eligibility terms changed since the
    /// last uncross (docs/market-rules.md §6: only they can fill a resting bid).
    pub(crate) dirty: Vec<NodeId>,
}

impl Index {
    pub(crate) fn new(skus: usize) -> Index {
        Index {
            inventory: Inventory::default(),
            listings: BTreeMap::new(),
            offer_book: (0..skus).map(|_| Default::default()).collect(),
            bid_book: (0..skus).map(|_| Default::default()).collect(),
            victims: (0..skus).map(|_| BTreeSet::new()).collect(),
            victim_nodes: (0..skus).map(|_| BTreeMap::new()).collect(),
            victim_node_key: BTreeMap::new(),
            heartbeats: BTreeSet::new(),
            lease_timers: BTreeSet::new(),
            bid_expiry: BTreeSet::new(),
            offer_expiry: BTreeSet::new(),
            dirty: Vec::new(),
        }
    }

    pub(crate) fn add_lease_timers(&mut self, lease: &Lease) {
        self.lease_timers
            .insert((lease.effective_end_ms(), TIMER_END, lease.id));
        if lease.state == LeaseState::Pending {
            self.lease_timers
                .insert((lease.start_ms, TIMER_START, lease.id));
        }
    }

    pub(crate) fn remove_lease_timers(&mut self, lease: &Lease) {
        self.lease_timers
            .remove(&(lease.effective_end_ms(), TIMER_END, lease.id));
        if lease.state == LeaseState::Pending {
            self.lease_timers
                .remove(&(lease.start_ms, TIMER_START, lease.id));
        }
    }

    pub(crate) fn add_resting_bid(&mut self, bid: &crate::state::Bid) {
        let need = match bid.placement {
            crate::command::Placement::SingleNode => bid.remaining,
            crate::command::Placement::Spread => 1,
        };
        if let Some(books) = self.bid_book.get_mut(usize::from(bid.sku.0)) {
            books[kind_ix(bid.kind)].insert((Reverse(bid.limit), bid.priority, bid.id), need);
        }
        if let Some(e) = bid.expires_at_ms {
            self.bid_expiry.insert((e, bid.id));
        }
    }

    /// Is this lease a preemption victim candidate (active, preemptible, no notice)?
    pub(crate) fn is_victim(lease: &Lease) -> bool {
        lease.kind == LeaseKind::Preemptible
            && lease.state == LeaseState::Active
            && lease.notice.is_none()
    }

    pub(crate) fn add_victim(&mut self, lease: &Lease) {
        if Self::is_victim(lease) {
            if let Some(v) = self.victims.get_mut(usize::from(lease.sku.0)) {
                v.insert((lease.price, Reverse(lease.id)));
            }
        }
    }

    pub(crate) fn remove_victim(&mut self, lease: &Lease) {
        if let Some(v) = self.victims.get_mut(usize::from(lease.sku.0)) {
            v.remove(&(lease.price, Reverse(lease.id)));
        }
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
    let claimed = node.claimed_mask.count_ones();
    let unclaimed_healthy = (node.healthy_mask & !node.claimed_mask).count_ones();
    offer_gpus.saturating_sub(claimed).min(unclaimed_healthy)
}

impl Engine {
    /// Free GPUs of a node for its live offer; 0 without one.
    pub(crate) fn node_free(&self, node: &Node) -> u32 {
        node.offer
            .and_then(|o| self.st.offers.get(&o))
            .map(|o| free_for(node, o.terms.gpus))
            .unwrap_or(0)
    }

    /// What the node should contribute to books and inventory now (None: not listed).
    pub(crate) fn compute_listing(st: &State, node: &Node) -> Option<Listing> {
        if node.status != NodeStatus::Online || node.draining {
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
            Some(node) => Self::compute_listing(&self.st, node),
            None => None,
        };
        let old = self.idx.listings.get(&node_id).copied();
        if old == new {
            return;
        }
        if let Some(o) = old {
            self.unlist(node_id, &o);
        }
        if let Some(n) = new {
            let books = &mut self.idx.offer_book[usize::from(n.sku.0)];
            books[0].insert((n.spot, n.priority, n.offer), n.free);
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
                books[1].insert((p, n.priority, n.offer), n.free);
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

    fn unlist(&mut self, node_id: NodeId, o: &Listing) {
        let books = &mut self.idx.offer_book[usize::from(o.sku.0)];
        books[0].remove(&(o.spot, o.priority, o.offer));
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
            books[1].remove(&(p, o.priority, o.offer));
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
        let node_ids: Vec<NodeId> = self.st.nodes.keys().copied().collect();
        for id in node_ids {
            if let Some(node) = self.st.nodes.get(&id) {
                if node.status == NodeStatus::Online {
                    self.idx.heartbeats.insert((node.last_heartbeat_ms, id));
                }
            }
            self.relist(id);
        }
        for lease in self.st.leases.values() {
            self.idx.add_lease_timers(lease);
            self.idx.add_victim(lease);
        }
        let node_ids: Vec<NodeId> = self.st.nodes.keys().copied().collect();
        for id in node_ids {
            self.rekey_victim_node(id);
        }
        for bid in self.st.bids.values() {
            self.idx.add_resting_bid(bid);
        }
        for offer in self.st.offers.values() {
            self.idx
                .offer_expiry
                .insert((offer.terms.available_until_ms, offer.id));
        }
        self.idx.inventory.forget_touched();
        self.idx.dirty.clear();
    }

    /// Recomputes a node's entry in `victim_nodes` (after its victims or its offer changed).
    pub(crate) fn rekey_victim_node(&mut self, node_id: NodeId) {
        if let Some((sku, price)) = self.idx.victim_node_key.remove(&node_id) {
            if let Some(m) = self.idx.victim_nodes.get_mut(usize::from(sku.0)) {
                m.remove(&(price, node_id));
            }
        }
        let Some(node) = self.st.nodes.get(&node_id) else {
            return;
        };
        let Some(offer) = node.offer.and_then(|o| self.st.offers.get(&o)) else {
            return;
        };
        let count = node
            .leases
            .iter()
            .filter_map(|l| self.st.leases.get(l))
            .filter(|l| Index::is_victim(l))
            .count() as u32;
        if count == 0 {
            return;
        }
        let key = (offer.terms.spot_price, node_id);
        if let Some(m) = self.idx.victim_nodes.get_mut(usize::from(node.sku.0)) {
            m.insert(key, count);
            self.idx.victim_node_key.insert(node_id, (node.sku, key.0));
        }
    }
}
