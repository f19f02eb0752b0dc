//! The feed hub on a sequencer with a test clock: a buyer connection gets the failover of its
//! lease as `lease_ended` (node_failure) then `lease_migrated` naming the new lease, and the
//! new lease's fill — in that order, in one step.

use exchange::{
    AccountId, BidSpec, Catalog, Command, Constraints, Event, Interconnect, Jurisdiction,
    LeaseKind, NodeSpec, OfferTerms, Placement, Price, TimeInForce,
};
use gateway::feed::Outbox;
use gateway::journal::EmbeddedJournal;
use gateway::market::{MarketConfig, Op};
use gateway::sequencer::{self, Clock, Sequencer, SnapshotPolicy};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

const T0: i64 = 1_767_225_600_000;

#[derive(Clone)]
struct TestClock(Arc<AtomicI64>);

impl Clock for TestClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

#[tokio::test]
async fn failover_reaches_the_buyer_as_end_then_migration() {
    let dir = tempfile::tempdir().unwrap();
    let clock = TestClock(Arc::new(AtomicI64::new(T0)));
    let journal = EmbeddedJournal::open(dir.path(), 0).await.unwrap();
    let (seq, h) = Sequencer::recover(
        journal,
        clock.clone(),
        MarketConfig::default(),
        SnapshotPolicy::default(),
    )
    .await
    .unwrap();
    sequencer::spawn(seq);
    let feed = gateway::feed::spawn(h.clone()).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let (close, _c) = tokio::sync::watch::channel(None);
    feed.connect(Some(100), Outbox { tx, close }).await;
    let h100 = Catalog::builtin().lookup("H100-80G").unwrap();
    let mut nodes = Vec::new();
    for (name, price) in [("a", 20), ("b", 21)] {
        let c = h
            .submit(Op::Engine(Command::RegisterNode {
                account: AccountId(1),
                spec: NodeSpec {
                    name: name.into(),
                    sku: h100,
                    gpus: 8,
                    region: "cn-east-2".into(),
                    jurisdiction: Jurisdiction(*b"CN"),
                    interconnect: Interconnect::Infiniband,
                    nvlink: true,
                    fabric: None,
                },
            }))
            .await
            .unwrap();
        let node = match c.outcome.engine[0].events[0] {
            Event::NodeRegistered { node, .. } => node,
            ref e => panic!("{e:?}"),
        };
        h.submit(Op::Engine(Command::PostOffer {
            account: AccountId(1),
            node,
            terms: OfferTerms {
                gpus: 8,
                spot_price: Price::from_decimal(price.into()).unwrap(),
                preemptible_price: None,
                min_lease_s: 0,
                max_lease_s: 86_400,
                available_until_ms: T0 + 86_400_000,
                notice_s: 0,
                provision_s: 180,
            },
        }))
        .await
        .unwrap();
        nodes.push(node);
    }
    h.submit(Op::Deposit {
        key: "d".into(),
        buyer: 100,
        amount: 10_000.into(),
    })
    .await
    .unwrap();
    h.submit(Op::Engine(Command::PlaceBid {
        account: AccountId(100),
        bid: BidSpec {
            client_order_id: "b".into(),
            sku: h100,
            gpus: 2,
            limit: Price::from_decimal(25.into()).unwrap(),
            kind: LeaseKind::Spot,
            placement: Placement::SingleNode,
            constraints: Constraints::default(),
            duration_s: None,
            tif: TimeInForce::Ioc,
            min_gpus: None,
        },
    }))
    .await
    .unwrap();
    // Node b keeps heartbeating, node a goes silent past the 15 s timeout.
    clock.0.store(T0 + 10_000, Ordering::SeqCst);
    h.submit(Op::Engine(Command::Heartbeat {
        account: AccountId(1),
        node: nodes[1],
        healthy_gpus: 8,
    }))
    .await
    .unwrap();
    clock.0.store(T0 + 16_000, Ordering::SeqCst);
    h.submit(Op::Tick).await.unwrap();
    let mut types = Vec::new();
    let mut msgs: Vec<Value> = Vec::new();
    while let Ok(Some(m)) =
        tokio::time::timeout(std::time::Duration::from_millis(300), rx.recv()).await
    {
        let v: Value = serde_json::from_str(&m).unwrap();
        types.push(v["type"].as_str().unwrap().to_string());
        msgs.push(v);
    }
    let first_lease =
        msgs.iter().find(|m| m["type"] == "lease_started").unwrap()["lease_id"].clone();
    let end = msgs
        .iter()
        .position(|m| m["type"] == "lease_ended")
        .expect("lease_ended");
    let mig = msgs
        .iter()
        .position(|m| m["type"] == "lease_migrated")
        .expect("lease_migrated");
    assert!(end < mig, "{types:?}");
    assert_eq!(msgs[end]["reason"], "node_failure");
    assert_eq!(msgs[end]["lease_id"], first_lease);
    assert_eq!(msgs[mig]["from_lease_id"], first_lease);
    let new_lease = msgs[mig]["to_lease_id"].clone();
    assert!(
        msgs.iter()
            .any(|m| m["type"] == "lease_started" && m["lease_id"] == new_lease),
        "{types:?}"
    );
}
