# sdp_ext: streaming declarative pipelines inside PostgreSQL.
#
#   make                 the extension (needs PostgreSQL's server headers, librdkafka)
#   make install         the extension into the PostgreSQL found by pg_config
#   make tools           the tools in tools/ (also libjansson, libmicrohttpd, libpq)
#   make installcheck    pg_regress (test/sql, test/expected) and TAP (test/t/)
#
# Set CI=true (as CI does) for -Werror and assertion checks.
# Set RDKAFKA_PREFIX=DIR to build the extension and the tools against the
# librdkafka installed in DIR (include/, lib/) instead of the system's
# (bench/librdkafka.sh builds a newer one there).

EXTENSION = sdp_ext
MODULE_big = sdp_ext
OBJS = $(patsubst %.c,%.o,$(wildcard src/*.c src/*/*.c src/*/*/*.c)) \
	$(patsubst %.cpp,%.o,$(wildcard src/*/*.cpp))
DATA = $(wildcard sdp_ext--*.sql)

REGRESS = $(patsubst test/sql/%.sql,%,$(sort $(wildcard test/sql/*.sql)))
REGRESS_OPTS = --temp-config=test/regress.conf --temp-instance=tmp_check_regress \
	--inputdir=test

TAP_TESTS = 1
PROVE_TESTS = $(sort $(wildcard test/t/*.pl))
PROVE_FLAGS = -I test/perl

PG_CONFIG ?= pg_config

PG_CFLAGS += -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers \
	-Wno-sign-compare
PG_CPPFLAGS += -Isrc
# the version this library is built for (sdp_library_version())
SDP_LIBRARY_VERSION := $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" sdp_ext.control)
PG_CPPFLAGS += -DSDP_LIBRARY_VERSION='"$(SDP_LIBRARY_VERSION)"'
ifeq ($(CI),true)
PG_CFLAGS += -Werror -DUSE_ASSERT_CHECKING
endif
ifneq ($(RDKAFKA_PREFIX),)
RDKAFKA_CFLAGS = -isystem $(RDKAFKA_PREFIX)/include
RDKAFKA_LIBS = -L$(RDKAFKA_PREFIX)/lib -Wl,-rpath,$(RDKAFKA_PREFIX)/lib
PG_CPPFLAGS += $(RDKAFKA_CFLAGS)
endif
# Protobuf: libprotobuf (C++) reads schemas known only at run time (exec/protobuf_reflect.cpp)
PG_CXXFLAGS += -std=c++17 -Isrc -fvisibility=hidden $(if $(filter true,$(CI)),-Werror)
SHLIB_LINK += $(RDKAFKA_LIBS) -lrdkafka -lcurl -lprotobuf -lstdc++ -lm

# Tools: plain programs beside the extension (embedded broker, event
# generators, dashboard), built by "make tools" with libraries of their own.
KAFKA_TOOLS = tools/sdp_broker tools/flight_sim tools/payment_sim tools/kafka_floor tools/kafka_admin
TOOLS = $(KAFKA_TOOLS) tools/sdp_dashboard
TOOL_CFLAGS = -O2 -g -Wall -Wextra -Wno-unused-parameter $(if $(filter true,$(CI)),-Werror)
EXTRA_CLEAN = $(TOOLS) tmp_check_regress results regression.diffs regression.out

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# every object depends on every header: rebuild all when a struct changes
$(OBJS): $(wildcard src/*.h src/*/*.h src/*/*/*.h)

.PHONY: tools
tools: $(TOOLS)

$(KAFKA_TOOLS): tools/%: tools/%.c $(wildcard tools/*.h)
	$(CC) $(TOOL_CFLAGS) $(RDKAFKA_CFLAGS) -o $@ $(filter %.c,$^) $(RDKAFKA_LIBS) -lrdkafka -lm -lpthread

# the generators' common part, and the broker's messages and stop signals
tools/sdp_broker tools/flight_sim tools/payment_sim: tools/producer.c

# the dashboard is a database client: libpq and an HTTP server, no Kafka
tools/sdp_dashboard: $(wildcard tools/dashboard/*.c tools/dashboard/*.h)
	$(CC) $(TOOL_CFLAGS) -I$(shell $(PG_CONFIG) --includedir) -o $@ $(filter %.c,$^) \
		-lpq -lmicrohttpd -ljansson -lm -lpthread

# The two halves of installcheck, runnable on their own (scripts/test.sh).
.PHONY: regresscheck tapcheck
regresscheck:
	$(pg_regress_installcheck) $(REGRESS_OPTS) $(REGRESS)
tapcheck:
	$(prove_installcheck)
