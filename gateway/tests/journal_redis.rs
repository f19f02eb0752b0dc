//! Redis-only journal behaviour: crash + restart with AOF, a paused server, AOF checks, key
//! layout, an unreachable server.

use std::time::{Duration, Instant};

use crate::support::{RedisServer, WarnCapture, entries};
use gateway::journal::redis::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_OP_TIMEOUT, PING_TIMEOUT};
use gateway::journal::{Journal, JournalError, RedisConfig, RedisJournal, SnapshotRecord};

/// Slack on top of a timeout for scheduling on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(700);

/// Retries `last_seq` until the journal has reconnected (Redis restarting / loading the AOF).
async fn last_seq_eventually(j: &mut RedisJournal) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match j.last_seq().await {
            Ok(n) => return n,
            Err(JournalError::Unavailable(e)) if Instant::now() < deadline => {
                eprintln!("waiting for redis: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("last_seq failed: {e}"),
        }
    }
}

#[tokio::test]
async fn killed_and_restarted_server_keeps_acknowledged_entries() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = RedisServer::start(dir.path(), true);
    let mut j = RedisJournal::connect(RedisConfig::new(server.url()))
        .await
        .expect("connect");
    let all = entries(1, 500);
    for chunk in all.chunks(50) {
        j.append(chunk).await.expect("append");
    }
    let snap = SnapshotRecord {
        seq: 400,
        format_version: 1,
        state_hash: [4; 32],
        bytes: vec![7; 4096],
    };
    j.save_snapshot(&snap).await.expect("snapshot");

    // SIGKILL right after the acknowledgements: no graceful AOF flush/rewrite.
    server.restart();

    // The same journal instance reconnects by itself.
    assert_eq!(last_seq_eventually(&mut j).await, 500);
    let mut got = Vec::new();
    let mut after = 0;
    loop {
        let page = j.read_after(after, 128).await.expect("read");
        let Some(last) = page.last() else { break };
        after = last.seq;
        got.extend(page);
    }
    assert_eq!(got, all);
    assert_eq!(j.load_snapshot().await, Ok(Some(snap)));
    j.append(&entries(501, 502))
        .await
        .expect("append after restart");
    assert_eq!(j.last_seq().await, Ok(502));
}

#[tokio::test]
async fn paused_server_fails_fast_then_recovers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path(), true);
    let mut j = RedisJournal::connect(RedisConfig::new(server.url()))
        .await
        .expect("connect");
    j.append(&entries(1, 3)).await.expect("append");

    server.pause();
    let batch = entries(4, 6);
    let t = Instant::now();
    let r = j.append(&batch).await;
    let took = t.elapsed();
    assert!(matches!(r, Err(JournalError::Unavailable(_))), "{r:?}");
    assert!(
        took >= DEFAULT_OP_TIMEOUT,
        "returned before the timeout: {took:?}"
    );
    assert!(took < DEFAULT_OP_TIMEOUT + SLACK, "not fast: {took:?}");

    // Next call reconnects: TCP connects (kernel backlog) but the handshake hangs.
    let t = Instant::now();
    assert!(matches!(j.ping().await, Err(JournalError::Unavailable(_))));
    let took = t.elapsed();
    assert!(
        took < DEFAULT_CONNECT_TIMEOUT + PING_TIMEOUT + SLACK,
        "ping not fast: {took:?}"
    );

    server.resume();
    // Either the timed-out script ran once Redis resumed (last_seq 6) or it never reached
    // Redis (3); nothing else.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let seen = last_seq_eventually(&mut j).await;
    assert!(seen == 3 || seen == 6, "last_seq {seen}");
    eprintln!("after resume, before the retry: last_seq {seen}");
    // The timed-out append may or may not have run once Redis resumed (unknown outcome):
    // retrying the same batch is Ok either way and nothing is doubled.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match j.append(&batch).await {
            Ok(()) => break,
            Err(JournalError::Unavailable(e)) if Instant::now() < deadline => {
                eprintln!("retrying: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("retry failed: {e}"),
        }
    }
    assert_eq!(j.last_seq().await, Ok(6));
    assert_eq!(j.read_after(0, 100).await, Ok(entries(1, 6)));
    assert_eq!(j.ping().await, Ok(()));
}

#[tokio::test]
async fn aof_off_warns_and_require_aof_refuses() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path(), false);

    let capture = WarnCapture::start();
    let mut j = RedisJournal::connect(RedisConfig::new(server.url()))
        .await
        .expect("AOF off is allowed without require_aof");
    assert_eq!(j.aof_status().appendonly, Some(false));
    assert!(
        capture.any_contains("REDIS AOF IS OFF"),
        "no warning captured: {:?}",
        capture.messages.lock().expect("lock")
    );
    j.append(&entries(1, 1)).await.expect("append works");

    let mut cfg = RedisConfig::new(server.url());
    cfg.require_aof = true;
    match RedisJournal::connect(cfg).await {
        Err(JournalError::Config(msg)) => assert!(msg.contains("appendonly"), "{msg}"),
        other => panic!("expected Config, got {other:?}"),
    }
}

#[tokio::test]
async fn aof_on_is_reported_and_accepted_with_require_aof() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path(), true);
    let mut cfg = RedisConfig::new(server.url());
    cfg.require_aof = true;
    let j = RedisJournal::connect(cfg).await.expect("connect");
    assert_eq!(j.aof_status().appendonly, Some(true));
    assert_eq!(j.aof_status().appendfsync.as_deref(), Some("everysec"));
}

#[tokio::test]
async fn key_layout_is_as_documented() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path(), true);
    let mut cfg = RedisConfig::new(server.url());
    cfg.prefix = "xch".into();
    cfg.shard = 3;
    let mut j = RedisJournal::connect(cfg).await.expect("connect");
    assert_eq!(j.keys().journal, "xch:{shard-3}:journal");
    assert_eq!(j.keys().snapshot, "xch:{shard-3}:snapshot");
    assert_eq!(j.keys().meta, "xch:{shard-3}:meta");

    let e = entries(1, 2);
    j.append(&e).await.expect("append");
    let snap = SnapshotRecord {
        seq: 2,
        format_version: 9,
        state_hash: [1; 32],
        bytes: b"state".to_vec(),
    };
    j.save_snapshot(&snap).await.expect("snapshot");
    j.trim(1).await.expect("trim");

    let mut c = server.raw().await;
    let t: String = redis::cmd("TYPE")
        .arg("xch:{shard-3}:journal")
        .query_async(&mut c)
        .await
        .expect("type");
    assert_eq!(t, "stream");
    let items: Vec<(String, Vec<Vec<u8>>)> = redis::cmd("XRANGE")
        .arg("xch:{shard-3}:journal")
        .arg("-")
        .arg("+")
        .query_async(&mut c)
        .await
        .expect("xrange");
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].0, "2-0");
    // One stream entry per batch, id = the batch's last seq, one field `batch`:
    // [version 1][count u32 LE], then per entry [seq u64 LE][len u32 LE][record], the record
    // being [version 1][timestamp_ms i64 LE][crc u32 LE][payload].
    let mut batch = vec![1u8];
    batch.extend_from_slice(&2u32.to_le_bytes());
    for x in &e {
        let crc = gateway::journal::record::entry_crc(x.seq, x.timestamp_ms, &x.payload);
        let mut rec = vec![1u8];
        rec.extend_from_slice(&x.timestamp_ms.to_le_bytes());
        rec.extend_from_slice(&crc.to_le_bytes());
        rec.extend_from_slice(&x.payload);
        batch.extend_from_slice(&x.seq.to_le_bytes());
        batch.extend_from_slice(&(rec.len() as u32).to_le_bytes());
        batch.extend_from_slice(&rec);
    }
    assert_eq!(items[0].1, vec![b"batch".to_vec(), batch]);
    let fields: Vec<Vec<u8>> = redis::cmd("HMGET")
        .arg("xch:{shard-3}:snapshot")
        .arg(&["seq", "format_version", "state_hash", "bytes"])
        .query_async(&mut c)
        .await
        .expect("hmget");
    assert_eq!(
        fields,
        vec![b"2".to_vec(), b"9".to_vec(), vec![1; 32], b"state".to_vec()]
    );
    let trimmed: String = redis::cmd("HGET")
        .arg("xch:{shard-3}:meta")
        .arg("trimmed_upto")
        .query_async(&mut c)
        .await
        .expect("hget");
    assert_eq!(trimmed, "1");
    // All keys hash to one Redis Cluster slot: the first {...} of each is the same tag.
    for key in [&j.keys().journal, &j.keys().snapshot, &j.keys().meta] {
        let open = key.find('{').expect("has a hash tag");
        let close = key[open..].find('}').expect("tag closes") + open;
        assert_eq!(&key[open + 1..close], "shard-3", "{key}");
    }
}

#[tokio::test]
async fn snapshot_corruption_detected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path(), true);
    let mut j = RedisJournal::connect(RedisConfig::new(server.url()))
        .await
        .expect("connect");
    j.append(&entries(1, 2)).await.expect("append");
    let snap = SnapshotRecord {
        seq: 2,
        format_version: 1,
        state_hash: [2; 32],
        bytes: b"engine state".to_vec(),
    };
    j.save_snapshot(&snap).await.expect("snapshot");
    let mut c = server.raw().await;
    let _: i64 = redis::cmd("HSET")
        .arg(&j.keys().snapshot)
        .arg("bytes")
        .arg("engine statf")
        .query_async(&mut c)
        .await
        .expect("hset");
    assert!(matches!(
        j.load_snapshot().await,
        Err(JournalError::Corrupt(_))
    ));
}

#[tokio::test]
async fn unreachable_server_is_unavailable_fast() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = RedisServer::start(dir.path(), true);
    let url = server.url();
    server.kill();
    let t = Instant::now();
    match RedisJournal::connect(RedisConfig::new(url)).await {
        Err(JournalError::Unavailable(_)) => {}
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(t.elapsed() < DEFAULT_CONNECT_TIMEOUT + SLACK);
}

#[tokio::test]
async fn bad_prefix_is_config_error() {
    let mut cfg = RedisConfig::new("redis://127.0.0.1:1");
    cfg.prefix = "a{b}".into();
    assert!(matches!(
        RedisJournal::connect(cfg).await,
        Err(JournalError::Config(_))
    ));
}

/// Pages always reflect the journal at the time of the read: entries appended between two
/// pages show up in the next one, and an empty page means caught up.
#[tokio::test]
async fn pages_see_entries_appended_between_reads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path(), true);
    let mut j = RedisJournal::connect(RedisConfig::new(server.url()))
        .await
        .expect("connect");
    j.append(&entries(1, 3)).await.expect("append");
    assert_eq!(j.read_after(0, 2).await, Ok(entries(1, 2)));
    j.append(&entries(4, 5)).await.expect("append");
    assert_eq!(j.read_after(2, 2).await, Ok(entries(3, 4)));
    assert_eq!(j.read_after(0, 3).await, Ok(entries(1, 3)));
    assert_eq!(j.read_after(1, 10).await, Ok(entries(2, 5)));
    assert_eq!(j.read_after(5, 10).await, Ok(vec![]));
}

/// Reads across a Redis restart: the next read reconnects and succeeds.
#[tokio::test]
async fn reads_reconnect_after_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = RedisServer::start(dir.path(), true);
    let mut j = RedisJournal::connect(RedisConfig::new(server.url()))
        .await
        .expect("connect");
    j.append(&entries(1, 6)).await.expect("append");
    assert_eq!(j.read_after(0, 2).await, Ok(entries(1, 2)));
    server.restart();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match j.read_after(2, 2).await {
            Ok(page) => {
                assert_eq!(page, entries(3, 4));
                break;
            }
            Err(JournalError::Unavailable(e)) if Instant::now() < deadline => {
                eprintln!("waiting for redis: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("read failed: {e}"),
        }
    }
    assert_eq!(j.read_after(4, 10).await, Ok(entries(5, 6)));
}

/// Reads authenticate and select the database of the URL.
#[tokio::test]
async fn reads_authenticate_and_select_the_database() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path(), true);
    server.config_set("requirepass", "s3cret").await;
    let url = format!("redis://:s3cret@127.0.0.1:{}/3", server.port);
    let mut j = RedisJournal::connect(RedisConfig::new(url))
        .await
        .expect("connect");
    j.append(&entries(1, 4)).await.expect("append");
    assert_eq!(j.read_after(0, 10).await, Ok(entries(1, 4)));
    let url = format!("redis://:s3cret@127.0.0.1:{}", server.port);
    let mut other_db = RedisJournal::connect(RedisConfig::new(url))
        .await
        .expect("connect");
    assert_eq!(other_db.read_after(0, 10).await, Ok(vec![]));
}

/// Entries stored one per stream entry by older gateways — record format 1 (fields `ts`,
/// `crc`, `payload`) and format 2 (one field `rec`) — still read, checksum verified, beside
/// batches (format 3), and an append continuing such a journal writes a batch.
#[tokio::test]
async fn format_1_and_2_entries_still_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path(), true);
    let mut j = RedisJournal::connect(RedisConfig::new(server.url()))
        .await
        .expect("connect");
    let key = j.keys().journal.clone();
    let e = entries(1, 7);
    let mut raw = server.raw().await;
    for x in &e[..3] {
        let mut crc = gateway::journal::record::entry_crc(x.seq, x.timestamp_ms, &x.payload);
        if x.seq == 3 {
            crc ^= 1;
        }
        let _: String = redis::cmd("XADD")
            .arg(&key)
            .arg(format!("{}-0", x.seq))
            .arg("ts")
            .arg(x.timestamp_ms)
            .arg("crc")
            .arg(crc)
            .arg("payload")
            .arg(x.payload.as_slice())
            .query_async(&mut raw)
            .await
            .expect("xadd");
    }
    for x in &e[3..5] {
        let _: String = redis::cmd("XADD")
            .arg(&key)
            .arg(format!("{}-0", x.seq))
            .arg("rec")
            .arg(gateway::journal::record::encode_entry(x))
            .query_async(&mut raw)
            .await
            .expect("xadd");
    }
    assert_eq!(j.read_after(0, 2).await, Ok(entries(1, 2)));
    match j.read_after(2, 10).await {
        Err(JournalError::Corrupt(msg)) => assert!(msg.contains("entry 3"), "{msg}"),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert_eq!(j.read_after(3, 10).await, Ok(entries(4, 5)));
    // An append continuing an older journal writes one batch entry; a retry of format-2
    // entries together with new ones is recognised (same records) and writes only the new.
    j.append(&e[3..6]).await.expect("append overlapping 4..=6");
    j.append(&e[6..]).await.expect("append 7");
    assert_eq!(j.read_after(3, 10).await, Ok(entries(4, 7)));
    let ids: Vec<(String, Vec<Vec<u8>>)> = redis::cmd("XRANGE")
        .arg(&key)
        .arg("-")
        .arg("+")
        .query_async(&mut raw)
        .await
        .expect("xrange");
    let ids: Vec<&str> = ids.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, vec!["1-0", "2-0", "3-0", "4-0", "5-0", "6-0", "7-0"]);
}

/// Pages cut batches: a page that ends inside a stored batch is filled from it, and the next
/// page starts inside it; a page limit below one batch still returns full pages.
#[tokio::test]
async fn pages_cut_stored_batches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path(), true);
    let mut j = RedisJournal::connect(RedisConfig::new(server.url()))
        .await
        .expect("connect");
    let all = entries(1, 40);
    for chunk in [&all[..1], &all[1..17], &all[17..18], &all[18..40]] {
        j.append(chunk).await.expect("append");
    }
    for limit in [1usize, 3, 16, 17, 39, 40, 100] {
        let mut after = 0;
        let mut got = Vec::new();
        loop {
            let page = j.read_after(after, limit).await.expect("page");
            if page.is_empty() {
                break;
            }
            assert_eq!(page.len(), limit.min(40 - after as usize), "limit {limit}");
            after = page.last().map_or(after, |e| e.seq);
            got.extend(page);
        }
        assert_eq!(got, all, "limit {limit}");
    }
    assert_eq!(j.read_after(10, 5).await, Ok(entries(11, 15)));
    assert_eq!(j.read_after(16, 2).await, Ok(entries(17, 18)));
}

/// The tail's wait (`wait_read_after`) answers the new entries in the same round trip: from
/// inside a stored batch too, nothing after a timeout, `more` when the count of batches was
/// reached, and `Reread` where what follows does not start right after the seq (a trim), so
/// the checked read can say `Trimmed`.
#[tokio::test]
async fn the_tails_wait_reads_what_follows_or_asks_for_a_checked_read() {
    use gateway::journal::redis::Tailed;
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path(), true);
    let mut j = RedisJournal::connect(RedisConfig::new(server.url()))
        .await
        .expect("connect");
    let block = Duration::from_millis(50);
    let t = Instant::now();
    assert!(matches!(
        j.wait_read_after(0, block, 64).await,
        Ok(Tailed::Nothing)
    ));
    assert!(t.elapsed() >= block, "{:?}", t.elapsed());
    let all = entries(1, 40);
    for chunk in [&all[..1], &all[1..17], &all[17..18], &all[18..40]] {
        j.append(chunk).await.expect("append");
    }
    let got = |r: Result<Tailed, JournalError>| match r {
        Ok(Tailed::Entries { entries, more }) => (entries, more),
        other => panic!("expected entries, got {other:?}"),
    };
    // Everything, in four stored batches.
    assert_eq!(
        got(j.wait_read_after(0, block, 64).await),
        (all.clone(), false)
    );
    // From inside the second batch (seqs 2..=17): the batch is cut.
    assert_eq!(
        got(j.wait_read_after(5, block, 64).await),
        (entries(6, 40), false)
    );
    // Two batches asked, two came: more may be there.
    assert_eq!(
        got(j.wait_read_after(0, block, 2).await),
        (entries(1, 17), true)
    );
    // At the end: nothing.
    assert!(matches!(
        j.wait_read_after(40, block, 64).await,
        Ok(Tailed::Nothing)
    ));
    // An append while the wait blocks wakes it with the entry.
    let url = server.url();
    let writer = tokio::spawn(async move {
        let mut w = RedisJournal::connect(RedisConfig::new(url))
            .await
            .expect("connect");
        tokio::time::sleep(Duration::from_millis(100)).await;
        w.append(&entries(41, 41)).await.expect("append");
    });
    assert_eq!(
        got(j.wait_read_after(40, Duration::from_secs(5), 64).await),
        (entries(41, 41), false)
    );
    writer.await.unwrap();
    // Trimmed behind a snapshot at 18: a wait from 0 sees seq 19 first and asks for the
    // checked read, which says Trimmed.
    j.save_snapshot(&SnapshotRecord {
        seq: 18,
        format_version: 1,
        state_hash: [0; 32],
        bytes: b"s".to_vec(),
    })
    .await
    .expect("snapshot");
    j.trim(18).await.expect("trim");
    assert!(matches!(
        j.wait_read_after(0, block, 64).await,
        Ok(Tailed::Reread)
    ));
    assert!(matches!(
        j.read_after(0, 10).await,
        Err(JournalError::Trimmed { .. })
    ));
    assert_eq!(
        got(j.wait_read_after(18, block, 64).await).0,
        entries(19, 41)
    );
}

/// A journal deleted behind its snapshot (the snapshot and meta keys left) is refused at
/// recovery: replay must end at the journal's last seq, not silently at the snapshot.
#[tokio::test]
async fn recovery_refuses_a_journal_that_ends_before_its_snapshot() {
    use gateway::market::{MarketConfig, Op};
    use gateway::sequencer::{self, RecoveryError, Sequencer, SnapshotPolicy, SystemClock};
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path(), true);
    let policy = SnapshotPolicy {
        every_commands: u64::MAX,
        every_ms: i64::MAX,
        trim_journal: false,
    };
    let open = || async {
        RedisJournal::connect(RedisConfig::new(server.url()))
            .await
            .expect("connect")
    };
    let (seq, h) = Sequencer::recover(open().await, SystemClock, MarketConfig::default(), policy)
        .await
        .expect("recover empty");
    let task = sequencer::spawn(seq);
    for _ in 0..5 {
        h.submit(Op::Tick).await.expect("tick");
    }
    drop(h);
    task.await.expect("sequencer"); // takes the shutdown snapshot at seq 5
    // Intact: recovers at 5.
    let (seq, _h) = Sequencer::recover(open().await, SystemClock, MarketConfig::default(), policy)
        .await
        .expect("recover intact");
    assert_eq!(seq.last_seq(), 5);
    drop(seq);
    let mut raw = server.raw().await;
    let key = open().await.keys().journal.clone();
    let _: () = redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut raw)
        .await
        .expect("del");
    match Sequencer::recover(open().await, SystemClock, MarketConfig::default(), policy).await {
        Err(RecoveryError::Journal(JournalError::Corrupt(msg))) => {
            assert!(msg.contains("journal's last seq is 0"), "{msg}")
        }
        Err(e) => panic!("expected Corrupt, got {e}"),
        Ok(_) => panic!("recovered from a deleted journal"),
    }
}

/// A journal key of the wrong type is damage (`Corrupt`), also when the failing command sits
/// inside the read's transaction.
#[tokio::test]
async fn a_journal_key_of_the_wrong_type_is_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path(), true);
    let mut j = RedisJournal::connect(RedisConfig::new(server.url()))
        .await
        .expect("connect");
    let mut raw = server.raw().await;
    let _: () = redis::cmd("SET")
        .arg(&j.keys().journal)
        .arg("not a stream")
        .query_async(&mut raw)
        .await
        .expect("set");
    assert!(matches!(
        j.read_after(0, 10).await,
        Err(JournalError::Corrupt(m)) if m.contains("WRONGTYPE")
    ));
    assert!(matches!(
        j.append(&entries(1, 1)).await,
        Err(JournalError::Corrupt(_))
    ));
}

/// Issue 25: a Redis restart took down every follower started with `--require-aof`: while
/// Redis loads its AOF it answers `LOADING`, the reconnect's AOF check read that as "CONFIG
/// GET refused" and the process exited 70 ("cannot verify redis appendonly"); a gateway
/// started during the load exited blaming its configuration. `LOADING` is an outage like any
/// other: a connect or a call during the load is `Unavailable` (retried), and once the load
/// ends both a new journal and one connected before the kill read everything, with the AOF
/// check passing. `--key-load-delay` makes the load take seconds.
#[tokio::test]
async fn a_restart_still_loading_its_aof_is_an_outage_not_a_configuration_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = RedisServer::start_with(dir.path(), true, &["--key-load-delay", "100"]);
    let mut cfg = RedisConfig::new(server.url());
    cfg.require_aof = true;
    let mut old = RedisJournal::connect(cfg.clone()).await.expect("connect");
    old.append(&entries(1, 5)).await.expect("append");
    let mut raw = server.raw().await;
    let _: i64 = redis::cmd("EVAL")
        .arg("for i=1,30000 do redis.call('SET','load:'..i,'v') end return 1")
        .arg(0)
        .query_async(&mut raw)
        .await
        .expect("fill");
    let _: String = redis::cmd("BGREWRITEAOF")
        .query_async(&mut raw)
        .await
        .expect("rewrite");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("persistence")
            .query_async(&mut raw)
            .await
            .expect("info");
        if info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrite_scheduled:0") {
            assert!(info.contains("aof_last_bgrewrite_status:ok"), "{info}");
            break;
        }
        assert!(Instant::now() < deadline, "the AOF rewrite did not finish");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.sync_aof().await;
    old.append(&entries(6, 7))
        .await
        .expect("append after the rewrite");

    server.restart_loading();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match server.ping_reply() {
            Some(r) if r.starts_with("-LOADING") => break,
            Some(r) => panic!("expected LOADING while 30,000 keys load, got {r}"),
            None => {
                assert!(Instant::now() < deadline, "redis-server did not come back");
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
    // Redis answers CONFIG GET while it loads and refuses most else (or holds the answer until
    // the load ends): a connect then is Unavailable or connected with the AOF verified, never
    // a configuration error, and a read is Unavailable or, once loaded, right.
    let capture = WarnCapture::start();
    match RedisJournal::connect(cfg.clone()).await {
        // Alone or inside a pipeline (where redis-rs shows the kind, `BusyLoading`), the
        // message names the server's code.
        Err(JournalError::Unavailable(msg)) => assert!(msg.contains("LOADING"), "{msg}"),
        Ok(mut during) => {
            assert_eq!(during.aof_status().appendonly, Some(true));
            match during.last_seq().await {
                Ok(7) | Err(JournalError::Unavailable(_)) => {}
                other => panic!("a read during the load: {other:?}"),
            }
        }
        Err(e) => panic!("a connect during the load is not a {e:?}"),
    }
    match old.last_seq().await {
        Ok(7) | Err(JournalError::Unavailable(_)) => {}
        other => panic!("a call during the load: {other:?}"),
    }
    assert!(
        !capture.any_contains("cannot read redis AOF settings"),
        "{:?}",
        capture.messages.lock().expect("lock")
    );
    assert_eq!(
        last_seq_eventually(&mut old).await,
        7,
        "the old journal reconnects"
    );
    assert_eq!(old.aof_status().appendonly, Some(true));
    let mut new = RedisJournal::connect(cfg)
        .await
        .expect("connect after the load");
    assert_eq!(new.last_seq().await.expect("last_seq"), 7);
}
