//! The `gateway` server binary: recovers the market from its journal (embedded store by default,
//! Redis with `--redis-url`), runs the sequencer, a ticker and the HTTP server, and shuts down
//! gracefully (stop accepting, drain, final snapshot).

use anyhow::Context;
use clap::Parser;
use gateway::journal::{AnyJournal, EmbeddedJournal, RedisConfig, RedisJournal};
use gateway::market::{MarketConfig, Op};
use gateway::sequencer::{self, Sequencer, SnapshotPolicy, SystemClock};
use gateway::server::{AppState, routes};
use std::path::PathBuf;
use std::time::Duration;

/// GPU-capacity exchange server.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Address to listen on.
    #[arg(long, env = "GPUX_LISTEN", default_value = "127.0.0.1:8080")]
    listen: String,
    /// Data directory of the embedded journal (used when no Redis URL is given).
    #[arg(long, env = "GPUX_DATA_DIR", default_value = "./gpux-data")]
    data_dir: PathBuf,
    /// Redis URL (e.g. redis://127.0.0.1:6379); switches the journal to Redis Streams.
    #[arg(long, env = "GPUX_REDIS_URL")]
    redis_url: Option<String>,
    /// Key prefix in Redis.
    #[arg(long, env = "GPUX_REDIS_PREFIX", default_value = "gpux")]
    redis_prefix: String,
    /// Refuse to start when Redis has AOF persistence off (otherwise a loud warning).
    #[arg(long, env = "GPUX_REQUIRE_AOF")]
    require_aof: bool,
    /// Tick period, ms (time advancement, accrual, insufficient-funds ends); 0 = no ticks.
    #[arg(long, env = "GPUX_TICK_MS", default_value_t = 1000)]
    tick_ms: u64,
    /// Snapshot after this many commands.
    #[arg(long, env = "GPUX_SNAPSHOT_EVERY", default_value_t = 100_000)]
    snapshot_every: u64,
    /// Expose /internal/ops and /internal/state (operations tooling, crash tests).
    #[arg(long, env = "GPUX_INTERNAL_API")]
    internal_api: bool,
    /// Log as JSON lines.
    #[arg(long, env = "GPUX_LOG_JSON")]
    log_json: bool,
}

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if args.log_json {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init();
    } else {
        tracing_subscriber::fmt().with_env_filter(filter).init();
    }

    let journal: AnyJournal = match &args.redis_url {
        Some(url) => {
            let mut cfg = RedisConfig::new(url.clone());
            cfg.prefix = args.redis_prefix.clone();
            cfg.require_aof = args.require_aof;
            RedisJournal::connect(cfg)
                .await
                .with_context(|| format!("connecting to Redis at {url}"))?
                .into()
        }
        None => {
            std::fs::create_dir_all(&args.data_dir)
                .with_context(|| format!("creating {}", args.data_dir.display()))?;
            match EmbeddedJournal::open(&args.data_dir, 0).await {
                Ok(j) => j.into(),
                Err(e) if e.to_string().contains("already open") => anyhow::bail!(
                    "data directory {} is in use by another gateway process",
                    args.data_dir.display()
                ),
                Err(e) => {
                    return Err(anyhow::Error::new(e).context(format!(
                        "opening the journal in {}",
                        args.data_dir.display()
                    )));
                }
            }
        }
    };
    let policy = SnapshotPolicy {
        every_commands: args.snapshot_every,
        ..SnapshotPolicy::default()
    };
    let (seq, handle) = Sequencer::recover(journal, SystemClock, MarketConfig::default(), policy)
        .await
        .context("recovering the market from the journal")?;
    tracing::info!(
        last_seq = seq.last_seq(),
        state_hash = %gateway::server::hex(&seq.market().state_hash()),
        "market recovered"
    );
    let task = sequencer::spawn(seq);

    // Ticks advance time, accrue and end leases for insufficient funds; 0 turns them off
    // (tests and audits that compare states across restarts).
    let ticker = (args.tick_ms > 0).then(|| {
        let h = handle.clone();
        let period = Duration::from_millis(args.tick_ms.max(10));
        tokio::spawn(async move {
            let mut interval =
                tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            loop {
                interval.tick().await;
                if let Err(e) = h.submit(Op::Tick).await {
                    tracing::warn!(error = %e, "tick not committed");
                }
            }
        })
    });

    let state = AppState {
        sequencer: handle.clone(),
    };
    let internal = args.internal_api;
    let server = actix_web::HttpServer::new(move || {
        actix_web::App::new()
            .app_data(actix_web::web::Data::new(state.clone()))
            .configure(|cfg| routes(cfg, internal))
            .default_service(actix_web::web::to(gateway::server::not_found))
    })
    .bind(&args.listen)
    .with_context(|| format!("binding {}", args.listen))?
    .shutdown_timeout(10);
    tracing::info!(listen = %args.listen, internal_api = internal, "listening");
    server.run().await?;

    tracing::info!("shutting down: draining the sequencer and taking a final snapshot");
    if let Some(t) = ticker {
        t.abort();
    }
    drop(handle);
    let market = task.await.context("sequencer task")?;
    tracing::info!(
        state_hash = %gateway::server::hex(&market.state_hash()),
        engine_commands = market.engine().last_seq(),
        "stopped cleanly (final snapshot taken)"
    );
    Ok(())
}
