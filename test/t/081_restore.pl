# A restore never starts a flow before its offsets are back, nor before the
# restore has finished its data (issue 11, item 1).  pg_dump restores sdp.flows before sdp.offsets: a flow that has
# stored offsets (sdp.flows.offsets_stored) and finds none waits for them,
# saying so in sdp.flow_status.last_error, instead of reading the topic
# again from starting_offsets; then COPY sdp.offsets does not fail, and the
# flow resumes where the dump left it.  And every flow waits until the
# restore has set sdp.flows_id_seq, which pg_dump does after all table data:
# a stateful flow's state (sdp.state_checkpoints) comes after sdp.offsets.
# The dump is restored into a fresh server in three parts split just before
# COPY sdp.offsets and COPY sdp.state_checkpoints, a few seconds apart,
# while the broker still holds the topics.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'raw-flights' => 4, 'zflights' => 2 });
my $src = SdpTest::new_node('dumped');
SdpTest::create_source($src, 'flights', $broker, 'raw-flights', '{"starting_offsets": "earliest"}');
SdpTest::create_source($src, 'zflights', $broker, 'zflights', '{"starting_offsets": "earliest"}');
SdpTest::query($src, ($_ = <<'SQL') =~ s/%BOOT%/@{[ $broker->bootstrap ]}/r);
CREATE TABLE events (seq bigint, icao24 text, kafka_partition int, kafka_offset bigint);
SELECT sdp_create_flow('events_flow', 'flights', 'events', 'seq bigint, icao24 text',
  options => '{"mode": "append"}');
-- an upsert flow of a role's own: pg_dump restores its target's primary key
-- and its grants after all data, so it cannot load until the very end
CREATE ROLE app LOGIN;
CREATE TABLE latest (icao24 text PRIMARY KEY, seq bigint);
GRANT SELECT, INSERT, UPDATE ON latest TO app;
SET ROLE app;
SELECT sdp_create_source('app_flights', '%BOOT%', 'raw-flights', '{"starting_offsets": "earliest"}');
SELECT sdp_create_flow('latest_flow', 'app_flights', 'latest', 'seq bigint, icao24 text',
  options => '{"mode": "upsert"}');
RESET ROLE;
CREATE TABLE zones (zone text PRIMARY KEY, min_lat float8, max_lat float8, min_lon float8, max_lon float8, capacity int);
INSERT INTO zones VALUES ('Z', 10, 11, 10, 11, 3);
-- append mode: the restore adds a target's primary key only after all data (see the README)
CREATE TABLE zone_log (zone text, aircraft_count bigint, crowded boolean, updated_at timestamptz);
SELECT sdp_create_flow('zone_flow', source => 'zflights', target => 'zone_log',
  schema    => 'icao24 text, lat float8, lon float8',
  transform => $$SELECT z.zone, i.icao24, z.capacity FROM input i
                 JOIN zones z ON i.lat BETWEEN z.min_lat AND z.max_lat
                             AND i.lon BETWEEN z.min_lon AND z.max_lon$$,
  operator  => 'active_count',
  options   => '{"key": "zone", "member": "icao24", "ttl": "1 hour",
                 "capacity_column": "capacity", "count_column": "aircraft_count",
                 "alert_column": "crowded", "time_column": "updated_at", "checkpoint_interval": "200 ms",
                 "mode": "append"}');
SQL

sub position { my ($icao, $lat, $lon) = @_; return [ $icao, qq({"icao24": "$icao", "lat": $lat, "lon": $lon}), undef ] }
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'zflights',
	messages => [ map { position($_, 10.5, 10.5) } qw(a1 a2 a3) ]);
ok($src->poll_query_until('postgres', "SELECT max(aircraft_count) = 3 FROM zone_log WHERE zone = 'Z'"),
	'zone counts 3');
# the counts emitted so far (one per batch that changed the count: 3, or 1,2,3, ...)
my $zone_before = SdpTest::query($src,
	"SELECT string_agg(aircraft_count::text, ',' ORDER BY aircraft_count) FROM zone_log WHERE zone = 'Z'");
ok($src->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM sdp.state_checkpoints c JOIN sdp.flows f ON f.id = c.flow_id "
		  . "WHERE f.name = 'zone_flow' AND c.key = 'Z' AND "
		  . "(SELECT sum(state_offset) FROM sdp.offsets WHERE flow_id = f.id) = 3"),
	'the zone state is checkpointed');

my $n = 10000;
my $report1 = SdpKafka::run_flightsim(bootstrap => $broker->bootstrap, topic => 'raw-flights',
	args => [ '--count', $n, '--rate', 0, '--seed', 7, '--aircraft', 100 ]);
is($report1->{delivered}, $n, "producer delivered $n");
ok(SdpTest::wait_consumed($src, 'events_flow', $n), "the flow committed $n messages");
ok(SdpTest::wait_consumed($src, 'latest_flow', $n), "the upsert flow committed $n messages");
is(SdpTest::query($src, "SELECT offsets_stored FROM sdp.flows WHERE name = 'events_flow'"), 't',
	'the flow has stored offsets');

# dump, then stop the dumped server: only the restored one runs the flow
my $bindir = $src->config_data('--bindir');
my $dump = $PostgreSQL::Test::Utils::tmp_check . '/restore.sql';
command_ok([ "$bindir/pg_dump", '-Fp', '-h', $src->host, '-p', $src->port, '-f', $dump, 'postgres' ],
	'pg_dump');
$src->stop;

# three parts: everything before COPY sdp.offsets, up to COPY
# sdp.state_checkpoints, and the rest; each part gets the header's settings
# (and pg_dump's \restrict, \unrestrict where it has them)
open my $fh, '<', $dump or die "$dump: $!";
my @lines = <$fh>;
close $fh;
my ($split) = grep { $lines[$_] =~ /^COPY sdp\.offsets / } 0 .. $#lines;
ok(defined $split, 'the dump has COPY sdp.offsets');
my ($split2) = grep { $lines[$_] =~ /^COPY sdp\.state_checkpoints / } 0 .. $#lines;
ok(defined $split2, 'the dump has COPY sdp.state_checkpoints');
my ($flows_at) = grep { $lines[$_] =~ /^COPY sdp\.flows / } 0 .. $#lines;
ok(defined $flows_at && $flows_at < $split && $split < $split2,
	'the dump restores sdp.flows, then sdp.offsets, then sdp.state_checkpoints');
diag('dump order: ' . join(', ', map { /^COPY (\S+)/ ? $1 : () } @lines));
my $head = join('', grep { /^(SET |SELECT pg_catalog\.set_config|\\restrict )/ } @lines[ 0 .. $split - 1 ]);
my $tail = join('', grep { /^\\unrestrict / } @lines);
# the post-data section (constraints, indexes, grants) is a fourth part
my ($post) = grep { $_ > $split2 && $lines[$_] =~ /^-- Name: .*; Type: (CONSTRAINT|INDEX|ACL|POLICY|TRIGGER)/ } 0 .. $#lines;
ok(defined $post, 'the dump has a post-data section after the data');
$post-- while $post > 0 && $lines[ $post - 1 ] =~ /^--/;
my ($part1, $part2, $part3, $part4) = map { $PostgreSQL::Test::Utils::tmp_check . "/restore.$_.sql" } 1, 2, 3, 4;
PostgreSQL::Test::Utils::append_to_file($part1, join('', @lines[ 0 .. $split - 1 ]) . $tail);
PostgreSQL::Test::Utils::append_to_file($part2, $head . join('', @lines[ $split .. $split2 - 1 ]) . $tail);
PostgreSQL::Test::Utils::append_to_file($part3, $head . join('', @lines[ $split2 .. $post - 1 ]) . $tail);
PostgreSQL::Test::Utils::append_to_file($part4, $head . join('', @lines[ $post .. $#lines ]));

# a fresh server with sdp_ext preloaded; CREATE EXTENSION comes from the dump
my $dst = PostgreSQL::Test::Cluster->new('restored');
$dst->init;
$dst->append_conf('postgresql.conf', <<'EOC');
shared_preload_libraries = 'sdp_ext'
sdp.database = 'postgres'
sdp.launcher_naptime = '200ms'
max_worker_processes = 32
EOC
$dst->start;
# roles are not in a database's dump (pg_dumpall --globals-only has them)
SdpTest::query($dst, 'CREATE ROLE app LOGIN');

sub restore_part ($$)
{
	my ($file, $label) = @_;
	my ($stdout, $stderr);
	my $ok = IPC::Run::run([ "$bindir/psql", '-X', '-q', '-v', 'ON_ERROR_STOP=1',
			'-h', $dst->host, '-p', $dst->port, '-d', 'postgres', '-f', $file ],
		'<', \undef, '>', \$stdout, '2>', \$stderr);
	ok($ok, "$label restored");
	is($stderr, '', "$label: no error");
}

restore_part($part1, 'part 1 (up to sdp.offsets)');
ok($dst->poll_query_until('postgres',
		"SELECT count(*) = 3 FROM sdp.flow_status WHERE last_error = 'waiting for its stored offsets: restored without sdp.offsets?'"),
	'without their offsets the flows wait, and say why');
sleep 3;
is(SdpTest::query($dst, "SELECT count(*) FROM sdp.offsets"), '0', 'they stored no offsets of their own meanwhile');
is(SdpTest::query($dst, "SELECT count(*) FROM events"), $n, "the target holds the dumped $n rows, no more");
restore_part($part2, 'part 2 (sdp.offsets)');

# with their offsets back, they still wait for the rest of the restore (its
# sequence values come after all table data: the stateful flow's state, and
# any target whose rows come later in the dump)
ok($dst->poll_query_until('postgres',
		"SELECT count(*) = 3 FROM sdp.flow_status WHERE last_error LIKE 'waiting for the restore to finish %'"),
	'with their offsets back, the flows wait for the restore to finish, and say why');
sleep 2;
is(SdpTest::query($dst, "SELECT count(*) FROM sdp.state_checkpoints"), '0',
	'the stateful flow checkpointed no state of its own meanwhile');
is(SdpTest::query($dst, "SELECT count(*) FROM events"), $n, "the target still holds the dumped $n rows, no more");
my $latest_dumped = SdpTest::query($dst, 'SELECT count(*) FROM latest');
restore_part($part3, 'part 3 (sdp.state_checkpoints and the rest of the data)');
ok($dst->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM sdp.flow_status WHERE state = 'running' AND last_error IS NULL AND partitions IS NOT NULL "
		  . "AND flow IN ('events_flow', 'zone_flow')"),
	'with all data back, the append flows run');
# the upsert flow has run before: it is retried, not failed, until its
# target's primary key and its grants are back
ok($dst->poll_query_until('postgres',
		"SELECT state = 'restarting' AND (last_error LIKE '%primary key%' OR last_error LIKE '%permission denied%') "
		  . "FROM sdp.flow_status WHERE flow = 'latest_flow'"),
	'the upsert flow waits for its primary key and grants, retrying, and says why');
ok($dst->poll_query_until('postgres', "SELECT restarts >= 2 FROM sdp.flow_status WHERE flow = 'latest_flow'"),
	'it tried again');
is(SdpTest::query($dst, "SELECT count(*) FROM sdp.flows WHERE failed_at IS NOT NULL"), '0', 'no flow failed');
is(SdpTest::query($dst, 'SELECT count(*) FROM latest'), $latest_dumped, 'it wrote nothing meanwhile');
restore_part($part4, 'part 4 (constraints, indexes, grants)');
ok($dst->poll_query_until('postgres',
		"SELECT count(*) = 3 FROM sdp.flow_status WHERE state = 'running' AND partitions IS NOT NULL"),
	'once the restore is done, all three flows run');
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'zflights',
	messages => [ map { position($_, 10.5, 10.5) } qw(a4 a1) ]);
ok($dst->poll_query_until('postgres', "SELECT (" . SdpTest::consumed_sql('zone_flow') . ") = 5"),
	'the restored stateful flow consumed the new messages');
ok($dst->poll_query_until('postgres',
		"SELECT string_agg(aircraft_count::text, ',' ORDER BY aircraft_count) = '$zone_before,4' FROM zone_log WHERE zone = 'Z'"),
	"the restored zone counts on from its state: $zone_before (before the dump) then 4, nothing counted twice");

my $report2 = SdpKafka::run_flightsim(bootstrap => $broker->bootstrap, topic => 'raw-flights',
	args => [ '--count', 5000, '--rate', 0, '--seed', 8, '--aircraft', 100, '--seq-start', $n ]);
is($report2->{delivered}, 5000, 'producer delivered 5,000 more');
my %per_partition;
$per_partition{$_} += $report1->{partitions}{$_} for keys %{ $report1->{partitions} };
$per_partition{$_} += $report2->{partitions}{$_} for keys %{ $report2->{partitions} };
ok(SdpTest::wait_consumed($dst, 'events_flow', $n + 5000), 'the restored flow consumed the new messages');
SdpTest::assert_exactly_once($dst, 'events', \%per_partition, 'restored target');
is(SdpTest::query($dst, "SELECT count(*) FROM sdp.dead_letters"), '0', 'nothing dead-lettered');
ok(SdpTest::wait_consumed($dst, 'latest_flow', $n + 5000), 'the restored upsert flow consumed the new messages');
is(SdpTest::query($dst, "SELECT count(*) FROM sdp.flow_status WHERE state = 'running' AND last_error IS NULL"), '3',
	'all three running, and the upsert flow\'s old error is gone with its first commit');
# per aircraft, the sequence number of its last message (its partition's highest offset)
my $aircraft = SdpTest::query($dst, 'SELECT count(DISTINCT icao24) FROM events');
is(SdpTest::query($dst, <<'SQL'),
SELECT count(*) || '|' || count(*) FILTER (WHERE l.seq = e.seq) || '|' || (SELECT count(*) FROM latest)
  FROM (SELECT DISTINCT ON (icao24) icao24, seq FROM events ORDER BY icao24, kafka_offset DESC) e
  LEFT JOIN latest l USING (icao24)
SQL
	"$aircraft|$aircraft|$aircraft",
	'the upsert target holds the last message of each aircraft, from before and after the restore');
is(SdpTest::query($dst, "SELECT string_agg(aircraft_count::text, ',' ORDER BY aircraft_count) FROM zone_log WHERE zone = 'Z'"),
	"$zone_before,4", "zone counts still $zone_before,4");

done_testing();
