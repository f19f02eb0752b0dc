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
