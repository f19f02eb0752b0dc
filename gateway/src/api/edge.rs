//! The HTTP edge (issue 16, "an exact API contract"): what the server answers around the
//! handlers, so that every error the application can shape is the one envelope of
//! [`ApiError`] — `{code, message, request_id}` — and so that pipelined HTTP/1.1 requests are
//! all answered. `app::start` wraps the whole `App` in these; docs/api.md §1.4 ("The HTTP
//! layer") and §1.5 (limits) are the contract.
//!
//! Layout:
//! - [`json_errors`]: an `ErrorHandlers` middleware. Any error answer that is not JSON —
//!   actix's own 404 for an unknown route, a resource's 405, payload errors of extractors
//!   without a config — becomes the envelope, keeping its status and its headers (`Allow`).
//!   [`code_of`] maps a status onto a code, in this one place.
//! - [`json_config`], [`path_config`], [`query_config`]: extractor errors as [`ApiError`]:
//!   400 `bad_json`, 413 `payload_too_large`, 415 `unsupported_media_type`; 404 `not_found`
//!   for a path segment that does not parse (like a malformed id); 400 `bad_query`.
//! - [`limit_head`]: a request head over [`MAX_REQUEST_HEAD_BYTES`] answers 431
//!   `headers_too_large`.
//! - [`answer_pipelined`]: the wake-up that keeps pipelined requests flowing (see there).
//!
//! Rules:
//! - A 405 carries `Allow`, listing the methods of the resource's routes: actix's `Resource`
//!   default service collects them while matching, so no resource sets a default service of its
//!   own (`server::resource` is a plain `web::resource`).
//! - What actix-http's HTTP/1 dispatcher would answer itself, before any service runs, from a
//!   status alone (`Response::bad_request()`, `Response::with_body(status, ())`: an empty body,
//!   the connection closed) never reaches it: the byte-level front ([`crate::api::front`])
//!   checks every request head on the bytes actix reads and replaces one actix would refuse
//!   (a garbage request line, raw bytes outside ASCII in the target, a malformed header,
//!   HTTP/1.1 without `Host`, conflicting `Content-Length` / `Transfer-Encoding`, more than
//!   96 fields, no end within [`ACTIX_READ_BUFFER_BYTES`]) by a request the application
//!   answers as an [`ApiError`]. actix-http 3.20 offers no error responder there, and
//!   rewriting what is written instead would need HTTP/1 response framing of our own.
//! - Still out of reach: the empty 408 when the first request's head is not complete within
//!   `client_request_timeout` (`app.rs`), and a chunked body that does not parse (actix fails
//!   the payload and closes). `tests/server.rs` covers each JSON case.

use crate::api::error::ApiError;
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderMap};
use actix_web::http::{Method, StatusCode};
use actix_web::middleware::{ErrorHandlerResponse, ErrorHandlers, Next};
use actix_web::{Error, HttpRequest, ResponseError, web};

/// Largest request head the application accepts (request line and header fields, counted
/// as sent), bytes: 16 KiB, Node.js's default. The API's own headers are small
/// (`Authorization` ≤ 256 bytes). Beyond: 431 `headers_too_large`. A head of
/// [`ACTIX_READ_BUFFER_BYTES`] or more is refused by the front, with the same code (module
/// docs).
pub const MAX_REQUEST_HEAD_BYTES: usize = 16 * 1024;

/// actix-http 3.20's HTTP/1 read buffer limit (`h1::decoder::MAX_BUFFER_SIZE`, not
/// configurable), bytes: a connection's reads stop there until requests are decoded (the
/// buffer doubles from 8 KiB, so a first read of pipelined requests ends at exactly this
/// size), and a head still incomplete at this size would answer an empty 431 (the front
/// refuses it first: `front::MAX_FRONT_HEAD_BYTES`).
pub const ACTIX_READ_BUFFER_BYTES: usize = 128 * 1024;

/// actix-http 3.20's pipelining limit (`h1::dispatcher::MAX_PIPELINED_MESSAGES`, not
/// configurable), requests: while this many requests of a connection wait for their turn,
/// the bytes it reads are not decoded (see [`answer_pipelined`]).
pub const ACTIX_PIPELINE_QUEUE: usize = 16;

/// Keeps pipelined HTTP/1.1 requests flowing: a response ready at its first poll is handed
/// to the dispatcher one scheduler turn later (`tokio::task::yield_now`).
///
/// Why: actix-http's `h1::Dispatcher` decodes requests from a connection's read buffer only
/// while fewer than [`ACTIX_PIPELINE_QUEUE`] wait; bytes read while that many wait stay in
/// the buffer undecoded. It decodes again at its next wake-up, or while a handler's future is
/// pending. When the waiting requests are then all answered within one wake-up (handlers
/// ready at once, the socket taking every byte), it goes idle with whole requests in its
/// buffer and nothing to wake it, until the keep-alive timer (5 s) closes the connection. A
/// client that pipelined 1,500 requests of 93 bytes, more than one read
/// ([`ACTIX_READ_BUFFER_BYTES`]) while its answers backed up, got the 1,409 requests of the
/// first 131,072 bytes answered, a 5 s stall and a close (the per-key rate limit, burst
/// 2,000, and `client_request_timeout`, which times only the first head, play no part).
///
/// A pending first poll makes the dispatcher try to decode each time it takes a request off
/// its queue, so the last request of the queue does it with the queue empty. Handlers that
/// wait (the sequencer, the journal) are pending anyway and pay nothing; handlers ready at
/// once (the catalog, probes, errors) pay one extra wake-up.
///
/// # Errors
/// The inner service's error, unchanged.
pub async fn answer_pipelined(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, Error> {
    let mut response = std::pin::pin!(next.call(req));
    let mut polls = 0u32;
    let response = std::future::poll_fn(|cx| {
        polls += 1;
        response.as_mut().poll(cx)
    })
    .await;
    if polls == 1 {
        tokio::task::yield_now().await;
    }
    response
}

/// 431 `headers_too_large` for a request head over [`MAX_REQUEST_HEAD_BYTES`].
///
/// # Errors
/// The inner service's error, unchanged.
pub async fn limit_head(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, Error> {
    let head_bytes = head_bytes(req.method(), req.uri(), req.headers());
    if head_bytes > MAX_REQUEST_HEAD_BYTES {
        let e = ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers_too_large",
            format!(
                "the request line and headers take {head_bytes} bytes; at most \
                 {MAX_REQUEST_HEAD_BYTES} are accepted"
            ),
        );
        return Ok(req.error_response(e).map_into_right_body());
    }
    Ok(next.call(req).await?.map_into_left_body())
}

/// Bytes of a request head as sent: `METHOD SP target SP HTTP/1.1 CRLF`, each field
/// `name: value CRLF`, the final CRLF.
fn head_bytes(method: &Method, uri: &actix_web::http::Uri, headers: &HeaderMap) -> usize {
    let target = uri.path_and_query().map_or(1, |p| p.as_str().len());
    let fields: usize = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + 2 + value.len() + 2)
        .sum();
    method.as_str().len() + 1 + target + " HTTP/1.1\r\n".len() + fields + 2
}

/// The `ErrorHandlers` middleware that turns every non-JSON error answer into the envelope
/// (module docs).
pub fn json_errors<B: 'static>() -> ErrorHandlers<B> {
    ErrorHandlers::new().default_handler(to_envelope)
}

/// The code of an error answer the application did not shape itself: the statuses actix
/// produces (400, 404, 405, 413, 415, 431; 500 for a misconfigured route), another 4xx as
/// `bad_request`, another 5xx as `internal`.
pub fn code_of(status: StatusCode) -> &'static str {
    match status {
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => "headers_too_large",
        s if s.is_server_error() => "internal",
        _ => "bad_request",
    }
}

fn to_envelope<B>(res: ServiceResponse<B>) -> actix_web::Result<ErrorHandlerResponse<B>> {
    if is_json(res.headers()) {
        return Ok(ErrorHandlerResponse::Response(res.map_into_left_body()));
    }
    let e = envelope_of(&res);
    let (req, old) = res.into_parts();
    let mut new = e.error_response();
    for (name, value) in old.headers() {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            new.headers_mut().append(name.clone(), value.clone());
        }
    }
    Ok(ErrorHandlerResponse::Response(
        ServiceResponse::new(req, new).map_into_right_body(),
    ))
}

fn envelope_of<B>(res: &ServiceResponse<B>) -> ApiError {
    let status = res.status();
    let req = res.request();
    let message = match status {
        StatusCode::NOT_FOUND => format!("no route for {} {}", req.method(), req.path()),
        StatusCode::METHOD_NOT_ALLOWED => {
            let allowed = res
                .headers()
                .get(header::ALLOW)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            format!(
                "{} is not allowed on {}; allowed: {allowed}",
                req.method(),
                req.path()
            )
        }
        s if s.is_server_error() => {
            tracing::error!(status = s.as_u16(), error = ?res.response().error(), "internal error");
            "the server failed; report the request_id".to_string()
        }
        s => res.response().error().map_or_else(
            || s.canonical_reason().unwrap_or("bad request").to_string(),
            |e| e.to_string(),
        ),
    };
    ApiError::new(status, code_of(status), message)
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// The `web::Json` extractor's settings: a size limit, and its errors as [`ApiError`]: 413
/// `payload_too_large` over `limit` bytes, 415 `unsupported_media_type` for another content
/// type, 400 `bad_json` otherwise.
pub fn json_config(limit: usize) -> web::JsonConfig {
    web::JsonConfig::default()
        .limit(limit)
        .error_handler(|err, _req| {
            use actix_web::error::JsonPayloadError as E;
            let e = match &err {
                E::OverflowKnownLength { .. } | E::Overflow { .. } => ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "payload_too_large",
                    err.to_string(),
                ),
                E::ContentType => ApiError::new(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "unsupported_media_type",
                    "send Content-Type: application/json",
                ),
                _ => ApiError::new(StatusCode::BAD_REQUEST, "bad_json", err.to_string()),
            };
            as_actix(err, &e)
        })
}

/// The `web::Path` extractor's errors: 404 `not_found`, like a malformed id (docs/api.md
/// §1.2: a path that does not name a resource answers as a missing one).
pub fn path_config() -> web::PathConfig {
    web::PathConfig::default().error_handler(|err, req: &HttpRequest| {
        let e = ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no such resource at {}: {err}", req.path()),
        );
        as_actix(err, &e)
    })
}

/// The `web::Query` extractor's errors: 400 `bad_query` with serde's message.
pub fn query_config() -> web::QueryConfig {
    web::QueryConfig::default().error_handler(|err, _req| {
        let e = ApiError::new(StatusCode::BAD_REQUEST, "bad_query", err.to_string());
        as_actix(err, &e)
    })
}

/// An extractor error answered as `e` (the cause kept for logs).
fn as_actix(cause: impl std::fmt::Debug + std::fmt::Display + 'static, e: &ApiError) -> Error {
    actix_web::error::InternalError::from_response(cause, e.error_response()).into()
}
