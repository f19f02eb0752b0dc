//! Several processes on one Redis journal (issue 18; docs/journal.md "Processes on one
//! journal", docs/deploy.md): process roles, forwarding commands from a follower to the
//! leader, and the leader's end of it.
//!
//! - [`Role`]: `all` (leads or stands by, and serves the API either way), `engine` (leads or
//!   stands by; serves only probes, metrics and the forwarding endpoint), `api` (never leads:
//!   follows the journal and serves the API from its replica).
//! - [`Forwarder`]: a follower's way to the leader. It finds the leader's URL in Redis (the
//!   lease and the URL the leader recorded with it), sends the encoded commands in batches
//!   (one message for every command queued meanwhile: [`frame`]) over a **link** to the
//!   leader, and answers each command's sequence number. The link is one websocket
//!   (`/internal/forward/link`, opened with the cluster key) that stays open and carries
//!   several batches at once, each tagged with an id its answer repeats ([`link_message`]): a
//!   forwarded bid costs a binary message on an open connection, not an HTTP request through
//!   the leader's front. A leader that does not offer the link (it answers the upgrade with an
//!   HTTP status) gets the same batch as `POST /internal/forward`. A connection refused or a
//!   `not_leader` answer means nothing was taken: it looks the leader up again and tries once
//!   more. Any other failure after sending (the link drops, no answer within
//!   [`FORWARD_TIMEOUT_MS`]) leaves the outcome unknown (503; the client retries with its
//!   idempotency key or client order id).
//! - [`routes`]: `POST /internal/forward` and the link on every process with a cluster key;
//!   only a leader sequences (a follower answers 503 `not_leader`, and never forwards a
//!   forwarded command).

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

/// Path of the forwarding link (a websocket; [`link_message`]).
pub const FORWARD_LINK_PATH: &str = "/internal/forward/link";

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

    /// 401 `unauthorized` unless `req` carries the cluster key; `what` names the endpoint.
    fn require(&self, req: &HttpRequest, what: &str) -> ApiResult<()> {
        if self.admits(req) {
            return Ok(());
        }
        Err(ApiError::unauthorized(format!(
            "{what} needs the cluster key (Authorization: Bearer <cluster_key>)"
        )))
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
        crate::server::resource(FORWARD_LINK_PATH)
            .app_data(web::Data::new(key.clone()))
            .route(web::get().to(link)),
    )
    .service(
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
    /// Over the link only: why the whole batch was refused (its framing did not read);
    /// `results` is then empty. Over HTTP that is a 400 instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Size of a link message's batch id, bytes.
const LINK_ID_BYTES: usize = 8;

/// Largest message the leader reads on a link, bytes: a batch id and the largest forwarded
/// body.
pub const MAX_LINK_MESSAGE: usize = LINK_ID_BYTES + MAX_FORWARD_BODY;

/// A link message: the batch id (8 bytes, big-endian), then `body` (to the leader: a
/// [`frame`]d batch; from the leader: its [`ForwardedBatch`] as JSON). Ids are the sender's
/// own; the leader answers each batch once, in any order.
pub fn link_message(id: u64, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(LINK_ID_BYTES + body.len());
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// The batch id and body of a link message ([`link_message`]); `None` when it is shorter
/// than an id.
pub fn read_link_message(msg: &[u8]) -> Option<(u64, &[u8])> {
    let (id, body) = msg.split_first_chunk::<LINK_ID_BYTES>()?;
    Some((u64::from_be_bytes(*id), body))
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
    framed_after(Vec::new(), records)
}

/// `head`, then the [`frame`] of `records` (one allocation for a link message's id and its
/// batch).
fn framed_after(mut head: Vec<u8>, records: &[Vec<u8>]) -> Vec<u8> {
    head.reserve(records.iter().map(|r| r.len() + 4).sum());
    for r in records {
        head.extend_from_slice(&(r.len() as u32).to_be_bytes());
        head.extend_from_slice(r);
    }
    head
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
    key.require(&req, "forwarding")?;
    let batch = answer_batch(&api, &body).await;
    if let Some(e) = batch.error {
        return Err(ApiError::new(StatusCode::BAD_REQUEST, "bad_request", e));
    }
    Ok(HttpResponse::Ok().json(batch))
}

/// The leader's answer to a [`frame`]d batch, over HTTP or the link: its results
/// ([`sequence_batch`]), or `error` when the framing does not read.
async fn answer_batch(api: &Api, body: &[u8]) -> ForwardedBatch {
    match unframe(body) {
        Ok(records) => ForwardedBatch {
            results: sequence_batch(api, records).await,
            error: None,
        },
        Err(e) => ForwardedBatch {
            results: Vec::new(),
            error: Some(format!("the forwarded batch does not read: {e}")),
        },
    }
}

/// Submits a forwarded batch's records together, in order (they share a group commit and
/// keep their order in the journal), and answers one result per record; a record that does
/// not decode, or is over a journal payload ([`crate::journal::MAX_PAYLOAD_BYTES`], which
/// would fail the whole group commit), is refused alone (`bad_request`).
async fn sequence_batch(api: &Api, records: Vec<&[u8]>) -> Vec<Forwarded> {
    let refused = |message: String| Forwarded {
        seq: None,
        code: Some("bad_request".into()),
        message: Some(message),
    };
    let mut out: Vec<Option<Forwarded>> = Vec::with_capacity(records.len());
    let mut ops = Vec::with_capacity(records.len());
    for r in records {
        if r.len() > crate::journal::MAX_PAYLOAD_BYTES {
            out.push(Some(refused(format!(
                "the forwarded command is {} bytes, over a journal payload ({} bytes)",
                r.len(),
                crate::journal::MAX_PAYLOAD_BYTES
            ))));
            continue;
        }
        match crate::sequencer::decode(r) {
            Ok(op) => {
                out.push(None);
                ops.push(op);
            }
            Err(e) => out.push(Some(refused(format!(
                "the forwarded command does not decode: {e}"
            )))),
        }
    }
    let mut answers = api.seq.submit_forwarded_all(ops).await.into_iter();
    out.into_iter()
        .map(|slot| {
            slot.unwrap_or_else(|| match answers.next() {
                Some(Ok(c)) => Forwarded {
                    seq: Some(c.seq),
                    code: None,
                    message: None,
                },
                Some(Err(e)) => Forwarded {
                    seq: None,
                    code: Some(ApiError::from(e.clone()).code.to_string()),
                    // Unprefixed: the answering process prefixes it once.
                    message: Some(e.detail()),
                },
                None => Forwarded {
                    seq: None,
                    code: Some("shutting_down".into()),
                    message: Some("the sequencer stopped".into()),
                },
            })
        })
        .collect()
}

/// `GET /internal/forward/link` (websocket upgrade; `Authorization: Bearer <cluster key>`):
/// the leader's end of a forwarding link. Each binary message is a batch
/// ([`link_message`] of a [`frame`]d body); each is sequenced as `POST /internal/forward`
/// would, and answered with the same id and its [`ForwardedBatch`] as JSON, as soon as it is
/// done (batches in flight at once are answered in any order). 401 `unauthorized` without the
/// key; 400 `not_websocket` for a request that is not an upgrade.
async fn link(
    req: HttpRequest,
    body: web::Payload,
    api: web::Data<Api>,
    key: web::Data<ClusterKey>,
) -> ApiResult<HttpResponse> {
    key.require(&req, "the forwarding link")?;
    // A frame declaring more than a link message is refused at its header, before any of it
    // is buffered.
    let body = crate::api::ws::guarded_payload(&req, body, MAX_LINK_MESSAGE)?;
    let (resp, session, stream) = actix_ws::handle(&req, body)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "not_websocket", e.to_string()))?;
    let stream = stream
        .max_frame_size(MAX_LINK_MESSAGE)
        .aggregate_continuations()
        .max_continuation_size(MAX_LINK_MESSAGE);
    actix_web::rt::spawn(serve_link(api.get_ref().clone(), session, stream));
    Ok(resp)
}

/// A link's session on the leader ([`link`]); ends when the follower closes it, on a
/// protocol error, or when the server starts stopping (batches already taken are still
/// answered if the link lives that long; the follower reads a lost answer as outcome
/// unknown).
async fn serve_link(
    api: Api,
    mut session: actix_ws::Session,
    mut stream: actix_ws::AggregatedMessageStream,
) {
    use actix_ws::AggregatedMessage;
    use futures_util::StreamExt;
    let mut shutdown = api.shutdown.subscribe();
    loop {
        let msg = tokio::select! {
            m = stream.next() => m,
            _ = shutdown.wait_for(|stopping| *stopping) => break,
        };
        match msg {
            Some(Ok(AggregatedMessage::Binary(bytes))) => {
                let (api, mut session) = (api.clone(), session.clone());
                actix_web::rt::spawn(async move {
                    // A message shorter than an id has nobody to answer.
                    let Some((id, body)) = read_link_message(&bytes) else {
                        return;
                    };
                    let batch = answer_batch(&api, body).await;
                    let answer = link_message(id, &serde_json::to_vec(&batch).unwrap_or_default());
                    let _ = session.binary(answer).await;
                });
            }
            Some(Ok(AggregatedMessage::Ping(p))) => {
                if session.pong(&p).await.is_err() {
                    break;
                }
            }
            Some(Ok(AggregatedMessage::Close(_))) | Some(Err(_)) | None => break,
            Some(Ok(_)) => {}
        }
    }
    let _ = session.close(None).await;
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
/// process pays one link message per batch, not an HTTP request per command.
pub struct Forwarder {
    journal: tokio::sync::Mutex<RedisJournal>,
    http: reqwest::Client,
    key: String,
    leader: std::sync::Mutex<Option<String>>,
    /// The open link, to the leader at its URL.
    link: tokio::sync::Mutex<Option<Arc<Link>>>,
}

/// Why a batch got no results from the leader.
enum Failed {
    /// Nothing was taken (the connection was refused, or a leader changed): look the leader
    /// up again and retry.
    NotTaken(SequencerError),
    /// The batch may have been taken: outcome unknown.
    Unknown(SequencerError),
    /// The leader answered with an error for the whole batch.
    Answered(SequencerError),
}

type LinkSink = futures_util::stream::SplitSink<
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
    tokio_tungstenite::tungstenite::Message,
>;

/// Batches sent on a link and waiting for their answers, by id.
type LinkWaiting = std::sync::Mutex<
    std::collections::HashMap<u64, oneshot::Sender<tokio_tungstenite::tungstenite::Bytes>>,
>;

/// How often a follower pings the leader over an idle or busy link, ms.
pub const LINK_PING_MS: u64 = 1_000;

/// A link that has heard nothing from the leader (no answer, no pong) for this long is
/// dropped, ms: every batch still waiting on it is answered outcome unknown, and the next
/// batch looks the leader up again. A leader paused past its lease has lost it by then
/// (default lease 2,000 ms), so commands move to the new leader within about this long,
/// instead of waiting for [`FORWARD_TIMEOUT_MS`] behind batches sent to the paused one.
pub const LINK_DEAD_MS: u64 = 5_000;

/// An open forwarding link to one leader (module docs). A reader task hands each answer to
/// its batch; a pinger keeps it honest ([`LINK_DEAD_MS`]). When the link drops, every batch
/// still waiting is told (outcome unknown) and the next batch opens a new link.
struct Link {
    url: String,
    sink: Arc<tokio::sync::Mutex<LinkSink>>,
    waiting: Arc<LinkWaiting>,
    alive: Arc<std::sync::atomic::AtomicBool>,
    next_id: std::sync::atomic::AtomicU64,
    reader: tokio::task::AbortHandle,
}

impl Drop for Link {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Marks a link dead, then answers every batch waiting on it (dropped: outcome unknown). In
/// that order, so a batch that registers after the mark sees it.
fn kill_link(alive: &std::sync::atomic::AtomicBool, waiting: &LinkWaiting) {
    alive.store(false, std::sync::atomic::Ordering::SeqCst);
    if let Ok(mut g) = waiting.lock() {
        g.clear();
    }
}

/// Opening a link failed.
enum LinkOpen {
    /// No connection (refused, unreachable, timed out): nothing can have been sent.
    NoConnection(String),
    /// The leader answered the upgrade with this HTTP status (an older leader without the
    /// link, or a refusal): use HTTP.
    Status(u16),
}

impl Link {
    /// Opens a link to the leader at `url` (`http://` or `https://` base) with the cluster key.
    async fn open(url: &str, key: &str) -> Result<Link, LinkOpen> {
        use futures_util::StreamExt;
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest};
        let ws = format!(
            "{}{FORWARD_LINK_PATH}",
            url.replacen("http://", "ws://", 1)
                .replacen("https://", "wss://", 1)
        );
        let mut req = ws
            .into_client_request()
            .map_err(|e| LinkOpen::NoConnection(e.to_string()))?;
        let bearer = tungstenite::http::HeaderValue::from_str(&format!("Bearer {key}"))
            .map_err(|e| LinkOpen::NoConnection(e.to_string()))?;
        req.headers_mut()
            .insert(tungstenite::http::header::AUTHORIZATION, bearer);
        let config = tungstenite::protocol::WebSocketConfig::default()
            .max_message_size(Some(MAX_LINK_MESSAGE))
            .max_frame_size(Some(MAX_LINK_MESSAGE));
        let connect = tokio_tungstenite::connect_async_with_config(req, Some(config), true);
        let (stream, _) =
            match tokio::time::timeout(Duration::from_millis(FORWARD_CONNECT_TIMEOUT_MS), connect)
                .await
            {
                Err(_) => return Err(LinkOpen::NoConnection("connecting timed out".into())),
                Ok(Err(tungstenite::Error::Http(resp))) => {
                    return Err(LinkOpen::Status(resp.status().as_u16()));
                }
                Ok(Err(e)) => return Err(LinkOpen::NoConnection(e.to_string())),
                Ok(Ok(s)) => s,
            };
        let (sink, mut answers) = stream.split();
        let sink = Arc::new(tokio::sync::Mutex::new(sink));
        let waiting: Arc<LinkWaiting> = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));
        // Milliseconds from `opened` to the last message heard from the leader.
        let opened = std::time::Instant::now();
        let heard = Arc::new(AtomicU64::new(0));
        let (w, a, h) = (waiting.clone(), alive.clone(), heard.clone());
        let reader = tokio::spawn(async move {
            while let Some(Ok(msg)) = answers.next().await {
                h.store(opened.elapsed().as_millis() as u64, Ordering::Relaxed);
                if let tungstenite::Message::Binary(bytes) = msg
                    && let Some((id, _)) = read_link_message(&bytes)
                    && let Some(reply) = w.lock().ok().and_then(|mut g| g.remove(&id))
                {
                    let _ = reply.send(bytes.slice(LINK_ID_BYTES..));
                }
            }
            kill_link(&a, &w);
        })
        .abort_handle();
        let (weak_sink, w, a, r, leader) = (
            Arc::downgrade(&sink),
            waiting.clone(),
            alive.clone(),
            reader.clone(),
            url.to_string(),
        );
        tokio::spawn(async move {
            use futures_util::SinkExt;
            let every = Duration::from_millis(LINK_PING_MS);
            loop {
                tokio::time::sleep(every).await;
                // The link was dropped, or has died: nothing to keep.
                let Some(sink) = weak_sink.upgrade() else {
                    return;
                };
                if !a.load(Ordering::SeqCst) {
                    return;
                }
                let silent = (opened.elapsed().as_millis() as u64)
                    .saturating_sub(heard.load(Ordering::Relaxed));
                if silent > LINK_DEAD_MS {
                    tracing::warn!(leader = %leader, silent_ms = silent, "forward: the leader has not answered on the link; dropping it");
                    kill_link(&a, &w);
                    r.abort();
                    return;
                }
                // A ping behind a send in progress is not needed: the send is traffic.
                if let Ok(mut s) = sink.try_lock() {
                    let ping = tungstenite::Message::Ping(Vec::new().into());
                    let _ = tokio::time::timeout(every, s.send(ping)).await;
                }
            }
        });
        Ok(Link {
            url: url.to_string(),
            sink,
            waiting,
            alive,
            next_id: AtomicU64::new(1),
            reader,
        })
    }

    fn is_alive(&self) -> bool {
        self.alive.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Sends one batch and waits for its answer (the JSON of a [`ForwardedBatch`]).
    async fn exchange(
        &self,
        records: &[Vec<u8>],
    ) -> Result<tokio_tungstenite::tungstenite::Bytes, Failed> {
        use futures_util::SinkExt;
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (reply, answer) = oneshot::channel();
        if let Ok(mut g) = self.waiting.lock() {
            g.insert(id, reply);
        }
        let forget = || {
            if let Ok(mut g) = self.waiting.lock() {
                g.remove(&id);
            }
        };
        if !self.is_alive() {
            forget();
            return Err(Failed::NotTaken(SequencerError::NotLeader(
                "the link to the leader had closed; nothing was sent".into(),
            )));
        }
        let msg = framed_after(id.to_be_bytes().to_vec(), records);
        let msg = tokio_tungstenite::tungstenite::Message::Binary(msg.into());
        let send = async { self.sink.lock().await.send(msg).await };
        let sent = tokio::time::timeout(Duration::from_millis(LINK_DEAD_MS), send).await;
        if !matches!(sent, Ok(Ok(()))) {
            forget();
            // A send that cannot finish (a leader that stopped reading) ends the link.
            kill_link(&self.alive, &self.waiting);
            let why = match sent {
                Ok(Err(e)) => e.to_string(),
                _ => "timed out".into(),
            };
            tracing::warn!(leader = %self.url, error = %why, "forward: sending on the link failed");
            return Err(Failed::Unknown(SequencerError::Unavailable(
                "the link to the leader failed while sending the forwarded command".into(),
            )));
        }
        match tokio::time::timeout(Duration::from_millis(FORWARD_TIMEOUT_MS), answer).await {
            Ok(Ok(bytes)) => Ok(bytes),
            Ok(Err(_)) => {
                tracing::warn!(leader = %self.url, "forward: the link closed before the answer");
                Err(Failed::Unknown(SequencerError::Unavailable(
                    "the leader did not answer the forwarded command".into(),
                )))
            }
            Err(_) => {
                forget();
                tracing::warn!(leader = %self.url, "forward: no answer on the link in time");
                Err(Failed::Unknown(SequencerError::Unavailable(
                    "the leader did not answer the forwarded command".into(),
                )))
            }
        }
    }
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
            link: tokio::sync::Mutex::new(None),
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

    /// One batch to the leader at `url`, over the link (opened when there is none to `url`),
    /// or over HTTP when the leader does not offer the link; its answer, checked to hold one
    /// result per record.
    async fn exchange(&self, url: &str, records: &[Vec<u8>]) -> Result<ForwardedBatch, Failed> {
        let link = {
            let mut g = self.link.lock().await;
            match g.as_ref() {
                Some(l) if l.url == url && l.is_alive() => Some(l.clone()),
                _ => match Link::open(url, &self.key).await {
                    Ok(l) => {
                        let l = Arc::new(l);
                        *g = Some(l.clone());
                        Some(l)
                    }
                    Err(LinkOpen::Status(status)) => {
                        tracing::debug!(leader = %url, status, "forward: no link offered; HTTP");
                        *g = None;
                        None
                    }
                    Err(LinkOpen::NoConnection(e)) => {
                        // The leader's address and the transport's words go to the log.
                        tracing::warn!(leader = %url, error = %e, "forward: the leader refused the connection");
                        *g = None;
                        return Err(Failed::NotTaken(SequencerError::NotLeader(
                            "the leader did not accept the forwarded command".into(),
                        )));
                    }
                },
            }
        };
        let batch = match link {
            Some(link) => {
                let bytes = link.exchange(records).await?;
                serde_json::from_slice::<ForwardedBatch>(&bytes).map_err(|e| {
                    tracing::warn!(leader = %url, error = %e, "forward: the answer did not read");
                    Failed::Unknown(SequencerError::Unavailable(
                        "the leader took the forwarded command, but its answer did not read".into(),
                    ))
                })?
            }
            None => self.exchange_http(url, frame(records)).await?,
        };
        if let Some(e) = batch.error {
            return Err(Failed::Answered(SequencerError::Refused(e)));
        }
        if batch.results.len() != records.len() {
            tracing::warn!(leader = %url, results = batch.results.len(), commands = records.len(),
                "forward: the answer does not match the batch");
            return Err(Failed::Unknown(SequencerError::Unavailable(format!(
                "the leader answered {} results for {} forwarded commands",
                batch.results.len(),
                records.len()
            ))));
        }
        Ok(batch)
    }

    /// One framed batch as `POST /internal/forward`.
    async fn exchange_http(&self, url: &str, body: Vec<u8>) -> Result<ForwardedBatch, Failed> {
        let sent = self
            .http
            .post(format!("{url}{FORWARD_PATH}"))
            .bearer_auth(&self.key)
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .body(body)
            .send()
            .await;
        let resp = match sent {
            // The leader's address and the transport's words go to the log, not to clients.
            Err(e) if e.is_connect() => {
                tracing::warn!(leader = %url, error = %e, "forward: the leader refused the connection");
                return Err(Failed::NotTaken(SequencerError::NotLeader(
                    "the leader did not accept the forwarded command".into(),
                )));
            }
            Err(e) => {
                tracing::warn!(leader = %url, error = %e, "forward: no answer from the leader");
                return Err(Failed::Unknown(SequencerError::Unavailable(
                    "the leader did not answer the forwarded command".into(),
                )));
            }
            Ok(r) => r,
        };
        let status = resp.status();
        if !status.is_success() {
            return Err(Failed::Answered(
                match resp.json::<gpux_wire::ErrorBody>().await {
                    Ok(b) => Self::error_of(&b.code, b.message),
                    Err(e) => {
                        tracing::warn!(leader = %url, %status, error = %e, "forward: an error without a body");
                        SequencerError::Unavailable(format!(
                            "the leader answered {status} without an error body"
                        ))
                    }
                },
            ));
        }
        resp.json::<ForwardedBatch>().await.map_err(|e| {
            tracing::warn!(leader = %url, error = %e, "forward: the answer did not read");
            Failed::Unknown(SequencerError::Unavailable(
                "the leader took the forwarded command, but its answer did not read".into(),
            ))
        })
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
            let batch = match self.exchange(&url, records).await {
                Ok(b) => b,
                Err(Failed::NotTaken(e)) => {
                    self.remember(None);
                    last = Some(e);
                    continue;
                }
                Err(Failed::Unknown(e)) => {
                    self.remember(None);
                    return all(e);
                }
                Err(Failed::Answered(e)) => {
                    if matches!(e, SequencerError::NotLeader(_)) {
                        self.remember(None);
                        last = Some(e);
                        continue;
                    }
                    return all(e);
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

    /// A leader that takes the link and then stops answering (paused, partitioned) has its
    /// link dropped after [`LINK_DEAD_MS`] of silence: the batch waiting on it is answered
    /// outcome unknown then, not after [`FORWARD_TIMEOUT_MS`], and the link says it is dead
    /// so the next batch opens another.
    #[tokio::test]
    async fn a_silent_leader_loses_its_link_within_the_dead_bound() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
            // Holds the link open and never reads it: no answer, no pong.
            tokio::time::sleep(Duration::from_secs(60)).await;
            drop(ws);
        });
        let link = match Link::open(&url, "a-cluster-key-for-the-test").await {
            Ok(l) => l,
            Err(_) => panic!("the link did not open"),
        };
        assert!(link.is_alive());
        let started = std::time::Instant::now();
        let answer = link.exchange(&[b"x".to_vec()]).await;
        let took = started.elapsed();
        assert!(
            matches!(answer, Err(Failed::Unknown(SequencerError::Unavailable(_)))),
            "a silent leader's batch is outcome unknown"
        );
        assert!(
            took >= Duration::from_millis(LINK_DEAD_MS)
                && took < Duration::from_millis(LINK_DEAD_MS + 3 * LINK_PING_MS),
            "answered after {took:?}"
        );
        assert!(!link.is_alive());
        // The next batch on it is refused at once, nothing sent.
        assert!(matches!(
            link.exchange(&[]).await,
            Err(Failed::NotTaken(SequencerError::NotLeader(_)))
        ));
        server.abort();
    }

    /// A link message carries its batch id ahead of the body, both ways; one shorter than an
    /// id does not read.
    #[test]
    fn a_link_message_reads_back_its_id_and_body() {
        let body = frame(&[b"one".to_vec(), b"two".to_vec()]);
        let msg = link_message(u64::MAX - 3, &body);
        assert_eq!(msg.len(), 8 + body.len());
        let (id, back) = read_link_message(&msg).unwrap();
        assert_eq!((id, back), (u64::MAX - 3, &body[..]));
        assert_eq!(unframe(back).unwrap(), vec![&b"one"[..], &b"two"[..]]);
        assert_eq!(read_link_message(&msg[..7]), None);
        assert_eq!(
            read_link_message(&link_message(5, b"")),
            Some((5, &b""[..]))
        );
    }

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
