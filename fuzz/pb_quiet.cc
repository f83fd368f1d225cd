/*
 * pb_quiet.cc
 *		libprotobuf's log (its WARNINGs, to stderr: "No syntax specified",
 *		...) silenced in a fuzz target, where every input can say one:
 *		what matters is what the code does, and libFuzzer's own output.
 */
#include <string>

#include <google/protobuf/stubs/logging.h>

extern "C" void
sdp_fuzz_quiet_protobuf(void)
{
	google::protobuf::SetLogHandler([](google::protobuf::LogLevel, const char *, int, const std::string &) {});
}
