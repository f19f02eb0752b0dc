//! Gateway binaries of one role each on a shared Redis journal (tests of several processes:
//! `cluster.rs`, `redis_cluster.rs`): start, wait for a role, read the state, kill; and the
//! REST calls those tests make.
#![allow(dead_code)]

use serde_json::{Value, json};
use std::process::{Child, Command as Proc, Stdio};
use std::time::{Duration, Instant};

/// The lease these tests run with, ms (the default is 2,000).
pub const LEASE_MS: u64 = 1_000;
/// The processes' shared secret (`GPUX_CLUSTER_KEY`).
pub const CLUSTER_KEY: &str = "cluster-test-shared-secret";
/// The admin key every process is started with (`GPUX_ADMIN_KEY`).
pub const ADMIN_KEY: &str = "gpux_admin_cluster_test_key_000000000001";

/// Where a process's output goes: `$TEST_GATEWAY_LOGS/gateway-<port>.<out|err>.log` when
/// that variable is set (to read what a failing test's processes said), else nowhere.
fn log_file(port: u16, what: &str) -> Stdio {
    std::env::var_os("TEST_GATEWAY_LOGS")
        .and_then(|d| {
            let name = format!("gateway-{port}.{what}.log");
            std::fs::File::create(std::path::Path::new(&d).join(name)).ok()
        })
        .map_or_else(Stdio::null, Stdio::from)
}

/// A gateway binary of `role` on a shared Redis journal.
pub struct Gateway {
    pub child: Child,
    pub base: String,
}

impl Gateway {
    /// Starts the binary of `role` on `redis_url` (ticks every 100 ms, lease [`LEASE_MS`]).
    pub fn start(redis_url: &str, role: &str) -> Gateway {
        Gateway::start_with(redis_url, role, &[])
    }

    /// [`Gateway::start`] with more flags (`--redis-cluster`, `--redis-wait-replicas 1`, ...).
    pub fn start_with(redis_url: &str, role: &str, extra: &[&str]) -> Gateway {
        let port = super::free_port();
        let child = Proc::new(env!("CARGO_BIN_EXE_gateway"))
            .args(["--listen", &format!("127.0.0.1:{port}"), "--internal-api"])
            .args(["--tick-ms", "100", "--redis-url", redis_url])
            .args(["--lease-ms", &LEASE_MS.to_string(), "--role", role])
            .args(extra)
            .env("GPUX_CLUSTER_KEY", CLUSTER_KEY)
            .env("GPUX_ADMIN_KEY", ADMIN_KEY)
            .stdout(log_file(port, "out"))
            .stderr(log_file(port, "err"))
            .spawn()
            .expect("start the gateway binary");
        Gateway {
            child,
            base: format!("http://127.0.0.1:{port}"),
        }
    }

    /// `/readyz`'s body when it answers 200.
    pub async fn readyz(&self, http: &reqwest::Client) -> Option<Value> {
        let r = http
            .get(format!("{}/readyz", self.base))
            .timeout(Duration::from_millis(500))
            .send()
            .await
            .ok()?;
        if !r.status().is_success() {
            return None;
        }
        r.json().await.ok()
    }

    /// Waits until `/readyz` says `leading` is `leading`; the time it took.
    pub async fn wait_role(
        &self,
        http: &reqwest::Client,
        leading: bool,
        within: Duration,
    ) -> Duration {
        let started = Instant::now();
        while started.elapsed() < within {
            if let Some(v) = self.readyz(http).await
                && v["leading"] == json!(leading)
            {
                return started.elapsed();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!(
            "{} not ready with leading={leading} within {within:?}",
            self.base
        );
    }

    /// `{last_seq, state_hash}` of this process's market.
    pub async fn state(&self, http: &reqwest::Client) -> (u64, String) {
        let v: Value = http
            .get(format!("{}/internal/state", self.base))
            .send()
            .await
            .expect("state")
            .json()
            .await
            .expect("state json");
        (
            v["last_seq"].as_u64().expect("last_seq"),
            v["state_hash"].as_str().expect("hash").to_string(),
        )
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.kill();
    }
}

pub async fn post(
    http: &reqwest::Client,
    url: String,
    key: &str,
    idem: Option<&str>,
    body: Value,
) -> (u16, Value) {
    let mut r = http
        .post(url)
        .bearer_auth(key)
        .json(&body)
        .timeout(Duration::from_secs(10));
    if let Some(k) = idem {
        r = r.header("Idempotency-Key", k);
    }
    match r.send().await {
        Ok(r) => {
            let status = r.status().as_u16();
            (status, r.json().await.unwrap_or(Value::Null))
        }
        Err(_) => (0, Value::Null),
    }
}

pub async fn balance(http: &reqwest::Client, base: &str, key: &str) -> (u16, Value) {
    match http
        .get(format!("{base}/v1/balance"))
        .bearer_auth(key)
        .timeout(Duration::from_secs(5))
        .send()
        .await
    {
        Ok(r) => {
            let status = r.status().as_u16();
            (status, r.json().await.unwrap_or(Value::Null))
        }
        Err(_) => (0, Value::Null),
    }
}

/// Waits until `base` signs the admin key in (the leader registers it at start; a follower
/// knows it once its key cache has followed that far).
pub async fn wait_admin(http: &reqwest::Client, base: &str, within: Duration) {
    let started = Instant::now();
    while http
        .get(format!("{base}/v1/admin/accounts"))
        .bearer_auth(ADMIN_KEY)
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .map_or(true, |r| !r.status().is_success())
    {
        assert!(started.elapsed() < within, "{base}: no admin key");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits up to `within` until `base` answers the key's balance as `want` (a replica that
/// has caught up).
pub async fn wait_balance(
    http: &reqwest::Client,
    base: &str,
    key: &str,
    want: &str,
    within: Duration,
) {
    let started = Instant::now();
    loop {
        let (status, b) = balance(http, base, key).await;
        if status == 200 && b["balance"].as_str() == Some(want) {
            return;
        }
        assert!(
            started.elapsed() < within,
            "{base}: balance {status} {b} (expected {want})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reads `base`'s websocket until `view` reaches the seq of the REST inventory of `sku`,
/// asserts that the two agree level for level, and answers the free GPUs.
pub async fn feed_matches_rest(
    http: &reqwest::Client,
    base: &str,
    sku: &str,
    ws: &mut super::api::Ws,
    view: &mut super::api::View,
) -> u64 {
    let server: Value = http
        .get(format!("{base}/v1/inventory?sku={sku}"))
        .send()
        .await
        .expect("inventory")
        .json()
        .await
        .expect("inventory json");
    let want = server["seq"].as_u64().expect("seq");
    while view.seq < want {
        let m = tokio::time::timeout(Duration::from_secs(5), ws.recv())
            .await
            .unwrap_or_else(|_| panic!("{base}: the feed stopped at {}", view.seq));
        view.apply(&m);
    }
    let mut expect = super::api::View::default();
    expect.apply(&server);
    assert_eq!(view.levels, expect.levels, "{base}: the feed diverged");
    view.levels.values().map(|(f, _)| f).sum()
}
