# 001_tools.pl
#	The test tools themselves: the embedded broker (tools/sdp_broker), the
#	flight simulator (tools/flight_sim) and the SdpKafka helpers.  Every other
#	TAP test builds on them, so this one checks exactly what they promise:
#	message counts per partition, field names, types and ranges, no gap and no
#	duplicate in seq, the exact malformed share and kinds, and the broker's
#	fault injection.

use v5.36;

use B ();
use JSON::PP ();
use Test::More;
use Time::HiRes qw(time sleep);
use Time::Local qw(timegm);

use SdpKafka;

my $test_start = time;
my $json = JSON::PP->new;

my @FIELDS = qw(seq icao24 callsign lat lon baro_alt vert_rate squawk
  velocity heading poller_ts);

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
	my ($y, $mo, $d, $h, $mi, $s, $ms) =
	  $ts =~ /^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.(\d{3})Z\z/
	  or return undef;
	return (timegm($s, $mi, $h, $d, $mo - 1, $y) * 1000) + $ms;
}

# Why a decoded position report is not well formed, or undef if it is.
sub report_problem ($msg, $r)
{
	return 'not an object' unless ref $r eq 'HASH';
	for my $f (@FIELDS)
	{
		return "missing $f" unless exists $r->{$f};
	}
	for my $f (qw(seq lat lon baro_alt vert_rate velocity heading))
	{
		return "$f is not a number" unless is_json_number($r->{$f});
	}
	return 'bad icao24' unless $r->{icao24} =~ /^[0-9a-f]{6}\z/;
	return 'key is not icao24'
	  unless defined $msg->{key} && $msg->{key} eq $r->{icao24};
	return 'bad callsign' unless $r->{callsign} =~ /^[A-Z]{3}[0-9]{1,4}\z/;
	return 'bad squawk' unless $r->{squawk} =~ /^[0-7]{4}\z/;
	return 'lat/lon not 5 decimals'
	  unless $msg->{payload} =~ /"lat":-?\d+\.\d{5}[,}]/
	  && $msg->{payload} =~ /"lon":-?\d+\.\d{5}[,}]/;
	return 'lat out of range' unless $r->{lat} >= -90 && $r->{lat} <= 90;
	return 'lon out of range' unless $r->{lon} >= -180 && $r->{lon} <= 180;
	return 'baro_alt out of range'
	  unless $r->{baro_alt} >= 0 && $r->{baro_alt} <= 45000;
	return 'vert_rate out of range'
	  unless $r->{vert_rate} >= -4000 && $r->{vert_rate} <= 4000;
	return 'velocity out of range'
	  unless $r->{velocity} >= 0 && $r->{velocity} <= 600;
	return 'heading out of range'
	  unless $r->{heading} >= 0 && $r->{heading} < 360;
	return 'seq is not an integer' unless $r->{seq} =~ /^\d+\z/;
	return 'poller_ts is not ISO-8601 UTC with milliseconds'
	  unless defined iso8601_ms($r->{poller_ts});
	return undef;
}

sub sum (@v) { my $s = 0; $s += $_ for @v; return $s }

sub count_by_partition (@msgs)
{
	my %n;
	$n{ $_->{partition} }++ for @msgs;
	return \%n;
}

my $broker = SdpKafka::start_broker(
	topics => { 'raw-flights' => 4, 'bad-flights' => 4 });
like($broker->bootstrap, qr/^127\.0\.0\.1:\d+\z/,
	'broker publishes its bootstrap address');

# ---------------------------------------------------------------------------
# 10,000 well-formed messages
# ---------------------------------------------------------------------------

my $wall_before_ms = int(time * 1000);
my $report = SdpKafka::run_flightsim(
	bootstrap => $broker->bootstrap,
	topic => 'raw-flights',
	args => [qw(--count 10000 --rate 0 --aircraft 300 --seed 7 --quiet)]);
my $wall_after_ms = int(time * 1000) + 1;

is($report->{sent}, 10000, 'flight_sim sent 10000');
is($report->{delivered}, 10000, 'flight_sim delivered 10000');
is($report->{failed}, 0, 'flight_sim failed none');
is($report->{malformed}, 0, 'no malformed messages by default');
is_deeply([ sort keys %{ $report->{partitions} } ], [qw(0 1 2 3)],
	'report lists the 4 partitions');
is(sum(values %{ $report->{partitions} }), 10000, 'partition counts sum to 10000');
is(scalar(grep { $_ > 0 } values %{ $report->{partitions} }), 4,
	'every partition got messages');
note "flight_sim: $report->{seconds} s, $report->{rate} msg/s";

my @msgs = SdpKafka::kcat_consume(
	bootstrap => $broker->bootstrap,
	topic => 'raw-flights',
	timeout => 60);
is(scalar @msgs, 10000, 'kcat reads back exactly 10000 messages');
is_deeply(count_by_partition(@msgs), $report->{partitions},
	'per-partition counts match the report');

my (%problems, %seq_seen, %phase, %partition_of_key, %aircraft);
my ($emergencies, $dup_seq, $ts_outside, $max_ts_skew) = (0, 0, 0, 0);
for my $m (@msgs)
{
	my $r = eval { $json->decode($m->{payload}) };
	my $problem = $@ ? 'does not parse' : report_problem($m, $r);
	if ($problem)
	{
		$problems{$problem}++;
		next;
	}
	$dup_seq++ if $seq_seen{ $r->{seq} }++;
	$emergencies++ if $r->{squawk} =~ /^7[567]00\z/;
	$phase{climb}++ if $r->{vert_rate} > 500;
	$phase{descent}++ if $r->{vert_rate} < -500;
	$phase{cruise}++ if $r->{baro_alt} > 30000;
	$aircraft{ $r->{icao24} }{ $r->{callsign} }++;
	$partition_of_key{ $m->{key} }{ $m->{partition} }++;

	# CreateTime is the observation's time on the run's own clock: inside
	# the run's window, and at time scale 1 exactly the simulated observation
	# time (a timestamp taken when librdkafka enqueued the message strayed
	# 103 ms from poller_ts on a busy machine, 2.8 s on a starved core)
	$ts_outside++
	  if $m->{timestamp_ms} < $wall_before_ms
	  || $m->{timestamp_ms} > $wall_after_ms;
	my $skew = abs($m->{timestamp_ms} - iso8601_ms($r->{poller_ts}));
	$max_ts_skew = $skew if $skew > $max_ts_skew;
}
is_deeply(\%problems, {}, 'every message is a well-formed position report')
  or diag explain \%problems;
is($dup_seq, 0, 'no seq value appears twice');
is_deeply([ sort { $a <=> $b } keys %seq_seen ], [ 0 .. 9999 ],
	'seq values are exactly 0..9999');
is($ts_outside, 0, 'message timestamps fall within the run');
is($max_ts_skew, 0, 'timestamp is the observation time: poller_ts exactly');
cmp_ok($emergencies, '>', 0, "some emergency squawks ($emergencies)");
cmp_ok($emergencies, '<', 500, 'but under 5%');
cmp_ok($phase{$_} // 0, '>', 0, "aircraft in $_ (" . ($phase{$_} // 0) . ')')
  for qw(climb descent cruise);
is(scalar keys %aircraft, 300, '300 distinct aircraft');
is(scalar(grep { keys %$_ != 1 } values %aircraft), 0,
	'each aircraft keeps one callsign');
is(scalar(grep { keys %$_ != 1 } values %partition_of_key), 0,
	'each key stays in one partition');

my @sample = SdpKafka::kcat_consume(
	bootstrap => $broker->bootstrap,
	topic => 'raw-flights',
	count => 100,
	json => 1);
is(scalar(grep { $_->{timestamp_type} eq 'create' } @sample), 100,
	'timestamps are CreateTime');

# ---------------------------------------------------------------------------
# 5% malformed messages
# ---------------------------------------------------------------------------

my $bad_report = SdpKafka::run_flightsim(
	bootstrap => $broker->bootstrap,
	topic => 'bad-flights',
	args => [
		qw(--count 10000 --rate 0 --aircraft 300 --seed 7 --malformed 0.05 --quiet)
	]);
is($bad_report->{delivered}, 10000, 'malformed run delivered 10000');
is($bad_report->{malformed}, 500, 'report counts 500 malformed');

my @bad = SdpKafka::kcat_consume(
	bootstrap => $broker->bootstrap,
	topic => 'bad-flights',
	timeout => 60);
is(scalar @bad, 10000, 'kcat reads back 10000 messages');

my (%kind, %malformed_seq, %all_seq, %unexpected, %bad_keys);
for my $m (@bad)
{
	my $r = eval { $json->decode($m->{payload}) };
	my ($k, $seq);
	if ($@ || ref $r ne 'HASH')
	{
		$k = 'truncated';
		($seq) = $m->{payload} =~ /^\{"seq":(\d+)/;
	}
	else
	{
		$seq = $r->{seq};
		if (!exists $r->{lat} || !exists $r->{icao24})
		{
			$k = 'missing';
		}
		elsif (!is_json_number($r->{lat}) || !is_json_number($r->{baro_alt}))
		{
			$k = 'type';
		}
		elsif (my $p = report_problem($m, $r))
		{
			$unexpected{$p}++;
			next;
		}
		else
		{
			$k = 'well_formed';
		}
	}
	$kind{$k}++;
	$bad_keys{ $m->{key} // 'NULL' }++ unless ($m->{key} // '') =~ /^[0-9a-f]{6}\z/;
	next unless defined $seq;
	$all_seq{$seq}++;
	$malformed_seq{$seq} = 1 if $k ne 'well_formed';
}
is_deeply(\%unexpected, {}, 'no message is broken in an unplanned way')
  or diag explain \%unexpected;
is($kind{well_formed}, 9500, '9500 well formed');
is(($kind{truncated} // 0) + ($kind{type} // 0) + ($kind{missing} // 0),
	500, 'exactly 500 malformed');
is_deeply(
	[ map { $kind{$_} // 0 } qw(truncated type missing) ],
	[ 167, 167, 166 ],
	'kinds cycle truncated, type, missing');
is_deeply(\%bad_keys, {}, 'malformed messages keep the aircraft key');
is_deeply([ sort { $a <=> $b } keys %malformed_seq ],
	[ grep { $_ % 20 == 19 } 0 .. 9999 ],
	'message i is malformed iff floor((i+1)*0.05) > floor(i*0.05)');
is(scalar(keys %all_seq), 10000, 'every message, truncated ones too, carries its seq');

# ---------------------------------------------------------------------------
# Fault injection
# ---------------------------------------------------------------------------

# The embedded broker's fault injection (down/up, SIGUSR1/SIGUSR2) and its
# address file: on Apache Kafka, outages are the tests' own (a SIGKILL and a
# restart, test/t/015 and test/t/1*).
if (SdpKafka::kind() eq 'embedded')
{
	$broker->create_topic('fault-flights', 2);
	ok($broker->down, 'down all acknowledged');
	my $down_report = SdpKafka::run_flightsim(
		bootstrap => $broker->bootstrap,
		topic => 'fault-flights',
		allow_failure => 1,
		args => [qw(--count 20 --rate 0 --message-timeout-ms 1500 --quiet)]);
	isnt($down_report->{exit_code}, 0, 'producing to a down broker fails');
	is($down_report->{delivered}, 0, 'nothing delivered while down');
	is($down_report->{failed}, 20, 'all 20 messages reported failed');

	ok($broker->up, 'up all acknowledged');
	my $up_report = SdpKafka::run_flightsim(
		bootstrap => $broker->bootstrap,
		topic => 'fault-flights',
		args => [qw(--count 200 --rate 0 --seq-start 1000 --quiet)]);
	is($up_report->{delivered}, 200, 'after up, 200 delivered');
	my @fault = SdpKafka::kcat_consume(
		bootstrap => $broker->bootstrap,
		topic => 'fault-flights');
	is_deeply(
		[ sort { $a <=> $b } map { $json->decode($_->{payload})->{seq} } @fault ],
		[ 1000 .. 1199 ],
		'the topic holds exactly the 200 messages sent after up');

	# An outage in the middle of a paced run: the producer and a running
	# consumer both resume.  Retries may duplicate a batch that was in flight
	# when the connection closed (idempotence is off), but nothing is lost.
	$broker->create_topic('outage-flights', 2);
	my $consumer = SdpKafka::start_kcat_consume(
		bootstrap => $broker->bootstrap,
		topic => 'outage-flights',
		count => 3000);
	my $sim = SdpKafka::start_flightsim(
		bootstrap => $broker->bootstrap,
		topic => 'outage-flights',
		args => [qw(--count 3000 --rate 1500 --quiet)]);
	sleep(0.6);
	ok($broker->signal('USR1'), 'SIGUSR1 takes all brokers down');
	sleep(0.5);
	ok($broker->signal('USR2'), 'SIGUSR2 brings them up');
	my $outage_report = $sim->finish(timeout => 30);
	is($outage_report->{delivered}, 3000, 'producer delivered all 3000 across the outage');
	is(scalar(my @resumed = $consumer->finish(timeout => 30)), 3000,
		'running consumer resumed after up');

	my %outage_seq;
	$outage_seq{ $json->decode($_->{payload})->{seq} }++
	  for SdpKafka::kcat_consume(
		bootstrap => $broker->bootstrap,
		topic => 'outage-flights');
	is_deeply([ sort { $a <=> $b } keys %outage_seq ], [ 0 .. 2999 ],
		'no message lost across the outage');
	note 'duplicates after the outage: ' . scalar(grep { $_ > 1 } values %outage_seq);

	is($broker->stop, 0, 'broker exits 0 on SIGTERM');
	ok(!-e $broker->addr_file && !-e $broker->fifo,
		'broker removed its address file and FIFO');

}
else
{
	is($broker->stop, 0, 'broker stopped');
}

note sprintf('001_tools took %.1f s', time - $test_start);
done_testing();
