//! [`WsSession`]: one websocket connection to `/v1/ws` (docs/api.md §3), typed both ways.
//! [`WsSession::send`] a [`ClientMsg`], [`WsSession::next`] the next [`ServerMsg`];
//! [`WsSession::request`] sends a message with a `request_id` and waits for the reply that
//! echoes it, keeping every other message read meanwhile (feed deltas, private events, other
//! replies) for `next`, in order.
//!
//! Bounds: connecting, each send and each request wait at most the client's timeout. A read
//! waits for traffic; after [`KEEPALIVE_IDLE_MS`] without any it pings the server (which
//! answers every websocket ping with a pong), and no frame within the timeout after the ping
//! ends the session with [`ClientError::Timeout`]. So a dead peer is noticed within
//! `KEEPALIVE_IDLE_MS` + timeout, and a quiet feed costs one ping per idle period.

use crate::client::{Client, authority, chain};
use crate::error::ClientError;
use crate::tls;
use futures_util::{SinkExt, StreamExt};
use gpux_wire::ws::{ClientMsg, ServerMsg, WsLimits};
use gpux_wire::{
    AccessRequest, BalanceView, BidCanceled, BidPlaced, BidRequest, BidsCanceled, ErrorBody, IdStr,
    LeaseReleased, LeaseView, NodeView, Role, parse_id,
};
use http::header::{AUTHORIZATION, HeaderValue, RETRY_AFTER, SEC_WEBSOCKET_PROTOCOL};
use std::collections::VecDeque;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

/// The websocket subprotocol the client asks for (the server selects it).
pub const SUBPROTOCOL: &str = "gpux.v1";
/// A read that has seen no frame for this long pings the server, ms.
pub const KEEPALIVE_IDLE_MS: u64 = 20_000;
/// Most messages kept for [`WsSession::next`] while a [`WsSession::request`] waits for its
/// reply; beyond, the request fails with [`ClientError::Transport`] (read with `next` more
/// often, or use another connection for requests).
pub const MAX_BACKLOG: usize = 65_536;
/// Largest message the client accepts from the server, bytes (a snapshot of a deep book).
pub const MAX_SERVER_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// What the server said in `welcome`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Welcome {
    /// The key's account (`None`: anonymous, inventory only).
    pub account_id: Option<String>,
    /// The key's role.
    pub role: Option<Role>,
    /// A node key's node name (`None`: an account key or anonymous).
    pub node_name: Option<String>,
    /// A node key's node id.
    pub node_id: Option<String>,
    /// The connection's resting GTC bids are canceled when it closes.
    pub cancel_on_disconnect: bool,
    /// The connection's limits.
    pub limits: WsLimits,
}

/// How to open a websocket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WsOptions {
    /// `?cancel_on_disconnect=true`: bids placed over this connection that rest are canceled
    /// when it closes (buyers; docs/api.md §3.1).
    pub cancel_on_disconnect: bool,
    /// Connect without the client's key (inventory and ping only, no private events).
    pub anonymous: bool,
}

/// One open websocket.
pub struct WsSession {
    socket: Socket,
    welcome: Welcome,
    /// Messages read while a request waited (decode errors keep their place).
    backlog: VecDeque<Result<ServerMsg, ClientError>>,
    timeout: std::time::Duration,
    next_request: u64,
    closed: bool,
    close_frame: Option<(u16, String)>,
}

impl std::fmt::Debug for WsSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WsSession")
            .field("welcome", &self.welcome)
            .field("backlog", &self.backlog.len())
            .field("closed", &self.closed)
            .finish()
    }
}

impl Client {
    /// Opens the websocket with the client's key (anonymous without one) and reads `welcome`.
    ///
    /// # Errors
    /// [`ClientError::Api`] when the upgrade is refused (401, 403, 409 `node_not_registered`,
    /// 429), transport errors, [`ClientError::Timeout`].
    pub async fn connect_ws(&self) -> Result<WsSession, ClientError> {
        self.connect_ws_with(WsOptions::default()).await
    }

    /// Opens the websocket with options. A client of several API processes
    /// ([`Client::new`]) that cannot connect to the one in use, or loses the connection before
    /// `welcome`, tries the next, each once.
    ///
    /// # Errors
    /// As [`Client::connect_ws`]; with several processes, the last one's error.
    pub async fn connect_ws_with(&self, opts: WsOptions) -> Result<WsSession, ClientError> {
        let mut tries = self.base_count();
        loop {
            let base = self.base().clone();
            match self.connect_ws_once(opts).await {
                Err(
                    e @ (ClientError::Transport(_) | ClientError::Timeout | ClientError::Closed),
                ) => {
                    self.fail_over(&base);
                    tries -= 1;
                    if tries == 0 {
                        return Err(e);
                    }
                }
                other => return other,
            }
        }
    }

    /// One attempt of [`Client::connect_ws_with`] on the base in use.
    async fn connect_ws_once(&self, opts: WsOptions) -> Result<WsSession, ClientError> {
        let url = ws_url(self.url(&["v1", "ws"]), opts);
        let at = authority(&url);
        let mut req = url
            .as_str()
            .into_client_request()
            .map_err(|e| ClientError::Invalid(format!("websocket URL: {e}")))?;
        req.headers_mut().insert(
            SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static(SUBPROTOCOL),
        );
        if let (Some(auth), false) = (&self.inner.auth, opts.anonymous) {
            req.headers_mut().insert(AUTHORIZATION, auth.clone());
        }
        let config = WebSocketConfig::default().max_message_size(Some(MAX_SERVER_MESSAGE_BYTES));
        let timeout = self.inner.timeout;
        // A `ws://` URL connects in plain, a `wss://` one with the client's TLS configuration.
        let tls = tokio_tungstenite::Connector::Rustls(self.inner.tls.clone());
        let connect =
            tokio_tungstenite::connect_async_tls_with_config(req, Some(config), true, Some(tls));
        let (socket, _) = tokio::time::timeout(timeout, connect)
            .await
            .map_err(|_| ClientError::Timeout)?
            .map_err(|e| upgrade_error(e, &at))?;
        let mut s = WsSession {
            socket,
            welcome: Welcome {
                account_id: None,
                role: None,
                node_name: None,
                node_id: None,
                cancel_on_disconnect: false,
                limits: WsLimits {
                    max_frame_bytes: 0,
                    max_inflight: 0,
                    outbox: 0,
                    max_subscriptions: 0,
                },
            },
            backlog: VecDeque::new(),
            timeout,
            next_request: 0,
            closed: false,
            close_frame: None,
        };
        let first = tokio::time::timeout(timeout, s.read())
            .await
            .map_err(|_| ClientError::Timeout)??;
        let ServerMsg::Welcome {
            account_id,
            role,
            node_name,
            node_id,
            cancel_on_disconnect,
            limits,
        } = first
        else {
            return Err(ClientError::Decode(format!(
                "expected welcome first, got {first:?}"
            )));
        };
        s.welcome = Welcome {
            account_id,
            role,
            node_name,
            node_id,
            cancel_on_disconnect,
            limits,
        };
        Ok(s)
    }
}

/// The websocket URL of a REST URL (`…/v1/ws`): `http` → `ws`, `https` → `wss`, with the
/// options' query.
fn ws_url(mut url: url::Url, opts: WsOptions) -> url::Url {
    let scheme = if url.scheme() == "https" { "wss" } else { "ws" };
    // Both schemes of each pair are "special": the change cannot fail for an http(s) base.
    let _ = url.set_scheme(scheme);
    if opts.cancel_on_disconnect {
        url.query_pairs_mut()
            .append_pair("cancel_on_disconnect", "true");
    }
    url
}

/// A refused upgrade as the server's error answer; anything else as transport (a failed TLS
/// handshake with `at`, `host:port`, says why).
fn upgrade_error(e: WsError, at: &str) -> ClientError {
    match e {
        WsError::Http(resp) => {
            let retry_after = resp
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|s| s.trim().parse::<u64>().ok());
            let body = resp.body().as_deref().unwrap_or_default();
            ClientError::from_answer(resp.status().as_u16(), body, retry_after)
        }
        WsError::ConnectionClosed | WsError::AlreadyClosed => ClientError::Closed,
        other => tls::transport_error(&other, at),
    }
}

impl WsSession {
    /// The server's `welcome`.
    pub fn welcome(&self) -> &Welcome {
        &self.welcome
    }

    /// The server's close frame (code, reason), once it closed the connection: e.g. 1001
    /// `server_shutdown`, 1008 `slow_consumer` (docs/api.md §3.7).
    pub fn close_frame(&self) -> Option<(u16, &str)> {
        self.close_frame.as_ref().map(|(c, r)| (*c, r.as_str()))
    }

    /// Sends a message (bounded by the timeout).
    ///
    /// # Errors
    /// [`ClientError::Invalid`] for a message over the server's frame limit, transport
    /// errors, [`ClientError::Timeout`], [`ClientError::Closed`].
    pub async fn send(&mut self, msg: &ClientMsg) -> Result<(), ClientError> {
        if self.closed {
            return Err(ClientError::Closed);
        }
        let text = serde_json::to_string(msg).map_err(|e| ClientError::Invalid(e.to_string()))?;
        let limit = self.welcome.limits.max_frame_bytes;
        if limit > 0 && text.len() > limit {
            return Err(ClientError::Invalid(format!(
                "message of {} bytes; the server takes at most {limit}",
                text.len()
            )));
        }
        self.write(Message::Text(text.into())).await
    }

    async fn write(&mut self, m: Message) -> Result<(), ClientError> {
        match tokio::time::timeout(self.timeout, self.socket.send(m)).await {
            Err(_) => Err(ClientError::Timeout),
            Ok(Err(e)) => Err(self.fail(e)),
            Ok(Ok(())) => Ok(()),
        }
    }

    /// The next server message: first those a request read past, then the socket's.
    ///
    /// # Errors
    /// [`ClientError::Closed`] once the connection is closed (see
    /// [`WsSession::close_frame`]), [`ClientError::Timeout`] when the keepalive finds the
    /// peer dead, transport errors; [`ClientError::Decode`] for one message this client
    /// cannot read (the session stays usable).
    pub async fn next(&mut self) -> Result<ServerMsg, ClientError> {
        match self.backlog.pop_front() {
            Some(m) => m,
            None => self.read().await,
        }
    }

    /// Reads the socket until a text message, with the keepalive (module docs).
    async fn read(&mut self) -> Result<ServerMsg, ClientError> {
        let mut pinged = false;
        loop {
            if self.closed {
                return Err(ClientError::Closed);
            }
            let wait = if pinged {
                self.timeout
            } else {
                std::time::Duration::from_millis(KEEPALIVE_IDLE_MS)
            };
            let frame = match tokio::time::timeout(wait, self.socket.next()).await {
                Err(_) if pinged => {
                    self.closed = true;
                    return Err(ClientError::Timeout);
                }
                Err(_) => {
                    self.write(Message::Ping(Default::default())).await?;
                    pinged = true;
                    continue;
                }
                Ok(None) => {
                    self.closed = true;
                    return Err(ClientError::Closed);
                }
                Ok(Some(Err(e))) => return Err(self.fail(e)),
                Ok(Some(Ok(frame))) => frame,
            };
            pinged = false;
            match frame {
                Message::Text(t) => {
                    return serde_json::from_str(t.as_str())
                        .map_err(|e| ClientError::Decode(format!("{e}: {}", t.as_str())));
                }
                Message::Close(f) => {
                    self.close_frame = f.map(|f| (u16::from(f.code), f.reason.to_string()));
                    self.closed = true;
                    return Err(ClientError::Closed);
                }
                Message::Binary(_) | Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
            }
        }
    }

    /// Marks the session failed; answers the error.
    fn fail(&mut self, e: WsError) -> ClientError {
        self.closed = true;
        match e {
            WsError::ConnectionClosed | WsError::AlreadyClosed => ClientError::Closed,
            other => ClientError::Transport(chain(&other)),
        }
    }

    /// Sends `msg` with a `request_id` (its own, or a fresh `c<n>`) and waits, within the
    /// timeout, for the reply that echoes it. Other messages read meanwhile stay for
    /// [`WsSession::next`], in order (a `subscribe`'s snapshot among them).
    ///
    /// # Errors
    /// [`ClientError::Rejected`] when the server answers `rejected`; [`ClientError::Timeout`]
    /// (the reply may still come through `next`); send and read errors.
    pub async fn request(&mut self, mut msg: ClientMsg) -> Result<ServerMsg, ClientError> {
        let id = request_id_mut(&mut msg)
            .get_or_insert_with(|| {
                self.next_request += 1;
                format!("c{}", self.next_request)
            })
            .clone();
        let deadline = Instant::now() + self.timeout;
        tokio::time::timeout_at(deadline, self.send(&msg))
            .await
            .map_err(|_| ClientError::Timeout)??;
        loop {
            let m = match tokio::time::timeout_at(deadline, self.read()).await {
                Err(_) => return Err(ClientError::Timeout),
                Ok(Err(e @ ClientError::Decode(_))) => Err(e),
                Ok(Err(e)) => return Err(e),
                Ok(Ok(m)) if reply_request_id(&m) == Some(id.as_str()) => {
                    return match m {
                        ServerMsg::Rejected {
                            code,
                            message,
                            field,
                            retry_after_s,
                            ..
                        } => Err(ClientError::Rejected {
                            error: ErrorBody {
                                code,
                                message,
                                request_id: id,
                                field,
                                retry_after_s,
                            },
                        }),
                        reply => Ok(reply),
                    };
                }
                Ok(Ok(m)) => Ok(m),
            };
            if self.backlog.len() >= MAX_BACKLOG {
                return Err(ClientError::Transport(format!(
                    "{MAX_BACKLOG} messages unread while waiting for reply {id}: read them with next()"
                )));
            }
            self.backlog.push_back(m);
        }
    }

    /// Closes the connection (bounded by the timeout).
    ///
    /// # Errors
    /// Transport errors while closing; [`ClientError::Timeout`].
    pub async fn close(mut self) -> Result<(), ClientError> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        match tokio::time::timeout(self.timeout, self.socket.close(None)).await {
            Err(_) => Err(ClientError::Timeout),
            Ok(Err(WsError::ConnectionClosed | WsError::AlreadyClosed)) | Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(ClientError::Transport(chain(&e))),
        }
    }
}

/// Typed requests (each is [`WsSession::request`] with a fresh `request_id`).
impl WsSession {
    /// `subscribe`: the snapshot (queued before the reply) and deltas follow through `next`.
    ///
    /// # Errors
    /// `rejected` (`unknown_sku`, `already_subscribed`, `too_many_subscriptions`), as
    /// [`WsSession::request`].
    pub async fn subscribe(&mut self, sku: &str, region: Option<&str>) -> Result<(), ClientError> {
        let msg = ClientMsg::Subscribe {
            request_id: None,
            sku: sku.to_string(),
            region: region.map(String::from),
        };
        match self.request(msg).await? {
            ServerMsg::Subscribed { .. } => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    /// `unsubscribe` (deltas already queued may still arrive).
    ///
    /// # Errors
    /// As [`WsSession::request`].
    pub async fn unsubscribe(
        &mut self,
        sku: &str,
        region: Option<&str>,
    ) -> Result<(), ClientError> {
        let msg = ClientMsg::Unsubscribe {
            request_id: None,
            sku: sku.to_string(),
            region: region.map(String::from),
        };
        match self.request(msg).await? {
            ServerMsg::Unsubscribed { .. } => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    /// `ping` → the server's time, ms since epoch.
    ///
    /// # Errors
    /// As [`WsSession::request`].
    pub async fn ping(&mut self) -> Result<i64, ClientError> {
        match self.request(ClientMsg::Ping { request_id: None }).await? {
            ServerMsg::Pong { at_ms, .. } => Ok(at_ms),
            other => Err(unexpected(&other)),
        }
    }

    /// `place_bid` → `bid_accepted` (buyers).
    ///
    /// # Errors
    /// As [`WsSession::request`].
    pub async fn place_bid(&mut self, bid: &BidRequest) -> Result<BidPlaced, ClientError> {
        let msg = ClientMsg::PlaceBid {
            request_id: None,
            bid: bid.clone(),
        };
        match self.request(msg).await? {
            ServerMsg::BidAccepted { bid, .. } => Ok(bid),
            other => Err(unexpected(&other)),
        }
    }

    /// `cancel_bid` → `bid_canceled`.
    ///
    /// # Errors
    /// [`ClientError::Invalid`] for an id that is not digits; as [`WsSession::request`].
    pub async fn cancel_bid(&mut self, bid_id: &str) -> Result<BidCanceled, ClientError> {
        let msg = ClientMsg::CancelBid {
            request_id: None,
            bid_id: id(bid_id)?,
        };
        match self.request(msg).await? {
            ServerMsg::BidCanceled { cancel, .. } => Ok(cancel),
            other => Err(unexpected(&other)),
        }
    }

    /// `cancel_all` → `bids_canceled`.
    ///
    /// # Errors
    /// As [`WsSession::request`].
    pub async fn cancel_all(&mut self) -> Result<BidsCanceled, ClientError> {
        match self
            .request(ClientMsg::CancelAll { request_id: None })
            .await?
        {
            ServerMsg::BidsCanceled { cancel, .. } => Ok(cancel),
            other => Err(unexpected(&other)),
        }
    }

    /// `release_lease` → `lease_released`.
    ///
    /// # Errors
    /// [`ClientError::Invalid`] for an id that is not digits; as [`WsSession::request`].
    pub async fn release_lease(&mut self, lease_id: &str) -> Result<LeaseReleased, ClientError> {
        let msg = ClientMsg::ReleaseLease {
            request_id: None,
            lease_id: id(lease_id)?,
        };
        match self.request(msg).await? {
            ServerMsg::LeaseReleased { release, .. } => Ok(release),
            other => Err(unexpected(&other)),
        }
    }

    /// `get_balance` → `balance`.
    ///
    /// # Errors
    /// As [`WsSession::request`].
    pub async fn balance(&mut self) -> Result<BalanceView, ClientError> {
        match self
            .request(ClientMsg::GetBalance { request_id: None })
            .await?
        {
            ServerMsg::Balance { balance, .. } => Ok(balance),
            other => Err(unexpected(&other)),
        }
    }

    /// `report_ready` → the lease (suppliers).
    ///
    /// # Errors
    /// [`ClientError::Invalid`] for an id that is not digits; as [`WsSession::request`].
    pub async fn report_ready(
        &mut self,
        lease_id: &str,
        access: &AccessRequest,
    ) -> Result<LeaseView, ClientError> {
        let msg = ClientMsg::ReportReady {
            request_id: None,
            lease_id: id(lease_id)?,
            access: access.clone(),
        };
        self.lease_reported(msg).await
    }

    /// `report_failed` → the lease.
    ///
    /// # Errors
    /// As [`WsSession::report_ready`].
    pub async fn report_failed(
        &mut self,
        lease_id: &str,
        reason: &str,
    ) -> Result<LeaseView, ClientError> {
        let msg = ClientMsg::ReportFailed {
            request_id: None,
            lease_id: id(lease_id)?,
            reason: reason.to_string(),
            cause: None,
        };
        self.lease_reported(msg).await
    }

    /// `report_torn_down` → the lease.
    ///
    /// # Errors
    /// As [`WsSession::report_ready`].
    pub async fn report_torn_down(
        &mut self,
        lease_id: &str,
        method: &str,
    ) -> Result<LeaseView, ClientError> {
        let msg = ClientMsg::ReportTornDown {
            request_id: None,
            lease_id: id(lease_id)?,
            method: method.to_string(),
        };
        self.lease_reported(msg).await
    }

    async fn lease_reported(&mut self, msg: ClientMsg) -> Result<LeaseView, ClientError> {
        match self.request(msg).await? {
            ServerMsg::LeaseReported { lease, .. } => Ok(*lease),
            other => Err(unexpected(&other)),
        }
    }

    /// `resume_node` → the node (supplier account keys).
    ///
    /// # Errors
    /// As [`WsSession::report_ready`].
    pub async fn resume_node(&mut self, node_id: &str) -> Result<NodeView, ClientError> {
        let msg = ClientMsg::ResumeNode {
            request_id: None,
            node_id: id(node_id)?,
        };
        match self.request(msg).await? {
            ServerMsg::NodeResumed { node: Some(n), .. } => Ok(*n),
            other => Err(unexpected(&other)),
        }
    }
}

fn id(s: &str) -> Result<IdStr, ClientError> {
    parse_id(s)
        .map(IdStr)
        .ok_or_else(|| ClientError::Invalid(format!("{s:?} is not an id (a string of digits)")))
}

fn unexpected(m: &ServerMsg) -> ClientError {
    ClientError::Decode(format!("unexpected reply {m:?}"))
}

/// The `request_id` slot of a client message (every message has one).
pub fn request_id_mut(m: &mut ClientMsg) -> &mut Option<String> {
    match m {
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
        | ClientMsg::ResumeNode { request_id, .. } => request_id,
    }
}

/// The `request_id` a server message echoes (replies and `rejected`; `None` for feed
/// messages, events, pushes).
pub fn reply_request_id(m: &ServerMsg) -> Option<&str> {
    match m {
        ServerMsg::Rejected { request_id, .. }
        | ServerMsg::Subscribed { request_id, .. }
        | ServerMsg::Unsubscribed { request_id, .. }
        | ServerMsg::BidAccepted { request_id, .. }
        | ServerMsg::BidCanceled { request_id, .. }
        | ServerMsg::BidsCanceled { request_id, .. }
        | ServerMsg::LeaseReleased { request_id, .. }
        | ServerMsg::Pong { request_id, .. }
        | ServerMsg::LeaseReported { request_id, .. } => request_id.as_deref(),
        // `Some(id)` on replies, `None` on pushes and events.
        ServerMsg::Balance { request_id, .. } | ServerMsg::NodeResumed { request_id, .. } => {
            request_id.as_ref().and_then(|r| r.as_deref())
        }
        ServerMsg::Welcome { .. }
        | ServerMsg::InventorySnapshot(_)
        | ServerMsg::InventoryDelta(_)
        | ServerMsg::Trade { .. }
        | ServerMsg::Fill { .. }
        | ServerMsg::LeaseStarted { .. }
        | ServerMsg::PreemptionNotice { .. }
        | ServerMsg::LeaseEnded { .. }
        | ServerMsg::LeaseMigrated { .. }
        | ServerMsg::FailoverFailed { .. }
        | ServerMsg::BidRested { .. }
        | ServerMsg::BidClosed { .. }
        | ServerMsg::LeaseAssigned { .. }
        | ServerMsg::LeaseNotice { .. }
        | ServerMsg::LeaseProvisioning { .. }
        | ServerMsg::LeaseReady { .. }
        | ServerMsg::LeaseAccessChanged { .. }
        | ServerMsg::LeaseWiping { .. }
        | ServerMsg::LeaseTornDown { .. }
        | ServerMsg::TeardownOverdue { .. }
        | ServerMsg::NodeHeld { .. }
        | ServerMsg::GangFormed { .. }
        | ServerMsg::GangMemberReady { .. }
        | ServerMsg::GangReady { .. }
        | ServerMsg::GangFailed { .. }
        | ServerMsg::GangDegraded { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_bases_open_wss() {
        let url = |s: &str| url::Url::parse(s).expect("url");
        assert_eq!(
            ws_url(url("http://h:1/p/v1/ws"), WsOptions::default()).as_str(),
            "ws://h:1/p/v1/ws"
        );
        let opts = WsOptions {
            cancel_on_disconnect: true,
            anonymous: false,
        };
        assert_eq!(
            ws_url(url("https://h/v1/ws"), opts).as_str(),
            "wss://h/v1/ws?cancel_on_disconnect=true"
        );
        assert_eq!(
            ws_url(url("https://h:8443/v1/ws"), WsOptions::default()).as_str(),
            "wss://h:8443/v1/ws"
        );
    }
}
