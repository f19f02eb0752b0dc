//! `gpux` end to end: the built binary (assert_cmd) against the real exchange in process
//! (`gateway::app::start`, embedded journal in a temp dir, port 0, lease delivery on), as
//! `gateway/tests/support/api.rs` starts it. A background task plays the supplier's node agent
//! (heartbeats; reports each lease it is assigned ready with SSH access details), through the
//! typed client. Every CLI call runs with its own HOME / XDG_CONFIG_HOME and no `GPUX_*`
//! variables unless a test sets them. One exchange serves HTTPS with a private CA's
//! certificate (the server's own TLS listener): `gpux --ca-cert` reaches it.

use gpux_client::{Client, wire::*};
use serde::de::DeserializeOwned;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

const SSH_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM7t3CQcihrH/4tM1K41mGfGrkuwsCkbk7Z2fjczQzrv buyer@laptop";
/// What the test agent reports for every lease.
const HOST: &str = "203.0.113.7";
const PORT: u32 = 2222;
const USER: &str = "root";
/// Bound of one CLI run.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

struct Exchange {
    running: Option<gateway::app::Running>,
    url: String,
    admin: String,
    dir: tempfile::TempDir,
}

impl Exchange {
    async fn start() -> Exchange {
        Exchange::start_with(tempfile::tempdir().expect("tempdir"), None).await
    }

    /// Starts it in `dir`, serving TLS with `tls` when given (URL `https://localhost:PORT`).
    async fn start_with(dir: tempfile::TempDir, tls: Option<gateway::app::TlsFiles>) -> Exchange {
        let https = tls.is_some();
        let jdir = dir.path().join("journal");
        std::fs::create_dir_all(&jdir).expect("journal dir");
        let journal = gateway::journal::EmbeddedJournal::open(&jdir, 0)
            .await
            .expect("open journal")
            .into();
        let opts = gateway::app::AppOptions {
            tick_ms: 0,
            workers: 2,
            market: gateway::market::MarketConfig::delivered(),
            tls,
            ..gateway::app::AppOptions::default()
        };
        let running = gateway::app::start(journal, opts).await.expect("start");
        let (_, admin, _) = gateway::api::admin::create_account_with_key(
            &running.api,
            None,
            "admin",
            gateway::accounts::Role::Admin,
        )
        .await
        .expect("admin");
        Exchange {
            url: if https {
                format!("https://localhost:{}", running.addr.port())
            } else {
                format!("http://{}", running.addr)
            },
            running: Some(running),
            admin,
            dir,
        }
    }

    /// A home directory for CLI runs (config files land under it).
    fn home(&self, name: &str) -> PathBuf {
        let h = self.dir.path().join(name);
        std::fs::create_dir_all(&h).expect("home");
        h
    }

    async fn stop(mut self) {
        if let Some(r) = self.running.take() {
            r.stop().await.expect("stop");
        }
    }
}

/// One `gpux` run: args, environment (beyond a clean HOME), extra PATH directory.
#[derive(Clone, Default)]
struct Run {
    home: PathBuf,
    env: Vec<(String, String)>,
    path_first: Option<PathBuf>,
    stdin: Option<String>,
}

impl Run {
    fn new(home: &Path) -> Run {
        Run {
            home: home.to_path_buf(),
            ..Run::default()
        }
    }

    fn env(mut self, k: &str, v: &str) -> Run {
        self.env.push((k.into(), v.into()));
        self
    }

    /// Runs `gpux args…` (blocking, on the blocking pool).
    async fn gpux(&self, args: &[&str]) -> Output {
        let run = self.clone();
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        tokio::task::spawn_blocking(move || {
            let mut c = assert_cmd::Command::new(env!("CARGO_BIN_EXE_gpux"));
            for (k, _) in std::env::vars() {
                if k.starts_with("GPUX_") {
                    c.env_remove(k);
                }
            }
            c.env("HOME", &run.home)
                .env("XDG_CONFIG_HOME", run.home.join(".config"))
                .env("NO_COLOR", "1");
            if let Some(p) = &run.path_first {
                let path = std::env::var("PATH").unwrap_or_default();
                c.env("PATH", format!("{}:{path}", p.display()));
            }
            for (k, v) in &run.env {
                c.env(k, v);
            }
            if let Some(input) = &run.stdin {
                c.write_stdin(input.clone());
            }
            c.args(&args)
                .timeout(RUN_TIMEOUT)
                .output()
                .expect("run gpux")
        })
        .await
        .expect("join")
    }

    /// Runs and expects status 0; answers stdout.
    async fn ok(&self, args: &[&str]) -> String {
        let o = self.gpux(args).await;
        assert_eq!(
            o.status.code(),
            Some(0),
            "gpux {args:?}\nstdout: {}\nstderr: {}",
            text(&o.stdout),
            text(&o.stderr)
        );
        text(&o.stdout)
    }

    /// Runs with `--json` and parses every stdout line as `T`.
    async fn json<T: DeserializeOwned>(&self, args: &[&str]) -> Vec<T> {
        let mut a = args.to_vec();
        a.push("--json");
        let out = self.ok(&a).await;
        out.lines()
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("gpux {args:?}: line {l:?} is not the type: {e}"))
            })
            .collect()
    }

    /// Runs with `--json`; expects exactly one line.
    async fn json1<T: DeserializeOwned>(&self, args: &[&str]) -> T {
        let mut v: Vec<T> = self.json(args).await;
        assert_eq!(v.len(), 1, "gpux {args:?}: one line expected");
        v.remove(0)
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The supplier's node agent: heartbeats `node` and reports every provisioning lease ready.
fn agent(client: Client, node: String) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let access = AccessRequest {
            ssh_host: Some(HOST.into()),
            ssh_port: Some(PORT),
            ssh_user: Some(USER.into()),
            ..AccessRequest::default()
        };
        loop {
            client.heartbeat(&node, 8).await.expect("heartbeat");
            let work = client.node_leases(&node).await.expect("node leases");
            for l in work
                .leases
                .iter()
                .filter(|l| l.state == LeaseStateDto::Provisioning)
            {
                client.report_ready(&l.id, &access).await.expect("ready");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

/// Admin, supplier and buyer through `gpux` only; a test agent delivers the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_supplier_and_buyer_trade_through_gpux() {
    let ex = Exchange::start().await;
    let home = ex.home("all");
    let admin = Run::new(&home)
        .env("GPUX_URL", &ex.url)
        .env("GPUX_KEY", &ex.admin);

    // Admin: accounts and a deposit (twice with one idempotency key: money moves once).
    let sup: AccountCreated = admin
        .json1(&["account", "create", "idc-1", "--role", "supplier"])
        .await;
    assert_eq!(
        (sup.account.name.as_str(), sup.account.role),
        ("idc-1", Role::Supplier)
    );
    assert!(sup.api_key.starts_with("gpux_") && sup.api_key.len() == 37);
    let buyer: AccountCreated = admin
        .json1(&["account", "create", "team-a", "--role", "buyer"])
        .await;
    for _ in 0..2 {
        let d: TransferDone = admin
            .json1(&["deposit", "team-a", "1000.00", "--idempotency-key", "dep-1"])
            .await;
        assert_eq!(d.account_id, buyer.account.id);
        assert_eq!(
            (d.amount.as_str(), d.kind),
            ("1000.00", TransferKindDto::Deposit)
        );
        assert_eq!(d.balance_after, "1000.00");
    }
    let human = admin.ok(&["deposit", &buyer.account.id, "5.50"]).await;
    assert_eq!(
        human.trim(),
        format!(
            "deposit of 5.50 CNY recorded for account {} (balance now 1005.50 CNY)",
            buyer.account.id
        )
    );
    let accounts: Vec<AccountView> = admin.json(&["accounts"]).await;
    let names: Vec<(&str, Role)> = accounts.iter().map(|a| (a.name.as_str(), a.role)).collect();
    assert_eq!(
        names,
        [
            ("admin", Role::Admin),
            ("idc-1", Role::Supplier),
            ("team-a", Role::Buyer)
        ]
    );

    // Supplier: a node and an offer.
    let supplier = Run::new(&home)
        .env("GPUX_URL", &ex.url)
        .env("GPUX_KEY", &sup.api_key);
    let node: NodeView = supplier
        .json1(&[
            "node",
            "register",
            "--name",
            "n1",
            "--sku",
            "H100-80G",
            "--gpus",
            "8",
            "--region",
            "cn-east-2",
            "--jurisdiction",
            "CN",
            "--interconnect",
            "infiniband",
            "--nvlink",
        ])
        .await;
    assert_eq!(
        (node.name.as_str(), node.gpus, node.nvlink),
        ("n1", 8, true)
    );
    assert_eq!(node.interconnect, InterconnectDto::Infiniband);
    let offer: OfferView = supplier
        .json1(&[
            "offer",
            "post",
            "--node",
            &node.id,
            "--gpus",
            "8",
            "--spot-price",
            "20.50",
            "--provision-s",
            "120",
            "--max-lease",
            "2days",
            "--sla-availability",
            "99.9",
            "--sla-multiple",
            "20",
            "--sla-outage-cap",
            "10m",
            "--sla-cap",
            "50%",
        ])
        .await;
    assert_eq!((offer.node_id.as_str(), offer.gpus), (node.id.as_str(), 8));
    // SLA terms (issue 26): posted by flags, shown as posted.
    let sla = offer.sla.as_ref().expect("sla terms");
    assert_eq!(
        (
            sla.availability.as_str(),
            sla.credit_multiple,
            sla.outage_cap_s
        ),
        ("99.90", 20, 600)
    );
    assert_eq!(sla.credit_cap, gpux_wire::CreditCapDto::MonthlyFeePct(50));
    assert_eq!(offer.spot_price, "20.5000");
    assert_eq!((offer.provision_s, offer.max_lease_s), (120, 172_800));
    let inv: gpux_client::wire::ws::InventorySnapshot =
        supplier.json1(&["inventory", "--sku", "H100-80G"]).await;
    let levels: Vec<(&str, &str, u32)> = inv
        .levels
        .iter()
        .map(|l| (l.region.as_str(), l.price.as_str(), l.free_gpus))
        .collect();
    assert_eq!(levels, [("cn-east-2", "20.5000", 8)]);
    // Trust filters (issue 26): this exchange does not verify and the node is `new` to the
    // reliability score, so the capacity a `--verified` or `--min-reliability 0` bid could
    // take is none; a ratio out of range is refused (1), and `--watch` cannot filter (2).
    for filter in [&["--verified"][..], &["--min-reliability", "0"][..]] {
        let args = [&["inventory", "--sku", "H100-80G"][..], filter].concat();
        let inv: gpux_client::wire::ws::InventorySnapshot = supplier.json1(&args).await;
        assert_eq!(
            (inv.sku.as_str(), inv.levels.len()),
            ("H100-80G", 0),
            "{args:?}"
        );
    }
    let err = fails(&supplier, &["inventory", "--min-reliability", "1.5"], 1).await;
    assert!(err.contains("invalid_constraints"), "{err}");
    let err = fails(&supplier, &["inventory", "--watch", "--verified"], 2).await;
    assert!(err.contains("--watch follows the live feed"), "{err}");
    // Site filters (issue 26): n1 is CN, InfiniBand, NVLink.
    for (filter, want) in [
        (
            &[
                "--jurisdiction",
                "CN",
                "--min-interconnect",
                "infiniband",
                "--nvlink",
            ][..],
            1,
        ),
        (&["--min-interconnect", "roce"][..], 1),
        (&["--jurisdiction", "HK"][..], 0),
    ] {
        let args = [&["inventory", "--sku", "H100-80G"][..], filter].concat();
        let inv: gpux_client::wire::ws::InventorySnapshot = supplier.json1(&args).await;
        assert_eq!(inv.levels.len(), want, "{args:?}");
    }
    let err = fails(&supplier, &["inventory", "--watch", "--nvlink"], 2).await;
    assert!(err.contains("--watch follows the live feed"), "{err}");
    // The offer search (issue 26): the market's offers, no key needed, anonymous.
    let public = Run::new(&home).env("GPUX_URL", &ex.url);
    let found: Vec<MarketOfferView> = public
        .json(&[
            "offers",
            "search",
            "--sku",
            "H100-80G",
            "--nvlink",
            "--max-price",
            "21",
        ])
        .await;
    assert_eq!(found.len(), 1);
    let row = &found[0];
    assert_eq!(
        (
            row.offer_id.as_str(),
            row.jurisdiction.as_str(),
            row.free_gpus,
            row.spot_price.as_str()
        ),
        (offer.id.as_str(), "CN", 8, "20.5000")
    );
    assert_eq!(row.interconnect, InterconnectDto::Infiniband);
    assert_eq!(
        row.sla.as_ref().map(|s| s.availability.as_str()),
        Some("99.90")
    );
    assert_eq!(row.cuda_version, None, "not attested here");
    for filter in [
        &["--jurisdiction", "HK"][..],
        &["--max-price", "20"][..],
        &["--kind", "preemptible"][..],
        &["--min-cuda", "12.4"][..],
        &["--verified"][..],
    ] {
        let args = [&["offers", "search"][..], filter].concat();
        let none: Vec<MarketOfferView> = public.json(&args).await;
        assert!(none.is_empty(), "{args:?}: {none:?}");
    }
    let table = public
        .ok(&["offers", "search", "--order", "gpus", "--limit", "5"])
        .await;
    for cell in [
        "RELIAB",
        "PREEMPT",
        offer.id.as_str(),
        "8/8",
        "99.90%",
        "infiniband",
    ] {
        assert!(table.contains(cell), "{cell} in {table}");
    }
    let err = fails(
        &public,
        &["offers", "search", "--min-reliability", "1.5"],
        1,
    )
    .await;
    assert!(err.contains("invalid_constraints"), "{err}");
    let err = fails(&public, &["offers", "search", "--limit", "0"], 1).await;
    assert!(err.contains("invalid_query"), "{err}");
    // `gpux offers` alone: still the supplier's own.
    let own: Vec<OfferView> = supplier.json(&["offers"]).await;
    assert_eq!(own.len(), 1);
    assert_eq!(own[0].id, offer.id);
    let nk: NodeKeyCreated = supplier.json1(&["node", "key", "create", "n1"]).await;
    let keys: Vec<NodeKeyView> = supplier.json(&["node", "key", "list"]).await;
    assert_eq!(keys.len(), 1);
    assert_eq!(
        (keys[0].key_id.as_str(), keys[0].node_id.as_deref()),
        (nk.key_id.as_str(), Some(node.id.as_str()))
    );

    let sup_client = Client::new(&ex.url, Some(sup.api_key.clone())).expect("client");
    let agent = agent(sup_client, node.id.clone());

    // Buyer: bid and wait for the lease to run.
    let key_file = home.join("id_ed25519.pub");
    std::fs::write(&key_file, format!("{SSH_KEY}\n")).expect("key file");
    let b = Run::new(&home)
        .env("GPUX_URL", &ex.url)
        .env("GPUX_KEY", &buyer.api_key);
    let o = b
        .gpux(&[
            "bid",
            "--sku",
            "H100-80G",
            "--gpus",
            "2",
            "--price",
            "25",
            "--duration",
            "2h",
            "--ssh-key",
            key_file.to_str().expect("path"),
            "--wait",
        ])
        .await;
    let (stdout, stderr) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(
        o.status.code(),
        Some(0),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    assert_eq!(
        stdout,
        format!("ssh -p {PORT} {USER}@{HOST}\n"),
        "stderr: {stderr}"
    );
    assert!(stderr.contains("running (1 lease(s))"), "{stderr}");

    let leases: Vec<LeaseView> = b.json(&["leases"]).await;
    assert_eq!(leases.len(), 1);
    let l = &leases[0];
    assert_eq!(
        (l.state, l.gpus, l.price.as_str()),
        (LeaseStateDto::Active, 2, "20.5000")
    );
    assert_eq!(l.node_id, node.id);
    assert_eq!(l.end_ms - l.start_ms, 7_200_000);
    let access = l.access.as_ref().expect("access");
    assert_eq!(
        (
            access.ssh_host.as_deref(),
            access.ssh_port,
            access.ssh_user.as_deref()
        ),
        (Some(HOST), Some(PORT as u16), Some(USER))
    );
    assert_eq!(l.launch.as_ref().expect("launch").ssh_keys, [SSH_KEY]);
    let one: LeaseView = b.json1(&["lease", &l.id]).await;
    assert_eq!(one, *l);

    // `gpux ssh` execs ssh with the lease's access details (a stand-in ssh prints its args).
    let bin = home.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let fake = bin.join("ssh");
    std::fs::write(&fake, "#!/bin/sh\necho \"ssh $*\"\n").expect("fake ssh");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let mut with_ssh = b.clone();
    with_ssh.path_first = Some(bin);
    let out = with_ssh.ok(&["ssh", &l.id, "--", "-v", "nvidia-smi"]).await;
    assert_eq!(out, format!("ssh -p {PORT} {USER}@{HOST} -v nvidia-smi\n"));

    let bal: BalanceView = b.json1(&["balance"]).await;
    assert_eq!(bal.account_id, buyer.account.id);
    assert_eq!(bal.burn_rate_per_hour, "41.0000");
    // For people: money in fen, the API's `available`, the runway in words (issue 25).
    let shown = b.ok(&["balance"]).await;
    let row = |k: &str| {
        shown
            .lines()
            .find_map(|l| l.trim_start().strip_prefix(k).map(str::trim))
            .unwrap_or_else(|| panic!("no {k} in {shown}"))
            .to_string()
    };
    for k in ["balance", "available", "held by bids"] {
        let v = row(k);
        let amount = v.strip_suffix(" CNY").unwrap_or_else(|| panic!("{k}: {v}"));
        let decimals = amount.split_once('.').map(|(_, d)| d.len());
        assert_eq!(decimals, Some(2), "{k} at 2 decimals: {shown}");
    }
    let available = row("available");
    let exact: f64 = bal.available.parse().expect("decimal");
    let shown_available: f64 = available.trim_end_matches(" CNY").parse().expect("decimal");
    assert!((exact - shown_available).abs() <= 0.005, "{shown}");
    assert_eq!(row("burn rate"), "41.00 CNY/hour", "{shown}");
    assert!(row("runway").starts_with("about "), "{shown}");

    let rel: LeaseReleased = b.json1(&["release", &l.id]).await;
    assert_eq!((rel.lease_id.as_str(), rel.released), (l.id.as_str(), true));
    let o = with_ssh.gpux(&["ssh", &l.id]).await;
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("is ended, not running"),
        "{}",
        text(&o.stderr)
    );
    let ended: Vec<LeaseView> = b.json(&["leases", "--ended"]).await;
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0].end_reason, Some(EndReasonDto::Released));

    // Refusals: the API's code and request id, exit 1.
    let o = b
        .gpux(&[
            "bid",
            "--sku",
            "NOPE",
            "--gpus",
            "1",
            "--price",
            "1",
            "--ssh-key",
            key_file.to_str().expect("path"),
        ])
        .await;
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("gpux: unknown_sku: "), "{err}");
    assert!(err.contains("HTTP 400, request_id "), "{err}");
    let o = b.gpux(&["nodes"]).await;
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("forbidden"), "{}", text(&o.stderr));

    // Finance: the buyer's statement as CSV holds the deposits.
    let csv = home.join("statement.csv");
    let o = admin
        .gpux(&[
            "report",
            "buyer-statements",
            "--account",
            &buyer.account.id,
            "-o",
            csv.to_str().expect("path"),
        ])
        .await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let body = std::fs::read_to_string(&csv).expect("csv");
    assert!(body.contains("1000.00") && body.contains("5.50"), "{body}");
    let o = admin
        .gpux(&["report", "trial-balance", "--format", "xlsx"])
        .await;
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("-o FILE.xlsx"));

    agent.abort();
    ex.stop().await;
}

/// Profile file, environment and flags, in that order; a clear error without a key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configuration_layers_and_a_missing_key() {
    let ex = Exchange::start().await;
    let home = ex.home("cfg");
    let admin = Run::new(&home)
        .env("GPUX_URL", &ex.url)
        .env("GPUX_KEY", &ex.admin);
    let buyer: AccountCreated = admin
        .json1(&["account", "create", "team-b", "--role", "buyer"])
        .await;
    let sup: AccountCreated = admin
        .json1(&["account", "create", "idc-2", "--role", "supplier"])
        .await;

    // No key anywhere: exit 2 with a message that says how to configure one.
    let bare = Run::new(&home);
    let o = bare.gpux(&["--url", &ex.url, "me"]).await;
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    assert!(
        err.starts_with("gpux: no API key: pass --key KEY, set GPUX_KEY"),
        "{err}"
    );
    assert!(
        err.contains("gpux config set-profile default --key KEY"),
        "{err}"
    );

    // The profile file: written 0600 under XDG_CONFIG_HOME; env values are not stored.
    bare.clone()
        .env("GPUX_KEY", "gpux_from_env")
        .ok(&["config", "set-profile", "default", "--url", &ex.url])
        .await;
    bare.ok(&["config", "set-profile", "default", "--key", &ex.admin])
        .await;
    let dead = "http://127.0.0.1:9";
    bare.ok(&[
        "config",
        "set-profile",
        "prod",
        "--url",
        dead,
        "--key",
        &sup.api_key,
    ])
    .await;
    let file = home.join(".config/gpux/config.toml");
    let cfg = std::fs::read_to_string(&file).expect("config file");
    assert_eq!(
        cfg,
        format!(
            "[profiles.default]\nurl = \"{}\"\nkey = \"{}\"\n\n[profiles.prod]\nurl = \"{dead}\"\n\
             key = \"{}\"\n",
            ex.url, ex.admin, sup.api_key
        )
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    // --key-stdin: the key from standard input.
    let mut piped = bare.clone();
    piped.stdin = Some(format!("{}\n", buyer.api_key));
    piped
        .ok(&[
            "config",
            "set-profile",
            "ci",
            "--url",
            &ex.url,
            "--key-stdin",
        ])
        .await;
    let cfg = std::fs::read_to_string(&file).expect("config file");
    assert!(
        cfg.starts_with(&format!(
            "[profiles.ci]\nurl = \"{}\"\nkey = \"{}\"\n\n[profiles.default]",
            ex.url, buyer.api_key
        )),
        "{cfg}"
    );

    let me = |r: Run, args: Vec<String>| async move {
        let mut a: Vec<&str> = args.iter().map(String::as_str).collect();
        a.push("me");
        let m: MeView = r.json1(&a).await;
        m.role
    };
    // The default profile alone.
    assert_eq!(me(bare.clone(), vec![]).await, Role::Admin);
    // GPUX_KEY beats the profile; --key beats GPUX_KEY.
    let env_buyer = bare.clone().env("GPUX_KEY", &buyer.api_key);
    assert_eq!(me(env_buyer.clone(), vec![]).await, Role::Buyer);
    assert_eq!(
        me(env_buyer.clone(), vec!["--key".into(), sup.api_key.clone()]).await,
        Role::Supplier
    );
    // URL: GPUX_URL beats the profile (a dead port: exit 3); --url beats GPUX_URL.
    let env_dead = bare.clone().env("GPUX_URL", dead);
    let o = env_dead.gpux(&["me"]).await;
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("cannot reach the exchange"));
    assert_eq!(
        me(env_dead, vec!["--url".into(), ex.url.clone()]).await,
        Role::Admin
    );
    // Another profile: its key, and its (dead) URL unless overridden.
    let prod = vec![
        "--profile".into(),
        "prod".into(),
        "--url".into(),
        ex.url.clone(),
    ];
    assert_eq!(me(bare.clone(), prod).await, Role::Supplier);
    let o = bare.clone().env("GPUX_PROFILE", "prod").gpux(&["me"]).await;
    assert_eq!(o.status.code(), Some(3));
    // An unknown profile: exit 2 naming the known ones.
    let o = bare.gpux(&["--profile", "staging", "me"]).await;
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("no profile \"staging\"")
            && text(&o.stderr).contains("(profiles: ci, default, prod)"),
        "{}",
        text(&o.stderr)
    );
    let shown: serde_json::Value = bare.json1(&["config", "show"]).await;
    assert_eq!(shown["profile"], "default");
    assert_eq!(shown["url"], ex.url.as_str());
    assert_eq!(shown["key_source"], "profile");
    assert!(
        !shown.to_string().contains(&ex.admin),
        "the key is masked: {shown}"
    );
    ex.stop().await;
}

/// Ctrl-C while `bid --wait` rests cancels the bid and exits 130.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_cancels_a_resting_bid() {
    let ex = Exchange::start().await;
    let home = ex.home("intr");
    let admin = Run::new(&home)
        .env("GPUX_URL", &ex.url)
        .env("GPUX_KEY", &ex.admin);
    let buyer: AccountCreated = admin
        .json1(&["account", "create", "team-c", "--role", "buyer"])
        .await;
    admin
        .ok(&["deposit", "team-c", "100", "--idempotency-key", "d"])
        .await;
    let key_file = home.join("k.pub");
    std::fs::write(&key_file, SSH_KEY).expect("key");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_gpux"))
        .args([
            "--url",
            &ex.url,
            "--key",
            &buyer.api_key,
            "bid",
            "--sku",
            "A100-80G",
            "--gpus",
            "1",
            "--price",
            "5",
            "--tif",
            "gtc",
            "--client-order-id",
            "rest-1",
            "--ssh-key",
            key_file.to_str().expect("path"),
            "--wait",
        ])
        .env("HOME", &home)
        .env_remove("GPUX_PROFILE")
        .env_remove("GPUX_URL")
        .env_remove("GPUX_KEY")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let c = Client::new(&ex.url, Some(buyer.api_key.clone())).expect("client");
    let mut bid = None;
    for _ in 0..100 {
        if let Some(b) = c.bids().await.expect("bids").bids.into_iter().next() {
            bid = Some(b);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let bid = bid.expect("the bid rests");
    assert_eq!(bid.client_order_id.as_deref(), Some("rest-1"));
    // Let the spinner's first poll pass, then Ctrl-C.
    tokio::time::sleep(Duration::from_millis(700)).await;
    // SAFETY: kill(2) on our own child's pid.
    let sent = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(sent, 0, "kill -INT");
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().expect("wait"))
        .await
        .expect("join");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(
        err.contains(&format!(
            "interrupted: canceled bid {}, which was still resting",
            bid.id
        )),
        "{err}"
    );
    assert!(c.bids().await.expect("bids").bids.is_empty());
    ex.stop().await;
}

/// `inventory --watch --json` prints the view after every change, and Ctrl-C stops it (130).
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inventory_watch_follows_the_feed() {
    use std::io::BufRead;
    let ex = Exchange::start().await;
    let admin = Client::new(&ex.url, Some(ex.admin.clone())).expect("client");
    let sup = admin
        .create_account(&CreateAccountRequest {
            name: "idc-w".into(),
            role: Role::Supplier,
        })
        .await
        .expect("supplier");
    let sup = admin.with_key(&sup.api_key).expect("client");
    let node = sup
        .register_node(&NodeRequest {
            name: "w1".into(),
            sku: "H20-96G".into(),
            gpus: 8,
            region: "cn-east-1".into(),
            jurisdiction: "CN".into(),
            interconnect: InterconnectDto::Roce,
            nvlink: false,
            fabric_domain: None,
            nic_gbps: None,
        })
        .await
        .expect("node");
    let offer = |gpus: u32| OfferRequest {
        node_id: Some(IdStr(node.id.parse().expect("id"))),
        gpus,
        spot_price: "7.25".parse().expect("price"),
        preemptible_price: None,
        min_lease_s: None,
        max_lease_s: None,
        available_until_ms: None,
        notice_s: None,
        provision_s: None,
        sla: None,
    };
    let posted = sup.post_offer(&offer(8)).await.expect("offer");

    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_gpux"))
        .args([
            "--url",
            &ex.url,
            "inventory",
            "--sku",
            "H20-96G",
            "--watch",
            "--json",
        ])
        .env("HOME", ex.home("watch"))
        .env_remove("GPUX_PROFILE")
        .env_remove("GPUX_URL")
        .env_remove("GPUX_KEY")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut next = async || -> gpux_client::wire::ws::InventorySnapshot {
        let line = tokio::time::timeout(Duration::from_secs(20), rx.recv())
            .await
            .expect("a line within 20 s")
            .expect("stdout open");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
    };
    let levels = |s: &gpux_client::wire::ws::InventorySnapshot| -> Vec<(String, String, u32)> {
        s.levels
            .iter()
            .map(|l| (l.region.clone(), l.price.clone(), l.free_gpus))
            .collect()
    };
    let first = next().await;
    assert_eq!(first.sku, "H20-96G");
    assert_eq!(levels(&first), [("cn-east-1".into(), "7.2500".into(), 8)]);
    sup.amend_offer(
        &posted.id,
        &OfferRequest {
            node_id: None,
            ..offer(3)
        },
    )
    .await
    .expect("amend");
    let second = next().await;
    assert_eq!(levels(&second), [("cn-east-1".into(), "7.2500".into(), 3)]);
    assert!(second.seq > first.seq);
    sup.withdraw_offer(&posted.id).await.expect("withdraw");
    let third = next().await;
    assert!(third.levels.is_empty(), "{third:?}");

    // SAFETY: kill(2) on our own child's pid.
    let sent = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(sent, 0);
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().expect("wait"))
        .await
        .expect("join");
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "gpux: stopped watching\n");
    ex.stop().await;
}

/// A plain `gpux bid` interrupted while its request is in flight (the exchange here accepts
/// the connection and never answers) names the client order id it used, a generated one too,
/// and how to check whether the bid landed (issue 25). A negative count gets a message, not
/// clap's `-- -2` tip.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_bid_says_how_to_check_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key_file = dir.path().join("k.pub");
    std::fs::write(&key_file, SSH_KEY).expect("key");
    let key = key_file.to_str().expect("path").to_string();
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", silent.local_addr().expect("addr"));
    // Accepts and holds every connection, never answering.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in silent.incoming() {
            held.push(c);
        }
    });
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_gpux"))
        .args([
            "--url",
            &url,
            "--key",
            "gpux_test",
            "bid",
            "--sku",
            "H100-80G",
            "--gpus",
            "1",
            "--price",
            "5",
            "--ssh-key",
            &key,
        ])
        .env("HOME", dir.path())
        .env_remove("GPUX_PROFILE")
        .env_remove("GPUX_URL")
        .env_remove("GPUX_KEY")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // SAFETY: kill(2) on our own child's pid.
    let sent = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(sent, 0, "kill -INT");
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().expect("wait"))
        .await
        .expect("join");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(
        err.starts_with(
            "gpux: interrupted while the bid was sent: the bid's client order id is gpux-"
        ),
        "{err}"
    );
    let coid = err
        .split_whitespace()
        .find(|w| w.starts_with("gpux-"))
        .expect("the client order id")
        .trim_end_matches(';');
    assert_eq!(coid.len(), 37, "{err}");
    assert!(err.contains("`gpux bids`"), "{err}");
    assert!(err.contains(&format!("--client-order-id {coid}")), "{err}");

    let run = Run::new(dir.path())
        .env("GPUX_URL", &url)
        .env("GPUX_KEY", "gpux_test");
    for (gpus, price, message) in [
        ("-2", "5", "gpus must be a positive number, not -2"),
        ("2", "-2", "a price must be above 0, not -2"),
    ] {
        let o = run
            .gpux(&[
                "bid",
                "--sku",
                "H100-80G",
                "--gpus",
                gpus,
                "--price",
                price,
                "--ssh-key",
                &key,
            ])
            .await;
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(message), "{err}");
        assert!(!err.contains("-- -2"), "{err}");
    }
}

/// Runs and expects `status`; answers stderr.
async fn fails(run: &Run, args: &[&str], status: i32) -> String {
    let o = run.gpux(args).await;
    let err = text(&o.stderr);
    assert_eq!(
        o.status.code(),
        Some(status),
        "gpux {args:?}\nstdout: {}\nstderr: {err}",
        text(&o.stdout)
    );
    err
}

/// Finance closes the month through `gpux` (issue 17): adjustments with idempotency keys,
/// an account's tax details, closes by month and by range, the periods, and a closed period's
/// invoice in every format; refusals print the API's code and message and exit 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finance_closes_the_month_through_gpux() {
    use chrono::{Datelike, TimeZone};
    let ex = Exchange::start().await;
    let home = ex.home("finance");
    let admin = Run::new(&home)
        .env("GPUX_URL", &ex.url)
        .env("GPUX_KEY", &ex.admin);
    let buyer: AccountCreated = admin
        .json1(&["account", "create", "team-a", "--role", "buyer"])
        .await;
    let books: AccountCreated = admin
        .json1(&["account", "create", "books", "--role", "finance"])
        .await;
    let id = buyer.account.id.clone();
    admin
        .ok(&["deposit", &id, "100.00", "--idempotency-key", "dep-1"])
        .await;
    let fin = Run::new(&home)
        .env("GPUX_URL", &ex.url)
        .env("GPUX_KEY", &books.api_key);
    let b = Run::new(&home)
        .env("GPUX_URL", &ex.url)
        .env("GPUX_KEY", &buyer.api_key);

    // An adjustment under a key: a retry answers the same posting.
    let credit = [
        "adjust",
        "--kind",
        "goodwill-credit",
        "--account",
        &id,
        "--amount",
        "10.00",
        "--reason",
        "outage on 11-03",
        "--reference",
        "INC-7",
        "--idempotency-key",
        "t-1",
    ];
    let first: AdjustmentDone = fin.json1(&credit).await;
    assert_eq!(
        (
            first.kind,
            first.debit.as_str(),
            first.credit.as_str(),
            first.amount.as_str(),
            first.memo.as_str()
        ),
        (
            AdjustmentKindDto::GoodwillCredit,
            "platform_fee",
            format!("buyer:{id}").as_str(),
            "10.00",
            "goodwill_credit: outage on 11-03 [INC-7]"
        )
    );
    let again: AdjustmentDone = fin.json1(&credit).await;
    assert_eq!(again, first);
    // Without a key, a fresh one is made and printed for a retry; a correction names both sides.
    let o = fin
        .gpux(&[
            "adjust",
            "--kind",
            "correction",
            "--debit",
            &format!("buyer:{id}"),
            "--credit",
            "platform_fee",
            "--amount",
            "5",
            "--reason",
            "fee charged twice, reversed",
        ])
        .await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).starts_with("idempotency key gpux-"),
        "{}",
        text(&o.stderr)
    );
    let human = text(&o.stdout);
    assert!(
        human.starts_with(&format!(
            "correction of 5.00 CNY posted: buyer:{id} → platform_fee (seq "
        )),
        "{human}"
    );
    assert!(human.contains("memo: correction: fee charged twice, reversed"));
    // Refusals print the API's code and message, and exit 1.
    let err = fails(
        &fin,
        &[
            "adjust", "--kind", "refund", "--amount", "1", "--reason", "x",
        ],
        1,
    )
    .await;
    assert!(
        err.contains("gpux: invalid_adjustment: this adjustment needs account (field account)"),
        "{err}"
    );
    assert!(err.contains("HTTP 422, request_id "), "{err}");
    let err = fails(
        &fin,
        &[
            "adjust",
            "--kind",
            "refund",
            "--account",
            &id,
            "--amount",
            "1",
            "--reason",
            "bell\u{7}",
        ],
        1,
    )
    .await;
    assert!(
        err.contains("gpux: invalid_reason: reason holds the control character U+0007"),
        "{err}"
    );
    assert!(err.contains("HTTP 400"), "{err}");
    let err = fails(&b, &["periods"], 1).await;
    assert!(
        err.contains("gpux: forbidden: a buyer key may not do this (needs finance or admin)"),
        "{err}"
    );
    fails(
        &fin,
        &[
            "adjust", "--kind", "bonus", "--amount", "1", "--reason", "x",
        ],
        2,
    )
    .await;

    // Tax details, before the close that prints them.
    let tax = [
        "account",
        "tax-details",
        "set",
        &id,
        "--legal-name",
        "上海算力科技有限公司",
        "--taxpayer-id",
        "91350100M000100Y43",
        "--phone",
        "021-61234567",
    ];
    let set: TaxDetailsView = fin.json1(&tax).await;
    assert_eq!(set.account_id, id);
    assert_eq!(set.details.legal_name, "上海算力科技有限公司");
    assert_eq!(set.details.address, None);
    let err = fails(
        &fin,
        &[
            "account",
            "tax-details",
            "set",
            &id,
            "--legal-name",
            "x",
            "--taxpayer-id",
            "91350100M000100Y44",
        ],
        1,
    )
    .await;
    assert!(err.contains("gpux: invalid_taxpayer_id: "), "{err}");
    assert!(err.contains("(field taxpayer_id)"), "{err}");

    // Last month (in Shanghai) closes with no documents; this month so far has the invoice.
    let tz = chrono_tz::Asia::Shanghai;
    let today = chrono::Utc::now().with_timezone(&tz).date_naive();
    let this_month = today.with_day(1).expect("first");
    let last_month = this_month
        .checked_sub_months(chrono::Months::new(1))
        .expect("last month");
    let p1: ClosedPeriodView = fin
        .json1(&[
            "close",
            "--month",
            &last_month.format("%Y-%m").to_string(),
            "--idempotency-key",
            "close-1",
        ])
        .await;
    let ms = |d: chrono::NaiveDate| {
        tz.from_local_datetime(&d.and_hms_opt(0, 0, 0).expect("midnight"))
            .single()
            .expect("one instant")
            .timestamp_millis()
    };
    assert_eq!(
        (p1.id, p1.from_ms, p1.to_ms, p1.invoices.len()),
        (1, ms(last_month), ms(this_month), 0)
    );
    tokio::time::sleep(Duration::from_millis(5)).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis()
        .to_string();
    let from = this_month.format("%Y-%m-%d").to_string();
    let p2: ClosedPeriodView = fin.json1(&["close", "--from", &from, "--to", &now]).await;
    assert_eq!((p2.id, p2.from_ms), (2, ms(this_month)));
    assert_eq!(p2.invoices, [(id.clone(), 1)].into_iter().collect());
    // period_not_ended prints its times as dates in the finance time zone, not ms.
    let err = fails(&fin, &["close", "--from", &now, "--to", "4102444800000"], 1).await;
    assert!(err.contains("gpux: period_not_ended: "), "{err}");
    assert!(
        err.contains("period ending at 2100-01-01 08:00:00 (Asia/Shanghai) cannot be closed"),
        "{err}"
    );
    assert!(
        err.lines()
            .filter(|l| l.starts_with("gpux:"))
            .all(|l| !l.contains("4102444800000")),
        "{err}"
    );
    fails(&fin, &["close", "--month", "2026-11", "--from", &from], 2).await;
    fails(&fin, &["close", "--from", &from], 2).await;
    let periods: Vec<ClosedPeriodView> = fin.json(&["periods"]).await;
    assert_eq!(periods, [p1.clone(), p2.clone()]);
    // Shown in the finance time zone: a month's bounds are dates.
    let table = fin.ok(&["periods"]).await;
    let mut rows = table.lines();
    assert!(
        rows.next()
            .is_some_and(|h| h.split_whitespace().collect::<Vec<_>>()
                == [
                    "ID",
                    "FROM",
                    "TO",
                    "CLOSED",
                    "INVOICES",
                    "STATEMENTS",
                    "CREDIT",
                    "NOTES"
                ]),
        "{table}"
    );
    let first: Vec<&str> = rows.next().expect("period 1").split_whitespace().collect();
    assert_eq!(
        first[..3],
        [
            "1",
            last_month.format("%Y-%m-%d").to_string().as_str(),
            this_month.format("%Y-%m-%d").to_string().as_str()
        ],
        "{table}"
    );
    assert_eq!(
        rows.next().map(|r| r.trim_start().starts_with("2 ")),
        Some(true)
    );
    assert_eq!(rows.next(), Some("(times in Asia/Shanghai)"), "{table}");
    // `close --to now` closes from the latest close's end up to now.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let o = fin.gpux(&["close", "--to", "now", "--json"]).await;
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let p3: ClosedPeriodView = serde_json::from_slice(&o.stdout).expect("a period");
    assert_eq!((p3.id, p3.from_ms), (3, p2.to_ms));
    assert!(p3.to_ms > p2.to_ms);
    assert!(
        err.contains(&format!("closing --from {} --to {}", p2.to_ms, p3.to_ms)),
        "{err}"
    );

    // The invoice: its counterparty is the tax details; every format; the buyer reads its own.
    let inv: serde_json::Value = fin.json1(&["invoice", "2", &id]).await;
    assert_eq!(
        (
            &inv["kind"],
            &inv["number"],
            &inv["purchaser"]["name"],
            &inv["purchaser"]["taxpayer_id"],
            &inv["purchaser"]["phone"]
        ),
        (
            &serde_json::json!("buyer_invoice"),
            &serde_json::json!(1),
            &serde_json::json!("上海算力科技有限公司"),
            &serde_json::json!("91350100M000100Y43"),
            &serde_json::json!("021-61234567")
        )
    );
    let own: serde_json::Value = b.json1(&["invoice", "2", &id]).await;
    assert_eq!(own, inv);
    let summary = b.ok(&["invoice", "2", &id]).await;
    assert!(summary.contains("buyer_invoice #1"), "{summary}");
    assert!(
        summary.contains("上海算力科技有限公司 91350100M000100Y43"),
        "{summary}"
    );
    assert!(
        summary.lines().any(|l| l.trim_start().starts_with("total")),
        "{summary}"
    );
    let csv = b.ok(&["invoice", "2", &id, "--format", "csv"]).await;
    assert!(csv.contains("91350100M000100Y43"), "{csv}");
    let pdf = home.join("inv.pdf");
    let o = b
        .gpux(&["invoice", "2", &id, "-o", pdf.to_str().expect("path")])
        .await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(std::fs::read(&pdf).expect("pdf").starts_with(b"%PDF-"));
    let err = fails(&b, &["invoice", "2", &id, "--format", "xlsx"], 2).await;
    assert!(err.contains("-o FILE.xlsx"), "{err}");
    let err = fails(&b, &["invoice", "2", &books.account.id], 1).await;
    assert!(err.contains("gpux: not_found: "), "{err}");
    assert!(err.contains("HTTP 404"), "{err}");

    // Issue 25: the buyer lists its own documents and downloads one by period; finance
    // lists the buyer's with --account.
    let docs: Vec<gpux_wire::DocumentView> = b.json(&["invoices"]).await;
    let inv2 = docs
        .iter()
        .find(|d| d.period == 2)
        .unwrap_or_else(|| panic!("period 2's invoice: {docs:?}"));
    assert_eq!(
        (inv2.kind, inv2.number, inv2.account.as_str()),
        (gpux_wire::DocumentKind::Invoice, 1, id.as_str())
    );
    assert_eq!(inv2.path, format!("/v1/finance/periods/2/invoices/{id}"));
    assert!(docs.iter().all(|d| d.account == id), "{docs:?}");
    let theirs: Vec<gpux_wire::DocumentView> = fin.json(&["invoices", "--account", &id]).await;
    assert_eq!(theirs, docs);
    let table = b.ok(&["invoices"]).await;
    assert!(
        table
            .lines()
            .next()
            .is_some_and(|h| h.split_whitespace().collect::<Vec<_>>()
                == [
                    "PERIOD", "FROM", "TO", "KIND", "NUMBER", "ACCOUNT", "GROSS", "CORRECTS"
                ]),
        "{table}"
    );
    let got = home.join("got.pdf");
    let o = b
        .gpux(&["invoices", "get", "2", "-o", got.to_str().expect("path")])
        .await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(
        std::fs::read(&got).expect("pdf"),
        std::fs::read(&pdf).expect("pdf")
    );
    let err = fails(&b, &["invoices", "get", "2", "--kind", "credit-note"], 1).await;
    assert!(err.contains("no credit note in period 2"), "{err}");

    ex.stop().await;
}

/// A private CA and a server certificate it issued for `localhost`, as PEM files in `dir`:
/// (CA certificate, the server's TLS files).
fn private_ca(dir: &Path) -> (PathBuf, gateway::app::TlsFiles) {
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
    let files = gateway::app::TlsFiles {
        cert: dir.join("server-chain.pem"),
        key: dir.join("server-key.pem"),
    };
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).expect("write CA");
    std::fs::write(&files.cert, format!("{}{}", leaf.pem(), ca.pem())).expect("write chain");
    std::fs::write(&files.key, key.serialize_pem()).expect("write key");
    (ca_file, files)
}

/// `gpux` against an HTTPS exchange whose certificate a private CA issued: with the CA's file
/// (`--ca-cert`, `GPUX_CA_CERT`, a profile's `ca_cert`) every call works; without it the
/// refusal says the certificate is not trusted and how to fix it; a CA file that cannot be
/// read is a usage error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpux_reaches_an_https_exchange_with_the_private_ca() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, tls) = private_ca(dir.path());
    let ca = ca.display().to_string();
    let ex = Exchange::start_with(dir, Some(tls)).await;
    assert!(ex.url.starts_with("https://localhost:"), "{}", ex.url);
    let home = ex.home("tls");
    let admin = Run::new(&home)
        .env("GPUX_URL", &ex.url)
        .env("GPUX_KEY", &ex.admin);

    // --ca-cert: a read and a command over HTTPS.
    let admin_me: MeView = admin.json1(&["--ca-cert", &ca, "me"]).await;
    assert_eq!(admin_me.role, Role::Admin);
    let made: AccountCreated = admin
        .json1(&[
            "--ca-cert",
            &ca,
            "account",
            "create",
            "team-tls",
            "--role",
            "buyer",
        ])
        .await;
    assert_eq!(
        (made.account.name.as_str(), made.account.role),
        ("team-tls", Role::Buyer)
    );
    // GPUX_CA_CERT: the same, with the new buyer's key.
    let buyer: MeView = admin
        .clone()
        .env("GPUX_CA_CERT", &ca)
        .json1(&["--key", &made.api_key, "me"])
        .await;
    assert_eq!(
        (buyer.account_id.as_str(), buyer.role),
        (made.account.id.as_str(), Role::Buyer)
    );

    // Without the CA: exit 3, "not trusted", and the way out.
    let err = fails(&admin, &["me"], 3).await;
    assert!(
        err.starts_with(&format!(
            "gpux: cannot reach the exchange: TLS with {}: certificate not trusted",
            ex.url.trim_start_matches("https://")
        )),
        "{err}"
    );
    assert!(err.contains("--ca-cert FILE"), "{err}");
    // A CA file that cannot be read: exit 2, naming it.
    let missing = home.join("no-such-ca.pem").display().to_string();
    let err = fails(&admin, &["--ca-cert", &missing, "me"], 2).await;
    assert!(
        err.contains(&format!("CA certificate file {missing}")),
        "{err}"
    );

    // A profile with the CA file: stored, shown, used.
    let bare = Run::new(&home);
    bare.ok(&[
        "config",
        "set-profile",
        "tls",
        "--url",
        &ex.url,
        "--key",
        &ex.admin,
        "--ca-cert",
        &ca,
    ])
    .await;
    let cfg = std::fs::read_to_string(home.join(".config/gpux/config.toml")).expect("config");
    assert!(cfg.contains(&format!("ca_cert = \"{ca}\"")), "{cfg}");
    let shown: serde_json::Value = bare.json1(&["--profile", "tls", "config", "show"]).await;
    assert_eq!(
        (&shown["ca_cert"], &shown["ca_cert_source"]),
        (&serde_json::json!(ca), &serde_json::json!("profile"))
    );
    let me: MeView = bare.json1(&["--profile", "tls", "me"]).await;
    assert_eq!(me, admin_me);
    ex.stop().await;
}

/// A node agent for gang members (issue 27): heartbeats `nodes` and reports each provisioning
/// lease ready once (a gang member then waits for the rest; it is not reported again).
fn gang_agent(client: Client, nodes: Vec<String>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let access = AccessRequest {
            ssh_host: Some(HOST.into()),
            ssh_port: Some(PORT),
            ssh_user: Some(USER.into()),
            ..AccessRequest::default()
        };
        let mut reported = std::collections::HashSet::new();
        loop {
            for node in &nodes {
                let _ = client.heartbeat(node, 8).await;
                let Ok(work) = client.node_leases(node).await else {
                    continue;
                };
                for l in work
                    .leases
                    .iter()
                    .filter(|l| l.state == LeaseStateDto::Provisioning)
                {
                    if reported.insert(l.id.clone()) {
                        let _ = client.report_ready(&l.id, &access).await;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

/// Issue 27 through `gpux`: nodes registered with a fabric domain and NIC bandwidth, the
/// domains view, a gang bid that fills whole (its members in rank order, billing from the whole
/// gang's ready), one that cannot (`gang_too_large`: pod-a has two nodes), the lease's gang, and
/// releasing the whole bid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_is_bid_shown_and_released_through_gpux() {
    let ex = Exchange::start().await;
    let home = ex.home("gang");
    let admin = Run::new(&home)
        .env("GPUX_URL", &ex.url)
        .env("GPUX_KEY", &ex.admin);
    let sup: AccountCreated = admin
        .json1(&["account", "create", "idc-g", "--role", "supplier"])
        .await;
    let buyer: AccountCreated = admin
        .json1(&["account", "create", "team-g", "--role", "buyer"])
        .await;
    admin.ok(&["deposit", "team-g", "10000.00"]).await;
    let supplier = Run::new(&home)
        .env("GPUX_URL", &ex.url)
        .env("GPUX_KEY", &sup.api_key);
    let mut nodes = Vec::new();
    for name in ["g1", "g2"] {
        let n: NodeView = supplier
            .json1(&[
                "node",
                "register",
                "--name",
                name,
                "--sku",
                "H100-80G",
                "--gpus",
                "8",
                "--region",
                "cn-east-2",
                "--jurisdiction",
                "CN",
                "--interconnect",
                "infiniband",
                "--fabric-domain",
                "pod-a",
                "--nic-gbps",
                "3200",
            ])
            .await;
        assert_eq!(
            (n.fabric_domain.as_deref(), n.nic_gbps),
            (Some("pod-a"), Some(3200))
        );
        supplier
            .ok(&[
                "offer",
                "post",
                "--node",
                &n.id,
                "--gpus",
                "8",
                "--spot-price",
                "20",
            ])
            .await;
        nodes.push(n.id);
    }
    let shown = supplier.ok(&["node", "show", &nodes[0]]).await;
    assert!(
        shown.contains("fabric domain: pod-a, nic: 3200 Gbit/s"),
        "{shown}"
    );
    // An update of the NIC keeps the domain.
    let n: NodeView = supplier
        .json1(&["node", "update", &nodes[1], "--nic-gbps", "400"])
        .await;
    assert_eq!(
        (n.fabric_domain.as_deref(), n.nic_gbps),
        (Some("pod-a"), Some(400))
    );
    let err = fails(
        &supplier,
        &["node", "update", &nodes[1], "--fabric-domain", "pod a"],
        1,
    )
    .await;
    assert!(err.contains("invalid_domain"), "{err}");

    // The public domains view: one domain, two whole free nodes.
    let anon = Run::new(&home).env("GPUX_URL", &ex.url);
    let rows: Vec<DomainInventoryView> = anon
        .json(&["inventory", "domains", "--sku", "H100-80G"])
        .await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].free_nodes_total, 2);
    assert_eq!(
        (
            rows[0].largest_gang.nodes,
            rows[0].largest_gang.gpus_per_node
        ),
        (2, 8)
    );
    assert_eq!(
        (rows[0].nic_gbps_min, rows[0].nic_gbps_max),
        (Some(400), Some(3200))
    );
    let table = anon
        .ok(&["inventory", "domains", "--sku", "H100-80G"])
        .await;
    assert!(
        table.contains(&rows[0].domain_id) && table.contains("2×8") && table.contains("2x8"),
        "{table}"
    );

    let sup_client = Client::new(&ex.url, Some(sup.api_key.clone())).expect("client");
    let agent = gang_agent(sup_client, nodes.clone());
    let key_file = home.join("id_ed25519.pub");
    std::fs::write(&key_file, format!("{SSH_KEY}\n")).expect("key file");
    let key = key_file.to_str().expect("path").to_string();
    let b = Run::new(&home)
        .env("GPUX_URL", &ex.url)
        .env("GPUX_KEY", &buyer.api_key);

    // Usage errors before anything is sent.
    for (args, what) in [
        (vec!["--gang", "0x8"], "--gang is NODESxGPUS"),
        (vec!["--gang", "2x17"], "--gang is NODESxGPUS"),
        (
            vec!["--gang", "2x8", "--placement", "spread"],
            "--gang places a gang",
        ),
        (
            vec!["--gpus", "8", "--min-gpus", "4"],
            "--min-gpus is for spread IOC",
        ),
    ] {
        let mut a = vec![
            "bid",
            "--sku",
            "H100-80G",
            "--price",
            "25",
            "--ssh-key",
            &key,
        ];
        a.extend(args);
        let o = b.gpux(&a).await;
        assert_eq!(o.status.code(), Some(2), "{a:?}: {}", text(&o.stderr));
        assert!(text(&o.stderr).contains(what), "{a:?}: {}", text(&o.stderr));
    }

    // A 3-node gang cannot fit pod-a, which has two nodes: closed at once, saying so.
    let out = b
        .ok(&[
            "bid",
            "--sku",
            "H100-80G",
            "--gang",
            "3x8",
            "--price",
            "25",
            "--duration",
            "1h",
            "--ssh-key",
            &key,
        ])
        .await;
    assert!(
        out.contains("gang_too_large")
            && out.contains("no fabric domain has 3 nodes of this SKU at all: the largest has 2"),
        "{out}"
    );

    // A 2-node gang fills whole: its members in rank order, billing from the whole gang.
    let o = b
        .gpux(&[
            "bid",
            "--sku",
            "H100-80G",
            "--gang",
            "2x8",
            "--on-member-loss",
            "end_all",
            "--price",
            "25",
            "--duration",
            "1h",
            "--ssh-key",
            &key,
            "--wait",
        ])
        .await;
    let placed_note = format!("{}{}", text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{placed_note}");
    assert!(
        placed_note.contains("member(s) in rank order")
            && placed_note.contains("billing starts when the whole gang is ready"),
        "{placed_note}"
    );
    let leases: Vec<LeaseView> = b.json(&["leases"]).await;
    assert_eq!(leases.len(), 2, "{placed_note}");
    let bid_id = leases[0].bid_id.clone();
    let ready: Vec<Option<i64>> = leases.iter().map(|l| l.ready_ms).collect();
    assert!(ready[0].is_some() && ready[0] == ready[1], "{leases:?}");
    let detail = b.ok(&["lease", &leases[0].id]).await;
    assert!(detail.contains(&format!("{bid_id} rank")), "{detail}");
    assert!(detail.contains("gang members"), "{detail}");
    let g = leases[0].gang.as_ref().expect("gang");
    assert_eq!((g.size, g.ready), (2, true));
    assert!(g.nodes.is_none());

    // Release the whole bid.
    let r: BidReleased = b.json1(&["release", "--bid", &bid_id]).await;
    assert_eq!(r.released.len(), 2);
    let err = fails(&b, &["release", "--bid", &bid_id], 1).await;
    assert!(err.contains("not_found"), "{err}");
    agent.abort();
    ex.stop().await;
}
