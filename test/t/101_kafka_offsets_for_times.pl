# Timestamps to offsets, against Apache Kafka (issue 27): sdp_reset_flow to a
# timestamp and a flow's starting_offsets as a timestamp take Kafka's own
# offsets-for-times answer (ListOffsets by timestamp, from the broker's time
# index), exact per partition, without reading the partitions from their
# start (what sdp_ext does on a broker that answers "none", as the mock
# cluster does, and says in the server log).
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;
use POSIX qw(strftime);
use Time::HiRes qw(sleep time);

SdpKafka::needs_apache('the broker looks offsets up by time');

my $broker = SdpKafka::start_broker(topics => { 'timed' => 4 });
my $boot = $broker->bootstrap;
my $node = SdpTest::new_node('kafka_times');
SdpTest::create_source($node, 'timed', $broker, 'timed');
SdpTest::query($node, 'CREATE TABLE seen (flow text, seq int, kafka_partition int, kafka_offset bigint)');

sub batch { my ($from, $to) = @_; return [ map { [ "k$_", qq({"seq": $_}), undef ] } $from .. $to ] }

# 200 messages, then a moment T, then 200 more
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'timed', messages => batch(1, 200));
sleep 1.2;
my $t = time;
my $at = strftime('%Y-%m-%d %H:%M:%S', gmtime($t)) . sprintf('.%03d+00', int(($t - int($t)) * 1000));
sleep 1.2;
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'timed', messages => batch(201, 400));

# what the topic holds: per partition, the first offset at or after T
my @all = SdpKafka::kcat_consume(bootstrap => $boot, topic => 'timed');
is(scalar @all, 400, 'the topic holds the 400');
my %first;
for my $m (sort { $a->{offset} <=> $b->{offset} } @all)
{
	$first{ $m->{partition} } //= $m->{offset} if $m->{timestamp_ms} >= int($t * 1000);
}
is(scalar keys %first, 4, 'each partition has messages after T');
my $expected = '{' . join(', ', map { "\"$_\": $first{$_}" } sort keys %first) . '}';
note "T = $at, first offsets after it: $expected";

my $log_offset = -s $node->logfile;

# a flow on a source that starts at T
SdpTest::create_source($node, 'timed_from_t', $broker, 'timed', qq({"starting_offsets": "$at"}));
SdpTest::query($node, "SELECT sdp_create_flow('from_t', 'timed_from_t', 'seen', 'seq int',
  \$\$SELECT 'from_t' AS flow, seq, kafka_partition, kafka_offset FROM input\$\$,
  options => '{\"mode\": \"append\"}')");
ok(SdpTest::wait_consumed($node, 'from_t', 400), 'from_t: read to the end');
is(SdpTest::query($node, "SELECT count(*) || ' ' || count(DISTINCT seq) || ' ' || min(seq) || ' ' || max(seq) FROM seen WHERE flow = 'from_t'"),
	'200 200 201 400', 'starting_offsets T: exactly the 200 after T, each once');
is(SdpTest::query($node, "SELECT count(*) FROM seen s WHERE flow = 'from_t' AND kafka_offset < ("
		. join(' ', 'CASE kafka_partition', (map { "WHEN $_ THEN $first{$_}" } sort keys %first), 'END') . ')'),
	'0', 'none before the first offset after T of its partition');

# a flow that read everything, reset to T
SdpTest::query($node, "SELECT sdp_create_flow('reset_t', 'timed', 'seen', 'seq int',
  \$\$SELECT 'reset_t' AS flow, seq, kafka_partition, kafka_offset FROM input\$\$, options => '{\"mode\": \"append\"}')");
ok(SdpTest::wait_consumed($node, 'reset_t', 400), 'reset_t: read all 400');
SdpTest::query($node, "SELECT sdp_stop_flow('reset_t')");
ok(SdpTest::wait_for($node, "SELECT state = 'stopped' FROM sdp.flow_status WHERE flow = 'reset_t'"), 'stopped');
is(SdpTest::query($node, "SELECT sdp_reset_flow('reset_t', '$at')"), $expected,
	'sdp_reset_flow to T: the first offset after T of each partition, as Kafka answers it');
SdpTest::query($node, "DELETE FROM seen WHERE flow = 'reset_t'; SELECT sdp_start_flow('reset_t')");
ok(SdpTest::wait_consumed($node, 'reset_t', 400), 'reset_t: read to the end again');
is(SdpTest::query($node, "SELECT count(*) || ' ' || count(DISTINCT seq) || ' ' || min(seq) || ' ' || max(seq) FROM seen WHERE flow = 'reset_t'"),
	'200 200 201 400', 'after the reset: exactly the 200 after T, each once');

# after the last message: the end of each partition
my $later = strftime('%Y-%m-%d %H:%M:%S+00', gmtime(time + 3600));
SdpTest::query($node, "SELECT sdp_stop_flow('reset_t')");
ok(SdpTest::wait_for($node, "SELECT state = 'stopped' FROM sdp.flow_status WHERE flow = 'reset_t'"), 'stopped again');
my %count;
$count{ $_->{partition} }++ for @all;
is(SdpTest::query($node, "SELECT sdp_reset_flow('reset_t', '$later')"),
	'{' . join(', ', map { "\"$_\": $count{$_}" } sort keys %count) . '}',
	'a time after the last message: the end of each partition');

unlike(PostgreSQL::Test::Utils::slurp_file($node->logfile, $log_offset), qr/found no offset by time/,
	'no partition was read to find an offset: the broker answered each lookup');

done_testing();
