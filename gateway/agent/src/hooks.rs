//! Operator hooks: the commands that start a lease's workload (provision) and wipe it
//! (teardown). The agent never knows Docker, users or disks; the operator's hook does
//! (examples in `gateway/agent/examples/hooks/`).
//!
//! Contract (docs/api.md §2.2.1 for what the reports carry):
//! - A hook is an argument vector from the config, never a shell line. The lease reaches it
//!   **only** in environment variables ([`LeaseContext::env_vars`]); the buyer's values are
//!   never put into a command line, so `$(…)`, `;` or quotes in them are inert data.
//! - The hook's environment is cleared first: only [`INHERITED_ENV`] passes from the agent's
//!   own (so the agent's API key, `GPUX_KEY`, never reaches a hook), then the `GPUX_*` lease
//!   variables. Stdin is `/dev/null`.
//! - Each hook runs in its own process group (`process_group(0)`, the nextest pattern). At its
//!   time limit the group gets SIGTERM, then after the grace period SIGKILL
//!   ([`HookOutcome::TimedOut`]); when [`run_hook`]'s future is dropped (the agent stopping)
//!   the group gets SIGKILL. A hook that exits leaves its group alone: anything it started to
//!   outlive it (a container, a `setsid` daemon) is its business, and must not keep its
//!   stdout/stderr open (their reading stops [`OUTPUT_DRAIN_MS`] after the exit).
//! - Output is read while the hook runs, in the same task that waits for it (never on reader
//!   tasks of their own, which a busy runtime may run too late), and only the last
//!   [`MAX_HOOK_OUTPUT_BYTES`] of each stream are kept.
//! - Provision: exit 0 and the **last non-empty stdout line** is the access details as JSON
//!   ([`AccessDetails`]); exit [`LAUNCH_SPEC_EXIT_CODE`] (65, `EX_DATAERR`) says the buyer's
//!   launch spec cannot run (the image cannot be pulled, the command is invalid), reported
//!   with cause `launch_spec` (docs/market-rules.md §11.3b: no charge, no failover, the node
//!   is not held); anything else is the node's failure ([`provision_result`]).
//!   Teardown: exit 0, and the last non-empty stdout line (or [`DEFAULT_WIPE_METHOD`]) is the
//!   wipe method ([`teardown_result`]). Reasons and methods are one line of at most
//!   [`MAX_REPORT_TEXT_BYTES`] without control characters, as the exchange requires.
//!
//! Every await is bounded: the time limit, the grace period, [`KILL_REAP_MS`] after SIGKILL
//! and [`OUTPUT_DRAIN_MS`] for the output (STYLE model 9).

use crate::config::HookConfig;
use gpux_wire::FailureCauseDto;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Child;
use tokio::time::{Instant, timeout};

/// Bytes kept of each of a hook's stdout and stderr: the tail (the end says what went wrong).
pub const MAX_HOOK_OUTPUT_BYTES: usize = 64 * 1024;
/// Longest failure reason or wipe method, bytes: the exchange's limit
/// (`gateway/src/delivery.rs::MAX_REPORT_TEXT_BYTES`; 400 `invalid_report` beyond).
pub const MAX_REPORT_TEXT_BYTES: usize = 1_024;
/// How long output is still read after the hook exits, ms (a process it left behind may hold
/// the pipes open).
pub const OUTPUT_DRAIN_MS: u64 = 1_000;
/// How long the agent waits for the hook to be reaped after SIGKILL, ms (a process stuck in
/// the kernel, e.g. on a hung driver or NFS, cannot die sooner).
pub const KILL_REAP_MS: u64 = 5_000;
/// How often the agent checks, during the grace period, whether the group is gone, ms.
pub const GROUP_POLL_MS: u64 = 20;
/// Bytes read from a hook's pipe at a time.
pub const READ_CHUNK_BYTES: usize = 8 * 1024;
/// The wipe method reported when a teardown hook exits 0 without printing one.
pub const DEFAULT_WIPE_METHOD: &str = "operator teardown hook completed (no method printed)";
/// Longest stdout line quoted in a failure reason, bytes.
pub const MAX_QUOTED_LINE_BYTES: usize = 200;
/// The agent's environment variables a hook inherits; all others are removed.
pub const INHERITED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "TZ",
    "TMPDIR",
    "XDG_RUNTIME_DIR",
    "DOCKER_HOST",
    "DOCKER_CONFIG",
];
/// The provision hook's exit status that blames the buyer's launch spec: `EX_DATAERR` of
/// sysexits.h ("the input data was incorrect"). The image cannot be pulled, the command is
/// invalid: the failed report carries cause `launch_spec` and the hook's message, and the
/// exchange ends the lease at no charge without holding the node or failing the lease over
/// (it would fail the same way; docs/market-rules.md §11.3b). Any other failure is the node's.
pub const LAUNCH_SPEC_EXIT_CODE: i32 = 65;
/// `PATH` for a hook when the agent has none.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Which hook runs (`GPUX_PHASE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Start the lease's workload.
    Provision,
    /// Stop it and wipe the GPUs and disks.
    Teardown,
    /// Measure the lease's GPUs (a verification lease, issue 26: [`crate::verify`]).
    Verify,
}

impl Phase {
    /// `provision`, `teardown` or `verify`.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Provision => "provision",
            Phase::Teardown => "teardown",
            Phase::Verify => "verify",
        }
    }
}

/// What a hook learns about the lease (from the exchange's lease and launch spec, and the
/// host's discovery for the UUIDs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseContext {
    /// The lease id (decimal string).
    pub lease_id: String,
    /// The node id (decimal string).
    pub node_id: String,
    /// The lease's GPU indexes on this node (NVML indexes).
    pub gpu_indexes: Vec<u32>,
    /// Their UUIDs, in the same order.
    pub gpu_uuids: Vec<String>,
    /// Container image reference, if the buyer gave one.
    pub image: Option<String>,
    /// Command and arguments (an argument vector).
    pub command: Vec<String>,
    /// SSH public keys, one OpenSSH line each.
    pub ssh_keys: Vec<String>,
    /// Ports to expose.
    pub ports: Vec<u16>,
    /// Scratch disk, GB (0 = the node's default).
    pub disk_gb: u32,
    /// The buyer's environment variables (visible to the supplier: no secrets).
    pub env: BTreeMap<String, String>,
    /// When the lease ends, ms since the Unix epoch, if known.
    pub lease_end_ms: Option<u64>,
    /// The lease's gang, when it is a member of one (docs/market-rules.md §13).
    pub gang: Option<GangContext>,
}

/// A gang member lease's gang, as its hooks see it: enough to wire a multi-node job
/// (torchrun's `--node_rank`, `MASTER_ADDR` from rank 0's node).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GangContext {
    /// The gang's id (its bid's id).
    pub id: String,
    /// This member's rank, 0..`size`.
    pub rank: u32,
    /// Members of the gang.
    pub size: u32,
    /// The node name of each rank, in rank order (the supplier's own node names; empty where
    /// a rank has no live lease).
    pub nodes: Vec<String>,
}

impl LeaseContext {
    /// The hook's `GPUX_*` variables. Every one is always set (empty when there is nothing),
    /// so hooks can run under `set -u`:
    ///
    /// | variable | value |
    /// | --- | --- |
    /// | `GPUX_PHASE` | `provision`, `teardown` or `verify` |
    /// | `GPUX_LEASE_ID`, `GPUX_NODE_ID` | decimal ids |
    /// | `GPUX_GPUS` | number of GPUs |
    /// | `GPUX_GPU_INDEXES`, `GPUX_GPU_UUIDS` | comma lists, same order |
    /// | `GPUX_IMAGE` | image reference or empty |
    /// | `GPUX_COMMAND_JSON` | the command as a JSON array of strings |
    /// | `GPUX_SSH_KEYS` | SSH public keys, one per line |
    /// | `GPUX_PORTS` | comma list |
    /// | `GPUX_DISK_GB` | scratch disk, GB |
    /// | `GPUX_ENV_JSON` | the buyer's variables as a JSON object |
    /// | `GPUX_LEASE_END_MS` | lease end, ms since the epoch, or empty |
    /// | `GPUX_GANG_ID` | the gang's id (its bid's) when the lease is a gang member, else empty |
    /// | `GPUX_GANG_RANK` | this member's rank, 0-based, or empty |
    /// | `GPUX_GANG_SIZE` | the gang's members, or empty |
    /// | `GPUX_GANG_NODES` | node names by rank, comma list, or empty |
    pub fn env_vars(&self, phase: Phase) -> Vec<(String, String)> {
        let comma = |items: Vec<String>| items.join(",");
        let json = |v: serde_json::Result<String>| v.unwrap_or_default();
        [
            ("GPUX_PHASE", phase.as_str().to_string()),
            ("GPUX_LEASE_ID", self.lease_id.clone()),
            ("GPUX_NODE_ID", self.node_id.clone()),
            ("GPUX_GPUS", self.gpu_indexes.len().to_string()),
            (
                "GPUX_GPU_INDEXES",
                comma(self.gpu_indexes.iter().map(u32::to_string).collect()),
            ),
            ("GPUX_GPU_UUIDS", self.gpu_uuids.join(",")),
            ("GPUX_IMAGE", self.image.clone().unwrap_or_default()),
            (
                "GPUX_COMMAND_JSON",
                json(serde_json::to_string(&self.command)),
            ),
            ("GPUX_SSH_KEYS", self.ssh_keys.join("\n")),
            (
                "GPUX_PORTS",
                comma(self.ports.iter().map(u16::to_string).collect()),
            ),
            ("GPUX_DISK_GB", self.disk_gb.to_string()),
            ("GPUX_ENV_JSON", json(serde_json::to_string(&self.env))),
            (
                "GPUX_LEASE_END_MS",
                self.lease_end_ms.map(|t| t.to_string()).unwrap_or_default(),
            ),
            (
                "GPUX_GANG_ID",
                self.gang.as_ref().map(|g| g.id.clone()).unwrap_or_default(),
            ),
            (
                "GPUX_GANG_RANK",
                self.gang
                    .as_ref()
                    .map(|g| g.rank.to_string())
                    .unwrap_or_default(),
            ),
            (
                "GPUX_GANG_SIZE",
                self.gang
                    .as_ref()
                    .map(|g| g.size.to_string())
                    .unwrap_or_default(),
            ),
            (
                "GPUX_GANG_NODES",
                self.gang
                    .as_ref()
                    .map(|g| g.nodes.join(","))
                    .unwrap_or_default(),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

/// How a hook ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HookOutcome {
    /// It exited by itself within its time limit.
    Exited {
        /// Exit code; a death by signal N reads 128 + N (the shell's convention).
        code: i32,
        /// The last [`MAX_HOOK_OUTPUT_BYTES`] of stdout.
        stdout_tail: String,
        /// The last [`MAX_HOOK_OUTPUT_BYTES`] of stderr.
        stderr_tail: String,
    },
    /// It ran past its time limit; its process group got SIGTERM.
    TimedOut {
        /// Something in the group outlived the grace period and got SIGKILL.
        killed: bool,
        /// The last [`MAX_HOOK_OUTPUT_BYTES`] of stderr.
        stderr_tail: String,
    },
    /// It could not be started (no such program, not executable), or waiting for it failed.
    SpawnFailed(String),
}

/// Runs `hook` with `vars` (from [`LeaseContext::env_vars`]) added to its cleared environment.
///
/// Bounded: at most `timeout_ms + grace_ms + KILL_REAP_MS + OUTPUT_DRAIN_MS` (and a few
/// [`GROUP_POLL_MS`]). Cancel-safe: dropping the future SIGKILLs the hook's process group.
pub async fn run_hook(hook: &HookConfig, vars: &[(String, String)]) -> HookOutcome {
    let Some((program, args)) = hook.argv.split_first() else {
        return HookOutcome::SpawnFailed("no hook command configured".into());
    };
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .env_clear()
        .env(
            "PATH",
            std::env::var_os("PATH").unwrap_or_else(|| DEFAULT_PATH.into()),
        )
        .envs(
            INHERITED_ENV
                .iter()
                .filter_map(|k| Some((k, std::env::var_os(k)?))),
        )
        .envs(vars.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return HookOutcome::SpawnFailed(format!("{program}: {e}")),
    };
    let Some(pgid) = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw)
    else {
        return HookOutcome::SpawnFailed(format!("{program}: no process id after spawn"));
    };
    // From here until the group's fate is settled, dropping this future kills the group.
    let mut guard = GroupGuard(Some(pgid));
    // The pipes are read in this task, alongside the wait, never on tasks of their own: a
    // spawned reader that a busy runtime had not yet run when the drain's bound passed lost
    // output the hook had written before it exited (its access details). Here the output is
    // in the pipe when the exit is seen, and the next poll of `reading` takes it.
    let (mut stdout_tail, mut stderr_tail) = (Tail::new(), Tail::new());
    let (stdout_pipe, stderr_pipe) = (child.stdout.take(), child.stderr.take());
    let mut reading = Box::pin(async {
        tokio::join!(
            read_into(stdout_pipe, &mut stdout_tail),
            read_into(stderr_pipe, &mut stderr_tail)
        );
    });
    let mut read_all = false;
    let limit = Duration::from_millis(hook.timeout_ms);
    let waited = alongside(
        timeout(limit, child.wait()),
        reading.as_mut(),
        &mut read_all,
    )
    .await;
    let fate = match waited {
        Ok(Ok(status)) => Fate::Exited(exit_code(status)),
        Ok(Err(e)) => {
            let wait = terminate_group(&mut child, pgid, 0);
            alongside(wait, reading.as_mut(), &mut read_all).await;
            Fate::WaitFailed(format!("waiting for {program}: {e}"))
        }
        Err(_elapsed) => {
            let wait = terminate_group(&mut child, pgid, hook.grace_ms);
            Fate::TimedOut(alongside(wait, reading.as_mut(), &mut read_all).await)
        }
    };
    guard.0 = None;
    if !read_all {
        // Whatever the hook left running may hold the pipes open: read on, bounded.
        let _ = timeout(Duration::from_millis(OUTPUT_DRAIN_MS), reading.as_mut()).await;
    }
    drop(reading);
    match fate {
        Fate::Exited(code) => HookOutcome::Exited {
            code,
            stdout_tail: stdout_tail.text(),
            stderr_tail: stderr_tail.text(),
        },
        Fate::WaitFailed(reason) => HookOutcome::SpawnFailed(reason),
        Fate::TimedOut(killed) => HookOutcome::TimedOut {
            killed,
            stderr_tail: stderr_tail.text(),
        },
    }
}

/// How a started hook's process ended, before its output is attached.
enum Fate {
    /// It exited with this code (128 + signal when killed by one).
    Exited(i32),
    /// Waiting for it failed (the group was killed).
    WaitFailed(String),
    /// It ran past its limit; true when SIGKILL was needed.
    TimedOut(bool),
}

/// Runs `main` to its end while also driving `reading` (the hook's pipes, until both close;
/// `read_all` records that), so a hook blocked on a full pipe can still exit.
async fn alongside<T>(
    main: impl Future<Output = T>,
    mut reading: std::pin::Pin<&mut impl Future<Output = ()>>,
    read_all: &mut bool,
) -> T {
    tokio::pin!(main);
    loop {
        tokio::select! {
            biased;
            () = reading.as_mut(), if !*read_all => *read_all = true,
            out = &mut main => return out,
        }
    }
}

/// SIGKILLs the process group when dropped while armed.
struct GroupGuard(Option<Pid>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

/// SIGTERM to the group; the grace period for the leader to be reaped and every other member
/// to exit; then SIGKILL to the group. True when SIGKILL was needed.
async fn terminate_group(child: &mut Child, pgid: Pid, grace_ms: u64) -> bool {
    let _ = killpg(pgid, Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_millis(grace_ms);
    let mut reaped = false;
    loop {
        reaped = reaped || matches!(child.try_wait(), Ok(Some(_)));
        if reaped && !group_alive(pgid) {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        tokio::time::sleep((deadline - now).min(Duration::from_millis(GROUP_POLL_MS))).await;
    }
    let _ = killpg(pgid, Signal::SIGKILL);
    if !reaped {
        let _ = timeout(Duration::from_millis(KILL_REAP_MS), child.wait()).await;
    }
    true
}

/// Whether a process of the group still runs. `kill(-pgid, 0)` also counts zombies (members
/// that exited and wait for a reaper, which under some init processes never comes), so a
/// group that answers it is looked up in `/proc` for a member that is not a zombie; without
/// `/proc` it counts as alive (the grace period then ends in SIGKILL).
fn group_alive(pgid: Pid) -> bool {
    if killpg(pgid, None::<Signal>).is_err() {
        return false;
    }
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return true;
    };
    procs.flatten().any(|entry| {
        let is_pid = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()));
        is_pid
            && std::fs::read_to_string(entry.path().join("stat"))
                .is_ok_and(|stat| live_member(&stat, pgid.as_raw()))
    })
}

/// Whether `/proc/PID/stat` text describes a process of group `pgid` that has not exited:
/// after the command name's closing `)` come the state, the parent and the group.
fn live_member(stat: &str, pgid: i32) -> bool {
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return false;
    };
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next().unwrap_or("Z");
    let group = fields.nth(1).and_then(|g| g.parse::<i32>().ok());
    group == Some(pgid) && !matches!(state, "Z" | "X")
}

fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// The last `cap` bytes written to it.
#[derive(Debug)]
struct Tail {
    bytes: Vec<u8>,
    cap: usize,
}

impl Tail {
    fn new() -> Tail {
        Tail {
            bytes: Vec::new(),
            cap: MAX_HOOK_OUTPUT_BYTES,
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend_from_slice(chunk);
        if self.bytes.len() > self.cap {
            let extra = self.bytes.len() - self.cap;
            self.bytes.drain(..extra);
        }
    }

    /// As text: a UTF-8 sequence cut by the cap at the front is skipped, invalid bytes
    /// become U+FFFD.
    fn text(&self) -> String {
        let start = self
            .bytes
            .iter()
            .take(3)
            .take_while(|&&b| b & 0xC0 == 0x80)
            .count();
        String::from_utf8_lossy(&self.bytes[start..]).into_owned()
    }
}

/// Reads `pipe` into `tail` until it closes or fails (a missing pipe reads as closed).
async fn read_into(pipe: Option<impl AsyncRead + Unpin>, tail: &mut Tail) {
    let Some(mut pipe) = pipe else { return };
    let mut buf = vec![0u8; READ_CHUNK_BYTES];
    while let Ok(n @ 1..) = pipe.read(&mut buf).await {
        tail.push(&buf[..n]);
    }
}

/// How the buyer reaches a ready lease: the provision hook's last stdout line, and the body
/// of the exchange's ready report (`POST /v1/leases/{id}/ready`, `{"access": …}`, docs/api.md
/// §2.2.1; `gateway/src/api/launch.rs::AccessRequest`). The exchange checks each field's
/// format (host characters, user name, http(s) URLs, at most 16); the agent checks the shape
/// and that there is a way in.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessDetails {
    /// SSH host name or address.
    #[serde(default)]
    pub ssh_host: Option<String>,
    /// SSH port, 1..=65535.
    #[serde(default)]
    pub ssh_port: Option<u16>,
    /// SSH user.
    #[serde(default)]
    pub ssh_user: Option<String>,
    /// URL of each exposed port, by port (a JSON object with port-number keys).
    #[serde(default)]
    pub urls: BTreeMap<u16, String>,
}

impl AccessDetails {
    /// Parses one JSON line.
    ///
    /// # Errors
    /// What is wrong: not JSON of this shape, port 0, or neither an SSH host nor a URL.
    pub fn parse(line: &str) -> Result<AccessDetails, String> {
        let access: AccessDetails = serde_json::from_str(line).map_err(|e| e.to_string())?;
        if access.ssh_port == Some(0) || access.urls.contains_key(&0) {
            return Err("port 0 is not a port".into());
        }
        if access.ssh_host.as_deref().is_none_or(str::is_empty) && access.urls.is_empty() {
            return Err("neither ssh_host nor urls: the buyer has no way in".into());
        }
        Ok(access)
    }
}

/// Why provisioning failed, as the failed report carries it (`POST /v1/leases/{id}/failed`
/// `{reason, cause}`, docs/api.md §2.2.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProvisionFailure {
    /// Whose side the failure is on: [`FailureCauseDto::LaunchSpec`] when the hook exited
    /// [`LAUNCH_SPEC_EXIT_CODE`], else [`FailureCauseDto::Node`].
    pub cause: FailureCauseDto,
    /// The reason: one line of at most [`MAX_REPORT_TEXT_BYTES`], ending with the hook's
    /// message (its stderr tail).
    pub reason: String,
}

impl ProvisionFailure {
    /// A failure on the node's side (the default cause).
    pub fn node(reason: String) -> ProvisionFailure {
        ProvisionFailure {
            cause: FailureCauseDto::Node,
            reason,
        }
    }
}

impl std::fmt::Display for ProvisionFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.cause {
            FailureCauseDto::Node => f.write_str(&self.reason),
            FailureCauseDto::LaunchSpec => write!(f, "{} (cause: launch_spec)", self.reason),
            FailureCauseDto::GpuChanged => write!(f, "{} (cause: gpu_changed)", self.reason),
        }
    }
}

/// A provision hook's outcome as the ready report's access details, or the failure report's
/// reason and cause.
///
/// # Errors
/// A [`ProvisionFailure`] of cause `launch_spec` for an exit with [`LAUNCH_SPEC_EXIT_CODE`]
/// (its reason the hook's message: the stderr tail, else the last stdout line); of cause
/// `node` for any other non-zero exit, a time-out, a hook that could not start, or an exit 0
/// whose last stdout line is not access details. Reasons are one line of at most
/// [`MAX_REPORT_TEXT_BYTES`] and end with the tail of the hook's stderr.
pub fn provision_result(outcome: &HookOutcome) -> Result<AccessDetails, ProvisionFailure> {
    match outcome {
        HookOutcome::Exited {
            code: 0,
            stdout_tail,
            stderr_tail,
        } => {
            let line = last_line(stdout_tail);
            AccessDetails::parse(line).map_err(|why| {
                ProvisionFailure::node(report_text(
                    &format!(
                        "provision hook exited 0, but its last stdout line is not access details JSON ({why}; line: {:?})",
                        head(line, MAX_QUOTED_LINE_BYTES)
                    ),
                    stderr_tail,
                ))
            })
        }
        HookOutcome::Exited {
            code: LAUNCH_SPEC_EXIT_CODE,
            stdout_tail,
            stderr_tail,
        } => {
            let message = if one_line(stderr_tail).is_empty() {
                last_line(stdout_tail)
            } else {
                stderr_tail
            };
            Err(ProvisionFailure {
                cause: FailureCauseDto::LaunchSpec,
                reason: report_text(
                    &format!(
                        "the launch spec cannot run (provision hook exited with code {LAUNCH_SPEC_EXIT_CODE})"
                    ),
                    message,
                ),
            })
        }
        other => Err(ProvisionFailure::node(failure_reason(
            Phase::Provision,
            other,
        ))),
    }
}

/// A teardown hook's outcome as the torn-down report's wipe method, or a failure.
///
/// # Errors
/// The reason (one line, at most [`MAX_REPORT_TEXT_BYTES`]) for a non-zero exit, a time-out or
/// a hook that could not start.
pub fn teardown_result(outcome: &HookOutcome) -> Result<String, String> {
    match outcome {
        HookOutcome::Exited {
            code: 0,
            stdout_tail,
            ..
        } => {
            let method = one_line(last_line(stdout_tail));
            Ok(if method.is_empty() {
                DEFAULT_WIPE_METHOD.to_string()
            } else {
                head(&method, MAX_REPORT_TEXT_BYTES).to_string()
            })
        }
        other => Err(failure_reason(Phase::Teardown, other)),
    }
}

/// Why a hook failed, with its stderr tail: one line of at most [`MAX_REPORT_TEXT_BYTES`].
pub fn failure_reason(phase: Phase, outcome: &HookOutcome) -> String {
    let name = phase.as_str();
    match outcome {
        HookOutcome::Exited {
            code, stderr_tail, ..
        } => report_text(&format!("{name} hook exited with code {code}"), stderr_tail),
        HookOutcome::TimedOut {
            killed,
            stderr_tail,
        } => report_text(
            &format!(
                "{name} hook timed out (hooks.{name}.timeout_ms){}",
                if *killed { " and was killed" } else { "" }
            ),
            stderr_tail,
        ),
        HookOutcome::SpawnFailed(e) => report_text(&format!("{name} hook could not start"), e),
    }
}

/// `what: detail` as one line of at most [`MAX_REPORT_TEXT_BYTES`] without control
/// characters: `what` is kept from its start, `detail` (a stderr tail) from its end.
pub fn report_text(what: &str, detail: &str) -> String {
    const CUT: &str = "…";
    let what = head(&one_line(what), MAX_REPORT_TEXT_BYTES / 2).to_string();
    let detail = one_line(detail);
    if detail.is_empty() {
        return what;
    }
    let room = MAX_REPORT_TEXT_BYTES - what.len() - ": ".len();
    if detail.len() <= room {
        return format!("{what}: {detail}");
    }
    format!("{what}: {CUT}{}", tail(&detail, room - CUT.len()))
}

/// The last line of `text` that is not blank, trimmed.
fn last_line(text: &str) -> &str {
    text.lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or("")
}

/// Lines trimmed and joined with ` | `, other control characters as spaces.
fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" | ")
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// At most `max` bytes from the start, cut at a character boundary.
fn head(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// At most `max` bytes from the end, cut at a character boundary.
fn tail(s: &str, max: usize) -> &str {
    let mut start = s.len().saturating_sub(max);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_text_is_one_bounded_line_keeping_the_stderr_tail() {
        assert_eq!(report_text("hook failed", ""), "hook failed");
        assert_eq!(
            report_text(
                "hook failed",
                "pulling\n\n  image pull failed: manifest unknown\n"
            ),
            "hook failed: pulling | image pull failed: manifest unknown"
        );
        assert_eq!(report_text("a\tb", "c\rd\r\ne"), "a b: c d | e");
        let long = format!("{}THE END", "é".repeat(2_000));
        let text = report_text("provision hook exited with code 1", &long);
        assert!(text.len() <= MAX_REPORT_TEXT_BYTES, "{}", text.len());
        assert!(text.starts_with("provision hook exited with code 1: …é"));
        assert!(text.ends_with("THE END"));
        let huge_what = "w".repeat(5_000);
        assert!(report_text(&huge_what, &long).len() <= MAX_REPORT_TEXT_BYTES);
        assert!(!text.chars().any(char::is_control));
    }

    #[test]
    fn the_tail_keeps_the_last_bytes_and_skips_a_cut_character() {
        let mut t = Tail {
            bytes: Vec::new(),
            cap: 4,
        };
        t.push(b"ab");
        t.push(b"cdef");
        assert_eq!(t.text(), "cdef");
        t.push("xé".as_bytes()); // "cdefxé" is 7 bytes: the last 4 are "fxé"
        assert_eq!(t.bytes.len(), 4);
        assert_eq!(t.text(), "fxé");
        t.push("éé".as_bytes()); // 4 bytes exactly
        assert_eq!(t.text(), "éé");
        t.push("a".as_bytes()); // drops the first byte of an é
        assert_eq!(t.text(), "éa");
    }

    #[test]
    fn a_group_member_is_live_unless_it_is_a_zombie() {
        let stat = |state: &str, pgrp: i32| format!("4242 (sle ep) {state} 1 {pgrp} {pgrp} 0 -1");
        assert!(live_member(&stat("S", 77), 77));
        assert!(live_member(&stat("R", 77), 77));
        assert!(live_member(&stat("D", 77), 77)); // stuck in the kernel: still there
        assert!(!live_member(&stat("Z", 77), 77));
        assert!(!live_member(&stat("S", 78), 77));
        assert!(!live_member("garbage", 77));
    }

    #[test]
    fn access_details_parse_the_ready_reports_shape() {
        let a = AccessDetails::parse(
            r#"{"ssh_host":"203.0.113.7","ssh_port":2222,"ssh_user":"root","urls":{"8888":"https://x.example/"}}"#,
        )
        .unwrap();
        assert_eq!(a.ssh_host.as_deref(), Some("203.0.113.7"));
        assert_eq!(a.ssh_port, Some(2222));
        assert_eq!(
            a.urls.get(&8888).map(String::as_str),
            Some("https://x.example/")
        );
        // Serialized back, it is the wire's shape (port keys as strings).
        let wire = serde_json::to_value(&a).unwrap();
        assert_eq!(wire["urls"]["8888"], "https://x.example/");
        assert_eq!(wire["ssh_port"], 2222);
        let web = AccessDetails::parse(r#"{"urls":{"8888":"https://nb.example/"}}"#).unwrap();
        assert_eq!(web.ssh_host, None);
        for (bad, why) in [
            ("{}", "no way in"),
            (r#"{"ssh_host":""}"#, "no way in"),
            (r#"{"ssh_host":"h","ssh_port":0}"#, "port 0"),
            (r#"{"ssh_host":"h","ssh_port":70000}"#, "invalid value"),
            (r#"{"ssh_host":"h","password":"x"}"#, "unknown field"),
            (r#"{"urls":{"web":"https://x"}}"#, "invalid"),
            ("ready!", "expected"),
        ] {
            let err = AccessDetails::parse(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn every_lease_variable_is_set_even_when_empty() {
        let vars = LeaseContext::default().env_vars(Phase::Teardown);
        let names: Vec<&str> = vars.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "GPUX_PHASE",
                "GPUX_LEASE_ID",
                "GPUX_NODE_ID",
                "GPUX_GPUS",
                "GPUX_GPU_INDEXES",
                "GPUX_GPU_UUIDS",
                "GPUX_IMAGE",
                "GPUX_COMMAND_JSON",
                "GPUX_SSH_KEYS",
                "GPUX_PORTS",
                "GPUX_DISK_GB",
                "GPUX_ENV_JSON",
                "GPUX_LEASE_END_MS",
                "GPUX_GANG_ID",
                "GPUX_GANG_RANK",
                "GPUX_GANG_SIZE",
                "GPUX_GANG_NODES",
            ]
        );
        let get = |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("GPUX_PHASE"), Some("teardown"));
        assert_eq!(get("GPUX_GPUS"), Some("0"));
        assert_eq!(get("GPUX_COMMAND_JSON"), Some("[]"));
        assert_eq!(get("GPUX_ENV_JSON"), Some("{}"));
        assert_eq!(get("GPUX_LEASE_END_MS"), Some(""));
    }
}
