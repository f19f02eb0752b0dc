//! API benchmark (issue 5). Prints one table from one run on this machine:
//! - ceiling: a trivial actix-web JSON echo endpoint (same worker count, same client, same
//!   request size) — the most any JSON POST can do here;
//! - `POST /v1/bids` with durable acknowledgements (embedded store, fsync per group commit):
//!   throughput and latency p50/p99/p99.9, and its ratio to the echo (target ≥ 0.5×);
//! - websocket bid throughput (pipelined `place_bid`, up to 32 in flight per connection);
//! - inventory fan-out to N subscribers (default 1,000): p50/p99 publish-to-receive latency of
//!   deltas (hub publish time `published_at_us` to the client's receive time).
//!
//! Client and server share the machine's cores, so figures are ratios to the echo measured in
//! the same run, not absolute capacities.
//!
//! Run: `cargo bench -p gateway --bench api`. Env: `GPUX_API_BENCH_SECONDS` per throughput run
//! (default 5), `GPUX_API_BENCH_CLIENTS` concurrent HTTP clients (default 64),
//! `GPUX_API_BENCH_SUBSCRIBERS` (default 1000).

use futures_util::{SinkExt, StreamExt};
use gateway::accounts::Role;
use gateway::app::{AppOptions, start};
use gateway::journal::EmbeddedJournal;
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Run {
    ops: u64,
    secs: f64,
    hist: Histogram<u64>,
}

impl Run {
    fn rate(&self) -> f64 {
        self.ops as f64 / self.secs
    }
    fn us(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64
    }
}

/// `clients` closed-loop HTTP clients for `secs`, each POSTing `body(i)` to `url`.
async fn http_load(
    url: String,
    key: Option<String>,
    clients: u64,
    secs: u64,
    body: Arc<dyn Fn(u64, u64) -> String + Send + Sync>,
) -> Run {
    let stop = Arc::new(AtomicBool::new(false));
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(clients as usize)
        .build()
        .expect("client");
    let mut tasks = Vec::new();
    let started = Instant::now();
    for c in 0..clients {
        let (stop, http, url, key, body) = (
            stop.clone(),
            http.clone(),
            url.clone(),
            key.clone(),
            body.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut h = Histogram::<u64>::new(3).expect("histogram");
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let mut r = http
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body(c, n));
                if let Some(k) = &key {
                    r = r.bearer_auth(k);
                }
                let resp = r.send().await.expect("request");
                let status = resp.status();
                let _ = resp.bytes().await;
                assert!(status.is_success(), "status {status}");
                h.record(t.elapsed().as_micros() as u64).ok();
                n += 1;
            }
            (n, h)
        }));
    }
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let mut hist = Histogram::<u64>::new(3).expect("histogram");
    let mut ops = 0;
    for t in tasks {
        let (n, h) = t.await.expect("client task");
        ops += n;
        hist.add(h).ok();
    }
    Run {
        ops,
        secs: started.elapsed().as_secs_f64(),
        hist,
    }
}

fn bid_body(c: u64, n: u64) -> String {
    // Mostly bids below every offer (IOC: closed for price), one in 16 fills 1 GPU and is
    // released by the market's max lease (60 s): the full path — pre-trade check, matching,
    // journal, ledger — on every request.
    let limit = if n.is_multiple_of(16) { "2.50" } else { "1.00" };
    json!({"client_order_id": format!("c{c}-{n}"), "sku": "RTX4090-24G", "gpus": 1,
        "limit_price": limit, "kind": "spot", "time_in_force": "ioc", "duration_s": 60})
    .to_string()
}

/// Registers an 8-GPU node of `sku` in `region` for `supplier` and posts `terms` on it;
/// answers the offer id.
async fn list_node(
    api: &gateway::api::Api,
    supplier: u64,
    name: String,
    sku: &str,
    region: &str,
    terms: exchange::OfferTerms,
) -> exchange::OfferId {
    use exchange::{AccountId, Command, Event};
    use gateway::market::Op;
    let first = |c: &gateway::sequencer::Committed, what: &str| {
        gateway::api::engine_output(c)
            .unwrap_or_else(|e| panic!("{what}: {e}"))
            .events
            .clone()
    };
    let c = api
        .submit(Op::Engine(Command::RegisterNode {
            account: AccountId(supplier),
            spec: exchange::NodeSpec {
                name,
                sku: api.catalog.lookup(sku).expect("sku"),
                gpus: 8,
                region: region.into(),
                jurisdiction: exchange::Jurisdiction::parse("CN").expect("CN"),
                interconnect: exchange::Interconnect::Infiniband,
                nvlink: true,
                fabric: None,
            },
        }))
        .await
        .expect("node");
    let node = first(&c, "node")
        .iter()
        .find_map(|e| match e {
            Event::NodeRegistered { node, .. } => Some(*node),
            _ => None,
        })
        .expect("node id");
    let c = api
        .submit(Op::Engine(Command::PostOffer {
            account: AccountId(supplier),
            node,
            terms,
        }))
        .await
        .expect("offer");
    first(&c, "offer")
        .iter()
        .find_map(|e| match e {
            Event::OfferPosted { offer, .. } => Some(*offer),
            _ => None,
        })
        .expect("offer id")
}

async fn setup_market(api: &gateway::api::Api, buyers: u64) -> Vec<String> {
    use gateway::api::admin::create_account_with_key;
    let (sup, _, _) = create_account_with_key(api, None, "bench-idc", Role::Supplier)
        .await
        .expect("supplier");
    for i in 0..200u64 {
        let terms = exchange::OfferTerms {
            gpus: 8,
            spot_price: exchange::Price::from_decimal(rust_decimal::Decimal::new(198, 2))
                .expect("price"),
            preemptible_price: None,
            min_lease_s: 1,
            max_lease_s: 60,
            available_until_ms: gateway::api::now_ms() + 86_400_000,
            notice_s: 0,
            provision_s: 180,
        };
        let region = ["cn-east-2", "cn-north-1", "cn-south-1"][i as usize % 3];
        list_node(api, sup, format!("n{i}"), "RTX4090-24G", region, terms).await;
    }
    let mut keys = Vec::new();
    for b in 0..buyers {
        let (id, key, _) =
            create_account_with_key(api, None, &format!("bench-buyer-{b}"), Role::Buyer)
                .await
                .expect("buyer");
        api.submit(gateway::market::Op::Deposit {
            key: format!("bench-{id}"),
            buyer: id,
            amount: rust_decimal::Decimal::from(100_000_000),
        })
        .await
        .expect("deposit");
        keys.push(key);
    }
    keys
}

async fn echo_server() -> (String, actix_web::dev::ServerHandle) {
    use actix_web::{App, HttpResponse, HttpServer, web};
    let server = HttpServer::new(|| {
        App::new().route(
            "/echo",
            web::post().to(|v: web::Json<Value>| async move { HttpResponse::Ok().json(v.0) }),
        )
    })
    .workers(2)
    .bind("127.0.0.1:0")
    .expect("bind echo");
    let addr = server.addrs()[0];
    let s = server.run();
    let h = s.handle();
    tokio::spawn(s);
    (format!("http://{addr}/echo"), h)
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn ws(url: &str, key: Option<&str>) -> Ws {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut req = url.into_client_request().expect("request");
    if let Some(k) = key {
        req.headers_mut().insert(
            "Authorization",
            format!("Bearer {k}").parse().expect("header"),
        );
    }
    let (s, _) = tokio_tungstenite::connect_async_with_config(req, None, true)
        .await
        .expect("ws connect");
    s
}

/// Pipelined websocket bids: each connection keeps up to `depth` bids in flight.
async fn ws_load(url: String, keys: Vec<String>, secs: u64, depth: u64) -> Run {
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (c, key) in keys.into_iter().enumerate() {
        let (stop, url) = (stop.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let s = ws(&url, Some(&key)).await;
            let (mut tx, mut rx) = s.split();
            let mut hist = Histogram::<u64>::new(3).expect("histogram");
            let mut sent: std::collections::HashMap<String, Instant> = Default::default();
            let mut n = 0u64;
            let mut done = 0u64;
            loop {
                while (sent.len() as u64) < depth && !stop.load(Ordering::Relaxed) {
                    let rid = format!("{n}");
                    let body: Value =
                        serde_json::from_str(&bid_body(1_000_000 + c as u64, n)).expect("json");
                    let m = json!({"type": "place_bid", "request_id": rid, "bid": body});
                    tx.send(Message::Text(m.to_string().into()))
                        .await
                        .expect("send");
                    sent.insert(rid, Instant::now());
                    n += 1;
                }
                if sent.is_empty() {
                    break;
                }
                let Some(Ok(Message::Text(t))) = rx.next().await else {
                    break;
                };
                let v: Value = serde_json::from_str(&t).expect("json");
                if let Some(rid) = v["request_id"].as_str()
                    && let Some(t0) = sent.remove(rid)
                {
                    assert_eq!(v["type"], "bid_accepted", "{v}");
                    hist.record(t0.elapsed().as_micros() as u64).ok();
                    done += 1;
                }
            }
            (done, hist)
        }));
    }
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let mut hist = Histogram::<u64>::new(3).expect("histogram");
    let mut ops = 0;
    for t in tasks {
        let (n, h) = t.await.expect("ws task");
        ops += n;
        hist.add(h).ok();
    }
    Run {
        ops,
        secs: started.elapsed().as_secs_f64(),
        hist,
    }
}

/// `subs` subscribers to one SKU; a supplier amends an offer `rate` times a second; answers
/// the publish-to-receive latency histogram (µs) and deltas received.
async fn fanout(base: &str, api: &gateway::api::Api, subs: u64, secs: u64, rate: u64) -> Run {
    let url = base.replacen("http://", "ws://", 1) + "/v1/ws";
    let received = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..subs {
        let (url, received, stop) = (url.clone(), received.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut s = ws(&url, None).await;
            s.send(Message::Text(
                json!({"type": "subscribe", "sku": "H100-80G"})
                    .to_string()
                    .into(),
            ))
            .await
            .expect("subscribe");
            let mut hist = Histogram::<u64>::new(3).expect("histogram");
            while !stop.load(Ordering::Relaxed) {
                let Ok(Some(Ok(Message::Text(t)))) =
                    tokio::time::timeout(Duration::from_millis(200), s.next()).await
                else {
                    continue;
                };
                let now_us = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_micros() as i64);
                let v: Value = serde_json::from_str(&t).expect("json");
                if v["type"] == "inventory_delta"
                    && let Some(p) = v["published_at_us"].as_i64()
                {
                    hist.record((now_us - p).max(0) as u64).ok();
                    received.fetch_add(1, Ordering::Relaxed);
                }
            }
            hist
        }));
    }
    // Let every subscriber get its snapshot.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    use gateway::api::admin::create_account_with_key;
    let (sup, _, _) = create_account_with_key(api, None, "fanout-idc", Role::Supplier)
        .await
        .expect("supplier");
    let terms = |gpus: u32| exchange::OfferTerms {
        gpus,
        spot_price: exchange::Price::from_decimal(rust_decimal::Decimal::from(22)).expect("p"),
        preemptible_price: None,
        min_lease_s: 1,
        max_lease_s: 3600,
        available_until_ms: gateway::api::now_ms() + 86_400_000,
        notice_s: 0,
        provision_s: 180,
    };
    let offer = list_node(api, sup, "fan".into(), "H100-80G", "cn-east-2", terms(8)).await;
    let started = Instant::now();
    let mut every = tokio::time::interval(Duration::from_micros(1_000_000 / rate.max(1)));
    let mut i = 0u32;
    while started.elapsed() < Duration::from_secs(secs) {
        every.tick().await;
        i += 1;
        api.submit(gateway::market::Op::Engine(exchange::Command::AmendOffer {
            account: exchange::AccountId(sup),
            offer,
            terms: terms(1 + i % 8),
        }))
        .await
        .expect("amend");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let mut hist = Histogram::<u64>::new(3).expect("histogram");
    for t in tasks {
        hist.add(t.await.expect("subscriber")).ok();
    }
    Run {
        ops: received.load(Ordering::Relaxed),
        secs: started.elapsed().as_secs_f64(),
        hist,
    }
}

fn main() {
    let secs = env("GPUX_API_BENCH_SECONDS", 5);
    let clients = env("GPUX_API_BENCH_CLIENTS", 64);
    let subs = env("GPUX_API_BENCH_SUBSCRIBERS", 1000);
    let clients_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("client runtime");
    let clients_rt_owner = clients_rt;
    let clients_rt = clients_rt_owner.handle().clone();
    actix_web::rt::System::new().block_on(async move {
        let (echo_url, echo) = echo_server().await;
        let echo_run = clients_rt
            .spawn(http_load(echo_url, None, clients, secs, Arc::new(bid_body)))
            .await
            .expect("echo load");
        echo.stop(true).await;

        let dir = tempfile::tempdir().expect("tempdir");
        let journal = EmbeddedJournal::open(dir.path(), 0).await.expect("journal");
        let mut opts = AppOptions {
            tick_ms: 0,
            workers: 2,
            // POST bid as it was measured before delivery: the instant market.
            market: gateway::market::MarketConfig::default(),
            ..AppOptions::default()
        };
        opts.api.rate_per_s = 10_000_000;
        opts.api.rate_burst = 10_000_000;
        let running = start(journal.into(), opts).await.expect("start");
        let base = format!("http://{}", running.addr);
        let keys = setup_market(&running.api, 8).await;
        let key = keys[0].clone();
        let bids_run = clients_rt
            .spawn(http_load(
                format!("{base}/v1/bids"),
                Some(key),
                clients,
                secs,
                Arc::new(bid_body),
            ))
            .await
            .expect("bid load");
        let ws_url = base.replacen("http://", "ws://", 1) + "/v1/ws";
        let ws_run = clients_rt
            .spawn(ws_load(ws_url, keys[1..].to_vec(), secs, 32))
            .await
            .expect("ws load");
        let api = running.api.clone();
        let base2 = base.clone();
        let fan = clients_rt
            .spawn(async move { fanout(&base2, &api, subs, secs, 100).await })
            .await
            .expect("fanout");
        running.stop().await.expect("stop");

        println!("\nAPI benchmark ({secs} s per run, {clients} HTTP clients; client and server share 2 cores)");
        println!(
            "{:<44} {:>12} {:>9} {:>9} {:>9}  note",
            "run", "ops/s", "p50 ms", "p99 ms", "p99.9 ms"
        );
        let row = |name: &str, r: &Run, note: String| {
            println!(
                "{:<44} {:>12.0} {:>9.2} {:>9.2} {:>9.2}  {note}",
                name,
                r.rate(),
                r.us(0.5) / 1000.0,
                r.us(0.99) / 1000.0,
                r.us(0.999) / 1000.0
            );
        };
        row("ceiling: actix-web JSON echo", &echo_run, "baseline".into());
        row(
            "POST /v1/bids, durable ack (embedded, fsync)",
            &bids_run,
            format!("{:.2}x echo (target >= 0.5x)", bids_run.rate() / echo_run.rate()),
        );
        row(
            "websocket place_bid (7 conns x 32 in flight)",
            &ws_run,
            format!("{:.2}x echo", ws_run.rate() / echo_run.rate()),
        );
        row(
            &format!("inventory fan-out, {subs} subscribers"),
            &fan,
            format!("deltas received/s; latency = hub publish -> client receive ({} deltas)", fan.ops),
        );
    });
    drop(clients_rt_owner);
}
