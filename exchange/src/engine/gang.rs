//! Fabric domains and gangs (docs/market-rules.md §13, issue 27): where a gang may be placed
//! (one fabric domain, or one region, of one supplier), the all-or-none fill over domains, a
//! gang's delivery (billed from the last member's ready) and what a lost member does.
//!
//! Invariants kept here (checked by `check_invariants`):
//! - every live member lease of a gang is indexed to its (gang, rank) and the other way round;
//! - before a gang is whole its members provision (or wait ready, without a deadline); after,
//!   none waits;
//! - a gang with no live member and nothing lost is gone by the end of the command.

use super::Engine;
use super::index::{OfferKey, free_for, kind_ix, lowest_bits};
use super::matching::Taker;
use crate::command::{GangScope, GangSpec, MemberLoss, NodeFabric};
use crate::event::{EndReason, Event};
use crate::ids::{AccountId, BidId, LeaseId, NodeId, OfferId, RegionId};
use crate::price::Price;
use crate::state::{LeaseState, Node};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// State added for §13 (issue 27), encoded after [`super::StateExt`] and only when not
/// empty, so snapshots and state hashes of a market without domains or gangs stay as before.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FabricExt {
    /// Each node's fabric facts, for nodes that stated any (§13.1).
    pub(crate) node_fabric: BTreeMap<NodeId, NodeFabric>,
    /// Gangs with a live (or just lost) member, by bid id (§13.2).
    pub(crate) gangs: BTreeMap<BidId, Gang>,
}

impl FabricExt {
    /// True when nothing of §13 is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.node_fabric.is_empty() && self.gangs.is_empty()
    }
}

/// Where a gang's nodes are: one fabric domain of one supplier, or one region of one supplier
/// (§13.2). Ordered (the last tie-break among equally good places).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum GangGroup {
    /// The supplier's fabric domain.
    Domain {
        /// Supplier.
        supplier: AccountId,
        /// Domain name.
        domain: String,
    },
    /// A region of the supplier's.
    Region {
        /// Supplier.
        supplier: AccountId,
        /// Region.
        region: RegionId,
    },
}

/// A gang: the members of one gang bid's fill (§13.2–13.4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gang {
    /// Buyer.
    pub buyer: AccountId,
    /// Its shape.
    pub spec: GangSpec,
    /// Where it is.
    pub group: GangGroup,
    /// Members by rank.
    pub members: Vec<Member>,
    /// When it became whole (every member ready), ms since epoch; `None`: not yet.
    pub whole_at_ms: Option<i64>,
}

/// One rank of a gang.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// Its live lease; `None` once ended.
    pub lease: Option<LeaseId>,
    /// Before the gang is whole: reported ready and waiting for the rest.
    pub ready: bool,
    /// Replacements made for this rank before the gang was whole (at most one).
    pub replaced: u32,
    /// Its lease ended by a loss (node failure, not delivered, preempted, offer withdrawn)
    /// and no replacement took its place yet: settled at the end of the command.
    pub lost: Option<LeaseId>,
}

/// What a gang taker requires of a node besides §4 eligibility.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GangReq {
    pub(crate) scope: GangScope,
    /// A replacement: the gang's place.
    pub(crate) group: Option<GangGroup>,
    /// A replacement: the gang's other nodes.
    pub(crate) avoid: Vec<NodeId>,
    /// A replacement: the (gang, rank) it takes.
    pub(crate) slot: Option<(BidId, u32)>,
}

impl GangReq {
    /// A new gang's requirement.
    pub(crate) fn new(scope: GangScope) -> GangReq {
        GangReq {
            scope,
            group: None,
            avoid: Vec::new(),
            slot: None,
        }
    }
}

/// A gang place as the index keys it: an interned fabric domain, or a supplier's region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum PlaceId {
    Domain(u32),
    Region(AccountId, RegionId),
}

/// A gang's fill: its place and, by rank, (offer, lease end).
pub(crate) type GangPlan = (GangGroup, Vec<(OfferId, i64)>);

/// Whether a lease end by `reason` loses a gang member (a buyer's release, the term's end,
/// insufficient funds and `end_all` do not).
fn is_loss(reason: EndReason) -> bool {
    matches!(
        reason,
        EndReason::NodeFailure
            | EndReason::NotDelivered
            | EndReason::Preempted
            | EndReason::OfferWithdrawn
    )
}

impl Engine {
    /// A node's fabric domain, if it stated one.
    pub(crate) fn node_domain(&self, node: NodeId) -> Option<&str> {
        let d = *self.idx.node_domain.get(&node)?;
        self.idx.domain_keys.get(d as usize).map(|k| k.1.as_str())
    }

    /// A node's place for gangs of `scope`, if it has one.
    pub(crate) fn place_of(&self, node: &Node, scope: GangScope) -> Option<PlaceId> {
        match scope {
            GangScope::Domain => self
                .idx
                .node_domain
                .get(&node.id)
                .map(|&d| PlaceId::Domain(d)),
            GangScope::Region => Some(PlaceId::Region(node.supplier, node.region)),
        }
    }

    /// The owned form of a place.
    fn place_group(&self, p: PlaceId) -> GangGroup {
        match p {
            PlaceId::Domain(d) => {
                let (supplier, domain) = self.idx.domain_keys[d as usize].clone();
                GangGroup::Domain { supplier, domain }
            }
            PlaceId::Region(supplier, region) => GangGroup::Region { supplier, region },
        }
    }

    /// Counts node `id` into (`join`) or out of its places' sizes; call out before a change
    /// of its region or domain and in after.
    pub(crate) fn index_place(&mut self, id: NodeId, join: bool) {
        let Some(node) = self.st.nodes.get(&id) else {
            return;
        };
        for scope in [GangScope::Domain, GangScope::Region] {
            let Some(place) = self.place_of(node, scope) else {
                continue;
            };
            let count = self.idx.place_nodes.entry((node.sku, place)).or_insert(0);
            let before = *count;
            *count = if join {
                before + 1
            } else {
                before.saturating_sub(1)
            };
            let after = *count;
            if after == 0 {
                self.idx.place_nodes.remove(&(node.sku, place));
            }
            let sizes = self.idx.place_sizes.entry((node.sku, scope)).or_default();
            if before > 0
                && let Some(c) = sizes.get_mut(&before)
            {
                *c -= 1;
                if *c == 0 {
                    sizes.remove(&before);
                }
            }
            if after > 0 {
                *sizes.entry(after).or_insert(0) += 1;
            }
        }
    }

    /// The node count of the largest place of `sku` for `scope` (0: none).
    pub(crate) fn largest_place(&self, sku: crate::ids::SkuId, scope: GangScope) -> u32 {
        self.idx
            .place_sizes
            .get(&(sku, scope))
            .and_then(|m| m.last_key_value())
            .map_or(0, |(k, _)| *k)
    }

    /// Whether `node` is in `group`.
    pub(crate) fn in_group(&self, group: &GangGroup, node: &Node) -> bool {
        match group {
            GangGroup::Domain { supplier, domain } => {
                node.supplier == *supplier && self.node_domain(node.id) == Some(domain.as_str())
            }
            GangGroup::Region { supplier, region } => {
                node.supplier == *supplier && node.region == *region
            }
        }
    }

    /// Whether a gang taker's own requirement admits `node` (§13.2): a domain-scoped gang
    /// needs a node on a fabric domain; a replacement, one of the gang's place that is not
    /// already a member's.
    pub(crate) fn gang_admits(&self, g: &GangReq, node: &Node) -> bool {
        (g.scope != GangScope::Domain || self.node_domain(node.id).is_some())
            && g.group.as_ref().is_none_or(|p| self.in_group(p, node))
            && !g.avoid.contains(&node.id)
    }

    /// The whole-gang fill for `t` now (§13.2), over offer book entries `keys` (book order,
    /// with their listed free GPUs): in each place, its cheapest `nodes` eligible nodes with
    /// room for `gpus_per_node`; the place of lowest total wins, ties to the fewest free GPUs
    /// left, then the place's order. `Err(n)`: no place holds the gang; `n` is the most nodes
    /// any one place could give.
    pub(crate) fn plan_gang(
        &self,
        t: &Taker,
        spec: &GangSpec,
        keys: impl Iterator<Item = (OfferKey, u32)>,
    ) -> Result<GangPlan, u32> {
        let now = self.st.now;
        let (n, g) = (spec.nodes as usize, spec.gpus_per_node);
        // No place has a node of the SKU at all: nothing to walk. (A place smaller than the
        // gang is still walked: `Err` reports the most picks, candidates, any place had, not
        // its size; §13.2 `fillable`, and the §4.1 reason when none had one.)
        // (Nor when none has N nodes: an incoming bid says so before calling, `gang_too_large`;
        // a resting one just waits.)
        if spec.nodes > self.largest_place(t.sku, spec.scope) {
            return Err(0);
        }
        // Per place: picks (offer, end) in book order, and their price total in ticks.
        let mut places: rustc_hash::FxHashMap<PlaceId, (Vec<(OfferId, i64)>, i128)> =
            Default::default();
        let mut best: Option<i128> = None;
        let mut last_price: Option<Price> = None;
        let mut rises = 0u32;
        let ticks = |p: Price| i128::from(p.ticks()) * i128::from(g);
        for ((price, _, offer_id), listed_free) in keys {
            if price > t.limit {
                break;
            }
            if listed_free < g {
                continue;
            }
            // Once the price rises, stop when no place still filling can beat (or tie) the
            // best complete one: each of its missing nodes costs at least this price.
            // (The places are scanned at every 16th price only: stopping later is always
            // exact, and a scan per price would cost places × candidates.)
            if last_price != Some(price) {
                last_price = Some(price);
                rises += 1;
                if let Some(b) = best {
                    let p = ticks(price);
                    if p * n as i128 > b
                        && rises.is_multiple_of(16)
                        && places
                            .values()
                            .filter(|(v, _)| v.len() < n)
                            .all(|(v, s)| s + p * (n - v.len()) as i128 > b)
                    {
                        break;
                    }
                }
            }
            let Some(offer) = self.st.offers.get(&offer_id) else {
                continue;
            };
            let Some(node) = self.st.nodes.get(&offer.node) else {
                continue;
            };
            if free_for(node, offer.terms.gpus) < g {
                continue;
            }
            let Some(place) = self.place_of(node, spec.scope) else {
                continue;
            };
            if places.get(&place).is_some_and(|(v, _)| v.len() >= n) {
                continue;
            }
            let Some(end) = self.eligible(t, offer, node, now) else {
                continue;
            };
            let entry = places.entry(place).or_default();
            entry.0.push((offer_id, end));
            entry.1 += ticks(price);
            if entry.0.len() == n {
                best = Some(best.map_or(entry.1, |b| b.min(entry.1)));
            }
        }
        let Some(best) = best else {
            return Err(places
                .values()
                .map(|(v, _)| v.len() as u32)
                .max()
                .unwrap_or(0));
        };
        let mut tied: Vec<(GangGroup, PlaceId)> = places
            .iter()
            .filter(|(_, (v, s))| v.len() == n && *s == best)
            .map(|(k, _)| (self.place_group(*k), *k))
            .collect();
        tied.sort_unstable();
        let chosen = if tied.len() == 1 {
            tied.swap_remove(0)
        } else {
            // BestFit: the fewest free GPUs left in the place (its listed nodes of the SKU).
            let mut free: rustc_hash::FxHashMap<PlaceId, u64> = Default::default();
            for (id, l) in &self.idx.listings {
                if l.sku != t.sku {
                    continue;
                }
                if let Some(p) = self
                    .st
                    .nodes
                    .get(id)
                    .and_then(|nd| self.place_of(nd, spec.scope))
                {
                    *free.entry(p).or_insert(0) += u64::from(l.free);
                }
            }
            let ix = (0..tied.len())
                .min_by_key(|&i| (free.get(&tied[i].1).copied().unwrap_or(0), i))
                .unwrap_or(0);
            tied.swap_remove(ix)
        };
        let picks = places.remove(&chosen.1).map(|(v, _)| v).unwrap_or_default();
        Ok((chosen.0, picks))
    }

    /// Fills gang taker `t` whole if some place holds it (§13.2), as the taker (incoming) or
    /// by priority (resting). Returns `Err(n)` as [`Engine::plan_gang`] when it cannot.
    pub(crate) fn fill_gang(
        &mut self,
        t: &mut Taker,
        spec: &GangSpec,
        out: &mut Vec<Event>,
    ) -> Result<(), u32> {
        let plan = match self.idx.books.get(usize::from(t.sku.0)) {
            Some(books) => self.plan_gang(
                t,
                spec,
                books.offers_with_free(kind_ix(t.kind), spec.gpus_per_node),
            )?,
            None => return Err(0),
        };
        self.execute_gang(t, spec, plan, out);
        Ok(())
    }

    /// Creates the gang of `plan`: its record, one lease per rank, `GangFormed` (and
    /// `GangReady` at once without delivery).
    fn execute_gang(
        &mut self,
        t: &mut Taker,
        spec: &GangSpec,
        plan: GangPlan,
        out: &mut Vec<Event>,
    ) {
        let (group, picks) = plan;
        let now = self.st.now;
        let supplier = match &group {
            GangGroup::Domain { supplier, .. } | GangGroup::Region { supplier, .. } => *supplier,
        };
        self.fab.gangs.insert(
            t.bid,
            Gang {
                buyer: t.buyer,
                spec: *spec,
                group: group.clone(),
                members: vec![
                    Member {
                        lease: None,
                        ready: false,
                        replaced: 0,
                        lost: None,
                    };
                    picks.len()
                ],
                whole_at_ms: None,
            },
        );
        let mut members = Vec::with_capacity(picks.len());
        for (rank, (offer_id, end)) in picks.into_iter().enumerate() {
            let Some(node) = self
                .st
                .offers
                .get(&offer_id)
                .and_then(|o| self.st.nodes.get(&o.node))
            else {
                continue;
            };
            let mask = lowest_bits(
                node.healthy_mask & !node.occupied_mask(),
                spec.gpus_per_node,
            );
            let id = LeaseId(self.next_id());
            if let Some(req) = t.gang.as_mut() {
                req.slot = Some((t.bid, rank as u32));
            }
            self.create_lease(t, id, offer_id, mask, now, end, out);
            t.remaining = t.remaining.saturating_sub(spec.gpus_per_node);
            members.push(id);
        }
        t.remaining = 0;
        out.push(Event::GangFormed {
            bid: t.bid,
            buyer: t.buyer,
            supplier,
            members,
        });
        if !self.st.config.delivery {
            if let Some(gang) = self.fab.gangs.get_mut(&t.bid) {
                gang.whole_at_ms = Some(now);
            }
            out.push(Event::GangReady {
                bid: t.bid,
                buyer: t.buyer,
                at_ms: now,
            });
        }
    }

    /// A lease was created for a gang rank (a new gang or a replacement): index it.
    pub(crate) fn gang_member_created(&mut self, slot: (BidId, u32), lease: LeaseId) {
        let (bid, rank) = slot;
        if let Some(m) = self
            .fab
            .gangs
            .get_mut(&bid)
            .and_then(|g| g.members.get_mut(rank as usize))
        {
            if m.lost.is_some() {
                m.replaced += 1;
            }
            m.lease = Some(lease);
            m.ready = false;
            m.lost = None;
            self.idx.lease_gang.insert(lease, slot);
        }
    }

    /// A gang member's lease ended with `reason` (from `end_lease`): its rank is vacant, lost
    /// unless the end was the buyer's, the term's or for funds; settled at the command's end.
    pub(crate) fn gang_member_ended(&mut self, lease: LeaseId, reason: EndReason) {
        let Some((bid, rank)) = self.idx.lease_gang.remove(&lease) else {
            return;
        };
        if let Some(m) = self
            .fab
            .gangs
            .get_mut(&bid)
            .and_then(|g| g.members.get_mut(rank as usize))
        {
            m.lease = None;
            m.ready = false;
            if is_loss(reason) {
                m.lost = Some(lease);
                self.idx.lost_gang.insert(lease, (bid, rank));
            }
        }
        self.idx.touched_gangs.push(bid);
    }

    /// The replacement taker's gang requirement for a lost member `lease` (§13.3–13.4), or
    /// `None` when the member is not replaced (not a gang's, its gang failing, or its rank
    /// already replaced once before the gang was whole).
    pub(crate) fn gang_replacement(&self, lease: LeaseId, node: NodeId) -> Option<Option<GangReq>> {
        let Some(&(bid, rank)) = self.idx.lost_gang.get(&lease) else {
            return Some(None); // not a lost gang member: fail over as any lease
        };
        let gang = self.fab.gangs.get(&bid)?;
        let member = gang.members.get(rank as usize)?;
        if member.lost != Some(lease) || (gang.whole_at_ms.is_none() && member.replaced >= 1) {
            return None;
        }
        let mut avoid: Vec<NodeId> = gang
            .members
            .iter()
            .filter_map(|m| m.lease)
            .filter_map(|l| self.st.leases.get(&l).map(|l| l.node))
            .collect();
        avoid.push(node);
        Some(Some(GangReq {
            scope: gang.spec.scope,
            group: Some(gang.group.clone()),
            avoid,
            slot: Some((bid, rank)),
        }))
    }

    /// A member of a gang not yet whole reports ready (§13.3): it waits, unbilled and
    /// without a deadline. Returns false when `lease` is no such member.
    pub(crate) fn gang_member_ready(&mut self, lease: LeaseId, out: &mut Vec<Event>) -> bool {
        let Some(&(bid, rank)) = self.idx.lease_gang.get(&lease) else {
            return false;
        };
        let Some(gang) = self.fab.gangs.get_mut(&bid) else {
            return false;
        };
        if gang.whole_at_ms.is_some() {
            return false;
        }
        let Some(m) = gang.members.get_mut(rank as usize) else {
            return false;
        };
        if m.ready {
            return true; // a repeated report
        }
        m.ready = true;
        // §13.3: `GangMemberReady` only while another live member is not ready; the last
        // one's ready makes the gang whole (`GangReady`, settled at the command's end).
        let others = gang.members.iter().any(|m| m.lease.is_some() && !m.ready);
        if let Some(l) = self.st.leases.get_mut(&lease)
            && l.provision_deadline_ms.take().is_some()
        {
            self.idx.lease_timers.cancelled(1);
        }
        if others {
            out.push(Event::GangMemberReady {
                bid,
                lease,
                at_ms: self.st.now,
            });
        }
        self.idx.touched_gangs.push(bid);
        true
    }

    /// Whether `lease` is a member of a gang not yet whole that reported ready.
    pub(crate) fn gang_member_waiting(&self, lease: LeaseId) -> bool {
        self.idx.lease_gang.get(&lease).is_some_and(|&(bid, rank)| {
            self.fab.gangs.get(&bid).is_some_and(|g| {
                g.whole_at_ms.is_none() && g.members.get(rank as usize).is_some_and(|m| m.ready)
            })
        })
    }

    /// Settles the gangs touched by this command (§13.3–13.4), in gang id order: a gang not
    /// yet whole that lost a member without replacement fails (`GangFailed`, the others end
    /// `not_delivered`); a whole one degrades (`keep`) or ends (`end_all`); one whose live
    /// members are all ready becomes whole (`GangReady`, then `LeaseReady` for each); one with
    /// no live member is forgotten.
    pub(crate) fn settle_gangs(&mut self, out: &mut Vec<Event>) {
        if self.idx.touched_gangs.is_empty() {
            return;
        }
        let mut touched = std::mem::take(&mut self.idx.touched_gangs);
        touched.sort_unstable();
        touched.dedup();
        let now = self.st.now;
        for bid in touched {
            let Some(gang) = self.fab.gangs.get(&bid) else {
                continue;
            };
            let buyer = gang.buyer;
            let live: Vec<LeaseId> = gang.members.iter().filter_map(|m| m.lease).collect();
            let lost: Vec<LeaseId> = gang.members.iter().filter_map(|m| m.lost).collect();
            if let Some(&first) = lost.first() {
                let end_rest = match (gang.whole_at_ms, gang.spec.on_member_loss) {
                    (None, _) => {
                        out.push(Event::GangFailed {
                            bid,
                            buyer,
                            lost: first,
                        });
                        Some(EndReason::NotDelivered)
                    }
                    (Some(_), MemberLoss::EndAll) => Some(EndReason::GangEnded),
                    (Some(_), MemberLoss::Keep) => {
                        for l in &lost {
                            out.push(Event::GangDegraded {
                                bid,
                                buyer,
                                lost: *l,
                                live: live.len() as u32,
                            });
                        }
                        if let Some(g) = self.fab.gangs.get_mut(&bid) {
                            for m in &mut g.members {
                                m.lost = None;
                            }
                        }
                        None
                    }
                };
                if let Some(reason) = end_rest {
                    if reason == EndReason::NotDelivered {
                        // Not their nodes' failure: not counted against their reliability.
                        self.idx.gang_collateral.extend(live.iter().copied());
                    }
                    // The gang goes after its members' ends: a member reported ready began
                    // provisioning, so its GPUs wipe (§11.4); the ends' own loss marks go
                    // with the gang.
                    for l in &live {
                        self.end_lease(*l, reason, now, out);
                    }
                    self.fab.gangs.remove(&bid);
                    for l in &live {
                        self.idx.lease_gang.remove(l);
                    }
                    continue;
                }
            }
            let Some(gang) = self.fab.gangs.get(&bid) else {
                continue;
            };
            if live.is_empty() {
                self.fab.gangs.remove(&bid);
                continue;
            }
            let whole = gang.whole_at_ms.is_none()
                && gang.members.iter().all(|m| m.lease.is_none() || m.ready);
            if whole {
                if let Some(g) = self.fab.gangs.get_mut(&bid) {
                    g.whole_at_ms = Some(now);
                    for m in &mut g.members {
                        m.ready = false;
                    }
                }
                out.push(Event::GangReady {
                    bid,
                    buyer,
                    at_ms: now,
                });
                for l in live {
                    self.start_running(l, out);
                }
            }
        }
        // Ends above touch no gang still held (their records went first).
        self.idx.touched_gangs.clear();
        self.idx.lost_gang.clear();
    }

    /// A provisioning lease runs, and is billed, from now (`LeaseReady`).
    pub(crate) fn start_running(&mut self, id: LeaseId, out: &mut Vec<Event>) {
        let now = self.st.now;
        let Some(lease) = self.st.leases.get_mut(&id) else {
            return;
        };
        if lease.state != LeaseState::Provisioning {
            return;
        }
        if lease.provision_deadline_ms.take().is_some() {
            self.idx.lease_timers.cancelled(1);
        }
        lease.state = LeaseState::Active;
        lease.ready_ms = Some(now);
        out.push(Event::LeaseReady {
            lease: id,
            buyer: lease.buyer,
            supplier: lease.supplier,
            node: lease.node,
            at_ms: now,
        });
        self.file_victim(id);
    }

    /// `ReleaseBid` (§13.6): every live lease of the bid, in lease id order, ends `released`;
    /// its resting rest is cancelled.
    pub(crate) fn release_bid(
        &mut self,
        account: AccountId,
        bid: BidId,
        out: &mut Vec<Event>,
    ) -> Result<(), super::commands::Reject> {
        use crate::event::RejectReason;
        let resting = self.st.bids.get(&bid).map(|b| b.buyer);
        let mut leases: Vec<(LeaseId, AccountId)> = self
            .st
            .leases
            .values()
            .filter(|l| l.bid == bid)
            .map(|l| (l.id, l.buyer))
            .collect();
        if resting.is_none() && leases.is_empty() {
            return Err((RejectReason::UnknownBid, "bid"));
        }
        if resting.is_some_and(|b| b != account) || leases.iter().any(|(_, b)| *b != account) {
            return Err((RejectReason::NotOwner, "bid"));
        }
        leases.sort_unstable();
        let now = self.st.now;
        for (id, _) in leases {
            self.end_lease(id, EndReason::Released, now, out);
        }
        if let Some(b) = self.remove_resting_bid(bid) {
            out.push(Event::BidClosed {
                bid,
                filled: b.gpus - b.remaining,
                unfilled: b.remaining,
                reason: crate::event::BidCloseReason::Canceled,
                detail: crate::event::CloseDetail::default(),
            });
        }
        Ok(())
    }

    /// Validates fabric facts (§13.1): a domain of 1..=64 of `[A-Za-z0-9._-]`, NIC bandwidth
    /// 1..=25,600 Gbit/s.
    pub(crate) fn check_fabric(f: &NodeFabric) -> Result<(), super::commands::Reject> {
        use crate::event::RejectReason;
        if let Some(d) = &f.domain
            && (d.is_empty()
                || d.len() > crate::limits::MAX_DOMAIN_LEN
                || !d
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')))
        {
            return Err((RejectReason::InvalidDomain, "fabric_domain"));
        }
        if f.nic_gbps
            .is_some_and(|g| g == 0 || g > crate::limits::MAX_NIC_GBPS)
        {
            return Err((RejectReason::InvalidDomain, "nic_gbps"));
        }
        Ok(())
    }

    /// Records a node's fabric facts (an empty record clears them).
    /// Place sizes are the caller's ([`Engine::index_place`] out before, in after).
    pub(crate) fn set_fabric(&mut self, node: NodeId, f: &NodeFabric) {
        if f.is_empty() {
            self.fab.node_fabric.remove(&node);
        } else {
            self.fab.node_fabric.insert(node, f.clone());
        }
        let supplier = self.st.nodes.get(&node).map(|n| n.supplier);
        match (&f.domain, supplier) {
            (Some(d), Some(s)) => {
                let key = (s, d.clone());
                let id = match self.idx.domain_ids.get(&key) {
                    Some(&id) => id,
                    None => {
                        let id = self.idx.domain_keys.len() as u32;
                        self.idx.domain_keys.push(key.clone());
                        self.idx.domain_ids.insert(key, id);
                        id
                    }
                };
                self.idx.node_domain.insert(node, id);
            }
            _ => {
                self.idx.node_domain.remove(&node);
            }
        }
    }

    /// Resting gangs of this (SKU, kind) in priority order, tried whole against the book
    /// after the other resting bids (§13.2, §6).
    pub(crate) fn uncross_gangs(
        &mut self,
        sku: crate::ids::SkuId,
        kind: usize,
        out: &mut Vec<Event>,
    ) {
        let ids: Vec<BidId> = self
            .idx
            .gang_book
            .get(&(sku, kind))
            .map(|b| b.iter().map(|key| key.2).collect())
            .unwrap_or_default();
        for bid_id in ids {
            let Some(bid) = self.st.bids.get(&bid_id) else {
                continue;
            };
            let crate::command::Placement::Gang(spec) = bid.placement else {
                continue;
            };
            let trust = self.ext.bid_trust.get(&bid.id).copied();
            let mut t = Taker::resting(bid, trust);
            if self.fill_gang(&mut t, &spec, out).is_ok() {
                self.set_bid_remaining(bid_id, 0, out);
            }
        }
    }
}
