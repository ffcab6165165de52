"""The deploy rehearsal's scenarios, as a client would drive them: a photo upload
published and re-blurred when a subject enrols, a function killed at its timeout, poison
and dead letters archived, a six-photo reconstruction routed as deployed, and retention
and erasure carried out by the reaper with its clock moved forward."""

import json
import os
import time
import urllib.error
import urllib.request

from common import REPO, SHARED, STACK, log

class Scenarios:
    """Mixed into `rehearse.Rehearsal` (its `http`, `wait`, `check`, `op` clients, its
    functions and stack); `load.LoadRehearsal` reuses `scenario_expiry`."""

    def scenario_photos(self):
        t0 = time.time()
        s, p = self.http("POST", "/v1/projects", {"name": "rehearsal-photos"})
        assert s == 201, (s, p)
        pid = p["project_id"]
        # The operator's calibrated threshold (the face models' README): without one every
        # face is blurred, fail closed, and nothing tells a match from a stranger.
        s, r = self.http("PUT", f"/v1/x-tessera/projects/{pid}/privacy", {"match_threshold": 0.363, "blur_expand": 0.35})
        self.check(s in (200, 202), f"privacy settings: {s} {r}")
        files = ["grace_hopper.jpg", "astronaut.png", "composite_pd_1280x896.jpg"]

        def put_photo(name):
            return self.presigned_put(pid, name)

        def privacy():
            return self.http("GET", f"/v1/x-tessera/projects/{pid}/privacy")[1]

        photos = [put_photo(f) for f in files]
        ok = self.wait("3 uploads published", lambda: privacy()["photos_published"] == 3, 240)
        self.check(ok, "S3 upload → ingest → publish did not publish 3 photos")
        log(f"photos: 3 S3 uploads published in {time.time() - t0:.1f}s")

        # Enrol a subject: every photo is re-decided and re-blurred.
        t1 = time.time()
        rev = privacy()["subjects_rev"]
        sha = self.upload_blob(open(os.path.join(SHARED, "testdata/faces/grace_hopper.jpg"), "rb").read())
        s, sub = self.http("POST", f"/v1/x-tessera/projects/{pid}/subjects", {"label": "grace", "blob_shas": [sha]})
        self.check(s in (200, 201), f"enrol: {s} {sub}")
        current = self.wait("every photo re-blurred", lambda: (lambda v: v["subjects_rev"] > rev and v["photos_not_current"] == 0
                                                                and v["photos_published"] == 3)(privacy()), 240)
        self.check(current, f"after enrolment not every photo was re-blurred: {privacy()}")
        s, grace = self.http("GET", f"/v1/x-tessera/photos/{photos[0]}")
        decisions = [(f.get("decision") or {}).get("decision") for f in grace.get("faces", [])]
        self.check("subject" in decisions, f"grace's photo, re-decided after her enrolment: {decisions}")
        s, other = self.http("GET", f"/v1/x-tessera/photos/{photos[1]}")
        others = [(f.get("decision") or {}).get("decision") for f in other.get("faces", [])]
        self.check(others and "subject" not in others, f"a stranger's photo after grace's enrolment: {others}")
        log(f"photos: enrolment re-blurred every photo in {time.time() - t1:.1f}s")

        # A function killed at its timeout mid-task: the task is redelivered and ends once.
        fp = self.functions["FaceProcessFunction"]
        put_photo("camera.png")  # warms face-process with the deployed timeout
        self.wait("a first face-process photo", lambda: privacy()["photos_published"] == 4, 180)
        deployed = fp.timeout_s
        self.op.lam.update_function_configuration(FunctionName=fp.name, Timeout=1)
        fp.update_timeout(self.op.lam.get_function_configuration(FunctionName=fp.name)["Timeout"])
        t2 = time.time()
        # The group photo: eight faces at 1280 px take its face-process well past 1 s on
        # any machine (a 512 px portrait can finish within it on an idle one).
        killed = put_photo("composite_pd_1280x896.jpg")
        self.wait("face-process killed at its timeout", lambda: fp.timeouts > 0, 120)
        self.op.lam.update_function_configuration(FunctionName=fp.name, Timeout=deployed)
        fp.update_timeout(self.op.lam.get_function_configuration(FunctionName=fp.name)["Timeout"])
        done = self.wait("the killed photo published after redelivery", lambda: self.http(
            "GET", f"/v1/x-tessera/photos/{killed}")[1].get("status") == "published", 200)
        self.check(done, f"the photo whose face-process was killed never published: {self.http('GET', f'/v1/x-tessera/photos/{killed}')[1]}")
        s, row = self.http("GET", f"/v1/x-tessera/photos/{killed}")
        # One result: a retry starts a newer version (no published object is ever
        # overwritten), so the row points at one complete version, and what the killed
        # attempt staged is collected.
        version = row.get("variant_version")
        prefix = f"photos/{pid}/{killed}/"
        bucket = self.stack.physical["PhotoBucket"]

        def only_current():
            # The current version's files, and the one object holding the faces'
            # embeddings (written once per detection, not per version).
            keys = [o["Key"] for o in self.op.s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])]
            faces = [k for k in keys if k.startswith(f"{prefix}faces/")]
            files = [k for k in keys if k not in faces]
            return keys if files and len(faces) <= 1 and all(k.startswith(f"{prefix}v{version}/") for k in files) else None
        kept = self.wait(f"only version {version} of the killed photo left", only_current, 90)
        self.check(kept, f"the killed attempt's files were not collected: "
                         f"{[o['Key'] for o in self.op.s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get('Contents', [])]}")
        # Only the public file has a download URL (a subject's own variant is read
        # through the API, audited); every URL is of the published version.
        urls = [v.get("download_url") for v in row.get("variants", []) if v.get("download_url")]
        self.check(urls and all(f"/v{version}/" in u for u in urls),
                   f"the published variants are not all of version {version}: {row.get('variants')}")
        self.check(fp.timeouts >= 1, "face-process was never killed at its timeout")
        self.check(privacy()["photos_published"] == 5, f"not 5 photos published: {privacy()}")
        self.report["scenarios"]["timeout_kill"] = {"timeouts": fp.timeouts, "seconds_to_publish": round(time.time() - t2, 1),
                                                    "photo": row.get("status"),
                                                    "variant_version": version, "objects": len(kept or [])}
        log(f"photos: face-process killed at 1 s ({fp.timeouts}×), the task redelivered and published in {time.time() - t2:.1f}s")

    def presigned_put(self, pid, name):
        """Upload one test photo through a presigned URL, as a phone app would; its id."""
        s, pre = self.http("POST", f"/v1/x-tessera/projects/{pid}/photos:presign",
                           {"name": name, "content_type": "image/png" if name.endswith(".png") else "image/jpeg"})
        assert s == 201, (s, pre)
        data = open(os.path.join(SHARED, "testdata/faces", name), "rb").read()
        req = urllib.request.Request(pre["upload"]["url"], data=data, method="PUT", headers=pre["upload"]["headers"])
        with urllib.request.urlopen(req, timeout=60) as r:
            assert r.status == 200, r.status
        return pre["photo_id"]

    def scenario_expiry(self):
        """Retention and erasure carried out by the reaper with its own role: originals past
        their project's retention, an erased photo's second sweep and an unfinished
        upload's chunks are deleted once the reaper's clock is moved past their time (the
        one injected fault: TESSERA_CLOCK_OFFSET_S, in the reaper's environments only)."""
        t0 = time.time()
        bucket = self.stack.physical["PhotoBucket"]

        def keys(prefix):
            return [o["Key"] for o in self.op.s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])]
        s, p = self.http("POST", "/v1/projects", {"name": "rehearsal-expiry", "match_threshold": 0.363})
        assert s == 201, (s, p)
        pid = p["project_id"]
        s, r = self.http("PATCH", f"/v1/projects/{pid}", {"upload_retention_days": 1})
        self.check(s == 200, f"retention: {s} {r}")
        kept, erased = self.presigned_put(pid, "grace_hopper.jpg"), self.presigned_put(pid, "astronaut.png")
        for photo in (kept, erased):
            self.wait(f"photo {photo} published", lambda: self.http(
                "GET", f"/v1/x-tessera/photos/{photo}")[1].get("status") == "published", 240)
        s, _ = self.http("DELETE", f"/v1/x-tessera/photos/{erased}")
        self.check(s == 204, f"erase: {s}")
        self.check(not keys(f"uploads/{pid}/{erased}/") and not keys(f"photos/{pid}/{erased}/"),
                   "the erased photo's objects outlived its erasure")
        s, u = self.http("POST", "/v1/uploads", {"expected_size": 10})
        assert s == 201, (s, u)
        s, r = self.http("PATCH", f"/v1/uploads/{u['upload_id']}", b"01234",
                         {"content-range": "bytes 0-4/10", "content-type": "application/octet-stream"})
        self.check(s == 200, f"a chunk of an upload left unfinished: {s} {r}")
        chunks = f"upload-chunks/{u['upload_id']}/"
        self.check(keys(f"uploads/{pid}/{kept}/") and keys(chunks), "nothing to collect before the clock moves")

        reaper = self.functions["ReaperFunction"]
        reaper.env["TESSERA_CLOCK_OFFSET_S"] = str(2 * 86400 + 3600)
        reaper.update_timeout(reaper.timeout_s)  # new environments, with the moved clock
        ok, body, _, err = reaper.invoke(json.dumps({
            "version": "0", "id": "expiry", "detail-type": "Scheduled Event", "source": "aws.events",
            "account": "123456789012", "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "region": "us-east-1", "resources": [], "detail": {}}).encode())
        self.check(ok, f"the reaper's pass failed: {err}")
        gone = self.wait("the original past retention and the unfinished upload collected",
                         lambda: not keys(f"uploads/{pid}/{kept}/") and not keys(chunks), 60)
        self.check(gone, f"the reaper did not delete what expired (its role may not?): "
                         f"{keys(f'uploads/{pid}/{kept}/') + keys(chunks)}; reaper said {body!r}")
        s, row = self.http("GET", f"/v1/x-tessera/photos/{kept}")
        self.check(row.get("original_deleted") is True and row.get("status") == "published",
                   f"past retention the original goes and the blurred files stay: {row}")
        self.report["scenarios"]["expiry"] = {"reaper": body.decode() if isinstance(body, bytes) else body,
                                              "seconds": round(time.time() - t0, 1)}
        log(f"expiry: the reaper deleted an original past retention and an unfinished upload with its own role "
            f"in {time.time() - t0:.1f}s")

    def scenario_dead_letters(self):
        bucket = self.stack.physical["PhotoBucket"]
        s3 = self.op.s3
        before = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="archive/").get("Contents", [])}
        ingest_url = self.op.sqs.get_queue_url(QueueName=f"{STACK}-ingest")["QueueUrl"]
        self.op.sqs.send_message(QueueUrl=ingest_url, MessageBody='{"task_id": "not a task"')
        # What SQS does after maxReceiveCount: the message moves to the dead-letter queue.
        dlq = self.op.sqs.get_queue_url(QueueName=f"{STACK}-face-process-dlq")["QueueUrl"]
        self.op.sqs.send_message(QueueUrl=dlq, MessageBody='{"task_id": "00000000-0000-0000-0000-000000000000"}')

        def archived():
            keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="archive/").get("Contents", [])} - before
            return keys if len(keys) >= 2 else None
        keys = self.wait("poison and the dead letter archived", archived, 60)
        self.check(keys and any("face-process-dlq" in k or "face-process" in k for k in keys), f"archive keys: {keys}")
        self.report["scenarios"]["dead_letters"] = sorted(keys or [])
        log(f"dead letters: archived {sorted(keys or [])}")

    def scenario_reconstruction(self):
        t0 = time.time()
        s, p = self.http("POST", "/v1/projects", {"name": "rehearsal-sfm"})
        pid = p["project_id"]
        s, d = self.http("POST", f"/v1/projects/{pid}/datasets", {"name": "six"})
        did = d["dataset_id"]
        images = sorted(os.listdir(os.path.join(REPO, "sample/images")))[:6]
        for name in images:
            sha = self.upload_blob(open(os.path.join(REPO, "sample/images", name), "rb").read())
            s, r = self.http("POST", f"/v1/datasets/{did}/images", {"name": name, "blob_sha": sha})
            assert s == 201, (s, r)
        # The recipe with its defaults: the routing decides where each stage runs.
        s, lro = self.http("POST", f"/v1/projects/{pid}/pipelines/incremental",
                               {"dataset_id": did, "spec": {"kind": "incremental"}})
        if not self.check(s == 202, f"recipe: {s} {lro}"):
            return
        job = lro["job_id"]
        detail = self.wait("the reconstruction to end", lambda: (lambda d: d if d.get("status") in (
            "succeeded", "failed", "cancelled", "cancelled_dirty") else None)(self.http("GET", f"/v1/jobs/{job}")[1]), 600)
        if not self.check(detail and detail["status"] == "succeeded", f"reconstruction: {json.dumps(detail)[:2000]}"):
            return
        s, snaps = self.http("GET", f"/v1/reconstructions/{job}/snapshots")
        seq = snaps["seqs"][-1]
        s, pts = self.http("GET", f"/v1/reconstructions/{job}/snapshots/{seq}/points.bin", raw=True)
        n = int.from_bytes(pts[12:20], "little") if s == 200 and pts[:8] == b"SFMP3D\0\0" else 0
        self.check(n > 0 and len(pts) == 44 + 26 * n, f"points.bin: status {s}, {len(pts)} bytes")
        runner = self.functions["StageRunnerFunction"]
        self.report["scenarios"]["reconstruction"] = {"images": len(images), "points": n, "seconds": round(time.time() - t0, 1),
                                                      "stage_runner_invocations": len(runner.invocations)}
        log(f"reconstruction: 6 photos → {n} points in {time.time() - t0:.1f}s "
            f"({len(runner.invocations)} stage-runner invocations)")
