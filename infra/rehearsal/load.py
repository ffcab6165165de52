"""Load rehearsal: the deploy rehearsal's stack (infra/template.yaml on moto, every function
run from its own binary as deployed, fed by pollers that honour its event source mapping)
driven at load, with a recording proxy (`recorder.py`) between the functions and the
AWS-compatible server that counts every DynamoDB, SQS and S3 request and the capacity
units AWS would bill for it, per table, index and partition key.

Phases, as clients would drive them:
  burst            N photos (640×480, one or two faces, every third of an opted-out
                   person, and one 150-face group photo) put through presigned URLs into
                   one project; a subject enrolled on that project halfway through.
  sweep            a second subject enrolled once the burst is done: every photo of the
                   project re-decided by the sweep in parts.
  reconstructions  M reconstructions of a six-photo dataset submitted at once.
  one_face         one-face photos into the burst's project: the everyday cost.
  wide_sweep       a project of --sweep-photos published photos (one uploaded, the rest its
                   row copied) re-decided when a second subject opts out.
  expiry           an erasure and an upload retention expiry, the reaper's clock moved
                   forward (the deploy rehearsal's scenario).

The report (`--report`) holds what issue 23 asks for: the hottest partitions, units per
photo and per reconstruction, the largest item, what was lost, the sweep's runs, the
hottest partition of each key design extrapolated to 1 M photos a day with a 10× peak
hour and 1,000 concurrent reconstructions (the formula is in the report), and the cost.

Usage: python load.py [--photos N] [--reconstructions M] [--full] [--report OUT.json]
"""

import argparse
import concurrent.futures
import copy
import json
import os
import sys
import threading
import time
import zlib

from boto3.dynamodb.types import Binary, TypeDeserializer

sys.path.insert(0, os.path.dirname(__file__))
import capacity  # noqa: E402
from lambda_service import SqsPoller  # noqa: E402
from load_report import LoadReport  # noqa: E402
from recorder import Recorder  # noqa: E402
from rehearse import REPO, SHARED, Rehearsal, log  # noqa: E402
from fairness import FairTurns  # noqa: E402
from workload import STRANGER, SUBJECT, no_face_photo, one_face_photos, phone_photos, ulid  # noqa: E402

class Stall:
    """No progress for `timeout` seconds, counted three ways that must all agree: on the
    monotonic clock, on the wall clock, and in polls of `every` seconds since the last
    progress. This machine is a VM that can be paused between polls, and its clocks then
    jump by the pause: a pause is one poll, however long, so a clock jump alone never
    reads as a stall. A CI run once declared a 900 s stall of a burst whose whole phase
    took 216 s by the wall clock (its last photo published three seconds later, and a
    rerun took 218 s), so the wall clock has a say too."""

    def __init__(self, timeout, every):
        self.timeout, self.every = timeout, every
        self.progress, self.polls = None, 0
        self.since, self.since_wall = time.monotonic(), time.time()

    def seen(self, progress):
        """Record one poll's progress; True when stalled."""
        if progress != self.progress:
            self.progress, self.polls = progress, 0
            self.since, self.since_wall = time.monotonic(), time.time()
            return False
        self.polls += 1
        return (time.monotonic() - self.since > self.timeout
                and time.time() - self.since_wall > self.timeout
                and self.polls * self.every > self.timeout)

class LoadRehearsal(FairTurns, LoadReport, Rehearsal):
    check_moto_json = False

    def __init__(self, args):
        super().__init__(args)
        self.phases = {}
        self.report = {"functions": {}, "scenarios": {}}
        self.deser = TypeDeserializer()

    # -- set up: every function's requests through the recorder ------------------------------

    def deploy(self):
        super().deploy()
        port = int(self.endpoint.rsplit(":", 1)[1])
        self.moto_endpoint = self.endpoint
        self.callers = {}
        self.recorder = Recorder(port, self.op.ddb, self.callers).start()
        self.callers[self.op_env["AWS_ACCESS_KEY_ID"]] = "operator"
        # The functions (and their pollers and presigned URLs) are given the recorder's
        # address as AWS's; the driver's own reads (self.op) go to moto uncounted.
        self.endpoint = self.recorder.url

    def start_functions(self):
        super().start_functions()
        self.watch(self.functions["IngestFunction"])
        for logical, f in self.functions.items():
            self.callers[f.env["AWS_ACCESS_KEY_ID"]] = logical
        # Lambda runs up to MaximumConcurrency batches of one mapping at once; the
        # rehearsal's poller runs one. Extra pollers, up to the mapping's cap, so the
        # burst is processed in parallel as far as this machine's cores go.
        extra = []
        for p in self.pollers:
            cap = (p.m.get("ScalingConfig") or {}).get("MaximumConcurrency", self.args.pollers)
            for _ in range(min(self.args.pollers, cap) - 1):
                q = SqsPoller(p.m, p.f, p.sqs, p.url)
                q.queue_name = p.queue_name
                q.start()
                extra.append(q)
        self.pollers += extra
        log(f"load: {len(extra)} extra pollers ({self.args.pollers} per mapping); the recorder at {self.recorder.url}")

    def watch(self, f):
        """Remember which tasks each invocation of `f` carried (the messages' `task`), so
        the sweep's own runs can be told from the other tasks the function runs."""
        f.runs = []

        def observe(started, seconds, _outcome, payload):
            tasks = []
            for record in json.loads(payload).get("Records", []):
                try:
                    tasks.append(json.loads(record["body"]).get("task"))
                except (ValueError, AttributeError):
                    pass
            f.runs.append((started, seconds, tasks))
        f.observer = observe

    def task_kind(self, task):
        b = self.body(self.item(f"TASK#{task}", "TASK")) if task else None
        return (b or {}).get("kind")

    # -- phases -------------------------------------------------------------------------------

    def begin(self, name):
        self.recorder.stats.phase = name
        self.phases[name] = [time.time(), None]
        log(f"phase {name}")

    def end(self, name):
        self.phases[name][1] = time.time()
        self.recorder.stats.phase = f"after-{name}"
        log(f"phase {name} ended after {self.phases[name][1] - self.phases[name][0]:.1f}s")

    def item(self, pk, sk):
        got = self.op.ddb.get_item(TableName=self.table, Key={"pk": {"S": pk}, "sk": {"S": sk}}, ConsistentRead=True).get("Item")
        return got

    def body(self, item):
        """An item's body as the state store reads it: a large top-level field is stored
        packed, as zlib-deflated JSON in a binary attribute (`common/aws/src/attr.rs`)."""
        if not item:
            return None
        body = self.deser.deserialize(item["body"])
        return {k: json.loads(zlib.decompress(v.value)) if isinstance(v, Binary) else v for k, v in body.items()}

    def project_photos(self, pid):
        """Every photo row of the project, read from moto directly (not counted)."""
        keys, start = [], None
        while True:
            kw = dict(TableName=self.table, IndexName="by_parent", KeyConditionExpression="parent_pk = :p",
                      ExpressionAttributeValues={":p": {"S": f"PROJECT#{pid}#PHOTOS"}})
            if start:
                kw["ExclusiveStartKey"] = start
            page = self.op.ddb.query(**kw)
            keys += [{"pk": i["pk"], "sk": i["sk"]} for i in page["Items"]]
            start = page.get("LastEvaluatedKey")
            if not start:
                break
        rows = []
        for a in range(0, len(keys), 100):
            ask = {self.table: {"Keys": keys[a:a + 100], "ConsistentRead": True}}
            while ask:
                got = self.op.ddb.batch_get_item(RequestItems=ask)
                rows += got["Responses"].get(self.table, [])
                ask = got.get("UnprocessedKeys") or None
        return rows

    def servable(self, pid):
        """(photos servable at the project's current subjects, photos, their rows)."""
        rev = self.body(self.item(f"PROJECT#{pid}", "PROJECT")).get("subjects_rev", 0)
        rows = [self.body(r) for r in self.project_photos(pid)]
        ok = [r for r in rows if r.get("published_at") is not None and int(r.get("subjects_rev", 0)) >= rev]
        return len(ok), len(rows), rows

    def wait_servable(self, pid, ids, what, timeout):
        """Wait until every photo of `ids` is servable. It fails when none has become
        servable for `timeout` seconds (a stall, however long the burst): a deadline on the
        whole wait would fail a slow machine, or one whose clock jumps, while photos still
        publish one by one.

        Each poll reads only the photos not yet seen servable at the project's current
        subject revision, and of them only the two fields that decide it: reading every
        row of the project every few seconds made the driver, not the functions, moto's
        largest client (quadratic in the burst). Once all are seen, one full read of the
        project confirms it."""
        seen, rev_seen = set(), [None]

        def count():
            rev = self.body(self.item(f"PROJECT#{pid}", "PROJECT")).get("subjects_rev", 0)
            if rev != rev_seen[0]:
                seen.clear()
                rev_seen[0] = rev
            pending = [i for i in ids if i not in seen]
            for a in range(0, len(pending), 100):
                ask = {self.table: {"Keys": [{"pk": {"S": f"PHOTO#{i}"}, "sk": {"S": "PHOTO"}} for i in pending[a:a + 100]],
                                    "ConsistentRead": True, "ProjectionExpression": "pk, #b.published_at, #b.subjects_rev",
                                    "ExpressionAttributeNames": {"#b": "body"}}}
                while ask:
                    got = self.op.ddb.batch_get_item(RequestItems=ask)
                    for row in got["Responses"].get(self.table, []):
                        b = self.body(row) or {}
                        if b.get("published_at") is not None and int(b.get("subjects_rev", 0)) >= rev:
                            seen.add(row["pk"]["S"].split("#", 1)[1])
                    ask = got.get("UnprocessedKeys") or None
            return len(seen)

        def done():
            if count() < len(ids):
                return False
            wanted = set(ids)
            rev, rows = self.body(self.item(f"PROJECT#{pid}", "PROJECT")).get("subjects_rev", 0), self.project_photos(pid)
            ok = {b["id"] for b in map(self.body, rows)
                  if b.get("published_at") is not None and int(b.get("subjects_rev", 0)) >= rev}
            if wanted <= ok:
                return True
            seen.intersection_update(ok)
            return False
        # Polls spaced by the backlog, so that a 10,000-photo wait does not read 10,000
        # rows every few seconds.
        every = max(3, min(30, len(ids) // 500))
        stall = Stall(timeout, every)
        # One reading decides each round: a photo re-decided again (a sweep's part and its
        # own stale check both asking) is withheld while it renders, so a second reading
        # straight after one that saw every photo servable could see one fewer, and once
        # declared a 2,400 s stall of a burst seconds after its last photo published.
        while not done():
            if stall.seen(len(seen)):
                self.fail(f"{what}: {len(seen)} of {len(ids)} photos servable, none more for {timeout}s")
                return False
            time.sleep(every)
        return True

    def enrol(self, pid, name, label):
        sha = self.upload_blob(open(os.path.join(SHARED, "testdata/faces", name), "rb").read())
        s, sub = self.http("POST", f"/v1/x-tessera/projects/{pid}/subjects", {"label": label, "blob_shas": [sha]})
        self.check(s in (200, 201), f"enrol {label}: {s} {sub}")
        log(f"enrolled {label}: {s} {json.dumps(sub)[:300]}")
        return sub

    def put_bytes(self, pid, name, data, key=True):
        s, pre = self.http("POST", f"/v1/x-tessera/projects/{pid}/photos:presign", {"name": name, "content_type": "image/jpeg"},
                           key=key)
        assert s == 201, (s, pre)
        import urllib.request
        req = urllib.request.Request(pre["upload"]["url"], data=data, method="PUT", headers=pre["upload"]["headers"])
        with urllib.request.urlopen(req, timeout=120) as r:
            assert r.status == 200, r.status
        return pre["photo_id"]

    def phase_burst(self):
        n = self.args.photos
        photos = phone_photos(n)
        self.begin("burst")
        s, p = self.http("POST", "/v1/projects", {"name": "load-burst"})
        assert s == 201, (s, p)
        pid = self.burst_project = p["project_id"]
        self.recorder.stats.scopes[pid] = "<project>"
        self.recorder.stats.scopes[p.get("tenant", "local")] = "<tenant>"
        s, r = self.http("PUT", f"/v1/x-tessera/projects/{pid}/privacy", {"match_threshold": 0.363, "blur_expand": 0.35})
        self.check(s in (200, 202), f"privacy settings: {s} {r}")
        ids = [None] * n
        uploaded = [0]
        enrolled = threading.Event()
        lock = threading.Lock()

        def one(i):
            name, data, _ = photos[i]
            ids[i] = self.put_bytes(pid, name, data)
            with lock:
                uploaded[0] += 1
                half = uploaded[0] == n // 2
            if half:
                # The opt-out arrives while the burst is being processed.
                self.enrol(pid, SUBJECT, "grace")
                enrolled.set()
        t0 = time.time()
        with concurrent.futures.ThreadPoolExecutor(self.args.clients) as pool:
            list(pool.map(one, range(n)))
        put_s = time.time() - t0
        self.check(enrolled.is_set(), "the subject was never enrolled during the burst")
        fair = self.second_tenant_photo(photos[1][1], pid)
        self.burst_ids = ids
        ok = self.wait_servable(pid, ids, "burst", max(900, 4 * n))
        self.end("burst")
        seconds = self.phases["burst"][1] - self.phases["burst"][0]
        self.report_fair_turns(fair)
        # Privacy at load: every photo of the opted-out subject ends with her face decided
        # `subject` (blurred in the public copy), no stranger's face is.
        _, _, rows = self.servable(pid)
        by_id = {r["id"]: r for r in rows}
        missed, wrong = [], []
        for (name, _, has_subject), pid_ in zip(photos, ids):
            decisions = [((f.get("decision") or {}).get("decision")) for f in (by_id.get(pid_, {}).get("faces") or [])]
            if has_subject and "subject" not in decisions:
                missed.append(name)
            if not has_subject and "subject" in decisions:
                wrong.append(name)
        self.check(not missed, f"photos of the opted-out subject without her face decided `subject`: {missed[:10]}")
        group = by_id.get(ids[n // 3], {})
        self.group_photo = ids[n // 3]
        self.report["scenarios"]["burst"] = {
            "photos": n, "seconds": round(seconds, 1), "upload_seconds": round(put_s, 1), "all_servable": ok,
            "photos_per_s": round(n / seconds, 2), "subject_photos": sum(1 for p in photos if p[2]),
            "subject_missed": len(missed), "strangers_decided_subject": len(wrong),
            "group_photo_faces": len(group.get("faces") or []),
        }
        log(f"burst: {n} photos servable in {seconds:.1f}s ({n / seconds:.2f}/s); subject missed on {len(missed)}, "
            f"group photo {len(group.get('faces') or [])} faces")

    def phase_sweep(self):
        pid = self.burst_project
        n = self.args.photos
        self.begin("sweep")
        self.enrol(pid, STRANGER, "astronaut")
        ok = self.wait_servable(pid, self.burst_ids, "sweep", max(900, 4 * n))
        self.end("sweep")
        self.report["sweep"] = self.sweep_parts("sweep", pid, n, ok)

    def sweep_parts(self, phase, pid, n, ok):
        """What the sweeps of project `pid` did, part by part, checked against each part's
        own bound; `n` photos re-decided in `phase`."""
        ingest = self.functions["IngestFunction"]
        t0, t1 = self.phases[phase]
        # The sweep's parts, the mid-burst one's included. Each part bounds its own work
        # (reblur::TIME_PER_PART, checked before every batch) and records how long it ran and
        # its slowest write; the check holds each to the bound below. The invocation
        # that carried a part also ran up to nine other tasks of its batch at once (re-blurs
        # sharing the same cores), so its length is reported, and held only to the timeout
        # itself: an invocation killed at its timeout is counted in `timeouts`.
        carried = list(dict.fromkeys(t for _, _, tasks in ingest.runs for t in tasks if self.task_kind(t) == "photo.reblur"))
        parts = [(self.body(self.item(f"TASK#{t}", "TASK")) or {}).get("result") or {} for t in carried]
        keep = [k for k, r in enumerate(parts) if r.get("project") == pid]
        carried, parts = [carried[k] for k in keep], [parts[k] for k in keep]
        part_s = [float(r.get("seconds", 0.0)) for r in parts]
        invocations = [d for started, d, tasks in ingest.runs if any(t in carried for t in tasks)]
        after = [d for started, d, tasks in ingest.runs if t0 <= started <= t1 and any(t in carried for t in tasks)]
        out = {
            "photos": n, "seconds": round(t1 - t0, 1), "runs": len(parts), "runs_in_the_phase": len(after),
            "longest_run_s": round(max(part_s, default=0.0), 2),
            "longest_invocation_carrying_a_part_s": round(max(invocations, default=0.0), 2),
            # Where the longest part's time went: reading pages, submitting re-blurs, the rest.
            "longest_run": {k: round(float(v), 2)
                            for k, v in max(parts, key=lambda r: float(r.get("seconds", 0.0)), default={}).items()
                            if k in ("seconds", "seconds_reading", "seconds_submitting", "slowest_write_seconds", "budget_seconds",
                                     "photos", "reprocess_jobs", "part")},
            "function_timeout_s": ingest.timeout_s, "timeouts": ingest.timeouts, "finished": ok,
        }
        # A part superseded by a later change records that instead of its seconds.
        self.check(parts and all("seconds" in r or "superseded_by" in r for r in parts),
                   f"{phase}: sweep parts without a recorded result: {[r for r in parts if 'seconds' not in r][:3]}")
        # A part's own bound, whatever the store's speed at the moment: its budget, its page
        # reads and what follows the last check before a batch — one batch's submission,
        # progress and the checkpoint, the hand-on's progress and submission, the phase's
        # end — at most six of its own slowest writes. A part checking the time too rarely
        # (between pages) breaks it; a slow moto under a burst does not (a wall-clock bound
        # failed on that alone).
        over = [r for r in parts if "seconds" in r and float(r["seconds"]) > float(r.get("budget_seconds", 0.0))
                + float(r.get("seconds_reading", 0.0)) + 6 * float(r.get("slowest_write_seconds", 0.0)) + 1.0]
        self.check(not over, f"{phase}: sweep parts ran past their budget, reads and six of their slowest writes: {over[:3]}")
        self.check(ingest.timeouts == 0, f"{ingest.timeouts} ingest invocation(s) killed at the {ingest.timeout_s}s timeout")
        log(f"{phase}: {n} photos re-decided in {t1 - t0:.1f}s, {len(parts)} parts, longest {max(part_s, default=0):.1f}s "
            f"({out['longest_run']}; its invocation's longest {max(invocations, default=0):.1f}s)")
        return out

    def phase_wide_sweep(self):
        """A re-blur at the size AWS is for (issue 23: 20,000 photos with --full): a project
        of `--sweep-photos` published photos, one subject opted out, a second one opting out.
        One photo (no face) goes the whole way through the stack; the others are its row
        copied under new ids straight into the table (uncounted: what is measured is the
        sweep, and 20,000 uploads are the burst's business), pointing at its files. Every
        one of them is then re-decided by the sweep's parts and a reprocess job each, as
        deployed; none shows the new subject, so each publishes its files again as they
        are (`photos::republish`), which is what most photos of a real project do."""
        n = self.args.sweep_photos
        s, p = self.http("POST", "/v1/projects", {"name": "load-sweep"})
        assert s == 201, (s, p)
        pid = self.wide_project = p["project_id"]
        self.recorder.stats.scopes[pid] = "<project>"
        s, r = self.http("PUT", f"/v1/x-tessera/projects/{pid}/privacy", {"match_threshold": 0.363, "blur_expand": 0.35})
        self.check(s in (200, 202), f"privacy settings: {s} {r}")
        self.enrol(pid, SUBJECT, "grace")
        first = self.put_bytes(pid, "no-face.jpg", no_face_photo())
        if not self.wait_servable(pid, [first], "the sweep project's first photo", 900):
            return
        template = self.item(f"PHOTO#{first}", "PHOTO")
        ids = [first]
        items = []
        for _ in range(n - 1):
            new = ulid()
            item = copy.deepcopy(template)  # a packed field is bytes, which JSON cannot copy
            item["pk"] = {"S": f"PHOTO#{new}"}
            item["parent_sk"] = {"S": new}
            item["body"]["M"]["id"] = {"S": new}
            ids.append(new)
            items.append(item)
        for k in range(0, len(items), 25):
            ask = {self.table: [{"PutRequest": {"Item": it}} for it in items[k:k + 25]]}
            while ask:
                ask = self.op.ddb.batch_write_item(RequestItems=ask).get("UnprocessedItems") or None
        log(f"wide sweep: {n} published photos in project {pid} ({n - 1} copied rows)")
        self.begin("wide_sweep")
        self.enrol(pid, STRANGER, "astronaut")
        ok = self.wait_servable(pid, ids, "wide sweep", max(900, n // 4))
        self.end("wide_sweep")
        self.wide_ids = ids
        self.report["sweep_wide"] = self.sweep_parts("wide_sweep", pid, n, ok)

    def phase_one_face(self):
        """The everyday cost: one-face photos (every third of an opted-out subject) into the
        burst's project once nothing else runs there (two subjects, its clusters grown, no
        change of subjects meanwhile), so that this phase's counts are those photos' alone.
        `cost.usd_per_1000_one_face_photos` comes from here, not from the burst, whose
        figure also carries a mid-burst re-blur and the 150-face group photo."""
        pid = self.burst_project
        k = self.args.one_face_photos
        photos = one_face_photos(k)
        self.begin("one_face")
        ids = []
        with concurrent.futures.ThreadPoolExecutor(self.args.clients) as pool:
            ids = list(pool.map(lambda p: self.put_bytes(pid, p[0], p[1]), photos))
        ok = self.wait_servable(pid, self.burst_ids + ids, "one-face photos", max(900, 4 * k))
        self.end("one_face")
        self.one_face_count = k
        by_id = {r["id"]: r for r in self.servable(pid)[2]}
        missed = [name for (name, _, has), i in zip(photos, ids) if has and "subject" not in [
            (f.get("decision") or {}).get("decision") for f in (by_id.get(i, {}).get("faces") or [])]]
        self.check(not missed, f"one-face photos of the opted-out subject without her face decided `subject`: {missed[:10]}")
        t0, t1 = self.phases["one_face"]
        self.report["scenarios"]["one_face"] = {"photos": k, "seconds": round(t1 - t0, 1), "all_servable": ok,
                                               "subject_photos": sum(1 for p in photos if p[2]), "subject_missed": len(missed)}
        log(f"one-face photos: {k} servable in {t1 - t0:.1f}s, subject missed on {len(missed)}")

    def phase_reconstructions(self):
        m = self.args.reconstructions
        self.begin("reconstructions")
        s, p = self.http("POST", "/v1/projects", {"name": "load-sfm"})
        pid = p["project_id"]
        self.recorder.stats.scopes[pid] = "<project>"
        images = sorted(os.listdir(os.path.join(REPO, "sample/images")))[:6]
        shas = [(name, self.upload_blob(open(os.path.join(REPO, "sample/images", name), "rb").read())) for name in images]
        jobs = []
        for k in range(m):
            # One dataset each: identical submissions are one job (by fingerprint).
            s, d = self.http("POST", f"/v1/projects/{pid}/datasets", {"name": f"six-{k}"})
            for name, sha in shas:
                s, r = self.http("POST", f"/v1/datasets/{d['dataset_id']}/images", {"name": name, "blob_sha": sha})
                assert s == 201, (s, r)
            jobs.append(d["dataset_id"])
        submitted = {}
        for did in jobs:
            s, lro = self.http("POST", f"/v1/projects/{pid}/pipelines/incremental", {"dataset_id": did, "spec": {"kind": "incremental"}})
            if self.check(s == 202, f"recipe: {s} {lro}"):
                submitted[lro["job_id"]] = time.time()
        ended = {}
        # Gives up when no task of any job has finished for the stall time (the jobs'
        # own progress, so neither a slow machine nor a clock that jumps fails them).
        stall = Stall(max(900, 120 * m), 2)
        stalled = False
        while len(ended) < len(submitted) and not stalled:
            done_tasks = 0
            for job in submitted:
                # The job's counters are fields of its record (flattened).
                c = self.body(self.item(f"JOB#{job}", "JOB"))
                done_tasks += c["succeeded"] + c["failed"] + c["dead"] + c["cancelled"]
                if job in ended:
                    continue
                if c["failed"] + c["dead"] + c["cancelled"] > 0 or (c["sealed"] and c["succeeded"] >= c["tasks_total"]):
                    ended[job] = (time.time() - submitted[job], c["failed"] + c["dead"] + c["cancelled"] == 0)
            stalled = stall.seen(done_tasks)
            time.sleep(2)
        self.end("reconstructions")
        durations = [d for d, _ in ended.values()]
        succeeded = sum(1 for _, ok in ended.values() if ok)
        self.check(succeeded == m, f"{succeeded} of {m} reconstructions succeeded ({len(ended)} ended)")
        self.reconstruction_seconds = min(durations, default=0.0)
        stage = self.functions["StageRunnerFunction"]
        t0, t1 = self.phases["reconstructions"]
        self.report["scenarios"]["reconstructions"] = {
            "reconstructions": m, "succeeded": succeeded, "seconds": round(t1 - t0, 1),
            "shortest_s": round(min(durations, default=0), 1), "longest_s": round(max(durations, default=0), 1),
            "stage_runs": sum(1 for started, _, _ in stage.invocations if t0 <= started <= t1),
        }
        log(f"reconstructions: {succeeded}/{m} succeeded in {t1 - t0:.1f}s")

    # -- figures ------------------------------------------------------------------------------

    def lost(self):
        photos_not = 0
        for pid in [self.burst_project]:
            ok, total, _ = self.servable(pid)
            photos_not += self.args.photos + getattr(self, "one_face_count", 0) - ok
        if hasattr(self, "wide_ids"):
            ok, total, _ = self.servable(self.wide_project)
            photos_not += len(self.wide_ids) - ok
        states = {}
        # Runs that ended without their writes because the world changed under them:
        # given back (what they decided from moved on) and stood down (a newer run of
        # the photo took over). Neither is a loss; both are work done twice.
        runs = {"moved_on": 0, "stood_down": 0}
        start = None
        while True:
            kw = dict(TableName=self.table, FilterExpression="begins_with(pk, :t)", ExpressionAttributeValues={":t": {"S": "TASK#"}})
            if start:
                kw["ExclusiveStartKey"] = start
            page = self.op.ddb.scan(**kw)
            for i in page["Items"]:
                body = self.body(i)
                st = body.get("state")
                states[st] = states.get(st, 0) + 1
                runs["moved_on"] += int(body.get("moved_on", 0))
                runs["stood_down"] += int(isinstance(body.get("result"), dict) and "taken_over" in body["result"])
            start = page.get("LastEvaluatedKey")
            if not start:
                break
        unfinished = sum(v for k, v in states.items() if k in ("waiting", "queued", "running"))
        failed = sum(v for k, v in states.items() if k in ("failed", "dead"))
        return {"photos_not_published": photos_not, "tasks_unfinished": unfinished, "tasks_failed_or_dead": failed,
                "total": photos_not + unfinished + failed, "task_states": states, "runs_redone": runs}

    # -- run ----------------------------------------------------------------------------------

    def run(self):
        capacity.self_check()
        self.deploy()
        self.start_functions()
        self.table = self.stack.physical["StateTable"]
        self.api_key = self.create_api_key()
        errors = []

        def guarded(fn):
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - a phase's crash is a failure, reported
                import traceback
                errors.append(f"{fn.__name__}: {e!r}\n{traceback.format_exc()}")
                log(f"{fn.__name__} crashed (the run goes on, and fails): {e!r}")
        guarded(self.phase_burst)
        if hasattr(self, "burst_project"):
            guarded(self.phase_sweep)
            guarded(self.phase_one_face)
        if self.args.sweep_photos:
            guarded(self.phase_wide_sweep)
        guarded(self.phase_reconstructions)
        self.begin("expiry")
        guarded(self.scenario_expiry)
        self.end("expiry")
        for e in errors:
            self.fail(e)
        for p in self.pollers:
            for e in p.errors[:3]:
                self.fail(f"event source mapping of {p.queue_name}: {e}")
        for e in self.recorder.stats.errors[:5]:
            self.fail(f"recorder: {e}")
        if not all(hasattr(self, a) for a in ("burst_project", "reconstruction_seconds", "one_face_count")):
            return
        self.write_report()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target-dir", default=os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target")))
    ap.add_argument("--profile", default="debug")
    ap.add_argument("--photos", type=int, default=150)
    ap.add_argument("--reconstructions", type=int, default=3)
    ap.add_argument("--full", action="store_true", help="issue 23's full load: 10,000 photos, 50 reconstructions")
    ap.add_argument("--pollers", type=int, default=1,
                    help="pollers per event source mapping (up to its cap); more starve two cores")
    ap.add_argument("--clients", type=int, default=3, help="clients uploading at once")
    ap.add_argument("--one-face-photos", type=int,
                    help="one-face photos uploaded after the sweep, for the everyday cost (default: a tenth of --photos, 20 to 1,000)")
    ap.add_argument("--sweep-photos", type=int,
                    help="published photos in the wide sweep's project (default: twice --photos; --full: 20,000; 0: none)")
    ap.add_argument("--report")
    args = ap.parse_args()
    if args.full:
        args.photos, args.reconstructions = 10_000, 50
        if args.sweep_photos is None:
            args.sweep_photos = 20_000
    if args.sweep_photos is None:
        args.sweep_photos = 2 * args.photos
    args.photos = max(args.photos, 6)
    if args.one_face_photos is None:
        args.one_face_photos = min(1000, max(20, args.photos // 10))
    r = LoadRehearsal(args)
    t0 = time.time()
    try:
        r.run()
    except BaseException:
        r.failures.append("the load rehearsal crashed")
        raise
    finally:
        r.stop()
    r.report["seconds"] = round(time.time() - t0, 1)
    r.report["failures"] = r.failures
    text = json.dumps(r.report, indent=1, default=str)
    if args.report:
        open(args.report, "w").write(text)
    print(text)
    if r.failures:
        sys.exit(f"load rehearsal: {len(r.failures)} failure(s)")
    log(f"load rehearsal passed in {r.report['seconds']}s")


if __name__ == "__main__":
    main()
