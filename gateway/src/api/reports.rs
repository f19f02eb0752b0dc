//! Finance reports: `GET /v1/reports/{kind}?from=&to=&tz=&format=&account=`.
//!
//! Kinds: `buyer-statements`, `supplier-payouts`, `platform-summary`, `trial-balance`,
//! `audit-trail`, `gl-export` and `reconciliation` (issue 17).
//! Finance and admin keys read every report (optionally one `account`); a buyer reads only its
//! own buyer statement, a supplier only its own payout statement.
//!
//! `from` and `to` are ms since epoch, or local dates / date-times in `tz`
//! (`2026-11-01`, `2026-11-01T08:00:00`); `to` is exclusive. Defaults: from the start of the
//! current local month to now. A `to` in the future is cut to now (a report never shows
//! charges that have not happened). `tz` is an IANA zone (default `Asia/Shanghai`);
//! `format` is `json` (default), `csv` or `xlsx`.
//!
//! As `/openapi.json` says (docs/api.md §1.4): a parameter of another shape answers 400; one of
//! the documented shape that names no period (`from` not before `to`, `2026-02-30`) or does
//! not apply (`account` on a report without statements) 422.
//!
//! Layout: `authorize` (the role matrix and `account`), `period_of`, `read_report` (on
//! a ledger copy accrued to the period's end), `render` (JSON, CSV, XLSX), [`report`].

use crate::accounts::Role;
use crate::api::auth::Principal;
use crate::api::error::{ApiError, ApiResult};
use crate::api::{Api, now_ms};
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use chrono::{Datelike, NaiveDate, NaiveDateTime, TimeZone};
use gpux_wire::ErrorBody;
use settlement::reports::table::Table;
use settlement::{Account, AccountId, Ledger, Period, SettlementError};
use std::collections::BTreeSet;

/// Registers the report routes.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(crate::server::resource("/reports/{kind}").route(web::get().to(report)));
}

/// A report (the `{kind}` of the path; another kind answers 404).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ReportKind {
    /// Buyer statements: every buyer's, or one `account`'s (a buyer: its own).
    BuyerStatements,
    /// Supplier payout statements: every supplier's, or one `account`'s (a supplier: its own).
    SupplierPayouts,
    /// The platform summary (finance and admin).
    PlatformSummary,
    /// The trial balance (finance and admin).
    TrialBalance,
    /// The audit trail (finance and admin; issue 17): who moved money or changed access in the
    /// period, applied or refused ([`crate::audit`]).
    AuditTrail,
    /// The general-ledger export (finance and admin; issue 17): every movement of the period
    /// as balanced journal entries, one row per leg (`settlement::reports::gl`).
    GlExport,
    /// The cash reconciliation (finance and admin; issue 17): every movement through external
    /// cash, with opening and closing cash and a zero check
    /// (`settlement::reports::reconciliation`).
    Reconciliation,
}

impl ReportKind {
    /// The kind named in a path.
    fn parse(s: &str) -> Option<ReportKind> {
        serde_json::from_value(serde_json::Value::String(s.to_string())).ok()
    }

    /// Its name in paths and file names.
    fn as_str(self) -> &'static str {
        match self {
            ReportKind::BuyerStatements => "buyer-statements",
            ReportKind::SupplierPayouts => "supplier-payouts",
            ReportKind::PlatformSummary => "platform-summary",
            ReportKind::TrialBalance => "trial-balance",
            ReportKind::AuditTrail => "audit-trail",
            ReportKind::GlExport => "gl-export",
            ReportKind::Reconciliation => "reconciliation",
        }
    }

    /// The statements' role, for the kinds with one per account.
    fn statement_role(self) -> Option<Role> {
        match self {
            ReportKind::BuyerStatements => Some(Role::Buyer),
            ReportKind::SupplierPayouts => Some(Role::Supplier),
            ReportKind::PlatformSummary
            | ReportKind::TrialBalance
            | ReportKind::AuditTrail
            | ReportKind::GlExport
            | ReportKind::Reconciliation => None,
        }
    }
}

/// A report's rendering.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReportFormat {
    /// Pretty-printed JSON.
    Json,
    /// CSV, one table per statement.
    Csv,
    /// An Excel workbook, one sheet per statement.
    Xlsx,
}

/// Query of a report.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ReportQuery {
    /// Start (inclusive): ms since epoch or a local date/date-time in `tz` (default: the start
    /// of the current month in `tz`).
    #[param(
        pattern = "^(?:[0-9]{1,20}|[0-9]{4}-[0-9]{2}-[0-9]{2}(?:T[0-9]{2}:[0-9]{2}:[0-9]{2})?)$"
    )]
    pub from: Option<String>,
    /// End (exclusive; cut to now): ms since epoch or a local date/date-time in `tz` (default:
    /// now). After the cut `from` must be before `to` (else 422 `invalid_period`).
    #[param(
        pattern = "^(?:[0-9]{1,20}|[0-9]{4}-[0-9]{2}-[0-9]{2}(?:T[0-9]{2}:[0-9]{2}:[0-9]{2})?)$"
    )]
    pub to: Option<String>,
    /// IANA time zone (default Asia/Shanghai).
    pub tz: Option<String>,
    /// `json` (default; so is an empty value, `?format=`, as on invoices), `csv` or `xlsx`.
    #[param(value_type = Option<ReportFormat>, inline)]
    pub format: Option<String>,
    /// One account's statements (finance and admin only; buyer-statements and
    /// supplier-payouts only, else 422 `invalid_query`); an id of no account of the
    /// statement's role is 404.
    #[param(pattern = "^[0-9]{1,20}$")]
    pub account: Option<String>,
}

fn bad(field: &'static str, code: &'static str, msg: impl Into<String>) -> ApiError {
    ApiError::invalid(field, code, msg)
}

/// 422: a request of the documented shape that the rules refuse.
fn refused(field: &'static str, code: &'static str, msg: impl Into<String>) -> ApiError {
    ApiError {
        status: StatusCode::UNPROCESSABLE_ENTITY,
        ..bad(field, code, msg)
    }
}

/// Whether `s` has the documented shape of a time: 1..=20 digits, `YYYY-MM-DD` or
/// `YYYY-MM-DDTHH:MM:SS` (the query's `pattern`).
fn time_shaped(s: &str) -> bool {
    let b = s.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let date = b.len() >= 10
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10);
    (!b.is_empty() && b.len() <= 20 && digits(0..b.len()))
        || (b.len() == 10 && date)
        || (b.len() == 19
            && date
            && b[10] == b'T'
            && digits(11..13)
            && b[13] == b':'
            && digits(14..16)
            && b[16] == b':'
            && digits(17..19))
}

/// A time of the query: 400 for another shape, 422 for a value of the shape that is no
/// instant.
pub(crate) fn parse_time(field: &'static str, s: &str, tz: chrono_tz::Tz) -> ApiResult<i64> {
    const SHAPE: &str = "ms since epoch, YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS";
    if !time_shaped(s) {
        return Err(bad(field, "invalid_period", format!("{field}: {SHAPE}")));
    }
    if let Some(ms) = crate::api::dto::parse_id(s) {
        return i64::try_from(ms)
            .map_err(|_| refused(field, "invalid_period", "time out of range"));
    }
    let local = if s.len() == 10 {
        NaiveDate::parse_from_str(s, "%Y-%m-%d")
            .ok()
            .and_then(|d| d.and_hms_opt(0, 0, 0))
    } else {
        NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S").ok()
    }
    .ok_or_else(|| {
        refused(
            field,
            "invalid_period",
            format!("{field}: {s:?} is no date or time"),
        )
    })?;
    settlement::reports::local_to_utc_ms(local, tz)
        .map_err(|e| refused(field, "invalid_period", e.to_string()))
}

enum Report {
    Buyers(Vec<settlement::reports::buyer::BuyerStatement>),
    Suppliers(Vec<settlement::reports::supplier::SupplierStatement>),
    Platform(Box<settlement::reports::platform::PlatformSummary>),
    Trial(Box<settlement::reports::trial_balance::TrialBalance>),
    Audit(Vec<crate::audit::AuditEntry>, chrono_tz::Tz),
    Gl(Box<settlement::reports::gl::GlExport>),
    Reconciliation(Box<settlement::reports::reconciliation::Reconciliation>),
}

impl Report {
    fn tables(&self) -> Vec<Table> {
        match self {
            Report::Buyers(v) => v.iter().map(|s| s.table()).collect(),
            Report::Suppliers(v) => v.iter().map(|s| s.table()).collect(),
            Report::Platform(p) => vec![p.table()],
            Report::Trial(t) => vec![t.table()],
            Report::Audit(entries, tz) => vec![audit_table(entries, *tz)],
            Report::Gl(g) => vec![g.table()],
            Report::Reconciliation(r) => vec![r.table()],
        }
    }

    fn json(&self) -> Result<Vec<u8>, SettlementError> {
        use settlement::reports::to_json;
        match self {
            Report::Buyers(v) => to_json(v),
            Report::Suppliers(v) => to_json(v),
            Report::Platform(p) => to_json(p.as_ref()),
            Report::Trial(t) => to_json(t.as_ref()),
            Report::Audit(entries, _) => to_json(entries),
            Report::Gl(g) => to_json(g.as_ref()),
            Report::Reconciliation(r) => to_json(r.as_ref()),
        }
    }
}

/// The audit trail as a table: one row per entry, times local in `tz`.
fn audit_table(entries: &[crate::audit::AuditEntry], tz: chrono_tz::Tz) -> Table {
    use settlement::reports::table::Cell;
    let text = |s: &str| Cell::Text(s.to_string());
    Table {
        name: "audit trail".into(),
        header: vec![
            "id",
            "at",
            "account",
            "key_id",
            "request_id",
            "action",
            "subject",
            "detail",
            "outcome",
        ],
        rows: entries
            .iter()
            .map(|e| {
                vec![
                    Cell::Int(e.id),
                    Cell::Time { ms: e.at_ms, tz },
                    Cell::Int(e.actor.account),
                    text(&e.actor.key_id),
                    text(&e.actor.request_id),
                    text(&e.action),
                    e.subject.map_or(Cell::Empty, Cell::Int),
                    text(&e.detail),
                    match &e.outcome {
                        crate::audit::AuditOutcome::Applied => text("applied"),
                        crate::audit::AuditOutcome::Replayed => text("replayed"),
                        crate::audit::AuditOutcome::Refused { code } => {
                            Cell::Text(format!("refused: {code}"))
                        }
                    },
                ]
            })
            .collect(),
    }
}

fn report_error(e: SettlementError) -> ApiError {
    match e {
        SettlementError::InvalidPeriod { .. } | SettlementError::UnknownTimeZone(_) => {
            refused("from", "invalid_period", e.to_string())
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

/// Who may read `kind`, and whose statements: `Ok(None)` every account's, `Ok(Some(id))` one.
fn authorize(p: &Principal, kind: ReportKind, account: Option<&str>) -> ApiResult<Option<u64>> {
    let finance = matches!(p.role, Role::Finance | Role::Admin);
    let own = kind.statement_role().is_some_and(|r| r == p.role);
    if !finance && !own {
        return Err(ApiError::forbidden(format!(
            "{} key may not read {}",
            p.role.with_article(),
            kind.as_str()
        )));
    }
    if account.is_some() && kind.statement_role().is_none() {
        return Err(refused(
            "account",
            "invalid_query",
            "account applies to buyer-statements and supplier-payouts only",
        ));
    }
    match (account, finance) {
        (Some(a), true) => {
            if a.is_empty() || a.len() > 20 || !a.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad("account", "invalid_account", "account is an id"));
            }
            // 1..=20 digits that fit no u64 name no account.
            crate::api::dto::parse_id(a)
                .map(Some)
                .ok_or_else(|| ApiError::not_found("account"))
        }
        (Some(_), false) => Err(ApiError::forbidden(
            "only finance reads other accounts' statements",
        )),
        (None, true) => Ok(None),
        (None, false) => Ok(Some(p.account)),
    }
}

/// The period of the query in `tz`, `to` cut to the end of the current millisecond
/// (`now_ms + 1`, exclusive): a report asked for "up to now" holds everything applied before
/// the request, an action committed in the request's own millisecond included (it was left
/// out when the end was `now_ms`).
fn period_of(q: &ReportQuery, tz_name: &str, now_ms: i64) -> ApiResult<Period> {
    let now_end = now_ms.saturating_add(1);
    let tz = settlement::reports::parse_tz(tz_name)
        .map_err(|e| bad("tz", "invalid_time_zone", e.to_string()))?;
    let from = match &q.from {
        Some(s) => parse_time("from", s, tz)?,
        None => {
            let local = tz
                .timestamp_millis_opt(now_ms)
                .single()
                .map(|t| t.date_naive());
            let start = local
                .and_then(|d| NaiveDate::from_ymd_opt(d.year(), d.month(), 1))
                .and_then(|d| d.and_hms_opt(0, 0, 0))
                .ok_or_else(|| refused("from", "invalid_period", "cannot compute month start"))?;
            settlement::reports::local_to_utc_ms(start, tz)
                .map_err(|e| refused("from", "invalid_period", e.to_string()))?
        }
    };
    let to = match &q.to {
        Some(s) => parse_time("to", s, tz)?,
        None => now_end,
    }
    .min(now_end);
    Period::new(from, to, tz_name).map_err(report_error)
}

/// Reads the report (a ledger copy accrued up to the period's end when the last tick is
/// behind it).
async fn read_report(
    api: &Api,
    kind: ReportKind,
    account: Option<u64>,
    period: Period,
) -> ApiResult<Report> {
    // Output VAT on the fee at the configured rate (`api.invoice.vat_rate`, issue 25), the
    // rate the invoices carve.
    let vat_rate = api.config.invoice.vat_rate;
    api.read(move |m, _| -> Result<Report, SettlementError> {
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
        let ids = |role| account.map_or_else(|| accounts_of(m, role), |a| vec![a]);
        Ok(match kind {
            ReportKind::BuyerStatements => Report::Buyers(
                ids(Role::Buyer)
                    .into_iter()
                    .map(|id| ledger.buyer_statement(AccountId(id), &period))
                    .collect::<Result<_, _>>()?,
            ),
            ReportKind::SupplierPayouts => Report::Suppliers(
                ids(Role::Supplier)
                    .into_iter()
                    .map(|id| ledger.supplier_statement(AccountId(id), &period))
                    .collect::<Result<_, _>>()?,
            ),
            ReportKind::PlatformSummary => {
                Report::Platform(Box::new(ledger.platform_summary(&period)?))
            }
            ReportKind::TrialBalance => Report::Trial(Box::new(ledger.trial_balance(&period)?)),
            ReportKind::GlExport => {
                Report::Gl(Box::new(ledger.gl_export_with_vat(&period, vat_rate)?))
            }
            ReportKind::Reconciliation => {
                Report::Reconciliation(Box::new(ledger.reconciliation(&period)?))
            }
            ReportKind::AuditTrail => Report::Audit(
                m.audit().between(period.from_ms, period.to_ms).to_vec(),
                period.tz,
            ),
        })
    })
    .await?
    .map_err(report_error)
}

/// The report's bytes in `format`: content type, file extension, body.
async fn render(
    report: Report,
    format: ReportFormat,
) -> ApiResult<(&'static str, &'static str, Vec<u8>)> {
    Ok(match format {
        ReportFormat::Csv => {
            let mut out = Vec::new();
            for (i, t) in report.tables().iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(b"\n");
                }
                out.extend(settlement::reports::csv::to_csv(t).map_err(report_error)?);
            }
            ("text/csv; charset=utf-8", "csv", out)
        }
        ReportFormat::Xlsx => {
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
            (XLSX, "xlsx", bytes)
        }
        ReportFormat::Json => (
            "application/json",
            "json",
            report.json().map_err(report_error)?,
        ),
    })
}

/// The media type of an XLSX report.
pub(crate) const XLSX: &str = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet";

/// `GET /v1/reports/{kind}?from=&to=&tz=&format=&account=` → the report as JSON, CSV or XLSX
/// (`Content-Disposition: attachment; filename="{kind}-{from_ms}-{to_ms}.{ext}"`).
#[utoipa::path(get, path = "/v1/reports/{kind}",
    params(("kind" = ReportKind, Path, description = "The report; another kind answers 404."),
        ReportQuery),
    responses(
        (status = 200, description = "The report (docs/api.md §4 has each kind's shape): a JSON \
            array of statements (buyer-statements, supplier-payouts) or object \
            (platform-summary, trial-balance, gl-export, reconciliation) or an array of audit \
            entries (audit-trail); CSV; or an XLSX workbook.",
            headers(("Content-Disposition" = String,
                description = "`attachment; filename=\"{kind}-{from_ms}-{to_ms}.{ext}\"`")),
            content(
                (ReportJson = "application/json"),
                (String = "text/csv; charset=utf-8"),
                (Xlsx = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"))),
        (status = 400, description = "`bad_query` (an unknown or malformed parameter), \
            `invalid_period` (a time of another shape), `invalid_time_zone`, `invalid_format`, \
            `invalid_account`", body = ErrorBody),
        (status = 404, description = "`not_found`: another kind, or `account` names no account \
            of the statement's role", body = ErrorBody),
        (status = 422, description = "`invalid_period`: `from` not before `to` after the cut \
            to now, or a time of the shape that is no instant; `invalid_query`: `account` on \
            a report without statements", body = ErrorBody)),
    security(("bearer" = [])), tag = "finance")]
pub async fn report(
    api: web::Data<Api>,
    p: Principal,
    kind: web::Path<String>,
    q: web::Query<ReportQuery>,
) -> ApiResult<HttpResponse> {
    let kind = ReportKind::parse(&kind).ok_or_else(|| ApiError::not_found("report"))?;
    let account = authorize(&p, kind, q.account.as_deref())?;
    let tz_name =
        q.tz.clone()
            .unwrap_or_else(|| settlement::DEFAULT_TIME_ZONE.to_string());
    let period = period_of(&q, &tz_name, now_ms())?;
    let format = match q.format.as_deref() {
        None | Some("json" | "") => ReportFormat::Json,
        Some("csv") => ReportFormat::Csv,
        Some("xlsx") => ReportFormat::Xlsx,
        Some(_) => {
            return Err(bad(
                "format",
                "invalid_format",
                "format is json, csv or xlsx",
            ));
        }
    };
    if let (Some(id), Some(want)) = (account, kind.statement_role()) {
        let role = api
            .read(move |m, _| m.accounts().get(id).map(|a| a.role))
            .await?;
        if role != Some(want) {
            return Err(ApiError::not_found(want.as_str()));
        }
    }
    let (from, to) = (period.from_ms, period.to_ms);
    let report = read_report(&api, kind, account, period).await?;
    let (ct, ext, bytes) = render(report, format).await?;
    Ok(HttpResponse::Ok()
        .content_type(ct)
        .insert_header((
            "Content-Disposition",
            format!(
                "attachment; filename=\"{}-{from}-{to}.{ext}\"",
                kind.as_str()
            ),
        ))
        .body(bytes))
}

/// Schema of a JSON report: an array of statements or one object (docs/api.md §4; the
/// settlement crate's report types carry no schema).
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum ReportJson {
    /// Buyer or supplier statements, one per account.
    Statements(Vec<serde_json::Map<String, serde_json::Value>>),
    /// The platform summary or the trial balance.
    Summary(serde_json::Map<String, serde_json::Value>),
}

/// Schema of an XLSX report: binary.
pub struct Xlsx;

impl utoipa::PartialSchema for Xlsx {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Binary)))
            .description(Some("An XLSX workbook, one sheet per statement or report."))
            .into()
    }
}

impl utoipa::ToSchema for Xlsx {}
