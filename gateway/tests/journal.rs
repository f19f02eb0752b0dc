//! The journal contract, written once and run against both backends: `embedded::*` (a redb file
//! in a temp dir) and `redis::*` (a redis-server started per test on a free port with AOF).

use crate::support::{Harness, RedbHarness, RedisHarness, entries};
use gateway::journal::{Entry, Journal, JournalError, SnapshotRecord};

fn snapshot(seq: u64, tag: u8) -> SnapshotRecord {
    SnapshotRecord {
        seq,
        format_version: 3,
        state_hash: [tag; 32],
        bytes: (0..1000u32).map(|i| (i as u8) ^ tag).collect(),
    }
}

async fn read_all<J: Journal>(j: &mut J, after: u64) -> Vec<Entry> {
    j.read_after(after, 10_000).await.expect("read_after")
}

mod cases {
    use super::*;

    pub async fn round_trip<H: Harness>(mut h: H) {
        let mut j = h.open().await;
        assert_eq!(j.last_seq().await, Ok(0));
        assert_eq!(j.read_after(0, 10).await, Ok(vec![]));
        assert_eq!(j.load_snapshot().await, Ok(None));
        assert_eq!(j.ping().await, Ok(()));
        assert_eq!(j.append(&[]).await, Ok(()));

        let mut batch = entries(1, 3);
        batch[1].payload.clear(); // an empty payload round-trips too
        batch[2].timestamp_ms = -5; // and any i64 timestamp
        assert_eq!(j.append(&batch).await, Ok(()));
        assert_eq!(j.last_seq().await, Ok(3));
        assert_eq!(read_all(&mut j, 0).await, batch);

        let more = entries(4, 5);
        assert_eq!(j.append(&more).await, Ok(()));
        assert_eq!(j.last_seq().await, Ok(5));
        let all = read_all(&mut j, 0).await;
        assert_eq!(all.len(), 5);
        assert_eq!(&all[..3], &batch[..]);
        assert_eq!(&all[3..], &more[..]);
        assert_eq!(read_all(&mut j, 3).await, more);
    }

    pub async fn contiguity_enforced<H: Harness>(mut h: H) {
        let mut j = h.open().await;
        // The first entry must be seq 1.
        assert_eq!(
            j.append(&entries(2, 3)).await,
            Err(JournalError::Conflict {
                expected: 1,
                found: 2
            })
        );
        assert_eq!(j.last_seq().await, Ok(0));
        let base = entries(1, 3);
        j.append(&base).await.expect("append 1..=3");

        // Gap.
        assert_eq!(
            j.append(&entries(5, 6)).await,
            Err(JournalError::Conflict {
                expected: 4,
                found: 5
            })
        );
        // Stale writer: seq 3 again with other contents.
        let mut stale = entries(3, 3);
        stale[0].payload = b"another command".to_vec();
        assert_eq!(
            j.append(&stale).await,
            Err(JournalError::Conflict {
                expected: 4,
                found: 3
            })
        );
        // Overlap that differs at seq 2 and would add 4: refused whole, 4 not written.
        let mut overlap = entries(2, 4);
        overlap[0].timestamp_ms += 1;
        assert_eq!(
            j.append(&overlap).await,
            Err(JournalError::Conflict {
                expected: 4,
                found: 2
            })
        );
        // A batch that is not contiguous itself.
        let mut holey = entries(4, 5);
        holey[1].seq = 6;
        assert_eq!(
            j.append(&holey).await,
            Err(JournalError::Conflict {
                expected: 5,
                found: 6
            })
        );
        // Seq 0 is not a sequence number.
        let mut zero = entries(1, 1);
        zero[0].seq = 0;
        assert!(matches!(
            j.append(&zero).await,
            Err(JournalError::Invalid(_))
        ));

        assert_eq!(j.last_seq().await, Ok(3));
        assert_eq!(read_all(&mut j, 0).await, base);
        // And the journal still continues normally.
        j.append(&entries(4, 4)).await.expect("append 4");
        assert_eq!(read_all(&mut j, 0).await, entries(1, 4));
    }

    pub async fn read_after_paginates<H: Harness>(mut h: H) {
        let mut j = h.open().await;
        let all = entries(1, 25);
        for chunk in all.chunks(10) {
            j.append(chunk).await.expect("append");
        }
        let mut got = Vec::new();
        let mut after = 0;
        let mut pages = 0;
        loop {
            let page = j.read_after(after, 7).await.expect("page");
            if page.is_empty() {
                break;
            }
            assert!(page.len() <= 7);
            assert_eq!(page[0].seq, after + 1);
            after = page.last().map(|e| e.seq).unwrap_or(after);
            got.extend(page);
            pages += 1;
        }
        assert_eq!(pages, 4); // 7 + 7 + 7 + 4
        assert_eq!(got, all);
        assert_eq!(j.read_after(10, 3).await, Ok(entries(11, 13)));
        assert_eq!(j.read_after(24, 100).await, Ok(entries(25, 25)));
        assert_eq!(j.read_after(25, 100).await, Ok(vec![]));
        assert_eq!(j.read_after(1_000, 100).await, Ok(vec![]));
        assert_eq!(j.read_after(0, 0).await, Ok(vec![]));
    }

    pub async fn snapshot_save_load<H: Harness>(mut h: H) {
        let mut j = h.open().await;
        j.append(&entries(1, 3)).await.expect("append");
        let s2 = snapshot(2, 0xa5);
        assert_eq!(j.save_snapshot(&s2).await, Ok(()));
        assert_eq!(j.load_snapshot().await, Ok(Some(s2.clone())));
        // Beyond the journal: refused.
        assert_eq!(
            j.save_snapshot(&snapshot(5, 1)).await,
            Err(JournalError::Conflict {
                expected: 3,
                found: 5
            })
        );
        let s3 = snapshot(3, 0x3c);
        assert_eq!(j.save_snapshot(&s3).await, Ok(()));
        assert_eq!(j.load_snapshot().await, Ok(Some(s3.clone())));
        // Older than the stored one: refused, the newest stays.
        assert_eq!(
            j.save_snapshot(&snapshot(1, 9)).await,
            Err(JournalError::Conflict {
                expected: 3,
                found: 1
            })
        );
        assert_eq!(j.load_snapshot().await, Ok(Some(s3)));
        // An empty snapshot body is fine.
        let empty = SnapshotRecord {
            seq: 3,
            format_version: 4,
            state_hash: [0; 32],
            bytes: vec![],
        };
        assert_eq!(j.save_snapshot(&empty).await, Ok(()));
        assert_eq!(j.load_snapshot().await, Ok(Some(empty)));
    }

    pub async fn trim_only_up_to_snapshot<H: Harness>(mut h: H) {
        let mut j = h.open().await;
        j.append(&entries(1, 10)).await.expect("append");
        assert_eq!(
            j.trim(1).await,
            Err(JournalError::Conflict {
                expected: 0,
                found: 1
            })
        );
        j.save_snapshot(&snapshot(6, 1)).await.expect("snapshot");
        assert_eq!(
            j.trim(7).await,
            Err(JournalError::Conflict {
                expected: 6,
                found: 7
            })
        );
        assert_eq!(read_all(&mut j, 0).await, entries(1, 10));

        assert_eq!(j.trim(4).await, Ok(()));
        assert_eq!(
            j.read_after(0, 10).await,
            Err(JournalError::Trimmed {
                after: 0,
                trimmed_upto: 4
            })
        );
        assert_eq!(read_all(&mut j, 4).await, entries(5, 10));
        assert_eq!(j.trim(2).await, Ok(())); // below the trim point: no-op
        assert_eq!(read_all(&mut j, 4).await, entries(5, 10));
        assert_eq!(j.trim(6).await, Ok(()));
        assert!(matches!(
            j.read_after(5, 10).await,
            Err(JournalError::Trimmed { .. })
        ));
        assert_eq!(read_all(&mut j, 6).await, entries(7, 10));
        assert_eq!(j.last_seq().await, Ok(10));
        // A snapshot below the trim point would be unrecoverable: refused.
        assert!(matches!(
            j.save_snapshot(&snapshot(5, 2)).await,
            Err(JournalError::Conflict { .. })
        ));

        // Trim everything: last_seq survives, appends continue.
        j.save_snapshot(&snapshot(10, 2))
            .await
            .expect("snapshot 10");
        assert_eq!(j.trim(10).await, Ok(()));
        assert_eq!(j.last_seq().await, Ok(10));
        assert_eq!(j.read_after(10, 10).await, Ok(vec![]));
        j.append(&entries(11, 12))
            .await
            .expect("append after full trim");
        assert_eq!(read_all(&mut j, 10).await, entries(11, 12));
        // A retry of a trimmed entry cannot be verified: Conflict.
        assert_eq!(
            j.append(&entries(10, 10)).await,
            Err(JournalError::Conflict {
                expected: 13,
                found: 10
            })
        );
    }

    pub async fn reopen_returns_same_entries<H: Harness>(mut h: H) {
        let s = snapshot(3, 7);
        {
            let mut j = h.open().await;
            j.append(&entries(1, 4)).await.expect("append");
            j.append(&entries(5, 5)).await.expect("append");
            j.save_snapshot(&s).await.expect("snapshot");
            j.trim(2).await.expect("trim");
        }
        let mut j = h.open().await;
        assert_eq!(j.last_seq().await, Ok(5));
        assert_eq!(j.load_snapshot().await, Ok(Some(s)));
        assert_eq!(read_all(&mut j, 2).await, entries(3, 5));
        assert!(matches!(
            j.read_after(1, 10).await,
            Err(JournalError::Trimmed { .. })
        ));
        j.append(&entries(6, 6)).await.expect("append after reopen");
        drop(j);
        let mut j = h.open().await;
        assert_eq!(read_all(&mut j, 2).await, entries(3, 6));
    }

    pub async fn corrupt_record_detected<H: Harness>(mut h: H) {
        {
            let mut j = h.open().await;
            j.append(&entries(1, 4)).await.expect("append");
        }
        h.corrupt_payload(3).await;
        let mut j = h.open().await;
        match j.read_after(0, 10).await {
            Err(JournalError::Corrupt(msg)) => assert!(msg.contains("entry 3"), "{msg}"),
            other => panic!("expected Corrupt, got {other:?}"),
        }
        // Pages that do not include the damaged record still read.
        assert_eq!(j.read_after(0, 2).await, Ok(entries(1, 2)));
        assert_eq!(j.read_after(3, 10).await, Ok(entries(4, 4)));
        // A retry of the damaged entry cannot be confirmed.
        assert!(j.append(&entries(3, 3)).await.is_err());
    }

    pub async fn gap_detected<H: Harness>(mut h: H) {
        {
            let mut j = h.open().await;
            j.append(&entries(1, 6)).await.expect("append");
        }
        h.delete_entry(3).await;
        let mut j = h.open().await;
        match j.read_after(0, 10).await {
            Err(JournalError::Corrupt(msg)) => assert!(msg.contains("gap"), "{msg}"),
            other => panic!("expected Corrupt, got {other:?}"),
        }
        assert_eq!(read_all(&mut j, 3).await, entries(4, 6));
        drop(j);
        // A hole at the tail: the page ends short of last_seq.
        h.delete_entry(6).await;
        let mut j = h.open().await;
        assert_eq!(j.last_seq().await, Ok(6));
        match j.read_after(3, 10).await {
            Err(JournalError::Corrupt(msg)) => assert!(msg.contains("missing"), "{msg}"),
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    pub async fn retry_is_idempotent<H: Harness>(mut h: H) {
        let mut j = h.open().await;
        let batch = entries(1, 3);
        assert_eq!(j.append(&batch).await, Ok(()));
        // The same batch again (its first outcome was "unknown"): Ok, nothing doubled.
        assert_eq!(j.append(&batch).await, Ok(()));
        assert_eq!(j.last_seq().await, Ok(3));
        assert_eq!(read_all(&mut j, 0).await, batch);
        // A retry that overlaps the tail and carries new entries writes only the new ones.
        assert_eq!(j.append(&entries(2, 6)).await, Ok(()));
        assert_eq!(j.last_seq().await, Ok(6));
        assert_eq!(read_all(&mut j, 0).await, entries(1, 6));
        // Same seq, same payload, other timestamp: not the same command.
        let mut other = entries(6, 6);
        other[0].timestamp_ms += 1;
        assert_eq!(
            j.append(&other).await,
            Err(JournalError::Conflict {
                expected: 7,
                found: 6
            })
        );
        assert_eq!(read_all(&mut j, 0).await, entries(1, 6));
    }
}

macro_rules! suite {
    ($backend:ident, $harness:ty) => {
        mod $backend {
            use super::*;

            #[tokio::test]
            async fn round_trip() {
                cases::round_trip(<$harness>::new().await).await;
            }
            #[tokio::test]
            async fn contiguity_enforced() {
                cases::contiguity_enforced(<$harness>::new().await).await;
            }
            #[tokio::test]
            async fn read_after_paginates() {
                cases::read_after_paginates(<$harness>::new().await).await;
            }
            #[tokio::test]
            async fn snapshot_save_load() {
                cases::snapshot_save_load(<$harness>::new().await).await;
            }
            #[tokio::test]
            async fn trim_only_up_to_snapshot() {
                cases::trim_only_up_to_snapshot(<$harness>::new().await).await;
            }
            #[tokio::test]
            async fn reopen_returns_same_entries() {
                cases::reopen_returns_same_entries(<$harness>::new().await).await;
            }
            #[tokio::test]
            async fn corrupt_record_detected() {
                cases::corrupt_record_detected(<$harness>::new().await).await;
            }
            #[tokio::test]
            async fn gap_detected() {
                cases::gap_detected(<$harness>::new().await).await;
            }
            #[tokio::test]
            async fn retry_is_idempotent() {
                cases::retry_is_idempotent(<$harness>::new().await).await;
            }
        }
    };
}

suite!(embedded, RedbHarness);
suite!(redis, RedisHarness);
