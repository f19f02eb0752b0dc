//! The live market page in a real headless Chromium (Debian's `chromium` driven through
//! `chromedriver` by fantoccini): a new offer shows within 1 s, a node that stops
//! heartbeating disappears, a bid placed from the page becomes a lease shown on it, a bad key
//! gets a clear message. With lease delivery on (issue 15): a bid placed from the page with
//! an SSH key provisions, shows its SSH command once the supplier reports ready, and after
//! release shows its deletion record in the history; a supplier sees its assignments
//! (provisioning, then wiping), a held node and its Resume button. Issue 25: at 1280×900 and
//! on a 390×844 phone nothing a buyer or a supplier sees is clipped or sticks out, and the
//! recent-fills tape shows fills made before the page opened (screenshots: /tmp/page-*.png).
//! `.ci/run` installs `chromium` and `chromium-driver`.

use crate::support;
use crate::support::api::{Backend, TestApp, delivery_opts, node, offer, quiet_opts};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Driver {
    child: Child,
    port: u16,
}

impl Drop for Driver {
    fn drop(&mut self) {
        // chromedriver runs in its own process group with the browsers it starts: end them
        // all, also when a test panicked before closing its session. (Signalled directly:
        // this machine's `kill` command does not take `-PGID` the way procps does, and
        // shelling out to it killed unrelated processes.)
        if let Ok(pgid) = i32::try_from(self.child.id())
            && pgid > 1
        {
            // SAFETY: kill(2) with a negative pid signals exactly that process group.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn driver() -> Driver {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port");
    use std::os::unix::process::CommandExt;
    let child = Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect(
            "chromedriver is not installed: the browser tests need Debian's chromium and \
             chromium-driver (apt-get install -y chromium chromium-driver; .ci/run does it)",
        );
    Driver { child, port }
}

async fn browser(d: &Driver) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({"binary": "/usr/bin/chromium", "args": ["--headless=new", "--no-sandbox",
            "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1000"]}),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let c = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps.clone())
            .connect(&format!("http://127.0.0.1:{}", d.port))
            .await;
        match c {
            Ok(c) => return c,
            Err(e) if Instant::now() > deadline => panic!("chromedriver did not answer: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Text of the first element matching `css`, or "" when there is none. An element the page
/// replaced between the find and the read (live tables are rebuilt on feed events) is found
/// again, up to a few times, rather than read as "" (CI saw a wiped lease's history row read
/// as empty that way).
async fn text(c: &Client, css: &str) -> String {
    for _ in 0..5 {
        match c.find(Locator::Css(css)).await {
            Ok(e) => match e.text().await {
                Ok(t) => return t,
                Err(_) => continue,
            },
            Err(_) => return String::new(),
        }
    }
    String::new()
}

/// Clicks the first element matching `css`, finding it again when the page re-rendered it
/// between the find and the click (live tables are rebuilt on feed events, which made a
/// found row or button stale: seen in CI as `StaleElementReference` on a lease's release
/// button).
async fn click(c: &Client, css: &str, within: Duration) {
    let start = Instant::now();
    loop {
        let err = match c.find(Locator::Css(css)).await {
            Ok(e) => match e.click().await {
                Ok(_) => return,
                Err(err) => err,
            },
            Err(err) => err,
        };
        assert!(
            start.elapsed() < within,
            "click {css}: {err} after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Polls until `pred(text of css)` holds; answers the time it took.
async fn wait_for(
    c: &Client,
    css: &str,
    within: Duration,
    pred: impl Fn(&str) -> bool,
) -> Duration {
    let start = Instant::now();
    loop {
        let t = text(c, css).await;
        if pred(&t) {
            return start.elapsed();
        }
        assert!(start.elapsed() < within, "{css}: {t:?} after {within:?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[actix_web::test]
async fn offers_appear_within_a_second_and_silent_nodes_disappear() {
    let mut opts = quiet_opts();
    opts.tick_ms = 200;
    let app = TestApp::start(Backend::Embedded, opts).await;
    let (_, sup_key) = app.account("idc-1", "supplier").await;
    let sup = app.client(Some(&sup_key));
    let d = driver();
    let c = browser(&d).await;
    c.goto(&app.base).await.unwrap();
    wait_for(&c, "#status", Duration::from_secs(5), |t| t == "live").await;
    // Node a keeps heartbeating; node b falls silent after registering.
    let (s, v, _) = sup
        .post("/v1/nodes", node("a", "H100-80G", 8, "cn-east-2"), None)
        .await;
    assert_eq!(s, 201);
    let live = v["id"].as_str().unwrap().to_string();
    let (s, v, _) = sup
        .post("/v1/nodes", node("b", "H100-80G", 4, "cn-east-2"), None)
        .await;
    assert_eq!(s, 201);
    let silent = v["id"].as_str().unwrap().to_string();
    let registered = Instant::now();
    let (s, _, _) = sup
        .post("/v1/offers", offer(&live, 8, "21.5", None), None)
        .await;
    assert_eq!(s, 201);
    let took = wait_for(
        &c,
        "#overview tr[data-sku='H100-80G'] td:nth-child(2)",
        Duration::from_secs(1),
        |t| t == "8",
    )
    .await;
    assert!(
        took < Duration::from_secs(1),
        "new offer shown after {took:?}"
    );
    let (s, _, _) = sup
        .post("/v1/offers", offer(&silent, 4, "20", None), None)
        .await;
    assert_eq!(s, 201);
    wait_for(
        &c,
        "#overview tr[data-sku='H100-80G'] td:nth-child(2)",
        Duration::from_secs(1),
        |t| t == "12",
    )
    .await;
    click(
        &c,
        "#overview tr[data-sku='H100-80G']",
        Duration::from_secs(3),
    )
    .await;
    wait_for(&c, "#depth-spot tbody", Duration::from_secs(1), |t| {
        t.contains("20.0000") && t.contains("21.5000")
    })
    .await;
    // Heartbeat node a until node b has been silent past the 15 s timeout.
    while registered.elapsed() < Duration::from_secs(16) {
        let (s, _, _) = sup
            .post(
                &format!("/v1/nodes/{live}/heartbeat"),
                json!({"healthy_gpus": 8}),
                None,
            )
            .await;
        assert_eq!(s, 200);
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    wait_for(
        &c,
        "#overview tr[data-sku='H100-80G'] td:nth-child(2)",
        Duration::from_secs(5),
        |t| t == "8",
    )
    .await;
    let depth = text(&c, "#depth-spot tbody").await;
    assert!(
        depth.contains("21.5000") && !depth.contains("20.0000"),
        "{depth}"
    );
    c.close().await.unwrap();
}

#[actix_web::test]
async fn a_bid_from_the_page_becomes_a_lease_and_a_bad_key_is_explained() {
    let app = TestApp::start(Backend::Embedded, quiet_opts()).await;
    let (_, sup_key) = app.account("idc-1", "supplier").await;
    let (buyer_id, buyer_key) = app.account("team-a", "buyer").await;
    app.deposit(&buyer_id, "5000.00").await;
    let sup = app.client(Some(&sup_key));
    support::api::listed_node(&sup, "n1", "RTX4090-24G", 8, "cn-north-1", "1.98").await;
    let d = driver();
    let c = browser(&d).await;
    c.goto(&app.base).await.unwrap();
    wait_for(&c, "#status", Duration::from_secs(5), |t| t == "live").await;
    // A bad key: a clear message, still signed out.
    c.find(Locator::Id("key"))
        .await
        .unwrap()
        .send_keys("gpux_not_a_real_key")
        .await
        .unwrap();
    click(&c, "#signin-btn", Duration::from_secs(3)).await;
    wait_for(&c, "#error", Duration::from_secs(3), |t| {
        t.contains("API key is not valid")
    })
    .await;
    assert!(text(&c, "#error").await.contains("unauthorized"));
    // Sign in as the buyer and place a bid from the form.
    let key = c.find(Locator::Id("key")).await.unwrap();
    key.clear().await.unwrap();
    key.send_keys(&buyer_key).await.unwrap();
    click(&c, "#signin-btn", Duration::from_secs(3)).await;
    wait_for(&c, "#who", Duration::from_secs(3), |t| {
        t.contains("team-a (buyer)")
    })
    .await;
    wait_for(&c, "#balance", Duration::from_secs(3), |t| {
        t.contains("5000.00")
    })
    .await;
    click(
        &c,
        "#bid-sku option[value='RTX4090-24G']",
        Duration::from_secs(3),
    )
    .await;
    let gpus = c.find(Locator::Id("bid-gpus")).await.unwrap();
    gpus.clear().await.unwrap();
    gpus.send_keys("2").await.unwrap();
    c.find(Locator::Id("bid-limit"))
        .await
        .unwrap()
        .send_keys("2.50")
        .await
        .unwrap();
    c.find(Locator::Id("bid-duration"))
        .await
        .unwrap()
        .send_keys("3600")
        .await
        .unwrap();
    click(&c, "#bid-submit", Duration::from_secs(3)).await;
    wait_for(&c, "#notice", Duration::from_secs(3), |t| {
        t.contains("Filled: 2 GPU(s)")
    })
    .await;
    wait_for(&c, "#leases tbody", Duration::from_secs(3), |t| {
        t.contains("RTX4090-24G") && t.contains("1.9800")
    })
    .await;
    // The lease is the exchange's: the API lists the same one.
    let (_, v, _) = app.client(Some(&buyer_key)).get("/v1/leases").await;
    let id = v["leases"][0]["id"].as_str().unwrap().to_string();
    c.find(Locator::Css(&format!("#leases tr[data-lease='{id}']")))
        .await
        .unwrap();
    // The public side moved too: 6 of 8 GPUs left, and the fill is on the tape.
    wait_for(
        &c,
        "#overview tr[data-sku='RTX4090-24G'] td:nth-child(2)",
        Duration::from_secs(2),
        |t| t == "6",
    )
    .await;
    click(
        &c,
        "#overview tr[data-sku='RTX4090-24G']",
        Duration::from_secs(3),
    )
    .await;
    wait_for(&c, "#trades tbody", Duration::from_secs(2), |t| {
        t.contains("1.9800")
    })
    .await;
    let png = c.screenshot().await.unwrap();
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("market-page.png");
    std::fs::write(&out, &png).unwrap();
    assert!(png.starts_with(b"\x89PNG"));
    // Release from the page.
    click(
        &c,
        &format!("button[data-release='{id}']"),
        Duration::from_secs(3),
    )
    .await;
    wait_for(&c, "#notice", Duration::from_secs(3), |t| {
        t.contains("Lease released")
    })
    .await;
    wait_for(&c, "#leases tbody", Duration::from_secs(3), |t| {
        t.contains("none")
    })
    .await;
    c.close().await.unwrap();
}

/// The buyer's SSH key in the delivery tests (a made-up key: the exchange only checks its form).
const SSH_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIALty5BFpP1cVUmFtgJZtls3mU80MG4H/6awEVRAX3Dv buyer@laptop";

/// The access details the supplier reports, and the SSH line the page must show for them.
fn access() -> serde_json::Value {
    json!({"ssh_host": "203.0.113.7", "ssh_port": 2222, "ssh_user": "root",
           "urls": {"8888": "https://l1-8888.idc.example"}})
}
const SSH_LINE: &str = "ssh -p 2222 root@203.0.113.7";

/// Opens the page, waits for the live feed, signs in with `key` and waits for `who`.
async fn signed_in(app: &TestApp, d: &Driver, key: &str, who: &str) -> Client {
    let c = browser(d).await;
    c.goto(&app.base).await.unwrap();
    wait_for(&c, "#status", Duration::from_secs(5), |t| t == "live").await;
    c.find(Locator::Id("key"))
        .await
        .unwrap()
        .send_keys(key)
        .await
        .unwrap();
    click(&c, "#signin-btn", Duration::from_secs(3)).await;
    wait_for(&c, "#who", Duration::from_secs(3), |t| t.contains(who)).await;
    c
}

/// Types `text` into the form field `id` after clearing it.
async fn type_into(c: &Client, id: &str, text: &str) {
    let e = c.find(Locator::Id(id)).await.unwrap();
    e.clear().await.unwrap();
    e.send_keys(text).await.unwrap();
}

/// Whether an element matches `css` now.
async fn exists(c: &Client, css: &str) -> bool {
    c.find(Locator::Css(css)).await.is_ok()
}

#[actix_web::test]
async fn a_delivered_lease_shows_its_ssh_line_then_its_deletion_record() {
    let app = TestApp::start(Backend::Embedded, delivery_opts()).await;
    let (_, sup_key) = app.account("idc-1", "supplier").await;
    let (buyer_id, buyer_key) = app.account("team-a", "buyer").await;
    app.deposit(&buyer_id, "5000.00").await;
    let sup = app.client(Some(&sup_key));
    support::api::listed_node(&sup, "n1", "RTX4090-24G", 8, "cn-north-1", "1.98").await;
    let d = driver();
    let c = signed_in(&app, &d, &buyer_key, "team-a (buyer)").await;
    wait_for(&c, "#balance", Duration::from_secs(3), |t| {
        t.contains("5000.00")
    })
    .await;
    click(
        &c,
        "#bid-sku option[value='RTX4090-24G']",
        Duration::from_secs(3),
    )
    .await;
    type_into(&c, "bid-limit", "2.50").await;
    type_into(&c, "bid-duration", "3600").await;
    // This market delivers: without an SSH key the bid is refused with a clear message.
    click(&c, "#bid-submit", Duration::from_secs(3)).await;
    wait_for(&c, "#error", Duration::from_secs(3), |t| {
        t.contains("paste an SSH public key") && t.contains("launch_required")
    })
    .await;
    // With a key (pasted with a trailing newline, as a copied key file has), an image and a
    // port, it fills and provisions.
    type_into(&c, "bid-ssh", &format!("{SSH_KEY}\n")).await;
    type_into(&c, "bid-image", "nvcr.io/nvidia/pytorch:24.05-py3").await;
    type_into(&c, "bid-ports", "8888").await;
    click(&c, "#bid-submit", Duration::from_secs(3)).await;
    wait_for(&c, "#notice", Duration::from_secs(3), |t| {
        t.contains("Filled: 1 GPU(s)")
    })
    .await;
    let (_, v, _) = sup.get("/v1/leases").await;
    let lease = &v["leases"][0];
    let id = lease["id"].as_str().expect("a lease").to_string();
    assert_eq!(lease["state"], "provisioning", "{lease}");
    assert_eq!(lease["launch"]["ssh_keys"], json!([SSH_KEY]), "{lease}");
    assert_eq!(
        lease["launch"]["image"], "nvcr.io/nvidia/pytorch:24.05-py3",
        "{lease}"
    );
    assert_eq!(lease["launch"]["ports"], json!([8888]), "{lease}");
    let row = format!("#leases tr[data-lease='{id}']");
    wait_for(&c, &row, Duration::from_secs(3), |t| {
        t.contains("provisioning") && t.contains("left")
    })
    .await;
    assert!(!text(&c, "#leases tbody").await.contains("ssh -p"));
    // The supplier reports ready: the SSH line shows within a few seconds, from the feed.
    let (s, r, _) = sup
        .post(
            &format!("/v1/leases/{id}/ready"),
            json!({"access": access()}),
            None,
        )
        .await;
    assert_eq!(s, 200, "{r}");
    let took = wait_for(&c, "#leases tbody", Duration::from_secs(3), |t| {
        t.contains(SSH_LINE)
    })
    .await;
    assert!(took < Duration::from_secs(3), "SSH line after {took:?}");
    assert_eq!(
        text(&c, &format!("#leases tr[data-access-for='{id}'] code.ssh")).await,
        SSH_LINE
    );
    wait_for(
        &c,
        &format!("#leases tr[data-lease='{id}'][data-state='active']"),
        Duration::from_secs(2),
        |t| t.contains("running"),
    )
    .await;
    assert!(
        text(&c, &format!("#leases tr[data-access-for='{id}']"))
            .await
            .contains("https://l1-8888.idc.example")
    );
    // Copy: the clipboard, or (where the browser refuses it) the command selected for Ctrl+C.
    click(
        &c,
        &format!("#leases button[data-copy='{id}']"),
        Duration::from_secs(3),
    )
    .await;
    let start = Instant::now();
    loop {
        let button = text(&c, &format!("#leases button[data-copy='{id}']")).await;
        let selected = c
            .execute("return String(window.getSelection());", vec![])
            .await
            .unwrap();
        if button == "copied" || selected.as_str() == Some(SSH_LINE) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "copy did neither: button {button:?}, selection {selected}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Release from the page: the live list empties, the history shows the lease wiping.
    click(
        &c,
        &format!("button[data-release='{id}']"),
        Duration::from_secs(3),
    )
    .await;
    wait_for(&c, "#notice", Duration::from_secs(3), |t| {
        t.contains("Lease released")
    })
    .await;
    wait_for(&c, "#leases tbody", Duration::from_secs(3), |t| {
        t.contains("none")
    })
    .await;
    assert!(!exists(&c, "#history-wrap:not(.hidden)").await);
    click(&c, "#history-toggle", Duration::from_secs(3)).await;
    let hist = format!("#history tr[data-lease='{id}']");
    wait_for(&c, &hist, Duration::from_secs(3), |t| {
        t.contains("released") && t.contains("wiping") && t.contains("left")
    })
    .await;
    // The supplier reports the wipe; its method is shown as text, never as markup.
    let method = "<b>container removed</b> & NVMe blkdiscard <img src=x onerror=alert(1)>";
    let (s, r, _) = sup
        .post(
            &format!("/v1/leases/{id}/torn-down"),
            json!({"method": method}),
            None,
        )
        .await;
    assert_eq!(s, 200, "{r}");
    wait_for(&c, &hist, Duration::from_secs(3), |t| {
        t.contains("wiped") && t.contains(method)
    })
    .await;
    assert_eq!(text(&c, &format!("{hist} .method")).await, method);
    assert!(!exists(&c, "#history b, #history img").await);
    // Billed from ready to release, at the lease's price: the API's own figures.
    let (_, l, _) = app
        .client(Some(&buyer_key))
        .get(&format!("/v1/leases/{id}"))
        .await;
    // Waited for, not read once: the history table is rebuilt on feed events, and a row
    // read while it is replaced reads as empty (CI: `"" vs {...}` on this line).
    let charged = l["charged"].as_str().expect("charged").to_string();
    wait_for(&c, &hist, Duration::from_secs(3), |t| t.contains(&charged)).await;
    assert_eq!(l["end_reason"], "released");
    c.close().await.unwrap();
}

#[actix_web::test]
async fn a_supplier_sees_its_assignments_provisioning_then_wiping_and_resumes_a_held_node() {
    let app = TestApp::start(Backend::Embedded, delivery_opts()).await;
    let (_, sup_key) = app.account("idc-1", "supplier").await;
    let (buyer_id, buyer_key) = app.account("team-a", "buyer").await;
    app.deposit(&buyer_id, "5000.00").await;
    let sup = app.client(Some(&sup_key));
    let buyer = app.client(Some(&buyer_key));
    let (n1, _) =
        support::api::listed_node(&sup, "gpu-node-7", "H100-80G", 8, "cn-east-2", "20").await;
    let d = driver();
    let c = signed_in(&app, &d, &sup_key, "idc-1 (supplier)").await;
    let node_row = format!("#nodes tr[data-node='{n1}']");
    wait_for(&c, &node_row, Duration::from_secs(3), |t| {
        t.contains("gpu-node-7") && t.contains("online")
    })
    .await;
    wait_for(&c, "#assignments tbody", Duration::from_secs(3), |t| {
        t.contains("nothing to provision or wipe")
    })
    .await;
    // A buyer's bid fills on the node: a provisioning assignment with its launch spec and
    // deadline. The env (the buyer's input) is never markup on the page.
    let place = |coid: &str| {
        json!({"client_order_id": coid, "sku": "H100-80G", "gpus": 2, "limit_price": "25",
               "kind": "spot", "time_in_force": "ioc", "duration_s": 3600,
               "launch": {"ssh_keys": [SSH_KEY], "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                          "ports": [8888, 6006], "command": ["python", "train.py"],
                          "env": {"NOTE": "<img src=x onerror=alert(1)>"}}})
    };
    let (s, v, _) = buyer.post("/v1/bids", place("job-1"), None).await;
    assert_eq!(s, 201, "{v}");
    let id = v["fills"][0]["lease_id"]
        .as_str()
        .expect("filled")
        .to_string();
    let assignment = format!("#assignments tr[data-lease='{id}']");
    wait_for(&c, &assignment, Duration::from_secs(3), |t| {
        t.contains("provisioning")
            && t.contains("gpu-node-7")
            && t.contains("nvcr.io/nvidia/pytorch:24.05-py3")
            && t.contains("ports 8888, 6006")
            && t.contains("1 env var")
            && t.contains("left")
    })
    .await;
    assert!(!exists(&c, "#assignments img").await);
    // Ready: nothing left to do.
    let (s, r, _) = sup
        .post(
            &format!("/v1/leases/{id}/ready"),
            json!({"access": access()}),
            None,
        )
        .await;
    assert_eq!(s, 200, "{r}");
    wait_for(&c, "#assignments tbody", Duration::from_secs(3), |t| {
        t.contains("nothing to provision or wipe")
    })
    .await;
    wait_for(&c, "#sleases tbody", Duration::from_secs(3), |t| {
        t.contains(&id) && t.contains("running")
    })
    .await;
    // The buyer releases: until the supplier reports the wipe, its 2 GPUs are wiping.
    let (s, r, _) = buyer
        .post(&format!("/v1/leases/{id}/release"), json!({}), None)
        .await;
    assert_eq!(s, 200, "{r}");
    wait_for(&c, &assignment, Duration::from_secs(3), |t| {
        t.contains("wiping") && t.contains("GPU 0, 1") && t.contains("released")
    })
    .await;
    wait_for(
        &c,
        &format!("{node_row} td:nth-child(6)"),
        Duration::from_secs(3),
        |t| t == "2",
    )
    .await;
    let (s, r, _) = sup
        .post(
            &format!("/v1/leases/{id}/torn-down"),
            json!({"method": "container removed; NVMe blkdiscard"}),
            None,
        )
        .await;
    assert_eq!(s, 200, "{r}");
    wait_for(
        &c,
        &format!("{node_row} td:nth-child(6)"),
        Duration::from_secs(3),
        |t| t == "0",
    )
    .await;
    wait_for(&c, "#assignments tbody", Duration::from_secs(3), |t| {
        t.contains("nothing to provision or wipe")
    })
    .await;
    // A lease the node cannot deliver: reported failed, the node is held; Resume from the
    // page puts it back on the market.
    let (s, v, _) = buyer.post("/v1/bids", place("job-2"), None).await;
    assert_eq!(s, 201, "{v}");
    let id = v["fills"][0]["lease_id"]
        .as_str()
        .expect("filled")
        .to_string();
    let (s, r, _) = sup
        .post(
            &format!("/v1/leases/{id}/failed"),
            json!({"reason": "image pull failed"}),
            None,
        )
        .await;
    assert_eq!(s, 200, "{r}");
    wait_for(&c, &node_row, Duration::from_secs(3), |t| {
        t.contains("held") && t.contains("Resume")
    })
    .await;
    let why = c
        .find(Locator::Css(&format!("{node_row} .badge.held")))
        .await
        .unwrap()
        .attr("title")
        .await
        .unwrap();
    assert_eq!(
        why.as_deref(),
        Some("off the market: a lease was not delivered")
    );
    click(
        &c,
        &format!("#nodes button[data-resume='{n1}']"),
        Duration::from_secs(3),
    )
    .await;
    wait_for(&c, "#notice", Duration::from_secs(3), |t| {
        t.contains("Node resumed")
    })
    .await;
    wait_for(&c, &node_row, Duration::from_secs(3), |t| {
        !t.contains("held") && !t.contains("Resume")
    })
    .await;
    let (_, n, _) = sup.get(&format!("/v1/nodes/{n1}")).await;
    assert_eq!(n["held"], serde_json::Value::Null, "{n}");
    c.close().await.unwrap();
}

/// Issue 26 on the page: a supplier's nodes carry their verification status and reliability
/// as badges (n1 `verified`, n2 `degraded`, both `new`), its offers their SLA promise (`SLA
/// 99.90%`, or `default SLA`) beside what the node delivered (`new`), and the public depth
/// table counts each level's verified GPUs (`8 verified` of 16 free at 20.0000).
#[actix_web::test]
async fn the_page_shows_verification_reliability_and_sla_badges() {
    let mut opts = quiet_opts();
    opts.market.verification = Some(exchange::verify::VerifyConfig::default());
    let app = TestApp::start(Backend::Embedded, opts).await;
    let (_, sup_key) = app.account("idc-trust", "supplier").await;
    let sup = app.client(Some(&sup_key));
    let (n1, o1) =
        support::api::listed_node(&sup, "trusted-1", "H100-80G", 8, "cn-east-2", "20").await;
    let (s, v, _) = sup
        .post(
            "/v1/nodes",
            node("flagged-2", "H100-80G", 8, "cn-east-2"),
            None,
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let n2 = v["id"].as_str().unwrap().to_string();
    let mut o = offer(&n2, 8, "20", None);
    o["sla"] = json!({"availability": "99.9", "credit_multiple": 20, "outage_cap_s": 600,
                      "credit_cap": {"monthly_fee_pct": 50}});
    let (s, v, _) = sup.post("/v1/offers", o, None).await;
    assert_eq!(s, 201, "{v}");
    let o2 = v["id"].as_str().unwrap().to_string();
    let v = crate::api::report_run(&sup, &n1, 760.0).await;
    assert_eq!(v["verification"]["status"], "verified", "{v}");
    let v = crate::api::report_run(&sup, &n2, 640.0).await;
    assert_eq!(v["verification"]["status"], "degraded", "{v}");

    let d = driver();
    let c = signed_in(&app, &d, &sup_key, "idc-trust (supplier)").await;
    for (n, status) in [(&n1, "verified"), (&n2, "degraded")] {
        let css = format!("#nodes tr[data-node='{n}'] .badge.verify");
        wait_for(&c, &css, Duration::from_secs(3), |t| t == status).await;
        let css = format!("#nodes tr[data-node='{n}'] .badge.reliability");
        wait_for(&c, &css, Duration::from_secs(3), |t| t == "new").await;
    }
    let why = c
        .find(Locator::Css(&format!(
            "#nodes tr[data-node='{n2}'] .badge.verify"
        )))
        .await
        .unwrap()
        .attr("title")
        .await
        .unwrap()
        .unwrap_or_default();
    assert!(why.contains("80.55 %"), "{why}");
    let sla = format!("#offers tr[data-offer='{o2}'] .badge.sla");
    wait_for(&c, &sla, Duration::from_secs(3), |t| t == "SLA 99.90%").await;
    let terms = c
        .find(Locator::Css(&sla))
        .await
        .unwrap()
        .attr("title")
        .await
        .unwrap()
        .unwrap_or_default();
    assert!(
        terms.contains("0.9990") && terms.contains("20×") && terms.contains("50% of monthly fee"),
        "{terms}"
    );
    wait_for(
        &c,
        &format!("#offers tr[data-offer='{o2}'] .badge.reliability"),
        Duration::from_secs(3),
        |t| t == "new",
    )
    .await;
    wait_for(
        &c,
        &format!("#offers tr[data-offer='{o1}'] .badge.sla"),
        Duration::from_secs(3),
        |t| t == "default SLA",
    )
    .await;
    // The public depth: 16 free at 20.0000, 8 of them verified.
    click(
        &c,
        "#overview tr[data-sku='H100-80G']",
        Duration::from_secs(3),
    )
    .await;
    wait_for(&c, "#depth-spot tbody", Duration::from_secs(3), |t| {
        t.contains("20.0000") && t.contains("16")
    })
    .await;
    wait_for(
        &c,
        "#depth-spot tbody .badge.verified",
        Duration::from_secs(3),
        |t| t == "8 verified",
    )
    .await;
    c.close().await.unwrap();
}

/// A browser whose viewport is `width`×`height` CSS pixels. Headless Chromium keeps windows at
/// least 500 px wide, so a phone width is Chromium's mobile emulation (device metrics).
async fn browser_sized(d: &Driver, width: u32, height: u32) -> Client {
    if width < 500 {
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({"binary": "/usr/bin/chromium",
                   "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                            "--disable-dev-shm-usage", "--window-size=800,1000"],
                   "mobileEmulation": {"deviceMetrics":
                       {"width": width, "height": height, "pixelRatio": 1.0}}}),
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let c = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                .capabilities(caps.clone())
                .connect(&format!("http://127.0.0.1:{}", d.port))
                .await;
            match c {
                Ok(c) => break c,
                Err(e) if Instant::now() > deadline => panic!("chromedriver did not answer: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    } else {
        let c = browser(d).await;
        c.set_window_size(width, height).await.unwrap();
        c
    }
}

/// What on the page is clipped or sticks out (issue 25): every visible control, table cell and
/// balance card must lie within the viewport's width, must not be wider than its own box, and
/// no ancestor that clips (overflow other than visible) may be scrolled or cut; the page itself
/// must not scroll sideways. Answers one line per problem.
const LAYOUT_PROBLEMS: &str = r##"
const vw = arguments[0], bad = [];
if (window.innerWidth !== vw) bad.push(`the viewport is ${window.innerWidth} px wide, not ${vw}`);
const root = document.documentElement;
if (root.scrollWidth > vw) bad.push(`page is ${root.scrollWidth} px wide in a ${vw} px viewport`);
const name = (e) => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") +
  (typeof e.className === "string" && e.className ? "." + e.className.trim().replace(/\s+/g, ".") : "") +
  " " + JSON.stringify((e.textContent || e.value || "").trim().slice(0, 40));
for (const e of document.querySelectorAll("button, input, select, textarea, td, th, .kv > div")) {
  const r = e.getBoundingClientRect();
  if (r.width === 0 || r.height === 0 || getComputedStyle(e).visibility === "hidden") continue;
  if (r.left < -0.5 || r.right > vw + 0.5) bad.push(`${name(e)} at x ${r.left}..${r.right} outside 0..${vw}`);
  if (!/^(INPUT|TEXTAREA|SELECT)$/.test(e.tagName) && e.scrollWidth > e.clientWidth + 1)
    bad.push(`${name(e)} content ${e.scrollWidth} px in a ${e.clientWidth} px box`);
  for (let a = e.parentElement; a && a !== root; a = a.parentElement) {
    if (getComputedStyle(a).overflowX === "visible") continue;
    const ar = a.getBoundingClientRect();
    if (a.scrollWidth > a.clientWidth + 1 || r.left < ar.left - 0.5 || r.right > ar.right + 0.5) {
      bad.push(`${name(e)} clipped by ${name(a)} (scrollWidth ${a.scrollWidth} > clientWidth ${a.clientWidth})`);
      break;
    }
  }
}
return bad;
"##;

/// [`LAYOUT_PROBLEMS`] of the page in a viewport `width` px wide.
async fn layout_problems(c: &Client, width: u32) -> Vec<String> {
    let v = c
        .execute(LAYOUT_PROBLEMS, vec![json!(width)])
        .await
        .unwrap();
    v.as_array()
        .expect("an array")
        .iter()
        .map(|s| s.as_str().unwrap_or_default().to_string())
        .collect()
}

/// Evaluates a JS expression in the page.
async fn js(c: &Client, expr: &str) -> serde_json::Value {
    c.execute(&format!("return {expr};"), vec![]).await.unwrap()
}

#[actix_web::test]
async fn the_page_fits_a_desktop_and_a_phone_and_shows_fills_from_before_it_opened() {
    let app = TestApp::start(Backend::Embedded, quiet_opts()).await;
    let (_, sup_key) = app.account("idc-1", "supplier").await;
    let (buyer_id, buyer_key) = app.account("team-a", "buyer").await;
    let (other_id, other_key) = app.account("team-b", "buyer").await;
    app.deposit(&buyer_id, "99999.99").await;
    app.deposit(&other_id, "5000.00").await;
    let sup = app.client(Some(&sup_key));
    let buyer = app.client(Some(&buyer_key));
    let other = app.client(Some(&other_key));
    let (s, v, _) = sup
        .post(
            "/v1/nodes",
            node("gpu-node-7", "H100-80G", 8, "cn-north-1"),
            None,
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let node_id = v["id"].as_str().unwrap().to_string();
    let (s, v, _) = sup
        .post("/v1/offers", offer(&node_id, 8, "20", Some("12.5")), None)
        .await;
    assert_eq!(s, 201, "{v}");
    // Before any page opens: a spot and a preemptible lease for team-a, then team-b's spot
    // bid takes the preemptible GPUs, which gives that lease a preemption notice.
    let bid = support::api::bid;
    let (s, v, _) = buyer
        .post(
            "/v1/bids",
            bid("s1", "H100-80G", 2, "25", "spot", "ioc"),
            None,
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let spot_lease = v["fills"][0]["lease_id"]
        .as_str()
        .expect("filled")
        .to_string();
    let (s, v, _) = buyer
        .post(
            "/v1/bids",
            bid("p1", "H100-80G", 2, "15", "preemptible", "ioc"),
            None,
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let pre_lease = v["fills"][0]["lease_id"]
        .as_str()
        .expect("filled")
        .to_string();
    let (s, v, _) = other
        .post(
            "/v1/bids",
            bid("s2", "H100-80G", 6, "25", "spot", "ioc"),
            None,
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let (_, leases, _) = buyer.get("/v1/leases?state=live").await;
    let pre = leases["leases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["id"] == pre_lease.as_str())
        .expect("the preemptible lease is live")
        .clone();
    let pre_price = pre["price"].as_str().expect("a price").to_string();
    let notice_ms = pre["notice_deadline_ms"]
        .as_i64()
        .expect("a preemption notice");
    // The public tape: fills with price, GPUs, kind and time, never who traded.
    let (s, tape, _) = app.client(None).get("/v1/fills/recent?sku=H100-80G").await;
    assert_eq!(s, 200, "{tape}");
    let fills = tape["fills"].as_array().unwrap();
    assert!(fills.len() >= 2, "{tape}");
    assert_eq!(
        fills.last().unwrap()["price"],
        "20.0000",
        "oldest last: {tape}"
    );
    assert_eq!(fills.last().unwrap()["gpus"], 2);
    assert_eq!(fills.last().unwrap()["kind"], "spot");
    assert!(
        fills
            .iter()
            .any(|f| f["price"] == pre_price.as_str() && f["kind"] == "preemptible"),
        "{tape}"
    );
    for f in fills {
        let mut keys: Vec<&str> = f.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "gpus", "kind", "price", "region", "seq", "sku", "start_ms", "type"
            ],
            "public data only: {f}"
        );
    }
    let (s, _, _) = app.client(None).get("/v1/fills/recent?sku=NOPE").await;
    assert_eq!(s, 400);
    let first_start = fills.last().unwrap()["start_ms"].as_i64().unwrap();

    let d = driver();
    // Layout problems of every page and width, reported together at the end (after the
    // screenshots are written).
    let mut problems: Vec<String> = Vec::new();
    for (width, height) in [(1280u32, 900u32), (390, 844)] {
        // The buyer.
        let c = browser_sized(&d, width, height).await;
        c.goto(&app.base).await.unwrap();
        assert_eq!(js(&c, "window.innerWidth").await, json!(width));
        wait_for(&c, "#status", Duration::from_secs(5), |t| t == "live").await;
        // Fills made before the page opened, from the server's tape, with the browser's own
        // time format.
        wait_for(&c, "#trades tbody", Duration::from_secs(3), |t| {
            t.contains("20.0000") && t.contains(&pre_price) && t.contains("preemptible")
        })
        .await;
        let row = format!("#trades tr[data-start='{first_start}'][data-seq] td:first-child");
        let shown = text(&c, &row).await;
        let local = js(
            &c,
            &format!(
                "new Intl.DateTimeFormat(undefined, {{timeStyle: 'medium'}}).format(new Date({first_start}))"
            ),
        )
        .await;
        assert_eq!(
            json!(shown),
            local,
            "the fill's time in the browser's locale"
        );
        c.find(Locator::Id("key"))
            .await
            .unwrap()
            .send_keys(&buyer_key)
            .await
            .unwrap();
        click(&c, "#signin-btn", Duration::from_secs(3)).await;
        wait_for(&c, "#who", Duration::from_secs(3), |t| t.contains("team-a")).await;
        wait_for(&c, "#leases tbody", Duration::from_secs(3), |t| {
            t.contains("20.0000") && t.contains(&pre_price)
        })
        .await;
        // Money at its precision, `available` as the API gives it, runway in words.
        wait_for(&c, "#balance", Duration::from_secs(3), |t| {
            t.contains("CNY")
        })
        .await;
        let (_, bal, _) = buyer.get("/v1/balance").await;
        // `available` is the API's (it accrues by the second: equal within a few seconds' burn).
        let available = text(&c, "#balance div:nth-child(2) b").await;
        let shown = available.strip_suffix(" CNY").expect("in CNY");
        assert!(
            shown.split_once('.').is_some_and(|(_, f)| f.len() == 2),
            "{available}"
        );
        let api_available: f64 = bal["available"].as_str().unwrap().parse().unwrap();
        assert!(
            (shown.parse::<f64>().unwrap() - api_available).abs() < 1.0,
            "{available} vs {bal}"
        );
        assert!(
            api_available <= 99_999.99 && api_available > 90_000.0,
            "{bal}"
        );
        let balance = text(&c, "#balance div:nth-child(1) b").await;
        let digits = balance.strip_suffix(" CNY").expect("in CNY");
        assert!(
            digits.split_once('.').is_some_and(|(_, f)| f.len() == 2),
            "{balance}"
        );
        let runway = text(&c, "#balance div:nth-child(5) b").await;
        assert!(bal["runway_s"].as_u64().is_some(), "{bal}");
        assert!(
            runway.starts_with("about ")
                && ["hour", "day", "month", "year"]
                    .iter()
                    .any(|u| runway.contains(u)),
            "runway {runway:?} for {bal}"
        );
        // The preemption notice's end in the END column.
        let ends = text(
            &c,
            &format!("#leases tr[data-lease='{pre_lease}'] td:nth-child(4)"),
        )
        .await;
        let when = js(
            &c,
            &format!("new Intl.DateTimeFormat(undefined, {{timeStyle: 'medium'}}).format(new Date({notice_ms}))"),
        )
        .await;
        assert!(
            ends.contains(when.as_str().unwrap()) && ends.contains("preemption notice"),
            "{ends:?} vs {when}"
        );
        assert!(exists(&c, &format!("button[data-release='{spot_lease}']")).await);
        click(&c, "#history-toggle", Duration::from_secs(3)).await;
        wait_for(&c, "#history tbody", Duration::from_secs(3), |t| {
            !t.contains("loading")
        })
        .await;
        let png = c.screenshot().await.unwrap();
        assert!(png.starts_with(b"\x89PNG"));
        std::fs::write(format!("/tmp/page-{width}.png"), &png).unwrap();
        for p in layout_problems(&c, width).await {
            problems.push(format!("buyer at {width} px: {p}"));
        }
        c.execute("document.getElementById('leases').scrollIntoView()", vec![])
            .await
            .unwrap();
        std::fs::write(
            format!("/tmp/page-{width}-leases.png"),
            c.screenshot().await.unwrap(),
        )
        .unwrap();
        c.close().await.unwrap();

        // The supplier.
        let c = browser_sized(&d, width, height).await;
        c.goto(&app.base).await.unwrap();
        wait_for(&c, "#status", Duration::from_secs(5), |t| t == "live").await;
        c.find(Locator::Id("key"))
            .await
            .unwrap()
            .send_keys(&sup_key)
            .await
            .unwrap();
        click(&c, "#signin-btn", Duration::from_secs(3)).await;
        wait_for(&c, "#who", Duration::from_secs(3), |t| t.contains("idc-1")).await;
        wait_for(
            &c,
            &format!("#nodes tr[data-node='{node_id}']"),
            Duration::from_secs(3),
            |t| t.contains("gpu-node-7"),
        )
        .await;
        wait_for(&c, "#sleases tbody", Duration::from_secs(3), |t| {
            t.contains("preemption notice") && t.contains("20.0000")
        })
        .await;
        wait_for(&c, "#earnings", Duration::from_secs(3), |t| {
            t.contains("CNY")
        })
        .await;
        for p in layout_problems(&c, width).await {
            problems.push(format!("supplier at {width} px: {p}"));
        }
        c.execute(
            "document.getElementById('earnings').scrollIntoView()",
            vec![],
        )
        .await
        .unwrap();
        std::fs::write(
            format!("/tmp/page-{width}-supplier.png"),
            c.screenshot().await.unwrap(),
        )
        .unwrap();
        c.close().await.unwrap();
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Issue 25: the Billing section lists the signed-in buyer's documents of closed periods with
/// download buttons; the page's authorised fetch of a document's path answers it; nothing is
/// clipped at 1280 or 390 px with a document listed.
#[actix_web::test]
async fn the_billing_section_lists_the_buyers_documents_and_fits() {
    let app = TestApp::start(Backend::Embedded, quiet_opts()).await;
    let (buyer_id, buyer_key) = app.account("team-a", "buyer").await;
    let (_, fin_key) = app.account("books", "finance").await;
    app.deposit(&buyer_id, "100.00").await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis()
        .to_string();
    let (s, v, _) = app
        .client(Some(&fin_key))
        .post(
            "/v1/finance/periods",
            json!({"from": "2026-01-01", "to": now}),
            Some("close-1"),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let d = driver();
    for width in [1280, 390] {
        let c = browser_sized(&d, width, 900).await;
        c.goto(&app.base).await.unwrap();
        wait_for(&c, "#status", Duration::from_secs(5), |t| t == "live").await;
        c.find(Locator::Id("key"))
            .await
            .unwrap()
            .send_keys(&buyer_key)
            .await
            .unwrap();
        click(&c, "#signin-btn", Duration::from_secs(3)).await;
        wait_for(&c, "#documents tbody", Duration::from_secs(5), |t| {
            t.contains("invoice 1")
        })
        .await;
        let path = format!("/v1/finance/periods/1/invoices/{buyer_id}");
        let button = c
            .find(Locator::Css("#documents button[data-fmt=pdf]"))
            .await
            .unwrap();
        assert_eq!(button.attr("data-doc").await.unwrap(), Some(path.clone()));
        let status = c
            .execute_async(
                "const done = arguments[arguments.length - 1];
                 fetch(arguments[0] + '?format=csv', { headers: { Authorization: 'Bearer ' + S.key } })
                   .then(r => done(r.status), () => done(0));",
                vec![json!(path)],
            )
            .await
            .unwrap();
        assert_eq!(status, json!(200));
        let problems = layout_problems(&c, width).await;
        assert!(problems.is_empty(), "{width} px: {problems:#?}");
        c.close().await.unwrap();
    }
}
