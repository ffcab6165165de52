use super::*;

fn plan(tasks: Vec<TaskPlan>) -> JobPlan {
    JobPlan {
        tenant: TenantId::local(),
        project: None,
        kind: "t".into(),
        label: "t".into(),
        spec: serde_json::json!({}),
        priority: 0,
        tasks,
    }
}

#[test]
fn cycles_unknown_and_duplicate_names_are_refused() {
    let a = || TaskPlan::new("a", "k", serde_json::Value::Null);
    let b = || TaskPlan::new("b", "k", serde_json::Value::Null);
    assert!(
        validate(&plan(vec![a().after(["b"]), b().after(["a"])]))
            .unwrap_err()
            .to_string()
            .contains("cycle")
    );
    assert!(
        validate(&plan(vec![a().after(["zzz"])]))
            .unwrap_err()
            .to_string()
            .contains("zzz")
    );
    assert!(
        validate(&plan(vec![a(), a()]))
            .unwrap_err()
            .to_string()
            .contains("twice")
    );
    assert!(
        validate(&plan(vec![a().after(["a"])]))
            .unwrap_err()
            .to_string()
            .contains("itself")
    );
    assert!(validate(&plan(vec![])).is_err());
    assert_eq!(
        validate(&plan(vec![b().after(["a"]), a()])).unwrap(),
        vec![1, 0]
    );
}

#[test]
fn task_ids_are_stable_and_distinct() {
    let j = JobId::new();
    assert_eq!(task_id_for(j, "x"), task_id_for(j, "x"));
    assert_ne!(task_id_for(j, "x"), task_id_for(j, "y"));
    assert_ne!(task_id_for(j, "x"), task_id_for(JobId::new(), "x"));
}
