"""A recording proxy in front of the AWS-compatible server: every DynamoDB, SQS and S3
request the functions (and the clients given its address) make passes through it, is
forwarded unchanged (headers and body as signed, so moto checks the same signatures and
IAM), and is counted: per service, operation and caller, and for DynamoDB the capacity
units AWS would bill (`capacity.py`) per table, index and partition key, in 1-second
windows, with every item's size.

What a write costs depends on the item before and after it (the larger size, whether an
index key moved), which the request alone does not say. So a write is serialised with
the other writes through the proxy: the items it names are read from moto directly
(uncounted) just before it is forwarded and just after it returns. moto serialises
DynamoDB requests anyway (scripts/moto_serve.py), so this costs the run little.

Callers are told apart by the access key that signed the request (each function has
its own role's credentials) and, for one key, by the SDK that signed it: the event
source mappings' pollers are Python (boto3) on the function's role, the functions Rust.
"""

import http.client
import http.server
import json
import re
import threading
import time
import urllib.parse
from collections import defaultdict

import capacity

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "trailer", "upgrade"}


def key_class(pk, scopes=None):
    """A partition key's design, with the ids in it replaced: `PHOTO#<id>`,
    `DUE#running#<n>`, `PROJECT#<project>#PHOTOS`. `scopes` names the ids that many
    items share (a project's: id -> `<project>`); every other id is one item's own
    (`<id>`). A design with an `<id>` has a partition per item, which more load spreads
    over more partitions; one without is shared by every item of its scope, and takes
    more load as the load grows. Partitions of one design are what the extrapolation
    scales."""
    out = []
    for part in pk.split("#"):
        if scopes and part in scopes:
            out.append(scopes[part])
        elif re.fullmatch(r"\d{1,3}", part):
            out.append("<n>")
        elif len(part) >= 8 and re.search(r"\d", part):
            out.append("<id>")
        else:
            out.append(part)
    return "#".join(out)


class Stats:
    """What the proxy counted, by phase (set by the driver)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.phase = "setup"
        # (phase, target, partition) -> {second: [read units, write units]}
        self.windows = defaultdict(lambda: defaultdict(lambda: [0.0, 0.0]))
        # (phase, service, operation, caller) -> requests
        self.requests = defaultdict(int)
        # key class -> (largest item's bytes, its key)
        self.items = {}
        # key class -> [items written, their bytes summed]: a design's typical size, which
        # sets what each of its writes (and each condition check on it) costs
        self.sizes = defaultdict(lambda: [0, 0])
        # ids shared by many items (a project's), for key_class
        self.scopes = {}
        # (phase, table partition, action) -> write units: what kind of write costs what
        # (action: Put/Update/Delete/ConditionCheck, "in a transaction of n" or "alone")
        self.actions = defaultdict(float)
        # (service, operation) -> seconds spent answering (the proxy's accounting included)
        self.latency = defaultdict(float)
        self.errors = []

    def units(self, target, partition, read=0.0, write=0.0):
        second = int(time.time())
        with self.lock:
            w = self.windows[(self.phase, target, partition)][second]
            w[0] += read
            w[1] += write

    def action(self, partition, action, units):
        with self.lock:
            self.actions[(self.phase, partition, action)] += units

    def actions_by_design(self, phases):
        """Write units per (key design, action) over `phases`, the table's own (an index
        entry's writes are counted with their index)."""
        out = defaultdict(float)
        with self.lock:
            for (phase, partition, action), units in self.actions.items():
                if phase in phases:
                    out[(key_class(partition, self.scopes), action)] += units
        return out

    def request(self, service, op, caller):
        with self.lock:
            self.requests[(self.phase, service, op, caller)] += 1

    def item(self, key, size):
        cls = key_class(key, self.scopes)
        with self.lock:
            if size > self.items.get(cls, (0, None))[0]:
                self.items[cls] = (size, key)
            self.sizes[cls][0] += 1
            self.sizes[cls][1] += size

    # -- summaries ---------------------------------------------------------------------------

    def phases(self):
        return sorted({p for p, _, _ in self.windows} | {k[0] for k in self.requests})

    def partitions(self, phases=None):
        """Per (target, partition): total read and write units, and the peak of each in
        one 1-second window, over the given phases."""
        out = {}
        with self.lock:
            for (phase, target, partition), seconds in self.windows.items():
                if phases is not None and phase not in phases:
                    continue
                o = out.setdefault((target, partition), {"read": 0.0, "write": 0.0, "peak_read": 0.0, "peak_write": 0.0,
                                                         "seconds": defaultdict(lambda: [0.0, 0.0])})
                for s, (r, w) in seconds.items():
                    o["read"] += r
                    o["write"] += w
                    o["seconds"][s][0] += r
                    o["seconds"][s][1] += w
        for o in out.values():
            o["peak_read"] = max((r for r, _ in o["seconds"].values()), default=0.0)
            o["peak_write"] = max((w for _, w in o["seconds"].values()), default=0.0)
            del o["seconds"]
        return out

    def request_counts(self, phases=None):
        out = defaultdict(int)
        with self.lock:
            for (phase, service, op, caller), n in self.requests.items():
                if phases is None or phase in phases:
                    out[(service, op, caller)] += n
        return out


class Recorder(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream_port, direct_ddb, callers):
        """`direct_ddb`: a boto3 DynamoDB client of moto itself (its reads are not
        counted); `callers`: access key id -> the caller's name."""
        self.upstream_port = upstream_port
        self.ddb = direct_ddb
        self.callers = callers
        self.stats = Stats()
        self.write_lock = threading.Lock()
        self.tables = {}
        self.local = threading.local()
        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self):
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def handle_error(self, request, client_address):
        import sys
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)

    def table(self, name):
        if name not in self.tables:
            self.tables[name] = capacity.TableDesign(self.ddb.describe_table(TableName=name))
        return self.tables[name]

    def forward(self, method, path, headers, body):
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=120)
        for attempt in range(2):
            try:
                conn.request(method, path, body=body, headers=headers)
                r = conn.getresponse()
                data = r.read()
                return r.status, r.getheaders(), data
            except (http.client.HTTPException, ConnectionError, OSError):
                conn.close()
                conn = self.local.conn = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=120)
                if attempt:
                    raise

    # -- DynamoDB accounting -------------------------------------------------------------------

    def _get_all(self, actions):
        """The items `actions` name, as they are now: one consistent BatchGetItem (a
        transaction names at most 100 items, each once) instead of a GetItem each, since
        every write waits for these reads under the write lock."""
        found, ask = {}, {}
        for _, table, key in actions:
            ask.setdefault(table, {"Keys": [], "ConsistentRead": True})["Keys"].append(key)
        while ask:
            out = self.ddb.batch_get_item(RequestItems=ask)
            for table, items in out.get("Responses", {}).items():
                design = self.table(table)
                for item in items:
                    found[(table, tuple(capacity._scalar(item[k]) for k in design.keys))] = item
            ask = out.get("UnprocessedKeys") or {}
        return [found.get((table, tuple(capacity._scalar(key[k]) for k in self.table(table).keys)))
                for _, table, key in actions]

    def dynamodb(self, op, req, send):
        """Forward a DynamoDB request through `send()` and count what it costs."""
        s = self.stats
        if op == "TransactWriteItems" or op in ("PutItem", "UpdateItem", "DeleteItem"):
            if op == "TransactWriteItems":
                actions = []
                for a in req.get("TransactItems", []):
                    (kind, body), = a.items()
                    key = body.get("Key") or self._key_of(body["TableName"], body.get("Item"))
                    actions.append((kind, body["TableName"], key))
            else:
                actions = [(op, req["TableName"], req.get("Key") or self._key_of(req["TableName"], req.get("Item")))]
            with self.write_lock:
                before = self._get_all(actions)
                status, headers, data = send()
                after = self._get_all(actions) if status == 200 else before
            transactional = op == "TransactWriteItems"
            shape = f"in a transaction of {len(actions)}" if transactional else "alone"
            for (kind, table, key), old, new in zip(actions, before, after):
                design = self.table(table)
                if kind == "ConditionCheck":
                    for target, partition, units in design.condition_check(old, key):
                        s.units(target, partition, write=units)
                        s.action(partition, f"ConditionCheck {shape}", units)
                    continue
                for i, (target, partition, units) in enumerate(design.write(old, new, key, transactional)):
                    s.units(target, partition, write=units)
                    if i == 0:
                        s.action(partition, f"{kind.replace('Item', '')} {shape}", units)
                if new is not None:
                    s.item(design.partition(key), capacity.item_size(new))
            return status, headers, data
        status, headers, data = send()
        if status != 200:
            return status, headers, data
        resp = json.loads(data or b"{}")
        if op == "GetItem":
            design = self.table(req["TableName"])
            s.units(design.name, design.partition(req["Key"]),
                    read=capacity.read_units(capacity.item_size(resp.get("Item")), req.get("ConsistentRead", False)))
        elif op == "BatchGetItem":
            for table, ask in req.get("RequestItems", {}).items():
                design = self.table(table)
                got = {tuple(capacity._scalar(i[k]) for k in design.keys): i for i in resp.get("Responses", {}).get(table, [])}
                unprocessed = {tuple(capacity._scalar(k[n]) for n in design.keys)
                               for k in resp.get("UnprocessedKeys", {}).get(table, {}).get("Keys", [])}
                for key in ask.get("Keys", []):
                    kt = tuple(capacity._scalar(key[n]) for n in design.keys)
                    if kt in unprocessed:
                        continue
                    s.units(design.name, design.partition(key),
                            read=capacity.read_units(capacity.item_size(got.get(kt)), ask.get("ConsistentRead", False)))
        elif op == "Query":
            design = self.table(req["TableName"])
            index = req.get("IndexName")
            hash_key = design.index(index).hash_key if index else design.hash_key
            partition = _key_condition_value(req, hash_key)
            size = sum(capacity.item_size(i) for i in resp.get("Items", []))
            s.units(f"{design.name}/{index}" if index else design.name, partition,
                    read=capacity.read_units(size, req.get("ConsistentRead", False) and not index))
        elif op == "Scan":
            design = self.table(req["TableName"])
            size = sum(capacity.item_size(i) for i in resp.get("Items", []))
            s.units(design.name, "<scan>", read=capacity.read_units(size, req.get("ConsistentRead", False)))
        return status, headers, data

    def _key_of(self, table, item):
        design = self.table(table)
        return {k: item[k] for k in design.keys}


def _key_condition_value(req, attribute):
    names = {alias: n for alias, n in req.get("ExpressionAttributeNames", {}).items()}
    values = req.get("ExpressionAttributeValues", {})
    expr = req.get("KeyConditionExpression", "")
    for alias, name in list(names.items()) + [(attribute, attribute)]:
        if name != attribute:
            continue
        m = re.search(r"(?<![\w#])" + re.escape(alias) + r"\s*=\s*(:\w+)", expr)
        if m and m.group(1) in values:
            return capacity._scalar(values[m.group(1)])
    return "<unknown>"


def s3_operation(method, path, query, headers):
    parts = path.lstrip("/").split("/", 1)
    has_key = len(parts) > 1 and parts[1] != ""
    q = urllib.parse.parse_qs(query, keep_blank_values=True)
    if method == "PUT":
        if "x-amz-copy-source" in {k.lower() for k in headers}:
            return "CopyObject"
        return "UploadPart" if "partNumber" in q else ("PutObject" if has_key else "PutBucket")
    if method == "GET":
        if not has_key:
            return "ListObjectsV2" if "list-type" in q else "ListBucket"
        return "GetObject"
    if method == "HEAD":
        return "HeadObject" if has_key else "HeadBucket"
    if method == "DELETE":
        return "DeleteObject" if has_key else "DeleteBucket"
    if method == "POST":
        if "delete" in q:
            return "DeleteObjects"
        return "CompleteMultipartUpload" if "uploadId" in q else ("CreateMultipartUpload" if "uploads" in q else "PostObject")
    return method


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _any(self):
        srv = self.server
        body = self._body()
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        if body or self.command in ("PUT", "POST"):
            headers["Content-Length"] = str(len(body))
        path, _, query = self.path.partition("?")
        auth = self.headers.get("Authorization", "")
        m = re.search(r"Credential=([^/]+)/[^/]+/[^/]+/([^/]+)/", auth)
        if m:
            akid, service = m.group(1), m.group(2)
        else:
            q = urllib.parse.parse_qs(query)
            cred = (q.get("X-Amz-Credential") or [""])[0].split("/")
            akid, service = (cred[0], cred[3]) if len(cred) > 3 else ("", "unsigned")
            if len(cred) > 3:
                akid = "presigned"
        caller = srv.callers.get(akid, "presigned URL (a client)" if akid == "presigned" else "other")
        if "Boto3" in self.headers.get("User-Agent", "") and caller not in ("other",):
            caller = f"{caller} (event source mapping)" if not caller.startswith("presigned") else caller
        target = self.headers.get("X-Amz-Target", "")
        if service == "s3":
            op = s3_operation(self.command, path, query, headers)
        elif target:
            op = target.rsplit(".", 1)[-1]
        else:
            op = (urllib.parse.parse_qs(body.decode(errors="replace")).get("Action") or [self.command])[0]

        started = time.time()

        def send():
            return srv.forward(self.command, self.path, headers, body)
        try:
            if service == "dynamodb":
                status, rheaders, data = srv.dynamodb(op, json.loads(body or b"{}"), send)
            else:
                status, rheaders, data = send()
        except Exception as e:  # noqa: BLE001 - a counting error must not pass as AWS's
            srv.stats.errors.append(f"{service} {op}: {e!r}")
            self.send_response(502)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if service == "sqs" and op == "ReceiveMessage" and b'"Messages"' not in data and b"<Message>" not in data:
            # An empty receive: the mapping's idle polling, a fixed cost per queue
            # (Lambda long-polls each queue with a few pollers whatever the load).
            op = "ReceiveMessage (empty)"
        srv.stats.request(service, op, caller)
        with srv.stats.lock:
            srv.stats.latency[(service, op)] += time.time() - started
        self.send_response(status)
        for k, v in rheaders:
            if k.lower() not in HOP_BY_HOP and k.lower() != "content-length":
                self.send_header(k, v)
        if self.command == "HEAD":
            length = dict((k.lower(), v) for k, v in rheaders).get("content-length", "0")
            self.send_header("Content-Length", length)
            self.end_headers()
            return
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = _any
