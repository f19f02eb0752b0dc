//! What node agents report of their hosts beyond what the engine checks (issue 26): the host
//! facts of an attestation (driver and CUDA versions, per-GPU PCIe link and MIG mode, NICs)
//! and the reasons of unhealthy GPUs. Journaled with the engine commands they ride on
//! ([`crate::market::Op::AttestNode`], [`crate::market::Op::GpuHealth`]), kept in the market
//! for the node view (part of its snapshot and state hash when not empty). A leaf: imports
//! nothing from `api`, `feed` or `server`.

use serde::{Deserialize, Serialize};

/// One GPU of an attestation: what the engine checks (index, UUID, model, memory) and what
/// only the node view shows (PCIe link, MIG mode).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GpuFacts {
    /// GPU index, 0..16.
    pub index: u32,
    /// UUID as NVML reports it.
    pub uuid: String,
    /// Model name as NVML reports it.
    pub model: String,
    /// Memory, MiB.
    pub memory_mib: u32,
    /// PCIe generation now.
    pub pcie_gen: Option<u32>,
    /// PCIe lanes now.
    pub pcie_width: Option<u32>,
    /// Highest PCIe generation supported.
    pub pcie_max_gen: Option<u32>,
    /// Widest PCIe link supported, lanes.
    pub pcie_max_width: Option<u32>,
    /// MIG mode enabled.
    pub mig_mode: Option<bool>,
}

/// A network interface of an attested host.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Nic {
    /// Interface name.
    pub name: String,
    /// Link speed, Gb/s.
    pub gbps: u32,
}

/// Everything an attestation reported (validated at the edge: `api::dto::AttestationOf`).
///
/// Encoding: journaled inside `Op::AttestNode` (rmp_serde, structs as arrays) and kept in the
/// market's snapshot and state hash (structs as maps). The host size (`cpu_cores`, `ram_mib`,
/// `disk_gb`) was appended later, each `#[serde(default)]`: an older record — a shorter array,
/// a map without the keys — decodes with `None`. [`Serialize`] writes the appended fields only
/// up to the last one that is set (positions stay right in an array), so facts without them
/// keep their bytes, and snapshots and state hashes of before stay valid.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
pub struct HostFacts {
    /// Driver version (empty: unknown).
    pub driver_version: String,
    /// CUDA version (empty: unknown).
    pub cuda_version: String,
    /// Every GPU found, indexes strictly increasing.
    pub gpus: Vec<GpuFacts>,
    /// Network interfaces.
    pub nics: Vec<Nic>,
    /// Logical CPU cores (`None`: not reported).
    #[serde(default)]
    pub cpu_cores: Option<u32>,
    /// Total RAM, MiB (`None`: not reported).
    #[serde(default)]
    pub ram_mib: Option<u64>,
    /// Disk size, GB of 10^9 bytes (`None`: not reported).
    #[serde(default)]
    pub disk_gb: Option<u32>,
}

impl Serialize for HostFacts {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        // How many of the appended fields to write: up to the last one set.
        let appended = if self.disk_gb.is_some() {
            3
        } else if self.ram_mib.is_some() {
            2
        } else {
            usize::from(self.cpu_cores.is_some())
        };
        let mut st = s.serialize_struct("HostFacts", 4 + appended)?;
        st.serialize_field("driver_version", &self.driver_version)?;
        st.serialize_field("cuda_version", &self.cuda_version)?;
        st.serialize_field("gpus", &self.gpus)?;
        st.serialize_field("nics", &self.nics)?;
        if appended >= 1 {
            st.serialize_field("cpu_cores", &self.cpu_cores)?;
        }
        if appended >= 2 {
            st.serialize_field("ram_mib", &self.ram_mib)?;
        }
        if appended >= 3 {
            st.serialize_field("disk_gb", &self.disk_gb)?;
        }
        st.end()
    }
}

impl HostFacts {
    /// The engine's view of the GPUs (what §12.1 checks).
    pub fn attested_gpus(&self) -> Vec<exchange::AttestedGpu> {
        self.gpus
            .iter()
            .map(|g| exchange::AttestedGpu {
                index: g.index,
                uuid: g.uuid.clone(),
                model: g.model.clone(),
                memory_mib: g.memory_mib,
            })
            .collect()
    }
}

/// One GPU a heartbeat reported unhealthy, with what the agent said of it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GpuProblem {
    /// GPU index.
    pub index: u32,
    /// Its UUID, when the agent gave it.
    pub uuid: Option<String>,
    /// Why, when the agent said.
    pub reason: Option<String>,
}

/// Healthy mask of a node of `gpus` GPUs with the GPUs `unhealthy` failed: bit i = GPU i
/// healthy (docs/market-rules.md §12.1). Indexes at or above `gpus` (or 32) are ignored: the
/// edge refuses them first.
pub fn healthy_mask(gpus: u32, unhealthy: impl IntoIterator<Item = u32>) -> u32 {
    let all = if gpus >= 32 {
        u32::MAX
    } else {
        (1u32 << gpus) - 1
    };
    unhealthy
        .into_iter()
        .filter(|i| *i < 32)
        .fold(all, |m, i| m & !(1u32 << i))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> HostFacts {
        HostFacts {
            driver_version: "550.54.15".into(),
            cuda_version: "12.4".into(),
            gpus: vec![GpuFacts {
                index: 0,
                uuid: "GPU-a".into(),
                model: "NVIDIA H100 80GB HBM3".into(),
                memory_mib: 81_559,
                pcie_gen: Some(5),
                pcie_width: Some(16),
                pcie_max_gen: None,
                pcie_max_width: None,
                mig_mode: Some(false),
            }],
            nics: vec![Nic {
                name: "mlx5_0".into(),
                gbps: 400,
            }],
            ..HostFacts::default()
        }
    }

    /// The facts as the first issue-26 build wrote them (no host size).
    #[derive(Serialize)]
    struct Before<'a> {
        driver_version: &'a str,
        cuda_version: &'a str,
        gpus: &'a [GpuFacts],
        nics: &'a [Nic],
    }

    #[test]
    fn host_size_is_appended_and_old_records_keep_their_bytes() {
        let old = facts();
        let before = Before {
            driver_version: &old.driver_version,
            cuda_version: &old.cuda_version,
            gpus: &old.gpus,
            nics: &old.nics,
        };
        // Without a host size: the same bytes as before, as arrays (journal) and maps (hash).
        assert_eq!(
            rmp_serde::to_vec(&old).unwrap(),
            rmp_serde::to_vec(&before).unwrap()
        );
        assert_eq!(
            rmp_serde::to_vec_named(&old).unwrap(),
            rmp_serde::to_vec_named(&before).unwrap()
        );
        // Old records decode with no host size.
        let back: HostFacts = rmp_serde::from_slice(&rmp_serde::to_vec(&before).unwrap()).unwrap();
        assert_eq!(back, old);
        let back: HostFacts =
            rmp_serde::from_slice(&rmp_serde::to_vec_named(&before).unwrap()).unwrap();
        assert_eq!(back, old);
        // Every combination round-trips both ways, positions kept.
        for (cpu, ram, disk) in [
            (Some(64), Some(1_031_891), Some(3_840)),
            (None, Some(515_000), None),
            (None, None, Some(2_000)),
            (Some(8), None, None),
        ] {
            let f = HostFacts {
                cpu_cores: cpu,
                ram_mib: ram,
                disk_gb: disk,
                ..facts()
            };
            let a: HostFacts = rmp_serde::from_slice(&rmp_serde::to_vec(&f).unwrap()).unwrap();
            let m: HostFacts =
                rmp_serde::from_slice(&rmp_serde::to_vec_named(&f).unwrap()).unwrap();
            assert_eq!((a, m), (f.clone(), f));
        }
    }

    #[test]
    fn mask_is_all_gpus_but_the_unhealthy() {
        assert_eq!(healthy_mask(8, [5]), 0b1101_1111);
        assert_eq!(healthy_mask(8, []), 0xff);
        assert_eq!(healthy_mask(16, [0, 15]), 0x7ffe);
        assert_eq!(healthy_mask(4, [9]), 0xf);
    }
}
