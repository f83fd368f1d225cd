/*
 * pb_schema.cc
 *		libFuzzer target: a registry's Protobuf schema and a message of it,
 *		read by src/exec/protobuf_reflect.cpp (sdp_pb_schema_create, then
 *		sdp_pb_to_json), with no PostgreSQL: a plain program built with
 *		-fsanitize=fuzzer,address,undefined (scripts/fuzz.sh).
 *
 * An input is the schema's files, then optionally a message:
 *
 *		[//@file NAME\n] TEXT [//@file NAME\n TEXT ...] [\0 N I1..IN BODY]
 *
 * Each file is a .proto text or the base64 of a serialized
 * FileDescriptorProto, as a registry holds them; the first is the schema
 * (named main.proto unless a //@file line names it), the others what it
 * imports.  After a NUL byte: N (a byte, taken modulo 4) message indexes,
 * one byte each, then the Protobuf body, read as the type they name, then
 * as the file's first type.  A failure is an answer (NULL or false with a
 * reason); a crash, a sanitizer's report, a leak or a slow input is a bug.
 * Run it with the stack a server has (ulimit -s 8192), so that a parser's
 * recursion past it is found as the crash it would be in the server.
 */
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "exec/protobuf_reflect.h"

namespace
{

const char kFileMark[] = "//@file ";

/* Where the marker at the start of a line at or after from is, or npos. */
size_t
next_mark(const std::string &text, size_t from)
{
	if (from == 0 && text.compare(0, sizeof(kFileMark) - 1, kFileMark) == 0)
		return 0;
	size_t		at = text.find(std::string("\n") + kFileMark, from == 0 ? 0 : from - 1);

	return at == std::string::npos ? at : at + 1;
}

/* The files of the text part: (name, text) pairs, the first named main.proto unless a marker opens the text. */
void
split_files(const std::string &text, std::vector<std::string> *names, std::vector<std::string> *texts)
{
	std::string name = "main.proto";
	size_t		cur = 0;
	size_t		mark;

	while ((mark = next_mark(text, cur)) != std::string::npos)
	{
		size_t		start = mark + sizeof(kFileMark) - 1;
		size_t		eol = text.find('\n', start);

		if (mark > 0)
		{
			names->push_back(name);
			texts->push_back(text.substr(cur, mark - cur));
		}
		name = text.substr(start, (eol == std::string::npos ? text.size() : eol) - start);
		cur = eol == std::string::npos ? text.size() : eol + 1;
	}
	names->push_back(name);
	texts->push_back(text.substr(cur));
}

}								/* namespace */

extern "C" int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nul = static_cast<const uint8_t *>(memchr(data, 0, size));
	std::string text(reinterpret_cast<const char *>(data), nul ? static_cast<size_t>(nul - data) : size);
	std::vector<std::string> names;
	std::vector<std::string> texts;
	std::vector<const char *> name_ptrs;
	std::vector<const char *> text_ptrs;
	char	   *error = nullptr;
	SdpPbSchema *schema;

	split_files(text, &names, &texts);
	for (size_t i = 0; i < names.size(); i++)
	{
		name_ptrs.push_back(names[i].c_str());
		text_ptrs.push_back(texts[i].c_str());
	}
	schema = sdp_pb_schema_create(static_cast<int>(names.size()), name_ptrs.data(), text_ptrs.data(), &error);
	if (schema == nullptr)
	{
		sdp_pb_free(error);
		return 0;
	}
	if (nul != nullptr)
	{
		const uint8_t *p = nul + 1;
		const uint8_t *end = data + size;
		int			indexes[4];
		int			n = p < end ? *p++ % 4 : 0;
		int			k = 0;

		while (k < n && p < end)
			indexes[k++] = *p++;
		for (int pass = 0; pass < 2; pass++)
		{
			const char *json = nullptr;
			size_t		json_len = 0;

			error = nullptr;
			if (sdp_pb_to_json(schema, indexes, pass == 0 ? k : 0, p, static_cast<size_t>(end - p), &json, &json_len,
							   &error))
			{
				/* the JSON is the schema's buffer: touch all of it */
				volatile size_t sum = 0;

				for (size_t i = 0; i < json_len; i++)
					sum += static_cast<unsigned char>(json[i]);
			}
			else
				sdp_pb_free(error);
		}
	}
	sdp_pb_schema_free(schema);
	return 0;
}
