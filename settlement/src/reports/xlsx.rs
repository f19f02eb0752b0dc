//! XLSX output: one sheet per report, typed numeric and date cells, via
//! `rust_xlsxwriter`, returned as bytes.
//!
//! Excel stores numbers as IEEE doubles, so money cells are the printed
//! 2-decimal amounts converted to `f64` (exact to the fen for amounts below
//! 10¹³ CNY); CSV and JSON carry the exact decimal text. Times are written
//! as local wall-clock date-times of the report's zone (Excel has no zone).
//! The document creation time is fixed to 1970-01-01 so the same reports
//! give the same bytes.

use super::local_naive;
use super::table::{Cell, Table, formula_safe};
use crate::error::SettlementError;
use chrono::{Datelike, Timelike};
use rust_decimal::prelude::ToPrimitive;
use rust_xlsxwriter::{DocProperties, ExcelDateTime, Format, Workbook, XlsxError};

fn err(e: XlsxError) -> SettlementError {
    SettlementError::Export(e.to_string())
}

/// Renders report tables as one workbook, one sheet per table, in order.
/// Sheet names are the tables' names (truncated to 31 characters).
///
/// # Errors
/// [`SettlementError::Export`] on duplicate sheet names or a writer failure.
pub fn to_xlsx(tables: &[Table]) -> Result<Vec<u8>, SettlementError> {
    let mut wb = Workbook::new();
    let epoch = ExcelDateTime::from_ymd(1970, 1, 1).map_err(err)?;
    wb.set_properties(&DocProperties::new().set_creation_datetime(&epoch));
    let money = Format::new().set_num_format("#,##0.00");
    let number = Format::new().set_num_format("0.########");
    let time = Format::new().set_num_format("yyyy-mm-dd hh:mm:ss.000");
    let bold = Format::new().set_bold();
    for table in tables {
        let ws = wb.add_worksheet();
        let name: String = table.name.chars().take(31).collect();
        ws.set_name(name).map_err(err)?;
        for (c, h) in table.header.iter().enumerate() {
            let col =
                u16::try_from(c).map_err(|_| SettlementError::Export("too many columns".into()))?;
            ws.write_string_with_format(0, col, *h, &bold)
                .map_err(err)?;
            ws.set_column_width(col, 16).map_err(err)?;
        }
        for (r, row) in table.rows.iter().enumerate() {
            let r = u32::try_from(r + 1)
                .map_err(|_| SettlementError::Export("too many rows".into()))?;
            for (c, cell) in row.iter().enumerate() {
                let col = u16::try_from(c)
                    .map_err(|_| SettlementError::Export("too many columns".into()))?;
                match cell {
                    Cell::Empty => {}
                    Cell::Text(s) => {
                        ws.write_string(r, col, formula_safe(s)).map_err(err)?;
                    }
                    Cell::Int(i) => {
                        ws.write_number(r, col, *i as f64).map_err(err)?;
                    }
                    Cell::Money(d) => {
                        ws.write_number_with_format(r, col, d.to_f64().unwrap_or(0.0), &money)
                            .map_err(err)?;
                    }
                    Cell::Number(d) => {
                        ws.write_number_with_format(r, col, d.to_f64().unwrap_or(0.0), &number)
                            .map_err(err)?;
                    }
                    Cell::Time { ms, tz } => {
                        let Some(t) = local_naive(*ms, *tz) else {
                            continue;
                        };
                        let year = u16::try_from(t.year())
                            .map_err(|_| SettlementError::Export("year".into()))?;
                        let dt = ExcelDateTime::from_ymd(year, t.month() as u8, t.day() as u8)
                            .and_then(|d| {
                                d.and_hms_milli(
                                    t.hour() as u16,
                                    t.minute() as u8,
                                    t.second() as u8,
                                    (t.nanosecond() / 1_000_000).min(999) as u16,
                                )
                            })
                            .map_err(err)?;
                        ws.write_datetime_with_format(r, col, &dt, &time)
                            .map_err(err)?;
                    }
                }
            }
        }
    }
    wb.save_to_buffer().map_err(err)
}
