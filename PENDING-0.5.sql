-- issue 14 (sinks of flows with several workers): for sdp_ext--0.4--0.5.sql.
-- Each worker of a sink flow relays the outbox rows it wrote, with a
-- transactional producer of its own; a row says which worker wrote it (its
-- relay).  Rows written by 0.4 (one worker) are worker 0's, whose
-- transactional.id is the one 0.4 used.
ALTER TABLE sdp.outbox ADD COLUMN worker integer NOT NULL DEFAULT 0 CHECK (worker >= 0);
