//! # exchange — the GPU-capacity matching engine
//!
//! A pure, deterministic, in-memory market: suppliers' offers (asks) on GPU nodes and buyers'
//! bids become leases on concrete GPUs, by price-time priority at the maker's price, with
//! preemption of preemptible leases, heartbeat timeouts and failover. The rules are specified
//! in `docs/market-rules.md`.
//!
//! ## Layout
//! - [`ids`], [`price`], [`catalog`], [`limits`]: identifiers, exact prices (0.0001 CNY per
//!   GPU-hour ticks), the SKU catalog (data), named limits and configuration.
//! - [`models`]: the GPU model table (NVML name and memory → catalog SKU), shared with
//!   `gpux-agent` and used to check attestations (docs/market-rules.md §12.1).
//! - [`command`]: what callers send ([`Command`] with [`Meta`]).
//! - [`event`]: what the engine answers ([`Output`]: [`Event`]s and [`InventoryDelta`]s).
//! - [`state`]: the canonical records (nodes, offers, resting bids, live leases).
//! - [`inventory`]: the aggregate buyers see, per (SKU, region, kind, price).
//! - [`verify`]: verification runs (§12.2): figures, the per-SKU reference table, the judgment.
//! - [`reliability`]: the reliability score of nodes and suppliers from the engine's events,
//!   in daily buckets over a 30-day window (docs/market-rules.md §12.3).
//! - `engine/`: [`Engine`] — `apply`, matching, time advancement, invariants, snapshots.
//!
//! ## Invariants
//! - No IO, clock, RNG, threads or hash-map iteration in any output: the same commands give the
//!   same events, deltas and [`Engine::state_hash`] in every process.
//! - A rejected command changes nothing but the advance of time (docs/market-rules.md §1).
//! - After every command the inventory equals a recomputation from raw state, counts no GPU
//!   that is leased, unhealthy, offline, draining or withdrawn, and no resting bid can fill
//!   ([`Engine::check_invariants`]).
//! - Arithmetic on times and counts is checked or saturating; no input panics the engine.

pub mod catalog;
pub mod command;
mod engine;
pub mod event;
pub mod ids;
pub mod inventory;
pub mod limits;
pub mod models;
pub mod price;
pub mod reliability;
pub mod state;
pub mod verify;

pub use catalog::{Catalog, Sku};
pub use command::{
    AttestedGpu, BidSpec, Command, Constraints, GangScope, GangSpec, Interconnect, Jurisdiction,
    LeaseKind, MemberLoss, Meta, NodeFabric, NodeSpec, NodeUpdate, OfferTerms, Placement, SlaFloor,
    SlaPromise, TimeInForce, TrustConstraints,
};
pub use engine::{Engine, Gang, GangGroup, Member, SnapshotError, VerifyStatus};
pub use event::HoldReason;
pub use event::{
    AttestationMismatch, BidCloseReason, CloseDetail, EndReason, Event, Exclusion, InventoryDelta,
    Maker, NoticeReason, Output, RejectReason,
};
pub use ids::{AccountId, BidId, LeaseId, NodeId, OfferId, RegionId, SkuId};
pub use inventory::{Level, LevelKey};
pub use limits::EngineConfig;
pub use price::{Price, PriceError};
