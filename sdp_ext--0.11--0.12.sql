/* sdp_ext--0.11--0.12.sql: stateful processors written by the flow's owner (operator 'processor') and their state API */

\echo Use "ALTER EXTENSION sdp_ext UPDATE TO '0.12'" to load this file. \quit

-- issue 47: the state API of a processor's handlers.  Each acts on the key
-- whose rows or timer the handler is handling, and raises 55000 anywhere
-- else.  None is STRICT: a type's hint is a NULL of the type.  They change
-- state: VOLATILE, and never run in a parallel worker.
CREATE FUNCTION sdp_value(name text, hint anyelement) RETURNS anyelement
LANGUAGE C VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'sdp_value';
COMMENT ON FUNCTION sdp_value(text, anyelement) IS
  'Inside a processor''s handler: the value of a state variable of the key, NULL when unset (hint: NULL::its type)';
CREATE FUNCTION sdp_set_value(name text, v anyelement) RETURNS void
LANGUAGE C VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'sdp_set_value';
COMMENT ON FUNCTION sdp_set_value(text, anyelement) IS
  'Inside a processor''s handler: set a value variable of the key (NULL clears it)';
CREATE FUNCTION sdp_clear(name text) RETURNS void
LANGUAGE C VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'sdp_clear';
COMMENT ON FUNCTION sdp_clear(text) IS
  'Inside a processor''s handler: empty a variable of the key (a value, a list or a map)';
CREATE FUNCTION sdp_list(name text, hint anyarray) RETURNS anyarray
LANGUAGE C VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'sdp_list';
COMMENT ON FUNCTION sdp_list(text, anyarray) IS
  'Inside a processor''s handler: a list variable of the key, in the order appended (hint: NULL::its type[])';
CREATE FUNCTION sdp_list_append(name text, v anyelement) RETURNS void
LANGUAGE C VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'sdp_list_append';
COMMENT ON FUNCTION sdp_list_append(text, anyelement) IS
  'Inside a processor''s handler: append an element to a list variable of the key';
CREATE FUNCTION sdp_set_list(name text, a anyarray) RETURNS void
LANGUAGE C VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'sdp_set_list';
COMMENT ON FUNCTION sdp_set_list(text, anyarray) IS
  'Inside a processor''s handler: replace a list variable of the key';
CREATE FUNCTION sdp_map_get(name text, k anyelement, hint anycompatible) RETURNS anycompatible
LANGUAGE C VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'sdp_map_get';
COMMENT ON FUNCTION sdp_map_get(text, anyelement, anycompatible) IS
  'Inside a processor''s handler: the value of a map variable''s entry, NULL when absent (hint: NULL::the values'' type)';
CREATE FUNCTION sdp_map_put(name text, k anyelement, v anycompatible) RETURNS void
LANGUAGE C VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'sdp_map_put';
COMMENT ON FUNCTION sdp_map_put(text, anyelement, anycompatible) IS
  'Inside a processor''s handler: set an entry of a map variable of the key';
CREATE FUNCTION sdp_map_remove(name text, k anyelement) RETURNS boolean
LANGUAGE C VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'sdp_map_remove';
COMMENT ON FUNCTION sdp_map_remove(text, anyelement) IS
  'Inside a processor''s handler: remove an entry of a map variable of the key; whether it was there';
CREATE FUNCTION sdp_map_count(name text) RETURNS bigint
LANGUAGE C VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'sdp_map_count';
COMMENT ON FUNCTION sdp_map_count(text) IS
  'Inside a processor''s handler: the entries of a map variable of the key';
CREATE FUNCTION sdp_map_entries(name text, kh anyelement, vh anycompatible, OUT key anyelement, OUT value anycompatible)
RETURNS SETOF record LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100 AS 'MODULE_PATHNAME', 'sdp_map_entries';
COMMENT ON FUNCTION sdp_map_entries(text, anyelement, anycompatible) IS
  'Inside a processor''s handler: the entries of a map variable of the key, in no order (hints: NULL::the keys'' type, NULL::the values'' type)';
CREATE FUNCTION sdp_register_timer(at timestamptz, kind text DEFAULT 'processing_time') RETURNS void
LANGUAGE C VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'sdp_register_timer';
COMMENT ON FUNCTION sdp_register_timer(timestamptz, text) IS
  'Inside a processor''s handler: a timer of the key (processing_time or event_time); one per (at, kind)';
CREATE FUNCTION sdp_delete_timer(at timestamptz, kind text DEFAULT 'processing_time') RETURNS boolean
LANGUAGE C VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'sdp_delete_timer';
COMMENT ON FUNCTION sdp_delete_timer(timestamptz, text) IS
  'Inside a processor''s handler: delete a timer of the key; whether it was pending';
CREATE FUNCTION sdp_timers(OUT at timestamptz, OUT kind text) RETURNS SETOF record
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 10 AS 'MODULE_PATHNAME', 'sdp_timers';
COMMENT ON FUNCTION sdp_timers() IS
  'Inside a processor''s handler: the key''s pending timers, by time';
CREATE FUNCTION sdp_processing_time() RETURNS timestamptz
LANGUAGE C VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'sdp_processing_time';
COMMENT ON FUNCTION sdp_processing_time() IS
  'Inside a processor''s handler: the clock of its batch (ttl and processing-time timers count by it)';
CREATE FUNCTION sdp_watermark() RETURNS timestamptz
LANGUAGE C VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'sdp_watermark';
COMMENT ON FUNCTION sdp_watermark() IS
  'Inside a processor''s handler: the flow''s event-time watermark, NULL until known';
