//! `tessera blur` on photos as phones save them, in a new shell (no environment
//! variables: ONNX Runtime and the models are found where `scripts/setup` installed
//! them): sideways pixels with EXIF orientation 6 and 8, an untagged quarter turn, and
//! HEIC. Every opted-out face is blurred in pixels of the upright public file, the
//! bystander is not, and the file carries no orientation tag.

mod pixels;

use image::RgbImage;
use pixels::{diff_in, load};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use tessera_core::geometry::FracRect;
use tessera_imaging::{Orientation, encode, metadata, orient};
use tessera_tests::{repo_root, stderr, tessera_bin};

fn faces_dir() -> PathBuf {
    repo_root().join("../shared/testdata/faces")
}

/// `upright` stored as a phone stores it for orientation `o`, with the tag written.
fn tagged(upright: &RgbImage, o: u8) -> Vec<u8> {
    let o = Orientation::from_exif(o as u32);
    let stored = orient::stored_for(upright, o);
    let tiff = metadata::orientation_exif(o);
    encode::jpeg(&stored, None, Some(&tiff)).unwrap()
}

fn heic(upright: &RgbImage) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("in.jpg"), dir.path().join("out.heic"));
    std::fs::write(&src, encode::jpeg(upright, None, None).unwrap()).unwrap();
    let out = Command::new("heif-enc")
        .args(["-q", "90"])
        .arg(&src)
        .arg("-o")
        .arg(&dst)
        .output()
        .expect("heif-enc (libheif-examples; scripts/setup installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read(dst).unwrap()
}

#[test]
fn phone_shaped_photos_are_blurred_where_a_viewer_sees_the_faces() {
    let composite = load(&faces_dir().join("composite_pd_1280x896.jpg"));
    let turned = image::imageops::rotate90(&composite);
    let input = tempfile::tempdir().unwrap();
    // name → (bytes, the upright picture a viewer shows)
    let photos: Vec<(&str, Vec<u8>, RgbImage)> = vec![
        (
            "portrait-exif6.jpg",
            tagged(&composite, 6),
            composite.clone(),
        ),
        (
            "portrait-exif8.jpg",
            tagged(&composite, 8),
            composite.clone(),
        ),
        (
            "upside-down-exif3.jpg",
            tagged(&composite, 3),
            composite.clone(),
        ),
        (
            "sideways-untagged.jpg",
            encode::jpeg(&turned, None, None).unwrap(),
            turned.clone(),
        ),
        ("IMG_0001.HEIC", heic(&composite), composite.clone()),
    ];
    for (name, bytes, _) in &photos {
        std::fs::write(input.path().join(name), bytes).unwrap();
    }
    let refs = tempfile::tempdir().unwrap();
    for (label, file) in [
        ("astronaut", "astronaut.png"),
        ("hopper", "grace_hopper.jpg"),
    ] {
        std::fs::create_dir_all(refs.path().join(label)).unwrap();
        std::fs::copy(faces_dir().join(file), refs.path().join(label).join(file)).unwrap();
    }
    let out = tempfile::tempdir().unwrap();
    // A new shell: none of scripts/env.sh's variables.
    let o = Command::new(tessera_bin())
        .args(["blur", input.path().to_str().unwrap(), "--out"])
        .arg(out.path())
        .args([
            "--opted-out",
            refs.path().to_str().unwrap(),
            "--threshold",
            "0.363",
            "--json",
        ])
        .env_remove("ORT_DYLIB_PATH")
        .env_remove("TESSERA_MODELS")
        .env_remove("TESSERA_FAULT")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let m: Value =
        serde_json::from_slice(&std::fs::read(out.path().join("manifest.json")).unwrap()).unwrap();
    for (name, _, shown) in &photos {
        let p = m["photos"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["file"] == *name)
            .unwrap_or_else(|| panic!("{name} not in the manifest"));
        assert_eq!(p["published"], true, "{name}: {p}");
        assert_eq!(
            (p["width"].as_u64(), p["height"].as_u64()),
            (Some(shown.width() as u64), Some(shown.height() as u64)),
            "{name}: sizes are as displayed"
        );
        let faces = p["faces"].as_array().unwrap();
        let count = |d: &str| faces.iter().filter(|f| f["decision"] == d).count();
        // Seven opted-out faces; the cameraman (and, in a turned photo, at most one
        // spurious low-score box, left alone) are not opted out.
        assert_eq!(count("opted_out"), 7, "{name}: {faces:?}");
        assert!(
            (1..=2).contains(&count("not_opted_out")),
            "{name}: {faces:?}"
        );
        let public = p["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["variant"] == "public")
            .unwrap();
        let path = out.path().join(public["file"].as_str().unwrap());
        let bytes = std::fs::read(&path).unwrap();
        let tags: Vec<exif::Tag> = exif::Reader::new()
            .read_from_container(&mut std::io::Cursor::new(&bytes))
            .map(|e| e.fields().map(|f| f.tag).collect())
            .unwrap_or_default();
        assert!(!tags.contains(&exif::Tag::Orientation), "{name}: {tags:?}");
        // Upright: the public file has the displayed picture's size, and in every face
        // box (fractions of the displayed image) the opted-out are blurred and the
        // bystander is not.
        let img = load(&path);
        assert_eq!(img.dimensions(), shown.dimensions(), "{name}");
        for f in faces {
            let b: FracRect = serde_json::from_value(f["bbox"].clone()).unwrap();
            let d = diff_in(&img, shown, &b);
            if f["decision"] == "opted_out" {
                assert!(
                    d > 12.0,
                    "{name}: opted-out face {b:?} not blurred ({d:.1})"
                );
            } else {
                assert!(d < 8.0, "{name}: bystander {b:?} changed ({d:.1})");
            }
        }
    }
}
