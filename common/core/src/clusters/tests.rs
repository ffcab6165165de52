//! The cluster rules on exactly orthogonal embeddings, where each similarity follows
//! from the mixes.

use super::*;
use crate::geometry::FracRect;
use crate::ids::SubjectId;
use crate::privacy::Evidence;
use crate::privacy::{FaceDecision, MatchPolicy, SubjectEmbeddings, cosine, normalized};

/// Exactly orthogonal for distinct seeds (below `dim`), so each similarity in these
/// tests follows from the mixes.
fn unit(seed: u32, dim: usize) -> Vec<f32> {
    let mut v = vec![0.0; dim];
    v[seed as usize % dim] = 1.0;
    v
}

/// `base` moved towards `other` by `t` (0: base, 1: other), unit length.
fn mix(base: &[f32], other: &[f32], t: f32) -> Vec<f32> {
    normalized(
        &base
            .iter()
            .zip(other)
            .map(|(a, b)| a * (1.0 - t) + b * t)
            .collect::<Vec<_>>(),
    )
}

fn face(embedding: Vec<f32>, px: f32, subjects: &[SubjectEmbeddings], t: f32) -> Face {
    let mut f = Face {
        bbox: FracRect {
            x: 0.1,
            y: 0.1,
            w: 0.1,
            h: 0.1,
        },
        landmarks: [[0.0; 2]; 5],
        score: 0.9,
        embedding,
        views: Vec::new(),
        looked_again: true,
        hard_to_recognise: false,
        evidence: Some(Evidence { px, roll: 0.0 }),
        rule: None,
        decision: FaceDecision::FailClosed,
        cluster: None,
        ruling: None,
    };
    f.redecide(subjects, MatchPolicy::Threshold(t));
    f
}

#[test]
fn a_clear_match_pulls_the_hard_views_of_its_person() {
    let person = unit(1, 128);
    let subject = SubjectEmbeddings {
        subject: SubjectId::new(),
        embeddings: vec![mix(&person, &unit(9, 128), 0.6)],
    };
    let subjects = std::slice::from_ref(&subject);
    let t = 0.363;
    let clear = face(mix(&person, &unit(2, 128), 0.1), 150.0, subjects, t);
    assert!(matches!(clear.decision, FaceDecision::Subject { .. }));
    // A hard view: far from the reference, close enough to the person's clear view.
    let mut hard = face(mix(&person, &unit(3, 128), 0.685), 30.0, subjects, t);
    assert!(
        matches!(hard.decision, FaceDecision::NotOptedOut { .. }),
        "{:?}",
        hard.decision
    );
    let mut c = Cluster::new(ProjectId::new(), Millis::now());
    c.admit(PhotoId::new(), 0, &clear, true, false);
    let (i, sim) = nearest(&[c.head()], &hard.embedding).expect("joins");
    assert_eq!(i, 0);
    assert!(sim >= JOIN_AT);
    hard.cluster = Some(c.id);
    let standing = c.standing(subjects, MatchPolicy::Threshold(t));
    assert!(matches!(standing, Standing::Subjects(ref s) if s[0].0 == subject.subject));
    rule(&mut hard, &standing, subjects, MatchPolicy::Threshold(t));
    assert!(hard.decision.blurred_in(None));
    assert_eq!(hard.decision.shown_to(), Some(subject.subject));
    assert!(matches!(hard.ruling, Some(Ruling::Pulled { .. })));
    // Under no threshold, a cluster changes nothing (everything is blurred anyway).
    let mut closed = hard.clone();
    closed.redecide(subjects, MatchPolicy::FailClosed);
    rule(&mut closed, &standing, subjects, MatchPolicy::FailClosed);
    assert_eq!(closed.decision, FaceDecision::FailClosed);
}

/// Erasing the photo that holds a person's clear matching view (any key may erase a
/// photo) must not take back the blur it pulled onto their hard views: the cluster keeps
/// standing for the subject while they are enrolled, and says so with no view left.
#[test]
fn an_erased_clear_view_leaves_its_cluster_standing_for_the_subject() {
    let person = unit(1, 128);
    let subject = SubjectEmbeddings {
        subject: SubjectId::new(),
        embeddings: vec![mix(&person, &unit(9, 128), 0.6)],
    };
    let subjects = std::slice::from_ref(&subject);
    let policy = MatchPolicy::Threshold(0.363);
    let clear = face(mix(&person, &unit(2, 128), 0.1), 150.0, subjects, 0.363);
    let mut hard = face(mix(&person, &unit(3, 128), 0.685), 30.0, subjects, 0.363);
    assert!(!hard.decision.blurred_in(None));
    let (anchor, weak) = (PhotoId::new(), PhotoId::new());
    let mut c = Cluster::new(ProjectId::new(), Millis::now());
    c.admit(anchor, 0, &clear, true, true);
    c.admit(weak, 0, &hard, true, false);
    hard.cluster = Some(c.id);
    let before = c.standing(subjects, policy);
    assert!(matches!(before, Standing::Subjects(_)));

    // What the erasure does: remember, then forget the anchor's views.
    let mut after = c.clone();
    after.remember(&before);
    assert!(!after.forget(anchor, 1), "the cluster still says something");
    assert!(after.reps.iter().all(|r| r.photo != anchor));
    let standing = after.standing(subjects, policy);
    assert!(
        matches!(standing, Standing::Subjects(ref s) if s[0].0 == subject.subject),
        "{standing:?}"
    );
    rule(&mut hard, &standing, subjects, policy);
    assert!(
        hard.decision.blurred_in(None),
        "the hard view stays blurred"
    );
    // Stored and read back, it still stands for her.
    let back: Cluster = serde_json::from_value(serde_json::to_value(&after).unwrap()).unwrap();
    assert_eq!(back.stood_for, after.stood_for);
    // With its last view erased too, it is kept for what it stood for, and stands for it.
    let mut last = back.clone();
    last.remember(&last.standing(subjects, policy));
    assert!(!last.forget(weak, 1));
    assert!(last.reps.is_empty());
    assert!(matches!(
        last.standing(subjects, policy),
        Standing::Subjects(_)
    ));
    // Removing the subject (an admin's act) ends it.
    assert_eq!(after.standing(&[], policy), Standing::Unsure);
    // A cluster that never stood for anyone goes with its last view.
    let mut plain = Cluster::new(ProjectId::new(), Millis::now());
    plain.admit(weak, 0, &hard, true, false);
    plain.remember(&plain.standing(&[], policy));
    assert!(plain.forget(weak, 1));
}

#[test]
fn many_clear_views_of_nobody_release_a_view_matched_only_by_a_lowered_threshold() {
    let bystander = unit(4, 128);
    let subject = SubjectEmbeddings {
        subject: SubjectId::new(),
        embeddings: vec![unit(5, 128)],
    };
    let subjects = std::slice::from_ref(&subject);
    let policy = MatchPolicy::Threshold(0.363);
    let mut c = Cluster::new(ProjectId::new(), Millis::now());
    for i in 0..RELEASE_AFTER as u32 {
        let f = face(
            mix(&bystander, &unit(100 + i, 128), 0.2),
            140.0,
            subjects,
            0.363,
        );
        assert!(!f.decision.blurred_in(None));
        c.admit(PhotoId::new(), 0, &f, true, false);
    }
    // A small view that leans to the subject: between the lowered and the project's
    // threshold.
    let mut small = face(
        mix(&bystander, &subject.embeddings[0], 0.25),
        25.0,
        subjects,
        0.363,
    );
    let sim = small.similarity_to(&subject).unwrap();
    let rule_t = small.rule.unwrap().threshold;
    assert!(sim >= rule_t && sim < 0.363, "{sim} under {rule_t}");
    assert!(small.decision.blurred_in(None));
    assert!(nearest(&[c.head()], &small.embedding).is_some());
    small.cluster = Some(c.id);

    // One clear view short: nothing released.
    let mut short = c.clone();
    short.reps.pop();
    assert_eq!(short.standing(subjects, policy), Standing::Unsure);

    let standing = c.standing(subjects, policy);
    assert!(
        matches!(&standing, Standing::Nobody { clear_views, medians } if *clear_views == RELEASE_AFTER && medians[0].1.abs() < 0.01),
        "{standing:?}"
    );
    let mut released = small.clone();
    rule(&mut released, &standing, subjects, policy);
    assert!(!released.decision.blurred_in(None));
    assert!(matches!(released.ruling, Some(Ruling::Released { .. })));

    // Clear views that score, in the median, above what the weak view was held to
    // (under the threshold still) do not explain its match away: it stays blurred.
    let near = Standing::Nobody {
        clear_views: RELEASE_AFTER,
        medians: vec![(subject.subject, rule_t + 0.01)],
    };
    let mut kept = small.clone();
    rule(&mut kept, &near, subjects, policy);
    assert!(kept.decision.blurred_in(None));
    assert_eq!(kept.ruling, None);

    // A face that reaches the project's own threshold is never released.
    let mut sure = face(subject.embeddings[0].clone(), 25.0, subjects, 0.363);
    sure.cluster = Some(c.id);
    rule(&mut sure, &standing, subjects, policy);
    assert!(sure.decision.blurred_in(None));
    assert_eq!(sure.ruling, None);

    // Once a clear view matches the subject, pulling wins.
    let mut pulled = c.clone();
    let m = face(subject.embeddings[0].clone(), 140.0, subjects, 0.363);
    pulled.reps[0] = Rep {
        photo: PhotoId::new(),
        face: 0,
        clear: true,
        matched: true,
        embedding: m.embedding.clone(),
    };
    assert!(matches!(
        pulled.standing(subjects, policy),
        Standing::Subjects(_)
    ));
}

#[test]
fn representatives_prefer_clear_views_and_go_with_their_photo() {
    let person = unit(6, 128);
    let mut c = Cluster::new(ProjectId::new(), Millis::now());
    let small_photo = PhotoId::new();
    for i in 0..MAX_REPS as u32 {
        c.admit(
            small_photo,
            i,
            &face(mix(&person, &unit(200 + i, 128), 0.2), 30.0, &[], 0.363),
            i == 0,
            false,
        );
    }
    assert_eq!(c.clear_reps().count(), 0);
    let clear_photo = PhotoId::new();
    c.admit(
        clear_photo,
        0,
        &face(person.clone(), 120.0, &[], 0.363),
        true,
        false,
    );
    assert_eq!(c.reps.len(), MAX_REPS);
    assert_eq!(c.clear_reps().count(), 1);
    assert_eq!((c.faces, c.photos), (MAX_REPS as u64 + 1, 2));
    assert!(!c.forget(small_photo, MAX_REPS as u64));
    assert_eq!(c.reps.len(), 1);
    assert!(c.reps.iter().all(|r| r.photo == clear_photo));
    assert!(c.forget(clear_photo, 1));
    // Full of clear views: another clear one is not kept, unless it matched a
    // subject at the threshold, and that one is never replaced.
    let mut full = Cluster::new(ProjectId::new(), Millis::now());
    for i in 0..MAX_REPS as u32 {
        let f = face(mix(&person, &unit(300 + i, 128), 0.2), 120.0, &[], 0.363);
        full.admit(PhotoId::new(), 0, &f, true, false);
    }
    let late = PhotoId::new();
    full.admit(
        late,
        0,
        &face(person.clone(), 120.0, &[], 0.363),
        true,
        false,
    );
    assert!(full.reps.iter().all(|r| r.photo != late));
    full.admit(
        late,
        1,
        &face(person.clone(), 120.0, &[], 0.363),
        false,
        true,
    );
    assert_eq!(full.reps.iter().filter(|r| r.matched).count(), 1);
    for i in 0..MAX_REPS as u32 {
        let f = face(mix(&person, &unit(400 + i, 128), 0.2), 120.0, &[], 0.363);
        full.admit(PhotoId::new(), 0, &f, true, true);
    }
    assert!(
        full.reps.iter().any(|r| r.photo == late),
        "a matched view stays"
    );
    // Stored a byte a number, read back within 0.01 of itself.
    let mut c = Cluster::new(ProjectId::new(), Millis::now());
    c.admit(
        clear_photo,
        0,
        &face(person.clone(), 120.0, &[], 0.363),
        true,
        false,
    );
    let back: Cluster = serde_json::from_value(serde_json::to_value(&c).unwrap()).unwrap();
    assert_eq!(back.reps.len(), c.reps.len());
    for (b, r) in back.reps.iter().zip(&c.reps) {
        assert_eq!(
            (b.photo, b.face, b.clear, b.matched),
            (r.photo, r.face, r.clear, r.matched)
        );
        assert!(cosine(&b.embedding, &r.embedding) > 0.99);
    }
    assert_eq!(
        (back.id, back.faces, back.clear_views),
        (c.id, c.faces, c.clear_views)
    );
    // The centroid is kept to a byte a number: within 0.01 of itself.
    assert!(cosine(&back.centroid, &c.centroid) > 0.99);
    assert!(serde_json::to_string(&c.head()).unwrap().len() < 1000);
    // A view stored before, as little-endian f32 in hex, is read exactly.
    let mut legacy = serde_json::to_value(&c).unwrap();
    let exact: String = c.reps[0]
        .embedding
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .map(|b| format!("{b:02x}"))
        .collect();
    legacy["reps"][0]["embedding"] = exact.into();
    let old: Cluster = serde_json::from_value(legacy).unwrap();
    assert_eq!(old.reps[0].embedding, c.reps[0].embedding);
    let mut bad = serde_json::to_value(&c).unwrap();
    bad["reps"][0]["embedding"] = "0000807f".into();
    assert!(
        serde_json::from_value::<Cluster>(bad).is_err(),
        "infinity refused"
    );
}

/// A full cluster is rewritten whole on every change to its views, so its size is what
/// each such write costs: it must stay a few KB (it was 26 KB with views as hex `f32`,
/// and the person in every photo of a burst made it a hot item; issue 23).
#[test]
fn a_full_cluster_of_128_number_views_stays_under_9_kb() {
    let person = unit(7, 128);
    let mut c = Cluster::new(ProjectId::new(), Millis::now());
    for i in 0..MAX_REPS as u32 {
        let f = face(mix(&person, &unit(500 + i, 128), 0.2), 120.0, &[], 0.363);
        c.admit(PhotoId::new(), 0, &f, true, false);
    }
    assert_eq!(c.reps.len(), MAX_REPS);
    let bytes = serde_json::to_string(&c).unwrap().len();
    assert!(bytes < 9 * 1024, "a full cluster is {bytes} bytes");
}

#[test]
fn a_new_match_calls_for_redecision_only_when_others_are_in_the_cluster() {
    let s = SubjectId::new();
    let mut c = Cluster::new(ProjectId::new(), Millis::now());
    c.faces = 1;
    let matched = Standing::Subjects(vec![(s, 0.5)]);
    assert!(!c.calls_for_redecision(&Standing::Unsure, &matched, 1));
    c.faces = 3;
    assert!(c.calls_for_redecision(&Standing::Unsure, &matched, 1));
    assert!(!c.calls_for_redecision(&matched, &matched, 1));
    let nobody = Standing::Nobody {
        clear_views: 20,
        medians: Vec::new(),
    };
    assert!(
        !c.calls_for_redecision(&Standing::Unsure, &nobody, 1),
        "nothing leans"
    );
    c.leaning = 1;
    assert!(c.calls_for_redecision(&Standing::Unsure, &nobody, 1));
    assert!(!c.calls_for_redecision(&nobody, &nobody, 1));
}

#[test]
fn a_release_is_withdrawn_when_the_cluster_stops_saying_nobody_or_a_median_rises() {
    let s = SubjectId::new();
    let mut c = Cluster::new(ProjectId::new(), Millis::now());
    c.faces = 3;
    let nobody = |m: f32| Standing::Nobody {
        clear_views: 20,
        medians: vec![(s, m)],
    };
    assert!(
        !c.withdraws_release(&nobody(0.2), &Standing::Unsure),
        "no member leaned: nothing was released"
    );
    c.leaning = 1;
    assert!(c.withdraws_release(&nobody(0.2), &Standing::Unsure));
    assert!(c.withdraws_release(&nobody(0.2), &nobody(0.25)));
    assert!(!c.withdraws_release(&nobody(0.2), &nobody(0.15)));
    assert!(!c.withdraws_release(&Standing::Unsure, &Standing::Unsure));
    assert!(
        c.withdraws_release(
            &nobody(0.2),
            &Standing::Nobody {
                clear_views: 20,
                medians: vec![(s, 0.2), (SubjectId::new(), 0.1)],
            }
        ),
        "a subject the old standing did not weigh"
    );
    // A join that raises the median re-decides; one that lowers it does not.
    assert!(c.calls_for_redecision(&nobody(0.2), &nobody(0.3), 1));
    assert!(!c.calls_for_redecision(&nobody(0.2), &nobody(0.1), 1));
}
