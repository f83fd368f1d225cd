# The windowed aggregation library: every finalized window equals the same
# aggregation computed by a SQL GROUP BY over the same events; out-of-order
# events within the allowance are included, later ones excluded, counted and
# dead-lettered; windows close when the stream goes idle; definitions are
# added to and dropped from the running flow.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpPayments;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'payments' => 4 });
my $node = SdpTest::new_node('windows');
SdpPayments::declare($node, $broker);
# the same stream with retention of 4 minutes: counted back from the flow's
# watermark (event time: January 2026), not from the wall clock (months later)
SdpTest::query($node, <<'SQL');
SELECT sdp_create_window_table('retained_windows');
SELECT sdp_create_flow('payments_retained', source => 'payments', target => 'retained_windows',
  schema   => 'merchant_id text, event_ts timestamptz',
  operator => 'window_agg',
  options  => '{"event_time": "event_ts", "idle_timeout": "2 seconds", "checkpoint_interval": "1 second", "retention": "4 minutes"}');
SELECT sdp_create_aggregation('payments_retained', 'count_1m', group_by => ARRAY['merchant_id'],
  operation => 'count', window_size => '1 minute', allowance => '5 seconds');
SQL
SdpPayments::warm_up($node, $broker);

# 30,000 payments over five minutes of event time (10 ms apart), up to 3 s out
# of order (the allowance is 5 s), and 0.5% ten minutes late
my $report = SdpKafka::run_paymentsim(bootstrap => $broker->bootstrap, topic => 'payments',
	args => [ '--count', 30000, '--rate', 0, '--merchants', 50, '--event-time', 'step:10',
			  '--disorder-ms', 3000, '--late-share', '0.005', '--late-ms', 600000, '--seed', 9 ]);
is($report->{delivered}, 30000, 'payment_sim delivered 30,000');
is($report->{late}, 150, '150 of them late');
ok(SdpTest::wait_consumed($node, 'payments_agg', 30001), 'payments_agg consumed everything');
ok(SdpTest::wait_consumed($node, 'payments_all', 30001), 'the ground truth flow consumed everything');

# windows close on idle: nothing more arrives, yet the last windows are emitted
my $expected = SdpPayments::expected($node);
ok($node->poll_query_until('postgres', "SELECT count(*) = $expected FROM payment_windows"),
	"all $expected windows finalized, the last ones after the stream went idle");
SdpPayments::compare($node, 'windows');

# late events: exactly the ones generated late, counted and dead-lettered with the reason
is(SdpTest::query($node, <<'SQL'), '150|150|150', 'the late events are excluded, counted and dead-lettered');
SELECT (SELECT count(*) FROM sdp.dead_letters WHERE flow = 'payments_agg' AND stage = 'late'),
       (SELECT rows_late FROM sdp.flow_status WHERE flow = 'payments_agg'),
       (SELECT count(*) FROM payments_all p JOIN sdp.dead_letters d
           ON d.flow = 'payments_agg' AND d.stage = 'late'
          AND d.kafka_partition = p.kafka_partition AND d.kafka_offset = p.kafka_offset
        WHERE p.late)
SQL
is(SdpTest::query($node, <<'SQL'), '150|150', 'each with its reason: its event time, the watermark past the window, the window that holds it');
SELECT count(*), count(*) FILTER (WHERE m[1]::timestamptz = event_ts AND m[3]::timestamptz <= event_ts
                                    AND event_ts < m[4]::timestamptz AND m[2]::timestamptz >= m[4]::timestamptz
                                    AND m[5] IN (SELECT name FROM sdp.aggregations WHERE flow = 'payments_agg'))
  FROM (SELECT p.event_ts, regexp_match(d.error, '^event at (.+) is later than the watermark (.+): window \[(.+), (.+)\) of aggregation (\S+) is final$') m
          FROM payments_all p JOIN sdp.dead_letters d
            ON d.flow = 'payments_agg' AND d.stage = 'late'
           AND d.kafka_partition = p.kafka_partition AND d.kafka_offset = p.kafka_offset
         WHERE p.late) s
SQL
# retention deletes windows older than the configured age
ok($node->poll_query_until('postgres',
		"SELECT rows_written > 100 FROM sdp.flow_status WHERE flow = 'payments_retained'"),
	'the retained flow emitted its windows');
# The stream's event time runs from 00:00 to 00:05 (and the warm-up's
# window ends at 23:59), then moves on with the clock while it is quiet
# (stateful.c, advance_watermark): the windows that end 4 minutes or more
# before the watermark go, the last ones stay for as long as the stream has
# been quiet for less than 3 minutes, which the checks below take seconds of.
ok($node->poll_query_until('postgres', <<'SQL'),
SELECT count(*) = 0 FROM retained_windows
 WHERE window_end < (SELECT watermark FROM sdp.flow_status WHERE flow = 'payments_retained') - interval '4 minutes'
SQL
	'retention deleted the windows that ended more than 4 minutes before the watermark');
ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM retained_windows WHERE window_end <= '2026-01-01 00:01:00+00'"),
	'among them the warm-up\'s and the first minute\'s (the watermark past 00:05 once the stream is quiet)');
is(SdpTest::query($node, <<'SQL'), '0|100', 'and kept the last two minutes\' windows, equal to the events, though they ended months before now');
WITH truth AS (SELECT merchant_id AS entity, date_trunc('minute', event_ts) AS window_start, count(*)::float8 AS n
                 FROM payments_all WHERE late IS NOT TRUE AND event_ts >= '2026-01-01 00:03:00+00' GROUP BY 1, 2),
     kept AS (SELECT entity, window_start, value FROM retained_windows WHERE window_start >= '2026-01-01 00:03:00+00')
SELECT (SELECT count(*) FROM (SELECT * FROM truth EXCEPT SELECT * FROM kept) d)
     + (SELECT count(*) FROM (SELECT * FROM kept EXCEPT SELECT * FROM truth) d),
       (SELECT count(*) FROM kept)
SQL

# exactly one row per window, readable by key
is(SdpTest::query($node, "SELECT count(*) - count(DISTINCT (definition, entity, window_start)) FROM payment_windows"),
	'0', 'one row per (definition, entity, window)');
ok(SdpTest::query($node, <<'SQL') =~ /Index Scan|Index Only Scan|Bitmap/, 'the last windows of a merchant are read by key through the index');
SET enable_seqscan = off;
EXPLAIN SELECT * FROM payment_windows WHERE definition = 'count_1m' AND entity = 'm00001'
 ORDER BY window_end DESC LIMIT 24
SQL

# definitions added to and dropped from the running flow
SdpTest::query($node, <<'SQL');
SELECT sdp_create_aggregation('payments_agg', 'late_added_count', group_by => ARRAY['country'],
  operation => 'count', window_size => '1 minute', allowance => '5 seconds');
SELECT sdp_drop_aggregation('payments_agg', 'count_1m');
SQL
my $r2 = SdpKafka::run_paymentsim(bootstrap => $broker->bootstrap, topic => 'payments',
	args => [ '--count', 6000, '--rate', 0, '--merchants', 50, '--event-time', 'fixed:2026-01-01T00:10:00Z',
			  '--step-ms', 10, '--seed', 10, '--seq-start', 30000 ]);
ok(SdpTest::wait_consumed($node, 'payments_agg', 36001), 'the next 6,000 consumed');
ok($node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM payment_windows WHERE definition = 'late_added_count' AND window_start >= '2026-01-01 00:10:00+00'"),
	'an aggregation added to the running flow emits windows');
is(SdpTest::query($node, "SELECT count(*) FROM payment_windows WHERE definition = 'count_1m' AND window_start >= '2026-01-01 00:10:00+00'"),
	'0', 'a dropped one emits no more');
is(SdpTest::query($node, <<'SQL'), '0', 'the added aggregation counts the events after it was added, exactly');
SET TimeZone = 'UTC';
SELECT count(*) FROM (
  SELECT country, date_bin('1 minute', event_ts, '1970-01-01 00:00:00+00') AS ws, count(*) AS n
    FROM payments_all WHERE seq >= 30000 AND seq < 1000000 GROUP BY 1, 2) e
  FULL JOIN (SELECT entity AS country, window_start AS ws, row_count AS n FROM payment_windows
              WHERE definition = 'late_added_count') w USING (country, ws)
 WHERE e.n IS DISTINCT FROM w.n
SQL

done_testing();
