# Upsert mode: the latest message per key wins, inside one batch (no
# "cannot affect row a second time" error) and across batches.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { updates => 3, decimals => 1 });
my $node = SdpTest::new_node('upsert');
SdpTest::create_source($node, 'updates', $broker, 'updates');
SdpTest::create_source($node, 'decimals', $broker, 'decimals');

# 50 keys, 20 versions each, interleaved, all produced before the flow
# starts, so that the first batch holds every version of every key.
my @msgs;
for my $v (0 .. 19)
{
	push @msgs, [ "k$_", qq({"k": "k$_", "v": $v}), undef ] for 0 .. 49;
}
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'updates', messages => \@msgs);

SdpTest::query($node, <<'SQL');
CREATE TABLE latest (k text PRIMARY KEY, v int, kafka_partition int, kafka_offset bigint);
CREATE TABLE history (k text, v int, kafka_partition int, kafka_offset bigint);
SELECT sdp_create_flow('latest_flow', 'updates', 'latest', 'k text, v int');
SELECT sdp_create_flow('history_flow', 'updates', 'history', 'k text, v int');
SQL
ok(SdpTest::wait_consumed($node, 'latest_flow', 1000), 'latest_flow consumed 1000 messages');
ok(SdpTest::wait_consumed($node, 'history_flow', 1000), 'history_flow consumed 1000 messages');

is(SdpTest::query($node, "SELECT options->>'mode' FROM sdp.flows WHERE name = 'latest_flow'"),
	'upsert', 'a target with a primary key defaults to upsert');
is(SdpTest::query($node, "SELECT count(*), min(v), max(v) FROM latest"), '50|19|19',
	'one row per key, each holding its last version');
is(SdpTest::query($node, <<'SQL'), '0', 'each key holds the offset of its last message');
WITH last AS (SELECT DISTINCT ON (k) k, kafka_partition, kafka_offset FROM history ORDER BY k, kafka_offset DESC)
SELECT count(*) FROM latest l FULL JOIN last USING (k)
 WHERE l.kafka_partition IS DISTINCT FROM last.kafka_partition OR l.kafka_offset IS DISTINCT FROM last.kafka_offset
SQL
is(SdpTest::query($node, "SELECT rows_dead_lettered FROM sdp.flow_status WHERE flow = 'latest_flow'"),
	'0', 'no dead letters');

# Across many small batches: later versions overwrite earlier ones.
SdpTest::query($node, "SELECT sdp_stop_flow('latest_flow')");
ok($node->poll_query_until('postgres',
		"SELECT state = 'stopped' FROM sdp.flow_status WHERE flow = 'latest_flow'"),
	'stopped');
SdpTest::query($node, <<'SQL');
UPDATE sdp.flows SET options = options || '{"max_batch_rows": 7}' WHERE name = 'latest_flow';
SELECT sdp_start_flow('latest_flow');
SQL
@msgs = ();
for my $v (20 .. 29)
{
	push @msgs, [ "k$_", qq({"k": "k$_", "v": $v}), undef ] for 0 .. 49;
}
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'updates', messages => \@msgs);
ok(SdpTest::wait_consumed($node, 'latest_flow', 1500), 'consumed 500 more in batches of at most 7');
is(SdpTest::query($node, "SELECT count(*), min(v), max(v) FROM latest"), '50|29|29',
	'every key holds version 29');
ok(SdpTest::query($node, "SELECT batches >= 500 / 7 FROM sdp.flow_status WHERE flow = 'latest_flow'") eq 't',
	'the 500 messages took many batches');

# Keys that are equal but spelled differently (1.0 and 1.00 as numeric)
# collide in ON CONFLICT; the batch is split until they are apart, and the
# last one still wins, with nothing dead-lettered.
SdpTest::query($node, <<'SQL');
CREATE TABLE amounts (id numeric PRIMARY KEY, v int);
SELECT sdp_create_flow('amounts_flow', 'decimals', 'amounts', 'id numeric, v int');
SQL
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'decimals', messages => [
	[ 'a', '{"id": "1.0", "v": 1}', 0 ],
	[ 'a', '{"id": "1.00", "v": 2}', 0 ],
	[ 'b', '{"id": "2", "v": 3}', 0 ],
	[ 'a', '{"id": "1.000", "v": 4}', 0 ] ]);
ok(SdpTest::wait_consumed($node, 'amounts_flow', 4), 'amounts_flow consumed 4 messages');
is(SdpTest::query($node, "SELECT string_agg(id::text || '=' || v, ' ' ORDER BY id) FROM amounts"),
	'1.0=4 2=3', 'equal keys resolve to the last message (the key keeps its first spelling)');
is(SdpTest::query($node, "SELECT rows_dead_lettered FROM sdp.flow_status WHERE flow = 'amounts_flow'"),
	'0', 'no dead letters');

done_testing();
