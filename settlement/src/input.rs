//! Settlement inputs: the facts the gateway feeds the ledger.
//!
//! The exchange engine's lease events are mapped onto these by the gateway
//! (settlement does not depend on `exchange`). Every input is applied with
//! the time it is applied at (`Ledger::apply(at_ms, input)`), in
//! non-decreasing order; times are `i64` milliseconds since the Unix epoch
//! (UTC) throughout.

use crate::adjust::Adjustment;
use crate::ids::{Account, AccountId, LeaseId};
use crate::sla::SlaTerms;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

/// Why a lease ended (engine end reasons). The end time that comes with it
/// is already the billing end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// The buyer released the lease.
    Released,
    /// The lease reached its booked end.
    Expired,
    /// The supplier preempted with notice; end = the preemption deadline.
    /// Earns no SLA credit.
    Preempted,
    /// The node failed; end = the last heartbeat. Earns an SLA credit once
    /// the failover fact arrives.
    NodeFailure,
    /// The supplier withdrew the offer.
    OfferWithdrawn,
    /// The engine ended the lease because the buyer ran out of funds.
    InsufficientFunds,
    /// The supplier never delivered it (reported failed, or its provisioning deadline
    /// passed; docs/settlement.md "Delivery"): charged nothing, no SLA credit (the buyer had
    /// nothing to lose and the work failed over) unless its terms grant a non-delivery
    /// credit (issue 26, [`Input::DeliveryFailed`]`::sla`).
    NotDelivered,
    /// Another member of its gang was lost without a replacement and the bid asked
    /// `on_member_loss: end_all` (docs/market-rules.md §13.4): billed to the end, no minimum
    /// (not the buyer's own end), no SLA credit (the lost member's own end carries that).
    GangEnded,
}

impl EndReason {
    /// Whether the buyer caused the end, so a market's minimum billed time
    /// applies (`released`, `expired`, `insufficient_funds`).
    pub fn buyer_caused(self) -> bool {
        matches!(
            self,
            EndReason::Released | EndReason::Expired | EndReason::InsufficientFunds
        )
    }

    /// Stable snake_case name, as in the engine.
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::Released => "released",
            EndReason::Expired => "expired",
            EndReason::Preempted => "preempted",
            EndReason::NodeFailure => "node_failure",
            EndReason::OfferWithdrawn => "offer_withdrawn",
            EndReason::InsufficientFunds => "insufficient_funds",
            EndReason::NotDelivered => "not_delivered",
            EndReason::GangEnded => "gang_ended",
        }
    }
}

/// The engine's lease start fact, sent when the lease is ready (docs/settlement.md "Delivery").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseStart {
    /// Lease id (unique).
    pub lease: LeaseId,
    /// Buyer account (its prepaid balance pays).
    pub buyer: AccountId,
    /// Supplier account (its payable earns).
    pub supplier: AccountId,
    /// SKU id, e.g. "H100-80G".
    pub sku: String,
    /// Region id, e.g. "cn-east-2".
    pub region: String,
    /// GPUs leased, 1..=100 000.
    pub gpus: u32,
    /// Price, CNY per GPU-hour, in [0, 10⁶] with at most 8 decimal places.
    pub price_per_gpu_hour: Decimal,
    /// Billing start, ms since epoch: when the supplier reported the lease ready (issue 15),
    /// never the fill or the start of provisioning. Statements print it as `ready`.
    pub start_ms: i64,
    /// The offer's SLA terms frozen on the lease at fill (issue 26, docs/settlement.md "SLA
    /// credit"); `None` = the ledger configuration's rule before issue 26 (10×, 1 h, capped
    /// at the charge so far, no monthly promise). Validated on start
    /// ([`SlaTerms::validate`]). Absent from inputs and snapshots made before it.
    #[serde(default)]
    pub sla: Option<SlaTerms>,
}

/// The replacement of a failed lease, for the dearer-replacement credit (issue 26,
/// docs/settlement.md "SLA credit"): carried on [`Input::Failover`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplacementPrice {
    /// The replacement's price, CNY per GPU-hour, in [0, 10⁶] with at most 8 decimal places;
    /// for a lease replaced by several leases, their GPU-weighted mean (Σ price × GPUs /
    /// Σ GPUs).
    pub price_per_gpu_hour: Decimal,
    /// The failed lease's booked (fixed) end, ms since epoch; `None` when it had none (then
    /// the extra price is credited for the full 24 h).
    pub booked_end_ms: Option<i64>,
}

/// What a lease never delivered needs for a non-delivery credit (issue 26): carried on
/// [`Input::DeliveryFailed`] when its terms allow one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct UndeliveredSla {
    /// The lease's SLA terms (frozen at fill). A credit is granted only when
    /// `non_delivery_credit` is set.
    pub terms: SlaTerms,
    /// The lease's price, CNY per GPU-hour (bounds as [`LeaseStart::price_per_gpu_hour`]).
    pub price_per_gpu_hour: Decimal,
    /// Its provisioning deadline, ms since epoch: the outage runs from here to the
    /// replacement's ready time ([`Input::Failover`] for this lease).
    pub deadline_ms: i64,
}

/// One settlement input. See `docs/settlement.md` for the transfers each makes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Input {
    /// A lease started: sent when the supplier reports it ready, with `start_ms` = the ready
    /// time (issue 15). No transfer; billing runs from `start_ms`.
    LeaseStarted(LeaseStart),
    /// A lease ended; `end_ms` (ms since epoch) is the billing end: the
    /// preemption deadline for `preempted`, the last heartbeat for
    /// `node_failure`. Posts the final charge (or a refund if accrual had
    /// run past `end_ms`).
    LeaseEnded {
        /// The lease.
        lease: LeaseId,
        /// Billing end, ms since epoch.
        end_ms: i64,
        /// Why it ended.
        reason: EndReason,
    },
    /// Failover result for a `node_failure` lease: `Some(start ms of the
    /// replacement lease)` or `None` when no capacity was found. Posts the
    /// SLA credit by the lease's own terms, computed on the failed lease's billed (ready)
    /// time. Also accepted for a lease never delivered whose `DeliveryFailed` carried terms
    /// with a non-delivery credit (issue 26).
    Failover {
        /// The failed (old) lease.
        lease: LeaseId,
        /// Start of the replacement lease, ms since epoch, if any: its ready time (the
        /// `start_ms` of its `LeaseStarted`), when the buyer's work can run again.
        replacement_start_ms: Option<i64>,
        /// The replacement's price (issue 26), for the dearer-replacement credit; `None`
        /// (also in inputs made before it) = no price-difference credit.
        #[serde(default)]
        replacement_price: Option<ReplacementPrice>,
    },
    /// A buyer top-up (external cash → buyer). Idempotent by `key`.
    Deposit {
        /// Idempotency key (e.g. the payment provider's transaction id).
        key: String,
        /// The buyer.
        buyer: AccountId,
        /// Amount, CNY, > 0.
        amount: Decimal,
    },
    /// A supplier payout (supplier payable → external cash). Idempotent by `key`.
    Payout {
        /// Idempotency key (e.g. the bank transfer id).
        key: String,
        /// The supplier.
        supplier: AccountId,
        /// Amount, CNY, > 0 and at most the payable.
        amount: Decimal,
    },
    /// A manual adjustment between two accounts. Idempotent by `key`.
    Adjustment {
        /// Idempotency key (e.g. the ticket id).
        key: String,
        /// Account debited (a buyer may not go below zero).
        debit: Account,
        /// Account credited.
        credit: Account,
        /// Amount, CNY, > 0.
        amount: Decimal,
        /// Free text shown on statements.
        memo: String,
    },
    /// Accrual tick: charge every active lease for its seconds started
    /// before `now_ms` (ms since epoch). The gateway sends one at least every
    /// 60 s.
    Accrue {
        /// Accrue through this instant, ms since epoch; `<= at_ms`.
        now_ms: i64,
    },
    /// A lease the supplier never delivered (issue 15, docs/settlement.md "Delivery"): it was
    /// reported failed, or its provisioning deadline passed, before it was ever ready. A lease
    /// never ready is never started in the ledger, so this is its only fact: no transfer (it is
    /// charged zero), no SLA credit (unless `sla` grants a non-delivery credit, posted by a
    /// later `Failover` for it, issue 26); it is recorded so the supplier's payout statement lists
    /// and counts it and the buyer statement shows it as not delivered, 0.00. Idempotent per
    /// lease: the same fact again is `replayed`, a different one for the same lease is refused.
    DeliveryFailed {
        /// The lease that was never delivered (never started in the ledger).
        lease: LeaseId,
        /// Its buyer.
        buyer: AccountId,
        /// The supplier that failed to deliver it.
        supplier: AccountId,
        /// SKU id, e.g. "H100-80G".
        sku: String,
        /// Region id, e.g. "cn-east-2".
        region: String,
        /// GPUs of the lease, 1..=100 000.
        gpus: u32,
        /// When it failed (the report, or the provisioning deadline), ms since epoch.
        at_ms: i64,
        /// Its SLA terms, price and provisioning deadline when it may earn a non-delivery
        /// credit (issue 26); `None` (also before issue 26) = no credit. Not part of the
        /// fact's identity for idempotency.
        #[serde(default)]
        sla: Option<UndeliveredSla>,
    },
    /// Capacity listed for sale, for utilisation: `gpus` GPUs of `sku` in
    /// `region` were listed over [`from_ms`, `to_ms`) (ms since epoch).
    /// Listings may overlap; GPU-seconds add up.
    ListedCapacity {
        /// The supplier listing.
        supplier: AccountId,
        /// SKU id.
        sku: String,
        /// Region id.
        region: String,
        /// GPUs listed.
        gpus: u32,
        /// Listing start, ms since epoch.
        from_ms: i64,
        /// Listing end, ms since epoch (exclusive).
        to_ms: i64,
    },
    /// A typed finance adjustment (issue 17, docs/settlement.md "Adjustments and refunds"):
    /// goodwill credit, correction, refund to the buyer's bank, SLA cash-out or write-off,
    /// with a reason and a reference. Idempotent by `key`.
    Adjust(Adjustment),
    /// Closes the period [`from_ms`, `to_ms`) (ms since epoch; issue 17, docs/settlement.md
    /// "Periods and close"): only once it has ended, in order without gaps or overlaps, with
    /// every active lease accrued through `to_ms`. Nothing posts into a closed period
    /// afterwards; invoice and statement numbers are assigned. Idempotent by `key`.
    ClosePeriod {
        /// Idempotency key (e.g. "close-2026-11").
        key: String,
        /// Period start (inclusive), ms since epoch.
        from_ms: i64,
        /// Period end (exclusive), ms since epoch; at most the time the close is applied.
        to_ms: i64,
    },
}

impl Input {
    /// The idempotency key of a deposit, payout, adjustment or close.
    pub fn idempotency_key(&self) -> Option<&str> {
        match self {
            Input::Deposit { key, .. }
            | Input::Payout { key, .. }
            | Input::Adjustment { key, .. }
            | Input::ClosePeriod { key, .. } => Some(key),
            Input::Adjust(a) => Some(&a.key),
            _ => None,
        }
    }
}
