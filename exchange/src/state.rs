//! The engine's canonical state records: nodes, offers, resting bids and live leases.
//!
//! These are read-only to callers (through [`crate::Engine`]'s accessors); all fields are
//! public for inspection. Everything here is serialized into snapshots and the state hash, so
//! every collection is ordered (no hash maps).

use crate::command::{Interconnect, Jurisdiction, LeaseKind, OfferTerms, Placement};
use crate::ids::{AccountId, BidId, LeaseId, NodeId, OfferId, RegionId, SkuId};
use crate::price::Price;
use serde::{Deserialize, Serialize};

/// Online or offline (missed heartbeats).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeStatus {
    /// Heartbeating.
    Online,
    /// Silent for longer than the heartbeat timeout.
    Offline,
}

/// A registered GPU node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// Id.
    pub id: NodeId,
    /// Owning supplier.
    pub supplier: AccountId,
    /// Supplier's name for it.
    pub name: String,
    /// GPU model.
    pub sku: SkuId,
    /// Physical GPUs (1..=16).
    pub gpus: u32,
    /// Region.
    pub region: RegionId,
    /// Jurisdiction.
    pub jurisdiction: Jurisdiction,
    /// Fabric.
    pub interconnect: Interconnect,
    /// NVLink within the node.
    pub nvlink: bool,
    /// Online or offline.
    pub status: NodeStatus,
    /// Takes no new leases when true.
    pub draining: bool,
    /// Last heartbeat (or registration), ms since epoch.
    pub last_heartbeat_ms: i64,
    /// Healthy GPUs: bit i = GPU i.
    pub healthy_mask: u32,
    /// The live offer, if any.
    pub offer: Option<OfferId>,
    /// Live leases (active and pending) on this node, in creation order.
    pub leases: Vec<LeaseId>,
    /// OR of the GPU masks of the live leases (kept in step with `leases`).
    pub claimed_mask: u32,
    /// GPUs of ended leases still wiping (docs/market-rules.md §11.4): OR of the masks of this
    /// node's wipes. Never free.
    #[serde(default)]
    pub wiping_mask: u32,
    /// Held off the market until the supplier resumes it (§11.8); `None`: not held.
    #[serde(default)]
    pub held: Option<crate::event::HoldReason>,
}

/// A node's latest attestation (docs/market-rules.md §12.1).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAttestation {
    /// When it arrived, ms since epoch.
    pub at_ms: i64,
    /// The UUIDs attested, in index order.
    pub uuids: Vec<String>,
    /// How it differed from the registration; `None`: it matched.
    pub mismatch: Option<crate::event::AttestationMismatch>,
}

/// A node's latest verification result (docs/market-rules.md §12.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeVerification {
    /// The run that produced it (its lease id).
    pub lease: LeaseId,
    /// When the run ended, ms since epoch.
    pub at_ms: i64,
    /// The judgment.
    pub judgment: crate::verify::Judgment,
}

/// A verification run under way on a node (§12.2): an unbilled lease of all its healthy GPUs,
/// placed by the exchange; the node is not listed while it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerificationRun {
    /// The run's lease id (what the agent reports against).
    pub lease: LeaseId,
    /// The GPUs under test: bit i = GPU i.
    pub gpu_mask: u32,
    /// When it started, ms since epoch.
    pub started_ms: i64,
    /// It fails unless reported by then, ms since epoch.
    pub deadline_ms: i64,
    /// Why it was placed.
    pub trigger: crate::event::VerifyTrigger,
}

/// A node's verification bookkeeping (§12.2): the latest result, the run under way and when
/// the next one is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeVerify {
    /// The latest finished run.
    pub last: Option<NodeVerification>,
    /// The run under way.
    pub run: Option<VerificationRun>,
    /// When the next run is due, ms since epoch (`None` while one runs).
    pub due_ms: Option<i64>,
    /// Why the next run is due.
    pub due_trigger: crate::event::VerifyTrigger,
}

impl Node {
    /// Number of healthy GPUs.
    pub fn healthy_gpus(&self) -> u32 {
        self.healthy_mask.count_ones()
    }

    /// GPUs no new lease may take: held by a live lease or wiping (docs/market-rules.md §2,
    /// §11.4).
    pub fn occupied_mask(&self) -> u32 {
        self.claimed_mask | self.wiping_mask
    }
}

/// A live offer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offer {
    /// Id.
    pub id: OfferId,
    /// Node it sells.
    pub node: NodeId,
    /// Supplier.
    pub supplier: AccountId,
    /// Current terms.
    pub terms: OfferTerms,
    /// Time priority: the sequence number of the post or of the last amend that reset it.
    pub priority: u64,
}

/// A resting (GTC) bid with GPUs still wanted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bid {
    /// Id.
    pub id: BidId,
    /// Buyer.
    pub buyer: AccountId,
    /// GPU model.
    pub sku: SkuId,
    /// GPUs asked for in total.
    pub gpus: u32,
    /// GPUs still wanted (> 0 while resting).
    pub remaining: u32,
    /// Limit, CNY per GPU-hour.
    pub limit: Price,
    /// Spot or preemptible.
    pub kind: LeaseKind,
    /// Placement.
    pub placement: Placement,
    /// Resolved constraints.
    pub constraints: ResolvedConstraints,
    /// Fixed term in seconds, or open-ended.
    pub duration_s: Option<u64>,
    /// GTC expiry, ms since epoch.
    pub expires_at_ms: Option<i64>,
    /// Time priority (sequence number of the PlaceBid).
    pub priority: u64,
}

/// Constraints with region names resolved to ids; lists sorted and deduplicated.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ResolvedConstraints {
    /// Allowed regions (empty = any).
    pub regions: Vec<RegionId>,
    /// Allowed jurisdictions (empty = any).
    pub jurisdictions: Vec<Jurisdiction>,
    /// Minimum fabric.
    pub min_interconnect: Option<Interconnect>,
    /// NVLink required.
    pub nvlink: bool,
}

impl ResolvedConstraints {
    /// True when a node with these attributes satisfies the constraints.
    pub fn admits(&self, node: &Node) -> bool {
        self.admits_site(&Site::of(node))
    }

    /// True when a node at `site` satisfies the constraints.
    pub(crate) fn admits_site(&self, site: &Site) -> bool {
        (self.regions.is_empty() || self.regions.binary_search(&site.region).is_ok())
            && (self.jurisdictions.is_empty()
                || self.jurisdictions.binary_search(&site.jurisdiction).is_ok())
            && self.min_interconnect.is_none_or(|m| site.interconnect >= m)
            && (!self.nvlink || site.nvlink)
    }
}

/// A node's placement attributes: the ones bid constraints filter on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Site {
    pub(crate) region: RegionId,
    pub(crate) jurisdiction: Jurisdiction,
    pub(crate) interconnect: Interconnect,
    pub(crate) nvlink: bool,
}

impl Site {
    pub(crate) fn of(node: &Node) -> Site {
        Site {
            region: node.region,
            jurisdiction: node.jurisdiction,
            interconnect: node.interconnect,
            nvlink: node.nvlink,
        }
    }
}

/// Pending (waiting for a preemption deadline), provisioning (delivery on: waiting for the
/// supplier's ready report) or active (running).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LeaseState {
    /// Created, starts at `start_ms`.
    Pending,
    /// Holds its GPUs; the supplier's node is provisioning it (docs/market-rules.md §11.1).
    /// Not billed. `provision_deadline_ms` is `None` while it waits for its GPUs' wipe.
    Provisioning,
    /// Running (with delivery on: since `ready_ms`).
    Active,
}

/// A notice given to a preemptible lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    /// When the lease ends, ms since epoch.
    pub deadline_ms: i64,
    /// Preempted by a bid, or offer withdrawn/shrunk.
    pub reason: crate::event::NoticeReason,
}

/// A live lease on concrete GPUs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// Id (also the fill id).
    pub id: LeaseId,
    /// The bid it filled.
    pub bid: BidId,
    /// The offer it traded against.
    pub offer: OfferId,
    /// Node.
    pub node: NodeId,
    /// Buyer.
    pub buyer: AccountId,
    /// Supplier.
    pub supplier: AccountId,
    /// GPU model.
    pub sku: SkuId,
    /// Region of the node at creation.
    pub region: RegionId,
    /// Spot or preemptible.
    pub kind: LeaseKind,
    /// GPU count (= popcount of `gpu_mask`).
    pub gpus: u32,
    /// The concrete GPUs: bit i = GPU i of the node.
    pub gpu_mask: u32,
    /// Price per GPU-hour, CNY.
    pub price: Price,
    /// Start, ms since epoch.
    pub start_ms: i64,
    /// End if not ended earlier, ms since epoch.
    pub end_ms: i64,
    /// Pending or active.
    pub state: LeaseState,
    /// Preemption/withdrawal notice, if given.
    pub notice: Option<Notice>,
    /// What a failover re-bids for.
    pub origin: LeaseOrigin,
    /// Provisioning deadline while provisioning (§11.1), ms since epoch; `None` before
    /// provisioning begins (pending, or waiting for a wipe) and once ready.
    #[serde(default)]
    pub provision_deadline_ms: Option<i64>,
    /// When the supplier reported it ready (billing starts), ms since epoch.
    #[serde(default)]
    pub ready_ms: Option<i64>,
}

impl Lease {
    /// When the lease will end if nothing else happens: the notice deadline if earlier than
    /// `end_ms`.
    pub fn effective_end_ms(&self) -> i64 {
        match self.notice {
            Some(n) if n.deadline_ms < self.end_ms => n.deadline_ms,
            _ => self.end_ms,
        }
    }
}

/// An ended lease's GPUs wiping (docs/market-rules.md §11.4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wipe {
    /// The ended lease.
    pub lease: LeaseId,
    /// Its node.
    pub node: NodeId,
    /// Its buyer.
    pub buyer: AccountId,
    /// The node's supplier.
    pub supplier: AccountId,
    /// GPUs wiping: bit i = GPU i.
    pub gpu_mask: u32,
    /// Teardown deadline, ms since epoch.
    pub deadline_ms: i64,
}

/// The bid terms a lease came from, kept for failover.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseOrigin {
    /// The bid's limit, CNY per GPU-hour.
    pub limit: Price,
    /// Its placement.
    pub placement: Placement,
    /// Its constraints.
    pub constraints: ResolvedConstraints,
    /// Fixed end (start + duration) if the bid had a duration.
    pub fixed_end_ms: Option<i64>,
}
