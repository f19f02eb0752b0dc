//! Leadership of a Redis journal (issue 18, first step; `gateway::leadership`,
//! docs/journal.md "Leadership"): two gateway binaries on one journal. The second waits as a
//! standby (it serves nothing) and takes over when the leader dies, with every acknowledged
//! command in the journal exactly once; a leader paused past its lease is fenced when it
//! wakes (its command is refused and not journaled) and exits with `EXIT_LEASE_LOST`.

use crate::support;
use gateway::leadership::EXIT_LEASE_LOST;
use gateway::market::Op;
use rust_decimal::Decimal;
use std::collections::BTreeMap;
use std::process::{Child, Command as Proc, Stdio};
use std::time::{Duration, Instant};

/// The lease these tests run with, ms (the default is 2,000).
const LEASE_MS: u64 = 1_000;

/// A gateway binary on a Redis journal.
struct Gateway {
    child: Child,
    base: String,
}

impl Gateway {
    fn start(redis_url: &str) -> Gateway {
        let port = support::free_port();
        let child = Proc::new(env!("CARGO_BIN_EXE_gateway"))
            .args(["--listen", &format!("127.0.0.1:{port}"), "--internal-api"])
            .args(["--tick-ms", "100", "--redis-url", redis_url])
            .args(["--lease-ms", &LEASE_MS.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the gateway binary");
        Gateway {
            child,
            base: format!("http://127.0.0.1:{port}"),
        }
    }

    async fn ready(&self, http: &reqwest::Client) -> bool {
        http.get(format!("{}/readyz", self.base))
            .timeout(Duration::from_millis(500))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
    }

    /// Waits until `/readyz` answers 200; the time it took.
    async fn wait_ready(&self, http: &reqwest::Client, within: Duration) -> Duration {
        let started = Instant::now();
        while started.elapsed() < within {
            if self.ready(http).await {
                return started.elapsed();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("{} not ready within {within:?}", self.base);
    }

    /// Posts `op` to `/internal/ops`: its sequence number when acknowledged.
    async fn submit(&self, http: &reqwest::Client, op: &Op) -> Option<u64> {
        let r = http
            .post(format!("{}/internal/ops", self.base))
            .json(op)
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .ok()?;
        if !r.status().is_success() {
            return None;
        }
        let v: serde_json::Value = r.json().await.ok()?;
        v["seq"].as_u64()
    }

    fn signal(&self, sig: &str) {
        let ok = Proc::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill {sig}");
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.kill();
    }
}

fn deposit(key: &str) -> Op {
    Op::Deposit {
        key: key.into(),
        buyer: 4242,
        amount: Decimal::ONE,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_when_the_leader_dies_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let redis = support::RedisServer::start(dir.path(), true);
    let url = redis.url();
    let http = reqwest::Client::new();
    let mut leader = Gateway::start(&url);
    leader.wait_ready(&http, Duration::from_secs(20)).await;
    let standby = Gateway::start(&url);
    // The standby serves nothing while the leader lives (it once came up beside it: two
    // sequencers on one journal).
    tokio::time::sleep(Duration::from_millis(2 * LEASE_MS)).await;
    assert!(!standby.ready(&http).await, "the standby serves");
    let mut acked = BTreeMap::new();
    for k in 0..30 {
        let op = deposit(&format!("before-{k}"));
        let seq = leader.submit(&http, &op).await.expect("acknowledged");
        acked.insert(seq, op);
    }
    redis.sync_aof().await;
    leader.kill();
    let took = standby
        .wait_ready(&http, Duration::from_millis(LEASE_MS + 8_000))
        .await;
    println!(
        "takeover: the standby served {} ms after the leader's SIGKILL (lease {LEASE_MS} ms)",
        took.as_millis()
    );
    // Bound: the lease, one standby poll, the recovery, and the probe's own step.
    assert!(
        took < Duration::from_millis(LEASE_MS + 2_000),
        "takeover took {took:?}"
    );
    let op = deposit("after");
    let seq = standby
        .submit(&http, &op)
        .await
        .expect("the new leader acks");
    assert!(seq > *acked.keys().last().unwrap());
    acked.insert(seq, op);
    let journal = support::journal_ops(&url).await;
    for (seq, op) in &acked {
        assert_eq!(journal.get(seq), Some(op), "acknowledged {seq} journaled");
    }
    // Exactly once: each deposit key appears once in the whole journal.
    for op in acked.values() {
        assert_eq!(journal.values().filter(|o| *o == op).count(), 1, "{op:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_paused_past_its_lease_is_fenced_and_stops() {
    let dir = tempfile::tempdir().unwrap();
    let redis = support::RedisServer::start(dir.path(), true);
    let url = redis.url();
    let http = reqwest::Client::new();
    let mut old = Gateway::start(&url);
    old.wait_ready(&http, Duration::from_secs(20)).await;
    let new = Gateway::start(&url);
    tokio::time::sleep(Duration::from_millis(LEASE_MS)).await;
    old.signal("-STOP");
    new.wait_ready(&http, Duration::from_millis(LEASE_MS + 8_000))
        .await;
    let op = deposit("new-leader");
    let seq = new.submit(&http, &op).await.expect("the new leader acks");
    old.signal("-CONT");
    // The old leader wakes up: its command is refused (fenced, or it is already gone) ...
    let stale = deposit("old-leader");
    assert_eq!(
        old.submit(&http, &stale).await,
        None,
        "the old leader acked"
    );
    // ... and it exits, for its supervisor to restart it as a standby.
    let deadline = Instant::now() + Duration::from_millis(LEASE_MS + 3_000);
    let status = loop {
        if let Some(s) = old.child.try_wait().expect("wait") {
            break s;
        }
        assert!(Instant::now() < deadline, "the fenced leader still runs");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status.code(), Some(EXIT_LEASE_LOST));
    let journal = support::journal_ops(&url).await;
    assert_eq!(journal.get(&seq), Some(&op));
    assert!(
        !journal.values().any(|o| *o == stale),
        "the fenced leader's command was journaled"
    );
    assert!(new.ready(&http).await);
}
