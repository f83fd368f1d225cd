#!/usr/bin/env python3
"""bench/peers/glue.py: the Python program a team writes to put a Kafka topic
into PostgreSQL exactly once, the peer "python" of bench/peers.sh.

confluent-kafka (librdkafka) consumes; psycopg 3 writes each batch, COPY for
append or executemany INSERT ... ON CONFLICT for upsert, and stores the
consumed offsets in a table in the same transaction: after a crash it seeks
to them, so nothing is written twice and nothing is lost (the glue that an
at-least-once consumer commit would not give).  The enrich is the example's
(examples/flights.sql): flight_phase, squawk_alert and the zone, the zones
read from their table (again every second, as users edit them live).

    glue.py --bootstrap HOST:PORT --topic T --dsn DSN --table TABLE
            --mode append|upsert [--group G] [--batch N] [--wait-ms MS]

Runs until SIGTERM or SIGINT.  A message that is not a JSON object with an
icao24 and a position is skipped and counted (printed at the end).
"""
import argparse
import json
import signal
import sys
import time

import psycopg
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

COLUMNS = ("seq", "icao24", "callsign", "lat", "lon", "baro_alt", "vert_rate", "squawk",
           "velocity", "heading", "poller_ts", "flight_phase", "squawk_alert", "zone")


def flight_phase(vert_rate, baro_alt):
    if vert_rate is not None and vert_rate > 500:
        return "climbing"
    if vert_rate is not None and vert_rate < -500:
        return "descending"
    if baro_alt is not None and baro_alt > 30000:
        return "cruise"
    return "en_route"


def zone_of(zones, lat, lon):
    # zones are sorted by name: the first that holds the point, as the
    # example's ORDER BY zone LIMIT 1
    for name, min_lat, max_lat, min_lon, max_lon in zones:
        if min_lat <= lat <= max_lat and min_lon <= lon <= max_lon:
            return name
    return None


def enrich(doc, zones):
    lat = doc.get("lat")
    icao24 = doc.get("icao24")
    if lat is None or icao24 is None:
        return None
    lon = doc.get("lon")
    vert_rate = doc.get("vert_rate")
    baro_alt = doc.get("baro_alt")
    squawk = doc.get("squawk")
    return (doc.get("seq"), icao24, doc.get("callsign"), lat, lon, baro_alt, vert_rate, squawk,
            doc.get("velocity"), doc.get("heading"), doc.get("poller_ts"),
            flight_phase(vert_rate, baro_alt),
            "emergency" if squawk in ("7500", "7600", "7700") else None,
            zone_of(zones, lat, lon) if lon is not None else None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--mode", choices=("append", "upsert"), required=True)
    ap.add_argument("--group", default="peers_glue")
    ap.add_argument("--batch", type=int, default=10000)
    ap.add_argument("--wait-ms", type=int, default=100)
    args = ap.parse_args()

    stop = False

    def on_signal(signum, frame):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    db = psycopg.connect(args.dsn, autocommit=False)
    with db.transaction():
        db.execute("""CREATE TABLE IF NOT EXISTS glue_offsets (
                          consumer text, topic text, partition int, next_offset bigint NOT NULL,
                          PRIMARY KEY (consumer, topic, partition))""")

    consumer = Consumer({
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 100,
        "socket.nagle.disable": True,
    })

    # every partition of the topic, from where the table says this consumer
    # stopped (earliest where it says nothing): assigned, not subscribed, so
    # that a restart after a crash does not wait for the group to give the
    # dead member's partitions up (session.timeout.ms)
    meta = consumer.list_topics(args.topic, timeout=30).topics[args.topic]
    with db.transaction():
        stored = dict(db.execute(
            "SELECT partition, next_offset FROM glue_offsets WHERE consumer = %s AND topic = %s",
            (args.group, args.topic)).fetchall())
    consumer.assign([TopicPartition(args.topic, p, stored.get(p, OFFSET_BEGINNING))
                     for p in sorted(meta.partitions)])

    cols = ", ".join(COLUMNS)
    upsert = (f"INSERT INTO {args.table} ({cols}) VALUES ({', '.join(['%s'] * len(COLUMNS))}) "
              f"ON CONFLICT (icao24) DO UPDATE SET "
              + ", ".join(f"{c} = excluded.{c}" for c in COLUMNS if c != "icao24")
              + ", updated_at = now()")
    store = ("INSERT INTO glue_offsets VALUES (%s, %s, %s, %s) ON CONFLICT (consumer, topic, partition) "
             "DO UPDATE SET next_offset = excluded.next_offset")
    zones, zones_at = [], 0.0
    skipped = written = 0
    while not stop:
        msgs = consumer.consume(num_messages=args.batch, timeout=args.wait_ms / 1000.0)
        if not msgs:
            continue
        now = time.monotonic()
        if now - zones_at >= 1.0:
            with db.transaction():
                zones = db.execute("SELECT zone, min_lat, max_lat, min_lon, max_lon FROM zones ORDER BY zone").fetchall()
            zones_at = now
        rows = []
        next_offsets = {}
        for m in msgs:
            if m.error():
                raise KafkaException(m.error())
            next_offsets[m.partition()] = m.offset() + 1
            try:
                doc = json.loads(m.value())
                row = enrich(doc, zones) if isinstance(doc, dict) else None
            except ValueError:
                row = None
            if row is None:
                skipped += 1
            else:
                rows.append(row)
        with db.transaction():
            with db.cursor() as cur:
                if args.mode == "append":
                    with cur.copy(f"COPY {args.table} ({cols}) FROM STDIN") as copy:
                        for row in rows:
                            copy.write_row(row)
                else:
                    cur.executemany(upsert, rows)
                cur.executemany(store, [(args.group, args.topic, p, o) for p, o in next_offsets.items()])
        written += len(rows)
    consumer.close()
    db.close()
    print(json.dumps({"written": written, "skipped": skipped}))


if __name__ == "__main__":
    sys.exit(main())
