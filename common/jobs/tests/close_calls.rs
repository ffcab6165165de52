//! Second looks are asked for by the decision, for the faces whose match is close: on the
//! real models, against the shared test photos.

mod support;

use support::{models, shared};
use tessera_core::SubjectId;
use tessera_core::privacy::{FaceDecision, MatchPolicy, SubjectEmbeddings};
use tessera_jobs::photos::{decide, faces};

fn composite() -> image::RgbImage {
    image::open(shared().join("testdata/faces/composite_pd_1280x896.jpg"))
        .unwrap()
        .to_rgb8()
}

/// Grace Hopper, enrolled from her own portrait (the composite shows her three times).
fn hopper() -> SubjectEmbeddings {
    let p = shared().join("testdata/faces/grace_hopper.jpg");
    let bytes = std::fs::read(&p).unwrap();
    let e =
        tessera_jobs::photos::project::reference_embedding(&models(), "grace_hopper.jpg", &bytes)
            .unwrap();
    SubjectEmbeddings {
        subject: SubjectId::new(),
        embeddings: vec![e],
    }
}

#[test]
fn only_close_calls_are_looked_at_again_and_once() {
    let m = models();
    let img = composite();
    let faces = faces::faces_in(&m, &img, MatchPolicy::Threshold(0.363)).unwrap();
    assert_eq!(faces.len(), 8);
    assert!(
        faces.iter().all(|f| !f.looked_again),
        "the search makes no second looks"
    );
    let subject = hopper();
    let subjects = std::slice::from_ref(&subject);
    let best = |f: &tessera_core::photo::Face| f.similarity_to(&subject).unwrap();

    // Nobody opted out, or no threshold: nothing to be unsure of, no detector run.
    let mut none = faces.clone();
    assert!(!decide::may_look_again(
        &none,
        &[],
        MatchPolicy::Threshold(0.363)
    ));
    let d = decide::decide(&m, &img, &mut none, &[], MatchPolicy::Threshold(0.363)).unwrap();
    assert_eq!(d.looked_again, 0);
    let mut closed = faces.clone();
    assert!(!decide::may_look_again(
        &closed,
        subjects,
        MatchPolicy::FailClosed
    ));
    let d = decide::decide(&m, &img, &mut closed, subjects, MatchPolicy::FailClosed).unwrap();
    assert_eq!(d.looked_again, 0);
    assert!(
        closed
            .iter()
            .all(|f| f.decision == FaceDecision::FailClosed)
    );

    // A threshold far over every face's best: no close call.
    let top = faces.iter().map(best).fold(f32::MIN, f32::max);
    let far = MatchPolicy::Threshold((top / decide::LOOK_AGAIN_AT) * 1.5);
    let mut v = faces.clone();
    let d = decide::decide(&m, &img, &mut v, subjects, far).unwrap();
    assert_eq!(
        d.looked_again,
        0,
        "{:?}",
        v.iter().map(best).collect::<Vec<_>>()
    );

    // A threshold just over the best face's score: that face (at least) is looked at
    // again, gains views and is marked; the faces far under it are not.
    let near = MatchPolicy::Threshold(top * 1.05);
    let mut v = faces.clone();
    let d = decide::decide(&m, &img, &mut v, subjects, near).unwrap();
    assert!(d.looked_again >= 1);
    for (before, after) in faces.iter().zip(&v) {
        let close = best(before) >= top * 1.05 * decide::LOOK_AGAIN_AT;
        assert_eq!(after.looked_again, close, "best {}", best(before));
        if close {
            assert!(
                after.views.len() > before.views.len(),
                "second looks add views"
            );
        } else {
            assert_eq!(after.views.len(), before.views.len());
        }
    }
    // Decided again, nothing is looked at twice.
    let again = decide::decide(&m, &img, &mut v, subjects, near).unwrap();
    assert_eq!(again.looked_again, 0);
}

#[test]
fn a_row_written_before_faces_were_searched_without_second_looks_had_them() {
    let old: tessera_core::photo::Face = serde_json::from_value(serde_json::json!({
        "bbox": {"x": 0.1, "y": 0.1, "w": 0.1, "h": 0.1},
        "landmarks": [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]],
        "score": 0.9,
        "decision": {"decision": "fail_closed"}
    }))
    .unwrap();
    assert!(old.looked_again);
    let mut new = old.clone();
    new.looked_again = false;
    let json = serde_json::to_value(&new).unwrap();
    assert_eq!(json["looked_again"], false);
    let back: tessera_core::photo::Face = serde_json::from_value(json).unwrap();
    assert!(!back.looked_again);
    assert!(
        serde_json::to_value(&old)
            .unwrap()
            .get("looked_again")
            .is_none()
    );
}

/// Through the real pipeline: a project whose threshold (0.99) sits above what the astronaut's
/// faces in the composite score against her portrait, so each of them is a close call at
/// the first processing. Their second looks are stored in a new embeddings object, the one
/// written at detection is deleted with the replaced files, and a re-blur for a second
/// opt-out looks at no face twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_calls_store_their_views_and_leave_no_old_embeddings_behind() {
    let r = support::rig().await;
    let p = r.project(Some(0.99)).await;
    r.enrol(&p, "astronaut", "astronaut.png").await;
    let (photo, event) = r.upload(&p, "composite_pd_1280x896.jpg").await;
    r.ingest(&p, &event).await;
    r.settle().await;
    let first = r.photo(photo).await;
    assert!(first.published_at.is_some());
    let faces = r.faces(&first).await;
    let looked: Vec<_> = faces.iter().filter(|f| f.looked_again).collect();
    assert!(!looked.is_empty(), "some face is a close call at 0.99");
    assert!(
        looked.iter().all(|f| !f.views.is_empty()),
        "their views are stored"
    );
    // Nothing under the photo's prefix but what the row points at: the embeddings object
    // written at detection, before the second looks, is gone.
    let prefix = tessera_core::photo::keys::derived_prefix(p.id, photo);
    assert_eq!(r.objects(&prefix).await, support::derived(&first));
    assert!(first.replaced_keys.is_empty());

    // A second opt-out re-decides from the stored faces: the faces looked at before keep
    // their views, and still nothing is left behind.
    r.enrol(&p, "hopper", "grace_hopper.jpg").await;
    r.settle().await;
    let second = r.photo(photo).await;
    assert!(second.variant_version > first.variant_version);
    assert!(second.published_at.is_some());
    let again = r.faces(&second).await;
    for (a, b) in faces.iter().zip(&again) {
        if a.looked_again {
            assert_eq!(a.views, b.views, "not looked at twice");
        }
    }
    assert_eq!(r.objects(&prefix).await, support::derived(&second));
}
