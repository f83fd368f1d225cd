# A flow whose sink is missing when its worker loads it (HOUSE.md, section
# 5, defect 5): the worker's "sink does not exist" is the declaration's
# error (42704, undefined object), so a flow that never ran fails with the
# reason, as any declaration that no longer holds does, instead of an
# internal error (XX000) that the launcher restarted for ever.  The sink's
# row can only go with the foreign key of sdp.flows.sink not checked (a
# restore loading sdp.flows before sdp.sinks, or, as here, a superuser with
# session_replication_role = replica); the flow is declared and its sink
# deleted in one transaction, so that its worker never ran.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'ms_in' => 1, 'ms_out' => 1 });
my $node = SdpTest::new_node('missing_sink');
my $boot = $broker->bootstrap;
my $opts = SdpTest::source_options(q({"starting_offsets": "earliest"}));
SdpTest::query($node, <<"SQL");
BEGIN;
SELECT sdp_create_source('ms_in', '$boot', 'ms_in', '$opts');
SELECT sdp_create_sink('ms_out', '$boot', 'ms_out');
SELECT sdp_create_flow('gone_sink', source => 'ms_in', target => NULL, schema => 'seq bigint', sink => 'ms_out');
SET LOCAL session_replication_role = replica;
DELETE FROM sdp.sinks WHERE name = 'ms_out';
COMMIT;
SQL

ok(SdpTest::wait_for($node, "SELECT state = 'failed' FROM sdp.flow_status WHERE flow = 'gone_sink'"),
	'the flow fails');
is(SdpTest::query($node, "SELECT last_error FROM sdp.flow_status WHERE flow = 'gone_sink'"),
	'sink "ms_out" of flow "gone_sink" does not exist', 'with the reason');
is(SdpTest::query($node, "SELECT failed_at IS NOT NULL FROM sdp.flows WHERE name = 'gone_sink'"),
	't', 'its failure is persisted');
is(SdpTest::query($node, "SELECT restarts FROM sdp.flow_status WHERE flow = 'gone_sink'"),
	'0', 'and its worker was not restarted');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.offsets o JOIN sdp.flows f ON f.id = o.flow_id WHERE f.name = 'gone_sink'"),
	'0', 'it stored no offsets');

$node->stop;
done_testing();
