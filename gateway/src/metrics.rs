//! Prometheus metrics (`GET /metrics`): commands by type and result, command latency (durable
//! acknowledgement), request queue depth, websocket clients and subscriptions, feed lag
//! (commands committed but not yet fanned out), journal position.
//!
//! The recorder is process-global (installed once); handlers record with the `metrics`
//! macros.

use crate::api::Api;
use actix_web::{HttpResponse, web};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;

/// Latency buckets, seconds: 50 µs to 5 s.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0,
];

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the global recorder (first call) and returns its handle.
pub fn install() -> Option<PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets(LATENCY_BUCKETS)
                .ok()?
                .build_recorder();
            let handle = recorder.handle();
            metrics::set_global_recorder(recorder).ok()?;
            Some(handle)
        })
        .clone()
}

/// `GET /metrics` in the Prometheus text format.
pub async fn metrics(api: web::Data<Api>) -> HttpResponse {
    let Some(handle) = install() else {
        return HttpResponse::ServiceUnavailable().body("metrics recorder unavailable");
    };
    metrics::gauge!("gpux_request_queue_depth").set(api.seq.queue_depth() as f64);
    if let Some(s) = api.feed.stats().await {
        metrics::gauge!("gpux_ws_connections").set(s.connections as f64);
        metrics::gauge!("gpux_inventory_subscriptions").set(s.subscriptions as f64);
        metrics::gauge!("gpux_feed_published_seq").set(s.published_seq as f64);
        metrics::counter!("gpux_feed_snapshots_built_total").absolute(s.snapshots_built);
        metrics::counter!("gpux_feed_resyncs_total").absolute(s.resyncs);
        metrics::counter!("gpux_feed_slow_consumers_closed_total").absolute(s.slow_closed);
        if let Ok(last) = api.seq.read(|_, seq| seq).await {
            metrics::gauge!("gpux_journal_last_seq").set(last as f64);
            metrics::gauge!("gpux_feed_lag_commands")
                .set(last.saturating_sub(s.published_seq) as f64);
        }
    }
    handle.run_upkeep();
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(handle.render())
}
