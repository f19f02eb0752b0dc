//! What the run measures: acknowledgement latency per command type (HDR histograms, µs,
//! measured from the *scheduled* send time so queueing is not hidden), acknowledged commands
//! per second, feed lag (commit → client), inventory depth per SKU over time, phantom
//! inventory, errors by code; and lease delivery: time from a lease's start (its fill) to the
//! supplier's ready report, and what the node agents reported; and supplier trust (issue 26):
//! the verification runs the agents were given and answered ([`TrustLog`]), every node view
//! read through the run (compressed per node, for judging trust bids at their fill time), and
//! what became of the buyers' trust bids.

use gpux_client::wire::NodeView;
use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// One second of the run.
#[derive(Clone, Debug, Default)]
pub struct Second {
    /// Commands acknowledged in this second.
    pub acked: u64,
    /// `place_bid` latencies in this second, µs.
    pub bid_lat: Vec<u64>,
    /// Free GPUs per SKU (from the monitor's feed) at the end of the second.
    pub depth: BTreeMap<String, u64>,
    /// Time to ready of the leases reported ready in this second, µs.
    pub ready_lat: Vec<u64>,
}

/// What the supplier node agents did (counted by the agents from the API's answers).
#[derive(Clone, Debug, Default, Serialize)]
pub struct AgentCounts {
    /// Leases seen provisioning with a deadline (from `lease_assigned` or the node's lease
    /// list), each decided once: ready, failed, or left to time out.
    pub assigned: u64,
    /// Of those, first seen in the node's lease list (after a heartbeat's `leases_version`
    /// moved) rather than as a websocket `lease_assigned` event.
    pub assigned_via_list: u64,
    /// Of those, assigned without a launch spec (must stay 0: every bid carries one).
    pub without_launch: u64,
    /// Ready reports answered 200.
    pub ready: u64,
    /// Failed reports answered 200.
    pub failed: u64,
    /// Leases the agents chose never to report (the provisioning deadline ends them).
    pub left_to_time_out: u64,
    /// Torn-down reports answered 200.
    pub torn_down: u64,
    /// Held nodes resumed.
    pub resumed: u64,
    /// Holds seen (`node_held` events or a held node in its lease list).
    pub holds_seen: u64,
    /// Reports refused because the lease had moved on (ended while provisioning, deadline
    /// passed, ...), by report and code: races, not errors.
    pub refused: BTreeMap<String, u64>,
    /// Provisionings abandoned because the lease ended first (the agent saw `lease_ended`).
    pub abandoned: u64,
    /// Reports dropped because the node's agent was down (a flaky node's silence).
    pub dropped_silent: u64,
    /// `GET /v1/nodes/{id}/leases` reconciliations (after a heartbeat's `leases_version`
    /// moved, or while the node had work outstanding).
    pub reconciles: u64,
    /// Supplier websocket events received.
    pub ws_events: u64,
    /// Verification runs seen in the nodes' lease lists (`purpose: verification`), each
    /// decided once.
    pub verify_runs: u64,
    /// Verification reports answered 200.
    pub verify_reported: u64,
    /// Runs left unanswered on purpose ([`crate::scenario::VerifyPlan::SilentOnce`]): their
    /// deadline fails them.
    pub verify_silent: u64,
    /// Runs a silent node answered after all, because their deadline lay beyond
    /// `supplier::SILENT_MAX_DEADLINE_MS` (a gateway with the default 30-minute deadline).
    pub verify_silent_skipped: u64,
}

/// A verification run as a node agent was given it (its node's lease list).
#[derive(Clone, Debug, Default)]
pub struct RunSeen {
    /// Node id.
    pub node: String,
    /// When the exchange placed it (`start_ms`), ms since epoch.
    pub start_ms: i64,
    /// The agent left it unanswered on purpose.
    pub silent: bool,
    /// The judgment its report's answer showed: (ended at, outcome, decided by).
    pub judged: Option<(i64, String, Option<String>)>,
    /// What the lease list showed of its price and billing when not `0.0000`, 0 s and no
    /// charge (a run is never billed).
    pub billed: Option<String>,
}

/// What a node view says about trust, as the judge needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeTrust {
    /// `verification.status` (`off` when the view has no verification: the exchange does not
    /// verify).
    pub status: String,
    /// `verification.at_ms`: when its latest run ended.
    pub at_ms: Option<i64>,
    /// `verification.outcome`: that run's judgment.
    pub outcome: Option<String>,
    /// `verification.decided_by`.
    pub decided_by: Option<String>,
    /// `reliability.matching_reliability`: the score `min_reliability` compares today
    /// (none: `new` at the start of the day).
    pub matching_reliability: Option<String>,
}

impl NodeTrust {
    /// The trust part of a node view.
    pub fn of(v: &NodeView) -> NodeTrust {
        let ver = v.verification.as_ref();
        NodeTrust {
            status: ver.map_or_else(|| "off".to_string(), |x| x.status.clone()),
            at_ms: ver.and_then(|x| x.at_ms),
            outcome: ver.and_then(|x| x.outcome.clone()),
            decided_by: ver.and_then(|x| x.decided_by.clone()),
            matching_reliability: v
                .reliability
                .as_ref()
                .and_then(|r| r.matching_reliability.clone()),
        }
    }
}

/// Node views with the same [`NodeTrust`], read one after the other (a node's views are kept
/// as such spans, so a long run keeps one entry per change, not per read).
#[derive(Clone, Debug)]
pub struct ObsSpan {
    /// What they showed.
    pub state: NodeTrust,
    /// The latest of the reads' lower bounds ([`TrustLog::observe`]): that read reflected
    /// every command timestamped at or before this, ms (exchange time).
    pub last_after_ms: i64,
    /// The client's clock when that read came back, ms since epoch.
    pub last_before_ms: i64,
}

/// Supplier trust as the run saw it: the runs the agents were given and every node view read
/// (the listing watch each second, the verification reports' answers, the final listing).
#[derive(Clone, Debug, Default)]
pub struct TrustLog {
    /// Runs by lease id.
    pub runs: BTreeMap<String, RunSeen>,
    /// Per node id, its views as spans, in the order recorded.
    pub nodes: HashMap<String, Vec<ObsSpan>>,
    /// Results seen (node id, ended at) → (outcome, decided by): each run's judgment once.
    pub results: BTreeMap<(String, i64), (String, Option<String>)>,
}

impl TrustLog {
    /// Records a read of node view `v`. `sent_ms` is the client's clock when the request was
    /// sent, `shared_clock` whether the exchange shares it (in process); `back_ms` the
    /// client's clock when the answer came back. The read reflects every command timestamped
    /// before its last heartbeat and before its latest run's end (time never goes back along
    /// the journal), and, on a shared clock, every command timestamped a second before the
    /// request was sent (a batch being journaled then is applied before the read).
    pub fn observe(&mut self, v: &NodeView, sent_ms: i64, back_ms: i64, shared_clock: bool) {
        let state = NodeTrust::of(v);
        let mut after = v.last_heartbeat_ms.saturating_sub(1);
        if let Some(a) = state.at_ms {
            after = after.max(a.saturating_sub(1));
        }
        if shared_clock {
            after = after.max(sent_ms.saturating_sub(1_000));
        }
        if let (Some(at), Some(outcome)) = (state.at_ms, &state.outcome) {
            self.results
                .entry((v.id.clone(), at))
                .or_insert_with(|| (outcome.clone(), state.decided_by.clone()));
        }
        let spans = self.nodes.entry(v.id.clone()).or_default();
        match spans.last_mut() {
            Some(last) if last.state == state => {
                if after >= last.last_after_ms {
                    last.last_after_ms = after;
                    last.last_before_ms = back_ms;
                }
            }
            _ => spans.push(ObsSpan {
                state,
                last_after_ms: after,
                last_before_ms: back_ms,
            }),
        }
    }
}

/// Shared counters of a run.
pub struct Stats {
    /// Start of the measured phase.
    pub start: Instant,
    /// Latency per command type, µs.
    pub lat: BTreeMap<&'static str, Histogram<u64>>,
    /// Commit → client lag of inventory deltas, µs (commit time has ms resolution).
    pub feed_lag: Histogram<u64>,
    /// Per-second series.
    pub seconds: Vec<Second>,
    /// IOC bids the buyer's view said could fill.
    pub fillable_iocs: u64,
    /// Of those, the ones that did not fill although no delta the buyer had received showed
    /// the capacity gone.
    pub phantom: u64,
    /// Of those, the ones explained by a delta that arrived in time (races, not phantoms).
    pub raced: u64,
    /// Of those, the ones whose buyer's view had not reached the bid's commit within
    /// `buyer::VIEW_LATE_BOUND` (a late feed: judged neither phantom nor race).
    pub view_late: u64,
    /// Buyer websockets opened again after their connection failed (a gateway or API
    /// process killed or restarted under the run).
    pub reconnects: u64,
    /// Commands whose reply was lost with their connection (outcome unknown to the buyer).
    pub lost_replies: u64,
    /// Facts a buyer learned only from its re-read after a reopen (bids that rested or
    /// closed, leases that started, became ready or ended while its socket was down).
    pub resynced: u64,
    /// `--kill-leader-at`: ms from the leader's SIGKILL until the standby led.
    pub takeover_ms: Option<u64>,
    /// What was done to the topology during the run, in order.
    pub events: Vec<String>,
    /// Errors and rejections by code.
    pub errors: BTreeMap<String, u64>,
    /// Bid outcomes by status (`filled`, `resting`, `closed`).
    pub outcomes: BTreeMap<String, u64>,
    /// Arrivals scheduled.
    pub scheduled: u64,
    /// End of the measured phase (the arrivals); acknowledgements after it (settling,
    /// checks) count in the latencies but not in the throughput.
    pub end: Option<Instant>,
    /// Commands acknowledged within the measured phase.
    pub window_acked: u64,
    /// Leases started (seen by buyers).
    pub leases: u64,
    /// Nodes silenced past the heartbeat timeout (then back when the run is long enough).
    pub nodes_silenced: u64,
    /// Time from a lease's start (the fill) to its ready report's `ready_ms`, µs.
    pub time_to_ready: Histogram<u64>,
    /// The node agents' delivery counters.
    pub agents: AgentCounts,
    /// Verification runs: from the exchange placing one (`start_ms`) to the judgment of its
    /// report (`verification.at_ms` in the report's answer), µs.
    pub verify_duration: Histogram<u64>,
    /// Verification runs and node views.
    pub trust: TrustLog,
    /// Trust bids by requirement and outcome (`verified: filled`, `min_reliability: closed`,
    /// `verified: closed by trust`, …).
    pub trust_bids: BTreeMap<String, u64>,
}

/// A handle shared by every task.
pub type Shared = Arc<Mutex<Stats>>;

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 120_000_000, 3)
        .unwrap_or_else(|_| Histogram::new(3).unwrap_or_else(|_| unreachable!()))
}

impl Stats {
    /// New, starting now.
    pub fn new() -> Shared {
        Arc::new(Mutex::new(Stats {
            start: Instant::now(),
            lat: BTreeMap::new(),
            feed_lag: hist(),
            seconds: Vec::new(),
            fillable_iocs: 0,
            phantom: 0,
            raced: 0,
            view_late: 0,
            reconnects: 0,
            lost_replies: 0,
            resynced: 0,
            takeover_ms: None,
            events: Vec::new(),
            errors: BTreeMap::new(),
            outcomes: BTreeMap::new(),
            scheduled: 0,
            end: None,
            window_acked: 0,
            leases: 0,
            nodes_silenced: 0,
            time_to_ready: hist(),
            agents: AgentCounts::default(),
            verify_duration: hist(),
            trust: TrustLog::default(),
            trust_bids: BTreeMap::new(),
        }))
    }

    fn second(&mut self, at: Instant) -> &mut Second {
        let i = at.saturating_duration_since(self.start).as_secs() as usize;
        if self.seconds.len() <= i {
            self.seconds.resize(i + 1, Second::default());
        }
        &mut self.seconds[i]
    }

    /// Records an acknowledged command of `kind` sent (scheduled) at `sent`.
    pub fn ack(&mut self, kind: &'static str, sent: Instant) {
        let now = Instant::now();
        let us = now.saturating_duration_since(sent).as_micros() as u64;
        self.lat
            .entry(kind)
            .or_insert_with(hist)
            .record(us.max(1))
            .ok();
        if self.end.is_none_or(|e| now < e) {
            self.window_acked += 1;
        }
        let s = self.second(now);
        s.acked += 1;
        if kind == "place_bid" {
            s.bid_lat.push(us);
        }
    }

    /// Counts an error code.
    pub fn error(&mut self, code: &str) {
        *self.errors.entry(code.to_string()).or_default() += 1;
    }

    /// Records a lease's time to ready (ms, from the ready answer's `ready_ms - start_ms`).
    pub fn ready(&mut self, ms: i64) {
        let us = (ms.max(0) as u64).saturating_mul(1000).max(1);
        self.time_to_ready.record(us).ok();
        self.second(Instant::now()).ready_lat.push(us);
    }

    /// Records a verification run's time from placed to judged (ms, exchange time).
    pub fn verified_in(&mut self, ms: i64) {
        let us = (ms.max(0) as u64)
            .saturating_mul(1000)
            .clamp(1, 120_000_000);
        self.verify_duration.record(us).ok();
    }

    /// Records the inventory depth of a SKU now.
    pub fn depth(&mut self, sku: &str, free: u64) {
        let s = self.second(Instant::now());
        s.depth.insert(sku.to_string(), free);
    }
}

/// Latency summary of one command type, ms.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LatencySummary {
    /// Command type.
    pub command: String,
    /// Count.
    pub count: u64,
    /// Median, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// 99.9th percentile, ms.
    pub p999_ms: f64,
    /// Maximum, ms.
    pub max_ms: f64,
}

/// Summarises a histogram of µs.
pub fn summary(command: &str, h: &Histogram<u64>) -> LatencySummary {
    let ms = |v: u64| v as f64 / 1000.0;
    LatencySummary {
        command: command.to_string(),
        count: h.len(),
        p50_ms: ms(h.value_at_quantile(0.5)),
        p99_ms: ms(h.value_at_quantile(0.99)),
        p999_ms: ms(h.value_at_quantile(0.999)),
        max_ms: ms(h.max()),
    }
}

/// A wire enum's name as the API spells it (`"resting"`, `"no_capacity"`, `"torn_down"`): the
/// key counts and reports keep it under.
pub fn wire_name<T: Serialize + std::fmt::Debug>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        _ => format!("{v:?}"),
    }
}
