//! The HTTP server (actix-web): the live market page, health, readiness and, for operations
//! and the crash tests, an internal endpoint that submits journaled operations. The public REST
//! and websocket API (issue 5) builds on the same [`AppState`]. Errors are [`ApiError`]s, the
//! one envelope `{code, message, request_id}`; the edge around every route (actix's own errors,
//! 405 `Allow`, pipelining) is [`crate::api::edge`].

use crate::api::edge;
use crate::api::error::{ApiError, ApiResult};
use crate::market::Op;
use crate::sequencer::SequencerHandle;
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};

/// Largest JSON body the internal endpoint accepts, bytes.
pub const MAX_INTERNAL_BODY: usize = 64 * 1024;

/// Shared state of the HTTP handlers.
#[derive(Clone)]
pub struct AppState {
    /// The sequencer.
    pub sequencer: SequencerHandle,
    /// What this process does (`crate::cluster::Role`).
    pub role: crate::cluster::Role,
}

/// A resource: a plain `web::resource`, kept as the one constructor of every route table. A
/// method it has no route for answers 405 with `Allow` listing the methods it has (actix's
/// `Resource` default service, made JSON by [`crate::api::edge::json_errors`]); so resources
/// set no default service of their own.
pub fn resource(path: &str) -> actix_web::Resource {
    web::resource(path)
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
pub fn routes(cfg: &mut web::ServiceConfig, internal_api: bool, page: bool) {
    if page {
        cfg.service(
            resource("/")
                .route(web::get().to(index))
                .route(web::head().to(index)),
        );
    }
    cfg.service(
        resource("/healthz")
            .route(web::get().to(healthz))
            .route(web::head().to(healthz)),
    )
    .service(
        resource("/readyz")
            .route(web::get().to(readyz))
            .route(web::head().to(readyz)),
    );
    if internal_api {
        cfg.service(
            web::scope("/internal")
                .app_data(edge::json_config(MAX_INTERNAL_BODY))
                .service(resource("/ops").route(web::post().to(post_op)))
                .service(resource("/state").route(web::get().to(state))),
        );
    }
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({"status": "ok"}))
}

async fn readyz(
    app: web::Data<AppState>,
    api: web::Data<crate::api::Api>,
) -> ApiResult<HttpResponse> {
    if !api.ready.load(std::sync::atomic::Ordering::Acquire) {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "starting",
            "the server is starting (creating the admin account or the demo market)",
        ));
    }
    let info = app.sequencer.inspect().await?;
    if !info.journal_ok {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "journal_unavailable",
            "the journal does not answer",
        ));
    }
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "status": "ready",
        "last_seq": info.last_seq,
        "role": app.role.as_str(),
        "leading": app.sequencer.is_leading(),
        "warnings": api.warnings.lock().expect("warnings lock").clone(),
    })))
}

/// Submits one journaled operation (internal: operations tooling and crash tests). Answers
/// `{seq, timestamp_ms, refusal, rejection}` once the operation is durable and applied.
async fn post_op(app: web::Data<AppState>, op: web::Json<Op>) -> ApiResult<HttpResponse> {
    let c = app.sequencer.submit(op.into_inner()).await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "seq": c.seq,
        "timestamp_ms": c.timestamp_ms,
        "refusal": c.outcome.refusal.as_ref().map(|r| r.code),
        "refusal_message": c.outcome.refusal.as_ref().map(|r| r.message.clone()),
        "rejection": c.outcome.engine.iter().find_map(|o| o.rejection()).map(|r| r.code()),
    })))
}

/// `{last_seq, state_hash}` after everything queued before this request.
async fn state(app: web::Data<AppState>) -> ApiResult<HttpResponse> {
    let info = app.sequencer.inspect().await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "last_seq": info.last_seq,
        "state_hash": hex(&info.state_hash),
        "journal_ok": info.journal_ok,
        "leading": app.sequencer.is_leading(),
    })))
}

/// Lowercase hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
