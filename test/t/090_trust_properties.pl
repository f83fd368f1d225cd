# The trust boundary of librdkafka properties and broker hosts (issue 26):
# a role with nothing but LOGIN cannot make the server run a program, load a
# library or read a file through a source's or a sink's options; declaring
# loads nothing, even for a superuser, whose worker alone does; a member of
# pg_read_server_files may name a server file, and loses it with the role
# (the worker checks again when it starts); sdp.allowed_hosts bounds the
# brokers a non-superuser's flow reaches, the ones a cluster advertises
# included.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use PostgreSQL::Test::Utils;
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'raw-flights' => 2 });
my $boot = $broker->bootstrap;
my ($port) = $boot =~ /:(\d+)$/;
my $node = SdpTest::new_node('trust_props');
my $dir = PostgreSQL::Test::Utils::tempdir;
chmod 0777, $dir;

# A library whose constructor leaves a marker: it shows whether, and in
# which process, a property made the server load it.
my $lib = "$dir/marker.so";
my $marker = "$dir/loaded";
my $c = "$dir/marker.c";
open(my $fh, '>', $c) or die;
print $fh <<"C";
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void mark(void)
{
	FILE *f = fopen("$marker", "a");
	if (f) { fprintf(f, "%d\\n", (int) getpid()); fclose(f); }
}
C
close $fh;
system('cc', '-shared', '-fPIC', '-o', $lib, $c) == 0 or die "could not build $lib";
my $kinit_marker = "$dir/kinit-ran";

SdpTest::query($node, <<"SQL");
CREATE ROLE mallory LOGIN;
CREATE ROLE reader LOGIN;
GRANT pg_read_server_files TO reader;
CREATE TABLE ev (seq bigint, kafka_partition int, kafka_offset bigint);
GRANT INSERT ON ev TO mallory, reader;
SQL

# --- a LOGIN-only role ------------------------------------------------------
my @code = (
	[ 'sasl.kerberos.kinit.cmd (a program)',
		qq{{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "GSSAPI", "sasl.kerberos.kinit.cmd": "/bin/sh -c 'touch $kinit_marker'"}} ],
	[ 'plugin.library.paths (code)', qq{{"plugin.library.paths": "$lib"}} ],
	[ 'ssl.engine.location (code)', qq{{"ssl.engine.location": "$lib"}} ],
	[ 'ssl.ca.location (a server file)', q{{"ssl.ca.location": "/etc/passwd"}} ]);
for my $case (@code)
{
	my ($what, $options) = @$case;
	for my $kind ('source', 'sink')
	{
		my ($ret, $out, $err) = $node->psql('postgres',
			"SET ROLE mallory; SELECT sdp_create_$kind('m_$kind', '$boot', 'raw-flights', \$j\$$options\$j\$)",
			extra_params => [ '-v', 'VERBOSITY=verbose' ]);
		like($err, qr/ERROR:  42501: /, "LOGIN only: $what refused for a $kind (42501)");
	}
	# were it declared, a flow on it would have its worker run the property
	$node->psql('postgres', "SET ROLE mallory; SELECT sdp_create_flow('m_flow', 'm_source', 'ev', 'seq bigint', options => '{\"mode\": \"append\"}')");
	if ($options =~ /kinit/)
	{
		# (the old hole: the worker ran the command within a second)
		sleep 3;
		ok(!-e $kinit_marker, 'the kinit command never ran');
	}
	$node->psql('postgres', "SELECT sdp_drop_flow('m_flow'); SELECT sdp_drop_source('m_source'); SELECT sdp_drop_sink('m_sink')");
}
ok(!-e $marker, 'nothing was loaded, in the declaring backend or a worker');

# --- a superuser may set anything; declaring loads nothing ------------------
SdpTest::query($node,
	"SELECT sdp_create_source('plugged', '$boot', 'raw-flights', '{\"plugin.library.paths\": \"$lib\"}')");
ok(!-e $marker, 'a superuser declares a plugin: the declaring backend loads nothing');
SdpTest::query($node, "SELECT sdp_create_flow('plugged_flow', 'plugged', 'ev', 'seq bigint', options => '{\"mode\": \"append\"}')");
my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
sleep 0.2 while !-e $marker && time < $deadline;
ok(-e $marker, "the superuser's worker loads it (its constructor ran)");
my @pids = split /\n/, PostgreSQL::Test::Utils::slurp_file($marker);
my $backend = SdpTest::query($node, 'SELECT pg_backend_pid()');
ok(!grep({ $_ == $backend } @pids), 'in a worker, never in a session');
SdpTest::query($node, "SELECT sdp_drop_flow('plugged_flow'); SELECT sdp_drop_source('plugged')");

# --- pg_read_server_files may name a file; losing the role stops the flow ---
SdpTest::query($node, <<"SQL");
SET ROLE reader;
SELECT sdp_create_source('ca_src', '$boot', 'raw-flights', '@{[ SdpTest::source_options(q({"ssl.ca.location": "/etc/ssl/certs/ca-certificates.crt"})) ]}');
SELECT sdp_create_flow('ca_flow', 'ca_src', 'ev', 'seq bigint', options => '{"mode": "append"}');
RESET ROLE;
SQL
SdpKafka::run_flightsim(bootstrap => $boot, topic => 'raw-flights', args => [ '--count', 200, '--rate', 0 ]);
ok(SdpTest::wait_consumed($node, 'ca_flow', 200), 'a member of pg_read_server_files runs a flow whose source names a CA file');
SdpTest::query($node, "REVOKE pg_read_server_files FROM reader; SELECT sdp_stop_flow('ca_flow')");
ok(SdpTest::wait_for($node, "SELECT state = 'stopped' FROM sdp.flow_status WHERE flow = 'ca_flow'"), 'stopped');
SdpTest::query($node, "SELECT sdp_start_flow('ca_flow')");
ok($node->poll_query_until('postgres',
		"SELECT last_error LIKE '%ssl.ca.location%names a file on the database server%' FROM sdp.flow_status WHERE flow = 'ca_flow'"),
	'once the role is revoked, its worker refuses to start, and says why');
isnt(SdpTest::query($node, "SELECT state FROM sdp.flow_status WHERE flow = 'ca_flow'"), 'running', 'the flow is not running');
SdpKafka::run_flightsim(bootstrap => $boot, topic => 'raw-flights', args => [ '--count', 100, '--rate', 0, '--seq-start', 200 ]);
sleep 1;
is(SdpTest::query($node, 'SELECT count(*) FROM ev'), '200', 'and reads nothing more');
SdpTest::query($node, "GRANT pg_read_server_files TO reader");
ok(SdpTest::wait_consumed($node, 'ca_flow', 300), 'granted again, it resumes where it stood');
is(SdpTest::query($node, 'SELECT count(*), count(DISTINCT seq) FROM ev'), '300|300', 'every message once');
SdpTest::query($node, "SELECT sdp_drop_flow('ca_flow')");

# --- sdp.allowed_hosts: the brokers a cluster advertises too ----------------
# The embedded broker advertises 127.0.0.1:PORT; mallory may name only
# localhost, so its flow bootstraps through localhost, and the brokers the
# metadata names are refused by the resolver of its worker's clients.
SdpTest::query($node, "ALTER ROLE mallory SET sdp.allowed_hosts = 'localhost'");
my ($ret, $out, $err) = $node->psql('postgres',
	"SET sdp.allowed_hosts = 'localhost'; SET ROLE mallory; SELECT sdp_create_source('far', '$boot', 'raw-flights')");
like($err, qr/names host "127.0.0.1" \(port $port\), which sdp.allowed_hosts does not list/,
	'allowed_hosts: a host it does not list is refused at declaration');
my $offset = -s $node->logfile;
SdpTest::query($node, <<"SQL");
CREATE TABLE ev_m (seq bigint, kafka_partition int, kafka_offset bigint);
GRANT INSERT ON ev_m TO mallory;
SET sdp.allowed_hosts = 'localhost';
SET ROLE mallory;
SELECT sdp_create_source('near', 'localhost:$port', 'raw-flights', '@{[ SdpTest::source_options() ]}');
SELECT sdp_create_flow('near_flow', 'near', 'ev_m', 'seq bigint', options => '{"mode": "append"}');
RESET ROLE;
SQL
$node->wait_for_log(qr/sdp flow "near_flow": broker 127\.0\.0\.1:$port is not in sdp\.allowed_hosts/, $offset);
ok(1, "allowed_hosts: the advertised broker 127.0.0.1:$port is refused by the worker's resolver, and logged");
ok($node->poll_query_until('postgres',
		"SELECT broker_error LIKE '%127.0.0.1:$port is not in sdp.allowed_hosts%' FROM sdp.flow_status WHERE flow = 'near_flow'"),
	'allowed_hosts: and shown in the status');
is(SdpTest::query($node, 'SELECT count(*) FROM ev_m'), '0', 'allowed_hosts: nothing was read from it');
# a superuser's flow on the same bootstrap reaches the cluster
SdpTest::query($node, <<"SQL");
CREATE TABLE ev_s (seq bigint, kafka_partition int, kafka_offset bigint);
SELECT sdp_create_source('near_su', 'localhost:$port', 'raw-flights', '@{[ SdpTest::source_options() ]}');
SELECT sdp_create_flow('near_su_flow', 'near_su', 'ev_s', 'seq bigint', options => '{"mode": "append"}');
SQL
ok(SdpTest::wait_for($node, 'SELECT count(*) = 300 FROM ev_s'), "a superuser's flow reaches the advertised broker");
is(SdpTest::query($node, 'SELECT count(*) FROM ev_m'), '0', 'while the restricted one still reads nothing');
# the list opened to the advertised host: the restricted flow reads too
SdpTest::query($node, "ALTER ROLE mallory SET sdp.allowed_hosts = 'localhost, 127.0.0.1'; SELECT sdp_stop_flow('near_flow')");
ok(SdpTest::wait_for($node, "SELECT state = 'stopped' FROM sdp.flow_status WHERE flow = 'near_flow'"), 'restricted flow stopped');
SdpTest::query($node, "SELECT sdp_start_flow('near_flow')");
ok(SdpTest::wait_for($node, 'SELECT count(*) = 300 FROM ev_m'), 'with the advertised host listed, it reads everything');

done_testing();
