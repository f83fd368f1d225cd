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
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use JSON::PP ();
use SdpKafka;
use SdpRegistry;
use SdpTest;
use Test::More;

SdpRegistry::needs_registry();

my $broker = SdpKafka::start_broker(topics => { 'pay' => 2 });
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

done_testing();
