//! # loadtest — a realistic GPU market under load
//!
//! Builds a seeded market from the catalog's reference prices (suppliers with 1–8-GPU node
//! fleets across regions, node agents heartbeating and delivering leases, some nodes failing
//! and coming back; buyers on websockets bidding with a launch spec from what their inventory
//! feed shows and releasing leases), drives it at an open-loop arrival rate for a fixed
//! duration, lets deliveries settle, has finance pull the period's reports, then checks the
//! market through the API and writes a summary, `result.json` and `report.html` (charts). A
//! failed check exits non-zero.
//!
//! The market delivers (docs/market-rules.md §11): a fill provisions until the node's agent
//! reports it ready (billed from then), a share of leases are reported failed or never
//! reported (ending `not_delivered` and failing over, the node held until its supplier
//! resumes it), and every ended lease's GPUs wipe until reported torn down.
//!
//! The market verifies its suppliers (docs/market-rules.md §12, issue 26): the exchange
//! places a verification run on each node at its first listing; the agents answer with
//! figures their node's seeded plan picks (most `verified`, some `degraded`, a few failing or
//! never answering their first run, then held, resumed and verified again), a share of buyers
//! require `verified` or a `min_reliability` on their bids, and the checks judge that no such
//! bid filled on a node that did not meet it and that no run was billed, sold or listed.
//!
//! The market places gangs (docs/market-rules.md §13, issue 27): suppliers register their
//! nodes on fabric domains of 4–8 nodes (a few on none), `--gang-share` of the buyers' bids
//! are all-or-none gangs of 2–4 nodes (most scoped to one domain, some to one region), their
//! members delivered by the agents as any lease (waiting, unbilled, for the rest); the checks
//! judge that no gang filled in part, that every member bills from the moment its gang was
//! whole (and nothing of a gang that never was), and that the members' lease views name their
//! gang; the report gives the gang figures.
//!
//! Layout: [`scenario`] (seeded plan), [`supplier`] (setup, node agents delivering leases,
//! failures), [`buyer`] (websocket buyers, launch specs, views, phantom judgement), [`stats`]
//! (histograms, series), [`checks`], [`report`]. Every REST call and websocket message goes
//! through the typed client `gpux-client` and the wire types of `gpux-wire`.
//!
//! Modes: self-contained (default: starts the gateway in process on a free port with the
//! embedded store in a temp dir), `--topology cluster` (starts Redis, two engines and two API
//! processes of the release binary and drives the API processes: [`topology`]; `--kill-leader-at`
//! and `--kill-api-at` kill one mid-run, and the run rides through), or `--target URL[,URL…]
//! --admin-key KEY` against a running exchange. `--network-scale` is issue 18's scenario:
//! 10,000 node agents heartbeating every 5 s and 1,000 buyer websockets.

mod buyer;
mod checks;
mod report;
mod scenario;
mod stats;
mod supplier;
mod topology;

use anyhow::Context;
use clap::Parser;
use gpux_client::wire::ws::ServerMsg;
use gpux_client::wire::{CreateAccountRequest, DecimalStr, Role};
use gpux_client::{Client, ClientError, ReportQuery, WsOptions};
use rand::{RngExt, SeedableRng};
use rust_decimal::Decimal;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// Drive a realistic GPU market against the gateway and report.
#[derive(Parser, Debug, serde::Serialize)]
#[command(version, about)]
struct Args {
    /// Gateway base URL; without it the gateway runs in process on a free port. Several
    /// comma-separated URLs (the API processes of one exchange, `gateway/scripts/cluster.sh`)
    /// spread the buyers and suppliers over them, each moving to the next when its process
    /// dies (the run rides through a leader or API-process kill).
    #[arg(long)]
    target: Option<String>,
    /// Where the exchange runs without --target: `in-process` (one gateway in this process,
    /// embedded store) or `cluster` (Redis, two engines and two API processes of
    /// --gateway-bin, as child processes).
    #[arg(long, value_enum, default_value = "in-process")]
    topology: TopologyArg,
    /// The release gateway binary of --topology cluster.
    #[arg(long, default_value = "target/release/gateway")]
    gateway_bin: std::path::PathBuf,
    /// --topology cluster: SIGKILL the leading engine this many seconds into the measured
    /// run (the takeover time is reported).
    #[arg(long)]
    kill_leader_at: Option<u64>,
    /// --topology cluster: SIGKILL the first API process this many seconds into the measured
    /// run (its clients move to the other).
    #[arg(long)]
    kill_api_at: Option<u64>,
    /// Issue 18's network-scale scenario: 40 suppliers × 250 nodes (10,000 node agents)
    /// heartbeating every 5 s and 1,000 buyers; overrides --suppliers, --nodes-per-supplier,
    /// --buyers and --heartbeat-ms.
    #[arg(long)]
    network_scale: bool,
    /// Heartbeat period of every node agent, ms.
    #[arg(long, default_value_t = supplier::HEARTBEAT_MS)]
    heartbeat_ms: u64,
    /// Admin API key of the target gateway (needed with --target).
    #[arg(long, env = "GPUX_ADMIN_KEY")]
    #[serde(skip)]
    admin_key: Option<String>,
    /// Measured duration, seconds.
    #[arg(long, default_value_t = 30)]
    duration: u64,
    /// Bid arrivals per second (open loop, Poisson).
    #[arg(long, default_value_t = 300.0)]
    rate: f64,
    /// Stop after this many arrivals (0: only the duration bounds the run).
    #[arg(long, default_value_t = 0)]
    count: u64,
    /// Scenario seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Suppliers.
    #[arg(long, default_value_t = 8)]
    suppliers: usize,
    /// Nodes per supplier.
    #[arg(long, default_value_t = 25)]
    nodes_per_supplier: usize,
    /// Buyers (one websocket each).
    #[arg(long, default_value_t = 24)]
    buyers: usize,
    /// Share of nodes that fail once and come back.
    #[arg(long, default_value_t = 0.1)]
    flaky: f64,
    /// Share of the buyers' bids that are all-or-none gangs (docs/market-rules.md §13).
    #[arg(long, default_value_t = buyer::GANG_SHARE)]
    gang_share: f64,
    /// Provisioning deadline of every offer, s (`provision_s`): a lease not reported ready
    /// by then ends not delivered and fails over.
    #[arg(long, default_value_t = 5)]
    provision_s: u32,
    /// Shortest provisioning time of the node agents, ms.
    #[arg(long, default_value_t = 200)]
    ready_min_ms: u64,
    /// Longest provisioning time of the node agents, ms (keep it below the deadline).
    #[arg(long, default_value_t = 3_000)]
    ready_max_ms: u64,
    /// Share of leases the agents report failed (after provisioning a while).
    #[arg(long, default_value_t = 0.05)]
    fail_share: f64,
    /// Share of leases the agents never report (the provisioning deadline ends them).
    #[arg(long, default_value_t = 0.02)]
    timeout_share: f64,
    /// Shortest wipe of an ended lease's GPUs before the torn-down report, ms.
    #[arg(long, default_value_t = 200)]
    wipe_min_ms: u64,
    /// Longest wipe, ms.
    #[arg(long, default_value_t = 1_500)]
    wipe_max_ms: u64,
    /// How long a supplier leaves a held node held before resuming it, ms.
    #[arg(long, default_value_t = 3_000)]
    resume_after_ms: u64,
    /// The in-process gateway does not verify nodes (docs/market-rules.md §12.2): no
    /// verification runs, every node `off`, no trust bid can take `verified` capacity.
    #[arg(long)]
    no_verification: bool,
    /// Deadline of a verification run in the in-process gateway, s (the server's default is
    /// 1,800): a run left unanswered fails this long after it was placed. A `--topology
    /// cluster` gateway runs the default, and its agents then answer every run.
    #[arg(long, default_value_t = 15)]
    verify_deadline_s: u32,
    /// Shortest time a node agent's verification checks take before the report, ms.
    #[arg(long, default_value_t = 300)]
    verify_min_ms: u64,
    /// Longest time the checks take, ms.
    #[arg(long, default_value_t = 1_500)]
    verify_max_ms: u64,
    /// Node agents do not open the supplier websocket: they learn of work only from the
    /// heartbeat answer's `leases_version` and the node's lease list (up to a heartbeat period
    /// later, so give them a longer --provision-s).
    #[arg(long)]
    no_supplier_ws: bool,
    /// After the arrivals, wait at most this long (s) for deliveries, wipes and holds to
    /// settle before the checks.
    #[arg(long, default_value_t = 45)]
    settle_s: u64,
    /// Output directory for result.json and report.html.
    #[arg(long, default_value = "loadtest-report")]
    out: std::path::PathBuf,
    /// No progress bar (for CI logs).
    #[arg(long)]
    quiet: bool,
}

/// `--topology`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
enum TopologyArg {
    /// One gateway in this process.
    InProcess,
    /// Redis, two engines and two API processes.
    Cluster,
}

/// Starts the gateway in process; answers its base URL, an admin key and the handle.
async fn in_process(
    dir: &std::path::Path,
    verify_deadline_s: Option<u32>,
) -> anyhow::Result<(String, String, gateway::app::Running)> {
    let journal = gateway::journal::EmbeddedJournal::open(dir, 0).await?;
    let mut opts = gateway::app::AppOptions {
        workers: 2,
        market: loadtest_market(verify_deadline_s),
        ..gateway::app::AppOptions::default()
    };
    opts.api.rate_per_s = 1_000_000;
    opts.api.rate_burst = 1_000_000;
    let running = gateway::app::start(journal.into(), opts).await?;
    let (_, key, _) = gateway::api::admin::create_account_with_key(
        &running.api,
        None,
        "loadtest-admin",
        gateway::accounts::Role::Admin,
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok((format!("http://{}", running.addr), key, running))
}

fn main() -> anyhow::Result<()> {
    run(Args::parse())
}

/// The whole load test for `args`: an error when it could not run or a check failed.
fn run(mut args: Args) -> anyhow::Result<()> {
    if args.network_scale {
        args.suppliers = 40;
        args.nodes_per_supplier = 250;
        args.buyers = 1_000;
        args.heartbeat_ms = 5_000;
    }
    if args.topology != TopologyArg::Cluster
        && (args.kill_leader_at.is_some() || args.kill_api_at.is_some())
    {
        anyhow::bail!("--kill-leader-at and --kill-api-at need --topology cluster");
    }
    // (A second run in one process, as the smoke test's, keeps the first subscriber.)
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
        .try_init();
    let clients = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let handle = clients.handle().clone();
    let ok = actix_web::rt::System::new().block_on(async move {
        let dir = tempfile::tempdir()?;
        let mut cluster = None;
        let (base, admin_key, running) = match (&args.target, args.topology) {
            (Some(t), _) => (
                t.clone(),
                args.admin_key
                    .clone()
                    .context("--target needs --admin-key (or GPUX_ADMIN_KEY)")?,
                None,
            ),
            (None, TopologyArg::Cluster) => {
                let t =
                    topology::Topology::start(&args.gateway_bin, &args.out.join("logs")).await?;
                let base = t.api_urls();
                println!(
                    "topology: 2 engines and 2 API processes ({base}); logs in {}",
                    args.out.join("logs").display()
                );
                cluster = Some(std::sync::Arc::new(tokio::sync::Mutex::new(t)));
                (base, topology::ADMIN_KEY.to_string(), None)
            }
            (None, TopologyArg::InProcess) => {
                let deadline = (!args.no_verification).then_some(args.verify_deadline_s);
                let (b, k, r) = in_process(dir.path(), deadline).await?;
                (b, k, Some(r))
            }
        };
        let ok = handle
            .spawn(drive(args, base, admin_key, cluster))
            .await
            .context("load task")??;
        if let Some(r) = running {
            r.stop().await?;
        }
        anyhow::Ok(ok)
    })?;
    drop(clients);
    if !ok {
        anyhow::bail!("a check failed (see the summary)");
    }
    Ok(())
}

async fn drive(
    args: Args,
    base: String,
    admin_key: String,
    cluster: Option<std::sync::Arc<tokio::sync::Mutex<topology::Topology>>>,
) -> anyhow::Result<bool> {
    let in_process = args.target.is_none() && cluster.is_none();
    // The exchange runs on this machine (in process or as child processes): its clock is ours.
    let shared_clock = args.target.is_none();
    let run_id = format!("{:x}", buyer::now_ms());
    let admin = Client::new(&base, Some(admin_key))?;
    let plan = scenario::build(
        args.seed,
        args.suppliers,
        args.nodes_per_supplier,
        args.buyers,
        args.flaky,
    );
    let stats = stats::Stats::new();
    // Accounts (names carry the run id so runs against one gateway do not collide).
    println!(
        "setting up {} suppliers × {} nodes, {} buyers on {base}",
        args.suppliers, args.nodes_per_supplier, args.buyers
    );
    let account = |name: String, role: Role| {
        let admin = admin.clone();
        async move {
            admin
                .create_account(&CreateAccountRequest {
                    name: name.clone(),
                    role,
                })
                .await
                .with_context(|| format!("account {name}"))
        }
    };
    let mut setups = Vec::new();
    for (i, s) in plan.suppliers.iter().enumerate() {
        let created = account(format!("{}-{run_id}", s.name), Role::Supplier).await?;
        let api = Client::new(&spread(&base, i), Some(created.api_key))?;
        let s = s.clone();
        let provision_s = args.provision_s;
        setups.push(tokio::spawn(async move {
            let nodes = supplier::setup(&api, &s, provision_s).await?;
            anyhow::Ok((api, nodes))
        }));
    }
    let mut fleets = Vec::new();
    for s in setups {
        fleets.push(s.await??);
    }
    // Where each node is, for judging the gangs' places.
    let places: std::collections::HashMap<String, checks::NodePlace> = fleets
        .iter()
        .enumerate()
        .flat_map(|(i, (_, nodes))| {
            nodes.iter().map(move |n| {
                let place = checks::NodePlace {
                    supplier: i,
                    domain: n.domain.clone(),
                    region: n.region.clone(),
                };
                (n.id.clone(), place)
            })
        })
        .collect();
    let fin = account(format!("lt-finance-{run_id}"), Role::Finance).await?;
    // A long run's reports take a while to build: a wider bound than the client's default.
    let finance = admin
        .with_key(&fin.api_key)?
        .with_timeout(Duration::from_secs(REPORT_TIMEOUT_S));
    let mut buyers_api = Vec::new();
    for (i, b) in plan.buyers.iter().enumerate() {
        let created = account(format!("{}-{run_id}", b.name), Role::Buyer).await?;
        let id = &created.account.id;
        admin
            .deposit(
                id,
                DecimalStr(Decimal::new(100_000_000, 2)),
                &format!("lt-{run_id}-{id}"),
            )
            .await
            .with_context(|| format!("deposit to {}", b.name))?;
        buyers_api.push(Client::new(&spread(&base, i), Some(created.api_key))?);
    }

    let (stop_tx, stop_rx) = watch::channel(false);
    let (done_tx, done_rx) = watch::channel(false);
    let duration = Duration::from_secs(args.duration);
    let behaviour = supplier::Behaviour {
        ready_ms: (args.ready_min_ms, args.ready_max_ms.max(args.ready_min_ms)),
        fail_share: args.fail_share.clamp(0.0, 1.0),
        timeout_share: args.timeout_share.clamp(0.0, 1.0),
        wipe_ms: (args.wipe_min_ms, args.wipe_max_ms.max(args.wipe_min_ms)),
        resume_after_ms: args.resume_after_ms,
        heartbeat_ms: args.heartbeat_ms,
        verify_ms: (
            args.verify_min_ms,
            args.verify_max_ms.max(args.verify_min_ms),
        ),
        shared_clock,
    };
    if args.ready_max_ms >= u64::from(args.provision_s) * 1000 {
        println!(
            "note: --ready-max-ms {} is not below --provision-s {}: some ready reports will miss the deadline",
            args.ready_max_ms, args.provision_s
        );
    }
    let mut agents = Vec::new();
    let mut idles = Vec::new();
    let suppliers: Vec<Client> = fleets.iter().map(|(api, _)| api.clone()).collect();
    for (i, (api, nodes)) in fleets.into_iter().enumerate() {
        let (idle_tx, idle_rx) = watch::channel(false);
        idles.push(idle_rx);
        agents.push(tokio::spawn(supplier::agents(
            api,
            !args.no_supplier_ws,
            nodes,
            duration,
            args.seed ^ (i as u64 + 1) << 20,
            behaviour,
            stats.clone(),
            idle_tx,
            done_rx.clone(),
        )));
    }
    // Watches the nodes' listings through the run and the settling: nothing wiping, held or
    // under verification is listed (and every view read goes to the trust log).
    let (watch_stop_tx, watch_stop_rx) = watch::channel(false);
    let listing_watch = tokio::spawn(checks::watch_listings(
        suppliers.clone(),
        stats.clone(),
        shared_clock,
        watch_stop_rx,
    ));
    let mut buyers = Vec::new();
    let mut arrivals = Vec::new();
    let mut probes = Vec::new();
    for (i, (b, api)) in plan.buyers.iter().zip(&buyers_api).enumerate() {
        let (atx, arx) = mpsc::unbounded_channel();
        let (ptx, prx) = mpsc::channel(64);
        arrivals.push(atx);
        probes.push((b.skus.clone(), ptx));
        buyers.push(tokio::spawn(buyer::run(
            format!("b{i}"),
            api.clone(),
            b.skus.clone(),
            b.trust,
            args.gang_share.clamp(0.0, 1.0),
            args.seed.wrapping_mul(31).wrapping_add(i as u64),
            arx,
            prx,
            stats.clone(),
            stop_rx.clone(),
            done_rx.clone(),
        )));
    }
    // A monitor subscribed to every SKU records the inventory depth each second.
    let monitor = tokio::spawn(monitor(
        admin.clone(),
        plan.skus.clone(),
        stats.clone(),
        done_rx.clone(),
    ));
    // Let every buyer get its snapshots, then start the clock.
    tokio::time::sleep(Duration::from_millis(500)).await;
    if let Ok(mut s) = stats.lock() {
        s.start = Instant::now();
    }
    let bar = if args.quiet {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(args.duration)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} s {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    // The kills of --topology cluster, at their times into the measured run.
    let mut kills = Vec::new();
    if let Some(t) = &cluster {
        for (at, leader) in [(args.kill_leader_at, true), (args.kill_api_at, false)] {
            let (Some(at), t, stats) = (at, t.clone(), stats.clone()) else {
                continue;
            };
            kills.push(tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(at)).await;
                let mut t = t.lock().await;
                let event = if leader {
                    match t.kill_leader().await {
                        Ok(took) => {
                            if let Ok(mut s) = stats.lock() {
                                s.takeover_ms = Some(took.as_millis() as u64);
                            }
                            format!(
                                "{at} s: leader SIGKILLed; the standby led {} ms later",
                                took.as_millis()
                            )
                        }
                        Err(e) => format!("{at} s: leader kill: {e}"),
                    }
                } else {
                    match t.kill_api(0) {
                        Some(url) => format!("{at} s: API process {url} SIGKILLed"),
                        None => format!("{at} s: no API process to kill"),
                    }
                };
                if let Ok(mut s) = stats.lock() {
                    s.events.push(event);
                }
            }));
        }
    }
    // Open-loop Poisson arrivals: each has a scheduled time; latency counts from it.
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed ^ 0xA11);
    let start = Instant::now();
    let mut next = start;
    let mut sent = 0u64;
    let mut last_tick = 0;
    while start.elapsed() < duration && (args.count == 0 || sent < args.count) {
        let u: f64 = rng.random_range(f64::MIN_POSITIVE..1.0);
        next += Duration::from_secs_f64(-u.ln() / args.rate.max(0.001));
        tokio::time::sleep_until(next.into()).await;
        let b = rng.random_range(0..arrivals.len());
        let _ = arrivals[b].send(next);
        sent += 1;
        let secs = start.elapsed().as_secs();
        if secs != last_tick {
            last_tick = secs;
            bar.set_position(secs);
            if let Ok(s) = stats.lock() {
                let acked: u64 = s.lat.values().map(|h| h.len()).sum();
                let p99 = s
                    .lat
                    .get("place_bid")
                    .map_or(0.0, |h| h.value_at_quantile(0.99) as f64 / 1000.0);
                bar.set_message(format!(
                    "{acked} acked, bid p99 {p99:.1} ms, phantom {}/{}",
                    s.phantom, s.fillable_iocs
                ));
            }
        }
    }
    bar.finish_and_clear();
    let measured = start.elapsed().as_secs_f64();
    if let Ok(mut s) = stats.lock() {
        s.scheduled = sent;
        s.end = Some(Instant::now());
    }
    drop(arrivals);
    for k in kills {
        let _ = k.await;
    }
    stop_tx.send(true)?;
    // Let deliveries settle: every agent idle (no report due, no lease pending or
    // provisioning, nothing wiping, no node held or silent) for a second, or `settle_s`.
    let settle_start = Instant::now();
    let settle_cap = Duration::from_secs(args.settle_s);
    let mut idle_since: Option<Instant> = None;
    while settle_start.elapsed() < settle_cap {
        if idles.iter().all(|i| *i.borrow()) {
            let since = *idle_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= Duration::from_secs(1) {
                break;
            }
        } else {
            idle_since = None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let settled = idles.iter().all(|i| *i.borrow());
    let settle_s = settle_start.elapsed().as_secs_f64();
    println!(
        "deliveries {} after {settle_s:.1} s",
        if settled {
            "settled"
        } else {
            "still moving (cap reached)"
        }
    );
    // Let replies, expiries and deltas settle.
    tokio::time::sleep(Duration::from_secs(2)).await;
    watch_stop_tx.send(true)?;
    let listings = listing_watch.await.context("listing watch")?;

    // Finance pulls the period's reports (the JSON statements are kept for the verification
    // check: no run may be named in them).
    let mut pulled = Vec::new();
    let mut statements = Vec::new();
    for (kind, fmt) in [
        ("buyer-statements", "json"),
        ("supplier-payouts", "json"),
        ("platform-summary", "json"),
        ("trial-balance", "json"),
        ("platform-summary", "csv"),
        ("trial-balance", "xlsx"),
    ] {
        let t = Instant::now();
        let q = ReportQuery {
            from: Some("2020-01-01".into()),
            format: Some(fmt.into()),
            ..ReportQuery::default()
        };
        let bytes = finance
            .report(kind, &q)
            .await
            .with_context(|| format!("report {kind}.{fmt}"))?;
        if fmt == "json" && matches!(kind, "buyer-statements" | "supplier-payouts") {
            statements.push((format!("{kind}.{fmt}"), bytes.to_vec()));
        }
        pulled.push((
            format!("{kind}.{fmt}"),
            bytes.len(),
            t.elapsed().as_secs_f64() * 1000.0,
        ));
    }

    // Checks.
    let mut results = Vec::new();
    results.push(checks::fresh_subscriber_agrees(&admin, &plan.skus, &probes).await?);
    let mut listed = Vec::new();
    for api in &buyers_api {
        let bids = api.bids().await.context("listing bids")?.bids;
        listed.push(
            bids.into_iter()
                .map(|b| (b.id, b.client_order_id))
                .collect::<std::collections::HashMap<_, _>>(),
        );
    }
    let leases = checks::all_leases(&buyers_api).await?;
    let nodes_at_end = checks::final_node_views(&suppliers, &stats, shared_clock).await?;
    let inventory_check = if in_process {
        Some(checks::inventory_matches_nodes(&admin, &plan.skus, &suppliers).await?)
    } else {
        None
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    done_tx.send(true)?;
    let mut reports = Vec::new();
    for b in buyers {
        reports.push(b.await??);
    }
    for a in agents {
        let _ = a.await;
    }
    let _ = monitor.await;
    results.push(checks::no_gpu_leased_twice(&reports));
    results.push(checks::bids_accounted(&reports, &listed));
    results.push(checks::no_feed_gaps(&reports));
    results.push(checks::trial_balance(&finance).await?);
    results.push(checks::invoice_run(&finance, &format!("lt-close-{run_id}")).await?);
    results.push(checks::ledger_consistent(&admin).await?);
    results.push(checks::billed_from_ready(&leases, in_process));
    results.push(checks::not_delivered_failed_over(&leases, &reports));
    results.push(checks::gangs_all_or_none(&leases, &reports, &places));
    results.push(checks::gangs_billed_together(&leases, &reports));
    results.push(checks::gang_views_match(&leases, &reports));
    results.push(checks::no_listing_while_wiping(&listings));
    results.extend(inventory_check);
    let (trust_check, trust_leases, unbilled, trust_bids) = {
        let s = stats.lock().map_err(|_| anyhow::anyhow!("stats"))?;
        let (c, by) = checks::trust_bids_met(&leases, &reports, &s.trust);
        let u = checks::verification_unbilled(&s.trust, &leases, &statements, &listings);
        (c, by, u, s.trust_bids.clone())
    };
    results.push(trust_check);
    results.push(unbilled);
    let verification = {
        let s = stats.lock().map_err(|_| anyhow::anyhow!("stats"))?;
        checks::verification_facts(&s.trust, nodes_at_end, trust_bids, trust_leases)
    };
    let delivery = checks::delivery_facts(&leases, &reports);
    let gangs = checks::gang_facts(&leases, &reports);
    let phantom_check = {
        let s = stats.lock().map_err(|_| anyhow::anyhow!("stats"))?;
        checks::Check {
            name: "no phantom inventory",
            ok: s.phantom == 0,
            detail: format!(
                "{} phantom of {} fillable IOC bids",
                s.phantom, s.fillable_iocs
            ),
        }
    };
    results.push(phantom_check);

    let settings = serde_json::to_value(&args)?;
    let s = stats.lock().map_err(|_| anyhow::anyhow!("stats"))?;
    let r = report::result(
        &s,
        settings,
        measured,
        pulled,
        results,
        report::Settling {
            settled,
            seconds: settle_s,
        },
        delivery,
        verification,
        gangs,
    );
    report::print_summary(&r);
    std::fs::create_dir_all(&args.out)?;
    std::fs::write(args.out.join("result.json"), serde_json::to_vec_pretty(&r)?)?;
    std::fs::write(args.out.join("report.html"), report::html(&r, &s))?;
    println!(
        "\nwrote {} and {}",
        args.out.join("result.json").display(),
        args.out.join("report.html").display()
    );
    Ok(r.checks.iter().all(|c| c.ok))
}

/// `base` (one URL or several, comma-separated) with its URLs rotated by `i`: client `i`
/// starts on the `i`-th API process and fails over to the others in turn.
fn spread(base: &str, i: usize) -> String {
    let urls: Vec<&str> = base
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .collect();
    if urls.len() < 2 {
        return base.to_string();
    }
    let k = i % urls.len();
    urls[k..]
        .iter()
        .chain(&urls[..k])
        .copied()
        .collect::<Vec<_>>()
        .join(",")
}

/// Bound of one finance report request, s (the client's default bounds every other call).
const REPORT_TIMEOUT_S: u64 = 300;

/// Follows every SKU's inventory on an anonymous websocket until `done` and records each
/// SKU's depth once a second. Ends early when the connection fails (the depth chart then
/// stops).
async fn monitor(
    client: Client,
    skus: Vec<String>,
    stats: stats::Shared,
    mut done: watch::Receiver<bool>,
) {
    let anonymous = WsOptions {
        anonymous: true,
        ..WsOptions::default()
    };
    let Ok(mut ws) = client.connect_ws_with(anonymous).await else {
        return;
    };
    for sku in &skus {
        if ws.subscribe(sku, None).await.is_err() {
            return;
        }
    }
    let mut views: std::collections::BTreeMap<String, buyer::View> = Default::default();
    let mut every = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            m = ws.next() => {
                let applied = match m {
                    Ok(ServerMsg::InventorySnapshot(s)) => {
                        views.entry(s.sku.clone()).or_default().apply_snapshot(&s).is_ok()
                    }
                    Ok(ServerMsg::InventoryDelta(d)) => {
                        views.entry(d.sku.clone()).or_default().apply_delta(&d).is_ok()
                    }
                    Ok(_) | Err(ClientError::Decode(_)) => true,
                    Err(_) => false,
                };
                if !applied {
                    return;
                }
            }
            _ = every.tick() => {
                if let Ok(mut s) = stats.lock() {
                    for (sku, v) in &views { s.depth(sku, v.depth()); }
                }
            }
            _ = done.changed() => return,
        }
    }
}

/// The market the in-process gateway runs: the server's delivering market (leases provision
/// until reported ready and are billed from then; ended leases wipe until torn down), with
/// verification runs whose deadline is `verify_deadline_s` (none: off).
fn loadtest_market(verify_deadline_s: Option<u32>) -> gateway::market::MarketConfig {
    let mut m = gateway::market::MarketConfig::delivered();
    m.verification = verify_deadline_s.map(|d| exchange::verify::VerifyConfig {
        deadline_s: d.max(1),
        ..exchange::verify::VerifyConfig::default()
    });
    m
}

#[cfg(test)]
mod tests {
    use super::spread;

    #[test]
    fn clients_start_on_the_api_processes_in_turn() {
        assert_eq!(spread("http://a", 3), "http://a");
        assert_eq!(
            spread("http://a,http://b,http://c", 0),
            "http://a,http://b,http://c"
        );
        assert_eq!(
            spread("http://a, http://b,http://c", 4),
            "http://b,http://c,http://a"
        );
        assert_eq!(spread("http://a,http://b", 5), "http://b,http://a");
    }
}

/// The load test end to end, small, in this process (it was an integration test of its own,
/// which made cargo build every binary of the crate for the test run).
#[cfg(test)]
mod smoke {
    // The load test end to end, small: it starts the gateway in process, drives a seeded market
    // for a few seconds, pulls the reports, runs every check and writes its files. The result
    // must show real traffic, zero phantom inventory, leases delivered (and some not, failed
    // over), nodes verified (and some degraded, some failing a run and verified again), trust
    // bids filled only where they may, and every check passing.
    use super::{Args, run};
    use clap::Parser;

    #[test]
    fn a_short_run_passes_every_check_and_writes_its_report() {
        let out = tempfile::tempdir().unwrap();
        let out_dir = out.path().to_str().unwrap();
        let args = Args::parse_from([
            "loadtest",
            "--duration",
            "6",
            "--rate",
            "120",
            "--suppliers",
            "4",
            // 16 nodes a supplier: fabric domains of several nodes of one SKU, so gangs fill.
            "--nodes-per-supplier",
            "16",
            "--buyers",
            "6",
            "--quiet",
            "--flaky",
            "0.2",
            // Gangs (issue 27): more of them, on fleets whose domains hold several nodes.
            "--gang-share",
            "0.2",
            // Runs left unanswered fail (and are verified again) within the test.
            "--verify-deadline-s",
            "8",
            "--out",
            out_dir,
        ]);
        run(args).expect("the load test runs and every check passes");
        let r: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.path().join("result.json")).unwrap())
                .unwrap();
        assert!(r["acked"].as_u64().unwrap() > 500, "{}", r["acked"]);
        assert!(r["scheduled"].as_u64().unwrap() > 600);
        assert!(r["leases"].as_u64().unwrap() > 0);
        assert!(r["fillable_iocs"].as_u64().unwrap() > 50);
        assert_eq!(r["phantom"], 0);
        let checks = r["checks"].as_array().unwrap();
        assert_eq!(checks.len(), 17);
        assert!(checks.iter().all(|c| c["ok"] == true), "{checks:?}");
        // The month-end invoice run (issue 17) billed the buyers that leased.
        let invoices = (checks.iter())
            .find(|c| c["name"] == "invoice run bills each buyer its trial-balance debits")
            .expect("the invoice run");
        assert!(
            invoices["detail"]
                .as_str()
                .unwrap_or("")
                .contains("buyer invoices"),
            "{invoices}"
        );
        let d = &r["delivery"];
        assert!(d["time_to_ready"]["count"].as_u64().unwrap() > 0, "{d}");
        assert!(d["time_to_ready"]["p50_ms"].as_f64().unwrap() > 0.0, "{d}");
        assert!(d["leases"]["ready"].as_u64().unwrap() > 0, "{d}");
        assert!(d["leases"]["not_delivered"].as_u64().unwrap() > 0, "{d}");
        assert!(d["agents"]["torn_down"].as_u64().unwrap() > 0, "{d}");
        assert_eq!(d["agents"]["without_launch"], 0, "{d}");
        let rate = d["delivery_rate"].as_f64().unwrap();
        assert!(rate > 0.5 && rate < 1.0, "{d}");
        let names: Vec<&str> = r["latency"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["command"].as_str().unwrap())
            .collect();
        assert!(
            names.contains(&"place_bid") && names.contains(&"heartbeat"),
            "{names:?}"
        );
        // Supplier trust (issue 26): runs answered and judged, every kind of result, trust bids
        // placed and some filled, and the two trust checks among those that passed.
        let v = &r["verification"];
        assert_eq!(v["enabled"], true, "{v}");
        let n = |x: &serde_json::Value| x.as_u64().unwrap_or(0);
        assert!(n(&v["runs"]) >= 64, "a run per node at least: {v}");
        assert!(n(&v["reported"]) > 0 && n(&v["left_unanswered"]) > 0, "{v}");
        for outcome in ["verified", "degraded", "failed"] {
            assert!(n(&v["results"][outcome]) > 0, "{outcome}: {v}");
        }
        assert!(n(&v["failures_by_kind"]["timeout"]) > 0, "{v}");
        assert!(n(&v["duration"]["count"]) > 0, "{v}");
        assert!(v["duration"]["p50_ms"].as_f64().unwrap() > 0.0, "{v}");
        assert!(n(&v["trust_leases"]["verified"]) > 0, "{v}");
        assert!(
            v["trust_bids"]
                .as_object()
                .unwrap()
                .keys()
                .any(|k| k.contains("min_reliability")),
            "{v}"
        );
        for name in [
            "no trust bid filled on a node that did not meet it",
            "no verification run billed, sold or listed",
        ] {
            assert!(checks.iter().any(|c| c["name"] == name), "{name}");
        }
        // Gangs (issue 27): placed, some filled whole and became ready, the three gang checks
        // among those that passed.
        let g = &r["gangs"];
        assert!(n(&g["placed"]) > 0, "{g}");
        assert!(n(&g["filled"]) > 0 && n(&g["whole"]) > 0, "{g}");
        assert!(n(&g["members"]) >= 2 * n(&g["filled"]), "{g}");
        assert!(n(&g["time_to_ready"]["count"]) > 0, "{g}");
        assert!(g["time_to_ready"]["p50_ms"].as_f64().unwrap() > 0.0, "{g}");
        for name in [
            "no gang partly filled",
            "no gang member billed before its gang was whole",
            "gang members' lease views name their gang",
        ] {
            assert!(checks.iter().any(|c| c["name"] == name), "{name}");
        }
        let html = std::fs::read_to_string(out.path().join("report.html")).unwrap();
        assert!(html.contains("<h2>Gangs</h2>"));
        assert!(html.contains("<h2>Verification</h2>"));
        assert!(html.contains("<svg") && html.contains("inventory depth per SKU"));
        assert!(html.contains("<h2>Delivery</h2>") && html.contains("time to ready"));
    }
}
