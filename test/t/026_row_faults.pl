# A message whose row fails for a reason that is not a data error (class 22
# or 23) is still the message's fault when the rest of its batch goes
# through: a Kafka key too long for the target's primary key index (54000),
# a row that a row-level security policy's WITH CHECK rejects (42501).  It
# is dead-lettered with its reason and the flow goes on; a flow is never
# stopped for ever by one message.  When every row fails alike (a revoked
# privilege), it is the flow's fault: retried, nothing dead-lettered.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'keys' => 1, 'rls' => 2, 'lone' => 1 });
my $node = SdpTest::new_node('faults');
my $boot = $broker->bootstrap;
SdpTest::query($node, <<"SQL");
CREATE ROLE app LOGIN;
CREATE TABLE by_key (kafka_key text PRIMARY KEY, seq bigint, kafka_partition int, kafka_offset bigint);
CREATE TABLE guarded (seq bigint, kafka_partition int, kafka_offset bigint);
ALTER TABLE guarded ENABLE ROW LEVEL SECURITY;
CREATE POLICY seq_rule ON guarded TO app USING (true) WITH CHECK (seq % 7 <> 3);
CREATE TABLE lone (seq bigint, kafka_key text, kafka_partition int, kafka_offset bigint);
CREATE UNIQUE INDEX ON lone (kafka_key);
GRANT SELECT, INSERT, UPDATE ON by_key, guarded, lone TO app;
SET ROLE app;
SELECT sdp_create_source('keys', '$boot', 'keys', '@{[ SdpTest::source_options(q({"starting_offsets": "earliest"})) ]}');
SELECT sdp_create_source('rls', '$boot', 'rls', '@{[ SdpTest::source_options(q({"starting_offsets": "earliest"})) ]}');
SELECT sdp_create_source('lone', '$boot', 'lone', '@{[ SdpTest::source_options(q({"starting_offsets": "earliest"})) ]}');
SELECT sdp_create_flow('by_key', 'keys', 'by_key', 'seq bigint', options => '{"mode": "upsert"}');
SELECT sdp_create_flow('guarded', 'rls', 'guarded', 'seq bigint', options => '{"mode": "append"}');
SELECT sdp_create_flow('lone', 'lone', 'lone', 'seq bigint', options => '{"mode": "append"}');
RESET ROLE;
SQL

# 1. A 10 kB key among good ones, in one batch (produced together, before the flow reads them).
my $long = join '', map { ('a' .. 'z', 'A' .. 'Z', 0 .. 9)[ int(rand(62)) ] } 1 .. 10000;
my @msgs = map { [ "k$_", qq({"seq": $_}) ] } 0 .. 4;
splice @msgs, 2, 0, [ $long, '{"seq": 99}' ];
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'keys', messages => \@msgs);
ok(SdpTest::wait_consumed($node, 'by_key', 6), 'the flow consumed all six messages');
is(SdpTest::query($node, 'SELECT string_agg(seq::text, \',\' ORDER BY seq) FROM by_key'), '0,1,2,3,4',
	'the five good rows are written');
is(SdpTest::query($node, "SELECT kafka_offset || '|' || stage || '|' || sqlstate || '|' || CASE WHEN error LIKE '%index row%' THEN 'reason' END "
	  . "FROM sdp.dead_letters WHERE flow = 'by_key'"),
	'2|write|54000|reason', 'the long key is dead-lettered with its offset, stage, SQLSTATE and reason');
is(SdpTest::query($node, "SELECT state || '|' || coalesce(last_error, '') FROM sdp.flow_status WHERE flow = 'by_key'"),
	'running|', 'the flow runs on, with no error');

# 2. Rows a row-level security policy rejects.
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'rls',
	messages => [ map { [ "r$_", qq({"seq": $_}), $_ % 2 ] } 0 .. 99 ]);
ok(SdpTest::wait_consumed($node, 'guarded', 100), 'the flow consumed all 100 messages');
my $rejected = grep { $_ % 7 == 3 } 0 .. 99;
is(SdpTest::query($node, 'SELECT count(*) FROM guarded'), 100 - $rejected, 'the rows the policy allows are written');
is(SdpTest::query($node, 'SELECT count(*) FROM guarded WHERE seq % 7 = 3'), '0', 'none it rejects');
is(SdpTest::query($node, "SELECT count(*) || '|' || count(DISTINCT (kafka_partition, kafka_offset)) || '|' || min(sqlstate) || '|' || max(sqlstate) "
	  . "FROM sdp.dead_letters WHERE flow = 'guarded'"),
	"$rejected|$rejected|42501|42501", 'each rejected message is dead-lettered once, with 42501');

# 3. A bad message alone in its batch cannot be told from the flow's fault
# until another message goes through: it waits, retrying, then is set aside.
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'lone', messages => [ [ $long, '{"seq": 0}' ] ]);
ok(SdpTest::wait_for($node, "SELECT state = 'retrying' AND last_error LIKE '%index row%' FROM sdp.flow_status WHERE flow = 'lone'"),
	'alone, the long key leaves the flow retrying, with the error shown');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.dead_letters WHERE flow = 'lone'"), '0', 'nothing is dead-lettered yet');
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'lone', messages => [ [ 'short', '{"seq": 1}' ] ]);
ok(SdpTest::wait_consumed($node, 'lone', 2), 'once another message arrives, both are consumed');
is(SdpTest::query($node, 'SELECT string_agg(seq::text, \',\') FROM lone'), '1', 'the good one is written');
is(SdpTest::query($node, "SELECT kafka_offset || '|' || sqlstate FROM sdp.dead_letters WHERE flow = 'lone'"), '0|54000',
	'the long key is dead-lettered');
is(SdpTest::query($node, "SELECT state || '|' || coalesce(last_error, '') FROM sdp.flow_status WHERE flow = 'lone'"),
	'running|', 'and the flow is running, with no error');

# 4. Every row failing alike is the flow's fault: retried, nothing set aside.
SdpTest::query($node, 'REVOKE INSERT ON guarded FROM app');
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'rls',
	messages => [ map { [ "s$_", qq({"seq": $_}), $_ % 2 ] } 100 .. 109 ]);
ok(SdpTest::wait_for($node, "SELECT state = 'retrying' AND last_error LIKE '%permission denied%' FROM sdp.flow_status WHERE flow = 'guarded'"),
	'a revoked privilege leaves the flow retrying');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.dead_letters WHERE flow = 'guarded'"), $rejected, 'and dead-letters nothing more');
SdpTest::query($node, 'GRANT INSERT ON guarded TO app');
ok(SdpTest::wait_consumed($node, 'guarded', 110), 'after GRANT it catches up');
my $rejected2 = grep { $_ % 7 == 3 } 100 .. 109;
is(SdpTest::query($node, 'SELECT count(*) FROM guarded'), 110 - $rejected - $rejected2, 'with exactly the allowed rows');

done_testing();
