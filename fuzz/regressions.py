#!/usr/bin/env python3
"""fuzz/regressions.py OUTDIR: write the inputs that once crashed or pinned
the server and are too large to keep in the repository, as
OUTDIR/<target>/<name> (scripts/fuzz.sh runs each once before fuzzing).

Issue 46's attacks, both through a schema registry's answer:
  proto_unclosed_string_nesting  a .proto text that opens a string never
      closed on its line, then 100,000 nested message blocks: the depth
      check took the string to run to the next '"' across lines (so it saw
      no nesting), libprotobuf ends it at the line's end and its parser
      recursed through every block, past the stack (or, with
      AddressSanitizer, past 2 GB first: its source locations grow as the
      square of the depth)
  proto_unclosed_string_skip     the same string where the statement it is
      in does not end: the parser skips the rest, recursing per block
  json_single_quote_nesting      {'k"': [[[...100,000...]]]}: single quotes,
      which libprotobuf's JSON parser accepts, and a '"' inside them that
      made the depth check see one long string; the parser took minutes
"""
import json
import os
import sys

DEPTH = 100000


def proto_nesting(statement):
    return ('syntax = "proto3";\n' + statement + 'message A {\n' * DEPTH + '}\n' * DEPTH)


def registry_answer(schema):
    return json.dumps({"schema": schema, "schemaType": "PROTOBUF"})


def main():
    out = sys.argv[1]
    nesting = proto_nesting('option java_package = "x\n;\n')
    skip = proto_nesting('option java_package = "x;\n')
    files = {
        "pb_schema/proto_unclosed_string_nesting": nesting,
        "pb_schema/proto_unclosed_string_skip": skip,
        "registry_answer/proto_unclosed_string_nesting": registry_answer(nesting),
        "registry_answer/proto_unclosed_string_skip": registry_answer(skip),
        "registry_answer/json_single_quote_nesting": "{'k\"': " + "[" * DEPTH + "]" * DEPTH + "}",
    }
    for name, text in files.items():
        path = os.path.join(out, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
