//! Settlement integration tests: one test binary for the crate (issue 25: every test binary links the crate and
//! its dependencies, so one binary instead of one per file cuts the cold CI build). Each
//! module below was a test file of its own; run one with `cargo test -p <crate> --release
//! --test integration <module>::`.

mod common;

mod adjustments;
mod close;
mod close_props;
mod delivery;
mod gl;
mod invoice;
mod ledger;
mod props;
mod reports;
mod rounding;
mod sla_terms;
