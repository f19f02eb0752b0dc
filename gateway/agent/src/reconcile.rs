//! Reconciliation, the one place that decides what the agent does about its node's leases
//! (docs/api.md §2.2.1, docs/market-rules.md §11): a pure function of the exchange's list
//! (`GET /v1/nodes/{id}/leases`), the saved steps ([`crate::state`]), the jobs running now
//! and the wipes given up. The run loop calls it at start, after every (re)connect of the
//! websocket, on delivery events and when a heartbeat's `leases_version` moved, and carries
//! out the actions. Events are only hints: the list is the truth, so a lost event, a restart
//! or a network cut cannot make the agent miss or repeat work.
//!
//! Rules, per lease:
//! - **wiping** (ended, GPUs to wipe): a teardown job runs or starts. A provision or report
//!   still running for it is stopped first (the lease ended under it). A saved wipe method
//!   not yet confirmed is reported again without running the hook. A wipe given up (its
//!   attempts spent) is left to the exchange's teardown deadline.
//! - **provisioning with a deadline** that no job works on: a saved outcome not yet confirmed
//!   is reported again; a lease the agent reported failed, or that someone else finished,
//!   waits for its wipe; otherwise the provision hook runs (again, after a restart that cut
//!   it off). Provisioning **without** a deadline waits for the previous lease's wipe (§11.7).
//!   A **verification lease** (purpose `verification`, issue 26) runs the verification
//!   checks instead of the provision hook ([`crate::verify`]), and its saved report not yet
//!   confirmed is sent again; after the report it waits for its wipe like a failed lease.
//! - **active**: remembered, never provisioned (after a restart it already runs).
//! - **pending**: nothing yet.
//! - a saved lease the exchange no longer lists, with no job running: forgotten.

use crate::state::{SavedLease, Step};
use gpux_wire::{
    AccessRequest, FailureCauseDto, LeasePurposeDto, LeaseStateDto, LeaseView, NodeLeases,
    VerificationReport,
};
use std::collections::{BTreeMap, BTreeSet};

/// What a job running for a lease does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobKind {
    /// The provision hook.
    Provision,
    /// The ready report.
    ReportReady,
    /// The failed report.
    ReportFailed,
    /// The teardown hook (with its retries).
    Teardown,
    /// The torn-down report.
    ReportTornDown,
    /// A verification lease's checks (issue 26).
    Verify,
    /// The verification report.
    ReportVerification,
}

impl JobKind {
    /// Part of the wipe (kept when the lease is wiping).
    pub fn is_wipe(self) -> bool {
        matches!(self, JobKind::Teardown | JobKind::ReportTornDown)
    }
}

/// One thing to do.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Run the provision hook for this lease.
    Provision(LeaseView),
    /// Run the verification checks for this verification lease (issue 26).
    Verify(LeaseView),
    /// Send the saved verification report again.
    ReportVerification {
        /// Lease id.
        lease_id: String,
        /// Saved figures.
        report: VerificationReport,
    },
    /// Send the saved ready report again.
    ReportReady {
        /// Lease id.
        lease_id: String,
        /// Saved access details.
        access: AccessRequest,
    },
    /// Send the saved failed report again.
    ReportFailed {
        /// Lease id.
        lease_id: String,
        /// Saved reason.
        reason: String,
        /// Saved cause (`launch_spec`: the buyer's launch spec cannot run).
        cause: FailureCauseDto,
    },
    /// The exchange has it active: save it as active (no hook).
    Remember {
        /// Lease id.
        lease_id: String,
        /// Its GPUs.
        gpu_indexes: Vec<u32>,
    },
    /// Stop any job running for this lease, then run the teardown hook.
    Teardown(LeaseView),
    /// Send the saved torn-down report again.
    ReportTornDown {
        /// Lease id.
        lease_id: String,
        /// Saved wipe method.
        method: String,
    },
    /// Drop the lease from the saved state.
    Forget(String),
}

/// What to do, wipes first (a successor may wait for them), then live leases in id order,
/// then forgotten leases.
pub fn plan(
    list: &NodeLeases,
    saved: &BTreeMap<String, SavedLease>,
    running: &BTreeMap<String, JobKind>,
    gave_up: &BTreeSet<String>,
) -> Vec<Action> {
    let mut actions = Vec::new();
    for l in &list.wiping {
        let step = saved.get(&l.id).map(|s| &s.step);
        match (running.get(&l.id), step) {
            (Some(kind), _) if kind.is_wipe() => {}
            (None, Some(Step::ReportTornDown { method })) => {
                actions.push(Action::ReportTornDown {
                    lease_id: l.id.clone(),
                    method: method.clone(),
                });
            }
            (None, _) if gave_up.contains(&l.id) => {}
            _ => actions.push(Action::Teardown(l.clone())),
        }
    }
    for l in &list.leases {
        if running.contains_key(&l.id) {
            continue;
        }
        if let Some(a) = live_action(l, saved.get(&l.id).map(|s| &s.step)) {
            actions.push(a);
        }
    }
    let listed: BTreeSet<&str> = list
        .leases
        .iter()
        .chain(&list.wiping)
        .map(|l| l.id.as_str())
        .collect();
    actions.extend(
        saved
            .keys()
            .filter(|id| !listed.contains(id.as_str()) && !running.contains_key(*id))
            .map(|id| Action::Forget(id.clone())),
    );
    actions
}

/// What to do about a live lease no job works on.
fn live_action(l: &LeaseView, step: Option<&Step>) -> Option<Action> {
    let lease_id = l.id.clone();
    match (l.state, step) {
        (LeaseStateDto::Active, Some(Step::Active)) => None,
        (LeaseStateDto::Active, _) => Some(Action::Remember {
            lease_id,
            gpu_indexes: l.gpu_indexes.clone(),
        }),
        (LeaseStateDto::Provisioning, _) if l.provision_deadline_ms.is_none() => None,
        (LeaseStateDto::Provisioning, Some(Step::ReportReady { access })) => {
            Some(Action::ReportReady {
                lease_id,
                access: access.clone(),
            })
        }
        (LeaseStateDto::Provisioning, Some(Step::ReportFailed { reason, cause })) => {
            Some(Action::ReportFailed {
                lease_id,
                reason: reason.clone(),
                cause: *cause,
            })
        }
        (LeaseStateDto::Provisioning, Some(Step::ReportVerification { report })) => {
            Some(Action::ReportVerification {
                lease_id,
                report: report.clone(),
            })
        }
        (LeaseStateDto::Provisioning, Some(Step::Ended)) => None,
        (LeaseStateDto::Provisioning, _) if l.purpose == Some(LeasePurposeDto::Verification) => {
            Some(Action::Verify(l.clone()))
        }
        (LeaseStateDto::Provisioning, _) => Some(Action::Provision(l.clone())),
        (LeaseStateDto::Pending | LeaseStateDto::Ended, _) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpux_wire::KindDto;

    fn lease(id: &str, state: LeaseStateDto, deadline: Option<i64>) -> LeaseView {
        LeaseView {
            id: id.into(),
            bid_id: "9".into(),
            node_id: "1".into(),
            offer_id: "2".into(),
            sku: "H100-80G".into(),
            region: "cn-east-2".into(),
            kind: KindDto::Spot,
            gpus: 1,
            gpu_indexes: vec![0],
            price: "20.0000".into(),
            start_ms: 0,
            end_ms: 3_600_000,
            state,
            provision_deadline_ms: deadline,
            deadline_in_ms: None,
            failure_cause: None,
            ready_ms: None,
            access: None,
            launch: None,
            notice_deadline_ms: None,
            charged: None,
            billed_seconds: 0,
            sla_credit: None,
            end_reason: None,
            ended_at_ms: None,
            failure_reason: None,
            teardown: None,
            migrated_from: None,
            migrated_to: Vec::new(),
            failover_failed_gpus: None,
            failover_failed_reason: None,
            failover_failed_detail: None,
            purpose: None,
            gpu_uuids: Vec::new(),
            sla_terms: None,
            sla_credit_basis: None,
            gang: None,
        }
    }

    fn list(leases: Vec<LeaseView>, wiping: Vec<LeaseView>) -> NodeLeases {
        NodeLeases {
            node_id: "1".into(),
            leases_version: 1,
            held: None,
            leases,
            wiping,
        }
    }

    fn saved(pairs: &[(&str, Step)]) -> BTreeMap<String, SavedLease> {
        pairs
            .iter()
            .map(|(id, step)| {
                (
                    id.to_string(),
                    SavedLease {
                        gpu_indexes: vec![0],
                        step: step.clone(),
                    },
                )
            })
            .collect()
    }

    fn access() -> AccessRequest {
        AccessRequest {
            ssh_host: Some("203.0.113.7".into()),
            ..AccessRequest::default()
        }
    }

    use LeaseStateDto::{Active, Ended, Pending, Provisioning};

    #[test]
    fn live_leases_provision_once_and_active_ones_are_only_remembered() {
        let p = lease("10", Provisioning, Some(5_000));
        let waiting = lease("11", Provisioning, None);
        let a = lease("12", Active, Some(5_000));
        let pending = lease("13", Pending, None);
        let l = list(vec![p.clone(), waiting, a, pending], vec![]);
        let none = BTreeMap::new();
        let idle = BTreeSet::new();
        // Fresh agent (or a restart with an empty state dir): provision what provisions,
        // remember what already runs, nothing for a lease waiting for a wipe or pending.
        assert_eq!(
            plan(&l, &BTreeMap::new(), &none, &idle),
            vec![
                Action::Provision(p.clone()),
                Action::Remember {
                    lease_id: "12".into(),
                    gpu_indexes: vec![0]
                }
            ]
        );
        // A provision already running is left alone; an active lease saved as such: nothing.
        let running = BTreeMap::from([("10".to_string(), JobKind::Provision)]);
        let s = saved(&[("10", Step::Provisioning), ("12", Step::Active)]);
        assert_eq!(plan(&l, &s, &running, &idle), vec![]);
        // After a restart that cut the hook off, it runs again.
        assert_eq!(plan(&l, &s, &none, &idle), vec![Action::Provision(p)]);
    }

    #[test]
    fn saved_outcomes_are_reported_again_without_the_hook() {
        let l = list(
            vec![
                lease("10", Provisioning, Some(5_000)),
                lease("11", Provisioning, Some(5_000)),
                lease("12", Provisioning, Some(5_000)),
                lease("13", Active, Some(5_000)),
            ],
            vec![],
        );
        let s = saved(&[
            ("10", Step::ReportReady { access: access() }),
            (
                "11",
                Step::ReportFailed {
                    reason: "x".into(),
                    cause: FailureCauseDto::LaunchSpec,
                },
            ),
            ("12", Step::Ended),
            // Ready went through but its answer was lost: the exchange says active.
            ("13", Step::ReportReady { access: access() }),
        ]);
        assert_eq!(
            plan(&l, &s, &BTreeMap::new(), &BTreeSet::new()),
            vec![
                Action::ReportReady {
                    lease_id: "10".into(),
                    access: access()
                },
                Action::ReportFailed {
                    lease_id: "11".into(),
                    reason: "x".into(),
                    cause: FailureCauseDto::LaunchSpec,
                },
                Action::Remember {
                    lease_id: "13".into(),
                    gpu_indexes: vec![0]
                },
            ]
        );
    }

    #[test]
    fn wipes_come_first_stop_other_jobs_and_respect_given_up_ones() {
        let w1 = lease("20", Ended, None);
        let w2 = lease("21", Ended, None);
        let w3 = lease("22", Ended, None);
        let w4 = lease("23", Ended, None);
        let w5 = lease("24", Ended, None);
        let l = list(
            vec![lease("10", Provisioning, Some(5_000))],
            vec![w1.clone(), w2, w3.clone(), w4, w5],
        );
        let running = BTreeMap::from([
            ("21".to_string(), JobKind::Teardown),
            ("22".to_string(), JobKind::Provision),
        ]);
        let s = saved(&[
            ("20", Step::Active),
            ("23", Step::ReportTornDown { method: "m".into() }),
            ("24", Step::TearingDown),
            ("99", Step::Active),
        ]);
        let gave_up = BTreeSet::from(["24".to_string()]);
        assert_eq!(
            plan(&l, &s, &running, &gave_up),
            vec![
                Action::Teardown(w1),
                Action::Teardown(w3), // its provision is stopped first
                Action::ReportTornDown {
                    lease_id: "23".into(),
                    method: "m".into()
                },
                Action::Provision(lease("10", Provisioning, Some(5_000))),
                Action::Forget("99".into()),
            ]
        );
    }

    #[test]
    fn unlisted_leases_are_forgotten_only_when_no_job_runs() {
        let l = list(vec![], vec![]);
        let s = saved(&[("30", Step::Active), ("31", Step::TearingDown)]);
        let running = BTreeMap::from([("31".to_string(), JobKind::Teardown)]);
        assert_eq!(
            plan(&l, &s, &running, &BTreeSet::new()),
            vec![Action::Forget("30".into())]
        );
    }

    /// Issue 26: a verification lease runs the checks, not the provision hook; its saved
    /// report is sent again without running them again; once reported it waits for its wipe,
    /// which runs the teardown hook like any other.
    #[test]
    fn a_verification_lease_runs_the_checks_and_reports_them_once() {
        let mut v = lease("40", Provisioning, Some(5_000));
        v.purpose = Some(LeasePurposeDto::Verification);
        let l = list(vec![v.clone()], vec![]);
        let none = BTreeMap::new();
        let idle = BTreeSet::new();
        assert_eq!(
            plan(&l, &BTreeMap::new(), &none, &idle),
            vec![Action::Verify(v.clone())]
        );
        let running = BTreeMap::from([("40".to_string(), JobKind::Verify)]);
        let s = saved(&[("40", Step::Provisioning)]);
        assert_eq!(plan(&l, &s, &running, &idle), vec![]);
        assert_eq!(plan(&l, &s, &none, &idle), vec![Action::Verify(v.clone())]);
        let report = VerificationReport {
            gpus: Vec::new(),
            allreduce_busbw_gbps: None,
            dcgm_diag: None,
            duration_s: 1,
            raw_tail: None,
        };
        let s = saved(&[(
            "40",
            Step::ReportVerification {
                report: report.clone(),
            },
        )]);
        assert_eq!(
            plan(&l, &s, &none, &idle),
            vec![Action::ReportVerification {
                lease_id: "40".into(),
                report
            }]
        );
        assert_eq!(
            plan(&l, &saved(&[("40", Step::Ended)]), &none, &idle),
            vec![]
        );
        let mut ended = v;
        ended.state = Ended;
        let wiping = list(vec![], vec![ended.clone()]);
        assert_eq!(
            plan(&wiping, &saved(&[("40", Step::Ended)]), &none, &idle),
            vec![Action::Teardown(ended)]
        );
    }
}
