# window_agg at the edges: event times no window can hold (infinite, at the
# ends of the timestamp range) are dead-lettered at decode and never move the
# watermark; NaN amounts make NaN values without breaking sdp_flow_state;
# windows too long, allowances too long or slides too short are refused;
# an event that would open a 17th window of one key is set aside instead of
# failing the worker; and group-by values containing the '|' that joins them
# stay apart.
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

# a key holds at most 16 open windows: one-minute windows with a one-hour allowance,
# 30 events in 30 minutes: the 17th and later are set aside with the reason, the flow runs on
SdpTest::create_source($node, 'many', $broker, 'many');
SdpTest::query($node, <<'SQL');
SELECT sdp_create_window_table('many_windows');
SELECT sdp_create_flow('many', source => 'many', target => 'many_windows',
  schema   => 'merchant_id text, event_ts timestamptz',
  operator => 'window_agg',
  options  => '{"event_time": "event_ts", "idle_timeout": "1 hour"}');
SELECT sdp_create_aggregation('many', 'n', group_by => ARRAY['merchant_id'], operation => 'count',
  window_size => '1 minute', allowance => '1 hour');
SQL
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'many',
	messages => [ map { [ "m$_", sprintf('{"merchant_id": "m1", "event_ts": "2026-01-01T00:%02d:10Z"}', $_), 0 ] } 0 .. 29 ]);
ok(SdpTest::wait_consumed($node, 'many', 30), '30 events consumed');
is(SdpTest::query($node, "SELECT count(*) || ' ' || min(kafka_offset) || ' ' || max(kafka_offset) FROM sdp.dead_letters WHERE flow = 'many'"),
	'14 16 29', 'the events that would open a 17th window are set aside');
is(SdpTest::query($node, "SELECT error FROM sdp.dead_letters WHERE flow = 'many' AND kafka_offset = 16"),
	'event at 2026-01-01 00:16:10+00 would open more than 16 windows of aggregation n for entity "m1" at once, the most a key holds',
	'with the reason');
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'many',
	messages => [ [ 'm2', '{"merchant_id": "m2", "event_ts": "2026-01-01T01:45:00Z"}', 0 ] ]);
ok($node->poll_query_until('postgres',
		'SELECT count(*) = 16 FROM many_windows'), 'the watermark passing them closes the 16');
is(SdpTest::query($node, "SET TimeZone = 'UTC'; SELECT count(DISTINCT window_start) || ' ' || min(window_start) || ' ' || max(window_start) || ' ' || sum(row_count) "
	  . "FROM many_windows WHERE entity = 'm1'"),
	'16 2026-01-01 00:00:00+00 2026-01-01 00:15:00+00 16', 'one row per minute, each with its event');
is(SdpTest::query($node, "SELECT state || ' ' || restarts || ' ' || rows_late FROM sdp.flow_status WHERE flow = 'many'"),
	'running 0 14', 'the flow runs on (it used to restart on the 17th for ever)');

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
