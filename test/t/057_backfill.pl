# sdp_backfill: one logic for history and for the stream.  200,032 payment
# events are in Kafka (32 partitions); the first 150,000 are also in a table
# (history, archived by an append flow with their Kafka positions).  Three
# reference flows read the whole topic from the start; three flows of the
# same declarations are backfilled from the table up to the boundary (right
# after the table's last offset of each partition) and then read Kafka from
# there.  At the boundary the backfilled flows hold what the stream had
# there (the append flow's rows, active_count's members); at the end every
# target equals its reference row for row: the append flow's rows, the
# window_agg flow's emissions (emission ids, values, counts), active_count's
# counts.  A fourth flow is backfilled from a query of the table without
# Kafka columns, up to a timestamp, and continues from Kafka's
# offsets-for-times: the same rows again.  The append flow's backfill is
# stopped half-way and resumed, then killed (SIGKILL of the postmaster)
# and resumed: nothing written twice, nothing lost.  And the refusals.
use strict;
use warnings FATAL => 'all';
use feature qw(signatures);
no warnings qw(experimental::signatures);
use lib 'test/perl';
use SdpKafka;
use SdpPayments;
use SdpTest;
use Test::More;
use Time::HiRes qw(sleep);

my $nparts = 32;
my $broker = SdpKafka::start_broker(topics => { 'payments' => $nparts });
my $node = SdpTest::new_node('backfill', 'sdp.max_flows' => 16, 'max_worker_processes' => 24);
SdpTest::create_source($node, 'payments', $broker, 'payments');

my $schema = 'seq bigint, merchant_id text, country text, method text, status text, amount numeric, event_ts timestamptz, late boolean';
my $cols = 'seq bigint, merchant_id text, country text, method text, status text, amount numeric, event_ts timestamptz, late boolean, '
  . 'kafka_partition int, kafka_offset bigint, kafka_timestamp timestamptz';
my $aggs = $SdpPayments::aggregations;
# idle_timeout: an hour, so that the pause between the two streams does not
# move the reference's watermark with the clock (which would make the second
# stream's first events late in the reference, not in the backfilled flow)
my $wopts = '"event_time": "event_ts", "idle_timeout": "1 hour", "checkpoint_interval": "1 second"';
my $aopts = '"key": "merchant_id", "member": "method", "ttl": "1 hour", "capacity": 100, "checkpoint_interval": "1 second"';

for my $f (qw(ref bf))
{
	SdpTest::query($node, <<"SQL");
CREATE TABLE ${f}_all ($cols);
SELECT sdp_create_flow('${f}_all', 'payments', '${f}_all', '$schema', options => '{"max_batch_rows": 1000}');
SELECT sdp_create_window_table('${f}_win');
SELECT sdp_create_flow('${f}_win', source => 'payments', target => '${f}_win', schema => '$schema',
  operator => 'window_agg', options => '{$wopts}');
SELECT sdp_load_aggregations('${f}_win', \$\$$aggs\$\$);
CREATE TABLE ${f}_act (merchant_id text PRIMARY KEY, active_count bigint, over_capacity boolean, updated_at timestamptz);
SELECT sdp_create_flow('${f}_act', source => 'payments', target => '${f}_act', schema => '$schema',
  transform => 'SELECT merchant_id, method FROM input', operator => 'active_count', options => '{$aopts}');
SQL
}
SdpTest::query($node, <<"SQL");
CREATE TABLE bf_t ($cols);
SELECT sdp_create_flow('bf_t', 'payments', 'bf_t', '$schema');
SQL
# the backfilled flows stop before anything is in the topic
SdpTest::query($node, "SELECT sdp_stop_flow(f) FROM unnest(ARRAY['bf_all', 'bf_win', 'bf_act', 'bf_t']) f");
ok(SdpTest::wait_for($node, "SELECT count(*) = 4 FROM sdp.flow_status WHERE flow LIKE 'bf%' AND state = 'stopped'"),
	'the flows to backfill are stopped');
ok(SdpTest::wait_for($node, "SELECT count(*) = 3 FROM sdp.flow_status WHERE flow LIKE 'ref%' AND state = 'running' AND partitions IS NOT NULL"),
	'the reference flows run');

# the first 150,000 events, then the history table: what the append flow archived
my $first = 150000;
my $r = SdpKafka::run_paymentsim(bootstrap => $broker->bootstrap, topic => 'payments', timeout => 600,
	args => [ '--count', $first, '--rate', 0, '--linger-ms', 5, '--merchants', 200, '--event-time', 'step:10',
			  '--disorder-ms', 2000, '--late-share', '0', '--seed', 57 ]);
is($r->{delivered}, $first, "produced $first");
ok(SdpTest::wait_consumed($node, $_, $first), "$_ consumed $first") for qw(ref_all ref_win ref_act);
SdpTest::query($node, <<'SQL');
CREATE TABLE history AS SELECT * FROM ref_all;
ALTER TABLE history ADD PRIMARY KEY (kafka_partition, kafka_offset);
CREATE INDEX ON history (event_ts, kafka_partition, kafka_offset);
CREATE TABLE ref_act_at_boundary AS SELECT merchant_id, active_count FROM ref_act;
CREATE TABLE boundary AS
SELECT kafka_partition AS p, max(kafka_offset) + 1 AS next FROM history GROUP BY 1;
SQL
is(SdpTest::query($node, 'SELECT count(*), count(DISTINCT seq) FROM history'), "$first|$first", 'history: 150,000 events, each once');
my $t = SdpTest::query($node, 'SELECT now()::text');
sleep 0.3;

# ---- refusals: nothing changes ----
# carol's flow: she may not read the history
SdpTest::query($node, <<"SQL");
CREATE ROLE carol LOGIN;
CREATE TABLE carol_rows (seq bigint);
ALTER TABLE carol_rows OWNER TO carol;
SET ROLE carol;
SELECT sdp_create_source('carol_src', '@{[ $broker->bootstrap ]}', 'payments', '@{[ SdpTest::source_options(q({"starting_offsets": "latest"})) ]}');
SELECT sdp_create_flow('carol_flow', 'carol_src', 'carol_rows', 'seq bigint');
SELECT sdp_stop_flow('carol_flow');
RESET ROLE;
SQL
ok(SdpTest::wait_for($node, "SELECT state = 'stopped' FROM sdp.flow_status WHERE flow = 'carol_flow'"), 'carol\'s flow is stopped');
my @refusals = (
	[ "SELECT sdp_backfill('ref_all', 'history')", '55000', qr/flow "ref_all" is running/, 'a running flow' ],
	[ "SELECT sdp_backfill('bf_all', 'SELECT seq, merchant_id FROM history')", '42703',
	  qr/the backfill's source has no column "country" of flow "bf_all"'s schema/, 'a source without a column of the schema' ],
	[ "SELECT sdp_backfill('bf_win', 'history', order_by => ARRAY['kafka_partition', 'kafka_offset'])", '22023',
	  qr/must be ordered by its event time "event_ts" first/, 'an event-time flow in another order' ],
	[ "SELECT sdp_backfill('bf_all', 'history', order_by => ARRAY['merchant_id'])", '22023',
	  qr/order_by \(merchant_id\) does not tell the backfill's rows apart: 200 values are shared by several rows/,
	  'an order that does not identify the rows' ],
	[ "SELECT sdp_backfill('bf_all', 'SELECT seq, merchant_id, country, method, status, amount, event_ts, late FROM history', order_by => ARRAY['seq'])",
	  '22023', qr/needs until: the source has no kafka_partition and kafka_offset/, 'no boundary to continue from' ],
	[ "SELECT sdp_backfill('bf_all', 'SELECT 1; SELECT 2')", '42601', qr/must be one SELECT/, 'two statements' ],
	[ "SELECT sdp_backfill('bf_all', 'history', until => '[1]')", '22023', qr/until is a timestamp/, 'a malformed until' ],
	[ "SET ROLE alice; SELECT sdp_backfill('bf_all', 'history')", '42501', qr/must be owner of flow "bf_all"/, 'another role' ],
	[ "SELECT sdp_backfill('carol_flow', 'history')", '42501', qr/permission denied for table history/,
	  'a source the owner may not read (a superuser calls; the source is read as the owner)' ],
);
SdpTest::query($node, 'CREATE ROLE alice');
for my $x (@refusals)
{
	my ($sql, $code, $re, $what) = @$x;
	my ($ret, $out, $err) = $node->psql('postgres', "\\set VERBOSITY verbose\n$sql");
	like($err, qr/ERROR:  $code: /, "refused with $code: $what");
	like($err, $re, "... saying why: $what");
}
is(SdpTest::query($node, "SELECT count(*) FROM sdp.backfills"), '0', 'no backfill was recorded by a refusal');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.flow_status WHERE flow LIKE 'bf%' AND state = 'stopped'"), '4',
	'the flows are still stopped');

# ---- the append flow: stopped half-way, then killed, each time resumed ----
# its batch that holds the 50,001st row (by Kafka position) waits on a lock
# the test holds; so does, after the stop, the one with the 100,001st
SdpTest::query($node, <<'SQL');
CREATE TABLE hold_at (seq bigint);
INSERT INTO hold_at SELECT seq FROM history ORDER BY kafka_partition, kafka_offset OFFSET 50000 LIMIT 1;
CREATE FUNCTION hold() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.seq IN (SELECT seq FROM hold_at) THEN PERFORM pg_advisory_xact_lock_shared(4242); END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER hold BEFORE INSERT ON bf_all FOR EACH ROW EXECUTE FUNCTION hold();
SQL
my $holder = $node->background_psql('postgres');
$holder->query_safe('SELECT pg_advisory_lock(4242)');
my $ret = SdpTest::query($node, "SELECT sdp_backfill('bf_all', 'history')");
# the boundary: right after the table's last offset of each partition (a partition without history: its start)
my $want_boundary = SdpTest::query($node,
	"SELECT jsonb_object_agg(p::text, coalesce(next, 0) ORDER BY p)::text FROM generate_series(0, $nparts - 1) p LEFT JOIN boundary USING (p)");
is(SdpTest::query($node, "SELECT '$ret'::jsonb::text"),
	SdpTest::query($node, "SELECT jsonb_build_object('rows', $first, 'order_by', '[\"kafka_partition\", \"kafka_offset\"]'::jsonb, 'boundary', '$want_boundary'::jsonb)::text"),
	'sdp_backfill says how many rows, in which order, and the boundary: right after the table\'s offsets');
my $waiting = "SELECT count(*) > 0 FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND NOT granted";
ok(SdpTest::wait_for($node, $waiting), 'the append flow\'s backfill reached the 50,001st row');
is(SdpTest::query($node, "SELECT (SELECT count(*) FROM bf_all) || ' ' || rows_done || ' ' || state FROM sdp.backfill_status WHERE flow = 'bf_all'"),
	'50000 50000 running', 'half-way: 50,000 rows written, and as many done');
SdpTest::query($node, "SELECT sdp_stop_flow('bf_all')");
ok(SdpTest::wait_for($node, "SELECT state = 'stopped' FROM sdp.flow_status WHERE flow = 'bf_all'"), 'stopped mid-backfill');
$holder->query_safe('SELECT pg_advisory_unlock(4242)');
is(SdpTest::query($node, "SELECT count(*), count(DISTINCT seq) FROM bf_all"), '50000|50000', 'stopped: the 50,000 rows, each once');
($ret) = $node->psql('postgres', "SELECT sdp_backfill('bf_all', 'history')");
isnt($ret, 0, 'a second backfill of the flow is refused while the first has not finished');

SdpTest::query($node, "UPDATE hold_at SET seq = (SELECT seq FROM history ORDER BY kafka_partition, kafka_offset OFFSET 100000 LIMIT 1)");
$holder->query_safe('SELECT pg_advisory_lock(4242)');
SdpTest::query($node, "SELECT sdp_start_flow('bf_all')");
ok(SdpTest::wait_for($node, $waiting), 'started again, it reached the 100,001st row');
is(SdpTest::query($node, "SELECT count(*), count(DISTINCT seq) FROM bf_all"), '100000|100000', 'resumed where it stopped: 100,000 rows, each once');
SdpTest::crash_and_restart($node);
eval { $holder->quit };
pass('postmaster killed with SIGKILL mid-backfill, restarted');

# ---- the other backfills ----
SdpTest::query($node, "SELECT sdp_backfill('bf_win', 'history')");
SdpTest::query($node, "SELECT sdp_backfill('bf_act', 'history')");
SdpTest::query($node, <<"SQL");
SELECT sdp_backfill('bf_t', 'SELECT seq, merchant_id, country, method, status, amount, event_ts, late, kafka_timestamp FROM history',
                    until => to_jsonb('$t'::text), order_by => ARRAY['seq']);
SQL
ok(SdpTest::wait_for($node, "SELECT count(*) = 4 FROM sdp.backfill_status WHERE state = 'done' AND rows_done = $first AND rows_total = $first"),
	'the four backfills are done, each over the 150,000 rows');
ok(SdpTest::wait_for($node, "SELECT count(*) = 4 FROM sdp.flow_status WHERE flow LIKE 'bf%' AND state = 'running'"),
	'and the flows run on');

# at the boundary
is(SdpTest::query($node, "SELECT count(*) FROM (SELECT seq, kafka_partition, kafka_offset FROM bf_all EXCEPT SELECT seq, kafka_partition, kafka_offset FROM history) d"), '0',
	'the append flow: no row that is not history');
is(SdpTest::query($node, "SELECT count(*), count(DISTINCT seq), count(DISTINCT (kafka_partition, kafka_offset)) FROM bf_all"), "$first|$first|$first",
	'the append flow: every row of the history once, after a stop and a SIGKILL');
is(SdpTest::query($node, <<'SQL'), '0', 'active_count at the boundary: the counts the stream had there');
SELECT count(*) FROM ((SELECT * FROM ref_act_at_boundary EXCEPT SELECT merchant_id, active_count FROM bf_act)
                      UNION ALL (SELECT merchant_id, active_count FROM bf_act EXCEPT SELECT * FROM ref_act_at_boundary)) d
SQL
is(SdpTest::query($node, <<'SQL'), '0', '... and the distinct methods of each merchant in the history');
SELECT count(*) FROM ((SELECT merchant_id, count(DISTINCT method) FROM history GROUP BY 1 EXCEPT SELECT merchant_id, active_count FROM bf_act)
                      UNION ALL (SELECT merchant_id, active_count FROM bf_act EXCEPT SELECT merchant_id, count(DISTINCT method) FROM history GROUP BY 1)) d
SQL
is(SdpTest::query($node, "SELECT count(DISTINCT s.key) || ' keys, ' || count(*) || ' members' FROM sdp_flow_state('bf_act') s, jsonb_object_keys(s.value) m WHERE s.state = 'last_seen'"),
	SdpTest::query($node, "SELECT count(DISTINCT merchant_id) || ' keys, ' || count(*) || ' members' FROM (SELECT DISTINCT merchant_id, method FROM history) d"),
	"active_count's state at the boundary: the history's members, by key");
for my $f (qw(bf_all bf_win bf_act))
{
	is(SdpTest::query($node, "SELECT jsonb_object_agg(partition::text, next_offset ORDER BY partition)::text FROM sdp.offsets o JOIN sdp.flows f ON f.id = o.flow_id WHERE f.name = '$f'"),
		$want_boundary, "$f: its offsets are the boundary");
}
my $bw = SdpTest::query($node, 'SELECT count(*) FROM bf_win');
cmp_ok($bw, '>', 1000, "the window flow emitted $bw windows of the history by the boundary");

# ---- the rest of the stream, and an event an hour later in every partition that closes every window ----
my $rest = 50000;
$r = SdpKafka::run_paymentsim(bootstrap => $broker->bootstrap, topic => 'payments', timeout => 600,
	args => [ '--count', $rest, '--rate', 0, '--linger-ms', 5, '--merchants', 200,
			  '--event-time', 'fixed:2026-01-01T00:25:00.000Z', '--step-ms', 10,
			  '--disorder-ms', 2000, '--late-share', '0', '--seed', 58, '--seq-start', $first ]);
is($r->{delivered}, $rest, "produced $rest more");
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'payments', messages => [
	map { [ 'zz', sprintf('{"seq": %d, "merchant_id": "zz", "country": "ZZ", "method": "card", "status": "approved", "amount": 1.00, "event_ts": "2026-01-01T01:00:00.000Z", "late": false}', $first + $rest + $_), $_ ] } 0 .. $nparts - 1 ]);
my $total = $first + $rest + $nparts;
ok(SdpTest::wait_consumed($node, $_, $total), "$_ consumed all $total") for qw(ref_all ref_win ref_act bf_all bf_win bf_act bf_t);
ok(SdpTest::wait_for($node, "SELECT bool_and(watermark = '2026-01-01T01:00:00Z') FROM sdp.flow_status WHERE flow IN ('ref_win', 'bf_win')"),
	'both window flows\' watermarks passed every window of the stream');
ok(SdpTest::wait_for($node, "SELECT (SELECT count(*) FROM ref_win) = (SELECT count(*) FROM bf_win)"), 'as many windows');

my $same = sub ($a, $b, $cols) {
	return SdpTest::query($node, "SELECT count(*) FROM ((SELECT $cols FROM $a EXCEPT ALL SELECT $cols FROM $b) UNION ALL (SELECT $cols FROM $b EXCEPT ALL SELECT $cols FROM $a)) d");
};
is(SdpTest::query($node, 'SELECT count(*), count(DISTINCT seq) FROM bf_all'), "$total|$total", "the append flow: $total rows, each once");
is($same->('ref_all', 'bf_all', 'seq, merchant_id, country, method, status, amount, event_ts, late, kafka_partition, kafka_offset'), '0',
	'the append flow backfilled then continued: exactly the rows of the flow that read the whole topic');
is($same->('ref_win', 'bf_win', 'emission_id, definition, entity, window_start, window_end, value, row_count'), '0',
	'the window flow: exactly the emissions (ids, values, counts) of the flow that read the whole topic');
my $nw = SdpTest::query($node, 'SELECT count(*) FROM ref_win');
cmp_ok($nw, '>', 5000, "($nw windows)");
is($same->('ref_act', 'bf_act', 'merchant_id, active_count, over_capacity'), '0',
	'active_count: exactly the counts of the flow that read the whole topic');
is(SdpTest::query($node, 'SELECT count(*), count(DISTINCT seq) FROM bf_t'), "$total|$total", "the flow backfilled to a time: $total rows, each once");
is($same->('ref_all', 'bf_t', 'seq, merchant_id, country, method, status, amount, event_ts, late'), '0',
	'... the rows of the flow that read the whole topic (the history\'s without their Kafka position)');
is(SdpTest::query($node, 'SELECT count(*) FROM sdp.dead_letters'), '0', 'no dead letter');

# a value of the source that does not fit the schema's type: its row is set
# aside (the column's input function, as for a message's field), the others written
SdpTest::create_source($node, 'payments_new', $broker, 'payments', '{"starting_offsets": "latest"}');
SdpTest::query($node, <<'SQL');
CREATE TABLE bf_bad (seq bigint, amount numeric, kafka_partition int, kafka_offset bigint);
SELECT sdp_create_flow('bf_bad', 'payments_new', 'bf_bad', 'seq bigint, amount numeric');
SQL
ok(SdpTest::wait_for($node, "SELECT state = 'running' AND partitions IS NOT NULL FROM sdp.flow_status WHERE flow = 'bf_bad'"), 'bf_bad runs');
SdpTest::query($node, "SELECT sdp_stop_flow('bf_bad')");
ok(SdpTest::wait_for($node, "SELECT state = 'stopped' FROM sdp.flow_status WHERE flow = 'bf_bad'"), 'and is stopped');
my $ends = SdpTest::query($node, "SELECT jsonb_object_agg(kafka_partition::text, n) FROM (SELECT kafka_partition, max(kafka_offset) + 1 AS n FROM ref_all GROUP BY 1) e");
SdpTest::query($node, <<"SQL");
SELECT sdp_backfill('bf_bad', \$\$SELECT seq, CASE WHEN seq IN (7, 8) THEN 'not a number' ELSE amount::text END AS amount,
                                kafka_partition, kafka_offset FROM history WHERE seq < 400\$\$, until => '$ends');
SQL
ok(SdpTest::wait_for($node, "SELECT state = 'done' FROM sdp.backfill_status WHERE flow = 'bf_bad'"), 'the backfill with two bad values is done');
is(SdpTest::query($node, "SELECT count(*), count(*) FILTER (WHERE seq IN (7, 8)), sum(amount) = (SELECT sum(amount) FROM history WHERE seq < 400 AND seq NOT IN (7, 8)) FROM bf_bad"),
	'398|0|t', 'the other 398 rows are written, with their values');
is(SdpTest::query($node, <<'SQL'),
SELECT string_agg(d.stage || ' ' || d.sqlstate || ' ' || ((d.kafka_partition, d.kafka_offset) = (h.kafka_partition, h.kafka_offset))::text || ' '
                  || (d.payload_text::jsonb ->> 'amount') || ' ' || d.error, ',' ORDER BY h.seq)
  FROM sdp.dead_letters d JOIN history h ON h.kafka_partition = d.kafka_partition AND h.kafka_offset = d.kafka_offset
 WHERE d.flow = 'bf_bad'
SQL
	'decode 22P02 true not a number invalid input syntax for type numeric: "not a number",decode 22P02 true not a number invalid input syntax for type numeric: "not a number"',
	'the two are dead letters, with their place in the topic, their columns and the reason');

# a reset abandons a backfill; the view keeps the finished ones
SdpTest::query($node, "SELECT sdp_stop_flow('bf_t')");
ok(SdpTest::wait_for($node, "SELECT state = 'stopped' FROM sdp.flow_status WHERE flow = 'bf_t'"), 'bf_t stopped');
SdpTest::query($node, "SELECT sdp_reset_flow('bf_t', 'latest')");
is(SdpTest::query($node, "SELECT string_agg(flow, ',' ORDER BY flow) FROM sdp.backfill_status"), 'bf_act,bf_all,bf_bad,bf_win',
	'sdp_reset_flow forgets the flow\'s backfill');

done_testing();
