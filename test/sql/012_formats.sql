-- The formats: Avro values read as a flow reads them (sdp_avro_to_json, with
-- bytes written by fastavro 1.13 for a schema with every type and logical
-- type), the declarations of Avro sources that cannot work, and defaults.
CREATE EXTENSION sdp_ext;

CREATE FUNCTION pg_temp.refused(stmt text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE st text; msg text; detail text; hint text;
BEGIN
  EXECUTE stmt;
  RETURN 'accepted';
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
  RETURN st || ': ' || msg || CASE WHEN detail <> '' THEN ' | detail: ' || detail ELSE '' END
            || CASE WHEN hint <> '' THEN ' | hint: ' || hint ELSE '' END;
END $$;

CREATE TABLE avro_schema (s text);
INSERT INTO avro_schema VALUES ('{"type": "record", "name": "All", "namespace": "t", "fields": [{"name": "i", "type": "int"}, {"name": "l", "type": "long"}, {"name": "f", "type": "float"}, {"name": "d", "type": "double"}, {"name": "b", "type": "boolean"}, {"name": "s", "type": "string"}, {"name": "by", "type": "bytes"}, {"name": "n", "type": ["null", "string"]}, {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}}, {"name": "fx", "type": {"type": "fixed", "name": "F2", "size": 2}}, {"name": "arr", "type": {"type": "array", "items": "int"}}, {"name": "m", "type": {"type": "map", "values": "long"}}, {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}}, {"name": "decf", "type": {"type": "fixed", "name": "D3", "size": 3, "logicalType": "decimal", "precision": 6, "scale": 3}}, {"name": "dt", "type": {"type": "int", "logicalType": "date"}}, {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}}, {"name": "tu", "type": {"type": "long", "logicalType": "time-micros"}}, {"name": "tsm", "type": {"type": "long", "logicalType": "timestamp-millis"}}, {"name": "tsu", "type": {"type": "long", "logicalType": "timestamp-micros"}}, {"name": "ltsu", "type": {"type": "long", "logicalType": "local-timestamp-micros"}}, {"name": "u", "type": {"type": "string", "logicalType": "uuid"}}, {"name": "nested", "type": {"type": "record", "name": "Pos", "fields": [{"name": "lat", "type": "double"}, {"name": "tags", "type": {"type": "array", "items": "string"}}]}}]}');

-- every type: the Confluent header (schema id 42), then the body
SELECT jsonb_pretty(sdp_avro_to_json(s, '\x000000002a099693d89fee470000c03f9a9999999999b9bf0112636166c3a9202271220400ff00046162060203060002026b0e0008f8a432ebfffffbf0c402dcacc40afeffbadd830586b4cccaef660182c096e5ede2aa064831323334353637382d313233342d353637382d313233342d3536373831323334353637380000000000c04940040278027900')) FROM avro_schema;
-- the same body without the header
SELECT sdp_avro_to_json(s, substr('\x000000002a099693d89fee470000c03f9a9999999999b9bf0112636166c3a9202271220400ff00046162060203060002026b0e0008f8a432ebfffffbf0c402dcacc40afeffbadd830586b4cccaef660182c096e5ede2aa064831323334353637382d313233342d353637382d313233342d3536373831323334353637380000000000c04940040278027900'::bytea, 6), framed => false) = sdp_avro_to_json(s, '\x000000002a099693d89fee470000c03f9a9999999999b9bf0112636166c3a9202271220400ff00046162060203060002026b0e0008f8a432ebfffffbf0c402dcacc40afeffbadd830586b4cccaef660182c096e5ede2aa064831323334353637382d313233342d353637382d313233342d3536373831323334353637380000000000c04940040278027900') FROM avro_schema;

-- bodies that cannot be read: the reason, never a crash
SELECT pg_temp.refused(format('SELECT sdp_avro_to_json(%L, %L)', s, b)) FROM avro_schema,
  unnest(ARRAY[substr('\x000000002a099693d89fee470000c03f9a9999999999b9bf0112636166c3a9202271220400ff00046162060203060002026b0e0008f8a432ebfffffbf0c402dcacc40afeffbadd830586b4cccaef660182c096e5ede2aa064831323334353637382d313233342d353637382d313233342d3536373831323334353637380000000000c04940040278027900'::bytea, 1, 40), '\x000000002a099693d89fee470000c03f9a9999999999b9bf0112636166c3a9202271220400ff00046162060203060002026b0e0008f8a432ebfffffbf0c402dcacc40afeffbadd830586b4cccaef660182c096e5ede2aa064831323334353637382d313233342d353637382d313233342d3536373831323334353637380000000000c04940040278027900'::bytea || '\x00'::bytea, '\x01000000002a'::bytea, '\x000000'::bytea]) b;
SELECT pg_temp.refused($$SELECT sdp_avro_to_json('["null", "long"]', '\x04', false)$$);
SELECT pg_temp.refused($$SELECT sdp_avro_to_json('"string"', '\x01', false)$$);
SELECT pg_temp.refused($$SELECT sdp_avro_to_json('"string"', '\x7f', false)$$);
SELECT pg_temp.refused($$SELECT sdp_avro_to_json('"long"', '\xffffffffffffffffffff01', false)$$);
SELECT pg_temp.refused($$SELECT sdp_avro_to_json('{"type": "array", "items": "null"}', '\xfeffffffffffffffff01', false)$$);
SELECT pg_temp.refused($$SELECT sdp_avro_to_json('{"type": "enum", "name": "e", "symbols": ["a"]}', '\x02', false)$$);
SELECT pg_temp.refused($$SELECT sdp_avro_to_json('"string"', '\x02ff', false)$$);
-- schemas that are not Avro schemas
SELECT pg_temp.refused(format('SELECT sdp_avro_to_json(%L, %L, false)', s, '\x00'))
  FROM unnest(ARRAY['"nosuchtype"', '{"type": "record", "fields": []}', '[]', '{"type": "record", "name": "r", "fields": [{"name": "a"}]}', 'not json']) s;
-- a record that refers to itself, and a decimal wider than 64 bits
SELECT sdp_avro_to_json('{"type": "record", "name": "node", "fields": [{"name": "v", "type": "int"}, {"name": "next", "type": ["null", "node"]}]}', '\x0202040206020800', false);
SELECT sdp_avro_to_json('{"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 5}', '\x1480000000000000000001', false);

-- declarations of Avro sources that cannot work
SELECT pg_temp.refused(format('SELECT sdp_create_source(%L, %L, %L, %L)', 's', '127.0.0.1:9', 't', o))
  FROM unnest(ARRAY['{"format": "xml"}', '{"key.format": "json"}', '{"format": "avro"}', '{"key.format": "avro"}',
                    '{"basic.auth.user.info": "u:p"}', '{"format": "avro", "schema.registry.url": "file:///etc/passwd"}',
                    '{"format": "avro", "schema.registry.url": "http://r:8081", "basic.auth.credentials.source": "SASL_INHERIT"}',
                    '{"format": "avro", "schema.registry.url": "http://r:8081", "basic.auth.user.info": "nocolon"}',
                    '{"format": "avro", "schema.registry.url": "http://r:8081", "schema.registry.ssl.endpoint.identification.algorithm": "x"}',
                    '{"format": "protobuf"}', '{"key.format": "protobuf"}', '{"format": "proto"}',
                    E'{"format": "avro", "schema.registry.url": "http://r:8081/\\nX-Evil: 1"}',
                    '{"format": "avro", "schema.registry.url": "http://r:8081/a b"}']) o;
-- Protobuf values and keys with a registry
SELECT sdp_create_source('pb', '127.0.0.1:9', 't', '{"format": "protobuf", "key.format": "protobuf", "schema.registry.url": "http://127.0.0.1:9/"}');
SELECT sdp_drop_source('pb');
-- a good one; its credentials are masked in sdp.source_list
SELECT sdp_create_source('reg', '127.0.0.1:9', 't', '{"format": "avro", "key.format": "avro", "schema.registry.url": "http://127.0.0.1:9/", "basic.auth.user.info": "user:secret", "schema.registry.ssl.key.password": "pw"}');
SELECT options FROM sdp.source_list WHERE name = 'reg';
SELECT sdp_create_source('reg_url', '127.0.0.1:9', 't', '{"format": "avro", "schema.registry.url": "https://sdp:secret@registry.example:8081/apis/ccompat/v7"}');
SELECT options->>'schema.registry.url' FROM sdp.source_list WHERE name = 'reg_url';

-- defaults in an input schema: constants, taken for a field a message does not have
CREATE TABLE d (a int, b text, c numeric, t timestamptz);
SELECT pg_temp.refused($$SELECT sdp_create_flow('fd', 'reg', 'd', 'a int DEFAULT -1, b text DEFAULT NULL, c numeric DEFAULT 1.50, t timestamptz DEFAULT ''2026-01-01T00:00:00Z''')$$);
SELECT sdp_drop_flow('fd');
SELECT pg_temp.refused(format('SELECT sdp_create_flow(%L, %L, %L, %L)', 'fd', 'reg', 'd', s))
  FROM unnest(ARRAY['a int DEFAULT now()', 'a int DEFAULT ''x''', 'a int DEFAULT 1 DEFAULT 2', 'a int NOT NULL DEFAULT 1']) s;
-- a path with a name longer than an identifier
SELECT pg_temp.refused($$SELECT sdp_create_flow('fd', 'reg', 'd', 'a int FROM x.a_name_of_sixty_four_bytes_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa')$$);

-- Debezium's envelope: what a flow cannot apply it to, refused
CREATE TABLE dbz (id int PRIMARY KEY, name text);
CREATE TABLE dbz_nopk (id int, name text);
CREATE ROLE dbz_writer LOGIN;
GRANT USAGE ON SCHEMA public TO dbz_writer;
GRANT SELECT, INSERT, UPDATE ON dbz TO dbz_writer;
SELECT pg_temp.refused(format('SELECT sdp_create_flow(%L, %L, %L, %L, transform => %L, operator => %L, options => %L)', 'fz', 'reg', t, s, x, op, o))
  FROM (VALUES ('dbz', 'id int, name text', NULL, NULL, '{"envelope": "Debezium"}'),
               ('dbz', 'id int, name text', NULL, NULL, '{"envelope": "debezium", "mode": "append"}'),
               ('dbz_nopk', 'id int, name text', NULL, NULL, '{"envelope": "debezium"}'),
               ('dbz', 'id int, debezium_op text', NULL, NULL, '{"envelope": "debezium"}'),
               ('dbz', 'id int, name text', 'SELECT id, name, debezium_lsn FROM input', NULL, '{"envelope": "debezium"}'),
               ('dbz', 'id int, name text', NULL, 'active_count', '{"envelope": "debezium", "key": "name", "member": "id", "ttl": "30 seconds", "capacity": 10}')) v(t, s, x, op, o);
SELECT sdp_create_sink('dbz_sink', '127.0.0.1:9', 't');
SELECT pg_temp.refused($$SELECT sdp_create_flow('fz', 'reg', NULL, 'id int, name text', sink => 'dbz_sink', options => '{"envelope": "debezium"}')$$);
SELECT sdp_drop_sink('dbz_sink');
SET ROLE dbz_writer;
SELECT pg_temp.refused($$SELECT sdp_create_source('dbz_src', '127.0.0.1:9', 't')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('fz', 'dbz_src', 'dbz', 'id int, name text', options => '{"envelope": "debezium"}')$$);
SELECT sdp_drop_source('dbz_src');
RESET ROLE;
-- accepted: upsert on the primary key; a transform reads the envelope's columns; the target need not have them
SELECT pg_temp.refused($$SELECT sdp_create_flow('fz', 'reg', 'dbz', 'id int, name text FROM "Name"', options => '{"envelope": "debezium"}')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('fz2', 'reg', 'dbz', 'id int', transform => 'SELECT id, debezium_op || (debezium_source->>''lsn'') || debezium_ts_ms AS name FROM input', options => '{"envelope": "debezium"}')$$);
SELECT name, options->>'envelope', options->>'on_tombstone' FROM sdp.flows WHERE name LIKE 'fz%' ORDER BY name;
SELECT sdp_drop_flow('fz'), sdp_drop_flow('fz2');
DROP TABLE dbz, dbz_nopk;
REVOKE USAGE ON SCHEMA public FROM dbz_writer;
DROP ROLE dbz_writer;

-- Avro sinks: the declarations that cannot work, refused; credentials masked in sdp.sink_list
SELECT pg_temp.refused(format('SELECT sdp_create_sink(%L, %L, %L, %L)', 'as', '127.0.0.1:9', 't', o))
  FROM unnest(ARRAY['{"format": "xml"}', '{"format": "avro"}', '{"key.format": "avro", "schema.registry.url": "http://r:8081"}',
                    '{"basic.auth.user.info": "u:p"}', '{"format": "avro", "schema.registry.url": "ftp://r"}',
                    '{"format": "protobuf", "schema.registry.url": "http://r:8081"}']) o;
SELECT sdp_create_sink('as', '127.0.0.1:9', 't', '{"format": "avro", "schema.registry.url": "http://sdp:secret@r:8081", "basic.auth.user.info": "u:p"}');
SELECT options FROM sdp.sink_list WHERE name = 'as';
SELECT pg_temp.refused($$SELECT sdp_create_flow('fa', 'reg', NULL, 'a int', transform => 'SELECT a AS "Order Id" FROM input', sink => 'as')$$);
SELECT pg_temp.refused($$SELECT sdp_create_flow('fa', 'reg', NULL, 'a int, b numeric(5,2)', sink => 'as')$$);
SELECT sdp_drop_flow('fa');
SELECT sdp_drop_sink('as');
-- sdp.row_avro: a row as an Avro sink writes it
SELECT sdp.row_avro(ROW(1::int, 'é'::text, 12.30::numeric(5,2), (-1.5)::numeric(5,2), NULL::bigint, '1970-01-02'::date, ARRAY[1, NULL]), 7);
SELECT sdp_avro_to_json('{"type": "record", "name": "r", "fields": [{"name": "f1", "type": ["null", "int"]}, {"name": "f2", "type": ["null", "string"]}, {"name": "f3", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2}]}, {"name": "f4", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2}]}, {"name": "f5", "type": ["null", "long"]}, {"name": "f6", "type": ["null", {"type": "int", "logicalType": "date"}]}, {"name": "f7", "type": ["null", {"type": "array", "items": ["null", "int"]}]}]}',
                        sdp.row_avro(ROW(1::int, 'é'::text, 12.30::numeric(5,2), (-1.5)::numeric(5,2), NULL::bigint, '1970-01-02'::date, ARRAY[1, NULL]), 7));
SELECT pg_temp.refused($$SELECT sdp.row_avro(ROW('NaN'::numeric(5,2)))$$);
SELECT pg_temp.refused($$SELECT sdp.row_avro(ROW('infinity'::timestamptz))$$);
SELECT pg_temp.refused($$SELECT sdp.row_avro(ROW(ARRAY[[1, 2], [3, 4]]))$$);
SELECT pg_temp.refused($$SELECT sdp.row_avro(ROW(1), -5)$$);
SELECT sdp.row_avro(NULL::record, 1) IS NULL;
SELECT pg_temp.refused($$SELECT sdp.row_avro(r) FROM (SELECT 1 AS x, 2 AS x) r$$);
