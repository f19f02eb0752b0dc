//! The websocket at `/v1/ws`: buyers place and cancel bids, release leases, read their
//! balance, and anyone subscribes to the live inventory. See `docs/api.md` for the protocol.
//!
//! The upgrade is refused before the 101 for an unknown key (401), a browser Origin outside
//! the allow-list (403) or a rate-limited key (429). A connection without any key is
//! anonymous: inventory only. Frames are at most [`MAX_WS_FRAME_BYTES`]; at most
//! [`MAX_WS_INFLIGHT`] commands run at once per connection (reading waits beyond that).
//!
//! A node key (issue 16) connects once its node is registered (else 409
//! `node_not_registered`): it receives that node's delivery events only (the feed filters by
//! node) and may report on that node's leases; trading, balances and resuming are refused 403.
//!
//! Every server message is a typed [`ServerMsg`] (the wire crate's), encoded once by
//! [`crate::feed::encode`]; replies echo the client message's `request_id` (`null` when it
//! had none), pushes (the balance) carry none.

use crate::accounts::Role;
use crate::api::auth::{self, Principal};
use crate::api::error::{ApiError, ApiResult};
use crate::api::{Api, MAX_WS_FRAME_BYTES, MAX_WS_INFLIGHT, buyer};
use crate::feed::{OUTBOX, OutMsg, Outbox, Topic, encode};
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use actix_ws::{AggregatedMessage, CloseCode, CloseReason};
use futures_util::StreamExt;
use gpux_wire::BidStatusDto;
use gpux_wire::ws::{ServerMsg, WsLimits};
use serde::Deserialize;
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::rc::Rc;
use std::sync::Arc;
use tokio::sync::{Semaphore, mpsc, watch};

/// The websocket subprotocol name.
pub const SUBPROTOCOL: &str = "gpux.v1";
/// Longest request id echoed back, bytes.
pub const MAX_REQUEST_ID: usize = 64;
/// Period of the balance push to buyer connections (only when it changed), ms.
pub const BALANCE_PUSH_MS: u64 = 5_000;
/// A connection whose socket accepts nothing for this long is closed (slow consumer), ms.
pub const SEND_TIMEOUT_MS: u64 = 10_000;
/// While the server stops, how long a connection's close frame may wait for a socket that
/// accepts nothing, ms (the connection is dropped after that; its cancels have already run).
pub const SHUTDOWN_CLOSE_MS: u64 = 500;

/// The close sent to every connection when the server stops: 1001 `server_shutdown`.
fn shutdown_close() -> CloseReason {
    CloseReason {
        code: CloseCode::Away,
        description: Some("server_shutdown".into()),
    }
}

/// A send to the client, bounded by [`SEND_TIMEOUT_MS`] and given up when the server starts
/// stopping: `None` when the stop came first, else the send's result (`Err(Elapsed)` for a
/// client whose socket accepted nothing in time).
async fn send_unless_stopping<T>(
    send: impl std::future::Future<Output = T>,
    stopping: &mut watch::Receiver<bool>,
) -> Option<Result<T, tokio::time::error::Elapsed>> {
    tokio::select! {
        sent = tokio::time::timeout(std::time::Duration::from_millis(SEND_TIMEOUT_MS), send) => {
            Some(sent)
        }
        _ = stopping.wait_for(|stopping| *stopping) => None,
    }
}

pub use gpux_wire::ws::ClientMsg;

/// Query of the upgrade.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WsQuery {
    /// Cancel this connection's resting GTC bids when it closes.
    #[serde(default)]
    pub cancel_on_disconnect: bool,
}

/// True when a browser `Origin` may open the websocket: listed, `*` listed, or the same
/// host as the request (a page this gateway serves).
pub fn origin_allowed(req: &HttpRequest, allowed: &[String]) -> bool {
    let Some(origin) = req.headers().get(actix_web::http::header::ORIGIN) else {
        return true; // not a browser
    };
    let Ok(origin) = origin.to_str() else {
        return false;
    };
    if allowed
        .iter()
        .any(|a| a == "*" || a.eq_ignore_ascii_case(origin))
    {
        return true;
    }
    let host = req
        .headers()
        .get(actix_web::http::header::HOST)
        .and_then(|h| h.to_str().ok());
    let origin_host = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    matches!((host, origin_host), (Some(h), Some(o)) if h.eq_ignore_ascii_case(o))
}

/// `GET /v1/ws`: authenticates, checks the Origin, then upgrades.
///
/// # Errors
/// 401, 403 `origin_not_allowed`, 429, 400 for a request that is not a websocket upgrade.
pub async fn upgrade(
    api: web::Data<Api>,
    req: HttpRequest,
    body: web::Payload,
    q: web::Query<WsQuery>,
) -> ApiResult<HttpResponse> {
    let principal = match auth::bearer(&req, true)? {
        Some(_) => Some(auth::authenticate_waiting(&api, &req, true).await?),
        None => {
            // Anonymous (inventory only): rate limited per peer address.
            auth::check_rate(&api, &anonymous_key(&req))?;
            None
        }
    };
    if !origin_allowed(&req, &api.config.allowed_origins) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "origin_not_allowed",
            "this Origin may not open the websocket (see allowed_origins)",
        ));
    }
    let node = match &principal {
        Some(p) => scoped_node(&api, p).await?,
        None => None,
    };
    // Oversized frames are refused at their header (see FrameGuard).
    let body = guarded_payload(&req, body, MAX_WS_FRAME_BYTES)?;
    let (resp, session, stream) = actix_ws::handle_with_protocols(&req, body, &[SUBPROTOCOL])
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "not_websocket", e.to_string()))?;
    let stream = stream
        .max_frame_size(MAX_WS_FRAME_BYTES)
        .aggregate_continuations()
        .max_continuation_size(MAX_WS_FRAME_BYTES);
    let api = api.get_ref().clone();
    let cancel_on_disconnect = q.cancel_on_disconnect;
    let rate_key = principal
        .as_ref()
        .map_or_else(|| anonymous_key(&req), |p| p.key_id.clone());
    let key_hash = auth::bearer(&req, true)?.map(|k| crate::accounts::hash_key(&k));
    actix_web::rt::spawn(async move {
        run(
            api,
            Caller {
                principal,
                node,
                key_hash,
                rate_key,
            },
            session,
            stream,
            cancel_on_disconnect,
        )
        .await;
    });
    metrics::counter!("gpux_ws_connections_total").increment(1);
    Ok(resp)
}

/// The node a node key's connection follows (`None` for every other connection).
///
/// # Errors
/// 409 `node_not_registered` while the key's node is not registered yet; 503.
async fn scoped_node(api: &Api, p: &Principal) -> ApiResult<Option<exchange::NodeId>> {
    let Some(scope) = &p.node else {
        return Ok(None);
    };
    match p.scoped_node_id(api).await? {
        Some(id) => Ok(Some(exchange::NodeId(id))),
        None => Err(ApiError::new(
            StatusCode::CONFLICT,
            "node_not_registered",
            format!(
                "this key is scoped to node {}, which is not registered yet: register it \
                 (POST /v1/nodes) before opening the websocket",
                scope.name
            ),
        )),
    }
}

/// Who a connection is, fixed at the upgrade.
struct Caller {
    principal: Option<Principal>,
    /// A node key's node: only its delivery events reach the connection.
    node: Option<exchange::NodeId>,
    /// SHA-256 of the connection's key.
    key_hash: Option<[u8; 32]>,
    /// Rate-limit key: the API key's id, or the peer address when anonymous.
    rate_key: String,
}

/// The rate-limit key of an anonymous connection: its peer address.
fn anonymous_key(req: &HttpRequest) -> String {
    format!(
        "anon:{}",
        req.peer_addr()
            .map_or_else(|| "unknown".into(), |a| a.ip().to_string())
    )
}

/// A websocket upgrade's body with its frames guarded ([`FrameGuard`]): the stream fails as
/// soon as a frame header declares more than `limit` bytes.
///
/// # Errors
/// 400 `bad_body` when the payload cannot be taken.
pub(crate) fn guarded_payload(
    req: &HttpRequest,
    body: web::Payload,
    limit: usize,
) -> ApiResult<web::Payload> {
    use actix_web::FromRequest;
    let stream: std::pin::Pin<
        Box<dyn futures_util::Stream<Item = Result<web::Bytes, actix_web::error::PayloadError>>>,
    > = Box::pin(FrameGuard::new(body.into_inner(), limit));
    let mut payload = actix_web::dev::Payload::from(stream);
    web::Payload::from_request(req, &mut payload)
        .into_inner()
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_body", e.to_string()))
}

/// Guards the raw websocket byte stream: reads each frame header as it arrives and fails the
/// stream as soon as a frame declares more than its limit ([`MAX_WS_FRAME_BYTES`] on
/// `/v1/ws`). (actix-ws buffers a whole frame before checking its size, so without this a
/// client could make the server hold gigabytes by streaming one huge frame.) Payload bytes
/// pass through untouched.
struct FrameGuard<S> {
    inner: S,
    /// Largest frame payload let through, bytes.
    limit: u64,
    /// Bytes of the header being read.
    header: Vec<u8>,
    /// Payload bytes of the current frame still to pass.
    skip: u64,
    failed: bool,
}

impl<S> FrameGuard<S> {
    fn new(inner: S, limit: usize) -> Self {
        FrameGuard {
            inner,
            limit: limit as u64,
            header: Vec::with_capacity(14),
            skip: 0,
            failed: false,
        }
    }

    /// Follows frame boundaries through `bytes`; `false` when a frame is too large.
    fn follow(&mut self, bytes: &[u8]) -> bool {
        let mut i = 0;
        while i < bytes.len() {
            if self.skip > 0 {
                let n = self.skip.min((bytes.len() - i) as u64);
                self.skip -= n;
                i += n as usize;
                continue;
            }
            self.header.push(bytes[i]);
            i += 1;
            if self.header.len() < 2 {
                continue;
            }
            let len7 = self.header[1] & 0x7f;
            let ext = match len7 {
                126 => 2,
                127 => 8,
                _ => 0,
            };
            let mask = if self.header[1] & 0x80 != 0 { 4 } else { 0 };
            if self.header.len() < 2 + ext + mask {
                continue;
            }
            let length = match len7 {
                126 => u64::from(u16::from_be_bytes([self.header[2], self.header[3]])),
                127 => {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&self.header[2..10]);
                    u64::from_be_bytes(b)
                }
                n => u64::from(n),
            };
            if length > self.limit {
                return false;
            }
            self.skip = length;
            self.header.clear();
        }
        true
    }
}

impl<S> futures_util::Stream for FrameGuard<S>
where
    S: futures_util::Stream<Item = Result<web::Bytes, actix_web::error::PayloadError>> + Unpin,
{
    type Item = S::Item;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<S::Item>> {
        if self.failed {
            return std::task::Poll::Ready(None);
        }
        match std::pin::Pin::new(&mut self.inner).poll_next(cx) {
            std::task::Poll::Ready(Some(Ok(bytes))) => {
                if self.as_mut().get_mut().follow(&bytes) {
                    std::task::Poll::Ready(Some(Ok(bytes)))
                } else {
                    self.failed = true;
                    metrics::counter!("gpux_ws_oversized_frames_total").increment(1);
                    std::task::Poll::Ready(Some(Err(actix_web::error::PayloadError::Overflow)))
                }
            }
            other => other,
        }
    }
}

/// `rejected`: the error envelope of the HTTP layer, with the client message's `request_id`
/// (`null` when it had none) instead of the HTTP request's.
fn error_msg(request_id: Option<&str>, e: &ApiError) -> OutMsg {
    encode(&ServerMsg::Rejected {
        request_id: request_id.map(String::from),
        code: e.code.to_string(),
        message: e.message.clone(),
        field: e.field_path.clone().or_else(|| e.field.map(String::from)),
        retry_after_s: e.retry_after_s,
    })
}

/// The rejection of a message that does not decode, echoing its `request_id` when it has one
/// (a string of the allowed shape) and naming the bad field of a `place_bid`'s `bid` by its
/// path (issue 25: such a rejection carried no request id, so a client with several bids in
/// flight could not tell which one failed, and no field).
fn undecodable(t: &str, e: &serde_json::Error) -> OutMsg {
    let v: Option<serde_json::Value> = serde_json::from_str(t).ok();
    let rid = v
        .as_ref()
        .and_then(|v| v.get("request_id"))
        .and_then(serde_json::Value::as_str)
        .filter(|r| request_id_ok(&Some((*r).to_string())).is_ok());
    let bid_error = v
        .as_ref()
        .filter(|v| v.get("type").and_then(serde_json::Value::as_str) == Some("place_bid"))
        .and_then(|v| v.get("bid"))
        .and_then(|b| serde_json::to_vec(b).ok())
        .and_then(|b| crate::api::parse_json::<gpux_wire::BidRequest>(&b).err());
    let err = match bid_error {
        Some(b) => ApiError {
            field_path: Some(format!(
                "bid.{}",
                b.field_path
                    .clone()
                    .or_else(|| b.field.map(String::from))
                    .unwrap_or_default()
            ))
            .filter(|p| p != "bid."),
            message: format!("bid: {}", b.message),
            ..b
        },
        None => ApiError::new(StatusCode::BAD_REQUEST, "bad_json", e.to_string()),
    };
    error_msg(rid, &err)
}

struct Conn {
    api: Api,
    principal: Option<Principal>,
    /// SHA-256 of the connection's key (checked on every message: a revoked key stops).
    key_hash: Option<[u8; 32]>,
    /// Closes the connection with a reason.
    kill: mpsc::Sender<String>,
    /// The key was found revoked: close after the reply.
    revoked: std::cell::Cell<bool>,
    /// Rate-limit key: the API key's id, or the peer address when anonymous.
    rate_key: String,
    conn: crate::feed::ConnId,
    out: mpsc::Sender<OutMsg>,
    resting: Rc<RefCell<BTreeSet<u64>>>,
}

async fn run(
    api: Api,
    who: Caller,
    mut session: actix_ws::Session,
    mut stream: actix_ws::AggregatedMessageStream,
    cancel_on_disconnect: bool,
) {
    let (out_tx, mut out_rx) = mpsc::channel::<OutMsg>(OUTBOX);
    let (kill_tx, mut kill_rx) = mpsc::channel::<String>(1);
    let (close_tx, mut close_rx) = watch::channel::<Option<String>>(None);
    let Caller {
        principal,
        node,
        key_hash,
        rate_key,
    } = who;
    // Buyers get their trading and delivery events, suppliers their nodes' delivery events (a
    // node key: its node's only).
    let buyer_account = principal
        .as_ref()
        .filter(|p| matches!(p.role, Role::Buyer | Role::Supplier))
        .map(|p| p.account);
    let outbox = Outbox {
        tx: out_tx.clone(),
        close: close_tx,
    };
    // `welcome` is the first frame: queued before the hub knows the connection, so no
    // account event the hub pushes (another session's bid resting, say) can overtake it.
    let _ = out_tx.try_send(encode(&ServerMsg::Welcome {
        account_id: principal.as_ref().map(|p| p.account.to_string()),
        role: principal.as_ref().map(|p| p.role),
        node_name: principal
            .as_ref()
            .and_then(|p| p.node.as_ref())
            .map(|s| s.name.clone()),
        node_id: node.map(|n| n.0.to_string()),
        cancel_on_disconnect,
        limits: WsLimits {
            max_frame_bytes: MAX_WS_FRAME_BYTES,
            max_inflight: MAX_WS_INFLIGHT,
            outbox: OUTBOX,
            max_subscriptions: crate::feed::MAX_SUBSCRIPTIONS,
        },
    }));
    let conn_id = match (buyer_account, node) {
        (Some(account), Some(node)) => api.feed.connect_node(account, node, outbox).await,
        _ => api.feed.connect(buyer_account, outbox).await,
    };
    let conn = Rc::new(Conn {
        api: api.clone(),
        principal: principal.clone(),
        key_hash,
        kill: kill_tx,
        revoked: std::cell::Cell::new(false),
        rate_key,
        conn: conn_id,
        out: out_tx.clone(),
        resting: Rc::new(RefCell::new(BTreeSet::new())),
    });
    let inflight = Arc::new(Semaphore::new(MAX_WS_INFLIGHT));
    let mut balance_tick = tokio::time::interval(std::time::Duration::from_millis(BALANCE_PUSH_MS));
    let mut last_balance: Option<gpux_wire::BalanceView> = None;
    // Suppliers' connections get delivery events (via `buyer_account`), never a balance.
    let is_buyer = principal.as_ref().is_some_and(|p| p.role == Role::Buyer);
    let mut shutdown = api.shutdown.subscribe();
    // A second receiver for the wait inside a send (the first is borrowed by the select).
    let mut shutdown_during_send = api.shutdown.subscribe();
    let close_reason: Option<CloseReason> = loop {
        tokio::select! {
            biased;
            _ = shutdown.wait_for(|stopping| *stopping) => break Some(shutdown_close()),
            changed = close_rx.changed() => {
                let reason = if changed.is_ok() { close_rx.borrow().clone() } else { None };
                break Some(CloseReason {
                    code: CloseCode::Policy,
                    description: Some(reason.unwrap_or_else(|| "closed".into())),
                });
            }
            Some(msg) = out_rx.recv() => {
                // A client that stops reading: the socket's buffers fill and the send waits;
                // past SEND_TIMEOUT_MS the connection is closed as a slow consumer. The server
                // stopping ends the wait at once.
                let Some(sent) =
                    send_unless_stopping(session.text(msg.to_string()), &mut shutdown_during_send)
                        .await
                else {
                    break Some(shutdown_close());
                };
                match sent {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => break None,
                    Err(_) => {
                        metrics::counter!("gpux_ws_send_timeouts_total").increment(1);
                        break Some(CloseReason {
                            code: CloseCode::Policy,
                            description: Some("slow_consumer".into()),
                        });
                    }
                }
            }
            Some(reason) = kill_rx.recv() => {
                break Some(CloseReason { code: CloseCode::Policy, description: Some(reason) });
            }
            // Read only while a command slot is free, so the outbox keeps draining.
            m = stream.next(), if inflight.available_permits() > 0 => match m {
                Some(Ok(AggregatedMessage::Text(t))) => {
                    let Ok(permit) = inflight.clone().try_acquire_owned() else { continue };
                    let c = conn.clone();
                    let t = t.to_string();
                    actix_web::rt::spawn(async move {
                        let reply = handle(&c, &t).await;
                        drop(permit);
                        if let Some(reply) = reply {
                            let _ = c.out.send(reply).await;
                        }
                        if c.revoked.get() {
                            let _ = c.kill.try_send("key_revoked".into());
                        }
                    });
                }
                Some(Ok(AggregatedMessage::Binary(_))) => {
                    let _ = out_tx.try_send(error_msg(None, &ApiError::new(
                        StatusCode::BAD_REQUEST, "binary_not_supported",
                        "send JSON text frames")));
                }
                Some(Ok(AggregatedMessage::Ping(p))) => {
                    // Bounded like a text send: a pinging client that stopped reading must
                    // not hold the loop (nor the server's stop).
                    match send_unless_stopping(session.pong(&p), &mut shutdown_during_send).await {
                        None => break Some(shutdown_close()),
                        Some(Ok(Ok(()))) => {}
                        Some(_) => break None,
                    }
                }
                Some(Ok(AggregatedMessage::Pong(_))) => {}
                Some(Ok(AggregatedMessage::Close(_))) | None => break None,
                Some(Err(e)) => {
                    let code = match e {
                        actix_ws::ProtocolError::Overflow => CloseCode::Size,
                        // FrameGuard refused a frame at its header.
                        actix_ws::ProtocolError::Io(ref io)
                            if io.to_string().contains("size limit") => CloseCode::Size,
                        _ => CloseCode::Protocol,
                    };
                    break Some(CloseReason { code, description: Some(e.to_string()) });
                }
            },
            _ = balance_tick.tick(), if buyer_account.is_some() && is_buyer => {
                if let Some(b) = buyer_account
                    && let Ok(v) = buyer::balance_of(&api, b).await
                    && last_balance.as_ref() != Some(&v)
                {
                    let push = ServerMsg::Balance { request_id: None, balance: v.clone() };
                    let _ = out_tx.try_send(encode(&push));
                    last_balance = Some(v);
                }
            }
        }
    };
    api.feed.disconnect(conn_id).await;
    // Commands still running finish first (their replies have nowhere to go), so a bid
    // placed just before the close is cancelled too.
    drop(out_rx);
    let cancels = async {
        let _ = tokio::time::timeout(
            std::time::Duration::from_millis(SEND_TIMEOUT_MS),
            inflight.acquire_many(MAX_WS_INFLIGHT as u32),
        )
        .await;
        if cancel_on_disconnect && let Some(b) = buyer_account {
            let ids: Vec<u64> = conn.resting.borrow().iter().copied().collect();
            // Submitted together, so the journal commits them in a few group commits rather
            // than one after another.
            futures_util::future::join_all(
                ids.into_iter().map(|id| buyer::canceled_bid(&api, b, id)),
            )
            .await;
        }
    };
    if *shutdown.borrow() {
        // While the server stops, the cancels go first: the close may wait on a socket that
        // accepts nothing, and the HTTP server drops the connection once its shutdown timeout
        // ends. The close then waits only briefly.
        cancels.await;
        let _ = tokio::time::timeout(
            std::time::Duration::from_millis(SHUTDOWN_CLOSE_MS),
            session.close(close_reason),
        )
        .await;
    } else {
        // A stop that begins meanwhile abandons the close, so the cancels still run before
        // the HTTP server's shutdown timeout.
        let _ = send_unless_stopping(session.close(close_reason), &mut shutdown_during_send).await;
        cancels.await;
    }
}

fn request_id_ok(r: &Option<String>) -> ApiResult<()> {
    match r {
        Some(s) if s.len() > MAX_REQUEST_ID => Err(ApiError::invalid(
            "request_id",
            "invalid_request_id",
            format!("request_id is at most {MAX_REQUEST_ID} bytes"),
        )),
        _ => Ok(()),
    }
}

fn buyer_of(c: &Conn) -> ApiResult<u64> {
    if let Some(p) = &c.principal {
        p.require_unscoped()?;
    }
    match &c.principal {
        Some(p) if p.role == Role::Buyer => Ok(p.account),
        Some(p) => Err(ApiError::forbidden(format!(
            "{} key may not trade; buyer keys only",
            p.role.with_article()
        ))),
        None => Err(ApiError::unauthorized(
            "connect with a buyer key to trade (anonymous connections read inventory only)",
        )),
    }
}

/// The supplier reporting on its leases: an account key, or a node key (whose reports the
/// report helpers hold to its node).
fn supplier_of(c: &Conn) -> ApiResult<&Principal> {
    match &c.principal {
        Some(p) if p.role == Role::Supplier => Ok(p),
        Some(p) => Err(ApiError::forbidden(format!(
            "{} key may not report on leases; supplier keys only",
            p.role.with_article()
        ))),
        None => Err(ApiError::unauthorized(
            "connect with a supplier key to report on your nodes' leases",
        )),
    }
}

/// Handles one client message; answers the reply to send (subscriptions answer after their
/// snapshot is queued).
async fn handle(c: &Conn, t: &str) -> Option<OutMsg> {
    let msg: ClientMsg = match serde_json::from_str(t) {
        Ok(m) => m,
        Err(e) => return Some(undecodable(t, &e)),
    };
    let rid = match &msg {
        ClientMsg::PlaceBid { request_id, .. }
        | ClientMsg::CancelBid { request_id, .. }
        | ClientMsg::CancelAll { request_id }
        | ClientMsg::ReleaseLease { request_id, .. }
        | ClientMsg::Subscribe { request_id, .. }
        | ClientMsg::Unsubscribe { request_id, .. }
        | ClientMsg::GetBalance { request_id }
        | ClientMsg::Ping { request_id }
        | ClientMsg::ReportReady { request_id, .. }
        | ClientMsg::ReportFailed { request_id, .. }
        | ClientMsg::ReportLost { request_id, .. }
        | ClientMsg::ReportTornDown { request_id, .. }
        | ClientMsg::ResumeNode { request_id, .. } => request_id.clone(),
    };
    let r = async {
        request_id_ok(&rid)?;
        if let Some(h) = &c.key_hash
            && !c.api.auth.contains(h)
        {
            c.revoked.set(true);
            return Err(ApiError::unauthorized("this API key was revoked"));
        }
        auth::check_rate(&c.api, &c.rate_key)?;
        dispatch(c, msg, rid.clone()).await
    }
    .await;
    Some(match r {
        Ok(reply) => encode(&reply),
        Err(e) => error_msg(rid.as_deref(), &e),
    })
}

fn topic(c: &Conn, sku: &str, region: Option<String>) -> ApiResult<Topic> {
    let sku = c
        .api
        .catalog
        .lookup(sku)
        .ok_or_else(|| crate::api::dto::unknown_sku(&c.api.catalog, sku))?;
    Ok(Topic { sku, region })
}

/// Runs one client message; answers its reply, echoing `request_id`.
async fn dispatch(c: &Conn, msg: ClientMsg, request_id: Option<String>) -> ApiResult<ServerMsg> {
    let api = &c.api;
    Ok(match msg {
        ClientMsg::PlaceBid { bid, .. } => {
            let b = buyer_of(c)?;
            let (_, bid) = buyer::placed_bid(api, b, &bid).await?;
            if bid.status == BidStatusDto::Resting
                && let Some(id) = bid.bid_id.as_deref().and_then(crate::api::dto::parse_id)
            {
                c.resting.borrow_mut().insert(id);
            }
            ServerMsg::BidAccepted { request_id, bid }
        }
        ClientMsg::CancelBid { bid_id, .. } => {
            let b = buyer_of(c)?;
            let cancel = buyer::canceled_bid(api, b, bid_id.0).await?;
            c.resting.borrow_mut().remove(&bid_id.0);
            ServerMsg::BidCanceled { request_id, cancel }
        }
        ClientMsg::CancelAll { .. } => {
            let b = buyer_of(c)?;
            let cancel = buyer::canceled_bids(api, b).await?;
            c.resting.borrow_mut().clear();
            ServerMsg::BidsCanceled { request_id, cancel }
        }
        ClientMsg::ReleaseLease { lease_id, .. } => {
            let b = buyer_of(c)?;
            let release = buyer::released_lease(api, b, lease_id.0).await?;
            ServerMsg::LeaseReleased {
                request_id,
                release,
            }
        }
        ClientMsg::Subscribe { sku, region, .. } => {
            let t = topic(c, &sku, region.clone())?;
            api.feed.subscribe(c.conn, t).await.map_err(|code| {
                ApiError::new(StatusCode::CONFLICT, code, code.replace('_', " "))
            })?;
            ServerMsg::Subscribed {
                request_id,
                sku,
                region,
            }
        }
        ClientMsg::Unsubscribe { sku, region, .. } => {
            let t = topic(c, &sku, region.clone())?;
            api.feed.unsubscribe(c.conn, t).await;
            ServerMsg::Unsubscribed {
                request_id,
                sku,
                region,
            }
        }
        ClientMsg::GetBalance { .. } => {
            let b = buyer_of(c)?;
            ServerMsg::Balance {
                request_id: Some(request_id),
                balance: buyer::balance_of(api, b).await?,
            }
        }
        ClientMsg::Ping { .. } => ServerMsg::Pong {
            request_id,
            at_ms: crate::api::now_ms(),
        },
        ClientMsg::ReportReady {
            lease_id, access, ..
        } => {
            let s = supplier_of(c)?;
            let lease = crate::api::delivery::report_ready(api, s, lease_id.0, &access).await?;
            ServerMsg::LeaseReported {
                request_id,
                lease: Box::new(lease),
            }
        }
        ClientMsg::ReportFailed {
            lease_id,
            reason,
            cause,
            ..
        } => {
            let s = supplier_of(c)?;
            let lease =
                crate::api::delivery::report_failed(api, s, lease_id.0, &reason, cause).await?;
            ServerMsg::LeaseReported {
                request_id,
                lease: Box::new(lease),
            }
        }
        ClientMsg::ReportLost {
            lease_id, reason, ..
        } => {
            let s = supplier_of(c)?;
            let lease = crate::api::delivery::report_lost(api, s, lease_id.0, &reason).await?;
            ServerMsg::LeaseReported {
                request_id,
                lease: Box::new(lease),
            }
        }
        ClientMsg::ReportTornDown {
            lease_id, method, ..
        } => {
            let s = supplier_of(c)?;
            let lease = crate::api::delivery::report_torn_down(api, s, lease_id.0, &method).await?;
            ServerMsg::LeaseReported {
                request_id,
                lease: Box::new(lease),
            }
        }
        ClientMsg::ResumeNode { node_id, .. } => {
            let s = supplier_of(c)?;
            // Resuming a held node is the supplier's decision, never a node key's.
            s.require_unscoped()?;
            let node = crate::api::delivery::resume_node(api, s.account, node_id.0).await?;
            ServerMsg::NodeResumed {
                request_id: Some(request_id),
                node: Some(Box::new(node)),
                seq: None,
                node_id: None,
            }
        }
    })
}
