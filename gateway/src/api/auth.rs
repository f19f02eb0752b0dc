//! Authentication and authorisation: `Authorization: Bearer <key>` → [`Principal`] (account,
//! role and, for a node key, its node), per-key rate limits (429 with `Retry-After`), role
//! checks.
//!
//! Keys are looked up by their SHA-256 in an in-memory cache loaded from the market at start
//! and updated by the key handlers after each key operation is durable, and by
//! [`AuthCache::follow`] from every committed key operation, whichever process made it (an
//! API process following the journal learns of keys created through another). A process that
//! follows the journal (not the leader) gives an unknown key up to [`FOLLOWER_KEY_WAIT_MS`] to
//! appear before it answers 401: a key created through another process is acknowledged once
//! *that* process's replica has it, and reaches this one's replica a little later, so a
//! client that moves between processes right after creating a key is not refused.
//!
//! **Node keys** (issue 16) are refused by default: a handler that takes [`Principal`] never
//! sees one (403 `forbidden`, "this key is scoped to node NAME"). Only the node agent's
//! endpoints take [`ScopedPrincipal`], and each family checks the object once:
//! [`Principal::require_node_name`] (registering), [`Principal::require_node_access`] (a node),
//! [`Principal::require_lease_access`] (a lease), [`Principal::may_see_node`] (inside reads).
//! Another node's objects answer 404 exactly like missing ones.

use crate::accounts::{Role, hash_key};
use crate::api::error::{ApiError, ApiResult};
use crate::api::{Api, ApiConfig};
use crate::sequencer::{SequencerError, SequencerHandle};
use actix_web::http::StatusCode;
use actix_web::{FromRequest, HttpRequest, web};
use dashmap::DashMap;
use futures_util::future::{Either, LocalBoxFuture};
use governor::{Quota, RateLimiter};
use std::future::{Ready, ready};
use std::num::NonZeroU32;
use std::sync::{Arc, OnceLock};

/// Longest `Authorization` header value accepted, bytes.
pub const MAX_AUTH_HEADER: usize = 256;

/// The node a node key is scoped to: the node's name, and its id once the node is registered.
/// The id is cached for the key's life: a supplier's node names are unique and never change,
/// and nodes are never removed, so the binding never changes once made.
#[derive(Debug, PartialEq, Eq)]
pub struct NodeScope {
    /// The node's name (unique per supplier).
    pub name: String,
    id: OnceLock<u64>,
}

impl NodeScope {
    /// A scope to the node named `name`.
    pub fn new(name: impl Into<String>) -> NodeScope {
        NodeScope {
            name: name.into(),
            id: OnceLock::new(),
        }
    }
}

/// Who is calling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// Account id.
    pub account: u64,
    /// Role.
    pub role: Role,
    /// Id of the key used.
    pub key_id: String,
    /// For a node key, the node it is scoped to; `None` for an account key.
    pub node: Option<Arc<NodeScope>>,
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
                "{} key may not do this (needs {})",
                self.role.with_article(),
                roles
                    .iter()
                    .map(|r| r.as_str())
                    .collect::<Vec<_>>()
                    .join(" or ")
            )))
        }
    }

    /// 403 for a node key (what every handler but the node agent's gets, through the
    /// [`Principal`] extractor).
    ///
    /// # Errors
    /// 403 `forbidden`: "this key is scoped to node NAME".
    pub fn require_unscoped(&self) -> ApiResult<()> {
        match &self.node {
            None => Ok(()),
            Some(scope) => Err(scoped_refusal(&scope.name)),
        }
    }

    /// Whether the caller may see node `n`: one of its account's nodes, and for a node key
    /// only the node of its name. The one predicate of the node scope (reads use it directly).
    pub fn may_see_node(&self, n: &exchange::state::Node) -> bool {
        n.supplier.0 == self.account && self.node.as_ref().is_none_or(|s| s.name == n.name)
    }

    /// For registering a node named `name`: 403 unless an account key or a node key of that
    /// name.
    ///
    /// # Errors
    /// 403 `forbidden`.
    pub fn require_node_name(&self, name: &str) -> ApiResult<()> {
        match &self.node {
            Some(scope) if scope.name != name => Err(scoped_refusal(&scope.name)),
            _ => Ok(()),
        }
    }

    /// The id of a node key's node once registered (`None` before, and for an account key).
    ///
    /// # Errors
    /// 503 when the sequencer has stopped.
    pub async fn scoped_node_id(&self, api: &Api) -> ApiResult<Option<u64>> {
        let Some(scope) = &self.node else {
            return Ok(None);
        };
        if let Some(id) = scope.id.get() {
            return Ok(Some(*id));
        }
        let (account, name) = (self.account, scope.name.clone());
        let id = api
            .read(move |m, _| {
                m.engine()
                    .node_by_name(exchange::AccountId(account), &name)
                    .map(|n| n.id.0)
            })
            .await?;
        if let Some(id) = id {
            let _ = scope.id.set(id);
        }
        Ok(id)
    }

    /// 404 unless a node key's node is node `id` (an account key passes: its handler checks
    /// the node's owner as before). For the node agent's node endpoints.
    ///
    /// # Errors
    /// 404 `not_found` (another node answers like a missing one), 503.
    pub async fn require_node_access(&self, api: &Api, id: u64) -> ApiResult<()> {
        if self.node.is_none() || self.scoped_node_id(api).await? == Some(id) {
            Ok(())
        } else {
            Err(ApiError::not_found("node"))
        }
    }

    /// 404 unless lease `id` is on a node key's node (an account key passes: its handler
    /// checks the lease's supplier as before). For the node agent's lease endpoints.
    ///
    /// # Errors
    /// 404 `not_found` (another node's lease answers like a missing one), 503.
    pub async fn require_lease_access(&self, api: &Api, id: u64) -> ApiResult<()> {
        if self.node.is_none() {
            return Ok(());
        }
        let Some(node) = self.scoped_node_id(api).await? else {
            return Err(ApiError::not_found("lease"));
        };
        let account = self.account;
        let on_node = api
            .read(move |m, _| {
                m.deliveries()
                    .record(exchange::LeaseId(id))
                    .is_some_and(|r| r.supplier.0 == account && r.node.0 == node)
            })
            .await?;
        if on_node {
            Ok(())
        } else {
            Err(ApiError::not_found("lease"))
        }
    }
}

/// The refusal of a node key outside its node's endpoints.
fn scoped_refusal(node: &str) -> ApiError {
    ApiError::forbidden(format!(
        "this key is scoped to node {node}: it may register, read, update and heartbeat that \
         node, read its leases and report on them, and nothing else"
    ))
}

/// On a process that follows the journal, how long an unknown key waits for the replica to
/// learn of it before the request is answered 401, ms (module docs). Replicas trail the leader
/// by milliseconds; a second covers a loaded one.
pub const FOLLOWER_KEY_WAIT_MS: u64 = 1_000;

/// API key hashes → principals.
#[derive(Default)]
pub struct AuthCache {
    keys: DashMap<[u8; 32], Principal>,
    /// Woken after every change of `keys`.
    changed: tokio::sync::Notify,
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
                    .flat_map(principals_of)
                    .collect::<Vec<_>>()
            })
            .await?;
        let cache = AuthCache::default();
        for (h, p) in entries {
            cache.keys.insert(h, p);
        }
        Ok(cache)
    }

    /// Keeps the cache in step with committed key operations (`events`, subscribed before the
    /// cache was loaded so that none goes by): after each one that creates, adds or revokes a
    /// key, the account's keys are read again from the market. A subscriber that fell behind
    /// reloads every key. Ends when the sequencer stops, or when every sender of `until` is
    /// dropped (the API that owns the cache is gone: the task must not keep the sequencer).
    pub fn follow(
        self: &Arc<Self>,
        seq: SequencerHandle,
        mut events: tokio::sync::broadcast::Receiver<Arc<crate::sequencer::Committed>>,
        mut until: tokio::sync::mpsc::Receiver<()>,
    ) -> tokio::task::JoinHandle<()> {
        let cache = self.clone();
        tokio::spawn(async move {
            use tokio::sync::broadcast::error::RecvError;
            loop {
                let event = tokio::select! {
                    e = events.recv() => e,
                    _ = until.recv() => return,
                };
                let account = match event {
                    Ok(c) => match key_account(&c) {
                        Some(a) => Some(a),
                        None => continue,
                    },
                    Err(RecvError::Lagged(_)) => None,
                    Err(RecvError::Closed) => return,
                };
                let fresh = seq
                    .read(move |m, _| {
                        m.accounts()
                            .iter()
                            .filter(|a| account.is_none_or(|id| a.id == id))
                            .flat_map(principals_of)
                            .collect::<Vec<_>>()
                    })
                    .await;
                let Ok(fresh) = fresh else { return };
                // Added first, then the stale ones dropped: a live key never misses.
                let live: std::collections::HashSet<[u8; 32]> =
                    fresh.iter().map(|(h, _)| *h).collect();
                for (h, p) in fresh {
                    cache.keys.insert(h, p);
                }
                cache
                    .keys
                    .retain(|h, p| live.contains(h) || account.is_some_and(|id| p.account != id));
                cache.changed.notify_waiters();
            }
        })
    }

    /// Adds a key (after its `AddApiKey` is durable).
    pub fn insert(&self, hash: [u8; 32], p: Principal) {
        self.keys.insert(hash, p);
        self.changed.notify_waiters();
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

    /// The principal of a key, waiting up to `wait` for it to be added (a key created through
    /// another process, not yet applied by this one's replica).
    pub async fn lookup_within(&self, key: &str, wait: std::time::Duration) -> Option<Principal> {
        let hash = hash_key(key);
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(p) = self.keys.get(&hash) {
                return Some(p.clone());
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return None;
            }
        }
    }
}

/// The keys of an account as cache entries.
fn principals_of(a: &crate::accounts::AccountRecord) -> Vec<([u8; 32], Principal)> {
    a.keys
        .iter()
        .map(|(id, h)| {
            (
                *h,
                Principal {
                    account: a.id,
                    role: a.role,
                    key_id: id.clone(),
                    node: a.node_of_key(id).map(|n| Arc::new(NodeScope::new(n))),
                },
            )
        })
        .collect()
}

/// The account whose keys a committed operation changed, if it applied.
fn key_account(c: &crate::sequencer::Committed) -> Option<u64> {
    use crate::market::Op;
    if c.outcome.refusal.is_some() {
        return None;
    }
    let mut op = &c.op;
    while let Op::Audited { op: inner, .. } = op {
        op = inner;
    }
    match op {
        Op::CreateAccount {
            key_hash: Some(_), ..
        } => c.outcome.account,
        Op::AddApiKey { account, .. }
        | Op::RevokeApiKey { account, .. }
        | Op::AddNodeKey { account, .. } => Some(*account),
        _ => None,
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
/// [`MAX_AUTH_HEADER`] bytes, and for two or more `Authorization` headers (which one a proxy
/// or a server reads differs; none is chosen here).
pub fn bearer(req: &HttpRequest, websocket: bool) -> ApiResult<Option<String>> {
    let mut all = req
        .headers()
        .get_all(actix_web::http::header::AUTHORIZATION);
    if let (Some(_), Some(_)) = (all.next(), all.next()) {
        return Err(ApiError::unauthorized(
            "two Authorization headers: send exactly one, `Bearer <API key>`",
        ));
    }
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

/// A request's key as this process knows it now.
enum KeyNow {
    /// Known (and its rate budget charged).
    Known(Principal),
    /// Unknown here, but it may yet arrive: this process follows the journal (module docs);
    /// the token, for [`authenticate_waiting`] to wait on.
    Pending(String),
}

/// Authenticates a request and takes one request from its key's rate budget, without
/// waiting.
///
/// # Errors
/// 401 `unauthorized` for a missing key, or an unknown one on the leader; 429 `rate_limited`.
fn authenticate_now(api: &Api, req: &HttpRequest, websocket: bool) -> ApiResult<KeyNow> {
    let token = bearer(req, websocket)?.ok_or_else(|| {
        ApiError::unauthorized("send Authorization: Bearer <API key> (keys start with gpux_)")
    })?;
    match api.auth.lookup(&token) {
        Some(p) => {
            check_rate(api, &p.key_id)?;
            Ok(KeyNow::Known(p))
        }
        None if !api.seq.is_leading() => Ok(KeyNow::Pending(token)),
        None => Err(unknown_key()),
    }
}

fn unknown_key() -> ApiError {
    ApiError::unauthorized("unknown or revoked API key")
}

/// Authenticates a request and takes one request from its key's rate budget. On a process
/// that follows the journal an unknown key waits up to [`FOLLOWER_KEY_WAIT_MS`] for the
/// replica to learn of it.
///
/// # Errors
/// 401 `unauthorized` for a missing or unknown key, 429 `rate_limited`.
pub async fn authenticate_waiting(
    api: &Api,
    req: &HttpRequest,
    websocket: bool,
) -> ApiResult<Principal> {
    match authenticate_now(api, req, websocket)? {
        KeyNow::Known(p) => Ok(p),
        KeyNow::Pending(token) => wait_for_key(api, &token).await,
    }
}

/// The principal of `token` once this follower's replica has it (within
/// [`FOLLOWER_KEY_WAIT_MS`]), its rate budget charged.
async fn wait_for_key(api: &Api, token: &str) -> ApiResult<Principal> {
    let wait = std::time::Duration::from_millis(FOLLOWER_KEY_WAIT_MS);
    let p = api
        .auth
        .lookup_within(token, wait)
        .await
        .ok_or_else(unknown_key)?;
    check_rate(api, &p.key_id)?;
    Ok(p)
}

/// An extractor's answer: at once when the key is known (the hot path allocates nothing), or
/// after [`authenticate_waiting`] on a follower.
type AuthFuture<T> =
    Either<Ready<Result<T, ApiError>>, LocalBoxFuture<'static, Result<T, ApiError>>>;

fn extract<T: 'static>(req: &HttpRequest, then: fn(Principal) -> ApiResult<T>) -> AuthFuture<T> {
    let api = match api_of(req) {
        Ok(api) => api.clone(),
        Err(e) => return Either::Left(ready(Err(e))),
    };
    match authenticate_now(&api, req, false) {
        Ok(KeyNow::Known(p)) => Either::Left(ready(then(p))),
        Err(e) => Either::Left(ready(Err(e))),
        Ok(KeyNow::Pending(token)) => {
            Either::Right(Box::pin(
                async move { then(wait_for_key(&api, &token).await?) },
            ))
        }
    }
}

fn api_of(req: &HttpRequest) -> ApiResult<&web::Data<Api>> {
    req.app_data::<web::Data<Api>>().ok_or_else(|| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "API state missing",
        )
    })
}

/// Account keys only: a node key is refused here (403), so no handler that takes a
/// [`Principal`] can be reached with one.
impl FromRequest for Principal {
    type Error = ApiError;
    type Future = AuthFuture<Principal>;

    fn from_request(req: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        extract(req, |p| {
            p.require_unscoped()?;
            Ok(p)
        })
    }
}

/// A caller of the node agent's endpoints: an account key or a **node key** (issue 16). A
/// handler that takes it checks the node or lease with [`Principal::require_node_access`],
/// [`Principal::require_lease_access`], [`Principal::require_node_name`] or
/// [`Principal::may_see_node`].
#[derive(Clone, Debug)]
pub struct ScopedPrincipal(pub Principal);

impl std::ops::Deref for ScopedPrincipal {
    type Target = Principal;

    fn deref(&self) -> &Principal {
        &self.0
    }
}

impl FromRequest for ScopedPrincipal {
    type Error = ApiError;
    type Future = AuthFuture<ScopedPrincipal>;

    fn from_request(req: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        extract(req, |p| Ok(ScopedPrincipal(p)))
    }
}
