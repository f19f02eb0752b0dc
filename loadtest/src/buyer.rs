//! A buyer: one websocket, subscribed to its SKUs, keeping a view of the inventory from the
//! snapshot and contiguous deltas; bids sized and priced from that view when an arrival comes
//! (open loop: latency counts from the scheduled time), each with a launch spec (SSH key, for
//! some buyers a Jupyter image); releases leases a random while after they are ready (a few
//! impatient releases while still provisioning); judges every IOC its view said could fill but
//! that did not (phantom or race); notes failovers (`lease_migrated`, `failover_failed`).

use crate::stats::Shared;
use futures_util::{SinkExt, StreamExt};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rust_decimal::Decimal;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_tungstenite::tungstenite::Message;

/// Feed history kept per SKU for the end check: (seq, hash of the levels).
const HISTORY: usize = 4096;
/// Share of leases a buyer releases shortly after they start, usually before they are ready.
const IMPATIENT: f64 = 0.03;

/// A buyer's launch spec (seeded): its SSH key, and for about a third of buyers a PyTorch
/// image with Jupyter's port exposed.
pub fn launch_spec(name: &str, seed: u64) -> Value {
    const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut rng = StdRng::seed_from_u64(seed ^ 0x55AA);
    // An ed25519 public key's shape: the fixed 25-character prefix, then 43 characters.
    let body: String = (0..43)
        .map(|_| B64[rng.random_range(0..B64.len())] as char)
        .collect();
    let key = format!("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{body} {name}@loadtest");
    if rng.random_bool(1.0 / 3.0) {
        json!({"ssh_keys": [key], "image": "nvcr.io/nvidia/pytorch:24.05-py3",
               "command": ["jupyter", "lab", "--ip=0.0.0.0", "--no-browser"],
               "env": {"HF_HOME": "/scratch/hf"}, "ports": [8888], "disk_gb": 200})
    } else {
        json!({"ssh_keys": [key]})
    }
}

/// A level key: (region, kind, price).
pub type LevelKey = (String, String, String);

/// One SKU's view: levels by key → (free GPUs, largest on one node).
#[derive(Clone, Debug, Default)]
pub struct View {
    /// Last applied per-SKU sequence number.
    pub seq: u64,
    /// Levels.
    pub levels: BTreeMap<LevelKey, (u64, u64)>,
    /// Recent (seq, levels hash).
    pub history: VecDeque<(u64, u64)>,
    /// Gaps seen (must stay 0).
    pub gaps: u64,
}

/// Hash of a level map (for comparing views at one sequence number).
pub fn levels_hash(levels: &BTreeMap<LevelKey, (u64, u64)>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    levels.hash(&mut h);
    h.finish()
}

fn key(l: &Value) -> LevelKey {
    (
        l["region"].as_str().unwrap_or("").to_string(),
        l["kind"].as_str().unwrap_or("").to_string(),
        l["price"].as_str().unwrap_or("").to_string(),
    )
}

impl View {
    /// Applies a snapshot or delta.
    pub fn apply(&mut self, m: &Value) {
        match m["type"].as_str() {
            Some("inventory_snapshot") => {
                self.levels.clear();
                for l in m["levels"].as_array().into_iter().flatten() {
                    self.levels.insert(
                        key(l),
                        (
                            l["free_gpus"].as_u64().unwrap_or(0),
                            l["max_single_node"].as_u64().unwrap_or(0),
                        ),
                    );
                }
                self.seq = m["seq"].as_u64().unwrap_or(0);
            }
            Some("inventory_delta") => {
                if m["first_seq"].as_u64() != Some(self.seq + 1) {
                    self.gaps += 1;
                }
                for l in m["levels"].as_array().into_iter().flatten() {
                    let f = l["free_gpus"].as_u64().unwrap_or(0);
                    if f == 0 {
                        self.levels.remove(&key(l));
                    } else {
                        self.levels
                            .insert(key(l), (f, l["max_single_node"].as_u64().unwrap_or(0)));
                    }
                }
                self.seq = m["last_seq"].as_u64().unwrap_or(self.seq);
            }
            _ => return,
        }
        self.history
            .push_back((self.seq, levels_hash(&self.levels)));
        if self.history.len() > HISTORY {
            self.history.pop_front();
        }
    }

    /// The cheapest level of `kind` whose largest single-node block fits `gpus`.
    pub fn best(&self, kind: &str, gpus: u64) -> Option<Decimal> {
        self.levels
            .iter()
            .filter(|((_, k, _), (_, max))| k == kind && *max >= gpus)
            .filter_map(|((_, _, p), _)| p.parse::<Decimal>().ok())
            .min()
    }

    /// Free GPUs in the view.
    pub fn depth(&self) -> u64 {
        self.levels.values().map(|(f, _)| f).sum()
    }
}

/// A started lease as the buyer saw it.
#[derive(Clone, Debug)]
pub struct LeaseRecord {
    /// Lease id.
    pub id: String,
    /// Node id.
    pub node: String,
    /// GPU indexes on the node.
    pub gpus: Vec<u64>,
    /// Start, ms since epoch.
    pub start_ms: i64,
    /// Scheduled end, ms since epoch.
    pub end_ms: i64,
}

/// An end-of-run question: the hash of this buyer's view of `sku` at `seq`.
pub struct Probe {
    /// SKU.
    pub sku: String,
    /// Sequence number.
    pub seq: u64,
    /// Answer: the hash, or `None` when the view never was at `seq`.
    pub reply: oneshot::Sender<Option<u64>>,
}

/// What a buyer reports at the end.
#[derive(Debug, Default)]
pub struct BuyerReport {
    /// Buyer name.
    pub name: String,
    /// Leases seen starting.
    pub leases: Vec<LeaseRecord>,
    /// Lease id → end time seen.
    pub ended: HashMap<String, i64>,
    /// Bids acknowledged as resting (id).
    pub resting: HashSet<String>,
    /// Bids seen closed (id).
    pub closed: HashSet<String>,
    /// Bids acknowledged (any status).
    pub accepted: u64,
    /// Feed gaps (must be 0).
    pub gaps: u64,
    /// Leases seen ready (`lease_ready`).
    pub ready: HashSet<String>,
    /// Failovers seen: lease → its replacements (`lease_migrated`).
    pub migrated: HashMap<String, Vec<String>>,
    /// Failovers that found no capacity: lease → reason (`failover_failed`).
    pub failover_failed: HashMap<String, String>,
}

struct Pending {
    sent: Instant,
    kind: &'static str,
    /// For IOC bids the view said could fill: (sku, lease kind, gpus, limit).
    fillable: Option<(String, String, u64, Decimal)>,
}

struct Judgement {
    due_seq: u64,
    deadline: Instant,
    sku: String,
    kind: String,
    gpus: u64,
    limit: Decimal,
}

/// Runs one buyer until `stop` turns true and its replies are in, then keeps following the
/// feed to answer [`Probe`]s until `done` turns true.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    name: String,
    ws_url: String,
    key: String,
    skus: Vec<String>,
    seed: u64,
    mut arrivals: mpsc::UnboundedReceiver<Instant>,
    mut probes: mpsc::Receiver<Probe>,
    stats: Shared,
    mut stop: watch::Receiver<bool>,
    mut done: watch::Receiver<bool>,
) -> anyhow::Result<BuyerReport> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut req = ws_url.as_str().into_client_request()?;
    req.headers_mut()
        .insert("Authorization", format!("Bearer {key}").parse()?);
    let (ws, _) = tokio_tungstenite::connect_async_with_config(req, None, true).await?;
    let (mut tx, mut rx) = ws.split();
    for sku in &skus {
        tx.send(Message::Text(
            json!({"type": "subscribe", "sku": sku}).to_string().into(),
        ))
        .await?;
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let launch = launch_spec(&name, seed);
    let mut release_planned: HashSet<String> = HashSet::new();
    let mut views: HashMap<String, View> = HashMap::new();
    let mut pending: HashMap<String, Pending> = HashMap::new();
    let mut judgements: Vec<Judgement> = Vec::new();
    let mut releases: BinaryHeap<std::cmp::Reverse<(Instant, String)>> = BinaryHeap::new();
    let mut waiting_probes: Vec<Probe> = Vec::new();
    let mut report = BuyerReport {
        name: name.clone(),
        ..BuyerReport::default()
    };
    let mut n = 0u64;
    let mut stopping = false;
    let mut last_seq = 0u64;
    loop {
        let next_release = releases
            .peek()
            .map(|r| r.0.0)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        let mut out: Vec<Value> = Vec::new();
        tokio::select! {
            a = arrivals.recv(), if !stopping => {
                let Some(scheduled) = a else { stopping = true; continue };
                n += 1;
                let sku = &skus[rng.random_range(0..skus.len())];
                let view = views.get(sku).cloned().unwrap_or_default();
                let gpus: u64 = if rng.random_bool(0.25) { 8 } else { 1 };
                let kind = if rng.random_bool(0.75) { "spot" } else { "preemptible" };
                let ioc = rng.random_bool(0.7);
                let best = view.best(kind, gpus);
                let (limit, fillable) = match (best, ioc) {
                    (Some(p), true) => (p, true),
                    (Some(p), false) => ((p * Decimal::new(95, 2)).round_dp(4), false),
                    (None, _) => (Decimal::new(150, 2), false),
                };
                let rid = format!("{name}-{n}");
                let mut bid = json!({
                    "client_order_id": rid, "sku": sku, "gpus": gpus,
                    "limit_price": limit.to_string(), "kind": kind,
                    "time_in_force": if ioc { "ioc" } else { "gtc" },
                    "duration_s": rng.random_range(60..1800),
                    "launch": launch,
                });
                if !ioc {
                    bid["expires_at_ms"] = json!(now_ms() + 20_000);
                }
                out.push(json!({"type": "place_bid", "request_id": rid, "bid": bid}));
                pending.insert(rid, Pending {
                    sent: scheduled,
                    kind: "place_bid",
                    fillable: fillable.then(|| (sku.clone(), kind.to_string(), gpus, limit)),
                });
            }
            _ = stop.changed(), if !stopping => { stopping = *stop.borrow(); }
            _ = done.changed() => { if *done.borrow() { break; } }
            p = probes.recv() => { if let Some(p) = p { waiting_probes.push(p); } }
            _ = tokio::time::sleep_until(next_release.into()), if !releases.is_empty() && !stopping => {
                if let Some(std::cmp::Reverse((_, lease))) = releases.pop()
                    && !report.ended.contains_key(&lease)
                {
                    n += 1;
                    let rid = format!("{name}-r{n}");
                    out.push(json!({"type": "release_lease", "request_id": rid, "lease_id": lease}));
                    pending.insert(rid, Pending { sent: Instant::now(), kind: "release_lease", fillable: None });
                }
            }
            m = rx.next() => {
                let Some(Ok(m)) = m else { anyhow::bail!("{name}: websocket closed") };
                let Message::Text(t) = m else { continue };
                let v: Value = serde_json::from_str(&t)?;
                // Only the feed's own messages (inventory, trades, private events) say how far
                // the feed has come; replies travel another path and may arrive first.
                let feed_msg = !matches!(
                    v["type"].as_str(),
                    Some("bid_accepted" | "rejected" | "lease_released" | "bid_canceled"
                        | "bids_canceled" | "balance" | "pong" | "subscribed" | "welcome")
                );
                if feed_msg && let Some(seq) = v["seq"].as_u64().or(v["commit_seq"].as_u64()) {
                    last_seq = last_seq.max(seq);
                }
                match v["type"].as_str().unwrap_or("") {
                    "inventory_snapshot" | "inventory_delta" => {
                        let sku = v["sku"].as_str().unwrap_or("").to_string();
                        if let Some(c) = v["commit_seq"].as_u64() { last_seq = last_seq.max(c); }
                        if v["type"] == "inventory_delta" && let Some(at) = v["committed_at_ms"].as_i64() {
                            let lag_us = (now_us() - at * 1000).max(1) as u64;
                            stats.lock().map_err(|_| anyhow::anyhow!("stats"))?.feed_lag.record(lag_us).ok();
                        }
                        views.entry(sku).or_default().apply(&v);
                    }
                    "bid_accepted" | "lease_released" | "rejected" | "bids_canceled" => {
                        let rid = v["request_id"].as_str().unwrap_or("").to_string();
                        if let Some(p) = pending.remove(&rid) {
                            let mut st = stats.lock().map_err(|_| anyhow::anyhow!("stats"))?;
                            if v["type"] == "rejected" {
                                st.error(v["code"].as_str().unwrap_or("?"));
                                continue;
                            }
                            st.ack(p.kind, p.sent);
                            if v["type"] == "bid_accepted" {
                                report.accepted += 1;
                                let status = v["status"].as_str().unwrap_or("?").to_string();
                                *st.outcomes.entry(status.clone()).or_default() += 1;
                                if status == "resting" && let Some(id) = v["bid_id"].as_str() {
                                    report.resting.insert(id.to_string());
                                }
                                if let Some((sku, kind, gpus, limit)) = p.fillable {
                                    st.fillable_iocs += 1;
                                    if v["filled_gpus"].as_u64().unwrap_or(0) < gpus {
                                        judgements.push(Judgement {
                                            due_seq: v["seq"].as_u64().unwrap_or(0),
                                            deadline: Instant::now() + Duration::from_secs(2),
                                            sku, kind, gpus, limit,
                                        });
                                    }
                                }
                            }
                        }
                    }
                    "lease_started" => {
                        stats.lock().map_err(|_| anyhow::anyhow!("stats"))?.leases += 1;
                        let id = v["lease_id"].as_str().unwrap_or("").to_string();
                        report.leases.push(LeaseRecord {
                            id: id.clone(),
                            node: v["node_id"].as_str().unwrap_or("").to_string(),
                            gpus: v["gpu_indexes"].as_array().into_iter().flatten().filter_map(Value::as_u64).collect(),
                            start_ms: v["start_ms"].as_i64().unwrap_or(0),
                            end_ms: v["end_ms"].as_i64().unwrap_or(i64::MAX),
                        });
                        if rng.random_bool(IMPATIENT) && release_planned.insert(id.clone()) {
                            let hold = Duration::from_millis(rng.random_range(300..2_000));
                            releases.push(std::cmp::Reverse((Instant::now() + hold, id)));
                        }
                    }
                    "lease_ready" => {
                        let id = v["lease_id"].as_str().unwrap_or("").to_string();
                        report.ready.insert(id.clone());
                        if release_planned.insert(id.clone()) {
                            let hold = Duration::from_millis(rng.random_range(1_000..6_000));
                            releases.push(std::cmp::Reverse((Instant::now() + hold, id)));
                        }
                    }
                    "lease_migrated" => {
                        report.migrated
                            .entry(v["from_lease_id"].as_str().unwrap_or("").to_string())
                            .or_default()
                            .push(v["to_lease_id"].as_str().unwrap_or("").to_string());
                    }
                    "failover_failed" => {
                        report.failover_failed.insert(
                            v["lease_id"].as_str().unwrap_or("").to_string(),
                            v["reason"].as_str().unwrap_or("?").to_string(),
                        );
                    }
                    "lease_ended" => {
                        report.ended.insert(v["lease_id"].as_str().unwrap_or("").to_string(), v["at_ms"].as_i64().unwrap_or(0));
                    }
                    "bid_closed" => {
                        report.closed.insert(v["bid_id"].as_str().unwrap_or("").to_string());
                    }
                    _ => {}
                }
            }
        }
        // Judge unfilled "fillable" IOCs once the feed has caught up with their commit.
        if !judgements.is_empty() {
            let now = Instant::now();
            let mut st = stats.lock().map_err(|_| anyhow::anyhow!("stats"))?;
            judgements.retain(|j| {
                if last_seq < j.due_seq && now < j.deadline {
                    return true;
                }
                let still = views.get(&j.sku).and_then(|v| v.best(&j.kind, j.gpus));
                if still.is_some_and(|p| p <= j.limit) {
                    st.phantom += 1;
                } else {
                    st.raced += 1;
                }
                false
            });
        }
        if !waiting_probes.is_empty() {
            let mut still = Vec::new();
            for p in waiting_probes.drain(..) {
                match views.get(&p.sku) {
                    Some(v) if v.seq >= p.seq => {
                        let h = v.history.iter().find(|(s, _)| *s == p.seq).map(|(_, h)| *h);
                        let _ = p.reply.send(h);
                    }
                    _ => still.push(p),
                }
            }
            waiting_probes = still;
        }
        for m in out {
            tx.send(Message::Text(m.to_string().into())).await?;
        }
        if stopping && pending.is_empty() && judgements.is_empty() && report.gaps == 0 {
            // Keep following the feed for probes until `done`.
            report.gaps = views.values().map(|v| v.gaps).sum();
        }
    }
    report.gaps = views.values().map(|v| v.gaps).sum();
    Ok(report)
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    now_us() / 1000
}

/// Microseconds since the Unix epoch.
pub fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_specs_pass_the_gateways_validation() {
        let mut images = 0;
        for i in 0..24u64 {
            let v = launch_spec(&format!("lt-buyer-{i}"), i * 31);
            assert_eq!(v, launch_spec(&format!("lt-buyer-{i}"), i * 31), "seeded");
            let req: gateway::api::launch::LaunchRequest = serde_json::from_value(v).unwrap();
            let spec = req.to_spec().unwrap_or_else(|e| panic!("{e:?}"));
            assert_eq!(spec.ssh_keys.len(), 1);
            images += usize::from(spec.image.is_some());
        }
        assert!(images > 0 && images < 24);
    }
}
