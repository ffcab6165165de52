"""DynamoDB's capacity units as AWS bills them on demand, from the items a request reads
and writes (the rules of the DynamoDB Developer Guide, "Item sizes and formats",
"Read/write capacity mode" and "Capacity management for transactions"):

- an item's size is the UTF-8 length of each attribute name plus its value's size: a
  string its UTF-8 length, a number 1 byte per two significant digits plus 1, a binary
  its length, a boolean or null 1 byte, a map or list 3 bytes plus its elements plus 1
  byte per element (a map's names counted like attribute names);
- a write costs 1 unit per 1 KB of the larger of the item before and after it, at least
  1; a read 1 unit per 4 KB (half for an eventually consistent read), at least 1 per
  item read by GetItem or BatchGetItem, and per page of a Query (the page's items'
  sizes summed, then rounded up);
- a transaction costs twice that, for every item it names, a condition check included
  (counted as a transactional write of its item, 2 units per 1 KB: AWS's text is vague
  and measurements against DynamoDB report write units, so the larger is taken), and a
  cancelled transaction is counted as if it had written (what it prepared is billed);
- a global secondary index costs, on every write to the table, one index write per entry
  it removes and one per entry it adds, each 1 unit per 1 KB of the entry (the table's
  key, the index's key, the projected attributes and 100 bytes); an update that changes
  no attribute the index holds writes nothing to it. Index writes are not doubled by a
  transaction (they are propagated after it commits).
"""

import base64
import math

INDEX_ENTRY_OVERHEAD = 100
WRITE_UNIT = 1024
READ_UNIT = 4096


def number_size(text):
    digits = text.lstrip("-").replace(".", "")
    significant = digits.strip("0") or "0"
    return math.ceil(len(significant) / 2) + 1


def _binary_len(v):
    return len(v) if isinstance(v, (bytes, bytearray)) else len(base64.b64decode(v))


def value_size(value):
    """The size of one attribute value in DynamoDB's JSON (`{"S": …}`), as the wire
    format or boto3's low-level client gives it."""
    (kind, v), = value.items()
    if kind == "S":
        return len(v.encode())
    if kind == "N":
        return number_size(v)
    if kind == "B":
        return _binary_len(v)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(s.encode()) for s in v)
    if kind == "NS":
        return sum(number_size(n) for n in v)
    if kind == "BS":
        return sum(_binary_len(b) for b in v)
    if kind == "M":
        return 3 + sum(len(k.encode()) + value_size(x) + 1 for k, x in v.items())
    if kind == "L":
        return 3 + sum(value_size(x) + 1 for x in v)
    raise ValueError(f"unknown attribute type {kind}")


def item_size(item):
    return sum(len(name.encode()) + value_size(v) for name, v in (item or {}).items())


def write_units(size):
    return max(1, math.ceil(size / WRITE_UNIT))


def read_units(size, consistent):
    units = max(1, math.ceil(size / READ_UNIT))
    return units if consistent else units / 2


class IndexDesign:
    """One global secondary index: its key attributes and what it projects."""

    def __init__(self, name, hash_key, range_key, projection, non_key=()):
        self.name = name
        self.hash_key = hash_key
        self.range_key = range_key
        self.projection = projection
        self.non_key = tuple(non_key)

    def entry(self, item, table_keys):
        """The index entry `item` has (its attributes), or None when the item carries no
        index key (a sparse index holds only items that do)."""
        if not item or self.hash_key not in item or (self.range_key and self.range_key not in item):
            return None
        if self.projection == "ALL":
            return dict(item)
        names = set(table_keys) | {self.hash_key} | ({self.range_key} if self.range_key else set())
        if self.projection == "INCLUDE":
            names |= set(self.non_key)
        return {n: v for n, v in item.items() if n in names}

    def partition(self, item):
        return _scalar(item[self.hash_key])


def _scalar(v):
    (_, x), = v.items()
    return x if isinstance(x, str) else repr(x)


class TableDesign:
    """A table's key and its global secondary indexes, as DescribeTable gives them."""

    def __init__(self, description):
        t = description["Table"]
        self.name = t["TableName"]
        keys = {k["KeyType"]: k["AttributeName"] for k in t["KeySchema"]}
        self.hash_key, self.range_key = keys["HASH"], keys.get("RANGE")
        self.keys = [k for k in (self.hash_key, self.range_key) if k]
        self.indexes = []
        for g in t.get("GlobalSecondaryIndexes", []):
            gk = {k["KeyType"]: k["AttributeName"] for k in g["KeySchema"]}
            p = g["Projection"]
            self.indexes.append(IndexDesign(g["IndexName"], gk["HASH"], gk.get("RANGE"), p["ProjectionType"],
                                            p.get("NonKeyAttributes", ())))

    def index(self, name):
        return next(i for i in self.indexes if i.name == name)

    def partition(self, item_or_key):
        return _scalar(item_or_key[self.hash_key])

    def condition_check(self, item, key):
        """A transaction's condition check on the item at `key`: write units, doubled."""
        return [(self.name, self.partition(key), 2 * write_units(item_size(item)))]

    def write(self, before, after, key, transactional):
        """The units one write of the item at `key` costs: [(target, partition, units)],
        the table's first, then each index's removals and additions."""
        size = max(item_size(before), item_size(after))
        out = [(self.name, self.partition(key), write_units(size) * (2 if transactional else 1))]
        for index in self.indexes:
            old, new = index.entry(before, self.keys), index.entry(after, self.keys)
            if old == new:
                continue
            for entry in (old, new):
                if entry is not None:
                    out.append((f"{self.name}/{index.name}", index.partition(entry),
                                write_units(item_size(entry) + INDEX_ENTRY_OVERHEAD)))
        return out


def self_check():
    """The Developer Guide's own examples and the rules above, on made-up items: the
    accounting is wrong before any figure is reported if one of these fails."""
    assert number_size("1234") == 3 and number_size("-0.00120") == 2 and number_size("0") == 2
    assert item_size({"pk": {"S": "ab"}, "n": {"N": "12"}}) == 2 + 2 + 1 + 2
    assert value_size({"M": {"a": {"S": "xy"}}}) == 3 + 1 + 2 + 1
    assert value_size({"L": [{"BOOL": True}, {"NULL": True}]}) == 3 + 2 + 2
    assert write_units(1024) == 1 and write_units(1025) == 2 and write_units(0) == 1
    assert read_units(4096, True) == 1 and read_units(4097, True) == 2 and read_units(10, False) == 0.5
    design = TableDesign({"Table": {
        "TableName": "t", "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        "GlobalSecondaryIndexes": [{"IndexName": "g", "KeySchema": [{"AttributeName": "gpk", "KeyType": "HASH"},
                                                                    {"AttributeName": "gsk", "KeyType": "RANGE"}],
                                    "Projection": {"ProjectionType": "KEYS_ONLY"}}]}})
    key = {"pk": {"S": "P"}, "sk": {"S": "S"}}
    a = dict(key, gpk={"S": "G"}, gsk={"S": "1"}, body={"S": "x" * 2000})
    b = dict(a, body={"S": "y" * 10})
    c = dict(b, gsk={"S": "2"})
    # A body change under a keys-only index: the table alone, doubled in a transaction.
    assert design.write(a, b, key, True) == [("t", "P", 4)]
    # The index key moves: one removal and one addition.
    assert design.write(b, c, key, False) == [("t", "P", 1), ("t/g", "G", 1), ("t/g", "G", 1)]
    # A new item with no index key writes nothing to the sparse index.
    assert design.write(None, key, key, False) == [("t", "P", 1)]
    assert design.condition_check(a, key) == [("t", "P", 4)]


if __name__ == "__main__":
    self_check()
    print("capacity rules: ok")
