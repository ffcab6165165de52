//! S3 notifications as a careless or hostile bucket could produce them, through the
//! function every entry point uses (`submit_upload`): each is ignored (not a photo) or
//! refused as poison naming the key — never a job for a project that is not the key's,
//! never a panic, nothing stored.

mod support;

use tessera_core::ErrorClass;
use tessera_jobs::photos::{ObjectCreated, submit_upload};

#[tokio::test]
async fn hostile_object_keys_are_ignored_or_poison_and_start_nothing() {
    let r = support::rig().await;
    let p = r.project(Some(0.363)).await;
    let event = |key: &str| ObjectCreated {
        bucket: "b".into(),
        key: key.into(),
        size: 5,
        sequencer: "0A".into(),
    };
    let long = format!(
        "uploads/{}/01JDZQ0000000000000000PH0T/{}",
        p.id,
        "n".repeat(2000)
    );
    for (key, poison_needle) in [
        // Not valid percent-encoded UTF-8.
        ("uploads/%ZZ/a.jpg", Some("not an upload key")),
        ("uploads/%C3%28/a.jpg", Some("URL-encoded")),
        // Upload keys that are not ours.
        (
            "uploads/not-a-project/01JDZQ0000000000000000PH0T/a.jpg",
            Some("project id"),
        ),
        (
            "uploads/01JDZQ0000000000000000000P/not-a-photo/a.jpg",
            Some("photo id"),
        ),
        (
            "uploads/01JDZQ0000000000000000000P/01JDZQ0000000000000000PH0T/a.jpg",
            Some("does not exist"),
        ),
        (
            &format!("uploads/{}/01JDZQ0000000000000000PH0T/a%2Fb.jpg", p.id),
            Some("one path segment"),
        ),
        (
            &format!("uploads/{}/01JDZQ0000000000000000PH0T/", p.id),
            Some("empty"),
        ),
        (&long, Some("longer than 1024")),
        // Not uploads at all: ignored.
        ("thumbnails/x/y/256.jpg", None),
        ("incoming/local/a.jpg", None),
        ("Uploads/x/y/a.jpg", None),
        ("", None),
    ] {
        match submit_upload(&r.engine, &event(key)).await {
            Ok(None) => assert!(poison_needle.is_none(), "{key}: ignored, wanted poison"),
            Ok(Some(s)) => panic!("{key}: a job was submitted ({})", s.job_id),
            Err(e) => {
                let needle = poison_needle.unwrap_or_else(|| panic!("{key}: refused: {e:?}"));
                assert!(
                    matches!(e.class, ErrorClass::Poison | ErrorClass::Permanent),
                    "{key}: {e:?}"
                );
                assert!(e.message.contains(needle), "{key}: {}", e.message);
            }
        }
    }
    assert!(r.jobs_of_kind("photo_ingest").await.is_empty());
}
