# Upgrade from 0.1 to the current version (0.1 -> 0.2 -> ... , every script) with flows running: the extension is created at
# version 0.1, a stateless append flow and a stateful active_count flow run
# on it, the server restarts mid-stream (the 0.2 binary on the 0.1
# catalogs), ALTER EXTENSION sdp_ext UPDATE runs, the server restarts again
# and more messages arrive.  Every message lands exactly once, the zone
# counts are right, and the extension is at the current version.
#
# This runs the current binary on both catalog versions: the previous
# binary (0.1) is not built, so the step "install the new binaries" is the
# binary the whole test runs with; what is tested is that it works on 0.1
# catalogs until the update, and across it.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use PostgreSQL::Test::Cluster;
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'raw-flights' => 4, 'zflights' => 2 });
# the version this tree installs by default
my ($current) = PostgreSQL::Test::Utils::slurp_file('sdp_ext.control') =~ /^default_version\s*=\s*'([^']+)'/m;

# SdpTest::new_node creates the extension at its default version: this
# node creates it at 0.1
my $node = PostgreSQL::Test::Cluster->new('upgrade');
$node->init;
$node->append_conf('postgresql.conf', <<'EOC');
shared_preload_libraries = 'sdp_ext'
sdp.database = 'postgres'
sdp.launcher_naptime = '200ms'
max_worker_processes = 32
EOC
$node->start;
SdpTest::query($node, "CREATE EXTENSION sdp_ext VERSION '0.1'");
is(SdpTest::query($node, "SELECT extversion FROM pg_extension WHERE extname = 'sdp_ext'"), '0.1',
	'extension created at 0.1');
is(SdpTest::query($node,
		"SELECT count(*) FROM information_schema.columns WHERE table_schema = 'sdp' "
		  . "AND table_name = 'flows' AND column_name = 'offsets_stored'"),
	'0', '0.1 catalogs: no sdp.flows.offsets_stored');

SdpTest::create_source($node, 'flights', $broker, 'raw-flights');
SdpTest::create_source($node, 'zflights', $broker, 'zflights');
SdpTest::query($node, <<'SQL');
CREATE TABLE events (seq bigint, icao24 text, lat float8, kafka_partition int, kafka_offset bigint);
SELECT sdp_create_flow('events_flow', 'flights', 'events', 'seq bigint, icao24 text, lat float8',
  options => '{"mode": "append"}');
CREATE TABLE zones (zone text PRIMARY KEY, min_lat float8, max_lat float8, min_lon float8, max_lon float8, capacity int);
INSERT INTO zones VALUES ('Z', 10, 11, 10, 11, 3);
CREATE TABLE zone_alerts (zone text PRIMARY KEY, aircraft_count bigint, crowded boolean, updated_at timestamptz);
SELECT sdp_create_flow('zone_flow', source => 'zflights', target => 'zone_alerts',
  schema    => 'icao24 text, lat float8, lon float8',
  transform => $$SELECT z.zone, i.icao24, z.capacity FROM input i
                 JOIN zones z ON i.lat BETWEEN z.min_lat AND z.max_lat
                             AND i.lon BETWEEN z.min_lon AND z.max_lon$$,
  operator  => 'active_count',
  options   => '{"key": "zone", "member": "icao24", "ttl": "1 hour",
                 "capacity_column": "capacity", "count_column": "aircraft_count",
                 "alert_column": "crowded", "time_column": "updated_at", "checkpoint_interval": "1 second"}');
SQL
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM sdp.flow_status WHERE state = 'running' AND partitions IS NOT NULL"),
	'0.1: both flows running');

sub position { my ($icao, $lat, $lon) = @_; return [ $icao, qq({"icao24": "$icao", "lat": $lat, "lon": $lon}), undef ] }
sub zone_in
{
	my @icao = @_;
	SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'zflights',
		messages => [ map { position($_, 10.5, 10.5) } @icao ]);
}

zone_in(qw(a1 a2 a3));
ok($node->poll_query_until('postgres', "SELECT aircraft_count = 3 FROM zone_alerts WHERE zone = 'Z'"),
	'0.1: zone counts 3');

# restart mid-stream, on the 0.1 catalogs
my $producer = SdpKafka::start_flightsim(
	bootstrap => $broker->bootstrap, topic => 'raw-flights',
	args => [ '--count', 40000, '--rate', 2000, '--seed', 5, '--aircraft', 200 ]);
ok($node->poll_query_until('postgres', 'SELECT count(*) > 3000 FROM events'), 'streaming on 0.1');
$node->restart;
ok($producer->running, 'restart 1 happened mid-stream');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM sdp.flow_status WHERE state = 'running' AND partitions IS NOT NULL"),
	'0.1, after restart 1: both flows running');
zone_in(qw(a4 a1));
ok($node->poll_query_until('postgres', "SELECT aircraft_count = 4 FROM zone_alerts WHERE zone = 'Z'"),
	'0.1, after restart 1: zone counts 4 (state restored, a1 only refreshed)');
my $report1 = $producer->finish;
is($report1->{delivered}, 40000, 'producer 1 delivered 40,000');
ok(SdpTest::wait_consumed($node, 'events_flow', 40000), '0.1: events_flow consumed producer 1');

# the update, with the flows running
SdpTest::query($node, 'ALTER EXTENSION sdp_ext UPDATE');
is(SdpTest::query($node, "SELECT extversion FROM pg_extension WHERE extname = 'sdp_ext'"), $current,
	"ALTER EXTENSION sdp_ext UPDATE: $current (through every version between)");
is(SdpTest::query($node, "SELECT sdp_partition_for_key('kafka', 2147483647)"), '1348980580',
	'0.4: sdp_partition_for_key (the Java client\'s murmur2 of "kafka", 0xd067cf64, made positive)');
is(SdpTest::query($node, "SELECT string_agg(name || '=' || offsets_stored, ',' ORDER BY name) FROM sdp.flows"),
	'events_flow=true,zone_flow=true', 'the update marks the offsets of flows that have stored some');
zone_in(qw(a5));
ok($node->poll_query_until('postgres', "SELECT aircraft_count = 5 FROM zone_alerts WHERE zone = 'Z'"),
	'0.2 before restart 2: zone counts 5');

# restart again, on the 0.2 catalogs, with more messages coming
my $producer2 = SdpKafka::start_flightsim(
	bootstrap => $broker->bootstrap, topic => 'raw-flights',
	args => [ '--count', 40000, '--rate', 2000, '--seed', 6, '--aircraft', 200, '--seq-start', 40000 ]);
ok($node->poll_query_until('postgres', 'SELECT count(*) > 43000 FROM events'), 'streaming on 0.2');
$node->restart;
ok($producer2->running, 'restart 2 happened mid-stream');
zone_in(qw(a6 a2));
my $report2 = $producer2->finish;
is($report2->{delivered}, 40000, 'producer 2 delivered 40,000');

my %per_partition;
$per_partition{$_} += $report1->{partitions}{$_} for keys %{ $report1->{partitions} };
$per_partition{$_} += $report2->{partitions}{$_} for keys %{ $report2->{partitions} };
ok(SdpTest::wait_consumed($node, 'events_flow', 80000), 'events_flow consumed everything');
SdpTest::assert_exactly_once($node, 'events', \%per_partition, 'append across the upgrade');
ok($node->poll_query_until('postgres', "SELECT aircraft_count = 6 FROM zone_alerts WHERE zone = 'Z'"),
	'zone counts 6 after the upgrade and two restarts');
ok(SdpTest::wait_consumed($node, 'zone_flow', 8), 'zone_flow consumed its 8 messages');
is(SdpTest::query($node, "SELECT aircraft_count FROM zone_alerts WHERE zone = 'Z'"), '6',
	'zone count stays 6 (no message counted twice)');

# a flow created on 0.2 marks its offsets stored with its first ones
SdpTest::query($node, <<'SQL');
CREATE TABLE events2 (seq bigint, kafka_partition int, kafka_offset bigint);
SELECT sdp_create_flow('events2_flow', 'flights', 'events2', 'seq bigint');
SQL
ok($node->poll_query_until('postgres',
		"SELECT offsets_stored AND EXISTS (SELECT 1 FROM sdp.offsets o WHERE o.flow_id = f.id) "
		  . "FROM sdp.flows f WHERE name = 'events2_flow'"),
	'a new flow on 0.2 sets offsets_stored with its first offsets');

is(SdpTest::query($node,
		"SELECT string_agg(flow || ':' || state, ',' ORDER BY flow) FROM sdp.flow_status"),
	'events2_flow:running,events_flow:running,zone_flow:running', 'all flows running');
is(SdpTest::query($node, "SELECT extversion FROM pg_extension WHERE extname = 'sdp_ext'"), $current,
	"extension at $current");

done_testing();
