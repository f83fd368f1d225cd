# Replay gives the same answer: a window_agg flow aggregates 30,000
# out-of-order payment events live (altered mid-stream with sdp_alter_flow,
# which keeps its state: the live windows also equal the SQL GROUP BY over
# the events); then its target is emptied and the flow
# reset to 'earliest' (its state cleared), and the windows it rebuilds from
# the backlog, read in large batches, equal the live ones row for row (same
# emission ids, values and row counts).  It holds because windows are
# closed by event time (the watermark), not by arrival: with every event
# within the allowance, which events a window holds does not depend on how
# the messages were batched.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpPayments;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'payments' => 4 });
my $node = SdpTest::new_node('replay');
SdpPayments::declare($node, $broker);
SdpPayments::warm_up($node, $broker);

my $producer = SdpKafka::start_paymentsim(bootstrap => $broker->bootstrap, topic => 'payments',
	args => [ '--count', 30000, '--rate', 6000, '--linger-ms', 5, '--merchants', 50, '--event-time', 'step:10',
			  '--disorder-ms', 3000, '--late-share', '0', '--seed', 39 ]);
# mid-stream, a change of the flow's own options keeps the operator's state
# (sdp_alter_flow): a window open across it must still hold all its events
ok(SdpTest::wait_for($node, 'SELECT count(*) > 300 FROM payment_windows'), 'windows are being emitted');
my $log_offset = -s $node->logfile;
SdpTest::query($node, qq{SELECT sdp_alter_flow('payments_agg', options => '{"checkpoint_interval": "2 seconds"}')});
ok($node->wait_for_log(qr/sdp flow "payments_agg" restored the state of \d+ keys/, $log_offset),
	'its worker restarted with the new options and restored its state');
ok(SdpTest::wait_for($node, "SELECT options->>'checkpoint_interval' = '2 seconds' FROM sdp.flows WHERE name = 'payments_agg'"),
	'payments_agg altered mid-stream');
my $report = $producer->finish;
is($report->{delivered}, 30000, 'payment_sim delivered 30,000 out-of-order events (up to 3 s early or late)');
# one event ten minutes of event time later in each partition: the watermark
# passes every window of the stream (the closers' own windows stay open)
my @closers;
for my $p (0 .. 3)
{
	my $seq = 2000000 + $p;
	push @closers, [ "close$p",
		qq({"seq": $seq, "merchant_id": "close$p", "country": "ZZ", "method": "card", "status": "approved", "amount": 1.00, "event_ts": "2026-01-01T00:10:00.000Z"}),
		$p ];
}
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'payments', messages => \@closers);
ok(SdpTest::wait_consumed($node, 'payments_agg', 30005), 'payments_agg consumed everything');
ok(SdpTest::wait_consumed($node, 'payments_all', 30005), 'so did the ground truth flow');

# the windows the stream closes: those of the SQL GROUP BY over the events, less the closers'
SdpPayments::expected($node);
my $closed = SdpTest::query($node, <<'SQL');
SELECT (SELECT count(*) FROM expected WHERE window_start < '2026-01-01 00:09:00+00')
     + (SELECT count(*) FROM expected_distinct WHERE substring(emission_id from '[0-9T:-]+Z$') < '2026-01-01T00:09:00Z')
SQL
ok($node->poll_query_until('postgres',
		"SELECT count(*) = $closed FROM payment_windows WHERE window_start < '2026-01-01 00:09:00+00'"),
	"live: all $closed windows of the stream emitted");
is(SdpTest::query($node, <<'SQL'), '', 'live: every window equals the SQL GROUP BY over its events, across the alter');
SELECT string_agg(coalesce(e.emission_id, w.emission_id) || ' expected ' || coalesce(e.value::text, '-') || '/' || coalesce(e.row_count::text, '-')
                  || ' got ' || coalesce(w.value::text, '-') || '/' || coalesce(w.row_count::text, '-'), E'\n')
  FROM (SELECT * FROM expected WHERE window_start < '2026-01-01 00:09:00+00') e
  FULL JOIN (SELECT * FROM payment_windows WHERE definition <> 'merchants_per_country'
                AND window_start < '2026-01-01 00:09:00+00') w USING (emission_id)
 WHERE e.value IS DISTINCT FROM w.value OR e.row_count IS DISTINCT FROM w.row_count
SQL
is(SdpTest::query($node, "SELECT count(*) FROM payment_windows WHERE window_start >= '2026-01-01 00:09:00+00'"),
	'0', 'live: the closers\' windows are still open');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.dead_letters WHERE flow = 'payments_agg'"), '0', 'live: no event was late');
SdpTest::query($node, <<'SQL');
CREATE TABLE live AS SELECT emission_id, definition, entity, window_start, window_end, value, row_count FROM payment_windows;
SQL

# the replay: stop, empty the target, reset to earliest, start
SdpTest::query($node, "SELECT sdp_stop_flow('payments_agg')");
ok(SdpTest::wait_for($node, "SELECT state = 'stopped' FROM sdp.flow_status WHERE flow = 'payments_agg'"), 'stopped');
SdpTest::query($node, 'TRUNCATE payment_windows');
is(SdpTest::query($node, "SELECT sdp_reset_flow('payments_agg', 'earliest')"), '{"0": 0, "1": 0, "2": 0, "3": 0}',
	'reset to earliest');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.state_checkpoints c JOIN sdp.flows f ON f.id = c.flow_id WHERE f.name = 'payments_agg'"),
	'0', 'its state checkpoint is gone');
SdpTest::query($node, "SELECT sdp_start_flow('payments_agg')");
ok(SdpTest::wait_consumed($node, 'payments_agg', 30005), 'the replay consumed everything again');
ok($node->poll_query_until('postgres', "SELECT count(*) = $closed FROM payment_windows"),
	"replay: $closed windows emitted");

is(SdpTest::query($node, <<'SQL'), '', 'the rebuilt windows equal the live ones, row for row');
SELECT string_agg(coalesce(l.emission_id, w.emission_id) || ' live ' || coalesce(l.value::text, '-') || '/' || coalesce(l.row_count::text, '-')
                  || ' replay ' || coalesce(w.value::text, '-') || '/' || coalesce(w.row_count::text, '-'), E'\n')
  FROM live l FULL JOIN payment_windows w USING (emission_id)
 WHERE l.emission_id IS NULL OR w.emission_id IS NULL
    OR (l.definition, l.entity, l.window_start, l.window_end, l.value, l.row_count)
       IS DISTINCT FROM (w.definition, w.entity, w.window_start, w.window_end, w.value, w.row_count)
SQL
is(SdpTest::query($node, "SELECT count(*) FROM sdp.dead_letters WHERE flow = 'payments_agg'"), '0', 'replay: no event was late');

done_testing();
