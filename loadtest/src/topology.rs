//! `--topology cluster`: the load test starts the exchange as issue 18's topology on this
//! machine and drives it through the API processes. One `redis-server` (AOF on, in a temp
//! dir), two `gateway --role engine` processes (a leader and a hot standby) and two
//! `gateway --role api` processes, with one cluster key. The release binary is
//! `--gateway-bin`. Buyers and suppliers are spread over the two API processes and fail over
//! to the other when theirs dies (`gpux_client::Client` with both URLs).
//!
//! [`Topology::kill_leader`] SIGKILLs the leading engine and measures the takeover: the time
//! until the standby's `/readyz` says `leading`. [`Topology::kill_api`] SIGKILLs an API
//! process. Every child is killed when the [`Topology`] is dropped.

use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The admin key every process registers at start.
pub const ADMIN_KEY: &str = "gpux_admin_loadtest_topology_0000000001";
/// The processes' shared secret.
const CLUSTER_KEY: &str = "loadtest-topology-cluster-key";
/// Longest wait for a process to become ready, and for a takeover.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Poll period of those waits.
const POLL: Duration = Duration::from_millis(20);

/// One child process.
struct Proc {
    role: &'static str,
    child: Child,
    base: String,
}

/// The running topology.
pub struct Topology {
    redis: Child,
    procs: Vec<Proc>,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl Topology {
    /// Starts Redis, two engines (the first leads) and two API processes of `bin`; logs go to
    /// `<role>-<n>.log` in `logs`.
    ///
    /// # Errors
    /// A binary that does not start or a process not ready within [`READY_TIMEOUT`].
    pub async fn start(bin: &Path, logs: &Path) -> anyhow::Result<Topology> {
        let dir = tempfile::tempdir()?;
        std::fs::create_dir_all(logs)?;
        let port = free_port()?;
        let redis = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--dir", &dir.path().display().to_string()])
            .args([
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--save",
                "",
            ])
            .args(["--logfile", ""])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("redis-server (apt-get install redis-server)")?;
        let mut t = Topology {
            redis,
            procs: Vec::new(),
            http: reqwest::Client::new(),
            _dir: dir,
        };
        let redis_url = format!("redis://127.0.0.1:{port}");
        let started = Instant::now();
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            if started.elapsed() > READY_TIMEOUT {
                bail!("redis-server on {port} did not start");
            }
            tokio::time::sleep(POLL).await;
        }
        for (n, role) in ["engine", "engine", "api", "api"].into_iter().enumerate() {
            let log = logs.join(format!("{role}-{n}.log"));
            t.spawn(bin, &redis_url, role, &log)?;
            // The first engine leads: wait for it before the others start.
            t.wait_ready(n, n == 0).await?;
        }
        Ok(t)
    }

    fn spawn(
        &mut self,
        bin: &Path,
        redis: &str,
        role: &'static str,
        log: &PathBuf,
    ) -> anyhow::Result<()> {
        let port = free_port()?;
        let out = std::fs::File::create(log)?;
        let child = Command::new(bin)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--redis-url", redis, "--role", role])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("GPUX_CLUSTER_KEY", CLUSTER_KEY)
            .env("GPUX_ADMIN_KEY", ADMIN_KEY)
            .env("GPUX_API__RATE_PER_S", "1000000")
            .env("GPUX_API__RATE_BURST", "1000000")
            // Verification runs on every node (docs/market-rules.md §12.2), with the server's
            // default 30-minute deadline: the agents answer every run.
            .env("GPUX_VERIFICATION", "true")
            .env("RUST_LOG", "warn")
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("{} (cargo build --release -p gateway)", bin.display()))?;
        self.procs.push(Proc {
            role,
            child,
            base: format!("http://127.0.0.1:{port}"),
        });
        Ok(())
    }

    /// `/readyz`'s `leading`, or `None` when the process does not answer 200.
    async fn leading(&self, i: usize) -> Option<bool> {
        let r = self
            .http
            .get(format!("{}/readyz", self.procs[i].base))
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .ok()?;
        if !r.status().is_success() {
            return None;
        }
        let v: serde_json::Value = r.json().await.ok()?;
        v["leading"].as_bool()
    }

    /// Waits until process `i` is ready and leads (`lead`) or follows.
    async fn wait_ready(&self, i: usize, lead: bool) -> anyhow::Result<Duration> {
        let started = Instant::now();
        loop {
            if self.leading(i).await == Some(lead) {
                return Ok(started.elapsed());
            }
            if started.elapsed() > READY_TIMEOUT {
                bail!(
                    "{} ({}) not ready with leading={lead} within {} s",
                    self.procs[i].base,
                    self.procs[i].role,
                    READY_TIMEOUT.as_secs()
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The API processes' URLs, comma-separated (the load test's target).
    pub fn api_urls(&self) -> String {
        self.procs
            .iter()
            .filter(|p| p.role == "api")
            .map(|p| p.base.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// SIGKILLs the leading engine and answers how long the other engine took to lead,
    /// counted from the kill.
    ///
    /// # Errors
    /// No engine leads, or none takes over within [`READY_TIMEOUT`].
    pub async fn kill_leader(&mut self) -> anyhow::Result<Duration> {
        // A loaded process may answer /readyz late: look for a while.
        let started = Instant::now();
        let leader = loop {
            let mut found = None;
            for i in 0..self.procs.len() {
                if self.procs[i].role == "engine" && self.leading(i).await == Some(true) {
                    found = Some(i);
                }
            }
            match found {
                Some(i) => break i,
                None if started.elapsed() < READY_TIMEOUT => tokio::time::sleep(POLL).await,
                None => bail!(
                    "no engine said it leads within {} s",
                    READY_TIMEOUT.as_secs()
                ),
            }
        };
        let standby = (0..self.procs.len())
            .find(|&i| i != leader && self.procs[i].role == "engine")
            .context("no standby engine")?;
        let _ = self.procs[leader].child.kill();
        let _ = self.procs[leader].child.wait();
        self.wait_ready(standby, true).await
    }

    /// SIGKILLs the `n`-th API process (0 or 1); answers its URL.
    pub fn kill_api(&mut self, n: usize) -> Option<String> {
        let p = self.procs.iter_mut().filter(|p| p.role == "api").nth(n)?;
        let _ = p.child.kill();
        let _ = p.child.wait();
        Some(p.base.clone())
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for p in &mut self.procs {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
        let _ = self.redis.kill();
        let _ = self.redis.wait();
    }
}
