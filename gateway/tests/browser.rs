//! The live market page in a real headless Chromium (Debian's `chromium` driven through
//! `chromedriver` by fantoccini): a new offer shows within 1 s, a node that stops
//! heartbeating disappears, a bid placed from the page becomes a lease shown on it, a bad key
//! gets a clear message. `.ci/run` installs `chromium` and `chromium-driver`.

mod support;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::api::{Backend, TestApp, node, offer, quiet_opts};

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

/// Text of the first element matching `css`, or "" when there is none.
async fn text(c: &Client, css: &str) -> String {
    match c.find(Locator::Css(css)).await {
        Ok(e) => e.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
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
