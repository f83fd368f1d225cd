/*
 * protobuf_reflect.cpp
 *		Protobuf messages read by a descriptor known only at run time: the
 *		schema a registry holds (a .proto text, or a serialized descriptor)
 *		is parsed and built into a descriptor pool by libprotobuf, and each
 *		message's wire format is read here, field by field, by that
 *		descriptor, into a JSON object, which the JSON decoder
 *		(json_decode.c) maps by name into the flow's columns, paths
 *		included.
 *
 * Debian 12's libprotobuf (3.21) reads the schemas: compiler::Parser a
 * .proto text, DescriptorPool builds it (its imports of the well-known
 * types from the library's own pool).  The messages are not parsed by its
 * DynamicMessage and read back by Reflection: that took 2.5 times as long
 * (bench/HISTORY.md).  The reader here follows Protobuf's parsing rules,
 * checked against libprotobuf's own by differential fuzzing: a field sent
 * twice keeps its last value, a message field sent in parts is their merge,
 * a oneof keeps the member sent last, a repeated scalar may come packed,
 * unknown fields (groups included) and fields of a wire type they cannot
 * have are skipped, proto3 strings must be UTF-8, proto2 required fields
 * must be there, nesting stops at 100.  The JSON is written for what a
 * PostgreSQL column needs:
 *   - the fields by their names in the .proto (not lowerCamelCase);
 *   - a field without presence (a proto3 scalar) always, its default when
 *     unset, as Protobuf reads it; a field with presence (a message, a
 *     proto3 optional, a oneof member, proto2) only when set: NULL when not;
 *   - 64-bit integers as numbers, enums by name (by number when unknown),
 *     bytes as "\x..." hex (bytea's input form), NaN and infinities as
 *     strings (float8's);
 *   - google.protobuf.Timestamp as an ISO 8601 time in UTC, Duration as an
 *     interval ("1.5 seconds"), the wrappers as their value, Struct, Value
 *     and ListValue as the JSON they stand for.
 *
 * No C++ exception leaves this file (libprotobuf throws FatalException for
 * a failed check); nothing here calls into PostgreSQL.
 */
#include "exec/protobuf_reflect.h"

#include <algorithm>
#include <charconv>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <google/protobuf/compiler/parser.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/descriptor_database.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/stubs/common.h>
#if GOOGLE_PROTOBUF_VERSION < 4022000
#include <google/protobuf/stubs/logging.h>	/* SetLogHandler: gone in 22 (Abseil logs) */
#endif

namespace pb = google::protobuf;

/* The deepest nesting of brackets a .proto text may have (a registry's schema: a few levels). */
#define SDP_PB_MAX_NESTING 64
/*
 * The most text a schema's files may have together (a registry's schema: a
 * few kB).  libprotobuf reads them in time linear in their size and cannot be
 * interrupted: 256 kB of the most expensive text found take it about 0.25 s.
 */
#define SDP_PB_MAX_SCHEMA_TEXT (256 * 1024)

namespace
{

char *
dup_string(const std::string &s)
{
	char	   *r = static_cast<char *>(malloc(s.size() + 1));

	if (r != nullptr)
	{
		memcpy(r, s.data(), s.size());
		r[s.size()] = '\0';
	}
	return r;
}

/* Errors of the tokenizer, the parser and the pool, as one line. */
class Errors : public pb::io::ErrorCollector, public pb::DescriptorPool::ErrorCollector
{
public:
	std::string text;
	std::string file;

	void AddError(int line, int column, const std::string &message) override
	{
		add(file + ":" + std::to_string(line + 1) + ":" + std::to_string(column + 1) + ": " + message);
	}

	void AddError(const std::string &filename, const std::string &element_name, const pb::Message *,
				  ErrorLocation, const std::string &message) override
	{
		add(filename + (element_name.empty() ? "" : " (" + element_name + ")") + ": " + message);
	}

	void add(const std::string &s)
	{
		if (text.size() < 1000)
			text += (text.empty() ? "" : "; ") + s;
	}
};

/* Standard base64 (with or without padding); false when it is not. */
bool
base64_decode(const std::string &in, std::string *out)
{
	int			bits = 0;
	unsigned	acc = 0;
	size_t		pad = 0;

	out->clear();
	for (char c : in)
	{
		int			v;

		if (c >= 'A' && c <= 'Z')
			v = c - 'A';
		else if (c >= 'a' && c <= 'z')
			v = c - 'a' + 26;
		else if (c >= '0' && c <= '9')
			v = c - '0' + 52;
		else if (c == '+')
			v = 62;
		else if (c == '/')
			v = 63;
		else if (c == '=')
		{
			pad++;
			continue;
		}
		else if (c == '\n' || c == '\r')
			continue;
		else
			return false;
		if (pad > 0)
			return false;
		acc = (acc << 6) | static_cast<unsigned>(v);
		bits += 6;
		if (bits >= 8)
		{
			bits -= 8;
			out->push_back(static_cast<char>((acc >> bits) & 0xff));
		}
	}
	return pad <= 2 && !out->empty();
}

/*
 * Whether a .proto text nests brackets ({, [, <, () at most max deep, and
 * is made of tokens at all.  Checked before libprotobuf's parser reads a
 * registry's text: the parser recurses on through nesting after it has said
 * "maximum recursion limit" (3.21; 20,000 nested messages overflow the
 * stack).  The text is read by the tokenizer the parser reads it with,
 * which recurses on nothing and ends a string, a comment or a bad token
 * exactly where the parser will: a check by rules of its own (a string
 * running to the next quote across lines) was fooled once by a string the
 * tokenizer ends at the line's end.  A text the tokenizer finds errors in
 * is refused with them, before the parser sees it.
 */
bool
proto_tokens_within(const std::string &name, const std::string &text, int max, std::string *error)
{
	Errors		errors;
	pb::io::ArrayInputStream input(text.data(), static_cast<int>(text.size()));
	pb::io::Tokenizer tokenizer(&input, &errors);
	int			depth = 0;

	errors.file = name;
	while (tokenizer.Next())
	{
		const pb::io::Tokenizer::Token &t = tokenizer.current();

		if (!errors.text.empty())
			break;
		if (t.type != pb::io::Tokenizer::TYPE_SYMBOL || t.text.size() != 1)
			continue;
		switch (t.text[0])
		{
			case '{':
			case '[':
			case '<':
			case '(':
				if (++depth > max)
				{
					*error = name + ":" + std::to_string(t.line + 1) + ":" + std::to_string(t.column + 1) +
						": nested more than " + std::to_string(max) + " deep";
					return false;
				}
				break;
			case '}':
			case ']':
			case '>':
			case ')':
				if (depth > 0)
					depth--;
				break;
		}
	}
	if (!errors.text.empty())
	{
		*error = errors.text;
		return false;
	}
	return true;
}

/*
 * A registered file as a FileDescriptorProto: a .proto text (anything with
 * a brace or a semicolon in it), else the base64 of a serialized one.
 */
bool
read_file(const std::string &name, const std::string &text, pb::FileDescriptorProto *fdp, std::string *error)
{
	if (text.find_first_of("{;") == std::string::npos)
	{
		std::string bytes;

		if (!base64_decode(text, &bytes) || !fdp->ParseFromString(bytes))
		{
			*error = name + ": neither a .proto text nor a serialized FileDescriptorProto in base64";
			return false;
		}
		if (fdp->name().empty())
			fdp->set_name(name);
		return true;
	}

	if (!proto_tokens_within(name, text, SDP_PB_MAX_NESTING, error))
		return false;

	Errors		errors;
	pb::io::ArrayInputStream input(text.data(), static_cast<int>(text.size()));
	pb::io::Tokenizer tokenizer(&input, &errors);
	pb::compiler::Parser parser;

	errors.file = name;
	parser.RecordErrorsTo(&errors);
	if (!parser.Parse(&tokenizer, fdp) || !errors.text.empty())
	{
		*error = errors.text.empty() ? name + ": not a .proto file" : errors.text;
		return false;
	}
	fdp->set_name(name);
	return true;
}

void
append_escaped(std::string &out, const char *p, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	const char *end = p + len;

	out.push_back('"');
	while (p < end)
	{
		const char *run = p;

		/* the characters that need no escape, appended as one run */
		while (p < end && static_cast<unsigned char>(*p) >= 0x20 && *p != '"' && *p != '\\')
			p++;
		out.append(run, p);
		if (p == end)
			break;

		unsigned char c = static_cast<unsigned char>(*p++);

		switch (c)
		{
			case '"':
				out += "\\\"";
				break;
			case '\\':
				out += "\\\\";
				break;
			case '\n':
				out += "\\n";
				break;
			case '\r':
				out += "\\r";
				break;
			case '\t':
				out += "\\t";
				break;
			default:
				out += "\\u00";
				out.push_back(hex[c >> 4]);
				out.push_back(hex[c & 15]);
		}
	}
	out.push_back('"');
}

void
append_escaped(std::string &out, const std::string &s)
{
	append_escaped(out, s.data(), s.size());
}

/* Whether [p, p + len) is UTF-8 (RFC 3629: no surrogates, nothing past U+10FFFF, no overlong forms). */
bool
valid_utf8(const uint8_t *p, size_t len)
{
	const uint8_t *end = p + len;

	while (p < end)
	{
		uint8_t		c = *p;
		int			n;
		uint32_t	cp;

		if (c < 0x80)
		{
			p++;
			continue;
		}
		if ((c & 0xe0) == 0xc0)
		{
			n = 1;
			cp = c & 0x1f;
		}
		else if ((c & 0xf0) == 0xe0)
		{
			n = 2;
			cp = c & 0x0f;
		}
		else if ((c & 0xf8) == 0xf0)
		{
			n = 3;
			cp = c & 0x07;
		}
		else
			return false;
		if (end - p <= n)
			return false;
		for (int k = 1; k <= n; k++)
		{
			if ((p[k] & 0xc0) != 0x80)
				return false;
			cp = (cp << 6) | (p[k] & 0x3f);
		}
		if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
			cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		p += n + 1;
	}
	return true;
}

/* A number as JSON: the shortest text that reads back as the same value. */
void
append_double(std::string &out, double d, bool is_float)
{
	char		buf[40];
	std::to_chars_result r;

	if (std::isnan(d))
		out += "\"NaN\"";
	else if (std::isinf(d))
		out += d > 0 ? "\"Infinity\"" : "\"-Infinity\"";
	else
	{
		r = is_float ? std::to_chars(buf, buf + sizeof(buf), static_cast<float>(d))
			: std::to_chars(buf, buf + sizeof(buf), d);
		out.append(buf, r.ptr);
	}
}

template<typename T>
void
append_int(std::string &out, T v)
{
	char		buf[24];
	std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), v);

	out.append(buf, r.ptr);
}

/* n as exactly width digits (0 <= n < 10^width). */
void
append_digits(std::string &out, unsigned long n, int width)
{
	char		buf[16];

	for (int i = width - 1; i >= 0; i--)
	{
		buf[i] = static_cast<char>('0' + n % 10);
		n /= 10;
	}
	out.append(buf, width);
}

/* Days since 1970-01-01 -> civil date (proleptic Gregorian). */
void
civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
	z += 719468;
	int64_t		era = (z >= 0 ? z : z - 146096) / 146097;
	unsigned	doe = static_cast<unsigned>(z - era * 146097);
	unsigned	yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	unsigned	doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	unsigned	mp = (5 * doy + 2) / 153;

	*d = doy - (153 * mp + 2) / 5 + 1;
	*m = mp < 10 ? mp + 3 : mp - 9;
	*y = static_cast<int64_t>(yoe) + era * 400 + (*m <= 2);
}

/* How a message type is written: as an object, or as what a well-known type stands for. */
enum class Shape
{
	OBJECT,
	TIMESTAMP,					/* an ISO 8601 time in UTC */
	DURATION,					/* "S.NNNNNNNNN seconds" */
	FIELD,						/* the one field of a wrapper, Struct or ListValue */
	VALUE						/* google.protobuf.Value: its kind, or null */
};

/* A message type, read once from its descriptor: what decoding needs. */
struct TypeInfo
{
	const pb::Descriptor *d;
	Shape		shape = Shape::OBJECT;
	std::vector<const pb::FieldDescriptor *> fields;	/* in declaration order */
	std::map<int, int> by_number;	/* field number -> index in fields */
	int			small[64];		/* the same for numbers below 64 (-1: none) */
	bool		has_required = false;
};

/* A field of a body as found on the wire. */
struct Occurrence
{
	int			field;			/* index in TypeInfo.fields */
	int			wire;			/* wire type */
	uint64_t	value;			/* a varint, or fixed 32/64 bits */
	const uint8_t *data;		/* length-delimited: its bytes */
	size_t		len;
};

/* The wire format read by descriptors into JSON: see the head of this file. */
class WireReader
{
public:
	std::string out;
	std::string error;

	/* one scratch vector per depth, made once: a nested call must not move its caller's */
	WireReader() : scratch(104), scratch_oneof(104) {}

	bool		message(const pb::Descriptor *d, const uint8_t *p, const uint8_t *end, int depth);

private:
	std::map<const pb::Descriptor *, std::unique_ptr<TypeInfo>> types;
	std::vector<std::vector<Occurrence>> scratch;	/* a body's occurrences, per depth: kept */
	std::vector<std::vector<int>> scratch_oneof;

	TypeInfo   *info(const pb::Descriptor *d);
	bool		fail(const std::string &why)
	{
		if (error.empty())
			error = why;
		return false;
	}
	bool		scalar(const pb::FieldDescriptor *f, int wire, uint64_t v, const uint8_t *data, size_t len,
					   int depth);
	bool		packed(const pb::FieldDescriptor *f, const uint8_t *p, const uint8_t *end, bool *first);
	bool		default_value(const pb::FieldDescriptor *f);
	bool		whole_field(TypeInfo *t, int field, const std::vector<Occurrence> &occ, size_t lo, size_t hi,
							int depth);
	bool		sub_message(const pb::FieldDescriptor *f, const std::vector<Occurrence> &occ, size_t lo,
							size_t hi, int depth);
	bool		map_entry(const pb::FieldDescriptor *f, const uint8_t *p, const uint8_t *end, int depth);
	bool		special(TypeInfo *t, const std::vector<Occurrence> &occ, const std::vector<int> &oneof_last,
						int depth);
	bool		skip_group(const uint8_t **p, const uint8_t *end, uint64_t number, int depth);
};

bool
read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	uint64_t	r = 0;

	for (int shift = 0; shift < 70 && *p < end; shift += 7)
	{
		uint8_t		b = *(*p)++;

		r |= static_cast<uint64_t>(b & 0x7f) << shift;
		if ((b & 0x80) == 0)
		{
			*v = r;
			return true;
		}
	}
	return false;
}

/* A field's tag: a varint of at most 5 bytes (32 bits), as libprotobuf reads one; its number 1 .. 2^29 - 1. */
bool
read_tag(const uint8_t **p, const uint8_t *end, uint64_t *tag)
{
	const uint8_t *start = *p;

	return read_varint(p, end, tag) && *p - start <= 5 && *tag <= 0xffffffffu &&
		(*tag >> 3) != 0 && (*tag >> 3) <= 536870911;
}

TypeInfo *
WireReader::info(const pb::Descriptor *d)
{
	auto		it = types.find(d);

	if (it != types.end())
		return it->second.get();

	std::unique_ptr<TypeInfo> t(new TypeInfo());
	const std::string &name = d->full_name();

	t->d = d;
	for (int i = 0; i < 64; i++)
		t->small[i] = -1;
	for (int i = 0; i < d->field_count(); i++)
	{
		const pb::FieldDescriptor *f = d->field(i);

		t->fields.push_back(f);
		t->by_number[f->number()] = i;
		if (f->number() < 64)
			t->small[f->number()] = i;
		if (f->is_required())
			t->has_required = true;
	}
	if (name == "google.protobuf.Timestamp" || name == "google.protobuf.Duration")
	{
		const pb::FieldDescriptor *fs = d->FindFieldByNumber(1);
		const pb::FieldDescriptor *fn = d->FindFieldByNumber(2);

		if (fs && fn && fs->type() == pb::FieldDescriptor::TYPE_INT64 && fn->type() == pb::FieldDescriptor::TYPE_INT32)
			t->shape = name == "google.protobuf.Timestamp" ? Shape::TIMESTAMP : Shape::DURATION;
	}
	else if (name == "google.protobuf.DoubleValue" || name == "google.protobuf.FloatValue" ||
			 name == "google.protobuf.Int64Value" || name == "google.protobuf.UInt64Value" ||
			 name == "google.protobuf.Int32Value" || name == "google.protobuf.UInt32Value" ||
			 name == "google.protobuf.BoolValue" || name == "google.protobuf.StringValue" ||
			 name == "google.protobuf.BytesValue" || name == "google.protobuf.Struct" ||
			 name == "google.protobuf.ListValue")
	{
		if (d->field_count() == 1)
			t->shape = Shape::FIELD;
	}
	else if (name == "google.protobuf.Value" && d->FindOneofByName("kind") != nullptr)
		t->shape = Shape::VALUE;
	return types.emplace(d, std::move(t)).first->second.get();
}

/* A scalar (or a message, or an enum) from its wire form. */
bool
WireReader::scalar(const pb::FieldDescriptor *f, int wire, uint64_t v, const uint8_t *data, size_t len, int depth)
{
	static const char hex[] = "0123456789abcdef";

	switch (f->type())
	{
		case pb::FieldDescriptor::TYPE_INT32:
			append_int(out, static_cast<int32_t>(v));
			break;
		case pb::FieldDescriptor::TYPE_SINT32:
			append_int(out, static_cast<int32_t>((static_cast<uint32_t>(v) >> 1) ^ -static_cast<int32_t>(v & 1)));
			break;
		case pb::FieldDescriptor::TYPE_SFIXED32:
			append_int(out, static_cast<int32_t>(static_cast<uint32_t>(v)));
			break;
		case pb::FieldDescriptor::TYPE_UINT32:
		case pb::FieldDescriptor::TYPE_FIXED32:
			append_int(out, static_cast<uint32_t>(v));
			break;
		case pb::FieldDescriptor::TYPE_INT64:
		case pb::FieldDescriptor::TYPE_SFIXED64:
			append_int(out, static_cast<int64_t>(v));
			break;
		case pb::FieldDescriptor::TYPE_SINT64:
			append_int(out, static_cast<int64_t>((v >> 1) ^ -(v & 1)));
			break;
		case pb::FieldDescriptor::TYPE_UINT64:
		case pb::FieldDescriptor::TYPE_FIXED64:
			append_int(out, v);
			break;
		case pb::FieldDescriptor::TYPE_DOUBLE:
			{
				double		d;

				memcpy(&d, &v, sizeof(d));
				append_double(out, d, false);
				break;
			}
		case pb::FieldDescriptor::TYPE_FLOAT:
			{
				uint32_t	bits = static_cast<uint32_t>(v);
				float		fl;

				memcpy(&fl, &bits, sizeof(fl));
				append_double(out, fl, true);
				break;
			}
		case pb::FieldDescriptor::TYPE_BOOL:
			out += v != 0 ? "true" : "false";
			break;
		case pb::FieldDescriptor::TYPE_ENUM:
			{
				int32_t		number = static_cast<int32_t>(v);
				const pb::EnumValueDescriptor *e = f->enum_type()->FindValueByNumber(number);

				if (e != nullptr)
					append_escaped(out, e->name());
				else
					append_int(out, number);
				break;
			}
		case pb::FieldDescriptor::TYPE_STRING:
			append_escaped(out, reinterpret_cast<const char *>(data), len);
			break;
		case pb::FieldDescriptor::TYPE_BYTES:
			out += "\"\\\\x";
			for (size_t i = 0; i < len; i++)
			{
				out.push_back(hex[data[i] >> 4]);
				out.push_back(hex[data[i] & 15]);
			}
			out.push_back('"');
			break;
		case pb::FieldDescriptor::TYPE_MESSAGE:
			return message(f->message_type(), data, data + len, depth + 1);
		case pb::FieldDescriptor::TYPE_GROUP:
			return fail("field \"" + f->name() + "\" is a group, which is not read");
	}
	(void) wire;
	return true;
}

/* The wire type a field's values have when not packed. */
int
wire_type_of(const pb::FieldDescriptor *f)
{
	switch (f->type())
	{
		case pb::FieldDescriptor::TYPE_DOUBLE:
		case pb::FieldDescriptor::TYPE_FIXED64:
		case pb::FieldDescriptor::TYPE_SFIXED64:
			return 1;
		case pb::FieldDescriptor::TYPE_FLOAT:
		case pb::FieldDescriptor::TYPE_FIXED32:
		case pb::FieldDescriptor::TYPE_SFIXED32:
			return 5;
		case pb::FieldDescriptor::TYPE_STRING:
		case pb::FieldDescriptor::TYPE_BYTES:
		case pb::FieldDescriptor::TYPE_MESSAGE:
			return 2;
		case pb::FieldDescriptor::TYPE_GROUP:
			return 3;
		default:
			return 0;
	}
}

/* The elements of a packed repeated scalar, each preceded by a comma but the first. */
bool
WireReader::packed(const pb::FieldDescriptor *f, const uint8_t *p, const uint8_t *end, bool *first)
{
	int			wire = wire_type_of(f);

	while (p < end)
	{
		uint64_t	v = 0;

		if (wire == 0)
		{
			if (!read_varint(&p, end, &v))
				return fail("a packed field \"" + f->name() + "\" ends inside a value");
		}
		else
		{
			size_t		n = wire == 1 ? 8 : 4;

			if (static_cast<size_t>(end - p) < n)
				return fail("a packed field \"" + f->name() + "\" ends inside a value");
			for (size_t i = 0; i < n; i++)
				v |= static_cast<uint64_t>(p[i]) << (8 * i);
			p += n;
		}
		if (!*first)
			out.push_back(',');
		*first = false;
		scalar(f, wire, v, nullptr, 0, 0);
	}
	return true;
}

/* A field without presence that a body does not have: its default, as Protobuf reads it. */
bool
WireReader::default_value(const pb::FieldDescriptor *f)
{
	switch (f->type())
	{
		case pb::FieldDescriptor::TYPE_STRING:
			out += "\"\"";
			break;
		case pb::FieldDescriptor::TYPE_BYTES:
			out += "\"\\\\x\"";
			break;
		case pb::FieldDescriptor::TYPE_BOOL:
			out += "false";
			break;
		case pb::FieldDescriptor::TYPE_ENUM:
			{
				const pb::EnumValueDescriptor *e = f->enum_type()->FindValueByNumber(0);

				if (e != nullptr)
					append_escaped(out, e->name());
				else
					append_escaped(out, f->default_value_enum()->name());
				break;
			}
		case pb::FieldDescriptor::TYPE_MESSAGE:
		case pb::FieldDescriptor::TYPE_GROUP:
			out += "null";
			break;
		default:
			out += "0";
	}
	return true;
}

/*
 * A singular message field sent in several parts: Protobuf merges them,
 * which is what reading their bytes one after the other does.
 */
bool
WireReader::sub_message(const pb::FieldDescriptor *f, const std::vector<Occurrence> &occ, size_t lo, size_t hi,
						int depth)
{
	if (hi - lo == 1)
		return message(f->message_type(), occ[lo].data, occ[lo].data + occ[lo].len, depth + 1);

	std::string bytes;
	size_t		mark = out.size();

	/* each part must be a message on its own (joined, a cut value could join the next) */
	for (size_t i = lo; i < hi; i++)
	{
		if (!message(f->message_type(), occ[i].data, occ[i].data + occ[i].len, depth + 1))
			return false;
		out.resize(mark);
		bytes.append(reinterpret_cast<const char *>(occ[i].data), occ[i].len);
	}
	return message(f->message_type(), reinterpret_cast<const uint8_t *>(bytes.data()),
				   reinterpret_cast<const uint8_t *>(bytes.data()) + bytes.size(), depth + 1);
}

/* One entry of a map field: "key": value (a key or value it lacks is its default). */
bool
WireReader::map_entry(const pb::FieldDescriptor *f, const uint8_t *p, const uint8_t *end, int depth)
{
	const pb::Descriptor *entry = f->message_type();
	const pb::FieldDescriptor *kf = entry->map_key();
	const pb::FieldDescriptor *vf = entry->map_value();
	Occurrence	key = {-1, 0, 0, nullptr, 0};
	bool		have_key = false;
	std::vector<Occurrence> value;
	size_t		start;

	if (depth > 100)
		return fail("messages nested deeper than 100 levels");
	while (p < end)
	{
		uint64_t	tag;
		Occurrence	o = {-1, 0, 0, nullptr, 0};

		if (!read_tag(&p, end, &tag))
			return fail("a map entry of \"" + f->name() + "\" is malformed");
		o.wire = static_cast<int>(tag & 7);
		if (o.wire == 3)
		{
			if (!skip_group(&p, end, tag >> 3, depth + 1))
				return false;
			continue;
		}
		if (o.wire == 0)
		{
			if (!read_varint(&p, end, &o.value))
				return fail("a map entry of \"" + f->name() + "\" is malformed");
		}
		else if (o.wire == 1 || o.wire == 5)
		{
			size_t		n = o.wire == 1 ? 8 : 4;

			if (static_cast<size_t>(end - p) < n)
				return fail("a map entry of \"" + f->name() + "\" is malformed");
			for (size_t i = 0; i < n; i++)
				o.value |= static_cast<uint64_t>(p[i]) << (8 * i);
			p += n;
		}
		else if (o.wire == 2)
		{
			uint64_t	n;

			if (!read_varint(&p, end, &n) || n > static_cast<uint64_t>(end - p))
				return fail("a map entry of \"" + f->name() + "\" is malformed");
			o.data = p;
			o.len = static_cast<size_t>(n);
			p += n;
		}
		else
			return fail("a map entry of \"" + f->name() + "\" is malformed");
		if (o.wire == 2 && ((tag >> 3) == 1 || (tag >> 3) == 2))
		{
			const pb::FieldDescriptor *ef = (tag >> 3) == 1 ? kf : vf;

			if (ef->type() == pb::FieldDescriptor::TYPE_STRING &&
				ef->file()->syntax() == pb::FileDescriptor::SYNTAX_PROTO3 && !valid_utf8(o.data, o.len))
				return fail("a " + std::string((tag >> 3) == 1 ? "key" : "value") + " of map \"" + f->name() +
							"\" is not valid UTF-8");
		}
		if ((tag >> 3) == 1 && o.wire == wire_type_of(kf))
		{
			key = o;
			have_key = true;
		}
		else if ((tag >> 3) == 2 && (o.wire == wire_type_of(vf)))
			value.push_back(o);
	}

	/* the key, as the name of a member */
	start = out.size();
	if (!have_key)
		default_value(kf);
	else
		scalar(kf, key.wire, key.value, key.data, key.len, depth);
	if (out[start] != '"')
	{
		out.insert(start, 1, '"');
		out.push_back('"');
	}
	out.push_back(':');
	if (value.empty())
		return vf->type() == pb::FieldDescriptor::TYPE_MESSAGE ? message(vf->message_type(), nullptr, nullptr, depth + 1)
			: default_value(vf);
	if (vf->type() == pb::FieldDescriptor::TYPE_MESSAGE)
		return sub_message(vf, value, 0, value.size(), depth);
	const Occurrence &o = value.back();

	return scalar(vf, o.wire, o.value, o.data, o.len, depth);
}

/* Field number t->fields[field] of a body: its occurrences occ[lo, hi). */
bool
WireReader::whole_field(TypeInfo *t, int field, const std::vector<Occurrence> &occ, size_t lo, size_t hi, int depth)
{
	const pb::FieldDescriptor *f = t->fields[field];

	if (f->is_map())
	{
		out.push_back('{');
		for (size_t i = lo; i < hi; i++)
		{
			if (occ[i].wire != 2)
				continue;
			if (i > lo)
				out.push_back(',');
			if (!map_entry(f, occ[i].data, occ[i].data + occ[i].len, depth + 1))
				return false;
		}
		out.push_back('}');
		return true;
	}
	if (f->is_repeated())
	{
		bool		first = true;

		out.push_back('[');
		for (size_t i = lo; i < hi; i++)
		{
			const Occurrence &o = occ[i];

			if (o.wire == 2 && wire_type_of(f) != 2)
			{
				if (!packed(f, o.data, o.data + o.len, &first))
					return false;
				continue;
			}
			if (!first)
				out.push_back(',');
			first = false;
			if (!scalar(f, o.wire, o.value, o.data, o.len, depth))
				return false;
		}
		out.push_back(']');
		return true;
	}
	if (lo == hi)
		return default_value(f);
	if (f->type() == pb::FieldDescriptor::TYPE_MESSAGE)
		return sub_message(f, occ, lo, hi, depth);

	/* a scalar sent more than once: the last one */
	const Occurrence &o = occ[hi - 1];

	return scalar(f, o.wire, o.value, o.data, o.len, depth);
}

/* A well-known type as what it stands for (the occurrences sorted by field). */
bool
WireReader::special(TypeInfo *t, const std::vector<Occurrence> &occ, const std::vector<int> &oneof_last, int depth)
{
	if (t->shape == Shape::TIMESTAMP || t->shape == Shape::DURATION)
	{
		int64_t		secs = 0;
		int32_t		nanos = 0;
		char		buf[64];

		for (const Occurrence &o : occ)
			if (o.wire == 0 && t->fields[o.field]->number() == 1)
				secs = static_cast<int64_t>(o.value);
			else if (o.wire == 0 && t->fields[o.field]->number() == 2)
				nanos = static_cast<int32_t>(o.value);
		if (t->shape == Shape::DURATION)
		{
			bool		neg = secs < 0 || nanos < 0;
			uint64_t	s = neg ? -static_cast<uint64_t>(secs) : static_cast<uint64_t>(secs);
			int32_t		n = nanos < 0 ? -nanos : nanos;

			snprintf(buf, sizeof(buf), "\"%s%" PRIu64 ".%09d seconds\"", neg ? "-" : "", s, n);
			out += buf;
			return true;
		}

		int64_t		days = secs / 86400;
		int64_t		rem = secs % 86400;
		int64_t		y;
		unsigned	mo,
					dd;

		if (rem < 0)
		{
			rem += 86400;
			days--;
		}
		civil_from_days(days, &y, &mo, &dd);
		if (y < 1 || y > 9999)
		{
			append_int(out, secs);	/* out of ISO range: epoch seconds */
			return true;
		}
		out.push_back('"');
		append_digits(out, static_cast<unsigned long>(y), 4);
		out.push_back('-');
		append_digits(out, mo, 2);
		out.push_back('-');
		append_digits(out, dd, 2);
		out.push_back('T');
		append_digits(out, static_cast<unsigned long>(rem / 3600), 2);
		out.push_back(':');
		append_digits(out, static_cast<unsigned long>(rem / 60 % 60), 2);
		out.push_back(':');
		append_digits(out, static_cast<unsigned long>(rem % 60), 2);
		out.push_back('.');
		append_digits(out, static_cast<unsigned long>((nanos < 0 ? 0 : nanos) / 1000), 6);
		out += "Z\"";
		return true;
	}
	if (t->shape == Shape::FIELD)
		return whole_field(t, 0, occ, 0, occ.size(), depth);

	/* Value: the kind sent last, or null */
	int			kind = oneof_last[static_cast<size_t>(t->d->FindOneofByName("kind")->index())];
	size_t		lo = 0;
	size_t		hi;

	if (kind < 0 || t->fields[kind]->name() == "null_value")
	{
		out += "null";
		return true;
	}
	while (lo < occ.size() && occ[lo].field != kind)
		lo++;
	hi = lo;
	while (hi < occ.size() && occ[hi].field == kind)
		hi++;
	if (t->fields[kind]->type() == pb::FieldDescriptor::TYPE_MESSAGE)
		return sub_message(t->fields[kind], occ, lo, hi, depth);
	return scalar(t->fields[kind], occ[hi - 1].wire, occ[hi - 1].value, occ[hi - 1].data, occ[hi - 1].len, depth);
}

/* A group (a deprecated wire form) of a field the schema does not know, skipped to its end. */
bool
WireReader::skip_group(const uint8_t **p, const uint8_t *end, uint64_t number, int depth)
{
	if (depth > 100)
		return fail("groups nested deeper than 100 levels");
	while (*p < end)
	{
		uint64_t	tag;
		uint64_t	v;

		if (!read_tag(p, end, &tag))
			return fail("a field's tag is cut short, or not one");
		switch (tag & 7)
		{
			case 0:
				if (!read_varint(p, end, &v))
					return fail("a varint is cut short or longer than 10 bytes");
				break;
			case 1:
			case 5:
				if (static_cast<size_t>(end - *p) < ((tag & 7) == 1 ? 8u : 4u))
					return fail("a fixed-width value is cut short");
				*p += (tag & 7) == 1 ? 8 : 4;
				break;
			case 2:
				if (!read_varint(p, end, &v) || v > static_cast<uint64_t>(end - *p))
					return fail("a length runs past the end of the message");
				*p += v;
				break;
			case 3:
				if (!skip_group(p, end, tag >> 3, depth + 1))
					return false;
				break;
			case 4:
				if ((tag >> 3) != number)
					return fail("a group ends with another's number");
				return true;
			default:
				return fail("wire type " + std::to_string(tag & 7) + " (not Protobuf)");
		}
	}
	return fail("a group has no end");
}

/*
 * A body of message type d, [p, end), as JSON: its fields read in the
 * order they came, then written in the order the type declares them.
 */
bool
WireReader::message(const pb::Descriptor *d, const uint8_t *p, const uint8_t *end, int depth)
{
	TypeInfo   *t = info(d);
	bool		first = true;

	if (depth > 100)
		return fail("messages nested deeper than 100 levels");
	std::vector<Occurrence> &occ = scratch[static_cast<size_t>(depth)];
	std::vector<int> &oneof_last = scratch_oneof[static_cast<size_t>(depth)];	/* each oneof's member sent last */

	occ.clear();
	oneof_last.assign(static_cast<size_t>(d->oneof_decl_count()), -1);
	while (p < end)
	{
		uint64_t	tag;
		Occurrence	o = {-1, 0, 0, nullptr, 0};
		uint64_t	number;

		if (!read_tag(&p, end, &tag))
			return fail("a field's tag is cut short, or not one");
		number = tag >> 3;
		o.wire = static_cast<int>(tag & 7);
		switch (o.wire)
		{
			case 0:
				if (!read_varint(&p, end, &o.value))
					return fail("a varint is cut short or longer than 10 bytes");
				break;
			case 1:
			case 5:
				{
					size_t		n = o.wire == 1 ? 8 : 4;

					if (static_cast<size_t>(end - p) < n)
						return fail("a fixed-width value is cut short");
					for (size_t i = 0; i < n; i++)
						o.value |= static_cast<uint64_t>(p[i]) << (8 * i);
					p += n;
					break;
				}
			case 2:
				{
					uint64_t	n;

					if (!read_varint(&p, end, &n) || n > static_cast<uint64_t>(end - p))
						return fail("a length runs past the end of the message");
					o.data = p;
					o.len = static_cast<size_t>(n);
					p += n;
					break;
				}
			case 3:
				{
					auto		it = t->by_number.find(static_cast<int>(number));

					if (it != t->by_number.end() && t->fields[it->second]->type() == pb::FieldDescriptor::TYPE_GROUP)
						return fail("field \"" + t->fields[it->second]->name() + "\" is a group, which is not read");
					if (!skip_group(&p, end, number, depth + 1))
						return false;
					continue;
				}
			default:
				return fail("wire type " + std::to_string(o.wire) + " where no field starts (not Protobuf)");
		}
		if (number < 64)
			o.field = t->small[number];
		else
		{
			auto		it = t->by_number.find(static_cast<int>(number));

			o.field = it == t->by_number.end() ? -1 : it->second;
		}
		if (o.field < 0)
			continue;			/* a field the schema does not know: skipped */

		const pb::FieldDescriptor *f = t->fields[o.field];
		int			expected = wire_type_of(f);

		/* a wire type the field cannot have (packed, for a repeated scalar): Protobuf keeps it as unknown */
		if (o.wire != expected && !(o.wire == 2 && f->is_repeated() && expected != 2 && expected != 3))
			continue;
		/* proto3 strings are UTF-8, every time they are sent (as libprotobuf checks) */
		if (o.wire == 2 && f->type() == pb::FieldDescriptor::TYPE_STRING &&
			f->file()->syntax() == pb::FileDescriptor::SYNTAX_PROTO3 && !valid_utf8(o.data, o.len))
			return fail("field \"" + f->name() + "\" is not valid UTF-8");
		if (f->real_containing_oneof() != nullptr)
			oneof_last[static_cast<size_t>(f->real_containing_oneof()->index())] = o.field;
		occ.push_back(o);
	}
	std::stable_sort(occ.begin(), occ.end(),
					 [](const Occurrence &a, const Occurrence &b) { return a.field < b.field; });
	if (t->shape != Shape::OBJECT)
		return special(t, occ, oneof_last, depth);

	out.push_back('{');
	for (size_t i = 0, k = 0; k < t->fields.size(); k++)
	{
		const pb::FieldDescriptor *f = t->fields[k];
		size_t		lo = i;

		while (i < occ.size() && occ[i].field == static_cast<int>(k))
			i++;
		if (lo == i && !f->is_repeated() && f->has_presence())
		{
			if (f->is_required())
				return fail("a " + d->full_name() + " message without its required field \"" + f->name() + "\"");
			continue;
		}
		if (lo < i && f->real_containing_oneof() != nullptr &&
			oneof_last[static_cast<size_t>(f->real_containing_oneof()->index())] != static_cast<int>(k))
			continue;			/* another member of its oneof came after it */
		if (!first)
			out.push_back(',');
		first = false;
		append_escaped(out, f->name());
		out.push_back(':');
		if (!whole_field(t, static_cast<int>(k), occ, lo, i, depth))
			return false;
	}
	out.push_back('}');
	return true;
}
}								/* namespace */

struct SdpPbSchema
{
	pb::SimpleDescriptorDatabase database;
	std::unique_ptr<pb::DescriptorPool> pool;
	const pb::FileDescriptor *file = nullptr;
	WireReader	reader;
};

extern "C" void
sdp_pb_free(void *p)
{
	free(p);
}

/*
 * libprotobuf's own log (a warning per schema without "syntax", say) would
 * go to the server's stderr, around its logging: what it says of a schema
 * is in the errors we return instead.
 */
static void
quiet_libprotobuf(void)
{
	static bool quiet = false;

	if (!quiet)
	{
#if GOOGLE_PROTOBUF_VERSION < 4022000
		pb::SetLogHandler([](pb::LogLevel, const char *, int, const std::string &) {});
#endif
		quiet = true;
	}
}

extern "C" SdpPbSchema *
sdp_pb_schema_create(int nfiles, const char *const *names, const char *const *texts, char **error)
{
	std::unique_ptr<SdpPbSchema> s;

	*error = nullptr;
	quiet_libprotobuf();
	try
	{
		std::string message;
		std::string main_name;
		std::set<std::string> have;
		std::vector<std::string> wanted;
		Errors		errors;

		size_t		total = 0;

		for (int i = 0; i < nfiles; i++)
			total += strlen(texts[i]);
		if (total > SDP_PB_MAX_SCHEMA_TEXT)
		{
			*error = dup_string("its files hold " + std::to_string(total) + " bytes, more than the " +
								std::to_string(SDP_PB_MAX_SCHEMA_TEXT) + " read");
			return nullptr;
		}
		s.reset(new SdpPbSchema());
		for (int i = 0; i < nfiles; i++)
		{
			pb::FileDescriptorProto fdp;

			if (!read_file(names[i], texts[i], &fdp, &message))
			{
				*error = dup_string(message);
				return nullptr;
			}
			if (i == 0)
				main_name = fdp.name();
			if (!have.insert(fdp.name()).second)
				continue;		/* the same file imported twice */
			for (const std::string &dep : fdp.dependency())
				wanted.push_back(dep);
			s->database.Add(fdp);
		}
		/* imports not given: Protobuf's well-known types, from the library's own pool */
		while (!wanted.empty())
		{
			std::string dep = wanted.back();
			const pb::FileDescriptor *known;

			wanted.pop_back();
			if (have.count(dep) > 0)
				continue;
			known = pb::DescriptorPool::generated_pool()->FindFileByName(dep);
			if (known == nullptr)
			{
				*error = dup_string("it imports \"" + dep + "\", which is neither among its references nor a well-known type");
				return nullptr;
			}
			pb::FileDescriptorProto fdp;

			known->CopyTo(&fdp);
			have.insert(dep);
			for (const std::string &d : fdp.dependency())
				wanted.push_back(d);
			s->database.Add(fdp);
		}
		s->pool.reset(new pb::DescriptorPool(&s->database, &errors));
		s->file = s->pool->FindFileByName(main_name);
		if (s->file == nullptr)
		{
			*error = dup_string(errors.text.empty() ? "it does not build" : errors.text);
			return nullptr;
		}
		if (s->file->message_type_count() == 0)
		{
			*error = dup_string("it has no message type");
			return nullptr;
		}
		return s.release();
	}
	catch (const std::exception &e)
	{
		*error = dup_string(std::string("libprotobuf: ") + e.what());
	}
	catch (...)
	{
		*error = dup_string("libprotobuf failed");
	}
	return nullptr;
}

extern "C" void
sdp_pb_schema_free(SdpPbSchema *schema)
{
	try
	{
		delete schema;
	}
	catch (...)
	{
	}
}

extern "C" bool
sdp_pb_to_json(SdpPbSchema *s, const int *indexes, int nindexes, const void *body, size_t len,
			   const char **json, size_t *json_len, char **error)
{
	*error = nullptr;
	try
	{
		const pb::Descriptor *d;

		if (nindexes == 0)
			d = s->file->message_type(0);
		else
		{
			if (indexes[0] < 0 || indexes[0] >= s->file->message_type_count())
			{
				*error = dup_string("its message index " + std::to_string(indexes[0]) + " names no message type of the schema's " +
									std::to_string(s->file->message_type_count()));
				return false;
			}
			d = s->file->message_type(indexes[0]);
			for (int i = 1; i < nindexes; i++)
			{
				if (indexes[i] < 0 || indexes[i] >= d->nested_type_count())
				{
					*error = dup_string("its message index " + std::to_string(indexes[i]) + " names no type nested in " +
										d->full_name());
					return false;
				}
				d = d->nested_type(indexes[i]);
			}
		}
		s->reader.out.clear();
		s->reader.error.clear();
		if (!s->reader.message(d, static_cast<const uint8_t *>(body), static_cast<const uint8_t *>(body) + len, 0))
		{
			*error = dup_string("not a " + d->full_name() + " message (" + s->reader.error + ")");
			return false;
		}
		*json = s->reader.out.data();
		*json_len = s->reader.out.size();
		return true;
	}
	catch (const std::exception &e)
	{
		*error = dup_string(std::string("libprotobuf: ") + e.what());
	}
	catch (...)
	{
		*error = dup_string("libprotobuf failed");
	}
	return false;
}
