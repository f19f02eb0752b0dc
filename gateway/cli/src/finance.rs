//! Finance commands (docs/api.md §2.5, §4):
//!
//! - `gpux report`: a finance report as the server renders it, to a file or stdout.
//! - `gpux adjust`: an adjustment; `gpux periods` / `gpux close`: closed periods and closing
//!   one; `gpux invoice`: a closed period's invoice or self-billing statement.
//! - `gpux invoices`: the signed-in key's documents of closed periods (finance: every
//!   account's, or `--account`'s), and `gpux invoices get PERIOD`: one of them, found in that
//!   list and downloaded by its path's kind (invoice or credit note, issue 25).
//!
//! Local dates go to the server as typed, read in `--tz` there (one rule for local times, the
//! server's); RFC 3339 times with an offset go as ms since epoch. Adjustments and closes always
//! carry an `Idempotency-Key` (the API requires one: it names the action); without
//! `--idempotency-key` a fresh one is made and printed on stderr, so an unclear failure can be
//! retried without posting twice (docs/api.md §1.6).

use crate::cli::{
    AdjustArgs, AdjustKind, CloseArgs, DocKind, InvoiceArgs, InvoiceFormat, InvoiceGetArgs,
    InvoicesArgs, InvoicesCmd, ReportArgs, ReportFormat,
};
use crate::error::CliError;
use crate::output::{human, note};
use crate::run::Ctx;
use gpux_client::ReportQuery;
use gpux_wire::{AdjustmentKindDto, AdjustmentRequest, ClosePeriodRequest};

/// `--idempotency-key`, or a fresh key printed on stderr for a retry.
pub fn key_or_fresh(given: Option<String>) -> String {
    given.unwrap_or_else(|| {
        let k = format!("gpux-{}", uuid::Uuid::new_v4());
        note(format!(
            "idempotency key {k} (repeat with --idempotency-key {k} if this fails unclearly)"
        ));
        k
    })
}

/// `gpux adjust`: the flags as the API's body, unchecked (the server names a bad field).
pub async fn adjust(ctx: &Ctx, a: AdjustArgs) -> Result<(), CliError> {
    let c = ctx.client()?;
    let kind = match a.kind {
        AdjustKind::GoodwillCredit => AdjustmentKindDto::GoodwillCredit,
        AdjustKind::Correction => AdjustmentKindDto::Correction,
        AdjustKind::Refund => AdjustmentKindDto::Refund,
        AdjustKind::SlaCashOut => AdjustmentKindDto::SlaCashOut,
        AdjustKind::WriteOff => AdjustmentKindDto::WriteOff,
    };
    let body = AdjustmentRequest {
        kind,
        account: a.account.map(|id| id.to_string()),
        debit: a.debit,
        credit: a.credit,
        amount: a.amount,
        reason: a.reason,
        reference: a.reference,
    };
    let key = key_or_fresh(a.idempotency_key);
    let done = c.adjust(&body, &key).await?;
    ctx.out.one(&done, human::adjustment)
}

/// `gpux close`: `--month` as its first day and the next month's, local to `--tz`; `--to`
/// without `--from` starts where the latest closed period ended. Times in the exchange's
/// refusals (`period_not_ended`, `close_not_contiguous`) are shown in `--tz`.
pub async fn close(ctx: &Ctx, a: CloseArgs) -> Result<(), CliError> {
    let c = ctx.client()?;
    let from = match (a.month, a.from, &a.to) {
        (None, None, Some(_)) => {
            let latest = c
                .periods()
                .await?
                .periods
                .into_iter()
                .map(|p| p.to_ms)
                .max();
            let Some(end) = latest else {
                return Err(CliError::Usage(
                    "no period is closed yet: the first close needs --from (its start)".into(),
                ));
            };
            note(format!(
                "the period starts where the latest closed one ended: {} ({})",
                human::zoned(end, a.tz),
                a.tz.name()
            ));
            Some(crate::parse::TimeArg::Ms(end))
        }
        (_, from, _) => from,
    };
    let (from, to) = match (a.month, from, a.to) {
        (Some(first), _, _) => {
            let next = crate::parse::next_month(first)
                .ok_or_else(|| CliError::Usage("--month is out of range".into()))?;
            (
                first.format("%Y-%m-%d").to_string(),
                next.format("%Y-%m-%d").to_string(),
            )
        }
        (None, Some(from), Some(to)) => (from.to_query(), to.to_query()),
        _ => {
            return Err(CliError::Usage(
                "give --month YYYY-MM, or --from and --to".into(),
            ));
        }
    };
    let body = ClosePeriodRequest {
        from,
        to,
        tz: Some(a.tz.name().to_string()),
    };
    if a.idempotency_key.is_none() {
        // A retry must send the same range: `now` and a default start are resolved here.
        note(format!("closing --from {} --to {}", body.from, body.to));
    }
    let key = key_or_fresh(a.idempotency_key);
    let tz = a.tz;
    let closed = c
        .close_period(&body, &key)
        .await
        .map_err(|e| with_times(e.into(), tz))?;
    ctx.out.one(&closed, |p| {
        format!(
            "period {} closed: {} invoice(s), {} self-billing statement(s), {} credit note(s) \
             numbered\n{}",
            p.id,
            p.invoices.len(),
            p.statements.len(),
            p.credit_notes.len(),
            human::periods(std::slice::from_ref(p), tz)
        )
    })
}

/// A close refused with times in its message: the times as dates in `tz`, not ms.
fn with_times(e: CliError, tz: chrono_tz::Tz) -> CliError {
    match e {
        CliError::Api { status, mut error }
            if ["period_not_ended", "close_not_contiguous"].contains(&error.code.as_str()) =>
        {
            error.message = human::ms_as_times(&error.message, tz);
            CliError::Api { status, error }
        }
        other => other,
    }
}

/// The lowercased extension of `-o FILE`, if any: what `--format` defaults to.
fn extension_of(output: Option<&std::path::Path>) -> Option<String> {
    output
        .and_then(|p| p.extension())
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
}

/// The invoice format: `--format`, else -o's extension, else JSON.
fn invoice_format(a: &InvoiceArgs) -> InvoiceFormat {
    if let Some(f) = a.format {
        return f;
    }
    match extension_of(a.output.as_deref()).as_deref() {
        Some("csv") => InvoiceFormat::Csv,
        Some("xlsx") => InvoiceFormat::Xlsx,
        Some("pdf") => InvoiceFormat::Pdf,
        _ => InvoiceFormat::Json,
    }
}

/// `gpux invoice PERIOD ACCOUNT`: to a file as served, one JSON line with `--json`, CSV as
/// text, or a summary for people.
pub async fn invoice(ctx: &Ctx, a: InvoiceArgs) -> Result<(), CliError> {
    let format = invoice_format(&a);
    let binary = matches!(format, InvoiceFormat::Xlsx | InvoiceFormat::Pdf);
    if a.output.is_none() && binary {
        return Err(CliError::Usage(format!(
            "a {} invoice is a binary file: pass -o FILE.{}",
            format.as_str(),
            format.as_str()
        )));
    }
    if a.output.is_none() && ctx.out.json && format != InvoiceFormat::Json {
        return Err(CliError::Usage(format!(
            "--json prints JSON: drop --format {} or write it with -o FILE",
            format.as_str()
        )));
    }
    let bytes = ctx
        .client()?
        .invoice(
            &a.period.to_string(),
            &a.account.to_string(),
            Some(format.as_str()),
            Some(a.tz.name()),
        )
        .await?;
    if let Some(path) = &a.output {
        std::fs::write(path, &bytes)
            .map_err(|e| CliError::Usage(format!("cannot write {}: {e}", path.display())))?;
        note(format!(
            "invoice of account {} for period {} ({}) written to {} ({} bytes)",
            a.account,
            a.period,
            format.as_str(),
            path.display(),
            bytes.len()
        ));
        return Ok(());
    }
    // CSV, and JSON named with --format, go out as served (as `gpux report` does); without a
    // format, a summary for people (like every gpux table; --json for scripts).
    let as_served = format == InvoiceFormat::Csv || (!ctx.out.json && a.format.is_some());
    if as_served {
        ctx.out.text(String::from_utf8_lossy(&bytes).trim_end());
        return Ok(());
    }
    let v: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| CliError::Unavailable(format!("the invoice is not JSON: {e}")))?;
    ctx.out.one(&v, human::invoice)
}

/// The format: `--format`, else -o's extension, else JSON.
fn format_of(a: &ReportArgs) -> ReportFormat {
    if let Some(f) = a.format {
        return f;
    }
    match extension_of(a.output.as_deref()).as_deref() {
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

/// `gpux invoices`: the documents table (one JSON line each with `--json`); `gpux invoices get
/// PERIOD`: one document, to a file or stdout as `gpux invoice` writes it.
pub async fn invoices(ctx: &Ctx, a: InvoicesArgs) -> Result<(), CliError> {
    let account = a.account.map(|id| id.to_string());
    let tz = a.tz;
    let list = ctx
        .client()?
        .documents(account.as_deref(), Some(tz.name()))
        .await?;
    match a.cmd {
        None => ctx.out.list(&list.documents, |d| documents_table(d, &list)),
        Some(InvoicesCmd::Get(g)) => get_document(ctx, &list.documents, g, tz).await,
    }
}

/// The documents as a table for people.
fn documents_table(docs: &[gpux_wire::DocumentView], list: &gpux_wire::Documents) -> String {
    let mut t = human::table(&[
        "PERIOD", "FROM", "TO", "KIND", "NUMBER", "ACCOUNT", "GROSS", "CORRECTS",
    ]);
    for d in docs {
        t.add_row(vec![
            d.period.to_string(),
            d.from_date.clone(),
            d.to_date.clone(),
            kind_name(d.kind).to_string(),
            d.number.to_string(),
            d.account.clone(),
            human::money(&d.gross),
            d.corrects.map_or_else(String::new, |c| {
                format!("invoice {} (period {})", c.number, c.period)
            }),
        ]);
    }
    match docs.len() {
        0 => "(no documents: none of your periods is closed yet)".into(),
        _ if list.truncated => format!(
            "{t}\n(dates in {}; the oldest documents are left out)",
            list.time_zone
        ),
        _ => format!(
            "{t}\n(dates in {}; `gpux invoices get PERIOD` downloads one)",
            list.time_zone
        ),
    }
}

fn kind_name(k: gpux_wire::DocumentKind) -> &'static str {
    match k {
        gpux_wire::DocumentKind::Invoice => "invoice",
        gpux_wire::DocumentKind::SelfBilling => "self-billing",
        gpux_wire::DocumentKind::CreditNote => "credit-note",
    }
}

/// Downloads the one document of `g.period` and `g.kind` (and `g.number`) in `docs`.
async fn get_document(
    ctx: &Ctx,
    docs: &[gpux_wire::DocumentView],
    g: InvoiceGetArgs,
    tz: chrono_tz::Tz,
) -> Result<(), CliError> {
    let want_credit = g.kind == DocKind::CreditNote;
    let found: Vec<_> = docs
        .iter()
        .filter(|d| u64::from(d.period) == g.period)
        .filter(|d| (d.kind == gpux_wire::DocumentKind::CreditNote) == want_credit)
        .filter(|d| g.number.is_none_or(|n| n == d.number))
        .collect();
    let d = match found.as_slice() {
        [d] => *d,
        // Not a usage error (exit 2): the command was right, the document is not there
        // (exit 1, as a 404 is; found in issue 25's review).
        [] => {
            return Err(CliError::Refused(format!(
                "no {} in period {}{}: `gpux invoices` lists the documents you can read",
                kind_name_of(g.kind),
                g.period,
                g.number
                    .map_or_else(String::new, |n| format!(" numbered {n}"))
            )));
        }
        several => {
            let which: Vec<String> = several
                .iter()
                .map(|d| format!("{} of account {}", d.number, d.account))
                .collect();
            return Err(CliError::Usage(format!(
                "period {} holds several: {}; pass --account or --number",
                g.period,
                which.join(", ")
            )));
        }
    };
    let format = g
        .format
        .unwrap_or_else(|| match extension_of(g.output.as_deref()).as_deref() {
            Some("csv") => InvoiceFormat::Csv,
            Some("xlsx") => InvoiceFormat::Xlsx,
            Some("pdf") => InvoiceFormat::Pdf,
            _ => InvoiceFormat::Json,
        });
    if g.output.is_none() && matches!(format, InvoiceFormat::Xlsx | InvoiceFormat::Pdf) {
        return Err(CliError::Usage(format!(
            "a {} document is a binary file: pass -o FILE.{}",
            format.as_str(),
            format.as_str()
        )));
    }
    let client = ctx.client()?;
    let (period, number) = (d.period.to_string(), d.number.to_string());
    let bytes = if want_credit {
        client
            .credit_note(
                &period,
                &d.account,
                Some(&number),
                Some(format.as_str()),
                Some(tz.name()),
            )
            .await?
    } else {
        client
            .invoice(&period, &d.account, Some(format.as_str()), Some(tz.name()))
            .await?
    };
    match &g.output {
        Some(path) => {
            std::fs::write(path, &bytes)
                .map_err(|e| CliError::Usage(format!("cannot write {}: {e}", path.display())))?;
            note(format!(
                "{} {} of account {} for period {} ({}) written to {} ({} bytes)",
                kind_name(d.kind),
                d.number,
                d.account,
                d.period,
                format.as_str(),
                path.display(),
                bytes.len()
            ));
        }
        None => ctx.out.text(String::from_utf8_lossy(&bytes).trim_end()),
    }
    Ok(())
}

fn kind_name_of(k: DocKind) -> &'static str {
    match k {
        DocKind::Invoice => "invoice or self-billing statement",
        DocKind::CreditNote => "credit note",
    }
}
