//! REST request bodies. Limits quoted in the docs are enforced by the server (the engine's
//! `exchange::limits` and the gateway's named constants); the schema carries the bounds a
//! client can check before sending, exactly: a body the schema allows is never refused 400,
//! and one it forbids is never accepted (`gateway/tests/openapi.rs` checks each bound against
//! the server's own limits and validators; 422 stays for the market's rules and state).
//!
//! Two schema extensions are filled in by the server when it serves `/openapi.json`
//! (`gateway::api::openapi`): `x-gpux-enum` (`"sku"`: the catalog's SKU ids, `"region"`: the
//! operator's regions) and `x-gpux-merge` (JSON Schema keywords utoipa has no attribute for,
//! merged into the schema). On an array field utoipa attaches both to the items' schema.

use crate::enums::{
    DcgmResultDto, GangScopeDto, InterconnectDto, KindDto, MemberLossDto, NvmlFaultDto,
    PlacementDto, Role, TifDto,
};
use crate::launch::LaunchRequest;
use crate::scalar::{DecimalStr, IdStr};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /v1/nodes`: register a node.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeRequest {
    /// Supplier's name for the node, unique per account: 1..=64 of `[A-Za-z0-9._-]`
    /// (`exchange::limits::MAX_NODE_NAME_LEN`).
    #[schema(min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9._-]{1,64}$")]
    pub name: String,
    /// Catalog SKU id, e.g. `H100-80G` (`GET /v1/catalog`).
    #[schema(extensions(("x-gpux-enum" = json!("sku"))))]
    pub sku: String,
    /// Physical GPUs, 1..=16 (`exchange::limits::MAX_NODE_GPUS`).
    #[schema(minimum = 1, maximum = 16)]
    pub gpus: u32,
    /// Region, e.g. `cn-east-2` (one of the operator's regions).
    #[schema(extensions(("x-gpux-enum" = json!("region"))))]
    pub region: String,
    /// ISO 3166-1 alpha-2 country code, e.g. `CN`.
    #[schema(pattern = "^[A-Z]{2}$")]
    pub jurisdiction: String,
    /// Fabric between nodes.
    pub interconnect: InterconnectDto,
    /// NVLink between the node's GPUs.
    #[serde(default)]
    pub nvlink: bool,
    /// The supplier's own id for the IB/RoCE fabric the node is on (docs/market-rules.md
    /// §13.1): 1..=64 of `[A-Za-z0-9._-]` ([`MAX_DOMAIN_LEN`]; else 422 `invalid_domain`
    /// naming `fabric_domain`). Nodes of one supplier with the same domain can take one
    /// domain-scoped gang; absent: on no shared fabric.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9._-]{1,64}$")]
    pub fabric_domain: Option<String>,
    /// The sum of the node's NICs' bandwidth, Gbit/s, 1..=25600 ([`MAX_FABRIC_NIC_GBPS`];
    /// else 422 `invalid_domain` naming `nic_gbps`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 25600)]
    pub nic_gbps: Option<u32>,
}

/// Longest fabric domain name, bytes of `[A-Za-z0-9._-]` (the engine's
/// `exchange::limits::MAX_DOMAIN_LEN`).
pub const MAX_DOMAIN_LEN: usize = 64;
/// Largest NIC bandwidth a node may state with its fabric domain, Gbit/s (the engine's
/// `exchange::limits::MAX_NIC_GBPS`: 32 ports of 800 Gbit/s).
pub const MAX_FABRIC_NIC_GBPS: u32 = 25_600;

/// `PATCH /v1/nodes/{id}`: change a node; absent fields stay.
#[derive(Clone, Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeUpdateRequest {
    /// New region (one of the operator's regions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(extensions(("x-gpux-enum" = json!("region"))))]
    pub region: Option<String>,
    /// New jurisdiction, ISO 3166-1 alpha-2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[A-Z]{2}$")]
    pub jurisdiction: Option<String>,
    /// New fabric.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interconnect: Option<InterconnectDto>,
    /// NVLink.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink: Option<bool>,
    /// Draining: no new leases; running leases continue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draining: Option<bool>,
    /// New fabric domain (§13.1), 1..=64 of `[A-Za-z0-9._-]`; `""` clears it (the node is on
    /// no shared fabric). Absent: unchanged. A gang keeps the members it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 64, pattern = "^[A-Za-z0-9._-]{0,64}$")]
    pub fabric_domain: Option<String>,
    /// New NIC bandwidth, Gbit/s, 1..=25600. Absent: unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 25600)]
    pub nic_gbps: Option<u32>,
}

/// `POST /v1/nodes/{id}/heartbeat`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatRequest {
    /// Healthy GPUs now, 0..=the node's GPUs (at most 16, `exchange::limits::MAX_NODE_GPUS`;
    /// above the node's own count: 422 `invalid_gpus`).
    #[schema(maximum = 16)]
    pub healthy_gpus: u32,
    /// The agent's clock minus the exchange's, ms (positive: the host runs ahead), as the
    /// agent measured it from a previous heartbeat answer's `at_ms` (issue 25); shown in the
    /// node view as `agent_clock_offset_ms`. At most one day either way
    /// ([`MAX_CLOCK_OFFSET_MS`]; beyond: 400 `invalid_clock_offset`). Absent: unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = -86400000, maximum = 86400000)]
    pub clock_offset_ms: Option<i64>,
    /// Exactly which GPUs are unhealthy now (issue 26, docs/market-rules.md §12.1): at most
    /// [`MAX_NODE_GPUS_WIRE`] entries, each index below 16 and below the node's GPU count
    /// (else 422 `invalid_gpus`), no index twice (400 `invalid_unhealthy_gpus` naming
    /// `unhealthy_gpus`). When present, it decides the node's healthy GPUs (every GPU not
    /// named) and `healthy_gpus` is ignored: the leases on the named GPUs end `node_failure`,
    /// the others keep running. Absent: the count-only heartbeat of §2. An empty list: every
    /// GPU healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_items = 16)]
    pub unhealthy_gpus: Option<Vec<UnhealthyGpu>>,
}

/// Most GPUs of a node on the wire: 16 (the engine's `exchange::limits::MAX_NODE_GPUS`; a
/// gateway test checks they are equal). Bounds attestations and `unhealthy_gpus`, and every
/// GPU index is below it.
pub const MAX_NODE_GPUS_WIRE: u32 = 16;
/// Longest GPU UUID, characters of printable ASCII without spaces (NVML's are 40: `GPU-` and
/// 36; the engine's `exchange::limits::MAX_GPU_UUID_LEN`).
pub const MAX_GPU_UUID_LEN: usize = 64;
/// Longest GPU model name, characters without control characters (the engine's
/// `exchange::limits::MAX_GPU_MODEL_LEN`).
pub const MAX_GPU_MODEL_LEN: usize = 64;
/// Longest reason of an unhealthy GPU, characters without control characters (an NVML
/// problem such as `XID 79: fallen off the bus`; the agent joins several with `; `).
pub const MAX_GPU_REASON_LEN: usize = 256;
/// Longest driver or CUDA version string of an attestation, characters of printable ASCII
/// (`550.54.15`, `12.4`).
pub const MAX_VERSION_LEN: usize = 32;
/// Most NICs an attestation lists.
pub const MAX_NICS: usize = 16;
/// Longest NIC name, characters of printable ASCII without spaces (`mlx5_0`, `eth0`).
pub const MAX_NIC_NAME_LEN: usize = 64;
/// Fastest NIC an attestation may state, Gb/s (a 1.6 Tb/s port has room under it).
pub const MAX_NIC_GBPS: u32 = 3_200;
/// Highest PCIe generation an attestation may state.
pub const MAX_PCIE_GEN: u32 = 8;
/// Widest PCIe link an attestation may state, lanes.
pub const MAX_PCIE_WIDTH: u32 = 32;

/// One GPU a heartbeat reports unhealthy (issue 26; also how the node view lists them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UnhealthyGpu {
    /// GPU index on the node, 0..16 ([`MAX_NODE_GPUS_WIRE`]) and below the node's GPUs.
    #[schema(maximum = 15)]
    pub index: u32,
    /// Its UUID as NVML reports it, 1..=64 printable ASCII without spaces
    /// ([`MAX_GPU_UUID_LEN`]); informational.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[!-~]{1,64}$")]
    pub uuid: Option<String>,
    /// Why (an XID, ECC errors, fallen off the bus), 1..=256 characters without control
    /// characters ([`MAX_GPU_REASON_LEN`]); shown in the node view.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(
        min_length = 1,
        max_length = 256,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub reason: Option<String>,
}

/// `POST /v1/nodes/{id}/attestation`: what the node agent found on the host (issue 26,
/// docs/market-rules.md §12.1). The GPUs are checked against the node's registration; the
/// host facts (driver, CUDA, PCIe, MIG, NICs) are kept for the node view.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AttestationRequest {
    /// Every GPU found, indexes strictly increasing, 1..=16 entries ([`MAX_NODE_GPUS_WIRE`]).
    #[schema(min_items = 1, max_items = 16)]
    pub gpus: Vec<AttestedGpuDto>,
    /// Driver version as NVML reports it (`550.54.15`), 0..=32 printable ASCII
    /// ([`MAX_VERSION_LEN`]; empty: unknown).
    #[schema(pattern = "^[ -~]{0,32}$")]
    pub driver_version: String,
    /// CUDA version the driver supports (`12.4`), 0..=32 printable ASCII (empty: unknown).
    #[schema(pattern = "^[ -~]{0,32}$")]
    pub cuda_version: String,
    /// Network interfaces, at most 16 ([`MAX_NICS`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 16)]
    pub nics: Vec<NicDto>,
    /// Logical CPU cores of the host, 1..=[`MAX_CPU_CORES`] (4096); absent: not reported.
    /// Out of bounds: 400 `invalid_attestation` naming `cpu_cores`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 4096)]
    pub cpu_cores: Option<u32>,
    /// Total RAM of the host, MiB, 1..=[`MAX_RAM_MIB`] (64 TiB); absent: not reported.
    /// Out of bounds: 400 `invalid_attestation` naming `ram_mib`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 67_108_864)]
    pub ram_mib: Option<u64>,
    /// Size of the host's disk (`gpux-agent`: the filesystem holding its state directory),
    /// GB of 10^9 bytes, 0..=[`MAX_DISK_GB`] (1 EB); absent: not reported. Out of bounds:
    /// 400 `invalid_attestation` naming `disk_gb`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(maximum = 1_000_000_000)]
    pub disk_gb: Option<u32>,
}

/// Most logical CPU cores an attestation may state.
pub const MAX_CPU_CORES: u32 = 4_096;
/// Most RAM an attestation may state, MiB (64 TiB).
pub const MAX_RAM_MIB: u64 = 64 * 1024 * 1024;
/// Largest disk an attestation may state, GB of 10^9 bytes (1 EB).
pub const MAX_DISK_GB: u32 = 1_000_000_000;

/// One GPU of an attestation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AttestedGpuDto {
    /// GPU index, 0..16, strictly increasing in the list.
    #[schema(maximum = 15)]
    pub index: u32,
    /// UUID (`GPU-…`), 1..=64 printable ASCII without spaces, unique in the list.
    #[schema(pattern = "^[!-~]{1,64}$")]
    pub uuid: String,
    /// Model name as NVML reports it (`NVIDIA H100 80GB HBM3`), 1..=64 characters without
    /// control characters, not only spaces; a model the exchange does not know: 422
    /// `unknown_model`.
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*[^\\s\\u0000-\\u001f\\u007f-\\u009f][^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub model: String,
    /// Total memory, MiB.
    pub memory_mib: u32,
    /// PCIe generation of the link now, 1..=8 ([`MAX_PCIE_GEN`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 8)]
    pub pcie_gen: Option<u32>,
    /// PCIe lanes of the link now, 1..=32 ([`MAX_PCIE_WIDTH`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 32)]
    pub pcie_width: Option<u32>,
    /// Highest PCIe generation the GPU and slot support, 1..=8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 8)]
    pub pcie_max_gen: Option<u32>,
    /// Widest PCIe link the GPU and slot support, 1..=32 lanes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 32)]
    pub pcie_max_width: Option<u32>,
    /// MIG mode enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_mode: Option<bool>,
    /// NVLink links active now (`nvmlDeviceGetNvLinkState` over the GPU's links, at most
    /// [`MAX_NVLINK_LINKS`]); absent where NVML does not say (no NVLink, a simulated GPU).
    /// Informational (a host fact).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink_links: Option<u32>,
}

/// Most NVLink links one GPU has (NVML's `NVML_NVLINK_MAX_LINKS`, 18 on H100).
pub const MAX_NVLINK_LINKS: u32 = 18;

/// A network interface of an attested host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NicDto {
    /// Interface name (`mlx5_0`), 1..=64 printable ASCII without spaces ([`MAX_NIC_NAME_LEN`]).
    #[schema(pattern = "^[!-~]{1,64}$")]
    pub name: String,
    /// Link speed, Gb/s, 0..=3200 ([`MAX_NIC_GBPS`]).
    #[schema(maximum = 3200)]
    pub gbps: u32,
}

/// Largest agent clock offset a heartbeat may report, ms, either way: one day. A host clock
/// off by more is broken beyond what an offset helps with (issue 25).
pub const MAX_CLOCK_OFFSET_MS: i64 = 86_400_000;

/// `POST /v1/offers`: a node's offer. Prices are CNY per GPU-hour as decimal strings in
/// (0, 100000] with at most 4 decimals (the 0.0001 tick). Amending an offer (`PUT`) takes the same terms without
/// `node_id` ([`OfferAmendRequest`]); this type serves both for clients that build one value
/// (`node_id: None` serializes as the amend body), and the server refuses a missing `node_id`
/// here with 400 `missing_field`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OfferRequest {
    /// The node, an id (required when posting).
    #[schema(value_type = String, required = true, pattern = "^(?:[0-9]{1,19}|0[0-9]{19}|1[0-7][0-9]{18}|18[0-3][0-9]{17}|184[0-3][0-9]{16}|1844[0-5][0-9]{15}|18446[0-6][0-9]{14}|184467[0-3][0-9]{13}|1844674[0-3][0-9]{12}|184467440[0-6][0-9]{10}|1844674407[0-2][0-9]{9}|18446744073[0-6][0-9]{8}|1844674407370[0-8][0-9]{6}|18446744073709[0-4][0-9]{5}|184467440737095[0-4][0-9]{4}|18446744073709550[0-9]{3}|18446744073709551[0-5][0-9]{2}|1844674407370955160[0-9]|1844674407370955161[0-4]|18446744073709551615)$")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<IdStr>,
    /// GPUs offered, 1..=healthy GPUs (at most 16, `exchange::limits::MAX_NODE_GPUS`; above
    /// the node's healthy GPUs: 422 `invalid_gpus`).
    #[schema(minimum = 1, maximum = 16)]
    pub gpus: u32,
    /// Spot price, CNY per GPU-hour, e.g. `"18.50"`.
    #[schema(value_type = String, example = "18.50", pattern = "^(?:[1-9][0-9]{0,4}(?:\\.[0-9]{1,4})?|100000(?:\\.0{1,4})?|0\\.(?:[1-9][0-9]{0,3}|0[1-9][0-9]{0,2}|00[1-9][0-9]?|000[1-9]))$")]
    pub spot_price: DecimalStr,
    /// Lowest preemptible price, CNY per GPU-hour, below the spot price (else 422
    /// `invalid_price`); absent: no preemptible leases.
    #[schema(value_type = Option<String>, example = "9.00", pattern = "^(?:[1-9][0-9]{0,4}(?:\\.[0-9]{1,4})?|100000(?:\\.0{1,4})?|0\\.(?:[1-9][0-9]{0,3}|0[1-9][0-9]{0,2}|00[1-9][0-9]?|000[1-9]))$")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemptible_price: Option<DecimalStr>,
    /// Shortest fixed-duration lease, seconds (default 60), at most `max_lease_s` (else 422
    /// `invalid_duration`).
    #[schema(maximum = 31_622_400)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_lease_s: Option<u64>,
    /// Longest lease, seconds, 1..=31,622,400 (366 days, `exchange::limits::MAX_LEASE_SECONDS`;
    /// default 7 days).
    #[schema(minimum = 1, maximum = 31_622_400)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_lease_s: Option<u64>,
    /// Offer leaves the market at, ms since epoch, after now (else 422 `invalid_until`;
    /// default: 30 days from now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_until_ms: Option<i64>,
    /// Preemption notice for preemptible leases, seconds 0..=900
    /// (`exchange::limits::MAX_NOTICE_SECONDS`; default 30).
    #[schema(maximum = 900)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice_s: Option<u32>,
    /// Provisioning deadline, seconds 1..=1800 (`exchange::limits::MAX_PROVISION_SECONDS`;
    /// default 180): a lease must be reported ready this long after its GPUs become its, or
    /// it ends not delivered and fails over (docs/market-rules.md §11).
    #[schema(minimum = 1, maximum = 1800)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provision_s: Option<u32>,
    /// The SLA terms the offer promises (issue 26, docs/settlement.md "SLA credit"), frozen on
    /// each lease at fill like its price; out of bounds: 422 `invalid_sla` naming the field
    /// (`sla.credit_multiple` …). Absent: the exchange's default rule (10× the outage charge,
    /// outage capped at 1 h, credit capped at the lease's charge so far, no non-delivery credit,
    /// no monthly promise). Posting only: an amend (`PUT`) keeps the terms posted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sla: Option<SlaTermsDto>,
}

/// Pattern of an SLA availability promise: a percentage 90.00..=99.99 with at most 2
/// decimals (`settlement::sla::MIN_AVAILABILITY_BP`..=`MAX_AVAILABILITY_BP` basis points).
pub const SLA_AVAILABILITY_PATTERN: &str = "^9[0-9](?:\\.[0-9]{1,2})?$";

/// An offer's SLA terms (issue 26, docs/settlement.md "SLA credit"): what a lease on it is
/// credited when its node fails, and the monthly availability it promises. Bounds are
/// `settlement::sla`'s named constants; out of bounds: 422 `invalid_sla` naming the field.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SlaTermsDto {
    /// Promised monthly availability, percent as a decimal string 90.00..=99.99 with at most
    /// 2 decimals, e.g. `"99.9"` (measured per buyer × supplier × month at close).
    #[schema(example = "99.9", pattern = "^9[0-9](?:\\.[0-9]{1,2})?$")]
    pub availability: String,
    /// Credit multiple of the outage charge, 1..=50.
    #[schema(minimum = 1, maximum = 50)]
    pub credit_multiple: u16,
    /// Longest outage credited per failure, seconds 60..=86400; also the outage assumed when
    /// failover finds no capacity.
    #[schema(minimum = 60, maximum = 86400)]
    pub outage_cap_s: u32,
    /// What one credit is capped at.
    pub credit_cap: CreditCapDto,
    /// Whether a lease never delivered earns a credit (outage from its provisioning deadline to
    /// its replacement's ready time); needs a `monthly_fee_pct` cap. Default false.
    #[serde(default)]
    pub non_delivery_credit: bool,
}

/// What one SLA credit is capped at: `"charge_so_far"` (what the buyer paid for the lease so
/// far) or `{"monthly_fee_pct": 10..=100}` (that percentage of price × GPUs × 720 h).
///
/// Decoded by hand ([`TryFrom<serde_json::Value>`]): the schema of the object form cannot say
/// "no other keys" (utoipa), so other keys beside `monthly_fee_pct` are ignored rather than
/// refused — a request the schema allows is never refused 400.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case", try_from = "serde_json::Value")]
pub enum CreditCapDto {
    /// The lease's charge so far (the rule before issue 26).
    ChargeSoFar,
    /// This percentage (10..=100; utoipa has no bounds for a tuple variant, so the schema
    /// says 0..=255 and the server answers 422 `invalid_sla` outside 10..=100) of the lease's
    /// monthly fee: 上限≥月服务费的50% is 50.
    MonthlyFeePct(u8),
}

impl TryFrom<serde_json::Value> for CreditCapDto {
    type Error = String;

    fn try_from(v: serde_json::Value) -> Result<Self, Self::Error> {
        match &v {
            serde_json::Value::String(s) if s == "charge_so_far" => Ok(CreditCapDto::ChargeSoFar),
            // Any number decodes (clamped to 0..=255): the server answers 422 `invalid_sla`
            // outside 10..=100, as the field's doc says.
            serde_json::Value::Object(m) => match m.get("monthly_fee_pct").and_then(|p| p.as_f64())
            {
                Some(p) => Ok(CreditCapDto::MonthlyFeePct(
                    p.clamp(0.0, 255.0).round() as u8
                )),
                None => Err("expected `charge_so_far` or {\"monthly_fee_pct\": 10..=100}".into()),
            },
            _ => Err("expected `charge_so_far` or {\"monthly_fee_pct\": 10..=100}".into()),
        }
    }
}

/// `PUT /v1/offers/{id}`: an offer's new terms. The terms of [`OfferRequest`] without
/// `node_id`: an offer stays on its node (a `node_id` here answers 400 `invalid_field`).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OfferAmendRequest {
    /// GPUs offered, 1..=healthy GPUs (at most 16).
    #[schema(minimum = 1, maximum = 16)]
    pub gpus: u32,
    /// Spot price, CNY per GPU-hour.
    #[schema(value_type = String, example = "18.50", pattern = "^(?:[1-9][0-9]{0,4}(?:\\.[0-9]{1,4})?|100000(?:\\.0{1,4})?|0\\.(?:[1-9][0-9]{0,3}|0[1-9][0-9]{0,2}|00[1-9][0-9]?|000[1-9]))$")]
    pub spot_price: DecimalStr,
    /// Lowest preemptible price, CNY per GPU-hour, below the spot price; absent: none.
    #[schema(value_type = Option<String>, example = "9.00", pattern = "^(?:[1-9][0-9]{0,4}(?:\\.[0-9]{1,4})?|100000(?:\\.0{1,4})?|0\\.(?:[1-9][0-9]{0,3}|0[1-9][0-9]{0,2}|00[1-9][0-9]?|000[1-9]))$")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemptible_price: Option<DecimalStr>,
    /// Shortest fixed-duration lease, seconds (default 60), at most `max_lease_s`.
    #[schema(maximum = 31_622_400)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_lease_s: Option<u64>,
    /// Longest lease, seconds, 1..=31,622,400 (default 7 days).
    #[schema(minimum = 1, maximum = 31_622_400)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_lease_s: Option<u64>,
    /// Offer leaves the market at, ms since epoch, after now (default: 30 days from now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_until_ms: Option<i64>,
    /// Preemption notice, seconds 0..=900 (default 30).
    #[schema(maximum = 900)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice_s: Option<u32>,
    /// Provisioning deadline, seconds 1..=1800 (default 180).
    #[schema(minimum = 1, maximum = 1800)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provision_s: Option<u32>,
}

impl From<OfferAmendRequest> for OfferRequest {
    /// The same terms, as an [`OfferRequest`] without `node_id`.
    fn from(a: OfferAmendRequest) -> OfferRequest {
        OfferRequest {
            node_id: None,
            gpus: a.gpus,
            spot_price: a.spot_price,
            preemptible_price: a.preemptible_price,
            min_lease_s: a.min_lease_s,
            max_lease_s: a.max_lease_s,
            available_until_ms: a.available_until_ms,
            notice_s: a.notice_s,
            provision_s: a.provision_s,
            sla: None,
        }
    }
}

/// Where a bid's GPUs may be; empty lists mean any.
#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConstraintsDto {
    /// Allowed regions, at most 16 (`exchange::limits::MAX_CONSTRAINT_ENTRIES`), each one of
    /// the operator's regions (a region with no node yet: 422 `unknown_region`).
    #[serde(default)]
    #[schema(max_items = 16, extensions(("x-gpux-enum" = json!("region"))))]
    pub regions: Vec<String>,
    /// Allowed jurisdictions, ISO 3166-1 alpha-2, at most 16.
    #[serde(default)]
    #[schema(max_items = 16, extensions(("x-gpux-merge" = json!({"pattern": "^[A-Z]{2}$"}))))]
    pub jurisdictions: Vec<String>,
    /// Minimum fabric.
    #[serde(default)]
    pub min_interconnect: Option<InterconnectDto>,
    /// Require NVLink.
    #[serde(default)]
    pub nvlink: bool,
    /// Only nodes whose latest verification run is `verified` and not stale (issue 26,
    /// docs/market-rules.md §12.2).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub verified: bool,
    /// Only nodes whose reliability score at the start of today (UTC) is at least this,
    /// a decimal from `"0"` to `"1"` with at most 4 places (`"0.99"`); a `new` node never
    /// qualifies (docs/market-rules.md §12.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, pattern = "^(0(\\.[0-9]{1,4})?|1(\\.0{1,4})?)$")]
    pub min_reliability: Option<String>,
    /// Only offers whose supplier stated SLA terms at least this good (issue 26,
    /// docs/market-rules.md §12.4): an offer without stated terms never qualifies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_sla: Option<MinSlaDto>,
}

/// The least SLA a bid takes (`constraints.min_sla`, docs/market-rules.md §12.4): each part
/// absent requires nothing of it; at least one is given (422 `invalid_constraints` naming
/// `constraints.min_sla` otherwise).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MinSlaDto {
    /// Least promised monthly availability, percent 90.00..=99.99 with at most 2 decimals
    /// (`"99.9"`; 422 `invalid_constraints` naming `constraints.min_sla.availability`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, example = "99.9", pattern = "^9[0-9](?:\\.[0-9]{1,2})?$")]
    pub availability: Option<String>,
    /// Least credit multiple of the outage charge, 1..=50 (422 `invalid_constraints` naming
    /// `constraints.min_sla.credit_multiple`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 50)]
    pub credit_multiple: Option<u16>,
}

/// A bid (REST `POST /v1/bids` and the websocket's `place_bid`).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BidRequest {
    /// Buyer's id for the bid, unique per account: 1..=64 printable ASCII
    /// (`exchange::limits::MAX_CLIENT_ORDER_ID_LEN`).
    #[schema(min_length = 1, max_length = 64, pattern = "^[!-~]{1,64}$")]
    pub client_order_id: String,
    /// Catalog SKU id.
    #[schema(extensions(("x-gpux-enum" = json!("sku"))))]
    pub sku: String,
    /// GPUs, 1..=1024 (`exchange::limits::MAX_BID_GPUS`); a single-node bid at most 16 (else
    /// 422 `invalid_gpus`). Required, except for a gang (`placement: gang`), where it may be
    /// omitted (= `gang.nodes × gang.gpus_per_node`) and if given must equal that (else 422
    /// `invalid_gang` naming `gpus`); missing on another placement: 422 `invalid_gpus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1024)]
    pub gpus: Option<u32>,
    /// Highest price, CNY per GPU-hour, decimal string.
    #[schema(value_type = String, example = "20.00", pattern = "^(?:[1-9][0-9]{0,4}(?:\\.[0-9]{1,4})?|100000(?:\\.0{1,4})?|0\\.(?:[1-9][0-9]{0,3}|0[1-9][0-9]{0,2}|00[1-9][0-9]?|000[1-9]))$")]
    pub limit_price: DecimalStr,
    /// Spot or preemptible.
    pub kind: KindDto,
    /// Single node (default), spread, or gang (all-or-none over one fabric domain: `gang`
    /// says its shape; docs/market-rules.md §13).
    #[serde(default = "default_placement")]
    pub placement: PlacementDto,
    /// The gang's shape, with `placement: gang` only (else 422 `invalid_gang` naming `gang`;
    /// `placement: gang` without it: the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang: Option<GangRequest>,
    /// Spread IOC bids only: fill at least this many GPUs now, or none (1..=`gpus`;
    /// docs/market-rules.md §13.5). On another placement, a GTC bid, or above `gpus`: 422
    /// `invalid_gpus` naming `min_gpus`. Too few fillable: the bid closes `min_gpus` with
    /// `close_detail.fillable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1024)]
    pub min_gpus: Option<u32>,
    /// Constraints.
    #[serde(default)]
    pub constraints: ConstraintsDto,
    /// Lease term, seconds, 1..=31,622,400 (`exchange::limits::MAX_LEASE_SECONDS`); absent:
    /// open-ended (up to the offer's maximum).
    #[schema(minimum = 1, maximum = 31_622_400)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<u64>,
    /// IOC or GTC.
    pub time_in_force: TifDto,
    /// GTC only: the rest expires at, ms since epoch, after now (on an IOC bid, or not after
    /// now: 422 `invalid_expiry`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
    /// What the leases run (required when the market delivers leases, as the server does):
    /// SSH keys, image, command, environment, ports, disk. Journaled with the bid and shown to
    /// the supplier of every node that holds one of its leases (no secrets in `env`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch: Option<LaunchRequest>,
}

fn default_placement() -> PlacementDto {
    PlacementDto::SingleNode
}

/// A gang's shape (`placement: gang`, docs/market-rules.md §13.2): `nodes` leases of
/// `gpus_per_node` GPUs, one per node, all on one fabric domain (or one region) of one
/// supplier, filled whole or not at all. `nodes × gpus_per_node` at most 1024 (else 422
/// `invalid_gang` naming `gang`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GangRequest {
    /// Nodes, 1..=1024.
    #[schema(minimum = 1, maximum = 1024)]
    pub nodes: u32,
    /// GPUs on each node, 1..=16 (`exchange::limits::MAX_NODE_GPUS`).
    #[schema(minimum = 1, maximum = 16)]
    pub gpus_per_node: u32,
    /// `domain` (default: one fabric domain) or `region` (one region of one supplier).
    #[serde(default)]
    pub scope: GangScopeDto,
    /// `keep` (default: the rest run on when a running member is lost and nothing replaces
    /// it) or `end_all` (every member ends).
    #[serde(default)]
    pub on_member_loss: MemberLossDto,
}

/// `POST /v1/admin/accounts`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateAccountRequest {
    /// Unique name, 1..=64 of `[A-Za-z0-9._-]`.
    #[schema(min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9._-]{1,64}$")]
    pub name: String,
    /// Role.
    pub role: Role,
}

/// `POST /v1/admin/accounts/{id}/deposits` and `/payouts`: an amount in CNY (the
/// `Idempotency-Key` header names the transfer).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AmountRequest {
    /// CNY, a decimal string in (0, 10^15] (`settlement::MAX_INPUT_AMOUNT`) with at most 2
    /// decimals written.
    #[schema(value_type = String, example = "1000.00", max_length = 40, pattern = "^(?:[1-9][0-9]{0,14}(?:\\.[0-9]{1,2})?|1000000000000000(?:\\.00?)?|0\\.(?:[1-9][0-9]?|0[1-9]))$")]
    pub amount: DecimalStr,
}

/// `POST /v1/node-keys` body.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeKeyRequest {
    /// The node's name, as registered (or to be registered) with `POST /v1/nodes`: 1..=64 of
    /// `[A-Za-z0-9._-]`.
    #[schema(min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9._-]{1,64}$")]
    pub node_name: String,
}

/// Longest `raw_tail` of a verification report, bytes (the last 8 KiB of the tools' output).
pub const MAX_VERIFICATION_TAIL_BYTES: usize = 8_192;

/// `POST /v1/leases/{id}/verification` (node key): what the node agent measured on a
/// verification lease's GPUs (issue 26, docs/market-rules.md §12.2). The exchange judges the
/// figures against its per-SKU reference table; a figure absent is not measured (judged as
/// failing it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VerificationReport {
    /// One entry per GPU of the lease, by index (the lease's `gpu_indexes`), at most 16
    /// ([`MAX_NODE_GPUS_WIRE`]).
    #[schema(max_items = 16)]
    pub gpus: Vec<GpuFiguresDto>,
    /// `all_reduce_perf` (nccl-tests) bus bandwidth at the largest message size over all the
    /// lease's GPUs, GB/s; absent with one GPU or without the tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allreduce_busbw_gbps: Option<f64>,
    /// Outcome of `dcgmi diag -r 1`; absent without `dcgmi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dcgm_diag: Option<DcgmResultDto>,
    /// How long the checks ran, s.
    pub duration_s: u64,
    /// The last ≤ 8 KiB ([`MAX_VERIFICATION_TAIL_BYTES`]) of the tools' output, for the
    /// record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_tail: Option<String>,
}

/// One GPU's figures in a [`VerificationReport`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GpuFiguresDto {
    /// GPU index on the node, 0..16.
    #[schema(maximum = 15)]
    pub index: u32,
    /// Its UUID as NVML reports it now (absent when it did not answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// Dense BF16 matrix-multiply throughput (8192³ GEMM, median), TFLOPS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bf16_tflops: Option<f64>,
    /// Device memory bandwidth (a large device-to-device copy, read + write), GB/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_bw_gbps: Option<f64>,
    /// What the NVML checks found wrong (empty: nothing).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<NvmlFaultDto>,
}
