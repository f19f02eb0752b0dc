//! # Record checksums and the embedded backend's binary encodings
//!
//! Both backends store a CRC-32 (IEEE, `crc32fast`) with every entry and snapshot:
//! - entry: `crc32(seq u64 LE ‖ timestamp_ms i64 LE ‖ payload)`, so a record moved to another
//!   seq or given another timestamp is caught too;
//! - snapshot: `crc32(seq u64 LE ‖ format_version u16 LE ‖ state_hash ‖ bytes)`.
//!
//! The redb value encodings (all integers little-endian) are documented in `docs/journal.md`:
//! - entry: `[ENTRY_RECORD_VERSION u8][timestamp_ms i64][crc u32][payload …]`;
//! - snapshot: `[SNAPSHOT_RECORD_VERSION u8][seq u64][format_version u16][state_hash 32 B]`
//!   `[crc u32][bytes …]`.
//!
//! The Redis backend stores one stream entry per group commit, a *batch record*:
//! `[BATCH_RECORD_VERSION u8][count u32]` then per entry `[seq u64][len u32][entry record]`
//! (the entry record as above, `len` bytes). One stream entry per batch instead of one per
//! command is what makes replay from Redis fast: the per-entry cost of `XRANGE` and of
//! parsing its reply is paid once per batch (`docs/journal.md`, "Read").

use super::{Entry, JournalError, SnapshotRecord};

/// Version byte leading every redb entry record.
pub const ENTRY_RECORD_VERSION: u8 = 1;

/// Version byte leading the redb snapshot record.
pub const SNAPSHOT_RECORD_VERSION: u8 = 1;

/// Version byte leading every Redis batch record.
pub const BATCH_RECORD_VERSION: u8 = 1;

const ENTRY_HEADER_LEN: usize = 1 + 8 + 4;
const BATCH_HEADER_LEN: usize = 1 + 4;
const BATCH_ITEM_HEADER_LEN: usize = 8 + 4;
const SNAPSHOT_HEADER_LEN: usize = 1 + 8 + 2 + 32 + 4;

/// CRC-32 of an entry (seq, timestamp in ms since epoch, payload).
pub fn entry_crc(seq: u64, timestamp_ms: i64, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&seq.to_le_bytes());
    h.update(&timestamp_ms.to_le_bytes());
    h.update(payload);
    h.finalize()
}

/// CRC-32 of a snapshot record (seq, format version, state hash, bytes).
pub fn snapshot_crc(s: &SnapshotRecord) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&s.seq.to_le_bytes());
    h.update(&s.format_version.to_le_bytes());
    h.update(&s.state_hash);
    h.update(&s.bytes);
    h.finalize()
}

/// Encodes an entry's redb value (the seq is the table key).
pub fn encode_entry(e: &Entry) -> Vec<u8> {
    let mut out = Vec::with_capacity(ENTRY_HEADER_LEN + e.payload.len());
    out.push(ENTRY_RECORD_VERSION);
    out.extend_from_slice(&e.timestamp_ms.to_le_bytes());
    out.extend_from_slice(&entry_crc(e.seq, e.timestamp_ms, &e.payload).to_le_bytes());
    out.extend_from_slice(&e.payload);
    out
}

/// Encodes a batch record (see the module docs) of contiguous entries.
pub fn encode_batch(batch: &[Entry]) -> Vec<u8> {
    let size: usize = batch
        .iter()
        .map(|e| BATCH_ITEM_HEADER_LEN + ENTRY_HEADER_LEN + e.payload.len())
        .sum();
    let mut out = Vec::with_capacity(BATCH_HEADER_LEN + size);
    out.push(BATCH_RECORD_VERSION);
    out.extend_from_slice(&(batch.len() as u32).to_le_bytes());
    for e in batch {
        out.extend_from_slice(&e.seq.to_le_bytes());
        out.extend_from_slice(&((ENTRY_HEADER_LEN + e.payload.len()) as u32).to_le_bytes());
        out.push(ENTRY_RECORD_VERSION);
        out.extend_from_slice(&e.timestamp_ms.to_le_bytes());
        out.extend_from_slice(&entry_crc(e.seq, e.timestamp_ms, &e.payload).to_le_bytes());
        out.extend_from_slice(&e.payload);
    }
    out
}

/// Builds a batch record from `(seq, entry record)` parts as they are, without checking them
/// (the inverse of [`split_batch`]; tests use it to store damaged batches).
pub fn join_batch(parts: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let mut out = vec![BATCH_RECORD_VERSION];
    out.extend_from_slice(&(parts.len() as u32).to_le_bytes());
    for (seq, rec) in parts {
        out.extend_from_slice(&seq.to_le_bytes());
        out.extend_from_slice(&(rec.len() as u32).to_le_bytes());
        out.extend_from_slice(rec);
    }
    out
}

/// Splits a batch record stored under stream id `id` into `(seq, entry record)` parts without
/// verifying the entries (decode the ones you need with [`decode_entry`]). `Corrupt` when the
/// framing is damaged: unknown version, truncated or trailing bytes, no entries, or a last
/// seq other than `id`.
pub fn split_batch(id: u64, raw: &[u8]) -> Result<Vec<(u64, &[u8])>, JournalError> {
    let bad = |what: &str| JournalError::Corrupt(format!("batch {id}: {what}"));
    if raw.len() < BATCH_HEADER_LEN {
        return Err(bad("record shorter than its header"));
    }
    if raw[0] != BATCH_RECORD_VERSION {
        return Err(bad(&format!("unknown batch record version {}", raw[0])));
    }
    let count = u32::from_le_bytes(le_array(&raw[1..5])) as usize;
    // Every entry takes at least its two headers: a count beyond that is damage.
    if count == 0 || count > raw.len() / (BATCH_ITEM_HEADER_LEN + ENTRY_HEADER_LEN) {
        return Err(bad(&format!("implausible entry count {count}")));
    }
    let mut parts = Vec::with_capacity(count);
    let mut at = BATCH_HEADER_LEN;
    for _ in 0..count {
        let Some(head) = raw.get(at..at + BATCH_ITEM_HEADER_LEN) else {
            return Err(bad("truncated entry header"));
        };
        let seq = u64::from_le_bytes(le_array(&head[..8]));
        let len = u32::from_le_bytes(le_array(&head[8..12])) as usize;
        at += BATCH_ITEM_HEADER_LEN;
        let Some(rec) = raw.get(at..at + len) else {
            return Err(bad(&format!("entry {seq} truncated")));
        };
        parts.push((seq, rec));
        at += len;
    }
    if at != raw.len() {
        return Err(bad(&format!("{} trailing bytes", raw.len() - at)));
    }
    if parts.last().map(|p| p.0) != Some(id) {
        return Err(bad("last entry's seq is not the stream id"));
    }
    Ok(parts)
}

/// Decodes and checksum-verifies a redb entry value stored under `seq`.
pub fn decode_entry(seq: u64, raw: &[u8]) -> Result<Entry, JournalError> {
    if raw.len() < ENTRY_HEADER_LEN {
        return Err(JournalError::Corrupt(format!(
            "entry {seq}: record of {} bytes is shorter than its header",
            raw.len()
        )));
    }
    if raw[0] != ENTRY_RECORD_VERSION {
        return Err(JournalError::Corrupt(format!(
            "entry {seq}: unknown record version {}",
            raw[0]
        )));
    }
    let timestamp_ms = i64::from_le_bytes(le_array(&raw[1..9]));
    let crc = u32::from_le_bytes(le_array(&raw[9..13]));
    let payload = raw[ENTRY_HEADER_LEN..].to_vec();
    check_entry_crc(seq, timestamp_ms, &payload, crc)?;
    Ok(Entry {
        seq,
        timestamp_ms,
        payload,
    })
}

/// `Corrupt` unless `crc` is the checksum of (seq, timestamp_ms, payload).
pub fn check_entry_crc(
    seq: u64,
    timestamp_ms: i64,
    payload: &[u8],
    crc: u32,
) -> Result<(), JournalError> {
    let actual = entry_crc(seq, timestamp_ms, payload);
    if actual != crc {
        return Err(JournalError::Corrupt(format!(
            "entry {seq}: checksum mismatch (stored {crc:08x}, computed {actual:08x})"
        )));
    }
    Ok(())
}

/// `Corrupt` unless `crc` is the checksum of the snapshot.
pub fn check_snapshot_crc(s: &SnapshotRecord, crc: u32) -> Result<(), JournalError> {
    let actual = snapshot_crc(s);
    if actual != crc {
        return Err(JournalError::Corrupt(format!(
            "snapshot at seq {}: checksum mismatch (stored {crc:08x}, computed {actual:08x})",
            s.seq
        )));
    }
    Ok(())
}

/// Encodes the redb snapshot value.
pub fn encode_snapshot(s: &SnapshotRecord) -> Vec<u8> {
    let mut out = Vec::with_capacity(SNAPSHOT_HEADER_LEN + s.bytes.len());
    out.push(SNAPSHOT_RECORD_VERSION);
    out.extend_from_slice(&s.seq.to_le_bytes());
    out.extend_from_slice(&s.format_version.to_le_bytes());
    out.extend_from_slice(&s.state_hash);
    out.extend_from_slice(&snapshot_crc(s).to_le_bytes());
    out.extend_from_slice(&s.bytes);
    out
}

/// Decodes and checksum-verifies the redb snapshot value.
pub fn decode_snapshot(raw: &[u8]) -> Result<SnapshotRecord, JournalError> {
    if raw.len() < SNAPSHOT_HEADER_LEN {
        return Err(JournalError::Corrupt(format!(
            "snapshot record of {} bytes is shorter than its header",
            raw.len()
        )));
    }
    if raw[0] != SNAPSHOT_RECORD_VERSION {
        return Err(JournalError::Corrupt(format!(
            "snapshot: unknown record version {}",
            raw[0]
        )));
    }
    let s = SnapshotRecord {
        seq: u64::from_le_bytes(le_array(&raw[1..9])),
        format_version: u16::from_le_bytes(le_array(&raw[9..11])),
        state_hash: le_array(&raw[11..43]),
        bytes: raw[SNAPSHOT_HEADER_LEN..].to_vec(),
    };
    check_snapshot_crc(&s, u32::from_le_bytes(le_array(&raw[43..47])))?;
    Ok(s)
}

/// Copies a slice whose length the caller has checked into an array.
fn le_array<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&bytes[..N]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_round_trip_and_corruption() {
        let e = Entry {
            seq: 7,
            timestamp_ms: 1_764_000_000_123,
            payload: b"hello".to_vec(),
        };
        let mut raw = encode_entry(&e);
        assert_eq!(raw.len(), 13 + 5);
        assert_eq!(decode_entry(7, &raw), Ok(e.clone()));
        // The same record under another seq fails its checksum.
        assert!(matches!(
            decode_entry(8, &raw),
            Err(JournalError::Corrupt(_))
        ));
        let last = raw.len() - 1;
        raw[last] ^= 1;
        assert!(matches!(
            decode_entry(7, &raw),
            Err(JournalError::Corrupt(_))
        ));
        assert!(matches!(
            decode_entry(7, &raw[..5]),
            Err(JournalError::Corrupt(_))
        ));
    }

    fn entry(seq: u64) -> Entry {
        Entry {
            seq,
            timestamp_ms: 1_764_000_000_000 + seq as i64,
            payload: vec![seq as u8; seq as usize],
        }
    }

    #[test]
    fn batch_round_trip_and_damage() {
        let batch: Vec<Entry> = (5..=8).map(entry).collect();
        let raw = encode_batch(&batch);
        let parts = split_batch(8, &raw).expect("split");
        let seqs: Vec<u64> = parts.iter().map(|p| p.0).collect();
        assert_eq!(seqs, vec![5, 6, 7, 8]);
        let decoded: Vec<Entry> = parts
            .iter()
            .map(|(seq, rec)| decode_entry(*seq, rec).expect("entry"))
            .collect();
        assert_eq!(decoded, batch);
        let owned: Vec<(u64, Vec<u8>)> = parts.iter().map(|(s, r)| (*s, r.to_vec())).collect();
        assert_eq!(join_batch(&owned), raw);
        // Stored under another id, truncated, extended, or with a zero count: refused.
        for (id, bytes) in [
            (7, raw.clone()),
            (8, raw[..raw.len() - 1].to_vec()),
            (8, [raw.as_slice(), &[0]].concat()),
            (8, join_batch(&[])),
            (8, vec![BATCH_RECORD_VERSION]),
            (8, [&[9u8][..], &raw[1..]].concat()),
        ] {
            assert!(
                matches!(split_batch(id, &bytes), Err(JournalError::Corrupt(_))),
                "id {id}, {} bytes",
                bytes.len()
            );
        }
        // A damaged payload splits (framing intact) but fails its entry's checksum.
        let mut damaged = owned.clone();
        let last = damaged[2].1.len() - 1;
        damaged[2].1[last] ^= 1;
        let raw = join_batch(&damaged);
        let parts = split_batch(8, &raw).expect("split");
        assert!(decode_entry(parts[1].0, parts[1].1).is_ok());
        assert!(matches!(
            decode_entry(parts[2].0, parts[2].1),
            Err(JournalError::Corrupt(m)) if m.contains("entry 7")
        ));
    }

    #[test]
    fn snapshot_round_trip_and_corruption() {
        let s = SnapshotRecord {
            seq: 42,
            format_version: 3,
            state_hash: [9; 32],
            bytes: vec![1, 2, 3],
        };
        let mut raw = encode_snapshot(&s);
        assert_eq!(decode_snapshot(&raw), Ok(s));
        raw[20] ^= 0xff;
        assert!(matches!(
            decode_snapshot(&raw),
            Err(JournalError::Corrupt(_))
        ));
    }
}
