=pod

=head1 NAME

SdpHostileRegistry - an HTTP server that answers as a hostile schema registry would

=head1 SYNOPSIS

  use lib 'test/perl';
  use SdpHostileRegistry;

  my $registry = SdpHostileRegistry->start(answers => {
      '/schemas/ids/1' => { body => $json },                  # 200, Content-Type of a registry
      '/schemas/ids/2' => { body => $json, delay => 60 },     # answered 60 s late
  });
  my $url = $registry->url;              # http://127.0.0.1:PORT
  my $n = $registry->requests('/schemas/ids/1');   # how often it was asked
  $registry->stop;

=head1 DESCRIPTION

A schema registry is a third party a flow's owner names: whatever it answers
reaches the worker.  This one answers what the test says, byte for byte (a
path it does not know: 404 with the registry's own "not found" error code
40403), each connection in a process of its own (so a delayed answer does
not hold up the others), and closes the connection after each answer.  It
writes the path of each request to a log it reads back for requests().
It stops when the test process exits, even if the test dies.

=cut

package SdpHostileRegistry;

use strict;
use warnings FATAL => 'all';
use Carp;
use File::Temp ();
use IO::Socket::INET;
use POSIX ();
use Time::HiRes ();

sub start
{
	my ($class, %args) = @_;
	my $answers = $args{answers} // {};
	my $listen = IO::Socket::INET->new(
		LocalAddr => '127.0.0.1', LocalPort => 0, Proto => 'tcp',
		Listen => 32, ReuseAddr => 1)
	  or croak "could not listen on 127.0.0.1: $!";
	my $log = File::Temp->new(TEMPLATE => 'hostile_registry_XXXXXX', TMPDIR => 1, UNLINK => 1);
	my $log_path = $log->filename;
	my $parent = $$;
	my $pid = fork;
	croak "fork failed: $!" unless defined $pid;
	if ($pid == 0)
	{
		$SIG{CHLD} = 'IGNORE';
		$listen->timeout(1);
		while (getppid() == $parent)
		{
			my $conn = $listen->accept or next;
			my $child = fork;
			if (defined $child && $child == 0)
			{
				_serve($conn, $answers, $log_path);
				POSIX::_exit(0);
			}
			close $conn;
		}
		POSIX::_exit(0);
	}
	my $port = $listen->sockport;
	close $listen;
	return bless { pid => $pid, port => $port, log => $log, log_path => $log_path }, $class;
}

sub _serve
{
	my ($conn, $answers, $log_path) = @_;
	my $request = '';
	while ($request !~ /\r\n\r\n/)
	{
		my $n = sysread($conn, my $chunk, 4096);
		return unless $n;
		$request .= $chunk;
	}
	my ($path) = $request =~ m{^[A-Z]+ (\S+) HTTP/} or return;
	if (open my $fh, '>>', $log_path)
	{
		print $fh "$path\n";
		close $fh;
	}
	my $a = $answers->{$path};
	my ($status, $body) = $a
	  ? ($a->{status} // 200, $a->{body})
	  : (404, '{"error_code": 40403, "message": "Schema not found"}');
	Time::HiRes::sleep($a->{delay}) if $a && $a->{delay};
	my $reason = $status == 200 ? 'OK' : 'Not Found';
	my $response = "HTTP/1.1 $status $reason\r\n"
	  . "Content-Type: application/vnd.schemaregistry.v1+json\r\n"
	  . "Content-Length: " . length($body) . "\r\n"
	  . "Connection: close\r\n\r\n" . $body;
	while (length $response)
	{
		my $n = syswrite($conn, $response);
		last unless $n;
		substr($response, 0, $n) = '';
	}
	close $conn;
}

sub url { my ($self) = @_; return "http://127.0.0.1:$self->{port}" }

sub requests
{
	my ($self, $path) = @_;
	open my $fh, '<', $self->{log_path} or return 0;
	my $n = grep { chomp; $_ eq $path } <$fh>;
	close $fh;
	return $n;
}

sub stop
{
	my ($self) = @_;
	return unless $self->{pid};
	kill 'TERM', $self->{pid};
	waitpid($self->{pid}, 0);
	$self->{pid} = undef;
}

sub DESTROY { my ($self) = @_; $self->stop if $self->{pid} && $$ != $self->{pid} }

1;
