//! API test support: the app on port 0 (embedded store in a temp dir, or its own Redis), an
//! HTTP client with a key, a websocket client.
#![allow(dead_code)]

use super::RedisServer;
use futures_util::{SinkExt, StreamExt};
use gateway::accounts::Role;
use gateway::app::{AppOptions, Running, start};
use gateway::journal::{AnyJournal, EmbeddedJournal, RedisConfig, RedisJournal};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// Which journal the app runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Embedded,
    Redis,
}

pub struct TestApp {
    pub running: Option<Running>,
    pub base: String,
    pub admin: String,
    pub dir: tempfile::TempDir,
    pub redis: Option<RedisServer>,
    pub backend: Backend,
    pub opts: AppOptions,
}

/// Options of the suites that test trading, journal, feed and limits: the instant market of
/// market-rules §1–10 (a lease runs from its fill), so their expectations stay exact; the
/// delivery suite (`tests/delivery.rs`) uses [`delivery_opts`].
pub fn quiet_opts() -> AppOptions {
    AppOptions {
        tick_ms: 0,
        workers: 2,
        market: gateway::market::MarketConfig::default(),
        ..AppOptions::default()
    }
}

/// [`quiet_opts`] with lease delivery on, as the server runs.
#[allow(dead_code)]
pub fn delivery_opts() -> AppOptions {
    AppOptions {
        market: gateway::market::MarketConfig::delivered(),
        ..quiet_opts()
    }
}

async fn journal(
    backend: Backend,
    dir: &std::path::Path,
    redis: Option<&RedisServer>,
) -> AnyJournal {
    match backend {
        Backend::Embedded => EmbeddedJournal::open(&dir.join("journal"), 0)
            .await
            .expect("open embedded journal")
            .into(),
        Backend::Redis => {
            let r = redis.expect("redis server");
            RedisJournal::connect(RedisConfig::new(r.url()))
                .await
                .expect("connect redis journal")
                .into()
        }
    }
}

impl TestApp {
    pub async fn start(backend: Backend, opts: AppOptions) -> TestApp {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("journal")).expect("journal dir");
        let redis = (backend == Backend::Redis).then(|| {
            let d = dir.path().join("redis");
            std::fs::create_dir_all(&d).expect("redis dir");
            RedisServer::start(&d, true)
        });
        let j = journal(backend, dir.path(), redis.as_ref()).await;
        let running = start(j, opts.clone()).await.expect("start app");
        let (_, admin, _) =
            gateway::api::admin::create_account_with_key(&running.api, None, "admin", Role::Admin)
                .await
                .expect("admin");
        TestApp {
            base: format!("http://{}", running.addr),
            running: Some(running),
            admin,
            dir,
            redis,
            backend,
            opts,
        }
    }

    /// Stops gracefully and starts again on the same journal (same port not kept).
    pub async fn restart(&mut self) {
        if let Some(r) = self.running.take() {
            r.stop().await.expect("stop");
        }
        let j = journal(self.backend, self.dir.path(), self.redis.as_ref()).await;
        let running = start(j, self.opts.clone()).await.expect("restart app");
        self.base = format!("http://{}", running.addr);
        self.running = Some(running);
    }

    pub fn api(&self) -> &gateway::api::Api {
        &self.running.as_ref().expect("running").api
    }

    pub fn client(&self, key: Option<&str>) -> Client {
        Client {
            http: reqwest::Client::new(),
            base: self.base.clone(),
            key: key.map(String::from),
        }
    }

    pub fn admin(&self) -> Client {
        self.client(Some(&self.admin))
    }

    /// Creates an account; answers (id, key).
    pub async fn account(&self, name: &str, role: &str) -> (String, String) {
        let (s, v, _) = self
            .admin()
            .post(
                "/v1/admin/accounts",
                json!({"name": name, "role": role}),
                None,
            )
            .await;
        assert_eq!(s, 201, "{v}");
        (
            v["account"]["id"].as_str().expect("id").to_string(),
            v["api_key"].as_str().expect("key").to_string(),
        )
    }

    pub async fn deposit(&self, id: &str, amount: &str) {
        let (s, v, _) = self
            .admin()
            .post(
                &format!("/v1/admin/accounts/{id}/deposits"),
                json!({"amount": amount}),
                Some(&format!("dep-{id}-{amount}")),
            )
            .await;
        assert_eq!(s, 201, "{v}");
    }

    pub fn ws_url(&self) -> String {
        self.base.replacen("http://", "ws://", 1) + "/v1/ws"
    }
}

pub struct Client {
    pub http: reqwest::Client,
    pub base: String,
    pub key: Option<String>,
}

pub type Answer = (u16, Value, reqwest::header::HeaderMap);

impl Client {
    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Vec<u8>>,
        idem: Option<&str>,
    ) -> Answer {
        let mut r = self.http.request(method, format!("{}{path}", self.base));
        if let Some(k) = &self.key {
            r = r.bearer_auth(k);
        }
        if let Some(i) = idem {
            r = r.header("Idempotency-Key", i);
        }
        if let Some(b) = body {
            r = r.header("content-type", "application/json").body(b);
        }
        let resp = r.send().await.expect("request");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let bytes = resp.bytes().await.expect("body");
        let v = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (status, v, headers)
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.send(reqwest::Method::GET, path, None, None).await
    }

    pub async fn post(&self, path: &str, body: Value, idem: Option<&str>) -> Answer {
        self.send(
            reqwest::Method::POST,
            path,
            Some(body.to_string().into_bytes()),
            idem,
        )
        .await
    }

    pub async fn put(&self, path: &str, body: Value) -> Answer {
        self.send(
            reqwest::Method::PUT,
            path,
            Some(body.to_string().into_bytes()),
            None,
        )
        .await
    }

    pub async fn patch(&self, path: &str, body: Value) -> Answer {
        self.send(
            reqwest::Method::PATCH,
            path,
            Some(body.to_string().into_bytes()),
            None,
        )
        .await
    }

    pub async fn delete(&self, path: &str) -> Answer {
        self.send(reqwest::Method::DELETE, path, None, None).await
    }
}

/// A node body.
pub fn node(name: &str, sku: &str, gpus: u32, region: &str) -> Value {
    json!({"name": name, "sku": sku, "gpus": gpus, "region": region, "jurisdiction": "CN",
           "interconnect": "infiniband", "nvlink": true})
}

/// An offer body.
pub fn offer(node_id: &str, gpus: u32, spot: &str, pre: Option<&str>) -> Value {
    json!({"node_id": node_id, "gpus": gpus, "spot_price": spot, "preemptible_price": pre,
           "min_lease_s": 1, "max_lease_s": 86400})
}

/// A bid body.
pub fn bid(coid: &str, sku: &str, gpus: u32, limit: &str, kind: &str, tif: &str) -> Value {
    json!({"client_order_id": coid, "sku": sku, "gpus": gpus, "limit_price": limit,
           "kind": kind, "time_in_force": tif, "duration_s": 3600})
}

/// Registers a node with an offer; answers (node id, offer id).
pub async fn listed_node(
    c: &Client,
    name: &str,
    sku: &str,
    gpus: u32,
    region: &str,
    spot: &str,
) -> (String, String) {
    let (s, v, _) = c
        .post("/v1/nodes", node(name, sku, gpus, region), None)
        .await;
    assert_eq!(s, 201, "{v}");
    let node_id = v["id"].as_str().expect("node id").to_string();
    let (s, v, _) = c
        .post("/v1/offers", offer(&node_id, gpus, spot, None), None)
        .await;
    assert_eq!(s, 201, "{v}");
    (node_id, v["id"].as_str().expect("offer id").to_string())
}

pub type WsStream =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

pub struct Ws {
    pub s: WsStream,
}

/// Connects; `Err(status)` when the upgrade is refused.
pub async fn ws_connect(url: &str, key: Option<&str>, origin: Option<&str>) -> Result<Ws, u16> {
    let mut req = url.into_client_request().expect("ws request");
    if let Some(k) = key {
        req.headers_mut().insert(
            "Authorization",
            format!("Bearer {k}").parse().expect("header"),
        );
    }
    if let Some(o) = origin {
        req.headers_mut()
            .insert("Origin", o.parse().expect("header"));
    }
    match tokio_tungstenite::connect_async(req).await {
        Ok((s, _)) => {
            let mut ws = Ws { s };
            let w = ws.recv().await;
            assert_eq!(w["type"], "welcome", "{w}");
            Ok(ws)
        }
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => Err(r.status().as_u16()),
        Err(e) => panic!("ws connect: {e}"),
    }
}

/// A websocket client that stops reading: connects with a `recv_buffer`-byte receive buffer
/// (reads the welcome), then [`StalledWs::flood`] sends frames without reading the answers until
/// the server stops taking frames.
pub struct StalledWs {
    pub s: tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
}

/// The application-level ping message, as a text frame (answered with a `pong` message).
pub fn text_ping() -> Message {
    Message::Text(
        json!({"type": "ping", "request_id": "p"})
            .to_string()
            .into(),
    )
}

impl StalledWs {
    pub async fn connect(url: &str, key: &str, recv_buffer: u32) -> StalledWs {
        let mut req = url.into_client_request().expect("ws request");
        req.headers_mut().insert(
            "Authorization",
            format!("Bearer {key}").parse().expect("header"),
        );
        let host = req
            .uri()
            .authority()
            .expect("authority")
            .as_str()
            .to_string();
        let addr = tokio::net::lookup_host(host)
            .await
            .expect("resolve")
            .next()
            .expect("an address");
        // An earlier flood on the same key may have used up its rate: 429, retry after 1 s.
        let mut attempts = 0;
        let s = loop {
            let socket = tokio::net::TcpSocket::new_v4().expect("socket");
            socket.set_recv_buffer_size(recv_buffer).expect("SO_RCVBUF");
            let tcp = socket.connect(addr).await.expect("connect");
            match tokio_tungstenite::client_async(req.clone(), tcp).await {
                Ok((s, _)) => break s,
                Err(tokio_tungstenite::tungstenite::Error::Http(r))
                    if r.status() == 429 && attempts < 5 =>
                {
                    attempts += 1;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(e) => panic!("ws handshake: {e}"),
            }
        };
        let mut ws = StalledWs { s };
        let w = ws.s.next().await.expect("welcome").expect("ws ok");
        assert!(w.to_text().unwrap_or("").contains("welcome"), "{w:?}");
        ws
    }

    /// Sends `frame` again and again (never reading the answers) until one is not taken within
    /// 500 ms; answers how many went. Panics if the server takes `limit` without stalling.
    pub async fn flood(&mut self, limit: usize, frame: Message) -> usize {
        for sent in 0..limit {
            match tokio::time::timeout(Duration::from_millis(500), self.s.send(frame.clone())).await
            {
                Ok(Ok(())) => {}
                Ok(Err(e)) => panic!("ws send: {e}"),
                Err(_) => return sent,
            }
        }
        panic!("the server took {limit} frames without stalling");
    }
}

impl Ws {
    pub async fn send(&mut self, v: Value) {
        self.s
            .send(Message::Text(v.to_string().into()))
            .await
            .expect("ws send");
    }

    /// Sends a text frame as it is (not necessarily JSON).
    pub async fn send_text(&mut self, t: &str) {
        self.s
            .send(Message::Text(t.to_string().into()))
            .await
            .expect("ws send");
    }

    /// Next text message as JSON (5 s timeout).
    pub async fn recv(&mut self) -> Value {
        loop {
            let m = tokio::time::timeout(Duration::from_secs(5), self.s.next())
                .await
                .expect("ws message within 5 s")
                .expect("ws open")
                .expect("ws ok");
            match m {
                Message::Text(t) => return serde_json::from_str(&t).expect("json"),
                Message::Close(c) => return json!({"type": "__closed", "frame": format!("{c:?}")}),
                _ => continue,
            }
        }
    }

    /// Messages until one of type `ty` (answers it and the ones before).
    pub async fn until(&mut self, ty: &str) -> (Value, Vec<Value>) {
        let mut before = Vec::new();
        loop {
            let v = self.recv().await;
            if v["type"] == ty {
                return (v, before);
            }
            assert_ne!(
                v["type"], "__closed",
                "closed while waiting for {ty}: {before:?}"
            );
            before.push(v);
        }
    }
}

/// A client's view of one SKU rebuilt from a snapshot and deltas, checking contiguity.
#[derive(Default, Debug)]
pub struct View {
    /// The last seq applied.
    pub seq: u64,
    /// (region, kind, price) → (free GPUs, largest on one node).
    pub levels: BTreeMap<(String, String, String), (u64, u64)>,
}

impl View {
    /// Applies a snapshot or a delta (panics on a gap or a repeat).
    pub fn apply(&mut self, m: &Value) {
        let key = |l: &Value| {
            (
                l["region"].as_str().unwrap().to_string(),
                l["kind"].as_str().unwrap().to_string(),
                l["price"].as_str().unwrap().to_string(),
            )
        };
        match m["type"].as_str().unwrap() {
            "inventory_snapshot" => {
                self.levels.clear();
                for l in m["levels"].as_array().unwrap() {
                    self.levels.insert(
                        key(l),
                        (
                            l["free_gpus"].as_u64().unwrap(),
                            l["max_single_node"].as_u64().unwrap(),
                        ),
                    );
                }
                self.seq = m["seq"].as_u64().unwrap();
            }
            "inventory_delta" => {
                assert_eq!(
                    m["first_seq"].as_u64().unwrap(),
                    self.seq + 1,
                    "gap or repeat: {m}"
                );
                for l in m["levels"].as_array().unwrap() {
                    let f = l["free_gpus"].as_u64().unwrap();
                    if f == 0 {
                        self.levels.remove(&key(l));
                    } else {
                        self.levels
                            .insert(key(l), (f, l["max_single_node"].as_u64().unwrap()));
                    }
                }
                self.seq = m["last_seq"].as_u64().unwrap();
            }
            _ => {}
        }
    }
}
