# Bad input never stops a flow or vanishes: messages that do not decode, rows
# the transform or the target rejects, go to sdp.dead_letters with their
# topic, partition, offset, key, payload and error, and the rest commits.
# on_error = skip counts them instead; on_error = fail stops the flow in the
# failed state with the error.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;
use JSON::PP;

my $broker = SdpKafka::start_broker(topics => { 'raw-flights' => 4, 'rejects' => 1 });
my $node = SdpTest::new_node('deadletters');
SdpTest::create_source($node, 'flights', $broker, 'raw-flights');
SdpTest::create_source($node, 'rejects', $broker, 'rejects');

# 5% of 20,000 messages malformed: truncated JSON, or a wrong type
my $report = SdpKafka::run_flightsim(
	bootstrap => $broker->bootstrap, topic => 'raw-flights',
	args => [ '--count', 20000, '--rate', 0, '--seed', 21,
			  '--malformed', '0.05', '--malformed-kinds', 'truncated,type' ]);
is($report->{malformed}, 1000, 'the producer sent 1000 malformed messages');

# what is malformed, according to an independent reader
my %bad;
for my $m (SdpKafka::kcat_consume(bootstrap => $broker->bootstrap, topic => 'raw-flights', count => 20000))
{
	my $doc = eval { decode_json($m->{payload}) };
	my $ok = $doc && defined $doc->{lat} && $doc->{lat} =~ /^-?[0-9.]+$/
	  && defined $doc->{baro_alt} && $doc->{baro_alt} =~ /^-?[0-9.]+$/;
	$bad{"$m->{partition}:$m->{offset}"} = 1 unless $ok;
}
is(scalar(keys %bad), 1000, 'kcat sees 1000 malformed messages');

SdpTest::query($node, <<'SQL');
CREATE TABLE events (seq bigint, icao24 text, lat float8, baro_alt float8, kafka_partition int, kafka_offset bigint);
SELECT sdp_create_flow('events_flow', 'flights', 'events', 'seq bigint, icao24 text, lat float8, baro_alt float8');
SQL
ok(SdpTest::wait_consumed($node, 'events_flow', 20000), 'consumed all 20,000');
is(SdpTest::query($node, 'SELECT count(*) FROM events'), '19000', '19,000 good rows in the target');
is(SdpTest::query($node, "SELECT count(*), count(DISTINCT (kafka_partition, kafka_offset)) FROM sdp.dead_letters WHERE flow = 'events_flow'"),
	'1000|1000', '1000 dead letters, one per message');
my %dead = map { $_ => 1 } split /\n/, SdpTest::query($node,
	"SELECT kafka_partition || ':' || kafka_offset FROM sdp.dead_letters WHERE flow = 'events_flow'");
is_deeply(\%dead, \%bad, 'the dead letters are exactly the malformed messages, by partition and offset');
is(SdpTest::query($node, <<'SQL'), '0', 'no good row is missing and no bad row got in');
SELECT count(*) FROM events e JOIN sdp.dead_letters d
  ON d.kafka_partition = e.kafka_partition AND d.kafka_offset = e.kafka_offset
SQL
is(SdpTest::query($node, <<'SQL'), 'decode|1000|1000|1000|1000', 'each dead letter has stage, key, payload, error and SQLSTATE');
SELECT stage, count(*), count(kafka_key), count(payload_text), count(*) FILTER (WHERE sqlstate = '22P02' AND error <> '')
  FROM sdp.dead_letters WHERE flow = 'events_flow' GROUP BY stage
SQL
is(SdpTest::query($node, "SELECT count(*) FROM sdp.dead_letters WHERE flow = 'events_flow' AND payload_text <> convert_from(payload, 'UTF8')"),
	'0', 'raw payload kept');
is(SdpTest::query($node, "SELECT messages_read, rows_written, rows_dead_lettered, state FROM sdp.flow_status WHERE flow = 'events_flow'"),
	'20000|19000|1000|running', 'status counts them and the flow runs on');

# Rows the transform or the target rejects: a division by zero for every seq
# that is a multiple of 100, a check constraint for altitudes above 40,000 ft.
SdpTest::query($node, <<'SQL');
CREATE TABLE checked (seq bigint, ratio int, baro_alt float8 CHECK (baro_alt <= 40000));
SELECT sdp_create_flow('checked_flow', 'flights', 'checked', 'seq bigint, lat float8, baro_alt float8',
  transform => 'SELECT seq, 100 / (seq % 100)::int AS ratio, baro_alt FROM input');
SQL
ok(SdpTest::wait_consumed($node, 'checked_flow', 20000), 'checked_flow consumed all 20,000');
my ($div0, $high, $good) = split /\|/, SdpTest::query($node, <<'SQL');
SELECT count(*) FILTER (WHERE seq % 100 = 0),
       count(*) FILTER (WHERE seq % 100 <> 0 AND baro_alt > 40000),
       count(*) FILTER (WHERE seq % 100 <> 0 AND baro_alt <= 40000)
  FROM events
SQL
is(SdpTest::query($node, 'SELECT count(*) FROM checked'), $good, "the $good good rows are written");
is(SdpTest::query($node, "SELECT stage || ':' || sqlstate || ':' || count(*) FROM sdp.dead_letters WHERE flow = 'checked_flow' GROUP BY stage, sqlstate ORDER BY 1"),
	join("\n", grep { !/:0$/ } ("decode:22P02:1000", "transform:22012:$div0", "write:23514:$high")),
	"dead letters: 1000 undecodable, $div0 divisions by zero, $high check violations");

# on_error = skip: counted, not stored
SdpTest::query($node, <<'SQL');
CREATE TABLE skipped (seq bigint, lat float8);
SELECT sdp_create_flow('skip_flow', 'flights', 'skipped', 'seq bigint, lat float8, baro_alt float8',
  transform => 'SELECT seq, lat FROM input', options => '{"on_error": "skip"}');
SQL
ok(SdpTest::wait_consumed($node, 'skip_flow', 20000), 'skip_flow consumed all 20,000');
is(SdpTest::query($node, "SELECT rows_skipped, rows_dead_lettered FROM sdp.flow_status WHERE flow = 'skip_flow'"),
	'1000|0', 'on_error = skip: 1000 skipped, none stored');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.dead_letters WHERE flow = 'skip_flow'"), '0', 'no dead letters for skip_flow');
is(SdpTest::query($node, 'SELECT count(*) FROM skipped'), '19000', 'the rest written');

# on_error = fail: the flow stops, failed, with the error and where it happened
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'rejects', messages => [
	[ 'a', '{"n": 1}', 0 ], [ 'b', '{"n": 2}', 0 ], [ 'c', '{"n": "three"}', 0 ], [ 'd', '{"n": 4}', 0 ] ]);
SdpTest::query($node, <<'SQL');
CREATE TABLE strict_target (n int);
SELECT sdp_create_flow('strict_flow', 'rejects', 'strict_target', 'n int', options => '{"on_error": "fail"}');
SQL
ok($node->poll_query_until('postgres',
		"SELECT state = 'failed' FROM sdp.flow_status WHERE flow = 'strict_flow'"),
	'on_error = fail: the flow is failed');
like(SdpTest::query($node, "SELECT last_error FROM sdp.flow_status WHERE flow = 'strict_flow'"),
	qr/partition 0 offset 2: field "n": invalid input syntax for type integer: "three"/,
	'the error says which message and why');
is(SdpTest::query($node, 'SELECT count(*) FROM strict_target'), '0', 'the failing batch did not commit');
is(SdpTest::query($node, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'sdp flow strict_flow'"),
	'0', 'no worker runs for it');
$node->restart;
sleep 2;
is(SdpTest::query($node, "SELECT state FROM sdp.flow_status WHERE flow = 'strict_flow'"), 'failed',
	'still failed after a server restart');
is(SdpTest::query($node, "SELECT state FROM sdp.flow_status WHERE flow = 'events_flow'"), 'running',
	'other flows run on');

done_testing();
