//! Wire types of lease delivery (issue 15), validated at the edge into the domain types of
//! [`crate::delivery`]: a bid's launch spec, and a supplier's ready (with access details),
//! failed and torn-down reports. Every limit is a named constant of [`crate::delivery`]; a
//! bad field answers 400 with its code (`invalid_launch`, `invalid_access`, `invalid_report`)
//! and its dotted path in `field`.

use crate::api::error::ApiError;
use crate::delivery::{
    AccessDetails, LaunchSpec, MAX_COMMAND_ARG_BYTES, MAX_COMMAND_ARGS, MAX_DISK_GB,
    MAX_ENV_NAME_BYTES, MAX_ENV_VALUE_BYTES, MAX_ENV_VARS, MAX_HOST_BYTES, MAX_IMAGE_BYTES,
    MAX_PORTS, MAX_REPORT_TEXT_BYTES, MAX_SSH_KEY_BYTES, MAX_SSH_KEYS, MAX_URL_BYTES,
    MAX_USER_BYTES,
};
pub use gpux_wire::{
    AccessRequest, FailedRequest, LaunchRequest, LostRequest, ReadyRequest, TornDownRequest,
};
use std::collections::BTreeMap;

/// SSH public key types accepted (OpenSSH's `authorized_keys` names).
pub const SSH_KEY_TYPES: &[&str] = &[
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
];

/// Bytes of an `ssh-ed25519` public key blob: the type name's length and name (4 + 11), the
/// key's length and key (4 + 32).
const ED25519_BLOB_BYTES: usize = 51;

fn launch_err(field: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::invalid(field, "invalid_launch", message)
}

/// An OpenSSH public key line: `TYPE BASE64 [comment]`, where the base64 blob decodes to a
/// key whose first field (a u32 big-endian length, then that many bytes) names the same
/// `TYPE` (RFC 4253 §6.6) — so a truncated, mistyped or mislabelled key is refused before a
/// buyer pays for a lease nobody can log into.
fn valid_ssh_key(k: &str) -> bool {
    use base64::Engine as _;
    let mut parts = k.split(' ');
    let (Some(kind), Some(body)) = (parts.next(), parts.next()) else {
        return false;
    };
    if !SSH_KEY_TYPES.contains(&kind) || !k.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
        return false;
    }
    let Ok(blob) = base64::engine::general_purpose::STANDARD.decode(body) else {
        return false;
    };
    let Some(len) = blob
        .get(..4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
    else {
        return false;
    };
    // The key material must follow its type name; an ed25519 key is exactly 32 bytes.
    let typed = blob.len() > 4 + len && blob.get(4..4 + len) == Some(kind.as_bytes());
    typed && (kind != "ssh-ed25519" || blob.len() == ED25519_BLOB_BYTES)
}

fn valid_env_name(n: &str) -> bool {
    let mut b = n.bytes();
    b.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// Validation of a wire launch spec into the domain's.
pub trait LaunchSpecOf {
    /// The launch spec.
    ///
    /// # Errors
    /// 400 `invalid_launch` naming the field.
    fn to_spec(&self) -> Result<LaunchSpec, ApiError>;
}

/// A launch spec as the wire shows it (to its buyer and to the lease's supplier).
pub fn launch_view(l: &LaunchSpec) -> LaunchRequest {
    crate::wire_conv::launch_request(l)
}

impl LaunchSpecOf for LaunchRequest {
    fn to_spec(&self) -> Result<LaunchSpec, ApiError> {
        if self.ssh_keys.len() > MAX_SSH_KEYS {
            return Err(launch_err(
                "launch.ssh_keys",
                format!("at most {MAX_SSH_KEYS} SSH keys"),
            ));
        }
        for k in &self.ssh_keys {
            if k.len() > MAX_SSH_KEY_BYTES || !valid_ssh_key(k) {
                return Err(launch_err(
                    "launch.ssh_keys",
                    format!(
                        "each SSH key is one OpenSSH public key line (`ssh-ed25519 AAAA… comment`) of at most {MAX_SSH_KEY_BYTES} bytes; types: {}",
                        SSH_KEY_TYPES.join(", ")
                    ),
                ));
            }
        }
        if let Some(image) = &self.image
            && (image.is_empty()
                || image.starts_with(['-', '.', '/'])
                || image.len() > MAX_IMAGE_BYTES
                || !image
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._/:@+-".contains(&b)))
        {
            return Err(launch_err(
                "launch.image",
                format!(
                    "an image reference is 1..={MAX_IMAGE_BYTES} bytes of letters, digits and ._/:@+-"
                ),
            ));
        }
        if self.command.len() > MAX_COMMAND_ARGS
            || self
                .command
                .iter()
                .any(|a| a.len() > MAX_COMMAND_ARG_BYTES || a.contains('\0'))
        {
            return Err(launch_err(
                "launch.command",
                format!(
                    "at most {MAX_COMMAND_ARGS} arguments of at most {MAX_COMMAND_ARG_BYTES} bytes, without NUL"
                ),
            ));
        }
        if self.env.len() > MAX_ENV_VARS {
            return Err(launch_err(
                "launch.env",
                format!("at most {MAX_ENV_VARS} environment variables"),
            ));
        }
        for (name, value) in &self.env {
            if name.len() > MAX_ENV_NAME_BYTES || !valid_env_name(name) {
                return Err(launch_err(
                    "launch.env",
                    format!(
                        "{name:?} is not a variable name ([A-Za-z_][A-Za-z0-9_]*, at most {MAX_ENV_NAME_BYTES} bytes)"
                    ),
                ));
            }
            if value.len() > MAX_ENV_VALUE_BYTES || value.contains('\0') {
                return Err(launch_err(
                    "launch.env",
                    format!("the value of {name} is over {MAX_ENV_VALUE_BYTES} bytes or holds NUL"),
                ));
            }
        }
        let mut ports: Vec<u16> = Vec::with_capacity(self.ports.len());
        for &p in &self.ports {
            match u16::try_from(p) {
                Ok(p) if p > 0 && !ports.contains(&p) => ports.push(p),
                _ => {
                    return Err(launch_err(
                        "launch.ports",
                        format!("port {p}: ports are distinct numbers in 1..=65535"),
                    ));
                }
            }
        }
        if ports.len() > MAX_PORTS {
            return Err(launch_err(
                "launch.ports",
                format!("at most {MAX_PORTS} ports"),
            ));
        }
        if self.disk_gb > MAX_DISK_GB {
            return Err(launch_err(
                "launch.disk_gb",
                format!("scratch disk is at most {MAX_DISK_GB} GB"),
            ));
        }
        if self.ssh_keys.is_empty() && (self.image.is_none() || ports.is_empty()) {
            return Err(launch_err(
                "launch.ssh_keys",
                "give at least one SSH key, or an image with ports to expose: otherwise nothing can reach the lease",
            ));
        }
        Ok(LaunchSpec {
            ssh_keys: self.ssh_keys.clone(),
            image: self.image.clone(),
            command: self.command.clone(),
            env: self.env.clone(),
            ports,
            disk_gb: self.disk_gb,
        })
    }
}

fn access_err(field: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::invalid(field, "invalid_access", message)
}

/// Validation of wire access details into the domain's.
pub trait AccessOf {
    /// The access details.
    ///
    /// # Errors
    /// 400 `invalid_access` naming the field; also when it gives neither an SSH host nor a URL.
    fn to_access(&self) -> Result<AccessDetails, ApiError>;
}

impl AccessOf for AccessRequest {
    fn to_access(&self) -> Result<AccessDetails, ApiError> {
        if let Some(h) = &self.ssh_host
            && (h.is_empty()
                || h.starts_with('-')
                || h.len() > MAX_HOST_BYTES
                || !h
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".:-".contains(&b)))
        {
            return Err(access_err(
                "access.ssh_host",
                format!(
                    "a host name or address: 1..={MAX_HOST_BYTES} bytes of letters, digits, '.', ':' and '-'"
                ),
            ));
        }
        let ssh_port = match self.ssh_port {
            None => None,
            Some(p) => match u16::try_from(p) {
                Ok(p) if p > 0 => Some(p),
                _ => return Err(access_err("access.ssh_port", "a port in 1..=65535")),
            },
        };
        if let Some(u) = &self.ssh_user {
            let mut b = u.bytes();
            let ok = !u.is_empty()
                && u.len() <= MAX_USER_BYTES
                && b.next()
                    .is_some_and(|c| c.is_ascii_lowercase() || c == b'_')
                && b.all(|c| {
                    c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'-'
                });
            if !ok {
                return Err(access_err(
                    "access.ssh_user",
                    format!("a login name: [a-z_][a-z0-9_-]*, at most {MAX_USER_BYTES} bytes"),
                ));
            }
        }
        if self.urls.len() > MAX_PORTS {
            return Err(access_err(
                "access.urls",
                format!("at most {MAX_PORTS} URLs"),
            ));
        }
        let mut urls = BTreeMap::new();
        for (port, url) in &self.urls {
            let port = match port.parse::<u16>() {
                Ok(p) if p > 0 => p,
                _ => {
                    return Err(access_err(
                        "access.urls",
                        format!("{port:?} is not a port number in 1..=65535"),
                    ));
                }
            };
            let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
            if !scheme_ok || url.len() > MAX_URL_BYTES || !url.bytes().all(|b| b.is_ascii_graphic())
            {
                return Err(access_err(
                    "access.urls",
                    format!(
                        "the URL of port {port} must be http(s), printable ASCII, at most {MAX_URL_BYTES} bytes"
                    ),
                ));
            }
            urls.insert(port, url.clone());
        }
        if self.ssh_host.is_none() && urls.is_empty() {
            return Err(access_err(
                "access",
                "give an SSH host or at least one URL: the buyer needs a way in",
            ));
        }
        Ok(AccessDetails {
            ssh_host: self.ssh_host.clone(),
            ssh_port,
            ssh_user: self.ssh_user.clone(),
            urls,
        })
    }
}

/// A report's free text, 1..=[`MAX_REPORT_TEXT_BYTES`] bytes without control characters.
///
/// # Errors
/// 400 `invalid_report` naming `field`.
pub fn report_text(field: &'static str, s: &str) -> Result<String, ApiError> {
    if s.trim().is_empty() || s.len() > MAX_REPORT_TEXT_BYTES || s.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            field,
            "invalid_report",
            format!("1..={MAX_REPORT_TEXT_BYTES} bytes of text without control characters"),
        ));
    }
    Ok(s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real ed25519 public key (generated for these tests; its private half was discarded).
    const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM7t3CQcihrH/4tM1K41mGfGrkuwsCkbk7Z2fjczQzrv buyer@laptop";

    fn field(r: Result<LaunchSpec, ApiError>) -> Option<&'static str> {
        r.err().and_then(|e| e.field)
    }

    #[test]
    fn launch_needs_a_way_in_and_checks_every_field_at_its_limit() {
        let ok = LaunchRequest {
            ssh_keys: vec![KEY.into()],
            ..LaunchRequest::default()
        };
        assert_eq!(ok.to_spec().unwrap().ssh_keys, vec![KEY.to_string()]);
        assert_eq!(
            field(LaunchRequest::default().to_spec()),
            Some("launch.ssh_keys")
        );
        let web = LaunchRequest {
            image: Some("jupyter/base-notebook:latest".into()),
            ports: vec![8888],
            ..LaunchRequest::default()
        };
        assert_eq!(web.to_spec().unwrap().ports, vec![8888]);
        let keys = |n: usize| LaunchRequest {
            ssh_keys: vec![KEY.into(); n],
            ..LaunchRequest::default()
        };
        assert!(keys(MAX_SSH_KEYS).to_spec().is_ok());
        assert_eq!(
            field(keys(MAX_SSH_KEYS + 1).to_spec()),
            Some("launch.ssh_keys")
        );
        // A new line, a blob that decodes to nothing, a blob of another type, a truncated blob.
        for bad in [
            "ssh-ed25519 AAAA\nrm -rf /",
            "ssh-ed25519 AAAA x",
            "ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAIM7t3CQcihrH/4tM1K41mGfGrkuwsCkbk7Z2fjczQzrv x",
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5 x",
            "ssh-ed25519 not-base64!",
        ] {
            let bad_key = LaunchRequest {
                ssh_keys: vec![bad.into()],
                ..LaunchRequest::default()
            };
            assert_eq!(field(bad_key.to_spec()), Some("launch.ssh_keys"), "{bad}");
        }
        let env = |name: &str, value: String| LaunchRequest {
            env: BTreeMap::from([(name.to_string(), value)]),
            ..ok.clone()
        };
        assert!(
            env("HF_HOME", "x".repeat(MAX_ENV_VALUE_BYTES))
                .to_spec()
                .is_ok()
        );
        assert_eq!(
            field(env("HF_HOME", "x".repeat(MAX_ENV_VALUE_BYTES + 1)).to_spec()),
            Some("launch.env")
        );
        assert_eq!(field(env("1BAD", "v".into()).to_spec()), Some("launch.env"));
        let ports = |p: Vec<u32>| LaunchRequest {
            ports: p,
            ..ok.clone()
        };
        assert_eq!(field(ports(vec![0]).to_spec()), Some("launch.ports"));
        assert_eq!(field(ports(vec![65536]).to_spec()), Some("launch.ports"));
        assert_eq!(field(ports(vec![22, 22]).to_spec()), Some("launch.ports"));
        assert!(ports((1..=MAX_PORTS as u32).collect()).to_spec().is_ok());
        assert_eq!(
            field(ports((1..=MAX_PORTS as u32 + 1).collect()).to_spec()),
            Some("launch.ports")
        );
        let disk = |d: u32| LaunchRequest {
            disk_gb: d,
            ..ok.clone()
        };
        assert!(disk(MAX_DISK_GB).to_spec().is_ok());
        assert_eq!(
            field(disk(MAX_DISK_GB + 1).to_spec()),
            Some("launch.disk_gb")
        );
        let image = |i: &str| LaunchRequest {
            image: Some(i.into()),
            ..ok.clone()
        };
        assert!(image("nvcr.io/nvidia/pytorch:24.05-py3").to_spec().is_ok());
        assert_eq!(field(image("bad image;rm").to_spec()), Some("launch.image"));
        // Option injection into an agent's `docker run … IMAGE`, or a path.
        assert_eq!(field(image("--privileged").to_spec()), Some("launch.image"));
        assert_eq!(
            field(image("../../etc/passwd").to_spec()),
            Some("launch.image")
        );
    }

    #[test]
    fn access_needs_a_host_or_a_url() {
        let a = AccessRequest {
            ssh_host: Some("203.0.113.7".into()),
            ssh_port: Some(2222),
            ssh_user: Some("root".into()),
            urls: BTreeMap::new(),
        };
        assert_eq!(
            a.to_access().unwrap().ssh_command().as_deref(),
            Some("ssh -p 2222 root@203.0.113.7")
        );
        let none = AccessRequest::default();
        assert_eq!(none.to_access().unwrap_err().field, Some("access"));
        // Option injection into the `ssh` command a buyer pastes.
        let dash = AccessRequest {
            ssh_host: Some("-oProxyCommand".into()),
            ..a.clone()
        };
        assert_eq!(dash.to_access().unwrap_err().field, Some("access.ssh_host"));
        let bad_port = AccessRequest {
            ssh_port: Some(70_000),
            ..a.clone()
        };
        assert_eq!(
            bad_port.to_access().unwrap_err().field,
            Some("access.ssh_port")
        );
        let bad_url = AccessRequest {
            urls: BTreeMap::from([("8888".into(), "javascript:alert(1)".into())]),
            ..a
        };
        assert_eq!(bad_url.to_access().unwrap_err().field, Some("access.urls"));
        assert!(report_text("reason", "").is_err());
        assert!(report_text("reason", "pull failed\n").is_err());
        assert!(report_text("reason", &"x".repeat(MAX_REPORT_TEXT_BYTES + 1)).is_err());
        assert_eq!(report_text("reason", "pull failed").unwrap(), "pull failed");
    }
}
