//! The agent's run loop (issue 16): [`run`] registers or finds the node, heartbeats it, follows
//! its websocket, and delivers the leases the exchange assigns to it through the operator's
//! hooks, until the caller's shutdown `watch` turns true (mini-redis `run(listener,
//! shutdown)`: `main` passes Ctrl-C / SIGTERM, tests a `watch` of their own).
//!
//! Tasks (all stop with the shutdown signal):
//! - **heartbeat** ([`crate::node::heartbeats`]): the healthy GPU count every period ±
//!   jitter; each answer's `leases_version` reaches the run loop through a `watch`.
//! - **websocket** ([`crate::events::follow`]): delivery events as wake-ups, reconnecting with
//!   jittered backoff.
//! - **the run loop** (this module, the only owner of the saved state): reconciles
//!   ([`crate::reconcile::plan`]) at start, after each websocket (re)connect, on delivery
//!   events and when `leases_version` moved; spawns the lease jobs ([`crate::jobs`]: hooks,
//!   at most [`crate::jobs::MAX_CONCURRENT_HOOKS`] at once, and reports) and takes their results.
//!
//! Per lease: provisioning with a deadline → the GPUs under it checked against the UUIDs
//! recorded at fill (issue 26: a changed one is reported `failed` with cause `gpu_changed`,
//! [`crate::jobs::check_gpus`], and no hook runs) → the provision hook (bounded by its limit
//! and the deadline) → `ready` with the hook's access details, or `failed` with the reason and
//! its cause (`launch_spec` when the hook exited 65, [`crate::hooks::LAUNCH_SPEC_EXIT_CODE`]: the
//! buyer's launch spec cannot run; else the node's; a 400 `invalid_access` from the exchange
//! becomes a failed report saying so). Wiping → the
//! teardown hook (retried a bounded number of times) → `torn-down` with its method. A
//! verification lease (purpose `verification`) runs the verification checks instead of the
//! provision hook ([`crate::verify`]) → `verification` with the figures, then wipes. Each
//! outcome is saved before it is reported (STYLE model 7), so a report lost to a network cut
//! or a restart is sent again without running the hook again. Reports are idempotent at the
//! exchange; a 404 or 409 (`lease_ended`, `not_provisioning`, `lease_not_ended`) means the
//! lease moved on without this report (someone else finished it): logged and dropped.
//!
//! Bounds (STYLE model 9): every call to the exchange by [`REQUEST_TIMEOUT_MS`] and racing the
//! shutdown ([`bounded`]); retries by jittered backoff, at least [`RETRY_MIN_MS`] apart; hooks
//! by their limits; stopping by [`STOP_TIMEOUT_MS`]. Stopping aborts the lease jobs, which
//! kills running hooks' process groups; their leases' saved steps make a restarted agent run
//! them again.
//!
//! Errors: the loop ends with an error only when the exchange refuses the agent for good (a
//! revoked key, a key of another node, the node unknown), the node is not this host's, or a
//! task failed (a bug). Network trouble and a down exchange are waited out.

use crate::clock::Clock;
use crate::config::AgentConfig;
use crate::error::AgentError;
use crate::events;
use crate::gpus::{self, DISCOVERY_TIMEOUT_MS, Discovery, GpuSource};
use crate::hooks::ProvisionFailure;
use crate::jobs::{self, Report};
use crate::node::{self, HealthProbe, NodeInfo};
use crate::reconcile::{self, Action, JobKind};
use crate::state::{SavedLease, SavedState, StateFile, Step};
use crate::verify::Measure;
use gpux_client::{Client, ClientError, backoff};
use gpux_wire::{AccessRequest, FailureCauseDto, HoldReasonDto, LeaseView, VerificationReport};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, Semaphore, watch};
use tokio::task::{AbortHandle, JoinError, JoinSet};
use tokio::time::Instant;

/// Bound of one call to the exchange (REST request and answer; websocket connect, close and
/// keepalive answer), ms: well under the exchange's 15 s offline limit, so a lost heartbeat
/// leaves time for the next one.
pub const REQUEST_TIMEOUT_MS: u64 = 5_000;
/// Shortest wait before a reconcile or report that failed for a transient reason is tried
/// again, ms (the backoff may wait longer).
pub const RETRY_MIN_MS: u64 = 1_000;
/// How long stopping waits for the lease jobs and tasks to end, ms.
pub const STOP_TIMEOUT_MS: u64 = 5_000;

/// Runs the agent until `shutdown` turns true (or its sender is dropped): `Ok(())` then.
/// `client` must carry the node's key (a node key, docs/api.md §1.3.1, or the supplier's
/// account key); its per-call bound is set to [`REQUEST_TIMEOUT_MS`].
///
/// # Errors
/// A configuration error ([`AgentConfig::validate`]); a discovery error; [`AgentError::Io`]
/// for an unreadable state file; [`AgentError::Refused`] when the exchange refuses the agent
/// for good; [`AgentError::NodeMismatch`]; [`AgentError::TaskFailed`] (a bug).
pub async fn run(
    cfg: AgentConfig,
    gpus: Arc<dyn GpuSource>,
    client: Client,
    clock: impl Clock,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), AgentError> {
    cfg.validate()?;
    let client = client.with_timeout(Duration::from_millis(REQUEST_TIMEOUT_MS));
    gpus.name_host(&cfg.name);
    let discovered = gpus::discover_bounded(gpus.clone(), DISCOVERY_TIMEOUT_MS);
    let Some(discovery) = unless_stopping(&mut shutdown, discovered).await else {
        return Ok(());
    };
    let discovery = discovery?;
    let sku = discovery.node_sku(cfg.sku.as_deref())?;
    let file = StateFile::new(&cfg.state_dir);
    let mut state = file.load(client.base_url(), &cfg.name)?;
    let registered = node::ensure_node(
        &cfg,
        &client,
        &discovery,
        &sku,
        &mut state,
        &file,
        &mut shutdown,
    );
    let Some(node) = registered.await? else {
        return Ok(());
    };
    tracing::info!(node = %node.id, name = %cfg.name, %sku, gpus = node.gpus, saved_leases = state.leases.len(), "agent running");
    let cfg = Arc::new(cfg);
    let (version_tx, version_rx) = watch::channel(0);
    let wake = Arc::new(Notify::new());
    let mut links = JoinSet::new();
    let health = HealthProbe::new(gpus.clone(), node::healthy_below(&discovery, node.gpus))
        .with_discovery(&discovery, node.gpus);
    let clock: Arc<dyn Clock> = Arc::new(clock);
    let beat = node::heartbeats(
        cfg.clone(),
        client.clone(),
        node.clone(),
        health,
        version_tx,
        clock.clone(),
        shutdown.clone(),
    );
    links.spawn(async move { ("heartbeat", beat.await) });
    let follow = events::follow(
        client.clone(),
        node.id.clone(),
        wake.clone(),
        shutdown.clone(),
    );
    links.spawn(async move { ("websocket", follow.await) });
    let mut sup = Supervisor::new(cfg, client, clock, node, discovery, gpus, file, state);
    let result = sup
        .supervise(&mut shutdown, &mut links, version_rx, &wake)
        .await;
    sup.stop_jobs().await;
    if result.is_err() {
        links.abort_all();
    }
    let _ = tokio::time::timeout(Duration::from_millis(STOP_TIMEOUT_MS), async {
        while links.join_next().await.is_some() {}
    })
    .await;
    links.shutdown().await;
    tracing::info!("agent stopped");
    result
}

/// `fut`, unless the agent stops first (`None`). STYLE model 9 for awaits bounded elsewhere.
pub async fn unless_stopping<T>(
    stop: &mut watch::Receiver<bool>,
    fut: impl Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        v = fut => Some(v),
        _ = stop.wait_for(|s| *s) => None,
    }
}

/// `fut` bounded by `ms` and given up when the agent stops (STYLE model 9, the gateway's
/// `send_unless_stopping`): `None` when the stop came first, `Some(Err(Elapsed))` when the
/// time ran out.
pub async fn bounded<T>(
    stop: &mut watch::Receiver<bool>,
    ms: u64,
    fut: impl Future<Output = T>,
) -> Option<Result<T, tokio::time::error::Elapsed>> {
    unless_stopping(stop, tokio::time::timeout(Duration::from_millis(ms), fut)).await
}

/// Sleeps `d` unless the agent stops first (`None`).
pub async fn sleep_unless_stopping(d: Duration, stop: &mut watch::Receiver<bool>) -> Option<()> {
    unless_stopping(stop, tokio::time::sleep(d)).await
}

/// An error a retry cannot fix and the agent cannot work around: the key is unknown,
/// revoked, or not allowed this (a node key of another node).
pub fn is_fatal(e: &ClientError) -> bool {
    matches!(e.status(), Some(401 | 403))
}

/// An error the same request may not meet later: transport, time-outs, 429, 5xx.
pub fn is_transient(e: &ClientError) -> bool {
    e.is_retryable() || e.status().is_some_and(|s| s >= 500)
}

/// A lease job's result.
enum JobResult {
    Provisioned(Result<AccessRequest, ProvisionFailure>),
    Verified(Result<VerificationReport, ProvisionFailure>),
    TornDown(Result<String, String>),
    Reported(JobKind, Result<(), ClientError>),
}

struct JobDone {
    job: u64,
    lease_id: String,
    result: JobResult,
}

struct Running {
    job: u64,
    kind: JobKind,
    abort: AbortHandle,
}

/// A job to start once the steps leading to it are saved.
enum Start {
    Provision(LeaseView),
    Verify(LeaseView),
    Teardown(LeaseView),
    Report(String, Report),
}

type Links = JoinSet<(&'static str, Result<(), AgentError>)>;

/// The run loop's state: the only writer of the saved state.
struct Supervisor {
    cfg: Arc<AgentConfig>,
    client: Client,
    clock: Arc<dyn Clock>,
    node: NodeInfo,
    discovery: Discovery,
    gpus: Arc<dyn GpuSource>,
    file: StateFile,
    state: SavedState,
    jobs: JoinSet<JobDone>,
    running: BTreeMap<String, Running>,
    next_job: u64,
    permits: Arc<Semaphore>,
    gave_up: BTreeSet<String>,
    seen_version: Option<u64>,
    held: Option<HoldReasonDto>,
    dirty: bool,
    retry_at: Option<Instant>,
    failures: u32,
}

impl Supervisor {
    #[allow(clippy::too_many_arguments)] // the run loop's parts, each kept
    fn new(
        cfg: Arc<AgentConfig>,
        client: Client,
        clock: Arc<dyn Clock>,
        node: NodeInfo,
        discovery: Discovery,
        gpus: Arc<dyn GpuSource>,
        file: StateFile,
        state: SavedState,
    ) -> Supervisor {
        Supervisor {
            cfg,
            client,
            clock,
            node,
            discovery,
            gpus,
            file,
            state,
            jobs: JoinSet::new(),
            running: BTreeMap::new(),
            next_job: 0,
            permits: Arc::new(Semaphore::new(jobs::MAX_CONCURRENT_HOOKS)),
            gave_up: BTreeSet::new(),
            seen_version: None,
            held: None,
            dirty: true,
            retry_at: None,
            failures: 0,
        }
    }

    async fn supervise(
        &mut self,
        stop: &mut watch::Receiver<bool>,
        links: &mut Links,
        mut version: watch::Receiver<u64>,
        wake: &Notify,
    ) -> Result<(), AgentError> {
        loop {
            if self.dirty
                && self.retry_at.is_none_or(|t| t <= Instant::now())
                && self.reconcile(stop).await?.is_none()
            {
                return Ok(());
            }
            let retry_at = self.retry_at.filter(|_| self.dirty);
            tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => return Ok(()),
                Some(ended) = links.join_next() => return link_ended(ended),
                Some(done) = self.jobs.join_next() => self.finished(done)?,
                () = wake.notified() => self.dirty = true,
                Ok(()) = version.changed() => {
                    let v = *version.borrow_and_update();
                    if self.seen_version != Some(v) {
                        self.dirty = true;
                    }
                }
                () = tokio::time::sleep_until(retry_at.unwrap_or_else(Instant::now)),
                    if retry_at.is_some() => self.retry_at = None,
            }
        }
    }

    /// Reads the node's leases and acts on them; `None` when the agent stops first.
    async fn reconcile(
        &mut self,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<Option<()>, AgentError> {
        let call = self.client.node_leases(&self.node.id);
        let Some(answer) = bounded(stop, REQUEST_TIMEOUT_MS, call).await else {
            return Ok(None);
        };
        let list = match answer.unwrap_or(Err(ClientError::Timeout)) {
            Ok(list) => list,
            Err(e) if is_transient(&e) => {
                tracing::warn!(error = %e, "reading the node's leases failed");
                self.retry_later(&e);
                return Ok(Some(()));
            }
            Err(e) => return Err(AgentError::refused("read the node's leases", e)),
        };
        self.dirty = false;
        self.retry_at = None;
        self.failures = 0;
        self.seen_version = Some(list.leases_version);
        if list.held != self.held {
            match list.held {
                Some(reason) => tracing::warn!(
                    ?reason,
                    "node held off the market: the supplier resumes it (POST /v1/nodes/{{id}}/resume with an account key)"
                ),
                None => tracing::info!("node on the market"),
            }
            self.held = list.held;
        }
        let running = self
            .running
            .iter()
            .map(|(id, r)| (id.clone(), r.kind))
            .collect();
        let actions = reconcile::plan(&list, &self.state.leases, &running, &self.gave_up);
        self.gave_up
            .retain(|id| list.wiping.iter().any(|l| &l.id == id));
        self.apply(actions);
        Ok(Some(()))
    }

    /// Carries out a plan: every step first, saved once, then the jobs.
    fn apply(&mut self, actions: Vec<Action>) {
        if actions.is_empty() {
            return;
        }
        let mut starts = Vec::new();
        for a in actions {
            match a {
                Action::Provision(l) => {
                    self.set_step(&l.id, &l.gpu_indexes, Step::Provisioning);
                    starts.push(Start::Provision(l));
                }
                Action::Verify(l) => {
                    self.set_step(&l.id, &l.gpu_indexes, Step::Provisioning);
                    starts.push(Start::Verify(l));
                }
                Action::ReportVerification { lease_id, report } => {
                    starts.push(Start::Report(lease_id, Report::Verification(report)));
                }
                Action::Teardown(l) => {
                    if let Some(r) = self.running.remove(&l.id) {
                        tracing::info!(lease = %l.id, job = ?r.kind, "the lease ended: stopping its job");
                        r.abort.abort();
                    }
                    self.set_step(&l.id, &l.gpu_indexes, Step::TearingDown);
                    starts.push(Start::Teardown(l));
                }
                Action::Remember {
                    lease_id,
                    gpu_indexes,
                } => {
                    tracing::info!(lease = %lease_id, "lease active");
                    self.set_step(&lease_id, &gpu_indexes, Step::Active);
                }
                Action::Forget(id) => {
                    self.state.leases.remove(&id);
                    self.gave_up.remove(&id);
                }
                Action::ReportReady { lease_id, access } => {
                    starts.push(Start::Report(lease_id, Report::Ready(access)));
                }
                Action::ReportFailed {
                    lease_id,
                    reason,
                    cause,
                } => {
                    starts.push(Start::Report(lease_id, Report::Failed(reason, cause)));
                }
                Action::ReportTornDown { lease_id, method } => {
                    starts.push(Start::Report(lease_id, Report::TornDown(method)));
                }
            }
        }
        self.save();
        for s in starts {
            self.start(s);
        }
    }

    fn set_step(&mut self, id: &str, gpu_indexes: &[u32], step: Step) {
        self.state
            .leases
            .entry(id.to_string())
            .and_modify(|l| l.step = step.clone())
            .or_insert_with(|| SavedLease {
                gpu_indexes: gpu_indexes.to_vec(),
                step,
            });
    }

    /// Saves the state. A failure (a full disk) is logged, not fatal: the exchange's lease
    /// list still rebuilds what matters after a restart (a hook may run again).
    fn save(&self) {
        if let Err(e) = self.file.save(&self.state) {
            tracing::error!(error = %e, "saving the agent's state failed");
        }
    }

    fn start(&mut self, s: Start) {
        match s {
            Start::Provision(l) => {
                tracing::info!(lease = %l.id, gpus = ?l.gpu_indexes, deadline_ms = ?l.provision_deadline_ms, left_ms = ?l.deadline_in_ms, "provisioning");
                let on_host = self.discovery.uuids_of(&l.gpu_indexes).is_some();
                let id = l.id.clone();
                let mut ctx = jobs::lease_context(&l, &self.node.id, &self.discovery);
                let hook = self.cfg.hooks.provision.clone();
                let deadline = jobs::local_deadline(&l, self.clock.now_ms());
                let (clock, permits, source) =
                    (self.clock.clone(), self.permits.clone(), self.gpus.clone());
                // Issue 26: the GPUs under the lease are checked first (`gpu_changed`).
                let job = async move {
                    if let Some(uuids) = jobs::check_gpus(source, &l).await? {
                        ctx.gpu_uuids = uuids;
                    }
                    jobs::provision(ctx, on_host, hook, deadline, clock, permits).await
                };
                self.spawn(&id, JobKind::Provision, async move {
                    JobResult::Provisioned(job.await)
                });
            }
            Start::Verify(l) => {
                tracing::info!(lease = %l.id, gpus = ?l.gpu_indexes, "verification lease: running the checks");
                let measure = Measure::of(
                    &self.cfg.hooks.verify,
                    self.cfg.simulate.is_some(),
                    self.cfg.simulate_verify.as_ref(),
                );
                let id = l.id.clone();
                let job = jobs::verify(
                    self.gpus.clone(),
                    l.clone(),
                    jobs::lease_context(&l, &self.node.id, &self.discovery),
                    measure,
                    jobs::local_deadline(&l, self.clock.now_ms()),
                    self.clock.clone(),
                    self.permits.clone(),
                );
                self.spawn(&id, JobKind::Verify, async move {
                    JobResult::Verified(job.await)
                });
            }
            Start::Teardown(l) => {
                tracing::info!(lease = %l.id, gpus = ?l.gpu_indexes, "tearing down");
                let job = jobs::teardown(
                    jobs::lease_context(&l, &self.node.id, &self.discovery),
                    self.cfg.hooks.teardown.clone(),
                    self.permits.clone(),
                );
                self.spawn(&l.id, JobKind::Teardown, async move {
                    JobResult::TornDown(job.await)
                });
            }
            Start::Report(id, report) => {
                let kind = match report {
                    Report::Verification(_) => JobKind::ReportVerification,
                    Report::Ready(_) => JobKind::ReportReady,
                    Report::Failed(..) => JobKind::ReportFailed,
                    Report::TornDown(_) => JobKind::ReportTornDown,
                };
                let job = jobs::send_report(self.client.clone(), id.clone(), report);
                self.spawn(
                    &id,
                    kind,
                    async move { JobResult::Reported(kind, job.await) },
                );
            }
        }
    }

    fn spawn(
        &mut self,
        lease_id: &str,
        kind: JobKind,
        fut: impl Future<Output = JobResult> + Send + 'static,
    ) {
        self.next_job += 1;
        let job = self.next_job;
        let id = lease_id.to_string();
        let abort = self.jobs.spawn(async move {
            JobDone {
                job,
                lease_id: id,
                result: fut.await,
            }
        });
        self.running
            .insert(lease_id.to_string(), Running { job, kind, abort });
    }

    /// Saves `step`, then sends `report` (durable before visible).
    fn step_then_report(&mut self, id: &str, step: Step, report: Report) {
        self.set_step(id, &[], step);
        self.save();
        self.start(Start::Report(id.to_string(), report));
    }

    fn retry_later(&mut self, e: &ClientError) {
        let wait =
            backoff::delay(self.failures, e.retry_after()).max(Duration::from_millis(RETRY_MIN_MS));
        self.failures = self.failures.saturating_add(1);
        self.dirty = true;
        self.retry_at = Some(Instant::now() + wait);
    }

    /// Takes a job's result (a stale one, of a job stopped since, is ignored).
    fn finished(&mut self, joined: Result<JobDone, JoinError>) -> Result<(), AgentError> {
        let done = match joined {
            Ok(done) => done,
            Err(e) if e.is_cancelled() => return Ok(()),
            Err(e) => return Err(AgentError::task_failed("a lease job", &e)),
        };
        let id = done.lease_id;
        if self.running.get(&id).map(|r| r.job) != Some(done.job) {
            return Ok(());
        }
        self.running.remove(&id);
        match done.result {
            JobResult::Provisioned(Ok(access)) => {
                tracing::info!(lease = %id, "provisioned: reporting ready");
                let step = Step::ReportReady {
                    access: access.clone(),
                };
                self.step_then_report(&id, step, Report::Ready(access));
            }
            JobResult::Verified(Ok(report)) => {
                tracing::info!(lease = %id, gpus = report.gpus.len(), duration_s = report.duration_s, "verification checks done: reporting the figures");
                let step = Step::ReportVerification {
                    report: report.clone(),
                };
                self.step_then_report(&id, step, Report::Verification(report));
            }
            JobResult::Provisioned(Err(ProvisionFailure { cause, reason }))
            | JobResult::Verified(Err(ProvisionFailure { cause, reason })) => {
                tracing::warn!(lease = %id, %reason, ?cause, "provisioning failed: reporting it");
                let step = Step::ReportFailed {
                    reason: reason.clone(),
                    cause,
                };
                self.step_then_report(&id, step, Report::Failed(reason, cause));
            }
            JobResult::TornDown(Ok(method)) => {
                tracing::info!(lease = %id, %method, "torn down: reporting it");
                let step = Step::ReportTornDown {
                    method: method.clone(),
                };
                self.step_then_report(&id, step, Report::TornDown(method));
            }
            JobResult::TornDown(Err(reason)) => {
                tracing::error!(lease = %id, %reason, attempts = jobs::MAX_TEARDOWN_ATTEMPTS, "teardown failed: giving up (the exchange holds the node at the teardown deadline; fix the hook and restart the agent to try again)");
                self.gave_up.insert(id);
            }
            JobResult::Reported(kind, result) => return self.reported(&id, kind, result),
        }
        Ok(())
    }

    fn reported(
        &mut self,
        id: &str,
        kind: JobKind,
        result: Result<(), ClientError>,
    ) -> Result<(), AgentError> {
        let e = match result {
            Ok(()) => {
                tracing::info!(lease = %id, report = ?kind, "reported");
                self.settle(id, kind, true);
                if matches!(kind, JobKind::ReportFailed | JobKind::ReportVerification) {
                    self.dirty = true; // the lease now waits for its wipe
                }
                return Ok(());
            }
            Err(e) => e,
        };
        if kind == JobKind::ReportReady && e.code() == Some("invalid_access") {
            let reason = jobs::refused_access_reason(&e);
            tracing::warn!(lease = %id, %reason, "the exchange refused the access details: reporting the lease failed");
            let step = Step::ReportFailed {
                reason: reason.clone(),
                cause: FailureCauseDto::Node,
            };
            self.step_then_report(id, step, Report::Failed(reason, FailureCauseDto::Node));
        } else if is_fatal(&e) {
            return Err(AgentError::refused("report on a lease", e));
        } else if is_transient(&e) {
            tracing::warn!(lease = %id, report = ?kind, error = %e, "report failed: retrying");
            self.retry_later(&e);
        } else {
            tracing::info!(lease = %id, report = ?kind, error = %e, "report refused: the lease moved on without it (dropped)");
            self.settle(id, kind, false);
            self.dirty = true;
        }
        Ok(())
    }

    /// The step after a report was `accepted` or refused for good: a lease reported ready is
    /// active; one reported failed, or whose report was refused, waits for its wipe.
    fn settle(&mut self, id: &str, kind: JobKind, accepted: bool) {
        match kind {
            JobKind::ReportReady if accepted => self.set_step(id, &[], Step::Active),
            JobKind::ReportReady | JobKind::ReportFailed | JobKind::ReportVerification => {
                self.set_step(id, &[], Step::Ended);
            }
            JobKind::ReportTornDown => {
                self.state.leases.remove(id);
            }
            JobKind::Provision | JobKind::Teardown | JobKind::Verify => return,
        }
        self.save();
    }

    /// Aborts every lease job (killing running hooks) and waits for them to end.
    async fn stop_jobs(&mut self) {
        self.jobs.abort_all();
        self.running.clear();
        let _ = tokio::time::timeout(Duration::from_millis(STOP_TIMEOUT_MS), async {
            while self.jobs.join_next().await.is_some() {}
        })
        .await;
    }
}

fn link_ended(
    ended: Result<(&'static str, Result<(), AgentError>), JoinError>,
) -> Result<(), AgentError> {
    match ended {
        Ok((_, Ok(()))) => Ok(()),
        Ok((_, Err(e))) => Err(e),
        Err(e) => Err(AgentError::task_failed("a task of the agent", &e)),
    }
}
