//! The topology of issue 18 on a Redis Cluster (`--redis-cluster`, docs/deploy.md "Redis
//! Cluster"): 3 masters with a replica each (bus ports set explicitly), two `engine`
//! processes and two `api` processes, every append confirmed by a replica (`WAIT 1`) before
//! it is acknowledged. Real binaries, real `redis-server`s.
//!
//! The journal alone on the cluster: fenced appends with `WAIT 1`, reads, ping and the AOF
//! check reach the master of the journal's slot, and its replica holds every batch.
//!
//! Under a flow of deposits through both API processes and 1-GPU bids:
//! - SIGKILL the leading engine: the standby leads within the bound;
//! - SIGKILL the Redis master that holds the journal's slot: its replica is promoted, the
//!   processes ride through with 503s (none exits), and once the old master is back as a
//!   replica the flow goes on;
//! - afterwards every acknowledged deposit is in the journal exactly once, the balance is
//!   their sum on both API processes, no GPU is leased twice, the trial balance closes at
//!   zero, the replicas agree on the state hash, and websocket clients of both API processes
//!   rebuilt the inventory from contiguous deltas (or a resync snapshot).

use crate::support;
use crate::support::api::{View, Ws, node, offer, ws_connect};
use crate::support::procs::{
    ADMIN_KEY, Gateway, LEASE_MS, feed_matches_rest, post, wait_admin, wait_balance,
};
use gateway::market::Op;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Every process's flags on the cluster: one replica must confirm each append, and AOF must
/// be on (checked again at every reconnect, the failover's included).
const ON_CLUSTER: &[&str] = &[
    "--redis-cluster",
    "--require-aof",
    "--redis-wait-replicas",
    "1",
    "--redis-wait-ms",
    "1000",
];

/// Deposits of 1 CNY each API process's flow sends.
const DEPOSITS: u64 = 40;

/// Sends `DEPOSITS` deposits of 1 CNY through `base`, each with its own idempotency key
/// (`<tag>-<k>`), retrying a 503 or a dropped connection with the same key; answers
/// (acknowledged, retries).
async fn deposit_flow(
    http: reqwest::Client,
    base: String,
    buyer: String,
    tag: &'static str,
) -> (u64, u64) {
    let mut acked = 0;
    let mut retries = 0;
    for k in 0..DEPOSITS {
        let key = format!("{tag}-{k}");
        let started = Instant::now();
        loop {
            let (status, body) = post(
                &http,
                format!("{base}/v1/admin/accounts/{buyer}/deposits"),
                ADMIN_KEY,
                Some(&key),
                json!({"amount": "1"}),
            )
            .await;
            if status == 201 {
                acked += 1;
                break;
            }
            assert!(
                status == 503 || status == 0,
                "deposit {key}: {status} {body}"
            );
            retries += 1;
            assert!(
                started.elapsed() < Duration::from_secs(40),
                "deposit {key} never went through: {status} {body}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    (acked, retries)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_journal_runs_on_a_redis_cluster_with_wait() {
    use gateway::journal::{Journal, RedisJournal};
    let dir = tempfile::tempdir().unwrap();
    let cluster = support::RedisCluster::start(dir.path(), 3);
    let mut cfg = cluster.config();
    cfg.wait_replicas = 1;
    cfg.wait_timeout = Duration::from_millis(1_000);
    let mut j = RedisJournal::connect(cfg.clone()).await.expect("connects");
    // Fenced, as a leader's appends are.
    let lead = j.try_lead("owner-a", Duration::from_secs(5), "").await;
    assert!(
        matches!(
            lead,
            Ok(gateway::journal::redis::Leadership::Leader { epoch: 1 })
        ),
        "{lead:?}"
    );
    assert_eq!(
        j.aof_status().appendonly,
        Some(true),
        "CONFIG GET reached the master"
    );
    j.ping().await.expect("ping");
    let batch = support::entries(1, 5);
    j.append(&batch).await.expect("append with WAIT 1");
    j.append(&support::entries(6, 6))
        .await
        .expect("a second append");
    assert_eq!(j.last_seq().await.unwrap(), 6);
    let mut other = RedisJournal::connect(cfg).await.expect("connects");
    let read = other.read_after(0, 100).await.expect("reads");
    assert_eq!(read, support::entries(1, 6));
    // The replica of the journal's master has every entry.
    let key = gateway::journal::redis::RedisKeys::new("gpux", 0).journal;
    let (_, replica) = cluster.master_of(&key);
    let replica = replica.expect("a replica");
    let mut c = redis::Client::open(cluster.nodes[replica].url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("READONLY").query_async(&mut c).await.unwrap();
    let len: u64 = redis::cmd("XLEN")
        .arg(&key)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(len, 2, "one stream entry per batch, on the replica too");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_redis_cluster_a_killed_leader_and_a_killed_master_lose_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = support::RedisCluster::start(dir.path(), 3);
    let url = cluster.url();
    let http = reqwest::Client::new();
    let mut first = Gateway::start_with(&url, "engine", ON_CLUSTER);
    first.wait_role(&http, true, Duration::from_secs(30)).await;
    let mut standby = Gateway::start_with(&url, "engine", ON_CLUSTER);
    let mut apis = [
        Gateway::start_with(&url, "api", ON_CLUSTER),
        Gateway::start_with(&url, "api", ON_CLUSTER),
    ];
    standby
        .wait_role(&http, false, Duration::from_secs(30))
        .await;
    for a in &apis {
        a.wait_role(&http, false, Duration::from_secs(30)).await;
        wait_admin(&http, &a.base, Duration::from_secs(10)).await;
    }
    let (a1, a2) = (apis[0].base.clone(), apis[1].base.clone());

    // A buyer with 100 CNY, a supplier with 8 H100s offered at 20.
    let (status, created) = post(
        &http,
        format!("{a1}/v1/admin/accounts"),
        ADMIN_KEY,
        None,
        json!({"name": "rc-buyer", "role": "buyer"}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let buyer_key = created["api_key"].as_str().unwrap().to_string();
    let buyer = created["account"]["id"].as_str().unwrap().to_string();
    let (status, body) = post(
        &http,
        format!("{a1}/v1/admin/accounts/{buyer}/deposits"),
        ADMIN_KEY,
        Some("rc-first"),
        json!({"amount": "100"}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, sup) = post(
        &http,
        format!("{a2}/v1/admin/accounts"),
        ADMIN_KEY,
        None,
        json!({"name": "rc-idc", "role": "supplier"}),
    )
    .await;
    assert_eq!(status, 201, "{sup}");
    let sup_key = sup["api_key"].as_str().unwrap().to_string();
    let (status, n) = post(
        &http,
        format!("{a2}/v1/nodes"),
        &sup_key,
        None,
        node("n1", "H100-80G", 8, "cn-east-2"),
    )
    .await;
    assert_eq!(status, 201, "{n}");
    let node_id = n["id"].as_str().unwrap().to_string();
    let (status, o) = post(
        &http,
        format!("{a2}/v1/offers"),
        &sup_key,
        None,
        offer(&node_id, 8, "20", None),
    )
    .await;
    assert_eq!(status, 201, "{o}");

    // The node's agent heartbeats every second through either API process (a node silent
    // past the exchange's timeout would leave the market).
    let agent = {
        let client =
            gpux_client::Client::new(&format!("{a2},{a1}"), Some(sup_key.clone())).expect("client");
        let node_id = node_id.clone();
        tokio::spawn(async move {
            loop {
                let _ = client.heartbeat(&node_id, 8).await;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };

    // Websocket clients of both API processes follow the H100 inventory.
    let mut watchers: Vec<(String, Ws, View)> = Vec::new();
    for base in [&a1, &a2] {
        let mut ws = ws_connect(
            &(base.replacen("http://", "ws://", 1) + "/v1/ws"),
            None,
            None,
        )
        .await
        .expect("ws");
        ws.send(json!({"type": "subscribe", "sku": "H100-80G"}))
            .await;
        let (snap, _) = ws.until("inventory_snapshot").await;
        let mut view = View::default();
        view.apply(&snap);
        watchers.push((base.clone(), ws, view));
    }

    // The load: deposits through both API processes, six 1-GPU IOC bids alternating
    // between them (each retried with its client order id until it is answered).
    let flows = [
        tokio::spawn(deposit_flow(
            http.clone(),
            a1.clone(),
            buyer.clone(),
            "rc-a",
        )),
        tokio::spawn(deposit_flow(
            http.clone(),
            a2.clone(),
            buyer.clone(),
            "rc-b",
        )),
    ];
    let bids = {
        let (http, key, bases) = (http.clone(), buyer_key.clone(), [a1.clone(), a2.clone()]);
        tokio::spawn(async move {
            let mut answered = 0;
            for k in 0..6 {
                let base = &bases[k % 2];
                let started = Instant::now();
                let mut tries = 0;
                loop {
                    let (status, body) = post(
                        &http,
                        format!("{base}/v1/bids"),
                        &key,
                        None,
                        json!({"client_order_id": format!("rc-bid-{k}"), "sku": "H100-80G",
                               "gpus": 1, "limit_price": "25", "kind": "spot",
                               "time_in_force": "ioc", "duration_s": 600,
                               "launch": {"ssh_keys": [gateway::demo::DEMO_SSH_KEY]}}),
                    )
                    .await;
                    if status == 201 || status == 200 {
                        assert_eq!(body["status"], "filled", "bid {k}: {body}");
                        answered += 1;
                        break;
                    }
                    // A retry of a bid whose first answer was lost (503, outcome unknown)
                    // that had been applied: its client order id is taken.
                    if status == 409 && body["code"] == "duplicate_client_order_id" && tries > 0 {
                        answered += 1;
                        break;
                    }
                    assert!(status == 503 || status == 0, "bid {k}: {status} {body}");
                    tries += 1;
                    assert!(
                        started.elapsed() < Duration::from_secs(40),
                        "bid {k} never went through: {status} {body}"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                tokio::time::sleep(Duration::from_millis(700)).await;
            }
            answered
        })
    };

    // The leading engine dies.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        (
            first.readyz(&http).await.map(|v| v["leading"].clone()),
            standby.readyz(&http).await.map(|v| v["leading"].clone())
        ),
        (Some(json!(true)), Some(json!(false))),
        "the first engine leads until it is killed"
    );
    first.kill();
    let took = standby
        .wait_role(&http, true, Duration::from_millis(LEASE_MS + 10_000))
        .await;
    println!(
        "redis cluster: the standby engine led {} ms after the leader's SIGKILL (lease {LEASE_MS} ms)",
        took.as_millis()
    );
    assert!(
        took < Duration::from_millis(LEASE_MS + 2_000),
        "takeover took {took:?}"
    );

    // The Redis master holding the journal's slot dies; its replica is promoted.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let journal_key = gateway::journal::redis::RedisKeys::new("gpux", 0).journal;
    let (master, replica) = cluster.master_of(&journal_key);
    let replica = replica.expect("the journal's master has a connected replica");
    let killed = Instant::now();
    cluster.nodes[master].kill();
    let promoted = loop {
        if cluster.owner_of(&journal_key).map(|(m, _)| m) == Some(replica) {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(20),
            "the replica was never promoted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // With WAIT 1 the promoted master needs a replica again before it acknowledges: the old
    // master comes back and follows it.
    cluster.nodes[master].restart();
    let rejoined = killed.elapsed();
    println!(
        "redis cluster: the replica was promoted {} ms after the master's SIGKILL; the old \
         master restarted as a replica at {} ms",
        promoted.as_millis(),
        rejoined.as_millis()
    );

    let mut acked = 0;
    for f in flows {
        let (a, retries) = f.await.expect("a deposit flow");
        println!(
            "redis cluster: {a} deposits acknowledged, {retries} answers 503 or dropped and retried"
        );
        assert_eq!(a, DEPOSITS);
        acked += a;
    }
    assert_eq!(bids.await.expect("the bids"), 6, "every bid is answered");
    let [api1, api2] = &mut apis;
    for (name, p) in [("standby", &mut standby), ("api 1", api1), ("api 2", api2)] {
        let status = p.child.try_wait();
        assert!(
            matches!(status, Ok(None)),
            "the {name} process exited: {status:?}"
        );
    }

    // Exactly once: every acknowledged deposit is in the journal (a retry of one whose answer
    // was lost may be journaled again: the ledger applies a deposit key once), and the
    // balance is their sum on both API processes.
    let ops = support::journal_ops_of(cluster.config()).await;
    let mut keys: BTreeMap<String, u32> = BTreeMap::new();
    for op in ops.values() {
        let op = match op {
            Op::Audited { op, .. } => op.as_ref(),
            op => op,
        };
        if let Op::Deposit { key, .. } = op
            && let Some((_, k)) = key.split_once(':')
            && k.starts_with("rc-")
        {
            *keys.entry(k.to_string()).or_default() += 1;
        }
    }
    assert_eq!(keys.len() as u64, acked + 1, "{keys:?}");
    println!(
        "redis cluster: {} deposit keys journaled, {} of them more than once (retries the \
         ledger applied once)",
        keys.len(),
        keys.values().filter(|n| **n > 1).count()
    );
    let want = format!("{}.00", 100 + acked);
    for base in [&a1, &a2] {
        wait_balance(&http, base, &buyer_key, &want, Duration::from_secs(5)).await;
    }

    // No GPU leased twice: 6 leases on 8 GPUs, 2 free, in every view; the websocket clients
    // rebuilt exactly the REST view of their process.
    for (base, ws, view) in watchers.iter_mut() {
        let free = feed_matches_rest(&http, base, "H100-80G", ws, view).await;
        assert_eq!(free, 2, "{base}: {:?}", view.levels);
    }
    let leases: Value = http
        .get(format!("{a1}/v1/leases"))
        .bearer_auth(&buyer_key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let leased: u64 = leases["leases"]
        .as_array()
        .expect("leases")
        .iter()
        .map(|l| l["gpus"].as_u64().unwrap())
        .sum();
    assert_eq!(leased, 6, "{leases}");

    agent.abort();

    // The books balance.
    let tb: Value = http
        .get(format!("{a2}/v1/reports/trial-balance?format=json"))
        .bearer_auth(ADMIN_KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let closing: rust_decimal::Decimal = tb["totals"]["closing"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no closing total: {tb}"));
    assert_eq!(closing, rust_decimal::Decimal::ZERO, "{tb}");
    assert!(
        tb["checks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["ok"] == true),
        "{tb}"
    );

    // The replicas agree at the same seq.
    let started = Instant::now();
    loop {
        let (s1, h1) = apis[0].state(&http).await;
        let (s2, h2) = apis[1].state(&http).await;
        let (s3, h3) = standby.state(&http).await;
        if s1 == s2 && s2 == s3 {
            assert_eq!((&h1, &h2), (&h3, &h3), "replicas differ at seq {s1}");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "{s1} {s2} {s3}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
