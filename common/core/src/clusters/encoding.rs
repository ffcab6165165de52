//! How a cluster's vectors are stored.

/// A unit vector as one signed byte a number (× 127), in hex: a head, which every face's
/// search for its cluster reads, stays a few hundred bytes, and a similarity to it moves
/// by under 0.01.
pub(super) mod hex_i8 {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(v: &[f32], s: S) -> Result<S::Ok, S::Error> {
        let bytes: Vec<u8> = v
            .iter()
            .map(|x| (x * 127.0).round().clamp(-127.0, 127.0) as i8 as u8)
            .collect();
        s.serialize_str(&hex::encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f32>, D::Error> {
        let text = String::deserialize(d)?;
        let bytes = hex::decode(&text).map_err(D::Error::custom)?;
        let v: Vec<f32> = bytes.iter().map(|b| f32::from(*b as i8) / 127.0).collect();
        Ok(crate::privacy::normalized(&v))
    }
}

pub(super) mod hex_f32 {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(v: &[f32], s: S) -> Result<S::Ok, S::Error> {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        s.serialize_str(&hex::encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f32>, D::Error> {
        let text = String::deserialize(d)?;
        let bytes = hex::decode(&text).map_err(D::Error::custom)?;
        if bytes.len() % 4 != 0 {
            return Err(D::Error::custom(
                "an embedding of a length not a multiple of 4 bytes",
            ));
        }
        let v: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        if v.iter().any(|x| !x.is_finite()) {
            return Err(D::Error::custom(
                "an embedding with a number that is not finite",
            ));
        }
        Ok(v)
    }
}
