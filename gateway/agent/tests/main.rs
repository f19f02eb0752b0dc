//! gpux-agent integration tests: one test binary for the crate (issue 25: every test binary links the crate and
//! its dependencies, so one binary instead of one per file cuts the cold CI build). Each
//! module below was a test file of its own; run one with `cargo test -p <crate> --release
//! --test integration <module>::`.

mod e2e;
mod example_hooks;
mod hooks;
mod verify;
