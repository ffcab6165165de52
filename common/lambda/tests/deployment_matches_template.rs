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
        let package = format!("-p tessera-fn-{name} ");
        let in_an_image = template
            .lines()
            .filter_map(|l| l.trim().strip_prefix("Dockerfile: "))
            .any(|d| {
                std::fs::read_to_string(repo().join(d))
                    .is_ok_and(|dockerfile| dockerfile.contains(&package))
            });
        assert!(
            template.contains(&format!("CodeUri: ../functions/{name}\n")) || in_an_image,
            "functions/{name} is not deployed by infra/template.yaml"
        );
    }
}

/// A job pins one COLMAP version for all its stages, and its small stages run in the
/// stage-runner image (Debian bookworm's COLMAP 3.8) while its large ones run in the
/// worker image: the stack's declared worker version must be the stage-runner's.
#[test]
fn the_stage_runner_image_and_the_worker_run_one_colmap_version() {
    let template = std::fs::read_to_string(repo().join("infra/template.yaml")).unwrap();
    let image = std::fs::read_to_string(repo().join("infra/stage-runner.Dockerfile")).unwrap();
    assert!(image.contains("\nFROM debian:bookworm-slim\n"), "{image}");
    assert!(
        image.contains(" colmap "),
        "the stage-runner image installs no COLMAP"
    );
    assert!(
        template.contains("  WorkerColmapVersion:\n    Type: String\n    Default: \"3.8\"\n"),
        "WorkerColmapVersion's default is not Debian bookworm's COLMAP 3.8"
    );
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

/// `sam build --cached` keys each function on its own folder: a change in `common/`
/// would deploy stale binaries. The architecture CI builds is the default.
#[test]
fn sam_builds_are_not_cached_and_the_default_architecture_is_the_one_ci_builds() {
    let samconfig = std::fs::read_to_string(repo().join("samconfig.toml")).unwrap();
    assert!(samconfig.contains("cached = false"), "{samconfig}");
    assert!(samconfig.contains("Architecture=x86_64"), "{samconfig}");
    let deploy = samconfig
        .split("[default.deploy.parameters]")
        .nth(1)
        .expect("deploy parameters");
    assert!(
        !deploy.contains("template_file"),
        "sam deploy would read the source template, not the one sam build wrote"
    );
    assert!(
        deploy.contains("resolve_image_repos = true"),
        "the stage-runner image has no repository to be pushed to"
    );
    let template = std::fs::read_to_string(repo().join("infra/template.yaml")).unwrap();
    assert!(
        template.contains("  Architecture:\n    Type: String\n    Default: x86_64\n"),
        "the template's default architecture is not x86_64"
    );
    assert!(
        !template.contains("DeletionPolicy: Retain\n"),
        "a first deploy that rolls back must not leave a fixed-name bucket or table behind"
    );
}

/// Batch state changes are matched by this stack's own job queues (two stacks would
/// otherwise receive each other's), and dead-letter alarms watch what the archiver cannot
/// hide: messages received, not messages visible.
#[test]
fn batch_events_are_the_stacks_own_and_dead_letter_alarms_can_fire() {
    let template = std::fs::read_to_string(repo().join("infra/template.yaml")).unwrap();
    assert!(
        template.contains("jobQueue: [!Ref CpuJobQueue, !Ref GpuJobQueue]"),
        "the Batch rule does not name the stack's job queues"
    );
    assert!(!template.contains("ApproximateNumberOfMessagesVisible"));
    assert_eq!(
        template
            .matches("MetricName: NumberOfMessagesReceived")
            .count(),
        routes::ALL.len(),
        "one alarm per dead-letter queue"
    );
}

/// The api function's `/metrics` reads queue depths: its role may.
#[test]
fn the_api_role_may_read_queue_depths() {
    let template = std::fs::read_to_string(repo().join("infra/template.yaml")).unwrap();
    let start = template.find("\n  ApiFunction:\n").unwrap();
    let api = &template[start
        ..template[start + 1..]
            .find("\n  ReaperFunction:")
            .map_or(template.len(), |e| start + 1 + e)];
    assert!(api.contains("sqs:GetQueueAttributes"), "{api}");
    // A broken face layer must not take every route down: models load on first use.
    assert!(api.contains("TESSERA_PRELOAD_FACES: \"0\""), "{api}");
}

/// Memory and vCPUs of the EC2 instance types the template may name (the EC2 instance
/// type pages), MiB.
fn instance(t: &str) -> (u64, u64) {
    match t {
        "c6i.2xlarge" => (16 * 1024, 8),
        "c6i.4xlarge" => (32 * 1024, 16),
        "m6i.2xlarge" => (32 * 1024, 8),
        "m6i.4xlarge" => (64 * 1024, 16),
        "g5.xlarge" => (16 * 1024, 4),
        "g5.2xlarge" => (32 * 1024, 8),
        "g5.4xlarge" => (64 * 1024, 16),
        "g5.8xlarge" => (128 * 1024, 32),
        "g5.12xlarge" => (192 * 1024, 48),
        "g5.16xlarge" => (256 * 1024, 64),
        other => panic!("add the memory and vCPUs of {other}"),
    }
}

/// A job definition's resource requirement of `kind` (`MEMORY`, `VCPU`).
fn requirement(template: &str, definition: &str, kind: &str) -> u64 {
    template
        .split(&format!("  {definition}:"))
        .nth(1)
        .unwrap()
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix(&format!("- {{Type: {kind}, Value: \""))
                .and_then(|v| v.strip_suffix("\"}"))
        })
        .unwrap_or_else(|| panic!("{definition} has no {kind}"))
        .parse()
        .unwrap()
}

/// Every container resource class fits the job definition it runs under, and that job
/// fits every default instance type of its queue: a class whose budget passed its
/// container's memory would size a stage for memory the container never gets (it was
/// 16/64 GiB against 15,000/60,000 MiB), and a job no instance can hold waits RUNNABLE
/// until the queue cancels it. ECS registers less than the installed memory (the Batch
/// guide's example: 7,985 of 8,192 MiB) and AWS advises a 5 % buffer for the agent and
/// the system, so a job may ask at most 95 % of an instance's memory. The GPU machines
/// run Amazon Linux 2023, not Amazon Linux 2.
#[test]
fn every_container_class_fits_its_job_definition_and_its_instances() {
    use tessera_core::task::ResourceClass;
    let template = std::fs::read_to_string(repo().join("infra/template.yaml")).unwrap();
    for (class, definition, types) in [
        (ResourceClass::Large, "CpuJobDefinition", "CpuInstanceTypes"),
        (
            ResourceClass::Xlarge,
            "GpuJobDefinition",
            "GpuInstanceTypes",
        ),
    ] {
        let job_mib = requirement(&template, definition, "MEMORY");
        let job_vcpus = requirement(&template, definition, "VCPU");
        assert_eq!(
            class.memory_bytes(),
            job_mib << 20,
            "{class:?} budgets {} MiB; its container ({definition}) gets {job_mib} MiB",
            class.memory_bytes() >> 20
        );
        let defaults = template
            .split(&format!("  {types}:"))
            .nth(1)
            .and_then(|s| s.lines().find_map(|l| l.trim().strip_prefix("Default: ")))
            .unwrap();
        for t in defaults.split(',') {
            let (mib, vcpus) = instance(t.trim());
            assert!(
                job_mib * 100 <= mib * 95,
                "{t} ({mib} MiB) cannot hold {definition}'s {job_mib} MiB with a 5 % buffer"
            );
            assert!(
                vcpus >= job_vcpus,
                "{t} has {vcpus} vCPUs, {definition} asks {job_vcpus}"
            );
        }
    }
    assert!(template.contains("ImageType: ECS_AL2023_NVIDIA"));
    assert!(!template.contains("ECS_AL2_NVIDIA"));
}

/// The worker image is built for the Batch instances' architecture and on a pinned
/// COLMAP, never a floating tag.
#[test]
fn the_worker_image_is_pinned_and_built_for_x86_64() {
    let dockerfile = std::fs::read_to_string(repo().join("infra/worker.Dockerfile")).unwrap();
    let froms: Vec<&str> = dockerfile
        .lines()
        .filter(|l| l.starts_with("FROM "))
        .collect();
    assert!(!froms.is_empty());
    for f in &froms {
        assert!(f.contains("--platform=linux/amd64"), "{f}");
    }
    assert!(
        !dockerfile.contains(":latest"),
        "a floating tag in the worker image"
    );
    assert!(
        dockerfile.contains("\nARG COLMAP_IMAGE\n"),
        "COLMAP_IMAGE must be given, pinned"
    );
}
