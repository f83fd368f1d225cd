# examples/monitoring/queries.yaml, the postgres_exporter queries file, run
# against the views it reads: every query runs, returns exactly the columns
# its metrics name (postgres_exporter maps columns by name), each metric has
# a usage postgres_exporter knows, and the values are what the views and
# tables hold: a flow that wrote every message, one that dead-lettered the
# malformed ones, and one stopped.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;

# the file, read as postgres_exporter reads it: a map of namespaces, each with
# a query (a literal block) and a list of one-key maps {column: {usage, description}}
my %ns;
my @order;
{
	open(my $fh, '<', 'examples/monitoring/queries.yaml') or die "queries.yaml: $!";
	my ($cur, $in_query, $col);
	while (my $line = <$fh>)
	{
		next if $line =~ /^\s*#/ || $line =~ /^\s*$/;
		if ($line =~ /^([a-z_]+):\s*$/)
		{
			$cur = $1;
			push @order, $cur;
			$ns{$cur} = { query => '', metrics => [] };
			$in_query = 0;
		}
		elsif ($line =~ /^  query: \|\s*$/) { $in_query = 1; }
		elsif ($in_query && $line =~ /^    (.*)$/) { $ns{$cur}{query} .= "$1\n"; }
		elsif ($line =~ /^  metrics:\s*$/) { $in_query = 0; }
		elsif ($line =~ /^    - ([a-z_0-9]+):\s*$/) { $col = { name => $1 }; push @{ $ns{$cur}{metrics} }, $col; }
		elsif ($line =~ /^        (usage|description): "(.*)"\s*$/) { $col->{$1} = $2; }
		else { die "queries.yaml: a line this reader does not know: $line"; }
	}
}
is_deeply(\@order, [qw(sdp_flow sdp_flow_restarts sdp_flow_latency sdp_dead_letters)], 'four namespaces');

my $broker = SdpKafka::start_broker(topics => { 'raw-flights' => 2 });
my $node = SdpTest::new_node('monitoring');
SdpTest::create_source($node, 'flights', $broker, 'raw-flights');
SdpTest::query($node, <<'SQL');
CREATE TABLE good (seq bigint, icao24 text);
CREATE TABLE strict_rows (seq bigint, lat float8, baro_alt float8);
CREATE TABLE idle (seq bigint);
SELECT sdp_create_flow('good_flow', 'flights', 'good', 'seq bigint, icao24 text');
SELECT sdp_create_flow('strict_flow', 'flights', 'strict_rows', 'seq bigint, lat float8, baro_alt float8');
SELECT sdp_create_flow('idle_flow', 'flights', 'idle', 'seq bigint');
SELECT sdp_stop_flow('idle_flow');
SQL
my $report = SdpKafka::run_flightsim(bootstrap => $broker->bootstrap, topic => 'raw-flights',
	args => [ '--count', 2000, '--rate', 0, '--seed', 59, '--malformed', '0.05', '--malformed-kinds', 'type' ]);
is($report->{malformed}, 100, '100 of 2,000 messages malformed (a wrong type)');
ok(SdpTest::wait_consumed($node, 'good_flow', 2000), 'good_flow consumed everything');
ok(SdpTest::wait_consumed($node, 'strict_flow', 2000), 'strict_flow consumed everything');
ok(SdpTest::wait_for($node, "SELECT sdp_flow_progress('good_flow') IS NOT NULL"), 'a progress report exists');

my %usages = map { $_ => 1 } qw(LABEL GAUGE COUNTER);
my %rows;
for my $n (@order)
{
	my ($ret, $out, $err) = $node->psql('postgres', $ns{$n}{query}, extra_params => [ '--csv', '-P', 'tuples_only=off' ]);
	is($ret, 0, "$n: the query runs") or diag($err);
	my ($header, @lines) = split /\n/, $out;
	my @columns = split /,/, $header // '';
	is_deeply([ sort @columns ], [ sort map { $_->{name} } @{ $ns{$n}{metrics} } ],
		"$n: its columns are the metrics it names");
	is(scalar(grep { !$usages{ $_->{usage} // '' } || !($_->{description} // '') } @{ $ns{$n}{metrics} }), 0,
		"$n: every metric has a usage postgres_exporter knows and a description");
	for my $l (@lines)
	{
		my %r;
		@r{@columns} = split /,/, $l;
		push @{ $rows{$n} }, \%r;
	}
}

my %flow = map { $_->{flow} => $_ } @{ $rows{sdp_flow} };
is(join(' ', map {; "$_->{flow}:$_->{up}:$_->{lag}:$_->{messages_read}:$_->{rows_written}:$_->{rows_dead_lettered}:$_->{problem}" }
	@flow{qw(good_flow strict_flow idle_flow)}),
	'good_flow:1:0:2000:2000:0:0 strict_flow:1:0:2000:1900:100:0 idle_flow:0:0:0:0:0:0',
	'sdp_flow: up, lag, messages read, rows written, dead letters, problem, as the flows did');
is(SdpTest::query($node, "SELECT count(*) FROM good") . ' ' . SdpTest::query($node, "SELECT count(*) FROM strict_rows"),
	'2000 1900', 'the tables hold what the metrics say');
is($flow{idle_flow}{state}, 'stopped', 'the stopped flow is labelled stopped');
ok($flow{good_flow}{seconds_since_commit} >= 0 && $flow{idle_flow}{seconds_since_commit} == -1,
	'seconds since the last commit: a number, -1 for a flow that never committed');

my %dl = map {; "$_->{flow}/$_->{stage}" => $_->{stored} } @{ $rows{sdp_dead_letters} };
is_deeply(\%dl, { 'strict_flow/decode' => 100 }, 'sdp_dead_letters: the 100 malformed messages, by flow and stage');

my %lat = map { $_->{flow} => $_ } @{ $rows{sdp_flow_latency} };
ok($lat{good_flow}{e2e_p99_ms} > 0 && $lat{good_flow}{e2e_p99_ms} >= $lat{good_flow}{e2e_p50_ms},
	'sdp_flow_latency: the running flow\'s e2e P99 is a positive number of ms, not below its P50');
is($lat{idle_flow}{e2e_p99_ms}, '0', 'and 0 for the stopped flow (no report)');
my %rs = map { $_->{flow} => $_ } @{ $rows{sdp_flow_restarts} };
is(join(' ', map {; "$rs{$_}{restarts}:$rs{$_}{rows_late}" } qw(good_flow strict_flow idle_flow)), '0:0 0:0 0:0',
	'sdp_flow_restarts: no restart, no late row');

done_testing();
