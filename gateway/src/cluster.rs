//! Several processes on one Redis journal (issue 18; docs/journal.md "Processes on one
//! journal", docs/deploy.md): process roles, forwarding commands from a follower to the
//! leader, and the leader's end of it.
//!
//! - [`Role`]: `all` (leads or stands by, and serves the API either way), `engine` (leads or
//!   stands by; serves only probes, metrics and the forwarding endpoint), `api` (never leads:
//!   follows the journal and serves the API from its replica).
//! - [`Forwarder`]: a follower's way to the leader. It finds the leader's URL in Redis (the
//!   lease and the URL the leader recorded with it), POSTs the encoded command to
//!   `/internal/forward` with the cluster key, and answers the sequence number. A connection
//!   refused or a `not_leader` answer means nothing was taken: it looks the leader up again
//!   and tries once more. Any other failure after sending leaves the outcome unknown (503; the
//!   client retries with its idempotency key or client order id).
//! - [`routes`]: `POST /internal/forward` on every process with a cluster key; only a leader
//!   sequences (a follower answers 503 `not_leader`, and never forwards a forwarded command).

use crate::api::Api;
use crate::api::error::{ApiError, ApiResult};
use crate::journal::{JournalError, RedisConfig, RedisJournal};
use crate::sequencer::SequencerError;
use crate::sequencer::follow::Forward;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Duration;

/// Path of the forwarding endpoint.
pub const FORWARD_PATH: &str = "/internal/forward";

/// Largest forwarded command, bytes (a journal entry's payload limit).
pub const MAX_FORWARD_BYTES: usize = crate::journal::MAX_PAYLOAD_BYTES;

/// Limit on connecting to the leader, ms.
pub const FORWARD_CONNECT_TIMEOUT_MS: u64 = 1_000;

/// Limit on one forwarded command's round trip, ms (the API's own request timeout answers
/// the client first with the defaults).
pub const FORWARD_TIMEOUT_MS: u64 = 30_000;

/// Shortest cluster key accepted, bytes.
pub const MIN_CLUSTER_KEY_LEN: usize = 16;

/// What one server process does (`role` in the configuration).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Leads or stands by, and serves the whole API (the single-process default).
    #[default]
    All,
    /// Leads or stands by; serves probes, metrics and `/internal/forward`, not the public API.
    Engine,
    /// Never leads: follows the journal, serves the API from its replica, forwards commands.
    Api,
}

impl Role {
    /// Whether a process of this role campaigns for the lease.
    pub fn may_lead(self) -> bool {
        !matches!(self, Role::Api)
    }

    /// Whether it serves the public API (`/v1`, the page, the feed).
    pub fn serves_api(self) -> bool {
        !matches!(self, Role::Engine)
    }

    /// The name in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::All => "all",
            Role::Engine => "engine",
            Role::Api => "api",
        }
    }
}

/// The cluster key's check on the leader: its SHA-256 (compared whole, never byte by byte).
#[derive(Clone)]
pub struct ClusterKey([u8; 32]);

impl ClusterKey {
    /// The check for `key`.
    ///
    /// # Errors
    /// A message when the key is shorter than [`MIN_CLUSTER_KEY_LEN`].
    pub fn new(key: &str) -> Result<ClusterKey, String> {
        if key.len() < MIN_CLUSTER_KEY_LEN {
            return Err(format!(
                "cluster_key must be at least {MIN_CLUSTER_KEY_LEN} bytes"
            ));
        }
        Ok(ClusterKey(Sha256::digest(key.as_bytes()).into()))
    }

    fn admits(&self, req: &HttpRequest) -> bool {
        let Some(token) = req
            .headers()
            .get(actix_web::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
        else {
            return false;
        };
        let h: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        h == self.0
    }
}

/// Registers `POST /internal/forward` (with the payload limit it needs). Register it before
/// the `/internal` scope of `server::routes`, which would otherwise take the path.
pub fn routes(cfg: &mut web::ServiceConfig, key: ClusterKey) {
    cfg.service(
        crate::server::resource(FORWARD_PATH)
            .app_data(web::Data::new(key))
            .app_data(web::PayloadConfig::new(MAX_FORWARD_BYTES))
            .route(web::post().to(forward)),
    );
}

/// The leader's answer to a forwarded command.
#[derive(Debug, Serialize, Deserialize)]
pub struct Forwarded {
    /// The sequence number the command was journaled at.
    pub seq: u64,
}

/// `POST /internal/forward` (body: one journal record, [`crate::sequencer::encode`];
/// `Authorization: Bearer <cluster key>`) → 200 `{seq}` once durable and applied; 401
/// `unauthorized`; 400 `bad_request` for a body that does not decode; 503 `not_leader` on a
/// follower; 503 as `submit` otherwise.
async fn forward(
    req: HttpRequest,
    body: web::Bytes,
    api: web::Data<Api>,
    key: web::Data<ClusterKey>,
) -> ApiResult<HttpResponse> {
    if !key.admits(&req) {
        return Err(ApiError::unauthorized(
            "forwarding needs the cluster key (Authorization: Bearer <cluster_key>)",
        ));
    }
    let op = crate::sequencer::decode(&body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("the forwarded command does not decode: {e}"),
        )
    })?;
    let c = api.seq.submit_forwarded(op).await?;
    Ok(HttpResponse::Ok().json(Forwarded { seq: c.seq }))
}

/// A follower's way to the leader (module docs).
pub struct Forwarder {
    journal: tokio::sync::Mutex<RedisJournal>,
    http: reqwest::Client,
    key: String,
    leader: std::sync::Mutex<Option<String>>,
}

impl Forwarder {
    /// A forwarder that finds the leader through a journal connection of its own.
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot be reached; `Config` for a bad URL.
    pub async fn connect(redis: RedisConfig, key: String) -> Result<Forwarder, JournalError> {
        let journal = RedisJournal::connect(redis).await?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(FORWARD_CONNECT_TIMEOUT_MS))
            .timeout(Duration::from_millis(FORWARD_TIMEOUT_MS))
            .pool_max_idle_per_host(64)
            .build()
            .map_err(|e| JournalError::Config(format!("HTTP client: {e}")))?;
        Ok(Forwarder {
            journal: tokio::sync::Mutex::new(journal),
            http,
            key,
            leader: std::sync::Mutex::new(None),
        })
    }

    /// The [`Forward`] a follower sequencer calls.
    pub fn into_forward(self) -> Forward {
        let me = Arc::new(self);
        Arc::new(move |bytes| {
            let me = me.clone();
            Box::pin(async move { me.send(bytes).await })
        })
    }

    fn cached(&self) -> Option<String> {
        self.leader.lock().map(|g| g.clone()).unwrap_or_default()
    }

    fn remember(&self, url: Option<String>) {
        if let Ok(mut g) = self.leader.lock() {
            *g = url;
        }
    }

    /// The leader's URL: the cached one, or looked up in Redis.
    async fn leader_url(&self, fresh: bool) -> Result<String, SequencerError> {
        if !fresh && let Some(url) = self.cached() {
            return Ok(url);
        }
        let found = self.journal.lock().await.leader().await;
        match found {
            Ok(Some((_, _, url))) if !url.is_empty() => {
                self.remember(Some(url.clone()));
                Ok(url)
            }
            Ok(Some((epoch, owner, _))) => Err(SequencerError::NotLeader(format!(
                "the leader (epoch {epoch}, {owner}) gave no URL to forward commands to (set \
                 advertise_url on engine processes); nothing was applied"
            ))),
            Ok(None) => Err(SequencerError::NotLeader(
                "no engine leads the journal right now (a takeover is under way); nothing was \
                 applied: retry"
                    .into(),
            )),
            Err(e) => Err(SequencerError::Unavailable(format!(
                "finding the leader: {e}; nothing was forwarded"
            ))),
        }
    }

    /// Forwards one encoded command; answers its sequence number.
    async fn send(&self, bytes: Vec<u8>) -> Result<u64, SequencerError> {
        let mut last = None;
        for attempt in 0..2 {
            let url = self.leader_url(attempt > 0).await?;
            let sent = self
                .http
                .post(format!("{url}{FORWARD_PATH}"))
                .bearer_auth(&self.key)
                .header(reqwest::header::CONTENT_TYPE, "application/msgpack")
                .body(bytes.clone())
                .send()
                .await;
            let resp = match sent {
                Err(e) if e.is_connect() => {
                    self.remember(None);
                    last = Some(SequencerError::NotLeader(format!(
                        "the leader at {url} refused the connection ({e}); nothing was applied: \
                         retry"
                    )));
                    continue;
                }
                Err(e) => {
                    self.remember(None);
                    return Err(SequencerError::Unavailable(format!(
                        "forwarding to the leader at {url}: {e}"
                    )));
                }
                Ok(r) => r,
            };
            let status = resp.status();
            if status.is_success() {
                return resp.json::<Forwarded>().await.map(|f| f.seq).map_err(|e| {
                    SequencerError::Unavailable(format!(
                        "the leader at {url} acknowledged, but its answer did not read: {e}"
                    ))
                });
            }
            let body: gpux_wire::ErrorBody = match resp.json().await {
                Ok(b) => b,
                Err(e) => {
                    return Err(SequencerError::Unavailable(format!(
                        "the leader at {url} answered {status} without an error body: {e}"
                    )));
                }
            };
            match body.code.as_str() {
                "not_leader" => {
                    self.remember(None);
                    last = Some(SequencerError::NotLeader(body.message));
                }
                "journal_refused" => return Err(SequencerError::Refused(body.message)),
                "unauthorized" => {
                    return Err(SequencerError::Refused(format!(
                        "the leader at {url} refused this process's cluster key"
                    )));
                }
                "shutting_down" => {
                    self.remember(None);
                    return Err(SequencerError::NotLeader(body.message));
                }
                _ => return Err(SequencerError::Unavailable(body.message)),
            }
        }
        Err(last.unwrap_or_else(|| SequencerError::NotLeader("no leader answered".into())))
    }
}
