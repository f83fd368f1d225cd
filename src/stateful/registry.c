/*
 * registry.c
 *		Every stateful operator, by name.
 *
 * The registry is the only file that names the operators: adding an
 * operator is one file in operators/ and one line here.  It sits above the
 * operators (which use operator.c's helpers), so that operator.c, the
 * framework, does not depend on the operators written against it.
 */
#include "stateful/registry.h"

#include "lib/stringinfo.h"

extern const SdpOperator sdp_active_count_operator;
extern const SdpOperator sdp_window_agg_operator;
extern const SdpOperator sdp_processor_operator;

static const SdpOperator *const operators[] = {
	&sdp_active_count_operator,
	&sdp_window_agg_operator,
	&sdp_processor_operator,
	NULL
};

const SdpOperator *
sdp_find_operator(const char *name)
{
	for (int i = 0; operators[i] != NULL; i++)
		if (strcmp(operators[i]->name, name) == 0)
			return operators[i];
	return NULL;
}

/* The operators' names, for a message: "active_count, window_agg". */
const char *
sdp_operator_names(void)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (int i = 0; operators[i] != NULL; i++)
		appendStringInfo(&buf, "%s%s", i > 0 ? ", " : "", operators[i]->name);
	return buf.data;
}
