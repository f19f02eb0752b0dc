//! Invoices (issue 17): per buyer per closed period, an invoice of the charges collected,
//! by SKU, with VAT; per supplier per closed period, a self-billing statement (自开/代开
//! payout statement) of its net earnings, by SKU, with VAT. docs/settlement.md "Invoices".
//!
//! * Inputs come in: the invoice number (`u64`, assigned gapless at close by the caller),
//!   the issue date (ms since epoch), both parties' tax details ([`TaxParty`]) and the VAT
//!   rate ([`InvoiceTerms`], default [`DEFAULT_VAT_RATE`] = 6 %). Settlement does no IO and
//!   knows no clock, so the same ledger, period and terms give byte-identical documents.
//! * Prices are VAT-inclusive (价税合计): a charge at the listed price is the gross amount;
//!   the net amount and VAT are carved out of it (`VAT = gross × rate / (1 + rate)`).
//! * Arithmetic (printed, exact to the fen): each line's gross is allocated
//!   ([`allocate_fen`]) to `round(Σ exact gross)`; each line's VAT is allocated from
//!   `gross_i × rate / (1 + rate)` to `round(total gross × rate / (1 + rate))`; each line's
//!   net is `gross − VAT`. So `Σ net + Σ VAT = Σ gross = total gross`, exactly, and per line
//!   `net + VAT = gross`.
//! * SLA credits, adjustments, uncollected charges (buyer) and SLA deductions,
//!   adjustments, payouts (supplier) are notes: they do not change the taxable amount.
//! * Filing fields (issue 25): each line carries the tax classification
//!   ([`TAX_CLASSIFICATION`], 税收分类编码简称 + 项目名称), the unit ([`UNIT`], 卡时 = one
//!   GPU-hour), the quantity (its GPU-hours) and the unit price net of VAT
//!   (`round(net / quantity, UNIT_PRICE_DP)`; informational, 金额 `net` is authoritative);
//!   the totals carry the gross in words ([`amount_in_words`], 价税合计大写); notes carry the
//!   adjustment's memo, never its idempotency key.
//! * Credit notes (红字, issue 25; docs/settlement.md "Credit notes"): [`Ledger::credit_note`]
//!   builds the credit note numbered at close ([`crate::CreditNoteRecord`]) against the
//!   invoice it corrects: one line per credit kind, VAT carved by the same rule, every amount
//!   negative, the credits as notes.
//! * Renderers: [`Invoice::table`] (CSV and XLSX like every report), [`super::to_json`],
//!   and [`super::pdf::invoice_pdf`] (printable, with an embedded CJK font).

use super::table::{Cell, RowBuilder, Table};
use super::{Period, PeriodInfo, format_local};
use crate::close::{CreditNoteRecord, InvoiceRef};
use crate::error::SettlementError;
use crate::ids::{Account, AccountId, TransferId};
use crate::ledger::{Ledger, MAX_TIME_MS, MIN_TIME_MS, TransferKind};
use crate::money::{FEN_DP, HOURS_DP, allocate, allocate_fen, round_dp};
use rust_decimal::Decimal;
use serde::Serialize;
use std::collections::BTreeMap;

/// The default VAT rate, 6 %: 现代服务 (信息技术服务) under the PRC VAT Law
/// (《中华人民共和国增值税法》, in force 2026-01-01, 第十条第三项; before it 财税〔2016〕36号
/// 附件1 第十五条 with the rates of 财政部 税务总局 海关总署公告2019年第39号). A fraction
/// (0.06), not a percentage. docs/settlement.md, "Invoices".
pub const DEFAULT_VAT_RATE: Decimal = Decimal::from_parts(6, 0, 0, false, 2);

/// The tax classification printed on every line (issue 25): 税收分类编码 简称
/// `信息技术服务` and the item name `GPU算力服务`, as a 数电发票 prints it.
pub const TAX_CLASSIFICATION: &str = "*信息技术服务*GPU算力服务";

/// The unit of a line's quantity (issue 25): 卡时, one GPU for one hour.
pub const UNIT: &str = "卡时";

/// Decimal places of a printed unit price (CNY per GPU-hour, net of VAT), issue 25.
pub const UNIT_PRICE_DP: u32 = 6;

/// The highest VAT rate accepted (exclusive): a rate is a fraction in [0, 1).
pub const MAX_VAT_RATE: Decimal = Decimal::ONE;

/// A party's tax details as printed on an invoice (开票信息). Any Unicode text: Chinese
/// names work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TaxParty {
    /// Legal name (名称), e.g. `上海算力科技有限公司`.
    pub name: String,
    /// Taxpayer id (纳税人识别号 / 统一社会信用代码), 18 characters for a company.
    pub taxpayer_id: String,
    /// Registered address (地址).
    pub address: String,
    /// Telephone (电话); may be empty.
    pub phone: String,
    /// Bank (开户行).
    pub bank: String,
    /// Bank account number (账号).
    pub bank_account: String,
}

/// What the caller decides for one document: its number, issue date, VAT rate and the
/// parties' tax details.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvoiceTerms {
    /// The document number, assigned without gaps at close by the caller.
    pub number: u64,
    /// Issue date, ms since epoch (printed as a local date in the period's zone).
    pub issued_ms: i64,
    /// VAT rate as a fraction in [0, 1): 0.06 for 6 % ([`DEFAULT_VAT_RATE`]). For a
    /// self-billing statement, the supplier's rate (6 % general taxpayer; 1 % or 3 % for a
    /// small-scale taxpayer's 代开 invoice).
    pub vat_rate: Decimal,
    /// The platform's tax details.
    pub platform: TaxParty,
    /// The buyer's (invoice) or the supplier's (self-billing statement) tax details.
    pub counterparty: TaxParty,
}

/// Which document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InvoiceKind {
    /// The platform invoices a buyer for the charges collected (seller: the platform).
    BuyerInvoice,
    /// A supplier's self-billing statement for its net earnings (seller: the supplier,
    /// purchaser: the platform), the basis of the supplier's 自开 or 代开 invoice.
    SupplierSelfBilling,
    /// A credit note (红字发票) to a buyer against an invoice it corrects: amounts negative
    /// (seller: the platform). docs/settlement.md "Credit notes".
    CreditNote,
}

impl InvoiceKind {
    /// The snake_case name (`buyer_invoice`, `supplier_self_billing`).
    pub fn as_str(self) -> &'static str {
        match self {
            InvoiceKind::BuyerInvoice => "buyer_invoice",
            InvoiceKind::SupplierSelfBilling => "supplier_self_billing",
            InvoiceKind::CreditNote => "credit_note",
        }
    }
}

/// One line per SKU. Amounts printed CNY (0.01), GPU-hours to 4 places.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InvoiceLine {
    /// SKU id.
    pub sku: String,
    /// Tax classification and item name ([`TAX_CLASSIFICATION`]).
    pub tax_classification: String,
    /// Unit of the quantity ([`UNIT`], 卡时).
    pub unit: String,
    /// GPU-hours billed in the period: Σ billed seconds × GPUs / 3600. The line's quantity
    /// (数量) in [`UNIT`].
    pub gpu_hours: Decimal,
    /// Unit price net of VAT (单价), CNY per GPU-hour: `round(net / gpu_hours,
    /// UNIT_PRICE_DP)`; `None` when the quantity prints 0.0000.
    pub unit_price: Option<Decimal>,
    /// Self-billing only: charges collected from buyers for this SKU, CNY.
    pub charges_collected: Option<Decimal>,
    /// Self-billing only: the platform fee on them, CNY.
    pub platform_fee: Option<Decimal>,
    /// Amount net of VAT (金额), CNY: `gross − vat`.
    pub net: Decimal,
    /// VAT (税额), CNY.
    pub vat: Decimal,
    /// Gross, VAT included (价税合计), CNY. Buyer: charges collected; self-billing:
    /// `charges_collected − platform_fee`.
    pub gross: Decimal,
}

/// A note: money that touched the account in the period but is not part of the taxable
/// amount. Amount printed CNY.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InvoiceNote {
    /// `sla_credit`, `adjustment` or `unpaid` (buyer); `sla_deduction`, `adjustment` or
    /// `payout` (supplier).
    pub kind: String,
    /// The transfer, if any (`unpaid` notes have none).
    pub transfer_id: Option<TransferId>,
    /// Posting time, ms since epoch (`unpaid`: the period end).
    pub at_ms: i64,
    /// Posting time, local ISO-8601.
    pub at_local: String,
    /// Idempotency key and memo, or the lease.
    pub reference: String,
    /// Printed amount, CNY (adjustments signed: + to the account; others positive).
    pub amount: Decimal,
}

/// Document totals: sums of the printed lines. CNY, GPU-hours to 4 places.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InvoiceTotals {
    /// Σ GPU-hours.
    pub gpu_hours: Decimal,
    /// Self-billing only: Σ charges collected.
    pub charges_collected: Option<Decimal>,
    /// Self-billing only: Σ platform fee.
    pub platform_fee: Option<Decimal>,
    /// Σ net (合计金额).
    pub net: Decimal,
    /// Σ VAT (合计税额).
    pub vat: Decimal,
    /// Σ gross (价税合计) = net + vat.
    pub gross: Decimal,
    /// The gross in words (价税合计大写, [`amount_in_words`]), e.g. `壹佰捌拾元玖角玖分`.
    pub gross_in_words: String,
}

/// Chinese capital numerals (大写数字), 0–9.
const DIGITS: [char; 10] = ['零', '壹', '贰', '叁', '肆', '伍', '陆', '柒', '捌', '玖'];

/// An amount in words as a VAT invoice prints 价税合计（大写）, issue 25. The amount is
/// rounded to the fen first. Rules (docs/settlement.md "Invoices", after 《支付结算办法》
/// 附一 正确写法): digits in capitals; 拾佰仟 within a group of four digits, 万 and 亿
/// between groups; one 零 for any run of zeros between non-zero yuan digits (壹万零伍元);
/// `整` after 元 when jiao and fen are zero (none after 角); a zero jiao before a non-zero
/// fen is written 零 (壹元零伍分, the 零角 case); an amount under one yuan starts at its
/// first non-zero unit (伍角, 伍分); zero is `零元整`; a negative amount (a credit note,
/// 红字) is prefixed `负`.
pub fn amount_in_words(amount: Decimal) -> String {
    let fen_total = round_dp(amount, FEN_DP).abs() * Decimal::ONE_HUNDRED;
    let fen_total = rust_decimal::prelude::ToPrimitive::to_u128(&fen_total.trunc()).unwrap_or(0);
    let negative = amount.is_sign_negative() && fen_total != 0;
    let yuan = fen_total / 100;
    let jiao = (fen_total / 10 % 10) as usize;
    let fen = (fen_total % 10) as usize;
    let mut out = String::new();
    if negative {
        out.push('负');
    }
    if yuan > 0 {
        out.push_str(&yuan_in_words(yuan));
        out.push('元');
    }
    match (jiao, fen) {
        (0, 0) => {
            if yuan == 0 {
                out.push_str("零元");
            }
            out.push('整');
        }
        (j, 0) => {
            out.push(DIGITS[j]);
            out.push('角');
        }
        (0, f) => {
            if yuan > 0 {
                out.push('零');
            }
            out.push(DIGITS[f]);
            out.push('分');
        }
        (j, f) => {
            out.push(DIGITS[j]);
            out.push('角');
            out.push(DIGITS[f]);
            out.push('分');
        }
    }
    out
}

/// A positive whole number of yuan in capitals, without `元`.
fn yuan_in_words(mut n: u128) -> String {
    const UNITS: [&str; 4] = ["", "拾", "佰", "仟"];
    const GROUPS: [&str; 5] = ["", "万", "亿", "万亿", "亿亿"];
    let mut groups = Vec::new();
    while n > 0 {
        groups.push((n % 10_000) as usize);
        n /= 10_000;
    }
    let mut out = String::new();
    let mut zero_pending = false;
    for (gi, &g) in groups.iter().enumerate().rev() {
        if g == 0 {
            zero_pending = !out.is_empty();
            continue;
        }
        let ds = [g / 1000, g / 100 % 10, g / 10 % 10, g % 10];
        for (k, &dgt) in ds.iter().enumerate() {
            if dgt == 0 {
                zero_pending = !out.is_empty();
                continue;
            }
            if zero_pending {
                out.push('零');
                zero_pending = false;
            }
            out.push(DIGITS[dgt]);
            out.push_str(UNITS[3 - k]);
        }
        out.push_str(GROUPS.get(gi).copied().unwrap_or(""));
    }
    out
}

/// An invoice (buyer) or self-billing statement (supplier) for one closed period.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Invoice {
    /// Which document.
    pub kind: InvoiceKind,
    /// Document number (from [`InvoiceTerms::number`]).
    pub number: u64,
    /// The buyer or supplier account.
    pub account: AccountId,
    /// The period invoiced (a credit note: the period it was numbered in).
    pub period: PeriodInfo,
    /// Credit notes only: the invoice it corrects (absent on other documents).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub corrects: Option<InvoiceRef>,
    /// Issue date, ms since epoch.
    pub issued_ms: i64,
    /// Issue date, local date `YYYY-MM-DD` in the period's zone.
    pub issued_date: String,
    /// Seller (销售方): the platform (invoice) or the supplier (self-billing).
    pub seller: TaxParty,
    /// Purchaser (购买方): the buyer (invoice) or the platform (self-billing).
    pub purchaser: TaxParty,
    /// VAT rate, a fraction (0.06 = 6 %).
    pub vat_rate: Decimal,
    /// Always `true`: amounts at the listed price include VAT (价税合计).
    pub prices_include_vat: bool,
    /// One line per SKU, by SKU id.
    pub lines: Vec<InvoiceLine>,
    /// Totals.
    pub totals: InvoiceTotals,
    /// Notes, not part of the taxable amount.
    pub notes: Vec<InvoiceNote>,
}

/// Exact per-SKU sums of one account's slices in a period.
#[derive(Debug, Clone, Default)]
struct SkuSums {
    gpu_seconds: u128,
    collected: Decimal,
    fee: Decimal,
}

impl SkuSums {
    fn hours(&self) -> Decimal {
        Decimal::from_i128_with_scale(i128::try_from(self.gpu_seconds).unwrap_or(i128::MAX), 0)
            / Decimal::from(3600)
    }
}

/// Checks the caller's terms.
fn check_terms(terms: &InvoiceTerms) -> Result<(), SettlementError> {
    if terms.vat_rate.is_sign_negative() || terms.vat_rate >= MAX_VAT_RATE {
        return Err(SettlementError::InvalidConfig(
            "vat_rate must be a fraction in [0, 1), e.g. 0.06 for 6 %",
        ));
    }
    if !(MIN_TIME_MS..=MAX_TIME_MS).contains(&terms.issued_ms) {
        return Err(SettlementError::TimeOutOfRange {
            ms: terms.issued_ms,
        });
    }
    Ok(())
}

/// The VAT arithmetic: from the printed gross lines, the exact VAT of each,
/// `gross × rate / (1 + rate)`, allocated to the rounded total. Returns (VAT per line, total
/// VAT = round(Σ exact VAT) = round(total gross × rate / (1 + rate))).
fn carve_vat(gross: &[Decimal], rate: Decimal) -> (Vec<Decimal>, Decimal) {
    let exact: Vec<Decimal> = gross
        .iter()
        .map(|g| *g * rate / (Decimal::ONE + rate))
        .collect();
    let vat = allocate_fen(&exact);
    (vat.lines, vat.total)
}

/// Builds the lines and totals from per-SKU sums (SKU order). `self_billing`: gross is
/// collected − fee, and the collected and fee columns are shown.
fn lines_and_totals(
    sums: &BTreeMap<String, SkuSums>,
    rate: Decimal,
    self_billing: bool,
) -> (Vec<InvoiceLine>, InvoiceTotals) {
    let hours = allocate(
        &sums.values().map(SkuSums::hours).collect::<Vec<_>>(),
        HOURS_DP,
    );
    let collected = allocate_fen(&sums.values().map(|s| s.collected).collect::<Vec<_>>());
    let fee = allocate_fen(&sums.values().map(|s| s.fee).collect::<Vec<_>>());
    let (gross, gross_total): (Vec<Decimal>, Decimal) = if self_billing {
        (
            collected
                .lines
                .iter()
                .zip(&fee.lines)
                .map(|(c, f)| round_dp(*c - *f, FEN_DP))
                .collect(),
            round_dp(collected.total - fee.total, FEN_DP),
        )
    } else {
        (collected.lines.clone(), collected.total)
    };
    let (vat, vat_total) = carve_vat(&gross, rate);
    let opt = |v: Decimal| self_billing.then_some(v);
    let lines = sums
        .keys()
        .enumerate()
        .map(|(i, sku)| InvoiceLine {
            sku: sku.clone(),
            tax_classification: TAX_CLASSIFICATION.to_string(),
            unit: UNIT.to_string(),
            gpu_hours: hours.lines[i],
            unit_price: (!hours.lines[i].is_zero())
                .then(|| round_dp((gross[i] - vat[i]) / hours.lines[i], UNIT_PRICE_DP)),
            charges_collected: opt(collected.lines[i]),
            platform_fee: opt(fee.lines[i]),
            net: round_dp(gross[i] - vat[i], FEN_DP),
            vat: vat[i],
            gross: gross[i],
        })
        .collect();
    let totals = InvoiceTotals {
        gpu_hours: hours.total,
        charges_collected: opt(collected.total),
        platform_fee: opt(fee.total),
        net: round_dp(gross_total - vat_total, FEN_DP),
        vat: vat_total,
        gross: gross_total,
        gross_in_words: amount_in_words(gross_total),
    };
    (lines, totals)
}

impl Ledger {
    /// Per-SKU exact sums of the slices of `leases` in `period`, and the slices.
    fn sku_sums(
        &self,
        leases: Option<&Vec<crate::ids::LeaseId>>,
        period: &Period,
    ) -> (BTreeMap<String, SkuSums>, Vec<super::LeaseSlice>) {
        let slices = self.slices_of(leases.map(Vec::as_slice).unwrap_or(&[]), period);
        let mut sums: BTreeMap<String, SkuSums> = BTreeMap::new();
        for s in &slices {
            let e = sums.entry(s.sku.clone()).or_default();
            e.gpu_seconds += u128::from(s.billed_seconds) * u128::from(s.gpus);
            e.collected += s.collected;
            e.fee += s.fee;
        }
        (sums, slices)
    }

    /// Notes of the journal transfers of `account` in `period` of the kinds `want`,
    /// allocated as the statements' sections (so each prints the statement's figure).
    fn notes_of(
        &self,
        account: Account,
        period: &Period,
        kind: &str,
        want: fn(&TransferKind) -> bool,
        signed: bool,
    ) -> Vec<InvoiceNote> {
        let (ts, printed) = self.journal_section(account, period, |t| want(&t.kind), signed);
        ts.iter()
            .zip(printed.lines)
            .map(|(t, amount)| InvoiceNote {
                kind: kind.to_string(),
                transfer_id: Some(t.id),
                at_ms: t.at_ms,
                at_local: format_local(t.at_ms, period.tz),
                reference: match &t.kind {
                    TransferKind::SlaCredit { lease } | TransferKind::SlaFunding { lease } => {
                        format!("lease {lease}")
                    }
                    // The memo (kind: reason [reference]), never the idempotency key.
                    TransferKind::Adjustment { memo, .. } => memo.clone(),
                    TransferKind::Deposit { .. } => "deposit".to_string(),
                    TransferKind::Payout { .. } => "payout".to_string(),
                    other => super::buyer::reference(other),
                },
                amount,
            })
            .collect()
    }

    /// The invoice of `buyer` for `period` (a closed period: the caller checks), under
    /// `terms`: one line per SKU of the charges collected in the period (VAT included),
    /// with SLA credits, adjustments and uncollected charges as notes.
    ///
    /// # Errors
    /// [`SettlementError::InvalidConfig`] for a VAT rate outside [0, 1);
    /// [`SettlementError::TimeOutOfRange`] for the issue date;
    /// [`SettlementError::NotAccrued`] if one of the buyer's active leases is not accrued
    /// through the period end.
    pub fn buyer_invoice(
        &self,
        buyer: AccountId,
        period: &Period,
        terms: &InvoiceTerms,
    ) -> Result<Invoice, SettlementError> {
        check_terms(terms)?;
        let leases = self.leases_by_buyer.get(&buyer);
        self.check_accrued(leases.into_iter().flatten(), period.to_ms)?;
        let (sums, slices) = self.sku_sums(leases, period);
        let (lines, totals) = lines_and_totals(&sums, terms.vat_rate, false);
        let account = Account::Buyer(buyer);
        let mut notes = self.notes_of(
            account,
            period,
            "sla_credit",
            |k| matches!(k, TransferKind::SlaCredit { .. }),
            false,
        );
        notes.extend(self.notes_of(
            account,
            period,
            "adjustment",
            |k| matches!(k, TransferKind::Adjustment { .. }),
            true,
        ));
        let unpaid: Vec<_> = slices.iter().filter(|s| !s.unpaid.is_zero()).collect();
        let printed = allocate_fen(&unpaid.iter().map(|s| s.unpaid).collect::<Vec<_>>());
        notes.extend(
            unpaid
                .iter()
                .zip(printed.lines)
                .map(|(s, amount)| InvoiceNote {
                    kind: "unpaid".to_string(),
                    transfer_id: None,
                    at_ms: period.to_ms,
                    at_local: format_local(period.to_ms, period.tz),
                    reference: format!("lease {}", s.lease),
                    amount,
                }),
        );
        Ok(self.invoice(
            InvoiceKind::BuyerInvoice,
            buyer,
            period,
            terms,
            (lines, totals, notes),
        ))
    }

    /// The self-billing statement (自开/代开 payout statement) of `supplier` for `period`
    /// (a closed period: the caller checks), under `terms` (`vat_rate`: the supplier's):
    /// one line per SKU of its net earnings (charges collected − platform fee, VAT
    /// included), with SLA deductions, adjustments and payouts as notes.
    ///
    /// # Errors
    /// As [`Ledger::buyer_invoice`], for the supplier's leases.
    pub fn supplier_self_billing(
        &self,
        supplier: AccountId,
        period: &Period,
        terms: &InvoiceTerms,
    ) -> Result<Invoice, SettlementError> {
        check_terms(terms)?;
        let leases = self.leases_by_supplier.get(&supplier);
        self.check_accrued(leases.into_iter().flatten(), period.to_ms)?;
        let (sums, _) = self.sku_sums(leases, period);
        let (lines, totals) = lines_and_totals(&sums, terms.vat_rate, true);
        let account = Account::Supplier(supplier);
        let mut notes = self.notes_of(
            account,
            period,
            "sla_deduction",
            |k| matches!(k, TransferKind::SlaFunding { .. }),
            false,
        );
        notes.extend(self.notes_of(
            account,
            period,
            "adjustment",
            |k| matches!(k, TransferKind::Adjustment { .. }),
            true,
        ));
        notes.extend(self.notes_of(
            account,
            period,
            "payout",
            |k| matches!(k, TransferKind::Payout { .. }),
            false,
        ));
        Ok(self.invoice(
            InvoiceKind::SupplierSelfBilling,
            supplier,
            period,
            terms,
            (lines, totals, notes),
        ))
    }

    /// The credit note (红字发票) number `terms.number` of `buyer` numbered when the closed
    /// period with the bounds of `period` was closed (docs/settlement.md "Credit notes"):
    /// one line per credit kind (`sla_credit`, then `goodwill_credit`) up to the gross
    /// recorded at close, VAT carved as on an invoice, every amount negative; the credits as
    /// notes, and a `not_credited` note for any part beyond what the corrected invoice had
    /// left.
    ///
    /// # Errors
    /// [`SettlementError::NoSuchCreditNote`] if that closed period has no such credit note;
    /// [`SettlementError::InvalidConfig`] and [`SettlementError::TimeOutOfRange`] for the
    /// terms, as [`Ledger::buyer_invoice`].
    pub fn credit_note(
        &self,
        buyer: AccountId,
        period: &Period,
        terms: &InvoiceTerms,
    ) -> Result<Invoice, SettlementError> {
        check_terms(terms)?;
        let record = self
            .closed_periods()
            .iter()
            .find(|p| p.from_ms == period.from_ms && p.to_ms == period.to_ms)
            .and_then(|p| {
                p.credit_notes
                    .iter()
                    .find(|c| c.buyer == buyer && c.number == terms.number)
            })
            .ok_or(SettlementError::NoSuchCreditNote {
                buyer,
                number: terms.number,
                from_ms: period.from_ms,
                to_ms: period.to_ms,
            })?;
        let (lines, totals, notes) = self.credit_note_body(record, period, terms.vat_rate);
        let mut doc = self.invoice(
            InvoiceKind::CreditNote,
            buyer,
            period,
            terms,
            (lines, totals, notes),
        );
        doc.corrects = Some(record.corrects);
        Ok(doc)
    }

    /// Lines, totals and notes of a credit note (see [`Ledger::credit_note`]).
    fn credit_note_body(
        &self,
        record: &CreditNoteRecord,
        period: &Period,
        rate: Decimal,
    ) -> (Vec<InvoiceLine>, InvoiceTotals, Vec<InvoiceNote>) {
        let ts: Vec<_> = record
            .credits
            .iter()
            .filter_map(|id| {
                // The journal is in posting (= id) order.
                let j = &self.books.journal;
                j.get(j.partition_point(|t| t.id < *id))
                    .filter(|t| t.id == *id)
            })
            .collect();
        let printed = allocate_fen(&ts.iter().map(|t| t.amount).collect::<Vec<_>>());
        let kind_of = |t: &crate::ledger::Transfer| match t.kind {
            TransferKind::SlaCredit { .. } => "sla_credit",
            _ => "goodwill_credit",
        };
        let mut notes: Vec<InvoiceNote> = ts
            .iter()
            .zip(&printed.lines)
            .map(|(t, amount)| InvoiceNote {
                kind: kind_of(t).to_string(),
                transfer_id: Some(t.id),
                at_ms: t.at_ms,
                at_local: format_local(t.at_ms, period.tz),
                reference: match &t.kind {
                    TransferKind::SlaCredit { lease } => format!("lease {lease}"),
                    TransferKind::Adjustment { memo, .. } => memo.clone(),
                    other => super::buyer::reference(other),
                },
                amount: *amount,
            })
            .collect();
        // Lines: one per kind, filled in kind order up to the recorded gross.
        let mut left = record.gross;
        let mut gross: Vec<(&str, Decimal)> = Vec::new();
        for kind in ["sla_credit", "goodwill_credit"] {
            let sum: Decimal = notes
                .iter()
                .filter(|n| n.kind == kind)
                .map(|n| n.amount)
                .sum();
            let take = sum.min(left);
            left -= take;
            if !take.is_zero() {
                gross.push((kind, take));
            }
        }
        let beyond = printed.total - record.gross;
        if beyond > Decimal::ZERO {
            notes.push(InvoiceNote {
                kind: "not_credited".to_string(),
                transfer_id: None,
                at_ms: period.to_ms,
                at_local: format_local(period.to_ms, period.tz),
                reference: format!(
                    "beyond what invoice {} had left to credit: stays a balance credit",
                    record.corrects.number
                ),
                amount: beyond,
            });
        }
        let amounts: Vec<Decimal> = gross.iter().map(|(_, g)| *g).collect();
        let (vat, vat_total) = carve_vat(&amounts, rate);
        let lines = gross
            .iter()
            .zip(&vat)
            .map(|((kind, g), v)| InvoiceLine {
                sku: (*kind).to_string(),
                tax_classification: TAX_CLASSIFICATION.to_string(),
                unit: UNIT.to_string(),
                gpu_hours: Decimal::ZERO,
                unit_price: None,
                charges_collected: None,
                platform_fee: None,
                net: -round_dp(*g - *v, FEN_DP),
                vat: -*v,
                gross: -*g,
            })
            .collect();
        let totals = InvoiceTotals {
            gpu_hours: Decimal::ZERO,
            charges_collected: None,
            platform_fee: None,
            net: -round_dp(record.gross - vat_total, FEN_DP),
            vat: -vat_total,
            gross: -record.gross,
            gross_in_words: amount_in_words(-record.gross),
        };
        (lines, totals, notes)
    }

    fn invoice(
        &self,
        kind: InvoiceKind,
        account: AccountId,
        period: &Period,
        terms: &InvoiceTerms,
        (lines, totals, notes): (Vec<InvoiceLine>, InvoiceTotals, Vec<InvoiceNote>),
    ) -> Invoice {
        let (seller, purchaser) = match kind {
            InvoiceKind::BuyerInvoice | InvoiceKind::CreditNote => {
                (terms.platform.clone(), terms.counterparty.clone())
            }
            InvoiceKind::SupplierSelfBilling => {
                (terms.counterparty.clone(), terms.platform.clone())
            }
        };
        let issued_date = format_local(terms.issued_ms, period.tz)
            .chars()
            .take(10)
            .collect();
        Invoice {
            kind,
            number: terms.number,
            account,
            period: period.info(),
            corrects: None,
            issued_ms: terms.issued_ms,
            issued_date,
            seller,
            purchaser,
            vat_rate: terms.vat_rate.normalize(),
            prices_include_vat: true,
            lines,
            totals,
            notes,
        }
    }
}

/// CSV/XLSX columns of an invoice, in order.
pub const INVOICE_COLUMNS: [&str; 17] = [
    "section",
    "field",
    "value",
    "sku",
    "tax_classification",
    "unit",
    "gpu_hours",
    "unit_price_cny",
    "charges_collected_cny",
    "platform_fee_cny",
    "net_cny",
    "vat_rate",
    "vat_cny",
    "gross_cny",
    "transfer_id",
    "time",
    "amount_cny",
];

impl Invoice {
    /// The document as a table with [`INVOICE_COLUMNS`]. Sections, in order: `invoice`
    /// (fields `kind`, `number`, `issued`, `period_from`, `period_to`, `time_zone`,
    /// `vat_rate`, `prices_include_vat`, `account`), `seller` and `purchaser` (fields
    /// `name`, `taxpayer_id`, `address`, `phone`, `bank`, `bank_account`), `line`… (SKU,
    /// tax classification, unit, GPU-hours (the quantity), unit price, net, rate, VAT, gross;
    /// self-billing also collected and fee), `total` (field `gross_in_words`, value the
    /// gross in words),
    /// `note`… (field = note kind, value = reference, transfer id, time, amount).
    pub fn table(&self) -> Table {
        let tz = self.period.tz();
        let h = &INVOICE_COLUMNS[..];
        let row = |section: &str| RowBuilder::new(h).set("section", Cell::Text(section.into()));
        let field = |section: &str, name: &str, value: Cell| {
            row(section)
                .set("field", Cell::Text(name.into()))
                .set("value", value)
                .build()
        };
        let text = |s: &str| Cell::Text(s.to_string());
        let p = &self.period;
        let mut rows = vec![
            field("invoice", "kind", text(self.kind.as_str())),
            field("invoice", "number", Cell::Int(self.number)),
            field("invoice", "issued", text(&self.issued_date)),
            field("invoice", "period_from", Cell::Time { ms: p.from_ms, tz }),
            field("invoice", "period_to", Cell::Time { ms: p.to_ms, tz }),
            field("invoice", "time_zone", text(&p.time_zone)),
            field("invoice", "vat_rate", Cell::Number(self.vat_rate)),
            field(
                "invoice",
                "prices_include_vat",
                text(&self.prices_include_vat.to_string()),
            ),
            field("invoice", "account", Cell::Int(self.account.0)),
        ];
        if let Some(c) = self.corrects {
            rows.push(field(
                "invoice",
                "corrects_period",
                Cell::Int(u64::from(c.period.0)),
            ));
            rows.push(field("invoice", "corrects_number", Cell::Int(c.number)));
        }
        for (section, party) in [("seller", &self.seller), ("purchaser", &self.purchaser)] {
            for (name, value) in [
                ("name", &party.name),
                ("taxpayer_id", &party.taxpayer_id),
                ("address", &party.address),
                ("phone", &party.phone),
                ("bank", &party.bank),
                ("bank_account", &party.bank_account),
            ] {
                rows.push(field(section, name, text(value)));
            }
        }
        let money = |d: Option<Decimal>| d.map_or(Cell::Empty, Cell::Money);
        for l in &self.lines {
            rows.push(
                row("line")
                    .set("sku", text(&l.sku))
                    .set("tax_classification", text(&l.tax_classification))
                    .set("unit", text(&l.unit))
                    .set("gpu_hours", Cell::Number(l.gpu_hours))
                    .set(
                        "unit_price_cny",
                        l.unit_price.map_or(Cell::Empty, Cell::Number),
                    )
                    .set("charges_collected_cny", money(l.charges_collected))
                    .set("platform_fee_cny", money(l.platform_fee))
                    .set("net_cny", Cell::Money(l.net))
                    .set("vat_rate", Cell::Number(self.vat_rate))
                    .set("vat_cny", Cell::Money(l.vat))
                    .set("gross_cny", Cell::Money(l.gross))
                    .build(),
            );
        }
        let t = &self.totals;
        rows.push(
            row("total")
                .set("field", text("gross_in_words"))
                .set("value", text(&t.gross_in_words))
                .set("gpu_hours", Cell::Number(t.gpu_hours))
                .set("charges_collected_cny", money(t.charges_collected))
                .set("platform_fee_cny", money(t.platform_fee))
                .set("net_cny", Cell::Money(t.net))
                .set("vat_rate", Cell::Number(self.vat_rate))
                .set("vat_cny", Cell::Money(t.vat))
                .set("gross_cny", Cell::Money(t.gross))
                .build(),
        );
        for n in &self.notes {
            rows.push(
                row("note")
                    .set("field", text(&n.kind))
                    .set("value", text(&n.reference))
                    .set(
                        "transfer_id",
                        n.transfer_id.map_or(Cell::Empty, |t| Cell::Int(t.0)),
                    )
                    .set("time", Cell::Time { ms: n.at_ms, tz })
                    .set("amount_cny", Cell::Money(n.amount))
                    .build(),
            );
        }
        let prefix = match self.kind {
            InvoiceKind::BuyerInvoice => "invoice",
            InvoiceKind::SupplierSelfBilling => "self-billing",
            InvoiceKind::CreditNote => "credit-note",
        };
        Table {
            name: format!("{prefix}-{}", self.number),
            header: INVOICE_COLUMNS.to_vec(),
            rows,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    /// Issue 25: the gross in words, by hand from the rules above.
    #[test]
    fn amounts_in_words() {
        for (amount, words) in [
            ("1234.56", "壹仟贰佰叁拾肆元伍角陆分"),
            ("10005", "壹万零伍元整"),
            ("10005.00", "壹万零伍元整"),
            ("1.05", "壹元零伍分"),
            ("100.50", "壹佰元伍角"),
            ("0.05", "伍分"),
            ("0.50", "伍角"),
            ("0.56", "伍角陆分"),
            ("0", "零元整"),
            ("0.004", "零元整"),
            ("-0.004", "零元整"),
            ("0.005", "壹分"),
            ("1010", "壹仟零壹拾元整"),
            ("100000", "壹拾万元整"),
            ("1001000", "壹佰万零壹仟元整"),
            ("100000005", "壹亿零伍元整"),
            ("16409.02", "壹万陆仟肆佰零玖元零贰分"),
            ("180.99", "壹佰捌拾元玖角玖分"),
            ("-180.99", "负壹佰捌拾元玖角玖分"),
            ("-5", "负伍元整"),
        ] {
            let a = Decimal::from_str(amount).expect("decimal");
            assert_eq!(amount_in_words(a), words, "{amount}");
        }
    }
}
