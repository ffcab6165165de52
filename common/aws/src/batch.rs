//! Heavy stages as AWS Batch jobs.
//!
//! The orchestrator hands a heavy task to [`BatchLauncher::submit`]; the job runs the
//! worker container's entrypoint `tessera stage --task <id>`, which claims, heartbeats,
//! fences and completes the task through the same engine as every Lambda. The job
//! queue and definition are chosen by resource class: `large` runs on CPU, `xlarge` on
//! GPU instances (Fargate has no GPU, so both are EC2 compute environments).
//!
//! The Batch API is not offered by the local AWS-compatible server, so the request is
//! built by the pure [`BatchLauncher::request`] (tested) and sent by `submit`.

use aws_sdk_batch::Client;
use aws_sdk_batch::types::{ContainerOverrides, KeyValuePair, RetryStrategy};
use std::collections::BTreeMap;
use tessera_core::task::ResourceClass;
use tessera_core::task::Task;

/// Where jobs of one resource class go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchTarget {
    /// Job queue name or ARN.
    pub job_queue: String,
    /// Job definition name or ARN (with revision, or the latest).
    pub job_definition: String,
}

/// The Batch job for one task, before it is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchJobRequest {
    /// `tessera-<task id>` (Batch allows letters, digits, `-` and `_`, 128 at most).
    pub job_name: String,
    /// Where it runs.
    pub target: BatchTarget,
    /// The container command.
    pub command: Vec<String>,
    /// Extra environment for the container.
    pub environment: BTreeMap<String, String>,
}

/// Errors of the launcher.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// No job queue is configured for the task's class.
    #[error(
        "no Batch worker in this stack for resource class {0:?}: deploy it with the WorkerImage parameter set (locally: set TESSERA_BATCH_QUEUE_{1} and TESSERA_BATCH_DEFINITION_{1})"
    )]
    NoTarget(ResourceClass, String),
    /// Batch refused or could not be reached.
    #[error("submitting Batch job {job}: {why}")]
    Submit {
        /// Job name.
        job: String,
        /// The SDK's message.
        why: String,
    },
}

impl tessera_core::Classify for BatchError {
    fn class(&self) -> tessera_core::ErrorClass {
        match self {
            BatchError::NoTarget(..) => tessera_core::ErrorClass::Permanent,
            BatchError::Submit { .. } => tessera_core::ErrorClass::Transient,
        }
    }
}

/// Submits heavy tasks to Batch.
#[derive(Clone)]
pub struct BatchLauncher {
    client: Client,
    targets: BTreeMap<ResourceClass, BatchTarget>,
}

fn class_env(class: ResourceClass) -> String {
    format!("{class:?}").to_uppercase()
}

impl BatchLauncher {
    /// A launcher with these targets.
    pub fn new(client: Client, targets: BTreeMap<ResourceClass, BatchTarget>) -> Self {
        BatchLauncher { client, targets }
    }

    /// Targets from `TESSERA_BATCH_QUEUE_<CLASS>` / `TESSERA_BATCH_DEFINITION_<CLASS>`
    /// for the heavy classes (`LARGE`, `XLARGE`); a class without both is left out.
    pub fn targets_from_env() -> BTreeMap<ResourceClass, BatchTarget> {
        Self::targets_from(|name| std::env::var(name).ok())
    }

    /// Targets from variables looked up with `var`. An empty value is unset: a stack
    /// deployed without a worker image passes `""`, and a task sent to a queue named
    /// `""` would be retried until it is dead-lettered instead of failing at once.
    pub fn targets_from(
        var: impl Fn(&str) -> Option<String>,
    ) -> BTreeMap<ResourceClass, BatchTarget> {
        let set = |name: String| var(&name).filter(|v| !v.trim().is_empty());
        [ResourceClass::Large, ResourceClass::Xlarge]
            .into_iter()
            .filter_map(|c| {
                let q = set(format!("TESSERA_BATCH_QUEUE_{}", class_env(c)))?;
                let d = set(format!("TESSERA_BATCH_DEFINITION_{}", class_env(c)))?;
                Some((
                    c,
                    BatchTarget {
                        job_queue: q,
                        job_definition: d,
                    },
                ))
            })
            .collect()
    }

    /// The job that runs `task`.
    pub fn request(&self, task: &Task) -> Result<BatchJobRequest, BatchError> {
        let target = self
            .targets
            .get(&task.resource_class)
            .or_else(|| {
                // A class without its own queue runs on the next larger one that has one.
                self.targets
                    .range(task.resource_class..)
                    .next()
                    .map(|(_, t)| t)
            })
            .ok_or_else(|| {
                BatchError::NoTarget(task.resource_class, class_env(task.resource_class))
            })?
            .clone();
        Ok(BatchJobRequest {
            job_name: format!("tessera-{}", task.id),
            target,
            command: vec!["stage".into(), "--task".into(), task.id.to_string()],
            environment: BTreeMap::from([
                ("TESSERA_TASK_ID".into(), task.id.to_string()),
                ("TESSERA_JOB_ID".into(), task.job_id.to_string()),
                ("TESSERA_EPOCH_AT_SUBMIT".into(), task.epoch.to_string()),
            ]),
        })
    }

    /// Submit the task's job; returns Batch's job id.
    pub async fn submit(&self, task: &Task) -> Result<String, BatchError> {
        let r = self.request(task)?;
        let env = r
            .environment
            .iter()
            .map(|(k, v)| KeyValuePair::builder().name(k).value(v).build())
            .collect();
        let out = self
            .client
            .submit_job()
            .job_name(&r.job_name)
            .job_queue(&r.target.job_queue)
            .job_definition(&r.target.job_definition)
            .container_overrides(
                ContainerOverrides::builder()
                    .set_command(Some(r.command.clone()))
                    .set_environment(Some(env))
                    .build(),
            )
            // The engine retries (with resource escalation); Batch must not run a task
            // again on its own.
            .retry_strategy(RetryStrategy::builder().attempts(1).build())
            .tags("tessera:task", task.id.to_string())
            .tags("tessera:job", task.job_id.to_string())
            .send()
            .await
            .map_err(|e| BatchError::Submit {
                job: r.job_name.clone(),
                why: crate::sdk_error::describe(&e),
            })?;
        Ok(out.job_id().unwrap_or_default().to_string())
    }
}

/// A Batch client on the shared SDK configuration.
pub fn client(sdk: &aws_config::SdkConfig) -> Client {
    Client::new(sdk)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::task::{Task, TaskState};

    fn launcher(classes: &[ResourceClass]) -> BatchLauncher {
        let conf = aws_sdk_batch::Config::builder()
            .behavior_version(aws_sdk_batch::config::BehaviorVersion::latest())
            .region(aws_sdk_batch::config::Region::new("eu-west-1"))
            .build();
        BatchLauncher::new(
            Client::from_conf(conf),
            classes
                .iter()
                .map(|c| {
                    (
                        *c,
                        BatchTarget {
                            job_queue: format!("tessera-{c:?}"),
                            job_definition: format!("tessera-{c:?}-def"),
                        },
                    )
                })
                .collect(),
        )
    }

    fn task(class: ResourceClass) -> Task {
        let mut t: Task = serde_json::from_value(serde_json::json!({
            "id": tessera_core::TaskId::new(), "job_id": tessera_core::JobId::new(),
            "name": "map", "kind": "sfm.map", "state": TaskState::Queued, "payload": null,
            "attempts": 0, "max_attempts": 4, "epoch": 0, "lease": null, "heartbeat_at": null,
            "not_before": 0, "resource_class": "large", "last_error": null, "result": null,
            "cache_key": null, "deps_pending": [], "dependents": [], "created_at": 0,
            "finished_at": null,
        }))
        .unwrap_or_else(|e| panic!("a minimal task: {e}"));
        t.resource_class = class;
        t
    }

    #[test]
    fn jobs_go_to_their_class_and_run_the_stage_entrypoint() {
        let l = launcher(&[ResourceClass::Large, ResourceClass::Xlarge]);
        let t = task(ResourceClass::Xlarge);
        let r = l.request(&t).unwrap();
        assert_eq!(r.target.job_queue, "tessera-Xlarge");
        assert_eq!(r.command, ["stage", "--task", &t.id.to_string()]);
        assert_eq!(r.job_name, format!("tessera-{}", t.id));
        assert!(r.job_name.len() <= 128);
        assert_eq!(r.environment["TESSERA_TASK_ID"], t.id.to_string());
        // A class without its own queue runs one up; none above it is an error that
        // names the variables to set.
        let only_gpu = launcher(&[ResourceClass::Xlarge]);
        assert_eq!(
            only_gpu
                .request(&task(ResourceClass::Large))
                .unwrap()
                .target
                .job_queue,
            "tessera-Xlarge"
        );
        let none = launcher(&[]);
        let e = none
            .request(&task(ResourceClass::Large))
            .unwrap_err()
            .to_string();
        assert!(e.contains("TESSERA_BATCH_QUEUE_LARGE"), "{e}");
        assert!(e.contains("WorkerImage"), "{e}");
    }

    #[test]
    fn empty_variables_mean_no_worker_and_a_permanent_failure() {
        use tessera_core::Classify;
        // As the template sets them for a stack without WorkerImage.
        let empty = BatchLauncher::targets_from(|_| Some(String::new()));
        assert!(empty.is_empty());
        let set = BatchLauncher::targets_from(|name| {
            name.ends_with("XLARGE").then(|| format!("q-{name}"))
        });
        assert_eq!(set.len(), 1);
        let none = launcher(&[]);
        let e = none.request(&task(ResourceClass::Large)).unwrap_err();
        assert_eq!(e.class(), tessera_core::ErrorClass::Permanent);
    }
}
