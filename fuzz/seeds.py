#!/usr/bin/env python3
"""fuzz/seeds.py: write the fuzz targets' seed inputs into fuzz/corpus/<target>/.

Run from the repository's root (needs protoc, Debian's protobuf-compiler) when
a target's input layout or the shapes below change; the seeds are checked
in, so CI does not run this.  The shapes are the tests': Avro from test 049,
Protobuf from 056, Debezium events from 054, JSON messages with every type
the decoder converts to.  Each layout is described at its target
(fuzz/pb_schema.cc, fuzz/sdp_fuzz.c).
"""
import json
import os
import struct
import subprocess
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def write(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- Protobuf: test 056's files, bodies encoded by protoc ----

MONEY = """syntax = "proto3";
package shop;
message Money { string currency = 1; int64 units = 2; int32 nanos = 3; }
"""

ORDER = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/wrappers.proto";
import "shop/money.proto";

enum Kind { KIND_UNKNOWN = 0; CARD = 1; CASH = 2; }
message Key { string merchant = 1; int32 region = 2; }
message Order {
  message Line { string sku = 1; int32 n = 2; }
  int64 id = 1;
  Money amount = 2;
  google.protobuf.Timestamp at = 3;
  Kind kind = 4;
  double ratio = 5;
  float f4 = 6;
  bool ok = 7;
  bytes raw = 8;
  uint64 big = 9;
  sint32 delta = 10;
  repeated string tags = 11;
  google.protobuf.Int32Value qty = 12;
  optional string note = 13;
  map<string, int32> attrs = 14;
  repeated Line lines = 15;
  google.protobuf.Duration waited = 16;
  string name = 17;
}
"""

ORDER_TEXT = """id: 1 amount { currency: "EUR" units: 12 nanos: 500000000 }
at { seconds: 1767323045 nanos: 123456000 } kind: CARD ratio: 0.25 f4: 1.5 ok: true raw: "\\001\\002\\377"
big: 18446744073709551615 delta: -7 tags: "a" tags: "b\\"q" qty { value: 3 } note: "h\\303\\251"
attrs { key: "x" value: 1 } attrs { key: "y" value: -2 } lines { sku: "s1" n: 1 } lines { sku: "s2" n: 2 }
waited { seconds: 1 nanos: 500000000 } name: "full"
"""

PROTO2 = """syntax = "proto2";
package p2;
message Event {
  required int32 id = 1;
  optional string label = 2 [default = "none"];
  repeated int32 packed_ids = 3 [packed = true];
  repeated fixed64 stamps = 4;
  oneof choice { string s = 5; int64 n = 6; Event child = 7; }
  optional group Legacy = 8 { optional int32 x = 9; }
  optional sfixed32 sf = 10;
  optional float fl = 11;
  map<int64, Event> kids = 12;
  extensions 100 to 199;
}
extend Event { optional string ext = 100; }
"""

PROTO2_TEXT = """id: 7 label: "l" packed_ids: 1 packed_ids: -2 packed_ids: 300 stamps: 1 stamps: 18446744073709551615
n: 42 sf: -5 fl: -0.0 kids { key: -1 value { id: 8 s: "kid" } }
"""

WKT = """syntax = "proto3";
package w;
import "google/protobuf/struct.proto";
import "google/protobuf/any.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/empty.proto";
message Doc {
  google.protobuf.Struct meta = 1;
  google.protobuf.Value v = 2;
  google.protobuf.ListValue list = 3;
  google.protobuf.Any any = 4;
  google.protobuf.BytesValue b = 5;
  google.protobuf.StringValue s = 6;
  google.protobuf.DoubleValue d = 7;
  google.protobuf.UInt64Value u = 8;
  google.protobuf.Empty e = 9;
  repeated Doc docs = 10;
  oneof pick { int32 a = 11; string z = 12; }
}
"""

WKT_TEXT = """meta { fields { key: "k" value { string_value: "v" } } fields { key: "n" value { null_value: NULL_VALUE } } }
v { list_value { values { number_value: 1.5 } values { bool_value: true } values { struct_value { } } } }
list { values { string_value: "x" } } any { type_url: "type.googleapis.com/w.Doc" value: "\\010\\001" }
b { value: "\\000\\377" } s { value: "s" } d { value: nan } u { value: 18446744073709551615 } e { }
docs { a: 1 } docs { z: "q" docs { } } z: "last"
"""


def protoc(files, main, args, stdin=None):
    with tempfile.TemporaryDirectory() as d:
        for name, text in files.items():
            path = os.path.join(d, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        return subprocess.run(["protoc", "-I", d] + args + [main], input=stdin, capture_output=True,
                              check=True, cwd=d).stdout


def encode(files, main, message, text):
    return protoc(files, main, ["--encode=" + message], text.encode())


def descriptor_b64(files, main):
    """The base64 of main's serialized FileDescriptorProto (as Confluent's Python serializer registers it)."""
    import base64
    with tempfile.TemporaryDirectory() as out:
        path = os.path.join(out, "set.pb")
        protoc(files, main, ["--descriptor_set_out=" + path])
        data = open(path, "rb").read()
    # a FileDescriptorSet with one file: field 1, length-delimited
    assert data[0] == 0x0A
    n, shift, i = 0, 0, 1
    while True:
        b = data[i]
        n |= (b & 0x7F) << shift
        i += 1
        shift += 7
        if not b & 0x80:
            break
    return base64.b64encode(data[i:i + n]).decode()


def zigzag_varint(v):
    v = (v << 1) ^ (v >> 63)
    return varint(v & 0xFFFFFFFFFFFFFFFF)


def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def protobuf_seeds():
    order_files = {"shop/money.proto": MONEY, "shop/order.proto": ORDER}
    money_body = encode({"m.proto": MONEY}, "m.proto", "shop.Money", 'currency: "EUR" units: 12 nanos: 3')
    order_body = encode(order_files, "shop/order.proto", "shop.Order", ORDER_TEXT)
    key_body = encode(order_files, "shop/order.proto", "shop.Key", 'merchant: "m1" region: 3')
    line_body = encode(order_files, "shop/order.proto", "shop.Order.Line", 'sku: "s1" n: 1')
    p2_body = encode({"p2.proto": PROTO2}, "p2.proto", "p2.Event", PROTO2_TEXT)
    wkt_body = encode({"w.proto": WKT}, "w.proto", "w.Doc", WKT_TEXT)
    order_b64 = descriptor_b64(order_files, "shop/order.proto")

    # pb_schema: [//@file NAME] TEXT ..., then \0, index count, indexes, body
    imports = "//@file shop/order.proto\n" + ORDER + "//@file shop/money.proto\n" + MONEY
    write("pb_schema", "money", MONEY.encode() + b"\0\0" + money_body)
    write("pb_schema", "order", imports.encode() + b"\0\x01\x01" + order_body)
    write("pb_schema", "order_key", imports.encode() + b"\0\x01\x00" + key_body)
    write("pb_schema", "order_line", imports.encode() + b"\0\x02\x01\x00" + line_body)
    write("pb_schema", "order_descriptor",
          ("//@file shop/order.proto\n" + order_b64 + "\n//@file shop/money.proto\n" + MONEY).encode()
          + b"\0\x01\x01" + order_body)
    write("pb_schema", "proto2", PROTO2.encode() + b"\0\0" + p2_body)
    write("pb_schema", "wkt", WKT.encode() + b"\0\0" + wkt_body)
    write("pb_schema", "schema_only", ORDER.replace('import "shop/money.proto";\n', "")
          .replace("Money amount = 2;", "int32 amount = 2;"))

    # registry_answer: answer \0 references' answers \0 ... message (indexes, body)
    def answer(schema, refs=None, schema_type="PROTOBUF"):
        a = {"schema": schema, "schemaType": schema_type}
        if refs:
            a["references"] = refs
        return json.dumps(a).encode()

    money_ref = [{"name": "shop/money.proto", "subject": "money-value", "version": 1}]
    write("registry_answer", "proto_money", answer(MONEY) + b"\0" + b"\x00" + money_body)
    write("registry_answer", "proto_order", answer(ORDER, money_ref) + b"\0" + answer(MONEY) + b"\0"
          + zigzag_varint(1) + zigzag_varint(1) + order_body)
    write("registry_answer", "proto_order_line", answer(ORDER, money_ref) + b"\0" + answer(MONEY) + b"\0"
          + zigzag_varint(2) + zigzag_varint(1) + zigzag_varint(0) + line_body)
    write("registry_answer", "proto_order_descriptor", answer(order_b64, money_ref) + b"\0" + answer(MONEY) + b"\0"
          + zigzag_varint(1) + zigzag_varint(1) + order_body)
    write("registry_answer", "proto_key", answer(ORDER, money_ref) + b"\0" + answer(MONEY) + b"\0"
          + zigzag_varint(1) + zigzag_varint(0) + key_body)
    write("registry_answer", "proto_wkt", answer(WKT) + b"\0\x00" + wkt_body)
    write("registry_answer", "proto_missing_reference", answer(ORDER, money_ref) + b"\0")
    write("registry_answer", "not_found", b'{"error_code": 40403, "message": "Schema not found"}\0\x00')

    # the shapes of issue 46's attacks, small (fuzz/regressions.py writes them at full size)
    unclosed = 'syntax = "proto3";\noption java_package = "x\n;\n' + "message A {\n" * 20 + "}\n" * 20
    write("pb_schema", "attack_unclosed_string", unclosed)
    write("registry_answer", "attack_unclosed_string", answer(unclosed) + b"\0\x00")
    write("registry_answer", "attack_single_quotes", b"{'k\"': " + b"[" * 20 + b"]" * 20 + b"}")


# ---- Avro: test 049's payment, and every type ----

def avro_long(v):
    return zigzag_varint(v)


def avro_bytes(b):
    return avro_long(len(b)) + b


def avro_string(s):
    return avro_bytes(s.encode())


def avro_double(d):
    return struct.pack("<d", d)


def avro_float(f):
    return struct.pack("<f", f)


def avro_array(items, enc):
    if not items:
        return avro_long(0)
    return avro_long(len(items)) + b"".join(enc(i) for i in items) + avro_long(0)


def avro_map(entries, enc):
    if not entries:
        return avro_long(0)
    return avro_long(len(entries)) + b"".join(avro_string(k) + enc(v) for k, v in entries) + avro_long(0)


def unscaled(v, size=None):
    """A decimal's unscaled value: two's complement, big-endian, as short as it goes (or size bytes)."""
    n = size or max(1, (v.bit_length() + 8) // 8)
    return v.to_bytes(n, "big", signed=True)


PAYMENT = {"type": "record", "name": "Payment", "namespace": "sdp.test", "fields": [
    {"name": "id", "type": "long"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "tod", "type": {"type": "int", "logicalType": "time-millis"}},
    {"name": "tod_us", "type": {"type": "long", "logicalType": "time-micros"}},
    {"name": "at_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "local_at", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
    {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "small", "type": "int"},
    {"name": "ratio", "type": "double"},
    {"name": "f4", "type": "float"},
    {"name": "ok", "type": "boolean"},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["CARD", "CASH"]}},
    {"name": "raw", "type": "bytes"},
    {"name": "pos", "type": {"type": "record", "name": "Pos", "fields": [
        {"name": "lat", "type": "double"}, {"name": "lon", "type": "double"}]}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "qty", "type": ["null", "int", "string"], "default": None},
    {"name": "note", "type": "string", "default": ""}]}


def payment_body(i, qty_branch=1):
    qty = {0: avro_long(0), 1: avro_long(1) + avro_long(i), 2: avro_long(2) + avro_string(str(i))}[qty_branch]
    return (avro_long(i) + avro_bytes(unscaled(i * 700 + 5)) + avro_long(1767323045123456 + i)
            + avro_long(20485) + avro_long(11045123) + avro_long(86399999999) + avro_long(946684799999)
            + avro_long(1781265600000000) + avro_string("00000000-0000-4000-8000-%012d" % i)
            + avro_long(i - 150) + avro_double(i / 8) + avro_float(i * 0.5) + b"\x01" + avro_long(i % 2)
            + avro_bytes(bytes([i & 255, 0, 255])) + avro_double(i / 4) + avro_double(-i / 4)
            + avro_array(["t%d" % i, "u"], avro_string) + qty + avro_string("n%d" % i))


def every_body(depth=0):
    """A body of fuzz/sdp_fuzz.c's avro_every, field by field, with a next one inside (twice)."""
    pt = lambda p: avro_long(p[0]) + (avro_long(0) if p[1] is None else avro_long(1) + avro_long(p[1]))
    body = (b"\x01" + avro_long(-7) + avro_long(-(1 << 62)) + avro_float(3.25) + avro_double(float("inf"))
            + avro_string("s\u00e9\"\\") + avro_bytes(b"\x00\x01\xff") + b"" + avro_long(2)
            + b"\xde\xad\xbe\xef" + unscaled(-123456789, 8) + avro_bytes(unscaled(10 ** 30 + 7))
            + avro_array([1, -2, 1 << 40], avro_long) + avro_map([("x", 5), ("y", -1)], avro_long)
            + avro_map([("k", (1, None)), ("j", (2, 3))], pt)
            + avro_long(3) + pt((9, 10))  # u: the Pt branch
            + avro_long(1767323045123) + avro_long(1767323045123) + avro_long(-719162)
            + avro_long(3600000000) + avro_string("6ba7b810-9dad-11d1-80b4-00c04fd430c8"))
    if depth < 2:
        return body + avro_long(1) + every_body(depth + 1)
    return body + avro_long(0)


def avro_seeds():
    # avro_decode: a byte that picks the writer (0 payment, 1 every, 2 fuzz/sdp_fuzz.c's avro_union: null,
    # string, long, map of strings, record K {id int}), then the body
    for i, qb in ((1, 0), (2, 1), (301, 2)):
        write("avro_decode", "payment_%d" % i, b"\x00" + payment_body(i, qb))
    write("avro_decode", "every", b"\x01" + every_body())
    write("avro_decode", "union_null", b"\x02" + avro_long(0))
    write("avro_decode", "union_string", b"\x02" + avro_long(1) + avro_string("key-1"))
    write("avro_decode", "union_long", b"\x02" + avro_long(2) + avro_long(-5))
    write("avro_decode", "union_map", b"\x02" + avro_long(3) + avro_map([("a", "b"), ("c", "")], avro_string))
    write("avro_decode", "union_record", b"\x02" + avro_long(4) + avro_long(42))

    # avro_schema: the schema's text, \0, a body of it
    payment = json.dumps(PAYMENT)
    write("avro_schema", "payment", payment.encode() + b"\0" + payment_body(7, 2))
    write("avro_schema", "string", b'"string"\0' + avro_string("hello"))
    write("avro_schema", "long", b'{"type": "long", "logicalType": "timestamp-millis"}\0' + avro_long(1767323045123))
    write("avro_schema", "generic", json.dumps({
        "type": "record", "name": "G", "namespace": "a.b", "fields": [
            {"name": "id", "type": "long"}, {"name": "name", "type": ["null", "string"]},
            {"name": "v", "type": {"type": "map", "values": ["null", "double", {"type": "array", "items": "G"}]}},
            {"name": "a", "type": {"type": "record", "name": "A", "namespace": "c", "fields": [
                {"name": "b", "type": "float"}]}},
            {"name": "t", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            {"name": "n", "type": {"type": "fixed", "name": "N", "size": 3, "logicalType": "decimal",
                                   "precision": 6, "scale": 2}},
            {"name": "items", "type": {"type": "array", "items": {"type": "enum", "name": "E",
                                                                  "symbols": ["X", "Y"]}}},
            {"name": "m", "type": {"type": "map", "values": "c.A"}},
            {"name": "f", "type": "string"},
            {"name": "g", "type": {"type": "record", "name": "H", "fields": [
                {"name": "h", "type": {"type": "array", "items": "bytes"}}]}}]}).encode()
        + b"\0" + avro_long(5) + avro_long(1) + avro_string("g")
        + avro_map([("d", None)], lambda v: avro_long(1) + avro_double(2.5))
        + avro_float(1.5) + avro_long(1767323045123456) + unscaled(-12345, 3)
        + avro_array([0, 1], avro_long) + avro_map([("k", None)], lambda v: avro_float(0.5))
        + avro_string("f") + avro_array([b"\x01"], avro_bytes))
    write("avro_schema", "error_and_aliases", json.dumps({
        "type": "error", "name": "Err", "aliases": ["E2"], "fields": [
            {"name": "code", "type": "int", "aliases": ["c"], "doc": "d", "order": "descending"},
            {"name": "uuid", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "bad_decimal", "type": {"type": "bytes", "logicalType": "decimal", "precision": 2,
                                             "scale": 5}}]}).encode()
        + b"\0" + avro_long(3) + avro_string("not-a-uuid") + avro_bytes(b"\x01"))

    # non-ASCII in a schema, written as it is and as \u escapes (a registry may do either): in a
    # database whose encoding is not UTF-8 both must read alike; the escape of a character it lacks
    # made sdp_registry_read_answer raise there (outside any transaction, in a worker)
    accents = json.dumps({"type": "record", "name": "R", "fields": [
        {"name": "kind", "type": {"type": "enum", "name": "K", "symbols": ["\u00e9t\u00e9", "CASH"]},
         "doc": "caf\u00e9"}, {"name": "f", "type": "string"}]}, ensure_ascii=False)
    write("registry_answer", "avro_non_ascii", json.dumps({"schema": accents}, ensure_ascii=False).encode()
          + b"\0" + avro_long(0) + avro_string("x"))
    write("registry_answer", "avro_non_ascii_escaped", json.dumps({"schema": accents}).encode()
          + b"\0" + avro_long(0) + avro_string("x"))
    unicode_proto = 'syntax = "proto3";\n// caf\u00e9 \u4e2d\nmessage M { string s = 1; }\n'
    write("registry_answer", "crash_latin1_unicode_escape",
          json.dumps({"schema": unicode_proto, "schemaType": "PROTOBUF"}).encode() + b"\0\x00\x0a\x02hi")

    # registry_answer with Avro answers: answer \0 body
    write("registry_answer", "avro_payment", json.dumps({"schema": payment}).encode() + b"\0"
          + payment_body(3, 1))
    write("registry_answer", "avro_typed", json.dumps({"schema": '"string"', "schemaType": "AVRO"}).encode()
          + b"\0" + avro_string("k"))
    write("registry_answer", "json_schema_type", json.dumps({"schema": "{}", "schemaType": "JSON"}).encode() + b"\0{}")


# ---- JSON messages ----

def json_seeds():
    full = {
        "b": True, "i2": -32768, "i4": 2147483647, "i8": "9223372036854775807", "f4": 3.4e38, "f8": -1.5e-300,
        "n": 123456789012345678901234567890.123456789, "n2": "1234.567", "t": "h\u00e9llo", "vc": "abcd",
        "ts": "2026-01-02T03:04:05.123456Z", "ts3": 1767323045123, "tsl": "2026-01-02 03:04:05",
        "d": "2028-02-29", "tm": "23:59:59.999999", "iv": "1 day 02:03:04", "u": "6ba7b810-9dad-11d1-80b4-00c04fd430c8",
        "by": "\\x00ff", "j": {"a": [1, {"b": None}]}, "js": [1, "x"], "ip": "192.168.0.1/24", "ch": "ab",
        "vb": "1010", "position": {"lat": 48.8566, "lon": 2.3522}, "tags": ["a", "b", "c", "d"],
        "a": {"b": [{"c": "zero"}, {"c": "one"}]}, "Quoted Name": {"x y": 5}, "m": [[1, {"k": "v"}]],
    }
    write("json_decode", "full", json.dumps(full))
    write("json_decode", "compact", json.dumps(full, separators=(",", ":")))
    write("json_decode", "flat", b'{"i4": 1, "t": "x", "f8": 2.5, "b": false, "ts": 1767323045}')
    write("json_decode", "escapes", '{"t": "a\\"b\\\\c\\u00e9\\ud83d\\ude00\\n", "position": {"lat": "1e2"}}')
    write("json_decode", "nulls", b'{"b": null, "i4": null, "position": null, "tags": [null], "e": null}')
    write("json_decode", "numbers", b'{"i8": 1e3, "i4": 3.0, "i2": "  12", "f4": 1e38, "f8": -0.0, "n": 1E+400,'
          b' "ts": 1767323045123456, "ts3": -1e11, "tsl": "2026-01-02", "lat": 1}')
    write("json_decode", "out_of_range", b'{"i2": 32768, "f4": 1e39, "vc": "abcde"}')
    write("json_decode", "wrong_kinds", b'{"position": [1, 2], "tags": {"0": "x"}, "a": {"b": "s"}, "b": "yes",'
          b' "i4": true, "j": "text", "by": 12}')
    write("json_decode", "duplicates", b'{"t": "first", "position": {"lat": 1}, "t": "second",'
          b' "position": {"lon": 2}}')
    write("json_decode", "deep", b'{"j": ' + b"[" * 70 + b"]" * 70 + b', "a": {"b": [0, {"c": ' + b'{"x": ' * 10
          + b"1" + b"}" * 10 + b"}]}}")
    write("json_decode", "not_object", b'[{"t": 1}]')
    write("json_decode", "whitespace", b' \n\t{ "t" : "x" ,\r\n "tags" : [ "a" , "b" ] } \n')


# ---- Debezium events (test 054's), JSON and Avro ----

DEBEZIUM_SOURCE = {"version": "3.6.1.Final", "connector": "postgresql", "name": "cdc", "ts_ms": 1764900000000,
                   "db": "src", "schema": "public", "table": "items", "lsn": 1008, "txId": 77}


def debezium_event(op, before=None, after=None, wrapped=False):
    payload = {"before": before, "after": after, "source": DEBEZIUM_SOURCE, "op": op, "ts_ms": 1764900001008,
               "transaction": None}
    if wrapped:
        return json.dumps({"schema": {"type": "struct", "fields": [], "optional": False,
                                      "name": "cdc.public.items.Envelope", "version": 2}, "payload": payload})
    return json.dumps(payload)


def debezium_message(flags, key, value):
    key = key.encode() if isinstance(key, str) else key
    value = value.encode() if isinstance(value, str) else value
    return bytes([flags, len(key)]) + key + value


def avro_value_record(v):
    def opt(x, enc):
        return avro_long(0) if x is None else avro_long(1) + enc(x)
    return (avro_long(v["id"]) + opt(v.get("name"), avro_string) + opt(v.get("qty"), avro_long)
            + opt(v.get("price"), lambda p: avro_bytes(unscaled(p))) + opt(v.get("at"), avro_long)
            + opt(v.get("tags"), lambda t: avro_array(t, avro_string))
            + opt(v.get("city"), lambda c: avro_string(c)))


def avro_event(op, before=None, after=None):
    opt = lambda r: avro_long(0) if r is None else avro_long(1) + avro_value_record(r)
    source = (avro_string("3.6.1.Final") + avro_string("postgresql") + avro_long(1764900000000)
              + avro_string("items") + avro_long(1) + avro_long(1008))
    return opt(before) + opt(after) + source + avro_string(op) + avro_long(1) + avro_long(1764900001008)


def debezium_seeds():
    item = {"id": 1, "name": "apple", "qty": 5, "price": "1.50", "at": "2026-01-02T03:04:05Z",
            "tags": ["red"], "address": {"city": "Paris"}}
    write("debezium", "create", debezium_message(0, '{"id": 1}', debezium_event("c", after=item)))
    write("debezium", "update_wrapped", debezium_message(0, '{"schema": {}, "payload": {"id": 1}}',
                                                         debezium_event("u", before=item, after=dict(item, qty=6),
                                                                        wrapped=True)))
    write("debezium", "delete", debezium_message(0, '{"id": 1}', debezium_event("d", before={"id": 1})))
    write("debezium", "delete_no_before", debezium_message(0, '{"id": 3}', debezium_event("d")))
    write("debezium", "tombstone", debezium_message(4, '{"id": 4}', ""))
    write("debezium", "truncate", debezium_message(0, '{"id": 1}', debezium_event("t")))
    write("debezium", "no_op", debezium_message(8, "", '{"before": null, "after": {"id": 2}}'))
    arec = {"id": 1, "name": "apple", "qty": 5, "price": 150, "at": 1767323045000000, "tags": ["red"],
            "city": "Paris"}
    write("debezium", "avro_create", debezium_message(3, avro_long(1), avro_event("c", after=arec)))
    write("debezium", "avro_delete", debezium_message(3, avro_long(1), avro_event("d", before=arec)))
    write("debezium", "avro_delete_no_before", debezium_message(3, avro_long(2), avro_event("d")))
    write("debezium", "avro_tombstone", debezium_message(6, avro_long(5), b""))
    write("debezium", "avro_own_header", debezium_message(17, b"", b"\x00\x00\x00\x00\x01"
                                                          + avro_event("r", after=arec)))


if __name__ == "__main__":
    protobuf_seeds()
    avro_seeds()
    json_seeds()
    debezium_seeds()
