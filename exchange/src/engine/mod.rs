//! The engine: one struct that owns the market state and applies commands.

use crate::catalog::Catalog;
use crate::command::{Command, Meta};
use crate::event::Output;
use crate::ids::{BidId, LeaseId, NodeId, OfferId, RegionId, SkuId};
use crate::inventory::{Level, LevelKey};
use crate::limits::EngineConfig;
use crate::state::{Bid, Lease, Node, Offer};

/// Why a snapshot was refused by [`Engine::restore`].
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// Wrong magic bytes or truncated header.
    #[error("not an engine snapshot")]
    BadMagic,
    /// Written by an incompatible format version.
    #[error("unsupported snapshot format version {0}")]
    Version(u16),
    /// Checksum mismatch: the bytes were damaged.
    #[error("snapshot checksum mismatch")]
    Checksum,
    /// The payload did not decode.
    #[error("snapshot payload: {0}")]
    Decode(String),
    /// The decoded state breaks an invariant.
    #[error("snapshot state is inconsistent: {0}")]
    Inconsistent(String),
}

/// The matching engine. See the crate docs and docs/market-rules.md.
pub struct Engine {}

impl Engine {
    /// An empty market.
    pub fn new(_config: EngineConfig, _catalog: Catalog) -> Engine {
        todo!()
    }
    /// Applies one command; returns its events and inventory deltas.
    pub fn apply(&mut self, cmd: &Command, meta: Meta) -> Output {
        let mut out = Output::default();
        self.apply_into(cmd, meta, &mut out);
        out
    }
    /// Like [`Engine::apply`], appending into a reused `out` (cleared first).
    pub fn apply_into(&mut self, _cmd: &Command, _meta: Meta, _out: &mut Output) {
        todo!()
    }
    /// SHA-256 of the canonical state.
    pub fn state_hash(&self) -> [u8; 32] {
        todo!()
    }
    /// Snapshot bytes.
    pub fn snapshot(&self) -> Vec<u8> {
        todo!()
    }
    /// Restores.
    pub fn restore(_bytes: &[u8]) -> Result<Engine, SnapshotError> {
        todo!()
    }
    /// Invariants.
    pub fn check_invariants(&self) -> Result<(), String> {
        todo!()
    }
    /// Time of the last applied command, ms since epoch.
    pub fn now_ms(&self) -> i64 {
        todo!()
    }
    /// Last applied sequence number.
    pub fn last_seq(&self) -> u64 {
        todo!()
    }
    /// The catalog.
    pub fn catalog(&self) -> &Catalog {
        todo!()
    }
    /// The config.
    pub fn config(&self) -> &EngineConfig {
        todo!()
    }
    /// Region name.
    pub fn region_name(&self, _id: RegionId) -> Option<&str> {
        todo!()
    }
    /// Region id.
    pub fn region_id(&self, _name: &str) -> Option<RegionId> {
        todo!()
    }
    /// Inventory levels in key order.
    pub fn inventory(&self) -> Vec<(LevelKey, Level)> {
        todo!()
    }
    /// Last delta sequence number of a market (SKU).
    pub fn market_seq(&self, _sku: SkuId) -> u64 {
        todo!()
    }
    /// Node.
    pub fn node(&self, _id: NodeId) -> Option<&Node> {
        todo!()
    }
    /// All nodes in id order.
    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        std::iter::empty()
    }
    /// Offer.
    pub fn offer(&self, _id: OfferId) -> Option<&Offer> {
        todo!()
    }
    /// All live offers in id order.
    pub fn offers(&self) -> impl Iterator<Item = &Offer> {
        std::iter::empty()
    }
    /// Resting bid.
    pub fn bid(&self, _id: BidId) -> Option<&Bid> {
        todo!()
    }
    /// All resting bids in id order.
    pub fn bids(&self) -> impl Iterator<Item = &Bid> {
        std::iter::empty()
    }
    /// Live lease.
    pub fn lease(&self, _id: LeaseId) -> Option<&Lease> {
        todo!()
    }
    /// All live leases in id order.
    pub fn leases(&self) -> impl Iterator<Item = &Lease> {
        std::iter::empty()
    }
}
