//! Verification runs (docs/market-rules.md §12.2, issue 26): the exchange places an unbilled
//! run on all of a wholly free node's healthy GPUs at its first listing, after its attestation
//! changes (or it is resumed after a failed run), and at a draw 1–7 days after its previous
//! run; the node's agent measures and reports; the figures are judged against the SKU's
//! reference ([`crate::verify::judge`]).
//!
//! Invariants:
//! - A node with a run under way is not listed ([`Engine::compute_listing`]) and had no live
//!   lease or wipe when it started, so nothing else uses its GPUs meanwhile.
//! - `Index::verify_due` holds exactly `(due_ms, node)` of every node with a due time, and
//!   `Index::verify_deadlines` exactly `(deadline_ms, node)` of every run under way (rebuilt
//!   from [`super::StateExt::verifications`] on restore); `Index::verify_leases` maps each
//!   run's lease id to its node.
//! - Runs are never leases: no `LeaseStarted`, no fill, no charge, no inventory.

use super::Engine;
use super::commands::Reject;
use crate::command::TrustConstraints;
use crate::event::{Event, HoldReason, RejectReason, VerifyTrigger};
use crate::ids::{AccountId, LeaseId, NodeId, OfferId};
use crate::limits::MAX_NODE_GPUS;
use crate::state::{Node, NodeStatus, NodeVerification, NodeVerify, VerificationRun};
use crate::verify::{
    Judgment, RunShape, VerificationFigures, VerifyConfig, VerifyOutcome, fault, judge,
    reference_for,
};

/// What a buyer or a view sees of a node's verification now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerifyStatus {
    /// Never verified (or verification is off, or its SKU has no reference figures).
    Unverified,
    /// A run is under way.
    Verifying,
    /// The latest run passed and is not stale.
    Verified,
    /// The latest run was degraded (listed, flagged).
    Degraded,
    /// The latest run failed (the node is held until resumed).
    Failed,
    /// The latest run passed or was degraded, but is older than the stale age.
    Stale,
}

impl VerifyStatus {
    /// The snake_case name used on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            VerifyStatus::Unverified => "unverified",
            VerifyStatus::Verifying => "verifying",
            VerifyStatus::Verified => "verified",
            VerifyStatus::Degraded => "degraded",
            VerifyStatus::Failed => "failed",
            VerifyStatus::Stale => "stale",
        }
    }
}

/// Checks a report's shape: at most [`MAX_NODE_GPUS`] GPUs, strictly increasing indexes below
/// it, known fault flags only.
fn check_figures(f: &VerificationFigures) -> Result<(), Reject> {
    let bad = Err((RejectReason::InvalidGpus, "figures"));
    if f.gpus.len() > MAX_NODE_GPUS as usize {
        return bad;
    }
    let mut last: Option<u32> = None;
    for g in &f.gpus {
        if g.index >= MAX_NODE_GPUS || last.is_some_and(|l| g.index <= l) {
            return bad;
        }
        if g.faults & !fault::ALL != 0 {
            return bad;
        }
        last = Some(g.index);
    }
    Ok(())
}

impl Engine {
    /// Turns verification on (`Some`) or off for this market. Call it on a new engine before
    /// its first command (the setting is part of the state: a snapshot keeps it, and a replay
    /// must use the same one).
    pub fn set_verification(&mut self, config: Option<VerifyConfig>) {
        self.ext.verify = config;
    }

    /// The verification settings, if verification is on.
    pub fn verification_config(&self) -> Option<VerifyConfig> {
        self.ext.verify
    }

    /// A node's verification record (latest result, run under way, next due time).
    pub fn verification(&self, node: NodeId) -> Option<&NodeVerify> {
        self.ext.verifications.get(&node)
    }

    /// Every run under way, by node id.
    pub fn verification_runs(&self) -> impl Iterator<Item = (NodeId, &VerificationRun)> {
        self.ext
            .verifications
            .iter()
            .filter_map(|(n, v)| v.run.as_ref().map(|r| (*n, r)))
    }

    /// The node whose run under way has this lease id.
    pub fn verification_node(&self, lease: LeaseId) -> Option<NodeId> {
        self.idx.verify_leases.get(&lease).copied()
    }

    /// A node's verification status at the engine's current time.
    pub fn verify_status(&self, node: NodeId) -> VerifyStatus {
        let Some(v) = self.ext.verifications.get(&node) else {
            return VerifyStatus::Unverified;
        };
        if v.run.is_some() {
            return VerifyStatus::Verifying;
        }
        let Some(last) = v.last else {
            return VerifyStatus::Unverified;
        };
        let stale_ms = self
            .ext
            .verify
            .map_or(i64::MAX, |c| i64::from(c.stale_after_s) * 1000);
        match last.judgment.outcome {
            VerifyOutcome::Failed => VerifyStatus::Failed,
            _ if self.st.now.saturating_sub(last.at_ms) > stale_ms => VerifyStatus::Stale,
            VerifyOutcome::Verified => VerifyStatus::Verified,
            VerifyOutcome::Degraded => VerifyStatus::Degraded,
        }
    }

    /// Whether `offer` on `node` meets `trust` now (§12.2: `verified` needs a current
    /// `verified` run; §12.3: `min_reliability` compares the node's score at the start of the
    /// UTC day; §12.4: `min_sla` compares the offer's stated promise).
    ///
    /// The same as `verify_status(node) == Verified` and `day_scores[node] >= m`, read from
    /// the index's hash-map mirrors (matching asks it per offer walked).
    pub(crate) fn trust_admits(
        &self,
        trust: &TrustConstraints,
        offer: OfferId,
        node: NodeId,
    ) -> bool {
        self.node_trust_admits(trust, node)
            && trust
                .min_sla
                .is_none_or(|f| f.admits(self.ext.offer_sla.get(&offer)))
    }

    /// The node's part of [`Engine::trust_admits`]: `verified` and `min_reliability`.
    pub(crate) fn node_trust_admits(&self, trust: &TrustConstraints, node: NodeId) -> bool {
        (!trust.verified || self.is_verified_now(node))
            && trust
                .min_reliability_bp
                .is_none_or(|m| self.idx.day_score.get(&node).is_some_and(|s| *s >= m))
    }

    /// `verify_status(node) == Verified`: no run under way, and the latest run judged
    /// `verified` no longer ago than `stale_after_s`.
    fn is_verified_now(&self, node: NodeId) -> bool {
        let stale_ms = self
            .ext
            .verify
            .map_or(i64::MAX, |c| i64::from(c.stale_after_s) * 1000);
        !self.idx.verifying.contains(&node)
            && self
                .idx
                .verified_at
                .get(&node)
                .is_some_and(|&at| self.st.now.saturating_sub(at) <= stale_ms)
    }

    /// Whether `offer` on `node` meets `trust` now, as matching judges it (§12.2–12.4).
    pub fn meets_trust(&self, trust: &TrustConstraints, offer: OfferId, node: NodeId) -> bool {
        self.trust_admits(trust, offer, node)
    }

    /// The SLA promise `offer` was posted with (§12.4); `None`: no stated terms.
    pub fn offer_sla_promise(&self, offer: OfferId) -> Option<crate::command::SlaPromise> {
        self.ext.offer_sla.get(&offer).copied()
    }

    /// A node's reliability score now (§12.3).
    pub fn reliability(&self, node: NodeId) -> crate::reliability::Score {
        self.ext.reliability.node(node, self.st.now)
    }

    /// A supplier's reliability score now: the sums over its nodes (§12.3).
    pub fn supplier_reliability(&self, supplier: AccountId) -> crate::reliability::Score {
        self.ext.reliability.supplier(supplier, self.st.now)
    }

    /// The score (bp) `min_reliability` compares against today: the node's at the start of
    /// the current UTC day; `None` when it was `new` then.
    pub fn matching_reliability_bp(&self, node: NodeId) -> Option<u32> {
        self.ext.day_scores.get(&node).copied()
    }

    /// Whether a run is under way on `node` (it is not listed meanwhile).
    pub(crate) fn is_verifying(&self, node: NodeId) -> bool {
        self.idx.verifying.contains(&node)
    }

    /// Sets (or clears) a node's due time, keeping `Index::verify_due` in step.
    fn set_due(&mut self, node: NodeId, due: Option<i64>, trigger: VerifyTrigger) {
        let v = self.ext.verifications.entry(node).or_insert(NodeVerify {
            last: None,
            run: None,
            due_ms: None,
            due_trigger: trigger,
        });
        if let Some(old) = v.due_ms {
            self.idx.verify_due.remove(&(old, node));
        }
        v.due_ms = due;
        v.due_trigger = trigger;
        if let Some(d) = due {
            self.idx.verify_due.insert((d, node));
        }
    }

    /// A node was offered (`PostOffer`): a never-verified node is due now (first listing).
    pub(crate) fn verify_on_listing(&mut self, node: NodeId, out: &mut Vec<Event>) {
        if self.ext.verify.is_none()
            || self
                .ext
                .verifications
                .get(&node)
                .is_some_and(|v| v.last.is_some() || v.run.is_some())
        {
            return;
        }
        self.set_due(node, Some(self.st.now), VerifyTrigger::FirstListing);
        self.try_start_run(node, out);
    }

    /// The node changed (another GPU UUID attested, or resumed after a failed run): a new run
    /// is due now.
    pub(crate) fn verify_changed(&mut self, node: NodeId, out: &mut Vec<Event>) {
        if self.ext.verify.is_none() || self.is_verifying(node) {
            return;
        }
        self.set_due(node, Some(self.st.now), VerifyTrigger::Changed);
        self.try_start_run(node, out);
    }

    /// An exchange outage of `gap` ms (`Resume`, §11.9): run deadlines and due times move by
    /// it, as provisioning deadlines do, so no run fails for the exchange's own downtime.
    pub(crate) fn discount_outage_verification(&mut self, gap: i64) {
        if self.ext.verify.is_none() || gap <= 0 {
            return;
        }
        for (node, v) in self.ext.verifications.iter_mut() {
            if let Some(r) = v.run.as_mut() {
                self.idx.verify_deadlines.remove(&(r.deadline_ms, *node));
                r.deadline_ms = r.deadline_ms.saturating_add(gap);
                self.idx.verify_deadlines.insert((r.deadline_ms, *node));
            }
            if let Some(d) = v.due_ms.as_mut() {
                self.idx.verify_due.remove(&(*d, *node));
                *d = d.saturating_add(gap);
                self.idx.verify_due.insert((*d, *node));
            }
        }
    }

    /// Time advanced: runs past their deadline fail; due nodes start a run, or move
    /// `busy_retry_s` later when they cannot.
    pub(crate) fn advance_verification(&mut self, out: &mut Vec<Event>) {
        let Some(cfg) = self.ext.verify else {
            return;
        };
        let now = self.st.now;
        while let Some(&(deadline, node)) = self.idx.verify_deadlines.first() {
            if deadline > now {
                break;
            }
            self.end_run(node, Judgment::timeout(), out);
        }
        while let Some(&(due, node)) = self.idx.verify_due.first() {
            if due > now {
                break;
            }
            if !self.try_start_run(node, out) {
                let trigger = self
                    .ext
                    .verifications
                    .get(&node)
                    .map_or(VerifyTrigger::Periodic, |v| v.due_trigger);
                let retry = now.saturating_add(i64::from(cfg.busy_retry_s.max(1)) * 1000);
                self.set_due(node, Some(retry), trigger);
            }
        }
    }

    /// Whether a run can start on `node` now: online, not draining or held, offered, its SKU
    /// has reference figures, at least one healthy GPU, and wholly free (no live lease, no
    /// wipe).
    fn can_start(&self, node: &Node) -> bool {
        node.status == NodeStatus::Online
            && !node.draining
            && node.held.is_none()
            && node.offer.is_some()
            && node.healthy_mask != 0
            && node.leases.is_empty()
            && node.claimed_mask == 0
            && node.wiping_mask == 0
            && self
                .st
                .catalog
                .get(node.sku)
                .is_some_and(|s| reference_for(&s.id).is_some())
    }

    /// Starts the due run on `node` if it can start now; true when started.
    fn try_start_run(&mut self, node_id: NodeId, out: &mut Vec<Event>) -> bool {
        let Some(cfg) = self.ext.verify else {
            return false;
        };
        let Some(node) = self.st.nodes.get(&node_id) else {
            // Gone: forget it.
            if let Some(v) = self.ext.verifications.get(&node_id).copied() {
                self.set_due(node_id, None, v.due_trigger);
            }
            return true;
        };
        if self.is_verifying(node_id) || !self.can_start(node) {
            return false;
        }
        let (supplier, gpu_mask) = (node.supplier, node.healthy_mask);
        let trigger = self
            .ext
            .verifications
            .get(&node_id)
            .map_or(VerifyTrigger::FirstListing, |v| v.due_trigger);
        self.set_due(node_id, None, trigger);
        let now = self.st.now;
        let run = VerificationRun {
            lease: LeaseId(self.next_id()),
            gpu_mask,
            started_ms: now,
            deadline_ms: now.saturating_add(i64::from(cfg.deadline_s.max(1)) * 1000),
            trigger,
        };
        if let Some(v) = self.ext.verifications.get_mut(&node_id) {
            v.run = Some(run);
        }
        self.idx.verify_deadlines.insert((run.deadline_ms, node_id));
        self.idx.verify_leases.insert(run.lease, node_id);
        self.idx.verifying.insert(node_id);
        out.push(Event::VerificationStarted {
            lease: run.lease,
            node: node_id,
            supplier,
            gpu_mask,
            deadline_ms: run.deadline_ms,
            trigger,
        });
        self.relist(node_id);
        true
    }

    /// Ends the run under way on `node` with `judgment`: records it, schedules the next draw,
    /// holds the node when it failed, and lists it again otherwise.
    fn end_run(&mut self, node_id: NodeId, judgment: Judgment, out: &mut Vec<Event>) {
        let Some(cfg) = self.ext.verify else {
            return;
        };
        let Some(run) = self
            .ext
            .verifications
            .get_mut(&node_id)
            .and_then(|v| v.run.take())
        else {
            return;
        };
        self.idx
            .verify_deadlines
            .remove(&(run.deadline_ms, node_id));
        self.idx.verify_leases.remove(&run.lease);
        self.idx.verifying.remove(&node_id);
        let now = self.st.now;
        if let Some(v) = self.ext.verifications.get_mut(&node_id) {
            v.last = Some(NodeVerification {
                lease: run.lease,
                at_ms: now,
                judgment,
            });
        }
        if judgment.outcome == VerifyOutcome::Verified {
            self.idx.verified_at.insert(node_id, now);
        } else {
            self.idx.verified_at.remove(&node_id);
        }
        self.set_due(
            node_id,
            Some(cfg.next_due_ms(now, node_id.0, self.seq)),
            VerifyTrigger::Periodic,
        );
        let supplier = self.st.nodes.get(&node_id).map(|n| n.supplier);
        if let Some(supplier) = supplier {
            out.push(Event::VerificationEnded {
                lease: run.lease,
                node: node_id,
                supplier,
                judgment,
            });
        }
        if judgment.outcome == VerifyOutcome::Failed {
            self.hold(node_id, HoldReason::VerificationFailed, out);
        }
        self.relist(node_id);
        self.idx.mark_dirty(node_id);
    }

    /// `ReportVerification` (§12.2): the figures of a run under way, judged now.
    pub(crate) fn report_verification(
        &mut self,
        account: AccountId,
        lease: LeaseId,
        figures: &VerificationFigures,
        out: &mut Vec<Event>,
    ) -> Result<(), Reject> {
        let Some(&node_id) = self.idx.verify_leases.get(&lease) else {
            // A buyer's lease, or a run that already ended: 409; else unknown (404).
            let known = self.st.leases.contains_key(&lease)
                || self.st.wipes.contains_key(&lease)
                || self
                    .ext
                    .verifications
                    .values()
                    .any(|v| v.last.is_some_and(|l| l.lease == lease));
            return Err(if known {
                (RejectReason::NotVerifying, "lease")
            } else {
                (RejectReason::UnknownLease, "lease")
            });
        };
        let node = self.owned_node(account, node_id)?;
        check_figures(figures)?;
        let Some(run) = self.ext.verifications.get(&node_id).and_then(|v| v.run) else {
            return Err((RejectReason::NotVerifying, "lease"));
        };
        let sku = self
            .st
            .catalog
            .get(node.sku)
            .map(|s| s.id.clone())
            .unwrap_or_default();
        let judgment = match reference_for(&sku) {
            Some(r) => judge(
                r,
                RunShape {
                    gpu_mask: run.gpu_mask,
                    node_gpus: node.gpus,
                    nvlink: node.nvlink,
                    interconnect: node.interconnect,
                },
                figures,
            ),
            None => Judgment::timeout(),
        };
        self.end_run(node_id, judgment, out);
        Ok(())
    }

    /// A node's latest attestation matched and changed GPU UUIDs (a card swapped): every live
    /// lease on a changed GPU ends `node_failure` and fails over (its buyer rented another
    /// card), and a new run is due now (§12.1–12.2).
    pub(crate) fn uuids_changed(&mut self, node_id: NodeId, changed: u32, out: &mut Vec<Event>) {
        let ended = self.end_leases_on_gpus(node_id, changed, out);
        for lease in &ended {
            self.failover(lease, node_id, out);
        }
        self.verify_changed(node_id, out);
    }
}
