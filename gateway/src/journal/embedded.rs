//! # Embedded journal backend (redb, the default for a single node)
//!
//! One redb file per shard, `<data_dir>/shard-<n>.journal.redb`, with three tables (the
//! on-disk format, also in `docs/journal.md`):
//! - [`ENTRIES_TABLE`] `journal_entries`: `u64` seq → entry record (see [`super::record`]);
//! - [`SNAPSHOT_TABLE`] `journal_snapshot`: `u8` slot [`SNAPSHOT_SLOT`] → snapshot record;
//! - [`META_TABLE`] `journal_meta`: `&str` → `u64`: [`META_LAST_SEQ`] (highest seq ever
//!   appended; survives trimming) and [`META_TRIMMED_UPTO`].
//!
//! Every mutating call is one write transaction committed with
//! [`redb::Durability::Immediate`] (fsync before `commit` returns), so `Ok` means durable.
//! redb is synchronous: each call runs on tokio's blocking pool (`spawn_blocking`) and the
//! caller's task awaits it, so an fsync never stalls a runtime worker.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};

use super::record::{decode_entry, decode_snapshot, encode_entry, encode_snapshot};
use super::{
    Entry, Journal, JournalError, MAX_READ_ENTRIES, SnapshotRecord, validate_batch, verify_page,
};

/// Entries: seq → `[version u8][timestamp_ms i64 LE][crc32 u32 LE][payload]`.
pub const ENTRIES_TABLE: TableDefinition<u64, &[u8]> = TableDefinition::new("journal_entries");

/// The newest snapshot, under key [`SNAPSHOT_SLOT`].
pub const SNAPSHOT_TABLE: TableDefinition<u8, &[u8]> = TableDefinition::new("journal_snapshot");

/// Journal bookkeeping: [`META_LAST_SEQ`], [`META_TRIMMED_UPTO`].
pub const META_TABLE: TableDefinition<&str, u64> = TableDefinition::new("journal_meta");

/// Key of the only row of [`SNAPSHOT_TABLE`].
pub const SNAPSHOT_SLOT: u8 = 0;

/// Meta key: the highest seq ever appended.
pub const META_LAST_SEQ: &str = "last_seq";

/// Meta key: entries with seq ≤ this were trimmed.
pub const META_TRIMMED_UPTO: &str = "trimmed_upto";

/// The journal in a local redb file.
#[derive(Debug, Clone)]
pub struct EmbeddedJournal {
    db: Arc<Database>,
    path: PathBuf,
}

impl EmbeddedJournal {
    /// The file holding shard `shard` in `data_dir`.
    pub fn file_path(data_dir: &Path, shard: u32) -> PathBuf {
        data_dir.join(format!("shard-{shard}.journal.redb"))
    }

    /// Opens (creating the directory, file and tables if needed) the journal of `shard` in
    /// `data_dir`. `Config` when another instance holds the file open.
    pub async fn open(data_dir: impl AsRef<Path>, shard: u32) -> Result<Self, JournalError> {
        let dir = data_dir.as_ref().to_path_buf();
        let path = Self::file_path(&dir, shard);
        let p = path.clone();
        let db = tokio::task::spawn_blocking(move || -> Result<Database, JournalError> {
            std::fs::create_dir_all(&dir).map_err(|e| {
                JournalError::Unavailable(format!("cannot create {}: {e}", dir.display()))
            })?;
            let db = Database::create(&p).map_err(|e| db_err("open", e))?;
            let txn = db.begin_write().map_err(|e| db_err("open", e))?;
            {
                txn.open_table(ENTRIES_TABLE)
                    .map_err(|e| db_err("open", e))?;
                txn.open_table(SNAPSHOT_TABLE)
                    .map_err(|e| db_err("open", e))?;
                txn.open_table(META_TABLE).map_err(|e| db_err("open", e))?;
            }
            txn.commit().map_err(|e| db_err("open", e))?;
            Ok(db)
        })
        .await
        .map_err(join_err)??;
        tracing::info!(path = %path.display(), "embedded journal opened");
        Ok(EmbeddedJournal {
            db: Arc::new(db),
            path,
        })
    }

    /// The redb file this journal lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` against the database on the blocking pool.
    async fn blocking<T, F>(&self, f: F) -> Result<T, JournalError>
    where
        T: Send + 'static,
        F: FnOnce(&Database) -> Result<T, JournalError> + Send + 'static,
    {
        let db = Arc::clone(&self.db);
        tokio::task::spawn_blocking(move || f(&db))
            .await
            .map_err(join_err)?
    }
}

impl Journal for EmbeddedJournal {
    async fn append(&mut self, batch: &[Entry]) -> Result<(), JournalError> {
        let Some(first) = validate_batch(batch)? else {
            return Ok(());
        };
        let records: Vec<(u64, Vec<u8>)> = batch.iter().map(|e| (e.seq, encode_entry(e))).collect();
        let written = self
            .blocking(move |db| {
                let mut txn = db.begin_write().map_err(|e| db_err("append", e))?;
                txn.set_durability(Durability::Immediate)
                    .map_err(|e| db_err("append", e))?;
                let new_last;
                let written;
                {
                    let mut meta = txn
                        .open_table(META_TABLE)
                        .map_err(|e| db_err("append", e))?;
                    let mut entries = txn
                        .open_table(ENTRIES_TABLE)
                        .map_err(|e| db_err("append", e))?;
                    let last = meta_get(&meta, META_LAST_SEQ)?;
                    if first > last + 1 {
                        return Err(JournalError::Conflict {
                            expected: last + 1,
                            found: first,
                        });
                    }
                    // Entries with seq ≤ last must already be stored, identical.
                    let overlap = usize::try_from(last + 1 - first)
                        .unwrap_or(usize::MAX)
                        .min(records.len());
                    for (seq, rec) in &records[..overlap] {
                        let stored = entries.get(*seq).map_err(|e| db_err("append", e))?;
                        let same = match stored {
                            None => false,
                            Some(g) => {
                                let raw = g.value();
                                // A damaged stored record is Corrupt, not a Conflict.
                                decode_entry(*seq, raw)?;
                                raw == rec.as_slice()
                            }
                        };
                        if !same {
                            return Err(JournalError::Conflict {
                                expected: last + 1,
                                found: *seq,
                            });
                        }
                    }
                    for (seq, rec) in &records[overlap..] {
                        entries
                            .insert(*seq, rec.as_slice())
                            .map_err(|e| db_err("append", e))?;
                    }
                    written = records.len() - overlap;
                    new_last = last.max(first + records.len() as u64 - 1);
                    if written > 0 {
                        meta.insert(META_LAST_SEQ, new_last)
                            .map_err(|e| db_err("append", e))?;
                    }
                }
                if written == 0 {
                    txn.abort().map_err(|e| db_err("append", e))?;
                } else {
                    txn.commit().map_err(|e| db_err("append", e))?;
                }
                Ok(written)
            })
            .await?;
        if written < batch.len() {
            tracing::info!(
                first,
                already_present = batch.len() - written,
                "journal append overlapped stored entries (retry); skipped them"
            );
        }
        Ok(())
    }

    async fn read_after(&mut self, after: u64, limit: usize) -> Result<Vec<Entry>, JournalError> {
        let limit = limit.min(MAX_READ_ENTRIES);
        if limit == 0 {
            return Ok(Vec::new());
        }
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(|e| db_err("read", e))?;
            let meta = txn.open_table(META_TABLE).map_err(|e| db_err("read", e))?;
            let table = txn
                .open_table(ENTRIES_TABLE)
                .map_err(|e| db_err("read", e))?;
            let last = meta_get(&meta, META_LAST_SEQ)?;
            let trimmed = meta_get(&meta, META_TRIMMED_UPTO)?;
            let mut out = Vec::with_capacity(limit.min(1024));
            if after < trimmed {
                return Err(JournalError::Trimmed {
                    after,
                    trimmed_upto: trimmed,
                });
            }
            let range = table
                .range(after.saturating_add(1)..)
                .map_err(|e| db_err("read", e))?;
            for item in range.take(limit) {
                let (k, v) = item.map_err(|e| db_err("read", e))?;
                out.push(decode_entry(k.value(), v.value())?);
            }
            verify_page(after, limit, last, trimmed, &out)?;
            Ok(out)
        })
        .await
    }

    async fn last_seq(&mut self) -> Result<u64, JournalError> {
        self.blocking(|db| {
            let txn = db.begin_read().map_err(|e| db_err("last_seq", e))?;
            let meta = txn
                .open_table(META_TABLE)
                .map_err(|e| db_err("last_seq", e))?;
            meta_get(&meta, META_LAST_SEQ)
        })
        .await
    }

    async fn save_snapshot(&mut self, s: &SnapshotRecord) -> Result<(), JournalError> {
        let seq = s.seq;
        let rec = encode_snapshot(s);
        self.blocking(move |db| {
            let mut txn = db.begin_write().map_err(|e| db_err("snapshot", e))?;
            txn.set_durability(Durability::Immediate)
                .map_err(|e| db_err("snapshot", e))?;
            {
                let meta = txn
                    .open_table(META_TABLE)
                    .map_err(|e| db_err("snapshot", e))?;
                let mut snap = txn
                    .open_table(SNAPSHOT_TABLE)
                    .map_err(|e| db_err("snapshot", e))?;
                let last = meta_get(&meta, META_LAST_SEQ)?;
                if seq > last {
                    return Err(JournalError::Conflict {
                        expected: last,
                        found: seq,
                    });
                }
                let floor = meta_get(&meta, META_TRIMMED_UPTO)?;
                let current = match snap.get(SNAPSHOT_SLOT).map_err(|e| db_err("snapshot", e))? {
                    None => 0,
                    Some(g) => match decode_snapshot(g.value()) {
                        Ok(cur) => cur.seq,
                        Err(e) => {
                            tracing::warn!(error = %e, "replacing a damaged snapshot");
                            0
                        }
                    },
                };
                let floor = floor.max(current);
                if seq < floor {
                    return Err(JournalError::Conflict {
                        expected: floor,
                        found: seq,
                    });
                }
                snap.insert(SNAPSHOT_SLOT, rec.as_slice())
                    .map_err(|e| db_err("snapshot", e))?;
            }
            txn.commit().map_err(|e| db_err("snapshot", e))
        })
        .await
    }

    async fn load_snapshot(&mut self) -> Result<Option<SnapshotRecord>, JournalError> {
        self.blocking(|db| {
            let txn = db.begin_read().map_err(|e| db_err("load_snapshot", e))?;
            let snap = txn
                .open_table(SNAPSHOT_TABLE)
                .map_err(|e| db_err("load_snapshot", e))?;
            match snap
                .get(SNAPSHOT_SLOT)
                .map_err(|e| db_err("load_snapshot", e))?
            {
                None => Ok(None),
                Some(g) => decode_snapshot(g.value()).map(Some),
            }
        })
        .await
    }

    async fn trim(&mut self, upto: u64) -> Result<(), JournalError> {
        self.blocking(move |db| {
            let mut txn = db.begin_write().map_err(|e| db_err("trim", e))?;
            txn.set_durability(Durability::Immediate)
                .map_err(|e| db_err("trim", e))?;
            let changed;
            {
                let mut meta = txn.open_table(META_TABLE).map_err(|e| db_err("trim", e))?;
                let snap = txn
                    .open_table(SNAPSHOT_TABLE)
                    .map_err(|e| db_err("trim", e))?;
                let mut entries = txn
                    .open_table(ENTRIES_TABLE)
                    .map_err(|e| db_err("trim", e))?;
                let snap_seq = match snap.get(SNAPSHOT_SLOT).map_err(|e| db_err("trim", e))? {
                    None => 0,
                    Some(g) => decode_snapshot(g.value())?.seq,
                };
                if upto > snap_seq {
                    return Err(JournalError::Conflict {
                        expected: snap_seq,
                        found: upto,
                    });
                }
                let trimmed = meta_get(&meta, META_TRIMMED_UPTO)?;
                changed = upto > trimmed;
                if changed {
                    entries
                        .retain_in(..=upto, |_, _| false)
                        .map_err(|e| db_err("trim", e))?;
                    meta.insert(META_TRIMMED_UPTO, upto)
                        .map_err(|e| db_err("trim", e))?;
                }
            }
            if changed {
                txn.commit().map_err(|e| db_err("trim", e))
            } else {
                txn.abort().map_err(|e| db_err("trim", e))
            }
        })
        .await
    }

    async fn ping(&mut self) -> Result<(), JournalError> {
        self.blocking(|db| {
            let txn = db.begin_read().map_err(|e| db_err("ping", e))?;
            txn.open_table(META_TABLE).map_err(|e| db_err("ping", e))?;
            Ok(())
        })
        .await
    }
}

/// Reads a meta counter (0 when absent).
fn meta_get(table: &impl ReadableTable<&'static str, u64>, key: &str) -> Result<u64, JournalError> {
    Ok(table
        .get(key)
        .map_err(|e| db_err("meta", e))?
        .map(|g| g.value())
        .unwrap_or(0))
}

/// Maps a redb error: damaged file → `Corrupt`; lock / version / schema problems → `Config`;
/// IO and everything else → `Unavailable`.
fn db_err(op: &str, e: impl Into<redb::Error>) -> JournalError {
    let e: redb::Error = e.into();
    let msg = format!("redb {op}: {e}");
    match e {
        redb::Error::Corrupted(_) | redb::Error::ValueTooLarge(_) => JournalError::Corrupt(msg),
        redb::Error::DatabaseAlreadyOpen
        | redb::Error::LockProtocolMismatch
        | redb::Error::UpgradeRequired(_)
        | redb::Error::TableTypeMismatch { .. }
        | redb::Error::TableIsMultimap(_)
        | redb::Error::TableIsNotMultimap(_)
        | redb::Error::TypeDefinitionChanged { .. } => JournalError::Config(msg),
        _ => {
            tracing::error!(error = %msg, "embedded journal IO failure");
            JournalError::Unavailable(msg)
        }
    }
}

fn join_err(e: tokio::task::JoinError) -> JournalError {
    JournalError::Unavailable(format!("embedded journal worker failed: {e}"))
}
