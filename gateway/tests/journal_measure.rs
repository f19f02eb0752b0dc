//! Quick measurements (not a benchmark harness), per backend: group-commit append of 1,000
//! entries of 100 bytes, and `read_after` of 200,000 entries in pages of 10,000. Run in
//! release:
//! `cargo test -p gateway --release --test integration journal_measure:: -- --ignored --nocapture`.

use std::time::{Duration, Instant};

use crate::support::{Harness, RedbHarness, RedisHarness};
use gateway::journal::{Entry, Journal};

const BATCH: u64 = 1_000;
const PAYLOAD_BYTES: usize = 100;
const ROUNDS: u64 = 30;

fn batch(round: u64) -> Vec<Entry> {
    let first = round * BATCH + 1;
    (first..first + BATCH)
        .map(|seq| Entry {
            seq,
            timestamp_ms: 1_764_460_800_000 + seq as i64,
            payload: vec![(seq % 251) as u8; PAYLOAD_BYTES],
        })
        .collect()
}

async fn measure<J: Journal>(name: &str, j: &mut J) {
    j.append(&batch(0)).await.expect("warm-up append");
    let mut times: Vec<Duration> = Vec::new();
    for round in 1..=ROUNDS {
        let b = batch(round);
        let t = Instant::now();
        j.append(&b).await.expect("append");
        times.push(t.elapsed());
    }
    assert_eq!(j.last_seq().await, Ok((ROUNDS + 1) * BATCH));
    times.sort();
    let median = times[times.len() / 2];
    let per_entry_us = median.as_secs_f64() * 1e6 / BATCH as f64;
    println!(
        "{name}: append 1,000 × 100 B: median {:.2} ms (min {:.2}, max {:.2}) over {ROUNDS} \
         batches = {per_entry_us:.2} µs/entry, {:.0} entries/s",
        median.as_secs_f64() * 1e3,
        times[0].as_secs_f64() * 1e3,
        times[times.len() - 1].as_secs_f64() * 1e3,
        BATCH as f64 / median.as_secs_f64(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement; run in release with --ignored --nocapture"]
async fn append_1000_entries_of_100_bytes() {
    let mut h = RedbHarness::new().await;
    let mut j = h.open().await;
    measure("embedded (redb, fsync per batch)", &mut j).await;

    let mut h = RedisHarness::new().await;
    let mut j = h.open().await;
    measure("redis (AOF everysec)", &mut j).await;

    let mut h = RedisHarness::new().await;
    h.server.config_set("appendfsync", "always").await;
    let mut j = h.open().await;
    measure("redis (AOF always)", &mut j).await;
}

const READ_ENTRIES: u64 = 200_000;
const READ_PAGE: usize = 10_000;

/// Fills the journal with READ_ENTRIES entries of 20–99 bytes, then reads it all back page
/// by page (as replay does), three times; prints the median rate.
async fn measure_read<J: Journal>(name: &str, j: &mut J) {
    for first in (1..=READ_ENTRIES).step_by(1_000) {
        let b: Vec<Entry> = (first..first + 1_000)
            .map(|seq| Entry {
                seq,
                timestamp_ms: 1_764_460_800_000 + seq as i64,
                payload: vec![(seq % 251) as u8; 20 + (seq % 80) as usize],
            })
            .collect();
        j.append(&b).await.expect("append");
    }
    let mut rates = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let mut after = 0;
        loop {
            let page = j.read_after(after, READ_PAGE).await.expect("read");
            let Some(last) = page.last() else { break };
            after = last.seq;
        }
        assert_eq!(after, READ_ENTRIES);
        rates.push(READ_ENTRIES as f64 / t.elapsed().as_secs_f64());
    }
    rates.sort_by(f64::total_cmp);
    println!(
        "{name}: read_after of {READ_ENTRIES} entries, pages of {READ_PAGE}: median {:.0} \
         entries/s (min {:.0}, max {:.0})",
        rates[1], rates[0], rates[2]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement; run in release with --ignored --nocapture"]
async fn read_200000_entries() {
    let mut h = RedbHarness::new().await;
    let mut j = h.open().await;
    measure_read("embedded (redb)", &mut j).await;

    let mut h = RedisHarness::new().await;
    let mut j = h.open().await;
    measure_read("redis", &mut j).await;
}
