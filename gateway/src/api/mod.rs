//! The public API (JSON under `/v1`, the websocket at `/v1/ws`): accounts and keys, supplier
//! REST, buyer bids over REST and websocket, the live inventory, finance reports.
//!
//! Layout: [`error`] (every error as `{code, message, request_id}`), [`auth`] (API keys, roles,
//! rate limits), [`dto`] (wire requests, validated into engine commands), [`views`] (wire
//! answers), [`idempotency`] (`Idempotency-Key` replays), handlers by audience
//! ([`supplier`], [`buyer`], [`admin`], [`reports`], [`finance`], [`public`], [`node_keys`]),
//! [`request_id`] (`X-Request-Id`), [`ws`] (the
//! websocket session), [`openapi`], [`edge`] (the HTTP edge around every handler: actix's own
//! errors as the envelope, extractor errors, 405 `Allow`, the request head limit, pipelining),
//! [`front`] (the byte-level front under actix-http: request heads it would refuse become a
//! request the app answers as the envelope), [`front_stream`] (the stream it wraps each
//! connection in: one request at a time, deadlines) and [`answer_framing`] (where each
//! answer written ends).
//!
//! Every handler checks role and ownership: another tenant's object answers 404 exactly like a
//! missing one. Limits are the named constants below, tested at the edge.

pub mod admin;
pub mod answer_framing;
pub mod auth;
pub mod buyer;
pub mod delivery;
pub mod dto;
pub mod edge;
pub mod error;
pub mod finance;
pub mod front;
pub mod front_stream;
pub mod idempotency;
pub mod launch;
pub mod node_keys;
pub mod openapi;
pub mod public;
pub mod reports;
pub mod request_id;
pub mod supplier;
pub mod views;
pub mod ws;

use crate::feed::FeedHandle;
use crate::market::Op;
use crate::sequencer::{Committed, SequencerHandle};
use actix_web::http::StatusCode;
use actix_web::web;
use error::{ApiError, ApiResult};
use futures_util::StreamExt;
use std::sync::Arc;
use std::time::Duration;

/// Largest JSON request body, bytes (issue 5: 64 KiB).
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Largest websocket frame (and message) a client may send, bytes.
pub const MAX_WS_FRAME_BYTES: usize = 64 * 1024;
/// Commands one websocket connection may have in flight at once.
pub const MAX_WS_INFLIGHT: usize = 64;
/// Default sustained request rate per API key, requests per second.
pub const DEFAULT_RATE_PER_S: u32 = 1000;
/// Default burst per API key, requests.
pub const DEFAULT_RATE_BURST: u32 = 2000;
/// Default time a request may wait for its command to become durable, ms.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 10_000;

/// Regions nodes may be registered in by default. The region table is shared by every tenant
/// and bounded (`exchange::limits::MAX_REGIONS`), so regions come from the operator's list,
/// not from whatever a supplier types (the fresh-user review filled the table with junk
/// names). `api.regions` in the configuration replaces the list.
pub const DEFAULT_REGIONS: &[&str] = &[
    "cn-north-1",
    "cn-north-2",
    "cn-north-3",
    "cn-east-1",
    "cn-east-2",
    "cn-east-3",
    "cn-south-1",
    "cn-south-2",
    "cn-southwest-1",
    "cn-southwest-2",
    "cn-northwest-1",
    "cn-central-1",
    "cn-hongkong-1",
    "ap-southeast-1",
    "ap-northeast-1",
    "eu-central-1",
    "us-east-1",
    "us-west-1",
];

/// API settings (part of the server configuration).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiConfig {
    /// Sustained requests per second per API key (websocket commands count too).
    pub rate_per_s: u32,
    /// Burst per API key.
    pub rate_burst: u32,
    /// Origins allowed to open the websocket from a browser (`*` for any); a page served by
    /// this gateway (same origin) is always allowed, and clients that send no Origin are not
    /// browsers and are allowed.
    pub allowed_origins: Vec<String>,
    /// How long a request waits for its command to become durable before answering 503, ms.
    pub request_timeout_ms: u64,
    /// Regions nodes may be registered in (default [`DEFAULT_REGIONS`]).
    pub regions: Vec<String>,
    /// Invoices of closed periods: the platform's tax details, the VAT rate, the PDF font.
    pub invoice: finance::InvoiceConfig,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            rate_per_s: DEFAULT_RATE_PER_S,
            rate_burst: DEFAULT_RATE_BURST,
            allowed_origins: Vec::new(),
            request_timeout_ms: DEFAULT_REQUEST_TIMEOUT_MS,
            regions: DEFAULT_REGIONS.iter().map(|r| r.to_string()).collect(),
            invoice: finance::InvoiceConfig::default(),
        }
    }
}

/// Shared state of the API handlers.
#[derive(Clone)]
pub struct Api {
    /// The sequencer.
    pub seq: SequencerHandle,
    /// The feed hub.
    pub feed: FeedHandle,
    /// API keys → principals.
    pub auth: Arc<auth::AuthCache>,
    /// Per-key rate limiter.
    pub limiter: Arc<auth::Limiter>,
    /// Idempotency-Key replays.
    pub idem: Arc<idempotency::IdempotencyStore>,
    /// The SKU catalog.
    pub catalog: Arc<exchange::Catalog>,
    /// Settings.
    pub config: Arc<ApiConfig>,
    /// Set once the server starts stopping ([`Api::begin_shutdown`]): websocket sessions close
    /// with 1001 `server_shutdown` instead of holding the graceful stop open.
    pub shutdown: Arc<tokio::sync::watch::Sender<bool>>,
    /// The market delivers leases (docs/market-rules.md §11): bids need a launch spec.
    pub delivery: bool,
    /// `/openapi.json` of this API (its catalog, regions and delivery never change while it
    /// runs), built on the first request and served from here after.
    pub openapi: Arc<std::sync::OnceLock<String>>,
    /// The invoice PDF font, read from `invoice.font_path` on the first PDF asked for
    /// ([`Api::check_pdf_font`] checks at start that the file opens).
    pub pdf_font: Arc<tokio::sync::OnceCell<Arc<settlement::reports::pdf::PdfFont>>>,
    /// Whether the process has finished starting (the admin account and, with `--demo`, the
    /// demo market exist): `/readyz` answers 503 `starting` until then (issue 25: a key
    /// printed at start could answer 401 after `/readyz` said ready). Set at once by
    /// [`crate::app::start`] unless [`crate::app::AppOptions::hold_ready`].
    pub ready: Arc<std::sync::atomic::AtomicBool>,
    /// What works less than configured, for `/readyz`'s `warnings` (the invoice PDF font is
    /// not readable, say). Written at start.
    pub warnings: Arc<std::sync::Mutex<Vec<String>>>,
    /// Held by every clone: when the last one is dropped, the key cache's follower task
    /// ([`auth::AuthCache::follow`]) ends and lets go of the sequencer.
    _followers: tokio::sync::mpsc::Sender<()>,
}

impl Api {
    /// Builds the API state: loads the key cache from the market and starts the feed hub.
    ///
    /// # Errors
    /// The sequencer has stopped.
    pub async fn new(
        seq: SequencerHandle,
        config: ApiConfig,
    ) -> Result<Api, crate::sequencer::SequencerError> {
        // Subscribed before the load: no key operation falls between the two.
        let key_events = seq.subscribe();
        let auth = Arc::new(auth::AuthCache::load(&seq).await?);
        let (followers, until_dropped) = tokio::sync::mpsc::channel(1);
        auth.follow(seq.clone(), key_events, until_dropped);
        let feed = crate::feed::spawn(seq.clone()).await?;
        let delivery = seq.read(|m, _| m.config().engine.delivery).await?;
        Ok(Api {
            delivery,
            limiter: Arc::new(auth::limiter(&config)),
            seq,
            feed,
            auth,
            idem: Arc::new(idempotency::IdempotencyStore::default()),
            catalog: Arc::new(exchange::Catalog::builtin()),
            config: Arc::new(config),
            shutdown: Arc::new(tokio::sync::watch::channel(false).0),
            openapi: Arc::default(),
            pdf_font: Arc::default(),
            ready: Arc::new(std::sync::atomic::AtomicBool::new(true)),
            warnings: Arc::default(),
            _followers: followers,
        })
    }

    /// Marks the process ready ([`Api::ready`]): `/readyz` answers 200 from now on.
    pub fn mark_ready(&self) {
        self.ready.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Checks that the invoice PDF font (`api.invoice.font_path`) can be opened, so that a
    /// missing font is said at start (a warning in the log and in `/readyz`'s `warnings`)
    /// rather than only by the first PDF asked for (503 `pdf_unavailable`). Invoices in JSON,
    /// CSV and XLSX do not need it.
    pub fn check_pdf_font(&self) {
        let path = &self.config.invoice.font_path;
        if let Err(e) = std::fs::File::open(path) {
            let warning = format!(
                "invoice PDFs are unavailable: the font {} cannot be read ({e}); install \
                 Debian's fonts-wqy-microhei or set api.invoice.font_path",
                path.display()
            );
            tracing::warn!("{warning}");
            self.warnings.lock().expect("warnings lock").push(warning);
        }
    }

    /// Tells long-lived connections (websockets) that the server is stopping, so they close
    /// now rather than when the HTTP server's shutdown timeout runs out. Idempotent.
    pub fn begin_shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// [`Api::submit`] of a money-moving or access-changing action for `p`, journaled as
    /// [`Op::Audited`] so the audit trail ([`crate::audit`]) records who asked, under the
    /// request's id ([`request_id::current`]), whether the market applies or refuses it.
    ///
    /// # Errors
    /// As [`Api::submit`].
    pub async fn submit_as(&self, p: &auth::Principal, op: Op) -> ApiResult<Arc<Committed>> {
        self.submit(Op::Audited {
            actor: crate::audit::Actor {
                account: p.account,
                key_id: p.key_id.clone(),
                request_id: request_id::current(),
            },
            op: Box::new(op),
        })
        .await
    }

    /// Submits an operation and waits until it is durable (bounded by the request timeout).
    /// Counts it in the metrics by type and result.
    ///
    /// # Errors
    /// 503 `journal_unavailable` / `journal_refused` / `shutting_down` / `request_timeout` /
    /// `not_leader`.
    pub async fn submit(&self, op: Op) -> ApiResult<Arc<Committed>> {
        let name = op.name();
        let started = std::time::Instant::now();
        let r = tokio::time::timeout(
            Duration::from_millis(self.config.request_timeout_ms),
            self.seq.submit(op),
        )
        .await;
        let elapsed = started.elapsed().as_secs_f64();
        let (result, out) = match r {
            Ok(Ok(c)) => {
                let res = if c.outcome.refusal.is_some()
                    || c.outcome.engine.iter().any(|o| o.rejection().is_some())
                {
                    "rejected"
                } else {
                    "accepted"
                };
                (res, Ok(c))
            }
            Ok(Err(e)) => ("unavailable", Err(ApiError::from(e))),
            Err(_) => (
                "timeout",
                Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "request_timeout",
                    "the command was not confirmed durable in time; its outcome is unknown: \
                     retry with the same Idempotency-Key or client order id",
                )),
            ),
        };
        metrics::counter!("gpux_commands_total", "type" => name, "result" => result).increment(1);
        metrics::histogram!("gpux_command_seconds", "type" => name).record(elapsed);
        out
    }

    /// Reads the market (after everything queued before).
    ///
    /// # Errors
    /// 503 when the sequencer has stopped.
    pub async fn read<R: Send + 'static>(
        &self,
        f: impl FnOnce(&crate::market::Market, u64) -> R + Send + 'static,
    ) -> ApiResult<R> {
        self.seq.read(f).await.map_err(ApiError::from)
    }
}

impl Api {
    /// 422 `unknown_region` unless nodes may be placed in `region`.
    ///
    /// # Errors
    /// The region is not on the operator's list.
    pub fn check_region(&self, region: &str) -> ApiResult<()> {
        if self.config.regions.iter().any(|r| r == region) {
            return Ok(());
        }
        let mut e = ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown_region",
            format!(
                "{region:?} is not a region of this exchange (one of: {})",
                self.config.regions.join(", ")
            ),
        );
        e.field = Some("region");
        Err(e)
    }
}

/// The engine's answer to one engine command: its events, or the rejection as an error.
///
/// # Errors
/// The refusal (pre-trade, accounts, ledger) or the engine's rejection.
pub fn engine_output(c: &Committed) -> ApiResult<&exchange::Output> {
    if let Some(r) = &c.outcome.refusal {
        return Err(ApiError::refusal(r));
    }
    let out = c.outcome.engine.first().ok_or_else(|| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "no engine output",
        )
    })?;
    for e in &out.events {
        if let exchange::Event::Rejected { reason, field } = e {
            return Err(ApiError::rejected(*reason, *field));
        }
    }
    Ok(out)
}

/// Reads a request body up to [`MAX_BODY_BYTES`] (413 `payload_too_large` beyond, checked on
/// `Content-Length` first and while streaming).
///
/// # Errors
/// 413, or 400 when the body stream breaks.
pub async fn read_body(
    req: &actix_web::HttpRequest,
    mut body: web::Payload,
) -> ApiResult<web::Bytes> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("request bodies are at most {MAX_BODY_BYTES} bytes"),
        )
    };
    if let Some(len) = req
        .headers()
        .get(actix_web::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        && len > MAX_BODY_BYTES
    {
        return Err(too_large());
    }
    if let Some(ct) = req.headers().get(actix_web::http::header::CONTENT_TYPE) {
        let ct = ct.to_str().unwrap_or("");
        let essence = ct.split(';').next().unwrap_or("").trim();
        if !essence.eq_ignore_ascii_case("application/json") {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "send Content-Type: application/json",
            ));
        }
    }
    let mut buf = web::BytesMut::new();
    while let Some(chunk) = body.next().await {
        let chunk =
            chunk.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_body", e.to_string()))?;
        if buf.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(too_large());
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

/// Parses a JSON body into a wire type (400 `bad_json` with serde's message: unknown fields,
/// wrong types, numbers for prices, bad UTF-8, nesting deeper than 128).
///
/// As `/openapi.json` says: every body is a JSON object (serde would also read a struct from
/// an array), and an integer field takes any JSON number of integral value (`4.0` is the
/// integer 4 in JSON and JSON Schema; serde's integers refuse it, so such a body is read again
/// with its integral numbers as integers — never on the common path).
///
/// # Errors
/// 400 `bad_json`.
pub fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> ApiResult<T> {
    // A value that does not decode names its field (issue 25: `duration_s: -5` answered 400
    // without saying which field), by its path in the document.
    let bad = |e: serde_path_to_error::Error<serde_json::Error>| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        // A missing or unknown field is named too: serde names it in backticks; the path of
        // a missing field is its parent's, an unknown field's path is its own.
        let text = inner.to_string();
        let missing = text.strip_prefix("missing field `").is_some();
        let named = ["missing field `", "unknown field `"]
            .iter()
            .find_map(|p| text.strip_prefix(p))
            .and_then(|rest| rest.split('`').next())
            .filter(|name| !name.is_empty());
        if let Some(name) = named {
            let field = match (path.as_str(), missing) {
                (".", _) => name.to_string(),
                (_, true) => format!("{path}.{name}"),
                (_, false) => path.clone(),
            };
            return ApiError {
                field_path: Some(field),
                ..ApiError::new(StatusCode::BAD_REQUEST, "bad_json", text)
            };
        }
        if path == "." {
            return ApiError::new(StatusCode::BAD_REQUEST, "bad_json", text);
        }
        let message = match inner.classify() {
            serde_json::error::Category::Data => format!("{path}: {inner}"),
            // serde_json reads a value of the wrong kind where a name belongs (`"kind": 5`)
            // as a syntax error ("expected value"); the document itself is valid JSON.
            serde_json::error::Category::Syntax
                if serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok() =>
            {
                format!(
                    "{path}: a value of the wrong type here (a string is expected: one of the \
                     names the API documents for this field)"
                )
            }
            _ => return ApiError::new(StatusCode::BAD_REQUEST, "bad_json", inner.to_string()),
        };
        ApiError {
            field_path: Some(path),
            ..ApiError::new(StatusCode::BAD_REQUEST, "bad_json", message)
        }
    };
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if first.is_some_and(|b| *b != b'{') {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_json",
            "the body must be a JSON object",
        ));
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    match serde_path_to_error::deserialize(&mut de) {
        Ok(v) => {
            // Trailing characters after the object.
            de.end()
                .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_json", e.to_string()))?;
            Ok(v)
        }
        // Only a float where an integer belongs is worth a second parse (serde's
        // `Unexpected::Float` reads "floating point `4.0`"); every other refusal answers at once.
        Err(e)
            if e.inner().classify() == serde_json::error::Category::Data
                && e.inner().to_string().contains("floating point") =>
        {
            let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(bytes) else {
                return Err(bad(e));
            };
            if !integral_floats_to_integers(&mut v) {
                return Err(bad(e));
            }
            serde_path_to_error::deserialize(v).map_err(bad)
        }
        Err(e) => Err(bad(e)),
    }
}

/// Rewrites every float of integral value (within ±2^63 / below 2^64) as an integer; whether
/// there was one.
fn integral_floats_to_integers(v: &mut serde_json::Value) -> bool {
    use serde_json::Value;
    match v {
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or(f64::NAN);
            let int = if f.fract() != 0.0 || !f.is_finite() {
                None
            } else if (0.0..18_446_744_073_709_551_616.0).contains(&f) {
                Some(serde_json::Number::from(f as u64))
            } else if (-9_223_372_036_854_775_808.0..0.0).contains(&f) {
                Some(serde_json::Number::from(f as i64))
            } else {
                None
            };
            int.map(|i| *n = i).is_some()
        }
        Value::Array(a) => {
            let mut any = false;
            for x in a.iter_mut() {
                any |= integral_floats_to_integers(x);
            }
            any
        }
        Value::Object(m) => {
            let mut any = false;
            for x in m.values_mut() {
                any |= integral_floats_to_integers(x);
            }
            any
        }
        _ => false,
    }
}

/// Parses an id from a path segment (404 for anything that is not an id).
///
/// # Errors
/// 404 `not_found`.
pub fn path_id(s: &str, what: &str) -> ApiResult<u64> {
    dto::parse_id(s).ok_or_else(|| ApiError::not_found(what))
}

/// Milliseconds since the Unix epoch now (for defaults filled at the edge).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Registers every `/v1` route. An unknown path under `/v1` falls through to the app's
/// default 404, which [`edge::json_errors`] answers as `not_found`.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/v1")
            .configure(public::routes)
            .configure(supplier::routes)
            .configure(delivery::routes)
            .configure(node_keys::routes)
            .configure(buyer::routes)
            .configure(admin::routes)
            .configure(reports::routes)
            .configure(finance::routes)
            .service(crate::server::resource("/ws").route(web::get().to(ws::upgrade))),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integral_floats_count_as_integers_and_other_refusals_answer_once() {
        let hb: dto::HeartbeatRequest = parse_json(br#"{"healthy_gpus": 4.0}"#).unwrap();
        assert_eq!(hb.healthy_gpus, 4);
        let e = parse_json::<dto::HeartbeatRequest>(br#"{"healthy_gpus": 4.5}"#).unwrap_err();
        assert_eq!((e.status, e.code), (StatusCode::BAD_REQUEST, "bad_json"));
        assert!(e.message.contains("floating point"), "{}", e.message);
        let e = parse_json::<dto::HeartbeatRequest>(br#"{"healthy_gpus": 4, "x": 1}"#).unwrap_err();
        assert!(e.message.contains("unknown field"), "{}", e.message);
        let e = parse_json::<dto::HeartbeatRequest>(b"[4]").unwrap_err();
        assert_eq!(e.message, "the body must be a JSON object");
    }

    /// Found in issue 25's pass: a missing or unknown field answered 400 without `field`.
    #[test]
    fn missing_and_unknown_fields_are_named() {
        let e = parse_json::<dto::HeartbeatRequest>(br#"{}"#).unwrap_err();
        assert_eq!(
            e.field_path.as_deref(),
            Some("healthy_gpus"),
            "{}",
            e.message
        );
        assert!(e.message.contains("missing field"), "{}", e.message);
        let e = parse_json::<dto::HeartbeatRequest>(br#"{"healthy_gpus": 4, "x": 1}"#).unwrap_err();
        assert_eq!(e.field_path.as_deref(), Some("x"), "{}", e.message);
        let e = parse_json::<dto::BidRequest>(
            br#"{"client_order_id": "a", "sku": "H100-80G", "gpus": 1, "limit_price": "1",
                 "kind": "spot", "time_in_force": "ioc", "launch": {"bogus": 1}}"#,
        )
        .unwrap_err();
        assert!(
            e.field_path
                .as_deref()
                .is_some_and(|f| f.starts_with("launch.")),
            "{:?} {}",
            e.field_path,
            e.message
        );
    }
}
