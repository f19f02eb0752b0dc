//! Public reads (no key): the SKU catalog with reference prices, the live inventory and the
//! tape of recent fills (the feed hub's, [`crate::feed::RECENT_FILLS`] at most). Also
//! `GET /v1/me` (any key): who the key belongs to.

use crate::api::Api;
use crate::api::auth::Principal;
use crate::api::error::{ApiError, ApiResult};
use crate::feed::Topic;
use actix_web::{HttpResponse, web};
use gpux_wire::{
    CatalogView, ErrorBody, InventorySnapshots, MeView, SkuView, ws::InventorySnapshot,
};

/// Registers the public routes.
pub fn routes(cfg: &mut web::ServiceConfig) {
    use crate::server::resource;
    cfg.service(resource("/catalog").route(web::get().to(catalog)))
        .service(resource("/inventory").route(web::get().to(inventory)))
        .service(resource("/fills/recent").route(web::get().to(recent_fills)))
        .service(resource("/me").route(web::get().to(me)));
}

/// `GET /v1/catalog` → every SKU with its reference prices (CNY per GPU-hour; from
/// `data/gpu-price-list.csv`), and `delivery`: whether the market delivers leases (bids then
/// need a launch spec; docs/market-rules.md §11).
#[utoipa::path(get, path = "/v1/catalog",
    responses((status = 200, description = "Every SKU, and whether the market delivers leases.",
        body = CatalogView)),
    tag = "public")]
pub async fn catalog(api: web::Data<Api>) -> HttpResponse {
    let skus = api
        .catalog
        .iter()
        .map(|(_, s)| SkuView {
            sku: s.id.clone(),
            vendor: s.vendor.clone(),
            gpu_memory_gb: s.gpu_memory_gb,
            class: s.class.clone(),
            reference_spot_price: s.reference_spot.map(crate::api::dto::price_str),
            reference_preemptible_price: s.reference_preemptible.map(crate::api::dto::price_str),
        })
        .collect();
    HttpResponse::Ok().json(CatalogView {
        skus,
        delivery: api.delivery,
    })
}

/// Query of `GET /v1/inventory`.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct InventoryQuery {
    /// SKU id (absent: every SKU; another id: 400 `unknown_sku`).
    pub sku: Option<String>,
    /// Region filter, one of the operator's regions (another: 422 `unknown_region`).
    pub region: Option<String>,
    /// Only capacity on nodes whose latest verification run is `verified` and current (issue
    /// 26, docs/market-rules.md §12.2): what a bid with `constraints.verified` can take.
    pub verified: Option<bool>,
    /// Only capacity on nodes whose reliability at the start of today (UTC) is at least this,
    /// `"0"`..`"1"` with at most 4 places (400 `invalid_constraints` otherwise; §12.3).
    pub min_reliability: Option<String>,
}

/// The answer of `GET /v1/inventory`: one SKU's snapshot, or every SKU's.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum InventoryAnswer {
    /// With `sku`: that SKU's snapshot (the websocket's `inventory_snapshot` message).
    One(InventorySnapshot),
    /// Without: one snapshot per SKU.
    All(InventorySnapshots),
}

/// `GET /v1/inventory?sku=&region=` → the same snapshot a websocket subscriber gets
/// (`{type: inventory_snapshot, sku, region, seq, commit_seq, resync, levels}`), or
/// `{snapshots: [...]}` for every SKU. The snapshots are the feed's own, built once per (SKU,
/// region, sequence number) and served as built.
#[utoipa::path(get, path = "/v1/inventory", params(InventoryQuery),
    responses(
        (status = 200, description = "With `sku`: its snapshot; without: every SKU's.",
            content((InventoryAnswer = "application/json"))),
        (status = 400, description = "`bad_query` (an unknown or malformed parameter), \
            `unknown_sku`", body = ErrorBody),
        (status = 422, description = "`unknown_region`: not one of the operator's regions; \
            `invalid_constraints`: `min_reliability` not a decimal 0..1 with at most 4 places",
            body = ErrorBody)),
    tag = "public")]
pub async fn inventory(
    api: web::Data<Api>,
    q: web::Query<InventoryQuery>,
) -> ApiResult<HttpResponse> {
    if let Some(region) = &q.region {
        api.check_region(region)?;
    }
    let min_reliability_bp = match &q.min_reliability {
        None => None,
        // 422: the parameter is a string to the schema; its value is the market's rule.
        Some(r) => Some(
            crate::api::buyer::parse_ratio_bp(r).ok_or_else(|| ApiError {
                field: Some("min_reliability"),
                ..ApiError::new(
                    actix_web::http::StatusCode::UNPROCESSABLE_ENTITY,
                    "invalid_constraints",
                    "min_reliability is a decimal from \"0\" to \"1\" with at most 4 places",
                )
            })?,
        ),
    };
    let trust = exchange::TrustConstraints {
        verified: q.verified.unwrap_or(false),
        min_reliability_bp,
    };
    let skus: Vec<exchange::SkuId> = match &q.sku {
        Some(s) => vec![
            api.catalog
                .lookup(s)
                .ok_or_else(|| crate::api::dto::unknown_sku(&api.catalog, s))?,
        ],
        None => api.catalog.iter().map(|(id, _)| id).collect(),
    };
    if !trust.is_none() {
        let region = q.region.clone();
        let one = q.sku.is_some();
        let snapshots = api
            .read(move |m, _| trusted_inventory(m, &skus, region.as_deref(), &trust))
            .await?;
        let body = if one {
            serde_json::to_string(&snapshots.first()).unwrap_or_default()
        } else {
            serde_json::json!({ "snapshots": snapshots }).to_string()
        };
        return Ok(HttpResponse::Ok()
            .content_type("application/json")
            .body(body));
    }
    let mut out = Vec::new();
    for sku in &skus {
        let (_, msg) = api
            .feed
            .snapshot(Topic {
                sku: *sku,
                region: q.region.clone(),
            })
            .await
            .ok_or_else(|| ApiError::from(crate::sequencer::SequencerError::Stopped))?;
        out.push(msg);
    }
    let body = if q.sku.is_some() {
        out.first().map(|m| m.to_string()).unwrap_or_default()
    } else {
        format!("{{\"snapshots\":[{}]}}", out.join(","))
    };
    Ok(HttpResponse::Ok()
        .content_type("application/json")
        .body(body))
}

/// Query of `GET /v1/fills/recent`.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct RecentFillsQuery {
    /// SKU id (absent: every SKU; another id: 400 `unknown_sku`).
    pub sku: Option<String>,
}

/// One fill of the public tape: the websocket's `trade` message (never the parties).
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct RecentFill {
    /// Always `trade`.
    #[serde(rename = "type")]
    pub kind_of_message: String,
    /// Committed sequence number of the command that made the fill.
    pub seq: u64,
    /// SKU id.
    pub sku: String,
    /// Region.
    pub region: String,
    /// `spot` or `preemptible`.
    pub kind: String,
    /// GPUs leased.
    pub gpus: u32,
    /// Price, CNY per GPU-hour (4 decimals).
    pub price: String,
    /// Lease start, ms since epoch.
    pub start_ms: i64,
}

/// The answer of `GET /v1/fills/recent`.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct RecentFills {
    /// Newest first, at most [`crate::feed::RECENT_FILLS`].
    pub fills: Vec<RecentFill>,
}

/// `GET /v1/fills/recent?sku=` → `{fills: [...]}`: the last fills (leases started) the feed
/// published, newest first, as the websocket's `trade` messages (price, GPUs, kind, region,
/// start; no account ids). At most [`crate::feed::RECENT_FILLS`] over all SKUs; empty after a
/// restart until the next fill.
#[utoipa::path(get, path = "/v1/fills/recent", params(RecentFillsQuery),
    responses(
        (status = 200, description = "The recent fills, newest first.", body = RecentFills),
        (status = 400, description = "`bad_query` (an unknown or malformed parameter), \
            `unknown_sku`", body = ErrorBody)),
    tag = "public")]
pub async fn recent_fills(
    api: web::Data<Api>,
    q: web::Query<RecentFillsQuery>,
) -> ApiResult<HttpResponse> {
    let sku = match &q.sku {
        Some(s) => Some(
            api.catalog
                .lookup(s)
                .ok_or_else(|| crate::api::dto::unknown_sku(&api.catalog, s))?,
        ),
        None => None,
    };
    let fills = api
        .feed
        .recent_fills(sku)
        .await
        .ok_or_else(|| ApiError::from(crate::sequencer::SequencerError::Stopped))?;
    Ok(HttpResponse::Ok()
        .content_type("application/json")
        .body(format!("{{\"fills\":[{}]}}", fills.join(","))))
}

/// `GET /v1/me` → `{account_id, name, role, key_id}` of the calling key.
#[utoipa::path(get, path = "/v1/me",
    responses((status = 200, description = "Who the calling key belongs to.", body = MeView)),
    security(("bearer" = [])), tag = "public")]
pub async fn me(api: web::Data<Api>, p: Principal) -> ApiResult<HttpResponse> {
    let account = p.account;
    let name = api
        .read(move |m, _| m.accounts().get(account).map(|a| a.name.clone()))
        .await?;
    Ok(HttpResponse::Ok().json(MeView {
        account_id: p.account.to_string(),
        name,
        role: p.role,
        key_id: p.key_id,
    }))
}

/// The inventory of the capacity that meets `trust` (issue 26), per SKU of `skus`, in the
/// websocket snapshot's shape: computed from the market at the request (every listed node,
/// its free GPUs at its offer's spot and preemptible prices), not from the feed.
fn trusted_inventory(
    m: &crate::market::Market,
    skus: &[exchange::SkuId],
    region: Option<&str>,
    trust: &exchange::TrustConstraints,
) -> Vec<serde_json::Value> {
    use std::collections::BTreeMap;
    let e = m.engine();
    let seq = e.last_seq();
    let mut levels: BTreeMap<(exchange::SkuId, String, u8, exchange::Price), (u32, u32)> =
        BTreeMap::new();
    for n in e.nodes() {
        let free = e.listed_free_gpus(n.id);
        if free == 0 || !skus.contains(&n.sku) || !e.meets_trust(trust, n.id) {
            continue;
        }
        let region_name = e.region_name(n.region).unwrap_or_default().to_string();
        if region.is_some_and(|r| r != region_name) {
            continue;
        }
        let Some(o) = n.offer.and_then(|o| e.offer(o)) else {
            continue;
        };
        let prices = [Some(o.terms.spot_price), o.terms.preemptible_price];
        for (kind, price) in prices.into_iter().enumerate() {
            if let Some(p) = price {
                let l = levels
                    .entry((n.sku, region_name.clone(), kind as u8, p))
                    .or_default();
                l.0 += free;
                l.1 = l.1.max(free);
            }
        }
    }
    skus.iter()
        .map(|sku| {
            let lv: Vec<serde_json::Value> = levels
                .iter()
                .filter(|((s, ..), _)| s == sku)
                .map(|((_, r, kind, p), (free, max))| {
                    serde_json::json!({
                        "region": r,
                        "kind": if *kind == 0 { "spot" } else { "preemptible" },
                        "price": crate::api::dto::price_str(*p),
                        "free_gpus": free,
                        "max_single_node": max,
                    })
                })
                .collect();
            serde_json::json!({
                "type": "inventory_snapshot",
                "sku": e.catalog().get(*sku).map(|s| s.id.clone()).unwrap_or_default(),
                "region": region,
                "seq": seq,
                "commit_seq": seq,
                "resync": false,
                "trust": {
                    "verified": trust.verified,
                    "min_reliability": trust.min_reliability_bp.map(crate::wire_conv::bp_str),
                },
                "levels": lv,
            })
        })
        .collect()
}
