//! Finance actions (issue 17; docs/api.md §2.5, docs/settlement.md "Periods and close" and
//! "Adjustments and refunds"), for finance and admin keys:
//!
//! - `POST /v1/finance/adjustments`: a goodwill credit, refund to the bank, SLA cash-out,
//!   write-off or correction, with a reason and a reference; `Idempotency-Key` required.
//! - `POST /v1/finance/periods`: closes [`from`, `to`); `Idempotency-Key` required.
//! - `GET /v1/finance/periods`: the closed periods with their invoice and statement numbers.
//! - `GET /v1/finance/periods/{id}/invoices/{account}`: a buyer's invoice or a supplier's
//!   self-billing statement of a closed period (JSON, CSV, XLSX, PDF); buyers and suppliers
//!   read their own.
//! - `GET /v1/finance/periods/{id}/credit-notes/{account}`: a buyer's credit note (红字发票,
//!   issue 25) of a closed period against the invoice it corrects; the buyer reads its own.
//! - `GET /v1/invoices`: the documents of closed periods (a buyer's or supplier's own;
//!   finance and admin every account's or one's), newest first, bounded by
//!   [`MAX_DOCUMENTS_LISTED`], each with its download path.
//! - `PUT /v1/finance/accounts/{id}/tax-details`: a buyer's or supplier's tax details (开票信息),
//!   the counterparty its documents print for periods closed from then on; a closed period's
//!   documents keep the details frozen at its close ([`crate::tax`]), byte for byte.
//!
//! Each action is validated here into a domain input (`settlement::Adjustment`, a close
//! range), journaled as [`Op::Audited`] (the audit trail names who asked) and applied by the
//! ledger, which enforces the money rules (balances, limits, closed periods). The ledger's
//! idempotency keys are one space for every finance user: `adjust:{key}` and `close:{key}`.
//!
//! Statuses: 400 for a body of another shape (the OpenAPI schema's bounds and patterns), 403
//! for other roles, 404 for an account id that names no account, 409 `idempotency_conflict`,
//! 422 for a body of the schema's shape that a rule refuses (a blank reason, a period before
//! 1970, a taxpayer id whose check character is wrong, the ledger's refusals).
//!
//! Free text (reasons, references, names, addresses) is one line: control characters (Unicode
//! `Cc`: newlines, tabs, escapes, U+0080..U+009F) are refused, since it is printed into CSV,
//! XLSX and PDF documents and the audit trail.

use crate::accounts::Role;
use crate::api::auth::Principal;
use crate::api::error::{ApiError, ApiResult};
use crate::api::openapi::FinanceKey;
use crate::api::views::money;
use crate::api::{Api, parse_json, read_body};
use crate::market::{Op, Refusal};
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use gpux_wire::{
    AdjustmentDone, AdjustmentKindDto, AdjustmentRequest, ClosePeriodRequest, ClosedPeriodView,
    ClosedPeriods, CreditNoteView, DocumentKind, DocumentRef, DocumentView, Documents, ErrorBody,
    TaxDetailsRequest, TaxDetailsView,
};
use settlement::{Account, AccountId, Adjustment, AdjustmentKind};
use std::sync::Arc;

/// Longest adjustment reason, characters (`settlement::adjust::MAX_REASON_CHARS`).
pub const MAX_REASON_CHARS: usize = settlement::adjust::MAX_REASON_CHARS;
/// Longest adjustment reference, characters (`settlement::adjust::MAX_REFERENCE_CHARS`).
pub const MAX_REFERENCE_CHARS: usize = settlement::adjust::MAX_REFERENCE_CHARS;

/// Registers the finance routes.
pub fn routes(cfg: &mut web::ServiceConfig) {
    use crate::server::resource;
    cfg.service(resource("/finance/adjustments").route(web::post().to(adjust)))
        .service(
            resource("/finance/accounts/{id}/tax-details").route(web::put().to(set_tax_details)),
        )
        .service(
            resource("/finance/periods")
                .route(web::post().to(close_period))
                .route(web::get().to(periods)),
        )
        .service(resource("/finance/periods/{id}/invoices/{account}").route(web::get().to(invoice)))
        .service(
            resource("/finance/periods/{id}/credit-notes/{account}")
                .route(web::get().to(credit_note)),
        )
        .service(resource("/invoices").route(web::get().to(documents)));
}

/// A ledger refusal of a finance action: 409 for a key reused with another body, else 422.
fn refused(r: &Refusal) -> ApiError {
    let status = if r.code == "idempotency_conflict" {
        StatusCode::CONFLICT
    } else {
        StatusCode::UNPROCESSABLE_ENTITY
    };
    ApiError::new(status, r.code, r.message.clone())
}

/// An account id of the body (`account`, or the id in `buyer:<id>`): 400 of another shape,
/// 404 for digits beyond any id (they name no account).
fn account_id(field: &'static str, s: &str) -> ApiResult<u64> {
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ApiError::invalid(
            field,
            "invalid_account",
            "an account id is 1..=20 digits",
        ));
    }
    crate::api::dto::parse_id(s).ok_or_else(|| ApiError::not_found("account"))
}

/// A ledger account named as the ledger prints it: `external_cash`, `platform_fee`,
/// `buyer:<id>`, `supplier:<id>` (`sla_credits` is never adjusted).
fn ledger_account(field: &'static str, s: &str) -> ApiResult<Account> {
    match s {
        "external_cash" => Ok(Account::ExternalCash),
        "platform_fee" => Ok(Account::PlatformFee),
        _ => match s.split_once(':') {
            Some(("buyer", id)) => Ok(Account::Buyer(AccountId(account_id(field, id)?))),
            Some(("supplier", id)) => Ok(Account::Supplier(AccountId(account_id(field, id)?))),
            _ => Err(ApiError::invalid(
                field,
                "invalid_account",
                "an account is external_cash, platform_fee, buyer:<id> or supplier:<id>",
            )),
        },
    }
}

/// A body whose fields do not fit its kind: 422 (the schema cannot say which fields each
/// kind takes, so a body it allows is refused by this rule, never 400).
fn misfit(field: &'static str, message: String) -> ApiError {
    ApiError {
        field: Some(field),
        ..ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_adjustment",
            message,
        )
    }
}

/// The adjustment's kind with its accounts, from the body.
fn kind_of(r: &AdjustmentRequest) -> ApiResult<AdjustmentKind> {
    let correction = r.kind == AdjustmentKindDto::Correction;
    let not_for = |field: &'static str| {
        misfit(
            field,
            format!(
                "{field} applies to {} adjustments only",
                if correction { "other" } else { "correction" }
            ),
        )
    };
    if correction {
        if r.account.is_some() {
            return Err(not_for("account"));
        }
        let side = |field: &'static str, v: &Option<String>| {
            let s = v
                .as_deref()
                .ok_or_else(|| misfit(field, format!("a correction needs {field}")))?;
            ledger_account(field, s)
        };
        return Ok(AdjustmentKind::Correction {
            debit: side("debit", &r.debit)?,
            credit: side("credit", &r.credit)?,
        });
    }
    if r.debit.is_some() {
        return Err(not_for("debit"));
    }
    if r.credit.is_some() {
        return Err(not_for("credit"));
    }
    let id = AccountId(account_id(
        "account",
        r.account
            .as_deref()
            .ok_or_else(|| misfit("account", "this adjustment needs account".into()))?,
    )?);
    Ok(match r.kind {
        AdjustmentKindDto::GoodwillCredit => AdjustmentKind::GoodwillCredit { buyer: id },
        AdjustmentKindDto::Refund => AdjustmentKind::Refund { buyer: id },
        AdjustmentKindDto::SlaCashOut => AdjustmentKind::SlaCashOut { buyer: id },
        AdjustmentKindDto::WriteOff | AdjustmentKindDto::Correction => {
            AdjustmentKind::WriteOff { supplier: id }
        }
    })
}

/// 400 `code` naming `field` when `s` holds a control character (Unicode `Cc`: newlines and
/// tabs too): free text is one line of printable text.
/// Whether `c` reorders how text displays (Unicode bidirectional embeddings, overrides and
/// isolates, U+202A–U+202E and U+2066–U+2069): in a memo on a finance document it can make the
/// text read as something else (found in issue 25's review: U+202E in a goodwill reason
/// reached the credit note).
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

fn one_line(field: &'static str, code: &'static str, s: &str) -> ApiResult<()> {
    match s.chars().find(|c| c.is_control() || is_bidi_control(*c)) {
        None => Ok(()),
        Some(c) if is_bidi_control(c) => Err(ApiError::invalid(
            field,
            code,
            format!(
                "{field} holds U+{:04X}, a character that reorders how text displays: plain \
                 text only on finance documents",
                u32::from(c)
            ),
        )),
        Some(c) => Err(ApiError::invalid(
            field,
            code,
            format!(
                "{field} holds the control character U+{:04X}: one line of printable text, \
                 without newlines or tabs",
                u32::from(c)
            ),
        )),
    }
}

/// Validates the body into an adjustment named `key` (shape: 400).
fn adjustment_of(r: &AdjustmentRequest, key: String) -> ApiResult<Adjustment> {
    let amount = r.amount.0;
    if amount <= rust_decimal::Decimal::ZERO || amount.scale() > 2 {
        return Err(ApiError::invalid(
            "amount",
            "invalid_amount",
            "amount is CNY > 0 with at most 2 decimals",
        ));
    }
    if r.reason.is_empty() || r.reason.chars().count() > MAX_REASON_CHARS {
        return Err(ApiError::invalid(
            "reason",
            "invalid_reason",
            format!("reason is 1..={MAX_REASON_CHARS} characters"),
        ));
    }
    one_line("reason", "invalid_reason", &r.reason)?;
    if r.reason.trim().is_empty() {
        return Err(ApiError {
            field: Some("reason"),
            ..ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_reason",
                "reason is blank: say why",
            )
        });
    }
    if r.reference
        .as_ref()
        .is_some_and(|s| s.chars().count() > MAX_REFERENCE_CHARS)
    {
        return Err(ApiError::invalid(
            "reference",
            "invalid_reference",
            format!("reference is at most {MAX_REFERENCE_CHARS} characters"),
        ));
    }
    if let Some(reference) = &r.reference {
        one_line("reference", "invalid_reference", reference)?;
    }
    Ok(Adjustment {
        key,
        kind: kind_of(r)?,
        amount,
        reason: r.reason.clone(),
        reference: r.reference.clone(),
    })
}

/// 404 unless each buyer or supplier account the adjustment names exists with that role.
async fn check_accounts(api: &Api, kind: &AdjustmentKind) -> ApiResult<()> {
    let (debit, credit) = kind.accounts();
    for a in [debit, credit] {
        let (id, want) = match a {
            Account::Buyer(id) => (id.0, Role::Buyer),
            Account::Supplier(id) => (id.0, Role::Supplier),
            _ => continue,
        };
        let role = api
            .read(move |m, _| m.accounts().get(id).map(|a| a.role))
            .await?;
        if role != Some(want) {
            return Err(ApiError::not_found(want.as_str()));
        }
    }
    Ok(())
}

/// `POST /v1/finance/adjustments` → 201 the adjustment as posted.
#[utoipa::path(post, path = "/v1/finance/adjustments", request_body = AdjustmentRequest,
    params(FinanceKey),
    responses(
        (status = 201, description = "Posted (or, for a retried key and body, posted before).",
            body = AdjustmentDone),
        (status = 400, description = "`bad_json`, `invalid_amount`, `invalid_reason` (over 500 \
            characters, or a control character), `invalid_reference` (over 200 characters, or \
            a control character), `invalid_account`, `missing_idempotency_key`, \
            `invalid_idempotency_key`", body = ErrorBody),
        (status = 403, description = "`forbidden`: not a finance or admin key", body = ErrorBody),
        (status = 404, description = "`not_found`: no buyer or supplier with this id",
            body = ErrorBody),
        (status = 409, description = "`idempotency_conflict` (this key named another \
            adjustment), `idempotency_in_flight`", body = ErrorBody),
        (status = 422, description = "`invalid_adjustment` (a field of another kind, or one \
            missing; a reference `period:<id>` that names no closed period), `invalid_reason` \
            (blank); the ledger's refusal: `ledger_rejected` (more than the balance, a \
            correction within one account), `sla_cash_out_exceeded`, \
            `write_off_exceeds_debt`", body = ErrorBody)),
    security(("bearer" = [])), tag = "finance")]
pub async fn adjust(
    api: web::Data<Api>,
    p: Principal,
    req: HttpRequest,
    body: web::Payload,
) -> ApiResult<HttpResponse> {
    p.require(&[Role::Finance, Role::Admin])?;
    let bytes = read_body(&req, body).await?;
    let key = crate::api::idempotency::required_key_of(&req, "adjustments and closes")?;
    api.idem
        .run(&req, p.account, Some(key.clone()), &bytes, async {
            let r: AdjustmentRequest = parse_json(&bytes)?;
            let adjustment = adjustment_of(&r, format!("adjust:{key}"))?;
            check_accounts(&api, &adjustment.kind).await?;
            let (debit, credit) = adjustment.kind.accounts();
            let (amount, memo) = (money(adjustment.amount), adjustment.memo());
            let c = api.submit_as(&p, Op::Adjust(Box::new(adjustment))).await?;
            if let Some(refusal) = &c.outcome.refusal {
                return Err(refused(refusal));
            }
            let done = AdjustmentDone {
                kind: r.kind,
                debit: debit.to_string(),
                credit: credit.to_string(),
                amount,
                memo,
                seq: c.seq,
            };
            Ok((StatusCode::CREATED, done))
        })
        .await
}

/// The wire view of a closed period.
fn period_view(p: &settlement::ClosedPeriod) -> ClosedPeriodView {
    ClosedPeriodView {
        id: p.id.0,
        from_ms: p.from_ms,
        to_ms: p.to_ms,
        closed_at_ms: p.closed_at_ms,
        invoices: p
            .invoices
            .iter()
            .map(|(a, n)| (a.0.to_string(), *n))
            .collect(),
        statements: p
            .statements
            .iter()
            .map(|(a, n)| (a.0.to_string(), *n))
            .collect(),
        credit_notes: p
            .credit_notes
            .iter()
            .map(|c| CreditNoteView {
                account: c.buyer.0.to_string(),
                number: c.number,
                corrects: DocumentRef {
                    period: c.corrects.period.0,
                    number: c.corrects.number,
                },
                gross: money(-c.gross),
            })
            .collect(),
    }
}

/// `POST /v1/finance/periods` → 201 the closed period.
#[utoipa::path(post, path = "/v1/finance/periods", request_body = ClosePeriodRequest,
    params(FinanceKey),
    responses(
        (status = 201, description = "Closed (or, for a retried key and body, closed before): \
            nothing posts into it from now on, and its invoices and statements are numbered.",
            body = ClosedPeriodView),
        (status = 400, description = "`bad_json`, `invalid_period` (a time of another shape), \
            `invalid_time_zone`, `missing_idempotency_key`, `invalid_idempotency_key`",
            body = ErrorBody),
        (status = 403, description = "`forbidden`: not a finance or admin key", body = ErrorBody),
        (status = 409, description = "`idempotency_conflict` (this key closed another \
            period), `idempotency_in_flight`", body = ErrorBody),
        (status = 422, description = "`invalid_period` (`from` not before `to`, `from` \
            before 1970-01-01T00:00:00Z, or no instant), `period_not_ended` (`to` after now), `close_not_contiguous` (`from` is \
            not where the latest closed period ended), `ledger_rejected`", body = ErrorBody)),
    security(("bearer" = [])), tag = "finance")]
pub async fn close_period(
    api: web::Data<Api>,
    p: Principal,
    req: HttpRequest,
    body: web::Payload,
) -> ApiResult<HttpResponse> {
    p.require(&[Role::Finance, Role::Admin])?;
    let bytes = read_body(&req, body).await?;
    let key = crate::api::idempotency::required_key_of(&req, "adjustments and closes")?;
    api.idem
        .run(&req, p.account, Some(key.clone()), &bytes, async {
            let r: ClosePeriodRequest = parse_json(&bytes)?;
            let tz_name =
                r.tz.clone()
                    .unwrap_or_else(|| settlement::DEFAULT_TIME_ZONE.to_string());
            let tz = settlement::reports::parse_tz(&tz_name)
                .map_err(|e| ApiError::invalid("tz", "invalid_time_zone", e.to_string()))?;
            let from_ms = crate::api::reports::parse_time("from", &r.from, tz)?;
            let to_ms = crate::api::reports::parse_time("to", &r.to, tz)?;
            if from_ms < 0 {
                return Err(ApiError {
                    field: Some("from"),
                    ..ApiError::new(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "invalid_period",
                        format!(
                            "from is {from_ms} ms, before 1970-01-01T00:00:00Z: the ledger \
                             keeps no time before the Unix epoch, so a period starts at or \
                             after it"
                        ),
                    )
                });
            }
            if from_ms >= to_ms {
                return Err(ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "invalid_period",
                    "from must be before to",
                ));
            }
            let ledger_key = format!("close:{key}");
            let c = api
                .submit_as(
                    &p,
                    Op::ClosePeriod {
                        key: ledger_key.clone(),
                        from_ms,
                        to_ms,
                    },
                )
                .await?;
            if let Some(r) = &c.outcome.refusal {
                return Err(refused(r));
            }
            let view = api
                .read(move |m, _| {
                    m.ledger()
                        .closed_periods()
                        .iter()
                        .find(|p| p.key == ledger_key)
                        .map(period_view)
                })
                .await?
                .ok_or_else(|| {
                    ApiError::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "internal",
                        "the closed period is missing",
                    )
                })?;
            Ok((StatusCode::CREATED, view))
        })
        .await
}

/// `GET /v1/finance/periods` → the closed periods, oldest first.
#[utoipa::path(get, path = "/v1/finance/periods",
    responses(
        (status = 200, description = "The closed periods.", body = ClosedPeriods),
        (status = 403, description = "`forbidden`: not a finance or admin key", body = ErrorBody)),
    security(("bearer" = [])), tag = "finance")]
pub async fn periods(api: web::Data<Api>, p: Principal) -> ApiResult<HttpResponse> {
    p.require(&[Role::Finance, Role::Admin])?;
    let periods = api
        .read(|m, _| {
            m.ledger()
                .closed_periods()
                .iter()
                .map(period_view)
                .collect()
        })
        .await?;
    Ok(HttpResponse::Ok().json(ClosedPeriods { periods }))
}

/// Longest legal name and bank name of tax details, characters.
pub const MAX_TAX_NAME_CHARS: usize = 100;
/// Longest registered address of tax details, characters.
pub const MAX_TAX_ADDRESS_CHARS: usize = 200;
/// Telephone of tax details: this many characters at least and at most.
pub const TAX_PHONE_CHARS: std::ops::RangeInclusive<usize> = 5..=40;
/// Bank account of tax details: this many digits at least and at most (34: an IBAN's most).
pub const TAX_BANK_ACCOUNT_DIGITS: std::ops::RangeInclusive<usize> = 6..=34;

/// 400 `invalid_tax_details` naming `field`.
fn bad_tax(field: &'static str, message: String) -> ApiError {
    ApiError::invalid(field, "invalid_tax_details", message)
}

/// A free-text field of tax details: at most `max` characters on one line.
fn tax_text(field: &'static str, s: &str, max: usize) -> ApiResult<String> {
    if s.chars().count() > max {
        return Err(bad_tax(
            field,
            format!("{field} is at most {max} characters"),
        ));
    }
    one_line(field, "invalid_tax_details", s)?;
    Ok(s.to_string())
}

/// Validates tax details at the edge (docs/api.md §2.5): the schema's shapes are 400, a blank
/// legal name and a taxpayer id with a wrong check character 422 (`gateway/tests/openapi.rs`
/// holds each field's pattern to the 400s).
///
/// # Errors
/// 400 or 422 `invalid_tax_details` / `invalid_taxpayer_id`, naming the field.
pub fn tax_details_of(r: &TaxDetailsRequest) -> ApiResult<TaxDetails> {
    if r.legal_name.is_empty() {
        return Err(bad_tax(
            "legal_name",
            format!("legal_name is 1..={MAX_TAX_NAME_CHARS} characters"),
        ));
    }
    let name = tax_text("legal_name", &r.legal_name, MAX_TAX_NAME_CHARS)?;
    let shaped = r.taxpayer_id.chars().count() == crate::tax::TAXPAYER_ID_CHARS
        && r.taxpayer_id
            .chars()
            .all(|c| crate::tax::TAXPAYER_ID_ALPHABET.contains(c));
    if !shaped {
        return Err(ApiError::invalid(
            "taxpayer_id",
            "invalid_taxpayer_id",
            "taxpayer_id is the 18-character unified social credit code (统一社会信用代码): \
             0-9 and capitals without I, O, S, V, Z",
        ));
    }
    let address = tax_text(
        "address",
        r.address.as_deref().unwrap_or(""),
        MAX_TAX_ADDRESS_CHARS,
    )?;
    let phone = r.phone.clone().unwrap_or_default();
    if r.phone.is_some()
        && (!TAX_PHONE_CHARS.contains(&phone.len())
            || !phone.bytes().all(|b| b"0123456789+()- ".contains(&b)))
    {
        return Err(bad_tax(
            "phone",
            format!(
                "phone is {}..={} of digits, spaces, +, -, ( and )",
                TAX_PHONE_CHARS.start(),
                TAX_PHONE_CHARS.end()
            ),
        ));
    }
    let bank = tax_text(
        "bank_name",
        r.bank_name.as_deref().unwrap_or(""),
        MAX_TAX_NAME_CHARS,
    )?;
    let bank_account = r.bank_account.clone().unwrap_or_default();
    if r.bank_account.is_some()
        && (!TAX_BANK_ACCOUNT_DIGITS.contains(&bank_account.len())
            || !bank_account.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(bad_tax(
            "bank_account",
            format!(
                "bank_account is {}..={} digits",
                TAX_BANK_ACCOUNT_DIGITS.start(),
                TAX_BANK_ACCOUNT_DIGITS.end()
            ),
        ));
    }
    let refused = |field: &'static str, code: &'static str, message: String| ApiError {
        field: Some(field),
        ..ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, code, message)
    };
    if name.trim().is_empty() {
        return Err(refused(
            "legal_name",
            "invalid_tax_details",
            "legal_name is blank: the name the documents print".into(),
        ));
    }
    if let Some(e) = crate::tax::taxpayer_id_error(&r.taxpayer_id) {
        return Err(refused("taxpayer_id", "invalid_taxpayer_id", e));
    }
    Ok(TaxDetails {
        name,
        taxpayer_id: r.taxpayer_id.clone(),
        address,
        phone,
        bank,
        bank_account,
    })
}

/// `PUT /v1/finance/accounts/{id}/tax-details` → 200 the details as recorded.
#[utoipa::path(put, path = "/v1/finance/accounts/{id}/tax-details",
    request_body = TaxDetailsRequest,
    params(("id" = String, Path, description = "The buyer's or supplier's account id.",
        pattern = "^[0-9]{1,20}$")),
    responses(
        (status = 200, description = "Recorded (replacing any earlier details): the \
            documents of periods closed from now on print them; those of periods already \
            closed keep the details frozen at their close.", body = TaxDetailsView),
        (status = 400, description = "`bad_json`, `invalid_tax_details` (a field over its \
            length, a control character, a phone or bank account of another shape; `field` \
            names it), `invalid_taxpayer_id` (not 18 characters of the code's alphabet)",
            body = ErrorBody),
        (status = 403, description = "`forbidden`: not a finance or admin key", body = ErrorBody),
        (status = 404, description = "`not_found`: no account with this id", body = ErrorBody),
        (status = 422, description = "`invalid_tax_details` (a blank legal name), \
            `invalid_taxpayer_id` (a wrong check character), `wrong_role` (a finance or admin \
            account: it gets no documents)", body = ErrorBody)),
    security(("bearer" = [])), tag = "finance")]
pub async fn set_tax_details(
    api: web::Data<Api>,
    p: Principal,
    id: web::Path<String>,
    req: HttpRequest,
    body: web::Payload,
) -> ApiResult<HttpResponse> {
    p.require(&[Role::Finance, Role::Admin])?;
    let id = crate::api::path_id(&id, "account")?;
    let bytes = read_body(&req, body).await?;
    let r: TaxDetailsRequest = parse_json(&bytes)?;
    let details = tax_details_of(&r)?;
    let c = api
        .submit_as(
            &p,
            Op::SetTaxDetails {
                account: id,
                details,
            },
        )
        .await?;
    if let Some(refusal) = &c.outcome.refusal {
        return Err(match refusal.code {
            "unknown_account" => ApiError::not_found("account"),
            code => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                code,
                refusal.message.clone(),
            ),
        });
    }
    Ok(HttpResponse::Ok().json(TaxDetailsView {
        account_id: id.to_string(),
        details: r,
        seq: c.seq,
    }))
}

/// Where the invoice PDF's CJK font is read from by default: Debian's `fonts-wqy-microhei`
/// (Apache-2.0 or GPL-3+ with the font-embedding exception; `.ci/run` installs it).
pub const DEFAULT_PDF_FONT_PATH: &str = "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc";

/// A party's tax details (开票信息), as printed on invoices: the platform's in the
/// configuration, an account's as set by [`set_tax_details`].
pub use crate::tax::TaxDetails;

/// Invoice settings (`[api.invoice]` in gpux.toml; docs/settlement.md "Invoices").
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InvoiceConfig {
    /// VAT rate, a fraction in [0, 1) (default 0.06: 6 % for information technology
    /// services, docs/settlement.md "Invoices" gives the source).
    pub vat_rate: rust_decimal::Decimal,
    /// The platform's tax details (the seller on buyer invoices, the buyer on self-billing).
    pub platform: TaxDetails,
    /// The CJK font the PDF embeds (a TrueType collection or font file).
    pub font_path: std::path::PathBuf,
    /// The face of `font_path` to use (0 for the first).
    pub font_index: u32,
}

impl Default for InvoiceConfig {
    fn default() -> Self {
        InvoiceConfig {
            vat_rate: settlement::reports::invoice::DEFAULT_VAT_RATE,
            platform: TaxDetails {
                name: "GPU-capacity exchange (configure api.invoice.platform)".into(),
                ..TaxDetails::default()
            },
            font_path: DEFAULT_PDF_FONT_PATH.into(),
            font_index: 0,
        }
    }
}

/// Query of an invoice.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct InvoiceQuery {
    /// `json` (default; so is an empty value, `?format=`), `csv`, `xlsx` or `pdf`.
    #[param(value_type = Option<InvoiceFormat>, inline)]
    pub format: Option<String>,
    /// IANA time zone the document prints dates in (default Asia/Shanghai).
    #[param(value_type = Option<String>)]
    pub tz: Option<String>,
}

/// An invoice's rendering.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InvoiceFormat {
    /// Pretty-printed JSON.
    Json,
    /// CSV.
    Csv,
    /// An Excel workbook.
    Xlsx,
    /// A printable A4 PDF.
    Pdf,
}

/// The PDF font, read once.
async fn pdf_font(api: &Api) -> ApiResult<Arc<settlement::reports::pdf::PdfFont>> {
    let cfg = api.config.invoice.clone();
    api.pdf_font
        .get_or_try_init(|| async move {
            let path = cfg.font_path.clone();
            let font = web::block(move || {
                let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                settlement::reports::pdf::PdfFont::new(bytes, cfg.font_index)
                    .map_err(|e| e.to_string())
            })
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r);
            font.map(Arc::new).map_err(|e| {
                tracing::error!(error = %e, "invoice PDF font");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "pdf_unavailable",
                    format!(
                        "the invoice PDF font is not readable ({e}); set api.invoice.font_path"
                    ),
                )
            })
        })
        .await
        .cloned()
}

/// `GET /v1/finance/periods/{id}/invoices/{account}?format=&tz=` → the account's document of
/// a closed period: a buyer's invoice or a supplier's self-billing statement, with VAT
/// (docs/settlement.md "Invoices"), regenerated byte for byte from the closed period.
#[utoipa::path(get, path = "/v1/finance/periods/{id}/invoices/{account}",
    params(("id" = String, Path, description = "The closed period's id.",
            pattern = "^[0-9]{1,20}$"),
        ("account" = String, Path, description = "The buyer's or supplier's account id.",
            pattern = "^[0-9]{1,20}$"),
        InvoiceQuery),
    responses(
        (status = 200, description = "The document: JSON, CSV, an XLSX workbook or a PDF \
            (`Content-Disposition: attachment; filename=\"invoice-{number}.{ext}\"`).",
            headers(("Content-Disposition" = String,
                description = "`attachment; filename=\"{kind}-{number}.{ext}\"`")),
            content(
                (crate::api::reports::ReportJson = "application/json"),
                (String = "text/csv; charset=utf-8"),
                (crate::api::reports::Xlsx = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"),
                (Pdf = "application/pdf"))),
        (status = 400, description = "`bad_query`, `invalid_format`, `invalid_time_zone`",
            body = ErrorBody),
        (status = 404, description = "`not_found`: no such closed period, no such account (or \
            another's, for a buyer or supplier key), or no document of the account in the \
            period (it had no activity there)", body = ErrorBody),
        (status = 503, description = "`pdf_unavailable`: the PDF font is not installed",
            body = ErrorBody)),
    security(("bearer" = [])), tag = "finance")]
pub async fn invoice(
    api: web::Data<Api>,
    p: Principal,
    path: web::Path<(String, String)>,
    q: web::Query<InvoiceQuery>,
) -> ApiResult<HttpResponse> {
    let (period_id, account) = path.into_inner();
    let (period_id, account) = document_path(&p, &period_id, &account)?;
    let format = format_of(q.format.as_deref())?;
    let tz_name = tz_of(q.tz.as_deref())?;
    let cfg = api.config.invoice.clone();
    let document = api
        .read(
            move |m, _| -> ApiResult<settlement::reports::invoice::Invoice> {
                let ledger = m.ledger();
                let closed = ledger
                    .closed_period(settlement::PeriodId(period_id))
                    .ok_or_else(|| ApiError::not_found("period"))?;
                let a = m
                    .accounts()
                    .get(account)
                    .ok_or_else(|| ApiError::not_found("account"))?;
                let period = settlement::Period::new(closed.from_ms, closed.to_ms, &tz_name)
                    .map_err(|e| ApiError::invalid("tz", "invalid_time_zone", e.to_string()))?;
                let id = AccountId(account);
                let number = match a.role {
                    Role::Buyer => closed.invoices.get(&id),
                    Role::Supplier => closed.statements.get(&id),
                    Role::Finance | Role::Admin => None,
                }
                .copied()
                .ok_or_else(|| ApiError::not_found("invoice"))?;
                let terms = terms_of(m, &cfg, closed, a, number);
                let made = if a.role == Role::Buyer {
                    ledger.buyer_invoice(id, &period, &terms)
                } else {
                    ledger.supplier_self_billing(id, &period, &terms)
                };
                made.map_err(|e| report_failed(e.to_string()))
            },
        )
        .await??;
    render(
        &api,
        document,
        format,
        &format!("invoice-{period_id}-{account}"),
    )
    .await
}

/// Checks a document path's period and account: 404 for ids of another shape, and for
/// another account's documents unless the key is finance's or an admin's.
fn document_path(p: &Principal, period_id: &str, account: &str) -> ApiResult<(u32, u64)> {
    let period_id = crate::api::dto::parse_id(period_id)
        .and_then(|id| u32::try_from(id).ok())
        .ok_or_else(|| ApiError::not_found("period"))?;
    let account =
        crate::api::dto::parse_id(account).ok_or_else(|| ApiError::not_found("account"))?;
    if !matches!(p.role, Role::Finance | Role::Admin) && account != p.account {
        return Err(ApiError::not_found("account"));
    }
    Ok((period_id, account))
}

/// A document's `format`: 400 `invalid_format` for another value.
fn format_of(format: Option<&str>) -> ApiResult<InvoiceFormat> {
    match format {
        None | Some("" | "json") => Ok(InvoiceFormat::Json),
        Some("csv") => Ok(InvoiceFormat::Csv),
        Some("xlsx") => Ok(InvoiceFormat::Xlsx),
        Some("pdf") => Ok(InvoiceFormat::Pdf),
        Some(_) => Err(ApiError::invalid(
            "format",
            "invalid_format",
            "format is json, csv, xlsx or pdf",
        )),
    }
}

/// A document's `tz` (default Asia/Shanghai): 400 `invalid_time_zone` for an unknown zone.
fn tz_of(tz: Option<&str>) -> ApiResult<String> {
    let tz_name = tz.unwrap_or(settlement::DEFAULT_TIME_ZONE).to_string();
    settlement::reports::parse_tz(&tz_name)
        .map_err(|e| ApiError::invalid("tz", "invalid_time_zone", e.to_string()))?;
    Ok(tz_name)
}

fn report_failed(e: String) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "report_failed", e)
}

/// The terms of a closed period's document for `account`: the details frozen at the close,
/// never the current ones (closed documents never change); without any, the account's name
/// stands. Issued at the close.
fn terms_of(
    m: &crate::market::Market,
    cfg: &InvoiceConfig,
    closed: &settlement::ClosedPeriod,
    a: &crate::accounts::AccountRecord,
    number: u64,
) -> settlement::reports::invoice::InvoiceTerms {
    let counterparty = m
        .tax()
        .at_close(closed.id.0, a.id)
        .map_or_else(|| TaxDetails::named(&a.name).party(), TaxDetails::party);
    settlement::reports::invoice::InvoiceTerms {
        number,
        issued_ms: closed.closed_at_ms,
        vat_rate: cfg.vat_rate,
        platform: cfg.platform.party(),
        counterparty,
    }
}

/// A document in `format`, as an attachment named `{name}.{ext}`.
async fn render(
    api: &Api,
    document: settlement::reports::invoice::Invoice,
    format: InvoiceFormat,
    name: &str,
) -> ApiResult<HttpResponse> {
    let failed = report_failed;
    let (ct, ext, bytes) = match format {
        InvoiceFormat::Json => (
            "application/json",
            "json",
            settlement::reports::to_json(&document).map_err(|e| failed(e.to_string()))?,
        ),
        InvoiceFormat::Csv => (
            "text/csv; charset=utf-8",
            "csv",
            settlement::reports::csv::to_csv(&document.table())
                .map_err(|e| failed(e.to_string()))?,
        ),
        InvoiceFormat::Xlsx => {
            let table = document.table();
            let bytes = web::block(move || settlement::reports::xlsx::to_xlsx(&[table]))
                .await
                .map_err(|e| failed(e.to_string()))?
                .map_err(|e| failed(e.to_string()))?;
            (crate::api::reports::XLSX, "xlsx", bytes)
        }
        InvoiceFormat::Pdf => {
            let font = pdf_font(api).await?;
            let bytes = web::block(move || settlement::reports::pdf::invoice_pdf(&document, &font))
                .await
                .map_err(|e| failed(e.to_string()))?
                .map_err(|e| failed(e.to_string()))?;
            ("application/pdf", "pdf", bytes)
        }
    };
    Ok(HttpResponse::Ok()
        .content_type(ct)
        .insert_header((
            "Content-Disposition",
            format!("attachment; filename=\"{name}.{ext}\""),
        ))
        .body(bytes))
}

/// Query of a credit note.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct CreditNoteQuery {
    /// `json` (default; so is an empty value), `csv`, `xlsx` or `pdf`.
    #[param(value_type = Option<InvoiceFormat>, inline)]
    pub format: Option<String>,
    /// IANA time zone the document prints dates in (default Asia/Shanghai).
    #[param(value_type = Option<String>)]
    pub tz: Option<String>,
    /// The credit-note number; needed only when the buyer has several in the period (one
    /// per corrected invoice).
    #[param(value_type = Option<String>, pattern = "^[0-9]{1,20}$")]
    pub number: Option<String>,
}

/// `GET /v1/finance/periods/{id}/credit-notes/{account}?format=&tz=&number=` → a buyer's
/// credit note (红字发票) numbered at the close of that period, against the invoice it
/// corrects (docs/settlement.md "Credit notes"), regenerated byte for byte.
#[utoipa::path(get, path = "/v1/finance/periods/{id}/credit-notes/{account}",
    params(("id" = String, Path, description = "The closed period's id.",
            pattern = "^[0-9]{1,20}$"),
        ("account" = String, Path, description = "The buyer's account id.",
            pattern = "^[0-9]{1,20}$"),
        CreditNoteQuery),
    responses(
        (status = 200, description = "The credit note: JSON, CSV, an XLSX workbook or a PDF \
            (`Content-Disposition: attachment; filename=\"credit-note-{number}.{ext}\"`); \
            amounts negative, `corrects` names the invoice.",
            headers(("Content-Disposition" = String,
                description = "`attachment; filename=\"credit-note-{number}.{ext}\"`")),
            content(
                (crate::api::reports::ReportJson = "application/json"),
                (String = "text/csv; charset=utf-8"),
                (crate::api::reports::Xlsx = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"),
                (Pdf = "application/pdf"))),
        (status = 400, description = "`bad_query`, `invalid_format`, `invalid_time_zone`, \
            `invalid_number` (not 1..=20 digits)", body = ErrorBody),
        (status = 404, description = "`not_found`: no such closed period, no such account (or \
            another's, for a buyer or supplier key), or no credit note of the account (of \
            that number) in the period", body = ErrorBody),
        (status = 409, description = "`number_required`: the buyer has several credit notes \
            in the period (the message lists their numbers); add `number`", body = ErrorBody),
        (status = 503, description = "`pdf_unavailable`: the PDF font is not installed",
            body = ErrorBody)),
    security(("bearer" = [])), tag = "finance")]
pub async fn credit_note(
    api: web::Data<Api>,
    p: Principal,
    path: web::Path<(String, String)>,
    q: web::Query<CreditNoteQuery>,
) -> ApiResult<HttpResponse> {
    let (period_id, account) = path.into_inner();
    let (period_id, account) = document_path(&p, &period_id, &account)?;
    let format = format_of(q.format.as_deref())?;
    let tz_name = tz_of(q.tz.as_deref())?;
    let wanted = match q.number.as_deref() {
        None => None,
        // 20 digits beyond u64 are the schema's and no credit note's number: 404 as missing.
        Some(n)
            if (1..=20).contains(&n.len())
                && n.bytes().all(|b| b.is_ascii_digit())
                && crate::api::dto::parse_id(n).is_none() =>
        {
            return Err(ApiError::not_found("credit note"));
        }
        Some(n) => Some(crate::api::dto::parse_id(n).ok_or_else(|| {
            ApiError::invalid("number", "invalid_number", "number is 1..=20 digits")
        })?),
    };
    let cfg = api.config.invoice.clone();
    let document = api
        .read(
            move |m, _| -> ApiResult<settlement::reports::invoice::Invoice> {
                let ledger = m.ledger();
                let closed = ledger
                    .closed_period(settlement::PeriodId(period_id))
                    .ok_or_else(|| ApiError::not_found("period"))?;
                let a = m
                    .accounts()
                    .get(account)
                    .ok_or_else(|| ApiError::not_found("account"))?;
                let id = AccountId(account);
                let numbers: Vec<u64> = closed
                    .credit_notes
                    .iter()
                    .filter(|c| c.buyer == id && wanted.is_none_or(|n| n == c.number))
                    .map(|c| c.number)
                    .collect();
                let number = match numbers.as_slice() {
                    [] => return Err(ApiError::not_found("credit note")),
                    [n] => *n,
                    several => {
                        return Err(ApiError::new(
                            StatusCode::CONFLICT,
                            "number_required",
                            format!(
                                "account {account} has credit notes {several:?} in period \
                                 {period_id}, one per corrected invoice: add ?number="
                            ),
                        ));
                    }
                };
                let period = settlement::Period::new(closed.from_ms, closed.to_ms, &tz_name)
                    .map_err(|e| ApiError::invalid("tz", "invalid_time_zone", e.to_string()))?;
                let terms = terms_of(m, &cfg, closed, a, number);
                ledger
                    .credit_note(id, &period, &terms)
                    .map_err(|e| report_failed(e.to_string()))
            },
        )
        .await??;
    let name = format!("credit-note-{}", document.number);
    render(&api, document, format, &name).await
}

/// The most documents `GET /v1/invoices` lists, newest period first (issue 25): about 8 years
/// of monthly documents for one account at one invoice, statement and credit note a month;
/// a finance key listing every account's sees the newest 500 and `truncated`.
pub const MAX_DOCUMENTS_LISTED: usize = 500;

/// Query of the documents list.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct DocumentsQuery {
    /// Finance and admin: only this account's documents (default: every account's). A buyer
    /// or supplier may name only itself (another account is 404).
    #[param(value_type = Option<String>, pattern = "^[0-9]{1,20}$")]
    pub account: Option<String>,
    /// IANA time zone of the local dates (default Asia/Shanghai).
    #[param(value_type = Option<String>)]
    pub tz: Option<String>,
}

/// `GET /v1/invoices?account=&tz=` → the documents of closed periods: a buyer's invoices and
/// credit notes, a supplier's self-billing statements (their own), or for finance and admin
/// every account's (or `account`'s); newest first, at most [`MAX_DOCUMENTS_LISTED`].
#[utoipa::path(get, path = "/v1/invoices", params(DocumentsQuery),
    responses(
        (status = 200, description = "The documents, newest period first, each with its \
            download path.", body = Documents),
        (status = 400, description = "`bad_query`, `invalid_account` (not 1..=20 digits), \
            `invalid_time_zone`", body = ErrorBody),
        (status = 404, description = "`not_found`: a buyer or supplier key naming another \
            account", body = ErrorBody)),
    security(("bearer" = [])), tag = "finance")]
pub async fn documents(
    api: web::Data<Api>,
    p: Principal,
    q: web::Query<DocumentsQuery>,
) -> ApiResult<HttpResponse> {
    let asked = match q.account.as_deref() {
        None => None,
        Some(s) => Some(account_id("account", s)?),
    };
    let staff = matches!(p.role, Role::Finance | Role::Admin);
    let only = match (staff, asked) {
        (true, a) => a,
        (false, Some(a)) if a != p.account => return Err(ApiError::not_found("account")),
        (false, _) => Some(p.account),
    };
    let tz_name = tz_of(q.tz.as_deref())?;
    let tz = settlement::reports::parse_tz(&tz_name)
        .map_err(|e| ApiError::invalid("tz", "invalid_time_zone", e.to_string()))?;
    // An account that does not exist is 404 for finance too, not an empty list (found in
    // issue 25's review), as it is for a buyer naming another account.
    let (documents, truncated) = api
        .read(move |m, _| {
            if let Some(a) = only
                && m.accounts().get(a).is_none()
            {
                return Err(ApiError::not_found("account"));
            }
            Ok(list_documents(m.ledger(), only, tz))
        })
        .await??;
    Ok(HttpResponse::Ok().json(Documents {
        time_zone: tz_name,
        documents,
        truncated,
    }))
}

/// The documents of closed periods (of `only`, if given), newest period first, at most
/// [`MAX_DOCUMENTS_LISTED`]; and whether more were left out.
fn list_documents(
    ledger: &settlement::Ledger,
    only: Option<u64>,
    tz: chrono_tz::Tz,
) -> (Vec<DocumentView>, bool) {
    let date = |ms: i64| {
        let s = settlement::reports::format_local(ms, tz);
        s.get(..10).unwrap_or(&s).to_string()
    };
    let keep = |a: &AccountId| only.is_none_or(|o| o == a.0);
    let mut out = Vec::new();
    for closed in ledger.closed_periods().iter().rev() {
        let (id, from, to) = (closed.id.0, closed.from_ms, closed.to_ms);
        let view = |kind, account: AccountId, number, gross, corrects, path| DocumentView {
            period: id,
            from_ms: from,
            to_ms: to,
            from_date: date(from),
            to_date: date(to - 1),
            closed_at_ms: closed.closed_at_ms,
            kind,
            account: account.0.to_string(),
            number,
            gross: money(gross),
            corrects,
            path,
        };
        let invoice_path = |a: AccountId| format!("/v1/finance/periods/{id}/invoices/{}", a.0);
        let invoices = closed
            .invoices
            .iter()
            .filter(|(a, _)| keep(a))
            .map(|(a, n)| {
                let gross = ledger.invoice_gross(*a, from, to);
                view(DocumentKind::Invoice, *a, *n, gross, None, invoice_path(*a))
            });
        let statements = closed
            .statements
            .iter()
            .filter(|(a, _)| keep(a))
            .map(|(a, n)| {
                let gross = ledger.self_billing_gross(*a, from, to);
                view(
                    DocumentKind::SelfBilling,
                    *a,
                    *n,
                    gross,
                    None,
                    invoice_path(*a),
                )
            });
        let credit_notes = closed
            .credit_notes
            .iter()
            .filter(|c| keep(&c.buyer))
            .map(|c| {
                let corrects = DocumentRef {
                    period: c.corrects.period.0,
                    number: c.corrects.number,
                };
                let path = format!(
                    "/v1/finance/periods/{id}/credit-notes/{}?number={}",
                    c.buyer.0, c.number
                );
                view(
                    DocumentKind::CreditNote,
                    c.buyer,
                    c.number,
                    -c.gross,
                    Some(corrects),
                    path,
                )
            });
        for d in invoices.chain(statements).chain(credit_notes) {
            if out.len() == MAX_DOCUMENTS_LISTED {
                return (out, true);
            }
            out.push(d);
        }
    }
    (out, false)
}

/// Schema of a PDF document: binary.
pub struct Pdf;

impl utoipa::PartialSchema for Pdf {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Binary)))
            .description(Some("A printable A4 PDF."))
            .into()
    }
}

impl utoipa::ToSchema for Pdf {}
