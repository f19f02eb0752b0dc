//! A demo market on the matching engine, in process: suppliers list nodes at the reference
//! prices of `data/gpu-price-list.csv`, buyers bid, a preemptible lease is preempted with
//! notice, a node stops heartbeating and its lease fails over. Prints every event and the
//! inventory a buyer sees.
//!
//! Run: `cargo run --release -p exchange --example demo`

use exchange::*;

const T0: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

struct Demo {
    engine: Engine,
    seq: u64,
    now: i64,
}

impl Demo {
    fn apply(&mut self, what: &str, cmd: Command) -> Output {
        self.seq += 1;
        let out = self.engine.apply(
            &cmd,
            Meta {
                seq: self.seq,
                timestamp_ms: self.now,
            },
        );
        println!("\n[t+{:>4}s] {what}", (self.now - T0) / 1000);
        for e in &out.events {
            println!("    {}", self.describe(e));
        }
        out
    }

    /// Every node but `silent` heartbeats (quietly), then time moves on by `ms`.
    fn heartbeats(
        &mut self,
        nodes: &[(AccountId, NodeId, SkuId)],
        silent: Option<NodeId>,
        ms: i64,
    ) {
        for &(supplier, node, _) in nodes {
            if Some(node) != silent {
                self.seq += 1;
                let out = self.engine.apply(
                    &Command::Heartbeat {
                        account: supplier,
                        node,
                        healthy_gpus: 8,
                    },
                    Meta {
                        seq: self.seq,
                        timestamp_ms: self.now,
                    },
                );
                // Time advances with every command, so deadlines and timeouts show up here.
                if !out.events.is_empty() {
                    println!("\n[t+{:>4}s] (time passes)", (self.now - T0) / 1000);
                    for e in &out.events {
                        println!("    {}", self.describe(e));
                    }
                }
            }
        }
        self.now += ms;
    }

    fn sku(&self, id: SkuId) -> &str {
        self.engine.catalog().get(id).map_or("?", |s| s.id.as_str())
    }

    fn describe(&self, e: &Event) -> String {
        match e {
            Event::Fill {
                lease,
                node,
                gpus,
                price,
                kind,
                maker,
                start_ms,
                ..
            } => format!(
                "fill: lease {lease} on node {node}, {gpus} GPU(s) {kind:?} at {price} CNY/GPU-hour (maker: {maker:?}), starts t+{}s",
                (start_ms - T0) / 1000
            ),
            Event::PreemptionNotice {
                lease,
                deadline_ms,
                reason,
                ..
            } => format!(
                "preemption notice: lease {lease} ends at t+{}s ({reason:?})",
                (deadline_ms - T0) / 1000
            ),
            Event::LeaseEnded {
                lease,
                reason,
                at_ms,
                ..
            } => format!(
                "lease {lease} ended: {reason:?} at t+{}s",
                (at_ms - T0) / 1000
            ),
            Event::BidClosed {
                bid,
                filled,
                unfilled,
                reason,
                ..
            } => format!("bid {bid} closed: {filled} filled, {unfilled} unfilled ({reason:?})"),
            Event::BidAccepted { bid, buyer } => format!("bid {bid} accepted for buyer {buyer}"),
            Event::LeaseStarted {
                lease, gpu_mask, ..
            } => format!("lease {lease} started on GPUs {gpu_mask:#06b}"),
            Event::LeaseMigrated { from, to } => format!("lease {from} failed over to lease {to}"),
            Event::FailoverFailed {
                lease,
                gpus,
                reason,
                ..
            } => {
                format!("failover of lease {lease} failed for {gpus} GPU(s): {reason:?}")
            }
            Event::NodeOffline {
                node,
                last_heartbeat_ms,
            } => format!(
                "node {node} offline (last heartbeat t+{}s)",
                (last_heartbeat_ms - T0) / 1000
            ),
            Event::NodeRegistered { node, gpus, .. } => {
                format!("node {node} registered, {gpus} GPUs")
            }
            Event::OfferPosted { offer, node, .. } => {
                format!("offer {offer} posted on node {node}")
            }
            other => format!("{other:?}"),
        }
    }

    fn show_inventory(&self) {
        println!("\n  live inventory (what buyers see):");
        println!(
            "  {:<14} {:<11} {:<12} {:>10} {:>5} {:>9} {:>10}",
            "SKU", "region", "kind", "CNY/GPU-h", "free", "1 node", "reference"
        );
        for (k, l) in self.engine.inventory() {
            let sku = self.engine.catalog().get(k.sku);
            let reference = match k.kind {
                LeaseKind::Spot => sku.and_then(|s| s.reference_spot),
                LeaseKind::Preemptible => sku.and_then(|s| s.reference_preemptible),
            };
            println!(
                "  {:<14} {:<11} {:<12} {:>10} {:>5} {:>9} {:>10}",
                self.sku(k.sku),
                self.engine.region_name(k.region).unwrap_or("?"),
                format!("{:?}", k.kind),
                k.price.to_string(),
                l.free_gpus,
                l.max_single_node,
                reference.map_or("-".into(), |p| p.to_string())
            );
        }
    }
}

fn main() {
    let catalog = Catalog::builtin();
    let mut d = Demo {
        engine: Engine::new(EngineConfig::default(), catalog.clone()),
        seq: 0,
        now: T0,
    };
    let idc = AccountId(1);
    let campus = AccountId(2);
    let buyer = AccountId(100);
    let batch = AccountId(101);
    let mut nodes = Vec::new();
    // Suppliers list one node per priced SKU at the reference prices.
    for (i, (sku_id, sku)) in catalog.iter().enumerate() {
        let Some(spot) = sku.reference_spot else {
            continue;
        };
        let supplier = if i % 2 == 0 { idc } else { campus };
        let region = if i % 2 == 0 {
            "cn-east-2"
        } else {
            "cn-north-1"
        };
        let out = d.apply(
            &format!("register an 8-GPU {} node in {region}", sku.id),
            Command::RegisterNode {
                account: supplier,
                spec: NodeSpec {
                    name: format!("{}-node-1", sku.id.to_lowercase()),
                    sku: sku_id,
                    gpus: 8,
                    region: region.into(),
                    jurisdiction: Jurisdiction(*b"CN"),
                    interconnect: Interconnect::Infiniband,
                    nvlink: true,
                    fabric: None,
                },
            },
        );
        let Some(Event::NodeRegistered { node, .. }) = out.events.first() else {
            continue;
        };
        nodes.push((supplier, *node, sku_id));
        let pre = sku
            .reference_preemptible
            .or_else(|| Price::from_ticks(spot.ticks() * 6 / 10).ok());
        d.apply(
            &format!(
                "offer it: spot {spot}, preemptible {}",
                pre.map_or("-".into(), |p| p.to_string())
            ),
            Command::PostOffer {
                account: supplier,
                node: *node,
                terms: OfferTerms {
                    gpus: 8,
                    spot_price: spot,
                    preemptible_price: pre,
                    min_lease_s: 0,
                    max_lease_s: 7 * 24 * 3600,
                    available_until_ms: T0 + 30 * 24 * 3600 * 1000,
                    notice_s: 30,
                    provision_s: 180,
                },
            },
        );
    }
    // A second RTX4090 node, a little dearer, in another region: somewhere to fail over to.
    let r4090 = catalog.lookup("RTX4090-24G").unwrap_or(SkuId(0));
    let out = d.apply(
        "campus registers a second RTX4090 node in cn-north-1",
        Command::RegisterNode {
            account: campus,
            spec: NodeSpec {
                name: "rtx4090-24g-node-2".into(),
                sku: r4090,
                gpus: 8,
                region: "cn-north-1".into(),
                jurisdiction: Jurisdiction(*b"CN"),
                interconnect: Interconnect::Roce,
                nvlink: false,
                fabric: None,
            },
        },
    );
    if let Some(Event::NodeRegistered { node, .. }) = out.events.first() {
        nodes.push((campus, *node, r4090));
        d.apply(
            "offer it: spot 2.0500, preemptible 1.2500",
            Command::PostOffer {
                account: campus,
                node: *node,
                terms: OfferTerms {
                    gpus: 8,
                    spot_price: Price::from_ticks(20_500).unwrap_or(Price::from_ticks(1).unwrap()),
                    preemptible_price: Price::from_ticks(12_500).ok(),
                    min_lease_s: 0,
                    max_lease_s: 7 * 24 * 3600,
                    available_until_ms: T0 + 30 * 24 * 3600 * 1000,
                    notice_s: 30,
                    provision_s: 180,
                },
            },
        );
    }
    d.show_inventory();
    let first_4090 = nodes.iter().find(|n| n.2 == r4090).map(|n| n.1);
    let bid = |coid: &str, gpus, limit: &str, kind, tif| BidSpec {
        client_order_id: coid.into(),
        sku: r4090,
        gpus,
        limit: Price::from_decimal(limit.parse().unwrap_or_default())
            .unwrap_or(Price::from_ticks(1).unwrap()),
        kind,
        placement: Placement::SingleNode,
        constraints: Constraints::default(),
        duration_s: None,
        tif,
        min_gpus: None,
    };
    d.heartbeats(&nodes, None, 5_000);
    d.apply(
        "batch buyer bids for 8 preemptible RTX4090s at 1.50 (pays its bid)",
        Command::PlaceBid {
            account: batch,
            bid: bid(
                "batch-1",
                8,
                "1.50",
                LeaseKind::Preemptible,
                TimeInForce::Ioc,
            ),
        },
    );
    d.heartbeats(&nodes, None, 5_000);
    d.apply(
        "the batch buyer also takes the second RTX4090 node preemptibly, bidding 1.30",
        Command::PlaceBid {
            account: batch,
            bid: bid(
                "batch-2",
                8,
                "1.30",
                LeaseKind::Preemptible,
                TimeInForce::Ioc,
            ),
        },
    );
    d.heartbeats(&nodes, None, 5_000);
    d.apply(
        "buyer wants 4 spot RTX4090s at up to 2.20: free GPUs are gone, so it preempts",
        Command::PlaceBid {
            account: buyer,
            bid: bid("train-1", 4, "2.20", LeaseKind::Spot, TimeInForce::Ioc),
        },
    );
    for _ in 0..7 {
        d.heartbeats(&nodes, None, 5_000);
    }
    // More supply arrives: a third RTX4090 node.
    let out = d.apply(
        "the IDC lists a third RTX4090 node: spot 2.1000, preemptible 1.4000",
        Command::RegisterNode {
            account: idc,
            spec: NodeSpec {
                name: "rtx4090-24g-node-3".into(),
                sku: r4090,
                gpus: 8,
                region: "cn-east-2".into(),
                jurisdiction: Jurisdiction(*b"CN"),
                interconnect: Interconnect::Roce,
                nvlink: false,
                fabric: None,
            },
        },
    );
    if let Some(Event::NodeRegistered { node, .. }) = out.events.first() {
        nodes.push((idc, *node, r4090));
        d.apply(
            "offer it",
            Command::PostOffer {
                account: idc,
                node: *node,
                terms: OfferTerms {
                    gpus: 8,
                    spot_price: Price::from_ticks(21_000).unwrap_or(Price::from_ticks(1).unwrap()),
                    preemptible_price: Price::from_ticks(14_000).ok(),
                    min_lease_s: 0,
                    max_lease_s: 7 * 24 * 3600,
                    available_until_ms: T0 + 30 * 24 * 3600 * 1000,
                    notice_s: 30,
                    provision_s: 180,
                },
            },
        );
    }
    // The first RTX4090 node goes quiet; the others keep heartbeating.
    for _ in 0..4 {
        d.heartbeats(&nodes, first_4090, 5_000);
    }
    d.apply("tick", Command::Tick);
    d.show_inventory();
    println!(
        "\nstate hash after {} commands: {}",
        d.seq,
        d.engine
            .state_hash()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
}
