//! Buyer REST (the websocket offers the same commands): bids, leases, balance. Buyer keys,
//! except `GET /v1/leases` which a supplier also calls for the leases on its own nodes.

use crate::accounts::Role;
use crate::api::auth::Principal;
use crate::api::dto::{BidRequest, close_reason_dto, kind_dto, price_str};
use crate::api::error::{ApiError, ApiResult};
use crate::api::openapi::IdempotencyKey;
use crate::api::views::prelude::*;
use crate::api::views::{BalanceView, BidList, BidView, LeaseList, LeaseView};
use crate::api::{Api, engine_output, parse_json, path_id, read_body};
use crate::market::Op;
use crate::placements::{PlacedStatus, Placement, Placements};
use crate::sequencer::Committed;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use exchange::{AccountId, BidId, Command, LeaseId};
use gpux_wire::{
    BidCanceled, BidPlaced, BidReleased, BidStatusDto, BidsCanceled, ErrorBody, FillView,
    LeaseReleased,
};

/// Registers the buyer routes.
pub fn routes(cfg: &mut web::ServiceConfig) {
    use crate::server::resource;
    cfg.service(
        resource("/bids")
            .route(web::post().to(post_bid))
            .route(web::get().to(list_bids))
            .route(web::delete().to(cancel_all)),
    )
    .service(
        resource("/bids/{id}")
            .route(web::get().to(get_bid))
            .route(web::delete().to(cancel_bid)),
    )
    .service(resource("/leases").route(web::get().to(list_leases)))
    .service(resource("/leases/{id}").route(web::get().to(get_lease)))
    .service(resource("/leases/{id}/release").route(web::post().to(release_lease)))
    .service(resource("/bids/{id}/release").route(web::post().to(release_bid)))
    .service(resource("/balance").route(web::get().to(balance)));
}

/// What placing a bid did ([`BidPlaced`]): its status is `filled`, `resting` or `closed` (IOC
/// remainder or nothing filled: see `close_reason`), with its fills.
///
/// # Errors
/// The pre-trade refusal (`insufficient_funds`) or the engine's rejection.
pub fn bid_placed(c: &Committed, client_order_id: &str) -> ApiResult<BidPlaced> {
    let out = engine_output(c)?;
    Ok(
        match Placement::from_events(&out.events, c.seq, c.timestamp_ms, [0; 32]) {
            Some(p) => placed_view(&p, client_order_id, crate::feed::op_bid_shape(&c.op)),
            None => BidPlaced {
                bid_id: None,
                client_order_id: client_order_id.to_string(),
                seq: c.seq,
                status: BidStatusDto::Resting,
                filled_gpus: 0,
                remaining_gpus: 0,
                close_reason: None,
                close_detail: None,
                fills: Vec::new(),
            },
        },
    )
}

/// A placement as the wire answers it.
fn placed_view(
    p: &Placement,
    client_order_id: &str,
    shape: Option<(exchange::Placement, Option<u32>)>,
) -> BidPlaced {
    BidPlaced {
        bid_id: Some(p.bid.0.to_string()),
        client_order_id: client_order_id.to_string(),
        seq: p.seq,
        status: match p.status {
            PlacedStatus::Resting => BidStatusDto::Resting,
            PlacedStatus::Filled => BidStatusDto::Filled,
            PlacedStatus::Closed => BidStatusDto::Closed,
        },
        filled_gpus: p.filled_gpus,
        remaining_gpus: p.remaining_gpus,
        close_reason: p.close_reason.map(close_reason_dto),
        close_detail: p.close_reason.and_then(|r| {
            crate::wire_conv::close_detail_view_for(r, p.close_detail.unwrap_or_default(), shape)
        }),
        fills: p
            .fills
            .iter()
            .map(|f| FillView {
                lease_id: f.lease.0.to_string(),
                node_id: f.node.0.to_string(),
                gpus: f.gpus,
                price: price_str(f.price),
                kind: kind_dto(f.kind),
                start_ms: f.start_ms,
                end_ms: f.end_ms,
            })
            .collect(),
    }
}

/// Places a bid for `buyer` (shared by REST and the websocket): 201 with what it did, or 200
/// with the first answer when the same bid was placed before (a re-send after a timeout or a
/// lost answer, on this process or another: the buyer's client order id with the same terms,
/// while the id is remembered, docs/api.md "Bids").
///
/// # Errors
/// 400 for invalid input, 422 `insufficient_funds`, the engine's rejection (409
/// `duplicate_client_order_id` for an id used with other terms), 503.
pub async fn placed_bid(
    api: &Api,
    buyer: u64,
    r: &BidRequest,
) -> ApiResult<(StatusCode, BidPlaced)> {
    let spec = r.to_spec(&api.catalog)?;
    let launch = r.launch.as_ref().map(|l| l.to_spec()).transpose()?;
    let trust = trust_of(&r.constraints)?;
    if !trust.is_none() {
        if api.delivery && launch.is_none() {
            return Err(ApiError::invalid(
                "launch",
                "launch_required",
                "this market delivers leases: say what they run in `launch` (at least one SSH key, or an image with ports)",
            ));
        }
        return place(
            api,
            buyer,
            r,
            Op::PlaceTrustBid {
                account: buyer,
                bid: spec,
                launch: launch.map(Box::new),
                trust,
            },
        )
        .await;
    }
    let op = match launch {
        Some(launch) => Op::PlaceBid {
            account: buyer,
            bid: spec,
            launch: Box::new(launch),
        },
        None if api.delivery => {
            return Err(ApiError::invalid(
                "launch",
                "launch_required",
                "this market delivers leases: say what they run in `launch` (at least one SSH key, or an image with ports)",
            ));
        }
        None => Op::Engine(Command::PlaceBid {
            account: AccountId(buyer),
            bid: spec,
        }),
    };
    place(api, buyer, r, op).await
}

/// The trust requirements of a bid's constraints (issue 26): 400 `invalid_constraints`
/// naming `constraints.min_reliability` unless it is a decimal in 0..=1 with at most 4
/// places.
fn trust_of(c: &gpux_wire::ConstraintsDto) -> ApiResult<exchange::TrustConstraints> {
    let min_reliability_bp = match &c.min_reliability {
        None => None,
        Some(s) => Some(parse_ratio_bp(s).ok_or_else(|| {
            ApiError::invalid(
                "constraints.min_reliability",
                "invalid_constraints",
                "min_reliability is a decimal from \"0\" to \"1\" with at most 4 places \
                 (\"0.99\": nodes delivering at least 99 % of their committed lease time)",
            )
        })?),
    };
    let min_sla = c.min_sla.as_ref().map(min_sla_of).transpose()?;
    Ok(exchange::TrustConstraints {
        verified: c.verified,
        min_reliability_bp,
        min_sla,
    })
}

/// A bid's `constraints.min_sla` (docs/market-rules.md §12.4): 422 `invalid_constraints`
/// naming the part out of bounds (availability 90.00..=99.99 %, multiple 1..=50), or
/// `constraints.min_sla` when neither part is given.
pub fn min_sla_of(m: &gpux_wire::MinSlaDto) -> ApiResult<exchange::SlaFloor> {
    let invalid = |field, message: &str| {
        Err(ApiError {
            status: actix_web::http::StatusCode::UNPROCESSABLE_ENTITY,
            ..ApiError::invalid(field, "invalid_constraints", message.to_string())
        })
    };
    let availability_bp = match &m.availability {
        None => 0,
        Some(a) => match crate::api::dto::availability_bp(a) {
            Some(bp) => u32::from(bp),
            None => {
                return invalid(
                    "constraints.min_sla.availability",
                    "min_sla.availability is a percentage 90.00..=99.99 with at most 2 \
                     decimals (\"99.9\": offers promising at least 99.9 % a month)",
                );
            }
        },
    };
    let credit_multiple = match m.credit_multiple {
        None => 0,
        Some(x) if (1..=exchange::limits::MAX_SLA_MULTIPLE).contains(&x) => x,
        Some(_) => {
            return invalid(
                "constraints.min_sla.credit_multiple",
                "min_sla.credit_multiple is a whole number 1..=50 (offers crediting at least \
                 that multiple of the outage charge)",
            );
        }
    };
    if m.availability.is_none() && m.credit_multiple.is_none() {
        return invalid(
            "constraints.min_sla",
            "min_sla names availability, credit_multiple or both (an empty floor requires \
             nothing: leave min_sla out)",
        );
    }
    Ok(exchange::SlaFloor {
        availability_bp,
        credit_multiple,
    })
}

/// `"0.99"` → 9900 basis points; `None` unless a plain decimal in 0..=1 with at most 4
/// places.
pub fn parse_ratio_bp(s: &str) -> Option<u32> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if int.is_empty()
        || int.len() > 1
        || frac.len() > 4
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
        || (s.contains('.') && frac.is_empty())
    {
        return None;
    }
    let whole: u32 = int.parse().ok()?;
    let part: u32 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<4}").parse().ok()?
    };
    let bp = whole * 10_000 + part;
    (bp <= 10_000).then_some(bp)
}

/// Journals a bid operation and answers it as [`placed_bid`] does.
async fn place(
    api: &Api,
    buyer: u64,
    r: &BidRequest,
    op: Op,
) -> ApiResult<(StatusCode, BidPlaced)> {
    let digest = Placements::digest(&op);
    let c = api.submit(op).await?;
    match bid_placed(&c, &r.client_order_id) {
        // Say the limit and the way round it (issue 25: "rejected by the exchange: invalid
        // gpus" left the buyer guessing).
        Err(e)
            if e.code == "invalid_gpus"
                && r.placement == gpux_wire::PlacementDto::SingleNode
                && r.gpus.is_some_and(|g| g > exchange::limits::MAX_NODE_GPUS) =>
        {
            Err(ApiError {
                message: format!(
                    "a single_node bid takes at most {} GPUs (one node holds at most {}); \
                     for {} GPUs place it with placement \"spread\" (gpux bid --placement \
                     spread), which fills them across nodes",
                    exchange::limits::MAX_NODE_GPUS,
                    exchange::limits::MAX_NODE_GPUS,
                    r.gpus.unwrap_or_default()
                ),
                ..e
            })
        }
        Err(e) if e.code == "duplicate_client_order_id" => {
            let coid = r.client_order_id.clone();
            let first = api
                .read(move |m, _| m.placement(buyer, &coid).cloned())
                .await?;
            match first {
                Some(p) if p.digest == digest => {
                    let shape = crate::api::dto::bid_shape(r).ok().map(|(pl, _, m)| (pl, m));
                    Ok((StatusCode::OK, placed_view(&p, &r.client_order_id, shape)))
                }
                Some(p) => Err(ApiError {
                    message: format!(
                        "client_order_id {:?} was used for bid {} with other terms; use a new \
                         client_order_id for a new bid",
                        r.client_order_id, p.bid.0
                    ),
                    ..e
                }),
                None => Err(e),
            }
        }
        other => Ok((StatusCode::CREATED, other?)),
    }
}

/// `POST /v1/bids` → 201 with what the bid did.
#[utoipa::path(post, path = "/v1/bids", request_body = BidRequest, params(IdempotencyKey),
    responses(
        (status = 201, description = "Accepted: filled, resting or closed (an IOC remainder, or \
            nothing filled: see `close_reason`).", body = BidPlaced),
        (status = 200, description = "The same bid re-sent (the buyer's client order id with \
            the same terms, within 24 h): what placing it did, as first answered.",
            body = BidPlaced),
        (status = 400, description = "`bad_json`, `unknown_sku`, `invalid_price`, \
            `invalid_jurisdiction`, `invalid_launch`, `launch_required` (the market delivers \
            leases), `invalid_idempotency_key`", body = ErrorBody),
        (status = 409, description = "`duplicate_client_order_id`, `idempotency_conflict`, \
            `idempotency_in_flight`", body = ErrorBody),
        (status = 422, description = "`insufficient_funds`; a rule of the market: \
            `invalid_gpus` (a single-node bid over 16 GPUs; `gpus` missing on a bid that is no \
            gang; `min_gpus` on another placement than spread, on a GTC bid or above `gpus`), \
            `invalid_gang` (`placement: gang` without `gang`, `gang` on another placement, \
            more than 1024 GPUs, `gpus` not nodes × gpus_per_node), `invalid_expiry` (on an \
            IOC bid, or not after now), `unknown_region` (a region without nodes)",
            body = ErrorBody)),
    security(("bearer" = [])), tag = "buyer")]
pub async fn post_bid(
    api: web::Data<Api>,
    p: Principal,
    req: HttpRequest,
    body: web::Payload,
) -> ApiResult<HttpResponse> {
    p.require(&[Role::Buyer])?;
    let bytes = read_body(&req, body).await?;
    let key = crate::api::idempotency::key_of(&req)?;
    api.idem
        .run(&req, p.account, key, &bytes, async {
            let r: BidRequest = parse_json(&bytes)?;
            placed_bid(&api, p.account, &r).await
        })
        .await
}

/// `GET /v1/bids` → the caller's resting bids.
#[utoipa::path(get, path = "/v1/bids",
    responses((status = 200, description = "The caller's resting bids.", body = BidList)),
    security(("bearer" = [])), tag = "buyer")]
pub async fn list_bids(api: web::Data<Api>, p: Principal) -> ApiResult<HttpResponse> {
    p.require(&[Role::Buyer])?;
    let account = p.account;
    let bids = api
        .read(move |m, _| {
            m.engine()
                .bids()
                .filter(|b| b.buyer.0 == account)
                .map(|b| BidView::of(m.engine(), b, m.client_order_id(b.id).map(String::from)))
                .collect::<Vec<_>>()
        })
        .await?;
    Ok(HttpResponse::Ok().json(BidList { bids }))
}

/// `GET /v1/bids/{id}` (resting bids; a closed bid is 404).
#[utoipa::path(get, path = "/v1/bids/{id}",
    params(("id" = String, Path, description = "Bid id.", pattern = "^[0-9]{1,20}$")),
    responses((status = 200, description = "The resting bid.", body = BidView),
        (status = 404, description = "`not_found`: no resting bid of the caller's with this id \
            (closed, another buyer's, or none)", body = ErrorBody)),
    security(("bearer" = [])), tag = "buyer")]
pub async fn get_bid(
    api: web::Data<Api>,
    p: Principal,
    id: web::Path<String>,
) -> ApiResult<HttpResponse> {
    p.require(&[Role::Buyer])?;
    let id = path_id(&id, "bid")?;
    let account = p.account;
    let v = api
        .read(move |m, _| {
            m.engine()
                .bid(BidId(id))
                .filter(|b| b.buyer.0 == account)
                .map(|b| BidView::of(m.engine(), b, m.client_order_id(b.id).map(String::from)))
        })
        .await?
        .ok_or_else(|| ApiError::not_found("bid"))?;
    Ok(HttpResponse::Ok().json(v))
}

/// Cancels one resting bid of `buyer`.
///
/// # Errors
/// 404 for an unknown or another buyer's bid; 503.
pub async fn canceled_bid(api: &Api, buyer: u64, bid: u64) -> ApiResult<BidCanceled> {
    let c = api
        .submit(Op::Engine(Command::CancelBid {
            account: AccountId(buyer),
            bid: BidId(bid),
        }))
        .await?;
    engine_output(&c)?;
    Ok(BidCanceled {
        bid_id: bid.to_string(),
        canceled: true,
        seq: c.seq,
    })
}

/// Cancels every resting bid of `buyer`; answers the ids canceled.
///
/// # Errors
/// 503.
pub async fn canceled_bids(api: &Api, buyer: u64) -> ApiResult<BidsCanceled> {
    let ids = api
        .read(move |m, _| {
            m.engine()
                .bids()
                .filter(|b| b.buyer.0 == buyer)
                .map(|b| b.id.0)
                .collect::<Vec<_>>()
        })
        .await?;
    let mut canceled = Vec::new();
    for id in ids {
        // A bid may fill or expire between the read and the cancel: that is not an error.
        if canceled_bid(api, buyer, id).await.is_ok() {
            canceled.push(id.to_string());
        }
    }
    Ok(BidsCanceled { canceled })
}

/// `DELETE /v1/bids/{id}`.
#[utoipa::path(delete, path = "/v1/bids/{id}",
    params(("id" = String, Path, description = "Bid id.", pattern = "^[0-9]{1,20}$")),
    responses((status = 200, description = "Canceled.", body = BidCanceled),
        (status = 404, description = "`not_found`: no resting bid of the caller's with this id",
            body = ErrorBody)),
    security(("bearer" = [])), tag = "buyer")]
pub async fn cancel_bid(
    api: web::Data<Api>,
    p: Principal,
    id: web::Path<String>,
) -> ApiResult<HttpResponse> {
    p.require(&[Role::Buyer])?;
    let id = path_id(&id, "bid")?;
    Ok(HttpResponse::Ok().json(canceled_bid(&api, p.account, id).await?))
}

/// `DELETE /v1/bids` → cancel all of the caller's resting bids.
#[utoipa::path(delete, path = "/v1/bids",
    responses((status = 200, description = "The ids of the bids canceled.", body = BidsCanceled)),
    security(("bearer" = [])), tag = "buyer")]
pub async fn cancel_all(api: web::Data<Api>, p: Principal) -> ApiResult<HttpResponse> {
    p.require(&[Role::Buyer])?;
    Ok(HttpResponse::Ok().json(canceled_bids(&api, p.account).await?))
}

/// Whether the caller is the buyer of a lease, or the supplier of its node (a node key: of
/// that node only).
fn owns(p: &Principal, m: &crate::market::Market, r: &crate::delivery::LeaseRecord) -> bool {
    match p.role {
        Role::Buyer => r.buyer.0 == p.account,
        Role::Supplier => {
            r.supplier.0 == p.account && m.engine().node(r.node).is_some_and(|n| p.may_see_node(n))
        }
        _ => false,
    }
}

/// Leases on one page of `GET /v1/leases` by default.
pub const DEFAULT_LEASE_PAGE: usize = 100;
/// Most leases on one page of `GET /v1/leases`.
pub const MAX_LEASE_PAGE: usize = 500;

/// Which leases `GET /v1/leases` lists.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LeaseStateFilter {
    /// Pending, provisioning and active leases (the default).
    #[default]
    Live,
    /// Ended leases: the history, with end reason, billed seconds, charge, SLA credit and
    /// teardown record.
    Ended,
    /// Both.
    All,
    /// Ended leases whose GPUs still wait to be wiped (a supplier's to-do list).
    Wiping,
}

/// Query of `GET /v1/leases`.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct LeaseQuery {
    /// `live` (default), `ended`, `all` or `wiping` (ended, GPUs not yet wiped).
    #[param(inline)]
    pub state: Option<LeaseStateFilter>,
    /// Only leases running (start to end) at or after this time, ms since epoch.
    pub from_ms: Option<i64>,
    /// Only leases that started before this time, ms since epoch.
    pub to_ms: Option<i64>,
    /// The `next_cursor` of the previous page (a lease id).
    #[param(
        pattern = "^(?:[0-9]{1,19}|0[0-9]{19}|1[0-7][0-9]{18}|18[0-3][0-9]{17}|184[0-3][0-9]{16}|1844[0-5][0-9]{15}|18446[0-6][0-9]{14}|184467[0-3][0-9]{13}|1844674[0-3][0-9]{12}|184467440[0-6][0-9]{10}|1844674407[0-2][0-9]{9}|18446744073[0-6][0-9]{8}|1844674407370[0-8][0-9]{6}|18446744073709[0-4][0-9]{5}|184467440737095[0-4][0-9]{4}|18446744073709550[0-9]{3}|18446744073709551[0-5][0-9]{2}|1844674407370955160[0-9]|1844674407370955161[0-4]|18446744073709551615)$"
    )]
    pub cursor: Option<String>,
    /// Leases per page, 1..=500 (default 100).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<usize>,
}

/// `GET /v1/leases?state=&from_ms=&to_ms=&cursor=&limit=` → `{leases, next_cursor}`, newest
/// first: a buyer's own leases, or those on a supplier's nodes. Ended leases stay readable.
#[utoipa::path(get, path = "/v1/leases", params(LeaseQuery),
    responses((status = 200, description = "A page of leases, newest first.", body = LeaseList),
        (status = 400, description = "`bad_query` (an unknown or malformed parameter), \
            `invalid_query` (`limit` outside 1..=500, a `cursor` that is no lease id)",
            body = ErrorBody)),
    security(("bearer" = [])), tag = "buyer")]
pub async fn list_leases(
    api: web::Data<Api>,
    p: Principal,
    q: web::Query<LeaseQuery>,
) -> ApiResult<HttpResponse> {
    p.require(&[Role::Buyer, Role::Supplier])?;
    let limit = q.limit.unwrap_or(DEFAULT_LEASE_PAGE);
    if limit == 0 || limit > MAX_LEASE_PAGE {
        return Err(ApiError::invalid(
            "limit",
            "invalid_query",
            format!("limit is 1..={MAX_LEASE_PAGE}"),
        ));
    }
    let cursor = match &q.cursor {
        None => None,
        Some(c) => Some(LeaseId(crate::api::dto::parse_id(c).ok_or_else(|| {
            ApiError::invalid("cursor", "invalid_query", "not a cursor from this endpoint")
        })?)),
    };
    let state = q.state.unwrap_or_default();
    let (from_ms, to_ms) = (q.from_ms, q.to_ms);
    let supplier = p.role == Role::Supplier;
    let account = AccountId(p.account);
    let (leases, next) = api
        .read(move |m, _| {
            let mut out = Vec::new();
            let mut next = None;
            for r in m.deliveries().of_account(account, supplier, cursor) {
                let ended = r.ended.is_some();
                let wanted = match state {
                    LeaseStateFilter::Live => !ended,
                    LeaseStateFilter::Ended => ended,
                    LeaseStateFilter::All => true,
                    LeaseStateFilter::Wiping => r
                        .wipe
                        .as_ref()
                        .is_some_and(|w| w.torn_down_ms.is_none() && !w.overdue),
                };
                let until = r.ended.map_or(r.end_ms, |e| e.1);
                if !wanted
                    || from_ms.is_some_and(|f| until < f)
                    || to_ms.is_some_and(|t| r.start_ms >= t)
                {
                    continue;
                }
                if out.len() == limit {
                    next = out.last().map(|v: &LeaseView| v.id.clone());
                    break;
                }
                out.push(if supplier {
                    crate::api::views::supplier_lease_view(m, r)
                } else {
                    LeaseView::of_record(m, r)
                });
            }
            (out, next)
        })
        .await?;
    Ok(HttpResponse::Ok().json(LeaseList {
        leases,
        next_cursor: next,
    }))
}

/// `GET /v1/leases/{id}`: live or ended, for its buyer or the supplier of its node.
#[utoipa::path(get, path = "/v1/leases/{id}",
    params(("id" = String, Path, description = "Lease id.", pattern = "^[0-9]{1,20}$")),
    responses((status = 200, description = "The lease, live or ended.", body = LeaseView),
        (status = 404, description = "`not_found`: no lease of the caller's (as its buyer, or \
            the supplier of its node) with this id", body = ErrorBody)),
    security(("bearer" = [])), tag = "buyer")]
pub async fn get_lease(
    api: web::Data<Api>,
    p: crate::api::auth::ScopedPrincipal,
    id: web::Path<String>,
) -> ApiResult<HttpResponse> {
    p.require(&[Role::Buyer, Role::Supplier])?;
    let id = path_id(&id, "lease")?;
    let p = p.0;
    let v = api
        .read(move |m, _| {
            m.deliveries()
                .record(LeaseId(id))
                .filter(|r| owns(&p, m, r))
                .map(|r| {
                    if r.supplier.0 == p.account && p.role == Role::Supplier {
                        crate::api::views::supplier_lease_view(m, r)
                    } else {
                        LeaseView::of_record(m, r)
                    }
                })
        })
        .await?
        .ok_or_else(|| ApiError::not_found("lease"))?;
    Ok(HttpResponse::Ok().json(v))
}

/// Releases one of `buyer`'s leases now.
///
/// # Errors
/// 404 for an unknown or another buyer's lease; 409 `lease_ended` (saying when and why) for
/// one of the buyer's leases that has already ended (issue 25: it answered 404, as if the
/// lease never existed); 503.
pub async fn released_lease(api: &Api, buyer: u64, lease: u64) -> ApiResult<LeaseReleased> {
    let c = api
        .submit(Op::Engine(Command::ReleaseLease {
            account: AccountId(buyer),
            lease: LeaseId(lease),
        }))
        .await?;
    if let Err(e) = engine_output(&c) {
        let e = crate::api::delivery::ended_lease_error(api, lease, e, move |r| r.buyer.0 == buyer)
            .await?;
        return Err(ApiError {
            message: if e.code == "lease_ended" {
                format!("{}: nothing to release", e.message)
            } else {
                e.message
            },
            ..e
        });
    }
    Ok(LeaseReleased {
        lease_id: lease.to_string(),
        released: true,
        at_ms: c.timestamp_ms,
        seq: c.seq,
    })
}

/// `POST /v1/leases/{id}/release`.
#[utoipa::path(post, path = "/v1/leases/{id}/release",
    params(("id" = String, Path, description = "Lease id.", pattern = "^[0-9]{1,20}$")),
    responses((status = 200, description = "Released: billing ends now.", body = LeaseReleased),
        (status = 404, description = "`not_found`: no lease of the caller's with this id \
            (another buyer's, or none)", body = ErrorBody),
        (status = 409, description = "`lease_ended`: the lease has already ended (the \
            message says when and why)", body = ErrorBody)),
    security(("bearer" = [])), tag = "buyer")]
pub async fn release_lease(
    api: web::Data<Api>,
    p: Principal,
    id: web::Path<String>,
) -> ApiResult<HttpResponse> {
    p.require(&[Role::Buyer])?;
    let id = path_id(&id, "lease")?;
    Ok(HttpResponse::Ok().json(released_lease(&api, p.account, id).await?))
}

/// Releases every live lease of one of `buyer`'s bids now and cancels its resting rest
/// (docs/market-rules.md §13.6): a whole gang at once.
///
/// # Errors
/// 404 for an unknown or another buyer's bid, or one with neither a live lease nor a rest;
/// 503.
pub async fn released_bid(api: &Api, buyer: u64, bid: u64) -> ApiResult<BidReleased> {
    let c = api
        .submit(Op::Engine(Command::ReleaseBid {
            account: AccountId(buyer),
            bid: BidId(bid),
        }))
        .await?;
    let out = engine_output(&c).map_err(|e| ApiError {
        message: if e.code == "not_found" {
            "no such bid on this account with a live lease or a resting rest (`gpux leases` \
             lists your leases with their bid ids)"
                .into()
        } else {
            e.message
        },
        ..e
    })?;
    let mut released: Vec<u64> = Vec::new();
    let mut canceled = false;
    for e in &out.events {
        match e {
            exchange::Event::LeaseEnded {
                lease,
                reason: exchange::EndReason::Released,
                ..
            } => released.push(lease.0),
            exchange::Event::BidClosed {
                bid: b,
                reason: exchange::BidCloseReason::Canceled,
                ..
            } if b.0 == bid => canceled = true,
            _ => {}
        }
    }
    released.sort_unstable();
    Ok(BidReleased {
        bid_id: bid.to_string(),
        released: released.into_iter().map(|l| l.to_string()).collect(),
        canceled,
        at_ms: c.timestamp_ms,
        seq: c.seq,
    })
}

/// `POST /v1/bids/{id}/release`: ends every live lease of the bid (a gang's members, a
/// spread bid's leases, failover replacements included), `released` now, and cancels its
/// resting rest.
#[utoipa::path(post, path = "/v1/bids/{id}/release",
    params(("id" = String, Path, description = "Bid id.", pattern = "^[0-9]{1,20}$")),
    responses((status = 200, description = "Released: billing of every lease ends now.",
            body = BidReleased),
        (status = 404, description = "`not_found`: no bid of the caller's with this id that \
            has a live lease or a resting rest (another buyer's, or none)", body = ErrorBody)),
    security(("bearer" = [])), tag = "buyer")]
pub async fn release_bid(
    api: web::Data<Api>,
    p: Principal,
    id: web::Path<String>,
) -> ApiResult<HttpResponse> {
    p.require(&[Role::Buyer])?;
    let id = path_id(&id, "bid")?;
    Ok(HttpResponse::Ok().json(released_bid(&api, p.account, id).await?))
}

/// A buyer's balance view now.
///
/// # Errors
/// 503.
pub async fn balance_of(api: &Api, buyer: u64) -> ApiResult<BalanceView> {
    let now = crate::api::now_ms();
    api.read(move |m, _| BalanceView::of(m, buyer, now.max(m.last_timestamp_ms())))
        .await
}

/// `GET /v1/balance` → balance, available, held by bids, burn rate, runway.
#[utoipa::path(get, path = "/v1/balance",
    responses((status = 200, description = "The caller's balance now.", body = BalanceView)),
    security(("bearer" = [])), tag = "buyer")]
pub async fn balance(api: web::Data<Api>, p: Principal) -> ApiResult<HttpResponse> {
    p.require(&[Role::Buyer])?;
    Ok(HttpResponse::Ok().json(balance_of(&api, p.account).await?))
}
