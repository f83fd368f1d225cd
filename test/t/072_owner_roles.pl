# Owners are kept by OID (issue 11, item 5).  DROP ROLE of a role that owns
# a source or a flow is refused with PostgreSQL's own message (2BP01), in
# the flows' database and in any other; REASSIGN OWNED gives the flow, its
# source and its dead letters to another role, whose worker goes on from
# the flow's offsets; a new role under a dropped owner's name inherits
# nothing; DROP OWNED drops the flows and sources, and refuses to drop a
# source another role's flow reads from.  On a 0.1 catalog (owners by
# name), a flow whose owner is gone says so, and the update to 0.2 names it.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;
use experimental qw(signatures);

my $broker = SdpKafka::start_broker(topics => { 'raw-flights' => 2, 'other-flights' => 1 });
my $node = SdpTest::new_node('ownerroles');
my $boot = $broker->bootstrap;

sub psql_err ($db, $sql)
{
	my ($ret, $out, $err) = $node->psql($db, $sql, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	return ($ret, $err);
}

# every message once: as a row or as a dead letter, in offset order per partition
sub assert_every_message_once ($total, $per_partition, $label)
{
	my $all = "SELECT kafka_partition, kafka_offset FROM flight_rows "
	  . "UNION ALL SELECT kafka_partition, kafka_offset FROM sdp.dead_letters WHERE flow = 'carol_flow'";
	is(SdpTest::query($node, "SELECT count(*), count(DISTINCT (kafka_partition, kafka_offset)) FROM ($all) u"),
		"$total|$total", "$label: $total messages, each once");
	my %got = map { split /\|/ } split /\n/, SdpTest::query($node,
		"SELECT kafka_partition, count(*) FROM ($all) u GROUP BY 1 HAVING min(kafka_offset) = 0 AND max(kafka_offset) = count(*) - 1");
	is_deeply(\%got, $per_partition, "$label: every partition's offsets are 0..n-1");
}

SdpTest::query($node, <<"SQL");
CREATE ROLE carol LOGIN;
CREATE ROLE dave LOGIN;
CREATE TABLE flight_rows (seq bigint, icao24 text, lat float8, baro_alt float8, kafka_partition int, kafka_offset bigint);
ALTER TABLE flight_rows OWNER TO carol;
SET ROLE carol;
SELECT sdp_create_source('carol_src', '$boot', 'raw-flights', '@{[ SdpTest::source_options(q({"sasl.password": "hunter2"})) ]}');
SELECT sdp_create_flow('carol_flow', 'carol_src', 'flight_rows', 'seq bigint, icao24 text, lat float8, baro_alt float8');
RESET ROLE;
SQL
is(SdpTest::query($node, "SELECT pg_typeof(owner), owner FROM sdp.flows"), 'regrole|carol', 'the owner is kept as a regrole');

my $r1 = SdpKafka::run_flightsim(bootstrap => $boot, topic => 'raw-flights',
	args => [ '--count', 2000, '--rate', 0, '--seed', 5, '--malformed', '0.05', '--malformed-kinds', 'truncated,type' ]);
ok(SdpTest::wait_consumed($node, 'carol_flow', 2000), 'carol_flow consumed 2000 messages');
my $bad1 = $r1->{malformed};
ok($bad1 > 0, "$bad1 of them malformed");
is(SdpTest::query($node, "SET ROLE carol; SELECT count(*) FROM sdp.dead_letters"), $bad1, "carol sees her $bad1 dead letters");

# DROP ROLE of the owner: refused, here and from another database
my ($ret, $err) = psql_err('postgres', 'DROP ROLE carol');
isnt($ret, 0, 'DROP ROLE carol fails');
like($err, qr/ERROR:  2BP01: role "carol" cannot be dropped because some objects depend on it\nDETAIL:  owner of flow carol_flow\nowner of source carol_src\nHINT:  /,
	'with 2BP01, PostgreSQL\'s message, and the flow and the source in the detail');
SdpTest::query($node, 'CREATE DATABASE other');
($ret, $err) = psql_err('other', 'DROP ROLE carol');
isnt($ret, 0, 'DROP ROLE carol fails in another database');
like($err, qr/ERROR:  2BP01: role "carol" cannot be dropped because some objects depend on it\nDETAIL:  2 objects in database postgres\n/,
	'with 2BP01 and the count of objects in the flows\' database');
($ret, $err) = psql_err('other', 'CREATE ROLE nobody_owns; DROP ROLE nobody_owns');
is($ret, 0, 'a role that owns nothing is dropped from another database');
($ret, $err) = psql_err('postgres', 'CREATE ROLE nobody_here; DROP ROLE nobody_here');
is($ret, 0, 'and from the flows\' database');

# nothing dangles: the catalogs read as before, the flow runs on
is(SdpTest::query($node, "SET ROLE carol; SELECT count(*) FROM sdp.dead_letters"), $bad1, 'carol still reads her dead letters');
is(SdpTest::query($node, "SET ROLE dave; SELECT count(*) FROM sdp.dead_letters"), '0', 'dave sees none');
is(SdpTest::query($node, "SET ROLE carol; SELECT name, options->>'sasl.password', owner FROM sdp.source_list"),
	'carol_src|********|carol', 'carol reads sdp.source_list');
is(SdpTest::query($node, "SET ROLE dave; SELECT count(*) FROM sdp.source_list"), '0', 'dave sees no source');
is(SdpTest::query($node, "SELECT state, owner FROM sdp.flow_status"), 'running|carol', 'carol_flow runs as carol');

# REASSIGN OWNED while messages stream: dave owns the flow, its source, its
# dead letters (and the table); the worker restarts as dave from the offsets
my $pid_before = SdpTest::query($node, "SELECT pid FROM sdp.flow_status WHERE flow = 'carol_flow'");
my $sim = SdpKafka::start_flightsim(bootstrap => $boot, topic => 'raw-flights',
	args => [ '--count', 4000, '--rate', 2000, '--seq-start', 2000, '--seed', 9, '--malformed', '0.05', '--malformed-kinds', 'truncated,type' ]);
ok(SdpTest::wait_consumed($node, 'carol_flow', 2500), 'carol_flow consumes the stream');
SdpTest::query($node, 'REASSIGN OWNED BY carol TO dave');
is(SdpTest::query($node, "SELECT (SELECT owner FROM sdp.flows) || '|' || (SELECT owner FROM sdp.sources) || '|' || "
	  . "(SELECT string_agg(DISTINCT owner::text, ',') FROM sdp.dead_letters)"),
	'dave|dave|dave', 'the flow, the source and the dead letters belong to dave');
ok(SdpTest::wait_for($node, "SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'sdp flow carol_flow' AND usename = 'dave' AND pid <> $pid_before"),
	'the flow\'s worker restarted as dave');
is(SdpTest::query($node, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'sdp flow carol_flow' AND usename <> 'dave'"),
	'0', 'no worker runs as carol any more');
my $r2 = $sim->finish;
my $bad = $bad1 + $r2->{malformed};
ok(SdpTest::wait_consumed($node, 'carol_flow', 6000), 'dave\'s flow consumed the rest from where carol\'s stopped');
ok(SdpTest::wait_for($node, "SELECT state = 'running' FROM sdp.flow_status WHERE flow = 'carol_flow'"), 'running');
my %parts = map { $_ => $r1->{partitions}{$_} + $r2->{partitions}{$_} } keys %{ $r1->{partitions} };
assert_every_message_once(6000, \%parts, 'across REASSIGN OWNED');
is(SdpTest::query($node, 'SELECT count(*) FROM flight_rows'), 6000 - $bad, (6000 - $bad) . ' rows written');
is(SdpTest::query($node, "SET ROLE dave; SELECT count(*) FROM sdp.dead_letters"), $bad, "dave sees all $bad dead letters");
is(SdpTest::query($node, "SET ROLE carol; SELECT count(*) FROM sdp.dead_letters"), '0', 'carol sees none');
is(SdpTest::query($node, "SET ROLE dave; SELECT name, owner FROM sdp.source_list"), 'carol_src|dave', 'dave reads the source');
is(SdpTest::query($node, "SET ROLE carol; SELECT count(*) FROM sdp.source_list"), '0', 'carol no longer does');

# carol owns nothing now: she goes; a new carol inherits nothing
($ret, $err) = psql_err('postgres', 'DROP ROLE carol');
is($ret, 0, 'DROP ROLE carol succeeds once she owns nothing');
SdpTest::query($node, 'CREATE ROLE carol LOGIN');
is(SdpTest::query($node, "SET ROLE carol; SELECT (SELECT count(*) FROM sdp.dead_letters) || '|' || (SELECT count(*) FROM sdp.source_list)"),
	'0|0', 'a new role named carol sees no dead letter and no source');
($ret, $err) = psql_err('postgres', "SET ROLE carol; SELECT sdp_stop_flow('carol_flow')");
like($err, qr/ERROR:  42501: must be owner of flow "carol_flow"\nDETAIL:  Flow "carol_flow" belongs to role "dave"\./,
	'and cannot act on the flow');

# DROP OWNED of a source another role's flow reads from: refused, nothing dropped
SdpTest::query($node, <<"SQL");
CREATE ROLE erin LOGIN;
CREATE ROLE frank LOGIN IN ROLE erin;
CREATE TABLE frank_rows (seq bigint);
ALTER TABLE frank_rows OWNER TO frank;
SET ROLE erin;
SELECT sdp_create_source('erin_src', '$boot', 'other-flights', '@{[ SdpTest::source_options() ]}');
SET ROLE frank;
SELECT sdp_create_flow('frank_flow', 'erin_src', 'frank_rows', 'seq bigint');
RESET ROLE;
SQL
($ret, $err) = psql_err('postgres', 'DROP OWNED BY erin');
isnt($ret, 0, 'DROP OWNED BY erin fails');
like($err, qr/ERROR:  2BP01: cannot drop source "erin_src" because flows of other roles read from it\nDETAIL:  Flow "frank_flow" of role "frank" reads from source "erin_src"\./,
	'because frank\'s flow reads from erin\'s source');
is(SdpTest::query($node, "SELECT (SELECT count(*) FROM sdp.sources WHERE name = 'erin_src') || '|' || (SELECT count(*) FROM sdp.flows WHERE name = 'frank_flow')"),
	'1|1', 'nothing was dropped');
($ret, $err) = psql_err('postgres', 'DROP OWNED BY erin, frank');
is($ret, 0, 'DROP OWNED BY erin, frank drops both');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.flows WHERE name = 'frank_flow'"), '0', 'frank_flow is gone');

# DROP OWNED BY dave: the flow (offsets, worker) and the source go with the table
my $flow_id = SdpTest::query($node, "SELECT id FROM sdp.flows WHERE name = 'carol_flow'");
($ret, $err) = psql_err('postgres', 'DROP OWNED BY dave');
is($ret, 0, 'DROP OWNED BY dave succeeds');
is(SdpTest::query($node, "SELECT (SELECT count(*) FROM sdp.flows) || '|' || (SELECT count(*) FROM sdp.sources) || '|' || "
	  . "(SELECT count(*) FROM sdp.offsets WHERE flow_id = $flow_id) || '|' || (SELECT count(*) FROM sdp.dead_letters) || '|' || "
	  . "(SELECT count(*) FROM pg_class WHERE relname = 'flight_rows')"),
	'0|0|0|0|0', 'no flow, source, offset or dead letter is left, and dave\'s table is dropped');
ok(SdpTest::wait_for($node, "SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'sdp flow'"),
	'the workers stopped');
($ret, $err) = psql_err('other', 'DROP ROLE dave');
is($ret, 0, 'DROP ROLE dave succeeds, from another database too');

# A 0.1 catalog keeps owners by name: a flow whose role is gone (dropped
# before this version) says why it does not run, and the update to 0.2
# stops and names it.
SdpTest::query($node, <<"SQL");
DROP EXTENSION sdp_ext;
CREATE EXTENSION sdp_ext VERSION '0.1';
CREATE ROLE gina LOGIN;
CREATE TABLE gina_rows (seq bigint);
ALTER TABLE gina_rows OWNER TO gina;
SET ROLE gina;
SELECT sdp_create_source('gina_src', '$boot', 'other-flights', '@{[ SdpTest::source_options() ]}');
SELECT sdp_create_flow('gina_flow', 'gina_src', 'gina_rows', 'seq bigint');
RESET ROLE;
SQL
ok(SdpTest::wait_for($node, "SELECT state = 'running' FROM sdp.flow_status WHERE flow = 'gina_flow'"), '0.1: gina_flow runs');
($ret, $err) = psql_err('postgres', 'DROP ROLE gina');
like($err, qr/ERROR:  2BP01: role "gina" cannot be dropped because some objects depend on it\nDETAIL:  owner of flow gina_flow\nowner of source gina_src\n/,
	'0.1: DROP ROLE of an owner is refused too');
SdpTest::query($node, "UPDATE sdp.flows SET owner = 'ghost'");
ok(SdpTest::wait_for($node, "SELECT state = 'restarting' AND last_error LIKE 'the flow''s owner \"ghost\" does not exist%' FROM sdp.flow_status"),
	'0.1: a flow whose owner is gone is not run, and says why');
is(SdpTest::query($node, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'sdp flow'"), '0', 'no worker runs it');
($ret, $err) = psql_err('postgres', "ALTER EXTENSION sdp_ext UPDATE TO '0.2'");
like($err, qr/ERROR:  42704: cannot update sdp_ext to 0.2: some sources, flows or dead letters belong to roles that no longer exist\nDETAIL:  Without an owner: flow "gina_flow" \(role "ghost"\)\.\nHINT:  Create those roles again/,
	'the update to 0.2 stops and names the flow without an owner');
is(SdpTest::query($node, "SELECT extversion FROM pg_extension WHERE extname = 'sdp_ext'"), '0.1', 'still 0.1');
SdpTest::query($node, "SELECT sdp_drop_flow('gina_flow')");
SdpTest::query($node, "ALTER EXTENSION sdp_ext UPDATE TO '0.2'");
is(SdpTest::query($node, "SELECT extversion, (SELECT pg_typeof(owner)::text || '|' || owner FROM sdp.sources) FROM pg_extension WHERE extname = 'sdp_ext'"),
	'0.2|regrole|gina', 'then it updates, and the source\'s owner is the regrole gina');

done_testing();
