//! Journal and sequencer benchmark (issue 4). Prints one table from one run:
//! - baseline: single-client XADD rate (one connection, each XADD awaited, redis-benchmark
//!   style) on the same Redis;
//! - durable commands/s through the sequencer (group commit, 1,024 concurrent clients) with Redis
//!   `appendfsync everysec`, with `always`, and with the embedded store;
//! - replay rate (recovering a journal) beside the live market's apply rate on exactly the
//!   journal's commands;
//! - time to recover 1,000,000 commands (embedded store and Redis).
//!
//! Run: `cargo bench -p gateway --bench journal` (needs `redis-server` on PATH; env
//! `GPUX_BENCH_SECONDS` per throughput run, default 3; `GPUX_BENCH_RECOVER` commands, default
//! 1,000,000).

use exchange::{
    AccountId, BidSpec, Catalog, Command, Constraints, Interconnect, Jurisdiction, LeaseKind,
    NodeSpec, OfferTerms, Placement, Price, TimeInForce,
};
use gateway::journal::redis::{DEFAULT_PREFIX, RedisKeys};
use gateway::journal::{AnyJournal, EmbeddedJournal, Entry, Journal, RedisConfig, RedisJournal};
use gateway::market::{Market, MarketConfig, Op};
use gateway::sequencer::{self, Sequencer, SequencerHandle, SnapshotPolicy, SystemClock};
use rust_decimal::Decimal;
use std::process::{Child, Command as Proc, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const CLIENTS: u64 = 1024;
const NODES: u64 = 200;

struct Redis {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Redis {
    fn start(fsync: &str) -> Redis {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("free port");
        let child = Proc::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .args(["--appendonly", "yes", "--appendfsync", fsync])
            .args(["--dir", &dir.path().display().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Redis {
            child,
            port,
            _dir: dir,
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn sku() -> exchange::SkuId {
    static SKU: std::sync::LazyLock<exchange::SkuId> = std::sync::LazyLock::new(|| {
        Catalog::builtin()
            .lookup("RTX4090-24G")
            .unwrap_or(exchange::SkuId(0))
    });
    *SKU
}

/// Set-up operations: funded buyers, nodes (ids derived from seq: registration k is seq k+5).
fn setup_ops() -> Vec<Op> {
    let mut ops: Vec<Op> = (0..4u64)
        .map(|b| Op::Deposit {
            key: format!("dep-{b}"),
            buyer: 100 + b,
            amount: Decimal::from(1_000_000_000u64),
        })
        .collect();
    for i in 0..NODES {
        ops.push(Op::Engine(Command::RegisterNode {
            account: AccountId(1 + i % 5),
            spec: NodeSpec {
                name: format!("n{i}"),
                sku: sku(),
                gpus: 8,
                region: "cn-east-2".into(),
                jurisdiction: Jurisdiction(*b"CN"),
                interconnect: Interconnect::Roce,
                nvlink: false,
                fabric: None,
            },
        }));
    }
    for i in 0..NODES {
        ops.push(Op::Engine(Command::PostOffer {
            account: AccountId(1 + i % 5),
            node: exchange::NodeId((5 + i) << 20),
            terms: OfferTerms {
                gpus: 8,
                spot_price: Price::from_ticks(19_800 + (i as i64 % 10) * 100)
                    .unwrap_or(Price::from_ticks(1).unwrap()),
                preemptible_price: Price::from_ticks(11_900).ok(),
                min_lease_s: 0,
                max_lease_s: 86_400,
                available_until_ms: i64::MAX / 4,
                notice_s: 0,
                provision_s: 180,
            },
        }));
    }
    ops
}

/// The n-th steady-state operation: heartbeats (half), IOC bids for short leases, releases are
/// implied by lease expiry.
fn steady_op(n: u64) -> Op {
    if n.is_multiple_of(2) {
        let i = (n / 2) % NODES;
        Op::Engine(Command::Heartbeat {
            account: AccountId(1 + i % 5),
            node: exchange::NodeId((5 + i) << 20),
            healthy_gpus: 8,
        })
    } else {
        Op::Engine(Command::PlaceBid {
            account: AccountId(100 + n % 4),
            bid: BidSpec {
                client_order_id: format!("b{n}"),
                sku: sku(),
                gpus: 1 + (n % 2) as u32,
                limit: Price::from_ticks(20_500).unwrap_or(Price::from_ticks(1).unwrap()),
                kind: LeaseKind::Spot,
                placement: Placement::Spread,
                constraints: Constraints::default(),
                duration_s: Some(5),
                tif: TimeInForce::Ioc,
                min_gpus: None,
            },
        })
    }
}

async fn start(journal: AnyJournal) -> (tokio::task::JoinHandle<Market>, SequencerHandle) {
    let policy = SnapshotPolicy {
        every_commands: u64::MAX,
        every_ms: i64::MAX,
        trim_journal: false,
    };
    let (seq, h) = Sequencer::recover(journal, SystemClock, MarketConfig::default(), policy)
        .await
        .expect("recover");
    let task = sequencer::spawn(seq);
    for op in setup_ops() {
        h.submit(op).await.expect("setup");
    }
    (task, h)
}

/// Durable commands per second with CLIENTS concurrent submitters for `secs`.
async fn throughput(journal: AnyJournal, secs: u64) -> f64 {
    let (task, h) = start(journal).await;
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let counter = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let (h, stop, done, counter) = (h.clone(), stop.clone(), done.clone(), counter.clone());
        clients.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let n = counter.fetch_add(1, Ordering::Relaxed);
                if h.submit(steady_op(n)).await.is_ok() {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        let _ = c.await;
    }
    let rate = done.load(Ordering::Relaxed) as f64 / t0.elapsed().as_secs_f64();
    drop(h);
    let _ = task.await;
    rate
}

/// One connection, each XADD of a 100-byte payload awaited before the next.
async fn xadd_baseline(url: &str, secs: u64) -> f64 {
    let client = redis::Client::open(url).expect("client");
    let mut con = client
        .get_multiplexed_async_connection()
        .await
        .expect("connection");
    let payload = vec![7u8; 100];
    let t0 = Instant::now();
    let mut n = 0u64;
    while t0.elapsed() < Duration::from_secs(secs) {
        let _: String = redis::cmd("XADD")
            .arg("bench:xadd")
            .arg("*")
            .arg("p")
            .arg(&payload)
            .query_async(&mut con)
            .await
            .expect("XADD");
        n += 1;
    }
    n as f64 / t0.elapsed().as_secs_f64()
}

/// Writes `n` steady-state operations straight into a journal (after the set-up), in batches
/// of `chunk` commands.
async fn fill_journal<J: Journal>(j: &mut J, n: u64, chunk: usize) -> u64 {
    let mut ops = setup_ops();
    ops.extend((0..n.saturating_sub(ops.len() as u64)).map(steady_op));
    let t0 = 1_767_225_600_000i64;
    let mut seq = 0u64;
    for chunk in ops.chunks(chunk) {
        let batch: Vec<Entry> = chunk
            .iter()
            .map(|op| {
                seq += 1;
                Entry {
                    seq,
                    timestamp_ms: t0 + (seq / 50) as i64,
                    payload: sequencer::encode(op).expect("ops encode"),
                }
            })
            .collect();
        j.append(&batch).await.expect("append");
    }
    seq
}

/// Fills a journal with the set-up and then steady-state operations through the sequencer,
/// `CLIENTS` concurrent submitters, until `n` commands are durable: batches are whatever group
/// commit makes of that load, as in production.
async fn fill_under_load(journal: AnyJournal, n: u64) -> u64 {
    let (task, h) = start(journal).await;
    let counter = Arc::new(AtomicU64::new(setup_ops().len() as u64));
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let (h, counter) = (h.clone(), counter.clone());
        clients.push(tokio::spawn(async move {
            loop {
                let k = counter.fetch_add(1, Ordering::Relaxed);
                if k >= n {
                    break;
                }
                h.submit(steady_op(k)).await.expect("durable submit");
            }
        }));
    }
    for c in clients {
        c.await.expect("client");
    }
    drop(h);
    let _ = task.await;
    n
}

/// Drops the snapshot the sequencer took at shutdown (so recovery replays the whole
/// journal) and answers the number of stream entries (one per appended batch).
async fn drop_snapshot_count_batches(url: &str) -> u64 {
    let client = redis::Client::open(url).expect("client");
    let mut con = client
        .get_multiplexed_async_connection()
        .await
        .expect("connection");
    let keys = RedisKeys::new(DEFAULT_PREFIX, 0);
    let deleted: u64 = redis::cmd("DEL")
        .arg(&keys.snapshot)
        .query_async(&mut con)
        .await
        .expect("DEL");
    assert_eq!(deleted, 1, "the shutdown snapshot existed");
    redis::cmd("XLEN")
        .arg(&keys.journal)
        .query_async(&mut con)
        .await
        .expect("XLEN")
}

/// Seconds to recover a journal, and commands per second.
async fn recover_time(journal: AnyJournal, n: u64) -> (f64, f64) {
    let policy = SnapshotPolicy {
        every_commands: u64::MAX,
        every_ms: i64::MAX,
        trim_journal: false,
    };
    let t0 = Instant::now();
    let (seq, _h) = Sequencer::recover(journal, SystemClock, MarketConfig::default(), policy)
        .await
        .expect("recover");
    let secs = t0.elapsed().as_secs_f64();
    assert_eq!(seq.last_seq(), n);
    (secs, n as f64 / secs)
}

/// The commands stored in a journal, decoded, with their timestamps.
async fn journal_ops<J: Journal>(j: &mut J) -> Vec<(i64, Op)> {
    let mut out = Vec::new();
    let mut after = 0;
    loop {
        let page = j.read_after(after, 10_000).await.expect("read");
        let Some(last) = page.last() else { break };
        after = last.seq;
        out.extend(page.iter().map(|e| {
            (
                e.timestamp_ms,
                sequencer::decode(&e.payload).expect("decode"),
            )
        }));
    }
    out
}

/// The live market's apply rate on exactly the commands of a journal (no journal IO, no
/// decoding): the replay baseline.
fn live_apply_rate(ops: &[(i64, Op)]) -> f64 {
    let mut m = Market::new(MarketConfig::default()).expect("market");
    let t0 = Instant::now();
    for (ts, op) in ops {
        m.apply(*ts, op);
    }
    ops.len() as f64 / t0.elapsed().as_secs_f64()
}

fn main() {
    if std::env::args().any(|a| a == "--test") {
        return; // `cargo test --benches`: nothing quick to check here
    }
    let secs = env_u64("GPUX_BENCH_SECONDS", 3);
    let recover_n = env_u64("GPUX_BENCH_RECOVER", 1_000_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        println!("== Journal and sequencer, {CLIENTS} concurrent clients, {secs} s per run ==");
        let everysec = Redis::start("everysec");
        let xadd = xadd_baseline(&everysec.url(), secs).await;
        let j = RedisJournal::connect(RedisConfig::new(everysec.url()))
            .await
            .expect("redis");
        let r_everysec = throughput(j.into(), secs).await;
        drop(everysec);
        let always = Redis::start("always");
        let j = RedisJournal::connect(RedisConfig::new(always.url()))
            .await
            .expect("redis");
        let r_always = throughput(j.into(), secs).await;
        drop(always);
        let dir = tempfile::tempdir().expect("dir");
        let j = EmbeddedJournal::open(dir.path(), 0).await.expect("redb");
        let r_embedded = throughput(j.into(), secs).await;

        println!("{:<52} {:>12}", "measure", "per second");
        println!(
            "{:<52} {:>12.0}",
            "baseline: single-client XADD (everysec)", xadd
        );
        println!(
            "{:<52} {:>12.0}   {:.1}x XADD (target >= 10x)",
            "durable commands, Redis appendfsync everysec",
            r_everysec,
            r_everysec / xadd
        );
        println!(
            "{:<52} {:>12.0}   {:.2}x everysec (target >= 0.5x)",
            "durable commands, Redis appendfsync always",
            r_always,
            r_always / r_everysec
        );
        println!(
            "{:<52} {:>12.0}",
            "durable commands, embedded store (redb, fsync)", r_embedded
        );

        println!("\n== Recovery of {recover_n} commands ==");
        let dir = tempfile::tempdir().expect("dir");
        let mut j = EmbeddedJournal::open(dir.path(), 0).await.expect("redb");
        let n = fill_journal(&mut j, recover_n, 1000).await;
        let live_e = live_apply_rate(&journal_ops(&mut j).await);
        drop(j);
        let j = EmbeddedJournal::open(dir.path(), 0).await.expect("redb");
        let (secs_e, rate_e) = recover_time(j.into(), n).await;
        // Redis, filled through the sequencer under load: production's batch sizes.
        let redis = Redis::start("everysec");
        let j = RedisJournal::connect(RedisConfig::new(redis.url()))
            .await
            .expect("redis");
        let n_r = fill_under_load(j.into(), recover_n).await;
        let batches = drop_snapshot_count_batches(&redis.url()).await;
        let mut j = RedisJournal::connect(RedisConfig::new(redis.url()))
            .await
            .expect("redis");
        let live_r = live_apply_rate(&journal_ops(&mut j).await);
        let (secs_r, rate_r) = recover_time(j.into(), n_r).await;
        drop(redis);
        // Redis, one command per batch (a lightly loaded gateway): the worst case.
        let single_n = (recover_n / 10).max(1000);
        let redis = Redis::start("everysec");
        let mut j = RedisJournal::connect(RedisConfig::new(redis.url()))
            .await
            .expect("redis");
        let n_1 = fill_journal(&mut j, single_n, 1).await;
        let live_1 = live_apply_rate(&journal_ops(&mut j).await);
        let j = RedisJournal::connect(RedisConfig::new(redis.url()))
            .await
            .expect("redis");
        let (_, rate_1) = recover_time(j.into(), n_1).await;
        println!("{:<52} {:>12}  {:>12}", "journal", "replay/s", "live/s");
        println!(
            "{:<52} {:>12.0}  {:>12.0}   {:.2}x live (target >= 0.5x); {:.2} s",
            "embedded store (batches of 1,000)",
            rate_e,
            live_e,
            rate_e / live_e,
            secs_e
        );
        println!(
            "{:<52} {:>12.0}  {:>12.0}   {:.2}x live (target >= 0.5x); {:.2} s",
            format!(
                "Redis, written under load ({:.0} commands/batch)",
                n_r as f64 / batches.max(1) as f64
            ),
            rate_r,
            live_r,
            rate_r / live_r,
            secs_r
        );
        println!(
            "{:<52} {:>12.0}  {:>12.0}   {:.2}x live ({n_1} commands, worst case)",
            "Redis, one command per batch",
            rate_1,
            live_1,
            rate_1 / live_1
        );
        println!(
            "(live/s: the market applying exactly that journal's commands, no IO, no decoding)"
        );
    });
}
