//! # gateway — the exchange server
//!
//! Layout (docs/ARCHITECTURE.md has the picture):
//! - [`journal`]: the durable command journal — one trait, a Redis Streams backend and an
//!   embedded (redb) backend, one shared test suite.
//! - [`market`]: the engine and the ledger as one deterministic state machine over journaled
//!   operations ([`market::Op`]), with [`accounts`] (roles, key hashes), [`delivery`] (launch
//!   specs, reports, lease records), [`audit`] (who moved money or changed access) and
//!   [`tax`] (accounts' tax details, frozen into each closed period).
//! - [`sequencer`]: the one task that owns the market: journals, applies, replies, publishes;
//!   [`leadership`]: which gateway leads a Redis journal (a lease with a fencing epoch);
//!   [`cluster`]: process roles on one journal, followers forwarding commands to the leader.
//! - [`api`]: REST and websocket handlers over the sequencer; [`server`] and [`app`] run them;
//!   [`feed`] fans the market out to subscribers; [`wire_conv`] maps domain types onto the
//!   wire types (`gpux-wire`).
//! - [`config`], [`metrics`], [`demo`], [`tls`]: configuration, Prometheus metrics, the demo
//!   market, TLS termination with certificate reload.
//!
//! Invariants: a command is acknowledged only after the journal confirms it durable; the
//! journal never holds a gap or a duplicate sequence number; `market`, `accounts`, `audit`,
//! `tax`, `journal` and `sequencer` never use `api`, `server` or `feed`.

pub mod accounts;
pub mod api;
pub mod app;
pub mod audit;
pub mod cluster;
pub mod config;
pub mod delivery;
pub mod demo;
pub mod feed;
pub mod journal;
pub mod leadership;
pub mod market;
pub mod metrics;
pub mod node_facts;
pub mod placements;
pub mod sequencer;
pub mod server;
pub mod tax;
pub mod tls;
pub mod wire_conv;
