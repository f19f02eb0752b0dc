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
        (status = 422, description = "`unknown_region`: not one of the operator's regions",
            body = ErrorBody)),
    tag = "public")]
pub async fn inventory(
    api: web::Data<Api>,
    q: web::Query<InventoryQuery>,
) -> ApiResult<HttpResponse> {
    if let Some(region) = &q.region {
        api.check_region(region)?;
    }
    let skus: Vec<exchange::SkuId> = match &q.sku {
        Some(s) => vec![
            api.catalog
                .lookup(s)
                .ok_or_else(|| crate::api::dto::unknown_sku(&api.catalog, s))?,
        ],
        None => api.catalog.iter().map(|(id, _)| id).collect(),
    };
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
