//! Creating, noticing, starting and ending leases; failover of leases lost to node failure.

use super::Engine;
use super::matching::{Taker, Term};
use crate::event::{EndReason, Event, Maker, NoticeReason};
use crate::ids::{LeaseId, NodeId, OfferId};
use crate::state::{Lease, LeaseOrigin, LeaseState, Notice};

impl Engine {
    /// Creates lease `id` for taker `t` on `offer_id` with the GPUs in `mask`, starting at
    /// `start_ms` (pending when later than now) and ending at `end_ms`. Emits `Fill`,
    /// `LeaseStarted` when it starts now, and `LeaseMigrated` for a failover.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn create_lease(
        &mut self,
        t: &Taker,
        id: LeaseId,
        offer_id: OfferId,
        mask: u32,
        start_ms: i64,
        end_ms: i64,
        out: &mut Vec<Event>,
    ) {
        let Some(offer) = self.st.offers.get(&offer_id) else {
            return;
        };
        let node_id = offer.node;
        let Some(node) = self.st.nodes.get(&node_id) else {
            return;
        };
        let maker = match t.resting_priority {
            Some(bp) if bp < offer.priority => Maker::Bid,
            _ => Maker::Offer,
        };
        let price = match (t.kind, maker) {
            (crate::command::LeaseKind::Preemptible, _) | (_, Maker::Bid) => t.limit,
            (crate::command::LeaseKind::Spot, Maker::Offer) => offer.terms.spot_price,
        };
        if !t.trust.is_none() {
            self.ext.lease_trust.insert(id, t.trust);
        }
        let delivery = self.st.config.delivery;
        let state = match (start_ms <= self.st.now, delivery) {
            (true, false) => LeaseState::Active,
            (true, true) => LeaseState::Provisioning,
            (false, _) => LeaseState::Pending,
        };
        let fixed_end_ms = match t.term {
            Term::Duration(d) => Some(start_ms.saturating_add((d as i64).saturating_mul(1000))),
            Term::FixedEnd(e) => Some(e),
            Term::Open => None,
        };
        let lease = Lease {
            id,
            bid: t.bid,
            offer: offer_id,
            node: node_id,
            buyer: t.buyer,
            supplier: offer.supplier,
            sku: node.sku,
            region: node.region,
            kind: t.kind,
            gpus: mask.count_ones(),
            gpu_mask: mask,
            price,
            start_ms,
            end_ms,
            state,
            notice: None,
            origin: LeaseOrigin {
                limit: t.limit,
                placement: t.placement,
                constraints: t.constraints.clone(),
                fixed_end_ms,
            },
            provision_deadline_ms: None,
            ready_ms: None,
        };
        out.push(Event::Fill {
            bid: t.bid,
            lease: id,
            offer: offer_id,
            node: node_id,
            buyer: t.buyer,
            supplier: lease.supplier,
            gpus: lease.gpus,
            price,
            kind: t.kind,
            maker,
            start_ms,
            end_ms,
        });
        let started = state != LeaseState::Pending;
        if started {
            out.push(Self::started_event(&lease));
        }
        self.idx.add_lease_timers(&lease);
        if let Some(node) = self.st.nodes.get_mut(&node_id) {
            node.leases.push(id);
            node.claimed_mask |= mask;
        }
        self.st.leases.insert(id, lease);
        if started && delivery {
            self.begin_provisioning(id, out);
        }
        if let Some(slot) = t.gang.as_ref().and_then(|g| g.slot) {
            self.gang_member_created(slot, id);
        }
        if let Some(from) = t.migrated_from {
            out.push(Event::LeaseMigrated { from, to: id });
        }
        self.file_victim(id);
        self.relist(node_id);
    }

    pub(crate) fn started_event(lease: &Lease) -> Event {
        Event::LeaseStarted {
            lease: lease.id,
            bid: lease.bid,
            buyer: lease.buyer,
            supplier: lease.supplier,
            node: lease.node,
            sku: lease.sku,
            region: lease.region,
            kind: lease.kind,
            gpus: lease.gpus,
            gpu_mask: lease.gpu_mask,
            price: lease.price,
            start_ms: lease.start_ms,
            end_ms: lease.end_ms,
        }
    }

    /// A pending lease reaches its start (called when its start timer comes due).
    pub(crate) fn start_lease(&mut self, id: LeaseId, out: &mut Vec<Event>) {
        let Some(lease) = self.st.leases.get_mut(&id) else {
            return;
        };
        // Its start timer was just taken; its end timer stays as it is.
        if self.st.config.delivery {
            lease.state = LeaseState::Provisioning;
            out.push(Self::started_event(lease));
            self.begin_provisioning(id, out);
        } else {
            lease.state = LeaseState::Active;
            out.push(Self::started_event(lease));
            self.file_victim(id);
        }
    }

    /// Gives a preemptible lease notice; ends it at once when the deadline is now.
    pub(crate) fn give_notice(
        &mut self,
        id: LeaseId,
        deadline_ms: i64,
        reason: NoticeReason,
        by: Option<LeaseId>,
        out: &mut Vec<Event>,
    ) {
        self.unfile_victim(id);
        let Some(lease) = self.st.leases.get_mut(&id) else {
            return;
        };
        self.idx.cancel_lease_timers(lease);
        lease.notice = Some(Notice {
            deadline_ms,
            reason,
        });
        self.idx.add_lease_timers(lease);
        out.push(Event::PreemptionNotice {
            lease: id,
            by,
            deadline_ms,
            reason,
        });
        if deadline_ms <= self.st.now {
            let end_reason = match reason {
                NoticeReason::Preempted => EndReason::Preempted,
                NoticeReason::OfferWithdrawn => EndReason::OfferWithdrawn,
            };
            self.end_lease(id, end_reason, self.st.now, out);
        }
    }

    /// Ends a live lease with `reason` at `at_ms`; frees its GPUs and relists its node.
    /// Returns the ended lease.
    pub(crate) fn end_lease(
        &mut self,
        id: LeaseId,
        reason: EndReason,
        at_ms: i64,
        out: &mut Vec<Event>,
    ) -> Option<Lease> {
        self.unfile_victim(id);
        let lease = self.st.leases.remove(&id)?;
        self.idx.cancel_lease_timers(&lease);
        if let Some(node) = self.st.nodes.get_mut(&lease.node) {
            node.leases.retain(|l| *l != id);
            // Masks overlap only between a lease under notice and its pending successor (active
            // leases are disjoint); an active lease without notice simply frees its GPUs.
            let overlaps = lease.notice.is_some() || lease.state != LeaseState::Active;
            if overlaps {
                let mut claimed = 0;
                for l in &node.leases {
                    if let Some(other) = self.st.leases.get(l) {
                        claimed |= other.gpu_mask;
                    }
                }
                node.claimed_mask = claimed;
            } else {
                node.claimed_mask &= !lease.gpu_mask;
            }
        }
        if let Some(trust) = self.ext.lease_trust.remove(&id) {
            self.idx.ended_trust.insert(id, trust);
        }
        out.push(Event::LeaseEnded {
            lease: id,
            buyer: lease.buyer,
            reason,
            at_ms,
        });
        if self.st.config.delivery {
            self.start_wipe(&lease, out);
        }
        // After the wipe: a gang member waiting ready is still known as one there (§13.3).
        self.gang_member_ended(id, reason);
        self.relist(lease.node);
        Some(lease)
    }

    /// Fails over a lease ended by node failure (docs/market-rules.md §5).
    pub(crate) fn failover(&mut self, lease: &Lease, exclude: NodeId, out: &mut Vec<Event>) {
        if lease.notice.is_some() {
            return;
        }
        // It would have ended anyway: nothing to continue.
        if lease.end_ms <= self.st.now
            || lease.origin.fixed_end_ms.is_some_and(|e| e <= self.st.now)
        {
            return;
        }
        // A gang member is replaced on one node of its gang's place, to the gang's end, or
        // not at all (§13.3–13.4; settled with its gang).
        let Some(gang) = self.gang_replacement(lease.id, exclude) else {
            return;
        };
        let placement = match lease.origin.placement {
            crate::command::Placement::Gang(_) => crate::command::Placement::SingleNode,
            p => p,
        };
        let mut t = Taker {
            bid: lease.bid,
            buyer: lease.buyer,
            sku: lease.sku,
            kind: lease.kind,
            limit: lease.origin.limit,
            placement,
            constraints: lease.origin.constraints.clone(),
            term: match (lease.origin.fixed_end_ms, &gang) {
                (_, Some(_)) => Term::FixedEnd(lease.end_ms),
                (Some(e), None) => Term::FixedEnd(e),
                (None, None) => Term::Open,
            },
            exclude: Some(exclude),
            resting_priority: None,
            migrated_from: Some(lease.id),
            remaining: lease.gpus,
            trust: self.idx.ended_trust.remove(&lease.id).unwrap_or_default(),
            gang: gang.map(Box::new),
        };
        let is_gang = t.gang.is_some();
        self.phase1(&mut t, out);
        if t.remaining > 0 && !is_gang {
            self.phase2(&mut t, out);
        }
        if t.remaining > 0 {
            let (reason, detail) = self.unfilled_reason(&t);
            out.push(Event::FailoverFailed {
                lease: lease.id,
                gpus: t.remaining,
                reason,
                detail,
            });
        }
    }
}
