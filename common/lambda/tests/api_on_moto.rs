//! The `api` function's router answers Lambda function-URL events (API Gateway HTTP
//! API v2 shape, as `lambda_http` decodes them) with the state in DynamoDB: an API key
//! is required, a project is created and listed, another tenant cannot see it.

mod support;

use http_body_util::BodyExt;
use std::sync::Arc;
use std::time::Duration;
use support::Deployment;
use tessera_core::TenantId;
use tessera_lambda::routes;
use tower::ServiceExt;

fn event(method: &str, path: &str, key: Option<&str>, body: Option<&str>) -> lambda_http::Request {
    let sample = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../events/http-api-create-project.json"),
    )
    .unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&sample).unwrap();
    v["rawPath"] = path.into();
    v["rawQueryString"] = "".into();
    v["queryStringParameters"] = serde_json::json!({});
    v["requestContext"]["http"]["method"] = method.into();
    v["requestContext"]["http"]["path"] = path.into();
    match key {
        Some(k) => v["headers"]["authorization"] = format!("Bearer {k}").into(),
        None => {
            v["headers"]
                .as_object_mut()
                .unwrap()
                .remove("authorization");
        }
    }
    v["body"] = body.map_or(serde_json::Value::Null, Into::into);
    lambda_http::request::from_str(&v.to_string()).unwrap()
}

async fn call(app: &axum::Router, req: lambda_http::Request) -> (u16, serde_json::Value) {
    let res = app.clone().oneshot(req).await.unwrap();
    let status = res.status().as_u16();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_router_answers_function_url_events_on_dynamodb() {
    let d = Deployment::start(Duration::from_secs(30), 5).await;
    let function = &d.functions[routes::STAGE_RUNNER];
    let faces = Arc::new(tessera_jobs::photos::FaceService::with_models(
        support::models(),
    ));
    let app = tessera_api::router(tessera_lambda::api::state(
        function,
        faces,
        ("3.8".into(), true),
    ));
    let store = &d.adapters.store;
    let (_, key) = tessera_api::auth::create_key(store, TenantId::local(), true)
        .await
        .unwrap();
    let other: TenantId = "someone-else".parse().unwrap();
    let (_, other_key) = tessera_api::auth::create_key(store, other, false)
        .await
        .unwrap();

    let (status, _) = call(&app, event("GET", "/healthz", None, None)).await;
    assert_eq!(status, 200);
    let (status, problem) = call(&app, event("GET", "/v1/projects", None, None)).await;
    assert_eq!(status, 401, "{problem}");

    // The sample event itself, with a real key.
    let (status, created) = call(
        &app,
        event(
            "POST",
            "/v1/projects",
            Some(&key),
            Some(r#"{"name":"from-a-function-url"}"#),
        ),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let pid = created["project_id"].as_str().unwrap().to_string();
    let (status, list) = call(&app, event("GET", "/v1/projects", Some(&key), None)).await;
    assert_eq!(status, 200);
    assert!(list.to_string().contains(&pid), "{list}");
    let (status, _) = call(
        &app,
        event(
            "GET",
            &format!("/v1/projects/{pid}"),
            Some(&other_key),
            None,
        ),
    )
    .await;
    assert_eq!(
        status, 404,
        "another tenant's project does not exist for it"
    );
    let (status, caps) = call(&app, event("GET", "/v1/capabilities", Some(&key), None)).await;
    assert_eq!(status, 200);
    assert!(caps.to_string().contains("features.extract.sift"), "{caps}");
}
