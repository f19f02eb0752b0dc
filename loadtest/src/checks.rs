//! End-of-run checks through the API. Any failure makes the run exit non-zero.
//!
//! Supplier trust (issue 26) adds two: [`trust_bids_met`] (no lease of a bid requiring trust
//! was made on a node that did not meet the requirement when it was made) and
//! [`verification_unbilled`] (no verification run was billed, shown as a buyer's lease, or
//! listed or leased while under way), and the figures of [`verification_facts`].
//!
//! Fabric domains and gangs (issue 27, docs/market-rules.md §13) add three:
//! [`gangs_all_or_none`] (each gang bid filled all N × G GPUs on N distinct nodes of one
//! place of one supplier, or nothing; replacements stay in that place),
//! [`gangs_billed_together`] (every member that started with the gang bills from the one
//! moment it became whole; nothing of a gang that never did is billed) and
//! [`gang_views_match`] (the `gang` object of each live member's lease view names the
//! gang's members as the lease list and the gang's events do), and the figures of
//! [`gang_facts`]. A lease that ended `not_delivered` with its failed gang is not failed over
//! (§13.3): [`not_delivered_failed_over`] counts it apart.

use crate::buyer::{AtSeq, BuyerReport, GangSeen, Probe, TrustReq, View, levels_hash};
use crate::stats::{LatencySummary, NodeTrust, ObsSpan, Shared, TrustLog, summary, wire_name};
use gpux_client::wire::ws::ServerMsg;
use gpux_client::wire::{
    DecimalStr, EndReasonDto, GangMemberStatusDto, GangScopeDto, KindDto, LeasePurposeDto,
    LeaseStateDto, LeaseView, NodeView,
};
use gpux_client::{Client, ReportQuery, WsOptions};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};

/// One check's result.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    /// Name.
    pub name: &'static str,
    /// Passed.
    pub ok: bool,
    /// What was found.
    pub detail: String,
}

/// No GPU of any node is in two leases at once (from every lease the buyers saw start and
/// end).
pub fn no_gpu_leased_twice(reports: &[BuyerReport]) -> Check {
    // (node, GPU index) → [(start, end, lease)].
    type Intervals = HashMap<(String, u64), Vec<(i64, i64, String)>>;
    let mut by_gpu: Intervals = HashMap::new();
    let mut leases = 0;
    for r in reports {
        for l in &r.leases {
            leases += 1;
            let end = r
                .ended
                .get(&l.id)
                .copied()
                .unwrap_or(l.end_ms)
                .min(l.end_ms);
            for g in &l.gpus {
                by_gpu.entry((l.node.clone(), *g)).or_default().push((
                    l.start_ms,
                    end,
                    l.id.clone(),
                ));
            }
        }
    }
    let mut overlaps = Vec::new();
    for ((node, gpu), mut v) in by_gpu {
        v.sort();
        for w in v.windows(2) {
            if w[1].0 < w[0].1 {
                overlaps.push(format!("node {node} GPU {gpu}: {} and {}", w[0].2, w[1].2));
            }
        }
    }
    Check {
        name: "no GPU leased twice at once",
        ok: overlaps.is_empty(),
        detail: if overlaps.is_empty() {
            format!("{leases} leases checked")
        } else {
            overlaps.into_iter().take(5).collect::<Vec<_>>().join("; ")
        },
    }
}

/// A fresh subscriber's inventory of every SKU equals each buyer's reconstructed view at the
/// same sequence number.
pub async fn fresh_subscriber_agrees(
    client: &Client,
    skus: &[String],
    buyers: &[(Vec<String>, mpsc::Sender<Probe>)],
) -> anyhow::Result<Check> {
    let snaps = snapshots(client, skus).await?;
    let mut compared = 0;
    let (mut jumped, mut forgotten) = (0, 0);
    let mut bad = Vec::new();
    for (sku, snap) in &snaps {
        let want = levels_hash(&snap.inv);
        for (i, (their, probes)) in buyers.iter().enumerate() {
            if !their.contains(sku) {
                continue;
            }
            let (reply, rx) = oneshot::channel();
            probes
                .send(Probe {
                    sku: sku.clone(),
                    seq: snap.seq(),
                    reply,
                })
                .await?;
            match tokio::time::timeout(Duration::from_secs(10), rx).await {
                Ok(Ok(AtSeq::At(h))) if h == want => compared += 1,
                Ok(Ok(AtSeq::JumpedOver)) => jumped += 1,
                Ok(Ok(AtSeq::Forgotten)) => forgotten += 1,
                other => bad.push(format!("buyer {i} {sku}@{}: {other:?}", snap.seq())),
            }
        }
    }
    Ok(Check {
        name: "fresh subscriber's inventory equals every client's",
        ok: bad.is_empty() && compared > 0,
        detail: if bad.is_empty() {
            format!(
                "{compared} (client, SKU) views compared; not comparable: {jumped} jumped over \
                 the snapshot's seq in one batched delta, {forgotten} past the history kept"
            )
        } else {
            bad.join("; ")
        },
    })
}

/// The parts of the trial balance report (settlement's `TrialBalance`, as JSON) the check
/// reads.
#[derive(Deserialize)]
struct TrialBalance {
    totals: TrialTotals,
    checks: Vec<TrialCheck>,
}

#[derive(Deserialize)]
struct TrialTotals {
    closing: DecimalStr,
}

#[derive(Deserialize)]
struct TrialCheck {
    ok: bool,
}

/// The trial balance of the whole run sums to zero and its checks hold.
pub async fn trial_balance(finance: &Client) -> anyhow::Result<Check> {
    let q = ReportQuery {
        from: Some("2020-01-01".into()),
        ..ReportQuery::default()
    };
    let bytes = finance.report("trial-balance", &q).await?;
    let name = "trial balance sums to zero";
    Ok(match serde_json::from_slice::<TrialBalance>(&bytes) {
        Ok(t) => {
            let closing = t.totals.closing.0;
            let checks_ok = t.checks.iter().all(|c| c.ok);
            Check {
                name,
                ok: closing.is_zero() && checks_ok,
                detail: format!("closing total {closing}, checks ok: {checks_ok}"),
            }
        }
        Err(e) => Check {
            name,
            ok: false,
            detail: format!("the trial balance did not decode: {e}"),
        },
    })
}

/// The parts of an invoice (settlement's `Invoice`, as JSON) the invoice run reads.
#[derive(Deserialize)]
struct InvoiceDoc {
    account: u64,
    totals: InvoiceTotals,
}

#[derive(Deserialize)]
struct InvoiceTotals {
    net: DecimalStr,
    vat: DecimalStr,
    gross: DecimalStr,
}

/// The trial balance's rows, as the invoice run reads them.
#[derive(Deserialize)]
struct TrialRows {
    rows: Vec<TrialRowDoc>,
}

#[derive(Deserialize)]
struct TrialRowDoc {
    account: String,
    debits: DecimalStr,
}

/// The first start of a close when none exists yet, ms since epoch (2020-01-01T00:00Z):
/// before any run.
const FIRST_CLOSE_FROM_MS: i64 = 1_577_836_800_000;

/// The month-end invoice run (issue 17): finance closes everything up to a second ago (from
/// the last close's end, or [`FIRST_CLOSE_FROM_MS`]), reads every buyer invoice the close
/// numbered, and each must add up (net + VAT = gross) and bill exactly the buyer's debit
/// turnover in that period's trial balance: a run posts no refunds or adjustments, so a
/// buyer's debits are the charges collected from it, which its invoice bills by SKU (both are
/// `round(Σ exact)` of the same amounts, so they agree to the fen).
pub async fn invoice_run(finance: &Client, close_key: &str) -> anyhow::Result<Check> {
    let name = "invoice run bills each buyer its trial-balance debits";
    let from = finance
        .periods()
        .await?
        .periods
        .last()
        .map_or(FIRST_CLOSE_FROM_MS, |p| p.to_ms);
    let to = crate::buyer::now_ms() - 1_000;
    let closed = finance
        .close_period(
            &gpux_client::wire::ClosePeriodRequest {
                from: from.to_string(),
                to: to.to_string(),
                tz: None,
            },
            close_key,
        )
        .await?;
    let q = ReportQuery {
        from: Some(closed.from_ms.to_string()),
        to: Some(closed.to_ms.to_string()),
        ..ReportQuery::default()
    };
    let tb: TrialRows = serde_json::from_slice(&finance.report("trial-balance", &q).await?)?;
    let debits_of = |account: u64| {
        let name = format!("buyer:{account}");
        tb.rows
            .iter()
            .find(|r| r.account == name)
            .map_or(rust_decimal::Decimal::ZERO, |r| r.debits.0)
    };
    let mut problems = Vec::new();
    let mut gross = rust_decimal::Decimal::ZERO;
    for account in closed.invoices.keys() {
        let bytes = finance
            .invoice(&closed.id.to_string(), account, Some("json"), None)
            .await?;
        let inv: InvoiceDoc = serde_json::from_slice(&bytes)?;
        let t = &inv.totals;
        if t.net.0 + t.vat.0 != t.gross.0 {
            problems.push(format!(
                "invoice of {}: net {} + VAT {} ≠ gross {}",
                inv.account, t.net.0, t.vat.0, t.gross.0
            ));
        }
        let debits = debits_of(inv.account);
        if debits != t.gross.0 {
            problems.push(format!(
                "buyer {}: invoiced {} but debited {} in the trial balance",
                inv.account, t.gross.0, debits
            ));
        }
        gross += t.gross.0;
    }
    Ok(Check {
        name,
        ok: problems.is_empty(),
        detail: if problems.is_empty() {
            format!(
                "period {} [{}, {}) closed: {} buyer invoices, Σ gross {gross} CNY",
                closed.id,
                closed.from_ms,
                closed.to_ms,
                closed.invoices.len()
            )
        } else {
            problems.join("; ")
        },
    })
}

/// Every acknowledged bid is accounted for: each bid the exchange lists as resting was
/// acknowledged (by its reply, or by the re-read after a reopen), and each bid acknowledged as
/// resting is either still listed or was seen closing (by its event, or by the re-read).
/// `listed` holds each buyer's `GET /v1/bids` taken before its report: bid id → client order
/// id. A listed bid whose reply was lost and that no re-read showed
/// ([`BuyerReport::lost_requests`]) is accounted for by this listing (its outcome learned at
/// the end).
pub fn bids_accounted(
    reports: &[BuyerReport],
    listed: &[HashMap<String, Option<String>>],
) -> Check {
    let mut problems = Vec::new();
    let (mut accepted, mut learned_late) = (0, 0);
    for (r, l) in reports.iter().zip(listed) {
        accepted += r.accepted;
        for (id, coid) in l {
            if r.resting.contains(id) {
                continue;
            }
            if coid.as_ref().is_some_and(|c| r.lost_requests.contains(c)) {
                learned_late += 1;
                continue;
            }
            problems.push(format!(
                "{}: bid {id} listed but never acknowledged",
                r.name
            ));
        }
        for id in &r.resting {
            if !l.contains_key(id) && !r.closed.contains(id) {
                problems.push(format!("{}: bid {id} neither resting nor closed", r.name));
            }
        }
    }
    Check {
        name: "every acknowledged bid accounted for",
        ok: problems.is_empty(),
        detail: if problems.is_empty() {
            format!(
                "{accepted} acknowledged bids; {learned_late} resting bids whose reply was lost with a connection"
            )
        } else {
            problems.into_iter().take(5).collect::<Vec<_>>().join("; ")
        },
    }
}

/// No feed gap: every delta continued its client's sequence.
pub fn no_feed_gaps(reports: &[BuyerReport]) -> Check {
    let gaps: u64 = reports.iter().map(|r| r.gaps).sum();
    Check {
        name: "inventory deltas contiguous",
        ok: gaps == 0,
        detail: format!("{gaps} gaps"),
    }
}

/// The exchange's engine and ledger agreed on every lease fact (`gpux_ledger_errors_total`
/// in `/metrics` is absent or zero). `/metrics` is the Prometheus text exposition, outside the
/// JSON API the typed client covers, so it is read here with a plain GET.
pub async fn ledger_consistent(api: &Client) -> anyhow::Result<Check> {
    let url = format!("{}/metrics", api.base_url().trim_end_matches('/'));
    let resp = reqwest::Client::new()
        .get(&url)
        .timeout(api.timeout())
        .send()
        .await?;
    anyhow::ensure!(resp.status() == 200, "GET /metrics: {}", resp.status());
    let text = resp.text().await?;
    let errors: u64 = text
        .lines()
        .filter(|l| l.starts_with("gpux_ledger_errors_total"))
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum();
    Ok(Check {
        name: "engine and ledger agree on every lease",
        ok: errors == 0,
        detail: format!("{errors} ledger errors reported in /metrics"),
    })
}

/// Every lease of the run as its buyer's `GET /v1/leases?state=all` shows it (all pages), with
/// the client's clock (ms since epoch) right after the page that held it came back.
///
/// # Errors
/// A request failed.
pub async fn all_leases(buyers: &[Client]) -> anyhow::Result<Vec<(LeaseView, i64)>> {
    let mut out = Vec::new();
    for b in buyers {
        let mut q = gpux_client::LeaseQuery {
            state: Some("all".into()),
            limit: Some(500),
            ..gpux_client::LeaseQuery::default()
        };
        loop {
            let page = b.leases(&q).await?;
            let at = crate::buyer::now_ms();
            out.extend(page.leases.into_iter().map(|l| (l, at)));
            match page.next_cursor {
                Some(c) => q.cursor = Some(c),
                None => break,
            }
        }
    }
    Ok(out)
}

/// A field as JSON text, for the details of a failed check.
fn shown<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|e| format!("<{e}>"))
}

fn is_zero_charge(l: &LeaseView) -> bool {
    l.billed_seconds == 0
        && l.charged.as_deref().is_none_or(|c| {
            c.parse::<rust_decimal::Decimal>()
                .is_ok_and(|d| d.is_zero())
        })
}

/// No lease is charged for time before it was ready: a lease never ready has 0 billed seconds
/// and a zero charge; an ended lease that was ready has at most ⌈(end − ready) / 1 s⌉ billed
/// seconds (its `ended_at_ms` is the billing end; 0 when that is before `ready_ms`). With
/// `live` (the gateway runs in this process, so shares its clock) a running lease is held to
/// ⌈(read time − ready) / 1 s⌉ as well.
pub fn billed_from_ready(leases: &[(LeaseView, i64)], live: bool) -> Check {
    let (mut never, mut ended, mut running) = (0u64, 0u64, 0u64);
    let mut bad = Vec::new();
    for (l, read_at) in leases {
        let id = &l.id;
        let billed = l.billed_seconds;
        let Some(ready) = l.ready_ms else {
            never += 1;
            if !is_zero_charge(l) {
                bad.push(format!(
                    "lease {id} never ready but billed {billed} s, charged {}",
                    shown(&l.charged)
                ));
            }
            continue;
        };
        let until = match l.ended_at_ms {
            Some(e) => {
                ended += 1;
                e
            }
            None if live => {
                running += 1;
                *read_at
            }
            None => continue,
        };
        let allowed = u64::try_from((until - ready).max(0))
            .unwrap_or(0)
            .div_ceil(1000);
        if billed > allowed {
            bad.push(format!(
                "lease {id}: billed {billed} s, but ready at {ready} and billed until {until} allows {allowed}"
            ));
        }
    }
    Check {
        name: "no lease charged for time before it was ready",
        ok: bad.is_empty(),
        detail: if bad.is_empty() {
            format!(
                "{} leases: {never} never ready (0 s, 0.00), {ended} ended and {running} running held to ⌈(end − ready) / 1 s⌉",
                leases.len()
            )
        } else {
            format!(
                "{} violations: {}",
                bad.len(),
                bad.into_iter().take(5).collect::<Vec<_>>().join("; ")
            )
        },
    }
}

/// What the lease list says about delivery.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DeliveryFacts {
    /// Leases listed.
    pub leases: u64,
    /// Leases that were reported ready (have `ready_ms`).
    pub ready: u64,
    /// Leases that ended `not_delivered`.
    pub not_delivered: u64,
    /// Of those, reported failed by the supplier (they have a `failure_reason`).
    pub reported_failed: u64,
    /// Of those, ended by the provisioning deadline (no report).
    pub timed_out: u64,
    /// Of those, failed over (`migrated_to` names the replacements).
    pub failed_over: u64,
    /// Of those, whose failover found no capacity (`failover_failed` on the buyer's feed).
    pub failover_failed: u64,
    /// Of those, not failed over because under notice or past their end (market-rules §5).
    pub failover_exempt: u64,
    /// Of those, members of a gang that failed (not failed over: §13.3).
    pub gang_failed: u64,
    /// Leases failed over for any reason (not delivered, node failure).
    pub failovers_all: u64,
    /// Leases that ended before they were ready for another reason, by reason.
    pub ended_before_ready: BTreeMap<String, u64>,
    /// Leases still pending or provisioning when listed.
    pub provisioning_at_end: u64,
    /// ready / (ready + not delivered).
    pub delivery_rate: f64,
    /// Teardown records of ended leases, by status (`torn_down`, `wiping`, `overdue`).
    pub teardowns: BTreeMap<String, u64>,
}

/// Counts what the lease list says about delivery.
pub fn delivery_facts(leases: &[(LeaseView, i64)], reports: &[BuyerReport]) -> DeliveryFacts {
    let no_capacity: HashSet<&String> = reports
        .iter()
        .flat_map(|r| r.failover_failed.keys())
        .collect();
    let failed_gangs = failed_gangs(reports);
    let mut f = DeliveryFacts::default();
    for (l, _) in leases {
        f.leases += 1;
        let ready = l.ready_ms.is_some();
        let migrated = !l.migrated_to.is_empty();
        f.ready += u64::from(ready);
        f.failovers_all += u64::from(migrated);
        if let Some(t) = &l.teardown {
            *f.teardowns.entry(wire_name(&t.status)).or_default() += 1;
        }
        match l.end_reason {
            Some(EndReasonDto::NotDelivered) => {
                f.not_delivered += 1;
                if l.failure_reason.is_some() {
                    f.reported_failed += 1;
                } else {
                    f.timed_out += 1;
                }
                if migrated {
                    f.failed_over += 1;
                } else if failed_gangs.contains(l.bid_id.as_str()) {
                    f.gang_failed += 1;
                } else if no_capacity.contains(&l.id) {
                    f.failover_failed += 1;
                } else if failover_exempt(l) {
                    f.failover_exempt += 1;
                }
            }
            Some(r) if !ready => *f.ended_before_ready.entry(wire_name(&r)).or_default() += 1,
            Some(_) => {}
            None => {
                if matches!(
                    l.state,
                    LeaseStateDto::Provisioning | LeaseStateDto::Pending
                ) {
                    f.provisioning_at_end += 1;
                }
            }
        }
    }
    f.delivery_rate = f.ready as f64 / ((f.ready + f.not_delivered).max(1)) as f64;
    f
}

/// A lease exempt from failover (market-rules §5): under a preemption notice, or ended at or
/// past its scheduled end.
fn failover_exempt(l: &LeaseView) -> bool {
    l.notice_deadline_ms.is_some() || l.ended_at_ms.is_some_and(|e| l.end_ms <= e)
}

/// Every lease that ended `not_delivered` was never ready, is charged zero, and was failed
/// over: it names its replacements in `migrated_to` (each of which names it back in
/// `migrated_from`), or its buyer's feed carried `failover_failed` for it (the API's lease
/// record does not say that a failover found no capacity; the private feed does), or it was
/// exempt from failover (under a preemption notice, or past its end: market-rules §5), or it
/// ended with its gang, which failed (§13.3: the gang's `gang_failed` on the buyer's feed).
pub fn not_delivered_failed_over(leases: &[(LeaseView, i64)], reports: &[BuyerReport]) -> Check {
    let failed_gangs = failed_gangs(reports);
    let mut with_gang = 0u64;
    let by_id: HashMap<&str, &LeaseView> = leases.iter().map(|(l, _)| (l.id.as_str(), l)).collect();
    let no_capacity: HashMap<&str, &str> = reports
        .iter()
        .flat_map(|r| r.failover_failed.iter())
        .map(|(l, why)| (l.as_str(), why.as_str()))
        .collect();
    let mut bad = Vec::new();
    let (mut n, mut over, mut exempt) = (0u64, 0u64, 0u64);
    let mut reasons: BTreeMap<&str, u64> = BTreeMap::new();
    for (l, _) in leases {
        if l.end_reason != Some(EndReasonDto::NotDelivered) {
            continue;
        }
        n += 1;
        let id = l.id.as_str();
        if l.ready_ms.is_some() || !is_zero_charge(l) {
            bad.push(format!(
                "lease {id} not delivered but ready_ms {} billed {} charged {}",
                shown(&l.ready_ms),
                l.billed_seconds,
                shown(&l.charged)
            ));
        }
        if !l.migrated_to.is_empty() {
            over += 1;
            for r in &l.migrated_to {
                match by_id.get(r.as_str()) {
                    Some(rl) if rl.migrated_from.as_deref() == Some(id) => {}
                    Some(rl) => bad.push(format!(
                        "lease {id} migrated to {r}, whose migrated_from is {}",
                        shown(&rl.migrated_from)
                    )),
                    None => bad.push(format!("lease {id} migrated to {r}, which is not listed")),
                }
            }
        } else if failed_gangs.contains(l.bid_id.as_str()) {
            with_gang += 1;
        } else if let Some(why) = no_capacity.get(id) {
            *reasons.entry(why).or_default() += 1;
        } else if failover_exempt(l) {
            exempt += 1;
        } else {
            bad.push(format!(
                "lease {id} not delivered, neither failed over nor reported failover_failed"
            ));
        }
    }
    Check {
        name: "every not-delivered lease charged zero and failed over",
        ok: bad.is_empty(),
        detail: if bad.is_empty() {
            format!(
                "{n} not delivered, all never ready and charged 0.00: {over} failed over (replacements name them back), {} failovers found no capacity {reasons:?}, {exempt} exempt (notice / past end), {with_gang} ended with their failed gang",
                reasons.values().sum::<u64>()
            )
        } else {
            format!(
                "{} violations of {n}: {}",
                bad.len(),
                bad.into_iter().take(5).collect::<Vec<_>>().join("; ")
            )
        },
    }
}

/// What the listing watch saw: nodes sampled through the run (`GET /v1/nodes` per supplier
/// each second), and any GPU listed while wiping or any held node listing GPUs.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ListingWatch {
    /// Node samples.
    pub samples: u64,
    /// Samples of a node with GPUs wiping.
    pub wiping: u64,
    /// Samples of a held node.
    pub held: u64,
    /// Samples where leased + wiping + listed exceeded the node's GPUs (a successor waiting
    /// on a wipe holds GPUs that are both), checked against the node's lease list.
    pub overlaps_checked: u64,
    /// Of those, no consistent reading (the node's lease list moved between the two reads).
    pub inconclusive: u64,
    /// What was wrong.
    pub violations: Vec<String>,
    /// Samples of a node with a verification run under way (`verification.status`
    /// `verifying`).
    pub verifying: u64,
    /// Of those, any that listed GPUs (must stay empty: docs/market-rules.md §12.2).
    pub verifying_listed: Vec<String>,
}

fn gpu_set(leases: &[LeaseView]) -> HashSet<u32> {
    leases
        .iter()
        .flat_map(|l| l.gpu_indexes.iter().copied())
        .collect()
}

/// A node whose counts allow an overlap: reads its lease list, the node, the lease list again;
/// when both lists agree (same `leases_version` and hold), the node's listed GPUs must not
/// exceed those neither claimed by a live lease nor wiping.
async fn confirm_overlap(api: &Client, id: &str, w: &mut ListingWatch) {
    for _ in 0..3 {
        let (Ok(a), Ok(n), Ok(c)) = (
            api.node_leases(id).await,
            api.node(id).await,
            api.node_leases(id).await,
        ) else {
            continue;
        };
        if a.leases_version != c.leases_version || a.held != c.held {
            continue;
        }
        let mut busy = gpu_set(&a.leases);
        busy.extend(gpu_set(&a.wiping));
        let (gpus, listed) = (u64::from(n.gpus), u64::from(n.listed_free_gpus));
        w.overlaps_checked += 1;
        if listed + busy.len() as u64 > gpus {
            w.violations.push(format!(
                "node {id}: {listed} GPUs listed, but {} of {gpus} are leased or wiping ({busy:?})",
                busy.len()
            ));
        }
        return;
    }
    w.inconclusive += 1;
}

/// One sample of a node: a held node lists nothing, and no GPU is listed while wiping or
/// leased (from one read of the node); `true` when the lease list must decide (leased +
/// wiping + listed exceeds the GPUs, as when a successor waits on a wipe).
fn sample(n: &NodeView, w: &mut ListingWatch) -> bool {
    let id = &n.id;
    let gpus = u64::from(n.gpus);
    let listed = u64::from(n.listed_free_gpus);
    let leased = u64::from(n.leased_gpus);
    let wiping = u64::from(n.wiping_gpus);
    w.samples += 1;
    w.wiping += u64::from(wiping > 0);
    w.held += u64::from(n.held.is_some());
    let verifying = n
        .verification
        .as_ref()
        .is_some_and(|v| v.status == "verifying" || v.run_lease_id.is_some());
    if verifying {
        w.verifying += 1;
        if listed > 0 {
            w.verifying_listed.push(format!(
                "node {id} verifying (run {}) but lists {listed} GPUs",
                shown(&n.verification.as_ref().and_then(|v| v.run_lease_id.clone()))
            ));
        }
    }
    if n.held.is_some() && listed > 0 {
        w.violations.push(format!(
            "node {id} held ({}) but lists {listed} GPUs",
            shown(&n.held)
        ));
    } else if listed + wiping > gpus || listed + leased > gpus {
        w.violations.push(format!(
            "node {id}: {listed} listed, {leased} leased, {wiping} wiping of {gpus}"
        ));
    } else if wiping > 0 && listed > 0 && listed + leased + wiping > gpus {
        return true;
    }
    false
}

/// Samples every supplier's nodes each second until `stop`: a held node lists nothing, and no
/// GPU is listed while wiping (listed + wiping ≤ GPUs, listed + leased ≤ GPUs, both from one
/// read of the node; where leased + wiping + listed exceeds the GPUs, the lease list decides)
/// or while a verification run is under way. Every view read goes to the trust log
/// (`shared_clock`: the exchange runs on this machine's clock).
pub async fn watch_listings(
    suppliers: Vec<Client>,
    stats: Shared,
    shared_clock: bool,
    mut stop: watch::Receiver<bool>,
) -> ListingWatch {
    let mut w = ListingWatch::default();
    let mut every = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = stop.changed() => if *stop.borrow() { break },
        }
        for api in &suppliers {
            let sent = crate::buyer::now_ms();
            let Ok(list) = api.nodes().await else {
                continue;
            };
            let back = crate::buyer::now_ms();
            if let Ok(mut s) = stats.lock() {
                for n in &list.nodes {
                    s.trust.observe(n, sent, back, shared_clock);
                }
            }
            for n in &list.nodes {
                if sample(n, &mut w) {
                    confirm_overlap(api, &n.id, &mut w).await;
                }
            }
        }
    }
    w
}

/// The listing watch as a check (it must have seen wipes to mean anything).
pub fn no_listing_while_wiping(w: &ListingWatch) -> Check {
    Check {
        name: "no GPU listed while wiping, no held node listed",
        ok: w.violations.is_empty() && w.samples > 0,
        detail: if w.violations.is_empty() {
            format!(
                "{} node samples: {} with GPUs wiping, {} held; none listed a wiping GPU or while held ({} overlaps checked on the lease list, {} inconclusive)",
                w.samples, w.wiping, w.held, w.overlaps_checked, w.inconclusive
            )
        } else {
            format!(
                "{} violations: {}",
                w.violations.len(),
                w.violations
                    .iter()
                    .take(5)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        },
    }
}

/// Every SKU's inventory as a fresh anonymous subscriber sees it: one view per SKU, from
/// its snapshot.
async fn snapshots(client: &Client, skus: &[String]) -> anyhow::Result<BTreeMap<String, View>> {
    let anonymous = WsOptions {
        anonymous: true,
        ..WsOptions::default()
    };
    let mut ws = client.connect_ws_with(anonymous).await?;
    for sku in skus {
        ws.subscribe(sku, None).await?;
    }
    let mut snaps = BTreeMap::new();
    while snaps.len() < skus.len() {
        let m = tokio::time::timeout(Duration::from_secs(10), ws.next()).await??;
        if let ServerMsg::InventorySnapshot(s) = m {
            let mut view = View::default();
            view.apply_snapshot(&s)?;
            snaps.insert(s.sku, view);
        }
    }
    Ok(snaps)
}

/// (sku, region) → GPUs the nodes list, over every supplier's nodes, and how many are held.
async fn node_listing(
    suppliers: &[Client],
) -> anyhow::Result<(BTreeMap<(String, String), u64>, u64, u64)> {
    let mut by = BTreeMap::new();
    let (mut held, mut wiping) = (0, 0);
    for api in suppliers {
        for n in api.nodes().await?.nodes {
            *by.entry((n.sku, n.region)).or_default() += u64::from(n.listed_free_gpus);
            held += u64::from(n.held.is_some());
            wiping += u64::from(n.wiping_gpus);
        }
    }
    by.retain(|_, v| *v > 0);
    Ok((by, held, wiping))
}

/// The market's inventory equals what the nodes list: a fresh subscriber's free GPUs per
/// (SKU, region), for spot and for preemptible levels alike, equal the sum of the nodes'
/// `listed_free_gpus` (read before and after the snapshot, and equal both times), so GPUs
/// wiping and held nodes, which list nothing, are in no level. Only meaningful when the run's
/// suppliers are the whole market (the in-process gateway).
pub async fn inventory_matches_nodes(
    client: &Client,
    skus: &[String],
    suppliers: &[Client],
) -> anyhow::Result<Check> {
    for _ in 0..5 {
        let (before, held, wiping) = node_listing(suppliers).await?;
        let snaps = snapshots(client, skus).await?;
        let (after, _, _) = node_listing(suppliers).await?;
        if before != after {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        }
        let mut bad = Vec::new();
        for kind in [KindDto::Spot, KindDto::Preemptible] {
            let mut levels: BTreeMap<(String, String), u64> = BTreeMap::new();
            for (sku, v) in &snaps {
                for (key, level) in v.inv.levels() {
                    if key.kind == kind {
                        *levels.entry((sku.clone(), key.region.clone())).or_default() +=
                            u64::from(level.free_gpus);
                    }
                }
            }
            levels.retain(|_, v| *v > 0);
            for key in before.keys().chain(levels.keys()).collect::<HashSet<_>>() {
                let (n, l) = (
                    before.get(key).copied().unwrap_or(0),
                    levels.get(key).copied().unwrap_or(0),
                );
                if n != l {
                    bad.push(format!(
                        "{} {} {}: nodes list {n}, levels show {l}",
                        key.0,
                        key.1,
                        kind.as_str()
                    ));
                }
            }
        }
        return Ok(Check {
            name: "inventory levels equal the nodes' listings",
            ok: bad.is_empty(),
            detail: if bad.is_empty() {
                format!(
                    "{} (SKU, region) listings equal their levels; {held} nodes held, {wiping} GPUs wiping at the end, none listed",
                    before.len()
                )
            } else {
                bad.into_iter().take(5).collect::<Vec<_>>().join("; ")
            },
        });
    }
    Ok(Check {
        name: "inventory levels equal the nodes' listings",
        ok: false,
        detail: "the nodes' listings kept moving: no consistent reading in 5 tries".into(),
    })
}

/// Reads every supplier's nodes once more at the end, into the trust log; answers how many
/// nodes are in each verification status (`off` where the exchange does not verify).
///
/// # Errors
/// A request failed.
pub async fn final_node_views(
    suppliers: &[Client],
    stats: &Shared,
    shared_clock: bool,
) -> anyhow::Result<BTreeMap<String, u64>> {
    let mut by = BTreeMap::new();
    for api in suppliers {
        let sent = crate::buyer::now_ms();
        let list = api.nodes().await?;
        let back = crate::buyer::now_ms();
        let mut s = stats.lock().map_err(|_| anyhow::anyhow!("stats"))?;
        for n in &list.nodes {
            s.trust.observe(n, sent, back, shared_clock);
            *by.entry(NodeTrust::of(n).status).or_default() += 1;
        }
    }
    Ok(by)
}

/// A node's verification as it stood at exchange time `t` (ms), when a read proves it: a read
/// that reflects every command up to `t` ([`ObsSpan::last_after_ms`] ≥ `t`) and whose latest
/// run ended at or before `t` (or none had ended) shows the latest result as of `t`, since any
/// run that ended between that result and `t` would be the latest instead. `None`: every read
/// reflecting `t` shows a run that ended after `t` (the node was judged again since), or no
/// read reflects `t` — then the API does not say what the node was at `t`.
pub fn state_at(spans: &[ObsSpan], t: i64) -> Option<&NodeTrust> {
    spans
        .iter()
        .find(|s| s.last_after_ms >= t && s.state.at_ms.is_none_or(|a| a <= t))
        .map(|s| &s.state)
}

/// UTC day of `ms` since epoch.
fn utc_day(ms: i64) -> i64 {
    ms.div_euclid(86_400_000)
}

/// A node's `matching_reliability` on the UTC day of `t` (docs/market-rules.md §12.3: taken
/// at the first command of the day and fixed until the next midnight), when a read proves
/// it: one reflecting `t` that came back the same UTC day (by the client's clock, which an
/// in-process gateway shares). `Some(None)`: the node was `new` that day. `None`: no such
/// read.
pub fn day_score_at(spans: &[ObsSpan], t: i64) -> Option<Option<&str>> {
    spans
        .iter()
        .find(|s| s.last_after_ms >= t && utc_day(s.last_before_ms) == utc_day(t))
        .map(|s| s.state.matching_reliability.as_deref())
}

fn decimal(s: &str) -> Option<rust_decimal::Decimal> {
    s.parse().ok()
}

/// No lease of a bid that requires trust was made on a node that did not meet it when the
/// lease was made (docs/market-rules.md §12.2–12.3), judged from what the API shows: the
/// bid's requirement from its buyer ([`BuyerReport::trust_bids`]), the lease's node and start
/// from the lease list, and the node's verification and reliability at that start from the
/// node views read through the run ([`state_at`], [`day_score_at`]). Judged at the lease's
/// `start_ms`: a lease made before its start (pending behind a preemption notice) holds its
/// node from the fill, and a run starts only on a wholly free node, so the node's latest
/// result cannot change between the fill and the start. A lease whose node's state at its
/// start no read proves is a failure too (conservative), and so is a lease whose bid is
/// unknown (its reply lost with a connection) when a trust bid's reply was lost. Answers the
/// check and the leases judged by requirement.
pub fn trust_bids_met(
    leases: &[(LeaseView, i64)],
    reports: &[BuyerReport],
    log: &TrustLog,
) -> (Check, BTreeMap<String, u64>) {
    let stale_ms = i64::from(exchange::verify::DEFAULT_STALE_AFTER_S) * 1000;
    let trust: HashMap<&str, &TrustReq> = reports
        .iter()
        .flat_map(|r| r.trust_bids.iter())
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    let known: HashSet<&str> = reports
        .iter()
        .flat_map(|r| r.bid_ids.iter())
        .map(String::as_str)
        .collect();
    let lost_trust: usize = reports.iter().map(|r| r.lost_trust.len()).sum();
    let mut by: BTreeMap<String, u64> = BTreeMap::new();
    let (mut unknown, mut on_verified, mut on_scored, mut on_promise) = (0u64, 0u64, 0u64, 0u64);
    let (mut bad, mut unproven) = (Vec::new(), Vec::new());
    for (l, _) in leases {
        if l.purpose.is_some() {
            continue;
        }
        let Some(req) = trust.get(l.bid_id.as_str()) else {
            unknown += u64::from(!known.contains(l.bid_id.as_str()));
            continue;
        };
        *by.entry(req.label().to_string()).or_default() += 1;
        let (t, id, node) = (l.start_ms, &l.id, &l.node_id);
        let spans = log.nodes.get(node).map_or(&[][..], Vec::as_slice);
        if req.verified {
            match state_at(spans, t) {
                Some(st) => {
                    let fresh = st.at_ms.is_some_and(|a| t - a <= stale_ms);
                    if st.outcome.as_deref() == Some("verified") && fresh {
                        on_verified += 1;
                    } else {
                        bad.push(format!(
                            "lease {id} (bid {}) requires verified but started at {t} on node \
                             {node}, whose latest run then ended at {} as {}",
                            l.bid_id,
                            shown(&st.at_ms),
                            shown(&st.outcome)
                        ));
                    }
                }
                None => unproven.push(format!(
                    "lease {id}: no read proves node {node}'s verification at {t}"
                )),
            }
        }
        // §12.4: the lease's own terms (frozen from its offer at fill) promise at least the
        // floor; a lease without terms came from an offer that promised nothing.
        if let Some(min) = &req.min_sla {
            let promised = l.sla_terms.as_ref().map(|t| t.availability.as_str());
            let ok = promised
                .and_then(decimal)
                .zip(decimal(min))
                .is_some_and(|(p, m)| p >= m);
            if ok {
                on_promise += 1;
            } else {
                bad.push(format!(
                    "lease {id} (bid {}) requires min_sla {min} % but its terms promise {}",
                    l.bid_id,
                    promised.unwrap_or("nothing")
                ));
            }
        }
        if let Some(min) = &req.min_reliability {
            match day_score_at(spans, t) {
                Some(score) => {
                    let ok = score
                        .and_then(decimal)
                        .zip(decimal(min))
                        .is_some_and(|(s, m)| s >= m);
                    if ok {
                        on_scored += 1;
                    } else {
                        bad.push(format!(
                            "lease {id} (bid {}) requires min_reliability {min} but started at \
                             {t} on node {node}, whose score that day was {}",
                            l.bid_id,
                            score.unwrap_or("new")
                        ));
                    }
                }
                None => unproven.push(format!(
                    "lease {id}: no read proves node {node}'s reliability on the day of {t}"
                )),
            }
        }
    }
    let unknown_bad = unknown > 0 && lost_trust > 0;
    let judged: u64 = by.values().sum();
    let check = Check {
        name: "no trust bid filled on a node that did not meet it",
        ok: bad.is_empty() && unproven.is_empty() && !unknown_bad,
        detail: if bad.is_empty() && unproven.is_empty() && !unknown_bad {
            format!(
                "{judged} leases of {} trust bids judged at their start {by:?}: {on_verified} on \
                 nodes verified then, {on_scored} on nodes scored at or above min_reliability, \
                 {on_promise} on offers promising at least min_sla; \
                 {unknown} leases of bids whose reply was lost ({lost_trust} trust bids among \
                 the lost)",
                trust.len()
            )
        } else {
            format!(
                "{} violations, {} unproven{}: {}",
                bad.len(),
                unproven.len(),
                if unknown_bad {
                    format!(
                        ", {unknown} leases of unknown bids while {lost_trust} trust bids' replies were lost"
                    )
                } else {
                    String::new()
                },
                bad.iter()
                    .chain(&unproven)
                    .take(5)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        },
    };
    (check, by)
}

/// Every `lease` / `lease_id` value in a JSON document (a settlement report), as text.
fn lease_ids_in(v: &serde_json::Value, out: &mut HashSet<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                if k == "lease" || k == "lease_id" {
                    match x {
                        serde_json::Value::Number(n) => {
                            out.insert(n.to_string());
                        }
                        serde_json::Value::String(s) => {
                            out.insert(s.clone());
                        }
                        _ => {}
                    }
                }
                lease_ids_in(x, out);
            }
        }
        serde_json::Value::Array(a) => {
            for x in a {
                lease_ids_in(x, out);
            }
        }
        _ => {}
    }
}

/// No verification run was billed or sold (docs/market-rules.md §12.2: a run is not a lease of
/// the lease book — no fill, no charge, no inventory, no settlement entry): no run is in a
/// buyer's lease list and no lease there has `purpose: verification`; every run the agents
/// were given showed price 0, 0 s billed and no charge; no run is named by a line of the
/// settlement reports `reports` (finance's JSON: buyer statements, supplier payouts); no node
/// sampled with a run under way listed a GPU; and no buyer's lease held a run's node while
/// the run was under way (from its start to its judgment; a lease holds its node from its
/// start to its wipe's report).
pub fn verification_unbilled(
    log: &TrustLog,
    leases: &[(LeaseView, i64)],
    reports: &[(String, Vec<u8>)],
    w: &ListingWatch,
) -> Check {
    let mut bad = Vec::new();
    let buyer_ids: HashSet<&str> = leases.iter().map(|(l, _)| l.id.as_str()).collect();
    for (l, _) in leases {
        if l.purpose == Some(LeasePurposeDto::Verification) {
            bad.push(format!(
                "lease {} in a buyer's lease list is a verification run",
                l.id
            ));
        }
    }
    let mut settled = HashSet::new();
    for (name, bytes) in reports {
        match serde_json::from_slice::<serde_json::Value>(bytes) {
            Ok(v) => lease_ids_in(&v, &mut settled),
            Err(e) => bad.push(format!("report {name} did not decode: {e}")),
        }
    }
    let mut by_node: HashMap<&str, Vec<&LeaseView>> = HashMap::new();
    for (l, _) in leases {
        by_node.entry(l.node_id.as_str()).or_default().push(l);
    }
    let mut pairs = 0u64;
    for (id, r) in &log.runs {
        if buyer_ids.contains(id.as_str()) {
            bad.push(format!("verification run {id} is in a buyer's lease list"));
        }
        if settled.contains(id) {
            bad.push(format!(
                "verification run {id} is named in a settlement report"
            ));
        }
        if let Some(b) = &r.billed {
            bad.push(format!("verification run {id} shown with {b}"));
        }
        // Its end: its judgment, else the first result on its node from its start on (a
        // timeout), else still under way.
        let end = r.judged.as_ref().map(|j| j.0).or_else(|| {
            log.results
                .range((r.node.clone(), r.start_ms)..)
                .next()
                .filter(|((n, _), _)| *n == r.node)
                .map(|((_, at), _)| *at)
        });
        let end = end.unwrap_or(i64::MAX);
        for l in by_node.get(r.node.as_str()).into_iter().flatten() {
            pairs += 1;
            let busy_until = match (&l.teardown, l.ended_at_ms) {
                (Some(t), _) => t.torn_down_ms.unwrap_or(i64::MAX),
                (None, Some(e)) => e,
                (None, None) => i64::MAX,
            };
            if l.start_ms < end && r.start_ms < busy_until {
                bad.push(format!(
                    "lease {} held node {} ({} to {}) during verification run {id} ({} to {})",
                    l.id,
                    r.node,
                    l.start_ms,
                    shown(&busy_until),
                    r.start_ms,
                    shown(&end)
                ));
            }
        }
    }
    bad.extend(w.verifying_listed.iter().cloned());
    Check {
        name: "no verification run billed, sold or listed",
        ok: bad.is_empty(),
        detail: if bad.is_empty() {
            format!(
                "{} runs: none in a buyer's lease list or among the {} leases the settlement \
                 reports name, none priced or billed; {} samples of nodes under verification \
                 listed nothing; no buyer lease on a run's node overlapped it ({pairs} pairs)",
                log.runs.len(),
                settled.len(),
                w.verifying
            )
        } else {
            format!(
                "{} violations: {}",
                bad.len(),
                bad.into_iter().take(5).collect::<Vec<_>>().join("; ")
            )
        },
    }
}

/// What the run saw of supplier trust.
#[derive(Clone, Debug, Default, Serialize)]
pub struct VerificationFacts {
    /// The exchange verifies (a node view carried `verification`).
    pub enabled: bool,
    /// Runs the agents were given (each seen in its node's lease list).
    pub runs: u64,
    /// Of those, reported (answered 200).
    pub reported: u64,
    /// Of those, left unanswered on purpose (their deadline fails them).
    pub left_unanswered: u64,
    /// Results seen (each run's judgment once, timeouts included), by outcome.
    pub results: BTreeMap<String, u64>,
    /// Failed results by what decided them (`timeout`, `dcgm`, `missing`, `bf16_tflops`, …).
    pub failures_by_kind: BTreeMap<String, u64>,
    /// Degraded results by what decided them.
    pub degraded_by_kind: BTreeMap<String, u64>,
    /// Nodes by verification status at the end.
    pub nodes_at_end: BTreeMap<String, u64>,
    /// Trust bids by requirement and outcome.
    pub trust_bids: BTreeMap<String, u64>,
    /// Leases of trust bids judged, by requirement.
    pub trust_leases: BTreeMap<String, u64>,
}

/// Counts what the trust log says.
pub fn verification_facts(
    log: &TrustLog,
    nodes_at_end: BTreeMap<String, u64>,
    trust_bids: BTreeMap<String, u64>,
    trust_leases: BTreeMap<String, u64>,
) -> VerificationFacts {
    let mut f = VerificationFacts {
        enabled: nodes_at_end.keys().any(|k| k != "off"),
        runs: log.runs.len() as u64,
        left_unanswered: log.runs.values().filter(|r| r.silent).count() as u64,
        reported: log.runs.values().filter(|r| r.judged.is_some()).count() as u64,
        nodes_at_end,
        trust_bids,
        trust_leases,
        ..VerificationFacts::default()
    };
    for (outcome, by) in log.results.values() {
        *f.results.entry(outcome.clone()).or_default() += 1;
        let kind = by.clone().unwrap_or_else(|| "-".into());
        match outcome.as_str() {
            "failed" => *f.failures_by_kind.entry(kind).or_default() += 1,
            "degraded" => *f.degraded_by_kind.entry(kind).or_default() += 1,
            _ => {}
        }
    }
    f
}

/// Bids whose gang failed (`gang_failed` on their buyer's feed).
fn failed_gangs(reports: &[BuyerReport]) -> HashSet<&str> {
    reports
        .iter()
        .flat_map(|r| r.gangs.iter())
        .filter(|(_, g)| g.failed.is_some())
        .map(|(b, _)| b.as_str())
        .collect()
}

/// Where a node is, for judging a gang's place (docs/market-rules.md §13.2): its supplier
/// (index in the plan), fabric domain as registered, region.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodePlace {
    /// Supplier (index in the plan).
    pub supplier: usize,
    /// Fabric domain.
    pub domain: Option<String>,
    /// Region.
    pub region: String,
}

/// A gang bid with its leases from the list.
struct GangOf<'a> {
    bid: &'a str,
    seen: &'a GangSeen,
    /// Every lease of the bid, in id order (members and replacements).
    leases: Vec<&'a LeaseView>,
}

impl GangOf<'_> {
    /// The members it started with (no `migrated_from`).
    fn originals(&self) -> Vec<&LeaseView> {
        self.leases
            .iter()
            .copied()
            .filter(|l| l.migrated_from.is_none())
            .collect()
    }

    /// When it became whole: its `gang_ready`, else the earliest ready time of its leases.
    fn whole_at(&self) -> Option<i64> {
        self.seen
            .ready_at
            .or_else(|| self.leases.iter().filter_map(|l| l.ready_ms).min())
    }
}

/// Every gang bid of the buyers' reports with its leases, by bid id.
fn gangs<'a>(leases: &'a [(LeaseView, i64)], reports: &'a [BuyerReport]) -> Vec<GangOf<'a>> {
    let mut by_bid: HashMap<&str, Vec<&LeaseView>> = HashMap::new();
    for (l, _) in leases {
        by_bid.entry(l.bid_id.as_str()).or_default().push(l);
    }
    let mut out: Vec<GangOf<'a>> = reports
        .iter()
        .flat_map(|r| r.gangs.iter())
        .map(|(bid, seen)| {
            let mut ls = by_bid.get(bid.as_str()).cloned().unwrap_or_default();
            ls.sort_by_key(|l| (l.id.len(), l.id.clone()));
            GangOf {
                bid: bid.as_str(),
                seen,
                leases: ls,
            }
        })
        .collect();
    out.sort_by_key(|g| (g.bid.len(), g.bid));
    out
}

fn joined(bad: Vec<String>) -> String {
    format!(
        "{} violations: {}",
        bad.len(),
        bad.into_iter().take(5).collect::<Vec<_>>().join("; ")
    )
}

/// No gang partly filled (docs/market-rules.md §13.2): each gang bid's members (its leases
/// without `migrated_from`) are none, or exactly N leases of G GPUs on N distinct nodes of one
/// supplier, all on one fabric domain (scope `domain`) or in one region (scope `region`);
/// its reply or its `bid_closed` said N × G GPUs filled (0 when none); the `gang_formed`
/// members are those leases; each failover replacement has G GPUs in the same place.
/// `places` maps node ids to where the plan put them.
pub fn gangs_all_or_none(
    leases: &[(LeaseView, i64)],
    reports: &[BuyerReport],
    places: &HashMap<String, NodePlace>,
) -> Check {
    let mut bad = Vec::new();
    let (mut placed, mut whole, mut none, mut unknown, mut repl) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut by_scope: BTreeMap<&str, u64> = BTreeMap::new();
    for g in gangs(leases, reports) {
        let Some(spec) = &g.seen.spec else {
            unknown += 1;
            continue;
        };
        placed += 1;
        let (bid, n, per) = (g.bid, spec.nodes, spec.gpus_per_node);
        let all = n * per;
        let closed = g.seen.closed.as_ref().map_or(0, |c| c.0);
        let originals = g.originals();
        if originals.is_empty() {
            none += 1;
            if g.seen.filled_now != 0 || closed != 0 || g.seen.formed.is_some() {
                bad.push(format!(
                    "gang {bid}: no member leases, but {} GPUs filled by its reply, {closed} by its close, formed {}",
                    g.seen.filled_now,
                    shown(&g.seen.formed)
                ));
            }
            continue;
        }
        whole += 1;
        if g.seen.filled_now != all && closed != all {
            bad.push(format!(
                "gang {bid}: {n} × {per}, but its reply filled {} and its close {closed}",
                g.seen.filled_now
            ));
        }
        if originals.len() != n as usize {
            bad.push(format!(
                "gang {bid}: {n} × {per} filled {} members",
                originals.len()
            ));
        }
        let nodes: HashSet<&str> = originals.iter().map(|l| l.node_id.as_str()).collect();
        if nodes.len() != originals.len() {
            bad.push(format!("gang {bid}: two members on one node"));
        }
        for l in &g.leases {
            if l.gpus != per {
                bad.push(format!(
                    "gang {bid}: lease {} has {} GPUs, not {per}",
                    l.id, l.gpus
                ));
            }
        }
        let place_of = |l: &LeaseView| -> Option<(usize, Option<String>)> {
            let p = places.get(&l.node_id)?;
            Some(match spec.scope {
                GangScopeDto::Domain => (p.supplier, p.domain.clone()),
                GangScopeDto::Region => (p.supplier, Some(p.region.clone())),
            })
        };
        let first = place_of(originals[0]);
        match &first {
            None => bad.push(format!("gang {bid}: node {} unknown", originals[0].node_id)),
            Some((_, None)) => bad.push(format!(
                "gang {bid}: domain-scoped, filled on node {} of no domain",
                originals[0].node_id
            )),
            Some(_) => {}
        }
        for l in &g.leases {
            if place_of(l) != first {
                bad.push(format!(
                    "gang {bid}: lease {} on node {} outside the gang's place {}",
                    l.id,
                    l.node_id,
                    shown(&first)
                ));
            }
        }
        repl += (g.leases.len() - originals.len()) as u64;
        *by_scope
            .entry(if spec.scope == GangScopeDto::Domain {
                "domain"
            } else {
                "region"
            })
            .or_default() += 1;
        if let Some(f) = &g.seen.formed {
            let mut a: Vec<&str> = f.iter().map(String::as_str).collect();
            let mut b: Vec<&str> = originals.iter().map(|l| l.id.as_str()).collect();
            a.sort_unstable();
            b.sort_unstable();
            if a != b {
                bad.push(format!(
                    "gang {bid}: formed {a:?}, but its member leases are {b:?}"
                ));
            }
        }
    }
    Check {
        name: "no gang partly filled",
        ok: bad.is_empty(),
        detail: if bad.is_empty() {
            format!(
                "{placed} gang bids: {whole} filled whole on N distinct nodes of one place {by_scope:?}, {none} filled nothing; {repl} replacements in their gang's place; {unknown} with their reply lost"
            )
        } else {
            joined(bad)
        },
    }
}

/// No gang member billed before its gang was whole (docs/market-rules.md §13.3): in a gang
/// that became whole at T (its `gang_ready`, equal to its leases' earliest `ready_ms`), every
/// lease that started with it or replaced a member before T bills from exactly T, a member
/// not ready then had ended before it (never billed), and only a replacement made later
/// bills from a later ready; a gang that never became whole (or failed) has no lease ever
/// ready and nothing charged.
pub fn gangs_billed_together(leases: &[(LeaseView, i64)], reports: &[BuyerReport]) -> Check {
    let mut bad = Vec::new();
    let (mut whole, mut never, mut together, mut later) = (0u64, 0u64, 0u64, 0u64);
    for g in gangs(leases, reports) {
        if g.leases.is_empty() {
            continue;
        }
        let bid = g.bid;
        let Some(t) = g.whole_at() else {
            never += 1;
            for l in &g.leases {
                if !is_zero_charge(l) {
                    bad.push(format!(
                        "gang {bid} never whole, but lease {} billed {} s, charged {}",
                        l.id,
                        l.billed_seconds,
                        shown(&l.charged)
                    ));
                }
            }
            continue;
        };
        whole += 1;
        if g.seen.failed.is_some() {
            bad.push(format!("gang {bid} failed, but became whole at {t}"));
        }
        let earliest = g.leases.iter().filter_map(|l| l.ready_ms).min();
        if earliest != Some(t) {
            bad.push(format!(
                "gang {bid}: gang_ready at {t}, its leases' earliest ready {}",
                shown(&earliest)
            ));
        }
        let mut at_t = 0u64;
        for l in &g.leases {
            let id = &l.id;
            let before = l.migrated_from.is_none() || l.start_ms < t;
            match l.ready_ms {
                Some(r) if r == t => at_t += 1,
                Some(r) if r > t && !before => later += 1,
                Some(r) => bad.push(format!(
                    "gang {bid} whole at {t}: lease {id} (started {}) bills from {r}",
                    l.start_ms
                )),
                None if before && l.ended_at_ms.is_none_or(|e| e > t) => bad.push(format!(
                    "gang {bid} whole at {t}: member {id} live then but never ready"
                )),
                None => {}
            }
        }
        together += at_t;
        let n = g.seen.spec.as_ref().map_or(u32::MAX, |s| s.nodes);
        if at_t == 0 || at_t > u64::from(n) {
            bad.push(format!("gang {bid}: {at_t} members bill from {t}"));
        }
    }
    Check {
        name: "no gang member billed before its gang was whole",
        ok: bad.is_empty(),
        detail: if bad.is_empty() {
            format!(
                "{whole} gangs whole: {together} members billed from the gang's one ready time, {later} later replacements from their own; {never} gangs never whole, nothing of them billed"
            )
        } else {
            joined(bad)
        },
    }
}

/// The `gang` object of each live member's lease view matches the gang (docs/market-rules.md
/// §13): its id is the lease's bid, its size the bid's `nodes`, it names this lease at its
/// rank, and every member it names is a live lease of the bid whose own view names the same
/// members and readiness; the member at each rank is the one `gang_formed` named there or its
/// failover replacement; `ready` is whether `gang_ready` came; a member `ready` runs (billed),
/// one `waiting_for_gang` is not ready. Every live lease of a gang bid carries the object.
pub fn gang_views_match(leases: &[(LeaseView, i64)], reports: &[BuyerReport]) -> Check {
    let by_id: HashMap<&str, &LeaseView> = leases.iter().map(|(l, _)| (l.id.as_str(), l)).collect();
    let seen: HashMap<&str, &GangSeen> = reports
        .iter()
        .flat_map(|r| r.gangs.iter())
        .map(|(b, g)| (b.as_str(), g))
        .collect();
    let mut bad = Vec::new();
    let (mut views, mut gangs_live) = (0u64, HashSet::new());
    let mut statuses: BTreeMap<String, u64> = BTreeMap::new();
    // The member a lease stands in for: follow `migrated_from` back to one that has none.
    let root = |id: &str| -> String {
        let mut cur = id.to_string();
        for _ in 0..64 {
            match by_id
                .get(cur.as_str())
                .and_then(|l| l.migrated_from.clone())
            {
                Some(from) => cur = from,
                None => break,
            }
        }
        cur
    };
    for (l, _) in leases {
        let gs = seen.get(l.bid_id.as_str());
        let Some(g) = &l.gang else {
            if gs.is_some() && l.ended_at_ms.is_none() {
                bad.push(format!(
                    "live lease {} of gang {} without its gang",
                    l.id, l.bid_id
                ));
            }
            continue;
        };
        views += 1;
        gangs_live.insert(g.id.as_str());
        *statuses.entry(wire_name(&g.status)).or_default() += 1;
        let id = l.id.as_str();
        if g.id != l.bid_id {
            bad.push(format!("lease {id} of bid {}: gang {}", l.bid_id, g.id));
        }
        if let Some(spec) = gs.and_then(|s| s.spec.as_ref())
            && g.size != spec.nodes
        {
            bad.push(format!(
                "lease {id}: gang size {} for {} nodes",
                g.size, spec.nodes
            ));
        }
        if g.members.len() != g.size as usize
            || g.members.get(g.rank as usize).and_then(|m| m.as_deref()) != Some(id)
        {
            bad.push(format!(
                "lease {id}: rank {} of {} in members {}",
                g.rank,
                g.size,
                shown(&g.members)
            ));
        }
        for m in g.members.iter().flatten() {
            match by_id.get(m.as_str()).copied() {
                Some(o) if o.bid_id == l.bid_id && o.ended_at_ms.is_none() => {
                    let same = o
                        .gang
                        .as_ref()
                        .is_some_and(|og| og.members == g.members && og.ready == g.ready);
                    if !same {
                        bad.push(format!(
                            "lease {id}: member {m}'s gang is {}, not {}",
                            shown(&o.gang),
                            shown(&g.members)
                        ));
                    }
                }
                Some(o) => bad.push(format!(
                    "lease {id}: member {m} is of bid {}, ended {}",
                    o.bid_id,
                    shown(&o.ended_at_ms)
                )),
                None => bad.push(format!("lease {id}: member {m} not listed")),
            }
        }
        if let Some(formed) = gs.and_then(|s| s.formed.as_ref()) {
            for (r, m) in g.members.iter().enumerate() {
                if let Some(m) = m
                    && formed.get(r).map(String::as_str) != Some(root(m).as_str())
                {
                    bad.push(format!(
                        "gang {}: rank {r} is {m}, which stands in for {}, but gang_formed named {}",
                        g.id,
                        root(m),
                        shown(&formed.get(r))
                    ));
                }
            }
        }
        if let Some(s) = gs
            && s.ready_at.is_some() != g.ready
        {
            bad.push(format!(
                "lease {id}: gang ready {}, gang_ready seen {}",
                g.ready,
                shown(&s.ready_at)
            ));
        }
        match g.status {
            GangMemberStatusDto::Ready if !g.ready || l.state != LeaseStateDto::Active => {
                bad.push(format!(
                    "lease {id}: member ready, gang ready {} state {}",
                    g.ready,
                    wire_name(&l.state)
                ))
            }
            GangMemberStatusDto::WaitingForGang if g.ready || l.ready_ms.is_some() => {
                bad.push(format!(
                    "lease {id}: waiting for its gang, but ready_ms {}",
                    shown(&l.ready_ms)
                ))
            }
            _ => {}
        }
    }
    Check {
        name: "gang members' lease views name their gang",
        ok: bad.is_empty(),
        detail: if bad.is_empty() {
            format!(
                "{views} live member views of {} gangs agree with the lease list and the gang events; by status {statuses:?}",
                gangs_live.len()
            )
        } else {
            joined(bad)
        },
    }
}

/// Gang figures of a run (issue 27).
#[derive(Clone, Debug, Default, Serialize)]
pub struct GangFacts {
    /// Gang bids acknowledged (shape known).
    pub placed: u64,
    /// Of those, IOC / GTC.
    pub ioc: u64,
    /// GTC.
    pub gtc: u64,
    /// Scoped to one fabric domain / one region.
    pub scope_domain: u64,
    /// Scoped to one region.
    pub scope_region: u64,
    /// `on_member_loss: end_all`.
    pub end_all: u64,
    /// Filled whole (their N members leased).
    pub filled: u64,
    /// Of those, GTC gangs that rested first and filled later.
    pub filled_later: u64,
    /// Closed `gang_incomplete` (no place held the whole gang).
    pub incomplete: u64,
    /// `close_detail.fillable` of those: nodes the best place had → count.
    pub incomplete_fillable: BTreeMap<u32, u64>,
    /// Closed unfilled, by reason (`gang_incomplete` included).
    pub unfilled_by_reason: BTreeMap<String, u64>,
    /// Gangs that became whole (every member ready, billed together).
    pub whole: u64,
    /// Gangs that failed before whole (`gang_failed`).
    pub failed: u64,
    /// Filled gangs neither whole nor failed (every member released or lost before whole).
    pub dissolved: u64,
    /// `gang_member_ready` events (members reported ready that waited for the rest).
    pub members_waited: u64,
    /// Member leases (started with their gangs).
    pub members: u64,
    /// Failover replacements of members.
    pub replacements: u64,
    /// Running gangs that lost a member nothing replaced (`gang_degraded`).
    pub degraded: u64,
    /// Leases ended `gang_ended` (`end_all`).
    pub ended_with_gang: u64,
    /// Whole gangs released as a bid (`POST /v1/bids/{id}/release`).
    pub released_as_bid: u64,
    /// From the fill (the members' start) to `gang_ready`, per whole gang.
    pub time_to_ready: LatencySummary,
}

/// Counts the gangs of a run from the lease list and the buyers' reports.
pub fn gang_facts(leases: &[(LeaseView, i64)], reports: &[BuyerReport]) -> GangFacts {
    let mut f = GangFacts::default();
    let mut ttr = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 120_000_000, 3)
        .unwrap_or_else(|_| hdrhistogram::Histogram::new(3).unwrap_or_else(|_| unreachable!()));
    for g in gangs(leases, reports) {
        let s = g.seen;
        f.ended_with_gang += g
            .leases
            .iter()
            .filter(|l| l.end_reason == Some(EndReasonDto::GangEnded))
            .count() as u64;
        f.members_waited += s.member_ready;
        f.degraded += s.degraded;
        f.released_as_bid += u64::from(s.released);
        let Some(spec) = &s.spec else { continue };
        f.placed += 1;
        if s.ioc {
            f.ioc += 1;
        } else {
            f.gtc += 1;
        }
        match spec.scope {
            GangScopeDto::Domain => f.scope_domain += 1,
            GangScopeDto::Region => f.scope_region += 1,
        }
        f.end_all += u64::from(spec.on_member_loss == gpux_client::wire::MemberLossDto::EndAll);
        let originals = g.originals();
        if originals.is_empty() {
            let reason = s
                .close_reason
                .clone()
                .or_else(|| s.closed.as_ref().map(|c| c.1.clone()));
            if let Some(r) = reason {
                if r == "gang_incomplete" {
                    f.incomplete += 1;
                    if let Some(n) = s.fillable {
                        *f.incomplete_fillable.entry(n).or_default() += 1;
                    }
                }
                *f.unfilled_by_reason.entry(r).or_default() += 1;
            }
            continue;
        }
        f.filled += 1;
        f.filled_later += u64::from(s.filled_now == 0);
        f.members += originals.len() as u64;
        f.replacements += (g.leases.len() - originals.len()) as u64;
        match (g.whole_at(), &s.failed) {
            (Some(t), _) => {
                f.whole += 1;
                let start = originals.iter().map(|l| l.start_ms).min().unwrap_or(t);
                let us = u64::try_from(t - start).unwrap_or(0).saturating_mul(1000);
                ttr.record(us.clamp(1, 120_000_000)).ok();
            }
            (None, Some(_)) => f.failed += 1,
            (None, None) => f.dissolved += 1,
        }
    }
    f.time_to_ready = summary("gang time to ready (fill → gang_ready)", &ttr);
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// A lease as the API lists it (ended, never ready, nothing charged), with `extra`'s
    /// fields over it.
    fn lease(id: &str, extra: Value) -> (LeaseView, i64) {
        let mut l = json!({"id": id, "bid_id": "1", "node_id": "1", "offer_id": "1",
                           "sku": "H100-80G", "region": "cn-east-2", "kind": "spot", "gpus": 1,
                           "gpu_indexes": [0], "price": "18.0000", "start_ms": 0,
                           "state": "ended", "billed_seconds": 0, "charged": null,
                           "ready_ms": null, "ended_at_ms": null, "end_ms": 9_000_000,
                           "end_reason": null, "migrated_to": [], "migrated_from": null,
                           "notice_deadline_ms": null, "failure_reason": null});
        for (k, v) in extra.as_object().unwrap() {
            l[k] = v.clone();
        }
        (serde_json::from_value(l).unwrap(), 100_000)
    }

    #[test]
    fn billing_is_held_to_the_time_since_ready() {
        let ok = [
            lease(
                "1",
                json!({"ready_ms": 1_000, "ended_at_ms": 3_001, "billed_seconds": 3, "charged": "0.02"}),
            ),
            lease("2", json!({"end_reason": "released"})),
            lease(
                "3",
                json!({"ready_ms": 5_000, "ended_at_ms": 4_000, "end_reason": "node_failure"}),
            ),
            lease(
                "4",
                json!({"state": "active", "ready_ms": 90_000, "billed_seconds": 10, "charged": "0.10"}),
            ),
        ];
        let c = billed_from_ready(&ok, true);
        assert!(c.ok, "{}", c.detail);
        // One second more than ⌈(end − ready) / 1 s⌉.
        let over = [lease(
            "5",
            json!({"ready_ms": 1_000, "ended_at_ms": 3_000, "billed_seconds": 3}),
        )];
        assert!(!billed_from_ready(&over, true).ok);
        // Charged though never ready.
        let never = [lease("6", json!({"charged": "0.01"}))];
        assert!(!billed_from_ready(&never, true).ok);
        // A running lease beyond the read time: only checked on a shared clock.
        let running = [lease(
            "7",
            json!({"state": "active", "ready_ms": 90_000, "billed_seconds": 11}),
        )];
        assert!(!billed_from_ready(&running, true).ok);
        assert!(billed_from_ready(&running, false).ok);
    }

    /// A gang of 2 × 4 on domain `fab0` of supplier 0 (nodes 10, 11; node 12 on `fab1`, node
    /// 13 on none): whole at 5,000 with its members active and named in their views; then
    /// each way of breaking it is caught.
    #[test]
    fn gangs_are_judged_whole_billed_together_and_named() {
        let place = |d: Option<&str>| NodePlace {
            supplier: 0,
            domain: d.map(String::from),
            region: "cn-east-2".into(),
        };
        let places = HashMap::from([
            ("10".to_string(), place(Some("fab0"))),
            ("11".to_string(), place(Some("fab0"))),
            ("12".to_string(), place(Some("fab1"))),
            ("13".to_string(), place(None)),
        ]);
        let member = |id: &str, node: &str, rank: u32, extra: Value| {
            let mut v = json!({"bid_id": "7", "node_id": node, "gpus": 4, "state": "active",
                               "start_ms": 1_000, "ready_ms": 5_000, "billed_seconds": 1,
                               "charged": "0.01", "gang": {"id": "7", "rank": rank, "size": 2,
                               "members": ["20", "21"], "ready": true, "status": "ready"}});
            for (k, x) in extra.as_object().unwrap() {
                v[k] = x.clone();
            }
            lease(id, v)
        };
        let seen = GangSeen {
            spec: Some(gpux_client::wire::GangRequest {
                nodes: 2,
                gpus_per_node: 4,
                scope: GangScopeDto::Domain,
                on_member_loss: gpux_client::wire::MemberLossDto::Keep,
            }),
            ioc: true,
            filled_now: 8,
            formed: Some(vec!["20".into(), "21".into()]),
            ready_at: Some(5_000),
            ..GangSeen::default()
        };
        let report = |g: GangSeen| BuyerReport {
            gangs: HashMap::from([("7".to_string(), g)]),
            ..BuyerReport::default()
        };
        let good = vec![
            member("20", "10", 0, json!({})),
            member("21", "11", 1, json!({})),
        ];
        let r = [report(seen.clone())];
        for c in [
            gangs_all_or_none(&good, &r, &places),
            gangs_billed_together(&good, &r),
            gang_views_match(&good, &r),
        ] {
            assert!(c.ok, "{}: {}", c.name, c.detail);
        }
        let f = gang_facts(&good, &r);
        assert_eq!((f.placed, f.filled, f.whole, f.members), (1, 1, 1, 2));
        assert_eq!(f.time_to_ready.count, 1);
        // Partly filled: one member only.
        assert!(!gangs_all_or_none(&good[..1], &r, &places).ok);
        // Across two domains, or on a node of none.
        for node in ["12", "13"] {
            let split = vec![good[0].clone(), member("21", node, 1, json!({}))];
            assert!(!gangs_all_or_none(&split, &r, &places).ok, "{node}");
        }
        // A member billed from its own ready, before the gang was whole.
        let early = vec![
            good[0].clone(),
            member("21", "11", 1, json!({"ready_ms": 4_000})),
        ];
        assert!(!gangs_billed_together(&early, &r).ok);
        // A failed gang with a member billed.
        let failed = [report(GangSeen {
            failed: Some("21".into()),
            ready_at: None,
            ..seen.clone()
        })];
        assert!(!gangs_billed_together(&good, &failed).ok);
        // A view naming another member, or waiting though the gang is ready.
        let mut wrong = good.clone();
        wrong[1].0.gang.as_mut().unwrap().members = vec![Some("20".into()), Some("22".into())];
        assert!(!gang_views_match(&wrong, &r).ok);
        let mut waiting = good.clone();
        waiting[0].0.gang.as_mut().unwrap().status = GangMemberStatusDto::WaitingForGang;
        assert!(!gang_views_match(&waiting, &r).ok);
        // A live member without its gang object.
        let mut bare = good.clone();
        bare[0].0.gang = None;
        assert!(!gang_views_match(&bare, &r).ok);
    }

    #[test]
    fn not_delivered_leases_must_be_free_and_failed_over() {
        let nd = |id: &str, mut extra: Value| {
            let fields = extra.as_object_mut().unwrap();
            fields.entry("end_reason").or_insert(json!("not_delivered"));
            fields.entry("ended_at_ms").or_insert(json!(5_000));
            lease(id, extra)
        };
        let mut report = BuyerReport::default();
        report
            .failover_failed
            .insert("2".into(), "no_capacity".into());
        let reports = [report];
        let good = [
            nd(
                "1",
                json!({"migrated_to": ["10"], "failure_reason": "image pull failed"}),
            ),
            lease(
                "10",
                json!({"state": "active", "migrated_from": "1", "ready_ms": 6_000}),
            ),
            nd("2", json!({})),
            nd("3", json!({"notice_deadline_ms": 4_000})),
        ];
        let c = not_delivered_failed_over(&good, &reports);
        assert!(c.ok, "{}", c.detail);
        let f = delivery_facts(&good, &reports);
        assert_eq!(
            (
                f.not_delivered,
                f.reported_failed,
                f.timed_out,
                f.failed_over,
                f.failover_failed,
                f.failover_exempt,
                f.ready
            ),
            (3, 1, 2, 1, 1, 1, 1)
        );
        assert!((f.delivery_rate - 0.25).abs() < 1e-9);
        // Neither failed over nor reported failing over.
        assert!(!not_delivered_failed_over(&[nd("4", json!({}))], &reports).ok);
        // Charged.
        let charged = [nd("2", json!({"billed_seconds": 1, "charged": "0.01"}))];
        assert!(!not_delivered_failed_over(&charged, &reports).ok);
        // A replacement that does not name it back.
        let orphan = [
            nd("1", json!({"migrated_to": ["10"]})),
            lease("10", json!({"state": "active", "migrated_from": "9"})),
        ];
        assert!(!not_delivered_failed_over(&orphan, &reports).ok);
    }

    fn span(at: Option<i64>, outcome: Option<&str>, after: i64, matching: Option<&str>) -> ObsSpan {
        ObsSpan {
            state: NodeTrust {
                status: outcome.unwrap_or("verifying").to_string(),
                at_ms: at,
                outcome: outcome.map(String::from),
                decided_by: None,
                matching_reliability: matching.map(String::from),
            },
            last_after_ms: after,
            last_before_ms: after + 5,
        }
    }

    /// Node 7: verifying (read at 500), its first run failed at 1,000 (read at 3,000), the
    /// next verified at 5,000 (read at 20,000). Node 8: degraded at 2,000 (read at 20,000),
    /// scored 0.9700 that day; node 9 verified at 100, `new`.
    fn log() -> TrustLog {
        let mut log = TrustLog::default();
        log.nodes.insert(
            "7".into(),
            vec![
                span(None, None, 500, None),
                span(Some(1_000), Some("failed"), 3_000, None),
                span(Some(5_000), Some("verified"), 20_000, None),
            ],
        );
        log.nodes.insert(
            "8".into(),
            vec![span(Some(2_000), Some("degraded"), 20_000, Some("0.9700"))],
        );
        log.nodes.insert(
            "9".into(),
            vec![span(Some(100), Some("verified"), 20_000, None)],
        );
        log
    }

    #[test]
    fn a_nodes_verification_is_proven_only_by_a_read_after_the_time() {
        let log = log();
        let seven = &log.nodes["7"];
        let at = |t| state_at(seven, t).map(|s| s.outcome.clone());
        assert_eq!(at(100), Some(None), "verifying then: no result yet");
        assert_eq!(at(2_000), Some(Some("failed".into())));
        assert_eq!(at(6_000), Some(Some("verified".into())));
        // The read at 3,000 is before 4,000, and the next shows a run that ended after it.
        assert_eq!(at(4_000), None);
        assert_eq!(at(30_000), None, "no read reflects it");
        assert_eq!(day_score_at(&log.nodes["8"], 10_000), Some(Some("0.9700")));
        assert_eq!(day_score_at(&log.nodes["9"], 10_000), Some(None));
    }

    #[test]
    fn trust_leases_are_judged_at_their_start() {
        let log = log();
        let verified = TrustReq {
            verified: true,
            ..TrustReq::default()
        };
        let reliable = |m: &str| TrustReq {
            min_reliability: Some(m.into()),
            ..TrustReq::default()
        };
        let mut report = BuyerReport::default();
        report.trust_bids.insert("1".into(), verified.clone());
        report.trust_bids.insert("2".into(), reliable("0.95"));
        report.trust_bids.insert("3".into(), reliable("0.99"));
        report
            .bid_ids
            .extend(["1", "2", "3", "4"].map(String::from));
        let reports = [report];
        let on = |id: &str, bid: &str, node: &str, start: i64| {
            lease(
                id,
                json!({"bid_id": bid, "node_id": node, "start_ms": start, "state": "active"}),
            )
        };
        let good = [
            on("10", "1", "7", 6_000),
            on("11", "1", "9", 1_000),
            on("12", "2", "8", 9_000),
            on("13", "4", "8", 9_000),
        ];
        let (c, by) = trust_bids_met(&good, &reports, &log);
        assert!(c.ok, "{}", c.detail);
        assert_eq!(by.get("verified"), Some(&2));
        assert_eq!(by.get("min_reliability"), Some(&1));
        // A verified bid on the degraded node; one while node 7 was held after failing.
        for (bad, why) in [
            (on("20", "1", "8", 9_000), "degraded"),
            (on("21", "1", "7", 2_000), "failed"),
            (on("22", "3", "8", 9_000), "0.9700"),
            (on("23", "2", "9", 9_000), "new"),
        ] {
            let (c, _) = trust_bids_met(&[bad], &reports, &log);
            assert!(!c.ok && c.detail.contains(why), "{why}: {}", c.detail);
        }
        // Not proven either way: failed, conservatively.
        let (c, _) = trust_bids_met(&[on("24", "1", "7", 4_000)], &reports, &log);
        assert!(!c.ok && c.detail.contains("no read proves"), "{}", c.detail);
        // A lease of an unknown bid fails only when a trust bid's reply was lost.
        let unknown = [on("25", "99", "8", 9_000)];
        assert!(trust_bids_met(&unknown, &reports, &log).0.ok);
        let mut lost = BuyerReport::default();
        lost.lost_trust.insert("lt-buyer-1-7".into());
        assert!(!trust_bids_met(&unknown, &[lost], &log).0.ok);
        // §12.4: a min_sla 99.5 bid's lease must carry terms promising at least 99.5 %.
        let mut report = BuyerReport::default();
        let floor = TrustReq {
            min_sla: Some("99.5".into()),
            ..TrustReq::default()
        };
        report.trust_bids.insert("5".into(), floor);
        report.bid_ids.insert("5".into());
        let reports = [report];
        let with = |id: &str, availability: Option<&str>| {
            let mut v = json!({"bid_id": "5", "node_id": "8", "start_ms": 9_000,
                               "state": "active"});
            if let Some(a) = availability {
                v["sla_terms"] = json!({"availability": a, "credit_multiple": 20,
                    "outage_cap_s": 600, "credit_cap": "charge_so_far",
                    "non_delivery_credit": false, "availability_ratio": "0.9990"});
            }
            lease(id, v)
        };
        let (c, by) = trust_bids_met(&[with("30", Some("99.90"))], &reports, &log);
        assert!(
            c.ok && c.detail.contains("1 on offers promising"),
            "{}",
            c.detail
        );
        assert_eq!(by.get("min_sla"), Some(&1));
        for (bad, why) in [
            (with("31", Some("99.00")), "promise 99.00"),
            (with("32", None), "promise nothing"),
        ] {
            let (c, _) = trust_bids_met(&[bad], &reports, &log);
            assert!(!c.ok && c.detail.contains(why), "{why}: {}", c.detail);
        }
    }

    #[test]
    fn a_verification_run_is_never_billed_sold_or_leased() {
        let mut log = log();
        for (id, start, end) in [("100", 0, 1_000), ("101", 4_000, 5_000)] {
            log.runs
                .insert(id.into(), RunSeenFor::run("7", start, Some(end)));
        }
        // A run left unanswered ends by the result after its start.
        log.runs
            .insert("102".into(), RunSeenFor::run("8", 1_500, None));
        log.results
            .insert(("8".into(), 2_000), ("degraded".into(), None));
        let w = ListingWatch {
            verifying: 3,
            ..ListingWatch::default()
        };
        let statement = (
            "buyer-statements.json".to_string(),
            br#"{"statements": [{"charges": [{"lease": 10, "amount": "1.00"}]}]}"#.to_vec(),
        );
        let fine = [
            lease(
                "10",
                json!({"node_id": "7", "start_ms": 6_000, "state": "active"}),
            ),
            lease(
                "11",
                json!({"node_id": "7", "start_ms": 1_200, "ended_at_ms": 2_000,
                       "teardown": {"status": "torn_down", "deadline_ms": 9_000,
                                    "torn_down_ms": 3_000, "method": "wiped"}}),
            ),
            lease(
                "12",
                json!({"node_id": "8", "start_ms": 2_000, "state": "active"}),
            ),
        ];
        let c = verification_unbilled(&log, &fine, std::slice::from_ref(&statement), &w);
        assert!(c.ok, "{}", c.detail);
        // A lease during run 101; wiping into it; on node 8 during the unanswered run.
        for l in [
            lease("20", json!({"node_id": "7", "start_ms": 4_500})),
            lease(
                "21",
                json!({"node_id": "7", "start_ms": 3_000, "ended_at_ms": 3_500,
                       "teardown": {"status": "torn_down", "deadline_ms": 9_000,
                                    "torn_down_ms": 4_200, "method": "wiped"}}),
            ),
            lease("22", json!({"node_id": "8", "start_ms": 1_900})),
        ] {
            let c = verification_unbilled(&log, &[l], &[], &w);
            assert!(
                !c.ok && c.detail.contains("during verification run"),
                "{}",
                c.detail
            );
        }
        // A run in a buyer's lease list, in a statement, priced; a node listed while verifying.
        let c = verification_unbilled(&log, &[lease("101", json!({"node_id": "3"}))], &[], &w);
        assert!(!c.ok, "{}", c.detail);
        let named = (
            "supplier-payouts.json".to_string(),
            br#"{"lines": [{"lease": 100}]}"#.to_vec(),
        );
        assert!(!verification_unbilled(&log, &[], &[named], &w).ok);
        let mut priced = log.clone();
        if let Some(r) = priced.runs.get_mut("100") {
            r.billed = Some("price 1.0000".into());
        }
        assert!(!verification_unbilled(&priced, &[], &[], &w).ok);
        let listed = ListingWatch {
            verifying_listed: vec!["node 7 verifying but lists 8 GPUs".into()],
            ..ListingWatch::default()
        };
        assert!(!verification_unbilled(&log, &[], &[], &listed).ok);
        let f = verification_facts(&log, BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
        assert_eq!((f.runs, f.reported), (3, 2));
        assert_eq!(f.results.get("degraded"), Some(&1));
    }

    /// Verification runs for the tests.
    struct RunSeenFor;

    impl RunSeenFor {
        fn run(node: &str, start_ms: i64, end: Option<i64>) -> crate::stats::RunSeen {
            crate::stats::RunSeen {
                node: node.into(),
                start_ms,
                silent: end.is_none(),
                judged: end.map(|e| (e, "verified".to_string(), None)),
                billed: None,
            }
        }
    }
}
