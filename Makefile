# lua-kafka: build, test, lint. `make LUA=lua5.3|lua5.1|luajit` builds the same module
# for that Lua into build/<lua>/kafka/core.so.
LUA ?= lua5.4
# The Luas `make test` runs the whole suite on, in this order.
LUAS ?= lua5.4 lua5.3 lua5.1 luajit
ifeq ($(LUA),luajit)
  LUA_PC := luajit
else
  LUA_PC := $(LUA)
endif
BUILD := build/$(LUA)
PKG_CONFIG ?= pkg-config
LUA_INC := $(shell $(PKG_CONFIG) --cflags $(LUA_PC))

CC ?= cc
CFLAGS ?= -O2 -g
WARN := -Wall -Wextra -Wshadow -Wconversion -Wmissing-prototypes -Wstrict-prototypes \
        -Wpointer-arith -Wformat=2 -Wundef -Wcast-align -Wvla
ALL_CFLAGS := -std=gnu99 -fPIC -fvisibility=hidden $(WARN) $(CFLAGS) $(EXTRA_CFLAGS)
CRYPTO_CFLAGS := $(shell $(PKG_CONFIG) --cflags libssl libcrypto)
# libssl: the TLS transport (csrc/tls.c); libcrypto: SASL's primitives
CRYPTO_LIBS := $(shell $(PKG_CONFIG) --libs libssl libcrypto)
LIBS := -lz -lsnappy -llz4 -lzstd $(CRYPTO_LIBS)
LDFLAGS ?=

CORE_SRC := csrc/buf.c csrc/crc.c csrc/compress.c csrc/records.c csrc/schema.c csrc/apis.c csrc/crypto.c csrc/tls.c
GLUE_SRC := csrc/lua_kafka.c csrc/lua_glue.c csrc/lua_schema.c csrc/lua_records.c csrc/lua_batch.c csrc/lua_crypto.c csrc/lua_producer.c csrc/lua_bytes.c csrc/lua_inbox.c csrc/lua_tls.c
CORE_OBJ := $(patsubst csrc/%.c,$(BUILD)/%.o,$(CORE_SRC))
GLUE_OBJ := $(patsubst csrc/%.c,$(BUILD)/%.o,$(GLUE_SRC))
MODULE := $(BUILD)/kafka/core.so
HEADERS := $(wildcard csrc/*.h)

BUSTED := $(shell command -v busted)
# Real Kafka brokers for the specs (spec/support/kafka/): started on first
# use, shared by every Lua run of one `make test`, stopped at its end.
WITH_BROKERS := spec/support/kafka/with-brokers.sh
# the sanitizer run uses the main broker version only; valgrind none (the
# real-broker specs run the same C paths as the others, ten times slower) and
# no nginx specs (nginx runs its own LuaJIT, outside memcheck, and its
# reload/stop cases need a spec process that keeps pace with the load)
SANITIZE_KAFKA ?= 4.4.0
VALGRIND_KAFKA ?= none
TEST_ENV = LUA_PATH="$(CURDIR)/lua/?.lua;$(CURDIR)/lua/?/init.lua;$(CURDIR)/spec/?.lua;;" \
           LUA_CPATH="$(CURDIR)/$(BUILD)/?.so;;"

.PHONY: admin matrix options-doc mutants mutants-ci chaos all docs test test-all demo-run test-lua test-luajit lint asan clean clean-objs gen demo mock fuzz corpus valgrind coverage bench

all: $(MODULE)

$(BUILD)/%.o: csrc/%.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(LUA_INC) $(CRYPTO_CFLAGS) -c -o $@ $<

$(MODULE): $(CORE_OBJ) $(GLUE_OBJ)
	@mkdir -p $(dir $@)
	$(CC) -shared $(LDFLAGS) $(EXTRA_LDFLAGS) -o $@ $^ $(LIBS)
	@nm -D --defined-only $@ | awk '$$2 ~ /[TDB]/ && $$3 !~ /^(luaopen_|_init$$|_fini$$|__gcov|mangle_path$$)/ {print "unexpected export: " $$3; bad=1} END {exit bad}'

MOCKBROKER := build/mockbroker
$(MOCKBROKER): spec/support/mockbroker.c
	@mkdir -p build
	$(CC) -std=gnu99 -O1 -g -Wall -Wextra -o $@ $< $$($(PKG_CONFIG) --cflags --libs rdkafka)

mock: $(MOCKBROKER)

# The README's test command: the whole suite on each Lua in LUAS (each with its
# own build in LUA_CPATH), then the LuaJIT smoke spec. Every Lua runs even if
# one fails; the list of failing Luas comes last.
# It first installs the Debian packages it lacks (tools/deps.sh; elsewhere it
# stops with the command to run), then builds in a new make (which reads
# pkg-config afresh).
test:
	@tools/deps.sh test
	@$(MAKE) --no-print-directory $(MOCKBROKER)
	@$(WITH_BROKERS) $(MAKE) --no-print-directory test-all

# The first Lua runs the real-broker specs against every Kafka version
# (KAFKA_VERSIONS, default 4.4.0,4.1.2,3.9.1) and the full matrices of the
# peer specs; the others run every spec file against the main version only
# (KAFKA_VERSIONS_OTHERS) with SPEC_TIER=lite (a representative part of the
# group, security and Java matrices, 50,000-message soak, 20,000-message
# bulks): the broker and peer matrices test the brokers and peers, the Lua
# matrix the Luas. Lua 5.3 and 5.1 run SPEC_TIER=min: lite without the slow
# real-broker cases about the brokers' behaviour over time (spec/support/
# helpers.lua's min(); they show as pending), which LuaJIT runs.
KAFKA_VERSIONS_OTHERS ?= 4.4.0
test-all:
	@failed=""; first=1; for l in $(LUAS); do \
	  echo "== the whole suite on $$l"; \
	  start=$$(date +%s); \
	  if [ $$first = 1 ] || [ -n "$$KAFKA_VERSIONS" ]; then kv="$${KAFKA_VERSIONS:-}"; else kv="$(KAFKA_VERSIONS_OTHERS)"; fi; \
	  if [ $$first = 1 ]; then tier=full; bulk="$${SPEC_BULK_N:-}"; elif [ $$l = luajit ]; then tier=lite; \
	    bulk="$${SPEC_BULK_N:-20000}"; else tier=min; bulk="$${SPEC_BULK_N:-20000}"; fi; \
	  first=0; \
	  KAFKA_VERSIONS="$$kv" SPEC_TIER=$$tier SPEC_BULK_N="$$bulk" $(MAKE) --no-print-directory test-lua LUA=$$l \
	    || failed="$$failed $$l"; \
	  echo "== $$l: $$(( $$(date +%s) - start )) s"; \
	done; \
	$(MAKE) --no-print-directory test-luajit || failed="$$failed luajit-smoke"; \
	if [ -n "$$failed" ]; then echo "== make test failed on:$$failed"; exit 1; fi

# The whole suite on one Lua: make test-lua LUA=lua5.1 (the nginx spec always
# loads the LuaJIT build, inside nginx).
test-lua: all $(MOCKBROKER)
	$(MAKE) --no-print-directory LUA=luajit all
	$(TEST_ENV) $(LUA) $(BUSTED) spec

test-luajit:
	$(MAKE) --no-print-directory LUA=luajit all
	LUA_PATH="$(CURDIR)/lua/?.lua;$(CURDIR)/lua/?/init.lua;$(CURDIR)/spec/?.lua;;" \
	LUA_CPATH="$(CURDIR)/build/luajit/?.so;;" luajit $(BUSTED) spec/luajit_smoke.lua

# docs/options.md from the option declarations (lua/kafka/options.lua);
# spec/options_doc_spec.lua fails when it is stale.
options-doc:
	$(TEST_ENV) lua5.4 tools/options-doc.lua > docs/options.md

lint:
	luacheck lua spec examples tools bench compat
	luac5.1 -p lua/kafka/*.lua lua/kafka/*/*.lua spec/*.lua spec/support/*.lua compat/resty/kafka/*.lua compat/resty/kafka/*/*.lua # Lua 5.1 syntax: no //, bitwise ops, goto
	lua5.4 tools/one_finally.lua spec/*.lua # busted keeps one finally() per test
	cppcheck --enable=warning,performance,portability,style --error-exitcode=1 --inline-suppr -q \
	  --std=c99 -I csrc csrc/*.c fuzz/*.c spec/support/mockbroker.c
	$(MAKE) clean-objs
	$(MAKE) all EXTRA_CFLAGS=-Werror

clean-objs:
	rm -rf $(BUILD)

# Module and suite under AddressSanitizer + UBSan (the runtime preloaded into
# lua5.4), at the lite tier (ASAN_TIER): the full tier's extra cases are
# broker matrices and behaviour over time that run the same C paths.
ASAN_TIER ?= lite
asan:
	$(MAKE) LUA=lua5.4 BUILD=build/asan CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" EXTRA_LDFLAGS="-fsanitize=address,undefined" build/asan/kafka/core.so
	LD_PRELOAD="$$($(CC) -print-file-name=libasan.so) $$($(CC) -print-file-name=libubsan.so)" \
	ASAN_OPTIONS=detect_leaks=0 \
	LUA_PATH="$(CURDIR)/lua/?.lua;$(CURDIR)/lua/?/init.lua;$(CURDIR)/spec/?.lua;;" \
	LUA_CPATH="$(CURDIR)/build/asan/?.so;;" KAFKA_VERSIONS=$(SANITIZE_KAFKA) SPEC_TIER=$(ASAN_TIER) $(WITH_BROKERS) lua5.4 $(BUSTED) spec

# The demo: a real Kafka broker it starts (or KAFKA_BROKERS, or KAFKA_DEMO=mock), 10,000 messages per codec there and back.
# Like test, it first installs the Debian packages it lacks (tools/deps.sh).
demo:
	@tools/deps.sh demo
	@$(MAKE) --no-print-directory demo-run
demo-run: all $(MOCKBROKER)
	$(TEST_ENV) $(LUA) examples/demo.lua

# Mutation testing: the mutants of tools/mutants-list.lua, each against the specs
# that must catch it (MUTANTS=name1,name2 for a subset). Slow: not part of test.
mutants: all $(MOCKBROKER)
	$(MAKE) --no-print-directory LUA=luajit all
	$(WITH_BROKERS) lua5.4 tools/mutants.lua

# The chaos suite (spec/chaos_spec.lua): a 3-node cluster of the first of
# KAFKA_VERSIONS, six faults under a default producer and a group consumer.
CHAOS_KAFKA ?= 4.1.2
chaos: all
	SPEC_CHAOS=1 KAFKA_VERSIONS=$(CHAOS_KAFKA) $(TEST_ENV) $(WITH_BROKERS) $(LUA) $(BUSTED) spec/chaos_spec.lua

# kafka.admin against real brokers with Java's AdminClient as the oracle
# (spec/admin_spec.lua: about 200 s per version, and
# spec/admin_security_spec.lua on a broker with an authorizer; outside make test's
# budget); .ci/run runs it on ADMIN_KAFKA.
ADMIN_KAFKA ?= 4.1.2
admin: all
	SPEC_ADMIN=1 KAFKA_VERSIONS=$(ADMIN_KAFKA) $(TEST_ENV) $(WITH_BROKERS) $(LUA) $(BUSTED) spec/admin_spec.lua spec/admin_security_spec.lua spec/admin_cluster_spec.lua

# The broker matrix: the lite tier of the real-broker specs (MATRIX_SPECS) on
# $(LUA) against each of MATRIX_KAFKA in turn, each the main version of its own
# run (so the security, Java and producer-expiry cases run on it too), its
# brokers stopped before the next; what a version does not serve is pending,
# with the reason read from its ApiVersions. The share groups' spec runs on
# each version whose broker serves them (a broker of its own, with the share
# groups' settings: KAFKA_SHARE_VERSION), pending on the others. Every version
# runs even if one fails; the failing ones come last. .ci/run runs it after make admin. (4.4.0,
# 4.1.2 and 3.9.1 are make test's, at the full tier: not again here.)
MATRIX_KAFKA ?= 4.3.2 4.2.2 4.0.2 2.8.2
MATRIX_SPECS ?= spec/real_kafka_spec.lua spec/group_spec.lua spec/eos_spec.lua spec/idempotence_spec.lua \
  spec/security_spec.lua spec/interop_java_spec.lua spec/topic_id_spec.lua spec/share_consumer_spec.lua
matrix: all $(MOCKBROKER)
	@failed=""; all=$$(date +%s); for v in $(MATRIX_KAFKA); do \
	  echo "== the lite tier against Kafka $$v"; start=$$(date +%s); \
	  KAFKA_VERSIONS=$$v KAFKA_SHARE_VERSION=$$v SPEC_TIER=lite $(TEST_ENV) $(WITH_BROKERS) $(LUA) $(BUSTED) $(MATRIX_SPECS) || failed="$$failed $$v"; \
	  echo "== Kafka $$v: $$(( $$(date +%s) - start )) s"; \
	done; \
	echo "== make matrix: $$(( $$(date +%s) - all )) s"; \
	if [ -n "$$failed" ]; then echo "== make matrix failed on Kafka:$$failed"; exit 1; fi

# The mutants marked ci = true (the promises found unguarded, each with the
# spec written for it): the part of `make mutants` that .ci/run runs.
mutants-ci:
	MUTANTS_CI=1 $(MAKE) --no-print-directory mutants

# Fuzzing (libFuzzer, clang): each harness runs FUZZ_SECONDS from fuzz/corpus/.
FUZZ_SECONDS ?= 30
FUZZ_HARNESSES := response request records decompress
FUZZ_CC ?= clang
FUZZ_FLAGS := -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
FUZZ_BINS := $(patsubst %,build/fuzz/fuzz_%,$(FUZZ_HARNESSES))

build/fuzz/fuzz_%: fuzz/fuzz_%.c fuzz/fuzz_common.h fuzz/fuzz_roundtrip.h $(CORE_SRC) $(HEADERS)
	@mkdir -p build/fuzz
	$(FUZZ_CC) $(FUZZ_FLAGS) -std=gnu99 -o $@ $< $(CORE_SRC) $(LIBS)

fuzz: $(FUZZ_BINS)
	@for h in $(FUZZ_HARNESSES); do \
	  mkdir -p build/fuzz/work-$$h build/fuzz/crashes-$$h; \
	  echo "== fuzz_$$h for $(FUZZ_SECONDS) s"; \
	  build/fuzz/fuzz_$$h build/fuzz/work-$$h fuzz/corpus/$$h -max_total_time=$(FUZZ_SECONDS) \
	    -malloc_limit_mb=128 -rss_limit_mb=1024 -max_len=65536 -timeout=10 \
	    -artifact_prefix=build/fuzz/crashes-$$h/ -print_final_stats=1 2>build/fuzz/$$h.log \
	    || { tail -40 build/fuzz/$$h.log; exit 1; }; \
	  grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' build/fuzz/$$h.log; \
	done

# Rewrites the seed corpus from the codec's golden frames.
corpus: all
	rm -rf fuzz/corpus
	$(TEST_ENV) $(LUA) tools/mkcorpus.lua fuzz/corpus

# The whole suite under valgrind memcheck: no errors, no definite leaks.
# The bulk client specs run 10,000 messages per codec here instead of 100,000.
# Not interop_java_codec_spec: its 670 vectors take 7-8 minutes in Lua under
# memcheck for C paths (the schema interpreter) that schema_spec runs here
# too and make asan and make fuzz run with every vector.
valgrind: all $(MOCKBROKER)
	$(MAKE) LUA=luajit all
	SPEC_BULK_N=10000 SOAK_N=20000 KAFKA_VERSIONS=$(VALGRIND_KAFKA) $(TEST_ENV) $(WITH_BROKERS) valgrind --quiet \
	  --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite --show-leak-kinds=definite \
	  lua5.4 $(BUSTED) --exclude-pattern=nginx --exclude-pattern=interop_java_codec spec

# Line coverage of csrc/ under the whole suite (gcov), written to build/cov/summary.txt.
coverage: $(MOCKBROKER)
	rm -rf build/cov
	$(MAKE) LUA=lua5.4 BUILD=build/cov CFLAGS="-O0 -g --coverage" EXTRA_LDFLAGS="--coverage" build/cov/kafka/core.so
	$(MAKE) LUA=luajit all
	LUA_PATH="$(CURDIR)/lua/?.lua;$(CURDIR)/lua/?/init.lua;$(CURDIR)/spec/?.lua;;" \
	LUA_CPATH="$(CURDIR)/build/cov/?.so;;" $(WITH_BROKERS) lua5.4 $(BUSTED) spec
	cd build/cov && gcov -n $(patsubst csrc/%.c,%.o,$(CORE_SRC) $(GLUE_SRC)) 2>/dev/null | \
	  awk '/^File .*csrc/ {f=$$2} /^Lines executed/ && f {split($$2,a,":"); sub("%","",a[2]); \
	    n=$$4; hit=a[2]*n/100; th+=hit; tn+=n; printf "%-28s %6.2f%% of %d\n", f, a[2], n; f=""} \
	    END {printf "%-28s %6.2f%% of %d lines\n", "csrc total", 100*th/tn, tn}' | tee summary.txt

# Benchmarks: one table, every peer in the same run (bench/results.md).
build/bench/floor: bench/floor.c $(CORE_SRC) $(HEADERS)
	@mkdir -p build/bench
	$(CC) -std=gnu99 -O2 -g -o $@ bench/floor.c $(CORE_SRC) $(LIBS)

build/bench/rdkafka_bench: bench/rdkafka_bench.c
	@mkdir -p build/bench
	$(CC) -std=gnu99 -O2 -g -Wall -o $@ $< $$($(PKG_CONFIG) --cflags --libs rdkafka)

# the benchmarks' broker runs as bin/kafka-server-start.sh runs it (full JIT, G1, 1 GiB heap)
BENCH_KAFKA_JVM := -Xms1g -Xmx1g -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
  -XX:+ExplicitGCInvokesConcurrent
bench: all $(MOCKBROKER) build/bench/floor build/bench/rdkafka_bench
	$(MAKE) LUA=luajit all
	BENCH_ROOT=$(CURDIR) KAFKA_JVM_OPTS="$(BENCH_KAFKA_JVM)" $(TEST_ENV) lua5.4 bench/run.lua

# Regenerates csrc/apis.c from Kafka's JSON definitions, the union of one or
# more folders, oldest first (fails, leaving csrc/apis.c alone, where two
# folders disagree on a version). `make gen` fetches the definitions of the
# kafka-clients jars KAFKA_GEN_VERSIONS from Maven Central into
# KAFKA_DEFS_DIR (tools/fetch-protocol.sh; outside the repository, never
# committed) and generates from them; KAFKA_DEFS="dir dir..." takes folders
# as they are instead.
KAFKA_GEN_VERSIONS ?= 3.9.1 4.1.2 4.4.0
KAFKA_DEFS_DIR ?= /tmp/lua-kafka-defs
gen:
	@if [ -z "$(KAFKA_DEFS)" ]; then for v in $(KAFKA_GEN_VERSIONS); do tools/fetch-protocol.sh $$v $(KAFKA_DEFS_DIR)/$$v || exit 1; done; fi
	python3 tools/gen-apis.py $(or $(KAFKA_DEFS),$(addprefix $(KAFKA_DEFS_DIR)/,$(KAFKA_GEN_VERSIONS))) > csrc/apis.c.tmp && mv csrc/apis.c.tmp csrc/apis.c || { rm -f csrc/apis.c.tmp; exit 1; }

# The API reference from the doc comments (LDoc, config.ld) into build/docs/api
# (generated, not committed; any LDoc warning fails it), and docs/options.md
# from the option declarations.
docs: options-doc
	@command -v ldoc >/dev/null 2>&1 || tools/deps.sh test
	rm -rf build/docs/api
	ldoc --fatalwarnings .

clean:
	rm -rf build
