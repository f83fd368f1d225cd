# One message cannot stop a sink flow for good (issue 26): a row larger than
# the sink's producer takes (its message.max.bytes) is set aside when it is
# written to the outbox (stage write, with the reason) and the rows around it
# are produced; the owner can set aside a row of its outbox the relay has
# not produced (sdp_skip_outbox_row): it goes to the dead letters (stage
# skipped) instead of the topic, and the others are produced.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;

my $source = SdpKafka::start_broker(topics => { 'in' => 1 });
my $sink = SdpKafka::start_broker(topics => { 'out' => 1 });
my $node = SdpTest::new_node('trust_sink');
my ($sboot, $oboot) = ($source->bootstrap, $sink->bootstrap);
SdpTest::query($node, <<"SQL");
CREATE ROLE alice LOGIN;
SET ROLE alice;
SELECT sdp_create_source('in', '$sboot', 'in', '@{[ SdpTest::source_options() ]}');
SELECT sdp_create_sink('out', '$oboot', 'out', '{"message.max.bytes": 20000}');
SELECT sdp_create_flow('big', 'in', NULL, 'seq bigint, pad text', 'SELECT seq, pad FROM input',
  sink => 'out', options => '{"max_batch_wait": "200 ms"}');
RESET ROLE;
SQL
ok(SdpTest::wait_for($node, "SELECT state = 'running' FROM sdp.flow_status WHERE flow = 'big'"), 'running');

sub msg { my ($seq, $pad) = @_; return [ undef, qq({"seq": $seq, "pad": "$pad"}), 0 ] }
sub out_seqs
{
	my @m = SdpKafka::kcat_consume(bootstrap => $oboot, topic => 'out');
	return join ',', map { $_->{payload} =~ /"seq": ?(\d+)/ ? $1 : '?' } @m;
}

# one 50 kB row between two small ones
my $big = msg(2, 'x' x 50000);
SdpKafka::kcat_produce(bootstrap => $sboot, topic => 'in', messages => [ msg(1, 'a'), $big, msg(3, 'c') ]);
ok(SdpTest::wait_consumed($node, 'big', 3), 'the flow read the three');
ok($node->poll_query_until('postgres', q{SELECT pending = 0 FROM sdp.sink_relays WHERE flow = 'big'}), 'its outbox is empty');
is(out_seqs(), '1,3', 'the consumer sees the two small ones, once each');
is(SdpTest::query($node, q{SELECT kafka_offset || ' ' || stage || ' ' || sqlstate || ' ' || length(payload) FROM sdp.dead_letters WHERE flow = 'big'}),
	'1 write 22001 ' . length($big->[1]),
	'the big one is in sdp.dead_letters, at stage write, with its whole payload');
like(SdpTest::query($node, q{SELECT error FROM sdp.dead_letters WHERE flow = 'big'}),
	qr/^message of 500\d\d bytes \(key and value\) is too large for sink "out": its producer's message.max.bytes is 20000/,
	'with the reason');
is(SdpTest::query($node, q{SELECT state || ' ' || rows_dead_lettered FROM sdp.flow_status WHERE flow = 'big'}), 'running 1',
	'the flow runs on, and counts it');

# a row the owner skips: the sink's brokers are down, the rows wait in the outbox
$sink->down;
SdpKafka::kcat_produce(bootstrap => $sboot, topic => 'in', messages => [ msg(4, 'd'), msg(5, 'e'), msg(6, 'f') ]);
ok(SdpTest::wait_consumed($node, 'big', 6), 'the flow read three more');
ok($node->poll_query_until('postgres', q{SELECT pending = 3 FROM sdp.sink_relays WHERE flow = 'big'}),
	'the sink cannot be written: they wait in the outbox');
SdpTest::query($node, "SELECT sdp_stop_flow('big')");
ok(SdpTest::wait_for($node, "SELECT state = 'stopped' FROM sdp.flow_status WHERE flow = 'big'"), 'stopped, with them pending');
my $seq5 = SdpTest::query($node, q{SELECT seq FROM sdp.outbox WHERE value::jsonb->>'seq' = '5'});
my ($ret, $out, $err) = $node->psql('postgres', "SET ROLE alice; SELECT sdp_skip_outbox_row('big', 999999999)");
like($err, qr/flow "big" has no outbox row 999999999/, 'a row the outbox does not hold is refused');
SdpTest::query($node, "CREATE ROLE bob LOGIN");
($ret, $out, $err) = $node->psql('postgres', "SET ROLE bob; SELECT sdp_skip_outbox_row('big', $seq5)");
like($err, qr/must be owner of flow "big"/, 'another role may not skip it');
SdpTest::query($node, "SET ROLE alice; SELECT sdp_skip_outbox_row('big', $seq5)");
is(SdpTest::query($node, "SELECT first_pending_seq FROM sdp.sink_relays WHERE flow = 'big'") <= $seq5 ? 1 : 0, 1,
	'the owner asks for it to be skipped');
$sink->up;
SdpTest::query($node, "SELECT sdp_start_flow('big')");
ok($node->poll_query_until('postgres', q{SELECT pending = 0 FROM sdp.sink_relays WHERE flow = 'big'}), 'the relay drained the outbox');
is(out_seqs(), '1,3,4,6', 'the consumer sees the others, once each, not the skipped one');
is(SdpTest::query($node, q{SELECT stage || ' ' || error || ' ' || payload_text FROM sdp.dead_letters WHERE flow = 'big' AND stage = 'skipped'}),
	qq(skipped outbox row $seq5 set aside unproduced at the request of role alice {"pad": "e", "seq": 5}),
	'the skipped row is a dead letter, with who asked, and its message');
is(SdpTest::query($node, q{SET ROLE alice; SELECT count(*) FROM sdp.dead_letters WHERE flow = 'big'}), '2',
	'the owner sees both dead letters');

done_testing();
