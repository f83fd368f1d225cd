# Rows an operator cannot hold (a key past 127 bytes, an active_count member
# past 63) are dead-lettered with the reason before the operator step; the
# flow keeps running (it used to restart on the same message for ever) and
# the rows around them are counted.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'limits' => 1 });
my $node = SdpTest::new_node('limits');
SdpTest::create_source($node, 'limits', $broker, 'limits');
SdpTest::query($node, <<'SQL');
CREATE TABLE zone_counts (zone text PRIMARY KEY, active_count bigint, over_capacity boolean, updated_at timestamptz);
SELECT sdp_create_flow('limits_flow', 'limits', 'zone_counts', 'zone text, icao24 text', operator => 'active_count',
  options => '{"key": "zone", "member": "icao24", "capacity": 2, "ttl": "1 hour"}');
SQL

my $k127 = ('k' x 125) . "\xc3\xa9";    # 127 bytes, the last character two bytes long
my $k128 = ('k' x 126) . "\xc3\xa9";
my @msgs = (
	qq({"zone": "$k128", "icao24": "a1"}),
	qq({"zone": "$k127", "icao24": "a1"}),
	'{"zone": "z", "icao24": "' . ('m' x 64) . '"}',
	'{"zone": "z", "icao24": "' . ('m' x 63) . '"}',
	'{"zone": "z", "icao24": "b2"}',
	'{"zone": "' . ('x' x 5000) . '", "icao24": "' . ('y' x 5000) . '"}',
	'{"zone": "z", "icao24": "c3"}',
);
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'limits',
	messages => [ map { [ "k$_", $msgs[$_], 0 ] } 0 .. $#msgs ]);
ok(SdpTest::wait_consumed($node, 'limits_flow', scalar @msgs), 'all consumed');

is(SdpTest::query($node, "SELECT string_agg(kafka_offset || ' ' || stage || ' ' || sqlstate || ' ' || error, E'\\n' ORDER BY kafka_offset) "
	  . "FROM sdp.dead_letters WHERE flow = 'limits_flow'"),
	join("\n",
		'0 transform 22001 key "' . ('k' x 40) . '..." is longer than 127 bytes',
		'2 transform 22001 member "' . ('m' x 40) . '..." is longer than 63 bytes',
		'5 transform 22001 key "' . ('x' x 40) . '..." is longer than 127 bytes'),
	'keys and members past the limits are dead-lettered with the reason');
ok($node->poll_query_until('postgres', "SELECT active_count = 3 FROM zone_counts WHERE zone = 'z'"),
	'the zone counts the three members that fit');
is(SdpTest::query($node, "SELECT length(zone) || ' ' || octet_length(zone) || ' ' || active_count FROM zone_counts WHERE zone <> 'z'"),
	'126 127 1', 'a key of exactly 127 bytes is kept');
is(SdpTest::query($node, "SELECT state || ' ' || restarts || ' ' || rows_dead_lettered FROM sdp.flow_status WHERE flow = 'limits_flow'"),
	'running 0 3', 'the flow runs on, never restarted');

done_testing();
