//! Supplier REST: nodes, heartbeats, offers, earnings. Supplier keys only; every object is the
//! caller's own (another supplier's answers 404).
//!
//! A node key (issue 16) registers, lists, reads, updates and heartbeats its own node only
//! (these handlers take [`ScopedPrincipal`]); another node answers 404, a node of another name
//! 403; every other handler here refuses it (403).

use crate::accounts::Role;
use crate::api::auth::{Principal, ScopedPrincipal};
use crate::api::dto::{
    AttestationOf, AttestationRequest, HeartbeatOf, HeartbeatRequest, NodeRequest,
    NodeUpdateRequest, OfferRequest, SlaTermsOf,
};
use crate::api::error::{ApiError, ApiResult};
use crate::api::openapi::IdempotencyKey;
use crate::api::views::prelude::*;
use crate::api::views::{EarningsView, NodeList, NodeView, OfferList, OfferView};
use crate::api::{Api, engine_output, parse_json, path_id, read_body};
use crate::market::Op;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use exchange::{AccountId, Command, Event, NodeId, OfferId};
use gpux_wire::{AttestationAnswer, ErrorBody, HeartbeatAnswer, OfferAmendRequest, OfferWithdrawn};

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
    .service(resource("/nodes/{id}/attestation").route(web::post().to(attest)))
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
            .map(|n| node_view_of(m, n))
    })
    .await?
    .ok_or_else(|| ApiError::not_found("node"))
}

/// A node's view with what the market keeps beside the engine: the agent's clock offset as
/// its last heartbeat that carried one reported it (issue 25), its latest attestation with
/// the host facts, and its unhealthy GPUs with their reasons (issue 26).
pub(crate) fn node_view_of(m: &crate::market::Market, n: &exchange::state::Node) -> NodeView {
    let mut v = NodeView::of(m.engine(), n);
    if let Some(c) = m.agent_clock(n.id) {
        v.agent_clock_offset_ms = Some(c.offset_ms);
        v.agent_clock_offset_at_ms = Some(c.at_ms);
    }
    v.attestation = m
        .engine()
        .attestation(n.id)
        .map(|a| crate::wire_conv::attestation_view(a, m.host_facts(n.id)));
    let problems = m.gpu_problems(n.id);
    v.unhealthy_gpus = (0..n.gpus.min(32))
        .filter(|i| n.healthy_mask & (1 << i) == 0)
        .map(|index| {
            let p = problems.iter().find(|p| p.index == index);
            gpux_wire::UnhealthyGpu {
                index,
                uuid: p.and_then(|p| p.uuid.clone()),
                reason: p.and_then(|p| p.reason.clone()),
            }
        })
        .collect();
    v
}

/// A node key registers its own node only (403 for another name). Checked before the
/// `Idempotency-Key` store, so no replay answers with another node.
fn check_node_name(p: &Principal, bytes: &[u8]) -> ApiResult<()> {
    if p.node.is_none() {
        return Ok(());
    }
    let r: NodeRequest = parse_json(bytes)?;
    p.require_node_name(&r.name)
}

/// `POST /v1/nodes` → 201 with the node. A node key registers the node of its name only.
#[utoipa::path(post, path = "/v1/nodes", request_body = NodeRequest, params(IdempotencyKey),
    responses(
        (status = 201, description = "Registered (offline until its first heartbeat).",
            body = NodeView),
        (status = 400, description = "`bad_json`, `unknown_sku`, `invalid_jurisdiction`, \
            `invalid_idempotency_key`", body = ErrorBody),
        (status = 403, description = "`forbidden`: not a supplier's key, or a node key of \
            another node", body = ErrorBody),
        (status = 409, description = "`node_exists` (the account has a node of this name), \
            `idempotency_conflict`, `idempotency_in_flight`", body = ErrorBody),
        (status = 422, description = "`unknown_region` (not one of the operator's regions), \
            `invalid_name`, `invalid_gpus`, `invalid_region`, `invalid_domain` (`fabric_domain` \
            not 1..=64 of `[A-Za-z0-9._-]`, `nic_gbps` not 1..=25600; `field` names it)",
            body = ErrorBody)),
    security(("bearer" = [])), tag = "supplier")]
pub async fn post_node(
    api: web::Data<Api>,
    p: ScopedPrincipal,
    req: HttpRequest,
    body: web::Payload,
) -> ApiResult<HttpResponse> {
    p.require(&[Role::Supplier])?;
    let bytes = read_body(&req, body).await?;
    check_node_name(&p, &bytes)?;
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
            Ok((StatusCode::CREATED, node_view(&api, p.account, id).await?))
        })
        .await
}

/// `GET /v1/nodes` → the caller's nodes (a node key's: its node, once registered).
#[utoipa::path(get, path = "/v1/nodes",
    responses((status = 200, description = "The caller's nodes.", body = NodeList)),
    security(("bearer" = [])), tag = "supplier")]
pub async fn list_nodes(api: web::Data<Api>, p: ScopedPrincipal) -> ApiResult<HttpResponse> {
    p.require(&[Role::Supplier])?;
    let p = p.0;
    let nodes = api
        .read(move |m, _| {
            m.engine()
                .nodes()
                .filter(|n| p.may_see_node(n))
                .map(|n| node_view_of(m, n))
                .collect::<Vec<_>>()
        })
        .await?;
    Ok(HttpResponse::Ok().json(NodeList { nodes }))
}

/// `GET /v1/nodes/{id}`.
#[utoipa::path(get, path = "/v1/nodes/{id}",
    params(("id" = String, Path, description = "Node id.", pattern = "^[0-9]{1,20}$")),
    responses((status = 200, description = "The node.", body = NodeView),
        (status = 404, description = "`not_found`: no node of the caller's (a node key: its \
            own) with this id", body = ErrorBody)),
    security(("bearer" = [])), tag = "supplier")]
pub async fn get_node(
    api: web::Data<Api>,
    p: ScopedPrincipal,
    id: web::Path<String>,
) -> ApiResult<HttpResponse> {
    p.require(&[Role::Supplier])?;
    let id = path_id(&id, "node")?;
    p.require_node_access(&api, id).await?;
    Ok(HttpResponse::Ok().json(node_view(&api, p.account, id).await?))
}

/// `PATCH /v1/nodes/{id}`: region, jurisdiction, fabric, NVLink, draining, fabric domain and
/// NIC bandwidth (merged with the node's current ones; `fabric_domain: ""` clears the domain).
#[utoipa::path(patch, path = "/v1/nodes/{id}", request_body = NodeUpdateRequest,
    params(("id" = String, Path, description = "Node id.", pattern = "^[0-9]{1,20}$")),
    responses((status = 200, description = "The node as changed.", body = NodeView),
        (status = 400, description = "`bad_json`, `invalid_jurisdiction`", body = ErrorBody),
        (status = 404, description = "`not_found`: no node of the caller's with this id",
            body = ErrorBody),
        (status = 422, description = "`unknown_region` (not one of the operator's regions), \
            `invalid_region`, `invalid_domain` (`fabric_domain` not 0..=64 of \
            `[A-Za-z0-9._-]`, `nic_gbps` not 1..=25600; `field` names it)", body = ErrorBody)),
    security(("bearer" = [])), tag = "supplier")]
pub async fn patch_node(
    api: web::Data<Api>,
    p: ScopedPrincipal,
    id: web::Path<String>,
    req: HttpRequest,
    body: web::Payload,
) -> ApiResult<HttpResponse> {
    p.require(&[Role::Supplier])?;
    let id = path_id(&id, "node")?;
    p.require_node_access(&api, id).await?;
    let bytes = read_body(&req, body).await?;
    let r: NodeUpdateRequest = parse_json(&bytes)?;
    if let Some(region) = &r.region {
        api.check_region(region)?;
    }
    // The engine replaces the node's whole fabric record (§13.1): a change of one part keeps
    // the other as it is now.
    let current = if r.fabric_domain.is_some() || r.nic_gbps.is_some() {
        api.read(move |m, _| m.engine().node_fabric(NodeId(id)).cloned())
            .await?
    } else {
        None
    };
    let update = r.to_update(current.as_ref())?;
    let c = api
        .submit(Op::Engine(Command::UpdateNode {
            account: AccountId(p.account),
            node: NodeId(id),
            update,
        }))
        .await?;
    engine_output(&c)?;
    Ok(HttpResponse::Ok().json(node_view(&api, p.account, id).await?))
}

/// `POST /v1/nodes/{id}/heartbeat` `{healthy_gpus, clock_offset_ms?, unhealthy_gpus?}` →
/// `{seq, at_ms, came_online, leases_version}` (cheap: no read, unless it names unhealthy
/// GPUs). With `unhealthy_gpus` (issue 26, docs/market-rules.md §12.1) it is journaled as
/// [`Op::GpuHealth`] with the healthy mask = the node's GPUs minus those named (the node's
/// GPU count is read first: it never changes), and the leases on exactly those GPUs end
/// `node_failure`; `healthy_gpus` is then ignored. A `clock_offset_ms` (the agent's clock
/// minus the exchange's, issue 25) is journaled with the heartbeat ([`Op::Heartbeat`]) and
/// shown in the node view. `leases_version` grows when the node's leases change (assigned,
/// noticed, ended, wiped): fetch `GET /v1/nodes/{id}/leases` when it moved.
#[utoipa::path(post, path = "/v1/nodes/{id}/heartbeat", request_body = HeartbeatRequest,
    params(("id" = String, Path, description = "Node id.", pattern = "^[0-9]{1,20}$")),
    responses((status = 200, description = "What the heartbeat did.", body = HeartbeatAnswer),
        (status = 400, description = "`bad_json`, `invalid_clock_offset` (`clock_offset_ms` \
            beyond a day either way), `invalid_unhealthy_gpus` (more than 16, an index of 16 or \
            more, a malformed uuid or reason), `invalid_gpus` (`healthy_gpus` over 16)",
            body = ErrorBody),
        (status = 404, description = "`not_found`: no node of the caller's with this id",
            body = ErrorBody),
        (status = 422, description = "`invalid_gpus`: more healthy GPUs than the node has, or \
            an `unhealthy_gpus` index at or above the node's GPU count", body = ErrorBody)),
    security(("bearer" = [])), tag = "supplier")]
pub async fn heartbeat(
    api: web::Data<Api>,
    p: ScopedPrincipal,
    id: web::Path<String>,
    req: HttpRequest,
    body: web::Payload,
) -> ApiResult<HttpResponse> {
    p.require(&[Role::Supplier])?;
    let id = path_id(&id, "node")?;
    p.require_node_access(&api, id).await?;
    let bytes = read_body(&req, body).await?;
    let r: HeartbeatRequest = parse_json(&bytes)?;
    // The document's bound holds even when `unhealthy_gpus` makes `healthy_gpus` moot (found
    // by schemathesis: 17 was accepted beside an empty `unhealthy_gpus`).
    if r.healthy_gpus > exchange::limits::MAX_NODE_GPUS {
        return Err(ApiError::invalid(
            "healthy_gpus",
            "invalid_gpus",
            format!(
                "healthy_gpus is at most {} (a node has at most that many GPUs)",
                exchange::limits::MAX_NODE_GPUS
            ),
        ));
    }
    let clock_offset = r.clock_offset()?;
    let op = match (r.unhealthy()?, clock_offset) {
        (Some(problems), clock_offset_ms) => {
            let gpus = api
                .read(move |m, _| m.engine().node(NodeId(id)).map(|n| n.gpus))
                .await?
                .ok_or_else(|| ApiError::not_found("node"))?;
            if let Some(p) = problems.iter().find(|p| p.index >= gpus) {
                return Err(ApiError {
                    field: Some("unhealthy_gpus"),
                    ..ApiError::new(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "invalid_gpus",
                        format!(
                            "unhealthy_gpus names GPU {} but the node has {gpus} GPUs \
                             (indexes 0 to {})",
                            p.index,
                            gpus.saturating_sub(1)
                        ),
                    )
                });
            }
            Op::GpuHealth {
                account: p.account,
                node: id,
                healthy_mask: crate::node_facts::healthy_mask(
                    gpus,
                    problems.iter().map(|p| p.index),
                ),
                problems,
                clock_offset_ms,
            }
        }
        (None, None) => Op::Engine(Command::Heartbeat {
            account: AccountId(p.account),
            node: NodeId(id),
            healthy_gpus: r.healthy_gpus,
        }),
        (None, Some(offset_ms)) => Op::Heartbeat {
            account: p.account,
            node: id,
            healthy_gpus: r.healthy_gpus,
            clock_offset_ms: Some(offset_ms),
        },
    };
    let c = api.submit(op).await?;
    let out = engine_output(&c)?;
    let online = out
        .events
        .iter()
        .any(|e| matches!(e, Event::NodeOnline { .. }));
    Ok(HttpResponse::Ok().json(HeartbeatAnswer {
        seq: c.seq,
        at_ms: c.timestamp_ms,
        came_online: online,
        leases_version: c.outcome.leases_version.unwrap_or(0),
    }))
}

/// `POST /v1/nodes/{id}/attestation`: what the node agent found on the host (issue 26,
/// docs/market-rules.md §12.1), journaled as [`Op::AttestNode`] → 200 `{attested, mismatch,
/// held}`. A mismatch is an answer, not an error: the node is held (`attestation`, or
/// `duplicate_gpu` for a UUID attested on another node, which is never named) and its resume
/// refused (409 `attestation_mismatch`) until a matching attestation arrives. Node key or the
/// supplier's key.
#[utoipa::path(post, path = "/v1/nodes/{id}/attestation", request_body = AttestationRequest,
    params(("id" = String, Path, description = "Node id.", pattern = "^[0-9]{1,20}$")),
    responses((status = 200, description = "What the exchange made of it: matched, or the \
            first mismatch and the hold.", body = AttestationAnswer),
        (status = 400, description = "`bad_json`, `invalid_gpus` (no GPU or more than 16, an \
            index of 16 or more, a malformed uuid or model, a PCIe figure out of range), \
            `invalid_attestation` (`driver_version`, `cuda_version`, `nics`)", body = ErrorBody),
        (status = 404, description = "`not_found`: no node of the caller's with this id",
            body = ErrorBody),
        (status = 422, description = "`unknown_model` (`gpus`: a model the exchange does not \
            know), `invalid_gpus` (indexes not increasing, a uuid listed twice)",
            body = ErrorBody)),
    security(("bearer" = [])), tag = "supplier")]
pub async fn attest(
    api: web::Data<Api>,
    p: ScopedPrincipal,
    id: web::Path<String>,
    req: HttpRequest,
    body: web::Payload,
) -> ApiResult<HttpResponse> {
    p.require(&[Role::Supplier])?;
    let id = path_id(&id, "node")?;
    p.require_node_access(&api, id).await?;
    let bytes = read_body(&req, body).await?;
    let r: AttestationRequest = parse_json(&bytes)?;
    let host = r.to_host_facts()?;
    let c = api
        .submit(Op::AttestNode {
            account: p.account,
            node: id,
            host,
        })
        .await?;
    let out = engine_output(&c)?;
    let mismatch = out.events.iter().find_map(|e| match e {
        Event::AttestationFailed { mismatch, .. } => Some(crate::wire_conv::mismatch_dto(mismatch)),
        _ => None,
    });
    let held = api
        .read(move |m, _| {
            m.engine()
                .node(NodeId(id))
                .is_some_and(|n| n.held.is_some())
        })
        .await?;
    Ok(HttpResponse::Ok().json(AttestationAnswer {
        attested: mismatch.is_none(),
        mismatch,
        held,
    }))
}

/// The view of a live offer with its SLA terms and its node's and supplier's measured
/// reliability (issue 26).
fn offer_view_of(m: &crate::market::Market, o: &exchange::state::Offer) -> OfferView {
    crate::api::views::offer_view(m, o)
}

/// One of the caller's live offers (404 for a missing or another supplier's offer).
async fn offer_view(api: &Api, account: u64, id: u64) -> ApiResult<OfferView> {
    api.read(move |m, _| {
        m.engine()
            .offer(OfferId(id))
            .filter(|o| o.supplier.0 == account)
            .map(|o| offer_view_of(m, o))
    })
    .await?
    .ok_or_else(|| ApiError::not_found("offer"))
}

/// `POST /v1/offers` → 201 with the offer (it may fill resting bids at once).
#[utoipa::path(post, path = "/v1/offers", request_body = OfferRequest, params(IdempotencyKey),
    responses(
        (status = 201, description = "Posted (it may have filled resting bids at once).",
            body = OfferView),
        (status = 400, description = "`bad_json`, `missing_field` (`node_id`), \
            `invalid_price`, `invalid_idempotency_key`", body = ErrorBody),
        (status = 404, description = "`not_found`: no node of the caller's with this id",
            body = ErrorBody),
        (status = 409, description = "`offer_exists` (the node has a live offer), \
            `idempotency_conflict`, `idempotency_in_flight`", body = ErrorBody),
        (status = 422, description = "A rule of the market: `node_offline`, `node_draining`, \
            `invalid_gpus` (over the node's healthy GPUs), `invalid_price` (preemptible not \
            below spot), `invalid_duration` (`min_lease_s` over `max_lease_s`), \
            `invalid_until` (not after now), `invalid_sla` (SLA terms out of bounds; `field` \
            names it, e.g. `sla.credit_multiple`)", body = ErrorBody)),
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
            // Terms out of bounds: 422 naming the field, before anything is journaled.
            let sla = r.sla.as_ref().map(SlaTermsOf::to_sla).transpose()?;
            let op = match sla {
                None => Op::Engine(Command::PostOffer {
                    account: AccountId(p.account),
                    node: NodeId(node.0),
                    terms,
                }),
                Some(sla) => Op::PostOfferSla {
                    account: p.account,
                    node: node.0,
                    terms,
                    sla,
                },
            };
            let c = api.submit(op).await?;
            let out = engine_output(&c)?;
            let v = out
                .events
                .iter()
                .find_map(|e| match e {
                    Event::OfferPosted { offer, node, terms } => {
                        let mut v = OfferView::from_terms(*offer, *node, terms);
                        v.sla = sla.as_ref().map(crate::api::dto::sla_view);
                        Some(v)
                    }
                    _ => None,
                })
                .ok_or_else(|| ApiError::not_found("offer"))?;
            Ok((StatusCode::CREATED, v))
        })
        .await
}

/// `GET /v1/offers` → the caller's live offers.
#[utoipa::path(get, path = "/v1/offers",
    responses((status = 200, description = "The caller's live offers.", body = OfferList)),
    security(("bearer" = [])), tag = "supplier")]
pub async fn list_offers(api: web::Data<Api>, p: Principal) -> ApiResult<HttpResponse> {
    p.require(&[Role::Supplier])?;
    let account = p.account;
    let offers = api
        .read(move |m, _| {
            m.engine()
                .offers()
                .filter(|o| o.supplier.0 == account)
                .map(|o| offer_view_of(m, o))
                .collect::<Vec<_>>()
        })
        .await?;
    Ok(HttpResponse::Ok().json(OfferList { offers }))
}

/// `GET /v1/offers/{id}`.
#[utoipa::path(get, path = "/v1/offers/{id}",
    params(("id" = String, Path, description = "Offer id.", pattern = "^[0-9]{1,20}$")),
    responses((status = 200, description = "The live offer.", body = OfferView),
        (status = 404, description = "`not_found`: no live offer of the caller's with this id",
            body = ErrorBody)),
    security(("bearer" = [])), tag = "supplier")]
pub async fn get_offer(
    api: web::Data<Api>,
    p: Principal,
    id: web::Path<String>,
) -> ApiResult<HttpResponse> {
    p.require(&[Role::Supplier])?;
    let id = path_id(&id, "offer")?;
    Ok(HttpResponse::Ok().json(offer_view(&api, p.account, id).await?))
}

/// `PUT /v1/offers/{id}`: new terms (the terms of posting, without `node_id`).
#[utoipa::path(put, path = "/v1/offers/{id}", request_body = OfferAmendRequest,
    params(("id" = String, Path, description = "Offer id.", pattern = "^[0-9]{1,20}$")),
    responses((status = 200, description = "The offer with its new terms.", body = OfferView),
        (status = 400, description = "`bad_json`, `invalid_field` (`node_id`: an offer stays \
            on its node), `invalid_price`", body = ErrorBody),
        (status = 404, description = "`not_found`: no live offer of the caller's with this id",
            body = ErrorBody),
        (status = 422, description = "A rule of the market, as when posting", body = ErrorBody)),
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
    let r: OfferAmendRequest = parse_json(&bytes).map_err(|e| {
        let moves = serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&bytes)
            .is_ok_and(|m| m.contains_key("node_id"));
        if moves {
            ApiError::invalid(
                "node_id",
                "invalid_field",
                "an offer stays on its node; withdraw it and post a new one to move",
            )
        } else {
            e
        }
    })?;
    let terms = OfferRequest::from(r).to_terms(crate::api::now_ms())?;
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
#[utoipa::path(delete, path = "/v1/offers/{id}",
    params(("id" = String, Path, description = "Offer id.", pattern = "^[0-9]{1,20}$")),
    responses((status = 200, description = "Withdrawn.", body = OfferWithdrawn),
        (status = 404, description = "`not_found`: no live offer of the caller's with this id",
            body = ErrorBody)),
    security(("bearer" = [])), tag = "supplier")]
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
    Ok(HttpResponse::Ok().json(OfferWithdrawn {
        offer_id: id.to_string(),
        withdrawn: true,
        preemption_notices: notices,
        seq: c.seq,
    }))
}

/// `GET /v1/earnings` → payable balance and live earning rate.
#[utoipa::path(get, path = "/v1/earnings",
    responses((status = 200, description = "Payable balance and live earning rate.",
        body = EarningsView)),
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
