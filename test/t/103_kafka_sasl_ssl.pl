# SASL_SSL with SCRAM-SHA-512 and SSL, against Apache Kafka (issue 27): a
# flow of a role that is not a superuser reads over SASL_SSL (the CA given
# by content, ssl.ca.pem) and writes to a sink over SASL_SSL, exactly the
# messages sent; a wrong password and a broker certificate signed by a CA the
# client does not trust each give the flow a state and a reason within
# seconds, and nothing is read; the password is masked in the catalogs
# every role reads (the owner's included), and in the flows' errors.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use JSON::PP ();
use SdpKafka;
use SdpTest;
use Test::More;
use Time::HiRes qw(time);

SdpKafka::needs_apache('the broker authenticates with SCRAM over TLS');

my $broker = SdpKafka::start_broker(topics => { 'secure-in' => 2, 'secure-out' => 2 });
my ($plain, $sasl, $ssl, $sasl_plain) = ($broker->bootstrap, $broker->sasl_ssl_bootstrap, $broker->ssl_bootstrap,
	$broker->sasl_plaintext_bootstrap);
my $ca = PostgreSQL::Test::Utils::slurp_file($broker->ca_file);
my $other_ca = PostgreSQL::Test::Utils::slurp_file($broker->other_ca_file);
my ($user, $password) = ($broker->user, $broker->password);
my $json = JSON::PP->new->canonical;
my $node = SdpTest::new_node('kafka_sasl_ssl');

sub props
{
	my (%extra) = @_;
	my $p = $json->encode({ 'security.protocol' => 'SASL_SSL', 'sasl.mechanisms' => 'SCRAM-SHA-512',
		'sasl.username' => $user, 'sasl.password' => $password, 'ssl.ca.pem' => $ca, %extra });
	$p =~ s/'/''/g;
	return $p;
}

# the seconds until the query says true, or undef after $limit seconds
sub seconds_until
{
	my ($sql, $limit) = @_;
	my $t0 = time;
	while (time - $t0 < $limit)
	{
		return time - $t0 if SdpTest::query($node, $sql) eq 't';
		Time::HiRes::sleep(0.2);
	}
	return undef;
}

SdpTest::query($node, <<"SQL");
CREATE ROLE carol LOGIN;
CREATE ROLE dave LOGIN;
CREATE TABLE secured (seq int, kafka_partition int, kafka_offset bigint);
GRANT INSERT, SELECT ON secured TO carol;
SET ROLE carol;
SELECT sdp_create_source('sec_in', '$sasl', 'secure-in', '@{[ props() ]}');
SELECT sdp_create_sink('sec_out', '$sasl', 'secure-out', '@{[ props() ]}');
SELECT sdp_create_flow('sec_flow', 'sec_in', 'secured', 'seq int', options => '{"mode": "append"}');
SELECT sdp_create_flow('sec_sink_flow', 'sec_in', NULL, 'seq int', 'SELECT seq FROM input', sink => 'sec_out');
RESET ROLE;
SQL
my @msgs = map { [ "k$_", qq({"seq": $_}), undef ] } 1 .. 500;
SdpKafka::kcat_produce(bootstrap => $plain, topic => 'secure-in', messages => \@msgs);
ok(SdpTest::wait_consumed($node, 'sec_flow', 500), 'over SASL_SSL (SCRAM-SHA-512): the flow read the 500');
is(SdpTest::query($node, 'SELECT count(*) || \' \' || count(DISTINCT seq) || \' \' || min(seq) || \' \' || max(seq) FROM secured'),
	'500 500 1 500', 'each once');
ok(SdpTest::wait_consumed($node, 'sec_sink_flow', 500), 'the sink flow read them');
ok($node->poll_query_until('postgres', "SELECT pending = 0 FROM sdp.sink_relays WHERE flow = 'sec_sink_flow'"),
	'and its relay produced them over SASL_SSL');
my @out = SdpKafka::kcat_consume(bootstrap => $plain, topic => 'secure-out');
is(join(',', sort { $a <=> $b } map { $json->decode($_->{payload})->{seq} } @out), join(',', 1 .. 500),
	'a read_committed consumer sees each once in the sink topic');

# a wrong password: the state and the reason within seconds
SdpTest::query($node, "SET ROLE carol; SELECT sdp_create_source('bad_pw', '$sasl', 'secure-in', '@{[ props('sasl.password' => 'not-it') ]}');
  SELECT sdp_create_flow('bad_pw_flow', 'bad_pw', 'secured', 'seq int', options => '{\"mode\": \"append\"}')");
my $took = seconds_until(q{SELECT state = 'retrying' AND last_error ~* 'authentication' FROM sdp.flow_status WHERE flow = 'bad_pw_flow'}, 30);
ok(defined $took, sprintf('a wrong password: retrying, with the reason, within %.1f s (at most 30)', $took // 30));
note 'reason: ' . SdpTest::query($node, q{SELECT last_error FROM sdp.flow_status WHERE flow = 'bad_pw_flow'});
is(SdpTest::query($node, q{SELECT messages_read FROM sdp.flow_status WHERE flow = 'bad_pw_flow'}), '0', 'nothing read');

# the same over SASL_PLAINTEXT (no TLS): a wrong password is an authentication failure there too
# (librdkafka said only "1/1 brokers are down" once the broker had closed the connection)
sub plain_props
{
	my ($pw) = @_;
	my $p = $json->encode({ 'security.protocol' => 'SASL_PLAINTEXT', 'sasl.mechanisms' => 'SCRAM-SHA-512',
		'sasl.username' => $user, 'sasl.password' => $pw });
	$p =~ s/'/''/g;
	return $p;
}
SdpTest::query($node, "SET ROLE carol; SELECT sdp_create_source('bad_pw_plain', '$sasl_plain', 'secure-in', '@{[ plain_props('not-it') ]}');
  SELECT sdp_create_flow('bad_pw_plain_flow', 'bad_pw_plain', 'secured', 'seq int', options => '{\"mode\": \"append\"}')");
$took = seconds_until(q{SELECT state = 'retrying' AND last_error ~* 'authentication' FROM sdp.flow_status WHERE flow = 'bad_pw_plain_flow'}, 30);
ok(defined $took, sprintf('SASL_PLAINTEXT, a wrong password: retrying, with the authentication failure, within %.1f s (at most 30)', $took // 30));
note 'reason: ' . SdpTest::query($node, q{SELECT last_error FROM sdp.flow_status WHERE flow = 'bad_pw_plain_flow'});
is(SdpTest::query($node, q{SELECT messages_read FROM sdp.flow_status WHERE flow = 'bad_pw_plain_flow'}), '0', 'nothing read');
# librdkafka says the reason once and then suppresses it a while: retries say "1/1 brokers are down"
# alone; the reason stays in the status all the same
my $first_at = SdpTest::query($node, q{SELECT last_error_at FROM sdp.flow_status WHERE flow = 'bad_pw_plain_flow'});
ok($node->poll_query_until('postgres',
		"SELECT last_error_at > '$first_at'::timestamptz + interval '12 seconds' FROM sdp.flow_status WHERE flow = 'bad_pw_plain_flow'"),
	'SASL_PLAINTEXT, a wrong password: still retrying 12 s later');
like(SdpTest::query($node, q{SELECT last_error FROM sdp.flow_status WHERE flow = 'bad_pw_plain_flow'}), qr/authentication/i,
	'and the status still says it is the authentication that fails');
SdpTest::query($node, "SET ROLE carol; SELECT sdp_create_source('good_plain', '$sasl_plain', 'secure-in', '@{[ plain_props($password) ]}');
  SELECT sdp_create_flow('good_plain_flow', 'good_plain', 'secured', 'seq int', options => '{\"mode\": \"append\"}')");
ok(SdpTest::wait_consumed($node, 'good_plain_flow', 500), 'over SASL_PLAINTEXT with the right password: the flow read the 500');

# a broker certificate the client's CA did not sign
SdpTest::query($node, "SET ROLE carol; SELECT sdp_create_source('bad_ca', '$ssl', 'secure-in', "
	  . "'@{[ do { my $p = $json->encode({ 'security.protocol' => 'SSL', 'ssl.ca.pem' => $other_ca }); $p =~ s/'/''/g; $p } ]}');
  SELECT sdp_create_flow('bad_ca_flow', 'bad_ca', 'secured', 'seq int', options => '{\"mode\": \"append\"}')");
$took = seconds_until(q{SELECT state = 'retrying' AND last_error ~* 'certificate' FROM sdp.flow_status WHERE flow = 'bad_ca_flow'}, 30);
ok(defined $took, sprintf('an untrusted certificate: retrying, with the reason, within %.1f s (at most 30)', $took // 30));
note 'reason: ' . SdpTest::query($node, q{SELECT last_error FROM sdp.flow_status WHERE flow = 'bad_ca_flow'});

# with the right CA over SSL (no SASL), it reads
SdpTest::query($node, "SET ROLE carol; SELECT sdp_create_source('good_ssl', '$ssl', 'secure-in', "
	  . "'@{[ do { my $p = $json->encode({ 'security.protocol' => 'SSL', 'ssl.ca.pem' => $ca }); $p =~ s/'/''/g; $p } ]}');
  SELECT sdp_create_flow('good_ssl_flow', 'good_ssl', 'secured', 'seq int', options => '{\"mode\": \"append\"}')");
ok(SdpTest::wait_consumed($node, 'good_ssl_flow', 500), 'over SSL with the right CA: the flow read the 500');

# the password, masked
for my $who ('dave', 'carol')
{
	my $seen = SdpTest::query($node, "SET ROLE $who; SELECT coalesce(string_agg(options::text, ' '), '') FROM sdp.source_list; "
		  . "SELECT coalesce(string_agg(options::text, ' '), '') FROM sdp.sink_list");
	unlike($seen, qr/\Q$password\E/, "$who does not read the password in sdp.source_list or sdp.sink_list");
}
like(SdpTest::query($node, q{SET ROLE carol; SELECT options->>'sasl.password' FROM sdp.source_list WHERE name = 'sec_in'}),
	qr/^\*{8}$/, 'the owner sees it masked');
my ($ret, $stdout, $stderr) = $node->psql('postgres', 'SET ROLE dave; SELECT options FROM sdp.sources');
isnt($ret, 0, 'dave cannot read sdp.sources');
unlike(SdpTest::query($node, q{SET ROLE dave; SELECT coalesce(string_agg(last_error, ' '), '') FROM sdp.flow_status}), qr/\Q$password\E/,
	'nor in the flows\' errors');

done_testing();
