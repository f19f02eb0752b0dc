//! Supplier trust on the wire (issue 26, docs/market-rules.md §12): a node's verification
//! result and what a verification report answers.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A node's verification (docs/market-rules.md §12.2), as buyers and its supplier see it. The
/// next run's due time is never shown: it is drawn so that a supplier cannot prepare for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NodeVerificationView {
    /// `unverified`, `verifying`, `verified`, `degraded`, `failed` or `stale` (a result older
    /// than 14 days).
    pub status: String,
    /// When the latest run ended, ms since epoch (absent before one did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_ms: Option<i64>,
    /// The latest run's judgment: `verified`, `degraded` or `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// Its worst figure as a share of the SKU's reference, percent with two decimals
    /// (`"95.65"`; `"0.00"` for a run that failed without figures).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worst_pct: Option<String>,
    /// What decided it: `bf16_tflops`, `mem_bandwidth`, `all_reduce`, `missing`,
    /// `nvml_fault`, `dcgm` or `timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    /// The GPU index of that figure, when per GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    /// The run under way: its lease id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_lease_id: Option<String>,
    /// The run under way: its report deadline, ms since epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_deadline_ms: Option<i64>,
}

/// A fraction as the exchange computed it: numerator, denominator, and the value with 4
/// decimals (absent when the denominator is 0).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RatioView {
    /// Numerator.
    pub num: u64,
    /// Denominator (0: nothing measured).
    pub den: u64,
    /// `num / den`, 4 decimals, floor (`"0.9251"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// A node's or supplier's reliability score over the last 30 UTC days (issue 26,
/// docs/market-rules.md §12.3: every formula, unit and threshold is there).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ReliabilityView {
    /// `new` (fewer than 10 leases ended or 24 delivered lease-hours: too little history) or
    /// `scored`.
    pub status: String,
    /// Delivered / committed lease-GPU-ms (committed = delivered + lost to node failure,
    /// non-delivery and overdue teardown, each loss capped at an hour).
    pub reliability: RatioView,
    /// Leases ready / leases that provisioned and were ready or not delivered.
    pub delivery_rate: RatioView,
    /// Node-failure ends × 1,000 × 3,600,000 / delivered lease-ms: failures per 1,000
    /// delivered lease-hours.
    pub node_failures_per_1000_lease_hours: RatioView,
    /// Online ms / (online + offline) ms.
    pub heartbeat_coverage: RatioView,
    /// Leases ended in the window.
    pub leases_ended: u64,
    /// What a bid's `min_reliability` compares against today: the reliability at the start
    /// of the current UTC day, 4 decimals (absent: `new` then). Nodes only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matching_reliability: Option<String>,
}
