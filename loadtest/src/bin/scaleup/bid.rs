//! The bid of a run: `gpux bid --sku … --gpus N --placement spread --price … --ssh-key FILE
//! --wait --json` as a child process (the real CLI a buyer runs), or, with `--bid-via client`,
//! the typed client's `place_bid` with the same request.
//!
//! Times: `spawned` when the CLI process is started (or the request sent); `acked` when the
//! bid's answer is known — the CLI's first stdout line (with `--json`, `bid --wait` prints the
//! `BidPlaced` answer as soon as the exchange acknowledges the bid, flushed per line); the
//! CLI's exit when it waited until it judged every lease running. The CLI's stdout lines after
//! the first are the leases it reports running (counted); its stderr goes to a file.

use anyhow::{Context, bail};
use gpux_client::Client;
use gpux_client::wire::{
    BidPlaced, BidRequest, ConstraintsDto, DecimalStr, KindDto, LaunchRequest, PlacementDto, TifDto,
};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Longest wait for the bid's acknowledgement, ms.
pub const ACK_TIMEOUT_MS: u64 = 30_000;
/// A real ed25519 public key (the agent tests' buyer key; its private half is not kept).
pub const SSH_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM7t3CQcihrH/4tM1K41mGfGrkuwsCkbk7Z2fjczQzrv buyer@laptop";

/// How the bid is placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BidVia {
    /// `gpux bid … --wait` as a child process.
    Cli,
    /// The typed client's `place_bid`.
    Client,
}

/// What a run bids.
#[derive(Clone, Debug)]
pub struct BidSpec {
    /// SKU.
    pub sku: String,
    /// GPUs.
    pub gpus: u32,
    /// Limit price, CNY per GPU-hour.
    pub price: DecimalStr,
    /// Client order id.
    pub client_order_id: String,
}

/// The bid, acknowledged.
pub struct Placed {
    /// The exchange's answer.
    pub placed: BidPlaced,
    /// When the CLI was started (or the request sent).
    pub spawned: Instant,
    /// When the answer was known.
    pub acked: Instant,
    /// `acked` as ms since the epoch (to compare with the server's times).
    pub acked_epoch_ms: f64,
    /// `acked` as the machine's uptime, s (to compare with the hooks' marks).
    pub acked_uptime_s: Option<f64>,
    /// The CLI, still waiting for the leases (`None` with the client).
    pub cli: Option<JoinHandle<CliExit>>,
}

/// How the CLI ended.
#[derive(Clone, Debug, Serialize)]
pub struct CliExit {
    /// When (not serialized: the report gives it relative to the bid).
    #[serde(skip)]
    pub at: Option<Instant>,
    /// Its exit status (`None`: killed by a signal, or it could not be waited for).
    pub status: Option<i32>,
    /// Leases it printed as running.
    pub leases_printed: usize,
    /// The end of its stderr.
    pub stderr_tail: String,
}

/// Places the bid (module docs).
///
/// # Errors
/// The CLI cannot start, exits or stays silent before acknowledging; the client's call fails.
pub async fn place(via: BidVia, spec: &BidSpec, ctx: &BidCtx<'_>) -> anyhow::Result<Placed> {
    match via {
        BidVia::Cli => place_cli(spec, ctx).await,
        BidVia::Client => place_client(spec, ctx.buyer).await,
    }
}

/// What placing needs besides the spec.
pub struct BidCtx<'a> {
    /// The `gpux` binary.
    pub gpux: &'a Path,
    /// The exchange.
    pub base: &'a str,
    /// The buyer's key.
    pub buyer_key: &'a str,
    /// The buyer.
    pub buyer: &'a Client,
    /// The SSH public key file.
    pub ssh_key_file: &'a Path,
    /// A dir for the CLI's config home and stderr.
    pub dir: &'a Path,
}

fn epoch_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

async fn place_client(spec: &BidSpec, buyer: &Client) -> anyhow::Result<Placed> {
    let req = BidRequest {
        client_order_id: spec.client_order_id.clone(),
        sku: spec.sku.clone(),
        gpus: Some(spec.gpus),
        limit_price: spec.price,
        kind: KindDto::Spot,
        placement: PlacementDto::Spread,
        gang: None,
        min_gpus: None,
        constraints: ConstraintsDto::default(),
        duration_s: None,
        time_in_force: TifDto::Ioc,
        expires_at_ms: None,
        launch: Some(LaunchRequest {
            ssh_keys: vec![SSH_KEY.into()],
            ..LaunchRequest::default()
        }),
    };
    let spawned = Instant::now();
    let placed = buyer.place_bid(&req).await.context("placing the bid")?;
    Ok(Placed {
        placed,
        spawned,
        acked: Instant::now(),
        acked_epoch_ms: epoch_ms(),
        acked_uptime_s: crate::fleet::uptime_s(),
        cli: None,
    })
}

async fn place_cli(spec: &BidSpec, ctx: &BidCtx<'_>) -> anyhow::Result<Placed> {
    let stderr_path = ctx
        .dir
        .join(format!("gpux-{}.stderr", spec.client_order_id));
    let mut cmd = tokio::process::Command::new(ctx.gpux);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("GPUX_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("GPUX_URL", ctx.base)
        .env("GPUX_KEY", ctx.buyer_key)
        .env("XDG_CONFIG_HOME", ctx.dir.join("cli-config"))
        .args(["--json", "bid", "--sku", &spec.sku, "--gpus"])
        .arg(spec.gpus.to_string())
        .args(["--placement", "spread", "--price"])
        .arg(spec.price.0.to_string())
        .arg("--ssh-key")
        .arg(ctx.ssh_key_file)
        .args(["--client-order-id", &spec.client_order_id, "--wait"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr_path)?)
        .kill_on_drop(true);
    let spawned = Instant::now();
    let mut child = cmd.spawn().with_context(|| {
        format!(
            "starting {} (build it: cargo build --release -p gpux-cli, or pass --bid-via client)",
            ctx.gpux.display()
        )
    })?;
    let stdout = child.stdout.take().context("the CLI's stdout")?;
    let (ack_tx, ack_rx) = oneshot::channel();
    let cli = tokio::spawn(follow_cli(child, stdout, ack_tx, stderr_path));
    let ack = tokio::time::timeout(Duration::from_millis(ACK_TIMEOUT_MS), ack_rx).await;
    let (line, acked, acked_epoch_ms, acked_uptime_s) = match ack {
        Ok(Ok(v)) => v,
        Ok(Err(_)) => {
            let exit = cli.await.ok();
            bail!("the CLI ended before acknowledging the bid: {exit:?}");
        }
        Err(_) => bail!("no acknowledgement from the CLI within {ACK_TIMEOUT_MS} ms"),
    };
    let placed: BidPlaced = serde_json::from_str(&line)
        .with_context(|| format!("the CLI's first line is not a BidPlaced: {line}"))?;
    Ok(Placed {
        placed,
        spawned,
        acked,
        acked_epoch_ms,
        acked_uptime_s,
        cli: Some(cli),
    })
}

/// Reads the CLI's stdout: the first line is the acknowledgement, later lines are leases.
async fn follow_cli(
    mut child: tokio::process::Child,
    stdout: tokio::process::ChildStdout,
    ack: oneshot::Sender<(String, Instant, f64, Option<f64>)>,
    stderr_path: PathBuf,
) -> CliExit {
    let mut lines = BufReader::new(stdout).lines();
    let mut ack = Some(ack);
    let mut leases = 0;
    while let Ok(Some(line)) = lines.next_line().await {
        match ack.take() {
            Some(tx) => {
                let now = (Instant::now(), epoch_ms(), crate::fleet::uptime_s());
                let _ = tx.send((line, now.0, now.1, now.2));
            }
            None => leases += 1,
        }
    }
    let status = child.wait().await.ok().and_then(|s| s.code());
    let at = Some(Instant::now());
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
    CliExit {
        at,
        status,
        leases_printed: leases,
        stderr_tail: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
    }
}
