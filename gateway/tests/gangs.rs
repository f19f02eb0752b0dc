//! Fabric domains and gangs over the public API (issue 27, docs/market-rules.md §13): nodes
//! registered with fabric domains, the public domains view, a gang IOC that fills whole in one
//! domain and one refused `gang_incomplete` with what could fill, the members' gang views,
//! billing from the whole gang's ready only, releasing a whole bid, `min_gpus`, and bad input
//! refused 422 by field. The app runs on port 0 with delivery on.

use crate::support::api::{Backend, Client, TestApp, delivery_opts, ws_connect};
use serde_json::{Value, json};

const KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM7t3CQcihrH/4tM1K41mGfGrkuwsCkbk7Z2fjczQzrv buyer@laptop";

fn launch() -> Value {
    json!({"ssh_keys": [KEY]})
}

fn access(port: u16) -> Value {
    json!({"ssh_host": "203.0.113.7", "ssh_port": port, "ssh_user": "root"})
}

fn gang_bid(coid: &str, nodes: u32, gpus_per_node: u32, scope: &str) -> Value {
    json!({"client_order_id": coid, "sku": "H100-80G", "placement": "gang",
           "gang": {"nodes": nodes, "gpus_per_node": gpus_per_node, "scope": scope},
           "limit_price": "25", "kind": "spot", "time_in_force": "ioc", "duration_s": 3600,
           "launch": launch()})
}

struct Market {
    app: TestApp,
    sup: Client,
    buyer: Client,
    /// Node id by name.
    nodes: Vec<(String, String)>,
}

impl Market {
    fn node_name(&self, id: &str) -> &str {
        &self.nodes.iter().find(|(_, i)| i == id).expect("node").0
    }
}

/// Registers a node (with a fabric domain when given) and lists it at `spot`.
async fn node(sup: &Client, name: &str, domain: Option<&str>, spot: &str) -> String {
    let mut body = json!({"name": name, "sku": "H100-80G", "gpus": 8, "region": "cn-east-2",
        "jurisdiction": "CN", "interconnect": "infiniband", "nvlink": true});
    if let Some(d) = domain {
        body["fabric_domain"] = json!(d);
        body["nic_gbps"] = json!(3200);
    }
    let (s, v, _) = sup.post("/v1/nodes", body, None).await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["fabric_domain"], domain.map_or(Value::Null, |d| json!(d)));
    let id = v["id"].as_str().expect("node id").to_string();
    let (s, v, _) = sup
        .post(
            "/v1/offers",
            json!({"node_id": id, "gpus": 8, "spot_price": spot, "min_lease_s": 1,
                   "max_lease_s": 86400}),
            None,
        )
        .await;
    assert_eq!(s, 201, "{v}");
    id
}

/// One supplier: fabric domain `pod-a` with three 8-GPU nodes at 20, `pod-b` with two at 19,
/// and `solo` on no domain at 18; a funded buyer.
async fn market() -> Market {
    let app = TestApp::start(Backend::Embedded, delivery_opts()).await;
    let (_, sup_key) = app.account("idc-gang", "supplier").await;
    let (buyer_id, buyer_key) = app.account("team-gang", "buyer").await;
    app.deposit(&buyer_id, "100000.00").await;
    let sup = app.client(Some(&sup_key));
    let buyer = app.client(Some(&buyer_key));
    let mut nodes = Vec::new();
    for (name, domain, spot) in [
        ("a1", Some("pod-a"), "20"),
        ("a2", Some("pod-a"), "20"),
        ("a3", Some("pod-a"), "20"),
        ("b1", Some("pod-b"), "19"),
        ("b2", Some("pod-b"), "19"),
        ("solo", None, "18"),
    ] {
        nodes.push((name.to_string(), node(&sup, name, domain, spot).await));
    }
    Market {
        app,
        sup,
        buyer,
        nodes,
    }
}

async fn lease(c: &Client, id: &str) -> Value {
    let (s, v, _) = c.get(&format!("/v1/leases/{id}")).await;
    assert_eq!(s, 200, "{v}");
    v
}

async fn domains(app: &TestApp, query: &str) -> Value {
    let (s, v, _) = app
        .client(None)
        .get(&format!("/v1/inventory/domains{query}"))
        .await;
    assert_eq!(s, 200, "{v}");
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_fills_whole_in_one_domain_and_bills_from_the_whole_gangs_ready() {
    let m = market().await;
    let mut buyer_ws = ws_connect(&m.app.ws_url(), m.buyer.key.as_deref(), None)
        .await
        .expect("buyer ws");

    // The public domains view: whole free nodes per domain, opaque ids, no names.
    let d = domains(&m.app, "?sku=H100-80G").await;
    let rows = d["domains"].as_array().expect("rows").clone();
    assert_eq!(rows.len(), 2, "{d}");
    assert_eq!(
        rows[0]["largest_gang"],
        json!({"nodes": 3, "gpus_per_node": 8})
    );
    assert_eq!(
        rows[0]["free_nodes"],
        json!([{"gpus_per_node": 8, "nodes": 3}])
    );
    assert_eq!(rows[0]["cheapest_spot_price"], "20.0000");
    assert_eq!(rows[0]["interconnect"], "infiniband");
    assert_eq!(
        (
            rows[0]["nic_gbps_min"].clone(),
            rows[0]["nic_gbps_max"].clone()
        ),
        (json!(3200), json!(3200))
    );
    assert_eq!(
        rows[1]["largest_gang"],
        json!({"nodes": 2, "gpus_per_node": 8})
    );
    assert_eq!(rows[1]["cheapest_spot_price"], "19.0000");
    for r in &rows {
        let id = r["domain_id"].as_str().expect("domain id");
        assert!(id.starts_with("d-") && id.len() == 14, "{id}");
    }
    assert_ne!(rows[0]["domain_id"], rows[1]["domain_id"]);
    let text = d.to_string();
    assert!(
        !text.contains("pod-a") && !text.contains("idc-gang"),
        "{text}"
    );
    // The same id on every read; filters narrow.
    let again = domains(&m.app, "?sku=H100-80G&region=cn-east-2&min_nodes=3").await;
    assert_eq!(
        again["domains"].as_array().map(Vec::len),
        Some(1),
        "{again}"
    );
    assert_eq!(again["domains"][0]["domain_id"], rows[0]["domain_id"]);

    // A 3×8 gang fits only pod-a (pod-b is cheaper but has two nodes; `solo` has no domain).
    let (s, v, _) = m
        .buyer
        .post("/v1/bids", gang_bid("g1", 3, 8, "domain"), None)
        .await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["status"], "filled", "{v}");
    assert_eq!(v["filled_gpus"], 24);
    let bid = v["bid_id"].as_str().expect("bid").to_string();
    let members: Vec<String> = v["fills"]
        .as_array()
        .expect("fills")
        .iter()
        .map(|f| f["lease_id"].as_str().expect("lease").to_string())
        .collect();
    assert_eq!(members.len(), 3);
    let mut names: Vec<String> = v["fills"]
        .as_array()
        .expect("fills")
        .iter()
        .map(|f| {
            m.node_name(f["node_id"].as_str().expect("node"))
                .to_string()
        })
        .collect();
    let in_rank_order = names.clone();
    names.sort();
    assert_eq!(names, ["a1", "a2", "a3"], "{v}");
    let (formed, _) = buyer_ws.until("gang_formed").await;
    assert_eq!(formed["bid_id"], bid.as_str());
    assert_eq!(formed["members"], json!(members));

    // Another 3-node gang: no domain holds 3 whole nodes now; the most one gives is 2.
    let (s, v, _) = m
        .buyer
        .post("/v1/bids", gang_bid("g2", 3, 8, "domain"), None)
        .await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["status"], "closed", "{v}");
    assert_eq!(v["close_reason"], "gang_incomplete", "{v}");
    assert_eq!(v["close_detail"]["fillable"], 2, "{v}");
    let msg = v["close_detail"]["message"].as_str().expect("message");
    assert!(
        msg.contains("no fabric domain holds 3 nodes of 8 free GPUs now")
            && msg.contains("the most one domain could give is 2")
            && msg.contains("scope region"),
        "{msg}"
    );
    assert_eq!(v["fills"], json!([]));
    // A 4-node gang: no domain has 4 nodes at all (pod-a, the largest, has 3): said at once.
    let (s, v, _) = m
        .buyer
        .post("/v1/bids", gang_bid("g2b", 4, 8, "domain"), None)
        .await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["close_reason"], "gang_too_large", "{v}");
    assert_eq!(v["close_detail"]["fillable"], 3, "{v}");
    let msg = v["close_detail"]["message"].as_str().expect("message");
    assert!(
        msg.contains("no fabric domain has 4 nodes of this SKU at all: the largest has 3"),
        "{msg}"
    );

    // The members' gang view: the buyer's without node names, the supplier's (and its
    // agent's node lease list) with them, in rank order.
    for (rank, id) in members.iter().enumerate() {
        let l = lease(&m.buyer, id).await;
        let g = &l["gang"];
        assert_eq!(g["id"], bid.as_str(), "{l}");
        assert_eq!(g["rank"], rank, "{l}");
        assert_eq!(g["size"], 3);
        assert_eq!(g["members"], json!(members));
        assert_eq!(
            (g["ready"].clone(), g["status"].clone()),
            (json!(false), json!("provisioning"))
        );
        assert!(g.get("nodes").is_none(), "{l}");
        let l = lease(&m.sup, id).await;
        assert_eq!(l["gang"]["nodes"], json!(in_rank_order), "{l}");
    }
    let n0 = lease(&m.sup, &members[0]).await["node_id"]
        .as_str()
        .expect("node")
        .to_string();
    let (s, nl, _) = m.sup.get(&format!("/v1/nodes/{n0}/leases")).await;
    assert_eq!(s, 200, "{nl}");
    assert_eq!(nl["leases"][0]["gang"]["rank"], 0, "{nl}");
    assert_eq!(nl["leases"][0]["gang"]["nodes"], json!(in_rank_order));

    // Rank 0 ready: it waits for the rest, unbilled, without a deadline.
    let ready = |id: &str, port: u16| {
        let id = id.to_string();
        let sup = &m.sup;
        async move {
            let (s, r, _) = sup
                .post(
                    &format!("/v1/leases/{id}/ready"),
                    json!({"access": access(port)}),
                    None,
                )
                .await;
            assert_eq!(s, 200, "{r}");
            r
        }
    };
    let r0 = ready(&members[0], 2200).await;
    assert_eq!(r0["state"], "provisioning", "{r0}");
    assert_eq!(r0["gang"]["status"], "waiting_for_gang", "{r0}");
    assert_eq!(r0["ready_ms"], Value::Null);
    assert_eq!(r0["provision_deadline_ms"], Value::Null);
    let (mr, _) = buyer_ws.until("gang_member_ready").await;
    assert_eq!(mr["lease_id"], members[0].as_str());
    let l0 = lease(&m.buyer, &members[0]).await;
    assert_eq!(l0["gang"]["status"], "waiting_for_gang");
    assert_eq!(l0["billed_seconds"], 0);
    assert_eq!(l0["charged"], Value::Null, "{l0}");

    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let r1 = ready(&members[1], 2201).await;
    assert_eq!(r1["gang"]["status"], "waiting_for_gang", "{r1}");
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    // The last member: the gang is whole, every member runs from this ready.
    let r2 = ready(&members[2], 2202).await;
    assert_eq!(r2["state"], "active", "{r2}");
    assert_eq!(r2["gang"]["status"], "ready");
    assert_eq!(r2["gang"]["ready"], true);
    let whole_ms = r2["ready_ms"].as_i64().expect("ready");
    let (gr, _) = buyer_ws.until("gang_ready").await;
    assert_eq!(
        (gr["bid_id"].clone(), gr["at_ms"].clone()),
        (json!(bid), json!(whole_ms))
    );
    for (i, id) in members.iter().enumerate() {
        let l = lease(&m.buyer, id).await;
        assert_eq!(l["state"], "active", "{l}");
        assert_eq!(l["ready_ms"], whole_ms, "{l}");
        // Each member keeps the access details of its own ready report.
        assert_eq!(l["access"]["ssh_port"], 2200 + i as u64, "{l}");
    }
    // Release by bid: every member ends, billed from the gang's ready.
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let (s, rel, _) = m
        .buyer
        .post(&format!("/v1/bids/{bid}/release"), json!({}), None)
        .await;
    assert_eq!(s, 200, "{rel}");
    let mut sorted = members.clone();
    sorted.sort_by_key(|l| l.parse::<u64>().expect("id"));
    assert_eq!(rel["released"], json!(sorted), "{rel}");
    assert_eq!(rel["canceled"], false);
    let at = rel["at_ms"].as_i64().expect("at");
    // Billed from the whole gang's ready (rank 0's own ready came 2.2 s earlier: billing from
    // it would show at least 2 more seconds).
    let billed = (at - whole_ms + 999) / 1000;
    for id in &members {
        let l = lease(&m.buyer, id).await;
        assert_eq!(l["state"], "ended", "{l}");
        assert_eq!(l["end_reason"], "released");
        assert_eq!(l["billed_seconds"], billed, "{l}");
        assert!(l.get("gang").is_none(), "{l}");
    }
    // Nothing left to release; another buyer's bid is not found either.
    let (s, e, _) = m
        .buyer
        .post(&format!("/v1/bids/{bid}/release"), json!({}), None)
        .await;
    assert_eq!((s, e["code"].clone()), (404, json!("not_found")), "{e}");
    let (_, other_key) = m.app.account("team-other", "buyer").await;
    let (s, e, _) = m
        .app
        .client(Some(&other_key))
        .post(&format!("/v1/bids/{bid}/release"), json!({}), None)
        .await;
    assert_eq!(s, 404, "{e}");
    // pod-a's GPUs wipe: its nodes are not whole free now.
    let d = domains(&m.app, "?sku=H100-80G").await;
    assert_eq!(d["domains"].as_array().map(Vec::len), Some(1), "{d}");
    assert_eq!(d["domains"][0]["free_nodes_total"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gang_domain_and_min_gpus_input_is_refused_422_by_field() {
    let m = market().await;
    let bad = |v: &(u16, Value, reqwest::header::HeaderMap), code: &str, field: &str| {
        assert_eq!(v.0, 422, "{}", v.1);
        assert_eq!(v.1["code"], code, "{}", v.1);
        assert_eq!(v.1["field"], field, "{}", v.1);
    };
    // Nodes: domain and NIC bounds.
    let base = json!({"name": "x1", "sku": "H100-80G", "gpus": 8, "region": "cn-east-2",
        "jurisdiction": "CN", "interconnect": "infiniband"});
    for (extra, field) in [
        (json!({"fabric_domain": "pod a"}), "fabric_domain"),
        (json!({"fabric_domain": "x".repeat(65)}), "fabric_domain"),
        (json!({"fabric_domain": ""}), "fabric_domain"),
        (json!({"nic_gbps": 0}), "nic_gbps"),
        (json!({"nic_gbps": 25_601}), "nic_gbps"),
    ] {
        let mut body = base.clone();
        for (k, v) in extra.as_object().expect("obj") {
            body[k] = v.clone();
        }
        bad(
            &m.sup.post("/v1/nodes", body, None).await,
            "invalid_domain",
            field,
        );
    }
    // Update: merged with the node's record; "" clears the domain.
    let b1 = m
        .nodes
        .iter()
        .find(|(n, _)| n == "b1")
        .expect("b1")
        .1
        .clone();
    let (s, v, _) = m
        .sup
        .patch(&format!("/v1/nodes/{b1}"), json!({"nic_gbps": 400}))
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        (v["fabric_domain"].clone(), v["nic_gbps"].clone()),
        (json!("pod-b"), json!(400))
    );
    bad(
        &m.sup
            .patch(&format!("/v1/nodes/{b1}"), json!({"fabric_domain": "a/b"}))
            .await,
        "invalid_domain",
        "fabric_domain",
    );
    let (s, v, _) = m
        .sup
        .patch(&format!("/v1/nodes/{b1}"), json!({"fabric_domain": ""}))
        .await;
    assert_eq!(s, 200, "{v}");
    assert!(v.get("fabric_domain").is_none(), "{v}");
    assert_eq!(v["nic_gbps"], 400);
    let (s, v, _) = m
        .sup
        .patch(
            &format!("/v1/nodes/{b1}"),
            json!({"fabric_domain": "pod-b"}),
        )
        .await;
    assert_eq!(
        (s, v["fabric_domain"].clone()),
        (200, json!("pod-b")),
        "{v}"
    );

    // Bids: a gang's shape, gpus and min_gpus.
    let post = |body: Value| {
        let buyer = &m.buyer;
        async move { buyer.post("/v1/bids", body, None).await }
    };
    let mut no_shape = gang_bid("e1", 2, 8, "domain");
    no_shape.as_object_mut().expect("obj").remove("gang");
    bad(&post(no_shape).await, "invalid_gang", "gang");
    let mut spread = gang_bid("e2", 2, 8, "domain");
    spread["placement"] = json!("spread");
    spread["gpus"] = json!(16);
    bad(&post(spread).await, "invalid_gang", "gang");
    let mut wrong = gang_bid("e3", 2, 8, "domain");
    wrong["gpus"] = json!(15);
    bad(&post(wrong).await, "invalid_gang", "gpus");
    bad(
        &post(gang_bid("e4", 100, 16, "domain")).await,
        "invalid_gang",
        "gang",
    );
    let plain = json!({"client_order_id": "e5", "sku": "H100-80G", "limit_price": "25",
        "kind": "spot", "time_in_force": "ioc", "launch": launch()});
    bad(&post(plain.clone()).await, "invalid_gpus", "gpus");
    let mut single = plain.clone();
    single["gpus"] = json!(8);
    single["min_gpus"] = json!(4);
    bad(&post(single).await, "invalid_gpus", "min_gpus");
    let mut gtc = plain.clone();
    gtc["gpus"] = json!(8);
    gtc["placement"] = json!("spread");
    gtc["time_in_force"] = json!("gtc");
    gtc["min_gpus"] = json!(4);
    bad(&post(gtc).await, "invalid_gpus", "min_gpus");
    let mut over = plain.clone();
    over["gpus"] = json!(8);
    over["placement"] = json!("spread");
    over["min_gpus"] = json!(9);
    bad(&post(over).await, "invalid_gpus", "min_gpus");
    let mut gang_min = gang_bid("e6", 2, 8, "domain");
    gang_min["min_gpus"] = json!(8);
    bad(&post(gang_min).await, "invalid_gpus", "min_gpus");
    // Nothing was placed by any of them.
    let (s, v, _) = m.buyer.get("/v1/leases?state=all").await;
    assert_eq!((s, v["leases"].clone()), (200, json!([])), "{v}");

    // min_gpus: 48 GPUs listed, a floor of 50 → nothing fills, with what could.
    let mut floor = plain.clone();
    floor["client_order_id"] = json!("m1");
    floor["gpus"] = json!(60);
    floor["placement"] = json!("spread");
    floor["min_gpus"] = json!(50);
    let (s, v, _) = post(floor).await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(
        (
            v["status"].clone(),
            v["close_reason"].clone(),
            v["filled_gpus"].clone()
        ),
        (json!("closed"), json!("min_gpus"), json!(0)),
        "{v}"
    );
    assert_eq!(v["close_detail"]["fillable"], 48, "{v}");
    let msg = v["close_detail"]["message"].as_str().expect("message");
    assert!(
        msg.contains("only 48 GPUs could fill now") && msg.contains("50"),
        "{msg}"
    );

    // A region-scoped gang takes nodes of no domain too: 6 nodes of one region.
    let (s, v, _) = post(gang_bid("r1", 6, 8, "region")).await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["status"], "filled", "{v}");
    let bid = v["bid_id"].as_str().expect("bid").to_string();
    let (s, b, _) = m.buyer.get("/v1/leases").await;
    assert_eq!(s, 200);
    assert!(
        b["leases"]
            .as_array()
            .expect("leases")
            .iter()
            .all(|l| l["gang"]["id"] == bid.as_str() && l["gang"]["size"] == 6),
        "{b}"
    );

    // The domains view's query bounds.
    for q in [
        "?gpus_per_node=0",
        "?gpus_per_node=17",
        "?min_nodes=0",
        "?min_nodes=1025",
        "?limit=0",
        "?limit=501",
    ] {
        let (s, e, _) = m
            .app
            .client(None)
            .get(&format!("/v1/inventory/domains{q}"))
            .await;
        assert_eq!(
            (s, e["code"].clone()),
            (400, json!("invalid_query")),
            "{q}: {e}"
        );
    }
    let (s, e, _) = m.app.client(None).get("/v1/inventory/domains?sku=Z9").await;
    assert_eq!((s, e["code"].clone()), (400, json!("unknown_sku")), "{e}");
    let (s, e, _) = m
        .app
        .client(None)
        .get("/v1/inventory/domains?colour=red")
        .await;
    assert_eq!(s, 400, "{e}");
    let (s, e, _) = m
        .app
        .client(None)
        .get("/v1/inventory/domains?region=mars-1")
        .await;
    assert_eq!(
        (s, e["code"].clone()),
        (422, json!("unknown_region")),
        "{e}"
    );
}
