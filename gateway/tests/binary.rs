//! The server binary as a user runs it: `--demo` prints keys and serves the page; Ctrl-C
//! (SIGINT) stops it gracefully — found by the fresh-user review, where the demo's node agents
//! kept the sequencer alive and the process never exited; a second Ctrl-C exits at once when a
//! client holds the graceful stop.

use crate::support;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Starts `gateway --demo` on a free port in `dir`; answers the child, its port and the
/// buyer key it printed.
fn start_demo(dir: &std::path::Path) -> (std::process::Child, u16, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_gateway"))
        .args(["--demo", "--listen", &format!("127.0.0.1:{port}")])
        .arg("--data-dir")
        .arg(dir)
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
    (child, port, buyer_key)
}

/// `GET /v1/balance` with a buyer key.
async fn balance(port: u16, key: &str) -> serde_json::Value {
    reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/v1/balance"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Sends `sig` to the child (its own, positive pid: that process only).
fn signal(child: &std::process::Child, sig: i32) {
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: kill(2) on the child's own positive pid.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

/// Waits up to `within` for the child to exit; answers its status.
fn exit_within(child: &mut std::process::Child, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the server did not exit within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_demo_serves_and_stops_cleanly_on_ctrl_c() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, port, buyer_key) = start_demo(dir.path());
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
        let bal = balance(port, &buyer_key).await;
        assert_eq!(bal["balance"], "100000.00", "{bal}");
        assert_eq!(
            bal["held_by_bids"], "26.67",
            "the demo's resting H100 bid: 20 × 8 × 600 s"
        );
    });
    signal(&child, libc::SIGINT);
    let status = exit_within(&mut child, Duration::from_secs(15));
    assert!(status.success(), "exit status {status}");
}

/// A client that stopped reading can hold the graceful stop for the HTTP shutdown timeout
/// (10 s); a second Ctrl-C then exits at once (status 130), and the next start recovers the
/// market from the journal. actix takes no second stop command while a graceful one runs, so
/// before this the second Ctrl-C did nothing (found by a fresh-user review).
///
/// Whether stalled clients hold the stop depends on whether the server's unsent frames still
/// fit in the kernel's socket buffers when the sessions close; four stalled clients per
/// attempt, and up to three attempts, make a held stop all but certain.
#[test]
fn a_second_ctrl_c_exits_at_once_while_a_client_holds_the_stop() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut buyer_account = None;
    for _attempt in 0..3 {
        let (mut child, port, buyer_key) = start_demo(dir.path());
        // Every start on the same data finds the same buyer account: the journal recovered it
        // (a fresh market would have created a new one).
        let id = rt.block_on(balance(port, &buyer_key))["account_id"].clone();
        assert_eq!(*buyer_account.get_or_insert(id.clone()), id);
        let stalled = rt.block_on(async {
            let url = format!("ws://127.0.0.1:{port}/v1/ws");
            let mut v = Vec::new();
            for _ in 0..4 {
                let mut ws = support::api::StalledWs::connect(&url, &buyer_key, 4096).await;
                assert!(ws.flood(1_000_000, support::api::text_ping()).await > 0);
                v.push(ws);
            }
            v
        });
        signal(&child, libc::SIGINT);
        std::thread::sleep(Duration::from_millis(1_500));
        if let Some(status) = child.try_wait().unwrap() {
            // The unsent frames fitted in the kernel's buffers: nothing held the stop.
            assert!(status.success(), "exit status {status}");
            continue;
        }
        let second = Instant::now();
        signal(&child, libc::SIGINT);
        let status = exit_within(&mut child, Duration::from_secs(5));
        if status.success() {
            // It was still finishing a clean stop (final snapshot), not held: try again.
            continue;
        }
        assert_eq!(status.code(), Some(130), "exit status {status}");
        assert!(
            second.elapsed() < Duration::from_secs(2),
            "{:?}",
            second.elapsed()
        );
        drop(stalled);

        // The market recovers from the journal without the final snapshot: same buyer
        // account, its resting bid still holding funds.
        let (mut child, port, buyer_key) = start_demo(dir.path());
        let after = rt.block_on(balance(port, &buyer_key));
        assert_eq!(
            Some(&after["account_id"]),
            buyer_account.as_ref(),
            "{after}"
        );
        assert_eq!(after["held_by_bids"], "26.67", "{after}");
        signal(&child, libc::SIGINT);
        assert!(exit_within(&mut child, Duration::from_secs(15)).success());
        return;
    }
    panic!("in three attempts, four stalled clients never held the graceful stop");
}

/// Issue 25: `/readyz` said ready before the admin account was journaled, so the admin key
/// answered 401 right after (twice in about 110 starts on a busy machine). Ready now means
/// bootstrapped: from the first 200 of `/readyz` on, the admin key signs in. Polled as fast
/// as the server answers, over several fresh starts. The same start, with the invoice PDF
/// font missing, says so in `/readyz`'s `warnings` (and only PDFs are unavailable).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_answers_ready_only_once_the_admin_key_signs_in() {
    const ADMIN_KEY: &str = "gpux_admin_readiness_test_key_0000000000001";
    let http = reqwest::Client::new();
    for round in 0..4 {
        let dir = tempfile::tempdir().unwrap();
        let port = support::free_port();
        let mut child = Command::new(env!("CARGO_BIN_EXE_gateway"))
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .arg("--data-dir")
            .arg(dir.path())
            .env("GPUX_ADMIN_KEY", ADMIN_KEY)
            .env(
                "GPUX_API__INVOICE__FONT_PATH",
                dir.path().join("no-such-font.ttc"),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        let ready = loop {
            assert!(Instant::now() < deadline, "round {round}: never ready");
            if let Ok(r) = http.get(format!("{base}/readyz")).send().await {
                let status = r.status().as_u16();
                let body: serde_json::Value = r.json().await.unwrap();
                if status == 200 {
                    break body;
                }
                assert_eq!(status, 503, "round {round}: {body}");
                assert_eq!(body["code"], "starting", "round {round}: {body}");
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        let me = http
            .get(format!("{base}/v1/me"))
            .bearer_auth(ADMIN_KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(
            me.status().as_u16(),
            200,
            "round {round}: the admin key after ready"
        );
        let me: serde_json::Value = me.json().await.unwrap();
        assert_eq!(me["role"], "admin", "{me}");
        let warnings = ready["warnings"].as_array().expect("warnings").clone();
        assert_eq!(warnings.len(), 1, "{ready}");
        let w = warnings[0].as_str().unwrap();
        assert!(
            w.contains("no-such-font.ttc") && w.contains("fonts-wqy-microhei"),
            "{w}"
        );
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

/// What `gateway --demo` printed: the key table (role, name, key) and the `export VAR=KEY`
/// lines.
struct Banner {
    keys: Vec<(String, String, String)>,
    exports: std::collections::BTreeMap<String, String>,
}

/// Starts `gateway --demo` on a free port in `dir` with `admin_key` as `GPUX_ADMIN_KEY`;
/// answers the child, its port and its banner. The rest of its output is drained, so the
/// server never writes into a closed pipe.
fn start_demo_banner(dir: &std::path::Path, admin_key: &str) -> (std::process::Child, u16, Banner) {
    let port = support::free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_gateway"))
        .args(["--demo", "--listen", &format!("127.0.0.1:{port}")])
        .arg("--data-dir")
        .arg(dir)
        .env("GPUX_ADMIN_KEY", admin_key)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut banner = Banner {
        keys: Vec::new(),
        exports: Default::default(),
    };
    for line in lines.by_ref() {
        let line = line.unwrap();
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["export", assignment] => {
                let (var, key) = assignment.split_once('=').unwrap();
                banner.exports.insert(var.into(), key.into());
            }
            [role, name, key] if key.starts_with("gpux_") => {
                banner
                    .keys
                    .push((role.to_string(), name.to_string(), key.to_string()));
            }
            _ => {}
        }
        if line.starts_with("  API reference") {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    (child, port, banner)
}

/// Issue 25, item 5: restarting `--demo` on the same data revoked every key of the demo
/// accounts (node keys included, so a user's `gpux-agent` exited), and its simulated agents
/// heartbeated every node of the demo suppliers, a user's own too. Now: the same role keys on
/// every start (kept in `demo-keys.json`, mode 0600), printed as the README's `export` lines;
/// a user's node key and a key an admin added stay valid; only the seeded nodes are
/// heartbeated.
#[test]
fn restarting_the_demo_keeps_its_keys_and_leaves_what_a_user_added_alone() {
    const ADMIN_KEY: &str = "gpux_admin_demo_restart_test_key_000000000001";
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let http = reqwest::Client::new();
    let (mut child, port, first) = start_demo_banner(dir.path(), ADMIN_KEY);
    let names: Vec<&str> = first.keys.iter().map(|(_, n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "demo-idc-shanghai",
            "demo-idc-beijing",
            "demo-lab-shenzhen",
            "demo-buyer",
            "demo-finance"
        ]
    );
    let key_of = |b: &Banner, name: &str| {
        b.keys
            .iter()
            .find(|(_, n, _)| n == name)
            .map(|(_, _, k)| k.clone())
            .unwrap()
    };
    let want: std::collections::BTreeMap<String, String> = [
        ("BUYER_KEY", key_of(&first, "demo-buyer")),
        ("SUPPLIER_KEY", key_of(&first, "demo-idc-shanghai")),
        ("FINANCE_KEY", key_of(&first, "demo-finance")),
        ("ADMIN_KEY", ADMIN_KEY.to_string()),
    ]
    .map(|(v, k)| (v.to_string(), k))
    .into();
    assert_eq!(first.exports, want);
    // The keys file: the owner's only, holding the printed keys.
    let file = dir.path().join(gateway::demo::DEMO_KEYS_FILE);
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        let saved: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        for (_, name, key) in &first.keys {
            assert_eq!(saved["keys"][name], key.as_str(), "{saved}");
        }
    }
    let base = format!("http://127.0.0.1:{port}");
    let supplier = want["SUPPLIER_KEY"].clone();
    let (node_key, node_id, before_restart, buyer_extra) = rt.block_on(async {
        // A user's node of a demo supplier, registered with its own node key.
        let r = http
            .post(format!("{base}/v1/node-keys"))
            .bearer_auth(&supplier)
            .json(&serde_json::json!({"node_name": "user-h100-01"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let node_key = r.json::<serde_json::Value>().await.unwrap()["api_key"]
            .as_str()
            .unwrap()
            .to_string();
        let r = http
            .post(format!("{base}/v1/nodes"))
            .bearer_auth(&node_key)
            .json(
                &serde_json::json!({"name": "user-h100-01", "sku": "H100-80G", "gpus": 8,
                "region": "cn-east-2", "jurisdiction": "CN", "interconnect": "infiniband"}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let node: serde_json::Value = r.json().await.unwrap();
        let node_id = node["id"].as_str().unwrap().to_string();
        let heartbeat = node["last_heartbeat_ms"].as_i64().unwrap();
        // A second key of the demo buyer, made by an admin.
        let me: serde_json::Value = http
            .get(format!("{base}/v1/me"))
            .bearer_auth(&want["BUYER_KEY"])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let r = http
            .post(format!(
                "{base}/v1/admin/accounts/{}/keys",
                me["account_id"].as_str().unwrap()
            ))
            .bearer_auth(ADMIN_KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let extra = r.json::<serde_json::Value>().await.unwrap()["api_key"]
            .as_str()
            .unwrap()
            .to_string();
        (node_key, node_id, heartbeat, extra)
    });
    signal(&child, libc::SIGINT);
    assert!(exit_within(&mut child, Duration::from_secs(15)).success());

    let (mut child, port, second) = start_demo_banner(dir.path(), ADMIN_KEY);
    let base = format!("http://127.0.0.1:{port}");
    assert_eq!(second.keys, first.keys, "the same keys after a restart");
    assert_eq!(second.exports, first.exports);
    rt.block_on(async {
        let get = |path: String, key: String| {
            let http = http.clone();
            let url = format!("{base}{path}");
            async move {
                let r = http.get(url).bearer_auth(key).send().await.unwrap();
                let status = r.status().as_u16();
                (status, r.json::<serde_json::Value>().await.unwrap())
            }
        };
        for (role, name, key) in &second.keys {
            let (status, me) = get("/v1/me".into(), key.clone()).await;
            assert_eq!(status, 200, "{name}: {me}");
            assert_eq!(
                (me["name"].as_str(), me["role"].as_str()),
                (Some(name.as_str()), Some(role.as_str()))
            );
        }
        let (status, leases) = get(format!("/v1/nodes/{node_id}/leases"), node_key.clone()).await;
        assert_eq!(status, 200, "the user's node key after a restart: {leases}");
        assert_eq!(leases["node_id"], node_id.as_str(), "{leases}");
        let (status, bal) = get("/v1/balance".into(), buyer_extra.clone()).await;
        assert_eq!(
            status, 200,
            "the admin-made buyer key after a restart: {bal}"
        );
        // A restart is an outage the engine discounts: its first batch (`Resume`) moves every
        // online node's last heartbeat forward by the downtime (market-rules §7). From then
        // on, over two demo heartbeat periods, every seeded node beats and the user's node
        // never does.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (status, node) = get(format!("/v1/nodes/{node_id}"), node_key.clone()).await;
        assert_eq!(status, 200, "{node}");
        let read_ms = gateway::api::now_ms();
        let user_heartbeat = node["last_heartbeat_ms"].as_i64().unwrap();
        assert!(
            (before_restart..=read_ms).contains(&user_heartbeat),
            "{before_restart} ≤ {user_heartbeat} ≤ {read_ms}"
        );
        tokio::time::sleep(Duration::from_millis(
            2 * gateway::demo::DEMO_HEARTBEAT_MS + 500,
        ))
        .await;
        let mut seeded_seen = 0;
        for supplier in ["demo-idc-shanghai", "demo-idc-beijing", "demo-lab-shenzhen"] {
            let key = key_of(&second, supplier);
            let (status, nodes) = get("/v1/nodes".into(), key).await;
            assert_eq!(status, 200, "{nodes}");
            for n in nodes["nodes"].as_array().unwrap() {
                let name = n["name"].as_str().unwrap();
                let beat = n["last_heartbeat_ms"].as_i64().unwrap();
                if name == "user-h100-01" {
                    assert_eq!(supplier, "demo-idc-shanghai");
                    assert_eq!(
                        beat, user_heartbeat,
                        "the demo heartbeated the user's node: {n}"
                    );
                } else {
                    assert!(
                        gateway::demo::seeded_nodes().contains(&(supplier, name)),
                        "{supplier}: {name}"
                    );
                    assert!(
                        beat > read_ms,
                        "seeded node {name} not heartbeated since {read_ms}: {n}"
                    );
                    assert_eq!(n["status"], "online", "{n}");
                    seeded_seen += 1;
                }
            }
        }
        assert_eq!(seeded_seen, gateway::demo::seeded_nodes().len());
        assert_eq!(seeded_seen, 14);
        // The user's node alone was left to its (absent) agent: its heartbeat has not moved,
        // read with its own key.
        let (status, node) = get(format!("/v1/nodes/{node_id}"), node_key.clone()).await;
        assert_eq!(status, 200, "{node}");
        assert_eq!(
            node["last_heartbeat_ms"].as_i64(),
            Some(user_heartbeat),
            "{node}"
        );
    });
    signal(&child, libc::SIGINT);
    assert!(exit_within(&mut child, Duration::from_secs(15)).success());
}

/// Issue 25 (noticed in its pass): over TLS with a private certificate the demo's banner
/// printed `curl -s https://…` lines that fail certificate verification as printed. They now
/// carry `--cacert` with the served certificate, and the base is `https://`.
#[test]
fn the_tls_demo_banner_prints_curl_lines_that_trust_the_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    let port = support::free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_gateway"))
        .args(["--demo", "--listen", &format!("127.0.0.1:{port}")])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut curls = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if line.trim_start().starts_with("curl") {
            curls.push(line.clone());
        }
        if line.starts_with("  API reference") {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let want = format!("curl -s --cacert {}", cert.display());
    assert!(curls.len() >= 3, "{curls:?}");
    for c in &curls {
        assert!(c.contains(&want), "{c}");
    }
    assert!(
        curls[0].contains(&format!("https://127.0.0.1:{port}/")),
        "{curls:?}"
    );
}
