//! Assembling the server: recover the market from a journal, start the sequencer, the ticker,
//! the feed hub and the HTTP server. Used by the binary, the integration tests, the benches
//! and the load test's in-process mode.

use crate::api::front::FrontStream;
use crate::api::{Api, ApiConfig, edge};
use crate::journal::AnyJournal;
use crate::market::{Market, MarketConfig, Op};
use crate::sequencer::{self, RecoveryError, Sequencer, SnapshotPolicy, SystemClock};
use actix_http::{HttpService, Protocol, error::DispatchError};
use actix_service::{IntoServiceFactory, ServiceFactoryExt as _, fn_service, map_config};
use actix_web::dev::AppConfig;
use actix_web::middleware::from_fn;
use actix_web::{App, web};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Keep-alive of an idle HTTP/1.1 connection between requests, s (actix's default).
pub const KEEP_ALIVE_S: u64 = 5;

/// Time a connection has to send its first request head, s: actix's own bound, after
/// which it answers an empty 408 and closes. The front answers first, JSON 408
/// `request_timeout` at `front_stream::FIRST_HEAD_TIMEOUT_MS` (docs/api.md §1.4).
pub const CLIENT_REQUEST_TIMEOUT_S: u64 = 10;

// The front's JSON 408 must come before actix's empty one.
const _: () =
    assert!(crate::api::front_stream::FIRST_HEAD_TIMEOUT_MS < CLIENT_REQUEST_TIMEOUT_S * 1000);

/// Time a connection has to shut down after its last answer, ms (actix-web's default).
pub const CLIENT_DISCONNECT_TIMEOUT_MS: u64 = 1000;

/// Connections the listening socket queues before they are accepted, connections
/// (actix-web's default).
pub const LISTEN_BACKLOG: u32 = 1024;

/// Connections one worker serves at once; a worker at the limit stops accepting,
/// connections (actix-server's default).
pub const MAX_CONNECTIONS_PER_WORKER: usize = 25_600;

/// Time connections get to finish at a graceful stop, s; then they are dropped.
pub const SHUTDOWN_TIMEOUT_S: u64 = 10;

/// What to start.
#[derive(Clone, Debug)]
pub struct AppOptions {
    /// Address to bind (`127.0.0.1:0` for a free port).
    pub listen: String,
    /// Tick period, ms (0 = no ticks).
    pub tick_ms: u64,
    /// Snapshot policy.
    pub snapshot: SnapshotPolicy,
    /// Expose the internal API.
    pub internal_api: bool,
    /// API settings.
    pub api: ApiConfig,
    /// HTTP worker threads (0: one per core).
    pub workers: usize,
    /// Stop gracefully on SIGINT (Ctrl-C) and SIGTERM: stop accepting, close websockets, drain
    /// requests, final snapshot (the server binary; tests stop servers themselves). A second
    /// signal while connections drain exits the process at once (`std::process::exit`, status
    /// 130 / 143), like a crash: acknowledged commands are in the journal.
    pub handle_signals: bool,
    /// Market rules a new journal starts with ([`MarketConfig::delivered`] by default: lease
    /// delivery on). A journal with a snapshot keeps the configuration it was created with.
    pub market: MarketConfig,
    /// One of several processes on a Redis journal (issue 18): follow it, campaign for the
    /// lease (roles `all`, `engine`), forward commands to the leader. `None`: this process
    /// owns its journal and leads from the start (the embedded store, tests, benches).
    pub cluster: Option<ClusterOptions>,
    /// Terminate TLS on the listening port (HTTPS and WSS) with this certificate chain and
    /// key (PEM files, reloaded when they change: [`crate::tls`]). `None`: plain HTTP.
    pub tls: Option<TlsFiles>,
    /// `/readyz` answers 503 `starting` until the caller calls [`Api::mark_ready`] (the
    /// server binary: after the admin account and the demo market exist). `false`: ready
    /// once started.
    pub hold_ready: bool,
}

/// The PEM files of the server's certificate ([`AppOptions::tls`]).
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert: std::path::PathBuf,
    /// Its private key.
    pub key: std::path::PathBuf,
}

/// How a process joins others on one Redis journal ([`crate::cluster`]).
#[derive(Clone)]
pub struct ClusterOptions {
    /// The journal's Redis settings (the tail, the forwarder and the campaign open
    /// connections of their own).
    pub redis: crate::journal::RedisConfig,
    /// What this process does.
    pub role: crate::cluster::Role,
    /// Shared secret of the processes (`/internal/forward`).
    pub key: String,
    /// This process's URL as the others reach it (recorded with the lease when it leads);
    /// `None`: `http://<bound address>`.
    pub advertise_url: Option<String>,
    /// The lease's length.
    pub lease: Duration,
    /// Called when a follower's replica cannot go on (the binary exits).
    pub on_fatal: std::sync::Arc<dyn Fn(String) + Send + Sync>,
}

impl std::fmt::Debug for ClusterOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterOptions")
            .field("redis", &self.redis)
            .field("role", &self.role)
            .field("advertise_url", &self.advertise_url)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl Default for AppOptions {
    fn default() -> Self {
        AppOptions {
            listen: "127.0.0.1:0".into(),
            tick_ms: 1000,
            snapshot: SnapshotPolicy::default(),
            internal_api: false,
            api: ApiConfig::default(),
            workers: 0,
            handle_signals: false,
            market: MarketConfig::delivered(),
            cluster: None,
            tls: None,
            hold_ready: false,
        }
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Recovery failed.
    #[error("recovering the market: {0}")]
    Recovery(#[from] RecoveryError),
    /// The API could not start.
    #[error("starting the API: {0}")]
    Api(#[from] crate::sequencer::SequencerError),
    /// The TLS certificate or key could not be used.
    #[error("TLS: {0}")]
    Tls(#[from] crate::tls::TlsError),
    /// Joining the other processes on the journal failed.
    #[error("joining the cluster: {0}")]
    Cluster(String),
    /// Binding failed.
    #[error("binding {0}: {1}")]
    Bind(String, std::io::Error),
}

/// A running server.
pub struct Running {
    /// The bound address.
    pub addr: SocketAddr,
    /// API state (sequencer, feed, keys) for in-process callers.
    pub api: Api,
    /// Stops the HTTP server.
    pub http: actix_web::dev::ServerHandle,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    sequencer: tokio::task::JoinHandle<Market>,
    ticker: Option<tokio::task::JoinHandle<()>>,
    /// Background tasks that hold the API (e.g. the demo's node agents): stopped with the
    /// ticker so the sequencer can drain.
    background: Vec<tokio::task::JoinHandle<()>>,
    /// The lease campaign of a process on a shared journal: answers the lease's renewal once
    /// won ([`Running::wait`] gives the lease up after the final snapshot).
    campaign: Option<CampaignSlot>,
}

impl Running {
    /// Waits for the HTTP server to stop (signal or [`Running::stop`]), then drains the
    /// sequencer (final snapshot) and returns the market.
    ///
    /// # Errors
    /// The sequencer task panicked.
    pub async fn wait(self) -> Result<Market, tokio::task::JoinError> {
        let _ = self.server.await;
        if let Some(t) = self.ticker {
            t.abort();
        }
        for t in self.background {
            t.abort();
            let _ = t.await;
        }
        let Running {
            api,
            sequencer,
            campaign,
            ..
        } = self;
        drop(api);
        let market = sequencer.await;
        if let Some(c) = campaign.and_then(|slot| slot.lock().ok().and_then(|mut g| g.take())) {
            if c.is_finished() {
                if let Ok(Some(renewal)) = c.await {
                    // After the final snapshot: a standby takes over at once.
                    let held = renewal.resign().await;
                    tracing::info!(held, "leader lease given up");
                }
            } else {
                c.abort();
            }
        }
        market
    }

    /// Registers a background task to stop at shutdown (before the sequencer drains).
    pub fn add_background(&mut self, task: tokio::task::JoinHandle<()>) {
        self.background.push(task);
    }

    /// Stops accepting, drains and returns the market (graceful shutdown).
    ///
    /// # Errors
    /// The sequencer task panicked.
    pub async fn stop(self) -> Result<Market, tokio::task::JoinError> {
        self.api.begin_shutdown();
        self.http.stop(true).await;
        self.wait().await
    }
}

/// Registers every route: probes, metrics, OpenAPI, the `/v1` API, and optionally
/// `/internal`, with the extractor settings whose errors are
/// [`ApiError`](crate::api::error::ApiError)s ([`crate::api::edge`]). [`start`] wraps the app
/// in the edge's middleware.
pub fn configure(cfg: &mut web::ServiceConfig, api: &Api, internal_api: bool) {
    configure_role(cfg, api, internal_api, crate::cluster::Role::All, None);
}

/// [`configure`] for a process of `role`; with a cluster key, `/internal/forward` too. A
/// process of role `engine` serves probes, metrics and the internal routes only.
pub fn configure_role(
    cfg: &mut web::ServiceConfig,
    api: &Api,
    internal_api: bool,
    role: crate::cluster::Role,
    cluster_key: Option<crate::cluster::ClusterKey>,
) {
    let state = crate::server::AppState {
        sequencer: api.seq.clone(),
        role,
    };
    cfg.app_data(web::Data::new(state))
        .app_data(web::Data::new(api.clone()))
        .app_data(edge::json_config(crate::api::MAX_BODY_BYTES))
        .app_data(edge::query_config())
        .app_data(edge::path_config());
    if let Some(key) = cluster_key {
        cfg.configure(|c| crate::cluster::routes(c, key));
    }
    cfg.configure(|c| crate::server::routes(c, internal_api, role.serves_api()))
        .service(crate::server::resource("/metrics").route(web::get().to(crate::metrics::metrics)));
    if role.serves_api() {
        cfg.configure(crate::api::front::routes)
            .service(
                crate::server::resource("/openapi.json")
                    .route(web::get().to(crate::api::openapi::serve)),
            )
            .configure(crate::api::routes);
    }
}

/// The HTTP server: what actix-web's `HttpServer` builds (`bind` + `listen`), with every
/// accepted connection wrapped in the byte-level front ([`FrontStream`], `api::front`),
/// which `HttpServer` cannot do. One listener per address `opts.listen` resolves to; the
/// address answered is the first one's.
fn http_server(
    opts: &AppOptions,
    api: &Api,
    listeners: Vec<std::net::TcpListener>,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> Result<(actix_web::dev::Server, SocketAddr), StartError> {
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let bind_error = |e| StartError::Bind(opts.listen.clone(), e);
    let addr = listeners[0].local_addr().map_err(bind_error)?;
    let role = opts
        .cluster
        .as_ref()
        .map_or(crate::cluster::Role::All, |c| c.role);
    let cluster_key = match &opts.cluster {
        Some(c) => Some(crate::cluster::ClusterKey::new(&c.key).map_err(StartError::Cluster)?),
        None => None,
    };
    let mut builder = actix_web::dev::Server::build()
        .backlog(LISTEN_BACKLOG)
        .max_concurrent_connections(MAX_CONNECTIONS_PER_WORKER)
        .shutdown_timeout(SHUTDOWN_TIMEOUT_S)
        // actix's own handling makes SIGINT a forced stop; ours is graceful for both signals.
        .disable_signals();
    if opts.workers > 0 {
        builder = builder.workers(opts.workers);
    }
    let stopping = builder.graceful_shutdown_signal();
    for listener in listeners {
        let local = listener.local_addr().map_err(bind_error)?;
        let api = api.clone();
        let internal = opts.internal_api;
        let stopping = stopping.clone();
        let cluster_key = cluster_key.clone();
        let acceptor = acceptor.clone();
        let secure = acceptor.is_some();
        let factory = move || {
            // The edge (`api::edge`), outermost last: non-JSON error answers become the
            // envelope (unknown routes fall to actix's default 404), oversized heads answer
            // 431, and ready responses wait one scheduler turn so that pipelined requests keep
            // being decoded.
            let app = App::new()
                .configure(|cfg| configure_role(cfg, &api, internal, role, cluster_key.clone()))
                .wrap(edge::json_errors())
                .wrap(from_fn(edge::limit_head))
                .wrap(from_fn(edge::answer_pipelined))
                // Outermost: every answer, errors included, carries its `X-Request-Id`.
                .wrap(from_fn(crate::api::request_id::assign))
                .into_factory()
                .map_err(|e: actix_web::Error| e.error_response());
            let stopping = stopping.clone();
            let http = HttpService::build()
                .graceful_shutdown_signal(move || {
                    let stopping = stopping.clone();
                    async move { stopping.notified().await }
                })
                .keep_alive(Duration::from_secs(KEEP_ALIVE_S))
                .client_request_timeout(Duration::from_secs(CLIENT_REQUEST_TIMEOUT_S))
                .client_disconnect_timeout(Duration::from_millis(CLIENT_DISCONNECT_TIMEOUT_MS))
                .h1_allow_half_closed(true)
                .local_addr(local)
                // `AppConfig::new` is crate-private; this is the same constructor, public for
                // actix-test (plain HTTP, the bound address as host).
                .finish(map_config(app, move |()| {
                    AppConfig::__priv_test_new(secure, local.to_string(), local)
                }));
            let acceptor = acceptor.clone();
            fn_service(move |io: actix_web::rt::net::TcpStream| {
                let acceptor = acceptor.clone();
                async move {
                    // Small websocket frames must not wait for the peer's delayed ACK (Nagle:
                    // ~40 ms stalls).
                    let _ = io.set_nodelay(true);
                    let peer = io.peer_addr().ok();
                    let conn = crate::tls::Conn::accept(io, acceptor.as_ref())
                        .await
                        .map_err(DispatchError::Io)?;
                    Ok::<_, DispatchError>((FrontStream::new(conn), Protocol::Http1, peer))
                }
            })
            .and_then(http)
        };
        builder = builder
            .listen(format!("gpux-http-{local}"), listener, factory)
            .map_err(bind_error)?;
    }
    Ok((builder.run(), addr))
}

/// Listening sockets for every address `listen` resolves to, as actix-web binds them
/// (`SO_REUSEADDR`, a backlog of [`LISTEN_BACKLOG`]).
fn bind(listen: &str) -> std::io::Result<Vec<std::net::TcpListener>> {
    use socket2::{Domain, Protocol, Socket, Type};
    use std::net::ToSocketAddrs;
    let mut listeners = Vec::new();
    let mut last_error = None;
    for addr in listen.to_socket_addrs()? {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
            .and_then(|s| {
                s.set_reuse_address(true)?;
                s.bind(&addr.into())?;
                s.listen(i32::try_from(LISTEN_BACKLOG).unwrap_or(i32::MAX))?;
                Ok(s)
            });
        match socket {
            Ok(s) => listeners.push(s.into()),
            Err(e) => last_error = Some(e),
        }
    }
    if listeners.is_empty() {
        return Err(last_error.unwrap_or_else(|| std::io::Error::other("no address")));
    }
    Ok(listeners)
}

/// Recovers the market from `journal` and starts everything.
///
/// # Errors
/// [`StartError`].
pub async fn start(journal: AnyJournal, opts: AppOptions) -> Result<Running, StartError> {
    crate::metrics::install();
    // Bound first: a follower records its own address as the URL it would lead at.
    let listeners = bind(&opts.listen).map_err(|e| StartError::Bind(opts.listen.clone(), e))?;
    let (seq, handle) = match &opts.cluster {
        None => {
            Sequencer::recover(journal, SystemClock, opts.market.clone(), opts.snapshot).await?
        }
        Some(_) => {
            Sequencer::recover_following(journal, SystemClock, opts.market.clone(), opts.snapshot)
                .await?
        }
    };
    tracing::info!(
        last_seq = seq.last_seq(),
        state_hash = %crate::server::hex(&seq.market().state_hash()),
        "market recovered"
    );
    let (seq, campaign) = match &opts.cluster {
        None => (seq, None),
        Some(c) => {
            let local = listeners[0]
                .local_addr()
                .map_err(|e| StartError::Bind(opts.listen.clone(), e))?;
            let (seq, slot) = join_cluster(seq, c, local).await?;
            (seq, Some(slot))
        }
    };
    let sequencer = sequencer::spawn(seq);
    let ticker = (opts.tick_ms > 0).then(|| {
        let h = handle.clone();
        let period = Duration::from_millis(opts.tick_ms.max(10));
        tokio::spawn(async move {
            let mut interval =
                tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                interval.tick().await;
                // Only the leader ticks (a follower's tick would be forwarded to it).
                if !h.is_leading() {
                    continue;
                }
                if let Err(e) = h.submit(Op::Tick).await {
                    tracing::warn!(error = %e, "tick not committed");
                }
            }
        })
    });
    let api = Api::new(handle, opts.api.clone()).await?;
    if opts.hold_ready {
        api.ready.store(false, std::sync::atomic::Ordering::Release);
    }
    if opts.cluster.as_ref().is_none_or(|c| c.role.serves_api()) {
        api.check_pdf_font();
    }
    let mut watchers = Vec::new();
    let internal = opts.internal_api;
    let tls = match &opts.tls {
        Some(files) => {
            let reloader = crate::tls::CertReloader::new(&files.cert, &files.key)?;
            watchers.push(reloader.watch());
            Some(reloader.server_config()?)
        }
        None => None,
    };
    let (server, addr) = http_server(&opts, &api, listeners, tls)?;
    let http = server.handle();
    if opts.handle_signals {
        let h = http.clone();
        let api = api.clone();
        tokio::spawn(async move {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            let mut sigterm = async || match term.as_mut() {
                Some(t) => {
                    t.recv().await;
                }
                None => std::future::pending::<()>().await,
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: stopping gracefully"),
                _ = sigterm() => tracing::info!("SIGTERM: stopping gracefully"),
            }
            api.begin_shutdown();
            // Connections get up to the shutdown timeout to finish. A second signal exits at
            // once, as a crash would: every acknowledged command is already in the journal, and
            // the next start replays what the skipped final snapshot would have covered.
            // (actix handles no second stop command while a graceful one is under way.)
            tokio::select! {
                _ = h.stop(true) => {}
                _ = tokio::signal::ctrl_c() => {
                    tracing::warn!("second SIGINT: exiting now; the next start replays the journal");
                    std::process::exit(130);
                }
                _ = sigterm() => {
                    tracing::warn!("second SIGTERM: exiting now; the next start replays the journal");
                    std::process::exit(143);
                }
            }
        });
    }
    tracing::info!(listen = %addr, internal_api = internal, tls = opts.tls.is_some(), "listening");
    Ok(Running {
        addr,
        api,
        http,
        server: tokio::spawn(server),
        sequencer,
        ticker,
        background: watchers,
        campaign,
    })
}

/// The lease campaign of this process, replaced at each rejoin: answers the renewal once won.
type CampaignSlot =
    Arc<std::sync::Mutex<Option<tokio::task::JoinHandle<Option<crate::leadership::Renewal>>>>>;

/// Makes `seq` a follower of the shared journal: its tail, its forwarder, and (roles that may
/// lead) the lease campaign, recording `http://<local>` or the advertised URL. The same steps
/// run again when a leader steps down ([`sequencer::follow::Follow::rejoin`]).
async fn join_cluster<J: crate::journal::Journal + 'static>(
    seq: Sequencer<J, SystemClock>,
    c: &ClusterOptions,
    local: SocketAddr,
) -> Result<(Sequencer<J, SystemClock>, CampaignSlot), StartError> {
    let forward = crate::cluster::Forwarder::connect(c.redis.clone(), c.key.clone())
        .await
        .map_err(|e| StartError::Cluster(e.to_string()))?
        .into_forward();
    let slot: CampaignSlot = Arc::default();
    let url = c
        .advertise_url
        .clone()
        .unwrap_or_else(|| format!("http://{local}"));
    let rejoin: sequencer::follow::Rejoin = {
        let c = c.clone();
        let slot = slot.clone();
        Arc::new(move |after| {
            let (c, slot, url, forward) = (c.clone(), slot.clone(), url.clone(), forward.clone());
            Box::pin(async move { follow_from(&c, after, &slot, url, forward).await })
        })
    };
    let mut follow = rejoin(seq.last_seq()).await.map_err(StartError::Cluster)?;
    follow.rejoin = Some(rejoin);
    Ok((seq.follow(follow), slot))
}

/// One [`sequencer::follow::Follow`] from `after`: a new tail, and a new campaign (stored in
/// `slot`) whose lost lease fires the follow's `lost`.
async fn follow_from(
    c: &ClusterOptions,
    after: u64,
    slot: &CampaignSlot,
    url: String,
    forward: sequencer::follow::Forward,
) -> Result<sequencer::follow::Follow, String> {
    let tail_journal = crate::journal::RedisJournal::connect(c.redis.clone())
        .await
        .map_err(|e| e.to_string())?;
    let (pages, healthy, _tail) = sequencer::follow::tail(tail_journal, after);
    let lost = Arc::new(tokio::sync::Notify::new());
    let lead = if c.role.may_lead() {
        let fire = lost.clone();
        let (rx, task) = crate::leadership::campaign(
            c.redis.clone(),
            crate::leadership::owner_id(),
            c.lease,
            url,
            move |why| {
                tracing::error!(reason = %why, "lost the leader lease: stepping down");
                fire.notify_one();
            },
        );
        if let Ok(mut g) = slot.lock()
            && let Some(old) = g.replace(task)
        {
            old.abort();
        }
        Some(rx)
    } else {
        None
    };
    let fatal = c.on_fatal.clone();
    Ok(sequencer::follow::Follow {
        pages,
        healthy,
        forward,
        lead,
        on_fatal: Box::new(move |why| fatal(why)),
        lost: Some(lost),
        rejoin: None,
    })
}
