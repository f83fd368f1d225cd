# A flow stopped while the broker's retention deletes messages it had not
# read: when it starts again its offset is gone, librdkafka moves on to the
# oldest message left (auto.offset.reset = earliest), and the flow says so
# in sdp.flow_status and the server log instead of skipping them silently.
# (The embedded broker keeps about 5 MiB per partition; Apache Kafka is
# told to delete records.)
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'short' => 1 });
my $node = SdpTest::new_node('retention');
SdpTest::create_source($node, 'short', $broker, 'short');
SdpTest::query($node, <<'SQL');
CREATE TABLE short (id int, kafka_offset bigint);
SELECT sdp_create_flow('short_flow', 'short', 'short', 'id int', options => '{"mode": "append"}');
SQL
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'short',
	messages => [ map { [ "k$_", qq({"id": $_}), 0 ] } 0 .. 9 ]);
ok(SdpTest::wait_consumed($node, 'short_flow', 10), 'the first 10 consumed');
SdpTest::query($node, "SELECT sdp_stop_flow('short_flow')");
ok($node->poll_query_until('postgres',
		"SELECT state = 'stopped' FROM sdp.flow_status WHERE flow = 'short_flow'"), 'stopped');

# While it is stopped, messages 10.. are deleted before it read them: the
# embedded broker deletes the oldest of the 7.5 MB more it is sent; Apache
# Kafka is told to delete those before offset 60 (DeleteRecords, as
# retention does with a segment).
my $pad = SdpKafka::kind() eq 'apache' ? '' : 'p' x 50000;
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'short',
	messages => [ map { [ "k$_", qq({"id": $_, "pad": "$pad"}), 0 ] } 10 .. 159 ]);
$broker->delete_records('short', 0, 60) if SdpKafka::kind() eq 'apache';
my $log_offset = -s $node->logfile;
SdpTest::query($node, "SELECT sdp_start_flow('short_flow')");
ok(SdpTest::wait_consumed($node, 'short_flow', 160), 'the flow reads to the end of the partition');

my $status = SdpTest::query($node, "SELECT last_error FROM sdp.flow_status WHERE flow = 'short_flow'");
like($status, qr/^messages the flow had not read are no longer on the broker \(retention\): short \[0\]: offset 10 was gone, reading went on at offset \d+$/,
	'the status says which offset was gone');
my ($went_on) = $status =~ /reading went on at offset (\d+)$/;
my ($first, $last, $n) = split /\|/, SdpTest::query($node,
	'SELECT min(kafka_offset), max(kafka_offset), count(*) FROM short WHERE kafka_offset >= 10');
cmp_ok($first, '>', 10, "reading went on at offset $first");
is($first, 60, 'at the first message left') if SdpKafka::kind() eq 'apache';
is($went_on, $first, 'and where reading went on');
is("$last $n", '159 ' . (160 - $first), 'from there to the end, every message once');
is(SdpTest::query($node, 'SELECT count(*) FROM short WHERE kafka_offset < 10'), '10', 'the first 10 kept');
ok($node->wait_for_log(qr/LOG:  sdp flow "short_flow": messages the flow had not read are no longer on the broker/, $log_offset),
	'and the server log');
is(SdpTest::query($node, "SELECT state || ' ' || restarts FROM sdp.flow_status WHERE flow = 'short_flow'"), 'running 0', 'the flow runs on');

done_testing();
