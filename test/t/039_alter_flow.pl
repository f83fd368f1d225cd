# sdp_alter_flow on a running flow, mid-stream: first a new schema field and
# transform column, then new options.  Each change takes over at a batch
# boundary (the launcher restarts the flow's workers from their committed
# offsets): every (partition, offset) is written once, and in every
# partition the rows before the change lack the new column and the rows
# after it have it.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'raw-flights' => 4 });
my $node = SdpTest::new_node('alter');
SdpTest::create_source($node, 'flights', $broker, 'raw-flights');
SdpTest::query($node, <<'SQL');
CREATE TABLE events (seq bigint, icao24 text, alt float8, kafka_partition int, kafka_offset bigint);
SELECT sdp_create_flow('ev', 'flights', 'events', 'seq bigint, icao24 text', options => '{"workers": 2}');
SQL
ok(SdpTest::wait_for($node, "SELECT state = 'running' AND partitions IS NOT NULL FROM sdp.flow_status WHERE flow = 'ev'"),
	'the flow runs in 2 workers');

my $total = 40000;
my $producer = SdpKafka::start_flightsim(bootstrap => $broker->bootstrap, topic => 'raw-flights',
	args => [ '--count', $total, '--rate', 4000, '--linger-ms', 20, '--seed', 39, '--aircraft', 300 ]);

ok(SdpTest::wait_for($node, 'SELECT count(*) > 8000 FROM events'), 'streaming');
SdpTest::query($node, <<'SQL');
SELECT sdp_alter_flow('ev', schema => 'seq bigint, icao24 text, baro_alt float8',
  transform => 'SELECT seq, icao24, coalesce(baro_alt, -1) AS alt, kafka_partition, kafka_offset FROM input');
SQL
pass('altered mid-stream: a new field and column');
ok(SdpTest::wait_for($node, 'SELECT count(*) > 0 FROM events WHERE alt IS NOT NULL'), 'rows with the new column arrive');

ok(SdpTest::wait_for($node, 'SELECT count(*) > 24000 FROM events'), 'streaming on');
SdpTest::query($node, qq{SELECT sdp_alter_flow('ev', options => '{"max_batch_rows": 200, "workers": 3}')});
pass('altered mid-stream again: new options (and 3 workers)');
ok(SdpTest::wait_for($node, "SELECT count(*) = 3 FROM sdp.flow_workers WHERE flow = 'ev' AND state = 'running'"),
	'3 workers run');

my $report = $producer->finish;
is($report->{delivered}, $total, "producer delivered $total");
ok(SdpTest::wait_consumed($node, 'ev', $total), 'everything consumed');
SdpTest::assert_exactly_once($node, 'events', $report->{partitions}, 'across both changes');
is(SdpTest::query($node, <<'SQL'), '4|0', 'in every partition the change is one offset: before it no new column, after it always');
SELECT count(*), count(*) FILTER (WHERE last_old >= first_new)
  FROM (SELECT kafka_partition, max(kafka_offset) FILTER (WHERE alt IS NULL) AS last_old,
               min(kafka_offset) FILTER (WHERE alt IS NOT NULL) AS first_new
          FROM events GROUP BY 1) p
 WHERE last_old IS NOT NULL AND first_new IS NOT NULL
SQL
is(SdpTest::query($node, "SELECT options->>'max_batch_rows', options->>'workers', schema FROM sdp.flows WHERE name = 'ev'"),
	'200|3|seq bigint, icao24 text, baro_alt float8', 'the declaration holds both changes');
is(SdpTest::query($node, "SELECT restarts, rows_dead_lettered FROM sdp.flow_status WHERE flow = 'ev'"), '0|0',
	'no unexpected restart, no dead letter');

done_testing();
