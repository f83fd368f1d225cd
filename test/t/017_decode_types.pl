# JSON to the declared input types: text, integers, floats, numeric, boolean,
# timestamptz from ISO-8601 and from epoch seconds, milliseconds and
# microseconds, jsonb for nested values, numbers given as strings; the
# Kafka metadata columns; and what does not fit goes to the dead letters.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'typed' => 1 });
my $node = SdpTest::new_node('types');
SdpTest::create_source($node, 'typed', $broker, 'typed');
SdpTest::query($node, <<'SQL');
CREATE TABLE typed (id int PRIMARY KEY, t text, i2 int2, i8 int8, f4 float4, f8 float8, n numeric(10,2),
                    b boolean, ts timestamptz, j jsonb, u uuid, d date,
                    kafka_topic text, kafka_partition int, kafka_offset bigint, kafka_key text, kafka_timestamp timestamptz);
SELECT sdp_create_flow('typed_flow', 'typed', 'typed',
  'id int, t text, i2 int2, i8 int8, f4 float4, f8 float8, n numeric(10,2), b boolean, ts timestamptz, j jsonb, u uuid, d date');
SQL
my @msgs = (
	[ 'k1', '{"id": 1, "t": "plain", "i2": 7, "i8": 9007199254740993, "f4": 1.5, "f8": 0.1, "n": 12.345, "b": true, "ts": "2026-01-02T03:04:05.678Z", "j": {"a": [1, 2, {"b": null}]}, "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "d": "2026-02-03"}' ],
	[ 'k2', '{"id": 2, "t": 42, "i2": "8", "i8": "-5", "f4": "2.25", "f8": "1e-3", "n": "7", "b": "false", "ts": 1767323045}' ],
	[ 'k3', '{"id": 3, "t": {"nested": true}, "ts": 1767323045678, "j": [1, "two"], "b": null}' ],
	[ 'k4', '{"id": 4, "ts": 1767323045678901, "j": "just a string", "f8": 12}' ],
	[ 'k5', '{"id": 5, "i2": 70000}' ],
	[ 'k6', '{"id": 6, "i8": 1.5}' ],
	[ 'k7', '{"id": 7, "ts": "yesterday-ish"}' ],
	[ 'k8', '{"id": 8, "u": "not-a-uuid"}' ],
	[ 'k9', '[1, 2, 3]' ],
	[ undef, '{"id": 10, "t": "no key"}' ],
	[ 'k11', '{"id": 11, "n": 123456789.123}' ],
	[ 'k12', '{"id": 12, "t": 0.10, "skipped": {"x": [1, {"deep": "t"}]}, "n": 1e2, "f8": -0.0}' ],
	[ 'k13', '{"id": 13, "t": "first", "t": "last", "i8": 3.0}' ],
	[ 'k14', '{"id": 14, "t": "unterminated}' ],
	[ 'k15', "{\"id\": 15, \"t\": \"bad \xff byte\"}" ],
	[ 'k16', '{"id": 16, "t": "caf\u00e9 \ud83d\ude00 \"q\"", "j": "caf\u00e9"}' ],
	[ 'k17', '{"id": 17, "i8": 12345678901234567890}' ],
	[ 'k18', '{"id": 18,}' ],
);
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'typed',
	messages => [ map { [ $_->[0], $_->[1], 0 ] } @msgs ]);
ok(SdpTest::wait_consumed($node, 'typed_flow', scalar @msgs), 'all consumed');

SdpTest::query($node, "ALTER DATABASE postgres SET TimeZone = 'UTC'");
is(SdpTest::query($node, "SET TimeZone = 'UTC'; SELECT t, i2, i8, f4, f8, n, b, ts, j, u, d FROM typed WHERE id = 1"),
	'plain|7|9007199254740993|1.5|0.1|12.35|t|2026-01-02 03:04:05.678+00|{"a": [1, 2, {"b": null}]}|a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11|2026-02-03',
	'every type from its JSON value (numeric rounded to its typmod)');
is(SdpTest::query($node, "SET TimeZone = 'UTC'; SELECT t, i2, i8, f4, f8, n, b, ts FROM typed WHERE id = 2"),
	'42|8|-5|2.25|0.001|7.00|f|2026-01-02 03:04:05+00', 'numbers and booleans given as strings; epoch seconds');
is(SdpTest::query($node, "SET TimeZone = 'UTC'; SELECT t, ts, j, b IS NULL FROM typed WHERE id = 3"),
	'{"nested": true}|2026-01-02 03:04:05.678+00|[1, "two"]|t', 'nested JSON into text as sent; epoch milliseconds; jsonb array; null');
is(SdpTest::query($node, "SELECT t, n, f8 FROM typed WHERE id = 12"), '0.10|100.00|-0',
	'a number keeps its text into text; 1e2 into numeric; an undeclared nested field is skipped');
is(SdpTest::query($node, "SELECT t, i8 FROM typed WHERE id = 13"), 'last|3', 'a repeated field: the last one; 3.0 into bigint');
is(SdpTest::query($node, "SELECT t, j FROM typed WHERE id = 16"), qq{caf\xc3\xa9 \xf0\x9f\x98\x80 "q"|"caf\xc3\xa9"},
	'escapes: \\u00e9, a surrogate pair, a quote; a jsonb string');
is(SdpTest::query($node, "SET TimeZone = 'UTC'; SELECT ts, j, f8 FROM typed WHERE id = 4"),
	'2026-01-02 03:04:05.678901+00|"just a string"|12', 'epoch microseconds; a jsonb string; an integer into float8');
is(SdpTest::query($node, "SELECT kafka_topic, kafka_partition, kafka_key, kafka_timestamp IS NOT NULL FROM typed WHERE id = 1"),
	'typed|0|k1|t', 'metadata columns');
is(SdpTest::query($node, "SELECT kafka_key IS NULL, t FROM typed WHERE id = 10"), 't|no key', 'a message without key');
is(SdpTest::query($node, "SELECT string_agg(kafka_offset || ': ' || error, E'\\n' ORDER BY kafka_offset) FROM sdp.dead_letters WHERE flow = 'typed_flow'"),
	join("\n",
		'4: field "i2": value 70000 is out of range for type smallint',
		'5: field "i8": invalid input syntax for type bigint: "1.5"',
		'6: field "ts": invalid input syntax for type timestamp with time zone: "yesterday-ish"',
		'7: field "u": invalid input syntax for type uuid: "not-a-uuid"',
		'8: message is not a JSON object',
		'10: field "n": numeric field overflow',
		'13: invalid JSON at line 1, column 17: Token ""unterminated}" is invalid.',
		'14: message is not valid UTF-8 (at byte 21)',
		'16: field "i8": value 12345678901234567890 is out of range for type bigint',
		'17: invalid JSON at line 1, column 11: Expected string, but found "}".'),
	'values that do not fit are dead-lettered with the reason');
is(SdpTest::query($node, 'SELECT count(*) FROM typed'), '8', 'the rest is written');

done_testing();
