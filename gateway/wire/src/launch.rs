//! Lease delivery on the wire (issue 15; docs/market-rules.md §11): a bid's launch spec, a
//! supplier's access details and reports. The server validates each into its domain type
//! (`gateway::api::launch`), with the limits named in `gateway::delivery`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// A bid's launch spec. At least one SSH key, or an image with at least one port to expose.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LaunchRequest {
    /// SSH public keys, OpenSSH one-line format (`ssh-ed25519 AAAA… comment`), at most 16 of
    /// at most 4,096 bytes.
    #[serde(default)]
    #[schema(max_items = 16, extensions(("x-gpux-merge" = json!({"maxLength": 4096}))))]
    pub ssh_keys: Vec<String>,
    /// Container image reference (at most 512 bytes of `[A-Za-z0-9._/:@+-]`, not starting
    /// with `-`, `.` or `/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(
        max_length = 512,
        pattern = "^[A-Za-z0-9_:@+][A-Za-z0-9._/:@+-]{0,511}$"
    )]
    pub image: Option<String>,
    /// Command and arguments (an argument vector, no shell): at most 64 of at most 4,096
    /// bytes, no NUL.
    #[serde(default)]
    #[schema(max_items = 64, extensions(("x-gpux-merge" = json!({"maxLength": 4096, "pattern": "^[^\\x00]*$"}))))]
    pub command: Vec<String>,
    /// Environment variables (at most 64; names `[A-Za-z_][A-Za-z0-9_]*` up to 128 bytes,
    /// values up to 4,096 bytes, no NUL). Visible to the supplier: no secrets.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Ports to expose, 1..=65535, distinct, at most 16.
    #[serde(default)]
    #[schema(max_items = 16, extensions(("x-gpux-merge" = json!({"minimum": 1, "maximum": 65535}))))]
    pub ports: Vec<u32>,
    /// Scratch disk, GB, 0..=16,384 (0: the node's default).
    #[serde(default)]
    #[schema(maximum = 16384)]
    pub disk_gb: u32,
}

/// How the buyer reaches a ready lease (what a supplier reports).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AccessRequest {
    /// SSH host name or IP address (at most 253 bytes of `[A-Za-z0-9.:-]`, not starting with
    /// `-`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 253, pattern = "^[A-Za-z0-9.:][A-Za-z0-9.:-]{0,252}$")]
    pub ssh_host: Option<String>,
    /// SSH port, 1..=65535.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 65535)]
    pub ssh_port: Option<u32>,
    /// SSH user (at most 32 bytes of `[a-z_][a-z0-9_-]*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 32, pattern = "^[a-z_][a-z0-9_-]{0,31}$")]
    pub ssh_user: Option<String>,
    /// URL of each exposed port, by port number as a string key (`{"8888": "https://…"}`):
    /// http or https, at most 2,048 bytes, at most 16.
    #[serde(default)]
    pub urls: BTreeMap<String, String>,
}

/// `POST /v1/leases/{id}/ready`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadyRequest {
    /// How the buyer gets in.
    pub access: AccessRequest,
}

/// Whose side a failed delivery was on (docs/market-rules.md §11.3, §11.3b).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FailureCauseDto {
    /// The node could not deliver: the lease fails over and the node is held.
    #[default]
    Node,
    /// The buyer's launch spec cannot run (the image cannot be pulled, the command is
    /// invalid): no charge, no failover (it would fail the same way), the node is not held.
    LaunchSpec,
    /// A GPU under the lease is not the one recorded at fill (its UUID changed: a swapped
    /// card, or the GPU is gone), found by the node agent before provisioning (issue 26,
    /// docs/market-rules.md §12.1).
    GpuChanged,
}

/// `POST /v1/leases/{id}/failed`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FailedRequest {
    /// Whose side the failure is on (default `node`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<FailureCauseDto>,
    /// Why (1..=1,024 bytes of text, not only white space, without control characters), e.g.
    /// `image pull failed: manifest unknown`.
    #[schema(
        min_length = 1,
        max_length = 1024,
        pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*[^\\x00-\\x20\\x7f-\\x9f\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000][^\\x00-\\x1f\\x7f-\\x9f]*$"
    )]
    pub reason: String,
}

/// `POST /v1/leases/{id}/lost`: the node lost a running lease's workload.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LostRequest {
    /// What happened (1..=1,024 bytes of text, not only white space, without control
    /// characters), e.g. `GPU 3 fell off the bus (Xid 79); container gone`.
    #[schema(
        min_length = 1,
        max_length = 1024,
        pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*[^\\x00-\\x20\\x7f-\\x9f\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000][^\\x00-\\x1f\\x7f-\\x9f]*$"
    )]
    pub reason: String,
}

/// `POST /v1/leases/{id}/torn-down`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TornDownRequest {
    /// How the GPUs and disks were wiped (1..=1,024 bytes), e.g. `container removed; nvme
    /// format --ses=1`: kept on the lease as the buyer's deletion record (not only white space,
    /// without control characters).
    #[schema(
        min_length = 1,
        max_length = 1024,
        pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*[^\\x00-\\x20\\x7f-\\x9f\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000][^\\x00-\\x1f\\x7f-\\x9f]*$"
    )]
    pub method: String,
}
