//! Wire types (JSON): requests validated at the edge into engine commands, and views of the
//! market for answers. Separate from the domain types on purpose: the wire spells ids and
//! prices as strings (ids reach 2^63, beyond a JavaScript number; prices are exact decimals,
//! never parsed through a float), enums in snake_case, and refuses unknown fields.

use crate::api::error::ApiError;
use exchange::{
    BidSpec, Catalog, Constraints, Interconnect, Jurisdiction, LeaseKind, NodeSpec, NodeUpdate,
    OfferTerms, Placement, Price, SkuId, TimeInForce,
};
use rust_decimal::Decimal;
use serde::{Deserialize, Deserializer, Serialize};
use utoipa::ToSchema;

/// Default `min_lease_s` of an offer: 60 s.
pub const DEFAULT_MIN_LEASE_S: u64 = 60;
/// Default `max_lease_s` of an offer: 7 days.
pub const DEFAULT_MAX_LEASE_S: u64 = 7 * 24 * 3600;
/// Default preemption notice of an offer: 30 s.
pub const DEFAULT_NOTICE_S: u32 = 30;
/// Default `available_until_ms` of an offer: 30 days after the request.
pub const DEFAULT_AVAILABLE_FOR_MS: i64 = 30 * 24 * 3600 * 1000;

/// A decimal amount sent as a JSON string (`"18.50"`), parsed exactly. JSON numbers are
/// refused: they would pass through a float in many clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecimalStr(pub Decimal);

impl<'de> Deserialize<'de> for DecimalStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = DecimalStr;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a decimal string such as \"18.50\" (numbers are refused)")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<DecimalStr, E> {
                if s.is_empty() || s.len() > 40 || s.starts_with('+') || s.contains(['e', 'E']) {
                    return Err(E::custom(format!("{s:?} is not a plain decimal string")));
                }
                Decimal::from_str_exact(s)
                    .map(DecimalStr)
                    .map_err(|_| E::custom(format!("{s:?} is not a decimal string")))
            }
        }
        d.deserialize_str(V)
    }
}

/// An engine id sent as a JSON string of digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdStr(pub u64);

impl<'de> Deserialize<'de> for IdStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = IdStr;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an id as a string of digits")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<IdStr, E> {
                parse_id(s)
                    .map(IdStr)
                    .ok_or_else(|| E::custom(format!("{s:?} is not an id")))
            }
        }
        d.deserialize_str(V)
    }
}

/// Parses an id: 1..=20 ASCII digits that fit a u64.
pub fn parse_id(s: &str) -> Option<u64> {
    (!s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

fn price(field: &'static str, d: DecimalStr) -> Result<Price, ApiError> {
    Price::from_decimal(d.0).map_err(|e| ApiError::invalid(field, "invalid_price", e.to_string()))
}

fn sku(catalog: &Catalog, id: &str) -> Result<SkuId, ApiError> {
    catalog.lookup(id).ok_or_else(|| {
        ApiError::invalid(
            "sku",
            "unknown_sku",
            format!("{id:?} is not in the catalog (GET /v1/catalog)"),
        )
    })
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

/// Network fabric on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InterconnectDto {
    /// PCIe / Ethernet.
    Pcie,
    /// RoCE v2.
    Roce,
    /// InfiniBand.
    Infiniband,
}

impl From<InterconnectDto> for Interconnect {
    fn from(i: InterconnectDto) -> Interconnect {
        match i {
            InterconnectDto::Pcie => Interconnect::Pcie,
            InterconnectDto::Roce => Interconnect::Roce,
            InterconnectDto::Infiniband => Interconnect::Infiniband,
        }
    }
}

impl From<Interconnect> for InterconnectDto {
    fn from(i: Interconnect) -> InterconnectDto {
        match i {
            Interconnect::Pcie => InterconnectDto::Pcie,
            Interconnect::Roce => InterconnectDto::Roce,
            Interconnect::Infiniband => InterconnectDto::Infiniband,
        }
    }
}

/// Lease kind on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum KindDto {
    /// Non-interruptible.
    Spot,
    /// Interruptible with notice.
    Preemptible,
}

impl From<KindDto> for LeaseKind {
    fn from(k: KindDto) -> LeaseKind {
        match k {
            KindDto::Spot => LeaseKind::Spot,
            KindDto::Preemptible => LeaseKind::Preemptible,
        }
    }
}

/// The wire name of a lease kind.
pub fn kind_str(k: LeaseKind) -> &'static str {
    match k {
        LeaseKind::Spot => "spot",
        LeaseKind::Preemptible => "preemptible",
    }
}

/// Placement on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PlacementDto {
    /// All GPUs on one node.
    SingleNode,
    /// Any nodes.
    Spread,
}

/// Time in force on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TifDto {
    /// Immediate or cancel.
    Ioc,
    /// Good till cancelled (or `expires_at_ms`).
    Gtc,
}

/// `POST /v1/nodes`: register a node.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeRequest {
    /// Supplier's name for the node, unique per account: 1..=64 of `[A-Za-z0-9._-]`.
    pub name: String,
    /// Catalog SKU id, e.g. `H100-80G`.
    pub sku: String,
    /// Physical GPUs, 1..=16.
    pub gpus: u32,
    /// Region, e.g. `cn-east-2`.
    pub region: String,
    /// ISO 3166-1 alpha-2 country code, e.g. `CN`.
    pub jurisdiction: String,
    /// Fabric between nodes.
    pub interconnect: InterconnectDto,
    /// NVLink between the node's GPUs.
    #[serde(default)]
    pub nvlink: bool,
}

impl NodeRequest {
    /// The engine's node spec.
    ///
    /// # Errors
    /// 400 for an unknown SKU or a malformed jurisdiction (names, regions and counts are
    /// checked by the engine).
    pub fn to_spec(&self, catalog: &Catalog) -> Result<NodeSpec, ApiError> {
        Ok(NodeSpec {
            name: self.name.clone(),
            sku: sku(catalog, &self.sku)?,
            gpus: self.gpus,
            region: self.region.clone(),
            jurisdiction: jurisdiction("jurisdiction", &self.jurisdiction)?,
            interconnect: self.interconnect.into(),
            nvlink: self.nvlink,
        })
    }
}

/// `PATCH /v1/nodes/{id}`: change a node; absent fields stay.
#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeUpdateRequest {
    /// New region.
    pub region: Option<String>,
    /// New jurisdiction.
    pub jurisdiction: Option<String>,
    /// New fabric.
    pub interconnect: Option<InterconnectDto>,
    /// NVLink.
    pub nvlink: Option<bool>,
    /// Draining: no new leases; running leases continue.
    pub draining: Option<bool>,
}

impl NodeUpdateRequest {
    /// The engine's node update.
    ///
    /// # Errors
    /// 400 for a malformed jurisdiction.
    pub fn to_update(&self) -> Result<NodeUpdate, ApiError> {
        Ok(NodeUpdate {
            region: self.region.clone(),
            jurisdiction: self
                .jurisdiction
                .as_deref()
                .map(|j| jurisdiction("jurisdiction", j))
                .transpose()?,
            interconnect: self.interconnect.map(Into::into),
            nvlink: self.nvlink,
            draining: self.draining,
        })
    }
}

/// `POST /v1/nodes/{id}/heartbeat`.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatRequest {
    /// Healthy GPUs now, 0..=the node's GPUs.
    pub healthy_gpus: u32,
}

/// `POST /v1/offers` (with `node_id`) and `PUT /v1/offers/{id}` (without): an offer's terms.
/// Prices are CNY per GPU-hour as decimal strings with at most 4 decimals.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OfferRequest {
    /// The node (only when posting).
    #[schema(value_type = Option<String>)]
    pub node_id: Option<IdStr>,
    /// GPUs offered, 1..=healthy GPUs.
    pub gpus: u32,
    /// Spot price, CNY per GPU-hour, e.g. `"18.50"`.
    #[schema(value_type = String, example = "18.50")]
    pub spot_price: DecimalStr,
    /// Lowest preemptible price, CNY per GPU-hour, below the spot price; absent: no
    /// preemptible leases.
    #[schema(value_type = Option<String>, example = "9.00")]
    pub preemptible_price: Option<DecimalStr>,
    /// Shortest fixed-duration lease, seconds (default 60).
    pub min_lease_s: Option<u64>,
    /// Longest lease, seconds (default 7 days).
    pub max_lease_s: Option<u64>,
    /// Offer leaves the market at, ms since epoch (default: 30 days from now).
    pub available_until_ms: Option<i64>,
    /// Preemption notice for preemptible leases, seconds 0..=900 (default 30).
    pub notice_s: Option<u32>,
    /// Provisioning deadline, seconds 1..=1800 (default 180): a lease must be reported ready
    /// this long after its GPUs become its, or it ends not delivered and fails over
    /// (docs/market-rules.md §11).
    pub provision_s: Option<u32>,
}

impl OfferRequest {
    /// The engine's offer terms; defaults are filled relative to `now_ms`.
    ///
    /// # Errors
    /// 400 for a price off the 0.0001 tick, not positive or too high.
    pub fn to_terms(&self, now_ms: i64) -> Result<OfferTerms, ApiError> {
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

/// Where a bid's GPUs may be; empty lists mean any.
#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConstraintsDto {
    /// Allowed regions (≤ 16).
    #[serde(default)]
    pub regions: Vec<String>,
    /// Allowed jurisdictions, ISO 3166-1 alpha-2 (≤ 16).
    #[serde(default)]
    pub jurisdictions: Vec<String>,
    /// Minimum fabric.
    #[serde(default)]
    pub min_interconnect: Option<InterconnectDto>,
    /// Require NVLink.
    #[serde(default)]
    pub nvlink: bool,
}

/// A bid (REST `POST /v1/bids` and the websocket's `place_bid`).
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BidRequest {
    /// Buyer's id for the bid, unique per account: 1..=64 printable ASCII.
    pub client_order_id: String,
    /// Catalog SKU id.
    pub sku: String,
    /// GPUs, 1..=1024 (1..=16 single-node).
    pub gpus: u32,
    /// Highest price, CNY per GPU-hour, decimal string.
    #[schema(value_type = String, example = "20.00")]
    pub limit_price: DecimalStr,
    /// Spot or preemptible.
    pub kind: KindDto,
    /// Single node (default) or spread.
    #[serde(default = "default_placement")]
    pub placement: PlacementDto,
    /// Constraints.
    #[serde(default)]
    pub constraints: ConstraintsDto,
    /// Lease term, seconds; absent: open-ended (up to the offer's maximum).
    pub duration_s: Option<u64>,
    /// IOC or GTC.
    pub time_in_force: TifDto,
    /// GTC only: the resting rest expires at, ms since epoch.
    pub expires_at_ms: Option<i64>,
    /// What the leases run (required when the market delivers leases, as the server does):
    /// SSH keys, image, command, environment, ports, disk. Journaled with the bid and shown to
    /// the supplier of every node that holds one of its leases (no secrets in `env`).
    pub launch: Option<crate::api::launch::LaunchRequest>,
}

fn default_placement() -> PlacementDto {
    PlacementDto::SingleNode
}

impl BidRequest {
    /// The engine's bid.
    ///
    /// # Errors
    /// 400 for an unknown SKU, a bad price or jurisdiction, or an expiry on an IOC bid.
    pub fn to_spec(&self, catalog: &Catalog) -> Result<BidSpec, ApiError> {
        let tif = match (self.time_in_force, self.expires_at_ms) {
            (TifDto::Ioc, Some(_)) => {
                return Err(ApiError::invalid(
                    "expires_at_ms",
                    "invalid_expiry",
                    "an IOC bid cannot carry expires_at_ms",
                ));
            }
            (TifDto::Ioc, None) => TimeInForce::Ioc,
            (TifDto::Gtc, e) => TimeInForce::Gtc { expires_at_ms: e },
        };
        Ok(BidSpec {
            client_order_id: self.client_order_id.clone(),
            sku: sku(catalog, &self.sku)?,
            gpus: self.gpus,
            limit: price("limit_price", self.limit_price)?,
            kind: self.kind.into(),
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
                min_interconnect: self.constraints.min_interconnect.map(Into::into),
                nvlink: self.constraints.nvlink,
            },
            duration_s: self.duration_s,
            tif,
        })
    }
}

/// `POST /v1/admin/accounts`.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateAccountRequest {
    /// Unique name, 1..=64 of `[A-Za-z0-9._-]`.
    pub name: String,
    /// Role.
    pub role: crate::accounts::Role,
}

/// `POST /v1/admin/accounts/{id}/deposits` and `/payouts`: an amount in CNY (the
/// `Idempotency-Key` header names the transfer).
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AmountRequest {
    /// CNY, decimal string, > 0.
    #[schema(value_type = String, example = "1000.00")]
    pub amount: DecimalStr,
}

/// Formats a decimal price (4 places) for the wire.
pub fn price_str(p: Price) -> String {
    p.to_decimal().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_strings_are_exact_and_numbers_refused() {
        let d: DecimalStr = serde_json::from_str("\"18.5000\"").unwrap();
        assert_eq!(d.0, Decimal::new(185_000, 4));
        for bad in [
            "18.5", "1e3", "\"1e3\"", "\"\"", "\"+1\"", "\"abc\"", "null",
        ] {
            assert!(serde_json::from_str::<DecimalStr>(bad).is_err(), "{bad}");
        }
        let id: IdStr = serde_json::from_str("\"123\"").unwrap();
        assert_eq!(id.0, 123);
        for bad in [
            "123",
            "\"-1\"",
            "\"18446744073709551616\"",
            "\"1a\"",
            "\"\"",
        ] {
            assert!(serde_json::from_str::<IdStr>(bad).is_err(), "{bad}");
        }
    }

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
        assert_eq!(
            b.to_spec(&Catalog::builtin()).unwrap_err().code,
            "unknown_sku"
        );
    }
}
