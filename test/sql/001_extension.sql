-- The extension installs its schema and catalogs, defines its GUCs, and its
-- launcher runs in sdp.database.
CREATE EXTENSION sdp_ext;

SELECT extname, extversion, extrelocatable FROM pg_extension WHERE extname = 'sdp_ext';
SELECT sdp_library_version() = extversion AS library_is_catalogs FROM pg_extension WHERE extname = 'sdp_ext';

SELECT c.relname, c.relkind
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'sdp' AND c.relkind IN ('r', 'v')
 ORDER BY c.relname;

-- column layout of the catalogs
SELECT table_name, column_name, data_type
  FROM information_schema.columns
 WHERE table_schema = 'sdp' AND table_name IN ('sources', 'flows', 'offsets', 'dead_letters')
 ORDER BY table_name, ordinal_position;

-- pg_dump keeps the catalogs' contents
SELECT c::regclass AS dumped
  FROM pg_extension, unnest(extconfig) AS c
 WHERE extname = 'sdp_ext' ORDER BY c::regclass::text;

-- credentials in sources are not readable by other roles
SELECT has_table_privilege('public', 'sdp.sources', 'SELECT') AS public_reads_sources,
       has_table_privilege('public', 'sdp.source_list', 'SELECT') AS public_reads_source_list,
       has_table_privilege('public', 'sdp.flows', 'SELECT') AS public_reads_flows;
-- flows are listed to all, their error texts (which quote messages) are not
SELECT has_column_privilege('public', 'sdp.flows', 'name', 'SELECT') AS public_reads_flow_names,
       has_column_privilege('public', 'sdp.flows', 'last_error', 'SELECT') AS public_reads_flow_errors;

-- GUCs
SHOW sdp.database;
SHOW sdp.max_flows;
SHOW sdp.launcher_naptime;
SHOW sdp.max_batch_rows;
SHOW sdp.state_memory_limit;
SELECT name, context, vartype FROM pg_settings WHERE name LIKE 'sdp.%' ORDER BY name;
SET sdp.max_flows = 3;            -- postmaster-level: refused
SET sdp.no_such_setting = 1;      -- the prefix is reserved: refused

-- The launcher runs in this database and says who it is.
DO $$
BEGIN
  FOR i IN 1..300 LOOP
    PERFORM pg_stat_clear_snapshot();  -- pg_stat_activity is read once per transaction otherwise
    PERFORM 1 FROM pg_stat_activity
      WHERE backend_type = 'sdp launcher' AND datname = current_database();
    EXIT WHEN FOUND;
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$;
SELECT backend_type, application_name, datname = current_database() AS in_sdp_database
  FROM pg_stat_activity WHERE backend_type = 'sdp launcher';

DROP EXTENSION sdp_ext;
SELECT count(*) AS sdp_schema_left FROM pg_namespace WHERE nspname = 'sdp';
