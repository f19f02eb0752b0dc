//! The agent's node on the exchange: finding or registering it at start, and the heartbeat
//! task (docs/api.md §1.3.1, §2.2).
//!
//! **Registration** ([`ensure_node`]): the saved node id when the exchange still knows it;
//! else the node of that name (`GET /v1/nodes`: a node key lists only its own node); else
//! `POST /v1/nodes` with the discovered SKU and GPU count (a 409 `node_exists` from a
//! registration whose answer was lost: looked up again). Then `PATCH` region, jurisdiction,
//! interconnect and NVLink when the configuration differs from the node. A node whose SKU is
//! not the host's is a configuration error (a node's SKU and GPU count never change; a count
//! that differs is only logged: heartbeats count the GPUs the node has). Transient failures
//! (the exchange down at boot) are retried with jittered backoff until the agent stops.
//!
//! **Heartbeats** ([`heartbeats`]): one at start, then every `heartbeat_delay_ms` (the period
//! ± jitter). `healthy_gpus` is the number of healthy GPUs among the node's indexes, and
//! `unhealthy_gpus` names them with their problem (issue 26: the exchange ends exactly the
//! leases on those GPUs). Before the heartbeat, the host's attestation (every GPU's UUID,
//! model and memory; driver and CUDA versions) is posted when it differs from the one the
//! exchange last took: at start and whenever discovery changes (issue 26). Health
//! comes from a discovery on the blocking pool, waited for [`HEALTH_TIMEOUT_MS`] per
//! heartbeat; a discovery still running is not started again (a hung driver call keeps one
//! thread, never more), and the last known count is sent meanwhile — after
//! [`FAILED_PROBES_BEFORE_UNHEALTHY`] failed or late probes in a row, 0. Each answer's
//! `leases_version` goes to the run loop through a `watch`, which reconciles when it moved.
//! Each answer's `at_ms` gives this host's clock offset from the exchange: logged
//! ([`note_clock_offset`]) and sent with the next heartbeat as `clock_offset_ms`
//! ([`reported_offset`]), which the node view shows as `agent_clock_offset_ms` (issue 25).

use crate::config::{AgentConfig, Interconnect};
use crate::error::AgentError;
use crate::gpus::{Discovery, GpuSource};
use crate::run::{REQUEST_TIMEOUT_MS, bounded, is_fatal, is_transient, sleep_unless_stopping};
use crate::state::{SavedState, StateFile};
use gpux_client::{Client, ClientError, backoff};
use gpux_wire::{
    AttestationRequest, InterconnectDto, NodeRequest, NodeUpdateRequest, NodeView, UnhealthyGpu,
};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How long a heartbeat waits for the GPUs' health, ms (NVML answers in milliseconds; a hung
/// driver must not delay the heartbeat past the exchange's 15 s offline limit).
pub const HEALTH_TIMEOUT_MS: u64 = 2_000;
/// Failed or late health probes in a row after which every GPU counts as unhealthy.
pub const FAILED_PROBES_BEFORE_UNHEALTHY: u32 = 3;
/// Shortest wait before a retry of a failed start-up call, ms (with backoff above it).
pub const STARTUP_RETRY_MIN_MS: u64 = 500;

/// The node the agent runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    /// Node id.
    pub id: String,
    /// Its registered GPU count (heartbeats count healthy GPUs among indexes below it).
    pub gpus: u32,
}

fn interconnect(i: Interconnect) -> InterconnectDto {
    match i {
        Interconnect::Pcie => InterconnectDto::Pcie,
        Interconnect::Roce => InterconnectDto::Roce,
        Interconnect::Infiniband => InterconnectDto::Infiniband,
    }
}

/// Calls until a success or an error a retry cannot fix (answered as `Some(Err)`); `None`
/// when the agent stops first. Transient failures are logged and retried with backoff.
async fn retrying<T, Fut: Future<Output = Result<T, ClientError>>>(
    stop: &mut watch::Receiver<bool>,
    what: &str,
    mut call: impl FnMut() -> Fut,
) -> Option<Result<T, ClientError>> {
    let mut attempt = 0;
    loop {
        let e = match bounded(stop, REQUEST_TIMEOUT_MS, call()).await? {
            Ok(Ok(v)) => return Some(Ok(v)),
            Ok(Err(e)) if !is_transient(&e) => return Some(Err(e)),
            Ok(Err(e)) => e,
            Err(_) => ClientError::Timeout,
        };
        let wait = backoff::delay(attempt, e.retry_after())
            .max(Duration::from_millis(STARTUP_RETRY_MIN_MS));
        tracing::warn!(error = %e, retry_in_ms = wait.as_millis() as u64, "{what}");
        sleep_unless_stopping(wait, stop).await?;
        attempt += 1;
    }
}

/// Finds or registers the node, brings its settings in line with the configuration and saves
/// its id (module docs). `None` when the agent stops first.
///
/// # Errors
/// [`AgentError::Refused`] when the exchange refuses for good (a revoked key, a key scoped
/// to another node, an unknown SKU or region); [`AgentError::NodeMismatch`] when the node's
/// SKU is not the host's.
pub async fn ensure_node(
    cfg: &AgentConfig,
    client: &Client,
    discovery: &Discovery,
    sku: &str,
    state: &mut SavedState,
    file: &StateFile,
    stop: &mut watch::Receiver<bool>,
) -> Result<Option<NodeInfo>, AgentError> {
    let Some(node) = find_or_register(cfg, client, discovery, sku, state, stop).await? else {
        return Ok(None);
    };
    if node.sku != sku {
        return Err(AgentError::NodeMismatch {
            node: node.name,
            field: "sku",
            registered: node.sku,
            host: sku.to_string(),
        });
    }
    if node.gpus != discovery.count() {
        tracing::warn!(
            registered = node.gpus,
            found = discovery.count(),
            "the node's GPU count is not the host's: heartbeats count the registered GPUs only"
        );
    }
    let Some(node) = update_settings(cfg, client, node, stop).await? else {
        return Ok(None);
    };
    if state.node_id.as_deref() != Some(node.id.as_str()) {
        state.node_id = Some(node.id.clone());
        file.save(state)?;
    }
    Ok(Some(NodeInfo {
        id: node.id,
        gpus: node.gpus,
    }))
}

async fn find_or_register(
    cfg: &AgentConfig,
    client: &Client,
    discovery: &Discovery,
    sku: &str,
    state: &SavedState,
    stop: &mut watch::Receiver<bool>,
) -> Result<Option<NodeView>, AgentError> {
    if let Some(id) = &state.node_id {
        match retrying(stop, "reading the saved node", || client.node(id)).await {
            None => return Ok(None),
            Some(Ok(n)) if n.name == cfg.name => return Ok(Some(n)),
            Some(Ok(_)) | Some(Err(ClientError::Api { status: 404, .. })) => {
                tracing::warn!(node = %id, "the saved node id is not this node's: looking it up by name");
            }
            Some(Err(e)) => return Err(AgentError::refused("read the node", e)),
        }
    }
    if let Some(found) = by_name(cfg, client, stop).await? {
        return Ok(found);
    }
    let req = NodeRequest {
        name: cfg.name.clone(),
        sku: sku.to_string(),
        gpus: discovery.count(),
        region: cfg.region.clone(),
        jurisdiction: cfg.jurisdiction.clone(),
        interconnect: interconnect(cfg.interconnect),
        nvlink: cfg.nvlink,
        fabric_domain: cfg.fabric_domain.clone(),
        nic_gbps: cfg.nic_gbps,
    };
    match retrying(stop, "registering the node", || client.register_node(&req)).await {
        None => Ok(None),
        Some(Ok(n)) => {
            tracing::info!(node = %n.id, name = %n.name, sku = %n.sku, gpus = n.gpus, "node registered");
            Ok(Some(n))
        }
        Some(Err(e)) if e.code() == Some("node_exists") => {
            match by_name(cfg, client, stop).await? {
                Some(found) => Ok(found),
                None => Err(AgentError::refused("register the node", e)),
            }
        }
        Some(Err(e)) => Err(AgentError::refused("register the node", e)),
    }
}

/// The node named like the configuration: `Some(None)` when the agent stops first, `None`
/// when there is none.
async fn by_name(
    cfg: &AgentConfig,
    client: &Client,
    stop: &mut watch::Receiver<bool>,
) -> Result<Option<Option<NodeView>>, AgentError> {
    match retrying(stop, "listing the nodes", || client.nodes()).await {
        None => Ok(Some(None)),
        Some(Ok(list)) => Ok(list
            .nodes
            .into_iter()
            .find(|n| n.name == cfg.name)
            .map(Some)),
        Some(Err(e)) => Err(AgentError::refused("list the nodes", e)),
    }
}

/// `PATCH`es what the configuration changed (region, jurisdiction, interconnect, NVLink).
async fn update_settings(
    cfg: &AgentConfig,
    client: &Client,
    node: NodeView,
    stop: &mut watch::Receiver<bool>,
) -> Result<Option<NodeView>, AgentError> {
    let fabric = interconnect(cfg.interconnect);
    let change = NodeUpdateRequest {
        region: (node.region != cfg.region).then(|| cfg.region.clone()),
        jurisdiction: (node.jurisdiction != cfg.jurisdiction).then(|| cfg.jurisdiction.clone()),
        interconnect: (node.interconnect != fabric).then_some(fabric),
        nvlink: (node.nvlink != cfg.nvlink).then_some(cfg.nvlink),
        draining: None,
        fabric_domain: cfg
            .fabric_domain
            .clone()
            .filter(|d| node.fabric_domain.as_ref() != Some(d)),
        nic_gbps: cfg.nic_gbps.filter(|n| node.nic_gbps != Some(*n)),
    };
    if change.region.is_none()
        && change.jurisdiction.is_none()
        && change.interconnect.is_none()
        && change.nvlink.is_none()
        && change.fabric_domain.is_none()
        && change.nic_gbps.is_none()
    {
        return Ok(Some(node));
    }
    let id = node.id.clone();
    match retrying(stop, "updating the node", || {
        client.update_node(&id, &change)
    })
    .await
    {
        None => Ok(None),
        Some(Ok(n)) => {
            tracing::info!(node = %n.id, ?change, "node settings updated from the configuration");
            Ok(Some(n))
        }
        Some(Err(e)) => Err(AgentError::refused("update the node's settings", e)),
    }
}

/// The GPUs' health, probed on the blocking pool without ever running two probes at once.
pub struct HealthProbe {
    source: Arc<dyn GpuSource>,
    pending: Option<JoinHandle<Result<Discovery, AgentError>>>,
    last: u32,
    failures: u32,
    /// The unhealthy GPUs as the last probe found them (`None` before one answered).
    unhealthy: Option<Vec<UnhealthyGpu>>,
    /// The host's attestation from the latest complete discovery.
    attestation: Option<AttestationRequest>,
}

impl HealthProbe {
    /// A probe of `source`, starting from `healthy` (the start-up discovery's count).
    pub fn new(source: Arc<dyn GpuSource>, healthy: u32) -> HealthProbe {
        HealthProbe {
            source,
            pending: None,
            last: healthy,
            failures: 0,
            unhealthy: None,
            attestation: None,
        }
    }

    /// Starts from the start-up discovery `d` of a node of `registered` GPUs: its unhealthy
    /// GPUs and attestation stand until the first probe answers.
    pub fn with_discovery(mut self, d: &Discovery, registered: u32) -> HealthProbe {
        self.unhealthy = Some(d.unhealthy_gpus(registered));
        self.attestation = d.attestation();
        self
    }

    /// The unhealthy GPUs for the next heartbeat (issue 26): from the last probe that
    /// answered, or every GPU once [`FAILED_PROBES_BEFORE_UNHEALTHY`] probes failed in a row;
    /// `None` before any discovery (a count-only heartbeat).
    pub fn unhealthy_gpus(&self) -> Option<Vec<UnhealthyGpu>> {
        self.unhealthy.clone()
    }

    /// The host's attestation from the latest complete discovery (issue 26).
    pub fn attestation(&self) -> Option<&AttestationRequest> {
        self.attestation.as_ref()
    }

    /// Healthy GPUs among indexes `0..registered` now (module docs), within
    /// [`HEALTH_TIMEOUT_MS`].
    pub async fn healthy(&mut self, registered: u32) -> u32 {
        let source = &self.source;
        let task = self.pending.get_or_insert_with(|| {
            let s = source.clone();
            tokio::task::spawn_blocking(move || s.discover())
        });
        let problem =
            match tokio::time::timeout(Duration::from_millis(HEALTH_TIMEOUT_MS), task).await {
                Err(_) => Some(format!(
                    "no answer within {HEALTH_TIMEOUT_MS} ms (still waiting)"
                )),
                Ok(joined) => {
                    self.pending = None;
                    match joined {
                        Ok(Ok(d)) => {
                            self.last = healthy_below(&d, registered);
                            self.unhealthy = Some(d.unhealthy_gpus(registered));
                            if let Some(a) = d.attestation() {
                                self.attestation = Some(a);
                            }
                            None
                        }
                        Ok(Err(e)) => Some(e.to_string()),
                        Err(e) => Some(format!("the probe panicked: {e}")),
                    }
                }
            };
        let Some(problem) = problem else {
            self.failures = 0;
            return self.last;
        };
        self.failures += 1;
        if self.failures >= FAILED_PROBES_BEFORE_UNHEALTHY {
            tracing::error!(%problem, failures = self.failures, "GPU health unknown: reporting no healthy GPU");
            let reason = format!("GPU health unknown: {problem}");
            self.unhealthy = Some(
                (0..registered.min(crate::gpus::MAX_GPUS_PER_NODE))
                    .map(|i| crate::gpus::unhealthy_gpu(i, None, Some(&reason)))
                    .collect(),
            );
            return 0;
        }
        tracing::warn!(%problem, failures = self.failures, "GPU health probe failed: reporting the last count");
        self.last
    }
}

/// Healthy GPUs of `d` among indexes `0..registered`.
pub fn healthy_below(d: &Discovery, registered: u32) -> u32 {
    let n = d
        .gpus
        .iter()
        .filter(|g| g.healthy && g.index < registered)
        .count();
    u32::try_from(n).unwrap_or(registered)
}

/// The heartbeat task (module docs): runs until the agent stops (`Ok`) or the exchange
/// refuses the node for good (a revoked key, a node it no longer knows).
pub async fn heartbeats(
    cfg: Arc<AgentConfig>,
    client: Client,
    node: NodeInfo,
    mut health: HealthProbe,
    version: watch::Sender<u64>,
    clock: Arc<dyn crate::clock::Clock>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), AgentError> {
    let mut delay = Duration::ZERO;
    let mut offset_logged = None;
    // Measured from the last answer, sent with the next heartbeat (the node view shows it).
    let mut offset_ms: Option<i64> = None;
    // The attestation the exchange has taken (matched or not): sent again only when the host
    // changed.
    let mut attested: Option<AttestationRequest> = None;
    loop {
        if sleep_unless_stopping(delay, &mut stop).await.is_none() {
            return Ok(());
        }
        delay = Duration::from_millis(cfg.heartbeat_delay_ms(fastrand::f64()));
        let healthy = health.healthy(node.gpus).await;
        if let Some(a) = health
            .attestation()
            .filter(|a| attested.as_ref() != Some(*a))
        {
            let a = a.clone();
            match attest(&client, &node, &a, &mut stop).await {
                None => return Ok(()),
                Some(done) => {
                    if done {
                        attested = Some(a);
                    }
                }
            }
        }
        let Some(answer) = bounded(
            &mut stop,
            REQUEST_TIMEOUT_MS,
            client.heartbeat_with_health(
                &node.id,
                healthy,
                offset_ms.map(reported_offset),
                health.unhealthy_gpus(),
            ),
        )
        .await
        else {
            return Ok(());
        };
        match answer.unwrap_or(Err(ClientError::Timeout)) {
            Ok(a) => {
                let offset = clock.now_ms().saturating_sub(a.at_ms);
                note_clock_offset(&mut offset_logged, offset);
                offset_ms = Some(offset);
                if a.came_online {
                    tracing::info!(node = %node.id, healthy, "node back online");
                }
                version.send_if_modified(|v| {
                    let moved = *v != a.leases_version;
                    *v = a.leases_version;
                    moved
                });
            }
            Err(e) if is_fatal(&e) || e.status() == Some(404) => {
                return Err(AgentError::refused("heartbeat", e));
            }
            Err(e) => tracing::warn!(error = %e, "heartbeat failed"),
        }
    }
}

/// Posts the host's attestation (issue 26, docs/market-rules.md §12.1). Answers `None` when
/// the agent is stopping, `Some(true)` when the exchange took it (matched, or a mismatch that
/// held the node: logged as an error with what differs; sending it again would not help),
/// also when it refused it for good (400, 422: logged), and `Some(false)` to try again at the
/// next heartbeat (a transient failure).
async fn attest(
    client: &Client,
    node: &NodeInfo,
    a: &AttestationRequest,
    stop: &mut watch::Receiver<bool>,
) -> Option<bool> {
    let answer = bounded(stop, REQUEST_TIMEOUT_MS, client.attest_node(&node.id, a)).await?;
    Some(match answer.unwrap_or(Err(ClientError::Timeout)) {
        Ok(r) if r.attested => {
            tracing::info!(node = %node.id, gpus = a.gpus.len(), driver = %a.driver_version, cuda = %a.cuda_version, "attested");
            true
        }
        Ok(r) => {
            let message = r.mismatch.map(|m| m.message).unwrap_or_default();
            tracing::error!(node = %node.id, held = r.held, %message, "the exchange holds this node: its attestation does not match the registration");
            true
        }
        Err(e) if matches!(e.status(), Some(400 | 422)) => {
            tracing::error!(node = %node.id, error = %e, "the exchange refused this host's attestation");
            true
        }
        Err(e) => {
            tracing::warn!(node = %node.id, error = %e, "attestation failed: trying again");
            false
        }
    })
}

/// The offset a heartbeat reports: `offset_ms` within the exchange's bound
/// ([`gpux_wire::MAX_CLOCK_OFFSET_MS`], a day either way; beyond it the exchange answers 400,
/// which would stop the heartbeats), so a clock off by more reads as off by a day.
pub fn reported_offset(offset_ms: i64) -> i64 {
    offset_ms.clamp(
        -gpux_wire::MAX_CLOCK_OFFSET_MS,
        gpux_wire::MAX_CLOCK_OFFSET_MS,
    )
}

/// A host clock further than this from the exchange's is warned about, ms.
pub const CLOCK_OFFSET_WARN_MS: i64 = 2_000;
/// The offset is logged again when it moved by more than this since it was last logged, ms.
pub const CLOCK_OFFSET_RELOG_MS: i64 = 1_000;

/// Logs this host's clock offset from the exchange (`offset_ms` = host time at a heartbeat's
/// answer − the exchange's time of that heartbeat, so it includes up to one round trip):
/// at the first answer, and again when it moved by more than [`CLOCK_OFFSET_RELOG_MS`]; a
/// warning beyond [`CLOCK_OFFSET_WARN_MS`]. Provisioning budgets do not depend on it (they
/// use the time left the exchange sends), but hooks and logs on a host with a wrong clock
/// mislead (issue 25). Answers whether it logged.
pub fn note_clock_offset(logged: &mut Option<i64>, offset_ms: i64) -> bool {
    if logged.is_some_and(|l| (l - offset_ms).abs() <= CLOCK_OFFSET_RELOG_MS) {
        return false;
    }
    *logged = Some(offset_ms);
    if offset_ms.abs() > CLOCK_OFFSET_WARN_MS {
        tracing::warn!(
            clock_offset_ms = offset_ms,
            "this host's clock is {:.1} s {} the exchange's: provisioning budgets use the \
             exchange's time left, but sync the host's clock (NTP)",
            offset_ms.abs() as f64 / 1000.0,
            if offset_ms > 0 { "ahead of" } else { "behind" }
        );
    } else {
        tracing::info!(
            clock_offset_ms = offset_ms,
            "clock offset from the exchange"
        );
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpus::SimulatedGpus;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn a_reported_offset_stays_within_the_exchanges_bound() {
        assert_eq!(reported_offset(600_000), 600_000);
        assert_eq!(reported_offset(-3), -3);
        assert_eq!(reported_offset(i64::MAX), gpux_wire::MAX_CLOCK_OFFSET_MS);
        assert_eq!(
            reported_offset(-90_000_000_000),
            -gpux_wire::MAX_CLOCK_OFFSET_MS
        );
    }

    #[test]
    fn the_clock_offset_is_logged_first_and_when_it_moves() {
        let mut logged = None;
        assert!(note_clock_offset(&mut logged, 600_000), "the first answer");
        assert!(
            !note_clock_offset(&mut logged, 600_400),
            "within a second: quiet"
        );
        assert!(
            !note_clock_offset(&mut logged, 599_000),
            "exactly a second: quiet"
        );
        assert!(
            note_clock_offset(&mut logged, 5_000),
            "NTP stepped the clock"
        );
        assert_eq!(logged, Some(5_000));
    }

    /// A simulated host whose discovery can be made to fail.
    struct Flaky {
        sim: SimulatedGpus,
        broken: AtomicBool,
    }

    impl GpuSource for Flaky {
        fn discover(&self) -> Result<Discovery, AgentError> {
            if self.broken.load(Ordering::SeqCst) {
                return Err(AgentError::NoGpus);
            }
            self.sim.discover()
        }
    }

    #[tokio::test]
    async fn health_counts_registered_gpus_and_fails_safe_after_repeated_probe_errors() {
        let flaky = Arc::new(Flaky {
            sim: SimulatedGpus::parse("H100-80G:8").unwrap(),
            broken: AtomicBool::new(false),
        });
        let mut probe = HealthProbe::new(flaky.clone(), 4);
        // Registered with 4 of the host's 8: only indexes 0..4 count.
        assert_eq!(probe.healthy(4).await, 4);
        flaky.sim.set_unhealthy(1, "XID 79");
        flaky.sim.set_unhealthy(6, "XID 79");
        assert_eq!(probe.healthy(4).await, 3);
        assert_eq!(probe.healthy(8).await, 6);
        // A failing probe keeps the last count, until the third in a row.
        flaky.broken.store(true, Ordering::SeqCst);
        let counts = [
            probe.healthy(8).await,
            probe.healthy(8).await,
            probe.healthy(8).await,
        ];
        assert_eq!(counts, [6, 6, 0]);
        flaky.broken.store(false, Ordering::SeqCst);
        assert_eq!(probe.healthy(8).await, 6);
    }
}
