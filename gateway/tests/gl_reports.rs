//! The general-ledger export and the cash reconciliation over the public API (issue 17;
//! docs/settlement.md "General-ledger export" and "Reconciliation", docs/api.md §4): finance
//! reads both in every format, a buyer is refused with 403. The app runs on port 0 on the
//! embedded journal.

use crate::support::api::{Backend, TestApp, quiet_opts};

#[tokio::test]
async fn finance_reads_the_gl_export_and_the_reconciliation_and_a_buyer_is_refused() {
    let app = TestApp::start(Backend::Embedded, quiet_opts()).await;
    let (buyer, buyer_key) = app.account("team-a", "buyer").await;
    let (_, finance_key) = app.account("books", "finance").await;
    app.deposit(&buyer, "100.00").await;
    let finance = app.client(Some(&finance_key));

    // One deposit: one entry, 1002 bank debited and the buyer's 2203 sub-account credited.
    let (s, v, _) = finance.get("/v1/reports/gl-export?from=0").await;
    assert_eq!(s, 200, "{v}");
    let entries = v["entries"].as_array().expect("entries");
    assert_eq!(entries.len(), 1, "{v}");
    let legs = entries[0]["legs"].as_array().expect("legs");
    let leg = |i: usize| {
        (
            legs[i]["account_code"].as_str().expect("code").to_string(),
            legs[i]["sub_account"].clone(),
            legs[i]["debit"].as_str().expect("debit").to_string(),
            legs[i]["credit"].as_str().expect("credit").to_string(),
        )
    };
    let buyer_id: u64 = buyer.parse().expect("numeric account id");
    assert_eq!(
        (leg(0), leg(1)),
        (
            (
                "1002".into(),
                serde_json::Value::Null,
                "100.00".into(),
                "0.00".into()
            ),
            (
                "2203".into(),
                buyer_id.into(),
                "0.00".into(),
                "100.00".into()
            ),
        )
    );
    assert_eq!(
        (v["total_debits"].as_str(), v["total_credits"].as_str()),
        (Some("100.00"), Some("100.00"))
    );
    let (s, _, h) = finance.get("/v1/reports/gl-export?from=0&format=csv").await;
    assert_eq!(s, 200);
    assert_eq!(h["content-type"], "text/csv; charset=utf-8");
    assert!(
        h["content-disposition"]
            .to_str()
            .expect("ascii")
            .starts_with("attachment; filename=\"gl-export-0-")
    );

    // The reconciliation: 0.00 + 100.00 deposited = 100.00 held, check zero.
    let (s, v, _) = finance.get("/v1/reports/reconciliation?from=0").await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["opening_balance"], "0.00");
    assert_eq!(v["deposits"][0]["amount"], "100.00");
    assert_eq!(v["deposits"][0]["counterparty"], format!("buyer:{buyer}"));
    assert_eq!(v["totals"]["deposits"], "100.00");
    assert_eq!(v["closing_balance"], "100.00");
    assert_eq!(v["check"]["ok"], true);
    let (s, _, h) = finance
        .get("/v1/reports/reconciliation?from=0&format=xlsx")
        .await;
    assert_eq!(s, 200);
    assert_eq!(
        h["content-type"],
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
    );

    // Finance and admin only; `account` does not apply.
    let buyer_client = app.client(Some(&buyer_key));
    for kind in ["gl-export", "reconciliation"] {
        let (s, v, _) = buyer_client
            .get(&format!("/v1/reports/{kind}?from=0"))
            .await;
        assert_eq!(
            (s, v["code"].as_str()),
            (403, Some("forbidden")),
            "{kind}: {v}"
        );
        let (s, _, _) = app.admin().get(&format!("/v1/reports/{kind}?from=0")).await;
        assert_eq!(s, 200, "{kind}");
        let (s, v, _) = finance
            .get(&format!("/v1/reports/{kind}?from=0&account={buyer}"))
            .await;
        assert_eq!(
            (s, v["code"].as_str()),
            (422, Some("invalid_query")),
            "{kind}: {v}"
        );
    }
}

/// Issue 25: the GL export splits the platform fee's output VAT at the configured
/// `api.invoice.vat_rate`, not the default 6 %. One lease of 1 × H100 at 36 000 CNY/GPU-h
/// (10 CNY/s) over a 2 s window: collected 20.00, fee 8 % = 1.60; at 13 % the VAT leg is
/// round(1.60 × 0.13 / 1.13 = 0.184071) = 0.18 and fee revenue 1.42 (at 6 % it would be
/// round(0.090566) = 0.09 and 1.51).
#[tokio::test]
async fn the_gl_export_carves_output_vat_at_the_configured_rate() {
    use crate::support::api::{bid, listed_node};
    let mut opts = quiet_opts();
    opts.api.invoice.vat_rate = "0.13".parse().expect("rate");
    let app = TestApp::start(Backend::Embedded, opts).await;
    let (buyer, buyer_key) = app.account("team-a", "buyer").await;
    let (_, supplier_key) = app.account("idc-1", "supplier").await;
    let (_, finance_key) = app.account("books", "finance").await;
    app.deposit(&buyer, "100000.00").await;
    listed_node(
        &app.client(Some(&supplier_key)),
        "n1",
        "H100-80G",
        1,
        "cn-east-2",
        "36000",
    )
    .await;
    let (s, v, _) = app
        .client(Some(&buyer_key))
        .post(
            "/v1/bids",
            bid("b1", "H100-80G", 1, "36000", "spot", "ioc"),
            None,
        )
        .await;
    assert_eq!((s, v["filled_gpus"].as_u64()), (201, Some(1)), "{v}");
    let (_, leases, _) = app.client(Some(&buyer_key)).get("/v1/leases").await;
    let lease = &leases["leases"][0];
    let start = lease["ready_ms"]
        .as_i64()
        .or(lease["start_ms"].as_i64())
        .expect("start");
    tokio::time::sleep(std::time::Duration::from_millis(2_300)).await;
    let (s, v, _) = app
        .client(Some(&finance_key))
        .get(&format!(
            "/v1/reports/gl-export?from={start}&to={}",
            start + 2_000
        ))
        .await;
    assert_eq!(s, 200, "{v}");
    let legs: Vec<(String, String, String)> = v["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .flat_map(|e| e["legs"].as_array().expect("legs").iter())
        .map(|l| {
            (
                l["account_code"].as_str().expect("code").to_string(),
                l["debit"].as_str().expect("debit").to_string(),
                l["credit"].as_str().expect("credit").to_string(),
            )
        })
        .collect();
    let credit_on = |code: &str| {
        legs.iter()
            .filter(|l| l.0 == code)
            .map(|l| l.2.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(credit_on("2221"), ["0.18"], "{v}");
    assert_eq!(credit_on("6001"), ["1.42"], "{v}");
}
