//! Node keys (issue 16): a supplier makes, lists and revokes API keys scoped to one of its
//! nodes, for the host's `gpux-agent`. Account keys of supplier accounts only (a node key
//! cannot manage keys: 403).
//!
//! A node key names its node by name (unique per supplier, never changed), so it can be made
//! before the agent registers the node. The key is shown once; only its SHA-256 and the node
//! name are journaled ([`Op::AddNodeKey`]), part of the market's snapshot and state hash, so a
//! restart recovers the scope. Revoking is the account-wide [`Op::RevokeApiKey`], and the key
//! stops working at once (the auth cache drops it after the revoke is durable). What a node
//! key may do is decided in `api::auth` (docs/api.md §1.3.1). Another supplier's key ids, and
//! ids of account keys, answer 404 like missing ones.
//!
//! The request and answer types here are wire types (to move to the wire crate with the
//! others).

use crate::accounts::{Role, hash_key, new_key, valid_node_name};
use crate::api::auth::{NodeScope, Principal};
use crate::api::error::{ApiError, ApiResult};
use crate::api::openapi::IdempotencyKey;
use crate::api::{Api, parse_json, read_body};
use crate::market::Op;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use gpux_wire::{ErrorBody, KeyRevoked};
use std::sync::Arc;

pub use gpux_wire::{NodeKeyCreated, NodeKeyList, NodeKeyRequest, NodeKeyView};

/// Registers the node-key routes.
pub fn routes(cfg: &mut web::ServiceConfig) {
    use crate::server::resource;
    cfg.service(
        resource("/node-keys")
            .route(web::post().to(create_node_key))
            .route(web::get().to(list_node_keys)),
    )
    .service(resource("/node-keys/{key_id}").route(web::delete().to(revoke_node_key)));
}

/// Makes a node key for `supplier`'s node named `node_name`; answers the key (shown once).
///
/// # Errors
/// 400 `invalid_name`, 409 `too_many_node_keys`, 503.
async fn add_node_key(api: &Api, p: &Principal, node_name: &str) -> ApiResult<NodeKeyCreated> {
    let supplier = p.account;
    if !valid_node_name(node_name) {
        return Err(ApiError::invalid(
            "node_name",
            "invalid_name",
            "node names are 1..=64 of [A-Za-z0-9._-]",
        ));
    }
    let key = new_key();
    let hash = hash_key(&key);
    let c = api
        .submit_as(
            p,
            Op::AddNodeKey {
                account: supplier,
                key_hash: hash,
                node: node_name.to_string(),
            },
        )
        .await?;
    if let Some(r) = &c.outcome.refusal {
        // 409 `too_many_node_keys` (or `key_exists`: a 122-bit collision).
        return Err(ApiError::refusal(r));
    }
    let key_id = c.outcome.key_id.clone().ok_or_else(|| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "node key not added",
        )
    })?;
    api.auth.insert(
        hash,
        Principal {
            account: supplier,
            role: Role::Supplier,
            key_id: key_id.clone(),
            node: Some(Arc::new(NodeScope::new(node_name))),
        },
    );
    Ok(NodeKeyCreated {
        key_id,
        api_key: key,
        node_name: node_name.to_string(),
    })
}

/// `POST /v1/node-keys` `{node_name}` → 201 `{key_id, key, node_name}`.
#[utoipa::path(post, path = "/v1/node-keys", request_body = NodeKeyRequest,
    params(IdempotencyKey),
    responses((status = 201, description = "The node key, shown only here.",
            body = NodeKeyCreated),
        (status = 400, description = "`bad_json`, `invalid_name` (field `node_name`), \
            `invalid_idempotency_key`", body = ErrorBody),
        (status = 403, description = "`forbidden`: not a supplier's account key (node keys \
            manage no keys)", body = ErrorBody),
        (status = 409, description = "`too_many_node_keys` (4,096 per account), \
            `idempotency_conflict`, `idempotency_in_flight`", body = ErrorBody)),
    security(("bearer" = [])), tag = "supplier")]
pub async fn create_node_key(
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
            let r: NodeKeyRequest = parse_json(&bytes)?;
            let created = add_node_key(&api, &p, &r.node_name).await?;
            Ok((StatusCode::CREATED, created))
        })
        .await
}

/// `GET /v1/node-keys` → the caller's node keys (ids and node names, never the keys).
#[utoipa::path(get, path = "/v1/node-keys", responses((status = 200, body = NodeKeyList),
        (status = 403, description = "`forbidden`: not a supplier's account key",
            body = ErrorBody)),
    security(("bearer" = [])), tag = "supplier")]
pub async fn list_node_keys(api: web::Data<Api>, p: Principal) -> ApiResult<HttpResponse> {
    p.require(&[Role::Supplier])?;
    let account = p.account;
    let node_keys = api
        .read(move |m, _| {
            let Some(a) = m.accounts().get(account) else {
                return Vec::new();
            };
            a.node_keys
                .iter()
                .map(|(key_id, name)| NodeKeyView {
                    key_id: key_id.clone(),
                    node_name: name.clone(),
                    node_id: m
                        .engine()
                        .node_by_name(exchange::AccountId(account), name)
                        .map(|n| n.id.0.to_string()),
                })
                .collect::<Vec<_>>()
        })
        .await?;
    Ok(HttpResponse::Ok().json(NodeKeyList { node_keys }))
}

/// `DELETE /v1/node-keys/{key_id}` → `{key_id, revoked: true}`; the key stops working at once.
#[utoipa::path(delete, path = "/v1/node-keys/{key_id}",
    params(("key_id" = String, Path, description = "The node key's id (12 hex digits).",
        pattern = "^[0-9a-f]{12}$")),
    responses((status = 200, description = "Revoked: the key answers 401 from now on.",
            body = KeyRevoked),
        (status = 403, description = "`forbidden`: not a supplier's account key",
            body = ErrorBody),
        (status = 404, description = "`not_found`: no such node key on this account (an \
            account key's id, another supplier's)", body = ErrorBody)),
    security(("bearer" = [])), tag = "supplier")]
pub async fn revoke_node_key(
    api: web::Data<Api>,
    p: Principal,
    key_id: web::Path<String>,
) -> ApiResult<HttpResponse> {
    p.require(&[Role::Supplier])?;
    let key_id = key_id.into_inner();
    let (account, id) = (p.account, key_id.clone());
    let is_node_key = api
        .read(move |m, _| {
            m.accounts()
                .get(account)
                .is_some_and(|a| a.node_of_key(&id).is_some())
        })
        .await?;
    if !is_node_key {
        return Err(ApiError::not_found("node key"));
    }
    let c = api
        .submit_as(
            &p,
            Op::RevokeApiKey {
                account,
                key_id: key_id.clone(),
            },
        )
        .await?;
    if c.outcome.refusal.is_some() {
        // Revoked meanwhile by another request.
        return Err(ApiError::not_found("node key"));
    }
    api.auth.revoke(account, &key_id);
    Ok(HttpResponse::Ok().json(KeyRevoked {
        key_id,
        revoked: true,
    }))
}
