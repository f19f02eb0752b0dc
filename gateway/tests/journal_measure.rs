//! One quick measurement (not a benchmark harness): group-commit append of 1,000 entries of
//! 100 bytes, per backend. Run in release:
//! `cargo test -p gateway --release --test journal_measure -- --ignored --nocapture`.

mod support;

use std::time::{Duration, Instant};

use gateway::journal::{Entry, Journal};
use support::{Harness, RedbHarness, RedisHarness};

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
    let mut c = h.server.raw().await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendfsync")
        .arg("always")
        .query_async(&mut c)
        .await
        .expect("config set");
    let mut j = h.open().await;
    measure("redis (AOF always)", &mut j).await;
}
