//! # gpux-wire — the exchange's wire types
//!
//! Every JSON shape the public API speaks, as serde types with OpenAPI schemas (utoipa), shared
//! by the server (`gateway`), the typed client (`gpux-client`), `gpux`, `gpux-agent` and the
//! load test. **Architecture invariant:** this crate is the only place that knows the JSON; it
//! knows nothing of the engine, the ledger or HTTP (no actix, no tokio, no `exchange`), so a
//! client links it without the server. The server validates requests into domain types at the
//! edge (`gateway::api`), never here.
//!
//! Layout:
//! - [`scalar`]: ids and exact decimals as JSON strings ([`IdStr`], [`DecimalStr`]).
//! - [`enums`]: snake_case enums (lease kind, placement, time in force, fabric, role, phases,
//!   reasons).
//! - [`requests`]: REST request bodies (nodes, heartbeats, offers, bids, accounts, amounts).
//! - [`launch`]: lease delivery (issue 15): launch specs, access details, supplier reports.
//! - [`views`]: answers (nodes, offers, bids, leases, balances, earnings, accounts, lists,
//!   acknowledgements, catalog, inventory).
//! - [`finance`]: adjustments, period closes and accounts' tax details (issue 17).
//! - [`trust`]: supplier trust (issue 26): a node's verification.
//! - [`error`]: the one error envelope `{code, message, request_id, field?, retry_after_s?}`.
//! - [`ws`]: websocket messages in both directions.
//!
//! Conventions (docs/api.md §1): ids are strings of digits (they reach 2^63, beyond a
//! JavaScript number); prices are CNY per GPU-hour and money CNY, both decimal strings, never
//! JSON numbers; times are ms since the Unix epoch; durations carry their unit in the name
//! (`_s`, `_ms`). Requests refuse unknown fields.

pub mod enums;
pub mod error;
pub mod finance;
pub mod launch;
pub mod requests;
pub mod scalar;
pub mod trust;
pub mod views;
pub mod ws;

pub use enums::*;
pub use error::ErrorBody;
pub use finance::*;
pub use launch::*;
pub use requests::*;
pub use scalar::{DecimalStr, IdStr, parse_id};
pub use trust::*;
pub use views::*;
