# Tombstones (a message with a key and no value), as on_tombstone says:
# 'delete' deletes the target row whose primary key is the message key, in
# message order with the key's other messages (within a batch and across
# batches); 'skip' counts them in rows_skipped; 'dead_letter' (the default)
# keeps them in sdp.dead_letters.  A tombstone without a key, or with a key
# the primary key's type does not take, is dead-lettered with the reason,
# and the rest of its batch goes through.  Kafka headers arrive in the
# metadata column kafka_headers as jsonb.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'kv' => 2, 'h' => 1 });
my $node = SdpTest::new_node('tombstones');
SdpTest::create_source($node, 'kv', $broker, 'kv');
SdpTest::query($node, <<'SQL');
CREATE TABLE kv_del (k text PRIMARY KEY, v int, kafka_offset bigint);
CREATE TABLE kv_skip (k text PRIMARY KEY, v int);
CREATE TABLE kv_dl (k text PRIMARY KEY, v int);
CREATE TABLE kv_int (k int PRIMARY KEY, v int);
SELECT sdp_create_flow('del', 'kv', 'kv_del', 'k text, v int', options => '{"on_tombstone": "delete"}');
SELECT sdp_create_flow('skp', 'kv', 'kv_skip', 'k text, v int', options => '{"on_tombstone": "skip"}');
SELECT sdp_create_flow('dl', 'kv', 'kv_dl', 'k text, v int');
SELECT sdp_create_flow('del_int', 'kv', 'kv_int', 'v int',
  transform => $$SELECT kafka_key::int AS k, v FROM input WHERE kafka_key ~ '^[0-9]+$'$$,
  options => '{"on_tombstone": "delete"}');
SQL
ok(SdpTest::wait_for($node, "SELECT count(*) = 4 FROM sdp.flow_status WHERE state = 'running' AND partitions IS NOT NULL"),
	'four flows running');

sub msg { my ($k, $v, $p) = @_; return [ $k, defined $v ? qq({"k": "$k", "v": $v}) : undef, $p ] }
# round 1: k1 written twice then deleted; k2 deleted then written again;
# k3 deleted without ever being written; k4 and 7 written; a tombstone
# without a key; one whose key is not an integer (for kv_int)
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'kv', messages => [
	msg('k1', 1, 0), msg('k1', 2, 0), msg('k3', undef, 0), msg('k1', undef, 0), [ undef, undef, 0 ],
	msg('7', 70, 0), msg('x9', undef, 0),
	msg('k2', 1, 1), msg('k2', undef, 1), msg('k2', 3, 1), msg('k4', 1, 1), msg('8', 80, 1) ]);
for my $f (qw(del skp dl del_int))
{
	ok(SdpTest::wait_consumed($node, $f, 12), "$f consumed round 1");
}
is(SdpTest::query($node, "SELECT string_agg(k || '=' || v, ',' ORDER BY k) FROM kv_del"), '7=70,8=80,k2=3,k4=1',
	'delete: k1 deleted after its writes, k2 written again after its delete, k3 never there');
is(SdpTest::query($node, "SELECT string_agg(k || '=' || v, ',' ORDER BY k) FROM kv_skip"), '7=70,8=80,k1=2,k2=3,k4=1',
	'skip: tombstones change nothing');
is(SdpTest::query($node, "SELECT string_agg(k || '=' || v, ',' ORDER BY k) FROM kv_dl"), '7=70,8=80,k1=2,k2=3,k4=1',
	'dead_letter: tombstones change nothing');
is(SdpTest::query($node, "SELECT string_agg(k || '=' || v, ',' ORDER BY k) FROM kv_int"), '7=70,8=80',
	'delete into an integer key: the integer keys written');

# round 2, another batch: k4 and 7 deleted, k5 written, k2 deleted and written again
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'kv', messages => [
	msg('7', undef, 0), msg('k5', 5, 0),
	msg('k4', undef, 1), msg('k2', undef, 1), msg('k2', 4, 1) ]);
for my $f (qw(del skp dl del_int))
{
	ok(SdpTest::wait_consumed($node, $f, 17), "$f consumed round 2");
}
is(SdpTest::query($node, "SELECT string_agg(k || '=' || v, ',' ORDER BY k) FROM kv_del"), '8=80,k2=4,k5=5',
	'delete: rows written in an earlier batch deleted');
is(SdpTest::query($node, "SELECT string_agg(k || '=' || v, ',' ORDER BY k) FROM kv_int"), '8=80',
	'delete into an integer key: 7 deleted');

# counters and dead letters
is(SdpTest::query($node, "SELECT flow || ':' || rows_skipped || '/' || rows_dead_lettered FROM sdp.flow_status WHERE flow IN ('skp', 'dl') ORDER BY flow"),
	"dl:0/8\nskp:8/0", 'skip counts the 8 tombstones in rows_skipped, dead_letter keeps them');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.dead_letters WHERE flow = 'dl' AND stage = 'decode' AND error LIKE 'empty message%'"),
	'8', 'dead_letter: each tombstone kept, as an empty message');
is(SdpTest::query($node, "SELECT string_agg(coalesce(kafka_key, '(null)') || ' ' || stage || ': ' || error, E'\n' ORDER BY kafka_offset) FROM sdp.dead_letters WHERE flow = 'del'"),
	'(null) decode: a tombstone without a key: no row to delete', 'delete: the keyless tombstone dead-lettered with the reason');
is(SdpTest::query($node, "SELECT string_agg(coalesce(kafka_key, '(null)') || ' ' || stage || ' ' || sqlstate, ',' ORDER BY kafka_partition, kafka_offset) FROM sdp.dead_letters WHERE flow = 'del_int'"),
	'k3 write 22P02,k1 write 22P02,(null) decode 22023,x9 write 22P02,k2 write 22P02,k4 write 22P02,k2 write 22P02',
	'delete into an integer key: each tombstone whose key is not an integer dead-lettered at write, alone');

# headers: text as strings, other bytes in base64, no value as null, a
# repeated name as an array; read by a flow without transform (the target
# has kafka_headers), by a transform naming it, and by one reading the whole row
SdpTest::create_source($node, 'h', $broker, 'h');
SdpTest::query($node, <<'SQL');
CREATE TABLE hdr (seq int, kafka_headers jsonb);
CREATE TABLE hdr_trace (seq int, trace text);
CREATE TABLE hdr_row (seq int, h jsonb);
CREATE TABLE hdr_none (seq int, kafka_headers jsonb);
SELECT sdp_create_flow('hdr', 'h', 'hdr', 'seq int');
SELECT sdp_create_flow('hdr_trace', 'h', 'hdr_trace', 'seq int', transform => $$SELECT seq, kafka_headers->>'trace' AS trace FROM input$$);
SELECT sdp_create_flow('hdr_row', 'h', 'hdr_row', 'seq int', transform => $$SELECT seq, to_jsonb(i)->'kafka_headers' AS h FROM input i$$);
SELECT sdp_create_flow('hdr_none', 'h', 'hdr_none', 'seq int', transform => $$SELECT seq FROM input$$);
SQL
ok(SdpTest::wait_for($node, "SELECT count(*) = 4 FROM sdp.flow_status WHERE flow LIKE 'hdr%' AND state = 'running' AND partitions IS NOT NULL"),
	'header flows running');
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'h', messages => [ [ 'a', '{"seq": 1}', 0 ] ],
	headers => [ 'trace=abc', "bin=\xff\xfe", 'rep=1', 'rep=2', 'nul', 'empty=' ]);
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'h', messages => [ [ 'b', '{"seq": 2}', 0 ] ]);
for my $f (qw(hdr hdr_trace hdr_row hdr_none))
{
	ok(SdpTest::wait_consumed($node, $f, 2), "$f consumed both");
}
is(SdpTest::query($node, "SELECT string_agg(seq || ' ' || coalesce(kafka_headers::text, 'NULL'), E'\n' ORDER BY seq) FROM hdr"),
	qq(1 {"bin": "//4=", "nul": null, "rep": ["1", "2"], "empty": "", "trace": "abc"}\n2 NULL),
	'kafka_headers: text, base64, null, a repeated name as an array; NULL without headers');
is(SdpTest::query($node, "SELECT string_agg(seq || ' ' || coalesce(trace, 'NULL'), ',' ORDER BY seq) FROM hdr_trace"),
	'1 abc,2 NULL', 'a transform reads a header');
is(SdpTest::query($node, "SELECT string_agg(seq || ' ' || coalesce(h->>'trace', 'NULL'), ',' ORDER BY seq) FROM hdr_row"),
	'1 abc,2 NULL', 'a transform reading the whole input row sees the headers');
is(SdpTest::query($node, "SELECT count(*) FROM hdr_none WHERE kafka_headers IS NULL"), '2',
	'a transform that does not produce kafka_headers writes none');

# declarations that cannot delete
for my $case (
	[ q{SELECT sdp_create_flow('bad1', 'kv', 'kv_skip', 'k text, v int', options => '{"on_tombstone": "delete", "mode": "append"}')},
	  qr/needs upsert mode/ ],
	[ q{CREATE TABLE kv2 (a text, b text, v int, PRIMARY KEY (a, b)); SELECT sdp_create_flow('bad2', 'kv', 'kv2', 'a text, b text, v int', options => '{"on_tombstone": "delete"}')},
	  qr/needs a primary key of one column, and target public.kv2 has 2/ ],
	[ q{SELECT sdp_create_flow('bad3', 'kv', 'kv_skip', 'k text, v int', options => '{"on_tombstone": "forget"}')},
	  qr/invalid value for option "on_tombstone": "forget"/ ])
{
	my ($ret, $out, $err) = $node->psql('postgres', $case->[0]);
	like($err, $case->[1], "refused: $case->[1]");
}

done_testing();
