-- sdp_reset_flow: every refusal that needs no broker (the TAP test
-- 046_reset_flow.pl resets flows against one).
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

-- No broker listens on port 9.
SELECT sdp_create_source('flights', '127.0.0.1:9', 'raw-flights');
CREATE TABLE events (seq bigint, kafka_partition int, kafka_offset bigint);
SELECT sdp_create_flow('ev', 'flights', 'events', 'seq bigint');

-- unknown flow
SELECT pg_temp.refused($$SELECT sdp_reset_flow('nope', 'earliest')$$);
-- a running flow: stop it first
SELECT pg_temp.refused($$SELECT sdp_reset_flow('ev', 'earliest')$$);
SELECT pg_temp.refused($$SELECT sdp_reset_flow('ev', '{"0": 1}'::jsonb)$$);
-- positions that are not one
SELECT pg_temp.refused($$SELECT sdp_reset_flow('ev', 'yesterday-ish')$$);
SELECT pg_temp.refused($$SELECT sdp_reset_flow('ev', 'infinity')$$);
SELECT pg_temp.refused($$SELECT sdp_reset_flow('ev', '{"0": 1}')$$);
SELECT pg_temp.refused($$SELECT sdp_reset_flow('ev', '[0, 1]'::jsonb)$$);
SELECT pg_temp.refused($$SELECT sdp_reset_flow('ev', '{}'::jsonb)$$);
SELECT pg_temp.refused($$SELECT sdp_reset_flow('ev', '{"zero": 1}'::jsonb)$$);
SELECT pg_temp.refused($$SELECT sdp_reset_flow('ev', '{"-1": 1}'::jsonb)$$);
SELECT pg_temp.refused($$SELECT sdp_reset_flow('ev', '{"0": "12"}'::jsonb)$$);
SELECT pg_temp.refused($$SELECT sdp_reset_flow('ev', '{"0": -5}'::jsonb)$$);
SELECT pg_temp.refused($$SELECT sdp_reset_flow('ev', '{"0": 1.5}'::jsonb)$$);
-- another role's flow
CREATE ROLE reset_other;
SET ROLE reset_other;
SELECT pg_temp.refused($$SELECT sdp_reset_flow('ev', 'earliest')$$);
RESET ROLE;
-- NULL arguments: the functions are strict
SELECT sdp_reset_flow('ev', NULL::text) IS NULL AS null_to, sdp_reset_flow(NULL, '{"0": 1}'::jsonb) IS NULL AS null_flow;

SELECT sdp_drop_flow('ev');
SELECT sdp_drop_source('flights');
DROP TABLE events;
DROP ROLE reset_other;
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
