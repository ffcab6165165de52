//! Flight strips: a survey flown in lines, cut back into its lines from the photos'
//! positions in capture order, and the pairs of photos that follow each other along one.
//!
//! Why: along a strip, consecutive photos overlap the most (a survey's forward overlap,
//! 70–80 %), and they are the pairs a mapper grows a model along. Nearest neighbours by
//! GPS find them too, but also spend their budget on the next strip over, and a GPS fix
//! that wanders puts a photo's true neighbour outside its nearest few. OpenDroneMap
//! (OpenSfM's `matching_order_neighbors` beside `matching_gps_neighbors`) matches both
//! for the same reason. Pairs across a turn are left out: the photos either side of a
//! turn look at different ground, or at the same ground from opposite headings.
//!
//! Capture order is name order: cameras number their photos as they take them, and the
//! ingest reads no capture time. Invariant: the same names and positions give the same
//! strips and pairs, whatever order they are given in.

/// A step longer than this many times the median step starts a new strip: the drone
/// flew elsewhere between two photos (a turn with the camera off, a second flight).
const GAP_STEPS: f64 = 3.0;

/// A step turning more than this many degrees from the strip's heading so far starts a
/// new strip. Survey lines are straight, and a fix's noise of a few metres against a
/// step of tens of metres moves one step's direction by well under this.
const TURN_DEG: f64 = 35.0;

/// The strips of `photos` (name, east and north in metres): each in capture order, and
/// every photo in exactly one.
pub fn strips(photos: &[(String, [f64; 2])]) -> Vec<Vec<String>> {
    let mut ordered: Vec<&(String, [f64; 2])> = photos.iter().collect();
    ordered.sort_by(|a, b| a.0.cmp(&b.0));
    let step = |a: [f64; 2], b: [f64; 2]| [b[0] - a[0], b[1] - a[1]];
    let length = |d: [f64; 2]| d[0].hypot(d[1]);
    let mut lengths: Vec<f64> = ordered
        .windows(2)
        .map(|w| length(step(w[0].1, w[1].1)))
        .filter(|l| *l > 0.0)
        .collect();
    lengths.sort_by(f64::total_cmp);
    let median = lengths.get(lengths.len() / 2).copied().unwrap_or(0.0);
    let mut out: Vec<Vec<String>> = Vec::new();
    // Where the current strip starts, to take its heading from.
    let mut start = [0.0; 2];
    for (i, (name, at)) in ordered.iter().map(|p| (&p.0, p.1)).enumerate() {
        let breaks = i == 0 || {
            let prev = ordered[i - 1].1;
            let d = step(prev, at);
            let heading = step(start, prev);
            let gap = length(d) > GAP_STEPS * median;
            // A heading is judged once the strip is two steps long: one step's
            // direction carries the noise of two fixes.
            let turned = length(heading) >= 2.0 * median && length(d) > 0.0 && {
                let cos = (heading[0] * d[0] + heading[1] * d[1]) / (length(heading) * length(d));
                cos.clamp(-1.0, 1.0).acos().to_degrees() > TURN_DEG
            };
            gap || turned
        };
        if breaks {
            out.push(Vec::new());
            start = at;
        }
        if let Some(strip) = out.last_mut() {
            strip.push(name.clone());
        }
    }
    out
}

/// Each photo with the next `overlap` photos of its own strip.
pub fn pairs(strips: &[Vec<String>], overlap: usize) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for strip in strips {
        for (i, a) in strip.iter().enumerate() {
            for b in strip.iter().skip(i + 1).take(overlap) {
                out.push((a.clone(), b.clone()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lawnmower survey: `lines` strips of `per_line` photos `step` m apart, flown
    /// east then west, `spacing` m between lines, numbered in flight order.
    fn lawnmower(
        lines: usize,
        per_line: usize,
        step: f64,
        spacing: f64,
    ) -> Vec<(String, [f64; 2])> {
        let mut out = Vec::new();
        for l in 0..lines {
            for k in 0..per_line {
                let along = if l % 2 == 0 { k } else { per_line - 1 - k } as f64 * step;
                let n = out.len();
                out.push((
                    format!("IMG_{:04}.JPG", 500 + n),
                    [along, l as f64 * spacing],
                ));
            }
        }
        out
    }

    #[test]
    fn a_lawnmower_survey_is_cut_at_its_turns() {
        let photos = lawnmower(4, 10, 30.0, 60.0);
        let strips = strips(&photos);
        assert_eq!(strips.len(), 4, "{strips:?}");
        assert!(strips.iter().all(|s| s.len() == 10), "{strips:?}");
        assert_eq!(strips[1][0], "IMG_0510.JPG");
    }

    #[test]
    fn pairs_follow_the_strip_and_never_cross_a_turn() {
        let photos = lawnmower(3, 6, 30.0, 60.0);
        let pairs = pairs(&strips(&photos), 2);
        // Per strip of 6: 5 + 4 pairs.
        assert_eq!(pairs.len(), 3 * 9);
        assert!(pairs.contains(&("IMG_0500.JPG".into(), "IMG_0502.JPG".into())));
        // The last of one line and the first of the next are 60 m apart, but across a turn.
        assert!(!pairs.contains(&("IMG_0505.JPG".into(), "IMG_0506.JPG".into())));
    }

    #[test]
    fn gps_noise_does_not_cut_a_straight_line_and_input_order_does_not_matter() {
        // A fix wandering ±4 m across a line of 25 m steps.
        let mut photos: Vec<(String, [f64; 2])> = (0..12)
            .map(|k| {
                let wobble = if k % 2 == 0 { 4.0 } else { -4.0 };
                (format!("DJI_{k:04}.JPG"), [k as f64 * 25.0, wobble])
            })
            .collect();
        assert_eq!(strips(&photos).len(), 1, "{:?}", strips(&photos));
        photos.reverse();
        assert_eq!(strips(&photos)[0][0], "DJI_0000.JPG");
    }

    #[test]
    fn a_jump_starts_a_new_strip_even_on_the_same_heading() {
        // Two flights over the same line, the second starting 2 km on.
        let photos: Vec<(String, [f64; 2])> = (0..10)
            .map(|k| {
                let east = if k < 5 {
                    k as f64 * 30.0
                } else {
                    2000.0 + k as f64 * 30.0
                };
                (format!("P{k:02}.jpg"), [east, 0.0])
            })
            .collect();
        assert_eq!(strips(&photos).len(), 2);
    }

    #[test]
    fn photos_at_one_spot_stay_in_their_strip() {
        let photos: Vec<(String, [f64; 2])> = [0.0, 30.0, 30.0, 60.0, 90.0]
            .iter()
            .enumerate()
            .map(|(k, e)| (format!("b{k}.jpg"), [*e, 0.0]))
            .collect();
        assert_eq!(strips(&photos).len(), 1);
        assert!(strips(&[]).is_empty());
        assert!(pairs(&strips(&photos[..1]), 4).is_empty());
    }
}
