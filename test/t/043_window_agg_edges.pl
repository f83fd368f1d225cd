# window_agg at the edges: event times no window can hold (infinite, at the
# ends of the timestamp range) are dead-lettered at decode and never move the
# watermark; NaN amounts make NaN values without breaking sdp_flow_state;
# windows too long, allowances too long or slides too short are refused;
# a long allowance keeps many windows of one key open at once (one close
# timer per key, however many windows), none set aside; and group-by values
# containing the '|' that joins them stay apart.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'edges' => 1, 'many' => 1, 'pairs' => 1 });
my $node = SdpTest::new_node('edges', timezone => "'UTC'");    # the reasons print times in the server's zone
SdpTest::create_source($node, 'edges', $broker, 'edges');
SdpTest::query($node, <<'SQL');
SELECT sdp_create_window_table('edge_windows');
SELECT sdp_create_flow('edges', source => 'edges', target => 'edge_windows',
  schema   => 'merchant_id text, amount numeric, event_ts timestamptz',
  operator => 'window_agg',
  options  => '{"event_time": "event_ts", "idle_timeout": "1 hour"}');
SELECT sdp_load_aggregations('edges', $$[
  {"name": "n", "group_by": ["merchant_id"], "operation": "count", "window_size": "1 minute", "allowance": "1 second"},
  {"name": "vol", "group_by": ["merchant_id"], "operation": "sum", "value": "amount", "window_size": "1 minute", "allowance": "1 second"}]$$);
SQL

# declarations past the bounds
for my $case (
	[ "window_size => '101 years'", 'window_size must be at most 100 years' ],
	[ "window_size => '178000000 years'", 'window_size must be at most 100 years' ],
	[ "window_size => '1 day', allowance => '101 years'", 'allowance must be at most 100 years' ],
	[ "window_size => '1 day', slide => '1 second'", 'slide puts each event in 86400 windows, more than 1000' ])
{
	my ($ret, $out, $err) = $node->psql('postgres',
		"SELECT sdp_create_aggregation('edges', 'bad', group_by => ARRAY['merchant_id'], operation => 'count', $case->[0])");
	like($err, qr/ERROR:  \Q$case->[1]\E/, "refused: $case->[0]");
}
is(SdpTest::query($node, "SELECT count(*) FROM sdp.aggregations WHERE flow = 'edges'"), '2', 'nothing declared by them');

my @msgs = (
	'{"merchant_id": "m1", "amount": 1, "event_ts": "2026-01-01T00:00:10Z"}',
	'{"merchant_id": "m1", "amount": 1, "event_ts": "infinity"}',
	'{"merchant_id": "m1", "amount": 1, "event_ts": "-infinity"}',
	'{"merchant_id": "m1", "amount": 1, "event_ts": "294276-12-31T00:00:00Z"}',
	'{"merchant_id": "m1", "amount": 1, "event_ts": "4713-01-01T00:00:00Z BC"}',
	'{"merchant_id": "m1", "amount": 2.5, "event_ts": "2026-01-01T00:00:20Z"}',
	'{"merchant_id": "m2", "amount": "NaN", "event_ts": "2026-01-01T00:00:30Z"}',
	'{"merchant_id": "m4", "amount": "Infinity", "event_ts": "2026-01-01T00:00:30Z"}',
	'{"merchant_id": "m4", "amount": 5, "event_ts": "2026-01-01T00:00:30Z"}',
);
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'edges',
	messages => [ map { [ "k$_", $msgs[$_], 0 ] } 0 .. $#msgs ]);
ok(SdpTest::wait_consumed($node, 'edges', scalar @msgs), 'all consumed');

is(SdpTest::query($node, "SELECT kafka_offset || ' ' || stage || ' ' || sqlstate || ' ' || error FROM sdp.dead_letters WHERE flow = 'edges' ORDER BY kafka_offset"),
	join("\n", map { "$_->[0] decode 22008 field \"event_ts\": event time $_->[1] is outside the range windows and watermarks can hold "
		  . '(4514-10-07 00:00:00+00 BC to 294077-02-17 23:59:59.999999+00)' }
		[ 1, 'infinity' ], [ 2, '-infinity' ], [ 3, '294276-12-31 00:00:00+00' ], [ 4, '4713-01-01 00:00:00+00 BC' ]),
	'event times no window can hold are dead-lettered with the reason');
is(SdpTest::query($node, "SET TimeZone = 'UTC'; SELECT watermark FROM sdp.flow_status WHERE flow = 'edges'"),
	'2026-01-01 00:00:30+00', 'the watermark is the highest usable event time');
is(SdpTest::query($node, "SELECT jsonb_path_query_first(value, '\$.*.sum') FROM sdp_flow_state('edges') WHERE key = 'vol:m2' AND state = 'windows'"),
	'"NaN"', 'sdp_flow_state shows a NaN sum as the JSON string "NaN"');

# a later event closes the minute
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'edges',
	messages => [ [ 'k7', '{"merchant_id": "m3", "amount": 1, "event_ts": "2026-01-01T00:05:00Z"}', 0 ] ]);
ok($node->poll_query_until('postgres',
		'SELECT count(*) = 6 FROM edge_windows'), 'the first minute is finalized');
is(SdpTest::query($node, "SET TimeZone = 'UTC'; SELECT string_agg(definition || ' ' || entity || ' ' || window_start || ' ' || value || ' ' || row_count, E'\\n' ORDER BY definition, entity) FROM edge_windows"),
	join("\n",
		'n m1 2026-01-01 00:00:00+00 2 2',
		'n m2 2026-01-01 00:00:00+00 1 1',
		'n m4 2026-01-01 00:00:00+00 2 2',
		'vol m1 2026-01-01 00:00:00+00 3.5 2',
		'vol m2 2026-01-01 00:00:00+00 NaN 1',
		'vol m4 2026-01-01 00:00:00+00 Infinity 2'),
	'windows hold only the usable events; a NaN amount makes a NaN sum, an infinite one an infinite sum');
is(SdpTest::query($node, "SELECT state || ' ' || restarts FROM sdp.flow_status WHERE flow = 'edges'"), 'running 0', 'the flow runs on');

# one key with 31 windows open at once: one-minute windows with a 30-minute
# allowance, events over 40 minutes of one merchant (the first at 00:20,
# then 00:00 .. 00:39 in order, two in 00:20); a key used to hold at most 16
# and the events that would open more were set aside as late
SdpTest::create_source($node, 'many', $broker, 'many');
SdpTest::query($node, <<'SQL');
SELECT sdp_create_window_table('many_windows');
SELECT sdp_create_flow('many', source => 'many', target => 'many_windows',
  schema   => 'merchant_id text, event_ts timestamptz',
  operator => 'window_agg',
  options  => '{"event_time": "event_ts", "idle_timeout": "1 hour"}');
SELECT sdp_create_aggregation('many', 'n', group_by => ARRAY['merchant_id'], operation => 'count',
  window_size => '1 minute', allowance => '30 minutes');
SQL
my @many = ('2026-01-01T00:20:10Z', (map { sprintf('2026-01-01T00:%02d:40Z', $_) } 0 .. 39));
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'many',
	messages => [ map { [ 'm1', qq({"merchant_id": "m1", "event_ts": "$_"}), 0 ] } @many ]);
ok(SdpTest::wait_consumed($node, 'many', 41), '41 events consumed');
# the watermark is 00:39:40: windows 00:00 .. 00:08 have closed (end + 30 minutes), 00:09 .. 00:39 are open
ok($node->poll_query_until('postgres', 'SELECT count(*) = 9 FROM many_windows'), 'the windows the watermark passed are closed');
is(SdpTest::query($node, "SELECT (SELECT count(*) FROM jsonb_object_keys(value)) FROM sdp_flow_state('many') WHERE key = 'n:m1' AND state = 'windows'"),
	'31', '31 windows of the key open at once');
is(SdpTest::query($node, "SELECT jsonb_array_length(value) || ' ' || (value->0->>'at') FROM sdp_flow_state('many') WHERE key = 'n:m1' AND state = 'timers'"),
	'1 2026-01-01 00:40:00+00', 'one pending timer for the key, at its earliest close');
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'many',
	messages => [ [ 'm2', '{"merchant_id": "m2", "event_ts": "2026-01-01T01:45:00Z"}', 0 ] ]);
ok($node->poll_query_until('postgres', "SELECT count(*) = 40 FROM many_windows WHERE entity = 'm1'"),
	'the watermark passing them closes all 40');
is(SdpTest::query($node, <<'SQL'), '', 'every window of the 40 minutes, exactly (emission id, end, value, rows)');
SET TimeZone = 'UTC';
SELECT string_agg(coalesce(e.emission_id, w.emission_id), ' ')
  FROM (SELECT 'n/m1/' || to_char(s, 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS emission_id, s AS window_start,
               s + interval '1 minute' AS window_end, CASE WHEN s = '2026-01-01 00:20:00+00' THEN 2 ELSE 1 END AS n
          FROM generate_series(timestamptz '2026-01-01 00:00:00+00', '2026-01-01 00:39:00+00', interval '1 minute') s) e
  FULL JOIN (SELECT * FROM many_windows WHERE entity = 'm1') w USING (emission_id)
 WHERE w.emission_id IS NULL OR e.emission_id IS NULL OR w.definition <> 'n' OR w.window_start <> e.window_start
    OR w.window_end <> e.window_end OR w.value <> e.n OR w.row_count <> e.n
SQL
is(SdpTest::query($node, "SELECT count(*) FROM sdp_flow_state('many') WHERE key = 'n:m1'"), '0', 'nothing left of the key');
is(SdpTest::query($node, "SELECT state || ' ' || restarts || ' ' || rows_late || ' ' || rows_dead_lettered || ' ' || "
	  . "(SELECT count(*) FROM sdp.dead_letters WHERE flow = 'many') FROM sdp.flow_status WHERE flow = 'many'"),
	'running 0 0 0 0', 'nothing set aside, the flow runs on');

# ('x|y', 'z') and ('x', 'y|z') are two groups: '|' and '\' inside a value are escaped in the entity
SdpTest::create_source($node, 'pairs', $broker, 'pairs');
SdpTest::query($node, <<'SQL');
SELECT sdp_create_window_table('pair_windows');
SELECT sdp_create_flow('pairs', source => 'pairs', target => 'pair_windows',
  schema   => 'a text, b text, event_ts timestamptz',
  operator => 'window_agg',
  options  => '{"event_time": "event_ts", "idle_timeout": "1 hour"}');
SELECT sdp_create_aggregation('pairs', 'ab', group_by => ARRAY['a', 'b'], operation => 'count', window_size => '1 minute');
SELECT sdp_create_aggregation('pairs', 'a', group_by => ARRAY['a'], operation => 'count', window_size => '1 minute');
SQL
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'pairs',
	messages => [
		[ 'p1', '{"a": "x|y", "b": "z", "event_ts": "2026-01-01T00:00:01Z"}', 0 ],
		[ 'p2', '{"a": "x", "b": "y|z", "event_ts": "2026-01-01T00:00:02Z"}', 0 ],
		[ 'p3', '{"a": "x\\\\", "b": "|z", "event_ts": "2026-01-01T00:00:03Z"}', 0 ],
		[ 'p4', '{"a": "x", "b": null, "event_ts": "2026-01-01T00:00:04Z"}', 0 ],
		[ 'p5', '{"a": "later", "b": "", "event_ts": "2026-01-01T00:05:00Z"}', 0 ] ]);
ok($node->poll_query_until('postgres',
		'SELECT count(*) = 7 FROM pair_windows'), 'the first minute is finalized');
is(SdpTest::query($node, "SELECT string_agg(definition || ' ' || entity || ' ' || row_count, E'\n' ORDER BY definition COLLATE \"C\", entity COLLATE \"C\") FROM pair_windows"),
	join("\n", 'a x 2', 'a x\\ 1', 'a x|y 1', 'ab x\\\\|\|z 1', 'ab x\|y|z 1', 'ab x| 1', 'ab x|y\|z 1'),
	'one entity per group: values joined by |, with | and \\ inside them escaped (a single group-by column as it is)');

done_testing();
