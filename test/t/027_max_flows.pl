# A flow past sdp.max_flows does not sit in 'starting' with no reason: it
# shows 'waiting', says why, and starts as soon as a slot is free.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'mf' => 1 });
my $node = SdpTest::new_node('maxflows', 'sdp.max_flows' => 1);
SdpTest::create_source($node, 'mf', $broker, 'mf', '{"starting_offsets": "earliest"}');
SdpTest::query($node, <<'SQL');
CREATE TABLE first_t (seq bigint);
CREATE TABLE second_t (seq bigint);
SELECT sdp_create_flow('first', 'mf', 'first_t', 'seq bigint', options => '{"mode": "append"}');
SELECT sdp_create_flow('second', 'mf', 'second_t', 'seq bigint', options => '{"mode": "append"}');
SQL
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'mf',
	messages => [ map { [ "k$_", qq({"seq": $_}) ] } 0 .. 9 ]);
ok(SdpTest::wait_for($node, "SELECT count(*) = 10 FROM first_t"), 'the first flow runs');
is(SdpTest::query($node, "SELECT state || '|' || last_error FROM sdp.flow_status WHERE flow = 'second'"),
	'waiting|all 1 flow slots are in use (sdp.max_flows): the flow starts when one is free',
	'the second flow waits for a slot, and says why');
SdpTest::query($node, "SELECT sdp_stop_flow('first')");
ok(SdpTest::wait_for($node, "SELECT count(*) = 10 FROM second_t"), 'once the first stops, the second runs');
is(SdpTest::query($node, "SELECT string_agg(flow || ' ' || state, ', ' ORDER BY flow) FROM sdp.flow_status"),
	'first stopped, second running', 'and the status says so');

done_testing();
