//! # The durable command journal
//!
//! The sequencer assigns every accepted command a sequence number (contiguous from 1) and a
//! timestamp, appends it here, and acknowledges the command only once [`Journal::append`]
//! returns `Ok` — at that point the entry is durable by the backend's rules
//! (`docs/journal.md`). On start the gateway loads the newest snapshot and replays the entries
//! after it through the engine.
//!
//! Two backends implement one trait:
//! - [`redis::RedisJournal`] (production): one Redis Stream per shard, the sequence number is
//!   the stream entry id, appends/trims/snapshots are atomic Lua scripts (one round trip each).
//! - [`embedded::EmbeddedJournal`] (default, single node): a `redb` file in a data directory,
//!   one durable (fsync) write transaction per batch.
//!
//! [`AnyJournal`] picks one at run time. Both backends pass the same test suite
//! (`gateway/tests/journal.rs`).
//!
//! Invariants (both backends): the journal never holds a gap or a duplicate sequence number;
//! a refused append writes nothing; an append of entries already present with identical
//! contents is `Ok` (so a retry after an unknown outcome neither loses nor doubles an entry);
//! entries are trimmed only up to the newest snapshot; every stored record carries a CRC-32
//! that reading verifies.

pub mod embedded;
pub mod record;
pub mod redis;

use std::future::Future;

pub use embedded::EmbeddedJournal;
pub use redis::{RedisConfig, RedisJournal};

/// Most entries one [`Journal::append`] accepts (one Lua script / one write transaction).
pub const MAX_BATCH_ENTRIES: usize = 10_000;

/// Largest payload of one entry, in bytes.
pub const MAX_PAYLOAD_BYTES: usize = 1 << 20;

/// Largest total payload of one [`Journal::append`] batch, in bytes (Redis refuses requests
/// over its 1 GiB query-buffer limit long before; this keeps a batch well below it).
pub const MAX_BATCH_BYTES: usize = 64 << 20;

/// Most entries one [`Journal::read_after`] returns, whatever `limit` asks for.
pub const MAX_READ_ENTRIES: usize = 10_000;

/// Largest sequence number the journal accepts (the Redis scripts compare sequence numbers as
/// Lua doubles, exact up to 2^53 − 1).
pub const MAX_SEQ: u64 = (1 << 53) - 1;

/// One journaled command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Sequence number, contiguous from 1.
    pub seq: u64,
    /// Time the sequencer assigned, in ms since the Unix epoch.
    pub timestamp_ms: i64,
    /// The encoded command; opaque to the journal.
    pub payload: Vec<u8>,
}

/// A snapshot of engine + ledger state taken after applying entry `seq`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotRecord {
    /// The last sequence number applied to the state (0: the empty state).
    pub seq: u64,
    /// Version of the encoding of `bytes`, owned by the caller.
    pub format_version: u16,
    /// The engine/ledger state hash after applying `seq`.
    pub state_hash: [u8; 32],
    /// The encoded state; opaque to the journal.
    pub bytes: Vec<u8>,
}

/// What can go wrong with a journal operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JournalError {
    /// The backend is unreachable, timed out, or is refusing service for now (loading, out of
    /// memory, read-only replica, disk error). Map to HTTP 503. For [`Journal::append`] the
    /// outcome is **unknown**: retry the same batch (it is idempotent) before reusing its
    /// sequence numbers for anything else.
    #[error("journal unavailable: {0}")]
    Unavailable(String),
    /// Refused: the sequence numbers do not continue the journal (`found` is the offending
    /// seq, `expected` the one that would be accepted), or an entry with the same seq but
    /// different contents is already stored, or a trim/snapshot bound was violated (see each
    /// method). Nothing was written.
    #[error("journal sequence conflict: expected {expected}, found {found}")]
    Conflict {
        /// The sequence number (or bound) the journal would accept.
        expected: u64,
        /// The sequence number (or bound) the request carried.
        found: u64,
    },
    /// Stored data is damaged: a gap, a bad checksum, an undecodable record.
    #[error("journal corrupt: {0}")]
    Corrupt(String),
    /// The backend is set up in a way the journal refuses (e.g. AOF off with `require_aof`).
    #[error("journal misconfigured: {0}")]
    Config(String),
    /// The entries a read asked for were trimmed (they are covered by the snapshot).
    #[error("journal entries up to seq {trimmed_upto} were trimmed; cannot read after {after}")]
    Trimmed {
        /// The `after` the read asked for.
        after: u64,
        /// Entries with seq ≤ this are gone.
        trimmed_upto: u64,
    },
    /// The request itself is malformed (batch too large, seq 0, payload too large).
    #[error("invalid journal request: {0}")]
    Invalid(String),
    /// A write of a leader whose lease is no longer the journal's (another engine leads, or
    /// the lease expired while this one was paused): nothing was written, and this process
    /// must stop sequencing (Redis backend, `redis::RedisJournal::try_lead`).
    #[error("journal write fenced: {0}")]
    Fenced(String),
}

impl JournalError {
    /// The HTTP status the gateway should answer with when this error ends a request.
    pub fn http_status(&self) -> u16 {
        match self {
            JournalError::Unavailable(_) => 503,
            JournalError::Conflict { .. } => 409,
            JournalError::Fenced(_) => 503,
            JournalError::Trimmed { .. } => 410,
            JournalError::Invalid(_) => 400,
            JournalError::Corrupt(_) | JournalError::Config(_) => 500,
        }
    }
}

/// A durable, append-only, contiguous log of commands plus the newest snapshot.
///
/// Methods take `&mut self`: one owner (the sequencer task) drives a journal; readers that
/// need their own view open their own instance.
pub trait Journal: Send {
    /// Appends a batch (group commit) whose seqs continue the journal contiguously; `Ok` only
    /// when the whole batch is durable.
    ///
    /// Entries already stored with identical timestamp and payload are accepted without being
    /// written again (a prefix of the batch may overlap the journal's tail), so retrying a
    /// batch whose outcome was unknown neither loses nor doubles an entry. Refused with
    /// [`JournalError::Conflict`] (nothing written) when the first new seq is not
    /// `last_seq + 1`, when an overlapping entry differs or was trimmed, or when the batch is
    /// not contiguous itself. An empty batch is `Ok`.
    fn append(&mut self, batch: &[Entry]) -> impl Future<Output = Result<(), JournalError>> + Send;

    /// Entries with seq > `after`, in order, at most `min(limit, MAX_READ_ENTRIES)`.
    ///
    /// An empty result means the reader is caught up; a shorter one does not. Verifies every
    /// checksum and the contiguity of what it returns ([`JournalError::Corrupt`]).
    /// [`JournalError::Trimmed`] when `after` is below the trim point.
    fn read_after(
        &mut self,
        after: u64,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Entry>, JournalError>> + Send;

    /// The highest seq ever appended (0 for an empty journal); trimming does not lower it.
    fn last_seq(&mut self) -> impl Future<Output = Result<u64, JournalError>> + Send;

    /// Stores `s` as the newest snapshot, replacing the previous one, durably.
    ///
    /// Conflict when `s.seq > last_seq` (`expected` = last seq) or when `s.seq` is below the
    /// stored snapshot's seq (`expected` = that seq).
    fn save_snapshot(
        &mut self,
        s: &SnapshotRecord,
    ) -> impl Future<Output = Result<(), JournalError>> + Send;

    /// The newest snapshot, if any, checksum verified.
    fn load_snapshot(
        &mut self,
    ) -> impl Future<Output = Result<Option<SnapshotRecord>, JournalError>> + Send;

    /// Drops entries with seq ≤ `upto`. Conflict beyond the newest snapshot's seq
    /// (`expected` = snapshot seq, or 0 without a snapshot); a no-op at or below the current
    /// trim point.
    fn trim(&mut self, upto: u64) -> impl Future<Output = Result<(), JournalError>> + Send;

    /// Cheap reachability check for `/readyz`.
    fn ping(&mut self) -> impl Future<Output = Result<(), JournalError>> + Send;

    /// Makes this journal's later writes carry the leadership token `token` (a follower that
    /// has just won the lease; `redis::RedisJournal::try_lead`). Backends without leadership
    /// (the embedded store: one process owns its file) ignore it.
    fn fence(&mut self, token: Option<String>) {
        let _ = token;
    }
}

/// Either backend, chosen at run time (the trait is not object safe).
#[derive(Debug)]
pub enum AnyJournal {
    /// Redis Streams (production); boxed, it is much larger than the embedded handle.
    Redis(Box<RedisJournal>),
    /// redb file (default, single node).
    Embedded(EmbeddedJournal),
}

impl Journal for AnyJournal {
    async fn append(&mut self, batch: &[Entry]) -> Result<(), JournalError> {
        match self {
            AnyJournal::Redis(j) => j.append(batch).await,
            AnyJournal::Embedded(j) => j.append(batch).await,
        }
    }

    async fn read_after(&mut self, after: u64, limit: usize) -> Result<Vec<Entry>, JournalError> {
        match self {
            AnyJournal::Redis(j) => j.read_after(after, limit).await,
            AnyJournal::Embedded(j) => j.read_after(after, limit).await,
        }
    }

    async fn last_seq(&mut self) -> Result<u64, JournalError> {
        match self {
            AnyJournal::Redis(j) => j.last_seq().await,
            AnyJournal::Embedded(j) => j.last_seq().await,
        }
    }

    async fn save_snapshot(&mut self, s: &SnapshotRecord) -> Result<(), JournalError> {
        match self {
            AnyJournal::Redis(j) => j.save_snapshot(s).await,
            AnyJournal::Embedded(j) => j.save_snapshot(s).await,
        }
    }

    async fn load_snapshot(&mut self) -> Result<Option<SnapshotRecord>, JournalError> {
        match self {
            AnyJournal::Redis(j) => j.load_snapshot().await,
            AnyJournal::Embedded(j) => j.load_snapshot().await,
        }
    }

    async fn trim(&mut self, upto: u64) -> Result<(), JournalError> {
        match self {
            AnyJournal::Redis(j) => j.trim(upto).await,
            AnyJournal::Embedded(j) => j.trim(upto).await,
        }
    }

    async fn ping(&mut self) -> Result<(), JournalError> {
        match self {
            AnyJournal::Redis(j) => j.ping().await,
            AnyJournal::Embedded(j) => j.ping().await,
        }
    }

    fn fence(&mut self, token: Option<String>) {
        match self {
            AnyJournal::Redis(j) => j.set_fencing_token(token),
            AnyJournal::Embedded(j) => j.fence(token),
        }
    }
}

impl From<RedisJournal> for AnyJournal {
    fn from(j: RedisJournal) -> Self {
        AnyJournal::Redis(Box::new(j))
    }
}

impl From<EmbeddedJournal> for AnyJournal {
    fn from(j: EmbeddedJournal) -> Self {
        AnyJournal::Embedded(j)
    }
}

/// Checks a batch before it reaches a backend: size limits, seq ≥ 1, contiguity inside the
/// batch. Returns the first seq (`None` for an empty batch).
pub(crate) fn validate_batch(batch: &[Entry]) -> Result<Option<u64>, JournalError> {
    let Some(first) = batch.first() else {
        return Ok(None);
    };
    if batch.len() > MAX_BATCH_ENTRIES {
        return Err(JournalError::Invalid(format!(
            "batch of {} entries exceeds MAX_BATCH_ENTRIES ({MAX_BATCH_ENTRIES})",
            batch.len()
        )));
    }
    if first.seq == 0 {
        return Err(JournalError::Invalid("sequence numbers start at 1".into()));
    }
    let len = batch.len() as u64;
    if first.seq > MAX_SEQ || MAX_SEQ - first.seq < len - 1 {
        return Err(JournalError::Invalid(format!(
            "batch from seq {} of {len} entries goes past MAX_SEQ ({MAX_SEQ})",
            first.seq
        )));
    }
    let bytes: usize = batch.iter().map(|e| e.payload.len()).sum();
    if bytes > MAX_BATCH_BYTES {
        return Err(JournalError::Invalid(format!(
            "batch payloads total {bytes} bytes, over MAX_BATCH_BYTES ({MAX_BATCH_BYTES})"
        )));
    }
    for (expected, e) in (first.seq..).zip(batch) {
        if e.seq != expected {
            return Err(JournalError::Conflict {
                expected,
                found: e.seq,
            });
        }
        if e.payload.len() > MAX_PAYLOAD_BYTES {
            return Err(JournalError::Invalid(format!(
                "payload of seq {} is {} bytes, over MAX_PAYLOAD_BYTES ({MAX_PAYLOAD_BYTES})",
                e.seq,
                e.payload.len()
            )));
        }
    }
    Ok(Some(first.seq))
}

/// Checks a page read from a backend: `entries` must be `after + 1, after + 2, …`; a page
/// shorter than `effective_limit` must reach `last` (nothing missing at the tail); `after`
/// must not be below the trim point.
pub(crate) fn verify_page(
    after: u64,
    effective_limit: usize,
    last: u64,
    trimmed_upto: u64,
    entries: &[Entry],
) -> Result<(), JournalError> {
    if after < trimmed_upto {
        return Err(JournalError::Trimmed {
            after,
            trimmed_upto,
        });
    }
    let mut expected = after + 1;
    for e in entries {
        if e.seq != expected {
            return Err(JournalError::Corrupt(format!(
                "gap: expected seq {expected}, found {}",
                e.seq
            )));
        }
        expected += 1;
    }
    let reached = expected - 1;
    if entries.len() < effective_limit && reached < last {
        return Err(JournalError::Corrupt(format!(
            "entries {}..={last} are missing (last seq is {last})",
            reached + 1
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(seq: u64) -> Entry {
        Entry {
            seq,
            timestamp_ms: 0,
            payload: vec![],
        }
    }

    #[test]
    fn batch_validation() {
        assert_eq!(validate_batch(&[]), Ok(None));
        assert_eq!(validate_batch(&[e(4), e(5)]), Ok(Some(4)));
        assert_eq!(
            validate_batch(&[e(4), e(6)]),
            Err(JournalError::Conflict {
                expected: 5,
                found: 6
            })
        );
        assert!(matches!(
            validate_batch(&[e(0)]),
            Err(JournalError::Invalid(_))
        ));
        assert_eq!(validate_batch(&[e(MAX_SEQ)]), Ok(Some(MAX_SEQ)));
        assert!(matches!(
            validate_batch(&[e(MAX_SEQ), e(MAX_SEQ + 1)]),
            Err(JournalError::Invalid(_))
        ));
        assert!(matches!(
            validate_batch(&[e(u64::MAX)]),
            Err(JournalError::Invalid(_))
        ));
        let big: Vec<Entry> = (1..=MAX_BATCH_ENTRIES as u64 + 1).map(e).collect();
        assert!(matches!(
            validate_batch(&big),
            Err(JournalError::Invalid(_))
        ));
        let heavy: Vec<Entry> = (1..=65u64)
            .map(|seq| Entry {
                payload: vec![0; MAX_PAYLOAD_BYTES],
                ..e(seq)
            })
            .collect();
        assert!(matches!(
            validate_batch(&heavy),
            Err(JournalError::Invalid(_))
        ));
        let mut fat = e(1);
        fat.payload = vec![0; MAX_PAYLOAD_BYTES + 1];
        assert!(matches!(
            validate_batch(&[fat]),
            Err(JournalError::Invalid(_))
        ));
    }

    #[test]
    fn page_verification() {
        let page = [e(3), e(4)];
        assert_eq!(verify_page(2, 2, 9, 0, &page), Ok(()));
        assert_eq!(verify_page(2, 5, 4, 0, &page), Ok(()));
        assert!(matches!(
            verify_page(2, 5, 9, 0, &page),
            Err(JournalError::Corrupt(_))
        ));
        assert!(matches!(
            verify_page(1, 5, 4, 0, &page),
            Err(JournalError::Corrupt(_))
        ));
        assert_eq!(
            verify_page(1, 5, 4, 2, &page),
            Err(JournalError::Trimmed {
                after: 1,
                trimmed_upto: 2
            })
        );
        assert_eq!(verify_page(9, 5, 4, 0, &[]), Ok(()));
    }

    #[test]
    fn http_status_mapping() {
        assert_eq!(JournalError::Unavailable("x".into()).http_status(), 503);
        assert_eq!(
            JournalError::Conflict {
                expected: 1,
                found: 2
            }
            .http_status(),
            409
        );
        assert_eq!(JournalError::Corrupt("x".into()).http_status(), 500);
    }
}
