//! [`Client`]: configuration, URLs and the one request path every REST method takes (timeout,
//! body limit, error envelope, `Idempotency-Key`, retries). The endpoints are in `rest.rs`.
//!
//! Transport: HTTP/1.1 over a hyper connection pool; `https://` bases through rustls with the
//! client's one TLS configuration (`tls.rs`), which its websockets use too.

use crate::backoff;
use crate::error::ClientError;
use crate::tls;
use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use url::Url;

/// Default bound of one call (request, answer and body), ms: above the server's own command
/// wait (`request_timeout_ms`, 10 s), so its 503 `request_timeout` arrives before the client
/// gives up.
pub const DEFAULT_TIMEOUT_MS: u64 = 15_000;
/// Bound of a TCP connect, ms (within the call's timeout).
pub const CONNECT_TIMEOUT_MS: u64 = 5_000;
/// Largest answer body read, bytes (finance reports in XLSX are the largest answers).
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;
/// Attempts per call by default: 1, no hidden retries (the load test measures every attempt).
pub const DEFAULT_ATTEMPTS: u32 = 1;
/// Most attempts [`Client::with_retries`] accepts.
pub const MAX_ATTEMPTS: u32 = 10;
/// The `Idempotency-Key` header.
pub const IDEMPOTENCY_KEY: &str = "Idempotency-Key";
/// Most base URLs one client takes (the API processes of one exchange it may fail over
/// between).
pub const MAX_BASE_URLS: usize = 16;

/// The connection pool: HTTP/1.1, plain or TLS by the URL's scheme.
type Http =
    hyper_util::client::legacy::Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// How a [`Client`] connects, beyond its base URL and key ([`Client::new_with_options`]).
/// Build with [`ClientOptions::default`] and the `with_*` methods.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientOptions {
    /// A PEM file of CA certificates trusted besides the system's, for an `https://` server
    /// whose certificate a private CA issued (`None`: the system's CAs only). Read once, when
    /// the client is made.
    pub ca_cert: Option<PathBuf>,
}

impl ClientOptions {
    /// The same options trusting the CA certificates in `path` (PEM) too.
    pub fn with_ca_cert(mut self, path: impl Into<PathBuf>) -> ClientOptions {
        self.ca_cert = Some(path.into());
        self
    }
}

/// A typed client of the exchange's API. Cheap to clone: every clone shares one connection
/// pool and configuration (an `Arc`).
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Clone)]
pub(crate) struct Inner {
    pub(crate) http: Http,
    /// The TLS configuration of `http` and of every websocket (`tls.rs`).
    pub(crate) tls: Arc<rustls::ClientConfig>,
    /// `http(s)://host:port[/prefix]`, no query: one, or the API processes of one exchange
    /// (docs/cli.md, "Several API processes").
    pub(crate) bases: Arc<[Url]>,
    /// The index in `bases` the client uses now (shared by every clone): it moves to the
    /// next when a server cannot be reached or drops a connection.
    pub(crate) current: Arc<AtomicUsize>,
    /// `Bearer <key>` (marked sensitive).
    pub(crate) auth: Option<HeaderValue>,
    pub(crate) timeout: Duration,
    pub(crate) attempts: u32,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base().as_str())
            .field("key", &self.inner.auth.as_ref().map(|_| "<set>"))
            .field("timeout", &self.inner.timeout)
            .field("attempts", &self.inner.attempts)
            .finish()
    }
}

fn auth_header(key: &str) -> Result<HeaderValue, ClientError> {
    let mut v = HeaderValue::from_str(&format!("Bearer {key}"))
        .map_err(|_| ClientError::Invalid("the API key holds characters a header cannot".into()))?;
    v.set_sensitive(true);
    Ok(v)
}

impl Client {
    /// A client of the server at `base_url` (`http://127.0.0.1:8080` or
    /// `https://exchange.example`, with or without a trailing `/`, optionally with a path
    /// prefix), acting with `key` (`None`: the public endpoints and an anonymous websocket
    /// only). An `https://` base speaks HTTPS and WSS (rustls), trusting the system's CA
    /// certificates; [`Client::new_with_options`] adds a private CA's.
    ///
    /// `base_url` may name several API processes of one exchange, comma-separated
    /// (`http://10.0.0.5:8080,http://10.0.0.6:8080`, at most [`MAX_BASE_URLS`]): the client
    /// uses one, and moves to the next when it cannot connect (the request was never sent, so
    /// it goes to the next at once, whatever its method) or when a connection fails under a
    /// request (the next attempt, if the call is repeatable, goes to the next). A websocket
    /// that cannot connect tries the next too, so an [`crate::InventoryStream`] resumes from a
    /// snapshot of another process when its process dies.
    ///
    /// The bases may mix schemes (`http://a:8080,https://b`). A failed TLS handshake (a
    /// certificate not trusted, not valid for the name, expired) is a
    /// [`ClientError::Transport`] whose message says so.
    ///
    /// # Errors
    /// [`ClientError::Invalid`] for a URL that is neither `http://host…` nor `https://host…`,
    /// more than [`MAX_BASE_URLS`] of them, or a key a header cannot carry.
    pub fn new(base_url: &str, key: Option<String>) -> Result<Client, ClientError> {
        Client::new_with_options(base_url, key, &ClientOptions::default())
    }

    /// [`Client::new`] with options: `opts.ca_cert` names a PEM file of CA certificates
    /// trusted besides the system's (a private CA).
    ///
    /// # Errors
    /// As [`Client::new`]; also [`ClientError::Invalid`] naming the CA file when it cannot be
    /// read or holds no certificate.
    pub fn new_with_options(
        base_url: &str,
        key: Option<String>,
        opts: &ClientOptions,
    ) -> Result<Client, ClientError> {
        let bases = base_url
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(parse_base)
            .collect::<Result<Vec<Url>, _>>()?;
        if bases.is_empty() || bases.len() > MAX_BASE_URLS {
            return Err(ClientError::Invalid(format!(
                "base URL {base_url:?}: expected 1 to {MAX_BASE_URLS} comma-separated \
                 http(s)://host[:port][/prefix]"
            )));
        }
        let auth = key.as_deref().map(auth_header).transpose()?;
        // The system's CAs are read only when some base needs them.
        let https = bases.iter().any(|b| b.scheme() == "https");
        let tls = tls::client_config(opts.ca_cert.as_deref(), https)?;
        let mut tcp = HttpConnector::new();
        tcp.set_connect_timeout(Some(Duration::from_millis(CONNECT_TIMEOUT_MS)));
        tcp.set_nodelay(true);
        tcp.enforce_http(false);
        // The same configuration as the websockets' (one `Arc`); `http://` stays plain.
        let connector = hyper_rustls::HttpsConnector::from((tcp, tls.clone()));
        let http = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .build(connector);
        Ok(Client {
            inner: Arc::new(Inner {
                http,
                tls,
                bases: bases.into(),
                current: Arc::new(AtomicUsize::new(0)),
                auth,
                timeout: Duration::from_millis(DEFAULT_TIMEOUT_MS),
                attempts: DEFAULT_ATTEMPTS,
            }),
        })
    }

    /// The same client with another bound per call (REST request and body; websocket connect,
    /// send, request and keepalive answer).
    pub fn with_timeout(self, t: Duration) -> Client {
        let mut inner = (*self.inner).clone();
        inner.timeout = t;
        Client {
            inner: Arc::new(inner),
        }
    }

    /// The same client retrying calls that are safe to repeat, up to `attempts` in all
    /// (1..=[`MAX_ATTEMPTS`]), on [`ClientError::is_retryable`] errors, waiting by the
    /// backoff rule (crate docs). Safe to repeat: reads, `PUT`/`PATCH`, `POST`s that carry an
    /// `Idempotency-Key` (the same key on every attempt), heartbeats, ready and torn-down
    /// reports, resumes. Never repeated: cancels, withdrawals, releases, failed reports.
    pub fn with_retries(self, attempts: u32) -> Client {
        let mut inner = (*self.inner).clone();
        inner.attempts = attempts.clamp(1, MAX_ATTEMPTS);
        Client {
            inner: Arc::new(inner),
        }
    }

    /// A client of the same server and connection pool acting with another key.
    ///
    /// # Errors
    /// [`ClientError::Invalid`] for a key a header cannot carry.
    pub fn with_key(&self, key: &str) -> Result<Client, ClientError> {
        let mut inner = (*self.inner).clone();
        inner.auth = Some(auth_header(key)?);
        Ok(Client {
            inner: Arc::new(inner),
        })
    }

    /// The base URL in use now (one of those given to [`Client::new`]).
    pub fn base_url(&self) -> &str {
        self.base().as_str()
    }

    /// The base URL in use now.
    pub(crate) fn base(&self) -> &Url {
        let i = self.inner.current.load(Ordering::Relaxed) % self.inner.bases.len();
        &self.inner.bases[i]
    }

    /// Moves on from base `from` to the next (unless a concurrent call already did): the
    /// server at `from` could not be reached or dropped a connection.
    pub(crate) fn fail_over(&self, from: &Url) {
        let n = self.inner.bases.len();
        if n < 2 {
            return;
        }
        let now = self.inner.current.load(Ordering::Relaxed);
        if &self.inner.bases[now % n] == from {
            let _ = self.inner.current.compare_exchange(
                now,
                (now + 1) % n,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    /// How many base URLs the client has.
    pub(crate) fn base_count(&self) -> usize {
        self.inner.bases.len()
    }

    /// The bound per call.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// Whether the client has a key.
    pub fn has_key(&self) -> bool {
        self.inner.auth.is_some()
    }

    /// `base/seg/seg…` on the base in use, each segment percent-encoded (an id cannot leave
    /// its path segment).
    pub(crate) fn url(&self, segments: &[&str]) -> Url {
        url_on(self.base(), segments)
    }

    /// A call of `method` on `segments`.
    pub(crate) fn call(&self, method: Method, segments: &[&str]) -> Call {
        let repeatable = matches!(method, Method::GET | Method::PUT | Method::PATCH);
        Call {
            method,
            segments: segments.iter().map(|s| s.to_string()).collect(),
            query: Vec::new(),
            body: None,
            idempotency_key: None,
            repeatable,
        }
    }

    /// Runs a call and decodes its JSON answer.
    pub(crate) async fn run<T: DeserializeOwned>(&self, c: Call) -> Result<T, ClientError> {
        let bytes = self.run_bytes(c).await?;
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Decode(e.to_string()))
    }

    /// Runs a call (with the configured retries when it is repeatable); answers the body.
    pub(crate) async fn run_bytes(&self, c: Call) -> Result<Vec<u8>, ClientError> {
        let attempts = if c.repeatable { self.inner.attempts } else { 1 };
        let mut attempt = 0;
        loop {
            match self.attempt(&c).await {
                Err(e) if e.is_retryable() && attempt + 1 < attempts => {
                    let wait = backoff::delay(attempt, e.retry_after());
                    if wait > Duration::from_millis(backoff::MAX_RETRY_AFTER_MS) {
                        return Err(e);
                    }
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                answer => return answer,
            }
        }
    }

    /// One attempt on the base in use; one that cannot connect goes on to the next base at
    /// once (nothing was sent). A connection lost or timed out under the request moves the
    /// client to the next base: a repeatable call is sent there at once, any other fails
    /// (its outcome is unknown) and the calls after it go there.
    async fn attempt(&self, c: &Call) -> Result<Vec<u8>, ClientError> {
        let mut tries = self.base_count();
        loop {
            let base = self.base().clone();
            match self.attempt_on(&base, c).await {
                Err(Sent::Never(e)) => {
                    self.fail_over(&base);
                    tries -= 1;
                    if tries == 0 {
                        return Err(e);
                    }
                }
                Err(Sent::Maybe(e)) => {
                    if !matches!(e, ClientError::Transport(_) | ClientError::Timeout) {
                        return Err(e);
                    }
                    self.fail_over(&base);
                    // A call safe to repeat goes on to the next process at once (a hung or
                    // dying one must not make every call fail); any other has an unknown
                    // outcome and is not sent again.
                    tries -= 1;
                    if !c.repeatable || tries == 0 {
                        return Err(e);
                    }
                }
                Ok(body) => return Ok(body),
            }
        }
    }

    /// One attempt on `base`, bounded by the timeout as a whole (connect, answer, body).
    async fn attempt_on(&self, base: &Url, c: &Call) -> Result<Vec<u8>, Sent> {
        let url = c.url_on(base);
        let invalid = |why: String| Sent::Never(ClientError::Invalid(format!("URL {url}: {why}")));
        let mut rb = Request::builder()
            .method(c.method.clone())
            .uri(url.as_str());
        if let Some(a) = &self.inner.auth {
            rb = rb.header(AUTHORIZATION, a.clone());
        }
        if let Some(k) = &c.idempotency_key {
            rb = rb.header(IDEMPOTENCY_KEY, k.as_str());
        }
        let body = match &c.body {
            Some(b) => {
                rb = rb.header(CONTENT_TYPE, "application/json");
                Bytes::from(b.clone())
            }
            None => Bytes::new(),
        };
        let req = rb
            .body(Full::new(body))
            .map_err(|e| invalid(e.to_string()))?;
        let at = authority(&url);
        let answer = async {
            let resp = self.inner.http.request(req).await.map_err(|e| {
                if e.is_connect() {
                    Sent::Never(tls::transport_error(&e, &at))
                } else {
                    Sent::Maybe(tls::transport_error(&e, &at))
                }
            })?;
            let status = resp.status().as_u16();
            let retry_after = resp
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|s| s.trim().parse::<u64>().ok());
            let body = read_body(resp, &at).await.map_err(Sent::Maybe)?;
            if (200..300).contains(&status) {
                Ok(body)
            } else {
                Err(Sent::Maybe(ClientError::from_answer(
                    status,
                    &body,
                    retry_after,
                )))
            }
        };
        tokio::time::timeout(self.inner.timeout, answer)
            .await
            .map_err(|_| Sent::Maybe(ClientError::Timeout))?
    }
}

/// How far a failed attempt got.
enum Sent {
    /// No connection: the server never saw the request.
    Never(ClientError),
    /// The request may have reached the server (or it answered an error).
    Maybe(ClientError),
}

/// `base/seg/seg…`, each segment percent-encoded.
fn url_on(base: &Url, segments: &[&str]) -> Url {
    let mut u = base.clone();
    if let Ok(mut path) = u.path_segments_mut() {
        path.pop_if_empty().extend(segments);
    }
    u
}

/// `host:port` of a URL (the port the scheme implies when it has none), for messages.
pub(crate) fn authority(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port_or_known_default() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    }
}

/// One base URL: `http(s)://host[:port][/prefix]`, query and fragment dropped.
fn parse_base(s: &str) -> Result<Url, ClientError> {
    let mut base =
        Url::parse(s).map_err(|e| ClientError::Invalid(format!("base URL {s:?}: {e}")))?;
    if !matches!(base.scheme(), "http" | "https")
        || base.cannot_be_a_base()
        || base.host().is_none()
    {
        return Err(ClientError::Invalid(format!(
            "base URL {s:?}: expected http://host[:port][/prefix] or \
             https://host[:port][/prefix]"
        )));
    }
    base.set_query(None);
    base.set_fragment(None);
    Ok(base)
}

/// One request as the client sends it (every attempt the same bytes and key; the base may
/// change between attempts).
pub(crate) struct Call {
    method: Method,
    /// Path segments after the base.
    segments: Vec<String>,
    /// Query pairs.
    query: Vec<(String, String)>,
    body: Option<Vec<u8>>,
    idempotency_key: Option<String>,
    repeatable: bool,
}

impl Call {
    /// The call's URL on `base`.
    fn url_on(&self, base: &Url) -> Url {
        let segments: Vec<&str> = self.segments.iter().map(String::as_str).collect();
        let mut url = url_on(base, &segments);
        if !self.query.is_empty() {
            url.query_pairs_mut().extend_pairs(&self.query);
        }
        url
    }

    /// A JSON body.
    pub(crate) fn json<B: Serialize>(mut self, body: &B) -> Result<Call, ClientError> {
        self.body =
            Some(serde_json::to_vec(body).map_err(|e| ClientError::Invalid(format!("body: {e}")))?);
        Ok(self)
    }

    /// Query parameters (absent values are left out).
    pub(crate) fn query(mut self, pairs: &[(&str, Option<String>)]) -> Call {
        for (k, v) in pairs {
            if let Some(v) = v {
                self.query.push((k.to_string(), v.clone()));
            }
        }
        self
    }

    /// An `Idempotency-Key`: `key`, or a fresh one for this call (kept across its retries).
    /// The call becomes repeatable.
    pub(crate) fn idempotent(mut self, key: Option<&str>) -> Call {
        self.idempotency_key = Some(key.map_or_else(new_idempotency_key, str::to_string));
        self.repeatable = true;
        self
    }

    /// Marks a call the server treats as idempotent without a key.
    pub(crate) fn repeatable(mut self) -> Call {
        self.repeatable = true;
        self
    }
}

/// A fresh `Idempotency-Key` (`gpuxc-` + a random UUID: 42 printable ASCII bytes).
pub fn new_idempotency_key() -> String {
    format!("gpuxc-{}", uuid::Uuid::new_v4())
}

/// Reads an answer body up to [`MAX_RESPONSE_BYTES`] (`at`: the server's `host:port`, for
/// messages).
async fn read_body(
    resp: http::Response<hyper::body::Incoming>,
    at: &str,
) -> Result<Vec<u8>, ClientError> {
    let too_large = || ClientError::Decode(format!("answer over {MAX_RESPONSE_BYTES} bytes"));
    let declared = resp
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_RESPONSE_BYTES as u64) {
        return Err(too_large());
    }
    let mut body = resp.into_body();
    let mut buf = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| tls::transport_error(&e, at))?;
        if let Ok(chunk) = frame.into_data() {
            if buf.len() + chunk.len() > MAX_RESPONSE_BYTES {
                return Err(too_large());
            }
            buf.extend_from_slice(&chunk);
        }
    }
    Ok(buf)
}

/// An error and its sources, joined with `: `.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

/// The filters of `GET /v1/inventory` beyond `sku` and `region`, shared by
/// `GET /v1/market/offers` (issue 26, docs/api.md §2.1): only the capacity a bid with these
/// requirements can take. Every field optional.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InventoryFilter {
    /// Only nodes whose latest verification run is `verified` and current.
    pub verified: bool,
    /// Only nodes whose reliability at the start of today (UTC) is at least this ratio
    /// (`"0.99"`).
    pub min_reliability: Option<String>,
    /// Only nodes in this jurisdiction, ISO 3166-1 alpha-2 (`"CN"`).
    pub jurisdiction: Option<String>,
    /// Only nodes with at least this fabric: `pcie`, `roce` or `infiniband`.
    pub min_interconnect: Option<String>,
    /// Only nodes with NVLink.
    pub nvlink: bool,
    /// Only offers whose stated SLA terms promise at least this availability, percent
    /// (`"99.9"`; docs/market-rules.md §12.4).
    pub min_sla: Option<String>,
    /// Only offers whose stated SLA terms credit at least this multiple.
    pub min_sla_multiple: Option<u16>,
}

impl InventoryFilter {
    /// True when it filters nothing.
    pub fn is_none(&self) -> bool {
        *self == InventoryFilter::default()
    }

    pub(crate) fn pairs(&self) -> [(&'static str, Option<String>); 7] {
        [
            ("verified", self.verified.then(|| "true".to_string())),
            ("min_reliability", self.min_reliability.clone()),
            ("jurisdiction", self.jurisdiction.clone()),
            ("min_interconnect", self.min_interconnect.clone()),
            ("nvlink", self.nvlink.then(|| "true".to_string())),
            ("min_sla", self.min_sla.clone()),
            (
                "min_sla_multiple",
                self.min_sla_multiple.map(|m| m.to_string()),
            ),
        ]
    }
}

/// Query of the public offer search `GET /v1/market/offers` (issue 26, docs/api.md §2.1);
/// every field optional (absent: the server's default).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MarketOfferQuery {
    /// SKU id.
    pub sku: Option<String>,
    /// Region.
    pub region: Option<String>,
    /// The capacity filters it shares with `GET /v1/inventory` (trust, SLA, site).
    pub filter: InventoryFilter,
    /// At least this many GPUs free on one node.
    pub min_gpus: Option<u32>,
    /// The compared price at most this, CNY per GPU-hour (`"18.50"`).
    pub max_price: Option<String>,
    /// `spot` or `preemptible` (only offers with a preemptible price; compares that price).
    pub kind: Option<String>,
    /// At least this many logical CPU cores on the host.
    pub min_cpu_cores: Option<u32>,
    /// At least this much RAM on the host, GiB.
    pub min_ram_gib: Option<u32>,
    /// At least this much disk on the host, GB.
    pub min_disk_gb: Option<u32>,
    /// At least this much NIC bandwidth on the host (sum of its NICs), Gb/s.
    pub min_nic_gbps: Option<u32>,
    /// At least this CUDA version (`"12.4"`).
    pub min_cuda: Option<String>,
    /// `price` (server default), `reliability` or `gpus`.
    pub order: Option<String>,
    /// Most rows, 1..=500 (server default 100).
    pub limit: Option<usize>,
}

impl MarketOfferQuery {
    pub(crate) fn pairs(&self) -> Vec<(&'static str, Option<String>)> {
        let n = |v: Option<u32>| v.map(|v| v.to_string());
        let mut pairs = vec![("sku", self.sku.clone()), ("region", self.region.clone())];
        pairs.extend(self.filter.pairs());
        pairs.extend([
            ("min_gpus", n(self.min_gpus)),
            ("max_price", self.max_price.clone()),
            ("kind", self.kind.clone()),
            ("min_cpu_cores", n(self.min_cpu_cores)),
            ("min_ram_gib", n(self.min_ram_gib)),
            ("min_disk_gb", n(self.min_disk_gb)),
            ("min_nic_gbps", n(self.min_nic_gbps)),
            ("min_cuda", self.min_cuda.clone()),
            ("order", self.order.clone()),
            ("limit", self.limit.map(|v| v.to_string())),
        ]);
        pairs
    }
}

/// Query of `GET /v1/leases` (docs/api.md §2.3); every field optional.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseQuery {
    /// `live` (server default), `ended`, `all` or `wiping`.
    pub state: Option<String>,
    /// Only leases running at or after this time, ms since epoch.
    pub from_ms: Option<i64>,
    /// Only leases that started before this time, ms since epoch.
    pub to_ms: Option<i64>,
    /// The previous page's `next_cursor`.
    pub cursor: Option<String>,
    /// Leases per page, 1..=500 (server default 100).
    pub limit: Option<usize>,
}

impl LeaseQuery {
    pub(crate) fn pairs(&self) -> [(&'static str, Option<String>); 5] {
        [
            ("state", self.state.clone()),
            ("from_ms", self.from_ms.map(|v| v.to_string())),
            ("to_ms", self.to_ms.map(|v| v.to_string())),
            ("cursor", self.cursor.clone()),
            ("limit", self.limit.map(|v| v.to_string())),
        ]
    }
}

/// Query of `GET /v1/reports/{kind}` (docs/api.md §4); every field optional.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReportQuery {
    /// Start, inclusive: ms since epoch, or a local date / date-time in `tz`.
    pub from: Option<String>,
    /// End, exclusive (cut to now), same formats.
    pub to: Option<String>,
    /// IANA time zone (server default `Asia/Shanghai`).
    pub tz: Option<String>,
    /// `json` (server default), `csv` or `xlsx`.
    pub format: Option<String>,
    /// One account id (finance and admin only).
    pub account: Option<String>,
}

impl ReportQuery {
    pub(crate) fn pairs(&self) -> [(&'static str, Option<String>); 5] {
        [
            ("from", self.from.clone()),
            ("to", self.to.clone()),
            ("tz", self.tz.clone()),
            ("format", self.format.clone()),
            ("account", self.account.clone()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_keep_a_prefix_and_encode_ids() {
        for base in ["http://127.0.0.1:8080", "http://127.0.0.1:8080/"] {
            let c = Client::new(base, None).unwrap();
            assert_eq!(
                c.url(&["v1", "bids", "12"]).as_str(),
                "http://127.0.0.1:8080/v1/bids/12"
            );
        }
        let c = Client::new("http://h:1/gpux/", Some("gpux_k".into())).unwrap();
        assert_eq!(
            c.url(&["v1", "leases", "../admin"]).as_str(),
            "http://h:1/gpux/v1/leases/..%2Fadmin"
        );
        let call = c.call(Method::GET, &["v1", "leases"]).query(
            &LeaseQuery {
                state: Some("all".into()),
                limit: Some(5),
                ..LeaseQuery::default()
            }
            .pairs(),
        );
        assert_eq!(
            call.url_on(c.base()).as_str(),
            "http://h:1/gpux/v1/leases?state=all&limit=5"
        );
        let call = c
            .call(Method::GET, &["v1", "leases"])
            .query(&LeaseQuery::default().pairs());
        assert_eq!(call.url_on(c.base()).as_str(), "http://h:1/gpux/v1/leases");
        assert!(!format!("{c:?}").contains("gpux_k"));
    }

    #[test]
    fn several_bases_fail_over_in_turn_and_every_clone_follows() {
        let c = Client::new(" http://a:1/p , http://b:2,http://c:3 ", None).unwrap();
        let call = c
            .call(Method::GET, &["v1", "leases"])
            .query(&[("limit", Some("5".into()))]);
        assert_eq!(c.base_url(), "http://a:1/p");
        let clone = c.clone().with_timeout(Duration::from_secs(1));
        let a = c.base().clone();
        c.fail_over(&a);
        assert_eq!(
            clone.base_url(),
            "http://b:2/",
            "clones share the base in use"
        );
        assert_eq!(
            call.url_on(c.base()).as_str(),
            "http://b:2/v1/leases?limit=5"
        );
        // A second failure report about the base already left moves nothing.
        c.fail_over(&a);
        assert_eq!(c.base_url(), "http://b:2/");
        let b = c.base().clone();
        c.fail_over(&b);
        let cc = c.base().clone();
        c.fail_over(&cc);
        assert_eq!(
            c.base_url(),
            "http://a:1/p",
            "after the last comes the first"
        );
        let one = Client::new("http://h:1", None).unwrap();
        let h = one.base().clone();
        one.fail_over(&h);
        assert_eq!(one.base_url(), "http://h:1/");
    }

    #[test]
    fn bad_bases_and_keys_are_refused() {
        let too_many = vec!["http://h:1"; MAX_BASE_URLS + 1].join(",");
        for bad in [
            "",
            ",",
            "127.0.0.1:8080",
            "ftp://h",
            "mailto:x@y",
            "ws://h",
            "wss://h",
            "http://a:1,ftp://b:2",
            too_many.as_str(),
        ] {
            assert!(
                matches!(Client::new(bad, None), Err(ClientError::Invalid(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            Client::new("http://h", Some("bad\nkey".into())),
            Err(ClientError::Invalid(_))
        ));
    }

    #[test]
    fn https_bases_are_taken_and_may_mix_with_http() {
        let c = Client::new("https://h", None).unwrap();
        assert_eq!(c.base_url(), "https://h/");
        assert_eq!(
            c.url(&["v1", "me"]).as_str(),
            "https://h/v1/me",
            "the scheme's port stays implied"
        );
        assert_eq!(authority(c.base()), "h:443");
        let c = Client::new("http://a:1,https://b:8443/p", None).unwrap();
        let a = c.base().clone();
        c.fail_over(&a);
        assert_eq!(c.base_url(), "https://b:8443/p");
        assert_eq!(
            c.inner.tls.alpn_protocols,
            vec![tls::ALPN_HTTP1.to_vec()],
            "HTTP/1.1 only, as the server"
        );
    }

    #[test]
    fn a_ca_file_is_read_or_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing-ca.pem");
        let garbage = dir.path().join("garbage-ca.pem");
        std::fs::write(&garbage, "not a certificate\n").unwrap();
        let bad_block = dir.path().join("bad-block-ca.pem");
        std::fs::write(
            &bad_block,
            "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let key_only = dir.path().join("key-only-ca.pem");
        let key = rcgen::KeyPair::generate().unwrap();
        std::fs::write(&key_only, key.serialize_pem()).unwrap();
        for (file, why) in [
            (&missing, "No such file"),
            (&garbage, "no certificate in it"),
            (&bad_block, "not a usable CA certificate"),
            (&key_only, "no certificate in it"),
        ] {
            for base in ["http://h:1", "https://h"] {
                let opts = ClientOptions::default().with_ca_cert(file);
                match Client::new_with_options(base, None, &opts) {
                    Err(ClientError::Invalid(m)) => {
                        assert!(m.contains(&file.display().to_string()), "{m}");
                        assert!(m.contains(why), "{m}");
                    }
                    other => panic!("{}: {other:?}", file.display()),
                }
            }
        }
        let ca = dir.path().join("ca.pem");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        std::fs::write(&ca, params.self_signed(&key).unwrap().pem()).unwrap();
        let opts = ClientOptions::default().with_ca_cert(&ca);
        assert_eq!(opts.ca_cert.as_deref(), Some(ca.as_path()));
        let c = Client::new_with_options("https://h", Some("gpux_k".into()), &opts).unwrap();
        assert!(c.has_key());
    }

    #[test]
    fn only_safe_calls_repeat() {
        let c = Client::new("http://h", None).unwrap();
        assert!(c.call(Method::GET, &["v1"]).repeatable);
        assert!(!c.call(Method::DELETE, &["v1"]).repeatable);
        assert!(!c.call(Method::POST, &["v1"]).repeatable);
        let keyed = c.call(Method::POST, &["v1"]).idempotent(None);
        assert!(keyed.repeatable);
        let key = keyed.idempotency_key.unwrap();
        assert!(key.len() <= 128 && key.bytes().all(|b| b.is_ascii_graphic()));
        let given = c.call(Method::POST, &["v1"]).idempotent(Some("dep-1"));
        assert_eq!(given.idempotency_key.as_deref(), Some("dep-1"));
    }
}
