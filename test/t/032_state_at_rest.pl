# A key whose windows have all closed rests in the state until the next
# checkpoint instead of being deleted and created again by its next event:
# nobody sees it (sdp_flow_state, the checkpoint), the checkpoint deletes
# it, and keys at rest never take the room of live ones: past a quarter of
# the flow's state_memory_limit they are deleted at once, so a flow that
# runs within its limit without them runs within it with them.
use strict;
use warnings FATAL => 'all';
use feature 'signatures';
no warnings 'experimental::signatures';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'rest' => 1, 'ckpt' => 1 });
my $node = SdpTest::new_node('rest', timezone => "'UTC'");
SdpTest::create_source($node, 'rest', $broker, 'rest');
SdpTest::create_source($node, 'ckpt', $broker, 'ckpt');
SdpTest::query($node, <<'SQL');
SELECT sdp_create_window_table('rest_windows');
SELECT sdp_create_flow('rest', source => 'rest', target => 'rest_windows',
  schema   => 'merchant_id text, event_ts timestamptz',
  operator => 'window_agg',
  options  => '{"event_time": "event_ts", "idle_timeout": "1 hour", "state_memory_limit": "4MB", "checkpoint_interval": "1 hour"}');
SELECT sdp_load_aggregations('rest', $$[
  {"name": "n", "group_by": ["merchant_id"], "operation": "count", "window_size": "1 minute", "allowance": "1 second"}]$$);
SELECT sdp_create_window_table('ckpt_windows');
SELECT sdp_create_flow('ckpt', source => 'ckpt', target => 'ckpt_windows',
  schema   => 'merchant_id text, event_ts timestamptz',
  operator => 'window_agg',
  options  => '{"event_time": "event_ts", "idle_timeout": "1 hour", "checkpoint_interval": "200 ms"}');
SELECT sdp_load_aggregations('ckpt', $$[
  {"name": "n", "group_by": ["merchant_id"], "operation": "count", "window_size": "1 minute", "allowance": "1 second"}]$$);
SQL

# A message for merchant i at minute i: each key has one window, which the
# next minute's message closes.  10,000 keys would take about 5.7 MB at
# rest, more than the limit; they come 1,000 at a time (a batch opens at
# most 1,000 live keys, under 1 MB), so the flow must delete keys at rest to
# stay within it.
my ($rounds, $per) = (10, 1000);
my $n = $rounds * $per;
sub minute_ts ($i) { sprintf('2026-01-0%dT%02d:%02d:00Z', 1 + int($i / 1440), int($i % 1440 / 60), $i % 60) }
for my $r (0 .. $rounds - 1)
{
	SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'rest',
		messages => [ map { [ "m$_", qq({"merchant_id": "m$_", "event_ts": ") . minute_ts($_) . '"}', 0 ] } $r * $per + 1 .. ($r + 1) * $per ]);
	ok(SdpTest::wait_consumed($node, 'rest', ($r + 1) * $per), "round $r consumed");
}
# a last message far later closes every window
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'rest',
	messages => [ [ 'zz', qq({"merchant_id": "zz", "event_ts": ") . minute_ts($n + 10) . '"}', 0 ] ]);
ok(SdpTest::wait_consumed($node, 'rest', $n + 1), 'the last message consumed');
ok($node->poll_query_until('postgres', "SELECT count(*) = $n FROM rest_windows"), 'every window of the keys closed');
is(SdpTest::query($node, "SELECT state || ' ' || restarts || ' ' || rows_dead_lettered || ' ' || rows_late FROM sdp.flow_status WHERE flow = 'rest'"),
	'running 0 0 0', 'the flow runs within its limit of 4 MB, nothing set aside');
is(SdpTest::query($node, "SELECT count(*) || ' ' || count(DISTINCT entity) || ' ' || min(value) || ' ' || max(value) || ' ' || "
	  . "bool_and(window_start = ('2026-01-01'::timestamptz + (substr(entity, 2)::int || ' minutes')::interval)) FROM rest_windows"),
	"$n $n 1 1 true", 'one window of count 1 per key, at its minute');
is(SdpTest::query($node, "SELECT string_agg(DISTINCT key, ',') FROM sdp_flow_state('rest')"), 'n:zz',
	'sdp_flow_state shows the one key with an open window, none at rest');
my $bytes = SdpTest::query($node, "SELECT state_bytes FROM sdp.flow_status WHERE flow = 'rest'");
cmp_ok($bytes, '<=', 1024 * 1024 + $per * 1024, "state in memory stays near a quarter of the limit ($bytes bytes)");

# The same keys in the flow checkpointing every 200 ms: the checkpoint holds
# the live keys only, and a key at rest that comes back is a new key.
sub msg ($key, $minute) { [ $key, qq({"merchant_id": "$key", "event_ts": ") . minute_ts($minute) . '"}', 0 ] }
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'ckpt',
	messages => [ (map { msg("m$_", $_) } 1 .. 50), msg('zz', 60) ]);
ok(SdpTest::wait_consumed($node, 'ckpt', 51), 'ckpt consumed');
ok($node->poll_query_until('postgres', "SELECT count(*) = 50 FROM ckpt_windows"), 'the 50 windows closed');
ok($node->poll_query_until('postgres',
		"SELECT string_agg(key, ',') = 'n:zz' FROM sdp.state_checkpoints c JOIN sdp.flows f ON f.id = c.flow_id WHERE f.name = 'ckpt'"),
	'the checkpoint holds the one live key: the keys at rest were deleted from it');
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'ckpt', messages => [ msg('m1', 61), msg('m1', 61), msg('zz', 70) ]);
ok(SdpTest::wait_consumed($node, 'ckpt', 54), 'ckpt consumed the comeback');
ok($node->poll_query_until('postgres', "SELECT count(*) = 52 FROM ckpt_windows"), 'its windows closed');
is(SdpTest::query($node, "SELECT value || ' ' || row_count || ' ' || window_start FROM ckpt_windows WHERE entity = 'm1' ORDER BY window_start"),
	"1 1 2026-01-01 00:01:00+00\n2 2 2026-01-01 01:01:00+00", 'm1 came back as a new key: its second window counts 2');

# after a restart the flow resumes from its checkpoint: nothing at rest comes back
ok($node->poll_query_until('postgres',
		"SELECT string_agg(key, ',') = 'n:zz' FROM sdp.state_checkpoints c JOIN sdp.flows f ON f.id = c.flow_id WHERE f.name = 'ckpt'"),
	'checkpointed: the one live key');
$node->restart;
ok($node->poll_query_until('postgres', "SELECT state = 'running' FROM sdp.flow_status WHERE flow = 'ckpt'"), 'running again');
is(SdpTest::query($node, "SELECT string_agg(DISTINCT key, ',') FROM sdp_flow_state('ckpt')"), 'n:zz',
	'restored: the one live key');
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'ckpt', messages => [ msg('m53', 80) ]);
ok($node->poll_query_until('postgres', "SELECT count(*) = 53 FROM ckpt_windows"), 'the next window closes after the restart');
is(SdpTest::query($node, "SELECT count(*) || ' ' || count(DISTINCT (entity, window_start)) FROM ckpt_windows"), '53 53',
	'no window twice');

done_testing();
