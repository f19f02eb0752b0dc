//! The inventory aggregate: listed free GPUs per (SKU, region, kind, price) level.
//!
//! Each level keeps a histogram of per-node free counts (a node has at most 16 GPUs), so the
//! largest block free on one node is found in constant time.

use crate::command::LeaseKind;
use crate::event::InventoryDelta;
use crate::ids::{RegionId, SkuId};
use crate::limits::MAX_NODE_GPUS;
use crate::price::Price;
use rustc_hash::FxHashMap;

/// A level's key. Ordered by (SKU, region, kind, price), the order of deltas.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LevelKey {
    /// GPU model.
    pub sku: SkuId,
    /// Region.
    pub region: RegionId,
    /// Spot or preemptible.
    pub kind: LeaseKind,
    /// Price, CNY per GPU-hour.
    pub price: Price,
}

/// What a level shows buyers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Level {
    /// Free GPUs at this level (> 0 for a level that exists).
    pub free_gpus: u32,
    /// Largest number free on a single node.
    pub max_single_node: u32,
}

const HIST: usize = MAX_NODE_GPUS as usize + 1;

#[derive(Clone, Debug, PartialEq, Eq)]
struct LevelState {
    free: u32,
    /// nodes[f] = number of listed nodes with f free GPUs at this level.
    nodes: [u32; HIST],
}

impl LevelState {
    fn level(&self) -> Level {
        let max = (1..HIST).rev().find(|&f| self.nodes[f] > 0).unwrap_or(0) as u32;
        Level {
            free_gpus: self.free,
            max_single_node: max,
        }
    }
}

/// The aggregate, plus the bookkeeping to emit one delta per changed level per command.
#[derive(Clone, Debug, Default)]
pub(crate) struct Inventory {
    levels: FxHashMap<LevelKey, LevelState>,
    /// Levels touched by the current command with their value before it (few per command:
    /// a plain vector beats a map).
    touched: Vec<(LevelKey, Level)>,
}

impl Inventory {
    /// Forgets which levels the current command touched, emitting nothing (after a rebuild).
    pub(crate) fn forget_touched(&mut self) {
        self.touched.clear();
    }

    pub(crate) fn get(&self, key: &LevelKey) -> Level {
        self.levels
            .get(key)
            .map(LevelState::level)
            .unwrap_or_default()
    }

    fn touch(&mut self, key: LevelKey) {
        if !self.touched.iter().any(|(k, _)| *k == key) {
            let before = self.get(&key);
            self.touched.push((key, before));
        }
    }

    /// Adds one node's `free` GPUs (1..=16) to a level.
    pub(crate) fn add(&mut self, key: LevelKey, free: u32) {
        self.touch(key);
        let l = self.levels.entry(key).or_insert(LevelState {
            free: 0,
            nodes: [0; HIST],
        });
        l.free += free;
        l.nodes[free as usize] += 1;
    }

    /// One node at a level goes from `old` to `new` free GPUs (both > 0).
    pub(crate) fn change(&mut self, key: LevelKey, old: u32, new: u32) {
        self.touch(key);
        if let Some(l) = self.levels.get_mut(&key) {
            l.free = l.free - old + new;
            l.nodes[old as usize] -= 1;
            l.nodes[new as usize] += 1;
        }
    }

    /// Removes one node's `free` GPUs previously added with [`Inventory::add`].
    pub(crate) fn remove(&mut self, key: LevelKey, free: u32) {
        self.touch(key);
        if let Some(l) = self.levels.get_mut(&key) {
            l.free -= free;
            l.nodes[free as usize] -= 1;
            if l.free == 0 {
                self.levels.remove(&key);
            }
        }
    }

    /// Emits the deltas of the current command into `out`, numbering them with the per-SKU
    /// counters in `market_seq` (index = SKU id), and forgets the touched set.
    pub(crate) fn drain_deltas(&mut self, market_seq: &mut [u64], out: &mut Vec<InventoryDelta>) {
        let mut touched = std::mem::take(&mut self.touched);
        touched.sort_unstable_by_key(|(k, _)| *k);
        for &(key, before) in &touched {
            let now = self.get(&key);
            if now != before {
                let Some(seq) = market_seq.get_mut(usize::from(key.sku.0)) else {
                    continue;
                };
                *seq += 1;
                out.push(InventoryDelta {
                    sku: key.sku,
                    market_seq: *seq,
                    region: key.region,
                    kind: key.kind,
                    price: key.price,
                    free_gpus: now.free_gpus,
                    max_single_node: now.max_single_node,
                });
            }
        }
        touched.clear();
        self.touched = touched;
    }

    /// All levels in key order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (LevelKey, Level)> + '_ {
        let mut levels: Vec<(LevelKey, Level)> =
            self.levels.iter().map(|(k, l)| (*k, l.level())).collect();
        levels.sort_unstable_by_key(|(k, _)| *k);
        levels.into_iter()
    }
}
