//! COLMAP's binary model format (`cameras.bin`, `images.bin`, `points3D.bin`), little
//! endian. Reading checks every count against the bytes left, so a truncated or hostile
//! file is a clear error, never a huge allocation.

use crate::camera::CameraModel;
use crate::error::ModelError;
use crate::model::{Camera, Image, Observation, Point2D, Point3D, Reconstruction};
use std::path::{Path, PathBuf};

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    path: &'a Path,
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn corrupt(&self, why: impl Into<String>) -> ModelError {
        ModelError::Corrupt {
            path: self.path.to_path_buf(),
            what: self.what,
            why: why.into(),
            at: self.pos,
        }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], ModelError> {
        if self.buf.len() - self.pos < n {
            return Err(self.corrupt(format!(
                "file ends early: needed {n} more bytes, {} left",
                self.buf.len() - self.pos
            )));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, ModelError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, ModelError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn i32(&mut self) -> Result<i32, ModelError> {
        Ok(i32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64, ModelError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn f64(&mut self) -> Result<f64, ModelError> {
        let v = f64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes"));
        if v.is_finite() {
            Ok(v)
        } else {
            Err(self.corrupt("non-finite number"))
        }
    }
    /// A count of records of at least `min_size` bytes each, checked against what is left.
    fn count(&mut self, min_size: usize) -> Result<usize, ModelError> {
        let n = self.u64()?;
        let left = (self.buf.len() - self.pos) as u64;
        if min_size > 0 && n > left / min_size as u64 {
            return Err(self.corrupt(format!("claims {n} records but only {left} bytes follow")));
        }
        Ok(n as usize)
    }
    fn cstring(&mut self) -> Result<String, ModelError> {
        let rest = &self.buf[self.pos..];
        let end = rest
            .iter()
            .position(|b| *b == 0)
            .ok_or_else(|| self.corrupt("unterminated image name"))?;
        let s = std::str::from_utf8(&rest[..end])
            .map_err(|_| self.corrupt("image name is not UTF-8"))?
            .to_string();
        self.pos += end + 1;
        Ok(s)
    }
    fn finish(&self) -> Result<(), ModelError> {
        if self.pos != self.buf.len() {
            return Err(self.corrupt(format!(
                "{} unexpected bytes after the last record",
                self.buf.len() - self.pos
            )));
        }
        Ok(())
    }
}

fn read_file(path: &Path) -> Result<Vec<u8>, ModelError> {
    std::fs::read(path).map_err(|source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Read `cameras.bin`, `images.bin` and `points3D.bin` from `dir` and check that they
/// agree with each other.
pub fn read(dir: &Path) -> Result<Reconstruction, ModelError> {
    let mut rec = Reconstruction::default();
    let path = dir.join("cameras.bin");
    let buf = read_file(&path)?;
    let mut r = Reader {
        buf: &buf,
        pos: 0,
        path: &path,
        what: "cameras.bin",
    };
    for _ in 0..r.count(24)? {
        let id = r.u32()?;
        let model_id = r.i32()?;
        let model = CameraModel::from_id(model_id)
            .ok_or_else(|| r.corrupt(format!("unknown camera model id {model_id}")))?;
        let (width, height) = (r.u64()?, r.u64()?);
        let params = (0..model.num_params())
            .map(|_| r.f64())
            .collect::<Result<_, _>>()?;
        rec.cameras.insert(
            id,
            Camera {
                id,
                model,
                width,
                height,
                params,
            },
        );
    }
    r.finish()?;

    let path = dir.join("images.bin");
    let buf = read_file(&path)?;
    let mut r = Reader {
        buf: &buf,
        pos: 0,
        path: &path,
        what: "images.bin",
    };
    for _ in 0..r.count(4 + 56 + 4 + 1 + 8)? {
        let id = r.u32()?;
        let qvec = [r.f64()?, r.f64()?, r.f64()?, r.f64()?];
        let tvec = [r.f64()?, r.f64()?, r.f64()?];
        let camera_id = r.u32()?;
        let name = r.cstring()?;
        let n = r.count(24)?;
        let mut points2d = Vec::with_capacity(n);
        for _ in 0..n {
            points2d.push(Point2D {
                xy: [r.f64()?, r.f64()?],
                point3d_id: r.u64()?,
            });
        }
        rec.images.insert(
            id,
            Image {
                id,
                qvec,
                tvec,
                camera_id,
                name,
                points2d,
            },
        );
    }
    r.finish()?;

    let path = dir.join("points3D.bin");
    let buf = read_file(&path)?;
    let mut r = Reader {
        buf: &buf,
        pos: 0,
        path: &path,
        what: "points3D.bin",
    };
    for _ in 0..r.count(8 + 24 + 3 + 8 + 8)? {
        let id = r.u64()?;
        let xyz = [r.f64()?, r.f64()?, r.f64()?];
        let rgb = [r.u8()?, r.u8()?, r.u8()?];
        let error = r.f64()?;
        let n = r.count(8)?;
        let mut track = Vec::with_capacity(n);
        for _ in 0..n {
            track.push(Observation {
                image_id: r.u32()?,
                point2d_idx: r.u32()?,
            });
        }
        rec.points.insert(
            id,
            Point3D {
                id,
                xyz,
                rgb,
                error,
                track,
            },
        );
    }
    r.finish()?;
    rec.validate()?;
    Ok(rec)
}

/// Write the three files into `dir` (created if needed). Each file is written to a
/// temporary name and renamed, so a reader never sees half a file.
pub fn write(rec: &Reconstruction, dir: &Path) -> Result<(), ModelError> {
    let io = |path: PathBuf| {
        move |source| ModelError::Io {
            path: path.clone(),
            source,
        }
    };
    std::fs::create_dir_all(dir).map_err(io(dir.to_path_buf()))?;
    let mut b = Vec::new();
    b.extend((rec.cameras.len() as u64).to_le_bytes());
    for c in rec.cameras.values() {
        b.extend(c.id.to_le_bytes());
        b.extend(c.model.id().to_le_bytes());
        b.extend(c.width.to_le_bytes());
        b.extend(c.height.to_le_bytes());
        for p in &c.params {
            b.extend(p.to_le_bytes());
        }
    }
    atomic_write(&dir.join("cameras.bin"), &b)?;

    let mut b = Vec::new();
    b.extend((rec.images.len() as u64).to_le_bytes());
    for i in rec.images.values() {
        b.extend(i.id.to_le_bytes());
        for v in i.qvec.iter().chain(&i.tvec) {
            b.extend(v.to_le_bytes());
        }
        b.extend(i.camera_id.to_le_bytes());
        b.extend(i.name.as_bytes());
        b.push(0);
        b.extend((i.points2d.len() as u64).to_le_bytes());
        for p in &i.points2d {
            b.extend(p.xy[0].to_le_bytes());
            b.extend(p.xy[1].to_le_bytes());
            b.extend(p.point3d_id.to_le_bytes());
        }
    }
    atomic_write(&dir.join("images.bin"), &b)?;

    let mut b = Vec::new();
    b.extend((rec.points.len() as u64).to_le_bytes());
    for p in rec.points.values() {
        b.extend(p.id.to_le_bytes());
        for v in &p.xyz {
            b.extend(v.to_le_bytes());
        }
        b.extend(p.rgb);
        b.extend(p.error.to_le_bytes());
        b.extend((p.track.len() as u64).to_le_bytes());
        for o in &p.track {
            b.extend(o.image_id.to_le_bytes());
            b.extend(o.point2d_idx.to_le_bytes());
        }
    }
    atomic_write(&dir.join("points3D.bin"), &b)
}

/// Write `bytes` to `path` through a temporary file in the same folder.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<(), ModelError> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let r = (|| {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    r.map_err(|source| {
        let _ = std::fs::remove_file(&tmp);
        ModelError::Io {
            path: path.to_path_buf(),
            source,
        }
    })
}
