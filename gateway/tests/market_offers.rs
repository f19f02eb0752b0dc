//! Issue 26, "bids that see what they buy": the public offer search `GET /v1/market/offers`
//! (every filter in and out, orders, limits, the refusals, anonymity), the site filters of
//! `GET /v1/inventory` (jurisdiction, least fabric, NVLink) and the host size of an
//! attestation (CPU cores, RAM, disk: bounds at the edge, shown in the node view).

use crate::support::api::{Backend, Client, TestApp, bid, offer, quiet_opts};
use serde_json::{Value, json};

/// A node body with its site.
fn site_node(name: &str, sku: &str, gpus: u32, region: &str, site: (&str, &str, bool)) -> Value {
    json!({"name": name, "sku": sku, "gpus": gpus, "region": region, "jurisdiction": site.0,
           "interconnect": site.1, "nvlink": site.2})
}

/// An attestation of `gpus` H100s with `cuda`, NICs of `nics` Gb/s and the host size `size`
/// (`null` fields left out).
fn host(tag: &str, gpus: u32, cuda: &str, nics: &[u32], size: Value) -> Value {
    let mut a = json!({
        "gpus": (0..gpus).map(|i| json!({"index": i, "uuid": format!("GPU-{tag}-{i}"),
            "model": "NVIDIA H100 80GB HBM3", "memory_mib": 81_559, "pcie_gen": 5,
            "pcie_width": if i == 1 { 8 } else { 16 }}))
            .collect::<Vec<_>>(),
        "driver_version": "550.54.15",
        "cuda_version": cuda,
        "nics": nics.iter().enumerate()
            .map(|(i, g)| json!({"name": format!("mlx5_{i}"), "gbps": g}))
            .collect::<Vec<_>>(),
    });
    for (k, v) in size.as_object().expect("object") {
        a[k] = v.clone();
    }
    a
}

async fn register(c: &Client, body: Value) -> String {
    let (s, v, _) = c.post("/v1/nodes", body, None).await;
    assert_eq!(s, 201, "{v}");
    v["id"].as_str().expect("node id").to_string()
}

async fn post_offer(c: &Client, node: &str, gpus: u32, spot: &str, pre: Option<&str>) -> String {
    let (s, v, _) = c
        .post("/v1/offers", offer(node, gpus, spot, pre), None)
        .await;
    assert_eq!(s, 201, "{v}");
    v["id"].as_str().expect("offer id").to_string()
}

async fn attest(c: &Client, node: &str, body: Value) {
    let (s, v, _) = c
        .post(&format!("/v1/nodes/{node}/attestation"), body, None)
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["attested"], true, "{v}");
}

/// The offer ids of a search, in its order (asserting 200 and `count`).
async fn ids(c: &Client, query: &str) -> Vec<String> {
    let (s, v, _) = c.get(&format!("/v1/market/offers{query}")).await;
    assert_eq!(s, 200, "{query}: {v}");
    let rows = v["offers"].as_array().expect("offers");
    assert_eq!(v["count"], rows.len(), "{query}: {v}");
    rows.iter()
        .map(|r| r["offer_id"].as_str().expect("offer_id").to_string())
        .collect()
}

/// A refused search: (status, code, field).
async fn refused(c: &Client, query: &str) -> (u16, String, Value) {
    let (s, v, _) = c.get(&format!("/v1/market/offers{query}")).await;
    (
        s,
        v["code"].as_str().unwrap_or_default().to_string(),
        v["field"].clone(),
    )
}

/// By hand: o1 on n1 (H100 ×8, cn-east-2, CN, infiniband, NVLink, spot 20 / preemptible 14,
/// CUDA 12.4, 128 cores, 1,031,891 MiB, 3,840 GB, NICs 400 + 400 = 800 Gb/s); o2 on n2 (H100
/// ×4, cn-north-1, HK, roce, no NVLink, spot 18, CUDA 12.10, 32 cores, 257,000 MiB = 250.98
/// GiB, 1,000 GB, 100 Gb/s); o3 on n3 (A100 ×8, cn-east-2, CN, pcie, spot 9 / preemptible 6,
/// never attested); n4 (H100, no offer) is not listed. Every filter keeps exactly the offers
/// the figures say; a host-fact filter drops n3 (unknown facts).
#[tokio::test]
async fn offer_search_filters_orders_and_stays_anonymous() {
    let app = TestApp::start(Backend::Embedded, quiet_opts()).await;
    let (sup_id, sup_key) = app.account("idc-market-secret", "supplier").await;
    let (buyer_id, buyer_key) = app.account("team-market", "buyer").await;
    app.deposit(&buyer_id, "100000.00").await;
    let sup = app.client(Some(&sup_key));
    let buyer = app.client(Some(&buyer_key));
    let public = app.client(None);

    let ib = ("CN", "infiniband", true);
    let n1 = register(&sup, site_node("mkt-n1", "H100-80G", 8, "cn-east-2", ib)).await;
    let n2 = register(
        &sup,
        site_node("mkt-n2", "H100-80G", 4, "cn-north-1", ("HK", "roce", false)),
    )
    .await;
    let n3 = register(
        &sup,
        site_node("mkt-n3", "A100-80G", 8, "cn-east-2", ("CN", "pcie", false)),
    )
    .await;
    let n4 = register(&sup, site_node("mkt-n4", "H100-80G", 8, "cn-east-2", ib)).await;
    let o1 = post_offer(&sup, &n1, 8, "20", Some("14")).await;
    let o2 = post_offer(&sup, &n2, 4, "18", None).await;
    let o3 = post_offer(&sup, &n3, 8, "9", Some("6")).await;
    attest(
        &sup,
        &n1,
        host(
            "m1",
            8,
            "12.4",
            &[400, 400],
            json!({"cpu_cores": 128, "ram_mib": 1_031_891, "disk_gb": 3_840}),
        ),
    )
    .await;
    attest(
        &sup,
        &n2,
        host(
            "m2",
            4,
            "12.10",
            &[100],
            json!({"cpu_cores": 32, "ram_mib": 257_000, "disk_gb": 1_000}),
        ),
    )
    .await;
    attest(&sup, &n4, host("m4", 8, "12.4", &[400], json!({}))).await;

    // Everything listed, cheapest first; n4 has no offer.
    let (s, all, _) = public.get("/v1/market/offers").await;
    assert_eq!(s, 200, "{all}");
    assert_eq!(all["count"], 3, "{all}");
    let row = |id: &str| {
        all["offers"]
            .as_array()
            .expect("offers")
            .iter()
            .find(|r| r["offer_id"] == id)
            .expect("row")
            .clone()
    };
    let r1 = row(&o1);
    assert_eq!(r1["reliability"]["status"], "new", "{r1}");
    let mut r1_facts = r1.clone();
    r1_facts.as_object_mut().expect("row").remove("reliability");
    assert_eq!(
        r1_facts,
        json!({"offer_id": o1, "sku": "H100-80G", "region": "cn-east-2", "jurisdiction": "CN",
               "interconnect": "infiniband", "nvlink": true, "free_gpus": 8, "node_gpus": 8,
               "spot_price": "20.0000", "preemptible_price": "14.0000", "min_lease_s": 1,
               "max_lease_s": 86400,
               "available_until_ms": r1["available_until_ms"], "verification": "none",
               "sla": null, "gpu_model": "NVIDIA H100 80GB HBM3", "gpu_memory_mib": 81_559,
               "pcie": "5x8", "driver_version": "550.54.15", "cuda_version": "12.4",
               "nic_gbps": 800, "cpu_cores": 128, "ram_mib": 1_031_891, "disk_gb": 3_840}),
        "{r1}"
    );
    // The reliability is the offer view's (the same function).
    let (_, own, _) = sup.get(&format!("/v1/offers/{o1}")).await;
    assert_eq!(r1["reliability"], own["reliability"], "{own}");
    let r3 = row(&o3);
    for f in [
        "gpu_model",
        "gpu_memory_mib",
        "pcie",
        "driver_version",
        "cuda_version",
        "nic_gbps",
        "cpu_cores",
        "ram_mib",
        "disk_gb",
    ] {
        assert_eq!(r3[f], Value::Null, "{f} of a node never attested: {r3}");
    }
    assert_eq!(row(&o2)["cuda_version"], "12.10");
    // Anonymous: no supplier, no node name or id anywhere in the answer.
    let text = all.to_string();
    for secret in [&sup_id, &n1, &n2, &n3, &n4] {
        assert!(
            !text.contains(&format!("\"{secret}\"")),
            "{secret} in {text}"
        );
    }
    for secret in ["mkt-n", "idc-market-secret", "node_id", "supplier"] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }

    let (a, b, c) = (o1.as_str(), o2.as_str(), o3.as_str());
    for (query, want) in [
        ("", vec![c, b, a]),
        ("?sku=A100-80G", vec![c]),
        ("?sku=H100-80G", vec![b, a]),
        ("?region=cn-north-1", vec![b]),
        ("?region=cn-south-1", vec![]),
        ("?jurisdiction=HK", vec![b]),
        ("?jurisdiction=CN", vec![c, a]),
        ("?min_interconnect=pcie", vec![c, b, a]),
        ("?min_interconnect=roce", vec![b, a]),
        ("?min_interconnect=infiniband", vec![a]),
        ("?nvlink=true", vec![a]),
        ("?nvlink=false", vec![c, b, a]),
        ("?min_gpus=5", vec![c, a]),
        ("?min_gpus=8", vec![c, a]),
        ("?min_gpus=9", vec![]),
        ("?max_price=18", vec![c, b]),
        ("?max_price=17.9999", vec![c]),
        ("?kind=spot", vec![c, b, a]),
        ("?kind=preemptible", vec![c, a]),
        ("?kind=preemptible&max_price=14", vec![c, a]),
        ("?kind=preemptible&max_price=13.99", vec![c]),
        ("?min_cpu_cores=32", vec![b, a]),
        ("?min_cpu_cores=33", vec![a]),
        ("?min_ram_gib=250", vec![b, a]),
        ("?min_ram_gib=251", vec![a]),
        ("?min_disk_gb=1000", vec![b, a]),
        ("?min_disk_gb=1001", vec![a]),
        ("?min_nic_gbps=100", vec![b, a]),
        ("?min_nic_gbps=101", vec![a]),
        ("?min_nic_gbps=800", vec![a]),
        ("?min_nic_gbps=801", vec![]),
        // Numerically: 12.10 > 12.5 > 12.4.
        ("?min_cuda=12.4", vec![b, a]),
        ("?min_cuda=12.5", vec![b]),
        ("?min_cuda=12", vec![b, a]),
        ("?min_cuda=12.10.1", vec![]),
        ("?min_cuda=11.8", vec![b, a]),
        // The market does not verify and every node is new: trust keeps nothing.
        ("?verified=true", vec![]),
        ("?verified=false", vec![c, b, a]),
        ("?min_reliability=0", vec![]),
        // No offer states SLA terms: none promises anything.
        ("?min_sla=90", vec![]),
        ("?min_sla_multiple=1", vec![]),
        (
            "?sku=H100-80G&jurisdiction=CN&min_interconnect=infiniband&nvlink=true&min_cuda=12.4",
            vec![a],
        ),
        ("?order=price", vec![c, b, a]),
        // Equal free GPUs: the cheaper first.
        ("?order=gpus", vec![c, a, b]),
        // No score anywhere: price decides.
        ("?order=reliability", vec![c, b, a]),
        ("?limit=1", vec![c]),
        ("?limit=500", vec![c, b, a]),
        ("?order=gpus&limit=2", vec![c, a]),
    ] {
        assert_eq!(ids(&public, query).await, want, "{query}");
    }

    for (query, want) in [
        ("?limit=0", (400, "invalid_query", json!("limit"))),
        ("?limit=501", (400, "invalid_query", json!("limit"))),
        ("?sku=H100", (400, "unknown_sku", json!("sku"))),
        ("?region=mars-1", (422, "unknown_region", json!("region"))),
        (
            "?jurisdiction=cn",
            (400, "invalid_jurisdiction", json!("jurisdiction")),
        ),
        (
            "?min_reliability=1.5",
            (422, "invalid_constraints", json!("min_reliability")),
        ),
        (
            "?min_reliability=0.99999",
            (422, "invalid_constraints", json!("min_reliability")),
        ),
        (
            "?min_sla=100",
            (422, "invalid_constraints", json!("min_sla")),
        ),
        (
            "?min_sla=89.99",
            (422, "invalid_constraints", json!("min_sla")),
        ),
        (
            "?min_sla_multiple=51",
            (422, "invalid_constraints", json!("min_sla_multiple")),
        ),
        ("?min_gpus=17", (400, "invalid_query", json!("min_gpus"))),
        (
            "?min_cpu_cores=4097",
            (400, "invalid_query", json!("min_cpu_cores")),
        ),
        (
            "?min_ram_gib=2147483648",
            (400, "invalid_query", json!("min_ram_gib")),
        ),
        (
            "?min_nic_gbps=1000001",
            (400, "invalid_query", json!("min_nic_gbps")),
        ),
        ("?max_price=abc", (400, "invalid_price", json!("max_price"))),
        ("?max_price=0", (400, "invalid_price", json!("max_price"))),
        (
            "?max_price=1.00001",
            (400, "invalid_price", json!("max_price")),
        ),
        ("?min_cuda=12.x", (400, "invalid_query", json!("min_cuda"))),
        ("?min_cuda=", (400, "invalid_query", json!("min_cuda"))),
    ] {
        let (s, code, field) = refused(&public, query).await;
        assert_eq!((s, code.as_str(), field), want, "{query}");
    }
    for query in [
        "?bogus=1",
        "?min_interconnect=fast",
        "?kind=reserved",
        "?order=cheapest",
        "?nvlink=maybe",
        "?min_gpus=-1",
    ] {
        let (s, code, _) = refused(&public, query).await;
        assert_eq!((s, code.as_str()), (400, "bad_query"), "{query}");
    }

    // A bid takes 3 of n2's 4 GPUs (the cheapest H100): its row shows 1 free and drops out
    // of `min_gpus=2`; `order=gpus` puts it last.
    let (s, v, _) = buyer
        .post(
            "/v1/bids",
            bid("mkt-b1", "H100-80G", 3, "18.5", "spot", "ioc"),
            None,
        )
        .await;
    assert_eq!((s, v["filled_gpus"].as_u64()), (201, Some(3)), "{v}");
    assert_eq!(ids(&public, "?min_gpus=2").await, vec![c, a]);
    assert_eq!(ids(&public, "?order=gpus").await, vec![c, a, b]);
    let (_, v, _) = public.get("/v1/market/offers?region=cn-north-1").await;
    assert_eq!(
        (
            v["offers"][0]["free_gpus"].clone(),
            v["offers"][0]["node_gpus"].clone()
        ),
        (json!(1), json!(4)),
        "{v}"
    );
}

/// The site filters of `GET /v1/inventory`: only the capacity a bid with those constraints
/// admits, with `constraints` in the answer; without them the engine's levels as before.
#[tokio::test]
async fn inventory_filters_on_the_site_bids_filter_on() {
    let app = TestApp::start(Backend::Embedded, quiet_opts()).await;
    let (_, sup_key) = app.account("idc-site", "supplier").await;
    let sup = app.client(Some(&sup_key));
    let public = app.client(None);
    let n1 = register(
        &sup,
        site_node("s1", "H100-80G", 8, "cn-east-2", ("CN", "infiniband", true)),
    )
    .await;
    let n2 = register(
        &sup,
        site_node("s2", "H100-80G", 4, "cn-east-2", ("HK", "roce", false)),
    )
    .await;
    post_offer(&sup, &n1, 8, "20", Some("14")).await;
    post_offer(&sup, &n2, 4, "18", None).await;
    let levels = |v: &Value| {
        v["levels"]
            .as_array()
            .expect("levels")
            .iter()
            .map(|l| {
                (
                    l["kind"].as_str().unwrap_or_default().to_string(),
                    l["price"].as_str().unwrap_or_default().to_string(),
                    l["free_gpus"].as_u64().unwrap_or_default(),
                )
            })
            .collect::<Vec<_>>()
    };
    let lv = |k: &str, p: &str, n: u64| (k.to_string(), p.to_string(), n);
    let (s, v, _) = public.get("/v1/inventory?sku=H100-80G").await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        levels(&v),
        vec![
            lv("spot", "18.0000", 4),
            lv("spot", "20.0000", 8),
            lv("preemptible", "14.0000", 8)
        ],
        "{v}"
    );
    assert!(v.get("constraints").is_none(), "{v}");
    for (query, want) in [
        ("&jurisdiction=HK", vec![lv("spot", "18.0000", 4)]),
        (
            "&min_interconnect=infiniband",
            vec![lv("spot", "20.0000", 8), lv("preemptible", "14.0000", 8)],
        ),
        (
            "&min_interconnect=roce",
            vec![
                lv("spot", "18.0000", 4),
                lv("spot", "20.0000", 8),
                lv("preemptible", "14.0000", 8),
            ],
        ),
        (
            "&nvlink=true",
            vec![lv("spot", "20.0000", 8), lv("preemptible", "14.0000", 8)],
        ),
        ("&nvlink=true&jurisdiction=HK", vec![]),
    ] {
        let (s, v, _) = public
            .get(&format!("/v1/inventory?sku=H100-80G{query}"))
            .await;
        assert_eq!(s, 200, "{query}: {v}");
        assert_eq!(levels(&v), want, "{query}: {v}");
        assert!(v["constraints"].is_object(), "{query}: {v}");
    }
    let (_, v, _) = public
        .get("/v1/inventory?sku=H100-80G&jurisdiction=HK&min_interconnect=roce")
        .await;
    assert_eq!(
        v["constraints"],
        json!({"jurisdiction": "HK", "min_interconnect": "roce", "nvlink": false}),
        "{v}"
    );
    // Every SKU at once: the H100 snapshot filtered alike.
    let (_, all, _) = public.get("/v1/inventory?nvlink=true").await;
    let h100 = all["snapshots"]
        .as_array()
        .expect("snapshots")
        .iter()
        .find(|s| s["sku"] == "H100-80G")
        .expect("H100")
        .clone();
    assert_eq!(
        levels(&h100),
        vec![lv("spot", "20.0000", 8), lv("preemptible", "14.0000", 8)],
        "{all}"
    );
    let (s, v, _) = public.get("/v1/inventory?jurisdiction=cn").await;
    assert_eq!(
        (s, v["code"].as_str(), v["field"].as_str()),
        (400, Some("invalid_jurisdiction"), Some("jurisdiction")),
        "{v}"
    );
    let (s, v, _) = public.get("/v1/inventory?min_interconnect=fast").await;
    assert_eq!((s, v["code"].as_str()), (400, Some("bad_query")), "{v}");
}

/// The host size of an attestation: each figure optional, bounded at the edge (400
/// `invalid_attestation` naming it, nothing kept), shown in the node view.
#[tokio::test]
async fn attestation_host_size_is_bounded_and_shown() {
    let app = TestApp::start(Backend::Embedded, quiet_opts()).await;
    let (_, sup_key) = app.account("idc-size", "supplier").await;
    let sup = app.client(Some(&sup_key));
    let n = register(
        &sup,
        site_node("z1", "H100-80G", 2, "cn-east-2", ("CN", "pcie", false)),
    )
    .await;
    let path = format!("/v1/nodes/{n}/attestation");
    for (size, field) in [
        (json!({"cpu_cores": 0}), "cpu_cores"),
        (json!({"cpu_cores": 4097}), "cpu_cores"),
        (json!({"ram_mib": 0}), "ram_mib"),
        (json!({"ram_mib": 67_108_865_u64}), "ram_mib"),
        (json!({"disk_gb": 1_000_000_001_u64}), "disk_gb"),
    ] {
        let (s, v, _) = sup
            .post(&path, host("z", 2, "12.4", &[], size.clone()), None)
            .await;
        assert_eq!(
            (s, v["code"].as_str(), v["field"].as_str()),
            (400, Some("invalid_attestation"), Some(field)),
            "{size}: {v}"
        );
    }
    let (_, v, _) = sup.get(&format!("/v1/nodes/{n}")).await;
    assert!(v.get("attestation").is_none(), "refused: nothing kept: {v}");
    // A malformed figure (not a number) is the body's 400.
    let (s, v, _) = sup
        .post(
            &path,
            host("z", 2, "12.4", &[], json!({"cpu_cores": "8"})),
            None,
        )
        .await;
    assert_eq!(s, 400, "{v}");
    // The bounds themselves are taken; the node view shows the figures.
    attest(
        &sup,
        &n,
        host(
            "z",
            2,
            "12.4",
            &[],
            json!({"cpu_cores": 4096, "ram_mib": 67_108_864_u64, "disk_gb": 0}),
        ),
    )
    .await;
    let (_, v, _) = sup.get(&format!("/v1/nodes/{n}")).await;
    let a = &v["attestation"];
    assert_eq!(
        (
            a["cpu_cores"].clone(),
            a["ram_mib"].clone(),
            a["disk_gb"].clone()
        ),
        (json!(4096), json!(67_108_864_u64), json!(0)),
        "{v}"
    );
    // Without the figures (an older agent): none shown.
    attest(
        &sup,
        &n,
        host("z", 2, "12.4", &[], json!({"ram_mib": 1024})),
    )
    .await;
    let (_, v, _) = sup.get(&format!("/v1/nodes/{n}")).await;
    let a = &v["attestation"];
    assert_eq!(a["ram_mib"], 1024, "{v}");
    assert!(
        a.get("cpu_cores").is_none() && a.get("disk_gb").is_none(),
        "{v}"
    );
}
