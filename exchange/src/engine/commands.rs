//! Validation and application of each command (docs/market-rules.md §2–§4, §9).

use super::Engine;
use super::matching::{Taker, Term};
use crate::command::{
    BidSpec, Command, LeaseKind, NodeSpec, NodeUpdate, OfferTerms, TimeInForce, TrustConstraints,
};
use crate::event::{BidCloseReason, EndReason, Event, NoticeReason, RejectReason};
use crate::ids::{AccountId, BidId, LeaseId, NodeId, OfferId, RegionId, derive_id};
use crate::limits::{
    MAX_BID_GPUS, MAX_CLIENT_ORDER_ID_LEN, MAX_CONSTRAINT_ENTRIES, MAX_LEASE_SECONDS,
    MAX_NODE_GPUS, MAX_NODE_NAME_LEN, MAX_NOTICE_SECONDS, MAX_PROVISION_SECONDS, MAX_REGION_LEN,
    MAX_REGIONS, MAX_SLA_AVAILABILITY_BP, MAX_SLA_MULTIPLE, MIN_SLA_AVAILABILITY_BP,
};
use crate::state::{Bid, LeaseState, Node, NodeStatus, Offer, ResolvedConstraints};
use std::cmp::Reverse;

/// A rejection: reason and the field at fault.
pub(crate) type Reject = (RejectReason, &'static str);

fn valid_node_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_NODE_NAME_LEN
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
}

/// True for a valid region name: 1..=32 of lowercase ASCII letters, digits and `-`.
pub(crate) fn valid_region(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_REGION_LEN
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn valid_client_order_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_CLIENT_ORDER_ID_LEN && s.bytes().all(|b| b.is_ascii_graphic())
}

/// What a heartbeat says of a node's GPUs: how many are healthy (`Heartbeat`, §2) or exactly
/// which (`GpuHealth`, §12.1).
#[derive(Clone, Copy, Debug)]
enum Health {
    Count(u32),
    Mask(u32),
}

fn all_gpus(gpus: u32) -> u32 {
    if gpus >= 32 {
        u32::MAX
    } else {
        (1u32 << gpus) - 1
    }
}

impl Engine {
    /// Validates and applies one command (time has already advanced).
    pub(crate) fn apply_command(
        &mut self,
        cmd: &Command,
        out: &mut Vec<Event>,
    ) -> Result<(), Reject> {
        match cmd {
            Command::RegisterNode { account, spec } => self.register_node(*account, spec, out),
            Command::UpdateNode {
                account,
                node,
                update,
            } => self.update_node(*account, *node, update, out),
            Command::Heartbeat {
                account,
                node,
                healthy_gpus,
            } => self.heartbeat(*account, *node, Health::Count(*healthy_gpus), out),
            Command::AttestNode {
                account,
                node,
                gpus,
            } => self.attest_node(*account, *node, gpus, out),
            Command::GpuHealth {
                account,
                node,
                healthy_mask,
            } => self.heartbeat(*account, *node, Health::Mask(*healthy_mask), out),
            Command::PostOffer {
                account,
                node,
                terms,
            } => self.post_offer(*account, *node, terms, None, out),
            Command::PostOfferSla {
                account,
                node,
                terms,
                sla,
            } => self.post_offer(*account, *node, terms, Some(*sla), out),
            Command::AmendOffer {
                account,
                offer,
                terms,
            } => self.amend_offer(*account, *offer, terms, out),
            Command::WithdrawOffer { account, offer } => self.withdraw_offer(*account, *offer, out),
            Command::PlaceBid { account, bid } => {
                self.place_bid(*account, bid, TrustConstraints::default(), out)
            }
            Command::PlaceTrustBid {
                account,
                bid,
                trust,
            } => self.place_bid(*account, bid, *trust, out),
            Command::ReportVerification {
                account,
                lease,
                figures,
            } => self.report_verification(*account, *lease, figures, out),
            Command::CancelBid { account, bid } => self.cancel_bid(*account, *bid, out),
            Command::ReleaseLease { account, lease } => {
                self.check_lease(Some(*account), *lease)?;
                self.end_lease(*lease, EndReason::Released, self.st.now, out);
                Ok(())
            }
            Command::EndLeaseInsufficientFunds { lease } => {
                self.check_lease(None, *lease)?;
                if let Some(ended) =
                    self.end_lease(*lease, EndReason::InsufficientFunds, self.st.now, out)
                {
                    // A buyer who cannot pay takes no new lease: close their resting bids.
                    let mut bids: Vec<BidId> = self
                        .st
                        .bids
                        .values()
                        .filter(|b| b.buyer == ended.buyer)
                        .map(|b| b.id)
                        .collect();
                    bids.sort_unstable();
                    for id in bids {
                        if let Some(b) = self.remove_resting_bid(id) {
                            out.push(Event::BidClosed {
                                bid: id,
                                filled: b.gpus - b.remaining,
                                unfilled: b.remaining,
                                reason: BidCloseReason::InsufficientFunds,
                                detail: crate::event::CloseDetail::default(),
                            });
                        }
                    }
                }
                Ok(())
            }
            Command::Tick | Command::Resume => Ok(()),
            Command::ReportReady { account, lease } => self.report_ready(*account, *lease, out),
            Command::ReportFailed { account, lease } => self.report_failed(*account, *lease, out),
            Command::ReportLaunchFailed { account, lease } => {
                self.report_launch_failed(*account, *lease, out)
            }
            Command::ReportLost { account, lease } => self.report_lost(*account, *lease, out),
            Command::ReportTornDown { account, lease } => {
                self.report_torn_down(*account, *lease, out)
            }
            Command::ResumeNode { account, node } => self.resume_node(*account, *node, out),
            Command::ReleaseBid { account, bid } => self.release_bid(*account, *bid, out),
        }
    }

    fn check_lease(&self, account: Option<AccountId>, lease: LeaseId) -> Result<(), Reject> {
        let l = self
            .st
            .leases
            .get(&lease)
            .ok_or((RejectReason::UnknownLease, "lease"))?;
        if account.is_some_and(|a| a != l.buyer) {
            return Err((RejectReason::NotOwner, "lease"));
        }
        Ok(())
    }

    pub(crate) fn owned_node(&self, account: AccountId, node: NodeId) -> Result<&Node, Reject> {
        let n = self
            .st
            .nodes
            .get(&node)
            .ok_or((RejectReason::UnknownNode, "node"))?;
        if n.supplier != account {
            return Err((RejectReason::NotOwner, "node"));
        }
        Ok(n)
    }

    fn owned_offer(&self, account: AccountId, offer: OfferId) -> Result<&Offer, Reject> {
        let o = self
            .st
            .offers
            .get(&offer)
            .ok_or((RejectReason::UnknownOffer, "offer"))?;
        if o.supplier != account {
            return Err((RejectReason::NotOwner, "offer"));
        }
        Ok(o)
    }

    /// Id of a region, adding it to the table when new; `None` when the table is full.
    fn intern_region(&mut self, name: &str) -> Option<RegionId> {
        if let Some(id) = self.region_id(name) {
            return Some(id);
        }
        if self.st.regions.len() >= MAX_REGIONS {
            return None;
        }
        self.st.regions.push(name.to_string());
        Some(RegionId((self.st.regions.len() - 1) as u16))
    }

    fn region_fits(&self, name: &str) -> bool {
        self.region_id(name).is_some() || self.st.regions.len() < MAX_REGIONS
    }

    fn register_node(
        &mut self,
        account: AccountId,
        spec: &NodeSpec,
        out: &mut Vec<Event>,
    ) -> Result<(), Reject> {
        if !valid_node_name(&spec.name) {
            return Err((RejectReason::InvalidName, "name"));
        }
        if self.st.catalog.get(spec.sku).is_none() {
            return Err((RejectReason::UnknownSku, "sku"));
        }
        if spec.gpus == 0 || spec.gpus > MAX_NODE_GPUS {
            return Err((RejectReason::InvalidGpus, "gpus"));
        }
        if !valid_region(&spec.region) {
            return Err((RejectReason::InvalidRegion, "region"));
        }
        if !spec.jurisdiction.is_valid() {
            return Err((RejectReason::InvalidJurisdiction, "jurisdiction"));
        }
        if let Some(f) = &spec.fabric {
            Self::check_fabric(f)?;
        }
        let key = (account, spec.name.clone());
        if self.st.node_names.contains_key(&key) {
            return Err((RejectReason::NodeExists, "name"));
        }
        let region = self
            .intern_region(&spec.region)
            .ok_or((RejectReason::InvalidRegion, "region"))?;
        let id = NodeId(self.next_id());
        let now = self.st.now;
        self.st.nodes.insert(
            id,
            Node {
                id,
                supplier: account,
                name: spec.name.clone(),
                sku: spec.sku,
                gpus: spec.gpus,
                region,
                jurisdiction: spec.jurisdiction,
                interconnect: spec.interconnect,
                nvlink: spec.nvlink,
                status: NodeStatus::Online,
                draining: false,
                last_heartbeat_ms: now,
                healthy_mask: all_gpus(spec.gpus),
                offer: None,
                leases: Vec::new(),
                claimed_mask: 0,
                wiping_mask: 0,
                held: None,
            },
        );
        self.st.node_names.insert(key, id);
        if let Some(f) = &spec.fabric {
            self.set_fabric(id, f);
        }
        self.index_place(id, true);
        self.idx.heartbeats.push(now, id);
        out.push(Event::NodeRegistered {
            node: id,
            supplier: account,
            sku: spec.sku,
            region,
            gpus: spec.gpus,
        });
        Ok(())
    }

    fn update_node(
        &mut self,
        account: AccountId,
        node_id: NodeId,
        u: &NodeUpdate,
        out: &mut Vec<Event>,
    ) -> Result<(), Reject> {
        self.owned_node(account, node_id)?;
        if let Some(r) = &u.region
            && !valid_region(r)
        {
            return Err((RejectReason::InvalidRegion, "region"));
        }
        if u.jurisdiction.is_some_and(|j| !j.is_valid()) {
            return Err((RejectReason::InvalidJurisdiction, "jurisdiction"));
        }
        if u.region.as_deref().is_some_and(|r| !self.region_fits(r)) {
            return Err((RejectReason::InvalidRegion, "region"));
        }
        if let Some(f) = &u.fabric {
            Self::check_fabric(f)?;
        }
        let region = match &u.region {
            Some(r) => self.intern_region(r),
            None => None,
        };
        self.index_place(node_id, false);
        let Some(node) = self.st.nodes.get_mut(&node_id) else {
            return Err((RejectReason::UnknownNode, "node"));
        };
        if let Some(r) = region {
            node.region = r;
        }
        if let Some(j) = u.jurisdiction {
            node.jurisdiction = j;
        }
        if let Some(i) = u.interconnect {
            node.interconnect = i;
        }
        if let Some(n) = u.nvlink {
            node.nvlink = n;
        }
        if let Some(d) = u.draining {
            node.draining = d;
        }
        if let Some(f) = &u.fabric {
            self.set_fabric(node_id, f);
        }
        self.index_place(node_id, true);
        let Some(node) = self.st.nodes.get(&node_id) else {
            return Err((RejectReason::UnknownNode, "node"));
        };
        out.push(Event::NodeUpdated {
            node: node_id,
            region: node.region,
            jurisdiction: node.jurisdiction,
            interconnect: node.interconnect,
            nvlink: node.nvlink,
            draining: node.draining,
        });
        self.relist(node_id);
        self.idx.mark_dirty(node_id);
        self.refile_node_victims(node_id);
        Ok(())
    }

    fn heartbeat(
        &mut self,
        account: AccountId,
        node_id: NodeId,
        health: Health,
        out: &mut Vec<Event>,
    ) -> Result<(), Reject> {
        let node = self.owned_node(account, node_id)?;
        let healthy_gpus = match health {
            Health::Count(n) if n > node.gpus => {
                return Err((RejectReason::InvalidGpus, "healthy_gpus"));
            }
            Health::Mask(m) if m & !all_gpus(node.gpus) != 0 => {
                return Err((RejectReason::InvalidGpus, "healthy_mask"));
            }
            Health::Count(n) => n,
            Health::Mask(m) => m.count_ones(),
        };
        let now = self.st.now;
        let Some(node) = self.st.nodes.get_mut(&node_id) else {
            return Err((RejectReason::UnknownNode, "node"));
        };
        let was_online = node.status == NodeStatus::Online;
        node.last_heartbeat_ms = now;
        let mut changed = false;
        if !was_online {
            // Back online: filed again (an online node's entry stays filed).
            self.idx.heartbeats.push(now, node_id);
            node.status = NodeStatus::Online;
            out.push(Event::NodeOnline { node: node_id });
            changed = true;
        }
        let current = node.healthy_mask.count_ones();
        let mut ended = Vec::new();
        if let Health::Mask(mask) = health {
            if mask != node.healthy_mask {
                changed = true;
                if healthy_gpus != current {
                    out.push(Event::NodeHealth {
                        node: node_id,
                        healthy_gpus,
                    });
                }
                ended = self.set_healthy_mask(node_id, mask, out);
            }
        } else if healthy_gpus != current {
            changed = true;
            out.push(Event::NodeHealth {
                node: node_id,
                healthy_gpus,
            });
            if healthy_gpus > current {
                let mut add = healthy_gpus - current;
                for bit in 0..node.gpus {
                    if add == 0 {
                        break;
                    }
                    if node.healthy_mask & (1 << bit) == 0 {
                        node.healthy_mask |= 1 << bit;
                        add -= 1;
                    }
                }
            } else {
                ended = self.shrink_node(node_id, healthy_gpus, out);
            }
        }
        if changed {
            self.relist(node_id);
        }
        ended.sort_by_key(|l| l.id);
        for lease in &ended {
            self.failover(lease, node_id, out);
        }
        Ok(())
    }

    /// Exactly `mask` healthy (§12.1): ends, in lease id order, every live lease holding a GPU
    /// outside it (`node_failure`), then sets the mask. Returns the ended leases.
    fn set_healthy_mask(
        &mut self,
        node_id: NodeId,
        mask: u32,
        out: &mut Vec<Event>,
    ) -> Vec<crate::state::Lease> {
        let ended = self.end_leases_on_gpus(node_id, !mask, out);
        if let Some(node) = self.st.nodes.get_mut(&node_id) {
            node.healthy_mask = mask;
        }
        ended
    }

    /// Ends `node_failure`, in lease id order, every live lease on `node_id` holding a GPU of
    /// `gpus` (a bit per GPU index): a GPU failed or another card now sits in its slot
    /// (§12.1). Returns the ended leases, for their failover.
    pub(crate) fn end_leases_on_gpus(
        &mut self,
        node_id: NodeId,
        gpus: u32,
        out: &mut Vec<Event>,
    ) -> Vec<crate::state::Lease> {
        let now = self.st.now;
        let mut hit: Vec<LeaseId> = self
            .st
            .nodes
            .get(&node_id)
            .map(|n| {
                n.leases
                    .iter()
                    .filter(|id| {
                        self.st
                            .leases
                            .get(id)
                            .is_some_and(|l| l.gpu_mask & gpus != 0)
                    })
                    .copied()
                    .collect()
            })
            .unwrap_or_default();
        hit.sort_unstable();
        hit.into_iter()
            .filter_map(|id| self.end_lease(id, EndReason::NodeFailure, now, out))
            .collect()
    }

    /// Fewer healthy GPUs: end leases until the claimed GPUs fit, then pick the healthy mask.
    fn shrink_node(
        &mut self,
        node_id: NodeId,
        healthy_gpus: u32,
        out: &mut Vec<Event>,
    ) -> Vec<crate::state::Lease> {
        let now = self.st.now;
        let mut ended = Vec::new();
        while let Some(node) = self.st.nodes.get(&node_id) {
            if node.claimed_mask.count_ones() <= healthy_gpus {
                break;
            }
            let victim = node
                .leases
                .iter()
                .filter_map(|id| self.st.leases.get(id))
                .min_by_key(|l| {
                    let group = match (l.state, l.kind) {
                        (LeaseState::Pending | LeaseState::Provisioning, _) => 0,
                        (LeaseState::Active, LeaseKind::Preemptible) => 1,
                        (LeaseState::Active, LeaseKind::Spot) => 2,
                    };
                    (group, Reverse(l.start_ms), Reverse(l.id))
                })
                .map(|l| l.id);
            let Some(victim) = victim else {
                break;
            };
            if let Some(l) = self.end_lease(victim, EndReason::NodeFailure, now, out) {
                ended.push(l);
            }
        }
        if let Some(node) = self.st.nodes.get_mut(&node_id) {
            let claimed = node.claimed_mask;
            let spare = super::index::lowest_bits(
                node.healthy_mask & !claimed,
                healthy_gpus.saturating_sub(claimed.count_ones()),
            );
            node.healthy_mask = claimed | spare;
        }
        ended
    }

    fn validate_terms(&self, node: &Node, t: &OfferTerms) -> Result<(), Reject> {
        if t.gpus == 0 || t.gpus > node.healthy_gpus() {
            return Err((RejectReason::InvalidGpus, "gpus"));
        }
        if t.preemptible_price.is_some_and(|p| p >= t.spot_price) {
            return Err((RejectReason::InvalidPrice, "preemptible_price"));
        }
        if t.max_lease_s == 0 || t.max_lease_s > MAX_LEASE_SECONDS {
            return Err((RejectReason::InvalidDuration, "max_lease_s"));
        }
        if t.min_lease_s > t.max_lease_s {
            return Err((RejectReason::InvalidDuration, "min_lease_s"));
        }
        if t.notice_s > MAX_NOTICE_SECONDS {
            return Err((RejectReason::InvalidNotice, "notice_s"));
        }
        if t.provision_s == 0 || t.provision_s > MAX_PROVISION_SECONDS {
            return Err((RejectReason::InvalidProvision, "provision_s"));
        }
        if t.available_until_ms <= self.st.now {
            return Err((RejectReason::InvalidUntil, "available_until_ms"));
        }
        Ok(())
    }

    fn post_offer(
        &mut self,
        account: AccountId,
        node_id: NodeId,
        terms: &OfferTerms,
        sla: Option<crate::command::SlaPromise>,
        out: &mut Vec<Event>,
    ) -> Result<(), Reject> {
        let node = self.owned_node(account, node_id)?;
        if node.status != NodeStatus::Online {
            return Err((RejectReason::NodeOffline, "node"));
        }
        if node.draining {
            return Err((RejectReason::NodeDraining, "node"));
        }
        if node.offer.is_some() {
            return Err((RejectReason::OfferExists, "node"));
        }
        self.validate_terms(node, terms)?;
        if sla.is_some_and(|p| {
            !(MIN_SLA_AVAILABILITY_BP..=MAX_SLA_AVAILABILITY_BP).contains(&p.availability_bp)
                || !(1..=MAX_SLA_MULTIPLE).contains(&p.credit_multiple)
        }) {
            return Err((RejectReason::InvalidSla, "sla"));
        }
        let id = OfferId(self.next_id());
        self.st.offers.insert(
            id,
            Offer {
                id,
                node: node_id,
                supplier: account,
                terms: *terms,
                priority: self.seq,
            },
        );
        if let Some(node) = self.st.nodes.get_mut(&node_id) {
            node.offer = Some(id);
        }
        self.idx.offer_expiry.push((terms.available_until_ms, id));
        if let Some(p) = sla {
            self.ext.offer_sla.insert(id, p);
        }
        out.push(Event::OfferPosted {
            offer: id,
            node: node_id,
            terms: *terms,
        });
        self.refile_node_victims(node_id);
        self.verify_on_listing(node_id, out);
        self.relist(node_id);
        Ok(())
    }

    /// Preemptible leases on a node without notice, in withdrawal order (price, newest first).
    fn withdrawal_candidates(&self, node_id: NodeId) -> Vec<LeaseId> {
        let Some(node) = self.st.nodes.get(&node_id) else {
            return Vec::new();
        };
        let mut c: Vec<(crate::price::Price, Reverse<LeaseId>)> = node
            .leases
            .iter()
            .filter_map(|id| self.st.leases.get(id))
            .filter(|l| l.kind == LeaseKind::Preemptible && l.notice.is_none())
            .map(|l| (l.price, Reverse(l.id)))
            .collect();
        c.sort_unstable();
        c.into_iter().map(|(_, Reverse(id))| id).collect()
    }

    fn amend_offer(
        &mut self,
        account: AccountId,
        offer_id: OfferId,
        terms: &OfferTerms,
        out: &mut Vec<Event>,
    ) -> Result<(), Reject> {
        let offer = self.owned_offer(account, offer_id)?;
        let node_id = offer.node;
        let node = self
            .st
            .nodes
            .get(&node_id)
            .ok_or((RejectReason::UnknownNode, "node"))?;
        self.validate_terms(node, terms)?;
        let seq = self.seq;
        let Some(offer) = self.st.offers.get_mut(&offer_id) else {
            return Err((RejectReason::UnknownOffer, "offer"));
        };
        let old = offer.terms;
        if old.spot_price != terms.spot_price
            || old.preemptible_price != terms.preemptible_price
            || terms.gpus > old.gpus
        {
            offer.priority = seq;
        }
        offer.terms = *terms;
        if old.available_until_ms != terms.available_until_ms {
            self.idx.offer_expiry.cancelled(1);
            self.idx
                .offer_expiry
                .push((terms.available_until_ms, offer_id));
        }
        out.push(Event::OfferAmended {
            offer: offer_id,
            terms: *terms,
        });
        let deadline = self.st.now.saturating_add(i64::from(terms.notice_s) * 1000);
        while let Some(node) = self.st.nodes.get(&node_id) {
            let unnoticed = node
                .leases
                .iter()
                .filter_map(|id| self.st.leases.get(id))
                .filter(|l| l.notice.is_none())
                .fold(0u32, |m, l| m | l.gpu_mask);
            if unnoticed.count_ones() <= terms.gpus {
                break;
            }
            let Some(&victim) = self.withdrawal_candidates(node_id).first() else {
                break;
            };
            self.give_notice(victim, deadline, NoticeReason::OfferWithdrawn, None, out);
        }
        self.refile_node_victims(node_id);
        self.relist(node_id);
        self.idx.mark_dirty(node_id);
        Ok(())
    }

    fn withdraw_offer(
        &mut self,
        account: AccountId,
        offer_id: OfferId,
        out: &mut Vec<Event>,
    ) -> Result<(), Reject> {
        self.owned_offer(account, offer_id)?;
        let Some(offer) = self.st.offers.remove(&offer_id) else {
            return Err((RejectReason::UnknownOffer, "offer"));
        };
        self.idx.offer_expiry.cancelled(1);
        self.ext.offer_sla.remove(&offer_id);
        if let Some(node) = self.st.nodes.get_mut(&offer.node) {
            node.offer = None;
        }
        out.push(Event::OfferWithdrawn { offer: offer_id });
        self.refile_node_victims(offer.node);
        self.relist(offer.node);
        let deadline = self
            .st
            .now
            .saturating_add(i64::from(offer.terms.notice_s) * 1000);
        for victim in self.withdrawal_candidates(offer.node) {
            self.give_notice(victim, deadline, NoticeReason::OfferWithdrawn, None, out);
        }
        Ok(())
    }

    fn resolve_constraints(&self, bid: &BidSpec) -> Result<ResolvedConstraints, Reject> {
        let c = &bid.constraints;
        if c.regions.len() > MAX_CONSTRAINT_ENTRIES
            || c.jurisdictions.len() > MAX_CONSTRAINT_ENTRIES
        {
            return Err((RejectReason::InvalidConstraints, "constraints"));
        }
        let mut regions = Vec::with_capacity(c.regions.len());
        for r in &c.regions {
            regions.push(
                self.region_id(r)
                    .ok_or((RejectReason::UnknownRegion, "constraints.regions"))?,
            );
        }
        if c.jurisdictions.iter().any(|j| !j.is_valid()) {
            return Err((
                RejectReason::InvalidJurisdiction,
                "constraints.jurisdictions",
            ));
        }
        regions.sort_unstable();
        regions.dedup();
        let mut jurisdictions = c.jurisdictions.clone();
        jurisdictions.sort_unstable();
        jurisdictions.dedup();
        Ok(ResolvedConstraints {
            regions,
            jurisdictions,
            min_interconnect: c.min_interconnect,
            nvlink: c.nvlink,
        })
    }

    fn place_bid(
        &mut self,
        account: AccountId,
        spec: &BidSpec,
        trust: TrustConstraints,
        out: &mut Vec<Event>,
    ) -> Result<(), Reject> {
        if !valid_client_order_id(&spec.client_order_id) {
            return Err((RejectReason::InvalidClientOrderId, "client_order_id"));
        }
        if self.st.catalog.get(spec.sku).is_none() {
            return Err((RejectReason::UnknownSku, "sku"));
        }
        if spec.gpus == 0
            || spec.gpus > MAX_BID_GPUS
            || (spec.placement == crate::command::Placement::SingleNode
                && spec.gpus > MAX_NODE_GPUS)
        {
            return Err((RejectReason::InvalidGpus, "gpus"));
        }
        if let crate::command::Placement::Gang(g) = spec.placement
            && (g.nodes == 0
                || g.gpus_per_node == 0
                || g.gpus_per_node > MAX_NODE_GPUS
                || u64::from(g.nodes) * u64::from(g.gpus_per_node) != u64::from(spec.gpus)
                || spec.min_gpus.is_some())
        {
            return Err((RejectReason::InvalidGang, "placement"));
        }
        if spec.min_gpus.is_some_and(|m| {
            m == 0
                || m > spec.gpus
                || spec.placement != crate::command::Placement::Spread
                || spec.tif != TimeInForce::Ioc
        }) {
            return Err((RejectReason::InvalidGpus, "min_gpus"));
        }
        if spec
            .duration_s
            .is_some_and(|d| d == 0 || d > MAX_LEASE_SECONDS)
        {
            return Err((RejectReason::InvalidDuration, "duration_s"));
        }
        let expires_at_ms = match spec.tif {
            TimeInForce::Gtc { expires_at_ms } => {
                if expires_at_ms.is_some_and(|e| e <= self.st.now) {
                    return Err((RejectReason::InvalidExpiry, "expires_at_ms"));
                }
                expires_at_ms
            }
            TimeInForce::Ioc => None,
        };
        let constraints = self.resolve_constraints(spec)?;
        if trust.min_reliability_bp.is_some_and(|m| m > 10_000) {
            return Err((
                RejectReason::InvalidConstraints,
                "constraints.min_reliability",
            ));
        }
        if trust.min_sla.is_some_and(|f| {
            f.availability_bp > MAX_SLA_AVAILABILITY_BP
                || f.credit_multiple > MAX_SLA_MULTIPLE
                || (f.availability_bp == 0 && f.credit_multiple == 0)
        }) {
            return Err((RejectReason::InvalidConstraints, "constraints.min_sla"));
        }
        let bid_id = BidId(derive_id(self.seq, self.next_k));
        let key: super::ClientOrderKey = (account, spec.client_order_id.as_str().into());
        match self.st.client_orders.entry(key.clone()) {
            std::collections::hash_map::Entry::Occupied(_) => {
                return Err((RejectReason::DuplicateClientOrderId, "client_order_id"));
            }
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert((bid_id, self.st.now));
                self.idx.client_order_expiry.push_back((self.st.now, key));
            }
        }
        self.next_k += 1;
        out.push(Event::BidAccepted {
            bid: bid_id,
            buyer: account,
        });
        let mut t = Taker {
            bid: bid_id,
            buyer: account,
            sku: spec.sku,
            kind: spec.kind,
            limit: spec.limit,
            placement: spec.placement,
            constraints,
            term: spec.duration_s.map_or(Term::Open, Term::Duration),
            exclude: None,
            resting_priority: None,
            migrated_from: None,
            remaining: spec.gpus,
            trust,
            gang: super::matching::gang_req(spec.placement),
        };
        // §13.5: a spread IOC with `min_gpus` fills nothing unless that many can fill now.
        if let Some(m) = spec.min_gpus {
            let fillable = self.fillable_spread(&t);
            if fillable < m {
                out.push(Event::BidClosed {
                    bid: bid_id,
                    filled: 0,
                    unfilled: spec.gpus,
                    reason: BidCloseReason::MinGpus,
                    detail: crate::event::CloseDetail {
                        fillable: Some(fillable),
                        ..crate::event::CloseDetail::default()
                    },
                });
                return Ok(());
            }
        }
        // §13.2: a gang fills whole from free capacity, or not at all.
        let mut gang_short = None;
        let mut too_large = None;
        if let crate::command::Placement::Gang(g) = spec.placement {
            // No place has N nodes of the SKU at all: said without a walk.
            let largest = self.largest_place(spec.sku, g.scope);
            if g.nodes > largest && largest > 0 {
                too_large = Some(largest);
            } else {
                gang_short = self.fill_gang(&mut t, &g, out).err();
            }
        } else {
            self.phase1(&mut t, out);
            if t.remaining > 0 {
                self.phase2(&mut t, out);
            }
        }
        if t.remaining == 0 {
            out.push(Event::BidClosed {
                bid: bid_id,
                filled: spec.gpus,
                unfilled: 0,
                reason: BidCloseReason::Filled,
                detail: crate::event::CloseDetail::default(),
            });
        } else if spec.tif == TimeInForce::Ioc {
            let (reason, detail) = match (too_large, gang_short) {
                (Some(k), _) => (
                    BidCloseReason::GangTooLarge,
                    crate::event::CloseDetail {
                        fillable: Some(k),
                        ..crate::event::CloseDetail::default()
                    },
                ),
                (None, Some(n)) if n > 0 => (
                    BidCloseReason::GangIncomplete,
                    crate::event::CloseDetail {
                        fillable: Some(n),
                        ..crate::event::CloseDetail::default()
                    },
                ),
                _ => self.unfilled_reason(&t),
            };
            out.push(Event::BidClosed {
                bid: bid_id,
                filled: spec.gpus - t.remaining,
                unfilled: t.remaining,
                reason,
                detail,
            });
        } else {
            let bid = Bid {
                id: bid_id,
                buyer: account,
                sku: spec.sku,
                gpus: spec.gpus,
                remaining: t.remaining,
                limit: spec.limit,
                kind: spec.kind,
                placement: spec.placement,
                constraints: t.constraints,
                duration_s: spec.duration_s,
                expires_at_ms,
                priority: self.seq,
            };
            let parked = self.idx.parks(Some(&trust));
            self.idx.add_resting_bid(&bid, parked);
            self.st.bids.insert(bid_id, bid);
            if !trust.is_none() {
                self.ext.bid_trust.insert(bid_id, trust);
            }
            out.push(Event::BidRested {
                bid: bid_id,
                remaining: t.remaining,
            });
        }
        Ok(())
    }

    fn cancel_bid(
        &mut self,
        account: AccountId,
        bid_id: BidId,
        out: &mut Vec<Event>,
    ) -> Result<(), Reject> {
        let bid = self
            .st
            .bids
            .get(&bid_id)
            .ok_or((RejectReason::UnknownBid, "bid"))?;
        if bid.buyer != account {
            return Err((RejectReason::NotOwner, "bid"));
        }
        if let Some(bid) = self.remove_resting_bid(bid_id) {
            out.push(Event::BidClosed {
                bid: bid_id,
                filled: bid.gpus - bid.remaining,
                unfilled: bid.remaining,
                reason: BidCloseReason::Canceled,
                detail: crate::event::CloseDetail::default(),
            });
        }
        Ok(())
    }
}
