//! The server binary as a user runs it: `--demo` prints keys and serves the page; Ctrl-C
//! (SIGINT) stops it gracefully — found by the fresh-user review, where the demo's node agents
//! kept the sequencer alive and the process never exited.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn the_demo_serves_and_stops_cleanly_on_ctrl_c() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_gateway"))
        .args(["--demo", "--listen", &format!("127.0.0.1:{port}")])
        .arg("--data-dir")
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    let mut buyer_key = None;
    for line in out.lines() {
        let line = line.unwrap();
        if line.contains("buyer") && line.contains("gpux_") {
            buyer_key = line.split_whitespace().last().map(String::from);
        }
        if line.starts_with("  API reference") {
            break;
        }
    }
    let buyer_key = buyer_key.expect("the demo printed a buyer key");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = reqwest::Client::new();
        let page = c
            .get(format!("http://127.0.0.1:{port}/"))
            .send()
            .await
            .unwrap();
        assert_eq!(page.status(), 200);
        assert!(page.text().await.unwrap().contains("Live inventory"));
        let bal: serde_json::Value = c
            .get(format!("http://127.0.0.1:{port}/v1/balance"))
            .bearer_auth(&buyer_key)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(bal["balance"], "100000.00", "{bal}");
        assert_eq!(
            bal["held_by_bids"], "26.67",
            "the demo's resting H100 bid: 20 × 8 × 600 s"
        );
    });
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: kill(2) on the child's own pid (positive: that process only).
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "exit status {status}");
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the demo server did not stop within 15 s of SIGINT");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
