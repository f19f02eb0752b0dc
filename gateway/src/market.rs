//! The market: the matching engine and the settlement ledger driven as one deterministic state
//! machine by journaled operations.
//!
//! Everything here is pure (no IO, no clock): the sequencer hands each [`Op`] its sequence
//! number and time, so replaying the journal reproduces every state exactly, including
//! pre-trade rejections, accruals and insufficient-funds ends.

use crate::accounts::{Accounts, Role};
use crate::audit::{AuditOutcome, AuditTrail};
use crate::delivery::{Deliveries, LaunchSpec, PendingFailovers, Report};
use crate::tax::TaxBook;
use exchange::{
    AccountId as EngineAccount, Command, Engine, EngineConfig, Event, LeaseId as EngineLease, Meta,
    Output,
};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use settlement::input::{
    EndReason as LedgerEnd, Input, LeaseStart, ReplacementPrice, UndeliveredSla,
};
use settlement::sla::SlaTerms;
use settlement::{Account, AccountId as LedgerAccount, LeaseId as LedgerLease, Ledger};
use std::collections::BTreeMap;

/// Version of the market snapshot encoding ([`Market::snapshot`]); 2 added accounts.
pub const SNAPSHOT_VERSION: u16 = 2;

/// Default minimum runway a bid must be covered for: 10 minutes (issue 4).
pub const DEFAULT_MIN_RUNWAY_S: u64 = 600;

/// A journaled operation: what the sequencer makes durable before applying.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// A command for the matching engine (bids go through the pre-trade check first).
    Engine(Command),
    /// A buyer's top-up, CNY (idempotent by key).
    Deposit {
        /// Idempotency key.
        key: String,
        /// Buyer.
        buyer: u64,
        /// Amount, CNY.
        amount: Decimal,
    },
    /// A payout to a supplier, CNY (idempotent by key).
    Payout {
        /// Idempotency key.
        key: String,
        /// Supplier.
        supplier: u64,
        /// Amount, CNY.
        amount: Decimal,
    },
    /// Time passes: engine time advancement, accrual, insufficient-funds ends, listed capacity.
    Tick,
    /// A new account (admin); its id is the next free one. With a key hash, the account and
    /// its first API key are created in one step (no account without a key after a failure).
    CreateAccount {
        /// Unique name.
        name: String,
        /// Role.
        role: Role,
        /// SHA-256 of its first API key.
        key_hash: Option<[u8; 32]>,
    },
    /// Registers an API key's SHA-256 on an account (the key itself is never journaled).
    AddApiKey {
        /// Account.
        account: u64,
        /// SHA-256 of the key.
        key_hash: [u8; 32],
    },
    /// Revokes an API key by its id.
    RevokeApiKey {
        /// Account.
        account: u64,
        /// Key id ([`crate::accounts::key_id`]).
        key_id: String,
    },
    /// A bid with the launch spec its leases run (issue 15): the engine's `PlaceBid` after
    /// the pre-trade check, the spec kept in [`Deliveries`] while the bid or its leases live.
    PlaceBid {
        /// Buyer.
        account: u64,
        /// The bid.
        bid: exchange::BidSpec,
        /// What its leases run (boxed: most operations are far smaller).
        launch: Box<LaunchSpec>,
    },
    /// A supplier's ready / failed / torn-down report on a lease of its node.
    Report(Report),
    /// Registers a node key's SHA-256 on a supplier account (issue 16): the key acts only on
    /// the account's node named `node`, which need not be registered yet. Revoked like any
    /// key ([`Op::RevokeApiKey`]). Last variant, so journals written before it decode alike.
    AddNodeKey {
        /// Supplier account.
        account: u64,
        /// SHA-256 of the key.
        key_hash: [u8; 32],
        /// The node's name (unique per supplier).
        node: String,
    },
    /// An action the API took for a caller (issue 17): `op` applied as it would be alone, and
    /// recorded in the audit trail ([`crate::audit`]) with its actor, applied or refused.
    /// Last variant, so journals written before it decode alike.
    Audited {
        /// Who asked, with the request id.
        actor: crate::audit::Actor,
        /// The action (boxed: most operations are far smaller).
        op: Box<Op>,
    },
    /// A finance adjustment (issue 17; docs/settlement.md "Adjustments and refunds"):
    /// goodwill credit, refund, SLA cash-out, write-off or correction, idempotent by its key.
    Adjust(Box<settlement::Adjustment>),
    /// Closes the ledger period [`from_ms`, `to_ms`) (issue 17; docs/settlement.md "Periods and
    /// close"), idempotent by `key`: nothing posts into it afterwards, and its invoices and
    /// self-billing statements are numbered.
    ClosePeriod {
        /// Idempotency key.
        key: String,
        /// Start (inclusive), ms since epoch.
        from_ms: i64,
        /// End (exclusive), ms since epoch.
        to_ms: i64,
    },
    /// Sets a buyer's or supplier's tax details (开票信息; issue 17): the counterparty its
    /// documents print for periods closed from now on ([`crate::tax`]). Refused
    /// (`unknown_account`, `wrong_role`) for a missing account or a finance or admin one. Last
    /// variant, so journals written before it decode alike.
    SetTaxDetails {
        /// Buyer or supplier account.
        account: u64,
        /// The details.
        details: crate::tax::TaxDetails,
    },
    /// A node agent's heartbeat carrying the agent's clock offset (issue 25): applied as the
    /// engine's `Heartbeat`, and when the engine accepts it the offset is kept, with the
    /// heartbeat's time, for the supplier's node view ([`Market::agent_clock`]). A heartbeat
    /// without an offset stays an [`Op::Engine`] command. Last variant, so journals written
    /// before it decode alike.
    Heartbeat {
        /// Supplier account.
        account: u64,
        /// The node.
        node: u64,
        /// Healthy GPUs, 0..=the node's GPUs.
        healthy_gpus: u32,
        /// The agent's clock minus the exchange's, ms, as the agent measured it (bounded at
        /// the edge: `api::dto::MAX_AGENT_CLOCK_OFFSET_MS`). Absent: the offset is not changed.
        #[serde(default)]
        clock_offset_ms: Option<i64>,
    },
    /// What a node agent found on its host (issue 26, docs/market-rules.md §12.1): applied as
    /// the engine's `AttestNode` of `host`'s GPUs; when the engine takes it (matched or not)
    /// the host facts are kept for the node view ([`Market::host_facts`]). Last variant but
    /// one, so journals written before it decode alike.
    AttestNode {
        /// Supplier account.
        account: u64,
        /// The node.
        node: u64,
        /// Every GPU found and the host's facts (validated at the edge).
        host: crate::node_facts::HostFacts,
    },
    /// A node agent's heartbeat naming exactly which GPUs are unhealthy (issue 26,
    /// docs/market-rules.md §12.1): applied as the engine's `GpuHealth{healthy_mask}`; when the
    /// engine accepts it the reasons are kept for the node view ([`Market::gpu_problems`],
    /// replacing the node's previous ones) and the clock offset as [`Op::Heartbeat`] keeps it.
    /// Last variant, so journals written before it decode alike.
    GpuHealth {
        /// Supplier account.
        account: u64,
        /// The node.
        node: u64,
        /// Healthy GPUs: bit i = GPU i (the gateway computes it from the node's GPU count and
        /// the unhealthy indexes).
        healthy_mask: u32,
        /// The unhealthy GPUs with what the agent said of them, in index order.
        #[serde(default)]
        problems: Vec<crate::node_facts::GpuProblem>,
        /// The agent's clock minus the exchange's, ms, as in [`Op::Heartbeat`].
        #[serde(default)]
        clock_offset_ms: Option<i64>,
    },
    /// A bid with trust requirements (issue 26, docs/market-rules.md §12.2–12.3): the engine's
    /// `PlaceTrustBid` after the pre-trade check, with its launch spec as [`Op::PlaceBid`]
    /// (none where the market does not deliver). Appended last, so journals written before it
    /// decode alike.
    PlaceTrustBid {
        /// Buyer.
        account: u64,
        /// The bid.
        bid: exchange::BidSpec,
        /// What its leases run.
        launch: Option<Box<LaunchSpec>>,
        /// What it requires of the nodes.
        trust: exchange::TrustConstraints,
    },
    /// An offer with SLA terms (issue 26, docs/settlement.md "SLA credit"): applied as the
    /// engine's `PostOffer{account, node, terms}` (whose encoding cannot carry them); when the
    /// engine posts it the terms are kept by offer ([`Market::offer_sla`]) until it leaves the
    /// market, and each lease filled on it freezes them for its `LeaseStart`. An offer without
    /// terms stays an [`Op::Engine`] `PostOffer`. Appended last, so journals written before it
    /// decode alike.
    PostOfferSla {
        /// Supplier.
        account: u64,
        /// The node.
        node: u64,
        /// The offer's terms (validated at the edge).
        terms: exchange::OfferTerms,
        /// Its SLA terms (validated at the edge: [`settlement::SlaTerms::validate`]).
        sla: SlaTerms,
    },
}

/// A lease's SLA terms, kept by the gateway from its fill until the ledger holds them (its
/// `LeaseStart`, or a `DeliveryFailed` with a non-delivery credit; issue 26).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseSla {
    /// The terms of its offer at fill.
    pub terms: SlaTerms,
    /// Its provisioning deadline once provisioning began, ms since epoch (the start of a
    /// non-delivery outage).
    pub provision_deadline_ms: Option<i64>,
}

/// A failed lease's replacements, for the dearer-replacement credit (issue 26): kept from its
/// first migration until its `Failover` fact (with delivery, when all are ready).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplacementPrices {
    /// Each replacement lease standing in for it: (price per GPU-hour, GPUs).
    pub leases: BTreeMap<EngineLease, (Decimal, u32)>,
    /// The failed lease's booked (fixed) end, ms since epoch; `None`: open-ended.
    pub booked_end_ms: Option<i64>,
}

impl ReplacementPrices {
    /// The ledger's view: the GPU-weighted mean price of the replacements (`None` without any).
    fn price(&self) -> Option<ReplacementPrice> {
        let gpus: u32 = self.leases.values().map(|(_, g)| *g).sum();
        if gpus == 0 {
            return None;
        }
        let sum: Decimal = self
            .leases
            .values()
            .map(|(p, g)| *p * Decimal::from(*g))
            .sum();
        Some(ReplacementPrice {
            price_per_gpu_hour: (sum / Decimal::from(gpus)).round_dp(8),
            booked_end_ms: self.booked_end_ms,
        })
    }
}

/// A node agent's clock offset, as its last heartbeat that carried one reported it (issue 25).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentClock {
    /// The agent's clock minus the exchange's, ms (positive: the host runs ahead). Measured by
    /// the agent from a heartbeat answer's `at_ms`, so it includes up to one round trip.
    pub offset_ms: i64,
    /// Exchange time of the heartbeat that reported it, ms since epoch.
    pub at_ms: i64,
}

impl Op {
    /// Short snake_case name of the operation (engine commands by their own name), for
    /// metrics and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Engine(c) => c.name(),
            Op::Deposit { .. } => "deposit",
            Op::Payout { .. } => "payout",
            Op::Tick => "tick",
            Op::CreateAccount { .. } => "create_account",
            Op::AddApiKey { .. } => "add_api_key",
            Op::RevokeApiKey { .. } => "revoke_api_key",
            Op::PlaceBid { .. } | Op::PlaceTrustBid { .. } => "place_bid",
            Op::Report(r) => r.command().name(),
            Op::AddNodeKey { .. } => "add_node_key",
            Op::Audited { op, .. } => op.name(),
            Op::Adjust(_) => "adjustment",
            Op::ClosePeriod { .. } => "close_period",
            Op::SetTaxDetails { .. } => "set_tax_details",
            Op::Heartbeat { .. } => "heartbeat",
            Op::AttestNode { .. } => "attest_node",
            Op::GpuHealth { .. } => "gpu_health",
            Op::PostOfferSla { .. } => "post_offer",
        }
    }

    /// For the audit trail: the account acted on, and what was asked as `field=value` pairs
    /// (never a key hash).
    pub fn audit_detail(&self) -> (Option<u64>, String) {
        match self {
            Op::Deposit { key, buyer, amount } => {
                (Some(*buyer), format!("amount={amount} key={key}"))
            }
            Op::Payout {
                key,
                supplier,
                amount,
            } => (Some(*supplier), format!("amount={amount} key={key}")),
            Op::CreateAccount {
                name,
                role,
                key_hash,
            } => (
                None,
                format!(
                    "name={name} role={} with_key={}",
                    role.as_str(),
                    key_hash.is_some()
                ),
            ),
            Op::AddApiKey { account, .. } => (Some(*account), String::new()),
            Op::RevokeApiKey { account, key_id } => (Some(*account), format!("key_id={key_id}")),
            Op::AddNodeKey { account, node, .. } => (Some(*account), format!("node={node}")),
            Op::Audited { op, .. } => op.audit_detail(),
            Op::Adjust(a) => {
                let (debit, credit) = a.kind.accounts();
                let subject = match (debit, credit) {
                    (Account::Buyer(id) | Account::Supplier(id), _)
                    | (_, Account::Buyer(id) | Account::Supplier(id)) => Some(id.0),
                    _ => None,
                };
                (
                    subject,
                    format!(
                        "kind={} debit={debit} credit={credit} amount={} key={} memo={}",
                        a.kind.as_str(),
                        a.amount,
                        a.key,
                        a.memo()
                    ),
                )
            }
            Op::ClosePeriod {
                key,
                from_ms,
                to_ms,
            } => (None, format!("from_ms={from_ms} to_ms={to_ms} key={key}")),
            Op::SetTaxDetails { account, details } => (
                Some(*account),
                format!(
                    "legal_name={} taxpayer_id={}",
                    details.name, details.taxpayer_id
                ),
            ),
            Op::Engine(_)
            | Op::Tick
            | Op::PlaceBid { .. }
            | Op::PlaceTrustBid { .. }
            | Op::Report(_)
            | Op::Heartbeat { .. }
            | Op::AttestNode { .. }
            | Op::GpuHealth { .. }
            | Op::PostOfferSla { .. } => (None, String::new()),
        }
    }
}

/// Market configuration (part of what replay must reproduce, so it is fixed per journal).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarketConfig {
    /// Engine configuration.
    pub engine: EngineConfig,
    /// Settlement configuration.
    pub ledger: settlement::Config,
    /// A bid needs balance for its limit × GPUs over this many seconds (default 600).
    pub min_runway_s: u64,
    /// Verification runs (issue 26, docs/market-rules.md §12.2); `None`: off (the default;
    /// the server's `verification` setting and the demo turn it on). Applies to a market
    /// created from an empty journal; a snapshot keeps the setting it was taken with.
    #[serde(default)]
    pub verification: Option<exchange::verify::VerifyConfig>,
}

impl Default for MarketConfig {
    fn default() -> Self {
        MarketConfig {
            engine: EngineConfig::default(),
            ledger: settlement::Config::default(),
            min_runway_s: DEFAULT_MIN_RUNWAY_S,
            verification: None,
        }
    }
}

impl MarketConfig {
    /// The market the server runs: defaults with lease delivery on (docs/market-rules.md §11:
    /// leases provision until the supplier reports ready, and are billed from then).
    pub fn delivered() -> MarketConfig {
        let mut c = MarketConfig::default();
        c.engine.delivery = true;
        c
    }
}

/// Why an operation was refused before it reached the engine or ledger.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Refusal {
    /// Machine-readable code, e.g. `insufficient_funds`.
    pub code: &'static str,
    /// Human message.
    pub message: String,
}

/// What applying one operation did.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Engine outputs, in order (one per engine command the operation caused).
    pub engine: Vec<Output>,
    /// Ledger results, in order.
    pub ledger: Vec<settlement::ledger::Applied>,
    /// Set when the operation was refused as a whole.
    pub refusal: Option<Refusal>,
    /// Lease facts the ledger refused (an internal inconsistency between engine and ledger;
    /// logged and exported as a metric, never silently dropped).
    pub ledger_errors: Vec<String>,
    /// The account an [`Op::CreateAccount`] created.
    pub account: Option<u64>,
    /// The key id an [`Op::AddApiKey`] or [`Op::AddNodeKey`] registered.
    pub key_id: Option<String>,
    /// Leases whose provisioning began in this operation, with the launch spec their node
    /// runs (for the supplier's `lease_assigned` event).
    pub assignments: Vec<(exchange::LeaseId, std::sync::Arc<LaunchSpec>)>,
    /// For a heartbeat: the node's lease change counter after it ([`Deliveries::node_version`]),
    /// so the agent knows whether to fetch its leases.
    pub leases_version: Option<u64>,
    /// A running lease whose access details a repeated ready report replaced (the buyer's
    /// `lease_access_changed` event).
    pub access_changed: Option<exchange::LeaseId>,
}

/// The engine and the ledger as one state machine.
pub struct Market {
    config: MarketConfig,
    engine: Engine,
    ledger: Ledger,
    /// Engine sequence numbers: one per engine command, in journal order.
    engine_seq: u64,
    /// Leases the ledger has been told started, with their start (only those get end facts).
    started: BTreeMap<EngineLease, i64>,
    /// Listed capacity accounted up to this time (ms since epoch).
    listed_until_ms: Option<i64>,
    /// Time of the last applied operation (ms since epoch).
    last_timestamp_ms: i64,
    /// Funds reserved by resting bids (derived from the engine's book, so not snapshotted):
    /// bid → (buyer, CNY reserved), and the per-buyer sums.
    reservations: Reservations,
    /// Accounts, roles and API key hashes.
    accounts: Accounts,
    /// Client order ids of resting bids (derived from the engine, so not snapshotted).
    resting_coids: BTreeMap<exchange::BidId, String>,
    /// Pre-trade cache: buyer → (time, available balance at that time). The ledger computes
    /// the available balance over all of a buyer's active leases (O(leases)). The value holds
    /// until any ledger input other than a lease starting (cleared there), and later on it
    /// still gives a floor (see [`Market::available_floor`]): a bid the floor covers is
    /// covered, so the exact value is only computed near the edge and decisions equal
    /// recomputing every time (tested). Derived, so not snapshotted.
    available_cache: std::collections::HashMap<EngineAccount, (i64, Decimal)>,
    /// Burn of each started lease (buyer, price × GPUs, CNY per hour) and the per-buyer sums:
    /// a new bid must cover the runway of the buyer's running leases too. Derived.
    burn: Burn,
    /// Launch specs, access details, lease records (docs/market-rules.md §11; issue 15).
    deliveries: Deliveries,
    /// With delivery: failed leases whose SLA credit waits for their replacements' ready.
    pending_failovers: PendingFailovers,
    /// Who moved money or changed access, when, under which request id (issue 17).
    audit: AuditTrail,
    /// Accounts' tax details, current and frozen into each close (issue 17).
    tax: TaxBook,
    /// What placing each remembered bid did, for answering a re-sent bid (issue 25).
    placements: crate::placements::Placements,
    /// Each node agent's last reported clock offset (issue 25), for the node view; one entry
    /// per node that ever reported one (nodes are never removed).
    agent_clocks: BTreeMap<exchange::NodeId, AgentClock>,
    /// Each node's latest attestation's host facts (issue 26), for the node view.
    host_facts: BTreeMap<exchange::NodeId, crate::node_facts::HostFacts>,
    /// The unhealthy GPUs each node's last `GpuHealth` heartbeat named (issue 26), for the
    /// node view; no entry once one named none.
    gpu_problems: BTreeMap<exchange::NodeId, Vec<crate::node_facts::GpuProblem>>,
    /// The SLA terms of each live offer posted with them (issue 26, [`Op::PostOfferSla`]);
    /// removed when the offer is withdrawn or expires.
    offer_sla: BTreeMap<exchange::OfferId, SlaTerms>,
    /// The SLA terms frozen on each lease at fill from its offer, until the ledger holds them
    /// (its `LeaseStart` or `DeliveryFailed`) or it ends unstarted (issue 26).
    lease_sla: BTreeMap<EngineLease, LeaseSla>,
    /// Failed leases' replacement prices until their `Failover` fact (issue 26).
    replacement_prices: BTreeMap<EngineLease, ReplacementPrices>,
    /// The SLA terms of the [`Op::PostOfferSla`] being applied. Not state: it only lets its
    /// `OfferPosted` (and any fill in the same output) find them.
    posting_sla: Option<SlaTerms>,
    /// The journal sequence number of the entry being applied ([`Market::apply_entry`]; 0 for
    /// [`Market::apply`]). Not state: it only stamps [`crate::placements::Placement::seq`].
    applying_seq: u64,
}

/// What each buyer's started leases cost per hour, CNY.
#[derive(Clone, Debug, Default)]
struct Burn {
    by_lease: BTreeMap<EngineLease, (EngineAccount, Decimal)>,
    by_buyer: BTreeMap<EngineAccount, Decimal>,
}

impl Burn {
    fn start(&mut self, lease: EngineLease, buyer: EngineAccount, hourly: Decimal) {
        if self.by_lease.insert(lease, (buyer, hourly)).is_none() {
            *self.by_buyer.entry(buyer).or_default() += hourly;
        }
    }

    fn end(&mut self, lease: EngineLease) {
        if let Some((buyer, hourly)) = self.by_lease.remove(&lease)
            && let Some(sum) = self.by_buyer.get_mut(&buyer)
        {
            *sum -= hourly;
            if sum.is_zero() {
                self.by_buyer.remove(&buyer);
            }
        }
    }

    fn of(&self, buyer: EngineAccount) -> Decimal {
        self.by_buyer.get(&buyer).copied().unwrap_or_default()
    }
}

/// What resting bids hold of their buyers' balances: limit × remaining GPUs over the minimum
/// runway each, so a buyer cannot park more bids than the balance covers.
#[derive(Clone, Debug, Default)]
struct Reservations {
    by_bid: BTreeMap<exchange::BidId, (EngineAccount, Decimal)>,
    by_buyer: BTreeMap<EngineAccount, Decimal>,
}

impl Reservations {
    fn set(&mut self, bid: exchange::BidId, entry: Option<(EngineAccount, Decimal)>) {
        if let Some((buyer, amount)) = self.by_bid.remove(&bid)
            && let Some(sum) = self.by_buyer.get_mut(&buyer)
        {
            *sum -= amount;
            if sum.is_zero() {
                self.by_buyer.remove(&buyer);
            }
        }
        if let Some((buyer, amount)) = entry {
            self.by_bid.insert(bid, (buyer, amount));
            *self.by_buyer.entry(buyer).or_default() += amount;
        }
    }

    fn held(&self, buyer: EngineAccount) -> Decimal {
        self.by_buyer.get(&buyer).copied().unwrap_or_default()
    }
}

/// Everything a snapshot holds (the engine as its own snapshot bytes).
#[derive(Serialize, Deserialize)]
struct MarketSnapshot {
    config: MarketConfig,
    engine: Vec<u8>,
    ledger: Ledger,
    engine_seq: u64,
    started: BTreeMap<EngineLease, i64>,
    listed_until_ms: Option<i64>,
    last_timestamp_ms: i64,
    accounts: Accounts,
    #[serde(default)]
    deliveries: Deliveries,
    #[serde(default)]
    pending_failovers: PendingFailovers,
    /// Left out when empty: markets without audited actions keep their bytes (issue 17).
    #[serde(default, skip_serializing_if = "AuditTrail::is_empty")]
    audit: AuditTrail,
    /// Left out when empty: markets without tax details keep their bytes (issue 17).
    #[serde(default, skip_serializing_if = "TaxBook::is_empty")]
    tax: TaxBook,
    /// Left out when empty: markets without bids keep their bytes (issue 25).
    #[serde(
        default,
        skip_serializing_if = "crate::placements::Placements::is_empty"
    )]
    placements: crate::placements::Placements,
    /// Left out when empty: markets whose agents sent no clock offset keep their bytes
    /// (issue 25).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    agent_clocks: BTreeMap<exchange::NodeId, AgentClock>,
    /// Left out when empty: markets without attestations keep their bytes (issue 26).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    host_facts: BTreeMap<exchange::NodeId, crate::node_facts::HostFacts>,
    /// Left out when empty: markets without per-GPU health keep their bytes (issue 26).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    gpu_problems: BTreeMap<exchange::NodeId, Vec<crate::node_facts::GpuProblem>>,
    /// Left out when empty: markets without SLA terms keep their bytes (issue 26).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    offer_sla: BTreeMap<exchange::OfferId, SlaTerms>,
    /// Left out when empty (issue 26).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    lease_sla: BTreeMap<EngineLease, LeaseSla>,
    /// Left out when empty (issue 26).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    replacement_prices: BTreeMap<EngineLease, ReplacementPrices>,
}

impl Market {
    /// An empty market.
    ///
    /// # Errors
    /// The settlement configuration is invalid.
    pub fn new(config: MarketConfig) -> Result<Market, settlement::SettlementError> {
        Ok(Market {
            engine: {
                let mut e = Engine::new(config.engine.clone(), exchange::Catalog::builtin());
                e.set_verification(config.verification);
                e
            },
            ledger: Ledger::new(config.ledger.clone())?,
            config,
            engine_seq: 0,
            started: BTreeMap::new(),
            listed_until_ms: None,
            last_timestamp_ms: 0,
            reservations: Reservations::default(),
            accounts: Accounts::default(),
            resting_coids: BTreeMap::new(),
            available_cache: std::collections::HashMap::new(),
            burn: Burn::default(),
            deliveries: Deliveries::default(),
            pending_failovers: PendingFailovers::default(),
            audit: AuditTrail::default(),
            tax: TaxBook::default(),
            placements: crate::placements::Placements::default(),
            agent_clocks: BTreeMap::new(),
            host_facts: BTreeMap::new(),
            gpu_problems: BTreeMap::new(),
            offer_sla: BTreeMap::new(),
            lease_sla: BTreeMap::new(),
            replacement_prices: BTreeMap::new(),
            posting_sla: None,
            applying_seq: 0,
        })
    }

    /// Time of the last applied operation, ms since epoch (0 before any).
    pub fn last_timestamp_ms(&self) -> i64 {
        self.last_timestamp_ms
    }

    /// The market as bytes for [`Market::restore`] (MessagePack, which carries the ledger's
    /// decimal amounts exactly; the engine state as its own checksummed snapshot).
    pub fn snapshot(&self) -> Vec<u8> {
        rmp_serde::to_vec_named(&MarketSnapshot {
            config: self.config.clone(),
            engine: self.engine.snapshot(),
            ledger: self.ledger.clone(),
            engine_seq: self.engine_seq,
            started: self.started.clone(),
            listed_until_ms: self.listed_until_ms,
            last_timestamp_ms: self.last_timestamp_ms,
            accounts: self.accounts.clone(),
            deliveries: self.deliveries.clone(),
            pending_failovers: self.pending_failovers.clone(),
            audit: self.audit.clone(),
            tax: self.tax.clone(),
            placements: self.placements.clone(),
            agent_clocks: self.agent_clocks.clone(),
            host_facts: self.host_facts.clone(),
            gpu_problems: self.gpu_problems.clone(),
            offer_sla: self.offer_sla.clone(),
            lease_sla: self.lease_sla.clone(),
            replacement_prices: self.replacement_prices.clone(),
        })
        .unwrap_or_default()
    }

    /// A market from [`Market::snapshot`] bytes.
    ///
    /// # Errors
    /// A message when the bytes do not decode, the engine snapshot is refused, or the ledger
    /// breaks its invariants.
    pub fn restore(bytes: &[u8]) -> Result<Market, String> {
        let s: MarketSnapshot = rmp_serde::from_slice(bytes).map_err(|e| e.to_string())?;
        let engine = Engine::restore(&s.engine).map_err(|e| e.to_string())?;
        s.ledger.check_invariants().map_err(|e| e.to_string())?;
        s.audit.check()?;
        let mut m = Market {
            config: s.config,
            engine,
            ledger: s.ledger,
            engine_seq: s.engine_seq,
            started: s.started,
            listed_until_ms: s.listed_until_ms,
            last_timestamp_ms: s.last_timestamp_ms,
            reservations: Reservations::default(),
            accounts: s.accounts,
            resting_coids: BTreeMap::new(),
            available_cache: std::collections::HashMap::new(),
            burn: Burn::default(),
            deliveries: s.deliveries,
            pending_failovers: s.pending_failovers,
            audit: s.audit,
            tax: s.tax,
            placements: s.placements,
            agent_clocks: s.agent_clocks,
            host_facts: s.host_facts,
            gpu_problems: s.gpu_problems,
            offer_sla: s.offer_sla,
            lease_sla: s.lease_sla,
            replacement_prices: s.replacement_prices,
            posting_sla: None,
            applying_seq: 0,
        };
        m.placements.reindex();
        let burning: Vec<(EngineLease, EngineAccount, Decimal)> = m
            .engine
            .leases()
            .filter(|l| {
                m.started.contains_key(&l.id) || l.state != exchange::state::LeaseState::Pending
            })
            .map(|l| (l.id, l.buyer, l.price.to_decimal() * Decimal::from(l.gpus)))
            .collect();
        for (lease, buyer, hourly) in burning {
            m.burn.start(lease, buyer, hourly);
        }
        let bids: Vec<exchange::BidId> = m.engine.bids().map(|b| b.id).collect();
        for id in bids {
            m.refresh_reservation(id);
        }
        let coids: Vec<(exchange::BidId, String)> = m
            .engine
            .client_order_ids()
            .filter(|(_, _, bid)| m.engine.bid(*bid).is_some())
            .map(|(_, c, bid)| (bid, c.to_string()))
            .collect();
        m.resting_coids.extend(coids);
        Ok(m)
    }

    /// SHA-256 over the engine's state hash and the ledger's and market's own state: equal for
    /// equal operation streams in any process, and across snapshot/restore.
    pub fn state_hash(&self) -> [u8; 32] {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update(self.engine.state_hash());
        h.update(rmp_serde::to_vec_named(&self.ledger).unwrap_or_default());
        h.update(self.engine_seq.to_le_bytes());
        h.update(rmp_serde::to_vec_named(&self.started).unwrap_or_default());
        h.update(rmp_serde::to_vec_named(&self.listed_until_ms).unwrap_or_default());
        h.update(self.last_timestamp_ms.to_le_bytes());
        h.update(rmp_serde::to_vec_named(&self.accounts).unwrap_or_default());
        h.update(rmp_serde::to_vec_named(&self.deliveries).unwrap_or_default());
        h.update(rmp_serde::to_vec_named(&self.pending_failovers).unwrap_or_default());
        if !self.audit.is_empty() {
            h.update(rmp_serde::to_vec_named(&self.audit).unwrap_or_default());
        }
        if !self.tax.is_empty() {
            h.update(rmp_serde::to_vec_named(&self.tax).unwrap_or_default());
        }
        if !self.placements.is_empty() {
            h.update(rmp_serde::to_vec_named(&self.placements).unwrap_or_default());
        }
        if !self.agent_clocks.is_empty() {
            h.update(rmp_serde::to_vec_named(&self.agent_clocks).unwrap_or_default());
        }
        if !self.host_facts.is_empty() {
            h.update(rmp_serde::to_vec_named(&self.host_facts).unwrap_or_default());
        }
        if !self.gpu_problems.is_empty() {
            h.update(rmp_serde::to_vec_named(&self.gpu_problems).unwrap_or_default());
        }
        for (empty, bytes) in [
            (
                self.offer_sla.is_empty(),
                rmp_serde::to_vec_named(&self.offer_sla),
            ),
            (
                self.lease_sla.is_empty(),
                rmp_serde::to_vec_named(&self.lease_sla),
            ),
            (
                self.replacement_prices.is_empty(),
                rmp_serde::to_vec_named(&self.replacement_prices),
            ),
        ] {
            if !empty {
                h.update(bytes.unwrap_or_default());
            }
        }
        h.finalize().into()
    }

    /// The engine (read-only).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The ledger (read-only).
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Lease delivery state: launch specs, access details, lease records (read-only).
    pub fn deliveries(&self) -> &Deliveries {
        &self.deliveries
    }

    /// Accounts and key hashes (read-only).
    pub fn accounts(&self) -> &Accounts {
        &self.accounts
    }

    /// The market configuration.
    pub fn config(&self) -> &MarketConfig {
        &self.config
    }

    /// The client order id of a resting bid.
    pub fn client_order_id(&self, bid: exchange::BidId) -> Option<&str> {
        self.resting_coids.get(&bid).map(String::as_str)
    }

    /// What placing `account`'s bid `client_order_id` did, while the id is remembered (a
    /// re-sent bid is answered with it: docs/api.md "Bids").
    pub fn placement(
        &self,
        account: u64,
        client_order_id: &str,
    ) -> Option<&crate::placements::Placement> {
        self.placements.get(EngineAccount(account), client_order_id)
    }

    /// [`Market::apply`] of the journal entry `seq` (the sequencer and recovery apply entries
    /// through this, so a bid's placement carries its sequence number).
    pub fn apply_entry(&mut self, seq: u64, timestamp_ms: i64, op: &Op) -> Outcome {
        self.applying_seq = seq;
        let out = self.apply(timestamp_ms, op);
        self.applying_seq = 0;
        out
    }

    /// A bid operation ([`Op::PlaceBid`], [`Op::PlaceTrustBid`]): the pre-trade check for a
    /// new client order id, then the engine's `PlaceBid` (or `PlaceTrustBid` with `trust`)
    /// with its launch spec, and the placement kept for re-sends.
    #[allow(clippy::too_many_arguments)]
    fn place_bid_op(
        &mut self,
        op: &Op,
        account: u64,
        bid: &exchange::BidSpec,
        launch: Option<&LaunchSpec>,
        trust: Option<exchange::TrustConstraints>,
        timestamp_ms: i64,
        out: &mut Outcome,
    ) {
        let account = EngineAccount(account);
        if self
            .engine
            .bid_by_client_order_id(account, &bid.client_order_id)
            .is_none()
            && let Some(refusal) = self.pre_trade(account, bid, timestamp_ms)
        {
            out.refusal = Some(refusal);
            return;
        }
        let cmd = match trust {
            None => Command::PlaceBid {
                account,
                bid: bid.clone(),
            },
            Some(trust) => Command::PlaceTrustBid {
                account,
                bid: bid.clone(),
                trust,
            },
        };
        self.engine_apply_with(&cmd, timestamp_ms, out, launch, None);
        self.record_placement(account, &bid.client_order_id, op, timestamp_ms, out);
    }

    /// Keeps what placing a bid did (`out`'s last engine output), when the engine accepted it.
    fn record_placement(
        &mut self,
        account: EngineAccount,
        coid: &str,
        op: &Op,
        at_ms: i64,
        out: &Outcome,
    ) {
        let Some(output) = out.engine.last() else {
            return;
        };
        let digest = crate::placements::Placements::digest(op);
        if let Some(p) = crate::placements::Placement::from_events(
            &output.events,
            self.applying_seq,
            at_ms,
            digest,
        ) {
            self.placements.record(account, coid, p);
        }
    }

    /// `node`'s agent clock offset, as its last heartbeat that carried one reported it.
    pub fn agent_clock(&self, node: exchange::NodeId) -> Option<AgentClock> {
        self.agent_clocks.get(&node).copied()
    }

    /// `node`'s latest attestation's host facts (issue 26), once its agent attested.
    pub fn host_facts(&self, node: exchange::NodeId) -> Option<&crate::node_facts::HostFacts> {
        self.host_facts.get(&node)
    }

    /// The unhealthy GPUs `node`'s last `GpuHealth` heartbeat named, with their reasons
    /// (issue 26); empty when it named none or never sent one.
    pub fn gpu_problems(&self, node: exchange::NodeId) -> &[crate::node_facts::GpuProblem] {
        self.gpu_problems.get(&node).map_or(&[], Vec::as_slice)
    }

    /// The SLA terms `offer` was posted with (issue 26); `None`: the exchange's default rule.
    pub fn offer_sla(&self, offer: exchange::OfferId) -> Option<SlaTerms> {
        self.offer_sla.get(&offer).copied()
    }

    /// The SLA terms frozen on `lease` at fill (issue 26): the ledger's once it started (or
    /// never delivered with a non-delivery credit), the gateway's until then; `None`: the
    /// exchange's default rule.
    pub fn lease_sla(&self, lease: exchange::LeaseId) -> Option<SlaTerms> {
        let id = LedgerLease(lease.0);
        if let Some(t) = self.ledger.sla_terms(id) {
            return Some(t);
        }
        if let Some(s) = self.lease_sla.get(&lease) {
            return Some(s.terms);
        }
        // A lease that never started: its record keeps them.
        if let Some(t) = self.deliveries.record(lease).and_then(|r| r.sla) {
            return Some(t);
        }
        // A lease never delivered with a non-delivery credit: the ledger keeps its terms.
        let t = self.ledger.credit_terms(id).filter(|t| t.lease_terms)?;
        Some(SlaTerms {
            availability_bp: t.availability_bp?,
            multiple: rust_decimal::prelude::ToPrimitive::to_u16(&t.multiple)?,
            outage_cap_s: u32::try_from(t.outage_cap_s).ok()?,
            cap: t.cap,
            non_delivery_credit: t.non_delivery_credit,
        })
    }

    /// CNY of `buyer`'s balance held by its resting bids (limit × remaining GPUs × runway).
    pub fn held_by_bids(&self, buyer: u64) -> Decimal {
        self.reservations.held(EngineAccount(buyer))
    }

    /// Applies one journaled operation at `timestamp_ms` (ms since epoch, non-decreasing).
    pub fn apply(&mut self, timestamp_ms: i64, op: &Op) -> Outcome {
        let mut out = Outcome::default();
        self.last_timestamp_ms = self.last_timestamp_ms.max(timestamp_ms);
        self.placements.expire(
            self.last_timestamp_ms,
            self.config.engine.client_order_id_retention_ms,
        );
        match op {
            Op::Engine(cmd) => {
                // A repeated client order id gets the engine's duplicate answer every time,
                // before (and whatever) the funds check says.
                if let Command::PlaceBid { account, bid } = cmd
                    && self
                        .engine
                        .bid_by_client_order_id(*account, &bid.client_order_id)
                        .is_none()
                    && let Some(refusal) = self.pre_trade(*account, bid, timestamp_ms)
                {
                    out.refusal = Some(refusal);
                    return out;
                }
                self.engine_apply(cmd, timestamp_ms, &mut out);
                if let Command::PlaceBid { account, bid } = cmd {
                    self.record_placement(*account, &bid.client_order_id, op, timestamp_ms, &out);
                }
                if let Command::Heartbeat { node, .. } = cmd {
                    out.leases_version = Some(self.deliveries.node_version(*node));
                }
            }
            Op::PlaceBid {
                account,
                bid,
                launch,
            } => {
                let launch = Some(&**launch);
                self.place_bid_op(op, *account, bid, launch, None, timestamp_ms, &mut out);
            }
            Op::PlaceTrustBid {
                account,
                bid,
                launch,
                trust,
            } => {
                let launch = launch.as_deref();
                self.place_bid_op(
                    op,
                    *account,
                    bid,
                    launch,
                    Some(*trust),
                    timestamp_ms,
                    &mut out,
                );
            }
            Op::Report(report) => {
                self.engine_apply_with(
                    &report.command(),
                    timestamp_ms,
                    &mut out,
                    None,
                    Some(report),
                );
            }
            Op::Deposit { key, buyer, amount } => self.ledger_apply(
                timestamp_ms,
                &Input::Deposit {
                    key: key.clone(),
                    buyer: LedgerAccount(*buyer),
                    amount: *amount,
                },
                &mut out,
            ),
            Op::Payout {
                key,
                supplier,
                amount,
            } => self.ledger_apply(
                timestamp_ms,
                &Input::Payout {
                    key: key.clone(),
                    supplier: LedgerAccount(*supplier),
                    amount: *amount,
                },
                &mut out,
            ),
            Op::Tick => self.tick(timestamp_ms, &mut out),
            Op::CreateAccount {
                name,
                role,
                key_hash,
            } => {
                if let Some(h) = key_hash
                    && self.accounts.by_key_hash(h).is_some()
                {
                    out.refusal = Some(account_refusal(&crate::accounts::AccountError::KeyExists));
                    return out;
                }
                match self.accounts.create(name, *role, timestamp_ms) {
                    Ok(id) => {
                        out.account = Some(id);
                        if let Some(h) = key_hash {
                            match self.accounts.add_key(id, *h) {
                                Ok(k) => out.key_id = Some(k),
                                Err(e) => out.refusal = Some(account_refusal(&e)),
                            }
                        }
                    }
                    Err(e) => out.refusal = Some(account_refusal(&e)),
                }
            }
            Op::AddApiKey { account, key_hash } => {
                match self.accounts.add_key(*account, *key_hash) {
                    Ok(id) => out.key_id = Some(id),
                    Err(e) => out.refusal = Some(account_refusal(&e)),
                }
            }
            Op::RevokeApiKey { account, key_id } => {
                if let Err(e) = self.accounts.revoke_key(*account, key_id) {
                    out.refusal = Some(account_refusal(&e));
                }
            }
            Op::AddNodeKey {
                account,
                key_hash,
                node,
            } => match self.accounts.add_node_key(*account, *key_hash, node) {
                Ok(id) => out.key_id = Some(id),
                Err(e) => out.refusal = Some(account_refusal(&e)),
            },
            Op::Adjust(a) => {
                self.ledger_apply(timestamp_ms, &Input::Adjust((**a).clone()), &mut out)
            }
            Op::ClosePeriod {
                key,
                from_ms,
                to_ms,
            } => {
                // Running leases are charged through the period's end first (ticks accrue
                // only every `ACCRUAL_INTERVAL_MS`), so a period closes as soon as it ends;
                // accrual only extends, so a lease charged further is left as it is.
                if *to_ms <= timestamp_ms {
                    self.ledger_fact(timestamp_ms, &Input::Accrue { now_ms: *to_ms }, &mut out);
                }
                self.ledger_apply(
                    timestamp_ms,
                    &Input::ClosePeriod {
                        key: key.clone(),
                        from_ms: *from_ms,
                        to_ms: *to_ms,
                    },
                    &mut out,
                );
                // The counterparties of the period's documents, as they are now: a closed
                // period's documents never change (crate::tax), so a replayed close (its key
                // again) freezes nothing.
                if out.refusal.is_none()
                    && let Some(id) = out
                        .ledger
                        .last()
                        .filter(|a| !a.replayed)
                        .and_then(|a| a.closed)
                    && let Some(closed) = self.ledger.closed_period(id)
                {
                    let accounts: Vec<u64> = closed
                        .invoices
                        .keys()
                        .chain(closed.statements.keys())
                        .map(|a| a.0)
                        .collect();
                    self.tax.freeze(id.0, accounts);
                }
            }
            Op::SetTaxDetails { account, details } => match self.accounts.get(*account) {
                None => {
                    out.refusal = Some(Refusal {
                        code: "unknown_account",
                        message: format!("no account {account}"),
                    });
                }
                Some(a) if !matches!(a.role, Role::Buyer | Role::Supplier) => {
                    out.refusal = Some(Refusal {
                        code: "wrong_role",
                        message: format!(
                            "tax details are for buyer and supplier accounts (the documents' \
                             counterparties); account {account} is {}",
                            a.role.with_article()
                        ),
                    });
                }
                Some(_) => self.tax.set(*account, details.clone()),
            },
            Op::Heartbeat {
                account,
                node,
                healthy_gpus,
                clock_offset_ms,
            } => {
                let node = exchange::NodeId(*node);
                let cmd = Command::Heartbeat {
                    account: EngineAccount(*account),
                    node,
                    healthy_gpus: *healthy_gpus,
                };
                self.engine_apply(&cmd, timestamp_ms, &mut out);
                out.leases_version = Some(self.deliveries.node_version(node));
                let accepted = out.engine.last().is_some_and(|o| o.rejection().is_none());
                if let Some(offset_ms) = clock_offset_ms.filter(|_| accepted) {
                    let at_ms = timestamp_ms;
                    self.agent_clocks
                        .insert(node, AgentClock { offset_ms, at_ms });
                }
            }
            Op::AttestNode {
                account,
                node,
                host,
            } => {
                let node = exchange::NodeId(*node);
                let cmd = Command::AttestNode {
                    account: EngineAccount(*account),
                    node,
                    gpus: host.attested_gpus(),
                };
                self.engine_apply(&cmd, timestamp_ms, &mut out);
                if out.engine.last().is_some_and(|o| o.rejection().is_none()) {
                    self.host_facts.insert(node, host.clone());
                }
            }
            Op::GpuHealth {
                account,
                node,
                healthy_mask,
                problems,
                clock_offset_ms,
            } => {
                let node = exchange::NodeId(*node);
                let cmd = Command::GpuHealth {
                    account: EngineAccount(*account),
                    node,
                    healthy_mask: *healthy_mask,
                };
                self.engine_apply(&cmd, timestamp_ms, &mut out);
                out.leases_version = Some(self.deliveries.node_version(node));
                if out.engine.last().is_some_and(|o| o.rejection().is_none()) {
                    if let Some(offset_ms) = *clock_offset_ms {
                        let at_ms = timestamp_ms;
                        self.agent_clocks
                            .insert(node, AgentClock { offset_ms, at_ms });
                    }
                    if problems.is_empty() {
                        self.gpu_problems.remove(&node);
                    } else {
                        self.gpu_problems.insert(node, problems.clone());
                    }
                }
            }
            Op::PostOfferSla {
                account,
                node,
                terms,
                sla,
            } => {
                // The engine keeps the promise for bids' `min_sla` (§12.4); the gateway the
                // full terms for credits.
                let cmd = Command::PostOfferSla {
                    account: EngineAccount(*account),
                    node: exchange::NodeId(*node),
                    terms: *terms,
                    sla: exchange::SlaPromise {
                        availability_bp: u32::from(sla.availability_bp),
                        credit_multiple: sla.multiple,
                    },
                };
                self.posting_sla = Some(*sla);
                self.engine_apply(&cmd, timestamp_ms, &mut out);
                self.posting_sla = None;
            }
            Op::Audited { actor, op } => {
                out = self.apply(timestamp_ms, op);
                let outcome = match &out.refusal {
                    None if out.ledger.iter().any(|a| a.replayed) => AuditOutcome::Replayed,
                    None => AuditOutcome::Applied,
                    Some(r) => AuditOutcome::Refused {
                        code: r.code.to_string(),
                    },
                };
                let (subject, detail) = op.audit_detail();
                self.audit
                    .record(timestamp_ms, actor, op.name(), subject, detail, outcome);
            }
        }
        out
    }

    /// The audit trail (read-only).
    pub fn audit(&self) -> &AuditTrail {
        &self.audit
    }

    /// Accounts' tax details, current and as frozen at each close (read-only).
    pub fn tax(&self) -> &TaxBook {
        &self.tax
    }

    /// A bid must be covered for its limit × GPUs over the minimum runway by the buyer's
    /// available balance (journaled state only, so replay gives the same answer).
    fn pre_trade(
        &mut self,
        buyer: EngineAccount,
        bid: &exchange::BidSpec,
        now_ms: i64,
    ) -> Option<Refusal> {
        // The new bid's runway, plus the runway of the leases the buyer already runs.
        let running =
            self.burn.of(buyer) * Decimal::from(self.config.min_runway_s) / Decimal::from(3600);
        let needed = self.runway_cost(bid.limit, bid.gpus) + running;
        let held = self.reservations.held(buyer);
        if self.available_floor(buyer, now_ms) - held >= needed {
            return None;
        }
        let available = self.available_exact(buyer, now_ms) - held;
        (available < needed).then(|| Refusal {
            code: "insufficient_funds",
            message: format!(
                "available balance {} CNY (after {} CNY held by resting bids) does not cover {} CNY: limit {} × {} GPU(s) plus the {} CNY/h of running leases, for {} s",
                available.round_dp(2),
                held.round_dp(2),
                needed.round_dp(2),
                bid.limit,
                bid.gpus,
                self.burn.of(buyer).round_dp(2),
                self.config.min_runway_s
            ),
        })
    }

    /// Limit × GPUs over the minimum runway, CNY.
    fn runway_cost(&self, limit: exchange::Price, gpus: u32) -> Decimal {
        limit.to_decimal() * Decimal::from(gpus) * Decimal::from(self.config.min_runway_s)
            / Decimal::from(3600)
    }

    /// Brings one bid's reservation in line with the engine's book.
    fn refresh_reservation(&mut self, id: exchange::BidId) {
        let entry = self
            .engine
            .bid(id)
            .map(|b| (b.buyer, self.runway_cost(b.limit, b.remaining)));
        self.reservations.set(id, entry);
    }

    fn engine_apply(&mut self, cmd: &Command, timestamp_ms: i64, out: &mut Outcome) {
        self.engine_apply_with(cmd, timestamp_ms, out, None, None);
    }

    /// Applies an engine command carrying a bid's launch spec or a supplier's report.
    fn engine_apply_with(
        &mut self,
        cmd: &Command,
        timestamp_ms: i64,
        out: &mut Outcome,
        launch: Option<&LaunchSpec>,
        report: Option<&Report>,
    ) {
        self.engine_seq += 1;
        let output = self.engine.apply(
            cmd,
            Meta {
                seq: self.engine_seq,
                timestamp_ms,
            },
        );
        // Records first: the ledger's delivery facts read them.
        if let Some(lease) =
            self.deliveries
                .observe(&self.engine, &output, timestamp_ms, launch, report)
        {
            out.access_changed = Some(lease);
        }
        if matches!(cmd, Command::Resume) && self.engine.config().delivery {
            self.deliveries.refresh_deadlines(&self.engine);
        }
        self.track_sla(cmd, &output);
        self.feed_ledger(&output, timestamp_ms, out);
        for e in &output.events {
            if let Event::LeaseEnded { lease, .. } = e {
                // Its `LeaseStart` or `DeliveryFailed` carried the terms, or it never started.
                self.lease_sla.remove(lease);
            }
        }
        for e in &output.events {
            if let Event::ProvisionStarted { lease, .. } = e
                && let Some(spec) = self
                    .deliveries
                    .record(*lease)
                    .and_then(|r| self.deliveries.launch(r.bid))
            {
                out.assignments
                    .push((*lease, std::sync::Arc::new(spec.clone())));
            }
        }
        for e in &output.events {
            if let Event::BidRested { bid, .. }
            | Event::BidClosed { bid, .. }
            | Event::Fill { bid, .. } = e
            {
                self.refresh_reservation(*bid);
            }
            match e {
                Event::BidRested { bid, .. } => {
                    if let Some((_, spec)) = cmd.placed_bid() {
                        self.resting_coids
                            .entry(*bid)
                            .or_insert_with(|| spec.client_order_id.clone());
                    }
                }
                Event::BidClosed { bid, .. } => {
                    self.resting_coids.remove(bid);
                }
                _ => {}
            }
        }
        out.engine.push(output);
    }

    /// A buyer's available balance at `now_ms`, CNY, recomputed by the ledger (and cached).
    fn available_exact(&mut self, buyer: EngineAccount, now_ms: i64) -> Decimal {
        if let Some(&(t, a)) = self.available_cache.get(&buyer)
            && t == now_ms
        {
            return a;
        }
        let a = self
            .ledger
            .available_balance(LedgerAccount(buyer.0), now_ms);
        self.available_cache.insert(buyer, (now_ms, a));
        a
    }

    /// A lower bound of the buyer's available balance at `now_ms`, CNY, without walking its
    /// leases: the cached value at `t` minus what can have become due since. Between `t` and
    /// `now_ms` no ledger input touched the buyer but leases starting (anything else clears
    /// the cache), so the balance is unchanged and each active lease (those of `t` and those
    /// started since) added at most `hourly × ceil((now − t) / 1 s) / 3600` plus twice the
    /// charge quantum (`settlement::metering::cumulative_charge` rounds to 12 places; 1e-12
    /// per difference). Without a cached value: the exact value.
    fn available_floor(&mut self, buyer: EngineAccount, now_ms: i64) -> Decimal {
        match self.available_cache.get(&buyer) {
            Some(&(t, a)) if t < now_ms && a > Decimal::ZERO => {
                let secs = (now_ms - t).saturating_add(999) / 1000;
                let leases = self.ledger.active_lease_count(LedgerAccount(buyer.0));
                let quantum = Decimal::new(2, 12) * Decimal::from(leases);
                a - self.burn.of(buyer) * Decimal::from(secs) / Decimal::from(3600) - quantum
            }
            Some(&(t, _)) if t < now_ms => Decimal::ZERO,
            _ => self.available_exact(buyer, now_ms),
        }
    }

    /// Applies an account operation; an error refuses the operation.
    fn ledger_apply(&mut self, at_ms: i64, input: &Input, out: &mut Outcome) {
        self.available_cache.clear();
        match self.ledger.apply(at_ms, input) {
            Ok(applied) => out.ledger.push(applied),
            Err(e) => {
                out.refusal = Some(Refusal {
                    code: ledger_error_code(&e),
                    message: e.to_string(),
                });
            }
        }
    }

    /// Applies a fact derived from engine events; an error is an inconsistency to report.
    fn ledger_fact(&mut self, at_ms: i64, input: &Input, out: &mut Outcome) {
        // A lease starting now (or later, after a preemption notice) adds nothing due yet.
        if !matches!(input, Input::LeaseStarted(l) if l.start_ms >= at_ms) {
            self.available_cache.clear();
        }
        match self.ledger.apply(at_ms, input) {
            Ok(applied) => out.ledger.push(applied),
            Err(e) => out.ledger_errors.push(format!("{input:?}: {e}")),
        }
    }

    /// Keeps SLA terms by offer and freezes them on each lease at fill (issue 26): an
    /// [`Op::PostOfferSla`]'s offer gets its terms, a withdrawn or expired offer drops them, a
    /// fill on an offer with terms copies them to the lease, and provisioning notes the lease's
    /// deadline (a non-delivery outage starts there; an outage's `Resume` moves it).
    fn track_sla(&mut self, cmd: &Command, output: &Output) {
        for e in &output.events {
            match *e {
                Event::OfferPosted { offer, .. } => {
                    if let Some(t) = self.posting_sla {
                        self.offer_sla.insert(offer, t);
                    }
                }
                Event::OfferWithdrawn { offer } | Event::OfferExpired { offer } => {
                    self.offer_sla.remove(&offer);
                }
                Event::Fill { lease, offer, .. } => {
                    if let Some(&terms) = self.offer_sla.get(&offer) {
                        let s = LeaseSla {
                            terms,
                            provision_deadline_ms: None,
                        };
                        self.lease_sla.insert(lease, s);
                        if let Some(r) = self.deliveries.record_mut(lease) {
                            r.sla = Some(terms);
                        }
                    }
                }
                Event::ProvisionStarted {
                    lease, deadline_ms, ..
                } => {
                    if let Some(s) = self.lease_sla.get_mut(&lease) {
                        s.provision_deadline_ms = Some(deadline_ms);
                    }
                }
                _ => {}
            }
        }
        if matches!(cmd, Command::Resume) {
            for (lease, s) in self.lease_sla.iter_mut() {
                if let Some(d) = self
                    .engine
                    .lease(*lease)
                    .and_then(|l| l.provision_deadline_ms)
                {
                    s.provision_deadline_ms = Some(d);
                }
            }
        }
    }

    /// The replacement lease `to` of failed lease `from` (with delivery), for the
    /// dearer-replacement credit: kept under the failed lease it stands in for, as
    /// [`PendingFailovers::migrated`] keeps it (`billed`: `from` is owed a credit itself).
    fn track_replacement(&mut self, from: EngineLease, to: EngineLease, billed: bool) {
        let original = self
            .replacement_prices
            .iter()
            .find(|(_, p)| p.leases.contains_key(&from))
            .map(|(o, _)| *o);
        let original = match original {
            Some(o) => o,
            None if billed => from,
            None => return,
        };
        let Some(l) = self.engine.lease(to) else {
            return;
        };
        let (price, gpus, booked) = (l.price.to_decimal(), l.gpus, l.origin.fixed_end_ms);
        let entry = self.replacement_prices.entry(original).or_default();
        entry.leases.remove(&from);
        entry.leases.insert(to, (price, gpus));
        entry.booked_end_ms = booked;
    }

    /// Maps the engine's lease events onto settlement inputs.
    fn feed_ledger(&mut self, output: &Output, at_ms: i64, out: &mut Outcome) {
        // Built on the first migration or failed failover of the output, in one pass.
        let mut failovers: Option<BTreeMap<EngineLease, Failover>> = None;
        // With delivery (docs/market-rules.md §11) billing runs from the supplier's ready
        // report, not from the start: provisioning is never charged.
        let delivery = self.engine.config().delivery;
        // The pre-trade runway counts every lease holding GPUs, provisioning ones too: they
        // are billed the moment they are ready (found by an adversarial run: eight 1-GPU bids
        // on a 10-minute balance all filled, then all ended for insufficient funds).
        for event in &output.events {
            match *event {
                Event::LeaseStarted {
                    lease,
                    buyer,
                    gpus,
                    price,
                    ..
                } => self
                    .burn
                    .start(lease, buyer, price.to_decimal() * Decimal::from(gpus)),
                Event::LeaseEnded { lease, .. } => self.burn.end(lease),
                _ => {}
            }
        }
        for event in &output.events {
            let input = match *event {
                Event::LeaseStarted {
                    lease,
                    buyer,
                    supplier,
                    sku,
                    region,
                    gpus,
                    price,
                    start_ms,
                    ..
                } if !delivery => {
                    self.billing_start(lease, buyer, supplier, sku, region, gpus, price, start_ms)
                }
                Event::LeaseReady { lease, at_ms, .. } => {
                    self.pending_failovers.ready(lease, at_ms);
                    let Some(l) = self.engine.lease(lease) else {
                        continue;
                    };
                    let (buyer, supplier, sku, region, gpus, price) =
                        (l.buyer, l.supplier, l.sku, l.region, l.gpus, l.price);
                    self.billing_start(lease, buyer, supplier, sku, region, gpus, price, at_ms)
                }
                Event::LeaseEnded {
                    lease,
                    reason,
                    at_ms,
                    ..
                } if delivery && self.pending_failovers.is_replacement(lease) => {
                    let fails_over = matches!(
                        reason,
                        exchange::EndReason::NodeFailure | exchange::EndReason::NotDelivered
                    );
                    self.pending_failovers.ended(lease, fails_over, at_ms);
                    match self.delivery_failed(lease, reason, at_ms) {
                        Some(input) => input,
                        None => continue,
                    }
                }
                Event::LeaseEnded {
                    lease,
                    reason: exchange::EndReason::NotDelivered,
                    at_ms,
                    ..
                } if !self.started.contains_key(&lease) => {
                    // Never ready, never billed: the supplier's statement lists it.
                    match self.delivery_failed(lease, exchange::EndReason::NotDelivered, at_ms) {
                        Some(input) => input,
                        None => continue,
                    }
                }
                Event::LeaseEnded {
                    lease,
                    reason,
                    at_ms: end_ms,
                    ..
                } => {
                    let Some(start_ms) = self.started.remove(&lease) else {
                        continue; // called off before it started: nothing to bill
                    };
                    // A lease that started on a node already silent ends at the node's last
                    // heartbeat, before its start: it ran for no time.
                    Input::LeaseEnded {
                        lease: LedgerLease(lease.0),
                        end_ms: end_ms.max(start_ms),
                        reason: map_end(reason),
                    }
                }
                Event::LeaseMigrated { from, to } if delivery => {
                    // The credit waits for the replacements to be ready.
                    // A lease never delivered is owed a credit when its terms grant one (its
                    // `DeliveryFailed` gave the ledger its terms; issue 26).
                    let billed = self.ledger.credit_terms(LedgerLease(from.0)).is_some();
                    self.pending_failovers.migrated(from, to, billed);
                    self.track_replacement(from, to, billed);
                    continue;
                }
                Event::FailoverFailed { lease, .. }
                    if delivery && self.pending_failovers.is_replacement(lease) =>
                {
                    // Its `ended` already took it out; settling reports the outage.
                    continue;
                }
                Event::LeaseMigrated { from, to } => {
                    // A lease failed over before it started (a preemption's replacement still
                    // waiting for its deadline) was never billed: no failover fact for it.
                    if self.ledger.lease_totals(LedgerLease(from.0)).is_none() {
                        continue;
                    }
                    // A spread lease may be replaced on several nodes (one migration each):
                    // one fact per failed lease, at its first migration, with the latest
                    // replacement start — the outage lasts until all of it runs again.
                    let f = failovers.get_or_insert_with(|| failovers_of(&output.events));
                    match f.get(&from) {
                        Some(f) if f.first == to => {
                            let prices = ReplacementPrices {
                                leases: f.replacements.clone(),
                                booked_end_ms: self
                                    .engine
                                    .lease(to)
                                    .and_then(|l| l.origin.fixed_end_ms),
                            };
                            Input::Failover {
                                lease: LedgerLease(from.0),
                                replacement_start_ms: f.latest_start_ms,
                                replacement_price: prices.price(),
                            }
                        }
                        _ => continue,
                    }
                }
                Event::FailoverFailed { lease, .. } => {
                    // Never started: nothing billed, nothing to credit, unless its terms grant
                    // a non-delivery credit (issue 26).
                    if self.ledger.credit_terms(LedgerLease(lease.0)).is_none() {
                        continue;
                    }
                    // A partial spread failover also migrated, and its migration carries the
                    // fact; only report "no replacement" when nothing migrated.
                    let f = failovers.get_or_insert_with(|| failovers_of(&output.events));
                    if f.contains_key(&lease) {
                        continue;
                    }
                    Input::Failover {
                        lease: LedgerLease(lease.0),
                        replacement_start_ms: None,
                        replacement_price: None,
                    }
                }
                _ => continue,
            };
            self.ledger_fact(at_ms, &input, out);
        }
        for (lease, ready_ms) in self.pending_failovers.settle() {
            let prices = self.replacement_prices.remove(&lease);
            let input = Input::Failover {
                lease: LedgerLease(lease.0),
                replacement_start_ms: ready_ms,
                replacement_price: prices.and_then(|p| p.price()),
            };
            self.ledger_fact(at_ms, &input, out);
        }
    }

    /// The ledger's `DeliveryFailed` fact of a lease that ended `not_delivered` without ever
    /// being ready (`None` for any other end, or a lease the ledger started).
    fn delivery_failed(
        &self,
        lease: EngineLease,
        reason: exchange::EndReason,
        at_ms: i64,
    ) -> Option<Input> {
        if reason != exchange::EndReason::NotDelivered || self.started.contains_key(&lease) {
            return None;
        }
        let r = self.deliveries.record(lease)?;
        Some(Input::DeliveryFailed {
            lease: LedgerLease(lease.0),
            buyer: LedgerAccount(r.buyer.0),
            supplier: LedgerAccount(r.supplier.0),
            sku: self
                .engine
                .catalog()
                .get(r.sku)
                .map_or_else(String::new, |s| s.id.clone()),
            region: self.engine.region_name(r.region).unwrap_or("").to_string(),
            gpus: r.gpus,
            at_ms,
            // Terms granting a non-delivery credit (issue 26), except on a replacement: the
            // failed lease it stands in for is credited until its replacements are ready.
            sla: self
                .lease_sla
                .get(&lease)
                .filter(|s| {
                    s.terms.non_delivery_credit && !self.pending_failovers.is_replacement(lease)
                })
                .map(|s| UndeliveredSla {
                    terms: s.terms,
                    price_per_gpu_hour: r.price.to_decimal(),
                    deadline_ms: s.provision_deadline_ms.unwrap_or(at_ms),
                }),
        })
    }

    /// The ledger's start fact of a lease billed from `start_ms` (its start, or with delivery
    /// its ready time); notes it as started.
    #[allow(clippy::too_many_arguments)]
    fn billing_start(
        &mut self,
        lease: EngineLease,
        buyer: EngineAccount,
        supplier: EngineAccount,
        sku: exchange::SkuId,
        region: exchange::RegionId,
        gpus: u32,
        price: exchange::Price,
        start_ms: i64,
    ) -> Input {
        // Its burn began with its `LeaseStarted` (the loop at the top of `feed_ledger`).
        self.started.insert(lease, start_ms);
        Input::LeaseStarted(LeaseStart {
            lease: LedgerLease(lease.0),
            buyer: LedgerAccount(buyer.0),
            supplier: LedgerAccount(supplier.0),
            sku: self
                .engine
                .catalog()
                .get(sku)
                .map_or_else(String::new, |s| s.id.clone()),
            region: self.engine.region_name(region).unwrap_or("").to_string(),
            gpus,
            price_per_gpu_hour: price.to_decimal(),
            start_ms,
            // The terms frozen at fill (issue 26): the ledger keeps them from here.
            sla: self.lease_sla.remove(&lease).map(|s| s.terms),
        })
    }

    fn tick(&mut self, now_ms: i64, out: &mut Outcome) {
        self.engine_apply(&Command::Tick, now_ms, out);
        self.ledger_fact(now_ms, &Input::Accrue { now_ms }, out);
        for end in self.ledger.leases_to_end(now_ms) {
            let lease = EngineLease(end.lease.0);
            if self.engine.lease(lease).is_some() {
                self.engine_apply(&Command::EndLeaseInsufficientFunds { lease }, now_ms, out);
            }
        }
        self.account_listed_capacity(now_ms, out);
    }

    /// Tells the ledger which GPUs were listed since the last tick (for utilisation).
    fn account_listed_capacity(&mut self, now_ms: i64, out: &mut Outcome) {
        let from = self.listed_until_ms.unwrap_or(now_ms);
        self.listed_until_ms = Some(now_ms);
        if now_ms <= from {
            return;
        }
        let mut listed: std::collections::BTreeMap<(u64, String, String), u32> = Default::default();
        for offer in self.engine.offers() {
            let Some(node) = self.engine.node(offer.node) else {
                continue;
            };
            if node.status != exchange::state::NodeStatus::Online
                || node.draining
                || node.held.is_some()
            {
                continue;
            }
            let sku = self
                .engine
                .catalog()
                .get(node.sku)
                .map_or_else(String::new, |s| s.id.clone());
            let region = self
                .engine
                .region_name(node.region)
                .unwrap_or("")
                .to_string();
            *listed.entry((offer.supplier.0, sku, region)).or_default() +=
                offer.terms.gpus.min(node.healthy_gpus());
        }
        for ((supplier, sku, region), gpus) in listed {
            self.ledger_fact(
                now_ms,
                &Input::ListedCapacity {
                    supplier: LedgerAccount(supplier),
                    sku,
                    region,
                    gpus,
                    from_ms: from,
                    to_ms: now_ms,
                },
                out,
            );
        }
    }
}

/// A failed lease's replacements in one engine output: the first (whose migration event
/// carries the ledger's failover fact) and the latest start among all of them.
struct Failover {
    first: EngineLease,
    latest_start_ms: Option<i64>,
    /// Each replacement: (price per GPU-hour, GPUs), for the dearer-replacement credit.
    replacements: BTreeMap<EngineLease, (Decimal, u32)>,
}

/// The failovers of one engine output by failed lease, from its `LeaseMigrated` and `Fill`
/// events (one pass each, instead of a scan of the output per migration).
fn failovers_of(events: &[Event]) -> BTreeMap<EngineLease, Failover> {
    let starts: BTreeMap<EngineLease, (i64, Decimal, u32)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Fill {
                lease,
                start_ms,
                price,
                gpus,
                ..
            } => Some((*lease, (*start_ms, price.to_decimal(), *gpus))),
            _ => None,
        })
        .collect();
    let mut failovers: BTreeMap<EngineLease, Failover> = BTreeMap::new();
    for e in events {
        if let Event::LeaseMigrated { from, to } = e {
            let f = failovers.entry(*from).or_insert(Failover {
                first: *to,
                latest_start_ms: None,
                replacements: BTreeMap::new(),
            });
            if let Some(&(start_ms, price, gpus)) = starts.get(to) {
                f.latest_start_ms = f.latest_start_ms.max(Some(start_ms));
                f.replacements.insert(*to, (price, gpus));
            }
        }
    }
    failovers
}

fn map_end(r: exchange::EndReason) -> LedgerEnd {
    match r {
        exchange::EndReason::Released => LedgerEnd::Released,
        exchange::EndReason::Expired => LedgerEnd::Expired,
        exchange::EndReason::Preempted => LedgerEnd::Preempted,
        exchange::EndReason::NodeFailure => LedgerEnd::NodeFailure,
        exchange::EndReason::OfferWithdrawn => LedgerEnd::OfferWithdrawn,
        exchange::EndReason::InsufficientFunds => LedgerEnd::InsufficientFunds,
        exchange::EndReason::NotDelivered => LedgerEnd::NotDelivered,
        // A gang member ended because another was lost (`on_member_loss: end_all`, §13.4):
        // not the buyer's doing (no minimum billed time), no SLA credit of its own.
        exchange::EndReason::GangEnded => LedgerEnd::GangEnded,
    }
}

fn account_refusal(e: &crate::accounts::AccountError) -> Refusal {
    Refusal {
        code: e.code(),
        message: e.to_string(),
    }
}

fn ledger_error_code(e: &settlement::SettlementError) -> &'static str {
    use settlement::SettlementError as E;
    match e {
        E::IdempotencyConflict { .. } => "idempotency_conflict",
        E::PeriodNotEnded { .. } => "period_not_ended",
        E::CloseNotContiguous { .. } => "close_not_contiguous",
        E::PeriodClosed { .. } => "period_closed",
        E::InvalidAdjustment(_) => "invalid_adjustment",
        E::SlaCashOutExceeded { .. } => "sla_cash_out_exceeded",
        E::WriteOffExceedsDebt { .. } => "write_off_exceeds_debt",
        _ => "ledger_rejected",
    }
}
