//! The seeded scenario: suppliers with fleets across the catalog's SKUs and regions, prices
//! spread around the reference price list, buyers with their SKUs of interest. Everything is
//! derived from the seed, so two runs with the same seed build the same market.

use exchange::Catalog;
use gpux_client::wire::InterconnectDto;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rust_decimal::Decimal;

/// Regions of the scenario (the seeds name East, North and South China clusters).
pub const REGIONS: [&str; 4] = ["cn-east-2", "cn-north-1", "cn-south-1", "cn-southwest-1"];

/// One node of a supplier's fleet.
#[derive(Clone, Debug)]
pub struct NodePlan {
    /// Name, unique per supplier.
    pub name: String,
    /// SKU id.
    pub sku: String,
    /// GPUs, 1..=8.
    pub gpus: u32,
    /// Region.
    pub region: String,
    /// Fabric.
    pub interconnect: InterconnectDto,
    /// Spot price, CNY per GPU-hour (4 decimals).
    pub spot: Decimal,
    /// Preemptible price, CNY per GPU-hour.
    pub preemptible: Decimal,
    /// This node fails (stops heartbeating) during the run and comes back.
    pub flaky: bool,
}

/// A supplier (IDC or enterprise cluster) and its fleet.
#[derive(Clone, Debug)]
pub struct SupplierPlan {
    /// Account name.
    pub name: String,
    /// Nodes.
    pub nodes: Vec<NodePlan>,
}

/// A buyer and the SKUs it trades.
#[derive(Clone, Debug)]
pub struct BuyerPlan {
    /// Account name.
    pub name: String,
    /// SKUs it subscribes to and bids on.
    pub skus: Vec<String>,
}

/// The whole scenario.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Suppliers.
    pub suppliers: Vec<SupplierPlan>,
    /// Buyers.
    pub buyers: Vec<BuyerPlan>,
    /// SKUs traded (those with a reference spot price).
    pub skus: Vec<String>,
}

/// Builds the scenario from the catalog's reference prices.
///
/// Prices: reference spot × U(0.85, 1.20); preemptible at the list's preemptible/spot ratio
/// (0.6 for the RTX 4090 row) or 0.65 when the list has none, × U(0.9, 1.1), kept below spot.
/// Fleets: 1–8-GPU nodes (8-GPU for datacenter SKUs mostly), `flaky_share` of them fail once.
pub fn build(
    seed: u64,
    suppliers: usize,
    nodes_per_supplier: usize,
    buyers: usize,
    flaky_share: f64,
) -> Scenario {
    let mut rng = StdRng::seed_from_u64(seed);
    let catalog = Catalog::builtin();
    let priced: Vec<(String, Decimal, Option<Decimal>, bool)> = catalog
        .iter()
        .filter_map(|(_, s)| {
            s.reference_spot.map(|p| {
                (
                    s.id.clone(),
                    p.to_decimal(),
                    s.reference_preemptible.map(|q| q.to_decimal()),
                    s.class == "datacenter",
                )
            })
        })
        .collect();
    let skus: Vec<String> = priced.iter().map(|p| p.0.clone()).collect();
    let mut out = Vec::new();
    for s in 0..suppliers {
        let kind = if s % 3 == 2 { "ent" } else { "idc" };
        let home = REGIONS[s % REGIONS.len()];
        let mut nodes = Vec::new();
        for n in 0..nodes_per_supplier {
            let (sku, spot_ref, pre_ref, dc) = &priced[rng.random_range(0..priced.len())];
            let gpus = if *dc || rng.random_bool(0.5) {
                8
            } else {
                [1u32, 2, 4, 8][rng.random_range(0..4)]
            };
            let factor = Decimal::new(rng.random_range(85..=120), 2);
            let spot = (spot_ref * factor).round_dp(2).max(Decimal::new(1, 2));
            let ratio = pre_ref.map_or(Decimal::new(65, 2), |p| p / spot_ref);
            let jitter = Decimal::new(rng.random_range(90..=110), 2);
            let pre = (spot * ratio * jitter)
                .round_dp(2)
                .min(spot - Decimal::new(1, 2))
                .max(Decimal::new(1, 2));
            let region = if rng.random_bool(0.7) {
                home
            } else {
                REGIONS[rng.random_range(0..REGIONS.len())]
            };
            nodes.push(NodePlan {
                name: format!("{kind}{s}-n{n}"),
                sku: sku.clone(),
                gpus,
                region: region.to_string(),
                interconnect: if *dc {
                    InterconnectDto::Infiniband
                } else {
                    InterconnectDto::Pcie
                },
                spot,
                preemptible: pre,
                flaky: rng.random_bool(flaky_share),
            });
        }
        out.push(SupplierPlan {
            name: format!("lt-{kind}-{s}"),
            nodes,
        });
    }
    let buyers = (0..buyers)
        .map(|b| {
            let mut mine: Vec<String> = skus
                .iter()
                .filter(|_| rng.random_bool(0.5))
                .cloned()
                .collect();
            if mine.is_empty() {
                mine.push(skus[b % skus.len()].clone());
            }
            BuyerPlan {
                name: format!("lt-buyer-{b}"),
                skus: mine,
            }
        })
        .collect();
    Scenario {
        suppliers: out,
        buyers,
        skus,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_prices_stay_around_the_reference_and_below_spot() {
        let a = build(7, 6, 10, 4, 0.1);
        let b = build(7, 6, 10, 4, 0.1);
        assert_eq!(format!("{:?}", a.suppliers), format!("{:?}", b.suppliers));
        let catalog = Catalog::builtin();
        for n in a.suppliers.iter().flat_map(|s| &s.nodes) {
            let r = catalog
                .get(catalog.lookup(&n.sku).unwrap())
                .unwrap()
                .reference_spot
                .unwrap()
                .to_decimal();
            assert!(
                n.spot >= r * Decimal::new(84, 2) && n.spot <= r * Decimal::new(121, 2),
                "{n:?}"
            );
            assert!(
                n.preemptible < n.spot && n.preemptible > Decimal::ZERO,
                "{n:?}"
            );
            assert!((1..=8).contains(&n.gpus));
        }
        assert!(a.buyers.iter().all(|b| !b.skus.is_empty()));
    }
}
