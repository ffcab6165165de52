//! The SAM template and the code agree: every queue a route names is declared with its
//! dead-letter queue, every function crate is deployed, and each SQS-driven function
//! consumes the queues its code expects.

use std::path::PathBuf;
use tessera_lambda::routes;

fn repo() -> PathBuf {
    PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR")
            .expect("cargo sets CARGO_MANIFEST_DIR when it runs tests"),
    )
    .join("../..")
}

#[test]
fn every_routed_queue_and_function_is_in_the_template() {
    let template = std::fs::read_to_string(repo().join("infra/template.yaml")).unwrap();
    let mut routed: Vec<String> = routes::routes()
        .queues()
        .into_iter()
        .map(String::from)
        .collect();
    routed.push(routes::UPLOADS.into());
    for q in routed {
        assert!(
            routes::ALL.contains(&q.as_str()),
            "{q} is routed but not in routes::ALL"
        );
        for name in [q.clone(), format!("{q}-dlq")] {
            assert!(
                template.contains(&format!("QueueName: !Sub \"${{AWS::StackName}}-{name}\"")),
                "infra/template.yaml declares no queue `{name}`"
            );
        }
    }
    for entry in std::fs::read_dir(repo().join("functions")).unwrap() {
        let dir = entry.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        let name = dir.file_name().unwrap().to_str().unwrap().to_string();
        assert!(
            template.contains(&format!("CodeUri: ../functions/{name}\n")),
            "functions/{name} is not deployed by infra/template.yaml"
        );
    }
}

/// The function URL must not answer CORS itself: its `AllowOrigins: ["*"]` overrode the
/// app's answer and let every web page read the API with a key it got hold of.
#[test]
fn the_api_function_url_leaves_cors_to_the_app() {
    let template = std::fs::read_to_string(repo().join("infra/template.yaml")).unwrap();
    let start = template.find("\n  ApiFunction:\n").expect("an ApiFunction");
    let rest = &template[start + 1..];
    // Up to the next resource (a line indented by exactly two spaces).
    let end = rest
        .match_indices("\n  ")
        .map(|(i, _)| i)
        .find(|&i| rest[i + 3..].starts_with(|c: char| c.is_ascii_uppercase()))
        .unwrap_or(rest.len());
    let api = &rest[..end];
    assert!(api.contains("FunctionUrlConfig:"), "{api}");
    assert!(
        !api.contains("Cors:") && !api.contains("AllowOrigins"),
        "the function URL answers CORS itself:\n{api}"
    );
    assert!(
        api.contains("TESSERA_CORS_ORIGINS: !Join [\",\", !Ref ApiAllowedOrigins]"),
        "the app is not told the allowed origins:\n{api}"
    );
    assert!(
        tessera_api::browser::BrowserPolicy::function_url("")
            .cors_origins
            .is_empty(),
        "the default (an empty list joined) allows no other origin"
    );
}
