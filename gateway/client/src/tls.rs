//! TLS of the client (issue 25): HTTPS and WSS with rustls on the `ring` provider, as the
//! server terminates it (`gateway/src/tls.rs`; no aws-lc). One [`ClientConfig`] per
//! [`crate::Client`], shared by its REST connection pool and every websocket it opens.
//!
//! Trust: the system's CA certificates (`rustls-native-certs`: the platform's store; on Linux
//! the OpenSSL locations, `SSL_CERT_FILE` / `SSL_CERT_DIR` honoured), read once per process
//! and only when a base URL is `https://`, plus every certificate of an optional CA file
//! ([`crate::ClientOptions::ca_cert`], PEM) for a server whose certificate a private CA
//! issued. The server's name is checked against its certificate (webpki); TLS 1.2 and 1.3;
//! ALPN `http/1.1` (the server's only protocol); no client certificate.
//!
//! Errors: a CA file that cannot be read or holds no certificate is [`ClientError::Invalid`]
//! naming the file, before any IO. A handshake that fails is a [`ClientError::Transport`]
//! whose message names the cause ([`describe`]): a certificate not trusted (unknown issuer:
//! give the CA's certificate, `--ca-cert FILE`), a certificate not valid for the host name,
//! expired or not yet valid, or a server that does not speak TLS on that port.

use crate::error::ClientError;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::{CertificateError, ClientConfig, RootCertStore};
use std::error::Error as StdError;
use std::path::Path;
use std::sync::{Arc, OnceLock};

/// The ALPN protocol offered: the server speaks HTTP/1.1 only (and the websocket upgrade is
/// an HTTP/1.1 request).
pub(crate) const ALPN_HTTP1: &[u8] = b"http/1.1";

/// The system's CA certificates, read once per process (a CA bundle changed later is seen by
/// the next process).
fn system_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    // Unreadable entries are skipped: trust is what could be read (none at all leaves only
    // the CA file, and handshakes then fail as "not trusted").
    ROOTS.get_or_init(|| rustls_native_certs::load_native_certs().certs)
}

/// Reads every certificate of a PEM file (`-----BEGIN CERTIFICATE-----` blocks; other
/// blocks are skipped).
///
/// # Errors
/// [`ClientError::Invalid`] naming the file: it cannot be read, a block is not valid PEM, or
/// it holds no certificate.
pub(crate) fn read_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, ClientError> {
    let bad = |why: String| {
        ClientError::Invalid(format!("CA certificate file {}: {why}", path.display()))
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(e.to_string()))?;
    if certs.is_empty() {
        return Err(bad(
            "no certificate in it (expected PEM: -----BEGIN CERTIFICATE-----)".into(),
        ));
    }
    Ok(certs)
}

/// The client's TLS configuration: the system's CAs when `system` (a base URL is
/// `https://`), plus the certificates of `ca_file`.
///
/// # Errors
/// [`ClientError::Invalid`] for a CA file that [`read_ca_file`] refuses or whose certificate
/// is not one webpki can use as a trust anchor (named in the message).
pub(crate) fn client_config(
    ca_file: Option<&Path>,
    system: bool,
) -> Result<Arc<ClientConfig>, ClientError> {
    let mut roots = RootCertStore::empty();
    if system {
        roots.add_parsable_certificates(system_roots().iter().cloned());
    }
    if let Some(path) = ca_file {
        for cert in read_ca_file(path)? {
            roots.add(cert).map_err(|e| {
                ClientError::Invalid(format!(
                    "CA certificate file {}: not a usable CA certificate: {e}",
                    path.display()
                ))
            })?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientError::Invalid(format!("TLS configuration: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    Ok(Arc::new(config))
}

/// The rustls error somewhere in `e`'s chain of sources: directly, or inside an
/// `std::io::Error` as tokio-rustls wraps it (hyper-rustls wraps that one in another, and an
/// `io::Error`'s `source` skips what it wraps, so wrapped errors are unwrapped here).
fn rustls_error<'a>(e: &'a (dyn StdError + 'static)) -> Option<&'a rustls::Error> {
    let mut cur = Some(e);
    while let Some(c) = cur {
        let mut inner: &(dyn StdError + 'static) = c;
        while let Some(wrapped) = inner
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            inner = wrapped;
        }
        if let Some(r) = inner.downcast_ref::<rustls::Error>() {
            return Some(r);
        }
        cur = c.source();
    }
    None
}

/// What went wrong in a failed TLS handshake, for people, when `e` (a transport error and its
/// sources) is one: `None` otherwise.
pub(crate) fn describe(e: &(dyn StdError + 'static)) -> Option<String> {
    let r = rustls_error(e)?;
    Some(match r {
        rustls::Error::InvalidCertificate(c) => match c {
            CertificateError::UnknownIssuer => format!(
                "certificate not trusted ({r}): no CA this client trusts issued the server's \
                 certificate; for a private CA, give its certificate (PEM) with --ca-cert FILE"
            ),
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                format!(
                    "certificate not valid for this host name ({r}): use a URL with a name the \
                     certificate holds"
                )
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                format!("certificate expired ({r})")
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                format!("certificate not valid yet ({r}): check this host's clock")
            }
            _ => format!("certificate refused ({r})"),
        },
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateHandshakeMessage { .. } => {
            format!(
                "TLS handshake failed ({r}): does the server speak TLS on this port? (a \
                 plain-HTTP server takes an http:// URL)"
            )
        }
        _ => format!("TLS handshake failed ({r})"),
    })
}

/// A transport error (with its sources) of a request to `authority` (`host:port`) as a
/// client error: a failed TLS handshake says why ([`describe`]), a timed-out connect is
/// [`ClientError::Timeout`], anything else is [`ClientError::Transport`] with the chain.
pub(crate) fn transport_error(e: &(dyn StdError + 'static), authority: &str) -> ClientError {
    if let Some(why) = describe(e) {
        return ClientError::Transport(format!("TLS with {authority}: {why}"));
    }
    let mut cur = Some(e);
    while let Some(c) = cur {
        if c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return ClientError::Timeout;
        }
        cur = c.source();
    }
    ClientError::Transport(format!("{authority}: {}", crate::client::chain(e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshake_errors_name_their_cause() {
        // As hyper-rustls hands it on: tokio-rustls's `io::Error` in another one.
        let io = |e: rustls::Error| {
            std::io::Error::other(std::io::Error::new(std::io::ErrorKind::InvalidData, e))
        };
        let untrusted = io(rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer,
        ));
        let m = transport_error(&untrusted, "h:1").to_string();
        assert!(
            m.starts_with("transport: TLS with h:1: certificate not trusted"),
            "{m}"
        );
        assert!(m.contains("--ca-cert FILE"), "{m}");
        let name = io(rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName,
        ));
        let m = transport_error(&name, "h:1").to_string();
        assert!(m.contains("not valid for this host name"), "{m}");
        let plain = io(rustls::Error::InvalidMessage(
            rustls::InvalidMessage::InvalidContentType,
        ));
        assert!(
            transport_error(&plain, "h:1")
                .to_string()
                .contains("does the server speak TLS"),
        );
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(
            transport_error(&refused, "h:1"),
            ClientError::Transport(format!("h:1: {refused}"))
        );
        let slow = std::io::Error::from(std::io::ErrorKind::TimedOut);
        assert_eq!(transport_error(&slow, "h:1"), ClientError::Timeout);
    }
}
