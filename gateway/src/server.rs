//! The HTTP server (actix-web): health, readiness and, for operations and the crash tests, an
//! internal endpoint that submits journaled operations. The public REST and websocket API
//! (issue 5) builds on the same [`AppState`].

use crate::market::Op;
use crate::sequencer::{SequencerError, SequencerHandle};
use actix_web::{HttpResponse, web};
use serde::Serialize;

/// Largest JSON body the internal endpoint accepts, bytes.
pub const MAX_INTERNAL_BODY: usize = 64 * 1024;

/// Shared state of the HTTP handlers.
#[derive(Clone)]
pub struct AppState {
    /// The sequencer.
    pub sequencer: SequencerHandle,
}

/// Every error body: `{code, message, request_id}`.
#[derive(Serialize)]
pub struct ErrorBody {
    /// Machine-readable code, e.g. `journal_unavailable`.
    pub code: &'static str,
    /// Human message.
    pub message: String,
    /// Id to quote when reporting the error.
    pub request_id: String,
}

/// An error response with a fresh request id.
pub fn error(
    status: actix_web::http::StatusCode,
    code: &'static str,
    message: impl Into<String>,
) -> HttpResponse {
    HttpResponse::build(status).json(ErrorBody {
        code,
        message: message.into(),
        request_id: uuid::Uuid::new_v4().to_string(),
    })
}

fn sequencer_error(e: &SequencerError) -> HttpResponse {
    use actix_web::http::StatusCode;
    match e {
        SequencerError::Unavailable(m) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "journal_unavailable",
            m.clone(),
        ),
        SequencerError::Refused(m) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "journal_refused",
            m.clone(),
        ),
        SequencerError::Stopped => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the exchange is shutting down",
        ),
        SequencerError::Unencodable(m) => {
            error(StatusCode::INTERNAL_SERVER_ERROR, "internal", m.clone())
        }
    }
}

/// JSON extractor settings: a size limit and errors as `{code, message, request_id}` (413 for
/// a body over `limit` bytes, 400 otherwise).
pub fn json_config(limit: usize) -> web::JsonConfig {
    web::JsonConfig::default()
        .limit(limit)
        .error_handler(|err, _req| {
            use actix_web::error::JsonPayloadError;
            use actix_web::http::StatusCode;
            let resp = match &err {
                JsonPayloadError::OverflowKnownLength { .. }
                | JsonPayloadError::Overflow { .. } => error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "payload_too_large",
                    err.to_string(),
                ),
                JsonPayloadError::ContentType => error(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "unsupported_media_type",
                    "send Content-Type: application/json",
                ),
                _ => error(StatusCode::BAD_REQUEST, "bad_json", err.to_string()),
            };
            actix_web::error::InternalError::from_response(err, resp).into()
        })
}

/// JSON 404 for unknown paths (`App::default_service`).
pub async fn not_found(req: actix_web::HttpRequest) -> HttpResponse {
    error(
        actix_web::http::StatusCode::NOT_FOUND,
        "not_found",
        format!("no route for {} {}", req.method(), req.path()),
    )
}

/// JSON 405 for a known path with another method.
pub async fn method_not_allowed(req: actix_web::HttpRequest) -> HttpResponse {
    error(
        actix_web::http::StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{} is not allowed on {}", req.method(), req.path()),
    )
}

/// A resource whose other methods answer a JSON 405.
pub fn resource(path: &str) -> actix_web::Resource {
    web::resource(path).default_service(web::to(method_not_allowed))
}

/// The live market page (`gateway/web/index.html`, compiled into the binary: no CDN, nothing
/// fetched at run time).
pub const INDEX_HTML: &str = include_str!("../web/index.html");

async fn index() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header((
            "Content-Security-Policy",
            "default-src 'self'; script-src 'self' 'unsafe-inline'; \
             style-src 'self' 'unsafe-inline'; connect-src 'self' ws: wss:; img-src 'self' data:",
        ))
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .body(INDEX_HTML)
}

/// Registers the routes of this module.
pub fn routes(cfg: &mut web::ServiceConfig, internal_api: bool) {
    cfg.service(
        web::resource("/")
            .route(web::get().to(index))
            .route(web::head().to(index))
            .default_service(web::to(method_not_allowed)),
    )
    .service(
        web::resource("/healthz")
            .route(web::get().to(healthz))
            .route(web::head().to(healthz))
            .default_service(web::to(method_not_allowed)),
    )
    .service(
        web::resource("/readyz")
            .route(web::get().to(readyz))
            .route(web::head().to(readyz))
            .default_service(web::to(method_not_allowed)),
    );
    if internal_api {
        cfg.service(
            web::scope("/internal")
                .app_data(json_config(MAX_INTERNAL_BODY))
                .service(
                    web::resource("/ops")
                        .route(web::post().to(post_op))
                        .default_service(web::to(method_not_allowed)),
                )
                .service(
                    web::resource("/state")
                        .route(web::get().to(state))
                        .default_service(web::to(method_not_allowed)),
                ),
        );
    }
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({"status": "ok"}))
}

async fn readyz(app: web::Data<AppState>) -> HttpResponse {
    match app.sequencer.inspect().await {
        Ok(info) if info.journal_ok => HttpResponse::Ok()
            .json(serde_json::json!({"status": "ready", "last_seq": info.last_seq})),
        Ok(_) => error(
            actix_web::http::StatusCode::SERVICE_UNAVAILABLE,
            "journal_unavailable",
            "the journal does not answer",
        ),
        Err(e) => sequencer_error(&e),
    }
}

/// Submits one journaled operation (internal: operations tooling and crash tests). Answers
/// `{seq, timestamp_ms, refusal, rejection}` once the operation is durable and applied.
async fn post_op(app: web::Data<AppState>, op: web::Json<Op>) -> HttpResponse {
    match app.sequencer.submit(op.into_inner()).await {
        Ok(c) => HttpResponse::Ok().json(serde_json::json!({
            "seq": c.seq,
            "timestamp_ms": c.timestamp_ms,
            "refusal": c.outcome.refusal.as_ref().map(|r| r.code),
            "refusal_message": c.outcome.refusal.as_ref().map(|r| r.message.clone()),
            "rejection": c.outcome.engine.iter().find_map(|o| o.rejection()).map(|r| r.code()),
        })),
        Err(e) => sequencer_error(&e),
    }
}

/// `{last_seq, state_hash}` after everything queued before this request.
async fn state(app: web::Data<AppState>) -> HttpResponse {
    match app.sequencer.inspect().await {
        Ok(info) => HttpResponse::Ok().json(serde_json::json!({
            "last_seq": info.last_seq,
            "state_hash": hex(&info.state_hash),
            "journal_ok": info.journal_ok,
        })),
        Err(e) => sequencer_error(&e),
    }
}

/// Lowercase hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
