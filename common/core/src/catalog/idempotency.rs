//! `Idempotency-Key`: a retried create answers what the first one created.
//!
//! The key is the client's text, so it is checked before it becomes part of a store key:
//! 1 to 200 printable ASCII characters (a UUID or a ULID fits many times over); anything
//! else is refused naming the header, never a store error after bytes were written.

use super::CatalogError;
use crate::ids::TenantId;
use crate::ports::StateStore;
use crate::ports::state_store::{Condition, Item, ItemKey, Write};

/// Longest key accepted.
pub const MAX_LEN: usize = 200;

/// A checked `Idempotency-Key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// Check a header value.
    pub fn parse(value: &str) -> Result<Self, CatalogError> {
        if value.is_empty()
            || value.len() > MAX_LEN
            || !value.bytes().all(|b| b.is_ascii_graphic() || b == b' ')
        {
            return Err(CatalogError::Invalid(format!(
                "Idempotency-Key must be 1 to {MAX_LEN} printable ASCII characters (a UUID is typical); this one has {} bytes",
                value.len()
            )));
        }
        Ok(IdempotencyKey(value.to_string()))
    }

    fn item_key(&self, tenant: &TenantId, scope: &str) -> ItemKey {
        ItemKey::new(format!("IDEM#{tenant}#{scope}#{}", self.0), "IDEM")
    }

    /// The id an earlier create in `scope` (`projects`, `uploads`) made with this key.
    pub async fn earlier(
        &self,
        store: &dyn StateStore,
        tenant: &TenantId,
        scope: &str,
    ) -> Result<Option<String>, CatalogError> {
        // Records written before this module named the id by its kind (`project`).
        let legacy = scope.trim_end_matches('s');
        Ok(store
            .get(&self.item_key(tenant, scope))
            .await?
            .and_then(|i| {
                i.body["id"]
                    .as_str()
                    .or(i.body[legacy].as_str())
                    .map(str::to_string)
            }))
    }

    /// The write that records `id` as what this key created in `scope`.
    pub fn record(&self, tenant: &TenantId, scope: &str, id: &str) -> Write {
        Write::Put {
            item: Item::new(
                self.item_key(tenant, scope),
                serde_json::json!({ "id": id }),
            ),
            condition: Condition::Absent,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::IdempotencyKey;

    #[test]
    fn keys_are_bounded_printable_ascii() {
        assert!(IdempotencyKey::parse("4f1c2b7e-0000-4000-8000-000000000000").is_ok());
        for bad in [String::new(), "k".repeat(201), "a\nb".into(), "clé".into()] {
            assert!(IdempotencyKey::parse(&bad).is_err(), "{bad:?}");
        }
    }
}
