//! How typed records map onto state-store items: keys, index entries and bodies.
//!
//! One table, DynamoDB single-table style. Every record's key is written here once.
//!
//! | record | pk | sk | by_parent | by_due |
//! | --- | --- | --- | --- | --- |
//! | task | `TASK#<id>` | `TASK` | `JOB#<job>` / `TASK#<id>` | `DUE#<state>#<shard>` / `<due ms>#<id>` |
//! | job | `JOB#<id>` | `JOB` | `TENANT#<t>#JOBS#<shard>` / `<id>` | — |
//! | fingerprint | `FP#<tenant>#<kind>#<sha>` | `FP` | — | — |
//! | cache entry | `CACHE#<tenant>#<key>` | `CACHE` | — | — |
//! | snapshot numbers | `SNAPSEQ#<job>` | `SNAPSEQ` | — | — |
//! | stage cache entry | `STAGECACHE#<tenant>#<key>` | `STAGECACHE` | — | — |
//! | event (or a pack of up to 16) | `EVENTS#<job>` | `<first seq, 12 digits>` | — | — |
//! | project | `PROJECT#<id>` | `PROJECT` | `TENANT#<t>#PROJECTS` / `<name>` | — |
//! | project name | `PROJECTNAME#<tenant>#<name>` | `NAME` | — | — |
//! | subject | `PROJECT#<project>` | `SUBJECT#<id>` | — | — |
//! | photo | `PHOTO#<id>` | `PHOTO` | `PROJECT#<project>#PHOTOS` / `<id>` | — |
//! | source grant | `TENANT#<t>#SOURCEGRANTS` | `<bucket>/<prefix>` | — | — |
//! | dataset | `DATASET#<id>` | `DATASET` | `PROJECT#<project>#DATASETS` / `<id>` | — |
//! | image | `IMAGE#<id>` | `IMAGE` | `DATASET#<dataset>#IMAGES` / `<name>` | — |
//! | image name | `DATASET#<dataset>` | `IMAGENAME#<name>` | — | — |
//! | upload | `UPLOAD#<tenant>#<id>` | `UPLOAD` | — | `DUE#expiry#<shard>` / `<ms>#<pk>` |
//! | blob | `BLOB#<tenant>#<sha>` | `BLOB` | — | `DUE#expiry#<shard>` / `<ms>#<pk>` |
//! | idempotency | `IDEM#<tenant>#<scope>#<key>` | `IDEM` | — | — |
//! | usage (quotas) | `TENANT#<t>` and `TENANT#<t>#USAGE#<shard>` | `USAGE` | — | — |
//!
//! Due entries are spread over [`DUE_SHARDS`] partitions per kind ([`due_shard`]), a
//! tenant's job listing over [`TENANT_JOB_SHARDS`], and its usage counters' writes
//! over `catalog::quotas::USAGE_SHARDS` items: each is a key that a burst into one
//! tenant would otherwise write at the burst's rate (measured by
//! `infra/rehearsal/load.py`).
//!
//! The catalog's records (datasets, images, uploads, blobs, grants, idempotency) are
//! written only by [`crate::catalog`].

use crate::domain::Project;
use crate::ids::{JobId, PhotoId, ProjectId, SubjectId, TaskId, TenantId};
use crate::job::Job;
use crate::photo::{Photo, Subject};
use crate::ports::state_store::{Condition, Item, ItemKey, StoreError};
use crate::task::{Task, TaskState};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

/// Key of a task.
pub fn task_key(id: TaskId) -> ItemKey {
    ItemKey::new(format!("TASK#{id}"), "TASK")
}

/// Key of a job.
pub fn job_key(id: JobId) -> ItemKey {
    ItemKey::new(format!("JOB#{id}"), "JOB")
}

/// The by-parent partition holding a job's tasks.
pub fn job_tasks_partition(id: JobId) -> String {
    format!("JOB#{id}")
}

/// How many by-parent partitions a tenant's job listing is spread over. Every job adds
/// an entry (a photo's ingest, processing and re-blur jobs too: about four a photo), so
/// one busy tenant's listing in one partition took every entry write of its bursts: the
/// load rehearsal counted half a partition's write limit at 116 photos a second.
pub const TENANT_JOB_SHARDS: u32 = 16;

/// The by-parent partition holding the listing entry of the tenant's job `job`.
pub fn tenant_jobs_partition(tenant: &TenantId, job: JobId) -> String {
    format!(
        "TENANT#{tenant}#JOBS#{:02}",
        due_shard(&job.to_string()) % TENANT_JOB_SHARDS
    )
}

/// Every by-parent partition of a tenant's job listing: each shard, then the unsharded
/// partition that entries written before sharding still sit in. The entries are keyed
/// by job id (a ULID, so in submission order) in all of them.
pub fn tenant_jobs_partitions(tenant: &TenantId) -> Vec<String> {
    (0..TENANT_JOB_SHARDS)
        .map(|s| format!("TENANT#{tenant}#JOBS#{s:02}"))
        .chain(std::iter::once(format!("TENANT#{tenant}#JOBS")))
        .collect()
}

/// How many partitions each kind of due entry is spread over. DynamoDB gives one
/// partition of an index about 1,000 write units a second; every running task, every
/// queued one and every upload's expiry in one partition each is what a burst would
/// throttle on (the base table's writes wait for a throttled index). Sixteen shards give
/// each kind 16,000 units a second of room, and cost the reaper 16 small queries a kind.
pub const DUE_SHARDS: u32 = 16;

/// The shard of the due entry of the item named `id` (FNV-1a of the id: stable across
/// processes and versions, spread evenly over ULIDs).
pub fn due_shard(id: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in id.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h % DUE_SHARDS
}

/// The by-due partition of entries of kind `kind` (a task state, `advance`, `expiry`)
/// in `shard`.
pub fn due_shard_partition(kind: &str, shard: u32) -> String {
    format!("DUE#{kind}#{shard:02}")
}

/// Every by-due partition of `kind` a walker must read: each shard, then the unsharded
/// partition that entries written before sharding still sit in.
pub fn due_partitions(kind: &str) -> Vec<String> {
    (0..DUE_SHARDS)
        .map(|s| due_shard_partition(kind, s))
        .chain(std::iter::once(format!("DUE#{kind}")))
        .collect()
}

/// [`due_partitions`] in the order a walker at `now` visits them: from a shard that moves
/// on every minute, so that walks cut short by a time budget (the reaper's, the
/// collector's) take turns at the last shards.
pub fn due_partitions_turned(kind: &str, now: crate::Millis) -> Vec<String> {
    let mut partitions = due_partitions(kind);
    let first = (now.0.max(0) / 60_000) as usize % partitions.len();
    partitions.rotate_left(first);
    partitions
}

/// The by-due partitions for tasks in `state`.
pub fn due_partition(state: TaskState) -> Vec<String> {
    due_partitions(state.as_str())
}

/// Key of the fingerprint record that makes identical submissions one job.
pub fn fingerprint_key(tenant: &TenantId, kind: &str, fingerprint: &str) -> ItemKey {
    ItemKey::new(format!("FP#{tenant}#{kind}#{fingerprint}"), "FP")
}

/// Key of the record that hands out a reconstruction's snapshot numbers.
pub fn snapshot_seq_key(job: JobId) -> ItemKey {
    ItemKey::new(format!("SNAPSEQ#{job}"), "SNAPSEQ")
}

/// Key of a cached task result. Scoped to the tenant: a result (and the task it names)
/// is never handed to another tenant's job.
pub fn cache_key(tenant: &TenantId, key: &str) -> ItemKey {
    ItemKey::new(format!("CACHE#{tenant}#{key}"), "CACHE")
}

/// Partition of a job's events.
pub fn events_partition(job: JobId) -> String {
    format!("EVENTS#{job}")
}

/// Key of one event.
pub fn event_key(job: JobId, seq: u64) -> ItemKey {
    ItemKey::new(events_partition(job), format!("{seq:012}"))
}

/// The condition every worker write carries: the task is still running under the
/// worker's epoch. A worker whose lease was taken over (higher epoch) or revoked (forced
/// cancel, reaped) fails it.
pub fn fenced(epoch: u64) -> Condition {
    Condition::All(vec![
        Condition::field_eq("state", TaskState::Running.as_str()),
        Condition::field_eq("epoch", epoch),
    ])
}

fn to_body<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).expect("records serialize to JSON objects")
}

/// Decode an item's body into a record, attaching the store's revision.
pub fn decode<T: DeserializeOwned>(item: &Item) -> Result<T, StoreError> {
    serde_json::from_value(item.body.clone()).map_err(|e| {
        StoreError::Corrupt(format!(
            "record {} / {} does not parse: {e}",
            item.key.pk, item.key.sk
        ))
    })
}

/// A task as an item.
pub fn task_item(task: &Task) -> Item {
    Item {
        key: task_key(task.id),
        body: to_body(task),
        by_parent: Some(ItemKey::new(
            job_tasks_partition(task.job_id),
            format!("TASK#{}", task.id),
        )),
        by_due: task.due_at().map(|due| {
            // A terminal task is due only for its follow-ups (dependents to tell,
            // notices to raise), whichever way it ended: the reaper walks `advance`.
            let state = if task.state.is_terminal() {
                "advance".to_string()
            } else {
                task.state.to_string()
            };
            ItemKey::new(
                due_shard_partition(&state, due_shard(&task.id.to_string())),
                format!("{}#{}", due.sort_key(), task.id),
            )
        }),
        rev: task.rev,
    }
}

/// An item as a task.
pub fn task_from(item: &Item) -> Result<Task, StoreError> {
    let mut t: Task = decode(item)?;
    t.rev = item.rev;
    Ok(t)
}

/// A job as an item.
pub fn job_item(job: &Job) -> Item {
    Item {
        key: job_key(job.id),
        body: to_body(job),
        by_parent: Some(ItemKey::new(
            tenant_jobs_partition(&job.tenant, job.id),
            job.id.to_string(),
        )),
        by_due: None,
        rev: job.rev,
    }
}

/// An item as a job.
pub fn job_from(item: &Item) -> Result<Job, StoreError> {
    let mut j: Job = decode(item)?;
    j.rev = item.rev;
    Ok(j)
}

/// Key of a project.
pub fn project_key(id: ProjectId) -> ItemKey {
    ItemKey::new(format!("PROJECT#{id}"), "PROJECT")
}

/// Key of the record that keeps a tenant's project names unique.
pub fn project_name_key(tenant: &TenantId, name: &str) -> ItemKey {
    ItemKey::new(format!("PROJECTNAME#{tenant}#{name}"), "NAME")
}

/// The by-parent partition listing a tenant's projects by name.
pub fn tenant_projects_partition(tenant: &TenantId) -> String {
    format!("TENANT#{tenant}#PROJECTS")
}

/// A project as an item.
pub fn project_item(p: &Project) -> Item {
    Item {
        key: project_key(p.id),
        body: to_body(p),
        by_parent: Some(ItemKey::new(
            tenant_projects_partition(&p.tenant),
            p.name.clone(),
        )),
        by_due: None,
        rev: 0,
    }
}

/// Key of an opted-out subject.
pub fn subject_key(project: ProjectId, id: SubjectId) -> ItemKey {
    ItemKey::new(format!("PROJECT#{project}"), format!("SUBJECT#{id}"))
}

/// Sort-key prefix of a project's subjects (in the project's partition).
pub const SUBJECT_PREFIX: &str = "SUBJECT#";

/// A subject as an item.
pub fn subject_item(s: &Subject) -> Item {
    Item::new(subject_key(s.project, s.id), to_body(s))
}

/// Key of one of a project's cluster heads (`clusters::Head`: centroid and photos, a few
/// hundred bytes). In one of [`CLUSTER_SHARDS`] partitions, picked by the cluster's id,
/// and never the project's own partition (photo jobs do not touch it: its record is read
/// through the view shards). Every face's search for its cluster reads them all; they are
/// written when a cluster starts and when its centroid moves.
pub fn cluster_key(project: ProjectId, id: crate::ClusterId) -> ItemKey {
    let shard = u128::from(id.0) % u128::from(CLUSTER_SHARDS);
    ItemKey::new(
        format!("PROJECT#{project}#CLUSTERS#{shard}"),
        format!("{CLUSTER_PREFIX}{id}"),
    )
}

/// Key of one of a cluster's counters: how many faces and photos joined it, each join
/// adding to the shard its photo picks. A join that leaves the cluster's views as they
/// were writes nothing else of the cluster, so a person in every photo of a burst costs a
/// counter write spread over [`CLUSTER_COUNT_SHARDS`] partitions, not a head write each.
pub fn cluster_count_key(id: crate::ClusterId, shard: u32) -> ItemKey {
    ItemKey::new(format!("CLUSTER#{id}#COUNT#{shard}"), "COUNT")
}

/// Counter shards of a cluster.
pub const CLUSTER_COUNT_SHARDS: u32 = 8;

/// The counter shard a photo's joins add to (the same one its erasure subtracts from).
pub fn cluster_count_shard(photo: PhotoId) -> u32 {
    (u128::from(photo.0) % u128::from(CLUSTER_COUNT_SHARDS)) as u32
}

/// Partitions a project's cluster heads are spread over.
pub const CLUSTER_SHARDS: u32 = 16;

/// Every partition of a project's cluster heads (erased with the project).
pub fn project_clusters_partitions(project: ProjectId) -> Vec<String> {
    (0..CLUSTER_SHARDS)
        .map(|n| format!("PROJECT#{project}#CLUSTERS#{n}"))
        .collect()
}

/// Sort-key prefix of a project's cluster heads.
pub const CLUSTER_PREFIX: &str = "CLUSTER#";

/// Key of a cluster's body: the whole cluster, its counts and its representative views
/// (about 25 KB), in a partition of its own. Every change to its views writes it,
/// conditioned on its revision; its [`cluster_key`] head only when its centroid moved.
pub fn cluster_body_key(id: crate::ClusterId) -> ItemKey {
    ItemKey::new(format!("CLUSTER#{id}"), "BODY")
}

/// A cluster as its two items: the head (what every face's search for its cluster and
/// the listing read) and the body.
pub fn cluster_items(c: &crate::clusters::Cluster) -> (Item, Item) {
    (
        Item::new(cluster_key(c.project, c.id), to_body(&c.head())),
        Item::new(cluster_body_key(c.id), to_body(c)),
    )
}

/// Key of the record of which cluster face `index` of `photo` joined: in the photo's own
/// partition, so the photo's erasure sweeps it, and written only if absent, so a retried
/// join counts the face once.
pub fn cluster_member_key(photo: PhotoId, index: u32) -> ItemKey {
    ItemKey::new(
        format!("PHOTO#{photo}"),
        format!("{CLUSTER_MEMBER_PREFIX}{index:05}"),
    )
}

/// Key of the guard every change to `photo`'s membership records moves (a join's
/// transaction, on the revision its run read before reading the records; an erasure's):
/// what makes two runs that plan from the same read conflict. In the photo's partition,
/// outside [`CLUSTER_MEMBER_PREFIX`], so the photo's erasure sweeps it.
pub fn photo_joins_key(photo: PhotoId) -> ItemKey {
    ItemKey::new(format!("PHOTO#{photo}"), "JOINS")
}

/// Sort-key prefix of a photo's cluster memberships (in the photo's partition).
pub const CLUSTER_MEMBER_PREFIX: &str = "CLUSTER_OF#";

/// Key of a photo.
pub fn photo_key(id: PhotoId) -> ItemKey {
    ItemKey::new(format!("PHOTO#{id}"), "PHOTO")
}

/// The by-parent partition holding a project's photos.
pub fn project_photos_partition(project: ProjectId) -> String {
    format!("PROJECT#{project}#PHOTOS")
}

/// A photo as an item.
pub fn photo_item(p: &Photo) -> Item {
    Item {
        key: photo_key(p.id),
        body: to_body(p),
        by_parent: Some(ItemKey::new(
            project_photos_partition(p.project),
            p.id.to_string(),
        )),
        by_due: None,
        rev: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_minute_a_walk_starts_one_shard_later_and_still_visits_every_shard() {
        let minute = crate::Millis(7 * 60_000 + 5);
        let a = due_partitions_turned("queued", minute);
        let b = due_partitions_turned("queued", crate::Millis(minute.0 + 60_000));
        assert_eq!(a[1], b[0]);
        let (mut sorted, mut all) = (b.clone(), due_partitions("queued"));
        sorted.sort();
        all.sort();
        assert_eq!(sorted, all);
    }

    #[test]
    fn due_entries_spread_over_every_shard_and_walkers_read_them_all() {
        let mut per_shard = vec![0u32; DUE_SHARDS as usize];
        for _ in 0..4000 {
            per_shard[due_shard(&TaskId::new().to_string()) as usize] += 1;
        }
        // 4,000 ids over 16 shards: 250 each on average; none may carry twice that.
        assert!(
            per_shard.iter().all(|n| (125..500).contains(n)),
            "{per_shard:?}"
        );
        let walked = due_partitions("running");
        assert_eq!(walked.len(), DUE_SHARDS as usize + 1);
        assert!(
            walked.contains(&"DUE#running".to_string()),
            "the unsharded one too"
        );
        for s in 0..DUE_SHARDS {
            assert!(walked.contains(&due_shard_partition("running", s)));
        }
        assert_eq!(due_shard("TASK#x"), due_shard("TASK#x"), "stable");
    }
}
