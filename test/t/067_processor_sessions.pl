# A stateful processor keyed by user over event time (issue 47):
# examples/sessions.sql, loaded as a reader would (psql -v bootstrap -v
# source_options), sessionizes a generated click stream (users keyed by
# user_id over four partitions, each user's clicks in event-time order, gaps
# below and above the 30 minutes that end a session) while the postmaster is
# killed with SIGKILL once mid-stream.  The processor restores its checkpoint
# and replays the messages after it.  At the end a far-future click on each
# partition (users zz_flush_N, left out) pushes the watermark past every
# session, and the sessions table equals gaps and islands in SQL over every
# click (which a stateless flow appends beside it): each session once, its
# clicks' URLs in order, and nothing kept of a closed session.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use PostgreSQL::Test::Utils;
use POSIX qw(strftime);
use SdpKafka;
use SdpTest;
use Test::More;

my $partitions = 4;
my $broker = SdpKafka::start_broker(topics => { 'clicks' => $partitions });
my $boot = $broker->bootstrap;
my $node = SdpTest::new_node('sessions');

$node->command_ok(
	[ 'psql', '-X', '-q', '-d', 'postgres', '-v', 'ON_ERROR_STOP=1',
		'-v', "bootstrap=$boot", '-v', 'source_options=' . SdpTest::source_options(),
		'-f', 'examples/sessions.sql' ],
	'examples/sessions.sql loads through psql with -v bootstrap and source_options');
SdpTest::query($node, <<'SQL');
CREATE TABLE all_clicks (seq bigint, user_id text, url text, ts timestamptz, kafka_partition int, kafka_offset bigint);
SELECT sdp_create_flow('all_clicks_flow', 'clicks', 'all_clicks', 'seq bigint, user_id text, url text, ts timestamptz');
SQL
ok(SdpTest::wait_for($node,
		"SELECT count(*) = 2 FROM sdp.flow_status WHERE state = 'running' AND partitions IS NOT NULL"),
	'sessions_flow and all_clicks_flow run');

# The clicks: per user, gaps of 1 to 25 minutes (the same session) or of 35
# minutes to 4 hours (the next one), every click a second apart at least from
# the user's previous; merged in event-time order, so that each partition's
# clicks come in event-time order and the watermark never passes a click not
# yet read.
srand(67);
my $base = 1772323200;    # 2026-03-01T00:00:00Z
my @clicks;
for my $u (1 .. 200)
{
	my $user = sprintf('u%03d', $u);
	my $t = $base + int(rand(7200));
	my $n = 20 + int(rand(21));
	for my $i (1 .. $n)
	{
		push @clicks, { user => $user, ts => $t, url => "https://shop.example/$user/$i" };
		$t += rand() < 0.7 ? 60 + int(rand(24 * 60)) : 35 * 60 + int(rand(205 * 60));
	}
}
@clicks = sort { $a->{ts} <=> $b->{ts} || $a->{user} cmp $b->{user} } @clicks;
my $total = scalar @clicks;
my $seq = 0;
sub message
{
	my ($c, $partition) = @_;
	my $ts = strftime('%Y-%m-%dT%H:%M:%SZ', gmtime($c->{ts}));
	return [ $c->{user}, qq({"seq": @{[ $seq++ ]}, "user_id": "$c->{user}", "url": "$c->{url}", "ts": "$ts"}), $partition ];
}
my @messages = map { message($_) } @clicks;

# half the stream; the processor checkpoints; 30 % more, and the postmaster is
# killed while the flow reads them; the last 20 % after the restart
my ($half, $more) = (int($total * 0.5), int($total * 0.8));
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'clicks', messages => [ @messages[ 0 .. $half - 1 ] ]);
my $consumed = SdpTest::consumed_sql('sessions_flow');
ok(SdpTest::wait_for($node, <<"SQL"), 'the processor streams and has checkpointed');
SELECT ($consumed) >= @{[ int($total / 4) ]} AND
       (SELECT last_checkpoint_at IS NOT NULL FROM sdp.flow_status WHERE flow = 'sessions_flow')
SQL
# the flow commits asynchronously (its synchronous_commit is off): a crash
# may lose its last commits, its checkpoint with them (and replays the
# messages after the one before, or from the start). A CHECKPOINT flushes
# the WAL, so that the crash below meets a checkpoint to restore.
SdpTest::query($node, 'CHECKPOINT');
my $closed_before = SdpTest::query($node, 'SELECT count(*) FROM sessions');
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'clicks', messages => [ @messages[ $half .. $more - 1 ] ]);
my $read_before = SdpTest::query($node, $consumed);
my $log_offset = -s $node->logfile;
SdpTest::crash_and_restart($node);
pass("postmaster killed with SIGKILL after $read_before of $total clicks ($closed_before sessions closed), restarted");
ok(SdpTest::wait_for($node, "SELECT count(*) = 2 FROM sdp.flow_status WHERE state = 'running'"), 'both flows run again');
ok($node->wait_for_log(qr/sdp flow "sessions_flow" restored the state of \d+ keys from its checkpoint/, $log_offset),
	'the processor restored its checkpointed state');
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'clicks', messages => [ @messages[ $more .. $total - 1 ] ]);
ok(SdpTest::wait_consumed($node, 'sessions_flow', $total), "sessions_flow consumed all $total clicks");
ok(SdpTest::wait_consumed($node, 'all_clicks_flow', $total), "all_clicks_flow consumed all $total clicks");

# one far-future click on each partition moves the watermark past every session
my $flush_ts = $base + 74 * 365 * 86400;
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'clicks',
	messages => [ map { message({ user => "zz_flush_$_", ts => $flush_ts, url => "https://shop.example/flush/$_" }, $_) }
		  0 .. $partitions - 1 ]);
ok(SdpTest::wait_consumed($node, 'all_clicks_flow', $total + $partitions), 'the flush clicks are read');
SdpTest::assert_exactly_once($node, 'all_clicks',
	{ map { my $p = $_; $p => SdpTest::query($node, "SELECT count(*) FROM all_clicks WHERE kafka_partition = $p") }
		  0 .. $partitions - 1 }, 'ground truth');
is(SdpTest::query($node, "SELECT count(*) FROM all_clicks WHERE user_id NOT LIKE 'zz_flush%'"), $total,
	"ground truth: $total clicks");
is(SdpTest::query($node, "SELECT count(DISTINCT kafka_partition) FROM all_clicks WHERE user_id NOT LIKE 'zz_flush%'"),
	$partitions, 'the users are spread over every partition');

SdpTest::query($node, <<'SQL');
CREATE TABLE expected AS
WITH c AS (
  SELECT user_id, url, ts, kafka_offset,
         CASE WHEN lag(ts) OVER w IS NULL OR ts - lag(ts) OVER w > interval '30 minutes' THEN 1 ELSE 0 END AS starts
    FROM all_clicks WHERE user_id NOT LIKE 'zz_flush%'
  WINDOW w AS (PARTITION BY user_id ORDER BY kafka_offset)),
s AS (SELECT *, sum(starts) OVER (PARTITION BY user_id ORDER BY kafka_offset) AS session FROM c)
SELECT user_id, min(ts) AS started, max(ts) AS ended, count(*)::int AS clicks, array_agg(url ORDER BY kafka_offset) AS urls
  FROM s GROUP BY user_id, session;
SQL
my $expected = SdpTest::query($node, 'SELECT count(*) FROM expected');
my ($short, $long) = split /\|/, SdpTest::query($node,
	"SELECT count(*) FILTER (WHERE clicks = 1), count(*) FILTER (WHERE clicks >= 5) FROM expected");
ok($expected > 1000 && $short > 0 && $long > 0,
	"the stream has $expected sessions ($short of one click, $long of five or more)");
ok(SdpTest::wait_for($node, "SELECT count(*) >= $expected FROM sessions WHERE user_id NOT LIKE 'zz_flush%'"),
	'every session is closed once the watermark passed it');
is(SdpTest::query($node, <<'SQL'), '0', 'sessions equals gaps and islands over every click: ends, clicks, urls in order');
SELECT count(*) FROM expected e FULL JOIN (SELECT * FROM sessions WHERE user_id NOT LIKE 'zz_flush%') s USING (user_id, started)
 WHERE e.user_id IS NULL OR s.user_id IS NULL
    OR s.ended IS DISTINCT FROM e.ended OR s.clicks IS DISTINCT FROM e.clicks OR s.urls IS DISTINCT FROM e.urls
SQL
is(SdpTest::query($node, "SELECT count(*) FROM sessions WHERE user_id NOT LIKE 'zz_flush%'"), $expected,
	"exactly $expected sessions");
is(SdpTest::query($node, "SELECT count(*) FROM sessions WHERE user_id LIKE 'zz_flush%'"), '0',
	'the flush users\' sessions are still open');
is(SdpTest::query($node, "SELECT count(*) FROM sessions WHERE clicks <> cardinality(urls) OR ended < started"), '0',
	'each session\'s clicks are its urls, and it ends after it starts');
is(SdpTest::query($node, "SELECT count(*) FROM sdp_flow_state('sessions_flow') WHERE key NOT LIKE 'zz_flush%'"), '0',
	'nothing is kept of a closed session');
is(SdpTest::query($node,
		"SELECT string_agg(DISTINCT state, ',' ORDER BY state) || '|' || count(DISTINCT key) FROM sdp_flow_state('sessions_flow')"),
	"last,started,timers,urls|$partitions", 'the flush users\' open sessions are kept, with their timers');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.dead_letters"), '0', 'no dead letter');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.flow_status WHERE state <> 'running' OR last_error IS NOT NULL"), '0',
	'both flows run, with no error');

done_testing();
