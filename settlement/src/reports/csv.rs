//! CSV output: one file (byte buffer) per report, a header row, stable
//! column order, `\n` line ends. The same ledger gives byte-identical CSV.

use super::table::Table;
use crate::error::SettlementError;

/// Renders a report table as CSV bytes.
///
/// # Errors
/// [`SettlementError::Export`] if the CSV writer fails (in-memory; not expected).
pub fn to_csv(table: &Table) -> Result<Vec<u8>, SettlementError> {
    let err = |e: ::csv::Error| SettlementError::Export(e.to_string());
    let mut w = ::csv::WriterBuilder::new()
        .terminator(::csv::Terminator::Any(b'\n'))
        .from_writer(Vec::new());
    w.write_record(&table.header).map_err(err)?;
    for row in &table.rows {
        w.write_record(row.iter().map(|c| c.text())).map_err(err)?;
    }
    w.into_inner()
        .map_err(|e| SettlementError::Export(e.to_string()))
}
