//! The `dlq-archiver` function: consumes every dead-letter queue and writes each dead
//! message to `archive/<queue>/<date>/<message id>.json` in the bucket, with why it
//! died, so it outlives the queue's retention and can be inspected or replayed.

use tessera_lambda::archive::archive_batch;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    tessera_lambda::logging::init();
    let settings = tessera_aws::AwsSettings::from_env()?;
    let adapters = tessera_aws::AwsAdapters::connect(&settings).await;
    let objects = &adapters.objects;
    tessera_lambda::on_shutdown().await;
    lambda_runtime::run(lambda_runtime::service_fn(
        move |event: lambda_runtime::LambdaEvent<aws_lambda_events::event::sqs::SqsEvent>| async move {
            Ok::<_, lambda_runtime::Error>(archive_batch(objects, event.payload).await)
        },
    ))
    .await
}
