# 100,000 messages over 8 partitions, appended: exactly 100,000 rows, and
# every partition's offsets and every sequence number exactly once.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;
use JSON::PP;

my $broker = SdpKafka::start_broker(topics => { 'raw-flights' => 8 });
my $node = SdpTest::new_node('append');
SdpTest::create_source($node, 'flights', $broker, 'raw-flights');

SdpTest::query($node, <<'SQL');
CREATE TABLE events (seq bigint, icao24 text, lat float8, lon float8, baro_alt float8,
                     poller_ts timestamptz, kafka_partition int, kafka_offset bigint,
                     kafka_key text, kafka_timestamp timestamptz);
SELECT sdp_create_flow('events_flow', 'flights', 'events',
  schema  => 'seq bigint, icao24 text, lat float8, lon float8, baro_alt float8, poller_ts timestamptz',
  options => '{"mode": "append", "progress_interval": "1 second"}');
SQL

# the producer runs while the flow consumes
my $report = SdpKafka::run_flightsim(
	bootstrap => $broker->bootstrap,
	topic => 'raw-flights',
	args => [ '--count', 100000, '--rate', 0, '--aircraft', 500, '--seed', 3 ]);
is($report->{delivered}, 100000, 'producer delivered 100,000');

ok(SdpTest::wait_consumed($node, 'events_flow', 100000), 'flow consumed every message');
SdpTest::assert_exactly_once($node, 'events', $report->{partitions}, 'append');

is(SdpTest::query($node,
		"SELECT count(*) FILTER (WHERE kafka_key IS DISTINCT FROM icao24) || ' ' || "
		  . "count(*) FILTER (WHERE kafka_timestamp IS NULL) || ' ' || count(*) FILTER (WHERE poller_ts IS NULL) FROM events"),
	'0 0 0', 'metadata columns: key is the icao24, every row has a Kafka timestamp and a poller_ts');

my ($state, $read, $written, $lag, $dead) = split /\|/, SdpTest::query($node,
	"SELECT state, messages_read, rows_written, lag, rows_dead_lettered FROM sdp.flow_status WHERE flow = 'events_flow'");
is($state, 'running', 'flow is running');
is($read, 100000, 'status: 100,000 messages read');
is($written, 100000, 'status: 100,000 rows written');
is($lag, 0, 'status: no lag');
is($dead, 0, 'status: nothing dead-lettered');

# the progress report carries Spark-style latency percentiles
ok($node->poll_query_until('postgres',
		"SELECT (sdp_flow_progress('events_flow')->>'reportId')::int >= 1"), 'a progress report exists');
my $progress = decode_json(SdpTest::query($node, "SELECT sdp_flow_progress('events_flow')"));
for my $kind (qw(processingLatencyMs sourceQueuingLatencyMs e2eLatencyMs))
{
	my $l = $progress->{latencies}{$kind};
	ok(defined $l, "progress has $kind");
	ok($l->{P0} <= $l->{P50} && $l->{P50} <= $l->{P90} && $l->{P90} <= $l->{P95}
		  && $l->{P95} <= $l->{P99}, "$kind percentiles are ordered");
}
ok(exists $progress->{inputRowsPerSecond} && exists $progress->{processedRowsPerSecond},
	'progress has input and processed rows per second');
diag("progress: " . encode_json($progress));

done_testing();
