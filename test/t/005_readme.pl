# README.md's Installation, Quick start and task sections run as a reader
# pastes them, the way doctests run: every ```sh block in bash from the
# repository's root, every ```sql block in psql as a superuser in the
# database sdp.database names, in the order they are written, on one
# server; a block preceded by "<!-- doctest: skip -->" (installing
# packages, editing postgresql.conf, restarting the server) is not run, and
# ```text, ```ini and ```json blocks are output or settings.  Each block
# must succeed (psql with ON_ERROR_STOP), and at the points a reader would
# look the test checks what the README promises: live rows, a dead letter
# with its offset, a window table with rows, a replay that reads the topic
# again, a flow altered and a source altered, and at the end an uninstall
# that leaves no flow, no worker, no broker and no file behind.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use IPC::Run ();
use SdpTest;
use Test::More;

my $dir = '/tmp/sdp_quickstart';

# the blocks, in order, each with the section it is in
my @blocks;
{
	open(my $fh, '<', 'README.md') or die "README.md: $!";
	my ($section, $skip, $lang, $body, $prev) = ('', 0, undef, undef, '');
	while (my $line = <$fh>)
	{
		if (defined $lang)
		{
			if ($line =~ /^```\s*$/)
			{
				push @blocks, { section => $section, lang => $lang, body => $body, skip => $skip };
				($lang, $body, $skip) = (undef, undef, 0);
			}
			else { $body .= $line; }
			next;
		}
		if ($line =~ /^## (.*?)\s*$/) { $section = $1; }
		elsif ($line =~ /^```(\w*)\s*$/)
		{
			$lang = $1;
			$body = '';
			$skip = $prev =~ /^<!-- doctest: skip -->\s*$/ ? 1 : 0;
		}
		$prev = $line if $line =~ /\S/;
	}
}
# from Installation up to the SQL reference
my ($first) = grep { $blocks[$_]{section} eq 'Installation' } 0 .. $#blocks;
my ($last) = grep { $blocks[$_]{section} eq 'SQL reference' } 0 .. $#blocks;
ok(defined $first && defined $last, 'README has Installation, the tasks and a SQL reference, in that order');
my @run = grep { !$_->{skip} && ($_->{lang} eq 'sh' || $_->{lang} eq 'sql') } @blocks[ $first .. $last - 1 ];
my %sections = map { $_->{section} => 1 } @run;
for my $s ('Installation', 'Quick start', 'Declare a flow', 'Write your own stateful processor', 'See status and lag', 'Dead letters',
	'Change a flow or a source', 'Replay', 'Stop and start', 'Scale', 'Monitor latency', 'Upgrade',
	'Back up and restore', 'Uninstall')
{
	ok($sections{$s}, "section \"$s\" has blocks that run");
}
is(scalar(grep { $_->{lang} !~ /^(sh|sql|text|ini|json)$/ } @blocks[ $first .. $last - 1 ]), 0,
	'every block there is sh, sql, or output (text, ini, json)');

my $node = SdpTest::new_node('readme');
my %env = (%ENV, PGHOST => $node->host, PGPORT => $node->port, PGUSER => 'postgres', PGDATABASE => 'postgres');
SdpTest::query($node, "DO \$\$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'postgres') THEN CREATE ROLE postgres SUPERUSER LOGIN; END IF; END \$\$");

# a reader's leftovers from an earlier run would change what happens
system("kill \$(cat $dir/*.pid 2>/dev/null) 2>/dev/null; rm -rf $dir");

sub run_block
{
	my ($b) = @_;
	my ($out, $err) = ('', '');
	my @cmd = $b->{lang} eq 'sh'
	  ? ('bash', '-e', '-o', 'pipefail', '-c', $b->{body})
	  : ('psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-f', '-');
	my $ok = IPC::Run::run(\@cmd, '<', \($b->{lang} eq 'sh' ? '' : $b->{body}), '>', \$out, '2>', \$err,
		init => sub { %ENV = %env; }, IPC::Run::timeout(180));
	return ($ok, $out, $err);
}

# what a reader would look at, after the block that makes it true
my %after = (
	"Quick start:4" => [ 'live rows: positions has rows, and they keep coming',
		"SELECT count(*) > 0 AND max(poller_ts) > now() - interval '30 seconds' FROM positions" ],
	"Quick start:4 " => [ 'a dead letter, with its partition and offset, for a truncated message',
		"SELECT count(*) > 0 AND bool_and(kafka_offset IS NOT NULL AND stage = 'decode') FROM sdp.dead_letters WHERE flow = 'positions_flow'" ],
	"Quick start:6" => [ 'a window table with rows',
		"SELECT count(*) > 0 FROM payment_windows WHERE definition = 'payments_1m'" ],
	"Quick start:7" => [ 'a dead letter met again on the replay is kept once',
		"SELECT count(*) = count(DISTINCT (kafka_partition, kafka_offset)) FROM sdp.dead_letters" ],
	"Change a flow or a source:1" => [ 'the altered flow has its new schema',
		"SELECT schema LIKE '%baro_alt%' FROM sdp.flows WHERE name = 'emergencies_flow'" ],
	"Change a flow or a source:2" => [ 'the altered source holds the new option',
		"SELECT options->>'fetch.wait.max.ms' = '1' FROM sdp.sources WHERE name = 'payments'" ],
	"Scale:1" => [ 'positions_flow runs in 2 workers', "SELECT count(*) = 2 FROM sdp.flow_workers WHERE flow = 'positions_flow'" ],
	"Write your own stateful processor:1" => [ 'the PL/pgSQL ZoneCounter writes zone counts, and its state shows its zones\' aircraft',
		"SELECT (SELECT count(*) > 0 FROM zone_counts) AND (SELECT count(*) > 0 FROM sdp_flow_state('zone_counter_flow') WHERE state = 'aircraft')" ],
);
my %n;
my $failed = 0;
my $read_before;
for my $b (@run)
{
	my $k = "$b->{section}:" . ++$n{ $b->{section} };
	# the replay: what the flow had committed before it, to be read again
	$read_before = SdpTest::query($node, "SELECT sum((p->>'committed_offset')::bigint) FROM sdp.flow_status, jsonb_array_elements(partitions) p WHERE flow = 'positions_flow'")
	  if $k eq 'Quick start:7';
	my ($ok, $out, $err) = run_block($b);
	ok($ok, "README, $k ($b->{lang}) runs") or do
	{
		diag("block:\n$b->{body}\nstdout:\n$out\nstderr:\n$err");
		$failed++;
	};
	last if $failed;
	for my $c ($k, "$k ")
	{
		my $a = $after{$c} or next;
		ok(SdpTest::query($node, $a->[1]) eq 't', "README, $k: $a->[0]");
	}
	ok($node->poll_query_until('postgres', "SELECT messages_read >= $read_before FROM sdp.flow_status WHERE flow = 'positions_flow'"),
		"README, $k: the replay read the $read_before messages committed before it again")
	  if $k eq 'Quick start:7';
}

# what the uninstall leaves
is(SdpTest::query($node, "SELECT count(*) FROM pg_extension WHERE extname = 'sdp_ext'"), '0', 'uninstalled: no extension');
ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'sdp flow'"),
	'no flow worker left');
is(SdpTest::query($node, "SELECT count(*) FROM pg_tables WHERE tablename IN ('zones', 'positions', 'emergencies', 'payment_windows', 'zone_counts')"),
	'0', 'the quick start\'s tables are gone');
ok(!-e $dir, "$dir is gone");
is(system("pgrep -f 'sdp_broke[r] .*sdp_quickstart' > /dev/null"), 256, 'the broker is stopped');

done_testing();
