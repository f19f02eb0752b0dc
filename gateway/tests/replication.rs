//! Redis replicas and `WAIT` (issue 18; `RedisConfig::wait_replicas`, docs/journal.md
//! "Replicas and WAIT"): with `WAIT 1`, every command the sequencer acknowledged is on the
//! replica when the primary is SIGKILLed, so a promoted replica loses nothing acknowledged;
//! with the replica unresponsive, commands answer `Unavailable` (outcome unknown) within the
//! wait bound instead of being acknowledged unreplicated, and the service carries on once
//! the replica answers again.

use crate::support;
use gateway::journal::{RedisConfig, RedisJournal};
use gateway::market::{MarketConfig, Op};
use gateway::sequencer::{self, Sequencer, SequencerError, SnapshotPolicy, SystemClock};
use rust_decimal::Decimal;
use std::time::{Duration, Instant};

const WAIT_MS: u64 = 300;

fn deposit(key: String) -> Op {
    Op::Deposit {
        key,
        buyer: 4242,
        amount: Decimal::ONE,
    }
}

fn waiting(url: String) -> RedisConfig {
    let mut c = RedisConfig::new(url);
    c.wait_replicas = 1;
    c.wait_timeout = Duration::from_millis(WAIT_MS);
    c
}

fn no_snapshots() -> SnapshotPolicy {
    SnapshotPolicy {
        every_commands: u64::MAX,
        every_ms: i64::MAX,
        trim_journal: false,
    }
}

/// A primary with a synced replica, and a sequencer on the primary with `WAIT 1`.
async fn primary_and_replica() -> (
    (tempfile::TempDir, tempfile::TempDir),
    support::RedisServer,
    support::RedisServer,
    sequencer::SequencerHandle,
    tokio::task::JoinHandle<gateway::market::Market>,
) {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let primary = support::RedisServer::start(d1.path(), true);
    let replica = support::RedisServer::start(d2.path(), true);
    replica.replicate(&primary).await;
    let journal = RedisJournal::connect(waiting(primary.url())).await.unwrap();
    let (seq, h) = Sequencer::recover(
        journal,
        SystemClock,
        MarketConfig::default(),
        no_snapshots(),
    )
    .await
    .unwrap();
    ((d1, d2), primary, replica, h, sequencer::spawn(seq))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_wait_a_promoted_replica_holds_every_acknowledged_command() {
    let (_dirs, mut primary, replica, h, task) = primary_and_replica().await;
    // Four clients submit deposits; the primary is killed while they run.
    let mut clients = Vec::new();
    for c in 0..4 {
        let h = h.clone();
        clients.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for k in 0.. {
                let op = deposit(format!("c{c}-{k}"));
                match h.submit(op.clone()).await {
                    Ok(done) => acked.push((done.seq, op)),
                    Err(_) => return acked,
                }
            }
            acked
        }));
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    primary.kill();
    let mut acked = Vec::new();
    for c in clients {
        acked.extend(c.await.unwrap());
    }
    assert!(acked.len() > 20, "only {} acknowledged", acked.len());
    drop(h);
    task.abort();
    replica.promote().await;
    let on_replica = support::journal_ops(&replica.url()).await;
    for (seq, op) in &acked {
        assert_eq!(
            on_replica.get(seq),
            Some(op),
            "acknowledged seq {seq} lost in the failover"
        );
    }
    println!(
        "{} commands acknowledged with WAIT 1; all {} on the promoted replica (it holds {})",
        acked.len(),
        acked.len(),
        on_replica.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unresponsive_replica_turns_acknowledgements_into_503_then_the_service_recovers() {
    let (_dirs, _primary, replica, h, task) = primary_and_replica().await;
    let first = h
        .submit(deposit("before".into()))
        .await
        .expect("acknowledged");
    replica.pause();
    let started = Instant::now();
    let r = h.submit(deposit("unreplicated".into())).await;
    assert!(matches!(r, Err(SequencerError::Unavailable(_))), "{r:?}");
    assert!(
        started.elapsed() < Duration::from_millis(WAIT_MS + 1_000),
        "took {:?}",
        started.elapsed()
    );
    replica.resume();
    // The in-doubt deposit is on the primary: it settles (applied) and the next commits.
    let mut next = None;
    for k in 0..50 {
        match h.submit(deposit(format!("after-{k}"))).await {
            Ok(c) => {
                next = Some(c);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let next = next.expect("commits once the replica answers");
    assert_eq!(
        next.seq,
        first.seq + 2,
        "the unreplicated deposit was applied once"
    );
    drop(h);
    let live = task.await.unwrap();
    let on_replica = support::journal_ops(&replica.url()).await;
    assert_eq!(on_replica.len() as u64, next.seq, "the replica caught up");
    let _ = live;
}
