//! Matching: takers (incoming bids, failovers, resting bids in uncross) against listed offers
//! (phase 1), preemption (phase 2), the reason an IOC remainder failed, and uncross.
//! docs/market-rules.md §4–§6.

use super::Engine;
use super::index::{
    BidKey, MergeMaps, OfferKey, VictimInfo, free_for, kind_ix, lowest_bits, node_need,
};
use crate::command::{LeaseKind, OfferTerms, Placement, TrustConstraints};
use crate::event::{BidCloseReason, CloseDetail, Event, Exclusion, NoticeReason};
use crate::ids::{AccountId, BidId, LeaseId, NodeId, OfferId, SkuId};
use crate::price::Price;
use crate::state::{Node, NodeStatus, Offer, ResolvedConstraints};
use std::cmp::Reverse;

/// The term a taker asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Term {
    /// A fixed number of seconds from the start.
    Duration(u64),
    /// Open-ended: the offer's `max_lease_s`, cut at `available_until_ms`.
    Open,
    /// A failover continuing to a fixed end, ms since epoch.
    FixedEnd(i64),
}

/// A dirty node's listing in one book (uncross); ordered by book, then book order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct DirtyListing {
    pub(crate) sku: SkuId,
    /// [`kind_ix`] of the book.
    pub(crate) kind: usize,
    pub(crate) key: OfferKey,
    pub(crate) node: NodeId,
    pub(crate) region: crate::ids::RegionId,
}

/// Something that takes capacity: an incoming bid, a failover, or a resting bid in uncross.
#[derive(Clone, Debug)]
pub(crate) struct Taker {
    pub(crate) bid: BidId,
    pub(crate) buyer: AccountId,
    pub(crate) sku: SkuId,
    pub(crate) kind: LeaseKind,
    pub(crate) limit: Price,
    pub(crate) placement: Placement,
    pub(crate) constraints: ResolvedConstraints,
    pub(crate) term: Term,
    pub(crate) exclude: Option<NodeId>,
    /// Priority of a resting bid (uncross); `None` for an incoming taker.
    pub(crate) resting_priority: Option<u64>,
    /// The failed lease a failover continues.
    pub(crate) migrated_from: Option<LeaseId>,
    pub(crate) remaining: u32,
    /// What it requires of a node's trust record (§12).
    pub(crate) trust: TrustConstraints,
    /// A gang (or a gang member's replacement): what it requires of a node's fabric (§13).
    /// (Boxed: most takers are not gangs, and a taker is built per bid and per resting bid
    /// walked.)
    pub(crate) gang: Option<Box<super::gang::GangReq>>,
}

impl Taker {
    /// A resting bid as a taker (uncross; also the invariant that no resting bid can fill).
    pub(crate) fn resting(bid: &crate::state::Bid, trust: Option<TrustConstraints>) -> Taker {
        Taker {
            bid: bid.id,
            buyer: bid.buyer,
            sku: bid.sku,
            kind: bid.kind,
            limit: bid.limit,
            placement: bid.placement,
            constraints: bid.constraints.clone(),
            term: bid.duration_s.map_or(Term::Open, Term::Duration),
            exclude: None,
            resting_priority: Some(bid.priority),
            migrated_from: None,
            remaining: bid.remaining,
            trust: trust.unwrap_or_default(),
            gang: gang_req(bid.placement),
        }
    }
}

/// The fabric requirement of a new taker with `placement` (§13.2).
pub(crate) fn gang_req(placement: Placement) -> Option<Box<super::gang::GangReq>> {
    match placement {
        Placement::Gang(g) => Some(Box::new(super::gang::GangReq::new(g.scope))),
        _ => None,
    }
}

/// The lease end for `term` on an offer with `terms` starting at `start`, or `None` when the
/// term does not fit the offer.
pub(crate) fn lease_end(term: Term, terms: &OfferTerms, start: i64) -> Option<i64> {
    let until = terms.available_until_ms;
    let max_ms = (terms.max_lease_s as i64).saturating_mul(1000);
    match term {
        Term::Duration(d) => {
            if d < terms.min_lease_s || d > terms.max_lease_s {
                return None;
            }
            let end = start.checked_add((d as i64).checked_mul(1000)?)?;
            (end <= until).then_some(end)
        }
        Term::Open => (start < until).then(|| start.saturating_add(max_ms).min(until)),
        Term::FixedEnd(e) => {
            (e > start && e.saturating_sub(start) <= max_ms && e <= until).then_some(e)
        }
    }
}

impl Engine {
    /// Eligibility of an offer for a taker starting at `start` (docs/market-rules.md §4);
    /// returns the lease end when eligible.
    pub(crate) fn eligible(
        &self,
        t: &Taker,
        offer: &Offer,
        node: &Node,
        start: i64,
    ) -> Option<i64> {
        if node.status != NodeStatus::Online
            || node.draining
            || node.held.is_some()
            || self.idx.verifying.contains(&node.id)
            || t.exclude == Some(node.id)
            || offer.supplier == t.buyer
            || !t.constraints.admits(node)
            || !self.trust_admits(&t.trust, offer.id, node.id)
            || t.gang.as_ref().is_some_and(|g| !self.gang_admits(g, node))
        {
            return None;
        }
        lease_end(t.term, &offer.terms, start)
    }

    /// The price the taker's kind matches against on an offer.
    fn kind_price(kind: LeaseKind, terms: &OfferTerms) -> Option<Price> {
        match kind {
            LeaseKind::Spot => Some(terms.spot_price),
            LeaseKind::Preemptible => terms.preemptible_price,
        }
    }

    /// Phase 1: fill from listed free capacity, best price then priority.
    pub(crate) fn phase1(&mut self, t: &mut Taker, out: &mut Vec<Event>) {
        let mut plan = std::mem::take(&mut self.scratch_plan);
        plan.clear();
        if let Some(books) = self.idx.books.get(usize::from(t.sku.0)) {
            let need = node_need(t.placement, t.remaining);
            self.plan_fill(t, books.offers_with_free(kind_ix(t.kind), need), &mut plan);
        }
        self.execute_plan(t, &plan, out);
        self.scratch_plan = plan;
    }

    /// Plans phase 1 over `keys` (offer book entries in book order): (offer, GPUs, end).
    fn plan_fill(
        &self,
        t: &Taker,
        keys: impl Iterator<Item = ((Price, u64, OfferId), u32)>,
        plan: &mut Vec<(OfferId, u32, i64)>,
    ) {
        let now = self.st.now;
        let mut remaining = t.remaining;
        for ((price, _, offer_id), listed_free) in keys {
            if price > t.limit || remaining == 0 {
                break;
            }
            if t.placement != Placement::Spread && listed_free < remaining {
                continue;
            }
            let Some(offer) = self.st.offers.get(&offer_id) else {
                continue;
            };
            let Some(node) = self.st.nodes.get(&offer.node) else {
                continue;
            };
            let free = free_for(node, offer.terms.gpus);
            let need = node_need(t.placement, remaining);
            if free < need {
                continue;
            }
            let Some(end) = self.eligible(t, offer, node, now) else {
                continue;
            };
            let k = match t.placement {
                Placement::SingleNode | Placement::Gang(_) => remaining,
                Placement::Spread => free.min(remaining),
            };
            plan.push((offer_id, k, end));
            remaining -= k;
        }
    }

    fn execute_plan(&mut self, t: &mut Taker, plan: &[(OfferId, u32, i64)], out: &mut Vec<Event>) {
        let now = self.st.now;
        for &(offer_id, k, end) in plan {
            let Some(node) = self
                .st
                .offers
                .get(&offer_id)
                .and_then(|o| self.st.nodes.get(&o.node))
            else {
                continue;
            };
            let mask = lowest_bits(node.healthy_mask & !node.occupied_mask(), k);
            let id = LeaseId(self.next_id());
            self.create_lease(t, id, offer_id, mask, now, end, out);
            t.remaining -= k;
        }
    }

    /// Whether victim `lid` qualifies for taker `t` (docs/market-rules.md §4 phase 2); returns
    /// (node, offer, deadline, lease end, victim GPUs, victim mask).
    fn qualify(&self, t: &Taker, lid: LeaseId) -> Option<(NodeId, OfferId, i64, i64, u32, u32)> {
        self.qualify_as(t, lid, false)
    }

    /// [`Engine::qualify`] for a victim of another buyer (`own` false) or, to explain an
    /// unfilled remainder, of the taker's own buyer (`own` true).
    fn qualify_as(
        &self,
        t: &Taker,
        lid: LeaseId,
        own: bool,
    ) -> Option<(NodeId, OfferId, i64, i64, u32, u32)> {
        let lease = self.st.leases.get(&lid)?;
        if (lease.buyer == t.buyer) != own
            || !super::index::Index::is_victim(lease)
            || (t.kind == LeaseKind::Preemptible && lease.price >= t.limit)
        {
            return None;
        }
        let node = self.st.nodes.get(&lease.node)?;
        // A single-node taker can never fit on a node with fewer GPUs than it needs (free plus
        // victims never exceed the node's GPUs), so such victims never decide anything.
        // A gang needs one member's GPUs on a node (§13.2: the §4.1 reason with need = G).
        if t.placement != Placement::Spread && node.gpus < node_need(t.placement, t.remaining) {
            return None;
        }
        let offer = node.offer.and_then(|o| self.st.offers.get(&o))?;
        if Self::kind_price(t.kind, &offer.terms).is_none_or(|p| p > t.limit) {
            return None;
        }
        let deadline = self
            .st
            .now
            .saturating_add(i64::from(offer.terms.notice_s) * 1000);
        let end = self.eligible(t, offer, node, deadline)?;
        Some((node.id, offer.id, deadline, end, lease.gpus, lease.gpu_mask))
    }

    /// The checks of [`Engine::qualify`] that a victim's index entry can answer alone (buyer,
    /// node size for a single-node taker, constraints): false means it cannot qualify.
    fn may_qualify(t: &Taker, info: &VictimInfo) -> bool {
        info.buyer != t.buyer
            && (t.placement == Placement::Spread
                || info.node_gpus >= node_need(t.placement, t.remaining))
            && t.constraints.admits_site(&info.site)
    }

    /// Phase 2 for a spread taker wanting `need` GPUs: the victims it would notice, in victim
    /// order, as (victim, offer, deadline, lease end, GPUs taken, mask taken).
    pub(crate) fn plan_preempt_spread(
        &self,
        t: &Taker,
        need: u32,
    ) -> Vec<(LeaseId, OfferId, i64, i64, u32, u32)> {
        let sku = usize::from(t.sku.0);
        let buckets = match t.kind {
            LeaseKind::Spot => &self.idx.victims_by_spot[sku],
            LeaseKind::Preemptible => &self.idx.victims_by_pre[sku],
        };
        let mut chosen = Vec::new();
        if need == 0 || buckets.first_key_value().is_none_or(|(p, _)| *p > t.limit) {
            return chosen;
        }
        let mut need = need;
        let victims = MergeMaps::new(buckets.range(..=t.limit).map(|(_, set)| set));
        for ((price, Reverse(lid)), info) in victims {
            if need == 0 || (t.kind == LeaseKind::Preemptible && price >= t.limit) {
                break;
            }
            if !Self::may_qualify(t, info) {
                continue;
            }
            if let Some((_, offer, deadline, end, vgpus, vmask)) = self.qualify(t, lid) {
                let k = vgpus.min(need);
                need -= k;
                chosen.push((lid, offer, deadline, end, k, lowest_bits(vmask, k)));
            }
        }
        chosen
    }

    /// GPUs a spread taker would fill now, phases 1 and 2 together (§13.5 `min_gpus`).
    pub(crate) fn fillable_spread(&self, t: &Taker) -> u32 {
        let mut plan = Vec::new();
        if let Some(books) = self.idx.books.get(usize::from(t.sku.0)) {
            self.plan_fill(t, books.offers_with_free(kind_ix(t.kind), 1), &mut plan);
        }
        let k1: u32 = plan.iter().map(|p| p.1).sum();
        let k2: u32 = self
            .plan_preempt_spread(t, t.remaining - k1)
            .iter()
            .map(|v| v.4)
            .sum();
        k1 + k2
    }

    /// Phase 2: preempt preemptible leases (docs/market-rules.md §4, rule 5).
    pub(crate) fn phase2(&mut self, t: &mut Taker, out: &mut Vec<Event>) {
        let sku = usize::from(t.sku.0);
        // Victims whose node's offer accepts this bid's kind at its limit, in victim order
        // (lowest price, newest first): a merge of the price buckets up to the limit.
        let buckets = match t.kind {
            LeaseKind::Spot => &self.idx.victims_by_spot[sku],
            LeaseKind::Preemptible => &self.idx.victims_by_pre[sku],
        };
        if buckets.first_key_value().is_none_or(|(p, _)| *p > t.limit) {
            return;
        }
        let victims = MergeMaps::new(buckets.range(..=t.limit).map(|(_, set)| set));
        match t.placement {
            Placement::Spread => {
                let chosen = self.plan_preempt_spread(t, t.remaining);
                for (vid, offer_id, deadline, end, k, mask) in chosen {
                    let id = LeaseId(self.next_id());
                    self.give_notice(vid, deadline, NoticeReason::Preempted, Some(id), out);
                    self.create_lease(t, id, offer_id, mask, deadline, end, out);
                    t.remaining -= k;
                }
            }
            // Gangs take free capacity only (§13.2); a member's replacement is single-node.
            Placement::Gang(_) => {}
            Placement::SingleNode => {
                let mut examined: rustc_hash::FxHashSet<NodeId> = Default::default();
                let mut chosen: Option<(u32, Vec<LeaseId>, OfferId, i64, i64)> = None;
                for ((price, Reverse(lid)), info) in victims {
                    if t.kind == LeaseKind::Preemptible && price >= t.limit {
                        break;
                    }
                    // A node is examined once: at its first qualifying victim, or skipped for good
                    // once a victim fails for reasons of the node (its size, site, offer or
                    // terms), which every victim on it shares. Size and site are ruled on from
                    // the victim index alone.
                    if info.buyer == t.buyer || examined.contains(&info.node) {
                        continue;
                    }
                    if !Self::may_qualify(t, info) {
                        examined.insert(info.node);
                        continue;
                    }
                    let Some((node_id, offer_id, deadline, end, _, _)) = self.qualify(t, lid)
                    else {
                        examined.insert(info.node);
                        continue;
                    };
                    examined.insert(node_id);
                    let (Some(node), Some(offer)) =
                        (self.st.nodes.get(&node_id), self.st.offers.get(&offer_id))
                    else {
                        continue;
                    };
                    // What preempting here could yield at most: its free GPUs plus every
                    // victim's (before looking at the leases themselves).
                    let free = free_for(node, offer.terms.gpus);
                    let victim_gpus = self.idx.victim_gpus.get(&node_id).copied().unwrap_or(0);
                    if free + victim_gpus.count_ones() < t.remaining {
                        continue;
                    }
                    // This node's qualifying victims, in victim order.
                    let mut on_node: Vec<((Price, Reverse<LeaseId>), u32, u32)> = node
                        .leases
                        .iter()
                        .filter_map(|&l| {
                            let q = self.qualify(t, l)?;
                            let lease = self.st.leases.get(&l)?;
                            Some(((lease.price, Reverse(l)), q.4, q.5))
                        })
                        .collect();
                    on_node.sort_unstable_by_key(|v| v.0);
                    let total: u32 = free + on_node.iter().map(|v| v.1).sum::<u32>();
                    if total < t.remaining {
                        continue;
                    }
                    let mut need = t.remaining;
                    let from_free = free.min(need);
                    let mut mask =
                        lowest_bits(node.healthy_mask & !node.occupied_mask(), from_free);
                    need -= from_free;
                    let mut noticed = Vec::new();
                    for ((_, Reverse(vid)), vgpus, vmask) in on_node {
                        if need == 0 {
                            break;
                        }
                        let k = vgpus.min(need);
                        mask |= lowest_bits(vmask, k);
                        need -= k;
                        noticed.push(vid);
                    }
                    chosen = Some((mask, noticed, offer_id, deadline, end));
                    break;
                }
                if let Some((mask, noticed, offer_id, deadline, end)) = chosen {
                    let id = LeaseId(self.next_id());
                    for vid in noticed {
                        self.give_notice(vid, deadline, NoticeReason::Preempted, Some(id), out);
                    }
                    self.create_lease(t, id, offer_id, mask, deadline, end, out);
                    t.remaining = 0;
                }
            }
        }
    }

    /// What excludes `offer` on `node` from taker `t` starting at `start`, checked in
    /// [`Exclusion`]'s order; `None` when it is eligible ([`Engine::eligible`]).
    pub(crate) fn exclusion(
        &self,
        t: &Taker,
        offer: &Offer,
        node: &Node,
        start: i64,
    ) -> Option<Exclusion> {
        let c = &t.constraints;
        if node.status != NodeStatus::Online
            || node.draining
            || node.held.is_some()
            || self.idx.verifying.contains(&node.id)
        {
            Some(Exclusion::NodeUnavailable)
        } else if offer.supplier == t.buyer {
            Some(Exclusion::SelfTrade)
        } else if !c.regions.is_empty() && c.regions.binary_search(&node.region).is_err() {
            Some(Exclusion::Region)
        } else if !c.jurisdictions.is_empty()
            && c.jurisdictions.binary_search(&node.jurisdiction).is_err()
        {
            Some(Exclusion::Jurisdiction)
        } else if c.min_interconnect.is_some_and(|m| node.interconnect < m) {
            Some(Exclusion::Interconnect)
        } else if c.nvlink && !node.nvlink {
            Some(Exclusion::Nvlink)
        } else if !self.trust_admits(&t.trust, offer.id, node.id) {
            Some(Exclusion::Trust)
        } else if lease_end(t.term, &offer.terms, start).is_none() {
            Some(Exclusion::Term)
        } else if t.gang.as_ref().is_some_and(|g| !self.gang_admits(g, node)) {
            Some(Exclusion::FabricDomain)
        } else {
            None
        }
    }

    /// Why a taker's remainder could not fill, and what the user can act on
    /// (docs/market-rules.md §4.1). Over the listed offers of the SKU and kind with room for
    /// `need` (the failed node left out for a failover), in book order: `term` if one at an
    /// acceptable price is excluded only by its lease terms; else `own_lease` if a preemptible
    /// lease of the taker's own buyer would have been a phase-2 victim; else `constraints` if
    /// one at an acceptable price is excluded (naming the cheapest one's exclusion); else
    /// `price` (with the lowest price of an offer that admits the taker) if any has room; else
    /// `no_capacity`.
    pub(crate) fn unfilled_reason(&self, t: &Taker) -> (BidCloseReason, CloseDetail) {
        let need = node_need(t.placement, t.remaining);
        let now = self.st.now;
        let (mut any, mut term, mut excluded, mut best) = (false, false, None, None);
        // A `min_reliability` no node's score of today meets admits no offer at any price:
        // past the limit there is no best price to find (§12.3).
        let admits_none = self.idx.parks(Some(&t.trust)).is_some();
        if let Some(books) = self.idx.books.get(usize::from(t.sku.0)) {
            for ((price, _, offer_id), free) in books.offers_with_free(kind_ix(t.kind), need) {
                if free < need {
                    continue;
                }
                let Some((offer, node)) = self
                    .st
                    .offers
                    .get(&offer_id)
                    .and_then(|o| self.st.nodes.get(&o.node).map(|n| (o, n)))
                else {
                    continue;
                };
                if t.exclude == Some(node.id) {
                    continue; // the failed node is not capacity for its own failover
                }
                any = true;
                let why = self.exclusion(t, offer, node, now);
                if price <= t.limit {
                    match why {
                        Some(Exclusion::Term) => term = true,
                        Some(x) => {
                            excluded.get_or_insert(x);
                        }
                        None => {}
                    }
                } else if admits_none {
                    break;
                } else if why.is_none() {
                    best = Some(price);
                    break; // book order: the first admitting offer above the limit is the best
                }
            }
        }
        if term {
            (BidCloseReason::Term, CloseDetail::default())
        } else if self.own_lease_in_the_way(t) {
            (BidCloseReason::OwnLease, CloseDetail::default())
        } else if excluded == Some(Exclusion::Trust) {
            let detail = CloseDetail {
                excluded_by: Some(Exclusion::Trust),
                ..CloseDetail::default()
            };
            (BidCloseReason::Trust, detail)
        } else if let Some(x) = excluded {
            let detail = CloseDetail {
                excluded_by: Some(x),
                ..CloseDetail::default()
            };
            (BidCloseReason::Constraints, detail)
        } else if any {
            let detail = CloseDetail {
                best_price: best,
                ..CloseDetail::default()
            };
            (BidCloseReason::Price, detail)
        } else {
            (BidCloseReason::NoCapacity, CloseDetail::default())
        }
    }

    /// Whether a preemptible lease of `t`'s own buyer would qualify as a phase-2 victim of
    /// `t` were it another buyer's (docs/market-rules.md §4.1 `own_lease`).
    fn own_lease_in_the_way(&self, t: &Taker) -> bool {
        let sku = usize::from(t.sku.0);
        let buckets = match t.kind {
            LeaseKind::Spot => &self.idx.victims_by_spot[sku],
            LeaseKind::Preemptible => &self.idx.victims_by_pre[sku],
        };
        buckets.range(..=t.limit).any(|(_, set)| {
            set.iter().any(|((_, Reverse(lid)), info)| {
                info.buyer == t.buyer && self.qualify_as(t, *lid, true).is_some()
            })
        })
    }

    /// Fills resting bids from listed capacity where possible (docs/market-rules.md §6).
    ///
    /// Only nodes marked dirty since the last uncross can serve a resting bid (after every
    /// uncross none can, and a node that did not grow or change terms still cannot), so each
    /// resting bid, in priority order, is matched against the dirty nodes' listings only, in
    /// book order — the same fills as walking the whole book.
    pub(crate) fn uncross(&mut self, out: &mut Vec<Event>) {
        if self.idx.dirty.is_empty() {
            return;
        }
        let mut dirty = std::mem::take(&mut self.idx.dirty);
        dirty.sort_unstable();
        dirty.dedup();
        let mut keys = std::mem::take(&mut self.scratch_dirty);
        keys.clear();
        for &node in &dirty {
            if let Some(l) = self.idx.listings.get(&node) {
                let (sku, region) = (l.sku, l.region);
                keys.push(DirtyListing {
                    sku,
                    kind: 0,
                    key: (l.spot, l.priority, l.offer),
                    node,
                    region,
                });
                if let Some(p) = l.preemptible {
                    keys.push(DirtyListing {
                        sku,
                        kind: 1,
                        key: (p, l.priority, l.offer),
                        node,
                        region,
                    });
                }
            }
        }
        dirty.clear();
        self.idx.dirty = dirty;
        keys.sort_unstable();
        let mut live = std::mem::take(&mut self.scratch_live);
        let mut regions = std::mem::take(&mut self.scratch_regions);
        for group in keys.chunk_by(|a, b| (a.sku, a.kind) == (b.sku, b.kind)) {
            let (sku, k) = (group[0].sku, group[0].kind);
            regions.clear();
            regions.extend(group.iter().map(|d| d.region));
            regions.sort_unstable();
            regions.dedup();
            // Walk resting bids in priority order with a cursor (the book changes as bids
            // fill), stopping once the dirty nodes have nothing left or limits fall below them.
            let mut cursor: Option<BidKey> = None;
            loop {
                // The dirty listings with GPUs still free (fills below use them up), in book
                // order, with their free GPUs now.
                live.clear();
                live.extend(group.iter().filter_map(|d| {
                    let free = self.idx.listings.get(&d.node).map_or(0, |l| l.free);
                    (free > 0).then_some((d.key, free, d.node))
                }));
                let (Some(&((min_price, _, _), _, _)), Some(max_free)) =
                    (live.first(), live.iter().map(|x| x.1).max())
                else {
                    break;
                };
                let Some((key, _need)) =
                    self.idx.books[usize::from(sku.0)].next_bid(k, cursor, max_free, &regions)
                else {
                    break;
                };
                cursor = Some(key);
                let (Reverse(limit), _, bid_id) = key;
                if limit < min_price {
                    break;
                }
                let Some(bid) = self.st.bids.get(&bid_id) else {
                    continue;
                };
                // Cheap pre-filter before building a taker: some live listing could serve the
                // bid (price, GPUs on one node, self-trade, constraints).
                let need = node_need(bid.placement, bid.remaining);
                // (A bid whose `min_reliability` no node's score of today meets is parked off
                // the books until midnight, §12.3: `Index::parked_trust`.)
                let trust = self.ext.bid_trust.get(&bid.id).copied();
                let admitted = live.iter().any(|&((price, _, offer), free, node)| {
                    price <= bid.limit
                        && free >= need
                        && self.st.nodes.get(&node).is_some_and(|n| {
                            bid.buyer != n.supplier
                                && bid.constraints.admits(n)
                                && trust.is_none_or(|tr| self.trust_admits(&tr, offer, n.id))
                        })
                });
                if !admitted {
                    continue;
                }
                let mut t = Taker::resting(bid, trust);
                let mut plan = std::mem::take(&mut self.scratch_plan);
                plan.clear();
                self.plan_fill(&t, live.iter().map(|x| (x.0, x.1)), &mut plan);
                self.execute_plan(&mut t, &plan, out);
                self.scratch_plan = plan;
                self.set_bid_remaining(bid_id, t.remaining, out);
            }
            if self.idx.gang_book.contains_key(&(sku, k)) {
                self.uncross_gangs(sku, k, out);
            }
        }
        self.scratch_live = live;
        self.scratch_regions = regions;
        self.scratch_dirty = keys;
    }

    /// Records a resting bid's new remainder; closes it `filled` at zero.
    pub(crate) fn set_bid_remaining(
        &mut self,
        bid_id: BidId,
        remaining: u32,
        out: &mut Vec<Event>,
    ) {
        let Some(bid) = self.st.bids.get_mut(&bid_id) else {
            return;
        };
        bid.remaining = remaining;
        if remaining == 0 {
            let gpus = bid.gpus;
            self.remove_resting_bid(bid_id);
            out.push(Event::BidClosed {
                bid: bid_id,
                filled: gpus,
                unfilled: 0,
                reason: BidCloseReason::Filled,
                detail: crate::event::CloseDetail::default(),
            });
        }
    }

    /// Takes a bid off the book and its expiry timer; returns it.
    pub(crate) fn remove_resting_bid(&mut self, bid_id: BidId) -> Option<crate::state::Bid> {
        if let Some(m) = self
            .ext
            .bid_trust
            .remove(&bid_id)
            .and_then(|t| t.min_reliability_bp)
        {
            self.idx.parked_trust.remove(&(m, bid_id));
        }
        let bid = self.st.bids.remove(&bid_id)?;
        self.idx.unbook_bid(&bid);
        if bid.expires_at_ms.is_some() {
            self.idx.bid_expiry.cancelled(1);
        }
        // A client order id kept past retention only because its bid rested is forgotten at
        // the next time advancement (docs/market-rules.md §7 step 5): back to the queue's
        // front (it is older than everything queued).
        if let Some(key) = self.idx.parked_client_orders.remove(&bid_id)
            && let Some(&(_, at)) = self.st.client_orders.get(&key)
        {
            self.idx.client_order_expiry.push_front((at, key));
        }
        Some(bid)
    }
}
