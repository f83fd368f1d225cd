/* sdp_ext--0.9--0.10.sql: backfill a flow from a table, then hand over to Kafka (sdp_backfill) */

\echo Use "ALTER EXTENSION sdp_ext UPDATE TO '0.10'" to load this file. \quit

-- issue 31: a flow's history from a table (or a query), run by the flow's
-- own worker through its own transform and operator before it reads Kafka
-- from the boundary.  One row per flow; position is the last row done (its
-- order_by values as text), committed with that row's results (a stateful
-- flow's with its state checkpoint), so a backfill stopped or killed goes
-- on where it stopped.  The statements are built by sdp_backfill from the
-- owner's declaration and run by the worker as the owner.
CREATE TABLE sdp.backfills (
    flow_id      bigint PRIMARY KEY REFERENCES sdp.flows (id) ON DELETE CASCADE,
    source       text NOT NULL,          -- as given: a table or view, or a query
    order_by     text[] NOT NULL,
    boundary     jsonb NOT NULL,         -- where the flow reads Kafka from after it: {"partition": offset}
    fetch_first  text NOT NULL,
    fetch_next   text NOT NULL,
    rows_total   bigint NOT NULL,
    rows_done    bigint NOT NULL DEFAULT 0,
    position     text[],
    state        text NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'done')),
    started_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz,
    finished_at  timestamptz
);
GRANT SELECT ON sdp.backfills TO PUBLIC;

CREATE VIEW sdp.backfill_status AS
SELECT f.name AS flow, b.state, b.rows_done, b.rows_total,
       round(100.0 * b.rows_done / nullif(b.rows_total, 0), 1) AS percent,
       round(b.rows_done / nullif(extract(epoch FROM coalesce(b.finished_at, b.updated_at) - b.started_at), 0))::bigint
         AS rows_per_second,
       b.source, b.order_by, b.boundary, b.started_at, b.updated_at, b.finished_at
  FROM sdp.backfills b JOIN sdp.flows f ON f.id = b.flow_id;
GRANT SELECT ON sdp.backfill_status TO PUBLIC;

CREATE FUNCTION sdp_backfill(flow text, source text, "until" jsonb DEFAULT NULL,
                             order_by text[] DEFAULT NULL, start boolean DEFAULT true)
RETURNS jsonb LANGUAGE C AS 'MODULE_PATHNAME', 'sdp_backfill';
COMMENT ON FUNCTION sdp_backfill(text, text, jsonb, text[], boolean) IS
  'run a stopped flow over the rows of a table or query (its owner only), then on from the boundary in Kafka';

-- dumped with the flows, so that a restored flow goes on with its backfill
SELECT pg_catalog.pg_extension_config_dump('sdp.backfills', '');
