//! A deployment on moto: the table, the bucket with its S3 → SQS notification, every
//! queue with its dead-letter queue, and one [`Function`] per queue, fed the way the
//! Lambda SQS event source feeds them: a batch of received messages in, the messages
//! not reported as failures deleted afterwards.

#![allow(dead_code)]

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use aws_sdk_sqs::types::MessageSystemAttributeName;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_aws::{AwsAdapters, AwsSettings};
use tessera_conformance::moto::MotoServer;
use tessera_core::ports::queue::{Queue, QueueSettings};
use tessera_faces::{DetectorKind, FaceModels, ModelFiles, OnnxRuntime};
use tessera_jobs::photos::FaceService;
use tessera_lambda::{Function, Role, routes};

pub const PREFIX: &str = "t-";

/// The bus and source the template gives every function (TESSERA_EVENT_BUS,
/// TESSERA_EVENT_SOURCE = tessera.<stack>; the stack here is `t`).
pub const TEMPLATE_BUS: &str = "default";
pub const EVENT_SOURCE: &str = "tessera.t";

pub fn shared() -> PathBuf {
    PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR")
            .expect("cargo sets CARGO_MANIFEST_DIR when it runs tests"),
    )
    .join("../../../shared")
}

pub fn models() -> Arc<FaceModels> {
    static M: std::sync::OnceLock<Arc<FaceModels>> = std::sync::OnceLock::new();
    M.get_or_init(|| {
        let rt = OnnxRuntime::from_env().expect("ORT_DYLIB_PATH (source scripts/env.sh)");
        Arc::new(
            FaceModels::load(
                &rt,
                &ModelFiles::in_dir(shared().join("models")),
                DetectorKind::Yunet,
                1,
            )
            .unwrap(),
        )
    })
    .clone()
}

pub struct Deployment {
    pub moto: MotoServer,
    pub settings: AwsSettings,
    pub adapters: AwsAdapters,
    pub functions: HashMap<&'static str, Function>,
    /// Queues the pump leaves alone (their function is "not deployed").
    pub paused: std::sync::Mutex<Vec<&'static str>>,
}

impl Deployment {
    /// Everything the SAM template creates, on a fresh moto. Queues redrive after
    /// `max_receives` receives with a visibility of `visibility`.
    pub async fn start(visibility: Duration, max_receives: u32) -> Deployment {
        Self::start_on_bus(visibility, max_receives, TEMPLATE_BUS).await
    }

    /// [`Self::start`] with the functions publishing notices to `bus` instead of the
    /// template's default bus (a bus that does not exist yet: the bus is down).
    pub async fn start_on_bus(visibility: Duration, max_receives: u32, bus: &str) -> Deployment {
        let moto = MotoServer::start();
        let mut settings =
            AwsSettings::local(&moto.endpoint, "tessera-state", "tessera-photos", PREFIX);
        // As infra/template.yaml's Globals set them for every function.
        settings.event_bus = Some(bus.into());
        settings.event_source = EVENT_SOURCE.into();
        let adapters = AwsAdapters::connect(&settings).await;
        adapters.store.ensure_table().await.unwrap();
        adapters.objects.ensure_bucket().await.unwrap();
        for q in routes::ALL {
            adapters
                .queue
                .ensure(
                    q,
                    QueueSettings {
                        visibility,
                        max_receives,
                    },
                )
                .await
                .unwrap();
        }
        adapters
            .objects
            .notify_queue(
                "uploads/",
                &MotoServer::queue_arn(&format!("{PREFIX}{}", routes::UPLOADS)),
            )
            .await
            .expect("bucket notification to the uploads queue");
        let registry = || tessera_jobs::registry_with(Arc::new(FaceService::with_models(models())));
        let mut functions = HashMap::new();
        for (queue, fq) in [
            (routes::UPLOADS, routes::INGEST),
            (routes::INGEST, routes::INGEST),
            (routes::THUMBNAIL_DIMS, routes::THUMBNAIL_DIMS),
            (routes::FACE_PROCESS, routes::FACE_PROCESS),
            (routes::REPROCESS, routes::REPROCESS),
            (routes::STAGE_RUNNER, routes::STAGE_RUNNER),
        ] {
            functions.insert(
                queue,
                Function::connect(&settings, fq, registry(), Role::Run).await,
            );
        }
        Deployment {
            moto,
            settings,
            adapters,
            functions,
            paused: Default::default(),
        }
    }

    pub fn arn(queue: &str) -> String {
        MotoServer::queue_arn(&format!("{PREFIX}{queue}"))
    }

    /// Receive up to 10 messages of `queue` as a Lambda SQS event (empty: nothing).
    pub async fn receive_event(&self, queue: &str) -> (SqsEvent, HashMap<String, String>) {
        let url = self.adapters.queue.url(queue).await.unwrap();
        let out = self
            .adapters
            .queue
            .client()
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .wait_time_seconds(0)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await
            .unwrap();
        let mut receipts = HashMap::new();
        let mut event = SqsEvent::default();
        for m in out.messages() {
            let mut r = SqsMessage::default();
            r.message_id = m.message_id().map(str::to_string);
            r.receipt_handle = m.receipt_handle().map(str::to_string);
            r.body = m.body().map(str::to_string);
            r.attributes = m
                .attributes()
                .map(|a| {
                    a.iter()
                        .map(|(k, v)| (k.as_str().to_string(), v.clone()))
                        .collect()
                })
                .unwrap_or_default();
            r.message_attributes = m
                .message_attributes()
                .map(|a| {
                    a.iter()
                        .map(|(k, v)| {
                            let mut attr =
                                aws_lambda_events::event::sqs::SqsMessageAttribute::default();
                            attr.string_value = v.string_value().map(str::to_string);
                            attr.data_type = Some(v.data_type().to_string());
                            (k.clone(), attr)
                        })
                        .collect()
                })
                .unwrap_or_default();
            r.event_source_arn = Some(Self::arn(queue));
            r.event_source = Some("aws:sqs".into());
            receipts.insert(
                r.message_id.clone().unwrap_or_default(),
                r.receipt_handle.clone().unwrap_or_default(),
            );
            event.records.push(r);
        }
        (event, receipts)
    }

    /// After a function answered: delete what it did not report as failed, as the
    /// event source mapping does.
    pub async fn acknowledge(
        &self,
        queue: &str,
        receipts: HashMap<String, String>,
        failed: &[String],
    ) {
        let url = self.adapters.queue.url(queue).await.unwrap();
        for (id, receipt) in receipts {
            if !failed.contains(&id) {
                let _ = self
                    .adapters
                    .queue
                    .client()
                    .delete_message()
                    .queue_url(&url)
                    .receipt_handle(receipt)
                    .send()
                    .await;
            }
        }
    }

    /// One round over every function's queue; how many messages were delivered.
    pub async fn pump_once(&self) -> usize {
        let mut n = 0;
        let mut queues: Vec<&'static str> = self.functions.keys().copied().collect();
        queues.sort();
        for queue in queues {
            if self.paused.lock().unwrap().contains(&queue) {
                continue;
            }
            let (event, receipts) = self.receive_event(queue).await;
            if event.records.is_empty() {
                continue;
            }
            n += event.records.len();
            let response = self.functions[queue].handle_sqs(event).await;
            let failed: Vec<String> = response
                .batch_item_failures
                .iter()
                .map(|f| f.item_identifier.clone())
                .collect();
            self.acknowledge(queue, receipts, &failed).await;
        }
        n
    }

    /// Pump until `done` holds (checked after every round), or panic after `limit`.
    pub async fn pump_until<F, Fut>(&self, limit: Duration, mut done: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let start = Instant::now();
        loop {
            let n = self.pump_once().await;
            if done().await {
                return;
            }
            assert!(start.elapsed() < limit, "not done after {limit:?}");
            if n == 0 {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Upload `file` of the shared test faces through S3 itself, as `my <file>` (moto
/// notifies the uploads queue); the photo's id and its upload key.
pub async fn put_upload(
    d: &Deployment,
    p: &tessera_core::domain::Project,
    file: &str,
) -> (tessera_core::PhotoId, String) {
    let photo = tessera_core::PhotoId::new();
    let key = tessera_core::photo::keys::upload(p.id, photo, &format!("my {file}"));
    let bytes = std::fs::read(shared().join("testdata/faces").join(file)).unwrap();
    d.adapters
        .objects
        .client()
        .put_object()
        .bucket(d.adapters.objects.bucket())
        .key(&key)
        .body(bytes.into())
        .send()
        .await
        .unwrap();
    (photo, key)
}
