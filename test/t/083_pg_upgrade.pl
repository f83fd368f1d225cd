# pg_upgrade of a cluster with flows, from an older PostgreSQL major to the
# server under test.  The old server is the install SDP_UPGRADE_FROM names
# (a relocatable one: scripts/test.sh gives the assert-enabled 15 of
# scripts/cassert.sh), copied, with this tree built and installed into the
# copy.  On it run a flow of each kind: an append flow, an upsert flow, an
# active_count flow, a window_agg flow (with its ground truth) and a sink
# flow; two producers stream, and the old server stops by a fast shutdown in
# the middle of the streams.  pg_upgrade (--link or --copy: SDP_UPGRADE_MODE,
# default --copy) moves the cluster to the server under test, which starts;
# ALTER EXTENSION sdp_ext UPDATE; the flows resume from their offsets and
# state.  Every (partition, offset) lands once, each aircraft's position is
# its last message, the zone count is exact, every window equals an SQL
# GROUP BY, and the sink topic holds every input once for a read_committed
# consumer.  While pg_upgrade runs the servers (binary-upgrade mode), no
# flow runs: the logs say so.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use Cwd qw(getcwd);
use File::Basename qw(dirname);
use JSON::PP ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SdpKafka;
use SdpPayments;
use SdpTest;
use Test::More;

my $old_install = $ENV{SDP_UPGRADE_FROM} // '';
plan skip_all => 'no older server to upgrade from (SDP_UPGRADE_FROM: the prefix of a relocatable '
  . 'install of an older major, e.g. scripts/cassert.sh 15; scripts/test.sh sets it on the 17 and 18 passes)'
  unless $old_install ne '' && -x "$old_install/bin/pg_config";

sub major
{
	my ($pg_config) = @_;
	my ($m) = `$pg_config --version` =~ /PostgreSQL (\d+)/;
	return $m;
}
my $new_bindir = `pg_config --bindir`;
chomp $new_bindir;
my ($old_major, $new_major) = (major("$old_install/bin/pg_config"), major('pg_config'));
plan skip_all => "the server under test ($new_major) is not newer than $old_install ($old_major)"
  unless $old_major < $new_major;
my $mode = $ENV{SDP_UPGRADE_MODE} // '--copy';
note "pg_upgrade $mode from PostgreSQL $old_major ($old_install) to $new_major ($new_bindir)";

# a private copy of the old install, with this tree built for it
my $tmp = PostgreSQL::Test::Utils::tempdir('pg_upgrade');
my $copy = "$tmp/old";
ok(run_log([ 'cp', '-a', $old_install, $copy ]), "copied the PostgreSQL $old_major install");
my $cwd = getcwd();
my $src = "$tmp/src";
mkdir $src or die "$src: $!";
ok(run_log([ 'sh', '-c', 'cp -a Makefile sdp_ext.control sdp_ext--*.sql src "$1"', 'sh', $src ]),
	'copied the sources');
ok(run_log([ 'make', '-s', '-B', '-j2', '-C', $src, 'CI=', "PG_CONFIG=$copy/bin/pg_config", 'install' ]),
	"this tree built and installed for PostgreSQL $old_major");

my $broker = SdpKafka::start_broker(
	topics => { 'raw-flights' => 4, 'zflights' => 2, 'payments' => 4, 'sink-out' => 4 });
my $old = SdpTest::new_node('old', install_path => $copy);
is(major("$copy/bin/pg_config"), $old_major, "the old node runs PostgreSQL $old_major");

SdpTest::create_source($old, 'flights', $broker, 'raw-flights');
SdpTest::create_source($old, 'zflights', $broker, 'zflights');
SdpTest::query($old, "SELECT sdp_create_sink('out', '" . $broker->bootstrap . "', 'sink-out')");
SdpTest::query($old, <<'SQL');
CREATE TABLE events (seq bigint, icao24 text, lat float8, kafka_partition int, kafka_offset bigint);
SELECT sdp_create_flow('events_flow', 'flights', 'events', 'seq bigint, icao24 text, lat float8',
  options => '{"mode": "append", "workers": 2}');
CREATE TABLE positions (icao24 text PRIMARY KEY, seq bigint, lat float8, kafka_partition int, kafka_offset bigint);
SELECT sdp_create_flow('positions_flow', 'flights', 'positions', 'seq bigint, icao24 text, lat float8',
  options => '{"mode": "upsert"}');
SELECT sdp_create_flow('sink_flow', source => 'flights', sink => 'out', schema => 'seq bigint, icao24 text',
  options => '{"sink_key": "icao24"}');
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
SdpPayments::declare($old, $broker);
my @flows = sort qw(events_flow positions_flow sink_flow zone_flow payments_agg payments_all);
ok($old->poll_query_until('postgres',
		"SELECT count(*) = 7 FROM sdp.flow_workers WHERE state = 'running'"),
	"PostgreSQL $old_major: every flow running (7 workers)");
SdpPayments::warm_up($old, $broker);

sub position { my ($icao, $lat, $lon) = @_; return [ $icao, qq({"icao24": "$icao", "lat": $lat, "lon": $lon}), undef ] }
sub zone_in
{
	my @icao = @_;
	SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'zflights',
		messages => [ map { position($_, 10.5, 10.5) } @icao ]);
}
zone_in(qw(a1 a2 a3));
ok($old->poll_query_until('postgres', "SELECT aircraft_count = 3 FROM zone_alerts WHERE zone = 'Z'"),
	"PostgreSQL $old_major: zone counts 3");

# the streams, and the fast shutdown in their middle.  The producers wait
# for the broker as long as the upgrade may take: while pg_upgrade copies the
# cluster and seven flows catch up, the embedded broker (one thread for every
# connection) has kept a produce request unanswered past the default 30 s
# (CI of 2026-12-05), and a request that times out is sent again: without
# idempotence, a message twice in the topic.
my @patient = ('--message-timeout-ms', 300000, '-X', 'request.timeout.ms=240000');
# (linger 50 ms: batches of about 100 messages at 2,000 a second; a batch per
# message or ten, the embedded broker served the flows' fetches of the
# backlog at about 200 messages a second on a loaded machine (the CI's pg18
# pass, 2026-12-07: 38,561 of 40,000 in 180 s))
my $flights = SdpKafka::start_flightsim(
	bootstrap => $broker->bootstrap, topic => 'raw-flights',
	args => [ '--count', 40000, '--rate', 2000, '--seed', 7, '--aircraft', 200, '--linger-ms', 50, @patient ]);
my $payments = SdpKafka::start_paymentsim(bootstrap => $broker->bootstrap, topic => 'payments',
	args => [ '--count', 20000, '--rate', 1000, '--merchants', 50, '--event-time', 'step:10',
			  '--disorder-ms', 3000, '--late-share', '0.005', '--seed', 12, @patient ]);
ok($old->poll_query_until('postgres',
		"SELECT (SELECT count(*) > 3000 FROM events) AND (SELECT count(*) > 1000 FROM payments_all)"
		  . " AND (SELECT count(*) > 0 FROM payment_windows)"
		  . " AND (SELECT bool_and(last_checkpoint_at IS NOT NULL) FROM sdp.flow_status"
		  . "      WHERE flow IN ('payments_agg', 'zone_flow'))"),
	'streaming on the old server, the state checkpointed');
$old->stop('fast');
ok($flights->running && $payments->running, 'the old server stopped by a fast shutdown mid-stream');

# the new cluster: initdb of the server under test, as the old one was made
# (no data checksums: the old major's default, which 18 changed; before 18
# initdb has no --no-data-checksums), sdp_ext preloaded: pg_upgrade loads the
# libraries the old cluster's functions use
my $new = PostgreSQL::Test::Cluster->new('new');
$new->init($new_major >= 18 ? (extra => [ '--no-data-checksums' ]) : ());
$new->append_conf('postgresql.conf', <<'EOC');
shared_preload_libraries = 'sdp_ext'
sdp.database = 'postgres'
sdp.launcher_naptime = '200ms'
max_worker_processes = 32
EOC
my $old_log = -s $old->logfile;
command_ok(
	[
		"$new_bindir/pg_upgrade", '--no-sync',
		'--old-datadir', $old->data_dir, '--new-datadir', $new->data_dir,
		'--old-bindir', "$copy/bin", '--new-bindir', $new_bindir,
		'--socketdir', $new->host, '--old-port', $old->port, '--new-port', $new->port,
		'--retain', $mode,
	],
	"pg_upgrade $mode from $old_major to $new_major");
# the servers pg_upgrade ran (binary-upgrade mode) ran no flow
my @server_logs = glob($new->data_dir . '/pg_upgrade_output.d/*/log/pg_upgrade_server.log');
is(scalar(@server_logs), 1, 'pg_upgrade kept its server log (--retain)');
my $server_log = @server_logs ? slurp_file($server_logs[0]) : '';
my $binary_mode = () = $server_log =~ /sdp_ext: the server runs in binary-upgrade mode \(pg_upgrade\): no flow runs/g;
cmp_ok($binary_mode, '>=', 2, "the old and the new server said they ran no flow in binary-upgrade mode ($binary_mode starts)");
unlike($server_log, qr/sdp launcher|sdp flow "/, 'no launcher and no flow in the servers pg_upgrade ran');

$new->start;
is(SdpTest::query($new, 'SHOW server_version_num') =~ /^$new_major/ ? 1 : 0, 1,
	"the new node runs PostgreSQL $new_major");
SdpTest::query($new, 'ALTER EXTENSION sdp_ext UPDATE');
is(SdpTest::query($new, "SELECT extversion = sdp_library_version() FROM pg_extension WHERE extname = 'sdp_ext'"), 't',
	'ALTER EXTENSION sdp_ext UPDATE: the catalogs at the library\'s version');
ok($new->poll_query_until('postgres', "SELECT count(*) = 7 FROM sdp.flow_workers WHERE state = 'running'"),
	"PostgreSQL $new_major: every flow running again (7 workers)");
is(SdpTest::query($new, "SELECT string_agg(flow || ':' || owner::text, ',' ORDER BY flow) FROM sdp.flow_status"),
	join(',', map { "$_:postgres" } @flows), 'the flows kept their owner');

zone_in(qw(a4 a1));
my $fr = $flights->finish(timeout => 330);
is($fr->{delivered}, 40000, 'flight_sim delivered 40,000');
my $pr = $payments->finish(timeout => 330);
is($pr->{delivered}, 20000, 'payment_sim delivered 20,000');

# append: every (partition, offset) once
ok(SdpTest::wait_consumed($new, 'events_flow', 40000), 'events_flow consumed everything');
SdpTest::assert_exactly_once($new, 'events', $fr->{partitions}, 'append across pg_upgrade');

# upsert: each aircraft's row is its last message
ok(SdpTest::wait_consumed($new, 'positions_flow', 40000), 'positions_flow consumed everything');
is(SdpTest::query($new, 'SELECT count(*) FROM (SELECT icao24 FROM events GROUP BY icao24 HAVING count(DISTINCT kafka_partition) > 1) s'),
	'0', "each aircraft's messages are in one partition");
is(SdpTest::query($new, <<'SQL'), '200|200|0', 'upsert across pg_upgrade: one row per aircraft, its last message');
SELECT (SELECT count(*) FROM positions),
       (SELECT count(DISTINCT icao24) FROM events),
       (SELECT count(*) FROM (SELECT DISTINCT ON (icao24) icao24, seq, lat, kafka_partition, kafka_offset
                                FROM events ORDER BY icao24, kafka_offset DESC) last
          FULL JOIN positions p USING (icao24)
         WHERE p.seq IS DISTINCT FROM last.seq OR p.lat IS DISTINCT FROM last.lat
            OR p.kafka_offset IS DISTINCT FROM last.kafka_offset)
SQL

# active_count: the state restored, a1 only refreshed
ok($new->poll_query_until('postgres', "SELECT aircraft_count = 4 FROM zone_alerts WHERE zone = 'Z'"),
	'active_count across pg_upgrade: zone counts 4');
ok(SdpTest::wait_consumed($new, 'zone_flow', 5), 'zone_flow consumed its 5 messages');
is(SdpTest::query($new, "SELECT aircraft_count FROM zone_alerts WHERE zone = 'Z'"), '4',
	'zone count stays 4 (no message counted twice)');

# window_agg: every window equals the SQL GROUP BY
ok(SdpTest::wait_consumed($new, 'payments_agg', 20001), 'payments_agg consumed everything');
ok(SdpTest::wait_consumed($new, 'payments_all', 20001), 'the ground truth flow consumed everything');
my $expected = SdpPayments::expected($new);
ok($new->poll_query_until('postgres', "SELECT count(*) = $expected FROM payment_windows"),
	"all $expected windows finalized");
SdpPayments::compare($new, 'window_agg across pg_upgrade');
is(SdpTest::query($new, "SELECT count(*) FROM sdp.dead_letters WHERE flow = 'payments_agg' AND stage = 'late'"),
	'100', 'each late event dead-lettered once');

# sink: every input once for a read_committed consumer
ok(SdpTest::wait_consumed($new, 'sink_flow', 40000), 'sink_flow consumed everything');
ok($new->poll_query_until('postgres', 'SELECT count(*) = 0 FROM sdp.outbox'), 'the outbox is empty');
my $json = JSON::PP->new;
my %seq;
$seq{ eval { $json->decode($_->{payload})->{seq} } // 'bad' }++
  for SdpKafka::kcat_consume(bootstrap => $broker->bootstrap, topic => 'sink-out',
	properties => { 'isolation.level' => 'read_committed' });
is(join(',', scalar(keys %seq), scalar(grep { $_ != 1 } values %seq), scalar(grep { /^\d+$/ && $_ < 40000 } keys %seq)),
	'40000,0,40000', 'sink across pg_upgrade: every input once in the sink topic');

is(SdpTest::query($new, "SELECT count(*) FROM sdp.dead_letters WHERE stage <> 'late'"), '0',
	'no dead letter but the late events');

done_testing();
