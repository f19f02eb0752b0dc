//! [`Engine::check_invariants`]: the engine's own consistency checks (docs/market-rules.md
//! §10), run after every step in tests.

use super::Engine;
use super::index::{free_for, node_need};
use super::matching::Taker;
use crate::event::HoldReason;
use crate::state::{LeaseState, NodeStatus};

impl Engine {
    /// Checks the invariants of docs/market-rules.md §10 and that every derived index equals a
    /// rebuild from the canonical state.
    ///
    /// # Errors
    /// A description of the first violation found.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.check_structure()?;
        // Derived indexes equal a rebuild from scratch.
        let mut fresh = self.clone();
        fresh.rebuild_index();
        let (a, b) = (&self.idx, &fresh.idx);
        if a.listings != b.listings {
            return Err(format!(
                "listings differ from recomputation: {:?} vs {:?}",
                a.listings, b.listings
            ));
        }
        if self.inventory() != fresh.inventory() {
            return Err(format!(
                "inventory differs from recomputation: {:?} vs {:?}",
                self.inventory(),
                fresh.inventory()
            ));
        }
        if a.books != b.books {
            return Err("offer or bid books differ from recomputation".into());
        }
        if a.verifying != b.verifying
            || a.verified_at != b.verified_at
            || a.day_score != b.day_score
        {
            return Err("verification or day-score mirrors differ from recomputation".into());
        }
        if a.parked_trust != b.parked_trust {
            return Err(format!(
                "parked trust bids differ from recomputation: {:?} vs {:?}",
                a.parked_trust, b.parked_trust
            ));
        }
        if a.victims_by_spot != b.victims_by_spot
            || a.victims_by_pre != b.victims_by_pre
            || a.victim_at != b.victim_at
            || a.victim_gpus != b.victim_gpus
        {
            return Err("preemption victim index differs from recomputation".into());
        }
        if a.heartbeats.nodes() != b.heartbeats.nodes()
            || !a.heartbeats.entries_not_after(&self.st.nodes)
        {
            return Err("heartbeat index differs from recomputation".into());
        }
        let lease_timers = |i: &super::index::Index| {
            i.lease_timers
                .live(|t| super::index::lease_timer_live(&self.st.leases, &self.st.wipes, t))
        };
        let (la, lb) = (lease_timers(a), lease_timers(b));
        if la != lb {
            return Err(format!("lease timers differ: {la:?} vs {lb:?}"));
        }
        let mut live: Vec<_> = a.client_order_expiry.iter().cloned().collect();
        live.sort_unstable();
        if live != b.client_order_expiry.iter().cloned().collect::<Vec<_>>() {
            return Err("client order id expiry queue differs from recomputation".into());
        }
        if a.parked_client_orders != b.parked_client_orders {
            return Err("parked client order ids differ from recomputation".into());
        }
        let bid_expiry = |i: &super::index::Index| {
            i.bid_expiry
                .live(|t| super::index::bid_expiry_live(&self.st.bids, t))
        };
        let offer_expiry = |i: &super::index::Index| {
            i.offer_expiry
                .live(|t| super::index::offer_expiry_live(&self.st.offers, t))
        };
        if bid_expiry(a) != bid_expiry(b) || offer_expiry(a) != offer_expiry(b) {
            return Err("expiry timers differ from recomputation".into());
        }
        for (key, level) in self.inventory() {
            if level.free_gpus == 0 || level.max_single_node == 0 {
                return Err(format!("empty inventory level {key:?}"));
            }
        }
        let now = self.st.now;
        for node in self.st.nodes.values() {
            let mut claimed = 0u32;
            let mut active = 0u32;
            for lid in &node.leases {
                let lease = self
                    .st
                    .leases
                    .get(lid)
                    .ok_or_else(|| format!("node {} lists unknown lease {}", node.id, lid))?;
                if lease.node != node.id {
                    return Err(format!(
                        "lease {lid} listed on node {} but is on {}",
                        node.id, lease.node
                    ));
                }
                if lease.gpus != lease.gpu_mask.count_ones() || lease.gpus == 0 {
                    return Err(format!("lease {lid} GPU count does not match its mask"));
                }
                // Running and provisioning leases hold their GPUs alone.
                if lease.state != LeaseState::Pending {
                    if active & lease.gpu_mask != 0 {
                        return Err(format!(
                            "lease {lid} shares a GPU with another active lease"
                        ));
                    }
                    active |= lease.gpu_mask;
                }
                claimed |= lease.gpu_mask;
            }
            if claimed != node.claimed_mask {
                return Err(format!("node {} claimed mask is stale", node.id));
            }
            if claimed & !node.healthy_mask != 0 {
                return Err(format!("node {} has a lease on an unhealthy GPU", node.id));
            }
            if node.healthy_mask >> node.gpus != 0 {
                return Err(format!("node {} healthy mask beyond its GPUs", node.id));
            }
            // A pending lease only takes GPUs that are free or held by leases under notice.
            for lid in &node.leases {
                let Some(p) = self.st.leases.get(lid) else {
                    continue;
                };
                if p.state != LeaseState::Pending {
                    continue;
                }
                for other in node.leases.iter().filter_map(|o| self.st.leases.get(o)) {
                    if other.id != p.id
                        && other.gpu_mask & p.gpu_mask != 0
                        && other.notice.is_none()
                    {
                        return Err(format!(
                            "pending lease {} overlaps lease {} which has no notice",
                            p.id, other.id
                        ));
                    }
                }
            }
            self.check_node_delivery(node)?;
            if node.status == NodeStatus::Offline && !node.leases.is_empty() {
                return Err(format!("offline node {} still has leases", node.id));
            }
            if node.status == NodeStatus::Online
                && now.saturating_sub(node.last_heartbeat_ms) > self.st.config.heartbeat_timeout_ms
            {
                return Err(format!(
                    "node {} is online past its heartbeat timeout",
                    node.id
                ));
            }
        }
        for lease in self.st.leases.values() {
            if lease.effective_end_ms() <= now {
                return Err(format!("lease {} is live past its end", lease.id));
            }
            if lease.state == LeaseState::Pending && lease.start_ms <= now {
                return Err(format!("lease {} is pending past its start", lease.id));
            }
        }
        for offer in self.st.offers.values() {
            if offer.terms.available_until_ms <= now {
                return Err(format!("offer {} is live past available_until", offer.id));
            }
        }
        self.check_gangs()?;
        // No resting bid can fill from listed capacity.
        for bid in self.st.bids.values() {
            if bid.remaining == 0 || bid.remaining > bid.gpus {
                return Err(format!(
                    "resting bid {} has remaining {}",
                    bid.id, bid.remaining
                ));
            }
            let t = Taker::resting(bid, self.ext.bid_trust.get(&bid.id).copied());
            if let crate::command::Placement::Gang(spec) = bid.placement {
                let books = &self.idx.books[usize::from(bid.sku.0)];
                let keys = books.offers_with_free(super::index::kind_ix(bid.kind), 1);
                if self.plan_gang(&t, &spec, keys).is_ok() {
                    return Err(format!("resting gang {} could fill whole", bid.id));
                }
                continue;
            }
            let need = node_need(bid.placement, bid.remaining);
            for offer in self.st.offers.values() {
                let Some(node) = self.st.nodes.get(&offer.node) else {
                    continue;
                };
                let price = match bid.kind {
                    crate::command::LeaseKind::Spot => Some(offer.terms.spot_price),
                    crate::command::LeaseKind::Preemptible => offer.terms.preemptible_price,
                };
                if node.sku != bid.sku || price.is_none_or(|p| p > bid.limit) {
                    continue;
                }
                if self.eligible(&t, offer, node, now).is_some()
                    && free_for(node, offer.terms.gpus) >= need
                {
                    return Err(format!(
                        "resting bid {} could fill from offer {}",
                        bid.id, offer.id
                    ));
                }
            }
        }
        Ok(())
    }

    /// Gang invariants (§13): members indexed both ways, each a live lease of the gang's
    /// buyer on a distinct node of its place; none waits once whole; nothing lost or touched
    /// after a command; no gang without a live member.
    fn check_gangs(&self) -> Result<(), String> {
        if !self.idx.touched_gangs.is_empty() || !self.idx.lost_gang.is_empty() {
            return Err("gangs left unsettled after a command".into());
        }
        let mut indexed = 0;
        for (bid, gang) in &self.fab.gangs {
            let mut nodes = Vec::new();
            for (rank, m) in gang.members.iter().enumerate() {
                if m.lost.is_some() {
                    return Err(format!("gang {bid} rank {rank} lost after a command"));
                }
                let Some(l) = m.lease else { continue };
                indexed += 1;
                if self.idx.lease_gang.get(&l) != Some(&(*bid, rank as u32)) {
                    return Err(format!("gang {bid} member {l} not indexed"));
                }
                let lease = self
                    .st
                    .leases
                    .get(&l)
                    .ok_or_else(|| format!("gang {bid} member {l} is not live"))?;
                let node = self
                    .st
                    .nodes
                    .get(&lease.node)
                    .ok_or_else(|| format!("gang {bid} member {l} on no node"))?;
                // A node's domain or region may change under a member (§13.1: the gang keeps
                // its members); its supplier cannot.
                let supplier = match &gang.group {
                    super::gang::GangGroup::Domain { supplier, .. }
                    | super::gang::GangGroup::Region { supplier, .. } => *supplier,
                };
                if lease.buyer != gang.buyer || node.supplier != supplier {
                    return Err(format!("gang {bid} member {l} outside its place"));
                }
                if lease.gpus != gang.spec.gpus_per_node {
                    return Err(format!("gang {bid} member {l} has {} GPUs", lease.gpus));
                }
                nodes.push(lease.node);
                if gang.whole_at_ms.is_some() && m.ready {
                    return Err(format!("gang {bid} member {l} waits after whole"));
                }
                if gang.whole_at_ms.is_none()
                    && self.st.config.delivery
                    && lease.state == crate::state::LeaseState::Active
                {
                    return Err(format!(
                        "gang {bid} member {l} runs before the gang is whole"
                    ));
                }
            }
            if nodes.is_empty() {
                return Err(format!("gang {bid} has no live member"));
            }
            nodes.sort_unstable();
            if nodes.windows(2).any(|w| w[0] == w[1]) {
                return Err(format!("gang {bid} has two members on one node"));
            }
        }
        if indexed != self.idx.lease_gang.len() {
            return Err("gang member index has stale entries".into());
        }
        Ok(())
    }

    /// Delivery invariants of one node (docs/market-rules.md §11): its wipes share no GPU (what
    /// lets `finish_wipe` clear a wipe's GPUs from the mask), its wiping mask is the OR of its
    /// wipes, wiping GPUs are held by no running lease, a provisioning lease has a deadline iff
    /// none of its GPUs is wiping, no deadline is due, and without delivery there is nothing of
    /// the kind.
    fn check_node_delivery(&self, node: &crate::state::Node) -> Result<(), String> {
        let now = self.st.now;
        let mut wiping = 0u32;
        for w in self.st.wipes.values().filter(|w| w.node == node.id) {
            if w.deadline_ms <= now {
                return Err(format!("wipe of lease {} is past its deadline", w.lease));
            }
            if self.st.leases.contains_key(&w.lease) {
                return Err(format!("lease {} is both live and wiping", w.lease));
            }
            if wiping & w.gpu_mask != 0 {
                return Err(format!("node {}: two wipes share a GPU", node.id));
            }
            wiping |= w.gpu_mask;
        }
        if wiping != node.wiping_mask {
            return Err(format!("node {} wiping mask is stale", node.id));
        }
        // Without delivery only an attestation (§12.1) or a failed verification (§12.2)
        // holds a node.
        let delivery_hold = node.held.is_some_and(|r| {
            !matches!(
                r,
                HoldReason::Attestation | HoldReason::DuplicateGpu | HoldReason::VerificationFailed
            )
        });
        if !self.st.config.delivery && (wiping != 0 || delivery_hold) {
            return Err(format!(
                "node {} wipes or is held without delivery",
                node.id
            ));
        }
        for lease in node.leases.iter().filter_map(|id| self.st.leases.get(id)) {
            let waits = lease.gpu_mask & wiping != 0;
            match lease.state {
                LeaseState::Active if waits => {
                    return Err(format!("running lease {} holds a wiping GPU", lease.id));
                }
                LeaseState::Active if self.st.config.delivery && lease.ready_ms.is_none() => {
                    return Err(format!("running lease {} was never ready", lease.id));
                }
                LeaseState::Provisioning => {
                    if !self.st.config.delivery {
                        return Err(format!("lease {} provisions without delivery", lease.id));
                    }
                    // A gang member reported ready waits for the rest without a deadline.
                    if self.gang_member_waiting(lease.id) {
                        if lease.provision_deadline_ms.is_some() || waits {
                            return Err(format!(
                                "gang member {} waits ready with a deadline or wipe",
                                lease.id
                            ));
                        }
                    } else if lease.provision_deadline_ms.is_some() == waits {
                        return Err(format!(
                            "provisioning lease {} has a deadline {:?} while waiting {waits}",
                            lease.id, lease.provision_deadline_ms
                        ));
                    }
                    if lease.provision_deadline_ms.is_some_and(|d| d <= now) {
                        return Err(format!(
                            "lease {} is provisioning past its deadline",
                            lease.id
                        ));
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}
