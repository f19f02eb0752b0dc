//! # gpux — the exchange's command line (issue 16)
//!
//! For buyers (inventory, bids with a launch spec, leases, SSH), suppliers (nodes, node keys,
//! offers, earnings), finance (reports, adjustments, period closes, invoices, tax details) and
//! admins (accounts, keys, deposits, payouts). A thin layer over the typed client
//! `gpux-client` and the wire types of `gpux-wire`: it links neither actix nor the engine. The reference with an example per command is `docs/cli.md`.
//!
//! Layout:
//! - `cli`: the clap `Subcommand` enum and every command's arguments (help text, examples).
//! - `run`: the one `match` over the commands: call the client, print.
//! - `buyer`: bids (request from flags, `--wait` progress and Ctrl-C), `ssh`, `inventory
//!   --watch`.
//! - `supplier`, `admin`, `finance`: requests built from flags for those audiences.
//! - `market`: `gpux offers search` (the public offer search) and `gpux inventory`'s filters.
//! - `config`: profile file, environment and flags, in that order (URL, key, CA file).
//! - `parse`: values checked locally (prices and amounts as exact decimal strings, ids,
//!   durations, times and zones, `KEY=VALUE`, SSH public key files).
//! - `output`: tables for people, JSON Lines for programs.
//! - `error`: the one error type and its exit codes.
//!
//! Output (after cargo's `machine_message` and ripgrep's JSON printer): results go to stdout,
//! as tables, or with `--json` as JSON Lines of the API's wire types (one object per line, a
//! list as one line per item); notes, progress and errors go to stderr.
//!
//! Exit status:
//!
//! | status | meaning |
//! | --- | --- |
//! | 0 | done |
//! | 1 | refused by the exchange: a 4xx answer (`code: message` and `request_id` on stderr), or an answer that rules out what was asked (`gpux ssh` on a lease that is not running, `bid --wait` on a bid that closed unfilled) |
//! | 2 | usage or configuration error: bad flags or values (clap), no API key, unknown profile, unreadable file (profile, CA, SSH key), an output file that cannot be written |
//! | 3 | the exchange is unavailable: connection refused, a failed TLS handshake (certificate not trusted: `--ca-cert`), timeout, a 5xx answer, an answer that is not the API's |
//! | 130 | interrupted (Ctrl-C); `bid --wait` first cancels its bid if it still rests |

mod admin;
mod buyer;
mod cli;
mod config;
mod error;
mod finance;
mod market;
mod output;
mod parse;
mod run;
mod supplier;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};
use config::{Overrides, Source};
use error::CliError;

fn main() {
    let matches = cli::Cli::command().get_matches();
    let args = match cli::Cli::from_arg_matches(&matches) {
        Ok(a) => a,
        Err(e) => e.exit(),
    };
    let source = |id: &str| match matches.value_source(id) {
        Some(ValueSource::CommandLine) => Source::Flag,
        _ => Source::Env,
    };
    let overrides = Overrides {
        profile: args.profile.clone(),
        url: args.url.clone().map(|u| (u, source("url"))),
        key: args.key.clone().map(|k| (k, source("key"))),
        ca_cert: args.ca_cert.clone().map(|c| (c, source("ca_cert"))),
        file: args.config.clone(),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => fail(&CliError::Unavailable(format!("cannot start: {e}"))),
    };
    let out = output::Out { json: args.json };
    let code = runtime.block_on(async move {
        let interrupt = run::Interrupt::install();
        match run::run(args.command, overrides, out, interrupt).await {
            Ok(()) => error::EXIT_OK,
            Err(e) => fail(&e),
        }
    });
    // Don't wait for tasks still blocked (a stdin read, a websocket): exit now.
    std::process::exit(code);
}

/// Prints the error on stderr and exits with its status.
fn fail(e: &CliError) -> ! {
    output::note(format!("gpux: {e}"));
    std::process::exit(e.exit_code());
}
