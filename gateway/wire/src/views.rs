//! Answers of the REST API (and the payloads the websocket reuses). Ids and amounts are
//! strings; prices CNY per GPU-hour with four decimals; money CNY with two ("0.00"), except
//! where a field says exact; times ms since epoch.

use crate::enums::{
    BidStatusDto, CloseReasonDto, EndReasonDto, HoldReasonDto, InterconnectDto, KindDto,
    LeaseStateDto, NodeStatusDto, PlacementDto, Role, TeardownStatusDto, TransferKindDto,
};
use crate::launch::LaunchRequest;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// A supplier's node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NodeView {
    /// Node id.
    pub id: String,
    /// Supplier's name for it.
    pub name: String,
    /// SKU.
    pub sku: String,
    /// Physical GPUs.
    pub gpus: u32,
    /// Healthy GPUs (last heartbeat).
    pub healthy_gpus: u32,
    /// Region.
    pub region: String,
    /// Jurisdiction.
    pub jurisdiction: String,
    /// Fabric.
    pub interconnect: InterconnectDto,
    /// NVLink.
    pub nvlink: bool,
    /// Heartbeating or not.
    pub status: NodeStatusDto,
    /// Takes no new leases.
    pub draining: bool,
    /// Last heartbeat, ms since epoch.
    pub last_heartbeat_ms: i64,
    /// Live offer id.
    pub offer_id: Option<String>,
    /// GPUs held by live leases.
    pub leased_gpus: u32,
    /// GPUs listed free in the market now.
    pub listed_free_gpus: u32,
    /// GPUs of ended leases waiting to be wiped (reported torn down); never listed.
    pub wiping_gpus: u32,
    /// Held off the market until resumed (docs/market-rules.md §11.8).
    pub held: Option<HoldReasonDto>,
    /// The node agent's clock minus the exchange's, ms (positive: the host runs ahead), as
    /// its last heartbeat that carried one reported it (issue 25); none before one did.
    #[serde(default)]
    pub agent_clock_offset_ms: Option<i64>,
    /// Exchange time of that heartbeat, ms since epoch.
    #[serde(default)]
    pub agent_clock_offset_at_ms: Option<i64>,
    /// The node's latest attestation (issue 26, docs/market-rules.md §12.1); none before its
    /// agent sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attestation: Option<NodeAttestationView>,
    /// The GPUs the engine counts unhealthy now, in index order, with the UUID and reason the
    /// last heartbeat carrying `unhealthy_gpus` gave (none after a count-only heartbeat).
    #[serde(default)]
    pub unhealthy_gpus: Vec<crate::requests::UnhealthyGpu>,
    /// Its verification (issue 26, docs/market-rules.md §12.2); absent where the exchange does
    /// not verify.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<crate::trust::NodeVerificationView>,
    /// Its reliability score (issue 26, docs/market-rules.md §12.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reliability: Option<crate::trust::ReliabilityView>,
    /// The supplier's fabric domain of the node (docs/market-rules.md §13.1); absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric_domain: Option<String>,
    /// The node's NIC bandwidth, Gbit/s, as registered; absent: not stated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic_gbps: Option<u32>,
}

/// Whether a node's latest attestation matched its registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AttestationStatusDto {
    /// GPU count, models, memory and UUIDs agree with the registration.
    Matched,
    /// They differ: the node is held until a matching attestation arrives and it is resumed.
    Mismatch,
}

/// Which check of docs/market-rules.md §12.1 an attestation failed (the first, in this
/// order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MismatchKindDto {
    /// Another number of GPUs than registered (`attested`, `registered`).
    GpuCount,
    /// A GPU is another SKU than the node's (`index`, `model`).
    Model,
    /// A GPU of a known model has memory no SKU of it has (`index`, `memory_mib`).
    Memory,
    /// A GPU's UUID is attested on another node (`index`, `uuid`; the other node and its
    /// supplier are never named).
    DuplicateGpu,
}

/// How an attestation differs from the node's registration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AttestationMismatchDto {
    /// Which check failed.
    pub kind: MismatchKindDto,
    /// The GPU (model, memory, duplicate_gpu).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    /// GPUs attested (gpu_count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attested: Option<u32>,
    /// GPUs registered (gpu_count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registered: Option<u32>,
    /// The model attested (model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The memory attested, MiB (memory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u32>,
    /// The UUID (duplicate_gpu).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// What differs and what to do, in words.
    pub message: String,
}

/// `POST /v1/nodes/{id}/attestation` → what the exchange made of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AttestationAnswer {
    /// The attestation matched the registration.
    pub attested: bool,
    /// How it differed; null when it matched.
    pub mismatch: Option<AttestationMismatchDto>,
    /// The node is held off the market now (by this mismatch or an earlier hold).
    pub held: bool,
}

/// Host facts of one attested GPU (what the agent reported beyond what the engine checks).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct GpuHostView {
    /// GPU index.
    pub index: u32,
    /// UUID.
    pub uuid: String,
    /// Model name as NVML reports it.
    pub model: String,
    /// Memory, MiB.
    pub memory_mib: u32,
    /// PCIe generation now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_gen: Option<u32>,
    /// PCIe lanes now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_width: Option<u32>,
    /// Highest PCIe generation supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_max_gen: Option<u32>,
    /// Widest PCIe link supported, lanes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_max_width: Option<u32>,
    /// MIG mode enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_mode: Option<bool>,
}

/// A node's latest attestation, as the node view shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NodeAttestationView {
    /// When it arrived (exchange time), ms since epoch.
    pub at_ms: i64,
    /// Matched or not.
    pub status: AttestationStatusDto,
    /// GPUs attested.
    pub gpus: u32,
    /// How it differed (status `mismatch`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mismatch: Option<AttestationMismatchDto>,
    /// Driver version (empty: unknown).
    #[serde(default)]
    pub driver_version: String,
    /// CUDA version (empty: unknown).
    #[serde(default)]
    pub cuda_version: String,
    /// Per GPU: UUID, model, memory, PCIe link, MIG mode.
    #[serde(default)]
    pub gpu_details: Vec<GpuHostView>,
    /// Network interfaces.
    #[serde(default)]
    pub nics: Vec<crate::requests::NicDto>,
    /// Logical CPU cores of the host (absent: not reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_cores: Option<u32>,
    /// Total RAM of the host, MiB (absent: not reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ram_mib: Option<u64>,
    /// Disk size of the host, GB of 10^9 bytes (absent: not reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_gb: Option<u32>,
}

/// A live offer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct OfferView {
    /// Offer id.
    pub id: String,
    /// Node id.
    pub node_id: String,
    /// GPUs offered.
    pub gpus: u32,
    /// Spot price, CNY per GPU-hour.
    pub spot_price: String,
    /// Preemptible price, CNY per GPU-hour.
    pub preemptible_price: Option<String>,
    /// Shortest fixed lease, s.
    pub min_lease_s: u64,
    /// Longest lease, s.
    pub max_lease_s: u64,
    /// Leaves the market at, ms since epoch.
    pub available_until_ms: i64,
    /// Preemption notice, s.
    pub notice_s: u32,
    /// Provisioning deadline, seconds (docs/market-rules.md §11).
    pub provision_s: u32,
    /// The SLA terms its leases are credited by (issue 26, docs/settlement.md "SLA credit").
    /// Absent: the exchange's default rule (10× the outage charge, outage capped at 1 h,
    /// credit capped at the lease's charge so far, no non-delivery credit, no monthly promise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sla: Option<SlaTermsView>,
    /// What the node has delivered, beside what the terms promise (issue 26): its
    /// reliability score over the last 30 UTC days, the same as the node view's `reliability`
    /// (`reliability.reliability` = delivered / committed lease-GPU-ms, numerator and
    /// denominator; `status` `new` under 10 leases or 24 delivered lease-hours). Absent in the
    /// answers of `POST` and `PUT` (the `GET` views carry it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reliability: Option<crate::trust::ReliabilityView>,
    /// The same score over all of the supplier's nodes (sums of every numerator and
    /// denominator; no `matching_reliability`). Absent where `reliability` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supplier_reliability: Option<crate::trust::ReliabilityView>,
}

/// SLA terms as posted with an offer and frozen on its leases at fill (issue 26): the shape of
/// [`crate::SlaTermsDto`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SlaTermsView {
    /// Promised monthly availability, percent with 2 decimals, e.g. `"99.90"`.
    pub availability: String,
    /// Credit multiple of the outage charge, 1..=50.
    pub credit_multiple: u16,
    /// Longest outage credited per failure, seconds.
    pub outage_cap_s: u32,
    /// What one credit is capped at.
    pub credit_cap: crate::CreditCapDto,
    /// Whether a lease never delivered earns a credit.
    pub non_delivery_credit: bool,
    /// The promised availability as a fraction with 4 decimals (`"0.9990"` for 99.90 %),
    /// comparable with a measured reliability's `value` and a bid's `min_reliability`.
    #[serde(default)]
    pub availability_ratio: String,
}

/// How a lease's own SLA credit was computed (issue 26, docs/settlement.md "SLA credit"):
/// `credit = min(outage_credit + price_difference, cap)`. Amounts CNY.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SlaCreditView {
    /// `node_failure` (the lease's node failed) or `non_delivery` (never delivered; its terms
    /// grant a non-delivery credit).
    pub basis: String,
    /// Outage start, ms since epoch: the failure (billing end) or the provisioning deadline.
    pub outage_from_ms: i64,
    /// The replacement's ready time, ms since epoch (absent: no capacity was found).
    pub replacement_ready_ms: Option<i64>,
    /// The outage credited, seconds (billed per started second; capped by the terms).
    pub outage_s: u64,
    /// `multiple × charge(outage)`.
    pub outage_credit: String,
    /// A dearer replacement's extra price over the remaining fixed term (at most 24 h).
    pub price_difference: String,
    /// The cap: the charge so far, or the percentage of the monthly fee.
    pub cap: String,
    /// The credit granted.
    pub credit: String,
    /// The rule it was computed by, e.g. `promise 99.90% multiple 20x outage_cap 600s cap
    /// monthly_fee_pct:50 non_delivery_credit no` (`promise none`: the default rule).
    pub terms: String,
}

/// A resting bid.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BidView {
    /// Bid id.
    pub id: String,
    /// Client order id.
    pub client_order_id: Option<String>,
    /// SKU.
    pub sku: String,
    /// GPUs asked for.
    pub gpus: u32,
    /// GPUs still wanted.
    pub remaining: u32,
    /// Limit, CNY per GPU-hour.
    pub limit_price: String,
    /// Spot or preemptible.
    pub kind: KindDto,
    /// Single node, spread or gang.
    pub placement: PlacementDto,
    /// A gang's shape (placement `gang`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang: Option<crate::requests::GangRequest>,
    /// Lease term, s (absent: open-ended).
    pub duration_s: Option<u64>,
    /// Expires at, ms since epoch.
    pub expires_at_ms: Option<i64>,
}

/// A gang member lease's gang (docs/market-rules.md §13): shown on the lease views of its
/// buyer and its supplier while the lease is live.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LeaseGangView {
    /// The gang's id: its bid's id.
    pub id: String,
    /// This member's rank, 0..`size` (the order the members were filled in; torchrun's
    /// `NODE_RANK`).
    pub rank: u32,
    /// Members of the gang (its `nodes`).
    pub size: u32,
    /// The member lease of each rank (`null`: that rank has no live lease now: lost and not
    /// replaced).
    pub members: Vec<Option<String>>,
    /// The whole gang is ready: every member runs and bills from the same time.
    pub ready: bool,
    /// This member: `provisioning`, `waiting_for_gang` (reported ready, waits unbilled for
    /// the rest) or `ready` (the whole gang is).
    pub status: crate::enums::GangMemberStatusDto,
    /// Supplier and node agent only: the node name of each rank (the supplier's own nodes,
    /// `null` where the rank has no live lease), for the hooks (`GPUX_GANG_NODES`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Vec<Option<String>>>,
}

/// A lease, live or ended (docs/market-rules.md §11 for its phases). Buyer and supplier of
/// the lease only: the launch spec and the access details are theirs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LeaseView {
    /// Lease id.
    pub id: String,
    /// Bid that made it.
    pub bid_id: String,
    /// Node.
    pub node_id: String,
    /// Offer.
    pub offer_id: String,
    /// SKU.
    pub sku: String,
    /// Region.
    pub region: String,
    /// Spot or preemptible.
    pub kind: KindDto,
    /// GPUs.
    pub gpus: u32,
    /// Indexes of the node's GPUs it holds (empty while pending).
    pub gpu_indexes: Vec<u32>,
    /// Price, CNY per GPU-hour.
    pub price: String,
    /// Start (the GPUs become its), ms since epoch.
    pub start_ms: i64,
    /// Scheduled end, ms since epoch (a preemption notice may bring it forward).
    pub end_ms: i64,
    /// `pending`, `provisioning` (not billed), `active` (billed since `ready_ms`) or `ended`.
    pub state: LeaseStateDto,
    /// While provisioning: the supplier must report ready by then, ms since epoch (absent
    /// while the GPUs are still being wiped after their previous lease).
    pub provision_deadline_ms: Option<i64>,
    /// While provisioning: ms left until `provision_deadline_ms` when the exchange made this
    /// view, by the exchange's clock (0 once passed). A node agent budgets its provisioning
    /// from this and its own monotonic clock, never from its wall clock, which may be off
    /// (issue 25: an agent 10 minutes ahead failed every lease "no time left to provision").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_in_ms: Option<i64>,
    /// When it became ready (billing starts), ms since epoch.
    pub ready_ms: Option<i64>,
    /// How to reach it, once ready.
    pub access: Option<AccessView>,
    /// What it runs (while its bid or one of its leases lives).
    pub launch: Option<LaunchRequest>,
    /// Deadline of a preemption notice, ms since epoch.
    pub notice_deadline_ms: Option<i64>,
    /// Charged so far (the final charge once ended), CNY — accrued per second from ready.
    pub charged: Option<String>,
    /// Seconds billed so far.
    pub billed_seconds: u64,
    /// SLA credit granted for it, CNY.
    pub sla_credit: Option<String>,
    /// Why it ended.
    pub end_reason: Option<EndReasonDto>,
    /// When it ended (the billing end), ms since epoch.
    pub ended_at_ms: Option<i64>,
    /// The supplier's reason when it reported the lease failed or lost.
    pub failure_reason: Option<String>,
    /// `launch_spec` when the supplier reported that the buyer's launch spec cannot run
    /// (issue 25): no failover followed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_cause: Option<crate::FailureCauseDto>,
    /// The wipe of its GPUs after it ended: the buyer's deletion record.
    pub teardown: Option<TeardownView>,
    /// The lease it replaces after a failover.
    pub migrated_from: Option<String>,
    /// Its replacements after a failover.
    pub migrated_to: Vec<String>,
    /// GPUs its failover could not place (none free at an acceptable price, or none at all).
    pub failover_failed_gpus: Option<u32>,
    /// Why: `no_capacity`, `price`, `constraints`, `term` or `own_lease`
    /// (docs/market-rules.md §4.1).
    pub failover_failed_reason: Option<CloseReasonDto>,
    /// What to act on: the best price or the excluding constraint, and a message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover_failed_detail: Option<CloseDetailView>,
    /// `verification` for an exchange-placed verification lease (docs/market-rules.md §12.2);
    /// absent: a buyer's lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purpose: Option<crate::LeasePurposeDto>,
    /// UUIDs of the lease's GPUs recorded at fill, in the order of `gpu_indexes` (empty when
    /// the node never attested).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_uuids: Vec<String>,
    /// The SLA terms frozen on it at fill from its offer (issue 26); absent: the exchange's
    /// default rule (see [`OfferView::sla`]), or a lease never delivered whose terms grant no
    /// non-delivery credit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sla_terms: Option<SlaTermsView>,
    /// How its SLA credit (`sla_credit`) was computed, once its failover settled (issue 26).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sla_credit_basis: Option<SlaCreditView>,
    /// A live gang member's gang (docs/market-rules.md §13); absent for any other lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang: Option<LeaseGangView>,
}

/// What a buyer can act on when a bid's remainder (IOC) or a failover did not fill
/// (docs/market-rules.md §4.1).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CloseDetailView {
    /// For `price`: the best price the bid's shape can fill at now, CNY per GPU-hour (absent
    /// when no offer with room admits the bid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_price: Option<String>,
    /// For `constraints`: what excluded the cheapest offer at the bid's price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excluded_by: Option<crate::ExclusionDto>,
    /// For `min_gpus`: the GPUs that could have filled; for `gang_incomplete`: the most nodes
    /// one fabric domain (region) could give now (docs/market-rules.md §13).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fillable: Option<u32>,
    /// The reason in words, with what to change.
    pub message: String,
}

/// Access details of a ready lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AccessView {
    /// SSH host.
    pub ssh_host: Option<String>,
    /// SSH port.
    pub ssh_port: Option<u16>,
    /// SSH user.
    pub ssh_user: Option<String>,
    /// URL of each exposed port, by port.
    pub urls: BTreeMap<u16, String>,
    /// The login command, e.g. `ssh -p 2222 root@203.0.113.7`.
    pub ssh_command: Option<String>,
}

/// The wipe of an ended lease's GPUs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TeardownView {
    /// Wiping, torn down, or overdue (no report by the deadline: the node is held).
    pub status: TeardownStatusDto,
    /// Teardown deadline, ms since epoch.
    pub deadline_ms: i64,
    /// When the supplier reported the wipe, ms since epoch.
    pub torn_down_ms: Option<i64>,
    /// How, as the supplier reported it.
    pub method: Option<String>,
}

/// A buyer's money: balance, what is available for new bids, burn rate and runway.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BalanceView {
    /// Buyer account id.
    pub account_id: String,
    /// Prepaid balance, CNY, exact (the ledger's own value, not rounded).
    pub balance: String,
    /// Balance minus accrued-but-unposted charges, CNY.
    pub available: String,
    /// Held by resting bids (limit × GPUs × minimum runway), CNY.
    pub held_by_bids: String,
    /// Current spend of live leases, CNY per hour.
    pub burn_rate_per_hour: String,
    /// Seconds until the balance runs out at the burn rate (absent: nothing burns).
    pub runway_s: Option<u64>,
}

/// A supplier's earnings so far.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct EarningsView {
    /// Supplier account id.
    pub account_id: String,
    /// Payable balance (earned minus paid out), CNY.
    pub payable: String,
    /// Live leases on the supplier's nodes.
    pub live_leases: usize,
    /// GPUs in live leases.
    pub leased_gpus: u32,
    /// Current earning rate before fees, CNY per hour.
    pub gross_rate_per_hour: String,
}

/// One inventory level.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LevelView {
    /// Region.
    pub region: String,
    /// Spot or preemptible.
    pub kind: KindDto,
    /// Price, CNY per GPU-hour.
    pub price: String,
    /// Free GPUs at this level (0 in a delta: the level is gone).
    pub free_gpus: u32,
    /// Largest number free on one node.
    pub max_single_node: u32,
    /// Of `free_gpus`, the GPUs on nodes whose latest verification run is `verified` and
    /// current (issue 26, docs/market-rules.md §12.2): what a bid with `constraints.verified`
    /// can take at this level, in GPUs. Carried by `GET /v1/inventory` (counted at the
    /// request); absent in the websocket feed's snapshots and deltas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified_free_gpus: Option<u32>,
}

/// An account (admin view).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AccountView {
    /// Account id.
    pub id: String,
    /// Name.
    pub name: String,
    /// Role.
    pub role: Role,
    /// Created at, ms since epoch.
    pub created_ms: i64,
    /// Key ids (never the keys).
    pub key_ids: Vec<String>,
}

/// `GET /v1/nodes`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NodeList {
    /// The caller's nodes.
    pub nodes: Vec<NodeView>,
}

/// `GET /v1/offers`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct OfferList {
    /// The caller's live offers.
    pub offers: Vec<OfferView>,
}

/// `GET /v1/bids`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BidList {
    /// The caller's resting bids.
    pub bids: Vec<BidView>,
}

/// `GET /v1/leases`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LeaseList {
    /// Leases, newest first.
    pub leases: Vec<LeaseView>,
    /// Pass as `cursor` for the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// `GET /v1/admin/accounts`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AccountList {
    /// Every account.
    pub accounts: Vec<AccountView>,
}

/// `GET /v1/nodes/{id}/leases`: what a node's agent must act on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NodeLeases {
    /// Node id.
    pub node_id: String,
    /// Grows whenever a lease of this node is assigned, noticed, ended or wiped; the
    /// heartbeat answer carries it, so an agent polls this list only when it changed.
    pub leases_version: u64,
    /// Held off the market until resumed.
    pub held: Option<HoldReasonDto>,
    /// Live leases: pending, provisioning (act: provision and report ready or failed) and
    /// active.
    pub leases: Vec<LeaseView>,
    /// Ended leases whose GPUs wait for a wipe (act: wipe and report torn down).
    pub wiping: Vec<LeaseView>,
}

/// `POST /v1/nodes/{id}/heartbeat` → what the heartbeat did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HeartbeatAnswer {
    /// Journal sequence number of the heartbeat.
    pub seq: u64,
    /// Exchange time of the heartbeat, ms since epoch.
    pub at_ms: i64,
    /// The node was offline and is online again.
    pub came_online: bool,
    /// The node's lease change counter (see [`NodeLeases::leases_version`]).
    pub leases_version: u64,
}

/// `DELETE /v1/offers/{id}` → the withdrawal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct OfferWithdrawn {
    /// Offer id.
    pub offer_id: String,
    /// Always true.
    pub withdrawn: bool,
    /// Preemptible leases given notice by the withdrawal.
    pub preemption_notices: usize,
    /// Journal sequence number.
    pub seq: u64,
}

/// One fill of a bid as placed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FillView {
    /// The lease made.
    pub lease_id: String,
    /// Its node.
    pub node_id: String,
    /// GPUs.
    pub gpus: u32,
    /// Price, CNY per GPU-hour.
    pub price: String,
    /// Spot or preemptible.
    pub kind: KindDto,
    /// Start (the GPUs become the lease's), ms since epoch.
    pub start_ms: i64,
    /// Scheduled end, ms since epoch.
    pub end_ms: i64,
}

/// `POST /v1/bids` (and the websocket's `bid_accepted`) → what placing the bid did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BidPlaced {
    /// Bid id (absent only if the engine refused it, which answers an error instead).
    pub bid_id: Option<String>,
    /// The buyer's id for it.
    pub client_order_id: String,
    /// Journal sequence number.
    pub seq: u64,
    /// Filled, resting or closed.
    pub status: BidStatusDto,
    /// GPUs filled now.
    pub filled_gpus: u32,
    /// GPUs resting.
    pub remaining_gpus: u32,
    /// Why it closed (when `status` is `filled` or `closed`).
    pub close_reason: Option<CloseReasonDto>,
    /// For a remainder that did not fill: the best price or the excluding constraint, and a
    /// message (docs/market-rules.md §4.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub close_detail: Option<CloseDetailView>,
    /// Its fills.
    pub fills: Vec<FillView>,
}

/// `DELETE /v1/bids/{id}` → the cancel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BidCanceled {
    /// Bid id.
    pub bid_id: String,
    /// Always true.
    pub canceled: bool,
    /// Journal sequence number.
    pub seq: u64,
}

/// `DELETE /v1/bids` → every resting bid canceled.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BidsCanceled {
    /// Ids of the bids canceled.
    pub canceled: Vec<String>,
}

/// `POST /v1/leases/{id}/release` → the release.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LeaseReleased {
    /// Lease id.
    pub lease_id: String,
    /// Always true.
    pub released: bool,
    /// Exchange time of the release (billing ends), ms since epoch.
    pub at_ms: i64,
    /// Journal sequence number.
    pub seq: u64,
}

/// `POST /v1/bids/{id}/release` → every live lease of the bid released, its rest canceled
/// (docs/market-rules.md §13.6).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BidReleased {
    /// Bid id.
    pub bid_id: String,
    /// The leases released now (billing ends), in lease id order.
    pub released: Vec<String>,
    /// Its resting rest was canceled.
    pub canceled: bool,
    /// Exchange time of the release, ms since epoch.
    pub at_ms: i64,
    /// Journal sequence number.
    pub seq: u64,
}

/// Whole free nodes of one size in a fabric domain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DomainNodeSize {
    /// GPUs per node.
    pub gpus_per_node: u32,
    /// Nodes of that size with every GPU listed free now.
    pub nodes: u32,
}

/// The largest gang a domain could take now (whole free nodes only).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct GangShapeView {
    /// Nodes.
    pub nodes: u32,
    /// GPUs on each.
    pub gpus_per_node: u32,
}

/// One row of `GET /v1/inventory/domains`: a fabric domain's whole free nodes in one (SKU,
/// region) (docs/market-rules.md §13.1). Anonymous: never the supplier or its domain name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DomainInventoryView {
    /// An opaque id of the domain, stable while its supplier keeps the name (`d-` and 12 hex
    /// digits).
    pub domain_id: String,
    /// SKU id.
    pub sku: String,
    /// Region.
    pub region: String,
    /// The lowest interconnect among the domain's whole free nodes.
    pub interconnect: InterconnectDto,
    /// Lowest stated NIC bandwidth among them, Gbit/s (`null`: none stated).
    pub nic_gbps_min: Option<u32>,
    /// Highest stated NIC bandwidth among them, Gbit/s (`null`: none stated).
    pub nic_gbps_max: Option<u32>,
    /// Whole free nodes (listed: live offer, online, not held or draining; every GPU listed
    /// free), by node size, ascending.
    pub free_nodes: Vec<DomainNodeSize>,
    /// Whole free nodes in all.
    pub free_nodes_total: u32,
    /// The cheapest spot price among them, CNY per GPU-hour.
    pub cheapest_spot_price: String,
    /// The largest gang (nodes × GPUs per node, by GPUs; ties: more GPUs per node) these
    /// nodes could take now.
    pub largest_gang: GangShapeView,
}

/// `GET /v1/inventory/domains`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DomainInventory {
    /// Rows by SKU, region, then largest gang's GPUs descending, then domain id.
    pub domains: Vec<DomainInventoryView>,
}

/// An account as created.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AccountCreatedInfo {
    /// Account id.
    pub id: String,
    /// Name.
    pub name: String,
    /// Role.
    pub role: Role,
}

/// `POST /v1/admin/accounts` → 201: the account and its first key (shown once).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AccountCreated {
    /// The account.
    pub account: AccountCreatedInfo,
    /// The API key (`gpux_…`): shown once, never again.
    pub api_key: String,
    /// The key's id.
    pub key_id: String,
}

/// `POST /v1/admin/accounts/{id}/keys` → 201: a new key (shown once).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct KeyCreated {
    /// The API key: shown once.
    pub api_key: String,
    /// The key's id.
    pub key_id: String,
}

/// `DELETE …/keys/{key_id}` → the revocation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct KeyRevoked {
    /// The key's id.
    pub key_id: String,
    /// Always true.
    pub revoked: bool,
}

/// `POST /v1/admin/accounts/{id}/deposits|payouts` → 201: the transfer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TransferDone {
    /// The account.
    pub account_id: String,
    /// CNY.
    pub amount: String,
    /// Deposit or payout.
    pub kind: TransferKindDto,
    /// Journal sequence number.
    pub seq: u64,
    /// The account's balance (buyer) or payable (supplier) after it, CNY.
    pub balance_after: String,
}

/// `GET /v1/me` → who the calling key belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct MeView {
    /// Account id.
    pub account_id: String,
    /// Account name.
    pub name: Option<String>,
    /// Role.
    pub role: Role,
    /// Id of the key used.
    pub key_id: String,
}

/// One SKU of the catalog.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SkuView {
    /// SKU id, e.g. `H100-80G`.
    pub sku: String,
    /// Vendor, e.g. `NVIDIA`.
    pub vendor: String,
    /// Memory per GPU, GB.
    pub gpu_memory_gb: u32,
    /// Class, e.g. `datacenter`.
    pub class: String,
    /// Reference spot price, CNY per GPU-hour (data/gpu-price-list.csv).
    pub reference_spot_price: Option<String>,
    /// Reference preemptible price, CNY per GPU-hour.
    pub reference_preemptible_price: Option<String>,
}

/// `GET /v1/catalog`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CatalogView {
    /// Every SKU.
    pub skus: Vec<SkuView>,
    /// The market delivers leases (bids need a launch spec; docs/market-rules.md §11).
    pub delivery: bool,
}

/// One row of the public offer search `GET /v1/market/offers` (issue 26): a live listed offer
/// with free GPUs, what its node is (the attributes bids filter on and the attested host
/// facts) and what it has delivered. Anonymous: never the supplier, the node's name or id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct MarketOfferView {
    /// Offer id (what `gpux offers search` shows; not the node's).
    pub offer_id: String,
    /// SKU id.
    pub sku: String,
    /// Region of the node.
    pub region: String,
    /// Jurisdiction of the node, ISO 3166-1 alpha-2.
    pub jurisdiction: String,
    /// Network fabric of the node.
    pub interconnect: InterconnectDto,
    /// NVLink between the node's GPUs.
    pub nvlink: bool,
    /// GPUs listed free on the node now (> 0).
    pub free_gpus: u32,
    /// GPUs of the node.
    pub node_gpus: u32,
    /// Spot price, CNY per GPU-hour (4 decimals).
    pub spot_price: String,
    /// Preemptible price, CNY per GPU-hour (4 decimals); `null`: spot only.
    pub preemptible_price: Option<String>,
    /// Shortest fixed lease, s.
    pub min_lease_s: u64,
    /// Longest lease, s.
    pub max_lease_s: u64,
    /// Leaves the market at, ms since epoch.
    pub available_until_ms: i64,
    /// The node's verification status now (docs/market-rules.md §12.2): `verified`,
    /// `degraded`, `stale`, `failed`, `verifying`, `unverified`; `none` when the exchange does
    /// not verify.
    pub verification: String,
    /// The node's reliability score (the offer view's `reliability`, §12.3).
    pub reliability: crate::trust::ReliabilityView,
    /// The SLA terms its leases are credited by; `null`: the exchange's default rule.
    pub sla: Option<SlaTermsView>,
    /// GPU model as NVML names it (from the attestation; `null`: not attested).
    pub gpu_model: Option<String>,
    /// Memory of one GPU, MiB (the least over the attested GPUs; `null`: not attested).
    pub gpu_memory_mib: Option<u32>,
    /// PCIe link of the GPUs now, `gen×width` (`5x16`): the lowest generation and the
    /// narrowest width over the attested GPUs; `null`: not reported.
    pub pcie: Option<String>,
    /// Driver version (`null`: not attested or unknown).
    pub driver_version: Option<String>,
    /// CUDA version the driver supports (`null`: not attested or unknown).
    pub cuda_version: Option<String>,
    /// Network bandwidth of the host, Gb/s: the sum of its attested NICs' link speeds
    /// (`null`: none reported).
    pub nic_gbps: Option<u32>,
    /// Logical CPU cores of the host (`null`: not reported).
    pub cpu_cores: Option<u32>,
    /// Total RAM of the host, MiB (`null`: not reported).
    pub ram_mib: Option<u64>,
    /// Disk size of the host, GB of 10^9 bytes (`null`: not reported).
    pub disk_gb: Option<u32>,
}

/// `GET /v1/market/offers`: the offers that meet the query, in its order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct MarketOffers {
    /// Rows, at most the query's `limit`.
    pub offers: Vec<MarketOfferView>,
    /// Rows in `offers`.
    pub count: u32,
}

/// `GET /v1/inventory` without `sku`: one snapshot per SKU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct InventorySnapshots {
    /// Snapshots (each as the websocket's `inventory_snapshot`).
    pub snapshots: Vec<crate::ws::InventorySnapshot>,
}

/// `POST /v1/node-keys` answer: the key, shown only here.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NodeKeyCreated {
    /// The key's public id (to list and revoke it).
    pub key_id: String,
    /// The API key itself (`gpux_` + 32 hex digits): shown once, not retrievable later
    /// (named as in [`KeyCreated`]).
    pub api_key: String,
    /// The node it is scoped to.
    pub node_name: String,
}

/// One node key in `GET /v1/node-keys` (never the key itself).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NodeKeyView {
    /// The key's public id.
    pub key_id: String,
    /// The node it is scoped to.
    pub node_name: String,
    /// That node's id once registered, else `null`.
    pub node_id: Option<String>,
}

/// `GET /v1/node-keys` answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NodeKeyList {
    /// The caller's node keys, by key id.
    pub node_keys: Vec<NodeKeyView>,
}
