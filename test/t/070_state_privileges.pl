# sdp_flow_state(flow) shows a flow's data (its keys and their values): only
# to the flow's owner, a member of the owner's role, a member of
# pg_read_all_stats and superusers.  Any other role is refused with 42501,
# for a stateful or a stateless flow, and learns nothing of the state.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'zflights' => 1 });
my $node = SdpTest::new_node('stateprivs');
my $boot = $broker->bootstrap;

SdpTest::query($node, <<"SQL");
CREATE ROLE alice LOGIN;
CREATE ROLE alice_friend LOGIN IN ROLE alice;
CREATE ROLE bob LOGIN;
CREATE ROLE watcher LOGIN IN ROLE pg_read_all_stats;
CREATE TABLE zone_counts (zone text PRIMARY KEY, active_count bigint, over_capacity boolean, updated_at timestamptz);
CREATE TABLE zone_log (zone text);
ALTER TABLE zone_counts OWNER TO alice;
ALTER TABLE zone_log OWNER TO alice;
SET ROLE alice;
SELECT sdp_create_source('alice_src', '$boot', 'zflights', '@{[ SdpTest::source_options() ]}');
SELECT sdp_create_flow('alice_flow', 'alice_src', 'zone_counts', 'zone text, icao24 text',
  operator => 'active_count',
  options => '{"key": "zone", "member": "icao24", "capacity": 10, "ttl": "1 hour"}');
SELECT sdp_create_flow('alice_plain', 'alice_src', 'zone_log', 'zone text');
RESET ROLE;
SQL
ok(SdpTest::wait_for($node, "SELECT count(*) = 2 FROM sdp.flow_status WHERE state = 'running' AND partitions IS NOT NULL"),
	'both flows running');

SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'zflights', messages => [
	map { [ $_->[1], qq({"zone": "$_->[0]", "icao24": "$_->[1]"}), 0 ] }
	  ([ 'Q', 'x1' ], [ 'Q', 'x2' ], [ 'Q', 'x3' ], [ 'R', 'y1' ]) ]);
ok(SdpTest::wait_consumed($node, 'alice_flow', 4), 'alice_flow consumed the 4 messages');

# who is in which zone, as the state's map shows it
my $members_sql = "SELECT string_agg(s.key || ':' || m, ',' ORDER BY s.key, m) "
  . "FROM sdp_flow_state('alice_flow') s, jsonb_object_keys(s.value) m WHERE jsonb_typeof(s.value) = 'object'";
my $states_sql = "SELECT count(*) FROM sdp_flow_state('alice_flow')";
is(SdpTest::query($node, $members_sql), 'Q:x1,Q:x2,Q:x3,R:y1', 'a superuser reads the state');
my $nstates = SdpTest::query($node, $states_sql);
is($nstates, '8', "the state has 8 rows (4 per zone)");

for my $role (qw(alice alice_friend watcher))
{
	is(SdpTest::query($node, "SET ROLE $role; $members_sql"), 'Q:x1,Q:x2,Q:x3,R:y1', "$role reads the state");
	is(SdpTest::query($node, "SET ROLE $role; $states_sql"), $nstates, "$role reads all $nstates rows");
	is(SdpTest::query($node, "SET ROLE $role; SELECT count(*) FROM sdp_flow_state('alice_plain')"), '0',
		"$role: a stateless flow has no state");
}

# bob has no privilege on the flows or their targets
for my $flow (qw(alice_flow alice_plain))
{
	my ($ret, $out, $err) = $node->psql('postgres', "SET ROLE bob; SELECT * FROM sdp_flow_state('$flow')",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	isnt($ret, 0, "bob: sdp_flow_state('$flow') fails");
	is($out, '', 'and shows nothing');
	like($err, qr/ERROR:  42501: permission denied to read the state of flow "$flow"/, 'with 42501');
	like($err, qr/DETAIL:  Flow "$flow" belongs to role "alice"/, 'the detail names the owner');
	like($err, qr/HINT:  Read it as a member of role "alice", or as a member of pg_read_all_stats\./, 'the hint says who may');
}

# without pg_read_all_stats, watcher has no way in
SdpTest::query($node, 'REVOKE pg_read_all_stats FROM watcher');
my ($ret, $out, $err) = $node->psql('postgres', "SET ROLE watcher; SELECT * FROM sdp_flow_state('alice_flow')");
like($err, qr/permission denied to read the state of flow "alice_flow"/, 'watcher without pg_read_all_stats is refused');

# an undeclared flow is an error for everyone
($ret, $out, $err) = $node->psql('postgres', "SET ROLE bob; SELECT * FROM sdp_flow_state('nope')",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/ERROR:  42704: flow "nope" does not exist/, 'an undeclared flow: 42704');

# a caller's search_path cannot make the lookup find another flow
SdpTest::query($node, <<'SQL');
CREATE SCHEMA bobs AUTHORIZATION bob;
SET ROLE bob;
CREATE FUNCTION bobs.texteq_always(text, text) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true';
CREATE OPERATOR bobs.= (LEFTARG = text, RIGHTARG = text, FUNCTION = bobs.texteq_always);
SQL
($ret, $out, $err) = $node->psql('postgres',
	"SET ROLE bob; SET search_path = bobs, pg_catalog, public; SELECT * FROM sdp_flow_state('nope')");
like($err, qr/flow "nope" does not exist/, 'an operator of the caller\'s is not used to look the flow up');

done_testing();
