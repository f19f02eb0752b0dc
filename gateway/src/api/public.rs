//! Public reads (no key): the SKU catalog with reference prices, the live inventory and the
//! tape of recent fills (the feed hub's, [`crate::feed::RECENT_FILLS`] at most). Also
//! `GET /v1/me` (any key): who the key belongs to.

use crate::api::Api;
use crate::api::auth::Principal;
use crate::api::error::{ApiError, ApiResult};
use actix_web::{HttpResponse, web};
use gpux_wire::{
    CatalogView, ErrorBody, InterconnectDto, InventorySnapshots, KindDto, MarketOfferView,
    MarketOffers, MeView, SkuView, ws::InventorySnapshot,
};

/// Registers the public routes.
pub fn routes(cfg: &mut web::ServiceConfig) {
    use crate::server::resource;
    cfg.service(resource("/catalog").route(web::get().to(catalog)))
        .service(resource("/inventory").route(web::get().to(inventory)))
        .service(resource("/inventory/domains").route(web::get().to(inventory_domains)))
        .service(resource("/fills/recent").route(web::get().to(recent_fills)))
        .service(resource("/market/offers").route(web::get().to(market_offers)))
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
    /// `"0"`..`"1"` with at most 4 places (422 `invalid_constraints` otherwise; §12.3).
    pub min_reliability: Option<String>,
    /// Only capacity on nodes in this jurisdiction, ISO 3166-1 alpha-2 (`CN`; 400
    /// `invalid_jurisdiction` otherwise): what a bid with `constraints.jurisdictions` can take.
    #[param(pattern = "^[A-Z]{2}$")]
    pub jurisdiction: Option<String>,
    /// Only capacity on nodes with at least this fabric (`pcie` < `roce` < `infiniband`), as
    /// a bid's `constraints.min_interconnect`.
    #[param(inline)]
    pub min_interconnect: Option<InterconnectDto>,
    /// `true`: only capacity on nodes with NVLink, as a bid's `constraints.nvlink`.
    pub nvlink: Option<bool>,
    /// Only capacity on offers whose stated SLA terms promise at least this monthly
    /// availability, percent 90..=99.99 (`"99.9"`; 422 `invalid_constraints` otherwise), as a
    /// bid's `constraints.min_sla.availability` (docs/market-rules.md §12.4).
    pub min_sla: Option<String>,
    /// Only capacity on offers whose stated SLA terms credit at least this multiple of the
    /// outage charge, 1..=50, as a bid's `constraints.min_sla.credit_multiple`.
    #[param(minimum = 1, maximum = 50)]
    pub min_sla_multiple: Option<u16>,
}

/// The site constraints of a query (`jurisdiction`, `min_interconnect`, `nvlink`) as the
/// engine's resolved bid constraints (no region: the query's `region` filters apart); `None`
/// when the query asks none of them.
///
/// # Errors
/// 400 `invalid_jurisdiction` (`jurisdiction`): not two uppercase letters.
fn site_constraints(
    jurisdiction: Option<&str>,
    min_interconnect: Option<InterconnectDto>,
    nvlink: Option<bool>,
) -> ApiResult<Option<exchange::state::ResolvedConstraints>> {
    let jurisdictions = match jurisdiction {
        Some(j) => vec![crate::api::dto::jurisdiction("jurisdiction", j)?],
        None => Vec::new(),
    };
    let c = exchange::state::ResolvedConstraints {
        regions: Vec::new(),
        jurisdictions,
        min_interconnect: min_interconnect.map(crate::api::dto::interconnect),
        nvlink: nvlink.unwrap_or(false),
    };
    Ok((c != exchange::state::ResolvedConstraints::default()).then_some(c))
}

/// The trust parameters both `GET /v1/inventory` and `GET /v1/market/offers` take
/// (`verified`, `min_reliability`, `min_sla`, `min_sla_multiple`) as a bid's trust
/// requirements.
///
/// # Errors
/// 422 `invalid_constraints` naming the parameter out of bounds.
fn query_trust(
    verified: Option<bool>,
    min_reliability: Option<&str>,
    min_sla: Option<&str>,
    min_sla_multiple: Option<u16>,
) -> ApiResult<exchange::TrustConstraints> {
    Ok(exchange::TrustConstraints {
        verified: verified.unwrap_or(false),
        min_reliability_bp: min_reliability_bp(min_reliability)?,
        min_sla: min_sla_floor(min_sla, min_sla_multiple)?,
    })
}

/// The `min_sla` and `min_sla_multiple` parameters as a bid's SLA floor (§12.4); `None` when
/// neither is given.
///
/// # Errors
/// 422 `invalid_constraints` naming the parameter out of bounds (availability 90..=99.99 %,
/// multiple 1..=50).
fn min_sla_floor(
    availability: Option<&str>,
    multiple: Option<u16>,
) -> ApiResult<Option<exchange::SlaFloor>> {
    if availability.is_none() && multiple.is_none() {
        return Ok(None);
    }
    let dto = gpux_wire::MinSlaDto {
        availability: availability.map(str::to_string),
        credit_multiple: multiple,
    };
    crate::api::buyer::min_sla_of(&dto)
        .map(Some)
        .map_err(|mut e| {
            // The parameters' names, not the bid constraint's parts.
            e.field = Some(match e.field {
                Some("constraints.min_sla.credit_multiple") => "min_sla_multiple",
                _ => "min_sla",
            });
            e.message = e
                .message
                .replace("min_sla.credit_multiple", "min_sla_multiple")
                .replace("min_sla.availability", "min_sla");
            e
        })
}

/// A `min_reliability` parameter in basis points.
///
/// # Errors
/// 422 `invalid_constraints` (`min_reliability`): not a decimal 0..1 with at most 4 places
/// (the parameter is a string to the schema; its value is the market's rule).
fn min_reliability_bp(r: Option<&str>) -> ApiResult<Option<u32>> {
    r.map(|r| {
        crate::api::buyer::parse_ratio_bp(r).ok_or_else(|| ApiError {
            field: Some("min_reliability"),
            ..ApiError::new(
                actix_web::http::StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_constraints",
                "min_reliability is a decimal from \"0\" to \"1\" with at most 4 places",
            )
        })
    })
    .transpose()
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
/// `min_reliability`, only the capacity that meets them, plus `trust`; with `jurisdiction`,
/// `min_interconnect` or `nvlink`, only the capacity on nodes a bid with those constraints
/// admits, plus `constraints`.
#[utoipa::path(get, path = "/v1/inventory", params(InventoryQuery),
    responses(
        (status = 200, description = "With `sku`: its snapshot; without: every SKU's.",
            content((InventoryAnswer = "application/json"))),
        (status = 400, description = "`bad_query` (an unknown or malformed parameter), \
            `unknown_sku`, `invalid_jurisdiction`", body = ErrorBody),
        (status = 422, description = "`unknown_region`: not one of the operator's regions; \
            `invalid_constraints`: `min_reliability` not a decimal 0..1 with at most 4 places, \
            `min_sla` not a percentage 90..=99.99, `min_sla_multiple` not 1..=50",
            body = ErrorBody)),
    tag = "public")]
pub async fn inventory(
    api: web::Data<Api>,
    q: web::Query<InventoryQuery>,
) -> ApiResult<HttpResponse> {
    if let Some(region) = &q.region {
        api.check_region(region)?;
    }
    let trust = query_trust(
        q.verified,
        q.min_reliability.as_deref(),
        q.min_sla.as_deref(),
        q.min_sla_multiple,
    )?;
    let site = site_constraints(q.jurisdiction.as_deref(), q.min_interconnect, q.nvlink)?;
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
        .read(move |m, seq| {
            inventory_snapshots(m, seq, &skus, region.as_deref(), &trust, site.as_ref())
        })
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

/// Most rows `GET /v1/inventory/domains` answers (`limit`'s bound; default
/// [`DEFAULT_DOMAIN_ROWS`]).
pub const MAX_DOMAIN_ROWS: usize = 500;
/// Rows `GET /v1/inventory/domains` answers without `limit`.
pub const DEFAULT_DOMAIN_ROWS: usize = 100;

/// Query of `GET /v1/inventory/domains`: every parameter is optional and narrows the answer.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct DomainsQuery {
    /// SKU id (absent: every SKU; another id: 400 `unknown_sku`).
    pub sku: Option<String>,
    /// Region, one of the operator's regions (another: 422 `unknown_region`).
    pub region: Option<String>,
    /// Only domains with whole free nodes of at least this many GPUs, 1..=16 (else 400
    /// `invalid_query`); their rows count only those nodes.
    #[param(minimum = 1, maximum = 16)]
    pub gpus_per_node: Option<u32>,
    /// Only domains with at least this many such whole free nodes, 1..=1024 (else 400
    /// `invalid_query`).
    #[param(minimum = 1, maximum = 1024)]
    pub min_nodes: Option<u32>,
    /// Most rows, 1..=[`MAX_DOMAIN_ROWS`] (500; default [`DEFAULT_DOMAIN_ROWS`] = 100; else
    /// 400 `invalid_query`).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<usize>,
}

/// The opaque id of a supplier's fabric domain on the wire: `d-` and the first 12 hex digits
/// of SHA-256 over the supplier id and the domain name (stable while the supplier keeps the
/// name; names neither).
pub fn domain_id(supplier: exchange::AccountId, domain: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(supplier.0.to_be_bytes());
    h.update(b"/");
    h.update(domain.as_bytes());
    let d = h.finalize();
    let hex: String = d.iter().take(6).map(|b| format!("{b:02x}")).collect();
    format!("d-{hex}")
}

/// `GET /v1/inventory/domains?sku=&region=&gpus_per_node=&min_nodes=&limit=` → whole free
/// nodes per (SKU, region, fabric domain) and node size (docs/market-rules.md §13.1): what a
/// gang (`placement: gang`) can take now. A node counts when it is listed (a live offer,
/// online, not held or draining) and every one of its GPUs is listed free; nodes on no
/// domain are not shown. Domains are opaque ids, never the supplier or its names. Counted
/// from the market at the request.
#[utoipa::path(get, path = "/v1/inventory/domains", params(DomainsQuery),
    responses(
        (status = 200, description = "Whole free nodes per fabric domain.",
            body = gpux_wire::DomainInventory),
        (status = 400, description = "`bad_query` (an unknown or malformed parameter), \
            `unknown_sku`, `invalid_query` (`gpus_per_node` outside 1..=16, `min_nodes` \
            outside 1..=1024, `limit` outside 1..=500)", body = ErrorBody),
        (status = 422, description = "`unknown_region`: not one of the operator's regions",
            body = ErrorBody)),
    tag = "public")]
pub async fn inventory_domains(
    api: web::Data<Api>,
    q: web::Query<DomainsQuery>,
) -> ApiResult<HttpResponse> {
    let limit = q.limit.unwrap_or(DEFAULT_DOMAIN_ROWS);
    if limit == 0 || limit > MAX_DOMAIN_ROWS {
        return Err(ApiError::invalid(
            "limit",
            "invalid_query",
            format!("limit is 1..={MAX_DOMAIN_ROWS}"),
        ));
    }
    let max_node = exchange::limits::MAX_NODE_GPUS;
    if q.gpus_per_node.is_some_and(|g| g == 0 || g > max_node) {
        return Err(ApiError::invalid(
            "gpus_per_node",
            "invalid_query",
            format!("gpus_per_node is 1..={max_node}"),
        ));
    }
    let max_nodes = exchange::limits::MAX_BID_GPUS;
    if q.min_nodes.is_some_and(|n| n == 0 || n > max_nodes) {
        return Err(ApiError::invalid(
            "min_nodes",
            "invalid_query",
            format!("min_nodes is 1..={max_nodes}"),
        ));
    }
    if let Some(region) = &q.region {
        api.check_region(region)?;
    }
    let sku = crate::api::dto::optional_sku(&api.catalog, q.sku.as_deref())?;
    let region = q.region.clone();
    let (min_gpus, min_nodes) = (q.gpus_per_node.unwrap_or(1), q.min_nodes.unwrap_or(1));
    let domains = api
        .read(move |m, _| domain_rows(m, sku, region.as_deref(), min_gpus, min_nodes, limit))
        .await?;
    Ok(HttpResponse::Ok().json(gpux_wire::DomainInventory { domains }))
}

/// The rows of `GET /v1/inventory/domains` (see [`inventory_domains`]), from the market now.
fn domain_rows(
    m: &crate::market::Market,
    sku: Option<exchange::SkuId>,
    region: Option<&str>,
    min_gpus: u32,
    min_nodes: u32,
    limit: usize,
) -> Vec<gpux_wire::DomainInventoryView> {
    use std::collections::BTreeMap;
    let e = m.engine();
    let region_id = region.map(|r| e.region_id(r));
    struct Acc {
        interconnect: exchange::Interconnect,
        nic: Option<(u32, u32)>,
        sizes: BTreeMap<u32, u32>,
        cheapest: exchange::Price,
    }
    // (SKU, region, domain id) → the domain's whole free nodes.
    let mut acc: BTreeMap<(exchange::SkuId, exchange::RegionId, String), Acc> = BTreeMap::new();
    for n in e.nodes() {
        if sku.is_some_and(|s| s != n.sku) || region_id.is_some_and(|id| id != Some(n.region)) {
            continue;
        }
        let Some(fabric) = e.node_fabric(n.id) else {
            continue;
        };
        let Some(domain) = fabric.domain.as_deref() else {
            continue;
        };
        let Some(offer) = n.offer.and_then(|o| e.offer(o)) else {
            continue;
        };
        let listed = n.status == exchange::state::NodeStatus::Online
            && n.held.is_none()
            && !n.draining
            && n.gpus >= min_gpus
            && e.listed_free_gpus(n.id) == n.gpus;
        if !listed {
            continue;
        }
        let price = offer.terms.spot_price;
        let a = acc
            .entry((n.sku, n.region, domain_id(n.supplier, domain)))
            .or_insert(Acc {
                interconnect: n.interconnect,
                nic: None,
                sizes: BTreeMap::new(),
                cheapest: price,
            });
        a.interconnect = a.interconnect.min(n.interconnect);
        a.cheapest = a.cheapest.min(price);
        if let Some(g) = fabric.nic_gbps {
            a.nic = Some(a.nic.map_or((g, g), |(lo, hi)| (lo.min(g), hi.max(g))));
        }
        *a.sizes.entry(n.gpus).or_default() += 1;
    }
    let mut rows: Vec<gpux_wire::DomainInventoryView> = acc
        .into_iter()
        .filter_map(|((sku, region, domain_id), a)| {
            let total: u32 = a.sizes.values().sum();
            if total < min_nodes {
                return None;
            }
            // The largest gang: for each size G, the nodes of at least G GPUs × G.
            let (nodes, gpus_per_node) = a
                .sizes
                .keys()
                .map(|&g| (a.sizes.range(g..).map(|(_, c)| c).sum::<u32>(), g))
                .max_by_key(|&(n, g)| (n * g, g))
                .unwrap_or((0, 0));
            Some(gpux_wire::DomainInventoryView {
                domain_id,
                sku: crate::api::views::sku_name(e, sku),
                region: crate::api::views::region_name(e, region),
                interconnect: crate::wire_conv::interconnect_dto(a.interconnect),
                nic_gbps_min: a.nic.map(|n| n.0),
                nic_gbps_max: a.nic.map(|n| n.1),
                free_nodes: a
                    .sizes
                    .iter()
                    .map(|(&g, &c)| gpux_wire::DomainNodeSize {
                        gpus_per_node: g,
                        nodes: c,
                    })
                    .collect(),
                free_nodes_total: total,
                cheapest_spot_price: crate::wire_conv::price_str(a.cheapest),
                largest_gang: gpux_wire::GangShapeView {
                    nodes,
                    gpus_per_node,
                },
            })
        })
        .collect();
    rows.sort_by(|a, b| {
        (&a.sku, &a.region)
            .cmp(&(&b.sku, &b.region))
            .then_with(|| {
                let size = |r: &gpux_wire::DomainInventoryView| {
                    r.largest_gang.nodes * r.largest_gang.gpus_per_node
                };
                size(b).cmp(&size(a))
            })
            .then_with(|| a.domain_id.cmp(&b.domain_id))
    });
    rows.truncate(limit);
    rows
}

/// Highest `min_gpus` of `GET /v1/market/offers` (a node has at most 16 GPUs).
pub const MAX_SEARCH_GPUS: u32 = exchange::limits::MAX_NODE_GPUS;
/// Highest `min_cpu_cores` (the attestation's bound on `cpu_cores`).
pub const MAX_SEARCH_CPU_CORES: u32 = 4_096;
/// Highest `min_ram_gib`: 64 TiB (the attestation's bound on `ram_mib`).
pub const MAX_SEARCH_RAM_GIB: u32 = 65_536;
/// Highest `min_disk_gb` (the attestation's bound on `disk_gb`).
pub const MAX_SEARCH_DISK_GB: u32 = 1_000_000_000;
/// Highest `min_nic_gbps`, Gb/s.
pub const MAX_SEARCH_NIC_GBPS: u32 = 1_000_000;

/// Rows `GET /v1/market/offers` answers without `limit`.
pub const DEFAULT_MARKET_OFFERS: usize = 100;
/// Most rows `GET /v1/market/offers` answers (`limit`'s bound).
pub const MAX_MARKET_OFFERS: usize = 500;

/// The order of `GET /v1/market/offers`. Ties: the compared price ascending, then the offer
/// id ascending.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MarketOrder {
    /// The compared price ascending (the spot price; the preemptible one with
    /// `kind=preemptible`). The default.
    #[default]
    Price,
    /// The node's reliability at the start of today (UTC, what `min_reliability` compares)
    /// descending; `new` nodes (no score) last.
    Reliability,
    /// Free GPUs on the node descending.
    Gpus,
}

/// Query of `GET /v1/market/offers`: every parameter is optional and narrows the answer. A
/// filter on a host fact (`min_cpu_cores`, `min_ram_gib`, `min_disk_gb`, `min_nic_gbps`,
/// `min_cuda`) leaves out the offers whose node did not report that fact.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct MarketOffersQuery {
    /// SKU id (another id: 400 `unknown_sku`).
    pub sku: Option<String>,
    /// Region, one of the operator's regions (another: 422 `unknown_region`).
    pub region: Option<String>,
    /// Jurisdiction of the node, ISO 3166-1 alpha-2 (`CN`; 400 `invalid_jurisdiction`
    /// otherwise).
    #[param(pattern = "^[A-Z]{2}$")]
    pub jurisdiction: Option<String>,
    /// At least this fabric (`pcie` < `roce` < `infiniband`), as a bid's
    /// `constraints.min_interconnect`.
    #[param(inline)]
    pub min_interconnect: Option<InterconnectDto>,
    /// `true`: only nodes with NVLink.
    pub nvlink: Option<bool>,
    /// `true`: only nodes whose latest verification run is `verified` and current (what a
    /// bid with `constraints.verified` can take, docs/market-rules.md §12.2).
    pub verified: Option<bool>,
    /// Only nodes whose reliability at the start of today (UTC) is at least this, `"0"`..`"1"`
    /// with at most 4 places (422 `invalid_constraints` otherwise; a `new` node never
    /// qualifies; §12.3).
    pub min_reliability: Option<String>,
    /// Only offers whose stated SLA terms promise at least this monthly availability, percent
    /// 90..=99.99 (`"99.9"`; 422 `invalid_constraints` otherwise; an offer without stated
    /// terms never qualifies; §12.4).
    pub min_sla: Option<String>,
    /// Only offers whose stated SLA terms credit at least this multiple, 1..=50.
    #[param(minimum = 1, maximum = 50)]
    pub min_sla_multiple: Option<u16>,
    /// At least this many GPUs free on the node, GPUs, 0..=[`MAX_SEARCH_GPUS`] (else 400
    /// `invalid_query`).
    #[param(minimum = 0, maximum = 16)]
    pub min_gpus: Option<u32>,
    /// The compared price at most this, CNY per GPU-hour (`"18.50"`; > 0, at most 4 places,
    /// else 400 `invalid_price`): the spot price, or the preemptible one with
    /// `kind=preemptible`.
    #[param(
        pattern = "^(?:[1-9][0-9]{0,4}(?:\\.[0-9]{1,4})?|100000(?:\\.0{1,4})?|0\\.(?:[1-9][0-9]{0,3}|0[1-9][0-9]{0,2}|00[1-9][0-9]?|000[1-9]))$"
    )]
    pub max_price: Option<String>,
    /// `spot` (the default: every offer) or `preemptible` (only offers with a preemptible
    /// price; `max_price` and the order compare it).
    #[param(inline)]
    pub kind: Option<KindDto>,
    /// At least this many logical CPU cores on the host, 0..=[`MAX_SEARCH_CPU_CORES`] (the
    /// attestation's bound; else 400 `invalid_query`).
    #[param(minimum = 0, maximum = 4096)]
    pub min_cpu_cores: Option<u32>,
    /// At least this much RAM on the host, GiB (1 GiB = 1024 MiB), 0..=[`MAX_SEARCH_RAM_GIB`]
    /// (64 TiB, the attestation's bound; else 400 `invalid_query`).
    #[param(minimum = 0, maximum = 65536)]
    pub min_ram_gib: Option<u32>,
    /// At least this much disk on the host, GB of 10^9 bytes, 0..=[`MAX_SEARCH_DISK_GB`]
    /// (the attestation's bound; else 400 `invalid_query`).
    #[param(minimum = 0, maximum = 1000000000)]
    pub min_disk_gb: Option<u32>,
    /// At least this much network bandwidth on the host (the sum of its NICs), Gb/s,
    /// 0..=[`MAX_SEARCH_NIC_GBPS`] (else 400 `invalid_query`).
    #[param(minimum = 0, maximum = 1000000)]
    pub min_nic_gbps: Option<u32>,
    /// At least this CUDA version (`12.4`), compared numerically part by part (`12.10` >
    /// `12.4`; a missing part is 0). 1..=4 parts of 1..=6 digits, else 400 `invalid_query`.
    #[param(pattern = "^[0-9]{1,6}(?:\\.[0-9]{1,6}){0,3}$")]
    pub min_cuda: Option<String>,
    /// Order of the rows: `price` (default, ascending), `reliability` (descending) or
    /// `gpus` (free GPUs descending).
    #[param(inline)]
    pub order: Option<MarketOrder>,
    /// Most rows, 1..=[`MAX_MARKET_OFFERS`] (500; default [`DEFAULT_MARKET_OFFERS`] = 100;
    /// else 400 `invalid_query`).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<usize>,
}

/// A version string's numeric parts (`"12.4"` → `[12, 4]`); `None` when it is not 1..=4 dot
/// separated parts of 1..=6 digits.
fn version_parts(v: &str) -> Option<Vec<u32>> {
    let parts: Vec<&str> = v.split('.').collect();
    if parts.len() > 4 {
        return None;
    }
    parts
        .iter()
        .map(|p| {
            (!p.is_empty() && p.len() <= 6 && p.bytes().all(|b| b.is_ascii_digit()))
                .then(|| p.parse().ok())
                .flatten()
        })
        .collect()
}

/// Whether version `have` is at least `want`, part by part (a missing part is 0).
fn version_at_least(have: &[u32], want: &[u32]) -> bool {
    let n = have.len().max(want.len());
    let at = |v: &[u32], i: usize| v.get(i).copied().unwrap_or(0);
    (0..n)
        .map(|i| at(have, i).cmp(&at(want, i)))
        .find(|o| o.is_ne())
        .is_none_or(std::cmp::Ordering::is_gt)
}

/// What `GET /v1/market/offers` asks, validated.
struct OfferSearch {
    sku: Option<exchange::SkuId>,
    region: Option<String>,
    site: Option<exchange::state::ResolvedConstraints>,
    trust: exchange::TrustConstraints,
    min_gpus: u32,
    max_price: Option<exchange::Price>,
    preemptible: bool,
    min_cpu_cores: Option<u32>,
    min_ram_mib: Option<u64>,
    min_disk_gb: Option<u32>,
    min_nic_gbps: Option<u32>,
    min_cuda: Option<Vec<u32>>,
    order: MarketOrder,
    limit: usize,
}

/// `GET /v1/market/offers?sku=&region=&jurisdiction=&min_interconnect=&nvlink=&verified=&min_reliability=&min_gpus=&max_price=&kind=&min_cpu_cores=&min_ram_gib=&min_disk_gb=&min_nic_gbps=&min_cuda=&order=&limit=`
/// → `{offers, count}`: the public offer search (issue 26), like `vastai search offers`. One
/// row per live listed offer with free GPUs on its node (the capacity `GET /v1/inventory`
/// counts), with the node's attributes bids filter on, its verification status, reliability
/// score and SLA terms, and the host facts its agent attested. Anonymous: no supplier, node
/// name or node id. Counted from the market at the request.
#[utoipa::path(get, path = "/v1/market/offers", params(MarketOffersQuery),
    responses(
        (status = 200, description = "The offers that meet the query, in its order.",
            body = MarketOffers),
        (status = 400, description = "`bad_query` (an unknown or malformed parameter), \
            `unknown_sku`, `invalid_jurisdiction`, `invalid_price` (`max_price`), \
            `invalid_query` (`limit` outside 1..=500, a malformed `min_cuda`)",
            body = ErrorBody),
        (status = 422, description = "`unknown_region`: not one of the operator's regions; \
            `invalid_constraints`: `min_reliability` not a decimal 0..1 with at most 4 places, \
            `min_sla` not a percentage 90..=99.99, `min_sla_multiple` not 1..=50",
            body = ErrorBody)),
    tag = "public")]
pub async fn market_offers(
    api: web::Data<Api>,
    q: web::Query<MarketOffersQuery>,
) -> ApiResult<HttpResponse> {
    let limit = q.limit.unwrap_or(DEFAULT_MARKET_OFFERS);
    if limit == 0 || limit > MAX_MARKET_OFFERS {
        return Err(ApiError::invalid(
            "limit",
            "invalid_query",
            format!("limit is 1..={MAX_MARKET_OFFERS}"),
        ));
    }
    for (field, value, max) in [
        ("min_gpus", q.min_gpus, MAX_SEARCH_GPUS),
        ("min_cpu_cores", q.min_cpu_cores, MAX_SEARCH_CPU_CORES),
        ("min_ram_gib", q.min_ram_gib, MAX_SEARCH_RAM_GIB),
        ("min_disk_gb", q.min_disk_gb, MAX_SEARCH_DISK_GB),
        ("min_nic_gbps", q.min_nic_gbps, MAX_SEARCH_NIC_GBPS),
    ] {
        if value.is_some_and(|v| v > max) {
            return Err(ApiError::invalid(
                field,
                "invalid_query",
                format!("{field} is 0..={max}"),
            ));
        }
    }
    if let Some(region) = &q.region {
        api.check_region(region)?;
    }
    let sku = crate::api::dto::optional_sku(&api.catalog, q.sku.as_deref())?;
    let max_price = match &q.max_price {
        Some(p) => {
            let d = p.parse::<gpux_wire::DecimalStr>().map_err(|_| {
                ApiError::invalid(
                    "max_price",
                    "invalid_price",
                    "max_price is a decimal such as \"18.50\" (CNY per GPU-hour)",
                )
            })?;
            Some(crate::api::dto::price("max_price", d)?)
        }
        None => None,
    };
    let min_cuda = match &q.min_cuda {
        Some(v) => Some(version_parts(v).ok_or_else(|| {
            ApiError::invalid(
                "min_cuda",
                "invalid_query",
                "min_cuda is a version such as \"12.4\": 1 to 4 dot-separated numbers",
            )
        })?),
        None => None,
    };
    let search = OfferSearch {
        sku,
        region: q.region.clone(),
        site: site_constraints(q.jurisdiction.as_deref(), q.min_interconnect, q.nvlink)?,
        trust: query_trust(
            q.verified,
            q.min_reliability.as_deref(),
            q.min_sla.as_deref(),
            q.min_sla_multiple,
        )?,
        min_gpus: q.min_gpus.unwrap_or(0),
        max_price,
        preemptible: q.kind == Some(KindDto::Preemptible),
        min_cpu_cores: q.min_cpu_cores,
        min_ram_mib: q.min_ram_gib.map(|g| u64::from(g) * 1024),
        min_disk_gb: q.min_disk_gb,
        min_nic_gbps: q.min_nic_gbps,
        min_cuda,
        order: q.order.unwrap_or_default(),
        limit,
    };
    let offers = api.read(move |m, _| search_offers(m, &search)).await?;
    Ok(HttpResponse::Ok().json(MarketOffers {
        count: u32::try_from(offers.len()).unwrap_or(u32::MAX),
        offers,
    }))
}

/// The rows of `GET /v1/market/offers` (see [`market_offers`]), from the market now.
fn search_offers(m: &crate::market::Market, q: &OfferSearch) -> Vec<MarketOfferView> {
    let e = m.engine();
    // `Some(None)`: a region of the operator's list where no node was ever registered.
    let region_id = q.region.as_deref().map(|r| e.region_id(r));
    let verifying = e.verification_config().is_some();
    // (compared price, matching reliability, row).
    let mut rows: Vec<(exchange::Price, Option<u32>, MarketOfferView)> = Vec::new();
    for o in e.offers() {
        let Some(n) = e.node(o.node) else {
            continue;
        };
        let free = e.listed_free_gpus(n.id);
        if free == 0 || n.offer != Some(o.id) {
            continue;
        }
        let price = if q.preemptible {
            match o.terms.preemptible_price {
                Some(p) => p,
                None => continue,
            }
        } else {
            o.terms.spot_price
        };
        let host = m.host_facts(n.id);
        let nic_gbps = host
            .filter(|h| !h.nics.is_empty())
            .map(|h| h.nics.iter().map(|n| n.gbps).sum::<u32>());
        let cuda = host
            .map(|h| h.cuda_version.as_str())
            .filter(|v| !v.is_empty());
        let at_least = |have: Option<u64>, want: Option<u64>| {
            want.is_none_or(|w| have.is_some_and(|h| h >= w))
        };
        let admitted = q.sku.is_none_or(|s| s == n.sku)
            && region_id.is_none_or(|id| id == Some(n.region))
            && q.site.as_ref().is_none_or(|c| c.admits(n))
            && (q.trust.is_none() || e.meets_trust(&q.trust, o.id, n.id))
            && free >= q.min_gpus
            && q.max_price.is_none_or(|p| price <= p)
            && at_least(
                host.and_then(|h| h.cpu_cores).map(u64::from),
                q.min_cpu_cores.map(u64::from),
            )
            && at_least(host.and_then(|h| h.ram_mib), q.min_ram_mib)
            && at_least(
                host.and_then(|h| h.disk_gb).map(u64::from),
                q.min_disk_gb.map(u64::from),
            )
            && at_least(nic_gbps.map(u64::from), q.min_nic_gbps.map(u64::from))
            && q.min_cuda.as_ref().is_none_or(|want| {
                cuda.and_then(version_parts)
                    .is_some_and(|have| version_at_least(&have, want))
            });
        if !admitted {
            continue;
        }
        let gpus = host.map(|h| h.gpus.as_slice()).unwrap_or_default();
        let pcie = gpus
            .iter()
            .map(|g| g.pcie_gen.zip(g.pcie_width))
            .collect::<Option<Vec<_>>>()
            .filter(|l| !l.is_empty())
            .map(|l| {
                let generation = l.iter().map(|x| x.0).min().unwrap_or_default();
                let width = l.iter().map(|x| x.1).min().unwrap_or_default();
                format!("{generation}x{width}")
            });
        let view = MarketOfferView {
            offer_id: o.id.0.to_string(),
            sku: crate::api::views::sku_name(e, n.sku),
            region: crate::api::views::region_name(e, n.region),
            jurisdiction: n.jurisdiction.to_string(),
            interconnect: crate::wire_conv::interconnect_dto(n.interconnect),
            nvlink: n.nvlink,
            free_gpus: free,
            node_gpus: n.gpus,
            spot_price: crate::wire_conv::price_str(o.terms.spot_price),
            preemptible_price: o.terms.preemptible_price.map(crate::wire_conv::price_str),
            min_lease_s: o.terms.min_lease_s,
            max_lease_s: o.terms.max_lease_s,
            available_until_ms: o.terms.available_until_ms,
            verification: if verifying {
                e.verify_status(n.id).as_str().to_string()
            } else {
                "none".to_string()
            },
            reliability: crate::api::views::node_reliability_view(e, n.id),
            sla: m.offer_sla(o.id).as_ref().map(crate::api::dto::sla_view),
            gpu_model: gpus.first().map(|g| g.model.clone()),
            gpu_memory_mib: gpus.iter().map(|g| g.memory_mib).min(),
            pcie,
            driver_version: host
                .map(|h| h.driver_version.clone())
                .filter(|v| !v.is_empty()),
            cuda_version: cuda.map(str::to_string),
            nic_gbps,
            cpu_cores: host.and_then(|h| h.cpu_cores),
            ram_mib: host.and_then(|h| h.ram_mib),
            disk_gb: host.and_then(|h| h.disk_gb),
        };
        rows.push((price, e.matching_reliability_bp(n.id), view));
    }
    let id = |v: &MarketOfferView| v.offer_id.parse::<u64>().unwrap_or(u64::MAX);
    rows.sort_by(|a, b| {
        let first = match q.order {
            MarketOrder::Price => std::cmp::Ordering::Equal,
            // `None` (new) sorts below every score, so descending puts it last.
            MarketOrder::Reliability => b.1.cmp(&a.1),
            MarketOrder::Gpus => b.2.free_gpus.cmp(&a.2.free_gpus),
        };
        first
            .then(a.0.cmp(&b.0))
            .then_with(|| id(&a.2).cmp(&id(&b.2)))
    });
    rows.truncate(q.limit);
    rows.into_iter().map(|r| r.2).collect()
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
    let sku = crate::api::dto::optional_sku(&api.catalog, q.sku.as_deref())?;
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
/// [`exchange::Engine::meets_trust`]). With `site`, only the capacity on nodes those bid
/// constraints admit ([`exchange::state::ResolvedConstraints::admits`]). One pass over the
/// live offers; none when the exchange does not verify and nothing is required.
fn inventory_snapshots(
    m: &crate::market::Market,
    seq: u64,
    skus: &[exchange::SkuId],
    region: Option<&str>,
    trust: &exchange::TrustConstraints,
    site: Option<&exchange::state::ResolvedConstraints>,
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
    // Everything listed (the engine's levels), or only what meets the query.
    let all = trust.is_none() && site.is_none();
    let mut levels: BTreeMap<LevelKey, Counts> = BTreeMap::new();
    if all {
        for (k, l) in e.inventory() {
            if wanted(k.sku, k.region) {
                levels.insert(k, (l.free_gpus, l.max_single_node, 0));
            }
        }
    }
    if verifying || !all {
        for o in e.offers() {
            let Some(n) = e.node(o.node) else {
                continue;
            };
            let free = e.listed_free_gpus(n.id);
            if free == 0 || n.offer != Some(o.id) || !wanted(n.sku, n.region) {
                continue;
            }
            let admitted = || e.meets_trust(trust, o.id, n.id) && site.is_none_or(|c| c.admits(n));
            if !all && !admitted() {
                continue;
            }
            let verified = if verifying && e.meets_trust(&verified_only, o.id, n.id) {
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
                    "min_sla": trust.min_sla.map(|f| serde_json::json!({
                        "availability": (f.availability_bp > 0).then(|| rust_decimal::Decimal::new(i64::from(f.availability_bp), 2).to_string()),
                        "credit_multiple": (f.credit_multiple > 0).then_some(f.credit_multiple),
                    })),
                });
                body.pop();
                body.push_str(",\"trust\":");
                body.push_str(&t.to_string());
                body.push('}');
            }
            if let Some(c) = site.filter(|_| body.ends_with('}')) {
                // `{…}` becomes `{…,"constraints":{…}}`.
                let t = serde_json::json!({
                    "jurisdiction": c.jurisdictions.first().map(ToString::to_string),
                    "min_interconnect": c.min_interconnect.map(crate::wire_conv::interconnect_dto),
                    "nvlink": c.nvlink,
                });
                body.pop();
                body.push_str(",\"constraints\":");
                body.push_str(&t.to_string());
                body.push('}');
            }
            body
        })
        .collect()
}
