//! Buyer commands with more to them than one call: the bid from its flags, `bid --wait`
//! (progress until every lease of the bid runs; Ctrl-C cancels a still-resting bid), `ssh`
//! (exec into a running lease), `inventory --watch` (the live feed, redrawn), `leases`
//! (pages followed up to `--limit`).
//!
//! `--wait` follows the bid by polling the REST API every [`WAIT_POLL_MS`]: the bid while it
//! rests (`GET /v1/bids/{id}`; 404 = no longer resting), then the bid's live leases
//! (`GET /v1/leases`, filtered by `bid_id`; a failover replacement carries the same bid). It
//! is done when the bid no longer rests and every live lease of it is `active`; it fails
//! (exit 1) when the bid no longer rests and no lease of it lives (closed unfilled, or every
//! lease ended, e.g. not delivered with no capacity to fail over to).

use crate::cli::{
    BidArgs, CancelArgs, DomainsArgs, Fabric, GangScope, InventoryArgs, Kind, LeasesArgs,
    MemberLoss, Placement, Tif,
};
use crate::error::CliError;
use crate::output::{human, note};
use crate::parse::{self, whole_seconds};
use crate::run::Ctx;
use futures_util::StreamExt;
use gpux_client::{Client, ClientError, LeaseQuery};
use gpux_wire::ws::InventorySnapshot;
use gpux_wire::{
    BidPlaced, BidRequest, BidStatusDto, ConstraintsDto, GangRequest, GangScopeDto, KindDto,
    LaunchRequest, LeaseStateDto, LeaseView, MemberLossDto, MinSlaDto, PlacementDto, TifDto,
};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;

/// How often `bid --wait` polls the bid and its leases, ms.
pub const WAIT_POLL_MS: u64 = 500;
/// Leases per page when listing (the API's maximum).
pub const LEASE_PAGE: usize = 500;
/// Attempts of each read while `bid --wait` polls (the client retries only calls safe to
/// repeat, with its jittered backoff; the cancel on Ctrl-C is never repeated).
pub const WAIT_READ_ATTEMPTS: u32 = 3;

/// The bid request of `gpux bid`'s flags; SSH key files are read here.
pub fn bid_request(a: &BidArgs) -> Result<BidRequest, CliError> {
    let ssh_keys = a
        .ssh_keys
        .iter()
        .map(|p| parse::ssh_public_key(p))
        .collect::<Result<Vec<_>, _>>()
        .map_err(CliError::Usage)?;
    if ssh_keys.is_empty() && (a.image.is_none() || a.ports.is_empty()) {
        return Err(CliError::Usage(
            "nothing could reach the leases: pass --ssh-key FILE, or --image with --port".into(),
        ));
    }
    let expires_at_ms = match (&a.expires_at, a.expires_in) {
        (Some(t), _) => Some(t.to_ms(&chrono::Local).map_err(CliError::Usage)?),
        (None, Some(d)) => Some(chrono::Utc::now().timestamp_millis() + d.as_millis() as i64),
        (None, None) => None,
    };
    if expires_at_ms.is_some() && a.tif == Tif::Ioc {
        return Err(CliError::Usage(
            "--expires-at / --expires-in apply to resting bids: add --tif gtc".into(),
        ));
    }
    if a.gang.is_some() && !matches!(a.placement, Placement::SingleNode | Placement::Gang) {
        return Err(CliError::Usage(
            "--gang places a gang: leave out --placement (or say --placement gang)".into(),
        ));
    }
    if a.placement == Placement::Gang && a.gang.is_none() {
        return Err(CliError::Usage(
            "--placement gang needs the gang's shape: --gang NODESxGPUS, e.g. --gang 8x8".into(),
        ));
    }
    if a.min_gpus.is_some() && (a.placement != Placement::Spread || a.tif != Tif::Ioc) {
        return Err(CliError::Usage(
            "--min-gpus is for spread IOC bids: add --placement spread (and no --tif gtc)".into(),
        ));
    }
    let client_order_id = a
        .client_order_id
        .clone()
        .unwrap_or_else(|| format!("gpux-{}", uuid::Uuid::new_v4().simple()));
    Ok(BidRequest {
        client_order_id,
        sku: a.sku.clone(),
        gpus: a.gpus,
        gang: a.gang.map(|(nodes, gpus_per_node)| GangRequest {
            nodes,
            gpus_per_node,
            scope: match a.scope {
                Some(GangScope::Region) => GangScopeDto::Region,
                _ => GangScopeDto::Domain,
            },
            on_member_loss: match a.on_member_loss {
                Some(MemberLoss::EndAll) => MemberLossDto::EndAll,
                _ => MemberLossDto::Keep,
            },
        }),
        min_gpus: a.min_gpus,
        limit_price: a.price,
        kind: match a.kind {
            Kind::Spot => KindDto::Spot,
            Kind::Preemptible => KindDto::Preemptible,
        },
        placement: match a.placement {
            _ if a.gang.is_some() => PlacementDto::Gang,
            Placement::SingleNode => PlacementDto::SingleNode,
            Placement::Spread => PlacementDto::Spread,
            Placement::Gang => PlacementDto::Gang,
        },
        constraints: ConstraintsDto {
            regions: a.regions.clone(),
            jurisdictions: a.jurisdictions.clone(),
            min_interconnect: a
                .min_interconnect
                .map(|f: Fabric| crate::supplier::fabric(f)),
            nvlink: a.nvlink,
            verified: a.verified,
            min_reliability: a.min_reliability.clone(),
            min_sla: (a.min_sla.is_some() || a.min_sla_multiple.is_some()).then(|| MinSlaDto {
                availability: a.min_sla.clone(),
                credit_multiple: a.min_sla_multiple,
            }),
        },
        duration_s: a.duration.map(whole_seconds),
        time_in_force: match a.tif {
            Tif::Ioc => TifDto::Ioc,
            Tif::Gtc => TifDto::Gtc,
        },
        expires_at_ms,
        launch: Some(LaunchRequest {
            ssh_keys,
            image: a.image.clone(),
            command: a.command.clone(),
            env: a.env.iter().cloned().collect(),
            ports: a.ports.clone(),
            disk_gb: a.disk_gb.unwrap_or(0),
        }),
    })
}

/// How to find out whether a bid whose answer never came landed: it names the client order
/// id (a generated one included), and re-sending it is safe (docs/api.md §1, natural keys:
/// the exchange answers a repeated client order id with its first answer).
pub fn check_bid(client_order_id: &str) -> String {
    format!(
        "the bid's client order id is {client_order_id}; whether the exchange got it is \
         unknown. Check with `gpux bids` (a resting bid) and `gpux leases` (a filled one), or \
         send the same bid again with --client-order-id {client_order_id}: the exchange \
         answers a repeated client order id with its first answer and never places it twice"
    )
}

/// A failed placement whose outcome is unknown (timeout, lost connection, 5xx) says how to
/// check; a refusal (4xx) is known and passes unchanged.
fn unknown_outcome(e: ClientError, client_order_id: &str) -> CliError {
    match CliError::from(e) {
        CliError::Unavailable(m) => {
            CliError::Unavailable(format!("{m}\n{}", check_bid(client_order_id)))
        }
        CliError::Api {
            status: Some(s),
            mut error,
        } if s >= 500 => {
            error.message = format!("{}\n{}", error.message, check_bid(client_order_id));
            CliError::Api {
                status: Some(s),
                error,
            }
        }
        known => known,
    }
}

/// `gpux bid`: Ctrl-C while the placement is in flight exits 130 with [`check_bid`]'s
/// advice; with `--wait`, Ctrl-C afterwards cancels a still-resting bid.
pub async fn bid(ctx: &Ctx, a: BidArgs) -> Result<(), CliError> {
    let req = bid_request(&a)?;
    let c = ctx.client()?;
    let coid = req.client_order_id.as_str();
    let placed = tokio::select! {
        r = c.place_bid(&req) => r.map_err(|e| unknown_outcome(e, coid))?,
        () = ctx.interrupt.wait() => {
            return Err(CliError::Interrupted(format!(
                "interrupted while the bid was sent: {}",
                check_bid(coid)
            )));
        }
    };
    let shown = if a.gang.is_some() {
        human::gang_placed
    } else {
        human::bid_placed
    };
    if !a.wait {
        return ctx.out.one(&placed, shown);
    }
    if ctx.out.json {
        ctx.out.line(&placed)?;
    } else {
        note(shown(&placed));
    }
    // The wait's reads are GETs: a blip on one poll is retried, not an exit 3 mid-wait.
    let polling = c.clone().with_retries(WAIT_READ_ATTEMPTS);
    let leases = wait_running(ctx, &polling, &placed).await?;
    let short = short_of(&placed, &leases);
    if ctx.out.json {
        leases.iter().try_for_each(|l| ctx.out.line(l))?;
        return short.map_or(Ok(()), Err);
    }
    for l in &leases {
        let access = l.access.as_ref();
        note(format!(
            "lease {} runs on node {} ({} GPU(s))",
            l.id, l.node_id, l.gpus
        ));
        for (port, url) in access.into_iter().flat_map(|a| &a.urls) {
            note(format!("  port {port}: {url}"));
        }
        match access.and_then(human::ssh_command) {
            Some(ssh) => ctx.out.text(ssh),
            None => {
                for url in access.into_iter().flat_map(|a| a.urls.values()) {
                    ctx.out.text(url);
                }
            }
        }
    }
    short.map_or(Ok(()), Err)
}

/// Exit 1 when fewer GPUs run than the bid filled: a lease was not delivered and its failover
/// found no replacement (or a preemptible one ended) — `gpux leases --ended` says why.
fn short_of(placed: &BidPlaced, running: &[LeaseView]) -> Option<CliError> {
    let filled = placed.filled_gpus + placed.remaining_gpus;
    let have: u32 = running.iter().map(|l| l.gpus).sum();
    (have < filled).then(|| {
        CliError::Refused(format!(
            "only {have} of the bid's {filled} GPU(s) run: the rest ended without a \
             replacement (gpux leases --ended)"
        ))
    })
}

/// Where a bid stands, from the least advanced of its parts.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Stage {
    Resting {
        remaining: u32,
    },
    Pending {
        leases: usize,
    },
    Provisioning {
        leases: usize,
        deadline_ms: Option<i64>,
    },
    Running {
        leases: usize,
    },
}

impl Stage {
    fn describe(&self, bid: &str) -> String {
        match self {
            Stage::Resting { remaining } => {
                format!("bid {bid}: resting, waiting for {remaining} GPU(s)")
            }
            Stage::Pending { leases } => {
                format!("bid {bid}: filled; {leases} lease(s) wait for preempted GPUs")
            }
            Stage::Provisioning {
                leases,
                deadline_ms,
            } => {
                let by = deadline_ms
                    .map(|d| format!(", ready by {}", human::time(d)))
                    .unwrap_or_default();
                format!("bid {bid}: filled; provisioning {leases} lease(s){by}")
            }
            Stage::Running { leases } => format!("bid {bid}: running ({leases} lease(s))"),
        }
    }
}

fn stage(resting: Option<u32>, live: &[LeaseView]) -> Stage {
    if let Some(remaining) = resting {
        return Stage::Resting { remaining };
    }
    let in_state = |s| live.iter().filter(|l| l.state == s).count();
    let pending = in_state(LeaseStateDto::Pending);
    if pending > 0 {
        return Stage::Pending { leases: pending };
    }
    let provisioning: Vec<&LeaseView> = live
        .iter()
        .filter(|l| l.state == LeaseStateDto::Provisioning)
        .collect();
    if !provisioning.is_empty() {
        return Stage::Provisioning {
            leases: provisioning.len(),
            deadline_ms: provisioning
                .iter()
                .filter_map(|l| l.provision_deadline_ms)
                .max(),
        };
    }
    Stage::Running { leases: live.len() }
}

/// GPUs the bid still wants, `None` when it no longer rests.
async fn resting(c: &Client, bid: &str) -> Result<Option<u32>, CliError> {
    match c.bid(bid).await {
        Ok(b) => Ok(Some(b.remaining)),
        Err(e) if e.status() == Some(404) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Up to `limit` leases matching `q`, following `next_cursor` page by page
/// ([`LEASE_PAGE`] at a time).
async fn fetch_leases(
    c: &Client,
    mut q: LeaseQuery,
    limit: usize,
) -> Result<Vec<LeaseView>, ClientError> {
    let mut all = Vec::new();
    while all.len() < limit {
        q.limit = Some((limit - all.len()).min(LEASE_PAGE));
        let page = c.leases(&q).await?;
        all.extend(page.leases);
        match page.next_cursor {
            Some(cur) => q.cursor = Some(cur),
            None => break,
        }
    }
    all.truncate(limit);
    Ok(all)
}

/// The bid's leases in `state` (`live` or `all`), from every page (a 1,000-GPU spread bid has
/// more leases than one page holds).
async fn leases_of(c: &Client, bid: &str, state: &str) -> Result<Vec<LeaseView>, ClientError> {
    let q = LeaseQuery {
        state: Some(state.into()),
        ..LeaseQuery::default()
    };
    Ok(fetch_leases(c, q, usize::MAX)
        .await?
        .into_iter()
        .filter(|l| l.bid_id == bid)
        .collect())
}

/// Why a bid that no longer rests has no live lease.
async fn why_nothing_runs(c: &Client, placed: &BidPlaced, bid: &str) -> CliError {
    let ended = leases_of(c, bid, "all").await.unwrap_or_default();
    if ended.is_empty() {
        let reason = placed
            .close_reason
            .map(|r| human::name(&r))
            .unwrap_or_else(|| "closed".into());
        return CliError::Refused(match &placed.close_detail {
            Some(d) => format!("bid {bid} closed without a fill ({reason}): {}", d.message),
            None => format!("bid {bid} closed without a fill ({reason})"),
        });
    }
    let ends: Vec<String> = ended
        .iter()
        .map(|l| {
            let why = l.end_reason.map(|r| human::name(&r)).unwrap_or_default();
            match &l.failure_reason {
                Some(f) => format!("lease {} ended {why}: {f}", l.id),
                None => format!("lease {} ended {why}", l.id),
            }
        })
        .collect();
    CliError::Refused(format!("bid {bid} has no live lease: {}", ends.join("; ")))
}

/// Follows a placed bid until every lease of it runs (module docs); Ctrl-C cancels it while
/// it rests.
async fn wait_running(
    ctx: &Ctx,
    c: &Client,
    placed: &BidPlaced,
) -> Result<Vec<LeaseView>, CliError> {
    let bid = placed
        .bid_id
        .clone()
        .ok_or_else(|| CliError::Refused("the exchange gave the bid no id".into()))?;
    if placed.status == BidStatusDto::Closed && placed.fills.is_empty() {
        return Err(why_nothing_runs(c, placed, &bid).await);
    }
    let pb = ProgressBar::new_spinner();
    pb.set_style(ProgressStyle::with_template("{spinner} {msg} [{elapsed}]").expect("template"));
    pb.enable_steady_tick(Duration::from_millis(120));
    let mut last: Option<Stage> = None;
    let mut poll = tokio::time::interval(Duration::from_millis(WAIT_POLL_MS));
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let result = loop {
        tokio::select! {
            _ = poll.tick() => {}
            () = ctx.interrupt.wait() => {}
        }
        if ctx.interrupt.fired() {
            pb.finish_and_clear();
            break Err(interrupted(c, &bid).await);
        }
        let rest = match resting(c, &bid).await {
            Ok(r) => r,
            Err(e) => break Err(e),
        };
        let live = match leases_of(c, &bid, "live").await {
            Ok(l) => l,
            Err(e) => break Err(e.into()),
        };
        if rest.is_none() && live.is_empty() {
            break Err(why_nothing_runs(c, placed, &bid).await);
        }
        let now = stage(rest, &live);
        if last.as_ref() != Some(&now) {
            // Each stage once as a line (kept in logs), and on the spinner.
            pb.suspend(|| note(now.describe(&bid)));
            pb.set_message(now.describe(&bid));
            last = Some(now.clone());
        }
        if let Stage::Running { .. } = now {
            break Ok(live);
        }
    };
    pb.finish_and_clear();
    result
}

/// Ctrl-C while waiting: cancel the bid if it still rests, and say what became of it.
async fn interrupted(c: &Client, bid: &str) -> CliError {
    let msg = match c.cancel_bid(bid).await {
        Ok(_) => format!("interrupted: canceled bid {bid}, which was still resting"),
        Err(e) if e.status() == Some(404) => format!(
            "interrupted: bid {bid} no longer rests; its leases go on (gpux leases, gpux release)"
        ),
        Err(e) => format!("interrupted: could not cancel bid {bid}: {e} (gpux cancel {bid})"),
    };
    CliError::Interrupted(msg)
}

/// `gpux cancel`.
pub async fn cancel(ctx: &Ctx, a: CancelArgs) -> Result<(), CliError> {
    let c = ctx.client()?;
    match a.bid {
        Some(id) => {
            let r = c.cancel_bid(&id.to_string()).await?;
            ctx.out.one(&r, |r| format!("bid {} canceled", r.bid_id))
        }
        None => {
            let r = c.cancel_all_bids().await?;
            ctx.out.one(&r, |r| match r.canceled.len() {
                0 => "no resting bids to cancel".into(),
                n => format!("canceled {n} bid(s): {}", r.canceled.join(" ")),
            })
        }
    }
}

/// `gpux leases`: pages followed until `--limit` leases or the last page.
pub async fn leases(ctx: &Ctx, a: LeasesArgs) -> Result<(), CliError> {
    let c = ctx.client()?;
    let state = if a.ended {
        "ended"
    } else if a.all {
        "all"
    } else if a.wiping {
        "wiping"
    } else {
        "live"
    };
    let ms = |t: &Option<parse::TimeArg>| {
        t.as_ref()
            .map(|t| t.to_ms(&chrono::Local).map_err(CliError::Usage))
            .transpose()
    };
    let q = LeaseQuery {
        state: Some(state.into()),
        from_ms: ms(&a.from)?,
        to_ms: ms(&a.to)?,
        ..LeaseQuery::default()
    };
    let all = fetch_leases(&c, q, a.limit).await?;
    ctx.out.list(&all, human::leases)
}

/// `gpux ssh LEASE [-- ARGS]`: exec `ssh -p PORT USER@HOST ARGS…`.
pub async fn ssh(ctx: &Ctx, lease: u64, args: Vec<String>) -> Result<(), CliError> {
    let l = ctx.client()?.lease(&lease.to_string()).await?;
    if l.state != LeaseStateDto::Active {
        return Err(CliError::Refused(format!(
            "lease {} is {}, not running: nothing to log in to{}",
            l.id,
            human::name(&l.state),
            match l.state {
                LeaseStateDto::Provisioning | LeaseStateDto::Pending =>
                    " yet (gpux lease shows its progress)",
                _ => "",
            }
        )));
    }
    let Some((host, port, user)) = l.access.as_ref().and_then(|a| {
        Some((
            a.ssh_host.clone()?,
            a.ssh_port.unwrap_or(22),
            a.ssh_user.clone(),
        ))
    }) else {
        return Err(CliError::Refused(format!(
            "lease {} has no SSH access (its launch spec had no --ssh-key); see gpux lease {} \
             for its URLs",
            l.id, l.id
        )));
    };
    let target = match user {
        Some(u) => format!("{u}@{host}"),
        None => host,
    };
    let mut cmd = std::process::Command::new("ssh");
    cmd.arg("-p").arg(port.to_string()).arg(target).args(&args);
    exec(cmd)
}

#[cfg(unix)]
fn exec(mut cmd: std::process::Command) -> Result<(), CliError> {
    use std::os::unix::process::CommandExt;
    let e = cmd.exec();
    Err(CliError::Usage(format!("cannot run ssh: {e}")))
}

#[cfg(not(unix))]
fn exec(mut cmd: std::process::Command) -> Result<(), CliError> {
    let status = cmd
        .status()
        .map_err(|e| CliError::Usage(format!("cannot run ssh: {e}")))?;
    std::process::exit(status.code().unwrap_or(crate::error::EXIT_UNAVAILABLE));
}

/// `gpux inventory`.
/// `gpux inventory domains`: whole free nodes per fabric domain (issue 27).
pub async fn domains(ctx: &Ctx, a: DomainsArgs) -> Result<(), CliError> {
    let d = ctx
        .public()?
        .inventory_domains(
            a.sku.as_deref(),
            a.region.as_deref(),
            a.gpus_per_node,
            a.min_nodes,
        )
        .await?;
    ctx.out.list(&d.domains, human::domains)
}

pub async fn inventory(ctx: &Ctx, a: InventoryArgs) -> Result<(), CliError> {
    if let Some(crate::cli::InventoryCmd::Domains(d)) = a.cmd {
        return domains(ctx, d).await;
    }
    let c = ctx.public()?;
    let region = a.region.as_deref();
    let filter = crate::market::capacity_filter(&a.filter);
    if a.watch {
        if !filter.is_none() {
            return Err(CliError::Usage(
                "--watch follows the live feed, whose levels count all listed capacity: drop \
                 --verified / --min-reliability / --min-sla / --min-sla-multiple / \
                 --jurisdiction / --min-interconnect / --nvlink to watch, or leave out \
                 --watch to read the capacity that meets them"
                    .into(),
            ));
        }
        return watch(ctx, &c, a.sku.as_deref(), region).await;
    }
    let snaps = match &a.sku {
        _ if !filter.is_none() => {
            c.inventory_filtered(a.sku.as_deref(), region, &filter)
                .await?
        }
        Some(sku) => vec![c.inventory(sku, region).await?],
        None => c.inventory_all(region).await?.snapshots,
    };
    ctx.out.list(&snaps, human::inventory)
}

/// `gpux inventory --watch`: the live view of one SKU (or every SKU of the catalog, one
/// subscription each), redrawn (a terminal) or reprinted (a pipe) after every change; with
/// `--json` one `InventorySnapshot` line of the changed SKU's whole view per change.
async fn watch(
    ctx: &Ctx,
    c: &Client,
    sku: Option<&str>,
    region: Option<&str>,
) -> Result<(), CliError> {
    let skus: Vec<String> = match sku {
        Some(s) => vec![s.to_string()],
        None => c.catalog().await?.skus.into_iter().map(|s| s.sku).collect(),
    };
    let mut updates = futures_util::stream::select_all(skus.iter().map(|s| c.subscribe(s, region)));
    // Catalog order, as `gpux inventory` prints.
    let mut views: Vec<Option<InventorySnapshot>> = vec![None; skus.len()];
    let tty = std::io::stdout().is_terminal();
    loop {
        let update = tokio::select! {
            u = updates.next() => u,
            () = ctx.interrupt.wait() => {
                return Err(CliError::Interrupted("stopped watching".into()));
            }
        };
        let u = match update {
            Some(Ok(u)) => u,
            Some(Err(e)) => return Err(e.into()),
            None => return Err(CliError::Unavailable("the inventory feed ended".into())),
        };
        let view = InventorySnapshot {
            sku: u.sku.clone(),
            region: u.region.clone(),
            seq: u.seq,
            commit_seq: u.commit_seq,
            resync: u.resynced,
            levels: u.levels.values().cloned().collect(),
        };
        if ctx.out.json {
            ctx.out.line(&view)?;
            continue;
        }
        if let Some(i) = skus.iter().position(|s| *s == u.sku) {
            views[i] = Some(view);
        }
        let head = format!(
            "{} in {}, updated {} ({} seq {}{}); Ctrl-C to stop",
            sku.unwrap_or("every SKU"),
            region.unwrap_or("every region"),
            human::time(chrono::Utc::now().timestamp_millis()),
            u.sku,
            u.seq,
            if u.resynced { ", resynced" } else { "" }
        );
        let shown: Vec<InventorySnapshot> = views.iter().flatten().cloned().collect();
        let body = human::inventory(&shown);
        if tty {
            ctx.out.text(format!("\x1b[H\x1b[2J{head}\n\n{body}"));
        } else {
            ctx.out.text(format!("{head}\n{body}\n"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn args(extra: &[&str]) -> BidArgs {
        let mut v = vec![
            "gpux", "bid", "--sku", "H100-80G", "--gpus", "2", "--price", "25.50",
        ];
        v.extend_from_slice(extra);
        match Cli::try_parse_from(v).unwrap().command {
            Command::Bid(b) => *b,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_bid_request_carries_every_flag() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("id.pub");
        let line =
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM7t3CQcihrH/4tM1K41mGfGrkuwsCkbk7Z2fjczQzrv me@x";
        std::fs::write(&key, line).unwrap();
        let k = key.to_str().unwrap();
        let r = bid_request(&args(&[
            "--kind",
            "preemptible",
            "--placement",
            "spread",
            "--region",
            "cn-east-2",
            "--jurisdiction",
            "CN",
            "--min-interconnect",
            "infiniband",
            "--nvlink",
            "--verified",
            "--min-reliability",
            "0.99",
            "--min-sla",
            "99.9",
            "--duration",
            "90m",
            "--tif",
            "gtc",
            "--expires-at",
            "2030-01-01T00:00:00Z",
            "--client-order-id",
            "job-7",
            "--ssh-key",
            k,
            "--image",
            "img:1",
            "--env",
            "A=1",
            "--port",
            "8888",
            "--disk-gb",
            "100",
            "--",
            "python",
            "train.py",
        ]))
        .unwrap();
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "client_order_id": "job-7", "sku": "H100-80G", "gpus": 2, "limit_price": "25.50",
                "kind": "preemptible", "placement": "spread",
                "constraints": {"regions": ["cn-east-2"], "jurisdictions": ["CN"],
                                "min_interconnect": "infiniband", "nvlink": true,
                                "verified": true, "min_reliability": "0.99",
                                "min_sla": {"availability": "99.9"}},
                "duration_s": 5400, "time_in_force": "gtc", "expires_at_ms": 1893456000000i64,
                "launch": {"ssh_keys": [line], "image": "img:1", "command": ["python", "train.py"],
                           "env": {"A": "1"}, "ports": [8888], "disk_gb": 100}
            })
        );
        // The SLA floor's multiple alone.
        let r = bid_request(&args(&["--ssh-key", k, "--min-sla-multiple", "20"])).unwrap();
        assert_eq!(
            serde_json::to_value(&r.constraints).unwrap()["min_sla"],
            serde_json::json!({"credit_multiple": 20})
        );
        // Defaults: generated client order id, spot, single node, IOC.
        let r = bid_request(&args(&["--ssh-key", k])).unwrap();
        assert!(r.constraints.min_sla.is_none());
        assert!(r.client_order_id.starts_with("gpux-") && r.client_order_id.len() == 37);
        assert_eq!((r.kind, r.time_in_force), (KindDto::Spot, TifDto::Ioc));
        // Refused locally.
        let e = bid_request(&args(&[])).unwrap_err().to_string();
        assert!(e.contains("--ssh-key"), "{e}");
        let e = bid_request(&args(&["--ssh-key", k, "--expires-in", "1h"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--tif gtc"), "{e}");
    }

    #[test]
    fn an_unknown_outcome_names_the_client_order_id() {
        let e = unknown_outcome(ClientError::Timeout, "job-9");
        assert_eq!(e.exit_code(), crate::error::EXIT_UNAVAILABLE);
        let m = e.to_string();
        assert!(m.contains("outcome unknown"), "{m}");
        assert!(m.contains("--client-order-id job-9"), "{m}");
        let refused = ClientError::Api {
            status: 422,
            error: gpux_wire::ErrorBody {
                code: "unknown_sku".into(),
                message: "no such SKU".into(),
                request_id: "r".into(),
                field: None,
                retry_after_s: None,
            },
        };
        let m = unknown_outcome(refused, "job-9").to_string();
        assert!(!m.contains("job-9"), "a refusal is a known outcome: {m}");
    }

    fn lease(state: LeaseStateDto, deadline: Option<i64>) -> LeaseView {
        serde_json::from_value(serde_json::json!({
            "id": "9", "bid_id": "5", "node_id": "1", "offer_id": "2", "sku": "H100-80G",
            "region": "cn-east-2", "kind": "spot", "gpus": 1, "gpu_indexes": [0],
            "price": "20.0000", "start_ms": 0, "end_ms": 1, "state": state,
            "provision_deadline_ms": deadline, "ready_ms": null, "access": null, "launch": null,
            "notice_deadline_ms": null, "charged": null, "billed_seconds": 0, "sla_credit": null,
            "end_reason": null, "ended_at_ms": null, "failure_reason": null, "teardown": null,
            "migrated_from": null, "migrated_to": [], "failover_failed_gpus": null,
            "failover_failed_reason": null
        }))
        .unwrap()
    }

    #[test]
    fn the_stage_is_the_least_advanced_part() {
        let active = lease(LeaseStateDto::Active, None);
        let prov = lease(LeaseStateDto::Provisioning, Some(7));
        assert_eq!(
            stage(Some(2), std::slice::from_ref(&active)),
            Stage::Resting { remaining: 2 }
        );
        assert_eq!(
            stage(None, &[active.clone(), prov]),
            Stage::Provisioning {
                leases: 1,
                deadline_ms: Some(7)
            }
        );
        assert_eq!(
            stage(None, &[lease(LeaseStateDto::Pending, None), active.clone()]),
            Stage::Pending { leases: 1 }
        );
        assert_eq!(stage(None, &[active]), Stage::Running { leases: 1 });
    }

    #[test]
    fn a_bid_short_of_its_filled_gpus_exits_refused() {
        let placed: BidPlaced = serde_json::from_value(serde_json::json!({
            "bid_id": "5", "client_order_id": "c", "seq": 3, "status": "filled",
            "filled_gpus": 3, "remaining_gpus": 0, "close_reason": "filled", "fills": []
        }))
        .unwrap();
        let one = lease(LeaseStateDto::Active, None);
        let e = short_of(&placed, &[one.clone(), one.clone()]).expect("2 of 3 run");
        assert!(
            e.to_string().contains("only 2 of the bid's 3 GPU(s) run"),
            "{e}"
        );
        assert!(short_of(&placed, &[one.clone(), one.clone(), one]).is_none());
    }
}
