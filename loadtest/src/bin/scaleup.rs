//! `scaleup` — issue 16's scale-up benchmark (秒级弹性扩缩, 1 卡到 1000 卡): with N simulated
//! node agents (default 1,000, one GPU each) whose provision hooks take a seeded uniform 0–2 s,
//! how long after `gpux bid --gpus 1000 --placement spread` every lease is running, and what
//! the fleet's heartbeats cost the server while idle. Goal: every GPU running within 5 s of the
//! bid plus the slowest provisioning delay drawn.
//!
//! ```text
//! cargo build --release -p gateway --bin gateway -p gpux-cli -p loadtest --bin scaleup
//! target/release/scaleup                               # 1,000 agents, 3 runs, ~6 min
//! target/release/scaleup --agents 20 --runs 1 --idle-s 5   # smoke, < 60 s
//! ```
//!
//! Everything runs on this machine:
//! - the server: the release `gateway` binary as a child process (`gateway`: embedded journal
//!   in a temp dir, free port, rate limits out of the way, default heartbeat settings), so its
//!   CPU is read from `/proc/PID/stat` apart from the agents';
//! - the fleet: N agents in this process through the agent library's `run` (`fleet`: simulated
//!   GPUs, a node key each, default heartbeat period with jitter, a shell provision hook per
//!   lease that sleeps the node's drawn delay), one offer per node;
//! - the buyer: a websocket connected before the bid (`feed`) and the real CLI, `gpux bid …
//!   --wait`, as a child process (`bid`; `--bid-via client` uses the typed client instead).
//!
//! A run (`run`): the fleet idle and fully listed → the idle window (`--idle-s`, default a
//! minute: heartbeats/s, commands/s, CPU) → the bid → every lease's `lease_ready` → the CLI's
//! exit → release every lease and wait until every node is wiped and listed again. The next
//! run starts from that state, on the same server and agents: a real exchange is not restarted
//! between two scale-ups, and a restart would also restart 1,000 agents (registration,
//! websockets), which is not what is measured. Each run draws new delays (seed, run).
//!
//! Per lease it also splits the time into phases: the provision hook notes when it started and
//! when its sleep ended (`fleet`), so dispatch (acknowledgement → hook started), the hook, and
//! reporting (sleep ended → `lease_ready`) are told apart; and the machine's CPU is sampled every
//! 250 ms through the scale-up. `--no-hooks` is a diagnostic: the agents' simulated delivery
//! (ready at once, no hook process, no delay) separates the hook processes' cost from the rest.
//!
//! Output: a few lines per run, a summary table, and `--out` (default `scaleup.json`) with
//! every figure, per lease too (`report`). Measures and their sources: `measure`. Results and
//! what limits them: docs/benchmarks.md, "Scale-up".
//!
//! Layout: `gateway` (the server child), `fleet` (accounts, agents, offers, waits), `feed` (the
//! buyer's websocket), `bid` (CLI or client), `run` (one run), `measure` (/proc, /metrics),
//! `report` (figures, table, JSON).

#[path = "scaleup/bid.rs"]
mod bid;
#[path = "scaleup/feed.rs"]
mod feed;
#[path = "scaleup/fleet.rs"]
mod fleet;
#[path = "scaleup/gateway.rs"]
mod gateway;
#[path = "scaleup/measure.rs"]
mod measure;
#[path = "scaleup/report.rs"]
mod report;
#[path = "scaleup/run.rs"]
mod run;

use anyhow::{Context, bail};
use bid::{BidCtx, BidVia};
use clap::Parser;
use gpux_client::wire::DecimalStr;
use serde::Serialize;
use std::path::PathBuf;

/// Most GPUs one bid may ask for (`exchange::limits::MAX_BID_GPUS`).
const MAX_BID_GPUS: u64 = 1024;

/// Issue 16's scale-up benchmark: N simulated agents, one spread bid for all their GPUs.
#[derive(Parser, Debug, Clone, Serialize)]
#[command(about)]
struct Args {
    /// Node agents (one node each), all in this process.
    #[arg(long, default_value_t = 1000)]
    agents: usize,
    /// Simulated GPUs per node (1..=16); the bid asks for agents × this (at most 1,024).
    #[arg(long, default_value_t = 1)]
    gpus_per_node: u32,
    /// Runs (bid, all ready, release, wipes) on the same server and agents.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Largest provisioning delay, ms: each node's hook sleeps a uniform 0..=this per run.
    #[arg(long, default_value_t = 2000)]
    provision_max_ms: u64,
    /// Seed of the delays.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// The JSON report.
    #[arg(long, default_value = "scaleup.json")]
    out: PathBuf,
    /// Idle window before each bid, s (heartbeat load, idle CPU).
    #[arg(long, default_value_t = 60)]
    idle_s: u64,
    /// Longest wait for every lease to be ready, s after the acknowledgement.
    #[arg(long, default_value_t = 180)]
    ready_timeout_s: u64,
    /// Catalog SKU of the simulated GPUs.
    #[arg(long, default_value = "RTX4090-24G")]
    sku: String,
    /// Offer price, CNY per GPU-hour (the SKU's reference price by default).
    #[arg(long, default_value = "1.98")]
    offer_price: String,
    /// Bid limit price, CNY per GPU-hour.
    #[arg(long, default_value = "2.50")]
    bid_price: String,
    /// Diagnostic: no hooks — the agents' simulated delivery reports ready at once (no hook
    /// process, no delay), to separate the hook processes' cost from the rest.
    #[arg(long)]
    no_hooks: bool,
    /// Place the bid with the real CLI or the typed client.
    #[arg(long, value_enum, default_value_t = BidVia::Cli)]
    bid_via: BidVia,
    /// The gateway binary [default: `gateway` beside this binary].
    #[arg(long)]
    gateway_bin: Option<PathBuf>,
    /// The gpux binary [default: `gpux` beside this binary].
    #[arg(long)]
    gpux_bin: Option<PathBuf>,
}

impl Args {
    fn check(&self) -> anyhow::Result<()> {
        if self.agents == 0 || self.runs == 0 {
            bail!("--agents and --runs must be at least 1");
        }
        if !(1..=16).contains(&self.gpus_per_node) {
            bail!("--gpus-per-node is 1..=16");
        }
        if self.total_gpus() > MAX_BID_GPUS {
            bail!(
                "one bid asks for at most {MAX_BID_GPUS} GPUs: --agents × --gpus-per-node is {}",
                self.total_gpus()
            );
        }
        Ok(())
    }

    fn total_gpus(&self) -> u64 {
        self.agents as u64 * u64::from(self.gpus_per_node)
    }

    /// `name` from `flag`, else beside this binary.
    fn binary(flag: &Option<PathBuf>, name: &str) -> anyhow::Result<PathBuf> {
        if let Some(p) = flag {
            return Ok(p.clone());
        }
        let me = std::env::current_exe().context("locating this binary")?;
        Ok(me.with_file_name(name))
    }
}

/// The JSON report.
#[derive(Serialize)]
struct Report<'a> {
    args: &'a Args,
    started_at_ms: u128,
    cores: usize,
    load_average_at_start: String,
    gateway_bin: PathBuf,
    gpux_bin: Option<PathBuf>,
    agent_state_dir: PathBuf,
    setup_s: f64,
    summary: report::Summary,
    /// Why the benchmark stopped early, if it did (the runs before are kept).
    error: Option<String>,
    runs: &'a [report::RunResult],
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    args.check()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async {
        tokio::select! {
            r = bench(&args) => r,
            _ = tokio::signal::ctrl_c() => bail!("interrupted"),
        }
    })
}

async fn bench(args: &Args) -> anyhow::Result<()> {
    let gateway_bin = Args::binary(&args.gateway_bin, "gateway")?;
    let gpux_bin = Args::binary(&args.gpux_bin, "gpux")?;
    let load_average_at_start = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let started_at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let work = tempfile::Builder::new().prefix("gpux-scaleup-").tempdir()?;
    let admin_key = format!(
        "gpux_scaleup_{:016x}{:016x}",
        rand::random::<u64>(),
        rand::random::<u64>()
    );
    let setup = tokio::time::Instant::now();
    let mut gw = gateway::Gateway::start(&gateway_bin, work.path(), &admin_key).await?;
    eprintln!(
        "gateway at {} (pid {}), work dir {}",
        gw.base,
        gw.pid,
        work.path().display()
    );
    let accounts = fleet::accounts(&gw.base, &admin_key).await?;
    let spec = fleet::Spec {
        agents: args.agents,
        gpus_per_node: args.gpus_per_node,
        sku: args.sku.clone(),
        offer_price: decimal(&args.offer_price, "--offer-price")?,
        hooks: !args.no_hooks,
    };
    let mut fleet = fleet::Fleet::start(spec, &gw.base, &accounts.supplier, work.path()).await?;
    fleet.wait_listed(&accounts.supplier).await?;
    let setup_s = setup.elapsed().as_secs_f64();
    eprintln!(
        "{} agents registered and listed in {setup_s:.1} s",
        args.agents
    );
    let mut results = Vec::new();
    let outcome = run_all(
        args,
        &mut gw,
        &mut fleet,
        &accounts,
        &gpux_bin,
        work.path(),
        &mut results,
    )
    .await;
    let agent_state_dir = fleet.state_dir.clone();
    fleet.stop().await;
    gw.stop().await;
    let summary = report::Summary::of(&results);
    report::print_summary(&summary);
    let report = Report {
        args,
        started_at_ms,
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        load_average_at_start: load_average_at_start.trim().to_string(),
        gateway_bin,
        gpux_bin: (args.bid_via == BidVia::Cli).then_some(gpux_bin),
        agent_state_dir,
        setup_s,
        summary,
        error: outcome.as_ref().err().map(|e| format!("{e:#}")),
        runs: &results,
    };
    std::fs::write(&args.out, serde_json::to_vec_pretty(&report)?)
        .with_context(|| format!("writing {}", args.out.display()))?;
    eprintln!("wrote {}", args.out.display());
    outcome
}

async fn run_all(
    args: &Args,
    gw: &mut gateway::Gateway,
    fleet: &mut fleet::Fleet,
    accounts: &fleet::Accounts,
    gpux_bin: &std::path::Path,
    work: &std::path::Path,
    results: &mut Vec<report::RunResult>,
) -> anyhow::Result<()> {
    let probe = measure::Probe::new(&gw.base, gw.pid)?;
    let settings = run::Settings {
        seed: args.seed,
        provision_max_ms: if args.no_hooks {
            0
        } else {
            args.provision_max_ms
        },
        idle_s: args.idle_s,
        ready_timeout_s: args.ready_timeout_s,
        sku: args.sku.clone(),
        gpus: u32::try_from(args.total_gpus())?,
        bid_price: decimal(&args.bid_price, "--bid-price")?,
        bid_via: args.bid_via,
    };
    let ssh_key_file = work.join("id_ed25519.pub");
    std::fs::write(&ssh_key_file, format!("{}\n", bid::SSH_KEY))?;
    let mut ctx = run::Ctx {
        settings: &settings,
        probe: &probe,
        fleet,
        accounts,
        bid: BidCtx {
            gpux: gpux_bin,
            base: &gw.base,
            buyer_key: &accounts.buyer_key,
            buyer: &accounts.buyer,
            ssh_key_file: &ssh_key_file,
            dir: work,
        },
    };
    for r in 0..args.runs {
        let result = run::run_once(&mut ctx, r).await?;
        let stop = result.release_error.is_some();
        results.push(result);
        if stop {
            eprintln!("stopping after run {r}: the fleet did not come back after the release");
            break;
        }
    }
    gw.check_alive()
}

fn decimal(s: &str, flag: &str) -> anyhow::Result<DecimalStr> {
    s.parse()
        .map_err(|e| anyhow::anyhow!("{flag} {s:?} is not a decimal price: {e:?}"))
}
