# A processor's handlers fail (issue 47), in a flow owned by a non-superuser:
# a handler that raises for some keys sets their messages aside (dead letters,
# stage transform, the error and its SQLSTATE), every other message of the
# same batches is handled once, and the failing key's state is as before the
# failed call (its changes undone); a handler that runs past the flow's
# statement_timeout leaves the flow retrying with that reason, until the
# owner skips the message; a handler that sets a role the owner is a member
# of (one that may not write the target) does not change who writes the
# batch's rows, the role change ends with the handler; one that sets a role
# the owner is not a member of raises (a dead letter); a handler that drops
# its own flow is refused (a dead letter with the reason) and the flow runs
# on; a timer's handler that raises is logged, its changes undone, its timer
# spent, and the flow runs on.  What a handler's exception block rolls back
# includes its state changes.  The state API raises 55000 outside a handler.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use PostgreSQL::Test::Utils;
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'faults' => 1, 'retry' => 1 });
my $boot = $broker->bootstrap;
my $node = SdpTest::new_node('pfaults');
SdpTest::query($node, <<"SQL");
CREATE ROLE app LOGIN;
CREATE ROLE limited;     -- app is a member; it may read the target, not write it
CREATE ROLE stranger;    -- app is not a member
GRANT limited TO app;
GRANT CREATE ON SCHEMA public TO app;
SET ROLE app;
SELECT sdp_create_source('faults', '$boot', 'faults', '@{[ SdpTest::source_options() ]}');
CREATE TABLE f_out (seq int, k text, who text, n int, seqs int[], kafka_partition int, kafka_offset bigint);
GRANT SELECT ON f_out TO limited;
CREATE TYPE f_in AS (seq int, k text, v text, kafka_partition int, kafka_offset bigint);
CREATE TYPE f_row AS (seq int, k text, who text, n int, seqs int[], kafka_partition int, kafka_offset bigint);
-- each row counts, is listed and mapped in the key's state before the handler does what its v says
CREATE FUNCTION f_rows(k text, rows f_in[]) RETURNS SETOF f_row LANGUAGE plpgsql AS \$\$
DECLARE r f_in; n int;
BEGIN
  FOREACH r IN ARRAY rows LOOP
    n := coalesce(sdp_value('n', NULL::int), 0) + 1;
    PERFORM sdp_set_value('n', n);
    PERFORM sdp_list_append('seqs', r.seq);
    PERFORM sdp_map_put('by_v', r.v, r.seq);
    IF r.v = 'poison' THEN
      RAISE EXCEPTION 'poison at seq %', r.seq;
    ELSIF r.v = 'sleep' THEN
      PERFORM pg_sleep(60);
    ELSIF r.v = 'setrole' THEN
      SET ROLE limited;
    ELSIF r.v = 'stranger' THEN
      SET ROLE stranger;
    ELSIF r.v = 'drop' THEN
      PERFORM sdp_drop_flow('faults');
    ELSIF r.v = 'timer' THEN
      PERFORM sdp_register_timer(sdp_processing_time() + interval '100 ms');
    ELSIF r.v = 'catch' THEN
      -- a block that raises and catches it: what it did is rolled back, state included
      BEGIN
        PERFORM sdp_set_value('n', 1000);
        PERFORM sdp_list_append('seqs', -r.seq);
        PERFORM sdp_map_put('by_v', 'caught'::text, r.seq);
        PERFORM sdp_register_timer(sdp_processing_time() + interval '1 hour');
        RAISE EXCEPTION 'caught';
      EXCEPTION WHEN OTHERS THEN
        NULL;
      END;
    END IF;
    RETURN NEXT ROW(r.seq, k, current_user::text, sdp_value('n', NULL::int), sdp_list('seqs', NULL::int[]), r.kafka_partition, r.kafka_offset)::f_row;
  END LOOP;
END \$\$;
CREATE FUNCTION f_timer(k text, at timestamptz, kind text) RETURNS SETOF f_row LANGUAGE plpgsql AS \$\$
BEGIN
  PERFORM sdp_set_value('n', 1000);
  PERFORM sdp_list_append('seqs', -1);
  RETURN NEXT ROW(-1, k, current_user::text, 1000, NULL, NULL, NULL)::f_row;
  RAISE EXCEPTION 'timer of key % raised', k;
END \$\$;
SELECT sdp_create_flow('faults', 'faults', 'f_out', 'seq int, k text, v text', operator => 'processor',
  options => '{"key": "k", "handle_rows": "f_rows", "handle_timer": "f_timer", "mode": "append",
               "statement_timeout": "1 s", "checkpoint_interval": "1 second",
               "state": {"n": {"value": "int"}, "seqs": {"list": "int"}, "by_v": {"map": ["text", "int"]}}}');
RESET ROLE;
SQL
is(SdpTest::query($node, "SELECT owner || ' ' || (SELECT rolsuper FROM pg_roles WHERE rolname = owner::text) FROM sdp.flows"),
	'app false', 'the flow\'s owner is app, not a superuser');

my $seq = 0;
sub produce
{
	SdpKafka::kcat_produce(bootstrap => $boot, topic => 'faults',
		messages => [ map { my ($k, $v) = @$_; $seq++; [ $k, qq({"seq": $seq, "k": "$k", "v": "$v"}), 0 ] } @_ ]);
}
sub state_of
{
	my ($key) = @_;
	# a map's entries come in no order: sorted here
	return SdpTest::query($node, "SELECT string_agg(state || '=' || CASE WHEN value ? 'map' "
		  . "THEN (SELECT jsonb_agg(e ORDER BY e::text) FROM jsonb_array_elements(value->'map') e)::text "
		  . "ELSE coalesce(value->'value', value->'list', value)::text END, ' ' ORDER BY state) "
		  . "FROM sdp_flow_state('faults') WHERE key = '$key'");
}

produce([ 'kp', 'ok' ]);
ok(SdpTest::wait_consumed($node, 'faults', 1), 'seq 1 handled');
# one batch (as it comes): poison among good rows of two keys, a role set, a
# role that cannot be set, the flow dropped, a timer that will raise
my $log_offset = -s $node->logfile;
produce([ 'kp', 'ok' ], [ 'kp', 'poison' ], [ 'kp', 'ok' ], [ 'kq', 'ok' ], [ 'kq', 'poison' ], [ 'kq', 'ok' ],
	[ 'kr', 'setrole' ], [ 'kx', 'ok' ], [ 'ks', 'stranger' ], [ 'ks', 'ok' ], [ 'kt', 'drop' ], [ 'kt', 'ok' ],
	[ 'ku', 'timer' ]);
ok(SdpTest::wait_consumed($node, 'faults', 14), 'seq 2..14 read');
is(SdpTest::query($node, "SELECT count(*) || ' ' || count(DISTINCT seq) || ' ' || string_agg(seq::text, ',' ORDER BY seq) FROM f_out"),
	'10 10 1,2,4,5,7,8,9,11,13,14', 'every message but the four bad ones is handled once');
is(SdpTest::query($node, "SELECT count(*) FROM f_out WHERE kafka_offset <> seq - 1 OR kafka_partition <> 0"), '0',
	'each row with its message\'s partition and offset');
is(SdpTest::query($node, "SELECT string_agg(kafka_offset || ' ' || kafka_key || ' ' || stage || ' ' || sqlstate || ' ' || error, E'\\n' ORDER BY kafka_offset) FROM sdp.dead_letters"),
	"2 kp transform P0001 poison at seq 3\n5 kq transform P0001 poison at seq 6\n"
	  . "9 ks transform 42501 permission denied to set role \"stranger\"\n11 kt transform 55006 flow \"faults\" cannot drop itself",
	'the four bad ones are dead letters: stage transform, the error and its SQLSTATE');
is(SdpTest::query($node, "SELECT string_agg(seq || ':' || n || ':' || seqs::text, ' ' ORDER BY seq) FROM f_out WHERE k IN ('kp', 'kq')"),
	'1:1:{1} 2:2:{1,2} 4:3:{1,2,4} 5:1:{5} 7:2:{5,7}',
	'the rows after a failed call see the key\'s state without it');
is(state_of('kp'), 'by_v=[["ok", 4]] n=3 seqs=[1, 2, 4]', 'kp\'s state: the poison call undone');
is(state_of('kq'), 'by_v=[["ok", 7]] n=2 seqs=[5, 7]', 'kq\'s state: the poison call undone');
is(state_of('ks'), 'by_v=[["ok", 11]] n=1 seqs=[11]', 'ks\'s state: the call that set a stranger\'s role undone');
is(state_of('kt'), 'by_v=[["ok", 13]] n=1 seqs=[13]', 'kt\'s state: the call that dropped the flow undone');
is(SdpTest::query($node, "SELECT string_agg(seq || ' ' || who, ',' ORDER BY seq) FROM f_out WHERE seq IN (8, 9)"),
	'8 limited,9 app', 'the handler that set role limited ran on as limited, and the next call as app again');
is(SdpTest::query($node, "SELECT has_table_privilege('limited', 'f_out', 'INSERT')"), 'f', 'limited may not write f_out');
ok($node->wait_for_log(qr/sdp flow "faults": handle_timer of key "ku" at .* raised, its changes are undone and its timer spent: timer of key ku raised/,
		$log_offset), 'the timer\'s handler that raised is logged');
produce([ 'ku', 'ok' ]);
ok(SdpTest::wait_consumed($node, 'faults', 15), 'seq 15 handled');
is(state_of('ku'), 'by_v=[["ok", 15], ["timer", 14]] n=2 seqs=[14, 15]', 'ku\'s state: the raising timer\'s changes undone, its timer spent');
is(SdpTest::query($node, "SELECT count(*) FROM f_out WHERE seq = -1"), '0', 'nothing the raising timer emitted is written');
is(SdpTest::query($node, "SELECT state || ' ' || coalesce(last_error, 'no error') FROM sdp.flow_status WHERE flow = 'faults'"),
	'running no error', 'the flow runs on');

# a handler past statement_timeout: the flow retries the batch, with the reason
produce([ 'kv', 'ok' ]);
ok(SdpTest::wait_consumed($node, 'faults', 16), 'seq 16 handled');
produce([ 'kv', 'sleep' ], [ 'kv', 'ok' ], [ 'kw', 'ok' ]);
ok(SdpTest::wait_for($node,
		"SELECT state = 'retrying' AND last_error LIKE '%canceling statement due to statement timeout: the batch''s statements ran longer than the flow''s statement_timeout of 1000 ms%' "
		  . "FROM sdp.flow_status WHERE flow = 'faults'"),
	'a handler in pg_sleep(60): the flow is retrying, with the reason naming statement_timeout');
is(SdpTest::query($node, "SELECT count(*) FROM f_out WHERE seq > 16"), '0', 'nothing of the batch is written meanwhile');
is(SdpTest::query($node, "SET ROLE app; SELECT sdp_skip_message('faults', 0, 16)"), '', 'the owner skips the message');
ok(SdpTest::wait_consumed($node, 'faults', 19), 'the flow goes on');
is(SdpTest::query($node, "SELECT string_agg(seq || ':' || n || ':' || seqs::text, ' ' ORDER BY seq) FROM f_out WHERE seq > 15"),
	'16:1:{16} 18:2:{16,18} 19:1:{19}', 'the messages after it are handled once, without it');
is(SdpTest::query($node, "SELECT kafka_offset || ' ' || stage FROM sdp.dead_letters WHERE kafka_offset > 11"), '16 skipped',
	'it is set aside as skipped');
is(state_of('kv'), 'by_v=[["ok", 18]] n=2 seqs=[16, 18]', 'kv\'s state: the cancelled call undone');
ok(SdpTest::wait_for($node, "SELECT state = 'running' AND last_error IS NULL FROM sdp.flow_status WHERE flow = 'faults'"),
	'running again, with no error');
is(SdpTest::query($node, "SELECT count(*) || ' ' || count(DISTINCT seq) FROM f_out"), '14 14', 'no row written twice');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.flows WHERE name = 'faults'"), '1', 'the flow is still there');

# the state API outside a handler
my ($ret, $out, $err) = $node->psql('postgres', "SET ROLE app; SELECT sdp_value('n', NULL::int)",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/ERROR:  55000: sdp_value can only be called inside a processor's handler/,
	'sdp_value outside a handler: 55000');
($ret, $out, $err) = $node->psql('postgres', "SET ROLE app; SELECT sdp_map_put('by_v', 'x'::text, 1)",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/ERROR:  55000: sdp_map_put can only be called inside a processor's handler/,
	'sdp_map_put outside a handler: 55000');
($ret, $out, $err) = $node->psql('postgres', "SET ROLE app; SELECT * FROM f_rows('kp', ARRAY[ROW(99, 'kp', 'ok', 0, 0)::f_in])",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/ERROR:  55000: sdp_value can only be called inside a processor's handler/,
	'a handler called by hand: 55000');
is(state_of('kp'), 'by_v=[["ok", 4]] n=3 seqs=[1, 2, 4]', 'and the state is untouched');

# a handler's exception block that catches what it raised: its state changes are rolled back with it
produce([ 'ke', 'ok' ], [ 'ke', 'catch' ]);
ok(SdpTest::wait_consumed($node, 'faults', 21), 'seq 20 and 21 handled');
is(SdpTest::query($node, "SELECT string_agg(seq || ':' || n || ':' || seqs::text, ' ' ORDER BY seq) FROM f_out WHERE seq > 19"),
	'20:1:{20} 21:2:{20,21}', 'the rows after the rolled-back block do not see its state changes');
is(state_of('ke'), 'by_v=[["catch", 21], ["ok", 20]] n=2 seqs=[20, 21]',
	'ke\'s state: the rolled-back block\'s changes (value, list, map, timer) are undone, like its table writes');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.dead_letters WHERE kafka_offset > 16"), '0', 'nothing dead-lettered');

# a batch that its target refuses (not its messages' fault: retried with
# backoff) and whose handler registers 5,000 timers each attempt: what an
# attempt indexed goes with its undo, so the worker's memory stays as it
# was however long the batch is retried (each attempt left its 5,000 timer
# nodes in the worker's memory, about 1 MB, until their time came)
SdpTest::query($node, <<"SQL");
SET ROLE app;
SELECT sdp_create_source('retry', '$boot', 'retry', '@{[ SdpTest::source_options() ]}');
CREATE TABLE r_gate (blocked boolean);
INSERT INTO r_gate VALUES (true);
CREATE TABLE r_out (k text, n int);
CREATE FUNCTION r_block() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
  IF (SELECT blocked FROM r_gate) THEN
    RAISE EXCEPTION 'r_out is blocked' USING ERRCODE = '55000';
  END IF;
  RETURN NEW;
END \$\$;
CREATE TRIGGER r_block BEFORE INSERT ON r_out FOR EACH ROW EXECUTE FUNCTION r_block();
CREATE TYPE r_in AS (k text);
CREATE FUNCTION r_rows(k text, rows r_in[]) RETURNS SETOF r_out LANGUAGE plpgsql AS \$\$
BEGIN
  FOR i IN 1 .. 5000 LOOP
    PERFORM sdp_register_timer(sdp_processing_time() + interval '1 hour' + i * interval '1 millisecond');
  END LOOP;
  RETURN NEXT ROW(k, 5000)::r_out;
END \$\$;
CREATE FUNCTION r_timer(k text, at timestamptz, kind text) RETURNS SETOF r_out LANGUAGE sql AS 'SELECT NULL::text, NULL::int WHERE false';
SELECT sdp_create_flow('retry', 'retry', 'r_out', 'k text', operator => 'processor',
  options => '{"key": "k", "handle_rows": "r_rows", "handle_timer": "r_timer", "mode": "append", "state": {"x": {"value": "int"}}}');
RESET ROLE;
SQL
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'retry', messages => [ [ 'r', '{"k": "r"}', 0 ] ]);

# the worker's memory (TopMemoryContext and all below it), as it logs it
sub worker_memory
{
	my $pid = SdpTest::query($node, "SELECT pid FROM sdp.flow_status WHERE flow = 'retry'");
	my $offset = -s $node->logfile;
	SdpTest::query($node, "SELECT pg_log_backend_memory_contexts($pid)");
	$node->wait_for_log(qr/\[$pid\] LOG:  Grand total: \d+ bytes/, $offset);
	my ($total) = slurp_file($node->logfile, $offset) =~ /\[$pid\] LOG:  Grand total: (\d+) bytes/;
	return $total;
}
# the backoff's step, in the reason: 100, 200, 400 ... ms
sub retry_step
{
	my $e = SdpTest::query($node, "SELECT coalesce(last_error, '') FROM sdp.flow_status WHERE flow = 'retry'");
	return $e =~ /retrying in (\d+) ms: .*r_out is blocked/ ? $1 : 0;
}
ok($node->poll_query_until('postgres',
		"SELECT state = 'retrying' AND last_error ~ 'retrying in [0-9]+ ms: .*r_out is blocked' FROM sdp.flow_status WHERE flow = 'retry'"),
	'retried batch: the target refuses it, the flow retries');
ok($node->poll_query_until('postgres', "SELECT last_error ~ 'retrying in (400|800|1600|3200|6400) ms' FROM sdp.flow_status WHERE flow = 'retry'"),
	'retried batch: three attempts');
my $before = worker_memory();
my $step = retry_step();
my $later = $step * 16 > 30000 ? 30000 : $step * 16;    # (the backoff stops doubling at 30 s)
ok($node->poll_query_until('postgres', "SELECT last_error ~ 'retrying in $later ms' FROM sdp.flow_status WHERE flow = 'retry'"),
	'retried batch: four attempts more');
my $after = worker_memory();
cmp_ok($after - $before, '<', 1_000_000,
	"retried batch: the worker's memory did not grow with the attempts ($before bytes, then $after)");
SdpTest::query($node, 'UPDATE r_gate SET blocked = false');
ok(SdpTest::wait_for($node, 'SELECT count(*) = 1 FROM r_out'), 'retried batch: written once the target takes it');
is(SdpTest::query($node, "SELECT jsonb_array_length(value) FROM sdp_flow_state('retry') WHERE key = 'r' AND state = 'timers'"), '5000',
	'retried batch: the key has the 5,000 timers of the attempt that committed, once each');

done_testing();
