//! Following a journal another process leads (issue 18): the sequencer task of a standby
//! engine or an API process.
//!
//! - **Apply as the leader writes.** A tail task ([`tail`]) reads the journal after the
//!   replica's last sequence number, then waits on the stream (`XREAD BLOCK`, whose answer
//!   carries the new batches: [`RedisJournal::wait_read_after`]), and
//!   hands pages over in order; the follower decodes and applies each entry through the same
//!   path as the leader (`Market::apply` with the journaled timestamp) and publishes it on the
//!   same broadcast, so the feed, the key cache and the read models work unchanged. The market
//!   is deterministic: the replica's state hash after seq N is the leader's.
//! - **Reads** are answered from the replica at its last applied seq.
//! - **Commands** are forwarded to the leader ([`Forward`]); the reply waits until the replica
//!   has applied the command's seq ([`Waiters`]) and answers with the replica's own
//!   [`Committed`] (read your writes: a read after the acknowledgement, on this process, sees
//!   the command).
//! - **Leading.** When this process wins the lease ([`Follow::lead`] yields the fencing
//!   token), the tail stops, the follower reads the journal to its end itself (the old leader
//!   is fenced: nothing more can be appended), checks that end, and the task goes on as the
//!   leader with the same handle. Forwarded commands still waiting are answered when their seq
//!   is applied, as follower or as leader.
//!
//! Invariants: entries are applied contiguously (a gap stops the follower: `on_fatal`); a
//! follower never appends; a command is forwarded at most once by this process (a
//! forwarded command reaching a follower is refused `NotLeader`, never forwarded again).

use super::{Clock, Committed, Msg, REPLAY_PAGE, Sequencer, SequencerError, decode};
use crate::journal::redis::Tailed;
use crate::journal::{Entry, Journal, JournalError, RedisJournal};
use futures_util::future::BoxFuture;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// How long the tail waits on the stream for a new entry before asking again, ms (a wait, not
/// a poll: a new batch wakes it at once).
pub const TAIL_BLOCK_MS: u64 = 1_000;

/// How long the tail waits before retrying after Redis did not answer, ms.
pub const TAIL_RETRY_MS: u64 = 200;

/// Most stream entries (each a leader's batch) one wait of the tail brings.
pub const TAIL_BATCHES: usize = 64;

/// Pages the tail reads ahead of the follower.
const TAIL_QUEUE: usize = 4;

/// Sends one encoded command ([`super::encode`]) to the leader and answers the sequence
/// number it was journaled at. Errors say whether the outcome is unknown
/// ([`SequencerError::Unavailable`]) or the command was not taken ([`SequencerError::Refused`],
/// [`SequencerError::NotLeader`]).
pub type Forward =
    Arc<dyn Fn(Vec<u8>) -> BoxFuture<'static, Result<u64, SequencerError>> + Send + Sync>;

/// What a follower needs.
pub struct Follow {
    /// Pages of the journal after the recovered state, in order ([`tail`]).
    pub pages: Pages,
    /// Whether the tail reads the journal now (for `/readyz`).
    pub healthy: Arc<AtomicBool>,
    /// Forwards commands to the leader.
    pub forward: Forward,
    /// Yields the fencing token when this process wins the lease; `None` for a process that
    /// never leads (role `api`).
    pub lead: Option<oneshot::Receiver<String>>,
    /// Called once when the follower cannot go on (a gap, a trimmed journal it fell behind,
    /// an undecodable entry): the binary exits so that a restart recovers from the snapshot.
    pub on_fatal: Box<dyn FnOnce(String) + Send>,
    /// Fires when this process, having led, loses the lease (the renewal found it gone):
    /// the leader steps down. `None`: never leads, or a loss is handled elsewhere.
    pub lost: Option<Arc<tokio::sync::Notify>>,
    /// Builds the next [`Follow`] after stepping down, from the replica's last seq (a new
    /// tail, a new campaign). `None`: a leader that loses the lease stops.
    pub rejoin: Option<Rejoin>,
}

/// Builds a [`Follow`] that tails the journal after the given seq ([`Follow::rejoin`]).
pub type Rejoin = Arc<dyn Fn(u64) -> BoxFuture<'static, Result<Follow, String>> + Send + Sync>;

/// The pages a tail sends, in order ([`tail`]).
pub type Pages = mpsc::Receiver<Result<Vec<Entry>, JournalError>>;

/// The tail's task.
pub type TailTask = tokio::task::JoinHandle<()>;

/// Starts the tail: reads `journal` after `after`, page by page, and sends every page in
/// order; waits on the stream when it has read everything. `Trimmed` (it fell behind a
/// snapshot) is sent and ends the tail; `Unavailable` is retried every [`TAIL_RETRY_MS`]
/// (with `healthy` false meanwhile).
pub fn tail(mut journal: RedisJournal, mut after: u64) -> (Pages, Arc<AtomicBool>, TailTask) {
    let (tx, rx) = mpsc::channel(TAIL_QUEUE);
    let healthy = Arc::new(AtomicBool::new(true));
    let h = healthy.clone();
    let task = tokio::spawn(async move {
        // Whether the last read may have left entries behind (a full page): read again at
        // once; otherwise wait on the stream, which answers with the new entries in the same
        // round trip. A wait that finds what does not follow on falls through to the checked
        // read, which tells a trim from a gap.
        let mut more = true;
        loop {
            if !more {
                let wait = journal.wait_read_after(
                    after,
                    Duration::from_millis(TAIL_BLOCK_MS),
                    TAIL_BATCHES,
                );
                let waited = tokio::select! {
                    _ = tx.closed() => return,
                    r = wait => r,
                };
                match waited {
                    Ok(Tailed::Nothing) => {
                        h.store(true, Ordering::Release);
                        continue;
                    }
                    Ok(Tailed::Entries { entries, more: m }) => {
                        h.store(true, Ordering::Release);
                        more = m;
                        if let Some(last) = entries.last() {
                            after = last.seq;
                        }
                        if tx.send(Ok(entries)).await.is_err() {
                            return;
                        }
                        continue;
                    }
                    // Redis away: retry after a pause. Anything else (an entry that does not
                    // decode) is the checked read's to report, at once.
                    Err(JournalError::Unavailable(e)) => {
                        tracing::warn!(error = %e, "follower: waiting on the journal failed; retrying");
                        h.store(false, Ordering::Release);
                        tokio::time::sleep(Duration::from_millis(TAIL_RETRY_MS)).await;
                    }
                    Ok(Tailed::Reread) | Err(_) => {}
                }
            }
            match journal.read_after(after, REPLAY_PAGE).await {
                Ok(page) => {
                    h.store(true, Ordering::Release);
                    more = page.len() >= REPLAY_PAGE;
                    if let Some(last) = page.last() {
                        after = last.seq;
                        if tx.send(Ok(page)).await.is_err() {
                            return;
                        }
                    }
                }
                Err(JournalError::Unavailable(e)) => {
                    tracing::warn!(error = %e, "follower: journal unavailable; retrying");
                    h.store(false, Ordering::Release);
                    more = true;
                    tokio::time::sleep(Duration::from_millis(TAIL_RETRY_MS)).await;
                }
                Err(e) => {
                    h.store(false, Ordering::Release);
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            }
        }
    });
    (rx, healthy, task)
}

/// Commands applied recently, kept for forwarded commands whose acknowledgement arrives
/// after their entry was applied here.
pub const RECENT_APPLIED: usize = 8_192;

/// Forwarded commands waiting for this replica to apply their sequence number, and the
/// commands applied recently. One map for all of them: the apply path answers exactly the
/// waiter of each seq (a broadcast receiver per waiter woke every waiter at every entry).
#[derive(Default)]
pub struct Waiters {
    inner: std::sync::Mutex<WaitersInner>,
}

type Reply = oneshot::Sender<Result<Arc<Committed>, SequencerError>>;

#[derive(Default)]
struct WaitersInner {
    applied: u64,
    recent: std::collections::VecDeque<Arc<Committed>>,
    waiting: std::collections::BTreeMap<u64, Vec<Reply>>,
}

impl Waiters {
    /// The apply path: `c` was applied; answers its waiters.
    pub fn applied(&self, c: &Arc<Committed>) {
        let Ok(mut g) = self.inner.lock() else { return };
        g.applied = c.seq;
        if g.recent.len() == RECENT_APPLIED {
            g.recent.pop_front();
        }
        g.recent.push_back(c.clone());
        if let Some(replies) = g.waiting.remove(&c.seq) {
            for r in replies {
                let _ = r.send(Ok(c.clone()));
            }
        }
    }

    /// Answers `reply` with the command journaled at `seq` once this replica has applied it
    /// (at once when it already has).
    fn answer_at(&self, seq: u64, reply: Reply) {
        let Ok(mut g) = self.inner.lock() else { return };
        if seq > g.applied {
            g.waiting.entry(seq).or_default().push(reply);
            return;
        }
        let found = g
            .recent
            .front()
            .and_then(|first| seq.checked_sub(first.seq))
            .and_then(|i| g.recent.get(i as usize))
            .filter(|c| c.seq == seq)
            .cloned();
        let _ = reply.send(found.ok_or_else(|| {
            SequencerError::Unavailable(format!(
                "the command was journaled at seq {seq}, but this process applied it too long \
                 ago to answer it; retry with the same key to read its outcome"
            ))
        }));
    }
}

impl<J: Journal + 'static, C: Clock> Sequencer<J, C> {
    /// Applies one journaled entry read by a follower.
    ///
    /// # Errors
    /// A message for a gap or an undecodable entry.
    fn follow_entry(&mut self, e: Entry) -> Result<(), String> {
        if e.seq <= self.last_seq {
            return Ok(());
        }
        if e.seq != self.last_seq + 1 {
            return Err(format!(
                "gap in the journal: the replica is at seq {}, the next entry read is {}",
                self.last_seq, e.seq
            ));
        }
        let op = decode(&e.payload).map_err(|m| format!("undecodable entry {}: {m}", e.seq))?;
        self.apply_durable(&e, op, None);
        Ok(())
    }

    /// Reads the journal to its end with the sequencer's own connection (after the lease is
    /// won: the old leader is fenced) and checks that the replica ends where the journal does.
    async fn catch_up(&mut self) -> Result<(), String> {
        let mut attempts = 0;
        loop {
            match self.journal.read_after(self.last_seq, REPLAY_PAGE).await {
                Ok(page) if page.is_empty() => break,
                Ok(page) => {
                    for e in page {
                        self.follow_entry(e)?;
                    }
                }
                Err(JournalError::Unavailable(e)) if attempts < 50 => {
                    attempts += 1;
                    tracing::warn!(error = %e, "taking over: journal unavailable; retrying");
                    tokio::time::sleep(Duration::from_millis(TAIL_RETRY_MS)).await;
                }
                Err(e) => return Err(format!("taking over: reading the journal: {e}")),
            }
        }
        match self.journal.last_seq().await {
            Ok(end) if end == self.last_seq => Ok(()),
            Ok(end) => Err(format!(
                "taking over: the replica ends at seq {} but the journal at {end}",
                self.last_seq
            )),
            Err(e) => Err(format!("taking over: reading the journal's end: {e}")),
        }
    }
}

/// Follows until this process leads (answers the sequencer and `true`) or every handle is
/// dropped (`false`). See the module docs.
pub(super) async fn run<J: Journal + 'static, C: Clock>(
    mut s: Sequencer<J, C>,
    f: Follow,
) -> (Sequencer<J, C>, bool) {
    let Follow {
        mut pages,
        healthy,
        forward,
        mut lead,
        on_fatal,
        ..
    } = f;
    let mut on_fatal = Some(on_fatal);
    let mut fatal = |why: String| {
        tracing::error!(reason = %why, "follower stops: the replica cannot go on");
        if let Some(f) = on_fatal.take() {
            f(why);
        }
    };
    // The request channel is taken out for the select (its handlers need the sequencer).
    let mut rx = std::mem::replace(&mut s.rx, mpsc::channel(1).1);
    let mut broken: Option<String> = None;
    let led = loop {
        tokio::select! {
            biased;
            token = async {
                match lead.as_mut() {
                    Some(l) => l.await,
                    None => std::future::pending().await,
                }
            } => {
                let Ok(token) = token else {
                    lead = None;
                    continue;
                };
                drop(pages);
                s.journal.fence(Some(token));
                if let Err(why) = s.catch_up().await {
                    fatal(why.clone());
                    broken = Some(why);
                    lead = None;
                    pages = mpsc::channel(1).1;
                    continue;
                }
                tracing::info!(last_seq = s.last_seq, "leading: the replica is at the journal's end");
                break true;
            }
            page = pages.recv(), if broken.is_none() => {
                let why = match page {
                    Some(Ok(entries)) => entries
                        .into_iter()
                        .try_for_each(|e| s.follow_entry(e))
                        .err(),
                    Some(Err(e)) => Some(format!("reading the journal: {e}")),
                    None => Some("the journal's tail stopped".into()),
                };
                if let Some(why) = why {
                    fatal(why.clone());
                    broken = Some(why);
                }
            }
            msg = rx.recv() => match msg {
                None => break false,
                Some(Msg::Op(r)) => {
                    if let Some(why) = &broken {
                        let _ = r.reply.send(Err(SequencerError::Unavailable(format!(
                            "this process's replica stopped: {why}"
                        ))));
                        continue;
                    }
                    let bytes = match super::encode(&r.op) {
                        Ok(b) => b,
                        Err(e) => {
                            let _ = r.reply.send(Err(SequencerError::Unencodable(e)));
                            continue;
                        }
                    };
                    let forward = forward.clone();
                    let waiters = s.waiters.get_or_insert_with(Arc::default).clone();
                    tokio::spawn(async move {
                        match forward(bytes).await {
                            Ok(seq) => waiters.answer_at(seq, r.reply),
                            Err(e) => {
                                let _ = r.reply.send(Err(e));
                            }
                        }
                    });
                }
                Some(Msg::Forwarded(r)) => {
                    let _ = r.reply.send(Err(SequencerError::NotLeader(
                        "this process follows the journal; forward to the leader".into(),
                    )));
                }
                Some(Msg::Inspect(reply)) => {
                    let _ = reply.send(super::StateInfo {
                        last_seq: s.last_seq,
                        state_hash: s.market.state_hash(),
                        journal_ok: broken.is_none() && healthy.load(Ordering::Acquire),
                    });
                }
                Some(Msg::Read(f)) => f(&s.market, s.last_seq),
            },
        }
    };
    s.rx = rx;
    (s, led)
}
