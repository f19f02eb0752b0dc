//! The websocket with a real client: trading and private events, upgrade refusals, frame
//! limits, cancel-on-disconnect; the inventory feed's consistency under load (clients that
//! subscribe at random moments each rebuild exactly the server's final inventory); slow
//! consumers resynced or closed without stalling others.

use crate::support;
use crate::support::api::{Backend, TestApp, View, Ws, bid, listed_node, quiet_opts, ws_connect};
use futures_util::SinkExt;
use gateway::feed::{Outbox, Topic};
use rand::RngExt;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

#[actix_web::test]
async fn trading_over_the_websocket() {
    let app = TestApp::start(Backend::Embedded, quiet_opts()).await;
    let (_, sup_key) = app.account("idc-1", "supplier").await;
    let (buyer_id, buyer_key) = app.account("team-a", "buyer").await;
    app.deposit(&buyer_id, "1000.00").await;
    let sup = app.client(Some(&sup_key));
    listed_node(&sup, "n1", "H100-80G", 8, "cn-east-2", "20").await;

    let mut ws = ws_connect(&app.ws_url(), Some(&buyer_key), None)
        .await
        .unwrap();
    ws.send(json!({"type": "subscribe", "request_id": "s1", "sku": "H100-80G"}))
        .await;
    let (snap, _) = ws.until("inventory_snapshot").await;
    assert_eq!(snap["levels"][0]["free_gpus"], 8);
    let seq0 = snap["seq"].as_u64().unwrap();
    let (ack, _) = ws.until("subscribed").await;
    assert_eq!(ack["request_id"], "s1");

    ws.send(json!({"type": "place_bid", "request_id": "r1",
        "bid": bid("w1", "H100-80G", 3, "25", "spot", "ioc")}))
        .await;
    let mut seen: BTreeMap<String, Value> = BTreeMap::new();
    while !seen.contains_key("bid_accepted")
        || !seen.contains_key("lease_started")
        || !seen.contains_key("inventory_delta")
    {
        let m = ws.recv().await;
        seen.insert(m["type"].as_str().unwrap().to_string(), m);
    }
    let acc = &seen["bid_accepted"];
    assert_eq!(
        (acc["request_id"].as_str(), acc["status"].as_str()),
        (Some("r1"), Some("filled"))
    );
    assert_eq!(seen["fill"]["gpus"], 3);
    assert_eq!(seen["fill"]["price"], "20.0000");
    assert_eq!(
        seen["lease_started"]["gpu_indexes"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    let d = &seen["inventory_delta"];
    assert_eq!(d["first_seq"].as_u64(), Some(seq0 + 1), "{d}");
    assert_eq!(d["levels"][0]["free_gpus"], 5);
    let lease = seen["fill"]["lease_id"].as_str().unwrap().to_string();

    ws.send(json!({"type": "get_balance", "request_id": "b"}))
        .await;
    let (b, _) = ws.until("balance").await;
    assert_eq!(b["balance"], "1000.00");
    assert_eq!(b["burn_rate_per_hour"], "60.0000");

    ws.send(json!({"type": "release_lease", "request_id": "x", "lease_id": lease}))
        .await;
    let (r, _) = ws.until("lease_released").await;
    assert_eq!(r["request_id"], "x");

    // Bad messages get a reason and keep the connection.
    for (m, code) in [
        (
            json!({"type": "place_bid", "bid": {"sku": "H100-80G"}}),
            "bad_json",
        ),
        (json!({"type": "teleport"}), "bad_json"),
        (
            json!({"type": "cancel_bid", "request_id": "c", "bid_id": "12345"}),
            "not_found",
        ),
        (json!({"type": "subscribe", "sku": "Z80"}), "unknown_sku"),
        (
            json!({"type": "ping", "request_id": "x".repeat(65)}),
            "invalid_request_id",
        ),
    ] {
        ws.send(m.clone()).await;
        let (r, _) = ws.until("rejected").await;
        assert_eq!(r["code"], code, "{m}: {r}");
    }
    ws.send(json!({"type": "ping", "request_id": "p"})).await;
    let (p, _) = ws.until("pong").await;
    assert_eq!(p["request_id"], "p");

    // A frame over the limit closes the connection with 1009.
    let big = "x".repeat(gateway::api::MAX_WS_FRAME_BYTES + 1);
    ws.s.send(Message::Text(big.into())).await.unwrap();
    let (c, _) = ws.until("__closed").await;
    assert!(c["frame"].as_str().unwrap().contains("Size"), "{c}");
}

/// Stopping the server (Ctrl-C, SIGTERM or `Running::stop`) with websockets open closes them
/// with 1001 `server_shutdown` at once, and a cancel-on-disconnect connection's resting bids
/// are cancelled before the journal drains. The sockets used to stay open, so the graceful stop
/// waited out the whole HTTP shutdown timeout (10 s) and then dropped the sessions without
/// running their cancels: the bids were still resting after the restart.
#[actix_web::test]
async fn stopping_the_server_closes_open_websockets_at_once() {
    let mut app = TestApp::start(Backend::Embedded, quiet_opts()).await;
    let (buyer_id, buyer_key) = app.account("team-a", "buyer").await;
    app.deposit(&buyer_id, "1000.00").await;
    let url = format!("{}?cancel_on_disconnect=true", app.ws_url());
    let mut buyer = ws_connect(&url, Some(&buyer_key), None).await.unwrap();
    buyer
        .send(json!({"type": "place_bid", "request_id": "r",
            "bid": bid("g1", "H100-80G", 1, "5", "spot", "gtc")}))
        .await;
    let (a, _) = buyer.until("bid_accepted").await;
    assert_eq!(a["status"], "resting");
    let mut anonymous = ws_connect(&app.ws_url(), None, None).await.unwrap();
    anonymous
        .send(json!({"type": "subscribe", "request_id": "s", "sku": "H100-80G"}))
        .await;
    anonymous.until("subscribed").await;

    let started = std::time::Instant::now();
    app.restart().await;
    let took = started.elapsed();
    for ws in [&mut buyer, &mut anonymous] {
        let (c, _) = ws.until("__closed").await;
        let frame = c["frame"].as_str().unwrap();
        assert!(
            frame.contains("Away") && frame.contains("server_shutdown"),
            "{c}"
        );
    }
    assert!(
        took < Duration::from_secs(8),
        "stop and restart took {took:?}"
    );
    let (_, bids, _) = app.client(Some(&buyer_key)).get("/v1/bids").await;
    assert_eq!(bids["bids"].as_array().unwrap().len(), 0, "{bids}");
}

/// A cancel-on-disconnect client that stopped reading, with the server's socket buffers full:
/// stopping the server still cancels its resting bids. The session used to sit in a send
/// (up to its 10 s timeout) until the HTTP server's shutdown timeout (also 10 s) dropped the
/// worker, and the cancels never ran: the bid was resting after the restart (found by a
/// fresh-user review). `flood` is what the client keeps sending without reading the answers.
async fn stop_cancels_the_bids_of_a_client_that_stopped_reading(flood: Message) {
    let mut app = TestApp::start(Backend::Embedded, quiet_opts()).await;
    let (buyer_id, buyer_key) = app.account("team-a", "buyer").await;
    app.deposit(&buyer_id, "1000.00").await;
    let url = format!("{}?cancel_on_disconnect=true", app.ws_url());
    let mut ws = support::api::StalledWs::connect(&url, &buyer_key, 4096).await;
    let place = json!({"type": "place_bid", "request_id": "r",
        "bid": bid("g1", "H100-80G", 1, "5", "spot", "gtc")});
    ws.s.send(Message::Text(place.to_string().into()))
        .await
        .unwrap();
    let buyer = app.client(Some(&buyer_key));
    let mut rested = false;
    for _ in 0..50 {
        let (_, bids, _) = buyer.get("/v1/bids").await;
        if bids["bids"].as_array().unwrap().len() == 1 {
            rested = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(rested, "the bid rests");
    let sent = ws.flood(1_000_000, flood).await;
    assert!(sent > 0, "the server stalled only after some frames");

    app.restart().await;
    let (_, bids, _) = app.client(Some(&buyer_key)).get("/v1/bids").await;
    assert_eq!(bids["bids"].as_array().unwrap().len(), 0, "{bids}");
    drop(ws);
}

#[actix_web::test]
async fn stopping_the_server_cancels_the_bids_of_a_client_that_stopped_reading() {
    stop_cancels_the_bids_of_a_client_that_stopped_reading(support::api::text_ping()).await;
}

/// The same with websocket ping frames: the session's pong waited without a bound (found by a
/// review after the text-send fix).
#[actix_web::test]
async fn stopping_the_server_cancels_the_bids_of_a_client_that_pings_without_reading() {
    stop_cancels_the_bids_of_a_client_that_stopped_reading(Message::Ping(vec![7; 64].into())).await;
}

#[actix_web::test]
async fn upgrade_refusals_and_anonymous_reads() {
    let mut opts = quiet_opts();
    opts.api.allowed_origins = vec!["https://market.example".into()];
    let app = TestApp::start(Backend::Embedded, opts).await;
    let (_, buyer_key) = app.account("team-a", "buyer").await;
    let url = app.ws_url();
    assert_eq!(
        ws_connect(&url, Some("gpux_nope"), None).await.err(),
        Some(401)
    );
    assert_eq!(
        ws_connect(&url, Some(&buyer_key), Some("https://evil.example"))
            .await
            .err(),
        Some(403)
    );
    assert!(
        ws_connect(&url, Some(&buyer_key), Some("https://market.example"))
            .await
            .is_ok()
    );
    let host = app.base.trim_start_matches("http://").to_string();
    assert!(
        ws_connect(&url, Some(&buyer_key), Some(&format!("http://{host}")))
            .await
            .is_ok()
    );
    // A malformed Authorization header is refused, never taken as anonymous.
    let mut req = tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(
        url.as_str(),
    )
    .unwrap();
    req.headers_mut()
        .insert("Authorization", "Basic dXNlcjpwYXNz".parse().unwrap());
    match tokio_tungstenite::connect_async(req).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => assert_eq!(r.status(), 401),
        other => panic!("expected 401, got {:?}", other.map(|_| ())),
    }
    // Browsers authenticate with a subprotocol entry.
    let mut req = tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(
        url.as_str(),
    )
    .unwrap();
    req.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        format!("gpux.v1, bearer.{buyer_key}").parse().unwrap(),
    );
    let (s, resp) = tokio_tungstenite::connect_async(req).await.unwrap();
    assert_eq!(resp.headers()["sec-websocket-protocol"], "gpux.v1");
    let mut ws = Ws { s };
    let w = ws.recv().await;
    assert_eq!(w["role"], "buyer");
    // Anonymous: inventory yes, trading no.
    let mut anon = ws_connect(&url, None, None).await.unwrap();
    anon.send(json!({"type": "subscribe", "sku": "RTX4090-24G", "region": "cn-north-1"}))
        .await;
    let s = anon.recv().await;
    assert_eq!(
        (s["type"].as_str(), s["region"].as_str()),
        (Some("inventory_snapshot"), Some("cn-north-1"))
    );
    anon.send(json!({"type": "place_bid", "request_id": "r",
        "bid": bid("a", "H100-80G", 1, "5", "spot", "ioc")}))
        .await;
    let (r, _) = anon.until("rejected").await;
    assert_eq!(r["code"], "unauthorized");
    // Plain HTTP GET on the websocket path: 400 JSON, not a panic.
    let (st, v, _) = app.client(Some(&buyer_key)).get("/v1/ws").await;
    assert_eq!((st, v["code"].as_str()), (400, Some("not_websocket")));
}

#[actix_web::test]
async fn cancel_on_disconnect_cancels_resting_bids() {
    let app = TestApp::start(Backend::Embedded, quiet_opts()).await;
    let (buyer_id, buyer_key) = app.account("team-a", "buyer").await;
    app.deposit(&buyer_id, "1000.00").await;
    let url = format!("{}?cancel_on_disconnect=true", app.ws_url());
    let mut ws = ws_connect(&url, Some(&buyer_key), None).await.unwrap();
    ws.send(json!({"type": "place_bid", "request_id": "r",
        "bid": bid("g1", "H100-80G", 1, "5", "spot", "gtc")}))
        .await;
    let (a, _) = ws.until("bid_accepted").await;
    assert_eq!(a["status"], "resting");
    // A REST bid of the same buyer is not this connection's: it stays.
    let (s, _, _) = app
        .client(Some(&buyer_key))
        .post(
            "/v1/bids",
            bid("g2", "H100-80G", 1, "5", "spot", "gtc"),
            None,
        )
        .await;
    assert_eq!(s, 201);
    drop(ws);
    let buyer = app.client(Some(&buyer_key));
    let mut bids = Value::Null;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        bids = buyer.get("/v1/bids").await.1;
        if bids["bids"].as_array().unwrap().len() == 1 {
            break;
        }
    }
    assert_eq!(bids["bids"].as_array().unwrap().len(), 1, "{bids}");
    assert_eq!(bids["bids"][0]["client_order_id"], "g2");
}

#[actix_web::test]
async fn feed_consistency_under_load() {
    let app = TestApp::start(Backend::Embedded, quiet_opts()).await;
    let (_, sup_key) = app.account("idc-1", "supplier").await;
    let (buyer_id, buyer_key) = app.account("team-a", "buyer").await;
    app.deposit(&buyer_id, "1000000.00").await;
    let sup = app.client(Some(&sup_key));
    let mut offers = Vec::new();
    for i in 0..12 {
        let region = ["cn-east-2", "cn-north-1", "cn-south-1"][i % 3];
        let (_, o) = listed_node(
            &sup,
            &format!("n{i}"),
            "RTX4090-24G",
            8,
            region,
            &format!("2.{i:02}"),
        )
        .await;
        offers.push(o);
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Load: bids filling and resting, releases, offer amendments.
    let load = {
        let stop = stop.clone();
        let buyer = app.client(Some(&buyer_key));
        let sup = app.client(Some(&sup_key));
        let offers = offers.clone();
        actix_web::rt::spawn(async move {
            let mut rng = rand::rng();
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                match rng.random_range(0..10) {
                    0..=4 => {
                        let tif = if rng.random_bool(0.5) { "ioc" } else { "gtc" };
                        let limit = format!("2.{:02}", rng.random_range(0..14));
                        let kind = if rng.random_bool(0.8) {
                            "spot"
                        } else {
                            "preemptible"
                        };
                        buyer
                            .post(
                                "/v1/bids",
                                bid(
                                    &format!("l{n}"),
                                    "RTX4090-24G",
                                    rng.random_range(1..4),
                                    &limit,
                                    kind,
                                    tif,
                                ),
                                None,
                            )
                            .await;
                    }
                    5..=6 => {
                        let leases = buyer.get("/v1/leases").await.1;
                        if let Some(l) = leases["leases"].as_array().and_then(|a| a.first()) {
                            let id = l["id"].as_str().unwrap();
                            buyer
                                .post(&format!("/v1/leases/{id}/release"), json!({}), None)
                                .await;
                        }
                    }
                    _ => {
                        let o = &offers[rng.random_range(0..offers.len())];
                        let price = format!("2.{:02}", rng.random_range(0..14));
                        sup.put(&format!("/v1/offers/{o}"), json!({"gpus": rng.random_range(1..9), "spot_price": price, "preemptible_price": "1.00"})).await;
                    }
                }
            }
            n
        })
    };
    // Subscribers join at random moments (some with a region filter).
    let mut clients = Vec::new();
    for i in 0..8 {
        tokio::time::sleep(Duration::from_millis(rand::rng().random_range(20..120))).await;
        let mut ws = ws_connect(&app.ws_url(), None, None).await.unwrap();
        let region = (i % 3 == 0).then_some("cn-north-1");
        ws.send(json!({"type": "subscribe", "sku": "RTX4090-24G", "region": region}))
            .await;
        clients.push((ws, region, View::default()));
    }
    // Read while the load runs, checking contiguity on every message.
    let deadline = std::time::Instant::now() + Duration::from_millis(1500);
    while std::time::Instant::now() < deadline {
        for (ws, _, view) in clients.iter_mut() {
            while let Ok(Some(Ok(Message::Text(t)))) = tokio::time::timeout(
                Duration::from_millis(5),
                futures_util::StreamExt::next(&mut ws.s),
            )
            .await
            {
                view.apply(&serde_json::from_str(&t).unwrap());
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let commands = load.await.unwrap();
    assert!(commands > 50, "load ran {commands} commands");
    for (ws, region, view) in clients.iter_mut() {
        let q = match region {
            Some(r) => format!("/v1/inventory?sku=RTX4090-24G&region={r}"),
            None => "/v1/inventory?sku=RTX4090-24G".to_string(),
        };
        let (_, server, _) = app.client(None).get(&q).await;
        let want = server["seq"].as_u64().unwrap();
        while view.seq < want {
            let m = ws.recv().await;
            view.apply(&m);
        }
        let mut expect = View::default();
        expect.apply(&server);
        assert_eq!(view.seq, want);
        assert_eq!(view.levels, expect.levels, "client {region:?} diverged");
    }
    assert!(clients.iter().any(|(_, _, v)| v.seq > 20), "the feed moved");
}

/// A slow consumer's outbox fills: its subscription is resynced with a fresh snapshot while a
/// fast consumer gets every delta; a consumer that cannot take private events is closed.
#[actix_web::test]
async fn slow_consumers_resync_or_close() {
    let app = TestApp::start(Backend::Embedded, quiet_opts()).await;
    let (_, sup_key) = app.account("idc-1", "supplier").await;
    let (buyer_id, buyer_key) = app.account("team-a", "buyer").await;
    app.deposit(&buyer_id, "1000000.00").await;
    let sup = app.client(Some(&sup_key));
    let (_, offer) = listed_node(&sup, "n1", "RTX4090-24G", 8, "cn-north-1", "2").await;
    let feed = app.api().feed.clone();
    let sku = app.api().catalog.lookup("RTX4090-24G").unwrap();
    let topic = Topic { sku, region: None };
    // Slow: an outbox of 2 that nobody reads for a while.
    let (slow_tx, mut slow_rx) = tokio::sync::mpsc::channel(2);
    let (close_tx, _close_rx) = tokio::sync::watch::channel(None);
    let slow = feed
        .connect(
            None,
            Outbox {
                tx: slow_tx,
                close: close_tx,
            },
        )
        .await;
    feed.subscribe(slow, topic.clone()).await.unwrap();
    let (fast_tx, mut fast_rx) = tokio::sync::mpsc::channel(10_000);
    let (close_tx2, _c2) = tokio::sync::watch::channel(None);
    let fast = feed
        .connect(
            None,
            Outbox {
                tx: fast_tx,
                close: close_tx2,
            },
        )
        .await;
    feed.subscribe(fast, topic.clone()).await.unwrap();
    // A buyer connection that never reads its private events.
    let (priv_tx, _priv_rx) = tokio::sync::mpsc::channel(1);
    let (priv_close, mut priv_close_rx) = tokio::sync::watch::channel(None);
    feed.connect(
        Some(buyer_id.parse().unwrap()),
        Outbox {
            tx: priv_tx,
            close: priv_close,
        },
    )
    .await;
    for i in 0..30 {
        sup.put(
            &format!("/v1/offers/{offer}"),
            json!({"gpus": 1 + i % 8, "spot_price": "2"}),
        )
        .await;
    }
    let buyer = app.client(Some(&buyer_key));
    for i in 0..3 {
        buyer
            .post(
                "/v1/bids",
                bid(&format!("p{i}"), "RTX4090-24G", 1, "3", "spot", "ioc"),
                None,
            )
            .await;
    }
    // The fast consumer saw every delta in order.
    let mut fast_view = View::default();
    let (_, server, _) = app.client(None).get("/v1/inventory?sku=RTX4090-24G").await;
    let want = server["seq"].as_u64().unwrap();
    while fast_view.seq < want {
        let m: Value = serde_json::from_str(&fast_rx.recv().await.unwrap()).unwrap();
        fast_view.apply(&m);
    }
    // The slow one: two messages, then (once it reads) a resync snapshot at the current seq.
    let mut slow_view = View::default();
    let mut resynced = false;
    while slow_view.seq < want {
        let m: Value = serde_json::from_str(
            &tokio::time::timeout(Duration::from_secs(2), slow_rx.recv())
                .await
                .unwrap()
                .unwrap(),
        )
        .unwrap();
        resynced |= m["resync"] == true;
        slow_view.apply(&m);
    }
    assert!(resynced, "the slow consumer was resynced");
    assert_eq!(slow_view.levels, fast_view.levels);
    // The buyer connection that could not take its fills was closed as a slow consumer.
    tokio::time::timeout(Duration::from_secs(2), priv_close_rx.changed())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(priv_close_rx.borrow().as_deref(), Some("slow_consumer"));
    let stats = feed.stats().await.unwrap();
    assert!(stats.resyncs >= 1 && stats.slow_closed >= 1, "{stats:?}");
}

/// Websocket limits at the edge: a frame of exactly the limit is read (and answered), one
/// byte more closes with 1009; subscriptions up to the limit, then `too_many_subscriptions`;
/// request ids up to 64 bytes.
#[actix_web::test]
async fn websocket_limits_at_the_edge() {
    let app = TestApp::start(Backend::Embedded, quiet_opts()).await;
    let mut ws = ws_connect(&app.ws_url(), None, None).await.unwrap();
    let max = gateway::api::MAX_WS_FRAME_BYTES;
    for len in [max - 1, max] {
        let mut frame = String::from("{\"type\":\"ping\",\"request_id\":\"");
        frame.push_str(&"x".repeat(len - frame.len() - 2));
        frame.push_str("\"}");
        assert_eq!(frame.len(), len);
        ws.s.send(Message::Text(frame.into())).await.unwrap();
        let (r, _) = ws.until("rejected").await;
        assert_eq!(r["code"], "invalid_request_id", "{len}");
    }
    let rid = "r".repeat(gateway::api::ws::MAX_REQUEST_ID);
    ws.send(json!({"type": "ping", "request_id": rid})).await;
    let (p, _) = ws.until("pong").await;
    assert_eq!(p["request_id"], rid.as_str());
    // Subscriptions: distinct (SKU, region) topics up to the limit.
    let limit = gateway::feed::MAX_SUBSCRIPTIONS;
    for i in 0..=limit {
        ws.send(
            json!({"type": "subscribe", "request_id": format!("s{i}"), "sku": "H100-80G",
            "region": format!("r{i}")}),
        )
        .await;
        let m = loop {
            let m = ws.recv().await;
            if m["type"] == "subscribed" || m["type"] == "rejected" {
                break m;
            }
        };
        if i < limit {
            assert_eq!(m["type"], "subscribed", "{i}: {m}");
        } else {
            assert_eq!(m["code"], "too_many_subscriptions", "{m}");
        }
    }
    ws.send(json!({"type": "subscribe", "sku": "H100-80G", "region": "r0"}))
        .await;
    let (m, _) = ws.until("rejected").await;
    assert_eq!(m["code"], "already_subscribed");
    ws.s.send(Message::Text("x".repeat(max + 1).into()))
        .await
        .unwrap();
    let (c, _) = ws.until("__closed").await;
    assert!(c["frame"].as_str().unwrap().contains("Size"), "{c}");
}

/// Found by the fresh-user review: a frame declaring 2^40 bytes made the server buffer
/// everything the client streamed (792 MB for 1 GiB). It must close at the header.
#[actix_web::test]
async fn an_oversized_frame_is_refused_at_its_header() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = TestApp::start(Backend::Embedded, quiet_opts()).await;
    let addr = app.base.trim_start_matches("http://").to_string();
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let req = format!(
        "GET /v1/ws HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = s.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 101"));
    // Text frame, masked, 64-bit length 2^40, then 1 MiB of it: the server answers a close
    // frame (1009) without waiting for the rest.
    let mut header = vec![0x81u8, 0xFF];
    header.extend_from_slice(&(1u64 << 40).to_be_bytes());
    header.extend_from_slice(&[1, 2, 3, 4]);
    s.write_all(&header).await.unwrap();
    let _ = s.write_all(&vec![0u8; 1024 * 1024]).await;
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::time::Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_millis(200), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
        if got.windows(2).any(|w| w == [0x88, 0x02] || w[0] == 0x88) {
            break;
        }
    }
    let close = got
        .iter()
        .position(|b| *b == 0x88)
        .expect("a close frame from the server");
    let code = u16::from_be_bytes([got[close + 2], got[close + 3]]);
    assert_eq!(code, 1009, "close code");
}

/// Found by the fresh-user review: a key revoked while its websocket was open kept trading.
#[actix_web::test]
async fn a_revoked_key_stops_on_an_open_websocket() {
    let app = TestApp::start(Backend::Embedded, quiet_opts()).await;
    let (buyer_id, buyer_key) = app.account("team-a", "buyer").await;
    app.deposit(&buyer_id, "1000.00").await;
    let mut ws = ws_connect(&app.ws_url(), Some(&buyer_key), None)
        .await
        .unwrap();
    ws.send(json!({"type": "ping", "request_id": "p"})).await;
    ws.until("pong").await;
    let (_, v, _) = app.client(Some(&buyer_key)).get("/v1/me").await;
    let key_id = v["key_id"].as_str().unwrap().to_string();
    let (s, _, _) = app
        .admin()
        .delete(&format!("/v1/admin/accounts/{buyer_id}/keys/{key_id}"))
        .await;
    assert_eq!(s, 200);
    ws.send(json!({"type": "place_bid", "request_id": "r",
        "bid": bid("after-revoke", "H100-80G", 1, "5", "spot", "gtc")}))
        .await;
    let (r, _) = ws.until("rejected").await;
    assert_eq!(r["code"], "unauthorized");
    let (c, _) = ws.until("__closed").await;
    assert!(c["frame"].as_str().unwrap().contains("key_revoked"), "{c}");
}

/// Found by the fresh-user review: bids still in flight when the socket closed escaped
/// cancel-on-disconnect.
#[actix_web::test]
async fn cancel_on_disconnect_covers_bids_in_flight() {
    let app = TestApp::start(Backend::Embedded, quiet_opts()).await;
    let (buyer_id, buyer_key) = app.account("team-a", "buyer").await;
    app.deposit(&buyer_id, "100000.00").await;
    let url = format!("{}?cancel_on_disconnect=true", app.ws_url());
    for i in 0..5 {
        let mut ws = ws_connect(&url, Some(&buyer_key), None).await.unwrap();
        ws.send(json!({"type": "place_bid", "request_id": "r",
            "bid": bid(&format!("f{i}"), "H100-80G", 1, "5", "spot", "gtc")}))
            .await;
        ws.s.close(None).await.unwrap();
    }
    let buyer = app.client(Some(&buyer_key));
    let mut bids = Value::Null;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        bids = buyer.get("/v1/bids").await.1;
        if bids["bids"].as_array().unwrap().is_empty() {
            break;
        }
    }
    assert_eq!(bids["bids"], json!([]), "{bids}");
}

/// A websocket that keeps every text frame it receives, the `welcome` included, as JSON.
struct Recorder {
    ws: Ws,
    frames: Vec<Value>,
}

impl Recorder {
    async fn connect(url: &str, key: &str) -> Recorder {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let mut req = url.into_client_request().expect("ws request");
        req.headers_mut().insert(
            "Authorization",
            format!("Bearer {key}").parse().expect("header"),
        );
        let (s, _) = tokio_tungstenite::connect_async(req)
            .await
            .expect("ws connect");
        Recorder {
            ws: Ws { s },
            frames: Vec::new(),
        }
    }

    /// Sends `m` and reads until a frame of each of `types` has arrived since the send.
    async fn exchange(&mut self, m: Option<Value>, types: &[&str]) {
        if let Some(m) = m {
            self.ws.send(m).await;
        }
        let mut missing: Vec<&str> = types.to_vec();
        while !missing.is_empty() {
            let v = self.ws.recv().await;
            assert_ne!(
                v["type"], "__closed",
                "closed; still waiting for {missing:?}"
            );
            missing.retain(|t| v["type"] != *t);
            self.frames.push(v);
        }
    }
}

/// Every kind of message a buyer and a supplier receive through one delivered lease (bid,
/// fill, provisioning, ready, release, wiping, torn down; welcome, subscriptions, inventory,
/// trades, balance, pong, rejections, cancels) deserializes into the wire crate's `ServerMsg`
/// and serializes back to the very same JSON: no field the type lacks, none it adds, no
/// `null` where the server leaves a field out or the reverse. So `gpux-wire` and the server
/// cannot drift apart (issue 16).
#[actix_web::test]
async fn every_server_message_of_a_delivered_lease_is_a_wire_server_msg() {
    use gpux_wire::ws::ServerMsg;
    let app = TestApp::start(Backend::Embedded, support::api::delivery_opts()).await;
    let (_, sup_key) = app.account("idc-1", "supplier").await;
    let (buyer_id, buyer_key) = app.account("team-a", "buyer").await;
    app.deposit(&buyer_id, "1000.00").await;
    listed_node(
        &app.client(Some(&sup_key)),
        "n1",
        "H100-80G",
        8,
        "cn-east-2",
        "20",
    )
    .await;
    let launch = json!({"ssh_keys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM7t3CQcihrH/4tM1K41mGfGrkuwsCkbk7Z2fjczQzrv b@l"],
                        "ports": [8888]});
    let delivered = |coid: &str, gpus: u32, limit: &str, tif: &str| {
        let mut b = bid(coid, "H100-80G", gpus, limit, "spot", tif);
        b["launch"] = launch.clone();
        b
    };
    let url = app.ws_url();
    let mut sup = Recorder::connect(&url, &sup_key).await;
    sup.exchange(None, &["welcome"]).await;
    let mut buyer = Recorder::connect(&url, &buyer_key).await;
    // The first balance push comes at once.
    buyer.exchange(None, &["welcome", "balance"]).await;

    let steps = [
        (
            json!({"type": "subscribe", "request_id": "s", "sku": "H100-80G"}),
            &["subscribed", "inventory_snapshot"][..],
        ),
        (json!({"type": "ping"}), &["pong"][..]),
        // Rejections: with a field and without, with a request_id and without.
        (
            json!({"type": "subscribe", "sku": "Z80"}),
            &["rejected"][..],
        ),
        (json!({"type": "teleport"}), &["rejected"][..]),
        (
            json!({"type": "cancel_bid", "request_id": "t", "bid_id": "12345"}),
            &["rejected"][..],
        ),
        (
            json!({"type": "get_balance", "request_id": "b"}),
            &["balance"][..],
        ),
        (
            json!({"type": "place_bid", "request_id": "r1",
                   "bid": delivered("job-1", 2, "25", "ioc")}),
            &[
                "bid_accepted",
                "fill",
                "lease_started",
                "bid_closed",
                "inventory_delta",
                "trade",
                "lease_provisioning",
            ][..],
        ),
        (
            json!({"type": "place_bid", "request_id": "r2",
                   "bid": delivered("low-1", 1, "5", "gtc")}),
            &["bid_accepted", "bid_rested"][..],
        ),
        (
            json!({"type": "place_bid", "request_id": "r3",
                   "bid": delivered("low-2", 1, "5", "gtc")}),
            &["bid_accepted", "bid_rested"][..],
        ),
    ];
    for (m, types) in steps {
        buyer.exchange(Some(m), types).await;
    }
    let resting: Vec<String> = buyer
        .frames
        .iter()
        .filter(|f| f["type"] == "bid_rested")
        .map(|f| f["bid_id"].as_str().expect("bid id").to_string())
        .collect();
    buyer
        .exchange(
            Some(json!({"type": "cancel_bid", "request_id": "c", "bid_id": resting[0]})),
            &["bid_canceled", "bid_closed"],
        )
        .await;
    buyer
        .exchange(Some(json!({"type": "cancel_all"})), &["bids_canceled"])
        .await;
    let lease = buyer
        .frames
        .iter()
        .find(|f| f["type"] == "fill")
        .map(|f| f["lease_id"].clone())
        .expect("a fill");

    sup.exchange(None, &["lease_assigned"]).await;
    let access = json!({"ssh_host": "203.0.113.7", "ssh_port": 2222, "ssh_user": "root",
                        "urls": {"8888": "https://l1-8888.idc.example"}});
    sup.exchange(
        Some(
            json!({"type": "report_ready", "request_id": "ready", "lease_id": lease,
                    "access": access}),
        ),
        &["lease_reported", "lease_ready"],
    )
    .await;
    buyer.exchange(None, &["lease_ready"]).await;
    buyer
        .exchange(
            Some(json!({"type": "release_lease", "request_id": "x", "lease_id": lease})),
            &["lease_released", "lease_ended", "lease_wiping"],
        )
        .await;
    sup.exchange(None, &["lease_ended", "lease_wiping"]).await;
    sup.exchange(
        Some(json!({"type": "report_torn_down", "lease_id": lease, "method": "wiped"})),
        &["lease_reported", "lease_torn_down"],
    )
    .await;
    buyer.exchange(None, &["lease_torn_down"]).await;
    buyer
        .exchange(
            Some(json!({"type": "unsubscribe", "request_id": "u", "sku": "H100-80G"})),
            &["unsubscribed"],
        )
        .await;

    let mut kinds = std::collections::BTreeSet::new();
    for frame in buyer.frames.iter().chain(&sup.frames) {
        let typed: ServerMsg = serde_json::from_value(frame.clone())
            .unwrap_or_else(|e| panic!("not a ServerMsg ({e}): {frame}"));
        let back = serde_json::to_value(&typed).expect("serializes");
        assert_eq!(&back, frame, "the wire type changes this frame");
        kinds.insert(frame["type"].as_str().expect("type").to_string());
    }
    for k in [
        "welcome",
        "subscribed",
        "unsubscribed",
        "inventory_snapshot",
        "inventory_delta",
        "trade",
        "pong",
        "rejected",
        "balance",
        "bid_accepted",
        "bid_rested",
        "bid_canceled",
        "bids_canceled",
        "bid_closed",
        "fill",
        "lease_started",
        "lease_assigned",
        "lease_provisioning",
        "lease_reported",
        "lease_ready",
        "lease_released",
        "lease_ended",
        "lease_wiping",
        "lease_torn_down",
    ] {
        assert!(kinds.contains(k), "no {k} frame seen: {kinds:?}");
    }
    // The shapes a reader relies on: replies echo `request_id` (null when the client sent
    // none), pushes carry none; a rejection names its field when it has one; the buyer's
    // copy of a wipe leaves out the supplier's node and GPUs.
    let first = |r: &Recorder, ty: &str| -> Value {
        r.frames
            .iter()
            .find(|f| f["type"] == ty)
            .cloned()
            .expect(ty)
    };
    let push = first(&buyer, "balance");
    assert!(push.get("request_id").is_none(), "{push}");
    let pong = first(&buyer, "pong");
    assert_eq!(pong.get("request_id"), Some(&Value::Null), "{pong}");
    let rejected: Vec<&Value> = buyer
        .frames
        .iter()
        .filter(|f| f["type"] == "rejected")
        .collect();
    assert_eq!(
        (
            rejected[0]["request_id"].clone(),
            rejected[0]["field"].as_str()
        ),
        (Value::Null, Some("sku")),
        "{}",
        rejected[0]
    );
    assert_eq!(rejected[1]["code"], "bad_json");
    assert!(rejected[1].get("field").is_none(), "{}", rejected[1]);
    assert_eq!(
        (
            rejected[2]["request_id"].as_str(),
            rejected[2]["field"].as_str()
        ),
        (Some("t"), Some("bid")),
        "{}",
        rejected[2]
    );
    let wiping = first(&buyer, "lease_wiping");
    assert!(wiping.get("node_id").is_none(), "{wiping}");
    assert_eq!(first(&sup, "lease_wiping")["gpu_indexes"], json!([0, 1]));
    let welcome = first(&sup, "welcome");
    assert_eq!(
        (welcome["role"].as_str(), welcome.get("node_id")),
        (Some("supplier"), Some(&Value::Null)),
        "{welcome}"
    );
}

/// `welcome` is every connection's first frame, even while the account's other sessions are
/// receiving events: before the fix, a connection registered with the feed hub before its
/// `welcome` was queued, so another session's `bid_rested` could arrive first (CI: the
/// cancel-on-disconnect test read `bid_rested` where it expected `welcome`).
#[actix_web::test]
async fn welcome_comes_first_while_the_account_trades() {
    let mut opts = quiet_opts();
    opts.api.rate_per_s = 1_000_000;
    opts.api.rate_burst = 1_000_000;
    let app = TestApp::start(Backend::Embedded, opts).await;
    let (buyer_id, buyer_key) = app.account("team-a", "buyer").await;
    app.deposit(&buyer_id, "1000000.00").await;
    let stop = std::rc::Rc::new(std::cell::Cell::new(false));
    // Four sessions' worth of bids resting on the account: each is an event for every one of
    // the account's connections.
    let traders: Vec<_> = (0..4)
        .map(|t| {
            let (trader, stop) = (app.client(Some(&buyer_key)), stop.clone());
            actix_web::rt::spawn(async move {
                let mut n = 0u32;
                while !stop.get() {
                    let (s, v, _) = trader
                        .post(
                            "/v1/bids",
                            bid(&format!("t{t}-{n}"), "H100-80G", 1, "5", "spot", "gtc"),
                            None,
                        )
                        .await;
                    assert_eq!(s, 201, "{v}");
                    n += 1;
                }
                n
            })
        })
        .collect();
    // `ws_connect` asserts that the first frame is `welcome`.
    for _ in 0..300 {
        let ws = ws_connect(&app.ws_url(), Some(&buyer_key), None)
            .await
            .unwrap();
        drop(ws);
    }
    stop.set(true);
    let mut placed = 0;
    for t in traders {
        placed += t.await.unwrap();
    }
    assert!(
        placed > 100,
        "only {placed} bids were placed while the connections opened"
    );
}

/// Issue 25 (break-it pass): a `place_bid` whose bid does not decode was rejected with no
/// request id (a client with several bids in flight could not tell which one failed) and no
/// field. It now echoes the request id and names the field by its path under `bid`.
#[actix_web::test]
async fn an_undecodable_bid_is_rejected_with_its_request_id_and_field() {
    let app = TestApp::start(Backend::Embedded, quiet_opts()).await;
    let (_, buyer_key) = app.account("team-a", "buyer").await;
    let mut ws = ws_connect(&app.ws_url(), Some(&buyer_key), None)
        .await
        .unwrap();
    let mut negative = bid("w1", "H100-80G", 1, "25", "spot", "ioc");
    negative["gpus"] = json!(-1);
    let mut kind = bid("w2", "H100-80G", 1, "25", "spot", "ioc");
    kind["kind"] = json!(5);
    for (rid, b, field) in [("r1", negative, "bid.gpus"), ("r2", kind, "bid.kind")] {
        ws.send(json!({"type": "place_bid", "request_id": rid, "bid": b}))
            .await;
        let (e, _) = ws.until("rejected").await;
        assert_eq!(
            (
                e["request_id"].as_str(),
                e["code"].as_str(),
                e["field"].as_str()
            ),
            (Some(rid), Some("bad_json"), Some(field)),
            "{e}"
        );
    }
    // Not JSON at all: no id to echo, still an answer.
    ws.send_text("{\"type\":").await;
    let (e, _) = ws.until("rejected").await;
    assert_eq!(
        (e["request_id"].clone(), e["code"].as_str()),
        (Value::Null, Some("bad_json")),
        "{e}"
    );
}
