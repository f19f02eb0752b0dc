//! The sequencer over real journals: group commit, recovery equal to the live state and to a
//! shadow run, snapshots, and a paused Redis failing fast without losing or doubling a command.

use crate::support;
use exchange::{
    AccountId, BidSpec, Catalog, Command, Constraints, Event, Interconnect, Jurisdiction,
    LeaseKind, NodeSpec, OfferTerms, Placement, Price, TimeInForce,
};
use gateway::journal::{EmbeddedJournal, Entry, Journal};
use gateway::market::{Market, MarketConfig, Op};
use gateway::sequencer::{self, Clock, RecoveryError, Sequencer, SequencerHandle, SnapshotPolicy};
use rust_decimal::Decimal;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// A clock tests move by hand (ms since epoch).
#[derive(Clone)]
struct TestClock(Arc<AtomicI64>);

impl Clock for TestClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

const T0: i64 = 1_767_225_600_000;
const NODES: u64 = 20;
const BIDS: u64 = 400;

fn sku() -> exchange::SkuId {
    Catalog::builtin().lookup("RTX4090-24G").unwrap()
}

fn no_snapshots(trim: bool) -> SnapshotPolicy {
    SnapshotPolicy {
        every_commands: u64::MAX,
        every_ms: i64::MAX,
        trim_journal: trim,
    }
}

fn bid(i: u64) -> Op {
    Op::Engine(Command::PlaceBid {
        account: AccountId(100 + i % 4),
        bid: BidSpec {
            client_order_id: format!("c{i}"),
            sku: sku(),
            gpus: 1 + (i % 4) as u32,
            limit: Price::from_ticks(19_000 + (i as i64 % 7) * 500).unwrap(),
            kind: if i.is_multiple_of(3) {
                LeaseKind::Preemptible
            } else {
                LeaseKind::Spot
            },
            placement: Placement::Spread,
            constraints: Constraints::default(),
            duration_s: Some(60 + i * 7 % 600),
            tif: if i.is_multiple_of(2) {
                TimeInForce::Ioc
            } else {
                TimeInForce::Gtc {
                    expires_at_ms: None,
                }
            },
            min_gpus: None,
        },
    })
}

/// Funds buyers, registers nodes and offers them; returns the node ids.
async fn set_up_market(h: &SequencerHandle) -> Vec<exchange::NodeId> {
    for b in 0..4u64 {
        let c = h
            .submit(Op::Deposit {
                key: format!("dep-{b}"),
                buyer: 100 + b,
                amount: Decimal::from(10_000),
            })
            .await
            .unwrap();
        assert!(c.outcome.refusal.is_none());
    }
    let mut nodes = Vec::new();
    for i in 0..NODES {
        let c = h
            .submit(Op::Engine(Command::RegisterNode {
                account: AccountId(1 + i % 3),
                spec: NodeSpec {
                    name: format!("n{i}"),
                    sku: sku(),
                    gpus: 8,
                    region: "cn-east-2".into(),
                    jurisdiction: Jurisdiction(*b"CN"),
                    interconnect: Interconnect::Roce,
                    nvlink: false,
                    fabric: None,
                },
            }))
            .await
            .unwrap();
        match c.outcome.engine[0].events[0] {
            Event::NodeRegistered { node, .. } => nodes.push(node),
            ref e => panic!("{e:?}"),
        }
    }
    for (i, node) in nodes.iter().enumerate() {
        let c = h
            .submit(Op::Engine(Command::PostOffer {
                account: AccountId(1 + i as u64 % 3),
                node: *node,
                terms: OfferTerms {
                    gpus: 8,
                    spot_price: Price::from_ticks(19_800 + (i as i64 % 5) * 100).unwrap(),
                    preemptible_price: Price::from_ticks(11_900).ok(),
                    min_lease_s: 0,
                    max_lease_s: 86_400,
                    available_until_ms: T0 + 86_400_000,
                    notice_s: 5,
                    provision_s: 180,
                },
            }))
            .await
            .unwrap();
        assert!(c.outcome.engine[0].rejection().is_none(), "{:?}", c.outcome);
    }
    nodes
}

/// Bids from 8 concurrent clients (so batches form), the clock moving 250 ms per bid, with a
/// tick every 10 bids. Returns the number of fills.
async fn trade(h: &SequencerHandle, clock: &TestClock) -> usize {
    let mut clients = Vec::new();
    for k in 0..8u64 {
        let h = h.clone();
        let clock = clock.clone();
        clients.push(tokio::spawn(async move {
            let mut fills = 0;
            for i in (k..BIDS).step_by(8) {
                clock.0.fetch_add(250, Ordering::SeqCst);
                let op = if i % 10 == 0 { Op::Tick } else { bid(i) };
                let c = h.submit(op).await.unwrap();
                fills += c
                    .outcome
                    .engine
                    .iter()
                    .flat_map(|o| &o.events)
                    .filter(|e| matches!(e, Event::Fill { .. }))
                    .count();
            }
            fills
        }));
    }
    let mut fills = 0;
    for c in clients {
        fills += c.await.unwrap();
    }
    fills
}

/// Every journaled entry, in order (asserting the sequence numbers are contiguous).
async fn read_all<J: Journal>(journal: &mut J) -> Vec<Entry> {
    let mut entries: Vec<Entry> = Vec::new();
    loop {
        let after = entries.last().map_or(0, |e| e.seq);
        let page = journal.read_after(after, 1000).await.unwrap();
        if page.is_empty() {
            return entries;
        }
        for e in page {
            assert_eq!(e.seq, entries.last().map_or(0, |l| l.seq) + 1, "contiguous");
            entries.push(e);
        }
    }
}

/// Replays every journaled entry into a fresh market.
async fn shadow_run<J: Journal>(journal: &mut J) -> (Market, u64) {
    let mut shadow = Market::new(MarketConfig::default()).unwrap();
    let entries = read_all(journal).await;
    for e in &entries {
        shadow.apply_entry(
            e.seq,
            e.timestamp_ms,
            &sequencer::decode(&e.payload).unwrap(),
        );
    }
    (shadow, entries.last().map_or(0, |e| e.seq))
}

/// Recovers a sequencer from the embedded journal in `dir`, without periodic snapshots.
async fn recover_embedded(
    dir: &std::path::Path,
    clock: &TestClock,
) -> Result<(Sequencer<EmbeddedJournal, TestClock>, SequencerHandle), RecoveryError> {
    let journal = EmbeddedJournal::open(dir, 0).await.unwrap();
    Sequencer::recover(
        journal,
        clock.clone(),
        MarketConfig::default(),
        no_snapshots(false),
    )
    .await
}

#[tokio::test]
async fn recovery_and_shadow_run_equal_the_live_state() {
    let dir = tempfile::tempdir().unwrap();
    let clock = TestClock(Arc::new(AtomicI64::new(T0)));
    let (seq, h) = recover_embedded(dir.path(), &clock).await.unwrap();
    let task = sequencer::spawn(seq);
    set_up_market(&h).await;
    let fills = trade(&h, &clock).await;
    assert!(fills > 30, "the workload trades ({fills} fills)");
    drop(h);
    let live = task.await.unwrap();
    let live_hash = live.state_hash();
    assert_eq!(live.ledger().sum_of_balances(), Decimal::ZERO);

    // Recovery: the snapshot taken at shutdown, then replay (nothing after it).
    let (recovered, _h) = recover_embedded(dir.path(), &clock).await.unwrap();
    assert_eq!(recovered.market().state_hash(), live_hash);
    let last = recovered.last_seq();
    drop(recovered);
    drop(_h);

    // Shadow run over the whole journal (not trimmed) gives the same state.
    let mut journal = EmbeddedJournal::open(dir.path(), 0).await.unwrap();
    let (shadow, replayed) = shadow_run(&mut journal).await;
    assert_eq!(replayed, last);
    assert_eq!(shadow.state_hash(), live_hash);
}

#[tokio::test]
async fn periodic_snapshots_trim_and_recovery_replays_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let clock = TestClock(Arc::new(AtomicI64::new(T0)));
    let policy = SnapshotPolicy {
        every_commands: 97,
        every_ms: i64::MAX,
        trim_journal: true,
    };
    let journal = EmbeddedJournal::open(dir.path(), 0).await.unwrap();
    let (seq, h) = Sequencer::recover(journal, clock.clone(), MarketConfig::default(), policy)
        .await
        .unwrap();
    let task = sequencer::spawn(seq);
    set_up_market(&h).await;
    trade(&h, &clock).await;
    // A few commands after the last periodic snapshot, then a crash-like stop: abort the task
    // so no final snapshot is taken.
    let mut last_hash = None;
    for i in 0..5u64 {
        let c = h.submit(bid(10_000 + i)).await.unwrap();
        last_hash = Some(c.seq);
    }
    drop(h);
    let live = task.await.unwrap();
    let live_hash = live.state_hash();
    assert!(last_hash.is_some());

    let mut journal = EmbeddedJournal::open(dir.path(), 0).await.unwrap();
    let snap = journal
        .load_snapshot()
        .await
        .unwrap()
        .expect("snapshots were taken");
    assert!(snap.seq > 97);
    // Entries up to the snapshot before the last were trimmed; the last interval is kept
    // for followers behind.
    match journal.read_after(0, 10).await {
        Err(gateway::journal::JournalError::Trimmed { trimmed_upto, .. }) => {
            assert!(
                trimmed_upto >= 97 && trimmed_upto < snap.seq,
                "{trimmed_upto} {}",
                snap.seq
            )
        }
        other => assert!(
            snap.seq < 2 * 97,
            "not trimmed: {other:?} (snapshot {})",
            snap.seq
        ),
    }
    assert!(
        journal.read_after(snap.seq - 1, 10).await.is_ok(),
        "the last snapshot interval is readable"
    );
    drop(journal);
    let journal = EmbeddedJournal::open(dir.path(), 0).await.unwrap();
    let (recovered, _h) = Sequencer::recover(journal, clock, MarketConfig::default(), policy)
        .await
        .unwrap();
    assert_eq!(recovered.market().state_hash(), live_hash);
}

/// A sequencer on `redis` with the test market set up: its journal config, clock, handle and
/// task.
async fn market_on_redis(
    redis: &support::RedisServer,
) -> (
    gateway::journal::RedisConfig,
    TestClock,
    SequencerHandle,
    tokio::task::JoinHandle<gateway::market::Market>,
) {
    let config = gateway::journal::RedisConfig::new(redis.url());
    let clock = TestClock(Arc::new(AtomicI64::new(T0)));
    let journal = gateway::journal::RedisJournal::connect(config.clone())
        .await
        .unwrap();
    let (seq, h) = Sequencer::recover(
        journal,
        clock.clone(),
        MarketConfig::default(),
        no_snapshots(false),
    )
    .await
    .unwrap();
    let task = sequencer::spawn(seq);
    set_up_market(&h).await;
    (config, clock, h, task)
}

/// A paused Redis: commands fail fast with `Unavailable` and nothing is applied then; when it
/// resumes, the in-doubt batch is settled from the journal and the service carries on by
/// itself. The live state equals a recovery from the journal afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_redis_fails_fast_and_recovers_without_loss_or_doubling() {
    use gateway::journal::RedisJournal;
    use gateway::sequencer::SequencerError;
    let dir = tempfile::tempdir().unwrap();
    let redis = support::RedisServer::start(dir.path(), true);
    let (config, clock, h, task) = market_on_redis(&redis).await;
    let before = h.inspect().await.unwrap();

    redis.pause();
    let started = std::time::Instant::now();
    let r = h.submit(bid(1)).await;
    assert!(matches!(r, Err(SequencerError::Unavailable(_))), "{r:?}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "fails fast"
    );
    // Nothing unacknowledged was applied.
    let during = h.submit(bid(2)).await;
    assert!(matches!(during, Err(SequencerError::Unavailable(_))));
    redis.resume();

    // The service recovers by itself: the next command commits.
    let mut ok = None;
    for i in 0..50 {
        match h.submit(bid(100 + i)).await {
            Ok(c) => {
                ok = Some(c);
                break;
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
        }
    }
    let c = ok.expect("commits again after Redis resumes");
    // The first in-doubt write landed once Redis resumed (the append had been sent), so it
    // was applied, once, before the new command: sequence numbers stay contiguous.
    assert!(c.seq > before.last_seq);
    drop(h);
    let live = task.await.unwrap();

    let journal = RedisJournal::connect(config).await.unwrap();
    let (recovered, _h) =
        Sequencer::recover(journal, clock, MarketConfig::default(), no_snapshots(false))
            .await
            .unwrap();
    assert_eq!(recovered.market().state_hash(), live.state_hash());
    let mut journal =
        gateway::journal::RedisJournal::connect(gateway::journal::RedisConfig::new(redis.url()))
            .await
            .unwrap();
    let (shadow, _) = shadow_run(&mut journal).await;
    assert_eq!(shadow.state_hash(), live.state_hash());
}

/// A command answered 503 "outcome unknown" while Redis was paused becomes visible on its
/// own once Redis answers again (within `IN_DOUBT_RETRY_MS` and a reconnect), with no later
/// command to push it: reads alone see it applied. (It once stayed invisible until the next
/// command arrived.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_doubt_command_settles_without_a_later_command() {
    use gateway::journal::RedisJournal;
    use gateway::sequencer::{IN_DOUBT_RETRY_MS, SequencerError};
    let dir = tempfile::tempdir().unwrap();
    let redis = support::RedisServer::start(dir.path(), true);
    let (config, _clock, h, task) = market_on_redis(&redis).await;
    let before = h.inspect().await.unwrap();
    redis.pause();
    let r = h.submit(bid(1)).await;
    assert!(matches!(r, Err(SequencerError::Unavailable(_))), "{r:?}");
    redis.resume();
    let resumed = std::time::Instant::now();
    // Only reads from here on (an inspect appends nothing).
    let settled = loop {
        let now = h.inspect().await.unwrap();
        if now.last_seq > before.last_seq {
            break now;
        }
        assert!(
            resumed.elapsed() < std::time::Duration::from_millis(IN_DOUBT_RETRY_MS + 3_000),
            "the in-doubt bid is still invisible"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    println!(
        "in-doubt bid applied {} ms after Redis resumed, with no later command",
        resumed.elapsed().as_millis()
    );
    // Exactly the bid: one entry, and the replay of the journal equals the live state.
    assert_eq!(settled.last_seq, before.last_seq + 1);
    drop(h);
    let live = task.await.unwrap();
    let mut journal = RedisJournal::connect(config).await.unwrap();
    let (shadow, _) = shadow_run(&mut journal).await;
    assert_eq!(shadow.state_hash(), live.state_hash());
}

/// Redis killed and restarted under load (AOF everysec): commands fail while it is down and
/// succeed after; every acknowledged command survives and recovery equals the live state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_mid_load_keeps_every_acknowledged_command() {
    use gateway::journal::RedisJournal;
    let dir = tempfile::tempdir().unwrap();
    let mut redis = support::RedisServer::start(dir.path(), true);
    let (config, clock, h, task) = market_on_redis(&redis).await;
    let mut acked = Vec::new();
    let mut failed = 0;
    for i in 0..200u64 {
        if i == 80 {
            // Give AOF everysec its second to reach the disk, then kill -9 and restart.
            tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
            redis.kill();
        }
        if i == 120 {
            redis.restart();
        }
        clock.0.fetch_add(100, Ordering::SeqCst);
        match h.submit(bid(i)).await {
            Ok(c) => acked.push((c.seq, c.op.clone())),
            Err(_) => {
                failed += 1;
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
    }
    assert!(failed > 0, "commands failed while Redis was down");
    assert!(acked.len() > 100);
    drop(h);
    let live = task.await.unwrap();
    let mut journal = RedisJournal::connect(config.clone()).await.unwrap();
    let mut stored = std::collections::BTreeMap::new();
    let mut after = 0;
    loop {
        let page = journal.read_after(after, 1000).await.unwrap();
        if page.is_empty() {
            break;
        }
        for e in page {
            after = e.seq;
            stored.insert(e.seq, sequencer::decode(&e.payload).unwrap());
        }
    }
    for (seq, op) in &acked {
        assert_eq!(
            stored.get(seq),
            Some(op),
            "acknowledged {seq} survived the restart"
        );
    }
    let (recovered, _h) =
        Sequencer::recover(journal, clock, MarketConfig::default(), no_snapshots(false))
            .await
            .unwrap();
    assert_eq!(recovered.market().state_hash(), live.state_hash());
}

/// Recovery refuses a damaged journal with a clear error instead of a partial state.
#[tokio::test]
async fn recovery_refuses_a_corrupt_journal() {
    use gateway::journal::embedded::ENTRIES_TABLE;
    use redb::ReadableTable;
    let dir = tempfile::tempdir().unwrap();
    let clock = TestClock(Arc::new(AtomicI64::new(T0)));
    let (seq, h) = recover_embedded(dir.path(), &clock).await.unwrap();
    let task = sequencer::spawn(seq);
    set_up_market(&h).await;
    drop(h);
    // Stop without the final snapshot so recovery must replay the damaged entry.
    task.abort();
    let _ = task.await;
    // Flip one byte of entry 7's stored record.
    {
        let path = EmbeddedJournal::file_path(dir.path(), 0);
        let db = redb::Database::open(&path).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_table(ENTRIES_TABLE).unwrap();
            let mut rec = t.get(7u64).unwrap().unwrap().value().to_vec();
            let last = rec.len() - 1;
            rec[last] ^= 0x55;
            t.insert(7u64, rec.as_slice()).unwrap();
        }
        tx.commit().unwrap();
    }
    let r = recover_embedded(dir.path(), &clock).await;
    let err = r.err().expect("recovery refused");
    assert!(
        err.to_string().contains("corrupt")
            || err.to_string().contains("checksum")
            || err.to_string().contains("CRC"),
        "{err}"
    );
}

/// An outage of the exchange (here: a restart 40 s after the last journaled command) does not
/// fail every node: the first batch after it is led by a journaled `Resume`, the nodes stay
/// online and keep the rest of their timeout to report; those that do not report fail then. Replay
/// of the journal reproduces the state. A gap under the timeout adds no `Resume`.
#[tokio::test]
async fn a_restart_after_an_outage_resumes_without_failing_the_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let clock = TestClock(Arc::new(AtomicI64::new(T0)));
    let (seq, h) = recover_embedded(dir.path(), &clock).await.unwrap();
    let task = sequencer::spawn(seq);
    let nodes = set_up_market(&h).await;
    // 10 s later (under the timeout): no Resume.
    clock.0.store(T0 + 10_000, Ordering::SeqCst);
    let c = h.submit(Op::Tick).await.unwrap();
    let before = c.seq;
    drop(h);
    let _ = task.await.unwrap();
    let online_nodes = |market: &Market| {
        market
            .engine()
            .nodes()
            .filter(|n| n.status == exchange::state::NodeStatus::Online)
            .count()
    };
    // Down for 40 s, then a restart: the first command is a heartbeat of node 0 only.
    clock.0.store(T0 + 50_000, Ordering::SeqCst);
    let (seq, h) = recover_embedded(dir.path(), &clock).await.unwrap();
    let task = sequencer::spawn(seq);
    let c = h
        .submit(Op::Engine(Command::Heartbeat {
            account: AccountId(1),
            node: nodes[0],
            healthy_gpus: 8,
        }))
        .await
        .unwrap();
    assert_eq!(
        c.seq,
        before + 2,
        "a Resume was journaled before the heartbeat"
    );
    let online = h.read(move |m, _| online_nodes(m)).await.unwrap();
    assert_eq!(online, NODES as usize, "no node failed at the restart");
    // The nodes had been silent 10 s before the outage (registered at T0, last command at
    // +10 s): their heartbeats moved by the 40 s outage to +40 s, so they keep the remaining
    // 5 s. At +54 s all are online; at +56 s only node 0 (heartbeat at +50 s) is.
    clock.0.store(T0 + 54_000, Ordering::SeqCst);
    h.submit(Op::Tick).await.unwrap();
    assert_eq!(
        h.read(move |m, _| online_nodes(m)).await.unwrap(),
        NODES as usize
    );
    clock.0.store(T0 + 56_000, Ordering::SeqCst);
    h.submit(Op::Tick).await.unwrap();
    assert_eq!(h.read(move |m, _| online_nodes(m)).await.unwrap(), 1);
    drop(h);
    let live = task.await.unwrap();
    let mut j = EmbeddedJournal::open(dir.path(), 0).await.unwrap();
    let entries = read_all(&mut j).await;
    let resumes: Vec<u64> = entries
        .iter()
        .filter(|e| {
            matches!(
                sequencer::decode(&e.payload),
                Ok(Op::Engine(Command::Resume))
            )
        })
        .map(|e| e.seq)
        .collect();
    assert_eq!(resumes, vec![before + 1]);
    drop(j);
    let (recovered, _h) = recover_embedded(dir.path(), &clock).await.unwrap();
    assert_eq!(recovered.market().state_hash(), live.state_hash());
}
