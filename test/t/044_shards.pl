# Shards by Kafka partition (issue 13, items 1 to 3): two servers declare
# the same flows over disjoint shares of the partitions of 8-partition
# topics (the flow option partitions), and a third, the router, reads both
# through postgres_fdw, its table partitioned by LIST (kafka_partition).
#
# 50,000 messages keyed by aircraft, produced with the Java client's
# partitioner (murmur2), and 10,000 with librdkafka's (consistent, CRC32):
# each server holds exactly its partitions' messages (every (partition,
# offset) once, no gap), server A through a SIGKILL, and
# sdp_partition_for_key(kafka_key, 8, partitioner) = kafka_partition for
# every row.  Server A runs its share [0, 2, 4, 6] in 2 workers, which
# divide it by position ({0, 4} and {2, 6}), and an active_count flow over
# the same share in 2 workers, whose every key is held once, by its
# partition's worker, after the restart (each worker restored its part of
# the share's state), with exact counts.  Server B's share names a
# partition the topic does not have: said in the log, the rest consumed.
# On the router, a query for one key prunes at planning to the one server
# that holds it (EXPLAIN shows one foreign scan; a generic plan prunes at
# execution start), and an aggregate over all keys is the union, exactly.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use List::Util qw(sum0);
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'keyed' => 8, 'keyed_crc' => 8 });
my $node_a = SdpTest::new_node('shard_a');
my $node_b = SdpTest::new_node('shard_b');
my $router = SdpTest::new_node('router');

my $table = 'CREATE TABLE %s (seq bigint, icao24 text, lat float8, kafka_partition int, kafka_offset bigint, kafka_key text)';
my %share = (
	events => { $node_a->name => [ 0, 2, 4, 6 ], $node_b->name => [ 1, 3, 5, 7 ] },
	events_crc => { $node_a->name => [ 0, 1, 2, 3 ], $node_b->name => [ 4, 5, 6, 7 ] });
for my $node ($node_a, $node_b)
{
	SdpTest::create_source($node, 'keyed', $broker, 'keyed');
	SdpTest::create_source($node, 'keyed_crc', $broker, 'keyed_crc');
	SdpTest::query($node, sprintf($table, 'events') . '; ' . sprintf($table, 'events_crc'));
}
# B's share of 'keyed' names partition 8 too, which the topic does not have
SdpTest::query($node_a, <<'SQL');
SELECT sdp_create_flow('events', 'keyed', 'events', 'seq bigint, icao24 text, lat float8',
  options => '{"partitions": [6, 4, 2, 0], "workers": 2}');
SELECT sdp_create_flow('events_crc', 'keyed_crc', 'events_crc', 'seq bigint, icao24 text, lat float8',
  options => '{"partitions": [0, 1, 2, 3]}');
CREATE TABLE active (icao24 text PRIMARY KEY, active_count bigint, over_capacity boolean, updated_at timestamptz);
SELECT sdp_create_flow('active', source => 'keyed', target => 'active', schema => 'seq bigint, icao24 text',
  transform => 'SELECT kafka_key AS icao24, seq FROM input', operator => 'active_count',
  options => '{"key": "icao24", "member": "seq", "ttl": "1 hour", "capacity": 1000000,
               "partitions": [0, 2, 4, 6], "workers": 2, "checkpoint_interval": "500 ms"}');
SQL
SdpTest::query($node_b, <<'SQL');
SELECT sdp_create_flow('events', 'keyed', 'events', 'seq bigint, icao24 text, lat float8',
  options => '{"partitions": [1, 3, 5, 7, 8]}');
SELECT sdp_create_flow('events_crc', 'keyed_crc', 'events_crc', 'seq bigint, icao24 text, lat float8',
  options => '{"partitions": [4, 5, 6, 7]}');
SQL

ok(SdpTest::wait_for($node_a, "SELECT count(*) = 5 FROM sdp.flow_workers WHERE state = 'running' AND cardinality(partitions) > 0"),
	'server A: its flows run (2 + 1 + 2 workers)');
ok(SdpTest::wait_for($node_b, "SELECT count(*) = 2 FROM sdp.flow_workers WHERE state = 'running' AND cardinality(partitions) > 0"),
	'server B: its flows run');
is(SdpTest::query($node_a, "SELECT string_agg(flow || ' ' || worker || ':' || partitions::text, ', ' ORDER BY flow, worker) FROM sdp.flow_workers"),
	'active 0:{0,4}, active 1:{2,6}, events 0:{0,4}, events 1:{2,6}, events_crc 0:{0,1,2,3}',
	'A: 2 workers divide the share [0, 2, 4, 6] by position');
is(SdpTest::query($node_b, "SELECT string_agg(flow || ':' || partitions::text, ', ' ORDER BY flow) FROM sdp.flow_workers"),
	'events:{1,3,5,7}, events_crc:{4,5,6,7}', 'B: its shares (partition 8 is not in the topic)');
ok($node_b->wait_for_log(qr/sdp flow "events": topic "keyed" has no partition 8 \(of option "partitions"\) yet/, 0),
	'B: the partition of its share that the topic does not have is said in the log');

my $crc = SdpKafka::run_flightsim(
	bootstrap => $broker->bootstrap, topic => 'keyed_crc',
	args => [ '--count', 10000, '--rate', 0, '--linger-ms', 20, '--seed', 37, '--aircraft', 500, '-X', 'partitioner=consistent_random' ]);
is($crc->{delivered}, 10000, 'the consistent (CRC32) topic: 10,000 delivered');
# the murmur2 topic in two halves (the same fleet): server A is killed
# while it consumes the first, and the second comes after its restart
my $total = 50000;
my $first = SdpKafka::run_flightsim(
	bootstrap => $broker->bootstrap, topic => 'keyed',
	args => [ '--count', $total / 2, '--rate', 0, '--linger-ms', 20, '--seed', 36, '--aircraft', 1000 ]);
# once each worker of the stateful flow has checkpointed keys
ok(SdpTest::wait_for($node_a,
		'SELECT count(*) > 5000 FROM events WHERE (SELECT count(DISTINCT partition) = 4 FROM sdp.state_checkpoints)'),
	'streaming into A');
SdpTest::crash_and_restart($node_a);
pass('A: SIGKILL of the postmaster, and a restart');
my $second = SdpKafka::run_flightsim(
	bootstrap => $broker->bootstrap, topic => 'keyed',
	args => [ '--count', $total / 2, '--rate', 0, '--linger-ms', 20, '--seed', 36, '--aircraft', 1000,
		'--seq-start', $total / 2 ]);
is($first->{delivered} + $second->{delivered}, $total, "the murmur2 topic: $total delivered");
my $report = { partitions => {} };
for my $half ($first, $second)
{
	$report->{partitions}{$_} += $half->{partitions}{$_} for keys %{ $half->{partitions} };
}

# Server S holds exactly the messages of its share: rows, (partition, offset)
# once, every partition's offsets 0 .. n-1, nothing outside the share.
sub shard_exact
{
	my ($node, $tbl, $report, $label) = @_;
	my $share = $share{$tbl}{ $node->name };
	my %want = map { $_ => $report->{partitions}{$_} } grep { ($report->{partitions}{$_} // 0) > 0 } @$share;
	my $n = sum0(values %want);
	my $list = join(',', @$share);

	ok(SdpTest::wait_consumed($node, $tbl, $n), "$label: consumed its share");
	is(SdpTest::query($node,
			"SELECT count(*), count(DISTINCT (kafka_partition, kafka_offset)), count(DISTINCT seq), "
			  . "count(*) FILTER (WHERE kafka_partition <> ALL ('{$list}')) FROM $tbl"),
		"$n|$n|$n|0", "$label: $n rows, each (partition, offset) and seq once, none outside its share");
	my %got = map { split /\|/ } split /\n/,
	  SdpTest::query($node, "SELECT kafka_partition, count(*) FROM $tbl GROUP BY 1 "
		  . "HAVING min(kafka_offset) = 0 AND max(kafka_offset) = count(*) - 1");
	is_deeply(\%got, \%want, "$label: every partition of its share, offsets 0..n-1");
	return $n;
}

my $n_a = shard_exact($node_a, 'events', $report, 'A, murmur2 topic (2 workers, a SIGKILL)');
my $n_b = shard_exact($node_b, 'events', $report, 'B, murmur2 topic');
is($n_a + $n_b, $total, 'the two shares add up to the topic');
shard_exact($node_a, 'events_crc', $crc, 'A, consistent topic');
shard_exact($node_b, 'events_crc', $crc, 'B, consistent topic');

for my $node ($node_a, $node_b)
{
	my $name = $node->name;
	is(SdpTest::query($node,
			"SELECT count(*) FILTER (WHERE kafka_key IS NOT NULL), "
			  . "count(*) FILTER (WHERE sdp_partition_for_key(kafka_key, 8, 'murmur2') IS DISTINCT FROM kafka_partition) FROM events"),
		($name eq $node_a->name ? $n_a : $n_b) . '|0',
		"$name: sdp_partition_for_key(kafka_key, 8, 'murmur2') = kafka_partition for every row (all keyed)");
	my ($rows, $wrong, $as_murmur2) = split /\|/, SdpTest::query($node,
		"SELECT count(*), count(*) FILTER (WHERE sdp_partition_for_key(kafka_key, 8, 'consistent') IS DISTINCT FROM kafka_partition), "
		  . "count(*) FILTER (WHERE sdp_partition_for_key(kafka_key, 8) = kafka_partition) FROM events_crc");
	is($wrong, 0, "$name: sdp_partition_for_key(kafka_key, 8, 'consistent') = kafka_partition for every row of the CRC32 topic");
	ok($as_murmur2 < $rows, "$name: (murmur2 would have placed $rows - $as_murmur2 of them elsewhere)");
	is(SdpTest::query($node, "SELECT lag, jsonb_array_length(partitions) FROM sdp.flow_status WHERE flow = 'events'"),
		'0|4', "$name: no lag, over its 4 partitions");
}

# the stateful flow over A's share: each key once, in its partition's worker, counting its messages
ok(SdpTest::wait_consumed($node_a, 'active', $n_a), 'A: the active_count flow consumed its share');
ok(SdpTest::wait_for($node_a, <<'SQL'), 'A: active_count counts every message of every key of the share');
SELECT count(*) = 0 FROM (SELECT icao24, count(*) AS n FROM events GROUP BY 1) e
  FULL JOIN active a USING (icao24) WHERE a.active_count IS DISTINCT FROM e.n
SQL
is(SdpTest::query($node_a, "SELECT count(*) - count(DISTINCT key), count(DISTINCT key) FROM sdp_flow_state('active') WHERE state = 'last_seen'"),
	'0|' . SdpTest::query($node_a, 'SELECT count(DISTINCT icao24) FROM events'),
	'A: every key of the share held once across the 2 workers after the restart (each restored its part of the share)');

# The router: the table partitioned by LIST (kafka_partition), each
# partition a foreign table on the server that holds those partitions.
my $sql = "CREATE EXTENSION postgres_fdw;\n";
for my $node ($node_a, $node_b)
{
	my ($name, $host, $port) = ($node->name, $node->host, $node->port);
	$sql .= "CREATE SERVER $name FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '$host', port '$port', dbname 'postgres');\n"
	  . "CREATE USER MAPPING FOR CURRENT_USER SERVER $name;\n";
}
$sql .= sprintf($table, 'events') . " PARTITION BY LIST (kafka_partition);\n";
for my $node ($node_a, $node_b)
{
	my $name = $node->name;
	$sql .= "CREATE FOREIGN TABLE events_$name PARTITION OF events FOR VALUES IN ("
	  . join(', ', grep { $_ < 8 } @{ $share{events}{$name} })
	  . ") SERVER $name OPTIONS (table_name 'events');\n";
}
SdpTest::query($router, $sql);

for my $node ($node_a, $node_b)
{
	my $name = $node->name;
	my ($other) = grep { $_ ne $name } ($node_a->name, $node_b->name);
	my $key = SdpTest::query($node, 'SELECT kafka_key FROM events ORDER BY seq LIMIT 1');
	my $one = "SELECT count(*), min(seq), max(seq) FROM events WHERE kafka_partition = sdp_partition_for_key('$key', 8) AND kafka_key = '$key'";
	my $plan = SdpTest::query($router, "EXPLAIN (COSTS OFF) $one");
	note $plan;
	is(scalar(() = $plan =~ /Foreign Scan/g), 1, "router, a key of $name: one foreign scan");
	like($plan, qr/events_$name/, "... on $name");
	unlike($plan, qr/events_$other/, "... and not on $other (pruned at planning)");
	is(SdpTest::query($router, $one),
		SdpTest::query($node, "SELECT count(*), min(seq), max(seq) FROM events WHERE kafka_key = '$key'"),
		"router, a key of $name: its rows, as $name has them");
	$plan = SdpTest::query($router, <<"SQL");
PREPARE one_key(text) AS SELECT seq FROM events WHERE kafka_partition = sdp_partition_for_key(\$1, 8) AND kafka_key = \$1;
SET plan_cache_mode = force_generic_plan;
EXPLAIN (COSTS OFF) EXECUTE one_key('$key');
SQL
	like($plan, qr/Subplans Removed: 1/, "router, a key of $name in a generic plan: pruned when the execution starts");
}

my $union = SdpTest::query($router, 'SELECT count(*), count(DISTINCT seq), min(seq), max(seq), sum(seq) FROM events');
is($union, "$total|$total|0|" . ($total - 1) . '|' . ($total * ($total - 1) / 2),
	'router, across all keys: every message once (seq 0..49999, no duplicate)');
is(SdpTest::query($router, 'SELECT count(*), sum(seq) FROM events'),
	join('|', map { sum0(split /\|/) } zip_cols(map { SdpTest::query($_, 'SELECT count(*), sum(seq) FROM events') } ($node_a, $node_b))),
	'router: the aggregate is the sum of the two servers\'');
my %per_partition = map { split /\|/ } split /\n/, SdpTest::query($router,
	'SELECT kafka_partition, count(*) FROM events GROUP BY 1 HAVING min(kafka_offset) = 0 AND max(kafka_offset) = count(*) - 1');
is_deeply(\%per_partition, { map { $_ => $report->{partitions}{$_} } grep { $report->{partitions}{$_} > 0 } keys %{ $report->{partitions} } },
	'router: every partition of the topic, offsets 0..n-1');
my $plan = SdpTest::query($router, 'EXPLAIN (COSTS OFF) SELECT count(*) FROM events');
is(scalar(() = $plan =~ /Foreign Scan/g), 2, 'router, across all keys: both servers');

# zip_cols("1|2", "3|4") -> ("1|3", "2|4")
sub zip_cols
{
	my @rows = map { [ split /\|/ ] } @_;
	return map { my $i = $_; join('|', map { $_->[$i] } @rows) } 0 .. $#{ $rows[0] };
}

done_testing();
