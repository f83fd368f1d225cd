-- examples/payments.sql: the windowed aggregation library over payment events.
--
--   psql -v bootstrap=127.0.0.1:9092 -f examples/payments.sql
--
-- Needs sdp_ext created in sdp.database, and a Kafka topic "payments" with JSON
-- payment events (tools/payment_sim produces them).

SELECT sdp_create_source('payments', :'bootstrap', 'payments');

-- The static window schema: one row per (definition, entity, window).
SELECT sdp_create_window_table('payment_windows');

-- The flow and its definitions in one transaction: its worker starts, at
-- the commit, with all five.  (A definition added to a running flow counts
-- the events read after it: declared one by one, the last ones would miss
-- what the worker read meanwhile.)
BEGIN;

SELECT sdp_create_flow('payments_agg', source => 'payments', target => 'payment_windows',
  schema   => 'merchant_id text, country text, method text, status text,
               amount numeric, event_ts timestamptz',
  operator => 'window_agg',
  options  => '{"event_time": "event_ts", "idle_timeout": "10 seconds", "retention": "30 days"}');

-- Drops in approved volume, per merchant and country.
SELECT sdp_create_aggregation('payments_agg', 'approved_volume_10m',
  group_by => ARRAY['merchant_id','country'], operation => 'sum', value => 'amount',
  filter => $$status = 'approved'$$, window_size => '10 minutes', allowance => '30 seconds');

-- Rejection spikes, per merchant.
SELECT sdp_create_aggregation('payments_agg', 'rejection_ratio_10m',
  group_by => ARRAY['merchant_id'], operation => 'ratio',
  filter => $$status = 'rejected'$$, denominator_filter => 'true',
  window_size => '10 minutes', allowance => '30 seconds');

-- The same, kept in a file under version control: psql reads it into a variable.
--   \set defs `cat aggregations.json`
--   SELECT sdp_load_aggregations('payments_agg', :'defs');
SELECT sdp_load_aggregations('payments_agg', $$[
  {"name": "payments_1m", "group_by": ["merchant_id"], "operation": "count",
   "window_size": "1 minute", "allowance": "10 seconds"},
  {"name": "avg_ticket_1h", "group_by": ["country", "method"], "operation": "avg", "value": "amount",
   "window_size": "1 hour", "slide": "15 minutes", "allowance": "1 minute"},
  {"name": "merchants_per_country_1h", "group_by": ["country"], "operation": "approx_distinct",
   "value": "merchant_id", "window_size": "1 hour", "allowance": "1 minute"}
]$$);

COMMIT;

-- The last 24 windows of one merchant, by key (the primary key (definition, entity, window_end, window_start)):
--   SELECT window_start, value, row_count FROM payment_windows
--    WHERE definition = 'rejection_ratio_10m' AND entity = 'm00007'
--    ORDER BY window_end DESC LIMIT 24;
