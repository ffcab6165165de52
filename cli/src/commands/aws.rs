//! `tessera aws init`: create, on a local AWS-compatible server (moto, LocalStack),
//! what the SAM template creates on AWS, so that the Lambda handlers can be run with
//! `cargo lambda watch` / `cargo lambda invoke` against it.

use anyhow::{Context, bail};
use std::process::ExitCode;
use std::time::Duration;
use tessera_aws::{AwsAdapters, AwsSettings};
use tessera_core::ports::queue::{Queue, QueueSettings};
use tessera_lambda::routes;

/// Subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum AwsCommand {
    /// Create the table, the bucket, every queue with its dead-letter queue, and the
    /// bucket's notification to the uploads queue, on the server in AWS_ENDPOINT_URL.
    Init,
    /// Create an API key for the deployed API (state in the table of TESSERA_TABLE);
    /// prints it once. The first key of a deployment must be an admin key.
    CreateKey {
        /// The tenant the key acts for.
        #[arg(long, default_value = "local")]
        tenant: String,
        /// May create and revoke other keys.
        #[arg(long)]
        admin: bool,
    },
    /// Allow a tenant to create `s3` datasets from a folder of another bucket (the api
    /// function's role must also be able to read it: the template's DatasetSourceBucket).
    /// The stack's own bucket can never be granted.
    GrantSource {
        /// The tenant.
        #[arg(long)]
        tenant: String,
        /// The bucket.
        #[arg(long)]
        bucket: String,
        /// A folder of the bucket (empty: all of it).
        #[arg(long, default_value = "")]
        prefix: String,
        /// Take the grant back instead.
        #[arg(long)]
        revoke: bool,
    },
    /// Where every task kind runs on AWS in each resource class (its queue, so its
    /// function or the Batch orchestrator), and what it needs there (COLMAP, the face
    /// runtime). Reads no AWS resource.
    Routes,
}

/// Run it.
pub async fn run(json: bool, cmd: AwsCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        AwsCommand::Init => init(json).await,
        AwsCommand::CreateKey { tenant, admin } => create_key(json, &tenant, admin).await,
        AwsCommand::GrantSource {
            tenant,
            bucket,
            prefix,
            revoke,
        } => grant_source(json, &tenant, &bucket, &prefix, revoke).await,
        AwsCommand::Routes => routes_table(json),
    }
}

async fn init(json: bool) -> anyhow::Result<ExitCode> {
    let settings = AwsSettings::from_env()?;
    let Some(endpoint) = settings.endpoint.clone() else {
        bail!(
            "AWS_ENDPOINT_URL is not set: `tessera aws init` only sets up a local server; on AWS, `sam deploy` creates everything from infra/template.yaml"
        );
    };
    let a = AwsAdapters::connect(&settings).await;
    a.store
        .ensure_table()
        .await
        .with_context(|| format!("creating table {} at {endpoint}", settings.table))?;
    a.objects
        .ensure_bucket()
        .await
        .with_context(|| format!("creating bucket {} at {endpoint}", settings.bucket))?;
    let visibility = QueueSettings {
        visibility: Duration::from_secs(60),
        max_receives: 5,
    };
    for q in routes::ALL {
        a.queue.ensure(q, visibility).await?;
    }
    let uploads = a.queue.arn(routes::UPLOADS).await?;
    a.objects.notify_queue("uploads/", &uploads).await?;
    let queues: Vec<String> = routes::ALL.iter().map(|q| a.queue.sqs_name(q)).collect();
    if json {
        println!(
            "{}",
            serde_json::json!({"endpoint": endpoint, "table": settings.table, "bucket": settings.bucket, "queues": queues})
        );
    } else {
        println!(
            "on {endpoint}: table {}, bucket {} (uploads/ → {}), queues {}",
            settings.table,
            settings.bucket,
            a.queue.sqs_name(routes::UPLOADS),
            queues.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn routes_table(json: bool) -> anyhow::Result<ExitCode> {
    let placements = routes::placements(&tessera_jobs::registry());
    if json {
        println!("{}", serde_json::to_string_pretty(&placements)?);
    } else {
        for p in placements {
            let queues: Vec<String> = p
                .queues
                .iter()
                .map(|(class, q)| {
                    format!(
                        "{}={q}",
                        serde_json::to_value(class)
                            .unwrap_or_default()
                            .as_str()
                            .unwrap_or("?")
                    )
                })
                .collect();
            println!("{:<24} needs {:?}: {}", p.kind, p.needs, queues.join(" "));
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn create_key(json: bool, tenant: &str, admin: bool) -> anyhow::Result<ExitCode> {
    let tenant: tessera_core::TenantId = tenant.parse()?;
    let settings = AwsSettings::from_env()?;
    let a = AwsAdapters::connect(&settings).await;
    let (key, secret) = tessera_api::auth::create_key(&a.store, tenant, admin)
        .await
        .map_err(|p| anyhow::anyhow!("creating the key in {}: {}", settings.table, p.detail))?;
    if json {
        println!(
            "{}",
            serde_json::json!({"key_id": key.key_id, "tenant": key.tenant, "admin": key.admin, "api_key": secret})
        );
    } else {
        println!("{secret}");
        eprintln!(
            "key {} for tenant {} (admin: {}); shown once",
            key.key_id, key.tenant, key.admin
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn grant_source(
    json: bool,
    tenant: &str,
    bucket: &str,
    prefix: &str,
    revoke: bool,
) -> anyhow::Result<ExitCode> {
    use tessera_core::catalog::source_grants;
    let tenant: tessera_core::TenantId = tenant.parse()?;
    let settings = AwsSettings::from_env()?;
    let a = AwsAdapters::connect(&settings).await;
    let what = if revoke {
        let existed = source_grants::revoke(&a.store, &tenant, bucket, prefix).await?;
        serde_json::json!({"tenant": tenant, "bucket": bucket, "prefix": prefix, "revoked": existed})
    } else {
        let g = source_grants::grant(&a.store, &settings.bucket, &tenant, bucket, prefix).await?;
        serde_json::to_value(&g)?
    };
    if json {
        println!("{what}");
    } else if revoke {
        println!("{tenant} may no longer import from s3://{bucket}/{prefix}");
    } else {
        println!(
            "{tenant} may import from s3://{bucket}/{}",
            what["prefix"].as_str().unwrap_or_default()
        );
    }
    Ok(ExitCode::SUCCESS)
}
