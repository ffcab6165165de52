//! SFace embeddings: 128 numbers per face, unit length, compared by cosine similarity.

use crate::align;
use crate::error::{FaceError, inference};
use image::RgbImage;
use ort::session::Session;
use ort::value::Tensor;
use tessera_core::privacy::normalized;

/// Length of an embedding.
pub const DIM: usize = 128;

/// Embed the face whose landmarks are given (in `img`'s pixels).
pub(crate) fn run(
    session: &mut Session,
    img: &RgbImage,
    landmarks: &[[f32; 2]; 5],
) -> Result<Vec<f32>, FaceError> {
    let face = align::crop(img, landmarks);
    let s = align::SIZE as usize;
    let plane = s * s;
    // RGB, 0..255: the model normalises internally.
    let mut data = vec![0f32; 3 * plane];
    for (x, y, p) in face.enumerate_pixels() {
        let i = y as usize * s + x as usize;
        for c in 0..3 {
            data[c * plane + i] = p.0[c] as f32;
        }
    }
    let input = Tensor::from_array(([1usize, 3, s, s], data)).map_err(|e| inference("sface", e))?;
    let outputs = session
        .run(ort::inputs![input])
        .map_err(|e| inference("sface", e))?;
    let (_, v) = outputs[0]
        .try_extract_tensor::<f32>()
        .map_err(|e| inference("sface", e))?;
    if v.len() != DIM {
        return Err(inference(
            "sface",
            format!("returned {} numbers, expected {DIM}", v.len()),
        ));
    }
    Ok(normalized(v))
}
