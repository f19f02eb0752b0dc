//! TLS terminated by the server itself (issue 18: API keys must not cross a network in clear):
//! HTTPS and WSS on the listening port when a certificate and key are configured
//! (`tls_cert`, `tls_key`: PEM files), with rustls on the `ring` provider, HTTP/1.1 only
//! (ALPN `http/1.1`).
//!
//! The certificate is **reloaded without a restart**: [`CertReloader`] checks the two files'
//! modification times every [`RELOAD_CHECK_MS`] and, when either changed, loads the pair and
//! swaps it in for new handshakes (connections already open keep theirs). A pair that does
//! not load (a half-written file, a key that does not match) is logged and the previous pair
//! stays in use; the check runs again at the next change.
//!
//! A handshake that does not finish within [`HANDSHAKE_TIMEOUT_MS`] ends the connection.

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

/// How often the certificate files are checked for a change, ms.
pub const RELOAD_CHECK_MS: u64 = 2_000;

/// Time a client has to finish the TLS handshake, ms.
pub const HANDSHAKE_TIMEOUT_MS: u64 = 10_000;

/// Why a certificate and key could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds no PEM object of the kind needed.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        message: String,
    },
    /// rustls refused the pair (an unsupported key type, or a key that is not the
    /// certificate's).
    #[error("certificate and key: {0}")]
    Pair(String),
}

/// The crypto provider every TLS piece here uses.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Loads the certificate chain (`cert`, PEM, leaf first) and its private key (`key`, PEM:
/// PKCS#8, PKCS#1 or SEC1) as a pair rustls can serve.
///
/// # Errors
/// [`TlsError`].
pub fn load_pair(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, TlsError> {
    let file_error = |path: &Path, message: String| TlsError::File {
        path: path.to_path_buf(),
        message,
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| file_error(cert, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| file_error(cert, e.to_string()))?;
    if chain.is_empty() {
        return Err(file_error(cert, "no CERTIFICATE in the file".into()));
    }
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| file_error(key, e.to_string()))?;
    let certified = CertifiedKey::from_der(chain, key_der, &provider())
        .map_err(|e| TlsError::Pair(e.to_string()))?;
    Ok(Arc::new(certified))
}

/// The certificate rustls serves: the last pair that loaded.
#[derive(Debug)]
pub struct CertReloader {
    current: RwLock<Arc<CertifiedKey>>,
    cert: PathBuf,
    key: PathBuf,
}

impl ResolvesServerCert for CertReloader {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.read().ok().map(|c| c.clone())
    }
}

fn modified(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

impl CertReloader {
    /// Loads the pair once.
    ///
    /// # Errors
    /// [`TlsError`]: the server does not start with a pair it cannot serve.
    pub fn new(cert: &Path, key: &Path) -> Result<Arc<CertReloader>, TlsError> {
        Ok(Arc::new(CertReloader {
            current: RwLock::new(load_pair(cert, key)?),
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
        }))
    }

    /// Loads the pair again; on success new handshakes use it.
    ///
    /// # Errors
    /// [`TlsError`]; the previous pair stays in use.
    pub fn reload(&self) -> Result<(), TlsError> {
        let pair = load_pair(&self.cert, &self.key)?;
        if let Ok(mut g) = self.current.write() {
            *g = pair;
        }
        Ok(())
    }

    /// Checks the files every [`RELOAD_CHECK_MS`] and reloads when either changed (module
    /// docs). Runs until aborted.
    pub fn watch(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            let stamp = |me: &CertReloader| (modified(&me.cert), modified(&me.key));
            let mut seen = stamp(&me);
            let mut every = tokio::time::interval(Duration::from_millis(RELOAD_CHECK_MS));
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let now = stamp(&me);
                if now == seen {
                    continue;
                }
                seen = now;
                match me.reload() {
                    Ok(()) => tracing::info!(cert = %me.cert.display(), "TLS certificate reloaded"),
                    Err(e) => {
                        tracing::error!(error = %e, "TLS certificate not reloaded; the previous one stays in use")
                    }
                }
            }
        })
    }

    /// The rustls server configuration serving this reloader's pair over HTTP/1.1.
    ///
    /// # Errors
    /// [`TlsError::Pair`] when the provider offers no safe protocol version (never with
    /// `ring`).
    pub fn server_config(self: &Arc<Self>) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Pair(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// An accepted connection, plain or TLS: what the HTTP front ([`crate::api::front`]) reads
/// and writes (one code path for both).
#[derive(Debug)]
pub enum Conn {
    /// Plain TCP.
    Plain(tokio::net::TcpStream),
    /// TLS over TCP, after the handshake.
    Tls(Box<tokio_rustls::server::TlsStream<tokio::net::TcpStream>>),
}

impl Conn {
    /// Wraps an accepted `io`: a TLS handshake first when `acceptor` is set, bounded by
    /// [`HANDSHAKE_TIMEOUT_MS`].
    ///
    /// # Errors
    /// The handshake failed or timed out.
    pub async fn accept(
        io: tokio::net::TcpStream,
        acceptor: Option<&tokio_rustls::TlsAcceptor>,
    ) -> std::io::Result<Conn> {
        let Some(acceptor) = acceptor else {
            return Ok(Conn::Plain(io));
        };
        match tokio::time::timeout(
            Duration::from_millis(HANDSHAKE_TIMEOUT_MS),
            acceptor.accept(io),
        )
        .await
        {
            Ok(Ok(s)) => Ok(Conn::Tls(Box::new(s))),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "TLS handshake timed out",
            )),
        }
    }
}

impl tokio::io::AsyncRead for Conn {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => std::pin::Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for Conn {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => std::pin::Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => std::pin::Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => std::pin::Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => std::pin::Pin::new(s).poll_write_vectored(cx, bufs),
            Conn::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Plain(s) => s.is_write_vectored(),
            Conn::Tls(s) => s.is_write_vectored(),
        }
    }
}
