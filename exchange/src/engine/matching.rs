//! Matching: takers (incoming bids, failovers, resting bids in uncross) against listed offers
//! (phase 1), preemption (phase 2), the reason an IOC remainder failed, and uncross.
//! docs/market-rules.md §4–§6.

use super::Engine;
use super::index::{free_for, kind_ix, lowest_bits};
use crate::command::{LeaseKind, OfferTerms, Placement};
use crate::event::{BidCloseReason, Event, NoticeReason};
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
    pub(crate) fn eligible(t: &Taker, offer: &Offer, node: &Node, start: i64) -> Option<i64> {
        if node.status != NodeStatus::Online
            || node.draining
            || t.exclude == Some(node.id)
            || offer.supplier == t.buyer
            || !t.constraints.admits(node)
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
        if let Some(books) = self.idx.offer_book.get(usize::from(t.sku.0)) {
            self.plan_fill(t, books[kind_ix(t.kind)].iter(), &mut plan);
        }
        self.execute_plan(t, &plan, out);
        self.scratch_plan = plan;
    }

    /// Plans phase 1 over `keys` (offer book entries in book order): (offer, GPUs, end).
    fn plan_fill<'a>(
        &self,
        t: &Taker,
        keys: impl Iterator<Item = (&'a (Price, u64, OfferId), &'a u32)>,
        plan: &mut Vec<(OfferId, u32, i64)>,
    ) {
        let now = self.st.now;
        let mut remaining = t.remaining;
        for (&(price, _, offer_id), &listed_free) in keys {
            if price > t.limit || remaining == 0 {
                break;
            }
            if t.placement == Placement::SingleNode && listed_free < remaining {
                continue;
            }
            let Some(offer) = self.st.offers.get(&offer_id) else {
                continue;
            };
            let Some(node) = self.st.nodes.get(&offer.node) else {
                continue;
            };
            let free = free_for(node, offer.terms.gpus);
            let need = match t.placement {
                Placement::SingleNode => remaining,
                Placement::Spread => 1,
            };
            if free < need {
                continue;
            }
            let Some(end) = Self::eligible(t, offer, node, now) else {
                continue;
            };
            let k = match t.placement {
                Placement::SingleNode => remaining,
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
            let mask = lowest_bits(node.healthy_mask & !node.claimed_mask, k);
            let id = LeaseId(self.next_id());
            self.create_lease(t, id, offer_id, mask, now, end, out);
            t.remaining -= k;
        }
    }

    /// Phase 2: preempt preemptible leases (docs/market-rules.md §4, rule 5).
    pub(crate) fn phase2(&mut self, t: &mut Taker, out: &mut Vec<Event>) {
        let now = self.st.now;
        // (victim, node, offer, deadline, end, victim gpus, victim mask)
        let mut cands: Vec<(LeaseId, NodeId, OfferId, i64, i64, u32, u32)> = Vec::new();
        let Some(victims) = self.idx.victims.get(usize::from(t.sku.0)) else {
            return;
        };
        // A spot bid can only preempt on nodes whose offer's spot price is within its limit.
        if t.kind == LeaseKind::Spot
            && self.idx.victim_nodes[usize::from(t.sku.0)]
                .first_key_value()
                .is_none_or(|((spot, _), _)| *spot > t.limit)
        {
            return;
        }
        for &(price, Reverse(lid)) in victims {
            if t.kind == LeaseKind::Preemptible && price >= t.limit {
                break;
            }
            let Some(lease) = self.st.leases.get(&lid) else {
                continue;
            };
            if lease.buyer == t.buyer {
                continue;
            }
            let Some(node) = self.st.nodes.get(&lease.node) else {
                continue;
            };
            let Some(offer) = node.offer.and_then(|o| self.st.offers.get(&o)) else {
                continue;
            };
            if !Self::kind_price(t.kind, &offer.terms).is_some_and(|p| p <= t.limit) {
                continue;
            }
            let deadline = now.saturating_add(i64::from(offer.terms.notice_s) * 1000);
            let Some(end) = Self::eligible(t, offer, node, deadline) else {
                continue;
            };
            cands.push((
                lid,
                node.id,
                offer.id,
                deadline,
                end,
                lease.gpus,
                lease.gpu_mask,
            ));
        }
        match t.placement {
            Placement::Spread => {
                for &(vid, _node, offer_id, deadline, end, vgpus, vmask) in &cands {
                    if t.remaining == 0 {
                        break;
                    }
                    let k = vgpus.min(t.remaining);
                    let mask = lowest_bits(vmask, k);
                    let id = LeaseId(self.next_id());
                    self.give_notice(vid, deadline, NoticeReason::Preempted, Some(id), out);
                    self.create_lease(t, id, offer_id, mask, deadline, end, out);
                    t.remaining -= k;
                }
            }
            Placement::SingleNode => {
                // Candidates grouped by node, in order of each node's first candidate.
                let mut by_node: std::collections::BTreeMap<NodeId, Vec<usize>> =
                    std::collections::BTreeMap::new();
                let mut node_order: Vec<usize> = Vec::new();
                for (i, c) in cands.iter().enumerate() {
                    let e = by_node.entry(c.1).or_default();
                    if e.is_empty() {
                        node_order.push(i);
                    }
                    e.push(i);
                }
                let mut chosen: Option<(u32, Vec<LeaseId>, OfferId, i64, i64)> = None;
                for &i in &node_order {
                    let c = &cands[i];
                    let Some(node) = self.st.nodes.get(&c.1) else {
                        continue;
                    };
                    let Some(offer) = self.st.offers.get(&c.2) else {
                        continue;
                    };
                    let free = free_for(node, offer.terms.gpus);
                    let on_node: Vec<&(LeaseId, NodeId, OfferId, i64, i64, u32, u32)> = by_node
                        .get(&c.1)
                        .map(|ix| ix.iter().map(|&k| &cands[k]).collect())
                        .unwrap_or_default();
                    let total: u32 = free + on_node.iter().map(|v| v.5).sum::<u32>();
                    if total < t.remaining {
                        continue;
                    }
                    let mut need = t.remaining;
                    let from_free = free.min(need);
                    let mut mask = lowest_bits(node.healthy_mask & !node.claimed_mask, from_free);
                    need -= from_free;
                    let mut noticed = Vec::new();
                    for v in on_node {
                        if need == 0 {
                            break;
                        }
                        let k = v.5.min(need);
                        mask |= lowest_bits(v.6, k);
                        need -= k;
                        noticed.push(v.0);
                    }
                    chosen = Some((mask, noticed, c.2, c.3, c.4));
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

    /// Why a taker's remainder could not fill (docs/market-rules.md §4.1).
    pub(crate) fn unfilled_reason(&self, t: &Taker) -> BidCloseReason {
        let need = match t.placement {
            Placement::SingleNode => t.remaining,
            Placement::Spread => 1,
        };
        let Some(books) = self.idx.offer_book.get(usize::from(t.sku.0)) else {
            return BidCloseReason::NoCapacity;
        };
        let mut any = false;
        for (&(price, _, offer_id), &free) in &books[kind_ix(t.kind)] {
            if free < need {
                continue;
            }
            if price > t.limit {
                return BidCloseReason::Price;
            }
            any = true;
            let eligible = self
                .st
                .offers
                .get(&offer_id)
                .and_then(|o| self.st.nodes.get(&o.node).map(|n| (o, n)))
                .and_then(|(o, n)| Self::eligible(t, o, n, self.st.now));
            if eligible.is_none() {
                return BidCloseReason::Constraints;
            }
        }
        if any {
            BidCloseReason::Price
        } else {
            BidCloseReason::NoCapacity
        }
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
        // (sku, kind, book key, free)
        let mut keys: Vec<(SkuId, usize, (Price, u64, OfferId), u32)> = Vec::new();
        for node in &dirty {
            if let Some(l) = self.idx.listings.get(node) {
                keys.push((l.sku, 0, (l.spot, l.priority, l.offer), l.free));
                if let Some(p) = l.preemptible {
                    keys.push((l.sku, 1, (p, l.priority, l.offer), l.free));
                }
            }
        }
        dirty.clear();
        self.idx.dirty = dirty;
        keys.sort_unstable();
        let mut i = 0;
        while i < keys.len() {
            let (sku, k) = (keys[i].0, keys[i].1);
            let mut j = i;
            while j < keys.len() && keys[j].0 == sku && keys[j].1 == k {
                j += 1;
            }
            let group: Vec<((Price, u64, OfferId), u32)> =
                keys[i..j].iter().map(|x| (x.2, x.3)).collect();
            let max_free = keys[i..j].iter().map(|x| x.3).max().unwrap_or(0);
            i = j;
            let min_price = group[0].0.0;
            let cands: Vec<BidId> = self.idx.bid_book[usize::from(sku.0)][k]
                .iter()
                .take_while(|((Reverse(limit), _, _), _)| *limit >= min_price)
                .filter(|(_, need)| **need <= max_free)
                .map(|(&(_, _, id), _)| id)
                .collect();
            for bid_id in cands {
                let Some(bid) = self.st.bids.get(&bid_id) else {
                    continue;
                };
                // Cheap pre-filter before building a taker: some dirty node admits the bid.
                let admitted = group.iter().any(|&((price, _, offer_id), _)| {
                    price <= bid.limit
                        && self
                            .st
                            .offers
                            .get(&offer_id)
                            .and_then(|o| self.st.nodes.get(&o.node))
                            .is_some_and(|n| bid.buyer != n.supplier && bid.constraints.admits(n))
                });
                if !admitted {
                    continue;
                }
                let mut t = Taker {
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
                };
                let mut plan = std::mem::take(&mut self.scratch_plan);
                plan.clear();
                self.plan_fill(&t, group.iter().map(|(k, f)| (k, f)), &mut plan);
                self.execute_plan(&mut t, &plan, out);
                self.scratch_plan = plan;
                self.set_bid_remaining(bid_id, t.remaining, out);
            }
        }
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
            });
        }
    }

    /// Takes a bid off the book and its expiry timer; returns it.
    pub(crate) fn remove_resting_bid(&mut self, bid_id: BidId) -> Option<crate::state::Bid> {
        let bid = self.st.bids.remove(&bid_id)?;
        if let Some(books) = self.idx.bid_book.get_mut(usize::from(bid.sku.0)) {
            books[kind_ix(bid.kind)].remove(&(Reverse(bid.limit), bid.priority, bid.id));
        }
        if let Some(e) = bid.expires_at_ms {
            self.idx.bid_expiry.remove(&(e, bid.id));
        }
        Some(bid)
    }
}
