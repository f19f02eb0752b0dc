//! Issue 26 on the agent's side (docs/market-rules.md §12.1, §12.2), against a fake exchange
//! (a few lines of HTTP/1.1 over a socket: the real exchange does not place verification
//! leases or record GPU UUIDs on leases yet, so this fake serves the lease list the tests
//! script and records every report):
//!
//! 1. The parsers of `all_reduce_perf` and `dcgmi diag` output on recorded outputs of the real
//!    tools (`tests/fixtures/`, sources in its README).
//! 2. A UUID changed under a lease (a swapped card): the provision hook does not run, the
//!    lease is reported failed with cause `gpu_changed`, naming index, expected and found
//!    UUID; the wipe then runs as for any ended lease. A lease whose UUIDs match provisions.
//! 3. A GPU in MIG mode: attested with `mig_mode: true`, and every heartbeat lists it in
//!    `unhealthy_gpus` (reason `mig_enabled`), not as a healthy whole GPU.
//! 4. A verification lease on a simulated host: no provision hook, no ready; the configured
//!    simulated figures are POSTed to `/v1/leases/{id}/verification`, then the lease wipes
//!    through the teardown hook. With a verify hook: its figures, the raw `dcgmi diag` output
//!    it leaves to the agent parsed, and its environment (`GPUX_PHASE=verify`).
//!
//! Expectations come from issue 26 and docs/market-rules.md §12, not from runs.

use gpux_agent::SystemClock;
use gpux_agent::config::{AgentConfig, HookConfig, Hooks};
use gpux_agent::gpus::{GpuSource, SimulatedGpus};
use gpux_agent::verify::{SimulatedFigures, parse_all_reduce_busbw, parse_dcgmi_diag};
use gpux_client::Client;
use gpux_client::wire::{
    AttestationRequest, DcgmResultDto, HeartbeatRequest, LeasePurposeDto, LeaseStateDto, LeaseView,
    NvmlFaultDto, VerificationReport,
};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
/// Bound of every wait in these tests.
const WAIT: Duration = Duration::from_secs(20);
const NODE_ID: &str = "7";
const SKU: &str = "H100-80G";

fn fixture(name: &str) -> String {
    std::fs::read_to_string(Path::new(FIXTURES).join(name)).expect("fixture")
}

#[test]
fn all_reduce_bus_bandwidth_is_the_largest_sizes_out_of_place_busbw() {
    // 2 × 8 H100, 8 B .. 8 GiB: the last row's out-of-place busbw (in-place: 337.35; the
    // run's average over every size: 70.742).
    let out = fixture("all_reduce_perf_h100_2x8.txt");
    assert_eq!(parse_all_reduce_busbw(&out), Some(338.82));
    // A run cut off before its first row (the tool crashed): its average line is all there is.
    let cut: String = out
        .lines()
        .filter(|l| l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(parse_all_reduce_busbw(&cut), Some(70.742));
    // Header only, or no tool: nothing.
    let header: String = out.lines().take(22).collect::<Vec<_>>().join("\n");
    assert_eq!(parse_all_reduce_busbw(&header), None);
    assert_eq!(
        parse_all_reduce_busbw("bash: all_reduce_perf: command not found"),
        None
    );
    // nccl-tests before the `root` column: busbw is the 7th column.
    let old = "#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n\
               1310720000     327680000     float     sum    1.2e6    1.09    1.09  2e-07    1.2e6    1.09    1.09  2e-07\n";
    assert_eq!(parse_all_reduce_busbw(old), Some(1.09));
}

#[test]
fn dcgmi_diag_outcomes_from_recorded_runs() {
    assert_eq!(
        parse_dcgmi_diag(&fixture("dcgmi_diag_r1_pass.txt")),
        Some(DcgmResultDto::Pass)
    );
    assert_eq!(
        parse_dcgmi_diag(&fixture("dcgmi_diag_r1_fail.txt")),
        Some(DcgmResultDto::Fail)
    );
    // PCIe `Fail - All` under metadata, a multi-line warning and a skipped test.
    assert_eq!(
        parse_dcgmi_diag(&fixture("dcgmi_diag_r2_pcie_fail.txt")),
        Some(DcgmResultDto::Fail)
    );
    // The same run with the failing test passing: the warning's message words and the
    // skipped test count for nothing.
    let passing = fixture("dcgmi_diag_r2_pcie_fail.txt").replace("Fail - All", "Pass - All");
    assert_eq!(parse_dcgmi_diag(&passing), Some(DcgmResultDto::Pass));
    // DCGM 4's per-GPU lines (written by hand: no recorded output found).
    let v4 = "| software                  | Pass                                           |\n\
              |                           | GPU0: Pass                                     |\n\
              |                           | GPU1: Warn                                     |\n";
    assert_eq!(parse_dcgmi_diag(v4), Some(DcgmResultDto::Warn));
    // dcgmi without a host engine prints no table.
    assert_eq!(
        parse_dcgmi_diag(
            "Error: unable to establish a connection to the specified host: localhost"
        ),
        None
    );
}

/// The fake exchange's state.
#[derive(Default)]
struct Fake {
    leases: Vec<LeaseView>,
    wiping: Vec<LeaseView>,
    version: u64,
    /// `(method and path, body)` of every request, in order.
    requests: Vec<(String, serde_json::Value)>,
}

impl Fake {
    fn posted(&self, path: &str) -> Vec<serde_json::Value> {
        self.requests
            .iter()
            .filter(|(p, _)| p == &format!("POST {path}"))
            .map(|(_, b)| b.clone())
            .collect()
    }

    /// The answer to one request: status and JSON body.
    fn answer(&mut self, method: &str, path: &str, body: serde_json::Value) -> (u16, String) {
        self.requests
            .push((format!("{method} {path}"), body.clone()));
        let node = |b: &serde_json::Value| {
            serde_json::json!({
                "id": NODE_ID, "name": b["name"].as_str().unwrap_or("n"), "sku": SKU,
                "gpus": b["gpus"].as_u64().unwrap_or(2), "healthy_gpus": 2,
                "region": "cn-east-2", "jurisdiction": "CN", "interconnect": "pcie",
                "nvlink": false, "status": "online", "draining": false,
                "last_heartbeat_ms": 0, "offer_id": null, "leased_gpus": 0,
                "listed_free_gpus": 0, "wiping_gpus": 0, "held": null,
                "unhealthy_gpus": []
            })
        };
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let json = match (method, parts.as_slice()) {
            ("GET", ["v1", "nodes"]) => serde_json::json!({"nodes": []}),
            ("POST", ["v1", "nodes"]) => node(&body),
            ("POST", ["v1", "nodes", _, "heartbeat"]) => serde_json::json!({
                "seq": self.requests.len(), "at_ms": now_ms(), "came_online": false,
                "leases_version": self.version
            }),
            ("POST", ["v1", "nodes", _, "attestation"]) => {
                serde_json::json!({"attested": true, "mismatch": null, "held": false})
            }
            ("GET", ["v1", "nodes", _, "leases"]) => serde_json::json!({
                "node_id": NODE_ID, "leases_version": self.version, "held": null,
                "leases": self.leases, "wiping": self.wiping
            }),
            ("POST", ["v1", "leases", id, report]) => {
                let Some(k) = self.leases.iter().position(|l| l.id == *id).or_else(|| {
                    (*report == "torn-down")
                        .then(|| self.wiping.iter().position(|l| l.id == *id))
                        .flatten()
                }) else {
                    return (409, error("lease_ended"));
                };
                self.version += 1;
                match *report {
                    "ready" => {
                        self.leases[k].state = LeaseStateDto::Active;
                        serde_json::to_value(&self.leases[k]).unwrap()
                    }
                    "failed" | "verification" => {
                        // The lease ends; its GPUs wipe (docs/market-rules.md §11.6, §12.2).
                        let mut l = self.leases.remove(k);
                        l.state = LeaseStateDto::Ended;
                        l.provision_deadline_ms = None;
                        l.deadline_in_ms = None;
                        self.wiping.push(l.clone());
                        serde_json::to_value(&l).unwrap()
                    }
                    "torn-down" => serde_json::to_value(self.wiping.remove(k)).unwrap(),
                    _ => return (404, error("not_found")),
                }
            }
            // The websocket among them: the agent retries it with backoff.
            _ => return (404, error("not_found")),
        };
        (200, json.to_string())
    }
}

fn error(code: &str) -> String {
    serde_json::json!({"code": code, "message": code, "request_id": "fake"}).to_string()
}

fn now_ms() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// Serves `fake` on a free port; its base URL.
async fn serve(fake: Arc<Mutex<Fake>>) -> (String, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let task = tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let fake = fake.clone();
            tokio::spawn(async move {
                let _ = one_request(sock, &fake).await;
            });
        }
    });
    (base, task)
}

/// Reads one request, answers it, closes the connection.
async fn one_request(mut sock: TcpStream, fake: &Mutex<Fake>) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0_u8; 8192];
    let head_end = loop {
        let n = sock.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.lines();
    let mut first = lines.next().unwrap_or_default().split_whitespace();
    let (method, target) = (
        first.next().unwrap_or_default().to_string(),
        first.next().unwrap_or_default().to_string(),
    );
    let length: usize = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = sock.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = serde_json::from_slice(&buf[head_end..]).unwrap_or(serde_json::Value::Null);
    let path = target.split('?').next().unwrap_or_default().to_string();
    let (status, json) = fake.lock().unwrap().answer(&method, &path, body);
    let reply = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{json}",
        if status == 200 { "OK" } else { "Error" },
        json.len()
    );
    sock.write_all(reply.as_bytes()).await?;
    sock.shutdown().await
}

/// A lease on GPUs `indexes` as the exchange lists it, provisioning with 60 s left.
fn lease(id: &str, indexes: &[u32], uuids: &[String]) -> LeaseView {
    let mut l: LeaseView = serde_json::from_value(serde_json::json!({
        "id": id, "bid_id": "5", "node_id": NODE_ID, "offer_id": "2", "sku": SKU,
        "region": "cn-east-2", "kind": "spot", "gpus": indexes.len(), "gpu_indexes": indexes,
        "price": "20.0000", "start_ms": now_ms(), "end_ms": now_ms() + 3_600_000,
        "state": "provisioning", "provision_deadline_ms": now_ms() + 60_000,
        "deadline_in_ms": 60_000, "ready_ms": null, "access": null, "launch": null,
        "notice_deadline_ms": null, "charged": null, "billed_seconds": 0,
        "sla_credit": null, "end_reason": null, "ended_at_ms": null,
        "failure_reason": null, "teardown": null, "migrated_from": null,
        "migrated_to": [], "failover_failed_gpus": null, "failover_failed_reason": null
    }))
    .expect("lease view");
    l.gpu_uuids = uuids.to_vec();
    l
}

/// Hook scripts in a temp dir: each logs `$GPUX_PHASE $GPUX_LEASE_ID $GPUX_GPU_UUIDS` to
/// `$1/log`.
struct Hooks2 {
    dir: tempfile::TempDir,
}

impl Hooks2 {
    fn new() -> Hooks2 {
        Hooks2 {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn hook(&self, name: &str, body: &str) -> HookConfig {
        let script = self.dir.path().join(format!("{name}.sh"));
        let text = format!(
            "set -eu\necho \"$GPUX_PHASE $GPUX_LEASE_ID $GPUX_GPU_UUIDS\" >> \"$1/log\"\n{body}"
        );
        std::fs::write(&script, text).expect("write hook");
        HookConfig {
            argv: vec![
                "/bin/sh".into(),
                script.display().to_string(),
                self.dir.path().display().to_string(),
            ],
            timeout_ms: 10_000,
            grace_ms: 300,
        }
    }

    fn hooks(&self) -> Hooks {
        Hooks {
            provision: self.hook(
                "provision",
                "echo '{\"ssh_host\":\"203.0.113.7\",\"ssh_port\":22}'",
            ),
            teardown: self.hook("teardown", "echo 'wiped by the test hook'"),
            ..Hooks::default()
        }
    }

    fn log(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

/// An agent on `gpus` against the fake at `base`.
struct Agent {
    stop: watch::Sender<bool>,
    task: JoinHandle<Result<(), gpux_agent::AgentError>>,
    _state: tempfile::TempDir,
}

impl Agent {
    fn start(base: &str, gpus: Arc<SimulatedGpus>, tweak: impl FnOnce(&mut AgentConfig)) -> Agent {
        let state = tempfile::tempdir().expect("tempdir");
        let mut cfg = AgentConfig {
            url: base.into(),
            key: Some("gpux_nk_test".into()),
            name: "trust-01".into(),
            region: "cn-east-2".into(),
            jurisdiction: "CN".into(),
            heartbeat_period_ms: 300,
            simulate: Some(format!("{SKU}:2")),
            state_dir: state.path().into(),
            ..AgentConfig::default()
        };
        tweak(&mut cfg);
        let client = Client::new(base, Some("gpux_nk_test".into())).expect("client");
        let (stop, rx) = watch::channel(false);
        let task = tokio::spawn(gpux_agent::run(cfg, gpus, client, SystemClock, rx));
        Agent {
            stop,
            task,
            _state: state,
        }
    }

    async fn stop(self) {
        let _ = self.stop.send(true);
        let ended = tokio::time::timeout(WAIT, self.task).await;
        ended
            .expect("the agent stops")
            .expect("join")
            .expect("the agent ran cleanly");
    }
}

/// The simulated host `trust-01` of 2 GPUs, and its UUIDs.
fn host() -> (Arc<SimulatedGpus>, Vec<String>) {
    let gpus = Arc::new(SimulatedGpus::parse(&format!("{SKU}:2")).expect("simulate"));
    gpus.name_host("trust-01");
    let uuids = gpus
        .discover()
        .expect("discover")
        .gpus
        .into_iter()
        .map(|g| g.uuid)
        .collect();
    (gpus, uuids)
}

/// Polls `probe` on the fake every 50 ms until it answers, within [`WAIT`].
async fn until<T>(what: &str, fake: &Mutex<Fake>, probe: impl Fn(&Fake) -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = probe(&fake.lock().unwrap()) {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_changed_gpu_under_a_lease_is_refused_with_cause_gpu_changed() {
    let (gpus, uuids) = host();
    let fake = Arc::new(Mutex::new(Fake::default()));
    {
        let mut f = fake.lock().unwrap();
        // Lease 100 was filled on GPU 1 when it was another card; lease 101 on GPU 0 as is.
        f.leases = vec![
            lease("100", &[1], &["GPU-0b8d3c1e-swapped-out".to_string()]),
            lease("101", &[0], &uuids[..1]),
        ];
    }
    let (base, server) = serve(fake.clone()).await;
    let hooks = Hooks2::new();
    let agent = Agent::start(&base, gpus, |c| c.hooks = hooks.hooks());
    let failed = until("lease 100 reported failed", &fake, |f| {
        f.posted("/v1/leases/100/failed").into_iter().next()
    })
    .await;
    assert_eq!(failed["cause"], "gpu_changed", "{failed}");
    let reason = failed["reason"].as_str().unwrap();
    assert!(reason.contains("GPU 1"), "{reason}");
    assert!(
        reason.contains("expected UUID GPU-0b8d3c1e-swapped-out"),
        "{reason}"
    );
    assert!(reason.contains(&format!("found {}", uuids[1])), "{reason}");
    // The matching lease provisions with its UUID; the refused one wipes like any ended lease.
    until("lease 101 ready", &fake, |f| {
        f.posted("/v1/leases/101/ready").into_iter().next()
    })
    .await;
    until("lease 100 torn down", &fake, |f| {
        f.posted("/v1/leases/100/torn-down").into_iter().next()
    })
    .await;
    agent.stop().await;
    server.abort();
    let log = hooks.log();
    assert!(
        !log.iter().any(|l| l.starts_with("provision 100")),
        "no provision hook for the changed GPU: {log:?}"
    );
    assert!(
        log.contains(&format!("provision 101 {}", uuids[0])),
        "{log:?}"
    );
    assert!(
        log.contains(&format!("teardown 100 {}", uuids[1])),
        "{log:?}"
    );
}

#[tokio::test]
async fn a_gpu_in_mig_mode_is_attested_and_not_counted_healthy() {
    let (gpus, uuids) = host();
    gpus.set_mig(1, true);
    let fake = Arc::new(Mutex::new(Fake::default()));
    let (base, server) = serve(fake.clone()).await;
    let agent = Agent::start(&base, gpus, |_| {});
    let attestation: AttestationRequest = until("an attestation", &fake, |f| {
        f.posted(&format!("/v1/nodes/{NODE_ID}/attestation"))
            .into_iter()
            .next()
    })
    .await
    .pipe(|v| serde_json::from_value(v).expect("attestation"));
    assert_eq!(attestation.gpus.len(), 2);
    assert_eq!(attestation.gpus[0].mig_mode, Some(false));
    assert_eq!(attestation.gpus[1].mig_mode, Some(true));
    assert_eq!(attestation.gpus[1].uuid, uuids[1]);
    let beat: HeartbeatRequest = until("a heartbeat", &fake, |f| {
        f.posted(&format!("/v1/nodes/{NODE_ID}/heartbeat"))
            .into_iter()
            .next()
    })
    .await
    .pipe(|v| serde_json::from_value(v).expect("heartbeat"));
    assert_eq!(beat.healthy_gpus, 1);
    let unhealthy = beat.unhealthy_gpus.expect("per-GPU health");
    assert_eq!(unhealthy.len(), 1);
    assert_eq!(unhealthy[0].index, 1);
    assert_eq!(unhealthy[0].uuid.as_deref(), Some(uuids[1].as_str()));
    assert_eq!(unhealthy[0].reason.as_deref(), Some("mig_enabled"));
    agent.stop().await;
    server.abort();
}

#[tokio::test]
async fn a_verification_lease_reports_the_simulated_figures_then_wipes() {
    let (gpus, uuids) = host();
    gpus.set_faults(1, vec![NvmlFaultDto::Throttled]);
    let fake = Arc::new(Mutex::new(Fake::default()));
    {
        let mut v = lease("200", &[0, 1], &uuids);
        v.purpose = Some(LeasePurposeDto::Verification);
        fake.lock().unwrap().leases = vec![v];
    }
    let (base, server) = serve(fake.clone()).await;
    let hooks = Hooks2::new();
    let agent = Agent::start(&base, gpus, |c| {
        c.hooks = hooks.hooks();
        c.simulate_verify = Some(SimulatedFigures {
            bf16_tflops: Some(612.5),
            mem_bw_gbps: Some(2_950.0),
            allreduce_busbw_gbps: Some(101.0),
            dcgm_diag: Some(DcgmResultDto::Pass),
            faults: Vec::new(),
        });
    });
    let report: VerificationReport = until("the verification report", &fake, |f| {
        f.posted("/v1/leases/200/verification").into_iter().next()
    })
    .await
    .pipe(|v| serde_json::from_value(v).expect("a VerificationReport"));
    assert_eq!(report.gpus.len(), 2);
    for (g, uuid) in report.gpus.iter().zip(&uuids) {
        assert_eq!(g.uuid.as_ref(), Some(uuid));
        assert_eq!(g.bf16_tflops, Some(612.5));
        assert_eq!(g.mem_bw_gbps, Some(2_950.0));
    }
    assert!(report.gpus[0].faults.is_empty());
    assert_eq!(report.gpus[1].faults, [NvmlFaultDto::Throttled]);
    assert_eq!(report.allreduce_busbw_gbps, Some(101.0));
    assert_eq!(report.dcgm_diag, Some(DcgmResultDto::Pass));
    until("the verification lease torn down", &fake, |f| {
        f.posted("/v1/leases/200/torn-down").into_iter().next()
    })
    .await;
    {
        let f = fake.lock().unwrap();
        assert!(f.posted("/v1/leases/200/ready").is_empty(), "never ready");
        assert!(f.posted("/v1/leases/200/failed").is_empty(), "never failed");
        assert_eq!(
            f.posted("/v1/leases/200/verification").len(),
            1,
            "reported once"
        );
    }
    agent.stop().await;
    server.abort();
    let log = hooks.log();
    assert!(!log.iter().any(|l| l.starts_with("provision")), "{log:?}");
    assert!(log.iter().any(|l| l.starts_with("teardown 200")), "{log:?}");
}

#[tokio::test]
async fn a_verify_hooks_figures_and_raw_tool_output_are_reported() {
    let (gpus, uuids) = host();
    let fake = Arc::new(Mutex::new(Fake::default()));
    {
        let mut v = lease("300", &[0, 1], &uuids);
        v.purpose = Some(LeasePurposeDto::Verification);
        fake.lock().unwrap().leases = vec![v];
    }
    let (base, server) = serve(fake.clone()).await;
    let hooks = Hooks2::new();
    // The hook leaves the all-reduce and dcgmi outputs to the agent to parse.
    let dcgm = serde_json::to_string(&fixture("dcgmi_diag_r1_pass.txt")).unwrap();
    let nccl = serde_json::to_string(&fixture("all_reduce_perf_h100_2x8.txt")).unwrap();
    let body = format!(
        "[ \"$GPUX_GPU_INDEXES\" = 0,1 ] && [ \"$GPUX_VERIFY_TIMEOUT_S\" = 10 ] || exit 3\n\
         echo 'measuring' >&2\n\
         cat <<'JSON'\n\
         {{\"gpus\":[{{\"index\":0,\"bf16_tflops\":790.1,\"mem_bw_gbps\":3010.5}},{{\"index\":1,\"bf16_tflops\":401.0}}],\
         \"dcgmi_diag_output\":{dcgm},\"all_reduce_perf_output\":{nccl}}}\n\
         JSON\n"
    );
    let verify = hooks.hook("verify", &body);
    let agent = Agent::start(&base, gpus, |c| {
        c.hooks = Hooks {
            verify,
            ..hooks.hooks()
        };
    });
    let report: VerificationReport = until("the verification report", &fake, |f| {
        f.posted("/v1/leases/300/verification").into_iter().next()
    })
    .await
    .pipe(|v| serde_json::from_value(v).expect("a VerificationReport"));
    assert_eq!(report.gpus[0].bf16_tflops, Some(790.1));
    assert_eq!(report.gpus[0].mem_bw_gbps, Some(3010.5));
    assert_eq!(report.gpus[1].bf16_tflops, Some(401.0));
    assert_eq!(report.gpus[1].mem_bw_gbps, None);
    assert_eq!(report.allreduce_busbw_gbps, Some(338.82));
    assert_eq!(report.dcgm_diag, Some(DcgmResultDto::Pass));
    assert!(
        report
            .raw_tail
            .as_deref()
            .unwrap_or_default()
            .contains("measuring"),
        "{:?}",
        report.raw_tail
    );
    until("the verification lease torn down", &fake, |f| {
        f.posted("/v1/leases/300/torn-down").into_iter().next()
    })
    .await;
    agent.stop().await;
    server.abort();
    let log = hooks.log();
    assert!(
        log.contains(&format!("verify 300 {},{}", uuids[0], uuids[1])),
        "{log:?}"
    );
}

/// `value.pipe(f)`: `f(value)`, to keep a long await chain readable.
trait Pipe: Sized {
    fn pipe<T>(self, f: impl FnOnce(Self) -> T) -> T {
        f(self)
    }
}
impl<T> Pipe for T {}
