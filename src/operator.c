/*
 * operator.c
 *		The registry of stateful operators a flow can name.
 */
#include "operator.h"

#include "lib/stringinfo.h"

/* Every operator, by name.  Adding an operator is one file and one line here. */
static const SdpOperator *const operators[] = {
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

const char *
sdp_operator_names(void)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (int i = 0; operators[i] != NULL; i++)
		appendStringInfo(&buf, "%s%s", i > 0 ? ", " : "", operators[i]->name);
	if (buf.len == 0)
		appendStringInfoString(&buf, "none in this version");
	return buf.data;
}
