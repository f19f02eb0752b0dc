//! `GET /openapi.json`: the OpenAPI 3.1 description generated from the handlers' and wire
//! types' annotations (utoipa). The websocket protocol is described in `docs/api.md`.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

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

/// The API description.
#[derive(OpenApi)]
#[openapi(
    info(title = "GPU-capacity exchange", description = "Supplier REST, buyer bids, live \
        inventory and finance reports. Prices are CNY per GPU-hour as decimal strings; ids are \
        strings; times are ms since epoch. Errors are {code, message, request_id}. The \
        websocket protocol (/v1/ws) is in docs/api.md."),
    paths(
        crate::api::public::catalog, crate::api::public::inventory, crate::api::public::me,
        crate::api::supplier::post_node, crate::api::supplier::list_nodes,
        crate::api::supplier::get_node, crate::api::supplier::patch_node,
        crate::api::supplier::heartbeat, crate::api::supplier::post_offer,
        crate::api::supplier::list_offers, crate::api::supplier::get_offer,
        crate::api::supplier::amend_offer, crate::api::supplier::withdraw_offer,
        crate::api::supplier::earnings,
        crate::api::buyer::post_bid, crate::api::buyer::list_bids, crate::api::buyer::get_bid,
        crate::api::buyer::cancel_bid, crate::api::buyer::cancel_all,
        crate::api::buyer::list_leases, crate::api::buyer::get_lease,
        crate::api::buyer::release_lease, crate::api::buyer::balance,
        crate::api::admin::create_account, crate::api::admin::list_accounts,
        crate::api::admin::create_key, crate::api::admin::revoke_key,
        crate::api::admin::deposit, crate::api::admin::payout,
        crate::api::reports::report,
        crate::api::delivery::ready, crate::api::delivery::failed,
        crate::api::delivery::torn_down, crate::api::delivery::resume,
        crate::api::delivery::node_leases,
    ),
    components(schemas(
        crate::api::dto::NodeRequest, crate::api::dto::NodeUpdateRequest,
        crate::api::dto::HeartbeatRequest, crate::api::dto::OfferRequest,
        crate::api::dto::BidRequest, crate::api::dto::ConstraintsDto,
        crate::api::dto::CreateAccountRequest, crate::api::dto::AmountRequest,
        crate::api::views::NodeView, crate::api::views::OfferView, crate::api::views::BidView,
        crate::api::views::LeaseView, crate::api::views::BalanceView,
        crate::api::views::EarningsView, crate::api::views::LevelView,
        crate::api::views::AccountView, crate::accounts::Role,
        crate::api::views::NodeList, crate::api::views::OfferList, crate::api::views::BidList,
        crate::api::views::LeaseList, crate::api::views::AccountList,
        crate::api::views::AccessView, crate::api::views::TeardownView,
        crate::api::launch::LaunchRequest, crate::api::launch::AccessRequest,
        crate::api::launch::ReadyRequest, crate::api::launch::FailedRequest,
        crate::api::launch::TornDownRequest, crate::api::delivery::NodeLeases,
        crate::api::buyer::LeaseStateFilter,
    )),
    modifiers(&Bearer),
)]
pub struct ApiDoc;

/// The OpenAPI document as JSON.
pub fn json() -> String {
    ApiDoc::openapi().to_json().unwrap_or_else(|_| "{}".into())
}
