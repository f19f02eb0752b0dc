//! Random command streams through the engine with the engine's own invariants checked after
//! every command (the reference-model comparison lives in model_check.rs).

use exchange::*;

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn price(ticks: i64) -> Price {
    Price::from_ticks(ticks).unwrap()
}

fn pick<T: Copy>(r: &mut Lcg, items: &[T], fallback: T) -> T {
    if items.is_empty() || r.below(20) == 0 {
        fallback
    } else {
        items[r.below(items.len() as u64) as usize]
    }
}

/// One random command, with ids drawn from what the engine holds now.
fn random_command(r: &mut Lcg, e: &Engine, seq: u64, t: i64) -> Command {
    let regions = ["cn-east-2", "cn-north-1"];
    let nodes: Vec<(AccountId, NodeId)> = e.nodes().map(|n| (n.supplier, n.id)).collect();
    let offers: Vec<(AccountId, OfferId)> = e.offers().map(|o| (o.supplier, o.id)).collect();
    let bids: Vec<(AccountId, BidId)> = e.bids().map(|b| (b.buyer, b.id)).collect();
    let leases: Vec<(AccountId, LeaseId)> = e.leases().map(|l| (l.buyer, l.id)).collect();
    let bogus = (AccountId(9), 12345u64);
    {
        let account = AccountId(1 + r.below(5));
        match r.below(14) {
            0 => Command::RegisterNode {
                account,
                spec: NodeSpec {
                    name: format!("n{}", r.below(6)),
                    sku: SkuId(r.below(2) as u16),
                    gpus: 1 + r.below(8) as u32,
                    region: regions[r.below(2) as usize].to_string(),
                    jurisdiction: Jurisdiction(*b"CN"),
                    interconnect: Interconnect::Roce,
                    nvlink: r.below(2) == 0,
                    fabric: None,
                },
            },
            1 | 2 | 11 | 12 => {
                let (account, node) = pick(r, &nodes, (bogus.0, NodeId(bogus.1)));
                let gpus = e.node(node).map_or(8, |n| n.gpus);
                Command::Heartbeat {
                    account,
                    node,
                    healthy_gpus: if r.below(8) == 0 {
                        r.below(u64::from(gpus) + 1) as u32
                    } else {
                        gpus
                    },
                }
            }
            3 => {
                let (account, node) = pick(r, &nodes, (bogus.0, NodeId(bogus.1)));
                Command::PostOffer {
                    account,
                    node,
                    terms: OfferTerms {
                        gpus: 1 + r.below(8) as u32,
                        spot_price: price(100 + r.below(20) as i64),
                        preemptible_price: Some(price(50 + r.below(20) as i64)),
                        min_lease_s: 0,
                        max_lease_s: 3600,
                        available_until_ms: t + 200_000,
                        notice_s: r.below(3) as u32 * 5,
                        provision_s: 180,
                    },
                }
            }
            4 => {
                let (account, offer) = pick(r, &offers, (bogus.0, OfferId(bogus.1)));
                Command::AmendOffer {
                    account,
                    offer,
                    terms: OfferTerms {
                        gpus: 1 + r.below(8) as u32,
                        spot_price: price(100 + r.below(20) as i64),
                        preemptible_price: None,
                        min_lease_s: 0,
                        max_lease_s: 3600,
                        available_until_ms: t + 100_000,
                        notice_s: 0,
                        provision_s: 180,
                    },
                }
            }
            5 => {
                let (account, offer) = pick(r, &offers, (bogus.0, OfferId(bogus.1)));
                Command::WithdrawOffer { account, offer }
            }
            6..=8 => Command::PlaceBid {
                account,
                bid: BidSpec {
                    client_order_id: format!("c{seq}"),
                    sku: SkuId(r.below(2) as u16),
                    gpus: 1 + r.below(8) as u32,
                    limit: price(60 + r.below(70) as i64),
                    kind: if r.below(2) == 0 {
                        LeaseKind::Spot
                    } else {
                        LeaseKind::Preemptible
                    },
                    placement: if r.below(2) == 0 {
                        Placement::SingleNode
                    } else {
                        Placement::Spread
                    },
                    constraints: Constraints::default(),
                    duration_s: if r.below(2) == 0 {
                        None
                    } else {
                        Some(1 + r.below(100))
                    },
                    tif: if r.below(2) == 0 {
                        TimeInForce::Ioc
                    } else {
                        TimeInForce::Gtc {
                            expires_at_ms: Some(t + 50_000),
                        }
                    },
                    min_gpus: None,
                },
            },
            9 => {
                let (account, bid) = pick(r, &bids, (bogus.0, BidId(bogus.1)));
                Command::CancelBid { account, bid }
            }
            10 => {
                let (account, lease) = pick(r, &leases, (bogus.0, LeaseId(bogus.1)));
                Command::ReleaseLease { account, lease }
            }
            _ => Command::Tick,
        }
    }
}

#[test]
fn random_streams_keep_invariants() {
    let mut fills = 0;
    let mut seeds_trading = 0;
    for seed in 0..20 {
        let mut e = Engine::new(EngineConfig::default(), Catalog::builtin());
        let fills_before = fills;
        let mut r = Lcg(seed);
        let mut t = 1_000_000i64;
        for i in 0..1500u64 {
            t += r.below(1500) as i64;
            let cmd = random_command(&mut r, &e, i + 1, t);
            let meta = Meta {
                seq: i + 1,
                timestamp_ms: t,
            };
            let out = e.apply(&cmd, meta);
            fills += out
                .events
                .iter()
                .filter(|e| matches!(e, Event::Fill { .. }))
                .count();
            if let Err(msg) = e.check_invariants() {
                panic!("seed {seed} step {i}: {cmd:?}\n{out:#?}\n{msg}");
            }
        }
        if fills > fills_before {
            seeds_trading += 1;
        }
    }
    assert!(
        seeds_trading >= 18 && fills >= 200,
        "only {seeds_trading} of 20 streams traded ({fills} fills)"
    );
}

/// With delivery on (docs/market-rules.md §11): a random command as above, its offer terms with
/// a random provisioning deadline (sometimes out of range), or one of the supplier's reports —
/// ready, failed, torn down, resume — mostly on a lease or node that needs it, sometimes on any.
fn random_delivery_command(r: &mut Lcg, e: &Engine, seq: u64, t: i64) -> Command {
    let provisioning: Vec<(AccountId, LeaseId)> = e
        .leases()
        .filter(|l| l.provision_deadline_ms.is_some())
        .map(|l| (l.supplier, l.id))
        .collect();
    let live: Vec<(AccountId, LeaseId)> = e.leases().map(|l| (l.supplier, l.id)).collect();
    let wipes: Vec<(AccountId, LeaseId)> = e.wipes().map(|w| (w.supplier, w.lease)).collect();
    let held: Vec<(AccountId, NodeId)> = e
        .nodes()
        .filter(|n| n.held.is_some())
        .map(|n| (n.supplier, n.id))
        .collect();
    let nodes: Vec<(AccountId, NodeId)> = e.nodes().map(|n| (n.supplier, n.id)).collect();
    let bogus = (AccountId(9), LeaseId(12345));
    // a supplier that never reports some of its leases (their deadlines fire)
    let silent = |l: LeaseId| l.0 % 7 == 3;
    // any lease, live or wiping (silent ones only while the supplier has others to report)
    let any = |r: &mut Lcg, quiet: bool| {
        let all: Vec<(AccountId, LeaseId)> = live
            .iter()
            .chain(&wipes)
            .copied()
            .filter(|x| !quiet || !silent(x.1))
            .collect();
        let (a, l) = pick(r, &all, bogus);
        // now and then the wrong account
        if r.below(10) == 0 {
            (AccountId(a.0 % 5 + 1), l)
        } else {
            (a, l)
        }
    };
    match r.below(32) {
        0..=3 => {
            let ready: Vec<_> = provisioning
                .iter()
                .copied()
                .filter(|x| !silent(x.1))
                .collect();
            let (account, lease) = if ready.is_empty() {
                any(r, true)
            } else if r.below(8) == 0 {
                any(r, false)
            } else {
                pick(r, &ready, bogus)
            };
            Command::ReportReady { account, lease }
        }
        4 => {
            let (account, lease) = if r.below(3) == 0 {
                any(r, true)
            } else {
                pick(r, &provisioning, bogus)
            };
            Command::ReportFailed { account, lease }
        }
        5..=7 => {
            let wiped: Vec<_> = wipes.iter().copied().filter(|x| !silent(x.1)).collect();
            let (account, lease) = if wiped.is_empty() {
                any(r, true)
            } else if r.below(8) == 0 {
                any(r, false)
            } else {
                pick(r, &wiped, bogus)
            };
            Command::ReportTornDown { account, lease }
        }
        8 => {
            let (account, node) = if held.is_empty() || r.below(4) == 0 {
                pick(r, &nodes, (bogus.0, NodeId(bogus.1.0)))
            } else {
                pick(r, &held, (bogus.0, NodeId(bogus.1.0)))
            };
            Command::ResumeNode { account, node }
        }
        _ => {
            let mut cmd = random_command(r, e, seq, t);
            if let Command::PostOffer { terms, .. } | Command::AmendOffer { terms, .. } = &mut cmd {
                terms.provision_s = [1, 5, 30, 180, 0, 1801, 1800][r.below(7) as usize];
            }
            cmd
        }
    }
}

/// Delivery on: random streams keep the engine's invariants, and reach every phase of §11.
#[test]
fn random_delivery_streams_keep_invariants() {
    let config = EngineConfig {
        delivery: true,
        teardown_timeout_ms: 30_000,
        ..EngineConfig::default()
    };
    let mut seen = std::collections::BTreeMap::<&'static str, usize>::new();
    for seed in 100..120 {
        let mut e = Engine::new(config.clone(), Catalog::builtin());
        let mut r = Lcg(seed);
        let mut t = 1_000_000i64;
        for i in 0..1500u64 {
            t += r.below(1500) as i64;
            let cmd = random_delivery_command(&mut r, &e, i + 1, t);
            let meta = Meta {
                seq: i + 1,
                timestamp_ms: t,
            };
            let out = e.apply(&cmd, meta);
            for ev in &out.events {
                let name = match ev {
                    Event::Fill { .. } => "fill",
                    Event::ProvisionStarted { .. } => "provision_started",
                    Event::LeaseReady { .. } => "lease_ready",
                    Event::LeaseWiping { .. } => "lease_wiping",
                    Event::LeaseWiped { .. } => "lease_wiped",
                    Event::TeardownOverdue { .. } => "teardown_overdue",
                    Event::NodeHeld { .. } => "node_held",
                    Event::NodeResumed { .. } => "node_resumed",
                    Event::LeaseMigrated { .. } => "lease_migrated",
                    Event::LeaseEnded {
                        reason: EndReason::NotDelivered,
                        ..
                    } => "not_delivered",
                    _ => continue,
                };
                *seen.entry(name).or_default() += 1;
            }
            if let Err(msg) = e.check_invariants() {
                panic!("seed {seed} step {i}: {cmd:?}\n{out:#?}\n{msg}");
            }
        }
    }
    for name in [
        "fill",
        "provision_started",
        "lease_ready",
        "lease_wiping",
        "lease_wiped",
        "teardown_overdue",
        "node_held",
        "node_resumed",
        "not_delivered",
    ] {
        assert!(
            seen.get(name).copied().unwrap_or(0) > 0,
            "no {name}: {seen:?}"
        );
    }
}

/// Sequence numbers above `MAX_SEQ` are refused: ids are `seq << 20 | k`, and a larger seq
/// made two nodes share an id (found by the fresh-user review).
#[test]
fn sequence_numbers_beyond_the_id_space_are_refused() {
    let mut e = Engine::new(EngineConfig::default(), Catalog::builtin());
    let spec = |name: &str| NodeSpec {
        name: name.into(),
        sku: SkuId(0),
        gpus: 8,
        region: "cn-east-2".into(),
        jurisdiction: Jurisdiction(*b"CN"),
        interconnect: Interconnect::Roce,
        nvlink: false,
        fabric: None,
    };
    let out = e.apply(
        &Command::RegisterNode {
            account: AccountId(1),
            spec: spec("a"),
        },
        Meta {
            seq: 1,
            timestamp_ms: 0,
        },
    );
    assert!(out.rejection().is_none());
    for seq in [exchange::limits::MAX_SEQ + 1, 1 + (1 << 44), u64::MAX] {
        let out = e.apply(
            &Command::RegisterNode {
                account: AccountId(1),
                spec: spec("b"),
            },
            Meta {
                seq,
                timestamp_ms: 1,
            },
        );
        assert_eq!(out.rejection(), Some(RejectReason::SequenceOutOfRange));
    }
    let out = e.apply(
        &Command::RegisterNode {
            account: AccountId(1),
            spec: spec("b"),
        },
        Meta {
            seq: exchange::limits::MAX_SEQ,
            timestamp_ms: 1,
        },
    );
    assert!(out.rejection().is_none());
    assert_eq!(e.nodes().count(), 2);
    e.check_invariants().unwrap();
}

/// Regressions the reference model's probes found in verification (issue 26, §12.1–12.2),
/// each the failing input as found.
mod verification_regressions {
    use exchange::verify::{GpuFigures, VerificationFigures, VerifyConfig};
    use exchange::*;

    const T0: i64 = 1_700_000_000_000;

    struct M {
        e: Engine,
        seq: u64,
        t: i64,
    }

    impl M {
        fn new() -> M {
            let config = EngineConfig {
                heartbeat_timeout_ms: 30 * 86_400_000,
                ..EngineConfig::default()
            };
            let mut e = Engine::new(config, Catalog::builtin());
            e.set_verification(Some(VerifyConfig::default()));
            M { e, seq: 0, t: T0 }
        }
        fn at(&mut self, dt_ms: i64, cmd: Command) -> Output {
            self.seq += 1;
            self.t += dt_ms;
            let out = self.e.apply(
                &cmd,
                Meta {
                    seq: self.seq,
                    timestamp_ms: self.t,
                },
            );
            self.e.check_invariants().expect("invariants");
            out
        }
        /// A 2-GPU RTX 4090 node, offered; answers (node, the first run's lease).
        fn listed(&mut self) -> (NodeId, LeaseId) {
            let sku = Catalog::builtin().lookup("RTX4090-24G").unwrap();
            let out = self.at(
                0,
                Command::RegisterNode {
                    account: AccountId(1),
                    spec: NodeSpec {
                        name: "n1".into(),
                        sku,
                        gpus: 2,
                        region: "cn-east-2".into(),
                        jurisdiction: Jurisdiction(*b"CN"),
                        interconnect: Interconnect::Pcie,
                        nvlink: false,
                        fabric: None,
                    },
                },
            );
            let node = out
                .events
                .iter()
                .find_map(|e| match e {
                    Event::NodeRegistered { node, .. } => Some(*node),
                    _ => None,
                })
                .unwrap();
            let out = self.at(
                0,
                Command::PostOffer {
                    account: AccountId(1),
                    node,
                    terms: OfferTerms {
                        gpus: 2,
                        spot_price: Price::from_ticks(20_000).unwrap(),
                        preemptible_price: None,
                        min_lease_s: 1,
                        max_lease_s: 86_400,
                        available_until_ms: T0 + 30 * 86_400_000,
                        notice_s: 0,
                        provision_s: 180,
                    },
                },
            );
            let run = started(&out).expect("first listing starts a run");
            (node, run)
        }
        fn report(&mut self, run: LeaseId) -> Output {
            let figures = VerificationFigures {
                gpus: (0..2)
                    .map(|index| GpuFigures {
                        index,
                        bf16_tflops_x10: Some(1_500),
                        mem_bw_gbps: Some(850),
                        faults: 0,
                    })
                    .collect(),
                allreduce_busbw_x10: None,
                dcgm: None,
            };
            self.at(
                1_000,
                Command::ReportVerification {
                    account: AccountId(1),
                    lease: run,
                    figures,
                },
            )
        }
        fn attest(&mut self, node: NodeId, gpus: &[(u32, &str)]) -> Output {
            let gpus = gpus
                .iter()
                .map(|(index, uuid)| AttestedGpu {
                    index: *index,
                    uuid: uuid.to_string(),
                    model: "NVIDIA GeForce RTX 4090".into(),
                    memory_mib: 24_564,
                })
                .collect();
            self.at(
                1_000,
                Command::AttestNode {
                    account: AccountId(1),
                    node,
                    gpus,
                },
            )
        }
    }

    fn started(out: &Output) -> Option<LeaseId> {
        out.events.iter().find_map(|e| match e {
            Event::VerificationStarted { lease, .. } => Some(*lease),
            _ => None,
        })
    }

    /// An identical attestation with indexes 1 and 2 (not starting at 0) is no UUID change:
    /// the lease on the node keeps running and no run is placed.
    #[test]
    fn an_identical_attestation_with_offset_indexes_changes_nothing() {
        let mut m = M::new();
        let (node, run) = m.listed();
        m.report(run);
        assert!(matches!(
            m.attest(node, &[(1, "u1"), (2, "u2")]).events[0],
            Event::NodeAttested { .. }
        ));
        let out = m.at(
            1_000,
            Command::PlaceBid {
                account: AccountId(2),
                bid: BidSpec {
                    client_order_id: "b1".into(),
                    sku: Catalog::builtin().lookup("RTX4090-24G").unwrap(),
                    gpus: 2,
                    limit: Price::from_ticks(30_000).unwrap(),
                    kind: LeaseKind::Spot,
                    placement: Placement::SingleNode,
                    constraints: Constraints::default(),
                    duration_s: Some(3_600),
                    tif: TimeInForce::Ioc,
                    min_gpus: None,
                },
            },
        );
        assert!(out.events.iter().any(|e| matches!(e, Event::Fill { .. })));
        let out = m.attest(node, &[(1, "u1"), (2, "u2")]);
        assert!(
            !out.events.iter().any(|e| matches!(
                e,
                Event::LeaseEnded { .. } | Event::VerificationStarted { .. }
            )),
            "{:?}",
            out.events
        );
    }

    /// A run that fails while the node is already held (by its attestation) leaves it
    /// `failed`: resuming it after a matching attestation places a new run instead of listing
    /// the node.
    #[test]
    fn a_failed_run_under_another_hold_still_needs_a_new_run_at_resume() {
        let mut m = M::new();
        let (node, _run) = m.listed();
        m.attest(node, &[(0, "u0")]); // one GPU of two: held `attestation`
        let out = m.at(1_800_000, Command::Tick);
        assert!(out.events.iter().any(|e| matches!(
            e,
            Event::VerificationEnded { judgment, .. }
                if judgment.outcome == exchange::verify::VerifyOutcome::Failed
        )));
        m.attest(node, &[(0, "u0"), (1, "u1")]);
        let out = m.at(
            1_000,
            Command::ResumeNode {
                account: AccountId(1),
                node,
            },
        );
        assert!(started(&out).is_some(), "{:?}", out.events);
        assert_eq!(m.e.listed_free_gpus(node), 0);
    }

    /// An exchange outage (`Resume`) moves a run's deadline with it: the run under way does not
    /// fail for the exchange's own downtime.
    #[test]
    fn an_exchange_outage_moves_the_run_deadline() {
        let mut m = M::new();
        let (node, run) = m.listed();
        let out = m.at(1_800_000, Command::Resume);
        assert!(
            !out.events
                .iter()
                .any(|e| matches!(e, Event::VerificationEnded { .. })),
            "{:?}",
            out.events
        );
        let out = m.report(run);
        assert!(out.events.iter().any(|e| matches!(
            e,
            Event::VerificationEnded { judgment, .. }
                if judgment.outcome == exchange::verify::VerifyOutcome::Verified
        )));
        assert_eq!(m.e.listed_free_gpus(node), 2);
    }
}
