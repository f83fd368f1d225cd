#!/usr/bin/env python3
"""bench/peers/connect_json.py: flight_sim's positions in the form Kafka
Connect's JDBC sinks need, for the peer "connect_jdbc" of bench/peers.sh.

A JDBC sink connector writes only records that have a schema (a Struct);
plain JSON (JsonConverter with schemas.enable=false) gives it maps, which it
refuses.  So each position is copied to TOPIC_TO as Connect's JSON with its
schema ({"schema": ..., "payload": ...}, JsonConverter with
schemas.enable=true), to the same partition, with the same key and Kafka
timestamp; poller_ts becomes Connect's Timestamp (milliseconds since the
epoch), the rest keep their JSON types.

    connect_json.py --bootstrap HOST:PORT --from T --to T2 [--follow]

Without --follow it copies what T holds and exits; with it, it goes on until
SIGTERM (the latency runs: one more hop, measured by the floor on T2).
"""
import argparse
import datetime
import json
import signal
import sys

from confluent_kafka import Consumer, Producer, TopicPartition

FIELDS = [("seq", "int64"), ("icao24", "string"), ("callsign", "string"), ("lat", "double"),
          ("lon", "double"), ("baro_alt", "double"), ("vert_rate", "double"), ("squawk", "string"),
          ("velocity", "double"), ("heading", "double")]
SCHEMA = {"type": "struct", "name": "position", "optional": False,
          "fields": [{"field": f, "type": t, "optional": f not in ("seq", "icao24")} for f, t in FIELDS]
          + [{"field": "poller_ts", "type": "int64", "optional": True,
              "name": "org.apache.kafka.connect.data.Timestamp", "version": 1}]}
PREFIX = '{"schema":' + json.dumps(SCHEMA, separators=(",", ":")) + ',"payload":'


def convert(value):
    doc = json.loads(value)
    payload = {f: doc.get(f) for f, _ in FIELDS}
    for f, t in FIELDS:
        if t == "double" and payload[f] is not None:
            payload[f] = float(payload[f])
    ts = doc.get("poller_ts")
    payload["poller_ts"] = (None if ts is None else
                            int(datetime.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() * 1000))
    return PREFIX + json.dumps(payload, separators=(",", ":")) + "}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--from", dest="source", required=True)
    ap.add_argument("--to", dest="target", required=True)
    ap.add_argument("--follow", action="store_true")
    args = ap.parse_args()
    stop = False

    def on_signal(signum, frame):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": "connect_json." + args.target,
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "fetch.wait.max.ms": 10, "socket.nagle.disable": True})
    producer = Producer({"bootstrap.servers": args.bootstrap, "linger.ms": 5 if args.follow else 100,
                         "socket.nagle.disable": True, "enable.idempotence": True})
    meta = consumer.list_topics(args.source, timeout=30).topics[args.source]
    parts = sorted(meta.partitions)
    # --follow starts where the topic ends now; a copy starts at the beginning
    start = -1 if args.follow else -2
    consumer.assign([TopicPartition(args.source, p, start) for p in parts])
    at_end = set()
    copied = 0
    while not stop:
        for m in consumer.consume(num_messages=10000, timeout=0.05):
            if m.error():
                if m.error().code() == -191:   # _PARTITION_EOF
                    at_end.add(m.partition())
                    continue
                raise SystemExit(str(m.error()))
            at_end.discard(m.partition())
            while True:
                try:
                    producer.produce(args.target, convert(m.value()), key=m.key(), partition=m.partition(),
                                     timestamp=m.timestamp()[1])
                    break
                except BufferError:
                    producer.poll(0.1)
            copied += 1
        producer.poll(0)
        if not args.follow and len(at_end) == len(parts):
            break
    producer.flush(60)
    consumer.close()
    print(json.dumps({"copied": copied}))


if __name__ == "__main__":
    sys.exit(main())
