//! Finance (issue 17; docs/api.md §2.5, docs/settlement.md "Periods and close" and
//! "Adjustments and refunds"): adjustment and period-close requests, and their answers.

use crate::scalar::DecimalStr;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What an adjustment does (docs/settlement.md "Adjustments and refunds").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AdjustmentKindDto {
    /// A goodwill credit to a buyer's balance, borne by the platform fee account.
    GoodwillCredit,
    /// A refund of a buyer's balance to its bank account (at most the balance).
    Refund,
    /// The buyer's SLA credits paid out as cash (at most those not yet cashed out).
    SlaCashOut,
    /// A supplier's debt (negative payable) written off by the platform (at most the debt).
    WriteOff,
    /// A correction between two ledger accounts (`debit` → `credit`; not `sla_credits`).
    Correction,
}

/// `POST /v1/finance/adjustments` (finance and admin; the `Idempotency-Key` header names the
/// adjustment).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AdjustmentRequest {
    /// What it does.
    pub kind: AdjustmentKindDto,
    /// The buyer (goodwill_credit, refund, sla_cash_out) or supplier (write_off) account id;
    /// absent for a correction (422 `invalid_adjustment` otherwise).
    #[schema(value_type = Option<String>, pattern = "^[0-9]{1,20}$")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// A correction's account debited: `external_cash`, `platform_fee`, `buyer:<id>` or
    /// `supplier:<id>`; absent for the other kinds (422 `invalid_adjustment` otherwise).
    #[schema(pattern = "^(?:external_cash|platform_fee|(?:buyer|supplier):[0-9]{1,20})$")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debit: Option<String>,
    /// A correction's account credited (as `debit`); absent for the other kinds.
    #[schema(pattern = "^(?:external_cash|platform_fee|(?:buyer|supplier):[0-9]{1,20})$")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credit: Option<String>,
    /// CNY, a decimal string in (0, 10^15] with at most 2 decimals written.
    #[schema(value_type = String, example = "50.00", max_length = 40, pattern = "^(?:[1-9][0-9]{0,14}(?:\\.[0-9]{1,2})?|1000000000000000(?:\\.00?)?|0\\.(?:[1-9][0-9]?|0[1-9]))$")]
    pub amount: DecimalStr,
    /// Why, 1..=500 characters on one line (printed on the statements it touches): control
    /// characters (newlines and tabs included) are 400 `invalid_reason`; a blank one is 422
    /// `invalid_reason`.
    #[schema(
        min_length = 1,
        max_length = 500,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub reason: String,
    /// What it refers to (a ticket, a lease, or `period:<id>` for a closed period it
    /// corrects), at most 200 characters on one line (no control characters).
    #[schema(max_length = 200, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
}

/// `POST /v1/finance/adjustments` → 201: the adjustment as posted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AdjustmentDone {
    /// What it did.
    pub kind: AdjustmentKindDto,
    /// Account debited, as the ledger prints it (`buyer:2`, `platform_fee`, …).
    pub debit: String,
    /// Account credited.
    pub credit: String,
    /// CNY.
    pub amount: String,
    /// The memo the statements print: `<kind>: <reason> [<reference>]`.
    pub memo: String,
    /// Journal sequence number.
    pub seq: u64,
}

/// `POST /v1/finance/periods` (finance and admin; the `Idempotency-Key` header names the
/// close): the period [`from`, `to`) to close, as local dates or date-times in `tz`, or ms
/// since epoch (the forms of the reports' `from`/`to`).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClosePeriodRequest {
    /// Start (inclusive): must be where the latest closed period ended (the first close may
    /// start anywhere).
    #[schema(
        pattern = "^(?:[0-9]{1,20}|[0-9]{4}-[0-9]{2}-[0-9]{2}(?:T[0-9]{2}:[0-9]{2}:[0-9]{2})?)$"
    )]
    pub from: String,
    /// End (exclusive): not after now.
    #[schema(
        pattern = "^(?:[0-9]{1,20}|[0-9]{4}-[0-9]{2}-[0-9]{2}(?:T[0-9]{2}:[0-9]{2}:[0-9]{2})?)$"
    )]
    pub to: String,
    /// IANA time zone of local dates (default Asia/Shanghai).
    #[schema(extensions(("x-gpux-enum" = json!("tz"))))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
}

/// A closed period (`POST /v1/finance/periods` → 201, and `GET /v1/finance/periods`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ClosedPeriodView {
    /// Period id: 1, 2, 3… in close order.
    pub id: u32,
    /// Start (inclusive), ms since epoch.
    pub from_ms: i64,
    /// End (exclusive), ms since epoch.
    pub to_ms: i64,
    /// When it was closed, ms since epoch.
    pub closed_at_ms: i64,
    /// Buyer invoices numbered at the close: buyer account id → invoice number (gapless
    /// across closes).
    pub invoices: std::collections::BTreeMap<String, u64>,
    /// Supplier self-billing statements numbered at the close: supplier account id → number.
    pub statements: std::collections::BTreeMap<String, u64>,
    /// Credit notes (红字发票, issue 25) numbered at the close: a buyer's goodwill and SLA
    /// credits of the period against the invoice they correct (docs/settlement.md "Credit
    /// notes"), by buyer then corrected invoice.
    #[serde(default)]
    pub credit_notes: Vec<CreditNoteView>,
}

/// A credit note numbered at a close (docs/settlement.md "Credit notes").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CreditNoteView {
    /// The buyer's account id.
    pub account: String,
    /// Credit-note number (its own gapless sequence).
    pub number: u64,
    /// The invoice it corrects.
    pub corrects: DocumentRef,
    /// Gross credited (价税合计), CNY, negative as the document prints it.
    pub gross: String,
}

/// An invoice named by its closed period and number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DocumentRef {
    /// The closed period's id.
    pub period: u32,
    /// The invoice number.
    pub number: u64,
}

/// Which finance document.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DocumentKind {
    /// A buyer's invoice.
    Invoice,
    /// A supplier's self-billing statement.
    SelfBilling,
    /// A buyer's credit note (红字发票).
    CreditNote,
}

/// One document of a closed period (`GET /v1/invoices`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DocumentView {
    /// The closed period's id.
    pub period: u32,
    /// Period start (inclusive), ms since epoch.
    pub from_ms: i64,
    /// Period end (exclusive), ms since epoch.
    pub to_ms: i64,
    /// Local date of the period start in `time_zone`, `YYYY-MM-DD`.
    pub from_date: String,
    /// Local date of the period's last millisecond in `time_zone` (inclusive), `YYYY-MM-DD`.
    pub to_date: String,
    /// When the period was closed (the documents' issue date), ms since epoch.
    pub closed_at_ms: i64,
    /// Which document.
    pub kind: DocumentKind,
    /// The buyer's or supplier's account id.
    pub account: String,
    /// Document number (each kind has its own gapless sequence).
    pub number: u64,
    /// Gross (价税合计), CNY: negative for a credit note.
    pub gross: String,
    /// Credit notes only: the invoice it corrects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corrects: Option<DocumentRef>,
    /// Where to download it (add `?format=pdf|csv|xlsx`): `/v1/finance/periods/{period}/
    /// invoices/{account}` or `…/credit-notes/{account}?number={number}`.
    pub path: String,
}

/// `GET /v1/invoices` → the documents of closed periods, newest first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Documents {
    /// The IANA zone of the local dates.
    pub time_zone: String,
    /// The documents, newest period first; within a period invoices and statements, then
    /// credit notes, by number.
    pub documents: Vec<DocumentView>,
    /// `true` when more documents exist than the list's bound (`MAX_DOCUMENTS_LISTED`):
    /// the oldest are left out.
    pub truncated: bool,
}

/// `GET /v1/finance/periods` → the closed periods, oldest first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ClosedPeriods {
    /// Closed periods.
    pub periods: Vec<ClosedPeriodView>,
}

/// An account's tax details (开票信息) as its invoices or self-billing statements print them:
/// `PUT /v1/finance/accounts/{id}/tax-details` (finance and admin) and its answer. Text fields
/// are one line: no control characters (tabs and newlines included).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TaxDetailsRequest {
    /// Legal name (名称), 1..=100 characters; a blank one is 422 `invalid_tax_details`.
    #[schema(
        min_length = 1,
        max_length = 100,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub legal_name: String,
    /// Taxpayer id: the 18-character unified social credit code (统一社会信用代码, GB
    /// 32100-2015) in capitals; a wrong check character (the 18th) is 422
    /// `invalid_taxpayer_id`.
    #[schema(
        min_length = 18,
        max_length = 18,
        pattern = "^[0-9A-HJ-NPQRTUWXY]{18}$",
        example = "91350100M000100Y43"
    )]
    pub taxpayer_id: String,
    /// Registered address (地址), at most 200 characters.
    #[schema(max_length = 200, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Telephone (电话): 5..=40 of digits, spaces, `+`, `-`, `(` and `)`.
    #[schema(
        min_length = 5,
        max_length = 40,
        pattern = "^[0-9+() -]{5,40}$",
        example = "021-61234567"
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phone: Option<String>,
    /// Bank (开户行), at most 100 characters.
    #[schema(max_length = 100, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bank_name: Option<String>,
    /// Bank account number (账号): 6..=34 digits.
    #[schema(min_length = 6, max_length = 34, pattern = "^[0-9]{6,34}$")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bank_account: Option<String>,
}

/// `PUT /v1/finance/accounts/{id}/tax-details` → 200: the details as recorded. Documents of
/// periods closed from now on print them; documents of periods already closed do not change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TaxDetailsView {
    /// The buyer's or supplier's account id.
    pub account_id: String,
    /// The details.
    pub details: TaxDetailsRequest,
    /// Journal sequence number of the change.
    pub seq: u64,
}
