//! How a cluster's vectors are stored.

/// A unit vector as one signed byte a number (× 127), in hex: a head, which every face's
/// search for its cluster reads, stays a few hundred bytes, and a similarity to it moves
/// by under 0.01.
pub(super) mod hex_i8 {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(v: &[f32], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::i8_hex(v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f32>, D::Error> {
        let text = String::deserialize(d)?;
        super::from_i8_hex(&text).map_err(D::Error::custom)
    }
}

fn i8_hex(v: &[f32]) -> String {
    let bytes: Vec<u8> = v
        .iter()
        .map(|x| (x * 127.0).round().clamp(-127.0, 127.0) as i8 as u8)
        .collect();
    hex::encode(bytes)
}

fn from_i8_hex(text: &str) -> Result<Vec<f32>, hex::FromHexError> {
    let bytes = hex::decode(text)?;
    let v: Vec<f32> = bytes.iter().map(|b| f32::from(*b as i8) / 127.0).collect();
    Ok(crate::privacy::normalized(&v))
}

/// A representative view's embedding: `i8:` and its unit vector as [`hex_i8`] writes it.
/// A cluster keeps up to [`super::MAX_REPS`] of them, and every change to its views
/// rewrites them all, each write billed per KB: at four bytes a number they made a
/// full cluster 26 KB (52 write units a transactional write), and the one cluster of a
/// person in every photo of a burst passed a third of a partition's write limit in the
/// load rehearsal. At one byte a number (8 KB a full cluster) a similarity moves by
/// under 0.01, far inside the margins the standing rules keep from the threshold.
/// Views stored before as little-endian `f32` in hex (no prefix) are still read.
pub(super) mod rep_vector {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    const PREFIX: &str = "i8:";

    pub fn serialize<S: Serializer>(v: &[f32], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{PREFIX}{}", super::i8_hex(v)))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f32>, D::Error> {
        let text = String::deserialize(d)?;
        match text.strip_prefix(PREFIX) {
            Some(hex) => super::from_i8_hex(hex).map_err(D::Error::custom),
            None => super::from_f32_hex(&text).map_err(D::Error::custom),
        }
    }
}

/// Little-endian `f32` in hex, as representative views were stored before [`rep_vector`].
fn from_f32_hex(text: &str) -> Result<Vec<f32>, String> {
    let bytes = hex::decode(text).map_err(|e| e.to_string())?;
    if bytes.len() % 4 != 0 {
        return Err("an embedding of a length not a multiple of 4 bytes".into());
    }
    let v: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    if v.iter().any(|x| !x.is_finite()) {
        return Err("an embedding with a number that is not finite".into());
    }
    Ok(v)
}
