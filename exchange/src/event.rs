//! Events: what applying a command did, in order, plus the inventory deltas it caused.

use crate::command::{Interconnect, Jurisdiction, LeaseKind, OfferTerms};
use crate::ids::{AccountId, BidId, LeaseId, NodeId, OfferId, RegionId, SkuId};
use crate::price::Price;
use serde::{Deserialize, Serialize};

/// Why a command was rejected. Serialized as its snake_case code (e.g. `"unknown_node"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectReason {
    /// `Meta::seq` not above the last applied sequence number.
    StaleSequence,
    /// `Meta::seq` above [`crate::limits::MAX_SEQ`] (engine ids derive from it).
    SequenceOutOfRange,
    /// `Meta::timestamp_ms` below the last applied timestamp.
    ClockRegression,
    /// SKU id not in the catalog.
    UnknownSku,
    /// No such node.
    UnknownNode,
    /// No such live offer.
    UnknownOffer,
    /// No such resting bid.
    UnknownBid,
    /// No such live lease.
    UnknownLease,
    /// The node, offer, bid or lease belongs to another account.
    NotOwner,
    /// The account already has a node with this name.
    NodeExists,
    /// The node already has a live offer.
    OfferExists,
    /// The node is offline.
    NodeOffline,
    /// The node is draining.
    NodeDraining,
    /// Node name malformed.
    InvalidName,
    /// Region name malformed, or the region table is full.
    InvalidRegion,
    /// A constraint names a region no node has ever been registered in.
    UnknownRegion,
    /// Jurisdiction is not two uppercase letters.
    InvalidJurisdiction,
    /// GPU count out of range.
    InvalidGpus,
    /// Price rule broken (preemptible price must be below spot price).
    InvalidPrice,
    /// Lease term out of range.
    InvalidDuration,
    /// Notice above 900 s.
    InvalidNotice,
    /// Provisioning deadline not in 1..=1,800 s.
    InvalidProvision,
    /// `available_until_ms` not in the future.
    InvalidUntil,
    /// GTC expiry not in the future.
    InvalidExpiry,
    /// Too many constraint entries.
    InvalidConstraints,
    /// Client order id malformed.
    InvalidClientOrderId,
    /// The account already used this client order id for an accepted bid.
    DuplicateClientOrderId,
    /// The lease has ended (its GPUs are wiping): nothing to report ready or failed.
    LeaseEnded,
    /// The lease is not provisioning (still pending, waiting for a wipe, or already running).
    NotProvisioning,
    /// Teardown reported for a lease that is still live.
    LeaseNotEnded,
    /// A lost workload reported for a lease that is not running yet (pending or
    /// provisioning: report it `failed` instead).
    NotActive,
    /// An attested GPU's model is not one the model table knows (§12.1).
    UnknownModel,
    /// A held node's latest attestation does not match what it registered: resume refused
    /// until a matching attestation arrives (§12.1).
    AttestationMismatch,
    /// A verification report for a lease that is not a verification run under way (§12.2).
    NotVerifying,
    /// An offer's SLA promise out of bounds (§12.4: availability 9000..=9999 bp, credit
    /// multiple 1..=50).
    InvalidSla,
    /// A gang's shape out of bounds (§13.2: nodes ≥ 1, GPUs per node 1..=16, nodes × GPUs per
    /// node ≤ 1024 and equal to the bid's `gpus`), or a gang with `min_gpus`.
    InvalidGang,
    /// A fabric domain name or NIC bandwidth out of bounds (§13.1).
    InvalidDomain,
}

impl RejectReason {
    /// The machine-readable code, e.g. `"unknown_node"`.
    pub fn code(self) -> &'static str {
        match self {
            RejectReason::StaleSequence => "stale_sequence",
            RejectReason::SequenceOutOfRange => "sequence_out_of_range",
            RejectReason::ClockRegression => "clock_regression",
            RejectReason::UnknownSku => "unknown_sku",
            RejectReason::UnknownNode => "unknown_node",
            RejectReason::UnknownOffer => "unknown_offer",
            RejectReason::UnknownBid => "unknown_bid",
            RejectReason::UnknownLease => "unknown_lease",
            RejectReason::NotOwner => "not_owner",
            RejectReason::NodeExists => "node_exists",
            RejectReason::OfferExists => "offer_exists",
            RejectReason::NodeOffline => "node_offline",
            RejectReason::NodeDraining => "node_draining",
            RejectReason::InvalidName => "invalid_name",
            RejectReason::InvalidRegion => "invalid_region",
            RejectReason::UnknownRegion => "unknown_region",
            RejectReason::InvalidJurisdiction => "invalid_jurisdiction",
            RejectReason::InvalidGpus => "invalid_gpus",
            RejectReason::InvalidPrice => "invalid_price",
            RejectReason::InvalidDuration => "invalid_duration",
            RejectReason::InvalidNotice => "invalid_notice",
            RejectReason::InvalidProvision => "invalid_provision",
            RejectReason::InvalidUntil => "invalid_until",
            RejectReason::InvalidExpiry => "invalid_expiry",
            RejectReason::InvalidConstraints => "invalid_constraints",
            RejectReason::InvalidClientOrderId => "invalid_client_order_id",
            RejectReason::DuplicateClientOrderId => "duplicate_client_order_id",
            RejectReason::LeaseEnded => "lease_ended",
            RejectReason::NotProvisioning => "not_provisioning",
            RejectReason::LeaseNotEnded => "lease_not_ended",
            RejectReason::NotActive => "not_active",
            RejectReason::UnknownModel => "unknown_model",
            RejectReason::AttestationMismatch => "attestation_mismatch",
            RejectReason::NotVerifying => "not_verifying",
            RejectReason::InvalidSla => "invalid_sla",
            RejectReason::InvalidGang => "invalid_gang",
            RejectReason::InvalidDomain => "invalid_domain",
        }
    }
}

/// Why a lease ended (issue 2's list).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// The buyer released it.
    Released,
    /// Its term ran out.
    Expired,
    /// Preempted by a bid, after notice.
    Preempted,
    /// Its node stopped heartbeating or reported the GPUs unhealthy.
    NodeFailure,
    /// The supplier withdrew or shrank the offer (preemptible leases only, after notice).
    OfferWithdrawn,
    /// Settlement found the buyer's balance exhausted.
    InsufficientFunds,
    /// The supplier reported it could not deliver, or the provisioning deadline passed
    /// (docs/market-rules.md §11.3): never charged, failed over.
    NotDelivered,
    /// Another member of its gang was lost without a replacement and the bid asked
    /// `on_member_loss: end_all` (§13.4).
    GangEnded,
}

/// Why a node was held off the market until its supplier resumes it (docs/market-rules.md §11).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HoldReason {
    /// A lease on it was not delivered (reported failed, or its provisioning deadline passed).
    NotDelivered,
    /// An ended lease's GPUs were not reported torn down by the teardown deadline.
    TeardownOverdue,
    /// Its attestation does not match what it registered (§12.1).
    Attestation,
    /// One of its attested GPUs (by UUID) is already attested on another node (§12.1).
    DuplicateGpu,
    /// Its verification run failed: a figure under 70 % of the reference, missing figures,
    /// DCGM failed, or no report by the deadline (§12.2). Resuming it places a new run.
    VerificationFailed,
}

/// Why the exchange placed a verification run (docs/market-rules.md §12.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerifyTrigger {
    /// The node's first listing.
    FirstListing,
    /// Its attestation changed (another GPU UUID), or it was resumed after a failed run.
    Changed,
    /// The periodic draw (1–7 days after the previous run).
    Periodic,
}

/// How an attestation differs from what the node registered (docs/market-rules.md §12.1):
/// the first difference found, in this order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttestationMismatch {
    /// The host has another number of GPUs than the node registered.
    GpuCount {
        /// GPUs attested.
        attested: u32,
        /// GPUs registered.
        registered: u32,
    },
    /// A GPU is another model (another catalog SKU) than the node's.
    Model {
        /// GPU index.
        index: u32,
        /// The model name attested.
        model: String,
    },
    /// A GPU of a known model has memory outside the tolerance of every SKU of that model.
    Memory {
        /// GPU index.
        index: u32,
        /// Memory attested, MiB.
        memory_mib: u32,
    },
    /// A GPU's UUID is already attested on another node (which is never named).
    DuplicateGpu {
        /// GPU index on this node.
        index: u32,
        /// The UUID.
        uuid: String,
    },
}

/// How a bid's book life ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BidCloseReason {
    /// Every GPU filled.
    Filled,
    /// IOC remainder: no listed capacity of the SKU and kind large enough.
    NoCapacity,
    /// IOC remainder: capacity exists only above the limit price.
    Price,
    /// IOC remainder: capacity at an acceptable price exists but the bid's constraints, the
    /// self-trade rule or the node's state exclude it ([`CloseDetail::excluded_by`] names the
    /// exclusion of the cheapest such offer).
    Constraints,
    /// IOC remainder: capacity at an acceptable price exists and admits the bid, but the bid's
    /// duration (a failover's fixed end) does not fit its lease terms: under `min_lease_s`,
    /// over `max_lease_s`, or past `available_until_ms` (docs/market-rules.md §4.1).
    Term,
    /// IOC remainder: only preemptible leases of the bid's own buyer hold capacity the bid
    /// could take at its price; a bid never preempts its own buyer's lease
    /// (docs/market-rules.md §4.1).
    OwnLease,
    /// Cancelled by the buyer.
    Canceled,
    /// GTC expiry reached.
    Expired,
    /// The buyer ran out of funds: a lease of theirs was ended for insufficient funds, and
    /// their resting bids are closed so they take no new lease they cannot pay for.
    InsufficientFunds,
    /// IOC remainder: capacity at an acceptable price exists, but only the bid's trust
    /// requirements (`verified`, §12.2) exclude it (docs/market-rules.md §4.1).
    Trust,
    /// Spread IOC with `min_gpus`: fewer GPUs than that could fill now, so none filled
    /// ([`CloseDetail::fillable`] says how many could; §13.5).
    MinGpus,
    /// Gang: eligible nodes exist, but no fabric domain (region) holds the whole gang now
    /// ([`CloseDetail::fillable`]: the most nodes any one could give; §13.2).
    GangIncomplete,
    /// Gang: no fabric domain (region) has that many nodes of the SKU at all, whatever their
    /// state ([`CloseDetail::fillable`]: the node count of the largest; §13.2). Answered
    /// without walking the book.
    GangTooLarge,
}

/// What excluded an offer at an acceptable price from a taker (docs/market-rules.md §4.1),
/// checked in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Exclusion {
    /// The node is not online, is draining, or is held.
    NodeUnavailable,
    /// The offer is the buyer's own (self-trade rule, §4).
    SelfTrade,
    /// The node's region is not among the bid's `regions`.
    Region,
    /// The node's jurisdiction is not among the bid's `jurisdictions`.
    Jurisdiction,
    /// The node's interconnect is below the bid's `min_interconnect`.
    Interconnect,
    /// The bid requires NVLink and the node has none.
    Nvlink,
    /// The bid requires trust the node lacks: a current `verified` result (§12.2).
    Trust,
    /// The bid's duration (a failover's fixed end) does not fit the offer's lease terms.
    Term,
    /// A domain-scoped gang: the node is on no fabric domain (§13.2).
    FabricDomain,
}

/// What a user can act on when a taker's remainder did not fill (docs/market-rules.md §4.1):
/// present on `BidClosed` (IOC) and `FailoverFailed`; default (both `None`) otherwise.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CloseDetail {
    /// For reason `price`: the lowest price, CNY per GPU-hour, of an offer of the bid's SKU and
    /// kind that has room for its shape and admits it (above its limit).
    pub best_price: Option<Price>,
    /// For reason `constraints`: what excluded the cheapest offer at an acceptable price.
    pub excluded_by: Option<Exclusion>,
    /// For reason `min_gpus`: the GPUs that could have filled; for `gang_incomplete`: the
    /// most nodes one domain (region) could give; for `gang_too_large`: the node count of the
    /// largest domain (region) (§13.2, §13.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fillable: Option<u32>,
}

/// Which side of a fill was resting first and set the price.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Maker {
    /// The offer was the maker (the bid paid the offer's price).
    Offer,
    /// The bid was the maker (it paid its own limit).
    Bid,
}

/// Why a notice was given to a preemptible lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoticeReason {
    /// A higher bid takes the GPUs.
    Preempted,
    /// The offer was withdrawn or shrunk.
    OfferWithdrawn,
}

/// Something that happened while applying one command. Times are ms since epoch; prices CNY
/// per GPU-hour.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// The command was refused and changed nothing (beyond advancing time).
    Rejected {
        /// Machine-readable reason.
        reason: RejectReason,
        /// The command field at fault, if one is.
        field: Option<&'static str>,
    },
    /// A node was registered.
    NodeRegistered {
        /// New node id.
        node: NodeId,
        /// Owner.
        supplier: AccountId,
        /// GPU model.
        sku: SkuId,
        /// Region id.
        region: RegionId,
        /// GPUs.
        gpus: u32,
    },
    /// A node's attributes changed.
    NodeUpdated {
        /// The node.
        node: NodeId,
        /// Region after the update.
        region: RegionId,
        /// Jurisdiction after the update.
        jurisdiction: Jurisdiction,
        /// Fabric after the update.
        interconnect: Interconnect,
        /// NVLink after the update.
        nvlink: bool,
        /// Draining after the update.
        draining: bool,
    },
    /// An offline node heartbeat again.
    NodeOnline {
        /// The node.
        node: NodeId,
    },
    /// A node missed heartbeats past the timeout.
    NodeOffline {
        /// The node.
        node: NodeId,
        /// Its last heartbeat.
        last_heartbeat_ms: i64,
    },
    /// A heartbeat changed the number of healthy GPUs.
    NodeHealth {
        /// The node.
        node: NodeId,
        /// Healthy GPUs now.
        healthy_gpus: u32,
    },
    /// An offer was posted.
    OfferPosted {
        /// New offer id.
        offer: OfferId,
        /// Its node.
        node: NodeId,
        /// Terms.
        terms: OfferTerms,
    },
    /// An offer's terms were replaced.
    OfferAmended {
        /// The offer.
        offer: OfferId,
        /// New terms.
        terms: OfferTerms,
    },
    /// An offer was withdrawn by its supplier.
    OfferWithdrawn {
        /// The offer.
        offer: OfferId,
    },
    /// An offer reached its `available_until_ms`.
    OfferExpired {
        /// The offer.
        offer: OfferId,
    },
    /// A bid passed validation.
    BidAccepted {
        /// New bid id.
        bid: BidId,
        /// Buyer.
        buyer: AccountId,
    },
    /// A trade: one lease created for a bid (or a failover) on one node.
    Fill {
        /// The bid filled (for a failover: the bid of the failed lease).
        bid: BidId,
        /// The lease created; also the fill's id.
        lease: LeaseId,
        /// The offer traded against.
        offer: OfferId,
        /// Its node.
        node: NodeId,
        /// Buyer.
        buyer: AccountId,
        /// Supplier.
        supplier: AccountId,
        /// GPUs filled.
        gpus: u32,
        /// Price per GPU-hour the lease pays.
        price: Price,
        /// Spot or preemptible.
        kind: LeaseKind,
        /// Who set the price.
        maker: Maker,
        /// Lease start (later than now when it waits for a preemption deadline).
        start_ms: i64,
        /// Lease end if not ended earlier.
        end_ms: i64,
    },
    /// A lease began running on its GPUs.
    LeaseStarted {
        /// The lease.
        lease: LeaseId,
        /// Its bid.
        bid: BidId,
        /// Buyer.
        buyer: AccountId,
        /// Supplier.
        supplier: AccountId,
        /// Node.
        node: NodeId,
        /// GPU model.
        sku: SkuId,
        /// Region.
        region: RegionId,
        /// Spot or preemptible.
        kind: LeaseKind,
        /// GPU count.
        gpus: u32,
        /// The concrete GPUs: bit i set = GPU index i on the node.
        gpu_mask: u32,
        /// Price per GPU-hour.
        price: Price,
        /// Start.
        start_ms: i64,
        /// End if not ended earlier.
        end_ms: i64,
    },
    /// A preemptible lease will end at `deadline_ms`.
    PreemptionNotice {
        /// The lease losing its GPUs.
        lease: LeaseId,
        /// The lease taking them over (`None` for an offer withdrawal).
        by: Option<LeaseId>,
        /// When it ends.
        deadline_ms: i64,
        /// Why.
        reason: NoticeReason,
    },
    /// A lease ended (or a lease that had not started yet was called off).
    LeaseEnded {
        /// The lease.
        lease: LeaseId,
        /// Buyer.
        buyer: AccountId,
        /// Why.
        reason: EndReason,
        /// When billing stops: the release time, term end, preemption deadline or last
        /// heartbeat.
        at_ms: i64,
    },
    /// A lease ended by node failure continues as a new lease elsewhere.
    LeaseMigrated {
        /// The failed lease.
        from: LeaseId,
        /// Its replacement.
        to: LeaseId,
    },
    /// Failover found no (or not enough) equivalent capacity for a failed lease.
    FailoverFailed {
        /// The failed lease.
        lease: LeaseId,
        /// GPUs that could not be placed.
        gpus: u32,
        /// Why, as for an IOC bid.
        reason: BidCloseReason,
        /// The best price or the exclusion behind `reason`.
        detail: CloseDetail,
    },
    /// A GTC bid's unfilled rest went on the book (emitted once, when it first rests).
    BidRested {
        /// The bid.
        bid: BidId,
        /// GPUs still wanted.
        remaining: u32,
    },
    /// A bid left the book or ended.
    BidClosed {
        /// The bid.
        bid: BidId,
        /// GPUs filled over its life.
        filled: u32,
        /// GPUs never filled.
        unfilled: u32,
        /// Why.
        reason: BidCloseReason,
        /// For an IOC remainder: the best price or the exclusion behind `reason`.
        detail: CloseDetail,
    },
    /// A lease's provisioning began: the supplier's node may start its workload and must report
    /// ready by `deadline_ms` (docs/market-rules.md §11.1).
    ProvisionStarted {
        /// The lease.
        lease: LeaseId,
        /// Buyer.
        buyer: AccountId,
        /// Supplier.
        supplier: AccountId,
        /// Node.
        node: NodeId,
        /// Provisioning deadline, ms since epoch.
        deadline_ms: i64,
    },
    /// The supplier reported the lease ready: it runs, and is billed, from `at_ms` (§11.2).
    LeaseReady {
        /// The lease.
        lease: LeaseId,
        /// Buyer.
        buyer: AccountId,
        /// Supplier.
        supplier: AccountId,
        /// Node.
        node: NodeId,
        /// Ready time, ms since epoch.
        at_ms: i64,
    },
    /// An ended lease's GPUs are wiping until reported torn down or `deadline_ms` (§11.4).
    LeaseWiping {
        /// The ended lease.
        lease: LeaseId,
        /// Buyer.
        buyer: AccountId,
        /// Supplier.
        supplier: AccountId,
        /// Node.
        node: NodeId,
        /// The GPUs wiping: bit i = GPU i.
        gpu_mask: u32,
        /// Teardown deadline, ms since epoch.
        deadline_ms: i64,
    },
    /// The supplier reported the ended lease's GPUs wiped (§11.5).
    LeaseWiped {
        /// The ended lease.
        lease: LeaseId,
        /// Buyer.
        buyer: AccountId,
        /// Supplier.
        supplier: AccountId,
        /// Node.
        node: NodeId,
    },
    /// The teardown deadline passed without a report; the node is held (§11.6).
    TeardownOverdue {
        /// The ended lease.
        lease: LeaseId,
        /// Buyer.
        buyer: AccountId,
        /// Supplier.
        supplier: AccountId,
        /// Node.
        node: NodeId,
    },
    /// A node was held off the market until its supplier resumes it (§11.8).
    NodeHeld {
        /// The node.
        node: NodeId,
        /// Its supplier.
        supplier: AccountId,
        /// Why.
        reason: HoldReason,
    },
    /// A node's attestation matched what it registered (§12.1).
    NodeAttested {
        /// The node.
        node: NodeId,
        /// GPUs attested.
        gpus: u32,
    },
    /// A node's attestation did not match: it is held (`NodeHeld` follows unless it was
    /// already held for the same reason) until a matching one arrives and it is resumed.
    AttestationFailed {
        /// The node.
        node: NodeId,
        /// Its supplier.
        supplier: AccountId,
        /// The first difference.
        mismatch: AttestationMismatch,
    },
    /// The exchange placed a verification run on a node (§12.2): its agent runs the checks on
    /// `gpu_mask` and reports the figures by `deadline_ms`. Not a buyer's lease: never billed,
    /// the node is not listed meanwhile.
    VerificationStarted {
        /// The run's lease id.
        lease: LeaseId,
        /// The node.
        node: NodeId,
        /// Its supplier.
        supplier: AccountId,
        /// GPUs under test: bit i = GPU i.
        gpu_mask: u32,
        /// Report deadline, ms since epoch.
        deadline_ms: i64,
        /// Why.
        trigger: VerifyTrigger,
    },
    /// A verification run ended with its judgment (a `Failed` one holds the node,
    /// `verification_failed`; `NodeHeld` follows).
    VerificationEnded {
        /// The run's lease id.
        lease: LeaseId,
        /// The node.
        node: NodeId,
        /// Its supplier.
        supplier: AccountId,
        /// The judgment.
        judgment: crate::verify::Judgment,
    },
    /// A held node was resumed by its supplier.
    NodeResumed {
        /// The node.
        node: NodeId,
        /// Its supplier.
        supplier: AccountId,
    },
    /// A gang filled whole (§13.2): its members, one lease per node, in rank order (after
    /// their `Fill` events). The gang's id is its bid's.
    GangFormed {
        /// The bid (the gang's id).
        bid: BidId,
        /// Buyer.
        buyer: AccountId,
        /// Supplier (one per gang).
        supplier: AccountId,
        /// Member leases; index = rank.
        members: Vec<LeaseId>,
    },
    /// A member of a gang not yet whole was reported ready: it waits, unbilled, for the rest
    /// (§13.3).
    GangMemberReady {
        /// The gang.
        bid: BidId,
        /// The member.
        lease: LeaseId,
        /// Ready time, ms since epoch.
        at_ms: i64,
    },
    /// Every member of a gang is ready: all run, and bill, from `at_ms` (`LeaseReady` for
    /// each follows, in rank order; §13.3).
    GangReady {
        /// The gang.
        bid: BidId,
        /// Buyer.
        buyer: AccountId,
        /// Ready time, ms since epoch.
        at_ms: i64,
    },
    /// A gang could not be delivered whole: its other members end `not_delivered`, never
    /// charged (§13.3).
    GangFailed {
        /// The gang.
        bid: BidId,
        /// Buyer.
        buyer: AccountId,
        /// The member whose loss failed it.
        lost: LeaseId,
    },
    /// A running gang lost a member that no node of its domain could replace, and runs on
    /// with the rest (`on_member_loss: keep`, §13.4).
    GangDegraded {
        /// The gang.
        bid: BidId,
        /// Buyer.
        buyer: AccountId,
        /// The lost member.
        lost: LeaseId,
        /// Members still live.
        live: u32,
    },
}

/// The aggregate listed capacity at one (SKU, region, lease kind, price) level, after a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct InventoryDelta {
    /// The market (SKU); `market_seq` counts per SKU.
    pub sku: SkuId,
    /// Contiguous per SKU, starting at 1.
    pub market_seq: u64,
    /// Region.
    pub region: RegionId,
    /// Spot or preemptible level.
    pub kind: LeaseKind,
    /// Price level, CNY per GPU-hour.
    pub price: Price,
    /// Free GPUs at this level now; 0 means the level is gone.
    pub free_gpus: u32,
    /// Largest number free on a single node at this level now.
    pub max_single_node: u32,
}

/// Everything one command produced.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Output {
    /// Events in the order they happened.
    pub events: Vec<Event>,
    /// Inventory levels that changed, one delta per level, ordered by (SKU, region, kind,
    /// price).
    pub deltas: Vec<InventoryDelta>,
}

impl Output {
    /// Empties both lists, keeping their capacity.
    pub fn clear(&mut self) {
        self.events.clear();
        self.deltas.clear();
    }

    /// The rejection, if the command was rejected.
    pub fn rejection(&self) -> Option<RejectReason> {
        self.events.iter().find_map(|e| match e {
            Event::Rejected { reason, .. } => Some(*reason),
            _ => None,
        })
    }
}
