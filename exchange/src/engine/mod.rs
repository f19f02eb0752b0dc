//! The engine: one struct that owns the market state and applies commands.
//!
//! - `mod.rs`: [`Engine`], `apply`, accessors, id assignment.
//! - `index.rs`: derived indexes (books, inventory, timers) and listing a node.
//! - `commands.rs`: validation and application of each command.
//! - `matching.rs`: takers (bids, failovers), phases 1–2, IOC reasons, uncross.
//! - `leases.rs`: creating, noticing and ending leases; failover.
//! - `delivery.rs`: lease delivery — provisioning, ready, not delivered, wipes, held nodes
//!   (docs/market-rules.md §11).
//! - `time.rs`: time advancement.
//! - `invariants.rs`: [`Engine::check_invariants`].
//! - `attest.rs`: attestation — a host's GPUs checked against its registration
//!   (docs/market-rules.md §12.1); per-GPU health is in `commands.rs` with the heartbeat.
//! - `verify.rs`: verification runs placed by the exchange and their judgment (§12.2).
//! - `gang.rs`: fabric domains and gangs — the all-or-none fill over domains, gang delivery
//!   and lost members (docs/market-rules.md §13).
//! - `snapshot.rs`: snapshots, restore and the state hash (state added later, [`StateExt`],
//!   follows the format-1 state only when present).

mod attest;
mod commands;
mod delivery;
mod gang;
mod index;
mod invariants;
mod leases;
mod matching;
mod snapshot;
mod sorted_map;
mod time;
mod verify;

pub use gang::{Gang, GangGroup, Member};
pub use snapshot::SnapshotError;
pub use verify::VerifyStatus;

use crate::catalog::Catalog;
use crate::command::{Command, Meta};
use crate::event::{Event, Output, RejectReason};
use crate::ids::{AccountId, BidId, LeaseId, NodeId, OfferId, RegionId, SkuId, derive_id};
use crate::inventory::{Level, LevelKey};
use crate::limits::EngineConfig;
use crate::state::{Bid, Lease, Node, Offer};
use index::Index;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

/// (buyer, client order id). The id is shared (one allocation per accepted bid) between the
/// canonical map and the index's retention queue; it serializes as a plain string.
pub(crate) type ClientOrderKey = (AccountId, std::sync::Arc<str>);

/// The canonical state: everything snapshots and the state hash cover.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct State {
    pub(crate) config: EngineConfig,
    pub(crate) catalog: Catalog,
    pub(crate) last_seq: u64,
    pub(crate) now: i64,
    pub(crate) regions: Vec<String>,
    #[serde(with = "sorted_map")]
    pub(crate) nodes: FxHashMap<NodeId, Node>,
    #[serde(with = "sorted_map")]
    pub(crate) node_names: FxHashMap<(AccountId, String), NodeId>,
    #[serde(with = "sorted_map")]
    pub(crate) offers: FxHashMap<OfferId, Offer>,
    #[serde(with = "sorted_map")]
    pub(crate) bids: FxHashMap<BidId, Bid>,
    #[serde(with = "sorted_map")]
    pub(crate) leases: FxHashMap<LeaseId, Lease>,
    /// Ended leases whose GPUs are wiping (docs/market-rules.md §11.4), by lease id.
    #[serde(with = "sorted_map", default)]
    pub(crate) wipes: FxHashMap<LeaseId, crate::state::Wipe>,
    #[serde(with = "sorted_map")]
    /// (buyer, client order id) → (bid, accepted at ms).
    pub(crate) client_orders: FxHashMap<ClientOrderKey, (BidId, i64)>,
    pub(crate) market_seq: Vec<u64>,
}

/// State added after snapshot format 1 was fixed (issue 26), encoded after [`State`] and only
/// when not empty, so a snapshot and a state hash from before stay valid
/// (`snapshot.rs`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StateExt {
    /// Each node's latest attestation (docs/market-rules.md §12.1).
    pub(crate) attestations: std::collections::BTreeMap<NodeId, crate::state::NodeAttestation>,
    /// Verification settings (§12.2); `None`: off.
    pub(crate) verify: Option<crate::verify::VerifyConfig>,
    /// Each node's verification record (§12.2).
    pub(crate) verifications: std::collections::BTreeMap<NodeId, crate::state::NodeVerify>,
    /// Trust requirements of resting bids that have some (§12).
    pub(crate) bid_trust: std::collections::BTreeMap<BidId, crate::command::TrustConstraints>,
    /// Trust requirements of live leases filled for such bids (their failovers keep them).
    pub(crate) lease_trust: std::collections::BTreeMap<LeaseId, crate::command::TrustConstraints>,
    /// Reliability scores from the engine's own events (§12.3).
    pub(crate) reliability: crate::reliability::ReliabilityBook,
    /// The UTC day whose start the matching scores below were taken at.
    pub(crate) score_day: i64,
    /// Each node's reliability (bp) at the start of `score_day`, for nodes not `new`: what a
    /// bid's `min_reliability` compares against all that day (§12.3), so eligibility changes
    /// only at midnight UTC, when every node whose score rose is looked at again.
    pub(crate) day_scores: std::collections::BTreeMap<NodeId, u32>,
    /// The SLA promise of each live offer posted with stated terms (§12.4).
    pub(crate) offer_sla: std::collections::BTreeMap<OfferId, crate::command::SlaPromise>,
}

/// [`StateExt`] as the first issue-26 build wrote it (attestations only): still decoded.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct StateExtV1 {
    pub(crate) attestations: std::collections::BTreeMap<NodeId, crate::state::NodeAttestation>,
}

/// [`StateExt`] as snapshot format 1 wrote it after the first issue-26 build: trust without
/// `min_sla`, no offer promises. Still decoded.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct StateExtV2 {
    attestations: std::collections::BTreeMap<NodeId, crate::state::NodeAttestation>,
    verify: Option<crate::verify::VerifyConfig>,
    verifications: std::collections::BTreeMap<NodeId, crate::state::NodeVerify>,
    bid_trust: std::collections::BTreeMap<BidId, TrustV2>,
    lease_trust: std::collections::BTreeMap<LeaseId, TrustV2>,
    reliability: crate::reliability::ReliabilityBook,
    score_day: i64,
    day_scores: std::collections::BTreeMap<NodeId, u32>,
}

/// [`StateExt`] borrowed in the [`StateExtV2`] layout: what a market that uses no SLA promise
/// (no offer promise, no `min_sla` anywhere) encodes, so its snapshots and state hashes stay
/// byte for byte what the build before promises wrote (a gateway checks a restored state's
/// hash against the one recorded with its snapshot).
#[derive(Serialize)]
pub(crate) struct StateExtV2Ref<'a> {
    attestations: &'a std::collections::BTreeMap<NodeId, crate::state::NodeAttestation>,
    verify: &'a Option<crate::verify::VerifyConfig>,
    verifications: &'a std::collections::BTreeMap<NodeId, crate::state::NodeVerify>,
    #[serde(serialize_with = "trust_v2_map")]
    bid_trust: &'a std::collections::BTreeMap<BidId, crate::command::TrustConstraints>,
    #[serde(serialize_with = "trust_v2_map")]
    lease_trust: &'a std::collections::BTreeMap<LeaseId, crate::command::TrustConstraints>,
    reliability: &'a crate::reliability::ReliabilityBook,
    score_day: i64,
    day_scores: &'a std::collections::BTreeMap<NodeId, u32>,
}

impl StateExt {
    /// Whether anything of §12.4 (SLA promises and floors) is held: only then is the state
    /// encoded in the current layout (snapshot format 2).
    pub(crate) fn uses_sla(&self) -> bool {
        !self.offer_sla.is_empty()
            || self
                .bid_trust
                .values()
                .chain(self.lease_trust.values())
                .any(|t| t.min_sla.is_some())
    }

    /// This state in the layout before SLA promises (see [`StateExtV2Ref`]).
    pub(crate) fn as_v2(&self) -> StateExtV2Ref<'_> {
        StateExtV2Ref {
            attestations: &self.attestations,
            verify: &self.verify,
            verifications: &self.verifications,
            bid_trust: &self.bid_trust,
            lease_trust: &self.lease_trust,
            reliability: &self.reliability,
            score_day: self.score_day,
            day_scores: &self.day_scores,
        }
    }
}

fn trust_v2_map<K: Serialize, S: serde::Serializer>(
    m: &&std::collections::BTreeMap<K, crate::command::TrustConstraints>,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_map(m.iter().map(|(k, t)| {
        let v = TrustV2 {
            verified: t.verified,
            min_reliability_bp: t.min_reliability_bp,
        };
        (k, v)
    }))
}

/// [`crate::command::TrustConstraints`] before `min_sla`.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
struct TrustV2 {
    verified: bool,
    min_reliability_bp: Option<u32>,
}

impl From<TrustV2> for crate::command::TrustConstraints {
    fn from(t: TrustV2) -> Self {
        crate::command::TrustConstraints {
            verified: t.verified,
            min_reliability_bp: t.min_reliability_bp,
            min_sla: None,
        }
    }
}

impl From<StateExtV2> for StateExt {
    fn from(v: StateExtV2) -> Self {
        fn conv<K: Ord>(
            m: std::collections::BTreeMap<K, TrustV2>,
        ) -> std::collections::BTreeMap<K, crate::command::TrustConstraints> {
            m.into_iter().map(|(k, t)| (k, t.into())).collect()
        }
        StateExt {
            attestations: v.attestations,
            verify: v.verify,
            verifications: v.verifications,
            bid_trust: conv(v.bid_trust),
            lease_trust: conv(v.lease_trust),
            reliability: v.reliability,
            score_day: v.score_day,
            day_scores: v.day_scores,
            offer_sla: std::collections::BTreeMap::new(),
        }
    }
}

impl StateExt {
    pub(crate) fn is_empty(&self) -> bool {
        self.attestations.is_empty()
            && self.verify.is_none()
            && self.verifications.is_empty()
            && self.bid_trust.is_empty()
            && self.lease_trust.is_empty()
            && self.reliability == crate::reliability::ReliabilityBook::default()
            && self.score_day == 0
            && self.day_scores.is_empty()
            && self.offer_sla.is_empty()
    }
}

/// The matching engine. See the crate docs and docs/market-rules.md.
///
/// One instance is owned by one task; it is `Send` but takes `&mut self` for every change.
#[derive(Clone)]
pub struct Engine {
    st: State,
    ext: StateExt,
    /// Fabric domains and gangs (§13), encoded after `ext` only when not empty.
    fab: gang::FabricExt,
    idx: Index,
    /// Ids assigned so far while applying the current command.
    next_k: u32,
    /// Sequence number of the command being applied.
    seq: u64,
    /// Scratch buffer for phase 1 plans: (offer, GPUs, lease end).
    scratch_plan: Vec<(OfferId, u32, i64)>,
    /// Scratch buffers for uncross: the dirty nodes' listings, those of one book that still
    /// have GPUs free (book key, free, node), and their regions.
    scratch_dirty: Vec<matching::DirtyListing>,
    scratch_live: Vec<(index::OfferKey, u32, NodeId)>,
    scratch_regions: Vec<RegionId>,
}

impl Engine {
    /// An empty market with the given configuration and SKU catalog, at time 0, sequence 0.
    pub fn new(config: EngineConfig, catalog: Catalog) -> Engine {
        let skus = catalog.len();
        let st = State {
            config,
            catalog,
            last_seq: 0,
            now: 0,
            regions: Vec::new(),
            nodes: FxHashMap::default(),
            node_names: FxHashMap::default(),
            offers: FxHashMap::default(),
            bids: FxHashMap::default(),
            leases: FxHashMap::default(),
            wipes: FxHashMap::default(),
            client_orders: FxHashMap::default(),
            market_seq: vec![0; skus],
        };
        Engine {
            idx: Index::new(skus),
            st,
            ext: StateExt::default(),
            fab: gang::FabricExt::default(),
            next_k: 0,
            seq: 0,
            scratch_plan: Vec::new(),
            scratch_dirty: Vec::new(),
            scratch_live: Vec::new(),
            scratch_regions: Vec::new(),
        }
    }

    /// Applies one command at `meta` (sequence number and time) and returns its events and
    /// inventory deltas. Never panics; a refused command yields [`Event::Rejected`].
    pub fn apply(&mut self, cmd: &Command, meta: Meta) -> Output {
        let mut out = Output::default();
        self.apply_into(cmd, meta, &mut out);
        out
    }

    /// Like [`Engine::apply`], writing into `out` (cleared first) so buffers can be reused.
    pub fn apply_into(&mut self, cmd: &Command, meta: Meta, out: &mut Output) {
        out.clear();
        if meta.seq <= self.st.last_seq {
            out.events.push(Event::Rejected {
                reason: RejectReason::StaleSequence,
                field: Some("seq"),
            });
            return;
        }
        if meta.seq > crate::limits::MAX_SEQ {
            out.events.push(Event::Rejected {
                reason: RejectReason::SequenceOutOfRange,
                field: Some("seq"),
            });
            return;
        }
        if meta.timestamp_ms < self.st.now {
            out.events.push(Event::Rejected {
                reason: RejectReason::ClockRegression,
                field: Some("timestamp_ms"),
            });
            return;
        }
        self.st.last_seq = meta.seq;
        self.seq = meta.seq;
        self.next_k = 0;
        let previous = self.st.now;
        self.st.now = meta.timestamp_ms;
        if matches!(cmd, Command::Resume) {
            self.discount_outage(previous);
        }
        self.advance_time(&mut out.events);
        self.settle_gangs(&mut out.events);
        self.uncross(&mut out.events);
        if let Err((reason, field)) = self.apply_command(cmd, &mut out.events) {
            out.events.push(Event::Rejected {
                reason,
                field: Some(field),
            });
        }
        self.settle_gangs(&mut out.events);
        self.uncross(&mut out.events);
        self.idx.ended_trust.clear();
        // §12.3: the score follows every event (a launch-spec failure loses the supplier
        // nothing: the book is told before it sees the lease end).
        if let Command::ReportLaunchFailed { lease, .. } = cmd
            && out.rejection().is_none()
        {
            self.ext.reliability.observe_launch_failed(*lease);
        }
        for l in self.idx.gang_collateral.drain(..) {
            self.ext.reliability.observe_launch_failed(l);
        }
        let now = self.st.now;
        for e in &out.events {
            self.ext.reliability.observe(now, e);
        }
        self.idx
            .inventory
            .drain_deltas(&mut self.st.market_seq, &mut out.deltas);
    }

    /// The next engine-assigned id of the current command ([`derive_id`]).
    fn next_id(&mut self) -> u64 {
        let id = derive_id(self.seq, self.next_k);
        self.next_k += 1;
        id
    }

    /// Time of the last applied command, ms since epoch (0 before the first).
    pub fn now_ms(&self) -> i64 {
        self.st.now
    }

    /// Sequence number of the last applied command (0 before the first).
    pub fn last_seq(&self) -> u64 {
        self.st.last_seq
    }

    /// The SKU catalog.
    pub fn catalog(&self) -> &Catalog {
        &self.st.catalog
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.st.config
    }

    /// The name of a region id.
    pub fn region_name(&self, id: RegionId) -> Option<&str> {
        self.st.regions.get(usize::from(id.0)).map(String::as_str)
    }

    /// The id of a region name, if a node was ever registered there.
    pub fn region_id(&self, name: &str) -> Option<RegionId> {
        self.st
            .regions
            .iter()
            .position(|r| r == name)
            .map(|i| RegionId(i as u16))
    }

    /// All inventory levels, ordered by (SKU, region, kind, price).
    pub fn inventory(&self) -> Vec<(LevelKey, Level)> {
        self.idx.inventory.iter().collect()
    }

    /// A node's fabric facts (§13.1), if it stated any.
    pub fn node_fabric(&self, node: NodeId) -> Option<&crate::command::NodeFabric> {
        self.fab.node_fabric.get(&node)
    }

    /// A gang with a live member, by its bid id (docs/market-rules.md §13).
    pub fn gang(&self, bid: BidId) -> Option<&Gang> {
        self.fab.gangs.get(&bid)
    }

    /// Every gang with a live member, in bid id order.
    pub fn gangs(&self) -> impl Iterator<Item = (BidId, &Gang)> {
        self.fab.gangs.iter().map(|(b, g)| (*b, g))
    }

    /// The (gang, rank) of a live gang member lease.
    pub fn lease_gang(&self, lease: LeaseId) -> Option<(BidId, u32)> {
        self.idx.lease_gang.get(&lease).copied()
    }

    /// The last inventory delta sequence number of a market (SKU); 0 before any delta.
    pub fn market_seq(&self, sku: SkuId) -> u64 {
        self.st
            .market_seq
            .get(usize::from(sku.0))
            .copied()
            .unwrap_or(0)
    }

    /// A node by id.
    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.st.nodes.get(&id)
    }

    /// A node's latest attestation (docs/market-rules.md §12.1), if it sent one.
    pub fn attestation(&self, node: NodeId) -> Option<&crate::state::NodeAttestation> {
        self.ext.attestations.get(&node)
    }

    /// A supplier's node by its name.
    pub fn node_by_name(&self, supplier: AccountId, name: &str) -> Option<&Node> {
        self.st
            .node_names
            .get(&(supplier, name.to_string()))
            .and_then(|id| self.st.nodes.get(id))
    }

    /// All nodes, in id order.
    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        sorted_map::values_in_key_order(&self.st.nodes)
    }

    /// A live offer by id.
    pub fn offer(&self, id: OfferId) -> Option<&Offer> {
        self.st.offers.get(&id)
    }

    /// All live offers, in id order.
    pub fn offers(&self) -> impl Iterator<Item = &Offer> {
        sorted_map::values_in_key_order(&self.st.offers)
    }

    /// A resting bid by id.
    pub fn bid(&self, id: BidId) -> Option<&Bid> {
        self.st.bids.get(&id)
    }

    /// The bid an account placed under a client order id, if it was accepted.
    pub fn bid_by_client_order_id(&self, buyer: AccountId, client_order_id: &str) -> Option<BidId> {
        self.st
            .client_orders
            .get(&(buyer, std::sync::Arc::from(client_order_id)))
            .map(|e| e.0)
    }

    /// Every remembered client order id with its buyer and bid, in no particular order (for
    /// building lookups; nothing ordered may be derived from it).
    pub fn client_order_ids(&self) -> impl Iterator<Item = (AccountId, &str, BidId)> {
        self.st
            .client_orders
            .iter()
            .map(|((a, c), (b, _))| (*a, &**c, *b))
    }

    /// All resting bids, in id order.
    pub fn bids(&self) -> impl Iterator<Item = &Bid> {
        sorted_map::values_in_key_order(&self.st.bids)
    }

    /// A live (active or pending) lease by id.
    pub fn lease(&self, id: LeaseId) -> Option<&Lease> {
        self.st.leases.get(&id)
    }

    /// All live leases, in id order.
    pub fn leases(&self) -> impl Iterator<Item = &Lease> {
        sorted_map::values_in_key_order(&self.st.leases)
    }

    /// An ended lease whose GPUs are still wiping (docs/market-rules.md §11.4).
    pub fn wipe(&self, lease: LeaseId) -> Option<&crate::state::Wipe> {
        self.st.wipes.get(&lease)
    }

    /// All wipes under way, in lease id order.
    pub fn wipes(&self) -> impl Iterator<Item = &crate::state::Wipe> {
        sorted_map::values_in_key_order(&self.st.wipes)
    }

    /// GPUs of a node listed free in the market now (docs/market-rules.md §2): 0 when the node
    /// is offline, draining, has no offer or has nothing free.
    pub fn listed_free_gpus(&self, node: NodeId) -> u32 {
        self.idx.listings.get(&node).map_or(0, |l| l.free)
    }
}
