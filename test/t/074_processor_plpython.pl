# The seed's ZoneCounter in PL/Python (examples/zone_counter_plpython.sql)
# beside the PL/pgSQL one (examples/zone_counter.sql), on one stream of
# aircraft positions, through a postmaster SIGKILL: both end with the same
# zone counts, which SQL over the input gives (the TTL is longer than the
# test).  Runs where PL/Python is installed (Debian's
# postgresql-plpython3-15: the kafka pass's packaged server); skipped
# elsewhere.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use PostgreSQL::Test::Utils;
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'raw-flights' => 2 });
my $node = SdpTest::new_node('zoneplpython');
if (SdpTest::query($node, "SELECT count(*) FROM pg_available_extensions WHERE name = 'plpython3u'") eq '0')
{
	plan skip_all => 'PL/Python is not installed for this server (Debian: postgresql-plpython3-15)';
}
SdpTest::create_source($node, 'flights', $broker, 'raw-flights');
SdpTest::query($node, <<'SQL');
CREATE TABLE zones (zone text PRIMARY KEY, min_lat float8, max_lat float8, min_lon float8, max_lon float8, capacity int);
INSERT INTO zones VALUES
    ('London TMA',    51.00, 52.05,  -0.95,   0.75, 12),
    ('Paris TMA',     48.55, 49.25,   1.95,   2.95, 10),
    ('New York TMA',  40.40, 41.10, -74.50, -73.00, 12),
    ('Frankfurt TMA', 49.70, 50.40,   8.10,   9.00,  8);
CREATE TABLE all_positions (seq bigint, icao24 text, lat float8, lon float8, kafka_partition int, kafka_offset bigint);
SELECT sdp_create_flow('all_positions_flow', 'flights', 'all_positions', 'seq bigint, icao24 text, lat float8, lon float8');
SQL
for my $file ('examples/zone_counter.sql', 'examples/zone_counter_plpython.sql')
{
	my $sql = slurp_file($file);
	$sql =~ s/SELECT interval '30 seconds'/SELECT interval '1 hour'/;
	$sql =~ s/"handle_timer": "(\w+)",/"handle_timer": "$1", "checkpoint_interval": "1 second",/ or die "$file: options changed";
	SdpTest::query($node, $sql);
}

my $total = 12000;
my $producer = SdpKafka::start_flightsim(bootstrap => $broker->bootstrap, topic => 'raw-flights',
	args => [ '--count', $total, '--rate', 1500, '--aircraft', 500, '--time-scale', 40, '--seed', 29 ]);
my ($pl, $py) = map { SdpTest::consumed_sql($_) } ('zone_counter_flow', 'zone_counter_py_flow');
ok($node->poll_query_until('postgres', "SELECT ($pl) > 4000 AND ($py) > 4000 AND
	(SELECT bool_and(last_checkpoint_at IS NOT NULL) FROM sdp.flow_status WHERE flow LIKE 'zone_counter%')"),
	'both ZoneCounters stream and have checkpointed');
SdpTest::crash_and_restart($node);
ok($node->poll_query_until('postgres', "SELECT count(*) = 3 FROM sdp.flow_status WHERE state = 'running'"),
	'after a postmaster SIGKILL, the three flows run again');
my $report = $producer->finish;
is($report->{delivered}, $total, "producer delivered $total");
for my $flow ('zone_counter_flow', 'zone_counter_py_flow', 'all_positions_flow')
{
	ok(SdpTest::wait_consumed($node, $flow, $total), "$flow consumed everything");
}
is(SdpTest::query($node, <<'SQL'), '0', 'the PL/Python and the PL/pgSQL ZoneCounters wrote the same rows, SQL\'s over the input');
WITH e AS (SELECT z.zone, count(DISTINCT p.icao24) AS n, min(z.capacity) AS capacity
             FROM all_positions p JOIN zones z ON p.lat BETWEEN z.min_lat AND z.max_lat AND p.lon BETWEEN z.min_lon AND z.max_lon
            GROUP BY z.zone)
SELECT count(*) FROM e FULL JOIN zone_counts a USING (zone) FULL JOIN zone_counts_py b USING (zone)
 WHERE a.aircraft_count IS DISTINCT FROM e.n OR b.aircraft_count IS DISTINCT FROM e.n
    OR a.crowded IS DISTINCT FROM (e.n > e.capacity) OR b.crowded IS DISTINCT FROM (e.n > e.capacity)
SQL
ok(SdpTest::query($node, 'SELECT count(*) FROM zone_counts_py') > 0, 'PL/Python counted some zones');
is(SdpTest::query($node, 'SELECT count(*) FROM sdp.dead_letters'), '0', 'no dead letter');

done_testing();
