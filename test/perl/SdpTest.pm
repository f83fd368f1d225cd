=pod

=head1 NAME

SdpTest - PostgreSQL-side helpers for sdp_ext TAP tests

=head1 SYNOPSIS

  use lib 'test/perl';
  use SdpKafka;
  use SdpTest;

  my $broker = SdpKafka::start_broker(topics => { 'raw-flights' => 8 });
  my $node = SdpTest::new_node('main');              # sdp_ext preloaded, extension created
  SdpTest::create_source($node, 'flights', $broker, 'raw-flights');
  $node->poll_query_until('postgres', "SELECT count(*) = 100 FROM t");
  SdpTest::wait_consumed($node, 'flow', 100);         # its offsets reached 100 messages
  my $offset = -s $node->logfile;                     # the log's size before an action
  SdpTest::crash_and_restart($node);                  # SIGKILL the postmaster, start again
  $node->wait_for_log(qr/restored the state/, $offset);  # a line logged after it

=head1 DESCRIPTION

Nodes are PostgreSQL::Test::Cluster instances with sdp_ext in
shared_preload_libraries and sdp.database = postgres, where the extension is
created.  Flows commit with synchronous_commit = off by default, so a crash
really loses the tail of their commits, which is what exactly-once must
survive.

Waits use PostgreSQL::Test::Cluster's own: C<< $node->poll_query_until >>
for a query to return true, and C<< $node->wait_for_log(qr/.../, $offset) >>
with the log's size (C<< -s $node->logfile >>) taken before the action, so a
line logged before it cannot satisfy the wait.  Both time out after
C<$PostgreSQL::Test::Utils::timeout_default> seconds.  The server logs at the
default C<log_min_messages> (C<warning>): LOG lines, and the ERRORs of flow
workers (which rank below LOG for the server log).

=cut

package SdpTest;

use strict;
use warnings FATAL => 'all';
use feature 'signatures';
no warnings 'experimental::signatures';

use Carp;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SdpKafka;
use Test::More;
use Time::HiRes qw(usleep);

=pod

=over

=item new_node($name, %conf)

Initialises and starts a node with sdp_ext preloaded; extra settings from
%conf go to postgresql.conf.  Creates the extension.  C<< install_path =>
$dir >> in %conf is not a setting: the node runs the PostgreSQL installed in
$dir (PostgreSQL::Test::Cluster's install_path) instead of the one in PATH.
Nor is C<< allows_streaming => 1 >> (or C<'logical'>): the node is set up
to have streaming standbys (PostgreSQL::Test::Cluster's init option).

=cut

sub new_node ($name, %conf)
{
	my $install_path = delete $conf{install_path};
	my $streaming = delete $conf{allows_streaming};
	my $node = PostgreSQL::Test::Cluster->new($name,
		defined $install_path ? (install_path => $install_path) : ());
	$node->init($streaming ? (allows_streaming => $streaming) : ());
	my $extra = join '', map { "$_ = $conf{$_}\n" } sort keys %conf;
	$node->append_conf('postgresql.conf', <<"EOC" . $extra);
shared_preload_libraries = 'sdp_ext'
sdp.database = 'postgres'
sdp.launcher_naptime = '200ms'
max_worker_processes = 32
EOC
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION sdp_ext');
	return $node;
}

=item create_source($node, $name, $broker, $topic, $options_json)

Declares the source with source_options($options_json).

=cut

sub create_source ($node, $name, $broker, $topic, $options = '{}')
{
	my $boot = $broker->bootstrap;
	$options = source_options($options);
	$node->safe_psql('postgres',
		"SELECT sdp_create_source('$name', '$boot', '$topic', '$options')");
}

=item source_options($options_json)

A test source's options: $options_json (a JSON object, '{}' if omitted), and
on the embedded broker "fetch.wait.max.ms" 1 unless it sets that itself.
librdkafka's mock answers a fetch that finds no data only after the fetch's
whole wait, even when data arrives meanwhile, so the extension's default of
100 ms (right for Apache Kafka, which answers as soon as data arrives) would
add up to 100 ms to every step of a test there.  On Apache Kafka (the kafka
pass) the options are left as given and the tests run with the default.

=cut

sub source_options ($options = '{}')
{
	return $options
	  if SdpKafka::kind() ne 'embedded' || $options =~ /"fetch\.wait\.max\.ms"/;
	$options =~ s/^\s*\{\s*//
	  or croak "source options are not a JSON object: $options";
	return '{"fetch.wait.max.ms": "1"' . ($options =~ /^\}/ ? '' : ', ') . $options;
}

=item wait_for($node, $sql)

C<< $node->poll_query_until('postgres', $sql) >>: polls until $sql returns
true; 1, or 0 with a diagnostic after
$PostgreSQL::Test::Utils::timeout_default seconds.

=cut

sub wait_for ($node, $sql)
{
	return $node->poll_query_until('postgres', $sql);
}

=item wait_consumed($node, $flow, $total)

Waits until the flow has committed offsets that add up to $total messages
(the sum over partitions of the next offset, as sdp.flow_status shows it),
i.e. it has consumed everything up to there.  Returns 1, or 0 (with a
diagnostic) after $PostgreSQL::Test::Utils::timeout_default seconds.

=cut

sub consumed_sql ($flow)
{
	return "SELECT coalesce(sum((p->>'committed_offset')::bigint), 0) FROM sdp.flow_status s, "
	  . "jsonb_array_elements(s.partitions) p WHERE s.flow = '$flow'";
}

sub wait_consumed ($node, $flow, $total)
{
	return $node->poll_query_until('postgres',
		"SELECT (" . consumed_sql($flow) . ") >= $total");
}

=item query($node, $sql)

safe_psql on the postgres database.

=cut

sub query ($node, $sql)
{
	return $node->safe_psql('postgres', $sql);
}

=item crash_and_restart($node)

SIGKILLs the postmaster, waits until its children have noticed and exited
(the server cannot start while they hold its shared memory), and starts it
again.

=cut

sub crash_and_restart ($node)
{
	my $pgdata = $node->data_dir;
	my $postmaster = $node->{_pid};
	$node->kill9;

	# Every server process runs in the data directory: wait until none is
	# left, and until the postmaster is reaped (a zombie still counts as
	# running for the lock file check of the next postmaster).
	my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
	while (time < $deadline)
	{
		my @left = grep { (readlink($_) // '') eq $pgdata } glob('/proc/[0-9]*/cwd');
		last if !@left && !-e "/proc/$postmaster";
		usleep(50_000);
	}
	$node->start;
	return 1;
}

=item assert_exactly_once($node, $table, $expected_per_partition)

Asserts that the table's (kafka_partition, kafka_offset) pairs are exactly
0 .. n-1 for every partition, with n from the hashref (partition => count),
and that seq is exactly 0 .. total-1: no duplicate and no gap.

=cut

sub assert_exactly_once ($node, $table, $per_partition, $label)
{
	my $total = 0;
	$total += $_ for values %$per_partition;

	my ($rows, $distinct_pairs, $distinct_seq, $min_seq, $max_seq) = split /\|/,
	  query($node,
		"SELECT count(*), count(DISTINCT (kafka_partition, kafka_offset)), count(DISTINCT seq), "
		  . "coalesce(min(seq), -1), coalesce(max(seq), -1) FROM $table");
	is($rows, $total, "$label: $total rows");
	is($distinct_pairs, $total, "$label: no duplicate (partition, offset)");
	is($distinct_seq, $total, "$label: no duplicate seq");
	is("$min_seq..$max_seq", "0.." . ($total - 1), "$label: seq has no gap");

	my %got = map { split /\|/ } split /\n/,
	  query($node,
		"SELECT kafka_partition, count(*) FROM $table GROUP BY 1 "
		  . "HAVING min(kafka_offset) = 0 AND max(kafka_offset) = count(*) - 1");
	my %want = map { $_ => $per_partition->{$_} } grep { $per_partition->{$_} > 0 } keys %$per_partition;
	is_deeply(\%got, \%want, "$label: every partition's offsets are 0..n-1");
}

=back

=cut

1;
