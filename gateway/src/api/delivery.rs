//! Supplier REST of lease delivery (issue 15; docs/market-rules.md §11): report a lease ready
//! (with access details), failed, or torn down; resume a held node; list a node's leases for
//! its agent. Supplier keys only, on the caller's own nodes and leases (another supplier's
//! answers 404 like a missing one).
//!
//! A node key (issue 16) reports on the leases of its node and lists that node's leases (the
//! report helpers check the lease once, for REST and websocket alike); another node's lease
//! answers 404. Resuming a held node is the supplier's decision: a node key gets 403.

use crate::accounts::Role;
use crate::api::auth::{Principal, ScopedPrincipal};
use crate::api::error::{ApiError, ApiResult};
use crate::api::launch::{FailedRequest, LostRequest, ReadyRequest, TornDownRequest, report_text};
use crate::api::views::prelude::*;
use crate::api::views::{LeaseView, NodeView};
use crate::api::{Api, engine_output, parse_json, path_id, read_body};
use crate::delivery::Report;
use crate::market::Op;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use exchange::{AccountId, Command, LeaseId, NodeId};
use gpux_wire::ErrorBody;

/// Registers the delivery routes.
pub fn routes(cfg: &mut web::ServiceConfig) {
    use crate::server::resource;
    cfg.service(resource("/leases/{id}/ready").route(web::post().to(ready)))
        .service(resource("/leases/{id}/failed").route(web::post().to(failed)))
        .service(resource("/leases/{id}/lost").route(web::post().to(lost)))
        .service(resource("/leases/{id}/torn-down").route(web::post().to(torn_down)))
        .service(resource("/leases/{id}/verification").route(web::post().to(verification)))
        .service(resource("/nodes/{id}/resume").route(web::post().to(resume)))
        .service(resource("/nodes/{id}/leases").route(web::get().to(node_leases)));
}

pub use gpux_wire::NodeLeases;

/// One of the caller's leases as a view (404 for a missing or another supplier's lease).
async fn supplier_lease(api: &Api, account: u64, id: u64) -> ApiResult<LeaseView> {
    api.read(move |m, _| {
        m.deliveries()
            .record(LeaseId(id))
            .filter(|r| r.supplier.0 == account)
            .map(|r| crate::api::views::supplier_lease_view(m, r))
    })
    .await?
    .ok_or_else(|| ApiError::not_found("lease"))
}

async fn report(api: &Api, report: Report) -> ApiResult<()> {
    let (supplier, lease) = match &report {
        Report::Ready { account, lease, .. }
        | Report::Failed { account, lease, .. }
        | Report::Lost { account, lease, .. }
        | Report::TornDown { account, lease, .. } => (*account, *lease),
    };
    let c = api.submit(Op::Report(report)).await?;
    if let Err(e) = engine_output(&c) {
        return Err(ended_lease_error(api, lease, e, move |r| r.supplier.0 == supplier).await?);
    }
    Ok(())
}

/// `e` (an engine refusal of a command on `lease`), or, when `e` is a 404 for a lease the
/// caller (`mine`) had that has ended and is gone from the engine (wiped), 409 `lease_ended`
/// saying when and why it ended (issue 25: a retried report or release of such a lease
/// answered 404, as if the id were wrong).
///
/// # Errors
/// 503 when the market cannot be read.
pub async fn ended_lease_error(
    api: &Api,
    lease: u64,
    e: ApiError,
    mine: impl Fn(&crate::delivery::LeaseRecord) -> bool + Send + 'static,
) -> ApiResult<ApiError> {
    if e.status != StatusCode::NOT_FOUND {
        return Ok(e);
    }
    let ended = api
        .read(move |m, _| {
            m.deliveries()
                .record(LeaseId(lease))
                .filter(|r| mine(r))
                .and_then(|r| r.ended)
        })
        .await?;
    Ok(match ended {
        Some((reason, at_ms)) => ApiError {
            field: Some("lease"),
            ..ApiError::new(
                StatusCode::CONFLICT,
                "lease_ended",
                format!(
                    "lease {lease} already ended at {} ({})",
                    chrono::DateTime::from_timestamp_millis(at_ms)
                        .map_or_else(|| at_ms.to_string(), |t| t.to_rfc3339()),
                    serde_json::to_value(reason)
                        .ok()
                        .and_then(|v| v.as_str().map(String::from))
                        .unwrap_or_default()
                ),
            )
        },
        None => e,
    })
}

/// Checks the caller may report on `lease`, journals the report `make` builds for the
/// supplier, and answers the lease as the supplier sees it (the one path of every report
/// that answers the lease).
async fn report_and_show(
    api: &Api,
    p: &Principal,
    lease: u64,
    make: impl FnOnce(u64) -> Report,
) -> ApiResult<LeaseView> {
    p.require_lease_access(api, lease).await?;
    let supplier = p.account;
    report(api, make(supplier)).await?;
    supplier_lease(api, supplier, lease).await
}

/// Reports the caller's lease ready (REST and websocket; a node key: a lease of its node).
///
/// # Errors
/// 400 `invalid_access`, 404, 409 `lease_ended` / `not_provisioning`, 503.
pub async fn report_ready(
    api: &Api,
    p: &Principal,
    lease: u64,
    access: &crate::api::launch::AccessRequest,
) -> ApiResult<LeaseView> {
    let access = access.to_access()?;
    p.require_lease_access(api, lease).await?;
    let supplier = p.account;
    report(
        api,
        Report::Ready {
            account: supplier,
            lease,
            access,
        },
    )
    .await?;
    supplier_lease(api, supplier, lease).await
}

/// Reports the caller's lease failed (REST and websocket; a node key: a lease of its node).
///
/// # Errors
/// 400 `invalid_report`, 404, 409 `lease_ended` / `not_provisioning`, 503.
pub async fn report_failed(
    api: &Api,
    p: &Principal,
    lease: u64,
    reason: &str,
    cause: Option<gpux_wire::FailureCauseDto>,
) -> ApiResult<LeaseView> {
    let reason = report_text("reason", reason)?;
    let cause = match cause.unwrap_or_default() {
        gpux_wire::FailureCauseDto::Node => crate::delivery::FailureCause::Node,
        gpux_wire::FailureCauseDto::LaunchSpec => crate::delivery::FailureCause::LaunchSpec,
        // A GPU swapped under the lease is the node's failure (issue 26): fail over, hold.
        gpux_wire::FailureCauseDto::GpuChanged => crate::delivery::FailureCause::Node,
    };
    report_and_show(api, p, lease, |account| Report::Failed {
        account,
        lease,
        reason,
        cause,
    })
    .await
}

/// Reports that the caller's node lost a running lease's workload (REST; a node key: a lease of
/// its node): the lease ends `node_failure` now (billing stops), fails over, and the buyer
/// gets the SLA credit of a node failure (docs/market-rules.md §11.3a).
///
/// # Errors
/// 400 `invalid_report`, 404, 409 `lease_ended` / `not_active` (pending or provisioning:
/// report it `failed`), 503.
pub async fn report_lost(
    api: &Api,
    p: &Principal,
    lease: u64,
    reason: &str,
) -> ApiResult<LeaseView> {
    let reason = report_text("reason", reason)?;
    report_and_show(api, p, lease, |account| Report::Lost {
        account,
        lease,
        reason,
    })
    .await
}

/// Reports the caller's ended lease torn down (REST and websocket; a node key: a lease of its
/// node); a repeat after the wipe was recorded answers the record.
///
/// # Errors
/// 400 `invalid_report`, 404, 409 `lease_not_ended`, 503.
pub async fn report_torn_down(
    api: &Api,
    p: &Principal,
    lease: u64,
    method: &str,
) -> ApiResult<LeaseView> {
    let method = report_text("method", method)?;
    p.require_lease_access(api, lease).await?;
    let supplier = p.account;
    let sent = report(
        api,
        Report::TornDown {
            account: supplier,
            lease,
            method,
        },
    )
    .await;
    if let Err(e) = sent {
        // An agent reconciling after a restart may report a wipe twice: the second finds the
        // wipe over, and the record answers for it.
        return match supplier_lease(api, supplier, lease).await.ok() {
            Some(v)
                if v.teardown
                    .as_ref()
                    .is_some_and(|t| t.torn_down_ms.is_some()) =>
            {
                Ok(v)
            }
            _ => Err(e),
        };
    }
    supplier_lease(api, supplier, lease).await
}

/// Resumes `supplier`'s held node (REST and websocket); a no-op when not held.
///
/// # Errors
/// 404, 503.
pub async fn resume_node(api: &Api, supplier: u64, node: u64) -> ApiResult<NodeView> {
    let c = api
        .submit(Op::Engine(Command::ResumeNode {
            account: AccountId(supplier),
            node: NodeId(node),
        }))
        .await?;
    engine_output(&c)?;
    crate::api::supplier::node_view(api, supplier, node).await
}

/// The supplier, lease id and body of a report request.
async fn lease_report<T: serde::de::DeserializeOwned>(
    p: &Principal,
    id: &str,
    req: &HttpRequest,
    body: web::Payload,
) -> ApiResult<(u64, T)> {
    p.require(&[Role::Supplier])?;
    let lease = path_id(id, "lease")?;
    let bytes = read_body(req, body).await?;
    Ok((lease, parse_json(&bytes)?))
}

/// `POST /v1/leases/{id}/ready` `{access}` → the lease, running and billed from now. A
/// repeat on a running lease is accepted (200): the ready time stays, the access details are
/// replaced (to correct them).
#[utoipa::path(post, path = "/v1/leases/{id}/ready", request_body = ReadyRequest,
    params(("id" = String, Path, description = "Lease id.", pattern = "^[0-9]{1,20}$")),
    responses((status = 200, description = "The lease, active.", body = LeaseView),
        (status = 400, description = "`bad_json`, `invalid_access`", body = ErrorBody),
        (status = 404, description = "`not_found`: no lease on the caller's nodes (a node \
            key: on its node) with this id", body = ErrorBody),
        (status = 409, description = "`lease_ended`, `not_provisioning`", body = ErrorBody)),
    security(("bearer" = [])), tag = "supplier")]
pub async fn ready(
    api: web::Data<Api>,
    p: ScopedPrincipal,
    id: web::Path<String>,
    req: HttpRequest,
    body: web::Payload,
) -> ApiResult<HttpResponse> {
    let (lease, r): (u64, ReadyRequest) = lease_report(&p, &id, &req, body).await?;
    let v = report_ready(&api, &p, lease, &r.access).await?;
    Ok(HttpResponse::Ok().json(v))
}

/// `POST /v1/leases/{id}/failed` `{reason}` → the lease, ended `not_delivered` (never
/// charged); it fails over to another node and this node is held until resumed.
#[utoipa::path(post, path = "/v1/leases/{id}/failed", request_body = FailedRequest,
    params(("id" = String, Path, description = "Lease id.", pattern = "^[0-9]{1,20}$")),
    responses((status = 200, description = "The lease, ended `not_delivered`.",
            body = LeaseView),
        (status = 400, description = "`bad_json`, `invalid_report`", body = ErrorBody),
        (status = 404, description = "`not_found`: no lease on the caller's nodes (a node \
            key: on its node) with this id", body = ErrorBody),
        (status = 409, description = "`lease_ended`, `not_provisioning`", body = ErrorBody)),
    security(("bearer" = [])), tag = "supplier")]
pub async fn failed(
    api: web::Data<Api>,
    p: ScopedPrincipal,
    id: web::Path<String>,
    req: HttpRequest,
    body: web::Payload,
) -> ApiResult<HttpResponse> {
    let (lease, r): (u64, FailedRequest) = lease_report(&p, &id, &req, body).await?;
    let v = report_failed(&api, &p, lease, &r.reason, r.cause).await?;
    Ok(HttpResponse::Ok().json(v))
}

/// `POST /v1/leases/{id}/lost` `{reason}` → the lease, ended `node_failure` now: the node
/// lost its workload (GPUs failed, host rebooted, container gone). Billing stops at the
/// report, the lease fails over to another node, the buyer gets the SLA credit of a node
/// failure; the node stays listed and its GPUs wipe as after any end.
#[utoipa::path(post, path = "/v1/leases/{id}/lost", request_body = LostRequest,
    params(("id" = String, Path, description = "Lease id.", pattern = "^[0-9]{1,20}$")),
    responses((status = 200, description = "The lease, ended `node_failure`.",
            body = LeaseView),
        (status = 400, description = "`bad_json`, `invalid_report`", body = ErrorBody),
        (status = 404, description = "`not_found`: no lease on the caller's nodes (a node \
            key: on its node) with this id", body = ErrorBody),
        (status = 409, description = "`lease_ended`, `not_active` (not running yet: report \
            it `failed`)", body = ErrorBody)),
    security(("bearer" = [])), tag = "supplier")]
pub async fn lost(
    api: web::Data<Api>,
    p: ScopedPrincipal,
    id: web::Path<String>,
    req: HttpRequest,
    body: web::Payload,
) -> ApiResult<HttpResponse> {
    let (lease, r): (u64, LostRequest) = lease_report(&p, &id, &req, body).await?;
    let v = report_lost(&api, &p, lease, &r.reason).await?;
    Ok(HttpResponse::Ok().json(v))
}

/// `POST /v1/leases/{id}/torn-down` `{method}` → the ended lease with its teardown record;
/// its GPUs are free again. A repeat after the wipe was recorded answers 200 with the record.
#[utoipa::path(post, path = "/v1/leases/{id}/torn-down", request_body = TornDownRequest,
    params(("id" = String, Path, description = "Lease id.", pattern = "^[0-9]{1,20}$")),
    responses((status = 200, description = "The ended lease with its teardown record.",
            body = LeaseView),
        (status = 400, description = "`bad_json`, `invalid_report`", body = ErrorBody),
        (status = 404, description = "`not_found`: no lease on the caller's nodes (a node \
            key: on its node) with this id", body = ErrorBody),
        (status = 409, description = "`lease_not_ended`", body = ErrorBody)),
    security(("bearer" = [])), tag = "supplier")]
pub async fn torn_down(
    api: web::Data<Api>,
    p: ScopedPrincipal,
    id: web::Path<String>,
    req: HttpRequest,
    body: web::Payload,
) -> ApiResult<HttpResponse> {
    let (lease, r): (u64, TornDownRequest) = lease_report(&p, &id, &req, body).await?;
    let v = report_torn_down(&api, &p, lease, &r.method).await?;
    Ok(HttpResponse::Ok().json(v))
}

/// `POST /v1/nodes/{id}/resume` → the node, back on the market (a no-op when not held).
#[utoipa::path(post, path = "/v1/nodes/{id}/resume",
    params(("id" = String, Path, description = "Node id.", pattern = "^[0-9]{1,20}$")),
    responses((status = 200, description = "The node, back on the market.", body = NodeView),
        (status = 404, description = "`not_found`: no node of the caller's with this id",
            body = ErrorBody),
        (status = 409, description = "`attestation_mismatch`: the node's latest attestation \
            does not match its registration (docs/market-rules.md §12.1): attest again first",
            body = ErrorBody)),
    security(("bearer" = [])), tag = "supplier")]
pub async fn resume(
    api: web::Data<Api>,
    p: Principal,
    id: web::Path<String>,
) -> ApiResult<HttpResponse> {
    p.require(&[Role::Supplier])?;
    let node = path_id(&id, "node")?;
    let view = resume_node(&api, p.account, node).await?;
    Ok(HttpResponse::Ok().json(view))
}

/// `GET /v1/nodes/{id}/leases` → [`NodeLeases`]: the node's live and wiping leases with their
/// launch specs. Costs in proportion to that node's leases, never a scan of the market.
#[utoipa::path(get, path = "/v1/nodes/{id}/leases",
    params(("id" = String, Path, description = "Node id.", pattern = "^[0-9]{1,20}$")),
    responses((status = 200, description = "The node's live and wiping leases.",
            body = NodeLeases),
        (status = 404, description = "`not_found`: no node of the caller's (a node key: its \
            own) with this id", body = ErrorBody)),
    security(("bearer" = [])), tag = "supplier")]
pub async fn node_leases(
    api: web::Data<Api>,
    p: ScopedPrincipal,
    id: web::Path<String>,
) -> ApiResult<HttpResponse> {
    p.require(&[Role::Supplier])?;
    let node = NodeId(path_id(&id, "node")?);
    let p = p.0;
    let view = api
        .read(move |m, _| {
            let n = m.engine().node(node).filter(|n| p.may_see_node(n))?;
            let mut leases: Vec<LeaseView> = n
                .leases
                .iter()
                .filter_map(|l| m.engine().lease(*l))
                .map(|l| {
                    let mut v = LeaseView::of(m, l);
                    if v.gang.is_some() {
                        v.gang = crate::api::views::lease_gang_view(m, l.id, true);
                    }
                    v
                })
                .collect();
            leases.extend(verification_lease(m, n));
            leases.sort_by(|a, b| a.id.cmp(&b.id));
            Some(NodeLeases {
                node_id: node.0.to_string(),
                leases_version: m.deliveries().node_version(node),
                held: n.held.map(crate::api::dto::hold_dto),
                leases,
                wiping: m
                    .deliveries()
                    .wiping_on(node)
                    .map(|r| LeaseView::of_record(m, r))
                    .collect(),
            })
        })
        .await?
        .ok_or_else(|| ApiError::not_found("node"))?;
    // The time left as of this answer (the market's clock is its last operation's).
    let mut view = view;
    let now = crate::api::now_ms();
    for l in &mut view.leases {
        if let Some(d) = l.provision_deadline_ms {
            l.deadline_in_ms = Some(d.saturating_sub(now).max(0));
        }
    }
    Ok(HttpResponse::Ok().json(view))
}

/// The verification run under way on `n`, as the lease its agent acts on
/// (docs/market-rules.md §12.2): `purpose: verification`, provisioning until its report
/// deadline, price 0 (never billed), the GPUs under test with their attested UUIDs.
fn verification_lease(m: &crate::market::Market, n: &exchange::state::Node) -> Option<LeaseView> {
    use crate::api::views::{region_name, sku_name};
    let e = m.engine();
    let run = e.verification(n.id)?.run?;
    let indexes: Vec<u32> = (0..32).filter(|i| run.gpu_mask & (1 << i) != 0).collect();
    let uuids = e
        .attestation(n.id)
        .filter(|a| a.mismatch.is_none())
        .map(|a| {
            indexes
                .iter()
                .filter_map(|i| a.uuids.get(*i as usize).cloned())
                .collect()
        })
        .unwrap_or_default();
    Some(LeaseView {
        id: run.lease.0.to_string(),
        bid_id: "0".into(),
        node_id: n.id.0.to_string(),
        offer_id: n.offer.map_or_else(|| "0".into(), |o| o.0.to_string()),
        sku: sku_name(e, n.sku),
        region: region_name(e, n.region),
        kind: gpux_wire::KindDto::Spot,
        gpus: run.gpu_mask.count_ones(),
        gpu_indexes: indexes,
        price: "0.0000".into(),
        start_ms: run.started_ms,
        end_ms: run.deadline_ms,
        state: gpux_wire::LeaseStateDto::Provisioning,
        provision_deadline_ms: Some(run.deadline_ms),
        deadline_in_ms: Some(run.deadline_ms.saturating_sub(m.last_timestamp_ms()).max(0)),
        ready_ms: None,
        access: None,
        launch: None,
        notice_deadline_ms: None,
        charged: None,
        billed_seconds: 0,
        sla_credit: None,
        end_reason: None,
        ended_at_ms: None,
        failure_reason: None,
        failure_cause: None,
        teardown: None,
        migrated_from: None,
        migrated_to: Vec::new(),
        failover_failed_gpus: None,
        failover_failed_reason: None,
        failover_failed_detail: None,
        purpose: Some(gpux_wire::LeasePurposeDto::Verification),
        gpu_uuids: uuids,
        sla_terms: None,
        sla_credit_basis: None,
        gang: None,
    })
}

/// Largest figure a verification report may carry (TFLOPS or GB/s): far above any GPU made.
pub const MAX_VERIFICATION_FIGURE: f64 = 100_000.0;

/// A report's figure in fixed point (`scale` 10: tenths), or 422 naming `field` when it is
/// not a finite number in 0..=[`MAX_VERIFICATION_FIGURE`].
fn fixed(v: Option<f64>, scale: f64, field: &'static str) -> ApiResult<Option<u32>> {
    match v {
        None => Ok(None),
        Some(x) if x.is_finite() && (0.0..=MAX_VERIFICATION_FIGURE).contains(&x) => {
            Ok(Some((x * scale).round() as u32))
        }
        Some(_) => Err(ApiError {
            field: Some(field),
            ..ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_figures",
                format!("{field} must be a number from 0 to {MAX_VERIFICATION_FIGURE}"),
            )
        }),
    }
}

/// The engine's figures of a wire report (422 `invalid_figures` for an out-of-range number,
/// more than 16 GPUs or a `raw_tail` over 8 KiB).
pub fn figures_of(
    r: &gpux_wire::VerificationReport,
) -> ApiResult<exchange::verify::VerificationFigures> {
    use exchange::verify::{DcgmResult, GpuFigures, fault};
    let bad = |field: &'static str, msg: String| ApiError {
        field: Some(field),
        ..ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_figures", msg)
    };
    if r.gpus.len() > exchange::limits::MAX_NODE_GPUS as usize {
        return Err(bad("gpus", "at most 16 GPUs".into()));
    }
    if r.raw_tail
        .as_ref()
        .is_some_and(|t| t.len() > gpux_wire::MAX_VERIFICATION_TAIL_BYTES)
    {
        return Err(bad(
            "raw_tail",
            format!(
                "raw_tail is at most {} bytes",
                gpux_wire::MAX_VERIFICATION_TAIL_BYTES
            ),
        ));
    }
    let mut gpus = Vec::with_capacity(r.gpus.len());
    for g in &r.gpus {
        let faults = g.faults.iter().fold(0u8, |m, f| {
            m | match f {
                gpux_wire::NvmlFaultDto::PcieLinkBelowMax => fault::PCIE_LINK_BELOW_MAX,
                gpux_wire::NvmlFaultDto::EccOff => fault::ECC_OFF,
                gpux_wire::NvmlFaultDto::PowerCapped => fault::POWER_CAPPED,
                gpux_wire::NvmlFaultDto::Throttled => fault::THROTTLED,
            }
        });
        gpus.push(GpuFigures {
            index: g.index,
            bf16_tflops_x10: fixed(g.bf16_tflops, 10.0, "gpus.bf16_tflops")?,
            mem_bw_gbps: fixed(g.mem_bw_gbps, 1.0, "gpus.mem_bw_gbps")?,
            faults,
        });
    }
    Ok(exchange::verify::VerificationFigures {
        gpus,
        allreduce_busbw_x10: fixed(r.allreduce_busbw_gbps, 10.0, "allreduce_busbw_gbps")?,
        dcgm: r.dcgm_diag.map(|d| match d {
            gpux_wire::DcgmResultDto::Pass => DcgmResult::Pass,
            gpux_wire::DcgmResultDto::Warn => DcgmResult::Warn,
            gpux_wire::DcgmResultDto::Fail => DcgmResult::Fail,
        }),
    })
}

/// `POST /v1/leases/{id}/verification` (supplier or the node's key) → the node, with the
/// run's judgment (docs/market-rules.md §12.2).
#[utoipa::path(post, path = "/v1/leases/{id}/verification",
    request_body = gpux_wire::VerificationReport,
    params(("id" = String, Path, description = "The verification lease id.",
        pattern = "^[0-9]{1,20}$")),
    responses((status = 200, description = "The node, with its verification.", body = NodeView),
        (status = 400, description = "`bad_json`", body = ErrorBody),
        (status = 404, description = "`not_found`: no verification run on the caller's nodes \
            (a node key: on its node) with this id", body = ErrorBody),
        (status = 409, description = "`not_verifying`: a buyer's lease or a run already \
            ended", body = ErrorBody),
        (status = 422, description = "`invalid_figures` (a number outside 0..=100,000, more \
            than 16 GPUs, `raw_tail` over 8 KiB), `invalid_gpus` [figures]", body = ErrorBody)),
    security(("bearer" = [])), tag = "supplier")]
pub async fn verification(
    api: web::Data<Api>,
    p: ScopedPrincipal,
    id: web::Path<String>,
    req: HttpRequest,
    body: web::Payload,
) -> ApiResult<HttpResponse> {
    let (lease, r): (u64, gpux_wire::VerificationReport) =
        lease_report(&p, &id, &req, body).await?;
    let figures = figures_of(&r)?;
    let p = p.0;
    // The run's node must be the caller's (a node key: its own node); else 404 as missing.
    let pp = p.clone();
    let node = api
        .read(move |m, _| {
            let e = m.engine();
            let node = e.verification_node(LeaseId(lease)).or_else(|| {
                // A run that ended, or a buyer's lease: the engine answers 409 for those.
                e.lease(LeaseId(lease)).map(|l| l.node)
            });
            node.and_then(|n| e.node(n))
                .filter(|n| pp.may_see_node(n))
                .map(|n| n.id)
        })
        .await?;
    // A node key acts on its own node's run only; an account key gets the engine's answer
    // (another supplier's run: 404; a buyer's lease or an ended run: 409).
    if p.node.is_some() && node.is_none() {
        return Err(ApiError::not_found("lease"));
    }
    let c = api
        .submit(Op::Engine(Command::ReportVerification {
            account: AccountId(p.account),
            lease: LeaseId(lease),
            figures,
        }))
        .await?;
    engine_output(&c)?;
    let Some(node) = node else {
        return Err(ApiError::not_found("lease"));
    };
    let v = crate::api::supplier::node_view(&api, p.account, node.0).await?;
    tracing::info!(
        lease,
        node = node.0,
        duration_s = r.duration_s,
        "verification reported"
    );
    Ok(HttpResponse::Ok().json(v))
}
