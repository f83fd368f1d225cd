# Topics that come and go, and Kafka's own consumer-group tool, against
# Apache Kafka (issue 27; auto.create.topics.enable=false, as on a managed
# cluster):
#  - a flow declared on a topic that does not exist yet is retrying, with
#    the reason, and reads the topic once it is created;
#  - kafka-consumer-groups --describe shows each flow's group (sdp_ext.FLOW)
#    with its committed offsets and its lag, a stopped flow's lag included;
#  - a topic deleted under two running flows: each is retrying with the
#    reason, and when the topic is created again reads it from its start,
#    the reset said in its status; every message once, none lost.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;
use Time::HiRes qw(sleep);

SdpKafka::needs_apache('topics created and deleted, and Kafka\'s consumer-group tool');

my $broker = SdpKafka::start_broker(topics => { 'life' => 3 });
my $boot = $broker->bootstrap;
my $node = SdpTest::new_node('kafka_topic_life');
SdpTest::create_source($node, 'life', $broker, 'life');
SdpTest::create_source($node, 'later', $broker, 'later');
SdpTest::query($node, <<'SQL');
CREATE TABLE got (flow text, seq int, kafka_partition int, kafka_offset bigint);
SELECT sdp_create_flow(f, s, 'got', 'seq int', format($$SELECT %L AS flow, seq, kafka_partition, kafka_offset FROM input$$, f),
  options => '{"mode": "append", "progress_interval": "1s"}')
  FROM (VALUES ('a', 'life'), ('b', 'life'), ('late', 'later')) v(f, s);
SQL
my $log_offset = -s $node->logfile;

sub produce
{
	my ($topic, $partition, $from, $to) = @_;
	SdpKafka::kcat_produce(bootstrap => $boot, topic => $topic,
		messages => [ map { [ "k$_", qq({"seq": $_}), $partition ] } $from .. $to ]);
}

sub status
{
	my ($flow) = @_;
	return SdpTest::query($node, "SELECT state || ' | ' || coalesce(last_error, '') FROM sdp.flow_status WHERE flow = '$flow'");
}

# --- a topic that does not exist yet
ok(SdpTest::wait_for($node, "SELECT state = 'retrying' FROM sdp.flow_status WHERE flow = 'late'"),
	'late: retrying while its topic does not exist');
like(status('late'), qr/^retrying \| cannot start consuming: source "later" \(brokers [^)]+\): topic "later" is not available: Broker: Unknown topic or partition; trying again every second$/,
	'late: the reason names the topic and what the broker said');
$broker->create_topic('later', 1);
produce('later', 0, 1, 20);
ok(SdpTest::wait_consumed($node, 'late', 20), 'late: reads the topic once it is created');
is(status('late'), 'running | ', 'late: running, the error gone');

# --- Kafka's consumer-group tool
produce('life', $_, $_ * 100 + 1, $_ * 100 + 100) for 0 .. 2;
ok(SdpTest::wait_consumed($node, $_, 300), "$_: the 300 messages") for qw(a b);

# the offsets also go to the group at each progress report (1 s): poll the tool until it shows them
sub group_is
{
	my ($group, $want, $label) = @_;
	my $got = '';
	for (1 .. 40)
	{
		my $g = $broker->group($group);
		$got = join ' | ', map { "$_ @{ $g->{$_} }" } sort keys %$g;
		last if $got eq $want;
		sleep 1;
	}
	is($got, $want, $label);
}
group_is('sdp_ext.a', 'life 0 100 100 0 | life 1 100 100 0 | life 2 100 100 0',
	'kafka-consumer-groups: group sdp_ext.a at the end of each partition, lag 0');
group_is('sdp_ext.late', 'later 0 20 20 0', 'kafka-consumer-groups: group sdp_ext.late');

SdpTest::query($node, "SELECT sdp_stop_flow('b')");
ok(SdpTest::wait_for($node, "SELECT state = 'stopped' FROM sdp.flow_status WHERE flow = 'b'"), 'b: stopped');
produce('life', $_, 1000 + $_ * 10 + 1, 1000 + $_ * 10 + 10) for 0 .. 2;
ok(SdpTest::wait_consumed($node, 'a', 330), 'a: the 30 more');
group_is('sdp_ext.a', 'life 0 110 110 0 | life 1 110 110 0 | life 2 110 110 0',
	'kafka-consumer-groups: a is at the end again');
group_is('sdp_ext.b', 'life 0 100 110 10 | life 1 100 110 10 | life 2 100 110 10',
	'kafka-consumer-groups: the stopped flow b lags by the 10 of each partition');
SdpTest::query($node, "SELECT sdp_start_flow('b')");
ok(SdpTest::wait_consumed($node, 'b', 330), 'b: started again, reads the 30');

# --- the topic deleted under the running flows, then created again
$log_offset = -s $node->logfile;
$broker->delete_topic('life');
for my $f (qw(a b))
{
	ok(SdpTest::wait_for($node, "SELECT state = 'retrying' FROM sdp.flow_status WHERE flow = '$f'"),
		"$f: retrying once its topic is deleted");
	like(status($f), qr/^retrying \| the topic is gone from the broker \(deleted\?\): topic "life" is not available: Broker: Unknown topic or partition; the flow waits for it and goes on from its committed offsets when it returns$/,
		"$f: the reason says the topic is gone");
}
ok($node->wait_for_log(qr/LOG:  sdp flow "a": the topic is gone from the broker/, $log_offset), 'the server log says so');
is(SdpTest::query($node, "SELECT state FROM sdp.flow_status WHERE flow = 'late'"), 'running', 'late, on another topic, runs on');
sleep 3;    # the flows look again while the topic is still gone
is(SdpTest::query($node, "SELECT string_agg(state, ',' ORDER BY flow) FROM sdp.flow_status WHERE flow IN ('a', 'b')"),
	'retrying,retrying', 'both still retrying while the topic is gone');

$broker->create_topic('life', 3);
produce('life', $_, 2000 + $_ * 50 + 1, 2000 + $_ * 50 + 50) for 0 .. 2;
for my $f (qw(a b))
{
	ok(SdpTest::wait_for($node, "SELECT count(*) = 150 FROM got WHERE flow = '$f' AND seq > 2000"),
		"$f: the 150 messages of the topic created again");
	ok(SdpTest::wait_for($node, "SELECT state = 'running' FROM sdp.flow_status WHERE flow = '$f'"), "$f: running again");
	like(status($f), qr/^running \| messages the flow had not read are no longer on the broker \(the topic was deleted and created again\): life \[\d\]: offset 110 was gone, reading went on at offset 0/,
		"$f: its status says its offsets were past the new topic's end, read from its start");
	is(SdpTest::query($node, "SELECT count(*) || ' ' || count(DISTINCT seq) || ' '
	       || count(*) FILTER (WHERE seq <= 300) || ' ' || count(*) FILTER (WHERE seq BETWEEN 1001 AND 1030) || ' '
	       || count(*) FILTER (WHERE seq > 2000) || ' ' || min(kafka_offset) FILTER (WHERE seq > 2000)
	     FROM got WHERE flow = '$f'"), '480 480 300 30 150 0',
		"$f: every message of both topics once (300 + 30 before, 150 after), the new one's from offset 0");
}

done_testing();
