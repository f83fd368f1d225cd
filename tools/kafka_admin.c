/*
 * kafka_admin.c
 *		Topics of a Kafka cluster, through librdkafka's Admin API: what the
 *		tests and scripts need of a real broker, without a JVM per call.
 *
 *   kafka_admin --bootstrap ADDR [-X prop=value]... COMMAND ARGS...
 *
 *   create TOPIC PARTITIONS [name=value]...   create a topic (replication
 *                                             factor 1) with those topic
 *                                             configs (retention.ms=...)
 *   partitions TOPIC COUNT                    grow a topic to COUNT partitions
 *   delete TOPIC                              delete a topic
 *   config TOPIC name=value...                set topic configs (incremental)
 *   exists TOPIC                              exit 0 if the topic exists, 1 if not
 *   offsets TOPIC PARTITION                   print the partition's low and high
 *                                             watermarks ("LOW HIGH"); HIGH is
 *                                             the end as a consumer of
 *                                             -X isolation.level sees it (default
 *                                             read_committed: the last stable
 *                                             offset, before any open transaction;
 *                                             read_uncommitted: the log's end)
 *   truncate TOPIC PARTITION OFFSET           delete the partition's messages
 *                                             before OFFSET (DeleteRecords: the
 *                                             log start offset moves, as when
 *                                             retention deletes a segment)
 *
 * Each command waits for the cluster's answer (30 s at most) and exits 0
 * on success; on failure it prints the reason on stderr and exits 1.  A
 * topic that already exists is an error for create, as for Kafka's tools.
 * The embedded broker (librdkafka's mock cluster) has no Admin API: this is
 * for Apache Kafka.
 */
#include <librdkafka/rdkafka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PROPS 32
#define TIMEOUT_MS 30000

static void
usage(void)
{
	fprintf(stderr,
			"usage: kafka_admin --bootstrap ADDR [-X prop=value]... COMMAND ARGS...\n"
			"  create TOPIC PARTITIONS [name=value]...\n"
			"  partitions TOPIC COUNT\n"
			"  delete TOPIC\n"
			"  config TOPIC name=value...\n"
			"  exists TOPIC\n"
			"  offsets TOPIC PARTITION\n"
			"  truncate TOPIC PARTITION OFFSET\n");
	exit(2);
}

static void
die(const char *fmt, const char *a, const char *b)
{
	fprintf(stderr, "kafka_admin: ");
	fprintf(stderr, fmt, a, b);
	fputc('\n', stderr);
	exit(1);
}

/* Split "name=value" in place; die when there is no '='. */
static char *
split_config(char *arg)
{
	char	   *eq = strchr(arg, '=');

	if (eq == NULL || eq == arg)
		die("not name=value: \"%s\"%s", arg, "");
	*eq = '\0';
	return eq + 1;
}

/* Wait for the result event of an admin request on queue q. */
static rd_kafka_event_t *
wait_result(rd_kafka_queue_t *q, rd_kafka_event_type_t type)
{
	rd_kafka_event_t *ev = rd_kafka_queue_poll(q, TIMEOUT_MS + 5000);

	if (ev == NULL)
		die("no answer from the cluster within %s%s", "30 s", "");
	if (rd_kafka_event_error(ev))
		die("%s%s", rd_kafka_event_error_string(ev), "");
	if (rd_kafka_event_type(ev) != type)
		die("unexpected answer: %s%s", rd_kafka_event_name(ev), "");
	return ev;
}

/* The per-topic results of a CreateTopics, CreatePartitions or DeleteTopics answer: die on an error. */
static void
check_topics(const rd_kafka_topic_result_t **res, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (rd_kafka_topic_result_error(res[i]))
			die("topic \"%s\": %s", rd_kafka_topic_result_name(res[i]),
				rd_kafka_topic_result_error_string(res[i]));
}

int
main(int argc, char **argv)
{
	const char *bootstrap = NULL;
	const char *props[MAX_PROPS][2];
	int			nprops = 0;
	int			i = 1;
	char		errstr[512];
	rd_kafka_conf_t *conf;
	rd_kafka_t *rk;
	rd_kafka_queue_t *q;
	rd_kafka_AdminOptions_t *opts;
	const char *cmd;
	const char *topic;
	const rd_kafka_topic_result_t **res;

	for (; i < argc && argv[i][0] == '-'; i++)
	{
		if (strcmp(argv[i], "--bootstrap") == 0 && i + 1 < argc)
			bootstrap = argv[++i];
		else if (strcmp(argv[i], "-X") == 0 && i + 1 < argc && nprops < MAX_PROPS)
		{
			char	   *arg = strdup(argv[++i]);

			props[nprops][1] = split_config(arg);
			props[nprops][0] = arg;
			nprops++;
		}
		else
			usage();
	}
	if (bootstrap == NULL || i + 1 >= argc)
		usage();
	cmd = argv[i++];
	topic = argv[i++];

	conf = rd_kafka_conf_new();
	if (rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
		die("%s%s", errstr, "");
	for (int p = 0; p < nprops; p++)
		if (rd_kafka_conf_set(conf, props[p][0], props[p][1], errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
			die("%s%s", errstr, "");
	rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
	if (rk == NULL)
		die("%s%s", errstr, "");
	q = rd_kafka_queue_new(rk);

	if (strcmp(cmd, "create") == 0)
	{
		rd_kafka_NewTopic_t *nt;
		rd_kafka_event_t *ev;
		size_t		n;

		if (i >= argc)
			usage();
		nt = rd_kafka_NewTopic_new(topic, atoi(argv[i++]), 1, errstr, sizeof(errstr));
		if (nt == NULL)
			die("%s%s", errstr, "");
		for (; i < argc; i++)
		{
			char	   *name = strdup(argv[i]);
			char	   *value = split_config(name);

			if (rd_kafka_NewTopic_set_config(nt, name, value))
				die("config %s%s", name, "");
		}
		opts = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
		rd_kafka_AdminOptions_set_operation_timeout(opts, TIMEOUT_MS, errstr, sizeof(errstr));
		rd_kafka_CreateTopics(rk, &nt, 1, opts, q);
		ev = wait_result(q, RD_KAFKA_EVENT_CREATETOPICS_RESULT);
		res = rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &n);
		check_topics(res, n);
	}
	else if (strcmp(cmd, "partitions") == 0)
	{
		rd_kafka_NewPartitions_t *np;
		rd_kafka_event_t *ev;
		size_t		n;

		if (i >= argc)
			usage();
		np = rd_kafka_NewPartitions_new(topic, atoi(argv[i]), errstr, sizeof(errstr));
		if (np == NULL)
			die("%s%s", errstr, "");
		opts = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATEPARTITIONS);
		rd_kafka_AdminOptions_set_operation_timeout(opts, TIMEOUT_MS, errstr, sizeof(errstr));
		rd_kafka_CreatePartitions(rk, &np, 1, opts, q);
		ev = wait_result(q, RD_KAFKA_EVENT_CREATEPARTITIONS_RESULT);
		res = rd_kafka_CreatePartitions_result_topics(rd_kafka_event_CreatePartitions_result(ev), &n);
		check_topics(res, n);
	}
	else if (strcmp(cmd, "delete") == 0)
	{
		rd_kafka_DeleteTopic_t *dt = rd_kafka_DeleteTopic_new(topic);
		rd_kafka_event_t *ev;
		size_t		n;

		opts = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_DELETETOPICS);
		rd_kafka_AdminOptions_set_operation_timeout(opts, TIMEOUT_MS, errstr, sizeof(errstr));
		rd_kafka_DeleteTopics(rk, &dt, 1, opts, q);
		ev = wait_result(q, RD_KAFKA_EVENT_DELETETOPICS_RESULT);
		res = rd_kafka_DeleteTopics_result_topics(rd_kafka_event_DeleteTopics_result(ev), &n);
		check_topics(res, n);
	}
	else if (strcmp(cmd, "config") == 0)
	{
		rd_kafka_ConfigResource_t *cr = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic);
		rd_kafka_event_t *ev;
		const rd_kafka_ConfigResource_t **cres;
		size_t		n;

		if (i >= argc)
			usage();
		for (; i < argc; i++)
		{
			char	   *name = strdup(argv[i]);
			char	   *value = split_config(name);

			/* AlterConfigs replaces every config of the topic: each given, the others default */
			if (rd_kafka_ConfigResource_set_config(cr, name, value))
				die("config %s%s", name, "");
		}
		opts = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_ALTERCONFIGS);
		rd_kafka_AdminOptions_set_request_timeout(opts, TIMEOUT_MS, errstr, sizeof(errstr));
		rd_kafka_AlterConfigs(rk, &cr, 1, opts, q);
		ev = wait_result(q, RD_KAFKA_EVENT_ALTERCONFIGS_RESULT);
		cres = rd_kafka_AlterConfigs_result_resources(rd_kafka_event_AlterConfigs_result(ev), &n);
		for (size_t r = 0; r < n; r++)
			if (rd_kafka_ConfigResource_error(cres[r]))
				die("topic \"%s\": %s", rd_kafka_ConfigResource_name(cres[r]),
					rd_kafka_ConfigResource_error_string(cres[r]));
	}
	else if (strcmp(cmd, "offsets") == 0)
	{
		int64_t		low,
					high;
		rd_kafka_resp_err_t err;

		if (i >= argc)
			usage();
		err = rd_kafka_query_watermark_offsets(rk, topic, atoi(argv[i]), &low, &high, TIMEOUT_MS);
		if (err)
			die("%s%s", rd_kafka_err2str(err), "");
		printf("%lld %lld\n", (long long) low, (long long) high);
	}
	else if (strcmp(cmd, "truncate") == 0)
	{
		rd_kafka_topic_partition_list_t *offsets = rd_kafka_topic_partition_list_new(1);
		rd_kafka_DeleteRecords_t *dr;
		rd_kafka_event_t *ev;
		const rd_kafka_topic_partition_list_t *done;

		if (i + 1 >= argc)
			usage();
		rd_kafka_topic_partition_list_add(offsets, topic, atoi(argv[i]))->offset = strtoll(argv[i + 1], NULL, 10);
		dr = rd_kafka_DeleteRecords_new(offsets);
		opts = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_DELETERECORDS);
		rd_kafka_AdminOptions_set_operation_timeout(opts, TIMEOUT_MS, errstr, sizeof(errstr));
		rd_kafka_DeleteRecords(rk, &dr, 1, opts, q);
		ev = wait_result(q, RD_KAFKA_EVENT_DELETERECORDS_RESULT);
		done = rd_kafka_DeleteRecords_result_offsets(rd_kafka_event_DeleteRecords_result(ev));
		for (int p = 0; p < done->cnt; p++)
			if (done->elems[p].err)
				die("topic \"%s\": %s", done->elems[p].topic, rd_kafka_err2str(done->elems[p].err));
	}
	else if (strcmp(cmd, "exists") == 0)
	{
		rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
		const struct rd_kafka_metadata *md;
		rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 0, rkt, &md, TIMEOUT_MS);
		bool		exists;

		if (err)
			die("%s%s", rd_kafka_err2str(err), "");
		exists = md->topic_cnt == 1 && md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR;
		rd_kafka_metadata_destroy(md);
		rd_kafka_topic_destroy(rkt);
		rd_kafka_destroy(rk);
		return exists ? 0 : 1;
	}
	else
		usage();

	rd_kafka_queue_destroy(q);
	rd_kafka_destroy(rk);
	return 0;
}
