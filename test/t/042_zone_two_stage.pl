# The zone congestion pipeline in two stages (issue 14, item 4), beside the
# one-stage flow over the same input.  raw-flights is keyed by aircraft;
# zone congestion is keyed by zone:
#   stage 1  zone_positions_flow (stateless): (zone, icao24, ts) of every
#            position in a zone, to topic zone-positions keyed by zone (a
#            repartition topic);
#   stage 2  zone_congestion_2 (active_count, 2 workers): reads
#            zone-positions, where every zone is on one partition (the
#            key-ownership rule of parallel stateful flows holds), and
#            publishes its changes to topic zone-alerts keyed by zone;
#   stage 3  zone_alerts_flow: zone-alerts into table zone_alerts_2.
# With a TTL longer than the test, each zone's count is the number of
# aircraft seen in it: after a SIGKILL of the postmaster mid-stream, the two
# pipelines end with exactly the same zone_alerts (zone, count, crowded),
# which are also what SQL over the input gives.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use JSON::PP ();
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'raw-flights' => 4, 'zone-positions' => 4, 'zone-alerts' => 2 });
my $boot = $broker->bootstrap;
my $node = SdpTest::new_node('zone_two_stage');
SdpTest::create_source($node, 'flights', $broker, 'raw-flights');
SdpTest::create_source($node, 'zone_positions', $broker, 'zone-positions', '{"isolation.level": "read_committed"}');
SdpTest::create_source($node, 'zone_alerts_topic', $broker, 'zone-alerts', '{"isolation.level": "read_committed"}');

my $zone_join = q{JOIN zones z ON i.lat BETWEEN z.min_lat AND z.max_lat AND i.lon BETWEEN z.min_lon AND z.max_lon};
my $ac = q{"key": "zone", "member": "icao24", "ttl": "1 hour", "capacity_column": "capacity",
           "count_column": "aircraft_count", "alert_column": "crowded", "time_column": "updated_at"};
SdpTest::query($node, <<"SQL");
CREATE TABLE zones (zone text PRIMARY KEY, min_lat float8, max_lat float8, min_lon float8, max_lon float8, capacity int);
INSERT INTO zones VALUES
    ('London TMA',     51.00,  52.05,   -0.95,   0.75, 12),
    ('Paris TMA',      48.55,  49.25,    1.95,   2.95, 10),
    ('Amsterdam TMA',  51.90,  52.60,    4.20,   5.20,  8),
    ('Frankfurt TMA',  49.70,  50.40,    8.10,   9.00,  8),
    ('Munich TMA',     48.05,  48.65,   11.35,  12.20,  6),
    ('New York TMA',   40.40,  41.10,  -74.50, -73.00, 12),
    ('Chicago TMA',    41.60,  42.30,  -88.40, -87.50, 10),
    ('Madrid TMA',     40.20,  40.80,   -3.95,  -3.20,  6);
CREATE TABLE zone_alerts_1 (zone text PRIMARY KEY, aircraft_count bigint, crowded boolean, updated_at timestamptz);
CREATE TABLE zone_alerts_2 (zone text PRIMARY KEY, aircraft_count bigint, crowded boolean, updated_at timestamptz);
CREATE TABLE all_positions (icao24 text, lat float8, lon float8);
SELECT sdp_create_flow('all_positions_flow', 'flights', 'all_positions', 'icao24 text, lat float8, lon float8');

-- one stage: raw-flights (keyed by aircraft) straight into active_count, one worker
SELECT sdp_create_flow('zone_congestion_1', source => 'flights', target => 'zone_alerts_1',
  schema    => 'icao24 text, lat float8, lon float8',
  transform => 'SELECT z.zone, i.icao24, z.capacity FROM input i $zone_join',
  operator  => 'active_count', options => '{$ac}');

-- two stages, through a repartition topic
SELECT sdp_create_sink('zone_positions_out', '$boot', 'zone-positions');
SELECT sdp_create_sink('zone_alerts_out', '$boot', 'zone-alerts');
SELECT sdp_create_flow('zone_positions_flow', source => 'flights', sink => 'zone_positions_out',
  schema    => 'icao24 text, lat float8, lon float8, poller_ts timestamptz',
  transform => 'SELECT z.zone, i.icao24, i.poller_ts AS ts FROM input i $zone_join',
  options   => '{"sink_key": "zone", "workers": 2}');
SELECT sdp_create_flow('zone_congestion_2', source => 'zone_positions', sink => 'zone_alerts_out',
  schema    => 'zone text, icao24 text, ts timestamptz',
  transform => 'SELECT i.zone, i.icao24, z.capacity FROM input i JOIN zones z USING (zone)',
  operator  => 'active_count', options => '{$ac, "sink_key": "zone", "workers": 2}');
SELECT sdp_create_flow('zone_alerts_flow', 'zone_alerts_topic', 'zone_alerts_2',
  'zone text, aircraft_count bigint, crowded boolean, updated_at timestamptz');
SQL

my $total = 20000;
my $producer = SdpKafka::start_flightsim(
	bootstrap => $boot, topic => 'raw-flights',
	args => [ '--count', $total, '--rate', 4000, '--seed', 42, '--aircraft', 2000, '--time-scale', 20 ]);
ok(SdpTest::wait_for($node, 'SELECT count(*) > 0 FROM zone_alerts_2'), 'zone alerts through three flows and two topics');
SdpTest::crash_and_restart($node);
pass('crash mid-stream');
my $report = $producer->finish;
is($report->{delivered}, $total, "producer delivered $total");

for my $flow (qw(all_positions_flow zone_congestion_1 zone_positions_flow))
{
	ok(SdpTest::wait_consumed($node, $flow, $total), "$flow consumed everything");
}
my $in_zones = SdpTest::query($node, "SELECT count(*) FROM all_positions i $zone_join");
ok($in_zones > 500, "positions in zones: $in_zones");
ok(SdpTest::wait_consumed($node, 'zone_congestion_2', $in_zones), 'stage 2 consumed every position in a zone');
ok(SdpTest::wait_for($node, 'SELECT count(*) = 0 FROM sdp.outbox'), 'the outboxes are empty');

# stage 3 has read every change of stage 2: as many as zone-alerts holds
my @alerts = SdpKafka::kcat_consume(bootstrap => $boot, topic => 'zone-alerts',
	properties => { 'isolation.level' => 'read_committed' });
ok(SdpTest::wait_consumed($node, 'zone_alerts_flow', scalar @alerts), scalar(@alerts) . ' zone changes read back');

my $truth = qq{SELECT z.zone, count(DISTINCT i.icao24) AS aircraft_count, count(DISTINCT i.icao24) > z.capacity AS crowded
                 FROM all_positions i $zone_join GROUP BY z.zone, z.capacity};
my $one = SdpTest::query($node, 'SELECT zone, aircraft_count, crowded FROM zone_alerts_1 ORDER BY zone');
my $two = SdpTest::query($node, 'SELECT zone, aircraft_count, crowded FROM zone_alerts_2 ORDER BY zone');
is($two, $one, 'two stages: the same zone_alerts as one stage');
is($one, SdpTest::query($node, "SELECT * FROM ($truth) t ORDER BY zone"), 'and as SQL over the input');
my @zones = split /\n/, $one;
ok(@zones >= 4, 'several zones: ' . join('; ', @zones));
ok(scalar(grep { /\|t$/ } @zones) >= 1, 'some of them crowded');
is(SdpTest::query($node, 'SELECT count(*) FROM zone_alerts_2 a JOIN zone_alerts_1 b USING (zone) WHERE a.updated_at IS NULL'),
	'0', 'updated_at carried through');

# the alerts topic: keyed by zone, each zone's counts rising (ttl 1 hour), on one partition
my $json = JSON::PP->new;
my (%last, %part, $bad);
for my $m (sort { $a->{partition} <=> $b->{partition} || $a->{offset} <=> $b->{offset} } @alerts)
{
	my $v = $json->decode($m->{payload});
	$bad++ if ($m->{key} // '') ne $v->{zone} || $v->{aircraft_count} <= ($last{ $v->{zone} } // 0)
	  || ($part{ $v->{zone} } //= $m->{partition}) != $m->{partition};
	$last{ $v->{zone} } = $v->{aircraft_count};
}
is($bad // 0, 0, 'zone-alerts: keyed by zone, one partition per zone, each change once (counts only rise)');
is(SdpTest::query($node, 'SELECT sum(rows_dead_lettered) FROM sdp.flow_status'), '0', 'no dead letters');

done_testing();
