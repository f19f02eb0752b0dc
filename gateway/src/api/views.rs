//! Views of the market for answers (ids and amounts as strings; times in ms since epoch).
//! Built inside [`crate::sequencer::SequencerHandle::read`] closures from the live state.
//! The shapes are the `gpux-wire` crate's (re-exported here); this module builds them from
//! the engine's and the ledger's state through one extension trait per view ([`NodeViewOf`]
//! and friends: the wire crate knows nothing of the engine).

use crate::api::dto::{
    close_reason_dto, end_reason_dto, hold_dto, interconnect_dto, kind_dto, placement_dto,
    price_str,
};
use crate::market::Market;
use exchange::Engine;
use exchange::state::{Bid, Lease, Node, NodeStatus, Offer};
pub use gpux_wire::{
    AccessView, AccountList, AccountView, BalanceView, BidList, BidView, EarningsView, LeaseList,
    LeaseView, LevelView, NodeList, NodeView, OfferList, OfferView, TeardownView,
};
use gpux_wire::{LeaseStateDto, NodeStatusDto, TeardownStatusDto};

/// The conversion traits between wire and domain types, for `use …::prelude::*`.
pub mod prelude {
    pub use super::{
        AccessViewOf, AccountViewOf, BalanceViewOf, BidViewOf, LeaseViewOf, NodeViewOf, OfferViewOf,
    };
    pub use crate::api::dto::{BidSpecOf, HeartbeatOf, NodeSpecOf, NodeUpdateOf, OfferTermsOf};
    pub use crate::api::launch::{AccessOf, LaunchSpecOf};
}

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

pub(crate) fn sku_name(e: &Engine, sku: exchange::SkuId) -> String {
    e.catalog()
        .get(sku)
        .map_or_else(String::new, |s| s.id.clone())
}

pub(crate) fn region_name(e: &Engine, r: exchange::RegionId) -> String {
    e.region_name(r).unwrap_or("").to_string()
}

/// Builds a [`NodeView`] from the market.
pub trait NodeViewOf {
    /// The view of a node.
    fn of(e: &Engine, n: &Node) -> NodeView;
}

impl NodeViewOf for NodeView {
    fn of(e: &Engine, n: &Node) -> NodeView {
        NodeView {
            id: n.id.0.to_string(),
            name: n.name.clone(),
            sku: sku_name(e, n.sku),
            gpus: n.gpus,
            healthy_gpus: n.healthy_gpus(),
            region: region_name(e, n.region),
            jurisdiction: n.jurisdiction.to_string(),
            interconnect: interconnect_dto(n.interconnect),
            nvlink: n.nvlink,
            status: match n.status {
                NodeStatus::Online => NodeStatusDto::Online,
                NodeStatus::Offline => NodeStatusDto::Offline,
            },
            draining: n.draining,
            last_heartbeat_ms: n.last_heartbeat_ms,
            offer_id: n.offer.map(|o| o.0.to_string()),
            leased_gpus: n.claimed_mask.count_ones(),
            listed_free_gpus: e.listed_free_gpus(n.id),
            wiping_gpus: n.wiping_mask.count_ones(),
            held: n.held.map(hold_dto),
            // The market's, not the engine's: `api::supplier::node_view_of` fills them.
            agent_clock_offset_ms: None,
            agent_clock_offset_at_ms: None,
            attestation: None,
            unhealthy_gpus: Vec::new(),
            verification: crate::wire_conv::verification_view(e, n.id),
            reliability: Some(node_reliability_view(e, n.id)),
            fabric_domain: e.node_fabric(n.id).and_then(|f| f.domain.clone()),
            nic_gbps: e.node_fabric(n.id).and_then(|f| f.nic_gbps),
        }
    }
}

/// Builds a [`OfferView`] from the market.
pub trait OfferViewOf {
    /// The view of an offer.
    fn of(o: &Offer) -> OfferView;
    /// The view of an offer from its id, node and terms (as an `OfferPosted` event has them).
    fn from_terms(
        id: exchange::OfferId,
        node: exchange::NodeId,
        terms: &exchange::OfferTerms,
    ) -> OfferView;
}

impl OfferViewOf for OfferView {
    fn of(o: &Offer) -> OfferView {
        OfferView::from_terms(o.id, o.node, &o.terms)
    }

    fn from_terms(
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
            sla: None,
            reliability: None,
            supplier_reliability: None,
        }
    }
}

/// A node's reliability score as the node view, the offer view and the public offer search
/// show it (docs/market-rules.md §12.3): over the last 30 UTC days now, with the score
/// `min_reliability` compares today (`matching_reliability`).
pub fn node_reliability_view(e: &Engine, node: exchange::NodeId) -> gpux_wire::ReliabilityView {
    crate::wire_conv::reliability_view(&e.reliability(node), Some(e.matching_reliability_bp(node)))
}

/// The view of a live offer as `GET /v1/offers` shows it (issue 26): its terms, its SLA terms
/// (the promise; `None`: the default rule) and beside them what the reliability book measured
/// of its node and of its supplier (docs/market-rules.md §12.3).
pub fn offer_view(m: &Market, o: &Offer) -> OfferView {
    let e = m.engine();
    let mut v = OfferView::of(o);
    v.sla = m.offer_sla(o.id).as_ref().map(crate::api::dto::sla_view);
    v.reliability = Some(node_reliability_view(e, o.node));
    v.supplier_reliability = Some(crate::wire_conv::reliability_view(
        &e.supplier_reliability(o.supplier),
        None,
    ));
    v
}

/// Builds a [`BidView`] from the market.
pub trait BidViewOf {
    /// The view of a resting bid.
    fn of(e: &Engine, b: &Bid, client_order_id: Option<String>) -> BidView;
}

impl BidViewOf for BidView {
    fn of(e: &Engine, b: &Bid, client_order_id: Option<String>) -> BidView {
        BidView {
            id: b.id.0.to_string(),
            client_order_id,
            sku: sku_name(e, b.sku),
            gpus: b.gpus,
            remaining: b.remaining,
            limit_price: price_str(b.limit),
            kind: kind_dto(b.kind),
            placement: placement_dto(b.placement),
            gang: crate::wire_conv::gang_request(b.placement),
            duration_s: b.duration_s,
            expires_at_ms: b.expires_at_ms,
        }
    }
}

/// Builds a [`AccessView`] from the market.
pub trait AccessViewOf {
    /// The view of access details.
    fn of(a: &crate::delivery::AccessDetails) -> AccessView;
}

impl AccessViewOf for AccessView {
    fn of(a: &crate::delivery::AccessDetails) -> AccessView {
        crate::wire_conv::access_view(a)
    }
}

/// Builds a [`LeaseView`] from the market.
pub trait LeaseViewOf {
    /// The view of a live engine lease (its record gives the delivery details).
    fn of(m: &Market, l: &Lease) -> LeaseView;
    /// The view of a lease record (live or ended).
    fn of_record(m: &Market, r: &crate::delivery::LeaseRecord) -> LeaseView;
}

impl LeaseViewOf for LeaseView {
    fn of(m: &Market, l: &Lease) -> LeaseView {
        match m.deliveries().record(l.id) {
            Some(r) => LeaseView::of_record(m, r),
            None => LeaseView::of_record(m, &crate::delivery::LeaseRecord::of_lease(l)),
        }
    }

    fn of_record(m: &Market, r: &crate::delivery::LeaseRecord) -> LeaseView {
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
            kind: kind_dto(r.kind),
            gpus: r.gpus,
            gpu_indexes: (0..32).filter(|i| r.gpu_mask & (1 << i) != 0).collect(),
            price: price_str(r.price),
            start_ms: r.start_ms,
            end_ms: r.end_ms,
            state: match r.phase {
                Phase::Pending => LeaseStateDto::Pending,
                Phase::Provisioning => LeaseStateDto::Provisioning,
                Phase::Running => LeaseStateDto::Active,
                Phase::Ended => LeaseStateDto::Ended,
            },
            provision_deadline_ms: r.provision_deadline_ms,
            deadline_in_ms: r
                .provision_deadline_ms
                .map(|d| d.saturating_sub(m.last_timestamp_ms()).max(0)),
            ready_ms: r.ready_ms,
            access: r.access.as_ref().map(|a| {
                let mut v = <AccessView as AccessViewOf>::of(a);
                // An ended lease cannot be logged into: no command that looks like it can
                // (issue 25). The details stay, as the lease's history.
                if r.phase == Phase::Ended {
                    v.ssh_command = None;
                }
                v
            }),
            launch: m
                .deliveries()
                .launch(r.bid)
                .map(crate::api::launch::launch_view),
            notice_deadline_ms: r.notice_deadline_ms,
            charged: totals.as_ref().map(|t| money(t.amount)),
            billed_seconds: totals.as_ref().map_or(0, |t| t.billed_seconds),
            sla_credit: totals.as_ref().map(|t| money(t.sla_credit)),
            end_reason: r.ended.map(|e| end_reason_dto(e.0)),
            ended_at_ms: r.ended.map(|e| e.1),
            failure_reason: r.failure.clone(),
            failure_cause: r.failure_cause.map(|c| match c {
                crate::delivery::FailureCause::Node => gpux_wire::FailureCauseDto::Node,
                crate::delivery::FailureCause::LaunchSpec => gpux_wire::FailureCauseDto::LaunchSpec,
            }),
            teardown: r.wipe.as_ref().map(|w| TeardownView {
                status: match (w.torn_down_ms, w.overdue) {
                    (Some(_), _) => TeardownStatusDto::TornDown,
                    (None, true) => TeardownStatusDto::Overdue,
                    (None, false) => TeardownStatusDto::Wiping,
                },
                deadline_ms: w.deadline_ms,
                torn_down_ms: w.torn_down_ms,
                method: w.method.clone(),
            }),
            migrated_from: r.migrated_from.map(|l| l.0.to_string()),
            migrated_to: r.migrated_to.iter().map(|l| l.0.to_string()).collect(),
            failover_failed_gpus: r.failover_failed.map(|f| f.0),
            failover_failed_reason: r.failover_failed.map(|f| close_reason_dto(f.1)),
            failover_failed_detail: r.failover_failed.and_then(|f| {
                crate::wire_conv::close_detail_view(
                    f.1,
                    r.failover_failed_detail.unwrap_or_default(),
                )
            }),
            purpose: None,
            gpu_uuids: r.gpu_uuids.clone(),
            sla_terms: m.lease_sla(r.lease).as_ref().map(crate::api::dto::sla_view),
            sla_credit_basis: sla_credit_view(m, r.lease),
            gang: lease_gang_view(m, r.lease, false),
        }
    }
}

/// A live gang member's gang (docs/market-rules.md §13) as its lease view shows it; with
/// `nodes` (the supplier's and its agent's views) the node name of each rank.
pub fn lease_gang_view(
    m: &Market,
    lease: exchange::LeaseId,
    nodes: bool,
) -> Option<gpux_wire::LeaseGangView> {
    use gpux_wire::GangMemberStatusDto;
    let e = m.engine();
    let (bid, rank) = e.lease_gang(lease)?;
    let g = e.gang(bid)?;
    let whole = g.whole_at_ms.is_some();
    let me = g.members.get(rank as usize);
    Some(gpux_wire::LeaseGangView {
        id: bid.0.to_string(),
        rank,
        size: g.spec.nodes,
        members: g
            .members
            .iter()
            .map(|mb| mb.lease.map(|l| l.0.to_string()))
            .collect(),
        ready: whole,
        status: if whole {
            GangMemberStatusDto::Ready
        } else if me.is_some_and(|mb| mb.ready) {
            GangMemberStatusDto::WaitingForGang
        } else {
            GangMemberStatusDto::Provisioning
        },
        nodes: nodes.then(|| {
            g.members
                .iter()
                .map(|mb| {
                    let l = e.lease(mb.lease?)?;
                    e.node(l.node).map(|n| n.name.clone())
                })
                .collect()
        }),
    })
}

/// A lease view for its supplier (and the supplier's node agent): the gang with its node
/// names.
pub fn supplier_lease_view(m: &Market, r: &crate::delivery::LeaseRecord) -> LeaseView {
    let mut v = LeaseView::of_record(m, r);
    if v.gang.is_some() {
        v.gang = lease_gang_view(m, r.lease, true);
    }
    v
}

/// How `lease`'s own SLA credit was computed, once its failover settled (issue 26).
pub fn sla_credit_view(m: &Market, lease: exchange::LeaseId) -> Option<gpux_wire::SlaCreditView> {
    let l = m.ledger();
    let id = settlement::LeaseId(lease.0);
    let f = l.failover_credit(id)?;
    let terms = l.credit_terms(id)?;
    Some(gpux_wire::SlaCreditView {
        basis: if l.lease_totals(id).is_some() {
            "node_failure".into()
        } else {
            "non_delivery".into()
        },
        outage_from_ms: f.outage_from_ms,
        replacement_ready_ms: f.replacement_start_ms,
        outage_s: settlement::metering::billed_seconds(f.outage_ms),
        outage_credit: money(f.outage_credit),
        price_difference: money(f.price_difference),
        cap: money(f.cap),
        credit: money(f.credit),
        terms: terms.summary(),
    })
}

/// Builds a [`BalanceView`] from the market.
pub trait BalanceViewOf {
    /// A buyer's balance view at `now_ms`.
    fn of(m: &Market, buyer: u64, now_ms: i64) -> BalanceView;
}

impl BalanceViewOf for BalanceView {
    fn of(m: &Market, buyer: u64, now_ms: i64) -> BalanceView {
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

/// Builds a [`AccountView`] from the market.
pub trait AccountViewOf {
    /// The view of an account.
    fn of(a: &crate::accounts::AccountRecord) -> AccountView;
}

impl AccountViewOf for AccountView {
    fn of(a: &crate::accounts::AccountRecord) -> AccountView {
        AccountView {
            id: a.id.to_string(),
            name: a.name.clone(),
            role: a.role,
            created_ms: a.created_ms,
            key_ids: a.keys.keys().cloned().collect(),
        }
    }
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
