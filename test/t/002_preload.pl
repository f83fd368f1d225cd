# sdp_ext refuses to work unless it is in shared_preload_libraries, and says
# how to fix it.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('nopreload');
$node->init;
$node->start;
my ($ret, $out, $err) = $node->psql('postgres', 'CREATE EXTENSION sdp_ext');
isnt($ret, 0, 'CREATE EXTENSION fails without the preload');
like($err, qr/sdp_ext must be loaded via shared_preload_libraries/, 'with a clear error');
like($err, qr/HINT:  Add sdp_ext to shared_preload_libraries in postgresql.conf and restart the server/, 'and a hint');
($ret, $out, $err) = $node->psql('postgres', "LOAD 'sdp_ext'");
like($err, qr/sdp_ext must be loaded via shared_preload_libraries/, 'LOAD is refused the same way');
is($node->safe_psql('postgres', 'SELECT 1'), '1', 'the server is unaffected');
$node->stop;
done_testing();
