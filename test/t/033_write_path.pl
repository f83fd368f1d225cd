# The write path: a batch is written by multi-insert (as COPY writes) where
# the target allows it, and by the INSERT plan where it does not.  Either
# way what users rely on holds, each checked here against the path the log
# says the flow takes: AFTER row and statement triggers (with a transition
# table), BEFORE row triggers, defaults (constant, nextval, now(), and a
# volatile one), stored generated columns, check / not-null / foreign-key
# constraints with their exact dead letters, partitioned targets and a
# partition as the target, row-level security as the owner, upsert (new
# keys, existing keys, a concurrent inserter of the same key), and notify.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;
use Time::HiRes ();

my $broker = SdpKafka::start_broker(topics =>
	  { plain => 2, checked => 1, before => 1, parted => 1, p2 => 1, vol => 1, rls => 2, latest => 3, latest_st => 2 });
my $boot = $broker->bootstrap;
my $node = SdpTest::new_node('write_path');

SdpTest::query($node, <<'SQL');
CREATE ROLE app LOGIN;
CREATE TABLE audit (seq bigint);
CREATE TABLE stmts (n bigint);
CREATE FUNCTION audit_row() RETURNS trigger LANGUAGE plpgsql AS
  $$BEGIN INSERT INTO audit VALUES (NEW.seq); RETURN NULL; END$$;
CREATE FUNCTION count_new() RETURNS trigger LANGUAGE plpgsql AS
  $$BEGIN INSERT INTO stmts SELECT count(*) FROM new_rows; RETURN NULL; END$$;
CREATE FUNCTION count_new_st() RETURNS trigger LANGUAGE plpgsql AS
  $$BEGIN INSERT INTO stmts_st VALUES (1); RETURN NULL; END$$;
CREATE TABLE stmts_st (n int);
CREATE FUNCTION double_it() RETURNS trigger LANGUAGE plpgsql AS
  $$BEGIN NEW.doubled := NEW.seq * 2; RETURN NEW; END$$;

CREATE SEQUENCE plain_ids;
CREATE TABLE plain (seq bigint, note text DEFAULT 'n', id bigint DEFAULT nextval('plain_ids'),
                    made timestamptz DEFAULT now(), twice bigint GENERATED ALWAYS AS (seq * 2) STORED,
                    kafka_partition int, kafka_offset bigint);
CREATE TRIGGER audit_row AFTER INSERT ON plain FOR EACH ROW EXECUTE FUNCTION audit_row();
CREATE TRIGGER count_new AFTER INSERT ON plain REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION count_new();

CREATE TABLE parents (id int PRIMARY KEY);
INSERT INTO parents VALUES (1);
CREATE TABLE checked (seq bigint NOT NULL CHECK (seq % 10 <> 3), ref int REFERENCES parents (id),
                      kafka_partition int, kafka_offset bigint);

CREATE TABLE before_t (seq bigint, doubled bigint, kafka_partition int, kafka_offset bigint);
CREATE TRIGGER double_it BEFORE INSERT ON before_t FOR EACH ROW EXECUTE FUNCTION double_it();

CREATE TABLE parted (seq bigint, kafka_partition int, kafka_offset bigint) PARTITION BY RANGE (seq);
CREATE TABLE parted_lo PARTITION OF parted FOR VALUES FROM (0) TO (50);
CREATE TABLE parted_hi PARTITION OF parted FOR VALUES FROM (50) TO (100);
CREATE TABLE parted2 (seq bigint, kafka_partition int, kafka_offset bigint) PARTITION BY RANGE (seq);
CREATE TABLE p2_lo PARTITION OF parted2 FOR VALUES FROM (0) TO (50);
CREATE TABLE p2_hi PARTITION OF parted2 FOR VALUES FROM (50) TO (100);

CREATE TABLE vol (seq bigint, at timestamptz DEFAULT clock_timestamp(), kafka_partition int, kafka_offset bigint);

CREATE TABLE guarded (seq bigint, kafka_partition int, kafka_offset bigint);
ALTER TABLE guarded ENABLE ROW LEVEL SECURITY;
CREATE POLICY seq_rule ON guarded TO app USING (true) WITH CHECK (seq % 7 <> 3);
GRANT SELECT, INSERT ON guarded TO app;

CREATE TABLE latest (k text PRIMARY KEY, v int, kafka_partition int, kafka_offset bigint);
CREATE TABLE latest_ops (op text, k text);
CREATE FUNCTION note_op() RETURNS trigger LANGUAGE plpgsql AS
  $$BEGIN INSERT INTO latest_ops VALUES (left(TG_OP, 1), NEW.k); RETURN NULL; END$$;
CREATE TRIGGER note_ins AFTER INSERT ON latest FOR EACH ROW EXECUTE FUNCTION note_op();
CREATE TRIGGER note_upd AFTER UPDATE ON latest FOR EACH ROW EXECUTE FUNCTION note_op();

CREATE TABLE latest_st (k text PRIMARY KEY, v int);
CREATE TRIGGER count_st AFTER INSERT ON latest_st FOR EACH STATEMENT EXECUTE FUNCTION count_new_st();
SQL

# Every message is produced before its flow starts: a first batch of many rows.
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'plain',
	messages => [ map { [ "p$_", qq({"seq": $_}), $_ % 2 ] } 0 .. 499 ]);
my @checked = map { [ "c$_", sprintf('{"seq": %d, "ref": %d}', $_, $_ % 25 == 7 ? 999 : 1), 0 ] } 0 .. 99;
push @checked, map { [ "n$_", '{"seq": null, "ref": 1}', 0 ] } 0 .. 2;
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'checked', messages => \@checked);
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'before',
	messages => [ map { [ "b$_", qq({"seq": $_}), 0 ] } 0 .. 49 ]);
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'parted',
	messages => [ map { [ "t$_", qq({"seq": $_}), 0 ] } 0 .. 99, 150 ]);
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'p2',
	messages => [ map { [ "q$_", qq({"seq": $_}), 0 ] } 0 .. 59 ]);
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'vol',
	messages => [ map { [ "v$_", qq({"seq": $_}), 0 ] } 0 .. 49 ]);
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'rls',
	messages => [ map { [ "r$_", qq({"seq": $_}), $_ % 2 ] } 0 .. 99 ]);
my @latest;
for my $v (0 .. 19)
{
	push @latest, [ "k$_", qq({"k": "k$_", "v": $v}), undef ] for 0 .. 49;
}
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'latest', messages => \@latest);
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'latest_st', messages => \@latest);

my $listener = $node->background_psql('postgres');
$listener->query_safe('LISTEN sdp_written');

my $source_options = SdpTest::source_options('{"starting_offsets": "earliest"}');
my $sources = join '', map { "SELECT sdp_create_source('$_', '$boot', '$_', '$source_options');\n" }
  qw(plain checked before parted p2 vol latest latest_st);
SdpTest::query($node, <<"SQL");
$sources
SELECT sdp_create_flow('plain', 'plain', 'plain', 'seq bigint', options => '{"mode": "append", "notify": "sdp_written"}');
SELECT sdp_create_flow('checked', 'checked', 'checked', 'seq bigint, ref int', options => '{"mode": "append"}');
SELECT sdp_create_flow('before', 'before', 'before_t', 'seq bigint', options => '{"mode": "append"}');
SELECT sdp_create_flow('parted', 'parted', 'parted', 'seq bigint', options => '{"mode": "append"}');
SELECT sdp_create_flow('p2', 'p2', 'p2_lo', 'seq bigint', options => '{"mode": "append"}');
SELECT sdp_create_flow('vol', 'vol', 'vol', 'seq bigint', options => '{"mode": "append"}');
SELECT sdp_create_flow('latest', 'latest', 'latest', 'k text, v int', options => '{"mode": "upsert"}');
SELECT sdp_create_flow('latest_st', 'latest_st', 'latest_st', 'k text, v int', options => '{"mode": "upsert"}');
SET ROLE app;
SELECT sdp_create_source('rls', '$boot', 'rls', '@{[ SdpTest::source_options(q({"starting_offsets": "earliest"})) ]}');
SELECT sdp_create_flow('guarded', 'rls', 'guarded', 'seq bigint', options => '{"mode": "append"}');
RESET ROLE;
SQL

ok(SdpTest::wait_consumed($node, 'plain', 500), 'plain: 500 messages consumed');
ok(SdpTest::wait_consumed($node, 'checked', 103), 'checked: 103 messages consumed');
ok(SdpTest::wait_consumed($node, 'before', 50), 'before: 50 messages consumed');
ok(SdpTest::wait_consumed($node, 'parted', 101), 'parted: 101 messages consumed');
ok(SdpTest::wait_consumed($node, 'p2', 60), 'p2: 60 messages consumed');
ok(SdpTest::wait_consumed($node, 'vol', 50), 'vol: 50 messages consumed');
ok(SdpTest::wait_consumed($node, 'guarded', 100), 'guarded: 100 messages consumed');
ok(SdpTest::wait_consumed($node, 'latest', 1000), 'latest: 1000 messages consumed');
ok(SdpTest::wait_consumed($node, 'latest_st', 1000), 'latest_st: 1000 messages consumed');

# Which path each flow takes, from the line its worker logs when it starts.
my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile);
my %path = (
	plain => [ 'public.plain', qr/multi-insert/ ],
	checked => [ 'public.checked', qr/multi-insert/ ],
	before => [ 'public.before_t', qr/an INSERT statement: the target has BEFORE or INSTEAD OF row triggers/ ],
	parted => [ 'public.parted', qr/an INSERT statement: the target is partitioned/ ],
	p2 => [ 'public.p2_lo', qr/multi-insert/ ],
	vol => [ 'public.vol', qr/an INSERT statement: a column the flow does not write has a volatile default/ ],
	guarded => [ 'public.guarded', qr/an INSERT statement: row-level security applies/ ],
	latest => [ 'public.latest', qr/multi-insert/ ],
	latest_st => [ 'public.latest_st', qr/an INSERT statement: in upsert mode, the target has statement triggers/ ]);
for my $flow (sort keys %path)
{
	my ($target, $how) = @{ $path{$flow} };
	like($log, qr/sdp flow "$flow" writes into \Q$target\E by $how/, "$flow: the log names its write path");
}
unlike($log, qr/sdp flow "(plain|checked|p2|latest)" writes into \S+ by an INSERT/,
	'no multi-insert flow changed to the plan while running');

# Append with triggers, defaults and a generated column: exact rows.
SdpTest::assert_exactly_once($node, 'plain', { 0 => 250, 1 => 250 }, 'plain');
is(SdpTest::query($node, "SELECT count(*) FROM plain WHERE twice = seq * 2 AND note = 'n' AND made IS NOT NULL"),
	'500', 'plain: the generated column and the defaults are filled in');
is(SdpTest::query($node, 'SELECT count(DISTINCT id) || \'|\' || min(id) || \'|\' || max(id) FROM plain'), '500|1|500',
	'plain: nextval() gives each row its own id');
is(SdpTest::query($node, 'SELECT count(*) || \'|\' || count(DISTINCT seq) || \'|\' || min(seq) || \'|\' || max(seq) FROM audit'),
	'500|500|0|499', 'plain: the AFTER ROW trigger saw every row once');
is(SdpTest::query($node, 'SELECT sum(n) FROM stmts'), '500',
	'plain: the AFTER STATEMENT trigger fired, and its transition table held every row once');
is(SdpTest::query($node, 'SELECT count(*) FROM stmts WHERE n = 0'), '0', 'plain: no statement without rows');

# Constraints: exactly the bad rows are dead-lettered, exactly the others written.
my @bad_check = grep { $_ % 10 == 3 } 0 .. 99;
my @bad_fk = grep { $_ % 25 == 7 } 0 .. 99;
my %bad = map { $_ => 1 } @bad_check, @bad_fk;
my $expected_dead = join ',', map { $_->[0] . ':' . $_->[1] } sort { $a->[0] <=> $b->[0] }
  (map { [ $_, '23514' ] } @bad_check), (map { [ $_, '23503' ] } @bad_fk), (map { [ $_, '23502' ] } 100 .. 102);
is(SdpTest::query($node, "SELECT string_agg(kafka_offset || ':' || sqlstate, ',' ORDER BY kafka_offset) "
	  . "FROM sdp.dead_letters WHERE flow = 'checked' AND stage = 'write'"),
	$expected_dead, 'checked: check, foreign-key and not-null violations dead-lettered, each with its SQLSTATE');
is(SdpTest::query($node, "SELECT string_agg(seq::text, ',' ORDER BY seq) FROM checked"),
	join(',', grep { !$bad{$_} } 0 .. 99), 'checked: every other row written, once');
is(SdpTest::query($node, "SELECT count(*) FROM checked WHERE kafka_offset <> seq"), '0', 'checked: each with its offset');

# A BEFORE ROW trigger: the plan path, the trigger's change is stored.
is(SdpTest::query($node, 'SELECT count(*) || \'|\' || count(*) FILTER (WHERE doubled = seq * 2) || \'|\' || count(DISTINCT seq) FROM before_t'),
	'50|50|50', 'before: every row written once, as the BEFORE trigger changed it');

# Partitioned target: routed; the row no partition takes is dead-lettered.
is(SdpTest::query($node, "SELECT (SELECT count(*) FROM parted_lo) || '|' || (SELECT count(*) FROM parted_hi) || '|' || "
	  . "(SELECT count(DISTINCT seq) FROM parted)"), '50|50|100', 'parted: each row in its partition, once');
is(SdpTest::query($node, "SELECT string_agg(kafka_offset || ':' || sqlstate, ',') FROM sdp.dead_letters WHERE flow = 'parted'"),
	'100:23514', 'parted: the row with no partition is dead-lettered');

# A partition as the target: its partition constraint is checked.
is(SdpTest::query($node, "SELECT count(*) || '|' || count(DISTINCT seq) || '|' || max(seq) FROM p2_lo"), '50|50|49',
	'p2: the rows inside the partition are written');
is(SdpTest::query($node, "SELECT count(*) || '|' || min(kafka_offset) || '|' || max(kafka_offset) || '|' || min(sqlstate) || '|' || max(sqlstate) "
	  . "FROM sdp.dead_letters WHERE flow = 'p2'"), '10|50|59|23514|23514',
	'p2: the rows outside it are dead-lettered');
is(SdpTest::query($node, 'SELECT count(*) FROM p2_hi'), '0', 'p2: and not routed elsewhere');

# A volatile default: the plan path evaluates it per row.
is(SdpTest::query($node, "SELECT count(*) || '|' || count(DISTINCT seq) || '|' || count(at) FROM vol"), '50|50|50',
	'vol: every row written once, with its default');

# Row-level security as the owner: the plan path applies the policy.
my $rejected = grep { $_ % 7 == 3 } 0 .. 99;
is(SdpTest::query($node, "SELECT count(*) || '|' || count(*) FILTER (WHERE seq % 7 = 3) FROM guarded"), (100 - $rejected) . '|0',
	'guarded: the rows the WITH CHECK policy allows are written, no other');
is(SdpTest::query($node, "SELECT count(*) || '|' || count(DISTINCT (kafka_partition, kafka_offset)) || '|' || min(sqlstate) || '|' || max(sqlstate) "
	  . "FROM sdp.dead_letters WHERE flow = 'guarded'"), "$rejected|$rejected|42501|42501",
	'guarded: each rejected row dead-lettered once, with 42501');

# Upsert: the last version of each key, then new and existing keys in one batch.
is(SdpTest::query($node, 'SELECT count(*) || \'|\' || min(v) || \'|\' || max(v) FROM latest'), '50|19|19',
	'latest: one row per key, with its last version');
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'latest',
	messages => [ map { [ "k$_", qq({"k": "k$_", "v": 100}), undef ] } 25 .. 74 ]);
ok(SdpTest::wait_consumed($node, 'latest', 1050), 'latest: 50 more consumed');
is(SdpTest::query($node, "SELECT count(*) || '|' || count(*) FILTER (WHERE v = 19) || '|' || count(*) FILTER (WHERE v = 100) FROM latest"),
	'75|25|50', 'latest: 25 keys updated, 25 inserted, 25 untouched');
is(SdpTest::query($node, "SELECT count(*) FROM latest WHERE v = 100 AND substr(k, 2)::int NOT BETWEEN 25 AND 74"), '0',
	'latest: exactly the keys of the second round');
is(SdpTest::query($node, "SELECT count(*) || '|' || count(DISTINCT k) FROM latest_ops WHERE op = 'I'"), '75|75',
	'latest: the AFTER INSERT row trigger fired once for each new key');
is(SdpTest::query($node, "SELECT count(DISTINCT k) FROM latest_ops WHERE op = 'U' AND substr(k, 2)::int BETWEEN 25 AND 49"), '25',
	'latest: the AFTER UPDATE row trigger fired for each key updated by the second round');

# Upsert into a target with a statement trigger: the plan path, one statement per batch.
is(SdpTest::query($node, 'SELECT count(*) || \'|\' || min(v) || \'|\' || max(v) FROM latest_st'), '50|19|19',
	'latest_st: one row per key, with its last version');
is(SdpTest::query($node, 'SELECT count(*) > 0 FROM stmts_st'), 't', 'latest_st: the statement trigger fired');

# A concurrent inserter of a key the batch brings: the flow waits for it
# and then updates its row (the key is seen while it is being inserted).
my $inserter = $node->background_psql('postgres');
$inserter->query_safe("BEGIN; INSERT INTO latest VALUES ('kx', -1)");
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'latest', messages => [ [ 'kx', '{"k": "kx", "v": 7}', 0 ] ]);
ok(SdpTest::wait_for($node, "SELECT count(*) > 0 FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted"),
	'latest: the flow waits for the concurrent insert of its key');
$inserter->query_safe('COMMIT');
$inserter->quit;
ok(SdpTest::wait_consumed($node, 'latest', 1051), 'latest: the message is consumed');
is(SdpTest::query($node, "SELECT v FROM latest WHERE k = 'kx'"), '7', 'latest: the flow\'s version wins, in one row');

# A round of updates only (the plan writes it), then new keys again.
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'latest',
	messages => [ map { [ "k$_", qq({"k": "k$_", "v": 200}), undef ] } 0 .. 74 ]);
ok(SdpTest::wait_consumed($node, 'latest', 1126), 'latest: 75 updates consumed');
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'latest',
	messages => [ map { [ "k$_", qq({"k": "k$_", "v": 300}), undef ] } 75 .. 79 ]);
ok(SdpTest::wait_consumed($node, 'latest', 1131), 'latest: 5 new keys consumed');
is(SdpTest::query($node, "SELECT count(*) || '|' || count(*) FILTER (WHERE v = 200) || '|' || count(*) FILTER (WHERE v = 300) || '|' || "
	  . "(SELECT v FROM latest WHERE k = 'kx') FROM latest"), '81|75|5|7',
	'latest: every key updated once more, the new ones inserted, kx untouched');
is(SdpTest::query($node, "SELECT count(*) || '|' || count(DISTINCT k) FROM latest_ops WHERE op = 'I' AND k <> 'kx'"), '80|80',
	'latest: the AFTER INSERT row trigger fired once for each key ever inserted by the flow');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.dead_letters WHERE flow = 'latest'"), '0', 'latest: nothing dead-lettered');

# notify: each batch that wrote rows tells the listener how many.
my ($notified, $payloads) = (0, 0);
my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
while ($notified < 500 && time < $deadline)
{
	my $out = $listener->query('SELECT 1');
	while ($out =~ /Asynchronous notification "sdp_written" with payload "(.*?)" received/g)
	{
		my $p = $1;
		$payloads++;
		$notified += $1 if $p =~ /^\{"flow": "plain", "target": "public.plain", "rows": (\d+)\}$/;
	}
	Time::HiRes::usleep(200_000) if $notified < 500;
}
is($notified, 500, 'notify: the batches\' notifications add up to the 500 rows written');
$listener->quit;

is(SdpTest::query($node, "SELECT string_agg(flow || ':' || state, ',' ORDER BY flow) FROM sdp.flow_status"),
	'before:running,checked:running,guarded:running,latest:running,latest_st:running,p2:running,parted:running,plain:running,vol:running',
	'every flow is running');

done_testing();
