# A change to a window_agg flow's aggregations reaches its running worker
# when, and only when, the change commits: declared in a function (the list
# of changed flows must outlive the function's SPI memory, which the
# assert-enabled server overwrites when it is freed), kept when its savepoint
# is released, forgotten when its savepoint or exception block rolls back.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;
use Time::HiRes qw(sleep);

my $broker = SdpKafka::start_broker(topics => { 'payments' => 2 });
my $node = SdpTest::new_node('configxact');
SdpTest::create_source($node, 'payments', $broker, 'payments');
SdpTest::query($node, <<'SQL');
SELECT sdp_create_window_table('payment_windows');
SELECT sdp_create_flow('agg', source => 'payments', target => 'payment_windows',
  schema   => 'merchant_id text, amount numeric, event_ts timestamptz',
  operator => 'window_agg',
  options  => '{"event_time": "event_ts"}');
CREATE FUNCTION define(n text) RETURNS integer LANGUAGE plpgsql AS $$
BEGIN
  RETURN sdp_load_aggregations('agg', jsonb_build_array(jsonb_build_object(
    'name', n, 'group_by', jsonb_build_array('merchant_id'), 'operation', 'count',
    'window_size', '1 minute')));
END $$;
-- a change made in an exception block that then fails is rolled back with it
CREATE FUNCTION drop_then_fail(n text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  BEGIN
    PERFORM sdp_drop_aggregation('agg', n);
    RAISE EXCEPTION 'changed my mind';
  EXCEPTION WHEN raise_exception THEN
    RETURN 'rolled back';
  END;
END $$;
SQL
ok($node->poll_query_until('postgres', "SELECT state = 'running' FROM sdp.flow_status WHERE flow = 'agg'"),
	'the flow runs');

my $reloaded = qr/sdp flow "agg" reloaded its window_agg configuration/;

# The number of reloads logged from $offset on.
sub reloads_since
{
	my ($offset) = @_;
	my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile, $offset);
	my $n = () = $log =~ /$reloaded/g;
	return $n;
}

# Run $sql; the worker must reload exactly once (or not at all), and the
# flow's aggregations must then be @names.
sub check_change
{
	my ($label, $sql, $expect_reload, @names) = @_;
	my $offset = -s $node->logfile;
	my ($ret, $out, $err) = $node->psql('postgres', $sql);
	is($ret, 0, "$label: the statements succeed") or diag($err);
	if ($expect_reload)
	{
		ok($node->wait_for_log($reloaded, $offset), "$label: the worker reloads");
	}
	else
	{
		# the worker reloads within milliseconds of a commit that asks it to
		sleep 1.5;
		is(reloads_since($offset), 0, "$label: the worker does not reload");
	}
	is(SdpTest::query($node, "SELECT string_agg(name, ',' ORDER BY name) FROM sdp.aggregations WHERE flow = 'agg'"),
		join(',', @names), "$label: the aggregations are " . join(',', @names));
	is(SdpTest::query($node, "SELECT state FROM sdp.flow_status WHERE flow = 'agg'"), 'running',
		"$label: the flow still runs");
}

check_change('defined in a function', "SELECT define('c1')", 1, 'c1');
check_change('two changes in one transaction, in functions',
	"BEGIN; SELECT define('c2'); SELECT sdp_create_aggregation('agg', 'c3', ARRAY['merchant_id'], 'count', window_size => '1 minute'); COMMIT",
	1, 'c1', 'c2', 'c3');
check_change('savepoint rolled back',
	"BEGIN; SAVEPOINT s; SELECT define('c4'); ROLLBACK TO SAVEPOINT s; COMMIT", 0, 'c1', 'c2', 'c3');
check_change('exception block rolled back', "SELECT drop_then_fail('c1')", 0, 'c1', 'c2', 'c3');
check_change('savepoint released',
	"BEGIN; SAVEPOINT s; SELECT define('c4'); RELEASE SAVEPOINT s; COMMIT", 1, 'c1', 'c2', 'c3', 'c4');
check_change('released into a savepoint then rolled back',
	"BEGIN; SAVEPOINT a; SAVEPOINT b; SELECT sdp_drop_aggregation('agg', 'c4'); RELEASE SAVEPOINT b; ROLLBACK TO SAVEPOINT a; COMMIT",
	0, 'c1', 'c2', 'c3', 'c4');
check_change('a change before a rolled-back savepoint stays',
	"BEGIN; SELECT sdp_drop_aggregation('agg', 'c4'); SAVEPOINT s; SELECT define('c5'); ROLLBACK TO SAVEPOINT s; COMMIT",
	1, 'c1', 'c2', 'c3');
check_change('transaction rolled back',
	"BEGIN; SELECT define('c6'); ROLLBACK", 0, 'c1', 'c2', 'c3');

# PREPARE TRANSACTION cannot carry the change to COMMIT PREPARED: refused
$node->safe_psql('postgres', 'ALTER SYSTEM SET max_prepared_transactions = 2');
$node->restart;
ok($node->poll_query_until('postgres', "SELECT state = 'running' FROM sdp.flow_status WHERE flow = 'agg'"),
	'running again after the restart');
my ($ret, $out, $err) = $node->psql('postgres', "BEGIN; SELECT define('c7'); PREPARE TRANSACTION 'p'");
like($err, qr/cannot prepare a transaction that changed the configuration of a flow/, 'PREPARE TRANSACTION is refused');
is(SdpTest::query($node, "SELECT count(*) FROM pg_prepared_xacts"), '0', 'nothing was prepared');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.aggregations WHERE name = 'c7'"), '0', 'nor stored');

done_testing();
