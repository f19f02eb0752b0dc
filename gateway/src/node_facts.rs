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
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct HostFacts {
    /// Driver version (empty: unknown).
    pub driver_version: String,
    /// CUDA version (empty: unknown).
    pub cuda_version: String,
    /// Every GPU found, indexes strictly increasing.
    pub gpus: Vec<GpuFacts>,
    /// Network interfaces.
    pub nics: Vec<Nic>,
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

    #[test]
    fn mask_is_all_gpus_but_the_unhealthy() {
        assert_eq!(healthy_mask(8, [5]), 0b1101_1111);
        assert_eq!(healthy_mask(8, []), 0xff);
        assert_eq!(healthy_mask(16, [0, 15]), 0x7ffe);
        assert_eq!(healthy_mask(4, [9]), 0xf);
    }
}
