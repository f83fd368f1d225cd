# Partitions added to a topic (Kafka's Admin API, CreatePartitions), against
# Apache Kafka (issue 27): a running flow in one worker, one in two workers,
# and one whose share named partitions the topic did not have yet each take
# the new partitions (each worker looks at the topic every 30 seconds), and
# read every message of each once, from the new partitions' start.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;

SdpKafka::needs_apache('partitions are added to a topic');

my $broker = SdpKafka::start_broker(topics => { 'grow' => 2 });
my $boot = $broker->bootstrap;
my $node = SdpTest::new_node('kafka_partitions');
SdpTest::create_source($node, 'grow', $broker, 'grow');
SdpTest::query($node, <<'SQL');
CREATE TABLE got (flow text, seq int, kafka_partition int, kafka_offset bigint);
SELECT sdp_create_flow('one', 'grow', 'got', 'seq int', $$SELECT 'one' AS flow, seq, kafka_partition, kafka_offset FROM input$$,
  options => '{"mode": "append"}');
SELECT sdp_create_flow('two', 'grow', 'got', 'seq int', $$SELECT 'two' AS flow, seq, kafka_partition, kafka_offset FROM input$$,
  options => '{"mode": "append", "workers": 2}');
SELECT sdp_create_flow('share', 'grow', 'got', 'seq int', $$SELECT 'share' AS flow, seq, kafka_partition, kafka_offset FROM input$$,
  options => '{"mode": "append", "partitions": [1, 2, 3]}');
SQL
my $log_offset = -s $node->logfile;

sub produce_to
{
	my ($partition, $from, $to) = @_;
	SdpKafka::kcat_produce(bootstrap => $boot, topic => 'grow',
		messages => [ map { [ "k$_", qq({"seq": $_}), $partition ] } $from .. $to ]);
}
produce_to(0, 1, 100);
produce_to(1, 101, 200);
ok(SdpTest::wait_consumed($node, 'one', 200), 'one: the 200 of partitions 0 and 1');
ok(SdpTest::wait_consumed($node, 'two', 200), 'two: the same, in two workers');
ok(SdpTest::wait_consumed($node, 'share', 100), 'share: the 100 of partition 1, the only one of its share the topic has');
ok($node->wait_for_log(qr/topic "grow" has no partitions 2, 3 \(of option "partitions"\) yet/, $log_offset),
	'share: the server log says partitions 2 and 3 are not there yet');

$broker->add_partitions('grow', 4);
produce_to(2, 201, 300);
produce_to(3, 301, 400);
ok(SdpTest::wait_consumed($node, 'one', 400), 'one: took partitions 2 and 3');
ok(SdpTest::wait_consumed($node, 'two', 400), 'two: took them, in its workers');
ok(SdpTest::wait_consumed($node, 'share', 300), 'share: took partitions 2 and 3 of its share');

for my $case ([ 'one', '0 1 100 1|1 101 200 1|2 201 300 1|3 301 400 1' ],
			  [ 'two', '0 1 100 1|1 101 200 1|2 201 300 1|3 301 400 1' ],
			  [ 'share', '1 101 200 1|2 201 300 1|3 301 400 1' ])
{
	my ($flow, $want) = @$case;
	is(join('|', split /\n/, SdpTest::query($node, "SELECT kafka_partition || ' ' || min(seq) || ' ' || max(seq) || ' '
	       || (count(*) = count(DISTINCT seq) AND count(*) = max(seq) - min(seq) + 1 AND min(kafka_offset) = 0)::int
	     FROM got WHERE flow = '$flow' GROUP BY kafka_partition ORDER BY kafka_partition")), $want,
		"$flow: every message of each partition once, the new ones from their first offset");
}
is(SdpTest::query($node, q{SELECT string_agg(worker || ':' || array_to_string(ARRAY(SELECT unnest(partitions) ORDER BY 1), ','), ' ' ORDER BY worker)
     FROM sdp.flow_workers WHERE flow = 'two'}),
	'0:0,2 1:1,3', 'two: each new partition in the worker of its number');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.flow_status WHERE state = 'running'"), '3', 'all three running');

done_testing();
