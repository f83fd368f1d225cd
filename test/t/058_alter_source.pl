# sdp_alter_source: a source's brokers and client properties changed
# without dropping its flows.  A flow declared against a wrong address waits
# (its broker error in sdp.flow_status); the source altered to the real
# brokers, it reads from the start, keeping nothing of the wait.  Then,
# mid-stream, a property changed and one removed (a key set to JSON null):
# the flows take the new declaration at a batch boundary (the launcher
# restarts their workers from their committed offsets), so every
# (partition, offset) is written once, by both flows.  The refusals are the
# declaration's: an unknown source, a non-owner, a property the owner may
# not set, options that are not an object, an empty broker list.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;
use IPC::Run ();

my $broker = SdpKafka::start_broker(topics => { 'raw-flights' => 4 });
my $node = SdpTest::new_node('alter_source');
my $options = SdpTest::source_options('{"starting_offsets": "earliest", "client.id": "before"}');
SdpTest::query($node, <<"SQL");
SELECT sdp_create_source('flights', '127.0.0.1:9', 'raw-flights', '$options');
CREATE TABLE events (seq bigint, icao24 text, kafka_partition int, kafka_offset bigint);
CREATE TABLE events2 (seq bigint, icao24 text, kafka_partition int, kafka_offset bigint);
SELECT sdp_create_flow('ev', 'flights', 'events', 'seq bigint, icao24 text');
SELECT sdp_create_flow('ev2', 'flights', 'events2', 'seq bigint, icao24 text', options => '{"workers": 2}');
SQL

my $total = 30000;
my $producer = SdpKafka::start_flightsim(bootstrap => $broker->bootstrap, topic => 'raw-flights',
	args => [ '--count', $total, '--rate', 3000, '--linger-ms', 20, '--seed', 58, '--aircraft', 300 ]);

ok(SdpTest::wait_for($node, "SELECT count(*) = 2 FROM sdp.flow_status WHERE broker_ok IS FALSE AND broker_error IS NOT NULL"),
	'both flows wait for the wrong address, the broker error shown');
is(SdpTest::query($node, "SELECT flow, writes_to, problem IS NOT NULL FROM sdp.flow_overview ORDER BY flow"),
	"ev|public.events|t\nev2|public.events2|t", 'sdp.flow_overview: where each writes, and the problem');
is(SdpTest::query($node, 'SELECT count(*) FROM events'), '0', 'nothing written');

my $boot = $broker->bootstrap;
SdpTest::query($node, "SELECT sdp_alter_source('flights', '$boot')");
pass('the source altered to the real brokers');
ok(SdpTest::wait_for($node, 'SELECT count(*) > 6000 FROM events2'), 'both flows stream');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.flow_status WHERE broker_error IS NOT NULL OR broker_error_at IS NOT NULL"), '0',
	'the broker error is gone once the brokers answer');

# mid-stream: one property changed, one removed
SdpTest::query($node, q{SELECT sdp_alter_source('flights', options => '{"client.id": "after", "fetch.wait.max.ms": null, "fetch.min.bytes": "1"}')});
pass('altered mid-stream: client.id changed, fetch.wait.max.ms removed, fetch.min.bytes added');
is(SdpTest::query($node, "SELECT bootstrap_servers, options->>'client.id', options ? 'fetch.wait.max.ms', options->>'fetch.min.bytes', options->>'starting_offsets' FROM sdp.sources WHERE name = 'flights'"),
	"$boot|after|f|1|earliest", 'the options merged: the rest kept');

my $report = $producer->finish;
is($report->{delivered}, $total, "producer delivered $total");
ok(SdpTest::wait_consumed($node, 'ev', $total), 'ev consumed everything');
ok(SdpTest::wait_consumed($node, 'ev2', $total), 'ev2 consumed everything');
SdpTest::assert_exactly_once($node, 'events', $report->{partitions}, 'ev, across both changes');
SdpTest::assert_exactly_once($node, 'events2', $report->{partitions}, 'ev2, across both changes');
is(SdpTest::query($node, "SELECT sum(rows_dead_lettered), count(*) FILTER (WHERE problem IS NOT NULL) FROM sdp.flow_overview"), '0|0',
	'no dead letter, no problem left');

# refusals
SdpTest::query($node, <<'SQL');
CREATE ROLE stranger LOGIN;
CREATE FUNCTION refused(stmt text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE st text; msg text;
BEGIN
  EXECUTE stmt;
  RETURN 'accepted';
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
  RETURN st || ': ' || msg;
END $$;
SQL
is(SdpTest::query($node, q{SELECT refused($$SELECT sdp_alter_source('nope', '127.0.0.1:9')$$)}),
	'42704: source "nope" does not exist', 'an unknown source');
is(SdpTest::query($node, q{SELECT refused($$SELECT sdp_alter_source('flights', '')$$)}),
	'22023: bootstrap_servers must not be empty', 'an empty broker list');
is(SdpTest::query($node, q{SELECT refused($$SELECT sdp_alter_source('flights', options => '[1]')$$)}),
	'22023: options of source "flights" must be a JSON object', 'options that are not an object');
is(SdpTest::query($node, q{SELECT refused($$SELECT sdp_alter_source('flights', options => '{"bootstrap.servers": "elsewhere:9092"}')$$)}) =~ /^22023: /
	? 'refused' : 'accepted', 'refused', 'bootstrap.servers in the options, as sdp_create_source refuses it');
is($node->psql('postgres', "SET ROLE stranger; SELECT sdp_alter_source('flights', '127.0.0.1:9')", stderr => \my $err), 3,
	'a role that does not own the source is refused');
like($err, qr/must be owner of source "flights"/, 'with the reason');
is(SdpTest::query($node, "SELECT bootstrap_servers FROM sdp.sources WHERE name = 'flights'"), $boot,
	'and nothing changed');

# altered while another session drops it: the alter waits for the drop's
# lock, then finds no row (the server does not crash on a row that is gone)
SdpTest::query($node, "SELECT sdp_create_source('doomed', '127.0.0.1:9', 'nowhere')");
my ($in, $out, $errout) = ('', '', '');
my $dropper = IPC::Run::start(
	[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres') ],
	'<', \$in, '>', \$out, '2>', \$errout);
$in .= "BEGIN; SELECT sdp_drop_source('doomed'); SELECT pg_sleep(2); COMMIT;\n";
$dropper->pump_nb;
ok($node->poll_query_until('postgres', "SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE '%pg_sleep(2)%' AND pid <> pg_backend_pid()"),
	'another session has dropped the source, not yet committed');
my ($ret, $res, $alter_err) = $node->psql('postgres', q{SELECT sdp_alter_source('doomed', options => '{"client.id": "late"}')});
$in .= "\\q\n";
$dropper->finish;
like($alter_err, qr/source "doomed" does not exist/, 'the alter, waiting for the drop, says the source is gone');
is(SdpTest::query($node, 'SELECT count(*) FROM sdp.sources WHERE name = \'doomed\''), '0', 'and the server runs on: the drop committed');
is(refused_q($node, q{SELECT sdp_alter_source('flights')}), '22023: sdp_alter_source changes nothing', 'an alter that changes nothing');

done_testing();

sub refused_q
{
	my ($n, $sql) = @_;
	my $q = $sql =~ s/'/''/gr;
	return SdpTest::query($n, "SELECT refused('$q')");
}
