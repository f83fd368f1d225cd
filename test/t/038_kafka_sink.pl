# A flow that writes to a Kafka topic (a sink) exactly once: a flow from a
# JSON topic to a sink topic, three SIGKILLs of the postmaster mid-stream and
# one broker outage; a read_committed consumer (kcat) sees every input once
# (by its seq), keyed by the declared sink_key, every key in one partition;
# the outbox is empty at the end.  A second flow reads the sink topic back
# into a table, unchanged (the value is what a source decodes).  A flow of
# a role that is not a superuser (row-level security on the outbox) writes
# every hundredth input, without key, to a sink of its own.
#
# The embedded broker (librdkafka's mock cluster) has no transaction
# semantics: what an interrupted or aborted transaction wrote stays visible
# (docs/design-issue14.md).  So this proves the relay's recovery against a
# broker that shows every partial write: nothing may be produced twice.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use JSON::PP ();
use SdpKafka;
use SdpTest;
use Test::More;
use Time::HiRes qw(sleep);

my $broker = SdpKafka::start_broker(topics => { 'raw-flights' => 4, 'flights-out' => 3, 'alice-out' => 2, 'small' => 1, 'small-out' => 1 });
my $node = SdpTest::new_node('kafka_sink');
my $boot = $broker->bootstrap;
SdpTest::create_source($node, 'flights', $broker, 'raw-flights');
SdpTest::create_source($node, 'flights_back', $broker, 'flights-out', '{"isolation.level": "read_committed"}');
SdpTest::query($node, <<"SQL");
SELECT sdp_create_sink('out', '$boot', 'flights-out', '{"linger.ms": 2}');
SELECT sdp_create_flow(name => 'to_kafka', source => 'flights', schema => 'seq bigint, icao24 text, lat float8',
  transform => 'SELECT seq, upper(icao24) AS aircraft, lat, kafka_partition AS src_partition FROM input',
  options => '{"sink_key": "aircraft"}', sink => 'out');
CREATE TABLE back (seq bigint, aircraft text, lat float8, src_partition int, kafka_partition int, kafka_offset bigint,
                   kafka_key text);
SELECT sdp_create_flow('from_kafka', 'flights_back', 'back',
  'seq bigint, aircraft text, lat float8, src_partition int');
CREATE ROLE alice LOGIN;
SET ROLE alice;
SELECT sdp_create_source('alice_src', '$boot', 'raw-flights');
SELECT sdp_create_sink('alice_out', '$boot', 'alice-out');
SELECT sdp_create_flow('alice_flow', 'alice_src', NULL, 'seq bigint, icao24 text',
  transform => 'SELECT seq, icao24 FROM input WHERE seq % 100 = 0', sink => 'alice_out');
RESET ROLE;
SELECT sdp_create_source('small', '$boot', 'small');
SELECT sdp_create_sink('small_out', '$boot', 'small-out');
SELECT sdp_create_flow('plain', 'small', NULL, 'seq bigint, at timestamptz, doc jsonb',
  options => '{"sink_key": "kafka_key"}', sink => 'small_out');
SQL
# without transform: the declared columns, not the metadata; the key from kafka_key
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'small', messages => [
	[ 'k1', '{"seq": 1, "at": "2026-12-01T08:00:00Z", "doc": {"a": [1, 2]}, "extra": true}', undef ],
	[ undef, '{"seq": 2}', undef ] ]);

my $total = 50000;
my $producer = SdpKafka::start_flightsim(
	bootstrap => $boot, topic => 'raw-flights',
	# idempotent: a retry across the broker outage must not put an input in twice
	args => [ '--count', $total, '--rate', 4000, '--seed', 38, '--aircraft', 300, '-X', 'enable.idempotence=true' ]);

sub produced { SdpTest::query($node, 'SELECT count(*) FROM back') }

ok($node->poll_query_until('postgres', 'SELECT count(*) > 5000 FROM back'), 'streaming through the sink');
SdpTest::crash_and_restart($node);
pass('crash 1: mid-stream');

ok($node->poll_query_until('postgres', "SELECT count(*) = 4 FROM sdp.flow_status WHERE state = 'running'"),
	'flows restarted');
sleep 0.3;
SdpTest::crash_and_restart($node);
pass('crash 2: right after the restart, during catch-up');

ok($node->poll_query_until('postgres', 'SELECT count(*) > 20000 FROM back'), 'streaming again');
$broker->down;
ok($node->poll_query_until('postgres',
		"SELECT NOT broker_ok OR state = 'retrying' FROM sdp.flow_status WHERE flow = 'to_kafka'"),
	'broker outage: the status shows it');
sleep 1;
$broker->up;
ok($node->poll_query_until('postgres', "SELECT count(*) > 30000 FROM back"), 'streaming after the outage');
SdpTest::crash_and_restart($node);
pass('crash 3: later in the stream');

my $report = $producer->finish;
is($report->{delivered}, $total, "producer delivered $total");
ok(SdpTest::wait_consumed($node, 'to_kafka', $total), 'to_kafka consumed everything');
ok(SdpTest::wait_consumed($node, 'alice_flow', $total), 'alice_flow consumed everything');
ok($node->poll_query_until('postgres', 'SELECT count(*) = 0 FROM sdp.outbox'), 'the outbox is empty');

my $json = JSON::PP->new;
# the input itself: every seq once (so any repeat below is the sink's)
my %in_seq;
$in_seq{ eval { $json->decode($_->{payload})->{seq} } // 'bad' }++
  for SdpKafka::kcat_consume(bootstrap => $boot, topic => 'raw-flights');
is(join(',', scalar(keys %in_seq), scalar(grep { $_ != 1 } values %in_seq)), "$total,0", "the input holds every seq once");

# what a read_committed consumer sees in the sink topic
my @msgs = SdpKafka::kcat_consume(bootstrap => $boot, topic => 'flights-out',
	properties => { 'isolation.level' => 'read_committed' });
my $err;
my (%seen, $dup, $bad_key, %key_partition, $split_key, $bad_json);
for my $m (@msgs)
{
	my $v = eval { $json->decode($m->{payload}) };
	if (!$v || ref $v ne 'HASH' || join(',', sort keys %$v) ne 'aircraft,lat,seq,src_partition')
	{
		$bad_json++;
		next;
	}
	$dup++ if $seen{ $v->{seq} }++;
	$bad_key++ if !defined $m->{key} || $m->{key} ne $v->{aircraft} || $v->{aircraft} ne uc $v->{aircraft};
	my $p = $key_partition{ $m->{key} // '' } //= $m->{partition};
	$split_key++ if $p != $m->{partition};
}
is($bad_json // 0, 0, 'every value is a JSON object of the flow\'s columns');
is(scalar @msgs, $total, "the sink topic holds $total messages");
is($dup // 0, 0, 'no input twice');
is(scalar(grep { $_ >= 0 && $_ < $total } keys %seen), $total, 'every input once (by seq)');
is($bad_key // 0, 0, 'every message keyed by sink_key (aircraft)');
is($split_key // 0, 0, 'every key in one partition');
ok(scalar(keys %key_partition) > 100, 'many keys');

# ... and a flow reading it back, unchanged
ok($node->poll_query_until('postgres', "SELECT count(*) >= $total FROM back"), 'read back');
is(SdpTest::query($node,
		"SELECT count(*), count(DISTINCT seq), min(seq), max(seq), count(*) FILTER (WHERE kafka_key = aircraft) FROM back"),
	"$total|$total|0|" . ($total - 1) . "|$total", 'read back: every seq once, keyed');
is(SdpTest::query($node, "SELECT sum(rows_dead_lettered) FROM sdp.flow_status"), '0', 'no dead letters');

my @small = SdpKafka::kcat_consume(bootstrap => $boot, topic => 'small-out',
	properties => { 'isolation.level' => 'read_committed' });
is(join(' | ', map { ($_->{key} // 'NULL') . ' ' . $_->{payload} } @small),
	'k1 {"at": "2026-12-01T08:00:00+00:00", "doc": {"a": [1, 2]}, "seq": 1} | NULL {"at": null, "doc": null, "seq": 2}',
	'a flow without transform: the declared columns as JSON, keyed by kafka_key');

# alice's flow: every hundredth input once, no key, spread over both partitions
my @alice = SdpKafka::kcat_consume(bootstrap => $boot, topic => 'alice-out',
	properties => { 'isolation.level' => 'read_committed' });
my %alice_seq;
$alice_seq{ eval { $json->decode($_->{payload})->{seq} } // 'bad' }++ for @alice;
is(scalar @alice, $total / 100, 'alice_out holds ' . ($total / 100) . ' messages');
is_deeply([ sort { $a <=> $b } grep { $_ ne 'bad' } keys %alice_seq ], [ map { $_ * 100 } 0 .. $total / 100 - 1 ],
	'alice_out: every hundredth input once');
is(scalar(grep { defined $_->{key} } @alice), 0, 'alice_out: no keys');
is(join(',', sort map { $_->{partition} } grep { $_->{offset} == 0 } @alice), '0,1', 'alice_out: both partitions');

# the owner of a sink is not dropped, from another database either (the launcher publishes owners)
SdpTest::query($node, "SELECT sdp_drop_flow('alice_flow'); SELECT sdp_drop_source('alice_src'); CREATE DATABASE other");
# (until the launcher's next pass has seen the flow and the source go: then the sink is the one object)
for my $try (1 .. 100)
{
	$err = '';
	$node->psql('other', 'DROP ROLE alice', stderr => \$err);
	last if $err !~ /cannot be dropped/ || $err =~ /DETAIL:  1 object in database postgres/;
	sleep 0.1;
}
like($err, qr/role "alice" cannot be dropped because some objects depend on it\n.*DETAIL:  1 object in database postgres/s,
	'the owner of a sink is not dropped, from another database either');
SdpTest::query($node, "SELECT sdp_drop_sink('alice_out'); DROP ROLE alice");

# a sink flow is dropped with its outbox rows; a sink in use is not dropped
SdpTest::query($node, "SELECT sdp_stop_flow('to_kafka')");
$err = '';
$node->psql('postgres', "SELECT sdp_drop_sink('out')", stderr => \$err);
like($err, qr/cannot drop sink "out" because flows write to it/, 'a sink in use is not dropped');
SdpTest::query($node, "SELECT sdp_drop_flow('to_kafka'); SELECT sdp_drop_sink('out')");
is(SdpTest::query($node, "SELECT count(*) FROM sdp.sinks WHERE name = 'out'"), '0', 'sink dropped');

done_testing();
