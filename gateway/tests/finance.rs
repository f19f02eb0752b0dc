//! Finance over the public API (issue 17; docs/settlement.md "Audit trail", docs/api.md §4):
//! the audit trail of money-moving and access-changing actions, with the request id every
//! answer carries. The app runs on port 0 on the embedded journal.

mod support;

use serde_json::{Value, json};
use support::api::{Backend, TestApp, bid, listed_node, quiet_opts};

/// `POST` as the admin with our own `X-Request-Id`; answers (status, body, request id header).
async fn post_as_admin(
    app: &TestApp,
    path: &str,
    body: Value,
    idem: &str,
    rid: &str,
) -> (u16, Value, String) {
    let c = app.admin();
    let resp = c
        .http
        .post(format!("{}{path}", c.base))
        .bearer_auth(c.key.as_deref().expect("admin key"))
        .header("Idempotency-Key", idem)
        .header("X-Request-Id", rid)
        .json(&body)
        .send()
        .await
        .expect("request");
    let status = resp.status().as_u16();
    let header = resp.headers()["x-request-id"]
        .to_str()
        .expect("ascii")
        .to_string();
    let v: Value = resp.json().await.expect("json");
    (status, v, header)
}

/// `GET /v1/reports/audit-trail` from the start of time with `key`.
async fn read(app: &TestApp, key: &str) -> support::api::Answer {
    app.client(Some(key))
        .get("/v1/reports/audit-trail?from=0")
        .await
}

#[tokio::test]
async fn the_audit_trail_records_who_moved_money_under_the_answers_request_id() {
    let mut app = TestApp::start(Backend::Embedded, quiet_opts()).await;
    let (buyer, buyer_key) = app.account("team-a", "buyer").await;
    let (supplier, _) = app.account("idc-1", "supplier").await;
    let (_, finance_key) = app.account("books", "finance").await;

    let (s, v, rid) = post_as_admin(
        &app,
        &format!("/v1/admin/accounts/{buyer}/deposits"),
        json!({"amount": "100.00"}),
        "pay-1",
        "req-pay-1",
    )
    .await;
    assert_eq!((s, rid.as_str()), (201, "req-pay-1"), "{v}");
    // A payout beyond the payable (zero) is refused; the error names the same request id.
    let (s, v, rid) = post_as_admin(
        &app,
        &format!("/v1/admin/accounts/{supplier}/payouts"),
        json!({"amount": "5.00"}),
        "wire-1",
        "req-wire-1",
    )
    .await;
    assert_eq!(s, 422, "{v}");
    assert_eq!(
        (v["request_id"].as_str(), rid.as_str()),
        (Some("req-wire-1"), "req-wire-1")
    );
    let refused_code = v["code"].as_str().expect("code").to_string();
    // A request id of another shape is replaced by the server's own.
    let (_, _, rid) = post_as_admin(
        &app,
        &format!("/v1/admin/accounts/{buyer}/deposits"),
        json!({"amount": "1.00"}),
        "pay-2",
        "has spaces",
    )
    .await;
    assert_eq!(rid.len(), 36, "{rid}");

    let (s, trail, headers) = read(&app, &finance_key).await;
    assert_eq!(s, 200, "{trail}");
    assert!(headers.contains_key("x-request-id"));
    let rows: Vec<(u64, String, Option<String>, String, String)> = trail
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| {
            (
                e["id"].as_u64().expect("id"),
                e["action"].as_str().expect("action").to_string(),
                e["subject"].as_u64().map(|s| s.to_string()),
                e["detail"].as_str().expect("detail").to_string(),
                e["outcome"]["status"].as_str().expect("status").to_string(),
            )
        })
        .collect();
    let created = |id: u64, name: &str, role: &str| {
        (
            id,
            "create_account".to_string(),
            None,
            format!("name={name} role={role} with_key=true"),
            "applied".to_string(),
        )
    };
    assert_eq!(
        rows,
        vec![
            created(1, "team-a", "buyer"),
            created(2, "idc-1", "supplier"),
            created(3, "books", "finance"),
            (
                4,
                "deposit".into(),
                Some(buyer.clone()),
                format!("amount=100.00 key={buyer}:pay-1"),
                "applied".into()
            ),
            (
                5,
                "payout".into(),
                Some(supplier.clone()),
                format!("amount=5.00 key={supplier}:wire-1"),
                "refused".into()
            ),
            (
                6,
                "deposit".into(),
                Some(buyer.clone()),
                format!("amount=1.00 key={buyer}:pay-2"),
                "applied".into()
            ),
        ]
    );
    let entries = trail.as_array().expect("entries");
    assert_eq!(entries[3]["actor"]["request_id"], "req-pay-1");
    assert_eq!(entries[4]["actor"]["request_id"], "req-wire-1");
    assert_eq!(entries[4]["outcome"]["code"], refused_code.as_str());
    // Every entry was asked for by the admin's one key.
    let admin_actor = &entries[0]["actor"];
    assert!(
        entries
            .iter()
            .all(|e| e["actor"]["account"] == admin_actor["account"]
                && e["actor"]["key_id"] == admin_actor["key_id"])
    );

    // Buyers do not read it; finance reads it as CSV too.
    let (s, v, _) = read(&app, &buyer_key).await;
    assert_eq!((s, v["code"].as_str()), (403, Some("forbidden")));
    let c = app.client(Some(&finance_key));
    let csv = c
        .http
        .get(format!(
            "{}/v1/reports/audit-trail?from=0&format=csv",
            c.base
        ))
        .bearer_auth(&finance_key)
        .send()
        .await
        .expect("csv")
        .text()
        .await
        .expect("text");
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("id,at,account,key_id,request_id,action,subject,detail,outcome")
    );
    assert_eq!(lines.count(), 6);
    assert!(csv.contains(&format!("refused: {refused_code}")), "{csv}");

    // The trail is journaled state: a restart replays it exactly.
    app.restart().await;
    let (s, again, _) = read(&app, &finance_key).await;
    assert_eq!((s, &again), (200, &trail));
}

/// `POST` with an `Idempotency-Key` as `key`.
async fn post(
    app: &TestApp,
    key: &str,
    path: &str,
    body: Value,
    idem: Option<&str>,
) -> (u16, Value) {
    let (s, v, _) = app.client(Some(key)).post(path, body, idem).await;
    (s, v)
}

async fn balance(app: &TestApp, buyer_key: &str) -> String {
    let (s, v, _) = app.client(Some(buyer_key)).get("/v1/balance").await;
    assert_eq!(s, 200, "{v}");
    v["balance"].as_str().expect("balance").to_string()
}

#[tokio::test]
async fn finance_posts_adjustments_and_closes_periods_under_the_ledgers_rules() {
    let mut app = TestApp::start(Backend::Embedded, quiet_opts()).await;
    let (buyer, buyer_key) = app.account("team-a", "buyer").await;
    let (supplier, supplier_key) = app.account("idc-1", "supplier").await;
    let (_, fin) = app.account("books", "finance").await;
    let (_, fin2) = app.account("books-2", "finance").await;
    app.deposit(&buyer, "100.00").await;
    let adj = "/v1/finance/adjustments";

    // A goodwill credit, borne by the platform fee account; a retry answers the same posting.
    let goodwill = json!({"kind": "goodwill_credit", "account": buyer, "amount": "10.00",
                          "reason": "outage on 11-03", "reference": "INC-7"});
    let (s, first) = post(&app, &fin, adj, goodwill.clone(), Some("t-1")).await;
    assert_eq!(s, 201, "{first}");
    assert_eq!(first["debit"], "platform_fee");
    assert_eq!(first["credit"], format!("buyer:{buyer}"));
    assert_eq!(first["amount"], "10.00");
    assert_eq!(first["memo"], "goodwill_credit: outage on 11-03 [INC-7]");
    let goodwill_again = goodwill.clone();
    let (s, again) = post(&app, &fin, adj, goodwill, Some("t-1")).await;
    assert_eq!((s, &again), (201, &first));
    assert_eq!(balance(&app, &buyer_key).await, "110.00");
    let other = json!({"kind": "goodwill_credit", "account": buyer, "amount": "11.00",
                       "reason": "outage on 11-03"});
    let (s, v) = post(&app, &fin, adj, other, Some("t-1")).await;
    assert_eq!((s, v["code"].as_str()), (409, Some("idempotency_conflict")));
    // Another finance user with the same key and body: the ledger replays it, nothing moves,
    // and the audit trail says so.
    let (s, v) = post(&app, &fin2, adj, goodwill_again, Some("t-1")).await;
    assert_eq!((s, &v["memo"]), (201, &first["memo"]), "{v}");
    assert_eq!(balance(&app, &buyer_key).await, "110.00");

    // A refund to the bank: at most the balance.
    let refund = |amount: &str| {
        json!({"kind": "refund", "account": buyer, "amount": amount,
                                        "reason": "closing the account"})
    };
    let (s, v) = post(&app, &fin, adj, refund("120.00"), Some("t-2")).await;
    assert_eq!(
        (s, v["code"].as_str()),
        (422, Some("ledger_rejected")),
        "{v}"
    );
    let (s, v) = post(&app, &fin, adj, refund("30.00"), Some("t-3")).await;
    assert_eq!(
        (s, v["debit"].as_str(), v["credit"].as_str()),
        (
            201,
            Some(format!("buyer:{buyer}").as_str()),
            Some("external_cash")
        )
    );
    assert_eq!(balance(&app, &buyer_key).await, "80.00");
    // No SLA credits to cash out; no supplier debt to write off.
    let cash_out = json!({"kind": "sla_cash_out", "account": buyer, "amount": "1.00",
                          "reason": "terms pay SLA credits in cash"});
    let (s, v) = post(&app, &fin, adj, cash_out, Some("t-4")).await;
    assert_eq!(
        (s, v["code"].as_str()),
        (422, Some("sla_cash_out_exceeded")),
        "{v}"
    );
    let write_off = json!({"kind": "write_off", "account": supplier, "amount": "1.00",
                           "reason": "uncollectable"});
    let (s, v) = post(&app, &fin, adj, write_off, Some("t-5")).await;
    assert_eq!(
        (s, v["code"].as_str()),
        (422, Some("write_off_exceeds_debt")),
        "{v}"
    );
    // A correction between two named accounts.
    let correction = json!({"kind": "correction", "debit": format!("buyer:{buyer}"),
                            "credit": "platform_fee", "amount": "5.00",
                            "reason": "fee charged twice in error, reversed"});
    let (s, v) = post(&app, &fin, adj, correction, Some("t-6")).await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(balance(&app, &buyer_key).await, "75.00");

    // Bad input: the code names the field; nothing posts.
    for (i, (body, code)) in [
        (
            json!({"kind": "refund", "account": buyer, "debit": "platform_fee", "amount": "1.00",
                "reason": "x"}),
            "invalid_adjustment",
        ),
        (
            json!({"kind": "refund", "amount": "1.00", "reason": "x"}),
            "invalid_adjustment",
        ),
        (
            json!({"kind": "correction", "debit": "platform_fee", "amount": "1.00",
                "reason": "x"}),
            "invalid_adjustment",
        ),
        (
            json!({"kind": "correction", "debit": "sla_credits", "credit": "platform_fee",
                "amount": "1.00", "reason": "x"}),
            "invalid_account",
        ),
        (
            json!({"kind": "refund", "account": buyer, "amount": "0.00", "reason": "x"}),
            "invalid_amount",
        ),
        (
            json!({"kind": "refund", "account": buyer, "amount": "1.00", "reason": "  "}),
            "invalid_reason",
        ),
        (
            json!({"kind": "refund", "account": buyer, "amount": "1.00", "reason": "x",
                "reference": "r".repeat(201)}),
            "invalid_reference",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        // A refused request's answer is kept under its key: one key each.
        let key = format!("t-bad-{i}");
        let (s, v) = post(&app, &fin, adj, body.clone(), Some(&key)).await;
        // The schema cannot say which fields a kind takes, nor that a reason is blank: those
        // are 422; a body of another shape is 400.
        let status = if matches!(code, "invalid_adjustment") || body["reason"] == "  " {
            422
        } else {
            400
        };
        assert_eq!((s, v["code"].as_str()), (status, Some(code)), "{body}: {v}");
    }
    let (s, v) = post(&app, &fin, adj, refund("1.00"), None).await;
    assert_eq!(
        (s, v["code"].as_str()),
        (400, Some("missing_idempotency_key"))
    );
    let to_a_supplier = json!({"kind": "refund", "account": supplier, "amount": "1.00",
                               "reason": "x"});
    let (s, v) = post(&app, &fin, adj, to_a_supplier, Some("t-7")).await;
    assert_eq!((s, v["code"].as_str()), (404, Some("not_found")));
    let (s, v) = post(&app, &buyer_key, adj, refund("1.00"), Some("t-8")).await;
    assert_eq!((s, v["code"].as_str()), (403, Some("forbidden")));
    assert_eq!(balance(&app, &buyer_key).await, "75.00");

    // A lease runs over the close: it is charged through the period's end at the close.
    listed_node(
        &app.client(Some(&supplier_key)),
        "n1",
        "H100-80G",
        1,
        "cn-east-2",
        "20",
    )
    .await;
    let (s, v, _) = app
        .client(Some(&buyer_key))
        .post(
            "/v1/bids",
            bid("b1", "H100-80G", 1, "25", "spot", "ioc"),
            None,
        )
        .await;
    assert_eq!((s, v["filled_gpus"].as_u64()), (201, Some(1)), "{v}");
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;

    // Close everything up to now: the buyer's invoice is numbered 1, the supplier's
    // self-billing statement 1.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    let to = now_ms.to_string();
    let periods = "/v1/finance/periods";
    let close = json!({"from": "2026-01-01", "to": to});
    let (s, closed) = post(&app, &fin, periods, close.clone(), Some("close-1")).await;
    assert_eq!(s, 201, "{closed}");
    assert_eq!(closed["id"], 1);
    assert_eq!(closed["from_ms"], 1_767_196_800_000_i64); // 2026-01-01T00:00+08:00
    assert_eq!(closed["to_ms"], now_ms);
    assert_eq!(closed["invoices"], json!({ buyer.clone(): 1 }));
    assert_eq!(closed["statements"], json!({ supplier.clone(): 1 }));
    let (s, again) = post(&app, &fin, periods, close, Some("close-1")).await;
    assert_eq!((s, &again), (201, &closed));
    // The next close starts where this one ended, and only once it has ended.
    let gap = json!({"from": (now_ms - 500).to_string(), "to": (now_ms - 400).to_string()});
    let (s, v) = post(&app, &fin, periods, gap, Some("close-2")).await;
    assert_eq!(
        (s, v["code"].as_str()),
        (422, Some("close_not_contiguous")),
        "{v}"
    );
    let future = json!({"from": to, "to": (now_ms + 86_400_000).to_string()});
    let (s, v) = post(&app, &fin, periods, future, Some("close-3")).await;
    assert_eq!(
        (s, v["code"].as_str()),
        (422, Some("period_not_ended")),
        "{v}"
    );
    let backwards = json!({"from": to, "to": "2026-01-01"});
    let (s, v) = post(&app, &fin, periods, backwards, Some("close-4")).await;
    assert_eq!(
        (s, v["code"].as_str()),
        (422, Some("invalid_period")),
        "{v}"
    );

    // A late correction references the closed period it corrects.
    let late = |reference: &str| {
        json!({"kind": "goodwill_credit", "account": buyer,
        "amount": "2.00", "reason": "late credit for a closed month", "reference": reference})
    };
    let (s, v) = post(&app, &fin, adj, late("period:1"), Some("t-9")).await;
    assert_eq!(s, 201, "{v}");
    let (s, v) = post(&app, &fin, adj, late("period:9"), Some("t-10")).await;
    assert_eq!(
        (s, v["code"].as_str()),
        (422, Some("invalid_adjustment")),
        "{v}"
    );

    // The period's documents: the buyer's invoice and the supplier's self-billing statement,
    // numbered at the close; the buyer reads its own, not the supplier's.
    let (s, invoice, _) = app
        .client(Some(&buyer_key))
        .get(&format!("/v1/finance/periods/1/invoices/{buyer}"))
        .await;
    assert_eq!(s, 200, "{invoice}");
    assert_eq!(invoice["number"], 1, "{invoice}");
    let (s, statement, _) = app
        .client(Some(&fin))
        .get(&format!(
            "/v1/finance/periods/1/invoices/{supplier}?format=json"
        ))
        .await;
    assert_eq!((s, &statement["number"]), (200, &json!(1)), "{statement}");
    for (key, path) in [
        (
            &buyer_key,
            format!("/v1/finance/periods/1/invoices/{supplier}"),
        ),
        (&fin, format!("/v1/finance/periods/2/invoices/{buyer}")),
        (&fin, "/v1/finance/periods/1/invoices/99".to_string()),
    ] {
        let (s, v, _) = app.client(Some(key)).get(&path).await;
        assert_eq!((s, v["code"].as_str()), (404, Some("not_found")), "{path}");
    }
    let pdf = app
        .client(Some(&fin))
        .http
        .get(format!(
            "{}/v1/finance/periods/1/invoices/{buyer}?format=pdf",
            app.client(None).base
        ))
        .bearer_auth(&fin)
        .send()
        .await
        .expect("pdf");
    assert_eq!(pdf.status(), 200);
    assert_eq!(pdf.headers()["content-type"], "application/pdf");
    let bytes = pdf.bytes().await.expect("bytes");
    assert!(bytes.starts_with(b"%PDF-"), "not a PDF");
    // Regenerated byte for byte.
    let (_, again, _) = app
        .client(Some(&buyer_key))
        .get(&format!("/v1/finance/periods/1/invoices/{buyer}"))
        .await;
    assert_eq!(again, invoice);

    let (s, list, _) = app.client(Some(&fin)).get(periods).await;
    assert_eq!((s, &list["periods"]), (200, &json!([closed.clone()])));
    let (s, _, _) = app.client(Some(&buyer_key)).get(periods).await;
    assert_eq!(s, 403);

    // The audit trail names each action and its outcome.
    let (_, trail, _) = read(&app, &fin).await;
    let actions: Vec<(String, String)> = trail
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["action"] != "create_account" && e["action"] != "deposit")
        .map(|e| {
            let outcome = &e["outcome"];
            (
                e["action"].as_str().expect("action").to_string(),
                outcome["code"]
                    .as_str()
                    .or(outcome["status"].as_str())
                    .expect("outcome")
                    .to_string(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = [
        ("adjustment", "applied"),
        ("adjustment", "replayed"),
        ("adjustment", "ledger_rejected"),
        ("adjustment", "applied"),
        ("adjustment", "sla_cash_out_exceeded"),
        ("adjustment", "write_off_exceeds_debt"),
        ("adjustment", "applied"),
        ("close_period", "applied"),
        ("close_period", "close_not_contiguous"),
        ("close_period", "period_not_ended"),
        ("adjustment", "applied"),
        ("adjustment", "invalid_adjustment"),
    ]
    .iter()
    .map(|(a, o)| (a.to_string(), o.to_string()))
    .collect();
    assert_eq!(actions, expected);

    let before = balance(&app, &buyer_key).await;
    app.restart().await;
    let (s, after, _) = app.client(Some(&fin)).get(periods).await;
    assert_eq!((s, &after), (200, &list));
    assert_eq!(balance(&app, &buyer_key).await, before);
}
