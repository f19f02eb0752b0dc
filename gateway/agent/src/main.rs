//! The `gpux-agent` binary: loads the layered configuration (defaults, `--config` or
//! `/etc/gpux-agent/agent.toml`, `GPUX_*` env, flags), then either prints the host's GPU
//! discovery (`--discover`: JSON on stdout with the node it would register, exit 0), runs the
//! verification checks once (`--verify`: a table and the report's JSON on stdout, exit 0;
//! issue 26), or runs the agent ([`gpux_agent::run()`]) until SIGINT (Ctrl-C) or SIGTERM: the
//! agent stops its running hooks (their process groups are killed; a restarted agent runs
//! them again) and exits 0. A second signal exits at once (status 130).
//!
//! Exit codes: 0 success (`--verify` exits 0 whatever the figures: the exchange judges them);
//! 78 (`EX_CONFIG`) a configuration error that a restart will not fix (a bad or missing key,
//! a key the exchange refuses, an unreadable `ca_cert`, an unknown GPU model without `sku`, a
//! node of that name with another SKU); 2 bad flags; 1 any other error (systemd restarts). An
//! exchange whose TLS certificate is not trusted is not one of them: the agent keeps retrying
//! and logs why ("certificate not trusted": set `ca_cert`).
//! Errors and logs go to stderr (`RUST_LOG` filters logs, default `info`).

use anyhow::Context;
use clap::Parser;
use gpux_agent::config::{AgentConfig, Interconnect};
use gpux_agent::gpus::{self, GpuSource, NvmlGpus, SimulatedGpus};
use gpux_agent::{AgentError, SystemClock};
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

/// Exit status of a configuration error (sysexits.h `EX_CONFIG`): the systemd unit's
/// `RestartPreventExitStatus` keeps a misconfigured agent from restarting in a loop.
const EXIT_CONFIG: u8 = 78;

/// Node agent for the GPU-capacity exchange. Every flag can also be set in the config file
/// or as a `GPUX_*` environment variable (nested keys with `__`).
#[derive(Parser, Serialize)]
#[command(version, about)]
struct Args {
    /// TOML configuration file [default: /etc/gpux-agent/agent.toml when it exists].
    #[arg(long, env = "GPUX_CONFIG")]
    #[serde(skip)]
    config: Option<PathBuf>,
    /// Print the GPU discovery as JSON and the node it would register, then exit.
    #[arg(long)]
    #[serde(skip)]
    discover: bool,
    /// Run the verification checks once on every GPU (NVML checks and `hooks.verify`, or the
    /// simulated figures), print the figures as a table and as JSON, then exit; no exchange
    /// needed.
    #[arg(long, conflicts_with = "discover")]
    #[serde(skip)]
    verify: bool,
    /// The exchange's base URL, http:// or https:// [default: http://127.0.0.1:8080].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<String>,
    /// PEM file of CA certificates trusted besides the system's, for an https:// exchange
    /// whose certificate a private CA issued.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    ca_cert: Option<PathBuf>,
    /// The node key (prefer GPUX_KEY or the config file: flags show in `ps`).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<String>,
    /// Node name (1..=64 of [A-Za-z0-9._-]).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    /// Catalog SKU id, when the GPU model is not recognized (e.g. H100-80G).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    sku: Option<String>,
    /// Region (e.g. cn-east-2).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    region: Option<String>,
    /// ISO 3166-1 alpha-2 jurisdiction (e.g. CN).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    jurisdiction: Option<String>,
    /// Interconnect: pcie, roce or infiniband [default: pcie].
    #[arg(long, value_parser = parse_interconnect)]
    #[serde(skip_serializing_if = "Option::is_none")]
    interconnect: Option<Interconnect>,
    /// The GPUs are linked with NVLink.
    #[arg(long)]
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    nvlink: bool,
    /// Heartbeat period, ms [default: 3000].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    heartbeat_period_ms: Option<u64>,
    /// Simulate the GPUs: SKU:COUNT (e.g. H100-80G:8).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    simulate: Option<String>,
    /// Path of libnvidia-ml [default: libnvidia-ml.so.1, then libnvidia-ml.so].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    nvml_lib: Option<PathBuf>,
    /// Where the agent keeps its node id and leases [default: /var/lib/gpux-agent].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    state_dir: Option<PathBuf>,
}

fn parse_interconnect(s: &str) -> Result<Interconnect, String> {
    serde_json::from_value(serde_json::Value::String(s.to_string()))
        .map_err(|_| "one of pcie, roce, infiniband".to_string())
}

fn gpu_source(cfg: &AgentConfig) -> anyhow::Result<Arc<dyn GpuSource>> {
    Ok(match &cfg.simulate {
        Some(spec) => {
            let mut sim = SimulatedGpus::parse(spec)?;
            if let Some(path) = &cfg.simulate_health_file {
                sim = sim.with_health_file(path.clone());
            }
            Arc::new(sim)
        }
        None => {
            let nvml = NvmlGpus::init(cfg.nvml_lib.as_deref())?;
            if let Err(e) = nvml.watch_xids() {
                tracing::warn!(error = %e, "XID errors are not watched");
            }
            Arc::new(nvml)
        }
    })
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    let result = tokio::runtime::Runtime::new()
        .context("starting the async runtime")
        .and_then(|rt| rt.block_on(run(&args)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpux-agent: {e:#}");
            let config = e
                .downcast_ref::<AgentError>()
                .is_some_and(AgentError::is_config);
            ExitCode::from(if config { EXIT_CONFIG } else { 1 })
        }
    }
}

async fn run(args: &Args) -> anyhow::Result<()> {
    let file = AgentConfig::file_to_read(args.config.as_deref());
    let cfg = AgentConfig::load(file.as_deref(), args)?;
    if args.discover {
        cfg.validate_gpus()?;
        return discover(&cfg).await;
    }
    if args.verify {
        cfg.validate_gpus()?;
        let source = gpu_source(&cfg)?;
        if !cfg.name.is_empty() {
            source.name_host(&cfg.name); // the UUIDs a simulated node of that name attests
        }
        let report = gpux_agent::verify::local(&cfg, source).await?;
        print!("{}", gpux_agent::verify::table(&report));
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    cfg.validate()?;
    let source = gpu_source(&cfg)?;
    let client = cfg.client()?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut terminate = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    tokio::spawn(async move {
        let mut signals = 0;
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = terminate.recv() => {}
            }
            signals += 1;
            if signals > 1 {
                eprintln!("gpux-agent: second signal: exiting now");
                std::process::exit(130);
            }
            tracing::info!("stopping (a second signal exits at once)");
            let _ = stop_tx.send(true);
        }
    });
    gpux_agent::run(cfg, source, client, SystemClock, stop_rx).await?;
    Ok(())
}

/// `--discover`: the GPUs as JSON and the node the agent would register.
async fn discover(cfg: &AgentConfig) -> anyhow::Result<()> {
    let source = gpu_source(cfg)?;
    let discovery = gpus::discover_bounded(source, gpus::DISCOVERY_TIMEOUT_MS).await?;
    let sku = discovery.node_sku(cfg.sku.as_deref());
    let out = serde_json::json!({
        "discovery": discovery,
        "node": {
            "name": cfg.name,
            "sku": sku.as_ref().ok(),
            "sku_error": sku.as_ref().err().map(ToString::to_string),
            "gpus": discovery.count(),
            "healthy_gpus": discovery.healthy_count(),
        },
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}
