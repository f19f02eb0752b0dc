//! `topology` — issue 18's side-by-side benchmark: one gateway process against a leader with
//! two API processes (`--role engine` + 2 × `--role api`, one cluster key), on the same Redis,
//! in one run on this machine.
//!
//! ```text
//! cargo build --release -p gateway --bin gateway -p loadtest --bin topology
//! target/release/topology                      # 6 rounds of 5 s, 64 clients, 2,000 subscribers
//! target/release/topology --seconds 2 --rounds 2 --subscribers 200   # smoke
//! ```
//!
//! For each topology it measures:
//! - **`POST /v1/bids` throughput and latency**: `--clients` closed-loop HTTP clients (split
//!   evenly over the API processes), each sending IOC bids priced below every offer (nothing
//!   fills; each bid is one journaled command with its durable acknowledgement). On the API
//!   processes every bid is forwarded to the leader and answered once the API process's
//!   replica has applied it.
//! - **Inventory fan-out**: `--subscribers` websocket subscribers to one SKU (split evenly over
//!   the API processes), while a supplier re-prices its offer `--rate` times a second through
//!   REST. Every re-price gets a price of its own, so each subscriber maps a delta to the
//!   command that caused it. Latency runs from the moment the command was sent to the moment
//!   the subscriber received the delta: the journal, the forward, the follower's tail and the
//!   hub are all inside it.
//!
//! Every process, this client included, shares the machine's cores. So the figures that count
//! are the ratios within one run (the issue's target: cluster bids ≥ 0.7× single), not the
//! absolute rates. The topologies take turns, round by round (`--rounds`, the order
//! alternating), each round on a topology started afresh (its own Redis: the market keeps every
//! command's audit record and client order id, so a process that has taken more bids runs
//! slower), and the ratio is the median of the rounds' ratios. Measured once each, one after
//! the other, the single process's own rate moved between 15,000 and 20,500 bids/s from run to
//! run on this machine: more than the effect measured.
//! Results: docs/benchmarks.md, "Topology".

use anyhow::{Context, bail};
use clap::Parser;
use futures_util::{SinkExt, StreamExt};
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

/// Side-by-side: one process vs a leader and two API processes.
#[derive(Parser, Debug)]
struct Args {
    /// The gateway binary.
    #[arg(long, default_value = "target/release/gateway")]
    gateway_bin: PathBuf,
    /// Seconds of each measured run: each bid round of each topology, and each fan-out run.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Bid rounds per topology. The topologies take turns (single, cluster; then cluster,
    /// single; …), each started afresh, so a drift in the machine's speed reaches both: the
    /// ratio is taken per round and its median reported.
    #[arg(long, default_value_t = 6)]
    rounds: u64,
    /// Closed-loop HTTP clients posting bids.
    #[arg(long, default_value_t = 64)]
    clients: u64,
    /// Websocket subscribers of the fan-out run.
    #[arg(long, default_value_t = 2_000)]
    subscribers: u64,
    /// Offer re-prices per second in the fan-out run.
    #[arg(long, default_value_t = 20)]
    rate: u64,
    /// HTTP worker threads of each cluster process (`--workers`). Default 1, as
    /// `gateway/scripts/cluster.sh` runs processes that share one machine (docs/deploy.md,
    /// "Workers"); 0: one per core each. The single process always has one per core.
    #[arg(long, default_value_t = 1)]
    cluster_workers: usize,
    /// Write the figures here as JSON.
    #[arg(long, default_value = "topology.json")]
    out: PathBuf,
}

const ADMIN_KEY: &str = "gpux_admin_topology_bench_000000000000001";
const CLUSTER_KEY: &str = "topology-bench-cluster-key";
const SKU: &str = "H100-80G";
const SSH_KEY: &str = gateway::demo::DEMO_SSH_KEY;

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Child processes, killed on drop.
struct Procs(Vec<Child>);

impl Procs {
    /// Kills and reaps every child after the first `keep`.
    fn stop_after(&mut self, keep: usize) {
        for c in self.0.iter_mut().skip(keep) {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.0.truncate(keep);
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        self.stop_after(0);
    }
}

async fn start_redis(dir: &Path, procs: &mut Procs) -> anyhow::Result<String> {
    let port = free_port()?;
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--dir", &dir.display().to_string(), "--appendonly", "yes"])
        .args(["--appendfsync", "everysec", "--save", "", "--logfile", ""])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("redis-server (apt-get install redis-server)")?;
    procs.0.push(child);
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Ok(format!("redis://127.0.0.1:{port}"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("redis-server on {port} did not start")
}

/// Starts a gateway of `role` (`None`: a single process, no cluster key); answers its base URL.
async fn start_gateway(
    bin: &Path,
    redis: &str,
    prefix: &str,
    role: Option<&str>,
    workers: usize,
    procs: &mut Procs,
) -> anyhow::Result<String> {
    let port = free_port()?;
    let mut cmd = Command::new(bin);
    cmd.args([
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--redis-url",
        redis,
    ])
    .args(["--redis-prefix", prefix, "--tick-ms", "1000"])
    .env("GPUX_ADMIN_KEY", ADMIN_KEY)
    .env("GPUX_API__RATE_PER_S", "1000000")
    .env("GPUX_API__RATE_BURST", "1000000")
    .env("RUST_LOG", "warn")
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    if workers > 0 {
        cmd.args(["--workers", &workers.to_string()]);
    }
    if let Some(role) = role {
        cmd.args(["--role", role])
            .env("GPUX_CLUSTER_KEY", CLUSTER_KEY);
    }
    procs
        .0
        .push(cmd.spawn().with_context(|| format!("{}", bin.display()))?);
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    for _ in 0..300 {
        if let Ok(r) = http.get(format!("{base}/readyz")).send().await
            && r.status().is_success()
        {
            return Ok(base);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("{base} did not become ready")
}

async fn post(
    http: &reqwest::Client,
    url: String,
    key: &str,
    body: Value,
) -> anyhow::Result<Value> {
    let r = http
        .post(&url)
        .bearer_auth(key)
        .header("Idempotency-Key", uuid_like())
        .json(&body)
        .send()
        .await?;
    let status = r.status();
    let v: Value = r.json().await.unwrap_or(Value::Null);
    if !status.is_success() {
        bail!("{url}: {status} {v}");
    }
    Ok(v)
}

fn uuid_like() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// The market of a run: a funded buyer, a supplier with one listed node kept alive by a
/// heartbeat task. Answers (buyer key, supplier key, offer id, the heartbeat task). `base` may be any process (commands are forwarded).
async fn market(
    base: &str,
) -> anyhow::Result<(String, String, String, tokio::task::JoinHandle<()>)> {
    let http = reqwest::Client::new();
    let mut admin_ok = false;
    for _ in 0..100 {
        if http
            .get(format!("{base}/v1/admin/accounts"))
            .bearer_auth(ADMIN_KEY)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            admin_ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if !admin_ok {
        bail!("the admin key never worked on {base}");
    }
    let account = |name: &str, role: &str| json!({"name": name, "role": role});
    let buyer = post(
        &http,
        format!("{base}/v1/admin/accounts"),
        ADMIN_KEY,
        account("bench-buyer", "buyer"),
    )
    .await?;
    let buyer_id = buyer["account"]["id"]
        .as_str()
        .context("buyer id")?
        .to_string();
    let buyer_key = buyer["api_key"].as_str().context("buyer key")?.to_string();
    post(
        &http,
        format!("{base}/v1/admin/accounts/{buyer_id}/deposits"),
        ADMIN_KEY,
        json!({"amount": "100000000"}),
    )
    .await?;
    let sup = post(
        &http,
        format!("{base}/v1/admin/accounts"),
        ADMIN_KEY,
        account("bench-idc", "supplier"),
    )
    .await?;
    let sup_key = sup["api_key"].as_str().context("supplier key")?.to_string();
    let node = post(
        &http,
        format!("{base}/v1/nodes"),
        &sup_key,
        json!({"name": "bench-n1", "sku": SKU, "gpus": 8, "region": "cn-east-2",
               "jurisdiction": "CN", "interconnect": "infiniband", "nvlink": true}),
    )
    .await?;
    let node_id = node["id"].as_str().context("node id")?;
    let offer = post(
        &http,
        format!("{base}/v1/offers"),
        &sup_key,
        json!({"node_id": node_id, "gpus": 8, "spot_price": "30", "min_lease_s": 1,
               "max_lease_s": 86400}),
    )
    .await?;
    let offer_id = offer["id"].as_str().context("offer id")?.to_string();
    // The node's agent: a heartbeat every 2 s keeps it on the market past the exchange's
    // heartbeat timeout (15 s) for the whole run.
    let agent = {
        let (url, key) = (
            format!("{base}/v1/nodes/{node_id}/heartbeat"),
            sup_key.clone(),
        );
        tokio::spawn(async move {
            loop {
                let _ = http
                    .post(&url)
                    .bearer_auth(&key)
                    .json(&json!({"healthy_gpus": 8}))
                    .send()
                    .await;
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        })
    };
    Ok((buyer_key, sup_key, offer_id, agent))
}

/// Ops, seconds, latency µs.
struct Run {
    ops: u64,
    secs: f64,
    hist: Histogram<u64>,
    errors: u64,
    /// Resync snapshots received (fan-out only; the first snapshot of each subscriber too).
    resyncs: u64,
}

impl Run {
    fn rate(&self) -> f64 {
        self.ops as f64 / self.secs
    }
    fn ms(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64 / 1000.0
    }
}

/// `clients` closed-loop bid posters spread over `bases` for `secs`.
async fn bids(bases: &[String], key: &str, clients: u64, secs: u64) -> Run {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(clients as usize)
        .build()
        .expect("client");
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let url = format!("{}/v1/bids", bases[c as usize % bases.len()]);
        let (http, key, stop) = (http.clone(), key.to_string(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new(3).expect("histogram");
            let (mut ops, mut errors) = (0u64, 0u64);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let body = json!({"client_order_id": format!("t{c}-{n}-{}", rand::random::<u32>()),
                    "sku": SKU, "gpus": 1, "limit_price": "1.00", "kind": "spot",
                    "time_in_force": "ioc", "duration_s": 600,
                    "launch": {"ssh_keys": [SSH_KEY]}});
                let t = Instant::now();
                match http.post(&url).bearer_auth(&key).json(&body).send().await {
                    Ok(r) if r.status().is_success() => {
                        let _ = r.bytes().await;
                        hist.record(t.elapsed().as_micros() as u64).ok();
                        ops += 1;
                    }
                    _ => errors += 1,
                }
            }
            (ops, errors, hist)
        }));
    }
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let secs = started.elapsed().as_secs_f64();
    let mut run = Run {
        ops: 0,
        secs,
        hist: Histogram::new(3).expect("histogram"),
        errors: 0,
        resyncs: 0,
    };
    for t in tasks {
        let (ops, errors, hist) = t.await.expect("client");
        run.ops += ops;
        run.errors += errors;
        run.hist.add(hist).ok();
    }
    run
}

/// `subs` subscribers spread over `bases`; the supplier re-prices its offer `rate` times a
/// second through `driver` for `secs`. Latency: command sent → delta received.
async fn fanout(
    bases: &[String],
    driver: &str,
    sup_key: &str,
    offer: &str,
    subs: u64,
    rate: u64,
    secs: u64,
) -> anyhow::Result<Run> {
    // price (in fen) → when the re-price to it was sent.
    let sent: Arc<Mutex<HashMap<i64, Instant>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let received = Arc::new(AtomicU64::new(0));
    let resyncs = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..subs {
        let url = bases[i as usize % bases.len()].replacen("http://", "ws://", 1) + "/v1/ws";
        let (sent, stop, received) = (sent.clone(), stop.clone(), received.clone());
        let resyncs = resyncs.clone();
        tasks.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new(3).expect("histogram");
            let Ok((mut s, _)) = tokio_tungstenite::connect_async(url.as_str()).await else {
                return (hist, 1u64);
            };
            let sub = json!({"type": "subscribe", "sku": SKU}).to_string();
            if s.send(Message::Text(sub.into())).await.is_err() {
                return (hist, 1);
            }
            while !stop.load(Ordering::Relaxed) {
                let Ok(Some(Ok(Message::Text(t)))) =
                    tokio::time::timeout(Duration::from_millis(200), s.next()).await
                else {
                    continue;
                };
                let at = Instant::now();
                let Ok(v) = serde_json::from_str::<Value>(&t) else {
                    continue;
                };
                // A resync snapshot (the server's answer to a subscriber that fell behind)
                // carries the new price too: counted, and timed like a delta.
                match v["type"].as_str() {
                    Some("inventory_delta") => {}
                    Some("inventory_snapshot") => {
                        resyncs.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => continue,
                }
                for l in v["levels"].as_array().into_iter().flatten() {
                    if l["free_gpus"].as_u64().unwrap_or(0) == 0 {
                        continue;
                    }
                    let fen = l["price"]
                        .as_str()
                        .and_then(|p| p.parse::<f64>().ok())
                        .map(|p| (p * 100.0).round() as i64);
                    let when = fen.and_then(|f| sent.lock().ok()?.get(&f).copied());
                    if let Some(when) = when {
                        hist.record(at.saturating_duration_since(when).as_micros() as u64)
                            .ok();
                        received.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            (hist, 0)
        }));
    }
    // Let every subscriber connect and get its snapshot.
    tokio::time::sleep(Duration::from_millis(2_000 + subs)).await;
    let http = reqwest::Client::new();
    let started = Instant::now();
    let mut every = tokio::time::interval(Duration::from_micros(1_000_000 / rate.max(1)));
    let mut i = 0i64;
    while started.elapsed() < Duration::from_secs(secs) {
        every.tick().await;
        i += 1;
        let fen = 3000 + i; // 30.01, 30.02, … CNY per GPU-hour: one price per command
        if let Ok(mut m) = sent.lock() {
            m.insert(fen, Instant::now());
        }
        let r = http
            .put(format!("{driver}/v1/offers/{offer}"))
            .bearer_auth(sup_key)
            .json(
                &json!({"gpus": 8, "spot_price": format!("{}.{:02}", fen / 100, fen % 100),
                          "min_lease_s": 1, "max_lease_s": 86400}),
            )
            .send()
            .await?;
        if !r.status().is_success() {
            bail!(
                "re-price: {} {}",
                r.status(),
                r.text().await.unwrap_or_default()
            );
        }
    }
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    stop.store(true, Ordering::Relaxed);
    let mut run = Run {
        ops: received.load(Ordering::Relaxed),
        secs: started.elapsed().as_secs_f64(),
        hist: Histogram::new(3).expect("histogram"),
        errors: 0,
        resyncs: resyncs.load(Ordering::Relaxed),
    };
    for t in tasks {
        let (hist, failed) = t.await.expect("subscriber");
        run.hist.add(hist).ok();
        run.errors += failed;
    }
    Ok(run)
}

struct Figures {
    bids: Run,
    fan: Run,
}

/// One topology under test: where its clients go, which process drives the re-prices, and
/// its market.
struct Side {
    bases: Vec<String>,
    driver: String,
    buyer: String,
    sup: String,
    offer: String,
    agent: tokio::task::JoinHandle<()>,
}

impl Side {
    async fn new(bases: Vec<String>, driver: String, clients: u64) -> anyhow::Result<Side> {
        let (buyer, sup, offer, agent) = market(&driver).await?;
        // Warm-up: connections, caches.
        bids(&bases, &buyer, clients, 1).await;
        Ok(Side {
            bases,
            driver,
            buyer,
            sup,
            offer,
            agent,
        })
    }

    async fn fanout(&self, args: &Args) -> anyhow::Result<Run> {
        fanout(
            &self.bases,
            &self.driver,
            &self.sup,
            &self.offer,
            args.subscribers,
            args.rate,
            args.seconds,
        )
        .await
    }
}

/// Adds `b`'s bids to `a` (rounds of one topology).
fn add(a: &mut Run, b: Run) {
    a.ops += b.ops;
    a.secs += b.secs;
    a.errors += b.errors;
    a.hist.add(b.hist).ok();
}

fn empty_run() -> Run {
    Run {
        ops: 0,
        secs: 0.0,
        hist: Histogram::new(3).expect("histogram"),
        errors: 0,
        resyncs: 0,
    }
}

/// The median of `v` (sorted here).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn row(name: &str, f: &Figures) -> String {
    format!(
        "| {name} | {:.0} | {:.2} / {:.2} | {} | {:.1} / {:.1} / {:.1} | {} | {} |",
        f.bids.rate(),
        f.bids.ms(0.5),
        f.bids.ms(0.99),
        f.bids.errors,
        f.fan.ms(0.5),
        f.fan.ms(0.99),
        f.fan.ms(1.0),
        f.fan.ops,
        f.fan.resyncs,
    )
}

fn json_of(f: &Figures) -> Value {
    json!({
        "bids_per_s": f.bids.rate(), "bid_p50_ms": f.bids.ms(0.5), "bid_p99_ms": f.bids.ms(0.99),
        "bid_errors": f.bids.errors,
        "fanout_p50_ms": f.fan.ms(0.5), "fanout_p99_ms": f.fan.ms(0.99),
        "fanout_max_ms": f.fan.ms(1.0), "deltas_received": f.fan.ops,
        "subscribers_failed": f.fan.errors, "snapshots_received": f.fan.resyncs,
    })
}

/// A topology started afresh (its own Redis in a temp dir, so no run inherits another's
/// journal, snapshot or AOF rewrite), with its market; stopped on drop.
struct Started {
    side: Side,
    _procs: Procs,
    _dir: tempfile::TempDir,
}

impl Started {
    /// `cluster`: a leader (role `engine`) and two API processes; else one process.
    async fn new(args: &Args, cluster: bool) -> anyhow::Result<Started> {
        let dir = tempfile::tempdir()?;
        let mut procs = Procs(Vec::new());
        let redis = start_redis(dir.path(), &mut procs).await?;
        let bin = &args.gateway_bin;
        let side = if cluster {
            // The leader serves no public API: clients and the driver use the API processes.
            let w = args.cluster_workers;
            start_gateway(bin, &redis, "cluster", Some("engine"), w, &mut procs).await?;
            let mut apis = Vec::new();
            for _ in 0..2 {
                apis.push(start_gateway(bin, &redis, "cluster", Some("api"), w, &mut procs).await?);
            }
            let driver = apis[0].clone();
            Side::new(apis, driver, args.clients).await?
        } else {
            let single = start_gateway(bin, &redis, "single", None, 0, &mut procs).await?;
            Side::new(vec![single.clone()], single, args.clients).await?
        };
        Ok(Started {
            side,
            _procs: procs,
            _dir: dir,
        })
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        self.agent.abort();
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if !args.gateway_bin.exists() {
        bail!(
            "{} not found: cargo build --release -p gateway --bin gateway",
            args.gateway_bin.display()
        );
    }
    let (mut one_bids, mut two_bids) = (empty_run(), empty_run());
    let mut ratios = Vec::new();
    for round in 0..args.rounds {
        let mut pair = [0.0f64; 2];
        // Alternate which goes first, so a drift of the machine favours neither.
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for which in order {
            let started = Started::new(&args, which == 1).await?;
            let run = bids(
                &started.side.bases,
                &started.side.buyer,
                args.clients,
                args.seconds,
            )
            .await;
            pair[which] = run.rate();
            add(
                if which == 0 {
                    &mut one_bids
                } else {
                    &mut two_bids
                },
                run,
            );
        }
        let ratio = pair[1] / pair[0].max(1e-9);
        println!(
            "round {}: single {:.0} bids/s, cluster {:.0} bids/s: {ratio:.2}×",
            round + 1,
            pair[0],
            pair[1]
        );
        ratios.push(ratio);
    }
    println!("fan-out: single process …");
    let one_fan = Started::new(&args, false).await?.side.fanout(&args).await?;
    println!("fan-out: leader + 2 API processes …");
    let two_fan = Started::new(&args, true).await?.side.fanout(&args).await?;
    let one = Figures {
        bids: one_bids,
        fan: one_fan,
    };
    let two = Figures {
        bids: two_bids,
        fan: two_fan,
    };
    let per_round = ratios.clone();
    let (lo, hi) = ratios
        .iter()
        .fold((f64::INFINITY, 0.0f64), |(l, h), r| (l.min(*r), h.max(*r)));
    let ratio = median(&mut ratios);

    println!(
        "\n{} rounds of {} s per topology, {} bid clients, {} subscribers, {} re-prices/s; every process on this machine\n",
        args.rounds, args.seconds, args.clients, args.subscribers, args.rate
    );
    println!(
        "| topology | bids/s | bid p50 / p99 ms | bid errors | fan-out p50 / p99 / max ms | deltas received | snapshots (first + resync) |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    println!("{}", row("single process", &one));
    println!("{}", row("leader + 2 API processes", &two));
    println!(
        "\nPOST /v1/bids throughput, cluster / single: median {ratio:.2}× of {} rounds ({lo:.2}–{hi:.2}×; target ≥ 0.7×)",
        per_round.len()
    );
    std::fs::write(
        &args.out,
        serde_json::to_string_pretty(&json!({
            "seconds": args.seconds, "rounds": args.rounds, "clients": args.clients,
            "subscribers": args.subscribers, "rate": args.rate,
            "single": json_of(&one), "cluster": json_of(&two), "bid_ratio": ratio,
            "bid_ratio_per_round": per_round,
        }))?,
    )?;
    println!("figures written to {}", args.out.display());
    Ok(())
}
