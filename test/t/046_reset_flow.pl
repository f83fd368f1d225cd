# sdp_reset_flow against the embedded broker: a stopped flow re-reads from
# a timestamp (the first message at or after it, in every partition), from
# explicit offsets (the other partitions keep theirs), from 'latest' (only
# what comes next) and from 'earliest'; each time the target holds exactly
# the messages from there on.  A running flow is refused.  A source's
# starting_offsets may be a timestamp too.
use strict;
use warnings FATAL => 'all';
use feature qw(signatures);
no warnings qw(experimental::signatures);
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;
use Time::HiRes qw(sleep);

my $broker = SdpKafka::start_broker(topics => { 'raw-flights' => 4 });
my $boot = $broker->bootstrap;
my $node = SdpTest::new_node('reset');
SdpTest::create_source($node, 'flights', $broker, 'raw-flights');
SdpTest::query($node, <<'SQL');
CREATE TABLE events (seq bigint, kafka_partition int, kafka_offset bigint, kafka_timestamp timestamptz);
SELECT sdp_create_flow('ev', 'flights', 'events', 'seq bigint');
SQL
ok(SdpTest::wait_for($node, "SELECT state = 'running' AND partitions IS NOT NULL FROM sdp.flow_status WHERE flow = 'ev'"),
	'the flow runs');

sub produce ($count, $seq_start)
{
	my $r = SdpKafka::run_flightsim(bootstrap => $boot, topic => 'raw-flights',
		args => [ '--count', $count, '--rate', 0, '--linger-ms', 5, '--seed', $seq_start + 1,
				  '--aircraft', 50, '--seq-start', $seq_start ]);
	is($r->{delivered}, $count, "produced $count from seq $seq_start");
}
sub stop_flow
{
	SdpTest::query($node, "SELECT sdp_stop_flow('ev')");
	ok(SdpTest::wait_for($node, "SELECT state = 'stopped' FROM sdp.flow_status WHERE flow = 'ev'"), 'stopped');
}
sub start_and_drain ($total)
{
	SdpTest::query($node, "SELECT sdp_start_flow('ev')");
	ok(SdpTest::wait_consumed($node, 'ev', $total), "started again, consumed up to $total");
}
# rows as "partition:offset:seq" lines, sorted
sub rows ($sql)
{
	return SdpTest::query($node,
		"SELECT string_agg(kafka_partition || ':' || kafka_offset || ':' || seq, ',' ORDER BY kafka_partition, kafka_offset) FROM ($sql) r");
}

produce(3000, 0);
ok(SdpTest::wait_consumed($node, 'ev', 3000), 'first 3,000 consumed');
sleep 1.2;
my $t = SdpTest::query($node, "SELECT now()::text");
sleep 0.3;
produce(2000, 3000);
ok(SdpTest::wait_consumed($node, 'ev', 5000), 'next 2,000 consumed');
is(SdpTest::query($node, 'SELECT count(*), count(DISTINCT seq), min(seq), max(seq) FROM events'), '5000|5000|0|4999',
	'5,000 rows, each once');
SdpTest::query($node, 'CREATE TABLE first_run AS SELECT * FROM events; TRUNCATE events');

# a new flow from a source whose starting_offsets is that timestamp
SdpTest::create_source($node, 'flights_t', $broker, 'raw-flights', qq({"starting_offsets": "$t"}));
SdpTest::query($node, <<'SQL');
CREATE TABLE events_t (seq bigint, kafka_partition int, kafka_offset bigint, kafka_timestamp timestamptz);
SELECT sdp_create_flow('ev_t', 'flights_t', 'events_t', 'seq bigint');
SQL
ok(SdpTest::wait_consumed($node, 'ev_t', 5000), 'a flow starting at the timestamp consumed up to the end');
is(rows('SELECT * FROM events_t'), rows("SELECT * FROM first_run WHERE kafka_timestamp >= '$t'"),
	'starting_offsets = a timestamp: exactly the messages from the timestamp on');
SdpTest::query($node, "SELECT sdp_drop_flow('ev_t')");

my ($ret, $out, $err) = $node->psql('postgres', "SELECT sdp_reset_flow('ev', 'earliest')");
like($err, qr/flow "ev" is running/, 'a running flow is refused');

# 1. a timestamp: every partition from its first message at or after it
stop_flow();
my $want = SdpTest::query($node,
	"SELECT jsonb_object_agg(kafka_partition, o) FROM (SELECT kafka_partition, min(kafka_offset) o FROM first_run "
	  . " WHERE kafka_timestamp >= '$t' GROUP BY 1) x");
is(SdpTest::query($node, "SELECT sdp_reset_flow('ev', '$t') = '$want'::jsonb"), 't',
	"reset to $t: the first offset at or after it in each partition ($want)");
is(SdpTest::query($node, "SELECT count(*) FROM first_run WHERE kafka_timestamp >= '$t'"), '2000',
	'which are the second batch');
start_and_drain(5000);
is(rows('SELECT * FROM events'), rows("SELECT * FROM first_run WHERE kafka_timestamp >= '$t'"),
	'the flow wrote exactly the messages from the timestamp on');

# 2. explicit offsets: partition 0 from 5, partition 1 from its start; 2 and 3 stay at their ends
stop_flow();
SdpTest::query($node, 'TRUNCATE events');
is(SdpTest::query($node, qq{SELECT sdp_reset_flow('ev', '{"0": 5, "1": 0}'::jsonb)}), '{"0": 5, "1": 0}',
	'reset with explicit offsets returns them');
start_and_drain(5000);
is(rows('SELECT * FROM events'),
	rows('SELECT * FROM first_run WHERE (kafka_partition = 0 AND kafka_offset >= 5) OR kafka_partition = 1'),
	'exactly partition 0 from offset 5 and all of partition 1');

# 3. latest: only what is produced from now
stop_flow();
SdpTest::query($node, 'TRUNCATE events');
my $ends = SdpTest::query($node,
	"SELECT jsonb_object_agg(kafka_partition, n) FROM (SELECT kafka_partition, max(kafka_offset) + 1 n FROM first_run GROUP BY 1) x");
is(SdpTest::query($node, "SELECT sdp_reset_flow('ev', 'latest') = '$ends'::jsonb"), 't', "reset to latest: the ends ($ends)");
SdpTest::query($node, "SELECT sdp_start_flow('ev')");
produce(500, 5000);
ok(SdpTest::wait_consumed($node, 'ev', 5500), 'the new 500 consumed');
is(SdpTest::query($node, 'SELECT count(*), count(DISTINCT seq), min(seq), max(seq) FROM events'), '500|500|5000|5499',
	'exactly the 500 produced after the reset');

# 4. earliest: everything again
stop_flow();
SdpTest::query($node, 'TRUNCATE events');
is(SdpTest::query($node, "SELECT sdp_reset_flow('ev', 'earliest')"), '{"0": 0, "1": 0, "2": 0, "3": 0}',
	'reset to earliest: every partition from 0');
start_and_drain(5500);
is(SdpTest::query($node, 'SELECT count(*), count(DISTINCT (kafka_partition, kafka_offset)), min(seq), max(seq) FROM events'),
	'5500|5500|0|5499', 'all 5,500 messages again, each once');

# refusals that need the broker
stop_flow();
($ret, $out, $err) = $node->psql('postgres', qq{SELECT sdp_reset_flow('ev', '{"7": 0}'::jsonb)});
like($err, qr/topic "raw-flights" has no partition 7/, 'a partition the topic does not have is refused');
($ret, $out, $err) = $node->psql('postgres', qq{SELECT sdp_reset_flow('ev', '{"0": 999999}'::jsonb)});
like($err, qr/offset 999999 is past the end of partition 0/, 'an offset past the end is refused');
is(SdpTest::query($node, "SELECT string_agg(partition || '=' || next_offset, ',' ORDER BY partition) FROM sdp.offsets o "
	  . "JOIN sdp.flows f ON f.id = o.flow_id WHERE f.name = 'ev'"),
	SdpTest::query($node, "SELECT string_agg(kafka_partition || '=' || n, ',' ORDER BY kafka_partition) FROM "
	  . "(SELECT kafka_partition, max(kafka_offset) + 1 n FROM events GROUP BY 1) x"),
	'a refused reset changes no offset');

# sdp.flow_status shows a flow stopped once its workers have exited; the
# launcher frees their slots a moment later.  A reset in that moment waits
# for the launcher instead of refusing (seen once in CI, test
# 045_replay_windows: "is stopping" right after the status said stopped).
# The moment made long: the launcher is paused (SIGSTOP) while the flow is
# stopped and its worker ends.
SdpTest::query($node, "SELECT sdp_start_flow('ev')");
ok(SdpTest::wait_for($node, "SELECT state = 'running' FROM sdp.flow_status WHERE flow = 'ev'"), 'running again');
my $launcher = SdpTest::query($node, "SELECT pid FROM pg_stat_activity WHERE backend_type = 'sdp launcher'");
my $worker = SdpTest::query($node, "SELECT pid FROM sdp.flow_status WHERE flow = 'ev'");
kill 'STOP', $launcher;
SdpTest::query($node, "SELECT sdp_stop_flow('ev')");
SdpTest::query($node, "SELECT pg_terminate_backend($worker)");	# what the paused launcher would do
ok(SdpTest::wait_for($node, "SELECT state = 'stopped' FROM sdp.flow_status WHERE flow = 'ev'"),
	'the status says stopped once the worker has exited');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.flow_workers WHERE flow = 'ev'"), '1',
	'while its slot is still taken (the launcher is paused)');
my $resetter = $node->background_psql('postgres', on_error_stop => 0);
$resetter->query_until(qr/started/, "\\echo started\nSELECT sdp_reset_flow('ev', 'earliest') AS reset;\n");
sleep 1;
kill 'CONT', $launcher;
my $reset = $resetter->query("SELECT 'after'");
$resetter->quit;
like($reset, qr/\{"0": 0, "1": 0, "2": 0, "3": 0\}/, 'the reset waited for the slot, then reset');
unlike($resetter->{stderr}, qr/is stopping/, 'and was not refused');
is(SdpTest::query($node, "SELECT pid FROM pg_stat_activity WHERE backend_type = 'sdp launcher'"), $launcher,
	'the same launcher');

done_testing();
