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

use super::{Entry, JournalError, SnapshotRecord};

/// Version byte leading every redb entry record.
pub const ENTRY_RECORD_VERSION: u8 = 1;

/// Version byte leading the redb snapshot record.
pub const SNAPSHOT_RECORD_VERSION: u8 = 1;

const ENTRY_HEADER_LEN: usize = 1 + 8 + 4;
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
