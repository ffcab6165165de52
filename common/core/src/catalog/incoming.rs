//! Objects a tenant puts in the bucket itself and then names as a photo (`s3_key`).
//!
//! Allow-list, not deny-list: a tenant may name only keys below its own incoming folder,
//! `incoming/<tenant>/`. Everything else in the bucket — other tenants' uploads, blobs,
//! published variants, thumbnails, snapshots, and any folder added later — is out of
//! reach without anyone remembering to list it. Tenant ids are lowercase ASCII, and the
//! prefix is compared byte for byte, so a case-insensitive folder store cannot fold a key
//! of another folder into it.

use super::CatalogError;
use crate::ids::TenantId;
use crate::ports::object_store::validate_key;

/// The folder where `tenant` may put objects to be ingested by key.
pub fn incoming_prefix(tenant: &TenantId) -> String {
    format!("incoming/{tenant}/")
}

/// Whether `tenant` may ingest the object at `key`.
pub fn check_incoming_key(tenant: &TenantId, key: &str) -> Result<(), CatalogError> {
    validate_key(key).map_err(|e| CatalogError::Invalid(format!("s3_key: {e}")))?;
    let prefix = incoming_prefix(tenant);
    let shown: String = key.chars().take(200).collect();
    match key.strip_prefix(prefix.as_str()) {
        Some(rest) if !rest.is_empty() => Ok(()),
        _ => Err(CatalogError::Forbidden(format!(
            "s3_key `{shown}` is outside this tenant's incoming folder `{prefix}`; put the object there, or upload the photo"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_keys_below_the_tenants_own_folder_are_allowed() {
        let a: TenantId = "tenant-a".parse().unwrap();
        assert!(check_incoming_key(&a, "incoming/tenant-a/x.jpg").is_ok());
        assert!(check_incoming_key(&a, "incoming/tenant-a/trip/x.jpg").is_ok());
        for refused in [
            "incoming/tenant-b/x.jpg",
            "incoming/tenant-a",
            "incoming/tenant-a/",
            "incoming/tenant-ab/x.jpg",
            "INCOMING/tenant-a/x.jpg",
            "incoming/Tenant-A/x.jpg",
            "thumbnails/d/s/256.jpg",
            "uploads/p/ph/x.jpg",
            "blobs/tenant-a/00",
            "incoming/tenant-a/../tenant-b/x.jpg",
            "incoming/tenant-a/./x.jpg",
            "/incoming/tenant-a/x.jpg",
            "incoming/tenant-a/a\\..\\x.jpg",
            "",
        ] {
            assert!(check_incoming_key(&a, refused).is_err(), "{refused}");
        }
    }
}
