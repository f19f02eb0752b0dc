//! §13 of `docs/market-rules.md`, naively: fabric records per node, the all-or-none gang fill
//! by enumerating every place, gang delivery (all or none), lost members, `min_gpus` and
//! `ReleaseBid`.

use super::{Model, Reject, Taker, kind_price};
use exchange::command::{GangScope, GangSpec, MemberLoss, NodeFabric};
use exchange::state::{LeaseState, Node};
use exchange::{
    AccountId, BidCloseReason, BidId, CloseDetail, EndReason, Event, LeaseId, NodeId, OfferId,
    Placement, Price, RegionId, RejectReason, SkuId,
};

/// A gang's place (§13.2): a fabric domain of a supplier, or a region of a supplier. Ordered
/// as the last tie-break: (supplier, name) and (supplier, region id).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Place {
    Domain(AccountId, String),
    Region(AccountId, RegionId),
}

impl Place {
    fn supplier(&self) -> AccountId {
        match self {
            Place::Domain(s, _) | Place::Region(s, _) => *s,
        }
    }
}

/// What a gang taker (a new gang, or a lost member's replacement) requires of a node.
#[derive(Clone, Debug)]
pub(super) struct GangReq {
    pub(super) scope: GangScope,
    /// A replacement: the gang's place.
    pub(super) place: Option<Place>,
    /// A replacement: the nodes of the gang's live members and the lost member's node.
    pub(super) avoid: Vec<NodeId>,
    /// The (gang, rank) a lease created for this taker takes.
    pub(super) slot: Option<(BidId, usize)>,
}

/// A gang (§13.2–13.4).
#[derive(Clone, Debug)]
pub(super) struct Gang {
    buyer: AccountId,
    spec: GangSpec,
    place: Place,
    members: Vec<Member>,
    /// Every member was ready (or it formed without delivery).
    whole: bool,
}

/// One rank of a gang.
#[derive(Clone, Copy, Debug)]
struct Member {
    lease: Option<LeaseId>,
    /// Reported ready before the gang was whole; waits.
    ready: bool,
    /// Replacements made for this rank.
    replaced: u32,
    /// The lease lost in this command and not (yet) replaced.
    lost: Option<LeaseId>,
}

/// A new taker's gang requirement for `placement`.
pub(super) fn gang_req(placement: Placement) -> Option<GangReq> {
    match placement {
        Placement::Gang(g) => Some(GangReq {
            scope: g.scope,
            place: None,
            avoid: Vec::new(),
            slot: None,
        }),
        _ => None,
    }
}

/// Ends that lose a member (§13.3–13.4): not the buyer's, the term's, funds or `end_all`.
fn is_loss(reason: EndReason) -> bool {
    matches!(
        reason,
        EndReason::NodeFailure
            | EndReason::NotDelivered
            | EndReason::Preempted
            | EndReason::OfferWithdrawn
    )
}

/// §13.1: a domain of 1..=64 of `[A-Za-z0-9._-]`, NIC bandwidth 1..=25,600 Gbit/s.
pub(super) fn check_fabric(f: &NodeFabric) -> Result<(), Reject> {
    if let Some(d) = &f.domain
        && (d.is_empty()
            || d.len() > 64
            || !d
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-'))
    {
        return Err((RejectReason::InvalidDomain, Some("fabric_domain")));
    }
    if f.nic_gbps.is_some_and(|g| g == 0 || g > 25_600) {
        return Err((RejectReason::InvalidDomain, Some("nic_gbps")));
    }
    Ok(())
}

impl Model {
    /// Records a node's fabric facts; an empty record clears them (§13.1).
    pub(super) fn set_fabric(&mut self, node: NodeId, f: &NodeFabric) {
        if f.domain.is_none() && f.nic_gbps.is_none() {
            self.fabric.remove(&node);
        } else {
            self.fabric.insert(node, f.clone());
        }
    }

    fn domain_of(&self, node: NodeId) -> Option<&str> {
        self.fabric.get(&node).and_then(|f| f.domain.as_deref())
    }

    fn place_of(&self, scope: GangScope, n: &Node) -> Option<Place> {
        match scope {
            GangScope::Domain => self
                .domain_of(n.id)
                .map(|d| Place::Domain(n.supplier, d.to_string())),
            GangScope::Region => Some(Place::Region(n.supplier, n.region)),
        }
    }

    /// The node count of the largest place of `sku` for `scope`: registered nodes, any state.
    pub(super) fn largest_place(&self, sku: SkuId, scope: GangScope) -> u32 {
        let mut counts: Vec<(Place, u32)> = Vec::new();
        for n in self.nodes.iter().filter(|n| n.sku == sku) {
            if let Some(p) = self.place_of(scope, n) {
                match counts.iter_mut().find(|(q, _)| *q == p) {
                    Some(c) => c.1 += 1,
                    None => counts.push((p, 1)),
                }
            }
        }
        counts.into_iter().map(|(_, c)| c).max().unwrap_or(0)
    }

    fn in_place(&self, p: &Place, n: &Node) -> bool {
        match p {
            Place::Domain(s, d) => n.supplier == *s && self.domain_of(n.id) == Some(d.as_str()),
            Place::Region(s, r) => n.supplier == *s && n.region == *r,
        }
    }

    /// The fabric requirement of a gang taker (§13.2): a domain-scoped gang needs a node on a
    /// domain; a replacement, a node of the gang's place holding no other member.
    pub(super) fn gang_admits(&self, t: &Taker, n: &Node) -> bool {
        let Some(g) = &t.gang else { return true };
        (g.scope != GangScope::Domain || self.domain_of(n.id).is_some())
            && g.place.as_ref().is_none_or(|p| self.in_place(p, n))
            && !g.avoid.contains(&n.id)
    }

    /// §13.2: every place's picks (its first N candidates in book order); the place with N
    /// picks of the lowest total wins, ties to the fewest listed free GPUs left in the place,
    /// then the place order. `Err(n)`: no place has N picks; n = the most picks of any.
    fn plan_gang(&self, t: &Taker, spec: &GangSpec) -> Result<(Place, Vec<OfferId>), u32> {
        let (n_nodes, g) = (spec.nodes as usize, spec.gpus_per_node);
        let mut book: Vec<(Price, u64, OfferId)> = Vec::new();
        for n in &self.nodes {
            if n.sku != t.sku || self.listed_free(n) < g {
                continue;
            }
            let o = self.offer_of(n).expect("listed node has an offer");
            if let Some(p) = kind_price(o, t.kind) {
                book.push((p, o.priority, o.id));
            }
        }
        book.sort();
        let mut places: Vec<(Place, Vec<OfferId>, i128)> = Vec::new();
        for (p, _, oid) in book {
            if p > t.limit {
                break;
            }
            let o = self.offer(oid);
            let n = self.node(o.node);
            if !self.eligible(t, o, n, self.now) {
                continue;
            }
            let Some(place) = self.place_of(spec.scope, n) else {
                continue;
            };
            let i = match places.iter().position(|(q, _, _)| *q == place) {
                Some(i) => i,
                None => {
                    places.push((place, Vec::new(), 0));
                    places.len() - 1
                }
            };
            let e = &mut places[i];
            if e.1.len() < n_nodes {
                e.1.push(oid);
                e.2 += i128::from(p.ticks()) * i128::from(g);
            }
        }
        let most = places
            .iter()
            .map(|(_, v, _)| v.len() as u32)
            .max()
            .unwrap_or(0);
        let mut whole: Vec<(i128, u64, Place, Vec<OfferId>)> = places
            .into_iter()
            .filter(|(_, v, _)| v.len() == n_nodes)
            .map(|(place, v, total)| {
                // BestFit: Σ listed free GPUs of the place's listed nodes of the SKU (the
                // N×G taken is the same for every place)
                let free: u64 = self
                    .nodes
                    .iter()
                    .filter(|n| n.sku == t.sku && self.in_place(&place, n))
                    .map(|n| u64::from(self.listed_free(n)))
                    .sum();
                (total, free, place, v)
            })
            .collect();
        whole.sort();
        match whole.into_iter().next() {
            Some((_, _, place, picks)) => Ok((place, picks)),
            None => Err(most),
        }
    }

    /// Fills gang taker `t` whole now (§13.2), or returns `Err` as [`Model::plan_gang`].
    pub(super) fn fill_gang(&mut self, t: &Taker, spec: &GangSpec) -> Result<(), u32> {
        let (place, picks) = self.plan_gang(t, spec)?;
        let now = self.now;
        let nodes: Vec<NodeId> = picks.iter().map(|o| self.offer(*o).node).collect();
        self.gangs.insert(
            t.bid,
            Gang {
                buyer: t.buyer,
                spec: *spec,
                place: place.clone(),
                members: vec![
                    Member {
                        lease: None,
                        ready: false,
                        replaced: 0,
                        lost: None,
                    };
                    picks.len()
                ],
                whole: false,
            },
        );
        let mut members = Vec::new();
        for (rank, oid) in picks.into_iter().enumerate() {
            let n = self.node(self.offer(oid).node).clone();
            let mask = self.free_mask(&n, spec.gpus_per_node);
            let id = self.new_id();
            let mut member = t.clone();
            member.gang = Some(GangReq {
                scope: spec.scope,
                place: Some(place.clone()),
                avoid: nodes.clone(),
                slot: Some((t.bid, rank)),
            });
            self.create_lease(&member, oid, mask, now, id);
            members.push(LeaseId(id));
        }
        self.emit(Event::GangFormed {
            bid: t.bid,
            buyer: t.buyer,
            supplier: place.supplier(),
            members,
        });
        if !self.config.delivery {
            self.gangs.get_mut(&t.bid).expect("gang").whole = true;
            self.emit(Event::GangReady {
                bid: t.bid,
                buyer: t.buyer,
                at_ms: now,
            });
        }
        Ok(())
    }

    /// A lease was created for (gang, rank): the rank's lease now.
    pub(super) fn gang_member_created(&mut self, slot: (BidId, usize), lease: LeaseId) {
        if let Some(m) = self
            .gangs
            .get_mut(&slot.0)
            .and_then(|g| g.members.get_mut(slot.1))
        {
            if m.lost.is_some() {
                m.replaced += 1;
            }
            m.lease = Some(lease);
            m.ready = false;
            m.lost = None;
        }
    }

    /// A lease ended: if it was a gang member, its rank is vacant, and lost for a loss.
    pub(super) fn gang_member_ended(&mut self, lease: LeaseId, reason: EndReason) {
        for g in self.gangs.values_mut() {
            for m in g.members.iter_mut() {
                if m.lease == Some(lease) {
                    m.lease = None;
                    m.ready = false;
                    if is_loss(reason) {
                        m.lost = Some(lease);
                    }
                    return;
                }
            }
        }
    }

    /// For a failover of `lease`: `None` when it is no lost gang member (fail over as any
    /// lease); `Some(None)` when it is one that is not replaced (its rank was replaced once
    /// before the gang was whole); else the replacement's requirement (§13.3–13.4).
    pub(super) fn gang_replacement(
        &self,
        lease: LeaseId,
        exclude: NodeId,
    ) -> Option<Option<GangReq>> {
        for (bid, g) in &self.gangs {
            for (rank, m) in g.members.iter().enumerate() {
                if m.lost != Some(lease) {
                    continue;
                }
                if !g.whole && m.replaced >= 1 {
                    return Some(None);
                }
                let mut avoid: Vec<NodeId> = g
                    .members
                    .iter()
                    .filter_map(|m| m.lease)
                    .map(|l| self.lease(l).node)
                    .collect();
                avoid.push(exclude);
                return Some(Some(GangReq {
                    scope: g.spec.scope,
                    place: Some(g.place.clone()),
                    avoid,
                    slot: Some((*bid, rank)),
                }));
            }
        }
        None
    }

    /// `Some((gang, rank))` when `lease` is a member of a gang not yet whole.
    fn unwhole_member(&self, lease: LeaseId) -> Option<(BidId, usize)> {
        self.gangs.iter().find_map(|(bid, g)| {
            if g.whole {
                return None;
            }
            g.members
                .iter()
                .position(|m| m.lease == Some(lease))
                .map(|r| (*bid, r))
        })
    }

    /// A member of a gang not yet whole that reported ready and waits (§13.3).
    pub(super) fn gang_member_waiting(&self, lease: LeaseId) -> bool {
        self.unwhole_member(lease)
            .is_some_and(|(b, r)| self.gangs[&b].members[r].ready)
    }

    /// A ready report on a member of a gang not yet whole (§13.3): it waits, unbilled and
    /// without a deadline; `GangMemberReady` while another live member is not ready (the last
    /// one's ready makes the gang whole at the end of the command). False: no such member.
    pub(super) fn gang_member_ready(&mut self, lease: LeaseId) -> bool {
        let Some((bid, rank)) = self.unwhole_member(lease) else {
            return false;
        };
        let g = self.gangs.get_mut(&bid).expect("gang");
        if g.members[rank].ready {
            return true; // a repeated report
        }
        g.members[rank].ready = true;
        let others = g.members.iter().any(|m| m.lease.is_some() && !m.ready);
        self.lease_mut(lease).provision_deadline_ms = None;
        if others {
            let at_ms = self.now;
            self.emit(Event::GangMemberReady { bid, lease, at_ms });
        }
        true
    }

    /// A provisioning lease runs, billed from now (`LeaseReady`).
    fn start_running(&mut self, id: LeaseId) {
        let now = self.now;
        let l = self.lease_mut(id);
        if l.state != LeaseState::Provisioning {
            return;
        }
        l.state = LeaseState::Active;
        l.provision_deadline_ms = None;
        l.ready_ms = Some(now);
        let e = Event::LeaseReady {
            lease: id,
            buyer: l.buyer,
            supplier: l.supplier,
            node: l.node,
            at_ms: now,
        };
        self.emit(e);
    }

    /// The end of time advancement and of a command (§13.3–13.4), every gang in id order: a
    /// lost member not replaced fails a gang not yet whole (`GangFailed`, the other members end
    /// `not_delivered`), and degrades (`keep`) or ends (`end_all`, `gang_ended`) a whole one;
    /// a gang whose live members are all ready is whole (`GangReady`, `LeaseReady` in rank
    /// order); one with no live member is forgotten.
    pub(super) fn settle_gangs(&mut self) {
        let now = self.now;
        let ids: Vec<BidId> = self.gangs.keys().copied().collect();
        for bid in ids {
            let g = self.gangs[&bid].clone();
            let live: Vec<LeaseId> = g.members.iter().filter_map(|m| m.lease).collect();
            let lost: Vec<LeaseId> = g.members.iter().filter_map(|m| m.lost).collect();
            if let Some(&first) = lost.first() {
                let end = if !g.whole {
                    self.emit(Event::GangFailed {
                        bid,
                        buyer: g.buyer,
                        lost: first,
                    });
                    Some(EndReason::NotDelivered)
                } else if g.spec.on_member_loss == MemberLoss::EndAll {
                    Some(EndReason::GangEnded)
                } else {
                    for l in &lost {
                        self.emit(Event::GangDegraded {
                            bid,
                            buyer: g.buyer,
                            lost: *l,
                            live: live.len() as u32,
                        });
                    }
                    for m in &mut self.gangs.get_mut(&bid).expect("gang").members {
                        m.lost = None;
                    }
                    None
                };
                if let Some(reason) = end {
                    // the members end while the gang is known (a member reported ready
                    // wipes, §11.4); the gang goes with the loss marks of these ends
                    for l in live {
                        self.end_lease(l, reason, now);
                    }
                    self.gangs.remove(&bid);
                    continue;
                }
            }
            if live.is_empty() {
                self.gangs.remove(&bid);
                continue;
            }
            let g = self.gangs.get_mut(&bid).expect("gang");
            if !g.whole && g.members.iter().all(|m| m.lease.is_none() || m.ready) {
                g.whole = true;
                for m in &mut g.members {
                    m.ready = false;
                }
                let buyer = g.buyer;
                self.emit(Event::GangReady {
                    bid,
                    buyer,
                    at_ms: now,
                });
                for l in live {
                    self.start_running(l);
                }
            }
        }
    }

    /// §13.2 in uncross: the resting gangs of (SKU, kind), in priority order, each tried whole
    /// against the whole book with maker pricing by priority.
    pub(super) fn uncross_gangs(&mut self, sku: exchange::SkuId, kind: exchange::LeaseKind) {
        let mut order: Vec<(std::cmp::Reverse<Price>, u64, BidId)> = self
            .bids
            .iter()
            .filter(|b| b.sku == sku && b.kind == kind && matches!(b.placement, Placement::Gang(_)))
            .map(|b| (std::cmp::Reverse(b.limit), b.priority, b.id))
            .collect();
        order.sort();
        for (_, _, id) in order {
            let b = self.bids.iter().find(|b| b.id == id).expect("bid").clone();
            let Placement::Gang(spec) = b.placement else {
                continue;
            };
            let t = self.resting_taker(&b);
            if self.fill_gang(&t, &spec).is_ok() {
                self.bids.retain(|x| x.id != id);
                self.emit(Event::BidClosed {
                    bid: id,
                    filled: b.gpus,
                    unfilled: 0,
                    reason: BidCloseReason::Filled,
                    detail: CloseDetail::default(),
                });
            }
        }
    }

    /// §13.5: the GPUs phases 1 and 2 would fill for spread taker `t` wanting `want`, planned
    /// without filling.
    pub(super) fn spread_fillable(&self, t: &Taker, want: u32) -> u32 {
        let now = self.now;
        let mut cands: Vec<(Price, u64, OfferId)> = Vec::new();
        for n in &self.nodes {
            if n.sku != t.sku || self.listed_free(n) == 0 {
                continue;
            }
            let o = self.offer_of(n).expect("listed node has an offer");
            if let Some(p) = kind_price(o, t.kind) {
                cands.push((p, o.priority, o.id));
            }
        }
        cands.sort();
        let mut remaining = want;
        for (p, _, oid) in cands {
            if remaining == 0 || p > t.limit {
                break;
            }
            let o = self.offer(oid);
            let n = self.node(o.node);
            if self.eligible(t, o, n, now) {
                remaining -= self.listed_free(n).min(remaining);
            }
        }
        for (vid, _) in self.victims(t) {
            if remaining == 0 {
                break;
            }
            remaining -= self.lease(vid).gpus.min(remaining);
        }
        want - remaining
    }

    /// `ReleaseBid` (§13.6).
    pub(super) fn release_bid(&mut self, account: AccountId, bid: BidId) -> Result<(), Reject> {
        let resting = self.bids.iter().find(|b| b.id == bid).cloned();
        let mut leases: Vec<(LeaseId, AccountId)> = self
            .leases
            .iter()
            .filter(|l| l.bid == bid)
            .map(|l| (l.id, l.buyer))
            .collect();
        if resting.is_none() && leases.is_empty() {
            return Err((RejectReason::UnknownBid, Some("bid")));
        }
        if resting.as_ref().is_some_and(|b| b.buyer != account)
            || leases.iter().any(|(_, b)| *b != account)
        {
            return Err((RejectReason::NotOwner, Some("bid")));
        }
        leases.sort();
        for (id, _) in leases {
            self.end_lease(id, EndReason::Released, self.now);
        }
        if let Some(b) = resting {
            self.bids.retain(|x| x.id != bid);
            self.emit(Event::BidClosed {
                bid,
                filled: b.gpus - b.remaining,
                unfilled: b.remaining,
                reason: BidCloseReason::Canceled,
                detail: CloseDetail::default(),
            });
        }
        Ok(())
    }

    /// The min_gpus close (§13.5).
    pub(super) fn close_min_gpus(&mut self, bid: BidId, gpus: u32, fillable: u32) {
        self.emit(Event::BidClosed {
            bid,
            filled: 0,
            unfilled: gpus,
            reason: BidCloseReason::MinGpus,
            detail: CloseDetail {
                fillable: Some(fillable),
                ..CloseDetail::default()
            },
        });
    }

    /// Gangs with a live member, for tests: (bid, member leases by rank, whole).
    pub fn gang_view(&self) -> Vec<(BidId, Vec<Option<LeaseId>>, bool)> {
        self.gangs
            .iter()
            .map(|(b, g)| (*b, g.members.iter().map(|m| m.lease).collect(), g.whole))
            .collect()
    }
}
