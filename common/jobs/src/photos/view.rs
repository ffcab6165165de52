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

/// How many projects' subject sets one process keeps decoded (one set each, the latest
/// read). A set is immutable, so a cached one is never stale; the bound caps memory in a
/// process that serves many projects.
const CACHED_PROJECTS: usize = 32;

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
        let (view, set) = plan(&p, &project::subjects(store, project).await?);
        let mut writes = vec![Write::Check {
            key: records::project_key(project),
            condition: Condition::Rev(item.rev),
        }];
        writes.extend(privacy_view::put_all(&view));
        match store.transact(writes).await {
            Ok(()) => {
                tracing::info!(project = %project, subjects_rev = view.subjects_rev, "privacy view made");
                store_subject_set(objects, set).await;
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

/// A subject set to store once the view that names it is committed.
pub struct PendingSet(Option<(String, Vec<u8>)>);

/// The view of `p` with `subjects`, and the subject set object it names (nothing when
/// nobody opted out). The set is stored only after the view is committed
/// ([`store_subject_set`]): stored before, a change that then failed (or a process that
/// died) would leave someone's embeddings in an object no view names. A reader that finds
/// it missing meanwhile makes it from the subject records ([`subjects`]).
pub fn plan(p: &Project, subjects: &[tessera_core::photo::Subject]) -> (PrivacyView, PendingSet) {
    if subjects.is_empty() {
        return (PrivacyView::of(p, None), PendingSet(None));
    }
    let (key, bytes) = privacy_view::pack(p.id, subjects);
    (
        PrivacyView::of(p, Some(key.clone())),
        PendingSet(Some((key, bytes))),
    )
}

/// Store a committed view's subject set; a failure is logged (readers make it again).
pub async fn store_subject_set(objects: &dyn ObjectStore, set: PendingSet) {
    if let Some((key, bytes)) = set.0
        && let Err(e) = objects.put(&key, Bytes::from(bytes)).await
    {
        tracing::warn!(key, error = %e, "subject set not stored; readers will make it from the subject records");
    }
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
    if let Some((cached, set)) = cache().lock().expect("cache lock").get(&view.project)
        && cached == key
    {
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
            // A change that removed someone may have committed (and retired its older
            // sets) between the subject read above and this put: then this set is no
            // longer one any view names, and it may hold that person's embeddings.
            let now = store
                .get(&privacy_view::key(view.project, 0))
                .await?
                .map(|i| privacy_view::decode(&i))
                .transpose()?;
            if now.is_none_or(|v| v.subjects.as_deref() != Some(key.as_str())) {
                objects.delete(key).await?;
                return Err(PhotoError::Store(StoreError::Unavailable(format!(
                    "the privacy view of project {} changed while its subject set was being made again; the new view will be read on the next try",
                    view.project
                ))));
            }
            Bytes::from(bytes)
        }
        Err(e) => return Err(e.into()),
    };
    let set = Arc::new(
        privacy_view::unpack(view.project, key, &bytes)
            .map_err(|e| PhotoError::Invalid(e.to_string()))?,
    );
    let mut c = cache().lock().expect("cache lock");
    if c.len() >= CACHED_PROJECTS && !c.contains_key(&view.project) {
        c.clear();
    }
    // One set per project: a newer view's set replaces the older one's (which may hold
    // the embeddings of someone removed since).
    c.insert(view.project, (key.clone(), set.clone()));
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

type SetCache = Mutex<HashMap<ProjectId, (String, Arc<Vec<SubjectEmbeddings>>)>>;

fn cache() -> &'static SetCache {
    static CACHE: OnceLock<SetCache> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}
