//! Commands: everything that can change the market, each applied with a [`Meta`].

use crate::ids::{AccountId, BidId, LeaseId, NodeId, OfferId, SkuId};
use crate::price::Price;
use serde::{Deserialize, Serialize};

/// Sequence number and time a command is applied with; assigned by the sequencer, never read
/// from a clock inside the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// Strictly increasing across applied commands (≥ 1).
    pub seq: u64,
    /// Milliseconds since the Unix epoch (UTC); never below the previous command's.
    pub timestamp_ms: i64,
}

/// Network fabric between nodes, ordered `Pcie < Roce < Infiniband`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Interconnect {
    /// PCIe / plain Ethernet only.
    Pcie,
    /// RDMA over converged Ethernet (RoCE v2).
    Roce,
    /// InfiniBand.
    Infiniband,
}

/// ISO 3166-1 alpha-2 country code (two ASCII uppercase letters) a node's data stays in, for
/// data-compliance filters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Jurisdiction(pub [u8; 2]);

impl Jurisdiction {
    /// Parses two ASCII uppercase letters, e.g. `"CN"`.
    pub fn parse(s: &str) -> Option<Jurisdiction> {
        let b = s.as_bytes();
        (b.len() == 2 && b.iter().all(u8::is_ascii_uppercase)).then(|| Jurisdiction([b[0], b[1]]))
    }

    /// True when both bytes are ASCII uppercase letters.
    pub fn is_valid(self) -> bool {
        self.0.iter().all(u8::is_ascii_uppercase)
    }
}

impl std::fmt::Display for Jurisdiction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.0[0] as char, self.0[1] as char)
    }
}

/// Spot (never interrupted by other bids) or preemptible (may be preempted with notice).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum LeaseKind {
    /// Non-interruptible lease at the offer's spot price.
    Spot,
    /// Interruptible lease paying its own bid (pay-as-bid).
    Preemptible,
}

/// How a bid's GPUs may be spread over nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Placement {
    /// All GPUs on one node, or none.
    SingleNode,
    /// Any number of nodes.
    Spread,
    /// All-or-none: `nodes` nodes of one fabric domain (or one region), `gpus_per_node` GPUs
    /// on each, in one command or not at all (docs/market-rules.md §13.2, issue 27).
    Gang(GangSpec),
}

/// A gang's shape (§13.2): `nodes` × `gpus_per_node` GPUs, one lease per node, all on one
/// fabric domain (or one region) of one supplier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GangSpec {
    /// Nodes, 1..; `nodes * gpus_per_node` ≤ [`crate::limits::MAX_BID_GPUS`].
    pub nodes: u32,
    /// GPUs on each node, 1..=[`crate::limits::MAX_NODE_GPUS`].
    pub gpus_per_node: u32,
    /// What the nodes must share.
    pub scope: GangScope,
    /// What happens when a running member is lost and cannot be replaced.
    pub on_member_loss: MemberLoss,
}

/// What a gang's nodes share (§13.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum GangScope {
    /// One fabric domain (the supplier's IB/RoCE fabric, [`NodeFabric::domain`]).
    Domain,
    /// One region of one supplier (no fabric required).
    Region,
}

/// What a running gang does when a member is lost and no replacement fits (§13.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum MemberLoss {
    /// The other members run on (`GangDegraded`).
    Keep,
    /// Every other member ends too (`gang_ended`).
    EndAll,
}

/// A node's fabric (§13.1): the supplier's id for the IB/RoCE fabric it is on, and its NIC
/// bandwidth. A domain belongs to one supplier: `(supplier, domain)` names it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NodeFabric {
    /// Fabric domain, 1..=[`crate::limits::MAX_DOMAIN_LEN`] of `[A-Za-z0-9._-]`; `None`: on
    /// no shared fabric (takes no domain-scoped gang).
    pub domain: Option<String>,
    /// Sum of the node's NIC bandwidth, Gbit/s, 1..=[`crate::limits::MAX_NIC_GBPS`].
    pub nic_gbps: Option<u32>,
}

impl NodeFabric {
    /// True when neither part is set.
    pub fn is_empty(&self) -> bool {
        self.domain.is_none() && self.nic_gbps.is_none()
    }
}

/// Time in force of a bid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TimeInForce {
    /// Immediate or cancel: fill what can fill now, end the rest.
    Ioc,
    /// Good till cancelled: the unfilled rest stays on the book, until `expires_at_ms` (ms since
    /// epoch) when given.
    Gtc {
        /// When the resting remainder expires, ms since epoch.
        expires_at_ms: Option<i64>,
    },
}

/// Filters on where a bid's GPUs may be. Empty lists mean "any".
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Constraints {
    /// Allowed region names (each must already be known to the engine); ≤ 16 entries.
    pub regions: Vec<String>,
    /// Allowed jurisdictions; ≤ 16 entries.
    pub jurisdictions: Vec<Jurisdiction>,
    /// Minimum network fabric of the node.
    pub min_interconnect: Option<Interconnect>,
    /// Require NVLink between the GPUs within the node.
    pub nvlink: bool,
}

/// What a bid requires of a supplier's trust record (docs/market-rules.md §12, issue 26), on
/// top of [`Constraints`]. The default requires nothing. Kept apart from [`Constraints`] so
/// journals and snapshots from before still decode: a bid with requirements is
/// [`Command::PlaceTrustBid`], and they follow its leases into a failover.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TrustConstraints {
    /// Only nodes whose latest verification run is `verified` and not stale (§12.2).
    pub verified: bool,
    /// Only nodes whose reliability at the start of the current UTC day is at least this,
    /// basis points (`9900` = 0.99; 0..=10000); a `new` node has none and never qualifies
    /// (§12.3).
    pub min_reliability_bp: Option<u32>,
    /// Only offers whose supplier stated SLA terms at least this good (§12.4); an offer
    /// without stated terms promises nothing and never qualifies. Appended last with a
    /// default, so journals from before decode alike.
    #[serde(default)]
    pub min_sla: Option<SlaFloor>,
}

impl TrustConstraints {
    /// True when nothing is required.
    pub fn is_none(&self) -> bool {
        !self.verified && self.min_reliability_bp.is_none() && self.min_sla.is_none()
    }
}

/// What an offer's SLA terms promise, as matching compares them (docs/market-rules.md §12.4):
/// the parts of the supplier's stated terms a bid's `min_sla` can require. The rest of the
/// terms (outage cap, credit cap, non-delivery credit) are settlement's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SlaPromise {
    /// Promised monthly availability, basis points 9000..=9999 (`9990` = 99.90 %).
    pub availability_bp: u32,
    /// Credit multiple of the outage charge, 1..=50.
    pub credit_multiple: u16,
}

/// The least SLA a bid takes (§12.4, `constraints.min_sla`): each part 0 requires nothing of
/// that part; at least one is set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SlaFloor {
    /// Least promised availability, basis points 0..=9999 (0: any).
    pub availability_bp: u32,
    /// Least credit multiple, 0..=50 (0: any).
    pub credit_multiple: u16,
}

impl SlaFloor {
    /// Whether an offer promising `p` (None: no stated terms) meets this floor.
    pub fn admits(&self, p: Option<&SlaPromise>) -> bool {
        p.is_some_and(|p| {
            p.availability_bp >= self.availability_bp && p.credit_multiple >= self.credit_multiple
        })
    }
}

/// A node as a supplier registers it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NodeSpec {
    /// Supplier's name for the node, unique per account: 1..=64 of `[A-Za-z0-9._-]`.
    pub name: String,
    /// GPU model.
    pub sku: SkuId,
    /// Physical GPUs, 1..=16.
    pub gpus: u32,
    /// Region, e.g. `cn-east-2`: 1..=32 of `[a-z0-9-]`.
    pub region: String,
    /// Country whose jurisdiction the node is in.
    pub jurisdiction: Jurisdiction,
    /// Network fabric to other nodes.
    pub interconnect: Interconnect,
    /// NVLink between the node's GPUs.
    pub nvlink: bool,
    /// Its fabric domain and NIC bandwidth (§13.1). Appended last and written only when set,
    /// so journal records from before decode and re-encode alike.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric: Option<NodeFabric>,
}

/// Changes to a registered node; `None` leaves a field as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NodeUpdate {
    /// New region name.
    pub region: Option<String>,
    /// New jurisdiction.
    pub jurisdiction: Option<Jurisdiction>,
    /// New network fabric.
    pub interconnect: Option<Interconnect>,
    /// NVLink present or not.
    pub nvlink: Option<bool>,
    /// Draining: takes no new leases, existing leases run on.
    pub draining: Option<bool>,
    /// New fabric facts, replacing the node's (§13.1; an empty one clears them). Appended
    /// last and written only when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric: Option<NodeFabric>,
}

/// The terms of an offer (ask) on one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OfferTerms {
    /// GPUs of the node put on the market, 1..=healthy GPUs.
    pub gpus: u32,
    /// Price of a spot lease, CNY per GPU-hour.
    pub spot_price: Price,
    /// Lowest price accepted for a preemptible lease (must be below `spot_price`); `None`: no
    /// preemptible leases.
    pub preemptible_price: Option<Price>,
    /// Shortest lease a bid with a fixed duration may ask for, seconds (≤ `max_lease_s`).
    pub min_lease_s: u64,
    /// Longest lease, seconds (1..=[`crate::limits::MAX_LEASE_SECONDS`]); also the term of an
    /// open-ended lease.
    pub max_lease_s: u64,
    /// The offer leaves the market at this time, ms since epoch; no lease runs past it.
    pub available_until_ms: i64,
    /// Notice a preemptible lease on this offer gets before it ends, seconds (0..=900).
    pub notice_s: u32,
    /// Provisioning deadline, seconds (1..=[`crate::limits::MAX_PROVISION_SECONDS`]): a lease
    /// on this offer must be reported ready this long after its GPUs become its, or it ends
    /// not delivered and fails over (docs/market-rules.md §11; only with delivery on).
    #[serde(default = "crate::limits::default_provision_s")]
    pub provision_s: u32,
}

/// A buyer's bid.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BidSpec {
    /// Buyer's id for the bid, unique per account: 1..=64 printable ASCII bytes.
    pub client_order_id: String,
    /// GPU model.
    pub sku: SkuId,
    /// GPUs wanted, 1..=1024 (1..=16 for single-node placement).
    pub gpus: u32,
    /// Highest price per GPU-hour the buyer pays, CNY.
    pub limit: Price,
    /// Spot or preemptible.
    pub kind: LeaseKind,
    /// One node or any.
    pub placement: Placement,
    /// Where the GPUs may be.
    pub constraints: Constraints,
    /// Lease term in seconds (1..=[`crate::limits::MAX_LEASE_SECONDS`]); `None`: open-ended (the
    /// offer's `max_lease_s`, cut at its `available_until_ms`).
    pub duration_s: Option<u64>,
    /// IOC or GTC.
    pub tif: TimeInForce,
    /// Spread IOC bids only: fill at least this many GPUs in this command, or none
    /// (1..=`gpus`; docs/market-rules.md §13.5). Appended last and written only when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_gpus: Option<u32>,
}

/// One GPU as the node agent found it (NVML), in an attestation (§12.1).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AttestedGpu {
    /// GPU index, 0..the node's GPUs.
    pub index: u32,
    /// The GPU's UUID (`GPU-…`), 1..=[`crate::limits::MAX_GPU_UUID_LEN`] printable ASCII.
    pub uuid: String,
    /// Model name as NVML reports it (`NVIDIA H100 80GB HBM3`), 1..=64 characters.
    pub model: String,
    /// Memory, MiB.
    pub memory_mib: u32,
}

/// A command to the engine. Every command except [`Command::Tick`], [`Command::Resume`] and
/// [`Command::EndLeaseInsufficientFunds`] (issued by the platform) carries the account that
/// issued it; a command on another account's node, offer, bid or lease is rejected.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Command {
    /// Register a new node (online, with all GPUs healthy; registration counts as a heartbeat).
    RegisterNode {
        /// Supplier.
        account: AccountId,
        /// The node.
        spec: NodeSpec,
    },
    /// Change a node's location, fabric or draining flag.
    UpdateNode {
        /// Supplier.
        account: AccountId,
        /// The node.
        node: NodeId,
        /// The changes.
        update: NodeUpdate,
    },
    /// Node agent heartbeat with the number of healthy GPUs.
    Heartbeat {
        /// Supplier.
        account: AccountId,
        /// The node.
        node: NodeId,
        /// Healthy GPUs, 0..=the node's GPUs.
        healthy_gpus: u32,
    },
    /// Put (part of) a node on the market; at most one live offer per node.
    PostOffer {
        /// Supplier.
        account: AccountId,
        /// The node.
        node: NodeId,
        /// Terms.
        terms: OfferTerms,
    },
    /// Replace an offer's terms (same offer id).
    AmendOffer {
        /// Supplier.
        account: AccountId,
        /// The offer.
        offer: OfferId,
        /// New terms.
        terms: OfferTerms,
    },
    /// Take an offer off the market.
    WithdrawOffer {
        /// Supplier.
        account: AccountId,
        /// The offer.
        offer: OfferId,
    },
    /// Place a bid.
    PlaceBid {
        /// Buyer.
        account: AccountId,
        /// The bid.
        bid: BidSpec,
    },
    /// Cancel a resting bid.
    CancelBid {
        /// Buyer.
        account: AccountId,
        /// The bid.
        bid: BidId,
    },
    /// End one of the buyer's leases now.
    ReleaseLease {
        /// Buyer.
        account: AccountId,
        /// The lease.
        lease: LeaseId,
    },
    /// End a lease whose buyer cannot pay (sent by settlement through the gateway).
    EndLeaseInsufficientFunds {
        /// The lease.
        lease: LeaseId,
    },
    /// Advance time only (every command advances time first; see docs/market-rules.md).
    Tick,
    /// The exchange itself was down between the previous command and this one (a restart,
    /// or its journal unreachable): that span does not count against node heartbeats. Every
    /// online node's last heartbeat moves forward by the gap (at most to now) *before* time
    /// advances, so nodes get the rest of their timeout to report again instead of all
    /// failing at once (docs/market-rules.md, rule 6). Sent by the gateway's sequencer when
    /// the gap since its last journaled command exceeds the heartbeat timeout.
    Resume,
    /// The supplier's node has the lease's workload up: the lease runs (and is billed) from
    /// now (docs/market-rules.md §11.2). Repeats are accepted and do nothing.
    ReportReady {
        /// Supplier.
        account: AccountId,
        /// The lease.
        lease: LeaseId,
    },
    /// The supplier's node could not deliver the lease: it ends `not_delivered` (never
    /// charged), fails over, and the node is held (§11.3).
    ReportFailed {
        /// Supplier.
        account: AccountId,
        /// The lease.
        lease: LeaseId,
    },
    /// The supplier's node could not start the lease's workload because of the buyer's launch
    /// spec (the image cannot be pulled, the command is invalid): the lease ends
    /// `not_delivered` (never charged) without holding the node and without a failover, which
    /// could only fail the same way (§11.3b, issue 25). Same checks as [`Command::ReportFailed`].
    ReportLaunchFailed {
        /// Supplier.
        account: AccountId,
        /// The lease.
        lease: LeaseId,
    },
    /// The supplier's node lost a running lease's workload (the GPUs failed, the host
    /// rebooted, the container died and cannot come back): the lease ends `node_failure` now
    /// (billing stops at the report), its GPUs wipe, and it fails over as on a node failure,
    /// with the SLA credit; the node stays listed (§11.3a, issue 25).
    ReportLost {
        /// Supplier.
        account: AccountId,
        /// The running lease.
        lease: LeaseId,
    },
    /// The supplier's node wiped an ended lease's GPUs: they are free again (§11.5).
    ReportTornDown {
        /// Supplier.
        account: AccountId,
        /// The ended lease.
        lease: LeaseId,
    },
    /// The supplier puts a held node back on the market (§11.8). On a node not held it does
    /// nothing.
    ResumeNode {
        /// Supplier.
        account: AccountId,
        /// The node.
        node: NodeId,
    },
    /// What the node agent found on the host (§12.1, issue 26): checked against what the
    /// node registered; a mismatch holds the node.
    AttestNode {
        /// Supplier.
        account: AccountId,
        /// The node.
        node: NodeId,
        /// Every GPU found, in index order.
        gpus: Vec<AttestedGpu>,
    },
    /// Node agent heartbeat naming which GPUs are healthy (docs/market-rules.md §12.1, issue
    /// 26): counts as a heartbeat; every live lease on a GPU outside `healthy_mask` ends
    /// `node_failure` (and fails over), the others keep running, and exactly the healthy GPUs
    /// not leased or wiping are free.
    GpuHealth {
        /// Supplier.
        account: AccountId,
        /// The node.
        node: NodeId,
        /// Healthy GPUs: bit i = GPU index i; no bit at or above the node's GPU count.
        healthy_mask: u32,
    },
    /// What a verification run measured (§12.2), from the node's agent: judged against the
    /// SKU's reference figures, the run ends `verified`, `degraded` or `failed` (held).
    ReportVerification {
        /// Supplier.
        account: AccountId,
        /// The run's lease id.
        lease: LeaseId,
        /// The figures.
        figures: crate::verify::VerificationFigures,
    },
    /// [`Command::PlaceBid`] with trust requirements (§12): only nodes that meet them fill it,
    /// now, resting and in a failover of its leases.
    PlaceTrustBid {
        /// Buyer.
        account: AccountId,
        /// The bid.
        bid: BidSpec,
        /// What it requires.
        trust: TrustConstraints,
    },
    /// [`Command::PostOffer`] with the SLA promise of the supplier's stated terms (§12.4):
    /// bids with `min_sla` take only offers whose promise meets it. The promise stays with
    /// the offer (an amendment keeps it) until it leaves the market.
    PostOfferSla {
        /// Supplier.
        account: AccountId,
        /// The node.
        node: NodeId,
        /// Terms.
        terms: OfferTerms,
        /// What its SLA terms promise.
        sla: SlaPromise,
    },
    /// End every live lease of one of the buyer's bids (each as [`Command::ReleaseLease`], in
    /// lease id order) and cancel its resting rest (§13.6).
    ReleaseBid {
        /// Buyer.
        account: AccountId,
        /// The bid.
        bid: BidId,
    },
}

impl Command {
    /// The buyer and bid of a command that places one ([`Command::PlaceBid`],
    /// [`Command::PlaceTrustBid`]); `None` for any other.
    pub fn placed_bid(&self) -> Option<(AccountId, &BidSpec)> {
        match self {
            Command::PlaceBid { account, bid } | Command::PlaceTrustBid { account, bid, .. } => {
                Some((*account, bid))
            }
            _ => None,
        }
    }

    /// Short snake_case name of the command type, for metrics and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Command::RegisterNode { .. } => "register_node",
            Command::UpdateNode { .. } => "update_node",
            Command::Heartbeat { .. } => "heartbeat",
            Command::PostOffer { .. } => "post_offer",
            Command::AmendOffer { .. } => "amend_offer",
            Command::WithdrawOffer { .. } => "withdraw_offer",
            Command::PlaceBid { .. } => "place_bid",
            Command::CancelBid { .. } => "cancel_bid",
            Command::ReleaseLease { .. } => "release_lease",
            Command::EndLeaseInsufficientFunds { .. } => "end_lease_insufficient_funds",
            Command::Tick => "tick",
            Command::Resume => "resume",
            Command::ReportReady { .. } => "report_ready",
            Command::ReportFailed { .. } => "report_failed",
            Command::ReportLaunchFailed { .. } => "report_launch_failed",
            Command::ReportLost { .. } => "report_lost",
            Command::ReportTornDown { .. } => "report_torn_down",
            Command::ResumeNode { .. } => "resume_node",
            Command::GpuHealth { .. } => "gpu_health",
            Command::AttestNode { .. } => "attest_node",
            Command::ReportVerification { .. } => "report_verification",
            Command::PlaceTrustBid { .. } => "place_bid",
            Command::PostOfferSla { .. } => "post_offer",
            Command::ReleaseBid { .. } => "release_bid",
        }
    }
}
