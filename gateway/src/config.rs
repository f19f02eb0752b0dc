//! Server configuration, layered: built-in defaults, then a TOML file (`--config`, or
//! `gpux.toml` in the working directory when present), then `GPUX_*` environment variables
//! (nested keys with `__`, e.g. `GPUX_API__RATE_PER_S=500`), then command-line flags.

use crate::api::ApiConfig;
use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Everything the server binary needs.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// Address to listen on (default `127.0.0.1:8080`).
    pub listen: String,
    /// Data directory of the embedded journal (used without a Redis URL).
    pub data_dir: PathBuf,
    /// Redis URL; switches the journal to Redis Streams.
    pub redis_url: Option<String>,
    /// `redis_url` names a Redis Cluster: one or more seed nodes, comma-separated
    /// (docs/deploy.md, "Redis Cluster").
    pub redis_cluster: bool,
    /// Key prefix in Redis.
    pub redis_prefix: String,
    /// Refuse to start when Redis has AOF off (otherwise a loud warning).
    pub require_aof: bool,
    /// Replicas that must confirm each append before it is acknowledged (Redis `WAIT`); 0:
    /// the primary's answer is enough. docs/journal.md, "Replicas and WAIT".
    pub redis_wait_replicas: u32,
    /// Limit on that wait, ms: past it the command is answered 503 (outcome unknown).
    pub redis_wait_ms: u64,
    /// Length of the engine leader's lease on a Redis journal, ms (`leadership`): a leader
    /// silent this long is replaced by a standby. At least `leadership::MIN_LEASE_MS`.
    pub lease_ms: u64,
    /// What this process does on a Redis journal shared with others (`cluster::Role`):
    /// `all` (default), `engine` or `api`. The embedded store takes only `all`.
    pub role: crate::cluster::Role,
    /// Shared secret of the processes on one Redis journal: followers forward commands to the
    /// leader with it (`/internal/forward`). At least `cluster::MIN_CLUSTER_KEY_LEN` bytes;
    /// without it a process on Redis follows and serves reads but cannot forward commands.
    pub cluster_key: Option<String>,
    /// This process's URL as the other processes reach it (e.g. `http://10.0.0.5:8080`),
    /// recorded with the lease when it leads; default `http://<listen address>`.
    pub advertise_url: Option<String>,
    /// TLS certificate chain (PEM, leaf first): with `tls_key`, the server speaks HTTPS and
    /// WSS on `listen` and reloads the pair when the files change (`tls`).
    pub tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    pub tls_key: Option<PathBuf>,
    /// Tick period, ms (0 = no ticks).
    pub tick_ms: u64,
    /// HTTP worker threads (0: one per CPU core, actix's default). Processes that share a
    /// machine (a leader and API processes on one host) do better with fewer each:
    /// docs/deploy.md, "Workers".
    pub workers: usize,
    /// Snapshot after this many commands.
    pub snapshot_every: u64,
    /// Expose `/internal/ops` and `/internal/state`.
    pub internal_api: bool,
    /// Log JSON lines.
    pub log_json: bool,
    /// Create (or revive) the demo market and print its API keys.
    pub demo: bool,
    /// An admin key to register at start (hashed); without it and without any admin account,
    /// one is generated and printed once.
    pub admin_key: Option<String>,
    /// API limits and origins.
    pub api: ApiConfig,
    /// Verification runs on every node (issue 26, docs/market-rules.md §12.2): the exchange
    /// measures each node at its first listing, after a change and 1–7 days after its last
    /// run. Needs node agents that run the checks (`gpux-agent`); on in the demo.
    pub verification: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            listen: "127.0.0.1:8080".into(),
            data_dir: PathBuf::from("./gpux-data"),
            redis_url: None,
            redis_cluster: false,
            redis_prefix: "gpux".into(),
            require_aof: false,
            redis_wait_replicas: 0,
            redis_wait_ms: crate::journal::redis::DEFAULT_WAIT_TIMEOUT.as_millis() as u64,
            lease_ms: crate::leadership::DEFAULT_LEASE_MS,
            role: crate::cluster::Role::All,
            cluster_key: None,
            advertise_url: None,
            tls_cert: None,
            tls_key: None,
            tick_ms: 1000,
            workers: 0,
            snapshot_every: 100_000,
            internal_api: false,
            log_json: false,
            demo: false,
            admin_key: None,
            api: ApiConfig::default(),
            verification: false,
        }
    }
}

/// Why the configuration could not be built.
#[derive(Debug, thiserror::Error)]
#[error("configuration: {0}")]
pub struct ConfigError(#[from] Box<figment::Error>);

impl Settings {
    /// Defaults ← `file` (or `gpux.toml` when it exists) ← `GPUX_*` env ← `overrides`
    /// (the command-line flags that were given).
    ///
    /// # Errors
    /// A malformed file, an unknown key or a value of the wrong type.
    pub fn load(file: Option<&Path>, overrides: &impl Serialize) -> Result<Settings, ConfigError> {
        let mut f = Figment::from(Serialized::defaults(Settings::default()));
        match file {
            Some(p) => f = f.merge(Toml::file_exact(p)),
            None => f = f.merge(Toml::file("gpux.toml")),
        }
        // GPUX_URL / GPUX_KEY / GPUX_PROFILE belong to `gpux` (docs/cli.md); a shell that
        // exports them must still start the server.
        f.merge(
            Env::prefixed("GPUX_")
                .split("__")
                .ignore(&["config", "url", "key", "profile"]),
        )
        .merge(Serialized::defaults(overrides))
        .extract()
        .map_err(|e| ConfigError(Box::new(e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::result_large_err)] // figment's own test harness error type
    fn layers_in_order() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "gw.toml",
                "listen = \"0.0.0.0:9000\"\ntick_ms = 250\n[api]\nrate_per_s = 7\n",
            )?;
            jail.set_env("GPUX_TICK_MS", "500");
            jail.set_env("GPUX_API__RATE_BURST", "9");
            jail.set_env("GPUX_WORKERS", "1");
            #[derive(Serialize)]
            struct Flags {
                demo: bool,
            }
            let s = Settings::load(Some(Path::new("gw.toml")), &Flags { demo: true })
                .map_err(|e| e.to_string())?;
            assert_eq!(s.listen, "0.0.0.0:9000"); // file
            assert_eq!(s.tick_ms, 500); // env over file
            assert_eq!(s.api.rate_per_s, 7); // file, nested
            assert_eq!(s.api.rate_burst, 9); // env, nested
            assert!(s.demo); // flag
            assert_eq!(s.redis_prefix, "gpux"); // default
            assert_eq!(s.workers, 1); // env
            assert_eq!(Settings::default().workers, 0); // default: one per core
            jail.create_file("bad.toml", "colour = 1\n")?;
            assert!(Settings::load(Some(Path::new("bad.toml")), &()).is_err());
            Ok(())
        });
    }
}
