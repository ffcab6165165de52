//! A tenant's webhooks and the record of what was delivered to each.
//!
//! | record | pk | sk |
//! | --- | --- | --- |
//! | webhook | `TENANT#<t>#WEBHOOKS` | `<webhook id>` |
//! | delivery | `WEBHOOK#<id>#DELIVERIES` | `<created ms>#<notice id>` |
//!
//! A webhook belongs to one tenant: it is listed, read and deleted only through that
//! tenant, and it receives only that tenant's notices ([`Subscription::wants`]). A
//! delivery record points at the engine job that carries the delivery, whose task holds
//! the attempts and the last error.

use super::CatalogError;
use crate::Millis;
use crate::audit::{self, Actor};
use crate::ids::{JobId, ProjectId, TenantId, WebhookId};
use crate::notify::{NoticeType, Subscription, check_target};
use crate::ports::state_store::{Condition, Index, Item, ItemKey, Query, StateStore, Write};
use serde::{Deserialize, Serialize};

/// Most webhooks one tenant may have: each notice is matched against all of them.
pub const MAX_PER_TENANT: usize = 25;

/// The partition holding a tenant's webhooks.
pub fn partition(tenant: &TenantId) -> String {
    format!("TENANT#{tenant}#WEBHOOKS")
}

fn key(tenant: &TenantId, id: WebhookId) -> ItemKey {
    ItemKey::new(partition(tenant), id.to_string())
}

fn deliveries_partition(id: WebhookId) -> String {
    format!("WEBHOOK#{id}#DELIVERIES")
}

/// What a client asks for.
#[derive(Debug, Clone)]
pub struct NewWebhook {
    /// Only this project (which the caller has checked is the tenant's), or all.
    pub project: Option<ProjectId>,
    /// Where to POST.
    pub url: String,
    /// Which notices; empty means every type.
    pub events: Vec<NoticeType>,
}

/// Make a webhook for the tenant `actor` acts for, recorded in its audit trail in the
/// same transaction. The secret is generated here and returned in the subscription
/// (the API shows it once).
pub async fn create(
    store: &dyn StateStore,
    actor: &Actor,
    new: NewWebhook,
    allow_private: bool,
) -> Result<Subscription, CatalogError> {
    let tenant = &actor.tenant;
    check_target(&new.url, allow_private).map_err(|e| CatalogError::Invalid(e.to_string()))?;
    if list(store, tenant).await?.len() >= MAX_PER_TENANT {
        return Err(CatalogError::Quota(format!(
            "tenant `{tenant}` has {MAX_PER_TENANT} webhooks, the most allowed; delete one first"
        )));
    }
    let mut random = [0u8; 32];
    super::api_keys::getrandom(&mut random)?;
    let mut events = if new.events.is_empty() {
        NoticeType::ALL.to_vec()
    } else {
        new.events
    };
    events.sort();
    events.dedup();
    let sub = Subscription {
        id: WebhookId::new(),
        tenant: tenant.clone(),
        project: new.project,
        url: new.url,
        secret: format!("whsec_{}", hex::encode(random)),
        events,
        created_at: Millis::now(),
    };
    store
        .transact(vec![
            Write::Put {
                item: Item::new(
                    key(tenant, sub.id),
                    serde_json::to_value(&sub).expect("serializable"),
                ),
                condition: Condition::Absent,
            },
            audit::entry(
                actor,
                "webhook.create",
                format!("webhook/{}", sub.id),
                serde_json::json!({ "url": sub.url, "project": sub.project, "events": sub.events }),
            ),
        ])
        .await?;
    Ok(sub)
}

/// Every webhook of `tenant` (at most [`MAX_PER_TENANT`]).
pub async fn list(
    store: &dyn StateStore,
    tenant: &TenantId,
) -> Result<Vec<Subscription>, CatalogError> {
    let page = store
        .query(&Query::partition(Index::Table, partition(tenant), 100))
        .await?;
    let mut out = Vec::new();
    for item in &page.items {
        // A damaged record is skipped rather than stopping every other webhook's
        // notices; `get` names it, so it can be deleted.
        if let Ok(s) = serde_json::from_value::<Subscription>(item.body.clone())
            && &s.tenant == tenant
        {
            out.push(s);
        }
    }
    Ok(out)
}

/// The webhook `id` of `tenant`; another tenant's is not found.
pub async fn get(
    store: &dyn StateStore,
    tenant: &TenantId,
    id: WebhookId,
) -> Result<Subscription, CatalogError> {
    let missing = || CatalogError::NotFound(format!("no webhook `{id}`"));
    let item = store.get(&key(tenant, id)).await?.ok_or_else(missing)?;
    serde_json::from_value(item.body).map_err(|e| {
        CatalogError::Invalid(format!("webhook `{id}` is stored damaged ({e}); delete it"))
    })
}

/// Delete `sub` (read with [`get`]), recorded in its tenant's audit trail. Deliveries
/// already queued for it are not sent (the delivery task finds it gone).
pub async fn delete(
    store: &dyn StateStore,
    actor: &Actor,
    sub: &Subscription,
) -> Result<(), CatalogError> {
    if sub.tenant != actor.tenant {
        return Err(CatalogError::NotFound(format!("no webhook `{}`", sub.id)));
    }
    store
        .transact(vec![
            Write::Delete {
                key: key(&actor.tenant, sub.id),
                condition: Condition::None,
            },
            audit::entry(
                actor,
                "webhook.delete",
                format!("webhook/{}", sub.id),
                serde_json::json!({ "url": sub.url }),
            ),
        ])
        .await?;
    Ok(())
}

/// One delivery of a notice to a webhook: which engine job carries it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Delivery {
    /// The notice's id (the id every attempt carries).
    pub notice: String,
    /// Its type.
    #[serde(rename = "type")]
    pub kind: NoticeType,
    /// The job that delivers it; its task holds the attempts.
    pub job_id: JobId,
    /// When the delivery was queued.
    pub created_at: Millis,
}

/// The write that records `delivery` to `webhook`, only if not recorded already.
pub fn delivery_record(webhook: WebhookId, delivery: &Delivery) -> Write {
    Write::Put {
        item: Item::new(
            ItemKey::new(
                deliveries_partition(webhook),
                format!("{}#{}", delivery.created_at.sort_key(), delivery.notice),
            ),
            serde_json::to_value(delivery).expect("serializable"),
        ),
        condition: Condition::Absent,
    }
}

/// The newest deliveries to webhook `id` of `tenant`, newest first, a page at a time.
pub async fn deliveries(
    store: &dyn StateStore,
    tenant: &TenantId,
    id: WebhookId,
    after: Option<String>,
    limit: usize,
) -> Result<(Vec<Delivery>, Option<String>), CatalogError> {
    get(store, tenant, id).await?;
    let mut q = Query::partition(Index::Table, deliveries_partition(id), limit.clamp(1, 200));
    q.descending = true;
    q.after = after;
    let page = store.query(&q).await?;
    let list = page
        .items
        .iter()
        .filter_map(|i| serde_json::from_value(i.body.clone()).ok())
        .collect();
    Ok((list, page.next))
}
