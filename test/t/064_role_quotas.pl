# Quotas between roles (issue 46, item 3).  A role other than a superuser
# runs at most sdp.max_workers_per_role flow workers at once (default: half
# of sdp.max_flows, rounded up) and owns at most sdp.max_objects_per_role
# sources, sinks and flows; its flows past the first bound wait, with the
# reason, while another role's flow runs; a declaration past the second is
# refused (53400).  A flow asking for more workers than its topic has
# partitions runs one per partition.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use PostgreSQL::Test::Utils;
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'many' => 4, 'one' => 1 });
my $boot = $broker->bootstrap;
my $node = SdpTest::new_node('quotas', 'sdp.max_flows' => 6);

is(SdpTest::query($node, 'SHOW sdp.max_workers_per_role'), '-1', 'sdp.max_workers_per_role: -1 by default (half of sdp.max_flows)');
is(SdpTest::query($node, 'SHOW sdp.max_objects_per_role'), '100', 'sdp.max_objects_per_role: 100 by default');

# a role with nothing but LOGIN: its flows take at most 3 of the 6 slots
SdpTest::query($node, <<"SQL");
CREATE ROLE lucy LOGIN;
GRANT CREATE ON SCHEMA public TO lucy;
SET ROLE lucy;
SELECT sdp_create_source('lucy_src', '$boot', 'many', '@{[ SdpTest::source_options() ]}');
CREATE TABLE l1 (seq bigint);
CREATE TABLE l2 (seq bigint);
CREATE TABLE l3 (seq bigint);
SELECT sdp_create_flow('lucy1', 'lucy_src', 'l1', 'seq bigint', options => '{"mode": "append", "workers": 2}');
SELECT sdp_create_flow('lucy2', 'lucy_src', 'l2', 'seq bigint', options => '{"mode": "append"}');
SELECT sdp_create_flow('lucy3', 'lucy_src', 'l3', 'seq bigint', options => '{"mode": "append"}');
RESET ROLE;
CREATE TABLE s1 (seq bigint);
SQL
SdpTest::create_source($node, 'admin_src', $broker, 'many');
SdpTest::query($node, q{SELECT sdp_create_flow('admin1', 'admin_src', 's1', 'seq bigint', options => '{"mode": "append", "workers": 2}')});

SdpKafka::kcat_produce(bootstrap => $boot, topic => 'many',
	messages => [ map { [ "k$_", qq({"seq": $_}), $_ % 4 ] } 1 .. 100 ]);
ok(SdpTest::wait_for($node, 'SELECT (SELECT count(*) FROM l1) = 100 AND (SELECT count(*) FROM l2) = 100 AND (SELECT count(*) FROM s1) = 100'),
	"lucy's first two flows (3 workers) and the superuser's flow run");
is(SdpTest::query($node, "SELECT state || '|' || last_error FROM sdp.flow_status WHERE flow = 'lucy3'"),
	'waiting|its 1 worker would take role "lucy" past sdp.max_workers_per_role (3 flow workers at once): the flow starts when the role\'s other flows leave room',
	"lucy's third flow waits, and says why");
is(SdpTest::query($node, 'SELECT count(*) FROM sdp.flow_workers'), '5', 'five workers run: one slot is free, and not lucy\'s');
is(SdpTest::query($node, 'SELECT count(*) FROM l3'), '0', 'lucy3 wrote nothing');

# more workers than the role may ever run: refused at the declaration
my ($ret, $out, $err) = $node->psql('postgres', "SET ROLE lucy; CREATE TABLE l4 (seq bigint);
SELECT sdp_create_flow('lucy4', 'lucy_src', 'l4', 'seq bigint', options => '{\"mode\": \"append\", \"workers\": 4}')",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/53400: a flow with 4 workers needs 4 flow workers at once, but role "lucy" may run at most 3 \(sdp.max_workers_per_role\)/,
	'a flow with more workers than the role\'s bound: refused (53400)');
($ret, $out, $err) = $node->psql('postgres', "SET ROLE lucy; SELECT sdp_alter_flow('lucy2', options => '{\"mode\": \"append\", \"workers\": 4}')",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/53400: a flow with 4 workers needs 4 flow workers at once/, 'and by sdp_alter_flow');

# one of lucy's flows stops: her third starts
SdpTest::query($node, "SET ROLE lucy; SELECT sdp_stop_flow('lucy2')");
ok(SdpTest::wait_for($node, 'SELECT count(*) = 100 FROM l3'), 'lucy2 stopped: lucy3 runs and reads everything');
is(SdpTest::query($node, "SELECT string_agg(flow || ' ' || state, ', ' ORDER BY flow) FROM sdp.flow_status"),
	'admin1 running, lucy1 running, lucy2 stopped, lucy3 running', 'the status says so');

# a superuser raises the bound for every role: lucy2 runs again beside the others
SdpTest::query($node, "ALTER SYSTEM SET sdp.max_workers_per_role = 4; SELECT pg_reload_conf(); SET ROLE lucy; SELECT sdp_start_flow('lucy2')");
ok(SdpTest::wait_for($node, "SELECT count(*) = 4 FROM sdp.flow_status WHERE state = 'running'"), 'bound raised to 4: every flow runs');

# declarations: at most sdp.max_objects_per_role sources, sinks and flows (lucy has 4)
SdpTest::query($node, "ALTER SYSTEM SET sdp.max_objects_per_role = 5; SELECT pg_reload_conf()");
ok(SdpTest::wait_for($node, "SELECT current_setting('sdp.max_objects_per_role') = '5'"), 'sdp.max_objects_per_role = 5');
# the fifth declared in a transaction still open, the sixth in another
# session meanwhile (repeatable read: its snapshot older than the fifth's
# commit): it waits for the fifth's transaction, then counts it
my ($in1, $out1, $err1, $in2, $out2, $err2) = ('', '', '', '', '', '');
my $psql = [ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-v', 'VERBOSITY=verbose', '-d', $node->connstr('postgres') ];
my $fifth = IPC::Run::start($psql, '<', \$in1, '>', \$out1, '2>', \$err1);
$in1 .= "BEGIN; SET ROLE lucy; SELECT sdp_create_sink('lucy_sink', '$boot', 'out');\n";
$fifth->pump_nb;
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE state = 'idle in transaction' AND query LIKE '%lucy_sink%'"),
	'a fifth object (a sink) declared in a transaction not yet committed');
my $sixth = IPC::Run::start($psql, '<', \$in2, '>', \$out2, '2>', \$err2);
$in2 .= "SET default_transaction_isolation = 'repeatable read'; SET ROLE lucy; SELECT sdp_create_source('lucy_src2', '$boot', 'one');\n\\q\n";
$sixth->pump_nb;
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%lucy_src2%'"),
	'a sixth, declared meanwhile in another session, waits for it');
$in1 .= "COMMIT;\n\\q\n";
$fifth->finish;
$sixth->finish;
is($err1, '', 'the fifth: declared');
like($err2, qr/53400: role "lucy" owns 5 sources, sinks and flows, and may own at most 5: no new source/,
	'the sixth: refused once the fifth committed (53400)');
is(SdpTest::query($node, "SELECT (SELECT count(*) FROM sdp.sinks WHERE name = 'lucy_sink') || ' ' || (SELECT count(*) FROM sdp.sources WHERE name = 'lucy_src2')"),
	'1 0', 'the fifth is there, the sixth is not');
like($err2, qr/HINT:  Drop one the role no longer needs, or have a superuser raise sdp.max_objects_per_role/, 'with a hint');
($ret, $out, $err) = $node->psql('postgres', "SET ROLE lucy; SELECT sdp_create_flow('lucy5', 'lucy_src', 'l3', 'seq bigint', options => '{\"mode\": \"append\"}')",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/53400: role "lucy" owns 5 sources, sinks and flows, and may own at most 5: no new flow/, 'a flow too');
($ret, $out, $err) = $node->psql('postgres', "SELECT sdp_create_source('admin_src2', '$boot', 'one')");
is($ret, 0, 'a superuser is not bounded');

# a flow with more workers than its topic has partitions: one worker per partition
my $log_offset = -s $node->logfile;
SdpTest::create_source($node, 'one_src', $broker, 'one');
SdpTest::query($node, q{CREATE TABLE o1 (seq bigint);
SELECT sdp_stop_flow('admin1');
SET ROLE lucy; SELECT sdp_stop_flow('lucy1'); RESET ROLE;
SELECT sdp_create_flow('wide', 'one_src', 'o1', 'seq bigint', options => '{"mode": "append", "workers": 3}')});
ok($node->wait_for_log(qr/sdp flow "wide" asks for 3 workers, and its topic has 1 partitions: it runs 1/, $log_offset),
	'the log says the flow runs one worker, its topic having one partition');
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'one', messages => [ map { [ "k$_", qq({"seq": $_}), 0 ] } 1 .. 50 ]);
ok(SdpTest::wait_for($node, 'SELECT count(*) = 50 FROM o1'), 'it reads its partition');
ok(SdpTest::wait_for($node, "SELECT count(*) = 1 FROM sdp.flow_workers WHERE flow = 'wide'"), 'in one worker');
is(SdpTest::query($node, 'SELECT count(*), count(DISTINCT seq) FROM o1'), '50|50', 'every message once');

done_testing();
