//! Output: the summary table, the JSON result file and the HTML report with charts (SVG drawn
//! by `plotters`, embedded in one self-contained HTML file).

use crate::checks::{Check, DeliveryFacts, GangFacts, VerificationFacts};
use crate::stats::{AgentCounts, LatencySummary, Stats, summary};
use plotters::prelude::*;
use serde::Serialize;
use std::collections::BTreeMap;

/// Everything a run produced.
#[derive(Clone, Debug, Serialize)]
pub struct RunResult {
    /// Command line settings.
    pub settings: serde_json::Value,
    /// Measured seconds.
    pub seconds: f64,
    /// Arrivals scheduled (open loop).
    pub scheduled: u64,
    /// Commands acknowledged during the measured phase (all types: bids, releases,
    /// heartbeats, the agents' reports and lease-list reads).
    pub acked: u64,
    /// Of those, per second.
    pub acked_per_s: f64,
    /// Commands acknowledged over the whole run, settling and checks included (the latency
    /// table counts these).
    pub acked_total: u64,
    /// Latency per command type.
    pub latency: Vec<LatencySummary>,
    /// Feed lag commit → client.
    pub feed_lag: LatencySummary,
    /// Bid outcomes.
    pub outcomes: BTreeMap<String, u64>,
    /// Errors by code.
    pub errors: BTreeMap<String, u64>,
    /// IOC bids the view said could fill.
    pub fillable_iocs: u64,
    /// Phantom inventory: of those, unfilled with no delta showing the capacity gone.
    pub phantom: u64,
    /// Phantom rate (phantom / fillable IOCs).
    pub phantom_rate: f64,
    /// Unfilled but explained by a delta that arrived in time.
    pub raced: u64,
    /// Unfilled, and the buyer's view had not reached the bid's commit within the judge's
    /// bound (`buyer::VIEW_LATE_BOUND`): a late feed, counted apart from phantoms.
    pub view_late: u64,
    /// Buyer websockets reopened after their connection failed.
    pub reconnects: u64,
    /// Commands whose reply was lost with a failed connection.
    pub lost_replies: u64,
    /// Facts buyers learned only from their re-read after a reopen (docs/api.md §3.8).
    pub resynced: u64,
    /// ms from the leader's SIGKILL until the standby led (`--kill-leader-at`).
    pub takeover_ms: Option<u64>,
    /// What was done to the topology during the run.
    pub events: Vec<String>,
    /// Leases started.
    pub leases: u64,
    /// Nodes silenced past the heartbeat timeout (then back when the run is long enough).
    pub nodes_silenced: u64,
    /// Reports pulled by finance: (name, bytes, ms).
    pub reports: Vec<(String, usize, f64)>,
    /// Lease delivery.
    pub delivery: DeliveryResult,
    /// Supplier trust: verification runs and trust bids (issue 26).
    pub verification: VerificationResult,
    /// Gangs (issue 27): placed, filled, incomplete, whole, failed, time to ready.
    pub gangs: GangFacts,
    /// End checks.
    pub checks: Vec<Check>,
}

/// How the run ended: whether deliveries settled before the checks.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Settling {
    /// Every agent was idle (no report due, nothing provisioning, wiping or held).
    pub settled: bool,
    /// Seconds waited after the arrivals.
    pub seconds: f64,
}

/// Lease delivery figures.
#[derive(Clone, Debug, Serialize)]
pub struct DeliveryResult {
    /// Time from a lease's start (its fill; for a failover replacement, the failover) to its
    /// ready report's `ready_ms`, per lease, from the ready answers.
    pub time_to_ready: LatencySummary,
    /// ready / (ready + not delivered), from the lease list.
    pub delivery_rate: f64,
    /// What the lease list says.
    pub leases: DeliveryFacts,
    /// What the node agents did.
    pub agents: AgentCounts,
    /// Settling after the arrivals.
    pub settling: Settling,
}

/// Supplier trust figures (docs/market-rules.md §12).
#[derive(Clone, Debug, Serialize)]
pub struct VerificationResult {
    /// Time from the exchange placing a run (`start_ms`) to its report's judgment
    /// (`verification.at_ms`), per reported run (exchange times).
    pub duration: LatencySummary,
    /// Runs, results, failures by kind, nodes by status, trust bids and their leases.
    #[serde(flatten)]
    pub facts: VerificationFacts,
}

/// Builds the result from the counters.
#[allow(clippy::too_many_arguments)]
pub fn result(
    stats: &Stats,
    settings: serde_json::Value,
    seconds: f64,
    reports: Vec<(String, usize, f64)>,
    checks: Vec<Check>,
    settling: Settling,
    delivery: DeliveryFacts,
    verification: VerificationFacts,
    gangs: GangFacts,
) -> RunResult {
    let acked = stats.window_acked;
    RunResult {
        settings,
        seconds,
        scheduled: stats.scheduled,
        acked,
        acked_per_s: acked as f64 / seconds.max(0.001),
        acked_total: stats.lat.values().map(|h| h.len()).sum(),
        latency: stats.lat.iter().map(|(k, h)| summary(k, h)).collect(),
        feed_lag: summary("feed lag (commit → client)", &stats.feed_lag),
        outcomes: stats.outcomes.clone(),
        errors: stats.errors.clone(),
        fillable_iocs: stats.fillable_iocs,
        phantom: stats.phantom,
        phantom_rate: stats.phantom as f64 / (stats.fillable_iocs.max(1)) as f64,
        raced: stats.raced,
        view_late: stats.view_late,
        reconnects: stats.reconnects,
        lost_replies: stats.lost_replies,
        resynced: stats.resynced,
        takeover_ms: stats.takeover_ms,
        events: stats.events.clone(),
        leases: stats.leases,
        nodes_silenced: stats.nodes_silenced,
        reports,
        delivery: DeliveryResult {
            time_to_ready: summary("time to ready (fill → ready)", &stats.time_to_ready),
            delivery_rate: delivery.delivery_rate,
            leases: delivery,
            agents: stats.agents.clone(),
            settling,
        },
        verification: VerificationResult {
            duration: summary("verification (placed → reported)", &stats.verify_duration),
            facts: verification,
        },
        gangs,
        checks,
    }
}

/// The verification figures in one line.
fn verification_line(v: &VerificationResult) -> String {
    let f = &v.facts;
    if !f.enabled {
        return format!(
            "verification: off at the exchange; trust bids {:?}",
            f.trust_bids
        );
    }
    format!(
        "verification: {} runs ({} reported, {} left unanswered); placed → reported p50 {:.0} ms, p99 {:.0} ms (max {:.0}); results {:?}; failures by kind {:?}; degraded by {:?}; nodes at the end {:?}; trust bids {:?}; trust leases judged {:?}",
        f.runs,
        f.reported,
        f.left_unanswered,
        v.duration.p50_ms,
        v.duration.p99_ms,
        v.duration.max_ms,
        f.results,
        f.failures_by_kind,
        f.degraded_by_kind,
        f.nodes_at_end,
        f.trust_bids,
        f.trust_leases
    )
}

/// The gang figures in one line.
fn gang_line(g: &GangFacts) -> String {
    format!(
        "gangs: {} bids placed ({} IOC, {} GTC; {} domain-scoped, {} region-scoped; {} end_all): {} filled whole ({} after resting), {} incomplete (fillable nodes {:?}), unfilled by reason {:?}; {} whole, {} failed, {} dissolved before whole; {} members, {} waited for their gang, {} replacements, {} degraded, {} ended with their gang, {} released as a bid; fill → gang ready p50 {:.0} ms, p99 {:.0} ms (max {:.0}, {} gangs)",
        g.placed,
        g.ioc,
        g.gtc,
        g.scope_domain,
        g.scope_region,
        g.end_all,
        g.filled,
        g.filled_later,
        g.incomplete,
        g.incomplete_fillable,
        g.unfilled_by_reason,
        g.whole,
        g.failed,
        g.dissolved,
        g.members,
        g.members_waited,
        g.replacements,
        g.degraded,
        g.ended_with_gang,
        g.released_as_bid,
        g.time_to_ready.p50_ms,
        g.time_to_ready.p99_ms,
        g.time_to_ready.max_ms,
        g.time_to_ready.count
    )
}

/// Prints the summary table.
pub fn print_summary(r: &RunResult) {
    println!("\n== load test summary ({:.1} s) ==", r.seconds);
    println!(
        "arrivals scheduled {}, acknowledged commands {} ({:.0}/s) in the measured phase, {} with settling and checks; leases {}, nodes silenced {}",
        r.scheduled, r.acked, r.acked_per_s, r.acked_total, r.leases, r.nodes_silenced
    );
    println!(
        "{:<34} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "latency (ms, whole run)", "count", "p50", "p99", "p99.9", "max"
    );
    for l in r.latency.iter().chain(std::iter::once(&r.feed_lag)) {
        println!(
            "{:<34} {:>9} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
            l.command, l.count, l.p50_ms, l.p99_ms, l.p999_ms, l.max_ms
        );
    }
    println!("bid outcomes: {:?}", r.outcomes);
    if !r.errors.is_empty() {
        println!("errors and rejections: {:?}", r.errors);
    }
    println!(
        "phantom inventory: {} of {} fillable IOC bids (rate {:.4}; {} unfilled bids explained by a delta in time, {} judged too late: the view had not reached the bid's commit within {} s)",
        r.phantom,
        r.fillable_iocs,
        r.phantom_rate,
        r.raced,
        r.view_late,
        crate::buyer::VIEW_LATE_BOUND.as_secs()
    );
    for e in &r.events {
        println!("topology: {e}");
    }
    if r.reconnects > 0 || r.lost_replies > 0 {
        println!(
            "buyer websockets reopened: {} ({} replies lost with their connection; {} bid and lease facts re-read after reopening)",
            r.reconnects, r.lost_replies, r.resynced
        );
    }
    let d = &r.delivery;
    let t = &d.time_to_ready;
    println!(
        "delivery: time to ready p50 {:.0} ms, p99 {:.0} ms (max {:.0}, {} leases); delivery rate {:.4} ({} ready, {} not delivered: {} reported failed, {} timed out)",
        t.p50_ms,
        t.p99_ms,
        t.max_ms,
        t.count,
        d.delivery_rate,
        d.leases.ready,
        d.leases.not_delivered,
        d.leases.reported_failed,
        d.leases.timed_out
    );
    println!(
        "failovers: {} of the not delivered failed over, {} found no capacity, {} exempt; {} failovers in all; ended before ready: {:?}; provisioning at the end {}; teardowns {:?}",
        d.leases.failed_over,
        d.leases.failover_failed,
        d.leases.failover_exempt,
        d.leases.failovers_all,
        d.leases.ended_before_ready,
        d.leases.provisioning_at_end,
        d.leases.teardowns
    );
    let a = &d.agents;
    println!(
        "agents: {} assigned ({} first seen in a lease list, {} without launch), {} ready, {} failed, {} left to time out, {} abandoned (ended first), {} torn down, {} holds resumed of {}, {} reconciles, {} ws events, refused {:?}, dropped while silent {}; settled {} after {:.1} s",
        a.assigned,
        a.assigned_via_list,
        a.without_launch,
        a.ready,
        a.failed,
        a.left_to_time_out,
        a.abandoned,
        a.torn_down,
        a.resumed,
        a.holds_seen,
        a.reconciles,
        a.ws_events,
        a.refused,
        a.dropped_silent,
        d.settling.settled,
        d.settling.seconds
    );
    println!("{}", verification_line(&r.verification));
    println!("{}", gang_line(&r.gangs));
    for (name, bytes, ms) in &r.reports {
        println!("report {name}: {bytes} bytes in {ms:.1} ms");
    }
    for c in &r.checks {
        println!(
            "[{}] {}: {}",
            if c.ok { "ok" } else { "FAIL" },
            c.name,
            c.detail
        );
    }
}

fn chart(
    title: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<String, Box<dyn std::error::Error>> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 320)).into_drawing_area();
        root.fill(&WHITE)?;
        let x_max = series
            .iter()
            .flat_map(|(_, p)| p.iter().map(|(x, _)| *x))
            .fold(1.0f64, f64::max);
        let y_max = series
            .iter()
            .flat_map(|(_, p)| p.iter().map(|(_, y)| *y))
            .fold(1.0f64, f64::max)
            * 1.1;
        let mut c = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..x_max, 0f64..y_max)?;
        c.configure_mesh()
            .x_desc("seconds")
            .y_desc(y_label)
            .draw()?;
        for (i, (name, points)) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            c.draw_series(LineSeries::new(points.iter().copied(), color))?
                .label(name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
        }
        c.configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
    }
    Ok(svg)
}

/// The HTML report: latency over time, throughput, inventory depth per SKU, the tables.
pub fn html(r: &RunResult, stats: &Stats) -> String {
    let pct = |v: &mut Vec<u64>, q: f64| -> f64 {
        if v.is_empty() {
            return 0.0;
        }
        v.sort_unstable();
        v[((v.len() - 1) as f64 * q) as usize] as f64 / 1000.0
    };
    let mut p50 = Vec::new();
    let mut p99 = Vec::new();
    let mut thr = Vec::new();
    let mut r50 = Vec::new();
    let mut r99 = Vec::new();
    let mut depth: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    // The last second is partial: leave it out of the series.
    let full = stats.seconds.len().saturating_sub(1);
    for (i, s) in stats.seconds.iter().take(full).enumerate() {
        let x = i as f64;
        let mut l = s.bid_lat.clone();
        p50.push((x, pct(&mut l, 0.5)));
        p99.push((x, pct(&mut l, 0.99)));
        thr.push((x, s.acked as f64));
        if !s.ready_lat.is_empty() {
            let mut l = s.ready_lat.clone();
            r50.push((x, pct(&mut l, 0.5)));
            r99.push((x, pct(&mut l, 0.99)));
        }
        for (sku, d) in &s.depth {
            depth.entry(sku.clone()).or_default().push((x, *d as f64));
        }
    }
    let charts = [
        chart(
            "place_bid acknowledgement latency",
            "ms",
            &[("p50".into(), p50), ("p99".into(), p99)],
        ),
        chart(
            "time to ready (fill → ready report), by second of the ready report",
            "ms",
            &[("p50".into(), r50), ("p99".into(), r99)],
        ),
        chart(
            "acknowledged commands per second",
            "commands/s",
            &[("acked".into(), thr)],
        ),
        chart(
            "inventory depth per SKU (free GPUs)",
            "GPUs",
            &depth.into_iter().collect::<Vec<_>>(),
        ),
    ];
    let mut body = String::new();
    for c in charts {
        body.push_str(&c.unwrap_or_else(|e| format!("<p>chart failed: {e}</p>")));
        body.push('\n');
    }
    let d = &r.delivery;
    let delivery = format!(
        "<h2>Delivery</h2><p>Time to ready (from the lease's start, its fill, to the ready report's \
<code>ready_ms</code>, per lease): p50 {:.0} ms, p99 {:.0} ms, p99.9 {:.0} ms, max {:.0} ms over {} leases. \
Delivery rate {:.4}: {} ready, {} not delivered ({} reported failed, {} timed out); of those {} failed over, \
{} found no capacity, {} exempt; {} failovers in all. Ended before ready: {:?}. Still provisioning at the end: {}. \
Teardown records: {:?}. Deliveries {} after {:.1} s.</p><pre>{}</pre>",
        d.time_to_ready.p50_ms,
        d.time_to_ready.p99_ms,
        d.time_to_ready.p999_ms,
        d.time_to_ready.max_ms,
        d.time_to_ready.count,
        d.delivery_rate,
        d.leases.ready,
        d.leases.not_delivered,
        d.leases.reported_failed,
        d.leases.timed_out,
        d.leases.failed_over,
        d.leases.failover_failed,
        d.leases.failover_exempt,
        d.leases.failovers_all,
        d.leases.ended_before_ready,
        d.leases.provisioning_at_end,
        d.leases.teardowns,
        if d.settling.settled {
            "settled"
        } else {
            "were still moving"
        },
        d.settling.seconds,
        serde_json::to_string_pretty(&d.agents).unwrap_or_default()
    );
    let verification = format!(
        "<h2>Verification</h2><p>{}</p><pre>{}</pre>",
        html_escape(&verification_line(&r.verification)),
        html_escape(&serde_json::to_string_pretty(&r.verification).unwrap_or_default())
    );
    let gangs = format!(
        "<h2>Gangs</h2><p>{}</p><pre>{}</pre>",
        html_escape(&gang_line(&r.gangs)),
        html_escape(&serde_json::to_string_pretty(&r.gangs).unwrap_or_default())
    );
    let rows: String = r
        .latency
        .iter()
        .chain(std::iter::once(&r.feed_lag))
        .map(|l| {
            format!(
                "<tr><td>{}</td><td>{}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td></tr>",
                l.command, l.count, l.p50_ms, l.p99_ms, l.p999_ms, l.max_ms
            )
        })
        .collect();
    let checks: String = r
        .checks
        .iter()
        .map(|c| {
            format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                if c.ok { "ok" } else { "<b>FAIL</b>" },
                c.name,
                c.detail
            )
        })
        .collect();
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>GPU exchange load test</title>\
<style>body{{font-family:sans-serif;max-width:960px;margin:2em auto}}table{{border-collapse:collapse}}\
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}td:first-child{{text-align:left}}</style></head><body>\
<h1>GPU exchange load test</h1><p>{:.1} s, {} arrivals scheduled, {} commands acknowledged in the measured phase ({:.0}/s), \
{} leases, {} nodes silenced. Phantom inventory: {} of {} fillable IOC bids.</p>\
<h2>Latency (ms, from the scheduled send time; whole run)</h2><table><tr><th>command</th><th>count</th><th>p50</th><th>p99</th><th>p99.9</th><th>max</th></tr>{rows}</table>\
{delivery}{verification}{gangs}<h2>Checks</h2><table>{checks}</table><h2>Charts</h2>{body}\
<h2>Settings</h2><pre>{}</pre></body></html>",
        r.seconds,
        r.scheduled,
        r.acked,
        r.acked_per_s,
        r.leases,
        r.nodes_silenced,
        r.phantom,
        r.fillable_iocs,
        serde_json::to_string_pretty(&r.settings).unwrap_or_default()
    )
}

/// Text for HTML (`&`, `<`, `>`, `"`).
fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
