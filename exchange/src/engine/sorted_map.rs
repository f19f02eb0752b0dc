//! Serde for hash maps in the canonical state: written as a sequence of (key, value) pairs
//! sorted by key, so snapshots and the state hash never depend on hash-map iteration order.

use rustc_hash::FxHashMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::hash::Hash;

pub(crate) fn serialize<K, V, S>(map: &FxHashMap<K, V>, s: S) -> Result<S::Ok, S::Error>
where
    K: Ord + Serialize,
    V: Serialize,
    S: Serializer,
{
    let mut entries: Vec<(&K, &V)> = map.iter().collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    s.collect_seq(entries)
}

pub(crate) fn deserialize<'de, K, V, D>(d: D) -> Result<FxHashMap<K, V>, D::Error>
where
    K: Eq + Hash + Deserialize<'de>,
    V: Deserialize<'de>,
    D: Deserializer<'de>,
{
    let entries: Vec<(K, V)> = Vec::deserialize(d)?;
    let len = entries.len();
    let map: FxHashMap<K, V> = entries.into_iter().collect();
    if map.len() != len {
        return Err(serde::de::Error::custom("duplicate key in snapshot map"));
    }
    Ok(map)
}

/// The values of a map in key order.
pub(crate) fn values_in_key_order<K: Ord, V>(map: &FxHashMap<K, V>) -> impl Iterator<Item = &V> {
    let mut entries: Vec<(&K, &V)> = map.iter().collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    entries.into_iter().map(|(_, v)| v)
}
