//! Suppliers: accounts, nodes and offers set up through the REST API, then node agents that
//! heartbeat every few seconds; flaky nodes go silent once (past the heartbeat timeout, so the
//! exchange takes them offline and fails their leases over) and come back.

use crate::http::Api;
use crate::scenario::SupplierPlan;
use crate::stats::Shared;
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Heartbeat period of the node agents, ms.
pub const HEARTBEAT_MS: u64 = 4_000;
/// How long a flaky node stays silent, ms (above the exchange's 15 s timeout).
pub const SILENCE_MS: u64 = 20_000;

/// A node that exists on the exchange.
#[derive(Clone, Debug)]
pub struct LiveNode {
    /// Node id.
    pub id: String,
    /// GPUs.
    pub gpus: u32,
    /// Goes silent once.
    pub flaky: bool,
}

/// Creates the supplier's nodes and offers; answers its nodes.
///
/// # Errors
/// A request failed.
pub async fn setup(api: &Api, plan: &SupplierPlan) -> anyhow::Result<Vec<LiveNode>> {
    let mut out = Vec::new();
    for n in &plan.nodes {
        let v = api
            .post(
                "/v1/nodes",
                &json!({"name": n.name, "sku": n.sku, "gpus": n.gpus, "region": n.region,
                        "jurisdiction": "CN", "interconnect": n.interconnect,
                        "nvlink": n.interconnect == "infiniband"}),
                Some(&format!("node-{}", n.name)),
            )
            .await?;
        let id = v["id"].as_str().unwrap_or("").to_string();
        api.post(
            "/v1/offers",
            &json!({"node_id": id, "gpus": n.gpus, "spot_price": n.spot.to_string(),
                    "preemptible_price": n.preemptible.to_string(), "min_lease_s": 60,
                    "max_lease_s": 86_400, "notice_s": 10}),
            Some(&format!("offer-{}", n.name)),
        )
        .await?;
        out.push(LiveNode {
            id,
            gpus: n.gpus,
            flaky: n.flaky,
        });
    }
    Ok(out)
}

/// Heartbeats the nodes until `stop`; each flaky node is silent for [`SILENCE_MS`] starting
/// at a moment spread over the first half of `duration`.
pub async fn agents(
    api: Api,
    nodes: Vec<LiveNode>,
    duration: Duration,
    seed: u64,
    stats: Shared,
    mut stop: watch::Receiver<bool>,
) {
    use rand::{RngExt, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let start = Instant::now();
    let silent: Vec<Option<(Duration, Duration)>> = nodes
        .iter()
        .map(|n| {
            n.flaky.then(|| {
                // Silent, then back within the run when it is long enough.
                let latest = (duration.as_millis() as u64).saturating_sub(SILENCE_MS + 5_000);
                let from = Duration::from_millis(rng.random_range(0..latest.max(1)));
                (from, from + Duration::from_millis(SILENCE_MS))
            })
        })
        .collect();
    let mut failed = vec![false; nodes.len()];
    let mut every = tokio::time::interval(Duration::from_millis(HEARTBEAT_MS));
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = stop.changed() => if *stop.borrow() { break },
        }
        let t = start.elapsed();
        for (i, n) in nodes.iter().enumerate() {
            if let Some((a, b)) = silent[i]
                && t >= a
                && t < b
            {
                if !failed[i] {
                    failed[i] = true;
                    if let Ok(mut s) = stats.lock() {
                        s.nodes_silenced += 1;
                    }
                }
                continue;
            }
            let sent = Instant::now();
            match api
                .call(
                    reqwest::Method::POST,
                    &format!("/v1/nodes/{}/heartbeat", n.id),
                    Some(&json!({"healthy_gpus": n.gpus})),
                    None,
                )
                .await
            {
                Ok((200, _)) => {
                    if let Ok(mut s) = stats.lock() {
                        s.ack("heartbeat", sent);
                    }
                }
                Ok((_, v)) => {
                    if let Ok(mut s) = stats.lock() {
                        s.error(v["code"].as_str().unwrap_or("heartbeat_failed"));
                    }
                }
                Err(_) => {
                    if let Ok(mut s) = stats.lock() {
                        s.error("heartbeat_unreachable");
                    }
                }
            }
        }
    }
}
