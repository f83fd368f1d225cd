# Upgrade with the previous version's binary, flows running: the previous
# release (prev_version/, the tree scripts/test.sh extracts from the git
# history) is built and installed into a private copy of the server's
# install; a node from that copy creates the extension (the previous
# version), a stateless append flow and a stateful active_count flow stream;
# the server stops mid-stream, the current tree is installed into the copy
# (the new library and scripts), the server starts again and the flows
# resume on the old catalogs with the new library; ALTER EXTENSION sdp_ext
# UPDATE, and a restart mid-stream again.  Every message lands exactly once,
# the zone counts are exact, the owners are regroles and the flows run (from
# 0.3 on, the stateless flow also goes to 2 workers after the update; 0.4
# adds sdp_partition_for_key).
#
# Test 080 does the same with the current binary all along.  This one needs a
# relocatable server (an assert-enabled build): Debian's packaged server has
# its paths compiled in, so its install cannot be copied.  On 17 and 18 it
# needs a previous version that builds there (from the first release after
# src/compat.h).
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use Cwd qw(getcwd);
use File::Basename qw(dirname);
use File::Compare qw(compare);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SdpKafka;
use SdpTest;
use JSON::PP ();
use Test::More;

my $bindir = `pg_config --bindir`;
chomp $bindir;
plan skip_all => "the server under test ($bindir) is a packaged one, with its paths compiled in: "
  . "its install cannot be copied to run the previous version's binary (runs on the assert-enabled build)"
  if $bindir eq '' || $bindir =~ m{^/usr/lib/postgresql/};
my $cwd = getcwd();
my $prev = "$cwd/prev_version";
plan skip_all => "no previous version's tree in $prev (scripts/test.sh extracts it from the git history; "
  . "it says why it did not)"
  unless -f "$prev/sdp_ext.control";

# A release before src/compat.h builds against PostgreSQL 15 only
my ($server_major) = `pg_config --version` =~ /PostgreSQL (\d+)/;
plan skip_all => "the previous version's tree ($prev) builds against PostgreSQL 15 only (it has no src/compat.h), "
  . "and the server under test is $server_major: this test runs on $server_major once the previous version is one that builds there"
  if $server_major > 15 && !-f "$prev/src/compat.h";

sub control_version
{
	my ($file) = @_;
	my ($v) = slurp_file($file) =~ /^default_version\s*=\s*'([^']*)'/m;
	return $v;
}
# versions compare by their numbers (0.10 comes after 0.9)
sub at_least
{
	my ($v, $w) = @_;
	my @a = split /\./, $v;
	my @b = split /\./, $w;
	for my $i (0 .. 1)
	{
		return $a[$i] > $b[$i] if $a[$i] != $b[$i];
	}
	return 1;
}
my $old_version = control_version("$prev/sdp_ext.control");
my $new_version = control_version("$cwd/sdp_ext.control");
note "upgrading from $old_version (prev_version/) to $new_version (this tree)";
isnt($old_version, $new_version, "the previous version ($old_version) is not this one ($new_version)");

# a private copy of the server's install, with the previous version in it
my $copy = PostgreSQL::Test::Utils::tempdir('prev_install') . '/pg';
ok(run_log([ 'cp', '-a', dirname($bindir), $copy ]), 'copied the server install');
my $pg_config = "$copy/bin/pg_config";
my $pkglib = `$pg_config --pkglibdir`;
chomp $pkglib;
ok(run_log([ 'make', '-s', '-j2', '-C', $prev, 'CI=', "PG_CONFIG=$pg_config", 'install' ]),
	"previous version $old_version built and installed into the copy");
is(compare("$pkglib/sdp_ext.so", "$prev/sdp_ext.so"), 0, 'the copy has the previous library');

my $broker = SdpKafka::start_broker(topics => { 'raw-flights' => 4, 'zflights' => 2, 'sink-out' => 4 });
my $node = SdpTest::new_node('upgrade_binary', install_path => $copy);

sub extversion { SdpTest::query($node, "SELECT extversion FROM pg_extension WHERE extname = 'sdp_ext'") }

# What each version added that the test can see: a C function of its
# library (looked up when a function is created: which library the server
# runs), and what its update script changed.
my %added = (
	'0.2' => { symbol => 'sdp_skip_message', args => '(text, int, bigint)' },
	'0.3' => { symbol => 'sdp_set_flow_workers', args => '(text, int)' },
	'0.4' => { symbol => 'sdp_partition_for_key', args => '(text, int, text)' },
	'0.5' => { symbol => 'sdp_sink_relays', args => '()' },
	'0.6' => { symbol => 'sdp_library_version', args => '()' },
	'0.7' => { symbol => 'sdp_skip_outbox_row', args => '(text, bigint)' },
	'0.8' => { symbol => 'sdp_avro_to_json', args => '(text, bytea, boolean)' },
	'0.9' => { symbol => 'sdp_row_avro', args => '(record, integer)' },
	'0.10' => { symbol => 'sdp_backfill', args => '(text, text, jsonb, text[], boolean)' },
	'0.11' => { symbol => 'sdp_alter_source', args => '(text, text, jsonb)' },
	'0.12' => { symbol => 'sdp_value', args => '(text, anyelement)' },
);
# From 0.4 on a third flow writes to a Kafka sink across the upgrade.
my $with_sink = at_least($old_version, '0.4');
my @flows = ('events_flow', ($with_sink ? ('sink_flow') : ()), 'zone_flow');
die "test 082 does not know what version $new_version added" unless $added{$new_version};
sub owner_type
{
	SdpTest::query($node,
		"SELECT atttypid::regtype FROM pg_attribute WHERE attrelid = 'sdp.flows'::regclass AND attname = 'owner'");
}
# which library the server runs: the new one has the symbol the new version added
sub has_new_symbol
{
	my $a = $added{$new_version};
	my ($ret, $out, $err) = $node->psql('postgres',
		"CREATE FUNCTION pg_temp.probe$a->{args} RETURNS void LANGUAGE C AS 'sdp_ext', '$a->{symbol}'");
	note "probe: $err" if $ret;
	return $ret == 0 ? 1 : 0;
}
sub both_running
{
	return $node->poll_query_until('postgres',
		"SELECT count(*) = " . scalar(@flows) . " FROM sdp.flow_status WHERE state = 'running' AND partitions IS NOT NULL");
}

is(extversion(), $old_version, "the old binary creates the extension at $old_version");
is(owner_type(), $old_version eq '0.1' ? 'name' : 'regrole', "$old_version catalogs: owners' type");
is(has_new_symbol(), 0, "the server runs the old library (no $added{$new_version}{symbol})");

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
if ($with_sink)
{
	SdpTest::query($node, "SELECT sdp_create_sink('out', '" . $broker->bootstrap . "', 'sink-out')");
	SdpTest::query($node, <<'SQL');
SELECT sdp_create_flow('sink_flow', source => 'flights', sink => 'out', schema => 'seq bigint, icao24 text',
  options => '{"sink_key": "icao24"}');
SQL
}
ok(both_running(), 'old binary: all flows running');

sub position { my ($icao, $lat, $lon) = @_; return [ $icao, qq({"icao24": "$icao", "lat": $lat, "lon": $lon}), undef ] }
sub zone_in
{
	my @icao = @_;
	SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'zflights',
		messages => [ map { position($_, 10.5, 10.5) } @icao ]);
}

zone_in(qw(a1 a2 a3));
ok($node->poll_query_until('postgres', "SELECT aircraft_count = 3 FROM zone_alerts WHERE zone = 'Z'"),
	'old binary: zone counts 3');

# the binary swap, mid-stream: stop, install this tree into the copy, start
my $producer = SdpKafka::start_flightsim(
	bootstrap => $broker->bootstrap, topic => 'raw-flights',
	args => [ '--count', 40000, '--rate', 2000, '--seed', 5, '--aircraft', 200 ]);
ok($node->poll_query_until('postgres', 'SELECT count(*) > 3000 FROM events'), 'streaming on the old binary');
$node->stop;
ok(run_log([ 'make', '-s', '-C', $cwd, "PG_CONFIG=$pg_config", 'install' ]),
	"installed this tree ($new_version) into the copy");
is(compare("$pkglib/sdp_ext.so", "$cwd/sdp_ext.so"), 0, 'the copy has the new library');
$node->start;
ok($producer->running, 'the binary swap happened mid-stream');
is(has_new_symbol(), 1, 'the server runs the new library');
is(extversion(), $old_version, "new library on the $old_version catalogs");
ok(both_running(), "new library on the $old_version catalogs: both flows running");
zone_in(qw(a4 a1));
ok($node->poll_query_until('postgres', "SELECT aircraft_count = 4 FROM zone_alerts WHERE zone = 'Z'"),
	"new library on the $old_version catalogs: zone counts 4 (state restored, a1 only refreshed)");

# the update, with the flows running (and producer 1 most likely still
# streaming); producer 2 starts at once, the restart waits for its messages
SdpTest::query($node, 'ALTER EXTENSION sdp_ext UPDATE');
is(extversion(), $new_version, "ALTER EXTENSION sdp_ext UPDATE: $new_version");
is(owner_type(), 'regrole', 'owners are regroles');
is(SdpTest::query($node, "SELECT string_agg(name || '=' || offsets_stored, ',' ORDER BY name) FROM sdp.flows"),
	join(',', map { "$_=true" } @flows), 'the offsets of flows that have stored some are marked');
if (at_least($new_version, '0.3'))
{
	# 0.3: several workers; the stateless flow goes to 2, mid-stream, on the updated catalogs
	SdpTest::query($node, "SELECT sdp_set_flow_workers('events_flow', 2)");
	ok($node->poll_query_until('postgres',
			"SELECT count(*) = 2 FROM sdp.flow_workers WHERE flow = 'events_flow' AND state = 'running'"),
		'0.3: events_flow runs in 2 workers (sdp_set_flow_workers, sdp.flow_workers)');
}
if ($new_version eq '0.4')
{
	is(SdpTest::query($node, "SELECT sdp_partition_for_key('kafka', 2147483647)"), '1348980580',
		'0.4: sdp_partition_for_key (the Java client\'s murmur2 of "kafka", 0xd067cf64, made positive)');
	# 0.4: Kafka sinks; sdp_create_flow gained sink (dropped and created again): the flows keep their targets
	is(SdpTest::query($node,
			"SELECT string_agg(name || ':' || target || ':' || coalesce(sink, '-'), ',' ORDER BY name) FROM sdp.flows"),
		'events_flow:public.events:-,zone_flow:public.zone_alerts:-', '0.4: the flows keep their targets, no sink');
	SdpTest::query($node, "SELECT sdp_create_sink('zsink', '" . $broker->bootstrap . "', 'zflights-out')");
	is(SdpTest::query($node, "SELECT name || ':' || topic FROM sdp.sink_list"), 'zsink:zflights-out',
		'0.4: sdp_create_sink');
}
if (at_least($new_version, '0.5'))
{
	# 0.5: a sink flow's outbox rows say which worker wrote them (0.4's: worker 0); the sink flow goes to
	# 2 workers, each relaying its own rows; sdp.sink_relays shows them
	is(SdpTest::query($node, "SELECT count(*) FILTER (WHERE worker <> 0) FROM sdp.outbox"), '0',
		'0.5: the outbox rows written before the update are worker 0\'s');
	SdpTest::query($node, "SELECT sdp_set_flow_workers('sink_flow', 2)") if $with_sink;
	ok($node->poll_query_until('postgres',
			"SELECT count(*) = 2 FROM sdp.flow_workers WHERE flow = 'sink_flow' AND state = 'running'"),
		'0.5: sink_flow runs in 2 workers') if $with_sink;
	my $db = SdpTest::query($node, "SHOW sdp.database");
	my $id = SdpTest::query($node, "SELECT id FROM sdp.flows WHERE name = 'sink_flow'");
	is(SdpTest::query($node, "SELECT string_agg(flow || ':' || worker || ':' || transactional_id, ',' ORDER BY worker)"
			. " FROM sdp.sink_relays"),
		$with_sink ? "sink_flow:0:sdp-$db-flow-$id,sink_flow:1:sdp-$db-flow-$id-w1" : '',
		'0.5: sdp.sink_relays: one relay per worker, with its transactional.id');
}
if (at_least($new_version, '0.6'))
{
	# 0.6: the outbox has no foreign key (its rows are checked by construction); sdp_library_version
	is(SdpTest::query($node, "SELECT count(*) FROM pg_constraint WHERE conrelid = 'sdp.outbox'::regclass AND contype = 'f'"),
		'0', '0.6: sdp.outbox has no foreign key');
	is(SdpTest::query($node, "SELECT sdp_library_version() = extversion FROM pg_extension WHERE extname = 'sdp_ext'"),
		't', '0.6: sdp_library_version() is the version the catalogs were updated to');
}
if (at_least($new_version, '0.7'))
{
	# 0.7: outbox rows a sink flow's owner may skip; the flows declared before keep their owner's search_path
	is(SdpTest::query($node, "SELECT count(*) FROM pg_attribute WHERE attrelid = 'sdp.outbox'::regclass AND attname = 'skipped_by'"),
		'1', '0.7: sdp.outbox has skipped_by');
	my ($ret, $out, $err) = $node->psql('postgres', "SELECT sdp_skip_outbox_row('events_flow', 1)");
	like($err, qr/flow "events_flow" has no outbox row 1/, '0.7: sdp_skip_outbox_row refuses a row the outbox does not hold');
	is(SdpTest::query($node, "SELECT count(*) FROM sdp.flows WHERE options ? 'search_path'"), '0',
		'0.7: the flows declared before have no search_path of their own') if !at_least($old_version, '0.7');
}
if (at_least($new_version, '0.8'))
{
	# 0.8: a registry's credentials are masked in sdp.source_list; sdp_avro_to_json reads an Avro value
	SdpTest::query($node, q{SELECT sdp_create_source('masked', '127.0.0.1:9', 'avro-topic', '{"format": "avro", "schema.registry.url": "http://127.0.0.1:9", "basic.auth.user.info": "u:p"}')});
	is(SdpTest::query($node, "SELECT options->>'basic.auth.user.info' FROM sdp.source_list WHERE name = 'masked'"),
		'********', '0.8: sdp.source_list masks basic.auth.user.info');
	SdpTest::query($node, "SELECT sdp_drop_source('masked')");
	is(SdpTest::query($node, q{SELECT sdp_avro_to_json('{"type": "record", "name": "r", "fields": [{"name": "n", "type": "long"}]}', '\\x0000000007ae01')}),
		'{"n": 87}', '0.8: sdp_avro_to_json reads an Avro value');
}
if (at_least($new_version, '0.9'))
{
	# 0.9: Avro sinks: a registry's credentials are masked in sdp.sink_list; sdp.row_avro encodes a row
	SdpTest::query($node, q{SELECT sdp_create_sink('masked', '127.0.0.1:9', 'avro-out', '{"format": "avro", "schema.registry.url": "http://u:p@127.0.0.1:9", "basic.auth.user.info": "u:p"}')});
	is(SdpTest::query($node, "SELECT (options->>'basic.auth.user.info') || ' ' || (options->>'schema.registry.url') FROM sdp.sink_list WHERE name = 'masked'"),
		'******** http://********@127.0.0.1:9', '0.9: sdp.sink_list masks the registry\'s credentials');
	SdpTest::query($node, "SELECT sdp_drop_sink('masked')");
	is(SdpTest::query($node, q{SELECT sdp.row_avro(ROW(87::bigint), 7)}), '\x000000000702ae01', '0.9: sdp.row_avro encodes a row');
}
if (at_least($new_version, '0.10'))
{
	# 0.10: backfills (sdp.backfills, sdp.backfill_status); sdp_backfill refuses a running flow
	is(SdpTest::query($node, "SELECT count(*) FROM sdp.backfill_status"), '0', '0.10: sdp.backfill_status, empty');
	my ($ret, $out, $err) = $node->psql('postgres', "SELECT sdp_backfill('zone_flow', 'SELECT * FROM zones')");
	like($err, qr/flow "zone_flow" is running/, '0.10: sdp_backfill refuses a running flow');
}
if (at_least($new_version, '0.11'))
{
	# 0.11: sdp.flow_overview, sdp.flow_status's sink; sdp_alter_source on a source a running flow reads
	is(SdpTest::query($node, "SELECT count(*) FROM sdp.flow_overview"), scalar(@flows), '0.11: sdp.flow_overview, a row per flow');
	is(SdpTest::query($node, "SELECT count(sink) FROM sdp.flow_status"), $with_sink ? '1' : '0', '0.11: sdp.flow_status names the sink');
	SdpTest::query($node, q{SELECT sdp_alter_source('zflights', options => '{"client.id": "after-0.11"}')});
	is(SdpTest::query($node, "SELECT options->>'client.id' FROM sdp.sources WHERE name = 'zflights'"), 'after-0.11',
		'0.11: sdp_alter_source changed the source of a running flow (it restarts at a batch boundary)');
}
if (at_least($new_version, '0.12'))
{
	# 0.12: a processor written in PL/pgSQL, declared on the updated catalogs
	# beside the flows that ran across the update; it counts the zone's
	# aircraft as zone_flow does, through the restart below
	SdpTest::query($node, <<'SQL');
CREATE TABLE zone_proc (zone text PRIMARY KEY, aircraft_count bigint);
CREATE TYPE zone_member AS (zone text, icao24 text);
CREATE FUNCTION zone_proc_rows(zone text, rows zone_member[]) RETURNS SETOF zone_proc LANGUAGE plpgsql AS $$
DECLARE r zone_member;
BEGIN
  FOREACH r IN ARRAY rows LOOP
    PERFORM sdp_map_put('members', r.icao24, true);
  END LOOP;
  RETURN NEXT ROW(zone, sdp_map_count('members'))::zone_proc;
END $$;
SELECT sdp_create_flow('zone_proc_flow', source => 'zflights', target => 'zone_proc',
  schema    => 'icao24 text, lat float8, lon float8',
  transform => $$SELECT z.zone, i.icao24 FROM input i
                 JOIN zones z ON i.lat BETWEEN z.min_lat AND z.max_lat
                             AND i.lon BETWEEN z.min_lon AND z.max_lon$$,
  operator  => 'processor',
  options   => '{"key": "zone", "handle_rows": "zone_proc_rows", "checkpoint_interval": "200 ms",
                 "state": {"members": {"map": ["text", "boolean"]}}}');
SQL
	ok($node->poll_query_until('postgres', "SELECT aircraft_count = 4 FROM zone_proc WHERE zone = 'Z'"),
		'0.12: a processor flow declared after the update counts the zone\'s 4 aircraft (a1 to a4, from the earliest offsets)');
	@flows = sort(@flows, 'zone_proc_flow');
}
# (40 s of messages; the restart waits only for the first of them to be
# written: on a loaded machine the flow took 32 s to write 3,000 of them,
# and the producer had finished before the restart, CI of 2026-12-05)
my $producer2 = SdpKafka::start_flightsim(
	bootstrap => $broker->bootstrap, topic => 'raw-flights',
	args => [ '--count', 40000, '--rate', 1000, '--seed', 6, '--aircraft', 200, '--seq-start', 40000 ]);
zone_in(qw(a5));
ok($node->poll_query_until('postgres', "SELECT aircraft_count = 5 FROM zone_alerts WHERE zone = 'Z'"),
	"$new_version before the restart: zone counts 5");
ok($node->poll_query_until('postgres', 'SELECT count(*) > 0 FROM events WHERE seq >= 40000'),
	"streaming on $new_version");
$node->restart;
ok($producer2->running, 'the restart after the update happened mid-stream');
ok(both_running(), "$new_version after the restart: both flows running");
is(SdpTest::query($node, "SELECT count(*) FROM sdp.flow_workers WHERE flow = 'events_flow'"), '2',
	"$new_version after the restart: events_flow in 2 workers") if at_least($new_version, '0.3');
zone_in(qw(a6 a2));
my $report1 = $producer->finish;
is($report1->{delivered}, 40000, 'producer 1 delivered 40,000');
my $report2 = $producer2->finish;
is($report2->{delivered}, 40000, 'producer 2 delivered 40,000');

my %per_partition;
$per_partition{$_} += $report1->{partitions}{$_} for keys %{ $report1->{partitions} };
$per_partition{$_} += $report2->{partitions}{$_} for keys %{ $report2->{partitions} };
ok(SdpTest::wait_consumed($node, 'events_flow', 80000), 'events_flow consumed everything');
SdpTest::assert_exactly_once($node, 'events', \%per_partition, 'append across the binary upgrade');
ok($node->poll_query_until('postgres', "SELECT aircraft_count = 6 FROM zone_alerts WHERE zone = 'Z'"),
	'zone counts 6 after the swap, the update and the restarts');
ok(SdpTest::wait_consumed($node, 'zone_flow', 8), 'zone_flow consumed its 8 messages');
is(SdpTest::query($node, "SELECT aircraft_count FROM zone_alerts WHERE zone = 'Z'"), '6',
	'zone count stays 6 (no message counted twice)');
if (at_least($new_version, '0.12'))
{
	ok($node->poll_query_until('postgres', "SELECT aircraft_count = 6 FROM zone_proc WHERE zone = 'Z'"),
		'0.12: the processor counts 6 after the restart (its state restored)');
	is(SdpTest::query($node, "SELECT count(*) FROM sdp.dead_letters WHERE flow = 'zone_proc_flow'"), '0',
		'0.12: the processor set nothing aside');
}

is(SdpTest::query($node,
		"SELECT string_agg(flow || ':' || state || ':' || owner::text, ',' ORDER BY flow) FROM sdp.flow_status"),
	join(',', map { "$_:running:postgres" } @flows), 'all flows running, owned by postgres');
is(SdpTest::query($node,
		"SELECT bool_and(offsets_stored AND EXISTS (SELECT 1 FROM sdp.offsets o WHERE o.flow_id = f.id)) FROM sdp.flows f"),
	't', 'offsets_stored set, with offsets');
is(extversion(), $new_version, "extension at $new_version");

if ($with_sink)
{
	# the sink flow: every input once in the sink topic, for a read_committed consumer
	ok(SdpTest::wait_consumed($node, 'sink_flow', 80000), 'sink_flow consumed everything');
	ok($node->poll_query_until('postgres', 'SELECT count(*) = 0 FROM sdp.outbox'), 'the outbox is empty');
	my $json = JSON::PP->new;
	my %seq;
	$seq{ eval { $json->decode($_->{payload})->{seq} } // 'bad' }++
	  for SdpKafka::kcat_consume(bootstrap => $broker->bootstrap, topic => 'sink-out',
		properties => { 'isolation.level' => 'read_committed' });
	is(join(',', scalar(keys %seq), scalar(grep { $_ != 1 } values %seq), scalar(grep { /^\d+$/ && $_ < 80000 } keys %seq)),
		'80000,0,80000', 'sink_flow: every input once in the sink topic across the swap, the update and the restarts');
	# no broker went away here: a read-back that timed out waited for a partition's end that another
	# relay of the flow kept moving (it did, before the tail window ended at the first fetch's mark)
	unlike(slurp_file($node->logfile), qr/reading back partition \d+: timed out/, 'no read-back timed out');
}

done_testing();
