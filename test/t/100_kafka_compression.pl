# Producers' compression, against Apache Kafka (issue 27): a topic written
# with each of gzip, snappy, lz4 and zstd holds compressed record batches
# (the broker's own log says so: the mock cluster never compressed), and a
# flow reads every message of each exactly once, its values intact.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;

SdpKafka::needs_apache('the broker stores what producers compressed');

my @codecs = qw(gzip snappy lz4 zstd);
my $broker = SdpKafka::start_broker(topics => { map { ("c_$_" => 2) } @codecs });
my $boot = $broker->bootstrap;
my $node = SdpTest::new_node('kafka_compression');
SdpTest::query($node, 'CREATE TABLE received (codec text, seq int, word text, kafka_partition int, kafka_offset bigint)');
for my $c (@codecs)
{
	SdpTest::create_source($node, "c_$c", $broker, "c_$c");
	SdpTest::query($node, "SELECT sdp_create_flow('f_$c', 'c_$c', 'received', 'seq int, word text',
	  \$\$SELECT '$c' AS codec, seq, word, kafka_partition, kafka_offset FROM input\$\$, options => '{\"mode\": \"append\"}')");
}

# 2,000 messages per codec, in batches of many (linger), so that they compress
my $n = 2000;
for my $c (@codecs)
{
	SdpKafka::kcat_produce(bootstrap => $boot, topic => "c_$c",
		properties => { 'compression.codec' => $c, 'linger.ms' => 50, 'batch.num.messages' => 500 },
		messages => [ map { [ "k$_", qq({"seq": $_, "word": "w$_ repeated w$_ repeated w$_"}), undef ] } 1 .. $n ]);
}

for my $c (@codecs)
{
	my $codecs = { %{ $broker->batch_codecs("c_$c", 0) } };
	my %more = %{ $broker->batch_codecs("c_$c", 1) };
	$codecs->{$_} += $more{$_} for keys %more;
	is(join(',', sort keys %$codecs), $c, "c_$c: every record batch the broker stored is $c-compressed");
	ok(SdpTest::wait_consumed($node, "f_$c", $n), "f_$c read $n messages");
	is(SdpTest::query($node, "SELECT count(*) || ' ' || count(DISTINCT seq) || ' ' || min(seq) || ' ' || max(seq)
	     || ' ' || count(*) FILTER (WHERE word = 'w' || seq || ' repeated w' || seq || ' repeated w' || seq)
	     FROM received WHERE codec = '$c'"),
		"$n $n 1 $n $n", "$c: each message once, no gap, every value intact");
	is(SdpTest::query($node, "SELECT count(*) FROM (SELECT kafka_partition, kafka_offset FROM received WHERE codec = '$c'
	     GROUP BY 1, 2 HAVING count(*) > 1) d"), '0', "$c: no offset twice");
}
is(SdpTest::query($node, 'SELECT count(*) FROM sdp.dead_letters'), '0', 'nothing dead-lettered');

done_testing();
