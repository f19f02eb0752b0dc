//! Lease delivery at the gateway (issue 15; the engine's rules are docs/market-rules.md §11):
//! what a buyer asks to run ([`LaunchSpec`], journaled with its bid), what a supplier reports
//! ([`Report`]: ready with [`AccessDetails`], failed with a reason, torn down with a wipe
//! method), and every lease's story ([`LeaseRecord`]) from fill to teardown — the lease history
//! buyers and suppliers read, and the deletion record a buyer keeps.
//!
//! [`Deliveries`] is part of the market's deterministic state: it changes only in
//! [`Deliveries::observe`], from an operation's engine output, so replaying the journal
//! rebuilds it exactly (it is in the market snapshot and state hash).
//!
//! Invariants:
//! - a launch spec is kept while its bid rests or has a live or wiping lease (failover
//!   replacements fill the same bid, so the spec travels with them), and dropped after;
//! - every lease the engine ever created has one record; `by_buyer` / `by_supplier` index
//!   every record; `node_wiping` holds exactly the engine's wipes per node;
//! - `node_version` grows whenever something a node's agent must act on changes (an
//!   assignment, a notice, an end, a wipe), so an agent that polls can tell it has news.
//!
//! Limits are named constants below; wire validation (`api::dto`) enforces them.

use exchange::{
    AccountId, BidId, EndReason, Engine, Event, LeaseId, LeaseKind, NodeId, Output, Price,
    RegionId, SkuId,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Most SSH public keys in one launch spec.
pub const MAX_SSH_KEYS: usize = 16;
/// Longest SSH public key line, bytes (an RSA-16384 key is about 2.8 KB).
pub const MAX_SSH_KEY_BYTES: usize = 4_096;
/// Longest container image reference, bytes (Docker allows 255 for the name plus tag/digest).
pub const MAX_IMAGE_BYTES: usize = 512;
/// Most command arguments.
pub const MAX_COMMAND_ARGS: usize = 64;
/// Longest command argument, bytes.
pub const MAX_COMMAND_ARG_BYTES: usize = 4_096;
/// Most environment variables.
pub const MAX_ENV_VARS: usize = 64;
/// Longest environment variable name, bytes.
pub const MAX_ENV_NAME_BYTES: usize = 128;
/// Longest environment variable value, bytes.
pub const MAX_ENV_VALUE_BYTES: usize = 4_096;
/// Most ports a lease may expose.
pub const MAX_PORTS: usize = 16;
/// Largest scratch disk, GB (16 TB: a large NVMe array).
pub const MAX_DISK_GB: u32 = 16_384;
/// Longest host name in access details, bytes (DNS: 253).
pub const MAX_HOST_BYTES: usize = 253;
/// Longest user name in access details, bytes (POSIX login names: 32).
pub const MAX_USER_BYTES: usize = 32;
/// Longest URL of an exposed port, bytes.
pub const MAX_URL_BYTES: usize = 2_048;
/// Longest failure reason or wipe method, bytes.
pub const MAX_REPORT_TEXT_BYTES: usize = 1_024;

/// What a buyer asks the supplier's node to run for a lease. Environment values are visible
/// to the supplier of every node that holds one of the bid's leases: no secrets there.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchSpec {
    /// SSH public keys (OpenSSH one-line format) to authorize, at most [`MAX_SSH_KEYS`].
    pub ssh_keys: Vec<String>,
    /// Container image reference, e.g. `nvcr.io/nvidia/pytorch:24.05-py3`.
    pub image: Option<String>,
    /// Command and arguments (no shell: passed as an argument vector).
    pub command: Vec<String>,
    /// Environment variables, by name.
    pub env: BTreeMap<String, String>,
    /// Ports to expose (1..=65535, distinct).
    pub ports: Vec<u16>,
    /// Scratch disk, GB (0 = the node's default).
    pub disk_gb: u32,
}

/// How the buyer reaches a ready lease, as the supplier reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessDetails {
    /// SSH host name or address.
    pub ssh_host: Option<String>,
    /// SSH port.
    pub ssh_port: Option<u16>,
    /// SSH user.
    pub ssh_user: Option<String>,
    /// URL of each exposed port, by port.
    pub urls: BTreeMap<u16, String>,
}

impl AccessDetails {
    /// The command a buyer runs to log in, e.g. `ssh -p 2222 root@203.0.113.7`; `None` without
    /// an SSH host.
    pub fn ssh_command(&self) -> Option<String> {
        let host = self.ssh_host.as_deref()?;
        let target = match self.ssh_user.as_deref() {
            Some(u) => format!("{u}@{host}"),
            None => host.to_string(),
        };
        Some(match self.ssh_port {
            Some(p) if p != 22 => format!("ssh -p {p} {target}"),
            _ => format!("ssh {target}"),
        })
    }
}

/// A supplier's report on one lease of its node (journaled; the engine sees the matching
/// command, the details stay here).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Report {
    /// The workload is up: the lease runs and is billed from now.
    Ready {
        /// Supplier.
        account: u64,
        /// Lease.
        lease: u64,
        /// How the buyer gets in.
        access: AccessDetails,
    },
    /// The node could not deliver: the lease ends not delivered and fails over (or, when the
    /// buyer's launch spec is the cause, ends without a failover).
    Failed {
        /// Supplier.
        account: u64,
        /// Lease.
        lease: u64,
        /// Why, for the buyer and the supplier's own records.
        reason: String,
        /// Whose side it is on (absent in entries journaled before issue 25: the node).
        #[serde(default)]
        cause: FailureCause,
    },
    /// The node lost a running lease's workload: the lease ends `node_failure` now and fails
    /// over, with the SLA credit (docs/market-rules.md §11.3a; issue 25).
    Lost {
        /// Supplier.
        account: u64,
        /// Lease.
        lease: u64,
        /// What happened, for the buyer and the supplier's own records.
        reason: String,
    },
    /// The ended lease's GPUs are wiped.
    TornDown {
        /// Supplier.
        account: u64,
        /// Lease.
        lease: u64,
        /// How they were wiped, e.g. `container removed; scratch NVMe blkdiscard`.
        method: String,
    },
}

impl Report {
    /// The engine command this report is.
    pub fn command(&self) -> exchange::Command {
        use exchange::Command;
        match self {
            Report::Ready { account, lease, .. } => Command::ReportReady {
                account: AccountId(*account),
                lease: LeaseId(*lease),
            },
            Report::Failed {
                account,
                lease,
                cause: FailureCause::Node,
                ..
            } => Command::ReportFailed {
                account: AccountId(*account),
                lease: LeaseId(*lease),
            },
            Report::Failed {
                account,
                lease,
                cause: FailureCause::LaunchSpec,
                ..
            } => Command::ReportLaunchFailed {
                account: AccountId(*account),
                lease: LeaseId(*lease),
            },
            Report::Lost { account, lease, .. } => Command::ReportLost {
                account: AccountId(*account),
                lease: LeaseId(*lease),
            },
            Report::TornDown { account, lease, .. } => Command::ReportTornDown {
                account: AccountId(*account),
                lease: LeaseId(*lease),
            },
        }
    }
}

/// Whose side a failed delivery was on (docs/market-rules.md §11.3, §11.3b).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureCause {
    /// The node: fail over, hold the node.
    #[default]
    Node,
    /// The buyer's launch spec: end at no charge, no failover, no hold.
    LaunchSpec,
}

/// Where a lease is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Traded; waits for a preemption deadline.
    Pending,
    /// The node is provisioning it (or waits for its GPUs' wipe).
    Provisioning,
    /// Running (billed).
    Running,
    /// Ended.
    Ended,
}

impl Phase {
    /// Its wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "pending",
            Phase::Provisioning => "provisioning",
            Phase::Running => "running",
            Phase::Ended => "ended",
        }
    }
}

/// The wipe of an ended lease's GPUs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WipeRecord {
    /// Teardown deadline, ms since epoch.
    pub deadline_ms: i64,
    /// When the supplier reported it torn down, ms since epoch.
    pub torn_down_ms: Option<i64>,
    /// How, as reported.
    pub method: Option<String>,
    /// The deadline passed without a report.
    pub overdue: bool,
}

/// One lease's story, kept after it ends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// Lease id.
    pub lease: LeaseId,
    /// Its bid.
    pub bid: BidId,
    /// Buyer.
    pub buyer: AccountId,
    /// Supplier.
    pub supplier: AccountId,
    /// Node.
    pub node: NodeId,
    /// Offer traded against.
    pub offer: exchange::OfferId,
    /// SKU.
    pub sku: SkuId,
    /// Region of the node at the fill.
    pub region: RegionId,
    /// Spot or preemptible.
    pub kind: LeaseKind,
    /// GPUs.
    pub gpus: u32,
    /// The node's GPUs it holds (bit i = GPU i); 0 until it starts.
    pub gpu_mask: u32,
    /// The UUIDs of those GPUs by the node's attestation when it started, in index order
    /// (issue 26, docs/market-rules.md §12.1); empty when the node never attested. The agent
    /// refuses to provision when a GPU under the lease now has another UUID.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_uuids: Vec<String>,
    /// Price, CNY per GPU-hour.
    pub price: Price,
    /// Trade time, ms since epoch.
    pub filled_ms: i64,
    /// Start (GPUs become its), ms since epoch.
    pub start_ms: i64,
    /// Scheduled end, ms since epoch.
    pub end_ms: i64,
    /// Phase.
    pub phase: Phase,
    /// Provisioning deadline while provisioning, ms since epoch.
    pub provision_deadline_ms: Option<i64>,
    /// Ready (billing start), ms since epoch.
    pub ready_ms: Option<i64>,
    /// Access details reported with ready.
    pub access: Option<AccessDetails>,
    /// Preemption / withdrawal notice deadline, ms since epoch.
    pub notice_deadline_ms: Option<i64>,
    /// Why and when it ended.
    pub ended: Option<(EndReason, i64)>,
    /// The supplier's reason when it reported the lease failed.
    pub failure: Option<String>,
    /// Set when the failure was the buyer's launch spec (issue 25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_cause: Option<FailureCause>,
    /// The wipe of its GPUs after it ended (absent when it ended before provisioning began).
    pub wipe: Option<WipeRecord>,
    /// The lease it replaces (failover).
    pub migrated_from: Option<LeaseId>,
    /// Its replacements (failover).
    pub migrated_to: Vec<LeaseId>,
    /// GPUs its failover could not place, and why (`no_capacity`, `price`, `constraints`).
    #[serde(default)]
    pub failover_failed: Option<(u32, exchange::BidCloseReason)>,
    /// What its buyer can act on when the failover failed (§4.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover_failed_detail: Option<exchange::CloseDetail>,
    /// The SLA terms of its offer, frozen at fill (issue 26; `None`: the exchange's default
    /// rule): kept with the record so a lease that never started still shows them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sla: Option<settlement::sla::SlaTerms>,
}

impl LeaseRecord {
    /// A record made from a live engine lease alone (a lease from before records were kept).
    pub fn of_lease(l: &exchange::state::Lease) -> LeaseRecord {
        use exchange::state::LeaseState;
        LeaseRecord {
            lease: l.id,
            bid: l.bid,
            buyer: l.buyer,
            supplier: l.supplier,
            node: l.node,
            offer: l.offer,
            sku: l.sku,
            region: l.region,
            kind: l.kind,
            gpus: l.gpus,
            gpu_mask: l.gpu_mask,
            gpu_uuids: Vec::new(),
            price: l.price,
            filled_ms: l.start_ms,
            start_ms: l.start_ms,
            end_ms: l.end_ms,
            phase: match l.state {
                LeaseState::Pending => Phase::Pending,
                LeaseState::Provisioning => Phase::Provisioning,
                LeaseState::Active => Phase::Running,
            },
            provision_deadline_ms: l.provision_deadline_ms,
            ready_ms: l.ready_ms,
            access: None,
            notice_deadline_ms: l.notice.map(|n| n.deadline_ms),
            ended: None,
            failure: None,
            failure_cause: None,
            wipe: None,
            migrated_from: None,
            migrated_to: Vec::new(),
            failover_failed: None,
            failover_failed_detail: None,
            sla: None,
        }
    }
}

/// Lease delivery state of the market (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deliveries {
    launch: BTreeMap<BidId, LaunchSpec>,
    /// Live and wiping leases per bid (keeps its launch spec).
    bid_refs: BTreeMap<BidId, u32>,
    records: BTreeMap<LeaseId, LeaseRecord>,
    by_buyer: BTreeSet<(AccountId, LeaseId)>,
    by_supplier: BTreeSet<(AccountId, LeaseId)>,
    by_node: BTreeSet<(NodeId, LeaseId)>,
    node_wiping: BTreeMap<NodeId, BTreeSet<LeaseId>>,
    node_version: BTreeMap<NodeId, u64>,
}

impl Deliveries {
    /// The launch spec of a bid, while it rests or has leases.
    pub fn launch(&self, bid: BidId) -> Option<&LaunchSpec> {
        self.launch.get(&bid)
    }

    /// A lease's record.
    pub fn record(&self, lease: LeaseId) -> Option<&LeaseRecord> {
        self.records.get(&lease)
    }

    /// How many launch specs are kept (for tests of their pruning).
    pub fn launch_specs(&self) -> usize {
        self.launch.len()
    }

    /// The change counter of a node's leases (0 before any).
    pub fn node_version(&self, node: NodeId) -> u64 {
        self.node_version.get(&node).copied().unwrap_or(0)
    }

    /// The ended leases of a node still wiping, in id order.
    pub fn wiping_on(&self, node: NodeId) -> impl Iterator<Item = &LeaseRecord> {
        self.node_wiping
            .get(&node)
            .into_iter()
            .flatten()
            .filter_map(|id| self.records.get(id))
    }

    /// Every lease record of a node (live and ended), newest first.
    pub fn on_node(&self, node: NodeId) -> impl Iterator<Item = &LeaseRecord> {
        self.by_node
            .range((node, LeaseId(0))..=(node, LeaseId(u64::MAX)))
            .rev()
            .filter_map(|(_, id)| self.records.get(id))
    }

    /// An account's lease records as buyer or supplier, newest first, starting below `before`
    /// (a lease id cursor; `None` from the newest).
    pub fn of_account(
        &self,
        account: AccountId,
        supplier: bool,
        before: Option<LeaseId>,
    ) -> impl Iterator<Item = &LeaseRecord> {
        let index = if supplier {
            &self.by_supplier
        } else {
            &self.by_buyer
        };
        let hi = before.map_or(LeaseId(u64::MAX), |b| LeaseId(b.0.saturating_sub(1)));
        let range = if before.is_some_and(|b| b.0 == 0) {
            None
        } else {
            Some(index.range((account, LeaseId(0))..=(account, hi)))
        };
        range
            .into_iter()
            .flatten()
            .rev()
            .filter_map(|(_, id)| self.records.get(id))
    }

    /// After an exchange outage (`Resume`), which moves provisioning and teardown deadlines
    /// without an event (docs/market-rules.md §11.9): copies the engine's deadlines into the
    /// records, so what buyers and agents read is what the engine will enforce. O(provisioning
    /// leases + wipes); runs only on a `Resume`.
    pub fn refresh_deadlines(&mut self, engine: &Engine) {
        let mut touched = Vec::new();
        for l in engine.leases() {
            if let Some(d) = l.provision_deadline_ms
                && let Some(r) = self.records.get_mut(&l.id)
                && r.provision_deadline_ms != Some(d)
            {
                r.provision_deadline_ms = Some(d);
                touched.push(l.node);
            }
        }
        for w in engine.wipes() {
            if let Some(r) = self.records.get_mut(&w.lease)
                && let Some(rw) = r.wipe.as_mut()
                && rw.deadline_ms != w.deadline_ms
            {
                rw.deadline_ms = w.deadline_ms;
                touched.push(w.node);
            }
        }
        touched.sort_unstable();
        touched.dedup();
        for node in touched {
            self.bump(node);
        }
    }

    fn bump(&mut self, node: NodeId) {
        *self.node_version.entry(node).or_default() += 1;
    }

    pub(crate) fn record_mut(&mut self, lease: LeaseId) -> Option<&mut LeaseRecord> {
        self.records.get_mut(&lease)
    }

    fn add_ref(&mut self, bid: BidId) {
        *self.bid_refs.entry(bid).or_default() += 1;
    }

    fn drop_ref(&mut self, bid: BidId) {
        if let Some(n) = self.bid_refs.get_mut(&bid) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.bid_refs.remove(&bid);
            }
        }
    }

    /// Follows one engine output (of an operation applied at `now_ms`): `launch` is the spec
    /// of a bid the operation placed, `report` the supplier report it carried. Answers the
    /// lease whose access details a repeated ready report replaced, if any.
    pub fn observe(
        &mut self,
        engine: &Engine,
        output: &Output,
        now_ms: i64,
        launch: Option<&LaunchSpec>,
        report: Option<&Report>,
    ) -> Option<LeaseId> {
        let mut access_changed = None;
        let mut touched: Vec<BidId> = Vec::new();
        for e in &output.events {
            match *e {
                Event::BidAccepted { bid, .. } => {
                    if let Some(spec) = launch {
                        self.launch.insert(bid, spec.clone());
                        touched.push(bid);
                    }
                }
                Event::BidClosed { bid, .. } => touched.push(bid),
                Event::Fill {
                    bid,
                    lease,
                    offer,
                    node,
                    buyer,
                    supplier,
                    gpus,
                    price,
                    kind,
                    start_ms,
                    end_ms,
                    ..
                } => {
                    let (sku, region) = engine
                        .node(node)
                        .map_or((SkuId(0), RegionId(0)), |n| (n.sku, n.region));
                    self.records.insert(
                        lease,
                        LeaseRecord {
                            lease,
                            bid,
                            buyer,
                            supplier,
                            node,
                            offer,
                            sku,
                            region,
                            kind,
                            gpus,
                            gpu_mask: 0,
                            gpu_uuids: Vec::new(),
                            price,
                            filled_ms: now_ms,
                            start_ms,
                            end_ms,
                            phase: Phase::Pending,
                            provision_deadline_ms: None,
                            ready_ms: None,
                            access: None,
                            notice_deadline_ms: None,
                            ended: None,
                            failure: None,
                            failure_cause: None,
                            wipe: None,
                            migrated_from: None,
                            migrated_to: Vec::new(),
                            failover_failed: None,
                            failover_failed_detail: None,
                            sla: None,
                        },
                    );
                    self.by_buyer.insert((buyer, lease));
                    self.by_supplier.insert((supplier, lease));
                    self.by_node.insert((node, lease));
                    self.add_ref(bid);
                    self.bump(node);
                }
                Event::LeaseStarted {
                    lease,
                    gpu_mask,
                    start_ms,
                    node,
                    ..
                } => {
                    let delivery = engine.config().delivery;
                    let uuids: Vec<String> = engine
                        .attestation(node)
                        .filter(|a| a.mismatch.is_none())
                        .map(|a| {
                            (0..32usize)
                                .filter(|i| gpu_mask & (1 << i) != 0)
                                .filter_map(|i| a.uuids.get(i).cloned())
                                .collect()
                        })
                        .unwrap_or_default();
                    if let Some(r) = self.record_mut(lease) {
                        r.gpu_mask = gpu_mask;
                        r.gpu_uuids = uuids;
                        if delivery {
                            r.phase = Phase::Provisioning;
                        } else {
                            r.phase = Phase::Running;
                            r.ready_ms = Some(start_ms);
                        }
                    }
                    self.bump(node);
                }
                Event::VerificationStarted { node, .. } | Event::VerificationEnded { node, .. } => {
                    self.bump(node);
                }
                Event::ProvisionStarted {
                    lease,
                    node,
                    deadline_ms,
                    ..
                } => {
                    if let Some(r) = self.record_mut(lease) {
                        r.provision_deadline_ms = Some(deadline_ms);
                    }
                    self.bump(node);
                }
                Event::LeaseReady {
                    lease, node, at_ms, ..
                } => {
                    let access = match report {
                        Some(Report::Ready {
                            lease: l, access, ..
                        }) if *l == lease.0 => Some(access.clone()),
                        _ => None,
                    };
                    if let Some(r) = self.record_mut(lease) {
                        r.phase = Phase::Running;
                        r.ready_ms = Some(at_ms);
                        r.provision_deadline_ms = None;
                        // A gang member's access came with its own ready report, before the
                        // gang was whole (§13.3): the last member's report carries only its own.
                        if access.is_some() || r.access.is_none() {
                            r.access = access;
                        }
                    }
                    self.bump(node);
                }
                Event::GangMemberReady { lease, .. } => {
                    // Reported ready, waits unbilled for the rest of its gang (§13.3): it met
                    // its deadline, so none is shown (an agent has nothing to do for it).
                    let access = match report {
                        Some(Report::Ready {
                            lease: l, access, ..
                        }) if *l == lease.0 => Some(access.clone()),
                        _ => None,
                    };
                    if let Some(r) = self.record_mut(lease) {
                        r.provision_deadline_ms = None;
                        if access.is_some() {
                            r.access = access;
                        }
                        let node = r.node;
                        self.bump(node);
                    }
                }
                Event::GangReady { bid, .. }
                | Event::GangFailed { bid, .. }
                | Event::GangDegraded { bid, .. } => {
                    // Every member's gang view changes: their agents refetch.
                    if let Some(g) = engine.gang(bid) {
                        let nodes: Vec<NodeId> = g
                            .members
                            .iter()
                            .filter_map(|m| self.records.get(&m.lease?).map(|r| r.node))
                            .collect();
                        for node in nodes {
                            self.bump(node);
                        }
                    }
                }
                Event::PreemptionNotice {
                    lease, deadline_ms, ..
                } => {
                    if let Some(r) = self.record_mut(lease) {
                        r.notice_deadline_ms = Some(deadline_ms);
                        let node = r.node;
                        self.bump(node);
                    }
                }
                Event::LeaseEnded {
                    lease,
                    reason,
                    at_ms,
                    ..
                } => {
                    let failure = match report {
                        Some(
                            Report::Failed {
                                lease: l, reason, ..
                            }
                            | Report::Lost {
                                lease: l, reason, ..
                            },
                        ) if *l == lease.0 => Some(reason.clone()),
                        _ => None,
                    };
                    let cause = match report {
                        Some(Report::Failed {
                            lease: l,
                            cause: FailureCause::LaunchSpec,
                            ..
                        }) if *l == lease.0 => Some(FailureCause::LaunchSpec),
                        _ => None,
                    };
                    if let Some(r) = self.record_mut(lease) {
                        r.phase = Phase::Ended;
                        r.ended = Some((reason, at_ms));
                        r.provision_deadline_ms = None;
                        r.failure = failure;
                        r.failure_cause = cause;
                        let (bid, node) = (r.bid, r.node);
                        self.drop_ref(bid);
                        touched.push(bid);
                        self.bump(node);
                    }
                }
                Event::LeaseWiping {
                    lease,
                    node,
                    deadline_ms,
                    ..
                } => {
                    if let Some(r) = self.record_mut(lease) {
                        r.wipe = Some(WipeRecord {
                            deadline_ms,
                            torn_down_ms: None,
                            method: None,
                            overdue: false,
                        });
                        let bid = r.bid;
                        self.add_ref(bid);
                    }
                    self.node_wiping.entry(node).or_default().insert(lease);
                    self.bump(node);
                }
                Event::LeaseWiped { lease, node, .. }
                | Event::TeardownOverdue { lease, node, .. } => {
                    let overdue = matches!(e, Event::TeardownOverdue { .. });
                    let method = match report {
                        Some(Report::TornDown {
                            lease: l, method, ..
                        }) if *l == lease.0 => Some(method.clone()),
                        _ => None,
                    };
                    if let Some(r) = self.record_mut(lease) {
                        if let Some(w) = r.wipe.as_mut() {
                            w.overdue = overdue;
                            if !overdue {
                                w.torn_down_ms = Some(now_ms);
                                w.method = method;
                            }
                        }
                        let bid = r.bid;
                        self.drop_ref(bid);
                        touched.push(bid);
                    }
                    if let Some(set) = self.node_wiping.get_mut(&node) {
                        set.remove(&lease);
                        if set.is_empty() {
                            self.node_wiping.remove(&node);
                        }
                    }
                    self.bump(node);
                }
                Event::FailoverFailed {
                    lease,
                    gpus,
                    reason,
                    detail,
                } => {
                    if let Some(r) = self.record_mut(lease) {
                        r.failover_failed = Some((gpus, reason));
                        r.failover_failed_detail = Some(detail);
                    }
                }
                Event::LeaseMigrated { from, to } => {
                    if let Some(r) = self.record_mut(from) {
                        r.migrated_to.push(to);
                    }
                    if let Some(r) = self.record_mut(to) {
                        r.migrated_from = Some(from);
                    }
                }
                _ => {}
            }
        }
        // A repeated ready report on a running lease (accepted, no event) corrects its access
        // details: a supplier that sent a wrong port can fix it.
        if let Some(Report::Ready { lease, access, .. }) = report
            && output.events.is_empty()
            && let Some(r) = self.records.get_mut(&LeaseId(*lease))
            && r.phase == Phase::Running
            && r.access.as_ref() != Some(access)
        {
            r.access = Some(access.clone());
            let node = r.node;
            self.bump(node);
            access_changed = Some(LeaseId(*lease));
        }
        // A wipe reported after its teardown deadline (the engine has let the GPUs go and held
        // the node, so it knows the lease no more): the supplier's report is still the buyer's
        // deletion record, kept as late (issue 25: it answered 404 and was lost).
        if let Some(Report::TornDown {
            account,
            lease,
            method,
        }) = report
            && output.events.iter().any(|e| {
                matches!(
                    e,
                    Event::Rejected {
                        reason: exchange::RejectReason::UnknownLease,
                        ..
                    }
                )
            })
            && let Some(r) = self.records.get_mut(&LeaseId(*lease))
            && r.supplier.0 == *account
            && let Some(w) = r.wipe.as_mut()
            && w.overdue
            && w.torn_down_ms.is_none()
        {
            w.torn_down_ms = Some(now_ms);
            w.method = Some(method.clone());
            let node = r.node;
            self.bump(node);
        }
        // Drop the launch specs no resting bid and no live or wiping lease needs any more.
        for bid in touched {
            if !self.bid_refs.contains_key(&bid) && engine.bid(bid).is_none() {
                self.launch.remove(&bid);
            }
        }
        access_changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_command_names_the_port_only_when_not_22() {
        let mut a = AccessDetails {
            ssh_host: Some("203.0.113.7".into()),
            ssh_port: Some(2222),
            ssh_user: Some("root".into()),
            urls: BTreeMap::new(),
        };
        assert_eq!(
            a.ssh_command().as_deref(),
            Some("ssh -p 2222 root@203.0.113.7")
        );
        a.ssh_port = Some(22);
        a.ssh_user = None;
        assert_eq!(a.ssh_command().as_deref(), Some("ssh 203.0.113.7"));
        a.ssh_host = None;
        assert_eq!(a.ssh_command(), None);
    }
}

/// Failed running leases waiting for their replacements to be ready (delivery on): the SLA
/// credit's outage lasts until the buyer's work runs again, so the ledger's `Failover` fact
/// is sent once every replacement of a failed lease is ready (or ended, or could not be
/// placed), with the latest ready time (docs/settlement.md "Delivery"). A replacement that
/// itself fails over passes its place to its own replacement.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingFailovers {
    /// Failed (billed) lease → (replacements not yet ready, latest ready time so far).
    pending: BTreeMap<LeaseId, (BTreeSet<LeaseId>, Option<i64>)>,
    /// Replacement → the failed lease it stands in for.
    replacement_of: BTreeMap<LeaseId, LeaseId>,
    /// Failed leases touched since the last [`PendingFailovers::settle`].
    #[serde(skip)]
    touched: Vec<LeaseId>,
}

impl PendingFailovers {
    /// `from` failed over (in part) to `to`; `billed`: `from` was billed (ran), so it is owed
    /// a credit itself. Does nothing for a lease that never ran and stands in for nothing.
    pub fn migrated(&mut self, from: LeaseId, to: LeaseId, billed: bool) {
        let original = match self.replacement_of.get(&from) {
            Some(o) => *o,
            None if billed => from,
            None => return,
        };
        let entry = self.pending.entry(original).or_default();
        entry.0.remove(&from);
        entry.0.insert(to);
        self.replacement_of.insert(to, original);
        self.touched.push(original);
    }

    /// A replacement is ready at `at_ms`.
    pub fn ready(&mut self, lease: LeaseId, at_ms: i64) {
        if let Some(original) = self.replacement_of.remove(&lease)
            && let Some(entry) = self.pending.get_mut(&original)
        {
            entry.0.remove(&lease);
            entry.1 = Some(entry.1.map_or(at_ms, |t| t.max(at_ms)));
            self.touched.push(original);
        }
    }

    /// A replacement ended before it was ready. After `node_failure` or `not_delivered` its own
    /// failover follows (a migration passes its place on); any other end (the buyer released
    /// it, its term ran out) ends the outage at `at_ms`.
    pub fn ended(&mut self, lease: LeaseId, fails_over: bool, at_ms: i64) {
        let Some(&original) = self.replacement_of.get(&lease) else {
            return;
        };
        if let Some(entry) = self.pending.get_mut(&original) {
            entry.0.remove(&lease);
            if !fails_over {
                entry.1 = Some(entry.1.map_or(at_ms, |t| t.max(at_ms)));
            }
        }
        self.touched.push(original);
    }

    /// Whether `lease` is a replacement still waiting to be ready.
    pub fn is_replacement(&self, lease: LeaseId) -> bool {
        self.replacement_of.contains_key(&lease)
    }

    /// The failed leases whose replacements are all settled, with the outage's end (the latest
    /// ready time; `None`: nothing ever ran again), for the ledger's `Failover` facts. Call
    /// once an engine output has been followed.
    pub fn settle(&mut self) -> Vec<(LeaseId, Option<i64>)> {
        let mut done = Vec::new();
        let mut touched = std::mem::take(&mut self.touched);
        touched.sort_unstable();
        touched.dedup();
        for original in touched {
            if let Some(entry) = self.pending.get(&original)
                && entry.0.is_empty()
            {
                done.push((original, entry.1));
                self.pending.remove(&original);
                self.replacement_of.retain(|_, o| *o != original);
            }
        }
        done
    }
}
