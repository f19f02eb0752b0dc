//! gpux-agent: the node agent a supplier runs on each GPU host (issue 16). It registers the
//! host as a node, heartbeats its healthy GPU count, and delivers the leases the exchange
//! assigns to it through the operator's hooks (docs/api.md §2.2 and §2.2.1, §3.4.1;
//! docs/market-rules.md §11).
//!
//! Layout:
//! - [`mod@run`]: the run loop, [`run()`]: registers or finds the node with a node-scoped key,
//!   heartbeats, follows the supplier websocket, reconciles and delivers leases through the
//!   hooks until the caller's shutdown `watch` turns true. Talks to the exchange only through
//!   the typed client `gpux-client` and the wire types `gpux-wire`.
//! - [`node`]: finding or registering the node, settings sync, the heartbeat task and the
//!   GPU health probe.
//! - [`events`]: the supplier websocket as reconcile wake-ups, with reconnect and backoff.
//! - [`reconcile`]: the pure decision of what to do about each lease (the exchange's list,
//!   the saved steps, the running jobs).
//! - [`jobs`]: per-lease work: provision and teardown hooks, reports, their bounds.
//! - [`state`]: what survives a restart (`<state_dir>/state.json`, written atomically).
//! - [`clock`]: [`Clock`], injected wall-clock time.
//! - [`config`]: [`config::AgentConfig`], layered defaults ← TOML ← `GPUX_*` env ← flags
//!   (the server's `gateway/src/config.rs` shape), validated against the exchange's node
//!   rules, with every default and limit a named const.
//! - [`gpus`]: GPU discovery and health behind [`gpus::GpuSource`]: NVML ([`gpus::NvmlGpus`],
//!   loaded at run time) or a simulation ([`gpus::SimulatedGpus`], `--simulate SKU:COUNT`);
//!   the NVML model → catalog SKU table.
//! - [`hooks`]: operator hooks for provision and teardown: argv only, the lease in `GPUX_*`
//!   environment variables, own process group, time limit then SIGTERM, grace, SIGKILL;
//!   outcomes turned into the exchange's ready / failed / torn-down report contents.
//! - [`verify`]: verification leases (issue 26, docs/market-rules.md §12.2): the verify hook
//!   or simulated figures, the NVML checks, the parsers of `all_reduce_perf` and `dcgmi diag`
//!   output, the report; also `gpux-agent --verify`.
//! - [`error`]: [`AgentError`], the crate's one error type.
//!
//! Invariants:
//! - The buyer's launch spec reaches a hook only as environment values, never in a command
//!   line; the agent's own API key never reaches a hook ([`hooks`] header).
//! - No hook outlives its time limit plus grace: its whole process group is signalled, and
//!   dropping a running hook kills the group ([`hooks::run_hook`]).
//! - Every wait is bounded by a named limit and races the shutdown (STYLE model 9): hook
//!   limits from the config, [`hooks::KILL_REAP_MS`], [`hooks::OUTPUT_DRAIN_MS`],
//!   [`gpus::DISCOVERY_TIMEOUT_MS`], [`run::REQUEST_TIMEOUT_MS`], [`node::HEALTH_TIMEOUT_MS`],
//!   [`run::STOP_TIMEOUT_MS`]; at most [`jobs::MAX_CONCURRENT_HOOKS`] hooks at once.
//! - The exchange is the truth about leases: events only wake a reconcile from
//!   `GET /v1/nodes/{id}/leases`, so a lost event, a network cut or a restart never makes the
//!   agent miss a lease or provision an active one twice ([`reconcile`]).
//! - A hook's outcome is saved before it is reported ([`state`]): a lost report is sent
//!   again, not the hook run again.
//! - Every text the agent sends the exchange fits its report limit
//!   ([`hooks::MAX_REPORT_TEXT_BYTES`], the server's `delivery::MAX_REPORT_TEXT_BYTES`).
//! - The binary starts without an NVIDIA driver: NVML is loaded with `dlopen` on first use,
//!   and its absence is an error that says what to do, not a crash.
//!
//! Errors: [`AgentError`] (thiserror) in the library; `anyhow` only in `main.rs`.

pub mod clock;
pub mod config;
pub mod error;
pub mod events;
pub mod gpus;
pub mod hooks;
pub mod jobs;
pub mod node;
pub mod reconcile;
pub mod run;
pub mod state;
pub mod verify;

pub use clock::{Clock, SystemClock};
pub use error::AgentError;
pub use run::run;
