//! Snake_case enums of the wire. Each mirrors a domain enum of `exchange` or `gateway`; the
//! server converts at the edge (gateway `api::dto`), so renaming a domain variant cannot
//! silently change the JSON.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Network fabric between nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InterconnectDto {
    /// PCIe / Ethernet.
    Pcie,
    /// RoCE v2.
    Roce,
    /// InfiniBand.
    Infiniband,
}

/// Lease kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum KindDto {
    /// Non-interruptible.
    Spot,
    /// Interruptible with notice.
    Preemptible,
}

impl KindDto {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            KindDto::Spot => "spot",
            KindDto::Preemptible => "preemptible",
        }
    }
}

/// Placement of a bid's GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PlacementDto {
    /// All GPUs on one node.
    SingleNode,
    /// Any nodes.
    Spread,
    /// All-or-none: `gang.nodes` nodes of one fabric domain (or one region), `gang.gpus_per_node`
    /// GPUs on each, in one fill or not at all (docs/market-rules.md §13.2).
    Gang,
}

/// What a gang's nodes share (docs/market-rules.md §13.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GangScopeDto {
    /// One fabric domain of one supplier (the default): nodes without a domain never take it.
    #[default]
    Domain,
    /// One region of one supplier (no fabric domain required).
    Region,
}

/// What a running gang does when a member is lost and nothing replaces it (§13.4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MemberLossDto {
    /// The other members run on (the default; `gang_degraded`).
    #[default]
    Keep,
    /// Every other member ends too (`gang_ended`).
    EndAll,
}

/// Where a gang member is in the gang's delivery (docs/market-rules.md §13.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GangMemberStatusDto {
    /// This member is still provisioning.
    Provisioning,
    /// This member was reported ready and waits, unbilled, for the rest of the gang.
    WaitingForGang,
    /// The whole gang is ready: every member runs and bills from the same time.
    Ready,
}

/// Time in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TifDto {
    /// Immediate or cancel.
    Ioc,
    /// Good till cancelled (or `expires_at_ms`).
    Gtc,
}

/// An account's role (docs/api.md §1.2).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Registers nodes and posts offers; reads its own nodes, offers, leases and earnings.
    Supplier,
    /// Places bids and holds leases; reads its own bids, leases, balance and statements.
    Buyer,
    /// Reads every finance report.
    Finance,
    /// Creates accounts and keys, records deposits and payouts.
    Admin,
}

impl Role {
    /// The snake_case name used on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Supplier => "supplier",
            Role::Buyer => "buyer",
            Role::Finance => "finance",
            Role::Admin => "admin",
        }
    }

    /// The name with its indefinite article, for messages: `a buyer`, `an admin`.
    pub fn with_article(self) -> &'static str {
        match self {
            Role::Supplier => "a supplier",
            Role::Buyer => "a buyer",
            Role::Finance => "a finance",
            Role::Admin => "an admin",
        }
    }
}

/// A node's liveness.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum NodeStatusDto {
    /// Heartbeating.
    Online,
    /// Missed its heartbeats (or never sent one).
    Offline,
}

/// A lease's phase (docs/market-rules.md §11).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LeaseStateDto {
    /// Waits for a preemption deadline (its GPUs are not free yet).
    Pending,
    /// The supplier's node is setting it up; not billed.
    Provisioning,
    /// Running, billed since `ready_ms`.
    Active,
    /// Ended.
    Ended,
}

/// Why a lease exists, when it is not a buyer's (issue 26, docs/market-rules.md §12.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LeasePurposeDto {
    /// An unbilled lease the exchange places on a node to measure its GPUs: the node agent
    /// runs its checks instead of the provision hook and reports the figures with
    /// `POST /v1/leases/{id}/verification`.
    Verification,
}

/// An NVML check that found a GPU short of what it should be (issue 26, a verification's
/// figures; docs/market-rules.md §12.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum NvmlFaultDto {
    /// The PCIe link runs below the generation or width GPU and slot support.
    PcieLinkBelowMax,
    /// ECC is off on a datacenter GPU.
    EccOff,
    /// The enforced power limit is more than 5 % below the default limit.
    PowerCapped,
    /// Clocks are held down (hardware slowdown, thermal, power brake) while not idle.
    Throttled,
}

/// The outcome of `dcgmi diag` (NVIDIA DCGM diagnostics).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DcgmResultDto {
    /// Every test passed (skipped tests aside).
    Pass,
    /// A test warned, none failed.
    Warn,
    /// A test failed.
    Fail,
}

/// The wipe of an ended lease's GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TeardownStatusDto {
    /// Waiting for the supplier's torn-down report.
    Wiping,
    /// Reported wiped.
    TornDown,
    /// No report by the deadline: the node is held.
    Overdue,
}

/// Why a node is held off the market (docs/market-rules.md §11.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum HoldReasonDto {
    /// A lease on it was not delivered.
    NotDelivered,
    /// A wipe was not reported by its deadline.
    TeardownOverdue,
    /// Its attestation does not match what it registered (docs/market-rules.md §12.1).
    Attestation,
    /// One of its GPUs (by UUID) is attested on another node (§12.1).
    DuplicateGpu,
    /// Its verification run failed or timed out (§12.2); resuming places a new run.
    VerificationFailed,
}

/// Why a lease ended (docs/market-rules.md §4, §11).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EndReasonDto {
    /// The buyer released it.
    Released,
    /// Its term ran out.
    Expired,
    /// A higher bid preempted it after notice.
    Preempted,
    /// Its node failed (heartbeats stopped or GPUs unhealthy).
    NodeFailure,
    /// The supplier withdrew the offer.
    OfferWithdrawn,
    /// The buyer's balance ran out.
    InsufficientFunds,
    /// The supplier did not deliver it (never charged).
    NotDelivered,
    /// Another member of its gang was lost without a replacement and the bid asked
    /// `on_member_loss: end_all` (docs/market-rules.md §13.4).
    GangEnded,
}

/// Why a bid closed, or why a failover could not place GPUs (docs/market-rules.md §4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CloseReasonDto {
    /// Completely filled.
    Filled,
    /// No GPUs at all matched.
    NoCapacity,
    /// GPUs matched but not at the limit price.
    Price,
    /// GPUs at the price, but not within the constraints (`excluded_by` says which).
    Constraints,
    /// Canceled by the buyer.
    Canceled,
    /// A GTC bid reached `expires_at_ms`.
    Expired,
    /// The buyer's balance could not hold it.
    InsufficientFunds,
    /// GPUs at the price that admit the bid, but its duration does not fit their lease terms
    /// (under `min_lease_s`, over `max_lease_s`, or past `available_until_ms`).
    Term,
    /// Only the buyer's own preemptible leases hold capacity at the price; a bid never
    /// preempts its own buyer's lease.
    OwnLease,
    /// GPUs at the price, excluded only by the bid's trust requirements (`verified`,
    /// docs/market-rules.md §12.2).
    Trust,
    /// A spread IOC bid with `min_gpus`: fewer GPUs than that could fill now, so none filled
    /// (`close_detail.fillable`: how many could; §13.5).
    MinGpus,
    /// A gang: eligible nodes exist, but no fabric domain (region) holds the whole gang now
    /// (`close_detail.fillable`: the most nodes one could give; §13.2).
    GangIncomplete,
    /// A gang: no fabric domain (region) has that many nodes of the SKU at all
    /// (`close_detail.fillable`: the node count of the largest; §13.2).
    GangTooLarge,
}

/// What excluded the cheapest offer at an acceptable price (docs/market-rules.md §4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExclusionDto {
    /// The node is offline, draining or held.
    NodeUnavailable,
    /// The offer is the buyer's own.
    SelfTrade,
    /// Outside the bid's `regions`.
    Region,
    /// Outside the bid's `jurisdictions`.
    Jurisdiction,
    /// Interconnect below the bid's `min_interconnect`.
    Interconnect,
    /// The bid requires NVLink; the node has none.
    Nvlink,
    /// The bid's duration does not fit the offer's lease terms.
    Term,
    /// The node does not meet the bid's trust requirements (`verified`, §12.2).
    Trust,
    /// A domain-scoped gang: the node is on no fabric domain (§13.2).
    FabricDomain,
}

/// What became of a bid when it was placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BidStatusDto {
    /// Every GPU filled.
    Filled,
    /// Rests in the book (GTC) for the remaining GPUs.
    Resting,
    /// Closed without (all) fills: see `close_reason`.
    Closed,
}

/// A money movement recorded by an admin.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TransferKindDto {
    /// Cash in to a buyer's prepaid balance.
    Deposit,
    /// Cash out of a supplier's payable.
    Payout,
}
