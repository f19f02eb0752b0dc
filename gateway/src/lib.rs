//! # gateway — the exchange server
//!
//! Layout (grows with issues 4–5):
//! - [`journal`]: the durable command journal — one trait, a Redis Streams backend and an
//!   embedded (redb) backend, one shared test suite.
//!
//! Invariants: a command is acknowledged only after the journal confirms it durable; the
//! journal never holds a gap or a duplicate sequence number.

pub mod accounts;
pub mod api;
pub mod app;
pub mod config;
pub mod delivery;
pub mod demo;
pub mod feed;
pub mod journal;
pub mod market;
pub mod metrics;
pub mod sequencer;
pub mod server;
pub mod wire_conv;
