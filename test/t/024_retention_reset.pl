# A flow stopped while the broker's retention deletes messages it had not
# read: when it starts again its offset is gone, librdkafka moves on to the
# oldest message left (auto.offset.reset = earliest), and the flow says so
# in sdp.flow_status and the server log instead of skipping them silently.
# (The embedded broker keeps about 5 MiB per partition; Apache Kafka's
# retention is made short for the topic: retention.ms 3 s, segment.ms 1 s.)
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;

my $apache = SdpKafka::kind() eq 'apache';
my $broker = SdpKafka::start_broker($apache ? () : (topics => { 'short' => 1 }));
$broker->create_topic('short', 1, 'retention.ms' => 3000, 'segment.ms' => 1000) if $apache;
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
# Kafka's retention deletes 0..59 (their segment is older than retention.ms:
# the broker rolls it and deletes it, the log start moves to 60), then the
# topic keeps what it is sent from there (retention.ms -1).
my $pad = $apache ? '' : 'p' x 50000;
my $produce = sub {
	my ($from, $to) = @_;
	SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'short',
		messages => [ map { [ "k$_", qq({"id": $_, "pad": "$pad"}), 0 ] } $from .. $to ]);
};
if ($apache)
{
	$produce->(10, 59);
	my $low = 0;
	for (1 .. 60)
	{
		($low) = $broker->watermarks('short', 0);
		last if $low >= 60;
		sleep 1;
	}
	is($low, 60, "Apache Kafka's retention deleted offsets 0..59");
	$broker->set_config('short', 'retention.ms' => -1);
	$produce->(60, 159);
}
else
{
	$produce->(10, 159);
}
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
is($first, 60, 'at the first message left') if $apache;
is($went_on, $first, 'and where reading went on');
is("$last $n", '159 ' . (160 - $first), 'from there to the end, every message once');
is(SdpTest::query($node, 'SELECT count(*) FROM short WHERE kafka_offset < 10'), '10', 'the first 10 kept');
ok($node->wait_for_log(qr/LOG:  sdp flow "short_flow": messages the flow had not read are no longer on the broker/, $log_offset),
	'and the server log');
is(SdpTest::query($node, "SELECT state || ' ' || restarts FROM sdp.flow_status WHERE flow = 'short_flow'"), 'running 0', 'the flow runs on');

done_testing();
