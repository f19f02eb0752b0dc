//! Verification (issue 26, docs/market-rules.md §12.2): what the agent measures on a
//! verification lease (purpose `verification`, placed by the exchange on all the node's
//! healthy GPUs) instead of running the provision hook, and what `gpux-agent --verify` prints.
//!
//! The checks, in order ([`run_checks`]):
//! 1. the operator's `hooks.verify` (argv, the lease in `GPUX_*` variables with
//!    `GPUX_PHASE=verify` and `GPUX_VERIFY_TIMEOUT_S`; see [`crate::hooks`]), whose **last
//!    stdout line** is JSON ([`HookFigures`]): per GPU `bf16_tflops` and `mem_bw_gbps`,
//!    `allreduce_busbw_gbps`, `dcgm_diag` — or, instead of the last two, the raw outputs of
//!    `all_reduce_perf` and `dcgmi diag` (`all_reduce_perf_output`, `dcgmi_diag_output`),
//!    which the agent parses here ([`parse_all_reduce_busbw`], [`parse_dcgmi_diag`], tested
//!    on recorded outputs of the real tools in `tests/fixtures/`). Without a hook: the
//!    simulated figures of a simulated host (`simulate_verify`, [`SimulatedFigures`]), else
//!    none (the exchange judges a report without figures failed);
//! 2. the NVML checks per GPU ([`crate::gpus::GpuSource::faults`]: PCIe link below max, ECC
//!    off, power capped, throttled), read after the hook so the GPUs were just under load.
//!
//! The result is one [`gpux_wire::VerificationReport`]: a GPU entry per lease GPU (by index,
//! with the UUID NVML reports now), the figures, how long the checks ran, and the last
//! [`gpux_wire::MAX_VERIFICATION_TAIL_BYTES`] of the tools' output. A failed or timed-out hook
//! is not an error: its figures are absent and its output is in `raw_tail` (the exchange
//! judges it). Bounds: the hook by its time limit plus grace; discovery and the NVML checks by
//! [`crate::gpus::DISCOVERY_TIMEOUT_MS`] each.

use crate::config::HookConfig;
use crate::error::AgentError;
use crate::gpus::{self, DISCOVERY_TIMEOUT_MS, GpuSource};
use crate::hooks::{HookOutcome, LeaseContext, Phase, run_hook};
use gpux_wire::{DcgmResultDto, GpuFiguresDto, NvmlFaultDto, VerificationReport};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Largest figure a hook or the simulation may state (TFLOPS, GB/s): 100,000 leaves room for
/// any GPU for years and refuses a unit mix-up (bytes for gigabytes).
pub const MAX_FIGURE: f64 = 100_000.0;

/// The figures a simulated host reports on a verification lease (`simulate_verify` in the
/// agent's configuration): the same for every GPU. Configure a demo node to end verified
/// (figures at the SKU's reference), degraded (70–90 % of it) or failed (below, or none).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimulatedFigures {
    /// BF16 GEMM throughput per GPU, TFLOPS.
    pub bf16_tflops: Option<f64>,
    /// Memory bandwidth per GPU, GB/s.
    pub mem_bw_gbps: Option<f64>,
    /// All-reduce bus bandwidth over the lease's GPUs, GB/s (reported only with 2 GPUs or
    /// more).
    pub allreduce_busbw_gbps: Option<f64>,
    /// The `dcgmi diag` outcome to report.
    pub dcgm_diag: Option<DcgmResultDto>,
    /// What the NVML checks find on every GPU.
    pub faults: Vec<NvmlFaultDto>,
}

impl SimulatedFigures {
    /// Checks the figures are finite and in `0..=`[`MAX_FIGURE`].
    ///
    /// # Errors
    /// [`AgentError::Config`] naming the key.
    pub fn validate(&self) -> Result<(), AgentError> {
        for (key, v) in [
            ("bf16_tflops", self.bf16_tflops),
            ("mem_bw_gbps", self.mem_bw_gbps),
            ("allreduce_busbw_gbps", self.allreduce_busbw_gbps),
        ] {
            if v.is_some_and(|v| !figure_ok(v)) {
                return Err(AgentError::config(
                    format!("simulate_verify.{key}"),
                    format!("a number in 0..={MAX_FIGURE}"),
                ));
            }
        }
        Ok(())
    }
}

fn figure_ok(v: f64) -> bool {
    v.is_finite() && (0.0..=MAX_FIGURE).contains(&v)
}

/// One GPU's figures as the verify hook prints them.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct HookGpu {
    /// GPU index on the node.
    pub index: u32,
    /// BF16 GEMM throughput, TFLOPS.
    #[serde(default)]
    pub bf16_tflops: Option<f64>,
    /// Memory bandwidth, GB/s.
    #[serde(default)]
    pub mem_bw_gbps: Option<f64>,
}

/// The verify hook's last stdout line (JSON). Unknown keys are ignored (a newer hook); a
/// figure out of range is dropped (not measured).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct HookFigures {
    /// Per GPU, by index.
    #[serde(default)]
    pub gpus: Vec<HookGpu>,
    /// All-reduce bus bandwidth, GB/s.
    #[serde(default)]
    pub allreduce_busbw_gbps: Option<f64>,
    /// `dcgmi diag` outcome.
    #[serde(default)]
    pub dcgm_diag: Option<DcgmResultDto>,
    /// The raw output of `all_reduce_perf`, parsed by [`parse_all_reduce_busbw`] when
    /// `allreduce_busbw_gbps` is absent.
    #[serde(default)]
    pub all_reduce_perf_output: Option<String>,
    /// The raw output of `dcgmi diag`, parsed by [`parse_dcgmi_diag`] when `dcgm_diag` is
    /// absent.
    #[serde(default)]
    pub dcgmi_diag_output: Option<String>,
}

impl HookFigures {
    /// The hook's figures from its stdout: the last non-empty line, as JSON.
    ///
    /// # Errors
    /// What is wrong with the line, for the log and `raw_tail`.
    pub fn from_stdout(stdout: &str) -> Result<HookFigures, String> {
        let line = stdout
            .lines()
            .rev()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .ok_or("the verify hook printed nothing (its last stdout line is the figures, JSON)")?;
        serde_json::from_str(line)
            .map_err(|e| format!("the verify hook's last stdout line is not its figures: {e}"))
    }

    /// The figures with the raw tool outputs parsed where the hook left them to the agent.
    pub fn resolved(mut self) -> HookFigures {
        if self.allreduce_busbw_gbps.is_none() {
            self.allreduce_busbw_gbps = self
                .all_reduce_perf_output
                .as_deref()
                .and_then(parse_all_reduce_busbw);
        }
        if self.dcgm_diag.is_none() {
            self.dcgm_diag = self.dcgmi_diag_output.as_deref().and_then(parse_dcgmi_diag);
        }
        self
    }

    /// The simulated figures for GPUs `indexes`.
    pub fn simulated(sim: &SimulatedFigures, indexes: &[u32]) -> HookFigures {
        HookFigures {
            gpus: indexes
                .iter()
                .map(|&index| HookGpu {
                    index,
                    bf16_tflops: sim.bf16_tflops,
                    mem_bw_gbps: sim.mem_bw_gbps,
                })
                .collect(),
            allreduce_busbw_gbps: sim.allreduce_busbw_gbps.filter(|_| indexes.len() > 1),
            dcgm_diag: sim.dcgm_diag,
            ..HookFigures::default()
        }
    }
}

/// The bus bandwidth of an `all_reduce_perf` (nccl-tests) run at its largest message size,
/// GB/s: the out-of-place `busbw` of the last result row. The column is found from the header
/// line (`#  size  count  type  redop  root  time  algbw  busbw …`; nccl-tests before 2.10 has
/// no `root` column); without a header, the run's `# Avg bus bandwidth` line. `None` when
/// neither is there (the tool failed) or the value is not a number.
pub fn parse_all_reduce_busbw(output: &str) -> Option<f64> {
    let mut column = None;
    let mut last = None;
    let mut average = None;
    for line in output.lines() {
        let trimmed = line.trim();
        if let Some(header) = trimmed.strip_prefix('#') {
            let words: Vec<&str> = header.split_whitespace().collect();
            if words.first() == Some(&"size") {
                column = words.iter().position(|w| *w == "busbw");
            }
            if let Some(rest) = header.trim().strip_prefix("Avg bus bandwidth") {
                average = rest
                    .trim_start_matches([' ', ':'])
                    .split_whitespace()
                    .next()
                    .and_then(|v| v.parse::<f64>().ok());
            }
            continue;
        }
        let words: Vec<&str> = trimmed.split_whitespace().collect();
        let is_row =
            words.len() > 2 && words[0].parse::<u64>().is_ok() && words[1].parse::<u64>().is_ok();
        if let (true, Some(c)) = (is_row, column) {
            last = words.get(c).and_then(|v| v.parse::<f64>().ok()).or(last);
        }
    }
    last.or(average).filter(|v| figure_ok(*v))
}

/// The outcome of a `dcgmi diag` run from its table: `fail` when any test reads `Fail`, else
/// `warn` when any reads `Warn`, else `pass` when at least one reads `Pass` (`Skip` counts as
/// nothing). `None` when no test result is found (dcgmi could not run: no host engine, an
/// error message instead of the table).
pub fn parse_dcgmi_diag(output: &str) -> Option<DcgmResultDto> {
    let (mut pass, mut warn, mut fail) = (false, false, false);
    for line in output.lines() {
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').collect();
        let [name, result] = cells.as_slice() else {
            continue;
        };
        let (name, result) = (name.trim(), result.trim());
        // Section rules (`|-----  Deployment  ----`) and the header.
        if name.starts_with('-') || result == "Result" {
            continue;
        }
        // DCGM 3: `Pass`, `Pass - All`, `Fail - GPU: 0`; DCGM 4 adds per-GPU lines under a
        // test (`GPU0: Pass`, no name). Only the cell's first word (after a `GPUn:` prefix)
        // counts: a message's words never do.
        let mut words = result.split_whitespace();
        let mut word = words.next().unwrap_or_default();
        if word.starts_with("GPU") && word.ends_with(':') {
            word = words.next().unwrap_or_default();
        } else if name.is_empty() {
            continue; // a message's continuation line
        }
        match word {
            "Pass" => pass = true,
            "Warn" | "Warning" => warn = true,
            "Fail" => fail = true,
            _ => {}
        }
    }
    if fail {
        Some(DcgmResultDto::Fail)
    } else if warn {
        Some(DcgmResultDto::Warn)
    } else {
        pass.then_some(DcgmResultDto::Pass)
    }
}

/// The last `max` bytes of `text`, cut at a character boundary.
pub fn tail(text: &str, max: usize) -> String {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].to_string()
}

/// The report: one entry per lease GPU (`indexes`, in order) with its UUID now (`uuids`, by
/// index), its figures and its NVML faults.
pub fn assemble(
    indexes: &[u32],
    uuids: &BTreeMap<u32, String>,
    faults: &BTreeMap<u32, Vec<NvmlFaultDto>>,
    figures: HookFigures,
    duration_s: u64,
    raw: &str,
) -> VerificationReport {
    let figures = figures.resolved();
    let checked = |v: Option<f64>| v.filter(|v| figure_ok(*v));
    VerificationReport {
        gpus: indexes
            .iter()
            .take(gpux_wire::MAX_NODE_GPUS_WIRE as usize)
            .map(|&index| {
                let measured = figures.gpus.iter().find(|g| g.index == index);
                GpuFiguresDto {
                    index,
                    uuid: uuids.get(&index).filter(|u| !u.is_empty()).cloned(),
                    bf16_tflops: checked(measured.and_then(|g| g.bf16_tflops)),
                    mem_bw_gbps: checked(measured.and_then(|g| g.mem_bw_gbps)),
                    faults: faults.get(&index).cloned().unwrap_or_default(),
                }
            })
            .collect(),
        allreduce_busbw_gbps: checked(figures.allreduce_busbw_gbps),
        dcgm_diag: figures.dcgm_diag,
        duration_s,
        raw_tail: Some(tail(raw, gpux_wire::MAX_VERIFICATION_TAIL_BYTES))
            .filter(|t| !t.trim().is_empty()),
    }
}

/// How the figures are measured.
#[derive(Clone, Debug)]
pub enum Measure {
    /// The operator's verify hook.
    Hook(HookConfig),
    /// A simulated host's configured figures.
    Simulated(SimulatedFigures),
    /// Nothing to measure with: no figures.
    Nothing,
}

impl Measure {
    /// The hook when one is configured, else the simulated figures on a simulated host, else
    /// nothing.
    pub fn of(hook: &HookConfig, simulated: bool, sim: Option<&SimulatedFigures>) -> Measure {
        if !hook.argv.is_empty() {
            Measure::Hook(hook.clone())
        } else if simulated {
            Measure::Simulated(sim.cloned().unwrap_or_default())
        } else {
            Measure::Nothing
        }
    }
}

/// Runs the checks on the GPUs `ctx.gpu_indexes` (module header) and returns the report.
pub async fn run_checks(
    source: Arc<dyn GpuSource>,
    ctx: &LeaseContext,
    measure: &Measure,
) -> VerificationReport {
    let started = Instant::now();
    let indexes = ctx.gpu_indexes.clone();
    let mut raw = String::new();
    let figures = match measure {
        Measure::Hook(hook) => {
            let mut vars = ctx.env_vars(Phase::Verify);
            vars.push((
                "GPUX_VERIFY_TIMEOUT_S".into(),
                (hook.timeout_ms / 1000).to_string(),
            ));
            match run_hook(hook, &vars).await {
                HookOutcome::Exited {
                    code: 0,
                    stdout_tail,
                    stderr_tail,
                } => {
                    raw.push_str(&stderr_tail);
                    match HookFigures::from_stdout(&stdout_tail) {
                        Ok(f) => f,
                        Err(e) => {
                            tracing::warn!(lease = %ctx.lease_id, error = %e, "verify hook: no figures");
                            raw.push_str(&format!("\n{e}\n{stdout_tail}"));
                            HookFigures::default()
                        }
                    }
                }
                HookOutcome::Exited {
                    code,
                    stdout_tail,
                    stderr_tail,
                } => {
                    tracing::warn!(lease = %ctx.lease_id, code, "verify hook failed: no figures");
                    raw.push_str(&format!(
                        "{stdout_tail}\n{stderr_tail}\nverify hook exited {code}\n"
                    ));
                    HookFigures::default()
                }
                HookOutcome::TimedOut { stderr_tail, .. } => {
                    tracing::warn!(lease = %ctx.lease_id, timeout_ms = hook.timeout_ms, "verify hook timed out: no figures");
                    raw.push_str(&format!(
                        "{stderr_tail}\nverify hook did not finish within {} ms\n",
                        hook.timeout_ms
                    ));
                    HookFigures::default()
                }
                HookOutcome::SpawnFailed(e) => {
                    tracing::warn!(lease = %ctx.lease_id, error = %e, "verify hook could not start: no figures");
                    raw.push_str(&format!("verify hook could not start: {e}\n"));
                    HookFigures::default()
                }
            }
        }
        Measure::Simulated(sim) => HookFigures::simulated(sim, &indexes),
        Measure::Nothing => {
            raw.push_str("no verify hook configured (hooks.verify): no figures measured\n");
            HookFigures::default()
        }
    };
    let sim_faults = match measure {
        Measure::Simulated(sim) => sim.faults.clone(),
        _ => Vec::new(),
    };
    let (uuids, mut faults) = nvml_checks(source, &indexes).await;
    if !sim_faults.is_empty() {
        for &i in &indexes {
            let f = faults.entry(i).or_default();
            for s in &sim_faults {
                if !f.contains(s) {
                    f.push(*s);
                }
            }
        }
    }
    let duration_s = started.elapsed().as_secs();
    assemble(&indexes, &uuids, &faults, figures, duration_s, &raw)
}

/// The UUIDs NVML reports now and the NVML checks' faults of GPUs `indexes`, each bounded by
/// [`DISCOVERY_TIMEOUT_MS`]; a GPU that does not answer is left out (no UUID, no faults).
async fn nvml_checks(
    source: Arc<dyn GpuSource>,
    indexes: &[u32],
) -> (BTreeMap<u32, String>, BTreeMap<u32, Vec<NvmlFaultDto>>) {
    let uuids = match gpus::discover_bounded(source.clone(), DISCOVERY_TIMEOUT_MS).await {
        Ok(d) => d.gpus.into_iter().map(|g| (g.index, g.uuid)).collect(),
        Err(e) => {
            tracing::warn!(error = %e, "verification: discovery failed");
            BTreeMap::new()
        }
    };
    let wanted = indexes.to_vec();
    let task = tokio::task::spawn_blocking(move || {
        wanted
            .into_iter()
            .filter_map(|i| match source.faults(i) {
                Ok(f) => Some((i, f)),
                Err(e) => {
                    tracing::warn!(index = i, error = %e, "verification: NVML checks failed");
                    None
                }
            })
            .collect::<BTreeMap<_, _>>()
    });
    let faults = match tokio::time::timeout(Duration::from_millis(DISCOVERY_TIMEOUT_MS), task).await
    {
        Ok(Ok(f)) => f,
        _ => {
            tracing::warn!("verification: the NVML checks did not answer in time");
            BTreeMap::new()
        }
    };
    (uuids, faults)
}

/// `gpux-agent --verify`: the same checks on every GPU of the host, once, without the
/// exchange (lease id `local`, no node id), measured as a verification lease would be
/// ([`Measure::of`] the configuration).
///
/// # Errors
/// The discovery's error (no NVML, no GPU, a hung driver).
pub async fn local(
    cfg: &crate::config::AgentConfig,
    source: Arc<dyn GpuSource>,
) -> Result<VerificationReport, AgentError> {
    let d = gpus::discover_bounded(source.clone(), DISCOVERY_TIMEOUT_MS).await?;
    let ctx = LeaseContext {
        lease_id: "local".into(),
        gpu_indexes: d.gpus.iter().map(|g| g.index).collect(),
        gpu_uuids: d.gpus.iter().map(|g| g.uuid.clone()).collect(),
        ..LeaseContext::default()
    };
    let measure = Measure::of(
        &cfg.hooks.verify,
        cfg.simulate.is_some(),
        cfg.simulate_verify.as_ref(),
    );
    Ok(run_checks(source, &ctx, &measure).await)
}

/// The report as a table for `gpux-agent --verify`.
pub fn table(r: &VerificationReport) -> String {
    let num = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.1}"));
    let mut out = format!(
        "{:<5} {:<44} {:>12} {:>12}  {}\n",
        "GPU", "UUID", "BF16 TFLOPS", "MEM GB/s", "NVML FAULTS"
    );
    for g in &r.gpus {
        let faults: Vec<String> = g
            .faults
            .iter()
            .map(|f| {
                serde_json::to_value(f)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default()
            })
            .collect();
        out.push_str(&format!(
            "{:<5} {:<44} {:>12} {:>12}  {}\n",
            g.index,
            g.uuid.as_deref().unwrap_or("-"),
            num(g.bf16_tflops),
            num(g.mem_bw_gbps),
            if faults.is_empty() {
                "none".to_string()
            } else {
                faults.join(",")
            }
        ));
    }
    let dcgm = r.dcgm_diag.map_or_else(
        || "-".to_string(),
        |d| {
            serde_json::to_value(d)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        },
    );
    out.push_str(&format!(
        "all-reduce bus bandwidth: {} GB/s; dcgmi diag: {dcgm}; checks took {} s\n",
        num(r.allreduce_busbw_gbps),
        r.duration_s
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvml_readings_become_faults() {
        let ok = gpus::NvmlChecks {
            pcie: (Some(5), Some(5), Some(16), Some(16)),
            ecc_enabled: Some(true),
            datacenter: true,
            power_limit_mw: Some(700_000),
            default_power_limit_mw: Some(700_000),
            throttle_reasons: Some(0x1), // GPU idle
        };
        assert!(ok.faults().is_empty());
        let bad = gpus::NvmlChecks {
            pcie: (Some(5), Some(5), Some(8), Some(16)),
            ecc_enabled: Some(false),
            power_limit_mw: Some(600_000), // 14 % below
            throttle_reasons: Some(0x8),   // HW slowdown
            ..ok
        };
        assert_eq!(
            bad.faults(),
            [
                NvmlFaultDto::PcieLinkBelowMax,
                NvmlFaultDto::EccOff,
                NvmlFaultDto::PowerCapped,
                NvmlFaultDto::Throttled
            ]
        );
        // ECC off on a GeForce card, a limit 5 % below, a software power cap: no fault.
        let consumer = gpus::NvmlChecks {
            ecc_enabled: Some(false),
            datacenter: false,
            power_limit_mw: Some(665_000),
            throttle_reasons: Some(0x4),
            ..ok
        };
        assert!(consumer.faults().is_empty(), "{:?}", consumer.faults());
        // Nothing known: nothing found.
        assert!(gpus::NvmlChecks::default().faults().is_empty());
    }

    #[test]
    fn the_hooks_figures_are_its_last_line_and_out_of_range_figures_are_dropped() {
        let out = "progress\n{\"gpus\":[{\"index\":0,\"bf16_tflops\":700.5,\"mem_bw_gbps\":-1},{\"index\":1,\"bf16_tflops\":1e9}],\"dcgm_diag\":\"warn\",\"all_reduce_perf_output\":\"#  size count type redop root time algbw busbw\\n 1024 256 float sum -1 10 1 2.5 0\\n\",\"extra\":1}\n\n";
        let f = HookFigures::from_stdout(out).unwrap();
        let uuids = BTreeMap::from([(0, "GPU-a".to_string())]);
        let faults = BTreeMap::from([(1, vec![NvmlFaultDto::EccOff])]);
        let r = assemble(&[0, 1], &uuids, &faults, f, 42, "raw");
        assert_eq!(r.gpus.len(), 2);
        assert_eq!(r.gpus[0].uuid.as_deref(), Some("GPU-a"));
        assert_eq!(r.gpus[0].bf16_tflops, Some(700.5));
        assert_eq!(r.gpus[0].mem_bw_gbps, None);
        assert_eq!(r.gpus[1].bf16_tflops, None);
        assert_eq!(r.gpus[1].faults, [NvmlFaultDto::EccOff]);
        assert_eq!(r.allreduce_busbw_gbps, Some(2.5));
        assert_eq!(r.dcgm_diag, Some(DcgmResultDto::Warn));
        assert_eq!((r.duration_s, r.raw_tail.as_deref()), (42, Some("raw")));
        assert!(HookFigures::from_stdout("").is_err());
        assert!(HookFigures::from_stdout("{\"ssh_host\":1}\nnot json").is_err());
    }

    #[test]
    fn simulated_figures_apply_to_every_gpu_and_all_reduce_needs_two() {
        let sim = SimulatedFigures {
            bf16_tflops: Some(760.0),
            mem_bw_gbps: Some(3000.0),
            allreduce_busbw_gbps: Some(400.0),
            ..SimulatedFigures::default()
        };
        let two = HookFigures::simulated(&sim, &[3, 4]);
        assert_eq!(two.gpus.len(), 2);
        assert_eq!(two.gpus[1].index, 4);
        assert_eq!(two.allreduce_busbw_gbps, Some(400.0));
        assert_eq!(
            HookFigures::simulated(&sim, &[3]).allreduce_busbw_gbps,
            None
        );
        assert!(sim.validate().is_ok());
        let bad = SimulatedFigures {
            mem_bw_gbps: Some(f64::NAN),
            ..sim
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("simulate_verify.mem_bw_gbps")
        );
    }

    /// `--verify` on a simulated host: every GPU with the configured figures and the
    /// simulated NVML faults, in a table and as the report's JSON.
    #[tokio::test]
    async fn local_checks_on_a_simulated_host_report_the_configured_figures() {
        let cfg = crate::config::AgentConfig {
            simulate: Some("H100-80G:2".into()),
            simulate_verify: Some(SimulatedFigures {
                bf16_tflops: Some(512.0),
                mem_bw_gbps: Some(2_000.0),
                allreduce_busbw_gbps: Some(300.0),
                dcgm_diag: Some(DcgmResultDto::Pass),
                faults: vec![NvmlFaultDto::PowerCapped],
            }),
            ..crate::config::AgentConfig::default()
        };
        let sim = Arc::new(gpus::SimulatedGpus::parse("H100-80G:2").unwrap());
        sim.set_faults(1, vec![NvmlFaultDto::Throttled]);
        let r = local(&cfg, sim).await.unwrap();
        assert_eq!(r.gpus.len(), 2);
        assert_eq!(r.gpus[1].uuid.as_deref(), Some("GPU-sim-H100-80G-1"));
        assert_eq!(r.gpus[0].bf16_tflops, Some(512.0));
        assert_eq!(r.gpus[0].faults, [NvmlFaultDto::PowerCapped]);
        assert_eq!(
            r.gpus[1].faults,
            [NvmlFaultDto::Throttled, NvmlFaultDto::PowerCapped]
        );
        assert_eq!(r.allreduce_busbw_gbps, Some(300.0));
        let t = table(&r);
        assert!(t.contains("GPU-sim-H100-80G-1"), "{t}");
        assert!(t.contains("512.0") && t.contains("2000.0"), "{t}");
        assert!(t.contains("throttled,power_capped"), "{t}");
        assert!(
            t.contains("all-reduce bus bandwidth: 300.0 GB/s; dcgmi diag: pass"),
            "{t}"
        );
        // Without simulated figures nor a hook on real GPUs: no figures, said in the tail.
        let none = Measure::of(&crate::config::HookConfig::default(), false, None);
        assert!(matches!(none, Measure::Nothing));
    }

    #[test]
    fn the_tail_keeps_the_last_bytes_at_a_character_boundary() {
        assert_eq!(tail("abcdef", 3), "def");
        assert_eq!(tail("ab", 8), "ab");
        assert_eq!(tail("a€b", 2), "b"); // '€' is 3 bytes: not cut in half
    }
}
