//! Public reads (no key): the SKU catalog with reference prices, the live inventory and the
//! tape of recent fills (the feed hub's, [`crate::feed::RECENT_FILLS`] at most). Also
//! `GET /v1/me` (any key): who the key belongs to.

use crate::api::Api;
use crate::api::auth::Principal;
use crate::api::error::{ApiError, ApiResult};
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

/// `GET /v1/inventory?sku=&region=` → the websocket's snapshot message
/// (`{type: inventory_snapshot, sku, region, seq, commit_seq, resync, levels}`), or
/// `{snapshots: [...]}` for every SKU, counted from the market at the request: the levels a
/// feed subscriber has at the same per-SKU `seq`, each with `verified_free_gpus` (issue 26:
/// the GPUs of the level on nodes whose verification is current `verified`, which the
/// engine's deltas do not count, so only this answer carries it). With `verified` or
/// `min_reliability`, only the capacity that meets them, plus `trust`.
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
    let region = q.region.clone();
    let snapshots = api
        .read(move |m, seq| inventory_snapshots(m, seq, &skus, region.as_deref(), &trust))
        .await?;
    let body = if q.sku.is_some() {
        snapshots.into_iter().next().unwrap_or_default()
    } else {
        format!("{{\"snapshots\":[{}]}}", snapshots.join(","))
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

/// Per level: free GPUs, the most free on one node, and of the free GPUs those on nodes whose
/// verification is current `verified`.
type Counts = (u32, u32, u32);

/// The inventory snapshots of `skus` (in the websocket snapshot's shape), counted from the
/// market at commit `seq` (issue 26): the capacity that meets `trust` — with no requirement
/// the engine's own levels (what the feed mirrors) — and per level `verified_free_gpus`, the
/// part of it on nodes that meet `constraints.verified` (the engine's predicate,
/// [`exchange::Engine::meets_trust`]). One pass over the live offers; none when the exchange
/// does not verify and nothing is required.
fn inventory_snapshots(
    m: &crate::market::Market,
    seq: u64,
    skus: &[exchange::SkuId],
    region: Option<&str>,
    trust: &exchange::TrustConstraints,
) -> Vec<String> {
    use exchange::{LeaseKind, LevelKey};
    use std::collections::BTreeMap;
    let e = m.engine();
    // `Some(None)`: a region of the operator's list where no node was ever registered.
    let region_id = region.map(|r| e.region_id(r));
    let wanted = |sku: exchange::SkuId, r: exchange::RegionId| {
        skus.contains(&sku) && region_id.is_none_or(|id| id == Some(r))
    };
    let verified_only = exchange::TrustConstraints {
        verified: true,
        ..Default::default()
    };
    let verifying = e.verification_config().is_some();
    let mut levels: BTreeMap<LevelKey, Counts> = BTreeMap::new();
    if trust.is_none() {
        for (k, l) in e.inventory() {
            if wanted(k.sku, k.region) {
                levels.insert(k, (l.free_gpus, l.max_single_node, 0));
            }
        }
    }
    if verifying || !trust.is_none() {
        for o in e.offers() {
            let Some(n) = e.node(o.node) else {
                continue;
            };
            let free = e.listed_free_gpus(n.id);
            if free == 0 || n.offer != Some(o.id) || !wanted(n.sku, n.region) {
                continue;
            }
            let all = trust.is_none();
            if !all && !e.meets_trust(trust, n.id) {
                continue;
            }
            let verified = if verifying && e.meets_trust(&verified_only, n.id) {
                free
            } else {
                0
            };
            let prices = [
                (LeaseKind::Spot, Some(o.terms.spot_price)),
                (LeaseKind::Preemptible, o.terms.preemptible_price),
            ];
            for (kind, price) in prices {
                let Some(price) = price else {
                    continue;
                };
                let key = LevelKey {
                    sku: n.sku,
                    region: n.region,
                    kind,
                    price,
                };
                if all {
                    // The engine's level is there (the node is listed at it).
                    if let Some(l) = levels.get_mut(&key) {
                        l.2 += verified;
                    }
                } else {
                    let l = levels.entry(key).or_default();
                    l.0 += free;
                    l.1 = l.1.max(free);
                    l.2 += verified;
                }
            }
        }
    }
    skus.iter()
        .map(|sku| {
            let lv: Vec<gpux_wire::LevelView> = levels
                .iter()
                .filter(|(k, _)| k.sku == *sku)
                .map(|(k, (free, max, verified))| gpux_wire::LevelView {
                    region: e.region_name(k.region).unwrap_or_default().to_string(),
                    kind: crate::wire_conv::kind_dto(k.kind),
                    price: crate::wire_conv::price_str(k.price),
                    free_gpus: *free,
                    max_single_node: *max,
                    verified_free_gpus: Some(*verified),
                })
                .collect();
            let msg = gpux_wire::ws::ServerMsg::InventorySnapshot(InventorySnapshot {
                sku: e
                    .catalog()
                    .get(*sku)
                    .map(|s| s.id.clone())
                    .unwrap_or_default(),
                region: region.map(str::to_string),
                seq: e.market_seq(*sku),
                commit_seq: seq,
                resync: false,
                levels: lv,
            });
            let mut body = crate::feed::encode(&msg).to_string();
            if !trust.is_none() && body.ends_with('}') {
                // The message is an object: `{…}` becomes `{…,"trust":{…}}`.
                let t = serde_json::json!({
                    "verified": trust.verified,
                    "min_reliability": trust.min_reliability_bp.map(crate::wire_conv::bp_str),
                });
                body.pop();
                body.push_str(",\"trust\":");
                body.push_str(&t.to_string());
                body.push('}');
            }
            body
        })
        .collect()
}
