# A real Debezium (issue 30): Kafka Connect with Debezium's PostgreSQL
# connector captures a table of a second PostgreSQL (logical decoding,
# pgoutput) into Apache Kafka, JSON with its schema, three partitions; a flow
# with "envelope": "debezium" applies the events into a replica table.
# 20,000 inserts, updates and deletes (primary keys changed too), the
# replica's postmaster SIGKILLed while they stream: the replica ends equal
# to the source table row for row, nothing dead-lettered.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use PostgreSQL::Test::Cluster;
use SdpConnect;
use SdpKafka;
use SdpTest;
use Test::More;
use Time::HiRes qw(usleep);

SdpKafka::needs_apache('Kafka Connect needs Apache Kafka');
SdpConnect::needs_connect();

my $topic = 'cdc.public.items';
my $broker = SdpKafka::start_broker(topics => { $topic => 3 });

# the captured database
my $src = PostgreSQL::Test::Cluster->new('source');
$src->init;
my %conf = SdpConnect::node_conf();
$src->append_conf('postgresql.conf', join '', map { "$_ = $conf{$_}\n" } sort keys %conf);
$src->start;
my $table = <<'SQL';
CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL, qty int, price numeric(10,2),
                    updated timestamptz, tags jsonb);
SQL
$src->safe_psql('postgres', $table);

# the replica, and its flow, before the connector starts
my $node = SdpTest::new_node('replica');
SdpTest::query($node, $table);
my $connect = SdpConnect::start(bootstrap => $broker);
$connect->add_postgres_connector(name => 'items', node => $src, dbname => 'postgres',
	tables => ['public.items'], topic_prefix => 'cdc', schemas_enable => 1,
	'decimal.handling.mode' => 'string');
$connect->wait_running('items');
# Debezium writes a json or jsonb column as a string of its text: declared
# text, and cast in the transform (a delete's image holds the key only)
SdpTest::create_source($node, 'items_cdc', $broker, $topic);
SdpTest::query($node, <<'SQL');
SELECT sdp_create_flow('items_replica', 'items_cdc', 'items',
  schema    => 'id int, name text, qty int, price numeric(10,2), updated timestamptz, tags text',
  transform => 'SELECT id, name, qty, price, updated, tags::jsonb AS tags FROM input',
  options   => '{"envelope": "debezium"}');
SQL
$src->safe_psql('postgres', "INSERT INTO items VALUES (0, 'first', 0, 0.00, '2026-01-01T00:00:00Z', '{}')");
ok(SdpTest::wait_for($node, "SELECT count(*) = 1 FROM items"), 'the first event applied');

# 20,000 changes in 40 rounds of 25 transactions: 250 inserts, 150
# updates (some rows twice, one key changed per round) and 100 deletes a
# round, rows of earlier rounds and of the same round alike
$src->safe_psql('postgres', <<'SQL');
CREATE PROCEDURE churn(round int) LANGUAGE plpgsql AS $$
DECLARE
  base int := round * 1000;
BEGIN
  FOR t IN 0..24 LOOP
    -- 10 inserts
    INSERT INTO items
      SELECT base + t * 10 + k, 'item ' || (base + t * 10 + k), k, (base + k) / 100.0,
             '2026-01-01T00:00:00Z'::timestamptz + (base + t * 10 + k) * interval '1 second',
             jsonb_build_object('round', round, 'k', k)
        FROM generate_series(0, 9) k;
    -- 6 updates: 3 rows of this round, 3 of the round before (or of this one)
    UPDATE items SET qty = qty + 100, name = name || ' u', updated = updated + interval '1 day'
     WHERE id IN (base + t * 10, base + t * 10 + 1, base + t * 10 + 2);
    UPDATE items SET price = price + 1, tags = tags || '{"updated": true}'
     WHERE id IN (SELECT id FROM items WHERE id BETWEEN greatest(round - 1, 0) * 1000 AND base + t * 10 + 9
                   ORDER BY (id::bigint * 7919) % 1009, id LIMIT 3);
    -- 4 deletes
    DELETE FROM items WHERE id IN (base + t * 10 + 3, base + t * 10 + 4);
    DELETE FROM items WHERE id IN (SELECT id FROM items WHERE id BETWEEN greatest(round - 1, 0) * 1000 AND base + t * 10 + 9
                                    AND id % 10 IN (5, 6) ORDER BY (id::bigint * 104729) % 1013, id LIMIT 2);
    COMMIT;
  END LOOP;
  -- a key changed: Debezium sends a delete of the old key and a create of the new
  UPDATE items SET id = id + 500000 WHERE id = base + 7;
  COMMIT;
END $$;
SQL

my $rounds = 40;
for my $r (1 .. $rounds)
{
	$src->safe_psql('postgres', "CALL churn($r)");
	if ($r == $rounds / 2)
	{
		# the replica's postmaster killed while the events stream in
		ok(SdpTest::wait_for($node, 'SELECT count(*) > 1000 FROM items'), 'the replica is applying');
		SdpTest::crash_and_restart($node);
		ok(1, "the replica's postmaster SIGKILLed and restarted at round $r");
	}
}
my $changes = $src->safe_psql('postgres',
	"SELECT (SELECT sum(n_tup_ins + n_tup_upd + n_tup_del) FROM pg_stat_user_tables WHERE relname = 'items')");
cmp_ok($changes, '>=', 20_000, "the source made $changes changes");

my $source_rows = $src->safe_psql('postgres', 'SELECT count(*) FROM items');
my $digest = q{SELECT count(*) || ' ' || md5(string_agg(format('%s|%s|%s|%s|%s|%s', id, name, qty, price, updated, tags), ',' ORDER BY id)) FROM items};
my $want = $src->safe_psql('postgres', $digest);
my $got = '';
my $deadline = time + 3 * $PostgreSQL::Test::Utils::timeout_default;
while (time < $deadline)
{
	$got = SdpTest::query($node, $digest);
	last if $got eq $want;
	usleep(500_000);
}
is($got, $want, "the replica equals the source: $source_rows rows, every column");
is(SdpTest::query($node, "SELECT count(*) FROM sdp.dead_letters"), '0', 'nothing dead-lettered');
is(SdpTest::query($node, "SELECT state || ' ' || rows_dead_lettered FROM sdp.flow_status WHERE flow = 'items_replica'"),
	'running 0', 'the flow running');
my ($min_id, $max_id) = split /\|/, $src->safe_psql('postgres', 'SELECT min(id), max(id) FROM items WHERE id > 500000');
ok(defined $max_id && $max_id > 500000, "keys changed by updates are there ($min_id .. $max_id)");

done_testing();
