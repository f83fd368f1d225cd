# A flow's error texts quote the values of its messages (issue 11, item
# 4).  As pg_stat_activity does with query texts, every role sees every flow
# in sdp.flow_status, but only the owner, members of the owner's role,
# members of pg_read_all_stats and superusers read last_error; others read
# '<insufficient privilege>'.  The same holds for sdp_flow_runtime(), and
# for the error of a failed flow, kept in sdp.flows.last_error, whose column
# other roles cannot select.
use strict;
use warnings FATAL => 'all';
use lib 'test/perl';
use SdpKafka;
use SdpTest;
use Test::More;

my $broker = SdpKafka::start_broker(topics => { 'payments' => 1 });
my $node = SdpTest::new_node('errvis');
my $boot = $broker->bootstrap;
my $card = '4111111111111111';

SdpTest::query($node, <<"SQL");
CREATE ROLE alice LOGIN;
CREATE ROLE alice_friend LOGIN IN ROLE alice;
CREATE ROLE bob LOGIN;
CREATE ROLE watcher LOGIN IN ROLE pg_read_all_stats;
CREATE TABLE payments (card text, amount numeric);
ALTER TABLE payments OWNER TO alice;
-- a check of the owner's that quotes the value and is not a data error
-- (55000, not P0001, which is one): the message is alone in its batch and
-- every attempt fails alike, so the flow retries and shows the error
CREATE FUNCTION refuse_card() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
  IF NEW.card = '$card' THEN
    RAISE EXCEPTION 'card % is blocked', NEW.card USING ERRCODE = '55000';
  END IF;
  RETURN NEW;
END \$\$;
ALTER FUNCTION refuse_card() OWNER TO alice;
CREATE TRIGGER refuse_card BEFORE INSERT ON payments FOR EACH ROW EXECUTE FUNCTION refuse_card();
SET ROLE alice;
SELECT sdp_create_source('pay_src', '$boot', 'payments', '@{[ SdpTest::source_options(q({"starting_offsets": "earliest"})) ]}');
SELECT sdp_create_flow('pay_flow', 'pay_src', 'payments', 'card text, amount numeric');
RESET ROLE;
SQL
ok(SdpTest::wait_for($node, "SELECT state = 'running' AND partitions IS NOT NULL FROM sdp.flow_status WHERE flow = 'pay_flow'"),
	'the flow runs');

SdpKafka::kcat_produce(bootstrap => $boot, topic => 'payments',
	messages => [ [ undef, qq({"card": "$card", "amount": 12.5}), 0 ] ]);
ok(SdpTest::wait_for($node,
		"SELECT state = 'retrying' AND last_error LIKE '%$card%' FROM sdp.flow_status WHERE flow = 'pay_flow'"),
	'the flow retries on the message, and the superuser reads the error with the card number');

my $status_sql = "SELECT state || '|' || coalesce(last_error, '<null>') FROM sdp.flow_status WHERE flow = 'pay_flow'";
my $runtime_sql = "SELECT coalesce(last_error, '<null>') FROM sdp_flow_runtime() WHERE flow = 'pay_flow'";
for my $role (qw(alice alice_friend watcher))
{
	like(SdpTest::query($node, "SET ROLE $role; $status_sql"), qr/^retrying\|.*card $card is blocked/,
		"$role reads the error in sdp.flow_status");
	like(SdpTest::query($node, "SET ROLE $role; $runtime_sql"), qr/card $card is blocked/,
		"$role reads the error in sdp_flow_runtime()");
}
is(SdpTest::query($node, "SET ROLE bob; $status_sql"), 'retrying|<insufficient privilege>',
	'bob sees that the flow retries on an error, not the error');
is(SdpTest::query($node, "SET ROLE bob; $runtime_sql"), '<insufficient privilege>',
	'nor through sdp_flow_runtime()');
is(SdpTest::query($node, "SET ROLE bob; SELECT count(*) FROM sdp.flow_status WHERE last_error LIKE '%$card%'"), '0',
	'bob cannot find the card number by a filter either');

# The message is the flow's to deal with: once the owner lets it through, it
# is written once and the error is gone for everyone.
SdpTest::query($node, "DROP TRIGGER refuse_card ON payments");
ok(SdpTest::wait_consumed($node, 'pay_flow', 1), 'the message goes through once the trigger is gone');
is(SdpTest::query($node, "SELECT count(*) || '|' || max(card) FROM payments"), "1|$card", 'written once');
is(SdpTest::query($node, "SET ROLE bob; $status_sql"), 'running|<null>', 'no error left to hide');

# A failed flow: its error is kept in sdp.flows.last_error.  A flow with
# on_error = fail stops at a message it cannot decode, and the input error
# quotes the value.
SdpTest::query($node, <<'SQL');
CREATE TABLE cards (card bigint);
ALTER TABLE cards OWNER TO alice;
SET ROLE alice;
SELECT sdp_create_flow('strict_flow', 'pay_src', 'cards', 'card bigint', options => '{"on_error": "fail"}');
RESET ROLE;
SQL
SdpKafka::kcat_produce(bootstrap => $boot, topic => 'payments',
	messages => [ [ undef, '{"card": "4111-1111-1111-1111", "amount": 3}', 0 ] ]);
ok(SdpTest::wait_for($node,
		"SELECT state = 'failed' AND last_error LIKE '%4111-1111%' FROM sdp.flow_status WHERE flow = 'strict_flow'"),
	'the strict flow fails on the second message (a card number that is no bigint) and says why');
$status_sql = "SELECT state || '|' || coalesce(last_error, '<null>') FROM sdp.flow_status WHERE flow = 'strict_flow'";
like(SdpTest::query($node, "SET ROLE alice; $status_sql"), qr/^failed\|.*4111-1111/, 'alice reads why');
like(SdpTest::query($node, "SET ROLE watcher; $status_sql"), qr/^failed\|.*4111-1111/, 'and so does watcher');
is(SdpTest::query($node, "SET ROLE bob; $status_sql"), 'failed|<insufficient privilege>', 'bob reads that it failed');
my ($ret, $out, $err) = $node->psql('postgres', "SET ROLE bob; SELECT last_error FROM sdp.flows",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/42501: permission denied for table flows/, 'bob cannot select sdp.flows.last_error');
is(SdpTest::query($node, "SET ROLE bob; SELECT string_agg(name || '|' || owner || '|' || (failed_at IS NOT NULL), ',' ORDER BY name) FROM sdp.flows"),
	'pay_flow|alice|false,strict_flow|alice|true', 'bob still reads the other columns of sdp.flows');
done_testing();
