//! The GPU model table (issue 26: moved here from `gpux-agent` so the exchange and the agent
//! share it): which catalog SKU a GPU is, from the model name and memory NVML reports. The
//! agent uses it to find its node's SKU; the engine uses it to check an attestation
//! (docs/market-rules.md §12.1).
//!
//! Invariant: every row's `sku` is an id of the builtin catalog (`data/gpu-price-list.csv`),
//! and its memory matches the catalog's `gpu_memory_gb` (tested).

/// Tolerance of the memory check in [`sku_for_model`], percent of the nominal size: NVML reports
/// what the driver can use (an "80 GB" H100 shows 81,559 MiB, an H100 NVL 95,830 MiB).
pub const MEMORY_TOLERANCE_PCT: u64 = 8;

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
    let tokens = tokens(name);
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

/// Whether some row's family appears in `name` (the model is one the table knows, whatever
/// its memory): an attested GPU of an unknown model is refused, one of a known model with the
/// wrong memory is a mismatch (§12.1).
pub fn known_family(name: &str) -> bool {
    let tokens = tokens(name);
    MODEL_SKUS.iter().any(|m| family_matches(&tokens, m.family))
}

fn tokens(name: &str) -> Vec<String> {
    name.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_ascii_uppercase)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Catalog;

    #[test]
    fn every_row_names_a_catalog_sku_of_its_memory() {
        let catalog = Catalog::builtin();
        for m in MODEL_SKUS {
            let sku = catalog.lookup(m.sku).and_then(|id| catalog.get(id));
            let sku = sku.unwrap_or_else(|| panic!("{} is not in the catalog", m.sku));
            assert_eq!(u64::from(sku.gpu_memory_gb), m.memory_gb, "{}", m.sku);
            assert_eq!(
                sku_for_model(m.example_name, m.example_memory_mib),
                Some(m.sku)
            );
            assert!(known_family(m.example_name));
        }
    }

    #[test]
    fn memory_and_variants_decide() {
        assert_eq!(
            sku_for_model("NVIDIA H100 80GB HBM3", 81_559),
            Some("H100-80G")
        );
        // An H100 NVL (94 GB) is not an H100-80G, but its family is known.
        assert_eq!(sku_for_model("NVIDIA H100 NVL", 95_830), None);
        assert!(known_family("NVIDIA H100 NVL"));
        assert_eq!(sku_for_model("NVIDIA GeForce RTX 4090 D", 24_564), None);
        assert!(!known_family("Tesla T4"));
    }
}
