# A crash loop cannot happen (issue 46): a flow's worker that dies by a
# signal twice in a row at the same offsets leaves the flow failed, with the
# signal and the offset in its reason, instead of being started again on the
# same message (each death takes the whole server through crash recovery).
# The worker is made to die here by SIGSEGV while its transform sleeps on
# the message at offset 0 (a fault in a library reading a message would do
# the same); once the message is skipped and the flow started again, it
# goes on.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use PostgreSQL::Test::Utils;
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'poison' => 1 });
my $node = SdpTest::new_node('crashguard', 'restart_after_crash' => 'on');
SdpTest::create_source($node, 'poison', $broker, 'poison');
SdpTest::query($node, <<'SQL');
CREATE TABLE got (seq bigint, kafka_offset bigint);
SELECT sdp_create_flow('poisoned', 'poison', 'got', 'seq bigint',
  $$SELECT seq, kafka_offset FROM input, LATERAL pg_catalog.pg_sleep(CASE WHEN seq = 0 THEN 3600 ELSE 0 END) s$$,
  options => '{"mode": "append"}');
SQL
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'poison',
	messages => [ map { [ "k$_", qq({"seq": $_}), 0 ] } 0 .. 9 ]);

# the worker, once it sleeps on the message at offset 0
sub sleeping_worker
{
	ok($node->poll_query_until('postgres', <<'SQL'), 'the worker reads the message at offset 0 (its transform sleeps)');
SELECT count(*) = 1 FROM pg_catalog.pg_stat_activity
 WHERE backend_type = 'sdp flow' AND wait_event = 'PgSleep'
SQL
	return SdpTest::query($node, "SELECT pid FROM pg_catalog.pg_stat_activity WHERE backend_type = 'sdp flow'");
}

my $log_start = -s $node->logfile;
for my $death (1, 2)
{
	my $pid = sleeping_worker();
	if ($death == 1)
	{
		# a worker pinned in one batch is not shown running: past
		# sdp.stall_timeout (the reader's setting) it is stalled, with the time
		SdpTest::query($node, "ALTER DATABASE postgres SET sdp.stall_timeout = '1s'");
		ok($node->poll_query_until('postgres', <<'SQL'), 'the pinned worker shows stalled past sdp.stall_timeout');
SELECT state = 'stalled' AND last_error ~ '^the worker has been in one batch for [0-9]+ s, past sdp.stall_timeout \(1 s\)'
  FROM sdp.flow_status WHERE flow = 'poisoned'
SQL
		is(SdpTest::query($node, "SELECT state || ' ' || (last_error IS NOT NULL) FROM sdp.flow_workers WHERE flow = 'poisoned'"),
			'stalled true', 'and so does its row in sdp.flow_workers');
		SdpTest::query($node, 'ALTER DATABASE postgres RESET sdp.stall_timeout');
		is(SdpTest::query($node, "SET sdp.stall_timeout = 0; SELECT state || ' ' || coalesce(last_error, '<null>') FROM sdp.flow_status WHERE flow = 'poisoned'"),
			'running <null>', 'sdp.stall_timeout = 0: running');
	}
	my $offset = -s $node->logfile;
	kill 'SEGV', $pid;
	ok($node->wait_for_log(qr/background worker "sdp flow" \(PID $pid\) was terminated by signal 11/, $offset),
		"death $death: the worker was terminated by signal 11");
	ok($node->wait_for_log(qr/database system is ready to accept connections/, $offset), "death $death: the server recovered");
}

ok(SdpTest::wait_for($node, "SELECT state = 'failed' FROM sdp.flow_status WHERE flow = 'poisoned'"),
	'after the second death at offset 0 the flow is failed, not restarted');
like(SdpTest::query($node, "SELECT last_error FROM sdp.flow_status WHERE flow = 'poisoned'"),
	qr/terminated by signal 11 \(Segmentation fault\) 2 times in a row at the same offsets \(partition 0 offset 0\).*sdp_skip_message/,
	'its reason names the signal, the offset and what to do');
is(SdpTest::query($node, "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE backend_type = 'sdp flow'"), '0',
	'no worker runs it');
my $log = slurp_file($node->logfile, $log_start);
is(scalar(() = $log =~ /background worker "sdp flow" \(PID \d+\) was terminated by signal/g), 2, 'the server went through crash recovery twice, no more');
is(SdpTest::query($node, 'SELECT count(*) FROM got'), '0', 'nothing was written');

# the owner skips the message and starts the flow: it goes on from the offset
SdpTest::query($node, "SELECT sdp_skip_message('poisoned', 0, 0); SELECT sdp_start_flow('poisoned')");
ok(SdpTest::wait_for($node, 'SELECT count(*) = 9 FROM got'), 'skipped and started again: the nine others are written');
is(SdpTest::query($node, "SELECT string_agg(seq::text, ',' ORDER BY kafka_offset) FROM got"), '1,2,3,4,5,6,7,8,9', 'once each');
is(SdpTest::query($node, "SELECT kafka_offset || ' ' || stage FROM sdp.dead_letters WHERE flow = 'poisoned'"), '0 skipped',
	'the message at offset 0 is a dead letter');
is(SdpTest::query($node, "SELECT state FROM sdp.flow_status WHERE flow = 'poisoned'"), 'running', 'running');

done_testing();
