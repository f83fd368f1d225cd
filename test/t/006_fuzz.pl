# The fuzz targets (fuzz/, scripts/fuzz.sh; issue 46), for a short while
# each: every target runs its checked-in corpus and the regression inputs
# (those that once crashed or pinned the server) once each, then fuzzes for
# SDP_FUZZ_SECONDS (default 20) seconds; each must run inputs (libFuzzer's
# "Done N runs", N > 0) with no crash, sanitizer report, assertion, internal
# error or input past its timeout.  The in-backend targets run in a
# single-user backend of the server under test, their corpus in a UTF8 and
# in a LATIN1 database.
#
# Fuzzing costs minutes, and one pass is enough: it runs on the assert-
# enabled PostgreSQL 15 (scripts/test.sh's cassert pass), and skips on the
# others unless SDP_FUZZ_SECONDS is set.  What a failure found is in
# fuzz/crashes/TARGET/ of the tree the test ran in (its path is printed),
# to be moved into fuzz/corpus/TARGET/ with the fix; libFuzzer's logs are in
# tmp_check/fuzz, kept when the test fails.
use strict;
use warnings FATAL => 'all';
use File::Path qw(rmtree);
use IPC::Run ();
use PostgreSQL::Test::Utils;
use Test::More;

my $version = `pg_config --version`;
my $configure = `pg_config --configure`;
chomp $version;
plan skip_all => "fuzzing runs in one pass, on the assert-enabled PostgreSQL 15 (cassert); "
  . "the server under test is $version" . ($configure =~ /--enable-cassert/ ? '' : ' without assertions')
  . " (set SDP_FUZZ_SECONDS to run it here)"
  unless ($version =~ /^PostgreSQL 15\./ && $configure =~ /'--enable-cassert'/) || defined $ENV{SDP_FUZZ_SECONDS};

my $seconds = $ENV{SDP_FUZZ_SECONDS} // 20;
my @targets = qw(pb_schema registry_answer avro_decode avro_schema json_decode debezium);
# kept when something failed: libFuzzer's logs, the scratch corpora, the build
my $work = "$PostgreSQL::Test::Utils::tmp_check/fuzz";
rmtree($work);
my ($out, $err) = ('', '');
my $ok = IPC::Run::run([ 'bash', 'scripts/fuzz.sh', $seconds ], '<', \undef, '>', \$out, '2>', \$err,
	# an input may take 5 seconds (scripts/fuzz.sh's default is 2): CI's machine runs other tests beside
	init => sub { $ENV{SDP_FUZZ_DIR} = $work; $ENV{PG_CONFIG} = 'pg_config'; $ENV{SDP_FUZZ_TIMEOUT} //= 5; },
	IPC::Run::timeout(@targets * ($seconds + 120) + 600));
note($err);
$ok ? note($out) : diag($out);

for my $t (@targets)
{
	my ($line) = $out =~ /^(fuzz \Q$t\E: .*)$/m;
	ok(defined $line, "$t: ran");
	like($line // '', qr/^fuzz \Q$t\E: replayed [1-9]\d* inputs; ([1-9]\d*) runs in .*: OK$/,
		"$t: its corpus and regressions replayed, then runs with no crash, timeout or sanitizer report");
}
ok($ok, 'scripts/fuzz.sh exits 0') or diag("its work directory: $work; what it found: fuzz/crashes/");
rmtree($work) if $ok && Test::More->builder->is_passing;

done_testing();
