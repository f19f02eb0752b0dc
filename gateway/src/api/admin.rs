//! Admin: accounts, API keys, deposits and payouts (idempotent). Admin keys only.

use crate::accounts::{Role, hash_key, new_key};
use crate::api::auth::Principal;
use crate::api::dto::{AmountRequest, CreateAccountRequest};
use crate::api::error::{ApiError, ApiResult};
use crate::api::openapi::{IdempotencyKey, TransferKey};
use crate::api::views::prelude::*;
use crate::api::views::{AccountList, AccountView};
use crate::api::{Api, parse_json, path_id, read_body};
use crate::market::Op;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use gpux_wire::{
    AccountCreated, AccountCreatedInfo, ErrorBody, KeyCreated, KeyRevoked, TransferDone,
    TransferKindDto,
};

/// Registers the admin routes.
pub fn routes(cfg: &mut web::ServiceConfig) {
    use crate::server::resource;
    cfg.service(
        resource("/admin/accounts")
            .route(web::post().to(create_account))
            .route(web::get().to(list_accounts)),
    )
    .service(resource("/admin/accounts/{id}/keys").route(web::post().to(create_key)))
    .service(resource("/admin/accounts/{id}/keys/{key_id}").route(web::delete().to(revoke_key)))
    .service(resource("/admin/accounts/{id}/deposits").route(web::post().to(deposit)))
    .service(resource("/admin/accounts/{id}/payouts").route(web::post().to(payout)));
}

/// Creates an account with one API key; answers the account and the key (shown only here).
///
/// # Errors
/// 409 `account_exists`, 400 `invalid_name`, 503.
pub async fn create_account_with_key(
    api: &Api,
    by: Option<&Principal>,
    name: &str,
    role: Role,
) -> ApiResult<(u64, String, String)> {
    let key = new_key();
    let hash = hash_key(&key);
    let op = Op::CreateAccount {
        name: name.to_string(),
        role,
        key_hash: Some(hash),
    };
    let c = match by {
        Some(p) => api.submit_as(p, op).await?,
        None => api.submit(op).await?,
    };
    if let Some(r) = &c.outcome.refusal {
        let mut e = ApiError::refusal(r);
        if r.code == "invalid_name" {
            e.status = StatusCode::BAD_REQUEST;
            e.field = Some("name");
        }
        return Err(e);
    }
    let (Some(account), Some(key_id)) = (c.outcome.account, c.outcome.key_id.clone()) else {
        return Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "account or key not created",
        ));
    };
    api.auth.insert(
        hash,
        Principal {
            account,
            role,
            key_id: key_id.clone(),
            node: None,
        },
    );
    Ok((account, key, key_id))
}

async fn add_key(
    api: &Api,
    by: &Principal,
    account: u64,
    role: Role,
) -> ApiResult<(String, String)> {
    let key = new_key();
    let hash = hash_key(&key);
    let c = api
        .submit_as(
            by,
            Op::AddApiKey {
                account,
                key_hash: hash,
            },
        )
        .await?;
    if let Some(r) = &c.outcome.refusal {
        return Err(ApiError::refusal(r));
    }
    let key_id = c.outcome.key_id.clone().unwrap_or_default();
    api.auth.insert(
        hash,
        Principal {
            account,
            role,
            key_id: key_id.clone(),
            node: None,
        },
    );
    Ok((key, key_id))
}

/// `POST /v1/admin/accounts` `{name, role}` → 201 `{account, api_key, key_id}`.
#[utoipa::path(post, path = "/v1/admin/accounts", request_body = CreateAccountRequest,
    params(IdempotencyKey),
    responses(
        (status = 201, description = "The account and its first key (shown only here).",
            body = AccountCreated),
        (status = 400, description = "`bad_json`, `invalid_name`, `invalid_idempotency_key`",
            body = ErrorBody),
        (status = 409, description = "`account_exists`, `idempotency_conflict`, \
            `idempotency_in_flight`", body = ErrorBody)),
    security(("bearer" = [])), tag = "admin")]
pub async fn create_account(
    api: web::Data<Api>,
    p: Principal,
    req: HttpRequest,
    body: web::Payload,
) -> ApiResult<HttpResponse> {
    p.require(&[Role::Admin])?;
    let bytes = read_body(&req, body).await?;
    let key = crate::api::idempotency::key_of(&req)?;
    api.idem
        .run(&req, p.account, key, &bytes, async {
            let r: CreateAccountRequest = parse_json(&bytes)?;
            let (id, key, key_id) =
                create_account_with_key(&api, Some(&p), &r.name, r.role).await?;
            Ok((
                StatusCode::CREATED,
                AccountCreated {
                    account: AccountCreatedInfo {
                        id: id.to_string(),
                        name: r.name,
                        role: r.role,
                    },
                    api_key: key,
                    key_id,
                },
            ))
        })
        .await
}

/// `GET /v1/admin/accounts`.
#[utoipa::path(get, path = "/v1/admin/accounts",
    responses((status = 200, description = "Every account.", body = AccountList)),
    security(("bearer" = [])), tag = "admin")]
pub async fn list_accounts(api: web::Data<Api>, p: Principal) -> ApiResult<HttpResponse> {
    p.require(&[Role::Admin])?;
    let v = api
        .read(|m, _| m.accounts().iter().map(AccountView::of).collect::<Vec<_>>())
        .await?;
    Ok(HttpResponse::Ok().json(AccountList { accounts: v }))
}

async fn account_role(api: &Api, id: u64) -> ApiResult<Role> {
    api.read(move |m, _| m.accounts().get(id).map(|a| a.role))
        .await?
        .ok_or_else(|| ApiError::not_found("account"))
}

/// `POST /v1/admin/accounts/{id}/keys` → 201 `{api_key, key_id}`.
#[utoipa::path(post, path = "/v1/admin/accounts/{id}/keys",
    params(("id" = String, Path, description = "Account id.", pattern = "^[0-9]{1,20}$"),
        IdempotencyKey),
    responses(
        (status = 201, description = "A new key of the account (shown only here).",
            body = KeyCreated),
        (status = 400, description = "`invalid_idempotency_key`", body = ErrorBody),
        (status = 404, description = "`not_found`: no account with this id", body = ErrorBody),
        (status = 409, description = "`too_many_keys` (the account holds 16), `key_exists`, \
            `idempotency_conflict`, `idempotency_in_flight`", body = ErrorBody)),
    security(("bearer" = [])), tag = "admin")]
pub async fn create_key(
    api: web::Data<Api>,
    p: Principal,
    id: web::Path<String>,
    req: HttpRequest,
) -> ApiResult<HttpResponse> {
    p.require(&[Role::Admin])?;
    let id = path_id(&id, "account")?;
    let key = crate::api::idempotency::key_of(&req)?;
    api.idem
        .run(&req, p.account, key, b"", async {
            let role = account_role(&api, id).await?;
            let (key, key_id) = add_key(&api, &p, id, role).await?;
            Ok((
                StatusCode::CREATED,
                KeyCreated {
                    api_key: key,
                    key_id,
                },
            ))
        })
        .await
}

/// `DELETE /v1/admin/accounts/{id}/keys/{key_id}`.
#[utoipa::path(delete, path = "/v1/admin/accounts/{id}/keys/{key_id}",
    params(("id" = String, Path, description = "Account id.", pattern = "^[0-9]{1,20}$"),
        ("key_id" = String, Path, description = "The key's id (12 hex digits).",
            pattern = "^[0-9a-f]{12}$")),
    responses((status = 200, description = "Revoked: the key answers 401 from now on.",
            body = KeyRevoked),
        (status = 404, description = "`not_found` (an account id that is no id), \
            `unknown_account`, `unknown_key`", body = ErrorBody)),
    security(("bearer" = [])), tag = "admin")]
pub async fn revoke_key(
    api: web::Data<Api>,
    p: Principal,
    path: web::Path<(String, String)>,
) -> ApiResult<HttpResponse> {
    p.require(&[Role::Admin])?;
    let (id, key_id) = path.into_inner();
    let id = path_id(&id, "account")?;
    let c = api
        .submit_as(
            &p,
            Op::RevokeApiKey {
                account: id,
                key_id: key_id.clone(),
            },
        )
        .await?;
    if let Some(r) = &c.outcome.refusal {
        return Err(ApiError::refusal(r));
    }
    api.auth.revoke(id, &key_id);
    Ok(HttpResponse::Ok().json(KeyRevoked {
        key_id,
        revoked: true,
    }))
}

async fn transfer(
    api: &Api,
    p: &Principal,
    id: &str,
    req: &HttpRequest,
    body: web::Payload,
    payout: bool,
) -> ApiResult<HttpResponse> {
    p.require(&[Role::Admin])?;
    let id = path_id(id, "account")?;
    let bytes = read_body(req, body).await?;
    let key = crate::api::idempotency::required_key_of(req, "deposits and payouts")?;
    api.idem
        .run(req, p.account, Some(key.clone()), &bytes, async {
            let r: AmountRequest = parse_json(&bytes)?;
            // At most 2 decimals written (`1.000` too), as the schema's pattern says.
            if r.amount.0 <= rust_decimal::Decimal::ZERO || r.amount.0.scale() > 2 {
                return Err(ApiError::invalid(
                    "amount",
                    "invalid_amount",
                    "amount is CNY > 0 with at most 2 decimals",
                ));
            }
            let role = account_role(api, id).await?;
            let want = if payout { Role::Supplier } else { Role::Buyer };
            if role != want {
                return Err(ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "wrong_role",
                    format!(
                        "{} go to {} accounts; account {id} is a {}",
                        if payout { "payouts" } else { "deposits" },
                        want.as_str(),
                        role.as_str()
                    ),
                ));
            }
            // Ledger keys are global: scope the header's key by account.
            let ledger_key = format!("{id}:{key}");
            let op = if payout {
                Op::Payout {
                    key: ledger_key,
                    supplier: id,
                    amount: r.amount.0,
                }
            } else {
                Op::Deposit {
                    key: ledger_key,
                    buyer: id,
                    amount: r.amount.0,
                }
            };
            let c = api.submit_as(p, op).await?;
            if let Some(refusal) = &c.outcome.refusal {
                let mut e = ApiError::refusal(refusal);
                if refusal.code == "ledger_rejected" {
                    e.status = StatusCode::UNPROCESSABLE_ENTITY;
                }
                return Err(e);
            }
            let balance = api
                .read(move |m, _| {
                    let acct = if payout {
                        settlement::Account::Supplier(settlement::AccountId(id))
                    } else {
                        settlement::Account::Buyer(settlement::AccountId(id))
                    };
                    crate::api::views::money(m.ledger().balance(acct))
                })
                .await?;
            Ok((
                StatusCode::CREATED,
                TransferDone {
                    account_id: id.to_string(),
                    amount: crate::api::views::money(r.amount.0),
                    kind: if payout {
                        TransferKindDto::Payout
                    } else {
                        TransferKindDto::Deposit
                    },
                    seq: c.seq,
                    balance_after: balance,
                },
            ))
        })
        .await
}

/// `POST /v1/admin/accounts/{id}/deposits` `{amount}` (buyer; `Idempotency-Key` required).
#[utoipa::path(post, path = "/v1/admin/accounts/{id}/deposits", request_body = AmountRequest,
    params(("id" = String, Path, description = "The buyer's account id.",
        pattern = "^[0-9]{1,20}$"), TransferKey),
    responses(
        (status = 201, description = "Deposited.", body = TransferDone),
        (status = 400, description = "`bad_json`, `invalid_amount`, \
            `missing_idempotency_key`, `invalid_idempotency_key`", body = ErrorBody),
        (status = 404, description = "`not_found`: no account with this id", body = ErrorBody),
        (status = 409, description = "`idempotency_conflict` (this key named another \
            transfer), `idempotency_in_flight`", body = ErrorBody),
        (status = 422, description = "`wrong_role` (not a buyer's account), `ledger_rejected`",
            body = ErrorBody)),
    security(("bearer" = [])), tag = "admin")]
pub async fn deposit(
    api: web::Data<Api>,
    p: Principal,
    id: web::Path<String>,
    req: HttpRequest,
    body: web::Payload,
) -> ApiResult<HttpResponse> {
    transfer(&api, &p, &id, &req, body, false).await
}

/// `POST /v1/admin/accounts/{id}/payouts` `{amount}` (supplier; `Idempotency-Key` required).
#[utoipa::path(post, path = "/v1/admin/accounts/{id}/payouts", request_body = AmountRequest,
    params(("id" = String, Path, description = "The supplier's account id.",
        pattern = "^[0-9]{1,20}$"), TransferKey),
    responses(
        (status = 201, description = "Paid out.", body = TransferDone),
        (status = 400, description = "`bad_json`, `invalid_amount`, \
            `missing_idempotency_key`, `invalid_idempotency_key`", body = ErrorBody),
        (status = 404, description = "`not_found`: no account with this id", body = ErrorBody),
        (status = 409, description = "`idempotency_conflict` (this key named another \
            transfer), `idempotency_in_flight`", body = ErrorBody),
        (status = 422, description = "`wrong_role` (not a supplier's account), \
            `ledger_rejected` (more than the payable balance)", body = ErrorBody)),
    security(("bearer" = [])), tag = "admin")]
pub async fn payout(
    api: web::Data<Api>,
    p: Principal,
    id: web::Path<String>,
    req: HttpRequest,
    body: web::Payload,
) -> ApiResult<HttpResponse> {
    transfer(&api, &p, &id, &req, body, true).await
}
