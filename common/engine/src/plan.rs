//! Submitting a job: a validated DAG of tasks, written idempotently.
//!
//! Submission is safe to repeat and to interrupt. The fingerprint record, the job and
//! the first tasks go in one transaction (so an identical spec submitted twice is one
//! job); task ids are derived from the job id and the task name, so a submission that
//! died half-way is finished by submitting again; the job is *sealed* last, and only
//! then are the root tasks offered to the queue.
//!
//! Over 600 lines only with its tests (the code is about 560): the DAG's checks, the
//! idempotent writes and the sealing are one protocol, and its invariants read best in
//! one place.

use crate::{Engine, EngineError};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use tessera_core::attempts::attempt_policy;
use tessera_core::job::{Job, JobCounters};
use tessera_core::ports::Turn;
use tessera_core::ports::state_store::{Condition, Item, MAX_TRANSACTION_ITEMS, StoreError, Write};
use tessera_core::records;
use tessera_core::spec::fingerprint;
use tessera_core::task::{ResourceClass, Task, TaskState};
use tessera_core::{JobId, Millis, ProjectId, TaskId, TenantId};

/// Most tasks one job may have.
pub const MAX_TASKS_PER_JOB: usize = 200_000;

/// One task of a plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskPlan {
    /// Unique within the job.
    pub name: String,
    /// Handler kind.
    pub kind: String,
    /// Handler input.
    pub payload: serde_json::Value,
    /// Names of tasks that must succeed first.
    pub after: Vec<String>,
    /// Initial resource class.
    pub resource_class: ResourceClass,
    /// Attempt ceiling; the attempt policy table's for `kind` when `None`.
    pub max_attempts: Option<u32>,
    /// Cache key: when a task with this key already succeeded, reuse its result.
    pub cache_key: Option<String>,
    /// Expected peak memory, when a model estimated it.
    pub memory_estimate: Option<u64>,
}

impl TaskPlan {
    /// A small task with no dependencies.
    pub fn new(
        name: impl Into<String>,
        kind: impl Into<String>,
        payload: serde_json::Value,
    ) -> Self {
        TaskPlan {
            name: name.into(),
            kind: kind.into(),
            payload,
            after: Vec::new(),
            resource_class: ResourceClass::Small,
            max_attempts: None,
            cache_key: None,
            memory_estimate: None,
        }
    }

    /// Depend on the named tasks.
    pub fn after(mut self, names: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.after.extend(names.into_iter().map(Into::into));
        self
    }
}

/// A job to submit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobPlan {
    /// Owner.
    pub tenant: TenantId,
    /// Project, if any.
    pub project: Option<ProjectId>,
    /// Job kind (part of the fingerprint).
    pub kind: String,
    /// Human label.
    pub label: String,
    /// The validated spec (fingerprinted without `priority`).
    pub spec: serde_json::Value,
    /// Priority.
    pub priority: i32,
    /// The DAG.
    pub tasks: Vec<TaskPlan>,
}

/// The result of a submission.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submitted {
    /// The job.
    pub job_id: JobId,
    /// True when an identical spec had been submitted before and this is that job.
    pub existing: bool,
}

/// The body of a queue message: a hint that a task may be runnable.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct TaskMessage {
    /// The task.
    pub task: TaskId,
    /// Its job (for logs).
    pub job: JobId,
    /// The photo the task works on, if any: the message group on a FIFO queue, so one
    /// photo's tasks are delivered in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

/// A task id derived from the job and the task name: stable across re-submissions of
/// one job, unique within it (80 bits of FNV-1a over both).
pub fn task_id_for(job: JobId, name: &str) -> TaskId {
    let mut h: u128 = 0x6c62272e07bb014262b821756295c58d;
    for b in job
        .0
        .to_bytes()
        .iter()
        .chain([0xffu8].iter())
        .chain(name.as_bytes())
    {
        h ^= *b as u128;
        h = h.wrapping_mul(0x0000000001000000000000000000013B);
    }
    TaskId(ulid::Ulid::from_parts(
        job.0.timestamp_ms(),
        h & ((1u128 << 80) - 1),
    ))
}

/// Check that a plan is a DAG of uniquely named tasks; returns a topological order.
pub fn validate(plan: &JobPlan) -> Result<Vec<usize>, EngineError> {
    let bad = |m: String| Err(EngineError::InvalidPlan(m));
    if plan.tasks.is_empty() {
        return bad("a job needs at least one task".into());
    }
    if plan.tasks.len() > MAX_TASKS_PER_JOB {
        return bad(format!(
            "{} tasks is more than the {MAX_TASKS_PER_JOB} one job may have; split the work",
            plan.tasks.len()
        ));
    }
    let mut index = HashMap::new();
    for (i, t) in plan.tasks.iter().enumerate() {
        if t.name.is_empty() || t.kind.is_empty() {
            return bad(format!("task #{i} needs a name and a kind"));
        }
        if index.insert(t.name.as_str(), i).is_some() {
            return bad(format!("task name `{}` is used twice", t.name));
        }
    }
    let mut indegree = vec![0usize; plan.tasks.len()];
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); plan.tasks.len()];
    for (i, t) in plan.tasks.iter().enumerate() {
        let deps: BTreeSet<&str> = t.after.iter().map(String::as_str).collect();
        for d in deps {
            let Some(&j) = index.get(d) else {
                return bad(format!(
                    "task `{}` depends on `{d}`, which is not in the plan",
                    t.name
                ));
            };
            if j == i {
                return bad(format!("task `{}` depends on itself", t.name));
            }
            indegree[i] += 1;
            children[j].push(i);
        }
    }
    let mut order: Vec<usize> = (0..plan.tasks.len())
        .filter(|&i| indegree[i] == 0)
        .collect();
    let mut k = 0;
    while k < order.len() {
        for &c in &children[order[k]] {
            indegree[c] -= 1;
            if indegree[c] == 0 {
                order.push(c);
            }
        }
        k += 1;
    }
    if order.len() != plan.tasks.len() {
        let stuck: Vec<_> = (0..plan.tasks.len())
            .filter(|i| indegree[*i] > 0)
            .map(|i| plan.tasks[i].name.as_str())
            .take(5)
            .collect();
        return bad(format!(
            "the dependencies form a cycle through {}",
            stuck.join(", ")
        ));
    }
    Ok(order)
}

impl Engine {
    /// Submit a job, or return the existing job with the same fingerprint.
    pub async fn submit(&self, plan: JobPlan) -> Result<Submitted, EngineError> {
        validate(&plan)?;
        let fp = fingerprint(&plan.kind, &plan.spec);
        let fp_key = records::fingerprint_key(&plan.tenant, &plan.kind, &fp);
        let store = &self.ports.store;
        let now = Millis::now();

        let (job_id, existing) = match store.get(&fp_key).await? {
            Some(item) => (existing_job(&item)?, true),
            None => (JobId::new(), false),
        };
        if existing {
            let job = self.job(job_id).await?;
            if job.sealed {
                return Ok(Submitted {
                    job_id,
                    existing: true,
                });
            }
        }
        let tasks = build_tasks(&plan, job_id, now);
        let mut rest: &[Task] = &tasks;
        // A job whose tasks all go in the transaction that creates it is whole when it
        // exists: it is written sealed, which spares every such job (a photo's, a stage's)
        // a read and a write of its record. A larger one is sealed once its last task is
        // written.
        let whole = tasks.len() <= MAX_TRANSACTION_ITEMS - 2;
        if !existing {
            let job = new_job(&plan, job_id, &fp, tasks.len(), now, whole);
            let first = rest.len().min(MAX_TRANSACTION_ITEMS - 2);
            let mut writes = vec![
                Write::Put {
                    item: Item::new(fp_key.clone(), serde_json::json!({ "job_id": job_id })),
                    condition: Condition::Absent,
                },
                Write::Put {
                    item: records::job_item(&job),
                    condition: Condition::Absent,
                },
            ];
            writes.extend(rest[..first].iter().map(|t| Write::Put {
                item: records::task_item(t),
                condition: Condition::Absent,
            }));
            match store.transact(writes).await {
                Ok(()) => rest = &rest[first..],
                // Someone submitted the same spec at the same moment: theirs is the job.
                Err(StoreError::Conflict { index: 0, .. }) => {
                    return Box::pin(self.submit(plan)).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
        for chunk in rest.chunks(MAX_TRANSACTION_ITEMS) {
            let writes = chunk
                .iter()
                .map(|t| Write::Put {
                    item: records::task_item(t),
                    condition: Condition::Absent,
                })
                .collect();
            match store.transact(writes).await {
                Ok(()) => {}
                Err(StoreError::Conflict { .. }) => {
                    // Part of this chunk was written by an earlier, interrupted submission.
                    for t in chunk {
                        match store.put(records::task_item(t), Condition::Absent).await {
                            Ok(()) | Err(StoreError::Conflict { .. }) => {}
                            Err(e) => return Err(e.into()),
                        }
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        if existing || !whole {
            self.seal(job_id).await?;
        }
        for t in tasks.iter().filter(|t| t.state == TaskState::Queued) {
            self.offer(t, std::time::Duration::ZERO).await?;
        }
        tracing::info!(job_id = %job_id, tasks = tasks.len(), kind = %plan.kind, fingerprint = %fp, resumed = existing, "job submitted");
        Ok(Submitted { job_id, existing })
    }

    async fn seal(&self, job_id: JobId) -> Result<(), EngineError> {
        loop {
            let mut job = self.job(job_id).await?;
            if job.sealed {
                return Ok(());
            }
            job.sealed = true;
            match self
                .ports
                .store
                .put(records::job_item(&job), Condition::Rev(job.rev))
                .await
            {
                Ok(()) => return Ok(()),
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Tell the queue that `task` may be runnable after `delay`.
    pub(crate) async fn offer(
        &self,
        task: &Task,
        delay: std::time::Duration,
    ) -> Result<(), EngineError> {
        let body = serde_json::to_string(&TaskMessage {
            task: task.id,
            job: task.job_id,
            group: task
                .payload
                .get("photo")
                .and_then(|p| p.as_str())
                .map(str::to_string),
        })
        .expect("serializable");
        let queue = self.config.routes.queue_for(task, &self.config.queue);
        let turn = Turn {
            lane: task
                .tenant
                .as_ref()
                .map_or_else(String::new, |t| t.to_string()),
            priority: task.priority,
        };
        self.ports
            .queue
            .send_in_turn(queue, &body, delay, &turn)
            .await?;
        Ok(())
    }
}

/// A small job whose writes the caller commits in its own transaction, together with the
/// change that makes the job necessary: the change and the durable work it calls for
/// are one atomic step, so no crash can leave the change without its work. The job is
/// written sealed; its root tasks are queued and due, so the reaper offers them if
/// [`Engine::offer_prepared`] never runs.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The job.
    pub job_id: JobId,
    /// Fingerprint, job and tasks, each put only if absent.
    pub writes: Vec<Write>,
    tasks: Vec<Task>,
}

/// Writes a caller may add beside a [`Prepared`] job in one transaction.
pub const PREPARED_RESERVE: usize = 8;

impl Engine {
    /// The writes of `plan` as a sealed job, for a transaction of the caller's. Refused
    /// when the job would leave fewer than [`PREPARED_RESERVE`] writes of a transaction
    /// to the caller. A conflict on its first write means the same spec was submitted
    /// already.
    pub fn prepare(&self, plan: JobPlan) -> Result<Prepared, EngineError> {
        validate(&plan)?;
        if plan.tasks.len() + 2 + PREPARED_RESERVE > MAX_TRANSACTION_ITEMS {
            return Err(EngineError::InvalidPlan(format!(
                "a job committed with another change has at most {} tasks; this one has {}",
                MAX_TRANSACTION_ITEMS - 2 - PREPARED_RESERVE,
                plan.tasks.len()
            )));
        }
        let fp = fingerprint(&plan.kind, &plan.spec);
        let job_id = JobId::new();
        let now = Millis::now();
        let tasks = build_tasks(&plan, job_id, now);
        let job = new_job(&plan, job_id, &fp, tasks.len(), now, true);
        let mut writes = vec![
            Write::Put {
                item: Item::new(
                    records::fingerprint_key(&plan.tenant, &plan.kind, &fp),
                    serde_json::json!({ "job_id": job_id }),
                ),
                condition: Condition::Absent,
            },
            Write::Put {
                item: records::job_item(&job),
                condition: Condition::Absent,
            },
        ];
        writes.extend(tasks.iter().map(|t| Write::Put {
            item: records::task_item(t),
            condition: Condition::Absent,
        }));
        Ok(Prepared {
            job_id,
            writes,
            tasks,
        })
    }

    /// Submit `plans` (small jobs, each at most [`MAX_TRANSACTION_ITEMS`] - 2 -
    /// [`PREPARED_RESERVE`] tasks) as few transactions as they fit in, each led by
    /// `guard` (a fence the caller's run must still hold): how a fan-out of many small
    /// jobs (a re-blur of a project's photos) costs a transaction per batch, not several
    /// requests per job. A batch in which some job exists already (a retried fan-out) is
    /// submitted again job by job, each finding its own; a conflict on `guard` is
    /// returned as it is, with index 0, and nothing of that batch is stored.
    pub async fn submit_all(
        &self,
        plans: Vec<JobPlan>,
        guard: Option<Write>,
    ) -> Result<Vec<JobId>, EngineError> {
        let room = MAX_TRANSACTION_ITEMS - usize::from(guard.is_some());
        let mut out = Vec::with_capacity(plans.len());
        let mut batch: Vec<(JobPlan, Prepared)> = Vec::new();
        let mut used = 0;
        let mut plans = plans.into_iter().peekable();
        while let Some(plan) = plans.next() {
            let prepared = self.prepare(plan.clone())?;
            used += prepared.writes.len();
            batch.push((plan, prepared));
            let next_fits = plans
                .peek()
                .is_some_and(|p| used + p.tasks.len() + 2 <= room);
            if next_fits {
                continue;
            }
            let mut writes: Vec<Write> = guard.iter().cloned().collect();
            writes.extend(batch.iter().flat_map(|(_, p)| p.writes.iter().cloned()));
            match self.ports.store.transact(writes).await {
                Ok(()) => {
                    futures_util::future::try_join_all(
                        batch.iter().map(|(_, p)| self.offer_prepared(p)),
                    )
                    .await?;
                    out.extend(batch.iter().map(|(_, p)| p.job_id));
                }
                Err(e @ StoreError::Conflict { index: 0, .. }) if guard.is_some() => {
                    return Err(e.into());
                }
                Err(StoreError::Conflict { .. }) => {
                    for (plan, _) in &batch {
                        out.push(self.submit(plan.clone()).await?.job_id);
                    }
                }
                Err(e) => return Err(e.into()),
            }
            batch.clear();
            used = 0;
        }
        Ok(out)
    }

    /// Offer a prepared job's root tasks once its writes are committed.
    pub async fn offer_prepared(&self, p: &Prepared) -> Result<(), EngineError> {
        for t in p.tasks.iter().filter(|t| t.state == TaskState::Queued) {
            self.offer(t, std::time::Duration::ZERO).await?;
        }
        tracing::info!(job_id = %p.job_id, tasks = p.tasks.len(), "prepared job offered");
        Ok(())
    }
}

/// The job record of `plan`, before any task ran.
fn new_job(plan: &JobPlan, id: JobId, fp: &str, tasks: usize, now: Millis, sealed: bool) -> Job {
    Job {
        id,
        tenant: plan.tenant.clone(),
        project: plan.project,
        kind: plan.kind.clone(),
        label: plan.label.clone(),
        spec: plan.spec.clone(),
        fingerprint: fp.to_string(),
        priority: plan.priority,
        tasks_total: tasks as i64,
        sealed,
        counters: JobCounters::default(),
        cancel: None,
        created_at: now,
        rev: 0,
    }
}

fn existing_job(fp_item: &Item) -> Result<JobId, EngineError> {
    fp_item
        .body
        .get("job_id")
        .and_then(|v| v.as_str())
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            StoreError::Corrupt(format!(
                "fingerprint record {} has no job id",
                fp_item.key.pk
            ))
            .into()
        })
}

fn build_tasks(plan: &JobPlan, job_id: JobId, now: Millis) -> Vec<Task> {
    let ids: HashMap<&str, TaskId> = plan
        .tasks
        .iter()
        .map(|t| (t.name.as_str(), task_id_for(job_id, &t.name)))
        .collect();
    let mut dependents: HashMap<&str, Vec<TaskId>> = HashMap::new();
    for t in &plan.tasks {
        for d in t.after.iter().collect::<BTreeSet<_>>() {
            dependents
                .entry(d.as_str())
                .or_default()
                .push(ids[t.name.as_str()]);
        }
    }
    plan.tasks
        .iter()
        .map(|p| {
            let depends_on: Vec<TaskId> = p
                .after
                .iter()
                .collect::<BTreeSet<_>>()
                .into_iter()
                .map(|d| ids[d.as_str()])
                .collect();
            Task {
                id: ids[p.name.as_str()],
                job_id,
                kind: p.kind.clone(),
                tenant: Some(plan.tenant.clone()),
                priority: plan.priority,
                name: p.name.clone(),
                payload: p.payload.clone(),
                state: if depends_on.is_empty() {
                    TaskState::Queued
                } else {
                    TaskState::Waiting
                },
                attempts: 0,
                max_attempts: p
                    .max_attempts
                    .unwrap_or_else(|| attempt_policy(&p.kind).max_attempts)
                    .max(1),
                moved_on: 0,
                epoch: 0,
                lease: None,
                heartbeat_at: None,
                not_before: now,
                resource_class: p.resource_class,
                memory_estimate: p.memory_estimate,
                last_error: None,
                result: None,
                cache_key: p.cache_key.clone(),
                deps_pending: depends_on.iter().copied().collect(),
                depends_on,
                dependents: dependents.remove(p.name.as_str()).unwrap_or_default(),
                advance_pending: Vec::new(),
                reoffered: None,
                notify_pending: false,
                compensation_refused: false,
                created_at: now,
                finished_at: None,
                rev: 0,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
