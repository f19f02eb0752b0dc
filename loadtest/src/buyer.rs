//! A buyer: one websocket ([`WsSession`]), subscribed to its SKUs, keeping a view of the
//! inventory from the snapshot and contiguous deltas ([`InventoryView`]); bids sized and priced
//! from that view when an arrival comes (open loop: latency counts from the scheduled time),
//! each with a launch spec (SSH key, for some buyers a Jupyter image); releases leases a random
//! while after they are ready (a few impatient releases while still provisioning); judges every
//! IOC its view said could fill but that did not (phantom or race); notes failovers
//! (`lease_migrated`, `failover_failed`). Every message both ways is a `gpux-wire` type.
//!
//! **Reopening** (docs/api.md §3.8, issue 25 item 9): private events are not replayed, so
//! after its websocket reopens a buyer re-reads its resting bids (`GET /v1/bids`), its leases
//! (`GET /v1/leases?state=all`, those running since shortly before the old connection's last
//! message) and its balance, and folds them into its report exactly as the missed events
//! would have ([`Buyer::reconcile`]): bids placed whose reply was lost and that rest (matched
//! by client order id), bids that closed, leases that started, became ready, ended, failed
//! over or found no capacity. The new connection is opened (and subscribed) first, so every
//! event is either on it or in the re-read; events seen twice are folded once. A placed bid
//! whose reply was lost and that the re-read does not show stays "outcome unknown"
//! ([`BuyerReport::lost_requests`]) until the end check finds it.
//!
//! **Trust** (issue 26): a share of its bids require trust as its [`TrustPlan`] says
//! (`constraints.verified`, `constraints.min_reliability`, docs/market-rules.md §12.2–12.3).
//! The report keeps each such bid's id with its requirement, and every bid id acknowledged,
//! so the end check can judge the leases they made. The inventory feed does not filter by
//! trust, so an unfilled trust IOC is not judged phantom.
//!
//! **Gangs** (issue 27, docs/market-rules.md §13): [`GANG_SHARE`] of its bids (drawn from
//! their own stream, so its other bids are what they were) are all-or-none gangs of 2–4
//! nodes × G GPUs, G a node's GPUs as the view shows the SKU's largest single-node block, or
//! half of it — or, for most, shaped after a domain that `GET /v1/inventory/domains` (read
//! every [`DOMAINS_EVERY`]) showed whole free nodes in; mostly IOC (some GTC with an expiry), mostly scoped to one fabric domain (some
//! to one region), a quarter `end_all`; no trust constraints and never judged phantom (the
//! feed does not show domains). The report keeps what each gang's reply and events said
//! ([`GangSeen`]); a gang that became whole is released as a whole bid
//! (`POST /v1/bids/{id}/release`) a while later, its members not one by one (a few are
//! released impatiently while provisioning, as any lease).

use crate::scenario::{MIN_RELIABILITY, MIN_SLA, TrustPlan};
use crate::stats::{Shared, wire_name};
use gpux_client::wire::ws::{ClientMsg, InventoryDelta, InventorySnapshot, ServerMsg};
use gpux_client::wire::{
    BalanceView, BidPlaced, BidRequest, BidStatusDto, BidView, CloseReasonDto, ConstraintsDto,
    DecimalStr, DomainInventoryView, GangRequest, GangScopeDto, IdStr, KindDto, LaunchRequest,
    LeaseView, MemberLossDto, MinSlaDto, PlacementDto, TifDto, parse_id,
};
use gpux_client::{Client, ClientError, InventoryView, LevelKey, ViewError, WsSession};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rust_decimal::Decimal;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch};

/// Feed history kept per SKU for the end check: (seq, hash of the levels).
const HISTORY: usize = 4096;
/// Share of leases a buyer releases shortly after they start, usually before they are ready.
const IMPATIENT: f64 = 0.03;
/// How long the judge waits for a buyer's view to reach an unfilled IOC's commit before it
/// gives up and counts the bid "view too late" (neither phantom nor race: the feed was late).
pub const VIEW_LATE_BOUND: Duration = Duration::from_secs(10);
/// How long a buyer keeps trying to reopen a failed websocket (a gateway restarting, a
/// takeover) before the run fails.
pub const RECONNECT_FOR: Duration = Duration::from_secs(60);
/// After a reopen, the leases re-read are those running at or after the old connection's
/// last message less this margin, ms: events on one connection arrive in order, so what it
/// missed happened after its last message; the margin covers commit-to-delivery delay and a
/// remote gateway's clock skew.
pub const RESYNC_MARGIN_MS: i64 = 60_000;
/// Leases per page of the re-read after a reopen (the API's maximum).
const RESYNC_PAGE: usize = 500;
/// Share of a buyer's bids that are gangs by default (`--gang-share`).
pub const GANG_SHARE: f64 = 0.05;
/// Seed stream of the buyers' gang draws (whether a bid is a gang, and its shape).
const GANG_STREAM: u64 = 0x7E57_0000_5EED_0004;
/// How often a buyer reads the domain inventory (`GET /v1/inventory/domains`) for its gangs.
pub const DOMAINS_EVERY: Duration = Duration::from_secs(1);
/// Share of gang bids shaped after a domain the domain inventory showed (when it showed one
/// of the buyer's SKUs); the others are shaped from the feed alone.
const GANG_INFORMED: f64 = 0.7;

/// A gang bid as its buyer saw it: its shape from the request, what its reply said, and the
/// gang events of its feed (docs/market-rules.md §13).
#[derive(Clone, Debug, Default)]
pub struct GangSeen {
    /// Its shape (`None`: events seen for a bid whose reply was lost).
    pub spec: Option<GangRequest>,
    /// IOC (else GTC).
    pub ioc: bool,
    /// The reply's status (`filled`, `resting`, `closed`).
    pub status: Option<String>,
    /// GPUs the reply said filled.
    pub filled_now: u32,
    /// The reply's close reason.
    pub close_reason: Option<String>,
    /// The reply's `close_detail.fillable`.
    pub fillable: Option<u32>,
    /// `bid_closed`: (GPUs filled over its life, reason).
    pub closed: Option<(u32, String)>,
    /// `gang_formed`: the member leases in rank order.
    pub formed: Option<Vec<String>>,
    /// `gang_member_ready` events (members that waited for the rest).
    pub member_ready: u64,
    /// `gang_ready`: when the gang became whole (every member bills from then).
    pub ready_at: Option<i64>,
    /// `gang_failed`: the member whose loss failed it.
    pub failed: Option<String>,
    /// `gang_degraded` events.
    pub degraded: u64,
    /// The buyer released the whole bid.
    pub released: bool,
}

/// A buyer's launch spec (seeded): its SSH key, and for about a third of buyers a PyTorch
/// image with Jupyter's port exposed.
pub fn launch_spec(name: &str, seed: u64) -> LaunchRequest {
    const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut rng = StdRng::seed_from_u64(seed ^ 0x55AA);
    // An ed25519 public key's shape: the fixed 25-character prefix, then 43 characters.
    let body: String = (0..43)
        .map(|_| B64[rng.random_range(0..B64.len())] as char)
        .collect();
    let key = format!("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{body} {name}@loadtest");
    if rng.random_bool(1.0 / 3.0) {
        LaunchRequest {
            ssh_keys: vec![key],
            image: Some("nvcr.io/nvidia/pytorch:24.05-py3".into()),
            command: ["jupyter", "lab", "--ip=0.0.0.0", "--no-browser"]
                .map(String::from)
                .into(),
            env: BTreeMap::from([("HF_HOME".into(), "/scratch/hf".into())]),
            ports: vec![8888],
            disk_gb: 200,
        }
    } else {
        LaunchRequest {
            ssh_keys: vec![key],
            ..LaunchRequest::default()
        }
    }
}

/// One SKU's view: the client's [`InventoryView`] (snapshot, then contiguous deltas) with the
/// recent history the end check asks about and the gaps seen.
#[derive(Clone, Debug, Default)]
pub struct View {
    /// Levels and the last applied per-SKU sequence number.
    pub inv: InventoryView,
    /// Recent (seq, levels hash).
    pub history: VecDeque<(u64, u64)>,
    /// Gaps seen (must stay 0).
    pub gaps: u64,
}

/// Hash of a view's levels (for comparing views at one sequence number).
pub fn levels_hash(inv: &InventoryView) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for (k, l) in inv.levels() {
        (k, l.free_gpus, l.max_single_node).hash(&mut h);
    }
    h.finish()
}

impl View {
    /// The last applied per-SKU sequence number (0 before the snapshot).
    pub fn seq(&self) -> u64 {
        self.inv.seq().unwrap_or(0)
    }

    /// Replaces the view with a snapshot (a subscription's first, or the server's resync).
    ///
    /// # Errors
    /// A level price that is not a decimal (the view is unchanged).
    pub fn apply_snapshot(&mut self, s: &InventorySnapshot) -> Result<(), ViewError> {
        self.inv.apply_snapshot(s)?;
        self.remember();
        Ok(())
    }

    /// Applies a delta. One that does not continue the view counts as a gap, and the view
    /// then follows on from it, so each missed stretch counts once; one before the snapshot
    /// counts as a gap and is dropped (the snapshot follows).
    ///
    /// # Errors
    /// A level price that is not a decimal (the view is unchanged).
    pub fn apply_delta(&mut self, d: &InventoryDelta) -> Result<(), ViewError> {
        match self.inv.apply_delta(d) {
            Ok(()) => {}
            Err(ViewError::Gap { expected, .. }) => {
                self.gaps += 1;
                let follow_on = InventoryDelta {
                    first_seq: expected,
                    ..d.clone()
                };
                self.inv.apply_delta(&follow_on)?;
            }
            Err(ViewError::NoSnapshot) => {
                self.gaps += 1;
                return Ok(());
            }
            Err(e) => return Err(e),
        }
        self.remember();
        Ok(())
    }

    fn remember(&mut self) {
        self.history.push_back((self.seq(), levels_hash(&self.inv)));
        if self.history.len() > HISTORY {
            self.history.pop_front();
        }
    }

    /// The cheapest price of `kind` whose largest single-node block fits `gpus`.
    pub fn best(&self, kind: KindDto, gpus: u32) -> Option<Decimal> {
        let level = self.inv.best(kind, gpus)?;
        LevelKey::of(level).ok().map(|k| k.price)
    }

    /// Free GPUs in the view.
    pub fn depth(&self) -> u64 {
        self.inv.free_gpus()
    }
}

/// What a bid requires of the nodes it fills on (docs/market-rules.md §12.2–12.3).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustReq {
    /// `constraints.verified`.
    pub verified: bool,
    /// `constraints.min_reliability`.
    pub min_reliability: Option<String>,
    /// `constraints.min_sla.availability` (percent; §12.4).
    pub min_sla: Option<String>,
}

impl TrustReq {
    /// Whether it requires anything.
    pub fn any(&self) -> bool {
        self.verified || self.min_reliability.is_some() || self.min_sla.is_some()
    }

    /// Its name in the counts: `verified`, `min_reliability`, both, or `min_sla`.
    pub fn label(&self) -> &'static str {
        match (self.verified, self.min_reliability.is_some()) {
            _ if self.min_sla.is_some() => "min_sla",
            (true, true) => "verified+min_reliability",
            (true, false) => "verified",
            (false, true) => "min_reliability",
            (false, false) => "none",
        }
    }
}

/// A started lease as the buyer saw it.
#[derive(Clone, Debug)]
pub struct LeaseRecord {
    /// Lease id.
    pub id: String,
    /// Node id.
    pub node: String,
    /// GPU indexes on the node.
    pub gpus: Vec<u64>,
    /// Start, ms since epoch.
    pub start_ms: i64,
    /// Scheduled end, ms since epoch.
    pub end_ms: i64,
}

/// An end-of-run question: the hash of this buyer's view of `sku` at `seq`.
pub struct Probe {
    /// SKU.
    pub sku: String,
    /// Sequence number.
    pub seq: u64,
    /// Answer: what the view was at `seq`.
    pub reply: oneshot::Sender<AtSeq>,
}

/// A buyer's view at one sequence number ([`Probe`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtSeq {
    /// The view was at that seq, with this hash of its levels.
    At(u64),
    /// One delta carried the view from before that seq to after it (the feed batches a
    /// lagging subscriber's deltas): there is no view at that seq to compare.
    JumpedOver,
    /// The seq is older than the history kept ([`HISTORY`] messages per SKU).
    Forgotten,
}

/// What a buyer reports at the end.
#[derive(Debug, Default)]
pub struct BuyerReport {
    /// Buyer name.
    pub name: String,
    /// Leases seen starting.
    pub leases: Vec<LeaseRecord>,
    /// Lease id → end time seen.
    pub ended: HashMap<String, i64>,
    /// Bids acknowledged as resting (id).
    pub resting: HashSet<String>,
    /// Bids seen closed (id).
    pub closed: HashSet<String>,
    /// Bids acknowledged (any status).
    pub accepted: u64,
    /// Feed gaps (must be 0).
    pub gaps: u64,
    /// Leases seen ready (`lease_ready`).
    pub ready: HashSet<String>,
    /// Failovers seen: lease → its replacements (`lease_migrated`).
    pub migrated: HashMap<String, Vec<String>>,
    /// Failovers that found no capacity: lease → reason (`failover_failed`).
    pub failover_failed: HashMap<String, String>,
    /// Client order ids of bids whose reply was lost with a connection and that no re-read
    /// has shown resting since (their outcome unknown: filled, closed, or never committed).
    pub lost_requests: HashSet<String>,
    /// The balance, CNY, as last re-read after a reopen.
    pub balance: Option<String>,
    /// Bids that require trust: id → requirement (from their replies, or the re-read of a
    /// resting bid whose reply was lost).
    pub trust_bids: HashMap<String, TrustReq>,
    /// Every bid id acknowledged (a lease of a bid not here was made by a bid whose reply was
    /// lost: its requirement is unknown).
    pub bid_ids: HashSet<String>,
    /// Client order ids of trust bids whose reply was lost and that no re-read showed.
    pub lost_trust: HashSet<String>,
    /// Gang bids by id (issue 27).
    pub gangs: HashMap<String, GangSeen>,
}

/// What a buyer re-reads after its websocket reopens (docs/api.md §3.8).
#[derive(Clone, Debug, Default)]
pub struct Resync {
    /// `GET /v1/bids`: its resting bids.
    pub bids: Vec<BidView>,
    /// `GET /v1/leases?state=all&from_ms=…`: its leases running since shortly before the old
    /// connection's last message (every page).
    pub leases: Vec<LeaseView>,
    /// `GET /v1/balance`.
    pub balance: Option<BalanceView>,
}

struct Pending {
    sent: Instant,
    kind: &'static str,
    /// For IOC bids the view said could fill: (sku, lease kind, gpus, limit).
    fillable: Option<(String, KindDto, u32, Decimal)>,
    /// What a bid requires of nodes (none for other commands and plain bids).
    trust: Option<TrustReq>,
    /// A gang bid's shape and whether it is IOC.
    gang: Option<(GangRequest, bool)>,
}

/// What a reply says about the command it answers.
enum Reply<'a> {
    /// `bid_accepted`: what the bid did.
    Bid(&'a BidPlaced),
    /// `lease_released`, `bids_canceled`.
    Done,
    /// `rejected`, with the API's code.
    Rejected(&'a str),
}

struct Judgement {
    due_seq: u64,
    deadline: Instant,
    sku: String,
    kind: KindDto,
    gpus: u32,
    limit: Decimal,
}

/// How far the feed has come by `m`: the sequence number of the feed's own messages
/// (inventory, trades, private events); `None` for replies and pushes, which travel another
/// path and may arrive first.
fn feed_seq(m: &ServerMsg) -> Option<u64> {
    match m {
        ServerMsg::InventorySnapshot(s) => Some(s.seq.max(s.commit_seq)),
        ServerMsg::InventoryDelta(d) => Some(d.commit_seq),
        ServerMsg::Trade { seq, .. }
        | ServerMsg::Fill { seq, .. }
        | ServerMsg::LeaseStarted { seq, .. }
        | ServerMsg::PreemptionNotice { seq, .. }
        | ServerMsg::LeaseEnded { seq, .. }
        | ServerMsg::LeaseMigrated { seq, .. }
        | ServerMsg::FailoverFailed { seq, .. }
        | ServerMsg::BidRested { seq, .. }
        | ServerMsg::BidClosed { seq, .. }
        | ServerMsg::LeaseAssigned { seq, .. }
        | ServerMsg::LeaseNotice { seq, .. }
        | ServerMsg::LeaseProvisioning { seq, .. }
        | ServerMsg::LeaseReady { seq, .. }
        | ServerMsg::LeaseAccessChanged { seq, .. }
        | ServerMsg::LeaseWiping { seq, .. }
        | ServerMsg::LeaseTornDown { seq, .. }
        | ServerMsg::TeardownOverdue { seq, .. }
        | ServerMsg::GangFormed { seq, .. }
        | ServerMsg::GangMemberReady { seq, .. }
        | ServerMsg::GangReady { seq, .. }
        | ServerMsg::GangFailed { seq, .. }
        | ServerMsg::GangDegraded { seq, .. }
        | ServerMsg::NodeHeld { seq, .. } => Some(*seq),
        ServerMsg::NodeResumed { seq, .. } => *seq,
        ServerMsg::Welcome { .. }
        | ServerMsg::Rejected { .. }
        | ServerMsg::Subscribed { .. }
        | ServerMsg::Unsubscribed { .. }
        | ServerMsg::BidAccepted { .. }
        | ServerMsg::BidCanceled { .. }
        | ServerMsg::BidsCanceled { .. }
        | ServerMsg::LeaseReleased { .. }
        | ServerMsg::Balance { .. }
        | ServerMsg::Pong { .. }
        | ServerMsg::LeaseReported { .. } => None,
    }
}

fn lock(stats: &Shared) -> anyhow::Result<std::sync::MutexGuard<'_, crate::stats::Stats>> {
    stats.lock().map_err(|_| anyhow::anyhow!("stats"))
}

/// A buyer's connection and its state.
struct Buyer {
    name: String,
    rng: StdRng,
    stats: Shared,
    launch: LaunchRequest,
    release_planned: HashSet<String>,
    views: HashMap<String, View>,
    pending: HashMap<String, Pending>,
    judgements: Vec<Judgement>,
    releases: BinaryHeap<std::cmp::Reverse<(Instant, String)>>,
    report: BuyerReport,
    n: u64,
    last_seq: u64,
    /// Leases recorded (seen starting or re-read), so none is recorded twice.
    known_leases: HashSet<String>,
    /// Wall clock of the last message of the current connection, ms since epoch (0: none).
    last_message_ms: i64,
    /// What its bids require ([`TrustPlan`]).
    trust: TrustPlan,
    /// Trust bids placed: client order id → requirement.
    trust_coids: HashMap<String, TrustReq>,
    /// Draws of the gang bids ([`GANG_STREAM`]).
    gang_rng: StdRng,
    /// Share of bids that are gangs.
    gang_share: f64,
    /// Leases of gangs (members and their replacements) → the gang's bid.
    gang_leases: HashMap<String, String>,
    /// Whole gangs to release as a bid, when.
    bid_releases: BinaryHeap<std::cmp::Reverse<(Instant, String)>>,
    /// The latest domain inventory read (rows with whole free nodes for a gang of 2).
    domains: Option<watch::Receiver<Vec<DomainInventoryView>>>,
}

impl Buyer {
    /// A buyer named `name` before its first connection.
    fn new(name: String, seed: u64, stats: Shared, trust: TrustPlan) -> Buyer {
        Buyer {
            launch: launch_spec(&name, seed),
            rng: StdRng::seed_from_u64(seed),
            report: BuyerReport {
                name: name.clone(),
                ..BuyerReport::default()
            },
            name,
            stats,
            release_planned: HashSet::new(),
            views: HashMap::new(),
            pending: HashMap::new(),
            judgements: Vec::new(),
            releases: BinaryHeap::new(),
            n: 0,
            last_seq: 0,
            known_leases: HashSet::new(),
            last_message_ms: 0,
            trust,
            trust_coids: HashMap::new(),
            gang_rng: StdRng::seed_from_u64(seed ^ GANG_STREAM),
            gang_share: GANG_SHARE,
            gang_leases: HashMap::new(),
            bid_releases: BinaryHeap::new(),
            domains: None,
        }
    }

    /// A gang's shape for a bid on `sku` (one of `skus`) of `kind` (module docs), drawn from
    /// the gang stream: (SKU, shape, IOC, limit price, GTC expiry). Most are shaped after a
    /// domain of one of `skus` that the domain inventory showed whole free nodes in (its
    /// largest gang, at most 4 nodes), the rest from the feed alone.
    fn gang_shape(
        &mut self,
        skus: &[String],
        sku: &str,
        kind: KindDto,
    ) -> (String, GangRequest, bool, Decimal, Option<i64>) {
        let rows: Vec<(String, u32, u32, Option<Decimal>)> = self
            .domains
            .as_ref()
            .map(|d| {
                d.borrow()
                    .iter()
                    .filter(|r| r.largest_gang.nodes >= 2 && skus.contains(&r.sku))
                    .map(|r| {
                        (
                            r.sku.clone(),
                            r.largest_gang.nodes,
                            r.largest_gang.gpus_per_node,
                            r.cheapest_spot_price.parse::<Decimal>().ok(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let informed = self.gang_rng.random_bool(GANG_INFORMED);
        let pick = (informed && !rows.is_empty())
            .then(|| rows[self.gang_rng.random_range(0..rows.len())].clone());
        let sku = pick.as_ref().map_or(sku, |p| p.0.as_str()).to_string();
        let view = self.views.get(&sku);
        let node = match &pick {
            Some(p) => p.2,
            None => [8u32, 4, 2, 1]
                .into_iter()
                .find(|g| view.and_then(|v| v.best(kind, *g)).is_some())
                .unwrap_or(8),
        };
        let rng = &mut self.gang_rng;
        let g = if node > 1 && rng.random_bool(0.5) {
            node / 2
        } else {
            node
        };
        let nodes = rng
            .random_range(2..=4u32)
            .min(pick.as_ref().map_or(4, |p| p.1));
        let ioc = rng.random_bool(0.8);
        let scope = if rng.random_bool(0.8) {
            GangScopeDto::Domain
        } else {
            GangScopeDto::Region
        };
        let on_member_loss = if rng.random_bool(0.25) {
            MemberLossDto::EndAll
        } else {
            MemberLossDto::Keep
        };
        let expiry = (!ioc).then(|| now_ms() + i64::from(rng.random_range(10_000u32..30_000)));
        // A gang takes N nodes of one place: pay up to 30 % above the cheapest block.
        let limit = view
            .and_then(|v| v.best(kind, g))
            .max(pick.and_then(|p| p.3))
            .map_or(Decimal::new(150, 2), |p| {
                (p * Decimal::new(130, 2)).round_dp(4)
            });
        let shape = GangRequest {
            nodes,
            gpus_per_node: g,
            scope,
            on_member_loss,
        };
        (sku, shape, ioc, limit, expiry)
    }

    /// Draws what a bid requires by the buyer's [`TrustPlan`] (no draw for a buyer without
    /// one, so its sequence of bids is what it was before trust existed).
    fn draw_trust(&mut self) -> TrustReq {
        if self.trust == TrustPlan::default() {
            return TrustReq::default();
        }
        let u: f64 = self.rng.random();
        let (v, m, sla) = (
            self.trust.verified,
            self.trust.min_reliability,
            self.trust.min_sla,
        );
        if u < m {
            TrustReq {
                verified: u < m / 2.0,
                min_reliability: Some(MIN_RELIABILITY.to_string()),
                min_sla: None,
            }
        } else if u < m + v {
            TrustReq {
                verified: true,
                ..TrustReq::default()
            }
        } else if u < m + v + sla {
            TrustReq {
                min_sla: Some(MIN_SLA.to_string()),
                ..TrustReq::default()
            }
        } else {
            TrustReq::default()
        }
    }

    /// An arrival scheduled at `scheduled`: a bid on one of `skus`, priced from the view.
    fn bid(&mut self, skus: &[String], scheduled: Instant) -> ClientMsg {
        let gang = self.gang_share > 0.0 && self.gang_rng.random_bool(self.gang_share.min(1.0));
        let name = &self.name;
        let rng = &mut self.rng;
        self.n += 1;
        let sku = &skus[rng.random_range(0..skus.len())];
        let gpus: u32 = if rng.random_bool(0.25) { 8 } else { 1 };
        let kind = if rng.random_bool(0.75) {
            KindDto::Spot
        } else {
            KindDto::Preemptible
        };
        let ioc = rng.random_bool(0.7);
        let best = self.views.get(sku).and_then(|v| v.best(kind, gpus));
        let (limit, fillable) = match (best, ioc) {
            (Some(p), true) => (p, true),
            (Some(p), false) => ((p * Decimal::new(95, 2)).round_dp(4), false),
            (None, _) => (Decimal::new(150, 2), false),
        };
        let (sku, rid) = (sku.clone(), format!("{name}-{}", self.n));
        let trust = self.draw_trust();
        // (Drawn all the same, so the buyer's other bids stay what they were.)
        let trust = if gang { TrustReq::default() } else { trust };
        let rng = &mut self.rng;
        // The feed's levels count every listed node, trusted or not: a trust IOC's view
        // cannot say it could fill; nor does it show fabric domains, for a gang.
        let fillable = fillable && !trust.any() && !gang;
        if trust.any() {
            self.trust_coids.insert(rid.clone(), trust.clone());
        }
        let mut bid = BidRequest {
            client_order_id: rid.clone(),
            sku: sku.clone(),
            gpus: Some(gpus),
            limit_price: DecimalStr(limit),
            kind,
            placement: PlacementDto::SingleNode,
            gang: None,
            min_gpus: None,
            constraints: ConstraintsDto {
                verified: trust.verified,
                min_reliability: trust.min_reliability.clone(),
                min_sla: trust.min_sla.clone().map(|availability| MinSlaDto {
                    availability: Some(availability),
                    credit_multiple: None,
                }),
                ..ConstraintsDto::default()
            },
            time_in_force: if ioc { TifDto::Ioc } else { TifDto::Gtc },
            // Drawn as a u32, as the seeded plan always has (a u64 draw takes other bits).
            duration_s: Some(u64::from(rng.random_range(60u32..1800))),
            expires_at_ms: (!ioc).then(|| now_ms() + 20_000),
            launch: Some(self.launch.clone()),
        };
        let gang = gang.then(|| {
            let (gang_sku, shape, ioc, limit, expiry) = self.gang_shape(skus, &sku, kind);
            bid.sku = gang_sku;
            // `gpus` may be left out (= nodes × GPUs per node): half the gangs do.
            if self.gang_rng.random_bool(0.5) {
                bid.gpus = None;
            } else {
                bid.gpus = Some(shape.nodes * shape.gpus_per_node);
            }
            bid.placement = PlacementDto::Gang;
            bid.gang = Some(shape.clone());
            bid.limit_price = DecimalStr(limit);
            bid.time_in_force = if ioc { TifDto::Ioc } else { TifDto::Gtc };
            bid.expires_at_ms = expiry;
            (shape, ioc)
        });
        self.pending.insert(
            rid.clone(),
            Pending {
                sent: scheduled,
                kind: "place_bid",
                fillable: fillable.then(|| (sku.clone(), kind, gpus, limit)),
                trust: trust.any().then_some(trust),
                gang,
            },
        );
        ClientMsg::PlaceBid {
            request_id: Some(rid),
            bid,
        }
    }

    /// The next planned release, unless the lease already ended.
    fn release(&mut self) -> anyhow::Result<Option<ClientMsg>> {
        let Some(std::cmp::Reverse((_, lease))) = self.releases.pop() else {
            return Ok(None);
        };
        if self.report.ended.contains_key(&lease) {
            return Ok(None);
        }
        let id = parse_id(&lease)
            .ok_or_else(|| anyhow::anyhow!("{}: lease id {lease:?} is not an id", self.name))?;
        self.n += 1;
        let rid = format!("{}-r{}", self.name, self.n);
        self.pending.insert(
            rid.clone(),
            Pending {
                sent: Instant::now(),
                kind: "release_lease",
                fillable: None,
                trust: None,
                gang: None,
            },
        );
        Ok(Some(ClientMsg::ReleaseLease {
            request_id: Some(rid),
            lease_id: IdStr(id),
        }))
    }

    /// The next whole gang due for release as a bid, unless every lease of it already ended.
    fn bid_release(&mut self) -> Option<String> {
        let std::cmp::Reverse((_, bid)) = self.bid_releases.pop()?;
        let live = self
            .gang_leases
            .iter()
            .any(|(l, b)| *b == bid && !self.report.ended.contains_key(l));
        let g = self.report.gangs.entry(bid.clone()).or_default();
        if !live || g.released {
            return None;
        }
        g.released = true;
        Some(bid)
    }

    /// Plans releasing `lease` after a random hold in `ms`, once per lease.
    fn plan_release(&mut self, lease: String, ms: std::ops::Range<u64>) {
        if self.release_planned.insert(lease.clone()) {
            let hold = Duration::from_millis(self.rng.random_range(ms));
            self.releases
                .push(std::cmp::Reverse((Instant::now() + hold, lease)));
        }
    }

    /// A reply to one of this buyer's commands: counts it against the command it answers.
    fn reply(&mut self, request_id: Option<String>, reply: Reply<'_>) -> anyhow::Result<()> {
        let Some(p) = request_id.and_then(|r| self.pending.remove(&r)) else {
            return Ok(());
        };
        let mut st = lock(&self.stats)?;
        let bid = match reply {
            Reply::Rejected(code) => {
                st.error(code);
                if let Some(t) = &p.trust {
                    *st.trust_bids
                        .entry(format!("{}: rejected {code}", t.label()))
                        .or_default() += 1;
                }
                return Ok(());
            }
            Reply::Done => {
                st.ack(p.kind, p.sent);
                return Ok(());
            }
            Reply::Bid(bid) => bid,
        };
        st.ack(p.kind, p.sent);
        self.report.accepted += 1;
        *st.outcomes.entry(wire_name(&bid.status)).or_default() += 1;
        if let Some(id) = &bid.bid_id {
            self.report.bid_ids.insert(id.clone());
        }
        if let (Some((shape, ioc)), Some(id)) = (p.gang, &bid.bid_id) {
            let g = self.report.gangs.entry(id.clone()).or_default();
            g.spec = Some(shape);
            g.ioc = ioc;
            g.status = Some(wire_name(&bid.status));
            g.filled_now = bid.filled_gpus;
            g.close_reason = bid.close_reason.as_ref().map(wire_name);
            g.fillable = bid.close_detail.as_ref().and_then(|d| d.fillable);
        }
        if let Some(t) = p.trust {
            let label = t.label();
            *st.trust_bids
                .entry(format!("{label}: {}", wire_name(&bid.status)))
                .or_default() += 1;
            if bid.close_reason == Some(CloseReasonDto::Trust) {
                *st.trust_bids
                    .entry(format!("{label}: closed by trust"))
                    .or_default() += 1;
            }
            if bid.filled_gpus > 0 {
                *st.trust_bids
                    .entry(format!("{label}: GPUs filled"))
                    .or_default() += u64::from(bid.filled_gpus);
            }
            if let Some(id) = &bid.bid_id {
                self.report.trust_bids.insert(id.clone(), t);
            }
        }
        if bid.status == BidStatusDto::Resting
            && let Some(id) = &bid.bid_id
        {
            self.report.resting.insert(id.clone());
        }
        if let Some((sku, kind, gpus, limit)) = p.fillable {
            st.fillable_iocs += 1;
            if bid.filled_gpus < gpus {
                self.judgements.push(Judgement {
                    due_seq: bid.seq,
                    deadline: Instant::now() + VIEW_LATE_BOUND,
                    sku,
                    kind,
                    gpus,
                    limit,
                });
            }
        }
        Ok(())
    }

    /// A message from the server.
    fn on_message(&mut self, m: ServerMsg) -> anyhow::Result<()> {
        self.last_message_ms = now_ms();
        if let Some(seq) = feed_seq(&m) {
            self.last_seq = self.last_seq.max(seq);
        }
        match m {
            ServerMsg::InventorySnapshot(s) => {
                self.views
                    .entry(s.sku.clone())
                    .or_default()
                    .apply_snapshot(&s)?;
            }
            ServerMsg::InventoryDelta(d) => {
                let lag_us = (now_us() - d.committed_at_ms * 1000).max(1) as u64;
                lock(&self.stats)?.feed_lag.record(lag_us).ok();
                self.views
                    .entry(d.sku.clone())
                    .or_default()
                    .apply_delta(&d)?;
            }
            ServerMsg::BidAccepted { request_id, bid } => {
                self.reply(request_id, Reply::Bid(&bid))?
            }
            ServerMsg::LeaseReleased { request_id, .. }
            | ServerMsg::BidsCanceled { request_id, .. } => self.reply(request_id, Reply::Done)?,
            ServerMsg::Rejected {
                request_id, code, ..
            } => self.reply(request_id, Reply::Rejected(&code))?,
            ServerMsg::LeaseStarted {
                lease_id,
                node_id,
                gpu_indexes,
                start_ms,
                end_ms,
                ..
            } => {
                if !self.known_leases.insert(lease_id.clone()) {
                    // Already re-read after a reopen.
                    return Ok(());
                }
                lock(&self.stats)?.leases += 1;
                self.report.leases.push(LeaseRecord {
                    id: lease_id.clone(),
                    node: node_id,
                    gpus: gpu_indexes.into_iter().map(u64::from).collect(),
                    start_ms,
                    end_ms,
                });
                if self.rng.random_bool(IMPATIENT) {
                    self.plan_release(lease_id, 300..2_000);
                }
            }
            ServerMsg::LeaseReady { lease_id, .. } => {
                self.report.ready.insert(lease_id.clone());
                // A gang's members are released with their bid.
                if !self.gang_leases.contains_key(&lease_id) {
                    self.plan_release(lease_id, 1_000..6_000);
                }
            }
            ServerMsg::LeaseMigrated {
                from_lease_id,
                to_lease_id,
                ..
            } => {
                if let Some(bid) = self.gang_leases.get(&from_lease_id).cloned() {
                    self.gang_leases.insert(to_lease_id.clone(), bid);
                }
                self.migrated(from_lease_id, to_lease_id)
            }
            ServerMsg::GangFormed {
                bid_id, members, ..
            } => {
                for m in &members {
                    self.gang_leases.insert(m.clone(), bid_id.clone());
                }
                self.report.gangs.entry(bid_id).or_default().formed = Some(members);
            }
            ServerMsg::GangMemberReady { bid_id, .. } => {
                self.report.gangs.entry(bid_id).or_default().member_ready += 1;
            }
            ServerMsg::GangReady { bid_id, at_ms, .. } => {
                self.report
                    .gangs
                    .entry(bid_id.clone())
                    .or_default()
                    .ready_at = Some(at_ms);
                let hold = Duration::from_millis(self.rng.random_range(1_000..6_000));
                self.bid_releases
                    .push(std::cmp::Reverse((Instant::now() + hold, bid_id)));
            }
            ServerMsg::GangFailed {
                bid_id,
                lost_lease_id,
                ..
            } => {
                self.report.gangs.entry(bid_id).or_default().failed = Some(lost_lease_id);
            }
            ServerMsg::GangDegraded { bid_id, .. } => {
                self.report.gangs.entry(bid_id).or_default().degraded += 1;
            }
            ServerMsg::FailoverFailed {
                lease_id, reason, ..
            } => {
                self.report
                    .failover_failed
                    .insert(lease_id, wire_name(&reason));
            }
            ServerMsg::LeaseEnded {
                lease_id, at_ms, ..
            } => {
                self.report.ended.insert(lease_id, at_ms);
            }
            ServerMsg::BidClosed {
                bid_id,
                filled,
                reason,
                ..
            } => {
                if let Some(g) = self.report.gangs.get_mut(&bid_id) {
                    g.closed = Some((filled, wire_name(&reason)));
                } else if self.gang_leases.values().any(|b| *b == bid_id) {
                    self.report.gangs.entry(bid_id.clone()).or_default().closed =
                        Some((filled, wire_name(&reason)));
                }
                self.report.closed.insert(bid_id);
            }
            _ => {}
        }
        Ok(())
    }

    /// Notes a failover of `from` to `to`, once.
    fn migrated(&mut self, from: String, to: String) {
        let to_list = self.report.migrated.entry(from).or_default();
        if !to_list.contains(&to) {
            to_list.push(to);
        }
    }

    /// Folds what a buyer re-read after its websocket reopened into its report, as the events
    /// the old connection missed would have (module docs). `lost` holds the client order ids
    /// of the bids placed whose reply was lost with that connection.
    ///
    /// Bids: one listed whose client order id was lost rests (as its reply would have said);
    /// one acknowledged resting that is no longer listed closed. A listed bid neither
    /// acknowledged nor lost is left for the end check to report. Leases: each not recorded
    /// yet is recorded as `lease_started` would have; its end, readiness (a release is planned
    /// as `lease_ready` plans one), failovers and a failover that found no capacity are noted.
    fn reconcile(&mut self, lost: Vec<String>, r: Resync) -> anyhow::Result<()> {
        let mut folded = 0u64;
        self.report.lost_requests.extend(lost);
        let listed: HashSet<&str> = r.bids.iter().map(|b| b.id.as_str()).collect();
        for b in &r.bids {
            if b.client_order_id
                .as_ref()
                .is_some_and(|c| self.report.lost_requests.remove(c))
            {
                folded += u64::from(self.report.resting.insert(b.id.clone()));
                self.report.bid_ids.insert(b.id.clone());
            }
            if let Some(c) = &b.client_order_id
                && let Some(t) = self.trust_coids.get(c)
            {
                self.report.trust_bids.insert(b.id.clone(), t.clone());
                self.report.lost_trust.remove(c);
            }
        }
        let closed: Vec<String> = self
            .report
            .resting
            .iter()
            .filter(|id| !listed.contains(id.as_str()) && !self.report.closed.contains(*id))
            .cloned()
            .collect();
        folded += closed.len() as u64;
        self.report.closed.extend(closed);
        let mut started = 0u64;
        for l in r.leases {
            if self.known_leases.insert(l.id.clone()) {
                started += 1;
                self.report.leases.push(LeaseRecord {
                    id: l.id.clone(),
                    node: l.node_id.clone(),
                    gpus: l.gpu_indexes.iter().copied().map(u64::from).collect(),
                    start_ms: l.start_ms,
                    end_ms: l.end_ms,
                });
            }
            if let Some(at) = l.ended_at_ms
                && !self.report.ended.contains_key(&l.id)
            {
                folded += 1;
                self.report.ended.insert(l.id.clone(), at);
            }
            if l.ready_ms.is_some() && self.report.ready.insert(l.id.clone()) {
                folded += 1;
                if l.ended_at_ms.is_none() && l.gang.is_none() {
                    self.plan_release(l.id.clone(), 1_000..6_000);
                }
            }
            for to in &l.migrated_to {
                self.migrated(l.id.clone(), to.clone());
            }
            if let Some(why) = &l.failover_failed_reason {
                self.report
                    .failover_failed
                    .entry(l.id.clone())
                    .or_insert_with(|| wire_name(why));
            }
        }
        if let Some(b) = r.balance {
            self.report.balance = Some(b.balance);
        }
        let mut st = lock(&self.stats)?;
        st.leases += started;
        st.resynced += folded + started;
        Ok(())
    }

    /// Judges unfilled "fillable" IOCs once the feed has caught up with their commit: still
    /// fillable by the view → phantom, else a race. One whose view has not caught up by its
    /// deadline ([`VIEW_LATE_BOUND`]) counts "view too late", apart.
    fn judge(&mut self) -> anyhow::Result<()> {
        if self.judgements.is_empty() {
            return Ok(());
        }
        let now = Instant::now();
        let mut st = lock(&self.stats)?;
        let (views, last_seq) = (&self.views, self.last_seq);
        self.judgements.retain(|j| {
            if last_seq < j.due_seq {
                if now < j.deadline {
                    return true;
                }
                st.view_late += 1;
                return false;
            }
            let still = views.get(&j.sku).and_then(|v| v.best(j.kind, j.gpus));
            if still.is_some_and(|p| p <= j.limit) {
                st.phantom += 1;
            } else {
                st.raced += 1;
            }
            false
        });
        Ok(())
    }

    /// Answers the probes whose sequence number the view has reached; returns the others.
    fn answer(&self, probes: Vec<Probe>) -> Vec<Probe> {
        let mut still = Vec::new();
        for p in probes {
            match self.views.get(&p.sku) {
                Some(v) if v.seq() >= p.seq => {
                    let at = match v.history.iter().find(|(s, _)| *s == p.seq) {
                        Some((_, h)) => AtSeq::At(*h),
                        None if v.history.front().is_none_or(|(s, _)| *s > p.seq) => {
                            AtSeq::Forgotten
                        }
                        None => AtSeq::JumpedOver,
                    };
                    let _ = p.reply.send(at);
                }
                _ => still.push(p),
            }
        }
        still
    }
}

/// Runs one buyer (its `client` holds the buyer's key) until `stop` turns true and its
/// replies are in, then keeps following the feed to answer [`Probe`]s until `done` turns
/// true.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    name: String,
    client: Client,
    skus: Vec<String>,
    trust: TrustPlan,
    gang_share: f64,
    seed: u64,
    mut arrivals: mpsc::UnboundedReceiver<Instant>,
    mut probes: mpsc::Receiver<Probe>,
    stats: Shared,
    mut stop: watch::Receiver<bool>,
    mut done: watch::Receiver<bool>,
) -> anyhow::Result<BuyerReport> {
    let mut ws = open(&client, &skus).await?;
    let mut b = Buyer::new(name, seed, stats, trust);
    b.gang_share = gang_share;
    if gang_share > 0.0 {
        b.domains = Some(watch_domains(client.clone(), b.stats.clone(), done.clone()));
    }
    let mut waiting_probes: Vec<Probe> = Vec::new();
    let mut stopping = false;
    loop {
        let next_release = b
            .releases
            .peek()
            .map(|r| r.0.0)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        let next_bid_release = b
            .bid_releases
            .peek()
            .map(|r| r.0.0)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        let mut out: Option<ClientMsg> = None;
        tokio::select! {
            a = arrivals.recv(), if !stopping => {
                let Some(scheduled) = a else { stopping = true; continue };
                out = Some(b.bid(&skus, scheduled));
            }
            _ = stop.changed(), if !stopping => { stopping = *stop.borrow(); }
            _ = done.changed() => { if *done.borrow() { break; } }
            p = probes.recv() => { if let Some(p) = p { waiting_probes.push(p); } }
            _ = tokio::time::sleep_until(next_release.into()), if !b.releases.is_empty() && !stopping => {
                out = b.release()?;
            }
            _ = tokio::time::sleep_until(next_bid_release.into()), if !b.bid_releases.is_empty() && !stopping => {
                if let Some(bid) = b.bid_release() {
                    release_bid(client.clone(), bid, b.stats.clone());
                }
            }
            m = ws.next() => match m {
                Ok(m) => b.on_message(m)?,
                Err(ClientError::Decode(e)) => {
                    anyhow::bail!("{}: websocket: undecodable message: {e}", b.name)
                }
                Err(e) => ws = b.reopen(&client, &skus, e).await?,
            }
        }
        b.judge()?;
        if !waiting_probes.is_empty() {
            waiting_probes = b.answer(std::mem::take(&mut waiting_probes));
        }
        if let Some(m) = out
            && let Err(e) = ws.send(&m).await
        {
            ws = b.reopen(&client, &skus, e).await?;
        }
    }
    let mut report = b.report;
    report.gaps = b.views.values().map(|v| v.gaps).sum();
    Ok(report)
}

/// Reads the domain inventory every [`DOMAINS_EVERY`] until `done` (counted as
/// `inventory_domains`); answers the latest rows that hold a gang of 2 nodes or more.
fn watch_domains(
    client: Client,
    stats: Shared,
    mut done: watch::Receiver<bool>,
) -> watch::Receiver<Vec<DomainInventoryView>> {
    let (tx, rx) = watch::channel(Vec::new());
    tokio::spawn(async move {
        let mut every = tokio::time::interval(DOMAINS_EVERY);
        loop {
            tokio::select! {
                _ = every.tick() => {}
                _ = done.changed() => return,
            }
            let sent = Instant::now();
            match client.inventory_domains(None, None, None, Some(2)).await {
                Ok(d) => {
                    if let Ok(mut st) = stats.lock() {
                        st.ack("inventory_domains", sent);
                    }
                    if tx.send(d.domains).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    if let Ok(mut st) = stats.lock() {
                        st.error(e.code().unwrap_or("inventory_domains transport"));
                    }
                }
            }
        }
    });
    rx
}

/// Releases a whole gang as its bid (`POST /v1/bids/{id}/release`, REST: the websocket has
/// no such command) in a task of its own; counts the acknowledgement as `release_bid`.
fn release_bid(client: Client, bid: String, stats: Shared) {
    let sent = Instant::now();
    tokio::spawn(async move {
        let r = client.release_bid(&bid).await;
        if let Ok(mut st) = stats.lock() {
            match r {
                Ok(_) => st.ack("release_bid", sent),
                Err(e) => st.error(e.code().unwrap_or("release_bid transport")),
            }
        }
    });
}

/// Opens the buyer's websocket and subscribes to its SKUs (each answers a snapshot).
async fn open(client: &Client, skus: &[String]) -> Result<WsSession, ClientError> {
    let mut ws = client.connect_ws().await?;
    for sku in skus {
        ws.subscribe(sku, None).await?;
    }
    Ok(ws)
}

impl Buyer {
    /// The connection failed: the commands in flight lose their replies (counted); answers
    /// the client order ids of the bids among them (a bid's request id is its client order
    /// id: the re-read finds it by that).
    fn connection_lost(&mut self) -> anyhow::Result<Vec<String>> {
        let lost = self.pending.len() as u64;
        let lost_bids: Vec<String> = self
            .pending
            .drain()
            .filter(|(_, p)| p.kind == "place_bid")
            .map(|(rid, _)| rid)
            .collect();
        for rid in &lost_bids {
            if self.trust_coids.contains_key(rid) {
                self.report.lost_trust.insert(rid.clone());
            }
        }
        let mut st = lock(&self.stats)?;
        st.reconnects += 1;
        st.lost_replies += lost;
        Ok(lost_bids)
    }

    /// Reopens the websocket after `why` ended it (the client moves to another API process
    /// when it was given several): the commands in flight lose their replies (counted, not
    /// judged), and each SKU's view starts over from the new connection's snapshot. Then
    /// re-reads bids, leases and balance and folds them in ([`Buyer::reconcile`]). Tries for
    /// [`RECONNECT_FOR`].
    async fn reopen(
        &mut self,
        client: &Client,
        skus: &[String],
        why: ClientError,
    ) -> anyhow::Result<WsSession> {
        let lost_bids = self.connection_lost()?;
        let since = (self.last_message_ms > 0).then(|| self.last_message_ms - RESYNC_MARGIN_MS);
        let started = Instant::now();
        let mut attempt = 0;
        loop {
            // The socket first: what happens from here on is on it, the rest in the re-read.
            let reopened = match open(client, skus).await {
                Ok(ws) => resync(client, since).await.map(|r| (ws, r)),
                Err(e) => Err(e),
            };
            match reopened {
                Ok((ws, r)) => {
                    self.last_message_ms = now_ms();
                    self.reconcile(lost_bids, r)?;
                    return Ok(ws);
                }
                Err(e) if started.elapsed() < RECONNECT_FOR => {
                    tokio::time::sleep(gpux_client::backoff::delay(attempt, e.retry_after())).await;
                    attempt += 1;
                }
                Err(e) => anyhow::bail!(
                    "{}: websocket failed ({why}) and could not be reopened and re-read within {} s: {e}",
                    self.name,
                    RECONNECT_FOR.as_secs()
                ),
            }
        }
    }
}

/// The re-read after a reopen: resting bids, every page of the leases running at or after
/// `since` (all of them without it), the balance.
async fn resync(client: &Client, since: Option<i64>) -> Result<Resync, ClientError> {
    let bids = client.bids().await?.bids;
    let mut q = gpux_client::LeaseQuery {
        state: Some("all".into()),
        from_ms: since,
        limit: Some(RESYNC_PAGE),
        ..gpux_client::LeaseQuery::default()
    };
    let mut leases = Vec::new();
    loop {
        let page = client.leases(&q).await?;
        leases.extend(page.leases);
        match page.next_cursor {
            Some(c) => q.cursor = Some(c),
            None => break,
        }
    }
    let balance = Some(client.balance().await?);
    Ok(Resync {
        bids,
        leases,
        balance,
    })
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    now_us() / 1000
}

/// Microseconds since the Unix epoch.
pub fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gateway::api::launch::LaunchSpecOf;

    #[test]
    fn launch_specs_pass_the_gateways_validation() {
        let mut images = 0;
        for i in 0..24u64 {
            let req = launch_spec(&format!("lt-buyer-{i}"), i * 31);
            assert_eq!(req, launch_spec(&format!("lt-buyer-{i}"), i * 31), "seeded");
            let spec = req.to_spec().unwrap_or_else(|e| panic!("{e:?}"));
            assert_eq!(spec.ssh_keys.len(), 1);
            images += usize::from(spec.image.is_some());
        }
        assert!(images > 0 && images < 24);
    }

    /// A lease as `GET /v1/leases` shows it (active, ready, on node 7's GPUs 0 and 1), with
    /// `extra`'s fields over it.
    fn lease_view(id: &str, bid: &str, extra: serde_json::Value) -> LeaseView {
        let mut l = serde_json::json!({"id": id, "bid_id": bid, "node_id": "7", "offer_id": "1",
            "sku": "H100-80G", "region": "cn-east-2", "kind": "spot", "gpus": 2,
            "gpu_indexes": [0, 1], "price": "18.0000", "start_ms": 2_500, "end_ms": 90_000,
            "state": "active", "billed_seconds": 1, "charged": "0.01", "ready_ms": 3_000,
            "ended_at_ms": null, "end_reason": null, "migrated_to": [], "migrated_from": null,
            "notice_deadline_ms": null, "failure_reason": null});
        for (k, v) in extra.as_object().unwrap() {
            l[k] = v.clone();
        }
        serde_json::from_value(l).unwrap()
    }

    /// Issue 25, item 9: a buyer's websocket drops while its resting bid fills, a lease of
    /// it ends, a bid it placed rests (the reply lost) and a failover finds no capacity; the
    /// re-read after the reopen must tell the end checks all of it. Without the fold, every
    /// check below counts a loss (the control).
    #[test]
    fn a_reopen_folds_in_what_the_websocket_missed() {
        use crate::checks::{bids_accounted, no_gpu_leased_twice, not_delivered_failed_over};
        let stats = crate::stats::Stats::new();
        let mut b = Buyer::new("lt-buyer-0".into(), 7, stats.clone(), TrustPlan::default());
        let msg = |v: serde_json::Value| serde_json::from_value::<ServerMsg>(v).unwrap();
        // Before the drop: bid 100 acknowledged resting; lease 499 seen starting on node 7.
        b.report.resting.insert("100".into());
        b.on_message(msg(serde_json::json!({"type": "lease_started", "seq": 5,
            "lease_id": "499", "bid_id": "99", "node_id": "7", "sku": "H100-80G",
            "region": "cn-east-2", "kind": "spot", "gpus": 2, "gpu_indexes": [0, 1],
            "price": "18.0000", "start_ms": 1_000, "end_ms": 10_000})))
            .unwrap();
        // In flight when the socket failed: a GTC bid.
        b.pending.insert(
            "lt-buyer-0-2".into(),
            Pending {
                sent: Instant::now(),
                kind: "place_bid",
                fillable: None,
                trust: None,
                gang: None,
            },
        );
        let lost = b.connection_lost().unwrap();
        assert_eq!(lost, ["lt-buyer-0-2"]);
        assert!(b.pending.is_empty());
        // While it was down: 499 released at 2,000; bid 100 filled as lease 500 on the same
        // GPUs, ready at 3,000; the lost bid rests as 101; lease 501 was not delivered and
        // its failover found no capacity.
        let bid_101: BidView = serde_json::from_value(serde_json::json!({"id": "101",
            "client_order_id": "lt-buyer-0-2", "sku": "H100-80G", "gpus": 1, "remaining": 1,
            "limit_price": "17.1000", "kind": "spot", "placement": "single_node",
            "duration_s": 600, "expires_at_ms": null}))
        .unwrap();
        let rest = vec![
            lease_view(
                "501",
                "98",
                serde_json::json!({"node_id": "8", "state": "ended",
                "ready_ms": null, "billed_seconds": 0, "charged": "0.00", "ended_at_ms": 4_000,
                "end_reason": "not_delivered", "failover_failed_gpus": 2,
                "failover_failed_reason": "no_capacity"}),
            ),
            lease_view("500", "100", serde_json::json!({})),
            lease_view(
                "499",
                "99",
                serde_json::json!({"start_ms": 1_000, "end_ms": 10_000,
                "state": "ended", "ready_ms": 1_500, "ended_at_ms": 2_000,
                "end_reason": "released"}),
            ),
        ];
        let listed: HashMap<String, Option<String>> =
            HashMap::from([("101".into(), Some("lt-buyer-0-2".into()))]);
        let rest_at: Vec<(LeaseView, i64)> = rest.iter().map(|l| (l.clone(), 5_000)).collect();
        // The control: what the websocket alone told the buyer counts losses.
        let reports = std::slice::from_ref(&b.report);
        assert!(!bids_accounted(reports, std::slice::from_ref(&listed)).ok);
        assert!(!not_delivered_failed_over(&rest_at, reports).ok);
        b.report.leases.push(LeaseRecord {
            id: "500".into(),
            node: "7".into(),
            gpus: vec![0, 1],
            start_ms: 2_500,
            end_ms: 90_000,
        });
        assert!(!no_gpu_leased_twice(std::slice::from_ref(&b.report)).ok);
        b.report.leases.pop();

        b.reconcile(
            lost,
            Resync {
                bids: vec![bid_101],
                leases: rest,
                balance: serde_json::from_value(serde_json::json!({"account_id": "3",
                    "balance": "99990.00", "available": "99988.29", "held_by_bids": "1.71",
                    "burn_rate_per_hour": "36.00", "runway_s": 9_999_000}))
                .ok(),
            },
        )
        .unwrap();
        let reports = std::slice::from_ref(&b.report);
        let c = bids_accounted(reports, std::slice::from_ref(&listed));
        assert!(c.ok, "{}", c.detail);
        let c = no_gpu_leased_twice(reports);
        assert!(c.ok, "{}", c.detail);
        assert_eq!(c.detail, "3 leases checked");
        let c = not_delivered_failed_over(&rest_at, reports);
        assert!(c.ok, "{}", c.detail);
        let r = &b.report;
        assert!(r.resting.contains("101") && r.closed.contains("100"));
        assert!(r.lost_requests.is_empty());
        assert_eq!(r.ended.get("499"), Some(&2_000));
        assert_eq!(r.ready, HashSet::from(["500".into(), "499".into()]));
        assert_eq!(
            r.failover_failed.get("501").map(String::as_str),
            Some("no_capacity")
        );
        assert_eq!(r.balance.as_deref(), Some("99990.00"));
        assert!(
            b.release_planned.contains("500"),
            "a release planned as lease_ready would"
        );
        // The same lease starting again on the new socket is not recorded twice.
        b.on_message(msg(serde_json::json!({"type": "lease_started", "seq": 9,
            "lease_id": "500", "bid_id": "100", "node_id": "7", "sku": "H100-80G",
            "region": "cn-east-2", "kind": "spot", "gpus": 2, "gpu_indexes": [0, 1],
            "price": "18.0000", "start_ms": 2_500, "end_ms": 90_000})))
            .unwrap();
        assert_eq!(b.report.leases.len(), 3);
        let st = stats.lock().unwrap();
        assert_eq!((st.leases, st.reconnects, st.lost_replies), (3, 1, 1));
        assert!(st.resynced >= 5, "{}", st.resynced);
    }

    /// A trust buyer's bids carry their requirement, are never judged phantom (the feed does
    /// not filter by trust), and their replies file them by id with it; a buyer without a
    /// plan draws nothing for trust.
    #[test]
    fn trust_bids_carry_their_constraints_and_are_kept_by_id() {
        let stats = crate::stats::Stats::new();
        let every = TrustPlan {
            verified: 0.5,
            min_reliability: 0.3,
            min_sla: 0.2,
        };
        let mut b = Buyer::new("lt-buyer-1".into(), 3, stats.clone(), every);
        // (Gang bids carry no trust: none here.)
        b.gang_share = 0.0;
        let skus = vec!["H100-80G".to_string()];
        let snap: InventorySnapshot = serde_json::from_value(serde_json::json!({
            "sku": "H100-80G", "region": null, "seq": 5, "commit_seq": 5, "resync": false,
            "levels": [{"region": "cn-east-2", "kind": "spot", "price": "19.5000",
                        "free_gpus": 64, "max_single_node": 8},
                       {"region": "cn-east-2", "kind": "preemptible", "price": "12.5000",
                        "free_gpus": 64, "max_single_node": 8}],
        }))
        .unwrap();
        b.views
            .entry("H100-80G".into())
            .or_default()
            .apply_snapshot(&snap)
            .unwrap();
        let mut labels = BTreeMap::new();
        let mut last = None;
        for _ in 0..60 {
            let ClientMsg::PlaceBid {
                request_id: Some(rid),
                bid,
            } = b.bid(&skus, Instant::now())
            else {
                panic!("a bid")
            };
            let p = &b.pending[&rid];
            assert!(p.fillable.is_none(), "a trust IOC is never judged phantom");
            let t = p
                .trust
                .clone()
                .expect("every bid of this plan requires trust");
            assert_eq!(bid.constraints.verified, t.verified);
            assert_eq!(bid.constraints.min_reliability, t.min_reliability);
            assert_eq!(
                bid.constraints
                    .min_sla
                    .as_ref()
                    .and_then(|m| m.availability.clone()),
                t.min_sla
            );
            *labels.entry(t.label()).or_insert(0) += 1;
            last = Some((rid, t));
        }
        assert_eq!(labels.len(), 4, "{labels:?}");
        let (rid, t) = last.unwrap();
        let reply: ServerMsg = serde_json::from_value(serde_json::json!({
            "type": "bid_accepted", "request_id": rid, "bid_id": "77",
            "client_order_id": rid, "seq": 9, "status": "closed", "filled_gpus": 0,
            "remaining_gpus": 0, "close_reason": "trust", "fills": []}))
        .unwrap();
        b.on_message(reply).unwrap();
        assert_eq!(b.report.trust_bids.get("77"), Some(&t));
        assert!(b.report.bid_ids.contains("77"));
        let st = stats.lock().unwrap();
        let label = t.label();
        assert_eq!(st.trust_bids.get(&format!("{label}: closed")), Some(&1));
        assert_eq!(
            st.trust_bids.get(&format!("{label}: closed by trust")),
            Some(&1)
        );
        drop(st);
        // No plan: the same bids, draw for draw, as a buyer before trust existed.
        let plain = |seed| {
            let mut b = Buyer::new(
                "lt-buyer-0".into(),
                seed,
                stats.clone(),
                TrustPlan::default(),
            );
            (0..20)
                .map(|_| match b.bid(&skus, Instant::now()) {
                    ClientMsg::PlaceBid { bid, .. } => {
                        assert!(!bid.constraints.verified);
                        assert!(bid.constraints.min_reliability.is_none());
                        assert!(bid.constraints.min_sla.is_none());
                        (bid.gpus, bid.kind, bid.time_in_force, bid.duration_s)
                    }
                    _ => panic!("a bid"),
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(plain(5), plain(5));
    }

    /// Gang bids (issue 27): drawn from their own stream (a buyer's other bids are what they
    /// were without gangs), shaped from the view, never judged phantom; their members are not
    /// released one by one, the whole gang is released as a bid once ready.
    #[test]
    fn gang_bids_are_shaped_from_the_view_and_released_whole() {
        let stats = crate::stats::Stats::new();
        let skus = vec!["H100-80G".to_string()];
        let snap: InventorySnapshot = serde_json::from_value(serde_json::json!({
            "sku": "H100-80G", "region": null, "seq": 5, "commit_seq": 5, "resync": false,
            "levels": [{"region": "cn-east-2", "kind": "spot", "price": "20.0000",
                        "free_gpus": 64, "max_single_node": 8},
                       {"region": "cn-east-2", "kind": "preemptible", "price": "12.0000",
                        "free_gpus": 64, "max_single_node": 8}],
        }))
        .unwrap();
        let buyer = |share: f64| {
            let mut b = Buyer::new("lt-buyer-0".into(), 9, stats.clone(), TrustPlan::default());
            b.gang_share = share;
            b.views
                .entry("H100-80G".into())
                .or_default()
                .apply_snapshot(&snap)
                .unwrap();
            b
        };
        let (mut with, mut without) = (buyer(0.3), buyer(0.0));
        let mut gangs = 0;
        for _ in 0..200 {
            let (ClientMsg::PlaceBid { bid: a, request_id }, ClientMsg::PlaceBid { bid: b, .. }) = (
                with.bid(&skus, Instant::now()),
                without.bid(&skus, Instant::now()),
            ) else {
                panic!("bids")
            };
            assert_eq!(b.placement, PlacementDto::SingleNode);
            if a.placement != PlacementDto::Gang {
                assert_eq!(
                    (a.gpus, a.kind, a.time_in_force, a.duration_s),
                    (b.gpus, b.kind, b.time_in_force, b.duration_s)
                );
                continue;
            }
            gangs += 1;
            let g = a.gang.clone().expect("a gang's shape");
            assert!(
                (2..=4).contains(&g.nodes) && [4, 8].contains(&g.gpus_per_node),
                "{g:?}"
            );
            assert!(a.gpus.is_none_or(|n| n == g.nodes * g.gpus_per_node));
            assert_eq!(a.expires_at_ms.is_some(), a.time_in_force == TifDto::Gtc);
            let best = if a.kind == KindDto::Spot { 20 } else { 12 };
            assert_eq!(a.limit_price.0, Decimal::new(best * 130, 2));
            assert!(!a.constraints.verified && a.constraints.min_sla.is_none());
            let p = &with.pending[&request_id.unwrap()];
            assert!(p.fillable.is_none() && p.gang.is_some());
        }
        assert!(gangs > 30 && gangs < 100, "{gangs}");
        // Its members wait for the gang; once it is whole it is released as a bid.
        let msg = |v: serde_json::Value| serde_json::from_value::<ServerMsg>(v).unwrap();
        with.on_message(msg(serde_json::json!({"type": "gang_formed", "seq": 20,
            "bid_id": "300", "members": ["400", "401"]})))
            .unwrap();
        with.on_message(msg(serde_json::json!({"type": "gang_ready", "seq": 21,
            "bid_id": "300", "at_ms": 5_000})))
            .unwrap();
        for l in ["400", "401"] {
            with.on_message(msg(serde_json::json!({"type": "lease_ready", "seq": 22,
                "lease_id": l, "at_ms": 5_000})))
                .unwrap();
        }
        assert!(with.release_planned.is_empty());
        assert_eq!(with.bid_releases.len(), 1);
        let g = &with.report.gangs["300"];
        assert_eq!(g.ready_at, Some(5_000));
        assert_eq!(
            g.formed.as_deref(),
            Some(&["400".to_string(), "401".to_string()][..])
        );
        assert_eq!(with.bid_release().as_deref(), Some("300"));
        assert!(with.report.gangs["300"].released);
    }

    fn delta(first_seq: u64, last_seq: u64, free_gpus: u32) -> InventoryDelta {
        serde_json::from_value(serde_json::json!({
            "sku": "H100-80G", "region": null, "first_seq": first_seq, "last_seq": last_seq,
            "commit_seq": last_seq, "committed_at_ms": 1, "published_at_us": 2,
            "levels": [{"region": "cn-east-2", "kind": "spot", "price": "18.0000",
                        "free_gpus": free_gpus, "max_single_node": free_gpus.min(8)}],
        }))
        .unwrap()
    }

    #[test]
    fn a_view_counts_each_gap_once_and_prices_from_its_levels() {
        let mut v = View::default();
        v.apply_delta(&delta(1, 1, 4)).unwrap();
        assert_eq!((v.gaps, v.seq()), (1, 0), "a delta before the snapshot");
        let snap: InventorySnapshot = serde_json::from_value(serde_json::json!({
            "sku": "H100-80G", "region": null, "seq": 5, "commit_seq": 5, "resync": false,
            "levels": [{"region": "cn-east-2", "kind": "spot", "price": "19.5000",
                        "free_gpus": 8, "max_single_node": 8}],
        }))
        .unwrap();
        v.apply_snapshot(&snap).unwrap();
        assert_eq!(v.best(KindDto::Spot, 8), Some(Decimal::new(195_000, 4)));
        v.apply_delta(&delta(6, 7, 2)).unwrap();
        assert_eq!((v.gaps, v.seq(), v.depth()), (1, 7, 10));
        assert_eq!(v.best(KindDto::Spot, 1), Some(Decimal::new(180_000, 4)));
        assert_eq!(v.best(KindDto::Spot, 4), Some(Decimal::new(195_000, 4)));
        assert_eq!(v.best(KindDto::Preemptible, 1), None);
        // Seq 8 missed: one gap, then the view follows on.
        v.apply_delta(&delta(9, 9, 0)).unwrap();
        v.apply_delta(&delta(10, 10, 3)).unwrap();
        assert_eq!((v.gaps, v.seq(), v.depth()), (2, 10, 11));
        let at: Vec<u64> = v.history.iter().map(|(s, _)| *s).collect();
        assert_eq!(at, [5, 7, 9, 10]);
    }
}
