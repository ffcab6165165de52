"""The load rehearsal's report (`load.py --report`): what the recorder counted turned into
what issue 23 asks for, per photo and per reconstruction (capacity units, requests, Lambda
GB-seconds, cost), the hottest partition of each key design extrapolated to the target
load with its formula, the largest items, and the checks a run must pass.

A mixin of `load.LoadRehearsal`: it reads the run's recorder, functions, phases and
scenario state, and writes `self.report`.
"""

import time

import capacity
from pricing import AWS_LATENCY_S, LAMBDA_MB_PER_VCPU, S3_FREE, S3_PUT_CLASS, USD
from recorder import key_class

# AWS's per-partition throughput (DynamoDB Developer Guide, "Burst and adaptive capacity").
PARTITION_WRITE_LIMIT = 1000
PARTITION_READ_LIMIT = 3000
# The load the design must hold (issue 23).
PHOTOS_PER_DAY = 1_000_000
PEAK_HOUR_FACTOR = 10
CONCURRENT_RECONSTRUCTIONS = 1000
# Key designs this rehearsal has measured over 30 % of a partition's limit at the
# extrapolated peak and that are not fixed yet (issue 23, left open): reported under
# `known_over_limit`, never silently. A design over the limit that is not listed fails
# the run, and so does a listed one that is back under it (so the list cannot go stale).
KNOWN_HOT = {}


def by_operation(requests):
    """Requests per `service operation`, every caller's together."""
    out = {}
    for (svc, op, _), n in requests.items():
        out[f"{svc} {op}"] = out.get(f"{svc} {op}", 0) + n
    return out


class LoadReport:
    """Counting and checking, after the phases have run."""

    def write_report(self):
        r = self.report
        r["partitions_top"] = self.partitions_top()
        r["units_per_photo"] = self.cost(("burst",), self.args.photos)
        r["units_per_photo_reblur"] = self.cost(("sweep",), self.args.photos)
        r["units_per_one_face_photo"] = self.cost(("one_face",), self.one_face_count)
        r["units_per_reconstruction"] = self.cost(("reconstructions",), self.args.reconstructions)
        if hasattr(self, "wide_ids"):
            r["units_per_photo_redecided_unchanged"] = self.cost(("wide_sweep",), len(self.wide_ids))
        items = sorted(self.recorder.stats.items.items(), key=lambda kv: -kv[1][0])
        r["max_item_bytes"] = items[0][1][0] if items else 0
        r["largest_items"] = [{"key_design": cls, "bytes": size, "example": key} for cls, (size, key) in items[:8]]
        # A design's typical item after a write: what each write of it, and each
        # transaction's condition check on it, costs (1 unit per KB, twice in a transaction).
        r["item_bytes_mean"] = dict(sorted(((cls, round(total / n)) for cls, (n, total) in self.recorder.stats.sizes.items()),
                                           key=lambda kv: -kv[1])[:16])
        group_row = self.item(f"PHOTO#{self.group_photo}", "PHOTO")
        r["scenarios"]["burst"]["group_photo_row_bytes"] = row_bytes = capacity.item_size(group_row)
        # Every step of a photo's processing rewrites its row, billed by its size, twice in
        # a transaction. Stored as a map, this crowd's row was 69 KB (136 units a write,
        # 352 in one second of one partition); its faces are packed (common/aws/src/attr.rs).
        faces = len(self.body(group_row).get("faces") or [])
        self.check(row_bytes <= 200 * max(faces, 1),
                   f"the group photo's row is {row_bytes} bytes for {faces} faces: over 200 bytes a face, its faces are not packed")
        r["lost"] = self.lost()
        r["extrapolated"] = self.extrapolate()
        per_photo, per_recon = r["units_per_photo"], r["units_per_reconstruction"]
        stage_s = sum(v["seconds"] for k, v in per_recon["functions"].items() if k == "StageRunnerFunction")
        one = r["units_per_one_face_photo"]
        r["cost"] = {
            "usd_per_1000_one_face_photos": round(1000 * one["usd_total"], 4),
            "usd_per_1000_one_face_photos_modelled": round(1000 * one["usd_total_modelled"], 4),
            "usd_per_1000_one_face_photos_by_service": {k: round(1000 * v, 4) for k, v in one["usd"].items()},
            "usd_per_1000_photos": round(1000 * per_photo["usd_total"], 4),
            "usd_per_1000_photos_by_service": {k: round(1000 * v, 4) for k, v in per_photo["usd"].items()},
            "usd_per_1000_photos_reblurred": round(1000 * r["units_per_photo_reblur"]["usd_total"], 4),
            "usd_per_1000_photos_modelled": round(1000 * per_photo["usd_total_modelled"], 4),
            "usd_per_1000_photos_lambda_modelled": round(1000 * per_photo["usd_lambda_modelled"], 4),
            "usd_per_1000_photos_reblurred_modelled": round(1000 * r["units_per_photo_reblur"]["usd_total_modelled"], 4),
            "usd_per_1000_photos_redecided_unchanged_modelled": round(
                1000 * r["units_per_photo_redecided_unchanged"]["usd_total_modelled"], 4)
            if "units_per_photo_redecided_unchanged" in r else None,
            "usd_per_reconstruction": round(per_recon["usd_total"], 5),
            "usd_per_reconstruction_stages_on_batch_gpu": round(stage_s / 3600 * USD["batch_gpu_hour"], 5),
            "prices": USD,
            "build": self.args.profile,
            "notes": (f"Lambda GB-s are the measured durations of this machine's {self.args.profile} builds × the "
                      "template's memory sizes (an upper bound: two cores shared with moto and the recording proxy, "
                      "whose answers are slower than AWS's); `_modelled` replaces them by each function's CPU seconds "
                      f"(× {LAMBDA_MB_PER_VCPU} MB / its memory where that is under one vCPU) plus its own requests at "
                      f"{AWS_LATENCY_S} s each, × its memory. S3 storage, CloudWatch logs and data transfer are left "
                      "out; DynamoDB from the units counted above."),
        }
        self.check(r["lost"]["total"] == 0, f"lost: {r['lost']}")
        self.check(r["max_item_bytes"] <= 100 * 1024, f"the largest item is {r['max_item_bytes']} bytes: {r['largest_items'][:2]}")
        known = {}
        for target, e in r["extrapolated"]["by_target"].items():
            kind = "index" if "/" in target else "table"
            for row in [e["hottest"]] + e["next"]:
                over = max(row["read_fraction"], row["write_fraction"]) > 0.30
                why = KNOWN_HOT.get((kind, row["key_design"]))
                if over and why:
                    known[f"{target} {row['key_design']}"] = dict(row, why=why)
                else:
                    self.check(not over, f"{target}: key design {row['key_design']} at the extrapolated peak: {row}")
        for (kind, design), why in KNOWN_HOT.items():
            self.check(any(k.endswith(f" {design}") for k in known),
                       f"{design} is listed as over the limit ({why}) but measured under it: take it off KNOWN_HOT")
        r["known_over_limit"] = known
        r["proxy_latency_s"] = {f"{svc} {op}": round(v, 1) for (svc, op), v in sorted(
            self.recorder.stats.latency.items(), key=lambda kv: -kv[1])[:12]}
        self.report_functions()
        self.report["phases"] = {k: round((v[1] or time.time()) - v[0], 1) for k, v in self.phases.items()}
        # A function killed at its timeout did part of its work and failed the rest: a
        # pass sized by count rather than by time (the reaper's, before its budget) shows
        # here first, under a backlog.
        for logical, f in self.functions.items():
            self.check(f.timeouts == 0, f"{logical}: {f.timeouts} invocation(s) killed at the {f.timeout_s}s timeout")

    def function_seconds(self, phases):
        """Per function: invocations and GB-seconds of the invocations started in `phases`."""
        out = {}
        windows = [self.phases[p] for p in phases if p in self.phases]
        for logical, f in self.functions.items():
            runs = [d for started, d, _ in f.invocations if any(t0 <= started <= (t1 or time.time()) for t0, t1 in windows)]
            cpu = [c for started, c in f.cpu if any(t0 <= started <= (t1 or time.time()) for t0, t1 in windows)]
            if runs:
                out[logical] = {"invocations": len(runs), "seconds": round(sum(runs), 2),
                                "gb_s": round(sum(runs) * f.memory_mb / 1024, 2), "memory_mb": f.memory_mb,
                                "cpu_s": round(sum(cpu), 2)}
        return out

    def lambda_modelled(self, phases, fn):
        """Lambda GB-s as AWS would bill these invocations, from what they did rather than
        how long they took here (debug builds or not, two cores shared with moto and the
        recorder): each function's CPU seconds, stretched where its memory buys less than
        one vCPU, plus its own requests at AWS's typical latencies, times its memory."""
        requests = self.recorder.stats.request_counts(set(phases))
        out = {}
        for logical, v in fn.items():
            waits = sum(n * AWS_LATENCY_S.get(svc, 0.0) for (svc, _op, caller), n in requests.items() if caller == logical)
            seconds = v["cpu_s"] * max(1.0, LAMBDA_MB_PER_VCPU / v["memory_mb"]) + waits
            out[logical] = {"seconds": round(seconds, 2), "gb_s": round(seconds * v["memory_mb"] / 1024, 3)}
        return out

    def cost(self, phases, per):
        stats = self.recorder.stats
        parts = stats.partitions(set(phases))
        reads = sum(o["read"] for o in parts.values())
        writes = sum(o["write"] for o in parts.values())
        requests = stats.request_counts(set(phases))
        s3_put = sum(n for (svc, op, _), n in requests.items() if svc == "s3" and op in S3_PUT_CLASS)
        s3_get = sum(n for (svc, op, _), n in requests.items() if svc == "s3" and op not in S3_PUT_CLASS | S3_FREE)
        # The mappings' empty receives are a fixed cost per queue (reported apart), not per photo.
        sqs = sum(n for (svc, op, _), n in requests.items() if svc == "sqs" and op != "ReceiveMessage (empty)")
        fn = self.function_seconds(phases)
        gb_s = sum(v["gb_s"] for v in fn.values())
        invocations = sum(v["invocations"] for v in fn.values())
        modelled = self.lambda_modelled(phases, fn)
        modelled_gb_s = sum(v["gb_s"] for v in modelled.values())
        usd = {
            "lambda": gb_s * USD["lambda_gb_s"] + invocations * USD["lambda_request"],
            "dynamodb": writes * USD["ddb_write_unit"] + reads * USD["ddb_read_unit"],
            "s3_requests": s3_put * USD["s3_put"] + s3_get * USD["s3_get"],
            "sqs": sqs * USD["sqs_request"],
        }
        return {
            "per": per, "write_units": round(writes / per, 1), "read_units": round(reads / per, 1),
            "s3_put_class": round(s3_put / per, 1), "s3_get_class": round(s3_get / per, 1), "sqs_requests": round(sqs / per, 1),
            "lambda_gb_s": round(gb_s / per, 3), "lambda_invocations": round(invocations / per, 2),
            "usd": {k: round(v / per, 8) for k, v in usd.items()}, "usd_total": round(sum(usd.values()) / per, 8),
            "lambda_gb_s_modelled": round(modelled_gb_s / per, 4),
            "usd_lambda_modelled": round((modelled_gb_s * USD["lambda_gb_s"] + invocations * USD["lambda_request"]) / per, 8),
            "usd_total_modelled": round((sum(usd.values()) - usd["lambda"] + modelled_gb_s * USD["lambda_gb_s"]
                                         + invocations * USD["lambda_request"]) / per, 8),
            "functions": fn,
            "functions_modelled": modelled,
            "by_key_design": sorted(({"target": t, "key_design": cls, "write_units": round(c["write"] / per, 2),
                                      "read_units": round(c["read"] / per, 2), "partitions": c["partitions"]}
                                     for (t, cls), c in self.classes(phases).items()),
                                    key=lambda r: -r["write_units"] - r["read_units"])[:16],
            "requests": dict(sorted(((name, round(n / per, 2)) for name, n in by_operation(requests).items()),
                                    key=lambda kv: -kv[1])[:20]),
            "write_units_by_action": dict(sorted(((f"{cls}: {action}", round(u / per, 2))
                                                  for (cls, action), u in stats.actions_by_design(set(phases)).items()),
                                                 key=lambda kv: -kv[1])[:25]),
        }

    def classes(self, phases):
        """Per (target, key class): units, distinct partitions, and the hottest
        partition's share of the class's units and its peak 1-s window."""
        out = {}
        for (target, partition), o in self.recorder.stats.partitions(set(phases)).items():
            cls = key_class(partition, self.recorder.stats.scopes)
            c = out.setdefault((target, cls), {"read": 0.0, "write": 0.0, "partitions": 0, "hot": None})
            c["read"] += o["read"]
            c["write"] += o["write"]
            c["partitions"] += 1
            load = o["read"] / PARTITION_READ_LIMIT + o["write"] / PARTITION_WRITE_LIMIT
            if c["hot"] is None or load > c["hot"][0]:
                c["hot"] = (load, partition, o)
        return out

    def extrapolate(self):
        photo_rate = PHOTOS_PER_DAY / 86400 * PEAK_HOUR_FACTOR
        recon_s = max(self.reconstruction_seconds, 1.0)
        recon_rate = CONCURRENT_RECONSTRUCTIONS / recon_s
        sources = [(("burst", "sweep"), self.args.photos, photo_rate), (("reconstructions",), self.args.reconstructions, recon_rate)]
        table = {}
        for phases, count, rate in sources:
            for (target, cls), c in self.classes(phases).items():
                e = table.setdefault((target, cls), {"steady_read": 0.0, "steady_write": 0.0, "measured_peak_read": 0.0,
                                                     "measured_peak_write": 0.0, "hot_partition": None})
                _, partition, hot = c["hot"]
                share_r = hot["read"] / c["read"] if c["read"] else 0.0
                share_w = hot["write"] / c["write"] if c["write"] else 0.0
                if "<n>" in cls:
                    # A shard is a hash of an item's id (records::due_shard), so at the
                    # target's thousands of items a second each shard takes 1/shards of
                    # the design. This run's own hottest share, from a few dozen items,
                    # is the sample's luck: by_due's queued shards took 0.19 in one CI
                    # run (0.307 of a partition's writes extrapolated, against 0.10).
                    # The shards this run touched (at most all of them) count.
                    share_r = share_w = 1.0 / max(c["partitions"], 1)
                if "<id>" not in cls:
                    # Shared by every item of its scope: grows with the load.
                    e["steady_read"] += c["read"] / count * rate * share_r
                    e["steady_write"] += c["write"] / count * rate * share_w
                e["measured_peak_read"] = max(e["measured_peak_read"], hot["peak_read"])
                e["measured_peak_write"] = max(e["measured_peak_write"], hot["peak_write"])
                e["hot_partition"] = e["hot_partition"] or partition
        by_target = {}
        for (target, cls), e in table.items():
            read = max(e["steady_read"], e["measured_peak_read"])
            write = max(e["steady_write"], e["measured_peak_write"])
            row = {"key_design": cls, "example": e["hot_partition"], "read_units_per_s": round(read, 1),
                   "write_units_per_s": round(write, 1), "read_fraction": round(read / PARTITION_READ_LIMIT, 4),
                   "write_fraction": round(write / PARTITION_WRITE_LIMIT, 4)}
            by_target.setdefault(target, []).append(row)
        hottest = {}
        for target, rows in by_target.items():
            rows.sort(key=lambda r: -max(r["read_fraction"], r["write_fraction"]))
            hottest[target] = {"hottest": rows[0], "next": rows[1:5]}
        return {
            "formula": ("for each key design (partition keys with their ids replaced: <id> one item's own, <project> a "
                        "project's, <n> a shard), the hottest partition's units/s = max(steady, measured). A design shared by "
                        "many items (no <id>: a project's, a tenant's, a shard's) takes more load as the load grows: steady = "
                        "Σ over sources (photos, reconstructions) of (the design's units per photo or per reconstruction in "
                        "this run) × (the source's rate at the target) × (the share of the design's units its hottest "
                        "partition took in this run: 1 for one project or tenant taking the whole load; for a shard of a hash "
                        "of the item's id, 1 / the shards the run touched, what the shares tend to at the target's load). A design with an <id> has a partition per item, and more load means more "
                        "partitions, not hotter ones: steady = 0. measured = the hottest 1-s window of any one partition "
                        "of the design in this run. Photo rate = 1,000,000/86,400 × 10 (peak hour) = "
                        f"{photo_rate:.1f}/s; reconstruction rate = 1,000 concurrent / {recon_s:.1f}s (the shortest measured "
                        f"end to end) = {recon_rate:.1f}/s; limits {PARTITION_WRITE_LIMIT} write and {PARTITION_READ_LIMIT} read units/s per partition"),
            "photo_rate_per_s": round(photo_rate, 2), "reconstruction_rate_per_s": round(recon_rate, 2),
            "by_target": hottest,
        }

    def partitions_top(self):
        top = {}
        for (target, partition), o in self.recorder.stats.partitions().items():
            top.setdefault(target, []).append({
                "partition": partition, "key_design": key_class(partition, self.recorder.stats.scopes),
                "peak_read_per_s": round(o["peak_read"], 1), "peak_write_per_s": round(o["peak_write"], 1),
                "read_units": round(o["read"], 1), "write_units": round(o["write"], 1)})
        for target in top:
            top[target].sort(key=lambda r: -max(r["peak_read_per_s"] / PARTITION_READ_LIMIT, r["peak_write_per_s"] / PARTITION_WRITE_LIMIT))
            top[target] = top[target][:10]
        return top
