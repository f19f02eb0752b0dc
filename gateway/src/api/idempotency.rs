//! `Idempotency-Key` on POSTs that create something: a retry with the same key and the same
//! request returns the original answer (status and body, with `Idempotent-Replayed: true`);
//! the same key with a different request is 409 `idempotency_conflict`; while the first is
//! still running a retry gets 409 `idempotency_in_flight`.
//!
//! Answers are kept per (account, key) for [`IDEMPOTENCY_TTL_MS`], in memory, at most
//! [`MAX_IDEMPOTENCY_ENTRIES`] (oldest dropped first). Server errors (5xx) are not kept, so a
//! retry after `journal_unavailable` runs again. Across a restart the market's own natural
//! keys still hold: a node name, one live offer per node, a bid's client order id and a
//! transfer's key are each refused or returned as the same object a second time.

use crate::api::error::{ApiError, ApiResult};
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse};
use dashmap::DashMap;
use std::time::{Duration, Instant};

/// How long an answer is replayed, ms (24 h).
pub const IDEMPOTENCY_TTL_MS: u64 = 24 * 3600 * 1000;
/// Most answers kept.
pub const MAX_IDEMPOTENCY_ENTRIES: usize = 200_000;
/// Longest key, bytes (printable ASCII).
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 128;

#[derive(Clone)]
enum State {
    InFlight,
    Done {
        status: u16,
        body: actix_web::web::Bytes,
    },
}

#[derive(Clone)]
struct Entry {
    fingerprint: [u8; 32],
    at: Instant,
    state: State,
}

/// The store.
#[derive(Default)]
pub struct IdempotencyStore {
    entries: DashMap<(u64, String), Entry>,
}

/// The `Idempotency-Key` of a request that needs one (it names the transfer, adjustment or
/// close).
///
/// # Errors
/// 400 `missing_idempotency_key` (saying `what` needs it), or as [`key_of`].
pub fn required_key_of(req: &HttpRequest, what: &str) -> ApiResult<String> {
    key_of(req)?.ok_or_else(|| {
        crate::api::error::ApiError::invalid(
            "Idempotency-Key",
            "missing_idempotency_key",
            format!("{what} need an Idempotency-Key header (it names them)"),
        )
    })
}

/// The `Idempotency-Key` header of a request, validated.
///
/// # Errors
/// 400 `invalid_idempotency_key` for an empty, too long or non-printable key.
pub fn key_of(req: &HttpRequest) -> ApiResult<Option<String>> {
    let Some(v) = req.headers().get("Idempotency-Key") else {
        return Ok(None);
    };
    let s = v.to_str().unwrap_or("");
    if s.is_empty() || s.len() > MAX_IDEMPOTENCY_KEY_LEN || !s.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(ApiError::invalid(
            "Idempotency-Key",
            "invalid_idempotency_key",
            format!("Idempotency-Key is 1..={MAX_IDEMPOTENCY_KEY_LEN} printable ASCII characters"),
        ));
    }
    Ok(Some(s.to_string()))
}

fn fingerprint(req: &HttpRequest, body: &[u8]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(req.method().as_str().as_bytes());
    h.update([0]);
    h.update(req.path().as_bytes());
    h.update([0]);
    h.update(body);
    h.finalize().into()
}

impl IdempotencyStore {
    /// Runs `f` once per (account, key): replays its answer (a wire type, serialized here) for
    /// retries of the same request. Without a key, just runs `f`.
    ///
    /// # Errors
    /// 409 `idempotency_conflict` / `idempotency_in_flight`, or `f`'s error (client errors
    /// are kept and replayed like answers; server errors are not kept); 500 when the answer
    /// does not serialize.
    pub async fn run<F, T>(
        &self,
        req: &HttpRequest,
        account: u64,
        key: Option<String>,
        body: &[u8],
        f: F,
    ) -> ApiResult<HttpResponse>
    where
        F: std::future::Future<Output = ApiResult<(StatusCode, T)>>,
        T: serde::Serialize,
    {
        let Some(key) = key else {
            let (status, v) = f.await?;
            return Ok(HttpResponse::build(status).json(v));
        };
        let fp = fingerprint(req, body);
        let id = (account, key);
        {
            use dashmap::mapref::entry::Entry as E;
            let ttl = Duration::from_millis(IDEMPOTENCY_TTL_MS);
            let fresh = Entry {
                fingerprint: fp,
                at: Instant::now(),
                state: State::InFlight,
            };
            match self.entries.entry(id.clone()) {
                E::Vacant(v) => {
                    v.insert(fresh);
                }
                E::Occupied(mut o) if o.get().at.elapsed() > ttl => {
                    o.insert(fresh);
                }
                E::Occupied(o) if o.get().fingerprint != fp => {
                    return Err(ApiError::new(
                        StatusCode::CONFLICT,
                        "idempotency_conflict",
                        "this Idempotency-Key was used for a different request",
                    ));
                }
                E::Occupied(o) => match &o.get().state {
                    State::Done { status, body } => {
                        return Ok(HttpResponse::build(
                            StatusCode::from_u16(*status).unwrap_or(StatusCode::OK),
                        )
                        .insert_header(("Idempotent-Replayed", "true"))
                        .content_type("application/json")
                        .body(body.clone()));
                    }
                    State::InFlight => {
                        return Err(ApiError::new(
                            StatusCode::CONFLICT,
                            "idempotency_in_flight",
                            "a request with this Idempotency-Key is still running; retry shortly",
                        ));
                    }
                },
            }
        }
        // A request dropped mid-way (client gone) must not leave its key stuck in flight.
        let mut guard = InFlightGuard {
            store: self,
            id: Some(id.clone()),
        };
        let result = f.await.and_then(|(s, v)| {
            serde_json::to_vec(&v).map(|b| (s, b)).map_err(|e| {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
            })
        });
        guard.id = None;
        let (status, body) = match &result {
            Ok((s, b)) => (*s, b.clone()),
            Err(e) => (e.status, serde_json::to_vec(&e.body()).unwrap_or_default()),
        };
        if status.is_server_error() {
            self.entries.remove(&id);
        } else {
            self.entries.insert(
                id,
                Entry {
                    fingerprint: fp,
                    at: Instant::now(),
                    state: State::Done {
                        status: status.as_u16(),
                        body: body.clone().into(),
                    },
                },
            );
            self.bound();
        }
        match result {
            Ok((s, _)) => Ok(HttpResponse::build(s)
                .content_type("application/json")
                .body(body)),
            Err(e) => Err(e),
        }
    }

    /// Drops expired answers, then the oldest, to stay within [`MAX_IDEMPOTENCY_ENTRIES`].
    fn bound(&self) {
        if self.entries.len() <= MAX_IDEMPOTENCY_ENTRIES {
            return;
        }
        let ttl = Duration::from_millis(IDEMPOTENCY_TTL_MS);
        self.entries.retain(|_, e| e.at.elapsed() <= ttl);
        let excess = self
            .entries
            .len()
            .saturating_sub(MAX_IDEMPOTENCY_ENTRIES * 9 / 10);
        if excess > 0 {
            let mut ages: Vec<(Instant, (u64, String))> = self
                .entries
                .iter()
                .map(|e| (e.at, e.key().clone()))
                .collect();
            ages.sort_unstable_by_key(|(at, _)| *at);
            for (_, k) in ages.into_iter().take(excess) {
                self.entries.remove(&k);
            }
        }
    }
}

struct InFlightGuard<'a> {
    store: &'a IdempotencyStore,
    id: Option<(u64, String)>,
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.store
                .entries
                .remove_if(&id, |_, e| matches!(e.state, State::InFlight));
        }
    }
}
