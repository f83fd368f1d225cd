# Flows with several workers (the option workers, issue 12): partition p of
# the topic is worker p % workers's, each worker commits its rows with its
# own partitions' offsets.  Over 8 partitions and 100,000 messages, flows
# with 2 and 4 workers, an upsert flow with 4, and a flow whose workers
# change mid-stream (1 -> 3 -> 2) live through three SIGKILLs of the
# postmaster: every (partition, offset) lands once in each, and the upsert
# target holds the last message of every aircraft.  sdp.flow_workers shows
# one row per worker, sdp.flow_status one per flow (sums, the sum of lag),
# sdp_flow_progress() the workers' reports summed.  A flow that cannot get
# its workers waits, with the reason, and starts with all of them once
# enough slots are free; declarations that can never get them are refused.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;
use Time::HiRes qw(sleep);

my $broker = SdpKafka::start_broker(topics => { 'raw-flights' => 8 });
my $node = SdpTest::new_node('parallel', 'sdp.max_flows' => 16);
SdpTest::create_source($node, 'flights', $broker, 'raw-flights');
SdpTest::query($node, <<'SQL');
CREATE TABLE events2 (seq bigint, icao24 text, lat float8, kafka_partition int, kafka_offset bigint);
CREATE TABLE events4 (LIKE events2);
CREATE TABLE events_change (LIKE events2);
CREATE TABLE positions (icao24 text PRIMARY KEY, seq bigint, lat float8, kafka_partition int, kafka_offset bigint);
SELECT sdp_create_flow('events2', 'flights', 'events2', 'seq bigint, icao24 text, lat float8', options => '{"workers": 2}');
SELECT sdp_create_flow('events4', 'flights', 'events4', 'seq bigint, icao24 text, lat float8', options => '{"workers": "4"}');
SELECT sdp_create_flow('events_change', 'flights', 'events_change', 'seq bigint, icao24 text, lat float8');
SELECT sdp_create_flow('positions', 'flights', 'positions', 'seq bigint, icao24 text, lat float8', options => '{"workers": 4}');
SQL

# 2 + 4 + 1 + 4 workers
ok(SdpTest::wait_for($node, "SELECT count(*) = 11 FROM sdp.flow_workers WHERE state = 'running' AND pid IS NOT NULL AND cardinality(partitions) > 0"),
	'every worker runs, with its partitions');
is(SdpTest::query($node, "SELECT string_agg(worker || ':' || partitions::text, ' ' ORDER BY worker) FROM sdp.flow_workers WHERE flow = 'events4'"),
	'0:{0,4} 1:{1,5} 2:{2,6} 3:{3,7}', 'partition p is worker p % 4\'s');
is(SdpTest::query($node, "SELECT string_agg(worker || ':' || partitions::text, ' ' ORDER BY worker) FROM sdp.flow_workers WHERE flow = 'events2'"),
	'0:{0,2,4,6} 1:{1,3,5,7}', 'and p % 2\'s with 2 workers');
is(SdpTest::query($node, "SELECT count(DISTINCT pid) FROM sdp.flow_workers"), '11', 'each worker is a process of its own');
is(SdpTest::query($node, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'sdp flow' AND application_name LIKE 'sdp flow events4 #%'"),
	'4', 'named after their flow and number');
# what they wait on, in pg_stat_activity: PostgreSQL 17's custom wait events, before it 'Extension'
my ($flow_wait, $launcher_wait) = $node->pg_version >= 17 ? ('SdpFlowMain', 'SdpLauncherMain') : ('Extension', 'Extension');
ok(SdpTest::wait_for($node, "SELECT count(*) = 4 FROM pg_stat_activity WHERE application_name LIKE 'sdp flow events4 #%' AND wait_event_type = 'Extension' AND wait_event = '$flow_wait'"),
	"an idle worker waits on $flow_wait");
ok(SdpTest::wait_for($node, "SELECT wait_event_type = 'Extension' AND wait_event = '$launcher_wait' FROM pg_stat_activity WHERE backend_type = 'sdp launcher'"),
	"the launcher on $launcher_wait");

# linger 50 ms: from the embedded broker, a backlog produced one message per
# record batch (which each crash leaves) drains at about 1,000 messages a
# second whatever the workers (measured: 100,000 in 100 to 150 s with 1, 2
# and 6), against 40,000 and more a second in batches of 50
my $total = 100000;
my $producer = SdpKafka::start_flightsim(
	bootstrap => $broker->bootstrap, topic => 'raw-flights',
	args => [ '--count', $total, '--rate', 8000, '--linger-ms', 50, '--seed', 34, '--aircraft', 500 ]);

ok(SdpTest::wait_for($node, 'SELECT count(*) > 8000 FROM events4'), 'streaming');
is(SdpTest::query($node, "SELECT count(*), count(*) FILTER (WHERE pid IS NOT NULL), bool_and(partitions->>0 IS NOT NULL) FROM sdp.flow_status"),
	'4|4|t', 'sdp.flow_status: one row per flow, a pid, every partition');

# 1: mid-stream; then the changing flow goes to 3 workers
SdpTest::crash_and_restart($node);
pass('crash 1: mid-stream');
SdpTest::query($node, "SELECT sdp_set_flow_workers('events_change', 3)");
ok(SdpTest::wait_for($node, "SELECT count(*) = 3 FROM sdp.flow_workers WHERE flow = 'events_change' AND workers = 3 AND state = 'running' AND cardinality(partitions) > 0"),
	'events_change runs in 3 workers');
is(SdpTest::query($node, "SELECT string_agg(partitions::text, ' ' ORDER BY worker) FROM sdp.flow_workers WHERE flow = 'events_change'"),
	'{0,3,6} {1,4,7} {2,5}', 'its partitions divided among the 3');

# 2: during catch-up
ok(SdpTest::wait_for($node, "SELECT count(*) = 13 FROM sdp.flow_workers WHERE state = 'running'"), 'workers restarted');
sleep 0.3;
SdpTest::crash_and_restart($node);
pass('crash 2: during catch-up');

# the change again, while the flow works
ok(SdpTest::wait_for($node, 'SELECT count(*) > 40000 FROM events_change'), 'streaming again');
SdpTest::query($node, "SELECT sdp_set_flow_workers('events_change', 2)");
ok(SdpTest::wait_for($node, "SELECT count(*) = 2 FROM sdp.flow_workers WHERE flow = 'events_change' AND workers = 2"),
	'events_change goes to 2 workers');

# 3: later in the stream
ok(SdpTest::wait_for($node, 'SELECT count(*) > 70000 FROM events2'), 'later in the stream');
SdpTest::crash_and_restart($node);
pass('crash 3: later in the stream');

my $report = $producer->finish;
is($report->{delivered}, $total, "producer delivered $total");
for my $flow (qw(events2 events4 events_change positions))
{
	ok(SdpTest::wait_consumed($node, $flow, $total), "$flow consumed everything");
}
for my $table (qw(events2 events4 events_change))
{
	SdpTest::assert_exactly_once($node, $table, $report->{partitions}, "$table after three crashes");
}
is(SdpTest::query($node, <<'SQL'), '0', 'positions hold the last message of every aircraft');
WITH last AS (
  SELECT DISTINCT ON (icao24) icao24, seq, lat FROM events4 ORDER BY icao24, seq DESC)
SELECT count(*) FROM last l FULL JOIN positions p USING (icao24)
 WHERE p.seq IS DISTINCT FROM l.seq OR p.lat IS DISTINCT FROM l.lat
SQL
is(SdpTest::query($node, "SELECT count(*) FROM (SELECT icao24 FROM events4 GROUP BY 1 HAVING count(DISTINCT kafka_partition) > 1) k"),
	'0', '(every aircraft on one partition: the topic is keyed by icao24)');

# the status adds up the workers
is(SdpTest::query($node, "SELECT messages_read, lag, jsonb_array_length(partitions) FROM sdp.flow_status WHERE flow = 'events4'"),
	SdpTest::query($node, "SELECT sum(messages_read) || '|0|8' FROM sdp.flow_workers WHERE flow = 'events4'"),
	'sdp.flow_status: the workers\' messages summed, no lag, 8 partitions');
is(SdpTest::query($node, "SELECT sum(lag), sum(cardinality(partitions)) FROM sdp.flow_workers WHERE flow = 'events2'"),
	'0|8', 'sdp.flow_workers: each worker\'s lag and partitions');
ok(SdpTest::wait_for($node, "SELECT (sdp_flow_progress('events4')->>'workersReporting')::int = 4"),
	'every worker of events4 has reported');
is(SdpTest::query($node, "SELECT p->>'workers', (p->'latencies'->'e2eLatencyMs'->>'P0')::float8 <= (p->'latencies'->'e2eLatencyMs'->>'P99')::float8 FROM sdp_flow_progress('events4') p"),
	'4|t', 'sdp_flow_progress: one report for the 4 workers');
is(SdpTest::query($node, "SELECT sum(rows_dead_lettered) FROM sdp.flow_status"), '0', 'no dead letters');

# waiting for slots: 11 of 16 are taken; a flow of 6 workers waits, with the reason
SdpTest::query($node, "CREATE TABLE events6 (LIKE events2)");
SdpTest::query($node, "SELECT sdp_create_flow('events6', 'flights', 'events6', 'seq bigint, icao24 text, lat float8', options => '{\"workers\": 6}')");
ok(SdpTest::wait_for($node, "SELECT state = 'waiting' AND last_error = 'its 6 workers need 6 free flow slots of the 16 (sdp.max_flows): the flow starts when enough are free' FROM sdp.flow_status WHERE flow = 'events6'"),
	'a flow that cannot get its 6 workers waits, and says why');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.flow_workers WHERE flow = 'events6'"), '0', 'none of them started');
SdpTest::query($node, "SELECT sdp_stop_flow('events_change')");
ok(SdpTest::wait_for($node, "SELECT count(*) = 6 FROM sdp.flow_workers WHERE flow = 'events6' AND state = 'running'"),
	'it starts with all 6 once slots are free');
ok(SdpTest::wait_consumed($node, 'events6', $total), 'and consumes the topic');
SdpTest::assert_exactly_once($node, 'events6', $report->{partitions}, 'events6');

# declarations that can never get their workers, and who may change them
my ($rc, $out, $err) = $node->psql('postgres',
	"SELECT sdp_create_flow('x', 'flights', 'events2', 'seq bigint', options => '{\"workers\": 17}')",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/53400: a flow with 17 workers needs 17 flow worker slots, but sdp.max_flows is 16/, 'more workers than sdp.max_flows: refused');
like($err, qr/HINT:  Raise sdp.max_flows/, 'with a hint');
($rc, $out, $err) = $node->psql('postgres',
	"SELECT sdp_create_flow('x', 'flights', 'events2', 'seq bigint', options => '{\"workers\": 65}')",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/22023: option "workers" must be an integer between 1 and 64, not "65"/, 'workers past 64: refused');
($rc, $out, $err) = $node->psql('postgres', "SELECT sdp_set_flow_workers('events2', 0)", extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/22023: option "workers" must be an integer between 1 and 64, not "0"/, 'no workers: refused');
SdpTest::query($node, "CREATE TABLE zone_counts (zone text PRIMARY KEY, aircraft bigint, capacity int, crowded boolean)");
($rc, $out, $err) = $node->psql('postgres', <<'SQL', extra_params => [ '-v', 'VERBOSITY=verbose' ]);
SELECT sdp_create_flow('x', 'flights', 'zone_counts', 'icao24 text, lat float8',
  transform => $$SELECT 'z' AS zone, icao24 FROM input$$, operator => 'active_count',
  options => '{"workers": 2, "key": "zone", "member": "icao24", "ttl": "1 min", "capacity": 5}')
SQL
like($err, qr/0A000: flow "x" cannot run in 2 workers: its operator's key column "zone" is a constant/,
	'a stateful flow with 2 workers whose key is a constant: refused (test 035 runs stateful flows in several workers)');
SdpTest::query($node, "CREATE ROLE mallory LOGIN");
($rc, $out, $err) = $node->psql('postgres', "SET ROLE mallory; SELECT sdp_set_flow_workers('events2', 1)");
like($err, qr/must be owner of flow "events2"/, 'only the owner changes a flow\'s workers');
is(SdpTest::query($node, "SELECT options->>'workers' FROM sdp.flows WHERE name = 'events2'"), '2', 'unchanged');

done_testing();
