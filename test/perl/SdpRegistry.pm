=pod

=head1 NAME

SdpRegistry - a schema registry and an Avro producer for sdp_ext TAP tests

=head1 SYNOPSIS

  use lib 'test/perl';
  use SdpKafka;
  use SdpRegistry;

  SdpRegistry::needs_registry();          # skip the file if it cannot run here
  my $broker = SdpKafka::start_broker(topics => { orders => 2 });
  my $registry = SdpRegistry::start();    # or (basic_auth => 1, tls => 1)
  my $summary = SdpRegistry::avro_produce(
      registry => $registry, bootstrap => $broker->bootstrap, topic => 'orders',
      value_schema => { type => 'record', name => 'Order', fields => [
          { name => 'id', type => 'long' },
          { name => 'amount', type => { type => 'bytes', logicalType => 'decimal',
                                        precision => 10, scale => 2 } } ] },
      records => [ { key => 'k1', value => { id => 1, amount => { '$decimal' => '12.30' } } },
                   { key => 'k2', raw_hex => '0000000001ff' } ]);
  my $id = $summary->{schema_ids}{'orders-value'};
  my $schema = $registry->schema($id);             # the schema's JSON text
  $registry->set_compatibility('orders-value', 'BACKWARD');
  $registry->start_again;                          # same port, every schema forgotten
  $registry->stop;

=head1 DESCRIPTION

The registry is Apicurio Registry's Confluent-compatible API, run by
F<scripts/registry.sh> (which needs C<bash scripts/registry.sh fetch> once per
machine, as root); the producer is F<tools/avro_produce.py>, Confluent's
Python client and AvroSerializer in the venv of F<scripts/pyavro.sh> (built
once per machine, as root; C<$ENV{SDP_PYAVRO}> to use another).  The
registry takes 10 to 20 s to start: start one per test file.  Its storage is
in memory.  Every registry started here is stopped when the test process
exits, even if the test dies or is killed (it watches the test's pid).

=over

=item missing()

Why a registry or the producer cannot run here (a sentence), or undef.

=item needs_registry()

Skips the whole test file, with that reason, if missing() has one.

=item start(basic_auth => 0, tls => 0, port => undef, dir => DIR)

Starts a registry with its configuration and log in DIR (default: a
temporary directory, kept with SDP_KAFKA_KEEP=1) and returns once its ccompat
API answers.  basic_auth: every request needs HTTP basic credentials (user
and password below; the 401 carries no challenge, so clients must send them
first).  tls: HTTPS only, with a certificate signed by ca_file.  port: that
port instead of a free one.  Dies, with the reason, if it cannot start.  The
object has:

  ->url                the ccompat base URL, http(s)://127.0.0.1:PORT/apis/ccompat/v7
  ->port, ->pid, ->log (its log so far), ->version (Apicurio's)
  ->user, ->password   with basic_auth, else undef; ->user_info "user:password"
  ->ca_file            with tls, the CA that signed its certificate, else undef
  ->request(METHOD, PATH, BODY)  a request to url . PATH (BODY: a Perl structure,
                       sent as JSON); returns (HTTP status, decoded JSON or the text)
  ->register(SUBJECT, SCHEMA)    registers SCHEMA (a Perl structure or its JSON
                       text) under SUBJECT; returns its id, dies on an error
  ->schema(ID)         the schema text of id ID (GET /schemas/ids/ID), undef if unknown
  ->set_compatibility(SUBJECT, LEVEL)  PUT /config/SUBJECT: NONE, BACKWARD, ...
                       (Apicurio's default is NONE, Confluent's BACKWARD)
  ->stop               SIGTERM, wait for the exit (SIGKILL after 30 s)
  ->start_again        stop, then start on the same port and options: the schemas
                       are gone (in memory), and ids start again at 1

=item avro_produce(registry => $registry, bootstrap => ..., topic => ..., records => [...], ...)

Runs F<tools/avro_produce.py> with the spec made of the arguments (see the
tool for its keys and the JSON conventions of logical types: C<< {'$decimal'
=> '1.50'} >>, C<< {'$timestamp' => '2026-01-02T03:04:05.123456Z'} >>, ...).
A registry object fills registry, registry_user_info and registry_ca.
Returns the tool's summary: {delivered, failed, schema_ids => {SUBJECT =>
ID}, records => [{partition, offset, key_schema_id, value_schema_id,
key_hex, value_hex, error}]}.  Dies if the tool fails, unless allow_failure
is true (then exit_code and stderr are in the summary).  Numbers must be
numbers in Perl (JSON::PP writes a scalar last used as a string as a
string): write 1, not '1'.

=back

=cut

package SdpRegistry;

use v5.36;

use Carp qw(croak);
use Cwd qw(getcwd);
use File::Spec;
use File::Temp qw(tempdir);
use IPC::Run ();
use JSON::PP ();

my $owner_pid = $$;
my %live;			# dir => registry object still running (weakened: DESTROY stops it too)
my $serial = 0;
my $default_dir;

sub _json { return JSON::PP->new->utf8(1)->canonical(1)->allow_nonref(1) }

sub _pyavro { return $ENV{SDP_PYAVRO} // '/var/cache/sdp_ext/pyavro' }

# scripts/ and tools/ of the tree the test runs in (prove runs from its root)
sub _root { return getcwd() }

sub _script (@args)
{
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run([ 'bash', File::Spec->catfile(_root(), 'scripts', 'registry.sh'), @args ],
		'<', \undef, '>', \$out, '2>', \$err);
	return ($ok, $out, $err);
}

sub missing
{
	my ($ok, $out, $err) = _script('check');
	unless ($ok)
	{
		$err =~ s/^==> //mg;
		$err =~ s/\s+\z//;
		return "no schema registry: $err";
	}
	my $venv = _pyavro();
	return "no Avro producer: $venv is not built (run bash scripts/pyavro.sh as root)"
	  unless -x "$venv/bin/python" && -f "$venv/.sdp-built";
	return undef;
}

sub needs_registry
{
	my $why = missing();
	Test::More::plan(skip_all => $why) if defined $why;
	return;
}

sub start (%opts)
{
	$default_dir //= tempdir('sdp_registry_XXXXXX', TMPDIR => 1, CLEANUP => !$ENV{SDP_KAFKA_KEEP});
	my $dir = $opts{dir} // "$default_dir/registry-" . ++$serial;
	mkdir $dir unless -d $dir;
	my $self = bless { dir => $dir, opts => {%opts}, owner => $$ }, 'SdpRegistry::Registry';
	$self->_start;
	return $self;
}

sub avro_produce (%args)
{
	my $allow_failure = delete $args{allow_failure};
	my $timeout = delete $args{timeout_s} // 120;
	if (ref $args{registry})
	{
		my $r = delete $args{registry};
		$args{registry} = $r->url;
		$args{registry_user_info} = $r->user_info if defined $r->user_info;
		$args{registry_ca} = $r->ca_file if defined $r->ca_file;
	}
	my $python = _pyavro() . '/bin/python';
	croak "no Avro producer: " . _pyavro() . " is not built (run bash scripts/pyavro.sh as root)"
	  unless -x $python;
	my $tool = File::Spec->catfile(_root(), 'tools', 'avro_produce.py');
	my $in = _json()->encode(\%args);
	my ($out, $err) = ('', '');
	eval {
		IPC::Run::run([ $python, $tool, '-' ], '<', \$in, '>', \$out, '2>', \$err,
			IPC::Run::timeout($timeout));
		1;
	} or croak "avro_produce.py did not finish within $timeout s: $@\n$err";
	my $status = $?;
	my $exit = ($status & 127) ? 128 + ($status & 127) : $status >> 8;
	my ($last) = grep { /\S/ } reverse split /\n/, $out;
	my $summary = eval { _json()->decode($last // '') };
	croak "avro_produce.py failed (exit $exit):\n$err"
	  if !$allow_failure && ($exit != 0 || ref $summary ne 'HASH');
	$summary = {} unless ref $summary eq 'HASH';
	$summary->{exit_code} = $exit;
	$summary->{stderr} = $err;
	return $summary;
}

END
{
	local $?;
	if ($$ == $owner_pid)
	{
		$_->stop for grep { defined && $_->{running} } values %live;
	}
}

package SdpRegistry::Registry
{
	use Carp qw(croak);
	use Scalar::Util qw(weaken);

	sub _start ($self)
	{
		my @args = ('start', $self->{dir}, '--exit-with', $$);
		push @args, '--basic-auth' if $self->{opts}{basic_auth};
		push @args, '--tls' if $self->{opts}{tls};
		local %ENV = %ENV;
		$ENV{SDP_REGISTRY_PORT} = $self->{opts}{port} if defined $self->{opts}{port};
		my ($ok, $out, $err) = SdpRegistry::_script(@args);
		croak "scripts/registry.sh start failed:\n$err" unless $ok;
		$self->{env} = { $out =~ /^(REGISTRY_\w+)=(.*)$/mg };
		$self->{running} = 1;
		$live{ $self->{dir} } = $self;
		weaken($live{ $self->{dir} });
		return;
	}

	sub url ($self) { return $self->{env}{REGISTRY_URL} }
	sub port ($self) { return $self->{env}{REGISTRY_PORT} }
	sub pid ($self) { return $self->{env}{REGISTRY_PID} }
	sub version ($self) { return $self->{env}{REGISTRY_VERSION} }
	sub user ($self) { return $self->{env}{REGISTRY_USER} }
	sub password ($self) { return $self->{env}{REGISTRY_PASSWORD} }
	sub ca_file ($self) { return $self->{env}{REGISTRY_CA} }
	sub dir ($self) { return $self->{dir} }

	sub user_info ($self)
	{
		return defined $self->user ? $self->user . ':' . $self->password : undef;
	}

	sub log ($self)
	{
		open(my $fh, '<', $self->{env}{REGISTRY_LOG}) or return '';
		local $/;
		return scalar <$fh>;
	}

	# (status, decoded body) of a request with curl (the registry may be HTTPS,
	# which HTTP::Tiny cannot do without IO::Socket::SSL)
	sub request ($self, $method, $path, $body = undef)
	{
		my @cmd = ('curl', '-s', '-X', $method, '--max-time', '30', '-w', '\n%{http_code}',
			'-H', 'Content-Type: application/vnd.schemaregistry.v1+json');
		push @cmd, '--cacert', $self->ca_file if defined $self->ca_file;
		push @cmd, '-u', $self->user_info if defined $self->user_info;
		my $in = defined $body ? SdpRegistry::_json()->encode($body) : '';
		push @cmd, '--data-binary', '@-' if defined $body;
		push @cmd, $self->url . $path;
		my ($out, $err) = ('', '');
		IPC::Run::run(\@cmd, '<', \$in, '>', \$out, '2>', \$err)
		  or croak "curl $method $path failed (status $?): $err";
		my ($text, $code) = $out =~ /\A(.*)\n(\d+)\z/s
		  or croak "curl $method $path: no status in \"$out\"";
		my $decoded = eval { SdpRegistry::_json()->decode($text) } // $text;
		return ($code + 0, $decoded);
	}

	sub register ($self, $subject, $schema)
	{
		my $text = ref $schema ? SdpRegistry::_json()->encode($schema) : $schema;
		my ($code, $res) = $self->request('POST', "/subjects/$subject/versions", { schema => $text });
		croak "registering under $subject: HTTP $code: " . SdpRegistry::_json()->encode($res)
		  unless $code == 200 && ref $res eq 'HASH' && defined $res->{id};
		return $res->{id};
	}

	sub schema ($self, $id)
	{
		my ($code, $res) = $self->request('GET', "/schemas/ids/$id");
		return undef if $code == 404;
		croak "GET /schemas/ids/$id: HTTP $code" unless $code == 200 && ref $res eq 'HASH';
		return $res->{schema};
	}

	sub set_compatibility ($self, $subject, $level)
	{
		my ($code, $res) = $self->request('PUT', "/config/$subject", { compatibility => $level });
		croak "PUT /config/$subject: HTTP $code" unless $code == 200;
		return $res;
	}

	sub stop ($self)
	{
		return 0 unless $self->{running};
		my ($ok, $out, $err) = SdpRegistry::_script('stop', $self->{dir});
		$self->{running} = 0;
		delete $live{ $self->{dir} };
		croak "scripts/registry.sh stop failed:\n$err" unless $ok;
		return 0;
	}

	sub start_again ($self)
	{
		$self->stop;
		$self->_start;
		return $self;
	}

	sub DESTROY ($self)
	{
		return unless $self->{owner} && $self->{owner} == $$ && $self->{running};
		local ($?, $@);
		eval { $self->stop };
	}
}

1;
