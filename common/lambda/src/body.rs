//! What an SQS message body is. One function can receive several kinds on its queues
//! (the ingest function gets S3 notifications and ingest tasks; the orchestrator gets
//! heavy tasks and Batch state changes), so each body is recognised by its shape.

use tessera_engine::plan::TaskMessage;
use tessera_engine::remote::RemoteEnd;
use tessera_jobs::photos::ObjectCreated;

/// A recognised message body.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// "Task X may be runnable".
    Task(TaskMessage),
    /// An S3 event notification (real S3 or moto shape); may hold no object-created
    /// records (a delete notification).
    Uploads(Vec<ObjectCreated>),
    /// The `s3:TestEvent` S3 sends when notifications are configured.
    S3Test,
    /// A Batch job reached a final state (EventBridge `Batch Job State Change`).
    BatchEnded(RemoteEnd),
    /// A Batch job changed to a state that needs nothing (submitted, running…).
    BatchProgress(String),
    /// Anything else: poison, archived on the first try.
    Unparsable(String),
}

/// Recognise a body.
pub fn parse(body: &str) -> Body {
    let v: serde_json::Value = match serde_json::from_str(body) {
        Ok(v) => v,
        Err(e) => return Body::Unparsable(format!("not JSON: {e}")),
    };
    if let Ok(t) = serde_json::from_value::<TaskMessage>(v.clone()) {
        return Body::Task(t);
    }
    if v.get("Event").and_then(|e| e.as_str()) == Some("s3:TestEvent") {
        return Body::S3Test;
    }
    if v.get("Records").is_some() {
        return match ObjectCreated::from_s3_event(&v) {
            Ok(events) => Body::Uploads(events),
            Err(e) => Body::Unparsable(format!("S3 notification: {e}")),
        };
    }
    if v.get("source").and_then(|s| s.as_str()) == Some("aws.batch") {
        return batch_change(&v);
    }
    Body::Unparsable("neither a task message, an S3 notification nor a Batch state change".into())
}

fn batch_change(v: &serde_json::Value) -> Body {
    let d = &v["detail"];
    let status = d["status"].as_str().unwrap_or_default();
    let job_id = d["jobId"].as_str().unwrap_or_default().to_string();
    let task = d["jobName"]
        .as_str()
        .and_then(|n| n.strip_prefix("tessera-"))
        .and_then(|t| t.parse().ok());
    let Some(task) = task else {
        return Body::Unparsable(format!(
            "Batch job {job_id} is not a Tessera task (job name {:?})",
            d["jobName"]
        ));
    };
    match status {
        "SUCCEEDED" | "FAILED" => {
            let container = &d["container"];
            let mut reason = d["statusReason"].as_str().unwrap_or("").to_string();
            if let Some(r) = container["reason"].as_str() {
                reason += &format!("; container: {r}");
            }
            if let Some(code) = container["exitCode"].as_i64() {
                reason += &format!("; exit code {code}");
            }
            Body::BatchEnded(RemoteEnd {
                job_id,
                task,
                succeeded: status == "SUCCEEDED",
                reason,
            })
        }
        other => Body::BatchProgress(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any SQS body is recognised or called poison with a reason; nothing panics.
        #[test]
        fn any_body_is_recognised_or_poison(body in "\\PC{0,200}|\\{\"Records\":\\[.{0,80}\\]\\}|\\{\"source\":\"aws.batch\".{0,80}\\}") {
            if let Body::Unparsable(why) = parse(&body) {
                prop_assert!(!why.is_empty());
            }
        }
    }

    #[test]
    fn sample_events_are_recognised() {
        let read = |name: &str| {
            let path = format!(
                "{}/../../events/{name}",
                std::env::var("CARGO_MANIFEST_DIR")
                    .expect("cargo sets CARGO_MANIFEST_DIR when it runs tests")
            );
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
        };
        let sqs: serde_json::Value = serde_json::from_str(&read("s3-put-via-sqs.json")).unwrap();
        let Body::Uploads(ups) = parse(sqs["Records"][0]["body"].as_str().unwrap()) else {
            panic!("an S3 notification")
        };
        assert_eq!(
            ups[0].object_key().unwrap(),
            "uploads/01JDZQ0000000000000000000P/01JDZQ0000000000000000PH0T/IMG 0001 café.jpg"
        );
        let batch: serde_json::Value =
            serde_json::from_str(&read("sqs-batch-with-poison.json")).unwrap();
        let bodies: Vec<Body> = batch["Records"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| parse(r["body"].as_str().unwrap()))
            .collect();
        assert!(matches!(bodies[0], Body::Task(_)));
        assert!(matches!(bodies.last().unwrap(), Body::Unparsable(_)));
        let change: serde_json::Value =
            serde_json::from_str(&read("batch-job-state-change.json")).unwrap();
        let Body::BatchEnded(end) = parse(&change.to_string()) else {
            panic!("a Batch state change")
        };
        assert!(!end.succeeded);
        assert_eq!(
            end.class(),
            tessera_core::ErrorClass::Resource,
            "{}",
            end.reason
        );
    }

    #[test]
    fn moto_shaped_notifications_decode() {
        // moto leaves out userIdentity, requestParameters and sequencer, and encodes `/`.
        let body = r#"{"Records":[{"eventVersion":"2.1","eventSource":"aws:s3","awsRegion":"us-east-1","eventTime":"2026-11-30T00:00:00.000Z","eventName":"ObjectCreated:Put","s3":{"s3SchemaVersion":"1.0","configurationId":"c","bucket":{"name":"b","arn":"arn:aws:s3:::b"},"object":{"key":"uploads%2F01JDZQ0000000000000000000P%2F01JDZQ0000000000000000PH0T%2Fa+b.jpg","size":10,"eTag":"x","versionId":"null"}}}]}"#;
        let Body::Uploads(ups) = parse(body) else {
            panic!()
        };
        assert_eq!(
            ups[0].object_key().unwrap(),
            "uploads/01JDZQ0000000000000000000P/01JDZQ0000000000000000PH0T/a b.jpg"
        );
        assert_eq!(ups[0].sequencer, "0");
        assert!(matches!(parse("{]"), Body::Unparsable(_)));
        assert!(matches!(parse(r#"{"hello":1}"#), Body::Unparsable(_)));
    }
}
