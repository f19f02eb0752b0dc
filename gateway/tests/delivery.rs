//! Lease delivery over the public API (issue 15; docs/market-rules.md §11): a bid with a launch
//! spec, the supplier's node told of its assignment (REST and websocket), ready with access
//! details and billing from then, release, teardown with a deletion record, non-delivery
//! failing over at no charge, deadlines, held nodes, lease history, restarts, bad input and the
//! two-tenant matrix of the new endpoints. The app runs on port 0 with delivery on.

use crate::support;
use crate::support::api::{Backend, Client, TestApp, delivery_opts, listed_node, ws_connect};
use serde_json::{Value, json};

const KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM7t3CQcihrH/4tM1K41mGfGrkuwsCkbk7Z2fjczQzrv buyer@laptop";

fn launch() -> Value {
    json!({"ssh_keys": [KEY], "image": "nvcr.io/nvidia/pytorch:24.05-py3",
           "command": ["python", "train.py"], "env": {"EPOCHS": "3"}, "ports": [8888],
           "disk_gb": 100})
}

fn bid(coid: &str, gpus: u32, limit: &str, placement: &str) -> Value {
    json!({"client_order_id": coid, "sku": "H100-80G", "gpus": gpus, "limit_price": limit,
           "kind": "spot", "time_in_force": "ioc", "duration_s": 3600, "placement": placement,
           "launch": launch()})
}

fn access() -> Value {
    json!({"ssh_host": "203.0.113.7", "ssh_port": 2222, "ssh_user": "root",
           "urls": {"8888": "https://l1-8888.idc.example"}})
}

struct Market {
    app: TestApp,
    sup: Client,
    buyer: Client,
    buyer_id: String,
    n1: String,
    n2: String,
}

/// A supplier with two H100 nodes (n1 at 20, n2 at 21 CNY/GPU-hour) and a funded buyer.
async fn market(opts: gateway::app::AppOptions) -> Market {
    let app = TestApp::start(Backend::Embedded, opts).await;
    let (_, sup_key) = app.account("idc-1", "supplier").await;
    let (buyer_id, buyer_key) = app.account("team-a", "buyer").await;
    app.deposit(&buyer_id, "1000.00").await;
    let sup = app.client(Some(&sup_key));
    let buyer = app.client(Some(&buyer_key));
    let (n1, _) = listed_node(&sup, "n1", "H100-80G", 8, "cn-east-2", "20").await;
    let (n2, _) = listed_node(&sup, "n2", "H100-80G", 8, "cn-east-2", "21").await;
    Market {
        app,
        sup,
        buyer,
        buyer_id,
        n1,
        n2,
    }
}

async fn free_gpus(app: &TestApp) -> Vec<(String, u64)> {
    let (s, v, _) = app.client(None).get("/v1/inventory?sku=H100-80G").await;
    assert_eq!(s, 200, "{v}");
    v["levels"]
        .as_array()
        .expect("levels")
        .iter()
        .map(|l| {
            (
                l["price"].as_str().expect("price").to_string(),
                l["free_gpus"].as_u64().expect("free"),
            )
        })
        .collect()
}

async fn place(m: &Market, body: Value) -> Value {
    let (s, v, _) = m.buyer.post("/v1/bids", body, None).await;
    assert_eq!(s, 201, "{v}");
    v
}

async fn lease(c: &Client, id: &str) -> Value {
    let (s, v, _) = c.get(&format!("/v1/leases/{id}")).await;
    assert_eq!(s, 200, "{v}");
    v
}

/// A supplier's report on a lease: `what` is `ready`, `failed` or `torn-down`.
async fn report(c: &Client, lease: &str, what: &str, body: Value) -> support::api::Answer {
    c.post(&format!("/v1/leases/{lease}/{what}"), body, None)
        .await
}

async fn tick(app: &TestApp) {
    app.api()
        .submit(gateway::market::Op::Tick)
        .await
        .expect("tick");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_provisions_runs_from_ready_and_keeps_its_deletion_record() {
    let m = market(delivery_opts()).await;
    let v = place(&m, bid("job-1", 2, "25", "single_node")).await;
    assert_eq!(v["status"], "filled", "{v}");
    let id = v["fills"][0]["lease_id"]
        .as_str()
        .expect("lease")
        .to_string();
    assert_eq!(v["fills"][0]["node_id"], m.n1.as_str());

    // Provisioning: GPUs claimed (not listed), not billed, the supplier sees the launch spec.
    let l = lease(&m.buyer, &id).await;
    assert_eq!(l["state"], "provisioning", "{l}");
    assert!(l["provision_deadline_ms"].as_i64().expect("deadline") > 0);
    assert_eq!(l["launch"]["ssh_keys"][0], KEY);
    assert_eq!(l["ready_ms"], Value::Null);
    assert_eq!(
        free_gpus(&m.app).await,
        vec![("20.0000".into(), 6), ("21.0000".into(), 8)]
    );
    let (s, hb, _) = m
        .sup
        .post(
            &format!("/v1/nodes/{}/heartbeat", m.n1),
            json!({"healthy_gpus": 8}),
            None,
        )
        .await;
    assert_eq!(s, 200, "{hb}");
    let version = hb["leases_version"].as_u64().expect("version");
    assert!(version >= 2, "{hb}");
    let (s, nl, _) = m.sup.get(&format!("/v1/nodes/{}/leases", m.n1)).await;
    assert_eq!(s, 200, "{nl}");
    assert_eq!(nl["leases_version"], version);
    assert_eq!(nl["leases"][0]["id"], id.as_str());
    assert_eq!(nl["leases"][0]["launch"]["env"]["EPOCHS"], "3");
    assert_eq!(nl["leases"][0]["gpu_indexes"], json!([0, 1]));

    // Ready: running, billed from now, the buyer gets the SSH command.
    let (s, r, _) = report(&m.sup, &id, "ready", json!({"access": access()})).await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["state"], "active");
    let ready_ms = r["ready_ms"].as_i64().expect("ready");
    let l = lease(&m.buyer, &id).await;
    assert_eq!(l["access"]["ssh_command"], "ssh -p 2222 root@203.0.113.7");
    assert_eq!(l["access"]["urls"]["8888"], "https://l1-8888.idc.example");
    // A repeated ready keeps the ready time (billing start); with other access details it
    // corrects them (a supplier that sent the wrong port).
    let (s, again, _) = report(&m.sup, &id, "ready", json!({"access": access()})).await;
    assert_eq!(s, 200, "{again}");
    assert_eq!(again["ready_ms"], ready_ms);
    let mut fixed = access();
    fixed["ssh_port"] = json!(2200);
    let (s, again, _) = report(&m.sup, &id, "ready", json!({"access": fixed})).await;
    assert_eq!(s, 200, "{again}");
    assert_eq!(again["ready_ms"], ready_ms);
    assert_eq!(
        again["access"]["ssh_command"],
        "ssh -p 2200 root@203.0.113.7"
    );
    fixed["ssh_port"] = json!(2222);
    let (s, _, _) = report(&m.sup, &id, "ready", json!({"access": fixed})).await;
    assert_eq!(s, 200);

    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let (s, rel, _) = m
        .buyer
        .post(&format!("/v1/leases/{id}/release"), json!({}), None)
        .await;
    assert_eq!(s, 200, "{rel}");
    let released_ms = rel["at_ms"].as_i64().expect("at");
    // Ended: billed ready → release only, per started second; the GPUs wipe, unlisted.
    let l = lease(&m.buyer, &id).await;
    assert_eq!(l["state"], "ended", "{l}");
    assert_eq!(l["end_reason"], "released");
    let billed = (released_ms - ready_ms + 999) / 1000;
    assert_eq!(l["billed_seconds"], billed, "{l}");
    let expected = rust_decimal::Decimal::from(billed * 2 * 20) / rust_decimal::Decimal::from(3600);
    assert_eq!(
        l["charged"].as_str().expect("charged"),
        expected.round_dp(2).to_string()
    );
    assert_eq!(l["teardown"]["status"], "wiping");
    assert_eq!(
        free_gpus(&m.app).await,
        vec![("20.0000".into(), 6), ("21.0000".into(), 8)]
    );
    let (s, nl, _) = m.sup.get(&format!("/v1/nodes/{}/leases", m.n1)).await;
    assert_eq!(s, 200);
    assert_eq!(nl["leases"], json!([]));
    assert_eq!(nl["wiping"][0]["id"], id.as_str());
    let (s, w, _) = m.sup.get("/v1/leases?state=wiping").await;
    assert_eq!(s, 200, "{w}");
    assert_eq!(w["leases"][0]["id"], id.as_str());

    // Torn down: the GPUs come back, the buyer keeps the record; a repeat answers the same.
    let wipe = json!({"method": "container removed; nvme format --ses=1"});
    let (s, t, _) = report(&m.sup, &id, "torn-down", wipe.clone()).await;
    assert_eq!(s, 200, "{t}");
    assert_eq!(
        free_gpus(&m.app).await,
        vec![("20.0000".into(), 8), ("21.0000".into(), 8)]
    );
    let (s, t2, _) = report(&m.sup, &id, "torn-down", wipe).await;
    assert_eq!(s, 200, "{t2}");
    let l = lease(&m.buyer, &id).await;
    assert_eq!(l["teardown"]["status"], "torn_down");
    assert_eq!(
        l["teardown"]["method"],
        "container removed; nvme format --ses=1"
    );

    // History: live by default, ended on request, for both parties.
    let (s, live, _) = m.buyer.get("/v1/leases").await;
    assert_eq!(s, 200);
    assert_eq!(live["leases"], json!([]));
    let (s, ended, _) = m.buyer.get("/v1/leases?state=ended").await;
    assert_eq!(s, 200);
    assert_eq!(ended["leases"][0]["id"], id.as_str());
    let (s, w, _) = m.sup.get("/v1/leases?state=wiping").await;
    assert_eq!((s, w["leases"].clone()), (200, json!([])));
    let (s, ended, _) = m.sup.get("/v1/leases?state=all&limit=1").await;
    assert_eq!(s, 200);
    assert_eq!(ended["leases"][0]["id"], id.as_str());
    assert_eq!(ended["next_cursor"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_delivery_costs_nothing_fails_over_and_holds_the_node() {
    let mut m = market(delivery_opts()).await;
    let v = place(&m, bid("job-1", 4, "25", "single_node")).await;
    let id = v["fills"][0]["lease_id"]
        .as_str()
        .expect("lease")
        .to_string();
    let (s, f, _) = report(
        &m.sup,
        &id,
        "failed",
        json!({"reason": "image pull failed: manifest unknown"}),
    )
    .await;
    assert_eq!(s, 200, "{f}");
    assert_eq!(f["end_reason"], "not_delivered");
    assert_eq!(f["failure_reason"], "image pull failed: manifest unknown");
    assert_eq!(f["billed_seconds"], 0);
    let to = f["migrated_to"][0]
        .as_str()
        .expect("replacement")
        .to_string();
    let r = lease(&m.buyer, &to).await;
    assert_eq!(r["node_id"], m.n2.as_str(), "{r}");
    assert_eq!(r["state"], "provisioning");
    assert_eq!(r["migrated_from"], id.as_str());
    // The job restarts elsewhere without the buyer acting: same launch spec.
    assert_eq!(r["launch"]["command"], json!(["python", "train.py"]));
    // n1 is held: none of its GPUs is listed.
    assert_eq!(free_gpus(&m.app).await, vec![("21.0000".into(), 4)]);
    let (s, n, _) = m.sup.get(&format!("/v1/nodes/{}", m.n1)).await;
    assert_eq!(s, 200);
    assert_eq!(n["held"], "not_delivered");
    assert_eq!(n["wiping_gpus"], 4);
    // Ready or failed again on the ended lease: a conflict, nothing changes.
    for (path, body) in [
        ("ready", json!({"access": access()})),
        ("failed", json!({"reason": "again"})),
    ] {
        let (s, e, _) = m
            .sup
            .post(&format!("/v1/leases/{id}/{path}"), body, None)
            .await;
        assert_eq!(s, 409, "{path}: {e}");
        assert_eq!(e["code"], "lease_ended");
    }
    // Resume: listed again once the wipe is reported.
    let (s, n, _) = m
        .sup
        .post(&format!("/v1/nodes/{}/resume", m.n1), json!({}), None)
        .await;
    assert_eq!(s, 200, "{n}");
    assert_eq!(n["held"], Value::Null);
    assert_eq!(
        free_gpus(&m.app).await,
        vec![("20.0000".into(), 4), ("21.0000".into(), 4)]
    );
    let (s, _, _) = report(
        &m.sup,
        &id,
        "torn-down",
        json!({"method": "container removed"}),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(
        free_gpus(&m.app).await,
        vec![("20.0000".into(), 8), ("21.0000".into(), 4)]
    );
    // The buyer paid nothing for the failed lease; its statement says so after a restart.
    m.app.restart().await;
    let buyer = m.app.client(m.buyer.key.as_deref());
    let l = lease(&buyer, &id).await;
    assert_eq!(l["end_reason"], "not_delivered");
    assert_eq!(l["teardown"]["status"], "torn_down");
    let (s, b, _) = buyer.get("/v1/balance").await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["balance"], "1000.00", "{b}");
    let _ = &m.buyer_id;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlines_fail_a_silent_node_and_hold_a_node_that_never_wipes() {
    let mut opts = delivery_opts();
    opts.tick_ms = 100;
    opts.market.engine.teardown_timeout_ms = 1_500;
    let m = market(opts).await;
    // n1 gets a 1 s provisioning deadline.
    let (s, o, _) = m.sup.get(&format!("/v1/nodes/{}", m.n1)).await;
    assert_eq!(s, 200);
    let offer = o["offer_id"].as_str().expect("offer").to_string();
    let (s, v, _) = m
        .sup
        .put(
            &format!("/v1/offers/{offer}"),
            json!({"gpus": 8, "spot_price": "20", "min_lease_s": 1, "max_lease_s": 86400,
                   "provision_s": 1}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v["provision_s"], 1,
        "the offer shows its provisioning deadline"
    );
    let v = place(&m, bid("job-1", 8, "25", "single_node")).await;
    let id = v["fills"][0]["lease_id"]
        .as_str()
        .expect("lease")
        .to_string();
    tokio::time::sleep(std::time::Duration::from_millis(1_600)).await;
    tick(&m.app).await;
    let l = lease(&m.buyer, &id).await;
    assert_eq!(l["end_reason"], "not_delivered", "{l}");
    assert_eq!(l["billed_seconds"], 0);
    let to = l["migrated_to"][0]
        .as_str()
        .expect("replacement")
        .to_string();
    // The replacement on n2 is delivered; n1 never reports its wipe: overdue, still held.
    let (s, _, _) = report(&m.sup, &to, "ready", json!({"access": access()})).await;
    assert_eq!(s, 200);
    tokio::time::sleep(std::time::Duration::from_millis(1_700)).await;
    tick(&m.app).await;
    let l = lease(&m.buyer, &id).await;
    assert_eq!(l["teardown"]["status"], "overdue", "{l}");
    let (s, n, _) = m.sup.get(&format!("/v1/nodes/{}", m.n1)).await;
    assert_eq!(s, 200);
    assert_eq!(n["wiping_gpus"], 0);
    assert_eq!(n["held"], "not_delivered");
    assert_eq!(free_gpus(&m.app).await, vec![]);
    // Issue 25: the wipe reported late is recorded (it answered 404): the buyer keeps the
    // deletion record, marked overdue, and the supplier resumes the node.
    let other = m.app.account("idc-2", "supplier").await.1;
    let (s, e, _) = report(
        &m.app.client(Some(&other)),
        &id,
        "torn-down",
        json!({"method": "late"}),
    )
    .await;
    assert_eq!(s, 404, "another supplier's report: {e}");
    let (s, l, _) = report(&m.sup, &id, "torn-down", json!({"method": "nvme format"})).await;
    assert_eq!(s, 200, "{l}");
    assert_eq!(l["teardown"]["method"], "nvme format", "{l}");
    assert!(l["teardown"]["torn_down_ms"].as_i64().is_some(), "{l}");
    assert!(
        l["teardown"]["torn_down_ms"].as_i64() > l["teardown"]["deadline_ms"].as_i64(),
        "{l}"
    );
    let l = lease(&m.buyer, &id).await;
    assert_eq!(l["teardown"]["method"], "nvme format", "{l}");
    // The lease is gone from the engine now: a report on it says it ended (it answered 404).
    let (s, e, _) = report(&m.sup, &id, "failed", json!({"reason": "retry"})).await;
    assert_eq!((s, e["code"].as_str()), (409, Some("lease_ended")), "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("not_delivered"),
        "{e}"
    );
    let (s, _, _) = m
        .sup
        .post(&format!("/v1/nodes/{}/resume", m.n1), json!({}), None)
        .await;
    assert_eq!(s, 200);
    assert_eq!(free_gpus(&m.app).await, vec![("20.0000".into(), 8)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_delivery_input_is_refused_by_field_and_changes_nothing() {
    let m = market(delivery_opts()).await;
    let mut no_launch = bid("x-1", 1, "25", "single_node");
    no_launch.as_object_mut().expect("obj").remove("launch");
    let (s, e, _) = m.buyer.post("/v1/bids", no_launch, None).await;
    assert_eq!(
        (s, e["code"].as_str(), e["field"].as_str()),
        (400, Some("launch_required"), Some("launch")),
        "{e}"
    );
    for (launch, field) in [
        (json!({"ssh_keys": []}), "launch.ssh_keys"),
        (json!({"ssh_keys": ["not a key"]}), "launch.ssh_keys"),
        (json!({"ssh_keys": [KEY], "ports": [0]}), "launch.ports"),
        (
            json!({"ssh_keys": [KEY], "env": {"A B": "1"}}),
            "launch.env",
        ),
        (
            json!({"ssh_keys": [KEY], "disk_gb": 16385}),
            "launch.disk_gb",
        ),
        (
            json!({"ssh_keys": [KEY], "image": "bad image"}),
            "launch.image",
        ),
    ] {
        let mut b = bid("x-2", 1, "25", "single_node");
        b["launch"] = launch.clone();
        let (s, e, _) = m.buyer.post("/v1/bids", b, None).await;
        assert_eq!(s, 400, "{launch}: {e}");
        assert_eq!(e["code"], "invalid_launch");
        assert_eq!(e["field"], field, "{launch}: {e}");
    }
    let mut unknown = bid("x-3", 1, "25", "single_node");
    unknown["launch"]["password"] = json!("hunter2");
    let (s, e, _) = m.buyer.post("/v1/bids", unknown, None).await;
    assert_eq!((s, e["code"].as_str()), (400, Some("bad_json")), "{e}");
    // Nothing traded.
    assert_eq!(
        free_gpus(&m.app).await,
        vec![("20.0000".into(), 8), ("21.0000".into(), 8)]
    );
    let v = place(&m, bid("ok-1", 1, "25", "single_node")).await;
    let id = v["fills"][0]["lease_id"]
        .as_str()
        .expect("lease")
        .to_string();
    for (body, field) in [
        (json!({"access": {}}), "access"),
        (
            json!({"access": {"ssh_host": "h", "ssh_port": 70000}}),
            "access.ssh_port",
        ),
        (json!({"access": {"ssh_host": "a b"}}), "access.ssh_host"),
        (
            json!({"access": {"urls": {"8888": "ftp://x"}}}),
            "access.urls",
        ),
    ] {
        let (s, e, _) = report(&m.sup, &id, "ready", body.clone()).await;
        assert_eq!((s, e["field"].as_str()), (400, Some(field)), "{body}: {e}");
    }
    let (s, e, _) = report(&m.sup, &id, "failed", json!({"reason": ""})).await;
    assert_eq!(
        (s, e["code"].as_str()),
        (400, Some("invalid_report")),
        "{e}"
    );
    let (s, e, _) = report(&m.sup, &id, "torn-down", json!({"method": "wiped"})).await;
    assert_eq!(
        (s, e["code"].as_str()),
        (409, Some("lease_not_ended")),
        "{e}"
    );
    let (s, _, _) = report(&m.sup, &id, "ready", json!({"access": access()})).await;
    assert_eq!(s, 200);
    let (s, e, _) = report(&m.sup, &id, "failed", json!({"reason": "late"})).await;
    assert_eq!(
        (s, e["code"].as_str()),
        (409, Some("not_provisioning")),
        "{e}"
    );
    assert_eq!(lease(&m.buyer, &id).await["state"], "active");
    let (s, e, _) = m.buyer.get("/v1/leases?limit=0").await;
    assert_eq!((s, e["field"].as_str()), (400, Some("limit")), "{e}");
    let (s, e, _) = m.buyer.get("/v1/leases?state=bogus").await;
    assert_eq!(s, 400, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenant_sees_no_lease_and_no_node_of_delivery() {
    let m = market(delivery_opts()).await;
    let (_, other_sup_key) = m.app.account("idc-2", "supplier").await;
    let (other_buyer_id, other_buyer_key) = m.app.account("team-b", "buyer").await;
    m.app.deposit(&other_buyer_id, "100.00").await;
    let other_sup = m.app.client(Some(&other_sup_key));
    let other_buyer = m.app.client(Some(&other_buyer_key));
    let v = place(&m, bid("job-1", 1, "25", "single_node")).await;
    let id = v["fills"][0]["lease_id"]
        .as_str()
        .expect("lease")
        .to_string();
    let supplier_posts = [
        (
            format!("/v1/leases/{id}/ready"),
            json!({"access": access()}),
        ),
        (format!("/v1/leases/{id}/failed"), json!({"reason": "x"})),
        (format!("/v1/leases/{id}/torn-down"), json!({"method": "x"})),
        (format!("/v1/nodes/{}/resume", m.n1), json!({})),
    ];
    for (path, body) in &supplier_posts {
        let (s, e, _) = other_sup.post(path, body.clone(), None).await;
        assert_eq!(s, 404, "other supplier {path}: {e}");
        let (s, e, _) = m.buyer.post(path, body.clone(), None).await;
        assert_eq!(s, 403, "buyer {path}: {e}");
    }
    let (s, _, _) = other_sup.get(&format!("/v1/nodes/{}/leases", m.n1)).await;
    assert_eq!(s, 404);
    let (s, _, _) = m.buyer.get(&format!("/v1/nodes/{}/leases", m.n1)).await;
    assert_eq!(s, 403);
    for c in [&other_sup, &other_buyer] {
        let (s, _, _) = c.get(&format!("/v1/leases/{id}")).await;
        assert_eq!(s, 404);
        let (s, l, _) = c.get("/v1/leases?state=all").await;
        assert_eq!(s, 200);
        assert_eq!(l["leases"], json!([]));
    }
    // The lease's own supplier reads it (it runs the job), with the launch spec.
    assert_eq!(lease(&m.sup, &id).await["launch"]["ssh_keys"][0], KEY);
    // Still provisioning: nothing another tenant sent changed it.
    assert_eq!(lease(&m.buyer, &id).await["state"], "provisioning");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_supplier_socket_gets_assignments_and_the_buyer_socket_gets_access() {
    let m = market(delivery_opts()).await;
    let url = m.app.ws_url();
    let mut sup_ws = ws_connect(&url, m.sup.key.as_deref(), None)
        .await
        .expect("supplier ws");
    let mut buyer_ws = ws_connect(&url, m.buyer.key.as_deref(), None)
        .await
        .expect("buyer ws");
    let v = place(&m, bid("job-1", 2, "25", "single_node")).await;
    let id = v["fills"][0]["lease_id"]
        .as_str()
        .expect("lease")
        .to_string();
    let (a, _) = sup_ws.until("lease_assigned").await;
    assert_eq!(a["lease_id"], id.as_str());
    assert_eq!(a["node_id"], m.n1.as_str());
    assert_eq!(a["launch"]["ports"], json!([8888]));
    let (p, _) = buyer_ws.until("lease_provisioning").await;
    assert_eq!(p["lease_id"], id.as_str());
    // Only a supplier reports, over the websocket too.
    buyer_ws
        .send(
            json!({"type": "report_ready", "request_id": "b1", "lease_id": id,
                     "access": access()}),
        )
        .await;
    let (e, _) = buyer_ws.until("rejected").await;
    assert_eq!(
        (e["request_id"].as_str(), e["code"].as_str()),
        (Some("b1"), Some("forbidden")),
        "{e}"
    );
    sup_ws
        .send(
            json!({"type": "report_ready", "request_id": "r1", "lease_id": id,
                     "access": access()}),
        )
        .await;
    let (ack, _) = sup_ws.until("lease_reported").await;
    assert_eq!(ack["request_id"], "r1");
    assert_eq!(ack["lease"]["state"], "active");
    let (r, _) = buyer_ws.until("lease_ready").await;
    assert_eq!(r["access"]["ssh_command"], "ssh -p 2222 root@203.0.113.7");
    // Issue 25: corrected access details reach the buyer as an event; the same details again
    // change nothing and say nothing.
    let (s, _, _) = report(&m.sup, &id, "ready", json!({"access": access()})).await;
    assert_eq!(s, 200);
    let mut fixed = access();
    fixed["ssh_port"] = json!(2200);
    let (s, _, _) = report(&m.sup, &id, "ready", json!({ "access": fixed })).await;
    assert_eq!(s, 200);
    let (c, skipped) = buyer_ws.until("lease_access_changed").await;
    assert_eq!(c["lease_id"], id.as_str());
    assert_eq!(
        c["access"]["ssh_command"], "ssh -p 2200 root@203.0.113.7",
        "{c}"
    );
    assert!(
        skipped.iter().all(|m| m["type"] != "lease_access_changed"),
        "the unchanged repeat sent nothing: {skipped:?}"
    );
    let (s, _, _) = m
        .buyer
        .post(&format!("/v1/leases/{id}/release"), json!({}), None)
        .await;
    assert_eq!(s, 200);
    let (e, _) = sup_ws.until("lease_ended").await;
    assert_eq!(e["reason"], "released");
    let (w, _) = sup_ws.until("lease_wiping").await;
    assert_eq!(w["gpu_indexes"], json!([0, 1]));
    let (s, _, _) = report(&m.sup, &id, "torn-down", json!({"method": "wiped"})).await;
    assert_eq!(s, 200);
    let (t, _) = buyer_ws.until("lease_torn_down").await;
    assert_eq!(t["method"], "wiped");
    let (t, _) = sup_ws.until("lease_torn_down").await;
    assert_eq!(t["method"], "wiped");
    let (s, cat, _) = m.app.client(None).get("/v1/catalog").await;
    assert_eq!((s, cat["delivery"].as_bool()), (200, Some(true)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_failure_credit_counts_until_the_replacement_is_ready() {
    let m = market(delivery_opts()).await;
    let v = place(&m, bid("job-1", 2, "25", "single_node")).await;
    let id = v["fills"][0]["lease_id"]
        .as_str()
        .expect("lease")
        .to_string();
    let (s, _, _) = report(&m.sup, &id, "ready", json!({"access": access()})).await;
    assert_eq!(s, 200);
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    // n1's GPUs fail: the lease ends node_failure and fails over to n2, provisioning there.
    let (s, hb, _) = m
        .sup
        .post(
            &format!("/v1/nodes/{}/heartbeat", m.n1),
            json!({"healthy_gpus": 0}),
            None,
        )
        .await;
    assert_eq!(s, 200, "{hb}");
    let l = lease(&m.buyer, &id).await;
    assert_eq!(l["end_reason"], "node_failure", "{l}");
    let to = l["migrated_to"][0]
        .as_str()
        .expect("replacement")
        .to_string();
    // No credit while the replacement provisions: the outage is not over.
    assert_eq!(l["sla_credit"], "0.00", "{l}");
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let (s, _, _) = report(&m.sup, &to, "ready", json!({"access": access()})).await;
    assert_eq!(s, 200);
    // Ready: the credit is posted, capped at what the failed lease cost (10× a >1 s outage
    // is more than its ~1 s of billing).
    let l = lease(&m.buyer, &id).await;
    assert_ne!(l["sla_credit"], "0.00", "{l}");
    assert_eq!(l["sla_credit"], l["charged"], "{l}");
}

/// Issue 26: an offer posted with SLA terms shows them, its leases carry them, and a node
/// failure is credited by them (the exact arithmetic is in tests/market.rs; here the outage
/// is wall-clock, so the credit is checked against the view's own basis). Terms out of bounds
/// are 422 `invalid_sla` naming the field, and nothing is posted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offer_with_sla_terms_credits_its_leases_by_them() {
    let m = market(delivery_opts()).await;
    let (s, v, _) = m
        .sup
        .post(
            "/v1/nodes",
            support::api::node("n3", "H100-80G", 8, "cn-east-2"),
            None,
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let n3 = v["id"].as_str().expect("node").to_string();
    let sla = json!({"availability": "99.9", "credit_multiple": 20, "outage_cap_s": 600,
                     "credit_cap": {"monthly_fee_pct": 50}});
    let with = |sla: Value| {
        let mut o = support::api::offer(&n3, 8, "19", None);
        o["sla"] = sla;
        o
    };
    for (bad, field) in [
        (json!({"credit_multiple": 51}), "sla.credit_multiple"),
        (json!({"outage_cap_s": 59}), "sla.outage_cap_s"),
        (json!({"availability": "100"}), "sla.availability"),
        (
            json!({"credit_cap": {"monthly_fee_pct": 5}}),
            "sla.credit_cap",
        ),
        (
            json!({"credit_cap": "charge_so_far", "non_delivery_credit": true}),
            "sla.non_delivery_credit",
        ),
    ] {
        let mut terms = sla.clone();
        for (k, v) in bad.as_object().expect("object") {
            terms[k] = v.clone();
        }
        let (s, e, _) = m.sup.post("/v1/offers", with(terms), None).await;
        assert_eq!((s, e["code"].as_str()), (422, Some("invalid_sla")), "{e}");
        assert_eq!(e["field"], field, "{e}");
    }
    let (s, list, _) = m.sup.get("/v1/offers").await;
    assert_eq!(s, 200);
    assert_eq!(
        list["offers"].as_array().expect("offers").len(),
        2,
        "nothing posted"
    );
    assert!(
        list["offers"][0].get("sla").is_none(),
        "plain offers show none: {list}"
    );
    let (s, o, _) = m.sup.post("/v1/offers", with(sla.clone()), None).await;
    assert_eq!(s, 201, "{o}");
    let shown = json!({"availability": "99.90", "credit_multiple": 20, "outage_cap_s": 600,
                       "credit_cap": {"monthly_fee_pct": 50}, "non_delivery_credit": false,
                       "availability_ratio": "0.9990"});
    assert_eq!(o["sla"], shown);
    let (_, list, _) = m.sup.get("/v1/offers").await;
    let listed = list["offers"]
        .as_array()
        .expect("offers")
        .iter()
        .find(|x| x["id"] == o["id"])
        .expect("listed")
        .clone();
    assert_eq!(listed["sla"], shown);
    let (s, one, _) = m
        .sup
        .get(&format!("/v1/offers/{}", o["id"].as_str().unwrap()))
        .await;
    assert_eq!((s, &one["sla"]), (200, &shown));

    // A lease on it (n3 at 19 is the cheapest) carries the terms from its fill.
    let v = place(&m, bid("job-1", 2, "25", "single_node")).await;
    assert_eq!(v["fills"][0]["node_id"], n3.as_str(), "{v}");
    let id = v["fills"][0]["lease_id"]
        .as_str()
        .expect("lease")
        .to_string();
    assert_eq!(lease(&m.buyer, &id).await["sla_terms"], shown);
    // A second lease there, released while provisioning (never started): its view still
    // shows the terms it was filled under (the load test's min_sla judge found them gone).
    let v = place(&m, bid("job-2", 2, "25", "single_node")).await;
    assert_eq!(v["fills"][0]["node_id"], n3.as_str(), "{v}");
    let early = v["fills"][0]["lease_id"]
        .as_str()
        .expect("lease")
        .to_string();
    let (s, rel, _) = m
        .buyer
        .post(&format!("/v1/leases/{early}/release"), json!({}), None)
        .await;
    assert_eq!(s, 200, "{rel}");
    let l = lease(&m.buyer, &early).await;
    assert_eq!(l["state"], "ended", "{l}");
    assert!(l["ready_ms"].is_null(), "{l}");
    assert_eq!(l["sla_terms"], shown, "{l}");
    let (s, _, _) = report(&m.sup, &id, "ready", json!({"access": access()})).await;
    assert_eq!(s, 200);
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let (s, hb, _) = m
        .sup
        .post(
            &format!("/v1/nodes/{n3}/heartbeat"),
            json!({"healthy_gpus": 0}),
            None,
        )
        .await;
    assert_eq!(s, 200, "{hb}");
    let l = lease(&m.buyer, &id).await;
    let to = l["migrated_to"][0]
        .as_str()
        .expect("replacement")
        .to_string();
    let r = lease(&m.buyer, &to).await;
    assert_eq!(r["node_id"], m.n1.as_str(), "{r}");
    assert!(r.get("sla_terms").is_none(), "n1's offer has none: {r}");
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let (s, _, _) = report(&m.sup, &to, "ready", json!({"access": access()})).await;
    assert_eq!(s, 200);
    let l = lease(&m.buyer, &id).await;
    let b = &l["sla_credit_basis"];
    assert_eq!(b["basis"], "node_failure", "{l}");
    let dec = |v: &Value| {
        v.as_str()
            .expect("amount")
            .parse::<rust_decimal::Decimal>()
            .expect("decimal")
    };
    // 20 × (19 × 2 GPUs) × outage / 3600, capped at 50 % × 38 × 720 = 13 680.00 (today's rule
    // would cap it at the ~1 s the lease was billed: well under 1 CNY).
    let outage_s = b["outage_s"].as_u64().expect("outage");
    assert!((2..=60).contains(&outage_s), "{b}");
    let outage =
        rust_decimal::Decimal::from(20 * 38 * outage_s) / rust_decimal::Decimal::from(3600);
    assert_eq!(dec(&b["outage_credit"]), outage.round_dp(2), "{b}");
    assert_eq!(b["cap"], "13680.00", "{b}");
    // n1 is dearer (20): (20 − 19) × 2 × the ~1 h term left / 3600 ≈ 2.00.
    let dearer = dec(&b["price_difference"]);
    assert!(dearer > rust_decimal::Decimal::from(1), "{b}");
    assert_eq!(b["credit"], l["sla_credit"], "{l}");
    assert!(
        (dec(&b["credit"]) - outage.round_dp(2) - dearer).abs() <= rust_decimal::Decimal::new(1, 2),
        "{b}"
    );
    assert!(
        b["terms"].as_str().expect("terms").contains("multiple 20x"),
        "{b}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_with_nowhere_to_go_says_so_on_the_lease() {
    let m = market(delivery_opts()).await;
    // All of n2 taken and delivered, so n1's failed lease has nowhere to go.
    let v = place(&m, bid("fill-n1", 8, "20", "single_node")).await;
    let on_n1 = v["fills"][0]["lease_id"]
        .as_str()
        .expect("lease")
        .to_string();
    let v = place(&m, bid("fill-n2", 8, "25", "single_node")).await;
    assert_eq!(v["fills"][0]["node_id"], m.n2.as_str(), "{v}");
    let (s, f, _) = report(&m.sup, &on_n1, "failed", json!({"reason": "driver crash"})).await;
    assert_eq!(s, 200, "{f}");
    assert_eq!(f["migrated_to"], json!([]));
    assert_eq!(f["failover_failed_gpus"], 8, "{f}");
    assert_eq!(f["failover_failed_reason"], "no_capacity", "{f}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_restart_does_not_use_up_a_provisioning_deadline() {
    let mut m = market(delivery_opts()).await;
    let (s, o, _) = m.sup.get(&format!("/v1/nodes/{}", m.n1)).await;
    assert_eq!(s, 200);
    let offer = o["offer_id"].as_str().expect("offer").to_string();
    let (s, v, _) = m
        .sup
        .put(
            &format!("/v1/offers/{offer}"),
            json!({"gpus": 8, "spot_price": "20", "min_lease_s": 1, "max_lease_s": 86400,
                   "provision_s": 1}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let v = place(&m, bid("job-1", 2, "25", "single_node")).await;
    let id = v["fills"][0]["lease_id"]
        .as_str()
        .expect("lease")
        .to_string();
    // The exchange stalls past the 1 s deadline and restarts: an outage, not the supplier's
    // fault (market-rules §11.9). Found by an adversarial run: a 10 s restart failed the
    // delivery and held the node.
    tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
    m.app.restart().await;
    let sup = m.app.client(m.sup.key.as_deref());
    let (s, r, _) = report(&sup, &id, "ready", json!({"access": access()})).await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["state"], "active");
    let (s, n, _) = sup.get(&format!("/v1/nodes/{}", m.n1)).await;
    assert_eq!((s, n["held"].clone()), (200, Value::Null));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provisioning_leases_count_against_the_runway_of_new_bids() {
    let m = market(delivery_opts()).await;
    let (id, key) = m.app.account("team-small", "buyer").await;
    m.app.deposit(&id, "4.00").await;
    let small = m.app.client(Some(&key));
    // 1 GPU at 20 CNY/h over the 600 s runway: 3.33 CNY. The first bid fits in 4.00.
    let (s, v, _) = small
        .post("/v1/bids", bid("s-1", 1, "20", "single_node"), None)
        .await;
    assert_eq!((s, v["status"].as_str()), (201, Some("filled")), "{v}");
    // The second must also cover the first lease, provisioning but billed once ready.
    let (s, e, _) = small
        .post("/v1/bids", bid("s-2", 1, "20", "single_node"), None)
        .await;
    assert_eq!(
        (s, e["code"].as_str()),
        (422, Some("insufficient_funds")),
        "{e}"
    );
}

/// Issue 25, §11.3a: a supplier whose node lost a running lease's workload could not end it
/// (`failed` answers 409 `not_provisioning`, a release is the buyer's, and one failed GPU on a
/// node with spare healthy GPUs ends nothing), so the lost lease kept billing. `lost` ends it
/// like a node failure: billing stops at the report, it fails over, the buyer gets the SLA
/// credit once the replacement is ready; the node is not held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supplier_reports_a_running_lease_lost_and_billing_stops_there() {
    let m = market(delivery_opts()).await;
    let v = place(&m, bid("job-1", 2, "25", "single_node")).await;
    let id = v["fills"][0]["lease_id"]
        .as_str()
        .expect("lease")
        .to_string();
    assert_eq!(v["fills"][0]["node_id"], m.n1.as_str());
    // Not running yet: `lost` is refused, `failed` is the report for that.
    let (s, e, _) = report(&m.sup, &id, "lost", json!({"reason": "gone"})).await;
    assert_eq!((s, e["code"].as_str()), (409, Some("not_active")), "{e}");
    let (s, _, _) = report(&m.sup, &id, "ready", json!({"access": access()})).await;
    assert_eq!(s, 200);
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;

    // The failing input: one GPU fails on a node with 6 unleased GPUs. The heartbeat carries
    // a count, not which GPU: nothing ends, and `failed` on the running lease is a conflict.
    let (s, hb, _) = m
        .sup
        .post(
            &format!("/v1/nodes/{}/heartbeat", m.n1),
            json!({"healthy_gpus": 7}),
            None,
        )
        .await;
    assert_eq!(s, 200, "{hb}");
    assert_eq!(lease(&m.buyer, &id).await["state"], "active");
    let (s, e, _) = report(&m.sup, &id, "failed", json!({"reason": "GPU lost"})).await;
    assert_eq!(
        (s, e["code"].as_str()),
        (409, Some("not_provisioning")),
        "{e}"
    );

    // Only the lease's supplier reports it; bad bodies are refused and change nothing.
    let (s, e, _) = report(&m.buyer, &id, "lost", json!({"reason": "x"})).await;
    assert_eq!(s, 403, "{e}");
    let (_, other_key) = m.app.account("idc-2", "supplier").await;
    let other = m.app.client(Some(&other_key));
    let (s, e, _) = report(&other, &id, "lost", json!({"reason": "x"})).await;
    assert_eq!((s, e["code"].as_str()), (404, Some("not_found")), "{e}");
    for bad in [
        json!({}),
        json!({"reason": ""}),
        json!({"reason": "a\u{7}b"}),
    ] {
        let (s, e, _) = report(&m.sup, &id, "lost", bad.clone()).await;
        assert_eq!(s, 400, "{bad}: {e}");
    }
    assert_eq!(lease(&m.buyer, &id).await["state"], "active");

    let reason = "GPU 3 fell off the bus (Xid 79); container gone";
    let (s, l, _) = report(&m.sup, &id, "lost", json!({ "reason": reason })).await;
    assert_eq!(s, 200, "{l}");
    assert_eq!(l["state"], "ended", "{l}");
    assert_eq!(l["end_reason"], "node_failure", "{l}");
    assert_eq!(l["failure_reason"], reason, "{l}");
    let billed = l["billed_seconds"].as_u64().expect("billed");
    assert!(
        (1..=3).contains(&billed),
        "billed from ready to the report: {l}"
    );
    let to = l["migrated_to"][0]
        .as_str()
        .expect("replacement")
        .to_string();
    let r = lease(&m.buyer, &to).await;
    assert_eq!(r["node_id"], m.n2.as_str(), "{r}");
    assert_eq!(r["state"], "provisioning", "{r}");
    assert_eq!(r["migrated_from"], id.as_str());
    // The node is not held: its other GPUs stay listed (8 − 2 wiping − 1 unhealthy = 5).
    let (s, n, _) = m.sup.get(&format!("/v1/nodes/{}", m.n1)).await;
    assert_eq!(s, 200);
    assert_eq!(n["held"], Value::Null, "{n}");
    assert_eq!(n["wiping_gpus"], 2, "{n}");
    assert!(
        free_gpus(&m.app).await.contains(&("20.0000".into(), 5)),
        "{:?}",
        free_gpus(&m.app).await
    );
    // Billing stopped at the report.
    let charged = lease(&m.buyer, &id).await["charged"].clone();
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let l = lease(&m.buyer, &id).await;
    assert_eq!(l["charged"], charged, "{l}");
    assert_eq!(l["billed_seconds"], billed, "{l}");
    // A second report: the lease has ended.
    let (s, e, _) = report(&m.sup, &id, "lost", json!({ "reason": reason })).await;
    assert_eq!((s, e["code"].as_str()), (409, Some("lease_ended")), "{e}");
    // The ended lease keeps its access details as history, but no command to log in with;
    // the buyer's release of it says it has ended, when and why (it answered 404).
    assert_eq!(l["access"]["ssh_host"], "203.0.113.7", "{l}");
    assert_eq!(l["access"]["ssh_command"], Value::Null, "{l}");
    let (s, e, _) = m
        .buyer
        .post(&format!("/v1/leases/{id}/release"), json!({}), None)
        .await;
    assert_eq!((s, e["code"].as_str()), (409, Some("lease_ended")), "{e}");
    let msg = e["message"].as_str().expect("message");
    assert!(
        msg.contains("node_failure") && msg.contains("ended at 20"),
        "{msg}"
    );
    let (s, e, _) = m
        .buyer
        .post("/v1/leases/999999/release", json!({}), None)
        .await;
    assert_eq!((s, e["code"].as_str()), (404, Some("not_found")), "{e}");
    // The replacement ready: the node-failure SLA credit is posted.
    let (s, _, _) = report(&m.sup, &to, "ready", json!({"access": access()})).await;
    assert_eq!(s, 200);
    let l = lease(&m.buyer, &id).await;
    assert_ne!(l["sla_credit"], "0.00", "{l}");
}

/// Issue 25, §11.3b: a failure the buyer caused (the image cannot be pulled, the command is
/// invalid) ends the lease at no charge without holding the node and without a failover that
/// could only fail the same way; the buyer sees the hook's message. Over the websocket a
/// supplier also reports a running lease lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_launch_spec_failure_costs_nothing_holds_nothing_and_does_not_fail_over() {
    let m = market(delivery_opts()).await;
    let v = place(&m, bid("job-1", 4, "25", "single_node")).await;
    let id = v["fills"][0]["lease_id"]
        .as_str()
        .expect("lease")
        .to_string();
    let why = "image pull failed: nvcr.io/nvidia/pytorhc:24.05-py3: manifest unknown";
    let (s, l, _) = report(
        &m.sup,
        &id,
        "failed",
        json!({"reason": why, "cause": "launch_spec"}),
    )
    .await;
    assert_eq!(s, 200, "{l}");
    assert_eq!(l["end_reason"], "not_delivered", "{l}");
    assert_eq!(l["failure_cause"], "launch_spec", "{l}");
    assert_eq!(l["failure_reason"], why, "{l}");
    assert_eq!(l["billed_seconds"], 0);
    assert_eq!(l["migrated_to"], json!([]), "no failover: {l}");
    assert_eq!(l["failover_failed_gpus"], Value::Null, "{l}");
    let b = lease(&m.buyer, &id).await;
    assert_eq!(
        b["failure_reason"], why,
        "the buyer sees the hook's message"
    );
    let (s, n, _) = m.sup.get(&format!("/v1/nodes/{}", m.n1)).await;
    assert_eq!(s, 200);
    assert_eq!(n["held"], Value::Null, "the node is not held: {n}");
    // A bad cause is refused by name.
    let v = place(&m, bid("job-2", 1, "25", "single_node")).await;
    let id2 = v["fills"][0]["lease_id"]
        .as_str()
        .expect("lease")
        .to_string();
    let (s, e, _) = report(
        &m.sup,
        &id2,
        "failed",
        json!({"reason": "x", "cause": "buyer"}),
    )
    .await;
    assert_eq!((s, e["field"].as_str()), (400, Some("cause")), "{e}");

    // The websocket's report_lost ends a running lease like the REST report.
    let (s, _, _) = report(&m.sup, &id2, "ready", json!({"access": access()})).await;
    assert_eq!(s, 200);
    let mut sup_ws = ws_connect(&m.app.ws_url(), m.sup.key.as_deref(), None)
        .await
        .expect("supplier ws");
    sup_ws
        .send(
            json!({"type": "report_lost", "request_id": "l1", "lease_id": id2,
                     "reason": "host rebooted"}),
        )
        .await;
    let (ack, _) = sup_ws.until("lease_reported").await;
    assert_eq!(ack["request_id"], "l1");
    assert_eq!(ack["lease"]["end_reason"], "node_failure", "{ack}");
    assert_eq!(ack["lease"]["failure_reason"], "host rebooted", "{ack}");
}
