//! Where `gpux` finds the exchange, its API key, and the CA certificate it trusts besides the
//! system's (an `https://` exchange whose certificate a private CA issued).
//!
//! Layers, later ones win (docs/cli.md "Configuration"):
//! 1. built-in default URL [`DEFAULT_URL`] (no key, no CA file);
//! 2. the profile file, `config.toml` in the user's config directory ([`default_path`]:
//!    `$XDG_CONFIG_HOME/gpux/config.toml`, else `~/.config/gpux/config.toml` on Linux; the
//!    platform's equivalent elsewhere) or `--config FILE`; profile `--profile NAME`, else
//!    `GPUX_PROFILE`, else `default`;
//! 3. the environment: `GPUX_URL`, `GPUX_KEY`, `GPUX_CA_CERT`;
//! 4. flags: `--url`, `--key`, `--ca-cert`.
//!
//! A relative `ca_cert` in the profile file is relative to the file's directory;
//! `gpux config set-profile --ca-cert` stores an absolute path.
//!
//! The file (keys are secrets) is written with mode 0600 in a directory of mode 0700, and only
//! by `gpux config set-profile`:
//!
//! ```toml
//! [profiles.default]
//! url = "http://127.0.0.1:8080"
//! key = "gpux_3b8f0c2e9a6d4f7b8e1c5a2d9f0b6e4c"
//!
//! [profiles.prod]
//! url = "https://exchange.example"
//! key = "gpux_…"
//! ca_cert = "/etc/gpux/private-ca.pem"
//! ```

use crate::error::CliError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The exchange's default base URL (the server's default listen address).
pub const DEFAULT_URL: &str = "http://127.0.0.1:8080";

/// The profile used when neither `--profile` nor `GPUX_PROFILE` names one.
pub const DEFAULT_PROFILE: &str = "default";

/// The profile file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// Profiles by name.
    #[serde(default)]
    pub profiles: BTreeMap<String, Profile>,
}

/// One profile: an exchange and a key for it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Base URL, e.g. `http://127.0.0.1:8080`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// API key (`gpux_…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// PEM file of CA certificates trusted besides the system's (a private CA); relative to
    /// the profile file's directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_cert: Option<PathBuf>,
}

/// Where a resolved setting came from (shown by `gpux config show`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// `--url` / `--key` / `--ca-cert`.
    Flag,
    /// `GPUX_URL` / `GPUX_KEY` / `GPUX_CA_CERT`.
    Env,
    /// The profile file.
    Profile,
    /// Built in.
    Default,
}

/// Flags and environment as clap parsed them (a value with its source).
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// `--profile` / `GPUX_PROFILE`.
    pub profile: Option<String>,
    /// `--url` / `GPUX_URL`, and whether it came from the flag.
    pub url: Option<(String, Source)>,
    /// `--key` / `GPUX_KEY`, and whether it came from the flag.
    pub key: Option<(String, Source)>,
    /// `--ca-cert` / `GPUX_CA_CERT`, and whether it came from the flag.
    pub ca_cert: Option<(PathBuf, Source)>,
    /// `--config FILE`.
    pub file: Option<PathBuf>,
}

/// The settings a command runs with.
#[derive(Clone, Debug)]
pub struct Resolved {
    /// The profile file read (it may not exist).
    pub file: PathBuf,
    /// The profile name.
    pub profile: String,
    /// Base URL.
    pub url: String,
    /// Where the URL came from.
    pub url_source: Source,
    /// API key, if any.
    pub key: Option<String>,
    /// Where the key came from (`Default`: none).
    pub key_source: Source,
    /// CA certificate file trusted besides the system's CAs, if any.
    pub ca_cert: Option<PathBuf>,
    /// Where the CA file came from (`Default`: none).
    pub ca_cert_source: Source,
}

impl Resolved {
    /// The client's connection options: the CA file, if any.
    pub fn client_options(&self) -> gpux_client::ClientOptions {
        let opts = gpux_client::ClientOptions::default();
        match &self.ca_cert {
            Some(path) => opts.with_ca_cert(path),
            None => opts,
        }
    }

    /// The key, or the usage error that says how to configure one.
    pub fn require_key(&self) -> Result<String, CliError> {
        self.key.clone().ok_or_else(|| {
            CliError::Usage(format!(
                "no API key: pass --key KEY, set GPUX_KEY, or store one with \
                 `gpux config set-profile {} --key KEY` (profile {:?} in {} has none)",
                self.profile,
                self.profile,
                self.file.display()
            ))
        })
    }
}

/// The profile file's default location: `config.toml` in the user's config directory.
pub fn default_path() -> Result<PathBuf, CliError> {
    directories::ProjectDirs::from("", "", "gpux")
        .map(|d| d.config_dir().join("config.toml"))
        .ok_or_else(|| {
            CliError::Usage(
                "cannot find the user's config directory (no HOME): pass --config FILE".into(),
            )
        })
}

/// Reads the profile file; a missing file is an empty one.
pub fn load(path: &Path) -> Result<ConfigFile, CliError> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            toml::from_str(&text).map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ConfigFile::default()),
        Err(e) => Err(CliError::Usage(format!(
            "cannot read {}: {e}",
            path.display()
        ))),
    }
}

/// Writes the profile file with mode 0600 (its directory 0700 when created), atomically
/// (a temporary file renamed over it).
pub fn save(path: &Path, cfg: &ConfigFile) -> Result<(), CliError> {
    let io = |what: &str, e: std::io::Error| {
        CliError::Usage(format!("cannot {what} {}: {e}", path.display()))
    };
    let text = toml::to_string_pretty(cfg)
        .map_err(|e| CliError::Usage(format!("cannot encode the profile file: {e}")))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        create_private_dir(dir).map_err(|e| io("create the directory of", e))?;
    }
    let tmp = path.with_extension("toml.tmp");
    write_private(&tmp, text.as_bytes()).map_err(|e| io("write", e))?;
    std::fs::rename(&tmp, path).map_err(|e| io("replace", e))
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)
}

#[cfg(unix)]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    // An existing file keeps its mode on open: set it.
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    f.write_all(bytes)?;
    f.sync_all()
}

#[cfg(not(unix))]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::write(path, bytes)
}

/// Resolves the settings: defaults ← profile file ← environment ← flags.
///
/// # Errors
/// An unreadable or malformed profile file; a profile named explicitly that the file lacks.
pub fn resolve(o: &Overrides) -> Result<Resolved, CliError> {
    let file = match &o.file {
        Some(f) => f.clone(),
        None => default_path()?,
    };
    let cfg = load(&file)?;
    let profile = o
        .profile
        .clone()
        .unwrap_or_else(|| DEFAULT_PROFILE.to_string());
    let p = match cfg.profiles.get(&profile) {
        Some(p) => p.clone(),
        None if o.profile.is_none() => Profile::default(),
        None => {
            let known: Vec<&str> = cfg.profiles.keys().map(String::as_str).collect();
            return Err(CliError::Usage(format!(
                "no profile {profile:?} in {} (profiles: {}); create it with \
                 `gpux config set-profile {profile} --url URL --key KEY`",
                file.display(),
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            )));
        }
    };
    let (url, url_source) = match (&o.url, p.url) {
        (Some((u, s)), _) => (u.clone(), *s),
        (None, Some(u)) => (u, Source::Profile),
        (None, None) => (DEFAULT_URL.to_string(), Source::Default),
    };
    let (key, key_source) = match (&o.key, p.key) {
        (Some((k, s)), _) => (Some(k.clone()), *s),
        (None, Some(k)) => (Some(k), Source::Profile),
        (None, None) => (None, Source::Default),
    };
    let (ca_cert, ca_cert_source) = match (&o.ca_cert, p.ca_cert) {
        (Some((c, s)), _) => (Some(c.clone()), *s),
        (None, Some(c)) => {
            let dir = file.parent().unwrap_or_else(|| Path::new(""));
            (Some(dir.join(c)), Source::Profile)
        }
        (None, None) => (None, Source::Default),
    };
    Ok(Resolved {
        file,
        profile,
        url: url.trim_end_matches('/').to_string(),
        url_source,
        key,
        key_source,
        ca_cert,
        ca_cert_source,
    })
}

/// What `gpux config set-profile` stores: the fields given (`None`: keep the stored value).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProfileUpdate {
    /// Base URL.
    pub url: Option<String>,
    /// API key.
    pub key: Option<String>,
    /// CA certificate file (stored absolute).
    pub ca_cert: Option<PathBuf>,
}

/// Creates or updates profile `name` in the file: given fields replace, others stay (a CA
/// file's path is made absolute). Answers the profile as stored.
pub fn set_profile(path: &Path, name: &str, update: ProfileUpdate) -> Result<Profile, CliError> {
    let ProfileUpdate { url, key, ca_cert } = update;
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    {
        return Err(CliError::Usage(format!(
            "profile names are [A-Za-z0-9._-]+, not {name:?}"
        )));
    }
    let mut cfg = load(path)?;
    let p = cfg.profiles.entry(name.to_string()).or_default();
    if let Some(u) = url {
        p.url = Some(u.trim_end_matches('/').to_string());
    }
    if let Some(k) = key {
        p.key = Some(k);
    }
    if let Some(c) = ca_cert {
        let absolute = std::path::absolute(&c)
            .map_err(|e| CliError::Usage(format!("CA certificate file {}: {e}", c.display())))?;
        p.ca_cert = Some(absolute);
    }
    let stored = p.clone();
    save(path, &cfg)?;
    Ok(stored)
}

/// `gpux_3b8f…6e4c`: enough to recognise a key, never the key.
pub fn mask_key(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    if chars.len() <= 12 {
        return "…".repeat(chars.len().min(3));
    }
    let head: String = chars[..9].iter().collect();
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("{head}…{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overrides(file: &Path) -> Overrides {
        Overrides {
            file: Some(file.to_path_buf()),
            ..Overrides::default()
        }
    }

    #[test]
    fn layers_resolve_in_order_and_the_file_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("sub/config.toml");
        // Nothing: the built-in URL, no key.
        let r = resolve(&overrides(&f)).unwrap();
        assert_eq!(
            (r.url.as_str(), r.url_source),
            (DEFAULT_URL, Source::Default)
        );
        assert_eq!((r.key, r.key_source), (None, Source::Default));

        let update = |url: Option<&str>, key: Option<&str>| ProfileUpdate {
            url: url.map(String::from),
            key: key.map(String::from),
            ca_cert: None,
        };
        set_profile(&f, "default", update(Some("http://a:1/"), Some("gpux_a"))).unwrap();
        set_profile(&f, "prod", update(Some("http://p:2"), None)).unwrap();
        set_profile(&f, "prod", update(None, Some("gpux_p"))).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&f).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let cfg = load(&f).unwrap();
        assert_eq!(cfg.profiles["prod"].url.as_deref(), Some("http://p:2"));
        assert_eq!(cfg.profiles["prod"].key.as_deref(), Some("gpux_p"));

        let r = resolve(&overrides(&f)).unwrap();
        assert_eq!(
            (r.url.as_str(), r.url_source),
            ("http://a:1", Source::Profile)
        );
        assert_eq!(r.key.as_deref(), Some("gpux_a"));

        let mut o = overrides(&f);
        o.profile = Some("prod".into());
        o.url = Some(("http://env:3".into(), Source::Env));
        let r = resolve(&o).unwrap();
        assert_eq!(
            (r.url.as_str(), r.url_source),
            ("http://env:3", Source::Env)
        );
        assert_eq!(
            (r.key.as_deref(), r.key_source),
            (Some("gpux_p"), Source::Profile)
        );

        o.profile = Some("nope".into());
        let e = resolve(&o).unwrap_err().to_string();
        assert!(
            e.contains("no profile \"nope\"") && e.contains("default, prod"),
            "{e}"
        );
        assert!(set_profile(&f, "bad name", ProfileUpdate::default()).is_err());
    }

    #[test]
    fn the_ca_file_layers_and_a_profiles_is_relative_to_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("gpux/config.toml");
        let r = resolve(&overrides(&f)).unwrap();
        assert_eq!((r.ca_cert, r.ca_cert_source), (None, Source::Default));
        // Stored absolute, whatever the working directory.
        let stored = set_profile(
            &f,
            "default",
            ProfileUpdate {
                ca_cert: Some("ca.pem".into()),
                ..ProfileUpdate::default()
            },
        )
        .unwrap();
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(stored.ca_cert, Some(cwd.join("ca.pem")));
        let r = resolve(&overrides(&f)).unwrap();
        assert_eq!(
            (r.ca_cert.clone(), r.ca_cert_source),
            (Some(cwd.join("ca.pem")), Source::Profile)
        );
        assert_eq!(
            r.client_options().ca_cert.as_deref(),
            Some(cwd.join("ca.pem").as_path())
        );
        // Written by hand, relative: next to the file.
        std::fs::write(&f, "[profiles.default]\nca_cert = \"private-ca.pem\"\n").unwrap();
        let r = resolve(&overrides(&f)).unwrap();
        assert_eq!(r.ca_cert, Some(dir.path().join("gpux/private-ca.pem")));
        // The environment and the flag win.
        let mut o = overrides(&f);
        o.ca_cert = Some(("/env/ca.pem".into(), Source::Env));
        let r = resolve(&o).unwrap();
        assert_eq!(
            (r.ca_cert, r.ca_cert_source),
            (Some(PathBuf::from("/env/ca.pem")), Source::Env)
        );
    }

    #[test]
    fn keys_are_masked() {
        assert_eq!(
            mask_key("gpux_3b8f0c2e9a6d4f7b8e1c5a2d9f0b6e4c"),
            "gpux_3b8f…6e4c"
        );
        assert_eq!(mask_key("short"), "………");
    }
}
