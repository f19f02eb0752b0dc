//! The work the run loop spawns per lease: the GPU check before provisioning
//! ([`check_gpus`], issue 26), the provision hook, a verification lease's checks ([`verify`]),
//! the teardown hook (with its retries) and the reports to the exchange. Each job is a future
//! that owns what it needs and returns its result to the run loop, which alone changes and
//! saves the state ([`crate::run`]). The run loop aborts a job (dropping it) when the agent stops or the lease
//! ended under it; dropping a running hook kills its process group ([`crate::hooks::run_hook`]).
//!
//! Bounds (STYLE model 9): a hook by its time limit (and the lease's provisioning deadline,
//! [`hook_budget`]) plus grace; a report by [`crate::run::REQUEST_TIMEOUT_MS`]; at most
//! [`MAX_CONCURRENT_HOOKS`] hooks at once (a job waits for a permit, so its wait is bounded by
//! the hooks ahead of it); at most [`MAX_TEARDOWN_ATTEMPTS`] teardown runs per job.

use crate::clock::Clock;
use crate::config::HookConfig;
use crate::gpus::{self, DISCOVERY_TIMEOUT_MS, Discovery, GpuSource};
use crate::hooks::{
    self, AccessDetails, HookOutcome, LeaseContext, Phase, ProvisionFailure, provision_result,
    report_text, run_hook, teardown_result,
};
use crate::run::REQUEST_TIMEOUT_MS;
use crate::verify::{self, Measure};
use gpux_client::{Client, ClientError};
use gpux_wire::{AccessRequest, FailureCauseDto, LeaseView, VerificationReport};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// Most hooks running at once on a host (a node has at most 16 GPUs, so at most 16 leases; a
/// burst of provisions pulling images at once would crowd the host's disk and network).
pub const MAX_CONCURRENT_HOOKS: usize = 8;
/// Time kept between the end of a provision hook (its time limit plus grace) and the lease's
/// provisioning deadline, for the ready report to reach the exchange and for clock skew, ms.
pub const PROVISION_REPORT_MARGIN_MS: u64 = 2_000;
/// Teardown runs per wipe before the agent gives up on it (the exchange then holds the node
/// at the teardown deadline: docs/market-rules.md §11.6). A restart of the agent tries again.
pub const MAX_TEARDOWN_ATTEMPTS: u32 = 3;
/// Wait between two teardown runs of one wipe, ms.
pub const TEARDOWN_RETRY_MS: u64 = 5_000;
/// Access details a simulated host (`simulate` without a provision hook) reports.
pub const SIMULATED_SSH_HOST: &str = "127.0.0.1";
/// The wipe method a simulated host (`simulate` without a teardown hook) reports.
pub const SIMULATED_WIPE_METHOD: &str = "simulated host: no teardown hook configured";

/// A report to the exchange about one lease.
#[derive(Clone, Debug, PartialEq)]
pub enum Report {
    /// A verification lease's figures (issue 26).
    Verification(VerificationReport),
    /// Ready, with access details.
    Ready(AccessRequest),
    /// Failed, with a reason and whose side the failure is on (`launch_spec`: the buyer's
    /// launch spec cannot run, [`hooks::LAUNCH_SPEC_EXIT_CODE`]).
    Failed(String, FailureCauseDto),
    /// Torn down, with the wipe method.
    TornDown(String),
}

/// A lease's provisioning deadline on this host's clock: now plus the time the exchange said
/// was left (`deadline_in_ms`, measured by the exchange's clock when it made the view), so a
/// host clock that is off moves nothing (issue 25: an agent 10 minutes ahead failed every
/// lease "no time left to provision"). An exchange that does not send it: its deadline as is.
pub fn local_deadline(l: &LeaseView, now_ms: i64) -> Option<i64> {
    match l.deadline_in_ms {
        Some(left) => Some(now_ms.saturating_add(left.max(0))),
        None => l.provision_deadline_ms,
    }
}

/// How long a provision hook may run: the configured time limit, cut so that the hook's end
/// (limit plus grace) comes [`PROVISION_REPORT_MARGIN_MS`] before the lease's deadline. `None`
/// when there is no time left; the flag says whether the deadline was the binding limit.
pub fn hook_budget(
    hook: &HookConfig,
    deadline_ms: Option<i64>,
    now_ms: i64,
) -> Option<(u64, bool)> {
    let Some(deadline) = deadline_ms else {
        return Some((hook.timeout_ms, false));
    };
    let reserve = i64::try_from(hook.grace_ms + PROVISION_REPORT_MARGIN_MS).unwrap_or(i64::MAX);
    let left = deadline.saturating_sub(now_ms).saturating_sub(reserve);
    let left = u64::try_from(left).ok().filter(|&ms| ms > 0)?;
    Some(if left < hook.timeout_ms {
        (left, true)
    } else {
        (hook.timeout_ms, false)
    })
}

/// The hook's view of a lease on this node: ids, GPUs (UUIDs from the host's discovery) and
/// the launch spec when the exchange still has it (a wiping lease may not).
pub fn lease_context(l: &LeaseView, node_id: &str, discovery: &Discovery) -> LeaseContext {
    let launch = l.launch.clone().unwrap_or_default();
    LeaseContext {
        lease_id: l.id.clone(),
        node_id: node_id.to_string(),
        gpu_indexes: l.gpu_indexes.clone(),
        gpu_uuids: discovery.uuids_of(&l.gpu_indexes).unwrap_or_default(),
        image: launch.image,
        command: launch.command,
        ssh_keys: launch.ssh_keys,
        ports: launch
            .ports
            .iter()
            .filter_map(|&p| u16::try_from(p).ok())
            .collect(),
        disk_gb: launch.disk_gb,
        env: launch.env,
        lease_end_ms: u64::try_from(l.end_ms).ok().filter(|&t| t > 0),
        gang: gang_context(l),
    }
}

/// A gang member lease's gang for its hooks (`GPUX_GANG_*`): its id, rank, size and the node
/// names by rank (the exchange shows them to the supplier's agent).
pub fn gang_context(l: &LeaseView) -> Option<hooks::GangContext> {
    let g = l.gang.as_ref()?;
    Some(hooks::GangContext {
        id: g.id.clone(),
        rank: g.rank,
        size: g.size,
        nodes: g
            .nodes
            .as_ref()
            .map(|ns| ns.iter().map(|n| n.clone().unwrap_or_default()).collect())
            .unwrap_or_default(),
    })
}

/// A provision hook's access details as the ready report's body.
pub fn access_request(a: &AccessDetails) -> AccessRequest {
    AccessRequest {
        ssh_host: a.ssh_host.clone(),
        ssh_port: a.ssh_port.map(u32::from),
        ssh_user: a.ssh_user.clone(),
        urls: a
            .urls
            .iter()
            .map(|(port, url)| (port.to_string(), url.clone()))
            .collect(),
    }
}

/// Runs the provision hook for a lease: its access details, or the failure to report (cause
/// `launch_spec` when the hook exited [`hooks::LAUNCH_SPEC_EXIT_CODE`], else `node`).
/// `gpus_on_host` is false when one of the lease's GPU indexes is not on this host.
pub async fn provision(
    ctx: LeaseContext,
    gpus_on_host: bool,
    hook: HookConfig,
    deadline_ms: Option<i64>,
    clock: Arc<dyn Clock>,
    permits: Arc<Semaphore>,
) -> Result<AccessRequest, ProvisionFailure> {
    if !gpus_on_host {
        return Err(ProvisionFailure::node(format!(
            "GPU indexes {:?} of the lease are not all on this host: check the node's GPU count",
            ctx.gpu_indexes
        )));
    }
    let _permit = permits
        .acquire_owned()
        .await
        .map_err(|_| ProvisionFailure::node("the agent is stopping".to_string()))?;
    if hook.argv.is_empty() {
        return Ok(AccessRequest {
            ssh_host: Some(SIMULATED_SSH_HOST.into()),
            ssh_port: Some(22),
            ssh_user: Some("gpux".into()),
            ..AccessRequest::default()
        });
    }
    let Some((timeout_ms, deadline_bound)) = hook_budget(&hook, deadline_ms, clock.now_ms()) else {
        return Err(ProvisionFailure::node(format!(
            "no time left to provision before the lease's provisioning deadline (the hook needs its grace period of {} ms and {PROVISION_REPORT_MARGIN_MS} ms to report)",
            hook.grace_ms
        )));
    };
    let limited = HookConfig { timeout_ms, ..hook };
    let outcome = run_hook(&limited, &ctx.env_vars(Phase::Provision)).await;
    match (&outcome, deadline_bound) {
        (HookOutcome::TimedOut { stderr_tail, .. }, true) => {
            Err(ProvisionFailure::node(report_text(
                &format!(
                    "provision hook did not finish within {timeout_ms} ms, the time left before the lease's provisioning deadline"
                ),
                stderr_tail,
            )))
        }
        _ => provision_result(&outcome).map(|a| access_request(&a)),
    }
}

/// Issue 26 (docs/market-rules.md §12.1): the GPUs under `l` are still the ones the exchange
/// recorded at fill (`gpu_uuids`, in the order of `gpu_indexes`). Discovers the host now
/// (bounded by [`DISCOVERY_TIMEOUT_MS`]) and answers the UUIDs now at the lease's indexes, to
/// hand to the hook (`None` when discovery failed and there was nothing to compare: the
/// start-up discovery's then stand).
///
/// # Errors
/// A failure of cause `gpu_changed` naming each index with the UUID expected and the one found
/// (or that no GPU answers there); a failure of cause `node` when the GPUs cannot be
/// discovered to compare.
pub async fn check_gpus(
    source: Arc<dyn GpuSource>,
    l: &LeaseView,
) -> Result<Option<Vec<String>>, ProvisionFailure> {
    let found = match gpus::discover_bounded(source, DISCOVERY_TIMEOUT_MS).await {
        Ok(d) => d,
        Err(_) if l.gpu_uuids.is_empty() => return Ok(None),
        Err(e) => {
            return Err(ProvisionFailure::node(report_text(
                "the lease's GPUs could not be checked before provisioning",
                &e.to_string(),
            )));
        }
    };
    let now: Vec<Option<&str>> = l
        .gpu_indexes
        .iter()
        .map(|&i| {
            found
                .gpus
                .iter()
                .find(|g| g.index == i)
                .map(|g| g.uuid.as_str())
                .filter(|u| !u.is_empty())
        })
        .collect();
    let changed: Vec<String> = l
        .gpu_indexes
        .iter()
        .zip(&l.gpu_uuids)
        .zip(&now)
        .filter(|((_, expected), found)| **found != Some(expected.as_str()))
        .map(|((index, expected), found)| match found {
            Some(f) => format!("GPU {index}: expected UUID {expected}, found {f}"),
            None => format!("GPU {index}: expected UUID {expected}, found no GPU"),
        })
        .collect();
    if !changed.is_empty() {
        return Err(ProvisionFailure {
            cause: FailureCauseDto::GpuChanged,
            reason: report_text(
                "a GPU under the lease is not the one recorded at fill (not provisioned)",
                &changed.join("; "),
            ),
        });
    }
    Ok(now
        .into_iter()
        .map(|u| u.map(str::to_string))
        .collect::<Option<Vec<_>>>())
}

/// Runs a verification lease's checks ([`verify::run_checks`]) after [`check_gpus`]: the
/// report to send, or the failure to report (`gpu_changed`, or this host's). The verify hook's
/// time limit is cut, like the provision hook's ([`hook_budget`]), to end before the lease's
/// provisioning deadline; with no time left the checks run without it.
pub async fn verify(
    source: Arc<dyn GpuSource>,
    lease: LeaseView,
    mut ctx: LeaseContext,
    measure: Measure,
    deadline_ms: Option<i64>,
    clock: Arc<dyn Clock>,
    permits: Arc<Semaphore>,
) -> Result<VerificationReport, ProvisionFailure> {
    if let Some(uuids) = check_gpus(source.clone(), &lease).await? {
        ctx.gpu_uuids = uuids;
    }
    let _permit = permits
        .acquire_owned()
        .await
        .map_err(|_| ProvisionFailure::node("the agent is stopping".to_string()))?;
    let measure = match measure {
        Measure::Hook(hook) => match hook_budget(&hook, deadline_ms, clock.now_ms()) {
            Some((timeout_ms, _)) => Measure::Hook(HookConfig { timeout_ms, ..hook }),
            None => {
                tracing::warn!(lease = %lease.id, "no time left for the verify hook before the provisioning deadline: NVML checks only");
                Measure::Nothing
            }
        },
        other => other,
    };
    Ok(verify::run_checks(source, &ctx, &measure).await)
}

/// Runs the teardown hook for a lease, up to [`MAX_TEARDOWN_ATTEMPTS`] times
/// [`TEARDOWN_RETRY_MS`] apart: the wipe method, or the last failure reason.
pub async fn teardown(
    ctx: LeaseContext,
    hook: HookConfig,
    permits: Arc<Semaphore>,
) -> Result<String, String> {
    let mut last = String::new();
    for attempt in 1..=MAX_TEARDOWN_ATTEMPTS {
        let outcome = {
            let _permit = permits
                .clone()
                .acquire_owned()
                .await
                .map_err(|_| "the agent is stopping".to_string())?;
            if hook.argv.is_empty() {
                return Ok(SIMULATED_WIPE_METHOD.into());
            }
            run_hook(&hook, &ctx.env_vars(Phase::Teardown)).await
        };
        match teardown_result(&outcome) {
            Ok(method) => return Ok(method),
            Err(reason) => {
                tracing::warn!(lease = %ctx.lease_id, attempt, max = MAX_TEARDOWN_ATTEMPTS, %reason, "teardown failed");
                last = reason;
            }
        }
        if attempt < MAX_TEARDOWN_ATTEMPTS {
            tokio::time::sleep(Duration::from_millis(TEARDOWN_RETRY_MS)).await;
        }
    }
    Err(last)
}

/// Sends one report, bounded by [`REQUEST_TIMEOUT_MS`]. A failure of cause `node` goes
/// without a `cause` (the exchange's default, as before issue 25).
pub async fn send_report(
    client: Client,
    lease_id: String,
    report: Report,
) -> Result<(), ClientError> {
    let call = async {
        match &report {
            Report::Ready(access) => client.report_ready(&lease_id, access).await.map(drop),
            Report::Failed(reason, FailureCauseDto::Node) => {
                client.report_failed(&lease_id, reason).await.map(drop)
            }
            Report::Failed(reason, cause) => client
                .report_failed_because(&lease_id, reason, Some(*cause))
                .await
                .map(drop),
            Report::TornDown(method) => client.report_torn_down(&lease_id, method).await.map(drop),
            Report::Verification(report) => client
                .report_verification(&lease_id, report)
                .await
                .map(drop),
        }
    };
    tokio::time::timeout(Duration::from_millis(REQUEST_TIMEOUT_MS), call)
        .await
        .unwrap_or(Err(ClientError::Timeout))
}

/// The failed report for access details the exchange refused (400 `invalid_access`).
pub fn refused_access_reason(e: &ClientError) -> String {
    let message = e
        .body()
        .map_or_else(|| e.to_string(), |b| b.message.clone());
    hooks::report_text(
        "the provision hook's access details were refused by the exchange",
        &message,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn the_hook_budget_keeps_grace_and_margin_before_the_deadline() {
        let hook = HookConfig {
            argv: vec!["x".into()],
            timeout_ms: 60_000,
            grace_ms: 1_000,
        };
        // No deadline known: the configured limit.
        assert_eq!(hook_budget(&hook, None, 0), Some((60_000, false)));
        // Plenty of time: the configured limit.
        assert_eq!(hook_budget(&hook, Some(180_000), 0), Some((60_000, false)));
        // 10 s left: 10 000 − 1 000 grace − 2 000 margin.
        assert_eq!(
            hook_budget(&hook, Some(110_000), 100_000),
            Some((7_000, true))
        );
        // Exactly grace + margin left, or past the deadline: none.
        assert_eq!(hook_budget(&hook, Some(103_000), 100_000), None);
        assert_eq!(hook_budget(&hook, Some(90_000), 100_000), None);
        assert_eq!(hook_budget(&hook, Some(i64::MIN), i64::MAX), None);
    }

    /// Issue 25's failing input: the host's clock 10 minutes ahead of the exchange. The
    /// exchange's deadline (3 minutes away by its clock) is in the host's past, so the budget
    /// was none and every lease failed; from the time left the exchange sent, the hook gets
    /// its full limit.
    #[test]
    fn a_host_clock_ten_minutes_ahead_still_gets_the_whole_budget() {
        let hook = HookConfig {
            argv: vec!["x".into()],
            timeout_ms: 60_000,
            grace_ms: 1_000,
        };
        let exchange_now = 1_800_000_000_000;
        let host_now = exchange_now + 600_000;
        let lease: LeaseView = serde_json::from_value(serde_json::json!({
            "id": "9", "bid_id": "5", "node_id": "1", "offer_id": "2", "sku": "H100-80G",
            "region": "cn-east-2", "kind": "spot", "gpus": 1, "gpu_indexes": [0],
            "price": "20.0000", "start_ms": exchange_now, "end_ms": exchange_now + 3_600_000,
            "state": "provisioning", "provision_deadline_ms": exchange_now + 180_000,
            "deadline_in_ms": 180_000, "ready_ms": null, "access": null, "launch": null,
            "notice_deadline_ms": null, "charged": null, "billed_seconds": 0,
            "sla_credit": null, "end_reason": null, "ended_at_ms": null,
            "failure_reason": null, "teardown": null, "migrated_from": null,
            "migrated_to": [], "failover_failed_gpus": null, "failover_failed_reason": null
        }))
        .expect("lease view");
        // Before: the exchange's deadline against the host's clock.
        assert_eq!(
            hook_budget(&hook, lease.provision_deadline_ms, host_now),
            None
        );
        let deadline = local_deadline(&lease, host_now);
        assert_eq!(deadline, Some(host_now + 180_000));
        assert_eq!(
            hook_budget(&hook, deadline, host_now),
            Some((60_000, false))
        );
        // An exchange that sends no time left: its deadline as it is.
        let mut old = lease;
        old.deadline_in_ms = None;
        assert_eq!(local_deadline(&old, host_now), old.provision_deadline_ms);
    }

    #[test]
    fn access_details_become_the_ready_reports_body() {
        let a = AccessDetails {
            ssh_host: Some("203.0.113.7".into()),
            ssh_port: Some(2222),
            ssh_user: Some("root".into()),
            urls: BTreeMap::from([(8888, "https://x.example/".to_string())]),
        };
        let r = access_request(&a);
        assert_eq!(r.ssh_port, Some(2222));
        assert_eq!(r.urls["8888"], "https://x.example/");
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            serde_json::to_value(&a).unwrap()
        );
    }
}
