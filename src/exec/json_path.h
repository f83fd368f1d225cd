/*
 * json_path.h
 *		Finding a member or an element in the tree of the declared paths
 *		(SdpJsonNode, input_schema.c), as the decoders walk a document.
 */
#ifndef SDP_JSON_PATH_H
#define SDP_JSON_PATH_H

#include "decl/flow.h"

/* The child of node that is its member of this name, as an index into its children, or -1. */
static inline int
sdp_json_member(const SdpJsonNode *node, const char *name, int len)
{
	for (int i = 0; i < node->nchildren; i++)
	{
		const SdpJsonNode *c = &node->children[i];

		if (c->keylen == len && c->key != NULL && memcmp(c->key, name, len) == 0)
			return i;
	}
	return -1;
}

/* The child of node that is its element at this index, or NULL. */
static inline SdpJsonNode *
sdp_json_element(SdpJsonNode *node, int64 index)
{
	for (int i = 0; i < node->nchildren; i++)
		if (node->children[i].key == NULL && node->children[i].index == index)
			return &node->children[i];
	return NULL;
}

#endif							/* SDP_JSON_PATH_H */
