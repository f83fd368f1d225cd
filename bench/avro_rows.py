#!/usr/bin/env python3
"""bench/avro_rows.py: JSON lines of positions (rows of the plain case) -> a spec
for tools/avro_produce.py: the same rows as Avro values of POSITION_SCHEMA (or,
with --protobuf, Protobuf values of POSITION_PROTO), keyed by icao24 (string
keys), to the topic and registry given.

    avro_rows.py BOOTSTRAP TOPIC REGISTRY_URL [--protobuf] < rows.jsonl > spec.json
"""
import json
import sys

FLOATS = ["lat", "lon", "baro_alt", "vert_rate", "velocity", "heading"]
SCHEMA = {"type": "record", "name": "Position", "namespace": "sdp.bench", "fields":
          [{"name": "icao24", "type": "string"},
           {"name": "callsign", "type": ["null", "string"], "default": None}]
          + [{"name": f, "type": ["null", "double"], "default": None} for f in FLOATS[:4]]
          + [{"name": "squawk", "type": ["null", "string"], "default": None}]
          + [{"name": f, "type": ["null", "double"], "default": None} for f in FLOATS[4:]]
          + [{"name": "poller_ts", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}],
              "default": None}]}

# the same fields in Protobuf: optional (explicit presence) where Avro has ["null", T]
POSITION_PROTO = """syntax = "proto3";
package sdp.bench;
import "google/protobuf/timestamp.proto";
message Position {
  string icao24 = 1;
  optional string callsign = 2;
  optional double lat = 3;
  optional double lon = 4;
  optional double baro_alt = 5;
  optional double vert_rate = 6;
  optional string squawk = 7;
  optional double velocity = 8;
  optional double heading = 9;
  google.protobuf.Timestamp poller_ts = 10;
}
"""

bootstrap, topic, registry = sys.argv[1:4]
protobuf = "--protobuf" in sys.argv[4:]
records = []
for line in sys.stdin:
    row = json.loads(line)
    if protobuf:
        value = {k: v for k, v in row.items() if v is not None}
        for f in FLOATS:
            if f in value:
                value[f] = float(value[f])
        records.append({"key": row["icao24"], "value": value})
        continue
    value = {k: row.get(k) for k in ["icao24", "callsign", "squawk"]}
    for f in FLOATS:
        value[f] = None if row.get(f) is None else float(row[f])
    # to_json's timestamptz: "2026-12-05T06:00:00.123456+00:00"
    value["poller_ts"] = None if row.get("poller_ts") is None else {"$timestamp": row["poller_ts"]}
    records.append({"key": row["icao24"], "value": value})
if protobuf:
    formats = {"protobuf": {"files": {"position.proto": POSITION_PROTO}, "file": "position.proto",
                            "value_message": "sdp.bench.Position"}}
else:
    formats = {"value_schema": SCHEMA, "key_schema": "string"}
json.dump({"bootstrap": bootstrap, "topic": topic, "registry": registry, **formats,
           "producer": {"linger.ms": 100, "batch.num.messages": 10000},
           "timeout": 600, "records": records}, sys.stdout)
