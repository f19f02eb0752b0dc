//! Results: per lease ([`LeaseTiming`]), per run ([`RunResult`]), over runs ([`Summary`]);
//! the table printed to stdout and `scaleup.json`.
//!
//! Percentiles are nearest-rank over the exact values (no histogram): p50 of 1,000 leases is
//! the 500th smallest. Over runs, each figure is given as its median and range.

use crate::bid::{CliExit, Placed};
use crate::feed::Close;
use crate::measure::Window;
use crate::run::dist_of;
use serde::Serialize;
use std::time::Duration;

/// A distribution, ms.
#[derive(Clone, Debug, Serialize)]
pub struct Dist {
    /// Values.
    pub n: usize,
    /// Smallest.
    pub min: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Dist {
    /// Of `values` (`None` when empty).
    pub fn of(mut values: Vec<f64>) -> Option<Dist> {
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let at = |q: f64| {
            let rank = (q * values.len() as f64).ceil() as usize;
            values[rank.clamp(1, values.len()) - 1]
        };
        Some(Dist {
            n: values.len(),
            min: values[0],
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            max: values[values.len() - 1],
        })
    }
}

/// One lease of a run's bid.
#[derive(Clone, Debug, Serialize)]
pub struct LeaseTiming {
    /// Lease id.
    pub lease_id: String,
    /// Node id.
    pub node_id: String,
    /// GPUs.
    pub gpus: u32,
    /// Its state when read after the run.
    pub state: String,
    /// Its node's drawn provisioning delay, ms.
    pub delay_ms: Option<u64>,
    /// Time to ready, ms after the bid's acknowledgement: the websocket's receipt, else the
    /// exchange's `ready_ms`.
    pub after_ack_ms: Option<f64>,
    /// Which of the two `after_ack_ms` is: `websocket`, `server` or `none`.
    pub source: &'static str,
    /// The buyer's websocket received `lease_ready`, ms after the acknowledgement.
    pub ws_after_ack_ms: Option<f64>,
    /// The exchange's `ready_ms`, ms after the acknowledgement.
    pub server_after_ack_ms: Option<f64>,
    /// Receipt minus the event's `at_ms`, ms (feed lag to this client).
    pub ws_lag_ms: Option<f64>,
    /// It became ready.
    pub ready: bool,
    /// Its provision hook started, ms after the acknowledgement (10 ms steps).
    pub hook_started_after_ack_ms: Option<f64>,
    /// Its provision hook's sleep ended, ms after the acknowledgement (10 ms steps).
    pub hook_slept_after_ack_ms: Option<f64>,
    /// Why it failed (a lease not delivered: the agent's reason).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
}

/// The goal check of a run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Goal {
    /// 5,000 ms + the slowest delay drawn among the nodes given a lease, ms.
    pub limit_ms: f64,
    /// Every lease ready within the limit of the acknowledgement.
    pub met_from_ack: bool,
    /// Every lease ready within the limit of the CLI's start.
    pub met_from_spawn: bool,
    /// Limit minus all-ready time from the acknowledgement, ms (negative: missed by).
    pub margin_ms: Option<f64>,
}

impl Goal {
    /// The check of `r` with `goal_ms` beyond the slowest delay.
    pub fn of(r: &RunResult, goal_ms: f64) -> Goal {
        let limit_ms = goal_ms + r.slowest_delay_ms as f64;
        let all = r.not_ready == 0 && r.leases > 0;
        let within = |t: Option<f64>| all && t.is_some_and(|t| t <= limit_ms);
        Goal {
            limit_ms,
            met_from_ack: within(r.all_ready_after_ack_ms),
            met_from_spawn: within(r.all_ready_after_spawn_ms),
            margin_ms: r.all_ready_after_ack_ms.map(|t| limit_ms - t),
        }
    }
}

/// How the CLI ended, relative to the bid.
#[derive(Clone, Debug, Serialize)]
pub struct CliResult {
    /// Exit, ms after the acknowledgement.
    pub exit_after_ack_ms: Option<f64>,
    /// Exit, ms after its start.
    pub exit_after_spawn_ms: Option<f64>,
    /// The exit itself.
    #[serde(flatten)]
    pub exit: CliExit,
}

/// One run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RunResult {
    /// Run number (0-based).
    pub run: usize,
    /// The fleet became listed after this long before the run, s.
    pub listed_wait_s: f64,
    /// Leases of the bid.
    pub leases: usize,
    /// GPUs filled.
    pub gpus_filled: u32,
    /// The bid's status in its acknowledgement.
    pub bid_status: String,
    /// The acknowledgement, ms after the CLI's start (its start-up and the request).
    pub ack_after_spawn_ms: f64,
    /// Leases not ready when the wait ended.
    pub not_ready: usize,
    /// The wait saw every lease ready or ended (else it hit its time limit).
    pub all_settled: bool,
    /// Slowest delay drawn among the nodes given a lease, ms.
    pub slowest_delay_ms: u64,
    /// Time to ready per lease from the acknowledgement, ms.
    pub time_to_ready_after_ack: Option<Dist>,
    /// Time to ready per lease from the CLI's start, ms.
    pub time_to_ready_after_spawn: Option<Dist>,
    /// Time to ready minus the node's drawn delay, ms: what the exchange and the agent add.
    pub overhead_beyond_delay: Option<Dist>,
    /// Dispatch: the provision hook started, ms after the acknowledgement (the fill's events
    /// to the nodes' websockets, each agent's reconcile read and state save, `sh` started).
    pub hook_started_after_ack: Option<Dist>,
    /// The hook's sleep ended minus its start minus the drawn delay, ms (`sleep` started).
    pub hook_beyond_delay: Option<Dist>,
    /// Report: ready (as measured) minus the end of the hook's sleep, ms (the hook's exit,
    /// the agent's parse, state save and ready report, the exchange's commit, the feed).
    pub ready_after_hook: Option<Dist>,
    /// The exchange's `ready_ms` per lease, ms after the acknowledgement (every lease).
    pub server_ready_after_ack: Option<Dist>,
    /// Websocket receipt minus the event's `at_ms`, ms.
    pub ws_lag: Option<Dist>,
    /// Every lease ready, ms after the acknowledgement.
    pub all_ready_after_ack_ms: Option<f64>,
    /// Every lease ready, ms after the CLI's start.
    pub all_ready_after_spawn_ms: Option<f64>,
    /// Goal check.
    pub goal: Goal,
    /// The CLI (with `--bid-via cli`).
    pub cli: Option<CliResult>,
    /// Leases whose `lease_ready` the websocket received.
    pub ws_ready_seen: usize,
    /// Websocket connections made (1 = it never closed).
    pub ws_connects: u32,
    /// `fill` events the websocket received.
    pub ws_fills: usize,
    /// Websocket closes.
    pub ws_closes: Vec<Close>,
    /// Leases that ended other than by release: (lease, reason).
    pub ended_early: Vec<(String, String)>,
    /// Failovers.
    pub migrated: usize,
    /// The idle window before the bid.
    pub idle: Window,
    /// From the CLI's start to every lease ready and the CLI's exit.
    pub scaleup: Window,
    /// CPU use every [`crate::run::SERIES_MS`] from the acknowledgement to the end of the wait.
    pub cpu_series: Vec<crate::measure::CpuPoint>,
    /// From the release of every lease to the fleet listed again (wipes done), s.
    pub release_to_relisted_s: Option<f64>,
    /// Nodes held (a lease not delivered) that the supplier resumed after the run.
    pub nodes_resumed_after: usize,
    /// Why the fleet did not come back after the release (no further run then).
    pub release_error: Option<String>,
    /// Per lease.
    pub lease_timings: Vec<LeaseTiming>,
}

impl RunResult {
    /// The run's figures from its leases and windows (the goal is set after).
    pub fn new(
        run: usize,
        placed: &Placed,
        timings: Vec<LeaseTiming>,
        idle: Window,
        scaleup: Window,
        cli: Option<CliExit>,
        ws_closes: Vec<Close>,
    ) -> RunResult {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let ack_after_spawn_ms = ms(placed.acked.duration_since(placed.spawned));
        let not_ready = timings.iter().filter(|t| !t.ready).count();
        let all_ready_after_ack_ms = (not_ready == 0)
            .then(|| {
                timings
                    .iter()
                    .filter_map(|t| t.after_ack_ms)
                    .reduce(f64::max)
            })
            .flatten();
        let cli = cli.map(|exit| {
            let after_ack = exit
                .at
                .map(|at| ms(at.saturating_duration_since(placed.acked)));
            CliResult {
                exit_after_ack_ms: after_ack,
                exit_after_spawn_ms: after_ack.map(|t| t + ack_after_spawn_ms),
                exit,
            }
        });
        let mut r = RunResult {
            run,
            leases: timings.len(),
            gpus_filled: placed.placed.filled_gpus,
            bid_status: serde_json::to_value(placed.placed.status)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default(),
            ack_after_spawn_ms,
            not_ready,
            slowest_delay_ms: timings.iter().filter_map(|t| t.delay_ms).max().unwrap_or(0),
            all_ready_after_ack_ms,
            all_ready_after_spawn_ms: all_ready_after_ack_ms.map(|t| t + ack_after_spawn_ms),
            cli,
            ws_ready_seen: timings
                .iter()
                .filter(|t| t.ws_after_ack_ms.is_some())
                .count(),
            ws_closes,
            idle,
            scaleup,
            lease_timings: timings,
            ..RunResult::default()
        };
        r.set_dists();
        r
    }

    /// The per-lease distributions, from `lease_timings`.
    fn set_dists(&mut self) {
        let t = &self.lease_timings;
        let spawn = self.ack_after_spawn_ms;
        self.time_to_ready_after_ack = dist_of(t, |t| t.after_ack_ms);
        self.time_to_ready_after_spawn = dist_of(t, |t| t.after_ack_ms.map(|v| v + spawn));
        self.overhead_beyond_delay = dist_of(t, |t| Some(t.after_ack_ms? - t.delay_ms? as f64));
        self.hook_started_after_ack = dist_of(t, |t| t.hook_started_after_ack_ms);
        self.hook_beyond_delay = dist_of(t, |t| {
            Some(t.hook_slept_after_ack_ms? - t.hook_started_after_ack_ms? - t.delay_ms? as f64)
        });
        self.ready_after_hook = dist_of(t, |t| Some(t.after_ack_ms? - t.hook_slept_after_ack_ms?));
        self.server_ready_after_ack = dist_of(t, |t| t.server_after_ack_ms);
        self.ws_lag = dist_of(t, |t| t.ws_lag_ms);
    }
}

/// A figure over runs.
#[derive(Clone, Debug, Serialize)]
pub struct Spread {
    /// Median over runs.
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

impl Spread {
    fn of(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let d = Dist::of(values.into_iter().collect())?;
        Some(Spread {
            median: d.p50,
            min: d.min,
            max: d.max,
        })
    }
}

/// Over runs.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// Runs.
    pub runs: usize,
    /// Runs that met the goal (from the acknowledgement).
    pub goal_met_runs: usize,
    /// Per-lease time to ready from the acknowledgement, all runs' leases pooled, ms.
    pub pooled_time_to_ready_after_ack: Option<Dist>,
    /// Per-lease overhead beyond the delay, pooled, ms.
    pub pooled_overhead_beyond_delay: Option<Dist>,
    /// Hook started after the acknowledgement, p50 per run, ms.
    pub hook_started_p50_ms: Option<Spread>,
    /// Hook started after the acknowledgement, p99 per run, ms.
    pub hook_started_p99_ms: Option<Spread>,
    /// Ready after the hook's sleep, p50 per run, ms.
    pub ready_after_hook_p50_ms: Option<Spread>,
    /// Ready after the hook's sleep, p99 per run, ms.
    pub ready_after_hook_p99_ms: Option<Spread>,
    /// Scale-up: heartbeats per second.
    pub scaleup_heartbeats_per_s: Option<Spread>,
    /// Time-to-ready p50 per run, ms.
    pub ttr_p50_ms: Option<Spread>,
    /// Time-to-ready p99 per run, ms.
    pub ttr_p99_ms: Option<Spread>,
    /// All ready after the acknowledgement, ms.
    pub all_ready_after_ack_ms: Option<Spread>,
    /// All ready after the CLI's start, ms.
    pub all_ready_after_spawn_ms: Option<Spread>,
    /// Slowest delay drawn, ms.
    pub slowest_delay_ms: Option<Spread>,
    /// Goal margin (limit − all ready), ms.
    pub goal_margin_ms: Option<Spread>,
    /// CLI exit after the acknowledgement, ms.
    pub cli_exit_after_ack_ms: Option<Spread>,
    /// Idle: heartbeats per second.
    pub idle_heartbeats_per_s: Option<Spread>,
    /// Idle: journaled commands per second.
    pub idle_commands_per_s: Option<Spread>,
    /// Idle: gateway CPU, % of one core.
    pub idle_gateway_cpu_pct: Option<Spread>,
    /// Idle: agents' process CPU, % of one core.
    pub idle_agents_cpu_pct: Option<Spread>,
    /// Idle: machine busy, % of all cores.
    pub idle_machine_busy_pct: Option<Spread>,
    /// Scale-up: gateway CPU, % of one core.
    pub scaleup_gateway_cpu_pct: Option<Spread>,
    /// Scale-up: agents' process CPU, % of one core.
    pub scaleup_agents_cpu_pct: Option<Spread>,
    /// Scale-up: hooks and CLI, % of one core.
    pub scaleup_children_cpu_pct: Option<Spread>,
    /// Scale-up: machine busy, % of all cores.
    pub scaleup_machine_busy_pct: Option<Spread>,
}

impl Summary {
    /// Over `runs`.
    pub fn of(runs: &[RunResult]) -> Summary {
        let each = |f: &dyn Fn(&RunResult) -> Option<f64>| Spread::of(runs.iter().filter_map(f));
        let pooled: Vec<LeaseTiming> = runs.iter().flat_map(|r| r.lease_timings.clone()).collect();
        Summary {
            runs: runs.len(),
            goal_met_runs: runs.iter().filter(|r| r.goal.met_from_ack).count(),
            pooled_time_to_ready_after_ack: dist_of(&pooled, |t| t.after_ack_ms),
            pooled_overhead_beyond_delay: dist_of(&pooled, |t| {
                t.after_ack_ms.zip(t.delay_ms).map(|(a, d)| a - d as f64)
            }),
            hook_started_p50_ms: each(&|r| r.hook_started_after_ack.as_ref().map(|d| d.p50)),
            hook_started_p99_ms: each(&|r| r.hook_started_after_ack.as_ref().map(|d| d.p99)),
            ready_after_hook_p50_ms: each(&|r| r.ready_after_hook.as_ref().map(|d| d.p50)),
            ready_after_hook_p99_ms: each(&|r| r.ready_after_hook.as_ref().map(|d| d.p99)),
            scaleup_heartbeats_per_s: each(&|r| Some(r.scaleup.heartbeats_per_s)),
            ttr_p50_ms: each(&|r| r.time_to_ready_after_ack.as_ref().map(|d| d.p50)),
            ttr_p99_ms: each(&|r| r.time_to_ready_after_ack.as_ref().map(|d| d.p99)),
            all_ready_after_ack_ms: each(&|r| r.all_ready_after_ack_ms),
            all_ready_after_spawn_ms: each(&|r| r.all_ready_after_spawn_ms),
            slowest_delay_ms: each(&|r| Some(r.slowest_delay_ms as f64)),
            goal_margin_ms: each(&|r| r.goal.margin_ms),
            cli_exit_after_ack_ms: each(&|r| r.cli.as_ref().and_then(|c| c.exit_after_ack_ms)),
            idle_heartbeats_per_s: each(&|r| Some(r.idle.heartbeats_per_s)),
            idle_commands_per_s: each(&|r| Some(r.idle.journal_commands_per_s)),
            idle_gateway_cpu_pct: each(&|r| Some(r.idle.gateway_cpu_pct)),
            idle_agents_cpu_pct: each(&|r| Some(r.idle.agents_cpu_pct)),
            idle_machine_busy_pct: each(&|r| Some(r.idle.machine_busy_pct)),
            scaleup_gateway_cpu_pct: each(&|r| Some(r.scaleup.gateway_cpu_pct)),
            scaleup_agents_cpu_pct: each(&|r| Some(r.scaleup.agents_cpu_pct)),
            scaleup_children_cpu_pct: each(&|r| Some(r.scaleup.children_cpu_pct)),
            scaleup_machine_busy_pct: each(&|r| Some(r.scaleup.machine_busy_pct)),
        }
    }
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.0}"))
}

/// One run as a few lines of text.
pub fn print_run(r: &RunResult) {
    let d = r.time_to_ready_after_ack.as_ref();
    let o = r.overhead_beyond_delay.as_ref();
    println!(
        "run {}: {} leases ({} GPUs, bid {}), ack {:.0} ms after the CLI started; not ready: {}",
        r.run, r.leases, r.gpus_filled, r.bid_status, r.ack_after_spawn_ms, r.not_ready
    );
    println!(
        "  time to ready from ack, ms: p50 {} p90 {} p99 {} max {}; overhead beyond the delay: p50 {} p99 {} max {}",
        opt(d.map(|d| d.p50)),
        opt(d.map(|d| d.p90)),
        opt(d.map(|d| d.p99)),
        opt(d.map(|d| d.max)),
        opt(o.map(|d| d.p50)),
        opt(o.map(|d| d.p99)),
        opt(o.map(|d| d.max)),
    );
    let (h, b, a) = (
        r.hook_started_after_ack.as_ref(),
        r.hook_beyond_delay.as_ref(),
        r.ready_after_hook.as_ref(),
    );
    println!(
        "  phases, ms p50/p99: hook started after ack {}/{}; sleep beyond the delay {}/{}; ready after the sleep {}/{}",
        opt(h.map(|d| d.p50)),
        opt(h.map(|d| d.p99)),
        opt(b.map(|d| d.p50)),
        opt(b.map(|d| d.p99)),
        opt(a.map(|d| d.p50)),
        opt(a.map(|d| d.p99)),
    );
    println!(
        "  all ready: {} ms from ack, {} ms from the CLI's start; slowest delay {} ms; goal ≤ {:.0} ms: {}",
        opt(r.all_ready_after_ack_ms),
        opt(r.all_ready_after_spawn_ms),
        r.slowest_delay_ms,
        r.goal.limit_ms,
        if r.goal.met_from_ack { "met" } else { "MISSED" },
    );
    if let Some(c) = &r.cli {
        println!(
            "  CLI exit: {} ms from ack, status {:?}, {} leases printed",
            opt(c.exit_after_ack_ms),
            c.exit.status,
            c.exit.leases_printed
        );
    }
    println!(
        "  websocket: {} of {} lease_ready received, {} connection(s), closes: {}",
        r.ws_ready_seen,
        r.leases,
        r.ws_connects,
        r.ws_closes
            .iter()
            .map(|c| format!("{} at {} ms", c.reason, opt(c.after_ack_ms)))
            .collect::<Vec<_>>()
            .join("; ")
    );
    if !r.ended_early.is_empty() {
        println!(
            "  ended before ready: {} lease(s), e.g. {} ({})",
            r.ended_early.len(),
            r.ended_early[0].0,
            r.ended_early[0].1
        );
    }
    if !r.cpu_series.is_empty() {
        let busy: Vec<String> = r
            .cpu_series
            .iter()
            .map(|p| format!("{:.0}", p.machine_busy_pct))
            .collect();
        println!(
            "  machine busy % per {} ms after ack: {}",
            crate::run::SERIES_MS,
            busy.join(" ")
        );
    }
    for (name, w) in [("idle", &r.idle), ("scale-up", &r.scaleup)] {
        println!(
            "  {name} {:.1} s: heartbeats {:.0}/s, commands {:.0}/s journaled; CPU % of a core: gateway {:.0}, agents {:.0}, hooks+CLI {:.0}; machine {:.0} % of {} cores",
            w.seconds,
            w.heartbeats_per_s,
            w.journal_commands_per_s,
            w.gateway_cpu_pct,
            w.agents_cpu_pct,
            w.children_cpu_pct,
            w.machine_busy_pct,
            w.cores
        );
    }
}

/// The summary table.
pub fn print_summary(s: &Summary) {
    let row = |name: &str, v: &Option<Spread>| {
        let text = v.as_ref().map_or_else(
            || "-".into(),
            |v| format!("{:.0} ({:.0} – {:.0})", v.median, v.min, v.max),
        );
        println!("| {name} | {text} |");
    };
    println!("\n| over {} runs | median (min – max) |", s.runs);
    println!("| --- | --- |");
    row("time to ready p50, ms from ack", &s.ttr_p50_ms);
    row("time to ready p99, ms from ack", &s.ttr_p99_ms);
    row("all ready, ms from ack", &s.all_ready_after_ack_ms);
    row(
        "all ready, ms from the CLI's start",
        &s.all_ready_after_spawn_ms,
    );
    row("slowest delay drawn, ms", &s.slowest_delay_ms);
    row(
        "goal margin (5 s + slowest delay − all ready), ms",
        &s.goal_margin_ms,
    );
    row("CLI exit, ms from ack", &s.cli_exit_after_ack_ms);
    row("hook started, ms from ack, p50", &s.hook_started_p50_ms);
    row("hook started, ms from ack, p99", &s.hook_started_p99_ms);
    row(
        "ready after the hook's sleep, ms, p50",
        &s.ready_after_hook_p50_ms,
    );
    row(
        "ready after the hook's sleep, ms, p99",
        &s.ready_after_hook_p99_ms,
    );
    row("idle: heartbeats/s", &s.idle_heartbeats_per_s);
    row("idle: journaled commands/s", &s.idle_commands_per_s);
    row("idle: gateway CPU, % of a core", &s.idle_gateway_cpu_pct);
    row(
        "idle: agents' process CPU, % of a core",
        &s.idle_agents_cpu_pct,
    );
    row(
        "idle: machine busy, % of all cores",
        &s.idle_machine_busy_pct,
    );
    row("scale-up: heartbeats/s", &s.scaleup_heartbeats_per_s);
    row(
        "scale-up: gateway CPU, % of a core",
        &s.scaleup_gateway_cpu_pct,
    );
    row(
        "scale-up: agents' process CPU, % of a core",
        &s.scaleup_agents_cpu_pct,
    );
    row(
        "scale-up: hooks + CLI CPU, % of a core",
        &s.scaleup_children_cpu_pct,
    );
    row(
        "scale-up: machine busy, % of all cores",
        &s.scaleup_machine_busy_pct,
    );
    if let Some(p) = &s.pooled_time_to_ready_after_ack {
        println!(
            "pooled over runs ({} leases): time to ready p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
            p.n, p.p50, p.p99, p.max
        );
    }
    println!("goal met in {} of {} runs", s.goal_met_runs, s.runs);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let d = Dist::of((1..=1000).map(f64::from).collect()).expect("values");
        assert_eq!(
            (d.n, d.min, d.p50, d.p90, d.p99, d.max),
            (1000, 1.0, 500.0, 900.0, 990.0, 1000.0)
        );
        let one = Dist::of(vec![7.0]).expect("one value");
        assert_eq!((one.p50, one.p99), (7.0, 7.0));
        assert!(Dist::of(Vec::new()).is_none());
    }
}
