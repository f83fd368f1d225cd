-- examples/sessions.sql: sessions per user with an event-time gap, a
-- stateful processor written in PL/pgSQL (operator 'processor').
--
--   psql -v bootstrap=127.0.0.1:9092 -f examples/sessions.sql
--   psql -v bootstrap=... -v source_options='{"fetch.wait.max.ms": "1"}' -f examples/sessions.sql
--
-- Reads the topic clicks (JSON: {"user_id": ..., "url": ..., "ts": ...},
-- keyed by user, each user's clicks in the order of their time).  A user's
-- session is a run of clicks no more than 30 minutes apart in event time: a
-- click later than that closes the session and starts the next one; an
-- event-time timer at the last click plus the gap closes it when the
-- watermark passes (no click came in time).  A closed session is written
-- once into sessions, with its clicks' URLs in order.

CREATE TABLE sessions (
    user_id text,
    started timestamptz,
    ended   timestamptz NOT NULL,
    clicks  int NOT NULL,
    urls    text[] NOT NULL,
    PRIMARY KEY (user_id, started)
);

-- the rows the handlers get and the gap between sessions
CREATE TYPE click AS (user_id text, url text, ts timestamptz);
CREATE FUNCTION session_gap() RETURNS interval LANGUAGE sql IMMUTABLE AS $$SELECT interval '30 minutes'$$;

-- the user's open session as a row of sessions, and nothing kept of it
CREATE FUNCTION session_close(user_id text) RETURNS SETOF sessions LANGUAGE plpgsql AS $$
DECLARE
  urls text[] := sdp_list('urls', NULL::text[]);
BEGIN
  IF sdp_value('started', NULL::timestamptz) IS NOT NULL THEN
    RETURN NEXT ROW(user_id, sdp_value('started', NULL::timestamptz), sdp_value('last', NULL::timestamptz),
                    cardinality(urls), urls)::sessions;
  END IF;
  PERFORM sdp_clear('started');
  PERFORM sdp_clear('last');
  PERFORM sdp_clear('urls');
END $$;

CREATE FUNCTION sessionize_rows(user_id text, rows click[]) RETURNS SETOF sessions LANGUAGE plpgsql AS $$
DECLARE
  c click;
  last timestamptz;
BEGIN
  FOREACH c IN ARRAY rows LOOP
    last := sdp_value('last', NULL::timestamptz);
    IF last IS NOT NULL AND c.ts - last > session_gap() THEN
      PERFORM sdp_delete_timer(last + session_gap(), 'event_time');
      RETURN QUERY SELECT * FROM session_close(user_id);
      last := NULL;
    END IF;
    IF last IS NULL THEN
      PERFORM sdp_set_value('started', c.ts);
    ELSE
      PERFORM sdp_delete_timer(last + session_gap(), 'event_time');
    END IF;
    PERFORM sdp_set_value('last', greatest(c.ts, last));
    PERFORM sdp_list_append('urls', c.url);
    PERFORM sdp_register_timer(greatest(c.ts, last) + session_gap(), 'event_time');
  END LOOP;
END $$;

-- no click within the gap: the watermark passed the session's end
CREATE FUNCTION sessionize_timer(user_id text, at timestamptz, kind text) RETURNS SETOF sessions LANGUAGE plpgsql AS $$
BEGIN
  RETURN QUERY SELECT * FROM session_close(user_id);
END $$;

\if :{?source_options}
\else
\set source_options '{}'
\endif
SELECT sdp_create_source('clicks', :'bootstrap', 'clicks', :'source_options');

SELECT sdp_create_flow('sessions_flow', source => 'clicks', target => 'sessions',
  schema   => 'user_id text, url text, ts timestamptz',
  operator => 'processor',
  options  => '{"key": "user_id", "event_time": "ts", "idle_timeout": "2 seconds",
                "handle_rows": "sessionize_rows", "handle_timer": "sessionize_timer",
                "state": {"started": {"value": "timestamptz"}, "last": {"value": "timestamptz"},
                          "urls": {"list": "text"}}}');
