//! The agent against the real exchange, in process (`gateway::app::start`, embedded journal in
//! a temp dir, port 0, lease delivery on as the server runs), with simulated GPUs
//! (`H100-80G:8`) and shell hooks written into a temp dir. Each agent authenticates with a
//! node key its supplier made (docs/api.md §1.3.1) and registers its node itself; the
//! supplier's account key posts the offers; a buyer's bids with a launch spec make the leases.
//!
//! 1. A lease goes from fill to active with the hook's access details, is released, torn down
//!    with the hook's wipe method; a preemptible lease gets a withdrawal notice, ends at its
//!    deadline and is torn down.
//! 2. A failing hook (exit 1, stderr) ends the lease `not_delivered` at no charge with the
//!    stderr in its reason; the failover lands on a second node whose agent delivers it. A
//!    hook that exits 65 (the buyer's launch spec cannot run) ends the lease `not_delivered`
//!    with cause `launch_spec` and the hook's message, at no charge, without a failover and
//!    without holding the node, which takes the next lease; the node view shows the clock
//!    offset its agent sends with its heartbeats.
//! 3. A hanging hook is cut at its time limit: the lease fails with a time-out reason and the
//!    hook's whole process group is gone. Access details the exchange refuses fail the lease.
//! 4. An agent killed mid-lease and restarted on the same state dir does not provision the
//!    active lease again, and a lease released while it was down is torn down after; a
//!    changed configuration (interconnect, NVLink) reaches the node at the next start.
//! 5. A network cut (a TCP proxy the test controls): the agent reconnects its websocket,
//!    heartbeats resume, and a lease assigned during the cut is provisioned after it.
//! 6. Over TLS (the server's own listener, a certificate of a private CA), the real
//!    `gpux-agent` binary with `ca_cert` registers its node, heartbeats, opens its websocket
//!    (WSS) and delivers a lease; without `ca_cert` it keeps retrying and logs that the
//!    certificate is not trusted; an unreadable `ca_cert` exits 78 naming it.
//!
//! Expectations come from docs/api.md §2.2.1 and docs/market-rules.md §11, not from runs.

use gateway::accounts::Role;
use gateway::app::{AppOptions, Running, TlsFiles, start};
use gateway::journal::{AnyJournal, EmbeddedJournal};
use gpux_agent::config::{AgentConfig, HookConfig, Hooks, Interconnect};
use gpux_agent::gpus::{GpuSource, SimulatedGpus};
use gpux_agent::{AgentError, SystemClock};
use gpux_client::wire::{
    AttestationStatusDto, BidRequest, ConstraintsDto, CreateAccountRequest, DecimalStr,
    EndReasonDto, FailureCauseDto, HoldReasonDto, IdStr, InterconnectDto, KindDto, LaunchRequest,
    LeaseStateDto, LeaseView, OfferRequest, PlacementDto, TeardownStatusDto, TifDto,
};
use gpux_client::{Client, ClientOptions};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

const SKU: &str = "H100-80G";
const SSH_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM7t3CQcihrH/4tM1K41mGfGrkuwsCkbk7Z2fjczQzrv buyer@laptop";
const IMAGE: &str = "nvcr.io/nvidia/pytorch:24.05-py3";
/// Bound of every wait on the exchange or an agent in these tests.
const WAIT: Duration = Duration::from_secs(20);
/// Heartbeat period of the agents under test, ms.
const HEARTBEAT_MS: u64 = 300;

/// Provision hook: logs the lease and its GPUs to `$1/provisioned`, prints access details.
const PROVISION_OK: &str = r#"
echo "$GPUX_LEASE_ID $GPUX_GPU_UUIDS $GPUX_IMAGE" >> "$1/provisioned"
echo "starting lease $GPUX_LEASE_ID" >&2
echo "progress: not the last line"
echo "{\"ssh_host\":\"203.0.113.7\",\"ssh_port\":2222,\"ssh_user\":\"gpux\",\"urls\":{\"8888\":\"https://lease-$GPUX_LEASE_ID.example/\"}}"
"#;
/// Teardown hook: logs the lease to `$1/torn_down`, prints the wipe method.
const TEARDOWN_OK: &str = r#"
echo "$GPUX_LEASE_ID" >> "$1/torn_down"
echo "container gpux-lease-$GPUX_LEASE_ID removed; scratch wiped"
"#;
/// Provision hook that fails like an image pull.
const PROVISION_FAILS: &str = r#"
echo "$GPUX_LEASE_ID" >> "$1/provisioned"
echo "pulling $GPUX_IMAGE" >&2
echo "image pull failed: manifest unknown" >&2
exit 1
"#;
/// Provision hook that blames the launch spec (exit 65, `EX_DATAERR`) for leases of the image
/// `bad/image:404`, and provisions every other.
const PROVISION_BAD_SPEC: &str = r#"
echo "$GPUX_LEASE_ID" >> "$1/provisioned"
if [ "$GPUX_IMAGE" = "bad/image:404" ]; then
  echo "pulling $GPUX_IMAGE" >&2
  echo "Error response from daemon: manifest for $GPUX_IMAGE not found" >&2
  exit 65
fi
echo '{"ssh_host":"203.0.113.7","ssh_port":2222,"ssh_user":"gpux"}'
"#;
/// Provision hook that hangs, leaving its pids (itself and a child) in `$1`.
const PROVISION_HANGS: &str = r#"
echo $$ > "$1/hook.pid"
sleep 60 &
echo $! > "$1/child.pid"
wait
"#;
/// Provision hook whose access details the exchange refuses (a host with a space).
const PROVISION_BAD_ACCESS: &str = r#"
echo '{"ssh_host":"bad host.example","ssh_port":22}'
"#;

fn dec(s: &str) -> DecimalStr {
    s.parse().expect("decimal")
}

/// The exchange in process.
struct Exchange {
    running: Option<Running>,
    _dir: tempfile::TempDir,
    base: String,
    supplier: Client,
    buyer: Client,
}

impl Exchange {
    /// Starts it with an admin, a supplier and a buyer funded with 1,000 CNY.
    async fn start() -> Exchange {
        Exchange::start_in(tempfile::tempdir().expect("tempdir"), None).await
    }

    /// [`Exchange::start`] in `dir`; with `tls` (the server's files and the CA's certificate)
    /// it serves HTTPS and WSS at `https://localhost:PORT`.
    async fn start_in(dir: tempfile::TempDir, tls: Option<(TlsFiles, PathBuf)>) -> Exchange {
        Exchange::start_with(dir, tls, gateway::market::MarketConfig::delivered()).await
    }

    /// [`Exchange::start_in`] with the market configuration `market`.
    async fn start_with(
        dir: tempfile::TempDir,
        tls: Option<(TlsFiles, PathBuf)>,
        market: gateway::market::MarketConfig,
    ) -> Exchange {
        init_logs();
        let (tls, ca) = tls.unzip();
        let journal: AnyJournal = EmbeddedJournal::open(dir.path().join("journal"), 0)
            .await
            .expect("journal")
            .into();
        let opts = AppOptions {
            tick_ms: 0,
            workers: 2,
            market,
            tls,
            ..AppOptions::default()
        };
        let running = start(journal, opts).await.expect("start the exchange");
        let (_, admin_key, _) =
            gateway::api::admin::create_account_with_key(&running.api, None, "admin", Role::Admin)
                .await
                .expect("admin");
        let (base, opts) = match ca {
            Some(ca) => (
                format!("https://localhost:{}", running.addr.port()),
                ClientOptions::default().with_ca_cert(ca),
            ),
            None => (format!("http://{}", running.addr), ClientOptions::default()),
        };
        let admin = Client::new_with_options(&base, Some(admin_key), &opts).expect("client");
        let mut keys = Vec::new();
        for (name, role) in [("idc-1", Role::Supplier), ("team-a", Role::Buyer)] {
            let a = admin
                .create_account(&CreateAccountRequest {
                    name: name.into(),
                    role,
                })
                .await
                .expect("account");
            keys.push((a.account.id, a.api_key));
        }
        admin
            .deposit(&keys[1].0, dec("1000.00"), "dep-1")
            .await
            .expect("deposit");
        Exchange {
            supplier: admin.with_key(&keys[0].1).expect("key"),
            buyer: admin.with_key(&keys[1].1).expect("key"),
            running: Some(running),
            _dir: dir,
            base,
        }
    }

    /// A node key for `name`, made by the supplier.
    async fn node_key(&self, name: &str) -> String {
        self.supplier
            .create_node_key(name)
            .await
            .expect("node key")
            .api_key
    }

    /// Waits for the agent to register `name`; offers it (8 GPUs at `spot`, preemptible at
    /// 14 with a 1 s notice, 60 s to provision). Answers (node id, offer id).
    async fn offer(&self, name: &str, spot: &str) -> (String, String) {
        let node = eventually("the agent registers its node", || async {
            let nodes = self.supplier.nodes().await.expect("nodes").nodes;
            nodes.into_iter().find(|n| n.name == name)
        })
        .await;
        let o = self
            .supplier
            .post_offer(&OfferRequest {
                node_id: Some(IdStr(node.id.parse().expect("id"))),
                gpus: 8,
                spot_price: dec(spot),
                preemptible_price: Some(dec("14")),
                min_lease_s: Some(1),
                max_lease_s: Some(86_400),
                available_until_ms: None,
                notice_s: Some(1),
                provision_s: Some(60),
                sla: None,
            })
            .await
            .expect("offer");
        (node.id, o.id)
    }

    /// A bid for `gpus` GPUs that fills at once: answers its lease id and node id.
    async fn fill(&self, coid: &str, gpus: u32, kind: KindDto) -> (String, String) {
        self.fill_image(coid, gpus, kind, IMAGE).await
    }

    /// [`Exchange::fill`] of a lease that runs `image`.
    async fn fill_image(
        &self,
        coid: &str,
        gpus: u32,
        kind: KindDto,
        image: &str,
    ) -> (String, String) {
        let limit = if kind == KindDto::Spot { "25" } else { "15" };
        let placed = self
            .buyer
            .place_bid(&BidRequest {
                client_order_id: coid.into(),
                sku: SKU.into(),
                gpus: Some(gpus),
                limit_price: dec(limit),
                kind,
                placement: PlacementDto::SingleNode,
                gang: None,
                min_gpus: None,
                constraints: ConstraintsDto::default(),
                duration_s: Some(3_600),
                time_in_force: TifDto::Ioc,
                expires_at_ms: None,
                launch: Some(LaunchRequest {
                    ssh_keys: vec![SSH_KEY.into()],
                    image: Some(image.into()),
                    ports: vec![8888],
                    ..LaunchRequest::default()
                }),
            })
            .await
            .expect("bid");
        let f = placed.fills.first().expect("a fill");
        (f.lease_id.clone(), f.node_id.clone())
    }

    /// The lease as its buyer sees it, once `done` holds.
    async fn lease_until(
        &self,
        id: &str,
        what: &str,
        done: impl Fn(&LeaseView) -> bool,
    ) -> LeaseView {
        eventually(what, || async {
            let l = self.buyer.lease(id).await.expect("lease");
            done(&l).then_some(l)
        })
        .await
    }

    async fn active(&self, id: &str) -> LeaseView {
        self.lease_until(id, "the lease active", |l| l.state == LeaseStateDto::Active)
            .await
    }

    async fn torn_down(&self, id: &str) -> LeaseView {
        self.lease_until(id, "the lease torn down", |l| {
            l.teardown
                .as_ref()
                .is_some_and(|t| t.status == TeardownStatusDto::TornDown)
        })
        .await
    }
}

/// Logs to the test's output when `RUST_LOG` is set (e.g. `RUST_LOG=gpux_agent=debug`).
fn init_logs() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

/// Polls `probe` every 50 ms until it answers, within [`WAIT`].
async fn eventually<T, Fut: Future<Output = Option<T>>>(
    what: &str,
    mut probe: impl FnMut() -> Fut,
) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A temp dir with the hook scripts and their logs.
struct HookDir {
    dir: tempfile::TempDir,
}

impl HookDir {
    fn new() -> HookDir {
        HookDir {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A `/bin/sh SCRIPT DIR` hook running `body`.
    fn hook(&self, name: &str, body: &str, timeout_ms: u64) -> HookConfig {
        let script = self.path().join(format!("{name}.sh"));
        std::fs::write(&script, format!("set -eu\n{body}")).expect("write hook");
        HookConfig {
            argv: vec![
                "/bin/sh".into(),
                script.display().to_string(),
                self.path().display().to_string(),
            ],
            timeout_ms,
            grace_ms: 300,
        }
    }

    fn hooks(&self, provision: &str) -> Hooks {
        Hooks {
            provision: self.hook("provision", provision, 10_000),
            teardown: self.hook("teardown", TEARDOWN_OK, 10_000),
            ..Hooks::default()
        }
    }

    /// The lines of a log the hooks write.
    fn log(&self, name: &str) -> Vec<String> {
        std::fs::read_to_string(self.path().join(name))
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }

    fn pid(&self, name: &str) -> i32 {
        std::fs::read_to_string(self.path().join(name))
            .expect("pid file")
            .trim()
            .parse()
            .expect("pid")
    }
}

/// A running agent.
struct Agent {
    stop: watch::Sender<bool>,
    task: JoinHandle<Result<(), AgentError>>,
}

impl Agent {
    fn start(url: &str, key: &str, name: &str, hooks: Hooks, state_dir: PathBuf) -> Agent {
        Agent::start_with(url, key, name, hooks, state_dir, |_| {})
    }

    /// [`Agent::start`] with the configuration changed by `tweak`.
    fn start_with(
        url: &str,
        key: &str,
        name: &str,
        hooks: Hooks,
        state_dir: PathBuf,
        tweak: impl FnOnce(&mut AgentConfig),
    ) -> Agent {
        let mut cfg = AgentConfig {
            url: url.into(),
            key: Some(key.into()),
            name: name.into(),
            region: "cn-east-2".into(),
            jurisdiction: "CN".into(),
            heartbeat_period_ms: HEARTBEAT_MS,
            simulate: Some(format!("{SKU}:8")),
            hooks,
            state_dir,
            ..AgentConfig::default()
        };
        tweak(&mut cfg);
        let gpus = Arc::new(SimulatedGpus::parse(&format!("{SKU}:8")).expect("simulate"));
        Agent::start_on(url, key, cfg, gpus)
    }

    /// An agent of configuration `cfg` on the simulated host `gpus` (a test marks its GPUs
    /// unhealthy).
    fn start_on(url: &str, key: &str, cfg: AgentConfig, gpus: Arc<SimulatedGpus>) -> Agent {
        let client = Client::new(url, Some(key.into())).expect("client");
        let (stop, rx) = watch::channel(false);
        let task = tokio::spawn(gpux_agent::run(cfg, gpus, client, SystemClock, rx));
        Agent { stop, task }
    }

    /// Stops it the way `main` does on SIGTERM; it must end by itself, cleanly.
    async fn shutdown(self) {
        let _ = self.stop.send(true);
        let ended = tokio::time::timeout(WAIT, self.task)
            .await
            .expect("the agent stops in time")
            .expect("the agent's task");
        assert!(ended.is_ok(), "{ended:?}");
    }

    /// Kills it: its task is dropped wherever it is (a crash, as far as the exchange sees).
    async fn kill(self) {
        self.task.abort();
        assert!(self.task.await.expect_err("aborted").is_cancelled());
    }
}

/// Whether process `pid` is gone (no such process, or a zombie).
fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_is_provisioned_released_and_torn_down_and_a_notice_ends_in_a_wipe() {
    let ex = Exchange::start().await;
    let hooks = HookDir::new();
    let key = ex.node_key("gpu-a").await;
    let state = tempfile::tempdir().expect("tempdir");
    let agent = Agent::start(
        &ex.base,
        &key,
        "gpu-a",
        hooks.hooks(PROVISION_OK),
        state.path().into(),
    );
    let (node, offer) = ex.offer("gpu-a", "20").await;

    // Fill → the hook runs with the lease's GPUs → ready with the hook's last stdout line.
    let (l1, on) = ex.fill("job-1", 2, KindDto::Spot).await;
    assert_eq!(on, node);
    let active = ex.active(&l1).await;
    let access = active.access.expect("access");
    assert_eq!(
        access.ssh_command.as_deref(),
        Some("ssh -p 2222 gpux@203.0.113.7")
    );
    assert_eq!(
        access.urls.get(&8888).map(String::as_str),
        Some(format!("https://lease-{l1}.example/").as_str())
    );
    assert!(active.ready_ms.is_some());
    // The simulated host's UUIDs carry its name (issue 26: two simulated nodes never attest
    // the same UUID).
    let host = SimulatedGpus::parse(&format!("{SKU}:8")).expect("simulate");
    host.name_host("gpu-a");
    let found = host.discover().expect("discover");
    let uuids = active
        .gpu_indexes
        .iter()
        .map(|i| found.gpus[*i as usize].uuid.clone())
        .collect::<Vec<_>>()
        .join(",");
    assert_eq!(
        hooks.log("provisioned"),
        vec![format!("{l1} {uuids} {IMAGE}")]
    );

    // Released → wiping → the teardown hook → torn down with its method.
    ex.buyer.release_lease(&l1).await.expect("release");
    let done = ex.torn_down(&l1).await;
    assert_eq!(done.end_reason, Some(EndReasonDto::Released));
    assert_eq!(
        done.teardown.and_then(|t| t.method).as_deref(),
        Some(format!("container gpux-lease-{l1} removed; scratch wiped").as_str())
    );
    assert_eq!(hooks.log("torn_down"), vec![l1.clone()]);

    // A preemptible lease gets notice when the offer is withdrawn, ends at the deadline (1 s)
    // and is wiped like any other.
    let (l2, _) = ex.fill("job-2", 2, KindDto::Preemptible).await;
    ex.active(&l2).await;
    let withdrawn = ex.supplier.withdraw_offer(&offer).await.expect("withdraw");
    assert_eq!(withdrawn.preemption_notices, 1);
    let done = ex.torn_down(&l2).await;
    assert_eq!(done.end_reason, Some(EndReasonDto::OfferWithdrawn));
    assert_eq!(hooks.log("torn_down"), vec![l1, l2]);
    assert_eq!(hooks.log("provisioned").len(), 2);
    agent.shutdown().await;
}

/// Issue 26 (docs/market-rules.md §12): the agent attests its host at start (the node view
/// says `matched`, with the simulated UUIDs and driver); one GPU of eight marked unhealthy
/// under one of two leases ends exactly that lease (`node_failure`), the other keeps running,
/// and the node view names the GPU with the agent's problem.
/// Issue 26, docs/market-rules.md §12.2, end to end: with verification on, the node's first
/// listing places a verification run; the agent (simulated H100s measuring 700.0 TFLOPS and
/// 3,000 GB/s: 88.10 % of the reference) runs its checks instead of the provision hook and
/// reports; the node ends `degraded`, listed, and a buyer's lease then provisions on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verification_run_is_measured_reported_and_judged() {
    let mut market = gateway::market::MarketConfig::delivered();
    market.verification = Some(exchange::verify::VerifyConfig::default());
    let ex = Exchange::start_with(tempfile::tempdir().expect("tempdir"), None, market).await;
    let hooks = HookDir::new();
    let key = ex.node_key("gpu-v").await;
    let state = tempfile::tempdir().expect("tempdir");
    let cfg = AgentConfig {
        url: ex.base.clone(),
        key: Some(key.clone()),
        name: "gpu-v".into(),
        region: "cn-east-2".into(),
        jurisdiction: "CN".into(),
        heartbeat_period_ms: HEARTBEAT_MS,
        simulate: Some(format!("{SKU}:8")),
        simulate_verify: Some(gpux_agent::verify::SimulatedFigures {
            bf16_tflops: Some(700.0),
            mem_bw_gbps: Some(3000.0),
            ..Default::default()
        }),
        hooks: hooks.hooks(PROVISION_OK),
        state_dir: state.path().into(),
        ..AgentConfig::default()
    };
    let gpus = Arc::new(SimulatedGpus::parse(&format!("{SKU}:8")).expect("simulate"));
    let agent = Agent::start_on(&ex.base, &key, cfg, gpus.clone());
    let (node, _) = ex.offer("gpu-v", "20").await;
    let view = eventually("the run is judged", || async {
        let n = ex.supplier.node(&node).await.expect("node");
        n.verification
            .clone()
            .filter(|v| v.outcome.is_some())
            .map(|v| (n, v))
    })
    .await;
    let (n, v) = view;
    assert_eq!(v.status, "degraded", "{v:?}");
    assert_eq!(v.worst_pct.as_deref(), Some("88.10"), "{v:?}");
    assert_eq!(v.decided_by.as_deref(), Some("bf16_tflops"), "{v:?}");
    assert_eq!(n.listed_free_gpus, 8, "{n:?}");
    // The run is gone from the agent's list; a buyer's lease now provisions on the node.
    let (l1, on) = ex.fill("job-v", 4, KindDto::Spot).await;
    assert_eq!(on, node);
    let active = ex.active(&l1).await;
    assert_eq!(active.gpu_uuids.len(), 4, "{active:?}");
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_unhealthy_gpu_ends_exactly_its_lease_and_the_agent_attests() {
    let ex = Exchange::start().await;
    let hooks = HookDir::new();
    let key = ex.node_key("gpu-a").await;
    let state = tempfile::tempdir().expect("tempdir");
    let cfg = AgentConfig {
        url: ex.base.clone(),
        key: Some(key.clone()),
        name: "gpu-a".into(),
        region: "cn-east-2".into(),
        jurisdiction: "CN".into(),
        heartbeat_period_ms: HEARTBEAT_MS,
        simulate: Some(format!("{SKU}:8")),
        hooks: hooks.hooks(PROVISION_OK),
        state_dir: state.path().into(),
        ..AgentConfig::default()
    };
    let gpus = Arc::new(SimulatedGpus::parse(&format!("{SKU}:8")).expect("simulate"));
    let agent = Agent::start_on(&ex.base, &key, cfg, gpus.clone());
    let (node, _) = ex.offer("gpu-a", "20").await;
    let attestation = eventually("the agent attests its host", || async {
        let n = ex.supplier.node(&node).await.expect("node");
        n.attestation
            .filter(|a| a.status == AttestationStatusDto::Matched)
    })
    .await;
    let found = gpus.discover().expect("discover");
    assert_eq!(attestation.gpus, 8);
    assert_eq!(attestation.driver_version, "simulated");
    assert_eq!(attestation.mismatch, None);
    assert_eq!(attestation.gpu_details.len(), 8);
    assert_eq!(attestation.gpu_details[5].uuid, found.gpus[5].uuid);
    assert_eq!(attestation.gpu_details[5].pcie_gen, Some(5));
    assert_eq!(attestation.gpu_details[5].mig_mode, Some(false));
    assert!(found.gpus[5].uuid.starts_with("GPU-sim-H100-80G-"));

    let (l1, _) = ex.fill("job-1", 4, KindDto::Spot).await;
    let (l2, _) = ex.fill("job-2", 2, KindDto::Spot).await;
    let first = ex.active(&l1).await;
    let second = ex.active(&l2).await;
    let failed_gpu = second.gpu_indexes[1];
    assert!(!first.gpu_indexes.contains(&failed_gpu));
    gpus.set_unhealthy(failed_gpu, "XID 79: fallen off the bus");

    let ended = ex
        .lease_until(&l2, "the lease on the failed GPU ends", |l| {
            l.end_reason.is_some()
        })
        .await;
    assert_eq!(ended.end_reason, Some(EndReasonDto::NodeFailure));
    let kept = ex.buyer.lease(&l1).await.expect("lease");
    assert_eq!(kept.state, LeaseStateDto::Active, "{kept:?}");
    assert_eq!(kept.end_reason, None);
    let view = ex.supplier.node(&node).await.expect("node");
    assert_eq!(view.healthy_gpus, 7);
    assert_eq!(view.unhealthy_gpus.len(), 1, "{view:?}");
    let g = &view.unhealthy_gpus[0];
    assert_eq!(g.index, failed_gpu);
    assert_eq!(
        g.uuid.as_deref(),
        Some(found.gpus[failed_gpu as usize].uuid.as_str())
    );
    assert_eq!(g.reason.as_deref(), Some("XID 79: fallen off the bus"));
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_hook_fails_the_lease_over_to_another_node_at_no_charge() {
    let ex = Exchange::start().await;
    let (bad_hooks, good_hooks) = (HookDir::new(), HookDir::new());
    let (sa, sb) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let ka = ex.node_key("gpu-a").await;
    let kb = ex.node_key("gpu-b").await;
    let a = Agent::start(
        &ex.base,
        &ka,
        "gpu-a",
        bad_hooks.hooks(PROVISION_FAILS),
        sa.path().into(),
    );
    let b = Agent::start(
        &ex.base,
        &kb,
        "gpu-b",
        good_hooks.hooks(PROVISION_OK),
        sb.path().into(),
    );
    let (na, _) = ex.offer("gpu-a", "20").await;
    let (nb, _) = ex.offer("gpu-b", "21").await;

    let (l1, on) = ex.fill("job-1", 2, KindDto::Spot).await;
    assert_eq!(on, na, "the cheaper node first");
    let failed = ex
        .lease_until(&l1, "the lease failed over", |l| !l.migrated_to.is_empty())
        .await;
    assert_eq!(failed.end_reason, Some(EndReasonDto::NotDelivered));
    assert!(failed.ready_ms.is_none());
    assert!(
        failed
            .charged
            .as_deref()
            .is_none_or(|c| c.parse::<f64>() == Ok(0.0)),
        "{failed:?}"
    );
    assert_eq!(failed.failure_cause, None, "exit 1 is the node's failure");
    let reason = failed.failure_reason.expect("reason");
    assert!(
        reason.starts_with("provision hook exited with code 1: "),
        "{reason}"
    );
    assert!(
        reason.ends_with("image pull failed: manifest unknown"),
        "{reason}"
    );

    // The replacement runs on the other node, delivered by its agent.
    let l2 = failed.migrated_to[0].clone();
    let replacement = ex.active(&l2).await;
    assert_eq!(replacement.node_id, nb);
    assert_eq!(replacement.migrated_from.as_deref(), Some(l1.as_str()));
    assert_eq!(good_hooks.log("provisioned").len(), 1);
    // The failed node wiped what its hook may have left, and is held off the market.
    ex.torn_down(&l1).await;
    assert_eq!(bad_hooks.log("torn_down"), vec![l1.clone()]);
    assert_eq!(bad_hooks.log("provisioned"), vec![l1]);
    let node_a = ex.supplier.node(&na).await.expect("node");
    assert_eq!(node_a.held, Some(HoldReasonDto::NotDelivered));
    a.shutdown().await;
    b.shutdown().await;
}

/// Issue 25: the buyer's launch spec cannot run (exit 65): `failed` with cause `launch_spec`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_exiting_65_ends_the_lease_as_the_launch_specs_fault_without_a_hold() {
    let ex = Exchange::start().await;
    let (hooks_a, hooks_b) = (HookDir::new(), HookDir::new());
    let (sa, sb) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let ka = ex.node_key("gpu-a").await;
    let kb = ex.node_key("gpu-b").await;
    let a = Agent::start(
        &ex.base,
        &ka,
        "gpu-a",
        hooks_a.hooks(PROVISION_BAD_SPEC),
        sa.path().into(),
    );
    // A second node a failover could land on: none must.
    let b = Agent::start(
        &ex.base,
        &kb,
        "gpu-b",
        hooks_b.hooks(PROVISION_OK),
        sb.path().into(),
    );
    let (na, _) = ex.offer("gpu-a", "20").await;
    ex.offer("gpu-b", "21").await;

    let (l1, on) = ex
        .fill_image("job-bad", 2, KindDto::Spot, "bad/image:404")
        .await;
    assert_eq!(on, na, "the cheaper node first");
    let failed = ex
        .lease_until(&l1, "the lease failed", |l| l.end_reason.is_some())
        .await;
    assert_eq!(failed.end_reason, Some(EndReasonDto::NotDelivered));
    assert_eq!(failed.failure_cause, Some(FailureCauseDto::LaunchSpec));
    assert!(failed.ready_ms.is_none());
    assert!(
        failed
            .charged
            .as_deref()
            .is_none_or(|c| c.parse::<f64>() == Ok(0.0)),
        "{failed:?}"
    );
    let reason = failed.failure_reason.clone().expect("reason");
    assert!(
        reason.starts_with("the launch spec cannot run (provision hook exited with code 65): "),
        "{reason}"
    );
    assert!(
        reason.ends_with("manifest for bad/image:404 not found"),
        "{reason}"
    );
    // No failover (it would fail the same way); the GPUs are still wiped.
    let done = ex.torn_down(&l1).await;
    assert!(done.migrated_to.is_empty(), "{done:?}");
    assert!(hooks_b.log("provisioned").is_empty());
    assert_eq!(hooks_a.log("torn_down"), vec![l1.clone()]);
    // The node did nothing wrong: not held, and it takes the next lease.
    let node_a = ex.supplier.node(&na).await.expect("node");
    assert_eq!(node_a.held, None);
    let (l2, on) = ex.fill("job-good", 2, KindDto::Spot).await;
    assert_eq!(on, na, "the node is still on the market");
    ex.active(&l2).await;
    assert_eq!(hooks_a.log("provisioned"), vec![l1, l2]);
    // Its agent's heartbeats carry the clock offset it measured from the previous answer
    // (issue 25): this host's own clock, so close to zero.
    let node_a = eventually("the agent's clock offset in the node view", || async {
        let n = ex.supplier.node(&na).await.expect("node");
        n.agent_clock_offset_ms.is_some().then_some(n)
    })
    .await;
    let offset = node_a.agent_clock_offset_ms.unwrap_or_default();
    assert!(offset.abs() < 5_000, "{offset} ms on one host");
    assert!(node_a.agent_clock_offset_at_ms.is_some());
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_hook_is_killed_with_its_group_and_refused_access_fails_the_lease() {
    let ex = Exchange::start().await;
    let hooks = HookDir::new();
    let state = tempfile::tempdir().unwrap();
    let key = ex.node_key("gpu-a").await;
    let mut h = hooks.hooks(PROVISION_HANGS);
    h.provision = hooks.hook("provision", PROVISION_HANGS, 1_000);
    let agent = Agent::start(&ex.base, &key, "gpu-a", h, state.path().into());
    ex.offer("gpu-a", "20").await;

    let started = Instant::now();
    let (l1, _) = ex.fill("job-1", 2, KindDto::Spot).await;
    let failed = ex
        .lease_until(&l1, "the lease ended", |l| l.state == LeaseStateDto::Ended)
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(failed.end_reason, Some(EndReasonDto::NotDelivered));
    let reason = failed.failure_reason.expect("reason");
    assert!(
        reason.starts_with("provision hook timed out (hooks.provision.timeout_ms)"),
        "{reason}"
    );
    for pid in [hooks.pid("hook.pid"), hooks.pid("child.pid")] {
        assert!(gone(pid), "process {pid} of the hook's group survived");
    }
    ex.torn_down(&l1).await;
    agent.shutdown().await;

    // Access details the exchange refuses (400 invalid_access) fail the lease, saying why.
    let ex = Exchange::start().await;
    let key = ex.node_key("gpu-b").await;
    let hooks = HookDir::new();
    let state = tempfile::tempdir().unwrap();
    let agent = Agent::start(
        &ex.base,
        &key,
        "gpu-b",
        hooks.hooks(PROVISION_BAD_ACCESS),
        state.path().into(),
    );
    ex.offer("gpu-b", "20").await;
    let (l1, _) = ex.fill("job-1", 1, KindDto::Spot).await;
    let failed = ex
        .lease_until(&l1, "the lease ended", |l| l.state == LeaseStateDto::Ended)
        .await;
    assert_eq!(failed.end_reason, Some(EndReasonDto::NotDelivered));
    let reason = failed.failure_reason.expect("reason");
    assert!(
        reason.starts_with("the provision hook's access details were refused by the exchange: "),
        "{reason}"
    );
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_agent_reconciles_without_provisioning_twice() {
    let ex = Exchange::start().await;
    let hooks = HookDir::new();
    let state = tempfile::tempdir().unwrap();
    let key = ex.node_key("gpu-a").await;
    let start = || {
        Agent::start(
            &ex.base,
            &key,
            "gpu-a",
            hooks.hooks(PROVISION_OK),
            state.path().into(),
        )
    };
    let agent = start();
    let (node, _) = ex.offer("gpu-a", "20").await;
    let (l1, _) = ex.fill("job-1", 2, KindDto::Spot).await;
    ex.active(&l1).await;
    let saved = std::fs::read_to_string(state.path().join("state.json")).expect("state");
    assert!(saved.contains(&format!("\"{l1}\"")), "{saved}");

    // Killed mid-lease; restarted on the same state dir: the active lease is remembered, not
    // provisioned again; a new lease proves the restarted agent reconciles and delivers.
    agent.kill().await;
    let agent = start();
    let (l2, _) = ex.fill("job-2", 2, KindDto::Spot).await;
    ex.active(&l2).await;
    let provisioned: Vec<String> = hooks
        .log("provisioned")
        .iter()
        .map(|l| l.split(' ').next().unwrap_or_default().to_string())
        .collect();
    assert_eq!(provisioned, vec![l1.clone(), l2.clone()]);

    // Down while the buyer releases: the wipe is done after the next start, which also
    // brings the node's settings in line with a changed configuration.
    agent.shutdown().await;
    ex.buyer.release_lease(&l1).await.expect("release");
    let agent = Agent::start_with(
        &ex.base,
        &key,
        "gpu-a",
        hooks.hooks(PROVISION_OK),
        state.path().into(),
        |c| {
            c.interconnect = Interconnect::Infiniband;
            c.nvlink = true;
        },
    );
    ex.torn_down(&l1).await;
    let n = ex.supplier.node(&node).await.expect("node");
    assert_eq!(
        (n.interconnect, n.nvlink),
        (InterconnectDto::Infiniband, true)
    );
    assert_eq!(hooks.log("torn_down"), vec![l1]);
    assert_eq!(hooks.log("provisioned").len(), 2);
    assert_eq!(
        ex.buyer.lease(&l2).await.expect("lease").state,
        LeaseStateDto::Active
    );
    agent.shutdown().await;
}

/// A TCP forwarder the test can cut: while cut, live connections are dropped and new ones are
/// closed at once. Counts websocket upgrades it forwarded.
struct Proxy {
    addr: std::net::SocketAddr,
    cut: Arc<AtomicBool>,
    links: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    ws_upgrades: Arc<AtomicUsize>,
    accept: JoinHandle<()>,
}

impl Proxy {
    async fn start(target: std::net::SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let cut = Arc::new(AtomicBool::new(false));
        let links = Arc::new(Mutex::new(Vec::new()));
        let ws_upgrades = Arc::new(AtomicUsize::new(0));
        let (c, l, w) = (cut.clone(), links.clone(), ws_upgrades.clone());
        let accept = tokio::spawn(async move {
            while let Ok((down, _)) = listener.accept().await {
                if c.load(Ordering::SeqCst) {
                    continue; // dropped: closed at once
                }
                let link = tokio::spawn(forward(down, target, w.clone()));
                l.lock().unwrap().push(link.abort_handle());
            }
        });
        Proxy {
            addr,
            cut,
            links,
            ws_upgrades,
            accept,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for link in self.links.lock().unwrap().drain(..) {
            link.abort();
        }
    }

    fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }

    fn ws_upgrades(&self) -> usize {
        self.ws_upgrades.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

async fn forward(mut down: TcpStream, target: std::net::SocketAddr, ws: Arc<AtomicUsize>) {
    let Ok(mut up) = TcpStream::connect(target).await else {
        return;
    };
    let mut first = vec![0u8; 4096];
    let Ok(n) = down.read(&mut first).await else {
        return;
    };
    if first[..n].starts_with(b"GET /v1/ws") {
        ws.fetch_add(1, Ordering::SeqCst);
    }
    if up.write_all(&first[..n]).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_network_cut_the_agent_reconnects_and_provisions_what_it_missed() {
    let ex = Exchange::start().await;
    let target = ex.running.as_ref().expect("running").addr;
    let proxy = Proxy::start(target).await;
    let hooks = HookDir::new();
    let state = tempfile::tempdir().unwrap();
    let key = ex.node_key("gpu-a").await;
    let agent = Agent::start(
        &proxy.url(),
        &key,
        "gpu-a",
        hooks.hooks(PROVISION_OK),
        state.path().into(),
    );
    let (node, _) = ex.offer("gpu-a", "20").await;
    eventually("the websocket", || async {
        (proxy.ws_upgrades() >= 1).then_some(())
    })
    .await;
    let (l1, _) = ex.fill("job-1", 1, KindDto::Spot).await;
    ex.active(&l1).await;

    // Cut for 3 s (the exchange marks a node offline after 15 s): a lease assigned meanwhile
    // cannot reach the agent.
    proxy.cut();
    let upgrades = proxy.ws_upgrades();
    let (l2, _) = ex.fill("job-2", 1, KindDto::Spot).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = ex
        .supplier
        .node(&node)
        .await
        .expect("node")
        .last_heartbeat_ms;
    assert_eq!(
        ex.buyer.lease(&l2).await.expect("lease").state,
        LeaseStateDto::Provisioning
    );
    assert_eq!(hooks.log("provisioned").len(), 1);

    // Back: the websocket reconnects, heartbeats resume, the missed lease is delivered.
    proxy.restore();
    ex.active(&l2).await;
    eventually("a new websocket", || async {
        (proxy.ws_upgrades() > upgrades).then_some(())
    })
    .await;
    eventually("heartbeats again", || async {
        let n = ex.supplier.node(&node).await.expect("node");
        (n.last_heartbeat_ms > before).then_some(())
    })
    .await;
    assert_eq!(hooks.log("provisioned").len(), 2);
    agent.shutdown().await;
}

/// A private CA and a server certificate it issued for `localhost`, as PEM files in `dir`:
/// the server's TLS files and the CA's certificate.
fn private_ca(dir: &Path) -> (TlsFiles, PathBuf) {
    let ca_key = rcgen::KeyPair::generate().expect("CA key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "gpux test private CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("CA certificate");
    let key = rcgen::KeyPair::generate().expect("server key");
    let leaf = rcgen::CertificateParams::new(vec!["localhost".to_string()])
        .expect("server params")
        .signed_by(&key, &*ca)
        .expect("server certificate");
    let files = TlsFiles {
        cert: dir.join("server-chain.pem"),
        key: dir.join("server-key.pem"),
    };
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).expect("write CA");
    std::fs::write(&files.cert, format!("{}{}", leaf.pem(), ca.pem())).expect("write chain");
    std::fs::write(&files.key, key.serialize_pem()).expect("write key");
    (files, ca_file)
}

/// The real `gpux-agent` binary with a config file, a node key in `GPUX_KEY` and no other
/// `GPUX_*` variable; stderr (its logs) goes to `<dir>/agent.log`.
struct AgentProcess {
    child: std::process::Child,
    log: PathBuf,
}

impl AgentProcess {
    fn start(dir: &Path, config: &str, key: &str) -> AgentProcess {
        let file = dir.join("agent.toml");
        std::fs::write(&file, config).expect("write the config");
        let log = dir.join("agent.log");
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_gpux-agent"));
        for (k, _) in std::env::vars() {
            if k.starts_with("GPUX_") {
                cmd.env_remove(k);
            }
        }
        let child = cmd
            .arg("--config")
            .arg(&file)
            .env("GPUX_KEY", key)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("start gpux-agent");
        AgentProcess { child, log }
    }

    fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for it to exit by itself, within [`WAIT`]; answers its status.
    async fn exit_code(&mut self) -> Option<i32> {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "the agent did not exit: {}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGTERM, as systemd stops it: it exits 0 by itself.
    async fn stop(mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
        assert_eq!(self.exit_code().await, Some(0), "{}", self.logs());
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_the_agent_binary_trusts_its_ca_file_and_says_when_it_lacks_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (files, ca) = private_ca(dir.path());
    let ex = Exchange::start_in(dir, Some((files, ca.clone()))).await;
    assert!(ex.base.starts_with("https://localhost:"), "{}", ex.base);
    let config = |name: &str, state: &Path, ca_cert: Option<&Path>| {
        let mut c = format!(
            "url = \"{}\"\nname = \"{name}\"\nregion = \"cn-east-2\"\n\
             jurisdiction = \"CN\"\nheartbeat_period_ms = {HEARTBEAT_MS}\n\
             simulate = \"{SKU}:8\"\nstate_dir = \"{}\"\n",
            ex.base,
            state.display()
        );
        if let Some(ca) = ca_cert {
            c.push_str(&format!("ca_cert = \"{}\"\n", ca.display()));
        }
        c
    };

    // With the CA's file: registers, heartbeats, opens its websocket, delivers a lease (a
    // simulated host without hooks reports ready at once).
    let run = tempfile::tempdir().expect("tempdir");
    let key = ex.node_key("tls-1").await;
    let agent = AgentProcess::start(
        run.path(),
        &config("tls-1", &run.path().join("state"), Some(&ca)),
        &key,
    );
    let (node, _) = ex.offer("tls-1", "20").await;
    let first = ex.supplier.node(&node).await.expect("node");
    assert_eq!((first.gpus, first.healthy_gpus), (8, 8));
    eventually("heartbeats over HTTPS", || async {
        let n = ex.supplier.node(&node).await.expect("node");
        (n.last_heartbeat_ms > first.last_heartbeat_ms).then_some(())
    })
    .await;
    eventually("the websocket over WSS", || async {
        agent.logs().contains("websocket connected").then_some(())
    })
    .await;
    let (lease, on) = ex.fill("tls-job", 2, KindDto::Spot).await;
    assert_eq!(on, node);
    assert_eq!(ex.active(&lease).await.gpus, 2);
    assert!(!agent.logs().contains("not trusted"), "{}", agent.logs());
    agent.stop().await;

    // Without it: nothing registers, and the log says why and what to do.
    let run = tempfile::tempdir().expect("tempdir");
    let key = ex.node_key("tls-2").await;
    let agent = AgentProcess::start(
        run.path(),
        &config("tls-2", &run.path().join("state"), None),
        &key,
    );
    eventually("the reason in the log", || async {
        let logs = agent.logs();
        (logs.contains("certificate not trusted") && logs.contains("--ca-cert FILE")).then_some(())
    })
    .await;
    let nodes = ex.supplier.nodes().await.expect("nodes").nodes;
    assert!(nodes.iter().all(|n| n.name != "tls-2"), "{nodes:?}");
    agent.stop().await;

    // A CA file that cannot be read: a configuration error (exit 78) naming it.
    let run = tempfile::tempdir().expect("tempdir");
    let missing = run.path().join("missing-ca.pem");
    let mut agent = AgentProcess::start(
        run.path(),
        &config("tls-3", &run.path().join("state"), Some(&missing)),
        &key,
    );
    assert_eq!(agent.exit_code().await, Some(78), "{}", agent.logs());
    let logs = agent.logs();
    assert!(
        logs.contains("ca_cert") && logs.contains(&missing.display().to_string()),
        "{logs}"
    );
}
