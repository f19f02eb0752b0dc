//! Printable PDF of an [`Invoice`] (issue 17), written with `krilla` (the PDF library of
//! the Typst project): A4 pages, text in one CJK font passed in as bytes ([`PdfFont`]),
//! embedded as a subset with a ToUnicode map, so Chinese names render and the text can
//! be extracted and searched.
//!
//! Settlement does no IO: the gateway reads the font file (e.g. Debian's
//! `fonts-wqy-microhei`, `/usr/share/fonts/truetype/wqy/wqy-microhei.ttc`, Apache-2.0 or
//! GPL-3+ with the font embedding exception) once and passes its bytes. The PDF carries no
//! creation date, so the same invoice and font give the same bytes.
//!
//! The document states that it is the platform's invoice detail; the official VAT invoice
//! (全面数字化的电子发票) is issued through the tax authority's system with these figures.

use super::invoice::{Invoice, InvoiceKind, TaxParty};
use crate::error::SettlementError;
use krilla::Document;
use krilla::geom::{PathBuilder, Point};
use krilla::page::PageSettings;
use krilla::paint::Stroke;
use krilla::surface::Surface;
use krilla::text::{Font, TextDirection};
use rust_decimal::Decimal;

/// A4 width, PDF points (1/72 inch).
const PAGE_WIDTH_PT: f32 = 595.0;
/// A4 height, PDF points.
const PAGE_HEIGHT_PT: f32 = 842.0;
/// Left and right margin, PDF points.
const MARGIN_PT: f32 = 40.0;
/// Body text size, PDF points.
const BODY_PT: f32 = 9.0;
/// Line advance of body text, PDF points.
const LINE_PT: f32 = 14.0;
/// Title size, PDF points.
const TITLE_PT: f32 = 16.0;
/// Line columns (x in PDF points from the left edge): SKU, GPU-hours, collected, fee,
/// net, rate, VAT, gross.
const COLUMNS_PT: [f32; 8] = [40.0, 140.0, 200.0, 270.0, 330.0, 390.0, 425.0, 485.0];
/// x of a note's text, PDF points (indented under the "Notes" heading).
const NOTE_TEXT_X_PT: f32 = 56.0;
/// x of a note's amount, PDF points: the gross column, so amounts line up with the lines'.
const NOTE_AMOUNT_X_PT: f32 = COLUMNS_PT[7];
/// Width a note's text may fill, PDF points: up to 8 pt before its amount, so a long reason
/// never covers or pushes away the amount (issue 17: a 500-character reason ran off the page).
const NOTE_TEXT_WIDTH_PT: f32 = NOTE_AMOUNT_X_PT - 8.0 - NOTE_TEXT_X_PT;
/// Most lines one note's text wraps onto; longer text is cut with `…` (a reason is at most
/// 500 characters and a reference 200, about 12 lines of Latin text at [`BODY_PT`]).
const NOTE_MAX_LINES: usize = 16;
/// Advance assumed for a narrow character, in em: wider than most Latin, Greek and Cyrillic
/// glyphs of WenQuanYi Micro Hei (about 0.5 em), so an estimate never falls short of the
/// drawn width. The PDF writer exposes no glyph metrics.
const NARROW_EM: f32 = 0.62;
/// Advance assumed for the widest narrow glyphs (`M`, `W`, `m`, `w`, `@`, `%`), in em.
const WIDE_LATIN_EM: f32 = 0.95;
/// Advance of a full-width character (CJK ideographs, kana, hangul, full-width forms), in em.
const FULL_WIDTH_EM: f32 = 1.0;

/// A font for PDF output: TrueType/OpenType bytes (a `.ttf`, `.otf`, or one face of a
/// `.ttc` collection) with CJK glyphs. Cheap to clone (the bytes are shared).
#[derive(Clone)]
pub struct PdfFont {
    font: Font,
}

impl std::fmt::Debug for PdfFont {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PdfFont")
    }
}

impl PdfFont {
    /// Parses font `bytes`, face `index` (0 for a single font; the face of a `.ttc`).
    ///
    /// # Errors
    /// [`SettlementError::Export`] if the bytes are not a font with that face.
    pub fn new(bytes: Vec<u8>, index: u32) -> Result<PdfFont, SettlementError> {
        Font::new(bytes.into(), index)
            .map(|font| PdfFont { font })
            .ok_or_else(|| {
                SettlementError::Export(format!("not a TrueType/OpenType font (face {index})"))
            })
    }
}

/// Renders `invoice` as a printable PDF (A4, one or more pages) in `font`.
///
/// # Errors
/// [`SettlementError::Export`] if the PDF writer fails.
pub fn invoice_pdf(invoice: &Invoice, font: &PdfFont) -> Result<Vec<u8>, SettlementError> {
    let mut doc = Document::new();
    let mut lines = Writer::default();
    layout(invoice, &mut lines);
    for page_items in lines.pages() {
        let settings = PageSettings::from_wh(PAGE_WIDTH_PT, PAGE_HEIGHT_PT)
            .ok_or_else(|| SettlementError::Export("page size".into()))?;
        let mut page = doc.start_page_with(settings);
        let mut surface = page.surface();
        for item in page_items {
            draw(&mut surface, &font.font, &item);
        }
        surface.finish();
        page.finish();
    }
    doc.finish()
        .map_err(|e| SettlementError::Export(format!("pdf: {e:?}")))
}

/// One thing on a page.
enum Item {
    Text {
        x: f32,
        y: f32,
        size: f32,
        s: String,
    },
    Rule {
        y: f32,
    },
}

fn draw(surface: &mut Surface<'_>, font: &Font, item: &Item) {
    match item {
        Item::Text { x, y, size, s } => surface.draw_text(
            Point::from_xy(*x, *y),
            font.clone(),
            *size,
            s,
            false,
            TextDirection::Auto,
        ),
        Item::Rule { y } => {
            let mut pb = PathBuilder::new();
            pb.move_to(MARGIN_PT, *y);
            pb.line_to(PAGE_WIDTH_PT - MARGIN_PT, *y);
            if let Some(path) = pb.finish() {
                surface.set_stroke(Some(Stroke {
                    width: 0.5,
                    ..Stroke::default()
                }));
                surface.draw_path(&path);
                surface.set_stroke(None);
            }
        }
    }
}

/// Lays items out top to bottom, starting a new page when one is full.
#[derive(Default)]
struct Writer {
    pages: Vec<Vec<Item>>,
    y: f32,
}

impl Writer {
    fn ensure_room(&mut self, height: f32) {
        if self.pages.is_empty() || self.y + height > PAGE_HEIGHT_PT - MARGIN_PT {
            self.pages.push(Vec::new());
            self.y = MARGIN_PT;
        }
    }
    fn text_at(&mut self, x: f32, size: f32, s: String) {
        self.ensure_room(LINE_PT);
        let y = self.y + size;
        if let Some(page) = self.pages.last_mut() {
            page.push(Item::Text { x, y, size, s });
        }
    }
    fn line(&mut self, s: String) {
        self.text_at(MARGIN_PT, BODY_PT, s);
        self.y += LINE_PT;
    }
    fn cells(&mut self, cells: &[String]) {
        self.ensure_room(LINE_PT);
        for (x, s) in COLUMNS_PT.iter().zip(cells) {
            if !s.is_empty() {
                self.text_at(*x, BODY_PT, s.clone());
            }
        }
        self.y += LINE_PT;
    }
    /// A note: its text wrapped to [`NOTE_TEXT_WIDTH_PT`] (at most [`NOTE_MAX_LINES`] lines),
    /// its amount on the first line at [`NOTE_AMOUNT_X_PT`], always visible.
    fn note(&mut self, text: &str, amount: String) {
        for (i, line) in wrap(text, NOTE_TEXT_WIDTH_PT, BODY_PT, NOTE_MAX_LINES)
            .into_iter()
            .enumerate()
        {
            self.ensure_room(LINE_PT);
            self.text_at(NOTE_TEXT_X_PT, BODY_PT, line);
            if i == 0 {
                self.text_at(NOTE_AMOUNT_X_PT, BODY_PT, amount.clone());
            }
            self.y += LINE_PT;
        }
    }
    fn rule(&mut self) {
        self.ensure_room(LINE_PT / 2.0);
        let y = self.y + 2.0;
        if let Some(page) = self.pages.last_mut() {
            page.push(Item::Rule { y });
        }
        self.y += LINE_PT / 2.0;
    }
    fn gap(&mut self) {
        self.y += LINE_PT / 2.0;
    }
    fn pages(self) -> Vec<Vec<Item>> {
        self.pages
    }
}

/// Estimated advance of `c` in em (see [`NARROW_EM`]).
fn char_em(c: char) -> f32 {
    let full_width = matches!(c,
        '\u{1100}'..='\u{115F}'
        | '\u{2E80}'..='\u{A4CF}'
        | '\u{AC00}'..='\u{D7A3}'
        | '\u{F900}'..='\u{FAFF}'
        | '\u{FE30}'..='\u{FE4F}'
        | '\u{FF00}'..='\u{FF60}'
        | '\u{FFE0}'..='\u{FFE6}'
        | '\u{20000}'..='\u{3FFFD}');
    if full_width {
        FULL_WIDTH_EM
    } else if matches!(c, 'M' | 'W' | 'm' | 'w' | '@' | '%') {
        WIDE_LATIN_EM
    } else {
        NARROW_EM
    }
}

/// Estimated width of `s` at `size` points, PDF points.
fn text_width_pt(s: &str, size: f32) -> f32 {
    s.chars().map(char_em).sum::<f32>() * size
}

/// Wraps `text` into lines at most `width_pt` wide at `size` points: greedy, breaking after
/// the last space that fits, or inside a word longer than a line. At most `max_lines` lines;
/// text beyond them is cut and the last line ends with `…`. Never empty.
fn wrap(text: &str, width_pt: f32, size: f32, max_lines: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut rest: Vec<char> = text.trim().chars().collect();
    let max_lines = max_lines.max(1);
    while !rest.is_empty() {
        let (mut w, mut fit, mut last_space) = (0.0, 0, None);
        for (i, c) in rest.iter().enumerate() {
            w += char_em(*c) * size;
            if w > width_pt {
                break;
            }
            fit = i + 1;
            if *c == ' ' {
                last_space = Some(i);
            }
        }
        let fit = fit.max(1);
        let cut = match last_space {
            Some(sp) if fit < rest.len() && sp > 0 => sp,
            _ => fit,
        };
        let line: String = rest[..cut].iter().collect();
        rest.drain(..cut);
        while rest.first() == Some(&' ') {
            rest.remove(0);
        }
        if lines.len() + 1 == max_lines && !rest.is_empty() {
            let mut line: Vec<char> = line.trim_end().chars().collect();
            while !line.is_empty()
                && text_width_pt(&format!("{}…", String::from_iter(&line)), size) > width_pt
            {
                line.pop();
            }
            lines.push(format!("{}…", String::from_iter(line)));
            return lines;
        }
        lines.push(line.trim_end().to_string());
    }
    if lines.is_empty() {
        lines.push(String::new());
    }
    lines
}

/// `1234567.5` → `1,234,567.50`: printed CNY with thousands separators.
fn money(d: Decimal) -> String {
    let s = format!("{:.2}", d);
    let (sign, digits) = s.strip_prefix('-').map_or(("", s.as_str()), |r| ("-", r));
    let (int, frac) = digits.split_once('.').unwrap_or((digits, "00"));
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    format!("{sign}{grouped}.{frac}")
}

/// `0.06` → `6%`.
/// A local ISO-8601 time as `YYYY-MM-DD HH:MM` (issue 25: dates, not milliseconds).
fn minute(local: &str) -> String {
    local.get(..16).unwrap_or(local).replacen('T', " ", 1)
}

fn percent(rate: Decimal) -> String {
    format!("{}%", (rate * Decimal::from(100)).normalize())
}

fn party(w: &mut Writer, role: &str, p: &TaxParty) {
    w.line(format!("{role}  名称 Name: {}", p.name));
    w.line(format!("    纳税人识别号 Taxpayer ID: {}", p.taxpayer_id));
    w.line(format!(
        "    地址、电话 Address, phone: {} {}",
        p.address, p.phone
    ));
    w.line(format!(
        "    开户行及账号 Bank, account: {} {}",
        p.bank, p.bank_account
    ));
}

fn layout(inv: &Invoice, w: &mut Writer) {
    let title = match inv.kind {
        InvoiceKind::BuyerInvoice => "发票明细 Invoice",
        InvoiceKind::SupplierSelfBilling => "供应商自开/代开结算单 Supplier self-billing statement",
        InvoiceKind::CreditNote => "红字发票明细 Credit note",
    };
    w.ensure_room(TITLE_PT * 2.0);
    w.text_at(MARGIN_PT, TITLE_PT, title.to_string());
    w.y += TITLE_PT * 1.5;
    w.line(format!("编号 No. {}", inv.number));
    w.line(format!("开票日期 Issue date: {}", inv.issued_date));
    if let Some(c) = inv.corrects {
        w.line(format!(
            "对应蓝字发票 Corrects invoice No. {} (period {})",
            c.number, c.period
        ));
    }
    w.line(format!(
        "期间 Period: {} – {} ({})",
        minute(&inv.period.from_local),
        minute(&inv.period.to_local),
        inv.period.time_zone
    ));
    w.line(format!(
        "税率 VAT rate: {}  价格含税 Prices include VAT  币种 Currency: CNY",
        percent(inv.vat_rate)
    ));
    w.gap();
    party(w, "销售方 Seller", &inv.seller);
    w.gap();
    party(w, "购买方 Purchaser", &inv.purchaser);
    w.gap();
    let self_billing = inv.kind == InvoiceKind::SupplierSelfBilling;
    let opt = |d: Option<Decimal>| d.map(money).unwrap_or_default();
    // Issue 25: the filing fields. Every line has the same classification and unit, so they
    // print once above the lines; each line's unit price prints under it.
    if let Some(l) = inv.lines.first() {
        w.line(format!(
            "项目名称 Item: {}   单位 Unit: {} (GPU-hour)",
            l.tax_classification, l.unit
        ));
    }
    w.cells(&[
        "项目 SKU".into(),
        "数量 Qty".into(),
        if self_billing { "收款 Collected" } else { "" }.into(),
        if self_billing { "平台费 Fee" } else { "" }.into(),
        "金额 Net".into(),
        "税率".into(),
        "税额 VAT".into(),
        "价税合计 Gross".into(),
    ]);
    w.rule();
    for l in &inv.lines {
        w.cells(&[
            l.sku.clone(),
            l.gpu_hours.to_string(),
            opt(l.charges_collected),
            opt(l.platform_fee),
            money(l.net),
            percent(inv.vat_rate),
            money(l.vat),
            money(l.gross),
        ]);
        if let Some(p) = l.unit_price {
            w.line(format!(
                "    单价 Unit price (net of VAT): {p} / {}",
                l.unit
            ));
        }
    }
    w.rule();
    let t = &inv.totals;
    w.cells(&[
        "合计 Total".into(),
        t.gpu_hours.to_string(),
        opt(t.charges_collected),
        opt(t.platform_fee),
        money(t.net),
        String::new(),
        money(t.vat),
        money(t.gross),
    ]);
    w.gap();
    w.line(format!(
        "合计金额 Net total: {}   合计税额 VAT total: {}   价税合计 Gross total: {}",
        money(t.net),
        money(t.vat),
        money(t.gross)
    ));
    w.line(format!(
        "价税合计（大写） Gross in words: {}",
        t.gross_in_words
    ));
    if !inv.notes.is_empty() {
        w.gap();
        w.line("备注 Notes (not part of the taxable amount):".into());
        for n in &inv.notes {
            w.note(
                // Issue 25: the date, not the time to the millisecond.
                &format!(
                    "{} {} {}",
                    n.kind,
                    n.at_local.get(..10).unwrap_or(&n.at_local),
                    n.reference
                ),
                money(n.amount),
            );
        }
    }
    w.gap();
    w.line("本单为平台开票明细；增值税发票以税务机关系统开具的全面数字化电子发票为准。".into());
    w.line(
        "This is the platform's invoice detail; the official VAT invoice is issued through the tax authority's system."
            .into(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_groups_thousands_and_keeps_the_sign() {
        assert_eq!(money(Decimal::new(123_456_750, 2)), "1,234,567.50");
        assert_eq!(money(Decimal::new(-100, 2)), "-1.00");
        assert_eq!(money(Decimal::ZERO), "0.00");
        assert_eq!(money(Decimal::new(99_999, 2)), "999.99");
        assert_eq!(percent(Decimal::new(6, 2)), "6%");
        assert_eq!(percent(Decimal::new(15, 3)), "1.5%");
    }

    #[test]
    fn a_long_note_wraps_within_its_width_and_keeps_every_character() {
        let reason = "é".repeat(500);
        let lines = wrap(&reason, NOTE_TEXT_WIDTH_PT, BODY_PT, NOTE_MAX_LINES);
        // 421 pt / (0.62 em × 9 pt) = 75.4: 75 characters a line, 500 = 6 × 75 + 50.
        assert_eq!(
            lines.iter().map(|l| l.chars().count()).collect::<Vec<_>>(),
            [75, 75, 75, 75, 75, 75, 50]
        );
        assert_eq!(lines.concat(), reason);
        for l in &lines {
            assert!(text_width_pt(l, BODY_PT) <= NOTE_TEXT_WIDTH_PT, "{l}");
        }
        // Words break at spaces; CJK counts full width (421 / 9 = 46 a line).
        assert_eq!(
            wrap("goodwill 补偿 outage apology", 100.0, BODY_PT, 4),
            ["goodwill 补偿", "outage apology"]
        );
        assert_eq!(
            wrap(&"补".repeat(100), NOTE_TEXT_WIDTH_PT, BODY_PT, 9)[0]
                .chars()
                .count(),
            46
        );
        assert_eq!(wrap("", 100.0, BODY_PT, 4), [""]);
    }

    #[test]
    fn text_beyond_the_line_limit_is_cut_with_an_ellipsis() {
        let lines = wrap(
            &"x".repeat(2000),
            NOTE_TEXT_WIDTH_PT,
            BODY_PT,
            NOTE_MAX_LINES,
        );
        assert_eq!(lines.len(), NOTE_MAX_LINES);
        let last = lines.last().expect("lines");
        assert!(last.ends_with('…'), "{last}");
        assert!(text_width_pt(last, BODY_PT) <= NOTE_TEXT_WIDTH_PT);
    }

    #[test]
    fn a_note_prints_its_amount_on_its_first_line_left_of_the_margin() {
        let mut w = Writer::default();
        w.note(
            &format!("adjustment 2026-11-30 T-1: {}", "é".repeat(500)),
            money(Decimal::new(1234, 2)),
        );
        let items: Vec<Item> = w.pages().into_iter().flatten().collect();
        let texts: Vec<(f32, f32, &str)> = items
            .iter()
            .filter_map(|i| match i {
                Item::Text { x, y, s, .. } => Some((*x, *y, s.as_str())),
                Item::Rule { .. } => None,
            })
            .collect();
        assert_eq!(
            texts.len(),
            8 + 1,
            "the prefix, 7 lines of é and the amount"
        );
        let amount = texts.iter().find(|t| t.2 == "12.34").expect("amount drawn");
        assert_eq!((amount.0, amount.1), (NOTE_AMOUNT_X_PT, texts[0].1));
        assert!(amount.0 + text_width_pt("12.34", BODY_PT) <= PAGE_WIDTH_PT - MARGIN_PT);
        for (x, _, s) in texts.iter().filter(|t| t.2 != "12.34") {
            assert!(*x + text_width_pt(s, BODY_PT) <= NOTE_AMOUNT_X_PT, "{s}");
        }
    }
}
