//! Several processes on one Redis journal (issue 18; docs/journal.md "Processes on one
//! journal", docs/deploy.md): process roles, forwarding commands from a follower to the
//! leader, and the leader's end of it.
//!
//! - [`Role`]: `all` (leads or stands by, and serves the API either way), `engine` (leads or
//!   stands by; serves only probes, metrics and the forwarding endpoint), `api` (never leads:
//!   follows the journal and serves the API from its replica).
//! - [`Forwarder`]: a follower's way to the leader. It finds the leader's URL in Redis (the
//!   lease and the URL the leader recorded with it), POSTs the encoded commands to
//!   `/internal/forward` with the cluster key, in batches (one HTTP round trip for every
//!   command queued meanwhile: [`frame`]), and answers each command's sequence number. A connection
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
use tokio::sync::oneshot;

/// Path of the forwarding endpoint.
pub const FORWARD_PATH: &str = "/internal/forward";

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
            .app_data(web::PayloadConfig::new(MAX_FORWARD_BODY))
            .route(web::post().to(forward)),
    );
}

/// One command's result in the leader's answer to a forwarded batch: its sequence number, or
/// why it was not taken (`code`: `not_leader`, `journal_unavailable`, `journal_refused`,
/// `shutting_down`, `request_timeout`, `bad_request`).
#[derive(Debug, Serialize, Deserialize)]
pub struct Forwarded {
    /// The sequence number the command was journaled at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// Why it was not, machine-readable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Why it was not, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The leader's answer to a forwarded batch: one result per command, in order.
#[derive(Debug, Serialize, Deserialize)]
pub struct ForwardedBatch {
    /// The results.
    pub results: Vec<Forwarded>,
}

/// Most commands in one forwarded batch.
pub const MAX_FORWARD_BATCH: usize = 256;

/// Forwarded batches in flight at once from one follower.
pub const FORWARD_CONCURRENCY: usize = 4;

/// Most record bytes a follower puts in one batch; a batch always takes its first command
/// whatever its size (at most a journal payload), so a body is at most
/// [`MAX_FORWARD_BODY`].
pub const FORWARD_BATCH_BYTES: usize = crate::journal::MAX_PAYLOAD_BYTES;

/// Largest forwarded body the leader reads, bytes: a full batch plus one more payload and the
/// framing.
pub const MAX_FORWARD_BODY: usize =
    FORWARD_BATCH_BYTES + crate::journal::MAX_PAYLOAD_BYTES + 4 * MAX_FORWARD_BATCH;

/// Frames records for a forwarded batch: each a 4-byte big-endian length, then the record.
pub fn frame(records: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(records.iter().map(|r| r.len() + 4).sum());
    for r in records {
        out.extend_from_slice(&(r.len() as u32).to_be_bytes());
        out.extend_from_slice(r);
    }
    out
}

/// The records of a framed batch ([`frame`]).
///
/// # Errors
/// A message when the framing is cut short, or the batch is empty or over
/// [`MAX_FORWARD_BATCH`].
pub fn unframe(mut body: &[u8]) -> Result<Vec<&[u8]>, String> {
    let mut out = Vec::new();
    while !body.is_empty() {
        let Some((len, rest)) = body.split_first_chunk::<4>() else {
            return Err("a record's length is cut short".into());
        };
        let len = u32::from_be_bytes(*len) as usize;
        if rest.len() < len {
            return Err(format!("a record of {len} bytes is cut short"));
        }
        let (record, rest) = rest.split_at(len);
        out.push(record);
        body = rest;
        if out.len() > MAX_FORWARD_BATCH {
            return Err(format!(
                "more than {MAX_FORWARD_BATCH} commands in one batch"
            ));
        }
    }
    if out.is_empty() {
        return Err("an empty batch".into());
    }
    Ok(out)
}

/// `POST /internal/forward` (body: [`frame`]d journal records, [`crate::sequencer::encode`];
/// `Authorization: Bearer <cluster key>`) → 200 [`ForwardedBatch`] once every command is
/// durable and applied or refused; 401 `unauthorized`; 400 `bad_request` for a body that is
/// not a framed batch. The commands are submitted together, in order, so they share a group
/// commit; a record that does not decode is refused alone (`bad_request`).
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
    let records = unframe(&body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("the forwarded batch does not read: {e}"),
        )
    })?;
    let submits = records.into_iter().map(|r| {
        let api = api.clone();
        let op = crate::sequencer::decode(r);
        async move {
            match op {
                Err(e) => Forwarded {
                    seq: None,
                    code: Some("bad_request".into()),
                    message: Some(format!("the forwarded command does not decode: {e}")),
                },
                Ok(op) => match api.seq.submit_forwarded(op).await {
                    Ok(c) => Forwarded {
                        seq: Some(c.seq),
                        code: None,
                        message: None,
                    },
                    Err(e) => Forwarded {
                        seq: None,
                        code: Some(ApiError::from(e.clone()).code.to_string()),
                        // Unprefixed: the answering process prefixes it once.
                        message: Some(e.detail()),
                    },
                },
            }
        }
    });
    let results = futures_util::future::join_all(submits).await;
    Ok(HttpResponse::Ok().json(ForwardedBatch { results }))
}

/// One command waiting to be forwarded, and where its answer goes.
type Pending = (Vec<u8>, oneshot::Sender<Result<u64, SequencerError>>);

/// A batch: `first`, then what is queued already, up to [`MAX_FORWARD_BATCH`] commands and
/// [`FORWARD_BATCH_BYTES`] of records. The command that would pass the byte bound is
/// answered second: it leads the next batch.
fn fill_batch(
    first: Pending,
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<Pending>,
) -> (Vec<Pending>, Option<Pending>) {
    let mut bytes = first.0.len() + 4;
    let mut batch = vec![first];
    while batch.len() < MAX_FORWARD_BATCH {
        match rx.try_recv() {
            Ok(p) if bytes + p.0.len() + 4 <= FORWARD_BATCH_BYTES => {
                bytes += p.0.len() + 4;
                batch.push(p);
            }
            Ok(p) => return (batch, Some(p)),
            Err(_) => break,
        }
    }
    (batch, None)
}

/// A follower's way to the leader (module docs): commands queue here and go out in batches
/// (up to [`MAX_FORWARD_BATCH`], [`FORWARD_CONCURRENCY`] batches in flight), so a busy API
/// process pays one HTTP round trip per batch, not per command.
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
            .pool_max_idle_per_host(FORWARD_CONCURRENCY * 2)
            .build()
            .map_err(|e| JournalError::Config(format!("HTTP client: {e}")))?;
        Ok(Forwarder {
            journal: tokio::sync::Mutex::new(journal),
            http,
            key,
            leader: std::sync::Mutex::new(None),
        })
    }

    /// The [`Forward`] a follower sequencer calls; starts the batching task (it ends when
    /// every clone of the answered function is dropped).
    pub fn into_forward(self) -> Forward {
        let me = Arc::new(self);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Pending>();
        tokio::spawn(async move {
            let slots = Arc::new(tokio::sync::Semaphore::new(FORWARD_CONCURRENCY));
            let mut carry: Option<Pending> = None;
            loop {
                let first = match carry.take() {
                    Some(p) => p,
                    None => match rx.recv().await {
                        Some(p) => p,
                        None => return,
                    },
                };
                // Waiting for a slot lets more commands queue: they join this batch.
                let Ok(permit) = slots.clone().acquire_owned().await else {
                    return;
                };
                let (batch, rest) = fill_batch(first, &mut rx);
                carry = rest;
                let me = me.clone();
                tokio::spawn(async move {
                    let (records, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
                    let results = me.send(&records).await;
                    for (reply, r) in replies.into_iter().zip(results) {
                        let _ = reply.send(r);
                    }
                    drop(permit);
                });
            }
        });
        Arc::new(move |bytes| {
            let tx = tx.clone();
            Box::pin(async move {
                let (reply, answer) = oneshot::channel();
                tx.send((bytes, reply))
                    .map_err(|_| SequencerError::Stopped)?;
                answer.await.map_err(|_| SequencerError::Stopped)?
            })
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

    /// The error of a forwarded command whose leader answered `code`.
    fn error_of(code: &str, message: String) -> SequencerError {
        match code {
            "not_leader" | "shutting_down" => SequencerError::NotLeader(message),
            "journal_refused" | "bad_request" | "unauthorized" => SequencerError::Refused(message),
            _ => SequencerError::Unavailable(message),
        }
    }

    /// Forwards one batch; answers each command's sequence number or error, in order. A
    /// refused connection or a batch-wide `not_leader` (nothing taken) is retried once after
    /// looking the leader up again; so is each command answered `not_leader` alone.
    async fn send(&self, records: &[Vec<u8>]) -> Vec<Result<u64, SequencerError>> {
        self.send_with(records, true).await
    }

    /// [`Forwarder::send`]; `retry_refused`: retry the commands a changed leader refused.
    async fn send_with(
        &self,
        records: &[Vec<u8>],
        retry_refused: bool,
    ) -> Vec<Result<u64, SequencerError>> {
        let all = |e: SequencerError| records.iter().map(|_| Err(e.clone())).collect::<Vec<_>>();
        let mut last = None;
        for attempt in 0..2 {
            let url = match self.leader_url(attempt > 0).await {
                Ok(u) => u,
                Err(e) => return all(e),
            };
            let sent = self
                .http
                .post(format!("{url}{FORWARD_PATH}"))
                .bearer_auth(&self.key)
                .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                .body(frame(records))
                .send()
                .await;
            let resp = match sent {
                // The leader's address and the transport's words go to the log, not to clients.
                Err(e) if e.is_connect() => {
                    tracing::warn!(leader = %url, error = %e, "forward: the leader refused the connection");
                    self.remember(None);
                    last = Some(SequencerError::NotLeader(
                        "the leader did not accept the forwarded command".into(),
                    ));
                    continue;
                }
                Err(e) => {
                    tracing::warn!(leader = %url, error = %e, "forward: no answer from the leader");
                    self.remember(None);
                    return all(SequencerError::Unavailable(
                        "the leader did not answer the forwarded command".into(),
                    ));
                }
                Ok(r) => r,
            };
            let status = resp.status();
            if !status.is_success() {
                let e = match resp.json::<gpux_wire::ErrorBody>().await {
                    Ok(b) => Self::error_of(&b.code, b.message),
                    Err(e) => SequencerError::Unavailable(format!(
                        "the leader at {url} answered {status} without an error body: {e}"
                    )),
                };
                if matches!(e, SequencerError::NotLeader(_)) {
                    self.remember(None);
                    last = Some(e);
                    continue;
                }
                return all(e);
            }
            let batch = match resp.json::<ForwardedBatch>().await {
                Ok(b) if b.results.len() == records.len() => b,
                Ok(b) => {
                    return all(SequencerError::Unavailable(format!(
                        "the leader at {url} answered {} results for {} commands",
                        b.results.len(),
                        records.len()
                    )));
                }
                Err(e) => {
                    return all(SequencerError::Unavailable(format!(
                        "the leader at {url} took the batch, but its answer did not read: {e}"
                    )));
                }
            };
            let mut out = Vec::with_capacity(records.len());
            let mut again = Vec::new();
            for (i, r) in batch.results.into_iter().enumerate() {
                match (r.seq, r.code) {
                    (Some(seq), _) => out.push(Ok(seq)),
                    (None, code) => {
                        let code = code.unwrap_or_default();
                        let e = Self::error_of(&code, r.message.unwrap_or_default());
                        if retry_refused && matches!(e, SequencerError::NotLeader(_)) {
                            again.push(i);
                        }
                        out.push(Err(e));
                    }
                }
            }
            if !again.is_empty() {
                // The leader changed under this batch: those commands were not taken.
                self.remember(None);
                let retry: Vec<Vec<u8>> = again.iter().map(|&i| records[i].clone()).collect();
                // Once more, to the leader looked up again (the cache is cleared), and no
                // further retry of refusals.
                let answers = Box::pin(self.send_with(&retry, false)).await;
                for (i, a) in again.into_iter().zip(answers) {
                    out[i] = a;
                }
            }
            return out;
        }
        all(last.unwrap_or_else(|| SequencerError::NotLeader("no leader answered".into())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(len: usize) -> Pending {
        (vec![7u8; len], oneshot::channel().0)
    }

    /// Big commands queued at once go out in batches under the leader's body limit (a batch of
    /// them once reached 413 there and was answered 503), none lost, in order.
    #[test]
    fn batches_stay_under_the_leaders_body_limit() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for _ in 0..40 {
            tx.send(pending(60_402)).unwrap();
        }
        let mut sizes = Vec::new();
        let mut carry = None;
        let mut taken = 0;
        while taken < 40 {
            let first = carry.take().unwrap_or_else(|| rx.try_recv().unwrap());
            let (batch, rest) = fill_batch(first, &mut rx);
            carry = rest;
            taken += batch.len();
            let records: Vec<Vec<u8>> = batch.into_iter().map(|p| p.0).collect();
            let body = frame(&records);
            assert!(body.len() <= MAX_FORWARD_BODY, "{} bytes", body.len());
            assert!(body.len() <= FORWARD_BATCH_BYTES, "{} bytes", body.len());
            assert_eq!(unframe(&body).unwrap().len(), records.len());
            sizes.push(records.len());
        }
        assert_eq!(taken, 40);
        // 1 MiB / (60,402 + 4) = 17 commands a batch.
        assert_eq!(sizes, vec![17, 17, 6]);
        // Small ones: the count bound.
        for _ in 0..300 {
            tx.send(pending(10)).unwrap();
        }
        let first = rx.try_recv().unwrap();
        let (batch, rest) = fill_batch(first, &mut rx);
        assert_eq!((batch.len(), rest.is_none()), (MAX_FORWARD_BATCH, true));
        // One command of a full journal payload still goes, alone, and the leader reads it.
        let first = pending(crate::journal::MAX_PAYLOAD_BYTES);
        let (batch, _) = fill_batch(first, &mut rx);
        let body = frame(&batch.into_iter().map(|p| p.0).collect::<Vec<_>>());
        assert!(body.len() <= MAX_FORWARD_BODY);
    }
}
