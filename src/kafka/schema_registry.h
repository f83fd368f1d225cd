/*
 * schema_registry.h
 *		Writer schemas by id, from a Confluent-compatible schema registry
 *		(schema_registry.c).
 */
#ifndef SDP_SCHEMA_REGISTRY_H
#define SDP_SCHEMA_REGISTRY_H

#include "decl/flow.h"

typedef struct SdpRegistry SdpRegistry;

/* A schema id as the registry answered for it. */
typedef struct SdpRegistrySchema
{
	int32		id;				/* the hash key */
	bool		found;			/* false: the registry has no schema of this id (404) */
	char	   *answer;			/* its answer: {"schema": "...", ...}, or why not found */
	void	   *parsed;			/* the decoder's reading of it, once made (in sdp_registry_context) */
	int			parsed_as;		/* the SdpFormat it was read as */
	char	   *parse_error;	/* or why it is not a schema the decoder reads */
} SdpRegistrySchema;

/* A version of a subject as the registry answered for it (a Protobuf schema's import). */
typedef struct SdpRegistryVersion
{
	char	   *subject;
	int			version;
	bool		found;			/* false: the registry has no such subject or version */
	char	   *answer;			/* its answer, or why not found */
} SdpRegistryVersion;

/* One of a Protobuf schema's references in its answer: an import, where its schema is. */
typedef struct SdpRegistryRef
{
	char	   *name;			/* as the importing file imports it */
	char	   *subject;
	int			version;
} SdpRegistryRef;

/* What a registry's answer for a schema holds ({"schema": ..., "schemaType": ..., "references": [...]}). */
typedef struct SdpRegistryAnswer
{
	char	   *schema;			/* the schema's text */
	char	   *schema_type;	/* AVRO, PROTOBUF, JSON; NULL when the answer has none (Avro) */
	List	   *refs;			/* SdpRegistryRef */
} SdpRegistryAnswer;

extern bool sdp_registry_read_answer(const char *answer, SdpRegistryAnswer *out, char **error);
extern SdpRegistry *sdp_registry_create(const char *registry_url, List *properties, MemoryContext parent);
extern bool sdp_registry_register(SdpRegistry *reg, const char *subject, const char *schema, int32 *id,
								  char **error);
extern void sdp_registry_destroy(SdpRegistry *reg);
extern bool sdp_registry_fetch(SdpRegistry *reg, int32 id, char **error);
extern SdpRegistrySchema *sdp_registry_get(SdpRegistry *reg, int32 id);
extern void sdp_registry_put(SdpRegistry *reg, int32 id, bool found, const char *answer);
extern void sdp_registry_forget(SdpRegistry *reg, int32 id);
extern bool sdp_registry_fetch_version(SdpRegistry *reg, const char *subject, int version, char **error);
extern SdpRegistryVersion *sdp_registry_get_version(SdpRegistry *reg, const char *subject, int version);
extern void sdp_registry_put_version(SdpRegistry *reg, const char *subject, int version, bool found,
									 const char *answer);
extern MemoryContext sdp_registry_context(SdpRegistry *reg);
extern int64 sdp_registry_fetches(SdpRegistry *reg);
extern const char *sdp_registry_url(SdpRegistry *reg);

#endif							/* SDP_SCHEMA_REGISTRY_H */
