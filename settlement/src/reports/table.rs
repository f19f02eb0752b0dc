//! A report as a typed table, rendered by [`super::csv`] and [`super::xlsx`].
//!
//! Each report's `table()` fixes its column order (the CSV header); both
//! formats render the same rows, so CSV and XLSX never disagree.

use super::format_local;
use chrono_tz::Tz;
use rust_decimal::Decimal;
use std::borrow::Cow;

/// The first characters that make a spreadsheet read a text cell as a formula (OWASP, "CSV
/// Injection"): `=`, `+`, `-`, `@`, tab and carriage return. A text cell that begins with one
/// is written with a leading `'` ([`formula_safe`]).
pub const FORMULA_PREFIXES: [char; 6] = ['=', '+', '-', '@', '\t', '\r'];

/// `s` as a spreadsheet shows it as text: unchanged, or with a `'` before it when it begins
/// with one of [`FORMULA_PREFIXES`] (a client-chosen request id `=HYPERLINK(…)`, a legal name
/// `@SUM(…)`). Applied to every text cell of every CSV and XLSX report and invoice; numbers,
/// money and times are typed cells and never pass through it. JSON keeps the text as given.
pub fn formula_safe(s: &str) -> Cow<'_, str> {
    if s.starts_with(FORMULA_PREFIXES) {
        Cow::Owned(format!("'{s}"))
    } else {
        Cow::Borrowed(s)
    }
}

/// One typed cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cell {
    /// Nothing.
    Empty,
    /// Text.
    Text(String),
    /// An integer (ids, seconds, GPU counts).
    Int(u64),
    /// A printed CNY amount (2 decimal places).
    Money(Decimal),
    /// Another number (unit prices, GPU-hours, ratios).
    Number(Decimal),
    /// An instant (ms since epoch) shown as local time in `tz`.
    Time {
        /// ms since epoch.
        ms: i64,
        /// Zone.
        tz: Tz,
    },
}

impl Cell {
    /// The CSV text of the cell: numbers as plain decimals (`12.30`), times
    /// as local ISO-8601 with offset, text through [`formula_safe`].
    pub fn text(&self) -> String {
        match self {
            Cell::Empty => String::new(),
            Cell::Text(s) => formula_safe(s).into_owned(),
            Cell::Int(i) => i.to_string(),
            Cell::Money(d) | Cell::Number(d) => d.to_string(),
            Cell::Time { ms, tz } => format_local(*ms, *tz),
        }
    }
}

/// A report as rows under a fixed header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    /// Sheet name (XLSX), at most 31 characters.
    pub name: String,
    /// Column names, in output order.
    pub header: Vec<&'static str>,
    /// Rows, each as long as `header`.
    pub rows: Vec<Vec<Cell>>,
}

/// Builds a row of `width` empty cells and lets the caller set columns by name.
pub(crate) struct RowBuilder<'a> {
    header: &'a [&'static str],
    cells: Vec<Cell>,
}

impl<'a> RowBuilder<'a> {
    pub(crate) fn new(header: &'a [&'static str]) -> Self {
        RowBuilder {
            header,
            cells: vec![Cell::Empty; header.len()],
        }
    }

    pub(crate) fn set(mut self, column: &str, cell: Cell) -> Self {
        if let Some(i) = self.header.iter().position(|h| *h == column) {
            self.cells[i] = cell;
        }
        self
    }

    pub(crate) fn build(self) -> Vec<Cell> {
        self.cells
    }

    /// The `period` row every statement opens with: section `period`, reference = zone,
    /// start/end = the period bounds in local time.
    pub(crate) fn period_row(header: &'a [&'static str], period: &super::PeriodInfo) -> Vec<Cell> {
        let tz = period.tz();
        RowBuilder::new(header)
            .set("section", Cell::Text("period".to_string()))
            .set("reference", Cell::Text(period.time_zone.clone()))
            .set(
                "start",
                Cell::Time {
                    ms: period.from_ms,
                    tz,
                },
            )
            .set(
                "end",
                Cell::Time {
                    ms: period.to_ms,
                    tz,
                },
            )
            .build()
    }
}
