# Debezium change events ("envelope": "debezium"), written here as
# Debezium's JSON converter writes them (with and without its schema
# wrapper): op c, r and u upsert the after image, d deletes the row of the
# before image (or of the message key when the event has no before image),
# tombstones are skipped by default and delete with on_tombstone 'delete';
# a key's events apply in order within a batch and across batches; the
# transform reads debezium_op, debezium_source and debezium_ts_ms and makes
# the target's key the same way for a delete; what is not an event it can
# apply (no op, a truncate, an unknown op, a delete without before image or
# key, a delete whose before image lacks the key, a delete the target
# refuses) is dead-lettered with the reason and the
# rest goes through.  A DEFAULT does not stand in for a missing before image;
# events without keys, and a transform that drops deletes, apply in order.
# test/t/055_debezium_connect.pl runs a real Debezium.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'cdc' => 2, 'cdc2' => 1 });
my $node = SdpTest::new_node('debezium');
SdpTest::create_source($node, 'cdc', $broker, 'cdc');
SdpTest::create_source($node, 'cdc2', $broker, 'cdc2');
SdpTest::query($node, <<'SQL');
CREATE TABLE items (id int PRIMARY KEY, name text, qty int);
CREATE TABLE items_t (item_id bigint PRIMARY KEY, label text, qty int, op text, lsn bigint, ts_ms bigint);
CREATE TABLE items_del (id int PRIMARY KEY, name text, qty int);
CREATE TABLE lines (order_id int, line int, sku text, PRIMARY KEY (order_id, line));
CREATE TABLE items_dflt (id int PRIMARY KEY, name text, qty int);
CREATE TABLE items_nodel (id int PRIMARY KEY, name text, qty int);
SELECT sdp_create_flow('plain', 'cdc', 'items', 'id int, name text, qty int',
  options => '{"envelope": "debezium"}');
SELECT sdp_create_flow('xf', 'cdc', 'items_t', 'id int, name text, qty int',
  transform => $$SELECT id + 1000 AS item_id, upper(name) AS label, qty, debezium_op AS op,
                        (debezium_source->>'lsn')::bigint AS lsn, debezium_ts_ms AS ts_ms
                   FROM input WHERE debezium_op = 'd' OR qty >= 0$$,
  options => '{"envelope": "debezium"}');
SELECT sdp_create_flow('tomb', 'cdc', 'items_del', 'id int, name text, qty int',
  options => '{"envelope": "debezium", "on_tombstone": "delete"}');
SELECT sdp_create_flow('lines', 'cdc2', 'lines', 'order_id int, line int, sku text FROM item.sku',
  options => '{"envelope": "debezium"}');
-- a DEFAULT does not stand in for a delete's missing before image
SELECT sdp_create_flow('dflt', 'cdc', 'items_dflt', 'id int, name text DEFAULT ''none'', qty int DEFAULT 0',
  options => '{"envelope": "debezium"}');
-- a transform that drops the deletes: the upserts before them stay
SELECT sdp_create_flow('nodel', 'cdc', 'items_nodel', 'id int, name text, qty int',
  transform => $$SELECT id, name, qty FROM input WHERE debezium_op <> 'd'$$,
  options => '{"envelope": "debezium"}');
SQL
ok(SdpTest::wait_for($node, "SELECT count(*) = 6 FROM sdp.flow_status WHERE state = 'running' AND partitions IS NOT NULL"),
	'six Debezium flows running');

my $lsn = 1000;

sub row_json
{
	my ($r) = @_;
	return 'null' unless defined $r;
	return '{' . join(', ', map { my $v = $r->{$_}; qq("$_": ) . (!defined $v ? 'null' : $v =~ /^-?\d+$/ ? $v : qq("$v")) }
						  sort keys %$r) . '}';
}

# An event as Debezium's JsonConverter writes it; wrapped: with its schema (schemas.enable)
sub event
{
	my (%e) = @_;
	$lsn += 8;
	my $payload = sprintf('{"before": %s, "after": %s, "source": {"version": "3.6.1.Final", "connector": "postgresql", '
		  . '"name": "cdc", "ts_ms": 1764900000000, "db": "src", "schema": "public", "table": "items", "lsn": %d, '
		  . '"txId": 77}, "op": %s, "ts_ms": %d, "transaction": null}',
		row_json($e{before}), row_json($e{after}), $lsn, defined $e{op} ? qq("$e{op}") : 'null', 1764900000000 + $lsn);
	return $payload unless $e{wrapped};
	return '{"schema": {"type": "struct", "fields": [{"type": "struct", "fields": [{"type": "int32", "optional": false, '
	  . '"field": "id"}], "optional": true, "name": "cdc.public.items.Value", "field": "before"}], "optional": false, '
	  . '"name": "cdc.public.items.Envelope", "version": 2}, "payload": ' . $payload . '}';
}

sub key_json
{
	my ($id, $wrapped) = @_;
	return qq({"id": $id}) unless $wrapped;
	return qq({"schema": {"type": "struct", "fields": [{"type": "int32", "optional": false, "field": "id"}], )
	  . qq("optional": false, "name": "cdc.public.items.Key"}, "payload": {"id": $id}});
}

sub item { my ($id, $name, $qty) = @_; return { id => $id, name => $name, qty => $qty } }

# round 1, one batch: snapshot reads, inserts, updates, deletes with and
# without a before image, a key changed (delete + create), a key created,
# updated, deleted and created again within the batch, tombstones after
# each delete; half of the events with the schema wrapper
my @m = (
	[ key_json(1), event(op => 'r', after => item(1, 'apple', 5)), 0 ],
	[ key_json(2, 1), event(op => 'r', after => item(2, 'pear', 7), wrapped => 1), 1 ],
	[ key_json(3), event(op => 'c', after => item(3, 'plum', 1)), 0 ],
	[ key_json(1), event(op => 'u', before => undef, after => item(1, 'apple', 6)), 0 ],
	[ key_json(4, 1), event(op => 'c', after => item(4, 'fig', 2), wrapped => 1), 1 ],
	[ key_json(4, 1), event(op => 'u', before => item(4, 'fig', 2), after => item(4, 'fig', 3), wrapped => 1), 1 ],
	[ key_json(4, 1), event(op => 'd', before => { id => 4 }, wrapped => 1), 1 ],
	[ key_json(4, 1), undef, 1 ],
	[ key_json(4, 1), event(op => 'c', after => item(4, 'fig', 9), wrapped => 1), 1 ],
	[ key_json(3), event(op => 'd', before => undef), 0 ],                # no before image: the key
	[ key_json(3), undef, 0 ],
	[ key_json(5), event(op => 'c', after => item(5, 'kiwi', -1)), 0 ],   # xf filters it
	[ key_json(6), event(op => 'c', after => item(6, 'lime', 4)), 0 ],
	[ key_json(6), event(op => 'd', before => item(6, 'lime', 4)), 0 ],
	[ key_json(7), event(op => 'c', after => item(7, 'date', 1)), 0 ],
	[ key_json(7), event(op => 'd', before => { id => 7 }), 0 ],          # deleted by an event ...
	[ key_json(7), undef, 0 ],                                            # ... its tombstone after it
	[ key_json(8), event(op => 'c', after => item(8, 'yuzu', 1)), 1 ],
	[ key_json(8), event(op => 'd', before => { id => 8 }), 1 ],
	[ key_json(8), event(op => 'c', after => item(8, 'yuzu', 2)), 1 ],
	[ key_json(8), event(op => 'u', before => undef, after => item(8, 'yuzu', 3)), 1 ]);
my $last_lsn = $lsn;
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'cdc', messages => \@m);
my $n = scalar @m;
ok(SdpTest::wait_consumed($node, $_, $n), "$_ consumed round 1") for qw(plain xf tomb dflt nodel);

is(SdpTest::query($node, "SELECT string_agg(id || '=' || name || '/' || qty, ',' ORDER BY id) FROM items"),
	'1=apple/6,2=pear/7,4=fig/9,5=kiwi/-1,8=yuzu/3',
	'plain: each key as its last event says (3, 6 and 7 deleted; 4 and 8 deleted then created again)');
is(SdpTest::query($node, "SELECT string_agg(item_id || '=' || label || '/' || qty || '/' || op, ',' ORDER BY item_id) FROM items_t"),
	'1001=APPLE/6/u,1002=PEAR/7/r,1004=FIG/9/c,1008=YUZU/3/u',
	'transform: the key made from the before image deletes as from the after image; the filter drops kiwi');
is(SdpTest::query($node, "SELECT item_id || ':' || lsn || ':' || ts_ms FROM items_t WHERE item_id = 1008"),
	"1008:$last_lsn:" . (1764900000000 + $last_lsn),
	'transform: source.lsn and ts_ms of the last event');
is(SdpTest::query($node, "SELECT string_agg(id::text, ',' ORDER BY id) FROM items_del"), '1,2,4,5,8',
	'on_tombstone delete: the tombstones delete again what their events deleted');
is(SdpTest::query($node, "SELECT string_agg(id || '=' || name || '/' || qty, ',' ORDER BY id) FROM items_dflt"),
	'1=apple/6,2=pear/7,4=fig/9,5=kiwi/-1,8=yuzu/3',
	'DEFAULTs in the schema: a delete without before image still deletes by its key');
is(SdpTest::query($node, "SELECT string_agg(id || '=' || name || '/' || qty, ',' ORDER BY id) FROM items_nodel"),
	'1=apple/6,2=pear/7,3=plum/1,4=fig/9,5=kiwi/-1,6=lime/4,7=date/1,8=yuzu/3',
	'a transform that drops the deletes: every row as its last upsert left it, whatever the batches');
is(SdpTest::query($node, "SELECT flow || ':' || rows_skipped || '/' || rows_dead_lettered FROM sdp.flow_status WHERE flow IN ('plain', 'tomb') ORDER BY flow"),
	"plain:3/0\ntomb:0/0", 'the three tombstones skipped by default, deleting with on_tombstone delete');

# round 2, another batch: rows of round 1 updated and deleted
@m = (
	[ key_json(1), event(op => 'd', before => item(1, 'apple', 6)), 0 ],
	[ key_json(1), undef, 0 ],
	[ key_json(2, 1), event(op => 'u', before => undef, after => item(2, 'pear', 8), wrapped => 1), 1 ],
	[ key_json(5), event(op => 'u', after => item(5, 'kiwi', 1)), 0 ],
	[ key_json(8), event(op => 'd', before => undef), 1 ]);
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'cdc', messages => \@m);
$n += scalar @m;
ok(SdpTest::wait_consumed($node, $_, $n), "$_ consumed round 2") for qw(plain xf tomb);
is(SdpTest::query($node, "SELECT string_agg(id || '=' || name || '/' || qty, ',' ORDER BY id) FROM items"),
	'2=pear/8,4=fig/9,5=kiwi/1', 'plain: rows of an earlier batch updated and deleted');
is(SdpTest::query($node, "SELECT string_agg(item_id || '=' || label || '/' || qty, ',' ORDER BY item_id) FROM items_t"),
	'1002=PEAR/8,1004=FIG/9,1005=KIWI/1', 'transform: the same, kiwi in now that its qty passes the filter');
is(SdpTest::query($node, "SELECT string_agg(id::text, ',' ORDER BY id) FROM items_del"), '2,4,5', 'on_tombstone delete: the same rows');

# round 3: what the flows cannot apply, each dead-lettered with its reason,
# the rest written: among them a delete the target refuses (a row another
# table references), the batch's other delete applied
SdpTest::query($node, 'CREATE TABLE holds (item_id int REFERENCES items (id)); INSERT INTO holds VALUES (2)');
@m = (
	[ key_json(9), '{"before": null, "after": {"id": 9}, "source": {}, "ts_ms": 1}', 0 ],
	[ key_json(9), event(op => 't'), 0 ],
	[ key_json(9), event(op => 'x', after => item(9, 'odd', 1)), 0 ],
	[ undef, event(op => 'd', before => undef), 0 ],
	[ 'not json', event(op => 'd', before => undef), 0 ],
	[ key_json(9), 'not json', 0 ],
	[ key_json(10), event(op => 'c', after => item(10, 'quince', 'many')), 0 ],
	[ key_json(11), event(op => 'c', after => item(11, 'lemon', 1)), 0 ],
	# a before image without the key's column: it would delete nothing
	[ key_json(12), event(op => 'd', before => { name => 'n7' }), 0 ],
	[ key_json(2, 1), event(op => 'd', before => { id => 2 }, wrapped => 1), 1 ],
	[ key_json(5), event(op => 'd', before => { id => 5 }), 1 ]);
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'cdc', messages => \@m);
$n += scalar @m;
ok(SdpTest::wait_consumed($node, 'plain', $n), 'plain consumed round 3');
is(SdpTest::query($node, "SELECT string_agg(id || '=' || name, ',' ORDER BY id) FROM items WHERE id > 8"), '11=lemon',
	'the event after the bad ones written');
is(SdpTest::query($node, "SELECT string_agg(id::text, ',' ORDER BY id) FROM items"), '2,4,11',
	'the delete of a referenced row refused alone: the other delete of its batch applied');
is(SdpTest::query($node, "SELECT kafka_partition || ' ' || stage || ' ' || sqlstate FROM sdp.dead_letters WHERE flow = 'plain' AND sqlstate = '23503'"),
	'1 write 23503', 'the refused delete dead-lettered at write');
is(SdpTest::query($node, "SELECT string_agg(sqlstate || ' ' || error, E'\n' ORDER BY kafka_offset) FROM sdp.dead_letters WHERE flow = 'plain' AND kafka_partition = 0"),
	join("\n",
		'22P02 not a Debezium change event: it has no "op"',
		'0A000 a truncate event (op "t"): a flow does not truncate its target',
		'0A000 a change event with op "x": a flow applies c, r, u and d',
		'22P02 a delete event without a "before" image: no row to delete: the message has no key',
		'22P02 a delete event without a "before" image: no row to delete: the message key is not the row\'s key (invalid JSON at line 1, column 1: Token "not" is invalid.)',
		'22P02 invalid JSON at line 1, column 1: Token "not" is invalid.',
		'22P02 field "after.qty": invalid input syntax for type integer: "many"',
		'23502 a delete event whose key column "id" is null: it deletes no row of public.items'),
	'each dead-lettered with its reason');

# a primary key of two columns, a path in the image, in the order of its events
@m = (
	[ '{"order_id": 1, "line": 1}', '{"before": null, "after": {"order_id": 1, "line": 1, "item": {"sku": "A"}}, "op": "c"}', 0 ],
	[ '{"order_id": 1, "line": 2}', '{"before": null, "after": {"order_id": 1, "line": 2, "item": {"sku": "B"}}, "op": "c"}', 0 ],
	[ '{"order_id": 2, "line": 1}', '{"before": null, "after": {"order_id": 2, "line": 1, "item": {"sku": "C"}}, "op": "c"}', 0 ],
	[ '{"order_id": 1, "line": 1}', '{"before": {"order_id": 1, "line": 1, "item": null}, "after": null, "op": "d"}', 0 ],
	[ '{"order_id": 1, "line": 2}', '{"before": null, "after": {"order_id": 1, "line": 2, "item": {"sku": "B2"}}, "op": "u"}', 0 ],
	# without message keys (a table Debezium captures without a primary key): applied in order
	[ undef, '{"before": null, "after": {"order_id": 3, "line": 1, "item": {"sku": "E"}}, "op": "c"}', 0 ],
	[ undef, '{"before": {"order_id": 3, "line": 1}, "after": null, "op": "d"}', 0 ],
	[ undef, '{"before": null, "after": {"order_id": 4, "line": 1, "item": {"sku": "F"}}, "op": "c"}', 0 ],
	[ undef, '{"before": {"order_id": 4, "line": 1}, "after": null, "op": "d"}', 0 ],
	[ undef, '{"before": null, "after": {"order_id": 4, "line": 1, "item": {"sku": "G"}}, "op": "c"}', 0 ]);
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'cdc2', messages => \@m);
ok(SdpTest::wait_consumed($node, 'lines', 10), 'lines consumed');
is(SdpTest::query($node, "SELECT string_agg(order_id || '.' || line || '=' || sku, ',' ORDER BY order_id, line) FROM lines"),
	'1.2=B2,2.1=C,4.1=G', 'a key of two columns deleted; a path in the image; events without keys in their order');

done_testing();
