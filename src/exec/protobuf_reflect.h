/*
 * protobuf_reflect.h
 *		Protobuf messages read by a descriptor known only at run time
 *		(protobuf_reflect.cpp, C++ over Debian's libprotobuf).
 *
 * Plain C types only: this header is read by C (exec/protobuf.c) and C++.
 * Nothing here allocates with palloc or raises: strings handed back are
 * malloc'd (sdp_pb_free), and no C++ exception leaves a function.
 */
#ifndef SDP_PROTOBUF_REFLECT_H
#define SDP_PROTOBUF_REFLECT_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C"
{
#endif

typedef struct SdpPbSchema SdpPbSchema;

/*
 * The files of a schema: files[0] the registered one, then what it imports,
 * each a .proto text or the base64 of a serialized FileDescriptorProto (as
 * Confluent's Python serializer registers them).  Imports of Protobuf's
 * well-known types (google/protobuf/...) need not be given.  NULL with
 * *error when the files do not make a schema.
 */
extern SdpPbSchema *sdp_pb_schema_create(int nfiles, const char *const *names, const char *const *texts,
										 char **error);
extern void sdp_pb_schema_free(SdpPbSchema *schema);

/*
 * The message type at the path of indexes (the first a top-level message
 * of the file, each next one nested in it; none: the first top-level one)
 * read from body, written as a JSON object into a buffer of the schema's,
 * valid until the next call for this schema.  False with *error when the
 * body is not one.
 */
extern bool sdp_pb_to_json(SdpPbSchema *schema, const int *indexes, int nindexes,
						   const void *body, size_t len, const char **json, size_t *json_len,
						   char **error);

extern void sdp_pb_free(void *p);

#ifdef __cplusplus
}
#endif

#endif							/* SDP_PROTOBUF_REFLECT_H */
