//! The SKU catalog: data, not code.
//!
//! The default catalog is `data/gpu-price-list.csv` (copied from the project's shared reference
//! data, prices quoted in the market write-ups in `shared/seeds/`), embedded at compile time.
//! A [`SkuId`] is the row index, so the catalog's row order is part of the engine's state.

use crate::ids::SkuId;
use crate::price::Price;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use std::str::FromStr;

/// The reference price list shipped with the project (CSV with header
/// `sku,vendor,gpu_memory_gb,class,on_demand_cny_per_gpu_hour,preemptible_cny_per_gpu_hour,source`).
pub const BUILTIN_CATALOG_CSV: &str = include_str!("../../data/gpu-price-list.csv");

/// Most SKUs a catalog may hold.
pub const MAX_SKUS: usize = 256;

/// One GPU model that can be traded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sku {
    /// Id such as `H100-80G` or `RTX4090-24G` (ASCII letters, digits, `-`, `.`, `_`; ≤ 32).
    pub id: String,
    /// Vendor, e.g. `NVIDIA`, `Huawei`.
    pub vendor: String,
    /// GPU memory in GB.
    pub gpu_memory_gb: u32,
    /// `consumer` or `datacenter`.
    pub class: String,
    /// Reference on-demand (spot) price, CNY per GPU-hour, if the sources quote one.
    pub reference_spot: Option<Price>,
    /// Reference preemptible price, CNY per GPU-hour, if the sources quote one.
    pub reference_preemptible: Option<Price>,
}

/// The list of tradable SKUs. Row order defines [`SkuId`]s.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Catalog {
    skus: Vec<Sku>,
}

/// Why a catalog CSV was refused.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// The CSV could not be parsed.
    #[error("catalog CSV: {0}")]
    Csv(#[from] csv::Error),
    /// A row holds an invalid value.
    #[error("catalog row {row}: {message}")]
    Row {
        /// 1-based data row number.
        row: usize,
        /// What is wrong.
        message: String,
    },
    /// The catalog is empty or too large.
    #[error("catalog must hold 1..={MAX_SKUS} SKUs, found {0}")]
    Size(usize),
}

#[derive(Deserialize)]
struct Row {
    sku: String,
    vendor: String,
    gpu_memory_gb: u32,
    class: String,
    on_demand_cny_per_gpu_hour: String,
    preemptible_cny_per_gpu_hour: String,
}

fn parse_price(row: usize, s: &str) -> Result<Option<Price>, CatalogError> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    let d = Decimal::from_str(s).map_err(|e| CatalogError::Row {
        row,
        message: format!("price {s:?}: {e}"),
    })?;
    Price::from_decimal(d)
        .map(Some)
        .map_err(|e| CatalogError::Row {
            row,
            message: format!("price {s:?}: {e}"),
        })
}

/// True for a valid SKU id: 1..=32 ASCII letters, digits, `-`, `.` or `_`.
pub fn valid_sku_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 32
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
}

impl Catalog {
    /// Parses a catalog from CSV text in the format of [`BUILTIN_CATALOG_CSV`].
    ///
    /// # Errors
    /// [`CatalogError`] on malformed CSV, an invalid SKU id or price, a duplicate SKU, or a
    /// catalog with 0 or more than [`MAX_SKUS`] rows.
    pub fn from_csv(text: &str) -> Result<Catalog, CatalogError> {
        let mut reader = csv::Reader::from_reader(text.as_bytes());
        let mut skus: Vec<Sku> = Vec::new();
        for (i, row) in reader.deserialize::<Row>().enumerate() {
            let row_no = i + 1;
            let row = row?;
            if !valid_sku_id(&row.sku) {
                return Err(CatalogError::Row {
                    row: row_no,
                    message: format!("invalid SKU id {:?}", row.sku),
                });
            }
            if skus.iter().any(|s| s.id == row.sku) {
                return Err(CatalogError::Row {
                    row: row_no,
                    message: format!("duplicate SKU {:?}", row.sku),
                });
            }
            skus.push(Sku {
                reference_spot: parse_price(row_no, &row.on_demand_cny_per_gpu_hour)?,
                reference_preemptible: parse_price(row_no, &row.preemptible_cny_per_gpu_hour)?,
                id: row.sku,
                vendor: row.vendor,
                gpu_memory_gb: row.gpu_memory_gb,
                class: row.class,
            });
        }
        if skus.is_empty() || skus.len() > MAX_SKUS {
            return Err(CatalogError::Size(skus.len()));
        }
        Ok(Catalog { skus })
    }

    /// The catalog embedded from `data/gpu-price-list.csv`.
    pub fn builtin() -> Catalog {
        #[allow(clippy::expect_used)]
        Catalog::from_csv(BUILTIN_CATALOG_CSV).expect("the embedded catalog is valid (tested)")
    }

    /// Looks a SKU up by its id (e.g. `"H100-80G"`).
    pub fn lookup(&self, id: &str) -> Option<SkuId> {
        self.skus
            .iter()
            .position(|s| s.id == id)
            .map(|i| SkuId(i as u16))
    }

    /// The SKU with this id, if it exists.
    pub fn get(&self, id: SkuId) -> Option<&Sku> {
        self.skus.get(usize::from(id.0))
    }

    /// Number of SKUs.
    pub fn len(&self) -> usize {
        self.skus.len()
    }

    /// Always false: a catalog holds at least one SKU.
    pub fn is_empty(&self) -> bool {
        self.skus.is_empty()
    }

    /// All SKUs with their ids, in id order.
    pub fn iter(&self) -> impl Iterator<Item = (SkuId, &Sku)> {
        self.skus
            .iter()
            .enumerate()
            .map(|(i, s)| (SkuId(i as u16), s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_catalog_holds_the_reference_prices() {
        let c = Catalog::builtin();
        assert_eq!(c.len(), 11);
        let h100 = c.get(c.lookup("H100-80G").unwrap()).unwrap();
        assert_eq!(h100.reference_spot.unwrap().to_string(), "22.5000");
        assert_eq!(h100.reference_preemptible, None);
        let r4090 = c.get(c.lookup("RTX4090-24G").unwrap()).unwrap();
        assert_eq!(r4090.reference_preemptible.unwrap().to_string(), "1.1900");
        assert_eq!(r4090.gpu_memory_gb, 24);
        assert_eq!(c.lookup("H100-80GB"), None);
    }

    #[test]
    fn rejects_duplicates_and_bad_prices() {
        let head = "sku,vendor,gpu_memory_gb,class,on_demand_cny_per_gpu_hour,preemptible_cny_per_gpu_hour,source\n";
        let dup = format!("{head}A,N,1,c,1,,x\nA,N,1,c,1,,x\n");
        assert!(matches!(
            Catalog::from_csv(&dup),
            Err(CatalogError::Row { row: 2, .. })
        ));
        let bad = format!("{head}A,N,1,c,1.00001,,x\n");
        assert!(matches!(
            Catalog::from_csv(&bad),
            Err(CatalogError::Row { row: 1, .. })
        ));
        assert!(matches!(
            Catalog::from_csv(head),
            Err(CatalogError::Size(0))
        ));
    }
}
