# max_batch_bytes bounds a batch by the size of its messages: 80 messages of
# 50 kB, 4 MB in all, available at once, reach a flow with a 1MB bound in
# transactions of at most 21 messages (the message that crosses the bound is
# the last one taken), all of them written exactly once.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'big' => 4 });
my $node = SdpTest::new_node('batchbytes');
SdpTest::create_source($node, 'big', $broker, 'big');

my $pad = 'p' x 50000;
SdpKafka::kcat_produce(bootstrap => $broker->bootstrap, topic => 'big',
	messages => [ map { [ "k$_", qq({"id": $_, "pad": "$pad"}), $_ % 4 ] } 0 .. 79 ]);

SdpTest::query($node, <<'SQL');
CREATE TABLE big (id int, pad text, kafka_partition int, kafka_offset bigint);
SELECT sdp_create_flow('big_flow', 'big', 'big', 'id int, pad text',
  options => '{"mode": "append", "max_batch_bytes": "1MB", "max_batch_wait": "50 ms"}');
SQL
ok(SdpTest::wait_consumed($node, 'big_flow', 80), 'all 80 consumed');

# one transaction per batch: the rows of a batch share their xmin
my ($rows, $ids, $batches, $largest) = split /\|/, SdpTest::query($node,
	'SELECT sum(n), (SELECT count(DISTINCT id) FROM big), count(*), max(n) FROM (SELECT xmin, count(*) AS n FROM big GROUP BY xmin) b');
is("$rows $ids", '80 80', 'every message written once');
cmp_ok($largest, '<=', 21, "the largest batch took $largest messages (at most 21 of 50 kB under 1MB)");
cmp_ok($batches, '>=', 4, "$batches batches");
is(SdpTest::query($node, "SELECT count(*) FROM big WHERE length(pad) <> 50000"), '0', 'payloads whole');

my ($ret, $out, $err) = $node->psql('postgres',
	"SELECT sdp_create_flow('tiny', 'big', 'big', 'id int', options => '{\"max_batch_bytes\": \"10kB\"}')");
like($err, qr/option "max_batch_bytes" must be a memory size of at least 1MB, not "10kB"/, 'a bound under 1MB is refused');

done_testing();
