=pod

=head1 NAME

SdpConnect - Kafka Connect with Debezium's PostgreSQL connector for sdp_ext
TAP tests: real change events (CDC) of a PostgreSQL table in a topic

=head1 SYNOPSIS

  use lib 'test/perl';
  use SdpConnect;
  use SdpKafka;
  use SdpTest;

  SdpKafka::needs_apache('Kafka Connect needs Apache Kafka');
  SdpConnect::needs_connect();            # skip the file if it cannot run here
  my $broker = SdpKafka::start_broker();
  # the source database: logical decoding, reached over TCP (JDBC has no Unix sockets)
  my $pg = SdpTest::new_node('source', SdpConnect::node_conf());
  $pg->safe_psql('postgres', 'CREATE TABLE items(id int PRIMARY KEY, name text, qty int)');
  my $connect = SdpConnect::start(bootstrap => $broker->bootstrap);
  $connect->add_postgres_connector(name => 'items', node => $pg, dbname => 'postgres',
      tables => ['public.items'], topic_prefix => 'cdc', schemas_enable => 0,
      'decimal.handling.mode' => 'string');
  $connect->wait_running('items');        # connector and task RUNNING (snapshot under way)
  # ... DML on $pg; the events arrive in topic cdc.public.items
  my $st = $connect->status('items');     # { connector => 'RUNNING', tasks => ['RUNNING'], ... }
  $connect->kill;                         # a crash (SIGKILL)
  $connect->start_again;                  # same port; connectors added again, offsets kept
  $connect->stop;

=head1 DESCRIPTION

The worker is a Kafka Connect standalone worker run by F<scripts/connect.sh>
(which needs C<bash scripts/connect.sh fetch> once per machine, as root),
with Debezium's PostgreSQL connector as a plugin.  It needs Apache Kafka
(F<scripts/kafka.sh>, SdpKafka with SDP_KAFKA=apache): the embedded broker is
not a broker Connect can use.  It takes 4 to 6 s to start, a connector 2 to 4
s more to be RUNNING.  Every worker started here is stopped when the test
process exits, even if the test dies or is killed (it watches the test's
pid).

Each connector has its own replication slot and publication (named after the
connector), which stay in the database after the worker stops: a connector
added again with the same name resumes from the slot and from the worker's
offsets.  The events are Debezium's envelope (before, after, source, op,
ts_ms; op is r for the snapshot, c, u, d) with the table's primary key as the
key; a delete is followed by a tombstone (the key, a null value) unless
tombstones.on.delete is false, and an update of the key is a delete, its
tombstone and a create.  Debezium's defaults encode numeric as bytes
(decimal.handling.mode=precise: base64 of the unscaled value, and a struct
{scale, value} for a numeric without a scale) and timestamp, date and time as
numbers (time.precision.mode=adaptive: microseconds since the epoch, days,
microseconds since midnight); timestamptz is always an ISO 8601 string.
decimal.handling.mode=string or double and time.precision.mode=isostring give
plain JSON strings and numbers.

=over

=item missing()

Why a Connect worker cannot run here (a sentence), or undef.

=item needs_connect()

Skips the whole test file, with that reason, if missing() has one.

=item node_conf()

The postgresql.conf settings a source node needs, as a list of pairs for
SdpTest::new_node(NAME, ...) (or append_conf): wal_level logical, a TCP
listener on 127.0.0.1 (beside the Unix socket the tests use) and replication
slots and senders to spare.

=item prepare_node($node)

Gives a running node those settings if it lacks them, restarting it.

=item start(bootstrap => HOST:PORT or a broker object, dir => DIR)

Starts a worker with its configuration, offsets and log in DIR (default: a
temporary directory, kept with SDP_KAFKA_KEEP=1) and returns once its REST
API answers.  Dies, with the reason, if it cannot start.  The object has:

  ->url                http://127.0.0.1:PORT (the REST API)
  ->port, ->pid, ->dir, ->log (its log so far), ->offsets_file
  ->request(METHOD, PATH, BODY)   a REST request (BODY: a Perl structure, sent as
                       JSON); returns (HTTP status, decoded JSON or the text)
  ->add_connector(NAME, CONFIG)   any connector (CONFIG: a hashref); kept in
                       DIR/connectors for start_again
  ->add_postgres_connector(...)   below; returns the config it sent
  ->delete_connector(NAME)
  ->status(NAME)       undef if there is no such connector, else {connector =>
                       STATE, tasks => [STATE, ...], traces => [TRACE, ...] (of
                       the failed tasks), raw => the decoded REST answer};
                       states are UNASSIGNED, RUNNING, PAUSED, FAILED, STOPPED
  ->wait_running(NAME, timeout => S)  until the connector and all its tasks (at
                       least one) are RUNNING; dies at once if one FAILED (with
                       its trace), or after S seconds (default
                       $PostgreSQL::Test::Utils::timeout_default)
  ->stop               SIGTERM, wait for the exit (SIGKILL after 30 s)
  ->kill               SIGKILL (a crash): offsets not yet flushed (every second)
                       are lost, so a restart sends some events again
  ->start_again        (stop first if running) start on the same DIR and port: the
                       connectors are added again and resume from the stored offsets

=item $connect->add_postgres_connector(name => N, node => $node, dbname => 'postgres', tables => ['public.items'], topic_prefix => 'cdc', schemas_enable => 1, user => U, password => P, %config)

Adds Debezium's PostgreSQL connector for the tables (table.include.list) of
the node's database, through its TCP listener (node_conf), as user U (default:
the node's bootstrap superuser; on a test node every local login is trusted)
with pgoutput, a publication made for those tables
(publication.autocreate.mode=filtered, so the user must own them or be a
superuser), an initial snapshot (snapshot.mode=initial) and JSON keys and
values (org.apache.kafka.connect.json.JsonConverter) with or without their
schemas (schemas_enable; JsonConverter's default is with).  Its topics
(TOPIC_PREFIX.SCHEMA.TABLE) are created by Connect with one partition.  Every
other key of %config (Debezium's or Connect's names, e.g.
'snapshot.mode' => 'no_data', 'decimal.handling.mode' => 'string',
'tombstones.on.delete' => 'false') is added, or replaces the default.

=back

=cut

package SdpConnect;

use v5.36;

use Carp qw(croak);
use Cwd qw(getcwd);
use File::Spec;
use File::Temp qw(tempdir);
use HTTP::Tiny;
use IPC::Run ();
use JSON::PP ();
use PostgreSQL::Test::Utils ();	# timeout_default: how long wait_running waits

my $owner_pid = $$;
my %live;			# dir => worker still running (weakened: DESTROY stops it too)
my $serial = 0;
my $default_dir;

sub _json { return JSON::PP->new->utf8(1)->canonical(1)->allow_nonref(1) }

# scripts/ of the tree the test runs in (prove runs from its root)
sub _root { return getcwd() }

sub _script (@args)
{
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run([ 'bash', File::Spec->catfile(_root(), 'scripts', 'connect.sh'), @args ],
		'<', \undef, '>', \$out, '2>', \$err);
	return ($ok, $out, $err);
}

sub missing
{
	my ($ok, $out, $err) = _script('check');
	return undef if $ok;
	$err =~ s/^==> //mg;
	$err =~ s/\s+\z//;
	return "no Kafka Connect: $err";
}

sub needs_connect
{
	my $why = missing();
	Test::More::plan(skip_all => $why) if defined $why;
	return;
}

sub node_conf
{
	return (
		wal_level => 'logical',
		listen_addresses => "'127.0.0.1'",
		max_replication_slots => 10,
		max_wal_senders => 10);
}

sub prepare_node ($node)
{
	my %want = node_conf();
	my $wal = $node->safe_psql('postgres', 'SHOW wal_level');
	my $listen = $node->safe_psql('postgres', 'SHOW listen_addresses');
	return 0 if $wal eq 'logical' && $listen =~ /127\.0\.0\.1|localhost|\*/;
	$node->append_conf('postgresql.conf', join '', map { "$_ = $want{$_}\n" } sort keys %want);
	$node->restart;
	return 1;
}

sub start (%opts)
{
	my $bootstrap = $opts{bootstrap} // croak 'start: bootstrap is required';
	$bootstrap = $bootstrap->bootstrap if ref $bootstrap;
	$default_dir //= tempdir('sdp_connect_XXXXXX', TMPDIR => 1, CLEANUP => !$ENV{SDP_KAFKA_KEEP});
	my $dir = $opts{dir} // "$default_dir/connect-" . ++$serial;
	mkdir $dir unless -d $dir;
	my $self = bless { dir => $dir, bootstrap => $bootstrap, owner => $$ }, 'SdpConnect::Worker';
	$self->_start;
	return $self;
}

END
{
	local $?;
	if ($$ == $owner_pid)
	{
		$_->stop for grep { defined && $_->{running} } values %live;
	}
}

package SdpConnect::Worker
{
	use Carp qw(croak);
	use Scalar::Util qw(weaken);
	use Time::HiRes qw(sleep time);

	sub _start ($self)
	{
		my ($ok, $out, $err) =
		  SdpConnect::_script('start', $self->{dir}, '--bootstrap', $self->{bootstrap}, '--exit-with', $$);
		croak "scripts/connect.sh start failed:\n$err" unless $ok;
		$self->{env} = { $out =~ /^(CONNECT_\w+)=(.*)$/mg };
		$self->{running} = 1;
		$live{ $self->{dir} } = $self;
		weaken($live{ $self->{dir} });
		return;
	}

	sub url ($self) { return $self->{env}{CONNECT_URL} }
	sub port ($self) { return $self->{env}{CONNECT_PORT} }
	sub pid ($self) { return $self->{env}{CONNECT_PID} }
	sub offsets_file ($self) { return $self->{env}{CONNECT_OFFSETS} }
	sub dir ($self) { return $self->{dir} }

	sub log ($self)
	{
		open(my $fh, '<', $self->{env}{CONNECT_LOG}) or return '';
		local $/;
		return scalar <$fh>;
	}

	sub request ($self, $method, $path, $body = undef)
	{
		my $http = HTTP::Tiny->new(timeout => 60);
		my %req = (headers => { Accept => 'application/json' });
		if (defined $body)
		{
			$req{content} = SdpConnect::_json()->encode($body);
			$req{headers}{'Content-Type'} = 'application/json';
		}
		my $res = $http->request($method, $self->url . $path, \%req);
		# HTTP::Tiny's own failures (no connection) are status 599
		my $decoded = eval { SdpConnect::_json()->decode($res->{content}) } // $res->{content};
		return ($res->{status}, $decoded);
	}

	sub add_connector ($self, $name, $config)
	{
		croak "a connector name is [A-Za-z0-9_.-]+, not \"$name\"" unless $name =~ /^[A-Za-z0-9_.-]+\z/;
		my $file = "$self->{dir}/tmp/$name.json";
		open(my $fh, '>', $file) or croak "cannot write $file: $!";
		print $fh SdpConnect::_json()->encode({ name => $name, config => { %$config, name => $name } });
		close $fh;
		my ($ok, $out, $err) = SdpConnect::_script('add', $self->{dir}, $file);
		croak "adding connector $name failed:\n$err" unless $ok;
		return $config;
	}

	sub add_postgres_connector ($self, %args)
	{
		my $name = delete $args{name} // croak 'add_postgres_connector: name is required';
		my $node = delete $args{node} // croak 'add_postgres_connector: node is required';
		my $dbname = delete $args{dbname} // 'postgres';
		my $tables = delete $args{tables} // croak 'add_postgres_connector: tables is required';
		my $prefix = delete $args{topic_prefix} // 'cdc';
		my $schemas = (delete $args{schemas_enable} // 1) ? 'true' : 'false';
		my $user = delete $args{user} // $node->safe_psql($dbname, 'SELECT current_user');
		my $password = delete $args{password};
		my $listen = $node->safe_psql($dbname, 'SHOW listen_addresses');
		croak "node " . $node->name . " has no TCP listener (listen_addresses '$listen'): "
		  . "give it SdpConnect::node_conf() or call SdpConnect::prepare_node"
		  unless $listen =~ /127\.0\.0\.1|localhost|\*/;
		my $wal = $node->safe_psql($dbname, 'SHOW wal_level');
		croak "node " . $node->name . " has wal_level $wal, not logical: "
		  . "give it SdpConnect::node_conf() or call SdpConnect::prepare_node"
		  unless $wal eq 'logical';
		# a replication slot name is [a-z0-9_]
		(my $slot = lc "sdp_$name") =~ s/[^a-z0-9_]/_/g;
		my %config = (
			'connector.class' => 'io.debezium.connector.postgresql.PostgresConnector',
			'tasks.max' => '1',
			'database.hostname' => '127.0.0.1',
			'database.port' => '' . $node->port,
			'database.user' => $user,
			defined $password ? ('database.password' => $password) : (),
			'database.dbname' => $dbname,
			'topic.prefix' => $prefix,
			'plugin.name' => 'pgoutput',
			'slot.name' => $slot,
			'publication.name' => "${slot}_pub",
			'publication.autocreate.mode' => 'filtered',
			'table.include.list' => join(',', ref $tables ? @$tables : $tables),
			'snapshot.mode' => 'initial',
			'key.converter' => 'org.apache.kafka.connect.json.JsonConverter',
			'value.converter' => 'org.apache.kafka.connect.json.JsonConverter',
			'key.converter.schemas.enable' => $schemas,
			'value.converter.schemas.enable' => $schemas,
			# the brokers do not create topics: Connect does, as the connector says
			'topic.creation.default.replication.factor' => '1',
			'topic.creation.default.partitions' => '1',
			map { ($_ => '' . $args{$_}) } keys %args);
		return $self->add_connector($name, \%config);
	}

	sub delete_connector ($self, $name)
	{
		my ($code, $res) = $self->request('DELETE', "/connectors/$name");
		croak "DELETE /connectors/$name: HTTP $code: " . SdpConnect::_json()->encode($res)
		  unless $code == 204 || $code == 200 || $code == 404;
		unlink "$self->{dir}/connectors/$name.json";
		return;
	}

	sub status ($self, $name)
	{
		my ($code, $res) = $self->request('GET', "/connectors/$name/status");
		return undef if $code == 404;
		croak "GET /connectors/$name/status: HTTP $code: " . SdpConnect::_json()->encode($res)
		  unless $code == 200 && ref $res eq 'HASH';
		my @tasks = @{ $res->{tasks} // [] };
		return {
			connector => $res->{connector}{state},
			tasks => [ map { $_->{state} } @tasks ],
			traces => [ map { $_->{trace} } grep { defined $_->{trace} } @tasks ],
			raw => $res,
		};
	}

	sub wait_running ($self, $name, %opt)
	{
		my $timeout = $opt{timeout} // $PostgreSQL::Test::Utils::timeout_default // 180;
		my $deadline = time() + $timeout;
		my $st;
		while (1)
		{
			$st = $self->status($name);
			if ($st)
			{
				croak "connector $name FAILED:\n" . ($st->{raw}{connector}{trace} // '')
				  if $st->{connector} eq 'FAILED';
				croak "a task of connector $name FAILED:\n" . join("\n", @{ $st->{traces} })
				  if grep { $_ eq 'FAILED' } @{ $st->{tasks} };
				return $st
				  if $st->{connector} eq 'RUNNING' && @{ $st->{tasks} }
				  && !grep { $_ ne 'RUNNING' } @{ $st->{tasks} };
			}
			croak "connector $name is not RUNNING after $timeout s: "
			  . ($st ? SdpConnect::_json()->encode($st->{raw}) : 'no such connector')
			  if time() > $deadline;
			sleep(0.1);
		}
	}

	sub _stop_with ($self, $how)
	{
		return 0 unless $self->{running};
		my ($ok, $out, $err) = SdpConnect::_script($how, $self->{dir});
		$self->{running} = 0;
		delete $live{ $self->{dir} };
		croak "scripts/connect.sh $how failed:\n$err" unless $ok;
		return 0;
	}

	sub stop ($self) { return $self->_stop_with('stop') }
	sub kill ($self) { return $self->_stop_with('kill') }

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
