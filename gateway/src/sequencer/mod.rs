//! The sequencer: the one task that owns the market, makes commands durable and applies them.
//!
//! Callers send a [`Request`] (an [`Op`] and a reply channel) through a bounded channel. The
//! task takes everything already queued as one batch (group commit, at most
//! [`MAX_BATCH`]), gives each command the next sequence number and the batch a timestamp from
//! the injected [`Clock`] (never below the previous one), appends the batch to the journal,
//! and only after the journal confirms does it apply the commands, reply and publish them on
//! the broadcast channel, in sequence order. If the append fails, every command of the batch
//! is answered [`SequencerError::Unavailable`] and nothing is applied then. When the failure
//! left the outcome unknown (a timeout: the write may still land), the batch is kept *in
//! doubt* and resolved before anything else is appended, by reading the journal's last
//! sequence number: if the batch is there it is applied and published (the journal is the
//! truth, and replay would apply it), otherwise its sequence numbers are reused. Callers told
//! `Unavailable` retry with the same idempotency key or client order id, so nothing is lost
//! or doubled.
//!
//! A sequencer may start as a **follower** ([`follow`], a Redis journal shared by several
//! processes, issue 18): it applies the journal as the leader writes it, answers reads from
//! that replica, and forwards commands to the leader; when this process wins the lease it
//! catches up to the journal's end and leads from there, with the same handle (no replay
//! from scratch).
//!
//! Snapshots of the market are taken every [`SnapshotPolicy::every_commands`] commands or
//! [`SnapshotPolicy::every_ms`] and at shutdown; recovery loads the newest snapshot, replays
//! the journal after it and checks the state hash.

pub mod follow;

use crate::journal::{Entry, Journal, JournalError, SnapshotRecord};
use crate::market::{Market, MarketConfig, Op, Outcome};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::{broadcast, mpsc, oneshot};

/// Most commands in one group commit.
pub const MAX_BATCH: usize = 1024;
/// Capacity of the request channel (callers wait when it is full: backpressure).
pub const REQUEST_QUEUE: usize = 8192;
/// Capacity of the broadcast channel of committed commands.
pub const PUBLISH_QUEUE: usize = 65_536;
/// Version of the journal record encoding.
pub const RECORD_VERSION: u8 = 1;
/// Entries read per page during replay.
const REPLAY_PAGE: usize = 10_000;
/// How often a leader retries a batch whose append outcome is unknown while no new command
/// arrives, ms: a command answered 503 "outcome unknown" is applied (or known absent) within
/// this long after the journal answers again, without waiting for a later command.
pub const IN_DOUBT_RETRY_MS: u64 = 250;

/// Where time comes from (injected so tests and replay control it).
pub trait Clock: Send + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    }
}

/// One command and where to send its result.
pub struct Request {
    /// The operation.
    pub op: Op,
    /// Receives the committed command, or why it was not.
    pub reply: oneshot::Sender<Result<Arc<Committed>, SequencerError>>,
}

/// A read of the live state, answered in sequence order (after every command queued before
/// it is committed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct StateInfo {
    /// Last committed sequence number.
    pub last_seq: u64,
    /// [`Market::state_hash`] after it.
    pub state_hash: [u8; 32],
    /// Whether the journal answered a ping just now.
    pub journal_ok: bool,
}

/// A read of the market, run on the sequencer task between batches with the last committed
/// sequence number.
type ReadFn = Box<dyn FnOnce(&Market, u64) + Send>;

/// What goes through the sequencer's channel.
enum Msg {
    Op(Request),
    /// A command another process forwarded (`/internal/forward`): sequenced when this one
    /// leads, refused with [`SequencerError::NotLeader`] while it follows (never forwarded
    /// again: no loops between processes).
    Forwarded(Request),
    Inspect(oneshot::Sender<StateInfo>),
    Read(ReadFn),
}

/// A durable, applied command.
#[derive(Debug)]
pub struct Committed {
    /// Sequence number (contiguous from 1).
    pub seq: u64,
    /// Time assigned by the sequencer, ms since epoch.
    pub timestamp_ms: i64,
    /// The operation.
    pub op: Op,
    /// What applying it did.
    pub outcome: Outcome,
}

/// Why a command was not committed.
#[derive(Clone, Debug, thiserror::Error)]
pub enum SequencerError {
    /// The journal is unreachable; the command was not applied now and may or may not become
    /// durable (retry with the same idempotency key / client order id). HTTP 503.
    #[error("journal unavailable, outcome unknown (retry with the same idempotency key): {0}")]
    Unavailable(String),
    /// The journal refused the batch for good (another writer holds these sequence numbers,
    /// or the batch is invalid); nothing was applied. HTTP 503.
    #[error("journal refused the command: {0}")]
    Refused(String),
    /// The sequencer has stopped.
    #[error("sequencer stopped")]
    Stopped,
    /// No leader took the command: this process follows the journal and was sent a forwarded
    /// command, or lost the lease (fenced), or no process leads right now; nothing was
    /// applied (retry). HTTP 503 `not_leader`.
    #[error("no leader took the command, nothing was applied (retry): {0}")]
    NotLeader(String),
    /// The operation could not be encoded for the journal — a bug, never bad input; it was
    /// refused before the append, so nothing was journaled or applied. HTTP 500.
    #[error("operation could not be encoded for the journal (a bug; nothing was applied): {0}")]
    Unencodable(String),
}

/// Why recovery failed (startup stops with this error; never a silent partial state).
#[derive(Debug, thiserror::Error)]
pub enum RecoveryError {
    /// The journal could not be read or is corrupt or gapped.
    #[error("journal: {0}")]
    Journal(#[from] JournalError),
    /// A record or snapshot did not decode.
    #[error("undecodable record at seq {seq}: {message}")]
    Decode {
        /// Sequence number.
        seq: u64,
        /// Decoder message.
        message: String,
    },
    /// The restored state's hash differs from the one recorded with the snapshot.
    #[error("state hash mismatch after restoring snapshot at seq {0}")]
    HashMismatch(u64),
    /// The market could not be built.
    #[error("market: {0}")]
    Market(String),
}

/// When to snapshot.
#[derive(Clone, Copy, Debug)]
pub struct SnapshotPolicy {
    /// After this many commands since the last snapshot.
    pub every_commands: u64,
    /// Or after this much time since the last snapshot, ms.
    pub every_ms: i64,
    /// At each snapshot, trim the journal up to the snapshot before it: the last snapshot
    /// interval stays readable, so a follower up to that far behind (catching up after an
    /// outage) can go on instead of exiting on a trimmed journal. Off keeps the whole
    /// history (e.g. for audits).
    pub trim_journal: bool,
}

impl Default for SnapshotPolicy {
    fn default() -> Self {
        SnapshotPolicy {
            every_commands: 100_000,
            every_ms: 60_000,
            trim_journal: true,
        }
    }
}

#[derive(Deserialize)]
struct Record {
    v: u8,
    op: Op,
}

/// Encodes an operation as a journal payload (MessagePack, compact form: self-describing
/// enough for decimal amounts to round-trip exactly).
///
/// # Errors
/// The encoder's message; the sequencer then refuses the operation before the append (an
/// empty payload journaled and acknowledged would stop recovery at `decode`).
pub fn encode(op: &Op) -> Result<Vec<u8>, String> {
    // Same encoding as `Record`, borrowing the operation (no clone on the append path).
    #[derive(Serialize)]
    struct RecordRef<'a> {
        v: u8,
        op: &'a Op,
    }
    rmp_serde::to_vec(&RecordRef {
        v: RECORD_VERSION,
        op,
    })
    .map_err(|e| e.to_string())
}

/// Decodes a journal payload.
///
/// # Errors
/// A message when the bytes are not a record of [`RECORD_VERSION`].
pub fn decode(bytes: &[u8]) -> Result<Op, String> {
    let r: Record = rmp_serde::from_slice(bytes).map_err(|e| e.to_string())?;
    if r.v != RECORD_VERSION {
        return Err(format!(
            "record version {} (expected {RECORD_VERSION})",
            r.v
        ));
    }
    Ok(r.op)
}

/// Handle for sending commands to the sequencer.
#[derive(Clone)]
pub struct SequencerHandle {
    tx: mpsc::Sender<Msg>,
    events: broadcast::Sender<Arc<Committed>>,
    leading: Arc<AtomicBool>,
}

impl SequencerHandle {
    /// Submits an operation and waits until it is durable and applied.
    ///
    /// # Errors
    /// [`SequencerError::Unavailable`] when the journal refused it, `Stopped` after shutdown.
    pub async fn submit(&self, op: Op) -> Result<Arc<Committed>, SequencerError> {
        self.send_op(op, Msg::Op).await
    }

    /// Sends `op` as the message `wrap` makes of it and waits for its answer.
    async fn send_op(
        &self,
        op: Op,
        wrap: fn(Request) -> Msg,
    ) -> Result<Arc<Committed>, SequencerError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(wrap(Request { op, reply }))
            .await
            .map_err(|_| SequencerError::Stopped)?;
        rx.await.map_err(|_| SequencerError::Stopped)?
    }

    /// [`SequencerHandle::submit`] of commands another process forwarded to this one
    /// (`/internal/forward`, the forwarding link): queued in the order given (a batch
    /// forwarded by one follower keeps its order in the journal), then awaited together; one
    /// answer per command, in order. Each is refused with [`SequencerError::NotLeader`]
    /// unless this process leads.
    ///
    /// # Errors
    /// Per command: as `submit`, and `NotLeader`.
    pub async fn submit_forwarded_all(
        &self,
        ops: Vec<Op>,
    ) -> Vec<Result<Arc<Committed>, SequencerError>> {
        let mut replies = Vec::with_capacity(ops.len());
        for op in ops {
            let (reply, rx) = oneshot::channel();
            let sent = self
                .tx
                .send(Msg::Forwarded(Request { op, reply }))
                .await
                .map_err(|_| SequencerError::Stopped);
            replies.push(sent.map(|()| rx));
        }
        let mut out = Vec::with_capacity(replies.len());
        for r in replies {
            out.push(match r {
                Ok(rx) => rx.await.unwrap_or(Err(SequencerError::Stopped)),
                Err(e) => Err(e),
            });
        }
        out
    }

    /// Whether this process sequences commands now (the leader; always with the embedded
    /// journal), rather than following the journal and forwarding them.
    pub fn is_leading(&self) -> bool {
        self.leading.load(Ordering::Acquire)
    }

    /// The last committed sequence number and state hash, after everything queued before, and
    /// whether the journal answers (for /readyz).
    ///
    /// # Errors
    /// `Stopped` after shutdown.
    pub async fn inspect(&self) -> Result<StateInfo, SequencerError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Msg::Inspect(reply))
            .await
            .map_err(|_| SequencerError::Stopped)?;
        rx.await.map_err(|_| SequencerError::Stopped)
    }

    /// Runs `f` on the market after every command queued before it is committed (read your
    /// writes), with the last committed sequence number. Keep `f` short: the market waits.
    ///
    /// # Errors
    /// `Stopped` after shutdown.
    pub async fn read<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Market, u64) -> R + Send + 'static,
    ) -> Result<R, SequencerError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Msg::Read(Box::new(move |m, seq| {
                let _ = reply.send(f(m, seq));
            })))
            .await
            .map_err(|_| SequencerError::Stopped)?;
        rx.await.map_err(|_| SequencerError::Stopped)
    }

    /// Subscribes to committed commands, in sequence order.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Committed>> {
        self.events.subscribe()
    }

    /// Commands waiting in the request queue.
    pub fn queue_depth(&self) -> usize {
        self.tx.max_capacity() - self.tx.capacity()
    }
}

/// The sequencer task's state.
pub struct Sequencer<J: Journal, C: Clock> {
    market: Market,
    journal: J,
    clock: C,
    rx: mpsc::Receiver<Msg>,
    events: broadcast::Sender<Arc<Committed>>,
    last_seq: u64,
    last_ts: i64,
    policy: SnapshotPolicy,
    snap_seq: u64,
    snap_ts: i64,
    /// A batch whose append outcome is unknown, with its operations.
    in_doubt: Option<Vec<(Entry, Op)>>,
    stats: BatchStats,
    /// A command has been journaled since recovery: the time since the last one before it was
    /// a restart (an outage of the exchange), however short, and was resumed.
    resumed: bool,
    /// Set while this sequencer leads (shared with the handles).
    leading: Arc<AtomicBool>,
    /// Follow the journal first ([`follow`]); `None`: lead from the start.
    follow: Option<follow::Follow>,
    /// The journal fenced an append: another process leads, this one steps down.
    fenced: bool,
    /// Forwarded commands waiting for this replica to apply their seq (a process that has
    /// followed: [`follow::Waiters`]); `None` for a process that only ever led.
    waiters: Option<Arc<follow::Waiters>>,
}

/// Group-commit counters (for metrics and the benchmark).
#[derive(Clone, Copy, Debug, Default)]
pub struct BatchStats {
    /// Batches appended (or attempted).
    pub batches: u64,
    /// Commands in them.
    pub commands: u64,
}

/// Encodes the market for a snapshot record.
fn snapshot_record(market: &Market, seq: u64) -> SnapshotRecord {
    SnapshotRecord {
        seq,
        format_version: crate::market::SNAPSHOT_VERSION,
        state_hash: market.state_hash(),
        bytes: market.snapshot(),
    }
}

impl SequencerError {
    /// The error's own text, without the prefix its `Display` adds (a forwarded error is
    /// prefixed once, by the process that answers the client).
    pub fn detail(&self) -> String {
        match self {
            SequencerError::Unavailable(m)
            | SequencerError::Refused(m)
            | SequencerError::NotLeader(m)
            | SequencerError::Unencodable(m) => m.clone(),
            SequencerError::Stopped => "the sequencer stopped".into(),
        }
    }
}

impl<J: Journal + 'static, C: Clock> Sequencer<J, C> {
    /// Recovers the market from `journal` (newest snapshot, then replay after it, checking the
    /// state hash) and returns the sequencer and its handle.
    ///
    /// # Errors
    /// [`RecoveryError`] for an unreadable, corrupt or gapped journal, an undecodable record,
    /// or a snapshot whose state hash does not match.
    pub async fn recover(
        journal: J,
        clock: C,
        config: MarketConfig,
        policy: SnapshotPolicy,
    ) -> Result<(Self, SequencerHandle), RecoveryError> {
        Self::recover_inner(journal, clock, config, policy, true).await
    }

    /// [`Sequencer::recover`] for a process that will follow a journal another process may be
    /// appending to: replay ends wherever the journal ended when it was read, and
    /// [`Sequencer::follow`] goes on from there (the journal's end is checked when this
    /// process takes the lead).
    ///
    /// # Errors
    /// As `recover`, less the end check.
    pub async fn recover_following(
        journal: J,
        clock: C,
        config: MarketConfig,
        policy: SnapshotPolicy,
    ) -> Result<(Self, SequencerHandle), RecoveryError> {
        Self::recover_inner(journal, clock, config, policy, false).await
    }

    /// Makes this sequencer follow the journal ([`follow`]) until it leads.
    pub fn follow(mut self, f: follow::Follow) -> Self {
        self.follow = Some(f);
        self.waiters.get_or_insert_with(Arc::default);
        self
    }

    async fn recover_inner(
        mut journal: J,
        clock: C,
        config: MarketConfig,
        policy: SnapshotPolicy,
        check_end: bool,
    ) -> Result<(Self, SequencerHandle), RecoveryError> {
        let (mut market, mut seq) = match journal.load_snapshot().await? {
            Some(s) => {
                let m = Market::restore(&s.bytes).map_err(|e| RecoveryError::Decode {
                    seq: s.seq,
                    message: e,
                })?;
                if m.state_hash() != s.state_hash {
                    return Err(RecoveryError::HashMismatch(s.seq));
                }
                (m, s.seq)
            }
            None => (
                Market::new(config).map_err(|e| RecoveryError::Market(e.to_string()))?,
                0,
            ),
        };
        let snap_seq = seq;
        let mut last_ts = market.last_timestamp_ms();
        // Replay is pipelined: a reader task reads and decodes the next pages while this one
        // applies the current page (two cores: IO + decoding beside the market).
        // Pages carry (seq, timestamp, op): the payload bytes are freed by the reader that
        // allocated them (a free on another thread costs more in the allocator).
        let (page_tx, mut page_rx) = mpsc::channel::<Result<Vec<(u64, i64, Op)>, RecoveryError>>(2);
        let reader = tokio::spawn(async move {
            let mut after = seq;
            loop {
                let page = match journal.read_after(after, REPLAY_PAGE).await {
                    Ok(p) => p,
                    Err(e) => {
                        let _ = page_tx.send(Err(e.into())).await;
                        break;
                    }
                };
                if page.is_empty() {
                    break;
                }
                let mut decoded = Vec::with_capacity(page.len());
                for e in page {
                    if e.seq != after + 1 {
                        let _ = page_tx
                            .send(Err(RecoveryError::Journal(JournalError::Corrupt(format!(
                                "gap: expected seq {} found {}",
                                after + 1,
                                e.seq
                            )))))
                            .await;
                        return journal;
                    }
                    after = e.seq;
                    match decode(&e.payload) {
                        Ok(op) => decoded.push((e.seq, e.timestamp_ms, op)),
                        Err(message) => {
                            let _ = page_tx
                                .send(Err(RecoveryError::Decode {
                                    seq: e.seq,
                                    message,
                                }))
                                .await;
                            return journal;
                        }
                    }
                }
                if page_tx.send(Ok(decoded)).await.is_err() {
                    break;
                }
            }
            journal
        });
        // The market applies on a blocking-pool thread of its own: as a task it would hold a
        // runtime worker for a whole page, and the reader (woken into that worker's LIFO
        // slot) would wait behind it instead of reading the next page on the other core.
        let applier = tokio::task::spawn_blocking(move || {
            while let Some(page) = page_rx.blocking_recv() {
                for (s, ts, op) in page? {
                    market.apply_entry(s, ts, &op);
                    seq = s;
                    last_ts = last_ts.max(ts);
                }
            }
            Ok::<_, RecoveryError>((market, seq, last_ts))
        });
        let (market, seq, last_ts) = applier
            .await
            .map_err(|e| RecoveryError::Market(format!("replay applier: {e}")))??;
        let mut journal = reader
            .await
            .map_err(|e| RecoveryError::Market(format!("replay reader: {e}")))?;
        // Replay must end exactly at the journal's last seq: a journal that lost entries
        // behind the snapshot (or was deleted) would otherwise start from a stale state.
        let durable = journal.last_seq().await?;
        if check_end && durable != seq {
            return Err(RecoveryError::Journal(JournalError::Corrupt(format!(
                "replay ended at seq {seq} but the journal's last seq is {durable}"
            ))));
        }
        let (tx, rx) = mpsc::channel(REQUEST_QUEUE);
        let (events, _) = broadcast::channel(PUBLISH_QUEUE);
        let leading = Arc::new(AtomicBool::new(false));
        let handle = SequencerHandle {
            tx,
            events: events.clone(),
            leading: leading.clone(),
        };
        let now = clock.now_ms();
        Ok((
            Sequencer {
                market,
                journal,
                clock,
                rx,
                events,
                last_seq: seq,
                last_ts,
                policy,
                snap_seq,
                snap_ts: now,
                in_doubt: None,
                stats: BatchStats::default(),
                resumed: false,
                leading,
                follow: None,
                fenced: false,
                waiters: None,
            },
            handle,
        ))
    }

    /// The market (for tests and read models before the task starts).
    pub fn market(&self) -> &Market {
        &self.market
    }

    /// Last applied sequence number.
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Runs until every handle is dropped, then takes a final snapshot and returns the market.
    /// A follower ([`Sequencer::follow`]) follows until it leads, then leads; one that stops
    /// while following returns its replica without a snapshot. A leader that loses its lease
    /// (its [`follow::Follow::lost`] fires, or the journal fences an append) steps down and
    /// follows again ([`follow::Follow::rejoin`]).
    pub async fn run(mut self) -> Market {
        loop {
            let mut lost = None;
            let mut rejoin = None;
            if let Some(f) = self.follow.take() {
                lost = f.lost.clone();
                rejoin = f.rejoin.clone();
                let (s, lead) = follow::run(self, f).await;
                self = s;
                if !lead {
                    return self.market;
                }
            }
            self.leading.store(true, Ordering::Release);
            let stepped_down = self.lead(lost).await;
            self.leading.store(false, Ordering::Release);
            if !stepped_down {
                break;
            }
            // The batch in doubt is settled by following: the tail reads whatever the journal
            // holds at those sequence numbers, this batch or the new leader's.
            self.in_doubt = None;
            let Some(rejoin) = rejoin else {
                tracing::error!("lost the lease and cannot follow: stopping");
                return self.market;
            };
            // Following again needs Redis (a new tail, a new campaign): retried until it
            // answers, so a process never stays up with its sequencer stopped.
            let mut f = loop {
                match rejoin(self.last_seq).await {
                    Ok(f) => break f,
                    Err(why) => {
                        tracing::error!(reason = %why, "lost the lease and cannot follow yet: retrying");
                        tokio::time::sleep(std::time::Duration::from_millis(follow::TAIL_RETRY_MS))
                            .await;
                    }
                }
            };
            tracing::warn!(
                last_seq = self.last_seq,
                "lost the lease: stepped down, following the journal again"
            );
            // The next step-down rejoins the same way (every lease lost, not only the first).
            f.rejoin.get_or_insert(rejoin);
            self.follow = Some(f);
        }
        self.maybe_snapshot(true).await;
        tracing::info!(
            batches = self.stats.batches,
            commands = self.stats.commands,
            "sequencer stopped"
        );
        self.market
    }

    /// The next message while leading; `None` when every handle is gone. `Err(())` when the
    /// lease is lost (`lost` fired). Settles an in-doubt batch at `retry_at` meanwhile.
    async fn next_msg(
        &mut self,
        lost: Option<&tokio::sync::Notify>,
        retry_at: &mut Option<tokio::time::Instant>,
    ) -> Result<Option<Msg>, ()> {
        let retry_every = std::time::Duration::from_millis(IN_DOUBT_RETRY_MS);
        loop {
            // An unknown outcome is settled within IN_DOUBT_RETRY_MS of the journal answering
            // again, command or not (its caller was told 503 and retries); a deadline, not a
            // timeout per message, so reads cannot starve it.
            let deadline = if self.in_doubt.is_some() {
                Some(*retry_at.get_or_insert_with(|| tokio::time::Instant::now() + retry_every))
            } else {
                *retry_at = None;
                None
            };
            let settle = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let lost_fired = async {
                match lost {
                    Some(n) => n.notified().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                m = self.rx.recv() => return Ok(m),
                _ = lost_fired => return Err(()),
                _ = settle => {
                    *retry_at = None;
                    if let Err(e) = self.resolve_in_doubt().await {
                        tracing::debug!(error = %e, "in-doubt batch still unsettled");
                    }
                }
            }
        }
    }

    /// Leads until every handle is dropped (`false`) or the lease is lost (`true`).
    async fn lead(&mut self, lost: Option<Arc<tokio::sync::Notify>>) -> bool {
        let mut batch: Vec<Request> = Vec::with_capacity(MAX_BATCH);
        let mut pending: Option<Msg> = None;
        let mut retry_at: Option<tokio::time::Instant> = None;
        self.fenced = false;
        loop {
            if self.fenced {
                return true;
            }
            let first = match pending.take() {
                Some(m) => m,
                None => match self.next_msg(lost.as_deref(), &mut retry_at).await {
                    Ok(Some(m)) => m,
                    Ok(None) => return false,
                    Err(()) => return true,
                },
            };
            match first {
                Msg::Inspect(reply) => {
                    let journal_ok = self.journal.ping().await.is_ok();
                    let _ = reply.send(StateInfo {
                        last_seq: self.last_seq,
                        state_hash: self.market.state_hash(),
                        journal_ok,
                    });
                    continue;
                }
                Msg::Read(f) => {
                    f(&self.market, self.last_seq);
                    continue;
                }
                Msg::Op(r) | Msg::Forwarded(r) => batch.push(r),
            }
            // Group commit: everything already queued, up to MAX_BATCH; a non-command message
            // waits until the batch before it is committed. One yield lets clients woken by
            // the previous batch's replies queue their next command into this one.
            let mut yielded = false;
            while batch.len() < MAX_BATCH && pending.is_none() {
                match self.rx.try_recv() {
                    Ok(Msg::Op(r) | Msg::Forwarded(r)) => batch.push(r),
                    Ok(other) => pending = Some(other),
                    Err(_) if !yielded => {
                        yielded = true;
                        tokio::task::yield_now().await;
                    }
                    Err(_) => break,
                }
            }
            self.stats.batches += 1;
            self.stats.commands += batch.len() as u64;
            self.commit(&mut batch).await;
            self.maybe_snapshot(false).await;
        }
    }

    /// Applies one durable entry and publishes it; replies when a caller waits.
    fn apply_durable(
        &mut self,
        entry: &Entry,
        op: Op,
        reply: Option<oneshot::Sender<Result<Arc<Committed>, SequencerError>>>,
    ) {
        let outcome = self.market.apply_entry(entry.seq, entry.timestamp_ms, &op);
        for problem in &outcome.ledger_errors {
            tracing::error!(seq = entry.seq, %problem, "ledger refused a lease fact");
            metrics::counter!("gpux_ledger_errors_total").increment(1);
        }
        let committed = Arc::new(Committed {
            seq: entry.seq,
            timestamp_ms: entry.timestamp_ms,
            op,
            outcome,
        });
        self.last_seq = entry.seq;
        self.last_ts = self.last_ts.max(entry.timestamp_ms);
        if let Some(w) = &self.waiters {
            w.applied(&committed);
        }
        let _ = self.events.send(committed.clone());
        if let Some(reply) = reply {
            let _ = reply.send(Ok(committed));
        }
    }

    /// Settles a batch whose append outcome was unknown (see the module docs).
    async fn resolve_in_doubt(&mut self) -> Result<(), JournalError> {
        let Some(batch) = self.in_doubt.take() else {
            return Ok(());
        };
        let (first, last) = match (batch.first(), batch.last()) {
            (Some(f), Some(l)) => (f.0.seq, l.0.seq),
            _ => return Ok(()),
        };
        let durable = match self.journal.last_seq().await {
            Ok(s) => s,
            Err(e) => {
                self.in_doubt = Some(batch);
                return Err(e);
            }
        };
        if durable >= last {
            tracing::warn!(
                first,
                last,
                "in-doubt batch was written after all; applying it"
            );
            for (entry, op) in batch {
                self.apply_durable(&entry, op, None);
            }
        } else if durable < first {
            tracing::warn!(
                first,
                last,
                "in-doubt batch was not written; its sequence numbers are reused"
            );
        } else {
            return Err(JournalError::Corrupt(format!(
                "batch {first}..={last} only partly written (journal at {durable})"
            )));
        }
        Ok(())
    }

    async fn commit(&mut self, batch: &mut Vec<Request>) {
        if let Err(e) = self.resolve_in_doubt().await {
            tracing::warn!(error = %e, "journal still unavailable; batch refused");
            for r in batch.drain(..) {
                let _ = r
                    .reply
                    .send(Err(SequencerError::Unavailable(e.to_string())));
            }
            return;
        }
        let ts = self.clock.now_ms().max(self.last_ts);
        // Nothing journaled for longer than the heartbeat timeout (a restart, or the journal
        // unreachable): the batch is led by `Resume`, so the outage does not fail every node.
        // It rides the batch as a request nobody waits for, so journaling, in-doubt handling
        // and applying treat it like any other command.
        // A restart is an outage however short: with lease delivery, a provisioning deadline
        // of a few seconds must not run out while the exchange was down (market-rules §11.9).
        let silent_ms = ts.saturating_sub(self.last_ts);
        let restarted = !self.resumed && silent_ms > 0;
        if self.last_seq > 0
            && (restarted || silent_ms > self.market.engine().config().heartbeat_timeout_ms)
        {
            tracing::warn!(
                silent_ms,
                restarted,
                "resuming after a restart or a silence longer than the heartbeat timeout (the outage does not count against heartbeats or delivery deadlines)"
            );
            batch.insert(
                0,
                Request {
                    op: Op::Engine(exchange::Command::Resume),
                    reply: oneshot::channel().0,
                },
            );
        }
        // An operation that does not encode is refused here, before anything is appended.
        let mut encoded = Vec::with_capacity(batch.len());
        for r in std::mem::take(batch) {
            match encode(&r.op) {
                Ok(payload) => encoded.push((r, payload)),
                Err(e) => {
                    tracing::error!(error = %e, op = r.op.name(), "operation does not encode: refused");
                    let _ = r.reply.send(Err(SequencerError::Unencodable(e)));
                }
            }
        }
        let mut entries: Vec<Entry> = Vec::with_capacity(encoded.len());
        for (i, (r, payload)) in encoded.into_iter().enumerate() {
            entries.push(Entry {
                seq: self.last_seq + 1 + i as u64,
                timestamp_ms: ts,
                payload,
            });
            batch.push(r);
        }
        if entries.is_empty() {
            return;
        }
        if let Err(e) = self.journal.append(&entries).await {
            let in_doubt = matches!(e, JournalError::Unavailable(_));
            // Another process leads: nothing was written; step down (run: follow again).
            self.fenced |= matches!(e, JournalError::Fenced(_));
            tracing::warn!(error = %e, commands = batch.len(), in_doubt, "journal append failed");
            let mut kept = Vec::new();
            for (r, entry) in batch.drain(..).zip(entries) {
                let err = if in_doubt {
                    SequencerError::Unavailable(e.to_string())
                } else if matches!(e, JournalError::Fenced(_)) {
                    // Another process leads now: not taken here, but a retry goes to it.
                    SequencerError::NotLeader(
                        "this process lost the lease while the command was in flight".into(),
                    )
                } else {
                    SequencerError::Refused(e.to_string())
                };
                let _ = r.reply.send(Err(err));
                kept.push((entry, r.op));
            }
            if in_doubt {
                self.in_doubt = Some(kept);
            }
            return;
        }
        self.resumed = true;
        for (r, entry) in batch.drain(..).zip(entries) {
            self.apply_durable(&entry, r.op, Some(r.reply));
        }
    }

    async fn maybe_snapshot(&mut self, force: bool) {
        let due = self.last_seq - self.snap_seq >= self.policy.every_commands
            || (self.last_seq > self.snap_seq
                && self.clock.now_ms() - self.snap_ts >= self.policy.every_ms);
        if !(due || (force && self.last_seq > self.snap_seq)) {
            return;
        }
        let record = snapshot_record(&self.market, self.last_seq);
        match self.journal.save_snapshot(&record).await {
            Ok(()) => {
                let previous = std::mem::replace(&mut self.snap_seq, self.last_seq);
                self.snap_ts = self.clock.now_ms();
                if self.policy.trim_journal
                    && previous > 0
                    && let Err(e) = self.journal.trim(previous).await
                {
                    tracing::warn!(error = %e, "journal trim failed");
                }
            }
            Err(e) => tracing::warn!(error = %e, "snapshot failed"),
        }
    }
}

/// Spawns the sequencer on the current tokio runtime.
pub fn spawn<J: Journal + 'static, C: Clock>(
    sequencer: Sequencer<J, C>,
) -> tokio::task::JoinHandle<Market> {
    tokio::spawn(sequencer.run())
}
