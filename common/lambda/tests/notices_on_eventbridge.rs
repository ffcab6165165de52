//! Notices on EventBridge, through the functions as the template configures them: a
//! photo uploaded to S3 and published by the functions is an event on the default bus,
//! for a tenant with no webhook at all, and an operator's rule forwards it to a queue.
//! While the bus cannot be reached the photo still publishes and can still be withheld;
//! each notice the bus did not take becomes a job of its own, which publishes it once
//! the bus is there.

mod support;

use aws_sdk_eventbridge::types::Target;
use std::time::{Duration, Instant};
use support::{Deployment, EVENT_SOURCE, TEMPLATE_BUS, put_upload};
use tessera_conformance::moto::MotoServer;
use tessera_core::domain::Project;
use tessera_core::job::JobStatus;
use tessera_core::notify::PUBLISH_JOB;
use tessera_core::photo::Photo;
use tessera_core::ports::state_store::StateStore;
use tessera_core::{PhotoId, TenantId, records};
use tessera_jobs::photos::project;
use tessera_lambda::routes;

const TAP: &str = "bus-tap";

async fn project_without_subjects(d: &Deployment) -> Project {
    project::create(
        &d.adapters.store,
        TenantId::local(),
        "notices",
        Some(0.363),
        0.35,
    )
    .await
    .unwrap()
}

async fn published(d: &Deployment, photo: PhotoId) -> bool {
    d.adapters
        .store
        .get(&records::photo_key(photo))
        .await
        .unwrap()
        .and_then(|i| records::decode::<Photo>(&i).ok())
        .is_some_and(|r| r.published_at.is_some())
}

/// An operator's rule on `bus`: every event of this deployment's source to queue `TAP`.
async fn tap(d: &Deployment, bus: &str) -> aws_sdk_eventbridge::Client {
    let events = aws_sdk_eventbridge::Client::new(&d.adapters.sdk);
    let sqs = d.adapters.queue.client();
    sqs.create_queue().queue_name(TAP).send().await.unwrap();
    events
        .put_rule()
        .name("every-tessera-notice")
        .event_bus_name(bus)
        .event_pattern(serde_json::json!({ "source": [EVENT_SOURCE] }).to_string())
        .send()
        .await
        .unwrap();
    events
        .put_targets()
        .rule("every-tessera-notice")
        .event_bus_name(bus)
        .targets(
            Target::builder()
                .id("tap")
                .arn(MotoServer::queue_arn(TAP))
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    events
}

/// Every event in the tap queue now (waiting up to `wait` for the first).
async fn tapped(d: &Deployment, wait: Duration) -> Vec<serde_json::Value> {
    let sqs = d.adapters.queue.client();
    let url = sqs
        .get_queue_url()
        .queue_name(TAP)
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let mut out = Vec::new();
    let start = Instant::now();
    loop {
        let got = sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .send()
            .await
            .unwrap();
        let n = got.messages().len();
        for m in got.messages() {
            out.push(serde_json::from_str(m.body().unwrap()).unwrap());
            sqs.delete_message()
                .queue_url(&url)
                .receipt_handle(m.receipt_handle().unwrap())
                .send()
                .await
                .unwrap();
        }
        if n == 0 && (!out.is_empty() || start.elapsed() > wait) {
            return out;
        }
        if n == 0 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

fn types_about(events: &[serde_json::Value], photo: PhotoId) -> Vec<String> {
    let mut t: Vec<String> = events
        .iter()
        .filter(|e| {
            e["detail"]["data"]["photo_id"] == photo.to_string()
                || e["detail"]["type"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("job."))
        })
        .map(|e| e["detail-type"].as_str().unwrap_or_default().to_string())
        .collect();
    t.sort();
    t
}

#[test]
fn the_deployment_here_is_configured_as_the_template_configures_functions() {
    let template = std::fs::read_to_string(
        std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap())
            .join("../../infra/template.yaml"),
    )
    .unwrap();
    assert!(
        template.contains(&format!("TESSERA_EVENT_BUS: {TEMPLATE_BUS}\n")),
        "the template's Globals name another bus than the tests use"
    );
    assert!(
        template.contains("TESSERA_EVENT_SOURCE: !Sub \"tessera.${AWS::StackName}\""),
        "the template's event source is not tessera.<stack> as the tests expect"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_published_photo_is_an_event_on_the_default_bus_for_a_tenant_without_webhooks() {
    let d = Deployment::start(Duration::from_secs(30), 5).await;
    tap(&d, TEMPLATE_BUS).await;
    let p = project_without_subjects(&d).await;
    let (photo, _) = put_upload(&d, &p, "grace_hopper.jpg").await;
    d.pump_until(Duration::from_secs(120), || published(&d, photo))
        .await;
    // Each job the upload ran ends once on the bus: the ingest that chose the pipeline
    // and the processing that published; the latter's end is raised by the same task's
    // end as the publication.
    let events = tapped(&d, Duration::from_secs(10)).await;
    assert_eq!(
        types_about(&events, photo),
        vec!["job.succeeded", "job.succeeded", "photo.published"],
        "events: {events:#?}"
    );
    let mut ended: Vec<&str> = events
        .iter()
        .filter(|e| e["detail-type"] == "job.succeeded")
        .filter_map(|e| e["detail"]["data"]["kind"].as_str())
        .collect();
    ended.sort();
    assert_eq!(
        ended,
        vec!["photo_ingest", "photo_thumbnail_dims"],
        "events: {events:#?}"
    );
    let e = events
        .iter()
        .find(|e| e["detail-type"] == "photo.published")
        .unwrap();
    assert_eq!(e["source"], EVENT_SOURCE);
    assert_eq!(e["detail"]["tenant"], "local");
    assert_eq!(e["detail"]["project"], p.id.to_string());
    assert!(
        e["detail"]["id"].as_str().unwrap().starts_with("ntc_"),
        "the notice id consumers deduplicate on: {e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bus_that_cannot_be_reached_holds_back_nothing_and_its_events_come_later() {
    const BUS: &str = "tessera-notices";
    let d = Deployment::start_on_bus(Duration::from_secs(30), 5, BUS).await;
    let p = project_without_subjects(&d).await;
    let (photo, _) = put_upload(&d, &p, "grace_hopper.jpg").await;
    // The bus does not exist yet: publishing fails, the photo is published regardless.
    d.pump_until(Duration::from_secs(120), || published(&d, photo))
        .await;
    let engine = &d.functions[routes::INGEST].engine;
    let publish_jobs = || async {
        let (jobs, _) = engine
            .list_jobs(&TenantId::local(), None, 100)
            .await
            .unwrap();
        let mut out = Vec::new();
        for j in jobs.iter().filter(|j| j.kind == PUBLISH_JOB) {
            out.push((j.label.clone(), j.status()));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    };
    let mut queued: Vec<String> = publish_jobs().await.into_iter().map(|(l, _)| l).collect();
    queued.dedup();
    assert_eq!(
        queued,
        vec![
            "job.succeeded to the notice bus",
            "photo.published to the notice bus"
        ],
        "each notice the bus did not take is a job of its own"
    );
    // Nothing waits on the bus: no task is left owing notices for the reaper.
    let (jobs, _) = engine
        .list_jobs(&TenantId::local(), None, 100)
        .await
        .unwrap();
    for j in &jobs {
        for t in engine.job_tasks(j.id).await.unwrap() {
            assert!(
                !t.notify_pending,
                "{} of {} still owes notices",
                t.name, j.kind
            );
        }
    }
    // A photo is withheld for new regions with the bus down: privacy never waits on it.
    tessera_jobs::photos::regions::set_regions(
        engine,
        photo,
        &[tessera_core::geometry::FracRect {
            x: 0.1,
            y: 0.1,
            w: 0.2,
            h: 0.2,
        }],
        &tessera_core::audit::Actor::cli(TenantId::local()),
    )
    .await
    .expect("withheld while the bus is down");
    assert!(!published(&d, photo).await);

    // The operator creates the bus; the queued notices (the regions edit's too) are
    // published by their jobs' next tries.
    let events = aws_sdk_eventbridge::Client::new(&d.adapters.sdk);
    events.create_event_bus().name(BUS).send().await.unwrap();
    tap(&d, BUS).await;
    let mut got = Vec::new();
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(120) {
        d.pump_once().await;
        got.extend(tapped(&d, Duration::from_millis(500)).await);
        let kinds = types_about(&got, photo);
        if ["job.succeeded", "photo.published", "photo.unpublished"]
            .iter()
            .all(|k| kinds.iter().any(|g| g == k))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let kinds = types_about(&got, photo);
    for k in ["job.succeeded", "photo.published", "photo.unpublished"] {
        assert!(kinds.iter().any(|g| g == k), "no {k} on the bus: {got:#?}");
    }
    let jobs = publish_jobs().await;
    assert!(
        jobs.iter().all(|(_, s)| *s == JobStatus::Succeeded),
        "{jobs:?}"
    );
}
