//! A write made alone (a plain `UpdateItem`, not a transaction) is applied exactly once
//! even when its response is lost after DynamoDB applied it and the SDK sends it again:
//! the retry's condition fails on the item the first attempt wrote, which carries that
//! write's token, so the store answers success, not a conflict. The one fault injected
//! is the lost response: a proxy on 127.0.0.1 in front of the real `moto_server` passes
//! the first `UpdateItem` through and closes the connection instead of answering it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use tessera_aws::{AwsAdapters, AwsSettings};
use tessera_conformance::moto::MotoServer;
use tessera_core::ports::state_store::{Condition, Item, ItemKey, StateStore, StoreError, Write};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Reads one HTTP/1.1 request (headers and a Content-Length body) from `s`.
async fn read_request(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map(|v| v.trim().parse().unwrap())
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                let n = s.read(&mut chunk).await.ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            return Some(buf);
        }
    }
}

/// A proxy to `upstream` that, the first time it sees an `UpdateItem`, forwards it and
/// drops the connection without the response. Every other request is forwarded on a
/// fresh upstream connection and answered.
async fn losing_proxy(upstream: String, lost: Arc<AtomicU32>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let (mut client, _) = listener.accept().await.unwrap();
            let upstream = upstream.clone();
            let lost = lost.clone();
            tokio::spawn(async move {
                while let Some(req) = read_request(&mut client).await {
                    let mut up = TcpStream::connect(&upstream).await.unwrap();
                    // One request per upstream connection: ask moto to close after it.
                    let text = String::from_utf8_lossy(&req);
                    let req = if text.to_ascii_lowercase().contains("connection:") {
                        req.clone()
                    } else {
                        let end = req.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
                        [&req[..end], b"\r\nConnection: close", &req[end..]].concat()
                    };
                    up.write_all(&req).await.unwrap();
                    let mut resp = Vec::new();
                    up.read_to_end(&mut resp).await.unwrap();
                    if text.contains("DynamoDB_20120810.UpdateItem")
                        && lost
                            .compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst)
                            .is_ok()
                    {
                        // Applied upstream; the client never hears of it.
                        return;
                    }
                    if client.write_all(&resp).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_alone_whose_response_is_lost_is_applied_once_and_answers_success() {
    let moto = MotoServer::start();
    let lost = Arc::new(AtomicU32::new(u32::MAX));
    let upstream = moto.endpoint.trim_start_matches("http://").to_string();
    let proxy = losing_proxy(upstream, lost.clone()).await;
    let a = AwsAdapters::connect(&AwsSettings::local(&proxy, "tessera-state", "b", "t-")).await;
    a.store.ensure_table().await.expect("table");
    let store: Arc<dyn StateStore> = Arc::new(a.store.clone());
    let key = ItemKey::new("LOST#1", "X");
    store
        .put(
            Item::new(key.clone(), serde_json::json!({"n": 1})),
            Condition::Absent,
        )
        .await
        .unwrap();
    let before = store.get(&key).await.unwrap().unwrap().rev;

    // From now on the first UpdateItem's response is lost.
    lost.store(0, Ordering::SeqCst);
    store
        .transact(vec![Write::Put {
            item: Item::new(key.clone(), serde_json::json!({"n": 2})),
            condition: Condition::Rev(before),
        }])
        .await
        .expect("the retried write finds itself applied: success, not a conflict");
    assert_eq!(lost.load(Ordering::SeqCst), 1, "the fault was injected");
    let after = store.get(&key).await.unwrap().unwrap();
    assert_eq!(
        (after.rev, after.body["n"].as_i64()),
        (before + 1, Some(2)),
        "applied once"
    );

    // A write with no condition of its own is not applied a second time by its retry
    // (which would overwrite whatever was written in between): one revision more.
    lost.store(0, Ordering::SeqCst);
    store
        .transact(vec![Write::Set {
            key: key.clone(),
            fields: vec![("m".into(), serde_json::json!(7))],
            condition: Condition::None,
        }])
        .await
        .expect("applied once, answered success");
    assert_eq!(lost.load(Ordering::SeqCst), 1, "the fault was injected");
    let set = store.get(&key).await.unwrap().unwrap();
    assert_eq!(
        (set.rev, set.body["m"].as_i64()),
        (before + 2, Some(7)),
        "applied once"
    );

    // A write whose condition really fails is still a conflict.
    let stale = store
        .transact(vec![Write::Put {
            item: Item::new(key.clone(), serde_json::json!({"n": 3})),
            condition: Condition::Rev(before),
        }])
        .await;
    assert!(
        matches!(stale, Err(StoreError::Conflict { index: 0, .. })),
        "{stale:?}"
    );
    assert_eq!(store.get(&key).await.unwrap().unwrap().body["n"], 2);
    assert_eq!(store.get(&key).await.unwrap().unwrap().rev, before + 2);
}
