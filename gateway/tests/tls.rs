//! TLS terminated by the server (issue 18; `gateway::tls`): with a self-signed certificate,
//! REST over HTTPS and the websocket over WSS answer, a plain-HTTP request to the TLS port
//! gets no answer, and a new certificate written over the files is served without a restart
//! (while a pair that does not load leaves the old one in place).

use gateway::app::{AppOptions, TlsFiles, start};
use gateway::journal::EmbeddedJournal;
use rustls::pki_types::{CertificateDer, ServerName};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A self-signed certificate for `localhost`: (certificate PEM, key PEM, certificate DER).
fn self_signed() -> (String, String, CertificateDer<'static>) {
    let ck =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("a certificate");
    (
        ck.cert.pem(),
        ck.signing_key.serialize_pem(),
        ck.cert.der().clone(),
    )
}

/// Writes a file the way a certificate manager should: a temp file renamed over it.
fn replace(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn client(trusted: &[&CertificateDer<'static>]) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for c in trusted {
        roots.add((*c).clone()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

async fn connect(
    connector: &tokio_rustls::TlsConnector,
    addr: std::net::SocketAddr,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
}

/// The certificate the server presents now.
async fn presented(
    connector: &tokio_rustls::TlsConnector,
    addr: std::net::SocketAddr,
) -> CertificateDer<'static> {
    let s = connect(connector, addr).await.expect("handshake");
    s.get_ref().1.peer_certificates().expect("a certificate")[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_and_wss_with_a_self_signed_certificate_reloaded_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (cert_pem, key_pem, first) = self_signed();
    let cert = dir.path().join("cert.pem");
    let key = dir.path().join("key.pem");
    std::fs::write(&cert, &cert_pem).unwrap();
    std::fs::write(&key, &key_pem).unwrap();
    let journal = EmbeddedJournal::open(&dir.path().join("data"), 0)
        .await
        .unwrap();
    let running = start(
        journal.into(),
        AppOptions {
            tick_ms: 0,
            tls: Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
            }),
            ..AppOptions::default()
        },
    )
    .await
    .expect("the server starts with TLS");
    let addr = running.addr;
    let (cert2_pem, key2_pem, second) = self_signed();
    let tls = client(&[&first, &second]);

    // REST over HTTPS.
    let mut s = connect(&tls, addr).await.expect("handshake");
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with(r#"{"status":"ok"}"#), "{answer}");

    // The websocket over WSS: the welcome comes.
    let s = connect(&tls, addr).await.expect("handshake");
    let (mut ws, _) = tokio_tungstenite::client_async("wss://localhost/v1/ws", s)
        .await
        .expect("websocket upgrade over TLS");
    let first_frame = futures_util::StreamExt::next(&mut ws)
        .await
        .expect("a frame")
        .expect("a message");
    let v: serde_json::Value = serde_json::from_str(first_frame.to_text().unwrap()).unwrap();
    assert_eq!(v["type"], "welcome", "{v}");

    // Plain HTTP on the TLS port: no HTTP answer (the handshake fails, the socket closes).
    let mut plain = TcpStream::connect(addr).await.unwrap();
    plain
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), plain.read_to_end(&mut buf)).await;
    assert!(
        !String::from_utf8_lossy(&buf).contains("HTTP/1.1 200"),
        "plain HTTP was served on the TLS port"
    );

    // Half a rotation (the new key beside the old certificate): the pair does not load, the
    // first one stays in use.
    replace(&key, &key2_pem);
    tokio::time::sleep(Duration::from_millis(gateway::tls::RELOAD_CHECK_MS * 2)).await;
    assert_eq!(
        presented(&tls, addr).await,
        first,
        "a mismatched pair was served"
    );
    // The rotation completed: the new pair is served within a check or two, no restart.
    replace(&cert, &cert2_pem);
    let started = Instant::now();
    loop {
        if presented(&tls, addr).await == second {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_millis(gateway::tls::RELOAD_CHECK_MS * 4),
            "the new certificate was not served"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "new certificate served {} ms after the rotation completed",
        started.elapsed().as_millis()
    );
    running.stop().await.unwrap();
}

#[test]
fn a_missing_or_mismatched_pair_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let (cert_pem, _, _) = self_signed();
    let (_, other_key, _) = self_signed();
    let cert = dir.path().join("cert.pem");
    let key = dir.path().join("key.pem");
    std::fs::write(&cert, &cert_pem).unwrap();
    let e = gateway::tls::load_pair(&cert, &key).unwrap_err();
    assert!(e.to_string().contains("key.pem"), "{e}");
    std::fs::write(&key, &other_key).unwrap();
    let e = gateway::tls::load_pair(&cert, &key).unwrap_err();
    assert!(e.to_string().starts_with("certificate and key"), "{e}");
    std::fs::write(&cert, "not a certificate").unwrap();
    let e = gateway::tls::load_pair(&cert, &key).unwrap_err();
    assert!(e.to_string().contains("cert.pem"), "{e}");
}
