//! The `gateway` server binary: loads the layered configuration (defaults, `gpux.toml` or
//! `--config`, `GPUX_*` env, flags), recovers the market from its journal (embedded store by
//! default, Redis with `--redis-url`), optionally creates the demo market, serves the API and
//! shuts down gracefully on Ctrl-C / SIGTERM (stop accepting, drain, final snapshot).

use anyhow::Context;
use clap::Parser;
use gateway::accounts::{Role, hash_key};
use gateway::app::{AppOptions, start};
use gateway::cluster::Role as ProcessRole;
use gateway::config::Settings;
use gateway::journal::{AnyJournal, EmbeddedJournal, JournalError, RedisConfig, RedisJournal};
use gateway::leadership::{self, Renewal};
use gateway::market::Op;
use gateway::sequencer::SnapshotPolicy;
use serde::Serialize;
use std::path::PathBuf;

/// GPU-capacity exchange server. Every flag can also be set in the config file or as a
/// `GPUX_*` environment variable.
#[derive(Parser, Debug, Serialize)]
#[command(version, about)]
struct Args {
    /// TOML configuration file (default: ./gpux.toml when it exists).
    #[arg(long, env = "GPUX_CONFIG")]
    #[serde(skip)]
    config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:8080].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    listen: Option<String>,
    /// Data directory of the embedded journal [default: ./gpux-data].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    data_dir: Option<PathBuf>,
    /// Redis URL (e.g. redis://127.0.0.1:6379); switches the journal to Redis Streams.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    redis_url: Option<String>,
    /// --redis-url names a Redis Cluster: seed nodes, comma-separated
    /// (redis://10.0.0.1:7000,redis://10.0.0.2:7000).
    #[arg(long)]
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    redis_cluster: bool,
    /// Key prefix in Redis [default: gpux].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    redis_prefix: Option<String>,
    /// Refuse to start when Redis has AOF persistence off.
    #[arg(long)]
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    require_aof: bool,
    /// Redis replicas that must confirm each append before it is acknowledged (WAIT)
    /// [default: 0].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    redis_wait_replicas: Option<u32>,
    /// Limit on that wait, ms [default: 500].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    redis_wait_ms: Option<u64>,
    /// Leader lease on a Redis journal, ms: a second gateway on the same journal waits as a
    /// standby and takes over this long after the leader stops renewing [default: 2000].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    lease_ms: Option<u64>,
    /// On a Redis journal shared by several processes: all (lead or stand by, serve the API),
    /// engine (lead or stand by, no public API) or api (follow, serve, forward) [default: all].
    #[arg(long, value_enum)]
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<RoleArg>,
    /// Shared secret of the processes on one Redis journal (prefer the GPUX_CLUSTER_KEY env
    /// var): with it this process follows the journal as a hot standby or API process and
    /// forwards commands to the leader.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    cluster_key: Option<String>,
    /// This process's URL as the others reach it [default: http://<listen address>].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    advertise_url: Option<String>,
    /// TLS certificate chain (PEM): with --tls-key, serve HTTPS and WSS (reloaded on change).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    tls_cert: Option<PathBuf>,
    /// The TLS certificate's private key (PEM).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    tls_key: Option<PathBuf>,
    /// Tick period, ms; 0 = no ticks [default: 1000].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    tick_ms: Option<u64>,
    /// HTTP worker threads; 0 = one per CPU core [default: 0].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    workers: Option<usize>,
    /// Snapshot after this many commands [default: 100000].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    snapshot_every: Option<u64>,
    /// Expose /internal/ops and /internal/state.
    #[arg(long)]
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    internal_api: bool,
    /// Log as JSON lines.
    #[arg(long)]
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    log_json: bool,
    /// Create (or revive) a demo market and print its API keys.
    #[arg(long)]
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    demo: bool,
    /// Register this admin API key at start (prefer the GPUX_ADMIN_KEY env var).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    admin_key: Option<String>,
}

/// `--role` (the same names as the configuration's `role`).
#[derive(Clone, Copy, Debug, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
enum RoleArg {
    All,
    Engine,
    Api,
}

/// Exit status of a follower whose replica cannot go on (it fell behind a trimmed journal,
/// or read a gap): a restart recovers from the snapshot.
const EXIT_REPLICA_BROKEN: i32 = 70;

/// The cluster settings of a process on a shared Redis journal, or `None` for a process that
/// owns its journal (the embedded store; Redis without a cluster key: a cold standby).
fn cluster_options(s: &Settings) -> anyhow::Result<Option<gateway::app::ClusterOptions>> {
    let Some(url) = &s.redis_url else {
        if s.role != ProcessRole::All || s.cluster_key.is_some() {
            anyhow::bail!(
                "role {} and cluster_key need a Redis journal (--redis-url): the embedded store \
                 belongs to one process",
                s.role.as_str()
            );
        }
        return Ok(None);
    };
    let Some(key) = s.cluster_key.clone() else {
        if s.role != ProcessRole::All {
            anyhow::bail!(
                "role {} needs cluster_key (GPUX_CLUSTER_KEY): the shared secret its commands \
                 are forwarded to the leader with",
                s.role.as_str()
            );
        }
        return Ok(None);
    };
    gateway::cluster::ClusterKey::new(&key).map_err(anyhow::Error::msg)?;
    if s.demo && s.role == ProcessRole::Api {
        anyhow::bail!("--demo needs a process that may lead (role all)");
    }
    let redis = redis_config(s, url);
    Ok(Some(gateway::app::ClusterOptions {
        redis,
        role: s.role,
        key,
        advertise_url: s.advertise_url.clone(),
        lease: leadership::lease_of(s.lease_ms).map_err(anyhow::Error::msg)?,
        on_fatal: std::sync::Arc::new(|why| {
            tracing::error!(reason = %why, "the replica cannot follow the journal: stopping (a restart recovers from the snapshot)");
            std::process::exit(EXIT_REPLICA_BROKEN);
        }),
    }))
}

/// The Redis journal's settings from the configuration.
fn redis_config(s: &Settings, url: &str) -> RedisConfig {
    let mut cfg = RedisConfig::new(url.to_string());
    cfg.cluster = s.redis_cluster;
    cfg.prefix = s.redis_prefix.clone();
    cfg.require_aof = s.require_aof;
    cfg.wait_replicas = s.redis_wait_replicas;
    cfg.wait_timeout = std::time::Duration::from_millis(s.redis_wait_ms.max(1));
    cfg
}

/// Opens the journal. On Redis, leads it first — waiting as a standby while another gateway
/// leads (`gateway::leadership`) — and keeps the lease with a [`Renewal`]; a lost lease
/// exits the process with `EXIT_LEASE_LOST` (fail-stop: nothing acknowledged is lost, and a
/// restart rejoins as a standby).
async fn open_journal(
    s: &Settings,
    following: bool,
) -> anyhow::Result<(AnyJournal, Option<Renewal>)> {
    Ok(match &s.redis_url {
        Some(url) if following => {
            let cfg = redis_config(s, url);
            let journal = connect_waiting(cfg)
                .await
                .with_context(|| format!("connecting to Redis at {url}"))?;
            (journal.into(), None)
        }
        Some(url) => {
            let lease = leadership::lease_of(s.lease_ms).map_err(anyhow::Error::msg)?;
            let cfg = redis_config(s, url);
            let mut journal = connect_waiting(cfg.clone())
                .await
                .with_context(|| format!("connecting to Redis at {url}"))?;
            let owner = leadership::owner_id();
            let epoch = leadership::lead(&mut journal, &owner, lease, "")
                .await
                .context("taking the journal's leader lease")?;
            let token = journal
                .fencing_token()
                .map(str::to_string)
                .context("no fencing token after leading")?;
            let renewal = Renewal::spawn(cfg, token, lease, move |why| {
                tracing::error!(epoch, reason = %why, "lost the leader lease: stopping (a restart rejoins as a standby)");
                std::process::exit(leadership::EXIT_LEASE_LOST);
            })
            .await
            .context("starting the lease renewal")?;
            (journal.into(), Some(renewal))
        }
        None => {
            std::fs::create_dir_all(&s.data_dir)
                .with_context(|| format!("creating {}", s.data_dir.display()))?;
            match EmbeddedJournal::open(&s.data_dir, 0).await {
                Ok(j) => (j.into(), None),
                Err(e) if e.to_string().contains("already open") => anyhow::bail!(
                    "data directory {} is in use by another gateway process",
                    s.data_dir.display()
                ),
                Err(e) => {
                    return Err(anyhow::Error::new(e)
                        .context(format!("opening the journal in {}", s.data_dir.display())));
                }
            }
        }
    })
}

/// How long a starting process waits for Redis to answer (a restart loading its AOF answers
/// `LOADING` for seconds), s: then it exits, saying why.
const REDIS_START_WAIT_S: u64 = 60;

/// [`RedisJournal::connect`], retried every 500 ms for up to [`REDIS_START_WAIT_S`] while
/// Redis is unavailable (not reachable yet, or loading its dataset: issue 25, a gateway
/// started during the load exited blaming its configuration). A configuration error (AOF
/// off with `--require-aof`, a bad prefix, a refused password) fails at once.
async fn connect_waiting(cfg: RedisConfig) -> Result<RedisJournal, JournalError> {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(REDIS_START_WAIT_S);
    loop {
        match RedisJournal::connect(cfg.clone()).await {
            Err(JournalError::Unavailable(e)) if std::time::Instant::now() < until => {
                tracing::warn!(error = %e, "redis is not available yet; retrying");
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            }
            other => return other,
        }
    }
}

/// Makes sure an admin can sign in: registers `--admin-key`, or creates an `admin` account
/// with a printed key when there is none.
async fn bootstrap_admin(api: &gateway::api::Api, key: Option<&str>) -> anyhow::Result<()> {
    let admin = api
        .read(|m, _| {
            m.accounts()
                .iter()
                .find(|a| a.role == Role::Admin)
                .map(|a| a.id)
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if admin.is_none() && !api.seq.is_leading() {
        // A follower on a shared journal: the leader creates the admin account (two
        // processes creating one each would make two).
        tracing::info!("no admin account yet: the leading process creates it");
        return Ok(());
    }
    match (admin, key) {
        (_, Some(key)) => {
            let id = match admin {
                Some(id) => id,
                None => api
                    .submit(Op::CreateAccount {
                        name: "admin".into(),
                        role: Role::Admin,
                        key_hash: None,
                    })
                    .await
                    .map_err(|e| anyhow::anyhow!("{e}"))?
                    .outcome
                    .account
                    .context("creating the admin account")?,
            };
            if api.auth.lookup(key).is_none() {
                let c = api
                    .submit(Op::AddApiKey {
                        account: id,
                        key_hash: hash_key(key),
                    })
                    .await
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                if let Some(r) = &c.outcome.refusal {
                    // Another process on the same journal registered it meanwhile.
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    if api.auth.lookup(key).is_some() {
                        return Ok(());
                    }
                    anyhow::bail!("registering the admin key: {}", r.message);
                }
                api.auth.insert(
                    hash_key(key),
                    gateway::api::auth::Principal {
                        account: id,
                        role: Role::Admin,
                        key_id: c.outcome.key_id.clone().unwrap_or_default(),
                        node: None,
                    },
                );
            }
        }
        (None, None) => {
            let key = gateway::accounts::new_key();
            create_admin(api, &key).await?;
            println!("Created the admin account. Its API key (shown once, keep it):\n  {key}");
        }
        (Some(_), None) => {}
    }
    Ok(())
}

/// Creates the admin account with `key`. A creation whose outcome is unknown (the journal
/// answered 503: say, `--redis-wait-replicas` with a replica still syncing) is settled by the
/// sequencer within ms: if it was written after all, the admin account now exists and `key`
/// is its key (only the leader creates one), else it is sent again, for up to
/// [`BOOTSTRAP_WAIT_S`]. Before, the process exited and the key, created later, was never
/// printed.
async fn create_admin(api: &gateway::api::Api, key: &str) -> anyhow::Result<()> {
    let op = Op::CreateAccount {
        name: "admin".into(),
        role: Role::Admin,
        key_hash: Some(hash_key(key)),
    };
    let started = std::time::Instant::now();
    loop {
        let e = match api.submit(op.clone()).await {
            Ok(c) => match &c.outcome.refusal {
                None => return Ok(()),
                Some(r) => anyhow::bail!("creating the admin account: {}", r.message),
            },
            Err(e) => e,
        };
        tracing::warn!(error = %e, "creating the admin account: outcome unknown; checking");
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let exists = api
            .read(|m, _| m.accounts().iter().any(|a| a.role == Role::Admin))
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        if exists {
            return Ok(());
        }
        if started.elapsed().as_secs() >= BOOTSTRAP_WAIT_S {
            anyhow::bail!("creating the admin account: {e}");
        }
    }
}

/// [`bootstrap_admin`], retried while no process leads yet (a follower's first commands are
/// forwarded: the leader may be taking over), for up to [`BOOTSTRAP_WAIT_S`].
async fn bootstrap_with_retries(api: &gateway::api::Api, key: Option<&str>) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    loop {
        match bootstrap_admin(api, key).await {
            Err(e) if !api.seq.is_leading() && started.elapsed().as_secs() < BOOTSTRAP_WAIT_S => {
                tracing::info!(error = %e, "waiting for a leader to register the admin key");
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            }
            other => return other,
        }
    }
}

/// The server's allocator: mimalloc. Every request allocates its head, body, wire types and
/// answer, and a follower applies every command again; glibc's malloc and free were 17 % of
/// an API process's CPU under `topology` (docs/benchmarks.md, "Topology").
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How long a starting process waits for a leader to take its admin bootstrap, s.
const BOOTSTRAP_WAIT_S: u64 = 60;

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let s = Settings::load(args.config.as_deref(), &args)?;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if s.log_json {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init();
    } else {
        tracing_subscriber::fmt().with_env_filter(filter).init();
    }
    let cluster = cluster_options(&s)?;
    let (journal, renewal) = open_journal(&s, cluster.is_some()).await?;
    let mut running = start(
        journal,
        AppOptions {
            listen: s.listen.clone(),
            tick_ms: s.tick_ms,
            snapshot: SnapshotPolicy {
                every_commands: s.snapshot_every,
                ..SnapshotPolicy::default()
            },
            internal_api: s.internal_api,
            // `--demo` prints filing-shaped invoices: demo seller details unless configured.
            api: if s.demo {
                gateway::demo::with_demo_seller(s.api.clone())
            } else {
                s.api.clone()
            },
            workers: s.workers,
            handle_signals: true,
            market: {
                let mut m = gateway::market::MarketConfig::delivered();
                if s.verification || s.demo {
                    m.verification = Some(exchange::verify::VerifyConfig::default());
                }
                m
            },
            cluster,
            tls: match (&s.tls_cert, &s.tls_key) {
                (Some(cert), Some(key)) => Some(gateway::app::TlsFiles {
                    cert: cert.clone(),
                    key: key.clone(),
                }),
                (None, None) => None,
                _ => anyhow::bail!("tls_cert and tls_key go together: give both or neither"),
            },
            // Ready once the admin account (and the demo market) exist (issue 25).
            hold_ready: true,
        },
    )
    .await?;
    if s.role.may_lead() && s.cluster_key.is_some() {
        // A process that may lead campaigns first: wait a lease for the outcome, so that the
        // first process of a new cluster (which leads) creates the admin account.
        let until =
            std::time::Instant::now() + std::time::Duration::from_millis(s.lease_ms + 1_000);
        while !running.api.seq.is_leading() && std::time::Instant::now() < until {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
    bootstrap_with_retries(&running.api, s.admin_key.as_deref()).await?;
    let scheme = if s.tls_cert.is_some() {
        "https"
    } else {
        "http"
    };
    let base = format!("{scheme}://{}", running.addr);
    if s.demo {
        let (keys, agents) = gateway::demo::setup(&running.api, &s.data_dir)
            .await
            .map_err(|e| anyhow::anyhow!("demo market: {e}"))?;
        running.add_background(agents);
        println!(
            "\nDemo market ready at {base} (store: {}).",
            match &s.redis_url {
                Some(u) => format!("Redis {u}"),
                None => format!("embedded, {}", s.data_dir.display()),
            }
        );
        println!(
            "API keys (the same on every start on this data; kept in {}):",
            s.data_dir.join(gateway::demo::DEMO_KEYS_FILE).display()
        );
        for (role, name, key) in &keys {
            println!("  {:<9} {:<20} {key}", role.as_str(), name);
        }
        println!("\nFor the README's examples:");
        for (var, key) in gateway::demo::exports(&keys, s.admin_key.as_deref()) {
            println!("  export {var}={key}");
        }
        if let Some((_, _, buyer)) = keys.iter().find(|(r, _, _)| *r == Role::Buyer) {
            // Over TLS with a private certificate, curl needs it (issue 25): the served chain
            // (a self-signed certificate, or a chain that includes its CA) is what to trust.
            let curl = match &s.tls_cert {
                Some(cert) => format!("curl -s --cacert {}", cert.display()),
                None => "curl -s".to_string(),
            };
            println!("\nTry:");
            println!("  {curl} '{base}/v1/inventory?sku=H100-80G'");
            println!("  {curl} -H 'Authorization: Bearer {buyer}' {base}/v1/balance");
            println!(
                "  {curl} -H 'Authorization: Bearer {buyer}' -H 'Content-Type: application/json' \\"
            );
            println!(
                "       -d '{{\"client_order_id\":\"try-{}\",\"sku\":\"RTX4090-24G\",\"gpus\":1,\"limit_price\":\"2.50\",\"kind\":\"spot\",\"time_in_force\":\"ioc\",\"launch\":{{\"ssh_keys\":[\"{}\"]}}}}' {base}/v1/bids",
                gateway::api::now_ms() % 1_000_000,
                gateway::demo::DEMO_SSH_KEY
            );
            println!(
                "  {curl} -H 'Authorization: Bearer {buyer}' '{base}/v1/leases?state=all'   # provisioning → active (access.ssh_command) → ended (teardown record)"
            );
            println!(
                "  The demo's node agents deliver each lease within a few seconds; {} never does: its lease fails over after {} s at no charge.",
                gateway::demo::DEMO_BROKEN_NODE,
                gateway::demo::DEMO_BROKEN_PROVISION_S
            );
            println!("  API reference: {base}/openapi.json and docs/api.md\n");
        }
    } else {
        println!("Listening on {base}");
    }
    running.api.mark_ready();
    let market = running.wait().await.context("sequencer task")?;
    if let Some(renewal) = renewal {
        // After the final snapshot: a standby takes over at once.
        let held = renewal.resign().await;
        tracing::info!(held, "leader lease given up");
    }
    tracing::info!(
        state_hash = %gateway::server::hex(&market.state_hash()),
        engine_commands = market.engine().last_seq(),
        "stopped: queue drained; final snapshot attempted (a failure is logged above)"
    );
    Ok(())
}
