//! Opting out is durable: enrol someone on a project of many photos while the process
//! that enrols and the workers that re-blur are SIGKILLed at random moments; after a
//! restart every photo ends decided at the new subjects, the new subject blurred.
//!
//! CI runs a scaled-down version (120 photos, a few kills); `TESSERA_FULL_KILL=1` runs
//! 600 photos and 12 worker kills.

use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tessera_tests::{json, repo_root, stderr, tessera, tessera_bin};

fn spawn(state: &Path, args: &[&str]) -> Child {
    Command::new(tessera_bin())
        .arg("--state")
        .arg(state)
        .args(args)
        .env_remove("TESSERA_STATE")
        .env_remove("TESSERA_FAULT")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn tessera")
}

/// A worker whose log goes to `<state>/../worker-logs/`, for a failure to be read.
fn worker(state: &Path) -> Child {
    let logs = state.parent().unwrap().join("worker-logs");
    std::fs::create_dir_all(&logs).unwrap();
    let log = std::fs::File::create(logs.join(format!("{}.log", fastrand::u64(..)))).unwrap();
    Command::new(tessera_bin())
        .arg("--state")
        .arg(state)
        .args([
            "worker",
            "--concurrency",
            "2",
            "--lease-ms",
            "1500",
            "--reap-every-ms",
            "300",
        ])
        .env_remove("TESSERA_STATE")
        .env_remove("TESSERA_FAULT")
        .env("TESSERA_LOG", "info")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn tessera worker")
}

/// Worker processes killed when dropped, so a failing assertion leaves none running
/// (they would poll the queue and burn CPU under every later test).
struct Workers(Vec<Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        for w in &mut self.0 {
            let _ = w.kill();
            let _ = w.wait();
        }
    }
}

/// Every job of the state directory, page by page.
fn all_jobs(state: &Path) -> Vec<Value> {
    let mut out = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut args = vec!["--json", "jobs", "list", "--limit", "1000"];
        if let Some(a) = &after {
            args.extend(["--after", a.as_str()]);
        }
        let page = json(&tessera(state, &args));
        out.extend(page["jobs"].as_array().cloned().unwrap_or_default());
        match page["next"].as_str() {
            Some(n) => after = Some(n.to_string()),
            None => return out,
        }
    }
}

/// The photos not decided at the project's subjects, with every job that names them:
/// what a failure of this test needs to be read.
fn stuck(state: &Path) -> String {
    let rev = show(state)["subjects_rev"].clone();
    let list = json(&tessera(
        state,
        &["--json", "photos", "list", "--project", "kill"],
    ));
    let jobs = all_jobs(state);
    let mut out = String::new();
    let logs = state.parent().unwrap().join("worker-logs");
    for entry in std::fs::read_dir(&logs).into_iter().flatten().flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        out += &format!(
            "== {} (last 15 of {} lines)\n",
            entry.path().display(),
            lines.len()
        );
        for l in &lines[lines.len().saturating_sub(15)..] {
            out += l;
            out += "\n";
        }
    }
    // A queue that grows instead of draining shows here (it did once: 138,000 messages).
    if let Ok(db) = rusqlite::Connection::open(state.join("queue.db")) {
        let counts: Vec<(String, i64)> = db
            .prepare("SELECT queue, COUNT(*) FROM messages GROUP BY queue")
            .and_then(|mut s| {
                s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<Result<_, _>>()
            })
            .unwrap_or_default();
        out += &format!("queue messages by queue: {counts:?}\n");
    }
    for p in list.as_array().unwrap() {
        if p["subjects_rev"] == rev {
            continue;
        }
        let id = p["id"].as_str().unwrap_or_default();
        out += &format!(
            "photo {id}: subjects_rev {} published_at {}\n",
            p["subjects_rev"], p["published_at"]
        );
        for j in &jobs {
            if j["label"].as_str().is_some_and(|l| l.contains(id)) {
                let shown = tessera(state, &["jobs", "show", j["id"].as_str().unwrap()]);
                out += &format!("  {j}\n{}\n", String::from_utf8_lossy(&shown.stdout));
            }
        }
    }
    out
}

fn show(state: &Path) -> Value {
    let o = tessera(state, &["--json", "projects", "show", "kill"]);
    assert!(o.status.success(), "{}", stderr(&o));
    json(&o)
}

/// Detail (mean absolute horizontal difference, green) inside a box of fractions.
fn detail(img: &image::RgbImage, b: &Value) -> f64 {
    let (w, h) = (img.width() as f64, img.height() as f64);
    let f = |k: &str| b[k].as_f64().unwrap();
    let (x1, y1) = ((f("x") * w) as u32, (f("y") * h) as u32);
    let (x2, y2) = (
        ((f("x") + f("w")) * w) as u32,
        ((f("y") + f("h")) * h) as u32,
    );
    let (mut sum, mut n) = (0f64, 0f64);
    for y in y1..y2.min(img.height()) {
        for x in x1..x2.saturating_sub(1).min(img.width() - 1) {
            sum += (img.get_pixel(x + 1, y)[1] as f64 - img.get_pixel(x, y)[1] as f64).abs();
            n += 1.0;
        }
    }
    sum / n.max(1.0)
}

#[test]
fn an_enrolment_survives_sigkill_of_the_enrolling_process_and_of_workers() {
    let full = std::env::var_os("TESSERA_FULL_KILL").is_some();
    let (photos, kills) = if full { (600, 12) } else { (120, 4) };
    let mut rng = kill_rng(7);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let hopper = repo_root().join("../shared/testdata/faces/grace_hopper.jpg");
    let input = dir.path().join("photos");
    std::fs::create_dir_all(&input).unwrap();
    for i in 0..photos {
        std::fs::copy(&hopper, input.join(format!("p{i:04}.jpg"))).unwrap();
    }
    let o = tessera(
        &state,
        &["projects", "create", "kill", "--threshold", "0.363"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = tessera(
        &state,
        &[
            "photos",
            "add",
            "--project",
            "kill",
            input.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(show(&state)["published"], photos);

    // The enrolling process dies at a random moment: before its commit (then it is run
    // again, as a person would) or after (then its sweep is already stored).
    kill_at_random_until(
        &state,
        &[
            "subjects",
            "add",
            "--project",
            "kill",
            "--label",
            "hopper",
            hopper.to_str().unwrap(),
        ],
        &mut rng,
        || show(&state)["subjects"].as_array().unwrap().len() == 1,
        "enrolment never committed",
    );
    let rev = show(&state)["subjects_rev"].as_u64().unwrap();
    // Until a photo is decided again, the command line calls it what the API does: not
    // published (its `published_at` from before the opt-out is still set).
    let before: Vec<Value> = listed(&state)
        .into_iter()
        .filter(|p| p["subjects_rev"].as_u64() < Some(rev))
        .collect();
    for p in &before {
        assert!(p["status"].is_string(), "{p}");
        assert_ne!(p["status"], "published", "{p}");
    }

    kill_workers_until_settled(&state, photos, kills, &mut rng, full);

    let list = json(&tessera(
        &state,
        &["--json", "photos", "list", "--project", "kill"],
    ));
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), photos);
    for p in list {
        assert_eq!(p["subjects_rev"], rev, "{p}");
        assert!(!p["published_at"].is_null(), "{p}");
        assert_eq!(p["status"], "published", "{p}");
        let faces = p["faces"]
            .as_array()
            .unwrap_or_else(|| panic!("not detected: {p}"));
        assert_eq!(faces.len(), 1, "{p}");
        assert_eq!(faces[0]["decision"]["decision"], "subject", "{p}");
    }
    // In pixels, on a few: the public file hides her face.
    let upload = image::open(&hopper).unwrap().to_rgb8();
    for p in list.iter().step_by(photos / 5) {
        let public = p["renditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["variant"].is_null())
            .unwrap();
        let file = state.join("objects").join(public["key"].as_str().unwrap());
        let img = image::open(&file).unwrap().to_rgb8();
        let b = &p["faces"][0]["bbox"];
        assert!(
            detail(&img, b) < detail(&upload, b) / 3.0,
            "{}",
            file.display()
        );
    }
}

/// Run `tessera args` and SIGKILL it after a random 0.2–2.5 s, again and again until
/// `done()` (what it does has been committed), for at most two minutes.
fn kill_at_random_until(
    state: &Path,
    args: &[&str],
    rng: &mut fastrand::Rng,
    done: impl Fn() -> bool,
    never: &str,
) {
    let started = Instant::now();
    loop {
        let mut child = spawn(state, args);
        std::thread::sleep(Duration::from_millis(rng.u64(200..2500)));
        let _ = child.kill();
        let _ = child.wait();
        if done() {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "{never}");
    }
}

/// Run two workers, SIGKILL one at random `kills` times while the sweep and the re-blurs
/// run, and wait until every one of `photos` photos is published at the project's
/// current subjects.
///
/// A crash counts as a try and photo tasks get three (the attempt policy table): a photo
/// whose re-blur was in flight at three kills ends unpublished, never shown with its old
/// decision. The operator's remedy is to put the dead jobs back in line (`tessera jobs
/// resume`), which this does when the photos stop moving. (A task whose re-offer died with
/// the worker that released its lease waits for the reaper's lost-message pass, a minute
/// later; nothing is needed for it.)
fn kill_workers_until_settled(
    state: &Path,
    photos: usize,
    kills: usize,
    rng: &mut fastrand::Rng,
    full: bool,
) {
    let mut workers = Workers(vec![worker(state), worker(state)]);
    for _ in 0..kills {
        std::thread::sleep(Duration::from_millis(rng.u64(300..1500)));
        let i = rng.usize(..workers.0.len());
        let _ = workers.0[i].kill();
        let _ = workers.0[i].wait();
        workers.0[i] = worker(state);
    }
    let deadline = Instant::now() + Duration::from_secs(if full { 1800 } else { 400 });
    let (mut last, mut since, mut remedies) = (Value::Null, Instant::now(), 0);
    loop {
        let s = show(state);
        if s["photos_not_current"] == 0 && s["published"] == photos {
            break;
        }
        if Instant::now() >= deadline {
            panic!("not settled: {s}\n{}", stuck(state));
        }
        let moving = (&s["photos_not_current"], &s["published"]);
        if moving != (&last["photos_not_current"], &last["published"]) {
            (last, since) = (s, Instant::now());
        } else if since.elapsed() > Duration::from_secs(20) {
            for j in all_jobs(state) {
                if j["status"] == "failed" {
                    let id = j["id"].as_str().unwrap();
                    eprintln!("resuming {} {id}: {j}", j["kind"]);
                    remedies += 1;
                    let o = tessera(state, &["jobs", "resume", id]);
                    assert!(o.status.success(), "{}", stderr(&o));
                }
            }
            since = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!("settled after resuming {remedies} dead job(s)");
}

/// The kills' random source: `TESSERA_KILL_SEED` replays a failing run.
fn kill_rng(default_seed: u64) -> fastrand::Rng {
    fastrand::Rng::with_seed(
        std::env::var("TESSERA_KILL_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default_seed),
    )
}

fn faces_dir() -> std::path::PathBuf {
    repo_root().join("../shared/testdata/faces")
}

/// The models the product runs (the ones `tessera` finds in ../shared/models).
fn product_models() -> tessera_faces::FaceModels {
    tessera_faces::FaceModels::load(
        &tessera_faces::OnnxRuntime::from_env().expect("ORT_DYLIB_PATH (scripts/env.sh)"),
        &tessera_faces::ModelFiles::in_dir(repo_root().join("../shared/models")),
        tessera_faces::DetectorKind::Yunet,
        1,
    )
    .expect("face models (scripts/setup installs them)")
}

fn portrait_of(
    models: &tessera_faces::FaceModels,
    file: &str,
) -> tessera_jobs::photos::scenes::Portrait {
    let pixels = image::open(faces_dir().join(file)).unwrap().to_rgb8();
    tessera_jobs::photos::trial::portrait(models, pixels, false).unwrap()
}

fn background() -> image::RgbImage {
    image::open(faces_dir().join("negatives/coffee.png"))
        .unwrap()
        .to_rgb8()
}

/// `tessera … photos list --project kill`, as JSON rows.
fn listed(state: &Path) -> Vec<Value> {
    json(&tessera(
        state,
        &["--json", "photos", "list", "--project", "kill"],
    ))
    .as_array()
    .cloned()
    .unwrap()
}

/// Run `args` to success.
fn run_ok(state: &Path, args: &[&str]) {
    let o = tessera(state, args);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
}

/// The project `kill` at `threshold`, with `subject` (label, reference photo) opted out
/// and the photos of `photos` added.
fn create_project(state: &Path, threshold: f32, subject: (&str, &Path), photos: &Path) {
    let threshold = format!("{threshold}");
    let (label, reference) = subject;
    run_ok(
        state,
        &["projects", "create", "kill", "--threshold", &threshold],
    );
    run_ok(
        state,
        &[
            "subjects",
            "add",
            "--project",
            "kill",
            "--label",
            label,
            reference.to_str().unwrap(),
        ],
    );
    run_ok(
        state,
        &[
            "photos",
            "add",
            "--project",
            "kill",
            photos.to_str().unwrap(),
        ],
    );
}

/// A person's hard views, shown on their own, are blurred once a clear photo of them
/// arrives: the re-decision their cluster calls for is committed with the clear photo's
/// join, and survives SIGKILL of the process that adds it and of the workers that run
/// the sweep. (The same rules, with the release of a bystander's borderline view and an
/// admin's opt-out of a cluster, in `common/jobs/tests/clusters.rs`.)
#[test]
fn a_cluster_pulling_hard_views_to_blurred_survives_sigkill() {
    use tessera_jobs::photos::trial;
    let full = std::env::var_os("TESSERA_FULL_KILL").is_some();
    let (hard_count, kills) = if full { (120, 12) } else { (16, 3) };
    let mut rng = kill_rng(11);
    let models = product_models();
    let reference = faces_dir().join("grace_hopper.jpg");
    let hopper = portrait_of(&models, "grace_hopper.jpg");
    let background = background();
    // Out of focus: each alone is shown at the threshold chosen below.
    let hard: Vec<Vec<u8>> = (0..hard_count as u64)
        .map(|i| trial::photo(&hopper, &background, 1, 64, 2.0, 100 + i))
        .collect();
    let clear = trial::photo(&hopper, &background, 1, 150, 0.0, 20);
    let bytes = std::fs::read(&reference).unwrap();
    let e = tessera_jobs::photos::project::reference_embedding(&models, "grace_hopper.jpg", &bytes)
        .unwrap();
    let subject = tessera_core::privacy::SubjectEmbeddings {
        subject: tessera_core::SubjectId::new(),
        embeddings: vec![e],
    };
    let hard_m: Vec<trial::Measured> = hard
        .iter()
        .map(|h| trial::measure(&models, h).unwrap())
        .collect();
    let clear_m = trial::measure(&models, &clear).unwrap();
    let t = trial::threshold_where(|t| {
        hard_m.iter().all(|m| {
            let d = trial::decided(m, &subject, t);
            d.len() == 1 && !d[0].decision.blurred_in(None)
        }) && {
            let d = trial::decided(&clear_m, &subject, t);
            d.len() == 1 && d[0].decision.blurred_in(None)
        }
    })
    .expect("a threshold where every hard view alone is shown and the clear one blurred");

    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let (hard_dir, clear_dir) = (dir.path().join("hard"), dir.path().join("clear"));
    std::fs::create_dir_all(&hard_dir).unwrap();
    std::fs::create_dir_all(&clear_dir).unwrap();
    for (i, h) in hard.iter().enumerate() {
        std::fs::write(hard_dir.join(format!("h{i:03}.jpg")), h).unwrap();
    }
    std::fs::write(clear_dir.join("clear.jpg"), &clear).unwrap();
    create_project(&state, t, ("hopper", reference.as_path()), &hard_dir);
    for p in listed(&state) {
        assert_eq!(
            p["faces"][0]["decision"]["decision"], "not_opted_out",
            "alone, a hard view is shown: {p}"
        );
    }

    // The process adding the clear photo dies at a random moment: before its upload (then
    // it is run again) or after (then ingest, the join and its re-decision are stored work).
    kill_at_random_until(
        &state,
        &[
            "photos",
            "add",
            "--project",
            "kill",
            clear_dir.to_str().unwrap(),
        ],
        &mut rng,
        || listed(&state).len() > hard_count,
        "the clear photo was never added",
    );
    let total = listed(&state).len();
    kill_workers_until_settled(&state, total, kills, &mut rng, full);

    let rev = show(&state)["subjects_rev"].clone();
    for p in listed(&state) {
        assert_eq!(p["subjects_rev"], rev, "{p}");
        let f = &p["faces"][0];
        assert_eq!(f["decision"]["decision"], "subject", "{p}");
        if p["file_name"].as_str().is_some_and(|n| n.starts_with('h')) {
            assert_eq!(f["ruling"]["ruling"]["kind"], "pulled", "{p}");
        }
    }
}

/// A bystander's view that matched the opted-out cameraman only under a threshold lowered
/// for its size is shown once twenty clear views of the same bystander, matching nobody,
/// arrive: their cluster's release re-decides the project, and survives SIGKILL of the
/// workers that ingest the clear photos, join their faces and run the sweep.
#[test]
fn a_cluster_releasing_a_borderline_view_survives_sigkill() {
    use tessera_jobs::photos::trial;
    let full = std::env::var_os("TESSERA_FULL_KILL").is_some();
    let kills = if full { 12 } else { 3 };
    let mut rng = kill_rng(13);
    let models = product_models();
    let background = background();
    let camera = trial::photo(
        &portrait_of(&models, "camera.png"),
        &background,
        1,
        150,
        0.0,
        20,
    );
    let hopper = portrait_of(&models, "grace_hopper.jpg");
    let small = trial::photo(&hopper, &background, 1, 31, 0.0, 1);
    // Twenty clear views in five photos of four.
    let crowd: Vec<Vec<u8>> = (0..5)
        .map(|i| trial::photo(&hopper, &background, 4, 130, 0.0, 40 + i))
        .collect();
    // The cameraman as `subjects add` enrols him.
    let cameraman = tessera_core::privacy::SubjectEmbeddings {
        subject: tessera_core::SubjectId::new(),
        embeddings: vec![
            tessera_jobs::photos::project::reference_embedding(&models, "camera.jpg", &camera)
                .unwrap(),
        ],
    };
    let small_m = trial::measure(&models, &small).unwrap();
    let crowd_m: Vec<trial::Measured> = crowd
        .iter()
        .map(|c| trial::measure(&models, c).unwrap())
        .collect();
    let t = trial::threshold_where(|t| {
        let clear: Vec<f32> = crowd_m
            .iter()
            .flat_map(|m| trial::decided(m, &cameraman, t))
            .filter(tessera_core::clusters::is_clear)
            .filter_map(|f| f.similarity_to(&cameraman))
            .collect();
        let mut sorted = clear.clone();
        sorted.sort_by(f32::total_cmp);
        let s = trial::decided(&small_m, &cameraman, t);
        clear.len() >= tessera_core::clusters::RELEASE_AFTER
            && clear.iter().all(|x| *x < t)
            && s.len() == 1
            && s[0].decision.blurred_in(None)
            && s[0].similarity_to(&cameraman).is_some_and(|x| x < t)
            && s[0]
                .rule
                .is_some_and(|r| r.threshold > sorted[sorted.len() / 2])
    })
    .expect("a threshold where the small view alone leans to the cameraman and the clear views match nobody");

    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let (camera_file, small_dir, crowd_dir) = (
        dir.path().join("camera.jpg"),
        dir.path().join("small"),
        dir.path().join("crowd"),
    );
    std::fs::write(&camera_file, &camera).unwrap();
    std::fs::create_dir_all(&small_dir).unwrap();
    std::fs::create_dir_all(&crowd_dir).unwrap();
    std::fs::write(small_dir.join("small.jpg"), &small).unwrap();
    for (i, c) in crowd.iter().enumerate() {
        std::fs::write(crowd_dir.join(format!("c{i}.jpg")), c).unwrap();
    }
    create_project(&state, t, ("cameraman", camera_file.as_path()), &small_dir);
    let alone = listed(&state);
    assert_ne!(
        alone[0]["faces"][0]["decision"]["decision"], "not_opted_out",
        "alone, the borderline view leans to the cameraman: {alone:?}"
    );

    // The clear photos are queued, and the workers that ingest them, join their faces
    // and run the release's sweep are killed at random.
    run_ok(
        &state,
        &[
            "photos",
            "add",
            "--submit-only",
            "--project",
            "kill",
            crowd_dir.to_str().unwrap(),
        ],
    );
    kill_workers_until_settled(&state, 1 + crowd.len(), kills, &mut rng, full);

    let rev = show(&state)["subjects_rev"].clone();
    let photos = listed(&state);
    assert_eq!(photos.len(), 1 + crowd.len());
    for p in &photos {
        assert_eq!(p["subjects_rev"], rev, "{p}");
        for f in p["faces"].as_array().unwrap() {
            assert_eq!(f["decision"]["decision"], "not_opted_out", "{p}");
        }
    }
    let small_row = photos
        .iter()
        .find(|p| p["file_name"] == "small.jpg")
        .unwrap();
    assert_eq!(
        small_row["faces"][0]["ruling"]["ruling"]["kind"], "released",
        "{small_row}"
    );
}
