//! A photo's face embeddings, kept in an object the photo's row points at.
//!
//! Every face carries its embedding and up to a few more views (other detector passes),
//! 128 numbers each. Inline in the row as JSON that is about 1.3 KB a view: a group
//! photo of some seventy faces passes DynamoDB's 400 KB item limit, and its row could
//! never be written. So the row keeps each face's box, landmarks, score and decision
//! (a few hundred bytes), and the embeddings go to one immutable object, named by the
//! hash of its content under the photo's derived prefix: written once per detection,
//! read by every re-decision, deleted with the photo.
//!
//! The format is little-endian and versioned: `TFE1`, the face count (u32), then per
//! face the view count (u32, the primary embedding first), the dimension (u32) and the
//! `f32` values. f32 keeps every decision exactly what it was inline.

use crate::ids::{PhotoId, ProjectId};
use crate::photo::Face;
use sha2::{Digest, Sha256};

const MAGIC: &[u8; 4] = b"TFE1";
/// Most views one face may carry in the object (the search makes at most a handful).
const MAX_VIEWS: u32 = 64;
/// Most numbers one embedding may have.
const MAX_DIM: u32 = 4096;

/// Why an embeddings object could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("face embeddings object: {0}")]
pub struct Malformed(String);

/// The object's bytes for `faces` (their embeddings and views, in face order).
pub fn pack(faces: &[Face]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + faces.len() * (8 + 128 * 4));
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(faces.len() as u32).to_le_bytes());
    for f in faces {
        let views: Vec<&Vec<f32>> = std::iter::once(&f.embedding).chain(&f.views).collect();
        let dim = f.embedding.len() as u32;
        out.extend_from_slice(&(views.len() as u32).to_le_bytes());
        out.extend_from_slice(&dim.to_le_bytes());
        for v in views {
            // Every view of one face has the embedder's dimension; pad or cut so the
            // object's layout is fixed (a mismatch is a bug upstream, never silent data).
            for i in 0..dim as usize {
                out.extend_from_slice(&v.get(i).copied().unwrap_or(0.0).to_le_bytes());
            }
        }
    }
    out
}

/// Fill `faces`' embeddings and views from an object made by [`pack`] for them.
pub fn unpack(bytes: &[u8], faces: &mut [Face]) -> Result<(), Malformed> {
    let mut r = Reader { bytes, at: 0 };
    if r.take(4)? != MAGIC {
        return Err(Malformed("not a TFE1 object".into()));
    }
    let n = r.u32()? as usize;
    if n != faces.len() {
        return Err(Malformed(format!(
            "holds {n} faces, the row {}",
            faces.len()
        )));
    }
    for f in faces.iter_mut() {
        let views = r.u32()?;
        let dim = r.u32()?;
        if views == 0 || views > MAX_VIEWS || dim == 0 || dim > MAX_DIM {
            return Err(Malformed(format!("{views} views of {dim} numbers")));
        }
        let mut all = Vec::with_capacity(views as usize);
        for _ in 0..views {
            let raw = r.take(dim as usize * 4)?;
            all.push(
                raw.chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect::<Vec<f32>>(),
            );
        }
        if all.iter().flatten().any(|x| !x.is_finite()) {
            return Err(Malformed(
                "an embedding holds a value that is not finite".into(),
            ));
        }
        f.embedding = all.remove(0);
        f.views = all;
    }
    if r.at != bytes.len() {
        return Err(Malformed(format!(
            "{} bytes after the last face",
            bytes.len() - r.at
        )));
    }
    Ok(())
}

/// `faces` as the row keeps them: everything but the embeddings.
pub fn stripped(faces: &[Face]) -> Vec<Face> {
    faces
        .iter()
        .map(|f| Face {
            embedding: Vec::new(),
            views: Vec::new(),
            ..f.clone()
        })
        .collect()
}

/// The object key for packed `bytes` of a photo: immutable, named by content.
pub fn key(project: ProjectId, photo: PhotoId, bytes: &[u8]) -> String {
    let sha = hex::encode(Sha256::digest(bytes));
    format!(
        "{}faces/{}.tfe",
        crate::photo::keys::derived_prefix(project, photo),
        &sha[..32]
    )
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        let end = self
            .at
            .checked_add(n)
            .filter(|e| *e <= self.bytes.len())
            .ok_or_else(|| Malformed(format!("truncated at byte {}", self.at)))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u32(&mut self) -> Result<u32, Malformed> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::FracRect;
    use crate::privacy::FaceDecision;

    fn face(i: usize, views: usize) -> Face {
        let v = |k: usize| {
            (0..128)
                .map(|j| ((i * 31 + j * 7 + k) % 97) as f32 / 97.0)
                .collect()
        };
        Face {
            bbox: FracRect {
                x: 0.1,
                y: 0.2,
                w: 0.01,
                h: 0.02,
            },
            landmarks: [[0.1, 0.2]; 5],
            score: 0.9,
            embedding: v(0),
            views: (1..=views).map(v).collect(),
            looked_again: true,
            hard_to_recognise: i.is_multiple_of(2),
            evidence: None,
            rule: None,
            decision: FaceDecision::FailClosed,
            cluster: None,
            ruling: None,
        }
    }

    #[test]
    fn embeddings_round_trip_exactly() {
        let faces: Vec<Face> = (0..7).map(|i| face(i, i % 5)).collect();
        let bytes = pack(&faces);
        let mut back = stripped(&faces);
        assert!(back.iter().all(|f| f.embedding.is_empty()));
        unpack(&bytes, &mut back).unwrap();
        assert_eq!(back, faces);
        let k = key(ProjectId::new(), PhotoId::new(), &bytes);
        assert!(k.starts_with("photos/") && k.ends_with(".tfe"), "{k}");
    }

    #[test]
    fn damaged_objects_are_refused() {
        let faces: Vec<Face> = (0..3).map(|i| face(i, 2)).collect();
        let bytes = pack(&faces);
        let mut back = stripped(&faces);
        for cut in [0, 3, 8, 100, bytes.len() - 1] {
            assert!(unpack(&bytes[..cut], &mut back).is_err(), "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(unpack(&longer, &mut back).is_err());
        assert!(
            unpack(&bytes, &mut back[..2]).is_err(),
            "face count differs"
        );
        let mut huge = bytes.clone();
        huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(unpack(&huge, &mut back).is_err(), "a hostile view count");
        let mut nan = bytes.clone();
        nan[16..20].copy_from_slice(&f32::NAN.to_le_bytes());
        assert!(
            unpack(&nan, &mut back).is_err(),
            "a value that is not finite"
        );
        let mut empty = bytes.clone();
        empty[12..16].copy_from_slice(&0u32.to_le_bytes());
        assert!(unpack(&empty, &mut back).is_err(), "a dimension of 0");
    }

    #[test]
    fn a_150_face_row_stays_far_below_the_item_limit() {
        let faces: Vec<Face> = (0..150).map(|i| face(i, 4)).collect();
        let inline = serde_json::to_vec(&faces).unwrap().len();
        let row = serde_json::to_vec(&stripped(&faces)).unwrap().len();
        eprintln!("150 faces, 5 views each: inline {inline} bytes, stripped {row} bytes");
        assert!(inline > 400_000, "inline: {inline} bytes");
        assert!(row < 100_000, "stripped: {row} bytes");
    }
}
