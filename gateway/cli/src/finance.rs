//! `gpux report`: a finance report as the server renders it (docs/api.md §4), to a file or
//! stdout. Local dates go to the server as typed, read in `--tz` there (one rule for local
//! times, the server's); RFC 3339 times with an offset go as ms since epoch.

use crate::cli::{ReportArgs, ReportFormat};
use crate::error::CliError;
use crate::output::note;
use crate::run::Ctx;
use gpux_client::ReportQuery;

/// The format: `--format`, else -o's extension, else JSON.
fn format_of(a: &ReportArgs) -> ReportFormat {
    if let Some(f) = a.format {
        return f;
    }
    let ext = a
        .output
        .as_ref()
        .and_then(|p| p.extension())
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("csv") => ReportFormat::Csv,
        Some("xlsx") => ReportFormat::Xlsx,
        _ => ReportFormat::Json,
    }
}

/// `gpux report KIND …`.
pub async fn report(ctx: &Ctx, a: ReportArgs) -> Result<(), CliError> {
    let format = format_of(&a);
    if a.output.is_none() && format == ReportFormat::Xlsx {
        return Err(CliError::Usage(
            "an xlsx report is a binary file: pass -o FILE.xlsx".into(),
        ));
    }
    if a.output.is_none() && ctx.out.json && format != ReportFormat::Json {
        return Err(CliError::Usage(format!(
            "--json prints JSON: drop --format {} or write it with -o FILE",
            format.as_str()
        )));
    }
    let q = ReportQuery {
        from: a.from.as_ref().map(|t| t.to_query()),
        to: a.to.as_ref().map(|t| t.to_query()),
        tz: Some(a.tz.name().to_string()),
        format: Some(format.as_str().to_string()),
        account: a.account.map(|id| id.to_string()),
    };
    let bytes = ctx.client()?.report(a.kind.as_str(), &q).await?;
    if let Some(path) = &a.output {
        std::fs::write(path, &bytes)
            .map_err(|e| CliError::Usage(format!("cannot write {}: {e}", path.display())))?;
        note(format!(
            "{} ({}) written to {} ({} bytes)",
            a.kind.as_str(),
            format.as_str(),
            path.display(),
            bytes.len()
        ));
        return Ok(());
    }
    if ctx.out.json {
        // JSON Lines: a list of statements is one line per statement.
        let v: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| CliError::Unavailable(format!("the report is not JSON: {e}")))?;
        return match v {
            serde_json::Value::Array(items) => items.iter().try_for_each(|i| ctx.out.line(i)),
            other => ctx.out.line(&other),
        };
    }
    ctx.out.text(String::from_utf8_lossy(&bytes).trim_end());
    Ok(())
}
