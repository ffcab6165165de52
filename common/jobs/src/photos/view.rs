//! Reading a project's privacy view for one photo ([`tessera_core::privacy_view`]): the
//! shard the photo's id picks, made on first use for a project that has none yet, and
//! its subject set object, kept in memory by name.

use super::project::{self, PhotoError};
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use tessera_core::domain::Project;
use tessera_core::ports::ObjectStore;
use tessera_core::ports::object_store::ObjectStoreError;
use tessera_core::ports::state_store::{Condition, StateStore, StoreError, Write};
use tessera_core::privacy::SubjectEmbeddings;
use tessera_core::privacy_view::{self, PrivacyView};
use tessera_core::{PhotoId, ProjectId, records};

/// How many subject sets one process keeps decoded. A set is immutable, so a cached
/// one is never stale; the bound only caps memory in a process that serves many
/// projects.
const CACHED_SETS: usize = 32;

/// The privacy view `photo` of `project` decides by (its shard).
pub async fn for_photo(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    project: ProjectId,
    photo: PhotoId,
) -> Result<PrivacyView, PhotoError> {
    read(store, objects, project, privacy_view::shard_of(photo)).await
}

/// One shard of `project`'s privacy view. A project without view shards yet (made
/// before they existed) gets them now, conditioned on the project as read, so a change
/// racing this is never overwritten by an older view.
pub async fn read(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    project: ProjectId,
    shard: u32,
) -> Result<PrivacyView, PhotoError> {
    let key = privacy_view::key(project, shard);
    for _ in 0..8 {
        if let Some(item) = store.get(&key).await? {
            return Ok(privacy_view::decode(&item)?);
        }
        let item = store
            .get(&records::project_key(project))
            .await?
            .ok_or_else(|| PhotoError::NotFound(format!("project {project} does not exist")))?;
        let p: Project = records::decode(&item)?;
        let view =
            write_subject_set(objects, &p, &project::subjects(store, project).await?).await?;
        let mut writes = vec![Write::Check {
            key: records::project_key(project),
            condition: Condition::Rev(item.rev),
        }];
        writes.extend(privacy_view::put_all(&view));
        match store.transact(writes).await {
            Ok(()) => {
                tracing::info!(project = %project, subjects_rev = view.subjects_rev, "privacy view made");
                return Ok(view);
            }
            // The project changed meanwhile: its change wrote the shards, or it is gone.
            Err(e) if e.is_conflict() => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(PhotoError::Store(StoreError::Unavailable(format!(
        "project {project} kept changing while its privacy view was being made; try again"
    ))))
}

/// Store the subject set object of `subjects` (nothing when there are none) and return
/// the view of `p` that names it.
pub async fn write_subject_set(
    objects: &dyn ObjectStore,
    p: &Project,
    subjects: &[tessera_core::photo::Subject],
) -> Result<PrivacyView, PhotoError> {
    if subjects.is_empty() {
        return Ok(PrivacyView::of(p, None));
    }
    let (key, bytes) = privacy_view::pack(p.id, subjects);
    objects.put(&key, Bytes::from(bytes)).await?;
    Ok(PrivacyView::of(p, Some(key)))
}

/// The opted-out subjects `view` names. A set read once is kept in memory by name. A set
/// that is missing (deleted by a cleanup that raced the change that named it, or lost)
/// is made again from the subject records when they still pack to the same name;
/// otherwise the view is being replaced and the caller retries.
pub async fn subjects(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    view: &PrivacyView,
) -> Result<Arc<Vec<SubjectEmbeddings>>, PhotoError> {
    let Some(key) = &view.subjects else {
        return Ok(Arc::new(Vec::new()));
    };
    if let Some(set) = cache().lock().expect("cache lock").get(key) {
        return Ok(set.clone());
    }
    let bytes = match objects.get(key).await {
        Ok(b) => b,
        Err(ObjectStoreError::NotFound(_)) => {
            let current = project::subjects(store, view.project).await?;
            let (again, bytes) = privacy_view::pack(view.project, &current);
            if &again != key {
                return Err(PhotoError::Store(StoreError::Unavailable(format!(
                    "subject set `{key}` of project {} is gone and its subjects changed since; the change's new view will be read on the next try",
                    view.project
                ))));
            }
            tracing::warn!(project = %view.project, key, "subject set missing; made again from the subject records");
            objects.put(key, Bytes::from(bytes.clone())).await?;
            Bytes::from(bytes)
        }
        Err(e) => return Err(e.into()),
    };
    let set = Arc::new(
        privacy_view::unpack(view.project, key, &bytes)
            .map_err(|e| PhotoError::Invalid(e.to_string()))?,
    );
    let mut c = cache().lock().expect("cache lock");
    if c.len() >= CACHED_SETS {
        c.clear();
    }
    c.insert(key.clone(), set.clone());
    Ok(set)
}

/// Delete `project`'s subject set objects other than `keep` (those of replaced views,
/// which may hold the embeddings of someone since removed). Returns how many went.
pub async fn retire_subject_sets(
    objects: &dyn ObjectStore,
    project: ProjectId,
    keep: Option<&str>,
) -> Result<usize, ObjectStoreError> {
    let prefix = privacy_view::subject_sets_prefix(project);
    let mut after: Option<String> = None;
    let mut gone = 0;
    loop {
        let (page, next) = objects.list(&prefix, after.as_deref(), 1000).await?;
        for o in &page {
            if Some(o.key.as_str()) != keep {
                objects.delete(&o.key).await?;
                gone += 1;
            }
        }
        match next {
            Some(n) => after = Some(n),
            None => return Ok(gone),
        }
    }
}

fn cache() -> &'static Mutex<HashMap<String, Arc<Vec<SubjectEmbeddings>>>> {
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<Vec<SubjectEmbeddings>>>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}
