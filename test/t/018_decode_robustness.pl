# Hostile payloads: nesting at and past the depth limit, a long string, many
# fields, and thousands of randomly mutated messages (cut, spliced, bytes
# flipped, odd numbers and escapes).  Every message ends up exactly once,
# either as a row or as a dead letter, the flow keeps running and the server
# never restarts.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'hostile' => 2 });
my $node = SdpTest::new_node('hostile');
SdpTest::create_source($node, 'hostile', $broker, 'hostile');
SdpTest::query($node, <<'SQL');
CREATE TABLE hostile (id int, t text, i8 int8, f8 float8, n numeric, b boolean, ts timestamptz, j jsonb, u uuid,
                      kafka_partition int, kafka_offset bigint);
SELECT sdp_create_flow('hostile_flow', 'hostile', 'hostile',
  'id int, t text, i8 int8, f8 float8, n numeric, b boolean, ts timestamptz, j jsonb, u uuid',
  options => '{"mode": "append"}');
SQL
my $started = SdpTest::query($node, 'SELECT pg_postmaster_start_time()');

# Partition 0: the cases with a known outcome, in this order.
my $nest = sub { my ($open, $close, $depth) = @_; return ($open x $depth) . ($close x $depth) };
my @known = (
	'{"id": 1, "j": ' . $nest->('[', ']', 999) . '}',
	'{"id": 2, "j": ' . $nest->('[', ']', 1000) . '}',
	'{"id": 3, "skipped": ' . ('{"a": ' x 100000) . '1' . ('}' x 100000) . '}',
	'{"id": 4, "t": "' . ('x' x 200000) . '"}',
	'{"id": 5, ' . join(', ', map { "\"f$_\": $_" } 1 .. 20000) . ', "t": "last"}',
	'{"id": 6, "t": ' . $nest->('[', ']', 5000) . '}',
	'{"id": 7, "t": "after them"}',
);
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'hostile',
	messages => [ map { [ "k$_", $known[$_], 0 ] } 0 .. $#known ]);

# Partition 1: mutations of a valid message, from a fixed seed.
srand(20261129);
my $template = '{"id": %d, "t": "caf\u00e9", "i8": 12, "f8": 1.5e3, "n": 0.10, "b": true, '
  . '"ts": "2026-01-02T03:04:05Z", "j": {"x": [1, 2, {"y": null}]}, "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"}';
my @splices = ('"', '\\', '{', '}', '[', ']', ',', ':', '\\u', '\\ud83d', '\\udc00', '"\\u0000"', "\xff", "\xc3",
	'1e999999', '-', '1e-999999', 'nul', 'tru', '9' x 400, '[' x 1200, '{"a":' x 1100, "\t", '0x10', 'NaN',
	'Infinity', '-0', '01', '.5', '"' . ('y' x 2000) . '"', '18446744073709551616', '-9223372036854775809',
	'"2026-13-45"', '"infinity"', '1767323045678901', '{}', '[]', 'null', '"\\ud800"');
my @fuzz;
for my $i (1 .. 3000)
{
	my $m = sprintf($template, $i);
	for (1 .. 1 + int(rand(4)))
	{
		my $op = rand();
		my $pos = int(rand(length($m) + 1));
		if ($op < 0.3 && length $m) { substr($m, int(rand(length $m)), 1, '') }
		elsif ($op < 0.6) { substr($m, $pos, 0, $splices[ int(rand(@splices)) ]) }
		elsif ($op < 0.75) { $m = substr($m, 0, $pos) }
		elsif (length $m)
		{
			my $byte = 0x20 + int(rand(0xe0));    # no control bytes: kcat's delimiters are 0x1e and 0x1f
			substr($m, int(rand(length $m)), 1, chr($byte));
		}
	}
	$m = '{}' if $m eq '';    # an empty payload would be a NULL message
	push @fuzz, $m;
}
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'hostile',
	messages => [ map { [ "f$_", $fuzz[$_], 1 ] } 0 .. $#fuzz ]);

my $total = @known + @fuzz;
ok(SdpTest::wait_consumed($node, 'hostile_flow', $total), "all $total messages consumed");

is(SdpTest::query($node, "SELECT kafka_offset || ': ' || left(error, 60) FROM sdp.dead_letters "
	  . "WHERE flow = 'hostile_flow' AND kafka_partition = 0 ORDER BY kafka_offset"),
	join("\n",
		'1: invalid JSON: JSON nested deeper than 1000 levels',
		'2: invalid JSON: JSON nested deeper than 1000 levels',
		'5: invalid JSON: JSON nested deeper than 1000 levels'),
	'nesting past the limit, declared or not, is dead-lettered with the reason');
is(SdpTest::query($node, "SELECT string_agg(id || ':' || coalesce(length(t), -1) || ':' || coalesce(jsonb_array_length(j), -1), ',' ORDER BY id) "
	  . "FROM hostile WHERE kafka_partition = 0"),
	'1:-1:1,4:200000:-1,5:4:-1,7:10:-1', '999 levels, a 200,000-character string and 20,000 fields are decoded');

# Every mutated message exactly once: a row or a dead letter.
my ($rows, $dead, $both, $distinct) = split /\|/, SdpTest::query($node, <<'SQL');
WITH r AS (SELECT kafka_offset FROM hostile WHERE kafka_partition = 1),
     d AS (SELECT kafka_offset FROM sdp.dead_letters WHERE flow = 'hostile_flow' AND kafka_partition = 1),
     a AS (SELECT kafka_offset FROM r UNION ALL SELECT kafka_offset FROM d)
SELECT (SELECT count(*) FROM r), (SELECT count(*) FROM d),
       (SELECT count(*) FROM r JOIN d USING (kafka_offset)),
       (SELECT count(DISTINCT kafka_offset) FILTER (WHERE kafka_offset BETWEEN 0 AND 2999) FROM a)
SQL
is($rows + $dead, scalar @fuzz, "mutated messages: $rows rows + $dead dead letters = " . scalar @fuzz);
is($both, 0, 'no message is both a row and a dead letter');
is($distinct, scalar @fuzz, 'every offset 0..2999 accounted for');
cmp_ok($dead, '>', 1000, 'most mutations are refused');
cmp_ok($rows, '>', 100, 'some mutations still decode');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.dead_letters WHERE flow = 'hostile_flow' AND error = ''"),
	'0', 'every dead letter has its reason');

is(SdpTest::query($node, "SELECT state || ' ' || restarts || ' ' || coalesce(last_error, '-') FROM sdp.flow_status WHERE flow = 'hostile_flow'"),
	'running 0 -', 'the flow runs on, never restarted');
is(SdpTest::query($node, 'SELECT pg_postmaster_start_time()'), $started, 'the server never restarted');

done_testing();
