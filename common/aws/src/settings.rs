//! Where the AWS resources are, read from the environment a function or container is
//! given, and the clients built from it once per process.

use crate::{DynamoStateStore, EventBridgeBus, S3ObjectStore, SqsQueue};
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_s3::config::Credentials;
use aws_smithy_http_client::tls;

/// The resources one deployment uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsSettings {
    /// The DynamoDB table (`TESSERA_TABLE`).
    pub table: String,
    /// The S3 bucket for uploads and everything derived (`TESSERA_BUCKET`).
    pub bucket: String,
    /// Prepended to every queue name (`TESSERA_QUEUE_PREFIX`, e.g. the stack name and a
    /// dash), so that several deployments share an account.
    pub queue_prefix: String,
    /// A non-AWS endpoint for every service (`AWS_ENDPOINT_URL`): moto or LocalStack.
    /// S3 is then addressed path-style, since `bucket.127.0.0.1` does not resolve.
    pub endpoint: Option<String>,
    /// Region (`AWS_REGION`, default `us-east-1`).
    pub region: String,
    /// Fixed credentials for a local endpoint; `None` uses the standard chain (the
    /// Lambda or Batch role).
    pub static_credentials: Option<(String, String)>,
    /// The EventBridge bus every notice is also published to (`TESSERA_EVENT_BUS`: a
    /// name, `default`, or an ARN); `None` publishes nowhere but to webhooks.
    pub event_bus: Option<String>,
    /// The events' `Source` (`TESSERA_EVENT_SOURCE`, default `tessera`): the template
    /// sets `tessera.<stack name>`, so rules tell two deployments in one account apart.
    pub event_source: String,
}

/// The events' `Source` when `TESSERA_EVENT_SOURCE` is not set.
pub const DEFAULT_EVENT_SOURCE: &str = "tessera";

/// A setting that is missing or malformed.
#[derive(Debug, thiserror::Error)]
#[error("environment variable {name} {why}; {fix}")]
pub struct SettingsError {
    /// The variable.
    pub name: &'static str,
    /// What is wrong.
    pub why: &'static str,
    /// What to do.
    pub fix: &'static str,
}

impl AwsSettings {
    /// Read the settings from the environment.
    pub fn from_env() -> Result<Self, SettingsError> {
        let required = |name: &'static str, fix: &'static str| {
            std::env::var(name)
                .ok()
                .filter(|v| !v.trim().is_empty())
                .ok_or(SettingsError {
                    name,
                    why: "is not set",
                    fix,
                })
        };
        Ok(AwsSettings {
            table: required(
                "TESSERA_TABLE",
                "set it to the DynamoDB table the SAM template created (output StateTable)",
            )?,
            bucket: required(
                "TESSERA_BUCKET",
                "set it to the S3 bucket the SAM template created (output PhotoBucket)",
            )?,
            queue_prefix: std::env::var("TESSERA_QUEUE_PREFIX").unwrap_or_default(),
            endpoint: std::env::var("AWS_ENDPOINT_URL")
                .ok()
                .filter(|v| !v.is_empty()),
            region: std::env::var("AWS_REGION")
                .or_else(|_| std::env::var("AWS_DEFAULT_REGION"))
                .unwrap_or_else(|_| "us-east-1".into()),
            static_credentials: None,
            event_bus: std::env::var("TESSERA_EVENT_BUS")
                .ok()
                .filter(|v| !v.trim().is_empty()),
            event_source: std::env::var("TESSERA_EVENT_SOURCE")
                .ok()
                .filter(|v| !v.trim().is_empty())
                .unwrap_or_else(|| DEFAULT_EVENT_SOURCE.into()),
        })
    }

    /// Settings for a local AWS-compatible server at `endpoint` (tests).
    pub fn local(endpoint: &str, table: &str, bucket: &str, queue_prefix: &str) -> Self {
        AwsSettings {
            table: table.into(),
            bucket: bucket.into(),
            queue_prefix: queue_prefix.into(),
            endpoint: Some(endpoint.into()),
            region: "us-east-1".into(),
            static_credentials: Some(("testing".into(), "testing".into())),
            event_bus: None,
            event_source: DEFAULT_EVENT_SOURCE.into(),
        }
    }

    /// The SDK configuration: rustls on ring as the HTTP client, this region, the local
    /// endpoint and credentials if set.
    pub async fn sdk_config(&self) -> SdkConfig {
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(
                tls::rustls_provider::CryptoMode::Ring,
            ))
            .build_https();
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .http_client(http)
            .region(Region::new(self.region.clone()));
        if let Some(e) = &self.endpoint {
            loader = loader.endpoint_url(e);
        }
        if let Some((id, secret)) = &self.static_credentials {
            loader = loader.credentials_provider(Credentials::new(
                id.clone(),
                secret.clone(),
                None,
                None,
                "tessera-static",
            ));
        }
        loader.load().await
    }
}

/// The adapters of one process, sharing one SDK configuration.
#[derive(Clone)]
pub struct AwsAdapters {
    /// DynamoDB.
    pub store: DynamoStateStore,
    /// S3.
    pub objects: S3ObjectStore,
    /// SQS.
    pub queue: SqsQueue,
    /// EventBridge, when the settings name a bus.
    pub bus: Option<EventBridgeBus>,
    /// The configuration the clients were built from (for Batch and presigning).
    pub sdk: SdkConfig,
}

impl AwsAdapters {
    /// Build the clients.
    pub async fn connect(settings: &AwsSettings) -> Self {
        let sdk = settings.sdk_config().await;
        let s3 = aws_sdk_s3::config::Builder::from(&sdk)
            .force_path_style(settings.endpoint.is_some())
            .build();
        AwsAdapters {
            store: DynamoStateStore::new(aws_sdk_dynamodb::Client::new(&sdk), &settings.table),
            objects: S3ObjectStore::new(aws_sdk_s3::Client::from_conf(s3), &settings.bucket),
            queue: SqsQueue::new(aws_sdk_sqs::Client::new(&sdk), &settings.queue_prefix),
            bus: settings.event_bus.as_ref().map(|bus| {
                EventBridgeBus::new(
                    aws_sdk_eventbridge::Client::new(&sdk),
                    bus,
                    &settings.event_source,
                )
            }),
            sdk,
        }
    }
}
