use super::*;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_content_range_text_parses_or_is_refused(s in "\\PC{0,60}") {
        if let Ok((a, b, t)) = parse_content_range(&s) {
            prop_assert!(a <= b && b < t);
        }
    }

    #[test]
    fn well_formed_content_ranges_round_trip(a in 0u64..1 << 40, len in 1u64..1 << 24, extra in 0u64..1 << 24) {
        let (b, t) = (a + len - 1, a + len + extra);
        prop_assert_eq!(parse_content_range(&format!("bytes {a}-{b}/{t}")).unwrap(), (a, b, t));
    }

    #[test]
    fn prefixes_are_folders_without_climbing(s in "[a-z./]{0,30}|\\PC{0,40}") {
        if let Ok(p) = super::super::source_grants::normalize_prefix(&s) {
            prop_assert!(p.is_empty() || p.ends_with('/'));
            prop_assert!(!p.split('/').any(|seg| seg == ".." || seg == "."));
        }
        let _ = super::super::source_grants::check_bucket_name(&s);
    }

    #[test]
    fn incoming_keys_never_leave_the_tenants_folder(s in "(incoming/tenant-a/)?[a-zA-Z./\\\\]{0,30}") {
        let t: TenantId = "tenant-a".parse().unwrap();
        if super::super::incoming::check_incoming_key(&t, &s).is_ok() {
            prop_assert!(s.starts_with("incoming/tenant-a/"));
            prop_assert!(!s.split('/').any(|seg| seg == ".." || seg == "." || seg.is_empty()));
        }
    }
}

#[test]
fn content_ranges_parse_strictly() {
    assert_eq!(parse_content_range("bytes 0-9/10").unwrap(), (0, 9, 10));
    for bad in [
        "bytes 5-4/10",
        "bytes 0-10/10",
        "bytes -1-4/10",
        "bytes 0-4/*",
        "bytes +0-4/10",
        "bytes 0-4/10/11",
        "items 0-4/10",
        "bytes 0-99999999999999999999/10",
        "bytes 0 -4/10",
        "",
    ] {
        assert!(parse_content_range(bad).is_err(), "{bad}");
    }
}
