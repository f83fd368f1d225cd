# Stateful flows with several workers (issue 12, item 2).  State is owned by
# Kafka partition: over a topic of 8 partitions keyed by merchant, a
# window_agg flow grouped by the Kafka key in 2 workers lives through a
# SIGKILL of the postmaster, and another goes from 1 to 3 workers
# mid-stream; both end with exactly the windows a SQL GROUP BY over the same
# events gives (pay_w2's rows carry their partition; pay_change's
# transform drops it, so its workers run the transform per partition).  An
# active_count flow keyed by the Kafka key runs in 2 workers; an operator
# keyed by a constant is refused several workers.  A key that arrives on two partitions (of one worker, or of two)
# fails the flow with the reason (issue 26: its results would be wrong), and
# in one worker it resumes from its checkpoint; sdp_flow_state shows every
# worker's keys.  What can be seen at declaration is refused: an aggregation
# over the whole stream (no group_by) in a flow with several workers.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use PostgreSQL::Test::Utils;
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'payments' => 8, 'owned' => 8 });
my $node = SdpTest::new_node('parstate', 'sdp.max_flows' => 16);
SdpTest::create_source($node, 'payments', $broker, 'payments');
SdpTest::create_source($node, 'owned', $broker, 'owned');

my $aggs = <<'JSON';
[{"name": "count_1m", "group_by": ["kafka_key"], "operation": "count",
  "window_size": "1 minute", "allowance": "5 seconds"},
 {"name": "volume_1m", "group_by": ["kafka_key", "status"], "operation": "sum", "value": "amount",
  "window_size": "1 minute", "allowance": "5 seconds"},
 {"name": "rejection_ratio_1m", "group_by": ["kafka_key"], "operation": "ratio",
  "filter": "status = 'rejected'", "denominator_filter": "true", "window_size": "1 minute", "allowance": "5 seconds"},
 {"name": "count_hop", "group_by": ["kafka_key"], "operation": "count",
  "window_size": "1 minute", "slide": "30 seconds", "allowance": "5 seconds"}]
JSON
my $schema = 'merchant_id text, method text, status text, amount numeric, event_ts timestamptz';
my $wopts = '"event_time": "event_ts", "idle_timeout": "2 seconds", "checkpoint_interval": "1 second"';
SdpTest::query($node, <<"SQL");
SELECT sdp_create_window_table('windows_w2');
SELECT sdp_create_window_table('windows_change');
CREATE TABLE payments_all (merchant_id text, method text, status text, amount numeric, event_ts timestamptz,
                           kafka_key text, kafka_partition int, kafka_offset bigint);
CREATE TABLE active_merchants (merchant_id text PRIMARY KEY, active_count bigint, over_capacity boolean,
                               updated_at timestamptz);
SELECT sdp_create_flow('pay_all', 'payments', 'payments_all', '$schema');
SELECT sdp_create_flow('pay_w2', source => 'payments', target => 'windows_w2', schema => '$schema',
  operator => 'window_agg', options => '{$wopts, "workers": 2}');
SELECT sdp_create_flow('pay_change', source => 'payments', target => 'windows_change', schema => '$schema',
  transform => 'SELECT kafka_key, method, status, amount, event_ts FROM input',
  operator => 'window_agg', options => '{$wopts}');
SELECT sdp_load_aggregations('pay_w2', \$\$$aggs\$\$);
SELECT sdp_load_aggregations('pay_change', \$\$$aggs\$\$);
SELECT sdp_create_flow('pay_active', source => 'payments', target => 'active_merchants', schema => '$schema',
  transform => 'SELECT kafka_key AS merchant_id, method FROM input',
  operator => 'active_count',
  options => '{"key": "merchant_id", "member": "method", "ttl": "1 hour", "capacity": 100, "workers": 2, "checkpoint_interval": "1 second"}');
SQL

# refused at declaration: one entity over the whole stream needs every partition
my ($ret, $out, $err) = $node->psql('postgres', <<'SQL');
SELECT sdp_load_aggregations('pay_w2', '[{"name": "all_1m", "group_by": [], "operation": "count", "window_size": "1 minute"}]');
SQL
isnt($ret, 0, 'an aggregation without group_by in a flow with 2 workers is refused');
like($err, qr/aggregation "all_1m" has no group_by, and flow "pay_w2" runs in 2 workers/, '... saying why');
SdpTest::query($node, <<"SQL");
SELECT sdp_create_window_table('windows_whole');
SELECT sdp_create_flow('whole', source => 'payments', target => 'windows_whole', schema => '$schema',
  operator => 'window_agg', options => '{"event_time": "event_ts"}');
SELECT sdp_load_aggregations('whole', '[{"name": "all_1m", "group_by": [], "operation": "count", "window_size": "1 minute"}]');
SQL
($ret, $out, $err) = $node->psql('postgres', "SELECT sdp_set_flow_workers('whole', 2)");
isnt($ret, 0, 'so is 2 workers for a flow that has one');
like($err, qr/flow "whole" cannot run in 2 workers: its aggregation "all_1m" has no group_by/, '... saying why');
SdpTest::query($node, "SELECT sdp_drop_flow('whole')");
SdpTest::query($node, <<"SQL");
CREATE TABLE zone_counts (zone text PRIMARY KEY, active_count bigint, over_capacity boolean, updated_at timestamptz);
SELECT sdp_create_flow('zonec', source => 'payments', target => 'zone_counts', schema => '$schema',
  transform => \$\$SELECT 'z' AS zone, merchant_id FROM input\$\$, operator => 'active_count',
  options => '{"key": "zone", "member": "merchant_id", "capacity": 5}');
SQL
($ret, $out, $err) = $node->psql('postgres', "SELECT sdp_set_flow_workers('zonec', 2)");
isnt($ret, 0, 'an operator keyed by a constant cannot have 2 workers');
like($err, qr/flow "zonec" cannot run in 2 workers: its operator's key column "zone" is a constant/, '... saying why');
SdpTest::query($node, "SELECT sdp_drop_flow('zonec')");

ok(SdpTest::wait_for($node,
		"SELECT count(*) = 6 FROM sdp.flow_workers WHERE flow IN ('pay_all', 'pay_w2', 'pay_change', 'pay_active') AND state = 'running'"),
	'every worker runs');
ok(SdpTest::wait_for($node, "SELECT string_agg(worker || ':' || partitions::text, ' ' ORDER BY worker) = '0:{0,2,4,6} 1:{1,3,5,7}' FROM sdp.flow_workers WHERE flow = 'pay_w2'"),
	'pay_w2: partition p is worker p % 2\'s (once restored, each takes its partitions)');

# A watermark on every partition before the stream (see SdpPayments::warm_up).
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'payments', messages => [
	map { [ "w$_", qq({"merchant_id": "w$_", "method": "card", "status": "approved", "amount": 1.00, "event_ts": "2025-12-31T23:58:00.000Z"}), $_ ] } 0 .. 7 ]);
ok(SdpTest::wait_consumed($node, $_, 8), "$_: warm-up consumed") for qw(pay_w2 pay_change pay_active);

my $total = 20000;
my $producer = SdpKafka::start_paymentsim(bootstrap => $broker->bootstrap, topic => 'payments',
	args => [ '--count', $total, '--rate', 1000, '--merchants', 60, '--event-time', 'step:10',
			  '--disorder-ms', 2000, '--late-share', '0', '--seed', 35 ]);

ok(SdpTest::wait_for($node, <<'SQL'), 'windows are being emitted by both workers, and checkpointed');
SELECT count(*) > 60 AND (SELECT count(*) = 2 FROM sdp.flow_workers WHERE flow = 'pay_w2' AND last_commit_at IS NOT NULL)
   AND (SELECT count(DISTINCT partition) = 8 FROM sdp.state_checkpoints c JOIN sdp.flows f ON f.id = c.flow_id
         WHERE f.name = 'pay_w2')
  FROM windows_w2
SQL

# mid-stream: pay_change from 1 worker to 3
SdpTest::query($node, "SELECT sdp_set_flow_workers('pay_change', 3)");
ok(SdpTest::wait_for($node, "SELECT count(*) = 3 FROM sdp.flow_workers WHERE flow = 'pay_change' AND workers = 3 AND state = 'running'"),
	'pay_change runs in 3 workers');
ok(SdpTest::wait_for($node, "SELECT string_agg(partitions::text, ' ' ORDER BY worker) = '{0,3,6} {1,4,7} {2,5}' FROM sdp.flow_workers WHERE flow = 'pay_change'"),
	'its partitions divided among the 3');

my $log_offset = -s $node->logfile;
ok(SdpTest::wait_for($node, "SELECT count(*) > 4000 FROM payments_all"), 'still streaming');
SdpTest::crash_and_restart($node);
pass('postmaster killed with SIGKILL mid-stream, restarted');
ok($node->wait_for_log(qr/sdp flow "pay_w2" restored the state of \d+ keys/, $log_offset), 'pay_w2 restored its checkpoint');

my $report = $producer->finish;
is($report->{delivered}, $total, "payment_sim delivered $total");
ok(SdpTest::wait_consumed($node, $_, $total + 8), "$_ consumed everything") for qw(pay_all pay_w2 pay_change pay_active);

# the reference: a SQL GROUP BY over every event
SdpTest::query($node, <<'SQL');
SET TimeZone = 'UTC';
CREATE TABLE expected AS
WITH g AS (SELECT *, date_bin('1 minute', event_ts, '1970-01-01 00:00:00+00') AS ws FROM payments_all),
     e AS (
  SELECT 'count_1m' AS d, kafka_key AS entity, ws, count(*)::float8 AS value, count(*) AS row_count
    FROM g GROUP BY kafka_key, ws
  UNION ALL
  SELECT 'volume_1m', kafka_key || '|' || status, ws, sum(amount)::float8, count(*)
    FROM g GROUP BY kafka_key, status, ws
  UNION ALL
  SELECT 'rejection_ratio_1m', kafka_key, ws, (count(*) FILTER (WHERE status = 'rejected'))::float8 / count(*), count(*)
    FROM g GROUP BY kafka_key, ws
  UNION ALL
  SELECT 'count_hop', kafka_key, w.ws, count(*)::float8, count(*)
    FROM payments_all, LATERAL (VALUES (date_bin('30 seconds', event_ts, '1970-01-01 00:00:00+00')),
                                       (date_bin('30 seconds', event_ts, '1970-01-01 00:00:00+00') - interval '30 seconds')) w(ws)
   GROUP BY kafka_key, w.ws)
SELECT d || '/' || entity || '/' || to_char(ws, 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS emission_id, value, row_count
  FROM e;
SQL
my $expected = SdpTest::query($node, 'SELECT count(*) FROM expected');
is(SdpTest::query($node, "SELECT count(DISTINCT kafka_partition) = 8 AND bool_and(kafka_key = merchant_id) FROM payments_all"),
	't', 'the stream is keyed by merchant, over all 8 partitions');
for my $t (qw(windows_w2 windows_change))
{
	ok(SdpTest::wait_for($node, "SELECT count(*) = $expected FROM $t"), "$t: all $expected windows finalized");
	is(SdpTest::query($node, <<"SQL"), '', "$t: every window equals the SQL GROUP BY");
SELECT string_agg(coalesce(e.emission_id, w.emission_id) || ' expected ' || coalesce(e.value::text, '-') || '/' || coalesce(e.row_count::text, '-')
                  || ' got ' || coalesce(w.value::text, '-') || '/' || coalesce(w.row_count::text, '-'), E'\\n')
  FROM expected e FULL JOIN $t w USING (emission_id)
 WHERE e.value IS DISTINCT FROM w.value OR e.row_count IS DISTINCT FROM w.row_count
SQL
}
for my $f ([ 'pay_w2', 2 ], [ 'pay_change', 3 ])
{
	my ($flow, $n) = @$f;
	ok(SdpTest::wait_for($node, <<"SQL"), "$flow: each worker checkpoints the highest event time of its own partitions, and its one watermark on each");
SELECT count(*) = 8 AND bool_and(o.max_event_time = m.t)
   AND (SELECT bool_and(n = 1) FROM (SELECT count(DISTINCT watermark) AS n FROM sdp.offsets o2
                                      WHERE o2.flow_id = f.id AND o2.watermark IS NOT NULL GROUP BY o2.partition % $n) w)
   AND (SELECT count(*) = 8 FROM sdp.offsets o3 WHERE o3.flow_id = f.id AND o3.watermark IS NOT NULL)
  FROM sdp.offsets o JOIN sdp.flows f ON f.id = o.flow_id
  JOIN (SELECT kafka_partition, max(event_ts) AS t FROM payments_all GROUP BY kafka_partition) m ON m.kafka_partition = o.partition
 WHERE f.name = '$flow'
 GROUP BY f.id
SQL
}
is(SdpTest::query($node, "SELECT count(*) FROM sdp.dead_letters WHERE flow IN ('pay_w2', 'pay_change', 'pay_active')"),
	'0', 'nothing set aside: every key arrives on one partition');
is(SdpTest::query($node, <<'SQL'), '', 'active_count in 2 workers: the distinct methods of every merchant');
SELECT string_agg(coalesce(e.merchant_id, a.merchant_id) || ': ' || coalesce(e.n::text, '-') || ' vs ' || coalesce(a.active_count::text, '-'), ', ')
  FROM (SELECT kafka_key AS merchant_id, count(DISTINCT method) AS n FROM payments_all GROUP BY kafka_key) e
  FULL JOIN active_merchants a USING (merchant_id)
 WHERE e.n IS DISTINCT FROM a.active_count
SQL
ok(SdpTest::wait_for($node, <<'SQL'), 'its checkpoint has every key, each with the partition it comes from');
SELECT count(*) = (SELECT count(DISTINCT kafka_key) FROM payments_all) AND bool_and(c.partition = p.kafka_partition)
  FROM sdp.state_checkpoints c JOIN sdp.flows f ON f.id = c.flow_id
  JOIN (SELECT DISTINCT kafka_key, kafka_partition FROM payments_all) p ON p.kafka_key = c.key
 WHERE f.name = 'pay_active'
SQL

# Key ownership: a key that arrives on a second partition.
SdpTest::query($node, <<'SQL');
SELECT sdp_create_window_table('owned_windows');
SELECT sdp_create_flow('own_agg', source => 'owned', target => 'owned_windows', schema => 'n int, event_ts timestamptz',
  operator => 'window_agg', options => '{"event_time": "event_ts", "idle_timeout": "1 hour", "workers": 2}');
SELECT sdp_load_aggregations('own_agg', '[{"name": "n_1h", "group_by": ["kafka_key"], "operation": "count",
  "window_size": "1 hour", "allowance": "1 minute"}]');
SQL
ok(SdpTest::wait_for($node, "SELECT count(*) = 2 FROM sdp.flow_workers WHERE flow = 'own_agg' AND state = 'running'"),
	'own_agg runs in 2 workers');
my $ev = sub { my ($n, $ts) = @_; return qq({"n": $n, "event_ts": "$ts"}) };
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'owned', messages => [
	(map { [ 'xk', $ev->($_, "2026-01-01T10:00:0${_}Z"), 1 ] } 1 .. 3),
	(map { [ 'ok', $ev->($_, "2026-01-01T10:00:0${_}Z"), 2 ] } 1 .. 2) ]);
ok(SdpTest::wait_consumed($node, 'own_agg', 5), 'xk on partition 1, ok on partition 2: consumed');
is(SdpTest::query($node, "SELECT string_agg(DISTINCT key, ',') FROM sdp_flow_state('own_agg')"),
	'n_1h:ok,n_1h:xk', 'sdp_flow_state shows the keys of both workers');

# xk again, on partition 3 (the same worker as 1) and on partition 2 (the
# other worker): the flow's topic is not keyed by its operator's key, and
# each worker would count a part of xk.  The flow fails instead, naming the
# key, before anything of the batch commits.
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'owned', messages => [
	[ 'xk', $ev->(4, '2026-01-01T10:00:04Z'), 3 ],
	[ 'xk', $ev->(5, '2026-01-01T10:00:05Z'), 2 ],
	[ 'ok', $ev->(3, '2026-01-01T10:00:03Z'), 2 ] ]);
ok(SdpTest::wait_for($node, "SELECT state = 'failed' FROM sdp.flow_status WHERE flow = 'own_agg'"),
	'xk on a second partition: the flow fails');
like(SdpTest::query($node, "SELECT last_error FROM sdp.flow_status WHERE flow = 'own_agg'"),
	qr/^key "n_1h:xk" of operator window_agg arrives on partitions 1 and [23], and a flow with 2 workers keeps the state of a key in the worker of its partition, so its results would be wrong; run the flow in one worker \(SELECT sdp_set_flow_workers\('own_agg', 1\)\)/,
	'with the key, its partitions and what to do');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.dead_letters WHERE flow = 'own_agg'"), '0', 'nothing set aside');
is(SdpTest::query($node, "SELECT count(*) FROM owned_windows"), '0', 'no window was emitted');

# in one worker any partition may feed any key: it resumes from its checkpoint
SdpTest::query($node, "SELECT sdp_set_flow_workers('own_agg', 1); SELECT sdp_start_flow('own_agg')");
ok(SdpTest::wait_consumed($node, 'own_agg', 8), 'one worker: consumed');
# close the hour: every partition moves to 13:00
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'owned', messages => [
	map { [ "c$_", $ev->(0, '2026-01-01T13:00:00Z'), $_ ] } 0 .. 7 ]);
ok(SdpTest::wait_for($node, "SELECT count(*) = 2 FROM owned_windows"), 'the windows of hour 10 are emitted');
is(SdpTest::query($node, "SELECT string_agg(emission_id || '=' || value, ' ' ORDER BY emission_id) FROM owned_windows"),
	'n_1h/ok/2026-01-01T10:00:00Z=3 n_1h/xk/2026-01-01T10:00:00Z=5',
	'every row of xk and of ok counted once');

# A key checkpointed before 0.3 has no partition: only one worker may hold it.
SdpTest::query($node, "SELECT sdp_stop_flow('pay_active')");
ok(SdpTest::wait_for($node, "SELECT count(*) = 0 FROM sdp.flow_workers WHERE flow = 'pay_active' AND pid IS NOT NULL"),
	'pay_active stopped');
SdpTest::query($node, <<'SQL');
UPDATE sdp.state_checkpoints c SET partition = NULL FROM sdp.flows f
 WHERE f.id = c.flow_id AND f.name = 'pay_active' AND c.key = 'w3'
SQL
($ret, $out, $err) = $node->psql('postgres', "SELECT sdp_set_flow_workers('pay_active', 3)");
like($err, qr/flow "pay_active" cannot run in 3 workers yet: its state has keys checkpointed before 0.3, without their partition/,
	'a state checkpointed without partitions keeps the flow at one worker');
SdpTest::query($node, "SELECT sdp_set_flow_workers('pay_active', 1)");
is(SdpTest::query($node, "SELECT options->>'workers' FROM sdp.flows WHERE name = 'pay_active'"), '1', 'one is fine');

done_testing();
