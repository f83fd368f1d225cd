#!/usr/bin/env python3
"""bench/avro_rows.py: JSON lines of positions (rows of the plain case) -> a spec
for tools/avro_produce.py: the same rows as Avro values of POSITION_SCHEMA, keyed
by icao24 (string keys), to the topic and registry given.

    avro_rows.py BOOTSTRAP TOPIC REGISTRY_URL < rows.jsonl > spec.json
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

bootstrap, topic, registry = sys.argv[1:4]
records = []
for line in sys.stdin:
    row = json.loads(line)
    value = {k: row.get(k) for k in ["icao24", "callsign", "squawk"]}
    for f in FLOATS:
        value[f] = None if row.get(f) is None else float(row[f])
    # to_json's timestamptz: "2026-12-05T06:00:00.123456+00:00"
    value["poller_ts"] = None if row.get("poller_ts") is None else {"$timestamp": row["poller_ts"]}
    records.append({"key": row["icao24"], "value": value})
json.dump({"bootstrap": bootstrap, "topic": topic, "registry": registry, "value_schema": SCHEMA,
           "key_schema": "string", "producer": {"linger.ms": 100, "batch.num.messages": 10000},
           "timeout": 600, "records": records}, sys.stdout)
