//! Named limits and the engine's configuration.

use serde::{Deserialize, Serialize};

/// Highest sequence number a command may carry: ids are `seq << 20 | k`
/// ([`crate::ids::derive_id`]), so `seq` must stay below 2^43 for ids to stay unique and fit
/// in an `i64`-safe range.
pub const MAX_SEQ: u64 = (1 << 43) - 1;
/// Most GPUs on one node (a 16-GPU HGX chassis is the largest common build).
pub const MAX_NODE_GPUS: u32 = 16;
/// Most GPUs one bid may ask for ("秒级弹性扩缩 1 卡 → 1000 卡" in the seeds, rounded up).
pub const MAX_BID_GPUS: u32 = 1024;
/// Longest lease term an offer may allow or a bid may ask for: 366 days, in seconds.
pub const MAX_LEASE_SECONDS: u64 = 366 * 24 * 3600;
/// Longest preemption notice an offer may give, seconds (issue 2: 0–900).
pub const MAX_NOTICE_SECONDS: u32 = 900;
/// Longest client order id, bytes (printable ASCII).
pub const MAX_CLIENT_ORDER_ID_LEN: usize = 64;
/// Longest node name, bytes (ASCII letters, digits, `-`, `.`, `_`).
pub const MAX_NODE_NAME_LEN: usize = 64;
/// Longest region name, bytes (lowercase ASCII letters, digits, `-`).
pub const MAX_REGION_LEN: usize = 32;
/// Most distinct regions the engine's region table holds.
pub const MAX_REGIONS: usize = 1024;
/// Most entries in one bid's allowed-regions or allowed-jurisdictions list.
pub const MAX_CONSTRAINT_ENTRIES: usize = 16;

/// Lowest availability an offer's SLA may promise, basis points (issue 26: 9000–9999).
pub const MIN_SLA_AVAILABILITY_BP: u32 = 9_000;
/// Highest availability an offer's SLA may promise, basis points (99.99 %).
pub const MAX_SLA_AVAILABILITY_BP: u32 = 9_999;
/// Highest credit multiple an offer's SLA may promise (issue 26: 1–50).
pub const MAX_SLA_MULTIPLE: u16 = 50;

/// Longest provisioning deadline an offer may give, seconds: from the moment a lease's GPUs
/// are its to the supplier's ready report (docs/market-rules.md §11; issue 15: "bounded").
pub const MAX_PROVISION_SECONDS: u32 = 1_800;
/// Provisioning deadline of an offer that names none, seconds (issue 15: "about 3 minutes").
pub const DEFAULT_PROVISION_SECONDS: u32 = 180;
/// Time a supplier has to report an ended lease's GPUs torn down (wiped), ms; then the node is
/// held until resumed (docs/market-rules.md §11).
pub const DEFAULT_TEARDOWN_TIMEOUT_MS: i64 = 600_000;

/// Engine configuration; part of the engine state (and of its hash).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineConfig {
    /// A node whose last heartbeat is more than this many ms old goes offline (issue 2: default
    /// 15 s).
    pub heartbeat_timeout_ms: i64,
    /// How long an accepted bid's client order id is remembered for duplicate detection, ms
    /// (default 24 h); bounded so the engine's memory does not grow with every bid ever placed.
    pub client_order_id_retention_ms: i64,
    /// Lease delivery (docs/market-rules.md §11): a fill provisions until the supplier reports
    /// ready (billing starts then), an ended lease's GPUs wipe until reported torn down, and a
    /// lease not delivered in time fails over. Off: the instant market of §1–10, where a lease
    /// runs from its fill and frees its GPUs at its end (the earlier scenarios and model-check
    /// streams specify that market). The gateway always runs with it on.
    #[serde(default)]
    pub delivery: bool,
    /// With `delivery`: how long a supplier has to report an ended lease torn down, ms (values
    /// below 1 count as 1).
    #[serde(default = "default_teardown_timeout_ms")]
    pub teardown_timeout_ms: i64,
}

fn default_teardown_timeout_ms() -> i64 {
    DEFAULT_TEARDOWN_TIMEOUT_MS
}

/// Serde default of [`crate::command::OfferTerms::provision_s`].
pub(crate) fn default_provision_s() -> u32 {
    DEFAULT_PROVISION_SECONDS
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            heartbeat_timeout_ms: 15_000,
            client_order_id_retention_ms: 24 * 3600 * 1000,
            delivery: false,
            teardown_timeout_ms: DEFAULT_TEARDOWN_TIMEOUT_MS,
        }
    }
}

/// Longest GPU UUID in an attestation, characters (NVML's are 40: `GPU-` and 36; MIG devices
/// `MIG-GPU-…` are longer), §12.1.
pub const MAX_GPU_UUID_LEN: usize = 64;

/// Longest GPU model name in an attestation, characters (§12.1).
pub const MAX_GPU_MODEL_LEN: usize = 64;

/// Longest fabric domain name (docs/market-rules.md §13.1), bytes of `[A-Za-z0-9._-]`.
pub const MAX_DOMAIN_LEN: usize = 64;

/// Largest NIC bandwidth a node may state, Gbit/s (§13.1): 32 ports of 800 Gbit/s.
pub const MAX_NIC_GBPS: u32 = 25_600;
