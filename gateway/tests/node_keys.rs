//! Node keys over the public API (issue 16; docs/api.md §1.3.1): a supplier makes a key for one
//! node (by name, before the node exists); with it a host registers that node, heartbeats it,
//! reads and reports on its leases and follows its delivery events on the websocket, and
//! nothing else: another node of the same supplier answers 404 like a missing one, every other
//! endpoint 403 saying the key's scope. Revoking stops the key at once; a restart keeps the
//! scope (it is journaled). The app runs on port 0 with delivery on, as the server does.

use crate::support;
use crate::support::api::{Backend, Client, TestApp, delivery_opts, node, offer, ws_connect};
use serde_json::{Value, json};

const SSH_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM7t3CQcihrH/4tM1K41mGfGrkuwsCkbk7Z2fjczQzrv buyer@laptop";

fn bid(coid: &str, gpus: u32) -> Value {
    json!({"client_order_id": coid, "sku": "H100-80G", "gpus": gpus, "limit_price": "25",
           "kind": "spot", "time_in_force": "ioc", "duration_s": 3600,
           "placement": "single_node",
           "launch": {"ssh_keys": [SSH_KEY], "image": "nvcr.io/nvidia/pytorch:24.05-py3"}})
}

fn access() -> Value {
    json!({"ssh_host": "203.0.113.7", "ssh_port": 2222, "ssh_user": "root"})
}

struct Market {
    app: TestApp,
    sup: Client,
    buyer: Client,
}

/// A supplier and a buyer with 1,000 CNY.
async fn market() -> Market {
    let app = TestApp::start(Backend::Embedded, delivery_opts()).await;
    let (_, sup_key) = app.account("idc-1", "supplier").await;
    let (buyer_id, buyer_key) = app.account("team-a", "buyer").await;
    app.deposit(&buyer_id, "1000.00").await;
    Market {
        sup: app.client(Some(&sup_key)),
        buyer: app.client(Some(&buyer_key)),
        app,
    }
}

/// The supplier makes a node key for `name`: answers (key id, key).
async fn node_key(sup: &Client, name: &str) -> (String, String) {
    let (s, v, _) = sup
        .post("/v1/node-keys", json!({"node_name": name}), None)
        .await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["node_name"], name);
    let key = v["api_key"].as_str().expect("api_key").to_string();
    assert!(key.starts_with("gpux_") && key.len() == 37, "{v}");
    (v["key_id"].as_str().expect("key id").to_string(), key)
}

/// Registers a node and posts an offer at `spot` with `c`; answers (node id, offer id).
async fn register(c: &Client, offers: &Client, name: &str, spot: &str) -> (String, String) {
    let (s, v, _) = c
        .post("/v1/nodes", node(name, "H100-80G", 8, "cn-east-2"), None)
        .await;
    assert_eq!(s, 201, "{v}");
    let id = v["id"].as_str().expect("node id").to_string();
    let (s, o, _) = offers
        .post("/v1/offers", offer(&id, 8, spot, None), None)
        .await;
    assert_eq!(s, 201, "{o}");
    (id, o["id"].as_str().expect("offer id").to_string())
}

/// Places a bid; answers (lease id, node id) of its one fill.
async fn fill(m: &Market, coid: &str, gpus: u32) -> (String, String) {
    let (s, v, _) = m.buyer.post("/v1/bids", bid(coid, gpus), None).await;
    assert_eq!(s, 201, "{v}");
    let f = &v["fills"][0];
    (
        f["lease_id"].as_str().expect("lease").to_string(),
        f["node_id"].as_str().expect("node").to_string(),
    )
}

fn assert_scoped(who: &str, (s, v, _): &support::api::Answer) {
    assert_eq!(s, &403, "{who}: {v}");
    assert_eq!(v["code"], "forbidden", "{who}: {v}");
    assert!(
        v["message"]
            .as_str()
            .is_some_and(|m| m.contains("scoped to node agent-n1")),
        "{who}: {v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_key_runs_its_node_and_nothing_else() {
    let m = market().await;
    // Made before the node exists: the key names it.
    let (key_id, key) = node_key(&m.sup, "agent-n1").await;
    let agent = m.app.client(Some(&key));
    let (s, v, _) = agent.get("/v1/nodes").await;
    assert_eq!((s, v["nodes"].clone()), (200, json!([])), "{v}");

    // Registers its own node only; a second registration is today's duplicate.
    let r = agent
        .post(
            "/v1/nodes",
            node("agent-n2", "H100-80G", 8, "cn-east-2"),
            None,
        )
        .await;
    assert_scoped("register another name", &r);
    let (n1, offer1) = register(&agent, &m.sup, "agent-n1", "20").await;
    let (s, v, _) = agent
        .post(
            "/v1/nodes",
            node("agent-n1", "H100-80G", 8, "cn-east-2"),
            None,
        )
        .await;
    assert_eq!((s, v["code"].as_str()), (409, Some("node_exists")), "{v}");
    // The same supplier's other node, registered with its account key.
    let (n2, _) = register(&m.sup, &m.sup, "n2", "21").await;
    let (s, v, _) = agent.get("/v1/nodes").await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["nodes"].as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(v["nodes"][0]["id"], n1.as_str());

    // Its node: read, update, heartbeat.
    let (s, v, _) = agent.get(&format!("/v1/nodes/{n1}")).await;
    assert_eq!((s, v["name"].as_str()), (200, Some("agent-n1")), "{v}");
    let (s, v, _) = agent
        .patch(&format!("/v1/nodes/{n1}"), json!({"nvlink": false}))
        .await;
    assert_eq!((s, v["nvlink"].as_bool()), (200, Some(false)), "{v}");
    let hb = json!({"healthy_gpus": 8});
    let (s, v, _) = agent
        .post(&format!("/v1/nodes/{n1}/heartbeat"), hb.clone(), None)
        .await;
    assert_eq!(s, 200, "{v}");
    assert!(v["seq"].as_u64().is_some(), "{v}");
    // And attests it (issue 26); the other node answers 404 like a missing one.
    let attest = json!({"gpus": (0..8).map(|i| json!({"index": i, "uuid": format!("GPU-nk-{i}"),
        "model": "NVIDIA H100 80GB HBM3", "memory_mib": 81_559})).collect::<Vec<_>>(),
        "driver_version": "550.54.15", "cuda_version": "12.4"});
    let (s, v, _) = agent
        .post(&format!("/v1/nodes/{n1}/attestation"), attest.clone(), None)
        .await;
    assert_eq!((s, v["attested"].as_bool()), (200, Some(true)), "{v}");

    // Two leases: one on each node (n1 is cheaper; the second bid does not fit beside the
    // first on n1).
    let (l1, on1) = fill(&m, "job-1", 2).await;
    assert_eq!(on1, n1);
    let (l2, on2) = fill(&m, "job-2", 8).await;
    assert_eq!(on2, n2);

    // The other node and its lease answer 404, exactly like missing ones.
    let missing_node = "999999999";
    for node_id in [n2.as_str(), missing_node] {
        let (s, v, _) = agent.get(&format!("/v1/nodes/{node_id}")).await;
        assert_eq!((s, v["code"].as_str()), (404, Some("not_found")), "{v}");
        let (s, _, _) = agent
            .patch(&format!("/v1/nodes/{node_id}"), json!({"draining": true}))
            .await;
        assert_eq!(s, 404);
        let (s, _, _) = agent
            .post(&format!("/v1/nodes/{node_id}/heartbeat"), hb.clone(), None)
            .await;
        assert_eq!(s, 404);
        let (s, _, _) = agent.get(&format!("/v1/nodes/{node_id}/leases")).await;
        assert_eq!(s, 404);
        let (s, _, _) = agent
            .post(
                &format!("/v1/nodes/{node_id}/attestation"),
                attest.clone(),
                None,
            )
            .await;
        assert_eq!(s, 404);
    }
    for lease in [l2.as_str(), "999999999"] {
        let (s, v, _) = agent.get(&format!("/v1/leases/{lease}")).await;
        assert_eq!((s, v["code"].as_str()), (404, Some("not_found")), "{v}");
        for (what, body) in [
            ("ready", json!({"access": access()})),
            ("failed", json!({"reason": "x"})),
            ("torn-down", json!({"method": "x"})),
        ] {
            let (s, v, _) = agent
                .post(&format!("/v1/leases/{lease}/{what}"), body, None)
                .await;
            assert_eq!(s, 404, "{what} {lease}: {v}");
        }
    }
    // Nothing it sent touched n2 or its lease.
    let (_, v, _) = m.sup.get(&format!("/v1/nodes/{n2}")).await;
    assert_eq!(v["draining"], false, "{v}");
    let (_, v, _) = m.sup.get(&format!("/v1/leases/{l2}")).await;
    assert_eq!(v["state"], "provisioning", "{v}");

    // Its node's leases: listed, read, reported ready.
    let (s, v, _) = agent.get(&format!("/v1/nodes/{n1}/leases")).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["leases"][0]["id"], l1.as_str());
    assert_eq!(v["leases"][0]["launch"]["ssh_keys"][0], SSH_KEY);
    let (s, v, _) = agent.get(&format!("/v1/leases/{l1}")).await;
    assert_eq!((s, v["state"].as_str()), (200, Some("provisioning")), "{v}");
    let (s, v, _) = agent
        .post(
            &format!("/v1/leases/{l1}/ready"),
            json!({"access": access()}),
            None,
        )
        .await;
    assert_eq!((s, v["state"].as_str()), (200, Some("active")), "{v}");
    let (_, v, _) = m.buyer.get(&format!("/v1/leases/{l1}")).await;
    assert_eq!(v["access"]["ssh_command"], "ssh -p 2222 root@203.0.113.7");

    // Everything else: 403 naming the scope.
    let bad: Vec<(reqwest::Method, String, Option<Value>)> = vec![
        (
            reqwest::Method::POST,
            "/v1/offers".into(),
            Some(offer(&n1, 8, "20", None)),
        ),
        (reqwest::Method::GET, "/v1/offers".into(), None),
        (reqwest::Method::GET, format!("/v1/offers/{offer1}"), None),
        (
            reqwest::Method::PUT,
            format!("/v1/offers/{offer1}"),
            Some(json!({"gpus": 8, "spot_price": "19"})),
        ),
        (
            reqwest::Method::DELETE,
            format!("/v1/offers/{offer1}"),
            None,
        ),
        (
            reqwest::Method::POST,
            format!("/v1/nodes/{n1}/resume"),
            Some(json!({})),
        ),
        (reqwest::Method::GET, "/v1/earnings".into(), None),
        (reqwest::Method::GET, "/v1/leases".into(), None),
        (
            reqwest::Method::GET,
            "/v1/reports/supplier-payouts".into(),
            None,
        ),
        (reqwest::Method::GET, "/v1/me".into(), None),
        (
            reqwest::Method::POST,
            "/v1/node-keys".into(),
            Some(json!({"node_name": "agent-n1"})),
        ),
        (reqwest::Method::GET, "/v1/node-keys".into(), None),
        (
            reqwest::Method::DELETE,
            format!("/v1/node-keys/{key_id}"),
            None,
        ),
        (reqwest::Method::POST, "/v1/bids".into(), Some(bid("x", 1))),
        (reqwest::Method::GET, "/v1/balance".into(), None),
        (reqwest::Method::GET, "/v1/admin/accounts".into(), None),
    ];
    for (method, path, body) in bad {
        let a = agent
            .send(
                method.clone(),
                &path,
                body.map(|b| b.to_string().into_bytes()),
                None,
            )
            .await;
        assert_scoped(&format!("{method} {path}"), &a);
    }
    // None of those took effect: the offer is live, the key still works.
    let (s, v, _) = m.sup.get(&format!("/v1/offers/{offer1}")).await;
    assert_eq!(s, 200, "{v}");
    let (s, _, _) = agent
        .post(&format!("/v1/nodes/{n1}/heartbeat"), hb, None)
        .await;
    assert_eq!(s, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_socket_gets_only_its_node_events() {
    let m = market().await;
    let (_, key) = node_key(&m.sup, "agent-n1").await;
    let agent = m.app.client(Some(&key));
    let url = m.app.ws_url();
    // Before its node is registered there is nothing to follow.
    assert_eq!(ws_connect(&url, Some(&key), None).await.err(), Some(409));
    // n2 (the account's) is cheaper, so the first lease lands there.
    let (n1, _) = register(&agent, &m.sup, "agent-n1", "21").await;
    let (n2, _) = register(&m.sup, &m.sup, "n2", "20").await;
    let mut node_ws = ws_connect(&url, Some(&key), None).await.expect("node ws");
    let mut sup_ws = ws_connect(&url, m.sup.key.as_deref(), None)
        .await
        .expect("supplier ws");
    let (l2, on2) = fill(&m, "job-1", 2).await;
    assert_eq!(on2, n2);
    let (l1, on1) = fill(&m, "job-2", 8).await;
    assert_eq!(on1, n1);
    // The account's socket sees both assignments; the node's only its own.
    let (a, _) = sup_ws.until("lease_assigned").await;
    assert_eq!(a["lease_id"], l2.as_str());
    let (a, _) = sup_ws.until("lease_assigned").await;
    assert_eq!(a["lease_id"], l1.as_str());
    let (a, before) = node_ws.until("lease_assigned").await;
    assert_eq!(
        (a["lease_id"].as_str(), a["node_id"].as_str()),
        (Some(l1.as_str()), Some(n1.as_str()))
    );
    assert!(
        !before.iter().any(|e| e.to_string().contains(&l2)),
        "{before:?}"
    );
    // Reports over the socket: its node's lease only; no resume, no trading.
    node_ws
        .send(
            json!({"type": "report_ready", "request_id": "r2", "lease_id": l2,
                      "access": access()}),
        )
        .await;
    let (e, _) = node_ws.until("rejected").await;
    assert_eq!(
        (e["request_id"].as_str(), e["code"].as_str()),
        (Some("r2"), Some("not_found")),
        "{e}"
    );
    node_ws
        .send(json!({"type": "resume_node", "request_id": "rs", "node_id": n1}))
        .await;
    let (e, _) = node_ws.until("rejected").await;
    assert_eq!(e["code"], "forbidden", "{e}");
    assert!(
        e["message"]
            .as_str()
            .is_some_and(|m| m.contains("scoped to node agent-n1")),
        "{e}"
    );
    node_ws
        .send(json!({"type": "get_balance", "request_id": "gb"}))
        .await;
    let (e, _) = node_ws.until("rejected").await;
    assert_eq!(e["code"], "forbidden", "{e}");
    node_ws
        .send(
            json!({"type": "report_ready", "request_id": "r1", "lease_id": l1,
                      "access": access()}),
        )
        .await;
    let (ack, _) = node_ws.until("lease_reported").await;
    assert_eq!(
        (ack["request_id"].as_str(), ack["lease"]["state"].as_str()),
        (Some("r1"), Some("active"))
    );
    // The release of the other node's lease reaches the account's socket, never the node's.
    let (s, _, _) = m
        .buyer
        .post(&format!("/v1/leases/{l2}/release"), json!({}), None)
        .await;
    assert_eq!(s, 200);
    let (s, _, _) = m
        .buyer
        .post(&format!("/v1/leases/{l1}/release"), json!({}), None)
        .await;
    assert_eq!(s, 200);
    let (e, _) = sup_ws.until("lease_ended").await;
    assert_eq!(e["lease_id"], l2.as_str());
    let (e, before) = node_ws.until("lease_ended").await;
    assert_eq!(e["lease_id"], l1.as_str(), "{before:?}");
    let (w, _) = node_ws.until("lease_wiping").await;
    assert_eq!(w["lease_id"], l1.as_str());
    assert!(
        !before.iter().any(|e| e.to_string().contains(&l2)),
        "{before:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_keys_are_listed_revoked_and_survive_a_restart() {
    let mut m = market().await;
    let (id1, key1) = node_key(&m.sup, "agent-n1").await;
    let (id2, key2) = node_key(&m.sup, "agent-n2").await;
    let agent = m.app.client(Some(&key1));
    let (n1, _) = register(&agent, &m.sup, "agent-n1", "20").await;
    let (n2, _) = register(&m.sup, &m.sup, "n2", "21").await;
    // Listed by id and node name, never the key.
    let (s, v, _) = m.sup.get("/v1/node-keys").await;
    assert_eq!(s, 200, "{v}");
    let mut listed = v["node_keys"].as_array().expect("node_keys").clone();
    listed.sort_by_key(|k| k["node_name"].to_string());
    assert_eq!(
        listed,
        vec![
            json!({"key_id": id1, "node_name": "agent-n1", "node_id": n1}),
            json!({"key_id": id2, "node_name": "agent-n2", "node_id": null}),
        ],
        "{v}"
    );
    assert!(!v.to_string().contains(&key1) && !v.to_string().contains(&key2));
    // The admin sees them among the account's keys.
    let (_, v, _) = m.app.admin().get("/v1/admin/accounts").await;
    let ids = v["accounts"][1]["key_ids"].to_string();
    assert!(ids.contains(&id1) && ids.contains(&id2), "{v}");
    // Bad requests, and another role.
    let (s, v, _) = m
        .sup
        .post("/v1/node-keys", json!({"node_name": "bad name"}), None)
        .await;
    assert_eq!(
        (s, v["code"].as_str(), v["field"].as_str()),
        (400, Some("invalid_name"), Some("node_name")),
        "{v}"
    );
    let (s, _, _) = m
        .sup
        .post(
            "/v1/node-keys",
            json!({"node_name": "x", "node_id": "1"}),
            None,
        )
        .await;
    assert_eq!(s, 400);
    let (s, _, _) = m
        .buyer
        .post("/v1/node-keys", json!({"node_name": "x"}), None)
        .await;
    assert_eq!(s, 403);
    // An account key is not a node key: its id answers 404 here.
    let (_, me, _) = m.sup.get("/v1/me").await;
    let account_key = me["key_id"].as_str().expect("key id").to_string();
    let (s, _, _) = m.sup.delete(&format!("/v1/node-keys/{account_key}")).await;
    assert_eq!(s, 404);

    // A restart (final snapshot, then recovery) keeps the key and its scope.
    m.app.restart().await;
    let agent = m.app.client(Some(&key1));
    let sup = m.app.client(m.sup.key.as_deref());
    let (s, v, _) = agent
        .post(
            &format!("/v1/nodes/{n1}/heartbeat"),
            json!({"healthy_gpus": 8}),
            None,
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let (s, _, _) = agent.get(&format!("/v1/nodes/{n2}")).await;
    assert_eq!(s, 404);
    assert_scoped("after restart", &agent.get("/v1/earnings").await);
    // The second key registers its node after the restart.
    let agent2 = m.app.client(Some(&key2));
    let r = agent2
        .post(
            "/v1/nodes",
            node("agent-n1", "H100-80G", 8, "cn-east-2"),
            None,
        )
        .await;
    assert_eq!(r.0, 403, "{}", r.1);
    let (s, v, _) = agent2
        .post(
            "/v1/nodes",
            node("agent-n2", "H100-80G", 8, "cn-east-2"),
            None,
        )
        .await;
    assert_eq!(s, 201, "{v}");

    // Revoked: 401 at once; a second revoke is 404.
    let (s, v, _) = sup.delete(&format!("/v1/node-keys/{id1}")).await;
    assert_eq!((s, v["revoked"].as_bool()), (200, Some(true)), "{v}");
    let (s, v, _) = agent.get(&format!("/v1/nodes/{n1}")).await;
    assert_eq!((s, v["code"].as_str()), (401, Some("unauthorized")), "{v}");
    let (s, _, _) = sup.delete(&format!("/v1/node-keys/{id1}")).await;
    assert_eq!(s, 404);
    let (s, v, _) = sup.get("/v1/node-keys").await;
    assert_eq!(s, 200);
    assert_eq!(v["node_keys"].as_array().map(Vec::len), Some(1), "{v}");
    // The admin's key endpoint revokes node keys too.
    let (_, me, _) = sup.get("/v1/me").await;
    let account = me["account_id"].as_str().expect("account").to_string();
    let (s, _, _) = m
        .app
        .admin()
        .delete(&format!("/v1/admin/accounts/{account}/keys/{id2}"))
        .await;
    assert_eq!(s, 200);
    let (s, _, _) = agent2.get("/v1/nodes").await;
    assert_eq!(s, 401);
    // And the revokes are journaled: after another restart the keys stay dead.
    m.app.restart().await;
    let (s, _, _) = m.app.client(Some(&key1)).get("/v1/nodes").await;
    assert_eq!(s, 401);
    let (s, v, _) = m
        .app
        .client(m.sup.key.as_deref())
        .get("/v1/node-keys")
        .await;
    assert_eq!((s, v["node_keys"].clone()), (200, json!([])), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_supplier_cannot_see_or_revoke_a_node_key() {
    let m = market().await;
    let (_, other_key) = m.app.account("idc-2", "supplier").await;
    let other = m.app.client(Some(&other_key));
    let (id, key) = node_key(&m.sup, "agent-n1").await;
    let agent = m.app.client(Some(&key));
    let (n1, _) = register(&agent, &m.sup, "agent-n1", "20").await;
    let (s, v, _) = other.get("/v1/node-keys").await;
    assert_eq!((s, v["node_keys"].clone()), (200, json!([])), "{v}");
    let (s, v, _) = other.delete(&format!("/v1/node-keys/{id}")).await;
    assert_eq!((s, v["code"].as_str()), (404, Some("not_found")), "{v}");
    // The other supplier's own node key of the same name is its own node's key.
    let (_, other_node_key) = node_key(&other, "agent-n1").await;
    let other_agent = m.app.client(Some(&other_node_key));
    let (s, _, _) = other_agent.get(&format!("/v1/nodes/{n1}")).await;
    assert_eq!(s, 404);
    let (s, v, _) = other_agent.get("/v1/nodes").await;
    assert_eq!((s, v["nodes"].clone()), (200, json!([])), "{v}");
    // Still working.
    let (s, _, _) = agent.get(&format!("/v1/nodes/{n1}")).await;
    assert_eq!(s, 200);
}

/// The scope is journaled state: `AddNodeKey` round-trips through the journal encoding, a
/// replay reproduces the state hash, a snapshot restores the scope, and a market without node
/// keys hashes as it did before them (its accounts encode without a `node_keys` field).
#[test]
fn the_scope_is_journaled_replayed_and_snapshotted() {
    use gateway::accounts::{Role, hash_key};
    use gateway::market::{Market, MarketConfig, Op};
    use gateway::sequencer::{decode, encode};
    let ops = [
        Op::CreateAccount {
            name: "idc-1".into(),
            role: Role::Supplier,
            key_hash: Some(hash_key("account key")),
        },
        Op::AddNodeKey {
            account: 1,
            key_hash: hash_key("node key"),
            node: "sh-h100-01".into(),
        },
    ];
    let mut live = Market::new(MarketConfig::delivered()).expect("market");
    let mut before_node_key = None;
    for (i, op) in ops.iter().enumerate() {
        let out = live.apply(1_000 + i as i64, op);
        assert!(out.refusal.is_none(), "{:?}", out.refusal);
        if i == 0 {
            before_node_key = Some(live.snapshot());
        }
    }
    let rec = live
        .accounts()
        .by_key_hash(&hash_key("node key"))
        .expect("node key");
    let key_id = gateway::accounts::key_id(&hash_key("node key"));
    assert_eq!(rec.node_of_key(&key_id), Some("sh-h100-01"));
    assert!(!String::from_utf8_lossy(&before_node_key.expect("snapshot")).contains("node_keys"));
    // Replay from the journal encoding.
    let mut replayed = Market::new(MarketConfig::delivered()).expect("market");
    for (i, op) in ops.iter().enumerate() {
        let back = decode(&encode(op).expect("encode")).expect("decode");
        assert_eq!(&back, op);
        replayed.apply(1_000 + i as i64, &back);
    }
    assert_eq!(replayed.state_hash(), live.state_hash());
    // Snapshot and restore.
    let restored = Market::restore(&live.snapshot()).expect("restore");
    assert_eq!(restored.state_hash(), live.state_hash());
    assert_eq!(
        restored
            .accounts()
            .get(1)
            .and_then(|a| a.node_of_key(&key_id)),
        Some("sh-h100-01")
    );
    // Refused for a buyer account, and for a name no node could have.
    let mut m = Market::restore(&live.snapshot()).expect("restore");
    m.apply(
        2_000,
        &Op::CreateAccount {
            name: "team-a".into(),
            role: Role::Buyer,
            key_hash: None,
        },
    );
    let out = m.apply(
        2_001,
        &Op::AddNodeKey {
            account: 2,
            key_hash: hash_key("k2"),
            node: "n".into(),
        },
    );
    assert_eq!(out.refusal.map(|r| r.code), Some("wrong_role"));
    let out = m.apply(
        2_002,
        &Op::AddNodeKey {
            account: 1,
            key_hash: hash_key("k3"),
            node: "no spaces".into(),
        },
    );
    assert_eq!(out.refusal.map(|r| r.code), Some("invalid_name"));
}
