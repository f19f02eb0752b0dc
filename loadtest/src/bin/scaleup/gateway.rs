//! The server under test as a child process: the release `gateway` binary, its embedded
//! journal in a temp dir (on disk: its fsyncs are part of what is measured), listening on a
//! free port (`--listen 127.0.0.1:0`; the address is read from its "Listening on" line), an
//! admin key registered at start (`GPUX_ADMIN_KEY`), rate limits raised out of the way
//! ([`RATE`]) and every other setting at its default — the heartbeat timeout among them.
//! A process of its own, so that its CPU time is read from `/proc/PID/stat` apart from the
//! agents' (crate `measure`).
//!
//! The child gets none of the caller's `GPUX_*` variables (the server refuses unknown keys, and
//! a `GPUX_KEY` meant for the CLI is one) and runs in the temp dir (no stray `gpux.toml`). Its
//! stdout and stderr go to `gateway.log` there. Dropping a [`Gateway`] kills it; [`Gateway::stop`]
//! stops it gracefully first.

use anyhow::{Context, bail};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::time::Instant;

/// Requests per second and burst per API key: far above what 1,000 agents, the supplier's
/// setup and the buyer send, so the benchmark measures the exchange, not its rate limiter.
pub const RATE: u32 = 1_000_000;
/// Longest wait for the server to recover its (empty) journal and listen, ms.
pub const START_TIMEOUT_MS: u64 = 60_000;
/// After SIGTERM, how long the server may drain and snapshot before SIGKILL, ms.
pub const STOP_GRACE_MS: u64 = 15_000;
/// Poll period of the start and stop waits, ms.
const POLL_MS: u64 = 50;
/// Lines of the server's log quoted in an error.
const LOG_TAIL_LINES: usize = 30;

/// The running server.
pub struct Gateway {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// Its process id (for `/proc/PID/stat`).
    pub pid: u32,
    log: PathBuf,
}

impl Gateway {
    /// Starts `bin` with its journal under `dir` and waits until it listens.
    ///
    /// # Errors
    /// The binary cannot be started, exits, or does not listen within [`START_TIMEOUT_MS`].
    pub async fn start(bin: &Path, dir: &Path, admin_key: &str) -> anyhow::Result<Gateway> {
        let log = dir.join("gateway.log");
        let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut cmd = Command::new(bin);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("GPUX_") {
                cmd.env_remove(k);
            }
        }
        cmd.arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(dir.join("journal"))
            .env("GPUX_ADMIN_KEY", admin_key)
            .env("GPUX_API__RATE_PER_S", RATE.to_string())
            .env("GPUX_API__RATE_BURST", RATE.to_string())
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        let child = cmd.spawn().with_context(|| {
            format!(
                "starting {} (build it: cargo build --release -p gateway)",
                bin.display()
            )
        })?;
        let mut gw = Gateway {
            pid: child.id(),
            child,
            base: String::new(),
            log,
        };
        gw.base = gw.wait_listening().await?;
        Ok(gw)
    }

    async fn wait_listening(&mut self) -> anyhow::Result<String> {
        let deadline = Instant::now() + Duration::from_millis(START_TIMEOUT_MS);
        loop {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            if let Some(url) = text.lines().find_map(|l| l.strip_prefix("Listening on ")) {
                return Ok(url.trim().to_string());
            }
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "the gateway exited ({status}) before listening:\n{}",
                    self.log_tail()
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "the gateway did not listen within {START_TIMEOUT_MS} ms:\n{}",
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
        }
    }

    /// The last lines of the server's log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
    }

    /// Whether the server is still running (`Err`: it exited, with its status and log).
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => bail!("the gateway exited ({status}):\n{}", self.log_tail()),
        }
    }

    /// SIGTERM (graceful stop: drain, final snapshot), then SIGKILL after [`STOP_GRACE_MS`].
    pub async fn stop(mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid.to_string())
            .status();
        let deadline = Instant::now() + Duration::from_millis(STOP_GRACE_MS);
        while Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
