//! # gpux-client — the typed async client of the exchange's API
//!
//! One [`Client`] per server and key, one async method per REST endpoint (docs/api.md §2, §4),
//! a typed websocket ([`WsSession`], §3) and a self-healing inventory subscription
//! ([`InventoryStream`], §3.5). Requests and answers are the wire types of `gpux-wire`,
//! re-exported as [`wire`]. Used by `gpux` (the CLI), `gpux-agent` and the load test.
//! **Architecture invariant:** this crate links no server code (no actix, no `exchange`); only
//! `gpux-wire` knows the JSON.
//!
//! ```no_run
//! # async fn demo() -> Result<(), gpux_client::ClientError> {
//! use futures_util::StreamExt;
//! let client = gpux_client::Client::new("http://127.0.0.1:8080", Some("gpux_…".into()))?;
//! let me = client.me().await?;
//! let mut h100 = client.subscribe("H100-80G", None);
//! while let Some(update) = h100.next().await {
//!     let update = update?; // only errors a retry cannot fix arrive here
//!     println!("{} at seq {}: {} levels", me.account_id, update.seq, update.levels.len());
//! }
//! # Ok(()) }
//! ```
//!
//! Layout:
//! - `client`: [`Client`] (configuration, URLs, the one request path: timeout, body limit,
//!   error envelope, `Idempotency-Key`, retries), [`LeaseQuery`], [`ReportQuery`].
//! - `rest`: the endpoints by audience (public, buyer, supplier, admin, finance).
//! - `ws`: [`WsSession`] (`send` / `next` / `request` and typed requests), [`WsOptions`].
//! - [`inventory`]: [`InventoryView`] (snapshot + contiguous deltas, pure) and
//!   [`InventoryStream`].
//! - [`backoff`]: the reconnect and retry rule.
//! - `tls`: the one rustls configuration of a client (HTTPS and WSS): the system's CAs and an
//!   optional CA file ([`ClientOptions::ca_cert`]), handshake errors that name their cause.
//! - `error`: [`ClientError`].
//!
//! Invariants:
//! - **Every await is bounded.** A REST call (connect, answer and body together) by the
//!   client's timeout ([`DEFAULT_TIMEOUT_MS`], [`Client::with_timeout`]); a websocket connect,
//!   send and request by the same timeout; a websocket read by the keepalive (after
//!   [`ws::KEEPALIVE_IDLE_MS`] of silence a ping, and no frame within the timeout after it is
//!   [`ClientError::Timeout`]); retries and reconnects by the backoff cap. Answers are read up
//!   to [`MAX_RESPONSE_BYTES`]; a request's unread backlog up to [`ws::MAX_BACKLOG`].
//! - **A retry never repeats a command twice.** Every `POST` the server honours
//!   `Idempotency-Key` on (nodes, offers, bids, accounts, keys, node keys) carries a fresh key
//!   per call, the same on each of that call's attempts; deposits, payouts, adjustments and
//!   period closes carry the caller's key. Calls are retried only with [`Client::with_retries`] (default: one
//!   attempt), only on [`ClientError::is_retryable`] errors, and only when safe to repeat.
//! - **Errors keep the server's code.** An error answer is [`ClientError::Api`] with the HTTP
//!   status and the envelope `{code, message, request_id, field?}`; a websocket `rejected` is
//!   [`ClientError::Rejected`]. Branch on [`ClientError::code`].
//! - **An inventory view is never silently wrong.** [`InventoryView`] applies a delta only
//!   when `first_seq == last + 1`; [`InventoryStream`] starts over from a fresh snapshot
//!   otherwise, and says so (`resynced`).
//!
//! Backoff rule (docs/api.md §3.8, recommended to every client): full jitter, before retry
//! `n` wait uniformly in `0..=min(5 s, 100 ms × 2^n)` ([`backoff::RECONNECT_BASE_MS`],
//! [`backoff::RECONNECT_FACTOR`], [`backoff::RECONNECT_CAP_MS`]), never less than a
//! `Retry-After`; a connection that stayed up [`backoff::RECONNECT_STABLE_MS`] starts the
//! sequence again. An [`InventoryStream`] reconnects after a gap, a close, a transport error
//! or a keepalive timeout, resubscribes, and rebuilds its view from the new snapshot.
//!
//! TLS (issue 25): an `https://` base speaks HTTPS and its websocket WSS, with rustls on the
//! `ring` provider (as the server, `gateway/src/tls.rs`; no aws-lc), HTTP/1.1. The server's
//! certificate is verified against the system's CA certificates and, for a private CA, the
//! certificates of a PEM file given with [`ClientOptions::with_ca_cert`] /
//! [`Client::new_with_options`]. A handshake that fails is a [`ClientError::Transport`] that
//! names the cause ("certificate not trusted", "not valid for this host name", "expired", a
//! server that does not speak TLS). `http://` bases stay plain (never send a key over plain
//! HTTP across a network); one client may mix both. Any other scheme is
//! [`ClientError::Invalid`].

pub mod backoff;
mod client;
mod error;
pub mod inventory;
mod rest;
mod tls;
pub mod ws;

pub use client::{
    CONNECT_TIMEOUT_MS, Client, ClientOptions, DEFAULT_ATTEMPTS, DEFAULT_TIMEOUT_MS,
    IDEMPOTENCY_KEY, InventoryFilter, LeaseQuery, MAX_ATTEMPTS, MAX_RESPONSE_BYTES,
    MarketOfferQuery, ReportQuery, new_idempotency_key,
};
pub use error::{ClientError, UNEXPECTED_RESPONSE};
pub use gpux_wire as wire;
pub use gpux_wire::ErrorBody;
pub use inventory::{InventoryStream, InventoryUpdate, InventoryView, LevelKey, ViewError};
pub use ws::{Welcome, WsOptions, WsSession};
