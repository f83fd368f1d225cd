/* sdp_ext--0.1--0.2.sql: from 0.1 to 0.2 */

\echo Use "ALTER EXTENSION sdp_ext UPDATE" to load this file. \quit

-- Whether a flow has stored offsets before: set in the same transaction as
-- its first sdp.offsets rows, dumped and restored with sdp.flows.  A flow
-- that has, but has no sdp.offsets row at all (a restore puts sdp.flows back
-- before sdp.offsets), waits for its offsets instead of reading the topic
-- again from starting_offsets.
ALTER TABLE sdp.flows ADD COLUMN offsets_stored boolean NOT NULL DEFAULT false;
UPDATE sdp.flows f SET offsets_stored = true
 WHERE EXISTS (SELECT 1 FROM sdp.offsets o WHERE o.flow_id = f.id);

-- The launcher deletes dead letters older than sdp.dead_letter_retention in
-- batches: by this index, not by scanning the table.
CREATE INDEX dead_letters_created_at ON sdp.dead_letters (created_at);

-- Skipping a message (issue 11, item 2)
-- Messages a flow's owner asked it to skip with sdp_skip_message(): the
-- worker does not decode or write such a message, it dead-letters it (stage
-- 'skipped') in the transaction of the batch the message comes in.  A
-- request stays after it applied (a stateful flow replaying from its
-- checkpoint skips the message again; the dead letter is written once) and
-- goes with its flow.
CREATE TABLE sdp.skipped_messages (
    flow_id         bigint NOT NULL REFERENCES sdp.flows (id) ON DELETE CASCADE,
    kafka_partition integer NOT NULL CHECK (kafka_partition >= 0),
    kafka_offset    bigint NOT NULL CHECK (kafka_offset >= 0),
    requested_by    name NOT NULL,
    requested_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (flow_id, kafka_partition, kafka_offset)
);
GRANT SELECT ON sdp.skipped_messages TO PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('sdp.skipped_messages', '');

ALTER TABLE sdp.dead_letters DROP CONSTRAINT dead_letters_stage_check;
ALTER TABLE sdp.dead_letters ADD CONSTRAINT dead_letters_stage_check
    CHECK (stage IN ('decode', 'transform', 'write', 'late', 'skipped'));

CREATE FUNCTION sdp_skip_message(flow text, kafka_partition integer, kafka_offset bigint)
RETURNS void LANGUAGE C STRICT AS 'MODULE_PATHNAME', 'sdp_skip_message';
COMMENT ON FUNCTION sdp_skip_message(text, integer, bigint) IS
  'the flow sets the message at this partition and offset aside (sdp.dead_letters, stage skipped) instead of processing it';
