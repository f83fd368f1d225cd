# A Kafka sink across a failover with asynchronous replication, against
# Apache Kafka (issue 46): a primary with a streaming standby on a physical
# slot, a sink flow (to a topic, through the outbox and the relay) and a
# table flow on one source.  10,000 inputs; the standby's WAL receiver
# stopped; 10,000 more; the primary killed with SIGKILL, the receiver
# resumed, the standby promoted; 10,000 more.
#
# With the standby's slot in sdp.standby_slots the relay produces a batch's
# rows only once the standby has flushed the batch: while the receiver is
# stopped the table flow goes on, the sink flow says it waits for the
# standby and none of the second 10,000 reaches the topic; the promoted
# standby, which never had those batches, consumes their input again and
# produces it once.  A read_committed consumer sees each of the 30,000
# inputs once, and the table holds each once.  Without the wait (the relay
# before issue 46) the old primary produced the second 10,000, and the
# promoted standby produced them again under new sdp-seqs: 10,000
# duplicates.
use strict;
use warnings FATAL => 'all';
use feature 'signatures';
no warnings 'experimental::signatures';
use lib 'test/perl';
use JSON::PP ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SdpKafka;
use SdpTest;
use Test::More;
use Time::HiRes qw(time usleep);

SdpKafka::needs_apache('read_committed isolation and a sink topic that no aborted attempt pollutes are Apache Kafka\'s');

my $kafka = SdpKafka::start_broker(topics => { 'payments' => 4, 'copies' => 4 });
my $boot = $kafka->bootstrap;
my $primary = SdpTest::new_node('primary', allows_streaming => 1, 'sdp.standby_slots' => "'standby1'");
SdpTest::query($primary, "SELECT pg_create_physical_replication_slot('standby1')");
$primary->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->append_conf('postgresql.conf', "primary_slot_name = 'standby1'");
$standby->start;
$primary->wait_for_catchup($standby);

SdpTest::create_source($primary, 'payments', $kafka, 'payments');
SdpTest::query($primary, <<"SQL");
SELECT sdp_create_sink('copies', '$boot', 'copies');
SELECT sdp_create_flow('to_sink', 'payments', NULL, 'seq bigint',
  transform => 'SELECT seq, kafka_partition AS src_partition, kafka_offset AS src_offset FROM input',
  options   => '{"sink_key": "seq"}', sink => 'copies');
CREATE TABLE payments_all (seq bigint, kafka_partition int, kafka_offset bigint);
SELECT sdp_create_flow('to_table', 'payments', 'payments_all', 'seq bigint', options => '{"mode": "append"}');
SQL
ok(SdpTest::wait_for($primary, "SELECT count(*) = 2 FROM sdp.flow_status WHERE state = 'running' AND partitions IS NOT NULL"),
	'both flows run on the primary');

my $json = JSON::PP->new;
# what a read_committed consumer of the sink topic sees: seq => times
sub sink_seqs
{
	my %seen;
	$seen{ $json->decode($_->{payload})->{seq} }++
	  for SdpKafka::kcat_consume(bootstrap => $boot, topic => 'copies',
		properties => { 'isolation.level' => 'read_committed' });
	return \%seen;
}
sub inputs ($from, $seed)
{
	my $sim = SdpKafka::start_paymentsim(bootstrap => $boot, topic => 'payments',
		args => [ '--count', 10000, '--rate', 2500, '--linger-ms', 5, '--merchants', 50,
				  '--seed', $seed, '--seq-start', $from, '-X', 'enable.idempotence=true' ]);
	is($sim->finish->{delivered}, 10000, "payment_sim delivered 10,000 more (seq $from ..)");
}

# the first 10,000: on the standby, and in the topic
inputs(0, 1071);
ok(SdpTest::wait_consumed($primary, 'to_table', 10000), 'the table flow consumed the first 10,000');
ok(SdpTest::wait_consumed($primary, 'to_sink', 10000), 'the sink flow consumed them');
ok(SdpTest::wait_for($primary, 'SELECT count(*) = 0 FROM sdp.outbox'), 'and produced them');
$primary->wait_for_catchup($standby, 'flush');
is(scalar keys %{ sink_seqs() }, 10000, 'a read_committed consumer sees the first 10,000');

# the standby's WAL receiver stopped
SdpTest::query($standby, "ALTER SYSTEM SET primary_conninfo = ''");
SdpTest::query($standby, 'SELECT pg_reload_conf()');
ok(SdpTest::wait_for($primary, "SELECT NOT active FROM pg_replication_slots WHERE slot_name = 'standby1'"),
	'the standby\'s WAL receiver stopped');
my $standby_has = SdpTest::query($standby, 'SELECT count(*) FROM payments_all');

# 10,000 more: all committed on the primary by the table flow; the sink waits for the standby
inputs(10000, 1072);
ok(SdpTest::wait_consumed($primary, 'to_table', 20000), 'the table flow consumed the second 10,000 on the primary');
ok(SdpTest::wait_for($primary, <<'SQL'), 'the sink flow waits for the standby, or (before issue 46) produced everything');
SELECT (state = 'retrying' AND last_error LIKE '%wait for the standbys that could be promoted%')
    OR (NOT EXISTS (SELECT FROM sdp.outbox) AND
        (SELECT sum((p->>'committed_offset')::bigint) FROM jsonb_array_elements(partitions) p) >= 20000)
  FROM sdp.flow_status WHERE flow = 'to_sink'
SQL
like(SdpTest::query($primary, "SELECT state || ': ' || coalesce(last_error, '') FROM sdp.flow_status WHERE flow = 'to_sink'"),
	qr/^retrying: sink "copies": its rows wait for the standbys that could be promoted: the standby of replication slot "standby1" \(sdp\.standby_slots\) has flushed WAL up to [0-9A-F]+\/[0-9A-F]+, not yet up to [0-9A-F]+\/[0-9A-F]+, and no standby is streaming from the slot$/,
	'during the outage the sink flow says it waits for the standby slot');
my $during = sink_seqs();
is(scalar(grep { $_ >= 10000 } keys %$during), 0, 'during the outage none of the second 10,000 reached the sink topic');
is(scalar keys %$during, 10000, 'which holds the first 10,000');
note(sprintf('the sink flow had consumed %d inputs, the standby %d rows of the table flow',
	SdpTest::query($primary, SdpTest::consumed_sql('to_sink')), $standby_has));

# the primary dies; the receiver resumes (with no one to receive from); the standby is promoted
my $pgdata = $primary->data_dir;
$primary->kill9;
my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
usleep(20_000) while time < $deadline && grep { (readlink($_) // '') eq $pgdata } glob('/proc/[0-9]*/cwd');
pass('primary killed with SIGKILL');
SdpTest::query($standby, 'ALTER SYSTEM RESET primary_conninfo');
# the promoted server's own standbys are not the old primary's: none named yet
SdpTest::query($standby, "ALTER SYSTEM SET sdp.standby_slots = ''");
SdpTest::query($standby, 'SELECT pg_reload_conf()');
$standby->promote;
ok(SdpTest::wait_for($standby, "SELECT count(*) = 2 FROM sdp.flow_status WHERE state = 'running' AND partitions IS NOT NULL"),
	'promoted: both flows run on the new primary');

# 10,000 more, on the new primary
inputs(20000, 1073);
ok(SdpTest::wait_consumed($standby, 'to_table', 30000), 'the table flow consumed everything');
ok(SdpTest::wait_consumed($standby, 'to_sink', 30000), 'the sink flow consumed everything');
ok(SdpTest::wait_for($standby, 'SELECT count(*) = 0 FROM sdp.outbox'), 'and produced it');

# exactly once, in the table and in the topic
is(SdpTest::query($standby, 'SELECT count(*), count(DISTINCT seq), min(seq), max(seq) FROM payments_all'),
	'30000|30000|0|29999', 'the table flow: 30,000 rows, each seq once');
my $seen = sink_seqs();
my $messages = 0;
$messages += $_ for values %$seen;
my $twice = grep { $seen->{$_} > 1 } keys %$seen;
note("the sink topic holds $messages messages for 30,000 inputs, $twice of them more than once");
is($messages, 30000, 'a read_committed consumer sees 30,000 messages');
is($twice, 0, 'no input twice');
is(scalar(grep { $seen->{$_} } 0 .. 29999), 30000, 'every input (seq 0 .. 29999) in the topic');

$standby->stop;
done_testing();
