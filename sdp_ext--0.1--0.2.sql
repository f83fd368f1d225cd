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
