//! Several processes on one Redis journal (issue 18; `gateway::cluster`,
//! `gateway::sequencer::follow`, docs/journal.md "Processes on one journal"): a leader
//! (role `all`), a hot standby (role `all`) and an API process (role `api`), real binaries on
//! a real Redis.
//!
//! - A command sent to the API process is forwarded to the leader and answered once the API
//!   process's own replica has applied it (read your writes on that process).
//! - A key created through one process signs in on every other (the key cache follows the
//!   journal).
//! - SIGKILL the leader while deposits flow through the API process: the hot standby leads
//!   within the bound, the deposits go on through the same API process, and every
//!   acknowledged deposit is in the ledger exactly once (the buyer's balance is their sum).
//! - Websocket clients of the API process and of the standby rebuild the inventory from one
//!   snapshot and contiguous deltas across the takeover, ending where the REST view ends.
//! - Every replica computes the same state hash at the same sequence number.
//! - A key created through one API process signs in at once on another (which waits for its
//!   replica to learn of it rather than answer 401).
//! - A client of two API processes (`gpux_client::Client` given both URLs, as `gpux` and
//!   `gpux-agent` are): when the process it uses is SIGKILLed, its next command goes to the
//!   other at once, and its inventory stream resumes there from a fresh snapshot.
//! - A leader paused past its lease is fenced when it wakes, steps down and follows the
//!   journal again (it does not exit): its replica catches up, and it forwards commands.
//! - `gateway/scripts/cluster.sh`'s four processes, all with `--require-aof`, survive a
//!   SIGKILL of Redis and its restart loading a dataset for seconds (`LOADING`), and a gateway
//!   started during the load waits for it (issue 25).

use crate::support;
use crate::support::api::{View, Ws, node, offer, ws_connect};

use serde_json::{Value, json};
use std::process::Command as Proc;
use std::time::{Duration, Instant};

use crate::support::procs::{
    ADMIN_KEY, CLUSTER_KEY, Gateway, LEASE_MS, balance, feed_matches_rest, post, wait_admin,
    wait_balance,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_process_forwards_and_a_hot_standby_takes_over_without_losing_a_deposit() {
    let dir = tempfile::tempdir().unwrap();
    let redis = support::RedisServer::start(dir.path(), true);
    let url = redis.url();
    let http = reqwest::Client::new();
    let mut leader = Gateway::start(&url, "all");
    leader.wait_role(&http, true, Duration::from_secs(20)).await;
    // The leader has registered the admin key before the others start.
    let started = Instant::now();
    while http
        .get(format!("{}/v1/admin/accounts", leader.base))
        .bearer_auth(ADMIN_KEY)
        .send()
        .await
        .map_or(true, |r| !r.status().is_success())
    {
        assert!(started.elapsed() < Duration::from_secs(10), "no admin key");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let api = Gateway::start(&url, "api");
    let standby = Gateway::start(&url, "all");
    api.wait_role(&http, false, Duration::from_secs(20)).await;
    standby
        .wait_role(&http, false, Duration::from_secs(20))
        .await;

    // A buyer created and funded through the API process: forwarded, and answered once the
    // API process's replica has it (its key signs in there at once, its balance shows it).
    let (status, created) = post(
        &http,
        format!("{}/v1/admin/accounts", api.base),
        ADMIN_KEY,
        None,
        json!({"name": "cluster-buyer", "role": "buyer"}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let buyer_key = created["api_key"].as_str().expect("api_key").to_string();
    let buyer = created["account"]["id"]
        .as_str()
        .expect("account id")
        .to_string();
    let (status, body) = post(
        &http,
        format!("{}/v1/admin/accounts/{buyer}/deposits", api.base),
        ADMIN_KEY,
        Some("cluster-first"),
        json!({"amount": "100"}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, b) = balance(&http, &api.base, &buyer_key).await;
    assert_eq!(
        (status, b["balance"].as_str()),
        (200, Some("100.00")),
        "{b}"
    );
    // The key signs in on the standby too (its key cache follows the journal).
    let started = Instant::now();
    loop {
        let (status, b) = balance(&http, &standby.base, &buyer_key).await;
        if status == 200 {
            assert_eq!(b["balance"].as_str(), Some("100.00"), "{b}");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "the standby never knew the new key ({status})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A supplier lists 8 H100s through the API process; websocket clients of the API process
    // and of the standby follow that SKU's inventory.
    let (status, sup) = post(
        &http,
        format!("{}/v1/admin/accounts", api.base),
        ADMIN_KEY,
        None,
        json!({"name": "cluster-idc", "role": "supplier"}),
    )
    .await;
    assert_eq!(status, 201, "{sup}");
    let sup_key = sup["api_key"].as_str().unwrap().to_string();
    let (status, n) = post(
        &http,
        format!("{}/v1/nodes", api.base),
        &sup_key,
        None,
        node("n1", "H100-80G", 8, "cn-east-2"),
    )
    .await;
    assert_eq!(status, 201, "{n}");
    let node_id = n["id"].as_str().unwrap().to_string();
    let (status, o) = post(
        &http,
        format!("{}/v1/offers", api.base),
        &sup_key,
        None,
        offer(&node_id, 8, "20", None),
    )
    .await;
    assert_eq!(status, 201, "{o}");

    // Issue 25: a bid re-sent after a timeout (the client cannot know whether the first copy
    // landed) reaches another process with the same client order id: it answers 200 with the
    // first answer, on every process, instead of 409 for a bid that rests. The same id with
    // other terms stays a conflict, named.
    let resting = json!({"client_order_id": "cluster-resend", "sku": "H100-80G", "gpus": 1,
                         "limit_price": "5", "kind": "spot", "time_in_force": "gtc",
                         "launch": {"ssh_keys": [gateway::demo::DEMO_SSH_KEY]}});
    let (status, first) = post(
        &http,
        format!("{}/v1/bids", api.base),
        &buyer_key,
        None,
        resting.clone(),
    )
    .await;
    assert_eq!(status, 201, "{first}");
    assert_eq!(first["status"], "resting", "{first}");
    for base in [&standby.base, &api.base] {
        let (status, again) = post(
            &http,
            format!("{base}/v1/bids"),
            &buyer_key,
            None,
            resting.clone(),
        )
        .await;
        assert_eq!((status, &again), (200, &first), "re-sent through {base}");
    }
    let mut other = resting.clone();
    other["limit_price"] = json!("6");
    let (status, e) = post(
        &http,
        format!("{}/v1/bids", api.base),
        &buyer_key,
        None,
        other,
    )
    .await;
    assert_eq!(
        (status, e["code"].as_str()),
        (409, Some("duplicate_client_order_id")),
        "{e}"
    );
    assert!(
        e["message"]
            .as_str()
            .is_some_and(|m| m.contains(first["bid_id"].as_str().unwrap())),
        "{e}"
    );
    let cancel = http
        .delete(format!(
            "{}/v1/bids/{}",
            api.base,
            first["bid_id"].as_str().unwrap()
        ))
        .bearer_auth(&buyer_key)
        .send()
        .await
        .unwrap();
    assert_eq!(cancel.status().as_u16(), 200);

    let mut watchers: Vec<(String, Ws, View)> = Vec::new();
    for base in [&api.base, &standby.base] {
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
        watchers.push((base.to_string(), ws, view));
    }

    // Deposits of 1 CNY and four 1-GPU bids flow through the API process; the leader is
    // killed midway.
    let bids = {
        let http = http.clone();
        let base = api.base.clone();
        let key = buyer_key.clone();
        tokio::spawn(async move {
            let mut filled = 0;
            for k in 0..4 {
                let started = Instant::now();
                loop {
                    let (status, body) = post(
                        &http,
                        format!("{base}/v1/bids"),
                        &key,
                        None,
                        json!({"client_order_id": format!("cluster-bid-{k}"), "sku": "H100-80G",
                               "gpus": 1, "limit_price": "25", "kind": "spot",
                               "time_in_force": "ioc", "duration_s": 600,
                               "launch": {"ssh_keys": [gateway::demo::DEMO_SSH_KEY]}}),
                    )
                    .await;
                    if status == 201 || status == 200 {
                        if body["status"] == "filled" {
                            filled += 1;
                        }
                        break;
                    }
                    assert!(status == 503 || status == 0, "bid {k}: {status} {body}");
                    assert!(
                        started.elapsed() < Duration::from_secs(15),
                        "bid {k} never went through: {status} {body}"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                tokio::time::sleep(Duration::from_millis(400)).await;
            }
            filled
        })
    };
    // Deposits of 1 CNY flow through the API process; the leader is killed midway.
    let flow = {
        let http = http.clone();
        let base = api.base.clone();
        tokio::spawn(async move {
            let mut acked = 0u64;
            let mut refused = 0u64;
            let mut longest_gap = Duration::ZERO;
            let mut last_ack = Instant::now();
            for k in 0..60 {
                let key = format!("cluster-dep-{k}");
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
                        longest_gap = longest_gap.max(last_ack.elapsed());
                        last_ack = Instant::now();
                        break;
                    }
                    assert!(
                        status == 503 || status == 0,
                        "deposit {key}: {status} {body}"
                    );
                    refused += 1;
                    assert!(
                        started.elapsed() < Duration::from_secs(15),
                        "deposit {key} never went through: {status} {body}"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            (acked, refused, longest_gap)
        })
    };
    tokio::time::sleep(Duration::from_millis(600)).await;
    redis.sync_aof().await;
    leader.kill();
    let took = standby
        .wait_role(&http, true, Duration::from_millis(LEASE_MS + 8_000))
        .await;
    let (acked, refused, gap) = flow.await.expect("the deposit flow");
    let filled = bids.await.expect("the bids");
    assert_eq!(filled, 4, "every 1-GPU bid fills against the 8 free GPUs");
    println!(
        "takeover: the hot standby led {} ms after the leader's SIGKILL (lease {LEASE_MS} ms); \
         {acked} deposits acknowledged through the API process, {refused} answers 503 and \
         retried, longest wait between acknowledgements {} ms",
        took.as_millis(),
        gap.as_millis()
    );
    assert_eq!(acked, 60);
    // Bound: the lease, one standby poll and the catch-up (nothing to replay).
    assert!(
        took < Duration::from_millis(LEASE_MS + 1_000),
        "takeover took {took:?}"
    );
    // Exactly once: the balance is the sum of what was acknowledged, on both replicas.
    for base in [&api.base, &standby.base] {
        wait_balance(&http, base, &buyer_key, "160.00", Duration::from_secs(3)).await;
    }
    // The websocket clients rebuilt, from contiguous deltas across the takeover, exactly the
    // inventory the REST view of their process shows: 4 of the 8 GPUs left.
    for (base, ws, view) in watchers.iter_mut() {
        let free = feed_matches_rest(&http, base, "H100-80G", ws, view).await;
        assert_eq!(free, 4, "{base}: {:?}", view.levels);
    }
    // The replicas agree: the same state hash at the same seq.
    let started = Instant::now();
    loop {
        let (a_seq, a_hash) = api.state(&http).await;
        let (s_seq, s_hash) = standby.state(&http).await;
        if a_seq == s_seq {
            assert_eq!(a_hash, s_hash, "replicas differ at seq {a_seq}");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the API process's replica never reached the leader's seq"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_engine_serves_no_public_api_and_a_forward_needs_the_cluster_key() {
    let dir = tempfile::tempdir().unwrap();
    let redis = support::RedisServer::start(dir.path(), true);
    let http = reqwest::Client::new();
    let engine = Gateway::start(&redis.url(), "engine");
    engine.wait_role(&http, true, Duration::from_secs(20)).await;
    let r = http
        .get(format!("{}/v1/catalog", engine.base))
        .send()
        .await
        .expect("answer");
    assert_eq!(r.status().as_u16(), 404, "an engine serves the public API");
    // A forward without the cluster key, or with another, is refused and journals nothing.
    let (seq_before, _) = engine.state(&http).await;
    for key in [None, Some("not-the-cluster-key")] {
        let mut req =
            http.post(format!("{}/internal/forward", engine.base))
                .body(gateway::cluster::frame(&[gateway::sequencer::encode(
                    &gateway::market::Op::Tick,
                )
                .unwrap()]));
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        let r = req.send().await.expect("answer");
        assert_eq!(r.status().as_u16(), 401);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["code"], "unauthorized");
    }
    // With the key: a body that is not a framed batch is 400.
    let r = http
        .post(format!("{}/internal/forward", engine.base))
        .bearer_auth(CLUSTER_KEY)
        .body("{\"not\": \"msgpack\"}")
        .send()
        .await
        .expect("answer");
    assert_eq!(r.status().as_u16(), 400);
    // A framed batch: a record that does not decode is refused alone, the others sequenced in
    // order.
    let tick = gateway::sequencer::encode(&gateway::market::Op::Tick).unwrap();
    let r = http
        .post(format!("{}/internal/forward", engine.base))
        .bearer_auth(CLUSTER_KEY)
        .body(gateway::cluster::frame(&[
            tick.clone(),
            b"not a record".to_vec(),
            tick,
        ]))
        .send()
        .await
        .expect("answer");
    assert_eq!(r.status().as_u16(), 200);
    let v: Value = r.json().await.unwrap();
    let results = v["results"].as_array().expect("results");
    assert_eq!(results.len(), 3, "{v}");
    let first = results[0]["seq"].as_u64().expect("sequenced");
    assert!(first > seq_before, "{v}");
    assert_eq!(results[1]["code"], "bad_request", "{v}");
    assert_eq!(results[2]["seq"].as_u64(), Some(first + 1), "{v}");
}

/// The forwarding link (the websocket API processes forward over): refused without the
/// cluster key; with it, batches in flight together are each answered under their own id, a
/// record that does not decode is refused alone, and a body that is not a framed batch is
/// refused whole, the link staying open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_forwarding_link_needs_the_key_and_answers_each_batch_by_its_id() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::{self, Message, client::IntoClientRequest};
    let dir = tempfile::tempdir().unwrap();
    let redis = support::RedisServer::start(dir.path(), true);
    let http = reqwest::Client::new();
    let engine = Gateway::start(&redis.url(), "engine");
    engine.wait_role(&http, true, Duration::from_secs(20)).await;
    let url = format!(
        "{}{}",
        engine.base.replacen("http://", "ws://", 1),
        gateway::cluster::FORWARD_LINK_PATH
    );
    let request = |key: Option<&str>| {
        let mut req = url.as_str().into_client_request().unwrap();
        if let Some(k) = key {
            req.headers_mut().insert(
                tungstenite::http::header::AUTHORIZATION,
                format!("Bearer {k}").parse().unwrap(),
            );
        }
        req
    };
    for key in [None, Some("not-the-cluster-key")] {
        match tokio_tungstenite::connect_async(request(key)).await {
            Err(tungstenite::Error::Http(resp)) => assert_eq!(resp.status().as_u16(), 401),
            other => panic!("the link opened without the key: {:?}", other.map(|_| ())),
        }
    }
    let (seq_before, _) = engine.state(&http).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(request(Some(CLUSTER_KEY)))
        .await
        .expect("the link opens with the key");
    let tick = gateway::sequencer::encode(&gateway::market::Op::Tick).unwrap();
    let batch = gateway::cluster::frame(&[tick.clone(), b"not a record".to_vec(), tick.clone()]);
    // Three batches at once: ids 7 and 9 are batches, 8 is not a framed batch.
    for (id, body) in [
        (7u64, batch.clone()),
        (8, b"\x00\x00\x00\xffcut".to_vec()),
        (9, batch),
    ] {
        ws.send(Message::Binary(
            gateway::cluster::link_message(id, &body).into(),
        ))
        .await
        .unwrap();
    }
    let mut answers = std::collections::BTreeMap::new();
    while answers.len() < 3 {
        let msg = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("an answer in time")
            .expect("the link stays open")
            .unwrap();
        let Message::Binary(bytes) = msg else {
            continue;
        };
        let (id, body) = gateway::cluster::read_link_message(&bytes).expect("an id");
        let v: Value = serde_json::from_slice(body).unwrap();
        answers.insert(id, v);
    }
    assert_eq!(answers.keys().copied().collect::<Vec<_>>(), vec![7, 8, 9]);
    assert!(
        answers[&8]["error"]
            .as_str()
            .unwrap()
            .contains("does not read"),
        "{}",
        answers[&8]
    );
    assert_eq!(answers[&8]["results"].as_array().map(Vec::len), Some(0));
    let mut seqs = Vec::new();
    for id in [7, 9] {
        let results = answers[&id]["results"].as_array().expect("results");
        assert_eq!(results.len(), 3, "{}", answers[&id]);
        assert_eq!(results[1]["code"], "bad_request", "{}", answers[&id]);
        let (a, b) = (results[0]["seq"].as_u64(), results[2]["seq"].as_u64());
        assert_eq!(b, a.map(|a| a + 1), "{}", answers[&id]);
        seqs.extend([a.unwrap(), b.unwrap()]);
    }
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs.len(), 4, "each command its own seq: {seqs:?}");
    assert!(seqs[0] > seq_before, "{seqs:?}");
    // A batch of 200 keeps its order in the journal (past the 128 polls after which a
    // join of the submits once reordered the rest).
    let many: Vec<Vec<u8>> = (0..200).map(|_| tick.clone()).collect();
    ws.send(Message::Binary(
        gateway::cluster::link_message(10, &gateway::cluster::frame(&many)).into(),
    ))
    .await
    .unwrap();
    let v = loop {
        let msg = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("an answer in time")
            .expect("the link stays open")
            .unwrap();
        if let Message::Binary(bytes) = msg {
            let (id, body) = gateway::cluster::read_link_message(&bytes).unwrap();
            assert_eq!(id, 10);
            break serde_json::from_slice::<Value>(body).unwrap();
        }
    };
    let seqs: Vec<u64> = v["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["seq"].as_u64().expect("sequenced"))
        .collect();
    assert_eq!(seqs.len(), 200);
    assert!(
        seqs.windows(2).all(|w| w[1] > w[0]),
        "out of order: {seqs:?}"
    );
    let (seq_after, _) = engine.state(&http).await;
    assert!(seq_after >= seq_before + 204, "{seq_before} → {seq_after}");
    // A frame whose header declares 4 GiB ends the link at the header, before the leader
    // buffers any of it.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = engine.base.trim_start_matches("http://").to_string();
    let mut raw = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let upgrade = format!(
        "GET {} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
         Authorization: Bearer {CLUSTER_KEY}\r\n\r\n",
        gateway::cluster::FORWARD_LINK_PATH
    );
    raw.write_all(upgrade.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        raw.read_exact(&mut byte).await.unwrap();
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    let mut frame = vec![0x82, 0xFF];
    frame.extend_from_slice(&(1u64 << 32).to_be_bytes());
    frame.extend_from_slice(&[1, 2, 3, 4]);
    frame.extend_from_slice(&[0u8; 100]);
    raw.write_all(&frame).await.unwrap();
    let mut rest = Vec::new();
    let ended = tokio::time::timeout(Duration::from_secs(5), raw.read_to_end(&mut rest)).await;
    assert!(ended.is_ok(), "the leader kept reading a 4 GiB frame");
    // The leader still forwards afterwards.
    assert!(engine.state(&http).await.0 >= seq_after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_is_fenced_steps_down_and_follows_again() {
    let dir = tempfile::tempdir().unwrap();
    let redis = support::RedisServer::start(dir.path(), true);
    let url = redis.url();
    let http = reqwest::Client::new();
    let mut old = Gateway::start(&url, "all");
    old.wait_role(&http, true, Duration::from_secs(20)).await;
    let new = Gateway::start(&url, "all");
    new.wait_role(&http, false, Duration::from_secs(20)).await;
    let stop = |sig: &str, pid: u32| {
        let ok = Proc::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill {sig}");
    };
    stop("-STOP", old.child.id());
    let took = new
        .wait_role(&http, true, Duration::from_millis(LEASE_MS + 8_000))
        .await;
    println!(
        "the standby led {} ms after the leader froze",
        took.as_millis()
    );
    let deposit = |key: &str| {
        serde_json::to_value(gateway::market::Op::Deposit {
            key: key.into(),
            buyer: 4242,
            amount: rust_decimal::Decimal::ONE,
        })
        .unwrap()
    };
    let submit = |base: String, op: Value| {
        let http = http.clone();
        async move {
            let r = http
                .post(format!("{base}/internal/ops"))
                .json(&op)
                .timeout(Duration::from_secs(5))
                .send()
                .await
                .ok()?;
            if !r.status().is_success() {
                return None;
            }
            r.json::<Value>().await.ok()?["seq"].as_u64()
        }
    };
    assert!(
        submit(new.base.clone(), deposit("new-leader"))
            .await
            .is_some()
    );
    stop("-CONT", old.child.id());
    // The old leader wakes fenced: it steps down instead of exiting, and follows.
    let back = old
        .wait_role(&http, false, Duration::from_millis(LEASE_MS + 5_000))
        .await;
    println!(
        "the old leader followed again {} ms after it woke",
        back.as_millis()
    );
    assert!(
        old.child.try_wait().unwrap().is_none(),
        "the old leader exited"
    );
    // Every lease lost is handled alike, not only the first: the new leader freezes, the old
    // one leads again; frozen in turn, it steps down a second time and follows again.
    stop("-STOP", new.child.id());
    old.wait_role(&http, true, Duration::from_millis(LEASE_MS + 8_000))
        .await;
    stop("-CONT", new.child.id());
    new.wait_role(&http, false, Duration::from_millis(LEASE_MS + 5_000))
        .await;
    stop("-STOP", old.child.id());
    new.wait_role(&http, true, Duration::from_millis(LEASE_MS + 8_000))
        .await;
    stop("-CONT", old.child.id());
    let again = old
        .wait_role(&http, false, Duration::from_millis(LEASE_MS + 5_000))
        .await;
    println!(
        "the old leader stepped down a second time and followed again {} ms after it woke",
        again.as_millis()
    );
    // It forwards to the new leader now, and its replica agrees with the leader's.
    let seq = submit(old.base.clone(), deposit("via-old")).await;
    assert!(seq.is_some(), "the old leader does not forward");
    let started = Instant::now();
    loop {
        let (o_seq, o_hash) = old.state(&http).await;
        let (n_seq, n_hash) = new.state(&http).await;
        if o_seq == n_seq && o_seq >= seq.unwrap() {
            assert_eq!(o_hash, n_hash, "replicas differ at seq {o_seq}");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{o_seq} vs {n_seq}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_two_api_processes_moves_to_the_other_when_one_dies() {
    let dir = tempfile::tempdir().unwrap();
    let redis = support::RedisServer::start(dir.path(), true);
    let url = redis.url();
    let http = reqwest::Client::new();
    let leader = Gateway::start(&url, "all");
    leader.wait_role(&http, true, Duration::from_secs(20)).await;
    support::procs::wait_admin(&http, &leader.base, Duration::from_secs(10)).await;
    let mut first = Gateway::start(&url, "api");
    let second = Gateway::start(&url, "api");
    for p in [&first, &second] {
        p.wait_role(&http, false, Duration::from_secs(20)).await;
        support::procs::wait_admin(&http, &p.base, Duration::from_secs(10)).await;
    }
    let account = |name: &'static str, role: &'static str| {
        let (http, base) = (http.clone(), leader.base.clone());
        async move {
            let (status, v) = post(
                &http,
                format!("{base}/v1/admin/accounts"),
                ADMIN_KEY,
                None,
                json!({"name": name, "role": role}),
            )
            .await;
            assert_eq!(status, 201, "{v}");
            (
                v["account"]["id"].as_str().unwrap().to_string(),
                v["api_key"].as_str().unwrap().to_string(),
            )
        }
    };
    let (buyer, buyer_key) = account("failover-buyer", "buyer").await;
    let (_, sup_key) = account("failover-idc", "supplier").await;
    let (status, body) = post(
        &http,
        format!("{}/v1/admin/accounts/{buyer}/deposits", leader.base),
        ADMIN_KEY,
        Some("failover-100"),
        json!({"amount": "100"}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, n) = post(
        &http,
        format!("{}/v1/nodes", leader.base),
        &sup_key,
        None,
        node("n1", "H100-80G", 8, "cn-east-2"),
    )
    .await;
    assert_eq!(status, 201, "{n}");
    let (status, o) = post(
        &http,
        format!("{}/v1/offers", leader.base),
        &sup_key,
        None,
        offer(n["id"].as_str().unwrap(), 8, "20", None),
    )
    .await;
    assert_eq!(status, 201, "{o}");

    // A key created through one API process signs in at once on the other: acknowledged once
    // the first process's replica has it, it may not have reached the second's yet, which
    // then waits for it instead of answering 401.
    for k in 0..10 {
        let (status, v) = post(
            &http,
            format!("{}/v1/admin/accounts", first.base),
            ADMIN_KEY,
            None,
            json!({"name": format!("fresh-{k}"), "role": "buyer"}),
        )
        .await;
        assert_eq!(status, 201, "{v}");
        let (status, b) = balance(&http, &second.base, v["api_key"].as_str().unwrap()).await;
        assert_eq!(status, 200, "key {k} refused on the other process: {b}");
    }
    // An unknown key is still refused there, after the wait.
    let started = Instant::now();
    let (status, b) = balance(
        &http,
        &second.base,
        "gpux_not_a_key_of_this_exchange_000000",
    )
    .await;
    assert_eq!(
        (status, b["code"].as_str()),
        (401, Some("unauthorized")),
        "{b}"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(gateway::api::auth::FOLLOWER_KEY_WAIT_MS),
        "{:?}",
        started.elapsed()
    );

    // The buyer's client knows both API processes and uses the first.
    let client = gpux_client::Client::new(
        &format!("{},{}", first.base, second.base),
        Some(buyer_key.clone()),
    )
    .expect("client");
    assert_eq!(client.base_url(), format!("{}/", first.base));
    let bid = |k: u32| -> gpux_wire::BidRequest {
        serde_json::from_value(json!({"client_order_id": format!("failover-{k}"),
            "sku": "H100-80G", "gpus": 1, "limit_price": "25", "kind": "spot",
            "time_in_force": "ioc", "duration_s": 600,
            "launch": {"ssh_keys": [gateway::demo::DEMO_SSH_KEY]}}))
        .expect("a bid")
    };
    let mut stream = client.subscribe("H100-80G", None);
    let u = next_update(&mut stream).await;
    assert_eq!(free_of(&u), 8, "{u:?}");
    let placed = client.place_bid(&bid(0)).await.expect("bid 0");
    assert_eq!(placed.filled_gpus, 1, "{placed:?}");
    loop {
        let u = next_update(&mut stream).await;
        if free_of(&u) == 7 {
            break;
        }
    }

    // The process the client uses dies: its next command goes to the other at once (the
    // connection is refused, so nothing was sent), and the stream resumes there from a
    // fresh snapshot.
    first.kill();
    let started = Instant::now();
    let placed = client
        .place_bid(&bid(1))
        .await
        .expect("bid 1 on the other process");
    assert_eq!(placed.filled_gpus, 1, "{placed:?}");
    assert_eq!(client.base_url(), format!("{}/", second.base));
    println!(
        "client failover: a bid answered by the other API process {} ms after the first died",
        started.elapsed().as_millis()
    );
    let mut resynced = false;
    loop {
        let u = next_update(&mut stream).await;
        resynced |= u.resynced;
        if resynced && free_of(&u) == 6 {
            break;
        }
    }
    // Reads go to the other process too: it knows both leases.
    let leases = client
        .leases(&gpux_client::LeaseQuery {
            state: Some("all".into()),
            ..Default::default()
        })
        .await
        .expect("leases");
    assert_eq!(leases.leases.len(), 2, "{leases:?}");
}

/// The stream's next update (within 15 s).
async fn next_update(stream: &mut gpux_client::InventoryStream) -> gpux_client::InventoryUpdate {
    use futures_util::StreamExt;
    tokio::time::timeout(Duration::from_secs(15), stream.next())
        .await
        .expect("an inventory update in time")
        .expect("the stream goes on")
        .expect("an update, not an error")
}

/// Free GPUs in an inventory update's view.
fn free_of(u: &gpux_client::InventoryUpdate) -> u64 {
    u.levels.values().map(|l| u64::from(l.free_gpus)).sum()
}

/// `redis-server` flags that make loading a dataset slow and visible: each key loads in at
/// least 100 µs, and Redis serves clients (answering `LOADING`) every 1 KiB loaded, as it
/// does every 2 MiB of a large dataset. With [`FILLER_KEYS`] keys, about 4 s of `LOADING`.
const SLOW_LOAD: [&str; 4] = [
    "--key-load-delay",
    "100",
    "--loading-process-events-interval-bytes",
    "1024",
];
/// Keys put in db 9 so that loading takes seconds.
const FILLER_KEYS: u32 = 20_000;

/// Deposits 1 CNY through `base` with idempotency key `key`, retrying a 503 or a
/// dropped connection with the same key for up to `within`: the status of the answer that
/// ended it (201 once acknowledged).
async fn deposit_through(
    http: &reqwest::Client,
    base: &str,
    buyer: &str,
    key: &str,
    within: Duration,
) -> (u16, Value) {
    let started = Instant::now();
    loop {
        let (status, body) = post(
            http,
            format!("{base}/v1/admin/accounts/{buyer}/deposits"),
            ADMIN_KEY,
            Some(key),
            json!({"amount": "1"}),
        )
        .await;
        if !(status == 503 || status == 0) || started.elapsed() > within {
            return (status, body);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Issue 25 item 7: a Redis restart took down every follower started with `--require-aof`.
/// `gateway/scripts/cluster.sh`'s topology — a leading engine, a hot standby engine and two
/// API processes on one `redis-server` with AOF, all with `--require-aof` — on a Redis whose
/// dataset takes seconds to load ([`FILLER_KEYS`] filler keys in db 9, [`SLOW_LOAD`]; an AOF
/// rewrite puts them in the RDB base, the part the delay applies to). SIGKILL Redis and start it again on the same port and dir: while it answers
/// `LOADING`, a gateway started then waits for it instead of exiting 1; afterwards all five
/// processes are alive, and a deposit through each API process is acknowledged and read back
/// on both. The node view's agent clock offset (issue 25) is the same on every API process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_loading_its_aof_takes_down_no_process_started_with_require_aof() {
    let run_started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let mut redis = support::RedisServer::start_with(dir.path(), true, &SLOW_LOAD);
    let url = redis.url();
    let http = reqwest::Client::new();
    {
        let mut raw = redis.raw().await;
        let _: () = redis::cmd("SELECT")
            .arg(9)
            .query_async(&mut raw)
            .await
            .expect("select");
        let _: i64 = redis::cmd("EVAL")
            .arg("for i=1,tonumber(ARGV[1]) do redis.call('SET','filler:'..i,'v') end return 1")
            .arg(0)
            .arg(FILLER_KEYS)
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
            if info.contains("aof_rewrite_in_progress:0")
                && info.contains("aof_rewrite_scheduled:0")
            {
                assert!(info.contains("aof_last_bgrewrite_status:ok"), "{info}");
                break;
            }
            assert!(Instant::now() < deadline, "the AOF rewrite did not finish");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    let aof = ["--require-aof"];
    let mut procs = vec![Gateway::start_with(&url, "engine", &aof)];
    procs[0]
        .wait_role(&http, true, Duration::from_secs(20))
        .await;
    procs.push(Gateway::start_with(&url, "engine", &aof));
    procs.push(Gateway::start_with(&url, "api", &aof));
    procs.push(Gateway::start_with(&url, "api", &aof));
    for p in &procs[1..] {
        p.wait_role(&http, false, Duration::from_secs(20)).await;
    }
    let apis = [procs[2].base.clone(), procs[3].base.clone()];
    for base in &apis {
        wait_admin(&http, base, Duration::from_secs(10)).await;
    }
    let (status, created) = post(
        &http,
        format!("{}/v1/admin/accounts", apis[0]),
        ADMIN_KEY,
        None,
        json!({"name": "restart-buyer", "role": "buyer"}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let buyer_key = created["api_key"].as_str().unwrap().to_string();
    let buyer = created["account"]["id"].as_str().unwrap().to_string();
    for (i, base) in apis.iter().enumerate() {
        let (status, body) =
            deposit_through(&http, base, &buyer, &format!("before-{i}"), Duration::ZERO).await;
        assert_eq!(status, 201, "{base}: {body}");
    }
    for base in &apis {
        wait_balance(&http, base, &buyer_key, "2.00", Duration::from_secs(5)).await;
    }
    // A node's agent clock offset, sent through one API process, read on the other.
    let (status, sup) = post(
        &http,
        format!("{}/v1/admin/accounts", apis[0]),
        ADMIN_KEY,
        None,
        json!({"name": "restart-idc", "role": "supplier"}),
    )
    .await;
    assert_eq!(status, 201, "{sup}");
    let sup_key = sup["api_key"].as_str().unwrap().to_string();
    let (status, n) = post(
        &http,
        format!("{}/v1/nodes", apis[0]),
        &sup_key,
        None,
        node("restart-n1", "H100-80G", 8, "cn-east-2"),
    )
    .await;
    assert_eq!(status, 201, "{n}");
    let node_id = n["id"].as_str().unwrap().to_string();
    let (status, hb) = post(
        &http,
        format!("{}/v1/nodes/{node_id}/heartbeat", apis[0]),
        &sup_key,
        None,
        json!({"healthy_gpus": 8, "clock_offset_ms": -1234}),
    )
    .await;
    assert_eq!(status, 200, "{hb}");
    let node_view = |base: String| {
        let (http, key, id) = (http.clone(), sup_key.clone(), node_id.clone());
        async move {
            let started = Instant::now();
            loop {
                let v: Value = http
                    .get(format!("{base}/v1/nodes/{id}"))
                    .bearer_auth(&key)
                    .send()
                    .await
                    .expect("node view")
                    .json()
                    .await
                    .unwrap_or(Value::Null);
                if v["agent_clock_offset_ms"] == json!(-1234) || started.elapsed().as_secs() > 5 {
                    return v;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    for base in &apis {
        let v = node_view(base.clone()).await;
        assert_eq!(v["agent_clock_offset_ms"], -1234, "{base}: {v}");
        assert_eq!(v["agent_clock_offset_at_ms"], hb["at_ms"], "{base}: {v}");
    }
    redis.sync_aof().await;

    // SIGKILL Redis; the new one loads its dataset for seconds, answering LOADING.
    redis.restart_loading();
    let deadline = Instant::now() + Duration::from_secs(10);
    let loading_since = loop {
        match redis.ping_reply() {
            Some(r) if r.starts_with("-LOADING") => break Instant::now(),
            Some(r) => panic!("expected LOADING while {FILLER_KEYS} keys load, got {r}"),
            None => {
                assert!(Instant::now() < deadline, "redis-server did not come back");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    // A gateway started now waits for Redis (it exited 1 blaming its configuration).
    procs.push(Gateway::start_with(&url, "api", &aof));
    // It answers `LOADING` throughout the load (events every 1 KiB loaded), `+PONG` after.
    let loaded = |r: &Option<String>| r.as_deref().is_some_and(|r| r.starts_with("+PONG"));
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let reply = redis.ping_reply();
    assert!(
        reply.as_deref().is_some_and(|r| r.starts_with("-LOADING")),
        "Redis must still answer LOADING 1 s in, or this test proves nothing: {reply:?}"
    );
    for p in &mut procs {
        assert_eq!(
            p.child.try_wait().expect("try_wait"),
            None,
            "{} exited during the load",
            p.base
        );
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while !loaded(&redis.ping_reply()) {
        assert!(Instant::now() < deadline, "Redis never finished loading");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let loading = loading_since.elapsed();
    eprintln!("redis was loading for about {loading:?}");
    assert!(
        loading >= Duration::from_secs(2),
        "{loading:?}: too short to prove anything"
    );

    // Every process is alive and serving: a deposit through each API process (the one
    // started during the load included) is acknowledged and read back on all of them.
    procs[4]
        .wait_role(&http, false, Duration::from_secs(20))
        .await;
    let apis = [apis[0].clone(), apis[1].clone(), procs[4].base.clone()];
    for (i, base) in apis.iter().enumerate() {
        let (status, body) = deposit_through(
            &http,
            base,
            &buyer,
            &format!("after-{i}"),
            Duration::from_secs(15),
        )
        .await;
        assert_eq!(status, 201, "{base}: {body}");
    }
    for base in &apis {
        wait_balance(&http, base, &buyer_key, "5.00", Duration::from_secs(10)).await;
    }
    let v = node_view(procs[4].base.clone()).await;
    assert_eq!(v["agent_clock_offset_ms"], -1234, "{v}");
    for p in &mut procs {
        assert_eq!(
            p.child.try_wait().expect("try_wait"),
            None,
            "{} exited",
            p.base
        );
    }
    for p in &procs[..2] {
        assert!(p.readyz(&http).await.is_some(), "{}: not ready", p.base);
    }
    eprintln!("the whole run took {:?}", run_started.elapsed());
}
