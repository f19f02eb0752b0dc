//! Supplier REST: nodes, heartbeats, offers, earnings. Supplier keys only; every object is the
//! caller's own (another supplier's answers 404).

use crate::accounts::Role;
use crate::api::auth::Principal;
use crate::api::dto::{HeartbeatRequest, NodeRequest, NodeUpdateRequest, OfferRequest};
use crate::api::error::{ApiError, ApiResult};
use crate::api::views::{EarningsView, NodeList, NodeView, OfferList, OfferView};
use crate::api::{Api, engine_output, parse_json, path_id, read_body};
use crate::market::Op;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use exchange::{AccountId, Command, Event, NodeId, OfferId};
use serde_json::json;

/// Registers the supplier routes.
pub fn routes(cfg: &mut web::ServiceConfig) {
    use crate::server::resource;
    cfg.service(
        resource("/nodes")
            .route(web::post().to(post_node))
            .route(web::get().to(list_nodes)),
    )
    .service(
        resource("/nodes/{id}")
            .route(web::get().to(get_node))
            .route(web::patch().to(patch_node)),
    )
    .service(resource("/nodes/{id}/heartbeat").route(web::post().to(heartbeat)))
    .service(
        resource("/offers")
            .route(web::post().to(post_offer))
            .route(web::get().to(list_offers)),
    )
    .service(
        resource("/offers/{id}")
            .route(web::get().to(get_offer))
            .route(web::put().to(amend_offer))
            .route(web::delete().to(withdraw_offer)),
    )
    .service(resource("/earnings").route(web::get().to(earnings)));
}

/// One of the caller's nodes (404 for a missing or another supplier's node).
///
/// # Errors
/// 404, 503.
pub async fn node_view(api: &Api, account: u64, id: u64) -> ApiResult<NodeView> {
    api.read(move |m, _| {
        m.engine()
            .node(NodeId(id))
            .filter(|n| n.supplier.0 == account)
            .map(|n| NodeView::of(m.engine(), n))
    })
    .await?
    .ok_or_else(|| ApiError::not_found("node"))
}

/// `POST /v1/nodes` → 201 with the node.
#[utoipa::path(post, path = "/v1/nodes", request_body = NodeRequest,
    responses((status = 201, body = NodeView), (status = 409, description = "node_exists")),
    security(("bearer" = [])), tag = "supplier")]
pub async fn post_node(
    api: web::Data<Api>,
    p: Principal,
    req: HttpRequest,
    body: web::Payload,
) -> ApiResult<HttpResponse> {
    p.require(&[Role::Supplier])?;
    let bytes = read_body(&req, body).await?;
    let key = crate::api::idempotency::key_of(&req)?;
    api.idem
        .run(&req, p.account, key, &bytes, async {
            let r: NodeRequest = parse_json(&bytes)?;
            let spec = r.to_spec(&api.catalog)?;
            api.check_region(&spec.region)?;
            let c = api
                .submit(Op::Engine(Command::RegisterNode {
                    account: AccountId(p.account),
                    spec,
                }))
                .await?;
            let id = engine_output(&c)?
                .events
                .iter()
                .find_map(|e| match e {
                    Event::NodeRegistered { node, .. } => Some(node.0),
                    _ => None,
                })
                .ok_or_else(|| ApiError::not_found("node"))?;
            let view = node_view(&api, p.account, id).await?;
            Ok((StatusCode::CREATED, json!(view)))
        })
        .await
}

/// `GET /v1/nodes` → the caller's nodes.
#[utoipa::path(get, path = "/v1/nodes", responses((status = 200, body = NodeList)),
    security(("bearer" = [])), tag = "supplier")]
pub async fn list_nodes(api: web::Data<Api>, p: Principal) -> ApiResult<HttpResponse> {
    p.require(&[Role::Supplier])?;
    let account = p.account;
    let nodes = api
        .read(move |m, _| {
            m.engine()
                .nodes()
                .filter(|n| n.supplier.0 == account)
                .map(|n| NodeView::of(m.engine(), n))
                .collect::<Vec<_>>()
        })
        .await?;
    Ok(HttpResponse::Ok().json(json!({ "nodes": nodes })))
}

/// `GET /v1/nodes/{id}`.
#[utoipa::path(get, path = "/v1/nodes/{id}", responses((status = 200, body = NodeView),
    (status = 404)), params(("id" = String, Path)), security(("bearer" = [])), tag = "supplier")]
pub async fn get_node(
    api: web::Data<Api>,
    p: Principal,
    id: web::Path<String>,
) -> ApiResult<HttpResponse> {
    p.require(&[Role::Supplier])?;
    let id = path_id(&id, "node")?;
    Ok(HttpResponse::Ok().json(node_view(&api, p.account, id).await?))
}

/// `PATCH /v1/nodes/{id}`: region, jurisdiction, fabric, NVLink, draining.
#[utoipa::path(patch, path = "/v1/nodes/{id}", request_body = NodeUpdateRequest,
    responses((status = 200, body = NodeView)), params(("id" = String, Path)),
    security(("bearer" = [])), tag = "supplier")]
pub async fn patch_node(
    api: web::Data<Api>,
    p: Principal,
    id: web::Path<String>,
    req: HttpRequest,
    body: web::Payload,
) -> ApiResult<HttpResponse> {
    p.require(&[Role::Supplier])?;
    let id = path_id(&id, "node")?;
    let bytes = read_body(&req, body).await?;
    let r: NodeUpdateRequest = parse_json(&bytes)?;
    if let Some(region) = &r.region {
        api.check_region(region)?;
    }
    let c = api
        .submit(Op::Engine(Command::UpdateNode {
            account: AccountId(p.account),
            node: NodeId(id),
            update: r.to_update()?,
        }))
        .await?;
    engine_output(&c)?;
    Ok(HttpResponse::Ok().json(node_view(&api, p.account, id).await?))
}

/// `POST /v1/nodes/{id}/heartbeat` `{healthy_gpus}` → `{seq, at_ms, came_online,
/// leases_version}` (cheap: no read). `leases_version` grows when the node's leases change
/// (assigned, noticed, ended, wiped): fetch `GET /v1/nodes/{id}/leases` when it moved.
#[utoipa::path(post, path = "/v1/nodes/{id}/heartbeat", request_body = HeartbeatRequest,
    responses((status = 200)), params(("id" = String, Path)), security(("bearer" = [])),
    tag = "supplier")]
pub async fn heartbeat(
    api: web::Data<Api>,
    p: Principal,
    id: web::Path<String>,
    req: HttpRequest,
    body: web::Payload,
) -> ApiResult<HttpResponse> {
    p.require(&[Role::Supplier])?;
    let id = path_id(&id, "node")?;
    let bytes = read_body(&req, body).await?;
    let r: HeartbeatRequest = parse_json(&bytes)?;
    let c = api
        .submit(Op::Engine(Command::Heartbeat {
            account: AccountId(p.account),
            node: NodeId(id),
            healthy_gpus: r.healthy_gpus,
        }))
        .await?;
    let out = engine_output(&c)?;
    let online = out
        .events
        .iter()
        .any(|e| matches!(e, Event::NodeOnline { .. }));
    Ok(HttpResponse::Ok().json(json!({
        "seq": c.seq,
        "at_ms": c.timestamp_ms,
        "came_online": online,
        "leases_version": c.outcome.leases_version.unwrap_or(0),
    })))
}

/// One of the caller's live offers (404 for a missing or another supplier's offer).
async fn offer_view(api: &Api, account: u64, id: u64) -> ApiResult<OfferView> {
    api.read(move |m, _| {
        m.engine()
            .offer(OfferId(id))
            .filter(|o| o.supplier.0 == account)
            .map(OfferView::of)
    })
    .await?
    .ok_or_else(|| ApiError::not_found("offer"))
}

/// `POST /v1/offers` → 201 with the offer (it may fill resting bids at once).
#[utoipa::path(post, path = "/v1/offers", request_body = OfferRequest,
    responses((status = 201, body = OfferView), (status = 409, description = "offer_exists")),
    security(("bearer" = [])), tag = "supplier")]
pub async fn post_offer(
    api: web::Data<Api>,
    p: Principal,
    req: HttpRequest,
    body: web::Payload,
) -> ApiResult<HttpResponse> {
    p.require(&[Role::Supplier])?;
    let bytes = read_body(&req, body).await?;
    let key = crate::api::idempotency::key_of(&req)?;
    api.idem
        .run(&req, p.account, key, &bytes, async {
            let r: OfferRequest = parse_json(&bytes)?;
            let node = r.node_id.ok_or_else(|| {
                ApiError::invalid("node_id", "missing_field", "node_id is required")
            })?;
            let terms = r.to_terms(crate::api::now_ms())?;
            let c = api
                .submit(Op::Engine(Command::PostOffer {
                    account: AccountId(p.account),
                    node: NodeId(node.0),
                    terms,
                }))
                .await?;
            let out = engine_output(&c)?;
            let v = out
                .events
                .iter()
                .find_map(|e| match e {
                    Event::OfferPosted { offer, node, terms } => {
                        Some(json!(OfferView::from_terms(*offer, *node, terms)))
                    }
                    _ => None,
                })
                .ok_or_else(|| ApiError::not_found("offer"))?;
            Ok((StatusCode::CREATED, v))
        })
        .await
}

/// `GET /v1/offers` → the caller's live offers.
#[utoipa::path(get, path = "/v1/offers", responses((status = 200, body = OfferList)),
    security(("bearer" = [])), tag = "supplier")]
pub async fn list_offers(api: web::Data<Api>, p: Principal) -> ApiResult<HttpResponse> {
    p.require(&[Role::Supplier])?;
    let account = p.account;
    let offers = api
        .read(move |m, _| {
            m.engine()
                .offers()
                .filter(|o| o.supplier.0 == account)
                .map(OfferView::of)
                .collect::<Vec<_>>()
        })
        .await?;
    Ok(HttpResponse::Ok().json(json!({ "offers": offers })))
}

/// `GET /v1/offers/{id}`.
#[utoipa::path(get, path = "/v1/offers/{id}", responses((status = 200, body = OfferView),
    (status = 404)), params(("id" = String, Path)), security(("bearer" = [])), tag = "supplier")]
pub async fn get_offer(
    api: web::Data<Api>,
    p: Principal,
    id: web::Path<String>,
) -> ApiResult<HttpResponse> {
    p.require(&[Role::Supplier])?;
    let id = path_id(&id, "offer")?;
    Ok(HttpResponse::Ok().json(offer_view(&api, p.account, id).await?))
}

/// `PUT /v1/offers/{id}`: new terms (same body as posting, without `node_id`).
#[utoipa::path(put, path = "/v1/offers/{id}", request_body = OfferRequest,
    responses((status = 200, body = OfferView)), params(("id" = String, Path)),
    security(("bearer" = [])), tag = "supplier")]
pub async fn amend_offer(
    api: web::Data<Api>,
    p: Principal,
    id: web::Path<String>,
    req: HttpRequest,
    body: web::Payload,
) -> ApiResult<HttpResponse> {
    p.require(&[Role::Supplier])?;
    let id = path_id(&id, "offer")?;
    let bytes = read_body(&req, body).await?;
    let r: OfferRequest = parse_json(&bytes)?;
    if r.node_id.is_some() {
        return Err(ApiError::invalid(
            "node_id",
            "invalid_field",
            "an offer stays on its node; withdraw it and post a new one to move",
        ));
    }
    let terms = r.to_terms(crate::api::now_ms())?;
    let c = api
        .submit(Op::Engine(Command::AmendOffer {
            account: AccountId(p.account),
            offer: OfferId(id),
            terms,
        }))
        .await?;
    engine_output(&c)?;
    Ok(HttpResponse::Ok().json(offer_view(&api, p.account, id).await?))
}

/// `DELETE /v1/offers/{id}`: withdraw (spot leases run on; preemptible ones get notice).
#[utoipa::path(delete, path = "/v1/offers/{id}", responses((status = 200), (status = 404)),
    params(("id" = String, Path)), security(("bearer" = [])), tag = "supplier")]
pub async fn withdraw_offer(
    api: web::Data<Api>,
    p: Principal,
    id: web::Path<String>,
) -> ApiResult<HttpResponse> {
    p.require(&[Role::Supplier])?;
    let id = path_id(&id, "offer")?;
    let c = api
        .submit(Op::Engine(Command::WithdrawOffer {
            account: AccountId(p.account),
            offer: OfferId(id),
        }))
        .await?;
    let out = engine_output(&c)?;
    let notices = out
        .events
        .iter()
        .filter(|e| matches!(e, Event::PreemptionNotice { .. }))
        .count();
    Ok(HttpResponse::Ok().json(json!({
        "offer_id": id.to_string(),
        "withdrawn": true,
        "preemption_notices": notices,
        "seq": c.seq,
    })))
}

/// `GET /v1/earnings` → payable balance and live earning rate.
#[utoipa::path(get, path = "/v1/earnings", responses((status = 200, body = EarningsView)),
    security(("bearer" = [])), tag = "supplier")]
pub async fn earnings(api: web::Data<Api>, p: Principal) -> ApiResult<HttpResponse> {
    p.require(&[Role::Supplier])?;
    let account = p.account;
    let v = api
        .read(move |m, _| {
            let leases: Vec<_> = m
                .engine()
                .leases()
                .filter(|l| l.supplier.0 == account)
                .collect();
            let rate: rust_decimal::Decimal = leases
                .iter()
                .filter(|l| l.state == exchange::state::LeaseState::Active)
                .map(|l| l.price.to_decimal() * rust_decimal::Decimal::from(l.gpus))
                .sum();
            EarningsView {
                account_id: account.to_string(),
                payable: crate::api::views::money(m.ledger().balance(
                    settlement::Account::Supplier(settlement::AccountId(account)),
                )),
                live_leases: leases.len(),
                leased_gpus: leases.iter().map(|l| l.gpus).sum(),
                gross_rate_per_hour: crate::api::views::rate(rate),
            }
        })
        .await?;
    Ok(HttpResponse::Ok().json(v))
}
