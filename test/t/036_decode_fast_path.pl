# The decoder's fast paths (json_decode.c) give exactly what PostgreSQL's
# JSON parser and input functions give: a flat document without escapes is
# read in one pass, plain decimals of up to 15 digits without float8in, ISO
# 8601 timestamps with a zone without timestamptz_in; everything else (an
# escape, deep nesting, invalid JSON, another form of a value) goes the old
# way.  Each value is compared with the same text cast in SQL, in a session
# time zone that is not UTC; invalid documents keep their reasons.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'fp' => 1 });
my $node = SdpTest::new_node('fastpath');
SdpTest::create_source($node, 'fp', $broker, 'fp');
# the worker reads the database's time zone: a value without a zone is local time there
SdpTest::query($node, <<'SQL');
ALTER DATABASE postgres SET TimeZone = 'America/New_York';
CREATE TABLE fp (id int PRIMARY KEY, ts timestamptz, ts_text text, f8 float8, f8_text text, f4 float4,
                 j jsonb, t text, b boolean);
SELECT sdp_create_flow('fp_flow', 'fp', 'fp',
  'id int, ts timestamptz, ts_text text, f8 float8, f8_text text, f4 float4, j jsonb, t text, b boolean');
SQL

my @msgs;
my $id = 0;
sub msg { my ($payload) = @_; push @msgs, [ 'k', $payload, 0 ]; return $id++ }

# timestamps: the fast form (with a zone) and others that go to timestamptz_in
my @ts = (
	'2026-01-02T03:04:05Z', '2026-01-02T03:04:05.1Z', '2026-01-02T03:04:05.123456Z',
	'2026-01-02T03:04:05.1234565Z', '2026-01-02 03:04:05.5Z', '2026-01-02T03:04:05+05:30',
	'2026-01-02T03:04:05.25-08:00', '2026-01-02T03:04:05+15:59', '2026-01-02T03:04:05-00:00',
	'2024-02-29T12:00:00Z', '2000-02-29T23:59:59.999999Z', '1900-02-28T00:00:00Z',
	'0001-01-01T00:00:00Z', '9999-12-31T23:59:59.999999Z', '2026-07-01T12:00:00',
	'2026-01-02T24:00:00Z', '2016-12-31T23:59:60Z', '2026-01-02T03:04:05+0530',
	'2026-01-02T03:04:05+05', '1970-01-01T00:00:00Z', '1999-12-31T23:59:59.000001+14:00');
my $first_ts = $id;
msg(qq({"id": $id, "ts": "$_", "ts_text": "$_"})) for @ts;
my @bad_ts = ('2023-02-29T12:00:00Z', '2026-13-01T00:00:00Z', '2026-01-32T00:00:00Z', '2026-01-02T03:60:00Z');
my $first_bad_ts = $id;
msg(qq({"id": $id, "ts": "$_", "ts_text": "$_"})) for @bad_ts;

# floats: numbers and strings, plain decimals of every length around the fast path's 15 digits, and others
srand(36);
my @f = ('0', '-0', '-0.0', '0.0', '1', '-1', '0.1', '0.2', '0.3', '2.5', '1.25', '-51.50735',
	'123456789012345', '1234567890123456', '0.123456789012345', '0.1234567890123456',
	'99999999999999.9', '999999999999999', '9007199254740993', '1e3', '1E-3', '-2.5e+10',
	'0.000001', '000.5', '12.000', '4.35', '3.14159265358979', '179.99999', '-179.99999');
for (1 .. 400)
{
	my $int = int(rand(10**int(rand(9))));
	my $frac = join('', map { int(rand(10)) } 1 .. int(rand(12)));
	my $s = (rand() < 0.3 ? '-' : '') . $int . (length $frac ? ".$frac" : '');
	$s =~ s/^(-?)0+(\d)/$1$2/;
	push @f, $s;
}
my $first_f = $id;
msg(qq({"id": $id, "f8": $_, "f8_text": $_, "f4": $_})) for grep { !/^-?0\d/ } @f;
msg(qq({"id": $id, "f8": "$_", "f8_text": "$_", "f4": "$_"})) for @f;
msg(qq({"id": $id, "f8": " 1.5 ", "f8_text": " 1.5 ", "f4": " 1.5 "}));
my $last_f = $id - 1;

# documents: whitespace, nesting, escapes, repeated fields, and invalid ones (their reasons are the parser's)
my $deep = ('[' x 70) . (']' x 70);
my %doc = (
	spaces => msg(qq( \t\r\n{ \n"id"\t:\r$id ,"t" : "a b" , "b":true,"j":{ "x" : [1, 2.5e3, "s", null, {}] } } \n)),
	nested => msg(qq({"id": $id, "skip": {"a": [1, {"b": [true, false, null]}]}, "j": [], "t": "x"})),
	esc_skip => msg(qq({"id": $id, "skip": "a\\"b\\u00e9", "t": "plain"})),
	esc_key => msg(qq({"id": $id, "\\u0074": "escaped key"})),
	esc_val => msg(qq({"id": $id, "t": "tab\\there"})),
	deep => msg(qq({"id": $id, "j": $deep})),
	dup => msg(qq({"id": $id, "j": {"first": 1}, "j": [2], "t": 1, "t": "last"})),
	empty_t => msg(qq({"id": $id, "t": "", "j": "", "b": false})),
	nulls => msg(qq({"id": $id, "t": null, "j": null, "ts": null})),
	unicode => msg(qq({"id": $id, "t": "caf\xc3\xa9 \xf0\x9f\x98\x80"})),
	bad_trail => msg(qq({"id": $id} x)),
	bad_num => msg(qq({"id": ${id}x})),
	bad_lead0 => msg(qq({"id": 0$id})),
	bad_lit => msg(qq({"id": $id, "b": tru})),
	bad_comma => msg(qq({"id": $id,})),
	bad_ctrl => msg(qq({"id": $id, "t": "a\x01b"})),
	bad_open => msg(qq({"id": $id, "j": [1, 2)),
	bad_two => msg(qq({"id": $id}{"id": 0})),
	not_obj => msg(qq("just a string")),
);

SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'fp', messages => \@msgs);
ok(SdpTest::wait_consumed($node, 'fp_flow', scalar @msgs), 'all consumed');

my $tz = "SET TimeZone = 'America/New_York'; ";
is(SdpTest::query($node, $tz . "SELECT count(*), count(*) FILTER (WHERE ts IS NOT DISTINCT FROM ts_text::timestamptz) FROM fp WHERE id BETWEEN $first_ts AND $first_bad_ts - 1"),
	scalar(@ts) . '|' . scalar(@ts), 'every timestamp as the cast reads it');
SdpTest::query($node, <<'SQL');
CREATE FUNCTION ts_error(s text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN PERFORM s::timestamptz; RETURN NULL; EXCEPTION WHEN others THEN RETURN SQLERRM; END $$;
SQL
is(SdpTest::query($node, "SELECT string_agg(kafka_offset || ': ' || error, E'\\n' ORDER BY kafka_offset) FROM sdp.dead_letters WHERE flow = 'fp_flow' AND kafka_offset BETWEEN $first_bad_ts AND $first_f - 1"),
	join("\n", map { ($first_bad_ts + $_) . ': field "ts": ' . SdpTest::query($node, "SELECT ts_error('$bad_ts[$_]')") } 0 .. $#bad_ts),
	'impossible dates and times are refused as the cast refuses them');
my $nf = $last_f - $first_f + 1;
is(SdpTest::query($node, "SELECT count(*), count(*) FILTER (WHERE f8::text = f8_text::float8::text AND f4::text = f8_text::float8::float4::text) FROM fp WHERE id BETWEEN $first_f AND $last_f"),
	"$nf|$nf", 'every float as float8in reads it, to the last bit (and the sign of zero); float4 through float8 as before');
is(SdpTest::query($node, "SELECT f8_text FROM fp WHERE id = $first_f + 1"), '-0', 'a number keeps its text into a text column');

is(SdpTest::query($node, "SELECT t, b, j FROM fp WHERE id = $doc{spaces}"), 'a b|t|{"x": [1, 2500, "s", null, {}]}', 'whitespace everywhere');
is(SdpTest::query($node, "SELECT t, j FROM fp WHERE id = $doc{nested}"), 'x|[]', 'an undeclared nested field is skipped');
is(SdpTest::query($node, "SELECT t FROM fp WHERE id = $doc{esc_skip}"), 'plain', 'an escape in an undeclared field');
is(SdpTest::query($node, "SELECT t FROM fp WHERE id = $doc{esc_key}"), 'escaped key', 'an escaped field name');
is(SdpTest::query($node, "SELECT t FROM fp WHERE id = $doc{esc_val}"), "tab\there", 'an escaped value');
is(SdpTest::query($node, "SELECT jsonb_array_length(j), j::text = '$deep'::jsonb::text FROM fp WHERE id = $doc{deep}"), '1|t', '70 levels of nesting');
is(SdpTest::query($node, "SELECT t, j FROM fp WHERE id = $doc{dup}"), 'last|[2]', 'a repeated field: the last one');
is(SdpTest::query($node, "SELECT t = '', j, b FROM fp WHERE id = $doc{empty_t}"), 't|""|f', 'empty strings');
is(SdpTest::query($node, "SELECT t IS NULL, j IS NULL, ts IS NULL FROM fp WHERE id = $doc{nulls}"), 't|t|t', 'nulls');
is(SdpTest::query($node, "SELECT t FROM fp WHERE id = $doc{unicode}"), "caf\xc3\xa9 \xf0\x9f\x98\x80", 'UTF-8 text');

# invalid documents go to PostgreSQL's parser, which gives the reason
for my $k (qw(bad_trail bad_num bad_lead0 bad_lit bad_comma bad_ctrl bad_open bad_two))
{
	like(SdpTest::query($node, "SELECT error FROM sdp.dead_letters WHERE flow = 'fp_flow' AND kafka_offset = $doc{$k}"),
		qr/^invalid JSON at line 1, column \d+: \S/, "invalid JSON, $k: the parser's reason");
}
is(SdpTest::query($node, "SELECT error FROM sdp.dead_letters WHERE flow = 'fp_flow' AND kafka_offset = $doc{not_obj}"),
	'message is not a JSON object', 'valid JSON that is not an object');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.dead_letters WHERE flow = 'fp_flow'"),
	scalar(@bad_ts) + 9, 'nothing else set aside');

done_testing();
