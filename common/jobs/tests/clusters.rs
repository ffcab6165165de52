//! The same person across a project's photos, end to end on the real models and the
//! embedded adapters: a person opted out from one photo is blurred in the project's hard
//! views of them once a clear photo of them arrives; clear views of a bystander that
//! match nobody release their view that matched only under a lowered threshold; a
//! cluster can be opted out directly; erasing photos takes their faces out of the
//! clusters.
//!
//! The photos are made from the shared public-domain portraits ([`trial::photo`]). The
//! threshold each test uses is chosen from the same search and decision the pipeline runs,
//! on the same photos, so that each face alone is decided the way the test needs (the
//! hard view leaks on its own; the borderline view is blurred on its own); the pipeline
//! then has to change that decision through the cluster.

mod support;

use support::{Rig, detail, models, rig, shared};
use tessera_core::clusters::{self as rules, JOIN_AT, Ruling};
use tessera_core::photo::Face;
use tessera_core::privacy::SubjectEmbeddings;
use tessera_core::{PhotoId, SubjectId};
use tessera_jobs::photos::scenes::Portrait;
use tessera_jobs::photos::trial::{self, Measured, decided, threshold_where};
use tessera_jobs::photos::{clusters, project};

fn portrait(file: &str) -> Portrait {
    let pixels = image::open(shared().join("testdata/faces").join(file))
        .unwrap()
        .to_rgb8();
    trial::portrait(&models(), pixels, false).unwrap()
}

fn background() -> image::RgbImage {
    image::open(shared().join("testdata/faces/negatives/coffee.png"))
        .unwrap()
        .to_rgb8()
}

fn photo(who: &Portrait, faces: usize, px: u32, sigma: f32, seed: u64) -> Vec<u8> {
    trial::photo(who, &background(), faces, px, sigma, seed)
}

fn measure(jpeg: &[u8]) -> Measured {
    trial::measure(&models(), jpeg).unwrap()
}

fn embedding_of(file: &str) -> Vec<f32> {
    let p = portrait(file);
    let mut png = Vec::new();
    p.pixels
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .unwrap();
    project::reference_embedding(&models(), file, &png).unwrap()
}

async fn enrol_embedding(
    r: &Rig,
    p: &tessera_core::domain::Project,
    label: &str,
    e: Vec<f32>,
) -> tessera_core::photo::Subject {
    project::enrol_embeddings(
        &r.engine,
        p.id,
        label,
        vec![e],
        vec![format!("{label}.png")],
        &tessera_core::audit::Actor::cli(p.tenant.clone()),
    )
    .await
    .unwrap()
    .0
}

async fn add(r: &Rig, p: &tessera_core::domain::Project, name: &str, jpeg: Vec<u8>) -> PhotoId {
    let (id, event) = r.upload_bytes(p, name, jpeg).await;
    r.ingest(p, &event).await;
    id
}

async fn public_face_detail(r: &Rig, id: PhotoId) -> f64 {
    let row = r.photo(id).await;
    let public = row.public().expect("a public file").key.clone();
    let img = r.image(&public).await;
    let f = &r.faces(&row).await[0];
    detail(&img, &f.bbox)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_opted_out_from_one_photo_is_blurred_in_their_hard_views() {
    // She opted out with a clear portrait; the project shows her clear, and once out of
    // focus.
    let reference = embedding_of("grace_hopper.jpg");
    let subject = SubjectEmbeddings {
        subject: SubjectId::new(),
        embeddings: vec![reference.clone()],
    };
    let hopper = portrait("grace_hopper.jpg");
    let hard = photo(&hopper, 1, 64, 2.0, 7);
    let clear: Vec<Vec<u8>> = (0..2)
        .map(|i| photo(&hopper, 1, 150, 0.0, 20 + i))
        .collect();
    let hard_m = measure(&hard);
    let clear_m: Vec<Measured> = clear.iter().map(|c| measure(c)).collect();
    let t = threshold_where(|t| {
        let h = decided(&hard_m, &subject, t);
        h.len() == 1
            && !h[0].decision.blurred_in(None)
            && clear_m.iter().all(|c| {
                let f = decided(c, &subject, t);
                f.len() == 1 && f[0].decision.blurred_in(None) && rules::is_clear(&f[0])
            })
    })
    .expect("a threshold where the hard view alone is shown and the clear ones blurred");
    // The hard view resembles the clear ones enough to join them.
    let joins =
        tessera_core::privacy::cosine(&hard_m.plain[0].embedding, &clear_m[0].plain[0].embedding);
    assert!(joins >= JOIN_AT, "hard to clear {joins}");

    let r = rig().await;
    let p = r.project(Some(t)).await;
    enrol_embedding(&r, &p, "hopper", reference).await;
    r.settle().await;
    let hard_id = add(&r, &p, "hard.jpg", hard).await;
    r.settle().await;
    let alone = r.faces(&r.photo(hard_id).await).await;
    assert!(
        !alone[0].decision.blurred_in(None),
        "alone, the hard view is shown (the leak clusters close): {:?}",
        alone[0].decision
    );
    let shown_detail = public_face_detail(&r, hard_id).await;

    for (i, c) in clear.into_iter().enumerate() {
        add(&r, &p, &format!("clear{i}.jpg"), c).await;
    }
    r.settle().await;
    let row = r.photo(hard_id).await;
    let now = r.faces(&row).await;
    assert!(now[0].decision.blurred_in(None), "{:?}", now[0].decision);
    assert!(
        matches!(now[0].ruling, Some(Ruling::Pulled { .. })),
        "{:?}",
        now[0].ruling
    );
    let cur = project::load(r.store(), p.id).await.unwrap();
    assert!(
        row.servable(cur.subjects_rev),
        "decided again and published: {row:?} at {}\n{}",
        cur.subjects_rev,
        r.story(hard_id).await
    );
    let blurred_detail = public_face_detail(&r, hard_id).await;
    assert!(
        blurred_detail < shown_detail * 0.5,
        "the published face is blurred: detail {blurred_detail:.2} from {shown_detail:.2}"
    );

    // One cluster holds all three photos, and the listing says who it is.
    let (listed, _) = clusters::list(r.store(), &cur, 0, 50).await.unwrap();
    let her = listed
        .iter()
        .find(|c| c.photos == 3)
        .unwrap_or_else(|| panic!("{listed:?}"));
    assert_eq!(her.standing, "opted_out");
    assert_eq!(her.subjects[0].1, "hopper");

    // Erasing the clear photos (any key of the tenant may erase a photo) does not take
    // the blur back: the cluster still stands for her, through a re-decision of every
    // photo, and the hard view is published blurred.
    let actor = tessera_core::audit::Actor::cli(p.tenant.clone());
    for photo in project::photos(r.store(), p.id).await.unwrap() {
        if photo.id != hard_id {
            tessera_jobs::photos::erase::erase_photo(&r.engine, &photo, &actor)
                .await
                .unwrap();
        }
    }
    project::reblur_all(&r.engine, p.id).await.unwrap();
    r.settle().await;
    let row = r.photo(hard_id).await;
    let cur = project::load(r.store(), p.id).await.unwrap();
    assert!(
        row.servable(cur.subjects_rev),
        "decided again and published: {row:?} at {}\n{}",
        cur.subjects_rev,
        r.story(hard_id).await
    );
    let after = r.faces(&row).await;
    assert!(
        after[0].decision.blurred_in(None),
        "her hard view stays blurred once her clear photos are erased: {:?}",
        after[0].decision
    );
    assert!(
        matches!(after[0].ruling, Some(Ruling::Pulled { .. })),
        "{:?}",
        after[0].ruling
    );
    assert!(public_face_detail(&r, hard_id).await < shown_detail * 0.5);
    let (listed, _) = clusters::list(r.store(), &cur, 0, 50).await.unwrap();
    assert!(
        listed.iter().any(|c| c.standing == "opted_out"),
        "{listed:?}"
    );

    // Erasing the photos takes their faces out of the clusters, which go with the last.
    for photo in project::photos(r.store(), p.id).await.unwrap() {
        tessera_jobs::photos::erase::erase_photo(&r.engine, &photo, &actor)
            .await
            .unwrap();
    }
    assert!(
        clusters::heads(r.store(), p.id).await.unwrap().is_empty(),
        "no cluster outlives its photos"
    );
}

/// The cameraman opted out (enrolled from a clear photo of him); Grace Hopper, a
/// bystander, appears once small and in `crowd_photos` photos of four clear views each;
/// and a threshold at which her small view alone leans to him (a match only under the
/// threshold lowered for its size) while every clear view matches nobody, by a margin
/// the release needs (their median, over any 24 of them, under the small view's lowered
/// threshold).
struct Bystander {
    cameraman: SubjectEmbeddings,
    small: Vec<u8>,
    crowd: Vec<Vec<u8>>,
    threshold: f32,
}

fn bystander(crowd_photos: u64) -> Bystander {
    let camera = measure(&photo(&portrait("camera.png"), 1, 150, 0.0, 20));
    let cameraman = SubjectEmbeddings {
        subject: SubjectId::new(),
        embeddings: vec![camera.plain[0].embedding.clone()],
    };
    let hopper = portrait("grace_hopper.jpg");
    let small = photo(&hopper, 1, 31, 0.0, 1);
    let small_m = measure(&small);
    let crowd: Vec<Vec<u8>> = (0..crowd_photos)
        .map(|i| photo(&hopper, 4, 130, 0.0, 40 + i))
        .collect();
    let crowd_faces: Vec<Vec<Face>> = crowd
        .iter()
        .map(|c| decided(&measure(c), &cameraman, 0.3))
        .collect();
    assert!(
        crowd_faces
            .iter()
            .all(|f| f.len() == 4 && f.iter().all(rules::is_clear))
    );
    let mut clear_sims: Vec<f32> = crowd_faces
        .iter()
        .flatten()
        .map(|f| f.similarity_to(&cameraman).unwrap())
        .collect();
    clear_sims.sort_by(f32::total_cmp);
    // The median of any 24 of them is at most this.
    let kept = clear_sims.len().min(rules::MAX_REPS);
    let median = clear_sims[kept / 2 + (clear_sims.len() - kept)];
    let threshold = threshold_where(|t| {
        let s = decided(&small_m, &cameraman, t);
        s.len() == 1
            && s[0].decision.blurred_in(None)
            && s[0].similarity_to(&cameraman).unwrap() < t
            && s[0].rule.unwrap().threshold > median
            && clear_sims.iter().all(|x| *x < t)
    })
    .unwrap_or_else(|| {
        panic!(
            "no threshold releases: the small view scores {:?}, clear views {clear_sims:?}",
            small_m.looked[0].similarity_to(&cameraman)
        )
    });
    Bystander {
        cameraman,
        small,
        crowd,
        threshold,
    }
}

fn assert_released(face: &Face) {
    assert!(
        matches!(face.ruling, Some(Ruling::Released { clear_views, .. }) if clear_views >= rules::RELEASE_AFTER),
        "{:?} {:?}",
        face.decision,
        face.ruling
    );
    assert!(!face.decision.blurred_in(None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clear_views_of_a_bystander_that_match_nobody_release_their_borderline_view() {
    // Twenty clear views, in five photos of four, arriving after the small one.
    let b = bystander(5);
    let r = rig().await;
    let p = r.project(Some(b.threshold)).await;
    enrol_embedding(&r, &p, "cameraman", b.cameraman.embeddings[0].clone()).await;
    r.settle().await;
    let small_id = add(&r, &p, "small.jpg", b.small).await;
    r.settle().await;
    let alone = r.faces(&r.photo(small_id).await).await;
    assert!(
        alone[0].decision.blurred_in(None),
        "alone, the borderline view leans to a match: {:?}",
        alone[0].decision
    );
    for (i, c) in b.crowd.into_iter().enumerate() {
        add(&r, &p, &format!("crowd{i}.jpg"), c).await;
    }
    r.settle().await;
    assert_released(&r.faces(&r.photo(small_id).await).await[0]);
    let cur = project::load(r.store(), p.id).await.unwrap();
    let (listed, _) = clusters::list(r.store(), &cur, 0, 50).await.unwrap();
    assert_eq!(listed[0].standing, "nobody", "{listed:?}");
    assert_eq!(listed[0].photos, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_clear_views_are_erased_is_withdrawn_and_its_view_blurred_again() {
    // Twenty-eight clear views, in seven photos of four, before the small one: it joins a
    // cluster whose views are full, and is released at its own decision.
    let b = bystander(7);
    let r = rig().await;
    let p = r.project(Some(b.threshold)).await;
    enrol_embedding(&r, &p, "cameraman", b.cameraman.embeddings[0].clone()).await;
    r.settle().await;
    let mut crowd_ids = Vec::new();
    for (i, c) in b.crowd.into_iter().enumerate() {
        crowd_ids.push(add(&r, &p, &format!("crowd{i}.jpg"), c).await);
    }
    r.settle().await;
    let small_id = add(&r, &p, "small.jpg", b.small).await;
    r.settle().await;
    assert_released(&r.faces(&r.photo(small_id).await).await[0]);

    // Four of the clear photos are erased: twelve clear views are too few to speak for
    // the bystander, the release is withdrawn, and the borderline view is blurred again.
    let actor = tessera_core::audit::Actor::cli(p.tenant.clone());
    let rev = project::load(r.store(), p.id).await.unwrap().subjects_rev;
    for id in &crowd_ids[..4] {
        let photo = r.photo(*id).await;
        tessera_jobs::photos::erase::erase_photo(&r.engine, &photo, &actor)
            .await
            .unwrap();
    }
    r.settle().await;
    assert!(
        project::load(r.store(), p.id).await.unwrap().subjects_rev > rev,
        "the withdrawal re-decides the project"
    );
    let again = r.photo(small_id).await;
    let faces = r.faces(&again).await;
    assert!(
        faces[0].ruling.is_none() && faces[0].decision.blurred_in(None),
        "{:?} {:?}",
        faces[0].decision,
        faces[0].ruling
    );
    assert!(again.published_at.is_some(), "published again, blurred");
    let cur = project::load(r.store(), p.id).await.unwrap();
    let (listed, _) = clusters::list(r.store(), &cur, 0, 50).await.unwrap();
    assert_eq!(listed[0].standing, "unsure", "{listed:?}");
    assert_eq!(listed[0].photos, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_opts_a_cluster_out_and_every_photo_of_its_person_is_blurred() {
    let r = rig().await;
    let p = r.project(Some(0.363)).await;
    // Someone else opted out already: a project nobody opted out of publishes without
    // searching for faces, so it has no clusters yet.
    r.enrol(&p, "hopper", "grace_hopper.jpg").await;
    r.settle().await;
    let astronaut = portrait("astronaut.png");
    let ids = [
        add(&r, &p, "a.jpg", photo(&astronaut, 1, 150, 0.0, 1)).await,
        add(&r, &p, "b.jpg", photo(&astronaut, 2, 120, 0.0, 2)).await,
    ];
    r.settle().await;
    // Shown, and clustered.
    let p = project::load(r.store(), p.id).await.unwrap();
    let (listed, _) = clusters::list(r.store(), &p, 0, 50).await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!((listed[0].photos, listed[0].faces), (2, 3));
    let admin = tessera_core::audit::Actor::cli(p.tenant.clone());
    let (subject, change) = clusters::opt_out(
        &r.engine,
        p.id,
        listed[0].cluster_id,
        "the astronaut",
        &admin,
    )
    .await
    .unwrap();
    assert_eq!(subject.embeddings.len(), 3, "one view a face");
    r.settle().await;
    let cur = project::load(r.store(), p.id).await.unwrap();
    assert_eq!(cur.subjects_rev, change.subjects_rev);
    for id in ids {
        let row = r.photo(id).await;
        assert!(row.servable(cur.subjects_rev));
        for f in r.faces(&row).await {
            assert_eq!(f.decision.shown_to(), Some(subject.id), "{:?}", f.decision);
        }
    }
    let missing = clusters::opt_out(&r.engine, p.id, tessera_core::ClusterId::new(), "x", &admin)
        .await
        .unwrap_err();
    assert!(missing.to_string().contains("list them with"), "{missing}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crowd_joins_its_clusters_in_a_few_transactions_and_once() {
    let r = rig().await;
    let p = r.project(Some(0.363)).await;
    r.enrol(&p, "hopper", "grace_hopper.jpg").await;
    r.settle().await;
    // Three people, seventeen times each, about 70 px: more memberships than one
    // transaction takes.
    let people: Vec<Portrait> = ["grace_hopper.jpg", "astronaut.png", "camera.png"]
        .iter()
        .map(|f| portrait(f))
        .collect();
    let s = tessera_jobs::photos::scenes::make(
        &people,
        &background(),
        &tessera_jobs::photos::scenes::SceneSpec {
            width: 1600,
            height: 1200,
            face_px: 70,
            face_px_max: 70,
            tilt_deg: 0.0,
            people: (0..51).map(|i| i % 3).collect(),
            stored: tessera_jobs::photos::scenes::Stored::Upright,
            seed: 5,
        },
    );
    let id = add(&r, &p, "crowd.jpg", s.jpeg).await;
    r.settle().await;
    let row = r.photo(id).await;
    let faces = r.faces(&row).await;
    assert!(faces.len() >= 45, "{} faces found", faces.len());
    assert!(
        faces.iter().all(|f| f.cluster.is_some()),
        "every face joined"
    );
    let job = r
        .jobs_of_kind(tessera_jobs::photos::kinds::FACE_PROCESS_JOB)
        .await
        .into_iter()
        .find(|j| j.label.contains(&id.to_string()))
        .expect("its face_process job");
    let tasks = r.engine.job_tasks(job.id).await.unwrap();
    let result = tasks
        .iter()
        .find_map(|t| t.result.as_ref().and_then(|v| v.get("clusters").cloned()))
        .expect("the clusters' part of the result");
    assert_eq!(
        result["joined"].as_u64(),
        Some(faces.len() as u64),
        "{result}"
    );
    let transactions = result["transactions"].as_u64().unwrap();
    // Every face counted once, in as many clusters as there are people (or a few more).
    let cur = project::load(r.store(), p.id).await.unwrap();
    let heads = clusters::heads(r.store(), p.id).await.unwrap();
    // A cluster a photo starts takes its body, head and counter shards; its faces take
    // no write of their own.
    let per_started = 2 + tessera_core::records::CLUSTER_COUNT_SHARDS as usize;
    let needed = heads
        .len()
        .div_ceil((clusters::JOIN_WRITES - 4) / per_started) as u64;
    assert!(
        transactions <= needed + 1,
        "{transactions} transactions for {} faces in {} clusters: {result}",
        faces.len(),
        heads.len()
    );
    // One membership record a transaction, not one a face: a crowd's partition takes a
    // few writes, not 2 units a face within a second (issue 23's load rehearsal).
    let records = memberships(&r, id).await;
    assert!(
        records as u64 <= transactions,
        "{records} membership records for {transactions} transactions"
    );
    let counted = faces_counted(&r, p.id).await;
    assert_eq!(counted, faces.len() as u64);
    assert!((3..=6).contains(&heads.len()), "{} clusters", heads.len());
    for h in &heads {
        assert_eq!(clusters::counts(r.store(), h.id).await.unwrap().1, 1);
    }
    assert!(r.photo(id).await.servable(cur.subjects_rev));
    // One person sixty times: more faces than a transaction has writes, in one record.
    let one = tessera_jobs::photos::scenes::make(
        &people[..1],
        &background(),
        &tessera_jobs::photos::scenes::SceneSpec {
            width: 1600,
            height: 1200,
            face_px: 64,
            face_px_max: 64,
            tilt_deg: 0.0,
            people: vec![0; 60],
            stored: tessera_jobs::photos::scenes::Stored::Upright,
            seed: 6,
        },
    );
    let many = add(&r, &p, "one-person.jpg", one.jpeg).await;
    r.settle().await;
    let many_faces = r.faces(&r.photo(many).await).await;
    assert!(
        many_faces.len() > clusters::JOIN_WRITES,
        "{} faces found",
        many_faces.len()
    );
    assert!(many_faces.iter().all(|f| f.cluster.is_some()));
    assert_eq!(memberships(&r, many).await, 1);
    let counted = counted + many_faces.len() as u64;
    assert_eq!(faces_counted(&r, p.id).await, counted);
    let cur = project::load(r.store(), p.id).await.unwrap();
    // Decided again (a second opt-out), the faces join nothing twice.
    r.enrol(&p, "astronaut", "astronaut.png").await;
    r.settle().await;
    assert_eq!(faces_counted(&r, p.id).await, counted);
    assert!(r.photo(id).await.servable(cur.subjects_rev + 1));
    // Erased, the sixty leave their cluster and are uncounted once each, and no record of
    // them is left.
    let photo = r.photo(many).await;
    let actor = tessera_core::audit::Actor::cli(p.tenant.clone());
    tessera_jobs::photos::erase::erase_photo(&r.engine, &photo, &actor)
        .await
        .unwrap();
    assert_eq!(
        faces_counted(&r, p.id).await,
        counted - many_faces.len() as u64
    );
    for h in clusters::heads(r.store(), p.id).await.unwrap() {
        let (c, _) = clusters::load(r.store(), h.id).await.unwrap().unwrap();
        assert!(c.reps.iter().all(|v| v.photo != many), "no view of it kept");
    }
    assert_eq!(memberships(&r, many).await, 0);
}

/// How many records of which clusters its faces joined `photo`'s partition holds.
async fn memberships(r: &Rig, photo: PhotoId) -> usize {
    let mut q = tessera_core::ports::state_store::Query::partition(
        tessera_core::ports::state_store::Index::Table,
        tessera_core::records::photo_key(photo).pk,
        1000,
    );
    q.sk_prefix = Some(tessera_core::records::CLUSTER_MEMBER_PREFIX.into());
    r.store().query(&q).await.unwrap().items.len()
}

/// Faces counted in every cluster of `project`.
async fn faces_counted(r: &Rig, project: tessera_core::ProjectId) -> u64 {
    let mut n = 0;
    for h in clusters::heads(r.store(), project).await.unwrap() {
        n += clusters::counts(r.store(), h.id).await.unwrap().0;
    }
    n
}
