# A flow draining a backlog keeps librdkafka fetching (issue 12's stall).
#
# librdkafka 2.0 stops fetching when its local queue reaches
# queued.min.messages (or queued.max.messages.kbytes), with no deadline, and
# decides again only when its broker thread wakes for another reason, up to
# a second later: a worker that empties the queue faster than that waits
# with the broker full of messages.  The worker wakes the fetcher (an
# asynchronous seek to its own position) when it finds the queue empty
# after it had filled, while the broker holds more (fetcherWakes in
# sdp_flow_progress counts it).  Here the local queue holds only 100
# messages, so a 30,000-message backlog needs the fetcher restarted
# hundreds of times: every message must arrive exactly once, and the
# worker must have woken the fetcher.  (How fast it drains is for the
# benchmark: bench/cpu_ab.sh with AB_SOURCE_OPTIONS measured 9,800 events/s
# without the wake and 56,500 with it, this queue size being 5,000.)
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;
use JSON::PP;

my $n = 30000;
my $broker = SdpKafka::start_broker(topics => { 'backlog' => 4 });
my $node = SdpTest::new_node('backlog');

# the backlog is on the broker before the flow exists
my $report = SdpKafka::run_flightsim(bootstrap => $broker->bootstrap, topic => 'backlog',
	args => [ '--count', $n, '--rate', 0, '--aircraft', 300, '--seed', 29 ]);
is($report->{delivered}, $n, "producer delivered $n");

SdpTest::create_source($node, 'backlog', $broker, 'backlog',
	'{"starting_offsets": "earliest", "queued.min.messages": "100"}');
SdpTest::query($node, <<'SQL');
CREATE TABLE events (seq bigint, icao24 text, kafka_partition int, kafka_offset bigint);
SELECT sdp_create_flow('backlog_flow', 'backlog', 'events', 'seq bigint, icao24 text',
  options => '{"mode": "append", "progress_interval": "500 ms"}');
SQL

ok(SdpTest::wait_consumed($node, 'backlog_flow', $n), "the flow consumed the $n messages");
SdpTest::assert_exactly_once($node, 'events', $report->{partitions}, 'backlog');
is(SdpTest::query($node, "SELECT count(DISTINCT seq) || '|' || min(seq) || '|' || max(seq) FROM events"),
	"$n|0|" . ($n - 1), 'every sequence number once');

# the wakes are counted in the progress reports.  The report published last
# when the drain is over may be of an interval of the drain (one in which
# the fetcher rested, with no input), and the next one's interval holds the
# drain's end: the one after that is the first wholly after it.
my $drained_report = SdpTest::query($node, "SELECT coalesce((sdp_flow_progress('backlog_flow')->>'reportId')::int, 0)");
ok($node->poll_query_until('postgres',
		"SELECT (p->>'reportId')::int >= $drained_report + 2 AND (p->>'numInputRows')::int = 0 "
		  . "AND (p->>'fetcherWakes')::bigint > 0 FROM (SELECT sdp_flow_progress('backlog_flow') AS p) s"),
	'the worker woke the fetcher while draining');
my $progress = decode_json(SdpTest::query($node, "SELECT sdp_flow_progress('backlog_flow')"));
diag("fetcherWakes after the drain: $progress->{fetcherWakes}");

# at rest, with nothing left on the broker, it does not keep waking it
my ($wakes, $report_id) = ($progress->{fetcherWakes}, $progress->{reportId});
sleep 2;
ok($node->poll_query_until('postgres',
		"SELECT (sdp_flow_progress('backlog_flow')->>'reportId')::int > $report_id + 2"),
	'more progress reports, while idle');
$progress = decode_json(SdpTest::query($node, "SELECT sdp_flow_progress('backlog_flow')"));
is($progress->{fetcherWakes}, $wakes, 'an idle flow with nothing on the broker wakes nothing');
is($progress->{numInputRows}, 0, 'and reads nothing');
done_testing();
