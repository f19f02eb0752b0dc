//! Requests validated at the edge into engine commands. The wire types themselves (JSON
//! shapes, schemas) live in the `gpux-wire` crate, shared with the typed client; this module
//! re-exports them under their old paths and holds what only the server knows: conversion
//! into the engine's domain types (extension traits [`ToSpec`] and friends), defaults filled
//! relative to the exchange clock. (The wire names of engine enums live in the leaf
//! [`crate::wire_conv`], re-exported here.)

use crate::api::error::ApiError;
/// Engine → wire conversions, moved to the leaf [`crate::wire_conv`] (the feed uses them too);
/// re-exported under their old paths.
pub use crate::wire_conv::{
    close_reason_dto, end_reason_dto, hold_dto, interconnect_dto, kind_dto, kind_str,
    placement_dto, price_str,
};
use exchange::{
    BidSpec, Catalog, Constraints, Interconnect, Jurisdiction, LeaseKind, NodeSpec, NodeUpdate,
    OfferTerms, Placement, Price, SkuId, TimeInForce,
};
pub use gpux_wire::{
    AmountRequest, BidRequest, ConstraintsDto, CreateAccountRequest, DecimalStr, HeartbeatRequest,
    IdStr, InterconnectDto, KindDto, NodeRequest, NodeUpdateRequest, OfferRequest, PlacementDto,
    TifDto, parse_id,
};

/// Default `min_lease_s` of an offer: 60 s.
pub const DEFAULT_MIN_LEASE_S: u64 = 60;
/// Default `max_lease_s` of an offer: 7 days.
pub const DEFAULT_MAX_LEASE_S: u64 = 7 * 24 * 3600;
/// Default preemption notice of an offer: 30 s.
pub const DEFAULT_NOTICE_S: u32 = 30;
/// Default `available_until_ms` of an offer: 30 days after the request.
pub const DEFAULT_AVAILABLE_FOR_MS: i64 = 30 * 24 * 3600 * 1000;

/// A price of the wire: at most 4 decimals written (the tick; `20.50000` too is refused, as
/// the schemas' pattern says), > 0, ≤ 100000.
fn price(field: &'static str, d: DecimalStr) -> Result<Price, ApiError> {
    if d.0.scale() > exchange::price::PRICE_SCALE {
        return Err(ApiError::invalid(
            field,
            "invalid_price",
            "a price has at most 4 decimal places (0.0001 CNY per GPU-hour)",
        ));
    }
    Price::from_decimal(d.0).map_err(|e| ApiError::invalid(field, "invalid_price", e.to_string()))
}

fn sku(catalog: &Catalog, id: &str) -> Result<SkuId, ApiError> {
    catalog.lookup(id).ok_or_else(|| unknown_sku(catalog, id))
}

/// Most edits (Levenshtein distance, ignoring case) between a SKU asked for and a catalog id
/// for the id to be suggested.
pub const SKU_SUGGESTION_MAX_EDITS: usize = 3;

/// The catalog's id nearest to `id`: the same but for case, `-`, `_` and `.` (`rtx4090-24g`,
/// `H100_80G`), else the fewest edits ignoring case, at most [`SKU_SUGGESTION_MAX_EDITS`]
/// (ties: catalog order).
pub fn nearest_sku<'a>(catalog: &'a Catalog, id: &str) -> Option<&'a str> {
    let fold = |s: &str| -> String {
        s.chars()
            .filter(|c| !matches!(c, '-' | '_' | '.' | ' '))
            .flat_map(char::to_lowercase)
            .collect()
    };
    let wanted = fold(id);
    let ids: Vec<&str> = catalog.iter().map(|(_, s)| s.id.as_str()).collect();
    if let Some(same) = ids.iter().find(|c| fold(c) == wanted) {
        return Some(same);
    }
    let lower = id.to_lowercase();
    ids.iter()
        .map(|c| (strsim::levenshtein(&c.to_lowercase(), &lower), *c))
        .filter(|(d, _)| *d <= SKU_SUGGESTION_MAX_EDITS)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// 400 `unknown_sku` (field `sku`) for `id`, suggesting the nearest catalog id when there is
/// one (issue 25: `rtx4090-24g` for `RTX4090-24G`).
pub fn unknown_sku(catalog: &Catalog, id: &str) -> ApiError {
    let hint = match nearest_sku(catalog, id) {
        Some(near) => format!("; did you mean {near:?}?"),
        None => String::new(),
    };
    ApiError::invalid(
        "sku",
        "unknown_sku",
        format!("{id:?} is not in the catalog{hint} (GET /v1/catalog lists every SKU)"),
    )
}

fn jurisdiction(field: &'static str, s: &str) -> Result<Jurisdiction, ApiError> {
    Jurisdiction::parse(s).ok_or_else(|| {
        ApiError::invalid(
            field,
            "invalid_jurisdiction",
            "a jurisdiction is an ISO 3166-1 alpha-2 code such as \"CN\"",
        )
    })
}

/// The engine's fabric of a wire fabric.
pub fn interconnect(i: InterconnectDto) -> Interconnect {
    match i {
        InterconnectDto::Pcie => Interconnect::Pcie,
        InterconnectDto::Roce => Interconnect::Roce,
        InterconnectDto::Infiniband => Interconnect::Infiniband,
    }
}

/// The engine's lease kind of a wire kind.
pub fn kind(k: KindDto) -> LeaseKind {
    match k {
        KindDto::Spot => LeaseKind::Spot,
        KindDto::Preemptible => LeaseKind::Preemptible,
    }
}

/// Conversion of a node registration into the engine's node spec.
pub trait NodeSpecOf {
    /// The engine's node spec.
    ///
    /// # Errors
    /// 400 for an unknown SKU or a malformed jurisdiction (names, regions and counts are
    /// checked by the engine).
    fn to_spec(&self, catalog: &Catalog) -> Result<NodeSpec, ApiError>;
}

/// Conversion of a node change into the engine's node update.
pub trait NodeUpdateOf {
    /// The engine's node update.
    ///
    /// # Errors
    /// 400 for a malformed jurisdiction.
    fn to_update(&self) -> Result<NodeUpdate, ApiError>;
}

/// Conversion of an offer request into the engine's offer terms.
pub trait OfferTermsOf {
    /// The engine's offer terms; defaults are filled relative to `now_ms`.
    ///
    /// # Errors
    /// 400 for a price off the 0.0001 tick, not positive or too high.
    fn to_terms(&self, now_ms: i64) -> Result<OfferTerms, ApiError>;
}

/// Conversion of a bid request into the engine's bid.
pub trait BidSpecOf {
    /// The engine's bid.
    ///
    /// # Errors
    /// 400 for an unknown SKU, a bad price or jurisdiction, or an expiry on an IOC bid.
    fn to_spec(&self, catalog: &Catalog) -> Result<BidSpec, ApiError>;
}

/// Largest agent clock offset a heartbeat may report, ms, either way (issue 25; the wire's
/// `gpux_wire::MAX_CLOCK_OFFSET_MS`, one day): beyond it, 400 `invalid_clock_offset`.
pub const MAX_AGENT_CLOCK_OFFSET_MS: i64 = gpux_wire::MAX_CLOCK_OFFSET_MS;

/// Validates a heartbeat's fields beyond their JSON types.
pub trait HeartbeatOf {
    /// The agent's clock offset, ms, if the heartbeat carries one.
    ///
    /// # Errors
    /// 400 `invalid_clock_offset` naming `clock_offset_ms` when it is more than
    /// [`MAX_AGENT_CLOCK_OFFSET_MS`] either way.
    fn clock_offset(&self) -> Result<Option<i64>, ApiError>;
}

impl HeartbeatOf for HeartbeatRequest {
    fn clock_offset(&self) -> Result<Option<i64>, ApiError> {
        match self.clock_offset_ms {
            Some(ms) if ms.unsigned_abs() > MAX_AGENT_CLOCK_OFFSET_MS.unsigned_abs() => {
                Err(ApiError::invalid(
                    "clock_offset_ms",
                    "invalid_clock_offset",
                    format!(
                        "clock_offset_ms {ms} is more than a day ({MAX_AGENT_CLOCK_OFFSET_MS} ms) \
                         either way: sync the host's clock (NTP)"
                    ),
                ))
            }
            other => Ok(other),
        }
    }
}

impl NodeSpecOf for NodeRequest {
    fn to_spec(&self, catalog: &Catalog) -> Result<NodeSpec, ApiError> {
        Ok(NodeSpec {
            name: self.name.clone(),
            sku: sku(catalog, &self.sku)?,
            gpus: self.gpus,
            region: self.region.clone(),
            jurisdiction: jurisdiction("jurisdiction", &self.jurisdiction)?,
            interconnect: interconnect(self.interconnect),
            nvlink: self.nvlink,
        })
    }
}

impl NodeUpdateOf for NodeUpdateRequest {
    fn to_update(&self) -> Result<NodeUpdate, ApiError> {
        Ok(NodeUpdate {
            region: self.region.clone(),
            jurisdiction: self
                .jurisdiction
                .as_deref()
                .map(|j| jurisdiction("jurisdiction", j))
                .transpose()?,
            interconnect: self.interconnect.map(interconnect),
            nvlink: self.nvlink,
            draining: self.draining,
        })
    }
}

impl OfferTermsOf for OfferRequest {
    fn to_terms(&self, now_ms: i64) -> Result<OfferTerms, ApiError> {
        Ok(OfferTerms {
            gpus: self.gpus,
            spot_price: price("spot_price", self.spot_price)?,
            preemptible_price: self
                .preemptible_price
                .map(|p| price("preemptible_price", p))
                .transpose()?,
            min_lease_s: self.min_lease_s.unwrap_or(DEFAULT_MIN_LEASE_S),
            max_lease_s: self.max_lease_s.unwrap_or(DEFAULT_MAX_LEASE_S),
            available_until_ms: self
                .available_until_ms
                .unwrap_or(now_ms.saturating_add(DEFAULT_AVAILABLE_FOR_MS)),
            notice_s: self.notice_s.unwrap_or(DEFAULT_NOTICE_S),
            provision_s: self
                .provision_s
                .unwrap_or(exchange::limits::DEFAULT_PROVISION_SECONDS),
        })
    }
}

impl BidSpecOf for BidRequest {
    fn to_spec(&self, catalog: &Catalog) -> Result<BidSpec, ApiError> {
        let tif = match (self.time_in_force, self.expires_at_ms) {
            (TifDto::Ioc, Some(_)) => {
                // 422 like an expiry in the past: the body has the documented shape, the
                // combination is a rule (docs/api.md §1.4).
                return Err(ApiError {
                    status: actix_web::http::StatusCode::UNPROCESSABLE_ENTITY,
                    ..ApiError::invalid(
                        "expires_at_ms",
                        "invalid_expiry",
                        "an IOC bid cannot carry expires_at_ms",
                    )
                });
            }
            (TifDto::Ioc, None) => TimeInForce::Ioc,
            (TifDto::Gtc, e) => TimeInForce::Gtc { expires_at_ms: e },
        };
        Ok(BidSpec {
            client_order_id: self.client_order_id.clone(),
            sku: sku(catalog, &self.sku)?,
            gpus: self.gpus,
            limit: price("limit_price", self.limit_price)?,
            kind: kind(self.kind),
            placement: match self.placement {
                PlacementDto::SingleNode => Placement::SingleNode,
                PlacementDto::Spread => Placement::Spread,
            },
            constraints: Constraints {
                regions: self.constraints.regions.clone(),
                jurisdictions: self
                    .constraints
                    .jurisdictions
                    .iter()
                    .map(|j| jurisdiction("constraints.jurisdictions", j))
                    .collect::<Result<_, _>>()?,
                min_interconnect: self.constraints.min_interconnect.map(interconnect),
                nvlink: self.constraints.nvlink,
            },
            duration_s: self.duration_s,
            tif,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bids_refuse_unknown_fields_and_ioc_expiry() {
        let ok = r#"{"client_order_id":"a","sku":"H100-80G","gpus":1,"limit_price":"20",
            "kind":"spot","time_in_force":"ioc"}"#;
        let b: BidRequest = serde_json::from_str(ok).unwrap();
        let spec = b.to_spec(&Catalog::builtin()).unwrap();
        assert_eq!(spec.limit.ticks(), 200_000);
        assert_eq!(spec.placement, Placement::SingleNode);
        let extra = ok.replace("\"gpus\":1", "\"gpus\":1,\"colour\":\"red\"");
        assert!(serde_json::from_str::<BidRequest>(&extra).is_err());
        let ioc_exp = ok.replace("\"ioc\"", "\"ioc\",\"expires_at_ms\":5");
        let b: BidRequest = serde_json::from_str(&ioc_exp).unwrap();
        assert_eq!(
            b.to_spec(&Catalog::builtin()).unwrap_err().code,
            "invalid_expiry"
        );
        let unknown = ok.replace("H100-80G", "Z9");
        let b: BidRequest = serde_json::from_str(&unknown).unwrap();
        let e = b.to_spec(&Catalog::builtin()).unwrap_err();
        assert_eq!(e.code, "unknown_sku");
        assert!(!e.message.contains("did you mean"), "{}", e.message);
        // Issue 25: the nearest id is suggested.
        let c = Catalog::builtin();
        for (asked, near) in [
            ("rtx4090-24g", "RTX4090-24G"),
            ("h100_80g", "H100-80G"),
            ("H100-80", "H100-80G"),
            ("H100 80G", "H100-80G"),
        ] {
            assert_eq!(nearest_sku(&c, asked), Some(near), "{asked}");
            let m = unknown_sku(&c, asked).message;
            assert!(m.contains(&format!("did you mean {near:?}")), "{m}");
        }
        assert_eq!(nearest_sku(&c, "TPU-v5"), None);
    }
}
