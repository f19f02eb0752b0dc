//! Test support for the journal suites: a throwaway `redis-server` per test (free port, AOF
//! in a temp dir, killed on drop), one harness per backend (open a fresh instance on the same
//! storage, damage stored records directly), and a tracing capture for warnings.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gateway::journal::embedded::ENTRIES_TABLE;
use gateway::journal::record;
use gateway::journal::redis::RedisKeys;
use gateway::journal::{EmbeddedJournal, Entry, Journal, RedisConfig, RedisJournal};
use redb::ReadableTable;

/// How long a started redis-server may take to answer PING (AOF replay included).
pub const REDIS_START_TIMEOUT: Duration = Duration::from_secs(15);

/// Entries `from..=to` with distinct timestamps and payloads (binary, varying length).
pub fn entries(from: u64, to: u64) -> Vec<Entry> {
    (from..=to)
        .map(|seq| Entry {
            seq,
            timestamp_ms: 1_764_460_800_000 + seq as i64 * 7,
            payload: (0..(seq % 5) * 3 + 1)
                .map(|i| (seq as u8).wrapping_mul(31).wrapping_add(i as u8))
                .chain([0u8, 255, b'\n'])
                .collect(),
        })
        .collect()
}

/// Every operation of the Redis journal at `url` (default prefix), by seq, checking there is
/// no gap.
pub async fn journal_ops(url: &str) -> std::collections::BTreeMap<u64, gateway::market::Op> {
    journal_ops_of(RedisConfig::new(url)).await
}

/// [`journal_ops`] of the journal `config` names (a Redis Cluster, say).
pub async fn journal_ops_of(
    config: RedisConfig,
) -> std::collections::BTreeMap<u64, gateway::market::Op> {
    let mut j = RedisJournal::connect(config).await.expect("journal");
    let mut out = std::collections::BTreeMap::new();
    let mut after = 0;
    loop {
        let page = j.read_after(after, 1000).await.expect("readable");
        if page.is_empty() {
            return out;
        }
        for e in page {
            assert_eq!(e.seq, after + 1, "no gap");
            after = e.seq;
            out.insert(
                e.seq,
                gateway::sequencer::decode(&e.payload).expect("decodes"),
            );
        }
    }
}

/// A redis-server child process on its own port and data dir.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    pub dir: PathBuf,
    aof: bool,
    /// More `redis-server` arguments (kept for a restart).
    extra: Vec<String>,
}

/// A free TCP port on 127.0.0.1 (for a server started right after).
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("local addr").port()
}

impl RedisServer {
    /// Starts a server with AOF (`appendfsync everysec`) or without, in `dir`, on a free port.
    pub fn start(dir: &Path, aof: bool) -> RedisServer {
        for _ in 0..5 {
            let port = free_port();
            if let Some(s) = RedisServer::try_start(dir, port, aof) {
                return s;
            }
        }
        panic!("could not start redis-server after 5 attempts");
    }

    fn try_start(dir: &Path, port: u16, aof: bool) -> Option<RedisServer> {
        RedisServer::try_start_with(dir, port, aof, Vec::new())
    }

    fn try_start_with(dir: &Path, port: u16, aof: bool, extra: Vec<String>) -> Option<RedisServer> {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--dir", &dir.display().to_string()])
            .args(["--appendonly", if aof { "yes" } else { "no" }])
            .args([
                "--appendfsync",
                "everysec",
                "--save",
                "",
                "--daemonize",
                "no",
            ])
            .args(["--protected-mode", "no", "--logfile", ""])
            .args(&extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match child {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
                "redis-server is not installed (not on PATH): the Redis journal tests need it; \
                 install it (apt-get install redis-server) — CI (.ci/run) installs it"
            ),
            Err(e) => panic!("cannot spawn redis-server: {e}"),
        };
        let mut s = RedisServer {
            child: Some(child),
            port,
            dir: dir.to_path_buf(),
            aof,
            extra,
        };
        if s.wait_ready() { Some(s) } else { None }
    }

    /// Waits until the server answers PING with PONG (false if it exited).
    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + REDIS_START_TIMEOUT;
        while Instant::now() < deadline {
            if let Some(c) = self.child.as_mut()
                && let Ok(Some(_)) = c.try_wait()
            {
                self.child = None;
                return false;
            }
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
                let mut buf = [0u8; 64];
                if s.write_all(b"PING\r\n").is_ok()
                    && let Ok(n) = s.read(&mut buf)
                    && buf[..n].starts_with(b"+PONG")
                {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server on port {} not ready in time", self.port);
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("server running").id()
    }

    /// SIGKILL (a crash) and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// [`RedisServer::start`] with more `redis-server` arguments (`--key-load-delay 100`).
    pub fn start_with(dir: &Path, aof: bool, extra: &[&str]) -> RedisServer {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        for _ in 0..5 {
            if let Some(s) = RedisServer::try_start_with(dir, free_port(), aof, extra.clone()) {
                return s;
            }
        }
        panic!("could not start redis-server after 5 attempts");
    }

    /// SIGKILL, then a new server on the same port and dir that is not waited for: it may
    /// still be loading its AOF (answering `LOADING`) when this returns.
    pub fn restart_loading(&mut self) {
        self.kill();
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--dir", &self.dir.display().to_string()])
            .args(["--appendonly", if self.aof { "yes" } else { "no" }])
            .args([
                "--appendfsync",
                "everysec",
                "--save",
                "",
                "--daemonize",
                "no",
            ])
            .args(["--protected-mode", "no", "--logfile", ""])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        self.child = Some(child);
    }

    /// What the server answers `PING` with now (`+PONG`, `-LOADING …`), or `None` when it
    /// does not answer.
    pub fn ping_reply(&self) -> Option<String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
        s.write_all(b"PING\r\n").ok()?;
        let mut buf = [0u8; 128];
        let n = s.read(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).trim_end().to_string())
    }

    /// Starts a new server on the same port and dir (AOF replayed).
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + REDIS_START_TIMEOUT;
        loop {
            if let Some(s) =
                RedisServer::try_start_with(&self.dir, self.port, self.aof, self.extra.clone())
            {
                *self = s;
                return;
            }
            assert!(Instant::now() < deadline, "could not restart redis-server");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.pid().to_string()])
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill {sig} failed");
    }

    /// SIGSTOP: the server accepts TCP connections (kernel backlog) but never answers.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT.
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// Makes everything acknowledged so far reach the AOF file before a `kill()`: with
    /// `appendfsync everysec` Redis may hold acknowledged writes in memory for up to 2 s when
    /// a background fsync is slow (seen on a loaded CI machine: a deposit lost by a SIGKILL).
    /// Switches to `always` and waits for one write, which flushes the whole AOF buffer.
    pub async fn sync_aof(&self) {
        self.config_set("appendfsync", "always").await;
        let mut c = self.raw().await;
        let _: () = redis::cmd("SET")
            .arg("gpux-test:aof-sync")
            .arg(1)
            .query_async(&mut c)
            .await
            .expect("SET");
    }

    /// Makes this server a replica of `primary` (`REPLICAOF`) and waits until the primary
    /// counts it as connected and it has synced.
    pub async fn replicate(&self, primary: &RedisServer) {
        let mut c = self.raw().await;
        let _: () = redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(primary.port)
            .query_async(&mut c)
            .await
            .expect("REPLICAOF");
        let mut p = primary.raw().await;
        let deadline = Instant::now() + REDIS_START_TIMEOUT;
        loop {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut p)
                .await
                .expect("INFO");
            let mine: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut c)
                .await
                .expect("INFO");
            if info.contains("connected_slaves:1") && mine.contains("master_link_status:up") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the replica never synced: {info}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Promotes a replica to primary (`REPLICAOF NO ONE`), as a failover would.
    pub async fn promote(&self) {
        let mut c = self.raw().await;
        let _: () = redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query_async(&mut c)
            .await
            .expect("REPLICAOF NO ONE");
    }

    /// `CONFIG SET key value` on a fresh connection.
    pub async fn config_set(&self, key: &str, value: &str) {
        let mut c = self.raw().await;
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(key)
            .arg(value)
            .query_async(&mut c)
            .await
            .unwrap_or_else(|e| panic!("CONFIG SET {key} {value}: {e}"));
    }

    /// A raw connection for inspecting / damaging keys.
    pub async fn raw(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("raw connection")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_ref() {
            // A stopped process still dies on SIGKILL; resume anyway for a clean exit.
            let _ = Command::new("kill")
                .args(["-CONT", &c.id().to_string()])
                .status();
        }
        self.kill();
    }
}

/// How long a cluster node may be unreachable before the others fail it over, ms (the
/// tests' `cluster-node-timeout`; Redis's default is 15,000).
pub const CLUSTER_NODE_TIMEOUT_MS: u64 = 1_000;

/// A Redis Cluster on this machine: `masters` masters with one replica each, every node a
/// [`RedisServer`] (AOF on) in its own directory, on a free port with its cluster bus port
/// set explicitly (`cluster-port`), created with `redis-cli --cluster create`.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts `2 * masters` nodes under `dir` and joins them; returns once every node says
    /// `cluster_state:ok`.
    pub fn start(dir: &Path, masters: usize) -> RedisCluster {
        let mut nodes = Vec::new();
        for i in 0..masters * 2 {
            let node_dir = dir.join(format!("node-{i}"));
            std::fs::create_dir_all(&node_dir).expect("node dir");
            let node = (0..5)
                .find_map(|_| {
                    let port = free_port();
                    let bus = free_port();
                    RedisServer::try_start_with(
                        &node_dir,
                        port,
                        true,
                        [
                            "--cluster-enabled",
                            "yes",
                            "--cluster-port",
                            &bus.to_string(),
                            "--cluster-node-timeout",
                            &CLUSTER_NODE_TIMEOUT_MS.to_string(),
                            "--cluster-replica-validity-factor",
                            "0",
                            "--cluster-config-file",
                            "nodes.conf",
                        ]
                        .map(String::from)
                        .to_vec(),
                    )
                })
                .expect("start a cluster node");
            nodes.push(node);
        }
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)))
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let cluster = RedisCluster { nodes };
        let deadline = Instant::now() + REDIS_START_TIMEOUT;
        while !cluster
            .nodes
            .iter()
            .all(|n| cli(n.port, &["CLUSTER", "INFO"]).contains("cluster_state:ok"))
        {
            assert!(
                Instant::now() < deadline,
                "the cluster never reached state ok"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        // A replica just synced may not answer `WAIT` for a while (seen: over a second):
        // ready when the journal's master gets a write confirmed within 100 ms.
        let (master, _) = cluster.master_of("gpux:{shard-0}:journal");
        let port = cluster.nodes[master].port;
        let started = Instant::now();
        loop {
            let out = Command::new("redis-cli")
                .args(["-p", &port.to_string()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .and_then(|mut c| {
                    if let Some(mut i) = c.stdin.take() {
                        i.write_all(b"SET gpux-test:{shard-0}:probe 1\nWAIT 1 100\n")?;
                    }
                    c.wait_with_output()
                })
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            if out.lines().nth(1) == Some("1") {
                println!(
                    "redis cluster: the journal's replica confirms writes {} ms after the \
                     cluster was created",
                    started.elapsed().as_millis()
                );
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the journal's replica never confirmed a write: {out}"
            );
        }
        cluster
    }

    /// The seed URLs, comma-separated (`--redis-cluster --redis-url ...`).
    pub fn url(&self) -> String {
        self.nodes
            .iter()
            .map(RedisServer::url)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The journal's settings on this cluster (default prefix, shard 0).
    pub fn config(&self) -> RedisConfig {
        let mut c = RedisConfig::new(self.url());
        c.cluster = true;
        c
    }

    /// The index in `nodes` of the live master serving `key`'s slot, and of its replica when
    /// one is connected, as a live node's `CLUSTER NODES` says (panics when no master does).
    pub fn master_of(&self, key: &str) -> (usize, Option<usize>) {
        self.owner_of(key)
            .unwrap_or_else(|| panic!("no live master serves {key}"))
    }

    /// [`RedisCluster::master_of`], `None` while no live master serves the slot (a failover).
    pub fn owner_of(&self, key: &str) -> Option<(usize, Option<usize>)> {
        let live = self
            .nodes
            .iter()
            .find(|n| n.child.is_some())
            .expect("a live node");
        let slot: u16 = cli(live.port, &["CLUSTER", "KEYSLOT", key])
            .trim()
            .parse()
            .expect("a slot number");
        let table = cli(live.port, &["CLUSTER", "NODES"]);
        let index_of = |addr: &str| {
            let port: u16 = addr
                .split(['@', ':'])
                .nth(1)
                .and_then(|p| p.parse().ok())
                .expect("a node address");
            self.nodes.iter().position(|n| n.port == port)
        };
        let mut master = None;
        for line in table.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 8 || !f[2].contains("master") || f[2].contains("fail") {
                continue;
            }
            let serves = f[8..].iter().any(|r| {
                let mut ends = r.split('-').map(|x| x.parse::<u16>().ok());
                match (ends.next().flatten(), ends.next().flatten()) {
                    (Some(a), Some(b)) => (a..=b).contains(&slot),
                    (Some(a), None) => a == slot,
                    _ => false,
                }
            });
            if serves {
                master = Some((f[0].to_string(), index_of(f[1]).expect("a node of ours")));
            }
        }
        let (id, master) = master?;
        let replica = table.lines().find_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            (f.len() >= 8 && f[3] == id && !f[2].contains("fail") && f[7] == "connected")
                .then(|| index_of(f[1]))
                .flatten()
        });
        Some((master, replica))
    }
}

/// `redis-cli -p port args...`'s output (empty when it fails).
fn cli(port: u16, args: &[&str]) -> String {
    Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// One backend under test: opens fresh journal instances on the same storage and damages
/// stored records behind the journal's back.
#[allow(async_fn_in_trait)]
pub trait Harness: Sized {
    type J: Journal;
    /// Fresh, empty storage.
    async fn new() -> Self;
    /// A new journal instance on this storage (a restarted process).
    async fn open(&mut self) -> Self::J;
    /// Flips a payload byte of entry `seq`, leaving its stored checksum as it was.
    async fn corrupt_payload(&mut self, seq: u64);
    /// Deletes entry `seq` (a hole).
    async fn delete_entry(&mut self, seq: u64);
}

/// redb in a temp dir.
pub struct RedbHarness {
    pub dir: tempfile::TempDir,
}

impl RedbHarness {
    fn path(&self) -> PathBuf {
        EmbeddedJournal::file_path(self.dir.path(), 0)
    }
}

impl Harness for RedbHarness {
    type J = EmbeddedJournal;

    async fn new() -> Self {
        RedbHarness {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    async fn open(&mut self) -> EmbeddedJournal {
        EmbeddedJournal::open(self.dir.path(), 0)
            .await
            .expect("open embedded journal")
    }

    async fn corrupt_payload(&mut self, seq: u64) {
        let db = redb::Database::create(self.path()).expect("open redb");
        let txn = db.begin_write().expect("write txn");
        {
            let mut t = txn.open_table(ENTRIES_TABLE).expect("table");
            let mut raw = t
                .get(seq)
                .expect("get")
                .expect("entry exists")
                .value()
                .to_vec();
            let last = raw.len() - 1;
            raw[last] ^= 0x01;
            t.insert(seq, raw.as_slice()).expect("insert");
        }
        txn.commit().expect("commit");
    }

    async fn delete_entry(&mut self, seq: u64) {
        let db = redb::Database::create(self.path()).expect("open redb");
        let txn = db.begin_write().expect("write txn");
        {
            let mut t = txn.open_table(ENTRIES_TABLE).expect("table");
            assert!(
                t.remove(seq).expect("remove").is_some(),
                "entry {seq} existed"
            );
        }
        txn.commit().expect("commit");
    }
}

/// A dedicated redis-server (AOF everysec) in a temp dir.
pub struct RedisHarness {
    pub server: RedisServer,
    pub dir: tempfile::TempDir,
}

impl RedisHarness {
    pub fn config(&self) -> RedisConfig {
        RedisConfig::new(self.server.url())
    }

    fn keys(&self) -> RedisKeys {
        let c = self.config();
        RedisKeys::new(&c.prefix, c.shard)
    }
}

impl Harness for RedisHarness {
    type J = RedisJournal;

    async fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = RedisServer::start(dir.path(), true);
        RedisHarness { server, dir }
    }

    async fn open(&mut self) -> RedisJournal {
        RedisJournal::connect(self.config())
            .await
            .expect("connect redis journal")
    }

    async fn corrupt_payload(&mut self, seq: u64) {
        // The entry's record ends with its payload: flip its last bit (stored crc unchanged).
        self.edit_entry(seq, |rec| {
            let mut rec = rec.to_vec();
            let last = rec.len() - 1;
            rec[last] ^= 0x01;
            Some(rec)
        })
        .await;
    }

    async fn delete_entry(&mut self, seq: u64) {
        self.edit_entry(seq, |_| None).await;
    }
}

impl RedisHarness {
    /// Rewrites the journal stream (streams cannot be edited in place) with the record of
    /// entry `seq` replaced by `edit(record)`, or removed when it returns `None`, keeping
    /// every other entry, every id and the stream's last id.
    async fn edit_entry(&mut self, seq: u64, edit: impl Fn(&[u8]) -> Option<Vec<u8>>) {
        let key = self.keys().journal;
        let mut c = self.server.raw().await;
        let items: Vec<(String, Vec<Vec<u8>>)> = redis::cmd("XRANGE")
            .arg(&key)
            .arg("-")
            .arg("+")
            .query_async(&mut c)
            .await
            .expect("xrange");
        let last_id = items
            .last()
            .map(|i| i.0.clone())
            .expect("stream has entries");
        let _: () = redis::cmd("DEL")
            .arg(&key)
            .query_async(&mut c)
            .await
            .expect("del");
        let mut found = false;
        for (mut id, fields) in items {
            let stream_seq: u64 = id.trim_end_matches("-0").parse().expect("<seq>-0 id");
            let fields = match fields.first().map(Vec::as_slice) {
                Some(b"batch") => {
                    let parts = record::split_batch(stream_seq, &fields[1]).expect("batch");
                    let mut kept = Vec::new();
                    for (s, rec) in parts {
                        if s == seq {
                            found = true;
                            if let Some(rec) = edit(rec) {
                                kept.push((s, rec));
                            }
                        } else {
                            kept.push((s, rec.to_vec()));
                        }
                    }
                    // A batch that lost its last entry is stored under its new last seq
                    // (as if that entry had never been written); the stream's last id stays.
                    let Some(&(kept_last, _)) = kept.last() else {
                        continue;
                    };
                    id = format!("{kept_last}-0");
                    vec![b"batch".to_vec(), record::join_batch(&kept)]
                }
                _ if stream_seq == seq => {
                    found = true;
                    let p = fields
                        .iter()
                        .position(|f| f == b"rec" || f == b"payload")
                        .expect("rec field");
                    match edit(&fields[p + 1]) {
                        Some(v) => {
                            let mut fields = fields.clone();
                            fields[p + 1] = v;
                            fields
                        }
                        None => continue,
                    }
                }
                _ => fields,
            };
            let _: String = redis::cmd("XADD")
                .arg(&key)
                .arg(&id)
                .arg(fields)
                .query_async(&mut c)
                .await
                .expect("xadd");
        }
        assert!(found, "entry {seq} exists");
        let _: () = redis::cmd("XSETID")
            .arg(&key)
            .arg(&last_id)
            .query_async(&mut c)
            .await
            .expect("xsetid");
    }
}

/// Captures the messages of WARN-and-above events on this thread while the guard lives.
pub struct WarnCapture {
    pub messages: Arc<Mutex<Vec<String>>>,
    _guard: tracing::subscriber::DefaultGuard,
}

impl WarnCapture {
    pub fn start() -> WarnCapture {
        let messages = Arc::new(Mutex::new(Vec::new()));
        let sub = CaptureSubscriber {
            messages: Arc::clone(&messages),
        };
        WarnCapture {
            messages,
            _guard: tracing::subscriber::set_default(sub),
        }
    }

    pub fn any_contains(&self, needle: &str) -> bool {
        self.messages
            .lock()
            .expect("lock")
            .iter()
            .any(|m| m.contains(needle))
    }
}

struct CaptureSubscriber {
    messages: Arc<Mutex<Vec<String>>>,
}

struct MessageVisitor(String);

impl tracing::field::Visit for MessageVisitor {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl tracing::Subscriber for CaptureSubscriber {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        if *event.metadata().level() <= tracing::Level::WARN {
            let mut v = MessageVisitor(String::new());
            event.record(&mut v);
            self.messages.lock().expect("lock").push(v.0);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}
pub mod api;
pub mod procs;
