//! End-of-run checks through the API. Any failure makes the run exit non-zero.

use crate::buyer::{BuyerReport, Probe, View, levels_hash};
use crate::http::Api;
use futures_util::{SinkExt, StreamExt};
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;

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
    ws_url: &str,
    skus: &[String],
    buyers: &[(Vec<String>, mpsc::Sender<Probe>)],
) -> anyhow::Result<Check> {
    let (mut ws, _) = tokio_tungstenite::connect_async(ws_url).await?;
    for sku in skus {
        ws.send(Message::Text(
            json!({"type": "subscribe", "sku": sku}).to_string().into(),
        ))
        .await?;
    }
    let mut snaps: BTreeMap<String, View> = BTreeMap::new();
    while snaps.len() < skus.len() {
        let m = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await?
            .ok_or_else(|| anyhow::anyhow!("fresh subscriber closed"))??;
        if let Message::Text(t) = m {
            let v: Value = serde_json::from_str(&t)?;
            if v["type"] == "inventory_snapshot" {
                let mut view = View::default();
                view.apply(&v);
                snaps.insert(v["sku"].as_str().unwrap_or("").to_string(), view);
            }
        }
    }
    let mut compared = 0;
    let mut bad = Vec::new();
    for (sku, snap) in &snaps {
        let want = levels_hash(&snap.levels);
        for (i, (their, probes)) in buyers.iter().enumerate() {
            if !their.contains(sku) {
                continue;
            }
            let (reply, rx) = oneshot::channel();
            probes
                .send(Probe {
                    sku: sku.clone(),
                    seq: snap.seq,
                    reply,
                })
                .await?;
            match tokio::time::timeout(Duration::from_secs(10), rx).await {
                Ok(Ok(Some(h))) if h == want => compared += 1,
                other => bad.push(format!("buyer {i} {sku}@{}: {other:?}", snap.seq)),
            }
        }
    }
    Ok(Check {
        name: "fresh subscriber's inventory equals every client's",
        ok: bad.is_empty() && compared > 0,
        detail: if bad.is_empty() {
            format!("{compared} (client, SKU) views compared")
        } else {
            bad.join("; ")
        },
    })
}

/// The trial balance of the whole run sums to zero and its checks hold.
pub async fn trial_balance(finance: &Api) -> anyhow::Result<Check> {
    let v = finance
        .get("/v1/reports/trial-balance?from=2020-01-01")
        .await?;
    let closing: rust_decimal::Decimal = v["totals"]["closing"]
        .as_str()
        .unwrap_or("x")
        .parse()
        .unwrap_or(rust_decimal::Decimal::ONE);
    let checks_ok = v["checks"]
        .as_array()
        .is_some_and(|a| a.iter().all(|c| c["ok"] == true));
    Ok(Check {
        name: "trial balance sums to zero",
        ok: closing.is_zero() && checks_ok,
        detail: format!("closing total {closing}, checks ok: {checks_ok}"),
    })
}

/// Every acknowledged bid is accounted for: each bid the exchange lists as resting was
/// acknowledged, and each bid acknowledged as resting is either still listed or was seen
/// closing. `listed` holds each buyer's `GET /v1/bids` taken before its report.
pub fn bids_accounted(reports: &[BuyerReport], listed: &[HashSet<String>]) -> Check {
    let mut problems = Vec::new();
    let mut accepted = 0;
    for (r, l) in reports.iter().zip(listed) {
        accepted += r.accepted;
        for id in l.difference(&r.resting) {
            problems.push(format!(
                "{}: bid {id} listed but never acknowledged",
                r.name
            ));
        }
        for id in &r.resting {
            if !l.contains(id) && !r.closed.contains(id) {
                problems.push(format!("{}: bid {id} neither resting nor closed", r.name));
            }
        }
    }
    Check {
        name: "every acknowledged bid accounted for",
        ok: problems.is_empty(),
        detail: if problems.is_empty() {
            format!("{accepted} acknowledged bids")
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
/// in `/metrics` is absent or zero).
pub async fn ledger_consistent(api: &Api) -> anyhow::Result<Check> {
    let text = String::from_utf8(api.get_bytes("/metrics").await?)?;
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
