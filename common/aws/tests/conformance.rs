//! The port conformance suite, unchanged, against the AWS adapters talking to a real
//! `moto_server` on 127.0.0.1 through the AWS SDK.

use std::sync::Arc;
use tessera_aws::{AwsAdapters, AwsSettings};
use tessera_conformance::moto::MotoServer;
use tessera_core::ports::event_log::StoreEventLog;
use tessera_core::ports::state_store::StateStore;

async fn adapters(moto: &MotoServer) -> AwsAdapters {
    let a = AwsAdapters::connect(&AwsSettings::local(
        &moto.endpoint,
        "tessera-state",
        "tessera-objects",
        "t-",
    ))
    .await;
    a.store.ensure_table().await.expect("table");
    a.objects.ensure_bucket().await.expect("bucket");
    a
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dynamodb_state_store_conforms() {
    let moto = MotoServer::start();
    let a = adapters(&moto).await;
    tessera_conformance::state_store(Arc::new(a.store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqs_queue_conforms() {
    let moto = MotoServer::start();
    let a = adapters(&moto).await;
    tessera_conformance::queue(Arc::new(a.queue)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_object_store_conforms() {
    let moto = MotoServer::start();
    let a = adapters(&moto).await;
    tessera_conformance::object_store(Arc::new(a.objects)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn event_log_on_dynamodb_conforms() {
    let moto = MotoServer::start();
    let a = adapters(&moto).await;
    let store: Arc<dyn StateStore> = Arc::new(a.store);
    tessera_conformance::event_log(Arc::new(StoreEventLog::new(store.clone())), store).await;
}
