-- Declaring processors (operator 'processor', issue 47): every declaration
-- that cannot work is refused with its errcode, a message naming what is
-- wrong and a hint, and creates nothing; a good one is stored.  The state
-- API raises 55000 outside a handler.
SET client_min_messages = warning;  -- (012 may have left it created)
CREATE EXTENSION IF NOT EXISTS sdp_ext;
RESET client_min_messages;

CREATE FUNCTION pg_temp.refused(stmt text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE st text; msg text; hint text;
BEGIN
  EXECUTE stmt;
  RETURN 'accepted';
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, hint = PG_EXCEPTION_HINT;
  RETURN st || ': ' || msg || CASE WHEN hint <> '' THEN ' | hint: ' || hint ELSE '' END;
END $$;

-- No broker listens on port 9: a flow declared here starts, and waits for it.
SELECT sdp_create_source('clicks', '127.0.0.1:9', 'clicks');

CREATE TABLE sessions (user_id text, started timestamptz, ended timestamptz, clicks int, urls text[],
                       PRIMARY KEY (user_id, started));
CREATE TYPE click AS (user_id text, url text, ts timestamptz);
CREATE TYPE click_url AS (url text);                       -- a subset of the columns
CREATE TYPE click_bad_col AS (user_id text, referrer text); -- a column the input lacks
CREATE TYPE click_bad_type AS (user_id text, ts date);      -- a column of another type
CREATE TYPE other_out AS (user_id text, clicks int);

CREATE FUNCTION s_rows(user_id text, rows click[]) RETURNS SETOF sessions LANGUAGE sql AS $$SELECT NULL::sessions WHERE false$$;
CREATE FUNCTION s_timer(user_id text, at timestamptz, kind text) RETURNS SETOF sessions LANGUAGE sql AS $$SELECT NULL::sessions WHERE false$$;
CREATE FUNCTION s_url_rows(user_id text, rows click_url[]) RETURNS SETOF sessions LANGUAGE sql AS $$SELECT NULL::sessions WHERE false$$;
CREATE FUNCTION s_bad_col(user_id text, rows click_bad_col[]) RETURNS SETOF sessions LANGUAGE sql AS $$SELECT NULL::sessions WHERE false$$;
CREATE FUNCTION s_bad_type(user_id text, rows click_bad_type[]) RETURNS SETOF sessions LANGUAGE sql AS $$SELECT NULL::sessions WHERE false$$;
-- the wrong shapes: a key of another type, rows not an array, rows not composite, a timer's time not timestamptz
CREATE FUNCTION s_int_key(user_id int, rows click[]) RETURNS SETOF sessions LANGUAGE sql AS $$SELECT NULL::sessions WHERE false$$;
CREATE FUNCTION s_not_array(user_id text, rows click) RETURNS SETOF sessions LANGUAGE sql AS $$SELECT NULL::sessions WHERE false$$;
CREATE FUNCTION s_text_array(user_id text, rows text[]) RETURNS SETOF sessions LANGUAGE sql AS $$SELECT NULL::sessions WHERE false$$;
CREATE FUNCTION s_one_arg(user_id text) RETURNS SETOF sessions LANGUAGE sql AS $$SELECT NULL::sessions WHERE false$$;
CREATE FUNCTION s_timer_ts(user_id text, at timestamp, kind text) RETURNS SETOF sessions LANGUAGE sql AS $$SELECT NULL::sessions WHERE false$$;
-- what they return: a record, one row, a scalar, another type than the others
CREATE FUNCTION s_record(user_id text, rows click[]) RETURNS SETOF record LANGUAGE sql AS $$SELECT 1, 2 WHERE false$$;
CREATE FUNCTION s_one_row(user_id text, rows click[]) RETURNS sessions LANGUAGE sql AS $$SELECT NULL::sessions$$;
CREATE FUNCTION s_scalar(user_id text, rows click[]) RETURNS SETOF int LANGUAGE sql AS $$SELECT 1 WHERE false$$;
CREATE FUNCTION s_other_timer(user_id text, at timestamptz, kind text) RETURNS SETOF other_out LANGUAGE sql AS $$SELECT NULL::other_out WHERE false$$;
-- two that match: rows of two composite types
CREATE FUNCTION s_twice(user_id text, rows click[]) RETURNS SETOF sessions LANGUAGE sql AS $$SELECT NULL::sessions WHERE false$$;
CREATE FUNCTION s_twice(user_id text, rows click_url[]) RETURNS SETOF sessions LANGUAGE sql AS $$SELECT NULL::sessions WHERE false$$;
-- an initial state's rows
CREATE TABLE seed (user_id text, started timestamptz);
CREATE TYPE seed_row AS (user_id text, started timestamptz);
CREATE TYPE seed_bad AS (user_id text, score int);
CREATE FUNCTION s_init(user_id text, r seed_row) RETURNS SETOF sessions LANGUAGE sql AS $$SELECT NULL::sessions WHERE false$$;
CREATE FUNCTION s_init_bad(user_id text, r seed_bad) RETURNS SETOF sessions LANGUAGE sql AS $$SELECT NULL::sessions WHERE false$$;

-- a helper: declare sessions_flow with these options (merged into a good set)
CREATE FUNCTION pg_temp.declare(options text, source text DEFAULT 'clicks') RETURNS text LANGUAGE sql AS $$
  SELECT pg_temp.refused(format($f$SELECT sdp_create_flow('sessions_flow', %L, 'sessions',
    schema => 'user_id text, url text, ts timestamptz', operator => 'processor', options => %L)$f$, source,
    '{"key": "user_id", "handle_rows": "s_rows", "handle_timer": "s_timer", "event_time": "ts",
      "state": {"started": {"value": "timestamptz"}, "urls": {"list": "text"}}}'::jsonb || options::jsonb))
$$;

-- the key and handle_rows
SELECT pg_temp.declare('{"key": null}');
SELECT pg_temp.declare('{"key": "nope"}');
SELECT pg_temp.declare('{"handle_rows": null}');
SELECT pg_temp.declare('{"handle_rows": ""}');
SELECT pg_temp.declare('{"handle_colour": "s_rows"}');
-- a handler that does not exist, or not of the signature expected (the message names it)
SELECT pg_temp.declare('{"handle_rows": "no_such_function"}');
SELECT pg_temp.declare('{"handle_rows": "no_schema.s_rows"}');
SELECT pg_temp.declare('{"handle_rows": "s_int_key"}');
SELECT pg_temp.declare('{"handle_rows": "s_not_array"}');
SELECT pg_temp.declare('{"handle_rows": "s_text_array"}');
SELECT pg_temp.declare('{"handle_rows": "s_one_arg"}');
SELECT pg_temp.declare('{"handle_rows": "s_timer"}');
SELECT pg_temp.declare('{"handle_timer": "s_rows"}');
SELECT pg_temp.declare('{"handle_timer": "s_timer_ts"}');
SELECT pg_temp.declare('{"handle_rows": "s_rows(text, click[])"}');
-- two that match
SELECT pg_temp.declare('{"handle_rows": "s_twice"}');
-- what a handler returns: SETOF a composite type, the same for every handler
SELECT pg_temp.declare('{"handle_rows": "s_record"}');
SELECT pg_temp.declare('{"handle_rows": "s_one_row"}');
SELECT pg_temp.declare('{"handle_rows": "s_scalar"}');
SELECT pg_temp.declare('{"handle_timer": "s_other_timer"}');
-- the rows' composite: its columns are matched by name to the input's, each of the same type
SELECT pg_temp.declare('{"handle_rows": "s_bad_col"}');
SELECT pg_temp.declare('{"handle_rows": "s_bad_type"}');
-- the event time: a timestamptz column of the input
SELECT pg_temp.declare('{"event_time": "nope"}');
SELECT pg_temp.declare('{"event_time": "url"}');
SELECT pg_temp.declare('{"event_time": "ts", "idle_timeout": "never"}');
SELECT count(*) AS flows FROM sdp.flows;
DO $$ BEGIN PERFORM sdp_drop_flow(name) FROM sdp.flows; END $$;  -- (one accepted would be in the way of the next)
-- the state
SELECT pg_temp.declare('{"state": "started timestamptz"}');
SELECT pg_temp.declare('{"state": {"started": "timestamptz"}}');
SELECT pg_temp.declare('{"state": {"started": {"set": "timestamptz"}}}');
SELECT pg_temp.declare('{"state": {"started": {"value": "timestamptz", "list": "text"}}}');
SELECT pg_temp.declare('{"state": {"started": {"value": "timestamptz", "colour": "blue"}}}');
SELECT pg_temp.declare('{"state": {"started": {"value": "no_such_type"}}}');
SELECT pg_temp.declare('{"state": {"started": {"value": 42}}}');
SELECT pg_temp.declare('{"state": {"started": {"value": "anyelement"}}}');
SELECT pg_temp.declare('{"state": {"started": {"value": "timestamptz; DROP TABLE seed"}}}');
SELECT pg_temp.declare('{"state": {"seen": {"map": "text"}}}');
SELECT pg_temp.declare('{"state": {"seen": {"map": ["text"]}}}');
SELECT pg_temp.declare('{"state": {"seen": {"map": ["text", "no_such_type"]}}}');
SELECT pg_temp.declare('{"state": {"seen": {"map": ["text", "bigint"], "ttl": "soon"}}}');
SELECT pg_temp.declare('{"state": {"seen": {"map": ["text", "bigint"], "ttl": "-1 hour"}}}');
SELECT pg_temp.declare('{"state": {"seen": {"map": ["text", "bigint"], "ttl": 3600}}}');
-- the initial state: both options or neither, a single SELECT with the key column, its
-- handler's rows matched by name to the query's columns
SELECT pg_temp.declare('{"initial_state": "SELECT user_id, started FROM seed"}');
SELECT pg_temp.declare('{"handle_initial_state": "s_init"}');
SELECT pg_temp.declare('{"handle_initial_state": "s_init", "initial_state": "SELECT started FROM seed"}');
SELECT pg_temp.declare('{"handle_initial_state": "s_init", "initial_state": "DELETE FROM seed RETURNING *"}');
SELECT pg_temp.declare('{"handle_initial_state": "s_init", "initial_state": "SELECT user_id, started FROM seed; SELECT 1"}');
SELECT pg_temp.declare('{"handle_initial_state": "s_init", "initial_state": ""}');
SELECT pg_temp.declare('{"handle_initial_state": "s_init", "initial_state": "-- nothing but a comment"}');
SELECT pg_temp.declare('{"handle_initial_state": "s_init", "initial_state": "SELEC user_id FROM seed"}');
SELECT pg_temp.declare('{"handle_initial_state": "s_init", "initial_state": "SELECT user_id, started FROM no_such_table"}');
SELECT pg_temp.declare('{"handle_initial_state": "s_init_bad", "initial_state": "SELECT user_id, started FROM seed"}');
SELECT pg_temp.declare('{"handle_initial_state": "s_rows", "initial_state": "SELECT user_id, started FROM seed"}');
-- nothing was created by any of them
SELECT count(*) AS flows FROM sdp.flows;

-- good ones: the columns matched by name (a subset), an event time, a ttl; the initial state
SELECT pg_temp.declare('{"handle_rows": "s_url_rows", "state": {"seen": {"map": ["text", "bigint"], "ttl": "1 hour"}}}');
SELECT name, operator, options - 'search_path' AS options FROM sdp.flows;
SELECT sdp_drop_flow('sessions_flow');
SELECT pg_temp.declare('{"handle_initial_state": "s_init", "initial_state": "SELECT started, user_id, 1 AS extra FROM seed"}');
SELECT sdp_drop_flow('sessions_flow');
-- a handler named with its schema, and no state or timer at all
SELECT pg_temp.refused($$SELECT sdp_create_flow('plain', 'clicks', 'sessions', 'user_id text, url text, ts timestamptz',
  operator => 'processor', options => '{"key": "user_id", "handle_rows": "public.s_rows"}')$$);
SELECT sdp_drop_flow('plain');

-- the owner must be allowed to run the handlers
CREATE ROLE sdp_proc_owner LOGIN;
GRANT INSERT, UPDATE, SELECT ON sessions TO sdp_proc_owner;
REVOKE EXECUTE ON FUNCTION s_timer(text, timestamptz, text) FROM PUBLIC;
SET ROLE sdp_proc_owner;
SELECT sdp_create_source('owner_clicks', '127.0.0.1:9', 'clicks');
SELECT pg_temp.declare('{}', 'owner_clicks');
SELECT pg_temp.declare('{"handle_timer": null}', 'owner_clicks');
SELECT sdp_drop_flow('sessions_flow');
RESET ROLE;
GRANT EXECUTE ON FUNCTION s_timer(text, timestamptz, text) TO sdp_proc_owner;
SET ROLE sdp_proc_owner;
SELECT pg_temp.declare('{}', 'owner_clicks');
SELECT owner, name FROM sdp.flows;
SELECT sdp_drop_flow('sessions_flow');
SELECT sdp_drop_source('owner_clicks');
RESET ROLE;

-- the state API outside a handler: 55000, whoever calls it
SELECT pg_temp.refused($$SELECT sdp_value('started', NULL::timestamptz)$$);
SELECT pg_temp.refused($$SELECT sdp_set_value('started', now())$$);
SELECT pg_temp.refused($$SELECT sdp_clear('started')$$);
SELECT pg_temp.refused($$SELECT sdp_list('urls', NULL::text[])$$);
SELECT pg_temp.refused($$SELECT sdp_list_append('urls', 'x'::text)$$);
SELECT pg_temp.refused($$SELECT sdp_set_list('urls', '{}'::text[])$$);
SELECT pg_temp.refused($$SELECT sdp_map_get('seen', 'x'::text, NULL::bigint)$$);
SELECT pg_temp.refused($$SELECT sdp_map_put('seen', 'x'::text, 1::bigint)$$);
SELECT pg_temp.refused($$SELECT sdp_map_remove('seen', 'x'::text)$$);
SELECT pg_temp.refused($$SELECT sdp_map_count('seen')$$);
SELECT pg_temp.refused($$SELECT * FROM sdp_map_entries('seen', NULL::text, NULL::bigint)$$);
SELECT pg_temp.refused($$SELECT sdp_register_timer(now())$$);
SELECT pg_temp.refused($$SELECT sdp_delete_timer(now(), 'event_time')$$);
SELECT pg_temp.refused($$SELECT * FROM sdp_timers()$$);
SELECT pg_temp.refused($$SELECT sdp_processing_time()$$);
SELECT pg_temp.refused($$SELECT sdp_watermark()$$);
SET ROLE sdp_proc_owner;
SELECT pg_temp.refused($$SELECT sdp_value('started', NULL::timestamptz)$$);
RESET ROLE;
-- and from a function that a handler could be, called directly
SELECT pg_temp.refused($$SELECT * FROM s_url_rows('u1', ARRAY[ROW('https://x')::click_url])$$);
CREATE FUNCTION s_reads(user_id text, rows click[]) RETURNS SETOF sessions LANGUAGE plpgsql AS $$
BEGIN
  RETURN NEXT ROW(user_id, sdp_value('started', NULL::timestamptz), NULL, 0, '{}')::sessions;
END $$;
SELECT pg_temp.refused($$SELECT * FROM s_reads('u1', '{}')$$);

-- the workers go away before the extension does (as in 003)
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
SELECT sdp_drop_source('clicks');
DROP EXTENSION sdp_ext;
DROP FUNCTION s_rows, s_timer, s_url_rows, s_bad_col, s_bad_type, s_int_key, s_not_array, s_text_array, s_one_arg,
  s_timer_ts, s_record, s_one_row, s_scalar, s_other_timer, s_init, s_init_bad, s_reads;
DROP FUNCTION s_twice(text, click[]), s_twice(text, click_url[]);
DROP TABLE sessions, seed;
DROP TYPE click, click_url, click_bad_col, click_bad_type, other_out, seed_row, seed_bad;
DROP OWNED BY sdp_proc_owner;
DROP ROLE sdp_proc_owner;
