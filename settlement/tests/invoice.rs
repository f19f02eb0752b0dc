//! Issue 17, invoices: a buyer invoice and a supplier self-billing statement for one
//! period, VAT carved out of VAT-inclusive charges, amounts that add up exactly (hand
//! computed below from docs/settlement.md, "Invoices"), notes, CSV/JSON/XLSX, and a PDF
//! whose extracted text shows the Chinese company names, the number, the totals and the
//! VAT. The PDF tests read the CJK font of Debian's `fonts-wqy-microhei` and skip, saying
//! so, when it is not installed.

use crate::common::*;
use rust_decimal::Decimal;
use settlement::reports::invoice::{
    DEFAULT_VAT_RATE, Invoice, InvoiceKind, InvoiceTerms, TaxParty,
};
use settlement::reports::pdf::{PdfFont, invoice_pdf};
use settlement::reports::{csv::to_csv, to_json, xlsx::to_xlsx};
use settlement::{Account, Config, EndReason, Input, Ledger, Period, SettlementError};

const SH: &str = "Asia/Shanghai";
/// Debian package `fonts-wqy-microhei` (Apache-2.0 or GPL-3+ with font exception).
const FONT_PATH: &str = "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc";
const PLATFORM_NAME: &str = "上海算力交易所有限公司";
const BUYER_NAME: &str = "杭州云智算科技有限公司";
const SUPPLIER_NAME: &str = "贵州星河数据中心有限公司";

fn party(name: &str, id: &str) -> TaxParty {
    TaxParty {
        name: name.into(),
        taxpayer_id: id.into(),
        address: "上海市浦东新区世纪大道100号".into(),
        phone: "021-5000 0000".into(),
        bank: "招商银行上海分行营业部".into(),
        bank_account: "1219 0000 0000 0001".into(),
    }
}

fn terms(number: u64, counterparty: &str) -> InvoiceTerms {
    InvoiceTerms {
        number,
        issued_ms: ms("2026-12-01T09:00:00+08:00"),
        vat_rate: DEFAULT_VAT_RATE,
        platform: party(PLATFORM_NAME, "91310115MA1H000001"),
        counterparty: party(counterparty, "91330100MA2K000002"),
    }
}

/// November (Shanghai): deposit 500; lease 1: 8 × H100 at 22.50 for 1 h = 180.00; lease 2:
/// 1 × RTX4090 at 1.98 for 30 min = 0.99; a goodwill adjustment of 5.00 to the buyer.
fn november() -> (Ledger, Period) {
    let mut l = Ledger::new(Config::default()).expect("config");
    let t = ms("2026-11-20T10:00:00+08:00");
    step(&mut l, t, deposit("pay-1", BUYER, "500"));
    step(&mut l, t, lease(1, "H100-80G", "22.50", 8, t));
    step(&mut l, t, lease(2, "RTX4090-24G", "1.98", 1, t));
    step(
        &mut l,
        t + 1_800_000,
        end(2, t + 1_800_000, EndReason::Released),
    );
    step(
        &mut l,
        t + 3_600_000,
        end(1, t + 3_600_000, EndReason::Released),
    );
    step(
        &mut l,
        t + 3_600_000,
        Input::Adjustment {
            key: "gw-1".into(),
            debit: Account::PlatformFee,
            credit: Account::Buyer(BUYER),
            amount: d("5"),
            memo: "goodwill 补偿".into(),
        },
    );
    (l, Period::month(2026, 11, SH).expect("month"))
}

fn buyer_invoice() -> Invoice {
    let (l, nov) = november();
    l.buyer_invoice(BUYER, &nov, &terms(42, BUYER_NAME))
        .expect("invoice")
}

fn self_billing() -> Invoice {
    let (l, nov) = november();
    l.supplier_self_billing(SUPPLIER, &nov, &terms(43, SUPPLIER_NAME))
        .expect("self-billing")
}

/// Gross (VAT included) by SKU: H100 180.00, RTX4090 0.99; total 180.99.
/// VAT 6 %: 180.00 × 6/106 = 10.18868 → 10.19; 0.99 × 6/106 = 0.05604 → 0.06; but the
/// total VAT is round(180.99 × 6/106 = 10.24472) = 10.24, one fen less than 10.19 + 0.06:
/// the line rounded up furthest gives it back (RTX4090: up 0.00396 vs 0.00132) → 0.05.
/// Net = gross − VAT: 169.81 and 0.94; total 170.75; 170.75 + 10.24 = 180.99.
#[test]
fn a_buyer_invoice_carves_vat_out_of_the_charges_and_adds_up_exactly() {
    let inv = buyer_invoice();
    assert_eq!(inv.kind, InvoiceKind::BuyerInvoice);
    assert_eq!((inv.number, inv.issued_date.as_str()), (42, "2026-12-01"));
    assert_eq!(inv.seller.name, PLATFORM_NAME);
    assert_eq!(inv.purchaser.name, BUYER_NAME);
    assert_eq!(inv.vat_rate, d("0.06"));
    let lines: Vec<_> = inv
        .lines
        .iter()
        .map(|l| (l.sku.as_str(), l.gpu_hours, l.net, l.vat, l.gross))
        .collect();
    assert_eq!(
        lines,
        vec![
            (
                "H100-80G",
                d("8.0000"),
                d("169.81"),
                d("10.19"),
                d("180.00")
            ),
            ("RTX4090-24G", d("0.5000"), d("0.94"), d("0.05"), d("0.99")),
        ]
    );
    let t = &inv.totals;
    assert_eq!(
        (t.gpu_hours, t.net, t.vat, t.gross),
        (d("8.5000"), d("170.75"), d("10.24"), d("180.99"))
    );
    assert_eq!(t.charges_collected, None);
    // The goodwill adjustment is a note, not a line: it does not change the taxable amount.
    assert_eq!(inv.notes.len(), 1);
    assert_eq!(
        (inv.notes[0].kind.as_str(), inv.notes[0].amount),
        ("adjustment", d("5.00"))
    );
    // Issue 25: the memo, never the idempotency key `gw-1`.
    assert_eq!(inv.notes[0].reference, "goodwill 补偿");
    // Issue 25, filing fields: classification, unit 卡时, quantity = GPU-hours, unit price
    // net of VAT = net / quantity to 6 places (169.81 / 8 = 21.22625; 0.94 / 0.5 = 1.88),
    // and the gross in words.
    let filing: Vec<_> = (inv.lines.iter())
        .map(|l| {
            (
                l.tax_classification.as_str(),
                l.unit.as_str(),
                l.gpu_hours,
                l.unit_price,
            )
        })
        .collect();
    assert_eq!(
        filing,
        vec![
            (
                "*信息技术服务*GPU算力服务",
                "卡时",
                d("8.0000"),
                Some(d("21.226250"))
            ),
            (
                "*信息技术服务*GPU算力服务",
                "卡时",
                d("0.5000"),
                Some(d("1.880000"))
            ),
        ]
    );
    assert_eq!(t.gross_in_words, "壹佰捌拾元玖角玖分");
}

/// The supplier's net earnings: collected 180.00 and 0.99, fee 8 % 14.40 and 0.0792 → 0.08
/// (total 14.4792 → 14.48), gross 165.60 and 0.91 = 166.51 (the payout statement's net).
/// VAT 6 %: 165.60 × 6/106 = 9.37358 → 9.37, 0.91 × 6/106 = 0.05151 → 0.05; total
/// round(166.51 × 6/106 = 9.42509) = 9.43, one fen more: the line rounded down furthest
/// (H100: down 0.00358) takes it → 9.38. Net 156.22 and 0.86 = 157.08; 157.08 + 9.43 = 166.51.
#[test]
fn a_self_billing_statement_invoices_the_suppliers_net_earnings() {
    let inv = self_billing();
    assert_eq!(inv.kind, InvoiceKind::SupplierSelfBilling);
    assert_eq!(inv.seller.name, SUPPLIER_NAME);
    assert_eq!(inv.purchaser.name, PLATFORM_NAME);
    let lines: Vec<_> = inv
        .lines
        .iter()
        .map(|l| (l.charges_collected, l.platform_fee, l.net, l.vat, l.gross))
        .collect();
    assert_eq!(
        lines,
        vec![
            (
                Some(d("180.00")),
                Some(d("14.40")),
                d("156.22"),
                d("9.38"),
                d("165.60")
            ),
            (
                Some(d("0.99")),
                Some(d("0.08")),
                d("0.86"),
                d("0.05"),
                d("0.91")
            ),
        ]
    );
    let t = &inv.totals;
    assert_eq!(
        (t.charges_collected, t.platform_fee, t.net, t.vat, t.gross),
        (
            Some(d("180.99")),
            Some(d("14.48")),
            d("157.08"),
            d("9.43"),
            d("166.51")
        )
    );
    let (l, nov) = november();
    let s = l.supplier_statement(SUPPLIER, &nov).expect("statement");
    assert_eq!(s.totals.net, t.gross);
}

#[test]
fn invoice_terms_are_checked() {
    let (l, nov) = november();
    for rate in ["-0.01", "1", "1.5"] {
        let mut bad = terms(1, BUYER_NAME);
        bad.vat_rate = d(rate);
        assert!(matches!(
            l.buyer_invoice(BUYER, &nov, &bad),
            Err(SettlementError::InvalidConfig(_))
        ));
    }
    let mut bad = terms(1, BUYER_NAME);
    bad.issued_ms = -1;
    assert!(matches!(
        l.supplier_self_billing(SUPPLIER, &nov, &bad),
        Err(SettlementError::TimeOutOfRange { ms: -1 })
    ));
    // A 1 % small-scale rate: 180.99 × 1/101 = 1.79198 → 1.79.
    let mut small = terms(1, BUYER_NAME);
    small.vat_rate = d("0.01");
    let inv = l.buyer_invoice(BUYER, &nov, &small).expect("invoice");
    assert_eq!((inv.totals.vat, inv.totals.net), (d("1.79"), d("179.20")));
    // A period without charges: no lines, zero totals.
    let dec = Period::month(2026, 12, SH).expect("month");
    let inv = l
        .buyer_invoice(BUYER, &dec, &terms(2, BUYER_NAME))
        .expect("invoice");
    assert!(inv.lines.is_empty());
    assert_eq!(inv.totals.gross.to_string(), "0.00");
}

#[test]
fn invoices_render_as_csv_json_and_xlsx_deterministically() {
    let inv = buyer_invoice();
    let csv = String::from_utf8(to_csv(&inv.table()).expect("csv")).expect("utf-8");
    assert!(csv.starts_with(
        "section,field,value,sku,tax_classification,unit,gpu_hours,unit_price_cny,charges_collected_cny,platform_fee_cny,net_cny,vat_rate,vat_cny,gross_cny,transfer_id,time,amount_cny\n"
    ));
    assert!(csv.contains("\ninvoice,number,42,"), "{csv}");
    assert!(
        csv.contains("\nseller,name,上海算力交易所有限公司,"),
        "{csv}"
    );
    assert!(
        csv.contains("\npurchaser,taxpayer_id,91330100MA2K000002,"),
        "{csv}"
    );
    assert!(
        csv.contains("\nline,,,H100-80G,*信息技术服务*GPU算力服务,卡时,8.0000,21.226250,,,169.81,0.06,10.19,180.00,,,\n"),
        "{csv}"
    );
    assert!(
        csv.contains(
            "\ntotal,gross_in_words,壹佰捌拾元玖角玖分,,,,8.5000,,,,170.75,0.06,10.24,180.99,,,\n"
        ),
        "{csv}"
    );
    assert!(csv.contains("\nnote,adjustment,goodwill 补偿,"), "{csv}");
    assert_eq!(
        to_csv(&buyer_invoice().table()).expect("csv"),
        csv.as_bytes()
    );
    let json = String::from_utf8(to_json(&inv).expect("json")).expect("utf-8");
    assert!(json.contains("\"vat\": \"10.24\""), "{json}");
    assert!(json.contains("\"kind\": \"buyer_invoice\""), "{json}");
    assert!(json.contains(BUYER_NAME));
    let sb = self_billing();
    let x = to_xlsx(&[inv.table(), sb.table()]).expect("xlsx");
    assert_eq!(x, to_xlsx(&[inv.table(), sb.table()]).expect("xlsx"));
    assert!(x.starts_with(b"PK"));
}

fn font() -> Option<PdfFont> {
    match std::fs::read(FONT_PATH) {
        Ok(bytes) => Some(PdfFont::new(bytes, 0).expect("a font")),
        Err(e) => {
            eprintln!(
                "SKIPPED: the PDF test needs {FONT_PATH} (Debian package fonts-wqy-microhei): {e}"
            );
            None
        }
    }
}

/// Keeps a rendered PDF for a look when `SETTLEMENT_PDF_OUT` names a directory.
fn keep(name: &str, pdf: &[u8]) {
    if let Some(dir) = std::env::var_os("SETTLEMENT_PDF_OUT") {
        std::fs::write(std::path::Path::new(&dir).join(name), pdf).expect("write the PDF");
    }
}

/// Text of a PDF, with whitespace runs collapsed to one space.
fn pdf_text(pdf: &[u8]) -> String {
    let text = pdf_extract::extract_text_from_mem(pdf).expect("pdf text");
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn the_pdf_shows_the_chinese_names_the_number_the_totals_and_the_vat() {
    let Some(font) = font() else { return };
    let inv = buyer_invoice();
    let pdf = invoice_pdf(&inv, &font).expect("pdf");
    keep("invoice-42.pdf", &pdf);
    assert!(pdf.starts_with(b"%PDF-"));
    assert_eq!(invoice_pdf(&inv, &font).expect("pdf"), pdf, "deterministic");
    let text = pdf_text(&pdf);
    for want in [
        PLATFORM_NAME,
        BUYER_NAME,
        "91310115MA1H000001",
        "No. 42",
        "2026-12-01",
        "H100-80G",
        "169.81",
        "180.00",
        "价税合计 Gross total: 180.99",
        "合计税额 VAT total: 10.24",
        "合计金额 Net total: 170.75",
        "税率 VAT rate: 6%",
        "goodwill 补偿",
        // Issue 25: the filing fields, the gross in words, a note's date without its time,
        // and no idempotency key.
        "*信息技术服务*GPU算力服务",
        "卡时",
        "单价 Unit price (net of VAT): 21.226250",
        "价税合计（大写） Gross in words: 壹佰捌拾元玖角玖分",
        "adjustment 2026-11-",
    ] {
        assert!(text.contains(want), "{want:?} missing from: {text}");
    }
    assert!(!text.contains("gw-1"), "{text}");
    assert!(!text.contains(".000+08:00"), "{text}");
    let sb = invoice_pdf(&self_billing(), &font).expect("pdf");
    keep("self-billing-43.pdf", &sb);
    let text = pdf_text(&sb);
    for want in [
        SUPPLIER_NAME,
        PLATFORM_NAME,
        "No. 43",
        "166.51",
        "9.43",
        "14.48",
    ] {
        assert!(text.contains(want), "{want:?} missing from: {text}");
    }
}

/// Issue 17: a note with a 500-character reason ran off the page and hid its amount. It
/// wraps now: every character and the amount are in the text, and the amount is on the
/// note's first line, before the reason's continuation.
#[test]
fn a_note_with_a_long_reason_wraps_and_keeps_its_amount() {
    let Some(font) = font() else { return };
    let mut inv = buyer_invoice();
    let reason = "é".repeat(500);
    inv.notes[0].reference = format!("gw-long: goodwill_credit: {reason}");
    inv.notes[0].amount = d("12.34");
    let pdf = invoice_pdf(&inv, &font).expect("pdf");
    keep("invoice-long-note.pdf", &pdf);
    let text = pdf_extract::extract_text_from_mem(&pdf).expect("pdf text");
    assert_eq!(text.matches('é').count(), 500, "{text}");
    let amount = text.find("12.34").expect("the amount is printed");
    let last_e = text.rfind('é').expect("the reason is printed");
    assert!(
        amount < last_e,
        "the amount sits on the note's first line: {text}"
    );
    assert!(text.contains("tax authority"));
}

#[test]
fn a_long_invoice_breaks_onto_more_pages() {
    let Some(font) = font() else { return };
    let mut inv = buyer_invoice();
    let note = inv.notes[0].clone();
    inv.notes = (0..120).map(|_| note.clone()).collect();
    let pdf = invoice_pdf(&inv, &font).expect("pdf");
    let pages = pdf_extract::extract_text_from_mem_by_pages(&pdf).expect("pages");
    assert!(pages.len() >= 2, "{} pages", pages.len());
    assert!(pages[pages.len() - 1].contains("tax authority"));
    assert!(PdfFont::new(b"not a font".to_vec(), 0).is_err());
}

/// A typed goodwill credit of `amount` to `buyer`, reason "outage apology".
fn goodwill(
    key: &str,
    buyer: settlement::AccountId,
    amount: &str,
    reference: Option<&str>,
) -> Input {
    Input::Adjust(settlement::Adjustment {
        key: key.into(),
        kind: settlement::AdjustmentKind::GoodwillCredit { buyer },
        amount: d(amount),
        reason: "outage apology".into(),
        reference: reference.map(Into::into),
    })
}

fn close_input(key: &str, p: &Period) -> Input {
    Input::ClosePeriod {
        key: key.into(),
        from_ms: p.from_ms,
        to_ms: p.to_ms,
    }
}

/// The worked example of docs/settlement.md "Credit notes": November is closed with the
/// buyer's invoice 1 of 180.99 (above). December: goodwill 20.00 [period:1] and 7.33 [T-9]
/// → credit note 1 against invoice 1 (December's invoice 2 is at 0.00): gross 27.33, VAT
/// round(27.33 × 6/106 = 1.546981) = 1.55, net 25.78, all negative. January: goodwill
/// 200.00 → credit note 2 against invoice 1, capped at 180.99 − 27.33 = 153.66: VAT
/// round(153.66 × 6/106 = 8.697736) = 8.70, net 144.96; 46.34 stays a balance credit.
/// February: nothing left on any invoice → no credit note. A buyer invoiced only at 0.00
/// (deposit and goodwill) never gets one.
#[test]
fn credit_notes_correct_the_invoice_they_reduce_and_never_exceed_it() {
    use settlement::{AccountId, CreditNoteRecord, InvoiceRef, PeriodId};
    let (mut l, nov) = november();
    let dec = Period::month(2026, 12, SH).expect("month");
    let jan = Period::month(2027, 1, SH).expect("month");
    let feb = Period::month(2027, 2, SH).expect("month");
    let other = AccountId(2);
    step(&mut l, nov.to_ms, close_input("close-11", &nov));
    assert_eq!(l.invoice_number(PeriodId(1), BUYER), Some(1));
    assert!(l.credit_notes(PeriodId(1)).is_empty());

    let t = ms("2026-12-10T10:00:00+08:00");
    let a = step(&mut l, t, goodwill("gw-a", BUYER, "20", Some("period:1")));
    let b = step(&mut l, t + 1, goodwill("gw-b", BUYER, "7.33", Some("T-9")));
    step(&mut l, t + 2, deposit("pay-2", other, "50"));
    step(&mut l, t + 3, goodwill("gw-o", other, "10", None));
    step(&mut l, dec.to_ms, close_input("close-12", &dec));
    assert_eq!(l.invoice_number(PeriodId(2), BUYER), Some(2));
    assert_eq!(l.invoice_number(PeriodId(2), other), Some(3));
    let nov_invoice = InvoiceRef {
        period: PeriodId(1),
        number: 1,
    };
    assert_eq!(
        l.credit_notes(PeriodId(2)),
        &[CreditNoteRecord {
            buyer: BUYER,
            number: 1,
            corrects: nov_invoice,
            gross: d("27.33"),
            credits: vec![a.transfers[0].id, b.transfers[0].id],
        }]
    );

    let cn = l
        .credit_note(BUYER, &dec, &terms(1, BUYER_NAME))
        .expect("credit note 1");
    assert_eq!(cn.kind, InvoiceKind::CreditNote);
    assert_eq!((cn.number, cn.corrects), (1, Some(nov_invoice)));
    assert_eq!(cn.seller.name, PLATFORM_NAME);
    assert_eq!(cn.purchaser.name, BUYER_NAME);
    let line = |i: &Invoice| -> Vec<(String, Decimal, Decimal, Decimal)> {
        i.lines
            .iter()
            .map(|l| (l.sku.clone(), l.net, l.vat, l.gross))
            .collect()
    };
    assert_eq!(
        line(&cn),
        vec![(
            "goodwill_credit".into(),
            d("-25.78"),
            d("-1.55"),
            d("-27.33")
        )]
    );
    assert_eq!(
        (cn.totals.net, cn.totals.vat, cn.totals.gross),
        (d("-25.78"), d("-1.55"), d("-27.33"))
    );
    assert_eq!(cn.totals.net + cn.totals.vat, cn.totals.gross);
    assert_eq!(cn.totals.gross_in_words, "负贰拾柒元叁角叁分");
    let notes: Vec<_> = cn
        .notes
        .iter()
        .map(|n| (n.kind.as_str(), n.reference.as_str(), n.amount))
        .collect();
    assert_eq!(
        notes,
        vec![
            (
                "goodwill_credit",
                "goodwill_credit: outage apology [period:1]",
                d("20.00")
            ),
            (
                "goodwill_credit",
                "goodwill_credit: outage apology [T-9]",
                d("7.33")
            ),
        ]
    );
    // The buyer invoiced only at 0.00 gets none; nor does a number never issued.
    for (buyer, number) in [(other, 1), (BUYER, 2)] {
        assert!(matches!(
            l.credit_note(buyer, &dec, &terms(number, BUYER_NAME)),
            Err(SettlementError::NoSuchCreditNote { .. })
        ));
    }

    // Renderings: the table names the corrected invoice; the JSON of an invoice has no
    // `corrects` (documents of earlier closes print as before).
    let table = cn.table();
    assert_eq!(table.name, "credit-note-1");
    let csv = String::from_utf8(to_csv(&table).expect("csv")).expect("utf-8");
    assert!(csv.contains("invoice,kind,credit_note"), "{csv}");
    assert!(csv.contains("invoice,corrects_period,1"), "{csv}");
    assert!(csv.contains("invoice,corrects_number,1"), "{csv}");
    assert!(csv.contains("-27.33"), "{csv}");
    let json = String::from_utf8(to_json(&cn).expect("json")).expect("utf-8");
    assert!(json.contains("\"corrects\""), "{json}");
    let blue = l
        .buyer_invoice(BUYER, &nov, &terms(1, BUYER_NAME))
        .expect("invoice");
    let json = String::from_utf8(to_json(&blue).expect("json")).expect("utf-8");
    assert!(!json.contains("corrects"), "{json}");
    if let Some(font) = font() {
        let pdf = invoice_pdf(&cn, &font).expect("pdf");
        keep("credit-note-1.pdf", &pdf);
        let text = pdf_text(&pdf);
        assert!(text.contains("红字发票明细"), "{text}");
        assert!(text.contains("负贰拾柒元叁角叁分"), "{text}");
        assert!(text.contains("-27.33"), "{text}");
    }

    // January: 200.00 against invoice 1's 153.66 left.
    let t = ms("2027-01-05T10:00:00+08:00");
    let c = step(&mut l, t, goodwill("gw-c", BUYER, "200", None));
    step(&mut l, jan.to_ms, close_input("close-01", &jan));
    assert_eq!(
        l.credit_notes(PeriodId(3)),
        &[CreditNoteRecord {
            buyer: BUYER,
            number: 2,
            corrects: nov_invoice,
            gross: d("153.66"),
            credits: vec![c.transfers[0].id],
        }]
    );
    let cn = l
        .credit_note(BUYER, &jan, &terms(2, BUYER_NAME))
        .expect("credit note 2");
    assert_eq!(
        line(&cn),
        vec![(
            "goodwill_credit".into(),
            d("-144.96"),
            d("-8.70"),
            d("-153.66")
        )]
    );
    assert_eq!(cn.totals.gross_in_words, "负壹佰伍拾叁元陆角陆分");
    let notes: Vec<_> = cn
        .notes
        .iter()
        .map(|n| (n.kind.as_str(), n.amount))
        .collect();
    assert_eq!(
        notes,
        vec![
            ("goodwill_credit", d("200.00")),
            ("not_credited", d("46.34"))
        ]
    );

    // February: nothing left to credit anywhere.
    step(
        &mut l,
        ms("2027-02-03T10:00:00+08:00"),
        goodwill("gw-d", BUYER, "1", None),
    );
    step(&mut l, feb.to_ms, close_input("close-02", &feb));
    assert!(l.credit_notes(PeriodId(4)).is_empty());
    l.check_invariants().expect("numbers gapless");
}
