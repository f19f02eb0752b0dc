//! The one error envelope: every 4xx and 5xx answer of the API (and every websocket
//! `rejected` message) carries it (docs/api.md §1.4).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// An error answer: `{code, message, request_id, field?, retry_after_s?}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// Machine-readable code, e.g. `insufficient_funds`, `not_found`, `rate_limited`.
    pub code: String,
    /// Human message: what was wrong and what to do.
    pub message: String,
    /// Id of this request (quote it to support).
    pub request_id: String,
    /// The offending request field (dotted path), when one is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Seconds to wait before retrying (429 answers; also the `Retry-After` header).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_s: Option<u64>,
}
