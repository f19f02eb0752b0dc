//! GPU discovery and health: what the agent registers (model → catalog SKU, count) and what
//! every heartbeat reports (`healthy_gpus`, docs/api.md §2.2 "heartbeat").
//!
//! Two sources behind one trait ([`GpuSource`], STYLE §3 "Put NVML behind a trait … with a
//! fake for CI"):
//! - [`NvmlGpus`]: the NVIDIA Management Library, loaded with `dlopen` when
//!   [`NvmlGpus::init`] runs (nvml-wrapper uses libloading; nothing is linked at build time),
//!   so the binary starts on a host without a driver and says so in a clear error.
//! - [`SimulatedGpus`]: `--simulate SKU:COUNT`, a synthetic host (UUIDs `GPU-sim-<sku>-<i>`)
//!   whose GPUs tests mark unhealthy by a method or a file.
//!
//! Health of one GPU (NVML), each a `problem` when it fails:
//! - **lost**: any NVML call on it answers `NVML_ERROR_GPU_IS_LOST` (fallen off the bus);
//! - **uncorrected ECC errors**: `nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)` > 0
//!   (since the driver loaded; "not supported" — a GPU without ECC — is healthy);
//! - **critical XID**: an `nvmlEventTypeXidCriticalError` event seen since the agent started
//!   ([`NvmlGpus::watch_xids`], one thread), except the XIDs NVIDIA's Kubernetes device plugin
//!   treats as application errors ([`APPLICATION_XIDS`]). An XID sticks until the agent
//!   restarts: the operator resets or replaces the GPU, then restarts the agent.
//! - any other NVML failure on that GPU (it does not answer).
//!
//! Invariants: `Discovery::gpus` is in NVML index order, indexes `0..count`; a GPU is healthy
//! exactly when it has no problem. The exchange's `gpu_indexes` of a lease are these indexes.
//! NVML calls block (a sick driver can hang them): [`discover_bounded`] runs discovery on the
//! blocking pool under [`DISCOVERY_TIMEOUT_MS`].
//!
//! The model table [`MODEL_SKUS`] maps NVML model names to the catalog's SKU ids
//! (`data/gpu-price-list.csv`, tested against it); an unknown model needs `sku` in the config.

use crate::error::AgentError;
use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Most GPUs one node may have (docs/api.md §2.2, `POST /v1/nodes`: 1–16 physical GPUs).
pub const MAX_GPUS_PER_NODE: u32 = 16;
/// Longest discovery, ms, before [`discover_bounded`] gives up on a hung driver call.
pub const DISCOVERY_TIMEOUT_MS: u64 = 30_000;
/// How long the XID watcher blocks in one `nvmlEventSetWait`, ms: it notices the agent
/// stopping within this time.
pub const XID_WAIT_MS: u32 = 1_000;
/// Library names tried in order when no `nvml_lib` is configured: the driver installs the
/// versioned name; the unversioned one comes only with development packages.
pub const DEFAULT_NVML_LIBS: &[&str] = &["libnvidia-ml.so.1", "libnvidia-ml.so"];
/// XIDs caused by the application, not the GPU (NVIDIA k8s-device-plugin,
/// `internal/rm/health.go`, "Application errors: the GPU should still be healthy"): 13 graphics
/// engine exception, 31 memory page fault, 43 GPU stopped processing, 45 preemptive cleanup,
/// 68 video processor exception, 109 context switch timeout.
pub const APPLICATION_XIDS: &[u64] = &[13, 31, 43, 45, 68, 109];
/// Tolerance of the memory check in [`sku_for_model`], percent of the nominal size: NVML reports
/// what the driver can use (an "80 GB" H100 shows 81,559 MiB, an H100 NVL 95,830 MiB).
pub const MEMORY_TOLERANCE_PCT: u64 = 8;

/// One GPU as discovered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GpuInfo {
    /// NVML index (PCI bus order), `0..count`: the exchange's GPU index.
    pub index: u32,
    /// `GPU-…` UUID (empty when the GPU did not answer).
    pub uuid: String,
    /// Model name as NVML reports it, e.g. `NVIDIA H100 80GB HBM3` (empty when unknown).
    pub name: String,
    /// Total memory, MiB (0 when unknown).
    pub memory_mib: u64,
    /// No problem found.
    pub healthy: bool,
    /// Why the GPU is unhealthy (several problems joined with `; `).
    pub problem: Option<String>,
}

/// The host's GPUs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Discovery {
    /// Driver version, e.g. `550.54.15` (`simulated` for a simulated host).
    pub driver_version: String,
    /// The catalog SKU the source recognized: from [`MODEL_SKUS`] when every GPU that
    /// answered is of one known model; the simulated SKU; `None` otherwise.
    pub sku: Option<String>,
    /// Every GPU, in index order.
    pub gpus: Vec<GpuInfo>,
}

impl Discovery {
    /// Physical GPUs, healthy or not (what the node registers as `gpus`).
    pub fn count(&self) -> u32 {
        u32::try_from(self.gpus.len()).unwrap_or(u32::MAX)
    }

    /// Healthy GPUs (what each heartbeat reports as `healthy_gpus`).
    pub fn healthy_count(&self) -> u32 {
        u32::try_from(self.gpus.iter().filter(|g| g.healthy).count()).unwrap_or(u32::MAX)
    }

    /// The node's SKU: `configured` (the config's `sku`) when set, else the recognized one.
    ///
    /// # Errors
    /// [`AgentError::UnknownModel`] naming the models when neither is known.
    pub fn node_sku(&self, configured: Option<&str>) -> Result<String, AgentError> {
        if let Some(sku) = configured.or(self.sku.as_deref()) {
            return Ok(sku.to_string());
        }
        Err(AgentError::UnknownModel {
            models: self.model_names().into_iter().collect(),
        })
    }

    /// The UUIDs of the GPUs at `indexes` (a lease's `gpu_indexes`), in that order; `None` when
    /// an index is not on this host.
    pub fn uuids_of(&self, indexes: &[u32]) -> Option<Vec<String>> {
        indexes
            .iter()
            .map(|&i| {
                self.gpus
                    .get(usize::try_from(i).ok()?)
                    .map(|g| g.uuid.clone())
            })
            .collect()
    }

    fn model_names(&self) -> BTreeSet<String> {
        self.gpus
            .iter()
            .filter(|g| !g.name.is_empty())
            .map(|g| g.name.clone())
            .collect()
    }

    /// A discovery of `gpus` that recognizes the SKU from the model table.
    fn recognized(driver_version: String, gpus: Vec<GpuInfo>) -> Discovery {
        let skus: BTreeSet<Option<&str>> = gpus
            .iter()
            .filter(|g| !g.name.is_empty())
            .map(|g| sku_for_model(&g.name, g.memory_mib))
            .collect();
        let sku = match skus.into_iter().collect::<Vec<_>>().as_slice() {
            [Some(one)] => Some((*one).to_string()),
            _ => None,
        };
        Discovery {
            driver_version,
            sku,
            gpus,
        }
    }
}

/// Where GPUs come from. Implementations block (NVML calls do): call through
/// [`discover_bounded`] from async code.
pub trait GpuSource: Send + Sync {
    /// The host's GPUs and their health now.
    ///
    /// # Errors
    /// The source as a whole failed (NVML gone, no GPU, a malformed simulation health file);
    /// one GPU's failure is its `problem`, not an error.
    fn discover(&self) -> Result<Discovery, AgentError>;
}

/// Runs `source.discover()` on the blocking pool, bounded by `timeout_ms` (STYLE model 9). A
/// hung call keeps its blocking thread; the agent reports the timeout and tries again later.
///
/// # Errors
/// The source's error, or [`AgentError::DiscoveryTimedOut`].
pub async fn discover_bounded(
    source: Arc<dyn GpuSource>,
    timeout_ms: u64,
) -> Result<Discovery, AgentError> {
    let task = tokio::task::spawn_blocking(move || source.discover());
    match tokio::time::timeout(Duration::from_millis(timeout_ms), task).await {
        Ok(Ok(result)) => result,
        Ok(Err(join)) => Err(AgentError::Nvml {
            call: "discover",
            detail: format!("discovery panicked: {join}"),
        }),
        Err(_) => Err(AgentError::DiscoveryTimedOut { timeout_ms }),
    }
}

/// One row of the model table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelSku {
    /// Tokens of the NVML name that name the model, in order (the name is split on anything
    /// but letters and digits and upper-cased), e.g. `["RTX", "4090"]`.
    pub family: &'static [&'static str],
    /// Nominal memory, GB, as in the catalog's `gpu_memory_gb`.
    pub memory_gb: u64,
    /// Catalog SKU id.
    pub sku: &'static str,
    /// A name NVML reports for this model (for simulation and tests).
    pub example_name: &'static str,
    /// The memory NVML reports for `example_name`, MiB.
    pub example_memory_mib: u64,
}

/// NVML model → catalog SKU (`data/gpu-price-list.csv`; a test checks every row against it).
/// A model is recognized when its family tokens appear in the name, not followed by a variant
/// token ([`VARIANT_TOKENS`]), and its memory is within [`MEMORY_TOLERANCE_PCT`] of the
/// nominal size (so an H100 NVL, 94 GB, is not an `H100-80G`). Huawei Ascend is not an NVML
/// device: such hosts set `sku`.
pub const MODEL_SKUS: &[ModelSku] = &[
    row(
        &["RTX", "4090"],
        24,
        "RTX4090-24G",
        "NVIDIA GeForce RTX 4090",
        24_564,
    ),
    row(
        &["RTX", "4090"],
        48,
        "RTX4090-48G",
        "NVIDIA GeForce RTX 4090",
        49_140,
    ),
    row(
        &["RTX", "5090"],
        32,
        "RTX5090-32G",
        "NVIDIA GeForce RTX 5090",
        32_607,
    ),
    row(&["A100"], 40, "A100-40G", "NVIDIA A100-SXM4-40GB", 40_960),
    row(&["A100"], 80, "A100-80G", "NVIDIA A100-SXM4-80GB", 81_920),
    row(&["H100"], 80, "H100-80G", "NVIDIA H100 80GB HBM3", 81_559),
    row(&["H200"], 141, "H200-141G", "NVIDIA H200", 143_771),
    row(&["A800"], 80, "A800-80G", "NVIDIA A800-SXM4-80GB", 81_920),
    row(&["H800"], 80, "H800-80G", "NVIDIA H800", 81_559),
    row(&["H20"], 96, "H20-96G", "NVIDIA H20", 97_871),
];

/// Tokens right after a family that make it another model (`RTX 4090 D`, `RTX 4090 Ti`).
pub const VARIANT_TOKENS: &[&str] = &["D", "TI", "SUPER", "LAPTOP", "MOBILE"];

const fn row(
    family: &'static [&'static str],
    memory_gb: u64,
    sku: &'static str,
    example_name: &'static str,
    example_memory_mib: u64,
) -> ModelSku {
    ModelSku {
        family,
        memory_gb,
        sku,
        example_name,
        example_memory_mib,
    }
}

/// The catalog SKU of a GPU named `name` (as NVML reports it) with `memory_mib` MiB, or `None`
/// when the table does not know it.
pub fn sku_for_model(name: &str, memory_mib: u64) -> Option<&'static str> {
    let tokens: Vec<String> = name
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_ascii_uppercase)
        .collect();
    MODEL_SKUS
        .iter()
        .find(|m| family_matches(&tokens, m.family) && memory_matches(memory_mib, m.memory_gb))
        .map(|m| m.sku)
}

fn family_matches(tokens: &[String], family: &[&str]) -> bool {
    tokens.windows(family.len()).enumerate().any(|(at, w)| {
        w.iter().zip(family).all(|(t, f)| t == f)
            && tokens
                .get(at + family.len())
                .is_none_or(|next| !VARIANT_TOKENS.contains(&next.as_str()))
    })
}

fn memory_matches(memory_mib: u64, memory_gb: u64) -> bool {
    // |mib - gb·1024| ≤ gb·1024·tolerance/100, in integers.
    let nominal = memory_gb * 1024;
    memory_mib.abs_diff(nominal) * 100 <= nominal * MEMORY_TOLERANCE_PCT
}

/// A simulated host: `COUNT` GPUs of `SKU`, all healthy until marked otherwise.
#[derive(Debug)]
pub struct SimulatedGpus {
    sku: String,
    count: u32,
    unhealthy: Mutex<BTreeMap<u32, String>>,
    health_file: Option<PathBuf>,
}

impl SimulatedGpus {
    /// Parses `SKU:COUNT`, e.g. `H100-80G:8` (SKU: 1..=32 of `[A-Za-z0-9._-]`, COUNT:
    /// 1..=[`MAX_GPUS_PER_NODE`]).
    ///
    /// # Errors
    /// [`AgentError::Simulate`] saying what is wrong.
    pub fn parse(spec: &str) -> Result<SimulatedGpus, AgentError> {
        let bad = |message: &str| AgentError::Simulate {
            spec: spec.to_string(),
            message: message.to_string(),
        };
        let (sku, count) = spec.rsplit_once(':').ok_or_else(|| bad("no ':'"))?;
        let sku_ok = !sku.is_empty()
            && sku.len() <= 32
            && sku
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
        if !sku_ok {
            return Err(bad("the SKU is 1..=32 letters, digits, '-', '.' or '_'"));
        }
        let count: u32 = count
            .parse()
            .map_err(|_| bad("the count is not a whole number"))?;
        if !(1..=MAX_GPUS_PER_NODE).contains(&count) {
            return Err(bad("the count is out of range"));
        }
        Ok(SimulatedGpus {
            sku: sku.to_string(),
            count,
            unhealthy: Mutex::new(BTreeMap::new()),
            health_file: None,
        })
    }

    /// Also reads `path` at every discovery: one unhealthy GPU per line, `INDEX [problem]`;
    /// blank lines and `#` comments are skipped; a missing file means all healthy.
    pub fn with_health_file(mut self, path: PathBuf) -> SimulatedGpus {
        self.health_file = Some(path);
        self
    }

    /// The simulated SKU.
    pub fn sku(&self) -> &str {
        &self.sku
    }

    /// Marks GPU `index` unhealthy with `problem` (until [`SimulatedGpus::set_healthy`]).
    pub fn set_unhealthy(&self, index: u32, problem: &str) {
        self.marks().insert(index, problem.to_string());
    }

    /// Marks GPU `index` healthy again.
    pub fn set_healthy(&self, index: u32) {
        self.marks().remove(&index);
    }

    fn marks(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, String>> {
        self.unhealthy
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn file_marks(&self) -> Result<BTreeMap<u32, String>, AgentError> {
        let Some(path) = &self.health_file else {
            return Ok(BTreeMap::new());
        };
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
            Err(source) => {
                return Err(AgentError::Io {
                    path: path.clone(),
                    source,
                });
            }
        };
        let mut marks = BTreeMap::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (index, problem) = line.split_once(' ').unwrap_or((line, ""));
            match index.parse::<u32>() {
                Ok(i) if i < self.count => {
                    let problem = problem.trim();
                    let problem = if problem.is_empty() {
                        "marked unhealthy (simulation)"
                    } else {
                        problem
                    };
                    marks.insert(i, problem.to_string());
                }
                _ => {
                    return Err(AgentError::config(
                        "simulate_health_file",
                        format!(
                            "{} line {}: expected `INDEX [problem]` with INDEX in 0..{}",
                            path.display(),
                            n + 1,
                            self.count
                        ),
                    ));
                }
            }
        }
        Ok(marks)
    }
}

impl GpuSource for SimulatedGpus {
    fn discover(&self) -> Result<Discovery, AgentError> {
        let mut marks = self.file_marks()?;
        marks.extend(self.marks().clone());
        let model = MODEL_SKUS.iter().find(|m| m.sku == self.sku);
        let gpus = (0..self.count)
            .map(|index| {
                let problem = marks.get(&index).cloned();
                GpuInfo {
                    index,
                    uuid: format!("GPU-sim-{}-{index}", self.sku),
                    name: model.map_or_else(
                        || format!("Simulated {}", self.sku),
                        |m| m.example_name.to_string(),
                    ),
                    memory_mib: model.map_or(0, |m| m.example_memory_mib),
                    healthy: problem.is_none(),
                    problem,
                }
            })
            .collect();
        Ok(Discovery {
            driver_version: "simulated".into(),
            sku: Some(self.sku.clone()),
            gpus,
        })
    }
}

/// Critical XIDs seen since the agent started, by GPU UUID (the last one per GPU).
type XidLog = Arc<Mutex<BTreeMap<String, String>>>;

/// The host's NVIDIA GPUs through NVML.
pub struct NvmlGpus {
    nvml: Arc<Nvml>,
    xids: XidLog,
    stop: Arc<AtomicBool>,
}

impl std::fmt::Debug for NvmlGpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlGpus").finish_non_exhaustive()
    }
}

impl NvmlGpus {
    /// Loads NVML from `lib` (else [`DEFAULT_NVML_LIBS`], in order) and initializes it.
    ///
    /// # Errors
    /// [`AgentError::NvmlUnavailable`]: no library, no driver loaded, no permission.
    pub fn init(lib: Option<&Path>) -> Result<NvmlGpus, AgentError> {
        let candidates: Vec<&std::ffi::OsStr> = match lib {
            Some(p) => vec![p.as_os_str()],
            None => DEFAULT_NVML_LIBS.iter().map(std::ffi::OsStr::new).collect(),
        };
        let mut failures = Vec::new();
        for name in candidates {
            match Nvml::builder().lib_path(name).init() {
                Ok(nvml) => {
                    return Ok(NvmlGpus {
                        nvml: Arc::new(nvml),
                        xids: Arc::default(),
                        stop: Arc::new(AtomicBool::new(false)),
                    });
                }
                Err(e) => failures.push(format!("{}: {}", name.to_string_lossy(), nvml_text(&e))),
            }
        }
        Err(AgentError::NvmlUnavailable {
            detail: failures.join("; "),
        })
    }

    /// Starts the XID watcher thread: it records every critical XID (less
    /// [`APPLICATION_XIDS`]) against its GPU until this value is dropped. GPUs that do not
    /// support XID events are not watched (logged).
    ///
    /// # Errors
    /// [`AgentError::Nvml`] when the event set cannot be created or the thread not spawned.
    pub fn watch_xids(&self) -> Result<(), AgentError> {
        let (nvml, xids, stop) = (self.nvml.clone(), self.xids.clone(), self.stop.clone());
        // Fail early, on the caller's thread, when events are not available at all.
        drop(self.nvml.create_event_set().map_err(|e| AgentError::Nvml {
            call: "nvmlEventSetCreate",
            detail: nvml_text(&e),
        })?);
        std::thread::Builder::new()
            .name("gpux-xid-watch".into())
            .spawn(move || xid_watch(&nvml, &xids, &stop))
            .map(drop)
            .map_err(|e| AgentError::Nvml {
                call: "xid watcher thread",
                detail: e.to_string(),
            })
    }

    fn probe(&self, index: u32) -> GpuInfo {
        let mut info = GpuInfo {
            index,
            uuid: String::new(),
            name: String::new(),
            memory_mib: 0,
            healthy: true,
            problem: None,
        };
        let mut problems: Vec<String> = Vec::new();
        let device = match self.nvml.device_by_index(index) {
            Ok(d) => d,
            Err(e) => {
                info.healthy = false;
                info.problem = Some(gpu_problem("nvmlDeviceGetHandleByIndex", &e));
                return info;
            }
        };
        match device.uuid() {
            Ok(u) => info.uuid = u,
            Err(e) => problems.push(gpu_problem("nvmlDeviceGetUUID", &e)),
        }
        match device.name() {
            Ok(n) => info.name = n,
            Err(e) => problems.push(gpu_problem("nvmlDeviceGetName", &e)),
        }
        match device.memory_info() {
            Ok(m) => info.memory_mib = m.total / (1024 * 1024),
            Err(e) => problems.push(gpu_problem("nvmlDeviceGetMemoryInfo", &e)),
        }
        match device.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile) {
            Ok(0) | Err(NvmlError::NotSupported) => {}
            Ok(n) => problems.push(format!(
                "{n} uncorrected ECC error(s) since the driver loaded"
            )),
            Err(e) => problems.push(gpu_problem("nvmlDeviceGetTotalEccErrors", &e)),
        }
        let xid = self
            .xids
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&info.uuid)
            .cloned();
        problems.extend(xid);
        // A lost GPU fails every call the same way: say it once.
        problems.dedup();
        if !problems.is_empty() {
            info.healthy = false;
            info.problem = Some(problems.join("; "));
        }
        info
    }
}

impl Drop for NvmlGpus {
    fn drop(&mut self) {
        // The watcher notices within XID_WAIT_MS and drops its handle on NVML.
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl GpuSource for NvmlGpus {
    fn discover(&self) -> Result<Discovery, AgentError> {
        let nvml_err = |call| {
            move |e: NvmlError| AgentError::Nvml {
                call,
                detail: nvml_text(&e),
            }
        };
        let driver_version = self
            .nvml
            .sys_driver_version()
            .map_err(nvml_err("nvmlSystemGetDriverVersion"))?;
        let count = self
            .nvml
            .device_count()
            .map_err(nvml_err("nvmlDeviceGetCount"))?;
        if count == 0 {
            return Err(AgentError::NoGpus);
        }
        let gpus = (0..count).map(|i| self.probe(i)).collect();
        Ok(Discovery::recognized(driver_version, gpus))
    }
}

/// NVML's error as text, naming `NVML_ERROR_GPU_IS_LOST` so operators can grep for it.
fn nvml_text(e: &NvmlError) -> String {
    match e {
        NvmlError::GpuLost => "NVML_ERROR_GPU_IS_LOST: the GPU has fallen off the bus or is \
                               otherwise inaccessible"
            .into(),
        other => other.to_string(),
    }
}

/// One GPU's failed call as a health problem.
fn gpu_problem(call: &str, e: &NvmlError) -> String {
    match e {
        NvmlError::GpuLost => format!("lost ({})", nvml_text(e)),
        other => format!("does not answer {call}: {}", nvml_text(other)),
    }
}

/// The XID watcher's loop (its own thread: `nvmlEventSetWait` blocks).
fn xid_watch(nvml: &Nvml, xids: &Mutex<BTreeMap<String, String>>, stop: &AtomicBool) {
    let Some(set) = register_xid_events(nvml) else {
        return;
    };
    while !stop.load(Ordering::Relaxed) {
        match set.wait(XID_WAIT_MS) {
            Ok(event) if event.event_type.contains(EventTypes::CRITICAL_XID_ERROR) => {
                let (xid, counts) = match event.event_data {
                    Some(XidError::Value(x)) => (x.to_string(), !APPLICATION_XIDS.contains(&x)),
                    Some(XidError::Unknown) | None => ("unknown".to_string(), true),
                };
                let uuid = event.device.uuid().unwrap_or_default();
                tracing::warn!(%uuid, %xid, counts, "critical XID error");
                if counts {
                    xids.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(uuid, format!("critical XID {xid} since the agent started"));
                }
            }
            Ok(_) | Err(NvmlError::Timeout) => {}
            Err(e) => {
                // Lost GPUs and the like are found by discovery; do not spin on them.
                tracing::debug!(error = %nvml_text(&e), "nvmlEventSetWait");
                std::thread::sleep(Duration::from_millis(u64::from(XID_WAIT_MS)));
            }
        }
    }
}

/// One event set with every GPU that supports critical-XID events registered. A failed
/// registration frees the set (NVML's rule), so the set is rebuilt without that GPU.
fn register_xid_events(nvml: &Nvml) -> Option<nvml_wrapper::EventSet<'_>> {
    let count = nvml.device_count().ok()?;
    let mut watch: Vec<u32> = (0..count)
        .filter(|&i| {
            let supported = nvml
                .device_by_index(i)
                .and_then(|d| d.supported_event_types())
                .is_ok_and(|t| t.contains(EventTypes::CRITICAL_XID_ERROR));
            if !supported {
                tracing::warn!(index = i, "GPU does not report XID events: not watched");
            }
            supported
        })
        .collect();
    'rebuild: loop {
        let mut set = match nvml.create_event_set() {
            Ok(set) => set,
            Err(e) => {
                tracing::warn!(error = %nvml_text(&e), "XID events: no event set, not watched");
                return None;
            }
        };
        for (k, &i) in watch.iter().enumerate() {
            let registered = nvml
                .device_by_index(i)
                .map_err(|e| e.to_string())
                .and_then(|d| {
                    d.register_events(EventTypes::CRITICAL_XID_ERROR, set)
                        .map_err(|e| e.to_string())
                });
            match registered {
                Ok(s) => set = s,
                Err(e) => {
                    tracing::warn!(index = i, error = %e, "XID events: not watched");
                    watch.remove(k);
                    continue 'rebuild;
                }
            }
        }
        return Some(set);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The catalog's SKU ids and memory sizes, from the project's price list.
    fn catalog() -> BTreeMap<String, u64> {
        include_str!("../../../data/gpu-price-list.csv")
            .lines()
            .skip(1)
            .filter_map(|l| {
                let mut f = l.split(',');
                Some((f.next()?.to_string(), f.nth(1)?.parse().ok()?))
            })
            .collect()
    }

    #[test]
    fn every_table_row_is_a_catalog_sku_of_its_memory_and_maps_its_example() {
        let catalog = catalog();
        assert!(catalog.len() >= MODEL_SKUS.len());
        for m in MODEL_SKUS {
            assert_eq!(catalog.get(m.sku), Some(&m.memory_gb), "{}", m.sku);
            assert_eq!(
                sku_for_model(m.example_name, m.example_memory_mib),
                Some(m.sku),
                "{}",
                m.example_name
            );
        }
    }

    #[test]
    fn model_names_map_to_skus_by_family_and_memory() {
        let cases: &[(&str, u64, Option<&str>)] = &[
            ("NVIDIA H100 80GB HBM3", 81_559, Some("H100-80G")),
            ("NVIDIA H100 PCIe", 81_559, Some("H100-80G")),
            ("NVIDIA H100 NVL", 95_830, None), // 94 GB: not the catalog's H100
            ("NVIDIA H200", 143_771, Some("H200-141G")),
            ("NVIDIA H200 NVL", 143_771, Some("H200-141G")),
            ("NVIDIA H20", 97_871, Some("H20-96G")), // not H200
            ("NVIDIA A100-SXM4-40GB", 40_960, Some("A100-40G")),
            ("NVIDIA A100-PCIE-40GB", 40_960, Some("A100-40G")),
            ("NVIDIA A100 80GB PCIe", 81_920, Some("A100-80G")),
            ("A100-SXM4-80GB", 81_920, Some("A100-80G")), // old drivers: no vendor prefix
            ("NVIDIA A800 80GB PCIe", 81_920, Some("A800-80G")),
            ("NVIDIA H800 PCIe", 81_559, Some("H800-80G")),
            ("NVIDIA GeForce RTX 4090", 24_564, Some("RTX4090-24G")),
            ("NVIDIA GeForce RTX 4090", 49_140, Some("RTX4090-48G")),
            ("NVIDIA GeForce RTX 4090 D", 24_564, None), // another model
            ("NVIDIA GeForce RTX 4080", 16_376, None),
            ("NVIDIA GeForce RTX 5090", 32_607, Some("RTX5090-32G")),
            ("NVIDIA L40S", 46_068, None),
            ("", 0, None),
        ];
        for &(name, mib, sku) in cases {
            assert_eq!(sku_for_model(name, mib), sku, "{name} {mib} MiB");
        }
    }

    fn gpu(index: u32, name: &str, mib: u64) -> GpuInfo {
        GpuInfo {
            index,
            uuid: format!("GPU-{index}"),
            name: name.into(),
            memory_mib: mib,
            healthy: true,
            problem: None,
        }
    }

    #[test]
    fn node_sku_is_the_override_else_the_one_recognized_model_else_an_error() {
        let h100 = Discovery::recognized(
            "550.54.15".into(),
            vec![
                gpu(0, "NVIDIA H100 80GB HBM3", 81_559),
                // A lost GPU has no name: it does not make the host mixed.
                gpu(1, "", 0),
            ],
        );
        assert_eq!(h100.sku.as_deref(), Some("H100-80G"));
        assert_eq!(h100.node_sku(None).unwrap(), "H100-80G");
        assert_eq!(h100.node_sku(Some("H800-80G")).unwrap(), "H800-80G");
        let mixed = Discovery::recognized(
            "550.54.15".into(),
            vec![
                gpu(0, "NVIDIA H100 80GB HBM3", 81_559),
                gpu(1, "NVIDIA A100-SXM4-80GB", 81_920),
            ],
        );
        assert_eq!(mixed.sku, None);
        let err = mixed.node_sku(None).unwrap_err();
        assert!(matches!(&err, AgentError::UnknownModel { models } if models.len() == 2));
        assert!(err.to_string().contains("set `sku` in the config"), "{err}");
        let unknown = Discovery::recognized("1".into(), vec![gpu(0, "NVIDIA L40S", 46_068)]);
        assert!(
            unknown
                .node_sku(None)
                .unwrap_err()
                .to_string()
                .contains("NVIDIA L40S")
        );
        assert_eq!(unknown.node_sku(Some("L40S-48G")).unwrap(), "L40S-48G");
    }

    #[test]
    fn simulate_specs_parse_or_say_what_is_wrong() {
        let ok = SimulatedGpus::parse("H100-80G:8").unwrap();
        assert_eq!((ok.sku(), ok.count), ("H100-80G", 8));
        assert_eq!(SimulatedGpus::parse("RTX4090-24G:16").unwrap().count, 16);
        for (bad, why) in [
            ("H100-80G:0", "out of range"),
            ("H100-80G:17", "out of range"),
            (":8", "SKU"),
            ("H100-80G", "no ':'"),
            ("H100-80G:", "whole number"),
            ("H100-80G:x", "whole number"),
            ("H100 80G:8", "SKU"),
            ("H100-80G:-1", "whole number"),
        ] {
            let err = SimulatedGpus::parse(bad).unwrap_err().to_string();
            assert!(err.contains(why), "{bad}: {err}");
            assert!(err.contains("SKU:COUNT"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_simulated_host_is_deterministic_and_its_health_drops_when_marked() {
        let sim = SimulatedGpus::parse("H100-80G:8").unwrap();
        let d = sim.discover().unwrap();
        assert_eq!(d.count(), 8);
        assert_eq!(d.healthy_count(), 8);
        assert_eq!(d.gpus[3].uuid, "GPU-sim-H100-80G-3");
        assert_eq!(d.gpus[3].index, 3);
        assert_eq!(d.node_sku(None).unwrap(), "H100-80G");
        assert_eq!(d.gpus[0].name, "NVIDIA H100 80GB HBM3");
        assert_eq!(
            d.uuids_of(&[1, 0]),
            Some(vec![
                "GPU-sim-H100-80G-1".into(),
                "GPU-sim-H100-80G-0".into()
            ])
        );
        assert_eq!(d.uuids_of(&[8]), None);
        sim.set_unhealthy(2, "XID 79 (test)");
        let d = sim.discover().unwrap();
        assert_eq!(d.healthy_count(), 7);
        assert!(!d.gpus[2].healthy);
        assert_eq!(d.gpus[2].problem.as_deref(), Some("XID 79 (test)"));
        sim.set_healthy(2);
        assert_eq!(sim.discover().unwrap().healthy_count(), 8);
        // A SKU the table does not know still simulates, under its own id.
        let other = SimulatedGpus::parse("Ascend910B-64G:2").unwrap();
        assert_eq!(
            other.discover().unwrap().node_sku(None).unwrap(),
            "Ascend910B-64G"
        );
    }

    #[test]
    fn the_simulation_health_file_marks_gpus_each_discovery() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("unhealthy");
        let sim = SimulatedGpus::parse("A100-80G:4")
            .unwrap()
            .with_health_file(path.clone());
        assert_eq!(sim.discover().unwrap().healthy_count(), 4); // no file yet
        std::fs::write(&path, "# broken GPUs\n1 ECC storm\n\n3\n").unwrap();
        let d = sim.discover().unwrap();
        assert_eq!(d.healthy_count(), 2);
        assert_eq!(d.gpus[1].problem.as_deref(), Some("ECC storm"));
        assert_eq!(
            d.gpus[3].problem.as_deref(),
            Some("marked unhealthy (simulation)")
        );
        std::fs::write(&path, "4 out of range\n").unwrap();
        let err = sim.discover().unwrap_err().to_string();
        assert!(err.contains("line 1") && err.contains("0..4"), "{err}");
        std::fs::remove_file(&path).unwrap();
        assert_eq!(sim.discover().unwrap().healthy_count(), 4);
    }

    #[tokio::test]
    async fn discovery_is_bounded() {
        struct Hung;
        impl GpuSource for Hung {
            fn discover(&self) -> Result<Discovery, AgentError> {
                std::thread::sleep(Duration::from_millis(500));
                Err(AgentError::NoGpus)
            }
        }
        let err = discover_bounded(Arc::new(Hung), 50).await.unwrap_err();
        assert!(matches!(
            err,
            AgentError::DiscoveryTimedOut { timeout_ms: 50 }
        ));
        let sim: Arc<dyn GpuSource> = Arc::new(SimulatedGpus::parse("H20-96G:2").unwrap());
        let d = discover_bounded(sim, DISCOVERY_TIMEOUT_MS).await.unwrap();
        assert_eq!(d.healthy_count(), 2);
    }

    /// Without a driver (CI, this build machine) NVML fails to load with an error that says
    /// what to do; with one, discovery finds the GPUs. Either way nothing crashes.
    #[test]
    fn nvml_without_a_driver_is_a_clear_error_not_a_crash() {
        let missing = NvmlGpus::init(Some(Path::new("/nonexistent/libnvidia-ml.so.1")))
            .map(drop)
            .unwrap_err();
        let text = missing.to_string();
        assert!(matches!(missing, AgentError::NvmlUnavailable { .. }));
        assert!(text.contains("/nonexistent/libnvidia-ml.so.1"), "{text}");
        assert!(text.contains("--simulate"), "{text}");
        match NvmlGpus::init(None) {
            Err(e) => {
                let text = e.to_string();
                assert!(text.contains("libnvidia-ml.so.1"), "{text}");
                assert!(text.contains("NVIDIA driver"), "{text}");
            }
            Ok(nvml) => {
                let d = nvml.discover().unwrap();
                assert!(d.count() >= 1);
                assert!(
                    d.gpus
                        .iter()
                        .all(|g| g.uuid.starts_with("GPU-") || !g.healthy)
                );
            }
        }
    }
}
