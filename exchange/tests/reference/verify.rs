//! The naive reference of verification runs (docs/market-rules.md §12.2) and of the trust
//! requirements of bids (§12).
//!
//! Written apart from `exchange/src/engine/verify.rs` and naive on purpose: each node's record
//! is a plain [`NodeVerify`] in a `BTreeMap`; due times, deadlines and runs are found by scanning
//! every record; the judgment is recomputed here from the report's figures and the reference
//! table (the only thing taken from `exchange::verify` besides its public types and floors).
//!
//! Rules, as the engine states them:
//! - a run is due now when a node is first offered (never seen before), when a matching
//!   attestation changes a GPU's UUID, and when a node held `verification_failed` is resumed;
//! - a due run starts when the node is online, not draining, not held, offered, has a healthy
//!   GPU, no live lease and no wipe, and its SKU has reference figures; it takes all healthy
//!   GPUs, gets a lease id and a deadline; the node is not listed while it runs;
//! - a due run that cannot start when time reaches its due time is tried `busy_retry_s` later;
//! - a run ends by a report (judged) or at its deadline (failed, `timeout`); the next one is due
//!   at a draw in `[min_interval, max_interval]` after; a failed run holds the node;
//! - `verified` trust admits only a node whose latest run is verified and not stale.

use super::{Model, Reject};
use exchange::command::TrustConstraints;
use exchange::event::VerifyTrigger;
use exchange::state::{NodeStatus, NodeVerification, NodeVerify, VerificationRun};
use exchange::verify::{
    DEGRADED_FLOOR_BP, DcgmResult, Figure, Judgment, Reference, VERIFIED_FLOOR_BP,
    VerificationFigures, VerifyConfig, VerifyOutcome,
};
use exchange::{AccountId, Event, HoldReason, LeaseId, NodeId, RejectReason, VerifyStatus};

/// Known NVML fault flags (`exchange::verify::fault`): PCIe, ECC, power cap, throttling.
const KNOWN_FAULTS: u8 = 1 | 2 | 4 | 8;

/// Most GPUs a node (and a report) has.
const MAX_GPUS: u32 = 16;

/// SplitMix64 of `seed`.
fn mix(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// When the next run is due after one ended at `at` in command `seq` on `node`: `at` plus a
/// whole number of seconds in `[min, max]` drawn from the node and the sequence number.
fn next_due(c: &VerifyConfig, at: i64, node: NodeId, seq: u64) -> i64 {
    let lo = c.min_interval_s.min(c.max_interval_s) as u64;
    let hi = c.min_interval_s.max(c.max_interval_s) as u64;
    let draw = mix(node.0 ^ seq.rotate_left(32)) % (hi - lo + 1);
    at + ((lo + draw) as i64) * 1000
}

/// `measured` as a share of `reference`, basis points, at most 100 %.
fn share(measured: u32, reference: u32) -> u32 {
    if reference == 0 {
        10_000
    } else {
        (u64::from(measured) * 10_000 / u64::from(reference)).min(10_000) as u32
    }
}

/// The judgment of `figures` of a run on `mask` of a node of `node_gpus` GPUs (§12.2).
fn judge(
    r: &Reference,
    mask: u32,
    node_gpus: u32,
    nvlink: bool,
    f: &VerificationFigures,
) -> Judgment {
    let failed = |by: Figure, gpu: Option<u32>| Judgment {
        outcome: VerifyOutcome::Failed,
        worst_bp: 0,
        decided_by: Some(by),
        gpu,
    };
    // every judged figure in order: (share, figure, gpu); the first lowest decides
    let mut shares: Vec<(u32, Figure, Option<u32>)> = Vec::new();
    let mut faulty: Vec<u32> = Vec::new();
    for i in 0..32 {
        if mask & (1 << i) == 0 {
            continue;
        }
        let g = f.gpus.iter().find(|g| g.index == i);
        let (Some(t), Some(m)) = (
            g.and_then(|g| g.bf16_tflops_x10),
            g.and_then(|g| g.mem_bw_gbps),
        ) else {
            return failed(Figure::Missing, Some(i));
        };
        shares.push((share(t, r.bf16_tflops_x10), Figure::Bf16Tflops, Some(i)));
        shares.push((share(m, r.mem_bw_gbps), Figure::MemBandwidth, Some(i)));
        if g.is_some_and(|g| g.faults & KNOWN_FAULTS != 0) {
            faulty.push(i);
        }
    }
    if f.dcgm == Some(DcgmResult::Fail) {
        return failed(Figure::Dcgm, None);
    }
    if node_gpus == 8
        && mask.count_ones() == 8
        && nvlink
        && let (Some(reference), Some(m)) = (r.allreduce8_busbw_x10, f.allreduce_busbw_x10)
    {
        shares.push((share(m, reference), Figure::AllReduce, None));
    }
    let mut worst: (u32, Option<Figure>, Option<u32>) = (10_000, None, None);
    for (bp, by, gpu) in shares {
        if bp < worst.0 {
            worst = (bp, Some(by), gpu);
        }
    }
    let (worst_bp, decided_by, gpu) = worst;
    let judged = |outcome, decided_by, gpu| Judgment {
        outcome,
        worst_bp,
        decided_by,
        gpu,
    };
    if worst_bp < DEGRADED_FLOOR_BP {
        judged(VerifyOutcome::Failed, decided_by, gpu)
    } else if worst_bp < VERIFIED_FLOOR_BP {
        judged(VerifyOutcome::Degraded, decided_by, gpu)
    } else if let Some(g) = faulty.first() {
        judged(VerifyOutcome::Degraded, Some(Figure::NvmlFault), Some(*g))
    } else if f.dcgm == Some(DcgmResult::Warn) {
        judged(VerifyOutcome::Degraded, Some(Figure::Dcgm), None)
    } else {
        judged(VerifyOutcome::Verified, decided_by, gpu)
    }
}

impl Model {
    /// Turns verification on (`Some`) or off, before the first command.
    pub fn set_verification(&mut self, config: Option<VerifyConfig>) {
        self.verify = config;
    }

    /// The verification settings, if verification is on.
    pub fn verification_config(&self) -> Option<VerifyConfig> {
        self.verify
    }

    /// A node's verification record.
    pub fn verification(&self, node: NodeId) -> Option<&NodeVerify> {
        self.verifications.get(&node)
    }

    /// Every run under way, by node id.
    pub fn verification_runs(&self) -> Vec<(NodeId, VerificationRun)> {
        self.verifications
            .iter()
            .filter_map(|(n, v)| v.run.map(|r| (*n, r)))
            .collect()
    }

    /// The run ids of the nodes' latest results.
    pub fn last_verification_leases(&self) -> Vec<LeaseId> {
        self.verifications
            .values()
            .filter_map(|v| v.last.map(|l| l.lease))
            .collect()
    }

    /// The trust requirements a lease was filled with (default: none; ended leases too).
    pub fn lease_trust(&self, lease: LeaseId) -> TrustConstraints {
        self.lease_trust.get(&lease).copied().unwrap_or_default()
    }

    /// A resting bid's trust requirements (default: none).
    /// The SLA promise a live offer was posted with (§12.4).
    pub fn offer_sla_promise(&self, offer: exchange::OfferId) -> Option<exchange::SlaPromise> {
        self.offer_sla.get(&offer).copied()
    }

    pub fn bid_trust(&self, bid: exchange::BidId) -> TrustConstraints {
        self.bid_trust.get(&bid).copied().unwrap_or_default()
    }

    /// A node's verification status now.
    pub fn verify_status(&self, node: NodeId) -> VerifyStatus {
        let Some(v) = self.verifications.get(&node) else {
            return VerifyStatus::Unverified;
        };
        if v.run.is_some() {
            return VerifyStatus::Verifying;
        }
        let Some(last) = v.last else {
            return VerifyStatus::Unverified;
        };
        if last.judgment.outcome == VerifyOutcome::Failed {
            return VerifyStatus::Failed;
        }
        let stale = self
            .verify
            .is_some_and(|c| self.now - last.at_ms > i64::from(c.stale_after_s) * 1000);
        match last.judgment.outcome {
            _ if stale => VerifyStatus::Stale,
            VerifyOutcome::Verified => VerifyStatus::Verified,
            _ => VerifyStatus::Degraded,
        }
    }

    /// Whether a run is under way on the node (it is not listed meanwhile).
    pub(super) fn verifying(&self, node: NodeId) -> bool {
        self.verifications
            .get(&node)
            .is_some_and(|v| v.run.is_some())
    }

    /// Whether the node meets `trust` now: `verified` needs a current `verified` run
    /// (§12.2); `min_reliability_bp` needs the node's score at the start of the UTC day to
    /// be at least that, and a node `new` then has none (§12.3).
    /// §12.4: `min_sla` needs the offer's stated promise to meet both of its parts (an offer
    /// without one meets none).
    pub(super) fn trust_admits(
        &self,
        trust: &TrustConstraints,
        offer: exchange::OfferId,
        node: NodeId,
    ) -> bool {
        (!trust.verified || self.verify_status(node) == VerifyStatus::Verified)
            && trust
                .min_reliability_bp
                .is_none_or(|m| self.matching_reliability_bp(node).is_some_and(|s| s >= m))
            && trust.min_sla.is_none_or(|f| {
                self.offer_sla.get(&offer).is_some_and(|p| {
                    p.availability_bp >= f.availability_bp && p.credit_multiple >= f.credit_multiple
                })
            })
    }

    fn set_due(&mut self, node: NodeId, due: Option<i64>, trigger: VerifyTrigger) {
        let v = self.verifications.entry(node).or_insert(NodeVerify {
            last: None,
            run: None,
            due_ms: None,
            due_trigger: trigger,
        });
        v.due_ms = due;
        v.due_trigger = trigger;
    }

    /// A successful `PostOffer`: a node never seen by verification is due now.
    pub(super) fn verify_on_listing(&mut self, node: NodeId) {
        if self.verify.is_none()
            || self
                .verifications
                .get(&node)
                .is_some_and(|v| v.last.is_some() || v.run.is_some())
        {
            return;
        }
        self.set_due(node, Some(self.now), VerifyTrigger::FirstListing);
        self.try_start_run(node);
    }

    /// The node changed (a GPU UUID, or resumed after a failed run): a run is due now, unless
    /// one is under way.
    pub(super) fn verify_changed(&mut self, node: NodeId) {
        if self.verify.is_none() || self.verifying(node) {
            return;
        }
        self.set_due(node, Some(self.now), VerifyTrigger::Changed);
        self.try_start_run(node);
    }

    /// §7, after GTC expiries: runs past their deadline fail, in deadline order; then due
    /// runs start in due order, or are tried again `busy_retry_s` later.
    pub(super) fn advance_verification(&mut self) {
        let Some(c) = self.verify else { return };
        let now = self.now;
        loop {
            let mut late: Vec<(i64, NodeId)> = self
                .verifications
                .iter()
                .filter_map(|(n, v)| v.run.map(|r| (r.deadline_ms, *n)))
                .filter(|(d, _)| *d <= now)
                .collect();
            late.sort();
            let Some(&(_, node)) = late.first() else {
                break;
            };
            self.end_run(node, Judgment::timeout());
        }
        loop {
            let mut due: Vec<(i64, NodeId)> = self
                .verifications
                .iter()
                .filter_map(|(n, v)| v.due_ms.map(|d| (d, *n)))
                .filter(|(d, _)| *d <= now)
                .collect();
            due.sort();
            let Some(&(_, node)) = due.first() else {
                break;
            };
            if !self.try_start_run(node) {
                let trigger = self.verifications[&node].due_trigger;
                let retry = now + i64::from(c.busy_retry_s.max(1)) * 1000;
                self.set_due(node, Some(retry), trigger);
            }
        }
    }

    /// Starts the node's due run if it can start now.
    fn try_start_run(&mut self, node: NodeId) -> bool {
        let Some(c) = self.verify else { return false };
        let n = self.node(node).clone();
        let sku = self
            .catalog
            .get(n.sku)
            .map(|s| s.id.clone())
            .unwrap_or_default();
        let can = n.status == NodeStatus::Online
            && !n.draining
            && n.held.is_none()
            && n.offer.is_some()
            && n.healthy_mask != 0
            && !self.leases.iter().any(|l| l.node == node)
            && self.occupied(node) == 0
            && exchange::verify::reference_for(&sku).is_some();
        if self.verifying(node) || !can {
            return false;
        }
        let trigger = self
            .verifications
            .get(&node)
            .map_or(VerifyTrigger::FirstListing, |v| v.due_trigger);
        self.set_due(node, None, trigger);
        let run = VerificationRun {
            lease: LeaseId(self.new_id()),
            gpu_mask: n.healthy_mask,
            started_ms: self.now,
            deadline_ms: self.now + i64::from(c.deadline_s.max(1)) * 1000,
            trigger,
        };
        self.verifications.get_mut(&node).expect("record").run = Some(run);
        self.emit(Event::VerificationStarted {
            lease: run.lease,
            node,
            supplier: n.supplier,
            gpu_mask: run.gpu_mask,
            deadline_ms: run.deadline_ms,
            trigger,
        });
        true
    }

    /// Ends the node's run with `judgment`; a failed one holds the node.
    fn end_run(&mut self, node: NodeId, judgment: Judgment) {
        let Some(c) = self.verify else { return };
        let Some(run) = self.verifications.get_mut(&node).and_then(|v| v.run.take()) else {
            return;
        };
        let now = self.now;
        self.verifications.get_mut(&node).expect("record").last = Some(NodeVerification {
            lease: run.lease,
            at_ms: now,
            judgment,
        });
        let due = next_due(&c, now, node, self.seq);
        self.set_due(node, Some(due), VerifyTrigger::Periodic);
        let supplier = self.node(node).supplier;
        self.emit(Event::VerificationEnded {
            lease: run.lease,
            node,
            supplier,
            judgment,
        });
        if judgment.outcome == VerifyOutcome::Failed {
            self.hold(node, HoldReason::VerificationFailed);
        }
    }

    /// §12.1–12.2: a matching attestation changed the UUIDs of `changed` (bit i = GPU i): the
    /// live leases holding one of them end `node_failure` in lease id order and fail over;
    /// then a run is due now.
    pub(super) fn uuids_changed(&mut self, node: NodeId, changed: u32) {
        let now = self.now;
        let mut hit: Vec<LeaseId> = self
            .leases
            .iter()
            .filter(|l| l.node == node && l.gpu_mask & changed != 0)
            .map(|l| l.id)
            .collect();
        hit.sort();
        let failed = hit
            .into_iter()
            .map(|id| self.end_lease(id, exchange::EndReason::NodeFailure, now))
            .collect();
        self.failover(failed, node);
        self.verify_changed(node);
    }

    /// `ReportVerification`: the figures of a run under way.
    pub(super) fn report_verification(
        &mut self,
        account: AccountId,
        lease: LeaseId,
        figures: &VerificationFigures,
    ) -> Result<(), Reject> {
        let on = self
            .verifications
            .iter()
            .find(|(_, v)| v.run.is_some_and(|r| r.lease == lease))
            .map(|(n, v)| (*n, v.run.expect("run")));
        let Some((node, run)) = on else {
            // a buyer's lease, a wiping one, or the latest result's run: not verifying
            let known = self.leases.iter().any(|l| l.id == lease)
                || self.wipes.iter().any(|w| w.lease == lease)
                || self.last_verification_leases().contains(&lease);
            let reason = if known {
                RejectReason::NotVerifying
            } else {
                RejectReason::UnknownLease
            };
            return Err((reason, Some("lease")));
        };
        let n = self.owned_node(account, node)?.clone();
        let bad = Err((RejectReason::InvalidGpus, Some("figures")));
        if figures.gpus.len() > MAX_GPUS as usize {
            return bad;
        }
        for (i, g) in figures.gpus.iter().enumerate() {
            if g.index >= MAX_GPUS
                || (i > 0 && g.index <= figures.gpus[i - 1].index)
                || g.faults & !KNOWN_FAULTS != 0
            {
                return bad;
            }
        }
        let sku = self
            .catalog
            .get(n.sku)
            .map(|s| s.id.clone())
            .unwrap_or_default();
        let judgment = match exchange::verify::reference_for(&sku) {
            Some(r) => judge(r, run.gpu_mask, n.gpus, n.nvlink, figures),
            None => Judgment::timeout(),
        };
        self.end_run(node, judgment);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use exchange::verify::GpuFigures;

    fn figs(n: u32, t: u32, m: u32, ar: Option<u32>) -> VerificationFigures {
        VerificationFigures {
            gpus: (0..n)
                .map(|index| GpuFigures {
                    index,
                    bf16_tflops_x10: Some(t),
                    mem_bw_gbps: Some(m),
                    faults: 0,
                })
                .collect(),
            allreduce_busbw_x10: ar,
            dcgm: Some(DcgmResult::Pass),
        }
    }

    /// The worked examples of §12.2, judged by the model and by `exchange::verify::judge`.
    #[test]
    fn model_judges_the_worked_examples() {
        let r = exchange::verify::reference_for("H100-80G").expect("row");
        let j = judge(r, 0xFF, 8, true, &figs(8, 7_600, 3_000, Some(4_100)));
        assert_eq!(
            (j.outcome, j.worst_bp, j.decided_by),
            (VerifyOutcome::Verified, 9_565, Some(Figure::Bf16Tflops))
        );
        let j = judge(r, 0xFF, 8, true, &figs(8, 7_600, 3_000, Some(3_000)));
        assert_eq!(
            (j.outcome, j.worst_bp, j.decided_by),
            (VerifyOutcome::Degraded, 8_108, Some(Figure::AllReduce))
        );
        let mut f = figs(8, 7_600, 3_000, Some(4_100));
        f.gpus[3].bf16_tflops_x10 = Some(5_000);
        let j = judge(r, 0xFF, 8, true, &f);
        assert_eq!(
            (j.outcome, j.worst_bp, j.gpu),
            (VerifyOutcome::Failed, 6_293, Some(3))
        );
        assert_eq!(
            judge(r, 0xFF, 8, true, &figs(8, 7_151, 3_000, None)).outcome,
            VerifyOutcome::Verified
        );
        assert_eq!(
            judge(r, 0xFF, 8, true, &figs(8, 7_945, 1_959, None)).outcome,
            VerifyOutcome::Failed
        );
        let c = VerifyConfig::default();
        for seq in 0..50 {
            assert_eq!(
                next_due(&c, 1_000, NodeId(42), seq),
                c.next_due_ms(1_000, 42, seq)
            );
        }
    }
}
