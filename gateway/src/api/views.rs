//! Views of the market for answers (ids and amounts as strings; times in ms since epoch).
//! Built inside [`crate::sequencer::SequencerHandle::read`] closures from the live state.

use crate::api::dto::{InterconnectDto, kind_str, price_str};
use crate::market::Market;
use exchange::state::{Bid, Lease, Node, NodeStatus, Offer};
use exchange::{Engine, LeaseKind, Placement};
use serde::Serialize;
use utoipa::ToSchema;

/// A CNY amount for the wire: rounded to the fen by the settlement's rule
/// ([`settlement::FEN_ROUNDING`]) and always printed with two decimals (`"0.00"`).
pub fn money(d: rust_decimal::Decimal) -> String {
    format!("{:.2}", settlement::round_fen(d))
}

/// An exact ledger amount (CNY) for the wire: every stored decimal (up to 12, the charge
/// quantum), at least two: `1000` → `"1000.00"`, `995.888611111111` → `"995.888611111111"`.
pub fn exact_money(d: rust_decimal::Decimal) -> String {
    let n = d.normalize();
    if n.scale() < 2 {
        format!("{n:.2}")
    } else {
        n.to_string()
    }
}

/// A rate (CNY per hour) for the wire, four decimals.
pub fn rate(d: rust_decimal::Decimal) -> String {
    format!("{:.4}", d.round_dp(4))
}

fn sku_name(e: &Engine, sku: exchange::SkuId) -> String {
    e.catalog()
        .get(sku)
        .map_or_else(String::new, |s| s.id.clone())
}

fn region_name(e: &Engine, r: exchange::RegionId) -> String {
    e.region_name(r).unwrap_or("").to_string()
}

/// A supplier's node.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct NodeView {
    /// Node id.
    pub id: String,
    /// Supplier's name for it.
    pub name: String,
    /// SKU.
    pub sku: String,
    /// Physical GPUs.
    pub gpus: u32,
    /// Healthy GPUs (last heartbeat).
    pub healthy_gpus: u32,
    /// Region.
    pub region: String,
    /// Jurisdiction.
    pub jurisdiction: String,
    /// Fabric.
    pub interconnect: InterconnectDto,
    /// NVLink.
    pub nvlink: bool,
    /// `online` or `offline`.
    pub status: &'static str,
    /// Takes no new leases.
    pub draining: bool,
    /// Last heartbeat, ms since epoch.
    pub last_heartbeat_ms: i64,
    /// Live offer id.
    pub offer_id: Option<String>,
    /// GPUs held by live leases.
    pub leased_gpus: u32,
    /// GPUs listed free in the market now.
    pub listed_free_gpus: u32,
    /// GPUs of ended leases waiting to be wiped (reported torn down); never listed.
    pub wiping_gpus: u32,
    /// Held off the market until resumed: `not_delivered` or `teardown_overdue`
    /// (docs/market-rules.md §11.8).
    #[schema(value_type = Option<String>)]
    pub held: Option<exchange::HoldReason>,
}

impl NodeView {
    /// The view of a node.
    pub fn of(e: &Engine, n: &Node) -> NodeView {
        NodeView {
            id: n.id.0.to_string(),
            name: n.name.clone(),
            sku: sku_name(e, n.sku),
            gpus: n.gpus,
            healthy_gpus: n.healthy_gpus(),
            region: region_name(e, n.region),
            jurisdiction: n.jurisdiction.to_string(),
            interconnect: n.interconnect.into(),
            nvlink: n.nvlink,
            status: match n.status {
                NodeStatus::Online => "online",
                NodeStatus::Offline => "offline",
            },
            draining: n.draining,
            last_heartbeat_ms: n.last_heartbeat_ms,
            offer_id: n.offer.map(|o| o.0.to_string()),
            leased_gpus: n.claimed_mask.count_ones(),
            listed_free_gpus: e.listed_free_gpus(n.id),
            wiping_gpus: n.wiping_mask.count_ones(),
            held: n.held,
        }
    }
}

/// A live offer.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct OfferView {
    /// Offer id.
    pub id: String,
    /// Node id.
    pub node_id: String,
    /// GPUs offered.
    pub gpus: u32,
    /// Spot price, CNY per GPU-hour.
    pub spot_price: String,
    /// Preemptible price, CNY per GPU-hour.
    pub preemptible_price: Option<String>,
    /// Shortest fixed lease, s.
    pub min_lease_s: u64,
    /// Longest lease, s.
    pub max_lease_s: u64,
    /// Leaves the market at, ms since epoch.
    pub available_until_ms: i64,
    /// Preemption notice, s.
    pub notice_s: u32,
    /// Provisioning deadline, seconds (docs/market-rules.md §11).
    pub provision_s: u32,
}

impl OfferView {
    /// The view of an offer.
    pub fn of(o: &Offer) -> OfferView {
        OfferView::from_terms(o.id, o.node, &o.terms)
    }

    /// The view of an offer from its id, node and terms (as an `OfferPosted` event has them).
    pub fn from_terms(
        id: exchange::OfferId,
        node: exchange::NodeId,
        terms: &exchange::OfferTerms,
    ) -> OfferView {
        OfferView {
            id: id.0.to_string(),
            node_id: node.0.to_string(),
            gpus: terms.gpus,
            spot_price: price_str(terms.spot_price),
            preemptible_price: terms.preemptible_price.map(price_str),
            min_lease_s: terms.min_lease_s,
            max_lease_s: terms.max_lease_s,
            available_until_ms: terms.available_until_ms,
            notice_s: terms.notice_s,
            provision_s: terms.provision_s,
        }
    }
}

/// A resting bid.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct BidView {
    /// Bid id.
    pub id: String,
    /// Client order id.
    pub client_order_id: Option<String>,
    /// SKU.
    pub sku: String,
    /// GPUs asked for.
    pub gpus: u32,
    /// GPUs still wanted.
    pub remaining: u32,
    /// Limit, CNY per GPU-hour.
    pub limit_price: String,
    /// `spot` or `preemptible`.
    pub kind: &'static str,
    /// `single_node` or `spread`.
    pub placement: &'static str,
    /// Lease term, s (absent: open-ended).
    pub duration_s: Option<u64>,
    /// Expires at, ms since epoch.
    pub expires_at_ms: Option<i64>,
}

impl BidView {
    /// The view of a resting bid.
    pub fn of(e: &Engine, b: &Bid, client_order_id: Option<String>) -> BidView {
        BidView {
            id: b.id.0.to_string(),
            client_order_id,
            sku: sku_name(e, b.sku),
            gpus: b.gpus,
            remaining: b.remaining,
            limit_price: price_str(b.limit),
            kind: kind_str(b.kind),
            placement: match b.placement {
                Placement::SingleNode => "single_node",
                Placement::Spread => "spread",
            },
            duration_s: b.duration_s,
            expires_at_ms: b.expires_at_ms,
        }
    }
}

/// A lease, live or ended (docs/market-rules.md §11 for its phases). Buyer and supplier of
/// the lease only: the launch spec and the access details are theirs.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct LeaseView {
    /// Lease id.
    pub id: String,
    /// Bid that made it.
    pub bid_id: String,
    /// Node.
    pub node_id: String,
    /// Offer.
    pub offer_id: String,
    /// SKU.
    pub sku: String,
    /// Region.
    pub region: String,
    /// `spot` or `preemptible`.
    pub kind: &'static str,
    /// GPUs.
    pub gpus: u32,
    /// Indexes of the node's GPUs it holds (empty while pending).
    pub gpu_indexes: Vec<u32>,
    /// Price, CNY per GPU-hour.
    pub price: String,
    /// Start (the GPUs become its), ms since epoch.
    pub start_ms: i64,
    /// Scheduled end, ms since epoch (a preemption notice may bring it forward).
    pub end_ms: i64,
    /// `pending` (waits for a preemption deadline), `provisioning` (the supplier's node is
    /// setting it up; not billed), `active` (running, billed since `ready_ms`) or `ended`.
    pub state: &'static str,
    /// While provisioning: the supplier must report ready by then, ms since epoch (absent
    /// while the GPUs are still being wiped after their previous lease).
    pub provision_deadline_ms: Option<i64>,
    /// When it became ready (billing starts), ms since epoch.
    pub ready_ms: Option<i64>,
    /// How to reach it, once ready.
    pub access: Option<AccessView>,
    /// What it runs (while its bid or one of its leases lives).
    #[schema(value_type = Option<Object>)]
    pub launch: Option<crate::delivery::LaunchSpec>,
    /// Deadline of a preemption notice, ms since epoch.
    pub notice_deadline_ms: Option<i64>,
    /// Charged so far (the final charge once ended), CNY — accrued per second from ready.
    pub charged: Option<String>,
    /// Seconds billed so far.
    pub billed_seconds: u64,
    /// SLA credit granted for it, CNY.
    pub sla_credit: Option<String>,
    /// Why it ended: `released`, `expired`, `preempted`, `node_failure`, `offer_withdrawn`,
    /// `insufficient_funds` or `not_delivered` (never charged).
    #[schema(value_type = Option<String>)]
    pub end_reason: Option<exchange::EndReason>,
    /// When it ended (the billing end), ms since epoch.
    pub ended_at_ms: Option<i64>,
    /// The supplier's reason when it reported the lease failed.
    pub failure_reason: Option<String>,
    /// The wipe of its GPUs after it ended: the buyer's deletion record.
    pub teardown: Option<TeardownView>,
    /// The lease it replaces after a failover.
    pub migrated_from: Option<String>,
    /// Its replacements after a failover.
    pub migrated_to: Vec<String>,
    /// GPUs its failover could not place (none free at an acceptable price, or none at all).
    pub failover_failed_gpus: Option<u32>,
    /// Why: `no_capacity`, `price` or `constraints` (docs/market-rules.md §4.1).
    #[schema(value_type = Option<String>)]
    pub failover_failed_reason: Option<exchange::BidCloseReason>,
}

/// Access details of a ready lease.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct AccessView {
    /// SSH host.
    pub ssh_host: Option<String>,
    /// SSH port.
    pub ssh_port: Option<u16>,
    /// SSH user.
    pub ssh_user: Option<String>,
    /// URL of each exposed port, by port.
    pub urls: std::collections::BTreeMap<u16, String>,
    /// The login command, e.g. `ssh -p 2222 root@203.0.113.7`.
    pub ssh_command: Option<String>,
}

impl AccessView {
    /// The view of access details.
    pub fn of(a: &crate::delivery::AccessDetails) -> AccessView {
        AccessView {
            ssh_host: a.ssh_host.clone(),
            ssh_port: a.ssh_port,
            ssh_user: a.ssh_user.clone(),
            urls: a.urls.clone(),
            ssh_command: a.ssh_command(),
        }
    }
}

/// The wipe of an ended lease's GPUs.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct TeardownView {
    /// `wiping`, `torn_down` or `overdue` (no report by the deadline: the node is held).
    pub status: &'static str,
    /// Teardown deadline, ms since epoch.
    pub deadline_ms: i64,
    /// When the supplier reported the wipe, ms since epoch.
    pub torn_down_ms: Option<i64>,
    /// How, as the supplier reported it.
    pub method: Option<String>,
}

impl LeaseView {
    /// The view of a live engine lease (its record gives the delivery details).
    pub fn of(m: &Market, l: &Lease) -> LeaseView {
        match m.deliveries().record(l.id) {
            Some(r) => LeaseView::of_record(m, r),
            None => LeaseView::of_record(m, &crate::delivery::LeaseRecord::of_lease(l)),
        }
    }

    /// The view of a lease record (live or ended).
    pub fn of_record(m: &Market, r: &crate::delivery::LeaseRecord) -> LeaseView {
        use crate::delivery::Phase;
        let e = m.engine();
        let totals = m.ledger().lease_totals(settlement::LeaseId(r.lease.0));
        LeaseView {
            id: r.lease.0.to_string(),
            bid_id: r.bid.0.to_string(),
            node_id: r.node.0.to_string(),
            offer_id: r.offer.0.to_string(),
            sku: sku_name(e, r.sku),
            region: region_name(e, r.region),
            kind: match r.kind {
                LeaseKind::Spot => "spot",
                LeaseKind::Preemptible => "preemptible",
            },
            gpus: r.gpus,
            gpu_indexes: (0..32).filter(|i| r.gpu_mask & (1 << i) != 0).collect(),
            price: price_str(r.price),
            start_ms: r.start_ms,
            end_ms: r.end_ms,
            state: match r.phase {
                Phase::Pending => "pending",
                Phase::Provisioning => "provisioning",
                Phase::Running => "active",
                Phase::Ended => "ended",
            },
            provision_deadline_ms: r.provision_deadline_ms,
            ready_ms: r.ready_ms,
            access: r.access.as_ref().map(AccessView::of),
            launch: m.deliveries().launch(r.bid).cloned(),
            notice_deadline_ms: r.notice_deadline_ms,
            charged: totals.as_ref().map(|t| money(t.amount)),
            billed_seconds: totals.as_ref().map_or(0, |t| t.billed_seconds),
            sla_credit: totals.as_ref().map(|t| money(t.sla_credit)),
            end_reason: r.ended.map(|e| e.0),
            ended_at_ms: r.ended.map(|e| e.1),
            failure_reason: r.failure.clone(),
            teardown: r.wipe.as_ref().map(|w| TeardownView {
                status: match (w.torn_down_ms, w.overdue) {
                    (Some(_), _) => "torn_down",
                    (None, true) => "overdue",
                    (None, false) => "wiping",
                },
                deadline_ms: w.deadline_ms,
                torn_down_ms: w.torn_down_ms,
                method: w.method.clone(),
            }),
            migrated_from: r.migrated_from.map(|l| l.0.to_string()),
            migrated_to: r.migrated_to.iter().map(|l| l.0.to_string()).collect(),
            failover_failed_gpus: r.failover_failed.map(|f| f.0),
            failover_failed_reason: r.failover_failed.map(|f| f.1),
        }
    }
}

/// A buyer's money: balance, what is available for new bids, burn rate and runway.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct BalanceView {
    /// Buyer account id.
    pub account_id: String,
    /// Prepaid balance, CNY, exact ([`exact_money`]: the ledger's own value, not rounded).
    pub balance: String,
    /// Balance minus accrued-but-unposted charges, CNY.
    pub available: String,
    /// Held by resting bids (limit × GPUs × minimum runway), CNY.
    pub held_by_bids: String,
    /// Current spend of live leases, CNY per hour.
    pub burn_rate_per_hour: String,
    /// Seconds until the balance runs out at the burn rate (absent: nothing burns).
    pub runway_s: Option<u64>,
}

impl BalanceView {
    /// A buyer's balance view at `now_ms`.
    pub fn of(m: &Market, buyer: u64, now_ms: i64) -> BalanceView {
        let l = m.ledger();
        let id = settlement::AccountId(buyer);
        BalanceView {
            account_id: buyer.to_string(),
            balance: exact_money(l.balance(settlement::Account::Buyer(id))),
            available: money(l.available_balance(id, now_ms)),
            held_by_bids: money(m.held_by_bids(buyer)),
            burn_rate_per_hour: rate(l.burn_rate_per_hour(id)),
            runway_s: l.runway_seconds(id, now_ms),
        }
    }
}

/// A supplier's earnings so far.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct EarningsView {
    /// Supplier account id.
    pub account_id: String,
    /// Payable balance (earned minus paid out), CNY.
    pub payable: String,
    /// Live leases on the supplier's nodes.
    pub live_leases: usize,
    /// GPUs in live leases.
    pub leased_gpus: u32,
    /// Current earning rate before fees, CNY per hour.
    pub gross_rate_per_hour: String,
}

/// One inventory level.
#[derive(Clone, Debug, Serialize, ToSchema, PartialEq, Eq)]
pub struct LevelView {
    /// Region.
    pub region: String,
    /// `spot` or `preemptible`.
    pub kind: &'static str,
    /// Price, CNY per GPU-hour.
    pub price: String,
    /// Free GPUs at this level (0 in a delta: the level is gone).
    pub free_gpus: u32,
    /// Largest number free on one node.
    pub max_single_node: u32,
}

/// An account (admin view).
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct AccountView {
    /// Account id.
    pub id: String,
    /// Name.
    pub name: String,
    /// Role.
    pub role: crate::accounts::Role,
    /// Created at, ms since epoch.
    pub created_ms: i64,
    /// Key ids (never the keys).
    pub key_ids: Vec<String>,
}

impl AccountView {
    /// The view of an account.
    pub fn of(a: &crate::accounts::AccountRecord) -> AccountView {
        AccountView {
            id: a.id.to_string(),
            name: a.name.clone(),
            role: a.role,
            created_ms: a.created_ms,
            key_ids: a.keys.keys().cloned().collect(),
        }
    }
}

/// `GET /v1/nodes`.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct NodeList {
    /// The caller's nodes.
    pub nodes: Vec<NodeView>,
}

/// `GET /v1/offers`.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct OfferList {
    /// The caller's live offers.
    pub offers: Vec<OfferView>,
}

/// `GET /v1/bids`.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct BidList {
    /// The caller's resting bids.
    pub bids: Vec<BidView>,
}

/// `GET /v1/leases`.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct LeaseList {
    /// Leases, newest first.
    pub leases: Vec<LeaseView>,
    /// Pass as `cursor` for the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// `GET /v1/admin/accounts`.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct AccountList {
    /// Every account.
    pub accounts: Vec<AccountView>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    #[test]
    fn exact_money_keeps_every_stored_decimal_and_at_least_two() {
        let d = |s: &str| rust_decimal::Decimal::from_str(s).unwrap();
        assert_eq!(exact_money(d("1000")), "1000.00");
        assert_eq!(exact_money(d("99999.980000000000")), "99999.98");
        assert_eq!(exact_money(d("995.888611111111")), "995.888611111111");
        assert_eq!(exact_money(d("0.000000000001")), "0.000000000001");
        assert_eq!(exact_money(d("-3.5")), "-3.50");
        assert_eq!(money(d("995.888611111111")), "995.89");
    }
}
