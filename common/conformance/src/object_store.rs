//! The object-store rules.

use super::*;
async fn collect(s: tessera_core::ports::object_store::ObjectStream) -> Vec<u8> {
    use futures_util::TryStreamExt;
    s.body
        .try_fold(Vec::new(), |mut v, c| async move {
            v.extend_from_slice(&c);
            Ok(v)
        })
        .await
        .unwrap()
}

/// Every object-store rule.
pub async fn object_store(store: Arc<dyn ObjectStore>) {
    let p = format!("conf/{}", ulid_like());
    let k = format!("{p}/a/b.bin");
    assert!(matches!(
        store.get(&k).await,
        Err(ObjectStoreError::NotFound(_))
    ));
    assert!(store.head(&k).await.unwrap().is_none());
    let m1 = store
        .put(&k, Bytes::from_static(b"hello world"))
        .await
        .unwrap();
    assert_eq!(m1.size, 11);
    assert_eq!(
        store.get(&k).await.unwrap(),
        Bytes::from_static(b"hello world")
    );
    assert_eq!(
        store.get_range(&k, 6..11).await.unwrap(),
        Bytes::from_static(b"world")
    );
    assert!(matches!(
        store.get_range(&k, 6..12).await,
        Err(ObjectStoreError::BadRange { .. })
    ));
    assert_eq!(
        store.get_at_most(&k, 11).await.unwrap(),
        Bytes::from_static(b"hello world"),
        "an object of exactly the bound is read"
    );
    assert!(matches!(
        store.get_at_most(&k, 10).await,
        Err(ObjectStoreError::TooLarge {
            size: 11,
            max: 10,
            ..
        })
    ));
    assert!(matches!(
        store.get_at_most(&format!("{p}/missing"), 10).await,
        Err(ObjectStoreError::NotFound(_))
    ));
    store
        .put(&format!("{p}/empty"), Bytes::new())
        .await
        .unwrap();
    assert_eq!(
        store.get_at_most(&format!("{p}/empty"), 0).await.unwrap(),
        Bytes::new(),
        "an empty object is read, not refused"
    );
    let whole = store.get_stream(&k, None).await.unwrap();
    assert_eq!(whole.size, 11);
    assert_eq!(collect(whole).await, b"hello world");
    let part = store.get_stream(&k, Some(6..11)).await.unwrap();
    assert_eq!(
        part.size, 11,
        "a range's stream still says the object's size"
    );
    assert_eq!(collect(part).await, b"world");
    assert!(matches!(
        store.get_stream(&k, Some(6..12)).await,
        Err(ObjectStoreError::BadRange { .. })
    ));
    assert!(matches!(
        store.get_stream(&k, Some(20..30)).await,
        Err(ObjectStoreError::BadRange { .. })
    ));
    assert!(matches!(
        store.get_stream(&format!("{p}/missing"), None).await,
        Err(ObjectStoreError::NotFound(_))
    ));
    let m2 = store
        .put(&k, Bytes::from_static(b"HELLO WORLD"))
        .await
        .unwrap();
    assert_ne!(m1.etag, m2.etag, "the etag changes with the content");
    assert!(matches!(
        store.put_if_absent(&k, Bytes::from_static(b"x")).await,
        Err(ObjectStoreError::AlreadyExists(_))
    ));
    assert_eq!(
        store.get(&k).await.unwrap(),
        Bytes::from_static(b"HELLO WORLD"),
        "a refused put-if-absent changes nothing"
    );
    store
        .put_if_absent(&format!("{p}/new"), Bytes::from_static(b"n"))
        .await
        .unwrap();

    // Files both ways.
    let dir = std::env::temp_dir().join(format!("tessera-conf-{}", ulid_like()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("src.bin");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&src, &data).unwrap();
    store.put_file(&format!("{p}/big.bin"), &src).await.unwrap();
    let streamed = store
        .get_stream(&format!("{p}/big.bin"), None)
        .await
        .unwrap();
    assert_eq!(collect(streamed).await, data, "a stream of many chunks");
    let tail = store
        .get_stream(&format!("{p}/big.bin"), Some(1000..300_000))
        .await
        .unwrap();
    assert_eq!(collect(tail).await, &data[1000..]);
    let dst = dir.join("dst.bin");
    let meta = store
        .get_to_file(&format!("{p}/big.bin"), &dst)
        .await
        .unwrap();
    assert_eq!(meta.size, data.len() as u64);
    assert_eq!(std::fs::read(&dst).unwrap(), data);
    let _ = std::fs::remove_dir_all(&dir);

    // Listing with pages.
    for i in 0..7 {
        store
            .put(&format!("{p}/list/{i}"), Bytes::from(vec![i as u8]))
            .await
            .unwrap();
    }
    let (page1, next) = store.list(&format!("{p}/list/"), None, 4).await.unwrap();
    assert_eq!(page1.len(), 4);
    let (page2, end) = store
        .list(&format!("{p}/list/"), next.as_deref(), 4)
        .await
        .unwrap();
    assert_eq!(page2.len(), 3);
    assert!(end.is_none());
    let keys: BTreeSet<_> = page1.iter().chain(&page2).map(|m| m.key.clone()).collect();
    assert_eq!(keys.len(), 7, "pages do not overlap");

    // Hostile keys fail the same way everywhere, touching nothing.
    for bad in ["", "/abs", "a/../../etc/passwd", "a//b", "a\0b"] {
        assert!(
            matches!(
                store.put(bad, Bytes::from_static(b"x")).await,
                Err(ObjectStoreError::InvalidKey { .. })
            ),
            "key {bad:?} must be refused"
        );
        assert!(
            matches!(
                store.get(bad).await,
                Err(ObjectStoreError::InvalidKey { .. })
            ),
            "key {bad:?} must be refused"
        );
    }
    store.delete(&k).await.unwrap();
    store
        .delete(&k)
        .await
        .expect("deleting a missing object is fine");
    assert!(store.head(&k).await.unwrap().is_none());
}
