//! The photo privacy pipeline through the real `tessera` binary, the real ONNX Runtime
//! (ORT_DYLIB_PATH) and the real models in ../shared/models, on ../shared/testdata/faces.

mod pixels;

use image::RgbImage;
use pixels::{diff_in, load};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use tessera_core::geometry::FracRect;
use tessera_faces::{DetectorKind, FaceModels, ModelFiles, OnnxRuntime};
use tessera_tests::{json, repo_root, stderr, tessera_bin};

fn shared() -> PathBuf {
    repo_root().join("../shared")
}

fn faces_dir() -> PathBuf {
    shared().join("testdata/faces")
}

fn run(args: &[&str], extra_env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(tessera_bin());
    c.args(args)
        .env("TESSERA_MODELS", shared().join("models"))
        .env_remove("TESSERA_STATE")
        .env_remove("TESSERA_FAULT");
    for (k, v) in extra_env {
        c.env(k, v);
    }
    c.output().expect("run tessera")
}

fn with_state(state: &Path, args: &[&str]) -> Output {
    let mut all = vec!["--state", state.to_str().unwrap()];
    all.extend_from_slice(args);
    run(&all, &[])
}

/// A folder holding copies of some test photos.
fn folder_of(names: &[&str]) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for n in names {
        std::fs::copy(
            faces_dir().join(n),
            d.path().join(Path::new(n).file_name().unwrap()),
        )
        .unwrap();
    }
    d
}

/// One sub-folder per person, with their reference photo.
fn references(people: &[(&str, &str)]) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for (label, photo) in people {
        std::fs::create_dir_all(d.path().join(label)).unwrap();
        let name = Path::new(photo).file_name().unwrap();
        std::fs::copy(faces_dir().join(photo), d.path().join(label).join(name)).unwrap();
    }
    d
}

fn blur(input: &Path, out: &Path, extra: &[&str]) -> (Output, Value) {
    let mut args = vec![
        "blur",
        input.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--json",
    ];
    args.extend_from_slice(extra);
    let o = run(&args, &[]);
    let manifest: Value = serde_json::from_slice(
        &std::fs::read(out.join("manifest.json"))
            .unwrap_or_else(|e| panic!("no manifest ({e}); stderr: {}", stderr(&o))),
    )
    .unwrap();
    (o, manifest)
}

fn photo<'a>(m: &'a Value, file: &str) -> &'a Value {
    m["photos"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["file"] == file)
        .unwrap_or_else(|| panic!("{file} not in manifest"))
}

fn bbox(face: &Value) -> FracRect {
    serde_json::from_value(face["bbox"].clone()).unwrap()
}

fn models() -> FaceModels {
    let rt = OnnxRuntime::from_env().expect("ORT_DYLIB_PATH (scripts/env.sh)");
    FaceModels::load(
        &rt,
        &ModelFiles::in_dir(shared().join("models")),
        DetectorKind::Yunet,
        1,
    )
    .unwrap()
}

#[test]
fn opted_out_people_are_blurred_everywhere_but_in_their_own_file() {
    let input = folder_of(&["composite_pd_1280x896.jpg", "negatives/coffee.png"]);
    let refs = references(&[
        ("astronaut", "astronaut.png"),
        ("hopper", "grace_hopper.jpg"),
    ]);
    let out = tempfile::tempdir().unwrap();
    let (o, m) = blur(
        input.path(),
        out.path(),
        &[
            "--opted-out",
            refs.path().to_str().unwrap(),
            "--threshold",
            "0.363",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));

    let comp = photo(&m, "composite_pd_1280x896.jpg");
    assert_eq!(comp["published"], true);
    let faces = comp["faces"].as_array().unwrap();
    assert_eq!(faces.len(), 8);
    let of = |who: &str| {
        faces
            .iter()
            .filter(|f| f["subject"] == who)
            .collect::<Vec<_>>()
    };
    let (astronauts, hoppers) = (of("astronaut"), of("hopper"));
    assert_eq!((astronauts.len(), hoppers.len()), (4, 3), "{faces:?}");
    let cameraman: Vec<_> = faces
        .iter()
        .filter(|f| f["decision"] == "not_opted_out")
        .collect();
    assert_eq!(cameraman.len(), 1);

    // N = 2 subjects found → 3 files and 3 thumbnails.
    let files = comp["files"].as_array().unwrap();
    assert_eq!(files.len(), 3, "{files:?}");
    let original = load(&faces_dir().join("composite_pd_1280x896.jpg"));
    let file = |variant: &str| {
        let f = files.iter().find(|f| f["variant"] == variant).unwrap();
        let img = load(&out.path().join(f["file"].as_str().unwrap()));
        let thumb = load(&out.path().join(f["thumbnail"].as_str().unwrap()));
        assert!(thumb.width().max(thumb.height()) <= 320);
        img
    };
    let (public, own_a, own_h) = (file("public"), file("astronaut"), file("hopper"));
    let blurred = |img: &RgbImage, f: &Value| diff_in(img, &original, &bbox(f)) > 12.0;
    for f in &astronauts {
        assert!(
            blurred(&public, f) && blurred(&own_h, f) && !blurred(&own_a, f),
            "astronaut {f}"
        );
    }
    for f in &hoppers {
        assert!(
            blurred(&public, f) && blurred(&own_a, f) && !blurred(&own_h, f),
            "hopper {f}"
        );
    }
    for f in &cameraman {
        assert!(!blurred(&public, f) && !blurred(&own_a, f) && !blurred(&own_h, f));
    }

    // Where the public file is blurred, nothing is its person any more. The search may
    // still take a blurred head for a face (enlarged twice, a 26 px one scored 0.73), but
    // what it finds there is not its person to the embedder, at the threshold used.
    let m_ = models();
    let reference = |file: &str| {
        let img = load(&faces_dir().join(file));
        let d = m_.detect(&img).unwrap();
        m_.embed(&img, &d[0].landmarks).unwrap()
    };
    let (astronaut, hopper) = (reference("astronaut.png"), reference("grace_hopper.jpg"));
    let hidden: Vec<(FracRect, &Vec<f32>)> = astronauts
        .iter()
        .map(|f| (bbox(f), &astronaut))
        .chain(hoppers.iter().map(|f| (bbox(f), &hopper)))
        .collect();
    let (w, h) = public.dimensions();
    let found = m_.detect(&public).unwrap();
    let mut shown = Vec::new();
    for d in &found {
        let r = FracRect::from_pixels(d.bbox, w, h);
        match hidden.iter().find(|(b, _)| b.iou(&r) > 0.0) {
            Some((_, person)) => {
                let e = m_.embed(&public, &d.landmarks).unwrap();
                let similarity = tessera_core::privacy::cosine(&e, person);
                assert!(
                    similarity < 0.363,
                    "a blurred face is still its person ({similarity:.2}): {d:?}"
                );
            }
            None => shown.push(d),
        }
    }
    assert_eq!(
        shown.len(),
        1,
        "only the cameraman is still a face: {found:?}"
    );

    // Nothing to blur in the negative: one public file, written by Tessera (never the
    // upload itself), with the same picture.
    let coffee = photo(&m, "coffee.png");
    assert_eq!(coffee["faces"].as_array().unwrap().len(), 0);
    let cf = coffee["files"].as_array().unwrap();
    assert_eq!(cf.len(), 1);
    assert_eq!(cf[0]["unchanged_upload"], false);
    let written = load(&out.path().join(cf[0]["file"].as_str().unwrap()));
    let upload = load(&faces_dir().join("negatives/coffee.png"));
    assert_eq!(written.dimensions(), upload.dimensions());
    let whole = FracRect {
        x: 0.0,
        y: 0.0,
        w: 1.0,
        h: 1.0,
    };
    assert!(
        diff_in(&written, &upload, &whole) < 4.0,
        "the same picture, re-encoded"
    );
}

#[test]
fn without_a_threshold_every_face_is_blurred_and_nobody_matched() {
    let input = folder_of(&["composite_pd_1280x896.jpg", "astronaut.png"]);
    let refs = references(&[("astronaut", "astronaut.png")]);
    let out = tempfile::tempdir().unwrap();
    let (o, m) = blur(
        input.path(),
        out.path(),
        &["--opted-out", refs.path().to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(m["policy"], "fail_closed");
    for name in ["composite_pd_1280x896.jpg", "astronaut.png"] {
        let p = photo(&m, name);
        let faces = p["faces"].as_array().unwrap();
        assert!(!faces.is_empty());
        for f in faces {
            assert_eq!(f["decision"], "fail_closed");
            assert!(f["subject"].is_null() && f["blurred_in_public"] == true);
        }
        // Only the public file: the subject's own file is not made either.
        assert_eq!(p["files"].as_array().unwrap().len(), 1, "{name}");
    }
    let comp = photo(&m, "composite_pd_1280x896.jpg");
    assert_eq!(comp["faces"].as_array().unwrap().len(), 8);
    let public = load(&out.path().join(comp["files"][0]["file"].as_str().unwrap()));
    let original = load(&faces_dir().join("composite_pd_1280x896.jpg"));
    for f in comp["faces"].as_array().unwrap() {
        assert!(diff_in(&public, &original, &bbox(f)) > 12.0, "{f}");
    }
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::write(dir.join(name), bytes).unwrap();
}

fn jpeg_of(w: u32, h: u32) -> Vec<u8> {
    let mut out = Vec::new();
    RgbImage::from_fn(w, h, |x, y| {
        image::Rgb([(x % 256) as u8, (y % 256) as u8, 90])
    })
    .write_to(
        &mut std::io::Cursor::new(&mut out),
        image::ImageFormat::Jpeg,
    )
    .unwrap();
    out
}

/// A PNG that declares `w` × `h` 1-bit pixels and really holds them, compressed to a
/// few kilobytes: a decompression bomb.
fn png_bomb(w: u32, h: u32) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(png::ColorType::Grayscale);
        enc.set_depth(png::BitDepth::One);
        let mut header = enc.write_header().unwrap();
        let mut writer = header.stream_writer().unwrap();
        let row = vec![0u8; w.div_ceil(8) as usize];
        for _ in 0..h {
            std::io::Write::write_all(&mut writer, &row).unwrap();
        }
        writer.finish().unwrap();
    }
    out
}

#[test]
fn hostile_files_each_get_a_clear_recorded_error_and_good_ones_still_publish() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "zero.jpg", &[]);
    write(d.path(), "notes.jpg", b"this is a text file, not a photo\n");
    let mut cut = jpeg_of(300, 200);
    cut.truncate(cut.len() * 2 / 3);
    write(d.path(), "truncated.jpg", &cut);
    let bomb = png_bomb(20_000, 20_000);
    assert!(bomb.len() < 200_000, "the bomb is small: {}", bomb.len());
    write(d.path(), "bomb.png", &bomb);
    let mut huge = Vec::new();
    RgbImage::new(4, 4)
        .write_to(
            &mut std::io::Cursor::new(&mut huge),
            image::ImageFormat::Png,
        )
        .unwrap();
    huge[16..20].copy_from_slice(&60000u32.to_be_bytes());
    huge[20..24].copy_from_slice(&60000u32.to_be_bytes());
    write(d.path(), "header-60000.png", &huge);
    // CMYK JPEG (as print workflows export them).
    let mut cmyk = Vec::new();
    let pixels: Vec<u8> = (0..64 * 48)
        .flat_map(|i| [(i % 200) as u8, 30, 60, 10])
        .collect();
    jpeg_encoder::Encoder::new(&mut cmyk, 90)
        .encode(&pixels, 64, 48, jpeg_encoder::ColorType::Cmyk)
        .unwrap();
    write(d.path(), "cmyk.jpg", &cmyk);
    // 16-bit RGB PNG.
    let mut deep = Vec::new();
    image::ImageBuffer::<image::Rgb<u16>, _>::from_pixel(
        40,
        30,
        image::Rgb([60000u16, 1000, 30000]),
    )
    .write_to(
        &mut std::io::Cursor::new(&mut deep),
        image::ImageFormat::Png,
    )
    .unwrap();
    write(d.path(), "deep.png", &deep);
    // A JPEG whose EXIF block is garbage.
    let plain = jpeg_of(120, 80);
    let mut garbage = plain[..2].to_vec();
    let payload = b"Exif\0\0MM\0\x2a\xff\xff\xff\xffgarbage-garbage-garbage";
    garbage.extend_from_slice(&[0xFF, 0xE1]);
    garbage.extend_from_slice(&((payload.len() + 2) as u16).to_be_bytes());
    garbage.extend_from_slice(payload);
    garbage.extend_from_slice(&plain[2..]);
    write(d.path(), "garbage-exif.jpg", &garbage);

    let out = tempfile::tempdir().unwrap();
    let (o, m) = blur(d.path(), out.path(), &["--threshold", "0.4"]);
    assert!(
        !o.status.success(),
        "some photos were refused, so the run fails"
    );
    for (file, why) in [
        ("zero.jpg", "empty"),
        ("notes.jpg", "not an image"),
        ("truncated.jpg", "truncated"),
        ("bomb.png", "20000x20000"),
        ("header-60000.png", "60000x60000"),
    ] {
        let p = photo(&m, file);
        assert_eq!(p["published"], false, "{file}");
        let e = p["error"].as_str().unwrap_or_default();
        assert!(e.contains(file) && e.contains(why), "{file}: {e}");
        assert!(p["files"].as_array().unwrap().is_empty());
    }
    for file in ["cmyk.jpg", "deep.png", "garbage-exif.jpg"] {
        let p = photo(&m, file);
        assert_eq!(p["published"], true, "{file}: {}", p["error"]);
    }
    // Nothing of a refused photo was stored beyond its upload: no row, no derived file.
    // The list shows the refusals as the API does, failed with their reason.
    let state = out.path().join(".tessera-state");
    let rows = json(&with_state(
        &state,
        &["--json", "photos", "list", "--project", "blur"],
    ));
    let rows = rows.as_array().unwrap();
    let (failed, kept): (Vec<_>, Vec<_>) = rows.iter().partition(|r| r["status"] == "failed");
    assert_eq!(kept.len(), 3, "{rows:#?}");
    assert!(kept.iter().all(|r| r["status"] == "published"), "{rows:#?}");
    assert_eq!(failed.len(), 5, "{rows:#?}");
    for r in &failed {
        let (name, error) = (
            r["file_name"].as_str().unwrap(),
            r["error"].as_str().unwrap(),
        );
        assert!(error.contains(name), "{r}");
    }
    // Read a page at a time, the list is the same.
    let paged = json(&with_state(
        &state,
        &[
            "--json",
            "photos",
            "list",
            "--project",
            "blur",
            "--page-size",
            "2",
        ],
    ));
    let ids = |v: &[serde_json::Value]| -> Vec<String> {
        v.iter()
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids(paged.as_array().unwrap()), ids(rows));
    let unique: std::collections::BTreeSet<_> = ids(rows).into_iter().collect();
    assert_eq!(unique.len(), rows.len());
}

fn objects_under(state: &Path, prefix: &str) -> Vec<String> {
    let root = state.join("objects");
    let mut out = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let k = p
                    .strip_prefix(&root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                if k.starts_with(prefix) {
                    out.push(k);
                }
            }
        }
    }
    out.sort();
    out
}

fn referenced(photo: &Value) -> Vec<String> {
    let mut keys: Vec<String> = photo["renditions"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            [
                r["key"].as_str().unwrap().to_string(),
                r["thumb_key"].as_str().unwrap().to_string(),
            ]
        })
        .filter(|k| k.starts_with("photos/"))
        .collect();
    keys.sort();
    keys
}

#[test]
fn a_crash_between_upload_and_row_update_leaves_nothing_behind() {
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    let ok = |o: Output| {
        assert!(o.status.success(), "{}", stderr(&o));
        o
    };
    ok(with_state(
        s,
        &["projects", "create", "p", "--threshold", "0.363"],
    ));
    ok(with_state(
        s,
        &[
            "subjects",
            "add",
            "--project",
            "p",
            "--label",
            "astronaut",
            faces_dir().join("astronaut.png").to_str().unwrap(),
        ],
    ));
    let added = ok(with_state(
        s,
        &[
            "--json",
            "photos",
            "add",
            "--project",
            "p",
            "--submit-only",
            faces_dir()
                .join("composite_pd_1280x896.jpg")
                .to_str()
                .unwrap(),
        ],
    ));
    let photo_id = json(&added)[0]["photo"].as_str().unwrap().to_string();

    // A worker that aborts right after storing the first variant, before the row
    // points at it.
    let crashed = run(
        &[
            "--state",
            s.to_str().unwrap(),
            "worker",
            "--lease-ms",
            "1500",
            "--reap-every-ms",
            "200",
        ],
        &[("TESSERA_FAULT", "after-variant-upload")],
    );
    assert!(!crashed.status.success(), "the worker was meant to abort");
    let shown = json(&with_state(s, &["--json", "photos", "show", &photo_id]));
    assert!(
        shown["published_at"].is_null(),
        "half-processed photo is published: {shown}"
    );
    assert_eq!(shown["variant_version"], 1);

    // A healthy worker takes over once the lease expires and finishes the job.
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _worker = KillOnDrop(
        Command::new(tessera_bin())
            .args([
                "--state",
                s.to_str().unwrap(),
                "worker",
                "--lease-ms",
                "1500",
                "--reap-every-ms",
                "200",
            ])
            .env("TESSERA_MODELS", shared().join("models"))
            .env_remove("TESSERA_FAULT")
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let done = loop {
        let shown = json(&with_state(s, &["--json", "photos", "show", &photo_id]));
        let jobs = json(&with_state(s, &["--json", "jobs", "list"]));
        let all_done = jobs["jobs"].as_array().unwrap().iter().all(|j| {
            ["succeeded", "failed", "cancelled"].contains(&j["status"].as_str().unwrap_or(""))
        });
        if !shown["published_at"].is_null() && all_done {
            break shown;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not published in time: {shown}"
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
    };

    // A newer version was written; the row points at complete files only; every object
    // under the photo's prefix is one the row points at (the crashed attempt's file was
    // deleted by the run that took over), and the upload is intact.
    assert_eq!(done["variant_version"], 2, "{done}");
    let keys = referenced(&done);
    assert_eq!(
        keys.len(),
        4,
        "public + astronaut, each with a thumbnail: {keys:?}"
    );
    assert!(keys.iter().all(|k| k.contains("/v2/")));
    let project_and_photo = keys[0].split('/').take(3).collect::<Vec<_>>().join("/");
    // …and the faces' embeddings object the row points at.
    let mut all = keys.clone();
    all.extend(done["embeddings_key"].as_str().map(String::from));
    all.sort();
    assert_eq!(all.len(), 5, "{done}");
    assert_eq!(objects_under(s, &format!("{project_and_photo}/")), all);
    assert_eq!(objects_under(s, "uploads/").len(), 1);
}

#[test]
fn setup_and_input_mistakes_are_clear_errors() {
    let input = folder_of(&["grace_hopper.jpg"]);
    let out = tempfile::tempdir().unwrap();
    let args = |extra: &[&str]| {
        let mut a = vec![
            "blur".to_string(),
            input.path().display().to_string(),
            "--out".into(),
            out.path().display().to_string(),
        ];
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let run_args = |a: Vec<String>, env: &[(&str, &str)]| {
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        run(&refs, env)
    };
    // No ONNX Runtime where ORT_DYLIB_PATH points.
    let o = run_args(
        args(&[]),
        &[("ORT_DYLIB_PATH", "/nonexistent/libonnxruntime.so.1.32.0")],
    );
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("ONNX Runtime could not be loaded")
            && e.contains("/nonexistent/libonnxruntime.so.1.32.0")
            && e.contains("setup-onnx"),
        "{e}"
    );
    // A library that is not ONNX Runtime.
    let o = run_args(
        args(&[]),
        &[("ORT_DYLIB_PATH", "/lib/x86_64-linux-gnu/libc.so.6")],
    );
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("ONNX Runtime could not be loaded"),
        "{}",
        stderr(&o)
    );
    // No models where TESSERA_MODELS points.
    let o = run_args(args(&[]), &[("TESSERA_MODELS", "/nonexistent-models")]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("/nonexistent-models/yunet_2023mar_fp32_dynamic.onnx"),
        "{}",
        stderr(&o)
    );
    // A threshold that is not a cosine similarity.
    let o = run_args(args(&["--threshold", "7"]), &[]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("not a cosine similarity"),
        "{}",
        stderr(&o)
    );
    // A reference photo without a face.
    let refs = references(&[("cat", "negatives/chelsea.png")]);
    let o = run_args(
        args(&[
            "--opted-out",
            refs.path().to_str().unwrap(),
            "--threshold",
            "0.4",
        ]),
        &[],
    );
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("chelsea.png") && e.contains("no face"), "{e}");
}

#[test]
fn the_cli_erases_a_photo_and_then_a_whole_project() {
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    let ok = |o: Output| {
        assert!(o.status.success(), "{}", stderr(&o));
        o
    };
    ok(with_state(
        s,
        &["projects", "create", "gone", "--threshold", "0.363"],
    ));
    let mut ids = Vec::new();
    for f in ["composite_pd_1280x896.jpg", "astronaut.png"] {
        let added = ok(with_state(
            s,
            &[
                "--json",
                "photos",
                "add",
                "--project",
                "gone",
                faces_dir().join(f).to_str().unwrap(),
            ],
        ));
        ids.push(json(&added)[0]["photo"].as_str().unwrap().to_string());
    }
    let project =
        json(&ok(with_state(s, &["--json", "projects", "show", "gone"])))["project"]["id"]
            .as_str()
            .unwrap()
            .to_string();
    assert!(!objects_under(s, &format!("photos/{project}/{}", ids[0])).is_empty());
    ok(with_state(s, &["photos", "erase", &ids[0]]));
    assert!(objects_under(s, &format!("photos/{project}/{}", ids[0])).is_empty());
    assert!(objects_under(s, &format!("uploads/{project}/{}", ids[0])).is_empty());
    assert!(!objects_under(s, &format!("photos/{project}/{}", ids[1])).is_empty());
    let shown = with_state(s, &["photos", "show", &ids[0]]);
    assert!(!shown.status.success(), "an erased photo is gone");
    let erased = json(&ok(with_state(s, &["--json", "projects", "erase", "gone"])));
    assert_eq!(erased["photos"], 1, "{erased}");
    assert!(objects_under(s, "photos/").is_empty());
    assert!(objects_under(s, "uploads/").is_empty());
    assert!(
        !with_state(s, &["projects", "show", "gone"])
            .status
            .success()
    );
}

/// The people of a project through the CLI, as an admin reviews them, and what an
/// erasure leaves of a photo's faces in them when its process dies right after the
/// erasure's commit: nothing (its views leave their clusters before the row goes).
#[test]
fn the_cli_lists_and_opts_out_people_and_a_crashed_erasure_leaves_no_view_in_them() {
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    let ok = |o: Output| {
        assert!(o.status.success(), "{}", stderr(&o));
        o
    };
    ok(with_state(
        s,
        &["projects", "create", "people", "--threshold", "0.363"],
    ));
    // Someone opted out already: a project nobody opted out of publishes without
    // searching for faces, and has no clusters.
    ok(with_state(
        s,
        &[
            "subjects",
            "add",
            "--project",
            "people",
            "--label",
            "hopper",
            faces_dir().join("grace_hopper.jpg").to_str().unwrap(),
        ],
    ));
    let mut ids = Vec::new();
    for f in ["camera.png", "astronaut.png"] {
        let added = ok(with_state(
            s,
            &[
                "--json",
                "photos",
                "add",
                "--project",
                "people",
                faces_dir().join(f).to_str().unwrap(),
            ],
        ));
        ids.push(json(&added)[0]["photo"].as_str().unwrap().to_string());
    }
    let people = |s: &Path| -> Vec<Value> {
        json(&ok(with_state(
            s,
            &["--json", "clusters", "list", "--project", "people"],
        )))["clusters"]
            .as_array()
            .cloned()
            .unwrap()
    };
    let in_photo = |all: &[Value], id: &str| -> Vec<Value> {
        all.iter()
            .filter(|c| {
                c["sample_photos"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|p| p == id)
            })
            .cloned()
            .collect()
    };
    let before = people(s);
    assert_eq!(in_photo(&before, &ids[0]).len(), 1, "{before:?}");
    let astronaut = in_photo(&before, &ids[1]);
    assert_eq!(astronaut.len(), 1, "{before:?}");
    assert_eq!(astronaut[0]["photos"], 1);
    assert_eq!(astronaut[0]["standing"], "unsure");

    // The erasing process dies right after the erasure's commit.
    let crashed = run(
        &["--state", s.to_str().unwrap(), "photos", "erase", &ids[0]],
        &[("TESSERA_FAULT", "after-erasure-commit")],
    );
    assert!(!crashed.status.success(), "the injected crash ran");
    assert!(
        !with_state(s, &["photos", "show", &ids[0]]).status.success(),
        "its row is gone"
    );
    let after = people(s);
    assert!(
        in_photo(&after, &ids[0]).is_empty(),
        "no view of the erased photo is kept: {after:?}"
    );
    assert_eq!(after.len(), before.len() - 1, "{after:?}");

    // The astronaut's cluster, opted out from the CLI: her face is now decided hers.
    let cluster = astronaut[0]["cluster_id"].as_str().unwrap();
    ok(with_state(
        s,
        &[
            "clusters",
            "opt-out",
            "--project",
            "people",
            "--label",
            "the astronaut",
            cluster,
        ],
    ));
    let shown = json(&ok(with_state(s, &["--json", "photos", "show", &ids[1]])));
    assert_eq!(
        shown["faces"][0]["decision"]["decision"], "subject",
        "{shown}"
    );
    let now = people(s);
    let hers = in_photo(&now, &ids[1]);
    assert_eq!(hers[0]["standing"], "opted_out", "{now:?}");
    assert_eq!(hers[0]["subjects"][0][1], "the astronaut");
    let unknown = with_state(
        s,
        &[
            "clusters",
            "opt-out",
            "--project",
            "people",
            "--label",
            "x",
            "not-an-id",
        ],
    );
    assert!(!unknown.status.success());
    assert!(
        stderr(&unknown).contains("clusters list"),
        "{}",
        stderr(&unknown)
    );
    // A cluster that is gone (the erased photo's) is named, with where to look.
    let gone = in_photo(&before, &ids[0])[0]["cluster_id"]
        .as_str()
        .unwrap()
        .to_string();
    let o = with_state(
        s,
        &[
            "clusters",
            "opt-out",
            "--project",
            "people",
            "--label",
            "x",
            &gone,
        ],
    );
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains(&gone) && stderr(&o).contains("tessera clusters list"),
        "{}",
        stderr(&o)
    );
}
