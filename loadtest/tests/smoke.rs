//! The load test end to end, small: it starts the gateway in process, drives a seeded market
//! for a few seconds, pulls the reports, runs every check and writes its files. The result
//! must show real traffic, zero phantom inventory, leases delivered (and some not, failed
//! over), nodes verified (and some degraded, some failing a run and verified again), trust
//! bids filled only where they may, and every check passing.

#[test]
fn a_short_run_passes_every_check_and_writes_its_report() {
    let out = tempfile::tempdir().unwrap();
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .args(["--duration", "6", "--rate", "150", "--suppliers", "4"])
        .args([
            "--nodes-per-supplier",
            "10",
            "--buyers",
            "6",
            "--quiet",
            "--flaky",
            "0.2",
            // Runs left unanswered fail (and are verified again) within the test.
            "--verify-deadline-s",
            "8",
        ])
        .arg("--out")
        .arg(out.path())
        .status()
        .unwrap();
    assert!(status.success(), "loadtest exited with {status}");
    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("result.json")).unwrap()).unwrap();
    assert!(r["acked"].as_u64().unwrap() > 500, "{}", r["acked"]);
    assert!(r["scheduled"].as_u64().unwrap() > 600);
    assert!(r["leases"].as_u64().unwrap() > 0);
    assert!(r["fillable_iocs"].as_u64().unwrap() > 50);
    assert_eq!(r["phantom"], 0);
    let checks = r["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 14);
    assert!(checks.iter().all(|c| c["ok"] == true), "{checks:?}");
    // The month-end invoice run (issue 17) billed the buyers that leased.
    let invoices = (checks.iter())
        .find(|c| c["name"] == "invoice run bills each buyer its trial-balance debits")
        .expect("the invoice run");
    assert!(
        invoices["detail"]
            .as_str()
            .unwrap_or("")
            .contains("buyer invoices"),
        "{invoices}"
    );
    let d = &r["delivery"];
    assert!(d["time_to_ready"]["count"].as_u64().unwrap() > 0, "{d}");
    assert!(d["time_to_ready"]["p50_ms"].as_f64().unwrap() > 0.0, "{d}");
    assert!(d["leases"]["ready"].as_u64().unwrap() > 0, "{d}");
    assert!(d["leases"]["not_delivered"].as_u64().unwrap() > 0, "{d}");
    assert!(d["agents"]["torn_down"].as_u64().unwrap() > 0, "{d}");
    assert_eq!(d["agents"]["without_launch"], 0, "{d}");
    let rate = d["delivery_rate"].as_f64().unwrap();
    assert!(rate > 0.5 && rate < 1.0, "{d}");
    let names: Vec<&str> = r["latency"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["command"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"place_bid") && names.contains(&"heartbeat"),
        "{names:?}"
    );
    // Supplier trust (issue 26): runs answered and judged, every kind of result, trust bids
    // placed and some filled, and the two trust checks among those that passed.
    let v = &r["verification"];
    assert_eq!(v["enabled"], true, "{v}");
    let n = |x: &serde_json::Value| x.as_u64().unwrap_or(0);
    assert!(n(&v["runs"]) >= 40, "a run per node at least: {v}");
    assert!(n(&v["reported"]) > 0 && n(&v["left_unanswered"]) > 0, "{v}");
    for outcome in ["verified", "degraded", "failed"] {
        assert!(n(&v["results"][outcome]) > 0, "{outcome}: {v}");
    }
    assert!(n(&v["failures_by_kind"]["timeout"]) > 0, "{v}");
    assert!(n(&v["duration"]["count"]) > 0, "{v}");
    assert!(v["duration"]["p50_ms"].as_f64().unwrap() > 0.0, "{v}");
    assert!(n(&v["trust_leases"]["verified"]) > 0, "{v}");
    assert!(
        v["trust_bids"]
            .as_object()
            .unwrap()
            .keys()
            .any(|k| k.contains("min_reliability")),
        "{v}"
    );
    for name in [
        "no trust bid filled on a node that did not meet it",
        "no verification run billed, sold or listed",
    ] {
        assert!(checks.iter().any(|c| c["name"] == name), "{name}");
    }
    let html = std::fs::read_to_string(out.path().join("report.html")).unwrap();
    assert!(html.contains("<h2>Verification</h2>"));
    assert!(html.contains("<svg") && html.contains("inventory depth per SKU"));
    assert!(html.contains("<h2>Delivery</h2>") && html.contains("time to ready"));
}
