# Avro values and keys with a schema registry (issue 30), on either broker
# (Apache Kafka on the kafka pass): Confluent's own serializer (confluent-kafka's AvroSerializer, in
# tools/avro_produce.py) registers the schemas in a real registry (Apicurio
# Registry's Confluent-compatible API) and writes Confluent's wire format;
# a flow reads every type and logical type into its columns, a nested path,
# an Avro key; two evolutions of the schema mid-stream lose nothing (a field
# added with a default, a field removed that the flow declares with a
# DEFAULT, a union widened); an incompatible one, a body that cannot be
# read, an unknown id and a wrong magic byte are dead-lettered with their
# offsets and reasons; the registry stopped (SIGSTOP) holds the flow back
# with the reason in its status, and nothing is lost when it comes back.
# Debezium's Avro envelope (Avro keys, the source record as jsonb, a delete
# with no before image taking its key, a tombstone that deletes).  An Avro
# sink: a flow's rows written as Avro, their schema derived from the rows and
# registered under TOPIC-value, read back by an Avro flow value for value; a
# value Avro cannot hold set aside; a stateful flow's rows too.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use JSON::PP ();
use SdpKafka;
use SdpRegistry;
use SdpTest;
use Test::More;

SdpRegistry::needs_registry();

my $broker = SdpKafka::start_broker(topics => { 'pay' => 2, 'cdc' => 1, 'rows' => 2, 'avro-out' => 2, 'zones' => 1, 'zone-counts' => 1 });
my $registry = SdpRegistry::start();
my $url = $registry->url;
my $node = SdpTest::new_node('avro');
SdpTest::create_source($node, 'pay', $broker, 'pay',
	qq({"format": "avro", "key.format": "avro", "schema.registry.url": "$url"}));
my $schema = 'id bigint, amount numeric(12,2), at timestamptz, day date, tod time, tod_us time, '
  . 'at_ms timestamptz, local_at timestamp, ref uuid, small int, ratio float8, f4 real, ok boolean, '
  . 'kind text, raw bytea, lat float8 FROM pos.lat, first_tag text FROM tags[0], '
  . "note text DEFAULT NULL, old text DEFAULT ''gone'', qty int";
SdpTest::query($node, <<"SQL");
CREATE TABLE pay (id bigint, amount numeric(12,2), at timestamptz, day date, tod time, tod_us time,
  at_ms timestamptz, local_at timestamp, ref uuid, small int, ratio float8, f4 real, ok boolean,
  kind text, raw bytea, lat float8, first_tag text, note text, old text, qty int,
  merchant_key text, kafka_partition int, kafka_offset bigint);
SELECT sdp_create_flow('pay_flow', 'pay', 'pay', '$schema',
  transform => 'SELECT id, amount, at, day, tod, tod_us, at_ms, local_at, ref, small, ratio, f4, ok, kind, raw, lat,
    first_tag, note, old, qty, kafka_key AS merchant_key, kafka_partition, kafka_offset FROM input',
  options => '{"mode": "append"}');
SQL

# the schemas: v1, then v2 (a field added with a default), v3 (a field removed, a union widened),
# v4 (a declared field without a default removed: incompatible for the flow)
my @v1_fields = (
	{ name => 'id', type => 'long' },
	{ name => 'amount', type => { type => 'bytes', logicalType => 'decimal', precision => 12, scale => 2 } },
	{ name => 'at', type => { type => 'long', logicalType => 'timestamp-micros' } },
	{ name => 'day', type => { type => 'int', logicalType => 'date' } },
	{ name => 'tod', type => { type => 'int', logicalType => 'time-millis' } },
	{ name => 'tod_us', type => { type => 'long', logicalType => 'time-micros' } },
	{ name => 'at_ms', type => { type => 'long', logicalType => 'timestamp-millis' } },
	{ name => 'local_at', type => { type => 'long', logicalType => 'local-timestamp-micros' } },
	{ name => 'ref', type => { type => 'string', logicalType => 'uuid' } },
	{ name => 'small', type => 'int' },
	{ name => 'ratio', type => 'double' },
	{ name => 'f4', type => 'float' },
	{ name => 'ok', type => 'boolean' },
	{ name => 'kind', type => { type => 'enum', name => 'Kind', symbols => [ 'CARD', 'CASH' ] } },
	{ name => 'raw', type => 'bytes' },
	{ name => 'pos', type => { type => 'record', name => 'Pos', fields => [
		{ name => 'lat', type => 'double' }, { name => 'lon', type => 'double' } ] } },
	{ name => 'tags', type => { type => 'array', items => 'string' } },
	{ name => 'old', type => 'string' },
	{ name => 'qty', type => [ 'null', 'int' ], default => undef });
sub schema_of { return { type => 'record', name => 'Payment', namespace => 'sdp.test', fields => [@_] } }
my $v1 = schema_of(@v1_fields);
my $v2 = schema_of(@v1_fields, { name => 'note', type => 'string', default => '' });
my @v3_fields = grep { $_->{name} ne 'old' && $_->{name} ne 'qty' } @v1_fields;
my $v3 = schema_of(@v3_fields, { name => 'qty', type => [ 'null', 'int', 'string' ], default => undef },
	{ name => 'note', type => 'string', default => '' });
my $v4 = schema_of(@v3_fields, { name => 'note', type => 'string', default => '' });
my $v5 = schema_of(@v3_fields, { name => 'qty', type => [ 'null', 'int', 'string' ], default => undef },
	{ name => 'note', type => 'string', default => '' }, { name => 'extra', type => [ 'null', 'string' ], default => undef });
my $key_schema = { type => 'record', name => 'MerchantKey', namespace => 'sdp.test',
	fields => [ { name => 'merchant', type => 'string' } ] };

sub value_of
{
	my ($i, $version) = @_;
	my %v = (
		id => $i + 0,
		amount => { '$decimal' => sprintf('%d.%02d', $i * 7, $i % 100) },
		at => { '$timestamp' => sprintf('2026-01-%02dT03:04:05.%06dZ', 1 + $i % 28, $i) },
		day => { '$date' => sprintf('2026-02-%02d', 1 + $i % 28) },
		tod => { '$time' => sprintf('03:04:%02d.%03d', $i % 60, $i % 1000) },
		tod_us => { '$time' => sprintf('23:59:%02d.%06d', $i % 60, $i) },
		at_ms => { '$timestamp' => sprintf('1999-12-31T23:59:%02d.%03dZ', $i % 60, $i % 1000) },
		local_at => { '$local_timestamp' => sprintf('2026-06-%02dT12:00:00.%06d', 1 + $i % 28, $i) },
		ref => { '$uuid' => sprintf('00000000-0000-4000-8000-%012d', $i) },
		small => $i - 150,
		ratio => $i / 8,
		f4 => $i * 0.5,
		ok => ($i % 2 ? JSON::PP::true : JSON::PP::false),
		kind => ($i % 2 ? 'CARD' : 'CASH'),
		raw => { '$bytes_hex' => sprintf('%04x', $i) },
		pos => { lat => $i / 4, lon => -$i / 4 },
		tags => [ "t$i", 'u' ]);
	$v{old} = "o$i" if $version < 3;
	$v{qty} = $i % 3 ? $i + 0 : undef if $version < 3;
	# v3 and on: qty an int for odd ids, its digits as a string (the widened union) for even ones
	$v{qty} = $i % 2 ? { '$union' => [ 'int', $i + 0 ] } : { '$union' => [ 'string', "$i" ] } if $version == 3 || $version == 5;
	$v{note} = "n$i" if $version >= 2;
	$v{extra} = undef if $version == 5;
	return \%v;
}
sub records
{
	my ($from, $to, $version) = @_;
	return [ map { { key => { merchant => 'm' . ($_ % 7) }, value => value_of($_, $version) } } $from .. $to ];
}
sub produce
{
	my ($value_schema, $records) = @_;
	my $s = SdpRegistry::avro_produce(registry => $registry, bootstrap => $broker->bootstrap, topic => 'pay',
		value_schema => $value_schema, key_schema => $key_schema, records => $records);
	is($s->{delivered}, scalar @$records, 'delivered ' . scalar @$records);
	return $s;
}

my $s1 = produce($v1, records(1, 300, 1));
my $s2 = produce($v2, records(301, 500, 2));
my $s3 = produce($v3, records(501, 700, 3));
my $s4 = produce($v4, records(701, 705, 4));
isnt($s1->{schema_ids}{'pay-value'}, $s2->{schema_ids}{'pay-value'}, 'the evolutions are new schema ids');
# bodies that cannot be read, an unknown id, a wrong magic byte (serialized with v3, then damaged)
my $bad = SdpRegistry::avro_produce(registry => $registry, bootstrap => $broker->bootstrap, topic => 'pay',
	value_schema => $v3, key_schema => $key_schema,
	records => [ map { { key => { merchant => 'm0' }, value => value_of(901 + $_->[0], 3), corrupt => $_->[1] } }
		  ([ 0, { truncate => 3 } ], [ 1, { schema_id => 999999 } ], [ 2, { magic => 1 } ], [ 3, { append_hex => 'ff' } ]) ]);
is($bad->{delivered}, 4, 'delivered 4 bad ones');

my $total = 300 + 200 + 200 + 5 + 4;
ok(SdpTest::wait_consumed($node, 'pay_flow', $total), "all $total consumed");
is(SdpTest::query($node, 'SELECT count(*) || \' \' || count(DISTINCT id) || \' \' || min(id) || \' \' || max(id) FROM pay'),
	'700 700 1 700', 'every good message once: ids 1 to 700, no duplicate');

# every column as the producer wrote it
my %expect = (
	amount => q{(i * 7 + (i % 100) / 100.0)::numeric(12,2)},
	at => q{format('2026-01-%s 03:04:05.%s+00', lpad((1 + i % 28)::text, 2, '0'), lpad(i::text, 6, '0'))::timestamptz},
	day => q{format('2026-02-%s', lpad((1 + i % 28)::text, 2, '0'))::date},
	tod => q{format('03:04:%s.%s', lpad((i % 60)::text, 2, '0'), lpad((i % 1000)::text, 3, '0'))::time},
	tod_us => q{format('23:59:%s.%s', lpad((i % 60)::text, 2, '0'), lpad(i::text, 6, '0'))::time},
	at_ms => q{format('1999-12-31 23:59:%s.%s+00', lpad((i % 60)::text, 2, '0'), lpad((i % 1000)::text, 3, '0'))::timestamptz},
	local_at => q{format('2026-06-%s 12:00:00.%s', lpad((1 + i % 28)::text, 2, '0'), lpad(i::text, 6, '0'))::timestamp},
	ref => q{format('00000000-0000-4000-8000-%s', lpad(i::text, 12, '0'))::uuid},
	small => q{i - 150},
	ratio => q{i / 8.0},
	f4 => q{(i * 0.5)::real},
	ok => q{i % 2 = 1},
	kind => q{CASE WHEN i % 2 = 1 THEN 'CARD' ELSE 'CASH' END},
	raw => q{decode(lpad(to_hex(i), 4, '0'), 'hex')},
	lat => q{i / 4.0},
	first_tag => q{'t' || i},
	note => q{CASE WHEN i > 300 THEN 'n' || i END},
	old => q{CASE WHEN i <= 500 THEN 'o' || i ELSE 'gone' END},
	qty => q{CASE WHEN i > 500 OR i % 3 <> 0 THEN i END},
	merchant_key => q{'{"merchant": "m' || i % 7 || '"}'},
);
for my $col (sort keys %expect)
{
	is(SdpTest::query($node, "SELECT count(*) FROM pay p JOIN generate_series(1, 700) i ON p.id = i "
			. "WHERE p.$col IS DISTINCT FROM $expect{$col}"),
		'0', "$col: as written, in all 700 rows");
}

# the dead letters: each at its offset, with its reason
my %dead;
$dead{"$_->{partition}:$_->{offset}"} = 'v4' for @{ $s4->{records} };
my @why = ('truncate', 'unknown id', 'magic', 'trailing');
$dead{"$bad->{records}[$_]{partition}:$bad->{records}[$_]{offset}"} = $why[$_] for 0 .. 3;
my $v4_id = $s4->{schema_ids}{'pay-value'};
my %reason = (
	v4 => qr/^field "qty" is not in the message's writer schema \(id $v4_id\) and the flow declares no DEFAULT for it$/,
	truncate => qr/^Avro body cannot be read at byte \d+ of \d+: /,
	'unknown id' => qr/^schema id 999999 is not in the schema registry \Q$url\E /,
	magic => qr/^not in the Confluent wire format: its first byte is 1, not 0/,
	trailing => qr/^Avro body has 1 bytes after its value of schema \d+/);
my $rows = SdpTest::query($node,
	"SELECT kafka_partition || ':' || kafka_offset || '|' || stage || '|' || error FROM sdp.dead_letters WHERE flow = 'pay_flow' ORDER BY 1");
my @rows = split /\n/, $rows;
is(scalar @rows, 9, '9 dead letters: 5 of the incompatible schema, 4 damaged');
for my $r (@rows)
{
	my ($at, $stage, $error) = split /\|/, $r, 3;
	my $kind = $dead{$at} // 'none';
	like($error, $reason{$kind} // qr/^never$/, "dead letter at $at ($kind): $error");
}
is(SdpTest::query($node, "SELECT count(*) FROM sdp.dead_letters WHERE flow = 'pay_flow' AND payload IS NOT NULL"),
	'9', 'each with its bytes');
is(SdpTest::query($node, "SELECT sdp_avro_to_json(\$\$" . JSON::PP->new->canonical->encode($v4) . "\$\$, payload)->>'id' "
		. "FROM sdp.dead_letters WHERE flow = 'pay_flow' AND error LIKE 'field \"qty\"%' ORDER BY kafka_offset LIMIT 1") =~ /^70[1-5]$/ ? 1 : 0,
	1, 'sdp_avro_to_json reads a dead letter with its writer schema');

# the registry stopped: a new schema cannot be fetched; the flow retries, says why, and loses nothing
SdpTest::query($node, "SELECT sdp_stop_flow('pay_flow')");
my $s5 = produce($v5, records(1001, 1100, 5));
kill 'STOP', $registry->pid;
SdpTest::query($node, "SELECT sdp_start_flow('pay_flow')");
ok(SdpTest::wait_for($node, "SELECT state = 'retrying' AND last_error LIKE '%: schema registry $url: could not fetch schema % timed out %' "
		. "FROM sdp.flow_status WHERE flow = 'pay_flow'"),
	'the registry stopped: the flow is retrying, the reason in its status');
note SdpTest::query($node, "SELECT last_error FROM sdp.flow_status WHERE flow = 'pay_flow'");
is(SdpTest::query($node, 'SELECT count(*) FROM pay WHERE id > 1000'), '0', 'nothing of the new schema written meanwhile');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.dead_letters WHERE flow = 'pay_flow'"), '9', 'nor set aside');
kill 'CONT', $registry->pid;
ok(SdpTest::wait_consumed($node, 'pay_flow', $total + 100), 'the registry back: the flow consumed the 100');
is(SdpTest::query($node, 'SELECT count(*) || \' \' || count(DISTINCT id) FROM pay WHERE id BETWEEN 1001 AND 1100'),
	'100 100', 'every one once');
is(SdpTest::query($node, "SELECT count(*) FROM pay p JOIN generate_series(1001, 1100) i ON p.id = i "
		. "WHERE p.qty IS DISTINCT FROM i OR p.note IS DISTINCT FROM 'n' || i OR p.old <> 'gone' OR p.amount <> $expect{amount}"),
	'0', 'with their values');
is(SdpTest::query($node, "SELECT state || ' ' || coalesce(last_error, '') FROM sdp.flow_status WHERE flow = 'pay_flow'"),
	'running ', 'running, the reason gone');

# Debezium's change events in Avro, as its Avro converter writes them: the
# envelope record, the row image a union of null and the table's Value
# record, the key a record of the primary key's columns
my $value_rec = { type => 'record', name => 'Value', fields => [
	{ name => 'id', type => 'int' },
	{ name => 'name', type => [ 'null', 'string' ], default => undef },
	{ name => 'price', type => [ 'null', { type => 'bytes', logicalType => 'decimal', precision => 8, scale => 2 } ], default => undef } ] };
my $envelope = { type => 'record', name => 'Envelope', namespace => 'cdc.public.items', fields => [
	{ name => 'before', type => [ 'null', $value_rec ], default => undef },
	{ name => 'after', type => [ 'null', 'Value' ], default => undef },
	{ name => 'source', type => { type => 'record', name => 'Source', namespace => 'io.debezium.connector.postgresql', fields => [
		{ name => 'connector', type => 'string' }, { name => 'table', type => 'string' },
		{ name => 'lsn', type => [ 'null', 'long' ], default => undef } ] } },
	{ name => 'op', type => 'string' },
	{ name => 'ts_ms', type => [ 'null', 'long' ], default => undef } ] };
my $key_rec = { type => 'record', name => 'Key', namespace => 'cdc.public.items', fields => [ { name => 'id', type => 'int' } ] };
SdpTest::create_source($node, 'cdc', $broker, 'cdc',
	qq({"format": "avro", "key.format": "avro", "schema.registry.url": "$url"}));
SdpTest::query($node, <<'SQL');
CREATE TABLE items (id int PRIMARY KEY, name text, price numeric(8,2), lsn bigint, op text);
SELECT sdp_create_flow('cdc_flow', 'cdc', 'items', 'id int, name text, price numeric(8,2)',
  transform => $$SELECT id, name, price, (debezium_source->>'lsn')::bigint AS lsn, debezium_op AS op FROM input$$,
  options => '{"envelope": "debezium", "on_tombstone": "delete"}');
SQL
sub ev
{
	my ($op, $before, $after, $lsn) = @_;
	return { op => $op, before => $before, after => $after, ts_ms => 1764900000000 + $lsn,
		source => { connector => 'postgresql', table => 'items', lsn => $lsn } };
}
sub it { my ($id, $name, $price) = @_; return { id => $id, name => $name, price => defined $price ? { '$decimal' => $price } : undef } }
SdpRegistry::avro_produce(registry => $registry, bootstrap => $broker->bootstrap, topic => 'cdc',
	value_schema => $envelope, key_schema => $key_rec, records => [
		{ key => { id => 1 }, value => ev('r', undef, it(1, 'apple', '1.50'), 10) },
		{ key => { id => 2 }, value => ev('c', undef, it(2, 'pear', '2.25'), 20) },
		{ key => { id => 3 }, value => ev('c', undef, it(3, 'plum', undef), 30) },
		{ key => { id => 1 }, value => ev('u', it(1, 'apple', '1.50'), it(1, 'green apple', '1.75'), 40) },
		{ key => { id => 2 }, value => ev('d', undef, undef, 50) },                 # no before image: the key
		{ key => { id => 3 }, value => ev('d', it(3, undef, undef), undef, 60) },
		{ key => { id => 3 }, value => undef },                                     # its tombstone
		{ key => { id => 4 }, value => ev('c', undef, it(4, 'fig', '9.00'), 70) },
		{ key => { id => 4 }, value => undef } ]);                                  # a tombstone alone deletes
ok(SdpTest::wait_consumed($node, 'cdc_flow', 9), 'Debezium in Avro: the nine messages consumed');
is(SdpTest::query($node, "SELECT string_agg(id || '=' || name || '/' || price || '/' || lsn || '/' || op, ',' ORDER BY id) FROM items"),
	'1=green apple/1.75/40/u', 'Debezium in Avro: updated by the after image; deleted by a before image, by the key, by a tombstone');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.dead_letters WHERE flow = 'cdc_flow'"), '0', 'Debezium in Avro: nothing set aside');

# An Avro sink: JSON rows in, every type written as Avro, read back by an Avro flow
my $bootstrap = $broker->bootstrap;
SdpTest::create_source($node, 'rows', $broker, 'rows');
SdpTest::create_source($node, 'avro_back', $broker, 'avro-out', qq({"format": "avro", "schema.registry.url": "$url"}));
SdpTest::query($node, <<"SQL");
SELECT sdp_create_sink('avro_out', '$bootstrap', 'avro-out', '{"format": "avro", "schema.registry.url": "$url"}');
CREATE TABLE back (id bigint PRIMARY KEY, small smallint, n int, amount numeric(12,2), big numeric(30,10), anynum numeric,
  f4 real, f8 float8, ok boolean, name text, at timestamptz, local_at timestamp, day date, tod time, ref uuid,
  raw bytea, doc text, tags jsonb, nums jsonb);
SELECT sdp_create_flow('to_avro', 'rows', NULL,
  'id bigint, small smallint, n int, amount numeric(12,2), big numeric(30,10), anynum numeric, f4 real, f8 float8,
   ok boolean, name text, at timestamptz, local_at timestamp, day date, tod time, ref uuid, raw text, doc jsonb, tags text',
  transform => 'SELECT id, small, n, amount, big, anynum, f4, f8, ok, name, at, local_at, day, tod, ref,
                       decode(raw, ''hex'') AS raw, doc, string_to_array(tags, '','') AS tags,
                       CASE WHEN n IS NOT NULL THEN ARRAY[n::bigint, NULL, n::bigint + 1] END AS nums FROM input',
  sink => 'avro_out', options => '{"sink_key": "id"}');
SELECT sdp_create_flow('from_avro', 'avro_back', 'back',
  'id bigint, small smallint, n int, amount numeric(12,2), big numeric(30,10), anynum numeric, f4 real, f8 float8,
   ok boolean, name text, at timestamptz, local_at timestamp, day date, tod time, ref uuid, raw bytea, doc text,
   tags jsonb, nums jsonb');
SQL
my @sink_rows = (
	q({"id": 1, "small": -32768, "n": 2147483647, "amount": "12.30", "big": "12345678901234567890.0123456789", "anynum": "3.14159265358979323846", "f4": 1.5, "f8": -2.25e-10, "ok": true, "name": "caf\u00e9 \u2615", "at": "2026-01-02T03:04:05.123456Z", "local_at": "1969-12-31T23:59:59.999999", "day": "1969-07-20", "tod": "23:59:59.999999", "ref": "0b8e6a3c-1f2d-4e5f-8a9b-0c1d2e3f4a5b", "raw": "00ff10", "doc": {"a": [1, {"b": null}]}, "tags": "x,y"}),
	q({"id": 2, "small": 0, "n": -1, "amount": "-0.01", "big": "-99999999999999999999.9999999999", "anynum": "-0", "f4": -0.0, "f8": 1e300, "ok": false, "name": "", "at": "1900-01-01T00:00:00Z", "local_at": "2262-04-11T23:47:16", "day": "2000-01-01", "tod": "00:00:00", "ref": "00000000-0000-0000-0000-000000000000", "raw": "", "doc": [], "tags": ""}),
	q({"id": 3}),
	q({"id": 4, "amount": "NaN", "name": "not an Avro decimal"}),
	q({"id": 5, "amount": "128.00", "big": "-128", "name": "after the one set aside"}));
SdpKafka::kcat_produce(bootstrap => $bootstrap, topic => 'rows', messages => [ map { [ "k$_", $sink_rows[$_], $_ % 2 ] } 0 .. $#sink_rows ]);
ok(SdpTest::wait_consumed($node, 'to_avro', 5), 'Avro sink: the five rows consumed');
ok(SdpTest::wait_for($node, 'SELECT count(*) = 4 FROM back'), 'Avro sink: four rows read back by an Avro flow')
  or diag SdpTest::query($node, "SELECT string_agg(flow || ' ' || state || ' ' || coalesce(last_error, '') || ' ' || rows_written || ' ' || rows_dead_lettered, E'\n') FROM sdp.flow_status")
  . "\n" . SdpTest::query($node, "SELECT string_agg(flow || ' ' || stage || ' ' || error, E'\n') FROM sdp.dead_letters WHERE flow IN ('to_avro', 'from_avro')")
  . "\n" . SdpTest::query($node, "SELECT count(*) FROM sdp.outbox");
my $expect_rows = SdpTest::query($node, <<'SQL');
SELECT string_agg(format('%s', r), E'\n' ORDER BY id) FROM (
  SELECT id, small, n, amount, big, anynum, f4, f8, ok, name, at, local_at, day, tod, ref, decode(raw, 'hex') AS raw,
         doc::text AS doc, to_jsonb(string_to_array(tags, ',')) AS tags,
         CASE WHEN n IS NOT NULL THEN to_jsonb(ARRAY[n::bigint, NULL, n::bigint + 1]) END AS nums
    FROM json_to_recordset(json_build_array(
      '{"id": 1, "small": -32768, "n": 2147483647, "amount": "12.30", "big": "12345678901234567890.0123456789", "anynum": "3.14159265358979323846", "f4": 1.5, "f8": -2.25e-10, "ok": true, "name": "café ☕", "at": "2026-01-02T03:04:05.123456Z", "local_at": "1969-12-31T23:59:59.999999", "day": "1969-07-20", "tod": "23:59:59.999999", "ref": "0b8e6a3c-1f2d-4e5f-8a9b-0c1d2e3f4a5b", "raw": "00ff10", "doc": {"a": [1, {"b": null}]}, "tags": "x,y"}'::json,
      '{"id": 2, "small": 0, "n": -1, "amount": "-0.01", "big": "-99999999999999999999.9999999999", "anynum": "-0", "f4": -0.0, "f8": 1e300, "ok": false, "name": "", "at": "1900-01-01T00:00:00Z", "local_at": "2262-04-11T23:47:16", "day": "2000-01-01", "tod": "00:00:00", "ref": "00000000-0000-0000-0000-000000000000", "raw": "", "doc": [], "tags": ""}'::json,
      '{"id": 3}'::json,
      '{"id": 5, "amount": "128.00", "big": "-128", "name": "after the one set aside"}'::json))
      AS x(id bigint, small smallint, n int, amount numeric(12,2), big numeric(30,10), anynum numeric, f4 real, f8 float8,
           ok boolean, name text, at timestamptz, local_at timestamp, day date, tod time, ref uuid, raw text, doc jsonb, tags text)) r
SQL
is(SdpTest::query($node, "SELECT string_agg(format('%s', b), E'\\n' ORDER BY id) FROM back b"), $expect_rows,
	'Avro sink: every value read back as it was written (decimals, the logical types, bytes, arrays, NULLs)');
is(SdpTest::query($node, "SELECT count(*) || ' ' || stage || ' ' || sqlstate || ' ' || error FROM sdp.dead_letters WHERE flow = 'to_avro' GROUP BY stage, sqlstate, error"),
	'1 transform 22003 NaN is not an Avro decimal', 'Avro sink: NaN in a decimal column set aside with the reason');
my ($code, $latest) = $registry->request('GET', '/subjects/avro-out-value/versions/latest');
is($code, 200, 'Avro sink: the schema registered under avro-out-value');
my $registered = JSON::PP->new->canonical->decode($latest->{schema});
is(join(',', map { $_->{name} } @{ $registered->{fields} }), 'id,small,n,amount,big,anynum,f4,f8,ok,name,at,local_at,day,tod,ref,raw,doc,tags,nums',
	'Avro sink: a field per column, in order');
is(JSON::PP->new->canonical->encode([ map { $_->{type}[1] } @{ $registered->{fields} }[3, 5, 10, 11, 12, 13, 14, 17] ]),
	'[{"logicalType":"decimal","precision":12,"scale":2,"type":"bytes"},"string",{"logicalType":"timestamp-micros","type":"long"},'
	. '{"logicalType":"local-timestamp-micros","type":"long"},{"logicalType":"date","type":"int"},{"logicalType":"time-micros","type":"long"},'
	. '{"logicalType":"uuid","type":"string"},{"items":["null","string"],"type":"array"}]',
	'Avro sink: the logical types of the columns');

# a stateful flow's rows into an Avro sink
SdpTest::create_source($node, 'zones', $broker, 'zones');
SdpTest::query($node, <<"SQL");
SELECT sdp_create_sink('zone_counts_avro', '$bootstrap', 'zone-counts', '{"format": "avro", "schema.registry.url": "$url"}');
SELECT sdp_create_flow('zone_counts', 'zones', NULL, 'zone text, icao24 text',
  transform => 'SELECT zone, icao24 FROM input', operator => 'active_count',
  options => '{"key": "zone", "member": "icao24", "ttl": "1 hour", "capacity": 100, "count_column": "aircraft_count",
               "sink_key": "zone"}',
  sink => 'zone_counts_avro');
SQL
SdpTest::create_source($node, 'zc_back', $broker, 'zone-counts', qq({"format": "avro", "schema.registry.url": "$url"}));
SdpTest::query($node, <<'SQL');
CREATE TABLE zc (zone text PRIMARY KEY, aircraft_count int, kafka_key text);
SELECT sdp_create_flow('zc_read', 'zc_back', 'zc', 'zone text, aircraft_count int');
SQL
SdpKafka::kcat_produce(bootstrap => $bootstrap, topic => 'zones',
	messages => [ map { [ 'z', qq({"zone": "z", "icao24": "a$_"}), 0 ] } 1 .. 3 ]);
ok(SdpTest::wait_consumed($node, 'zone_counts', 3), 'Avro sink of a stateful flow: consumed');
ok(SdpTest::wait_for($node, "SELECT aircraft_count = 3 FROM zc WHERE zone = 'z'"),
	'Avro sink of a stateful flow: its counts read back by an Avro flow');
is(SdpTest::query($node, "SELECT kafka_key FROM zc"), 'z', 'Avro sink of a stateful flow: keyed by sink_key');
my ($zc_code, $zc) = $registry->request('GET', '/subjects/zone-counts-value/versions/latest');
is($zc_code, 200, 'Avro sink of a stateful flow: its schema registered under zone-counts-value');

done_testing();
