=pod

=head1 NAME

SdpPayments - the payments aggregation setup shared by the window_agg TAP tests

=head1 DESCRIPTION

declare($node, $broker, %opts) creates, on a node with sdp_ext:

  payments_agg    a window_agg flow on topic 'payments' into payment_windows,
                  with six aggregations (count, sum, avg, ratio,
                  approx_distinct, and a hopping count), all with 1-minute
                  windows and a 5-second allowance
  payments_all    a stateless flow appending every message: the ground truth

With legacy_table => 1, payment_windows is made by hand in the earlier
layout of sdp_create_window_table (emission_id PRIMARY KEY, indexes on
(definition, entity, window_end) and window_end), which flows must keep
writing exactly: they upsert on the target's primary key, whatever it is.

expected($node) builds the table 'expected' of the windows a SQL GROUP BY
over payments_all gives (late events excluded), and compare($node, $label)
asserts that payment_windows equals it exactly, row for row (values of
count, sum, avg and ratio exactly; approx_distinct within 10%).

=cut

package SdpPayments;

use strict;
use warnings FATAL => 'all';
use feature 'signatures';
no warnings 'experimental::signatures';

use SdpKafka;
use SdpTest;
use Test::More;
use Time::HiRes ();

# the six aggregations of payments_agg (JSON), for tests that declare flows of their own like it
our $aggregations = <<'JSON';
[
  {"name": "count_1m", "group_by": ["merchant_id"], "operation": "count",
   "window_size": "1 minute", "allowance": "5 seconds"},
  {"name": "approved_volume_1m", "group_by": ["merchant_id", "country"], "operation": "sum", "value": "amount",
   "filter": "status = 'approved'", "window_size": "1 minute", "allowance": "5 seconds"},
  {"name": "avg_amount_1m", "group_by": ["country"], "operation": "avg", "value": "amount",
   "window_size": "1 minute", "allowance": "5 seconds"},
  {"name": "rejection_ratio_1m", "group_by": ["merchant_id"], "operation": "ratio",
   "filter": "status = 'rejected'", "denominator_filter": "true", "window_size": "1 minute", "allowance": "5 seconds"},
  {"name": "merchants_per_country", "group_by": ["country"], "operation": "approx_distinct", "value": "merchant_id",
   "window_size": "1 minute", "allowance": "5 seconds"},
  {"name": "method_counts_hop", "group_by": ["method"], "operation": "count",
   "window_size": "1 minute", "slide": "30 seconds", "allowance": "5 seconds"}]
JSON

sub declare ($node, $broker, %opts)
{
	my $checkpoint = $opts{checkpoint} // '1 second';
	my $table = $opts{legacy_table}
	  ? "CREATE TABLE payment_windows (emission_id text PRIMARY KEY, definition text NOT NULL, entity text NOT NULL,
  window_start timestamptz NOT NULL, window_end timestamptz NOT NULL, value double precision,
  row_count bigint NOT NULL, emitted_at timestamptz NOT NULL);
CREATE INDEX ON payment_windows (definition, entity, window_end);
CREATE INDEX ON payment_windows (window_end);"
	  : "SELECT sdp_create_window_table('payment_windows');";
	SdpTest::create_source($node, 'payments', $broker, 'payments');
	SdpTest::query($node, <<"SQL");
$table
CREATE TABLE payments_all (seq bigint, merchant_id text, country text, method text, status text,
                           amount numeric, event_ts timestamptz, late boolean,
                           kafka_partition int, kafka_offset bigint);
SELECT sdp_create_flow('payments_all', 'payments', 'payments_all',
  'seq bigint, merchant_id text, country text, method text, status text, amount numeric, event_ts timestamptz, late boolean');
SELECT sdp_create_flow('payments_agg', source => 'payments', target => 'payment_windows',
  schema   => 'merchant_id text, country text, method text, status text, amount numeric, event_ts timestamptz',
  operator => 'window_agg',
  options  => '{"event_time": "event_ts", "idle_timeout": "2 seconds", "checkpoint_interval": "$checkpoint"}');
SELECT sdp_load_aggregations('payments_agg', \$\$$aggregations\$\$);
SQL
	ok($node->poll_query_until('postgres',
			"SELECT count(*) = 2 FROM sdp.flow_status WHERE flow IN ('payments_agg', 'payments_all') AND state = 'running' AND partitions IS NOT NULL"),
		'payments flows running');
}

# One message two minutes of event time before the stream, so that the
# watermark exists before the stream: rows of a flow's very first batch have
# no watermark to be late against.  Two minutes, not less: once every
# partition is idle the watermark moves on with the wall clock, and the
# stream's first events (its clock starts at 00:00:00, up to 3 s earlier
# with --disorder-ms) must still be on time for every window they fall in
# when the stream starts, however long that takes (a warm-up at 00:00:00
# made them late for the windows ending at 00:00:00 after 5 s, and on time
# for the hopping window [23:59:30, 00:00:30): folded there and set aside
# as late, which the ground truth, built without the set-aside messages,
# cannot match).
#
# Then the flows' idle_timeout (2 s) passes, so that the stream's first
# batch is a partition resuming after idle_timeout: the other partitions,
# idle, then hold the watermark back until their own data comes or
# idle_timeout has passed again.  A stream that started sooner, while
# partition 0 still counted as active from the warm-up, was not a resume:
# Apache Kafka handed the flow a fetch with 172 messages of partition 0
# alone (8 s of event time, past the 5 s allowance), the other partitions
# counted as idle, and their first messages were late (test 030, kafka
# pass, two runs in three on 2026-12-03).
sub warm_up ($node, $broker)
{
	SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'payments', messages => [
		[ 'm00001', '{"seq": 1000000, "merchant_id": "m00001", "country": "US", "method": "card", "status": "approved", "amount": 1.00, "event_ts": "2025-12-31T23:58:00.000Z"}', 0 ] ]);
	ok(SdpTest::wait_consumed($node, 'payments_agg', 1), 'warm-up message consumed');
	ok($node->poll_query_until('postgres',
			"SELECT watermark IS NOT NULL FROM sdp.flow_status WHERE flow = 'payments_agg'"),
		'the watermark exists');
	Time::HiRes::sleep(2.5);
}

sub expected ($node)
{
	SdpTest::query($node, <<'SQL');
SET TimeZone = 'UTC';
DROP TABLE IF EXISTS good, expected, expected_distinct;
CREATE TABLE good AS
SELECT p.* FROM payments_all p
 WHERE NOT EXISTS (SELECT 1 FROM sdp.dead_letters d
                    WHERE d.flow = 'payments_agg' AND d.stage = 'late'
                      AND d.kafka_partition = p.kafka_partition AND d.kafka_offset = p.kafka_offset);
CREATE TABLE expected AS
WITH g AS (SELECT *, date_bin('1 minute', event_ts, '1970-01-01 00:00:00+00') AS ws FROM good),
     e AS (
  SELECT 'count_1m' AS d, merchant_id AS entity, ws, count(*)::float8 AS value, count(*) AS row_count
    FROM g GROUP BY merchant_id, ws
  UNION ALL
  SELECT 'approved_volume_1m', merchant_id || '|' || country, ws, sum(amount)::float8, count(*)
    FROM g WHERE status = 'approved' GROUP BY merchant_id, country, ws
  UNION ALL
  SELECT 'avg_amount_1m', country, ws, avg(amount)::float8, count(*) FROM g GROUP BY country, ws
  UNION ALL
  SELECT 'rejection_ratio_1m', merchant_id, ws, (count(*) FILTER (WHERE status = 'rejected'))::float8 / count(*), count(*)
    FROM g GROUP BY merchant_id, ws
  UNION ALL
  SELECT 'method_counts_hop', method, w.ws, count(*)::float8, count(*)
    FROM good, LATERAL (VALUES (date_bin('30 seconds', event_ts, '1970-01-01 00:00:00+00')),
                               (date_bin('30 seconds', event_ts, '1970-01-01 00:00:00+00') - interval '30 seconds')) w(ws)
   GROUP BY method, w.ws)
SELECT d || '/' || entity || '/' || to_char(ws, 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS emission_id, d AS definition,
       entity, ws AS window_start, value, row_count
  FROM e;
CREATE TABLE expected_distinct AS
SELECT 'merchants_per_country/' || country || '/' || to_char(date_bin('1 minute', event_ts, '1970-01-01 00:00:00+00'), 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS emission_id,
       count(DISTINCT merchant_id) AS distinct_merchants, count(*) AS row_count
  FROM good GROUP BY country, date_bin('1 minute', event_ts, '1970-01-01 00:00:00+00');
SQL
	return SdpTest::query($node, 'SELECT (SELECT count(*) FROM expected) + (SELECT count(*) FROM expected_distinct)');
}

sub compare ($node, $label)
{
	my ($n, $rows) = split /\|/, SdpTest::query($node, "SELECT count(*), sum(row_count) FROM expected WHERE definition = 'count_1m'");
	ok($n > 100, "$label: $n count windows over $rows rows");
	is(SdpTest::query($node, 'SELECT count(*) - count(DISTINCT emission_id) FROM payment_windows'), '0',
		"$label: no window twice");
	is(SdpTest::query($node, <<'SQL'), '', "$label: every window equals the SQL GROUP BY (count, sum, avg, ratio; hopping)");
SELECT string_agg(coalesce(e.emission_id, w.emission_id) || ' expected ' || coalesce(e.value::text, '-') || '/' || coalesce(e.row_count::text, '-')
                  || ' got ' || coalesce(w.value::text, '-') || '/' || coalesce(w.row_count::text, '-'), E'\n')
  FROM expected e FULL JOIN (SELECT * FROM payment_windows WHERE definition <> 'merchants_per_country') w USING (emission_id)
 WHERE e.value IS DISTINCT FROM w.value OR e.row_count IS DISTINCT FROM w.row_count
SQL
	is(SdpTest::query($node, <<'SQL'), '0|0', "$label: approx_distinct within 10% of the exact distinct count, row counts exact");
SELECT count(*) FILTER (WHERE w.emission_id IS NULL OR e.emission_id IS NULL
                           OR abs(w.value - e.distinct_merchants) > greatest(1, 0.10 * e.distinct_merchants)),
       count(*) FILTER (WHERE w.row_count IS DISTINCT FROM e.row_count)
  FROM expected_distinct e FULL JOIN (SELECT * FROM payment_windows WHERE definition = 'merchants_per_country') w USING (emission_id)
SQL
}

1;
