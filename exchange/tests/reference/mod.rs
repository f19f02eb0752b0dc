//! The naive reference model of `docs/market-rules.md`.
//!
//! Written from the specification alone, independently of `exchange/src/engine/`, and naive on
//! purpose: plain `Vec`s, linear scans, sort-then-pick, and the inventory recomputed from scratch
//! before and after every command and diffed to make the deltas. It shares nothing with the
//! engine beyond the crate's public types. `tests/model_check.rs` feeds the same command streams
//! to the engine and to this model and compares them event by event.
//!
//! Section numbers in comments (§n) refer to `docs/market-rules.md`.

mod gang;
pub mod reliability;
mod verify;

use exchange::command::TrustConstraints;
use exchange::event::AttestationMismatch;
use exchange::state::{
    Bid, Lease, LeaseOrigin, LeaseState, Node, NodeAttestation, NodeStatus, NodeVerify, Notice,
    Offer, ResolvedConstraints, Wipe,
};
use exchange::verify::VerifyConfig;
use exchange::{
    AccountId, BidCloseReason, BidId, Catalog, CloseDetail, Command, Constraints, EndReason,
    EngineConfig, Event, Exclusion, HoldReason, InventoryDelta, LeaseId, LeaseKind, Level,
    LevelKey, Maker, Meta, NodeId, NoticeReason, OfferId, OfferTerms, Output, Placement, Price,
    RegionId, RejectReason, SkuId, TimeInForce,
};

/// Longest lease term, seconds (366 days), as the spec states it.
const MAX_LEASE_S: u64 = 366 * 24 * 3600;
/// Longest notice, seconds.
const MAX_NOTICE_S: u32 = 900;
/// Most regions in the region table.
const MAX_REGIONS: usize = 1024;
/// Longest provisioning deadline an offer may give, seconds (§11.1).
const MAX_PROVISION_S: u32 = 1800;
/// Provisioning deadline when the lease's offer is gone, seconds (§11.1, §11.7).
const DEFAULT_PROVISION_S: u32 = 180;

/// Kinds of items on the lease timeline (§7 step 3, §11.10), in the order items at the same
/// time are processed.
const ITEM_END: u8 = 0;
const ITEM_PROVISION_TIMEOUT: u8 = 1;
const ITEM_TEARDOWN_OVERDUE: u8 = 2;
const ITEM_START: u8 = 3;

type Reject = (RejectReason, Option<&'static str>);

/// The term a taker asks for (§4 eligibility, lease end).
#[derive(Clone, Copy, Debug)]
enum Term {
    /// Fixed duration in seconds, counted from the lease start.
    Duration(u64),
    /// Open-ended.
    Open,
    /// A failover of a lease with a fixed end.
    FixedEnd(i64),
}

/// Whoever takes capacity: an incoming bid, a resting bid in uncross, or a failover.
#[derive(Clone, Debug)]
struct Taker {
    bid: BidId,
    buyer: AccountId,
    sku: SkuId,
    kind: LeaseKind,
    placement: Placement,
    limit: Price,
    constraints: ResolvedConstraints,
    term: Term,
    exclude: Option<NodeId>,
    /// The bid's priority when it rests (uncross maker pricing); `None` for a taker.
    resting_priority: Option<u64>,
    /// The failed lease when this is a failover.
    migrate_from: Option<LeaseId>,
    /// What it requires of a node's trust record (§12).
    trust: TrustConstraints,
    /// A gang, or a gang member's replacement: what it requires of a node's fabric (§13).
    gang: Option<gang::GangReq>,
}

/// The naive reference model of the market of `docs/market-rules.md`.
///
/// Holds the same records as the engine (the public types of `exchange::state`, wipes
/// included) in plain vectors kept in id order, and recomputes everything derived (claimed and
/// wiping GPUs, free GPUs, listing, inventory, the lease timeline) from them whenever needed.
pub struct Model {
    config: EngineConfig,
    catalog: Catalog,
    /// Each node's latest attestation (§12.1).
    attestations: std::collections::BTreeMap<NodeId, NodeAttestation>,
    /// Verification settings (§12.2); `None`: off.
    verify: Option<VerifyConfig>,
    /// Each node's verification record (§12.2), once a run was due on it.
    verifications: std::collections::BTreeMap<NodeId, NodeVerify>,
    /// Trust requirements of resting bids that have some (§12).
    bid_trust: std::collections::BTreeMap<BidId, TrustConstraints>,
    /// Trust requirements of every lease (live or ended) filled for such a taker: a failover
    /// keeps them (§12).
    lease_trust: std::collections::BTreeMap<LeaseId, TrustConstraints>,
    /// The SLA promise of each live offer posted with one (§12.4).
    offer_sla: std::collections::BTreeMap<OfferId, exchange::SlaPromise>,
    last_seq: u64,
    now: i64,
    /// Sequence number of the command being applied.
    seq: u64,
    /// Ids assigned so far while applying this command.
    k: u64,
    regions: Vec<String>,
    nodes: Vec<Node>,
    offers: Vec<Offer>,
    bids: Vec<Bid>,
    leases: Vec<Lease>,
    /// Ended leases whose GPUs are wiping (§11.4), in lease id order.
    wipes: Vec<Wipe>,
    /// Client order ids of accepted bids, with the time they were accepted.
    used_client_order_ids: Vec<(AccountId, String, i64, BidId)>,
    market_seq: Vec<u64>,
    events: Vec<Event>,
    /// §12.3: every event this model emitted for an applied command, with the command's time,
    /// in order: what the naive reliability score is recomputed from.
    history: Vec<(i64, Event)>,
    /// §12.3: the leases a `ReportLaunchFailed` ended (they lose the supplier nothing).
    launch_failed: Vec<LeaseId>,
    /// §12.3: the UTC day whose midnight `day_scores` were taken at (0: none yet).
    score_day: i64,
    /// §12.3: each node's reliability (bp) at midnight of `score_day`, for nodes not `new`:
    /// what a bid's `min_reliability` compares against all that day.
    day_scores: std::collections::BTreeMap<NodeId, u32>,
    /// §13.1: each node's fabric record, for nodes that stated one.
    fabric: std::collections::BTreeMap<NodeId, exchange::command::NodeFabric>,
    /// §13.2: gangs with a live member, by bid id.
    gangs: std::collections::BTreeMap<BidId, gang::Gang>,
}

fn lowest_bits(mask: u32, count: u32) -> u32 {
    let mut out = 0;
    let mut n = 0;
    for i in 0..32 {
        if n == count {
            break;
        }
        if mask & (1 << i) != 0 {
            out |= 1 << i;
            n += 1;
        }
    }
    out
}

fn valid_node_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

fn valid_region(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 32
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn valid_client_order_id(s: &str) -> bool {
    // visible ASCII, 0x21..=0x7e
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| (0x21..=0x7e).contains(&b))
}

fn valid_jurisdiction(j: exchange::Jurisdiction) -> bool {
    j.0.iter().all(|b| b.is_ascii_uppercase())
}

/// True when the node satisfies the constraints (§4 eligibility).
fn admits(c: &ResolvedConstraints, n: &Node) -> bool {
    (c.regions.is_empty() || c.regions.contains(&n.region))
        && (c.jurisdictions.is_empty() || c.jurisdictions.contains(&n.jurisdiction))
        && c.min_interconnect.is_none_or(|m| n.interconnect >= m)
        && (!c.nvlink || n.nvlink)
}

fn term_fits(term: Term, t: &OfferTerms, s: i64) -> bool {
    let until = t.available_until_ms;
    let max_ms = (t.max_lease_s as i64) * 1000;
    match term {
        Term::Duration(d) => {
            t.min_lease_s <= d && d <= t.max_lease_s && s + (d as i64) * 1000 <= until
        }
        Term::Open => s < until,
        Term::FixedEnd(e) => e - s <= max_ms && e <= until && e > s,
    }
}

fn lease_end(term: Term, t: &OfferTerms, s: i64) -> i64 {
    match term {
        Term::Duration(d) => s + (d as i64) * 1000,
        Term::Open => (s + (t.max_lease_s as i64) * 1000).min(t.available_until_ms),
        Term::FixedEnd(e) => e,
    }
}

fn kind_price(o: &Offer, kind: LeaseKind) -> Option<Price> {
    match kind {
        LeaseKind::Spot => Some(o.terms.spot_price),
        LeaseKind::Preemptible => o.terms.preemptible_price,
    }
}

fn effective_end(l: &Lease) -> i64 {
    match l.notice {
        Some(n) if n.deadline_ms < l.end_ms => n.deadline_ms,
        _ => l.end_ms,
    }
}

fn notice_end_reason(r: NoticeReason) -> EndReason {
    match r {
        NoticeReason::Preempted => EndReason::Preempted,
        NoticeReason::OfferWithdrawn => EndReason::OfferWithdrawn,
    }
}

impl Model {
    /// An empty market with the given configuration and catalog.
    pub fn new(config: EngineConfig, catalog: Catalog) -> Model {
        let skus = catalog.len();
        Model {
            config,
            catalog,
            attestations: Default::default(),
            verify: None,
            verifications: Default::default(),
            bid_trust: Default::default(),
            offer_sla: Default::default(),
            lease_trust: Default::default(),
            last_seq: 0,
            now: 0,
            seq: 0,
            k: 0,
            regions: Vec::new(),
            nodes: Vec::new(),
            offers: Vec::new(),
            bids: Vec::new(),
            leases: Vec::new(),
            wipes: Vec::new(),
            used_client_order_ids: Vec::new(),
            market_seq: vec![0; skus],
            events: Vec::new(),
            history: Vec::new(),
            launch_failed: Vec::new(),
            score_day: 0,
            day_scores: Default::default(),
            fabric: Default::default(),
            gangs: Default::default(),
        }
    }

    // ----- accessors -------------------------------------------------------------------------

    /// Registered nodes in id order (`leases` in id order).
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Live offers in id order.
    pub fn offers(&self) -> &[Offer] {
        &self.offers
    }

    /// Resting bids in id order.
    pub fn bids(&self) -> &[Bid] {
        &self.bids
    }

    /// Live leases (pending, provisioning and running) in id order.
    pub fn leases(&self) -> &[Lease] {
        &self.leases
    }

    /// Wipes under way (§11.4), in lease id order.
    pub fn wipes(&self) -> &[Wipe] {
        &self.wipes
    }

    /// Time of the last applied command.
    pub fn now_ms(&self) -> i64 {
        self.now
    }

    /// Sequence number of the last applied command.
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Deltas emitted so far for a SKU (its last `market_seq`).
    pub fn market_seq(&self, sku: SkuId) -> u64 {
        self.market_seq[usize::from(sku.0)]
    }

    /// The id of a region name, if known.
    pub fn region_id(&self, name: &str) -> Option<RegionId> {
        self.regions
            .iter()
            .position(|r| r == name)
            .map(|i| RegionId(i as u16))
    }

    /// The name of a region id, if known.
    pub fn region_name(&self, id: RegionId) -> Option<&str> {
        self.regions.get(usize::from(id.0)).map(String::as_str)
    }

    /// The inventory levels (§8), recomputed from the raw state, sorted by key.
    pub fn inventory(&self) -> Vec<(LevelKey, Level)> {
        let mut levels: Vec<(LevelKey, Level)> = Vec::new();
        for n in &self.nodes {
            let free = self.listed_free(n);
            if free == 0 {
                continue;
            }
            let Some(o) = self.offer_of(n) else { continue };
            let mut keys = vec![LevelKey {
                sku: n.sku,
                region: n.region,
                kind: LeaseKind::Spot,
                price: o.terms.spot_price,
            }];
            if let Some(p) = o.terms.preemptible_price {
                keys.push(LevelKey {
                    sku: n.sku,
                    region: n.region,
                    kind: LeaseKind::Preemptible,
                    price: p,
                });
            }
            for key in keys {
                match levels.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, l)) => {
                        l.free_gpus += free;
                        l.max_single_node = l.max_single_node.max(free);
                    }
                    None => levels.push((
                        key,
                        Level {
                            free_gpus: free,
                            max_single_node: free,
                        },
                    )),
                }
            }
        }
        levels.sort_by_key(|(k, _)| *k);
        levels
    }

    // ----- derived state ---------------------------------------------------------------------

    /// The node `id` of supplier `account`, or the refusal §9 gives (`unknown_node`,
    /// `not_owner` [node]).
    fn owned_node(
        &self,
        account: AccountId,
        id: NodeId,
    ) -> Result<&Node, (RejectReason, Option<&'static str>)> {
        let n = self
            .nodes
            .iter()
            .find(|n| n.id == id)
            .ok_or((RejectReason::UnknownNode, Some("node")))?;
        if n.supplier != account {
            return Err((RejectReason::NotOwner, Some("node")));
        }
        Ok(n)
    }

    fn node(&self, id: NodeId) -> &Node {
        self.nodes.iter().find(|n| n.id == id).expect("node exists")
    }

    fn node_mut(&mut self, id: NodeId) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|n| n.id == id)
            .expect("node exists")
    }

    fn offer(&self, id: OfferId) -> &Offer {
        self.offers
            .iter()
            .find(|o| o.id == id)
            .expect("offer exists")
    }

    fn offer_of(&self, n: &Node) -> Option<&Offer> {
        n.offer.map(|id| self.offer(id))
    }

    fn lease(&self, id: LeaseId) -> &Lease {
        self.leases
            .iter()
            .find(|l| l.id == id)
            .expect("lease exists")
    }

    fn lease_mut(&mut self, id: LeaseId) -> &mut Lease {
        self.leases
            .iter_mut()
            .find(|l| l.id == id)
            .expect("lease exists")
    }

    fn lease_live(&self, id: LeaseId) -> bool {
        self.leases.iter().any(|l| l.id == id)
    }

    /// OR of the masks of all live leases on the node (§2).
    fn claimed(&self, node: NodeId) -> u32 {
        self.leases
            .iter()
            .filter(|l| l.node == node)
            .fold(0, |m, l| m | l.gpu_mask)
    }

    /// OR of the masks of the node's wipes (§11.4).
    fn wiping(&self, node: NodeId) -> u32 {
        self.wipes
            .iter()
            .filter(|w| w.node == node)
            .fold(0, |m, w| m | w.gpu_mask)
    }

    /// GPUs no new lease may take: claimed by a live lease, or wiping (§2, §11.4: wiping GPUs
    /// stay claimed and are never free).
    fn occupied(&self, node: NodeId) -> u32 {
        self.claimed(node) | self.wiping(node)
    }

    /// The node's free GPUs for its offer (§2, §11.4), 0 without an offer.
    fn free(&self, n: &Node) -> u32 {
        let Some(o) = self.offer_of(n) else { return 0 };
        let c = self.occupied(n.id);
        let by_offer = o.terms.gpus.saturating_sub(c.count_ones());
        let by_health = (n.healthy_mask & !c).count_ones();
        by_offer.min(by_health)
    }

    /// `free` if the node is listed, else 0 (§2; a held node is not listed, §11.8; nor one
    /// with a verification run under way, §12.2).
    fn listed_free(&self, n: &Node) -> u32 {
        if n.status == NodeStatus::Online
            && !n.draining
            && n.held.is_none()
            && !self.verifying(n.id)
            && n.offer.is_some()
        {
            self.free(n)
        } else {
            0
        }
    }

    /// The lowest-indexed `count` free GPUs of the node.
    fn free_mask(&self, n: &Node, count: u32) -> u32 {
        lowest_bits(n.healthy_mask & !self.occupied(n.id), count)
    }

    fn eligible(&self, t: &Taker, o: &Offer, n: &Node, s: i64) -> bool {
        n.status == NodeStatus::Online
            && !n.draining
            // §11.8: a held node fills nothing
            && n.held.is_none()
            // §12.2: nor one under verification
            && !self.verifying(n.id)
            && Some(n.id) != t.exclude
            && n.sku == t.sku
            && o.supplier != t.buyer
            && admits(&t.constraints, n)
            && self.trust_admits(&t.trust, o.id, n.id)
            && term_fits(t.term, &o.terms, s)
            // §13.2: a gang's fabric requirement
            && self.gang_admits(t, n)
    }

    // ----- ids and events ----------------------------------------------------------------------

    fn new_id(&mut self) -> u64 {
        let id = (self.seq << 20) | self.k;
        self.k += 1;
        id
    }

    fn emit(&mut self, e: Event) {
        self.events.push(e);
    }

    fn remove_lease(&mut self, id: LeaseId) -> Lease {
        let i = self
            .leases
            .iter()
            .position(|l| l.id == id)
            .expect("lease exists");
        let l = self.leases.remove(i);
        let node = self.node_mut(l.node);
        node.leases.retain(|x| *x != id);
        l
    }

    /// Ends a live lease: `LeaseEnded`, then, with delivery, its wipe if its provisioning had
    /// begun (§11.4).
    fn end_lease(&mut self, id: LeaseId, reason: EndReason, at: i64) -> Lease {
        // §13.3: a gang member reported ready began provisioning (it met its deadline)
        let waiting_member = self.gang_member_waiting(id);
        let l = self.remove_lease(id);
        // §13.3: a gang member's rank is vacant (lost, for a loss)
        self.gang_member_ended(id, reason);
        self.emit(Event::LeaseEnded {
            lease: id,
            buyer: l.buyer,
            reason,
            at_ms: at,
        });
        let began = match l.state {
            LeaseState::Pending => false,
            LeaseState::Provisioning => l.provision_deadline_ms.is_some() || waiting_member,
            LeaseState::Active => true,
        };
        if self.config.delivery && began {
            let deadline = self.now + self.config.teardown_timeout_ms;
            self.wipes.push(Wipe {
                lease: id,
                node: l.node,
                buyer: l.buyer,
                supplier: l.supplier,
                gpu_mask: l.gpu_mask,
                deadline_ms: deadline,
            });
            self.wipes.sort_by_key(|w| w.lease);
            self.emit(Event::LeaseWiping {
                lease: id,
                buyer: l.buyer,
                supplier: l.supplier,
                node: l.node,
                gpu_mask: l.gpu_mask,
                deadline_ms: deadline,
            });
        }
        l
    }

    // ----- §11 delivery ------------------------------------------------------------------------

    /// A lease now holds its GPUs (delivery on): it is provisioning; its provisioning begins now
    /// unless some of its GPUs are still wiping (§11.1, §11.7).
    fn begin_provisioning(&mut self, id: LeaseId) {
        let l = self.lease(id).clone();
        if l.gpu_mask & self.wiping(l.node) != 0 {
            return; // waits for the wipe, without a deadline
        }
        // the offer's current terms, or the default when the offer is gone
        let provision_s = self
            .offers
            .iter()
            .find(|o| o.id == l.offer)
            .map_or(DEFAULT_PROVISION_S, |o| o.terms.provision_s);
        let deadline = self.now + i64::from(provision_s) * 1000;
        self.lease_mut(id).provision_deadline_ms = Some(deadline);
        self.emit(Event::ProvisionStarted {
            lease: id,
            buyer: l.buyer,
            supplier: l.supplier,
            node: l.node,
            deadline_ms: deadline,
        });
    }

    /// Holds a node (§11.8); nothing when it is held already.
    fn hold(&mut self, node: NodeId, reason: HoldReason) {
        let n = self.node_mut(node);
        if n.held.is_some() {
            return;
        }
        n.held = Some(reason);
        let supplier = n.supplier;
        self.emit(Event::NodeHeld {
            node,
            supplier,
            reason,
        });
    }

    /// §11.3: the lease ends `not_delivered` at `at`, its node is held, and it is failed over.
    fn not_delivered(&mut self, id: LeaseId, at: i64) {
        let l = self.end_lease(id, EndReason::NotDelivered, at);
        self.hold(l.node, HoldReason::NotDelivered);
        let node = l.node;
        self.failover(vec![l], node);
    }

    /// A teardown deadline passed (§11.6).
    fn teardown_overdue(&mut self, lease: LeaseId) {
        let i = self
            .wipes
            .iter()
            .position(|w| w.lease == lease)
            .expect("wipe");
        let w = self.wipes.remove(i);
        self.emit(Event::TeardownOverdue {
            lease,
            buyer: w.buyer,
            supplier: w.supplier,
            node: w.node,
        });
        self.hold(w.node, HoldReason::TeardownOverdue);
        let mut waiting: Vec<LeaseId> = self
            .leases
            .iter()
            .filter(|l| {
                l.node == w.node
                    && l.state == LeaseState::Provisioning
                    && l.provision_deadline_ms.is_none()
                    && l.gpu_mask & w.gpu_mask != 0
            })
            .map(|l| l.id)
            .collect();
        waiting.sort();
        for id in waiting {
            if self.lease_live(id) {
                self.not_delivered(id, self.now);
            }
        }
    }

    /// The checks of a supplier's report on a lease (§11.2, §11.5): `Ok(Some(lease))` for a
    /// live lease, `Ok(None)` for a wiping one.
    fn reported_lease(&self, account: AccountId, id: LeaseId) -> Result<Option<Lease>, Reject> {
        let live = self.leases.iter().find(|l| l.id == id);
        let wipe = self.wipes.iter().find(|w| w.lease == id);
        let supplier = match (live, wipe) {
            (Some(l), _) => l.supplier,
            (None, Some(w)) => w.supplier,
            (None, None) => return Err((RejectReason::UnknownLease, Some("lease"))),
        };
        if supplier != account {
            return Err((RejectReason::NotOwner, Some("lease")));
        }
        Ok(live.cloned())
    }

    fn report_ready(
        &mut self,
        account: AccountId,
        id: LeaseId,
        failed: bool,
    ) -> Result<(), Reject> {
        let l = self
            .reported_lease(account, id)?
            .ok_or((RejectReason::LeaseEnded, Some("lease")))?;
        match (l.state, l.provision_deadline_ms) {
            (LeaseState::Provisioning, Some(_)) => {}
            // §13.3: a gang member ready and waiting for the rest may still fail
            (LeaseState::Provisioning, None) if self.gang_member_waiting(id) => {}
            // a repeated ready report on a running lease does nothing
            (LeaseState::Active, _) if !failed => return Ok(()),
            _ => return Err((RejectReason::NotProvisioning, Some("lease"))),
        }
        if failed {
            self.not_delivered(id, self.now);
            return Ok(());
        }
        // §13.3: a member of a gang not yet whole waits for the rest
        if self.gang_member_ready(id) {
            return Ok(());
        }
        let now = self.now;
        let lm = self.lease_mut(id);
        lm.state = LeaseState::Active;
        lm.provision_deadline_ms = None;
        lm.ready_ms = Some(now);
        self.emit(Event::LeaseReady {
            lease: id,
            buyer: l.buyer,
            supplier: l.supplier,
            node: l.node,
            at_ms: now,
        });
        Ok(())
    }

    /// §11.3b: the buyer's launch spec cannot run: the provisioning lease ends `not_delivered`
    /// now, the node is not held and nothing fails over. Checks as for a failed report.
    fn report_launch_failed(&mut self, account: AccountId, id: LeaseId) -> Result<(), Reject> {
        let l = self
            .reported_lease(account, id)?
            .ok_or((RejectReason::LeaseEnded, Some("lease")))?;
        match (l.state, l.provision_deadline_ms) {
            (LeaseState::Provisioning, Some(_)) => {}
            (LeaseState::Provisioning, None) if self.gang_member_waiting(id) => {}
            _ => return Err((RejectReason::NotProvisioning, Some("lease"))),
        }
        let now = self.now;
        self.end_lease(id, EndReason::NotDelivered, now);
        // §12.3: the launch spec's fault, not the supplier's
        self.launch_failed.push(id);
        Ok(())
    }

    /// §11.3a: a running lease whose workload the node lost ends `node_failure` now and fails
    /// over like a node failure of that lease alone; the node is not held.
    fn report_lost(&mut self, account: AccountId, id: LeaseId) -> Result<(), Reject> {
        let l = self
            .reported_lease(account, id)?
            .ok_or((RejectReason::LeaseEnded, Some("lease")))?;
        if l.state != LeaseState::Active {
            return Err((RejectReason::NotActive, Some("lease")));
        }
        let now = self.now;
        let ended = self.end_lease(id, EndReason::NodeFailure, now);
        self.failover(vec![ended], l.node);
        Ok(())
    }

    fn report_torn_down(&mut self, account: AccountId, id: LeaseId) -> Result<(), Reject> {
        if self.reported_lease(account, id)?.is_some() {
            return Err((RejectReason::LeaseNotEnded, Some("lease")));
        }
        let i = self.wipes.iter().position(|w| w.lease == id).expect("wipe");
        let w = self.wipes.remove(i);
        self.emit(Event::LeaseWiped {
            lease: id,
            buyer: w.buyer,
            supplier: w.supplier,
            node: w.node,
        });
        // §11.7: leases that waited for these GPUs and wait for nothing else now provision
        let still = self.wiping(w.node);
        let mut ready: Vec<LeaseId> = self
            .leases
            .iter()
            .filter(|l| {
                l.node == w.node
                    && l.state == LeaseState::Provisioning
                    && l.provision_deadline_ms.is_none()
                    && l.gpu_mask & w.gpu_mask != 0
                    && l.gpu_mask & still == 0
            })
            .map(|l| l.id)
            .collect();
        ready.sort();
        for lid in ready {
            self.begin_provisioning(lid);
        }
        Ok(())
    }

    // ----- apply -----------------------------------------------------------------------------

    /// Applies one command exactly as `docs/market-rules.md` prescribes and returns its events
    /// and inventory deltas.
    pub fn apply(&mut self, cmd: &Command, meta: Meta) -> Output {
        // §1.1
        if meta.seq <= self.last_seq {
            return Output {
                events: vec![Event::Rejected {
                    reason: RejectReason::StaleSequence,
                    // the spec names no field (spec question 1); the engine says "seq"
                    field: Some("seq"),
                }],
                deltas: vec![],
            };
        }
        if meta.seq > exchange::limits::MAX_SEQ {
            return Output {
                events: vec![Event::Rejected {
                    reason: RejectReason::SequenceOutOfRange,
                    field: Some("seq"),
                }],
                deltas: vec![],
            };
        }
        if meta.timestamp_ms < self.now {
            return Output {
                events: vec![Event::Rejected {
                    reason: RejectReason::ClockRegression,
                    // spec question 1, as for stale_sequence
                    field: Some("timestamp_ms"),
                }],
                deltas: vec![],
            };
        }
        let before = self.inventory();
        self.last_seq = meta.seq;
        self.seq = meta.seq;
        self.k = 0;
        self.events.clear();
        // rule 6: an outage of the exchange does not count against heartbeats
        if matches!(cmd, Command::Resume) {
            let gap = meta.timestamp_ms - self.now;
            for n in self.nodes.iter_mut() {
                if n.status == NodeStatus::Online && gap > 0 {
                    n.last_heartbeat_ms = (n.last_heartbeat_ms + gap).min(meta.timestamp_ms);
                }
            }
            // §11.9: provisioning and teardown deadlines move by the whole gap
            for l in self.leases.iter_mut() {
                if l.state == LeaseState::Provisioning
                    && let Some(d) = l.provision_deadline_ms
                {
                    l.provision_deadline_ms = Some(d + gap);
                }
            }
            for w in self.wipes.iter_mut() {
                w.deadline_ms += gap;
            }
            // §12.2: verification deadlines and due times move by the gap too
            if gap > 0 {
                for v in self.verifications.values_mut() {
                    if let Some(r) = v.run.as_mut() {
                        r.deadline_ms += gap;
                    }
                    if let Some(d) = v.due_ms.as_mut() {
                        *d += gap;
                    }
                }
            }
        }
        // §1.2, §7
        self.advance(meta.timestamp_ms);
        // §13.3: gangs settle at the end of time advancement and of the command
        self.settle_gangs();
        // §1.4
        self.uncross();
        // §1.3
        match self.command(cmd) {
            Ok(()) => {
                self.settle_gangs();
                self.uncross()
            }
            Err((reason, field)) => self.emit(Event::Rejected { reason, field }),
        }
        // the nodes' derived claimed masks, for comparison with the engine
        for i in 0..self.nodes.len() {
            self.nodes[i].claimed_mask = self.claimed(self.nodes[i].id);
            self.nodes[i].wiping_mask = self.wiping(self.nodes[i].id);
        }
        // §1.5, §8
        let after = self.inventory();
        let mut keys: Vec<LevelKey> = before.iter().chain(after.iter()).map(|(k, _)| *k).collect();
        keys.sort();
        keys.dedup();
        let mut deltas = Vec::new();
        for key in keys {
            let get = |v: &Vec<(LevelKey, Level)>| {
                v.iter()
                    .find(|(k, _)| *k == key)
                    .map(|(_, l)| *l)
                    .unwrap_or_default()
            };
            let (b, a) = (get(&before), get(&after));
            if a != b {
                let s = &mut self.market_seq[usize::from(key.sku.0)];
                *s += 1;
                deltas.push(InventoryDelta {
                    sku: key.sku,
                    market_seq: *s,
                    region: key.region,
                    kind: key.kind,
                    price: key.price,
                    free_gpus: a.free_gpus,
                    max_single_node: a.max_single_node,
                });
            }
        }
        // §12.3: the score follows every event of the command, at the command's time
        let now = self.now;
        self.history
            .extend(self.events.iter().map(|e| (now, e.clone())));
        Output {
            events: std::mem::take(&mut self.events),
            deltas,
        }
    }

    /// §12.3: the first command of a UTC day takes every registered node's score at that
    /// day's midnight, recomputed from the whole history so far; `new` nodes have none.
    fn roll_day_scores(&mut self, day: i64) {
        let midnight = day * exchange::reliability::DAY_MS;
        let mut scores = std::collections::BTreeMap::new();
        for n in &self.nodes {
            let s =
                reliability::naive_node_score(&self.history, &self.launch_failed, n.id, midnight);
            if let Some(bp) = s.reliability_bp() {
                scores.insert(n.id, bp);
            }
        }
        self.day_scores = scores;
        self.score_day = day;
    }

    /// The score (bp) `min_reliability` compares against today (§12.3): the node's at the
    /// start of the current UTC day; `None` when it was `new` then.
    pub fn matching_reliability_bp(&self, node: NodeId) -> Option<u32> {
        self.day_scores.get(&node).copied()
    }

    // ----- §7 time advancement -----------------------------------------------------------------

    fn advance(&mut self, t: i64) {
        self.now = t;
        // §12.3: the day's scores, at its first command, before anything else moves
        let day = t.div_euclid(exchange::reliability::DAY_MS);
        if day != self.score_day {
            self.roll_day_scores(day);
        }
        // 1. offer expiry (first, so no later step sees an offer past its until)
        let mut gone: Vec<(i64, OfferId)> = self
            .offers
            .iter()
            .filter(|o| o.terms.available_until_ms <= t)
            .map(|o| (o.terms.available_until_ms, o.id))
            .collect();
        gone.sort();
        for (_, id) in gone {
            self.remove_offer(id);
            self.emit(Event::OfferExpired { offer: id });
        }
        // 2. heartbeat timeouts
        let mut silent: Vec<(i64, NodeId)> = self
            .nodes
            .iter()
            .filter(|n| {
                n.status == NodeStatus::Online
                    && t - n.last_heartbeat_ms > self.config.heartbeat_timeout_ms
            })
            .map(|n| (n.last_heartbeat_ms, n.id))
            .collect();
        silent.sort();
        // all of them go offline first, so none can take a failover from another
        for (_, nid) in &silent {
            self.node_mut(*nid).status = NodeStatus::Offline;
        }
        for (hb, nid) in silent {
            self.emit(Event::NodeOffline {
                node: nid,
                last_heartbeat_ms: hb,
            });
            let mut ids: Vec<LeaseId> = self
                .leases
                .iter()
                .filter(|l| l.node == nid)
                .map(|l| l.id)
                .collect();
            ids.sort();
            let mut failed = Vec::new();
            for id in ids {
                failed.push(self.end_lease(id, EndReason::NodeFailure, hb));
            }
            self.failover(failed, nid);
        }
        // 3. lease ends and starts, one timeline, with the provisioning and teardown
        //    deadlines of §11.10; the earliest due item is taken each time, recomputed from
        //    the state
        loop {
            let mut items: Vec<(i64, u8, LeaseId)> = Vec::new();
            for l in &self.leases {
                let e = effective_end(l);
                if e <= t {
                    items.push((e, ITEM_END, l.id));
                }
                if l.state == LeaseState::Provisioning
                    && let Some(d) = l.provision_deadline_ms
                    && d <= t
                {
                    items.push((d, ITEM_PROVISION_TIMEOUT, l.id));
                }
                if l.state == LeaseState::Pending && l.start_ms <= t {
                    items.push((l.start_ms, ITEM_START, l.id));
                }
            }
            for w in &self.wipes {
                if w.deadline_ms <= t {
                    items.push((w.deadline_ms, ITEM_TEARDOWN_OVERDUE, w.lease));
                }
            }
            items.sort();
            let Some(&(at, what, id)) = items.first() else {
                break;
            };
            match what {
                ITEM_END => {
                    let l = self.lease(id);
                    let reason = match l.notice {
                        Some(n) if n.deadline_ms < l.end_ms => notice_end_reason(n.reason),
                        _ => EndReason::Expired,
                    };
                    self.end_lease(id, reason, at);
                }
                ITEM_PROVISION_TIMEOUT => self.not_delivered(id, at),
                ITEM_TEARDOWN_OVERDUE => self.teardown_overdue(id),
                _ => {
                    let delivery = self.config.delivery;
                    self.lease_mut(id).state = if delivery {
                        LeaseState::Provisioning
                    } else {
                        LeaseState::Active
                    };
                    let e = self.started_event(id);
                    self.emit(e);
                    if delivery {
                        self.begin_provisioning(id);
                    }
                }
            }
        }
        // 4. GTC expiry
        let mut expired: Vec<(i64, BidId)> = self
            .bids
            .iter()
            .filter_map(|b| b.expires_at_ms.filter(|x| *x <= t).map(|x| (x, b.id)))
            .collect();
        expired.sort();
        for (_, id) in expired {
            let i = self.bids.iter().position(|b| b.id == id).expect("bid");
            let b = self.bids.remove(i);
            self.emit(Event::BidClosed {
                bid: id,
                filled: b.gpus - b.remaining,
                unfilled: b.remaining,
                reason: BidCloseReason::Expired,
                detail: CloseDetail::default(),
            });
        }
        // 4a. verification deadlines and due runs (§12.2)
        self.advance_verification();
        // 5. client order ids accepted `retention` or longer ago are forgotten, unless their
        //    bid still rests
        let retention = self.config.client_order_id_retention_ms;
        let resting: Vec<BidId> = self.bids.iter().map(|b| b.id).collect();
        self.used_client_order_ids
            .retain(|(_, _, at, bid)| t - *at < retention || resting.contains(bid));
    }

    fn remove_offer(&mut self, id: OfferId) {
        let i = self.offers.iter().position(|o| o.id == id).expect("offer");
        let o = self.offers.remove(i);
        self.offer_sla.remove(&id);
        self.node_mut(o.node).offer = None;
    }

    /// `PostOffer`, or `PostOfferSla` with its promise (§12.4).
    fn post_offer(
        &mut self,
        account: AccountId,
        node: NodeId,
        terms: &OfferTerms,
        sla: Option<exchange::SlaPromise>,
    ) -> Result<(), Reject> {
        let n = self.owned_node(account, node)?;
        if n.status == NodeStatus::Offline {
            return Err((RejectReason::NodeOffline, Some("node")));
        }
        if n.draining {
            return Err((RejectReason::NodeDraining, Some("node")));
        }
        if n.offer.is_some() {
            return Err((RejectReason::OfferExists, Some("node")));
        }
        self.check_terms(n, terms)?;
        // §12.4: availability 9000..=9999 bp, multiple 1..=50
        if sla.is_some_and(|p| {
            !(9_000..=9_999).contains(&p.availability_bp) || !(1..=50).contains(&p.credit_multiple)
        }) {
            return Err((RejectReason::InvalidSla, Some("sla")));
        }
        let id = OfferId(self.new_id());
        self.offers.push(Offer {
            id,
            node,
            supplier: account,
            terms: *terms,
            priority: self.seq,
        });
        if let Some(p) = sla {
            self.offer_sla.insert(id, p);
        }
        self.node_mut(node).offer = Some(id);
        self.emit(Event::OfferPosted {
            offer: id,
            node,
            terms: *terms,
        });
        // §12.2: a node's first listing places a verification run
        self.verify_on_listing(node);
        Ok(())
    }

    fn started_event(&self, id: LeaseId) -> Event {
        let l = self.lease(id);
        Event::LeaseStarted {
            lease: l.id,
            bid: l.bid,
            buyer: l.buyer,
            supplier: l.supplier,
            node: l.node,
            sku: l.sku,
            region: l.region,
            kind: l.kind,
            gpus: l.gpus,
            gpu_mask: l.gpu_mask,
            price: l.price,
            start_ms: l.start_ms,
            end_ms: l.end_ms,
        }
    }

    // ----- §4 matching -----------------------------------------------------------------------

    /// Creates a lease for the taker on the offer's node with the given GPUs, starting at
    /// `start`; emits `Fill`, `LeaseStarted` (if it starts now) and `LeaseMigrated` (failover).
    fn create_lease(&mut self, t: &Taker, offer: OfferId, mask: u32, start: i64, id: u64) {
        let o = self.offer(offer).clone();
        let n = self.node(o.node).clone();
        let maker = match t.resting_priority {
            Some(p) if p < o.priority => Maker::Bid,
            _ => Maker::Offer,
        };
        let price = match (t.kind, maker) {
            (LeaseKind::Preemptible, _) => t.limit,
            (LeaseKind::Spot, Maker::Bid) => t.limit,
            (LeaseKind::Spot, Maker::Offer) => o.terms.spot_price,
        };
        let end = lease_end(t.term, &o.terms, start);
        let fixed_end = match t.term {
            Term::Duration(d) => Some(start + (d as i64) * 1000),
            Term::FixedEnd(e) => Some(e),
            Term::Open => None,
        };
        let now = start == self.now;
        let lease = Lease {
            id: LeaseId(id),
            bid: t.bid,
            offer: o.id,
            node: n.id,
            buyer: t.buyer,
            supplier: o.supplier,
            sku: n.sku,
            region: n.region,
            kind: t.kind,
            gpus: mask.count_ones(),
            gpu_mask: mask,
            price,
            start_ms: start,
            end_ms: end,
            state: match (now, self.config.delivery) {
                (false, _) => LeaseState::Pending,
                (true, false) => LeaseState::Active,
                (true, true) => LeaseState::Provisioning,
            },
            notice: None,
            origin: LeaseOrigin {
                limit: t.limit,
                placement: t.placement,
                constraints: t.constraints.clone(),
                fixed_end_ms: fixed_end,
            },
            provision_deadline_ms: None,
            ready_ms: None,
        };
        self.emit(Event::Fill {
            bid: t.bid,
            lease: lease.id,
            offer: o.id,
            node: n.id,
            buyer: t.buyer,
            supplier: o.supplier,
            gpus: lease.gpus,
            price,
            kind: t.kind,
            maker,
            start_ms: start,
            end_ms: end,
        });
        self.leases.push(lease);
        self.leases.sort_by_key(|l| l.id);
        if !t.trust.is_none() {
            self.lease_trust.insert(LeaseId(id), t.trust);
        }
        let node = self.node_mut(n.id);
        node.leases.push(LeaseId(id));
        node.leases.sort();
        if now {
            let e = self.started_event(LeaseId(id));
            self.emit(e);
            if self.config.delivery {
                self.begin_provisioning(LeaseId(id));
            }
        }
        if let Some(slot) = t.gang.as_ref().and_then(|g| g.slot) {
            self.gang_member_created(slot, LeaseId(id));
        }
        if let Some(from) = t.migrate_from {
            self.emit(Event::LeaseMigrated {
                from,
                to: LeaseId(id),
            });
        }
    }

    /// Phase 1 (§4): fills up to `want` GPUs from listed free capacity; returns GPUs filled.
    fn phase1(&mut self, t: &Taker, want: u32) -> u32 {
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
            let o = self.offer(oid).clone();
            let n = self.node(o.node).clone();
            if !self.eligible(t, &o, &n, now) {
                continue;
            }
            let free = self.listed_free(&n);
            match t.placement {
                // a gang fills by `fill_gang`; a member's replacement is single-node
                Placement::SingleNode | Placement::Gang(_) => {
                    if free >= remaining {
                        let mask = self.free_mask(&n, remaining);
                        let id = self.new_id();
                        self.create_lease(t, oid, mask, now, id);
                        remaining = 0;
                        break;
                    }
                }
                Placement::Spread => {
                    let take = free.min(remaining);
                    if take > 0 {
                        let mask = self.free_mask(&n, take);
                        let id = self.new_id();
                        self.create_lease(t, oid, mask, now, id);
                        remaining -= take;
                    }
                }
            }
        }
        want - remaining
    }

    /// The qualifying victims of phase 2 (§4) with their deadline, in victim order.
    fn victims(&self, t: &Taker) -> Vec<(LeaseId, i64)> {
        let mut v: Vec<(Price, std::cmp::Reverse<LeaseId>, i64)> = Vec::new();
        for l in &self.leases {
            if l.state != LeaseState::Active
                || l.kind != LeaseKind::Preemptible
                || l.notice.is_some()
                || l.buyer == t.buyer
            {
                continue;
            }
            let n = self.node(l.node);
            let Some(o) = self.offer_of(n) else { continue };
            let deadline = self.now + i64::from(o.terms.notice_s) * 1000;
            if !self.eligible(t, o, n, deadline) {
                continue;
            }
            let ok = match t.kind {
                LeaseKind::Spot => o.terms.spot_price <= t.limit,
                LeaseKind::Preemptible => {
                    o.terms.preemptible_price.is_some_and(|p| p <= t.limit) && l.price < t.limit
                }
            };
            if ok {
                v.push((l.price, std::cmp::Reverse(l.id), deadline));
            }
        }
        v.sort();
        v.into_iter().map(|(_, r, d)| (r.0, d)).collect()
    }

    fn give_notice(&mut self, victim: LeaseId, by: u64, deadline: i64) {
        self.lease_mut(victim).notice = Some(Notice {
            deadline_ms: deadline,
            reason: NoticeReason::Preempted,
        });
        self.emit(Event::PreemptionNotice {
            lease: victim,
            by: Some(LeaseId(by)),
            deadline_ms: deadline,
            reason: NoticeReason::Preempted,
        });
    }

    /// Phase 2 (§4): preemption; returns GPUs filled.
    fn phase2(&mut self, t: &Taker, want: u32) -> u32 {
        let victims = self.victims(t);
        let now = self.now;
        match t.placement {
            Placement::Spread => {
                let mut remaining = want;
                for (vid, deadline) in victims {
                    if remaining == 0 {
                        break;
                    }
                    let v = self.lease(vid).clone();
                    let take = v.gpus.min(remaining);
                    let mask = lowest_bits(v.gpu_mask, take);
                    let offer = self.node(v.node).offer.expect("victim node has an offer");
                    let id = self.new_id();
                    self.give_notice(vid, id, deadline);
                    if deadline == now {
                        self.end_lease(vid, EndReason::Preempted, now);
                    }
                    self.create_lease(t, offer, mask, deadline, id);
                    remaining -= take;
                }
                want - remaining
            }
            Placement::SingleNode => {
                let mut examined: Vec<NodeId> = Vec::new();
                for (vid, deadline) in &victims {
                    let node = self.lease(*vid).node;
                    if examined.contains(&node) {
                        continue;
                    }
                    examined.push(node);
                    let vs: Vec<LeaseId> = victims
                        .iter()
                        .filter(|(x, _)| self.lease(*x).node == node)
                        .map(|(x, _)| *x)
                        .collect();
                    let n = self.node(node).clone();
                    let free = self.free(&n);
                    let sum: u32 = free + vs.iter().map(|x| self.lease(*x).gpus).sum::<u32>();
                    if sum < want {
                        continue;
                    }
                    let mut mask = self.free_mask(&n, free.min(want));
                    let mut got = mask.count_ones();
                    let mut noticed = Vec::new();
                    for x in vs {
                        if got == want {
                            break;
                        }
                        let l = self.lease(x);
                        let take = l.gpus.min(want - got);
                        mask |= lowest_bits(l.gpu_mask, take);
                        got += take;
                        noticed.push(x);
                    }
                    let id = self.new_id();
                    for x in &noticed {
                        self.give_notice(*x, id, *deadline);
                        if *deadline == now {
                            self.end_lease(*x, EndReason::Preempted, now);
                        }
                    }
                    let offer = n.offer.expect("victim node has an offer");
                    self.create_lease(t, offer, mask, *deadline, id);
                    return want;
                }
                0
            }
            // §13.2: gangs take free capacity only
            Placement::Gang(_) => 0,
        }
    }

    /// What excludes offer `o` on node `n` from taker `t` at `s` (§4.1, in its order).
    fn exclusion(&self, t: &Taker, o: &Offer, n: &Node, s: i64) -> Option<Exclusion> {
        let c = &t.constraints;
        if n.status != NodeStatus::Online || n.draining || n.held.is_some() || self.verifying(n.id)
        {
            return Some(Exclusion::NodeUnavailable);
        }
        if o.supplier == t.buyer {
            return Some(Exclusion::SelfTrade);
        }
        if !c.regions.is_empty() && !c.regions.contains(&n.region) {
            return Some(Exclusion::Region);
        }
        if !c.jurisdictions.is_empty() && !c.jurisdictions.contains(&n.jurisdiction) {
            return Some(Exclusion::Jurisdiction);
        }
        if c.min_interconnect.is_some_and(|m| n.interconnect < m) {
            return Some(Exclusion::Interconnect);
        }
        if c.nvlink && !n.nvlink {
            return Some(Exclusion::Nvlink);
        }
        if !self.trust_admits(&t.trust, o.id, n.id) {
            return Some(Exclusion::Trust);
        }
        if !term_fits(t.term, &o.terms, s) {
            return Some(Exclusion::Term);
        }
        // §13.2: checked after term
        if !self.gang_admits(t, n) {
            return Some(Exclusion::FabricDomain);
        }
        None
    }

    /// Why a remainder could not fill, with its detail (§4.1).
    fn unfilled_reason(&self, t: &Taker, remaining: u32) -> (BidCloseReason, CloseDetail) {
        let need = match t.placement {
            Placement::SingleNode => remaining,
            Placement::Spread => 1,
            // §13.2: a gang's unfilled reason looks for one member's GPUs
            Placement::Gang(g) => g.gpus_per_node,
        };
        // Offers with room for `need`, in book order (price, priority, id).
        let mut room: Vec<(Price, u64, OfferId)> = Vec::new();
        for n in &self.nodes {
            if n.sku != t.sku || Some(n.id) == t.exclude {
                continue;
            }
            let free = self.listed_free(n);
            if free == 0 || free < need {
                continue;
            }
            let o = self.offer_of(n).expect("listed");
            if let Some(p) = kind_price(o, t.kind) {
                room.push((p, o.priority, o.id));
            }
        }
        room.sort();
        let why = |oid: OfferId| {
            let o = self.offer(oid);
            self.exclusion(t, o, self.node(o.node), self.now)
        };
        let acceptable: Vec<Option<Exclusion>> = room
            .iter()
            .filter(|(p, _, _)| *p <= t.limit)
            .map(|(_, _, oid)| why(*oid))
            .collect();
        if acceptable.contains(&Some(Exclusion::Term)) {
            return (BidCloseReason::Term, CloseDetail::default());
        }
        // Phase 2's victims were they not the taker's own (§4 rule 5).
        let own = self.leases.iter().any(|l| {
            if l.buyer != t.buyer
                || l.state != LeaseState::Active
                || l.kind != LeaseKind::Preemptible
                || l.notice.is_some()
            {
                return false;
            }
            let n = self.node(l.node);
            let Some(o) = self.offer_of(n) else {
                return false;
            };
            if t.placement != Placement::Spread && n.gpus < need {
                return false;
            }
            let deadline = self.now + i64::from(o.terms.notice_s) * 1000;
            if !self.eligible(t, o, n, deadline) {
                return false;
            }
            match t.kind {
                LeaseKind::Spot => o.terms.spot_price <= t.limit,
                LeaseKind::Preemptible => {
                    o.terms.preemptible_price.is_some_and(|p| p <= t.limit) && l.price < t.limit
                }
            }
        });
        if own {
            return (BidCloseReason::OwnLease, CloseDetail::default());
        }
        if let Some(x) = acceptable.iter().flatten().next() {
            let detail = CloseDetail {
                excluded_by: Some(*x),
                ..CloseDetail::default()
            };
            // §12: the cheapest excluded only by the bid's trust requirements
            if *x == Exclusion::Trust {
                return (BidCloseReason::Trust, detail);
            }
            return (BidCloseReason::Constraints, detail);
        }
        if room.is_empty() {
            return (BidCloseReason::NoCapacity, CloseDetail::default());
        }
        let best_price = room
            .iter()
            .find(|(p, _, oid)| *p > t.limit && why(*oid).is_none())
            .map(|(p, _, _)| *p);
        let detail = CloseDetail {
            best_price,
            ..CloseDetail::default()
        };
        (BidCloseReason::Price, detail)
    }

    // ----- §5 failover -----------------------------------------------------------------------

    fn failover(&mut self, mut failed: Vec<Lease>, exclude: NodeId) {
        failed.sort_by_key(|l| l.id);
        for l in failed {
            if l.notice.is_some() {
                continue;
            }
            if l.origin.fixed_end_ms.is_some_and(|e| e <= self.now) || l.end_ms <= self.now {
                continue;
            }
            // §13.3–13.4: a lost gang member is replaced on one node of its gang's place that
            // holds no other member, to the lost lease's end, from free capacity only; a rank
            // already replaced once before the gang was whole is not
            let gang = match self.gang_replacement(l.id, exclude) {
                None => None,
                Some(None) => continue,
                Some(Some(req)) => Some(req),
            };
            let t = Taker {
                bid: l.bid,
                buyer: l.buyer,
                sku: l.sku,
                kind: l.kind,
                placement: match l.origin.placement {
                    Placement::Gang(_) => Placement::SingleNode,
                    p => p,
                },
                limit: l.origin.limit,
                constraints: l.origin.constraints.clone(),
                term: match (l.origin.fixed_end_ms, &gang) {
                    (_, Some(_)) => Term::FixedEnd(l.end_ms),
                    (Some(e), None) => Term::FixedEnd(e),
                    (None, None) => Term::Open,
                },
                exclude: Some(exclude),
                resting_priority: None,
                migrate_from: Some(l.id),
                // §12: the failed lease's trust requirements
                trust: self.lease_trust.get(&l.id).copied().unwrap_or_default(),
                gang,
            };
            let mut filled = self.phase1(&t, l.gpus);
            if filled < l.gpus && t.gang.is_none() {
                filled += self.phase2(&t, l.gpus - filled);
            }
            if filled < l.gpus {
                let (reason, detail) = self.unfilled_reason(&t, l.gpus - filled);
                self.emit(Event::FailoverFailed {
                    lease: l.id,
                    gpus: l.gpus - filled,
                    reason,
                    detail,
                });
            }
        }
    }

    // ----- §6 uncross ------------------------------------------------------------------------

    fn uncross(&mut self) {
        for s in 0..self.catalog.len() {
            let sku = SkuId(s as u16);
            for kind in [LeaseKind::Spot, LeaseKind::Preemptible] {
                // §13.2: resting gangs are tried after the other resting bids of the book
                let mut order: Vec<(std::cmp::Reverse<Price>, u64, BidId)> = self
                    .bids
                    .iter()
                    .filter(|b| {
                        b.sku == sku && b.kind == kind && !matches!(b.placement, Placement::Gang(_))
                    })
                    .map(|b| (std::cmp::Reverse(b.limit), b.priority, b.id))
                    .collect();
                order.sort();
                for (_, _, id) in order {
                    let b = self.bids.iter().find(|b| b.id == id).expect("bid").clone();
                    let t = self.resting_taker(&b);
                    let filled = self.phase1(&t, b.remaining);
                    if filled == 0 {
                        continue;
                    }
                    let i = self.bids.iter().position(|x| x.id == id).expect("bid");
                    self.bids[i].remaining -= filled;
                    if self.bids[i].remaining == 0 {
                        self.bids.remove(i);
                        self.emit(Event::BidClosed {
                            bid: id,
                            filled: b.gpus,
                            unfilled: 0,
                            reason: BidCloseReason::Filled,
                            detail: CloseDetail::default(),
                        });
                    }
                }
                self.uncross_gangs(sku, kind);
            }
        }
    }

    /// A resting bid as the taker of uncross (§6).
    fn resting_taker(&self, b: &Bid) -> Taker {
        Taker {
            bid: b.id,
            buyer: b.buyer,
            sku: b.sku,
            kind: b.kind,
            placement: b.placement,
            limit: b.limit,
            constraints: b.constraints.clone(),
            term: match b.duration_s {
                Some(d) => Term::Duration(d),
                None => Term::Open,
            },
            exclude: None,
            resting_priority: Some(b.priority),
            migrate_from: None,
            trust: self.bid_trust(b.id),
            gang: gang::gang_req(b.placement),
        }
    }

    // ----- commands (§9 validation, then the effect) -----------------------------------------

    fn command(&mut self, cmd: &Command) -> Result<(), Reject> {
        match cmd {
            Command::RegisterNode { account, spec } => {
                if !valid_node_name(&spec.name) {
                    return Err((RejectReason::InvalidName, Some("name")));
                }
                if usize::from(spec.sku.0) >= self.catalog.len() {
                    return Err((RejectReason::UnknownSku, Some("sku")));
                }
                if !(1..=16).contains(&spec.gpus) {
                    return Err((RejectReason::InvalidGpus, Some("gpus")));
                }
                if !valid_region(&spec.region) {
                    return Err((RejectReason::InvalidRegion, Some("region")));
                }
                if !valid_jurisdiction(spec.jurisdiction) {
                    return Err((RejectReason::InvalidJurisdiction, Some("jurisdiction")));
                }
                // §13.1
                if let Some(f) = &spec.fabric {
                    gang::check_fabric(f)?;
                }
                if self
                    .nodes
                    .iter()
                    .any(|n| n.supplier == *account && n.name == spec.name)
                {
                    return Err((RejectReason::NodeExists, Some("name")));
                }
                let region = self.intern_region(&spec.region)?;
                let id = NodeId(self.new_id());
                let all = (1u32 << spec.gpus) - 1;
                self.nodes.push(Node {
                    id,
                    supplier: *account,
                    name: spec.name.clone(),
                    sku: spec.sku,
                    gpus: spec.gpus,
                    region,
                    jurisdiction: spec.jurisdiction,
                    interconnect: spec.interconnect,
                    nvlink: spec.nvlink,
                    status: NodeStatus::Online,
                    draining: false,
                    last_heartbeat_ms: self.now,
                    healthy_mask: all,
                    offer: None,
                    leases: Vec::new(),
                    claimed_mask: 0,
                    wiping_mask: 0,
                    held: None,
                });
                if let Some(f) = &spec.fabric {
                    self.set_fabric(id, f);
                }
                self.emit(Event::NodeRegistered {
                    node: id,
                    supplier: *account,
                    sku: spec.sku,
                    region,
                    gpus: spec.gpus,
                });
                Ok(())
            }
            Command::UpdateNode {
                account,
                node,
                update,
            } => {
                self.owned_node(*account, *node)?;
                if let Some(r) = &update.region
                    && !valid_region(r)
                {
                    return Err((RejectReason::InvalidRegion, Some("region")));
                }
                if let Some(j) = update.jurisdiction
                    && !valid_jurisdiction(j)
                {
                    return Err((RejectReason::InvalidJurisdiction, Some("jurisdiction")));
                }
                if let Some(r) = &update.region
                    && self.region_id(r).is_none()
                    && self.regions.len() >= MAX_REGIONS
                {
                    return Err((RejectReason::InvalidRegion, Some("region")));
                }
                // §13.1: an update's fabric replaces the node's whole record
                if let Some(f) = &update.fabric {
                    gang::check_fabric(f)?;
                }
                let region = match &update.region {
                    Some(r) => Some(self.intern_region(r)?),
                    None => None,
                };
                if let Some(f) = &update.fabric {
                    self.set_fabric(*node, f);
                }
                let n = self.node_mut(*node);
                if let Some(r) = region {
                    n.region = r;
                }
                if let Some(j) = update.jurisdiction {
                    n.jurisdiction = j;
                }
                if let Some(i) = update.interconnect {
                    n.interconnect = i;
                }
                if let Some(v) = update.nvlink {
                    n.nvlink = v;
                }
                if let Some(d) = update.draining {
                    n.draining = d;
                }
                let e = Event::NodeUpdated {
                    node: n.id,
                    region: n.region,
                    jurisdiction: n.jurisdiction,
                    interconnect: n.interconnect,
                    nvlink: n.nvlink,
                    draining: n.draining,
                };
                self.emit(e);
                Ok(())
            }
            Command::Heartbeat {
                account,
                node,
                healthy_gpus,
            } => {
                let n = self.owned_node(*account, *node)?;
                if *healthy_gpus > n.gpus {
                    return Err((RejectReason::InvalidGpus, Some("healthy_gpus")));
                }
                self.heartbeat(*node, *healthy_gpus);
                Ok(())
            }
            Command::AttestNode {
                account,
                node,
                gpus,
            } => {
                let n = self.owned_node(*account, *node)?;
                let bad = Err((RejectReason::InvalidGpus, Some("gpus")));
                if gpus.is_empty() || gpus.len() > 16 {
                    return bad;
                }
                for (i, g) in gpus.iter().enumerate() {
                    if g.index >= 16 || (i > 0 && g.index <= gpus[i - 1].index) {
                        return bad;
                    }
                    if g.uuid.is_empty()
                        || g.uuid.len() > 64
                        || g.uuid.chars().any(|c| !c.is_ascii_graphic())
                        || gpus.iter().filter(|o| o.uuid == g.uuid).count() > 1
                    {
                        return bad;
                    }
                    if g.model.trim().is_empty()
                        || g.model.chars().count() > 64
                        || g.model.chars().any(|c| c.is_control())
                    {
                        return bad;
                    }
                }
                if gpus
                    .iter()
                    .any(|g| !exchange::models::known_family(&g.model))
                {
                    return Err((RejectReason::UnknownModel, Some("gpus")));
                }
                let sku = self.catalog.get(n.sku).expect("registered sku").id.clone();
                let count = gpus.len() as u32;
                let mut mismatch = None;
                if count != n.gpus {
                    mismatch = Some(AttestationMismatch::GpuCount {
                        attested: count,
                        registered: n.gpus,
                    });
                }
                if mismatch.is_none() {
                    for g in gpus {
                        match exchange::models::sku_for_model(&g.model, u64::from(g.memory_mib)) {
                            None => {
                                mismatch = Some(AttestationMismatch::Memory {
                                    index: g.index,
                                    memory_mib: g.memory_mib,
                                })
                            }
                            Some(s) if s != sku => {
                                mismatch = Some(AttestationMismatch::Model {
                                    index: g.index,
                                    model: g.model.clone(),
                                })
                            }
                            Some(_) => continue,
                        }
                        break;
                    }
                }
                if mismatch.is_none() {
                    // a UUID on another node whose latest attestation matched
                    for g in gpus {
                        let taken = self.attestations.iter().any(|(o, a)| {
                            o != node && a.mismatch.is_none() && a.uuids.contains(&g.uuid)
                        });
                        if taken {
                            mismatch = Some(AttestationMismatch::DuplicateGpu {
                                index: g.index,
                                uuid: g.uuid.clone(),
                            });
                            break;
                        }
                    }
                }
                let supplier = n.supplier;
                let now = self.now;
                // §12.1–12.2: GPUs whose UUID differs from the previous attestation, when both
                // matched (bit i = GPU i; the old UUIDs by position in their list)
                let changed = match self.attestations.get(node) {
                    Some(old) if old.mismatch.is_none() && mismatch.is_none() => gpus
                        .iter()
                        .enumerate()
                        .filter(|(pos, g)| old.uuids.get(*pos) != Some(&g.uuid))
                        .fold(0u32, |m, (_, g)| m | (1 << g.index)),
                    _ => 0,
                };
                self.attestations.insert(
                    *node,
                    NodeAttestation {
                        at_ms: now,
                        uuids: gpus.iter().map(|g| g.uuid.clone()).collect(),
                        mismatch: mismatch.clone(),
                    },
                );
                match mismatch {
                    None => {
                        self.emit(Event::NodeAttested {
                            node: *node,
                            gpus: count,
                        });
                        if changed != 0 {
                            self.uuids_changed(*node, changed);
                        }
                    }
                    Some(m) => {
                        let reason = if matches!(m, AttestationMismatch::DuplicateGpu { .. }) {
                            HoldReason::DuplicateGpu
                        } else {
                            HoldReason::Attestation
                        };
                        self.emit(Event::AttestationFailed {
                            node: *node,
                            supplier,
                            mismatch: m,
                        });
                        self.hold(*node, reason);
                    }
                }
                Ok(())
            }
            Command::PlaceTrustBid {
                account,
                bid,
                trust,
            } => self.place_bid(*account, bid, *trust),
            Command::ReportVerification {
                account,
                lease,
                figures,
            } => self.report_verification(*account, *lease, figures),
            Command::GpuHealth {
                account,
                node,
                healthy_mask,
            } => {
                let n = self.owned_node(*account, *node)?;
                // §12.1: no bit at or above the node's GPU count
                if (0..32).any(|i| healthy_mask & (1u32 << i) != 0 && i >= n.gpus) {
                    return Err((RejectReason::InvalidGpus, Some("healthy_mask")));
                }
                self.gpu_health(*node, *healthy_mask);
                Ok(())
            }
            Command::PostOffer {
                account,
                node,
                terms,
            } => self.post_offer(*account, *node, terms, None),
            Command::PostOfferSla {
                account,
                node,
                terms,
                sla,
            } => self.post_offer(*account, *node, terms, Some(*sla)),
            Command::AmendOffer {
                account,
                offer,
                terms,
            } => {
                let o = self
                    .offers
                    .iter()
                    .find(|o| o.id == *offer)
                    .ok_or((RejectReason::UnknownOffer, Some("offer")))?
                    .clone();
                if o.supplier != *account {
                    return Err((RejectReason::NotOwner, Some("offer")));
                }
                self.check_terms(self.node(o.node), terms)?;
                let reprioritize = terms.spot_price != o.terms.spot_price
                    || terms.preemptible_price != o.terms.preemptible_price
                    || terms.gpus > o.terms.gpus;
                let seq = self.seq;
                let om = self
                    .offers
                    .iter_mut()
                    .find(|x| x.id == *offer)
                    .expect("offer");
                om.terms = *terms;
                if reprioritize {
                    om.priority = seq;
                }
                self.emit(Event::OfferAmended {
                    offer: *offer,
                    terms: *terms,
                });
                self.withdraw_notices(o.node, terms.notice_s, Some(terms.gpus));
                Ok(())
            }
            Command::WithdrawOffer { account, offer } => {
                let o = self
                    .offers
                    .iter()
                    .find(|o| o.id == *offer)
                    .ok_or((RejectReason::UnknownOffer, Some("offer")))?
                    .clone();
                if o.supplier != *account {
                    return Err((RejectReason::NotOwner, Some("offer")));
                }
                self.remove_offer(*offer);
                self.emit(Event::OfferWithdrawn { offer: *offer });
                self.withdraw_notices(o.node, o.terms.notice_s, None);
                Ok(())
            }
            Command::PlaceBid { account, bid } => {
                self.place_bid(*account, bid, TrustConstraints::default())
            }
            Command::CancelBid { account, bid } => {
                let b = self
                    .bids
                    .iter()
                    .find(|b| b.id == *bid)
                    .ok_or((RejectReason::UnknownBid, Some("bid")))?
                    .clone();
                if b.buyer != *account {
                    return Err((RejectReason::NotOwner, Some("bid")));
                }
                self.bids.retain(|x| x.id != *bid);
                self.emit(Event::BidClosed {
                    bid: *bid,
                    filled: b.gpus - b.remaining,
                    unfilled: b.remaining,
                    reason: BidCloseReason::Canceled,
                    detail: CloseDetail::default(),
                });
                Ok(())
            }
            Command::ReleaseLease { account, lease } => {
                let l = self
                    .leases
                    .iter()
                    .find(|l| l.id == *lease)
                    .ok_or((RejectReason::UnknownLease, Some("lease")))?;
                if l.buyer != *account {
                    return Err((RejectReason::NotOwner, Some("lease")));
                }
                self.end_lease(*lease, EndReason::Released, self.now);
                Ok(())
            }
            Command::EndLeaseInsufficientFunds { lease } => {
                if !self.lease_live(*lease) {
                    return Err((RejectReason::UnknownLease, Some("lease")));
                }
                let l = self.end_lease(*lease, EndReason::InsufficientFunds, self.now);
                // §9: the buyer's resting bids close `insufficient_funds`, in bid id order.
                let mut mine: Vec<Bid> = self
                    .bids
                    .iter()
                    .filter(|b| b.buyer == l.buyer)
                    .cloned()
                    .collect();
                mine.sort_by_key(|b| b.id);
                for b in mine {
                    self.bids.retain(|x| x.id != b.id);
                    self.emit(Event::BidClosed {
                        bid: b.id,
                        filled: b.gpus - b.remaining,
                        unfilled: b.remaining,
                        reason: BidCloseReason::InsufficientFunds,
                        detail: CloseDetail::default(),
                    });
                }
                Ok(())
            }
            Command::Tick | Command::Resume => Ok(()),
            Command::ReleaseBid { account, bid } => self.release_bid(*account, *bid),
            Command::ReportReady { account, lease } => self.report_ready(*account, *lease, false),
            Command::ReportFailed { account, lease } => self.report_ready(*account, *lease, true),
            Command::ReportLaunchFailed { account, lease } => {
                self.report_launch_failed(*account, *lease)
            }
            Command::ReportLost { account, lease } => self.report_lost(*account, *lease),
            Command::ReportTornDown { account, lease } => self.report_torn_down(*account, *lease),
            Command::ResumeNode { account, node } => {
                let n = self.owned_node(*account, *node)?;
                // §12.1: held with a mismatching latest attestation: refused
                if n.held.is_some()
                    && self
                        .attestations
                        .get(node)
                        .is_some_and(|a| a.mismatch.is_some())
                {
                    return Err((RejectReason::AttestationMismatch, Some("node")));
                }
                if let Some(was) = n.held {
                    self.node_mut(*node).held = None;
                    self.emit(Event::NodeResumed {
                        node: *node,
                        supplier: *account,
                    });
                    // §12.2: held for a failed run: back only through a new one
                    if was == HoldReason::VerificationFailed
                        || self
                            .verifications
                            .get(node)
                            .and_then(|v| v.last)
                            .is_some_and(|l| {
                                l.judgment.outcome == exchange::verify::VerifyOutcome::Failed
                            })
                    {
                        self.verify_changed(*node);
                    }
                }
                Ok(())
            }
        }
    }

    fn intern_region(&mut self, name: &str) -> Result<RegionId, Reject> {
        if let Some(id) = self.region_id(name) {
            return Ok(id);
        }
        if self.regions.len() >= MAX_REGIONS {
            return Err((RejectReason::InvalidRegion, Some("region")));
        }
        self.regions.push(name.to_string());
        Ok(RegionId((self.regions.len() - 1) as u16))
    }

    fn check_terms(&self, n: &Node, t: &OfferTerms) -> Result<(), Reject> {
        if t.gpus < 1 || t.gpus > n.healthy_mask.count_ones() {
            return Err((RejectReason::InvalidGpus, Some("gpus")));
        }
        if t.preemptible_price.is_some_and(|p| p >= t.spot_price) {
            return Err((RejectReason::InvalidPrice, Some("preemptible_price")));
        }
        if t.max_lease_s < 1 || t.max_lease_s > MAX_LEASE_S {
            return Err((RejectReason::InvalidDuration, Some("max_lease_s")));
        }
        if t.min_lease_s > t.max_lease_s {
            return Err((RejectReason::InvalidDuration, Some("min_lease_s")));
        }
        if t.notice_s > MAX_NOTICE_S {
            return Err((RejectReason::InvalidNotice, Some("notice_s")));
        }
        if !(1..=MAX_PROVISION_S).contains(&t.provision_s) {
            return Err((RejectReason::InvalidProvision, Some("provision_s")));
        }
        if t.available_until_ms <= self.now {
            return Err((RejectReason::InvalidUntil, Some("available_until_ms")));
        }
        Ok(())
    }

    /// Notices to preemptible leases on the node on withdraw (`shrink_to = None`) or amend
    /// (§3).
    fn withdraw_notices(&mut self, node: NodeId, notice_s: u32, shrink_to: Option<u32>) {
        let now = self.now;
        let deadline = now + i64::from(notice_s) * 1000;
        loop {
            if let Some(g) = shrink_to {
                let unnoticed = self
                    .leases
                    .iter()
                    .filter(|l| l.node == node && l.notice.is_none())
                    .fold(0u32, |m, l| m | l.gpu_mask);
                if unnoticed.count_ones() <= g {
                    break;
                }
            }
            let mut cands: Vec<(Price, std::cmp::Reverse<LeaseId>)> = self
                .leases
                .iter()
                .filter(|l| {
                    l.node == node && l.kind == LeaseKind::Preemptible && l.notice.is_none()
                })
                .map(|l| (l.price, std::cmp::Reverse(l.id)))
                .collect();
            cands.sort();
            let Some((_, std::cmp::Reverse(id))) = cands.first().copied() else {
                break;
            };
            self.lease_mut(id).notice = Some(Notice {
                deadline_ms: deadline,
                reason: NoticeReason::OfferWithdrawn,
            });
            self.emit(Event::PreemptionNotice {
                lease: id,
                by: None,
                deadline_ms: deadline,
                reason: NoticeReason::OfferWithdrawn,
            });
            if deadline == now {
                self.end_lease(id, EndReason::OfferWithdrawn, now);
            }
        }
    }

    fn heartbeat(&mut self, node: NodeId, healthy: u32) {
        let now = self.now;
        let n = self.node_mut(node);
        n.last_heartbeat_ms = now;
        if n.status == NodeStatus::Offline {
            n.status = NodeStatus::Online;
            self.emit(Event::NodeOnline { node });
        }
        let n = self.node(node).clone();
        let current = n.healthy_mask.count_ones();
        if current == healthy {
            return;
        }
        self.emit(Event::NodeHealth {
            node,
            healthy_gpus: healthy,
        });
        if healthy > current {
            let mut mask = n.healthy_mask;
            for i in 0..n.gpus {
                if mask.count_ones() == healthy {
                    break;
                }
                mask |= 1 << i;
            }
            self.node_mut(node).healthy_mask = mask;
            return;
        }
        let mut failed = Vec::new();
        while self.claimed(node).count_ones() > healthy {
            // pending first, then preemptible, then spot; latest start, then highest id
            let mut order: Vec<(u8, std::cmp::Reverse<i64>, std::cmp::Reverse<LeaseId>)> = self
                .leases
                .iter()
                .filter(|l| l.node == node)
                .map(|l| {
                    // a provisioning lease is not running yet: it goes with the pending ones
                    let group = match (l.state, l.kind) {
                        (LeaseState::Pending | LeaseState::Provisioning, _) => 0,
                        (LeaseState::Active, LeaseKind::Preemptible) => 1,
                        (LeaseState::Active, LeaseKind::Spot) => 2,
                    };
                    (
                        group,
                        std::cmp::Reverse(l.start_ms),
                        std::cmp::Reverse(l.id),
                    )
                })
                .collect();
            order.sort();
            let id = order[0].2.0;
            failed.push(self.end_lease(id, EndReason::NodeFailure, now));
        }
        // all claimed GPUs plus the lowest-indexed GPUs that were healthy and are unclaimed
        let claimed = self.claimed(node);
        let mut mask = claimed;
        for i in 0..n.gpus {
            if mask.count_ones() >= healthy {
                break;
            }
            if n.healthy_mask & (1 << i) != 0 {
                mask |= 1 << i;
            }
        }
        self.node_mut(node).healthy_mask = mask;
        self.failover(failed, node);
    }

    /// §12.1: a heartbeat naming exactly which GPUs are healthy.
    fn gpu_health(&mut self, node: NodeId, mask: u32) {
        let now = self.now;
        let n = self.node_mut(node);
        n.last_heartbeat_ms = now;
        if n.status == NodeStatus::Offline {
            n.status = NodeStatus::Online;
            self.emit(Event::NodeOnline { node });
        }
        let before = self.node(node).healthy_mask;
        if before == mask {
            return;
        }
        if before.count_ones() != mask.count_ones() {
            self.emit(Event::NodeHealth {
                node,
                healthy_gpus: mask.count_ones(),
            });
        }
        // every live lease holding a GPU that is not healthy ends, in lease id order
        let mut hit: Vec<LeaseId> = self
            .leases
            .iter()
            .filter(|l| l.node == node && l.gpu_mask & !mask != 0)
            .map(|l| l.id)
            .collect();
        hit.sort();
        let failed: Vec<Lease> = hit
            .into_iter()
            .map(|id| self.end_lease(id, EndReason::NodeFailure, now))
            .collect();
        self.node_mut(node).healthy_mask = mask;
        self.failover(failed, node);
    }

    fn resolve(&self, c: &Constraints) -> ResolvedConstraints {
        let mut regions: Vec<RegionId> = c
            .regions
            .iter()
            .map(|r| self.region_id(r).expect("validated"))
            .collect();
        regions.sort();
        regions.dedup();
        let mut jurisdictions = c.jurisdictions.clone();
        jurisdictions.sort();
        jurisdictions.dedup();
        ResolvedConstraints {
            regions,
            jurisdictions,
            min_interconnect: c.min_interconnect,
            nvlink: c.nvlink,
        }
    }

    fn place_bid(
        &mut self,
        account: AccountId,
        bid: &exchange::BidSpec,
        trust: TrustConstraints,
    ) -> Result<(), Reject> {
        if !valid_client_order_id(&bid.client_order_id) {
            return Err((RejectReason::InvalidClientOrderId, Some("client_order_id")));
        }
        if usize::from(bid.sku.0) >= self.catalog.len() {
            return Err((RejectReason::UnknownSku, Some("sku")));
        }
        if bid.gpus < 1
            || bid.gpus > 1024
            || (bid.placement == Placement::SingleNode && bid.gpus > 16)
        {
            return Err((RejectReason::InvalidGpus, Some("gpus")));
        }
        // §13.2: a gang's shape
        if let Placement::Gang(g) = bid.placement
            && (g.nodes == 0
                || !(1..=16).contains(&g.gpus_per_node)
                || u64::from(g.nodes) * u64::from(g.gpus_per_node) != u64::from(bid.gpus)
                || bid.min_gpus.is_some())
        {
            return Err((RejectReason::InvalidGang, Some("placement")));
        }
        // §13.5: spread IOC only, 1..=gpus
        if bid.min_gpus.is_some_and(|m| {
            m == 0
                || m > bid.gpus
                || bid.placement != Placement::Spread
                || bid.tif != TimeInForce::Ioc
        }) {
            return Err((RejectReason::InvalidGpus, Some("min_gpus")));
        }
        if let Some(d) = bid.duration_s
            && !(1..=MAX_LEASE_S).contains(&d)
        {
            return Err((RejectReason::InvalidDuration, Some("duration_s")));
        }
        if let TimeInForce::Gtc {
            expires_at_ms: Some(x),
        } = bid.tif
            && x <= self.now
        {
            return Err((RejectReason::InvalidExpiry, Some("expires_at_ms")));
        }
        let c = &bid.constraints;
        if c.regions.len() > 16 || c.jurisdictions.len() > 16 {
            return Err((RejectReason::InvalidConstraints, Some("constraints")));
        }
        if c.regions.iter().any(|r| self.region_id(r).is_none()) {
            return Err((RejectReason::UnknownRegion, Some("constraints.regions")));
        }
        if c.jurisdictions.iter().any(|j| !valid_jurisdiction(*j)) {
            return Err((
                RejectReason::InvalidJurisdiction,
                Some("constraints.jurisdictions"),
            ));
        }
        // §12.3: a reliability floor is a share, at most 100 %
        if trust.min_reliability_bp.is_some_and(|m| m > 10_000) {
            return Err((
                RejectReason::InvalidConstraints,
                Some("constraints.min_reliability"),
            ));
        }
        // §12.4: an SLA floor within what offers can promise, and not empty
        if trust.min_sla.is_some_and(|f| {
            f.availability_bp > 9_999
                || f.credit_multiple > 50
                || (f.availability_bp == 0 && f.credit_multiple == 0)
        }) {
            return Err((
                RejectReason::InvalidConstraints,
                Some("constraints.min_sla"),
            ));
        }
        if self
            .used_client_order_ids
            .iter()
            .any(|(a, s, _, _)| *a == account && *s == bid.client_order_id)
        {
            return Err((
                RejectReason::DuplicateClientOrderId,
                Some("client_order_id"),
            ));
        }
        let id = BidId(self.new_id());
        self.used_client_order_ids
            .push((account, bid.client_order_id.clone(), self.now, id));
        self.emit(Event::BidAccepted {
            bid: id,
            buyer: account,
        });
        let t = Taker {
            bid: id,
            buyer: account,
            sku: bid.sku,
            kind: bid.kind,
            placement: bid.placement,
            limit: bid.limit,
            constraints: self.resolve(&bid.constraints),
            term: match bid.duration_s {
                Some(d) => Term::Duration(d),
                None => Term::Open,
            },
            exclude: None,
            resting_priority: None,
            migrate_from: None,
            trust,
            gang: gang::gang_req(bid.placement),
        };
        // §13.5: fewer than `min_gpus` fillable now: nothing fills
        if let Some(m) = bid.min_gpus {
            let fillable = self.spread_fillable(&t, bid.gpus);
            if fillable < m {
                self.close_min_gpus(id, bid.gpus, fillable);
                return Ok(());
            }
        }
        let mut gang_short = None;
        let mut too_large = None;
        let filled = if let Placement::Gang(g) = bid.placement {
            // §13.2: a gang larger than every place (registered nodes of the SKU, any state)
            let largest = self.largest_place(bid.sku, g.scope);
            if g.nodes > largest && largest > 0 {
                too_large = Some(largest);
                0
            } else {
                // §13.2: whole from free capacity, or nothing
                match self.fill_gang(&t, &g) {
                    Ok(()) => bid.gpus,
                    Err(n) => {
                        gang_short = Some(n);
                        0
                    }
                }
            }
        } else {
            let mut filled = self.phase1(&t, bid.gpus);
            if filled < bid.gpus {
                filled += self.phase2(&t, bid.gpus - filled);
            }
            filled
        };
        let remaining = bid.gpus - filled;
        if remaining == 0 {
            self.emit(Event::BidClosed {
                bid: id,
                filled,
                unfilled: 0,
                reason: BidCloseReason::Filled,
                detail: CloseDetail::default(),
            });
            return Ok(());
        }
        match bid.tif {
            TimeInForce::Ioc => {
                let (reason, detail) = match (too_large, gang_short) {
                    (Some(k), _) => (
                        BidCloseReason::GangTooLarge,
                        CloseDetail {
                            fillable: Some(k),
                            ..CloseDetail::default()
                        },
                    ),
                    // §13.2: some place had a candidate, none all N
                    (None, Some(n)) if n > 0 => (
                        BidCloseReason::GangIncomplete,
                        CloseDetail {
                            fillable: Some(n),
                            ..CloseDetail::default()
                        },
                    ),
                    _ => self.unfilled_reason(&t, remaining),
                };
                self.emit(Event::BidClosed {
                    bid: id,
                    filled,
                    unfilled: remaining,
                    reason,
                    detail,
                });
            }
            TimeInForce::Gtc { expires_at_ms } => {
                self.emit(Event::BidRested { bid: id, remaining });
                self.bids.push(Bid {
                    id,
                    buyer: account,
                    sku: bid.sku,
                    gpus: bid.gpus,
                    remaining,
                    limit: bid.limit,
                    kind: bid.kind,
                    placement: bid.placement,
                    constraints: t.constraints.clone(),
                    duration_s: bid.duration_s,
                    expires_at_ms,
                    priority: self.seq,
                });
                if !trust.is_none() {
                    self.bid_trust.insert(id, trust);
                }
            }
        }
        Ok(())
    }
}
