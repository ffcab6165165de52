"""moto_server for Tessera's tests, with DynamoDB requests serialised.

moto handles requests on several threads and does not lock its DynamoDB tables, so two
concurrent conditional writes to one item can both pass their condition; DynamoDB
itself serialises them. The port conformance suite catches this (a concurrent counter
lost 13 of 60 increments), so this launcher runs DynamoDB requests one at a time and
everything else (S3, SQS long polls) concurrently, as moto_server does.

With TESSERA_MOTO_UNCHECKED=svc,svc (moto's service names), requests to those services
skip moto's IAM checks once they are turned on (POST /moto-api/reset-auth): the deploy
rehearsal turns them on for S3 and SQS, whose resource-level checks moto implements, and
lists the services it cannot check (moto compares DynamoDB grants against resource "*",
so a table-scoped grant is refused; its Lambda and STS checks fail on valid signatures).

EventBridge: moto matches every event put on a bus against every rule on it, schedule
rules included (their empty pattern matches anything), and fails the whole PutEvents
when a matched rule's target is one it cannot deliver to (a Lambda function). On AWS a
schedule rule fires on its schedule only; so here.

Usage: python moto_serve.py HOST PORT
"""

import os

import sys
import threading

from moto.server import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import run_simple

from moto.core.authorization import ActionAuthenticatorMixin

import moto.events.models as _events_models

_send_to_targets = _events_models.Rule.send_to_targets


def _scheduled_rules_ignore_events(self, *args, **kwargs):
    if self.scheduled_expression and not self.event_pattern._pattern:
        return None
    return _send_to_targets(self, *args, **kwargs)


_events_models.Rule.send_to_targets = _scheduled_rules_ignore_events

UNCHECKED = {s for s in os.environ.get("TESSERA_MOTO_UNCHECKED", "").split(",") if s}
_checked = ActionAuthenticatorMixin._authenticate_and_authorize_normal_action


def _normal_action(self, resource="*"):
    if getattr(self, "service_name", None) in UNCHECKED:
        return None
    self.checking_iam = True
    try:
        return _checked(self, resource)
    finally:
        self.checking_iam = False


ActionAuthenticatorMixin._authenticate_and_authorize_normal_action = _normal_action

# moto checks GetQueueUrl against resource "*" (it reads the queue from QueueUrl, which
# GetQueueUrl has not got), so a queue-scoped grant is refused; AWS checks the named queue.
from moto.sqs.responses import SQSResponse  # noqa: E402

_queue_name = SQSResponse._get_queue_name


def _named_queue(self):
    name = self._get_param("QueueName")
    return name if name and not self._get_param("QueueUrl") else _queue_name(self)


SQSResponse._get_queue_name = _named_queue

# AWS authorises SQS's batch actions by the single action's permission (DeleteMessageBatch
# needs sqs:DeleteMessage); moto asks for sqs:DeleteMessageBatch, which no policy grants.
_sqs_action = SQSResponse._get_action


def _iam_action(self):
    action = _sqs_action(self)
    if getattr(self, "checking_iam", False) and action in (
        "SendMessageBatch", "DeleteMessageBatch", "ChangeMessageVisibilityBatch"
    ):
        return action[: -len("Batch")]
    return action


SQSResponse._get_action = _iam_action

# moto's S3 checks read the Authorization header, which a presigned URL has not got (its
# signature is in the query string): it fails with a KeyError. Such a request is let
# through; what the URL may do was decided when the api function presigned it.
_s3_checked = ActionAuthenticatorMixin._authenticate_and_authorize_s3_action


def _s3_action(self, bucket_name=None, key_name=None):
    if "Authorization" not in self.headers and "X-Amz-Signature" in getattr(self, "querystring", {}):
        return None
    return _s3_checked(self, bucket_name, key_name)


ActionAuthenticatorMixin._authenticate_and_authorize_s3_action = _s3_action

# With TESSERA_MOTO_EXTERNAL_LAMBDA=1 moto does not run event source mappings itself (it
# would receive each message on send and try to invoke the function in Docker): the deploy
# rehearsal is the Lambda service, polling as the mapping says.
if os.environ.get("TESSERA_MOTO_EXTERNAL_LAMBDA") == "1":
    from moto.sqs.models import Queue

    Queue.lambda_event_source_mappings = property(lambda self: {}, lambda self, value: None)

# moto backs up every table a transaction names (copy.deepcopy of the whole table) so it
# can roll back, which makes each TransactWriteItems cost time proportional to the
# table: with a few thousand items (the load rehearsal) every write took seconds. The
# rollback only needs the items the transaction names, so those are saved (by value)
# and put back instead; DynamoDB requests run one at a time here, so nothing else can
# change them in between. What a transaction does and refuses is moto's, unchanged.
import copy  # noqa: E402

from moto.dynamodb.models import DynamoDBBackend  # noqa: E402
from moto.dynamodb.models.table import Table  # noqa: E402

_transacting = threading.local()
_transact_write_items = DynamoDBBackend.transact_write_items


def _table_deepcopy(self, memo):
    if getattr(_transacting, "active", False):
        return self  # the whole-table backup: replaced by the items' own, below
    new = self.__class__.__new__(self.__class__)
    memo[id(self)] = new
    for k, v in self.__dict__.items():
        setattr(new, k, copy.deepcopy(v, memo))
    return new


def _item_key(table, op):
    if "Item" in op:
        key = {table.hash_key_attr: op["Item"][table.hash_key_attr]}
        if table.range_key_attr is not None:
            key[table.range_key_attr] = op["Item"][table.range_key_attr]
        return key
    return op.get("Key")


def _transact_by_item(self, transact_items):
    saved = []
    for entry in transact_items[:100]:
        _, op = next(iter(entry.items()))
        table = self.tables.get(op.get("TableName"))
        key = _item_key(table, op) if table is not None else None
        if key is None:
            continue
        try:
            current = self.get_item(op["TableName"], key)
        except Exception:  # noqa: BLE001 - a malformed key: moto's own check refuses it
            continue
        saved.append((op["TableName"], key, copy.deepcopy(current.to_json()["Attributes"]) if current else None))
    _transacting.active = True
    try:
        return _transact_write_items(self, transact_items)
    except Exception:
        _transacting.active = False
        for table_name, key, attrs in reversed(saved):
            if attrs is None:
                if self.get_item(table_name, key) is not None:
                    self.delete_item(table_name, key)
            else:
                self.put_item(table_name, attrs)
        raise
    finally:
        _transacting.active = False


Table.__deepcopy__ = _table_deepcopy
DynamoDBBackend.transact_write_items = _transact_by_item

# moto answers every Query, on the table or an index, by sorting the whole table and
# testing each item (`Table.all_items`), so a query costs time in proportion to the
# table: the load rehearsal's reaper and listings slowed every request behind them as
# the table grew (0.06 s a query at 4,000 items). Here each table keeps, per index, the
# keys of the items in each partition, updated after every write (put, delete, update,
# so transactions and batches too), and a query is answered by moto's own code over
# that partition's items only. What a query returns is moto's, unchanged.
import inspect  # noqa: E402

from moto.dynamodb.models.dynamo_type import DynamoType  # noqa: E402


def _partitions(table):
    parts = table.__dict__.get("_tessera_partitions")
    if parts is None:
        parts = {"by_key": {}, "index": {}}
        table.__dict__["_tessera_partitions"] = parts
        for item in list(_stored_items(table)):
            _index_item(table, (item.hash_key, item.range_key), item)
    return parts


def _stored_items(table):
    for hash_set in table.items.values():
        if table.range_key_attr:
            yield from hash_set.values()
        else:
            yield hash_set


def _index_hash_attrs(table):
    return {i.name: [k["AttributeName"] for k in i.schema if k["KeyType"] == "HASH"] for i in table.all_indexes()}


def _index_item(table, key, item):
    parts = table.__dict__.get("_tessera_partitions")
    if parts is None:
        return  # built from the table on its first query
    for name, value in parts["by_key"].pop(key, {}).items():
        bucket = parts["index"].get(name, {}).get(value)
        if bucket is not None:
            bucket.discard(key)
    if item is None:
        return
    held = {}
    for name, attrs in _index_hash_attrs(table).items():
        if len(attrs) != 1 or attrs[0] not in item.attrs:
            continue
        value = item.attrs[attrs[0]]
        parts["index"].setdefault(name, {}).setdefault(value, set()).add(key)
        held[name] = value
    parts["by_key"][key] = held


def _reindex(table, hash_value, range_value):
    try:
        item = table.get_item(hash_value, range_value)
    except Exception:  # noqa: BLE001 - no such item
        item = None
    _index_item(table, (hash_value, range_value), item)


_table_put_item = Table.put_item
_table_delete_item = Table.delete_item
_backend_update_item = DynamoDBBackend.update_item


def _put_item_indexed(self, item_attrs, *args, **kwargs):
    out = _table_put_item(self, item_attrs, *args, **kwargs)
    hash_value = DynamoType(item_attrs[self.hash_key_attr])
    range_value = DynamoType(item_attrs[self.range_key_attr]) if self.range_key_attr else None
    _reindex(self, hash_value, range_value)
    return out


def _delete_item_indexed(self, hash_value, range_value, *args, **kwargs):
    out = _table_delete_item(self, hash_value, range_value, *args, **kwargs)
    _index_item(self, (hash_value, range_value), None)
    return out


def _update_item_indexed(self, table_name, key, *args, **kwargs):
    out = _backend_update_item(self, table_name, key, *args, **kwargs)
    table = self.get_table(table_name)
    hash_value = DynamoType(key[table.hash_key_attr])
    range_value = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
    _reindex(table, hash_value, range_value)
    return out


_table_query = Table.query


def _query_one_partition(self, *args, **kwargs):
    bound = _QUERY_SIGNATURE.bind(self, *args, **kwargs)
    hash_key, index_name = bound.arguments.get("hash_key"), bound.arguments.get("index_name")
    if index_name is None:
        if hash_key is None:
            return _table_query(self, *args, **kwargs)
        stored = self.items.get(hash_key)
        candidates = [] if stored is None else list(stored.values()) if self.range_key_attr else [stored]
    else:
        attrs = _index_hash_attrs(self).get(index_name)
        if not attrs or len(attrs) != 1:
            return _table_query(self, *args, **kwargs)
        value = dict(bound.arguments.get("hash_key_conditions") or []).get(attrs[0], hash_key)
        if value is None:
            return _table_query(self, *args, **kwargs)
        keys = _partitions(self)["index"].get(index_name, {}).get(value, set())
        candidates = [i for i in (self.items.get(h, {}).get(r) if self.range_key_attr else self.items.get(h)
                                  for h, r in keys) if i is not None]
    self.__dict__["all_items"] = lambda: candidates
    try:
        return _table_query(self, *args, **kwargs)
    finally:
        del self.__dict__["all_items"]


_QUERY_SIGNATURE = inspect.signature(_table_query)


Table.put_item = _put_item_indexed
Table.delete_item = _delete_item_indexed
DynamoDBBackend.update_item = _update_item_indexed
Table.query = _query_one_partition

# moto serialises every response through a generic, shape-walking serializer (botocore's
# model, member by member): at the load rehearsal's rates that was a third of moto's time,
# nearly all of it on the items of DynamoDB reads. Those results are already DynamoDB's
# wire JSON (attribute values as {"S": …}, numbers as strings, binaries as base64), so the
# reads are written with json.dumps, members the output shape does not name and None
# values left out as the serializer leaves them out (each attribute value as moto made
# it). Anything else json.dumps cannot
# write, an error, or another operation goes the generic way. With
# TESSERA_MOTO_CHECK_JSON=1 both are made and compared (the rehearsals' self-check).
import json  # noqa: E402

from moto.core.responses import ActionResult  # noqa: E402

_FAST_READS = {"GetItem", "BatchGetItem", "Query", "Scan"}
_CHECK_JSON = os.environ.get("TESSERA_MOTO_CHECK_JSON") == "1"
_execute_result = ActionResult.execute_result


def _named(value, shape):
    """`value` reduced to what `shape` names: a structure's members (by their wire
    name), a map's values, a list's members; None left out."""
    kind = getattr(shape, "type_name", None)
    if value is None:
        return None
    if getattr(shape, "name", None) == "AttributeValue" and isinstance(value, dict):
        return value  # moto's own wire form of an item's value, as it is
    if kind == "structure":
        if not isinstance(value, dict):
            raise TypeError("structure expected")
        out = {}
        for name, member in shape.members.items():
            v = value.get(name)
            if v is not None:
                out[member.serialization.get("name", name)] = _named(v, member)
        return out
    if kind == "map":
        if not isinstance(value, dict):
            raise TypeError("map expected")
        return {k: _named(v, shape.value) for k, v in value.items() if v is not None}
    if kind == "list":
        if not isinstance(value, list):
            raise TypeError("list expected")
        return [_named(v, shape.member) for v in value]
    if kind in ("string", "boolean") or (kind in ("integer", "long", "double", "float")
                                        and isinstance(value, (int, float)) and not isinstance(value, bool)):
        return value
    if kind == "blob" and isinstance(value, str):
        return value
    raise TypeError(f"{kind} is not written by the fast path")


def _fast_execute_result(self, context):
    service, operation = context.service_model.service_name, context.operation_model.name
    if service != "dynamodb" or operation not in _FAST_READS or not isinstance(self.result, dict):
        return _execute_result(self, context)
    try:
        body = json.dumps(_named(self.result, context.operation_model.output_shape), separators=(",", ":"))
    except TypeError:
        return _execute_result(self, context)
    version = context.service_model.metadata.get("jsonVersion", "1.0")
    out = (200, {"Content-Type": f"application/x-amz-json-{version}"}, body)
    if _CHECK_JSON:
        generic = _execute_result(self, context)
        if json.loads(generic[2]) != json.loads(body) or generic[0] != 200:
            raise AssertionError(f"fast {operation} response differs from moto's: {body[:300]} != {generic[2][:300]}")
    return out


ActionResult.execute_result = _fast_execute_result

# moto finds the backend of every request by listing its own package folder
# (`list_of_moto_modules`, a directory scan) and then trying every service's URL
# patterns, and werkzeug writes a log line per request: at the load rehearsal's rates
# that was a fifth of moto's time. The folder does not change while it runs, and a host
# always maps to the same backend, so both are remembered; requests are not logged
# (errors still are).
import functools  # noqa: E402

from moto import backends as _backends  # noqa: E402
from werkzeug.serving import WSGIRequestHandler  # noqa: E402

_modules = functools.lru_cache(maxsize=1)(lambda f=_backends.list_of_moto_modules: tuple(f()))
_backends.list_of_moto_modules = _modules
_backend_for_host = DomainDispatcherApplication.get_backend_for_host
_hosts = {}


def _remembered_backend(self, host):
    if host not in _hosts:
        _hosts[host] = _backend_for_host(self, host)
    return _hosts[host]


DomainDispatcherApplication.get_backend_for_host = _remembered_backend


class _Quiet(WSGIRequestHandler):
    def log_request(self, *args, **kwargs):
        pass


app = DomainDispatcherApplication(create_backend_app)
dynamodb = threading.Lock()


def serialised(environ, start_response):
    if environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB_"):
        with dynamodb:
            # Drain the response inside the lock: moto computes it lazily.
            return [b"".join(app(environ, start_response))]
    return app(environ, start_response)


if __name__ == "__main__":
    run_simple(sys.argv[1], int(sys.argv[2]), serialised, threaded=True, request_handler=_Quiet)
