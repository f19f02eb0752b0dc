//! # Redis journal backend (production)
//!
//! One Redis Stream per shard; the sequence number is the explicit stream entry id
//! (`<seq>-0`), so Redis itself refuses an id at or below the stream's last one. Keys (all
//! share the hash tag `{shard-<n>}`, so they live in one Redis Cluster slot and the Lua
//! scripts may touch them together):
//! - `<prefix>:{shard-<n>}:journal` — STREAM, one entry per appended batch (group commit),
//!   id `<last seq of the batch>-0`, one field `batch`: the record of
//!   [`super::record::encode_batch`] (record format 3). Entries written by older gateways —
//!   one per command, id `<seq>-0`, field `rec` (format 2) or fields `ts`, `crc`, `payload`
//!   (format 1) — are still read;
//! - `<prefix>:{shard-<n>}:snapshot` — HASH `seq`, `format_version`, `state_hash` (32 raw
//!   bytes), `bytes`, `crc`;
//! - `<prefix>:{shard-<n>}:meta` — HASH `trimmed_upto`, `epoch` (the last leadership epoch
//!   granted);
//! - `<prefix>:{shard-<n>}:leader` — STRING `<epoch> <owner>` with a TTL: the engine
//!   leader's lease ([`RedisJournal::try_lead`], docs/journal.md "Leadership").
//!
//! Leadership and fencing: one gateway leads a journal at a time. It takes the lease (a new
//! epoch, `HINCRBY meta epoch`), renews it well within its TTL, and every append and
//! snapshot it sends carries its token `<epoch> <owner>`: the scripts refuse it (nothing
//! written, [`JournalError::Fenced`]) unless the lease key holds exactly that token. A leader
//! paused past its lease (GC, SIGSTOP, a VM migration) wakes up fenced: another may already
//! lead, and its writes cannot interleave. A journal without a token ([`RedisJournal`] that
//! never took the lease: tools, benchmarks) is not fenced.
//!
//! Appends, snapshot saves and trims are Lua scripts: one round trip, atomic (all checks,
//! then all writes), so a refused call writes nothing and a concurrent or stale writer cannot
//! interleave. Every call runs under a timeout (named constants below); a timeout or IO error
//! drops the connection, returns `Unavailable`, and the next call reconnects (re-checking the
//! AOF settings), so the backend recovers by itself once Redis is back.
//!
//! Reads (replay) are one `MULTI`/`EXEC` of a small meta script (`last_seq`, trim point) and
//! two plain `XRANGE`s (entries never pass through Lua, which cost ~10x the XRANGE itself):
//! the stream entries whose ids fall in the page `(after, after + limit]`, and the one after
//! it (the batch that straddles the page's end). Only the entries of the page are decoded
//! (`docs/journal.md`, "Read").
//!
//! Redis Cluster ([`RedisConfig::cluster`]): the keys share one hash slot, so every script
//! and `MULTI` runs on the master that owns it. Commands that name no key (`WAIT`, `PING`,
//! `CONFIG GET`) ride in a pipeline behind one that does (`EXISTS <journal>`): the cluster
//! client routes a pipeline by its first key, so they reach that same master, never every
//! primary. After a failover the client follows the slot to the promoted replica (`MOVED`,
//! or a new connection after a timeout drops the old one).
//!
//! Durability: `Ok` means Redis executed the write and wrote it to its AOF file before
//! replying; whether it reached the disk depends on `appendfsync` (`docs/journal.md`).

use std::fmt;
use std::future::Future;
use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisError, RedisFuture, Script, Value};

use super::record::{
    check_entry_crc, check_snapshot_crc, decode_entry, encode_batch, snapshot_crc, split_batch,
};
use super::{
    Entry, Journal, JournalError, MAX_READ_ENTRIES, SnapshotRecord, validate_batch, verify_page,
};

/// Default key prefix.
pub const DEFAULT_PREFIX: &str = "gpux";

/// Default limit on establishing a connection (TCP + handshake + AOF check).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_millis(1_000);

/// Default limit on one append, read, trim or `last_seq` call.
pub const DEFAULT_OP_TIMEOUT: Duration = Duration::from_millis(2_000);

/// Default limit on saving or loading a snapshot (snapshots can be large).
pub const DEFAULT_SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(30);

/// Default limit on a `WAIT` for replicas after an append, when `wait_replicas` is set.
pub const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_millis(500);

/// Limit on [`Journal::ping`] (readiness probe).
pub const PING_TIMEOUT: Duration = Duration::from_millis(500);

/// Retries of one request inside the cluster client (after `MOVED`, `TRYAGAIN` or a lost
/// connection) before it gives up; every call is also bounded by its own timeout.
pub const CLUSTER_RETRIES: u32 = 4;

/// Settings of the Redis backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// `redis://[user:password@]host:port[/db]`; with [`RedisConfig::cluster`], one or more
    /// seed nodes of the cluster separated by commas
    /// (`redis://10.0.0.1:7000,redis://10.0.0.2:7000`).
    pub url: String,
    /// The URL names a Redis Cluster: the client learns the slot map from the seeds and
    /// sends each call to the master of the journal's slot.
    pub cluster: bool,
    /// Key prefix (no `{` or `}`; the hash tag is added per shard).
    pub prefix: String,
    /// Shard number; selects the keys.
    pub shard: u32,
    /// Refuse to run (`Config` error) when AOF is off or cannot be verified.
    pub require_aof: bool,
    /// Limit on establishing a connection.
    pub connect_timeout: Duration,
    /// Limit on one append / read / trim / `last_seq` call.
    pub op_timeout: Duration,
    /// Limit on one snapshot save / load.
    pub snapshot_timeout: Duration,
    /// Replicas that must confirm each append before it is acknowledged (`WAIT`, pipelined
    /// with the append script); 0: the primary's answer is enough (docs/journal.md,
    /// "Replicas and WAIT").
    pub wait_replicas: u32,
    /// Limit on that `WAIT`: an append the replicas did not confirm within it is answered
    /// `Unavailable` (outcome unknown: the primary has it, a failover may lose it).
    pub wait_timeout: Duration,
}

impl RedisConfig {
    /// Defaults: one server (not a cluster), prefix [`DEFAULT_PREFIX`], shard 0, AOF not
    /// required, default timeouts.
    pub fn new(url: impl Into<String>) -> Self {
        RedisConfig {
            url: url.into(),
            cluster: false,
            prefix: DEFAULT_PREFIX.to_string(),
            shard: 0,
            require_aof: false,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            op_timeout: DEFAULT_OP_TIMEOUT,
            snapshot_timeout: DEFAULT_SNAPSHOT_TIMEOUT,
            wait_replicas: 0,
            wait_timeout: DEFAULT_WAIT_TIMEOUT,
        }
    }
}

/// The Redis keys of one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisKeys {
    /// `<prefix>:{shard-<n>}:journal` (STREAM).
    pub journal: String,
    /// `<prefix>:{shard-<n>}:snapshot` (HASH).
    pub snapshot: String,
    /// `<prefix>:{shard-<n>}:meta` (HASH).
    pub meta: String,
    /// `<prefix>:{shard-<n>}:leader` (STRING with a TTL).
    pub leader: String,
}

impl RedisKeys {
    /// The keys of `shard` under `prefix`.
    pub fn new(prefix: &str, shard: u32) -> Self {
        let base = format!("{prefix}:{{shard-{shard}}}");
        RedisKeys {
            journal: format!("{base}:journal"),
            snapshot: format!("{base}:snapshot"),
            meta: format!("{base}:meta"),
            leader: format!("{base}:leader"),
        }
    }
}

/// Redis persistence settings as read at the last (re)connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AofStatus {
    /// `CONFIG GET appendonly`; `None` when it could not be read (CONFIG disabled).
    pub appendonly: Option<bool>,
    /// `CONFIG GET appendfsync` (`always`, `everysec`, `no`); `None` when unreadable.
    pub appendfsync: Option<String>,
}

/// A client of one Redis server or of a Redis Cluster.
#[derive(Clone)]
enum RedisClient {
    Single(redis::Client),
    /// Boxed: a cluster client is twice the size of a single one.
    Cluster(Box<ClusterClient>),
}

impl RedisClient {
    /// The client of `config.url` (several comma-separated seeds with `cluster`).
    fn open(config: &RedisConfig) -> Result<Self, JournalError> {
        if !config.cluster {
            if config.url.contains(',') {
                return Err(JournalError::Config(format!(
                    "redis url {:?} names several servers: add --redis-cluster \
                     (redis_cluster = true) for a Redis Cluster's seed nodes",
                    config.url
                )));
            }
            return redis::Client::open(config.url.as_str())
                .map(RedisClient::Single)
                .map_err(|e| JournalError::Config(format!("redis url: {e}")));
        }
        let seeds: Vec<&str> = config
            .url
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        if seeds.is_empty() {
            return Err(JournalError::Config(
                "redis cluster url names no seed node".into(),
            ));
        }
        ClusterClientBuilder::new(seeds)
            .connection_timeout(config.connect_timeout)
            .retries(CLUSTER_RETRIES)
            .min_retry_wait(20)
            .max_retry_wait(500)
            .build()
            .map(|c| RedisClient::Cluster(Box::new(c)))
            .map_err(|e| JournalError::Config(format!("redis cluster url: {e}")))
    }

    /// A new multiplexed connection (to every master it needs, on a cluster).
    async fn connect(&self, timeout: Duration) -> Result<RedisConn, RedisError> {
        match self {
            RedisClient::Single(c) => {
                let cfg = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(None);
                c.get_multiplexed_async_connection_with_config(&cfg)
                    .await
                    .map(RedisConn::Single)
            }
            RedisClient::Cluster(c) => c.get_async_connection().await.map(RedisConn::Cluster),
        }
    }
}

/// A multiplexed connection to one server or to a cluster (cheap to clone). Every call this
/// journal sends names one of the shard's keys, or rides in a pipeline behind one that does,
/// so on a cluster it reaches the master of the shard's slot.
#[derive(Clone)]
enum RedisConn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RedisConn::Single(c) => c.req_packed_command(cmd),
            RedisConn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipe: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RedisConn::Single(c) => c.req_packed_commands(pipe, offset, count),
            RedisConn::Cluster(c) => c.req_packed_commands(pipe, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisConn::Single(c) => c.get_db(),
            RedisConn::Cluster(c) => c.get_db(),
        }
    }
}

/// A pipeline that starts with `EXISTS key` (its reply ignored): on a cluster it goes to the
/// master of `key`'s slot, so keyless commands added after it (`WAIT`, `PING`, `CONFIG
/// GET`) reach that master and no other.
fn keyed_pipe(key: &str) -> Pipeline {
    let mut pipe = redis::pipe();
    pipe.cmd("EXISTS").arg(key).ignore();
    pipe
}

/// The journal in Redis Streams.
pub struct RedisJournal {
    client: RedisClient,
    conn: Option<RedisConn>,
    config: RedisConfig,
    keys: RedisKeys,
    aof: AofStatus,
    /// The leadership token `<epoch> <owner>` appends and snapshots carry; `None`: unfenced.
    fence: Option<String>,
}

/// The outcome of [`RedisJournal::try_lead`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leadership {
    /// This journal leads, in `epoch` (its writes now carry the token).
    Leader {
        /// The epoch granted (1 for the first leader of a journal, +1 at each change).
        epoch: u64,
    },
    /// Another owner holds a live lease.
    Held {
        /// Its epoch.
        epoch: u64,
        /// Its owner id.
        owner: String,
        /// Time until its lease expires unless renewed, ms.
        expires_in_ms: u64,
    },
}

impl fmt::Debug for RedisJournal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisJournal")
            .field("keys", &self.keys)
            .field("connected", &self.conn.is_some())
            .field("aof", &self.aof)
            .field("fence", &self.fence)
            .finish_non_exhaustive()
    }
}

/// Lua: the stream's last generated id as a number (0 without a stream). Kept by Redis even
/// when trimming empties the stream.
const LAST_SEQ_FN: &str = r#"
local function last_seq(key)
  if redis.call('EXISTS', key) == 0 then return 0 end
  local info = redis.call('XINFO', 'STREAM', key)
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then
      local ms, sq = string.match(info[i + 1], '^(%d+)%-(%d+)$')
      if ms == nil or sq ~= '0' then
        error({err = 'JCORRUPT journal last id ' .. tostring(info[i + 1]) .. ' is not <seq>-0'})
      end
      return tonumber(ms)
    end
  end
  error({err = 'JCORRUPT journal stream has no last-generated-id'})
end
"#;

/// Append. KEYS[1] journal, KEYS[2] leader. ARGV[1] first seq, ARGV[2] stream id
/// `<last seq>-0`, ARGV[3] the batch record ([`encode_batch`]), ARGV[4] the leadership token
/// (`''`: unfenced). Returns {0, last, 0} | {1 (gap), last, first} | {3 (overlap: the batch
/// starts at or below the stored last seq), last, first} | {4 (fenced: the lease does not
/// hold this token), 0, 0}; an overlap writes nothing and is settled by the caller (it
/// compares what is stored).
const APPEND_BODY: &str = r#"
if ARGV[4] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[4] then return {4, 0, 0} end
local key = KEYS[1]
local first = tonumber(ARGV[1])
local last = last_seq(key)
if first > last + 1 then return {1, last, first} end
if first <= last then return {3, last, first} end
redis.call('XADD', key, ARGV[2], 'batch', ARGV[3])
return {0, last, 0}
"#;

/// Read meta. KEYS[1] journal, KEYS[2] meta. Returns {last, trimmed_upto}. Sent as `EVAL`
/// inside the `MULTI`/`EXEC` of a page read, beside the `XRANGE` (the entries never pass
/// through Lua: converting 10,000 of them to Lua tables and back cost ~10× the `XRANGE`).
const READ_META_BODY: &str = r#"
local last = last_seq(KEYS[1])
local trimmed = tonumber(redis.call('HGET', KEYS[2], 'trimmed_upto') or '0')
return {last, trimmed}
"#;

/// Last seq. KEYS[1] journal.
const LAST_BODY: &str = "return last_seq(KEYS[1])\n";

/// Save snapshot. KEYS[1] journal, KEYS[2] snapshot, KEYS[3] meta, KEYS[4] leader. ARGV: seq,
/// format_version, state_hash, bytes, crc, the leadership token (`''`: unfenced). Returns
/// {0} | {1 (ahead of journal), last} | {2 (behind snapshot or trim point), floor} |
/// {4 (fenced), 0}.
const SAVE_SNAPSHOT_BODY: &str = r#"
if ARGV[6] ~= '' and redis.call('GET', KEYS[4]) ~= ARGV[6] then return {4, 0} end
local seq = tonumber(ARGV[1])
local last = last_seq(KEYS[1])
if seq > last then return {1, last} end
local cur = tonumber(redis.call('HGET', KEYS[2], 'seq') or '0') or 0
local trimmed = tonumber(redis.call('HGET', KEYS[3], 'trimmed_upto') or '0')
local floor = math.max(cur, trimmed)
if seq < floor then return {2, floor} end
redis.call('HSET', KEYS[2], 'seq', ARGV[1], 'format_version', ARGV[2], 'state_hash', ARGV[3],
           'bytes', ARGV[4], 'crc', ARGV[5])
return {0}
"#;

/// Trim. KEYS[1] journal, KEYS[2] snapshot, KEYS[3] meta. ARGV[1] upto, ARGV[2] min id
/// (upto + 1). Returns {0, removed} | {1 (beyond snapshot), snapshot seq}.
const TRIM_BODY: &str = r#"
local upto = tonumber(ARGV[1])
local snap = tonumber(redis.call('HGET', KEYS[2], 'seq') or '0') or 0
if upto > snap then return {1, snap} end
local trimmed = tonumber(redis.call('HGET', KEYS[3], 'trimmed_upto') or '0')
if upto <= trimmed then return {0, 0} end
local removed = 0
if redis.call('EXISTS', KEYS[1]) == 1 then
  removed = redis.call('XTRIM', KEYS[1], 'MINID', ARGV[2])
end
redis.call('HSET', KEYS[3], 'trimmed_upto', ARGV[1])
return {0, removed}
"#;

/// Take the lease. KEYS[1] leader, KEYS[2] meta. ARGV[1] owner, ARGV[2] lease ms, ARGV[3]
/// the URL followers forward commands to (`''`: none). Returns {0 (leads), epoch, 0, owner}
/// — a new epoch, or the same one when this owner holds it — | {1 (held), epoch, ms left,
/// owner}. Leading, it records `<epoch> <url>` in meta's `leader_url`.
const TRY_LEAD: &str = r#"
local cur = redis.call('GET', KEYS[1])
if cur then
  local e, o = string.match(cur, '^(%d+) (.*)$')
  if o == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {0, tonumber(e), 0, o}
  end
  return {1, tonumber(e or '0'), redis.call('PTTL', KEYS[1]), o or cur}
end
local e = redis.call('HINCRBY', KEYS[2], 'epoch', 1)
redis.call('SET', KEYS[1], e .. ' ' .. ARGV[1], 'PX', ARGV[2])
redis.call('HSET', KEYS[2], 'leader_url', e .. ' ' .. ARGV[3])
return {0, e, 0, ARGV[1]}
"#;

/// Who leads. KEYS[1] leader, KEYS[2] meta. Returns {} (no live lease) | {epoch, owner, url}
/// (`url` empty when the leader gave none, or when it was recorded for another epoch).
const LEADER: &str = r#"
local cur = redis.call('GET', KEYS[1])
if not cur then return {} end
local e, o = string.match(cur, '^(%d+) (.*)$')
if not e then return {} end
local rec = redis.call('HGET', KEYS[2], 'leader_url') or ''
local ue, url = string.match(rec, '^(%d+) (.*)$')
if ue ~= e then url = '' end
return {tonumber(e), o, url or ''}
"#;

/// Renew the lease. KEYS[1] leader. ARGV[1] token, ARGV[2] lease ms. Returns 1 | 0 (lost).
const RENEW: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"#;

/// Give the lease up. KEYS[1] leader. ARGV[1] token. Returns 1 | 0 (not held).
const RESIGN: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"#;

fn script(body: &str) -> Script {
    Script::new(&format!("{LAST_SEQ_FN}{body}"))
}

static APPEND: LazyLock<Script> = LazyLock::new(|| script(APPEND_BODY));
static READ_META: LazyLock<String> = LazyLock::new(|| format!("{LAST_SEQ_FN}{READ_META_BODY}"));
static LAST: LazyLock<Script> = LazyLock::new(|| script(LAST_BODY));
static SAVE_SNAPSHOT: LazyLock<Script> = LazyLock::new(|| script(SAVE_SNAPSHOT_BODY));
static TRIM: LazyLock<Script> = LazyLock::new(|| script(TRIM_BODY));
static TRY_LEAD_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(TRY_LEAD));
static RENEW_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RENEW));
static RESIGN_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RESIGN));
static LEADER_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(LEADER));

impl RedisJournal {
    /// Connects, reads the AOF settings (warning when AOF is off; `Config` error instead
    /// when `require_aof`), and returns the journal. `Unavailable` when Redis cannot be
    /// reached within the connect timeout.
    pub async fn connect(config: RedisConfig) -> Result<Self, JournalError> {
        if config.prefix.is_empty() || config.prefix.contains(['{', '}']) {
            return Err(JournalError::Config(format!(
                "redis key prefix {:?} must be non-empty and contain no braces",
                config.prefix
            )));
        }
        let client = RedisClient::open(&config)?;
        let keys = RedisKeys::new(&config.prefix, config.shard);
        let mut j = RedisJournal {
            client,
            conn: None,
            config,
            keys,
            aof: AofStatus {
                appendonly: None,
                appendfsync: None,
            },
            fence: None,
        };
        j.connection().await?;
        tracing::info!(journal = %j.keys.journal, aof = ?j.aof, "redis journal connected");
        Ok(j)
    }

    /// The keys this journal uses.
    pub fn keys(&self) -> &RedisKeys {
        &self.keys
    }

    /// AOF settings read at the last (re)connect.
    pub fn aof_status(&self) -> &AofStatus {
        &self.aof
    }

    /// The leadership token this journal's writes carry (`<epoch> <owner>`), if it leads.
    pub fn fencing_token(&self) -> Option<&str> {
        self.fence.as_deref()
    }

    /// Makes this journal's writes carry `token` (another connection of the same leader,
    /// e.g. the one that renews the lease), or none.
    pub fn set_fencing_token(&mut self, token: Option<String>) {
        self.fence = token;
    }

    /// Takes the engine leader's lease for `lease` (module docs): leads when no live lease is
    /// held, or when `owner` holds it (renewed). Leading, its appends and snapshots are fenced
    /// by the token from then on, and `url` (`""`: none) is where followers forward commands
    /// ([`RedisJournal::leader`]).
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot answer; `Corrupt` on a reply of another shape.
    pub async fn try_lead(
        &mut self,
        owner: &str,
        lease: Duration,
        url: &str,
    ) -> Result<Leadership, JournalError> {
        let mut inv = TRY_LEAD_SCRIPT.key(&self.keys.leader);
        inv.key(&self.keys.meta)
            .arg(owner)
            .arg(lease.as_millis().max(1) as u64)
            .arg(url);
        let limit = self.config.op_timeout;
        let (status, epoch, left, holder): (u8, u64, i64, String) = self
            .run("try_lead", limit, |mut c| async move {
                inv.invoke_async(&mut c).await
            })
            .await?;
        match status {
            0 => {
                self.fence = Some(format!("{epoch} {owner}"));
                Ok(Leadership::Leader { epoch })
            }
            1 => Ok(Leadership::Held {
                epoch,
                owner: holder,
                expires_in_ms: u64::try_from(left).unwrap_or(0),
            }),
            other => Err(JournalError::Corrupt(format!(
                "unexpected try_lead reply status {other}"
            ))),
        }
    }

    /// The live lease's holder: `(epoch, owner, url)`, `url` empty when it gave none; `None`
    /// when no engine leads (the lease ran out or was given up).
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot answer.
    pub async fn leader(&mut self) -> Result<Option<(u64, String, String)>, JournalError> {
        let mut inv = LEADER_SCRIPT.key(&self.keys.leader);
        inv.key(&self.keys.meta);
        let limit = self.config.op_timeout;
        let reply: Vec<redis::Value> = self
            .run("leader", limit, |mut c| async move {
                inv.invoke_async(&mut c).await
            })
            .await?;
        if reply.is_empty() {
            return Ok(None);
        }
        let parsed: Result<(u64, String, String), _> =
            redis::FromRedisValue::from_redis_value(redis::Value::Array(reply));
        parsed
            .map(Some)
            .map_err(|e| JournalError::Corrupt(format!("unexpected leader reply: {e}")))
    }

    /// Waits up to `block` for the journal to hold entries after `after` and reads them in the
    /// same round trip (`XREAD COUNT batches BLOCK`): a follower's tail calls this between
    /// reads, so each new batch reaches it in one round trip (a wait, then a separate
    /// `MULTI` read, took two and sent the first batch twice).
    ///
    /// Answers [`Tailed::Nothing`] when nothing came within `block`, [`Tailed::Entries`] for
    /// entries `after + 1 ..` with no gap (`more`: `batches` stream entries came, so more may
    /// be there), and [`Tailed::Reread`] when what came does not start at `after + 1` or has a
    /// gap: the caller reads with [`Journal::read_after`], whose meta read tells a trim from
    /// corruption.
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot answer; `Corrupt` for an entry that does not decode.
    pub async fn wait_read_after(
        &mut self,
        after: u64,
        block: Duration,
        batches: usize,
    ) -> Result<Tailed, JournalError> {
        let mut cmd = redis::cmd("XREAD");
        cmd.arg("COUNT")
            .arg(batches.max(1))
            .arg("BLOCK")
            .arg(block.as_millis().max(1) as u64)
            .arg("STREAMS")
            .arg(&self.keys.journal)
            .arg(format!("{after}-0"));
        let limit = self.config.op_timeout + block;
        // `nil` after the block; otherwise `[[key, [[id, [field, value, …]], …]]]`.
        let reply: Option<Vec<(Vec<u8>, RawEntries)>> = self
            .run("tail", limit, |mut c| async move {
                cmd.query_async(&mut c).await
            })
            .await?;
        let items: RawEntries = reply
            .into_iter()
            .flatten()
            .flat_map(|(_, items)| items)
            .collect();
        if items.is_empty() {
            return Ok(Tailed::Nothing);
        }
        let more = items.len() >= batches.max(1);
        let mut entries = Vec::new();
        for (id, fields) in items {
            decode_stream_item(&id, fields, after, u64::MAX, &mut entries)?;
        }
        let contiguous = entries
            .iter()
            .zip(after + 1..)
            .all(|(e, expected)| e.seq == expected);
        if entries.is_empty() || !contiguous {
            return Ok(Tailed::Reread);
        }
        Ok(Tailed::Entries { entries, more })
    }

    /// Renews the lease this journal holds for another `lease`: `Ok(false)` when it is no
    /// longer held by this token (expired and taken, or deleted): the caller must stop
    /// leading. `Ok(false)` too without a token.
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot answer (the lease runs on; retry).
    pub async fn renew(&mut self, lease: Duration) -> Result<bool, JournalError> {
        let Some(token) = self.fence.clone() else {
            return Ok(false);
        };
        let mut inv = RENEW_SCRIPT.key(&self.keys.leader);
        inv.arg(token).arg(lease.as_millis().max(1) as u64);
        let limit = self.config.op_timeout;
        let held: u8 = self
            .run("renew", limit, |mut c| async move {
                inv.invoke_async(&mut c).await
            })
            .await?;
        Ok(held == 1)
    }

    /// Gives the lease up (a graceful stop: a standby takes over at once instead of after
    /// the lease). Answers whether it was still held; the token is dropped either way.
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot answer (the lease then runs out by itself).
    pub async fn resign(&mut self) -> Result<bool, JournalError> {
        let Some(token) = self.fence.take() else {
            return Ok(false);
        };
        let mut inv = RESIGN_SCRIPT.key(&self.keys.leader);
        inv.arg(token);
        let limit = self.config.op_timeout;
        let held: u8 = self
            .run("resign", limit, |mut c| async move {
                inv.invoke_async(&mut c).await
            })
            .await?;
        Ok(held == 1)
    }

    /// The current connection, or a new one (connect + AOF check) under the connect timeout.
    async fn connection(&mut self) -> Result<RedisConn, JournalError> {
        if let Some(c) = &self.conn {
            return Ok(c.clone());
        }
        let limit = self.config.connect_timeout;
        let client = self.client.clone();
        let journal_key = self.keys.journal.clone();
        let attempt = async move {
            let mut c = client.connect(limit).await?;
            let aof = read_aof(&mut c, &journal_key).await?;
            Ok::<_, RedisError>((c, aof))
        };
        let (conn, aof) = match tokio::time::timeout(limit, attempt).await {
            Err(_) => {
                let e = unavailable(format!(
                    "redis connect timed out after {} ms",
                    limit.as_millis()
                ));
                tracing::warn!(journal = %self.keys.journal, error = %e, "redis journal connect failed");
                return Err(e);
            }
            Ok(Err(e)) => {
                let e = classify("connect", &e).0;
                tracing::warn!(journal = %self.keys.journal, error = %e, "redis journal connect failed");
                return Err(e);
            }
            Ok(Ok(v)) => v,
        };
        self.check_aof(&aof)?;
        self.aof = aof;
        self.conn = Some(conn.clone());
        Ok(conn)
    }

    /// Warns (or refuses, with `require_aof`) when acknowledged writes could be lost.
    fn check_aof(&self, aof: &AofStatus) -> Result<(), JournalError> {
        match (aof.appendonly, aof.appendfsync.as_deref()) {
            (Some(true), Some("always")) => {
                tracing::info!("redis AOF on, appendfsync always: every append fsynced");
            }
            (Some(true), Some("everysec")) => tracing::info!(
                "redis AOF on, appendfsync everysec: acknowledged appends survive a Redis crash; \
                 up to ~1 s of them can be lost on an OS crash or power loss"
            ),
            (Some(true), fsync) => tracing::warn!(
                appendfsync = ?fsync,
                "redis AOF on but appendfsync is not always/everysec: acknowledged appends can \
                 be lost on an OS crash or power loss"
            ),
            (Some(false), _) => {
                tracing::warn!(
                    journal = %self.keys.journal,
                    "REDIS AOF IS OFF (appendonly no): acknowledged journal entries WILL BE LOST \
                     when Redis restarts; set appendonly yes"
                );
                if self.config.require_aof {
                    return Err(JournalError::Config(
                        "redis appendonly is off and require_aof is set".into(),
                    ));
                }
            }
            (None, _) => {
                tracing::warn!(
                    "cannot read redis AOF settings (CONFIG GET refused); journal durability \
                     is unverified"
                );
                if self.config.require_aof {
                    return Err(JournalError::Config(
                        "cannot verify redis appendonly (CONFIG GET refused) and require_aof is set"
                            .into(),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Runs one request under `limit`; a timeout or connection failure drops the connection
    /// so the next call reconnects.
    async fn run<T, F, Fut>(
        &mut self,
        op: &'static str,
        limit: Duration,
        f: F,
    ) -> Result<T, JournalError>
    where
        F: FnOnce(RedisConn) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        let conn = self.connection().await?;
        match tokio::time::timeout(limit, f(conn)).await {
            Err(_) => {
                self.conn = None;
                let e = unavailable(format!(
                    "redis {op} timed out after {} ms",
                    limit.as_millis()
                ));
                tracing::warn!(journal = %self.keys.journal, error = %e, "redis journal call failed");
                Err(e)
            }
            Ok(Err(e)) => {
                let (err, drop_conn) = classify(op, &e);
                if drop_conn {
                    self.conn = None;
                }
                tracing::warn!(journal = %self.keys.journal, error = %err, "redis journal call failed");
                Err(err)
            }
            Ok(Ok(v)) => Ok(v),
        }
    }
}

impl RedisJournal {
    /// The error of a write refused by the fence.
    fn fenced(&self) -> JournalError {
        JournalError::Fenced(format!(
            "this gateway's lease ({}) is no longer the journal's leader lease: another engine \
             leads or the lease expired; nothing was written",
            self.fence.as_deref().unwrap_or("none")
        ))
    }
}

/// What [`RedisJournal::wait_read_after`] found.
#[derive(Debug)]
pub enum Tailed {
    /// Nothing after the seq within the wait.
    Nothing,
    /// Entries from the seq after, without a gap.
    Entries {
        /// The entries, in order.
        entries: Vec<Entry>,
        /// The read came back full: read again at once.
        more: bool,
    },
    /// What came does not follow on: read with the meta check ([`Journal::read_after`]).
    Reread,
}

/// One page of the journal with the meta read in the same transaction.
struct Page {
    last: u64,
    trimmed: u64,
    entries: Vec<Entry>,
}

/// Raw XRANGE reply: `[id, [field, value, ...]]` per entry.
type RawEntries = Vec<(Vec<u8>, Vec<Vec<u8>>)>;

impl RedisJournal {
    /// The error of an append the replicas did not confirm in time.
    fn unreplicated(&self, confirmed: u64) -> JournalError {
        unavailable(format!(
            "the append reached the primary but {confirmed} of {} replicas confirmed it within \
             {} ms: outcome unknown (a failover now could lose it)",
            self.config.wait_replicas,
            self.config.wait_timeout.as_millis()
        ))
    }

    /// `WAIT` alone (after a retried append that wrote part of its batch): `Unavailable`
    /// unless `wait_replicas` replicas confirm within `wait_timeout`. A no-op without
    /// `wait_replicas`.
    async fn wait_replicated(&mut self) -> Result<(), JournalError> {
        let wait = self.config.wait_replicas;
        if wait == 0 {
            return Ok(());
        }
        let wait_ms = self.config.wait_timeout.as_millis().max(1) as u64;
        let limit = self.config.op_timeout + self.config.wait_timeout;
        let mut pipe = keyed_pipe(&self.keys.journal);
        pipe.cmd("WAIT").arg(wait).arg(wait_ms);
        let (confirmed,): (u64,) = self
            .run("wait", limit, |mut c| async move {
                pipe.query_async(&mut c).await
            })
            .await?;
        if confirmed < u64::from(wait) {
            return Err(self.unreplicated(confirmed));
        }
        Ok(())
    }
}

/// What the append script did.
enum Appended {
    Written,
    /// The batch starts at or below the stored last seq (nothing was written).
    Overlap {
        last: u64,
    },
}

impl RedisJournal {
    /// Reads the page `(after, after + limit]` and the journal's last seq and trim point in one
    /// `MULTI/EXEC` round trip (consistent without passing entries through Lua, which cost
    /// ~10x the XRANGE itself): the stream entries with ids in the page, and the first one
    /// after it, whose batch may hold the page's last entries.
    async fn read_page(&mut self, after: u64, limit: usize) -> Result<Page, JournalError> {
        let end = after.saturating_add(limit as u64);
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("EVAL")
            .arg(READ_META.as_str())
            .arg(2)
            .arg(&self.keys.journal)
            .arg(&self.keys.meta)
            .cmd("XRANGE")
            .arg(&self.keys.journal)
            .arg(format!("{}-0", after.saturating_add(1)))
            .arg(format!("{end}-0"))
            .cmd("XRANGE")
            .arg(&self.keys.journal)
            .arg(format!("{}-0", end.saturating_add(1)))
            .arg("+")
            .arg("COUNT")
            .arg(1);
        let op_timeout = self.config.op_timeout;
        let ((last, trimmed), within, next): ((u64, u64), RawEntries, RawEntries) = self
            .run("read", op_timeout, |mut c| async move {
                pipe.query_async(&mut c).await
            })
            .await?;
        if after < trimmed {
            return Ok(Page {
                last,
                trimmed,
                entries: Vec::new(),
            });
        }
        let mut entries = Vec::with_capacity(limit.min(4096));
        for (id, fields) in within.into_iter().chain(next) {
            decode_stream_item(&id, fields, after, end, &mut entries)?;
        }
        Ok(Page {
            last,
            trimmed,
            entries,
        })
    }

    /// Runs the append script once for a contiguous, non-empty batch.
    async fn append_once(&mut self, batch: &[Entry]) -> Result<Appended, JournalError> {
        let (Some(first), Some(last)) = (batch.first(), batch.last()) else {
            return Ok(Appended::Written);
        };
        let mut inv = APPEND.key(&self.keys.journal);
        inv.key(&self.keys.leader)
            .arg(first.seq)
            .arg(format!("{}-0", last.seq))
            .arg(encode_batch(batch))
            .arg(self.fence.as_deref().unwrap_or(""));
        let limit = self.config.op_timeout;
        let wait = self.config.wait_replicas;
        let reply: Vec<u64> = if wait == 0 {
            self.run("append", limit, |mut c| async move {
                inv.invoke_async(&mut c).await
            })
            .await?
        } else {
            // WAIT in the same round trip: it answers once `wait` replicas have everything
            // this connection wrote, the batch included, or at the timeout.
            let wait_ms = self.config.wait_timeout.as_millis().max(1) as u64;
            let limit = limit + self.config.wait_timeout;
            let (reply, confirmed): (Vec<u64>, u64) = self
                .run("append+wait", limit, |mut c| async move {
                    let mut pipe = redis::pipe();
                    pipe.invoke_script(&inv).cmd("WAIT").arg(wait).arg(wait_ms);
                    match pipe.query_async(&mut c).await {
                        Err(e)
                            if e.kind()
                                == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                        {
                            // The script ran nowhere (nothing written): load it, send again.
                            inv.load_async(&mut c).await?;
                            pipe.query_async(&mut c).await
                        }
                        other => other,
                    }
                })
                .await?;
            if reply.first() == Some(&0) && confirmed < u64::from(wait) {
                return Err(self.unreplicated(confirmed));
            }
            reply
        };
        match reply.as_slice() {
            [0, _, _] => Ok(Appended::Written),
            [1, last, found] => Err(JournalError::Conflict {
                expected: last + 1,
                found: *found,
            }),
            [3, last, _] => Ok(Appended::Overlap { last: *last }),
            [4, _, _] => Err(self.fenced()),
            other => Err(JournalError::Corrupt(format!(
                "unexpected append script reply {other:?}"
            ))),
        }
    }

    /// A batch that overlaps stored entries (a retry after an unknown outcome, or a stale
    /// writer): the overlapping entries must equal the stored ones exactly (seq, timestamp,
    /// payload); then only the rest is appended. Otherwise `Conflict` at the first difference,
    /// and nothing is written.
    async fn append_overlapping(
        &mut self,
        batch: &[Entry],
        stored_last: u64,
    ) -> Result<(), JournalError> {
        let (Some(first), Some(batch_last)) = (batch.first(), batch.last()) else {
            return Ok(());
        };
        let first = first.seq;
        let conflict = |found| JournalError::Conflict {
            expected: stored_last + 1,
            found,
        };
        let upto = stored_last.min(batch_last.seq);
        let mut after = first - 1;
        while after < upto {
            let page = match self.read_after(after, MAX_READ_ENTRIES).await {
                Ok(page) => page,
                Err(JournalError::Trimmed { .. }) => return Err(conflict(first)),
                Err(e) => return Err(e),
            };
            if page.is_empty() {
                return Err(JournalError::Corrupt(format!(
                    "entries {}..={stored_last} are missing (last seq is {stored_last})",
                    after + 1
                )));
            }
            for stored in page {
                if stored.seq > upto {
                    break;
                }
                if batch[(stored.seq - first) as usize] != stored {
                    return Err(conflict(stored.seq));
                }
                after = stored.seq;
            }
        }
        let rest = &batch[(upto + 1 - first) as usize..];
        tracing::info!(
            first,
            already_present = upto + 1 - first,
            "journal append overlapped stored entries (retry); skipped them"
        );
        match self.append_once(rest).await? {
            Appended::Written => Ok(()),
            Appended::Overlap { last } => Err(JournalError::Conflict {
                expected: last + 1,
                found: rest.first().map_or(first, |e| e.seq),
            }),
        }
    }
}

/// Decodes the entries with seq in `(after, end]` of one XRANGE item into `out`: a batch
/// (field `batch`, [`split_batch`]; only the entries wanted are checksum-verified) or a
/// single entry of an older gateway (`rec`, [`decode_entry`]; or `ts`, `crc`, `payload`,
/// format 1).
fn decode_stream_item(
    id: &[u8],
    fields: Vec<Vec<u8>>,
    after: u64,
    end: u64,
    out: &mut Vec<Entry>,
) -> Result<(), JournalError> {
    let bad = |what: String| JournalError::Corrupt(what);
    let seq = parse_stream_id(id).ok_or_else(|| {
        bad(format!(
            "stream id {:?} is not <seq>-0",
            String::from_utf8_lossy(id)
        ))
    })?;
    let mut rec = None;
    let (mut ts, mut crc, mut payload) = (None, None, None);
    for pair in fields.chunks(2) {
        let [name, value] = pair else {
            return Err(bad(format!("entry {seq}: odd field list")));
        };
        match name.as_slice() {
            b"batch" => {
                for (s, rec) in split_batch(seq, value)? {
                    if s > after && s <= end {
                        out.push(decode_entry(s, rec)?);
                    }
                }
                return Ok(());
            }
            b"rec" => rec = Some(value),
            b"ts" => ts = parse_ascii::<i64>(value),
            b"crc" => crc = parse_ascii::<u32>(value),
            b"payload" => payload = Some(value),
            _ => {}
        }
    }
    if seq <= after || seq > end {
        return Ok(());
    }
    if let Some(rec) = rec {
        out.push(decode_entry(seq, rec)?);
        return Ok(());
    }
    let (Some(timestamp_ms), Some(crc), Some(payload)) = (ts, crc, payload) else {
        return Err(bad(format!(
            "entry {seq}: missing or undecodable batch, rec (or ts/crc/payload) field"
        )));
    };
    check_entry_crc(seq, timestamp_ms, payload, crc)?;
    out.push(Entry {
        seq,
        timestamp_ms,
        payload: payload.clone(),
    });
    Ok(())
}

/// `<seq>-0` → seq.
fn parse_stream_id(id: &[u8]) -> Option<u64> {
    let digits = id.strip_suffix(b"-0")?;
    if digits.is_empty() || digits.len() > 20 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

impl Journal for RedisJournal {
    fn fence(&mut self, token: Option<String>) {
        self.set_fencing_token(token);
    }

    async fn append(&mut self, batch: &[Entry]) -> Result<(), JournalError> {
        if validate_batch(batch)?.is_none() {
            return Ok(());
        }
        match self.append_once(batch).await? {
            Appended::Written => Ok(()),
            Appended::Overlap { last } => {
                self.append_overlapping(batch, last).await?;
                self.wait_replicated().await
            }
        }
    }

    async fn read_after(&mut self, after: u64, limit: usize) -> Result<Vec<Entry>, JournalError> {
        let limit = limit.min(MAX_READ_ENTRIES);
        if limit == 0 {
            return Ok(Vec::new());
        }
        let page = self.read_page(after, limit).await?;
        if after < page.trimmed {
            return Err(JournalError::Trimmed {
                after,
                trimmed_upto: page.trimmed,
            });
        }
        verify_page(after, limit, page.last, page.trimmed, &page.entries)?;
        Ok(page.entries)
    }

    async fn last_seq(&mut self) -> Result<u64, JournalError> {
        let inv = LAST.key(&self.keys.journal);
        let limit = self.config.op_timeout;
        self.run("last_seq", limit, |mut c| async move {
            inv.invoke_async(&mut c).await
        })
        .await
    }

    async fn save_snapshot(&mut self, s: &SnapshotRecord) -> Result<(), JournalError> {
        let mut inv = SAVE_SNAPSHOT.key(&self.keys.journal);
        inv.key(&self.keys.snapshot)
            .key(&self.keys.meta)
            .key(&self.keys.leader)
            .arg(s.seq)
            .arg(s.format_version)
            .arg(&s.state_hash[..])
            .arg(s.bytes.as_slice())
            .arg(snapshot_crc(s))
            .arg(self.fence.as_deref().unwrap_or(""));
        let limit = self.config.snapshot_timeout;
        let reply: Vec<u64> = self
            .run("save_snapshot", limit, |mut c| async move {
                inv.invoke_async(&mut c).await
            })
            .await?;
        match reply.as_slice() {
            [0] => {
                tracing::info!(seq = s.seq, bytes = s.bytes.len(), "journal snapshot saved");
                Ok(())
            }
            [1 | 2, expected] => Err(JournalError::Conflict {
                expected: *expected,
                found: s.seq,
            }),
            [4, _] => Err(self.fenced()),
            other => Err(JournalError::Corrupt(format!(
                "unexpected snapshot script reply {other:?}"
            ))),
        }
    }

    async fn load_snapshot(&mut self) -> Result<Option<SnapshotRecord>, JournalError> {
        let key = self.keys.snapshot.clone();
        let limit = self.config.snapshot_timeout;
        let fields: Vec<Option<Vec<u8>>> = self
            .run("load_snapshot", limit, |mut c| async move {
                redis::cmd("HMGET")
                    .arg(key)
                    .arg(&["seq", "format_version", "state_hash", "bytes", "crc"])
                    .query_async(&mut c)
                    .await
            })
            .await?;
        decode_snapshot_fields(fields)
    }

    async fn trim(&mut self, upto: u64) -> Result<(), JournalError> {
        let mut inv = TRIM.key(&self.keys.journal);
        inv.key(&self.keys.snapshot)
            .key(&self.keys.meta)
            .arg(upto)
            .arg(format!("{}-0", upto.saturating_add(1)));
        let limit = self.config.op_timeout;
        let reply: Vec<u64> = self
            .run("trim", limit, |mut c| async move {
                inv.invoke_async(&mut c).await
            })
            .await?;
        match reply.as_slice() {
            [0, removed] => {
                tracing::info!(upto, removed, "journal trimmed");
                Ok(())
            }
            [1, snap] => Err(JournalError::Conflict {
                expected: *snap,
                found: upto,
            }),
            other => Err(JournalError::Corrupt(format!(
                "unexpected trim script reply {other:?}"
            ))),
        }
    }

    async fn ping(&mut self) -> Result<(), JournalError> {
        let mut pipe = keyed_pipe(&self.keys.journal);
        pipe.cmd("PING");
        let _: (String,) = self
            .run("ping", PING_TIMEOUT, |mut c| async move {
                pipe.query_async(&mut c).await
            })
            .await?;
        Ok(())
    }
}

/// `CONFIG GET appendonly` / `appendfsync` of the server holding `key` (the journal's
/// master on a cluster); `None` for what the server refuses to tell (a renamed or forbidden
/// `CONFIG`).
///
/// # Errors
/// A failure that says nothing about the settings (no connection, a timeout, a cluster in
/// failover): the connect fails as `Unavailable` and is tried again, instead of reading as
/// "AOF unverifiable" (fatal with `require_aof`).
async fn read_aof(c: &mut RedisConn, key: &str) -> Result<AofStatus, RedisError> {
    async fn get(c: &mut RedisConn, key: &str, name: &str) -> Result<Option<String>, RedisError> {
        let mut pipe = keyed_pipe(key);
        pipe.cmd("CONFIG").arg("GET").arg(name);
        let pair: Result<(Vec<String>,), _> = pipe.query_async(c).await;
        match pair.map(|(v,)| v) {
            Ok(v) if v.len() == 2 => Ok(v.into_iter().nth(1)),
            Ok(v) => {
                tracing::warn!(name, reply = ?v, "unexpected CONFIG GET reply");
                Ok(None)
            }
            // No connection, or a server that cannot answer yet (`LOADING` its AOF after a
            // restart, `BUSY`, a failover): not an answer about the settings (issue 25).
            Err(e) if classify("config get", &e).1 || is_transient(&e) => Err(e),
            Err(e) => {
                tracing::warn!(name, error = %e, "CONFIG GET failed");
                Ok(None)
            }
        }
    }
    let appendonly = get(c, key, "appendonly").await?.map(|v| v == "yes");
    let appendfsync = get(c, key, "appendfsync").await?;
    Ok(AofStatus {
        appendonly,
        appendfsync,
    })
}

/// Decodes the HMGET of the snapshot hash (`None` when there is no snapshot).
fn decode_snapshot_fields(
    fields: Vec<Option<Vec<u8>>>,
) -> Result<Option<SnapshotRecord>, JournalError> {
    if fields.iter().all(Option::is_none) {
        return Ok(None);
    }
    let bad = |what: &str| JournalError::Corrupt(format!("snapshot: missing or bad {what}"));
    let mut it = fields.into_iter();
    let mut next = || it.next().flatten();
    let seq = next()
        .and_then(|v| parse_ascii::<u64>(&v))
        .ok_or_else(|| bad("seq"))?;
    let format_version = next()
        .and_then(|v| parse_ascii::<u16>(&v))
        .ok_or_else(|| bad("format_version"))?;
    let state_hash: [u8; 32] = next()
        .and_then(|v| <[u8; 32]>::try_from(v.as_slice()).ok())
        .ok_or_else(|| bad("state_hash"))?;
    let bytes = next().ok_or_else(|| bad("bytes"))?;
    let crc = next()
        .and_then(|v| parse_ascii::<u32>(&v))
        .ok_or_else(|| bad("crc"))?;
    let s = SnapshotRecord {
        seq,
        format_version,
        state_hash,
        bytes,
    };
    check_snapshot_crc(&s, crc)?;
    Ok(Some(s))
}

fn parse_ascii<T: std::str::FromStr>(v: &[u8]) -> Option<T> {
    std::str::from_utf8(v).ok()?.parse().ok()
}

fn unavailable(msg: String) -> JournalError {
    JournalError::Unavailable(msg)
}

/// Maps a Redis error; the flag says whether the connection must be dropped.
fn classify(op: &str, e: &RedisError) -> (JournalError, bool) {
    // redis-rs shows a server error inside a pipeline by its kind (`BusyLoading`), not the
    // server's code (`LOADING`): name the code, so operators and logs read one word for it.
    let text = e.to_string();
    let msg = match e.code() {
        Some(code) if !text.contains(code) => format!("redis {op}: {code}: {text}"),
        _ => format!("redis {op}: {text}"),
    };
    if e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_unrecoverable_error()
        || is_failover(e, &msg)
    {
        return (JournalError::Unavailable(msg), true);
    }
    if let Some(err) = e.code().and_then(|code| code_error(code, &msg)) {
        return (err, false);
    }
    if is_transient(e) {
        return (JournalError::Unavailable(msg), false);
    }
    match e.kind() {
        redis::ErrorKind::Parse | redis::ErrorKind::UnexpectedReturnType => {
            (JournalError::Corrupt(msg), false)
        }
        redis::ErrorKind::AuthenticationFailed | redis::ErrorKind::InvalidClientConfig => {
            (JournalError::Config(msg), false)
        }
        // A failed command inside a pipeline arrives wrapped (no code of its own): a key of
        // the wrong type is damage, not an outage.
        _ if msg.contains("WRONGTYPE") => (JournalError::Corrupt(msg), false),
        _ => {
            tracing::error!(error = %msg, "unexpected redis error");
            (JournalError::Unavailable(msg), false)
        }
    }
}

/// A Redis Cluster in failover: a redirect the client did not follow (one inside `MULTI`/
/// `EXEC` arrives wrapped in "Transaction aborted"), the cluster down, the slot's master
/// down. The connection is dropped, so the next call builds a new one with a fresh slot map
/// (docs/journal.md, "Redis Cluster").
fn is_failover(e: &RedisError, msg: &str) -> bool {
    e.is_cluster_error()
        || e.code() == Some("MASTERDOWN")
        || [
            "Moved:",
            "Ask:",
            "ClusterDown",
            "TryAgain",
            "MasterDown",
            "MOVED ",
            "CLUSTERDOWN",
        ]
        .iter()
        .any(|m| msg.contains(m))
}

/// Redis error codes that say the server cannot serve now and will (loading its dataset,
/// busy with a script, a failover, out of memory, no replicas): `Unavailable`, retried.
const TRANSIENT_CODES: [&str; 9] = [
    "LOADING",
    "BUSY",
    "MASTERDOWN",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "READONLY",
    "OOM",
    "MISCONF",
    "NOREPLICAS",
];

/// Whether `e` carries one of [`TRANSIENT_CODES`], as its code or, for an error inside a
/// pipeline (which arrives wrapped, without a code of its own), at the start of a word of its
/// text.
fn is_transient(e: &RedisError) -> bool {
    if e.code().is_some_and(|c| TRANSIENT_CODES.contains(&c)) {
        return true;
    }
    let text = e.to_string();
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .any(|word| TRANSIENT_CODES.contains(&word))
}

/// The error for a Redis error code the journal knows.
fn code_error(code: &str, msg: &str) -> Option<JournalError> {
    let msg = msg.to_string();
    match code {
        c if TRANSIENT_CODES.contains(&c) => Some(JournalError::Unavailable(msg)),
        "JCORRUPT" | "WRONGTYPE" => Some(JournalError::Corrupt(msg)),
        "NOPERM" | "NOAUTH" | "WRONGPASS" => Some(JournalError::Config(msg)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::ErrorKind;

    /// Issue 25: a server loading its AOF answers `LOADING`, alone or inside a pipeline
    /// (wrapped, without a code of its own): transient, so the AOF check retries instead of
    /// reading it as "CONFIG GET refused" (fatal with `require_aof`). An answer that is about
    /// the settings (a renamed `CONFIG`) is not.
    #[test]
    fn loading_is_transient_in_a_pipeline_too() {
        let loading = RedisError::from((
            ErrorKind::Extension,
            "Pipeline failure",
            "LOADING Redis is loading the dataset in memory".to_string(),
        ));
        assert!(is_transient(&loading));
        assert!(matches!(
            classify("config get", &loading).0,
            JournalError::Unavailable(_)
        ));
        // Shown by its kind (`BusyLoading`, as redis-rs shows one inside a pipeline): the
        // message still names the server's code.
        let by_kind = RedisError::from((
            ErrorKind::Server(redis::ServerErrorKind::BusyLoading),
            "Pipeline failure",
        ));
        assert!(!by_kind.to_string().contains("LOADING"), "{by_kind}");
        match classify("connect", &by_kind).0 {
            JournalError::Unavailable(msg) => assert!(msg.contains("LOADING"), "{msg}"),
            other => panic!("{other:?}"),
        }
        for code in TRANSIENT_CODES {
            let e =
                RedisError::from((ErrorKind::Extension, "wrapped", format!("{code} try later")));
            assert!(is_transient(&e), "{code}");
        }
        let renamed = RedisError::from((
            ErrorKind::Extension,
            "An error was signalled by the server",
            "ERR unknown command 'CONFIG', with args beginning with: 'GET' 'appendonly'"
                .to_string(),
        ));
        assert!(!is_transient(&renamed));
        let loader = RedisError::from((
            ErrorKind::Extension,
            "An error was signalled by the server",
            "ERR unknown key LOADINGS".to_string(),
        ));
        assert!(!is_transient(&loader), "a word, not a substring");
    }
}
