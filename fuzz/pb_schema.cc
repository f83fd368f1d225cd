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
 * reason); a crash, a sanitizer's report, a leak, a slow input, or a
 * reading that is not JSON (the JSON decoder reads it next) is a bug.
 * Run it with the stack a server has (ulimit -s 8192), so that a parser's
 * recursion past it is found as the crash it would be in the server.
 */
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
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

/*
 * Whether [p, end) is one JSON value (RFC 8259's grammar; strings' bytes
 * are not checked for UTF-8: a proto2 string need not be, and the decoder
 * refuses such a message).  What sdp_pb_to_json writes must be: the JSON
 * decoder reads it.
 */
class JsonCheck
{
public:
	JsonCheck(const char *p, const char *end) : p_(p), end_(end) {}

	bool		whole()
	{
		return value(0) && (ws(), p_ == end_);
	}

private:
	const char *p_;
	const char *end_;

	void		ws()
	{
		while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r'))
			p_++;
	}
	bool		lit(const char *w)
	{
		size_t		n = strlen(w);

		if (static_cast<size_t>(end_ - p_) < n || memcmp(p_, w, n) != 0)
			return false;
		p_ += n;
		return true;
	}
	bool		digits()
	{
		const char *start = p_;

		while (p_ < end_ && *p_ >= '0' && *p_ <= '9')
			p_++;
		return p_ > start;
	}
	bool		number()
	{
		if (p_ < end_ && *p_ == '-')
			p_++;
		if (p_ < end_ && *p_ == '0')
			p_++;
		else if (p_ >= end_ || *p_ < '1' || *p_ > '9' || !digits())
			return false;
		if (p_ < end_ && *p_ == '.' && (++p_, !digits()))
			return false;
		if (p_ < end_ && (*p_ == 'e' || *p_ == 'E'))
		{
			p_++;
			if (p_ < end_ && (*p_ == '+' || *p_ == '-'))
				p_++;
			if (!digits())
				return false;
		}
		return true;
	}
	bool		string()
	{
		if (p_ >= end_ || *p_ != '"')
			return false;
		for (p_++; p_ < end_; p_++)
		{
			unsigned char c = static_cast<unsigned char>(*p_);

			if (c == '"')
			{
				p_++;
				return true;
			}
			if (c < 0x20)
				return false;
			if (c == '\\')
			{
				if (++p_ >= end_)
					return false;
				if (*p_ == 'u')
				{
					for (int i = 0; i < 4; i++)
						if (++p_ >= end_ || !isxdigit(static_cast<unsigned char>(*p_)))
							return false;
				}
				else if (!strchr("\"\\/bfnrt", *p_) || *p_ == '\0')
					return false;
			}
		}
		return false;
	}
	bool		value(int depth)
	{
		if (depth > 1000)
			return false;
		ws();
		if (p_ >= end_)
			return false;
		switch (*p_)
		{
			case '{':
			case '[':
				{
					char		close = *p_ == '{' ? '}' : ']';

					p_++;
					ws();
					if (p_ < end_ && *p_ == close)
						return ++p_, true;
					for (;;)
					{
						if (close == '}')
						{
							ws();
							if (!string())
								return false;
							ws();
							if (p_ >= end_ || *p_++ != ':')
								return false;
						}
						if (!value(depth + 1))
							return false;
						ws();
						if (p_ >= end_)
							return false;
						if (*p_ == close)
							return ++p_, true;
						if (*p_++ != ',')
							return false;
					}
				}
			case '"':
				return string();
			case 't':
				return lit("true");
			case 'f':
				return lit("false");
			case 'n':
				return lit("null");
			default:
				return number();
		}
	}
};

}								/* namespace */

extern "C" void sdp_fuzz_quiet_protobuf(void);

extern "C" int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	sdp_fuzz_quiet_protobuf();
	return 0;
}

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
				/* the JSON decoder reads it: it must be JSON */
				if (!JsonCheck(json, json + json_len).whole())
				{
					fprintf(stderr, "pb_schema: sdp_pb_to_json wrote what is not JSON: %.*s\n",
							static_cast<int>(std::min<size_t>(json_len, 4000)), json);
					abort();
				}
			}
			else
				sdp_pb_free(error);
		}
	}
	sdp_pb_schema_free(schema);
	return 0;
}
