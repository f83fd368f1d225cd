/* sdp_ext--0.2--0.3.sql: several workers per flow (issue 12) */
\echo Use "ALTER EXTENSION sdp_ext UPDATE TO '0.3'" to load this file. \quit

-- A flow's workers (the flow option workers): each consumes its share of
-- the topic's partitions (partition p is worker p % workers's) and commits
-- its rows with its partitions' offsets.  sdp_flow_runtime() and
-- sdp.flow_status keep one row per flow (sums, the worst state); this is
-- one row per worker.
CREATE FUNCTION sdp_flow_worker_runtime(
    OUT flow text, OUT worker integer, OUT workers integer, OUT state text, OUT pid integer,
    OUT partitions integer[], OUT lag bigint,
    OUT messages_read bigint, OUT rows_written bigint, OUT rows_dead_lettered bigint,
    OUT batches bigint, OUT last_commit_at timestamptz,
    OUT last_error text, OUT last_error_at timestamptz,
    OUT started_at timestamptz, OUT restarts integer)
RETURNS SETOF record LANGUAGE C STRICT AS 'MODULE_PATHNAME', 'sdp_flow_worker_runtime';

CREATE VIEW sdp.flow_workers AS
SELECT r.flow, r.worker, r.workers, r.state, r.pid, r.partitions, r.lag,
       r.messages_read, r.rows_written, r.rows_dead_lettered, r.batches, r.last_commit_at,
       r.last_error, r.last_error_at, r.started_at, r.restarts
  FROM sdp_flow_worker_runtime() r
 ORDER BY r.flow, r.worker;
GRANT SELECT ON sdp.flow_workers TO PUBLIC;

-- Change a flow's number of workers: the launcher stops its workers and,
-- once all have gone, starts the new ones, each from its partitions'
-- committed offsets.
CREATE FUNCTION sdp_set_flow_workers(flow text, workers integer)
RETURNS void LANGUAGE C AS 'MODULE_PATHNAME', 'sdp_set_flow_workers';
COMMENT ON FUNCTION sdp_set_flow_workers(text, integer) IS
  'run the flow in that many workers (its owner only); they restart from the committed offsets';

-- Stateful flows with several workers: state is owned by Kafka partition.
-- Each checkpointed key records the partition that owns it (NULL: checkpointed
-- before 0.3, restored by worker 0), so that a worker restores the keys of
-- its partitions and a partition's state moves with its offsets when the
-- flow's workers change.  Each partition records the watermark of the worker
-- that had it at its last checkpoint; a worker restarts from the least of
-- its partitions'.  Both are nullable columns without defaults: adding them
-- rewrites nothing, and workers of 0.2 that run meanwhile name their
-- columns and do not see them.  sdp.offsets first: a checkpoint locks it
-- before sdp.state_checkpoints, and the update must take them in that order
-- too, or it could deadlock with a running stateful flow.
ALTER TABLE sdp.offsets ADD COLUMN watermark timestamptz;
ALTER TABLE sdp.state_checkpoints ADD COLUMN partition integer;
