//! The served `/openapi.json` is an exact contract (issue 16): every operation declares every
//! status it answers, each with its schema; the `Idempotency-Key` header where the server reads
//! it; enums, bounds and patterns exactly as the server enforces them. The bounds are compared
//! with the engine's and the gateway's named limits, and each pattern with the server's own
//! validator over edge cases and seeded random strings: a string the pattern allows is
//! accepted, one it forbids refused. (`.ci/schemathesis.sh` fuzzes the running server against
//! the same document.) The app runs on port 0 with an embedded store in a temp dir.

use crate::support::api::{Backend, TestApp, delivery_opts};
use gateway::api::dto::{BidSpecOf, DecimalStr, parse_id};
use gateway::api::launch::{AccessOf, LaunchSpecOf, SSH_KEY_TYPES, report_text};
use gpux_wire::{AccessRequest, LaunchRequest};
use serde_json::{Value, json};

/// Operations of the REST API: public 5 (`fills/recent`, issue 25; `market/offers`, issue
/// 26), supplier 11, delivery 6
/// (`lost`, issue 25), node keys 3, buyer 10, admin 6, reports 1, finance 7 (credit notes and
/// `/v1/invoices`, issue 25) (paths × methods, the websocket excluded).
const OPERATIONS: usize = 52;

/// The document as the server runs: the market delivers leases (a bid needs a launch spec).
async fn served() -> (TestApp, Value) {
    let app = TestApp::start(Backend::Embedded, delivery_opts()).await;
    let (status, doc, headers) = app.client(None).get("/openapi.json").await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "application/json");
    (app, doc)
}

/// `(METHOD, path, operation)` of every operation.
fn operations(doc: &Value) -> Vec<(String, String, &Value)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            out.push((method.to_uppercase(), path.clone(), op));
        }
    }
    out
}

/// Follows a `$ref` within the document.
fn resolve<'a>(doc: &'a Value, v: &'a Value) -> &'a Value {
    match v.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let target = doc
                .pointer(r.trim_start_matches('#'))
                .unwrap_or_else(|| panic!("dangling {r}"));
            resolve(doc, target)
        }
        None => v,
    }
}

fn schema<'a>(doc: &'a Value, name: &str) -> &'a Value {
    &doc["components"]["schemas"][name]
}

fn field<'a>(doc: &'a Value, name: &str, f: &str) -> &'a Value {
    let s = &schema(doc, name)["properties"][f];
    assert!(!s.is_null(), "{name}.{f} is not in the document");
    resolve(doc, s)
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .filter_map(|s| s.as_str().map(String::from))
        .collect()
}

fn request_schema<'a>(doc: &'a Value, method: &str, path: &str) -> &'a Value {
    let op = &doc["paths"][path][method.to_lowercase()];
    &op["requestBody"]["content"]["application/json"]["schema"]
}

#[tokio::test]
async fn every_answer_has_its_schema_and_every_status_is_declared() {
    let (_app, doc) = served().await;
    let ops = operations(&doc);
    assert_eq!(
        ops.len(),
        OPERATIONS,
        "operations: {:?}",
        ops.iter().map(|o| (&o.0, &o.1)).collect::<Vec<_>>()
    );
    for (method, path, op) in &ops {
        let label = format!("{method} {path}");
        let responses = op["responses"].as_object().expect("responses");
        for (status, r) in responses {
            let r = resolve(&doc, r);
            let content = r["content"].as_object();
            if status == "204" {
                assert!(content.is_none(), "{label} {status} has a body");
                continue;
            }
            let content = content.unwrap_or_else(|| panic!("{label} {status} has no content"));
            assert!(!content.is_empty(), "{label} {status}");
            for (media, m) in content {
                assert!(
                    m["schema"].is_object(),
                    "{label} {status} {media} has no schema"
                );
            }
            if status.as_str() >= "400" {
                assert_eq!(
                    content["application/json"]["schema"]["$ref"], "#/components/schemas/ErrorBody",
                    "{label} {status}"
                );
            }
        }
        let has = |s: &str| responses.contains_key(s);
        let secured = op["security"].as_array().is_some_and(|s| !s.is_empty());
        let path_params = op["parameters"]
            .as_array()
            .is_some_and(|ps| ps.iter().any(|p| p["in"] == "path"));
        let body = op.get("requestBody").is_some();
        let public = [
            "/v1/catalog",
            "/v1/inventory",
            "/v1/inventory/domains",
            "/v1/fills/recent",
            "/v1/market/offers",
        ]
        .contains(&path.as_str());
        assert_eq!(secured, !public, "{label}: security");
        if secured {
            for s in ["401", "403", "429"] {
                assert!(has(s), "{label} does not declare {s}");
            }
            let retry = &resolve(&doc, &responses["429"])["headers"]["Retry-After"];
            assert_eq!(retry["required"], true, "{label}: Retry-After");
            assert_eq!(retry["schema"]["minimum"], 1);
        }
        if body {
            for s in ["400", "413", "415"] {
                assert!(has(s), "{label} does not declare {s}");
            }
        }
        if path_params {
            assert!(has("404"), "{label} does not declare 404");
        }
        assert_eq!(has("503"), path != "/v1/catalog", "{label}: 503");
        // Every answer of success has a declared body (no bare 200s).
        let ok = responses
            .keys()
            .filter(|s| s.starts_with('2'))
            .collect::<Vec<_>>();
        // A re-sent bid answers 200 with its first answer, a new one 201 (issue 25).
        let successes = if label == "POST /v1/bids" { 2 } else { 1 };
        assert_eq!(ok.len(), successes, "{label}: success statuses");
    }
    // The query-reading operations declare 400 for a malformed query.
    for path in [
        "/v1/inventory",
        "/v1/inventory/domains",
        "/v1/market/offers",
        "/v1/leases",
        "/v1/reports/{kind}",
    ] {
        assert!(
            doc["paths"][path]["get"]["responses"]["400"].is_object(),
            "{path}"
        );
    }
    // Reports declare their three media types; the error envelope is the wire type.
    let report = &doc["paths"]["/v1/reports/{kind}"]["get"]["responses"]["200"]["content"];
    let mut media: Vec<_> = report
        .as_object()
        .expect("content")
        .keys()
        .cloned()
        .collect();
    media.sort();
    assert_eq!(
        media,
        [
            "application/json",
            "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
            "text/csv; charset=utf-8"
        ]
    );
    assert_eq!(
        strings(&schema(&doc, "ErrorBody")["required"]),
        ["code", "message", "request_id"]
    );
}

#[tokio::test]
async fn idempotency_keys_path_ids_and_query_bounds_are_declared() {
    let (_app, doc) = served().await;
    let header = |method: &str, path: &str| {
        doc["paths"][path][method]["parameters"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == "Idempotency-Key").cloned())
    };
    let optional = [
        "/v1/bids",
        "/v1/nodes",
        "/v1/offers",
        "/v1/admin/accounts",
        "/v1/admin/accounts/{id}/keys",
        "/v1/node-keys",
    ];
    let required = [
        "/v1/admin/accounts/{id}/deposits",
        "/v1/admin/accounts/{id}/payouts",
        "/v1/finance/adjustments",
        "/v1/finance/periods",
    ];
    for path in optional.iter().chain(&required) {
        let h = header("post", path).unwrap_or_else(|| panic!("POST {path}: no Idempotency-Key"));
        assert_eq!(h["in"], "header");
        assert_eq!(h["required"], required.contains(path), "POST {path}");
        assert_eq!(h["schema"]["type"], "string");
        assert_eq!(h["schema"]["pattern"], "^[!-~]{1,128}$");
        assert_eq!(
            h["schema"]["maxLength"],
            gateway::api::idempotency::MAX_IDEMPOTENCY_KEY_LEN
        );
    }
    for (method, path, op) in operations(&doc) {
        let reads_key = optional.contains(&path.as_str()) || required.contains(&path.as_str());
        if method != "POST" || !reads_key {
            assert!(
                header(&method.to_lowercase(), &path).is_none(),
                "{method} {path}"
            );
        }
        for p in op["parameters"].as_array().into_iter().flatten() {
            if p["in"] == "path" && p["name"] == "id" {
                assert_eq!(p["schema"]["pattern"], "^[0-9]{1,20}$", "{method} {path}");
            }
            if p["in"] == "query" {
                assert_ne!(
                    p["schema"]["type"],
                    json!(["string", "null"]),
                    "{method} {path}"
                );
            }
        }
    }
    // An invoice's `format=` (empty) is its default, JSON (issue 17).
    let invoice = doc["paths"]["/v1/finance/periods/{id}/invoices/{account}"]["get"]["parameters"]
        .as_array()
        .expect("params");
    let format = invoice
        .iter()
        .find(|p| p["name"] == "format")
        .expect("format");
    assert_eq!(format["allowEmptyValue"], true);
    assert_eq!(
        strings(&resolve(&doc, &format["schema"])["enum"]),
        ["json", "csv", "xlsx", "pdf"]
    );
    let leases = doc["paths"]["/v1/leases"]["get"]["parameters"]
        .as_array()
        .expect("params");
    let limit = leases.iter().find(|p| p["name"] == "limit").expect("limit");
    assert_eq!(limit["schema"]["minimum"], 1);
    assert_eq!(
        limit["schema"]["maximum"],
        gateway::api::buyer::MAX_LEASE_PAGE
    );
    let state = leases.iter().find(|p| p["name"] == "state").expect("state");
    assert_eq!(
        strings(&state["schema"]["enum"]),
        ["live", "ended", "all", "wiping"]
    );
    let report = doc["paths"]["/v1/reports/{kind}"]["get"]["parameters"]
        .as_array()
        .expect("params");
    let kind = resolve(
        &doc,
        &report.iter().find(|p| p["name"] == "kind").expect("kind")["schema"],
    );
    assert_eq!(
        strings(&kind["enum"]),
        [
            "buyer-statements",
            "supplier-payouts",
            "platform-summary",
            "trial-balance",
            "audit-trail",
            "gl-export",
            "reconciliation"
        ]
    );
    let tz = report.iter().find(|p| p["name"] == "tz").expect("tz");
    let zones = strings(&tz["schema"]["enum"]);
    assert_eq!(zones.len(), chrono_tz::TZ_VARIANTS.len());
    assert!(zones.contains(&"Asia/Shanghai".to_string()));
    let format = report
        .iter()
        .find(|p| p["name"] == "format")
        .expect("format");
    assert_eq!(
        strings(&resolve(&doc, &format["schema"])["enum"]),
        ["json", "csv", "xlsx"]
    );
}

#[tokio::test]
async fn enums_and_bounds_are_the_servers() {
    use exchange::limits::*;
    let (app, doc) = served().await;
    let skus: Vec<String> = app
        .api()
        .catalog
        .iter()
        .map(|(_, s)| s.id.clone())
        .collect();
    assert!(skus.len() > 3);
    let regions = app.api().config.regions.clone();
    assert_eq!(regions.len(), gateway::api::DEFAULT_REGIONS.len());
    for (s, f) in [("NodeRequest", "sku"), ("BidRequest", "sku")] {
        assert_eq!(strings(&field(&doc, s, f)["enum"]), skus, "{s}.{f}");
    }
    assert_eq!(
        strings(&field(&doc, "NodeRequest", "region")["enum"]),
        regions
    );
    let update = field(&doc, "NodeUpdateRequest", "region");
    assert_eq!(strings(&update["enum"]), regions);
    assert!(
        update["enum"]
            .as_array()
            .expect("enum")
            .contains(&Value::Null)
    );
    let constraints = field(&doc, "ConstraintsDto", "regions");
    assert_eq!(strings(&constraints["items"]["enum"]), regions);
    assert_eq!(constraints["maxItems"], MAX_CONSTRAINT_ENTRIES);
    assert_eq!(
        field(&doc, "ConstraintsDto", "jurisdictions")["maxItems"],
        MAX_CONSTRAINT_ENTRIES
    );
    let inventory = doc["paths"]["/v1/inventory"]["get"]["parameters"]
        .as_array()
        .expect("params");
    for (name, values) in [("sku", &skus), ("region", &regions)] {
        let p = inventory.iter().find(|p| p["name"] == name).expect(name);
        assert_eq!(&strings(&p["schema"]["enum"]), values, "inventory {name}");
    }

    let gpus = |s: &str| field(&doc, s, "gpus").clone();
    for s in ["NodeRequest", "OfferRequest", "OfferAmendRequest"] {
        assert_eq!(gpus(s)["minimum"], 1, "{s}.gpus");
        assert_eq!(gpus(s)["maximum"], MAX_NODE_GPUS, "{s}.gpus");
    }
    assert_eq!(gpus("BidRequest")["minimum"], 1);
    assert_eq!(gpus("BidRequest")["maximum"], MAX_BID_GPUS);
    assert_eq!(
        field(&doc, "HeartbeatRequest", "healthy_gpus")["maximum"],
        MAX_NODE_GPUS
    );
    for s in ["OfferRequest", "OfferAmendRequest"] {
        assert_eq!(field(&doc, s, "max_lease_s")["minimum"], 1);
        assert_eq!(field(&doc, s, "max_lease_s")["maximum"], MAX_LEASE_SECONDS);
        assert_eq!(field(&doc, s, "min_lease_s")["maximum"], MAX_LEASE_SECONDS);
        assert_eq!(field(&doc, s, "notice_s")["maximum"], MAX_NOTICE_SECONDS);
        assert_eq!(field(&doc, s, "provision_s")["minimum"], 1);
        assert_eq!(
            field(&doc, s, "provision_s")["maximum"],
            MAX_PROVISION_SECONDS
        );
    }
    assert_eq!(field(&doc, "BidRequest", "duration_s")["minimum"], 1);
    assert_eq!(
        field(&doc, "BidRequest", "duration_s")["maximum"],
        MAX_LEASE_SECONDS
    );
    let coid = field(&doc, "BidRequest", "client_order_id");
    assert_eq!(coid["maxLength"], MAX_CLIENT_ORDER_ID_LEN);
    assert_eq!(
        coid["pattern"],
        format!("^[!-~]{{1,{MAX_CLIENT_ORDER_ID_LEN}}}$")
    );
    let name = field(&doc, "NodeRequest", "name");
    assert_eq!(name["maxLength"], MAX_NODE_NAME_LEN);
    assert_eq!(
        name["pattern"],
        format!("^[A-Za-z0-9._-]{{1,{MAX_NODE_NAME_LEN}}}$")
    );

    use gateway::delivery::*;
    assert_eq!(
        field(&doc, "LaunchRequest", "ssh_keys")["maxItems"],
        MAX_SSH_KEYS
    );
    assert_eq!(
        field(&doc, "LaunchRequest", "ssh_keys")["items"]["maxLength"],
        MAX_SSH_KEY_BYTES
    );
    assert_eq!(
        field(&doc, "LaunchRequest", "image")["maxLength"],
        MAX_IMAGE_BYTES
    );
    assert_eq!(
        field(&doc, "LaunchRequest", "command")["maxItems"],
        MAX_COMMAND_ARGS
    );
    assert_eq!(
        field(&doc, "LaunchRequest", "command")["items"]["maxLength"],
        MAX_COMMAND_ARG_BYTES
    );
    let env = field(&doc, "LaunchRequest", "env");
    assert_eq!(env["maxProperties"], MAX_ENV_VARS);
    assert_eq!(
        env["additionalProperties"]["maxLength"],
        MAX_ENV_VALUE_BYTES
    );
    let ports = field(&doc, "LaunchRequest", "ports");
    assert_eq!(ports["maxItems"], MAX_PORTS);
    assert_eq!(ports["uniqueItems"], true);
    assert_eq!(ports["items"]["minimum"], 1);
    assert_eq!(ports["items"]["maximum"], 65535);
    assert_eq!(
        field(&doc, "LaunchRequest", "disk_gb")["maximum"],
        MAX_DISK_GB
    );
    assert_eq!(
        field(&doc, "AccessRequest", "ssh_host")["maxLength"],
        MAX_HOST_BYTES
    );
    assert_eq!(
        field(&doc, "AccessRequest", "ssh_user")["maxLength"],
        MAX_USER_BYTES
    );
    assert_eq!(
        field(&doc, "AccessRequest", "urls")["maxProperties"],
        MAX_PORTS
    );
    assert_eq!(
        field(&doc, "AccessRequest", "urls")["additionalProperties"]["maxLength"],
        MAX_URL_BYTES
    );
    for (s, f) in [
        ("FailedRequest", "reason"),
        ("LostRequest", "reason"),
        ("TornDownRequest", "method"),
    ] {
        assert_eq!(field(&doc, s, f)["maxLength"], MAX_REPORT_TEXT_BYTES, "{s}");
    }
    // A failure's cause is one of three names (issue 25; `gpu_changed`, issue 26).
    assert!(!schema(&doc, "FailedRequest")["properties"]["cause"].is_null());
    assert_eq!(
        strings(&schema(&doc, "FailureCauseDto")["enum"]),
        ["node", "launch_spec", "gpu_changed"]
    );
    // The market delivers leases (as the server runs): a bid's launch spec is required.
    assert!(strings(&schema(&doc, "BidRequest")["required"]).contains(&"launch".to_string()));
    // Every request body refuses unknown fields, as the server does.
    for s in [
        "NodeRequest",
        "NodeUpdateRequest",
        "HeartbeatRequest",
        "UnhealthyGpu",
        "AttestationRequest",
        "AttestedGpuDto",
        "NicDto",
        "OfferRequest",
        "OfferAmendRequest",
        "BidRequest",
        "ConstraintsDto",
        "CreateAccountRequest",
        "AmountRequest",
        "LaunchRequest",
        "AccessRequest",
        "ReadyRequest",
        "FailedRequest",
        "LostRequest",
        "TornDownRequest",
        "NodeKeyRequest",
        "AdjustmentRequest",
        "ClosePeriodRequest",
        "SlaTermsDto",
    ] {
        assert_eq!(schema(&doc, s)["additionalProperties"], false, "{s}");
    }
    // An offer's SLA terms (issue 26): the bounds are settlement's named constants.
    {
        use settlement::sla::*;
        let f = |n: &str| field(&doc, "SlaTermsDto", n).clone();
        assert_eq!(f("credit_multiple")["minimum"], MIN_MULTIPLE);
        assert_eq!(f("credit_multiple")["maximum"], MAX_MULTIPLE);
        assert_eq!(f("outage_cap_s")["minimum"], MIN_OUTAGE_CAP_S);
        assert_eq!(f("outage_cap_s")["maximum"], MAX_OUTAGE_CAP_S);
        assert_eq!(
            f("availability")["pattern"],
            gpux_wire::SLA_AVAILABILITY_PATTERN
        );
        assert!(!schema(&doc, "OfferRequest")["properties"]["sla"].is_null());
        assert!(!schema(&doc, "OfferView")["properties"]["sla"].is_null());
        assert!(!schema(&doc, "LeaseView")["properties"]["sla_terms"].is_null());
    }
    // Issue 26's views: a level's verified GPUs (absent in the feed, so not required), an
    // offer's measured reliability beside its promise (absent in POST/PUT answers), the
    // promise as a ratio (always there).
    {
        let required = |name: &str| strings(&schema(&doc, name)["required"]);
        assert!(!field(&doc, "LevelView", "verified_free_gpus").is_null());
        assert!(!required("LevelView").contains(&"verified_free_gpus".to_string()));
        for f in ["reliability", "supplier_reliability"] {
            assert!(
                serde_json::to_string(&schema(&doc, "OfferView")["properties"][f])
                    .unwrap()
                    .contains("#/components/schemas/ReliabilityView"),
                "OfferView.{f}"
            );
            assert!(!required("OfferView").contains(&f.to_string()), "{f}");
        }
        assert_eq!(
            field(&doc, "SlaTermsView", "availability_ratio")["type"],
            "string"
        );
    }
}

#[tokio::test]
async fn posting_and_amending_an_offer_take_different_bodies() {
    let (_app, doc) = served().await;
    let post = request_schema(&doc, "POST", "/v1/offers");
    let put = request_schema(&doc, "PUT", "/v1/offers/{id}");
    assert_eq!(post["$ref"], "#/components/schemas/OfferRequest");
    assert_eq!(put["$ref"], "#/components/schemas/OfferAmendRequest");
    let post = resolve(&doc, post);
    let put = resolve(&doc, put);
    assert!(strings(&post["required"]).contains(&"node_id".to_string()));
    assert_eq!(post["properties"]["node_id"]["type"], "string");
    assert!(put["properties"].get("node_id").is_none());
    assert_eq!(put["additionalProperties"], false);
    let mut post_fields: Vec<_> = post["properties"]
        .as_object()
        .expect("props")
        .keys()
        .cloned()
        .collect();
    // SLA terms are posted only: an amend keeps them (issue 26).
    post_fields.retain(|f| f != "node_id" && f != "sla");
    let put_fields: Vec<_> = put["properties"]
        .as_object()
        .expect("props")
        .keys()
        .cloned()
        .collect();
    assert_eq!(post_fields, put_fields, "the same terms");
    // A registered node's id leads to posting its offer (a link for clients and the fuzzer's
    // stateful phase), an offer's to amending it.
    let node_links = &doc["paths"]["/v1/nodes"]["post"]["responses"]["201"]["links"];
    assert_eq!(node_links["PostOffer"]["operationId"], "post_offer");
    assert_eq!(
        node_links["PostOffer"]["requestBody"],
        json!({"node_id": "$response.body#/id"})
    );
    let offer_links = &doc["paths"]["/v1/offers"]["post"]["responses"]["201"]["links"];
    assert_eq!(offer_links["AmendOffer"]["operationId"], "amend_offer");
    assert_eq!(
        offer_links["AmendOffer"]["parameters"],
        json!({"id": "$response.body#/id"})
    );
}

/// A deterministic stream of strings over `alphabet` (a small LCG: seeded, no dependency).
fn random_strings(alphabet: &[u8], count: usize, max_len: usize, seed: u64) -> Vec<String> {
    let mut x = seed;
    let mut next = move || {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (x >> 33) as usize
    };
    (0..count)
        .map(|_| {
            let len = next() % (max_len + 1);
            (0..len)
                .map(|_| alphabet[next() % alphabet.len()] as char)
                .collect()
        })
        .collect()
}

/// Asserts `pattern` allows exactly what `accepts` accepts among `samples`.
fn same_language(what: &str, pattern: &str, samples: &[String], accepts: impl Fn(&str) -> bool) {
    let re = regex::Regex::new(pattern).unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut allowed = 0;
    for s in samples {
        assert_eq!(
            re.is_match(s),
            accepts(s),
            "{what}: {s:?} (pattern {})",
            if re.is_match(s) {
                "allows it"
            } else {
                "forbids it"
            }
        );
        allowed += usize::from(re.is_match(s));
    }
    assert!(
        allowed > 0 && allowed < samples.len(),
        "{what}: samples on both sides"
    );
}

fn with(mut fixed: Vec<&str>, random: Vec<String>) -> Vec<String> {
    fixed.drain(..).map(String::from).chain(random).collect()
}

#[tokio::test]
async fn patterns_are_the_servers_validators() {
    let (_app, doc) = served().await;
    let digits = b"0123456789";

    // An SLA availability promise (issue 26): 90.00..=99.99 % with at most 2 decimals.
    let availability = field(&doc, "SlaTermsDto", "availability")["pattern"]
        .as_str()
        .expect("pattern")
        .to_string();
    same_language(
        "sla availability",
        &availability,
        &with(
            vec![
                "90", "99", "99.9", "99.99", "99.999", "100", "89.99", "9", "099", "99.", ".9",
                "99.0", "90.00", "+99", "99,9",
            ],
            random_strings(b"0123456789.9", 2_000, 6, 26),
        ),
        |s| gateway::api::dto::availability_bp(s).is_some(),
    );

    // Prices: a decimal string the engine takes as a whole number of ticks in (0, 100000].
    let price = field(&doc, "BidRequest", "limit_price")["pattern"]
        .as_str()
        .expect("pattern")
        .to_string();
    for s in ["OfferRequest", "OfferAmendRequest"] {
        assert_eq!(
            field(&doc, s, "spot_price")["pattern"],
            price.as_str(),
            "{s}"
        );
    }
    let catalog = exchange::Catalog::builtin();
    let price_ok = |s: &str| {
        let bid = json!({"client_order_id": "c", "sku": "H100-80G", "gpus": 1, "limit_price": s,
            "kind": "spot", "time_in_force": "ioc"});
        serde_json::from_value::<gpux_wire::BidRequest>(bid)
            .ok()
            .is_some_and(|b| b.to_spec(&catalog).is_ok())
    };
    let samples = with(
        vec![
            "0",
            "0.0",
            "0.0001",
            "0.00001",
            "0.00010",
            "1",
            "01",
            "1.",
            ".5",
            "-1",
            "+1",
            "1e2",
            "1_0",
            "99999.9999",
            "100000",
            "100000.0",
            "100000.0001",
            "100001",
            "20.5000000",
            "20.50001",
            "0.1234",
            "0.12345",
        ],
        random_strings(b"0123456789.-", 3000, 9, 7),
    );
    same_language("price", &price, &samples, price_ok);

    // Amounts: > 0, at most 2 decimals written, at most 10^15 CNY.
    let amount = field(&doc, "AmountRequest", "amount")["pattern"]
        .as_str()
        .expect("pattern")
        .to_string();
    let amount_ok = |s: &str| {
        serde_json::from_value::<DecimalStr>(json!(s))
            .ok()
            .is_some_and(|d| {
                d.0 > rust_decimal::Decimal::ZERO
                    && d.0.scale() <= 2
                    && d.0 <= settlement::money::MAX_INPUT_AMOUNT
            })
    };
    let samples = with(
        vec![
            "0",
            "0.00",
            "0.01",
            "0.10",
            "0.001",
            "1.5",
            "1.50",
            "1.500",
            "1000000000000000",
            "1000000000000000.00",
            "1000000000000000.01",
            "999999999999999.99",
            "10000000000000000",
        ],
        random_strings(b"0123456789.", 3000, 18, 11),
    );
    same_language("amount", &amount, &samples, amount_ok);

    // Ids in bodies and the leases cursor: 1..=20 digits that fit a u64.
    let id = field(&doc, "OfferRequest", "node_id")["pattern"]
        .as_str()
        .expect("pattern")
        .to_string();
    let mut samples = with(
        vec![
            "0",
            "18446744073709551615",
            "18446744073709551616",
            "00000000000000000001",
            "99999999999999999999",
            "1844674407370955161",
            "18446744073709551605",
        ],
        random_strings(digits, 2000, 21, 3),
    );
    samples.extend(
        random_strings(b"12", 2000, 20, 5)
            .into_iter()
            .map(|s| format!("1844{s}")),
    );
    same_language("id", &id, &samples, |s| parse_id(s).is_some());

    // Fabric domains (issue 27): the registration's pattern is the edge's validator; an update
    // also takes "" (clears the domain).
    let domain = field(&doc, "NodeRequest", "fabric_domain")["pattern"]
        .as_str()
        .expect("pattern")
        .to_string();
    let samples = with(
        vec![
            "",
            "pod-a",
            "ib.pod_1",
            "a b",
            "a/b",
            &"x".repeat(64),
            &"x".repeat(65),
        ],
        random_strings(b"aZ09._- /", 2000, 66, 27),
    );
    same_language("fabric domain", &domain, &samples, |s| {
        gateway::api::dto::fabric_domain(s).is_ok()
    });
    let update = field(&doc, "NodeUpdateRequest", "fabric_domain")["pattern"]
        .as_str()
        .expect("pattern")
        .to_string();
    same_language("fabric domain update", &update, &samples, |s| {
        s.is_empty() || gateway::api::dto::fabric_domain(s).is_ok()
    });

    // Tax details (issue 17): a value a field's pattern allows is never 400 (a wrong check
    // character or a blank name is 422), one it forbids always is.
    let tax_ok = |field: &str, s: &str| {
        let mut r = json!({"legal_name": "A Ltd", "taxpayer_id": "91350100M000100Y43"});
        r[field] = json!(s);
        let r: gpux_wire::TaxDetailsRequest = serde_json::from_value(r).expect("shape");
        gateway::api::finance::tax_details_of(&r).map_or_else(|e| e.status != 400, |_| true)
    };
    let tax_pattern = |f: &str| {
        field(&doc, "TaxDetailsRequest", f)["pattern"]
            .as_str()
            .expect("pattern")
            .to_string()
    };
    let samples = with(
        vec![
            "91350100M000100Y43",
            "91350100M000100Y44",
            "91350100I000100Y43",
            "91350100m000100Y43",
            "91350100M000100Y4",
            "91350100M000100Y433",
        ],
        random_strings(b"0189AIOSYZy", 4000, 19, 29),
    );
    same_language("taxpayer id", &tax_pattern("taxpayer_id"), &samples, |s| {
        tax_ok("taxpayer_id", s)
    });
    let samples = with(
        vec![
            "021-61234567",
            "+86 (21) 6123 4567",
            "1234",
            "12345",
            "x12345",
        ],
        random_strings(b"09+-() x", 3000, 42, 31),
    );
    same_language("phone", &tax_pattern("phone"), &samples, |s| {
        tax_ok("phone", s)
    });
    let samples = with(
        vec!["6225880212345678", "12345", "123456", "1234 5678"],
        random_strings(b"09 a", 3000, 36, 37),
    );
    same_language(
        "bank account",
        &tax_pattern("bank_account"),
        &samples,
        |s| tax_ok("bank_account", s),
    );
    // Free text within its length: control characters (C0, DEL, C1) are the only 400s.
    let text: Vec<String> = random_strings(b"a \t\n\x07\x1b\x7f\x85\x9f\xa0", 3000, 12, 41)
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect();
    for f in ["legal_name", "address", "bank_name"] {
        same_language(f, &tax_pattern(f), &text, |s| tax_ok(f, s));
    }
    assert_eq!(
        tax_pattern("legal_name"),
        field(&doc, "AdjustmentRequest", "reason")["pattern"]
    );

    // SSH keys: real keys of every accepted type, truncated, retyped and garbled ones.
    let ssh = field(&doc, "LaunchRequest", "ssh_keys")["items"]["pattern"]
        .as_str()
        .expect("pattern")
        .to_string();
    let ssh_ok = |k: &str| {
        LaunchRequest {
            ssh_keys: vec![k.to_string()],
            ..LaunchRequest::default()
        }
        .to_spec()
        .is_ok()
    };
    let mut keys = vec![
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM7t3CQcihrH/4tM1K41mGfGrkuwsCkbk7Z2fjczQzrv buyer@laptop".to_string(),
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM7t3CQcihrH/4tM1K41mGfGrkuwsCkbk7Z2fjczQzr".to_string(),
        "ssh-ed25519  AAAAC3NzaC1lZDI1NTE5AAAAIM7t3CQcihrH/4tM1K41mGfGrkuwsCkbk7Z2fjczQzrv".to_string(),
        "ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAIM7t3CQcihrH/4tM1K41mGfGrkuwsCkbk7Z2fjczQzrv".to_string(),
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM7t3CQcihrH/4tM1K41mGfGrkuwsCkbk7Z2fjczQzrv\tx".to_string(),
    ];
    let mut x = 1u64;
    for kind in SSH_KEY_TYPES {
        for extra in 0..8usize {
            let mut blob = (kind.len() as u32).to_be_bytes().to_vec();
            blob.extend_from_slice(kind.as_bytes());
            let more = if *kind == "ssh-ed25519" { 36 } else { extra };
            for _ in 0..more {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                blob.push((x >> 56) as u8);
            }
            use base64::Engine as _;
            let body = base64::engine::general_purpose::STANDARD.encode(&blob);
            keys.push(format!("{kind} {body}"));
            keys.push(format!("{kind} {body} someone@host with spaces"));
            keys.push(format!("{kind} {}", body.trim_end_matches('=')));
            keys.push(format!("{kind} {}A", body));
            if body.len() > 8 {
                keys.push(format!("{kind} {}", &body[..body.len() - 4]));
            }
        }
    }
    same_language("ssh key", &ssh, &keys, ssh_ok);

    // Image references and the launch spec's other string rules.
    let image = field(&doc, "LaunchRequest", "image")["pattern"]
        .as_str()
        .expect("pattern")
        .to_string();
    let image_ok = |s: &str| {
        LaunchRequest {
            image: Some(s.to_string()),
            ports: vec![80],
            ..LaunchRequest::default()
        }
        .to_spec()
        .is_ok()
    };
    let samples = with(
        vec![
            "nvcr.io/nvidia/pytorch:24.05-py3",
            "-x",
            ".x",
            "/x",
            "a b",
            "a",
            "_",
            "@",
        ],
        random_strings(b"aZ09._/:@+- %", 2000, 12, 13),
    );
    same_language("image", &image, &samples, image_ok);
    let env_name = field(&doc, "LaunchRequest", "env")["propertyNames"]["pattern"]
        .as_str()
        .expect("pattern")
        .to_string();
    let env_ok = |n: &str| {
        LaunchRequest {
            ssh_keys: vec![keys[0].clone()],
            env: [(n.to_string(), "v".to_string())].into(),
            ..LaunchRequest::default()
        }
        .to_spec()
        .is_ok()
    };
    let samples = with(
        vec!["PATH", "_x", "9x", "a-b", ""],
        random_strings(b"aZ9_-", 2000, 6, 17),
    );
    same_language("env name", &env_name, &samples, env_ok);

    // Access details.
    let access_ok = |a: AccessRequest| a.to_access().is_ok();
    let host = field(&doc, "AccessRequest", "ssh_host")["pattern"]
        .as_str()
        .expect("pattern")
        .to_string();
    let samples = with(
        vec!["203.0.113.7", "-h", "::1", "a_b", "h"],
        random_strings(b"aZ09.:-_ ", 2000, 8, 19),
    );
    same_language("ssh host", &host, &samples, |h| {
        access_ok(AccessRequest {
            ssh_host: Some(h.to_string()),
            ..AccessRequest::default()
        })
    });
    let user = field(&doc, "AccessRequest", "ssh_user")["pattern"]
        .as_str()
        .expect("pattern")
        .to_string();
    let samples = with(
        vec!["root", "_a", "9a", "A", "a-b"],
        random_strings(b"az09_-A", 2000, 6, 23),
    );
    same_language("ssh user", &user, &samples, |u| {
        access_ok(AccessRequest {
            ssh_host: Some("h".into()),
            ssh_user: Some(u.to_string()),
            ..AccessRequest::default()
        })
    });
    let urls = field(&doc, "AccessRequest", "urls");
    let port = urls["propertyNames"]["pattern"]
        .as_str()
        .expect("pattern")
        .to_string();
    let samples = with(
        vec![
            "0", "1", "+80", "0080", "65535", "65536", "-1", "+0", "99999",
        ],
        random_strings(b"0123456789+", 2000, 7, 29),
    );
    same_language("url port", &port, &samples, |p| {
        access_ok(AccessRequest {
            urls: [(p.to_string(), "https://x".to_string())].into(),
            ..AccessRequest::default()
        })
    });
    let url = urls["additionalProperties"]["pattern"]
        .as_str()
        .expect("pattern")
        .to_string();
    let samples = with(
        vec!["http://", "https://a b", "ftp://x", "https://x/é"],
        random_strings(b"htps:/x ", 2000, 10, 31)
            .into_iter()
            .map(|s| format!("http{s}"))
            .collect(),
    );
    same_language("url", &url, &samples, |u| {
        access_ok(AccessRequest {
            urls: [("80".to_string(), u.to_string())].into(),
            ..AccessRequest::default()
        })
    });

    // A report's free text: not only white space, no control characters.
    let text = field(&doc, "FailedRequest", "reason")["pattern"]
        .as_str()
        .expect("pattern")
        .to_string();
    assert_eq!(
        field(&doc, "TornDownRequest", "method")["pattern"],
        text.as_str()
    );
    assert_eq!(
        field(&doc, "LostRequest", "reason")["pattern"],
        text.as_str()
    );
    let samples = with(
        vec![
            " ",
            "a",
            " a ",
            "\u{a0}",
            "\u{3000}x",
            "a\u{85}",
            "\u{7f}",
            "é",
            "\t",
        ],
        random_strings(b" \tax\x0b\x1f", 2000, 5, 37),
    );
    same_language("report text", &text, &samples, |s| {
        report_text("reason", s).is_ok()
    });
}

#[tokio::test]
async fn report_times_of_the_documented_shape_are_never_refused_400() {
    let (app, doc) = served().await;
    let params = doc["paths"]["/v1/reports/{kind}"]["get"]["parameters"]
        .as_array()
        .expect("params");
    let from = params.iter().find(|p| p["name"] == "from").expect("from");
    let shape =
        regex::Regex::new(from["schema"]["pattern"].as_str().expect("pattern")).expect("regex");
    let admin = app.admin();
    for t in [
        "0",
        "99999999999999999999",
        "2026-05-01",
        "2026-02-30",
        "2026-13-01",
        "9999-12-31T23:59:59",
        "2026-05-01T25:00:00",
        "2026-5-1",
        "2026-05-01T08:00",
        "yesterday",
        "",
    ] {
        let (status, v, _) = admin
            .get(&format!("/v1/reports/trial-balance?from={t}&to=1"))
            .await;
        if shape.is_match(t) {
            assert_ne!(status, 400, "from={t:?}: {v}");
        } else {
            assert_eq!(
                (status, v["code"].as_str()),
                (400, Some("invalid_period")),
                "from={t:?}"
            );
        }
    }
}

/// Issue 26: the patterns of an attestation's strings and of an unhealthy GPU's reason allow
/// exactly what the server's validators take (`api::dto::AttestationOf`, `HeartbeatOf`).
#[tokio::test]
async fn attestation_patterns_are_the_servers_validators() {
    use gateway::api::dto::{AttestationOf, HeartbeatOf};
    let (_app, doc) = served().await;
    let pattern = |schema: &str, f: &str| {
        field(&doc, schema, f)["pattern"]
            .as_str()
            .expect("pattern")
            .to_string()
    };
    let attest = |uuid: &str, model: &str, nic: &str, driver: &str| {
        serde_json::from_value::<gpux_wire::AttestationRequest>(json!({
            "gpus": [{"index": 0, "uuid": uuid, "model": model, "memory_mib": 81_559}],
            "driver_version": driver, "cuda_version": "", "nics": [{"name": nic, "gbps": 1}]}))
        .expect("decodes")
        .to_host_facts()
        .is_ok()
    };
    let alphabet = b"GPU-a0 \t\x7f~!.";
    let samples = with(
        vec![
            "", " ", "  ", "GPU-1", "a b", "~", "\u{7f}", "\u{85}x", "\u{a0}",
        ],
        random_strings(alphabet, 400, 40, 26),
    );
    same_language("uuid", &pattern("AttestedGpuDto", "uuid"), &samples, |s| {
        attest(s, "NVIDIA H100", "eth0", "")
    });
    same_language(
        "model",
        &pattern("AttestedGpuDto", "model"),
        &samples,
        |s| attest("GPU-1", s, "eth0", ""),
    );
    same_language("nic name", &pattern("NicDto", "name"), &samples, |s| {
        attest("GPU-1", "NVIDIA H100", s, "")
    });
    same_language(
        "driver version",
        &pattern("AttestationRequest", "driver_version"),
        &samples,
        |s| attest("GPU-1", "NVIDIA H100", "eth0", s),
    );
    // A reason is 1..=256 characters (min_length): the pattern says the rest.
    let reasons: Vec<String> = samples.iter().filter(|s| !s.is_empty()).cloned().collect();
    same_language(
        "reason",
        &pattern("UnhealthyGpu", "reason"),
        &reasons,
        |s| {
            serde_json::from_value::<gpux_wire::HeartbeatRequest>(json!({"healthy_gpus": 8,
            "unhealthy_gpus": [{"index": 1, "reason": s}]}))
            .expect("decodes")
            .unhealthy()
            .is_ok()
        },
    );
    assert_eq!(
        pattern("UnhealthyGpu", "uuid"),
        pattern("AttestedGpuDto", "uuid")
    );
    assert_eq!(
        gpux_wire::MAX_NODE_GPUS_WIRE,
        exchange::limits::MAX_NODE_GPUS
    );
    assert_eq!(
        gpux_wire::MAX_GPU_UUID_LEN,
        exchange::limits::MAX_GPU_UUID_LEN
    );
    assert_eq!(
        gpux_wire::MAX_GPU_MODEL_LEN,
        exchange::limits::MAX_GPU_MODEL_LEN
    );
}
