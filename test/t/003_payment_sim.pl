# 003_payment_sim.pl
#	The payment event simulator (tools/payment_sim), which feeds the feature
#	flows.  It checks what those tests rely on: the exact fields, types and
#	ranges of every payload, no gap and no duplicate in seq, the event clock
#	(disorder within the allowance, the exact late share and how late they
#	are), the status shares and scripted incidents, byte-identical output for
#	a seed on a simulated clock, the wall clock with pacing, a clean stop on
#	SIGTERM, and the refusal of bad options.

use v5.36;

use B ();
use IPC::Run ();
use JSON::PP ();
use Test::More;
use Time::HiRes qw(time sleep);
use Time::Local qw(timegm);

use SdpKafka;

my $test_start = time;
my $json = JSON::PP->new;

my @FIELDS = qw(seq merchant_id country method status amount event_ts);
my %METHODS = map { $_ => 1 } qw(card wallet bank_transfer bnpl);
my %STATUSES = map { $_ => 1 } qw(approved rejected error);

# 2026-01-01T00:00:00Z, where --event-time step:MS starts the clock
my $STEP_CLOCK_START_MS = timegm(0, 0, 0, 1, 0, 2026) * 1000;

# ---------------------------------------------------------------------------
# Running payment_sim (as SdpKafka runs flight_sim)
# ---------------------------------------------------------------------------

sub paymentsim_command (%args)
{
	my $path = SdpKafka::tools_dir() . '/payment_sim';
	die "$path is not an executable; run 'make tools' first\n" unless -x $path;
	return [
		$path, '--bootstrap', $args{bootstrap},
		'--topic', $args{topic}, @{ $args{args} // [] }
	];
}

sub exit_code ($status)
{
	return $status == -1 ? -1 : ($status & 127) ? 128 + ($status & 127) : $status >> 8;
}

# The hashref parsed from payment_sim's final JSON line, plus exit_code and
# stderr; dies without a report, or on a non-zero exit unless allowed.
sub paymentsim_report ($stdout, $stderr, $status, $allow_failure)
{
	my ($last) = grep { /\S/ } reverse split /\n/, $stdout;
	my $report = eval { $json->decode($last // '') };
	my $exit = exit_code($status);
	die "payment_sim failed (status $status) without a report:\n$stderr"
	  unless ref $report eq 'HASH';
	die "payment_sim exited with code $exit:\n$stderr"
	  if $exit != 0 && !$allow_failure;
	$report->{exit_code} = $exit;
	$report->{stderr} = $stderr;
	return $report;
}

# Run to completion: (wait status, stdout, stderr).
sub run_paymentsim_raw (%args)
{
	my ($out, $err) = ('', '');
	my $timeout = $args{timeout} // 60;
	eval {
		IPC::Run::run(paymentsim_command(%args), '<', \undef, '>', \$out,
			'2>', \$err, IPC::Run::timeout($timeout));
		1;
	} or die "payment_sim did not finish within $timeout s: $@\n$err";
	return ($?, $out, $err);
}

sub run_paymentsim (%args)
{
	my ($status, $out, $err) = run_paymentsim_raw(%args);
	return paymentsim_report($out, $err, $status, $args{allow_failure});
}

# Start in the background: ->signal($sig), ->finish(allow_failure => 0).
sub start_paymentsim (%args)
{
	my $self = bless { out => '', err => '' }, 'PaymentSim';
	$self->{harness} = IPC::Run::start(paymentsim_command(%args),
		'<', \undef, '>', \$self->{out}, '2>', \$self->{err},
		IPC::Run::timeout($args{timeout} // 120));
	return $self;
}

package PaymentSim
{
	sub signal ($self, $sig) { return $self->{harness}->signal($sig) }

	sub finish ($self, %opt)
	{
		$self->{harness}->finish;
		return main::paymentsim_report($self->{out}, $self->{err},
			$self->{harness}->full_result(0), $opt{allow_failure});
	}
}

# ---------------------------------------------------------------------------
# Checking payloads
# ---------------------------------------------------------------------------

# True if $v was decoded from a JSON number (not a string).  Call it before
# using $v as a number: that would add numeric flags to a string.
sub is_json_number ($v)
{
	return 0 if !defined $v || ref $v;
	my $flags = B::svref_2object(\$v)->FLAGS;
	return ($flags & (B::SVf_IOK | B::SVf_NOK)) && !($flags & B::SVf_POK);
}

# "2026-11-29T08:26:45.123Z" -> epoch milliseconds, or undef.
sub iso8601_ms ($ts)
{
	return undef unless defined $ts && !ref $ts;
	my ($y, $mo, $d, $h, $mi, $s, $ms) =
	  $ts =~ /^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.(\d{3})Z\z/
	  or return undef;
	return (timegm($s, $mi, $h, $d, $mo - 1, $y) * 1000) + $ms;
}

# Why a decoded payment is not well formed, or undef if it is.
sub payment_problem ($msg, $r)
{
	return 'not an object' unless ref $r eq 'HASH';
	for my $f (@FIELDS)
	{
		return "missing $f" unless exists $r->{$f};
	}
	my @extra = grep { my $f = $_; !grep { $_ eq $f } @FIELDS, 'late' } keys %$r;
	return "unexpected field @extra" if @extra;
	return 'late is not true'
	  if exists $r->{late} && !(JSON::PP::is_bool($r->{late}) && $r->{late});
	for my $f (qw(seq amount))
	{
		return "$f is not a number" unless is_json_number($r->{$f});
	}
	for my $f (qw(merchant_id country method status event_ts))
	{
		return "$f is not a string"
		  if ref $r->{$f} || is_json_number($r->{$f});
	}
	return 'seq is not an integer' unless $r->{seq} =~ /^\d+\z/;
	return 'bad merchant_id' unless $r->{merchant_id} =~ /^m\d{5}\z/;
	return 'key is not merchant_id'
	  unless defined $msg->{key} && $msg->{key} eq $r->{merchant_id};
	return 'bad country' unless $r->{country} =~ /^[A-Z]{2}\z/;
	return 'bad method' unless $METHODS{ $r->{method} };
	return 'bad status' unless $STATUSES{ $r->{status} };
	my ($raw_amount) = $msg->{payload} =~ /"amount"\s*:\s*([^,}\s]+)/;
	return 'amount not printed with 2 decimals'
	  unless defined $raw_amount && $raw_amount =~ /^\d+\.\d\d\z/;
	return 'amount out of range'
	  unless $r->{amount} >= 1 && $r->{amount} <= 5000;
	return 'event_ts is not ISO-8601 UTC with milliseconds'
	  unless defined iso8601_ms($r->{event_ts});
	return undef;
}

# Consume a topic and decode it: a list of {msg, r} for the well-formed
# payments, and a hashref of problems found.
sub consume_payments ($broker, $topic)
{
	my (@ok, %problems);
	for my $m (SdpKafka::kcat_consume(
		bootstrap => $broker->bootstrap, topic => $topic, timeout => 60))
	{
		my $r = eval { $json->decode($m->{payload}) };
		my $problem = $@ ? 'does not parse' : payment_problem($m, $r);
		if ($problem)
		{
			$problems{$problem}++;
			next;
		}
		push @ok, { msg => $m, r => $r };
	}
	return (\@ok, \%problems);
}

sub sum (@v) { my $s = 0; $s += $_ for @v; return $s }

sub count_by_partition (@msgs)
{
	my %n;
	$n{ $_->{partition} }++ for @msgs;
	return \%n;
}

# ---------------------------------------------------------------------------
# Bad options are refused before any connection
# ---------------------------------------------------------------------------

for my $case (
	[ [qw(--incident surge:m00001:0:10)], qr/unknown incident kind/ ],
	[ [qw(--incident approval_drop:m1:0:10)], qr/invalid merchant/ ],
	[ [qw(--incident approval_drop:m00001:10:5)], qr/must follow the start/ ],
	[ [qw(--incident approval_drop:m00001:0:10:20)], qr/KIND:MERCHANT:FROM_S:TO_S/ ],
	[ [qw(--merchants 20 --incident approval_drop:m00021:0:10)],
		qr/merchants are m00001 \.\. m00020/ ],
	[ [qw(--event-time fixed:2026-02-30T00:00:00Z)], qr/invalid time/ ],
	[ [qw(--event-time fixed:2026-01-01T00:00:00Z --rate 0)], qr/needs --step-ms/ ],
	[ [qw(--event-time step:10 --step-ms 5)], qr/not both/ ],
	[ [qw(--event-time later)], qr/invalid --event-time/ ],
	[ [qw(--approve-rate 0.99 --error-rate 0.02)], qr/more than 1/ ],
	[ [qw(--countries 21)], qr/between 1 and 20/ ],
	[ [qw(--count 5 --duration 5)], qr/not both/ ])
{
	my ($args, $message) = @$case;
	my ($status, $out, $err) = run_paymentsim_raw(
		bootstrap => '127.0.0.1:1', topic => 'none', args => $args);
	my $exit = exit_code($status);
	ok($exit == 2 && $err =~ $message && $out eq '',
		"refuses @$args") or diag "exit $exit: $err";
}

my $broker = SdpKafka::start_broker(
	topics => {
		payments => 4, incidents => 4, 'same-a' => 4, 'same-b' => 4,
		'other-seed' => 4, 'fixed-rate' => 2, live => 2, stopped => 2
	});

# ---------------------------------------------------------------------------
# 20,000 payments on a step clock, with disorder and 1% late
# ---------------------------------------------------------------------------

my $report = run_paymentsim(
	bootstrap => $broker->bootstrap,
	topic => 'payments',
	args => [
		qw(--count 20000 --rate 0 --merchants 500 --event-time step:10
		  --disorder-ms 2000 --late-share 0.01 --seed 5 --quiet)
	]);
is($report->{sent}, 20000, 'payment_sim sent 20000');
is($report->{delivered}, 20000, 'payment_sim delivered 20000');
is($report->{failed}, 0, 'payment_sim failed none');
is($report->{late}, 200, 'report counts 200 late');
is($report->{exit_code}, 0, 'exit code 0');
is($report->{stderr}, '', '--quiet writes nothing on stderr');
is_deeply([ sort keys %{ $report->{partitions} } ], [qw(0 1 2 3)],
	'report lists the 4 partitions');
is(sum(values %{ $report->{partitions} }), 20000, 'partition counts sum to 20000');
note "payment_sim: $report->{seconds} s, $report->{rate} msg/s";

my ($payments, $problems) = consume_payments($broker, 'payments');
is_deeply($problems, {}, 'every message is a well-formed payment')
  or diag explain $problems;
is(scalar @$payments, 20000, 'kcat reads back 20000 payments');
is_deeply(count_by_partition(map { $_->{msg} } @$payments), $report->{partitions},
	'per-partition counts match the report');

my (%seq_seen, %merchants, %countries, %methods, %partition_of_key, %by_seq);
my (%status, %home, @amounts);
my ($late, $late_wrong_seq, $late_wrong_ts, $ontime_outside) = (0, 0, 0, 0);
for my $p (@$payments)
{
	my ($m, $r) = ($p->{msg}, $p->{r});
	my $seq = $r->{seq};
	my $clock = $STEP_CLOCK_START_MS + $seq * 10;
	my $ts = iso8601_ms($r->{event_ts});

	$seq_seen{$seq}++;
	$by_seq{$seq} = $r;
	$merchants{ $r->{merchant_id} }++;
	$countries{ $r->{country} }++;
	$methods{ $r->{method} }++;
	$home{ $r->{merchant_id} }{ $r->{country} }++;
	$partition_of_key{ $m->{key} }{ $m->{partition} }++;
	push @amounts, $r->{amount};
	if ($r->{late})
	{
		$late++;
		$late_wrong_seq++ unless $seq % 100 == 99;
		$late_wrong_ts++ unless $ts == $clock - 600000;
	}
	else
	{
		$late_wrong_seq++ if $seq % 100 == 99;
		$ontime_outside++ if $ts < $clock - 2000 || $ts > $clock;
		$status{ $r->{status} }++;
	}
}
is_deeply([ sort { $a <=> $b } keys %seq_seen ], [ 0 .. 19999 ],
	'seq values are exactly 0..19999');
is(scalar(grep { $_ > 1 } values %seq_seen), 0, 'no seq value appears twice');
is($late, 200, 'exactly 200 payments have "late": true');
is($late_wrong_seq, 0,
	'payment i is late iff floor((i+1)*0.01) > floor(i*0.01)');
is($late_wrong_ts, 0, 'late payments are exactly 600 s behind the clock');
is($ontime_outside, 0,
	'other payments are within 2000 ms before the clock (seq * 10 ms)');
is($report->{first_event_ts}, $by_seq{0}{event_ts},
	'first_event_ts is that of seq 0');
is($report->{last_event_ts}, $by_seq{19999}{event_ts},
	'last_event_ts is that of seq 19999');

my $ontime = sum(values %status);
my $approved_share = ($status{approved} // 0) / $ontime;
my $error_share = ($status{error} // 0) / $ontime;
cmp_ok(abs($approved_share - 0.90), '<=', 0.02,
	sprintf('approved share %.4f is 0.90 +- 0.02', $approved_share));
cmp_ok(abs($error_share - 0.02), '<=', 0.01,
	sprintf('error share %.4f is 0.02 +- 0.01', $error_share));

cmp_ok(scalar(keys %merchants), '>=', 400,
	scalar(keys %merchants) . ' distinct merchants (at least 400)');
ok(!grep({ $_ !~ /^m(\d{5})\z/ || $1 < 1 || $1 > 500 } keys %merchants),
	'merchant ids are m00001..m00500');
my @busy = sort { $b <=> $a } values %merchants;
cmp_ok($busy[0], '>', 5 * $busy[ @busy / 2 ],
	"popularity is skewed: busiest $busy[0], median $busy[@busy / 2]");
cmp_ok(scalar(keys %countries), '>=', 10,
	scalar(keys %countries) . ' distinct countries (at least 10)');
is_deeply([ sort keys %methods ], [ sort keys %METHODS ], 'all four methods occur');
cmp_ok($methods{card}, '>', $methods{bnpl}, 'card is more common than bnpl');

# each merchant's most common country is its home: about 85% of payments
my $home_total = sum(map { (sort { $b <=> $a } values %$_)[0] } values %home);
my $home_share = $home_total / 20000;
ok($home_share > 0.80 && $home_share < 0.92,
	sprintf('%.3f of payments from the merchant\'s home country', $home_share));
is(scalar(grep { keys %$_ != 1 } values %partition_of_key), 0,
	'each merchant key stays in one partition');

@amounts = sort { $a <=> $b } @amounts;
my $mean = sum(@amounts) / @amounts;
my $median = $amounts[ @amounts / 2 ];
ok($median < $mean, sprintf('amounts skewed right: median %.2f < mean %.2f',
	$median, $mean));
ok($amounts[0] < 10 && $amounts[-1] > 1000,
	"amounts spread from $amounts[0] to $amounts[-1]");

# ---------------------------------------------------------------------------
# Incidents on the simulated clock (200 s at 10 ms per payment)
# ---------------------------------------------------------------------------

my $inc_report = run_paymentsim(
	bootstrap => $broker->bootstrap,
	topic => 'incidents',
	args => [
		qw(--count 20000 --rate 0 --merchants 20 --event-time step:10 --seed 5
		  --incident rejection_spike:m00003:0:60
		  --incident approval_drop:m00005:100:150 --quiet)
	]);
is($inc_report->{delivered}, 20000, 'incident run delivered 20000');

my ($inc_payments, $inc_problems) = consume_payments($broker, 'incidents');
is_deeply($inc_problems, {}, 'incident run: every payment well formed')
  or diag explain $inc_problems;
is(scalar @$inc_payments, 20000, 'incident run: 20000 payments');

# status counts by merchant and period
my %period;
for my $p (@$inc_payments)
{
	my $r = $p->{r};
	my $clock_s = $r->{seq} * 10 / 1000;
	my $when =
	    $r->{merchant_id} eq 'm00003' ? ($clock_s < 60 ? 'm3_spike' : 'm3_after')
	  : $r->{merchant_id} eq 'm00005'
	  ? ($clock_s >= 100 && $clock_s < 150 ? 'm5_drop' : 'm5_normal')
	  : 'others';
	$period{$when}{ $r->{status} }++;
	$period{$when}{total}++;
}
sub share ($when, $status)
{
	return ($period{$when}{$status} // 0) / ($period{$when}{total} || 1);
}
cmp_ok($period{$_}{total} // 0, '>=', 50, "enough payments in $_")
  for qw(m3_spike m3_after m5_drop m5_normal);
cmp_ok(share('m3_spike', 'rejected'), '>', 0.5,
	sprintf('rejection_spike: m00003 rejected share %.3f > 0.5 in [0, 60) s',
		share('m3_spike', 'rejected')));
cmp_ok(share('m3_after', 'rejected'), '<', 0.2,
	sprintf('and %.3f < 0.2 after 60 s', share('m3_after', 'rejected')));
cmp_ok(share('m5_drop', 'approved'), '<', 0.25,
	sprintf('approval_drop: m00005 approved share %.3f < 0.25 in [100, 150) s',
		share('m5_drop', 'approved')));
cmp_ok(share('m5_normal', 'approved'), '>', 0.8,
	sprintf('and %.3f > 0.8 outside', share('m5_normal', 'approved')));
cmp_ok(abs(share('others', 'approved') - 0.90), '<=', 0.02,
	'other merchants keep 0.90 approved');

# ---------------------------------------------------------------------------
# Reproducible: the same seed on a simulated clock, byte for byte
# ---------------------------------------------------------------------------

my @same_args = qw(--count 5000 --rate 0 --merchants 50
  --event-time fixed:2026-03-01T12:00:00.000Z --step-ms 7 --disorder-ms 500
  --late-share 0.02 --late-ms 120000 --seq-start 50000
  --incident approval_drop:m00002:5:20 --quiet);
my %runs;
for my $run ([ 'same-a', 11 ], [ 'same-b', 11 ], [ 'other-seed', 12 ])
{
	my ($topic, $seed) = @$run;
	my $r = run_paymentsim(
		bootstrap => $broker->bootstrap,
		topic => $topic,
		args => [ @same_args, '--seed', $seed ]);
	is($r->{delivered}, 5000, "$topic delivered 5000");
	is($r->{late}, 100, "$topic: 100 late");
	$runs{$topic} = [
		map { "$_->{key}\t$_->{payload}" } SdpKafka::kcat_consume(
			bootstrap => $broker->bootstrap, topic => $topic, timeout => 60)
	];
}
is(scalar @{ $runs{'same-a'} }, 5000, 'same-a holds 5000');
ok(join("\n", sort @{ $runs{'same-a'} }) eq join("\n", sort @{ $runs{'same-b'} }),
	'the same seed gives byte-identical keys and payloads');
ok(join("\n", sort @{ $runs{'same-a'} }) ne
	  join("\n", sort @{ $runs{'other-seed'} }),
	'another seed gives other payloads');

my $fixed_start = timegm(0, 0, 12, 1, 2, 2026) * 1000;
my ($fixed_bad, %fixed_seq) = (0);
for my $line (@{ $runs{'same-a'} })
{
	my (undef, $payload) = split /\t/, $line, 2;
	my $r = $json->decode($payload);
	my $clock = $fixed_start + ($r->{seq} - 50000) * 7;
	my $ts = iso8601_ms($r->{event_ts});
	$fixed_seq{ $r->{seq} }++;
	$fixed_bad++
	  unless $r->{late}
	  ? $ts == $clock - 120000
	  : ($ts >= $clock - 500 && $ts <= $clock);
}
is_deeply([ sort { $a <=> $b } keys %fixed_seq ], [ 50000 .. 54999 ],
	'--seq-start 50000: seq values are exactly 50000..54999');
is($fixed_bad, 0,
	'fixed clock: start + index * --step-ms, minus disorder or --late-ms');

# without --step-ms the fixed clock advances 1/rate per payment
my $fr = run_paymentsim(
	bootstrap => $broker->bootstrap,
	topic => 'fixed-rate',
	args => [qw(--count 200 --rate 2000 --event-time fixed:2026-05-01T00:00:00Z
		  --seed 3 --quiet)]);
my $fr_start = timegm(0, 0, 0, 1, 4, 2026) * 1000;
my @fr_off = map {
	my $r = $json->decode($_->{payload});
	iso8601_ms($r->{event_ts}) - ($fr_start + $r->{seq} / 2)
} SdpKafka::kcat_consume(bootstrap => $broker->bootstrap, topic => 'fixed-rate');
is(scalar @fr_off, 200, 'fixed clock at --rate 2000: 200 payments');
is(scalar(grep { abs($_) > 0.5 } @fr_off), 0,
	'event_ts advances 0.5 ms per payment (1/rate)');
cmp_ok($fr->{seconds}, '>=', 0.09, "paced at 2000/s ($fr->{seconds} s for 200)");

# ---------------------------------------------------------------------------
# Wall clock, paced, --duration
# ---------------------------------------------------------------------------

my $wall_before_ms = int(time * 1000);
my $live = run_paymentsim(
	bootstrap => $broker->bootstrap,
	topic => 'live',
	args => [qw(--rate 2000 --duration 1 --disorder-ms 50 --seed 9 --quiet)]);
my $wall_after_ms = int(time * 1000) + 1;
ok($live->{sent} >= 1000 && $live->{sent} <= 2000,
	"--rate 2000 --duration 1 sent $live->{sent} (at most 2000)");
is($live->{delivered}, $live->{sent}, 'all of them delivered');
# it ran for its duration; that it stopped then is the count above (at most 1 s of
# --rate 2000), not a wall-clock bound, which a loaded machine's flush exceeds (5.6 s
# against 5, CI of 2026-12-05)
cmp_ok($live->{seconds}, '>=', 0.9, "and took $live->{seconds} s");

my ($live_payments, $live_problems) = consume_payments($broker, 'live');
is_deeply($live_problems, {}, 'wall clock: every payment well formed')
  or diag explain $live_problems;
is(scalar @$live_payments, $live->{sent}, 'kcat reads back all of them');
my ($outside, $max_lag) = (0, 0);
for my $p (@$live_payments)
{
	my $ts = iso8601_ms($p->{r}{event_ts});
	$outside++ if $ts < $wall_before_ms - 50 || $ts > $wall_after_ms;
	# event_ts is taken just before the produce call stamps the message
	my $lag = $p->{msg}{timestamp_ms} - $ts;
	$outside++ if $lag < 0;
	$max_lag = $lag if $lag > $max_lag;
}
is($outside, 0, 'event_ts is wall time within the run, before the Kafka timestamp');
cmp_ok($max_lag, '<=', 250,
	"Kafka timestamp at most disorder + a little after event_ts ($max_lag ms)");

# ---------------------------------------------------------------------------
# SIGTERM: stop, flush, report
# ---------------------------------------------------------------------------

my $sim = start_paymentsim(
	bootstrap => $broker->bootstrap,
	topic => 'stopped',
	args => [qw(--rate 1000 --duration 60 --seed 4)]);
sleep(0.7);
$sim->signal('TERM');
my $stopped = $sim->finish;
is($stopped->{exit_code}, 0, 'SIGTERM: exit code 0');
ok($stopped->{sent} > 100 && $stopped->{sent} < 30000,
	"stopped early after $stopped->{sent}");
is($stopped->{delivered}, $stopped->{sent}, 'everything sent was delivered');
like($stopped->{stderr}, qr/^payment_sim: \d+ sent, \d+ delivered/m,
	'human summary on stderr without --quiet');
my %stopped_seq;
$stopped_seq{ $json->decode($_->{payload})->{seq} }++
  for SdpKafka::kcat_consume(bootstrap => $broker->bootstrap, topic => 'stopped');
is_deeply([ sort { $a <=> $b } keys %stopped_seq ], [ 0 .. $stopped->{sent} - 1 ],
	'the topic holds exactly the payments reported sent');

is($broker->stop, 0, 'broker exits 0 on SIGTERM');

# how long it took is the benchmark's to say, not an assertion (on a loaded machine: 117.6 s)
note(sprintf('003_payment_sim took %.1f s', time - $test_start));
done_testing();
