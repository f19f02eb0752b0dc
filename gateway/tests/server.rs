//! HTTP edge: every error is JSON `{code, message, request_id}` with the right status.

use actix_web::{App, test, web};
use gateway::journal::EmbeddedJournal;
use gateway::market::MarketConfig;
use gateway::sequencer::{self, Sequencer, SnapshotPolicy, SystemClock};
use gateway::server::{AppState, MAX_INTERNAL_BODY, not_found, routes};

async fn app_state(dir: &std::path::Path) -> AppState {
    let journal = EmbeddedJournal::open(dir, 0).await.unwrap();
    let (seq, handle) = Sequencer::recover(
        journal,
        SystemClock,
        MarketConfig::default(),
        SnapshotPolicy::default(),
    )
    .await
    .unwrap();
    sequencer::spawn(seq);
    AppState { sequencer: handle }
}

#[actix_web::test]
async fn errors_are_json_with_codes() {
    let dir = tempfile::tempdir().unwrap();
    let state = app_state(dir.path()).await;
    let app = test::init_service(
        App::new()
            .app_data(web::Data::new(state))
            .configure(|cfg| routes(cfg, true))
            .default_service(web::to(not_found)),
    )
    .await;
    let cases: Vec<(test::TestRequest, u16, &str)> = vec![
        (test::TestRequest::get().uri("/nope"), 404, "not_found"),
        (
            test::TestRequest::post().uri("/healthz"),
            405,
            "method_not_allowed",
        ),
        (
            test::TestRequest::delete().uri("/internal/state"),
            405,
            "method_not_allowed",
        ),
        (
            test::TestRequest::get().uri("/internal/ops"),
            405,
            "method_not_allowed",
        ),
        (
            test::TestRequest::post()
                .uri("/internal/ops")
                .insert_header(("content-type", "application/json"))
                .set_payload("{\"Bogus\":1}"),
            400,
            "bad_json",
        ),
        (
            test::TestRequest::post()
                .uri("/internal/ops")
                .insert_header(("content-type", "text/plain"))
                .set_payload("{}"),
            415,
            "unsupported_media_type",
        ),
        (
            test::TestRequest::post()
                .uri("/internal/ops")
                .insert_header(("content-type", "application/json"))
                .set_payload(vec![b' '; MAX_INTERNAL_BODY + 1]),
            413,
            "payload_too_large",
        ),
    ];
    for (req, status, code) in cases {
        let resp = test::call_service(&app, req.to_request()).await;
        assert_eq!(resp.status().as_u16(), status, "{code}");
        let body: serde_json::Value = test::read_body_json(resp).await;
        assert_eq!(body["code"], code);
        assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()));
        assert_eq!(body["request_id"].as_str().map(str::len), Some(36));
    }
    // The body limit: exactly the limit parses as JSON (and fails as JSON, not as too large).
    let req = test::TestRequest::post()
        .uri("/internal/ops")
        .insert_header(("content-type", "application/json"))
        .set_payload(vec![b' '; MAX_INTERNAL_BODY])
        .to_request();
    let resp = test::call_service(&app, req).await;
    assert_eq!(resp.status().as_u16(), 400);
    // HEAD works for load-balancer probes.
    let resp = test::call_service(
        &app,
        test::TestRequest::default()
            .method(actix_web::http::Method::HEAD)
            .uri("/healthz")
            .to_request(),
    )
    .await;
    assert_eq!(resp.status().as_u16(), 200);
}
