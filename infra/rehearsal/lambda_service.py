"""What the Lambda service does for a deployed function, on this machine: the Runtime API
(next / response / error, response streaming included) for each instance, a sandbox
that holds only what the function's package holds, the kill at its timeout and at its
memory size, the SQS event source mapping's poller, scheduled rules, and the function
URL in front of a function.
"""

import base64
import http.server
import json
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
import urllib.parse
import uuid

RUNTIME = "/2018-06-01/runtime"
EXTENSION = "/2020-01-01/extension"


# Lambda gives a runtime's initialisation its own limit; the function's timeout counts
# from the moment the invocation is handed to the runtime.
INIT_TIMEOUT_S = 10.0


class Invocation:
    def __init__(self, payload, timeout_s):
        self.id = str(uuid.uuid4())
        self.payload = payload
        self.timeout_s = timeout_s
        self.delivered_at = None
        self.deadline_ms = None
        self.done = threading.Event()
        self.body = None
        self.streaming = False
        self.error = None

    def deliver(self):
        self.delivered_at = time.time()
        self.deadline_ms = int((self.delivered_at + self.timeout_s) * 1000)


class Truncated(Exception):
    """The sender hung up before the end of a chunked body."""


def read_body(handler, trailers=None):
    """The request body, chunked (response streaming) or sized; a chunked body's
    trailers go into `trailers`."""
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        out = bytearray()
        while True:
            line = handler.rfile.readline()
            if not line:
                raise Truncated("the connection closed before the last chunk")
            size = int(line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while True:
                    t = handler.rfile.readline()
                    if t in (b"\r\n", b"\n", b""):
                        break
                    k, _, v = t.decode(errors="replace").partition(":")
                    if trailers is not None:
                        trailers[k.strip().lower()] = v.strip()
                return bytes(out)
            chunk = handler.rfile.read(size)
            if len(chunk) < size:
                raise Truncated("the connection closed inside a chunk")
            out += chunk
            handler.rfile.readline()
    return handler.rfile.read(int(handler.headers.get("Content-Length") or 0))


class QuietServer(http.server.ThreadingHTTPServer):
    """A client that hangs up (a killed function, a finished scenario) is not an error."""

    daemon_threads = True

    def handle_error(self, request, client_address):
        import sys
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


class RuntimeApi(QuietServer):

    def __init__(self, instance):
        self.instance = instance
        super().__init__(("127.0.0.1", 0), RuntimeHandler)


class RuntimeHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def reply(self, status, body=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        inst = self.server.instance
        if self.path == f"{EXTENSION}/event/next":
            # An extension (lambda_runtime's graceful-shutdown hook) waits for SHUTDOWN;
            # the rehearsal ends environments with SIGKILL, so none comes.
            inst.stopped.wait()
            return self.reply(200, b'{"eventType":"SHUTDOWN","shutdownReason":"spindown"}')
        if self.path != f"{RUNTIME}/invocation/next":
            return self.reply(404)
        inv = inst.pending.get()
        inv.deliver()
        inst.current = inv
        self.reply(200, inv.payload, [
            ("Lambda-Runtime-Aws-Request-Id", inv.id),
            ("Lambda-Runtime-Deadline-Ms", str(inv.deadline_ms)),
            ("Lambda-Runtime-Invoked-Function-Arn", inst.function.arn),
            ("Lambda-Runtime-Trace-Id", f"Root=1-{uuid.uuid4().hex[:8]}-{uuid.uuid4().hex[:24]}"),
            ("Content-Type", "application/json"),
        ])

    def do_POST(self):
        inst = self.server.instance
        trailers = {}
        try:
            body = read_body(self, trailers)
        except Truncated as e:
            inv = inst.current
            if inv is not None:
                inv.error = f"response stream cut off: {e}"
                inst.current = None
                inv.done.set()
            return
        if self.path == f"{EXTENSION}/register":
            return self.reply(200, json.dumps({"functionName": inst.function.name, "functionVersion": "$LATEST",
                                               "handler": inst.function.conf.get("Handler", "")}).encode(),
                              [("Lambda-Extension-Identifier", str(uuid.uuid4())), ("Content-Type", "application/json")])
        parts = self.path[len(RUNTIME):].strip("/").split("/")
        if parts == ["init", "error"]:
            inst.init_error = body.decode(errors="replace")
            return self.reply(202)
        if len(parts) == 3 and parts[0] == "invocation":
            inv = inst.current
            if inv is None or inv.id != parts[1]:
                return self.reply(400, b'{"errorType":"InvalidRequestID"}')
            if parts[2] == "response":
                inv.streaming = self.headers.get("Lambda-Runtime-Function-Response-Mode") == "streaming"
                inv.body = body
                if "lambda-runtime-function-error-type" in trailers:
                    inv.error = (f"{trailers['lambda-runtime-function-error-type']}: "
                                 f"{trailers.get('lambda-runtime-function-error-body', '')}")
            else:
                inv.error = body.decode(errors="replace")
            inst.current = None
            inv.done.set()
            return self.reply(202)
        self.reply(404)


def session_rss_kib(sid):
    """Resident memory of every process of the environment's session (it starts one;
    COLMAP and anything it starts stay in it, even when reparented)."""
    members = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[3]) == sid:
                        members.append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    total = 0
    for p in members:
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def session_cpu_s(sid):
    """CPU seconds (user and system, children that were waited for included) of every
    process of the environment's session so far."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[3]) == sid:
                    total += sum(int(x) for x in fields[11:15])
            except (OSError, IndexError, ValueError):
                pass
    return total / tick


class Instance:
    """One execution environment: a process of the function's bootstrap and its Runtime API."""

    def __init__(self, function, n):
        self.function = function
        self.pending = queue.Queue()
        self.current = None
        self.init_error = None
        self.stopped = threading.Event()
        self.api = RuntimeApi(self)
        threading.Thread(target=self.api.serve_forever, daemon=True).start()
        root = function.image_root
        # A container image's function runs chrooted in the image's tree, its /tmp there.
        tmp_in = f"/tmp/instance-{n}" if root else os.path.join(function.sandbox, f"tmp-{n}")
        self.tmp = os.path.join(root, tmp_in.lstrip("/")) if root else tmp_in
        shutil.rmtree(self.tmp, ignore_errors=True)
        os.makedirs(self.tmp)
        env = dict(function.env)
        env.update({
            "AWS_LAMBDA_RUNTIME_API": f"127.0.0.1:{self.api.server_address[1]}",
            "AWS_LAMBDA_LOG_STREAM_NAME": f"2026/12/01/[$LATEST]{uuid.uuid4().hex}",
            "TMPDIR": tmp_in,
        })
        self.log = open(os.path.join(function.sandbox, f"instance-{n}.log"), "ab")
        if root:
            # The image's entrypoint in its WORKDIR (/tmp), as Lambda starts it.
            command, cwd = ["chroot", root, "/bin/sh", "-c", f"cd /tmp && exec {function.bootstrap}"], "/"
        else:
            command, cwd = [function.bootstrap], function.task_root
        self.proc = subprocess.Popen(
            command, env=env, cwd=cwd,
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.started = time.time()
        self.peak_kib = 0
        self.killed_for = None
        self.retired = False
        self.kill_lock = threading.Lock()
        threading.Thread(target=self._watch_memory, daemon=True).start()

    def _watch_memory(self):
        limit = self.function.memory_mb * 1024
        while self.proc.poll() is None:
            rss = session_rss_kib(self.proc.pid)
            self.peak_kib = max(self.peak_kib, rss)
            self.function.peak_kib = max(self.function.peak_kib, rss)
            if rss > limit:
                self.kill(f"Runtime exited: memory {rss // 1024} MB over the function's {self.function.memory_mb} MB")
            time.sleep(0.1)
        self.kill(f"Runtime exited with {self.proc.poll()}")

    def kill(self, why):
        """End the environment (its whole session: COLMAP too); the first reason stays."""
        with self.kill_lock:
            if self.killed_for is not None:
                return
            self.killed_for = why
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
            self.stopped.set()
            self.api.shutdown()
            self.api.server_close()
            shutil.rmtree(self.tmp, ignore_errors=True)

    def alive(self):
        return self.proc.poll() is None and self.killed_for is None


class Function:
    """A deployed function: its configuration as read back, its package as a sandbox."""

    def __init__(self, conf, bootstrap, task_root, path, env_extra, opt_dir, image_root=None):
        """`image_root`: a container image's tree (`image_rootfs.py`), in which the
        function runs chrooted, its `bootstrap`, `task_root`, `path` and `opt_dir`
        paths inside it; `None` for a zip function, run on this machine."""
        self.image_root = image_root
        self.name = conf["FunctionName"]
        self.arn = conf["FunctionArn"]
        self.conf = conf
        self.timeout_s = conf["Timeout"]
        self.memory_mb = conf["MemorySize"]
        self.bootstrap = bootstrap
        self.task_root = task_root
        self.sandbox = env_extra.pop("_SANDBOX", task_root + ".sandbox")
        os.makedirs(self.sandbox, exist_ok=True)
        env = {}
        for k, v in conf.get("Environment", {}).get("Variables", {}).items():
            # Layers are extracted under /opt; here under opt_dir.
            env[k] = opt_dir + v[len("/opt"):] if v.startswith("/opt/") else v
        env.update({
            "AWS_LAMBDA_FUNCTION_NAME": self.name,
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(self.memory_mb),
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{self.name}",
            "LAMBDA_TASK_ROOT": task_root,
            "_HANDLER": conf.get("Handler", ""),
            "TZ": ":UTC",
            "LANG": "en_US.UTF-8",
            "PATH": path,
            "LD_LIBRARY_PATH": f"{opt_dir}/lib:{task_root}",
        })
        env.update(env_extra)
        self.env = env
        self.lock = threading.Condition()
        self.busy = set()
        self.instances = []
        self.peak_kib = 0
        self.invocations = []  # (started, seconds, outcome)
        self.cpu = []  # (started, CPU seconds of the environment's session during it)
        self.timeouts = 0

    # Environments of one function at once (Lambda scales further; four is enough for
    # the scenarios' concurrency and this machine's memory).
    MAX_INSTANCES = 4

    def update_timeout(self, seconds):
        """A configuration change: new invocations run in new environments, and running
        ones keep the timeout they started with."""
        with self.lock:
            self.timeout_s = seconds
            for i in self.instances:
                i.retired = True
                if i not in self.busy:
                    i.kill("retired after a configuration change")

    def _acquire(self):
        with self.lock:
            while True:
                free = [i for i in self.instances if i.alive() and not i.retired and i not in self.busy]
                if free:
                    inst = free[0]
                    break
                live = [i for i in self.instances if i.alive() and not i.retired]
                if len(live) < self.MAX_INSTANCES:
                    inst = Instance(self, len(self.instances))
                    self.instances.append(inst)
                    break
                self.lock.wait(0.5)
            self.busy.add(inst)
            return inst, self.timeout_s

    def _release(self, inst):
        with self.lock:
            self.busy.discard(inst)
            if inst.retired and inst.alive():
                inst.kill("retired after a configuration change")
            self.lock.notify_all()

    def invoke(self, payload: bytes):
        """Run one invocation; returns (ok, body, streaming, error)."""
        inst, timeout_s = self._acquire()
        try:
            inv = Invocation(payload, timeout_s)
            cpu_before = session_cpu_s(inst.proc.pid)
            inst.pending.put(inv)
            started = time.time()
            while not inv.done.wait(0.05):
                now = time.time()
                if inv.delivered_at is None and now > inst.started + INIT_TIMEOUT_S and inst.alive():
                    inst.kill(f"Runtime init did not finish within {INIT_TIMEOUT_S:.0f} s")
                if inv.delivered_at is not None and now > inv.delivered_at + timeout_s:
                    self.timeouts += 1
                    inst.kill(f"Task timed out after {timeout_s:.2f} seconds")
                    break
                if not inst.alive():
                    break
            seconds = time.time() - started
            self.cpu.append((started, max(0.0, session_cpu_s(inst.proc.pid) - cpu_before)))
            if inv.done.is_set() and inv.error is None and inst.killed_for is None:
                self.invocations.append((started, seconds, "ok"))
                self._observe(started, seconds, "ok", payload)
                return True, inv.body, inv.streaming, None
            why = inv.error or inst.killed_for or inst.init_error or f"Runtime exited with {inst.proc.poll()}"
            self.invocations.append((started, seconds, why))
            self._observe(started, seconds, why, payload)
            return False, None, False, why
        finally:
            self._release(inst)

    def _observe(self, started, seconds, outcome, payload):
        """Tell the observer (a load rehearsal's, if it set one) of an invocation."""
        observer = getattr(self, "observer", None)
        if observer is not None:
            observer(started, seconds, outcome, payload)

    def stop(self):
        for i in self.instances:
            i.kill("stopped")


class SqsPoller(threading.Thread):
    """The event source mapping: batches of received messages in, the ones the function
    did not list in `batchItemFailures` deleted; nothing deleted when the invocation
    failed (the messages come back after their visibility timeout)."""

    def __init__(self, mapping, function, sqs, queue_url, region="us-east-1"):
        super().__init__(daemon=True)
        self.m = mapping
        self.f = function
        self.sqs = sqs
        self.url = queue_url
        self.region = region
        self.stopping = False
        self.paused = False
        self.batches = 0
        self.errors = []

    def run(self):
        while not self.stopping:
            try:
                self._poll()
            except Exception as e:  # noqa: BLE001 - the service keeps polling, and says why
                self.errors.append(repr(e))
                print(f"[rehearsal] poller of {self.m['EventSourceArn']}: {e!r}", flush=True)
                time.sleep(1)

    def _poll(self):
        size = self.m.get("BatchSize", 10)
        window = self.m.get("MaximumBatchingWindowInSeconds", 0) or 0
        partial = "ReportBatchItemFailures" in self.m.get("FunctionResponseTypes", [])
        while not self.stopping:
            if self.paused:
                time.sleep(0.2)
                continue
            msgs = self._receive(min(size, 10), 1)
            if not msgs:
                continue
            until = time.time() + window
            while len(msgs) < size and time.time() < until:
                more = self._receive(min(size - len(msgs), 10), 0)
                if not more:
                    time.sleep(0.1)
                msgs += more
            event = {"Records": [self._record(m) for m in msgs]}
            ok, body, _, _ = self.f.invoke(json.dumps(event).encode())
            self.batches += 1
            if not ok:
                continue
            failed = batch_item_failures(body, {m["MessageId"] for m in msgs}) if partial else set()
            if failed is None:
                continue  # the whole batch failed
            done = [m for m in msgs if m["MessageId"] not in failed]
            for i in range(0, len(done), 10):
                out = self.sqs.delete_message_batch(QueueUrl=self.url, Entries=[
                    {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(done[i:i + 10])])
                for f in out.get("Failed", []):
                    self.errors.append(f"deleting a processed message: {f}")

    def _receive(self, n, wait):
        return self.sqs.receive_message(
            QueueUrl=self.url, MaxNumberOfMessages=n, WaitTimeSeconds=wait,
            MessageSystemAttributeNames=["All"], MessageAttributeNames=["All"]).get("Messages", [])

    def _record(self, m):
        return {
            "messageId": m["MessageId"], "receiptHandle": m["ReceiptHandle"], "body": m["Body"],
            "attributes": m.get("Attributes", {}),
            "messageAttributes": {k: {"stringValue": v.get("StringValue"), "dataType": v["DataType"]}
                                  for k, v in m.get("MessageAttributes", {}).items()},
            "md5OfBody": m["MD5OfBody"], "eventSource": "aws:sqs",
            "eventSourceARN": self.m["EventSourceArn"], "awsRegion": self.region,
        }


def batch_item_failures(body, ids):
    """The messages a partial batch response names, as Lambda reads it: no response, an
    empty or null list is full success; anything unreadable, or an identifier that is
    empty or not in the batch, fails the whole batch (`None`)."""
    if not body or not body.strip():
        return set()
    try:
        response = json.loads(body)
    except ValueError:
        return None
    if response is None:
        return set()
    if not isinstance(response, dict):
        return None
    items = response.get("batchItemFailures")
    if items is None:
        return set()
    if not isinstance(items, list):
        return None
    failed = set()
    for x in items:
        ident = x.get("itemIdentifier") if isinstance(x, dict) else None
        if not ident or ident not in ids:
            return None
        failed.add(ident)
    return failed


class Schedule(threading.Thread):
    """A `rate(...)` rule: the target invoked with a scheduled event at that rate."""

    def __init__(self, rule, seconds, function):
        super().__init__(daemon=True)
        self.rule, self.seconds, self.f = rule, seconds, function
        self.stopping = False
        self.fired = 0

    def run(self):
        next_at = time.time() + self.seconds
        while not self.stopping:
            if time.time() < next_at:
                time.sleep(0.2)
                continue
            next_at += self.seconds
            self.fired += 1
            self.f.invoke(json.dumps({
                "version": "0", "id": str(uuid.uuid4()), "detail-type": "Scheduled Event",
                "source": "aws.events", "account": "123456789012",
                "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "region": "us-east-1",
                "resources": [f"arn:aws:events:us-east-1:123456789012:rule/{self.rule}"], "detail": {},
            }).encode())


class FunctionUrl(QuietServer):
    """A function URL (payload format 2.0) in front of `function`, with response streaming."""

    def __init__(self, function, invoke_mode):
        self.function = function
        self.invoke_mode = invoke_mode
        super().__init__(("127.0.0.1", 0), FunctionUrlHandler)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"


class FunctionUrlHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _any(self):
        body = read_body(self)
        u = urllib.parse.urlsplit(self.path)
        headers = {}
        for k, v in self.headers.items():
            k = k.lower()
            headers[k] = f"{headers[k]},{v}" if k in headers else v
        text = None
        binary = False
        if body:
            try:
                text = body.decode()
            except UnicodeDecodeError:
                text, binary = base64.b64encode(body).decode(), True
        event = {
            "version": "2.0", "routeKey": "$default", "rawPath": u.path, "rawQueryString": u.query,
            "headers": headers,
            "queryStringParameters": {k: v[-1] for k, v in urllib.parse.parse_qs(u.query).items()} or None,
            "requestContext": {
                "accountId": "anonymous", "apiId": "rehearsal", "domainName": headers.get("host", ""),
                "domainPrefix": "rehearsal",
                "http": {"method": self.command, "path": u.path, "protocol": "HTTP/1.1",
                         "sourceIp": "127.0.0.1", "userAgent": headers.get("user-agent", "")},
                "requestId": str(uuid.uuid4()), "routeKey": "$default", "stage": "$default",
                "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime()),
                "timeEpoch": int(time.time() * 1000),
            },
            "body": text, "isBase64Encoded": binary,
        }
        ok, out, streaming, error = self.server.function.invoke(json.dumps(event).encode())
        if not ok:
            return self._send(502, {"content-type": "application/json"}, json.dumps({"Message": error}).encode())
        # A RESPONSE_STREAM URL reads the prelude-and-body form; a BUFFERED one reads the
        # JSON response object, whatever the function meant to send.
        if self.server.invoke_mode == "RESPONSE_STREAM" and streaming:
            prelude, sep, payload = out.partition(b"\0" * 8)
            if not sep:
                return self._send(502, {}, b"a streamed response without its prelude")
            meta = json.loads(prelude or b"{}")
        else:
            try:
                meta = json.loads(out)
                payload = meta.get("body") or ""
                payload = base64.b64decode(payload) if meta.get("isBase64Encoded") else payload.encode()
            except (ValueError, AttributeError, TypeError):
                return self._send(502, {}, b"the function's response is not a function URL response")
        headers = [(k, v) for k, vs in (meta.get("headers") or {}).items()
                   for v in (vs if isinstance(vs, list) else [vs])]
        headers += [("set-cookie", c) for c in meta.get("cookies") or []]
        self._send(meta.get("statusCode", 200), headers, payload)

    def _send(self, status, headers, body):
        self.send_response(status)
        for k, v in (headers.items() if isinstance(headers, dict) else headers):
            if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(k, str(v))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _any
