"""Check the CloudFormation template SAM's translator makes of infra/template.yaml (what
`sam deploy` creates) against the limits a production stack needs at load:

- every SQS event source mapping caps its concurrency (ScalingConfig.MaximumConcurrency),
  so a burst in one queue cannot take the account's concurrent executions;
- the stage runner takes one message per invocation (a stage may use the whole sandbox);
- every Batch job queue cancels jobs stuck RUNNABLE (no capacity, no GPU quota, a
  requirement no instance meets), so a reconstruction fails loudly instead of hanging;
- the state table's indexes project keys only, so an item write that leaves its index
  keys alone (a heartbeat, a photo's next field) writes no index entry;
- every function writes the metric of tasks that end failed or dead, and an alarm
  watches it;
- no role carries SAM's managed AWSLambdaSQSQueueExecutionRole (receive and delete on
  every queue); each SQS-driven function's own role may receive from its own queues;
- every role that queries an index may read the items it names (BatchGetItem: the
  indexes project keys only);
- the api function's progress streams end (and say so) before its timeout, and its
  concurrency is reserved by a parameter; with every default, the mappings' caps and
  that reservation fit an account's default 1,000 executions (100 kept unreserved);
- every function and Batch container that ends tasks may publish notices to the event
  bus it is given (events:PutEvents on the default bus);
- the reaper's role may delete and list in the bucket, which its collector does
  (expired uploads and blobs, originals past retention, refusals, erasure sweeps), and
  may not read or write objects.

Usage: check_template.py TRANSLATED.json. Prints one line per check and
`N passed, N failed`; exits 1 on any failure.
"""

import json
import sys


def actions_of(role):
    """(action, resource) pairs of a role's inline policies."""
    out = []
    for policy in role["Properties"].get("Policies", []):
        for st in policy["PolicyDocument"]["Statement"]:
            if st.get("Effect") != "Allow":
                continue
            acts = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
            res = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
            for a in acts:
                for r in res:
                    out.append((a, json.dumps(r, sort_keys=True)))
    return out


def main() -> int:
    with open(sys.argv[1]) as f:
        t = json.load(f)
    res = t["Resources"]
    results = []

    def check(name, ok, detail=""):
        results.append(ok)
        print(("ok   " if ok else "FAIL ") + name + (f": {detail}" if detail and not ok else ""))

    mappings = {k: v for k, v in res.items() if v["Type"] == "AWS::Lambda::EventSourceMapping"}
    sqs = {
        k: v
        for k, v in mappings.items()
        if "Queue" in json.dumps(v["Properties"].get("EventSourceArn"))
    }
    check("the template has SQS event source mappings", len(sqs) > 0, "none found")
    for k, v in sorted(sqs.items()):
        cap = v["Properties"].get("ScalingConfig", {}).get("MaximumConcurrency")
        check(f"{k} caps its concurrency", cap is not None, "no ScalingConfig.MaximumConcurrency")
    stage = [v for k, v in sqs.items() if k.startswith("StageRunnerFunction")]
    check("the stage runner has an SQS mapping", len(stage) == 1, f"{len(stage)} found")
    for v in stage:
        check(
            "the stage runner takes one stage per invocation",
            v["Properties"].get("BatchSize") == 1,
            f"BatchSize {v['Properties'].get('BatchSize')}",
        )
    queues = {k: v for k, v in res.items() if v["Type"] == "AWS::Batch::JobQueue"}
    check("the template has Batch job queues", len(queues) > 0, "none found")
    for k, v in sorted(queues.items()):
        limits = v["Properties"].get("JobStateTimeLimitActions", [])
        runnable = [a for a in limits if a.get("State") == "RUNNABLE" and a.get("Action") == "CANCEL"]
        check(f"{k} cancels jobs stuck RUNNABLE", len(runnable) > 0, "no JobStateTimeLimitActions")
        # The only reasons Batch acts on (its user guide: other blocking reasons, such as
        # SERVICE_ROLE_PERMISSIONS, need manual investigation and never trigger an action).
        documented = {
            "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY",
            "MISCONFIGURATION:COMPUTE_ENVIRONMENT_MAX_RESOURCE",
            "MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT",
        }
        reasons = {a.get("Reason") for a in runnable}
        check(f"{k} acts on every documented RUNNABLE reason and no other", reasons == documented, sorted(map(str, reasons)))
    tables = {k: v for k, v in res.items() if v["Type"] == "AWS::DynamoDB::Table"}
    for k, v in sorted(tables.items()):
        for gsi in v["Properties"].get("GlobalSecondaryIndexes", []):
            kind = gsi.get("Projection", {}).get("ProjectionType")
            check(
                f"{k} index {gsi['IndexName']} projects keys only (no index write per item write)",
                kind == "KEYS_ONLY",
                f"ProjectionType {kind}",
            )
    for metric, what in [("TasksFailed", "tasks that end failed or dead"),
                         ("RecordsUnreadable", "records the reaper skipped unread")]:
        alarms = [
            v
            for v in res.values()
            if v["Type"] == "AWS::CloudWatch::Alarm"
            and v["Properties"].get("Namespace") == "Tessera"
            and v["Properties"].get("MetricName") == metric
        ]
        check(f"an alarm watches {what}", len(alarms) == 1, f"{len(alarms)} found")
    functions = {k: v for k, v in res.items() if v["Type"] == "AWS::Lambda::Function"}
    for k, v in sorted(functions.items()):
        env = v["Properties"].get("Environment", {}).get("Variables", {})
        check(f"{k} writes the failure metric", "TESSERA_METRICS_STACK" in env, sorted(env))
    roles = {k: v for k, v in res.items() if v["Type"] == "AWS::IAM::Role"}
    for k, v in sorted(roles.items()):
        managed = json.dumps(v["Properties"].get("ManagedPolicyArns", []))
        check(f"{k} has no managed SQS policy", "AWSLambdaSQSQueueExecutionRole" not in managed, managed)
    for k, v in sorted(sqs.items()):
        fn = res[v["Properties"]["FunctionName"]["Ref"]]
        role = fn["Properties"]["Role"]["Fn::GetAtt"][0]
        queue = json.dumps(v["Properties"]["EventSourceArn"], sort_keys=True)
        granted = {a for a, r in actions_of(res[role]) if r == queue}
        need = {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"}
        check(f"{k}: its role may receive from its queue", need <= granted, sorted(need - granted))
    for k, v in sorted(roles.items()):
        acts = {a for a, _ in actions_of(v)}
        if acts & {"dynamodb:Query"}:
            check(f"{k} may read the items an index query names", "dynamodb:BatchGetItem" in acts, sorted(acts))
    api = res.get("ApiFunction")
    if api:
        timeout = api["Properties"].get("Timeout", 3)
        limit = api["Properties"].get("Environment", {}).get("Variables", {}).get("TESSERA_STREAM_LIMIT_S")
        check(
            "the api function's progress streams end before its timeout",
            limit is not None and int(limit) + 30 <= int(timeout),
            f"TESSERA_STREAM_LIMIT_S {limit} with a {timeout} s timeout",
        )
        reserved = api["Properties"].get("ReservedConcurrentExecutions")
        check(
            "the api function's concurrency is reserved (and so capped) by a parameter",
            isinstance(reserved, dict) and "Fn::If" in reserved,
            f"ReservedConcurrentExecutions {reserved}",
        )
    # With every default, the caps and the reservation leave the API and the pipeline room
    # in an account at the default 1,000 concurrent executions, of which AWS keeps 100
    # unreserved: no queue can take what another needs.
    params = t.get("Parameters", {})

    def default_of(v):
        if isinstance(v, dict) and "Ref" in v:
            return int(params.get(v["Ref"], {}).get("Default", 0))
        return int(v)

    caps = sum(default_of(v["Properties"]["ScalingConfig"]["MaximumConcurrency"])
               for v in sqs.values() if "ScalingConfig" in v["Properties"])
    api_reserved = int(params.get("ApiReservedConcurrency", {}).get("Default", 0))
    check(
        "the default caps and the api's reservation fit a default account (1,000, 100 kept unreserved)",
        api_reserved >= 1 and caps + api_reserved <= 900,
        f"mappings {caps} + api {api_reserved}",
    )
    # Notices go to EventBridge from whichever process ends a task: every function given
    # a bus (and the Batch container) may publish to it, and the others are given none.
    for k, v in sorted(functions.items()):
        env = v["Properties"].get("Environment", {}).get("Variables", {})
        if not env.get("TESSERA_EVENT_BUS"):
            continue
        role = res[v["Properties"]["Role"]["Fn::GetAtt"][0]]
        granted = [r for a, r in actions_of(role) if a == "events:PutEvents"]
        check(f"{k} may publish notices to its bus", any("event-bus/default" in r for r in granted), granted)
    for k, v in sorted(res.items()):
        if v["Type"] != "AWS::Batch::JobDefinition":
            continue
        env = {e["Name"]: e["Value"] for e in v["Properties"]["ContainerProperties"].get("Environment", [])}
        check(f"{k} gives its container the event bus", env.get("TESSERA_EVENT_BUS") == "default", sorted(env))
        role = res[v["Properties"]["ContainerProperties"]["JobRoleArn"]["Fn::GetAtt"][0]]
        granted = [r for a, r in actions_of(role) if a == "events:PutEvents"]
        check(f"{k}'s job role may publish notices", any("event-bus/default" in r for r in granted), granted)
    reaper = res.get("ReaperFunctionRole")
    check("the reaper has its own role", reaper is not None, "ReaperFunctionRole missing")
    if reaper:
        acts = {a for a, _ in actions_of(reaper)}
        check("the reaper may delete objects", "s3:DeleteObject" in acts, sorted(acts))
        check("the reaper may list the bucket", "s3:ListBucket" in acts, sorted(acts))
        check(
            "the reaper may not read or write objects",
            not acts & {"s3:GetObject", "s3:PutObject", "s3:*"},
            sorted(acts),
        )
    passed = sum(results)
    failed = len(results) - passed
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
