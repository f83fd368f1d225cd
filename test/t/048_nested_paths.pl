# Nested JSON: an input column can take its value from a path into the
# document ('lat float8 FROM position.lat, first_tag text FROM tags[0]').
# Every document is sent twice: as it is (the decoder's fast path) and with
# an escape in a field nobody declared (PostgreSQL's parser); both rows
# must be the same, and each column must be what PostgreSQL's own -> and
# ->> operators take from the document at that path (a name reaches a
# member of an object only, an index an element of an array only).  A
# value that does not fit its column is dead-lettered with its path.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'nested' => 1 });
my $node = SdpTest::new_node('nested');
SdpTest::create_source($node, 'nested', $broker, 'nested');

my $schema = 'id int, lat float8 FROM position.lat, lon float8 FROM position . lon, '
  . 'alt int FROM position.alt.baro, position jsonb, first_tag text FROM tags[0], '
  . 'third_tag text FROM tags[2], item_name text FROM items[1].name, '
  . 'item_qty numeric(10,2) FROM items[1].qty, whole_items jsonb FROM items, '
  . '"Mixed" text FROM "Meta"."Source", flag boolean FROM meta.flags[0]."on", '
  . 'id_again bigint FROM id, "from" text, deep text FROM a.b.c.d.e.f.g.h';
SdpTest::query($node, <<"SQL");
CREATE TABLE nested (id int PRIMARY KEY, lat float8, lon float8, alt int, position jsonb,
  first_tag text, third_tag text, item_name text, item_qty numeric(10,2), whole_items jsonb,
  "Mixed" text, flag boolean, id_again bigint, "from" text, deep text);
CREATE TABLE docs (id int PRIMARY KEY, doc jsonb);
SELECT sdp_create_flow('nested_flow', 'nested', 'nested', '$schema', options => '{"mode": "append"}');
SQL

my $deep = ('[' x 80) . (']' x 80);
my @docs = (
	# every path there
	q({"position": {"lat": 51.5, "lon": -0.12, "alt": {"baro": 1200}}, "tags": ["a", "b", "c"],
	   "items": [{"name": "x", "qty": 1}, {"name": "y", "qty": 2.5}], "Meta": {"Source": "S"},
	   "meta": {"flags": [{"on": true}]}, "from": "f", "a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": "deep"}}}}}}}}),
	# none of them
	q({}),
	# a path through a scalar, an array where a member is named, an object where an index is
	q({"position": 5, "tags": {"0": "zero"}, "items": "no", "Meta": ["Source"], "meta": {"flags": {"0": {"on": true}}}}),
	q({"position": [51.5, -0.12], "tags": [], "items": [{"name": "only one"}]}),
	# nulls on the way and at the end
	q({"position": {"lat": null, "lon": 1, "alt": null}, "tags": [null, "b", null], "items": [null, {"name": null}]}),
	# the order of members does not matter; the last of a repeated member wins
	q({"tags": ["t0", "t1", "t2", "t3"], "position": {"alt": {"baro": 7}, "lon": 2, "lat": 1, "lat": 3}}),
	# nested values as they were sent: an object into a text column, a string into jsonb
	q({"items": [{"name": "a"}, {"name": {"k": [1, 2]}, "qty": "3.25"}], "position": "text"}),
	# case matters in a name: "meta"."source" is not "Meta"."Source"
	q({"meta": {"source": "lower", "flags": [{"on": false}, {"on": true}]}, "Meta": {"Source": "Upper", "source": "x"}}),
	# undeclared nesting deeper than the fast path goes, beside declared paths
	qq({"skip": $deep, "position": {"lat": 1.25}, "tags": ["z"]}),
	# whitespace everywhere
	qq( { "position" :\t{ "lat"\n: 4.5 , "alt" : { "baro" : -3 } } , "tags" : [ "w" , "x" , "y" ] } ),
	# a declared path through a member that another path's node also has
	q({"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": 12.5}}}}}}}, "position": {"alt": {"baro": 1, "other": [1, {"x": 2}]}}}),
);
# an escape in a declared name or value on the way: only the parser reads these
my @escaped = (
	q({"position": {"l\u0061t": 8.5, "lon": 9}, "tags": ["\u0041", "b", "c\"d"]}),
	q({"items": [{}, {"n\u0061me": "esc\\\\aped"}], "Meta": {"\u0053ource": "S2"}}),
);

my @msgs;
my $n = 0;
my @ids;
for my $doc (@docs, @escaped)
{
	my $body = $doc;
	$body =~ s/^\s*\{//;
	my $sep = $body =~ /^\s*\}\s*$/ ? '' : ', ';
	my $plain = qq({"id": $n$sep$body);
	my $slow = qq({"pad": "\\u00e9", "id": @{[ $n + 1000 ]}$sep$body);
	push @msgs, [ 'k', $plain, 0 ], [ 'k', $slow, 0 ];
	push @ids, $n;
	for my $m ([ $n, $plain ], [ $n + 1000, $slow ])
	{
		(my $lit = $m->[1]) =~ s/'/''/g;
		SdpTest::query($node, "INSERT INTO docs VALUES ($m->[0], '$lit')");
	}
	$n++;
}
# a value that does not fit its column, at a path
push @msgs, [ 'k', q({"id": 500, "position": {"alt": {"baro": "high"}}}), 0 ];
push @msgs, [ 'k', q({"id": 501, "items": [{}, {"qty": 123456789.5}]}), 0 ];
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'nested', messages => \@msgs);
my $total = scalar @msgs;
ok(SdpTest::wait_consumed($node, 'nested_flow', $total), "all $total consumed");

is(SdpTest::query($node, 'SELECT count(*) FROM nested'), 2 * $n, 'a row for every document in both forms');

# the fast path and the parser give the same row
is(SdpTest::query($node, <<'SQL'), '', 'each document gives the same row by either path');
SELECT string_agg(a.id::text, ',') FROM nested a JOIN nested b ON b.id = a.id + 1000
 WHERE (a.lat, a.lon, a.alt, a.position, a.first_tag, a.third_tag, a.item_name, a.item_qty, a.whole_items,
        a."Mixed", a.flag, a."from", a.deep)
       IS DISTINCT FROM
       (b.lat, b.lon, b.alt, b.position, b.first_tag, b.third_tag, b.item_name, b.item_qty, b.whole_items,
        b."Mixed", b.flag, b."from", b.deep)
SQL

# each column is what -> and ->> take from the document
my %expect = (
	lat => q{(d.doc->'position'->>'lat')::float8},
	lon => q{(d.doc->'position'->>'lon')::float8},
	alt => q{(d.doc->'position'->'alt'->>'baro')::int},
	position => q{d.doc->'position'},
	first_tag => q{d.doc->'tags'->>0},
	third_tag => q{d.doc->'tags'->>2},
	# an object at a path into a text column keeps its text as sent (written here as jsonb prints it)
	item_name => q{d.doc->'items'->1->>'name'},
	item_qty => q{(d.doc->'items'->1->>'qty')::numeric(10,2)},
	whole_items => q{d.doc->'items'},
	'"Mixed"' => q{d.doc->'Meta'->>'Source'},
	flag => q{(d.doc->'meta'->'flags'->0->>'on')::boolean},
	id_again => q{(d.doc->>'id')::bigint},
	'"from"' => q{d.doc->>'from'},
	deep => q{d.doc->'a'->'b'->'c'->'d'->'e'->'f'->'g'->>'h'},
);
for my $col (sort keys %expect)
{
	is(SdpTest::query($node, "SELECT count(*) FROM nested n JOIN docs d USING (id) WHERE n.$col IS DISTINCT FROM $expect{$col}"),
		'0', "$col: as -> and ->> take it from every document");
}
is(SdpTest::query($node, "SELECT item_name FROM nested WHERE id = 6"), '{"k": [1, 2]}',
	'an object at a path into a text column: its text as sent');
is(SdpTest::query($node, q{SELECT count(*) FROM nested n JOIN docs d USING (id) WHERE n.id_again IS DISTINCT FROM coalesce((d.doc->>'id')::bigint, 0) OR n.id_again <> n.id}),
	'0', 'a path of one name is that top-level field (id_again FROM id)');

# spot checks of the values themselves
is(SdpTest::query($node, q{SELECT concat_ws('|', lat, lon, alt, first_tag, third_tag, item_name, item_qty, "Mixed", flag, "from", deep) FROM nested WHERE id = 0}),
	'51.5|-0.12|1200|a|c|y|2.50|S|t|f|deep', 'every path of the first document');
is(SdpTest::query($node, q{SELECT concat_ws('|', coalesce(lat::text, '-'), coalesce(first_tag, '-'), coalesce(item_name, '-'), coalesce(flag::text, '-'), position) FROM nested WHERE id = 2}),
	'-|-|-|-|5', 'a path through a scalar, or naming a member of an array or an index of an object, is NULL');
is(SdpTest::query($node, q{SELECT concat_ws('|', lat, lon, alt, first_tag, third_tag) FROM nested WHERE id = 5}),
	'3|2|7|t0|t2', 'members in any order; the last of a repeated one');
is(SdpTest::query($node, q{SELECT concat_ws('|', "Mixed", flag) FROM nested WHERE id = 7}),
	'Upper|f', 'names are case-sensitive, quoted as SQL quotes them');
is(SdpTest::query($node, q{SELECT concat_ws('|', lat, first_tag) FROM nested WHERE id IN (8, 1008) ORDER BY id}),
	"1.25|z\n1.25|z", 'beside nesting deeper than the fast path reads');
is(SdpTest::query($node, q{SELECT concat_ws('|', lat, lon, first_tag, third_tag) FROM nested WHERE id = 11}),
	'8.5|9|A|c"d', 'an escaped name and escaped values on the way');
is(SdpTest::query($node, q{SELECT concat_ws('|', item_name, "Mixed") FROM nested WHERE id = 12}),
	'esc\aped|S2', 'an escaped member name at an index');

# bad values: dead-lettered with the path in the reason
is(SdpTest::query($node, "SELECT kafka_offset || ': ' || error FROM sdp.dead_letters WHERE flow = 'nested_flow' ORDER BY kafka_offset"),
	($total - 2) . qq{: field "position.alt.baro": invalid input syntax for type integer: "high"\n}
	  . ($total - 1) . ': field "items[1].qty": numeric field overflow',
	'a value that does not fit its column is dead-lettered, the path in its reason');
is(SdpTest::query($node, 'SELECT count(*) FROM nested WHERE id IN (500, 501)'), '0', 'and not written');

done_testing();
