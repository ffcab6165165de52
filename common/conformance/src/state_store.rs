//! The state-store rules: conditional writes, transactions, queries and races.

use super::*;
/// Every state-store rule the engine relies on.
pub async fn state_store(store: Arc<dyn StateStore>) {
    let k = ItemKey::new(unique("conf#"), "A");
    let item = |v: i64| Item::new(k.clone(), json!({"v": v, "state": "queued"}));

    // Put-if-absent, revisions, optimistic concurrency.
    store
        .put(item(1), Condition::Absent)
        .await
        .expect("first put-if-absent succeeds");
    let e = store
        .put(item(2), Condition::Absent)
        .await
        .expect_err("second put-if-absent must conflict");
    assert!(
        e.is_conflict(),
        "put-if-absent on an existing item must be a Conflict, got {e}"
    );
    let got = store.get(&k).await.unwrap().expect("item exists");
    assert_eq!(got.rev, 1, "a new item has revision 1");
    assert_eq!(
        got.body["v"], 1,
        "a failed conditional put must not change the item"
    );
    store
        .put(item(3), Condition::Rev(1))
        .await
        .expect("put at the current revision succeeds");
    assert_eq!(
        store.get(&k).await.unwrap().unwrap().rev,
        2,
        "each write bumps the revision"
    );
    assert!(
        store
            .put(item(4), Condition::Rev(1))
            .await
            .unwrap_err()
            .is_conflict(),
        "a stale revision conflicts"
    );

    // Field conditions.
    store
        .put(item(5), Condition::field_eq("state", "queued"))
        .await
        .expect("FieldEq that holds");
    assert!(
        store
            .put(item(6), Condition::field_eq("state", "running"))
            .await
            .unwrap_err()
            .is_conflict()
    );
    assert!(
        store
            .put(
                Item::new(ItemKey::new(unique("conf#"), "A"), json!({})),
                Condition::field_eq("state", "queued")
            )
            .await
            .unwrap_err()
            .is_conflict(),
        "FieldEq on a missing item fails"
    );

    // An ordering field: absent or no greater than the value.
    let o = ItemKey::new(unique("conf#"), "A");
    let ordered = |body| Item::new(o.clone(), body);
    store
        .put(ordered(json!({"at": 1})), Condition::Absent)
        .await
        .unwrap();
    let at_most = |n| Condition::field_at_most("written_at", n);
    store
        .put(ordered(json!({"at": 2})), at_most(-5))
        .await
        .expect("FieldAtMost on an absent field holds");
    store
        .put(
            ordered(json!({"at": 3, "written_at": 1_700_000_000_000_i64})),
            at_most(0),
        )
        .await
        .unwrap();
    store
        .put(
            ordered(json!({"at": 4, "written_at": 1_700_000_000_000_i64})),
            at_most(1_700_000_000_000),
        )
        .await
        .expect("FieldAtMost holds on an equal value");
    let e = store
        .put(ordered(json!({"at": 5})), at_most(1_699_999_999_999))
        .await
        .expect_err("FieldAtMost fails on a greater value");
    assert!(e.is_conflict(), "{e}");
    assert_eq!(store.get(&o).await.unwrap().unwrap().body["at"], 4);
    assert!(
        store
            .put(
                Item::new(ItemKey::new(unique("conf#"), "A"), json!({})),
                at_most(i64::MAX)
            )
            .await
            .unwrap_err()
            .is_conflict(),
        "FieldAtMost on a missing item fails"
    );

    // A field not set: absent or null, on an item that exists.
    let n = ItemKey::new(unique("conf#"), "A");
    let unset = || Condition::field_null("published_at");
    store
        .put(Item::new(n.clone(), json!({"at": 1})), Condition::Absent)
        .await
        .unwrap();
    store
        .put(
            Item::new(n.clone(), json!({"at": 2, "published_at": null})),
            unset(),
        )
        .await
        .expect("FieldNull holds on an absent field");
    store
        .put(
            Item::new(n.clone(), json!({"at": 3, "published_at": 5})),
            unset(),
        )
        .await
        .expect("FieldNull holds on a null field");
    let e = store
        .put(Item::new(n.clone(), json!({"at": 4})), unset())
        .await
        .expect_err("FieldNull fails on a set field");
    assert!(e.is_conflict(), "{e}");
    assert_eq!(store.get(&n).await.unwrap().unwrap().body["at"], 3);
    assert!(
        store
            .put(
                Item::new(ItemKey::new(unique("conf#"), "A"), json!({})),
                unset()
            )
            .await
            .unwrap_err()
            .is_conflict(),
        "FieldNull on a missing item fails"
    );

    // Any: one of them is enough, none given is never; on a Set as a photo's failure is
    // written (withheld because unpublished, or because decided before an opt-out).
    let y = ItemKey::new(unique("conf#"), "A");
    store
        .put(
            Item::new(y.clone(), json!({"published_at": 5, "subjects_rev": 2})),
            Condition::Absent,
        )
        .await
        .unwrap();
    let withheld = |rev: i64| {
        Condition::Any(vec![
            Condition::field_null("published_at"),
            Condition::field_at_most("subjects_rev", rev),
        ])
    };
    let fail = |condition| {
        vec![Write::Set {
            key: y.clone(),
            fields: vec![("failure".into(), json!("cancelled"))],
            condition,
        }]
    };
    let e = store
        .transact(fail(withheld(1)))
        .await
        .expect_err("Any fails when none holds");
    assert!(e.is_conflict(), "{e}");
    let e = store
        .transact(fail(Condition::Any(vec![])))
        .await
        .expect_err("Any of nothing never holds");
    assert!(e.is_conflict(), "{e}");
    store
        .transact(fail(withheld(2)))
        .await
        .expect("Any holds when its second holds");
    // Inside All, as a cancelled run's compensation writes it.
    store
        .transact(fail(Condition::All(vec![
            withheld(2),
            Condition::field_at_most("staged_by_submitted_ms", 10),
            Condition::field_eq("subjects_rev", 2),
        ])))
        .await
        .expect("Any inside All");
    // One of one, inside All: a run asked for at no subject revision has only the
    // first reason.
    store
        .transact(fail(Condition::All(vec![
            Condition::Any(vec![Condition::field_at_most("subjects_rev", 2)]),
            Condition::All(vec![Condition::field_eq("subjects_rev", 2)]),
        ])))
        .await
        .expect("a one-part Any and All inside All");
    let e = store
        .transact(fail(Condition::All(vec![
            withheld(1),
            Condition::field_eq("subjects_rev", 2),
        ])))
        .await
        .expect_err("Any inside All fails when none of it holds");
    assert!(e.is_conflict(), "{e}");
    assert_eq!(
        store.get(&y).await.unwrap().unwrap().body["failure"],
        "cancelled"
    );
    store
        .transact(vec![Write::Set {
            key: y.clone(),
            fields: vec![("published_at".into(), json!(null))],
            condition: Condition::None,
        }])
        .await
        .unwrap();
    store
        .transact(fail(withheld(0)))
        .await
        .expect("Any holds when its first holds");
    store
        .transact(fail(Condition::Any(vec![
            Condition::field_eq("published_at", 12345),
            Condition::None,
        ])))
        .await
        .expect("Any with a branch that always holds holds");
    assert!(
        store
            .transact(vec![Write::Set {
                key: ItemKey::new(unique("conf#"), "A"),
                fields: vec![("failure".into(), json!("x"))],
                condition: withheld(i64::MAX),
            }])
            .await
            .unwrap_err()
            .is_conflict(),
        "Any on a missing item fails"
    );

    // All or nothing, and the conflict names the failing write.
    let (a, b) = (
        ItemKey::new(unique("conf#"), "A"),
        ItemKey::new(unique("conf#"), "A"),
    );
    let err = store
        .transact(vec![
            Write::Put {
                item: Item::new(a.clone(), json!({"n": 1})),
                condition: Condition::Absent,
            },
            Write::Put {
                item: Item::new(b.clone(), json!({"n": 1})),
                condition: Condition::Absent,
            },
            Write::Check {
                key: k.clone(),
                condition: Condition::Rev(999),
            },
        ])
        .await
        .expect_err("the failing check must fail the transaction");
    assert!(
        matches!(err, StoreError::Conflict { index: 2, .. }),
        "conflict must name write 2, got {err}"
    );
    assert!(
        store.get(&a).await.unwrap().is_none(),
        "no write of a failed transaction may be applied"
    );
    assert!(
        store.get(&b).await.unwrap().is_none(),
        "no write of a failed transaction may be applied"
    );

    // Counters need no read and never conflict; they need the item to exist.
    store
        .put(Item::new(a.clone(), json!({"n": 1})), Condition::Absent)
        .await
        .unwrap();
    store
        .transact(vec![Write::add(a.clone(), "n", 4)])
        .await
        .unwrap();
    store
        .transact(vec![Write::Add {
            key: a.clone(),
            deltas: vec![("fresh".into(), -2), ("n".into(), 10)],
        }])
        .await
        .unwrap();
    let got = store.get(&a).await.unwrap().unwrap();
    assert_eq!(
        (got.body["n"].as_i64(), got.body["fresh"].as_i64()),
        (Some(15), Some(-2))
    );
    assert!(
        store
            .transact(vec![Write::add(b.clone(), "n", 1)])
            .await
            .unwrap_err()
            .is_conflict()
    );

    // Set changes named fields of an existing item, keeps the rest, bumps the revision,
    // and refuses a missing item or a failed condition.
    let rev = store.get(&a).await.unwrap().unwrap().rev;
    store
        .transact(vec![Write::Set {
            key: a.clone(),
            fields: vec![("label".into(), json!("x")), ("fresh".into(), json!(null))],
            condition: Condition::field_eq("n", 15),
        }])
        .await
        .unwrap();
    let got = store.get(&a).await.unwrap().unwrap();
    assert_eq!(got.body["label"], json!("x"));
    assert_eq!(got.body["fresh"], json!(null));
    assert_eq!(got.body["n"], json!(15));
    assert!(got.rev > rev);
    for (key, condition) in [
        (a.clone(), Condition::field_eq("n", 16)),
        (b.clone(), Condition::None),
    ] {
        assert!(
            store
                .transact(vec![Write::Set {
                    key,
                    fields: vec![("label".into(), json!("y"))],
                    condition,
                }])
                .await
                .unwrap_err()
                .is_conflict()
        );
    }
    assert_eq!(
        store.get(&a).await.unwrap().unwrap().body["label"],
        json!("x")
    );

    // Delete with a condition; deleting a missing item is fine.
    assert!(
        store
            .transact(vec![Write::Delete {
                key: a.clone(),
                condition: Condition::Rev(1)
            }])
            .await
            .unwrap_err()
            .is_conflict()
    );
    store
        .transact(vec![Write::Delete {
            key: a.clone(),
            condition: Condition::Exists,
        }])
        .await
        .unwrap();
    assert!(store.get(&a).await.unwrap().is_none());
    store
        .transact(vec![Write::Delete {
            key: a.clone(),
            condition: Condition::None,
        }])
        .await
        .unwrap();

    // Limits of a transaction.
    let many: Vec<_> = (0..101)
        .map(|i| Write::Put {
            item: Item::new(ItemKey::new(unique("conf#"), format!("{i}")), json!({})),
            condition: Condition::None,
        })
        .collect();
    assert!(
        matches!(store.transact(many).await, Err(StoreError::Invalid(_))),
        "more than 100 writes is invalid"
    );
    let twice = vec![
        Write::Check {
            key: k.clone(),
            condition: Condition::None,
        },
        Write::Check {
            key: k.clone(),
            condition: Condition::None,
        },
    ];
    assert!(
        matches!(store.transact(twice).await, Err(StoreError::Invalid(_))),
        "one key twice is invalid"
    );

    state_store_large_fields(&*store).await;
    state_store_queries(&*store).await;
    state_store_races(store).await;
}

/// A crowd photo's row: a list of a few hundred KB of JSON at the top level, written by a
/// put, replaced by a `Set`, compared by `FieldEq`, and read back exactly (the DynamoDB
/// adapter stores such a field packed).
async fn state_store_large_fields(store: &dyn StateStore) {
    let k = ItemKey::new(unique("conf#"), "LARGE");
    // Short decimals: serde_json parses them back exactly (see `tessera_aws::attr`).
    let crowd = |n: usize, best: usize| {
        (0..n)
            .map(|i| {
                json!({
                    "bbox": {"x": (i % 97) as f64 / 100.0, "y": (i % 89) as f64 / 100.0, "w": 0.0125, "h": 0.0175},
                    "landmarks": [[0.1, 0.2], [0.3, 0.2], [0.2, 0.25], [0.12, 0.3], [0.28, 0.3]],
                    "decision": {"decision": "not_opted_out", "best": (best + i) as f64 / 1e4},
                })
            })
            .collect::<Vec<_>>()
    };
    let body = json!({"state": "published", "faces": crowd(150, 1000), "few": crowd(1, 2000)});
    store
        .put(Item::new(k.clone(), body.clone()), Condition::Absent)
        .await
        .expect("a row with 150 faces is written");
    assert_eq!(
        store.get(&k).await.unwrap().unwrap().body,
        body,
        "a large field reads back exactly"
    );
    let replaced = json!(crowd(150, 1500));
    store
        .transact(vec![Write::Set {
            key: k.clone(),
            fields: vec![("faces".into(), replaced.clone())],
            condition: Condition::FieldEq("faces".into(), body["faces"].clone()),
        }])
        .await
        .expect("a Set conditioned on the large field's current value holds");
    let got = store.get(&k).await.unwrap().unwrap().body;
    assert_eq!(got["faces"], replaced, "a Set replaces a large field");
    assert_eq!(got["few"], body["few"], "and leaves the rest alone");
    let stale = store
        .transact(vec![Write::Set {
            key: k.clone(),
            fields: vec![("state".into(), json!("failed"))],
            condition: Condition::FieldEq("faces".into(), body["faces"].clone()),
        }])
        .await
        .expect_err("a condition on the large field's old value fails");
    assert!(stale.is_conflict(), "{stale}");
}

async fn state_store_queries(store: &dyn StateStore) {
    let pk = unique("confq#");
    let parent = unique("confp#");
    let due = unique("confd#");
    for i in 0..25 {
        let mut it = Item::new(ItemKey::new(pk.clone(), format!("{i:03}")), json!({"i": i}));
        it.by_parent = Some(ItemKey::new(parent.clone(), format!("c{i:03}")));
        if i % 2 == 0 {
            it.by_due = Some(ItemKey::new(due.clone(), format!("{:03}", 100 - i)));
        }
        store.put(it, Condition::Absent).await.unwrap();
    }
    // Pages of 10: 10, 10, 5, in order, each item once.
    let mut q = Query::partition(Index::Table, pk.clone(), 10);
    let mut seen = Vec::new();
    let mut pages = 0;
    loop {
        let page = store.query(&q).await.unwrap();
        pages += 1;
        seen.extend(page.items.iter().map(|i| i.body["i"].as_i64().unwrap()));
        match page.next {
            Some(c) => q.after = Some(c),
            None => break,
        }
    }
    assert_eq!(
        seen,
        (0..25).collect::<Vec<_>>(),
        "pages return every item once, in sort-key order"
    );
    assert_eq!(pages, 3);

    let mut q = Query::partition(Index::Table, pk.clone(), 100);
    q.sk_prefix = Some("01".into());
    assert_eq!(
        store.query(&q).await.unwrap().items.len(),
        10,
        "sort-key prefix 01 matches 010..019"
    );
    let mut q = Query::partition(Index::Table, pk.clone(), 3);
    q.descending = true;
    let page = store.query(&q).await.unwrap();
    assert_eq!(
        page.items
            .iter()
            .map(|i| i.body["i"].as_i64().unwrap())
            .collect::<Vec<_>>(),
        [24, 23, 22]
    );
    q.after = page.next;
    assert_eq!(
        store.query(&q).await.unwrap().items[0].body["i"],
        21,
        "descending pages continue downwards"
    );

    let q = Query::partition(Index::ByParent, parent.clone(), 100);
    assert_eq!(
        store.query(&q).await.unwrap().items.len(),
        25,
        "the by-parent index holds every child"
    );
    let mut q = Query::partition(Index::ByDue, due.clone(), 100);
    q.sk_max = Some("090".into());
    let due_items = store.query(&q).await.unwrap().items;
    assert_eq!(
        due_items
            .iter()
            .map(|i| i.body["i"].as_i64().unwrap())
            .collect::<Vec<_>>(),
        [24, 22, 20, 18, 16, 14, 12, 10],
        "the by-due index is sparse and ordered by its sort key, bounded by sk_max"
    );
    // Rewriting an item without an index entry removes it from that index.
    let mut moved = due_items[0].clone();
    moved.by_due = None;
    store.put(moved, Condition::Exists).await.unwrap();
    let q = Query::partition(Index::ByDue, due.clone(), 100);
    assert_eq!(
        store.query(&q).await.unwrap().items.len(),
        12,
        "an item leaves an index when its entry is removed"
    );
}

async fn state_store_races(store: Arc<dyn StateStore>) {
    // Racing put-if-absent: exactly one winner.
    let k = ItemKey::new(unique("race#"), "A");
    let mut handles = Vec::new();
    for w in 0..8 {
        let (s, k) = (store.clone(), k.clone());
        handles.push(tokio::spawn(async move {
            s.put(Item::new(k, json!({"w": w})), Condition::Absent)
                .await
                .is_ok()
        }));
    }
    let mut wins = 0;
    for h in handles {
        wins += h.await.unwrap() as i32;
    }
    assert_eq!(
        wins, 1,
        "exactly one of eight racing put-if-absent writers wins"
    );

    // Read-modify-write with revisions: no lost update.
    let k = ItemKey::new(unique("race#"), "B");
    store
        .put(Item::new(k.clone(), json!({"n": 0})), Condition::Absent)
        .await
        .unwrap();
    let mut handles = Vec::new();
    for _ in 0..4 {
        let (s, k) = (store.clone(), k.clone());
        handles.push(tokio::spawn(async move {
            for _ in 0..15 {
                loop {
                    let cur = s.get(&k).await.unwrap().unwrap();
                    let n = cur.body["n"].as_i64().unwrap();
                    match s
                        .put(
                            Item::new(k.clone(), json!({"n": n + 1})),
                            Condition::Rev(cur.rev),
                        )
                        .await
                    {
                        Ok(()) => break,
                        Err(e) if e.is_conflict() => continue,
                        Err(e) => panic!("unexpected store error {e}"),
                    }
                }
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    assert_eq!(
        store.get(&k).await.unwrap().unwrap().body["n"],
        60,
        "optimistic updates lose nothing"
    );
}
