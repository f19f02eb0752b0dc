//! Gateway integration tests: one test binary for the crate (issue 25: every test binary links the crate and
//! its dependencies, so one binary instead of one per file cuts the cold CI build). Each
//! module below was a test file of its own; run one with `cargo test -p <crate> --release
//! --test integration <module>::`.

mod support;

mod api;
mod binary;
mod browser;
// The typed client (gpux-client) against the real server: here, not in the client crate's own
// test binary, which linked the whole server a second time.
mod client;
mod cluster;
mod crash;
mod delivery;
mod feed;
mod finance;
mod gangs;
mod gl_reports;
mod journal;
mod journal_embedded;
mod journal_measure;
mod journal_redis;
mod market;
mod market_offers;
mod node_keys;
mod openapi;
mod redis_cluster;
mod replication;
mod sequencer;
mod server;
mod takeover;
mod tls;
mod ws;
