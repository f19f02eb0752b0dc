//! Public reads (no key): the SKU catalog with reference prices, and the live inventory. Also
//! `GET /v1/me` (any key): who the key belongs to.

use crate::api::Api;
use crate::api::auth::Principal;
use crate::api::error::{ApiError, ApiResult};
use crate::feed::Topic;
use actix_web::{HttpResponse, web};
use serde_json::json;

/// Registers the public routes.
pub fn routes(cfg: &mut web::ServiceConfig) {
    use crate::server::resource;
    cfg.service(resource("/catalog").route(web::get().to(catalog)))
        .service(resource("/inventory").route(web::get().to(inventory)))
        .service(resource("/me").route(web::get().to(me)));
}

/// `GET /v1/catalog` → every SKU with its reference prices (CNY per GPU-hour; from
/// `data/gpu-price-list.csv`), and `delivery`: whether the market delivers leases (bids then
/// need a launch spec; docs/market-rules.md §11).
#[utoipa::path(get, path = "/v1/catalog", responses((status = 200)), tag = "public")]
pub async fn catalog(api: web::Data<Api>) -> HttpResponse {
    let skus: Vec<serde_json::Value> = api
        .catalog
        .iter()
        .map(|(_, s)| {
            json!({
                "sku": s.id, "vendor": s.vendor, "gpu_memory_gb": s.gpu_memory_gb,
                "class": s.class,
                "reference_spot_price": s.reference_spot.map(crate::api::dto::price_str),
                "reference_preemptible_price":
                    s.reference_preemptible.map(crate::api::dto::price_str),
            })
        })
        .collect();
    HttpResponse::Ok().json(json!({ "skus": skus, "delivery": api.delivery }))
}

/// Query of `GET /v1/inventory`.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct InventoryQuery {
    /// SKU id (absent: every SKU).
    pub sku: Option<String>,
    /// Region filter.
    pub region: Option<String>,
}

/// `GET /v1/inventory?sku=&region=` → the same snapshot a websocket subscriber gets
/// (`{type: inventory_snapshot, sku, region, seq, levels}`), or `{snapshots: [...]}` for
/// every SKU.
#[utoipa::path(get, path = "/v1/inventory", params(InventoryQuery),
    responses((status = 200)), tag = "public")]
pub async fn inventory(
    api: web::Data<Api>,
    q: web::Query<InventoryQuery>,
) -> ApiResult<HttpResponse> {
    let skus: Vec<exchange::SkuId> = match &q.sku {
        Some(s) => vec![api.catalog.lookup(s).ok_or_else(|| {
            ApiError::invalid("sku", "unknown_sku", format!("{s:?} is not in the catalog"))
        })?],
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

/// `GET /v1/me` → `{account_id, name, role, key_id}` of the calling key.
#[utoipa::path(get, path = "/v1/me", responses((status = 200), (status = 401)),
    security(("bearer" = [])), tag = "public")]
pub async fn me(api: web::Data<Api>, p: Principal) -> ApiResult<HttpResponse> {
    let account = p.account;
    let name = api
        .read(move |m, _| m.accounts().get(account).map(|a| a.name.clone()))
        .await?;
    Ok(HttpResponse::Ok().json(json!({
        "account_id": p.account.to_string(),
        "name": name,
        "role": p.role,
        "key_id": p.key_id,
    })))
}
