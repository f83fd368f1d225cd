#!/usr/bin/env python3
"""tools/avro_produce.py: produce Avro or Protobuf records as a Confluent client does, for the tests.

Confluent's own Python client (confluent-kafka) and its AvroSerializer
register the schemas in the schema registry (auto-registration) and frame
each record in Confluent's wire format: magic byte 0, the schema id (4 bytes,
big-endian), the Avro binary body (encoded by fastavro).  The records can
also be sent as raw bytes, or corrupted after serialization, to test how a
consumer handles bad payloads.  Run it with the venv of scripts/pyavro.sh:

    venv=$(bash scripts/pyavro.sh)
    "$venv/bin/python" tools/avro_produce.py SPEC.json     # or - (the default): stdin

The spec (JSON):

    {
      "bootstrap": "127.0.0.1:9092",
      "topic": "orders",
      "registry": "http://127.0.0.1:8080/apis/ccompat/v7",
      "registry_user_info": "user:password",    optional: HTTP basic authentication
      "registry_ca": "/path/ca.pem",            optional: the CA of an HTTPS registry
      "value_schema": {...} or "...",           Avro schema (JSON, its text, or a primitive
                                                type's name: "string")
      "key_schema": {...},                      optional; without it keys are strings
      "protobuf": {                             instead of value_schema/key_schema: Protobuf
        "files": {"orders.proto": "syntax = ...", ...},   the .proto files (imports of
                                                Protobuf's well-known types need not be given)
        "file": "orders.proto",                 the one whose messages are sent
        "value_message": "shop.Order",          the value's message type (full name)
        "key_message": "shop.Key",              optional: the key's
        "register_as": "descriptor"             what is registered: "descriptor" (the default,
                                                as ProtobufSerializer registers: the file's
                                                serialized FileDescriptorProto in base64, its
                                                imports as references) or "text" (the .proto
                                                texts, as Java's serializer registers them,
                                                imports under their file names)
      },
      "subject_name_strategy": "topic",         topic (default: TOPIC-value, TOPIC-key),
                                                record (the record's full name) or
                                                topic_record (TOPIC-full name)
      "value_subject": "...", "key_subject": "...",  optional: this subject instead
      "auto_register": true,                    register the schemas (default true); false:
                                                they must be registered already
      "use_latest_version": false,              encode with the subject's latest schema
      "normalize": false,                       normalize schemas before registering
      "producer": {"linger.ms": 5, ...},        librdkafka properties, added
      "timeout": 60,                            seconds to wait for deliveries
      "records": [ RECORD, ... ]
    }

A RECORD:

    {"key": K, "value": V}            V (K) encoded with the value (key) schema; null
                                      for a NULL value (a tombstone) or key
    "partition": 2                    optional; else the key's partition by murmur2, as
                                      Java clients choose it
    "headers": {"name": "value"}      optional
    "raw_b64": "...", "raw_hex": "..."          the value's bytes as given, unencoded
    "key_raw_b64": "...", "key_raw_hex": "..."  the same for the key
    "corrupt": {...}                  the value serialized, then damaged:
        {"magic": 1}                  the first byte replaced (a wrong magic byte)
        {"schema_id": 999999}         the 4-byte schema id replaced (an unknown id)
        {"truncate": 3}               that many bytes cut from the end (a truncated body)
        {"append_hex": "ff"}          bytes added at the end (trailing garbage)
    "repeat": N                       the same record N times

Protobuf values are the JSON mapping of the message (json_format.ParseDict:
int64 as strings or numbers, enums by name, bytes in base64, Timestamp as
RFC 3339); "corrupt" applies as for Avro.  The message classes are made from
the descriptor set that Debian's protoc writes for "files".

Values follow the schema as plain JSON (records as objects, arrays, maps,
unions by the value's type), with these tagged objects for what JSON does not
carry; fastavro then encodes each with the schema's logical type:

    {"$decimal": "123.45"}                   Decimal (bytes or fixed decimal; the
                                             digits after the point must not exceed
                                             the schema's scale)
    {"$date": "2026-01-02"}                  date
    {"$time": "03:04:05.123456"}             time (time-millis drops the microseconds)
    {"$timestamp": "2026-01-02T03:04:05.123456Z"}  datetime with a time zone (none
                                             given: UTC), for timestamp-millis/-micros
    {"$local_timestamp": "2026-01-02T03:04:05.123456"}  naive datetime, for
                                             local-timestamp-millis/-micros
    {"$uuid": "0b8e6a3c-..."}                uuid.UUID (a plain string works as well)
    {"$bytes_b64": "..."}, {"$bytes_hex": "..."}   bytes (for bytes and fixed)
    {"$float": "NaN"}                        also "Infinity", "-Infinity"
    {"$union": ["com.example.Type", V]}      the union branch to take, by name
    {"$literal": {...}}                      this object as is (a map with a "$" key)

Logical types may also be given as the numbers Avro stores (days, ms, us):
fastavro passes integers through.

It prints one JSON line: {"delivered": N, "failed": N, "schema_ids":
{SUBJECT: ID, ...}, "records": [{"partition", "offset", "key_schema_id",
"value_schema_id", "value_hex", "key_hex", "error"}, ...]} (records left out
with --summary-only; the ids are read from each payload's header, null for a
payload that has none).  The exit status is 1 if any record was not
delivered, 2 if the spec or a value is wrong (nothing is sent then).
"""

import argparse
import base64
import datetime
import decimal
import faulthandler
import json
import os
import struct
import subprocess
import sys
import tempfile
import uuid

try:
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from google.protobuf import json_format
except ImportError as e:
    sys.exit(f"avro_produce: {e}: run it with the venv of scripts/pyavro.sh "
             "($(bash scripts/pyavro.sh)/bin/python tools/avro_produce.py)")


def fail(msg):
    print(f"avro_produce: {msg}", file=sys.stderr)
    sys.exit(2)


def parse_timestamp(text, aware):
    # fromisoformat of Python 3.11 reads "Z" and any number of fraction digits
    dt = datetime.datetime.fromisoformat(text)
    if aware and dt.tzinfo is None:
        dt = dt.replace(tzinfo=datetime.timezone.utc)
    if not aware and dt.tzinfo is not None:
        raise ValueError(f"a local timestamp has no time zone: {text}")
    return dt


TAGS = {
    "$decimal": lambda v: decimal.Decimal(v),
    "$date": lambda v: datetime.date.fromisoformat(v),
    "$time": lambda v: datetime.time.fromisoformat(v),
    "$timestamp": lambda v: parse_timestamp(v, True),
    "$local_timestamp": lambda v: parse_timestamp(v, False),
    "$uuid": lambda v: uuid.UUID(v),
    "$bytes_b64": lambda v: base64.b64decode(v, validate=True),
    "$bytes_hex": lambda v: bytes.fromhex(v),
    "$float": lambda v: float(v),
}


def convert(value):
    """The JSON value with its tagged objects turned into the Python types fastavro encodes."""
    if isinstance(value, list):
        return [convert(v) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        (tag, arg), = value.items()
        if tag == "$literal":
            return {k: convert(v) for k, v in arg.items()}
        if tag == "$union":
            name, inner = arg
            return (name, convert(inner))  # fastavro's tuple notation for a union branch
        if tag in TAGS:
            try:
                return TAGS[tag](arg)
            except (ValueError, TypeError, decimal.InvalidOperation) as e:
                raise ValueError(f"{tag}: {arg!r}: {e}") from None
    if any(k.startswith("$") for k in value):
        bad = [k for k in value if k.startswith("$")]
        raise ValueError(f"unknown tag {bad[0]} (a map with such keys: wrap it in $literal)")
    return {k: convert(v) for k, v in value.items()}


def raw_bytes(rec, prefix):
    """A record's raw key or value bytes ({prefix}raw_b64 / _hex), or None if it has none."""
    if prefix + "raw_b64" in rec:
        return base64.b64decode(rec[prefix + "raw_b64"], validate=True)
    if prefix + "raw_hex" in rec:
        return bytes.fromhex(rec[prefix + "raw_hex"])
    return None


def corrupt(payload, how):
    if payload is None:
        raise ValueError("corrupt: the value is null")
    data = bytearray(payload)
    for what, arg in how.items():
        if what == "magic":
            data[0] = arg
        elif what == "schema_id":
            data[1:5] = struct.pack(">I", arg)
        elif what == "truncate":
            if not 0 < arg <= len(data):
                raise ValueError(f"corrupt: cannot cut {arg} of {len(data)} bytes")
            del data[len(data) - arg:]
        elif what == "append_hex":
            data += bytes.fromhex(arg)
        else:
            raise ValueError(f"corrupt: unknown {what}")
    return bytes(data)


def schema_id_of(payload):
    """The schema id in a Confluent-framed payload, None if it is not framed so."""
    if payload is None or len(payload) < 5 or payload[0] != 0:
        return None
    return struct.unpack(">I", payload[1:5])[0]


def make_serializer(client, schema, spec, field, topic):
    if isinstance(schema, str):
        try:
            json.loads(schema)
            text = schema  # the schema's JSON text
        except ValueError:
            text = json.dumps(schema)  # a bare primitive type name: "string", "long"
    else:
        text = json.dumps(schema)
    strategy = spec.get("subject_name_strategy", "topic")
    types = {"topic": "TOPIC", "record": "RECORD", "topic_record": "TOPIC_RECORD"}
    if strategy not in types:
        fail(f"subject_name_strategy: {strategy!r} is not one of {', '.join(types)}")
    conf = {
        "auto.register.schemas": spec.get("auto_register", True),
        "use.latest.version": spec.get("use_latest_version", False),
        "normalize.schemas": spec.get("normalize", False),
        # explicitly: the client's default is ASSOCIATED, which asks the registry first
        "subject.name.strategy.type": types[strategy],
    }
    subject = spec.get("key_subject" if field == MessageField.KEY else "value_subject")
    if subject is not None:
        conf["subject.name.strategy"] = lambda ctx, record_name: subject
    try:
        return AvroSerializer(client, text, conf=conf)
    except Exception as e:  # a schema fastavro refuses
        fail(f"{'key' if field == MessageField.KEY else 'value'}_schema: {type(e).__name__}: {e}")


def protobuf_classes(pspec):
    """The message classes of pspec["files"], compiled by Debian's protoc into a descriptor set."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    with tempfile.TemporaryDirectory() as d:
        for name, text in pspec["files"].items():
            path = os.path.join(d, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        out = os.path.join(d, "set.pb")
        cmd = ["protoc", "--include_imports", f"--descriptor_set_out={out}", f"--proto_path={d}"]
        if os.path.isdir("/usr/include/google/protobuf"):
            cmd.append("--proto_path=/usr/include")
        r = subprocess.run(cmd + [pspec["file"]], capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"protoc: {r.stderr.strip()}")
        fds = descriptor_pb2.FileDescriptorSet()
        with open(out, "rb") as f:
            fds.ParseFromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for fdp in fds.file:
        pool.Add(fdp)
    return lambda full_name: message_factory.GetMessageClass(pool.FindMessageTypeByName(full_name))


def protobuf_serializer(client, pspec, cls, spec, field, topic):
    """ProtobufSerializer for cls; with register_as text, the .proto texts registered first."""
    from confluent_kafka.schema_registry import Schema, SchemaReference
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    conf = {
        "auto.register.schemas": spec.get("auto_register", True),
        "use.deprecated.format": False,
    }
    subject = spec.get("key_subject" if field == MessageField.KEY else "value_subject")
    if subject is not None:
        conf["subject.name.strategy"] = lambda ctx, record_name: subject
    if pspec.get("register_as", "descriptor") == "text":
        # as Java's KafkaProtobufSerializer: the .proto texts registered, the
        # imports under their file names; the message framed here (the Python
        # serializer reads a registered schema back only as a descriptor)
        registered = {}

        def register(name, subj):
            if subj not in registered:
                fd = cls.DESCRIPTOR.file.pool.FindFileByName(name)
                refs = [SchemaReference(dep.name, dep.name, register(dep.name, dep.name)[1])
                        for dep in fd.dependencies if not dep.name.startswith("google/protobuf/")]
                sid = client.register_schema(subj, Schema(pspec["files"][name], "PROTOBUF", refs))
                registered[subj] = (sid, client.lookup_schema(subj, Schema(pspec["files"][name], "PROTOBUF", refs)).version)
            return registered[subj]

        sid, _ = register(pspec["file"], subject or f"{topic}-{'key' if field == MessageField.KEY else 'value'}")
        path = []
        d = cls.DESCRIPTOR
        while d.containing_type is not None:
            path.insert(0, list(d.containing_type.nested_types).index(d))
            d = d.containing_type
        path.insert(0, list(d.file.message_types_by_name.values()).index(d))
        zigzag = lambda n: (n << 1) ^ (n >> 63)

        def varint(n):
            out = bytearray()
            while True:
                b = n & 0x7F
                n >>= 7
                out.append(b | (0x80 if n else 0))
                if not n:
                    return bytes(out)

        indexes = b"\x00" if path == [0] else varint(zigzag(len(path))) + b"".join(varint(zigzag(i)) for i in path)
        return lambda message, ctx: b"\x00" + struct.pack(">I", sid) + indexes + message.SerializeToString()
    return ProtobufSerializer(cls, client, conf=conf)


def subject_of(serializer, topic, field):
    """The subject that the serializer registers under (by its own strategy)."""
    ctx = SerializationContext(topic, field)
    return serializer._subject_name_func(ctx, serializer._schema_name)


def main():
    ap = argparse.ArgumentParser(description="produce Avro records (Confluent wire format)")
    ap.add_argument("spec", nargs="?", default="-", help="the spec (JSON); - for stdin")
    ap.add_argument("--summary-only", action="store_true", help="no per-record details")
    args = ap.parse_args()
    # a run that hangs says where (its caller gives up after 120 s by default)
    faulthandler.dump_traceback_later(int(os.environ.get("AVRO_PRODUCE_TRACE_AFTER", "90")), exit=False)

    try:
        spec = json.load(sys.stdin if args.spec == "-" else open(args.spec))
    except (OSError, ValueError) as e:
        fail(f"cannot read the spec: {e}")
    for k in ("bootstrap", "topic", "records"):
        if k not in spec:
            fail(f"the spec has no {k}")
    topic = spec["topic"]

    needs_registry = "value_schema" in spec or "key_schema" in spec or "protobuf" in spec
    pspec = spec.get("protobuf")
    value_ser = key_ser = None
    value_cls = key_cls = None
    if needs_registry:
        if "registry" not in spec:
            fail("a schema needs a registry")
        # A request the registry never answers (seen with Apicurio, 1 run of test 056 in 15: an
        # "associations" lookup on a pooled connection, read for ever) is given up after 10 s and
        # sent again on a new connection (the client retries transport errors, timeouts included);
        # without a timeout the client waits for ever.
        rconf = {"url": spec["registry"], "timeout": 10}
        if spec.get("registry_user_info"):
            rconf["basic.auth.user.info"] = spec["registry_user_info"]
        if spec.get("registry_ca"):
            rconf["ssl.ca.location"] = spec["registry_ca"]
        client = SchemaRegistryClient(rconf)
        if pspec is not None:
            classes = protobuf_classes(pspec)
            value_cls = classes(pspec["value_message"])
            value_ser = protobuf_serializer(client, pspec, value_cls, spec, MessageField.VALUE, topic)
            if pspec.get("key_message"):
                key_cls = classes(pspec["key_message"])
                key_ser = protobuf_serializer(client, pspec, key_cls, spec, MessageField.KEY, topic)
        if "value_schema" in spec:
            value_ser = make_serializer(client, spec["value_schema"], spec, MessageField.VALUE, topic)
        if "key_schema" in spec:
            key_ser = make_serializer(client, spec["key_schema"], spec, MessageField.KEY, topic)

    # Serialize everything first: a wrong value or a registry that refuses a
    # schema stops the run before anything is sent.
    messages = []
    schema_ids = {}
    vctx = SerializationContext(topic, MessageField.VALUE)
    kctx = SerializationContext(topic, MessageField.KEY)
    for i, rec in enumerate(spec["records"]):
        try:
            key = raw_bytes(rec, "key_")
            if key is None and rec.get("key") is not None:
                if key_cls is not None:
                    key = key_ser(json_format.ParseDict(rec["key"], key_cls()), kctx)
                    schema_ids[f"{topic}-key"] = schema_id_of(key)
                elif key_ser is not None:
                    key = key_ser(convert(rec["key"]), kctx)
                    schema_ids[subject_of(key_ser, topic, MessageField.KEY)] = schema_id_of(key)
                elif isinstance(rec["key"], str):
                    key = rec["key"].encode()
                else:
                    raise ValueError("a key that is not a string needs a key_schema")
            value = raw_bytes(rec, "")
            if value is None and rec.get("value") is not None:
                if value_ser is None:
                    raise ValueError("a value needs a value_schema (or raw_b64 / raw_hex)")
                if value_cls is not None:
                    value = value_ser(json_format.ParseDict(rec["value"], value_cls()), vctx)
                    schema_ids[f"{topic}-value"] = schema_id_of(value)
                else:
                    value = value_ser(convert(rec["value"]), vctx)
                    schema_ids[subject_of(value_ser, topic, MessageField.VALUE)] = schema_id_of(value)
            if "corrupt" in rec:
                value = corrupt(value, rec["corrupt"])
        except Exception as e:  # fastavro's and the registry's errors have many types
            fail(f"record {i}: {type(e).__name__}: {e}")
        headers = [(k, str(v).encode()) for k, v in (rec.get("headers") or {}).items()]
        for _ in range(rec.get("repeat", 1)):
            messages.append((key, value, rec.get("partition"), headers))

    conf = {
        "bootstrap.servers": spec["bootstrap"],
        # the partition of a key as Java clients (and kcat -X partitioner=murmur2_random) choose it
        "partitioner": "murmur2_random",
        "linger.ms": 5,
        "acks": "all",
        "enable.idempotence": True,
    }
    conf.update(spec.get("producer", {}))
    if os.environ.get("AVRO_PRODUCE_DEBUG"):
        conf["debug"] = os.environ["AVRO_PRODUCE_DEBUG"]
    producer = Producer(conf)
    results = [None] * len(messages)

    def report(n):
        def cb(err, msg):
            results[n] = {
                "partition": msg.partition(),
                "offset": msg.offset() if err is None else None,
                "error": None if err is None else str(err),
            }
        return cb

    for n, (key, value, partition, headers) in enumerate(messages):
        kw = {"key": key, "value": value, "on_delivery": report(n)}
        if partition is not None:
            kw["partition"] = partition
        if headers:
            kw["headers"] = headers
        while True:
            try:
                producer.produce(topic, **kw)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)
        producer.poll(0)
    left = producer.flush(spec.get("timeout", 60))

    delivered = sum(1 for r in results if r and r["error"] is None)
    summary = {
        "delivered": delivered,
        "failed": len(messages) - delivered,
        "schema_ids": schema_ids,
    }
    if left:
        summary["undelivered_at_timeout"] = left
    if not args.summary_only:
        summary["records"] = [
            dict(r or {"partition": None, "offset": None, "error": "no delivery report"},
                 key_schema_id=schema_id_of(k) if key_ser else None,
                 value_schema_id=schema_id_of(v),
                 key_hex=k.hex() if k is not None else None,
                 value_hex=v.hex() if v is not None else None)
            for r, (k, v, _, _) in zip(results, messages)
        ]
    print(json.dumps(summary))
    sys.exit(0 if summary["failed"] == 0 else 1)


if __name__ == "__main__":
    main()
