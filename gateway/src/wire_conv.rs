//! Engine and delivery values as the wire shows them: the one place that maps `exchange`'s
//! enums, prices and GPU masks, and `delivery`'s launch specs and access details, onto the
//! `gpux-wire` types (docs/api.md §1 for the conventions: prices are decimal strings with four
//! places, enums snake_case).
//!
//! **Architecture invariant:** a leaf. It imports the engine, `delivery` and the wire crate,
//! never `crate::{api, feed, server}`, so both the feed hub and the API build their messages
//! from it without a cycle (STYLE.md part 2, anti-model 2). Each mapping is an exhaustive
//! `match`, so renaming a domain variant cannot silently change the JSON.

use crate::delivery::{AccessDetails, LaunchSpec};
use exchange::{
    BidCloseReason, CloseDetail, EndReason, Exclusion, HoldReason, Interconnect, LeaseKind, Maker,
    NoticeReason, Placement, Price,
};
use gpux_wire::views::CloseDetailView;
use gpux_wire::ws::{MakerDto, NoticeReasonDto};
use gpux_wire::{
    AccessView, CloseReasonDto, EndReasonDto, ExclusionDto, HoldReasonDto, InterconnectDto,
    KindDto, LaunchRequest, PlacementDto,
};

/// Formats a price for the wire: CNY per GPU-hour, four decimals (`"20.0000"`).
pub fn price_str(p: Price) -> String {
    p.to_decimal().to_string()
}

/// The wire kind of an engine lease kind.
pub fn kind_dto(k: LeaseKind) -> KindDto {
    match k {
        LeaseKind::Spot => KindDto::Spot,
        LeaseKind::Preemptible => KindDto::Preemptible,
    }
}

/// The wire name of a lease kind.
pub fn kind_str(k: LeaseKind) -> &'static str {
    kind_dto(k).as_str()
}

/// The wire fabric of an engine fabric.
pub fn interconnect_dto(i: Interconnect) -> InterconnectDto {
    match i {
        Interconnect::Pcie => InterconnectDto::Pcie,
        Interconnect::Roce => InterconnectDto::Roce,
        Interconnect::Infiniband => InterconnectDto::Infiniband,
    }
}

/// The wire placement of an engine placement.
pub fn placement_dto(p: Placement) -> PlacementDto {
    match p {
        Placement::SingleNode => PlacementDto::SingleNode,
        Placement::Spread => PlacementDto::Spread,
        Placement::Gang(_) => PlacementDto::Gang,
    }
}

/// A gang bid's shape as the wire shows it (`None` for another placement).
pub fn gang_request(p: Placement) -> Option<gpux_wire::GangRequest> {
    let Placement::Gang(g) = p else {
        return None;
    };
    Some(gpux_wire::GangRequest {
        nodes: g.nodes,
        gpus_per_node: g.gpus_per_node,
        scope: match g.scope {
            exchange::GangScope::Domain => gpux_wire::GangScopeDto::Domain,
            exchange::GangScope::Region => gpux_wire::GangScopeDto::Region,
        },
        on_member_loss: match g.on_member_loss {
            exchange::MemberLoss::Keep => gpux_wire::MemberLossDto::Keep,
            exchange::MemberLoss::EndAll => gpux_wire::MemberLossDto::EndAll,
        },
    })
}

/// The wire hold reason of an engine hold reason.
pub fn hold_dto(h: HoldReason) -> HoldReasonDto {
    match h {
        HoldReason::NotDelivered => HoldReasonDto::NotDelivered,
        HoldReason::TeardownOverdue => HoldReasonDto::TeardownOverdue,
        HoldReason::Attestation => HoldReasonDto::Attestation,
        HoldReason::DuplicateGpu => HoldReasonDto::DuplicateGpu,
        HoldReason::VerificationFailed => HoldReasonDto::VerificationFailed,
    }
}

/// The wire end reason of an engine end reason.
pub fn end_reason_dto(r: EndReason) -> EndReasonDto {
    match r {
        EndReason::Released => EndReasonDto::Released,
        EndReason::Expired => EndReasonDto::Expired,
        EndReason::Preempted => EndReasonDto::Preempted,
        EndReason::NodeFailure => EndReasonDto::NodeFailure,
        EndReason::OfferWithdrawn => EndReasonDto::OfferWithdrawn,
        EndReason::InsufficientFunds => EndReasonDto::InsufficientFunds,
        EndReason::NotDelivered => EndReasonDto::NotDelivered,
        EndReason::GangEnded => EndReasonDto::GangEnded,
    }
}

/// The wire close reason of an engine bid close reason (also a failover's reason).
pub fn close_reason_dto(r: BidCloseReason) -> CloseReasonDto {
    match r {
        BidCloseReason::Filled => CloseReasonDto::Filled,
        BidCloseReason::NoCapacity => CloseReasonDto::NoCapacity,
        BidCloseReason::Price => CloseReasonDto::Price,
        BidCloseReason::Constraints => CloseReasonDto::Constraints,
        BidCloseReason::Canceled => CloseReasonDto::Canceled,
        BidCloseReason::Expired => CloseReasonDto::Expired,
        BidCloseReason::InsufficientFunds => CloseReasonDto::InsufficientFunds,
        BidCloseReason::Term => CloseReasonDto::Term,
        BidCloseReason::OwnLease => CloseReasonDto::OwnLease,
        BidCloseReason::Trust => CloseReasonDto::Trust,
        BidCloseReason::MinGpus => CloseReasonDto::MinGpus,
        BidCloseReason::GangIncomplete => CloseReasonDto::GangIncomplete,
        BidCloseReason::GangTooLarge => CloseReasonDto::GangTooLarge,
    }
}

/// The wire name of what excluded an offer (docs/market-rules.md §4.1).
pub fn exclusion_dto(x: Exclusion) -> ExclusionDto {
    match x {
        Exclusion::NodeUnavailable => ExclusionDto::NodeUnavailable,
        Exclusion::SelfTrade => ExclusionDto::SelfTrade,
        Exclusion::Region => ExclusionDto::Region,
        Exclusion::Jurisdiction => ExclusionDto::Jurisdiction,
        Exclusion::Interconnect => ExclusionDto::Interconnect,
        Exclusion::Nvlink => ExclusionDto::Nvlink,
        Exclusion::Term => ExclusionDto::Term,
        Exclusion::Trust => ExclusionDto::Trust,
        Exclusion::FabricDomain => ExclusionDto::FabricDomain,
    }
}

/// What a buyer can act on when a remainder (IOC) or a failover did not fill: the detail and
/// a message naming what to change (issue 25, docs/market-rules.md §4.1). `None` for a reason
/// that is not about filling (`filled`, `canceled`, `expired`, `insufficient_funds`).
pub fn close_detail_view(r: BidCloseReason, d: CloseDetail) -> Option<CloseDetailView> {
    close_detail_view_for(r, d, None)
}

/// [`close_detail_view`] knowing the bid's placement (issue 27): a gang's message names its
/// shape, and a spread bid's `min_gpus` message its floor.
pub fn close_detail_view_for(
    r: BidCloseReason,
    d: CloseDetail,
    placement: Option<(Placement, Option<u32>)>,
) -> Option<CloseDetailView> {
    let gang = match placement {
        Some((Placement::Gang(g), _)) => Some(g),
        _ => None,
    };
    let message = match r {
        BidCloseReason::MinGpus => {
            let fillable = d.fillable.unwrap_or(0);
            let floor = match placement {
                Some((_, Some(m))) => format!("your min_gpus of {m}"),
                _ => "your min_gpus".to_string(),
            };
            format!(
                "only {fillable} GPUs could fill now, fewer than {floor}, so none filled: lower min_gpus (gpux `--min-gpus`), raise the limit price, or place a GTC bid (without min_gpus) to wait for capacity"
            )
        }
        BidCloseReason::GangIncomplete => {
            let fillable = d.fillable.unwrap_or(0);
            let place = match gang.map(|g| g.scope) {
                Some(exchange::GangScope::Region) => "region of one supplier",
                _ => "fabric domain",
            };
            let shape = match gang {
                Some(g) => format!("{} nodes of {} free GPUs", g.nodes, g.gpus_per_node),
                None => "the whole gang".to_string(),
            };
            let scope_hint = match gang.map(|g| g.scope) {
                Some(exchange::GangScope::Region) => "",
                _ => ", scope region",
            };
            format!(
                "no {place} holds {shape} now; the most one {} could give is {fillable} — try a smaller gang{scope_hint}, or a GTC bid (it waits, holding nothing, until a whole gang fits); `gpux inventory domains` shows whole free nodes per domain",
                if place == "fabric domain" {
                    "domain"
                } else {
                    "region"
                }
            )
        }
        BidCloseReason::GangTooLarge => {
            let largest = d.fillable.unwrap_or(0);
            let (place, hint) = match gang.map(|g| g.scope) {
                Some(exchange::GangScope::Region) => ("region of one supplier", ""),
                _ => ("fabric domain", " (or scope region)"),
            };
            let nodes = gang.map_or_else(|| "that many".to_string(), |g| g.nodes.to_string());
            format!(
                "no {place} has {nodes} nodes of this SKU at all: the largest has {largest}, so this gang can never fill there — ask for at most {largest} nodes{hint}, or more GPUs per node; `gpux inventory domains` shows each domain's nodes"
            )
        }
        _ => return close_detail_plain(r, d),
    };
    Some(CloseDetailView {
        best_price: d.best_price.map(price_str),
        excluded_by: d.excluded_by.map(exclusion_dto),
        fillable: d.fillable,
        message,
    })
}

fn close_detail_plain(r: BidCloseReason, d: CloseDetail) -> Option<CloseDetailView> {
    let message = match r {
        BidCloseReason::MinGpus | BidCloseReason::GangIncomplete | BidCloseReason::GangTooLarge => {
            return close_detail_view_for(r, d, None);
        }
        BidCloseReason::Filled
        | BidCloseReason::Canceled
        | BidCloseReason::Expired
        | BidCloseReason::InsufficientFunds => return None,
        BidCloseReason::NoCapacity => "no listed offer of this SKU and kind has room for the \
            remaining GPUs at any price (single_node needs them all on one node; \
            `gpux inventory` shows the free GPUs per level)"
            .to_string(),
        BidCloseReason::Price => match d.best_price {
            Some(p) => format!(
                "capacity exists only above your limit: the cheapest offer that admits this bid \
                 is at {} CNY per GPU-hour (for a spread bid, the price of its first GPU: more \
                 GPUs may cost more)",
                price_str(p)
            ),
            None => "capacity exists only above your limit, and none of it admits this bid \
                (its constraints or duration exclude it)"
                .to_string(),
        },
        BidCloseReason::Constraints => {
            let why = match d.excluded_by {
                Some(Exclusion::NodeUnavailable) => {
                    "is on a node that is offline, draining or held"
                }
                Some(Exclusion::SelfTrade) => {
                    "is your own offer (a buyer never fills against its own offer)"
                }
                Some(Exclusion::Region) => "is outside your regions (`regions`, gpux `--region`)",
                Some(Exclusion::Jurisdiction) => {
                    "is outside your jurisdictions (`jurisdictions`, gpux `--jurisdiction`)"
                }
                Some(Exclusion::Interconnect) => {
                    "has an interconnect below your `min_interconnect` (gpux `--min-interconnect`)"
                }
                Some(Exclusion::Nvlink) => "has no NVLink, which you require (`nvlink`)",
                Some(Exclusion::Trust) => "does not meet your trust requirements",
                Some(Exclusion::FabricDomain) => {
                    "is on a node with no fabric domain, which a domain-scoped gang needs \
                     (try `scope: region`, gpux `--scope region`)"
                }
                Some(Exclusion::Term) | None => "does not admit this bid",
            };
            format!("capacity exists at your price, but the cheapest offer {why}")
        }
        BidCloseReason::Term => "capacity exists at your price, but your duration does not fit \
            its lease terms (under the offer's minimum lease, over its maximum, or past its \
            available-until): change the duration (`duration_s`, gpux `--duration`)"
            .to_string(),
        BidCloseReason::Trust => "capacity exists at your price, but only on nodes that do \
            not meet your bid's trust requirements (docs/market-rules.md §12): \
            `constraints.verified` (gpux `--verified`) needs a current `verified` result, and \
            `constraints.min_reliability` (gpux `--min-reliability`) a reliability score at \
            the start of today (UTC) at least that high, which a `new` node (under 10 leases \
            or 24 delivered lease-hours) does not have, and `constraints.min_sla` (gpux \
            `--min-sla`) an offer whose stated SLA terms promise at least that availability \
            and credit multiple: relax the requirement or wait (`gpux offers search` and \
            `GET /v1/market/offers` with the same `verified`, `min_reliability` and \
            `min_sla` show the offers that meet it; `GET /v1/inventory` with them, the \
            capacity)"
            .to_string(),
        BidCloseReason::OwnLease => "only your own preemptible lease holds capacity at this \
            price, and a bid never preempts its own buyer's lease: release that lease first"
            .to_string(),
    };
    Some(CloseDetailView {
        best_price: d.best_price.map(price_str),
        excluded_by: d.excluded_by.map(exclusion_dto),
        fillable: d.fillable,
        message,
    })
}

/// The wire reason of a preemption notice.
pub fn notice_reason_dto(r: NoticeReason) -> NoticeReasonDto {
    match r {
        NoticeReason::Preempted => NoticeReasonDto::Preempted,
        NoticeReason::OfferWithdrawn => NoticeReasonDto::OfferWithdrawn,
    }
}

/// The wire side of a fill's maker.
pub fn maker_dto(m: Maker) -> MakerDto {
    match m {
        Maker::Offer => MakerDto::Offer,
        Maker::Bid => MakerDto::Bid,
    }
}

/// The node's GPU indexes set in a lease's GPU mask, ascending.
pub fn gpu_indexes(mask: u32) -> Vec<u32> {
    (0..32).filter(|i| mask & (1 << i) != 0).collect()
}

/// A launch spec as the wire shows it (to its buyer and to the lease's supplier).
pub fn launch_request(l: &LaunchSpec) -> LaunchRequest {
    LaunchRequest {
        ssh_keys: l.ssh_keys.clone(),
        image: l.image.clone(),
        command: l.command.clone(),
        env: l.env.clone(),
        ports: l.ports.iter().map(|p| u32::from(*p)).collect(),
        disk_gb: l.disk_gb,
    }
}

/// Access details as the wire shows them, with the login command.
pub fn access_view(a: &AccessDetails) -> AccessView {
    AccessView {
        ssh_host: a.ssh_host.clone(),
        ssh_port: a.ssh_port,
        ssh_user: a.ssh_user.clone(),
        urls: a.urls.clone(),
        ssh_command: a.ssh_command(),
    }
}

/// The wire form of an attestation mismatch (issue 26, docs/market-rules.md §12.1), with a
/// message saying what differs and what to do. A duplicate names the UUID only, never the
/// other node or its supplier.
pub fn mismatch_dto(m: &exchange::AttestationMismatch) -> gpux_wire::AttestationMismatchDto {
    use exchange::AttestationMismatch as M;
    use gpux_wire::{AttestationMismatchDto, MismatchKindDto};
    let empty = |kind, message: String| AttestationMismatchDto {
        kind,
        index: None,
        attested: None,
        registered: None,
        model: None,
        memory_mib: None,
        uuid: None,
        message,
    };
    match m {
        M::GpuCount {
            attested,
            registered,
        } => AttestationMismatchDto {
            attested: Some(*attested),
            registered: Some(*registered),
            ..empty(
                MismatchKindDto::GpuCount,
                format!(
                    "the host has {attested} GPUs but the node registered {registered}: \
                     re-register the node with its real GPU count"
                ),
            )
        },
        M::Model { index, model } => AttestationMismatchDto {
            index: Some(*index),
            model: Some(model.clone()),
            ..empty(
                MismatchKindDto::Model,
                format!(
                    "GPU {index} is a {model:?}, another SKU than the node registered: \
                     re-register the node with the SKU of its GPUs"
                ),
            )
        },
        M::Memory { index, memory_mib } => AttestationMismatchDto {
            index: Some(*index),
            memory_mib: Some(*memory_mib),
            ..empty(
                MismatchKindDto::Memory,
                format!(
                    "GPU {index} has {memory_mib} MiB, which no SKU of its model has (within \
                     {} %): the card is not the model it names",
                    exchange::models::MEMORY_TOLERANCE_PCT
                ),
            )
        },
        M::DuplicateGpu { index, uuid } => AttestationMismatchDto {
            index: Some(*index),
            uuid: Some(uuid.clone()),
            ..empty(
                MismatchKindDto::DuplicateGpu,
                format!(
                    "GPU {index} ({uuid}) is attested on another node: a GPU is listed on one \
                     node only"
                ),
            )
        },
    }
}

/// The node view's attestation: the engine's record (time, UUIDs, mismatch) with the host
/// facts the market kept from the same attestation (issue 26).
pub fn attestation_view(
    a: &exchange::state::NodeAttestation,
    host: Option<&crate::node_facts::HostFacts>,
) -> gpux_wire::NodeAttestationView {
    use gpux_wire::{AttestationStatusDto, GpuHostView, NicDto, NodeAttestationView};
    NodeAttestationView {
        at_ms: a.at_ms,
        status: if a.mismatch.is_none() {
            AttestationStatusDto::Matched
        } else {
            AttestationStatusDto::Mismatch
        },
        gpus: u32::try_from(a.uuids.len()).unwrap_or(u32::MAX),
        mismatch: a.mismatch.as_ref().map(mismatch_dto),
        driver_version: host.map(|h| h.driver_version.clone()).unwrap_or_default(),
        cuda_version: host.map(|h| h.cuda_version.clone()).unwrap_or_default(),
        gpu_details: host
            .map(|h| {
                h.gpus
                    .iter()
                    .map(|g| GpuHostView {
                        index: g.index,
                        uuid: g.uuid.clone(),
                        model: g.model.clone(),
                        memory_mib: g.memory_mib,
                        pcie_gen: g.pcie_gen,
                        pcie_width: g.pcie_width,
                        pcie_max_gen: g.pcie_max_gen,
                        pcie_max_width: g.pcie_max_width,
                        mig_mode: g.mig_mode,
                    })
                    .collect()
            })
            .unwrap_or_default(),
        nics: host
            .map(|h| {
                h.nics
                    .iter()
                    .map(|n| NicDto {
                        name: n.name.clone(),
                        gbps: n.gbps,
                    })
                    .collect()
            })
            .unwrap_or_default(),
        cpu_cores: host.and_then(|h| h.cpu_cores),
        ram_mib: host.and_then(|h| h.ram_mib),
        disk_gb: host.and_then(|h| h.disk_gb),
    }
}

/// A node's verification as the wire shows it (docs/market-rules.md §12.2); `None` when the
/// market does not verify.
pub fn verification_view(
    e: &exchange::Engine,
    node: exchange::NodeId,
) -> Option<gpux_wire::NodeVerificationView> {
    e.verification_config()?;
    let v = e.verification(node);
    let last = v.and_then(|v| v.last);
    let run = v.and_then(|v| v.run);
    let snake = |s: String| {
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if c.is_ascii_uppercase() && i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        }
        out
    };
    Some(gpux_wire::NodeVerificationView {
        status: e.verify_status(node).as_str().to_string(),
        at_ms: last.map(|l| l.at_ms),
        outcome: last.map(|l| snake(format!("{:?}", l.judgment.outcome))),
        worst_pct: last.map(|l| {
            let bp = l.judgment.worst_bp;
            format!("{}.{:02}", bp / 100, bp % 100)
        }),
        decided_by: last.and_then(|l| l.judgment.decided_by).map(|d| match d {
            exchange::verify::Figure::Bf16Tflops => "bf16_tflops".to_string(),
            other => snake(format!("{other:?}")),
        }),
        gpu: last.and_then(|l| l.judgment.gpu),
        run_lease_id: run.map(|r| r.lease.0.to_string()),
        run_deadline_ms: run.map(|r| r.deadline_ms),
    })
}

/// Basis points as a 4-decimal fraction (`9251` → `"0.9251"`).
pub fn bp_str(bp: u32) -> String {
    format!("{}.{:04}", bp / 10_000, bp % 10_000)
}

/// A score's ratio on the wire.
fn ratio_view(r: exchange::reliability::Ratio) -> gpux_wire::RatioView {
    gpux_wire::RatioView {
        num: r.num,
        den: r.den,
        value: r.bp().map(bp_str),
    }
}

/// A reliability score on the wire (docs/market-rules.md §12.3); `matching` is a node's
/// score at the start of the day (`Some(None)`: it was new then; `None`: not a node).
pub fn reliability_view(
    s: &exchange::reliability::Score,
    matching: Option<Option<u32>>,
) -> gpux_wire::ReliabilityView {
    gpux_wire::ReliabilityView {
        status: if s.is_new { "new" } else { "scored" }.to_string(),
        reliability: ratio_view(s.reliability),
        delivery_rate: ratio_view(s.delivery_rate),
        node_failures_per_1000_lease_hours: ratio_view(s.node_failures_per_1000_lease_hours),
        heartbeat_coverage: ratio_view(s.heartbeat_coverage),
        leases_ended: s.leases_ended,
        matching_reliability: matching.flatten().map(bp_str),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_list_their_gpus_and_prices_keep_four_places() {
        assert_eq!(gpu_indexes(0b1010_0001), vec![0, 5, 7]);
        assert_eq!(gpu_indexes(1 << 31), vec![31]);
        assert!(gpu_indexes(0).is_empty());
        let p = Price::from_decimal(rust_decimal::Decimal::new(205, 1)).expect("price");
        assert_eq!(price_str(p), "20.5000");
    }

    #[test]
    fn engine_enums_name_themselves_as_the_engine_serializes_them() {
        // The engine's own serde names are the JSON the feed sent before it was typed.
        let same = |engine: serde_json::Value, wire: serde_json::Value| assert_eq!(engine, wire);
        for r in [NoticeReason::Preempted, NoticeReason::OfferWithdrawn] {
            same(json(&r), json(&notice_reason_dto(r)));
        }
        for m in [Maker::Offer, Maker::Bid] {
            same(json(&m), json(&maker_dto(m)));
        }
        for h in [HoldReason::NotDelivered, HoldReason::TeardownOverdue] {
            same(json(&h), json(&hold_dto(h)));
        }
        for r in [
            EndReason::Released,
            EndReason::Expired,
            EndReason::Preempted,
            EndReason::NodeFailure,
            EndReason::OfferWithdrawn,
            EndReason::InsufficientFunds,
            EndReason::NotDelivered,
        ] {
            same(json(&r), json(&end_reason_dto(r)));
        }
        for r in [
            BidCloseReason::Filled,
            BidCloseReason::NoCapacity,
            BidCloseReason::Price,
            BidCloseReason::Constraints,
            BidCloseReason::Canceled,
            BidCloseReason::Expired,
            BidCloseReason::InsufficientFunds,
            BidCloseReason::Term,
            BidCloseReason::OwnLease,
        ] {
            same(json(&r), json(&close_reason_dto(r)));
        }
        for x in [
            Exclusion::NodeUnavailable,
            Exclusion::SelfTrade,
            Exclusion::Region,
            Exclusion::Jurisdiction,
            Exclusion::Interconnect,
            Exclusion::Nvlink,
            Exclusion::Term,
        ] {
            same(json(&x), json(&exclusion_dto(x)));
        }
        assert_eq!(json(&kind_dto(LeaseKind::Preemptible)), "preemptible");
    }

    fn json(v: &impl serde::Serialize) -> serde_json::Value {
        serde_json::to_value(v).expect("serializes")
    }
}
