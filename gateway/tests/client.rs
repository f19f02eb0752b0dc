//! The typed client against the real server, in process (`gateway::app::start`, embedded
//! journal in a temp dir, port 0, lease delivery on as the server runs): an admin makes a
//! buyer and a supplier and funds the buyer; the supplier registers a node, heartbeats and
//! offers it; the buyer's bid with a launch spec fills, the supplier reports ready, the buyer
//! sees the lease active with its access; websocket replies and private events decode into
//! the wire types; an inventory stream sees the snapshot, the fill's level drop, and — after
//! the server restarts under it — a resync. Errors keep the server's status and code. A
//! scripted fake feed (a gap, a server resync) checks the stream's sequence rule, which a
//! correct server never breaks. Over TLS (the server's own listener, a certificate of a
//! private CA): REST over HTTPS and the websocket and an inventory stream over WSS with the
//! CA's file; without it, or by a name the certificate lacks, a refusal that names the cause.

use futures_util::StreamExt;
use gateway::accounts::Role;
use gateway::app::{AppOptions, Running, TlsFiles, start};
use gateway::journal::{AnyJournal, EmbeddedJournal};
use gpux_client::wire::ws::ServerMsg;
use gpux_client::wire::{
    AccessRequest, BidRequest, BidStatusDto, ConstraintsDto, CreateAccountRequest, DecimalStr,
    EndReasonDto, HoldReasonDto, IdStr, InterconnectDto, KindDto, LaunchRequest, LeaseStateDto,
    NodeRequest, NodeUpdateRequest, OfferRequest, PlacementDto, TeardownStatusDto, TifDto,
    TransferKindDto,
};
use gpux_client::{
    Client, ClientError, ClientOptions, InventoryStream, InventoryUpdate, LeaseQuery, ReportQuery,
    WsSession,
};
use std::path::PathBuf;
use std::time::Duration;

const SKU: &str = "H100-80G";
const KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM7t3CQcihrH/4tM1K41mGfGrkuwsCkbk7Z2fjczQzrv buyer@laptop";
/// Bound of every wait on the server in these tests.
const WAIT: Duration = Duration::from_secs(15);

/// The server on a fixed journal; restarts on the same address.
struct Server {
    running: Option<Running>,
    dir: tempfile::TempDir,
    opts: AppOptions,
    admin_key: String,
}

async fn journal(dir: &std::path::Path) -> AnyJournal {
    EmbeddedJournal::open(dir.join("journal"), 0)
        .await
        .expect("open embedded journal")
        .into()
}

impl Server {
    async fn start() -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = AppOptions {
            tick_ms: 0,
            workers: 2,
            market: gateway::market::MarketConfig::delivered(),
            ..AppOptions::default()
        };
        let running = start(journal(dir.path()).await, opts.clone())
            .await
            .expect("start app");
        let (_, admin_key, _) =
            gateway::api::admin::create_account_with_key(&running.api, None, "admin", Role::Admin)
                .await
                .expect("admin account");
        Server {
            running: Some(running),
            dir,
            opts,
            admin_key,
        }
    }

    fn base(&self) -> String {
        format!("http://{}/", self.running.as_ref().expect("running").addr)
    }

    /// Stops gracefully (websockets get 1001) and starts again on the same port and journal.
    async fn restart(&mut self) {
        let running = self.running.take().expect("running");
        self.opts.listen = running.addr.to_string();
        running.stop().await.expect("stop");
        let running = start(journal(self.dir.path()).await, self.opts.clone())
            .await
            .expect("restart app");
        self.running = Some(running);
    }
}

fn dec(s: &str) -> DecimalStr {
    s.parse().expect("decimal")
}

fn node(name: &str) -> NodeRequest {
    NodeRequest {
        name: name.into(),
        sku: SKU.into(),
        gpus: 8,
        region: "cn-east-2".into(),
        jurisdiction: "CN".into(),
        interconnect: InterconnectDto::Infiniband,
        nvlink: true,
        fabric_domain: None,
        nic_gbps: None,
    }
}

fn offer(node_id: &str) -> OfferRequest {
    OfferRequest {
        node_id: Some(IdStr(node_id.parse().expect("node id"))),
        gpus: 8,
        spot_price: dec("20"),
        preemptible_price: None,
        min_lease_s: Some(1),
        max_lease_s: Some(86_400),
        available_until_ms: None,
        notice_s: None,
        provision_s: None,
        sla: None,
    }
}

fn bid(coid: &str, sku: &str, gpus: u32) -> BidRequest {
    BidRequest {
        client_order_id: coid.into(),
        sku: sku.into(),
        gpus: Some(gpus),
        limit_price: dec("25.00"),
        kind: KindDto::Spot,
        placement: PlacementDto::SingleNode,
        gang: None,
        min_gpus: None,
        constraints: ConstraintsDto::default(),
        duration_s: Some(3600),
        time_in_force: TifDto::Ioc,
        expires_at_ms: None,
        launch: Some(LaunchRequest {
            ssh_keys: vec![KEY.into()],
            image: Some("nvcr.io/nvidia/pytorch:24.05-py3".into()),
            ports: vec![8888],
            ..LaunchRequest::default()
        }),
    }
}

fn access() -> AccessRequest {
    AccessRequest {
        ssh_host: Some("203.0.113.7".into()),
        ssh_port: Some(2222),
        ssh_user: Some("root".into()),
        urls: [(
            "8888".to_string(),
            "https://l1-8888.idc.example".to_string(),
        )]
        .into(),
    }
}

/// The next update of a stream, within [`WAIT`].
async fn next_update(s: &mut InventoryStream) -> InventoryUpdate {
    tokio::time::timeout(WAIT, s.next())
        .await
        .expect("an update in time")
        .expect("the stream goes on")
        .expect("no error")
}

/// Free spot GPUs at 20 CNY in cn-east-2 in an update.
fn free_at_20(u: &InventoryUpdate) -> u32 {
    u.levels
        .values()
        .filter(|l| l.region == "cn-east-2" && l.kind == KindDto::Spot && l.price == "20.0000")
        .map(|l| l.free_gpus)
        .sum()
}

/// Messages of a session until `want` picks one, within [`WAIT`].
async fn until<T>(ws: &mut WsSession, mut want: impl FnMut(ServerMsg) -> Option<T>) -> T {
    tokio::time::timeout(WAIT, async {
        loop {
            if let Some(t) = want(ws.next().await.expect("a message")) {
                return t;
            }
        }
    })
    .await
    .expect("the message in time")
}

struct Parties {
    admin: Client,
    buyer: Client,
    supplier: Client,
    buyer_id: String,
}

async fn parties(server: &Server) -> Parties {
    let admin = Client::new(&server.base(), Some(server.admin_key.clone())).expect("client");
    let mut made = Vec::new();
    for (name, role) in [("team-a", Role::Buyer), ("idc-1", Role::Supplier)] {
        let a = admin
            .create_account(&CreateAccountRequest {
                name: name.into(),
                role,
            })
            .await
            .expect("create account");
        assert_eq!((a.account.name.as_str(), a.account.role), (name, role));
        made.push(a);
    }
    Parties {
        buyer: admin.with_key(&made[0].api_key).expect("buyer key"),
        supplier: admin.with_key(&made[1].api_key).expect("supplier key"),
        buyer_id: made[0].account.id.clone(),
        admin,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_is_traded_delivered_and_followed_through_a_restart() {
    let mut server = Server::start().await;
    let p = parties(&server).await;
    let me = p.buyer.me().await.expect("me");
    assert_eq!(
        (me.account_id.as_str(), me.role),
        (p.buyer_id.as_str(), Role::Buyer)
    );
    assert!(p.admin.catalog().await.expect("catalog").delivery);

    // Deposits are named by their key: the same key again moves no money twice.
    let dep = p
        .admin
        .deposit(&p.buyer_id, dec("1000.00"), "dep-1")
        .await
        .expect("deposit");
    assert_eq!(
        (dep.amount.as_str(), dep.kind, dep.balance_after.as_str()),
        ("1000.00", TransferKindDto::Deposit, "1000.00")
    );
    let again = p
        .admin
        .deposit(&p.buyer_id, dec("1000.00"), "dep-1")
        .await
        .expect("deposit replay");
    assert_eq!(again, dep);

    // The supplier lists a node of 8 H100s at 20 CNY/GPU-hour.
    let n = p.supplier.register_node(&node("n1")).await.expect("node");
    let hb = p.supplier.heartbeat(&n.id, 8).await.expect("heartbeat");
    assert!(hb.seq > 0);
    let o = p.supplier.post_offer(&offer(&n.id)).await.expect("offer");
    assert_eq!(
        (o.node_id.as_str(), o.gpus, o.spot_price.as_str()),
        (n.id.as_str(), 8, "20.0000")
    );
    // The list adds what the node delivered (issue 26), which the post's answer leaves out.
    let mut listed = p.supplier.offers().await.expect("offers").offers;
    for l in &mut listed {
        assert_eq!(
            l.reliability.as_ref().map(|r| r.status.as_str()),
            Some("new")
        );
        (l.reliability, l.supplier_reliability) = (None, None);
    }
    assert_eq!(listed, vec![o.clone()]);

    // The stream starts from the snapshot.
    let mut stream = p.buyer.subscribe(SKU, None);
    let first = next_update(&mut stream).await;
    assert_eq!((free_at_20(&first), first.resynced), (8, false));
    assert_eq!(first.published_at_us, None);

    // Both parties' websockets see the trade's private events.
    let mut buyer_ws = p.buyer.connect_ws().await.expect("buyer ws");
    assert_eq!(buyer_ws.welcome().role, Some(Role::Buyer));
    assert!(buyer_ws.ping().await.expect("ping") > 0);
    let mut sup_ws = p.supplier.connect_ws().await.expect("supplier ws");
    assert_eq!(
        sup_ws.welcome().account_id.as_deref(),
        Some(p.supplier.me().await.expect("me").account_id.as_str())
    );

    // The bid fills at 20 and provisions.
    let placed = p.buyer.place_bid(&bid("job-1", SKU, 2)).await.expect("bid");
    assert_eq!(
        (placed.status, placed.filled_gpus),
        (BidStatusDto::Filled, 2)
    );
    let lease_id = placed.fills[0].lease_id.clone();
    assert_eq!(placed.fills[0].price, "20.0000");
    let dropped = next_update(&mut stream).await;
    assert_eq!((free_at_20(&dropped), dropped.resynced), (6, false));
    assert_eq!(dropped.seq, first.seq + 1);
    assert!(dropped.published_at_us.is_some());
    let assigned = until(&mut sup_ws, |m| match m {
        ServerMsg::LeaseAssigned {
            lease_id, launch, ..
        } => Some((lease_id, launch)),
        _ => None,
    })
    .await;
    assert_eq!(assigned.0, lease_id);
    assert_eq!(assigned.1.expect("launch").ssh_keys, vec![KEY.to_string()]);
    let on_node = p.supplier.node_leases(&n.id).await.expect("node leases");
    assert_eq!(on_node.leases[0].id, lease_id);
    assert_eq!(on_node.leases[0].state, LeaseStateDto::Provisioning);

    // Ready: the buyer sees it active with access, over REST and as an event.
    let ready = p
        .supplier
        .report_ready(&lease_id, &access())
        .await
        .expect("ready");
    assert_eq!(ready.state, LeaseStateDto::Active);
    let l = p.buyer.lease(&lease_id).await.expect("lease");
    assert_eq!(l.state, LeaseStateDto::Active);
    let a = l.access.expect("access");
    assert_eq!(
        a.ssh_command.as_deref(),
        Some("ssh -p 2222 root@203.0.113.7")
    );
    assert_eq!(
        a.urls.get(&8888).map(String::as_str),
        Some("https://l1-8888.idc.example")
    );
    let provisioning = until(&mut buyer_ws, |m| match m {
        ServerMsg::LeaseProvisioning {
            lease_id: id,
            node_id,
            ..
        } if id == lease_id => Some(node_id),
        _ => None,
    })
    .await;
    assert_eq!(provisioning, n.id);
    // Port URLs are keyed by number: they must survive the type tag of the event.
    let event_access = until(&mut buyer_ws, |m| match m {
        ServerMsg::LeaseReady {
            lease_id: id,
            access,
            ..
        } if id == lease_id => Some(access),
        _ => None,
    })
    .await;
    assert_eq!(event_access, Some(a));
    let live = p
        .buyer
        .leases(&LeaseQuery::default())
        .await
        .expect("leases");
    assert_eq!(
        live.leases.iter().map(|l| &l.id).collect::<Vec<_>>(),
        vec![&lease_id]
    );
    assert!(p.buyer.bids().await.expect("bids").bids.is_empty());
    assert_eq!(
        p.buyer.balance().await.expect("balance").account_id,
        p.buyer_id
    );
    assert_eq!(
        p.supplier.earnings().await.expect("earnings").live_leases,
        1
    );
    let tb = p
        .admin
        .report("trial-balance", &ReportQuery::default())
        .await
        .expect("report");
    let tb: serde_json::Value = serde_json::from_slice(&tb).expect("report json");
    assert!(tb["checks"].is_array(), "{tb}");

    // The server restarts under the stream: it reconnects and resyncs from a fresh snapshot.
    server.restart().await;
    let after = next_update(&mut stream).await;
    assert!(after.resynced, "{after:?}");
    assert_eq!(free_at_20(&after), 6);
    assert!(after.seq >= dropped.seq, "{after:?}");
    let closed = tokio::time::timeout(WAIT, async {
        loop {
            if let Err(e) = buyer_ws.next().await {
                return e;
            }
        }
    })
    .await
    .expect("closed in time");
    assert_eq!(closed, ClientError::Closed);
    assert_eq!(buyer_ws.close_frame(), Some((1001, "server_shutdown")));
    let l = p.buyer.lease(&lease_id).await.expect("lease after restart");
    assert_eq!(l.state, LeaseStateDto::Active);

    // A fill after the restart reaches the same stream; the supplier reports it ready over a
    // new websocket.
    let mut sup_ws = p.supplier.connect_ws().await.expect("supplier ws again");
    let placed = p
        .buyer
        .place_bid(&bid("job-2", SKU, 1))
        .await
        .expect("bid 2");
    assert_eq!(placed.filled_gpus, 1);
    let dropped = next_update(&mut stream).await;
    assert_eq!((free_at_20(&dropped), dropped.resynced), (5, false));
    let second = placed.fills[0].lease_id.clone();
    let reported = sup_ws
        .report_ready(&second, &access())
        .await
        .expect("ws ready");
    assert_eq!(
        (reported.id.as_str(), reported.state),
        (second.as_str(), LeaseStateDto::Active)
    );
    let urls = reported.access.expect("access").urls;
    assert_eq!(
        urls.get(&8888).map(String::as_str),
        Some("https://l1-8888.idc.example")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_keep_the_servers_status_and_code() {
    let server = Server::start().await;
    let p = parties(&server).await;
    let anon = Client::new(&server.base(), None).expect("client");

    let e = anon.inventory("NOPE-1G", None).await.unwrap_err();
    assert_eq!(
        (e.status(), e.code()),
        (Some(400), Some("unknown_sku")),
        "{e}"
    );
    assert!(!e.is_retryable());
    let e = p
        .buyer
        .place_bid(&bid("b1", "NOPE-1G", 1))
        .await
        .unwrap_err();
    assert_eq!(
        (e.status(), e.code()),
        (Some(400), Some("unknown_sku")),
        "{e}"
    );
    let e = p.supplier.bids().await.unwrap_err();
    assert_eq!(
        (e.status(), e.code()),
        (Some(403), Some("forbidden")),
        "{e}"
    );
    // An id cannot leave its path segment.
    let e = p.buyer.lease("../../admin/accounts").await.unwrap_err();
    assert_eq!(
        (e.status(), e.code()),
        (Some(404), Some("not_found")),
        "{e}"
    );
    let e = anon.me().await.unwrap_err();
    assert_eq!(
        (e.status(), e.code()),
        (Some(401), Some("unauthorized")),
        "{e}"
    );
    let e = p
        .admin
        .deposit(&p.buyer_id, dec("1.001"), "dep-x")
        .await
        .unwrap_err();
    assert_eq!(
        (e.status(), e.code()),
        (Some(400), Some("invalid_amount")),
        "{e}"
    );

    // The websocket's rejections keep the code and the request id.
    let mut ws = p.buyer.connect_ws().await.expect("ws");
    let e = ws.place_bid(&bid("b2", "NOPE-1G", 1)).await.unwrap_err();
    assert_eq!(e.code(), Some("unknown_sku"), "{e}");
    assert!(matches!(&e, ClientError::Rejected { error } if error.request_id.starts_with('c')));
    assert!(matches!(
        ws.cancel_bid("x").await,
        Err(ClientError::Invalid(_))
    ));
    let upgrade = Client::new(&server.base(), Some("gpux_0000".into()))
        .expect("client")
        .connect_ws()
        .await
        .unwrap_err();
    assert_eq!(
        (upgrade.status(), upgrade.code()),
        (Some(401), Some("unauthorized"))
    );

    // A stream whose subscription cannot succeed yields the error once and ends.
    let mut stream = anon.subscribe("NOPE-1G", None);
    let e = tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("in time")
        .expect("an item")
        .unwrap_err();
    assert_eq!(e.code(), Some("unknown_sku"), "{e}");
    assert!(stream.next().await.is_none());

    // Nothing listens: transport errors are retryable.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let gone = Client::new(&format!("http://127.0.0.1:{port}"), None)
        .expect("client")
        .with_timeout(Duration::from_secs(2));
    let e = gone.catalog().await.unwrap_err();
    assert!(
        matches!(e, ClientError::Transport(_)) && e.is_retryable(),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_other_endpoint_answers_its_wire_type() {
    let server = Server::start().await;
    let p = parties(&server).await;
    let anon = Client::new(&server.base(), None).expect("client");
    anon.health().await.expect("healthz");
    p.admin
        .deposit(&p.buyer_id, dec("500.00"), "dep-1")
        .await
        .expect("deposit");

    // Admin: accounts and keys; a revoked key answers 401 at once.
    let mut names: Vec<String> = p
        .admin
        .accounts()
        .await
        .expect("accounts")
        .accounts
        .into_iter()
        .map(|a| a.name)
        .collect();
    names.sort();
    assert_eq!(names, ["admin", "idc-1", "team-a"]);
    let k = p.admin.create_key(&p.buyer_id).await.expect("key");
    let other = p.admin.with_key(&k.api_key).expect("client");
    assert_eq!(other.me().await.expect("me").key_id, k.key_id);
    let r = p
        .admin
        .revoke_key(&p.buyer_id, &k.key_id)
        .await
        .expect("revoke");
    assert!(r.revoked);
    assert_eq!(other.me().await.unwrap_err().status(), Some(401));

    // Supplier: a node changed, an offer amended.
    let n = p.supplier.register_node(&node("n1")).await.expect("node");
    let listed = p.supplier.nodes().await.expect("nodes").nodes;
    assert_eq!(listed, vec![n.clone()]);
    let update = NodeUpdateRequest {
        nvlink: Some(false),
        draining: Some(false),
        ..NodeUpdateRequest::default()
    };
    let changed = p.supplier.update_node(&n.id, &update).await.expect("patch");
    assert!(!changed.nvlink);
    assert_eq!(p.supplier.node(&n.id).await.expect("node"), changed);
    let o = p.supplier.post_offer(&offer(&n.id)).await.expect("offer");
    let terms = OfferRequest {
        node_id: None,
        spot_price: dec("21"),
        ..offer(&n.id)
    };
    let amended = p.supplier.amend_offer(&o.id, &terms).await.expect("amend");
    assert_eq!(amended.spot_price, "21.0000");
    assert_eq!(p.supplier.offer(&o.id).await.expect("offer"), amended);

    // Public inventory over REST.
    let inv = anon
        .inventory(SKU, Some("cn-east-2"))
        .await
        .expect("inventory");
    assert_eq!(inv.region.as_deref(), Some("cn-east-2"));
    assert_eq!(
        inv.levels
            .iter()
            .map(|l| (l.price.as_str(), l.free_gpus))
            .collect::<Vec<_>>(),
        vec![("21.0000", 8)]
    );
    let all = anon.inventory_all(None).await.expect("inventory");
    let skus = anon.catalog().await.expect("catalog").skus.len();
    assert_eq!(all.snapshots.len(), skus);

    // Buyer: resting bids read and canceled, one by one and all at once.
    let gtc = |coid: &str| BidRequest {
        limit_price: dec("10"),
        time_in_force: TifDto::Gtc,
        ..bid(coid, SKU, 1)
    };
    let resting = p.buyer.place_bid(&gtc("r1")).await.expect("bid");
    assert_eq!(resting.status, BidStatusDto::Resting);
    let id = resting.bid_id.expect("bid id");
    let b = p.buyer.bid(&id).await.expect("bid");
    assert_eq!((b.remaining, b.limit_price.as_str()), (1, "10.0000"));
    assert!(p.buyer.cancel_bid(&id).await.expect("cancel").canceled);
    let id2 = p
        .buyer
        .place_bid(&gtc("r2"))
        .await
        .expect("bid")
        .bid_id
        .expect("id");
    let all = p.buyer.cancel_all_bids().await.expect("cancel all");
    assert_eq!(all.canceled, vec![id2]);

    // A failed delivery: never billed, the node held until resumed, the wipe reported.
    let placed = p.buyer.place_bid(&bid("f1", SKU, 2)).await.expect("bid");
    let failed_id = placed.fills[0].lease_id.clone();
    let failed = p
        .supplier
        .report_failed(&failed_id, "image pull failed: manifest unknown")
        .await
        .expect("failed");
    assert_eq!(
        (failed.end_reason, failed.billed_seconds),
        (Some(EndReasonDto::NotDelivered), 0)
    );
    assert_eq!(
        p.supplier.node(&n.id).await.expect("node").held,
        Some(HoldReasonDto::NotDelivered)
    );
    let resumed = p.supplier.resume_node(&n.id).await.expect("resume");
    assert_eq!(resumed.held, None);
    let wiped = p
        .supplier
        .report_torn_down(&failed_id, "container removed")
        .await
        .expect("torn down");
    let t = wiped.teardown.expect("teardown");
    assert_eq!(
        (t.status, t.method.as_deref()),
        (TeardownStatusDto::TornDown, Some("container removed"))
    );

    // A delivered lease, released and wiped.
    let placed = p.buyer.place_bid(&bid("d1", SKU, 2)).await.expect("bid");
    let lease_id = placed.fills[0].lease_id.clone();
    p.supplier
        .report_ready(&lease_id, &access())
        .await
        .expect("ready");
    let released = p.buyer.release_lease(&lease_id).await.expect("release");
    assert!(released.released);
    let wiping = p
        .supplier
        .leases(&LeaseQuery {
            state: Some("wiping".into()),
            ..LeaseQuery::default()
        })
        .await
        .expect("leases");
    assert_eq!(wiping.leases[0].id, lease_id);
    p.supplier
        .report_torn_down(&lease_id, "container removed")
        .await
        .expect("torn down");
    let ended = p
        .buyer
        .leases(&LeaseQuery {
            state: Some("ended".into()),
            limit: Some(1),
            ..LeaseQuery::default()
        })
        .await
        .expect("leases");
    assert_eq!(ended.leases.len(), 1);
    assert!(ended.next_cursor.is_some());
    let rest = p
        .buyer
        .leases(&LeaseQuery {
            state: Some("ended".into()),
            cursor: ended.next_cursor.clone(),
            ..LeaseQuery::default()
        })
        .await
        .expect("next page");
    let mut ids: Vec<String> = ended
        .leases
        .into_iter()
        .chain(rest.leases)
        .map(|l| l.id)
        .collect();
    ids.sort();
    let mut want = vec![failed_id, lease_id];
    want.sort();
    assert_eq!(ids, want);

    // Node keys.
    let nk = p.supplier.create_node_key("n2").await.expect("node key");
    let keys = p.supplier.node_keys().await.expect("node keys").node_keys;
    assert_eq!(
        keys.iter()
            .map(|k| (
                k.key_id.as_str(),
                k.node_name.as_str(),
                k.node_id.as_deref()
            ))
            .collect::<Vec<_>>(),
        vec![(nk.key_id.as_str(), "n2", None)]
    );
    assert!(
        p.supplier
            .revoke_node_key(&nk.key_id)
            .await
            .expect("revoke")
            .revoked
    );

    // The buyer's own statement, as served.
    let csv = p
        .buyer
        .report(
            "buyer-statements",
            &ReportQuery {
                format: Some("csv".into()),
                ..ReportQuery::default()
            },
        )
        .await
        .expect("statement");
    assert!(String::from_utf8(csv).expect("utf-8").contains("period"));

    let w = p.supplier.withdraw_offer(&o.id).await.expect("withdraw");
    assert_eq!((w.offer_id.as_str(), w.withdrawn), (o.id.as_str(), true));
    assert_eq!(
        p.supplier.earnings().await.expect("earnings").live_leases,
        0
    );
}

/// One scripted connection of [`fake_feed`]: the messages sent after the `subscribe` (the
/// string `"$rid"` stands for its request id).
type Script = Vec<serde_json::Value>;

/// Selects the subprotocol the client asked for (the signature is tungstenite's `Callback`).
#[allow(clippy::result_large_err)]
fn select_protocol(
    _: &tokio_tungstenite::tungstenite::handshake::server::Request,
    mut r: tokio_tungstenite::tungstenite::handshake::server::Response,
) -> Result<
    tokio_tungstenite::tungstenite::handshake::server::Response,
    tokio_tungstenite::tungstenite::handshake::server::ErrorResponse,
> {
    r.headers_mut()
        .insert("Sec-WebSocket-Protocol", "gpux.v1".parse().expect("header"));
    Ok(r)
}

/// A websocket server that speaks just enough of the protocol to misbehave on purpose:
/// welcome, then per connection the next script; connections stay open. Answers its base URL
/// and the number of connections accepted so far.
async fn fake_feed(
    scripts: Vec<Script>,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let accepted = count.clone();
    tokio::spawn(async move {
        let mut open = Vec::new();
        for script in scripts {
            let (tcp, _) = listener.accept().await.expect("accept");
            accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut ws = tokio_tungstenite::accept_hdr_async(tcp, select_protocol)
                .await
                .expect("handshake");
            let welcome = serde_json::json!({"type": "welcome", "account_id": null,
                "role": null, "node_name": null, "node_id": null, "cancel_on_disconnect": false,
                "limits": {"max_frame_bytes": 65536, "max_inflight": 64, "outbox": 512,
                           "max_subscriptions": 64}});
            ws.send(Message::Text(welcome.to_string().into()))
                .await
                .expect("welcome");
            let sub = loop {
                if let Message::Text(t) = ws.next().await.expect("a frame").expect("ok") {
                    break serde_json::from_str::<serde_json::Value>(t.as_str()).expect("json");
                }
            };
            assert_eq!(sub["type"], "subscribe", "{sub}");
            let rid = sub["request_id"].as_str().expect("request id").to_string();
            for m in script {
                let text = m.to_string().replace("$rid", &rid);
                ws.send(Message::Text(text.into())).await.expect("send");
            }
            open.push(ws);
        }
        // Hold the last connections open until the test ends.
        std::future::pending::<()>().await;
    });
    (base, count)
}

fn lvl(free: u32) -> serde_json::Value {
    serde_json::json!([{"region": "cn-east-2", "kind": "spot", "price": "20.0000",
                        "free_gpus": free, "max_single_node": free}])
}

fn snap(seq: u64, free: u32, resync: bool) -> serde_json::Value {
    serde_json::json!({"type": "inventory_snapshot", "sku": SKU, "region": null, "seq": seq,
                       "commit_seq": seq, "resync": resync, "levels": lvl(free)})
}

fn delta(first: u64, last: u64, free: u32) -> serde_json::Value {
    serde_json::json!({"type": "inventory_delta", "sku": SKU, "region": null,
                       "first_seq": first, "last_seq": last, "commit_seq": last,
                       "committed_at_ms": 1, "published_at_us": 2, "levels": lvl(free)})
}

fn subscribed() -> serde_json::Value {
    serde_json::json!({"type": "subscribed", "request_id": "$rid", "sku": SKU, "region": null})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_starts_over_after_a_gap_and_takes_a_server_resync_in_place() {
    let (base, connections) = fake_feed(vec![
        // A delta, then one that skips seq 12: never applied.
        vec![
            snap(10, 8, false),
            subscribed(),
            delta(11, 11, 6),
            delta(13, 13, 1),
        ],
        // The fresh connection; later the server's own resync on it.
        vec![
            snap(13, 4, false),
            subscribed(),
            delta(14, 14, 3),
            snap(20, 2, true),
            delta(21, 21, 1),
        ],
    ])
    .await;
    let client = Client::new(&base, None).expect("client");
    let mut stream = client.subscribe(SKU, None);
    let mut seen = Vec::new();
    for _ in 0..6 {
        let u = next_update(&mut stream).await;
        seen.push((u.seq, free_at_20(&u), u.resynced));
    }
    assert_eq!(
        seen,
        vec![
            (10, 8, false),
            (11, 6, false),
            (13, 4, true),
            (14, 3, false),
            (20, 2, true),
            (21, 1, false),
        ]
    );
    assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 2);
}

/// A private CA and a server certificate it issued for `localhost` only (not `127.0.0.1`), as
/// PEM files in `dir`: (CA certificate, server chain leaf first, server key).
fn private_ca(dir: &std::path::Path) -> (PathBuf, PathBuf, PathBuf) {
    let ca_key = rcgen::KeyPair::generate().expect("CA key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "gpux test private CA");
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("CA certificate");
    let key = rcgen::KeyPair::generate().expect("server key");
    let leaf = rcgen::CertificateParams::new(vec!["localhost".to_string()])
        .expect("server params")
        .signed_by(&key, &*ca)
        .expect("server certificate");
    let files = (
        dir.join("ca.pem"),
        dir.join("server-chain.pem"),
        dir.join("server-key.pem"),
    );
    std::fs::write(&files.0, ca.pem()).expect("write CA");
    std::fs::write(&files.1, format!("{}{}", leaf.pem(), ca.pem())).expect("write chain");
    std::fs::write(&files.2, key.serialize_pem()).expect("write key");
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_and_wss_with_a_private_ca_and_refusals_that_name_the_cause() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key) = private_ca(dir.path());
    let running = start(
        journal(dir.path()).await,
        AppOptions {
            tick_ms: 0,
            workers: 2,
            tls: Some(TlsFiles { cert, key }),
            ..AppOptions::default()
        },
    )
    .await
    .expect("start the TLS server");
    let (_, admin_key, _) =
        gateway::api::admin::create_account_with_key(&running.api, None, "admin", Role::Admin)
            .await
            .expect("admin account");
    let port = running.addr.port();
    let base = format!("https://localhost:{port}");
    let with_ca = ClientOptions::default().with_ca_cert(&ca);

    // REST over HTTPS, trusting the CA's file.
    let admin =
        Client::new_with_options(&base, Some(admin_key), &with_ca).expect("client with the CA");
    let me = admin.me().await.expect("me over HTTPS");
    assert_eq!(me.role, Role::Admin);
    let supplier = admin
        .create_account(&CreateAccountRequest {
            name: "idc-tls".into(),
            role: Role::Supplier,
        })
        .await
        .expect("a POST over HTTPS");
    let supplier = admin.with_key(&supplier.api_key).expect("supplier key");
    let n = supplier.register_node(&node("tls-1")).await.expect("node");
    supplier.heartbeat(&n.id, 8).await.expect("heartbeat");
    supplier.post_offer(&offer(&n.id)).await.expect("offer");

    // The websocket over WSS: the welcome names the key's account; an inventory stream's
    // snapshot has the offer.
    let mut ws = admin.connect_ws().await.expect("websocket over WSS");
    assert_eq!(
        (ws.welcome().account_id.as_deref(), ws.welcome().role),
        (Some(me.account_id.as_str()), Some(Role::Admin))
    );
    assert!(ws.ping().await.is_ok());
    let mut stream = admin.subscribe(SKU, None);
    let first = next_update(&mut stream).await;
    assert_eq!((first.sku.as_str(), free_at_20(&first)), (SKU, 8));
    assert!(!first.resynced);

    // A list may mix schemes: nothing listens on the first (plain) one, the client goes on.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let mixed =
        Client::new_with_options(&format!("http://127.0.0.1:{dead},{base}"), None, &with_ca)
            .expect("mixed client");
    let catalog = mixed.catalog().await.expect("catalog over the second base");
    assert!(catalog.skus.iter().any(|s| s.sku == SKU));
    assert_eq!(mixed.base_url(), format!("{base}/"));

    // Without the CA: not trusted, said plainly, for REST and the websocket alike.
    let untrusted = Client::new(&base, None).expect("client");
    for e in [
        untrusted.catalog().await.unwrap_err(),
        untrusted.connect_ws().await.unwrap_err(),
    ] {
        let m = e.to_string();
        assert!(matches!(e, ClientError::Transport(_)), "{m}");
        assert!(
            m.contains(&format!(
                "TLS with localhost:{port}: certificate not trusted"
            )),
            "{m}"
        );
        assert!(
            m.contains("UnknownIssuer") && m.contains("--ca-cert FILE"),
            "{m}"
        );
    }
    // With the CA but by an address the certificate does not name.
    let by_ip = Client::new_with_options(&format!("https://127.0.0.1:{port}"), None, &with_ca)
        .expect("client");
    let m = by_ip.catalog().await.unwrap_err().to_string();
    assert!(
        m.contains("certificate not valid for this host name"),
        "{m}"
    );
    // Plain HTTP on the TLS port gets no answer from it.
    let plain = Client::new(&format!("http://localhost:{port}"), None)
        .expect("client")
        .with_timeout(Duration::from_secs(5));
    assert!(plain.catalog().await.is_err());

    drop(stream);
    ws.close().await.expect("close the websocket");
    running.stop().await.expect("stop");
}
