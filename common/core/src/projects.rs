//! Projects: the scope of datasets, photos, subjects and privacy settings. Their names
//! are unique per tenant (a name record is written in the same transaction).

use crate::domain::Project;
use crate::error::{Classify, ErrorClass};
use crate::ids::{ProjectId, TenantId};
use crate::ports::state_store::{Condition, Item, Query, StateStore, StoreError, Write};
use crate::{Millis, privacy_view, records};
use serde_json::json;

/// Why a project request failed.
#[derive(Debug, thiserror::Error)]
pub enum ProjectError {
    /// Nothing by that name or id.
    #[error("{0}")]
    NotFound(String),
    /// A request that cannot be carried out as asked.
    #[error("{0}")]
    Invalid(String),
    /// A request that conflicts with what is there now: a name another project holds,
    /// or a field changed by someone else since it was read (read it and try again).
    #[error("{0}")]
    Conflict(String),
    /// A change that takes protection away, asked for by someone who may not make it.
    #[error(transparent)]
    Forbidden(#[from] crate::weakening::NotAllowed),
    /// The state store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Classify for ProjectError {
    fn class(&self) -> ErrorClass {
        match self {
            ProjectError::NotFound(_)
            | ProjectError::Invalid(_)
            | ProjectError::Conflict(_)
            | ProjectError::Forbidden(_) => ErrorClass::Permanent,
            ProjectError::Store(e) => e.class(),
        }
    }
}

/// Check a match threshold and blur growth from configuration.
pub fn validate_settings(threshold: Option<f32>, expand: f32) -> Result<(), ProjectError> {
    if let Some(t) = threshold
        && !(t.is_finite() && (-1.0..=1.0).contains(&t))
    {
        return Err(ProjectError::Invalid(format!(
            "match threshold {t} is not a cosine similarity; use a value in -1..1 (recommended: {}; lower blurs more)",
            crate::privacy::RECOMMENDED_THRESHOLD
        )));
    }
    if !(0.30..=0.40).contains(&expand) {
        return Err(ProjectError::Invalid(format!(
            "blur expansion {expand} is outside 0.30..0.40 (the face box grows by 30 to 40 %)"
        )));
    }
    Ok(())
}

/// Create a project; its name is unique for the tenant.
pub async fn create(
    store: &dyn StateStore,
    tenant: TenantId,
    name: &str,
    threshold: Option<f32>,
    expand: f32,
) -> Result<Project, ProjectError> {
    validate_settings(threshold, expand)?;
    check_name(name)?;
    let p = Project {
        id: ProjectId::new(),
        tenant: tenant.clone(),
        name: name.to_string(),
        description: None,
        match_threshold: threshold,
        blur_expand: expand,
        subjects_rev: 0,
        opted_out: 0,
        keep_metadata: Default::default(),
        upload_retention_days: None,
        sweep_stalled: None,
        created_at: Millis::now(),
    };
    let name_item = Item::new(
        records::project_name_key(&tenant, name),
        json!({ "project": p.id }),
    );
    match store
        .transact(vec![
            Write::Put {
                item: name_item,
                condition: Condition::Absent,
            },
            Write::Put {
                item: records::project_item(&p),
                condition: Condition::Absent,
            },
        ])
        .await
    {
        Err(StoreError::Conflict { index: 0, .. }) => Err(ProjectError::Conflict(format!(
            "a project named `{name}` exists already; pick another name"
        ))),
        other => other.map(|()| p).map_err(Into::into),
    }
}

/// A project by id.
pub async fn load(store: &dyn StateStore, id: ProjectId) -> Result<Project, ProjectError> {
    let item = store
        .get(&records::project_key(id))
        .await?
        .ok_or_else(|| ProjectError::NotFound(format!("project {id} does not exist")))?;
    Ok(records::decode(&item)?)
}

/// A project by name.
pub async fn by_name(
    store: &dyn StateStore,
    tenant: &TenantId,
    name: &str,
) -> Result<Project, ProjectError> {
    let item = store
        .get(&records::project_name_key(tenant, name))
        .await?
        .ok_or_else(|| {
            ProjectError::NotFound(format!(
                "no project named `{name}`; create it with `tessera projects create {name}`"
            ))
        })?;
    let id: ProjectId = item.body["project"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            StoreError::Corrupt(format!("project name record `{name}` names no project"))
        })?;
    load(store, id).await
}

/// Every record a query matches, page after page.
pub async fn query_all<T: serde::de::DeserializeOwned>(
    store: &dyn StateStore,
    mut q: Query,
) -> Result<Vec<T>, StoreError> {
    let mut out = Vec::new();
    loop {
        let page = store.query(&q).await?;
        for item in &page.items {
            out.push(records::decode(item)?);
        }
        match page.next {
            Some(n) => q.after = Some(n),
            None => return Ok(out),
        }
    }
}

/// Why a project name is not acceptable, if it is not.
pub fn check_name(name: &str) -> Result<(), ProjectError> {
    if name.is_empty()
        || name.len() > 200
        || name.contains(['#', '/'])
        || name.chars().any(char::is_control)
    {
        return Err(ProjectError::Invalid(format!(
            "project name `{name}` must be 1 to 200 characters without `#`, `/` or control characters"
        )));
    }
    Ok(())
}

/// Set how many days a project keeps its photos' originals (`None`: for ever). Applies
/// to photos ingested from now on. Keeping them longer than now
/// ([`crate::weakening::retention_weakened`]) is an admin's change, and on record; the
/// write holds only while the retention is still the one that was judged.
pub async fn set_upload_retention(
    store: &dyn StateStore,
    id: ProjectId,
    days: Option<u32>,
    actor: &crate::audit::Actor,
) -> Result<(), ProjectError> {
    // At least a day: an original must outlive its own processing.
    if days.is_some_and(|d| !(1..=36_500).contains(&d)) {
        return Err(ProjectError::Invalid(
            "upload_retention_days must be 1 to 36500 days, or null to keep originals".into(),
        ));
    }
    let Some(item) = store.get(&records::project_key(id)).await? else {
        return Err(ProjectError::NotFound(format!(
            "project {id} does not exist"
        )));
    };
    let now: Project = records::decode(&item)?;
    if now.upload_retention_days == days {
        return Ok(());
    }
    let weakens = crate::weakening::retention_weakened(now.upload_retention_days, days);
    crate::weakening::authorize(
        actor,
        &format!("changing how long project {id} keeps its originals"),
        weakens.clone(),
    )?;
    let audited = (!weakens.is_empty()).then(|| {
        crate::audit::entry(
            actor,
            "project.upload_retention",
            format!("project/{id}"),
            json!({ "from": now.upload_retention_days, "to": days, "weakens": weakens }),
        )
    });
    let fields = vec![("upload_retention_days".to_string(), json!(days))];
    let judged = match now.upload_retention_days {
        Some(d) => Condition::field_eq("upload_retention_days", d),
        None => Condition::field_null("upload_retention_days"),
    };
    let project = Write::Set {
        key: records::project_key(id),
        fields: fields.clone(),
        condition: judged,
    };
    // With the project's privacy view, which ingest reads it from; or, where the project
    // has no view yet, on the condition that none is made meanwhile (one made from the
    // project as it was would keep the old value).
    let mut with_view = vec![project.clone()];
    with_view.extend(privacy_view::set_all(id, fields));
    let mut without_view = vec![project, privacy_view::none_yet(id)];
    with_view.extend(audited.clone());
    without_view.extend(audited);
    for writes in [with_view, without_view] {
        match store.transact(writes).await {
            Ok(()) => return Ok(()),
            Err(StoreError::Conflict { index: 0, .. }) => {
                return Err(ProjectError::Conflict(format!(
                    "project {id} was deleted, or its upload_retention_days changed meanwhile; read it and try again"
                )));
            }
            Err(e) if e.is_conflict() => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(ProjectError::Store(StoreError::Unavailable(format!(
        "the privacy view of project {id} was being made while its retention changed; try again"
    ))))
}

/// Rename a project and/or change its description; the name stays unique per tenant.
///
/// The record is written back as it was stored with only those fields changed, never as
/// this build decodes it: during a rolling deploy, a build that does not know a newer
/// field (a stalled sweep's notice, say) would otherwise drop it from the record by
/// renaming the project.
pub async fn update(
    store: &dyn StateStore,
    id: ProjectId,
    name: Option<&str>,
    description: Option<Option<String>>,
) -> Result<Project, ProjectError> {
    let item = store
        .get(&records::project_key(id))
        .await?
        .ok_or_else(|| ProjectError::NotFound(format!("project {id} does not exist")))?;
    let mut p: Project = records::decode(&item)?;
    let old_name = p.name.clone();
    let mut fields = Vec::new();
    if let Some(d) = description {
        fields.push(("description", json!(d)));
        p.description = d;
    }
    let mut writes = Vec::new();
    if let Some(n) = name.filter(|n| *n != old_name) {
        check_name(n)?;
        fields.push(("name", json!(n)));
        p.name = n.to_string();
        writes.push(Write::Put {
            item: Item::new(
                records::project_name_key(&p.tenant, n),
                json!({ "project": p.id }),
            ),
            condition: Condition::Absent,
        });
        writes.push(Write::Delete {
            key: records::project_name_key(&p.tenant, &old_name),
            condition: Condition::None,
        });
    }
    let mut stored = item.clone();
    for (field, value) in fields {
        stored.body[field] = value;
    }
    // The listing's sort key is the name.
    stored.by_parent = records::project_item(&p).by_parent;
    writes.push(Write::Put {
        item: stored,
        condition: Condition::Rev(item.rev),
    });
    match store.transact(writes).await {
        Err(StoreError::Conflict { index: 0, .. }) if p.name != old_name => {
            Err(ProjectError::Conflict(format!(
                "a project named `{}` exists already; pick another name",
                p.name
            )))
        }
        other => other.map(|()| p).map_err(Into::into),
    }
}

/// Delete a project (its name becomes free again).
pub async fn delete(store: &dyn StateStore, id: ProjectId) -> Result<(), ProjectError> {
    let item = store
        .get(&records::project_key(id))
        .await?
        .ok_or_else(|| ProjectError::NotFound(format!("project {id} does not exist")))?;
    let p: Project = records::decode(&item)?;
    store
        .transact(
            vec![
                Write::Delete {
                    key: records::project_key(id),
                    condition: Condition::Rev(item.rev),
                },
                Write::Delete {
                    key: records::project_name_key(&p.tenant, &p.name),
                    condition: Condition::None,
                },
            ]
            .into_iter()
            .chain(privacy_view::delete_all(id))
            .collect(),
        )
        .await?;
    Ok(())
}
