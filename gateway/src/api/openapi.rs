//! `GET /openapi.json`: the OpenAPI 3.1 description of the REST API, an exact contract
//! (issue 16): what client generators and fuzzers read.
//!
//! Built in two steps:
//! 1. utoipa generates the document from the handlers' `#[utoipa::path]` annotations (each
//!    declares its answers, with their schemas, and the statuses only it can answer: 400
//!    codes, 404, 409, 422) and the wire types' schemas (`gpux-wire`: bounds, patterns).
//! 2. [`document`] completes it from what the server knows at start and from rules that hold
//!    for every operation alike:
//!    - `x-gpux-enum` fields become enums: `"sku"` the catalog's SKU ids, `"region"` the
//!      operator's regions (`ApiConfig::regions`); so do the `sku` and `region` query
//!      parameters, and a report's `tz` the IANA zones. `x-gpux-merge` adds JSON Schema keywords utoipa has no attribute for.
//!    - a bid's `launch` is required when the market delivers leases; a launch spec and
//!      access details state their "a way in" rule (`anyOf`); SSH keys get their exact
//!      pattern ([`ssh_key_pattern`], from `api::launch::SSH_KEY_TYPES`).
//!    - every operation with a key (`security`) answers 401, 403 and 429 (with
//!      `Retry-After`); every one with a body 400, 413 and 415; every one but the catalog 503
//!      — each as an [`ErrorBody`], unless the operation states its own; an error status
//!      stated without a body gets the [`ErrorBody`]. Query parameters are never `null`.
//!
//! The contract's rule: a request the schema allows is never refused 400 (a 422 is a market
//! rule or the market's state: funds, a node's health, a region without nodes), and one it
//! forbids is never accepted. `gateway/tests/openapi.rs` checks the served document;
//! `.ci/schemathesis.sh` fuzzes the running server against it.
//!
//! The websocket protocol is described in `docs/api.md` only.

use crate::api::Api;
use actix_web::{HttpResponse, web};
use serde_json::{Map, Value, json};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

pub use gpux_wire::ErrorBody;

struct Bearer;

impl Modify for Bearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The `Idempotency-Key` header of a POST that creates something (optional): a retry with the
/// same key and body replays the first answer for 24 h (`Idempotent-Replayed: true`).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
pub struct IdempotencyKey {
    /// Names this request: a retry with the same key replays the first answer (24 h); the
    /// same key with another body is 409 `idempotency_conflict`. 1..=128 printable ASCII
    /// characters (else 400 `invalid_idempotency_key`).
    #[param(rename = "Idempotency-Key", value_type = String, required = false, min_length = 1,
        max_length = 128, pattern = "^[!-~]{1,128}$")]
    pub key: Option<String>,
}

/// The `Idempotency-Key` header of a deposit or payout (required: it names the transfer).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
pub struct TransferKey {
    /// Names the transfer (the ledger keeps it as `{account_id}:{key}`): a retry with the same
    /// key and amount answers the same transfer; missing: 400 `missing_idempotency_key`.
    /// 1..=128 printable ASCII characters.
    #[param(rename = "Idempotency-Key", value_type = String, required = true, min_length = 1,
        max_length = 128, pattern = "^[!-~]{1,128}$")]
    pub key: String,
}

/// The `Idempotency-Key` header of an adjustment or a period close (required: it names it).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
pub struct FinanceKey {
    /// Names the adjustment or close (e.g. the ticket id; one key space for every finance
    /// user): a retry with the same key and body answers the same result, another body 409
    /// `idempotency_conflict`; missing: 400 `missing_idempotency_key`. 1..=128 printable
    /// ASCII characters.
    #[param(rename = "Idempotency-Key", value_type = String, required = true, min_length = 1,
        max_length = 128, pattern = "^[!-~]{1,128}$")]
    pub key: String,
}

/// The API description as utoipa generates it (before [`document`] completes it).
#[derive(OpenApi)]
#[openapi(
    info(title = "GPU-capacity exchange", description = "Supplier REST, buyer bids, live \
        inventory and finance reports. Prices are CNY per GPU-hour as decimal strings; ids are \
        strings; times are ms since epoch. Errors are {code, message, request_id, field?}: 400 \
        when a request does not match this document, 422 when it does but a market rule or \
        the market's state refuses it. The websocket protocol (/v1/ws) is in docs/api.md."),
    paths(
        crate::api::public::catalog, crate::api::public::inventory, crate::api::public::me,
        crate::api::public::recent_fills, crate::api::public::market_offers,
        crate::api::public::inventory_domains,
        crate::api::supplier::post_node, crate::api::supplier::list_nodes,
        crate::api::supplier::get_node, crate::api::supplier::patch_node,
        crate::api::supplier::heartbeat, crate::api::supplier::attest, crate::api::supplier::post_offer,
        crate::api::supplier::list_offers, crate::api::supplier::get_offer,
        crate::api::supplier::amend_offer, crate::api::supplier::withdraw_offer,
        crate::api::supplier::earnings,
        crate::api::buyer::post_bid, crate::api::buyer::list_bids, crate::api::buyer::get_bid,
        crate::api::buyer::cancel_bid, crate::api::buyer::cancel_all,
        crate::api::buyer::list_leases, crate::api::buyer::get_lease,
        crate::api::buyer::release_lease, crate::api::buyer::release_bid,
        crate::api::buyer::balance,
        crate::api::admin::create_account, crate::api::admin::list_accounts,
        crate::api::admin::create_key, crate::api::admin::revoke_key,
        crate::api::admin::deposit, crate::api::admin::payout,
        crate::api::reports::report,
        crate::api::delivery::ready, crate::api::delivery::failed, crate::api::delivery::lost,
        crate::api::delivery::torn_down, crate::api::delivery::resume,
        crate::api::delivery::verification,
        crate::api::delivery::node_leases,
        crate::api::node_keys::create_node_key, crate::api::node_keys::list_node_keys,
        crate::api::node_keys::revoke_node_key,
        crate::api::finance::adjust, crate::api::finance::close_period,
        crate::api::finance::periods, crate::api::finance::invoice,
        crate::api::finance::credit_note, crate::api::finance::documents,
        crate::api::finance::set_tax_details,
    ),
    components(schemas(
        gpux_wire::NodeRequest, gpux_wire::NodeUpdateRequest, gpux_wire::HeartbeatRequest,
        gpux_wire::UnhealthyGpu, gpux_wire::AttestationRequest, gpux_wire::AttestedGpuDto,
        gpux_wire::NicDto, gpux_wire::AttestationAnswer, gpux_wire::AttestationMismatchDto,
        gpux_wire::MismatchKindDto, gpux_wire::AttestationStatusDto, gpux_wire::GpuHostView,
        gpux_wire::NodeAttestationView,
        gpux_wire::OfferRequest, gpux_wire::OfferAmendRequest, gpux_wire::BidRequest,
        gpux_wire::ConstraintsDto, gpux_wire::MinSlaDto, gpux_wire::CreateAccountRequest,
        gpux_wire::AmountRequest,
        gpux_wire::AdjustmentRequest, gpux_wire::ClosePeriodRequest,
        gpux_wire::TaxDetailsRequest, gpux_wire::TaxDetailsView,
        gpux_wire::CreditNoteView, gpux_wire::DocumentRef, gpux_wire::DocumentKind,
        gpux_wire::DocumentView, gpux_wire::Documents,
        gpux_wire::NodeView, gpux_wire::OfferView, gpux_wire::BidView, gpux_wire::LeaseView,
        gpux_wire::BalanceView, gpux_wire::EarningsView, gpux_wire::LevelView,
        gpux_wire::AccountView, gpux_wire::Role, gpux_wire::NodeList, gpux_wire::OfferList,
        gpux_wire::BidList, gpux_wire::LeaseList, gpux_wire::AccountList,
        gpux_wire::AccessView, gpux_wire::TeardownView, gpux_wire::LaunchRequest,
        gpux_wire::AccessRequest, gpux_wire::ReadyRequest, gpux_wire::FailedRequest,
        gpux_wire::LostRequest,
        gpux_wire::TornDownRequest, gpux_wire::NodeLeases, gpux_wire::HeartbeatAnswer,
        gpux_wire::OfferWithdrawn, gpux_wire::FillView, gpux_wire::BidPlaced,
        gpux_wire::BidCanceled, gpux_wire::BidsCanceled, gpux_wire::LeaseReleased,
        gpux_wire::BidReleased, gpux_wire::GangRequest, gpux_wire::GangScopeDto,
        gpux_wire::MemberLossDto, gpux_wire::GangMemberStatusDto, gpux_wire::LeaseGangView,
        gpux_wire::DomainInventory, gpux_wire::DomainInventoryView, gpux_wire::DomainNodeSize,
        gpux_wire::GangShapeView,
        gpux_wire::AccountCreatedInfo, gpux_wire::AccountCreated, gpux_wire::KeyCreated,
        gpux_wire::KeyRevoked, gpux_wire::TransferDone, gpux_wire::MeView, gpux_wire::SkuView,
        gpux_wire::CatalogView, gpux_wire::InventorySnapshots, gpux_wire::ws::InventorySnapshot,
        gpux_wire::ErrorBody,
        crate::api::buyer::LeaseStateFilter, crate::api::reports::ReportKind,
        crate::api::reports::ReportFormat, crate::api::reports::ReportJson,
        crate::api::reports::Xlsx, crate::api::public::InventoryAnswer,
        crate::api::public::RecentFills, crate::api::public::RecentFill,
        crate::api::public::MarketOrder, gpux_wire::MarketOffers, gpux_wire::MarketOfferView,
        crate::api::node_keys::NodeKeyRequest, crate::api::node_keys::NodeKeyCreated,
        crate::api::node_keys::NodeKeyView, crate::api::node_keys::NodeKeyList,
    )),
    modifiers(&Bearer),
)]
pub struct ApiDoc;

/// What the document is completed with: the server's catalog, regions and delivery mode.
#[derive(Clone, Debug)]
pub struct Contract {
    /// The catalog's SKU ids, in catalog order.
    pub skus: Vec<String>,
    /// The regions nodes may be placed in (`ApiConfig::regions`).
    pub regions: Vec<String>,
    /// The market delivers leases: a bid needs its launch spec.
    pub delivery: bool,
}

impl Contract {
    /// The contract of a running API.
    pub fn of(api: &Api) -> Contract {
        Contract {
            skus: api.catalog.iter().map(|(_, s)| s.id.clone()).collect(),
            regions: api.config.regions.clone(),
            delivery: api.delivery,
        }
    }
}

/// The complete document for `contract`.
pub fn document(contract: &Contract) -> Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_else(|_| json!({}));
    fill_markers(&mut doc, contract);
    if let Some(schemas) = doc
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    {
        complete_schemas(schemas, contract);
    }
    if let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) {
        for ops in paths.values_mut().filter_map(Value::as_object_mut) {
            for op in ops.values_mut().filter_map(Value::as_object_mut) {
                fill_parameters(op, contract);
                add_common_responses(op);
                add_links(op);
            }
        }
    }
    if let Some(components) = doc.get_mut("components").and_then(Value::as_object_mut) {
        components.insert("responses".into(), common_responses());
    }
    allow_empty_format(&mut doc);
    doc
}

/// An invoice's or a report's `?format=` (empty) means the default, JSON: the parameter
/// says so with `allowEmptyValue` (utoipa has no attribute for it).
fn allow_empty_format(doc: &mut Value) {
    for path in [
        "/paths/~1v1~1finance~1periods~1{id}~1invoices~1{account}/get/parameters",
        "/paths/~1v1~1reports~1{kind}/get/parameters",
    ] {
        let params = doc.pointer_mut(path).and_then(Value::as_array_mut);
        for p in params.into_iter().flatten() {
            if p["in"] == "query" && p["name"] == "format" {
                p["allowEmptyValue"] = json!(true);
            }
        }
    }
}

/// `GET /openapi.json` for the running API: its catalog, regions and delivery mode.
pub async fn serve(api: web::Data<Api>) -> HttpResponse {
    HttpResponse::Ok().content_type("application/json").body(
        api.openapi
            .get_or_init(|| document(&Contract::of(&api)).to_string())
            .clone(),
    )
}

fn strings(v: &[String]) -> Vec<Value> {
    v.iter().map(|s| Value::String(s.clone())).collect()
}

fn enum_of(contract: &Contract, name: &str) -> Option<Vec<Value>> {
    match name {
        "sku" => Some(strings(&contract.skus)),
        "region" => Some(strings(&contract.regions)),
        // The zones `settlement::reports::parse_tz` accepts (IANA names, exact case).
        "tz" => Some(
            chrono_tz::TZ_VARIANTS
                .iter()
                .map(|z| Value::String(z.name().to_string()))
                .collect(),
        ),
        _ => None,
    }
}

fn type_has(schema: &Map<String, Value>, ty: &str) -> bool {
    match schema.get("type") {
        Some(Value::String(t)) => t == ty,
        Some(Value::Array(ts)) => ts.iter().any(|t| t == ty),
        _ => false,
    }
}

/// Sets `values` as the enum of `schema` (of its items for an array); a nullable schema keeps
/// `null`.
fn set_enum(schema: &mut Map<String, Value>, mut values: Vec<Value>) {
    if type_has(schema, "array") {
        if let Some(items) = schema.get_mut("items").and_then(Value::as_object_mut) {
            set_enum(items, values);
        }
        return;
    }
    if type_has(schema, "null") {
        values.push(Value::Null);
    }
    schema.insert("enum".into(), Value::Array(values));
}

/// Merges `add` into `into`, objects key by key.
fn merge(into: &mut Map<String, Value>, add: Map<String, Value>) {
    for (k, v) in add {
        match (into.get_mut(&k), v) {
            (Some(Value::Object(a)), Value::Object(b)) => merge(a, b),
            (_, v) => {
                into.insert(k, v);
            }
        }
    }
}

/// Replaces the `x-gpux-enum` and `x-gpux-merge` markers of the wire types, wherever they are.
fn fill_markers(v: &mut Value, contract: &Contract) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(name)) = m.remove("x-gpux-enum")
                && let Some(values) = enum_of(contract, &name)
            {
                set_enum(m, values);
            }
            if let Some(Value::Object(add)) = m.remove("x-gpux-merge") {
                merge(m, add);
            }
            for child in m.values_mut() {
                fill_markers(child, contract);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|c| fill_markers(c, contract)),
        _ => {}
    }
}

fn property<'a>(
    schemas: &'a mut Map<String, Value>,
    schema: &str,
    field: &str,
) -> Option<&'a mut Map<String, Value>> {
    schemas
        .get_mut(schema)?
        .get_mut("properties")?
        .get_mut(field)?
        .as_object_mut()
}

/// What the schemas say beyond the wire types' attributes.
fn complete_schemas(schemas: &mut Map<String, Value>, contract: &Contract) {
    if contract.delivery
        && let Some(bid) = schemas.get_mut("BidRequest").and_then(Value::as_object_mut)
    {
        // Required and never null: `launch: null` is a bid without a launch spec.
        if let Some(Value::Array(required)) = bid.get_mut("required") {
            required.push("launch".into());
        }
        if let Some(props) = bid.get_mut("properties").and_then(Value::as_object_mut) {
            props.insert(
                "launch".into(),
                json!({"$ref": "#/components/schemas/LaunchRequest"}),
            );
        }
    }
    // Maps and array-wide keywords, which utoipa's field attributes cannot state.
    let no_nul = json!({"type": "string", "maxLength": 4096, "pattern": "^[^\\x00]*$"});
    let port_key = "^\\+?0*(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|\
                    655[0-2][0-9]|6553[0-5])$";
    let keywords = [
        (
            "LaunchRequest",
            "env",
            json!({"maxProperties": 64,
            "propertyNames": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]{0,127}$"},
            "additionalProperties": no_nul}),
        ),
        ("LaunchRequest", "ports", json!({"uniqueItems": true})),
        (
            "AccessRequest",
            "urls",
            json!({"maxProperties": 16,
            "propertyNames": {"type": "string", "pattern": port_key},
            "additionalProperties":
                {"type": "string", "maxLength": 2048, "pattern": "^https?://[!-~]*$"}}),
        ),
        // Keys of a JSON object are strings (the port numbers, in decimal).
        (
            "AccessView",
            "urls",
            json!({
            "propertyNames": {"type": "string", "pattern": "^[1-9][0-9]{0,4}$"}}),
        ),
    ];
    for (schema, field, add) in keywords {
        if let (Some(p), Value::Object(add)) = (property(schemas, schema, field), add) {
            p.remove("propertyNames");
            merge(p, add);
        }
    }
    if let Some(items) = property(schemas, "LaunchRequest", "ssh_keys")
        .and_then(|k| k.get_mut("items"))
        .and_then(Value::as_object_mut)
    {
        items.insert(
            "pattern".into(),
            ssh_key_pattern(crate::api::launch::SSH_KEY_TYPES).into(),
        );
    }
    if let Some(launch) = schemas
        .get_mut("LaunchRequest")
        .and_then(Value::as_object_mut)
    {
        launch.insert(
            "anyOf".into(),
            json!([
                {"required": ["ssh_keys"], "properties": {"ssh_keys": {"minItems": 1}}},
                {"required": ["image", "ports"],
                 "properties": {"image": {"type": "string"}, "ports": {"minItems": 1}}}
            ]),
        );
        launch.insert(
            "description".into(),
            "A bid's launch spec: at least one SSH key, or an image with at least one port to \
             expose (else 400 `invalid_launch`)."
                .into(),
        );
    }
    if let Some(access) = schemas
        .get_mut("AccessRequest")
        .and_then(Value::as_object_mut)
    {
        access.insert(
            "anyOf".into(),
            json!([
                {"required": ["ssh_host"], "properties": {"ssh_host": {"type": "string"}}},
                {"required": ["urls"], "properties": {"urls": {"minProperties": 1}}}
            ]),
        );
    }
    // The wire type is the websocket message's payload; on the wire (REST included) the
    // object carries its tag.
    if let Some(snapshot) = schemas
        .get_mut("InventorySnapshot")
        .and_then(Value::as_object_mut)
    {
        if let Some(props) = snapshot
            .get_mut("properties")
            .and_then(Value::as_object_mut)
        {
            props.insert(
                "type".into(),
                json!({"type": "string", "enum": ["inventory_snapshot"]}),
            );
        }
        if let Some(Value::Array(required)) = snapshot.get_mut("required") {
            required.push("type".into());
        }
    }
}

/// Query parameters: never `null` (absent is how a query leaves one out), and the `sku`,
/// `region` and `tz` ones take the contract's values.
fn fill_parameters(op: &mut Map<String, Value>, contract: &Contract) {
    let Some(Value::Array(params)) = op.get_mut("parameters") else {
        return;
    };
    for p in params.iter_mut().filter_map(Value::as_object_mut) {
        let name = p
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if p.get("in").and_then(Value::as_str) != Some("query") {
            continue;
        }
        let Some(schema) = p.get_mut("schema").and_then(Value::as_object_mut) else {
            continue;
        };
        not_null(schema);
        if let Some(values) = enum_of(contract, &name) {
            set_enum(schema, values);
        }
    }
}

/// Drops `null` from a schema's types (`["string", "null"]`, or `oneOf [X, {type: null}]`).
fn not_null(schema: &mut Map<String, Value>) {
    if let Some(Value::Array(types)) = schema.get_mut("type") {
        types.retain(|t| t != "null");
        if types.len() == 1 {
            let t = types[0].clone();
            schema.insert("type".into(), t);
        }
    }
    let one_of = match schema.get_mut("oneOf") {
        Some(Value::Array(alternatives)) => {
            alternatives.retain(|a| a.get("type").and_then(Value::as_str) != Some("null"));
            (alternatives.len() == 1).then(|| alternatives.remove(0))
        }
        _ => None,
    };
    if let Some(Value::Object(only)) = one_of {
        schema.remove("oneOf");
        merge(schema, only);
    }
}

/// The answers every operation of a kind gives, by status (`#/components/responses`).
fn common_responses() -> Value {
    let error = |description: &str| {
        json!({
            "description": description,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
        })
    };
    let mut rate_limited =
        error("`rate_limited`: over the key's request budget; retry after `Retry-After` seconds");
    rate_limited["headers"] = json!({
        "Retry-After": {
            "description": "Seconds to wait before retrying (at least 1).",
            "required": true,
            "schema": {"type": "integer", "minimum": 1}
        }
    });
    json!({
        "BadJson": error("`bad_json`: the body is not JSON of this request's schema (syntax, \
            missing or unknown fields, wrong types, numbers for decimal strings); \
            `invalid_idempotency_key`"),
        "Unauthorized": error("`unauthorized`: no key, a malformed `Authorization` header, an \
            unknown or revoked key"),
        "Forbidden": error("`forbidden`: the key's role may not do this, or a node key outside \
            its node's endpoints"),
        "PayloadTooLarge": error("`payload_too_large`: a body over 65,536 bytes"),
        "UnsupportedMediaType": error("`unsupported_media_type`: a body whose Content-Type is \
            not application/json"),
        "RateLimited": rate_limited,
        "Unavailable": error("`journal_unavailable`, `journal_refused`, `request_timeout` (the \
            outcome is unknown: retry with the same Idempotency-Key or client order id) or \
            `shutting_down`, or `not_leader` (a process of several on one journal: no leader \
            took the command, nothing was applied: retry)"),
    })
}

/// Adds the answers that follow from an operation's key and body (see the module header).
fn add_common_responses(op: &mut Map<String, Value>) {
    let secured = op
        .get("security")
        .and_then(Value::as_array)
        .is_some_and(|s| !s.is_empty());
    let body = op.contains_key("requestBody");
    let catalog = op.get("operationId").and_then(Value::as_str) == Some("catalog");
    let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) else {
        return;
    };
    // Every error is an ErrorBody (docs/ARCHITECTURE.md: "every error is JSON with a code").
    for (status, r) in responses.iter_mut() {
        if status.as_str() >= "400"
            && let Some(r) = r.as_object_mut()
            && !r.contains_key("$ref")
            && !r.contains_key("content")
        {
            r.insert(
                "content".into(),
                json!({"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}),
            );
        }
    }
    let mut add = |status: &str, name: &str| {
        responses
            .entry(status)
            .or_insert_with(|| json!({"$ref": format!("#/components/responses/{name}")}));
    };
    if body {
        add("400", "BadJson");
        add("413", "PayloadTooLarge");
        add("415", "UnsupportedMediaType");
    }
    if secured {
        add("401", "Unauthorized");
        add("403", "Forbidden");
        add("429", "RateLimited");
    }
    if !catalog {
        add("503", "Unavailable");
    }
}

/// One link: its name, the target operation, its parameters, its request body (or null).
type Link = (&'static str, &'static str, Value, Value);

/// Where an answer's ids lead (OpenAPI links: what a client, or a fuzzer's stateful phase, can
/// do next with them): `(operation, status, links)`.
fn links() -> Vec<(&'static str, &'static str, Vec<Link>)> {
    let node = json!({"id": "$response.body#/id"});
    let none = Value::Null;
    vec![
        (
            "post_node",
            "201",
            vec![
                ("GetNode", "get_node", node.clone(), none.clone()),
                ("PatchNode", "patch_node", node.clone(), none.clone()),
                ("Heartbeat", "heartbeat", node.clone(), none.clone()),
                ("NodeLeases", "node_leases", node.clone(), none.clone()),
                ("ResumeNode", "resume", node.clone(), none.clone()),
                (
                    "PostOffer",
                    "post_offer",
                    json!({}),
                    json!({"node_id": "$response.body#/id"}),
                ),
            ],
        ),
        (
            "post_offer",
            "201",
            vec![
                ("GetOffer", "get_offer", node.clone(), none.clone()),
                ("AmendOffer", "amend_offer", node.clone(), none.clone()),
                (
                    "WithdrawOffer",
                    "withdraw_offer",
                    node.clone(),
                    none.clone(),
                ),
                (
                    "GetNode",
                    "get_node",
                    json!({"id": "$response.body#/node_id"}),
                    none.clone(),
                ),
            ],
        ),
        (
            "post_bid",
            "201",
            vec![
                (
                    "GetBid",
                    "get_bid",
                    json!({"id": "$response.body#/bid_id"}),
                    none.clone(),
                ),
                (
                    "CancelBid",
                    "cancel_bid",
                    json!({"id": "$response.body#/bid_id"}),
                    none.clone(),
                ),
                (
                    "GetLease",
                    "get_lease",
                    json!({"id": "$response.body#/fills/0/lease_id"}),
                    none.clone(),
                ),
                (
                    "ReleaseLease",
                    "release_lease",
                    json!({"id": "$response.body#/fills/0/lease_id"}),
                    none.clone(),
                ),
            ],
        ),
        (
            "create_account",
            "201",
            vec![
                (
                    "CreateKey",
                    "create_key",
                    json!({"id": "$response.body#/account/id"}),
                    none.clone(),
                ),
                (
                    "Deposit",
                    "deposit",
                    json!({"id": "$response.body#/account/id"}),
                    none.clone(),
                ),
                (
                    "Payout",
                    "payout",
                    json!({"id": "$response.body#/account/id"}),
                    none.clone(),
                ),
                (
                    "RevokeKey",
                    "revoke_key",
                    json!({"id": "$response.body#/account/id",
                "key_id": "$response.body#/key_id"}),
                    none.clone(),
                ),
            ],
        ),
        (
            "create_key",
            "201",
            vec![(
                "RevokeKey",
                "revoke_key",
                json!({"id": "$request.path.id",
                "key_id": "$response.body#/key_id"}),
                none.clone(),
            )],
        ),
        (
            "create_node_key",
            "201",
            vec![(
                "RevokeNodeKey",
                "revoke_node_key",
                json!({"key_id": "$response.body#/key_id"}),
                none.clone(),
            )],
        ),
        (
            "release_lease",
            "200",
            vec![(
                "GetLease",
                "get_lease",
                json!({"id": "$response.body#/lease_id"}),
                none.clone(),
            )],
        ),
        (
            "get_lease",
            "200",
            vec![
                ("Ready", "ready", node.clone(), none.clone()),
                ("Failed", "failed", node.clone(), none.clone()),
                ("Lost", "lost", node.clone(), none.clone()),
                ("TornDown", "torn_down", node.clone(), none),
            ],
        ),
    ]
}

/// Adds [`links`] to the operation's answers.
fn add_links(op: &mut Map<String, Value>) {
    let Some(id) = op
        .get("operationId")
        .and_then(Value::as_str)
        .map(String::from)
    else {
        return;
    };
    for (source, status, targets) in links() {
        if source != id {
            continue;
        }
        let Some(response) = op
            .get_mut("responses")
            .and_then(|r| r.get_mut(status))
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        let mut out = Map::new();
        for (name, target, parameters, body) in targets {
            let mut link = json!({"operationId": target, "parameters": parameters});
            if !body.is_null() {
                link["requestBody"] = body;
            }
            out.insert(name.to_string(), link);
        }
        response.insert("links".into(), Value::Object(out));
    }
}

/// The exact pattern of an OpenSSH public key line that `api::launch` accepts: `TYPE BASE64
/// [comment]`, where the canonical, padded base64 blob starts with the length-prefixed `TYPE`
/// and holds at least one more byte (an `ssh-ed25519` blob exactly 51 bytes), and the comment
/// is printable ASCII and spaces. Derived from the accepted types, so both stay one rule.
pub fn ssh_key_pattern(types: &[&str]) -> String {
    let alternatives: Vec<String> = types.iter().map(|t| key_alternative(t)).collect();
    format!("^(?:{})(?: [ -~]*)?$", alternatives.join("|"))
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const ANY: &str = "[A-Za-z0-9+/]";
/// Last character before `==`: two data bits, four zero bits.
const LAST_OF_ONE: &str = "[AQgw]";
/// Last character before `=`: four data bits, two zero bits.
const LAST_OF_TWO: &str = "[AEIMQUYcgkosw048]";

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// `n` arbitrary bytes, canonically encoded (padding included).
fn tail() -> String {
    format!("(?:{ANY}{{4}})*(?:{ANY}{LAST_OF_ONE}==|{ANY}{{2}}{LAST_OF_TWO}=)?")
}

fn key_alternative(kind: &str) -> String {
    let mut prefix = (kind.len() as u32).to_be_bytes().to_vec();
    prefix.extend_from_slice(kind.as_bytes());
    let full = prefix.len() / 3 * 3;
    let fixed = b64(&prefix[..full]);
    let escaped = kind.replace('.', "\\.");
    let body = if kind == "ssh-ed25519" {
        // 51 bytes: the prefix (15, a multiple of 3) and 36 more: 48 characters, no padding.
        format!("{fixed}{ANY}{{48}}")
    } else {
        match prefix.len() - full {
            0 => format!(
                "{fixed}(?:{ANY}{{4}})*(?:{ANY}{{4}}|{ANY}{LAST_OF_ONE}==|{ANY}{{2}}{LAST_OF_TWO}=)"
            ),
            1 => {
                let f = prefix[full];
                let c1 = B64[usize::from(f >> 2)] as char;
                let lo = usize::from(f & 3) << 4;
                let c2 = String::from_utf8_lossy(&B64[lo..lo + 16]).replace('+', "\\+");
                format!("{fixed}{c1}[{c2}](?:{LAST_OF_TWO}=|{ANY}{{2}}{})", tail())
            }
            _ => {
                let (f1, f2) = (prefix[full], prefix[full + 1]);
                let head = b64(&[f1, f2, 0]);
                let lo = usize::from(f2 & 0xF) << 2;
                let c3 = String::from_utf8_lossy(&B64[lo..lo + 4]).replace('+', "\\+");
                format!("{fixed}{}[{c3}]{ANY}{}", &head[..2], tail())
            }
        }
    };
    format!("{escaped} {body}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_key_pattern_matches_the_python_derivation() {
        let p = ssh_key_pattern(crate::api::launch::SSH_KEY_TYPES);
        assert!(p.contains("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5[A-Za-z0-9+/]{48}"));
        assert!(p.contains("ssh-rsa AAAAB3NzaC1yc2[EFGH][A-Za-z0-9+/]"));
        assert!(
            p.contains("sk-ssh-ed25519@openssh\\.com AAAAGnNrLXNzaC1lZDI1NTE5QG9wZW5zc2guY29t")
        );
    }

    #[test]
    fn markers_become_enums_and_common_answers_are_added() {
        let c = Contract {
            skus: vec!["A".into()],
            regions: vec!["r1".into(), "r2".into()],
            delivery: true,
        };
        let doc = document(&c);
        let s = doc.to_string();
        assert!(!s.contains("x-gpux"), "a marker was left");
        assert_eq!(
            doc.pointer("/components/schemas/NodeRequest/properties/region/enum"),
            Some(&json!(["r1", "r2"]))
        );
    }
}
