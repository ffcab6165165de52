//! Which outside buckets a tenant may import dataset images from (`s3` sources).
//!
//! The `api` function reads a source with its own role, and that role can read the
//! stack's own bucket — every tenant's raw, unblurred uploads. So a source is never
//! trusted because the role can read it: the stack's bucket is refused outright, and any
//! other bucket (or a folder of it) must have been granted to the tenant by an operator
//! (`tessera aws grant-source`), who has the state store itself, not an API key.
//! A grant of prefix `p/` covers every source prefix below `p/`; the empty prefix covers
//! the whole bucket.

use super::CatalogError;
use crate::Millis;
use crate::ids::TenantId;
use crate::ports::state_store::{Condition, Index, Item, ItemKey, Query, StateStore, Write};
use serde::{Deserialize, Serialize};

/// One bucket folder a tenant may import from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceGrant {
    /// Who may import.
    pub tenant: TenantId,
    /// The bucket.
    pub bucket: String,
    /// A folder of it (empty, or ending in `/`).
    pub prefix: String,
    /// When it was granted.
    pub granted_at: Millis,
}

/// The partition holding a tenant's grants.
fn grants_partition(tenant: &TenantId) -> String {
    format!("TENANT#{tenant}#SOURCEGRANTS")
}

fn grant_key(tenant: &TenantId, bucket: &str, prefix: &str) -> ItemKey {
    ItemKey::new(grants_partition(tenant), format!("{bucket}/{prefix}"))
}

/// A bucket name as S3 accepts it (3–63 of `a-z 0-9 . -`, starting and ending with a
/// letter or digit): anything else (an ARN, a path, an upper-case name) is refused before
/// it reaches the SDK.
pub fn check_bucket_name(bucket: &str) -> Result<(), CatalogError> {
    let ok = (3..=63).contains(&bucket.len())
        && bucket
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
        && bucket.as_bytes()[0].is_ascii_alphanumeric()
        && bucket.as_bytes()[bucket.len() - 1].is_ascii_alphanumeric();
    if ok {
        Ok(())
    } else {
        Err(CatalogError::Invalid(format!(
            "source.bucket `{}` is not an S3 bucket name (3 to 63 of a-z, 0-9, `.` and `-`)",
            bucket.chars().take(100).collect::<String>()
        )))
    }
}

/// A folder prefix as sources and grants use it: no leading `/`, empty or ending in `/`,
/// no `.`/`..` segments.
pub fn normalize_prefix(prefix: &str) -> Result<String, CatalogError> {
    let mut p = prefix.trim_start_matches('/').to_string();
    if !p.is_empty() && !p.ends_with('/') {
        p.push('/');
    }
    if p.len() > 512
        || p.chars().any(char::is_control)
        || p.split('/')
            .rev()
            .skip(1)
            .any(|s| s.is_empty() || s == "." || s == "..")
    {
        return Err(CatalogError::Invalid(format!(
            "source.prefix `{}` is not a folder prefix (no empty, `.` or `..` segments, no control characters, at most 512 bytes)",
            prefix.chars().take(100).collect::<String>()
        )));
    }
    Ok(p)
}

/// Allow `tenant` to import from `bucket`/`prefix`. The stack's own bucket cannot be
/// granted.
pub async fn grant(
    store: &dyn StateStore,
    own_bucket: &str,
    tenant: &TenantId,
    bucket: &str,
    prefix: &str,
) -> Result<SourceGrant, CatalogError> {
    check_bucket_name(bucket)?;
    refuse_own_bucket(own_bucket, bucket)?;
    let g = SourceGrant {
        tenant: tenant.clone(),
        bucket: bucket.to_string(),
        prefix: normalize_prefix(prefix)?,
        granted_at: Millis::now(),
    };
    store
        .transact(vec![Write::Put {
            item: Item::new(
                grant_key(tenant, &g.bucket, &g.prefix),
                serde_json::to_value(&g).expect("serializable"),
            ),
            condition: Condition::None,
        }])
        .await?;
    Ok(g)
}

/// Take a grant back (sources already imported keep their images); true if it existed.
pub async fn revoke(
    store: &dyn StateStore,
    tenant: &TenantId,
    bucket: &str,
    prefix: &str,
) -> Result<bool, CatalogError> {
    let key = grant_key(tenant, bucket, &normalize_prefix(prefix)?);
    if store.get(&key).await?.is_none() {
        return Ok(false);
    }
    store
        .transact(vec![Write::Delete {
            key,
            condition: Condition::None,
        }])
        .await?;
    Ok(true)
}

/// A tenant's grants.
pub async fn grants(
    store: &dyn StateStore,
    tenant: &TenantId,
) -> Result<Vec<SourceGrant>, CatalogError> {
    Ok(crate::projects::query_all(
        store,
        Query::partition(Index::Table, grants_partition(tenant), 100),
    )
    .await?)
}

fn refuse_own_bucket(own_bucket: &str, bucket: &str) -> Result<(), CatalogError> {
    if bucket.eq_ignore_ascii_case(own_bucket) {
        return Err(CatalogError::Forbidden(format!(
            "bucket `{bucket}` is where Tessera keeps every tenant's photos; it is never a dataset source"
        )));
    }
    Ok(())
}

/// Whether `tenant` may read the source `bucket`/`prefix` (the prefix normalized):
/// never the stack's own bucket, otherwise only inside one of its grants.
pub async fn authorize(
    store: &dyn StateStore,
    own_bucket: &str,
    tenant: &TenantId,
    bucket: &str,
    prefix: &str,
) -> Result<(), CatalogError> {
    check_bucket_name(bucket)?;
    refuse_own_bucket(own_bucket, bucket)?;
    let prefix = normalize_prefix(prefix)?;
    let granted = grants(store, tenant).await?;
    if granted
        .iter()
        .any(|g| g.bucket == bucket && prefix.starts_with(&g.prefix))
    {
        return Ok(());
    }
    Err(CatalogError::Forbidden(format!(
        "tenant {tenant} may not import from s3://{bucket}/{prefix}; an operator grants a bucket folder with `tessera aws grant-source --tenant {tenant} --bucket {bucket} --prefix …`{}",
        if granted.is_empty() {
            String::new()
        } else {
            format!(
                " (granted: {})",
                granted
                    .iter()
                    .map(|g| format!("s3://{}/{}", g.bucket, g.prefix))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_names_and_prefixes_are_checked() {
        for ok in ["abc", "customer-scenes", "a.b-c1"] {
            assert!(check_bucket_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "ab",
            "Customer",
            "arn:aws:s3:::x",
            "a/b",
            "-ab",
            "ab-",
            &"a".repeat(64),
        ] {
            assert!(check_bucket_name(bad).is_err(), "{bad}");
        }
        assert_eq!(normalize_prefix("").unwrap(), "");
        assert_eq!(normalize_prefix("/a/b").unwrap(), "a/b/");
        assert_eq!(normalize_prefix("a/").unwrap(), "a/");
        for bad in ["a/../b", "a//b", "./a", "a/\u{7}"] {
            assert!(normalize_prefix(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_stacks_own_bucket_is_refused_in_any_case() {
        assert!(refuse_own_bucket("tessera-photos", "tessera-photos").is_err());
        assert!(refuse_own_bucket("tessera-photos", "TESSERA-PHOTOS").is_err());
        assert!(refuse_own_bucket("tessera-photos", "other").is_ok());
    }
}
