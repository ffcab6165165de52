"""Deploy rehearsal: infra/template.yaml as `sam deploy` would create it, on moto, with
every function run from the workspace's binaries as the Lambda service would run it.

  1. SAM's translator turns the template into CloudFormation; moto's CloudFormation
     creates it (what moto skips is created through the APIs from the same properties).
  2. Every function's configuration, role, layers and event source mappings are read
     back from the deployed stack; each function gets its own role's credentials
     (sts:AssumeRole) while moto enforces IAM.
  3. Each function's binary runs behind a Runtime API, in a sandbox holding only what its
     package holds (a zip: its bootstrap and its layers; an image: what its Dockerfile
     installs), killed at its timeout and at its memory size, fed by a poller that honours
     its event source mapping; scheduled rules fire at their rate; the api function sits
     behind its function URL.
  4. Scenarios, as a client would drive them: a photo upload published; a subject enrolled
     and every photo re-blurred; a function killed at its timeout mid-task and the task
     redelivered to one result; poison and dead letters archived; a 6-photo
     reconstruction with the routing as deployed; and, last, retention and erasure
     carried out by the reaper with its own role, its clock moved two days forward.

Usage: python rehearse.py --target-dir DIR [--profile debug] [--report OUT.json]
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import zipfile

import boto3
from botocore.config import Config

sys.path.insert(0, os.path.dirname(__file__))
import image_rootfs  # noqa: E402
from lambda_service import Function, FunctionUrl, Schedule, SqsPoller  # noqa: E402
from stack import Stack  # noqa: E402
from common import CACHE, REPO, SHARED, STACK, free_port, log  # noqa: E402,F401
from notices import NoticeScenarios  # noqa: E402
from scenarios import Scenarios  # noqa: E402

# moto's services whose IAM checks the rehearsal cannot use (see scripts/moto_serve.py);
# S3 and SQS are checked, resource by resource, against each function's own role.
UNCHECKED = ("dynamodb", "awslambda", "sts", "events", "cloudwatch", "batch", "iam", "cloudformation")


class Clients:
    def __init__(self, endpoint, key, secret, token=None):
        kw = dict(endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=key,
                  aws_secret_access_key=secret, aws_session_token=token,
                  config=Config(retries={"max_attempts": 2}, s3={"addressing_style": "path"}))
        self.s3 = boto3.client("s3", **kw)
        self.sqs = boto3.client("sqs", **kw)
        self.ddb = boto3.client("dynamodb", **kw)
        self.lam = boto3.client("lambda", **kw)
        self.cfn = boto3.client("cloudformation", **kw)
        self.cw = boto3.client("cloudwatch", **kw)
        self.events = boto3.client("events", **kw)
        self.iam = boto3.client("iam", **kw)
        self.sts = boto3.client("sts", **kw)


def cargo_bin(crate_dir):
    text = open(os.path.join(REPO, crate_dir, "Cargo.toml")).read()
    m = re.search(r'\[\[bin\]\]\s*name\s*=\s*"([^"]+)"', text)
    return m.group(1) if m else re.search(r'name\s*=\s*"([^"]+)"', text).group(1)


def crate_of_package(package):
    for d in sorted(os.listdir(os.path.join(REPO, "functions"))):
        toml = os.path.join(REPO, "functions", d, "Cargo.toml")
        if os.path.exists(toml) and f'name = "{package}"' in open(toml).read():
            return f"functions/{d}"
    raise SystemExit(f"no crate for package {package}")


def image_contents(dockerfile):
    """What a container image holds beyond its bootstrap, from its Dockerfile: the crate its
    build stage builds and the Debian packages its runtime stage installs (the tree the
    function runs in is made from them: `image_rootfs.py`)."""
    text = open(os.path.join(REPO, dockerfile)).read().replace("\\\n", " ")
    package = re.search(r"cargo build [^\n]*-p ([\w-]+)", text).group(1)
    _suite, installs = image_rootfs.recipe(os.path.join(REPO, dockerfile))
    return crate_of_package(package), installs


class Rehearsal(Scenarios, NoticeScenarios):
    # moto's DynamoDB reads are written by a fast path (scripts/moto_serve.py); here each
    # is also written by moto's own serializer and the two compared, so the fast path is
    # held to moto's answers. The load rehearsal, which needs the speed, turns it off.
    check_moto_json = True

    def __init__(self, args):
        self.args = args
        self.work = tempfile.mkdtemp(prefix="tessera-rehearsal-")
        self.failures = []
        self.report = {"functions": {}, "scenarios": {}}
        self.mounts = []

    # -- set up ----------------------------------------------------------------------------

    def deploy(self):
        translated = os.path.join(self.work, "template.json")
        packages_json = os.path.join(self.work, "packages.json")
        subprocess.run([os.path.join(CACHE, "venv-sam/bin/python"), os.path.join(REPO, "scripts/translate_template.py"),
                        os.path.join(REPO, "infra/template.yaml"), translated, packages_json], check=True,
                       env=dict(os.environ, AWS_DEFAULT_REGION="us-east-1"))
        template = json.load(open(translated))
        self.packages = json.load(open(packages_json))
        arch = template["Parameters"]["Architecture"]["Default"]
        layer_zip = os.path.join(self.work, f"face-runtime-{arch}.zip")
        subprocess.run([os.path.join(REPO, "scripts/build-face-layer"), arch, layer_zip], check=True,
                       stdout=subprocess.DEVNULL)
        # The layer's ELF check is what stands between a wrong-architecture layer and
        # every face function failing: it must refuse this layer for the other one.
        other = "arm64" if arch == "x86_64" else "x86_64"
        wrong = subprocess.run([sys.executable, os.path.join(REPO, "scripts/face_layer.py"), "--check-only", "--arch", other,
                                "--wheel", "-", "--models", "-", "--out", layer_zip], capture_output=True, text=True)
        self.check(wrong.returncode != 0 and f"not {other}" in wrong.stderr,
                   f"the {arch} layer passed the {other} check: {wrong.stdout}{wrong.stderr}")
        # The layer brings its own C++ runtime (built with --load here: ONNX Runtime was
        # loaded from the layer alone). One that needs a newer glibc than provided.al2023's
        # must be refused: this machine's own is one (Debian bookworm's needs GLIBC_2.36).
        host_cxx = "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"
        if arch == "x86_64" and os.path.exists(host_cxx):
            newer = subprocess.run([os.path.join(REPO, "scripts/build-face-layer"), arch, os.path.join(self.work, "refused.zip")],
                                   env=dict(os.environ, TESSERA_LAYER_LIBSTDCXX=host_cxx), capture_output=True, text=True)
            self.check(newer.returncode != 0 and "provided.al2023 has glibc 2.34" in newer.stderr,
                       f"a layer bundling a libstdc++ that needs a newer glibc was built: {newer.stdout}{newer.stderr[-400:]}")

        port = free_port()
        self.endpoint = f"http://127.0.0.1:{port}"
        self.moto = subprocess.Popen([sys.executable, os.path.join(REPO, "scripts/moto_serve.py"), "127.0.0.1", str(port)],
                                     stdout=open(os.path.join(self.work, "moto.log"), "wb"), stderr=subprocess.STDOUT,
                                     env=dict(os.environ, TESSERA_MOTO_UNCHECKED=",".join(UNCHECKED), TESSERA_MOTO_EXTERNAL_LAMBDA="1",
                                              TESSERA_MOTO_CHECK_JSON="1" if self.check_moto_json else "0",
                                              # AWS managed policies (AWSLambdaSQSQueueExecutionRole …)
                                              MOTO_IAM_LOAD_MANAGED_POLICIES="true"))
        for _ in range(100):
            try:
                urllib.request.urlopen(self.endpoint + "/moto-api/", timeout=1)
                break
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.1)
        boot = Clients(self.endpoint, "rehearsal", "rehearsal")
        # The operator deploying: an IAM user allowed everything, since moto checks IAM.
        boot.iam.create_user(UserName="operator")
        boot.iam.put_user_policy(UserName="operator", PolicyName="all", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
        k = boot.iam.create_access_key(UserName="operator")["AccessKey"]
        self.op = Clients(self.endpoint, k["AccessKeyId"], k["SecretAccessKey"])
        self.op_env = {"AWS_ACCESS_KEY_ID": k["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": k["SecretAccessKey"]}

        self.stack = Stack(self.op, STACK, template, {"Subnets": "subnet-0rehearsal", "SecurityGroups": "sg-0rehearsal"})
        t0 = time.time()
        self.layer_arn = self.stack.create(layer_zip)
        log(f"stack created in {time.time() - t0:.1f}s; applied through APIs: "
            f"{sorted({r['Type'] for r in template['Resources'].values() if r['Type'] in __import__('stack').APPLIED_BY_API})}")
        # From here on moto checks every request's signature and IAM permissions.
        urllib.request.urlopen(urllib.request.Request(
            self.endpoint + "/moto-api/reset-auth", data=b"0", method="POST", headers={"content-type": "text/plain"}))
        self.opt = os.path.join(self.work, "opt")
        with zipfile.ZipFile(layer_zip) as z:
            z.extractall(self.opt)
        os.chmod(os.path.join(self.opt, "lib"), 0o755)

    def start_functions(self):
        target = os.path.join(self.args.target_dir, self.args.profile)
        self.functions = {}
        confs = self.stack.functions()
        for logical, conf in confs.items():
            pkg = self.packages[logical]
            root = os.path.join(self.work, logical, "task")
            os.makedirs(root)
            if "zip" in pkg:
                crate = pkg["zip"]
                if conf.get("PackageType", "Zip") != "Zip":
                    self.fail(f"{logical}: deployed as {conf.get('PackageType')} but built as a zip")
                layers = [l["Arn"] for l in conf.get("Layers", [])]
                path = f"{root}:{self.opt}/bin" if layers else root
                provides = {"face_runtime"} if self.layer_arn in layers and "ORT_DYLIB_PATH" in conf["Environment"]["Variables"] else set()
                opt = self.opt if layers else os.path.join(self.work, "no-layers")
            image_root = None
            if "zip" not in pkg:
                crate, installs = image_contents(pkg["image"])
                if conf.get("PackageType") != "Image":
                    self.fail(f"{logical}: built as an image but deployed as {conf.get('PackageType')}")
                provides = {"colmap"} if "colmap" in installs else set()
                opt = "/opt"
                image_root = self.image_tree(pkg["image"])
            binary = os.path.join(target, cargo_bin(crate))
            if not os.path.exists(binary):
                raise SystemExit(f"{binary} is not built: cargo build -p <{crate}>")
            if image_root:
                # The image's own tree: the bootstrap where its Dockerfile copies it, and
                # only what its packages installed on PATH.
                task = os.path.join(image_root, "var/task")
                os.makedirs(task, exist_ok=True)
                inside = os.path.join(task, "bootstrap")
                if os.path.exists(inside):
                    os.remove(inside)
                try:
                    os.link(binary, inside)
                except OSError:
                    shutil.copy2(binary, inside)
                path = "/var/task:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
                sandbox = root + ".sandbox"
                bootstrap, task_root = "/var/task/bootstrap", "/var/task"
            else:
                os.symlink(binary, os.path.join(root, "bootstrap"))
                bootstrap, task_root, sandbox = os.path.join(root, "bootstrap"), root, root + ".sandbox"
            creds = self.op.sts.assume_role(RoleArn=conf["Role"], RoleSessionName=conf["FunctionName"][:64])["Credentials"]
            env = {
                "AWS_ACCESS_KEY_ID": creds["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": creds["SecretAccessKey"],
                "AWS_SESSION_TOKEN": creds["SessionToken"], "AWS_REGION": "us-east-1",
                "AWS_DEFAULT_REGION": "us-east-1",
                # The one thing Lambda would not set: where AWS is.
                "AWS_ENDPOINT_URL": self.endpoint,
                # The webhook scenario's receiver is on loopback, which an operator must
                # allow (deployed functions refuse private targets).
                "TESSERA_WEBHOOKS_ALLOW_PRIVATE": "1",
            }
            env["_SANDBOX"] = sandbox
            f = Function(conf, bootstrap, task_root, path, env, opt, image_root)
            f.provides = provides
            f.role_clients = Clients(self.endpoint, creds["AccessKeyId"], creds["SecretAccessKey"], creds["SessionToken"])
            self.functions[logical] = f
        by_arn = {f.arn: f for f in self.functions.values()}
        self.pollers = []
        for m in self.stack.mappings():
            f = by_arn[m["FunctionArn"]]
            queue_name = m["EventSourceArn"].rsplit(":", 1)[1]
            # The mapping reads its queue with the function's role, as Lambda does.
            account = m["EventSourceArn"].split(":")[4]
            url = f"{self.endpoint}/{account}/{queue_name}"
            p = SqsPoller(m, f, f.role_clients.sqs, url)
            p.queue_name = queue_name
            p.start()
            self.pollers.append(p)
        self.schedules = []
        for rule, seconds, arn in self.stack.schedules():
            s = Schedule(rule, seconds, by_arn[arn])
            s.start()
            self.schedules.append(s)
        api = self.functions["ApiFunction"]
        mode = self.op.lam.get_function_url_config(FunctionName=api.name).get("InvokeMode", "BUFFERED")
        self.url = FunctionUrl(api, mode)
        threading.Thread(target=self.url.serve_forever, daemon=True).start()
        log(f"{len(self.functions)} functions, {len(self.pollers)} event source mappings, "
            f"{len(self.schedules)} schedules, function URL {self.url.url} ({mode})")

    # -- checks ----------------------------------------------------------------------------

    def fail(self, msg):
        log(f"FAIL: {msg}")
        self.failures.append(msg)

    def check(self, cond, msg):
        if not cond:
            self.fail(msg)
        return cond

    def check_placements(self):
        """No task kind is routed to a function (or Batch) lacking what it needs."""
        out = subprocess.run([os.path.join(self.args.target_dir, self.args.profile, "tessera"), "aws", "routes", "--json"],
                             capture_output=True, text=True, check=True)
        by_queue = {p.queue_name: p.f for p in self.pollers}
        worker = self.stack._condition_holds({"Condition": "HasWorker"})
        checked = 0
        for place in json.loads(out.stdout):
            for klass, queue in place["queues"].items():
                needs = set(place["needs"])
                name = f"{STACK}-{queue}"
                if queue == "orchestrator":
                    # The orchestrator hands the task to Batch: the worker image (COLMAP
                    # from its base image) or, in a stack without one, a permanent failure
                    # that says so.
                    provides = {"colmap"} if worker else needs
                else:
                    f = by_queue.get(name)
                    if not self.check(f is not None, f"{place['kind']} ({klass}) goes to {name}, which no function consumes"):
                        continue
                    provides = f.provides
                self.check(needs <= provides,
                           f"{place['kind']} ({klass}) goes to {name}, whose package lacks {sorted(needs - provides)}")
                checked += 1
        log(f"placements: {checked} (kind, class) routes checked against the deployed packages")

    # -- a client of the deployed API ----------------------------------------------------------

    def http(self, method, path, body=None, headers=None, raw=False, key=True):
        """`key`: True for the rehearsal's admin key, False for none, or another key."""
        h = dict(headers or {})
        if key:
            h["authorization"] = f"Bearer {key if isinstance(key, str) else self.api_key}"
        data = body
        if body is not None and not isinstance(body, bytes):
            data = json.dumps(body).encode()
            h.setdefault("content-type", "application/json")
        req = urllib.request.Request(self.url.url + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                status, payload = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, payload = e.code, e.read()
        if raw:
            return status, payload
        try:
            return status, json.loads(payload or b"null")
        except ValueError:
            return status, payload

    def upload_blob(self, data):
        import hashlib
        sha = hashlib.sha256(data).hexdigest()
        s, u = self.http("POST", "/v1/uploads", {"expected_size": len(data), "expected_sha": sha})
        assert s == 201, (s, u)
        url = f"/v1/uploads/{u['upload_id']}"
        chunk = 256 * 1024
        for a in range(0, len(data), chunk):
            b = min(a + chunk, len(data)) - 1
            s, r = self.http("PATCH", url, data[a:b + 1], {"content-range": f"bytes {a}-{b}/{len(data)}",
                                                             "content-type": "application/octet-stream"})
            assert s == 200, (s, r)
        s, r = self.http("POST", url + ":finalize")
        assert s in (200, 201), (s, r)
        return r["blob_sha"]

    def wait(self, what, cond, timeout):
        until = time.time() + timeout
        last = None
        while time.time() < until:
            last = cond()
            if last:
                return last
            time.sleep(0.5)
        self.fail(f"timed out after {timeout}s waiting for {what}")
        return None

    # -- run -------------------------------------------------------------------------------

    def create_api_key(self, tenant="local"):
        """An admin API key of `tenant`, made as an operator makes one (`tessera aws create-key`)."""
        tessera = os.path.join(self.args.target_dir, self.args.profile, "tessera")
        env = dict(os.environ, **self.op_env, AWS_ENDPOINT_URL=self.endpoint, AWS_REGION="us-east-1",
                   TESSERA_TABLE=self.stack.physical["StateTable"], TESSERA_BUCKET=self.stack.physical["PhotoBucket"])
        return subprocess.run([tessera, "aws", "create-key", "--admin", "--tenant", tenant], env=env, capture_output=True,
                              text=True, check=True).stdout.strip()

    def run(self):
        self.deploy()
        self.start_functions()
        self.check_placements()
        self.api_key = self.create_api_key()
        s, h = self.http("GET", "/healthz", key=False)
        self.check(s == 200, f"/healthz through the function URL: {s} {h}")
        errors = []

        def guarded(fn):
            def go():
                try:
                    fn()
                except Exception as e:  # noqa: BLE001 - a scenario's crash is a failure, reported
                    import traceback
                    errors.append(f"{fn.__name__}: {e!r}\n{traceback.format_exc()}")
            return go
        threads = [threading.Thread(target=guarded(f))
                   for f in (self.scenario_reconstruction, self.scenario_photos, self.scenario_webhooks)]
        for t in threads:
            t.start()
        guarded(self.scenario_dead_letters)()
        for t in threads:
            t.join()
        # Last, alone: the reaper's clock is moved forward, which would reap the other
        # scenarios' running tasks.
        guarded(self.scenario_expiry)()
        for e in errors:
            self.fail(e)
        # A mapping that cannot read or delete its queue would be refused by Lambda (or
        # redeliver forever): any poller error fails the rehearsal.
        for p in self.pollers:
            for e in p.errors[:3]:
                self.fail(f"event source mapping of {p.queue_name}: {e}")
        self.report_functions()

    def report_functions(self):
        """Each function's invocations, failures, timeouts, peak memory and mean duration."""
        for logical, f in self.functions.items():
            durations = [d for _, d, o in f.invocations if o == "ok"]
            self.report["functions"][logical] = {
                "memory_mb": f.memory_mb, "timeout_s": f.timeout_s, "invocations": len(f.invocations),
                "failed": [o for _, _, o in f.invocations if o != "ok"][:5], "timeouts": f.timeouts,
                "peak_rss_mb": round(f.peak_kib / 1024, 1),
                "mean_ms": round(1000 * sum(durations) / len(durations)) if durations else None,
            }

    def image_tree(self, dockerfile):
        """The image's tree (made or found by `image_rootfs.py`), with /proc and /dev
        bound in for this run. Building one needs root (debootstrap, chroot, mount)."""
        if os.geteuid() != 0:
            raise SystemExit(f"{dockerfile}: the rehearsal runs container-image functions chrooted in the image's tree, which needs root")
        tree = image_rootfs.build(os.path.join(REPO, dockerfile), log=log)
        mount = image_rootfs.mounted(tree).__enter__()
        self.mounts.append(mount)
        self.report.setdefault("images", {})[dockerfile] = {"tree": tree, "recipe": " ".join(map(str, image_rootfs.recipe(os.path.join(REPO, dockerfile))))}
        return tree

    def stop(self):
        for p in self.pollers if hasattr(self, "pollers") else []:
            p.stopping = True
        for s in self.schedules if hasattr(self, "schedules") else []:
            s.stopping = True
        for f in getattr(self, "functions", {}).values():
            f.stop()
        if hasattr(self, "moto"):
            self.moto.kill()
        for m in getattr(self, "mounts", []):
            m.__exit__(None, None, None)
        if self.failures or os.environ.get("TESSERA_REHEARSAL_KEEP") == "1":
            log(f"logs kept in {self.work}")
        else:
            shutil.rmtree(self.work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target-dir", default=os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target")))
    ap.add_argument("--profile", default="debug")
    ap.add_argument("--report")
    args = ap.parse_args()
    r = Rehearsal(args)
    t0 = time.time()
    try:
        r.run()
    except BaseException:
        r.failures.append("the rehearsal crashed")
        raise
    finally:
        r.stop()
    r.report["seconds"] = round(time.time() - t0, 1)
    r.report["failures"] = r.failures
    text = json.dumps(r.report, indent=1)
    if args.report:
        open(args.report, "w").write(text)
    print(text)
    if r.failures:
        sys.exit(f"deploy rehearsal: {len(r.failures)} failure(s)")
    log(f"passed in {r.report['seconds']}s")


if __name__ == "__main__":
    main()
