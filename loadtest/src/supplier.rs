//! Suppliers: accounts, nodes and offers set up through the REST API, then one node agent per
//! supplier that heartbeats its nodes every few seconds and delivers their leases
//! (docs/market-rules.md §11); flaky nodes go silent once (past the heartbeat timeout, so the
//! exchange takes them offline and fails their leases over) and come back.
//!
//! How an agent learns of work, as a real one would, without scanning the market: the
//! supplier's websocket events (`lease_assigned` with the launch spec, `lease_wiping`,
//! `node_held`, ...) and, as the reconciliation path, the heartbeat answer's `leases_version`:
//! when it moved since the node's last `GET /v1/nodes/{id}/leases` (or the node still has
//! work outstanding), the agent reads that list and acts on what it shows.
//!
//! What it does with a lease (seeded): provisions it for a random time, then reports it ready
//! with access details, or (a configurable share) reports it failed, or (another share) never
//! reports, so the provisioning deadline ends it; wipes every ended lease's GPUs for a short
//! random time and reports them torn down; resumes a held node after a while. A silent node's
//! agent does nothing until the node is back.
//!
//! Verification runs (issue 26, docs/market-rules.md §12.2): a run shows in the node's lease
//! list as a provisioning lease with `purpose: verification` (price 0; no websocket event,
//! the heartbeat's `leases_version` moves). The agent "measures" for a short random time and
//! reports figures chosen by the node's [`VerifyPlan`] from the SKU's reference figures
//! (`POST /v1/leases/{id}/verification`), or leaves the run unanswered when the plan says so
//! (its deadline fails it). A failed run holds the node; the supplier resumes it as any held
//! node, which places a new run. Every run, its answer and the node view the report answers
//! are logged ([`crate::stats::TrustLog`]) for the end checks.

use crate::scenario::{FailKind, SupplierPlan, VerifyPlan};
use crate::stats::{RunSeen, Shared};
use gpux_client::wire::ws::ServerMsg;
use gpux_client::wire::{
    AccessRequest, CreditCapDto, DcgmResultDto, DecimalStr, GpuFiguresDto, HeartbeatAnswer, IdStr,
    InterconnectDto, LaunchRequest, LeasePurposeDto, LeaseStateDto, LeaseView, NodeLeases,
    NodeRequest, NodeView, NvmlFaultDto, OfferRequest, SlaTermsDto, VerificationReport, parse_id,
};
use gpux_client::{Client, ClientError, WsSession};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// Heartbeat period of the node agents by default, ms (`--heartbeat-ms`).
pub const HEARTBEAT_MS: u64 = 4_000;
/// How long a flaky node stays silent, ms (above the exchange's 15 s timeout).
pub const SILENCE_MS: u64 = 20_000;
/// Wait before retrying a report the gateway could not take (5xx, 429, transport), ms.
const RETRY_MS: u64 = 300;
/// A [`VerifyPlan::SilentOnce`] node leaves its first run unanswered only when the run's
/// deadline is at most this far (the in-process gateway's `--verify-deadline-s`); against a
/// gateway with the default 30-minute deadline it answers, or the node would stay unlisted
/// for the whole run.
pub const SILENT_MAX_DEADLINE_MS: i64 = 120_000;

/// Reasons a provisioning agent gives when it reports a lease failed.
const FAILURES: [&str; 4] = [
    "image pull failed: manifest unknown",
    "GPU fell off the bus during health check (Xid 79)",
    "scratch NVMe mount failed: I/O error",
    "container exited during start: out of memory",
];
/// How the agents wipe (the buyer's deletion record).
const WIPE_METHOD: &str =
    "container and volumes removed; scratch NVMe blkdiscard; GPU memory cleared by driver reset";

/// A node that exists on the exchange.
#[derive(Clone, Debug)]
pub struct LiveNode {
    /// Node id.
    pub id: String,
    /// GPUs.
    pub gpus: u32,
    /// Goes silent once.
    pub flaky: bool,
    /// SKU id (its reference figures are what the verification reports scale).
    pub sku: String,
    /// NVLink between its GPUs (with 8 GPUs, the all-reduce is judged).
    pub nvlink: bool,
    /// How its agent answers verification runs.
    pub verify: VerifyPlan,
    /// Region.
    pub region: String,
    /// Fabric domain (issue 27), as registered; `None`: on no shared fabric.
    pub domain: Option<String>,
}

/// How the node agents deliver (seeded draws per lease).
#[derive(Clone, Copy, Debug)]
pub struct Behaviour {
    /// Provisioning time before a ready (or failed) report, ms: uniform in `[min, max]`.
    pub ready_ms: (u64, u64),
    /// Share of leases reported failed after provisioning for a while.
    pub fail_share: f64,
    /// Share of leases never reported (the provisioning deadline ends them).
    pub timeout_share: f64,
    /// Wipe time before a torn-down report, ms: uniform in `[min, max]`.
    pub wipe_ms: (u64, u64),
    /// How long a supplier leaves a held node held before resuming it, ms.
    pub resume_after_ms: u64,
    /// Heartbeat period of every node, ms (keep it well under the exchange's 15 s timeout).
    pub heartbeat_ms: u64,
    /// Time a verification run's checks take before the report, ms: uniform in `[min, max]`.
    pub verify_ms: (u64, u64),
    /// The exchange runs on this machine's clock (in process): node views read after a time
    /// reflect every command before it, less a second ([`crate::stats::TrustLog::observe`]).
    pub shared_clock: bool,
}

/// Creates the supplier's nodes and offers (with `provision_s` as their provisioning
/// deadline) through `api` (the supplier's key); answers its nodes.
///
/// # Errors
/// A request failed (the API's error, with its code).
pub async fn setup(
    api: &Client,
    plan: &SupplierPlan,
    provision_s: u32,
) -> anyhow::Result<Vec<LiveNode>> {
    let mut out = Vec::new();
    for n in &plan.nodes {
        let node = api
            .register_node(&NodeRequest {
                name: n.name.clone(),
                sku: n.sku.clone(),
                gpus: n.gpus,
                region: n.region.clone(),
                jurisdiction: "CN".into(),
                interconnect: n.interconnect,
                nvlink: n.interconnect == InterconnectDto::Infiniband,
                fabric_domain: n.fabric.as_ref().map(|f| f.0.clone()),
                nic_gbps: n.fabric.as_ref().map(|f| f.1),
            })
            .await
            .map_err(|e| anyhow::anyhow!("node {}: {e}", n.name))?;
        let node_id = parse_id(&node.id)
            .ok_or_else(|| anyhow::anyhow!("node {}: id {:?} is not an id", n.name, node.id))?;
        api.post_offer(&OfferRequest {
            node_id: Some(IdStr(node_id)),
            gpus: n.gpus,
            spot_price: DecimalStr(n.spot),
            preemptible_price: Some(DecimalStr(n.preemptible)),
            min_lease_s: Some(60),
            max_lease_s: Some(86_400),
            available_until_ms: None,
            notice_s: Some(10),
            provision_s: Some(provision_s),
            sla: n.sla.map(|(availability, credit_multiple)| SlaTermsDto {
                availability: availability.to_string(),
                credit_multiple,
                outage_cap_s: 3_600,
                credit_cap: CreditCapDto::ChargeSoFar,
                non_delivery_credit: false,
            }),
        })
        .await
        .map_err(|e| anyhow::anyhow!("offer on node {}: {e}", n.name))?;
        out.push(LiveNode {
            id: node.id,
            gpus: n.gpus,
            flaky: n.flaky,
            sku: n.sku.clone(),
            nvlink: n.interconnect == InterconnectDto::Infiniband,
            verify: n.verify,
            region: n.region.clone(),
            domain: n.fabric.as_ref().map(|f| f.0.clone()),
        });
    }
    Ok(out)
}

/// What an agent does to one node at a due time.
#[derive(Clone, Debug)]
enum Action {
    Ready {
        lease: u64,
        ports: Vec<u16>,
    },
    Failed {
        lease: u64,
    },
    TornDown {
        lease: u64,
    },
    Resume,
    Verify {
        lease: u64,
        report: Box<VerificationReport>,
    },
}

/// What a report's answer carries back to the agent.
#[derive(Default)]
struct Answered {
    /// For a ready report, the lease's time from start to ready (ms).
    ttr: Option<i64>,
    /// For a verification report, the node with the run's judgment, and when the answer came
    /// back (client clock, ms).
    node: Option<(Box<NodeView>, i64)>,
}

/// A finished request, back in the agent's loop.
enum Msg {
    Heartbeat {
        node: usize,
        sent: Instant,
        answer: Result<HeartbeatAnswer, ClientError>,
    },
    SweepDone,
    Reconciled {
        node: usize,
        epoch: u64,
        sent: Instant,
        answer: Result<NodeLeases, ClientError>,
    },
    Acted {
        node: usize,
        action: Action,
        sent: Instant,
        /// The client's clock when the report was sent, ms.
        sent_ms: i64,
        answer: Result<Answered, ClientError>,
    },
}

struct NodeState {
    node: LiveNode,
    /// Silent over this window of the run (flaky nodes).
    silence: Option<(Duration, Duration)>,
    silent: bool,
    /// `leases_version` of the last lease list read.
    reconciled_version: Option<u64>,
    reconciling: bool,
    /// Grows on every change seen (event, report), so a lease list read before it is not
    /// taken as the node's current state.
    epoch: u64,
    /// The last lease list (read at the current epoch) showed nothing to do: no lease
    /// pending or provisioning, nothing wiping, not held.
    clean: bool,
    resume_scheduled: bool,
    /// Verification runs of this node decided so far (its plan says how the n-th is
    /// answered).
    runs: u32,
}

struct Agent {
    api: Client,
    stats: Shared,
    rng: StdRng,
    behaviour: Behaviour,
    nodes: Vec<NodeState>,
    by_id: HashMap<String, usize>,
    lease_node: HashMap<u64, usize>,
    /// Leases whose delivery was decided (each once).
    decided: HashSet<u64>,
    /// Wipes whose torn-down report is scheduled or done.
    wipes: HashSet<u64>,
    /// Leases known to have ended (`lease_ended`, or wiping in a lease list): provisioning
    /// them stops.
    ended: HashSet<u64>,
    due: BinaryHeap<Reverse<(Instant, u64)>>,
    actions: HashMap<u64, (usize, Action)>,
    next_action: u64,
    inflight: usize,
    tx: mpsc::UnboundedSender<Msg>,
}

fn ports_of(launch: Option<&LaunchRequest>) -> Vec<u16> {
    launch
        .into_iter()
        .flat_map(|l| &l.ports)
        .filter_map(|p| u16::try_from(*p).ok())
        .collect()
}

/// Plausible access details of a ready lease: SSH through the node's public address (a
/// documentation-range IP) on a per-lease forwarded port, and an HTTPS URL per exposed port.
pub fn access(node: u64, lease: u64, ports: &[u16]) -> AccessRequest {
    AccessRequest {
        ssh_host: Some(format!("203.0.113.{}", 1 + node % 250)),
        ssh_port: u32::try_from(20_000 + lease % 40_000).ok(),
        ssh_user: Some("root".into()),
        urls: ports
            .iter()
            .map(|p| {
                (
                    p.to_string(),
                    format!("https://l{lease}-p{p}.n{node}.gpu.example"),
                )
            })
            .collect(),
    }
}

/// The name a failed call of `what` is counted under: the API's code when the server
/// answered, `{what}_unreachable` when no answer came (transport, timeout, closed),
/// `{what}_failed` when the answer could not be read or the request not sent.
fn error_name(e: &ClientError, what: &str) -> String {
    match e {
        ClientError::Api { error, .. } | ClientError::Rejected { error } => error.code.clone(),
        ClientError::Transport(_) | ClientError::Timeout | ClientError::Closed => {
            format!("{what}_unreachable")
        }
        ClientError::Decode(_) | ClientError::Invalid(_) => format!("{what}_failed"),
    }
}

/// The node and the lease a supplier's feed message is about (either may be absent).
fn subject(m: &ServerMsg) -> (Option<&str>, Option<&str>) {
    match m {
        ServerMsg::LeaseAssigned {
            node_id, lease_id, ..
        }
        | ServerMsg::LeaseProvisioning {
            node_id, lease_id, ..
        }
        | ServerMsg::LeaseStarted {
            node_id, lease_id, ..
        }
        | ServerMsg::Fill {
            node_id, lease_id, ..
        } => (Some(node_id), Some(lease_id)),
        ServerMsg::LeaseWiping {
            node_id, lease_id, ..
        } => (node_id.as_deref(), Some(lease_id)),
        ServerMsg::NodeHeld { node_id, .. } => (Some(node_id), None),
        ServerMsg::NodeResumed { node_id, .. } | ServerMsg::Welcome { node_id, .. } => {
            (node_id.as_deref(), None)
        }
        ServerMsg::LeaseEnded { lease_id, .. }
        | ServerMsg::LeaseNotice { lease_id, .. }
        | ServerMsg::LeaseReady { lease_id, .. }
        | ServerMsg::LeaseTornDown { lease_id, .. }
        | ServerMsg::TeardownOverdue { lease_id, .. }
        | ServerMsg::PreemptionNotice { lease_id, .. }
        | ServerMsg::FailoverFailed { lease_id, .. } => (None, Some(lease_id)),
        _ => (None, None),
    }
}

/// Sends one report of `node_id`'s agent; answers, for a ready report, the lease's time from
/// start to ready (ms), for a verification report the node view with the judgment.
async fn report(api: &Client, node_id: &str, action: &Action) -> Result<Answered, ClientError> {
    match action {
        Action::Ready { lease, ports } => {
            let node = parse_id(node_id).unwrap_or(0);
            let l = api
                .report_ready(&lease.to_string(), &access(node, *lease, ports))
                .await?;
            Ok(Answered {
                ttr: l.ready_ms.map(|r| r - l.start_ms),
                node: None,
            })
        }
        Action::Failed { lease } => {
            let reason = FAILURES[(*lease as usize) % FAILURES.len()];
            api.report_failed(&lease.to_string(), reason).await?;
            Ok(Answered::default())
        }
        Action::TornDown { lease } => {
            api.report_torn_down(&lease.to_string(), WIPE_METHOD)
                .await?;
            Ok(Answered::default())
        }
        Action::Resume => {
            api.resume_node(node_id).await?;
            Ok(Answered::default())
        }
        Action::Verify { lease, report } => {
            let v = api.report_verification(&lease.to_string(), report).await?;
            Ok(Answered {
                ttr: None,
                node: Some((Box::new(v), crate::buyer::now_ms())),
            })
        }
    }
}

/// The `n`-th (from 0) verification report of a node planned `plan`, for a run of
/// `indexes` on a node of `node_gpus` GPUs of `sku` (`nvlink` between them): figures at the
/// plan's share of the SKU's reference figures. `None`: the run is left unanswered. A SKU
/// without reference figures is never run, so it answers `None` too.
pub fn verification_report(
    plan: VerifyPlan,
    n: u32,
    sku: &str,
    indexes: &[u32],
    node_gpus: u32,
    nvlink: bool,
) -> Option<VerificationReport> {
    let reference = exchange::verify::reference_for(sku)?;
    let (pct, fault, dcgm, missing) = match (plan, n) {
        (VerifyPlan::Pass { pct }, _) => (pct, false, DcgmResultDto::Pass, false),
        (VerifyPlan::Degraded { pct }, _) => (pct, false, DcgmResultDto::Pass, false),
        (VerifyPlan::Faulty { pct }, _) => (pct, true, DcgmResultDto::Pass, false),
        (VerifyPlan::FailOnce { fail, .. }, 0) => match fail {
            FailKind::Low { pct } => (pct, false, DcgmResultDto::Pass, false),
            FailKind::Dcgm => (96, false, DcgmResultDto::Fail, false),
            FailKind::Missing => (96, false, DcgmResultDto::Pass, true),
        },
        (VerifyPlan::SilentOnce { .. }, 0) => return None,
        (VerifyPlan::FailOnce { pct, .. } | VerifyPlan::SilentOnce { pct }, _) => {
            (pct, false, DcgmResultDto::Pass, false)
        }
    };
    // Tenths of a TFLOPS and whole GB/s, as the exchange keeps them, so the judged share is
    // the planned one (floor) and never rounds across a floor.
    let bf16_x10 = reference.bf16_tflops_x10 * pct / 100;
    let mem = reference.mem_bw_gbps * pct / 100;
    let gpus = indexes
        .iter()
        .enumerate()
        .map(|(i, &index)| GpuFiguresDto {
            index,
            uuid: None,
            bf16_tflops: (!(missing && i == 0)).then(|| f64::from(bf16_x10) / 10.0),
            mem_bw_gbps: Some(f64::from(mem)),
            faults: if fault && i == 0 {
                vec![NvmlFaultDto::Throttled]
            } else {
                Vec::new()
            },
        })
        .collect();
    let all = indexes.len() as u32 == node_gpus;
    let allreduce = reference
        .allreduce8_busbw_x10
        .filter(|_| node_gpus == 8 && all && nvlink)
        .map(|a| f64::from(a * pct / 100) / 10.0);
    Some(VerificationReport {
        gpus,
        allreduce_busbw_gbps: allreduce,
        dcgm_diag: Some(dcgm),
        duration_s: 1,
        raw_tail: Some(format!(
            "loadtest agent: figures at {pct} % of {sku}'s reference"
        )),
    })
}

/// Opens the supplier's websocket when the agents use it; `None` when they do not or the
/// connection failed (the next heartbeat tick tries again; the lease lists cover what was
/// missed). The server's `welcome` counts as an event received, as every message does.
async fn connect(a: &Agent, use_ws: bool) -> Option<WsSession> {
    if !use_ws || !a.api.has_key() {
        return None;
    }
    let ws = a.api.connect_ws().await.ok()?;
    a.count(|s| s.agents.ws_events += 1);
    Some(ws)
}

impl Agent {
    fn between(&mut self, (lo, hi): (u64, u64)) -> Duration {
        Duration::from_millis(if hi > lo {
            self.rng.random_range(lo..=hi)
        } else {
            lo
        })
    }

    fn schedule(&mut self, at: Instant, node: usize, action: Action) {
        self.next_action += 1;
        self.due.push(Reverse((at, self.next_action)));
        self.actions.insert(self.next_action, (node, action));
    }

    fn touch(&mut self, node: usize) {
        let n = &mut self.nodes[node];
        n.epoch += 1;
        n.clean = false;
    }

    fn count(&self, f: impl FnOnce(&mut crate::stats::Stats)) {
        if let Ok(mut s) = self.stats.lock() {
            f(&mut s);
        }
    }

    /// A lease provisioning (with a deadline) on `node`: decides once what its delivery does.
    fn provision(
        &mut self,
        node: usize,
        lease: u64,
        launch: Option<&LaunchRequest>,
        via_list: bool,
    ) {
        self.lease_node.insert(lease, node);
        if self.nodes[node].silent || !self.decided.insert(lease) {
            return;
        }
        let has_launch = launch.is_some_and(|l| !l.ssh_keys.is_empty() || l.image.is_some());
        self.count(|s| {
            s.agents.assigned += 1;
            s.agents.assigned_via_list += u64::from(via_list);
            if !has_launch {
                s.agents.without_launch += 1;
            }
        });
        let u: f64 = self.rng.random();
        let b = self.behaviour;
        let at = Instant::now() + self.between(b.ready_ms);
        if u < b.fail_share {
            self.schedule(at, node, Action::Failed { lease });
        } else if u < b.fail_share + b.timeout_share {
            self.count(|s| s.agents.left_to_time_out += 1);
        } else {
            let ports = ports_of(launch);
            self.schedule(at, node, Action::Ready { lease, ports });
        }
    }

    /// An ended lease's GPUs wiping on `node`: wipes them once.
    fn wipe(&mut self, node: usize, lease: u64) {
        self.lease_node.insert(lease, node);
        if self.nodes[node].silent || !self.wipes.insert(lease) {
            return;
        }
        let at = Instant::now() + self.between(self.behaviour.wipe_ms);
        self.schedule(at, node, Action::TornDown { lease });
    }

    /// `node` is held: its supplier resumes it after a while.
    fn held(&mut self, node: usize) {
        let n = &mut self.nodes[node];
        if n.silent || n.resume_scheduled {
            return;
        }
        n.resume_scheduled = true;
        self.count(|s| s.agents.holds_seen += 1);
        let at = Instant::now() + Duration::from_millis(self.behaviour.resume_after_ms);
        self.schedule(at, node, Action::Resume);
    }

    fn on_event(&mut self, m: &ServerMsg) {
        self.count(|s| s.agents.ws_events += 1);
        let (node_id, lease_id) = subject(m);
        let lease = lease_id.and_then(parse_id);
        let node = node_id
            .and_then(|n| self.by_id.get(n).copied())
            .or_else(|| lease.and_then(|l| self.lease_node.get(&l).copied()));
        let Some(node) = node else { return };
        self.touch(node);
        match (m, lease) {
            (ServerMsg::LeaseAssigned { launch, .. }, Some(l)) => {
                self.provision(node, l, launch.as_ref(), false);
            }
            (ServerMsg::LeaseEnded { .. }, Some(l)) => {
                self.ended.insert(l);
            }
            (ServerMsg::LeaseWiping { .. }, Some(l)) => self.wipe(node, l),
            (ServerMsg::NodeHeld { .. }, _) => self.held(node),
            _ => {}
        }
    }

    /// A verification run under way on `node` (its lease list shows it): decides once, by
    /// the node's plan, what its report says, or that it gets none; logs the run.
    fn verify_run(&mut self, node: usize, lease: u64, l: &LeaseView) {
        self.lease_node.insert(lease, node);
        if self.nodes[node].silent || !self.decided.insert(lease) {
            return;
        }
        let n = &mut self.nodes[node];
        let nth = n.runs;
        n.runs += 1;
        let (plan, sku, gpus, nvlink) = (
            n.node.verify,
            n.node.sku.clone(),
            n.node.gpus,
            n.node.nvlink,
        );
        let charged = l.charged.as_deref().is_some_and(|c| {
            c.parse::<rust_decimal::Decimal>()
                .map_or(true, |d| !d.is_zero())
        });
        let priced = l
            .price
            .parse::<rust_decimal::Decimal>()
            .map_or(true, |d| !d.is_zero());
        let billed = (priced || charged || l.billed_seconds > 0).then(|| {
            format!(
                "price {}, billed {} s, charged {:?}",
                l.price, l.billed_seconds, l.charged
            )
        });
        let mut report = verification_report(plan, nth, &sku, &l.gpu_indexes, gpus, nvlink);
        let far = l.deadline_in_ms.is_none_or(|d| d > SILENT_MAX_DEADLINE_MS);
        let mut skipped = false;
        if report.is_none() && far {
            // Silent only where the deadline ends the run within the test.
            report = verification_report(plan, nth + 1, &sku, &l.gpu_indexes, gpus, nvlink);
            skipped = report.is_some();
        }
        let silent = report.is_none();
        self.count(|s| {
            s.agents.verify_runs += 1;
            s.agents.verify_silent += u64::from(silent);
            s.agents.verify_silent_skipped += u64::from(skipped);
            s.trust.runs.insert(
                lease.to_string(),
                RunSeen {
                    node: l.node_id.clone(),
                    start_ms: l.start_ms,
                    silent,
                    judged: None,
                    billed,
                },
            );
        });
        if let Some(report) = report {
            let at = Instant::now() + self.between(self.behaviour.verify_ms);
            self.schedule(
                at,
                node,
                Action::Verify {
                    lease,
                    report: Box::new(report),
                },
            );
        }
    }

    /// A node's lease list: acts on whatever it shows that was not acted on yet.
    fn on_leases(&mut self, node: usize, epoch: u64, v: &NodeLeases) {
        self.count(|s| s.agents.reconciles += 1);
        self.nodes[node].reconciled_version = Some(v.leases_version);
        let mut work = false;
        for l in &v.leases {
            let Some(id) = parse_id(&l.id) else {
                continue;
            };
            if l.purpose == Some(LeasePurposeDto::Verification) {
                // Under way until its report is judged or its deadline passes.
                work = true;
                self.verify_run(node, id, l);
                continue;
            }
            self.lease_node.insert(id, node);
            match l.state {
                LeaseStateDto::Provisioning => {
                    work = true;
                    if l.provision_deadline_ms.is_some() {
                        self.provision(node, id, l.launch.as_ref(), true);
                    }
                }
                LeaseStateDto::Pending => work = true,
                LeaseStateDto::Active | LeaseStateDto::Ended => {}
            }
        }
        for w in &v.wiping {
            if let Some(id) = parse_id(&w.id) {
                work = true;
                self.ended.insert(id);
                self.wipe(node, id);
            }
        }
        if v.held.is_some() {
            work = true;
            self.held(node);
        }
        let n = &mut self.nodes[node];
        if n.epoch == epoch {
            n.clean = !work;
        }
    }

    fn spawn_action(&mut self, node: usize, action: Action) {
        if let Action::Ready { lease, .. } | Action::Failed { lease } = &action
            && self.ended.contains(lease)
        {
            // Ended while provisioning (released, node failure): nothing left to deliver.
            self.count(|s| s.agents.abandoned += 1);
            return;
        }
        let n = &self.nodes[node];
        if n.silent {
            // The node's agent is down with it: the lease list after it is back says what is
            // left to do.
            match &action {
                Action::TornDown { lease } => {
                    self.wipes.remove(lease);
                }
                Action::Resume => self.nodes[node].resume_scheduled = false,
                _ => {}
            }
            self.count(|s| s.agents.dropped_silent += 1);
            return;
        }
        let node_id = n.node.id.clone();
        self.inflight += 1;
        let (api, tx) = (self.api.clone(), self.tx.clone());
        tokio::spawn(async move {
            let sent = Instant::now();
            let sent_ms = crate::buyer::now_ms();
            let answer = report(&api, &node_id, &action).await;
            let _ = tx.send(Msg::Acted {
                node,
                action,
                sent,
                sent_ms,
                answer,
            });
        });
    }

    fn on_acted(
        &mut self,
        node: usize,
        action: Action,
        (sent, sent_ms): (Instant, i64),
        answer: Result<Answered, ClientError>,
    ) {
        self.inflight -= 1;
        self.touch(node);
        let (ttr, viewed) = match answer {
            Ok(a) => (a.ttr, a.node),
            Err(e) => return self.on_refused(node, action, &e),
        };
        match action {
            Action::Ready { .. } => {
                self.count(|s| {
                    s.ack("lease_ready", sent);
                    s.agents.ready += 1;
                    if let Some(ms) = ttr {
                        s.ready(ms);
                    }
                });
            }
            Action::Failed { .. } => self.count(|s| {
                s.ack("lease_failed", sent);
                s.agents.failed += 1;
            }),
            Action::TornDown { .. } => self.count(|s| {
                s.ack("lease_torn_down", sent);
                s.agents.torn_down += 1;
            }),
            Action::Resume => {
                self.nodes[node].resume_scheduled = false;
                self.count(|s| {
                    s.ack("node_resume", sent);
                    s.agents.resumed += 1;
                });
            }
            Action::Verify { lease, .. } => {
                let shared = self.behaviour.shared_clock;
                self.count(|s| {
                    s.ack("verification_report", sent);
                    s.agents.verify_reported += 1;
                    let Some((v, back_ms)) = viewed else { return };
                    s.trust.observe(&v, sent_ms, back_ms, shared);
                    let ver = v.verification.as_ref();
                    let (Some(at), Some(outcome)) = (
                        ver.and_then(|x| x.at_ms),
                        ver.and_then(|x| x.outcome.clone()),
                    ) else {
                        return;
                    };
                    let by = ver.and_then(|x| x.decided_by.clone());
                    let start = s.trust.runs.get(&lease.to_string()).map(|r| r.start_ms);
                    if let Some(r) = s.trust.runs.get_mut(&lease.to_string()) {
                        r.judged = Some((at, outcome, by));
                    }
                    if let Some(start) = start {
                        s.verified_in(at - start);
                    }
                });
            }
        }
    }

    /// A report that failed: retried after [`RETRY_MS`] when the gateway could not take it
    /// (no answer, 429, 5xx), otherwise counted as refused under the API's code.
    fn on_refused(&mut self, node: usize, action: Action, e: &ClientError) {
        let unanswered = matches!(
            e,
            ClientError::Transport(_) | ClientError::Timeout | ClientError::Closed
        );
        if unanswered || e.status().is_some_and(|s| s == 429 || s >= 500) {
            self.count(|s| {
                s.error(if unanswered {
                    "delivery_unreachable"
                } else {
                    "delivery_report_failed"
                })
            });
            self.schedule(
                Instant::now() + Duration::from_millis(RETRY_MS),
                node,
                action,
            );
            return;
        }
        let what = match action {
            Action::Ready { .. } => "ready",
            Action::Failed { .. } => "failed",
            Action::TornDown { .. } => "torn_down",
            Action::Resume => "resume",
            Action::Verify { .. } => "verification",
        };
        let code = format!("{what}: {}", error_name(e, "report"));
        if matches!(action, Action::Resume) {
            self.nodes[node].resume_scheduled = false;
        }
        self.count(|s| *s.agents.refused.entry(code).or_default() += 1);
    }

    fn reconcile(&mut self, node: usize) {
        let n = &mut self.nodes[node];
        if n.reconciling || n.silent {
            return;
        }
        n.reconciling = true;
        self.inflight += 1;
        let (api, tx, epoch) = (self.api.clone(), self.tx.clone(), n.epoch);
        let id = n.node.id.clone();
        tokio::spawn(async move {
            let sent = Instant::now();
            let answer = api.node_leases(&id).await;
            let _ = tx.send(Msg::Reconciled {
                node,
                epoch,
                sent,
                answer,
            });
        });
    }

    fn idle(&self) -> bool {
        self.due.is_empty()
            && self.inflight == 0
            && self
                .nodes
                .iter()
                .all(|n| n.clean && !n.silent && !n.reconciling)
    }
}

/// Runs one supplier's node agent until `done`: heartbeats every `behaviour.heartbeat_ms` (each flaky
/// node silent for [`SILENCE_MS`] from a moment spread over the first part of `duration`), and
/// delivers the nodes' leases per `behaviour`. `idle` says whether the agent has nothing left
/// to do (no report due, every node's last lease list clean, no node silent). Without
/// `ws_url` the agent learns of work only through heartbeats and lease lists.
#[allow(clippy::too_many_arguments)]
pub async fn agents(
    api: Client,
    use_ws: bool,
    nodes: Vec<LiveNode>,
    duration: Duration,
    seed: u64,
    behaviour: Behaviour,
    stats: Shared,
    idle: watch::Sender<bool>,
    mut done: watch::Receiver<bool>,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let start = Instant::now();
    let states: Vec<NodeState> = nodes
        .into_iter()
        .map(|n| {
            let silence = n.flaky.then(|| {
                // Silent, then back within the run when it is long enough.
                let latest = (duration.as_millis() as u64).saturating_sub(SILENCE_MS + 5_000);
                let from = Duration::from_millis(rng.random_range(0..latest.max(1)));
                (from, from + Duration::from_millis(SILENCE_MS))
            });
            NodeState {
                node: n,
                silence,
                silent: false,
                reconciled_version: None,
                reconciling: false,
                epoch: 0,
                clean: false,
                resume_scheduled: false,
                runs: 0,
            }
        })
        .collect();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut a = Agent {
        by_id: states
            .iter()
            .enumerate()
            .map(|(i, n)| (n.node.id.clone(), i))
            .collect(),
        api,
        stats,
        rng,
        behaviour,
        nodes: states,
        lease_node: HashMap::new(),
        decided: HashSet::new(),
        wipes: HashSet::new(),
        ended: HashSet::new(),
        due: BinaryHeap::new(),
        actions: HashMap::new(),
        next_action: 0,
        inflight: 0,
        tx,
    };
    let mut ws = connect(&a, use_ws).await;
    let mut every = tokio::time::interval(Duration::from_millis(a.behaviour.heartbeat_ms.max(1)));
    let mut sweeping = false;
    loop {
        let next_due = a
            .due
            .peek()
            .map_or_else(|| Instant::now() + Duration::from_secs(3600), |d| d.0.0);
        tokio::select! {
            _ = every.tick() => {
                let t = start.elapsed();
                for i in 0..a.nodes.len() {
                    let n = &a.nodes[i];
                    let silent = n.silence.is_some_and(|(from, to)| t >= from && t < to);
                    if silent != n.silent {
                        a.nodes[i].silent = silent;
                        a.touch(i);
                        if silent {
                            a.count(|s| s.nodes_silenced += 1);
                        }
                    }
                }
                if ws.is_none() {
                    ws = connect(&a, use_ws).await;
                }
                if !sweeping {
                    sweeping = true;
                    let targets: Vec<(usize, String, u32)> = a
                        .nodes
                        .iter()
                        .enumerate()
                        .filter(|(_, n)| !n.silent)
                        .map(|(i, n)| (i, n.node.id.clone(), n.node.gpus))
                        .collect();
                    let (api, tx) = (a.api.clone(), a.tx.clone());
                    tokio::spawn(async move {
                        for (node, id, gpus) in targets {
                            let sent = Instant::now();
                            let answer = api.heartbeat(&id, gpus).await;
                            let _ = tx.send(Msg::Heartbeat { node, sent, answer });
                        }
                        let _ = tx.send(Msg::SweepDone);
                    });
                }
            }
            m = async {
                match ws.as_mut() {
                    Some(w) => w.next().await,
                    None => std::future::pending().await,
                }
            } => {
                match m {
                    Ok(m) => a.on_event(&m),
                    // One message this client cannot read; the session stays usable.
                    Err(ClientError::Decode(_)) => {
                        a.count(|s| s.error("supplier_ws_undecodable"));
                    }
                    Err(_) => {
                        // Reconnect at the next tick; the lease lists cover what was missed.
                        ws = None;
                        for i in 0..a.nodes.len() {
                            a.touch(i);
                        }
                    }
                }
            }
            Some(m) = rx.recv() => match m {
                Msg::Heartbeat { node, sent, answer } => match answer {
                    Ok(beat) => {
                        a.count(|s| s.ack("heartbeat", sent));
                        let n = &a.nodes[node];
                        if Some(beat.leases_version) != n.reconciled_version || !n.clean {
                            a.reconcile(node);
                        }
                    }
                    Err(e) => a.count(|s| s.error(&error_name(&e, "heartbeat"))),
                },
                Msg::SweepDone => sweeping = false,
                Msg::Reconciled { node, epoch, sent, answer } => {
                    a.inflight -= 1;
                    a.nodes[node].reconciling = false;
                    match answer {
                        Ok(leases) => {
                            a.count(|s| s.ack("node_leases", sent));
                            a.on_leases(node, epoch, &leases);
                        }
                        Err(e) => a.count(|s| s.error(&error_name(&e, "node_leases"))),
                    }
                }
                Msg::Acted { node, action, sent, sent_ms, answer } => {
                    a.on_acted(node, action, (sent, sent_ms), answer);
                }
            },
            _ = tokio::time::sleep_until(next_due.into()), if !a.due.is_empty() => {
                let now = Instant::now();
                while let Some(Reverse((at, id))) = a.due.peek().copied() {
                    if at > now {
                        break;
                    }
                    a.due.pop();
                    if let Some((node, action)) = a.actions.remove(&id) {
                        a.spawn_action(node, action);
                    }
                }
            }
            _ = done.changed() => if *done.borrow() { break },
        }
        let now_idle = a.idle();
        idle.send_if_modified(|v| std::mem::replace(v, now_idle) != now_idle);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gateway::api::launch::AccessOf;

    #[test]
    fn access_details_pass_the_gateways_validation() {
        for (node, lease, ports) in [(1, 1, vec![]), (987, 123_456_789, vec![8888, 6006])] {
            let a = access(node, lease, &ports)
                .to_access()
                .unwrap_or_else(|e| panic!("{e:?}"));
            assert_eq!(a.urls.len(), ports.len());
            assert!(a.ssh_host.is_some() && a.ssh_port.is_some());
        }
    }

    /// Every plan's report passes the gateway's validation and the exchange judges it as
    /// planned, on every SKU the scenario trades, for one GPU, four, and eight with NVLink
    /// (where the all-reduce is judged too).
    #[test]
    fn verification_reports_are_judged_as_planned() {
        use exchange::Interconnect;
        use exchange::verify::{Figure, RunShape, VerifyOutcome, judge, reference_for};
        let low = FailKind::Low { pct: 65 };
        let cases = [
            (
                VerifyPlan::Pass { pct: 92 },
                0,
                VerifyOutcome::Verified,
                None,
            ),
            (
                VerifyPlan::Pass { pct: 99 },
                2,
                VerifyOutcome::Verified,
                None,
            ),
            (
                VerifyPlan::Degraded { pct: 72 },
                0,
                VerifyOutcome::Degraded,
                None,
            ),
            (
                VerifyPlan::Degraded { pct: 87 },
                1,
                VerifyOutcome::Degraded,
                None,
            ),
            (
                VerifyPlan::Faulty { pct: 93 },
                0,
                VerifyOutcome::Degraded,
                Some(Figure::NvmlFault),
            ),
            (
                VerifyPlan::FailOnce { fail: low, pct: 92 },
                0,
                VerifyOutcome::Failed,
                None,
            ),
            (
                VerifyPlan::FailOnce { fail: low, pct: 92 },
                1,
                VerifyOutcome::Verified,
                None,
            ),
            (
                VerifyPlan::FailOnce {
                    fail: FailKind::Dcgm,
                    pct: 95,
                },
                0,
                VerifyOutcome::Failed,
                Some(Figure::Dcgm),
            ),
            (
                VerifyPlan::FailOnce {
                    fail: FailKind::Missing,
                    pct: 95,
                },
                0,
                VerifyOutcome::Failed,
                Some(Figure::Missing),
            ),
            (
                VerifyPlan::SilentOnce { pct: 92 },
                1,
                VerifyOutcome::Verified,
                None,
            ),
        ];
        let skus = crate::scenario::build(1, 1, 1, 1, 0.0).skus;
        assert!(skus.len() >= 5, "{skus:?}");
        for sku in &skus {
            let reference = reference_for(sku).unwrap_or_else(|| panic!("{sku}: no reference"));
            for (gpus, nvlink) in [(1u32, false), (4, false), (8, true)] {
                let indexes: Vec<u32> = (0..gpus).collect();
                for (plan, n, want, by) in cases {
                    let r = verification_report(plan, n, sku, &indexes, gpus, nvlink)
                        .unwrap_or_else(|| panic!("{plan:?} run {n}: no report"));
                    let figures = gateway::api::delivery::figures_of(&r)
                        .unwrap_or_else(|e| panic!("{sku} {plan:?}: {e:?}"));
                    let shape = RunShape {
                        gpu_mask: (1u32 << gpus) - 1,
                        node_gpus: gpus,
                        nvlink,
                        interconnect: if nvlink {
                            Interconnect::Infiniband
                        } else {
                            Interconnect::Pcie
                        },
                    };
                    let j = judge(reference, shape, &figures);
                    assert_eq!(j.outcome, want, "{sku} × {gpus} {plan:?} run {n}: {j:?}");
                    if by.is_some() {
                        assert_eq!(j.decided_by, by, "{sku} × {gpus} {plan:?}: {j:?}");
                    }
                }
            }
        }
        let silent = VerifyPlan::SilentOnce { pct: 95 };
        assert!(verification_report(silent, 0, "H100-80G", &[0], 1, false).is_none());
        let pass = VerifyPlan::Pass { pct: 95 };
        assert!(
            verification_report(pass, 0, "Ascend910B-64G", &[0], 1, false).is_none(),
            "no reference figures, never run"
        );
    }

    #[test]
    fn reports_pass_the_gateways_validation() {
        for r in FAILURES {
            gateway::api::launch::report_text("reason", r).unwrap();
        }
        gateway::api::launch::report_text("method", WIPE_METHOD).unwrap();
    }

    #[test]
    fn errors_are_counted_under_the_apis_code() {
        let refused: ClientError = serde_json::from_value::<gpux_client::ErrorBody>(
            serde_json::json!({"code": "unknown_node", "message": "m", "request_id": "r"}),
        )
        .map(|error| ClientError::Api { status: 404, error })
        .unwrap();
        assert_eq!(error_name(&refused, "heartbeat"), "unknown_node");
        assert_eq!(
            error_name(&ClientError::Timeout, "heartbeat"),
            "heartbeat_unreachable"
        );
        assert_eq!(
            error_name(&ClientError::Decode("x".into()), "node_leases"),
            "node_leases_failed"
        );
    }
}
