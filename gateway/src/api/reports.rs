//! Finance reports: `GET /v1/reports/{kind}?from=&to=&tz=&format=&account=`.
//!
//! Kinds: `buyer-statements`, `supplier-payouts`, `platform-summary`, `trial-balance`.
//! Finance and admin keys read every report (optionally one `account`); a buyer reads only its
//! own buyer statement, a supplier only its own payout statement.
//!
//! `from` and `to` are ms since epoch, or local dates / date-times in `tz`
//! (`2026-11-01`, `2026-11-01T08:00:00`); `to` is exclusive. Defaults: from the start of the
//! current local month to now. A `to` in the future is cut to now (a report never shows
//! charges that have not happened). `tz` is an IANA zone (default `Asia/Shanghai`);
//! `format` is `json` (default), `csv` or `xlsx`.

use crate::accounts::Role;
use crate::api::auth::Principal;
use crate::api::error::{ApiError, ApiResult};
use crate::api::{Api, now_ms};
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use chrono::{Datelike, NaiveDate, NaiveDateTime, TimeZone};
use settlement::reports::table::Table;
use settlement::{Account, AccountId, Ledger, Period, SettlementError};
use std::collections::BTreeSet;

/// Registers the report routes.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(crate::server::resource("/reports/{kind}").route(web::get().to(report)));
}

/// Query of a report.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ReportQuery {
    /// Start (inclusive): ms since epoch or a local date/date-time in `tz`.
    pub from: Option<String>,
    /// End (exclusive): ms since epoch or a local date/date-time in `tz`.
    pub to: Option<String>,
    /// IANA time zone (default Asia/Shanghai).
    pub tz: Option<String>,
    /// `json` (default), `csv` or `xlsx`.
    pub format: Option<String>,
    /// One account (finance and admin only).
    pub account: Option<String>,
}

fn bad(field: &'static str, code: &'static str, msg: impl Into<String>) -> ApiError {
    ApiError::invalid(field, code, msg)
}

fn parse_time(field: &'static str, s: &str, tz: chrono_tz::Tz) -> ApiResult<i64> {
    if let Some(ms) = crate::api::dto::parse_id(s) {
        return i64::try_from(ms).map_err(|_| bad(field, "invalid_period", "time out of range"));
    }
    let local = if let Ok(d) = NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        d.and_hms_opt(0, 0, 0)
    } else {
        NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S").ok()
    }
    .ok_or_else(|| {
        bad(
            field,
            "invalid_period",
            format!("{field}: ms since epoch, YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS"),
        )
    })?;
    settlement::reports::local_to_utc_ms(local, tz)
        .map_err(|e| bad(field, "invalid_period", e.to_string()))
}

enum Report {
    Buyers(Vec<settlement::reports::buyer::BuyerStatement>),
    Suppliers(Vec<settlement::reports::supplier::SupplierStatement>),
    Platform(Box<settlement::reports::platform::PlatformSummary>),
    Trial(Box<settlement::reports::trial_balance::TrialBalance>),
}

impl Report {
    fn tables(&self) -> Vec<Table> {
        match self {
            Report::Buyers(v) => v.iter().map(|s| s.table()).collect(),
            Report::Suppliers(v) => v.iter().map(|s| s.table()).collect(),
            Report::Platform(p) => vec![p.table()],
            Report::Trial(t) => vec![t.table()],
        }
    }

    fn json(&self) -> Result<Vec<u8>, SettlementError> {
        use settlement::reports::to_json;
        match self {
            Report::Buyers(v) => to_json(v),
            Report::Suppliers(v) => to_json(v),
            Report::Platform(p) => to_json(p.as_ref()),
            Report::Trial(t) => to_json(t.as_ref()),
        }
    }
}

fn report_error(e: SettlementError) -> ApiError {
    match e {
        SettlementError::InvalidPeriod { .. } | SettlementError::UnknownTimeZone(_) => {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_period", e.to_string())
        }
        other => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "report_failed",
            other.to_string(),
        ),
    }
}

/// Accounts of a role known to the ledger or the account registry.
fn accounts_of(m: &crate::market::Market, role: Role) -> Vec<u64> {
    let mut ids: BTreeSet<u64> = m
        .accounts()
        .iter()
        .filter(|a| a.role == role)
        .map(|a| a.id)
        .collect();
    for a in m.ledger().balances().keys() {
        match (a, role) {
            (Account::Buyer(id), Role::Buyer) | (Account::Supplier(id), Role::Supplier) => {
                ids.insert(id.0);
            }
            _ => {}
        }
    }
    ids.into_iter().collect()
}

/// `GET /v1/reports/{kind}`.
#[utoipa::path(get, path = "/v1/reports/{kind}", params(("kind" = String, Path,
    description = "buyer-statements | supplier-payouts | platform-summary | trial-balance"),
    ReportQuery), responses((status = 200, description = "JSON, CSV or XLSX")),
    security(("bearer" = [])), tag = "finance")]
pub async fn report(
    api: web::Data<Api>,
    p: Principal,
    kind: web::Path<String>,
    q: web::Query<ReportQuery>,
) -> ApiResult<HttpResponse> {
    let kind = kind.into_inner();
    let finance = matches!(p.role, Role::Finance | Role::Admin);
    let allowed = match kind.as_str() {
        "buyer-statements" => finance || p.role == Role::Buyer,
        "supplier-payouts" => finance || p.role == Role::Supplier,
        "platform-summary" | "trial-balance" => finance,
        _ => return Err(ApiError::not_found("report")),
    };
    if !allowed {
        return Err(ApiError::forbidden(format!(
            "a {} key may not read {kind}",
            p.role.as_str()
        )));
    }
    if q.account.is_some() && matches!(kind.as_str(), "platform-summary" | "trial-balance") {
        return Err(bad(
            "account",
            "invalid_query",
            "account applies to buyer-statements and supplier-payouts only",
        ));
    }
    let account = match (&q.account, finance) {
        (Some(a), true) => Some(
            crate::api::dto::parse_id(a)
                .ok_or_else(|| bad("account", "invalid_account", "account is an id"))?,
        ),
        (Some(_), false) => {
            return Err(ApiError::forbidden(
                "only finance reads other accounts' statements",
            ));
        }
        (None, true) => None,
        (None, false) => Some(p.account),
    };
    let tz_name =
        q.tz.clone()
            .unwrap_or_else(|| settlement::DEFAULT_TIME_ZONE.to_string());
    let tz = settlement::reports::parse_tz(&tz_name)
        .map_err(|e| bad("tz", "invalid_time_zone", e.to_string()))?;
    let now = now_ms();
    let from = match &q.from {
        Some(s) => parse_time("from", s, tz)?,
        None => {
            let local = tz
                .timestamp_millis_opt(now)
                .single()
                .map(|t| t.date_naive());
            let start = local
                .and_then(|d| NaiveDate::from_ymd_opt(d.year(), d.month(), 1))
                .and_then(|d| d.and_hms_opt(0, 0, 0))
                .ok_or_else(|| bad("from", "invalid_period", "cannot compute month start"))?;
            settlement::reports::local_to_utc_ms(start, tz)
                .map_err(|e| bad("from", "invalid_period", e.to_string()))?
        }
    };
    let to = match &q.to {
        Some(s) => parse_time("to", s, tz)?,
        None => now,
    }
    .min(now);
    let period = Period::new(from, to, &tz_name).map_err(report_error)?;
    let format = q.format.clone().unwrap_or_else(|| "json".into());
    if !matches!(format.as_str(), "json" | "csv" | "xlsx") {
        return Err(bad(
            "format",
            "invalid_format",
            "format is json, csv or xlsx",
        ));
    }
    if let Some(id) = account {
        let want = if kind == "buyer-statements" {
            Role::Buyer
        } else {
            Role::Supplier
        };
        let role = api
            .read(move |m, _| m.accounts().get(id).map(|a| a.role))
            .await?;
        if role != Some(want) {
            return Err(ApiError::not_found(if want == Role::Buyer {
                "buyer"
            } else {
                "supplier"
            }));
        }
    }
    let kind2 = kind.clone();
    let report = api
        .read(move |m, _| -> Result<Report, SettlementError> {
            // Accrue a copy up to the period end when the last tick is behind it.
            let accrued;
            let ledger: &Ledger = if m.ledger().clock_ms().is_none_or(|c| c < period.to_ms) {
                let mut l = m.ledger().clone();
                l.apply(
                    period.to_ms,
                    &settlement::Input::Accrue {
                        now_ms: period.to_ms,
                    },
                )?;
                accrued = l;
                &accrued
            } else {
                m.ledger()
            };
            Ok(match kind2.as_str() {
                "buyer-statements" => {
                    let ids = account.map_or_else(|| accounts_of(m, Role::Buyer), |a| vec![a]);
                    Report::Buyers(
                        ids.into_iter()
                            .map(|id| ledger.buyer_statement(AccountId(id), &period))
                            .collect::<Result<_, _>>()?,
                    )
                }
                "supplier-payouts" => {
                    let ids = account.map_or_else(|| accounts_of(m, Role::Supplier), |a| vec![a]);
                    Report::Suppliers(
                        ids.into_iter()
                            .map(|id| ledger.supplier_statement(AccountId(id), &period))
                            .collect::<Result<_, _>>()?,
                    )
                }
                "platform-summary" => Report::Platform(Box::new(ledger.platform_summary(&period)?)),
                _ => Report::Trial(Box::new(ledger.trial_balance(&period)?)),
            })
        })
        .await?
        .map_err(report_error)?;
    let stem = format!("{kind}-{from}-{to}");
    let (ct, ext, bytes) = match format.as_str() {
        "csv" => {
            let mut out = Vec::new();
            for (i, t) in report.tables().iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(b"\n");
                }
                out.extend(settlement::reports::csv::to_csv(t).map_err(report_error)?);
            }
            ("text/csv; charset=utf-8", "csv", out)
        }
        "xlsx" => {
            let tables = report.tables();
            let bytes = web::block(move || settlement::reports::xlsx::to_xlsx(&tables))
                .await
                .map_err(|e| {
                    ApiError::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "report_failed",
                        e.to_string(),
                    )
                })?
                .map_err(report_error)?;
            (
                "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
                "xlsx",
                bytes,
            )
        }
        _ => (
            "application/json",
            "json",
            report.json().map_err(report_error)?,
        ),
    };
    Ok(HttpResponse::Ok()
        .content_type(ct)
        .insert_header((
            "Content-Disposition",
            format!("attachment; filename=\"{stem}.{ext}\""),
        ))
        .body(bytes))
}
