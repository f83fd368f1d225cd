# Protobuf values and keys with a schema registry (issue 30), on either broker
# (Apache Kafka on the kafka pass).  Confluent's own serializer
# (confluent-kafka's ProtobufSerializer, in tools/avro_produce.py) registers
# the schemas in a real registry (Apicurio Registry's Confluent-compatible
# API) and writes Confluent's wire format with its message indexes.  The
# schema imports a file of its own (a reference, fetched by subject and
# version) and Protobuf's well-known types (Timestamp, Duration, a wrapper:
# from libprotobuf).  Registered as the Python client registers a schema (a
# serialized descriptor in base64) and as the Java client does (the .proto
# text).  A flow reads every scalar type, an enum, bytes, a map, repeated
# fields, paths into nested messages, a proto3 optional, a wrapper, the key
# as JSON; a message type nested in another (indexes [1, 0]); an evolution
# mid-stream (a field added, one removed) loses nothing; a body that cannot
# be read, an unknown id, a wrong magic byte, a message index that names no
# type and an Avro schema under format protobuf are dead-lettered with their
# offsets and reasons.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpRegistry;
use SdpTest;
use Test::More;

SdpRegistry::needs_registry();

my $broker = SdpKafka::start_broker(topics => { 'orders' => 2, 'lines' => 1 });
my $registry = SdpRegistry::start();
my $url = $registry->url;
my $node = SdpTest::new_node('protobuf');

my $money = <<'PROTO';
syntax = "proto3";
package shop;
message Money { string currency = 1; int64 units = 2; int32 nanos = 3; }
PROTO
sub order_proto
{
	my ($v2) = @_;
	my $note = $v2 ? 'reserved 13; string channel = 18;' : 'optional string note = 13;';
	return <<"PROTO";
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/wrappers.proto";
import "shop/money.proto";

enum Kind { KIND_UNKNOWN = 0; CARD = 1; CASH = 2; }
message Key { string merchant = 1; int32 region = 2; }
message Order {
  message Line { string sku = 1; int32 n = 2; }
  int64 id = 1;
  Money amount = 2;
  google.protobuf.Timestamp at = 3;
  Kind kind = 4;
  double ratio = 5;
  float f4 = 6;
  bool ok = 7;
  bytes raw = 8;
  uint64 big = 9;
  sint32 delta = 10;
  repeated string tags = 11;
  google.protobuf.Int32Value qty = 12;
  $note
  map<string, int32> attrs = 14;
  repeated Line lines = 15;
  google.protobuf.Duration waited = 16;
  string name = 17;
}
PROTO
}

SdpTest::create_source($node, 'orders', $broker, 'orders',
	qq({"format": "protobuf", "key.format": "protobuf", "schema.registry.url": "$url"}));
SdpTest::create_source($node, 'lines', $broker, 'lines',
	qq({"format": "protobuf", "schema.registry.url": "$url"}));
SdpTest::query($node, <<'SQL');
CREATE TABLE orders (id bigint, currency text, units bigint, at timestamptz, kind text, ratio float8, f4 real,
  ok boolean, raw bytea, big numeric, delta int, first_tag text, tags jsonb, qty int, note text, attrs jsonb,
  second_sku text, waited interval, name text, channel text, k text, kafka_partition int, kafka_offset bigint);
SELECT sdp_create_flow('orders_flow', 'orders', 'orders',
  'id bigint, currency text FROM amount.currency, units bigint FROM amount.units, at timestamptz, kind text,
   ratio float8, f4 real, ok boolean, raw bytea, big numeric, delta int, first_tag text FROM tags[0], tags jsonb,
   qty int, note text, attrs jsonb, second_sku text FROM lines[1].sku, waited interval, name text,
   channel text DEFAULT NULL',
  transform => 'SELECT id, currency, units, at, kind, ratio, f4, ok, raw, big, delta, first_tag, tags, qty, note,
    attrs, second_sku, waited, name, channel, kafka_key AS k, kafka_partition, kafka_offset FROM input',
  options => '{"mode": "append"}');
CREATE TABLE lines (sku text, n int, kafka_offset bigint);
SELECT sdp_create_flow('lines_flow', 'lines', 'lines', 'sku text, n int',
  transform => 'SELECT sku, n, kafka_offset FROM input', options => '{"mode": "append"}');
SQL

my %files = ('shop/money.proto' => $money, 'shop/order.proto' => order_proto(0));
my $full = {
	id => '1', amount => { currency => 'EUR', units => '12', nanos => 500000000 },
	at => '2026-01-02T03:04:05.123456Z', kind => 'CARD', ratio => 0.25, f4 => 1.5, ok => JSON::PP::true,
	raw => 'AQL/', big => '18446744073709551615', delta => -7, tags => [ 'a', "b\"q" ], qty => 3,
	note => "h\x{e9}", attrs => { x => 1, y => -2 }, lines => [ { sku => 's1', n => 1 }, { sku => 's2', n => 2 } ],
	waited => '1.5s', name => 'full'
};
my $v1 = SdpRegistry::avro_produce(
	registry => $registry, bootstrap => $broker->bootstrap, topic => 'orders',
	protobuf => { files => \%files, file => 'shop/order.proto', value_message => 'shop.Order', key_message => 'shop.Key' },
	records => [
		{ key => { merchant => 'm1', region => 3 }, value => $full, partition => 0 },
		# nothing but defaults: proto3 scalars read as their defaults, the rest NULL
		{ key => { merchant => 'm2' }, value => { id => '2' }, partition => 0 },
		{ key => { merchant => 'm3', region => -1 },
		  value => { id => '3', ratio => 'NaN', f4 => '-Infinity', kind => 'CASH', at => '1970-01-01T00:00:00Z',
					 qty => 0, note => '', waited => '-0.000001s' }, partition => 0 },
	]);
is($v1->{delivered}, 3, 'v1: three orders produced by ProtobufSerializer');
my $v1_id = $v1->{records}[0]{value_schema_id};
ok(defined $v1_id, "v1: registered, schema id $v1_id");

ok(SdpTest::wait_consumed($node, 'orders_flow', 3), 'orders_flow consumed the v1 orders');
my $cols = "id, currency, units, at AT TIME ZONE 'UTC', kind, ratio, f4, ok, raw, big, delta, first_tag, tags, qty, note, "
  . "attrs, second_sku, waited, name, channel, k";
my $row1 = SdpTest::query($node, "SELECT $cols FROM orders WHERE id = 1");
utf8::decode($row1);
is($row1,
	'1|EUR|12|2026-01-02 03:04:05.123456|CARD|0.25|1.5|t|\x0102ff|18446744073709551615|-7|a|["a", "b\"q"]|3|h' . "\x{e9}"
	  . '|{"x": 1, "y": -2}|s2|00:00:01.5|full||{"merchant":"m1","region":3}',
	'every type: scalars, an enum by name, bytes, uint64, sint32, repeated, paths into messages, a wrapper, an optional, a map, Duration; the key as JSON');
is(SdpTest::query($node, "SELECT $cols FROM orders WHERE id = 2"),
	join('|', 2, '', '', '', 'KIND_UNKNOWN', 0, 0, 'f', '\\x', 0, 0, '', '[]', '', '', '{}', '', '', '', '',
		'{"merchant":"m2","region":0}'),
	'unset: proto3 scalars their defaults (an enum its first name), messages, wrappers and optionals NULL, repeated fields and maps empty');
is(SdpTest::query($node, "SELECT $cols FROM orders WHERE id = 3"),
	join('|', 3, '', '', '1970-01-01 00:00:00', 'CASH', 'NaN', '-Infinity', 'f', '\\x', 0, 0, '', '[]', 0, '', '{}', '',
		'-00:00:00.000001', '', '', '{"merchant":"m3","region":-1}'),
	'NaN and infinities, the epoch, a wrapper and an optional set to their defaults, a negative Duration');

# the evolution: a field added, one removed (reserved)
$files{'shop/order.proto'} = order_proto(1);
my $v2 = SdpRegistry::avro_produce(
	registry => $registry, bootstrap => $broker->bootstrap, topic => 'orders',
	protobuf => { files => \%files, file => 'shop/order.proto', value_message => 'shop.Order', key_message => 'shop.Key' },
	records => [
		{ key => { merchant => 'm4' }, value => { id => '4', channel => 'web', name => 'v2' }, partition => 1 },
		{ key => { merchant => 'm5' }, value => { id => '5', channel => 'shop' }, partition => 1 },
		# the bad ones: a body that cannot be read, an unknown id, a wrong magic byte
		{ key => { merchant => 'm6' }, value => { id => '6' }, partition => 1, corrupt => { append_hex => 'ff' } },
		{ key => { merchant => 'm7' }, value => { id => '7' }, partition => 1, corrupt => { schema_id => 999999 } },
		{ key => { merchant => 'm8' }, value => { id => '8' }, partition => 1, corrupt => { magic => 1 } },
	]);
is($v2->{delivered}, 5, 'v2: five more, three of them damaged');
my $v2_id = $v2->{records}[0]{value_schema_id};
isnt($v2_id, $v1_id, "v2: a new schema id ($v2_id)");
# a message index that names no type (the file has two), then an Avro value on the Protobuf topic
my $bad_index = sprintf('00%08x0212', $v2_id) . '0802';    # indexes [9], then a body: id 1
my $raw = SdpRegistry::avro_produce(bootstrap => $broker->bootstrap, topic => 'orders',
	records => [ { raw_hex => $bad_index, partition => 1 } ]);
is($raw->{delivered}, 1, 'a message whose index names no type');
my $avro = SdpRegistry::avro_produce(registry => $registry, bootstrap => $broker->bootstrap, topic => 'orders',
	value_subject => 'orders-avro', value_schema => { type => 'record', name => 'O', fields => [ { name => 'id', type => 'long' } ] },
	records => [ { value => { id => 9 }, partition => 1 } ]);
is($avro->{delivered}, 1, 'an Avro value on the Protobuf topic');

ok(SdpTest::wait_consumed($node, 'orders_flow', 10), 'orders_flow consumed all ten');
my $evolved = SdpTest::query($node,
	"SELECT string_agg(id || ':' || coalesce(note, '-') || ':' || coalesce(channel, '-') || ':' || name, ',' ORDER BY id) FROM orders WHERE id <> 1");
is($evolved, '2:-:-:,3::-:,4:-:web:v2,5:-:shop:', 'v2 read by its own schema: the field added is read, the one removed NULL');
is(SdpTest::query($node, "SELECT count(*), count(DISTINCT (kafka_partition, kafka_offset)) FROM orders"), '5|5',
	'five orders written, once each');
my $dl = SdpTest::query($node,
	"SELECT kafka_partition || ':' || kafka_offset || '|' || error FROM sdp.dead_letters WHERE flow = 'orders_flow' ORDER BY kafka_offset");
my @dl = split /\n/, $dl;
is(scalar @dl, 5, 'five set aside');
like($dl[0] // '', qr/^1:2\|.*schema id \d+: not a shop\.Order message \(a field's tag is cut short, or not one\)/, 'a body that cannot be read: its offset and why');
like($dl[1] // '', qr/^1:3\|.*schema id 999999 is not in the schema registry/, 'an unknown id');
like($dl[2] // '', qr/^1:4\|.*first byte is 1, not 0/, 'a wrong magic byte');
like($dl[3] // '', qr/^1:5\|.*message index 9 names no message type of the schema's 2/, 'a message index that names no type');
like($dl[4] // '', qr/^1:6\|.*schema id \d+ is a schema of type AVRO, and the format is protobuf/, 'an Avro schema under format protobuf');

# a type nested in another (message indexes [1, 0]), the schema registered as the Java client does: .proto texts
my $lines = SdpRegistry::avro_produce(
	registry => $registry, bootstrap => $broker->bootstrap, topic => 'lines',
	protobuf => { files => \%files, file => 'shop/order.proto', value_message => 'shop.Order.Line', register_as => 'text' },
	records => [ map { { value => { sku => "sku$_", n => $_ } } } 1 .. 50 ]);
is($lines->{delivered}, 50, 'fifty lines, a nested type, the schema registered as .proto text');
ok(SdpTest::wait_consumed($node, 'lines_flow', 50), 'lines_flow consumed them');
is(SdpTest::query($node, "SELECT count(*), count(DISTINCT sku), sum(n), min(kafka_offset), max(kafka_offset), "
	  . "bool_and(sku = 'sku' || n) FROM lines"), '50|50|1275|0|49|t', 'every line once, its fields read');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.dead_letters WHERE flow = 'lines_flow'"), '0', 'none set aside');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.flow_status WHERE state = 'running' AND last_error IS NULL"), '2',
	'both flows run, without an error');

done_testing();
