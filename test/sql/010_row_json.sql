-- sdp.row_json(row): the JSON of a sink flow's messages, written directly
-- for the common types; it must be exactly to_jsonb(row)::text, whatever
-- the values.  Each query returns the rows where the two differ: none.
CREATE EXTENSION sdp_ext;
SET TimeZone = 'Europe/Paris';

CREATE TABLE edge (
  t text, v varchar(5), c char(4), n name, u uuid, iv interval, tm time, tz timetz,
  i2 int2, i4 int4, i8 int8, f4 float4, f8 float8, num numeric, b bool,
  d date, ts timestamp, tstz timestamptz
);
INSERT INTO edge VALUES
  ('plain', 'ab', 'x', 'nm', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '1 day 02:03:04', '12:34:56.789', '12:00+02',
   -32768, -2147483648, -9223372036854775808, 1.5, 0.1, 1.10, true,
   '2026-01-01', '2026-01-01 00:00:00', '2026-01-01 00:00:00+00'),
  (E'quote " backslash \\ tab \t newline \n bell \u0007 é 😀', '', '', '', NULL, '-1 mon', '00:00', '23:59:59.999999+14',
   32767, 2147483647, 9223372036854775807, 'NaN', 'Infinity', 'NaN', false,
   'infinity', '-infinity', 'infinity'),
  (NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
   0, 0, 0, '-Infinity', '-Infinity', 'Infinity', NULL,
   '4713-01-01 BC', '0001-01-01 00:00:00 BC', '294276-12-31 23:59:59.999999+00'),
  ('</script>', 'x', 'y', 'z', NULL, NULL, NULL, NULL,
   1, 1, 1, 1e20, 1e20, '-Infinity', NULL,
   '2000-02-29', '2026-06-30 23:59:59.5', '2026-06-30 23:59:59.123456+02'),
  ('-0', NULL, NULL, NULL, NULL, NULL, NULL, NULL,
   -1, -1, -1, '-0', '-0', -0.0, NULL,
   NULL, NULL, NULL),
  ('small', NULL, NULL, NULL, NULL, NULL, NULL, NULL,
   NULL, NULL, NULL, 1e-7, 1.2345678901234567e-300, 123456789012345678901234567890.123456789, NULL,
   NULL, NULL, NULL),
  ('big', NULL, NULL, NULL, NULL, NULL, NULL, NULL,
   NULL, NULL, NULL, 3.4028235e38, 1.7976931348623157e308, 0.000000000000000000000001, NULL,
   NULL, NULL, NULL),
  ('round', NULL, NULL, NULL, NULL, NULL, NULL, NULL,
   NULL, NULL, NULL, 0.30000001, 0.30000000000000004, -12.500, NULL,
   NULL, NULL, NULL);

SELECT count(*) AS rows, count(*) FILTER (WHERE sdp.row_json(e) = to_jsonb(e)::text) AS same FROM edge e;
SELECT t, sdp.row_json(e) AS direct, to_jsonb(e)::text AS to_jsonb FROM edge e WHERE sdp.row_json(e) <> to_jsonb(e)::text;

-- columns named so that jsonb reorders them, and a subquery's record
SELECT sdp.row_json(r) = to_jsonb(r)::text AS same, sdp.row_json(r)
  FROM (SELECT 1 AS bb, 'x' AS a, 2.5::float8 AS "ääx", NULL::int AS "ab", true AS "B", 3 AS abc, 'q"' AS "k""ey") r;
-- a float of every magnitude
SELECT count(*) AS rows, count(*) FILTER (WHERE sdp.row_json(r) = to_jsonb(r)::text) AS same
  FROM (SELECT (x * 10.0 ^ e)::float8 AS f, (x * 10.0 ^ e)::float4 AS g, -(x * 10.0 ^ e)::float8 AS h
          FROM generate_series(-37, 37) e, (VALUES (1.0), (1.25), (3.3333333), (9.999999)) v(x)) r;

-- the general way, for types it does not write itself: same text
CREATE DOMAIN posint AS int CHECK (VALUE > 0);
SELECT sdp.row_json(r) = to_jsonb(r)::text AS same, sdp.row_json(r)
  FROM (SELECT 1::posint AS d, ARRAY[1, 2] AS arr, '{"z": 1, "a": [1.0e2]}'::jsonb AS jb, '{"b":2}'::json AS js,
               ROW(1, 'x')::record AS rec, 'x' AS dup, 'y' AS dup2) r;
SELECT sdp.row_json(r) = to_jsonb(r)::text AS same, sdp.row_json(r)
  FROM (SELECT 1 AS k, 2 AS k) r;
SELECT sdp.row_json(NULL::edge) IS NULL AS strict;
DROP EXTENSION sdp_ext;
