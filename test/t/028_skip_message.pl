# sdp_skip_message: the way past a message a flow keeps failing on for a
# reason it cannot pin on the message (here a trigger raising disk_full,
# 53100, for one payload: never isolated, retried for ever).  The owner
# asks to skip it; the flow sets it aside as a dead letter (stage 'skipped')
# at the next retry, at once rather than after the backoff, and goes on.
# Only the owner may ask, and not for a message already processed.  A skip
# for a message not yet read applies when it arrives.  After a restart
# nothing is written or dead-lettered twice, also by a stateful flow that
# replays the skipped message from its checkpoint.  The flows start on a 0.1
# catalog, which has no skip requests; their workers take requests after
# ALTER EXTENSION UPDATE without a restart.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;
use Time::HiRes qw(time);

my $broker = SdpKafka::start_broker(topics => { 'stuck' => 1, 'zskip' => 1 });
my $node = SdpTest::new_node('skip');
my $boot = $broker->bootstrap;
SdpTest::query($node, <<"SQL");
DROP EXTENSION sdp_ext;
CREATE EXTENSION sdp_ext VERSION '0.1';
CREATE ROLE app LOGIN;
CREATE ROLE mallory LOGIN;
CREATE FUNCTION refused(stmt text) RETURNS text LANGUAGE plpgsql AS \$\$
DECLARE st text; msg text;
BEGIN
  EXECUTE stmt;
  RETURN 'accepted';
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
  RETURN st || ': ' || msg;
END \$\$;
CREATE TABLE stuck (seq bigint, kafka_partition int, kafka_offset bigint);
CREATE FUNCTION no_room_for_five() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
  IF NEW.seq = 5 THEN
    RAISE EXCEPTION 'no room for seq 5' USING ERRCODE = 'disk_full';
  END IF;
  RETURN NEW;
END \$\$;
CREATE TRIGGER no_room BEFORE INSERT ON stuck FOR EACH ROW EXECUTE FUNCTION no_room_for_five();
CREATE TABLE zones (zone text PRIMARY KEY, min_lat float8, max_lat float8, min_lon float8, max_lon float8, capacity int);
INSERT INTO zones VALUES ('Z', 10, 11, 10, 11, 100);
CREATE TABLE zone_alerts (zone text PRIMARY KEY, aircraft_count bigint, crowded boolean, updated_at timestamptz);
GRANT SELECT, INSERT, UPDATE ON stuck, zone_alerts TO app;
GRANT SELECT ON zones TO app;
SET ROLE app;
SELECT sdp_create_source('stuck', '$boot', 'stuck', '@{[ SdpTest::source_options(q({"starting_offsets": "earliest"})) ]}');
SELECT sdp_create_source('zskip', '$boot', 'zskip', '@{[ SdpTest::source_options(q({"starting_offsets": "earliest"})) ]}');
SELECT sdp_create_flow('stuck', 'stuck', 'stuck', 'seq bigint', options => '{"mode": "append"}');
SELECT sdp_create_flow('zone_flow', source => 'zskip', target => 'zone_alerts',
  schema    => 'icao24 text, lat float8, lon float8',
  transform => \$\$SELECT z.zone, i.icao24, z.capacity FROM input i
                 JOIN zones z ON i.lat BETWEEN z.min_lat AND z.max_lat
                             AND i.lon BETWEEN z.min_lon AND z.max_lon\$\$,
  operator  => 'active_count',
  options   => '{"key": "zone", "member": "icao24", "ttl": "1 hour", "capacity_column": "capacity",
                 "count_column": "aircraft_count", "alert_column": "crowded", "checkpoint_interval": "1 hour"}');
RESET ROLE;
SQL

sub produce
{
	my ($topic, @seqs) = @_;
	SdpKafka::kcat_produce(bootstrap => $boot, topic => $topic,
		messages => [ map { [ "k$_", qq({"seq": $_}) ] } @seqs ]);
}

sub as_role
{
	my ($role, $sql) = @_;
	return SdpTest::query($node, "SET ROLE $role; SELECT refused(\$q\$$sql\$q\$)");
}

# 1. Messages 0..4 go through, on 0.1; then the update, with the flows running.
produce('stuck', 0 .. 4);
ok(SdpTest::wait_consumed($node, 'stuck', 5), '0.1: the flow consumed messages 0..4');
my $pids = SdpTest::query($node, "SELECT string_agg(pid::text, ',' ORDER BY flow) FROM sdp.flow_status");
SdpTest::query($node, "ALTER EXTENSION sdp_ext UPDATE TO '0.2'");
is(SdpTest::query($node, "SELECT extversion FROM pg_extension WHERE extname = 'sdp_ext'"), '0.2', 'updated to 0.2');

# 2. Refusals.
like(as_role('app', "SELECT sdp_skip_message('stuck', 0, 3)"),
	qr/^22023: flow "stuck" has already processed partition 0 offset 3$/, 'a message already processed: 22023');
like(as_role('mallory', "SELECT sdp_skip_message('stuck', 0, 7)"),
	qr/^42501: must be owner of flow "stuck"$/, 'another role: 42501');
like(as_role('app', "SELECT sdp_skip_message('nope', 0, 7)"),
	qr/^42704: flow "nope" does not exist$/, 'an unknown flow: 42704');
like(as_role('app', "SELECT sdp_skip_message('stuck', -1, 7)"), qr/^22023: invalid message position/,
	'a negative partition: 22023');
like(as_role('app', "SELECT sdp_skip_message('stuck', 0, -7)"), qr/^22023: invalid message position/,
	'a negative offset: 22023');
is(SdpTest::query($node, 'SELECT count(*) FROM sdp.skipped_messages'), '0', 'none of them recorded a request');

# 3. Message 5 fails every attempt for a reason that is not its data: the
# flow retries for ever, with the messages that arrive meanwhile held back.
my $log_offset = -s $node->logfile;
produce('stuck', 5);
ok(SdpTest::wait_for($node, "SELECT state = 'retrying' AND last_error LIKE '%no room for seq 5%' FROM sdp.flow_status WHERE flow = 'stuck'"),
	'message 5 leaves the flow retrying');
produce('stuck', 6 .. 9);
# retried with a growing backoff, now 12.8 s
$node->wait_for_log(qr/sdp flow "stuck": batch of 5 messages not written, retrying in 12800 ms: no room for seq 5/, $log_offset);
is(SdpTest::query($node, 'SELECT count(*) FROM stuck'), '5', 'nothing after message 4 is written while it retries');
is(SdpTest::query($node, "SELECT count(*) FROM sdp.dead_letters WHERE flow = 'stuck'"), '0', 'nothing is dead-lettered');

# 4. The owner skips it: applied at once, not after the backoff.
my $t0 = time;
is(as_role('app', "SELECT sdp_skip_message('stuck', 0, 5)"), 'accepted', 'the owner asks to skip message 5');
ok(SdpTest::wait_consumed($node, 'stuck', 10), 'the flow consumed messages 5..9');
my $elapsed = time - $t0;
cmp_ok($elapsed, '<', 8, "the skip applied within the backoff's 12.8 s (took ${elapsed}s)");
is(SdpTest::query($node, "SELECT string_agg(seq || ':' || kafka_offset, ',' ORDER BY seq) FROM stuck"),
	'0:0,1:1,2:2,3:3,4:4,6:6,7:7,8:8,9:9', 'every other message is written once');
is(SdpTest::query($node, "SELECT kafka_partition || '|' || kafka_offset || '|' || kafka_key || '|' || payload_text || '|' || stage || '|' "
	  . "|| error || '|' || coalesce(sqlstate, 'none') || '|' || (kafka_timestamp IS NOT NULL) "
	  . "FROM sdp.dead_letters WHERE flow = 'stuck'"),
	'0|5|k5|{"seq": 5}|skipped|skipped by role "app" with sdp_skip_message()|none|true',
	'message 5 is dead-lettered once, as skipped, with its key, payload and timestamp');
is(SdpTest::query($node, "SELECT state || '|' || coalesce(last_error, '') || '|' || rows_written || '|' || rows_dead_lettered "
	  . "FROM sdp.flow_status WHERE flow = 'stuck'"),
	'running||9|1', 'the flow runs again, with no error, and counts the dead letter');
is(SdpTest::query($node, "SELECT f.name || '|' || s.kafka_partition || '|' || s.kafka_offset || '|' || s.requested_by "
	  . "FROM sdp.skipped_messages s JOIN sdp.flows f ON f.id = s.flow_id"),
	'stuck|0|5|app', 'the request is kept in sdp.skipped_messages');
like(as_role('app', "SELECT sdp_skip_message('stuck', 0, 5)"), qr/^22023: .*already processed/,
	'skipping it again is refused: it is processed now');

# 5. A skip for a message not yet read applies when it arrives.
is(as_role('app', "SELECT sdp_skip_message('stuck', 0, 12)"), 'accepted', 'the owner asks to skip offset 12 ahead');
produce('stuck', 10 .. 14);
ok(SdpTest::wait_consumed($node, 'stuck', 15), 'the flow consumed messages 10..14');
is(SdpTest::query($node, "SELECT string_agg(seq::text, ',' ORDER BY seq) FROM stuck WHERE seq >= 10"),
	'10,11,13,14', 'offset 12 is not written');
is(SdpTest::query($node, "SELECT string_agg(kafka_offset || ':' || stage, ',' ORDER BY kafka_offset) FROM sdp.dead_letters WHERE flow = 'stuck'"),
	'5:skipped,12:skipped', 'it is dead-lettered as skipped');

# 6. A stateful flow: aircraft a1..a4 enter zone Z, a3 skipped ahead.
is(as_role('app', "SELECT sdp_skip_message('zone_flow', 0, 2)"), 'accepted', 'the owner of the stateful flow skips offset 2 ahead');
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'zskip',
	messages => [ map { [ "a$_", qq({"icao24": "a$_", "lat": 10.5, "lon": 10.5}) ] } 1 .. 4 ]);
ok(SdpTest::wait_consumed($node, 'zone_flow', 4), 'the stateful flow consumed its 4 messages');
is(SdpTest::query($node, "SELECT aircraft_count FROM zone_alerts WHERE zone = 'Z'"), '3', 'the skipped aircraft is not counted');
is(SdpTest::query($node, "SELECT string_agg(pid::text, ',' ORDER BY flow) FROM sdp.flow_status"), $pids,
	'by the workers started on 0.1, without a restart');

# 7. A restart: nothing written or dead-lettered twice; the stateful flow
# replays from its checkpoint (none within the hour) and skips again.
$log_offset = -s $node->logfile;
$node->stop;
$node->start;
ok(SdpTest::wait_for($node, "SELECT count(*) = 2 FROM sdp.flow_status WHERE state = 'running' AND partitions IS NOT NULL"),
	'both flows run again after the restart');
produce('stuck', 15, 16);
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'zskip',
	messages => [ [ 'a5', '{"icao24": "a5", "lat": 10.5, "lon": 10.5}' ] ]);
ok(SdpTest::wait_consumed($node, 'stuck', 17), 'the flow consumed messages 15 and 16');
ok(SdpTest::wait_consumed($node, 'zone_flow', 5), 'the stateful flow consumed its fifth message');
$node->wait_for_log(qr/sdp flow "zone_flow" set partition 0 offset 2 aside unprocessed/, $log_offset);
is(SdpTest::query($node, "SELECT count(*) || '|' || count(DISTINCT seq) || '|' || string_agg(seq::text, ',' ORDER BY seq) FROM stuck"),
	'15|15|0,1,2,3,4,6,7,8,9,10,11,13,14,15,16', 'every message but the two skipped is in the target once');
is(SdpTest::query($node, "SELECT aircraft_count FROM zone_alerts WHERE zone = 'Z'"), '4',
	'the replayed stateful flow counts a1, a2, a4 and a5, not the skipped a3');
is(SdpTest::query($node, "SELECT flow || ':' || kafka_offset || ':' || stage FROM sdp.dead_letters ORDER BY flow, kafka_offset"),
	"stuck:5:skipped\nstuck:12:skipped\nzone_flow:2:skipped", 'each skipped message is dead-lettered once');
is(SdpTest::query($node, "SELECT 'sdp.skipped_messages'::regclass = ANY (extconfig) FROM pg_extension WHERE extname = 'sdp_ext'"),
	't', 'pg_dump keeps the skip requests (an extension configuration table)');

done_testing();
