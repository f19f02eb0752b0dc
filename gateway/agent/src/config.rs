//! The agent's configuration, layered like the server's (`gateway/src/config.rs`): built-in
//! defaults, then a TOML file (`--config`, else [`DEFAULT_CONFIG_PATH`] when it exists), then
//! `GPUX_*` environment variables (nested keys with `__`, e.g.
//! `GPUX_HOOKS__PROVISION__TIMEOUT_MS=300000`), then command-line flags.
//!
//! Only the agent's own keys are read from the environment ([`KEYS`]), so a host that also
//! runs the server (`GPUX_LISTEN`, `GPUX_API__…`) or the `gpux` CLI does not trip the
//! agent's unknown-key check. The API key belongs in `GPUX_KEY` or a file readable only by the
//! agent's user (flags show up in `ps`); [`AgentConfig`]'s `Debug` never prints it.
//!
//! [`AgentConfig::validate`] checks every value against the exchange's rules (docs/api.md
//! §2.2 `POST /v1/nodes`: name, region, jurisdiction, interconnect) and the agent's named
//! limits below, and names the bad key.
//!
//! TLS: an `https://` `url` speaks HTTPS and WSS, checking the exchange's certificate against
//! the system's CA certificates and, for a private CA, the PEM file `ca_cert` (`--ca-cert`,
//! `GPUX_CA_CERT`); [`AgentConfig::client`] builds the client from both.

use crate::error::AgentError;
use crate::gpus::SimulatedGpus;
use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use gpux_client::{Client, ClientOptions};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Read when `--config` is not given and the file exists.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/gpux-agent/agent.toml";
/// Where the agent remembers its node id and leases across restarts.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/gpux-agent";
/// The exchange the agent talks to when none is configured (a local server's default listen).
pub const DEFAULT_URL: &str = "http://127.0.0.1:8080";
/// Heartbeat period, ms.
pub const DEFAULT_HEARTBEAT_PERIOD_MS: u64 = 3_000;
/// Shortest heartbeat period, ms (faster only loads the exchange).
pub const MIN_HEARTBEAT_PERIOD_MS: u64 = 200;
/// Longest heartbeat period, ms: the exchange marks a node offline after 15 s without one
/// (docs/api.md §2.2), so one late or lost heartbeat must still leave time for the next.
pub const MAX_HEARTBEAT_PERIOD_MS: u64 = 7_000;
/// Heartbeat jitter, a fraction of the period (±10 %): spreads a fleet's heartbeats.
pub const DEFAULT_HEARTBEAT_JITTER: f64 = 0.1;
/// Largest heartbeat jitter fraction.
pub const MAX_HEARTBEAT_JITTER: f64 = 0.5;
/// Provision hook time limit, ms (10 minutes). The lease's own deadline is the offer's
/// `provision_s` (default 180 s, at most 1,800 s); the run loop bounds a hook by both.
pub const DEFAULT_PROVISION_TIMEOUT_MS: u64 = 600_000;
/// Teardown hook time limit, ms (10 minutes: the exchange's teardown deadline, docs/api.md
/// §2.2.1; a wipe that takes longer holds the node anyway).
pub const DEFAULT_TEARDOWN_TIMEOUT_MS: u64 = 600_000;
/// Time between SIGTERM and SIGKILL of a hook's process group, ms.
pub const DEFAULT_GRACE_MS: u64 = 10_000;
/// Default time limit of the verify hook, ms: 15 minutes (issue 26; the example hook's GEMM,
/// copy, all-reduce and `dcgmi diag -r 1` take a few minutes on 8 GPUs, an image pull more).
pub const DEFAULT_VERIFY_TIMEOUT_MS: u64 = 900_000;
/// Longest hook time limit, ms (30 minutes: the longest `provision_s`).
pub const MAX_HOOK_TIMEOUT_MS: u64 = 1_800_000;
/// Longest grace period, ms.
pub const MAX_GRACE_MS: u64 = 120_000;
/// Most arguments of a hook command.
pub const MAX_HOOK_ARGS: usize = 64;
/// Longest hook argument, bytes.
pub const MAX_HOOK_ARG_BYTES: usize = 4_096;
/// The top-level keys, the only ones read from `GPUX_*` variables.
pub const KEYS: &[&str] = &[
    "url",
    "ca_cert",
    "key",
    "name",
    "sku",
    "region",
    "jurisdiction",
    "interconnect",
    "nvlink",
    "fabric_domain",
    "nic_gbps",
    "heartbeat_period_ms",
    "heartbeat_jitter",
    "simulate",
    "simulate_health_file",
    "simulate_verify",
    "nvml_lib",
    "hooks",
    "state_dir",
];

/// How the node's GPUs reach other nodes (docs/api.md §2.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Interconnect {
    /// PCI Express only.
    #[default]
    Pcie,
    /// RDMA over Converged Ethernet.
    Roce,
    /// InfiniBand.
    Infiniband,
}

/// One operator hook: a command run for each lease (see [`crate::hooks`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HookConfig {
    /// Program and arguments, never a shell line (write `["/bin/sh", "-c", "…"]` for a shell);
    /// the lease comes only in `GPUX_*` environment variables. Empty: no hook.
    pub argv: Vec<String>,
    /// Time limit from start to exit, ms, 1..=[`MAX_HOOK_TIMEOUT_MS`].
    pub timeout_ms: u64,
    /// After the time limit: SIGTERM to the hook's process group, this long, then SIGKILL, ms,
    /// 0..=[`MAX_GRACE_MS`].
    pub grace_ms: u64,
}

impl HookConfig {
    fn with_timeout(timeout_ms: u64) -> HookConfig {
        HookConfig {
            argv: Vec::new(),
            timeout_ms,
            grace_ms: DEFAULT_GRACE_MS,
        }
    }
}

impl Default for HookConfig {
    fn default() -> Self {
        HookConfig::with_timeout(DEFAULT_PROVISION_TIMEOUT_MS)
    }
}

/// The provision and teardown hooks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Hooks {
    /// Starts a lease's workload; its last stdout line is the access details (JSON).
    pub provision: HookConfig,
    /// Stops it and wipes the GPUs and disks; its last stdout line is the wipe method.
    pub teardown: HookConfig,
    /// Optional (issue 26): measures a verification lease's GPUs; its last stdout line is the
    /// figures (JSON, [`crate::verify::HookFigures`]). Without it: the simulated figures
    /// (`simulate_verify`) on a simulated host, else none (the exchange judges that failed).
    pub verify: HookConfig,
}

impl Default for Hooks {
    fn default() -> Self {
        Hooks {
            provision: HookConfig::with_timeout(DEFAULT_PROVISION_TIMEOUT_MS),
            teardown: HookConfig::with_timeout(DEFAULT_TEARDOWN_TIMEOUT_MS),
            verify: HookConfig::with_timeout(DEFAULT_VERIFY_TIMEOUT_MS),
        }
    }
}

/// Everything the agent needs.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    /// The exchange's base URL, `http(s)://host[:port]` (default [`DEFAULT_URL`]); several
    /// API processes of one exchange comma-separated.
    pub url: String,
    /// A PEM file of CA certificates trusted besides the system's, for an `https://` exchange
    /// whose certificate a private CA issued (default: none, the system's CAs only).
    pub ca_cert: Option<PathBuf>,
    /// The API key: a node key made for `name` (docs/api.md §1.3.1), or the supplier's account
    /// key (prefer `GPUX_KEY`). Required to run.
    pub key: Option<String>,
    /// Node name, 1..=64 of `[A-Za-z0-9._-]`, unique per supplier. Required to run.
    pub name: String,
    /// Catalog SKU id (e.g. `H100-80G`); default: recognized from the GPU model.
    pub sku: Option<String>,
    /// Region, 1..=32 of `[a-z0-9-]`, e.g. `cn-east-2`. Required to run.
    pub region: String,
    /// ISO 3166-1 alpha-2 code, upper case, e.g. `CN`. Required to run.
    pub jurisdiction: String,
    /// Interconnect (default `pcie`).
    pub interconnect: Interconnect,
    /// GPUs linked with NVLink (default false).
    pub nvlink: bool,
    /// Your name for the IB/RoCE fabric the host is on (issue 27, docs/market-rules.md §13):
    /// 1..=64 of `[A-Za-z0-9._-]`; hosts with the same domain can take one gang. Absent: on no
    /// shared fabric (an absent value leaves the node's registered domain as it is).
    pub fabric_domain: Option<String>,
    /// The host's NIC bandwidth, Gbit/s (1..=25600), registered with the fabric domain.
    pub nic_gbps: Option<u32>,
    /// Heartbeat period, ms, [`MIN_HEARTBEAT_PERIOD_MS`]..=[`MAX_HEARTBEAT_PERIOD_MS`].
    pub heartbeat_period_ms: u64,
    /// Heartbeat jitter, a fraction of the period, 0..=[`MAX_HEARTBEAT_JITTER`].
    pub heartbeat_jitter: f64,
    /// `SKU:COUNT`: simulate this host's GPUs instead of asking NVML (tests, load tests).
    pub simulate: Option<String>,
    /// With `simulate`: a file listing unhealthy GPUs, `INDEX [problem]` per line.
    pub simulate_health_file: Option<PathBuf>,
    /// With `simulate` and no `hooks.verify`: the figures a verification reports (issue 26),
    /// e.g. `[simulate_verify]` `bf16_tflops = 760.0` — so a demo or test node ends verified,
    /// degraded or failed as configured. Absent: no figures.
    pub simulate_verify: Option<crate::verify::SimulatedFigures>,
    /// Path of libnvidia-ml (default: `libnvidia-ml.so.1`, then `libnvidia-ml.so`).
    pub nvml_lib: Option<PathBuf>,
    /// Operator hooks.
    pub hooks: Hooks,
    /// Where the agent keeps its node id and leases across restarts.
    pub state_dir: PathBuf,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            url: DEFAULT_URL.into(),
            ca_cert: None,
            key: None,
            name: String::new(),
            sku: None,
            region: String::new(),
            jurisdiction: String::new(),
            interconnect: Interconnect::default(),
            nvlink: false,
            fabric_domain: None,
            nic_gbps: None,
            heartbeat_period_ms: DEFAULT_HEARTBEAT_PERIOD_MS,
            heartbeat_jitter: DEFAULT_HEARTBEAT_JITTER,
            simulate: None,
            simulate_health_file: None,
            simulate_verify: None,
            nvml_lib: None,
            hooks: Hooks::default(),
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
        }
    }
}

impl std::fmt::Debug for AgentConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentConfig")
            .field("url", &self.url)
            .field("ca_cert", &self.ca_cert)
            .field("key", &self.key.as_ref().map(|_| "<redacted>"))
            .field("name", &self.name)
            .field("sku", &self.sku)
            .field("region", &self.region)
            .field("jurisdiction", &self.jurisdiction)
            .field("interconnect", &self.interconnect)
            .field("nvlink", &self.nvlink)
            .field("fabric_domain", &self.fabric_domain)
            .field("nic_gbps", &self.nic_gbps)
            .field("heartbeat_period_ms", &self.heartbeat_period_ms)
            .field("heartbeat_jitter", &self.heartbeat_jitter)
            .field("simulate", &self.simulate)
            .field("simulate_health_file", &self.simulate_health_file)
            .field("simulate_verify", &self.simulate_verify)
            .field("nvml_lib", &self.nvml_lib)
            .field("hooks", &self.hooks)
            .field("state_dir", &self.state_dir)
            .finish()
    }
}

impl AgentConfig {
    /// Defaults ← `file` ← `GPUX_*` env (the agent's [`KEYS`] only) ← `overrides` (the
    /// command-line flags that were given: a struct or map serializing only those). Not
    /// validated: call [`AgentConfig::validate`].
    ///
    /// # Errors
    /// [`AgentError::ConfigLoad`]: a missing or malformed file, an unknown key, a value of
    /// the wrong type.
    pub fn load(
        file: Option<&Path>,
        overrides: &impl Serialize,
    ) -> Result<AgentConfig, AgentError> {
        let mut f = Figment::from(Serialized::defaults(AgentConfig::default()));
        if let Some(p) = file {
            f = f.merge(Toml::file_exact(p));
        }
        f.merge(Env::prefixed("GPUX_").split("__").filter(|k| {
            let top = k.as_str().split('.').next().unwrap_or_default();
            KEYS.iter().any(|key| key.eq_ignore_ascii_case(top))
        }))
        .merge(Serialized::defaults(overrides))
        .extract()
        .map_err(|e| AgentError::ConfigLoad(Box::new(e)))
    }

    /// The configuration file to read: `given`, else [`DEFAULT_CONFIG_PATH`] when it exists.
    pub fn file_to_read(given: Option<&Path>) -> Option<PathBuf> {
        given.map(Path::to_path_buf).or_else(|| {
            let default = PathBuf::from(DEFAULT_CONFIG_PATH);
            default.is_file().then_some(default)
        })
    }

    /// Checks everything the agent needs to run against the exchange: the GPU source
    /// ([`AgentConfig::validate_gpus`]), timing, hooks, state directory and the node's identity.
    ///
    /// # Errors
    /// [`AgentError::Config`] naming the first bad key, or [`AgentError::Simulate`].
    pub fn validate(&self) -> Result<(), AgentError> {
        self.validate_gpus()?;
        if !(MIN_HEARTBEAT_PERIOD_MS..=MAX_HEARTBEAT_PERIOD_MS).contains(&self.heartbeat_period_ms)
        {
            return Err(AgentError::config(
                "heartbeat_period_ms",
                format!(
                    "{MIN_HEARTBEAT_PERIOD_MS}..={MAX_HEARTBEAT_PERIOD_MS} ms (the exchange takes a node offline after 15 s without a heartbeat)"
                ),
            ));
        }
        if !(0.0..=MAX_HEARTBEAT_JITTER).contains(&self.heartbeat_jitter) {
            return Err(AgentError::config(
                "heartbeat_jitter",
                format!("a fraction of the period in 0..={MAX_HEARTBEAT_JITTER}"),
            ));
        }
        // A simulated host may run without hooks (the run loop then simulates delivery).
        let hooks_required = self.simulate.is_none();
        check_hook("hooks.provision", &self.hooks.provision, hooks_required)?;
        check_hook("hooks.teardown", &self.hooks.teardown, hooks_required)?;
        check_hook("hooks.verify", &self.hooks.verify, false)?;
        if self.state_dir.as_os_str().is_empty() {
            return Err(AgentError::config(
                "state_dir",
                "a directory path is required",
            ));
        }
        self.validate_identity()
    }

    /// Checks what GPU discovery needs (`sku`, `simulate`, `simulate_health_file`): enough for
    /// `--discover`.
    ///
    /// # Errors
    /// [`AgentError::Config`] naming the bad key, or [`AgentError::Simulate`].
    pub fn validate_gpus(&self) -> Result<(), AgentError> {
        if let Some(sku) = &self.sku
            && !id_chars(sku, 32, |b| {
                b.is_ascii_alphanumeric() || b"-._".contains(&b)
            })
        {
            return Err(AgentError::config(
                "sku",
                "a catalog SKU id is 1..=32 of [A-Za-z0-9._-], e.g. H100-80G",
            ));
        }
        if let Some(spec) = &self.simulate {
            SimulatedGpus::parse(spec)?;
        } else if self.simulate_health_file.is_some() {
            return Err(AgentError::config(
                "simulate_health_file",
                "only with simulate (real GPUs' health comes from NVML)",
            ));
        } else if self.simulate_verify.is_some() {
            return Err(AgentError::config(
                "simulate_verify",
                "only with simulate (real GPUs are measured by hooks.verify)",
            ));
        }
        if let Some(v) = &self.simulate_verify {
            v.validate()?;
        }
        Ok(())
    }

    /// The exchange and the node as it registers (docs/api.md §2.2 `POST /v1/nodes`).
    fn validate_identity(&self) -> Result<(), AgentError> {
        let url_ok = ["http://", "https://"].iter().any(|scheme| {
            self.url.strip_prefix(scheme).is_some_and(|rest| {
                !rest.is_empty()
                    && !rest.starts_with('/')
                    && rest.bytes().all(|b| b.is_ascii_graphic())
            })
        });
        if !url_ok {
            return Err(AgentError::config(
                "url",
                format!("{:?} is not an http(s):// URL of the exchange", self.url),
            ));
        }
        match &self.key {
            Some(k) if !k.is_empty() && k.bytes().all(|b| b.is_ascii_graphic()) => {}
            Some(_) => {
                return Err(AgentError::config(
                    "key",
                    "an API key is printable ASCII without spaces",
                ));
            }
            None => {
                return Err(AgentError::config(
                    "key",
                    "the supplier's API key is required (set GPUX_KEY)",
                ));
            }
        }
        if !id_chars(&self.name, 64, |b| {
            b.is_ascii_alphanumeric() || b"._-".contains(&b)
        }) {
            return Err(AgentError::config(
                "name",
                "the node name is 1..=64 of [A-Za-z0-9._-], unique among the supplier's nodes",
            ));
        }
        if !id_chars(&self.region, 32, |b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'
        }) {
            return Err(AgentError::config(
                "region",
                "a region is 1..=32 of [a-z0-9-], one of the exchange's regions, e.g. cn-east-2",
            ));
        }
        if !(self.jurisdiction.len() == 2
            && self.jurisdiction.bytes().all(|b| b.is_ascii_uppercase()))
        {
            return Err(AgentError::config(
                "jurisdiction",
                "an ISO 3166-1 alpha-2 code in upper case, e.g. CN",
            ));
        }
        Ok(())
    }

    /// The exchange's client: `url` with `key`, trusting `ca_cert`'s CA certificates besides
    /// the system's. Reads the CA file once.
    ///
    /// # Errors
    /// [`AgentError::Config`] naming `url` (not `http(s)://host…`, or a key a header cannot
    /// carry) or `ca_cert` (a file that cannot be read or holds no certificate).
    pub fn client(&self) -> Result<Client, AgentError> {
        // The URL and key first, without the CA file, so that an error names its setting.
        let plain = Client::new(&self.url, self.key.clone())
            .map_err(|e| AgentError::config("url", e.to_string()))?;
        match &self.ca_cert {
            None => Ok(plain),
            Some(ca) => {
                let opts = ClientOptions::default().with_ca_cert(ca);
                Client::new_with_options(&self.url, self.key.clone(), &opts)
                    .map_err(|e| AgentError::config("ca_cert", e.to_string()))
            }
        }
    }

    /// The wait before the next heartbeat, ms: the period moved by up to ±`heartbeat_jitter`
    /// of itself, by `unit` in `[0, 1)` (a random draw; 0.5 is the period itself). At least 1.
    pub fn heartbeat_delay_ms(&self, unit: f64) -> u64 {
        let unit = if unit.is_finite() {
            unit.clamp(0.0, 1.0)
        } else {
            0.5
        };
        let period = self.heartbeat_period_ms as f64;
        let delay = period * (1.0 + self.heartbeat_jitter * (2.0 * unit - 1.0));
        // In range: period ≤ MAX_HEARTBEAT_PERIOD_MS and jitter ≤ MAX_HEARTBEAT_JITTER.
        (delay.round() as u64).max(1)
    }
}

fn id_chars(s: &str, max: usize, ok: impl Fn(u8) -> bool) -> bool {
    !s.is_empty() && s.len() <= max && s.bytes().all(ok)
}

fn check_hook(field: &str, hook: &HookConfig, required: bool) -> Result<(), AgentError> {
    let err = |key: &str, message: String| AgentError::config(format!("{field}.{key}"), message);
    match hook.argv.first() {
        None if required => {
            return Err(err(
                "argv",
                "a command is required (an argument vector, e.g. [\"/etc/gpux-agent/hooks/docker-provision.sh\"]; see gateway/agent/examples/hooks)".into(),
            ));
        }
        Some(program) if program.is_empty() => {
            return Err(err("argv", "the program (first element) is empty".into()));
        }
        _ => {}
    }
    if hook.argv.len() > MAX_HOOK_ARGS
        || hook
            .argv
            .iter()
            .any(|a| a.len() > MAX_HOOK_ARG_BYTES || a.contains('\0'))
    {
        return Err(err(
            "argv",
            format!(
                "at most {MAX_HOOK_ARGS} arguments of at most {MAX_HOOK_ARG_BYTES} bytes, without NUL"
            ),
        ));
    }
    if !(1..=MAX_HOOK_TIMEOUT_MS).contains(&hook.timeout_ms) {
        return Err(err("timeout_ms", format!("1..={MAX_HOOK_TIMEOUT_MS} ms")));
    }
    if hook.grace_ms > MAX_GRACE_MS {
        return Err(err("grace_ms", format!("0..={MAX_GRACE_MS} ms")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// No command-line flags (overrides must serialize to a map).
    const NO_FLAGS: BTreeMap<String, String> = BTreeMap::new();

    fn valid() -> AgentConfig {
        AgentConfig {
            key: Some("gpux_sk_test".into()),
            name: "sh-h100-01".into(),
            region: "cn-east-2".into(),
            jurisdiction: "CN".into(),
            hooks: Hooks {
                provision: HookConfig {
                    argv: vec!["/etc/gpux-agent/hooks/docker-provision.sh".into()],
                    ..HookConfig::default()
                },
                teardown: HookConfig {
                    argv: vec!["/etc/gpux-agent/hooks/docker-teardown.sh".into()],
                    ..Hooks::default().teardown
                },
                ..Hooks::default()
            },
            ..AgentConfig::default()
        }
    }

    #[test]
    fn validation_names_the_bad_key() {
        type Case = (&'static str, fn(&mut AgentConfig), Option<&'static str>);
        let cases: &[Case] = &[
            ("valid", |_| {}, None),
            (
                "https url",
                |c| c.url = "https://gpux.example.com:8443".into(),
                None,
            ),
            (
                "no scheme",
                |c| c.url = "gpux.example.com".into(),
                Some("url"),
            ),
            ("empty host", |c| c.url = "http://".into(), Some("url")),
            ("space in url", |c| c.url = "http://a b".into(), Some("url")),
            ("no key", |c| c.key = None, Some("key")),
            ("empty key", |c| c.key = Some(String::new()), Some("key")),
            ("no name", |c| c.name = String::new(), Some("name")),
            ("name 64", |c| c.name = "n".repeat(64), None),
            ("name 65", |c| c.name = "n".repeat(65), Some("name")),
            ("name slash", |c| c.name = "a/b".into(), Some("name")),
            ("sku ok", |c| c.sku = Some("H100-80G".into()), None),
            (
                "sku space",
                |c| c.sku = Some("H100 80G".into()),
                Some("sku"),
            ),
            ("sku empty", |c| c.sku = Some(String::new()), Some("sku")),
            (
                "region upper",
                |c| c.region = "CN-EAST".into(),
                Some("region"),
            ),
            ("no region", |c| c.region = String::new(), Some("region")),
            (
                "jurisdiction lower",
                |c| c.jurisdiction = "cn".into(),
                Some("jurisdiction"),
            ),
            (
                "jurisdiction 3",
                |c| c.jurisdiction = "CHN".into(),
                Some("jurisdiction"),
            ),
            (
                "period min",
                |c| c.heartbeat_period_ms = MIN_HEARTBEAT_PERIOD_MS,
                None,
            ),
            (
                "period max",
                |c| c.heartbeat_period_ms = MAX_HEARTBEAT_PERIOD_MS,
                None,
            ),
            (
                "period short",
                |c| c.heartbeat_period_ms = MIN_HEARTBEAT_PERIOD_MS - 1,
                Some("heartbeat_period_ms"),
            ),
            (
                "period 15 s",
                |c| c.heartbeat_period_ms = 15_000,
                Some("heartbeat_period_ms"),
            ),
            ("jitter 0", |c| c.heartbeat_jitter = 0.0, None),
            (
                "jitter max",
                |c| c.heartbeat_jitter = MAX_HEARTBEAT_JITTER,
                None,
            ),
            (
                "jitter big",
                |c| c.heartbeat_jitter = 0.51,
                Some("heartbeat_jitter"),
            ),
            (
                "jitter negative",
                |c| c.heartbeat_jitter = -0.1,
                Some("heartbeat_jitter"),
            ),
            (
                "jitter NaN",
                |c| c.heartbeat_jitter = f64::NAN,
                Some("heartbeat_jitter"),
            ),
            (
                "no provision hook",
                |c| c.hooks.provision.argv.clear(),
                Some("hooks.provision.argv"),
            ),
            (
                "no teardown hook",
                |c| c.hooks.teardown.argv.clear(),
                Some("hooks.teardown.argv"),
            ),
            (
                "empty program",
                |c| c.hooks.provision.argv = vec![String::new()],
                Some("hooks.provision.argv"),
            ),
            (
                "NUL in arg",
                |c| c.hooks.teardown.argv.push("a\0b".into()),
                Some("hooks.teardown.argv"),
            ),
            (
                "too many args",
                |c| c.hooks.provision.argv = vec!["x".into(); MAX_HOOK_ARGS + 1],
                Some("hooks.provision.argv"),
            ),
            (
                "timeout 0",
                |c| c.hooks.provision.timeout_ms = 0,
                Some("hooks.provision.timeout_ms"),
            ),
            (
                "timeout max",
                |c| c.hooks.teardown.timeout_ms = MAX_HOOK_TIMEOUT_MS,
                None,
            ),
            (
                "timeout over",
                |c| c.hooks.teardown.timeout_ms = MAX_HOOK_TIMEOUT_MS + 1,
                Some("hooks.teardown.timeout_ms"),
            ),
            ("grace 0", |c| c.hooks.provision.grace_ms = 0, None),
            (
                "grace over",
                |c| c.hooks.provision.grace_ms = MAX_GRACE_MS + 1,
                Some("hooks.provision.grace_ms"),
            ),
            (
                "simulate without hooks",
                |c| {
                    c.simulate = Some("H100-80G:8".into());
                    c.hooks = Hooks::default();
                },
                None,
            ),
            (
                "health file without simulate",
                |c| c.simulate_health_file = Some("/tmp/x".into()),
                Some("simulate_health_file"),
            ),
            (
                "no state dir",
                |c| c.state_dir = PathBuf::new(),
                Some("state_dir"),
            ),
        ];
        for (name, mutate, field) in cases {
            let mut c = valid();
            mutate(&mut c);
            match (c.validate(), field) {
                (Ok(()), None) => {}
                (
                    Err(AgentError::Config {
                        field: got,
                        message,
                    }),
                    Some(want),
                ) => {
                    assert_eq!(&got, want, "{name}: {message}");
                }
                (other, want) => panic!("{name}: {other:?}, wanted an error on {want:?}"),
            }
        }
        let mut bad_sim = valid();
        bad_sim.simulate = Some("H100-80G:0".into());
        assert!(matches!(
            bad_sim.validate(),
            Err(AgentError::Simulate { .. })
        ));
    }

    #[test]
    fn discovery_needs_only_the_gpu_keys() {
        // No hooks, no key: enough for --discover on a real host.
        assert!(AgentConfig::default().validate_gpus().is_ok());
        let bad_sku = AgentConfig {
            sku: Some("H100 80G".into()),
            ..AgentConfig::default()
        };
        assert!(
            matches!(bad_sku.validate_gpus(), Err(AgentError::Config { field, .. }) if field == "sku")
        );
        let c = AgentConfig {
            simulate: Some("H100-80G:2".into()),
            ..AgentConfig::default()
        };
        assert!(c.validate_gpus().is_ok());
        assert!(matches!(c.validate(), Err(AgentError::Config { field, .. }) if field == "key"));
    }

    /// Issue 26: `[simulate_verify]` loads from TOML, only with `simulate`, with finite
    /// figures; `hooks.verify` is optional.
    #[test]
    #[allow(clippy::result_large_err)] // figment's own test harness error type
    fn simulated_verification_figures_load_and_validate() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "agent.toml",
                "simulate = \"H100-80G:2\"\n[simulate_verify]\nbf16_tflops = 700.0\n\
                 allreduce_busbw_gbps = 380\ndcgm_diag = \"warn\"\nfaults = [\"ecc_off\"]\n",
            )?;
            let c = AgentConfig::load(Some(Path::new("agent.toml")), &NO_FLAGS)
                .map_err(|e| e.to_string())?;
            let v = c.simulate_verify.clone().expect("simulate_verify");
            assert_eq!(v.bf16_tflops, Some(700.0));
            assert_eq!(v.allreduce_busbw_gbps, Some(380.0));
            assert_eq!(v.mem_bw_gbps, None);
            assert_eq!(v.dcgm_diag, Some(gpux_wire::DcgmResultDto::Warn));
            assert_eq!(v.faults, [gpux_wire::NvmlFaultDto::EccOff]);
            assert!(c.validate_gpus().is_ok());
            assert!(c.hooks.verify.argv.is_empty());
            let mut real = c.clone();
            real.simulate = None;
            let err = real.validate_gpus().unwrap_err().to_string();
            assert!(err.contains("simulate_verify"), "{err}");
            let mut bad = c;
            bad.simulate_verify = Some(crate::verify::SimulatedFigures {
                bf16_tflops: Some(-1.0),
                ..v
            });
            let err = bad.validate_gpus().unwrap_err().to_string();
            assert!(err.contains("simulate_verify.bf16_tflops"), "{err}");
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's own test harness error type
    fn the_example_config_loads_and_validates() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("GPUX_KEY", "gpux_sk_example");
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/agent.toml");
            let c = AgentConfig::load(Some(&path), &NO_FLAGS).map_err(|e| e.to_string())?;
            c.validate().map_err(|e| e.to_string())?;
            assert_eq!(c.url, "https://gpux.example.com");
            // Its https:// URL makes a client (HTTPS and WSS), as `main` makes it.
            let client = c.client().map_err(|e| e.to_string())?;
            assert_eq!(client.base_url(), "https://gpux.example.com/");
            assert_eq!(c.name, "sh-h100-01");
            assert_eq!(c.interconnect, Interconnect::Infiniband);
            assert_eq!(c.hooks, {
                let mut h = Hooks::default();
                h.provision.argv = vec![
                    "/etc/gpux-agent/hooks/docker-provision.sh".into(),
                    "/etc/gpux-agent/hooks.env".into(),
                ];
                h.teardown.argv = vec![
                    "/etc/gpux-agent/hooks/docker-teardown.sh".into(),
                    "/etc/gpux-agent/hooks.env".into(),
                ];
                h.verify.argv = vec![
                    "/etc/gpux-agent/hooks/verify.sh".into(),
                    "/etc/gpux-agent/hooks.env".into(),
                ];
                h
            });
            assert_eq!(c.hooks.verify.timeout_ms, DEFAULT_VERIFY_TIMEOUT_MS);
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's own test harness error type
    fn the_ca_file_layers_and_a_bad_one_is_named() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "agent.toml",
                "url = \"https://x.example\"\nca_cert = \"file.pem\"\n",
            )?;
            let from_file = AgentConfig::load(Some(Path::new("agent.toml")), &NO_FLAGS)
                .map_err(|e| e.to_string())?;
            assert_eq!(from_file.ca_cert, Some(PathBuf::from("file.pem")));
            jail.set_env("GPUX_CA_CERT", "env.pem");
            let from_env = AgentConfig::load(Some(Path::new("agent.toml")), &NO_FLAGS)
                .map_err(|e| e.to_string())?;
            assert_eq!(from_env.ca_cert, Some(PathBuf::from("env.pem")));
            let flags = BTreeMap::from([("ca_cert".to_string(), "flag.pem".to_string())]);
            let from_flag = AgentConfig::load(Some(Path::new("agent.toml")), &flags)
                .map_err(|e| e.to_string())?;
            assert_eq!(from_flag.ca_cert, Some(PathBuf::from("flag.pem")));
            // None of them exists: the error names the setting and the file.
            match from_flag.client() {
                Err(AgentError::Config { field, message }) => {
                    assert_eq!(field, "ca_cert");
                    assert!(message.contains("flag.pem"), "{message}");
                }
                other => panic!("{other:?}"),
            }
            // A bad URL is named before the CA file is read.
            let bad_url = AgentConfig {
                url: "ftp://x.example".into(),
                ..from_flag
            };
            assert!(matches!(
                bad_url.client(),
                Err(AgentError::Config { field, .. }) if field == "url"
            ));
            Ok(())
        });
    }

    #[test]
    fn heartbeat_delay_stays_within_the_jitter() {
        let c = valid(); // 3,000 ms ± 10 %
        let cases = [
            (0.0, 2_700),
            (0.5, 3_000),
            (0.999_999, 3_300),
            (1.0, 3_300),
            (-5.0, 2_700),
            (f64::NAN, 3_000),
        ];
        for (unit, want) in cases {
            assert_eq!(c.heartbeat_delay_ms(unit), want, "unit {unit}");
        }
        let still = AgentConfig {
            heartbeat_jitter: 0.0,
            ..valid()
        };
        assert_eq!(still.heartbeat_delay_ms(0.0), 3_000);
    }

    #[test]
    fn the_key_never_shows_in_debug() {
        let text = format!("{:?}", valid());
        assert!(!text.contains("gpux_sk_test"), "{text}");
        assert!(text.contains("<redacted>"), "{text}");
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's own test harness error type
    fn layers_in_order_and_reads_only_the_agents_keys() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "agent.toml",
                r#"
url = "https://gpux.example.com"
name = "from-file"
region = "cn-east-2"
jurisdiction = "CN"
interconnect = "infiniband"
heartbeat_period_ms = 2000

[hooks.provision]
argv = ["/opt/hooks/provision.sh", "--fast"]
timeout_ms = 120000

[hooks.teardown]
argv = ["/opt/hooks/teardown.sh"]
"#,
            )?;
            jail.set_env("GPUX_KEY", "gpux_sk_env");
            jail.set_env("GPUX_HEARTBEAT_PERIOD_MS", "2500");
            jail.set_env("GPUX_HOOKS__PROVISION__GRACE_MS", "500");
            // The server's and the CLI's variables are not the agent's business.
            jail.set_env("GPUX_LISTEN", "0.0.0.0:9000");
            jail.set_env("GPUX_API__RATE_PER_S", "7");
            #[derive(Serialize)]
            struct Flags {
                name: &'static str,
            }
            let c = AgentConfig::load(Some(Path::new("agent.toml")), &Flags { name: "from-flag" })
                .map_err(|e| e.to_string())?;
            assert_eq!(c.url, "https://gpux.example.com"); // file
            assert_eq!(c.interconnect, Interconnect::Infiniband); // file, typed
            assert_eq!(c.heartbeat_period_ms, 2_500); // env over file
            assert_eq!(c.key.as_deref(), Some("gpux_sk_env")); // env
            assert_eq!(c.name, "from-flag"); // flag over file
            assert_eq!(
                c.hooks.provision.argv,
                ["/opt/hooks/provision.sh", "--fast"]
            );
            assert_eq!(c.hooks.provision.timeout_ms, 120_000); // file, nested
            assert_eq!(c.hooks.provision.grace_ms, 500); // env, nested
            assert_eq!(c.hooks.teardown.timeout_ms, DEFAULT_TEARDOWN_TIMEOUT_MS); // default
            assert_eq!(c.heartbeat_jitter, DEFAULT_HEARTBEAT_JITTER); // default
            assert_eq!(c.state_dir, PathBuf::from(DEFAULT_STATE_DIR)); // default
            assert!(c.validate().is_ok(), "{:?}", c.validate());

            for (file, text) in [
                ("unknown.toml", "colour = 1\n"),
                ("typed.toml", "interconnect = \"nvswitch\"\n"),
                ("nested.toml", "[hooks.provision]\ncommand = \"x\"\n"),
            ] {
                jail.create_file(file, text)?;
                let err = AgentConfig::load(Some(Path::new(file)), &NO_FLAGS).unwrap_err();
                assert!(err.to_string().contains(file), "{file}: {err}");
                assert!(matches!(err, AgentError::ConfigLoad(_)), "{file}: {err}");
            }
            let missing = AgentConfig::load(Some(Path::new("missing.toml")), &NO_FLAGS);
            assert!(missing.unwrap_err().to_string().contains("missing.toml"));
            // Without a file and flags: the defaults and the environment.
            let bare = AgentConfig::load(None, &NO_FLAGS).map_err(|e| e.to_string())?;
            assert_eq!(bare.key.as_deref(), Some("gpux_sk_env"));
            assert_eq!(bare.url, DEFAULT_URL);
            Ok(())
        });
    }
}
