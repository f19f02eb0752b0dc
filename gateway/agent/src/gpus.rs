//! GPU discovery and health: what the agent registers (model → catalog SKU, count) and what
//! every heartbeat reports (`healthy_gpus`, docs/api.md §2.2 "heartbeat").
//!
//! Two sources behind one trait ([`GpuSource`], STYLE §3 "Put NVML behind a trait … with a
//! fake for CI"):
//! - [`NvmlGpus`]: the NVIDIA Management Library, loaded with `dlopen` when
//!   [`NvmlGpus::init`] runs (nvml-wrapper uses libloading; nothing is linked at build time),
//!   so the binary starts on a host without a driver and says so in a clear error.
//! - [`SimulatedGpus`]: `--simulate SKU:COUNT`, a synthetic host (UUIDs `GPU-sim-<sku>-<i>`,
//!   or `GPU-sim-<sku>-<hash of the host name>-<i>` once [`GpuSource::name_host`] named it, so
//!   two simulated nodes never attest the same UUID) whose GPUs tests mark unhealthy by a
//!   method or a file.
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
//! The model table [`MODEL_SKUS`] (`exchange::models`, shared with the exchange's attestation
//! check) maps NVML model names to the catalog's SKU ids (`data/gpu-price-list.csv`, tested
//! against it); an unknown model needs `sku` in the config.
//!
//! What the exchange is told (issue 26, docs/market-rules.md §12): [`Discovery::attestation`]
//! (every GPU's index, UUID, model and memory, PCIe link, MIG mode and active NVLink links,
//! with driver and CUDA versions, the host's NICs from `/sys/class/net`, [`host_nics`], and its
//! CPU cores, RAM and disk size from `sysinfo`, [`host_size`], at start and whenever it
//! changes) and [`Discovery::unhealthy_gpus`] (each heartbeat: the
//! unhealthy GPUs with their problem). A GPU in MIG mode is not a whole GPU: it is unhealthy
//! with the problem [`MIG_ENABLED`], so it is never counted or listed as one. A verification
//! reads [`GpuSource::faults`] ([`NvmlChecks`]: PCIe link below max, ECC off, power capped,
//! throttled).

use crate::error::AgentError;
use gpux_wire::NvmlFaultDto;
use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{Brand, EccCounter, MemoryError};
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
/// The model table, shared with the exchange (issue 26: it moved into `exchange::models`, the
/// catalog's side, so the agent's SKU and the exchange's attestation check agree):
/// re-exported under the agent's old paths.
pub use exchange::models::{
    MEMORY_TOLERANCE_PCT, MODEL_SKUS, ModelSku, VARIANT_TOKENS, sku_for_model,
};

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
    /// PCIe link and MIG mode, where NVML says (attested as host facts, issue 26).
    pub link: GpuLink,
}

/// A GPU's PCIe link and MIG mode as NVML reports them; `None` where it does not say (a
/// simulated GPU, an old driver, a GPU without MIG). Reported in the attestation (issue 26).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct GpuLink {
    /// PCIe generation now (`nvmlDeviceGetCurrPcieLinkGeneration`; a GPU at idle may train
    /// down).
    pub pcie_gen: Option<u32>,
    /// PCIe lanes now (`nvmlDeviceGetCurrPcieLinkWidth`).
    pub pcie_width: Option<u32>,
    /// Highest PCIe generation of GPU and slot (`nvmlDeviceGetMaxPcieLinkGeneration`).
    pub pcie_max_gen: Option<u32>,
    /// Widest PCIe link of GPU and slot (`nvmlDeviceGetMaxPcieLinkWidth`).
    pub pcie_max_width: Option<u32>,
    /// MIG mode enabled now (`nvmlDeviceGetMigMode`).
    pub mig_mode: Option<bool>,
    /// NVLink links active now (`nvmlDeviceGetNvLinkState` over links
    /// `0..`[`gpux_wire::MAX_NVLINK_LINKS`]; `None` when the GPU has no NVLink).
    pub nvlink_links: Option<u32>,
}

/// The host's GPUs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Discovery {
    /// Driver version, e.g. `550.54.15` (`simulated` for a simulated host).
    pub driver_version: String,
    /// CUDA version the driver supports, e.g. `12.4` (empty when NVML does not say;
    /// `simulated` for a simulated host).
    pub cuda_version: String,
    /// The catalog SKU the source recognized: from [`MODEL_SKUS`] when every GPU that
    /// answered is of one known model; the simulated SKU; `None` otherwise.
    pub sku: Option<String>,
    /// Every GPU, in index order.
    pub gpus: Vec<GpuInfo>,
    /// The host's network interfaces with a link speed (`/sys/class/net`, [`host_nics`]):
    /// attested (issue 26). Empty for a simulated host.
    pub nics: Vec<gpux_wire::NicDto>,
    /// The host's CPU cores, RAM and disk ([`host_size`]): attested (issue 26). A simulated
    /// host reports the real machine's (it runs there).
    pub host: HostSize,
}

/// What an attestation states of the host beside its GPUs (issue 26): each `None` when the
/// host did not say, or said something outside the wire's bounds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HostSize {
    /// Logical CPU cores (what the OS schedules on: hyperthreads count), 1..=
    /// [`gpux_wire::MAX_CPU_CORES`].
    pub cpu_cores: Option<u32>,
    /// Total RAM, MiB (2^20 bytes), 1..=[`gpux_wire::MAX_RAM_MIB`].
    pub ram_mib: Option<u64>,
    /// Total size of the filesystem holding `/` ([`HOST_DISK_PATH`]), GB (10^9 bytes, rounded
    /// down), at most [`gpux_wire::MAX_DISK_GB`]. The size, not the free space: an
    /// attestation is sent again whenever it changes, and the free space moves all the time.
    pub disk_gb: Option<u32>,
}

/// The filesystem whose size the agent attests as the host's disk: the one holding `/` (where
/// container images and lease workloads land unless an operator's hooks put them elsewhere).
pub const HOST_DISK_PATH: &str = "/";

impl HostSize {
    /// The figures from raw counts: logical CPUs, RAM in bytes, the disk's size in bytes;
    /// 0 or out of the wire's bounds: not said.
    pub fn from_raw(cpus: usize, ram_bytes: u64, disk_bytes: Option<u64>) -> HostSize {
        HostSize {
            cpu_cores: u32::try_from(cpus)
                .ok()
                .filter(|c| (1..=gpux_wire::MAX_CPU_CORES).contains(c)),
            ram_mib: Some(ram_bytes / (1024 * 1024))
                .filter(|m| (1..=gpux_wire::MAX_RAM_MIB).contains(m)),
            disk_gb: disk_bytes
                .and_then(|b| u32::try_from(b / 1_000_000_000).ok())
                .filter(|g| *g <= gpux_wire::MAX_DISK_GB && disk_bytes != Some(0)),
        }
    }
}

/// The size of the filesystem holding `path` among `mounts` (mount point, size in bytes): the
/// mount with the longest mount point that is an ancestor of `path` (`/` when none is
/// deeper); `None` when no mount holds it.
pub fn disk_holding<'a>(
    path: &Path,
    mounts: impl IntoIterator<Item = (&'a Path, u64)>,
) -> Option<u64> {
    mounts
        .into_iter()
        .filter(|(m, _)| path.starts_with(m))
        .max_by_key(|(m, _)| m.components().count())
        .map(|(_, size)| size)
}

/// This host's size ([`HostSize`]) from the OS through `sysinfo`: logical CPUs, total RAM and
/// the size of the filesystem holding [`HOST_DISK_PATH`]. Measured once per process (none of
/// it changes while the agent runs; discovery runs every heartbeat).
pub fn host_size() -> HostSize {
    static SIZE: std::sync::OnceLock<HostSize> = std::sync::OnceLock::new();
    *SIZE.get_or_init(|| {
        use sysinfo::{CpuRefreshKind, DiskRefreshKind, Disks, MemoryRefreshKind, RefreshKind};
        let (cpus, ram) = sysinfo::System::new_with_specifics(
            RefreshKind::nothing()
                .with_cpu(CpuRefreshKind::nothing())
                .with_memory(MemoryRefreshKind::nothing().with_ram()),
        )
        .map_or((0, 0), |s| (s.cpus().len(), s.total_memory()));
        let disk =
            Disks::new_with_refreshed_list_specifics(DiskRefreshKind::nothing().with_storage())
                .ok()
                .and_then(|disks| {
                    disk_holding(
                        Path::new(HOST_DISK_PATH),
                        disks.iter().map(|d| (d.mount_point(), d.total_space())),
                    )
                });
        HostSize::from_raw(cpus, ram, disk)
    })
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

    /// The attestation of this host (issue 26, docs/market-rules.md §12.1): every GPU's index,
    /// UUID, model and memory (MiB, saturating at `u32::MAX`), the driver and CUDA versions
    /// (cut to [`gpux_wire::MAX_VERSION_LEN`]). `None` when a GPU did not answer with its
    /// UUID or name (the exchange would refuse the report; the next discovery tries again),
    /// or there are more GPUs than a node may have.
    pub fn attestation(&self) -> Option<gpux_wire::AttestationRequest> {
        let complete = !self.gpus.is_empty()
            && self.gpus.len() <= MAX_GPUS_PER_NODE as usize
            && self
                .gpus
                .iter()
                .all(|g| !g.uuid.is_empty() && !g.name.trim().is_empty());
        if !complete {
            return None;
        }
        let version = |v: &str| -> String {
            v.chars()
                .filter(|c| (' '..='~').contains(c))
                .take(gpux_wire::MAX_VERSION_LEN)
                .collect()
        };
        Some(gpux_wire::AttestationRequest {
            gpus: self
                .gpus
                .iter()
                .map(|g| gpux_wire::AttestedGpuDto {
                    index: g.index,
                    uuid: g.uuid.clone(),
                    model: g.name.clone(),
                    memory_mib: u32::try_from(g.memory_mib).unwrap_or(u32::MAX),
                    // Within the wire's bounds, or not said.
                    pcie_gen: g
                        .link
                        .pcie_gen
                        .filter(|v| (1..=gpux_wire::MAX_PCIE_GEN).contains(v)),
                    pcie_width: g
                        .link
                        .pcie_width
                        .filter(|v| (1..=gpux_wire::MAX_PCIE_WIDTH).contains(v)),
                    pcie_max_gen: g
                        .link
                        .pcie_max_gen
                        .filter(|v| (1..=gpux_wire::MAX_PCIE_GEN).contains(v)),
                    pcie_max_width: g
                        .link
                        .pcie_max_width
                        .filter(|v| (1..=gpux_wire::MAX_PCIE_WIDTH).contains(v)),
                    mig_mode: g.link.mig_mode,
                    nvlink_links: g.link.nvlink_links,
                })
                .collect(),
            driver_version: version(&self.driver_version),
            cuda_version: version(&self.cuda_version),
            nics: self
                .nics
                .iter()
                .take(gpux_wire::MAX_NICS)
                .cloned()
                .collect(),
            cpu_cores: self.host.cpu_cores,
            ram_mib: self.host.ram_mib,
            disk_gb: self.host.disk_gb,
        })
    }

    /// The unhealthy GPUs among indexes `0..registered`, as a heartbeat's `unhealthy_gpus`
    /// (issue 26, docs/market-rules.md §12.1): index, UUID and problem (each cut to the wire's
    /// limits, [`gpux_wire::MAX_GPU_UUID_LEN`] and [`gpux_wire::MAX_GPU_REASON_LEN`]).
    /// A registered index this host does not have counts unhealthy ("not found on the
    /// host"), as [`Discovery::healthy_count`] does not count it.
    pub fn unhealthy_gpus(&self, registered: u32) -> Vec<gpux_wire::UnhealthyGpu> {
        (0..registered.min(MAX_GPUS_PER_NODE))
            .filter_map(|i| match self.gpus.iter().find(|g| g.index == i) {
                Some(g) if g.healthy => None,
                Some(g) => Some(unhealthy_gpu(i, Some(&g.uuid), g.problem.as_deref())),
                None => Some(unhealthy_gpu(i, None, Some("not found on the host"))),
            })
            .collect()
    }

    /// A discovery of `gpus` that recognizes the SKU from the model table.
    fn recognized(driver_version: String, cuda_version: String, gpus: Vec<GpuInfo>) -> Discovery {
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
            cuda_version,
            sku,
            gpus,
            nics: Vec::new(),
            host: HostSize::default(),
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

    /// Tells the source the node's name (the agent calls it once at start). A simulated host
    /// derives its GPUs' UUIDs from it, so two simulated nodes never attest the same UUID;
    /// real GPUs ignore it.
    fn name_host(&self, _name: &str) {}

    /// The NVML checks of a verification on GPU `index` (issue 26, [`NvmlChecks::faults`]).
    /// Blocks like discovery: call it on the blocking pool. Default: none found.
    ///
    /// # Errors
    /// The GPU does not answer.
    fn faults(&self, _index: u32) -> Result<Vec<NvmlFaultDto>, AgentError> {
        Ok(Vec::new())
    }
}

/// A heartbeat's entry for GPU `index`: the UUID when it is one the exchange takes (1..=64
/// printable ASCII without spaces), the problem cut to [`gpux_wire::MAX_GPU_REASON_LEN`]
/// characters without control characters.
pub fn unhealthy_gpu(
    index: u32,
    uuid: Option<&str>,
    problem: Option<&str>,
) -> gpux_wire::UnhealthyGpu {
    let uuid = uuid.filter(|u| {
        !u.is_empty()
            && u.len() <= gpux_wire::MAX_GPU_UUID_LEN
            && u.bytes().all(|b| b.is_ascii_graphic())
    });
    let reason: String = problem
        .unwrap_or_default()
        .chars()
        .filter(|c| !c.is_control())
        .take(gpux_wire::MAX_GPU_REASON_LEN)
        .collect();
    gpux_wire::UnhealthyGpu {
        index,
        uuid: uuid.map(str::to_string),
        reason: (!reason.is_empty()).then_some(reason),
    }
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

/// A simulated host: `COUNT` GPUs of `SKU`, all healthy until marked otherwise.
#[derive(Debug)]
pub struct SimulatedGpus {
    sku: String,
    count: u32,
    unhealthy: Mutex<BTreeMap<u32, String>>,
    /// GPUs in MIG mode ([`SimulatedGpus::set_mig`]).
    mig: Mutex<BTreeSet<u32>>,
    /// What the NVML checks find per GPU ([`SimulatedGpus::set_faults`]).
    faults: Mutex<BTreeMap<u32, Vec<NvmlFaultDto>>>,
    health_file: Option<PathBuf>,
    /// FNV-1a of the node's name ([`GpuSource::name_host`]), in the UUIDs once set.
    host: std::sync::OnceLock<u64>,
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
            mig: Mutex::new(BTreeSet::new()),
            faults: Mutex::new(BTreeMap::new()),
            health_file: None,
            host: std::sync::OnceLock::new(),
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

    /// Puts GPU `index` in MIG mode (`on`) or out of it: attested `mig_mode`, and unhealthy
    /// ([`MIG_ENABLED`]) while on.
    pub fn set_mig(&self, index: u32, on: bool) {
        let mut mig = self.mig.lock().unwrap_or_else(PoisonError::into_inner);
        if on {
            mig.insert(index);
        } else {
            mig.remove(&index);
        }
    }

    /// What the NVML checks of a verification find on GPU `index` from now on.
    pub fn set_faults(&self, index: u32, faults: Vec<NvmlFaultDto>) {
        self.faults
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(index, faults);
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
    fn faults(&self, index: u32) -> Result<Vec<NvmlFaultDto>, AgentError> {
        Ok(self
            .faults
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&index)
            .cloned()
            .unwrap_or_default())
    }

    fn name_host(&self, name: &str) {
        // FNV-1a, 64 bits: deterministic across runs and builds.
        let h = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        let _ = self.host.set(h);
    }

    fn discover(&self) -> Result<Discovery, AgentError> {
        let mut marks = self.file_marks()?;
        marks.extend(self.marks().clone());
        let model = MODEL_SKUS.iter().find(|m| m.sku == self.sku);
        let mig = self
            .mig
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let gpus = (0..self.count)
            .map(|index| {
                let problem = marks.get(&index).cloned();
                GpuInfo {
                    index,
                    uuid: match self.host.get() {
                        Some(h) => format!("GPU-sim-{}-{h:016x}-{index}", self.sku),
                        None => format!("GPU-sim-{}-{index}", self.sku),
                    },
                    name: model.map_or_else(
                        || format!("Simulated {}", self.sku),
                        |m| m.example_name.to_string(),
                    ),
                    memory_mib: model.map_or(0, |m| m.example_memory_mib),
                    healthy: problem.is_none(),
                    problem,
                    // Every simulated GPU: PCIe gen 5 x16, MIG off (attested, never judged).
                    link: GpuLink {
                        pcie_gen: Some(5),
                        pcie_width: Some(16),
                        pcie_max_gen: Some(5),
                        pcie_max_width: Some(16),
                        mig_mode: Some(mig.contains(&index)),
                        nvlink_links: None,
                    },
                }
            })
            .map(|mut g| {
                mark_mig(&mut g);
                g
            })
            .collect();
        Ok(Discovery {
            driver_version: "simulated".into(),
            cuda_version: "simulated".into(),
            sku: Some(self.sku.clone()),
            gpus,
            nics: Vec::new(),
            host: host_size(),
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
            link: GpuLink::default(),
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
        // Host facts, not health: a call the GPU does not support leaves the fact unsaid.
        info.link = GpuLink {
            pcie_gen: device.current_pcie_link_gen().ok(),
            pcie_width: device.current_pcie_link_width().ok(),
            pcie_max_gen: device.max_pcie_link_gen().ok(),
            pcie_max_width: device.max_pcie_link_width().ok(),
            // NVML_DEVICE_MIG_ENABLE = 1.
            mig_mode: device.mig_mode().ok().map(|m| m.current == 1),
            nvlink_links: nvlink_active(&device),
        };
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
        mark_mig(&mut info);
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
        // 12040 → "12.4"; an old driver without the call: unknown.
        let cuda_version = self
            .nvml
            .sys_cuda_driver_version()
            .map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10))
            .unwrap_or_default();
        let gpus = (0..count).map(|i| self.probe(i)).collect();
        let mut d = Discovery::recognized(driver_version, cuda_version, gpus);
        d.nics = host_nics(Path::new(SYS_CLASS_NET));
        d.host = host_size();
        Ok(d)
    }

    fn faults(&self, index: u32) -> Result<Vec<NvmlFaultDto>, AgentError> {
        let device = self
            .nvml
            .device_by_index(index)
            .map_err(|e| AgentError::Nvml {
                call: "nvmlDeviceGetHandleByIndex",
                detail: nvml_text(&e),
            })?;
        // A call the GPU does not support checks nothing (`ok()`).
        let consumer = matches!(device.brand(), Ok(Brand::GeForce | Brand::Titan))
            || device.name().is_ok_and(|n| n.contains("GeForce"));
        let checks = NvmlChecks {
            pcie: (
                device.current_pcie_link_gen().ok(),
                device.max_pcie_link_gen().ok(),
                device.current_pcie_link_width().ok(),
                device.max_pcie_link_width().ok(),
            ),
            ecc_enabled: device.is_ecc_enabled().ok().map(|e| e.currently_enabled),
            datacenter: !consumer,
            power_limit_mw: device.enforced_power_limit().ok(),
            default_power_limit_mw: device.power_management_limit_default().ok(),
            throttle_reasons: device.current_throttle_reasons().ok().map(|r| r.bits()),
        };
        Ok(checks.faults())
    }
}

/// What the NVML checks of a verification read from one GPU (issue 26, docs/market-rules.md
/// §12.2); `None` where NVML does not say (that check then finds nothing).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NvmlChecks {
    /// PCIe (current gen, max gen, current width, max width).
    pub pcie: (Option<u32>, Option<u32>, Option<u32>, Option<u32>),
    /// ECC mode now.
    pub ecc_enabled: Option<bool>,
    /// A datacenter GPU (not GeForce or Titan): ECC off is a fault only there.
    pub datacenter: bool,
    /// Enforced power limit, mW.
    pub power_limit_mw: Option<u32>,
    /// Default power limit, mW.
    pub default_power_limit_mw: Option<u32>,
    /// `nvmlDeviceGetCurrentClocksThrottleReasons` bits.
    pub throttle_reasons: Option<u64>,
}

/// Enforced power limit this far below the default, percent, or more: `power_capped`.
pub const POWER_CAP_TOLERANCE_PCT: u64 = 5;

impl NvmlChecks {
    /// The faults these readings show: the PCIe link below the generation or width GPU and
    /// slot support (read under the checks' load: an idle GPU may train its link down, so the
    /// verification runs them after the hook); ECC off on a datacenter GPU; the enforced
    /// power limit more than [`POWER_CAP_TOLERANCE_PCT`] % below the default; clocks held down
    /// by a hardware slowdown, thermal slowdown or power brake (not idle, not a software
    /// power cap at full load, not application clocks).
    pub fn faults(&self) -> Vec<NvmlFaultDto> {
        let mut out = Vec::new();
        let below =
            |now: Option<u32>, max: Option<u32>| matches!((now, max), (Some(n), Some(m)) if n < m);
        let (gen_now, gen_max, width_now, width_max) = self.pcie;
        if below(gen_now, gen_max) || below(width_now, width_max) {
            out.push(NvmlFaultDto::PcieLinkBelowMax);
        }
        if self.datacenter && self.ecc_enabled == Some(false) {
            out.push(NvmlFaultDto::EccOff);
        }
        if let (Some(limit), Some(default)) = (self.power_limit_mw, self.default_power_limit_mw)
            && u64::from(limit) * 100 < u64::from(default) * (100 - POWER_CAP_TOLERANCE_PCT)
        {
            out.push(NvmlFaultDto::PowerCapped);
        }
        let slow = (ThrottleReasons::HW_SLOWDOWN
            | ThrottleReasons::HW_THERMAL_SLOWDOWN
            | ThrottleReasons::SW_THERMAL_SLOWDOWN
            | ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN)
            .bits();
        if self.throttle_reasons.is_some_and(|r| r & slow != 0) {
            out.push(NvmlFaultDto::Throttled);
        }
        out
    }
}

/// Where Linux lists network interfaces.
pub const SYS_CLASS_NET: &str = "/sys/class/net";

/// The host's physical network interfaces under `dir` (`/sys/class/net`) with their link
/// speed, Gb/s (`speed` is Mb/s; a link down reads -1 or fails: skipped), by name: loopback
/// and virtual interfaces (no `device` link: bridges, veth, docker, tunnels) are skipped, and
/// so are names the wire refuses. At most [`gpux_wire::MAX_NICS`].
pub fn host_nics(dir: &Path) -> Vec<gpux_wire::NicDto> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut nics: Vec<gpux_wire::NicDto> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            let path = e.path();
            if name == "lo" || !path.join("device").exists() {
                return None;
            }
            let ok_name = !name.is_empty()
                && name.len() <= gpux_wire::MAX_NIC_NAME_LEN
                && name.bytes().all(|b| b.is_ascii_graphic());
            let mbps: i64 = std::fs::read_to_string(path.join("speed"))
                .ok()?
                .trim()
                .parse()
                .ok()?;
            let gbps = u32::try_from(mbps / 1000).ok()?;
            (ok_name && gbps > 0 && gbps <= gpux_wire::MAX_NIC_GBPS)
                .then_some(gpux_wire::NicDto { name, gbps })
        })
        .collect();
    nics.sort_by(|a, b| a.name.cmp(&b.name));
    nics.truncate(gpux_wire::MAX_NICS);
    nics
}

/// The problem of a GPU in MIG mode: it is not a whole GPU, so it is not listed as one
/// (issue 26, docs/market-rules.md §12.1): reported in `unhealthy_gpus` with this reason.
pub const MIG_ENABLED: &str = "mig_enabled";

/// Marks a GPU in MIG mode unhealthy with [`MIG_ENABLED`] (before any other problem).
fn mark_mig(g: &mut GpuInfo) {
    if g.link.mig_mode == Some(true) {
        g.healthy = false;
        g.problem = Some(match g.problem.take() {
            Some(p) => format!("{MIG_ENABLED}; {p}"),
            None => MIG_ENABLED.to_string(),
        });
    }
}

/// Active NVLink links of `device` (`nvmlDeviceGetNvLinkState` on links
/// `0..`[`gpux_wire::MAX_NVLINK_LINKS`]); `None` when no link answers (no NVLink).
fn nvlink_active(device: &nvml_wrapper::Device<'_>) -> Option<u32> {
    let states: Vec<bool> = (0..gpux_wire::MAX_NVLINK_LINKS)
        .filter_map(|l| device.link_wrapper_for(l).is_active().ok())
        .collect();
    (!states.is_empty()).then(|| u32::try_from(states.iter().filter(|a| **a).count()).unwrap_or(0))
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
            link: GpuLink::default(),
        }
    }

    #[test]
    fn node_sku_is_the_override_else_the_one_recognized_model_else_an_error() {
        let h100 = Discovery::recognized(
            "550.54.15".into(),
            "12.4".into(),
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
            "12.4".into(),
            vec![
                gpu(0, "NVIDIA H100 80GB HBM3", 81_559),
                gpu(1, "NVIDIA A100-SXM4-80GB", 81_920),
            ],
        );
        assert_eq!(mixed.sku, None);
        let err = mixed.node_sku(None).unwrap_err();
        assert!(matches!(&err, AgentError::UnknownModel { models } if models.len() == 2));
        assert!(err.to_string().contains("set `sku` in the config"), "{err}");
        let unknown = Discovery::recognized(
            "1".into(),
            String::new(),
            vec![gpu(0, "NVIDIA L40S", 46_068)],
        );
        assert!(
            unknown
                .node_sku(None)
                .unwrap_err()
                .to_string()
                .contains("NVIDIA L40S")
        );
        assert_eq!(unknown.node_sku(Some("L40S-48G")).unwrap(), "L40S-48G");
    }

    /// Issue 26: the attestation carries every GPU as found, and only a complete discovery;
    /// the unhealthy list carries index, UUID and problem within the wire's limits.
    #[test]
    fn attestation_and_unhealthy_gpus_from_a_discovery() {
        let sim = SimulatedGpus::parse("H100-80G:4").unwrap();
        sim.name_host("rack-1");
        sim.set_unhealthy(2, "XID 79\nfallen off the bus");
        let d = sim.discover().unwrap();
        let a = d.attestation().expect("complete");
        assert_eq!(a.gpus.len(), 4);
        assert_eq!(a.gpus[1].model, "NVIDIA H100 80GB HBM3");
        assert_eq!(a.gpus[1].memory_mib, 81_559);
        assert_eq!(
            (a.gpus[1].pcie_gen, a.gpus[1].pcie_max_width),
            (Some(5), Some(16))
        );
        assert_eq!(a.gpus[1].mig_mode, Some(false));
        assert!(
            a.gpus[1].uuid.starts_with("GPU-sim-H100-80G-"),
            "{}",
            a.gpus[1].uuid
        );
        assert!(a.gpus[1].uuid.len() <= gpux_wire::MAX_GPU_UUID_LEN);
        // Deterministic per host name, different across hosts.
        let again = SimulatedGpus::parse("H100-80G:4").unwrap();
        again.name_host("rack-1");
        assert_eq!(again.discover().unwrap().gpus[1].uuid, a.gpus[1].uuid);
        let other = SimulatedGpus::parse("H100-80G:4").unwrap();
        other.name_host("rack-2");
        assert_ne!(other.discover().unwrap().gpus[1].uuid, a.gpus[1].uuid);
        let u = d.unhealthy_gpus(4);
        assert_eq!(u.len(), 1);
        assert_eq!(u[0].index, 2);
        assert_eq!(u[0].uuid.as_deref(), Some(d.gpus[2].uuid.as_str()));
        assert_eq!(u[0].reason.as_deref(), Some("XID 79fallen off the bus"));
        assert!(d.unhealthy_gpus(2).is_empty(), "GPU 2 is not the node's");
        let missing = d.unhealthy_gpus(6);
        assert_eq!(
            missing.iter().map(|g| g.index).collect::<Vec<_>>(),
            [2, 4, 5]
        );
        assert_eq!(missing[1].reason.as_deref(), Some("not found on the host"));
        // A GPU that did not answer with its UUID: no attestation this time.
        let mut lost = d.clone();
        lost.gpus[3].uuid.clear();
        assert!(lost.attestation().is_none());
        // The host's size rides along: a simulated host reports the machine it runs on.
        assert_eq!(d.host, host_size());
        assert_eq!(
            (a.cpu_cores, a.ram_mib, a.disk_gb),
            (d.host.cpu_cores, d.host.ram_mib, d.host.disk_gb)
        );
    }

    /// Issue 26: the host's size from the OS (this Linux machine has CPUs, RAM and a `/`), and
    /// the figures kept within the wire's bounds.
    #[test]
    fn host_size_is_measured_and_bounded() {
        let h = host_size();
        let cores = h.cpu_cores.expect("a Linux host says its CPUs");
        assert!((1..=gpux_wire::MAX_CPU_CORES).contains(&cores));
        let std_cores = std::thread::available_parallelism().map_or(0, |n| n.get());
        assert!(cores as usize >= std_cores, "{cores} < {std_cores}");
        let ram = h.ram_mib.expect("a Linux host says its RAM");
        assert!(ram >= 64, "{ram} MiB");
        assert_eq!(
            HostSize::from_raw(64, 1_031_891 * 1024 * 1024, Some(3_840_000_000_000)),
            HostSize {
                cpu_cores: Some(64),
                ram_mib: Some(1_031_891),
                disk_gb: Some(3_840),
            }
        );
        assert_eq!(
            HostSize::from_raw(0, 1024, Some(0)),
            HostSize::default(),
            "nothing, under 1 MiB, an empty disk: not said"
        );
        assert_eq!(HostSize::from_raw(5_000, 0, None).cpu_cores, None);
        // The filesystem holding a path: the deepest mount above it.
        let mounts = [
            (Path::new("/"), 100),
            (Path::new("/var"), 200),
            (Path::new("/var/lib/gpux"), 300),
            (Path::new("/var/lib/gpux-other"), 400),
        ];
        assert_eq!(disk_holding(Path::new("/"), mounts), Some(100));
        assert_eq!(disk_holding(Path::new("/var/log"), mounts), Some(200));
        assert_eq!(
            disk_holding(Path::new("/var/lib/gpux/state"), mounts),
            Some(300)
        );
        assert_eq!(disk_holding(Path::new("/srv"), mounts[1..].to_vec()), None);
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
