//! Crash test (issue 4): the server binary under load is killed with SIGKILL several times at
//! random moments and restarted on the same journal. Afterwards every acknowledged command is
//! in the journal at its acknowledged sequence number, every other journaled command is one
//! that was in flight at a kill, and the server's state hash equals a replay of the journal.

use crate::support;
use exchange::{AccountId, Command, Interconnect, Jurisdiction, NodeSpec};
use gateway::journal::{EmbeddedJournal, Journal, RedisConfig, RedisJournal};
use gateway::market::{Market, MarketConfig, Op};
use gateway::sequencer;
use rand::RngExt;
use rust_decimal::Decimal;
use std::collections::BTreeMap;
use std::process::{Child, Command as Proc, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const ROUNDS: usize = 4;
const CLIENTS: usize = 6;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

struct Server {
    child: Child,
    base: String,
}

impl Server {
    fn start(port: u16, backend: &[String]) -> Server {
        let child = Proc::new(env!("CARGO_BIN_EXE_gateway"))
            .args([
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--internal-api",
                "--tick-ms",
                "100",
            ])
            .args(["--snapshot-every", "1000000000"])
            .args(backend)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the gateway binary");
        Server {
            child,
            base: format!("http://127.0.0.1:{port}"),
        }
    }

    async fn wait_ready(&self, client: &reqwest::Client) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(r) = client.get(format!("{}/readyz", self.base)).send().await
                && r.status().is_success()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("gateway did not become ready");
    }

    fn kill(&mut self) {
        let _ = self.child.kill(); // SIGKILL
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The k-th operation of client `c`: deposits, node registrations and ticks, all distinct.
fn op(c: usize, k: usize) -> Op {
    match k % 3 {
        0 => Op::Deposit {
            key: format!("dep-{c}-{k}"),
            buyer: 100 + c as u64,
            amount: Decimal::from(1 + k as u64),
        },
        1 => Op::Engine(Command::RegisterNode {
            account: AccountId(1 + c as u64),
            spec: NodeSpec {
                name: format!("node-{c}-{k}"),
                sku: exchange::SkuId(0),
                gpus: 8,
                region: "cn-east-2".into(),
                jurisdiction: Jurisdiction(*b"CN"),
                interconnect: Interconnect::Roce,
                nvlink: false,
                fabric: None,
            },
        }),
        _ => Op::Tick,
    }
}

#[derive(Default)]
struct Ledger {
    /// seq → op for every acknowledged command.
    acked: BTreeMap<u64, Op>,
    /// Commands sent whose answer never came (in flight at a kill).
    unknown: Vec<Op>,
}

async fn client_loop(base: String, c: usize, start_k: usize, log: Arc<Mutex<Ledger>>) -> usize {
    let client = reqwest::Client::new();
    let mut k = start_k;
    loop {
        let o = op(c, k);
        let sent = client
            .post(format!("{base}/internal/ops"))
            .json(&o)
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        match sent {
            Ok(r) if r.status().is_success() => {
                let v: serde_json::Value = r.json().await.unwrap_or_default();
                match v["seq"].as_u64() {
                    Some(seq) => {
                        log.lock().unwrap().acked.insert(seq, o);
                    }
                    None => {
                        log.lock().unwrap().unknown.push(o);
                        return k + 1;
                    }
                }
            }
            _ => {
                log.lock().unwrap().unknown.push(o);
                return k + 1;
            }
        }
        k += 1;
    }
}

async fn crash_and_check(
    backend: Vec<String>,
    mut open: impl AsyncFnMut() -> Box<dyn JournalReader>,
) {
    let port = free_port();
    let log = Arc::new(Mutex::new(Ledger::default()));
    let http = reqwest::Client::new();
    let mut next_k = [0usize; CLIENTS];
    let mut rng = rand::rng();
    for round in 0..ROUNDS {
        let mut server = Server::start(port, &backend);
        server.wait_ready(&http).await;
        let tasks: Vec<_> = (0..CLIENTS)
            .map(|c| tokio::spawn(client_loop(server.base.clone(), c, next_k[c], log.clone())))
            .collect();
        let delay = rng.random_range(150..900);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        server.kill();
        for (c, t) in tasks.into_iter().enumerate() {
            next_k[c] = t.await.unwrap();
        }
        let acked = log.lock().unwrap().acked.len();
        assert!(
            acked > round * 10,
            "load reached the server in round {round} ({acked} acks)"
        );
    }
    // One last start: recovery must succeed; read the state, then kill (no final snapshot, so
    // the journal keeps every entry).
    let mut server = Server::start(port, &backend);
    server.wait_ready(&http).await;
    let state: serde_json::Value = http
        .get(format!("{}/internal/state", server.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    server.kill();
    let server_hash = state["state_hash"].as_str().unwrap().to_string();
    let server_seq = state["last_seq"].as_u64().unwrap();

    let mut journal = open().await;
    let entries = journal.all().await;
    let log = log.lock().unwrap();
    let by_seq: BTreeMap<u64, Op> = entries
        .iter()
        .map(|(seq, _, op)| (*seq, op.clone()))
        .collect();
    for (seq, op) in &log.acked {
        assert_eq!(
            by_seq.get(seq),
            Some(op),
            "acknowledged command {seq} is in the journal"
        );
    }
    for (seq, op) in &by_seq {
        if log.acked.contains_key(seq) {
            continue;
        }
        let in_flight = log.unknown.iter().any(|u| u == op);
        // The server's own ticker, its admin bootstrap on the first start, and the `Resume`
        // that leads the first batch after each restart.
        let internal_tick = matches!(
            op,
            Op::Tick | Op::CreateAccount { .. } | Op::Engine(exchange::Command::Resume)
        );
        assert!(
            in_flight || internal_tick,
            "journal entry {seq} was neither acknowledged nor in flight: {op:?}"
        );
    }
    // The ticks (and resumes) between kills are the server's own; everything else is accounted
    // for.
    // Replaying exactly the journal up to the state the server reported gives its hash (the
    // server's ticker may have committed more ticks before the kill).
    // The binary runs the delivering market (`AppOptions::default`).
    let mut shadow = Market::new(MarketConfig::delivered()).unwrap();
    for (seq, ts, op) in &entries {
        if *seq <= server_seq {
            shadow.apply_entry(*seq, *ts, op);
        } else {
            // The server's own ticks, and the `Resume` its sequencer journals when a batch
            // comes more than the heartbeat timeout after the last command (a stalled machine).
            assert!(
                matches!(op, Op::Tick | Op::Engine(exchange::Command::Resume)),
                "only the server's own ticks after the state read, not {op:?}"
            );
        }
    }
    assert!(entries.last().is_some_and(|e| e.0 >= server_seq));
    assert_eq!(gateway::server::hex(&shadow.state_hash()), server_hash);
    assert!(log.acked.len() >= ROUNDS * 10);
}

/// Every entry of a journal: (seq, timestamp ms, operation).
type Entries = Vec<(u64, i64, Op)>;
/// A boxed future, for the object-safe reader below.
type BoxFut<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + 'a>>;

/// Reads a whole journal back.
trait JournalReader {
    fn all(&mut self) -> BoxFut<'_, Entries>;
}

struct Reader<J: Journal>(J);

impl<J: Journal> JournalReader for Reader<J> {
    fn all(&mut self) -> BoxFut<'_, Entries> {
        Box::pin(async move {
            let mut out = Vec::new();
            let mut after = 0;
            loop {
                let page = self
                    .0
                    .read_after(after, 1000)
                    .await
                    .expect("journal readable");
                if page.is_empty() {
                    break;
                }
                for e in page {
                    assert_eq!(e.seq, after + 1, "no gap");
                    after = e.seq;
                    out.push((
                        e.seq,
                        e.timestamp_ms,
                        sequencer::decode(&e.payload).expect("decodes"),
                    ));
                }
            }
            out
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_under_load_loses_and_doubles_nothing_embedded() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_path_buf();
    let backend = vec!["--data-dir".to_string(), data.display().to_string()];
    crash_and_check(backend, async || {
        Box::new(Reader(EmbeddedJournal::open(&data, 0).await.unwrap())) as Box<dyn JournalReader>
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_under_load_loses_and_doubles_nothing_redis() {
    let dir = tempfile::tempdir().unwrap();
    let redis = support::RedisServer::start(dir.path(), true);
    let url = redis.url();
    let backend = vec![
        "--redis-url".to_string(),
        url.clone(),
        "--require-aof".to_string(),
    ];
    crash_and_check(backend, async || {
        Box::new(Reader(
            RedisJournal::connect(RedisConfig::new(url.clone()))
                .await
                .unwrap(),
        )) as Box<dyn JournalReader>
    })
    .await;
}
