=pod

=head1 NAME

SdpKafka - Kafka helpers for sdp_ext TAP tests: the embedded broker, the
flight simulator and kcat

=head1 SYNOPSIS

  use lib 'test/perl';
  use SdpKafka;

  my $broker = SdpKafka::start_broker(topics => { 'raw-flights' => 4 });
  my $report = SdpKafka::run_flightsim(
      bootstrap => $broker->bootstrap, topic => 'raw-flights',
      args => [ '--count', 1000, '--rate', 0 ]);
  my @msgs = SdpKafka::kcat_consume(
      bootstrap => $broker->bootstrap, topic => 'raw-flights', count => 1000);
  $broker->down;              # every broker refuses connections
  $broker->up;
  $broker->stop;

=head1 DESCRIPTION

Programs come from F<tools/> under the current directory (the repository root
when run by C<prove>), or from C<$ENV{SDP_TOOLS_DIR}>.  Every process started
here is killed when the test process exits, even if the test dies.

Functions (all take named arguments):

=over

=item start_broker(topics => {NAME => PARTITIONS, ...}, brokers => 1, dir => DIR)

Starts F<tools/sdp_broker> with its output in F<DIR/broker-N.log> (stdout:
the bootstrap line and command acknowledgements) and F<DIR/broker-N.err>, and
returns once its address file exists, i.e. once the topics exist.  DIR
defaults to a temporary directory.  The object has:

  ->bootstrap          "127.0.0.1:PORT[,...]"
  ->control($cmd)      send a command ("down 1", "up all", "rtt all 50",
                       "topic NAME PARTS") and wait up to 10 s for its "ok";
                       dies on "error ..." or timeout
  ->down([$id])        take broker $id (default: all) down
  ->up([$id])          bring it up again
  ->create_topic($name, $partitions)
  ->signal($sig)       send a signal; for 'USR1' (all down) and 'USR2'
                       (all up) also wait for the broker's "ok" line
  ->log                the broker's stdout so far
  ->pid, ->addr_file, ->fifo
  ->stop               SIGTERM, wait for exit; returns the exit status

=item run_flightsim(bootstrap => ..., topic => ..., args => [...], timeout => 120, allow_failure => 0)

Runs F<tools/flight_sim> to completion and returns the hashref parsed from its
final JSON line (sent, delivered, failed, malformed, partitions, seconds,
rate), plus C<exit_code> and C<stderr>.  Dies if it exits non-zero, unless
allow_failure is true.

=item start_flightsim(same arguments)

Starts it in the background and returns a handle:

  ->finish(timeout => 120, allow_failure => 0)   wait; the same hashref
  ->stop               SIGTERM (it flushes and reports), then finish with
                       allow_failure
  ->kill               SIGKILL and reap, no report
  ->signal($sig), ->pid, ->running

=item kcat_consume(bootstrap => ..., topic => ..., count => N, timeout => 180, partition => P, offset => 'beginning', json => 0, wait => 0, properties => {...})

Reads with C<kcat -C -o OFFSET -e [-c N]>: up to count messages, or all that
the topic holds, and returns a list of hashrefs {partition, offset, key,
payload, timestamp_ms} (key and payload are byte strings, undef for NULL).  The
output format C<'%p %o %T %K %S\n%k%s\n'> carries key and payload lengths, so
any payload, newlines included, comes back exactly.  With json => 1 it uses
kcat's C<-J> envelope instead and adds timestamp_type ("create",
"logappend"); payloads must then be UTF-8 text.  Dies if kcat fails or does
not finish within timeout seconds.

=item start_kcat_consume(same arguments; count is required)

Starts kcat in the background, reading until it has count messages (no
C<-e>; C<-E>, so it rides out a broker outage), and returns a handle:

  ->finish(timeout => 180)   wait for it; the same list of hashrefs
  ->kill

Use it for a consumer that runs during faults.  With kcat_consume, wait => 1
also reads until count messages arrived rather than stopping at the end of
the partitions.

=item kcat_produce(bootstrap => ..., topic => ..., messages => [[KEY, PAYLOAD, PARTITION], ...])

Produces exactly these messages in this order (KEY or PAYLOAD undef for
NULL, PARTITION undef for the key's partition by the murmur2 partitioner, as
flight_sim and Java clients use).  Keys and payloads must not contain the
bytes 0x1e and 0x1f, which delimit them on kcat's input.  Dies if kcat
reports a failure.  C<< headers => ['name=value', 'name', ...] >> gives every
message those headers (kcat -H; a name without '=' has no value).

=back

=cut

package SdpKafka;

use v5.36;

use Carp qw(croak);
use Cwd qw(getcwd);
use Exporter qw(import);
use File::Spec;
use File::Temp qw(tempdir);
use IPC::Run ();
use PostgreSQL::Test::Utils ();	# timeout_default: how long a kcat may take, as a poll
use JSON::PP ();
use Time::HiRes qw(sleep);

our @EXPORT_OK =
  qw(start_broker run_flightsim start_flightsim kcat_consume
  start_kcat_consume kcat_produce tools_dir);

# Children started here and not reaped yet (pid => IPC::Run harness), and
# the process that owns them: a forked child must not kill its parent's helpers.
my %live_children;
my $owner_pid = $$;
my $default_dir;
my $broker_serial = 0;
my $flightsim_serial = 0;
my $kcat_serial = 0;

sub _now { return Time::HiRes::time() }

sub tools_dir
{
	return $ENV{SDP_TOOLS_DIR} // File::Spec->catdir(getcwd(), 'tools');
}

sub _tool ($name)
{
	my $path = File::Spec->catfile(tools_dir(), $name);
	croak "$path is not an executable; run 'make tools' first"
	  unless -x $path;
	return $path;
}

sub _work_dir ($dir)
{
	return $dir if defined $dir;
	$default_dir //= tempdir('sdp_kafka_XXXXXX', TMPDIR => 1, CLEANUP => !$ENV{SDP_KAFKA_KEEP});
	return $default_dir;
}

sub _slurp ($path)
{
	open(my $fh, '<:raw', $path) or return '';
	local $/;
	my $data = <$fh>;
	close $fh;
	return $data // '';
}

# Start a program in the background with its output in files; its pid.
sub _spawn ($cmd, $stdout_file, $stderr_file)
{
	my $h = IPC::Run::start($cmd, '<', '/dev/null', '>', $stdout_file, '2>', $stderr_file);
	# IPC::Run has no accessor for it: the pid of its one child
	my $pid = $h->{KIDS}[0]{PID};
	croak "could not start $cmd->[0]" unless $pid;
	$live_children{$pid} = $h;
	return $pid;
}

# Wait up to $timeout seconds for $pid to exit; its wait status (-1 if it is
# not a child of ours, or was reaped already), or undef if it still runs.
sub _reap ($pid, $timeout)
{
	local $?;					# callers run in DESTROY and END too
	my $h = $live_children{$pid} // return -1;
	my $deadline = _now() + $timeout;
	# with no pipe to it, a harness is pumpable while its child runs
	while ($h->pumpable)
	{
		return undef if _now() >= $deadline;
		sleep(0.02);
	}
	$h->finish;
	delete $live_children{$pid};
	my $status = $h->full_result(0);
	return $status =~ /^\d+\z/ ? $status + 0 : -1;
}

# SIGTERM, then SIGKILL if it is still there after $grace seconds.
sub _terminate ($pid, $grace = 10)
{
	return undef unless $live_children{$pid};
	kill 'TERM', $pid;
	my $status = _reap($pid, $grace);
	return $status if defined $status;
	kill 'KILL', $pid;
	return _reap($pid, 5);
}

sub _kill_children
{
	return unless $$ == $owner_pid;
	kill 'KILL', $_ for keys %live_children;
	_reap($_, 5) for keys %live_children;
}

END
{
	local $?;
	_kill_children();
}

# A test stopped by a signal exits through END blocks (ours kills the
# children, PostgreSQL::Test::Cluster's stops its nodes) unless someone else
# handles the signal already.  Children also get --exit-with-parent where
# they support it, for SIGKILL.
for my $sig (qw(INT TERM HUP))
{
	next if defined $SIG{$sig} && $SIG{$sig} ne '' && $SIG{$sig} ne 'DEFAULT';
	my $signum = { INT => 2, HUP => 1, TERM => 15 }->{$sig};
	$SIG{$sig} = sub { _kill_children(); exit(128 + $signum) };
}

# ---------------------------------------------------------------------------
# The broker
# ---------------------------------------------------------------------------

# Which broker start_broker starts: the embedded one (librdkafka's mock
# cluster, tools/sdp_broker) or Apache Kafka (scripts/kafka.sh), by
# SDP_KAFKA=embedded|apache.
sub kind { return $ENV{SDP_KAFKA} // 'embedded' }

# A test (or a part of one) that needs what only one broker has: the
# embedded broker's fault injection and its quirks, or Apache Kafka's
# semantics.  Skips the whole file, with the reason, on the other broker.
sub needs_embedded ($why)
{
	Test::More::plan(skip_all => "needs the embedded broker: $why") if kind() eq 'apache';
}

sub needs_apache ($why)
{
	Test::More::plan(skip_all => "runs against Apache Kafka (SDP_KAFKA=apache, scripts/test.sh's kafka pass): $why")
	  unless kind() eq 'apache';
}

sub start_broker (%args)
{
	return start_apache(%args) if kind() eq 'apache';
	my $dir = _work_dir($args{dir});
	my $topics = $args{topics} // {};
	my $brokers = $args{brokers} // 1;
	my $n = ++$broker_serial;
	my $self = bless {
		dir => $dir,
		addr_file => "$dir/broker-$n.addr",
		fifo => "$dir/broker-$n.ctl",
		log => "$dir/broker-$n.log",
		errlog => "$dir/broker-$n.err",
	  },
	  'SdpKafka::Broker';

	unlink $self->{addr_file};
	my @cmd = (_tool('sdp_broker'), '--exit-with-parent', '--brokers', $brokers,
		'--addr-file', $self->{addr_file}, '--control', $self->{fifo});
	push @cmd, '--topic', "$_:$topics->{$_}" for sort keys %$topics;
	$self->{pid} = _spawn(\@cmd, $self->{log}, $self->{errlog});
	$self->{owner} = $$;

	my $deadline = _now() + 10;
	until (-s $self->{addr_file})
	{
		if (defined(my $status = _reap($self->{pid}, 0)))
		{
			croak "sdp_broker exited with status $status:\n"
			  . _slurp($self->{errlog});
		}
		croak "sdp_broker did not write $self->{addr_file} within 10 s"
		  if _now() > $deadline;
		sleep(0.01);
	}
	my $bootstrap = _slurp($self->{addr_file});
	$bootstrap =~ s/\s+\z//;
	$self->{bootstrap} = $bootstrap;
	return $self;
}

package SdpKafka::Broker
{
	use Carp qw(croak);
	use Errno qw(ENXIO EINTR);
	use Fcntl qw(O_WRONLY O_NONBLOCK);
	use Time::HiRes qw(sleep);

	sub bootstrap ($self) { return $self->{bootstrap} }
	sub pid ($self) { return $self->{pid} }
	sub addr_file ($self) { return $self->{addr_file} }
	sub fifo ($self) { return $self->{fifo} }
	sub log ($self) { return SdpKafka::_slurp($self->{log}) }

	sub control ($self, $cmd)
	{
		my $canonical = join(' ', split(' ', $cmd));
		my $deadline = SdpKafka::_now() + 10;
		my $offset = -s $self->{log} // 0;

		croak "broker is not running" unless $live_children{ $self->{pid} };

		# The broker reopens the FIFO after each writer; retry until it has.
		my $fh;
		until (sysopen($fh, $self->{fifo}, O_WRONLY | O_NONBLOCK))
		{
			croak "cannot open control FIFO $self->{fifo}: $!"
			  unless $! == ENXIO || $! == EINTR;
			croak "broker does not read its control FIFO"
			  if SdpKafka::_now() > $deadline;
			sleep(0.01);
		}
		my $line = "$canonical\n";
		my $written = syswrite($fh, $line);
		close $fh;
		croak "cannot write to control FIFO: $!"
		  unless defined $written && $written == length $line;

		# Wait for the acknowledgement in the broker's stdout.
		for (;;)
		{
			my $new = substr(SdpKafka::_slurp($self->{log}), $offset);
			for my $l (split /\n/, $new)
			{
				return 1 if $l eq "ok $canonical";
				croak "broker: $l (command: $canonical)" if $l =~ /^error /;
			}
			croak "no acknowledgement for \"$canonical\" within 10 s"
			  if SdpKafka::_now() > $deadline;
			sleep(0.01);
		}
	}

	sub down ($self, $id = 'all') { return $self->control("down $id") }
	sub up ($self, $id = 'all') { return $self->control("up $id") }

	sub create_topic ($self, $name, $partitions)
	{
		return $self->control("topic $name $partitions");
	}

	# USR1 and USR2 (all brokers down / up) wait for the broker's "ok".
	sub signal ($self, $sig)
	{
		my %ack = (USR1 => 'ok down all', USR2 => 'ok up all');
		my $offset = -s $self->{log} // 0;
		kill($sig, $self->{pid}) or croak "cannot signal the broker: $!";
		my $want = $ack{$sig} // return 1;
		my $deadline = SdpKafka::_now() + 10;
		for (;;)
		{
			my $new = substr(SdpKafka::_slurp($self->{log}), $offset);
			return 1 if grep { $_ eq $want } split /\n/, $new;
			croak "no \"$want\" after SIG$sig within 10 s"
			  if SdpKafka::_now() > $deadline;
			sleep(0.01);
		}
	}

	sub stop ($self)
	{
		my $status = SdpKafka::_terminate($self->{pid});
		croak "sdp_broker exited with status $status"
		  if defined $status && $status != 0;
		return $status;
	}

	sub DESTROY ($self)
	{
		SdpKafka::_terminate($self->{pid}, 5)
		  if $self->{pid} && $self->{owner} && $self->{owner} == $$;
	}
}

# ---------------------------------------------------------------------------
# Apache Kafka
# ---------------------------------------------------------------------------

# A single-node Apache Kafka broker (scripts/kafka.sh) with the topics
# (created, replication factor 1: auto-creation is off).  brokers > 1 is the
# embedded broker's.
sub start_apache (%args)
{
	croak "Apache Kafka runs one broker here, not $args{brokers}" if ($args{brokers} // 1) > 1;
	my $dir = _work_dir($args{dir});
	my $n = ++$broker_serial;
	my $self = bless { dir => "$dir/kafka-$n", owner => $$ }, 'SdpKafka::Apache';
	mkdir $self->{dir} or croak "cannot create $self->{dir}: $!";
	$self->_start;
	$self->create_topic($_, $args{topics}{$_}) for sort keys %{ $args{topics} // {} };
	return $self;
}

package SdpKafka::Apache
{
	use Carp qw(croak);
	use Time::HiRes qw(sleep);

	sub _script ($self, @args)
	{
		my ($out, $err) = ('', '');
		IPC::Run::run([ 'bash', 'scripts/kafka.sh', @args, $self->{dir} ], '<', \undef, '>', \$out, '2>', \$err)
		  or croak "scripts/kafka.sh @args failed:\n$err";
		return $out;
	}

	sub _start ($self)
	{
		my $out = $self->_script('start');
		my %env = $out =~ /^(KAFKA_\w+)=(.*)$/mg;
		$self->{env} = \%env;
		$self->{running} = 1;
		return;
	}

	sub bootstrap ($self) { return $self->{env}{KAFKA_PLAINTEXT} }
	sub sasl_ssl_bootstrap ($self) { return $self->{env}{KAFKA_SASL_SSL} }
	sub ssl_bootstrap ($self) { return $self->{env}{KAFKA_SSL} }
	sub sasl_plaintext_bootstrap ($self) { return $self->{env}{KAFKA_SASL_PLAINTEXT} }
	sub ca_file ($self) { return $self->{env}{KAFKA_CA} }
	sub other_ca_file ($self) { return $self->{env}{KAFKA_OTHER_CA} }
	sub user ($self) { return $self->{env}{KAFKA_USER} }
	sub password ($self) { return $self->{env}{KAFKA_PASSWORD} }
	sub pid ($self) { return $self->{env}{KAFKA_PID} }
	sub log ($self) { return SdpKafka::_slurp($self->{env}{KAFKA_LOG}) }
	sub kind ($self) { return 'apache' }

	sub admin ($self, @args)
	{
		my ($out, $err) = ('', '');
		IPC::Run::run([ SdpKafka::_tool('kafka_admin'), '--bootstrap', $self->bootstrap, @args ],
			'<', \undef, '>', \$out, '2>', \$err)
		  or croak "kafka_admin @args failed:\n$err";
		return $out;
	}

	# create_topic(NAME, PARTITIONS, config => value, ...): topic configs such as retention.ms
	sub create_topic ($self, $name, $partitions, %config)
	{
		return $self->admin('create', $name, $partitions, map { "$_=$config{$_}" } sort keys %config);
	}
	sub add_partitions ($self, $name, $count) { return $self->admin('partitions', $name, $count) }
	sub delete_topic ($self, $name) { return $self->admin('delete', $name) }
	sub set_config ($self, $name, %config) { return $self->admin('config', $name, map { "$_=$config{$_}" } sort keys %config) }
	# delete_records(TOPIC, PARTITION, OFFSET): the messages before OFFSET are
	# gone, as when retention deletes a segment (the log start offset moves)
	# (LOW, HIGH): the first offset a partition holds, and its end as a
	# read_committed consumer sees it (the last stable offset: before the
	# first message of a transaction still open)
	sub watermarks ($self, $name, $partition) { return split ' ', $self->admin('offsets', $name, $partition) }
	# the log's end: HIGH as a read_uncommitted consumer sees it
	sub log_end ($self, $name, $partition)
	{
		return (split ' ', $self->admin('-X', 'isolation.level=read_uncommitted', 'offsets', $name, $partition))[1];
	}
	sub delete_records ($self, $name, $partition, $offset) { return $self->admin('truncate', $name, $partition, $offset) }

	# A crash (SIGKILL) and a restart on the same ports and data: the real
	# broker's "down" and "up" (clients see their connections reset, then
	# refused, as with the embedded broker's).  The broker has one id.
	sub down ($self, $id = 'all')
	{
		$self->_script('kill');
		$self->{running} = 0;
		return 1;
	}

	sub up ($self, $id = 'all')
	{
		$self->_start unless $self->{running};
		return 1;
	}

	# { codec => record batches } of a partition as the broker stored it
	sub batch_codecs ($self, $topic, $partition)
	{
		my ($out, $err) = ('', '');
		IPC::Run::run([ 'bash', 'scripts/kafka.sh', 'codecs', $self->{dir}, $topic, $partition ],
			'<', \undef, '>', \$out, '2>', \$err)
		  or croak "scripts/kafka.sh codecs failed:\n$err";
		return { map { (split ' ')[1] => (split ' ')[0] } split /\n/, $out };
	}

	# Kafka's own consumer-group tool: { "TOPIC PARTITION" => [ CURRENT-OFFSET, LOG-END-OFFSET, LAG ] }
	sub group ($self, $group)
	{
		my ($out, $err) = ('', '');
		IPC::Run::run([ 'bash', 'scripts/kafka.sh', 'group', $self->{dir}, $group ],
			'<', \undef, '>', \$out, '2>', \$err)
		  or croak "scripts/kafka.sh group failed:\n$err";
		return { map { my @f = split ' '; ("$f[0] $f[1]" => [ @f[ 2 .. 4 ] ]) } split /\n/, $out };
	}

	sub pause ($self) { $self->_script('pause'); return 1 }
	sub resume ($self) { $self->_script('resume'); return 1 }

	# The embedded broker's commands that mean something here.
	sub control ($self, $cmd)
	{
		my @w = split ' ', $cmd;
		return $self->create_topic($w[1], $w[2]) if $w[0] eq 'topic' && @w == 3;
		return $self->down if $w[0] eq 'down';
		return $self->up if $w[0] eq 'up';
		croak "\"$cmd\" is a command of the embedded broker only (SdpKafka::needs_embedded)";
	}

	sub signal ($self, $sig)
	{
		return $self->down if $sig eq 'USR1';
		return $self->up if $sig eq 'USR2';
		croak "SIG$sig is the embedded broker's";
	}

	sub stop ($self)
	{
		$self->_script('stop') if $self->{running};
		$self->{running} = 0;
		return 0;
	}

	sub DESTROY ($self)
	{
		return unless $self->{owner} && $self->{owner} == $$ && $self->{running};
		local ($?, $@);
		eval { $self->_script('stop') };
	}
}

# ---------------------------------------------------------------------------
# The flight simulator
# ---------------------------------------------------------------------------

sub _flightsim_command (%args)
{
	croak "bootstrap and topic are required"
	  unless defined $args{bootstrap} && defined $args{topic};
	my @args = @{ $args{args} // [] };
	# Apache Kafka answers each produce request in turn on a connection: a
	# request per message (linger.ms 0, what the embedded broker's tests
	# want) backs up for tens of seconds on a busy two-core machine.  Batch
	# for 5 ms, as producers do (librdkafka's own default).
	unshift @args, '--linger-ms', '5'
	  if kind() eq 'apache' && !grep { $_ eq '--linger-ms' } @args;
	# The embedded broker answers every connection from one thread: on a
	# loaded machine it has left one producer's requests unanswered past the
	# default 30 s while it served another producer (tests 082 and 083, CI of
	# 2026-12-05), and the producer then gave up on 711 messages.  The
	# simulators wait for it as long as a test may run, unless a test sets
	# its own timeout; a request sent again after a timeout would be a
	# duplicate (no idempotence), so the request timeout is as long.
	unshift @args, '--message-timeout-ms', '300000', '-X', 'request.timeout.ms=240000'
	  if kind() ne 'apache' && !grep { $_ eq '--message-timeout-ms' } @args;
	return [
		_tool($args{tool} // 'flight_sim'), '--bootstrap', $args{bootstrap},
		'--topic', $args{topic}, @args
	];
}

# Turn flight_sim's output into its report; dies unless it is usable.
sub _flightsim_report ($stdout, $stderr, $status, $allow_failure)
{
	my ($last) = grep { /\S/ } reverse split /\n/, $stdout;
	my $report = eval { JSON::PP::decode_json($last // '') };
	my $exit = $status == -1 ? -1 : ($status & 127) ? 128 + ($status & 127) : $status >> 8;
	croak "flight_sim failed (status $status) without a report:\n$stderr"
	  unless ref $report eq 'HASH';
	croak "flight_sim exited with code $exit:\n$stderr"
	  if $exit != 0 && !$allow_failure;
	$report->{exit_code} = $exit;
	$report->{stderr} = $stderr;
	return $report;
}

# The payments simulator (tools/payment_sim) runs the same way.
sub run_paymentsim (%args)   { return run_flightsim(%args, tool => 'payment_sim') }
sub start_paymentsim (%args) { return start_flightsim(%args, tool => 'payment_sim') }

sub run_flightsim (%args)
{
	my $cmd = _flightsim_command(%args);
	my ($out, $err) = ('', '');
	my $timeout = $args{timeout} // 120;
	eval {
		IPC::Run::run($cmd, '<', \undef, '>', \$out, '2>', \$err,
			IPC::Run::timeout($timeout));
		1;
	} or croak "flight_sim did not finish within $timeout s: $@\n$err";
	return _flightsim_report($out, $err, $?, $args{allow_failure});
}

sub start_flightsim (%args)
{
	my $dir = _work_dir($args{dir});
	my $n = ++$flightsim_serial;
	my $self = bless {
		out => "$dir/flightsim-$n.out",
		err => "$dir/flightsim-$n.err",
		owner => $$,
	  },
	  'SdpKafka::FlightSim';
	$self->{pid} = _spawn(_flightsim_command(%args), $self->{out}, $self->{err});
	return $self;
}

package SdpKafka::FlightSim
{
	use Carp qw(croak);

	sub pid ($self) { return $self->{pid} }

	sub running ($self)
	{
		return 0 unless $live_children{ $self->{pid} };
		my $status = SdpKafka::_reap($self->{pid}, 0);
		return 1 unless defined $status;
		$self->{status} = $status;
		return 0;
	}

	sub signal ($self, $sig) { return CORE::kill $sig, $self->{pid} }

	sub finish ($self, %opt)
	{
		my $timeout = $opt{timeout} // 120;
		unless (defined $self->{status})
		{
			$self->{status} = SdpKafka::_reap($self->{pid}, $timeout);
			unless (defined $self->{status})
			{
				$self->kill;
				croak "flight_sim did not finish within $timeout s";
			}
		}
		return SdpKafka::_flightsim_report(
			SdpKafka::_slurp($self->{out}),
			SdpKafka::_slurp($self->{err}),
			$self->{status}, $opt{allow_failure});
	}

	sub stop ($self, %opt)
	{
		CORE::kill 'TERM', $self->{pid} unless defined $self->{status};
		return $self->finish(%opt, allow_failure => 1);
	}

	sub kill ($self)
	{
		return if defined $self->{status};
		CORE::kill 'KILL', $self->{pid};
		$self->{status} = SdpKafka::_reap($self->{pid}, 5) // -1;
		return;
	}

	sub DESTROY ($self)
	{
		$self->kill
		  if $self->{owner} && $self->{owner} == $$ && !defined $self->{status};
	}
}

# ---------------------------------------------------------------------------
# kcat
# ---------------------------------------------------------------------------

sub _kcat_properties ($props)
{
	return map { ('-X', "$_=$props->{$_}") } sort keys %{ $props // {} };
}

# The kcat command line for kcat_consume and start_kcat_consume.
sub _kcat_consume_command (%args)
{
	croak "bootstrap and topic are required"
	  unless defined $args{bootstrap} && defined $args{topic};
	my @cmd = (
		'kcat', '-C', '-q', '-b', $args{bootstrap}, '-t', $args{topic},
		'-o', $args{offset} // 'beginning',
		# a Fetch without data waits this long on the mock broker
		'-X', 'fetch.wait.max.ms=20',
		# come back within half a second of a broker outage
		'-X', 'reconnect.backoff.max.ms=500',
		# as a sink's consumers read it (an aborted Kafka transaction is invisible)
		(($args{properties} // {})->{'isolation.level'} ? () : ('-X', 'isolation.level=read_committed')),
		_kcat_properties($args{properties}));
	push @cmd, '-e' unless $args{wait};
	push @cmd, '-E' if $args{keep_going};
	push @cmd, '-c', $args{count} if defined $args{count};
	push @cmd, '-p', $args{partition} if defined $args{partition};
	push @cmd, $args{json} ? ('-J') : ('-f', '%p %o %T %K %S\n%k%s\n');
	return \@cmd;
}

sub _parse_kcat_output ($out, $json)
{
	return $json ? _parse_kcat_json($out) : _parse_kcat_format($out);
}

sub kcat_consume (%args)
{
	croak "wait => 1 needs a count" if $args{wait} && !defined $args{count};
	my $cmd = _kcat_consume_command(%args);
	my $timeout = $args{timeout} // $PostgreSQL::Test::Utils::timeout_default;
	my ($out, $err) = ('', '');
	eval {
		IPC::Run::run($cmd, '<', \undef, '>', \$out, '2>', \$err,
			IPC::Run::timeout($timeout));
		1;
	} or croak "kcat did not finish within $timeout s: $@\n$err";
	croak "kcat failed (status $?):\n$err" if $? != 0;
	return _parse_kcat_output($out, $args{json});
}

sub start_kcat_consume (%args)
{
	croak "start_kcat_consume needs a count" unless defined $args{count};
	my $dir = _work_dir($args{dir});
	my $n = ++$kcat_serial;
	my $self = bless {
		out => "$dir/kcat-$n.out",
		err => "$dir/kcat-$n.err",
		json => $args{json},
		owner => $$,
	  },
	  'SdpKafka::Kcat';
	$self->{pid} = _spawn(
		_kcat_consume_command(%args, wait => 1, keep_going => 1),
		$self->{out}, $self->{err});
	return $self;
}

package SdpKafka::Kcat
{
	use Carp qw(croak);

	sub pid ($self) { return $self->{pid} }

	sub finish ($self, %opt)
	{
		my $timeout = $opt{timeout} // $PostgreSQL::Test::Utils::timeout_default;
		my $status = SdpKafka::_reap($self->{pid}, $timeout);
		unless (defined $status)
		{
			$self->kill;
			croak "kcat did not finish within $timeout s";
		}
		$self->{done} = 1;
		croak "kcat failed (status $status):\n" . SdpKafka::_slurp($self->{err})
		  if $status != 0;
		return SdpKafka::_parse_kcat_output(SdpKafka::_slurp($self->{out}),
			$self->{json});
	}

	sub kill ($self)
	{
		return if $self->{done}++;
		CORE::kill 'KILL', $self->{pid};
		SdpKafka::_reap($self->{pid}, 5);
		return;
	}

	sub DESTROY ($self)
	{
		$self->kill if $self->{owner} && $self->{owner} == $$;
	}
}

# Parse '%p %o %T %K %S\n%k%s\n' records, using the lengths.
sub _parse_kcat_format ($out)
{
	my @msgs;
	my $pos = 0;
	my $len = length $out;
	while ($pos < $len)
	{
		my $nl = index($out, "\n", $pos);
		croak "kcat output: no header at byte $pos" if $nl < 0;
		my $header = substr($out, $pos, $nl - $pos);
		my ($p, $o, $t, $klen, $vlen) =
		  $header =~ /^(\d+) (\d+) (-?\d+) (-?\d+) (-?\d+)$/
		  or croak "kcat output: bad header \"$header\" at byte $pos";
		$pos = $nl + 1;
		my $key = $klen >= 0 ? substr($out, $pos, $klen) : undef;
		$pos += $klen if $klen > 0;
		my $payload = $vlen >= 0 ? substr($out, $pos, $vlen) : undef;
		$pos += $vlen if $vlen > 0;
		croak "kcat output: record at offset $o not terminated"
		  unless substr($out, $pos, 1) eq "\n";
		$pos++;
		push @msgs,
		  {
			partition => $p + 0,
			offset => $o + 0,
			timestamp_ms => $t + 0,
			key => $key,
			payload => $payload,
		  };
	}
	return @msgs;
}

sub _parse_kcat_json ($out)
{
	my $json = JSON::PP->new->utf8(1);
	my @msgs;
	for my $line (split /\n/, $out)
	{
		next unless $line =~ /\S/;
		my $m = $json->decode($line);
		my ($key, $payload) = ($m->{key}, $m->{payload});
		utf8::encode($key) if defined $key;
		utf8::encode($payload) if defined $payload;
		push @msgs,
		  {
			partition => $m->{partition},
			offset => $m->{offset},
			timestamp_ms => $m->{ts},
			timestamp_type => $m->{tstype},
			key => $key,
			payload => $payload,
		  };
	}
	return @msgs;
}

sub kcat_produce (%args)
{
	croak "bootstrap and topic are required"
	  unless defined $args{bootstrap} && defined $args{topic};
	my $messages = $args{messages} // [];
	my $timeout = $args{timeout} // $PostgreSQL::Test::Utils::timeout_default;

	# kcat takes one partition per run, and -Z (empty means NULL) for a
	# whole run: split the list into runs that keep the order.
	my @runs;
	for my $m (@$messages)
	{
		my ($key, $payload, $partition) = @$m;
		for my $field ($key, $payload)
		{
			croak "kcat_produce: key or payload contains 0x1e or 0x1f"
			  if defined $field && $field =~ /[\x1e\x1f]/;
		}
		my $needs_null = !defined $key || !defined $payload;
		my $has_empty =
		  (defined $key && $key eq '') || (defined $payload && $payload eq '');
		my $part = $partition // -1;
		my $run = $runs[-1];
		if (!$run
			|| $run->{partition} != $part
			|| ($needs_null && $run->{has_empty})
			|| ($has_empty && $run->{null}))
		{
			$run = { partition => $part, null => 0, has_empty => 0, input => '' };
			push @runs, $run;
		}
		$run->{null} ||= $needs_null;
		$run->{has_empty} ||= $has_empty;
		$run->{input} .= ($key // '') . "\x1f" . ($payload // '') . "\x1e";
	}

	for my $run (@runs)
	{
		my @cmd = (
			'kcat', '-P', '-q', '-b', $args{bootstrap}, '-t', $args{topic},
			'-K', '\x1f', '-D', '\x1e',
			'-X', 'partitioner=murmur2_random',
			_kcat_properties($args{properties}));
		push @cmd, '-p', $run->{partition} if $run->{partition} >= 0;
		push @cmd, '-Z' if $run->{null};
		push @cmd, map { ('-H', $_) } @{ $args{headers} // [] };
		my ($out, $err) = ('', '');
		eval {
			IPC::Run::run(\@cmd, '<', \$run->{input}, '>', \$out, '2>', \$err,
				IPC::Run::timeout($timeout));
			1;
		} or croak "kcat -P did not finish within $timeout s: $@\n$err";
		croak "kcat -P failed (status $?):\n$err" if $? != 0;
	}
	return scalar @$messages;
}

1;
