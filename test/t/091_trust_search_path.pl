# The SQL a flow runs as its owner (issue 26): sdp_ext's own generated
# statements never pick another role's operator or function from a schema
# on the owner's search_path (the tombstone DELETE on a varchar key, the
# window_agg fan-out); the transform resolves names through the search_path
# fixed at its declaration, not the owner's of the moment; what one batch's
# transform changes in the session (its role, its settings) does not reach
# the next; a transform cannot drop its own flow.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'kv' => 1, 'pay' => 1, 'ev' => 1 });
my $boot = $broker->bootstrap;
my $node = SdpTest::new_node('trust_path');

# eve may create in public, which is on everyone's default search_path
# ("$user", public), and lays traps: an exact match for varchar = varchar,
# and for concat_ws(text, text, text), each noting who called it.
SdpTest::query($node, <<'SQL');
CREATE ROLE eve LOGIN;
GRANT CREATE ON SCHEMA public TO eve;
CREATE TABLE public.trap_log (who text, what text);
GRANT INSERT ON public.trap_log TO PUBLIC;
SET ROLE eve;
CREATE FUNCTION public.trap_eq(varchar, varchar) RETURNS boolean LANGUAGE plpgsql AS
  $$BEGIN INSERT INTO public.trap_log VALUES (current_user, '='); RETURN $1::text OPERATOR(pg_catalog.=) $2::text; END$$;
CREATE OPERATOR public.= (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = public.trap_eq);
CREATE FUNCTION public.concat_ws(text, text, text) RETURNS text LANGUAGE plpgsql AS
  $$BEGIN INSERT INTO public.trap_log VALUES (current_user, 'concat_ws'); RETURN pg_catalog.concat_ws($1, $2, $3); END$$;
RESET ROLE;
SQL
is(SdpTest::query($node, q{SELECT 'a'::varchar = 'a'::varchar; SELECT who || ' ' || what FROM trap_log}), "t\npostgres =",
	'the trap works: an unqualified varchar = varchar runs it');
SdpTest::query($node, 'TRUNCATE trap_log');

# a superuser's flow, no transform: tombstones delete by a varchar key
SdpTest::query($node, <<"SQL");
SELECT sdp_create_source('kv', '$boot', 'kv', '@{[ SdpTest::source_options() ]}');
CREATE TABLE kv (k varchar(20) PRIMARY KEY, v int);
SELECT sdp_create_flow('kv_flow', 'kv', 'kv', 'k varchar(20), v int', options => '{"on_tombstone": "delete"}');
SQL
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'kv', messages => [
	[ 'a', '{"k": "a", "v": 1}', 0 ], [ 'b', '{"k": "b", "v": 2}', 0 ], [ 'c', '{"k": "c", "v": 3}', 0 ] ]);
ok(SdpTest::wait_consumed($node, 'kv_flow', 3), 'three rows');
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'kv', messages => [ [ 'a', undef, 0 ], [ 'c', undef, 0 ] ]);
ok(SdpTest::wait_consumed($node, 'kv_flow', 5), 'two tombstones');
is(SdpTest::query($node, 'SELECT string_agg(k, \',\' ORDER BY k) FROM kv'), 'b', 'the tombstones deleted their rows');
is(SdpTest::query($node, q{SELECT count(*) FROM trap_log WHERE what = '='}), '0',
	"the superuser's tombstone DELETE did not run eve's = (varchar, varchar)");

# a superuser's window_agg flow grouped by two columns: the fan-out joins them
SdpTest::query($node, <<"SQL");
SELECT sdp_create_source('pay', '$boot', 'pay', '@{[ SdpTest::source_options() ]}');
SELECT sdp_create_window_table('pay_windows');
SELECT sdp_create_flow('pay_agg', source => 'pay', target => 'pay_windows',
  schema => 'merchant_id text, country text, amount numeric, event_ts timestamptz', operator => 'window_agg',
  options => '{"event_time": "event_ts", "idle_timeout": "1 second"}');
SELECT sdp_create_aggregation('pay_agg', 'sum_1m', group_by => ARRAY['merchant_id', 'country'],
  operation => 'sum', value => 'amount', window_size => '1 minute');
SQL
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'pay', messages => [
	map { [ "m$_", qq({"merchant_id": "m@{[$_ % 2]}", "country": "FR", "amount": $_, "event_ts": "2026-01-01T00:00:0${_}Z"}), 0 ] } 1 .. 6 ]);
ok(SdpTest::wait_consumed($node, 'pay_agg', 6), 'six payments');
ok($node->poll_query_until('postgres', 'SELECT count(*) = 2 FROM pay_windows'), 'two windows emitted once idle');
is(SdpTest::query($node, q{SELECT string_agg(entity || '=' || value, ',' ORDER BY entity) FROM pay_windows}), 'm0|FR=12,m1|FR=9',
	'each (merchant, country) summed');
is(SdpTest::query($node, q{SELECT count(*) FROM trap_log WHERE what = 'concat_ws'}), '0',
	"the fan-out did not run eve's concat_ws(text, text, text)");

# --- the transform's search_path is the one of its declaration --------------
SdpTest::query($node, <<"SQL");
CREATE ROLE app LOGIN;
CREATE SCHEMA app AUTHORIZATION app;
CREATE SCHEMA other AUTHORIZATION app;
CREATE TABLE ev_out (seq bigint, label text, who text, path text);
GRANT INSERT ON ev_out TO app;
SET ROLE app;
CREATE FUNCTION app.label(bigint) RETURNS text LANGUAGE sql AS \$\$SELECT 'app'\$\$;
CREATE FUNCTION other.label(bigint) RETURNS text LANGUAGE sql AS \$\$SELECT 'other'\$\$;
SET search_path = app, public;
SELECT sdp_create_source('ev', '$boot', 'ev', '@{[ SdpTest::source_options() ]}');
-- seq 2 changes the session: its role, and the search_path
SELECT sdp_create_flow('ev_flow', 'ev', 'ev_out', 'seq bigint',
  \$\$SELECT seq, label(seq) AS label, current_user::text AS who, current_setting('search_path') AS path
       FROM input, LATERAL (SELECT CASE WHEN seq = 2 THEN set_config('search_path', 'other, public', false)
                                        || set_config('role', 'eve', false) END) s\$\$,
  options => '{"mode": "append"}');
RESET ROLE;
-- app's own default changes after the declaration: the flow keeps its own
ALTER ROLE app SET search_path = other, public;
GRANT eve TO app;
GRANT INSERT ON ev_out TO eve;
SQL
is(SdpTest::query($node, q{SELECT options->>'search_path' FROM sdp.flows WHERE name = 'ev_flow'}), 'app, public',
	"the declaration recorded the session's search_path");
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'ev', messages => [ [ undef, '{"seq": 1}', 0 ] ]);
ok(SdpTest::wait_consumed($node, 'ev_flow', 1), 'batch 1');
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'ev', messages => [ [ undef, '{"seq": 2}', 0 ] ]);
ok(SdpTest::wait_consumed($node, 'ev_flow', 2), 'batch 2 (its transform sets role and search_path)');
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'ev', messages => [ [ undef, '{"seq": 3}', 0 ] ]);
ok(SdpTest::wait_consumed($node, 'ev_flow', 3), 'batch 3');
is(SdpTest::query($node, q{SELECT string_agg(seq || ' ' || label || ' ' || who || ' ' || path, E'\n' ORDER BY seq) FROM ev_out WHERE seq <> 2}),
	"1 app app app, public\n3 app app app, public",
	"before and after: the declaration's search_path, as the flow's owner; batch 2's changes did not reach batch 3");

# --- a transform cannot drop its own flow -----------------------------------
SdpTest::query($node, <<'SQL');
CREATE TABLE drop_out (seq bigint, x text);
SELECT sdp_create_flow('selfdrop', 'ev', 'drop_out', 'seq bigint',
  $$SELECT seq, CASE WHEN seq = 2 THEN sdp_drop_flow('selfdrop')::text END AS x FROM input$$,
  options => '{"mode": "append"}');
SQL
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'ev', messages => [ [ undef, '{"seq": 4}', 0 ] ]);
ok(SdpTest::wait_consumed($node, 'selfdrop', 4), 'the flow read every message');
is(SdpTest::query($node, q{SELECT string_agg(seq::text, ',' ORDER BY seq) FROM drop_out}), '1,3,4',
	'the messages that do not drop it are written');
is(SdpTest::query($node, q{SELECT kafka_offset || ' ' || stage || ' ' || error FROM sdp.dead_letters WHERE flow = 'selfdrop'}),
	'1 transform flow "selfdrop" cannot drop itself',
	'the one whose transform drops the flow is set aside, with a clear reason');
is(SdpTest::query($node, q{SELECT state FROM sdp.flow_status WHERE flow = 'selfdrop'}), 'running', 'and the flow runs on');

done_testing();
