//! What the benchmark reads from outside the code under test, sampled at the start and end of a
//! window ([`Probe::sample`], [`window`]):
//! - CPU time from `/proc`: the gateway's `/proc/PID/stat` (utime + stime); this process's
//!   `/proc/self/stat` — the agents, the buyer's websocket and the benchmark's own bookkeeping
//!   (a small share: it polls twice a second); and its reaped children's (cutime + cstime):
//!   the hook processes (`sh` + `sleep` per lease) and the CLI, counted once they have exited;
//! - the machine's `/proc/stat` (busy share of all cores: what else ran, builds of other
//!   sessions included);
//! - the gateway's Prometheus counters (`GET /metrics`): `gpux_commands_total` by type (the
//!   commands the API submitted: heartbeats, reports, bids, …) and `gpux_journal_last_seq`
//!   (every journaled command, ticks included).
//!
//! CPU is given as a percentage of one core (100 % = one core busy for the whole window); the
//! machine's busy share as a percentage of all its cores.

use anyhow::Context;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// Bound of one `GET /metrics`, ms.
pub const SCRAPE_TIMEOUT_MS: u64 = 5_000;
/// Clock ticks per second when `getconf CLK_TCK` cannot be asked (Linux's usual value).
const DEFAULT_CLK_TCK: f64 = 100.0;

/// CPU time of a process, clock ticks.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcCpu {
    /// utime + stime.
    pub own: u64,
    /// cutime + cstime: its children that have exited and been waited for.
    pub children: u64,
}

/// One reading of everything.
#[derive(Clone, Debug)]
pub struct Sample {
    at: Instant,
    gateway: ProcCpu,
    this: ProcCpu,
    machine_busy: u64,
    machine_total: u64,
    commands: BTreeMap<String, u64>,
    journal_seq: u64,
}

/// What happened between two samples.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Window {
    /// Length, s.
    pub seconds: f64,
    /// The gateway process, % of one core.
    pub gateway_cpu_pct: f64,
    /// This process (the agents, the buyer's websocket, the bench), % of one core.
    pub agents_cpu_pct: f64,
    /// Reaped children of this process (hooks, the CLI), % of one core.
    pub children_cpu_pct: f64,
    /// The machine, % of all cores busy.
    pub machine_busy_pct: f64,
    /// Cores of the machine.
    pub cores: usize,
    /// Journaled commands per second (every command, ticks included).
    pub journal_commands_per_s: f64,
    /// Commands the API submitted per second (all types).
    pub api_commands_per_s: f64,
    /// Heartbeats per second.
    pub heartbeats_per_s: f64,
    /// Commands the API submitted in the window, by type.
    pub commands_by_type: BTreeMap<String, u64>,
}

/// Most points of a CPU series.
pub const MAX_SERIES_POINTS: usize = 2_000;

/// CPU use in one interval of a series (% of one core; the machine: % of all cores).
#[derive(Clone, Debug, Serialize)]
pub struct CpuPoint {
    /// End of the interval, ms after the series began.
    pub until_ms: f64,
    /// The gateway.
    pub gateway_cpu_pct: f64,
    /// This process (the agents).
    pub agents_cpu_pct: f64,
    /// Reaped children (hooks, the CLI).
    pub children_cpu_pct: f64,
    /// The machine.
    pub machine_busy_pct: f64,
}

/// Reads the gateway and this process.
pub struct Probe {
    http: reqwest::Client,
    metrics_url: String,
    gateway_pid: u32,
    clk_tck: f64,
    cores: usize,
}

impl Probe {
    /// A probe of the gateway at `base` running as `gateway_pid`.
    ///
    /// # Errors
    /// The HTTP client cannot be built.
    pub fn new(base: &str, gateway_pid: u32) -> anyhow::Result<Probe> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_millis(SCRAPE_TIMEOUT_MS))
            .build()?;
        Ok(Probe {
            http,
            metrics_url: format!("{}/metrics", base.trim_end_matches('/')),
            gateway_pid,
            clk_tck: clk_tck(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        })
    }

    /// Reads `/proc` and the gateway's counters now.
    ///
    /// # Errors
    /// `/proc` unreadable (the gateway exited) or the scrape failed.
    pub async fn sample(&self) -> anyhow::Result<Sample> {
        let text = self
            .http
            .get(&self.metrics_url)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .context("GET /metrics")?
            .text()
            .await
            .context("reading /metrics")?;
        let (commands, journal_seq) = parse_metrics(&text);
        let (machine_busy, machine_total) = machine_cpu()?;
        Ok(Sample {
            at: Instant::now(),
            gateway: proc_cpu(&self.gateway_pid.to_string())?,
            this: proc_cpu("self")?,
            machine_busy,
            machine_total,
            commands,
            journal_seq,
        })
    }

    /// CPU times only (no scrape), for [`Probe::cpu_series`].
    fn cpu_sample(&self) -> anyhow::Result<Sample> {
        let (machine_busy, machine_total) = machine_cpu()?;
        Ok(Sample {
            at: Instant::now(),
            gateway: proc_cpu(&self.gateway_pid.to_string())?,
            this: proc_cpu("self")?,
            machine_busy,
            machine_total,
            commands: BTreeMap::new(),
            journal_seq: 0,
        })
    }

    /// CPU use in each `period` from now until `stop` turns true (or [`MAX_SERIES_POINTS`]).
    pub async fn cpu_series(
        &self,
        period: Duration,
        mut stop: watch::Receiver<bool>,
    ) -> Vec<CpuPoint> {
        let mut points = Vec::new();
        let Ok(first) = self.cpu_sample() else {
            return points;
        };
        let mut last = first.clone();
        while points.len() < MAX_SERIES_POINTS {
            let stopped = tokio::select! {
                () = tokio::time::sleep(period) => false,
                _ = stop.wait_for(|s| *s) => true,
            };
            let Ok(now) = self.cpu_sample() else {
                break;
            };
            let w = self.window(&last, &now);
            points.push(CpuPoint {
                until_ms: now.at.duration_since(first.at).as_secs_f64() * 1000.0,
                gateway_cpu_pct: w.gateway_cpu_pct,
                agents_cpu_pct: w.agents_cpu_pct,
                children_cpu_pct: w.children_cpu_pct,
                machine_busy_pct: w.machine_busy_pct,
            });
            last = now;
            if stopped {
                break;
            }
        }
        points
    }

    /// What happened between `a` and `b`.
    pub fn window(&self, a: &Sample, b: &Sample) -> Window {
        let seconds = b.at.duration_since(a.at).as_secs_f64().max(1e-9);
        let pct = |ticks: u64| ticks as f64 / self.clk_tck / seconds * 100.0;
        let commands_by_type: BTreeMap<String, u64> = b
            .commands
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.saturating_sub(a.commands.get(k).copied().unwrap_or(0)),
                )
            })
            .filter(|(_, v)| *v > 0)
            .collect();
        let api: u64 = commands_by_type.values().sum();
        let total = b.machine_total.saturating_sub(a.machine_total).max(1);
        Window {
            seconds,
            gateway_cpu_pct: pct(b.gateway.own.saturating_sub(a.gateway.own)),
            agents_cpu_pct: pct(b.this.own.saturating_sub(a.this.own)),
            children_cpu_pct: pct(b.this.children.saturating_sub(a.this.children)),
            machine_busy_pct: b.machine_busy.saturating_sub(a.machine_busy) as f64 / total as f64
                * 100.0,
            cores: self.cores,
            journal_commands_per_s: b.journal_seq.saturating_sub(a.journal_seq) as f64 / seconds,
            api_commands_per_s: api as f64 / seconds,
            heartbeats_per_s: commands_by_type.get("heartbeat").copied().unwrap_or(0) as f64
                / seconds,
            commands_by_type,
        }
    }
}

/// `gpux_commands_total` summed over results, by type; and `gpux_journal_last_seq`.
fn parse_metrics(text: &str) -> (BTreeMap<String, u64>, u64) {
    let mut by_type = BTreeMap::new();
    let mut seq = 0;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("gpux_commands_total{") {
            let Some((labels, value)) = rest.rsplit_once("} ") else {
                continue;
            };
            let kind = labels
                .split(',')
                .find_map(|l| l.strip_prefix("type=\""))
                .map(|t| t.trim_end_matches('"').to_string());
            if let (Some(kind), Ok(v)) = (kind, value.trim().parse::<f64>()) {
                *by_type.entry(kind).or_insert(0) += v as u64;
            }
        } else if let Some(v) = line.strip_prefix("gpux_journal_last_seq ") {
            seq = v.trim().parse::<f64>().map_or(0, |v| v as u64);
        }
    }
    (by_type, seq)
}

/// CPU time of `/proc/{pid}/stat` (`pid` may be `self`).
fn proc_cpu(pid: &str) -> anyhow::Result<ProcCpu> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    // Fields after the command name (which may hold spaces and parentheses): field 3 first.
    let after = text.rsplit_once(')').map_or("", |(_, rest)| rest);
    let f: Vec<u64> = after
        .split_whitespace()
        .map(|s| s.parse().unwrap_or(0))
        .collect();
    let field = |n: usize| f.get(n - 3).copied().unwrap_or(0);
    Ok(ProcCpu {
        own: field(14) + field(15),
        children: field(16) + field(17),
    })
}

/// (busy, total) clock ticks of all cores, from `/proc/stat`.
fn machine_cpu() -> anyhow::Result<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    let line = text.lines().next().unwrap_or_default();
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|s| s.parse().unwrap_or(0))
        .collect();
    let total: u64 = f.iter().sum();
    let idle = f.get(3).copied().unwrap_or(0) + f.get(4).copied().unwrap_or(0);
    Ok((total.saturating_sub(idle), total))
}

/// Clock ticks per second (`getconf CLK_TCK`).
fn clk_tck() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|t| *t > 0.0)
        .unwrap_or(DEFAULT_CLK_TCK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_summed_by_type() {
        let text = "# TYPE gpux_commands_total counter\n\
            gpux_commands_total{type=\"heartbeat\",result=\"accepted\"} 120\n\
            gpux_commands_total{result=\"rejected\",type=\"heartbeat\"} 3\n\
            gpux_commands_total{type=\"place_bid\",result=\"accepted\"} 1\n\
            gpux_journal_last_seq 4567\n";
        let (by_type, seq) = parse_metrics(text);
        assert_eq!(by_type["heartbeat"], 123);
        assert_eq!(by_type["place_bid"], 1);
        assert_eq!(seq, 4567);
    }

    #[test]
    fn this_process_has_cpu_time() {
        assert!(proc_cpu("self").is_ok());
        let (busy, total) = machine_cpu().expect("/proc/stat");
        assert!(busy <= total && total > 0);
    }
}
