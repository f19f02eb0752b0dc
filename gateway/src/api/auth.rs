//! Authentication and authorisation: `Authorization: Bearer <key>` → [`Principal`] (account
//! and role), per-key rate limits (429 with `Retry-After`), role checks.
//!
//! Keys are looked up by their SHA-256 in an in-memory cache loaded from the market at start
//! and updated by the admin handlers after each key operation is durable.

use crate::accounts::{Role, hash_key};
use crate::api::error::{ApiError, ApiResult};
use crate::api::{Api, ApiConfig};
use crate::sequencer::{SequencerError, SequencerHandle};
use actix_web::http::StatusCode;
use actix_web::{FromRequest, HttpRequest, web};
use dashmap::DashMap;
use governor::{Quota, RateLimiter};
use std::future::{Ready, ready};
use std::num::NonZeroU32;

/// Longest `Authorization` header value accepted, bytes.
pub const MAX_AUTH_HEADER: usize = 256;

/// Who is calling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// Account id.
    pub account: u64,
    /// Role.
    pub role: Role,
    /// Id of the key used.
    pub key_id: String,
}

impl Principal {
    /// 403 unless the caller has one of `roles`.
    ///
    /// # Errors
    /// 403 `forbidden`.
    pub fn require(&self, roles: &[Role]) -> ApiResult<()> {
        if roles.contains(&self.role) {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!(
                "a {} key may not do this (needs {})",
                self.role.as_str(),
                roles
                    .iter()
                    .map(|r| r.as_str())
                    .collect::<Vec<_>>()
                    .join(" or ")
            )))
        }
    }
}

/// API key hashes → principals.
#[derive(Default)]
pub struct AuthCache {
    keys: DashMap<[u8; 32], Principal>,
}

impl AuthCache {
    /// Loads every key from the market.
    ///
    /// # Errors
    /// The sequencer has stopped.
    pub async fn load(seq: &SequencerHandle) -> Result<AuthCache, SequencerError> {
        let entries = seq
            .read(|m, _| {
                m.accounts()
                    .iter()
                    .flat_map(|a| {
                        a.keys.iter().map(|(id, h)| {
                            (
                                *h,
                                Principal {
                                    account: a.id,
                                    role: a.role,
                                    key_id: id.clone(),
                                },
                            )
                        })
                    })
                    .collect::<Vec<_>>()
            })
            .await?;
        let cache = AuthCache::default();
        for (h, p) in entries {
            cache.keys.insert(h, p);
        }
        Ok(cache)
    }

    /// Adds a key (after its `AddApiKey` is durable).
    pub fn insert(&self, hash: [u8; 32], p: Principal) {
        self.keys.insert(hash, p);
    }

    /// Removes a key by id (after its `RevokeApiKey` is durable).
    pub fn revoke(&self, account: u64, key_id: &str) {
        self.keys
            .retain(|_, p| !(p.account == account && p.key_id == key_id));
    }

    /// Whether a key hash is registered (not revoked).
    pub fn contains(&self, hash: &[u8; 32]) -> bool {
        self.keys.contains_key(hash)
    }

    /// The principal of a key.
    pub fn lookup(&self, key: &str) -> Option<Principal> {
        self.keys.get(&hash_key(key)).map(|p| p.clone())
    }
}

/// The per-key rate limiter.
pub type Limiter = governor::DefaultKeyedRateLimiter<String>;

/// A limiter with the configured rate and burst.
pub fn limiter(config: &ApiConfig) -> Limiter {
    let rate = NonZeroU32::new(config.rate_per_s.max(1)).unwrap_or(NonZeroU32::MIN);
    let burst = NonZeroU32::new(config.rate_burst.max(1)).unwrap_or(NonZeroU32::MIN);
    RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst))
}

/// Takes one request from the key's budget.
///
/// # Errors
/// 429 `rate_limited` with `Retry-After` (whole seconds, at least 1).
pub fn check_rate(api: &Api, key_id: &str) -> ApiResult<()> {
    match api.limiter.check_key(&key_id.to_string()) {
        Ok(()) => Ok(()),
        Err(not_until) => {
            let wait = not_until.wait_time_from(governor::clock::Clock::now(
                &governor::clock::DefaultClock::default(),
            ));
            metrics::counter!("gpux_rate_limited_total").increment(1);
            Err(ApiError {
                retry_after_s: Some(wait.as_secs().max(1)),
                ..ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate_limited",
                    format!(
                        "more than {} requests per second (burst {}) on this key; retry in {} ms",
                        api.config.rate_per_s,
                        api.config.rate_burst,
                        wait.as_millis().max(1)
                    ),
                )
            })
        }
    }
}

/// The bearer token of a request: the `Authorization: Bearer` header, or (browsers cannot set
/// headers on a websocket) a `bearer.<key>` entry of `Sec-WebSocket-Protocol`. `Ok(None)`:
/// no credentials at all.
///
/// # Errors
/// 401 for an `Authorization` header that is not `Bearer <key>` or is over
/// [`MAX_AUTH_HEADER`] bytes.
pub fn bearer(req: &HttpRequest, websocket: bool) -> ApiResult<Option<String>> {
    if let Some(h) = req.headers().get(actix_web::http::header::AUTHORIZATION) {
        let malformed =
            || ApiError::unauthorized("the Authorization header is not `Bearer <API key>`");
        let s = h.to_str().map_err(|_| malformed())?;
        if s.len() > MAX_AUTH_HEADER {
            return Err(malformed());
        }
        let (scheme, token) = s.split_once(' ').ok_or_else(malformed)?;
        if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
            return Err(malformed());
        }
        return Ok(Some(token.trim().to_string()));
    }
    if !websocket {
        return Ok(None);
    }
    Ok(req
        .headers()
        .get_all(actix_web::http::header::SEC_WEBSOCKET_PROTOCOL)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .find_map(|p| p.strip_prefix("bearer.").map(str::to_string)))
}

/// Authenticates a request and takes one request from its key's rate budget.
///
/// # Errors
/// 401 `unauthorized` for a missing or unknown key, 429 `rate_limited`.
pub fn authenticate(api: &Api, req: &HttpRequest, websocket: bool) -> ApiResult<Principal> {
    let token = bearer(req, websocket)?.ok_or_else(|| {
        ApiError::unauthorized("send Authorization: Bearer <API key> (keys start with gpux_)")
    })?;
    let p = api
        .auth
        .lookup(&token)
        .ok_or_else(|| ApiError::unauthorized("unknown or revoked API key"))?;
    check_rate(api, &p.key_id)?;
    Ok(p)
}

impl FromRequest for Principal {
    type Error = ApiError;
    type Future = Ready<Result<Principal, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        let Some(api) = req.app_data::<web::Data<Api>>() else {
            return ready(Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "API state missing",
            )));
        };
        ready(authenticate(api, req, false))
    }
}
