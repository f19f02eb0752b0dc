//! The seeded scenario: suppliers with fleets across the catalog's SKUs and regions, prices
//! spread around the reference price list, buyers with their SKUs of interest. Everything is
//! derived from the seed, so two runs with the same seed build the same market.
//!
//! Supplier trust (issue 26, docs/market-rules.md §12): each node has a [`VerifyPlan`], how
//! its agent answers the exchange's verification runs (most pass → `verified`, some measure
//! 72–87 % or show an NVML fault → `degraded`, a few fail their first run or never answer it
//! → `failed`, held, resumed and verified on the next run), and a share of buyers require
//! trust on their bids ([`TrustPlan`]). Both are drawn from their own streams of the seed, so
//! the rest of the plan is what it was before they existed.
//!
//! Fabric domains (issue 27, docs/market-rules.md §13.1): each supplier's nodes are grouped,
//! per region and ordered by SKU (a fabric is built per hall and GPU generation), into
//! domains of 4–8 nodes, with a few nodes on no domain; each node on one states its NICs'
//! bandwidth. Drawn from their own stream ([`NodePlan::fabric`]), so the rest of the plan is
//! what it was before.

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
    /// How its agent answers verification runs.
    pub verify: VerifyPlan,
    /// The SLA terms its offer states (docs/settlement.md "SLA credit"), as (availability
    /// percent, credit multiple); `None`: none (the default rule, no promise, §12.4).
    pub sla: Option<(&'static str, u16)>,
    /// Its fabric domain and NIC bandwidth (Gbit/s), as registered (`fabric_domain`,
    /// `nic_gbps`); `None`: on no shared fabric (§13.1).
    pub fabric: Option<(String, u32)>,
}

/// The SLA terms of the n-th node of a supplier (no draw, so the seeded plan stays the
/// same): a third state none, a third promise 99.0 % × 10, a third 99.9 % × 20.
pub fn node_sla(n: usize) -> Option<(&'static str, u16)> {
    [None, Some(("99", 10)), Some(("99.9", 20))][n % 3]
}

/// The SLA floor bids with `constraints.min_sla` ask for: 99.5 %, which only the 99.9 %
/// promises meet.
pub const MIN_SLA: &str = "99.5";

/// How a node's agent answers the exchange's verification runs (docs/market-rules.md §12.2):
/// the figures it reports, as a share of the SKU's reference figures
/// (`exchange::verify::REFERENCES`), per run of the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerifyPlan {
    /// Every run at `pct` % (92–99) of the reference: `verified`.
    Pass {
        /// Share of the reference, percent.
        pct: u32,
    },
    /// Every run at `pct` % (72–87): `degraded`, listed and flagged.
    Degraded {
        /// Share of the reference, percent.
        pct: u32,
    },
    /// Every run at `pct` % (93–99) with an NVML fault (throttled) on the first GPU:
    /// `degraded`, decided by `nvml_fault`.
    Faulty {
        /// Share of the reference, percent.
        pct: u32,
    },
    /// The first run fails as `fail` says (held; the supplier resumes it, which places a new
    /// run); every later run passes at `pct` %.
    FailOnce {
        /// How the first run fails.
        fail: FailKind,
        /// Share of the reference of the later runs, percent.
        pct: u32,
    },
    /// The first run is never answered (its deadline fails it: `timeout`); every later run
    /// passes at `pct` %.
    SilentOnce {
        /// Share of the reference of the later runs, percent.
        pct: u32,
    },
}

/// How a [`VerifyPlan::FailOnce`] node's first run fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailKind {
    /// Every figure at `pct` % (40–65): below the 70 % floor.
    Low {
        /// Share of the reference, percent.
        pct: u32,
    },
    /// Full figures, but `dcgmi diag` failed.
    Dcgm,
    /// The first GPU reported no BF16 figure (`missing`).
    Missing,
}

/// Draws a node's [`VerifyPlan`]: 70 % pass, 10 % degraded by figures, 4 % degraded by an
/// NVML fault, 8 % fail their first run (a third each low, DCGM, missing), 8 % never answer
/// their first run.
fn verify_plan(rng: &mut StdRng) -> VerifyPlan {
    let u: f64 = rng.random();
    let pass = rng.random_range(92..=99);
    if u < 0.70 {
        VerifyPlan::Pass { pct: pass }
    } else if u < 0.80 {
        VerifyPlan::Degraded {
            pct: rng.random_range(72..=87),
        }
    } else if u < 0.84 {
        VerifyPlan::Faulty {
            pct: rng.random_range(93..=99),
        }
    } else if u < 0.92 {
        let fail = match rng.random_range(0..3) {
            0 => FailKind::Low {
                pct: rng.random_range(40..=65),
            },
            1 => FailKind::Dcgm,
            _ => FailKind::Missing,
        };
        VerifyPlan::FailOnce { fail, pct: pass }
    } else {
        VerifyPlan::SilentOnce { pct: pass }
    }
}

/// What a buyer requires of the nodes its bids fill on (docs/market-rules.md §12.2–12.3),
/// per bid: a share of its bids require `verified`, a share `min_reliability`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TrustPlan {
    /// Share of its bids with `constraints.verified`.
    pub verified: f64,
    /// Share of its bids with `constraints.min_reliability` ([`MIN_RELIABILITY`]), half of
    /// them with `verified` as well.
    pub min_reliability: f64,
    /// Share of its bids with `constraints.min_sla` ([`MIN_SLA`] alone; §12.4).
    pub min_sla: f64,
}

/// The `min_reliability` trust bids ask for. A node is `new` (no score) until it has ended 10
/// leases and delivered 24 lease-hours in 30 days (§12.3), which no node of a load test
/// reaches: these bids must never fill on its nodes.
pub const MIN_RELIABILITY: &str = "0.95";

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
    /// What its bids require of nodes.
    pub trust: TrustPlan,
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

/// Seed stream of the nodes' [`VerifyPlan`]s.
const VERIFY_STREAM: u64 = 0x7E57_0000_5EED_0001;
/// Seed stream of the buyers' [`TrustPlan`]s.
const TRUST_STREAM: u64 = 0x7E57_0000_5EED_0002;
/// Seed stream of the nodes' fabric domains ([`NodePlan::fabric`]).
const FABRIC_STREAM: u64 = 0x7E57_0000_5EED_0003;
/// Share of nodes left on no fabric domain.
const OFF_FABRIC: f64 = 0.1;

/// Groups a supplier's nodes into fabric domains: per region (in the order regions first
/// appear), nodes ordered by SKU then index, cut into runs of 4–8 nodes (a last run of one
/// joins no domain); [`OFF_FABRIC`] of the nodes are then left on none. Domain names are
/// `<region>-fab<k>`, unique per supplier. NICs: 8 × 200 or 8 × 400 Gbit/s on InfiniBand
/// nodes, 100 or 200 on the others.
fn assign_fabric(nodes: &mut [NodePlan], rng: &mut StdRng) {
    let mut regions: Vec<String> = Vec::new();
    for n in nodes.iter() {
        if !regions.contains(&n.region) {
            regions.push(n.region.clone());
        }
    }
    let mut k = 0;
    for region in regions {
        let mut idx: Vec<usize> = (0..nodes.len())
            .filter(|&i| nodes[i].region == region)
            .collect();
        idx.sort_by(|&a, &b| nodes[a].sku.cmp(&nodes[b].sku).then(a.cmp(&b)));
        let mut rest = &idx[..];
        while !rest.is_empty() {
            let size = rng.random_range(4..=8usize).min(rest.len());
            let (run, tail) = rest.split_at(size);
            rest = tail;
            if run.len() < 2 {
                continue;
            }
            let name = format!("{region}-fab{k}");
            k += 1;
            for &i in run {
                let nic = if nodes[i].interconnect == InterconnectDto::Infiniband {
                    [1_600, 3_200][rng.random_range(0..2)]
                } else {
                    [100, 200][rng.random_range(0..2)]
                };
                nodes[i].fabric = Some((name.clone(), nic));
            }
        }
    }
    for n in nodes.iter_mut() {
        if rng.random_bool(OFF_FABRIC) {
            n.fabric = None;
        }
    }
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
                verify: VerifyPlan::Pass { pct: 96 },
                sla: node_sla(n),
                fabric: None,
            });
        }
        out.push(SupplierPlan {
            name: format!("lt-{kind}-{s}"),
            nodes,
        });
    }
    // Trust: drawn from their own streams, after the rest, so the plan above stays the same.
    let mut vrng = StdRng::seed_from_u64(seed ^ VERIFY_STREAM);
    for n in out.iter_mut().flat_map(|s| s.nodes.iter_mut()) {
        n.verify = verify_plan(&mut vrng);
    }
    let mut frng = StdRng::seed_from_u64(seed ^ FABRIC_STREAM);
    for s in out.iter_mut() {
        assign_fabric(&mut s.nodes, &mut frng);
    }
    let mut trng = StdRng::seed_from_u64(seed ^ TRUST_STREAM);
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
            // Every third buyer (from the second) requires trust on many of its bids.
            let trust = if b % 3 == 1 {
                TrustPlan {
                    verified: trng.random_range(0.4..0.8),
                    min_reliability: trng.random_range(0.05..0.15),
                    // a fixed share: no draw, so the streams above stay the same
                    min_sla: 0.15,
                }
            } else {
                TrustPlan::default()
            };
            BuyerPlan {
                name: format!("lt-buyer-{b}"),
                skus: mine,
                trust,
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
    use std::collections::BTreeMap;

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

    #[test]
    fn trust_plans_are_seeded_and_mixed() {
        let a = build(42, 8, 25, 24, 0.1);
        let b = build(42, 8, 25, 24, 0.1);
        let plans = |s: &Scenario| -> Vec<VerifyPlan> {
            s.suppliers
                .iter()
                .flat_map(|s| &s.nodes)
                .map(|n| n.verify)
                .collect()
        };
        assert_eq!(plans(&a), plans(&b));
        let v = plans(&a);
        let count = |f: fn(&VerifyPlan) -> bool| v.iter().filter(|p| f(p)).count();
        let pass = count(|p| matches!(p, VerifyPlan::Pass { .. }));
        let degraded =
            count(|p| matches!(p, VerifyPlan::Degraded { .. } | VerifyPlan::Faulty { .. }));
        let fail = count(|p| matches!(p, VerifyPlan::FailOnce { .. }));
        let silent = count(|p| matches!(p, VerifyPlan::SilentOnce { .. }));
        assert!(pass > v.len() / 2, "{pass} of {}", v.len());
        assert!(
            degraded > 0 && fail > 0 && silent > 0,
            "{degraded} {fail} {silent}"
        );
        for p in &v {
            let pct = match *p {
                VerifyPlan::Pass { pct } | VerifyPlan::SilentOnce { pct } => pct,
                VerifyPlan::FailOnce { pct, .. } => pct,
                VerifyPlan::Degraded { pct } => {
                    assert!((72..=87).contains(&pct));
                    continue;
                }
                VerifyPlan::Faulty { pct } => pct,
            };
            assert!((92..=99).contains(&pct), "{p:?}");
        }
        let trusting = a.buyers.iter().filter(|b| b.trust.verified > 0.0).count();
        assert_eq!(trusting, 8);
        // The trust streams leave the rest of the plan as it was.
        assert_eq!(a.suppliers[0].nodes[0].spot, b.suppliers[0].nodes[0].spot);
    }

    #[test]
    fn fabric_domains_are_seeded_per_supplier_and_region() {
        let a = build(42, 8, 25, 24, 0.1);
        let b = build(42, 8, 25, 24, 0.1);
        let fabrics = |s: &Scenario| -> Vec<Option<(String, u32)>> {
            s.suppliers
                .iter()
                .flat_map(|s| &s.nodes)
                .map(|n| n.fabric.clone())
                .collect()
        };
        assert_eq!(fabrics(&a), fabrics(&b));
        let (mut on, mut off) = (0, 0);
        for s in &a.suppliers {
            let mut domains: BTreeMap<&str, Vec<&NodePlan>> = BTreeMap::new();
            for n in &s.nodes {
                match &n.fabric {
                    Some((d, nic)) => {
                        on += 1;
                        assert!((1..=25_600).contains(nic));
                        assert!(d.len() <= 64 && d.starts_with(n.region.as_str()));
                        domains.entry(d.as_str()).or_default().push(n);
                    }
                    None => off += 1,
                }
            }
            for (d, members) in &domains {
                assert!(members.len() <= 8, "{d}: {}", members.len());
                assert!(members.iter().all(|m| m.region == members[0].region));
            }
            // Domains of several nodes of one SKU exist: a gang can fill.
            assert!(
                domains
                    .values()
                    .any(|m| m.iter().filter(|n| n.sku == m[0].sku).count() >= 2),
                "{}",
                s.name
            );
        }
        assert!(on > off * 3 && off > 0, "{on} on, {off} off");
        // The fabric stream leaves the rest of the plan as it was.
        let plain = |s: &Scenario| -> Vec<String> {
            s.suppliers
                .iter()
                .flat_map(|s| &s.nodes)
                .map(|n| format!("{} {} {} {} {}", n.sku, n.gpus, n.region, n.spot, n.flaky))
                .collect()
        };
        assert_eq!(plain(&a), plain(&build(42, 8, 25, 24, 0.1)));
    }
}
