# A hostile schema registry (issue 46, items 1, 2 and 5).  A flow owner names
# the registry, so whatever it answers reaches the worker.  Served here by a
# small HTTP server (SdpHostileRegistry), for a Protobuf source:
#   id 1  a .proto text that opens a string never closed on its line, then
#         100,000 nested messages (1.4 MB): libprotobuf's tokenizer ends the
#         string at the line's end and its parser recursed through the
#         nesting until the stack overflowed (the server crashed, again at
#         every restart);
#   id 2  the same in 19,000 nested messages (under the size bound): refused
#         by the check through libprotobuf's own tokenizer;
#   id 3  {'k"': [[[...100,000...]]]}: not JSON, but libprotobuf's JSON parser
#         took it, for minutes at full CPU, and no stop reached the worker;
#   id 6  valid JSON nested 100,000 deep;
#   id 4  an answer that comes only after 100 s: the flow retries, and
#         sdp_skip_message must reach the message whose schema it waits for;
#   id 5  a real schema, for the messages that must get through meanwhile.
# Every hostile message is a dead letter with its reason, every good message
# is in the target once, the server log has no "terminated by signal", and
# the flow stops when asked.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use JSON::PP ();
use PostgreSQL::Test::Utils;
use SdpHostileRegistry;
use SdpKafka;
use SdpTest;
use Test::More;
use Time::HiRes qw(time);
use experimental qw(signatures);

my $broker = SdpKafka::start_broker(topics => { 'hostile' => 1 });
my $boot = $broker->bootstrap;

sub answer { return JSON::PP->new->canonical->encode({ schemaType => 'PROTOBUF', schema => $_[0] }) }

my $unclosed = qq{syntax = "proto3";\noption java_package = "never closed\n};
my $registry = SdpHostileRegistry->start(answers => {
	'/schemas/ids/1' => { body => answer($unclosed . ("message A {\n" x 100_000) . ("}\n" x 100_000)) },
	'/schemas/ids/2' => { body => answer($unclosed . ("message A{\n" x 19_000) . ("}\n" x 19_000)) },
	'/schemas/ids/3' => { body => q({'k"': ) . ('[' x 100_000) . (']' x 100_000) . '}' },
	'/schemas/ids/4' => { body => answer(qq{syntax = "proto3";\nmessage M { int64 seq = 1; }\n}), delay => 100 },
	'/schemas/ids/5' => { body => answer(qq{syntax = "proto3";\nmessage M { int64 seq = 1; }\n}) },
	'/schemas/ids/6' => { body => '{"schema": "x", "a": ' . ('[' x 100_000) . (']' x 100_000) . '}' },
});

my $node = SdpTest::new_node('hostile');
my $log_start = -s $node->logfile;
my $url = $registry->url;
SdpTest::query($node, <<"SQL");
CREATE ROLE mallory LOGIN;
CREATE TABLE got (seq bigint, kafka_offset bigint);
ALTER TABLE got OWNER TO mallory;
SET ROLE mallory;
SELECT sdp_create_source('hostile', '$boot', 'hostile',
  '@{[ SdpTest::source_options(qq({"format": "protobuf", "schema.registry.url": "$url"})) ]}');
SELECT sdp_create_flow('hostile_flow', 'hostile', 'got', 'seq bigint', options => '{"mode": "append"}');
RESET ROLE;
SQL

# Confluent's wire format: magic 0, the schema id (4 bytes), message indexes [0], the body
sub message ($id, $seq)
{
	return pack('CNC', 0, $id, 0) . (defined $seq ? pack('CC', 0x08, $seq) : '');
}
my @stream = ([ 5, 1 ], [ 1, 1 ], [ 5, 2 ], [ 2, 1 ], [ 5, 3 ], [ 3, 1 ], [ 5, 4 ], [ 6, 1 ], [ 5, 5 ]);
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'hostile',
	messages => [ map { [ "k$_", message(@{ $stream[$_] }), 0 ] } 0 .. $#stream ]);

ok(SdpTest::wait_for($node, 'SELECT count(*) = 5 FROM got'), 'the five good messages are written, past the hostile ones');
is(SdpTest::query($node, 'SELECT string_agg(seq || \'@\' || kafka_offset, \',\' ORDER BY kafka_offset) FROM got'),
	'1@0,2@2,3@4,4@6,5@8', 'each once, at its offset');
my %dead = map { split /\|/, $_, 2 } split /\n/, SdpTest::query($node,
	"SELECT kafka_offset || '|' || stage || ': ' || error FROM sdp.dead_letters WHERE flow = 'hostile_flow' ORDER BY kafka_offset");
is(scalar(keys %dead), 4, 'four dead letters');
like($dead{1}, qr/^decode: .*more than the 262144 read/, 'id 1 (a string open across lines, 100,000 nested messages): refused by its size');
like($dead{3}, qr/^decode: .*String literals cannot cross line boundaries/,
	'id 2 (the same in 19,000 nested messages): refused by libprotobuf\'s tokenizer, before its parser');
like($dead{5}, qr/^decode: .*the answer is not JSON/, 'id 3 (single-quoted, 100,000 nested arrays): not JSON');
like($dead{7}, qr/^decode: .*nests arrays or objects more than 16 deep/, 'id 6 (valid JSON nested 100,000 deep): refused');
is(SdpTest::query($node, "SELECT state FROM sdp.flow_status WHERE flow = 'hostile_flow'"), 'running', 'the flow runs on');

# An answer that never comes in time: the flow retries, and says why; a skip reaches the message.
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'hostile', messages => [ [ 'k9', message(4, 9), 0 ], [ 'k10', message(5, 6), 0 ] ]);
ok(SdpTest::wait_for($node, "SELECT state = 'retrying' AND last_error ~ 'schema 4' FROM sdp.flow_status WHERE flow = 'hostile_flow'"),
	'a registry that does not answer in time: the flow is retrying, with the reason');
note(SdpTest::query($node, "SELECT last_error FROM sdp.flow_status WHERE flow = 'hostile_flow'"));
SdpTest::query($node, "SET ROLE mallory; SELECT sdp_skip_message('hostile_flow', 0, 9)");
ok(SdpTest::wait_for($node, 'SELECT count(*) = 6 FROM got'), 'skipped: the message after it is written');
is(SdpTest::query($node, "SELECT stage FROM sdp.dead_letters WHERE flow = 'hostile_flow' AND kafka_offset = 9"), 'skipped',
	'the message whose schema never came: a dead letter, stage skipped');
is(SdpTest::query($node, "SELECT state FROM sdp.flow_status WHERE flow = 'hostile_flow'"), 'running', 'running again');

# the flow stops when asked
my $t0 = time;
SdpTest::query($node, "SET ROLE mallory; SELECT sdp_stop_flow('hostile_flow')");
ok(SdpTest::wait_for($node, "SELECT state = 'stopped' FROM sdp.flow_status WHERE flow = 'hostile_flow'"), 'sdp_stop_flow: stopped');
note(sprintf('stopped %.2f s after sdp_stop_flow', time - $t0));

my $log = slurp_file($node->logfile, $log_start);
unlike($log, qr/terminated by signal/, 'no process of the server was terminated by a signal');
unlike($log, qr/server process .* exited with exit code|all server processes terminated/, 'no crash recovery');

$registry->stop;
done_testing();
