# A worker that waits for the brokers holds no transaction, snapshot or
# xmin while it waits (HOUSE.md, section 5, defect 1): a new flow looks up
# where it starts in each partition (ListOffsets) outside any transaction,
# so a broker that answers its metadata but refuses the lookups leaves
# VACUUM free to remove what other sessions deleted meanwhile.  The
# embedded broker fails the next ListOffsets requests on demand; once they
# pass, the flow starts where starting_offsets says and consumes exactly
# what follows.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;

SdpKafka::needs_embedded('fails ListOffsets requests on demand (the mock broker)');

my $broker = SdpKafka::start_broker(topics => { 'lookups' => 2 });
my $node = SdpTest::new_node('brokerwait');
my $boot = $broker->bootstrap;
SdpTest::create_source($node, 'lookups', $broker, 'lookups', '{"starting_offsets": "latest"}');
# ten messages before the flow exists: "latest" starts after them
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'lookups',
	messages => [ map { [ undef, qq({"seq": $_}), 0 ] } 1 .. 10 ]);
SdpTest::query($node, <<'SQL');
CREATE TABLE t_wait (seq bigint, kafka_partition int, kafka_offset bigint);
CREATE TABLE churn (id int);
ALTER TABLE churn SET (autovacuum_enabled = off);
SQL

# ListOffsets (API key 2) fails with POLICY_VIOLATION (44) for the next 20
# requests: the worker retries its lookup every second
$broker->control('errors 2 20 44');
SdpTest::query($node,
	"SELECT sdp_create_flow('waiting', 'lookups', 't_wait', 'seq bigint', options => '{\"mode\": \"append\"}')");
ok(SdpTest::wait_for($node,
		"SELECT last_error LIKE 'cannot start consuming partition%' FROM sdp.flow_status WHERE flow = 'waiting'"),
	'the flow waits for its start positions, with the reason');

# while it waits: no transaction, no snapshot
my $pid = SdpTest::query($node, "SELECT pid FROM sdp.flow_status WHERE flow = 'waiting'");
ok($pid > 0, 'its worker runs');
my @looks;
for (1 .. 5)
{
	push @looks, SdpTest::query($node,
		"SELECT coalesce(xact_start::text, 'none') || '|' || coalesce(backend_xmin::text, 'none') "
		  . "FROM pg_stat_activity WHERE pid = $pid");
	select(undef, undef, undef, 0.3);
}
is(join(',', @looks), join(',', ('none|none') x 5),
	'no open transaction and no xmin in five looks 0.3 s apart');

# rows deleted while it waits are removed by VACUUM
SdpTest::query($node, 'INSERT INTO churn SELECT generate_series(1, 1000); DELETE FROM churn');
SdpTest::query($node, 'VACUUM churn');
is(SdpTest::query($node, "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'churn'"), '0',
	'VACUUM removed the 1,000 rows deleted while the worker waits');
is(SdpTest::query($node, "SELECT last_error LIKE 'cannot start consuming partition%' FROM sdp.flow_status WHERE flow = 'waiting'"),
	't', 'the worker was still waiting then');

# once the lookups pass, it starts at the latest offsets and reads what follows
ok(SdpTest::wait_for($node,
		"SELECT state = 'running' AND partitions IS NOT NULL AND last_error IS NULL FROM sdp.flow_status WHERE flow = 'waiting'"),
	'the flow runs once the broker answers');
is(SdpTest::query($node,
		"SELECT string_agg(partition || ':' || next_offset, ',' ORDER BY partition) FROM sdp.offsets o "
		  . "JOIN sdp.flows f ON f.id = o.flow_id WHERE f.name = 'waiting'"),
	'0:10,1:0', 'it stored the latest offsets (after the ten earlier messages)');
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'lookups',
	messages => [ map { [ undef, qq({"seq": $_}), 0 ] } 11 .. 15 ]);
ok(SdpTest::wait_for($node, 'SELECT count(*) = 5 FROM t_wait'), 'it consumed the five new messages');
is(SdpTest::query($node, 'SELECT string_agg(seq::text, \',\' ORDER BY seq) FROM t_wait'), '11,12,13,14,15',
	'exactly those, once each');

$node->stop;
done_testing();
