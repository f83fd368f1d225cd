-- The windowed aggregation library: window_agg flows and their aggregation
-- definitions, every refusal with its SQLSTATE.
CREATE EXTENSION sdp_ext;

CREATE FUNCTION pg_temp.refused(stmt text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE st text; msg text; hint text;
BEGIN
  EXECUTE stmt;
  RETURN 'accepted';
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, hint = PG_EXCEPTION_HINT;
  RETURN st || ': ' || msg || CASE WHEN hint <> '' THEN ' | hint: ' || hint ELSE '' END;
END $$;

SELECT sdp_create_source('payments', '127.0.0.1:9', 'payments');

-- the helper creates the static window schema: the window as the primary key,
-- which serves key-range reads, a BRIN index on window_end, text in byte order
SELECT sdp_create_window_table('payment_windows');
SELECT column_name, data_type, collation_name FROM information_schema.columns
 WHERE table_name = 'payment_windows' ORDER BY ordinal_position;
SELECT indexdef FROM pg_indexes WHERE tablename = 'payment_windows' ORDER BY indexname;
CREATE TABLE not_windows (id text PRIMARY KEY, v int);

-- the flow
SELECT pg_temp.refused($$SELECT sdp_create_flow('p', 'payments', 'payment_windows',
  'merchant_id text, amount numeric, event_ts timestamptz', operator => 'window_agg')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('p', 'payments', 'payment_windows',
  'merchant_id text, amount numeric, event_ts timestamptz', operator => 'window_agg', options => '{"event_time": "amount"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('p', 'payments', 'payment_windows',
  'merchant_id text, amount numeric, event_ts timestamptz', operator => 'window_agg', options => '{"event_time": "ts"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('p', 'payments', 'payment_windows',
  'merchant_id text, amount numeric, event_ts timestamptz', operator => 'window_agg',
  options => '{"event_time": "event_ts", "idle_timeout": "0"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('p', 'payments', 'payment_windows',
  'merchant_id text, amount numeric, event_ts timestamptz', operator => 'window_agg',
  options => '{"event_time": "event_ts", "window": "1 minute"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('p', 'payments', 'not_windows',
  'merchant_id text, amount numeric, event_ts timestamptz', operator => 'window_agg', options => '{"event_time": "event_ts"}')$$);
SELECT sdp_create_flow('payments_agg', source => 'payments', target => 'payment_windows',
  schema   => 'merchant_id text, country text, method text, status text, amount numeric, event_ts timestamptz',
  operator => 'window_agg',
  options  => '{"event_time": "event_ts", "idle_timeout": "10 seconds", "retention": "30 days"}');
SELECT name, operator, options FROM sdp.flows;

-- the declarations of the seed
SELECT sdp_create_aggregation('payments_agg', 'approved_volume_10m',
  group_by => ARRAY['merchant_id','country'], operation => 'sum', value => 'amount',
  filter => $$status = 'approved'$$, window_size => '10 minutes', allowance => '30 seconds');
SELECT sdp_create_aggregation('payments_agg', 'rejection_ratio_10m',
  group_by => ARRAY['merchant_id'], operation => 'ratio',
  filter => $$status = 'rejected'$$, denominator_filter => 'true',
  window_size => '10 minutes', allowance => '30 seconds');
SELECT sdp_load_aggregations('payments_agg', $$[
  {"name": "payments_1m", "group_by": ["merchant_id"], "operation": "count", "window_size": "1 minute"},
  {"name": "avg_amount_1h", "group_by": ["country", "method"], "operation": "avg", "value": "amount",
   "window_size": "1 hour", "slide": "15 minutes", "allowance": "1 minute"},
  {"name": "merchants_per_country", "group_by": ["country"], "operation": "approx_distinct",
   "value": "merchant_id", "window_size": "1 hour"}]$$::jsonb);
SELECT name, group_by, operation, value, filter, denominator_filter, window_size, allowance, slide
  FROM sdp.aggregations ORDER BY name;

-- refusals
SELECT pg_temp.refused($$SELECT sdp_create_aggregation('nope', 'x', ARRAY['merchant_id'], 'count', window_size => '1 minute')$$);
CREATE TABLE plain (merchant_id text);
SELECT sdp_create_flow('plain_flow', 'payments', 'plain', 'merchant_id text');
SELECT pg_temp.refused($$SELECT sdp_create_aggregation('plain_flow', 'x', ARRAY['merchant_id'], 'count', window_size => '1 minute')$$);
SELECT pg_temp.refused($$SELECT sdp_create_aggregation('payments_agg', 'Bad Name', ARRAY['merchant_id'], 'count', window_size => '1 minute')$$);
SELECT pg_temp.refused($$SELECT sdp_create_aggregation('payments_agg', 'x', ARRAY['merchant_id'], 'median', value => 'amount', window_size => '1 minute')$$);
SELECT pg_temp.refused($$SELECT sdp_create_aggregation('payments_agg', 'x', ARRAY['merchant_id'], 'count')$$);
SELECT pg_temp.refused($$SELECT sdp_create_aggregation('payments_agg', 'x', ARRAY['merchant_id'], 'count', window_size => '0 seconds')$$);
SELECT pg_temp.refused($$SELECT sdp_create_aggregation('payments_agg', 'x', ARRAY['merchant_id'], 'count', window_size => '-1 minute')$$);
SELECT pg_temp.refused($$SELECT sdp_create_aggregation('payments_agg', 'x', ARRAY['merchant_id'], 'count', window_size => '1 minute', allowance => '-1 second')$$);
SELECT pg_temp.refused($$SELECT sdp_create_aggregation('payments_agg', 'x', ARRAY['merchant_id'], 'count', window_size => '1 minute', slide => '25 seconds')$$);
SELECT pg_temp.refused($$SELECT sdp_create_aggregation('payments_agg', 'x', ARRAY['merchant'], 'count', window_size => '1 minute')$$);
SELECT pg_temp.refused($$SELECT sdp_create_aggregation('payments_agg', 'x', ARRAY['merchant_id'], 'sum', window_size => '1 minute')$$);
SELECT pg_temp.refused($$SELECT sdp_create_aggregation('payments_agg', 'x', ARRAY['merchant_id'], 'sum', value => 'total', window_size => '1 minute')$$);
SELECT pg_temp.refused($$SELECT sdp_create_aggregation('payments_agg', 'x', ARRAY['merchant_id'], 'sum', value => 'status', window_size => '1 minute')$$);
SELECT pg_temp.refused($$SELECT sdp_create_aggregation('payments_agg', 'x', ARRAY['merchant_id'], 'count', filter => 'status = ', window_size => '1 minute')$$);
SELECT pg_temp.refused($$SELECT sdp_create_aggregation('payments_agg', 'x', ARRAY['merchant_id'], 'count', filter => 'true) FROM pg_class --', window_size => '1 minute')$$);
SELECT pg_temp.refused($$SELECT sdp_create_aggregation('payments_agg', 'x', ARRAY['merchant_id'], 'count', filter => 'amount', window_size => '1 minute')$$);
SELECT pg_temp.refused($$SELECT sdp_create_aggregation('payments_agg', 'x', ARRAY['merchant_id'], 'count', filter => 'state = 1', window_size => '1 minute')$$);
SELECT pg_temp.refused($$SELECT sdp_create_aggregation('payments_agg', 'x', ARRAY['merchant_id'], 'count', denominator_filter => 'true', window_size => '1 minute')$$);
-- filters work row by row, like transforms: a subquery may read other tables, not the batch again
SELECT pg_temp.refused($$SELECT sdp_create_aggregation('payments_agg', 'x', ARRAY['merchant_id'], 'count', filter => 'amount > (SELECT avg(amount) FROM input)', window_size => '1 minute')$$);
SELECT pg_temp.refused($$SELECT sdp_create_aggregation('payments_agg', 'x', ARRAY['merchant_id'], 'ratio', filter => 'amount > (SELECT max(amount) FROM r)', window_size => '1 minute')$$);
SELECT pg_temp.refused($$SELECT sdp_create_aggregation('payments_agg', 'x', ARRAY['merchant_id'], 'count', filter => 'EXISTS (SELECT 1 FROM input i WHERE i.amount > 100)', window_size => '1 minute')$$);
BEGIN;
SELECT pg_temp.refused($$SELECT sdp_create_aggregation('payments_agg', 'x', ARRAY['merchant_id'], 'count', filter => 'merchant_id IN (SELECT id FROM not_windows)', window_size => '1 minute')$$);
ROLLBACK;
SELECT pg_temp.refused($$SELECT sdp_create_aggregation('payments_agg', 'payments_1m', ARRAY['merchant_id'], 'count', window_size => '1 minute')$$);
SELECT pg_temp.refused($$SELECT sdp_load_aggregations('payments_agg', '{"name": "x"}')$$);
SELECT pg_temp.refused($$SELECT sdp_load_aggregations('no_such_flow', '[]')$$);
SELECT pg_temp.refused($$SELECT sdp_load_aggregations('payments_agg', '[{"name": "x", "operation": "count", "window_size": "1 minute", "colour": "red"}]')$$);
SELECT pg_temp.refused($$SELECT sdp_load_aggregations('payments_agg', '[{"name": "ok1", "operation": "count", "group_by": [], "window_size": "1 minute"}, {"name": "bad", "operation": "count", "window_size": "0"}]')$$);
SELECT pg_temp.refused($$SELECT sdp_drop_aggregation('payments_agg', 'nope')$$);
-- none of the refused ones were stored (the load is all or nothing)
SELECT count(*) AS aggregations FROM sdp.aggregations;

-- only the flow's owner declares its aggregations
CREATE ROLE sdp_analyst LOGIN;
GRANT sdp_analyst TO CURRENT_USER;
SET ROLE sdp_analyst;
SELECT pg_temp.refused($$SELECT sdp_create_aggregation('payments_agg', 'mine', ARRAY['merchant_id'], 'count', window_size => '1 minute')$$);
RESET ROLE;

-- replace by loading, drop
SELECT sdp_load_aggregations('payments_agg', '[{"name": "payments_1m", "group_by": ["merchant_id", "method"], "operation": "count", "window_size": "1 minute"}]');
SELECT name, group_by FROM sdp.aggregations WHERE name = 'payments_1m';
SELECT sdp_drop_aggregation('payments_agg', 'payments_1m');
SELECT count(*) AS aggregations FROM sdp.aggregations;
-- dropping the flow drops its aggregations
SELECT sdp_drop_flow('payments_agg');
SELECT count(*) AS aggregations FROM sdp.aggregations;

SELECT sdp_drop_flow('plain_flow');
SELECT sdp_drop_source('payments');
-- the workers go away before the extension does (a worker still in a
-- transaction could deadlock with DROP EXTENSION): no flow worker and no
-- flow slot for a whole second, so that a launcher pass that raced the
-- drops (it read the flows just before) has ended too
DO $$
DECLARE clean int := 0;
BEGIN
  FOR i IN 1..600 LOOP
    PERFORM pg_stat_clear_snapshot();  -- pg_stat_activity is read once per transaction otherwise
    PERFORM 1 FROM pg_stat_activity WHERE backend_type = 'sdp flow'
    UNION ALL SELECT 1 FROM sdp_flow_runtime();
    IF FOUND THEN clean := 0; ELSE clean := clean + 1; END IF;
    EXIT WHEN clean >= 10;
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$;
SELECT count(*) AS flow_workers FROM pg_stat_activity WHERE backend_type = 'sdp flow';
DROP EXTENSION sdp_ext;
DROP TABLE payment_windows, not_windows, plain;
DROP ROLE sdp_analyst;
