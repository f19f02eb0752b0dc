//! Lease delivery (docs/market-rules.md §11): provisioning with a deadline, the supplier's
//! ready / failed / torn-down reports, wipes after every end, held nodes and their resume.
//!
//! Invariants kept here (checked by `check_invariants`):
//! - a provisioning lease has a deadline iff none of its GPUs is wiping;
//! - `Node::wiping_mask` is the OR of the masks of the node's wipes in `State::wipes`, and a
//!   node's wipes share no GPU (so ending a wipe clears its GPUs from the mask);
//! - no provisioning deadline or teardown deadline is at or before `now` after a command;
//! - only with `EngineConfig::delivery` on does any of this happen: off, leases run from their
//!   start and free their GPUs at their end (§1–10).

use super::Engine;
use super::commands::Reject;
use super::index::{TIMER_PROVISION, TIMER_WIPE};
use crate::event::{EndReason, Event, HoldReason, RejectReason};
use crate::ids::{AccountId, LeaseId, NodeId};
use crate::limits::DEFAULT_PROVISION_SECONDS;
use crate::state::{Lease, LeaseState, Wipe};

impl Engine {
    /// A lease has just started holding its GPUs (delivery on): it provisions, with a deadline
    /// when none of its GPUs is still wiping (§11.1, §11.7).
    pub(crate) fn begin_provisioning(&mut self, id: LeaseId, out: &mut Vec<Event>) {
        let now = self.st.now;
        let Some(lease) = self.st.leases.get(&id) else {
            return;
        };
        let wiping = self.st.nodes.get(&lease.node).map_or(0, |n| n.wiping_mask);
        if lease.gpu_mask & wiping != 0 {
            return; // waits for the wipe: provisioning starts in `wiped`
        }
        let provision_s = self
            .st
            .offers
            .get(&lease.offer)
            .map_or(DEFAULT_PROVISION_SECONDS, |o| o.terms.provision_s);
        let deadline_ms = now.saturating_add(i64::from(provision_s) * 1000);
        let Some(lease) = self.st.leases.get_mut(&id) else {
            return;
        };
        lease.provision_deadline_ms = Some(deadline_ms);
        self.idx
            .lease_timers
            .push((deadline_ms, TIMER_PROVISION, id));
        out.push(Event::ProvisionStarted {
            lease: id,
            buyer: lease.buyer,
            supplier: lease.supplier,
            node: lease.node,
            deadline_ms,
        });
    }

    /// The lease of `account`'s node, live or wiping; checks that `account` supplies it.
    /// Returns whether it is live.
    fn supplier_lease(&self, account: AccountId, lease: LeaseId) -> Result<bool, Reject> {
        let (supplier, live) = match (self.st.leases.get(&lease), self.st.wipes.get(&lease)) {
            (Some(l), _) => (l.supplier, true),
            (None, Some(w)) => (w.supplier, false),
            (None, None) => return Err((RejectReason::UnknownLease, "lease")),
        };
        if supplier != account {
            return Err((RejectReason::NotOwner, "lease"));
        }
        Ok(live)
    }

    /// The provisioning lease a ready or failed report names (§11.2–3): `Ok(None)` for a
    /// lease already running (a ready report repeats).
    fn provisioning_lease(
        &self,
        account: AccountId,
        lease: LeaseId,
    ) -> Result<Option<&Lease>, Reject> {
        if !self.supplier_lease(account, lease)? {
            return Err((RejectReason::LeaseEnded, "lease"));
        }
        let l = self
            .st
            .leases
            .get(&lease)
            .ok_or((RejectReason::UnknownLease, "lease"))?;
        match (l.state, l.provision_deadline_ms) {
            (LeaseState::Provisioning, Some(_)) => Ok(Some(l)),
            // A gang member ready and waiting for the rest (§13.3) can still fail.
            (LeaseState::Provisioning, None) if self.gang_member_waiting(lease) => Ok(Some(l)),
            (LeaseState::Active, _) => Ok(None),
            _ => Err((RejectReason::NotProvisioning, "lease")),
        }
    }

    /// `ReportReady` (§11.2).
    pub(crate) fn report_ready(
        &mut self,
        account: AccountId,
        id: LeaseId,
        out: &mut Vec<Event>,
    ) -> Result<(), Reject> {
        if self.provisioning_lease(account, id)?.is_none() {
            return Ok(()); // already running: a repeated report
        }
        // A member of a gang not yet whole waits for the rest (§13.3).
        if self.gang_member_ready(id, out) {
            return Ok(());
        }
        // It runs, and is billed, from now; its provisioning deadline entry becomes stale.
        self.start_running(id, out);
        Ok(())
    }

    /// `ReportFailed` (§11.3).
    pub(crate) fn report_failed(
        &mut self,
        account: AccountId,
        id: LeaseId,
        out: &mut Vec<Event>,
    ) -> Result<(), Reject> {
        if self.provisioning_lease(account, id)?.is_none() {
            return Err((RejectReason::NotProvisioning, "lease"));
        }
        self.not_delivered(id, self.st.now, out);
        Ok(())
    }

    /// `ReportLaunchFailed` (§11.3b): the buyer's launch spec cannot run; the lease ends
    /// `not_delivered` now, with no hold and no failover.
    pub(crate) fn report_launch_failed(
        &mut self,
        account: AccountId,
        id: LeaseId,
        out: &mut Vec<Event>,
    ) -> Result<(), Reject> {
        if self.provisioning_lease(account, id)?.is_none() {
            return Err((RejectReason::NotProvisioning, "lease"));
        }
        let now = self.st.now;
        self.end_lease(id, EndReason::NotDelivered, now, out);
        Ok(())
    }

    /// `ReportLost` (§11.3a): a running lease ends `node_failure` now and fails over, as on a
    /// node failure of that lease alone; the node is not held.
    pub(crate) fn report_lost(
        &mut self,
        account: AccountId,
        id: LeaseId,
        out: &mut Vec<Event>,
    ) -> Result<(), Reject> {
        if !self.supplier_lease(account, id)? {
            return Err((RejectReason::LeaseEnded, "lease"));
        }
        let l = self
            .st
            .leases
            .get(&id)
            .ok_or((RejectReason::UnknownLease, "lease"))?;
        if l.state != LeaseState::Active {
            return Err((RejectReason::NotActive, "lease"));
        }
        let now = self.st.now;
        if let Some(lease) = self.end_lease(id, EndReason::NodeFailure, now, out) {
            self.failover(&lease, lease.node, out);
        }
        Ok(())
    }

    /// Ends a lease `not_delivered` at `at_ms`, holds its node, fails it over (§11.3).
    pub(crate) fn not_delivered(&mut self, id: LeaseId, at_ms: i64, out: &mut Vec<Event>) {
        if let Some(lease) = self.end_lease(id, EndReason::NotDelivered, at_ms, out) {
            self.hold(lease.node, HoldReason::NotDelivered, out);
            self.failover(&lease, lease.node, out);
        }
    }

    /// Holds a node off the market (§11.8); nothing when already held.
    pub(crate) fn hold(&mut self, node_id: NodeId, reason: HoldReason, out: &mut Vec<Event>) {
        let Some(node) = self.st.nodes.get_mut(&node_id) else {
            return;
        };
        if node.held.is_some() {
            return;
        }
        node.held = Some(reason);
        out.push(Event::NodeHeld {
            node: node_id,
            supplier: node.supplier,
            reason,
        });
        self.relist(node_id);
    }

    /// `ResumeNode` (§11.8).
    pub(crate) fn resume_node(
        &mut self,
        account: AccountId,
        node_id: NodeId,
        out: &mut Vec<Event>,
    ) -> Result<(), Reject> {
        let node = self.owned_node(account, node_id)?;
        // §12.1: a held node whose latest attestation mismatches stays held.
        if node.held.is_some()
            && self
                .ext
                .attestations
                .get(&node_id)
                .is_some_and(|a| a.mismatch.is_some())
        {
            return Err((RejectReason::AttestationMismatch, "node"));
        }
        let Some(node) = self.st.nodes.get_mut(&node_id) else {
            return Err((RejectReason::UnknownNode, "node"));
        };
        if let Some(was) = node.held.take() {
            out.push(Event::NodeResumed {
                node: node_id,
                supplier: account,
            });
            // §12.2: a node whose latest run failed (held for it, or for something else
            // that came first) is back on the market only through a new run.
            if was == HoldReason::VerificationFailed
                || self.verify_status(node_id) == super::VerifyStatus::Failed
            {
                self.verify_changed(node_id, out);
            }
            self.relist(node_id);
            self.idx.mark_dirty(node_id);
        }
        Ok(())
    }

    /// A lease just ended (delivery on): its GPUs wipe if its provisioning had begun (§11.4).
    pub(crate) fn start_wipe(&mut self, lease: &Lease, out: &mut Vec<Event>) {
        let began = match lease.state {
            LeaseState::Active => true,
            // A gang member reported ready (§13.3) began provisioning: it met its deadline.
            LeaseState::Provisioning => {
                lease.provision_deadline_ms.is_some() || self.gang_member_waiting(lease.id)
            }
            LeaseState::Pending => false,
        };
        if !began {
            return;
        }
        // At least 1 ms: a configured 0 (or less) must not file a wipe already overdue.
        let deadline_ms = self
            .st
            .now
            .saturating_add(self.st.config.teardown_timeout_ms.max(1));
        if let Some(node) = self.st.nodes.get_mut(&lease.node) {
            node.wiping_mask |= lease.gpu_mask;
        }
        self.idx
            .lease_timers
            .push((deadline_ms, TIMER_WIPE, lease.id));
        self.st.wipes.insert(
            lease.id,
            Wipe {
                lease: lease.id,
                node: lease.node,
                buyer: lease.buyer,
                supplier: lease.supplier,
                gpu_mask: lease.gpu_mask,
                deadline_ms,
            },
        );
        out.push(Event::LeaseWiping {
            lease: lease.id,
            buyer: lease.buyer,
            supplier: lease.supplier,
            node: lease.node,
            gpu_mask: lease.gpu_mask,
            deadline_ms,
        });
    }

    /// Takes a wipe out of the state and clears its GPUs from its node's wiping mask. O(1):
    /// a node's wipes never share a GPU (a lease whose GPUs are still wiping has not begun
    /// provisioning, so its end files no wipe), so the mask without this wipe is the mask less
    /// its GPUs — no scan of the other wipes (the market's, before: O(wipes) per teardown).
    /// `check_invariants` checks both the disjointness and the mask against the wipes.
    fn finish_wipe(&mut self, id: LeaseId) -> Option<Wipe> {
        let wipe = self.st.wipes.remove(&id)?;
        if let Some(node) = self.st.nodes.get_mut(&wipe.node) {
            node.wiping_mask &= !wipe.gpu_mask;
        }
        Some(wipe)
    }

    /// `ReportTornDown` (§11.5).
    pub(crate) fn report_torn_down(
        &mut self,
        account: AccountId,
        id: LeaseId,
        out: &mut Vec<Event>,
    ) -> Result<(), Reject> {
        if self.supplier_lease(account, id)? {
            return Err((RejectReason::LeaseNotEnded, "lease"));
        }
        // Its teardown deadline entry becomes stale.
        self.idx.lease_timers.cancelled(1);
        let Some(wipe) = self.finish_wipe(id) else {
            return Err((RejectReason::UnknownLease, "lease"));
        };
        out.push(Event::LeaseWiped {
            lease: id,
            buyer: wipe.buyer,
            supplier: wipe.supplier,
            node: wipe.node,
        });
        // Successors that waited for these GPUs start provisioning, in lease id order.
        for lid in self.waiting_leases(wipe.node, u32::MAX) {
            self.begin_provisioning(lid, out);
        }
        self.relist(wipe.node);
        self.idx.mark_dirty(wipe.node);
        Ok(())
    }

    /// A teardown deadline passed (§11.6).
    pub(crate) fn teardown_overdue(&mut self, id: LeaseId, out: &mut Vec<Event>) {
        let Some(wipe) = self.finish_wipe(id) else {
            return;
        };
        out.push(Event::TeardownOverdue {
            lease: id,
            buyer: wipe.buyer,
            supplier: wipe.supplier,
            node: wipe.node,
        });
        self.hold(wipe.node, HoldReason::TeardownOverdue, out);
        let now = self.st.now;
        for lid in self.waiting_leases(wipe.node, wipe.gpu_mask) {
            self.not_delivered(lid, now, out);
        }
        self.relist(wipe.node);
    }

    /// Leases on `node` waiting for a wipe (provisioning without a deadline) whose GPUs meet
    /// `mask`, in lease id order; with `mask = u32::MAX`, only those no longer waiting on any
    /// wiping GPU.
    fn waiting_leases(&self, node_id: NodeId, mask: u32) -> Vec<LeaseId> {
        let Some(node) = self.st.nodes.get(&node_id) else {
            return Vec::new();
        };
        let mut ids: Vec<LeaseId> = node
            .leases
            .iter()
            .filter_map(|id| self.st.leases.get(id))
            .filter(|l| l.state == LeaseState::Provisioning && l.provision_deadline_ms.is_none())
            // A gang member reported ready waits for its gang, not for a wipe (§13.3).
            .filter(|l| !self.gang_member_waiting(l.id))
            .filter(|l| {
                if mask == u32::MAX {
                    l.gpu_mask & node.wiping_mask == 0
                } else {
                    l.gpu_mask & mask != 0
                }
            })
            .map(|l| l.id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// `Resume` with delivery on: provisioning and teardown deadlines move by the outage
    /// (§11.9). O(provisioning leases + wipes).
    pub(crate) fn discount_outage_deadlines(&mut self, gap: i64) {
        let mut moved = Vec::new();
        for lease in self.st.leases.values_mut() {
            if let (LeaseState::Provisioning, Some(d)) = (lease.state, lease.provision_deadline_ms)
            {
                let d = d.saturating_add(gap);
                lease.provision_deadline_ms = Some(d);
                moved.push((d, TIMER_PROVISION, lease.id));
            }
        }
        for wipe in self.st.wipes.values_mut() {
            wipe.deadline_ms = wipe.deadline_ms.saturating_add(gap);
            moved.push((wipe.deadline_ms, TIMER_WIPE, wipe.lease));
        }
        self.idx.lease_timers.cancelled(moved.len());
        for t in moved {
            self.idx.lease_timers.push(t);
        }
    }
}
