//! The market state machine: engine and ledger driven together by journaled operations.

use exchange::{
    AccountId, BidSpec, Catalog, Command, Constraints, Event, Interconnect, Jurisdiction,
    LeaseKind, NodeSpec, OfferTerms, Placement, Price, TimeInForce,
};
use gateway::market::{Market, MarketConfig, Op};
use rust_decimal::Decimal;
use settlement::Account;
use std::str::FromStr;

const T0: i64 = 1_767_225_600_000;
const SUPPLIER: u64 = 1;
const BUYER: u64 = 100;

fn dec(s: &str) -> Decimal {
    Decimal::from_str(s).unwrap()
}

fn h100() -> exchange::SkuId {
    Catalog::builtin().lookup("H100-80G").unwrap()
}

/// Offer terms for `gpus` GPUs at `spot` (and `preemptible`) CNY/GPU-hour, for a day.
fn terms(gpus: u32, spot: &str, preemptible: Option<&str>, notice_s: u32) -> OfferTerms {
    OfferTerms {
        gpus,
        spot_price: Price::from_decimal(dec(spot)).unwrap(),
        preemptible_price: preemptible.map(|p| Price::from_decimal(dec(p)).unwrap()),
        min_lease_s: 0,
        max_lease_s: 86_400,
        available_until_ms: T0 + 86_400_000,
        notice_s,
        provision_s: 180,
    }
}

/// Registers an H100 node of `gpus` GPUs in cn-east-2 at T0 and posts `terms` on it.
fn listed_node(m: &mut Market, name: &str, gpus: u32, terms: OfferTerms) -> exchange::NodeId {
    let out = m.apply(
        T0,
        &Op::Engine(Command::RegisterNode {
            account: AccountId(SUPPLIER),
            spec: NodeSpec {
                name: name.into(),
                sku: h100(),
                gpus,
                region: "cn-east-2".into(),
                jurisdiction: Jurisdiction(*b"CN"),
                interconnect: Interconnect::Infiniband,
                nvlink: true,
                fabric: None,
            },
        }),
    );
    let node = match out.engine[0].events[0] {
        Event::NodeRegistered { node, .. } => node,
        ref e => panic!("{e:?}"),
    };
    let out = m.apply(
        T0,
        &Op::Engine(Command::PostOffer {
            account: AccountId(SUPPLIER),
            node,
            terms,
        }),
    );
    assert!(out.refusal.is_none() && out.engine[0].rejection().is_none());
    node
}

/// A market with one 8-GPU H100 node offered at 36 CNY/GPU-hour (so 1 GPU-second = 0.01).
fn market_with_offer() -> (Market, exchange::NodeId) {
    let mut m = Market::new(MarketConfig::default()).unwrap();
    let node = listed_node(&mut m, "n1", 8, terms(8, "36", None, 0));
    (m, node)
}

fn bid(coid: &str, gpus: u32, limit: &str) -> Op {
    Op::Engine(Command::PlaceBid {
        account: AccountId(BUYER),
        bid: BidSpec {
            client_order_id: coid.into(),
            sku: h100(),
            gpus,
            limit: Price::from_decimal(dec(limit)).unwrap(),
            kind: LeaseKind::Spot,
            placement: Placement::SingleNode,
            constraints: Constraints::default(),
            duration_s: None,
            tif: TimeInForce::Ioc,
            min_gpus: None,
        },
    })
}

fn deposit(key: &str, amount: &str) -> Op {
    Op::Deposit {
        key: key.into(),
        buyer: BUYER,
        amount: dec(amount),
    }
}

/// Heartbeats the node every 10 s from `from` to `to` (ms since epoch), then ticks at `to`.
fn run_until(
    m: &mut Market,
    node: exchange::NodeId,
    from: i64,
    to: i64,
) -> gateway::market::Outcome {
    let mut t = from;
    while t < to {
        m.apply(
            t,
            &Op::Engine(Command::Heartbeat {
                account: AccountId(SUPPLIER),
                node,
                healthy_gpus: 8,
            }),
        );
        t += 10_000;
    }
    m.apply(to, &Op::Tick)
}

fn buyer_balance(m: &Market) -> Decimal {
    m.ledger()
        .balance(Account::Buyer(settlement::AccountId(BUYER)))
}

#[test]
fn a_bid_without_funds_is_refused_before_the_book() {
    let (mut m, _) = market_with_offer();
    // 1 GPU at 36/h for the 600 s minimum runway needs 6.00 CNY.
    let out = m.apply(T0 + 1000, &deposit("d1", "5.99"));
    assert!(out.refusal.is_none());
    let out = m.apply(T0 + 1000, &bid("c1", 1, "36"));
    let refusal = out.refusal.expect("refused");
    assert_eq!(refusal.code, "insufficient_funds");
    assert!(out.engine.is_empty(), "the engine never saw the bid");
    m.apply(T0 + 1000, &deposit("d2", "0.01"));
    let out = m.apply(T0 + 1000, &bid("c1", 1, "36"));
    assert!(out.refusal.is_none());
    assert!(
        out.engine[0]
            .events
            .iter()
            .any(|e| matches!(e, Event::Fill { .. }))
    );
}

#[test]
fn ticks_bill_leases_per_second_into_the_ledger() {
    let (mut m, node) = market_with_offer();
    m.apply(T0, &deposit("d1", "100"));
    m.apply(T0, &bid("c1", 2, "40"));
    // 2 GPUs × 36 CNY/h = 0.02 CNY per second; 90 s later 1.80 CNY is charged.
    run_until(&mut m, node, T0, T0 + 90_000);
    assert_eq!(buyer_balance(&m), dec("98.20"));
    // 8 % of 1.80 = 0.144 to the platform, 1.656 to the supplier (credit balances).
    assert_eq!(m.ledger().balance(Account::PlatformFee).abs(), dec("0.144"));
    assert_eq!(
        m.ledger()
            .balance(Account::Supplier(settlement::AccountId(SUPPLIER)))
            .abs(),
        dec("1.656")
    );
    assert_eq!(m.ledger().sum_of_balances(), Decimal::ZERO);
}

#[test]
fn an_exhausted_balance_ends_the_lease_on_a_tick() {
    let (mut m, node) = market_with_offer();
    // 1 GPU at 36/h = 0.01 CNY/s; 6.00 CNY lasts 600 s.
    m.apply(T0, &deposit("d1", "6"));
    let out = m.apply(T0, &bid("c1", 1, "36"));
    let lease = out.engine[0]
        .events
        .iter()
        .find_map(|e| match e {
            Event::Fill { lease, .. } => Some(*lease),
            _ => None,
        })
        .unwrap();
    run_until(&mut m, node, T0, T0 + 300_000);
    assert!(m.engine().lease(lease).is_some(), "half the balance left");
    assert_eq!(buyer_balance(&m), dec("3"));
    let out = run_until(&mut m, node, T0 + 300_000, T0 + 700_000);
    let ended = out.engine.iter().flat_map(|o| &o.events).any(|e| {
        matches!(e, Event::LeaseEnded { lease: l, reason: exchange::EndReason::InsufficientFunds, .. } if *l == lease)
    });
    assert!(ended, "{:?}", out.engine);
    assert!(m.engine().lease(lease).is_none());
    assert!(buyer_balance(&m) >= Decimal::ZERO);
    assert_eq!(m.ledger().sum_of_balances(), Decimal::ZERO);
}

#[test]
fn the_same_operations_give_the_same_state() {
    let run = || {
        let (mut m, node) = market_with_offer();
        let hb = Op::Engine(Command::Heartbeat {
            account: AccountId(SUPPLIER),
            node,
            healthy_gpus: 8,
        });
        let ops = vec![
            (T0, deposit("d1", "1000")),
            (T0 + 1, bid("c1", 3, "40")),
            (T0 + 5_000, Op::Tick),
            (T0 + 6_000, bid("c2", 8, "40")),
            (T0 + 10_000, hb.clone()),
            (T0 + 20_000, hb),
            (T0 + 20_000, Op::Tick),
        ];
        for (t, op) in &ops {
            m.apply(*t, op);
        }
        (m.engine().state_hash(), buyer_balance(&m))
    };
    let (a, b) = (run(), run());
    assert_eq!(a, b);
    assert!(a.1 < dec("1000"));
}

#[test]
fn a_lease_started_on_a_silent_node_bills_nothing_and_the_ledger_agrees() {
    // The node's last heartbeat is T0; the lease starts at T0+10 s (node not yet timed out);
    // at T0+16 s the node times out and the lease ends node_failure at T0, before its start.
    // Found while wiring the ledger: it refused that end (EndBeforeStart) and kept billing.
    let (mut m, _) = market_with_offer();
    m.apply(T0, &deposit("d1", "100"));
    let out = m.apply(T0 + 10_000, &bid("c1", 1, "36"));
    assert!(
        out.engine[0]
            .events
            .iter()
            .any(|e| matches!(e, Event::LeaseStarted { .. }))
    );
    let out = m.apply(T0 + 16_000, &Op::Tick);
    let ended = out.engine[0].events.iter().any(|e| {
        matches!(e, Event::LeaseEnded { reason: exchange::EndReason::NodeFailure, at_ms, .. } if *at_ms == T0)
    });
    assert!(ended, "{:?}", out.engine[0].events);
    assert!(out.ledger_errors.is_empty(), "{:?}", out.ledger_errors);
    assert_eq!(buyer_balance(&m), dec("100"));
    let out = m.apply(T0 + 120_000, &Op::Tick);
    assert!(out.ledger_errors.is_empty());
    assert_eq!(
        buyer_balance(&m),
        dec("100"),
        "nothing billed after the failure"
    );
    assert_eq!(m.ledger().sum_of_balances(), Decimal::ZERO);
}

#[test]
fn resting_bids_hold_funds_so_a_small_deposit_cannot_park_many() {
    // From the fresh-user review: 1 CNY let six GTC bids rest, each needing 0.50 CNY of runway
    // (limit 3 × 1 GPU × 600 s / 3600). Resting bids now hold their runway: two fit, the third
    // is refused, and cancelling one frees its share.
    let mut m = Market::new(MarketConfig::default()).unwrap();
    m.apply(T0, &deposit("d1", "1"));
    let gtc = |coid: &str| {
        Op::Engine(Command::PlaceBid {
            account: AccountId(BUYER),
            bid: BidSpec {
                client_order_id: coid.into(),
                sku: h100(),
                gpus: 1,
                limit: Price::from_decimal(dec("3")).unwrap(),
                kind: LeaseKind::Spot,
                placement: Placement::SingleNode,
                constraints: Constraints::default(),
                duration_s: None,
                tif: TimeInForce::Gtc {
                    expires_at_ms: None,
                },
                min_gpus: None,
            },
        })
    };
    let mut rested = Vec::new();
    for coid in ["g1", "g2"] {
        let out = m.apply(T0, &gtc(coid));
        assert!(out.refusal.is_none(), "{coid}: {:?}", out.refusal);
        rested.push(
            out.engine[0]
                .events
                .iter()
                .find_map(|e| match e {
                    Event::BidRested { bid, .. } => Some(*bid),
                    _ => None,
                })
                .unwrap(),
        );
    }
    let out = m.apply(T0, &gtc("g3"));
    assert_eq!(out.refusal.map(|r| r.code), Some("insufficient_funds"));
    // Found by the API review: a retried bid whose first attempt rests and holds all funds
    // gets the duplicate answer, not insufficient_funds, every time.
    for _ in 0..2 {
        let out = m.apply(T0, &gtc("g2"));
        assert!(out.refusal.is_none());
        assert_eq!(
            out.engine[0].rejection(),
            Some(exchange::RejectReason::DuplicateClientOrderId)
        );
    }
    let out = m.apply(
        T0,
        &Op::Engine(Command::CancelBid {
            account: AccountId(BUYER),
            bid: rested[0],
        }),
    );
    assert!(out.engine[0].rejection().is_none());
    let out = m.apply(T0, &gtc("g4"));
    assert!(
        out.refusal.is_none(),
        "the cancelled bid's share is free again"
    );
    // The reservation is derived from the book, so a restored market agrees.
    let restored = Market::restore(&m.snapshot()).unwrap();
    let mut restored = restored;
    let out = restored.apply(T0, &gtc("g5"));
    assert_eq!(out.refusal.map(|r| r.code), Some("insufficient_funds"));
}

/// Found by the load test: a preemption's replacement lease, still pending its deadline, is
/// failed over when its node dies; the ledger never saw it start, so no failover fact may be
/// sent for it (it reported "lease is unknown (no start fact)").
#[test]
fn a_pending_lease_failed_over_before_it_starts_is_not_billed() {
    let mut m = Market::new(MarketConfig::default()).unwrap();
    let nodes: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|name| listed_node(&mut m, name, 8, terms(8, "20", Some("10"), 30)))
        .collect();
    for (buyer, key) in [(BUYER, "d1"), (BUYER + 1, "d2")] {
        m.apply(
            T0,
            &Op::Deposit {
                key: key.into(),
                buyer,
                amount: dec("100000"),
            },
        );
    }
    let place = |buyer: u64, coid: &str, kind: LeaseKind, limit: &str, gpus: u32| {
        Op::Engine(Command::PlaceBid {
            account: AccountId(buyer),
            bid: BidSpec {
                client_order_id: coid.into(),
                sku: h100(),
                gpus,
                limit: Price::from_decimal(dec(limit)).unwrap(),
                kind,
                placement: Placement::SingleNode,
                constraints: Constraints::default(),
                duration_s: None,
                tif: TimeInForce::Ioc,
                min_gpus: None,
            },
        })
    };
    // Preemptible leases fill both nodes; a spot bid preempts one with 30 s notice.
    for (i, coid) in ["p1", "p2"].iter().enumerate() {
        let out = m.apply(
            T0 + i as i64,
            &place(BUYER, coid, LeaseKind::Preemptible, "10", 8),
        );
        assert!(out.ledger_errors.is_empty());
    }
    let out = m.apply(T0 + 5, &place(BUYER + 1, "s1", LeaseKind::Spot, "25", 8));
    let pending: Vec<_> = out.engine[0]
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Fill {
                lease, start_ms, ..
            } if *start_ms > T0 + 5 => Some(*lease),
            _ => None,
        })
        .collect();
    assert_eq!(
        pending.len(),
        1,
        "the spot lease waits for the notice deadline"
    );
    let victim_node = m.engine().lease(pending[0]).unwrap().node;
    let other = *nodes.iter().find(|n| **n != victim_node).unwrap();
    // The victim's node goes silent; the other keeps heartbeating; past the timeout the
    // pending lease fails over.
    let mut errors = Vec::new();
    for t in [10_000, 20_000] {
        let out = m.apply(
            T0 + t,
            &Op::Engine(Command::Heartbeat {
                account: AccountId(SUPPLIER),
                node: other,
                healthy_gpus: 8,
            }),
        );
        errors.extend(out.ledger_errors);
        let out = m.apply(T0 + t, &Op::Tick);
        errors.extend(out.ledger_errors);
    }
    assert!(
        m.engine().lease(pending[0]).is_none(),
        "the pending lease ended"
    );
    assert!(errors.is_empty(), "{errors:?}");
    m.ledger().check_invariants().unwrap();
}

/// Found by the fresh-user review: with 10 CNY a buyer leased the whole market, one bid at a
/// time, because each bid's runway was checked alone. Running leases need their runway too:
/// at 36 CNY/GPU-hour and 600 s, each GPU needs 6 CNY, so 13 CNY carries two GPUs, not three.
#[test]
fn running_leases_count_in_the_runway_check() {
    let (mut m, _) = market_with_offer();
    m.apply(T0, &deposit("d1", "13"));
    for (i, coid) in ["r1", "r2"].iter().enumerate() {
        let out = m.apply(T0 + i as i64, &bid(coid, 1, "36"));
        assert!(out.refusal.is_none(), "{coid}: {:?}", out.refusal);
        assert!(
            out.engine[0]
                .events
                .iter()
                .any(|e| matches!(e, Event::Fill { .. }))
        );
    }
    let out = m.apply(T0 + 2, &bid("r3", 1, "36"));
    let refusal = out.refusal.expect("the third GPU is refused");
    assert_eq!(refusal.code, "insufficient_funds");
    assert!(
        refusal.message.contains("72.00 CNY/h"),
        "{}",
        refusal.message
    );
    // Ending a lease frees its runway; a restored market agrees.
    let lease = m.engine().leases().next().unwrap().id;
    let out = m.apply(
        T0 + 3,
        &Op::Engine(Command::ReleaseLease {
            account: AccountId(BUYER),
            lease,
        }),
    );
    assert!(out.engine[0].rejection().is_none());
    let mut restored = Market::restore(&m.snapshot()).unwrap();
    let out = restored.apply(T0 + 4, &bid("r4", 1, "36"));
    assert!(out.refusal.is_none(), "{:?}", out.refusal);
}

/// The pre-trade check decides exactly as recomputing the buyer's available balance on every
/// bid (a restored market starts with no cache): bids near the edge of the buyer's funds
/// while its leases run, at times milliseconds to a second apart, with releases, heartbeats
/// and ticks (which accrue charges) in between.
#[test]
fn pre_trade_decisions_equal_an_uncached_recomputation() {
    let (mut m, node) = market_with_offer();
    m.apply(T0, &deposit("d1", "20"));
    let mut t = T0;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let (mut accepted, mut refused) = (0, 0);
    // Steer towards the edge: a run of refusals brings a small deposit, a run of acceptances
    // a release.
    let mut streak = 0i32;
    for i in 0..600u32 {
        rng = rng
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        t += (rng >> 33) as i64 % 900;
        let release = m
            .engine()
            .leases()
            .find(|l| l.buyer == AccountId(BUYER))
            .map(|l| l.id);
        let op = if i % 10 == 0 {
            Op::Engine(Command::Heartbeat {
                account: AccountId(SUPPLIER),
                node,
                healthy_gpus: 8,
            })
        } else if i % 150 == 0 {
            Op::Tick
        } else if streak <= -4 {
            streak = 0;
            deposit(&format!("d{i}"), "2")
        } else if streak >= 3
            && let Some(lease) = release
        {
            streak = 0;
            Op::Engine(Command::ReleaseLease {
                account: AccountId(BUYER),
                lease,
            })
        } else {
            // 36.00–59.99 CNY/GPU-hour: what the bid needs moves in steps of 0.0017 CNY.
            let limit = format!("{}.{:02}", 36 + (rng >> 20) % 24, (rng >> 45) % 100);
            bid(&format!("b{i}"), 1, &limit)
        };
        let mut fresh = Market::restore(&m.snapshot()).unwrap();
        let cached = m.apply(t, &op);
        let exact = fresh.apply(t, &op);
        let r =
            |o: &gateway::market::Outcome| o.refusal.as_ref().map(|r| (r.code, r.message.clone()));
        assert_eq!(r(&cached), r(&exact), "step {i} at +{} ms: {op:?}", t - T0);
        assert_eq!(m.state_hash(), fresh.state_hash(), "step {i}");
        if matches!(op, Op::Engine(Command::PlaceBid { .. })) {
            match cached.refusal {
                Some(ref r) if r.code == "insufficient_funds" => {
                    refused += 1;
                    streak = streak.min(0) - 1;
                }
                Some(_) => {}
                None => {
                    accepted += 1;
                    streak = streak.max(0) + 1;
                }
            }
        }
    }
    assert!(
        accepted > 50 && refused > 50,
        "{accepted} accepted, {refused} refused"
    );
}

/// Found by a fresh-user review: a spread lease failed over onto two nodes (two migrations)
/// sent the ledger two failover facts for one lease; the second was refused ("failover ... was
/// already applied") and counted in `ledger_errors`. One fact per failed lease now, with the
/// latest replacement start.
#[test]
fn a_spread_lease_failed_over_onto_two_nodes_is_one_failover_fact() {
    let mut m = Market::new(MarketConfig::default()).unwrap();
    let offer_on = |m: &mut Market, name: &str, gpus: u32| {
        listed_node(m, name, gpus, terms(gpus, "36", None, 0))
    };
    let big = offer_on(&mut m, "big", 4);
    m.apply(T0, &deposit("d1", "1000"));
    let mut spread = bid("s", 4, "40");
    if let Op::Engine(Command::PlaceBid { bid, .. }) = &mut spread {
        bid.placement = Placement::Spread;
    }
    let out = m.apply(T0, &spread);
    let lease = out.engine[0]
        .events
        .iter()
        .find_map(|e| match e {
            Event::Fill { lease, node, .. } if *node == big => Some(*lease),
            _ => None,
        })
        .expect("the spread bid fills on the 4-GPU node");
    offer_on(&mut m, "small-1", 2);
    offer_on(&mut m, "small-2", 2);
    // 5 s later the big node reports no healthy GPU: its lease ends and fails over 2 + 2.
    let out = m.apply(
        T0 + 5_000,
        &Op::Engine(Command::Heartbeat {
            account: AccountId(SUPPLIER),
            node: big,
            healthy_gpus: 0,
        }),
    );
    let migrated = out.engine[0]
        .events
        .iter()
        .filter(|e| matches!(e, Event::LeaseMigrated { from, .. } if *from == lease))
        .count();
    assert_eq!(migrated, 2, "{:?}", out.engine[0].events);
    assert!(out.ledger_errors.is_empty(), "{:?}", out.ledger_errors);
    // Replaced at once: an outage of 0 s earns no credit.
    let credits = m.ledger().balance(Account::SlaCredits);
    assert_eq!(credits, Decimal::ZERO);
    m.ledger().check_invariants().unwrap();
}

/// An exchange outage (`Resume`) moves provisioning and teardown deadlines in the engine
/// without an event (market-rules §11.9); the lease records that buyers and agents read follow
/// (found by a new-user run: after a restart the API showed the old, already-passed deadline).
#[test]
fn lease_records_follow_deadlines_moved_by_an_outage() {
    let mut m = Market::new(MarketConfig::delivered()).unwrap();
    let node = listed_node(&mut m, "n1", 8, terms(8, "36", None, 0));
    m.apply(T0, &deposit("d1", "1000"));
    let Op::Engine(Command::PlaceBid { bid, .. }) = bid("c1", 2, "40") else {
        unreachable!()
    };
    let launch = gateway::delivery::LaunchSpec {
        ssh_keys: vec![
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM7t3CQcihrH/4tM1K41mGfGrkuwsCkbk7Z2fjczQzrv k"
                .into(),
        ],
        ..Default::default()
    };
    let out = m.apply(
        T0 + 1_000,
        &Op::PlaceBid {
            account: BUYER,
            bid,
            launch: Box::new(launch),
        },
    );
    let lease = out.engine[0]
        .events
        .iter()
        .find_map(|e| match e {
            Event::ProvisionStarted { lease, .. } => Some(*lease),
            _ => None,
        })
        .expect("provisioning");
    assert_eq!(
        out.assignments.len(),
        1,
        "the supplier's assignment carries the spec"
    );
    let deadline = T0 + 1_000 + 180_000;
    let record = |m: &Market| m.deliveries().record(lease).cloned().expect("record");
    assert_eq!(record(&m).provision_deadline_ms, Some(deadline));
    let version = m.deliveries().node_version(node);
    // 100 s of outage, then the sequencer's Resume: the deadline moves by the gap.
    m.apply(T0 + 101_000, &Op::Engine(Command::Resume));
    let moved = m
        .engine()
        .lease(lease)
        .and_then(|l| l.provision_deadline_ms);
    assert_eq!(moved, Some(deadline + 100_000));
    assert_eq!(record(&m).provision_deadline_ms, moved);
    assert!(
        m.deliveries().node_version(node) > version,
        "agents are told"
    );
}

/// Tax details (issue 17): a market without them snapshots (and hashes) as before; set ones
/// are journaled state that survives a snapshot; each close freezes the details of the
/// accounts it numbers a document for, and later changes reach no closed period.
#[test]
fn tax_details_are_state_once_set_and_each_close_freezes_them() {
    use gateway::accounts::Role;
    use gateway::tax::TaxDetails;
    let mut m = Market::new(MarketConfig::default()).unwrap();
    let create = |name: &str, role| Op::CreateAccount {
        name: name.into(),
        role,
        key_hash: None,
    };
    let buyer = m.apply(T0, &create("team-a", Role::Buyer)).account.unwrap();
    let fin = m
        .apply(T0, &create("books", Role::Finance))
        .account
        .unwrap();
    let pay = |key: &str| Op::Deposit {
        key: key.into(),
        buyer,
        amount: dec("10"),
    };
    let close = |key: &str, from_ms, to_ms| Op::ClosePeriod {
        key: key.into(),
        from_ms,
        to_ms,
    };
    // The snapshot's map has a `tax` key (MessagePack fixstr "tax") only once details exist.
    let has_tax = |m: &Market| m.snapshot().windows(4).any(|w| w == b"\xa3tax");
    m.apply(T0 + 1, &pay("d1"));
    assert!(m.apply(T0 + 10, &close("c1", T0, T0 + 5)).refusal.is_none());
    assert!(m.tax().is_empty() && !has_tax(&m));
    let twin = Market::restore(&m.snapshot()).unwrap();
    assert_eq!(twin.state_hash(), m.state_hash());

    let details = TaxDetails {
        name: "上海算力科技有限公司".into(),
        taxpayer_id: "91350100M000100Y43".into(),
        ..TaxDetails::default()
    };
    let set = |account, name: &str| Op::SetTaxDetails {
        account,
        details: TaxDetails {
            name: name.into(),
            ..details.clone()
        },
    };
    let code = |m: &mut Market, op: &Op| m.apply(T0 + 20, op).refusal.map(|r| r.code);
    assert_eq!(code(&mut m, &set(999, "x")), Some("unknown_account"));
    assert_eq!(code(&mut m, &set(fin, "x")), Some("wrong_role"));
    assert!(m.tax().is_empty() && !has_tax(&m));
    assert_eq!(code(&mut m, &set(buyer, &details.name)), None);
    assert_eq!(m.tax().current(buyer), Some(&details));
    assert!(has_tax(&m));
    assert_eq!(m.tax().at_close(1, buyer), None, "period 1 closed before");

    // Period 2 freezes the details; a later change and a replayed close leave it as it was.
    m.apply(T0 + 30, &pay("d2"));
    assert!(
        m.apply(T0 + 50, &close("c2", T0 + 5, T0 + 40))
            .refusal
            .is_none()
    );
    assert_eq!(m.tax().at_close(2, buyer), Some(&details));
    assert_eq!(code(&mut m, &set(buyer, "renamed Ltd")), None);
    assert!(
        m.apply(T0 + 60, &close("c2", T0 + 5, T0 + 40))
            .refusal
            .is_none()
    );
    assert_eq!(m.tax().at_close(2, buyer), Some(&details));
    assert_eq!(
        m.tax().current(buyer).map(|d| d.name.as_str()),
        Some("renamed Ltd")
    );
    let twin = Market::restore(&m.snapshot()).unwrap();
    assert_eq!((twin.state_hash(), twin.tax()), (m.state_hash(), m.tax()));
}

/// Issue 25: a heartbeat carrying the agent's clock offset (`Op::Heartbeat`) heartbeats the
/// node as the engine's command does, and keeps the offset with the heartbeat's time for the
/// node view: journaled state (snapshot, state hash; left out while empty, so markets without
/// offsets keep their bytes), unchanged by a heartbeat without one or by a refused one, and
/// an old journal's `Op::Heartbeat` without the field decodes with none.
#[test]
fn a_heartbeats_clock_offset_is_state_kept_for_the_node_view() {
    use gateway::market::AgentClock;
    let (mut m, node) = market_with_offer();
    let has_clocks = |m: &Market| m.snapshot().windows(13).any(|w| w == b"\xacagent_clocks");
    let before = m.state_hash();
    let beat = |offset: Option<i64>| Op::Heartbeat {
        account: SUPPLIER,
        node: node.0,
        healthy_gpus: 8,
        clock_offset_ms: offset,
    };
    let out = m.apply(T0 + 1_000, &beat(None));
    assert!(out.refusal.is_none() && out.engine[0].rejection().is_none());
    assert!(out.leases_version.is_some());
    assert_eq!(m.agent_clock(node), None);
    assert!(!has_clocks(&m));
    assert_ne!(m.state_hash(), before, "it heartbeated the node");

    m.apply(T0 + 2_000, &beat(Some(600_000)));
    let want = AgentClock {
        offset_ms: 600_000,
        at_ms: T0 + 2_000,
    };
    assert_eq!(m.agent_clock(node), Some(want));
    assert_eq!(
        m.engine().node(node).map(|n| n.last_heartbeat_ms),
        Some(T0 + 2_000)
    );
    assert!(has_clocks(&m));
    // Without an offset: kept as it was. Another supplier's heartbeat: refused, kept.
    m.apply(T0 + 3_000, &beat(None));
    let refused = m.apply(
        T0 + 4_000,
        &Op::Heartbeat {
            account: SUPPLIER + 1,
            node: node.0,
            healthy_gpus: 8,
            clock_offset_ms: Some(-5),
        },
    );
    assert!(refused.engine[0].rejection().is_some());
    assert_eq!(m.agent_clock(node), Some(want));
    let twin = Market::restore(&m.snapshot()).unwrap();
    assert_eq!(twin.state_hash(), m.state_hash());
    assert_eq!(twin.agent_clock(node), Some(want));
    m.apply(T0 + 5_000, &beat(Some(-40)));
    assert_ne!(twin.state_hash(), m.state_hash(), "the offset is hashed");

    // A record written before the field existed (compact MessagePack: the variant's fields
    // as an array of three) decodes with no offset.
    let bytes = gateway::sequencer::encode(&beat(Some(1))).unwrap();
    let full = gateway::sequencer::decode(&bytes).unwrap();
    assert!(matches!(
        full,
        Op::Heartbeat {
            clock_offset_ms: Some(1),
            ..
        }
    ));
    let bytes = gateway::sequencer::encode(&beat(None)).unwrap();
    let fields = rmp_serde::to_vec(&(SUPPLIER, node.0, 8u32, None::<i64>)).unwrap();
    let old_fields = rmp_serde::to_vec(&(SUPPLIER, node.0, 8u32)).unwrap();
    assert!(bytes.ends_with(&fields), "the fields close the record");
    let mut short = bytes[..bytes.len() - fields.len()].to_vec();
    short.extend_from_slice(&old_fields);
    assert!(matches!(
        gateway::sequencer::decode(&short),
        Ok(Op::Heartbeat {
            clock_offset_ms: None,
            ..
        })
    ));
}

/// Issue 26: an attestation (`Op::AttestNode`) and a per-GPU heartbeat (`Op::GpuHealth`) are
/// applied as the engine's commands and keep what the engine does not (host facts, reasons)
/// as journaled state: in the snapshot and state hash only once present (markets without them
/// keep their bytes), unchanged by a refused command, carried through snapshot and restore.
#[test]
fn attestations_and_gpu_health_keep_their_facts_as_state() {
    use gateway::node_facts::{GpuFacts, GpuProblem, HostFacts, Nic, healthy_mask};
    let (mut m, node) = market_with_offer();
    let has = |m: &Market, key: &[u8]| m.snapshot().windows(key.len()).any(|w| w == key);
    let host = |model: &str| HostFacts {
        driver_version: "550.54.15".into(),
        cuda_version: "12.4".into(),
        gpus: (0..8)
            .map(|i| GpuFacts {
                index: i,
                uuid: format!("GPU-m-{i}"),
                model: model.into(),
                memory_mib: 81_559,
                pcie_gen: Some(5),
                pcie_width: Some(16),
                pcie_max_gen: Some(5),
                pcie_max_width: Some(16),
                mig_mode: Some(false),
            })
            .collect(),
        nics: vec![Nic {
            name: "mlx5_0".into(),
            gbps: 400,
        }],
        cpu_cores: None,
        ram_mib: None,
        disk_gb: None,
    };
    assert!(!has(&m, b"host_facts") && !has(&m, b"gpu_problems"));
    // Refused (unknown model): nothing kept.
    let out = m.apply(
        T0 + 1_000,
        &Op::AttestNode {
            account: SUPPLIER,
            node: node.0,
            host: host("NVIDIA Tesla K80"),
        },
    );
    assert!(out.engine[0].rejection().is_some());
    assert!(m.host_facts(node).is_none() && !has(&m, b"host_facts"));
    let before = m.state_hash();
    let out = m.apply(
        T0 + 2_000,
        &Op::AttestNode {
            account: SUPPLIER,
            node: node.0,
            host: host("NVIDIA H100 80GB HBM3"),
        },
    );
    assert!(out.engine[0].rejection().is_none());
    assert_eq!(m.host_facts(node), Some(&host("NVIDIA H100 80GB HBM3")));
    assert!(
        m.engine()
            .attestation(node)
            .is_some_and(|a| a.mismatch.is_none())
    );
    assert!(has(&m, b"host_facts"));
    assert_ne!(m.state_hash(), before);

    let problems = vec![GpuProblem {
        index: 5,
        uuid: Some("GPU-m-5".into()),
        reason: Some("XID 79".into()),
    }];
    let out = m.apply(
        T0 + 3_000,
        &Op::GpuHealth {
            account: SUPPLIER,
            node: node.0,
            healthy_mask: healthy_mask(8, [5]),
            problems: problems.clone(),
            clock_offset_ms: Some(12),
        },
    );
    assert!(out.engine[0].rejection().is_none());
    assert!(out.leases_version.is_some());
    assert_eq!(m.gpu_problems(node), problems.as_slice());
    assert_eq!(
        m.engine().node(node).map(|n| n.healthy_mask),
        Some(0b1101_1111)
    );
    assert_eq!(m.agent_clock(node).map(|c| c.offset_ms), Some(12));
    // Another supplier's: refused, kept.
    let refused = m.apply(
        T0 + 4_000,
        &Op::GpuHealth {
            account: SUPPLIER + 1,
            node: node.0,
            healthy_mask: 0xff,
            problems: vec![],
            clock_offset_ms: None,
        },
    );
    assert!(refused.engine[0].rejection().is_some());
    assert_eq!(m.gpu_problems(node), problems.as_slice());
    let twin = Market::restore(&m.snapshot()).unwrap();
    assert_eq!(twin.state_hash(), m.state_hash());
    assert_eq!(twin.gpu_problems(node), problems.as_slice());
    assert_eq!(twin.host_facts(node), m.host_facts(node));
    // Every GPU healthy again: the reasons are gone (and so is the key from the snapshot).
    m.apply(
        T0 + 5_000,
        &Op::GpuHealth {
            account: SUPPLIER,
            node: node.0,
            healthy_mask: 0xff,
            problems: vec![],
            clock_offset_ms: None,
        },
    );
    assert!(m.gpu_problems(node).is_empty() && !has(&m, b"gpu_problems"));
    // The journal codec carries both.
    for op in [
        Op::AttestNode {
            account: SUPPLIER,
            node: node.0,
            host: host("NVIDIA H100 80GB HBM3"),
        },
        Op::GpuHealth {
            account: SUPPLIER,
            node: node.0,
            healthy_mask: 0x7f,
            problems,
            clock_offset_ms: None,
        },
    ] {
        let bytes = gateway::sequencer::encode(&op).unwrap();
        assert_eq!(gateway::sequencer::decode(&bytes).unwrap(), op);
    }
}

/// Issue 26 (docs/settlement.md "SLA credit"): an offer posted with SLA terms
/// ([`Op::PostOfferSla`]) freezes them on its leases at fill; a node failure is credited by
/// them (hand-computed below), a lease on a plain offer by today's rule. Both start at T0 on
/// n1 at 36 CNY/GPU-hour (2 GPUs: 72 CNY/h, 0.02 per second), booked for 2 h; n1's GPUs fail
/// at T0 + 100 s; the failover lands on n2 at 45 and is ready at T0 + 190 s.
#[test]
fn a_node_failure_is_credited_by_the_terms_of_the_lease_s_offer() {
    use gateway::delivery::{AccessDetails, LaunchSpec, Report};
    use settlement::{CreditCap, LeaseId as LedgerLease, SlaTerms};
    let sla = SlaTerms {
        availability_bp: 9990,
        multiple: 20,
        outage_cap_s: 600,
        cap: CreditCap::MonthlyFeePct(50),
        non_delivery_credit: false,
    };
    for with_terms in [true, false] {
        let mut m = Market::new(MarketConfig::delivered()).unwrap();
        let n1 = listed_sla_node(&mut m, "n1", with_terms.then_some(sla));
        let n2 = listed_node(&mut m, "n2", 8, terms(8, "45", None, 0));
        let offer = m
            .engine()
            .node(n1)
            .and_then(|n| n.offer)
            .expect("n1's offer");
        assert_eq!(m.offer_sla(offer), with_terms.then_some(sla));
        m.apply(T0, &deposit("d1", "1000"));
        let Op::Engine(Command::PlaceBid { mut bid, .. }) = bid("c1", 2, "50") else {
            unreachable!()
        };
        bid.duration_s = Some(7_200);
        let out = m.apply(
            T0,
            &Op::PlaceBid {
                account: BUYER,
                bid,
                launch: Box::new(LaunchSpec::default()),
            },
        );
        assert!(out.refusal.is_none(), "{:?}", out.refusal);
        let lease = out.engine[0]
            .events
            .iter()
            .find_map(|e| match e {
                Event::Fill { lease, node, .. } if *node == n1 => Some(*lease),
                _ => None,
            })
            .expect("filled on n1, the cheaper");
        assert_eq!(
            m.lease_sla(lease),
            with_terms.then_some(sla),
            "frozen at fill"
        );
        let ready = |m: &mut Market, at: i64, lease: exchange::LeaseId| {
            let out = m.apply(
                at,
                &Op::Report(Report::Ready {
                    account: SUPPLIER,
                    lease: lease.0,
                    access: AccessDetails::default(),
                }),
            );
            assert!(out.ledger_errors.is_empty(), "{:?}", out.ledger_errors);
        };
        ready(&mut m, T0 + 10_000, lease);
        beat(&mut m, &[n1, n2], T0 + 10_000, T0 + 100_000);
        // Started: the ledger holds the terms now, the gateway no longer.
        let id = LedgerLease(lease.0);
        assert_eq!(m.ledger().sla_terms(id), with_terms.then_some(sla));
        assert_eq!(m.lease_sla(lease), with_terms.then_some(sla));
        let out = m.apply(
            T0 + 100_000,
            &Op::Engine(Command::Heartbeat {
                account: AccountId(SUPPLIER),
                node: n1,
                healthy_gpus: 0,
            }),
        );
        let to = out.engine[0]
            .events
            .iter()
            .find_map(|e| match e {
                Event::LeaseMigrated { from, to } if *from == lease => Some(*to),
                _ => None,
            })
            .expect("failed over");
        assert_eq!(m.engine().lease(to).map(|l| l.node), Some(n2));
        assert_eq!(m.lease_sla(to), None, "n2's offer has no terms");
        beat(&mut m, &[n2], T0 + 100_000, T0 + 190_000);
        ready(&mut m, T0 + 190_000, to);
        let f = m.ledger().failover_credit(id).expect("credited");
        // Outage 100 s → 190 s = 90 s (under both outage caps). Dearer replacement: (45 − 36)
        // × 2 GPUs × 7010 s of the 2 h term left at T0 + 190 s / 3600 = 35.05.
        assert_eq!(f.outage_ms, 90_000);
        assert_eq!(f.price_difference, dec("35.05"));
        if with_terms {
            // 20 × 72 × 90 / 3600 = 36.00; cap 50 % × 72 × 720 = 25 920: 36.00 + 35.05.
            assert_eq!(f.outage_credit, dec("36"));
            assert_eq!(f.cap, dec("25920"));
            assert_eq!(f.credit, dec("71.05"));
        } else {
            // Today's rule: 10 × 72 × 90 / 3600 = 18.00, capped at what the lease paid for
            // its 90 s from ready (T0 + 10 s) to the failure: 90 × 0.02 = 1.80.
            assert_eq!(f.outage_credit, dec("18"));
            assert_eq!(f.cap, dec("1.8"));
            assert_eq!(f.credit, dec("1.8"));
        }
        let totals = m.ledger().lease_totals(id).expect("totals");
        assert_eq!(totals.sla_credit, f.credit);
        m.ledger().check_invariants().unwrap();
        // The terms are state: a snapshot keeps them and hashes alike; nothing is left over.
        let r = Market::restore(&m.snapshot()).unwrap();
        assert_eq!(r.state_hash(), m.state_hash());
        assert_eq!(r.offer_sla(offer), with_terms.then_some(sla));
        assert_eq!(r.lease_sla(lease), with_terms.then_some(sla));
        // The offer leaves the market: its terms go with it.
        m.apply(
            T0 + 200_000,
            &Op::Engine(Command::WithdrawOffer {
                account: AccountId(SUPPLIER),
                offer,
            }),
        );
        assert_eq!(m.offer_sla(offer), None);
    }
}

/// Issue 26: terms with a non-delivery credit credit a lease never delivered from its
/// provisioning deadline to its replacement's ready time (docs/settlement.md "Non-delivery
/// credit"). The lease fills at T0 (deadline T0 + 180 s), n1 reports it failed at T0 + 60 s,
/// the replacement on n2 (45) is ready at T0 + 480 s: 300 s of outage.
#[test]
fn a_lease_never_delivered_is_credited_when_its_terms_say_so() {
    use gateway::delivery::{AccessDetails, LaunchSpec, Report};
    use settlement::{CreditCap, LeaseId as LedgerLease, SlaTerms};
    let sla = SlaTerms {
        availability_bp: 9900,
        multiple: 10,
        outage_cap_s: 3_600,
        cap: CreditCap::MonthlyFeePct(50),
        non_delivery_credit: true,
    };
    let mut m = Market::new(MarketConfig::delivered()).unwrap();
    let n1 = listed_sla_node(&mut m, "n1", Some(sla));
    // n2 gives its leases 600 s to provision, so the replacement is ready in time.
    let mut slow = terms(8, "45", None, 0);
    slow.provision_s = 600;
    let n2 = listed_node(&mut m, "n2", 8, slow);
    m.apply(T0, &deposit("d1", "1000"));
    let Op::Engine(Command::PlaceBid { mut bid, .. }) = bid("c1", 2, "50") else {
        unreachable!()
    };
    bid.duration_s = Some(7_200);
    let out = m.apply(
        T0,
        &Op::PlaceBid {
            account: BUYER,
            bid,
            launch: Box::new(LaunchSpec::default()),
        },
    );
    let lease = out.engine[0]
        .events
        .iter()
        .find_map(|e| match e {
            Event::Fill { lease, node, .. } if *node == n1 => Some(*lease),
            _ => None,
        })
        .expect("filled on n1");
    beat(&mut m, &[n1, n2], T0 + 10_000, T0 + 60_000);
    let out = m.apply(
        T0 + 60_000,
        &Op::Report(Report::Failed {
            account: SUPPLIER,
            lease: lease.0,
            reason: "driver crash".into(),
            cause: Default::default(),
        }),
    );
    assert!(out.ledger_errors.is_empty(), "{:?}", out.ledger_errors);
    let to = out.engine[0]
        .events
        .iter()
        .find_map(|e| match e {
            Event::LeaseMigrated { from, to } if *from == lease => Some(*to),
            _ => None,
        })
        .expect("failed over");
    let id = LedgerLease(lease.0);
    assert!(m.ledger().failover_credit(id).is_none(), "not before ready");
    assert_eq!(m.lease_sla(lease), Some(sla), "the ledger keeps them");
    beat(&mut m, &[n2], T0 + 60_000, T0 + 480_000);
    let out = m.apply(
        T0 + 480_000,
        &Op::Report(Report::Ready {
            account: SUPPLIER,
            lease: to.0,
            access: AccessDetails::default(),
        }),
    );
    assert!(out.ledger_errors.is_empty(), "{:?}", out.ledger_errors);
    let f = m.ledger().failover_credit(id).expect("credited");
    // 10 × 72 × 300 / 3600 = 60.00; dearer (45 − 36) × 2 × 6720 s left / 3600 = 33.60.
    assert_eq!(f.outage_from_ms, T0 + 180_000);
    assert_eq!(f.outage_ms, 300_000);
    assert_eq!(f.outage_credit, dec("60"));
    assert_eq!(f.price_difference, dec("33.6"));
    assert_eq!(f.credit, dec("93.6"));
    assert_eq!(
        m.ledger()
            .balance(Account::Buyer(settlement::AccountId(BUYER))),
        dec("1093.6")
    );
    m.ledger().check_invariants().unwrap();
    // The new operation goes through the journal codec.
    let op = Op::PostOfferSla {
        account: SUPPLIER,
        node: n1.0,
        terms: terms(8, "36", None, 0),
        sla,
    };
    let bytes = gateway::sequencer::encode(&op).unwrap();
    assert_eq!(gateway::sequencer::decode(&bytes).unwrap(), op);
}

/// Registers an H100 node of 8 GPUs at T0 and posts 8 GPUs at 36 on it, with `sla` terms
/// ([`Op::PostOfferSla`]) or without (the engine's `PostOffer`, as before issue 26).
fn listed_sla_node(
    m: &mut Market,
    name: &str,
    sla: Option<settlement::SlaTerms>,
) -> exchange::NodeId {
    let Some(sla) = sla else {
        return listed_node(m, name, 8, terms(8, "36", None, 0));
    };
    let out = m.apply(
        T0,
        &Op::Engine(Command::RegisterNode {
            account: AccountId(SUPPLIER),
            spec: NodeSpec {
                name: name.into(),
                sku: h100(),
                gpus: 8,
                region: "cn-east-2".into(),
                jurisdiction: Jurisdiction(*b"CN"),
                interconnect: Interconnect::Infiniband,
                nvlink: true,
                fabric: None,
            },
        }),
    );
    let node = match out.engine[0].events[0] {
        Event::NodeRegistered { node, .. } => node,
        ref e => panic!("{e:?}"),
    };
    let out = m.apply(
        T0,
        &Op::PostOfferSla {
            account: SUPPLIER,
            node: node.0,
            terms: terms(8, "36", None, 0),
            sla,
        },
    );
    assert!(out.refusal.is_none() && out.engine[0].rejection().is_none());
    node
}

/// Heartbeats `nodes` (all GPUs healthy) every 10 s over [`from`, `to`), ms since epoch.
fn beat(m: &mut Market, nodes: &[exchange::NodeId], from: i64, to: i64) {
    let mut t = from;
    while t < to {
        for node in nodes {
            m.apply(
                t,
                &Op::Engine(Command::Heartbeat {
                    account: AccountId(SUPPLIER),
                    node: *node,
                    healthy_gpus: 8,
                }),
            );
        }
        t += 10_000;
    }
}
