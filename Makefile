# lua-kafka: build, test, lint. `make LUA=luajit` builds the same module for LuaJIT 2.1.
LUA ?= lua5.4
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
LIBS := -lz -lsnappy -llz4 -lzstd
LDFLAGS ?=

CORE_SRC := csrc/buf.c csrc/crc.c csrc/compress.c csrc/records.c csrc/schema.c csrc/apis.c
GLUE_SRC := csrc/lua_kafka.c
CORE_OBJ := $(patsubst csrc/%.c,$(BUILD)/%.o,$(CORE_SRC))
GLUE_OBJ := $(patsubst csrc/%.c,$(BUILD)/%.o,$(GLUE_SRC))
MODULE := $(BUILD)/kafka/core.so
HEADERS := $(wildcard csrc/*.h)

BUSTED := $(shell command -v busted)
TEST_ENV = LUA_PATH="$(CURDIR)/lua/?.lua;$(CURDIR)/lua/?/init.lua;$(CURDIR)/spec/?.lua;;" \
           LUA_CPATH="$(CURDIR)/$(BUILD)/?.so;;"

.PHONY: all test test-luajit lint asan clean clean-objs gen demo mock

all: $(MODULE)

$(BUILD)/%.o: csrc/%.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(LUA_INC) -c -o $@ $<

$(MODULE): $(CORE_OBJ) $(GLUE_OBJ)
	@mkdir -p $(dir $@)
	$(CC) -shared $(LDFLAGS) $(EXTRA_LDFLAGS) -o $@ $^ $(LIBS)
	@nm -D --defined-only $@ | awk '$$2 ~ /[TDB]/ && $$3 !~ /^(luaopen_|_init$$|_fini$$)/ {print "unexpected export: " $$3; bad=1} END {exit bad}'

MOCKBROKER := build/mockbroker
$(MOCKBROKER): spec/support/mockbroker.c
	@mkdir -p build
	$(CC) -std=gnu99 -O1 -g -Wall -Wextra -o $@ $< $$($(PKG_CONFIG) --cflags --libs rdkafka)

mock: $(MOCKBROKER)

# The README's test command: the whole suite on Lua 5.4, then the LuaJIT smoke spec.
test: all $(MOCKBROKER)
	$(MAKE) LUA=luajit all
	$(TEST_ENV) $(LUA) $(BUSTED) --lua=$(LUA) spec
	$(MAKE) test-luajit

test-luajit:
	$(MAKE) LUA=luajit all
	LUA_PATH="$(CURDIR)/lua/?.lua;$(CURDIR)/lua/?/init.lua;$(CURDIR)/spec/?.lua;;" \
	LUA_CPATH="$(CURDIR)/build/luajit/?.so;;" luajit $(BUSTED) --lua=luajit spec/luajit_smoke.lua

lint:
	luacheck lua spec examples
	$(MAKE) clean-objs
	$(MAKE) all EXTRA_CFLAGS=-Werror

clean-objs:
	rm -rf $(BUILD)

# Module and suite under AddressSanitizer + UBSan (the runtime preloaded into lua5.4).
asan:
	$(MAKE) LUA=lua5.4 BUILD=build/asan CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" EXTRA_LDFLAGS="-fsanitize=address,undefined" build/asan/kafka/core.so
	LD_PRELOAD="$$($(CC) -print-file-name=libasan.so) $$($(CC) -print-file-name=libubsan.so)" \
	ASAN_OPTIONS=detect_leaks=0 \
	LUA_PATH="$(CURDIR)/lua/?.lua;$(CURDIR)/lua/?/init.lua;$(CURDIR)/spec/?.lua;;" \
	LUA_CPATH="$(CURDIR)/build/asan/?.so;;" lua5.4 $(BUSTED) --lua=lua5.4 spec

# The demo: the mock cluster (or KAFKA_BROKERS), 10,000 messages per codec there and back.
demo: all $(MOCKBROKER)
	$(TEST_ENV) $(LUA) examples/demo.lua

# Regenerates csrc/apis.c from Kafka's JSON definitions: make gen KAFKA_DEFS=dir
gen:
	@test -n "$(KAFKA_DEFS)" || { echo "usage: make gen KAFKA_DEFS=path/to/common/message"; exit 2; }
	python3 tools/gen-apis.py $(KAFKA_DEFS) > csrc/apis.c.tmp && mv csrc/apis.c.tmp csrc/apis.c

clean:
	rm -rf build
