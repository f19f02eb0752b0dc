//! Embedded-only journal behaviour: exclusive file ownership, snapshot corruption, `AnyJournal`.

use crate::support::entries;
use gateway::journal::embedded::{SNAPSHOT_SLOT, SNAPSHOT_TABLE};
use gateway::journal::{AnyJournal, EmbeddedJournal, Journal, JournalError, SnapshotRecord};
use redb::ReadableTable;

#[tokio::test]
async fn second_open_of_the_same_file_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _j = EmbeddedJournal::open(dir.path(), 0).await.expect("open");
    match EmbeddedJournal::open(dir.path(), 0).await {
        Err(JournalError::Config(msg)) => assert!(msg.contains("open"), "{msg}"),
        other => panic!("expected Config, got {other:?}"),
    }
    // Another shard is another file.
    EmbeddedJournal::open(dir.path(), 1)
        .await
        .expect("shard 1 opens");
}

#[tokio::test]
async fn snapshot_corruption_detected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let snap = SnapshotRecord {
        seq: 2,
        format_version: 1,
        state_hash: [2; 32],
        bytes: b"engine state".to_vec(),
    };
    {
        let mut j = EmbeddedJournal::open(dir.path(), 0).await.expect("open");
        j.append(&entries(1, 2)).await.expect("append");
        j.save_snapshot(&snap).await.expect("snapshot");
    }
    {
        let db = redb::Database::create(EmbeddedJournal::file_path(dir.path(), 0)).expect("db");
        let txn = db.begin_write().expect("txn");
        {
            let mut t = txn.open_table(SNAPSHOT_TABLE).expect("table");
            let mut raw = t
                .get(SNAPSHOT_SLOT)
                .expect("get")
                .expect("some")
                .value()
                .to_vec();
            let last = raw.len() - 1;
            raw[last] ^= 0x80;
            t.insert(SNAPSHOT_SLOT, raw.as_slice()).expect("insert");
        }
        txn.commit().expect("commit");
    }
    let mut j = EmbeddedJournal::open(dir.path(), 0).await.expect("reopen");
    assert!(matches!(
        j.load_snapshot().await,
        Err(JournalError::Corrupt(_))
    ));
    // Trimming relies on the snapshot's seq: refused while it is damaged.
    assert!(matches!(j.trim(1).await, Err(JournalError::Corrupt(_))));
    // A new snapshot replaces the damaged one.
    j.save_snapshot(&snap).await.expect("replace");
    assert_eq!(j.load_snapshot().await, Ok(Some(snap)));
}

#[tokio::test]
async fn any_journal_dispatches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut j = AnyJournal::Embedded(EmbeddedJournal::open(dir.path(), 0).await.expect("open"));
    j.append(&entries(1, 3)).await.expect("append");
    assert_eq!(j.last_seq().await, Ok(3));
    assert_eq!(j.read_after(1, 10).await, Ok(entries(2, 3)));
    assert_eq!(j.ping().await, Ok(()));
}
