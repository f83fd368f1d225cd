/* sdp_ext--0.10--0.11.sql: sdp_alter_source, the compact sdp.flow_overview, sdp.flow_status made plainer */

\echo Use "ALTER EXTENSION sdp_ext UPDATE TO '0.11'" to load this file. \quit

-- issue 33: a source's brokers and client properties changed without
-- dropping its flows (options merged, a key set to null removed; checked as
-- sdp_create_source checks them, for its owner and for every flow's owner);
-- its flows restart at a batch boundary and keep their offsets.
CREATE FUNCTION sdp_alter_source(name text, bootstrap_servers text DEFAULT NULL, options jsonb DEFAULT NULL)
RETURNS void LANGUAGE C AS 'MODULE_PATHNAME', 'sdp_alter_source';
COMMENT ON FUNCTION sdp_alter_source(text, text, jsonb) IS
  'Change a source''s brokers and/or options (merged; a key set to null is removed); its flows restart at a batch boundary, keeping their offsets';

-- sdp.flow_status: a broker error is shown while it lasts (broker_ok false),
-- a partition's high watermark never below its committed offset (the
-- worker's view of the broker lags the commit by up to a fetch; NULL while
-- it is not known), and the
-- sink of a flow with one, in a last column.
CREATE OR REPLACE VIEW sdp.flow_status AS
SELECT f.name AS flow,
       f.owner,
       f.source,
       s.topic,
       f.target,
       f.operator,
       CASE WHEN f.failed_at IS NOT NULL THEN 'failed'
            WHEN NOT f.enabled THEN CASE WHEN r.pid IS NOT NULL THEN 'stopping' ELSE 'stopped' END
            ELSE coalesce(r.state, 'starting')
       END AS state,
       r.pid,
       p.lag,
       p.partitions,
       coalesce(r.messages_read, 0) AS messages_read,
       coalesce(r.rows_written, 0) AS rows_written,
       coalesce(r.rows_filtered, 0) AS rows_filtered,
       coalesce(r.rows_dead_lettered, 0) AS rows_dead_lettered,
       coalesce(r.rows_skipped, 0) AS rows_skipped,
       coalesce(r.batches, 0) AS batches,
       r.last_commit_at,
       r.broker_ok,
       CASE WHEN r.broker_ok THEN NULL ELSE r.broker_error END AS broker_error,
       CASE WHEN r.broker_ok THEN NULL ELSE r.broker_error_at END AS broker_error_at,
       -- the error of a failed flow only to the owner's roles (issue 11, item 4)
       CASE WHEN f.failed_at IS NULL THEN r.last_error
            WHEN pg_has_role(f.owner, 'USAGE') OR pg_has_role('pg_read_all_stats', 'USAGE') THEN f.last_error
            ELSE '<insufficient privilege>'
       END AS last_error,
       CASE WHEN f.failed_at IS NOT NULL THEN f.failed_at ELSE r.last_error_at END AS last_error_at,
       r.started_at,
       coalesce(r.restarts, 0) AS restarts,
       r.state_bytes,
       r.timers_fired,
       r.last_checkpoint_at,
       coalesce(r.rows_late, 0) AS rows_late,
       r.watermark,
       f.sink
  FROM sdp.flows f
  JOIN sdp.sources s ON s.name = f.source
  LEFT JOIN sdp_flow_runtime() r ON r.flow = f.name
  LEFT JOIN LATERAL (
        -- a running worker knows its offsets best (a stateful flow stores them at checkpoints)
        SELECT sum(greatest(rp.high_watermark - coalesce(rp.committed_offset, o.next_offset), 0)) AS lag,
               jsonb_agg(jsonb_build_object(
                   'partition', o.partition,
                   'committed_offset', coalesce(rp.committed_offset, o.next_offset),
                   'high_watermark', CASE WHEN rp.high_watermark IS NOT NULL
                                          THEN greatest(rp.high_watermark, coalesce(rp.committed_offset, o.next_offset)) END,
                   'lag', greatest(rp.high_watermark - coalesce(rp.committed_offset, o.next_offset), 0))
                         ORDER BY o.partition) AS partitions
          FROM sdp.offsets o
          LEFT JOIN sdp_flow_partitions(f.name) rp ON rp.partition = o.partition
         WHERE o.flow_id = f.id) p ON true;

-- The columns an operator reads first, one short row per flow.
CREATE VIEW sdp.flow_overview AS
SELECT flow,
       state,
       source,
       coalesce('sink ' || sink, target) AS writes_to,
       lag,
       messages_read,
       rows_written,
       rows_dead_lettered,
       last_commit_at,
       coalesce(last_error, broker_error) AS problem
  FROM sdp.flow_status;
GRANT SELECT ON sdp.flow_overview TO PUBLIC;
COMMENT ON VIEW sdp.flow_overview IS
  'One short row per flow: state, where it writes, lag, counts, last commit and the current problem (sdp.flow_status has every column)';

-- Flows run in the database sdp.database names only: say so when the
-- extension is made (or updated) in another one.
DO $$
BEGIN
  IF current_setting('sdp.database', true) IS NULL THEN
    RAISE WARNING 'sdp_ext is not loaded: no flow runs until it is'
      USING HINT = 'Add sdp_ext to shared_preload_libraries and restart the server.';
  ELSIF current_setting('sdp.database') <> current_database() THEN
    RAISE WARNING 'sdp_ext flows run in database "%", not in "%"', current_setting('sdp.database'), current_database()
      USING DETAIL = 'Sources and flows can be declared only in the database that sdp.database names.',
            HINT = format('Create the extension in database "%s", or set sdp.database = ''%s'' and restart the server.',
                          current_setting('sdp.database'), current_database());
  END IF;
END $$;
