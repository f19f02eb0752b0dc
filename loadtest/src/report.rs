//! Output: the summary table, the JSON result file and the HTML report with charts (SVG drawn
//! by `plotters`, embedded in one self-contained HTML file).

use crate::checks::Check;
use crate::stats::{LatencySummary, Stats, summary};
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
    /// Acknowledged commands (all types).
    pub acked: u64,
    /// Acknowledged commands per second.
    pub acked_per_s: f64,
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
    /// Leases started.
    pub leases: u64,
    /// Nodes silenced past the heartbeat timeout (then back when the run is long enough).
    pub nodes_silenced: u64,
    /// Reports pulled by finance: (name, bytes, ms).
    pub reports: Vec<(String, usize, f64)>,
    /// End checks.
    pub checks: Vec<Check>,
}

/// Builds the result from the counters.
pub fn result(
    stats: &Stats,
    settings: serde_json::Value,
    seconds: f64,
    reports: Vec<(String, usize, f64)>,
    checks: Vec<Check>,
) -> RunResult {
    let acked: u64 = stats.lat.values().map(|h| h.len()).sum();
    RunResult {
        settings,
        seconds,
        scheduled: stats.scheduled,
        acked,
        acked_per_s: acked as f64 / seconds.max(0.001),
        latency: stats.lat.iter().map(|(k, h)| summary(k, h)).collect(),
        feed_lag: summary("feed lag (commit → client)", &stats.feed_lag),
        outcomes: stats.outcomes.clone(),
        errors: stats.errors.clone(),
        fillable_iocs: stats.fillable_iocs,
        phantom: stats.phantom,
        phantom_rate: stats.phantom as f64 / (stats.fillable_iocs.max(1)) as f64,
        raced: stats.raced,
        leases: stats.leases,
        nodes_silenced: stats.nodes_silenced,
        reports,
        checks,
    }
}

/// Prints the summary table.
pub fn print_summary(r: &RunResult) {
    println!("\n== load test summary ({:.1} s) ==", r.seconds);
    println!(
        "arrivals scheduled {}, acknowledged commands {} ({:.0}/s), leases {}, nodes silenced {}",
        r.scheduled, r.acked, r.acked_per_s, r.leases, r.nodes_silenced
    );
    println!(
        "{:<34} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "latency (ms)", "count", "p50", "p99", "p99.9", "max"
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
        "phantom inventory: {} of {} fillable IOC bids (rate {:.4}; {} unfilled bids explained by a delta in time)",
        r.phantom, r.fillable_iocs, r.phantom_rate, r.raced
    );
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
    let mut depth: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    // The last second is partial: leave it out of the series.
    let full = stats.seconds.len().saturating_sub(1);
    for (i, s) in stats.seconds.iter().take(full).enumerate() {
        let x = i as f64;
        let mut l = s.bid_lat.clone();
        p50.push((x, pct(&mut l, 0.5)));
        p99.push((x, pct(&mut l, 0.99)));
        thr.push((x, s.acked as f64));
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
<h1>GPU exchange load test</h1><p>{:.1} s, {} arrivals scheduled, {} commands acknowledged ({:.0}/s), \
{} leases, {} nodes silenced. Phantom inventory: {} of {} fillable IOC bids.</p>\
<h2>Latency (ms, from the scheduled send time)</h2><table><tr><th>command</th><th>count</th><th>p50</th><th>p99</th><th>p99.9</th><th>max</th></tr>{rows}</table>\
<h2>Checks</h2><table>{checks}</table><h2>Charts</h2>{body}\
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
