//! One run of the scale-up (crate docs for the whole): wait until the fleet is idle and fully
//! listed, draw each node's provisioning delay, measure the idle window, connect the buyer's
//! websocket, bid, wait until every lease of the bid is ready (or the run's time limit), wait
//! for the CLI, read the leases, then release them all and wait for their wipes.
//!
//! Per lease, time to ready is measured from the bid's acknowledgement (and from the CLI's
//! start) to its `lease_ready` as the buyer's websocket received it; for a lease whose event
//! the websocket missed while it was closed ([`crate::feed`]), to the lease's `ready_ms` as the
//! exchange recorded it (the same machine's clock; the report says how many). The exchange's
//! `ready_ms` is also reported for every lease, so both views can be compared. The wait ends
//! when every lease is ready or has ended without becoming ready (not delivered, no
//! replacement). Meanwhile the machine's CPU is sampled every [`SERIES_MS`].

use crate::bid::{self, BidCtx, BidSpec, BidVia, CliExit};
use crate::feed::{self, Close, Feed};
use crate::fleet::{self, Accounts, Fleet};
use crate::measure::{Probe, Window};
use crate::report::{Dist, Goal, LeaseTiming, RunResult};
use anyhow::Context;
use gpux_client::wire::{DecimalStr, LeaseStateDto, LeaseView};
use gpux_client::{Client, LeaseQuery};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// The goal's allowance beyond the slowest provisioning delay, ms (issue 16: "all 1,000 GPUs
/// running within 5 s of the bid plus the slowest provisioning delay").
pub const GOAL_MS: f64 = 5_000.0;
/// Poll period of the wait for every lease's `lease_ready`, ms.
pub const READY_POLL_MS: u64 = 20;
/// After the websocket missed events: period of the REST reads of the bid's leases, ms.
pub const REST_POLL_MS: u64 = 1_000;
/// Leases per page when listing (the API's maximum).
pub const LEASE_PAGE: usize = 500;
/// Most pages read when listing leases (20,000 leases).
pub const MAX_PAGES: usize = 40;
/// Interval of the CPU series during a scale-up, ms.
pub const SERIES_MS: u64 = 250;
/// Longest wait for the CLI to exit after every lease is ready, ms (it polls every 500 ms).
pub const CLI_EXIT_TIMEOUT_MS: u64 = 30_000;

/// The run's settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Seed of the delays.
    pub seed: u64,
    /// Largest provisioning delay, ms (uniform in 0..=this).
    pub provision_max_ms: u64,
    /// Idle window before the bid, s.
    pub idle_s: u64,
    /// Longest wait for every lease to be ready, s.
    pub ready_timeout_s: u64,
    /// SKU.
    pub sku: String,
    /// GPUs bid.
    pub gpus: u32,
    /// Bid price.
    pub bid_price: DecimalStr,
    /// How the bid is placed.
    pub bid_via: BidVia,
}

/// What a run uses.
pub struct Ctx<'a> {
    /// Settings.
    pub settings: &'a Settings,
    /// The gateway's probe.
    pub probe: &'a Probe,
    /// The agents.
    pub fleet: &'a mut Fleet,
    /// The accounts.
    pub accounts: &'a Accounts,
    /// Placing the bid.
    pub bid: BidCtx<'a>,
}

/// Each node's delay for run `run`, ms, uniform in `0..=max_ms`, from the seed.
pub fn draw_delays(seed: u64, run: usize, nodes: usize, max_ms: u64) -> Vec<u64> {
    let mut rng =
        StdRng::seed_from_u64(seed ^ (run as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    (0..nodes).map(|_| rng.random_range(0..=max_ms)).collect()
}

/// Runs it (module docs).
///
/// # Errors
/// The fleet is not listed in time, an agent stopped, the bid or a read failed.
pub async fn run_once(ctx: &mut Ctx<'_>, run: usize) -> anyhow::Result<RunResult> {
    let s = ctx.settings;
    let listed = ctx.fleet.wait_listed(&ctx.accounts.supplier).await?;
    let delays = draw_delays(s.seed, run, ctx.fleet.nodes.len(), s.provision_max_ms);
    ctx.fleet.write_delays(&delays)?;
    eprintln!("run {run}: fleet listed; idle window of {} s", s.idle_s);
    let idle = idle_window(ctx).await?;
    let feed = Feed::start(ctx.accounts.buyer.clone()).await?;
    let before = ctx.probe.sample().await?;
    let spec = BidSpec {
        sku: s.sku.clone(),
        gpus: s.gpus,
        price: s.bid_price,
        client_order_id: format!("scaleup-{}-{run}", s.seed),
    };
    eprintln!("run {run}: bidding for {} GPUs", s.gpus);
    let mut placed = bid::place(s.bid_via, &spec, &ctx.bid).await?;
    let bid_id = placed.placed.bid_id.clone().unwrap_or_default();
    let expected: HashSet<String> = placed
        .placed
        .fills
        .iter()
        .map(|f| f.lease_id.clone())
        .collect();
    let deadline = placed.acked + Duration::from_secs(s.ready_timeout_s);
    let (stop_series, series_rx) = watch::channel(false);
    let cli_task = placed.cli.take();
    let waiting = async {
        let settled =
            wait_all_settled(&ctx.accounts.buyer, &bid_id, expected, &feed, deadline).await;
        let cli = match cli_task {
            Some(h) => wait_cli(h).await,
            None => None,
        };
        let _ = stop_series.send(true);
        (settled, cli)
    };
    let series = ctx
        .probe
        .cpu_series(Duration::from_millis(SERIES_MS), series_rx);
    let ((settled, cli), series) = tokio::join!(waiting, series);
    let after = ctx.probe.sample().await?;
    let log = std::mem::take(&mut *feed::lock(&feed.log));
    feed.stop().await;
    let leases = bid_leases(&ctx.accounts.buyer, &bid_id, "all").await?;
    let scaleup = ctx.probe.window(&before, &after);
    let timings = lease_timings(&leases, &log, &placed, ctx.fleet, &delays);
    let mut result = RunResult::new(
        run,
        &placed,
        timings,
        idle,
        scaleup,
        cli,
        log_closes(&log, &placed),
    );
    result.listed_wait_s = listed.as_secs_f64();
    result.ws_connects = log.connects;
    result.ws_fills = log.fills;
    result.ended_early = log.ended.clone();
    result.migrated = log.migrated.len();
    result.all_settled = settled;
    result.cpu_series = series;
    result.goal = Goal::of(&result, GOAL_MS);
    crate::report::print_run(&result);
    let resumed_before = ctx.fleet.resumed;
    if let Err(e) = release(ctx, &leases, &mut result).await {
        eprintln!("run {run}: after the release: {e:#}");
        result.release_error = Some(format!("{e:#}"));
    }
    result.nodes_resumed_after = ctx.fleet.resumed - resumed_before;
    Ok(result)
}

async fn idle_window(ctx: &mut Ctx<'_>) -> anyhow::Result<Window> {
    let a = ctx.probe.sample().await?;
    tokio::time::sleep(Duration::from_secs(ctx.settings.idle_s)).await;
    let b = ctx.probe.sample().await?;
    ctx.fleet.check_agents()?;
    Ok(ctx.probe.window(&a, &b))
}

/// Waits until every lease of the bid is settled — ready, or ended without becoming ready (not
/// delivered, with no replacement) — as the websocket saw it, or over REST once the websocket
/// has missed events; or until `deadline`. Answers whether every lease settled.
async fn wait_all_settled(
    buyer: &Client,
    bid_id: &str,
    mut expected: HashSet<String>,
    feed: &Feed,
    deadline: Instant,
) -> bool {
    let mut settled_rest: HashSet<String> = HashSet::new();
    let mut next_poll = Instant::now();
    loop {
        let (done, gap) = {
            let l = feed::lock(&feed.log);
            for (from, to) in &l.migrated {
                if expected.remove(from) {
                    expected.insert(to.clone());
                }
            }
            let ended: HashSet<&String> = l.ended.iter().map(|(id, _)| id).collect();
            let done = expected.iter().all(|id| {
                l.ready.contains_key(id) || ended.contains(id) || settled_rest.contains(id)
            });
            (done, !l.closes.is_empty())
        };
        if done {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        if gap && Instant::now() >= next_poll {
            next_poll = Instant::now() + Duration::from_millis(REST_POLL_MS);
            if let Ok(ls) = bid_leases(buyer, bid_id, "all").await {
                let settled = ls
                    .into_iter()
                    .filter(|l| l.ready_ms.is_some() || l.state == LeaseStateDto::Ended);
                settled_rest.extend(settled.map(|l| l.id));
            }
            continue;
        }
        tokio::time::sleep(Duration::from_millis(READY_POLL_MS)).await;
    }
}

async fn wait_cli(h: tokio::task::JoinHandle<CliExit>) -> Option<CliExit> {
    let abort = h.abort_handle();
    match tokio::time::timeout(Duration::from_millis(CLI_EXIT_TIMEOUT_MS), h).await {
        Ok(Ok(exit)) => Some(exit),
        Ok(Err(_)) => None,
        Err(_) => {
            abort.abort(); // drops the child: killed
            Some(CliExit {
                at: None,
                status: None,
                leases_printed: 0,
                stderr_tail: format!(
                    "still running {CLI_EXIT_TIMEOUT_MS} ms after the wait ended: killed"
                ),
            })
        }
    }
}

/// The buyer's leases of `bid_id` in `state` (`live` or `all`), every page.
async fn bid_leases(buyer: &Client, bid_id: &str, state: &str) -> anyhow::Result<Vec<LeaseView>> {
    let mut out = Vec::new();
    let mut cursor = None;
    for _ in 0..MAX_PAGES {
        let q = LeaseQuery {
            state: Some(state.into()),
            limit: Some(LEASE_PAGE),
            cursor: cursor.take(),
            ..LeaseQuery::default()
        };
        let page = buyer
            .leases(&q)
            .await
            .context("listing the buyer's leases")?;
        out.extend(page.leases.into_iter().filter(|l| l.bid_id == bid_id));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    Ok(out)
}

fn lease_timings(
    leases: &[LeaseView],
    log: &feed::FeedLog,
    placed: &bid::Placed,
    fleet: &Fleet,
    delays: &[u64],
) -> Vec<LeaseTiming> {
    let marks = fleet.hook_marks();
    let since_ack = |up: Option<f64>| {
        up.zip(placed.acked_uptime_s)
            .map(|(up, ack)| (up - ack) * 1000.0)
    };
    let delay_of: HashMap<&str, u64> = fleet
        .nodes
        .iter()
        .zip(delays)
        .map(|(n, d)| (n.id.as_str(), *d))
        .collect();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    leases
        .iter()
        .map(|l| {
            let ws = log.ready.get(&l.id);
            let ws_after_ack_ms = ws.map(|(at, _)| {
                ms(at.saturating_duration_since(placed.acked))
                    - ms(placed.acked.saturating_duration_since(*at))
            });
            let ws_lag_ms = ws
                .zip(ws_after_ack_ms)
                .map(|((_, at_ms), after)| placed.acked_epoch_ms + after - *at_ms as f64);
            let server_after_ack_ms = l.ready_ms.map(|r| r as f64 - placed.acked_epoch_ms);
            let (started, slept) = marks.get(&l.node_id).copied().unwrap_or_default();
            LeaseTiming {
                lease_id: l.id.clone(),
                node_id: l.node_id.clone(),
                gpus: l.gpus,
                state: serde_json::to_value(l.state)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default(),
                delay_ms: delay_of.get(l.node_id.as_str()).copied(),
                after_ack_ms: ws_after_ack_ms.or(server_after_ack_ms),
                source: match (ws_after_ack_ms, server_after_ack_ms) {
                    (Some(_), _) => "websocket",
                    (None, Some(_)) => "server",
                    (None, None) => "none",
                },
                ws_after_ack_ms,
                server_after_ack_ms,
                ws_lag_ms,
                ready: l.ready_ms.is_some(),
                failure_reason: l.failure_reason.clone(),
                hook_started_after_ack_ms: since_ack(started),
                hook_slept_after_ack_ms: since_ack(slept),
            }
        })
        .collect()
}

fn log_closes(log: &feed::FeedLog, placed: &bid::Placed) -> Vec<Close> {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    log.closes
        .iter()
        .map(|c| Close {
            at: None,
            after_ack_ms: c.at.map(|at| {
                ms(at.saturating_duration_since(placed.acked))
                    - ms(placed.acked.saturating_duration_since(at))
            }),
            reason: c.reason.clone(),
        })
        .collect()
}

/// Releases the bid's leases and waits until the fleet is listed again (wipes done).
async fn release(
    ctx: &mut Ctx<'_>,
    leases: &[LeaseView],
    result: &mut RunResult,
) -> anyhow::Result<()> {
    let live: Vec<String> = leases
        .iter()
        .filter(|l| l.state != LeaseStateDto::Ended)
        .map(|l| l.id.clone())
        .collect();
    let started = Instant::now();
    let (failed, first) = fleet::release_all(&ctx.accounts.buyer, &live).await;
    if let Some(e) = first {
        eprintln!(
            "run {}: {failed} of {} releases failed, e.g. {e}",
            result.run,
            live.len()
        );
    }
    let relisted = ctx.fleet.wait_listed(&ctx.accounts.supplier).await?;
    result.release_to_relisted_s =
        Some(started.elapsed().as_secs_f64().max(relisted.as_secs_f64()));
    Ok(())
}

/// The per-lease distribution of `f` (leases where it is known).
pub fn dist_of(timings: &[LeaseTiming], f: impl Fn(&LeaseTiming) -> Option<f64>) -> Option<Dist> {
    Dist::of(timings.iter().filter_map(f).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_are_seeded_per_run_and_in_range() {
        let a = draw_delays(42, 0, 1000, 2000);
        assert_eq!(a, draw_delays(42, 0, 1000, 2000));
        assert_ne!(a, draw_delays(42, 1, 1000, 2000));
        assert!(a.iter().all(|&d| d <= 2000));
        assert!(a.iter().any(|&d| d < 200) && a.iter().any(|&d| d > 1800));
        assert!(draw_delays(7, 0, 10, 0).iter().all(|&d| d == 0));
    }
}
