//! Request ids (issue 17, the audit trail): every answer carries `X-Request-Id`, and the same
//! id is the `request_id` of an error body and of the audit entry the request made.
//!
//! A client may send its own `X-Request-Id` (1..=[`MAX_REQUEST_ID_BYTES`] visible ASCII
//! characters, e.g. to match its logs with ours); otherwise, or when it is of another shape,
//! the server makes a UUID v4. The id lives in a task-local for the request's handling, so
//! [`crate::api::error::ApiError`] bodies and [`crate::api::Api::submit_as`] read it without
//! threading it through every handler; outside a request (websocket sessions, start-up) a
//! fresh UUID stands in.

pub use crate::audit::MAX_REQUEST_ID_BYTES;
use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;

/// The header that carries a request's id, both ways.
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

tokio::task_local! {
    static REQUEST_ID: String;
}

/// The id of the request being handled, or a fresh UUID outside one.
pub fn current() -> String {
    REQUEST_ID
        .try_with(Clone::clone)
        .unwrap_or_else(|_| uuid::Uuid::new_v4().to_string())
}

/// Middleware (outermost): picks the request's id, handles the request with it in scope and
/// sets `X-Request-Id` on the answer (errors included).
///
/// # Errors
/// None of its own: an error of the inner services passes through.
pub async fn assign(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<actix_web::body::BoxBody>, actix_web::Error> {
    let id = req
        .headers()
        .get(&X_REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .and_then(crate::audit::valid_request_id)
        .map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_string);
    // The services inside answer errors themselves (the edge's `json_errors` makes every one
    // the envelope), so an `Err` does not come back here in practice; it would pass as it is.
    let mut res = REQUEST_ID
        .scope(id.clone(), next.call(req))
        .await?
        .map_into_boxed_body();
    if let Ok(v) = HeaderValue::from_str(&id) {
        res.headers_mut().insert(X_REQUEST_ID, v);
    }
    Ok(res)
}
