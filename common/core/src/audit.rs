//! The audit trail: who enrolled or removed an opted-out subject, changed a project's
//! privacy settings, read a file that shows a face unblurred, or erased what, and when.
//!
//! Entries are durable records written in the same transaction as the change they
//! describe (where there is one), listed newest first per tenant by an admin. They hold
//! ids and labels, never image bytes or embeddings.

use crate::Millis;
use crate::ids::TenantId;
use crate::ports::StateStore;
use crate::ports::state_store::{Condition, Index, Item, ItemKey, Query, StoreError, Write};
use serde::{Deserialize, Serialize};

/// Who did it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    /// `api_key:<key id>`, `local` (a server without keys) or `cli` (the operator).
    pub who: String,
    /// The tenant acted for.
    pub tenant: TenantId,
    /// Whether it acts with an admin's authority (an admin key, the operator at the
    /// command line): only then may it weaken a project's privacy
    /// ([`crate::weakening`]).
    #[serde(default)]
    pub admin: bool,
}

impl Actor {
    /// The operator at the command line, acting for `tenant`.
    pub fn cli(tenant: TenantId) -> Self {
        Actor {
            who: "cli".into(),
            tenant,
            admin: true,
        }
    }
}

/// One entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// When.
    pub at: Millis,
    /// Who.
    pub actor: String,
    /// The tenant.
    pub tenant: TenantId,
    /// What: `subject.enrol`, `subject.remove`, `privacy.settings`, `photo.read_unblurred`,
    /// `photo.erase`, `dataset.erase`, `project.erase`.
    pub action: String,
    /// The thing acted on (`project/<id>/subject/<id>`, `photo/<id>`, …).
    pub target: String,
    /// Anything else worth knowing (a label, a threshold, counts).
    #[serde(default)]
    pub detail: serde_json::Value,
}

fn partition(tenant: &TenantId) -> String {
    format!("AUDIT#{tenant}")
}

/// The write that records `action` on `target` by `actor` now.
pub fn entry(
    actor: &Actor,
    action: &str,
    target: impl Into<String>,
    detail: serde_json::Value,
) -> Write {
    let e = AuditEntry {
        at: Millis::now(),
        actor: actor.who.clone(),
        tenant: actor.tenant.clone(),
        action: action.into(),
        target: target.into(),
        detail,
    };
    Write::Put {
        item: Item::new(
            ItemKey::new(
                partition(&actor.tenant),
                format!("{}#{}", e.at.sort_key(), ulid::Ulid::new()),
            ),
            serde_json::to_value(&e).expect("serializable"),
        ),
        condition: Condition::Absent,
    }
}

/// Record an entry on its own (for reads, which change nothing else).
pub async fn record(
    store: &dyn StateStore,
    actor: &Actor,
    action: &str,
    target: impl Into<String>,
    detail: serde_json::Value,
) -> Result<(), StoreError> {
    store
        .transact(vec![entry(actor, action, target, detail)])
        .await
}

/// A tenant's entries, newest first, a page at a time (`after`: the previous page's
/// cursor).
pub async fn list(
    store: &dyn StateStore,
    tenant: &TenantId,
    after: Option<String>,
    limit: usize,
) -> Result<(Vec<AuditEntry>, Option<String>), StoreError> {
    let mut q = Query::partition(Index::Table, partition(tenant), limit.clamp(1, 500));
    q.descending = true;
    q.after = after;
    let page = store.query(&q).await?;
    let entries = page
        .items
        .iter()
        .map(crate::records::decode)
        .collect::<Result<Vec<AuditEntry>, _>>()?;
    Ok((entries, page.next))
}
