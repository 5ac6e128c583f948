#!/bin/sh
# tools/deps.sh demo|test: the system packages `make demo` or `make test`
# needs. On Debian/Ubuntu it installs the missing ones itself (apt-get,
# as root, or with sudo; it says what it installs); elsewhere it stops at
# once with the command for the platform. `make demo` and `make test` call
# it first, and so does .ci/run (`tools/deps.sh ci`: test's packages plus
# the sanitizer, valgrind and lint tools), so CI proves the mechanism.
# LK_DEPS=skip leaves it out (a machine set up by hand).
set -eu
what="${1:-test}"
[ "${LK_DEPS:-}" = "skip" ] && exit 0

# The demo: build the module (C compiler, Lua 5.4 headers, the codecs'
# libraries, OpenSSL for SCRAM), luasocket, librdkafka (its mock cluster,
# KAFKA_DEMO=mock) and a JDK with Maven (the real broker the demo starts).
DEMO="build-essential pkg-config lua5.4 liblua5.4-dev lua-socket zlib1g-dev libsnappy-dev liblz4-dev
  libzstd-dev libssl-dev librdkafka-dev openssl"
# The tests: every Lua the suite runs on, busted and luacheck, LDoc (make
# docs), TLS (LuaSec), the peers (kcat, kafka-python with its codecs, nginx
# with lua-nginx-module and wrk for the OpenResty specs).
TEST="$DEMO lua5.3 liblua5.3-dev lua5.1 liblua5.1-0-dev luarocks lua-busted lua-check lua-ldoc lua-sec
  luajit2 libluajit2-5.1-dev kcat nginx libnginx-mod-http-lua lua-resty-core apache2-utils wrk
  python3-kafka python3-snappy python3-lz4 python3-xxhash python3-zstandard python3-crc32c"
# CI's extra targets: sanitizers, valgrind, fuzzing (clang), cppcheck.
CI="$TEST clang libclang-rt-14-dev cppcheck valgrind"
case "$what" in
  demo) pkgs=$DEMO ;;
  test) pkgs=$TEST ;;
  ci) pkgs=$CI ;;
  *) echo "tools/deps.sh: demo, test or ci (got $what)" >&2; exit 2 ;;
esac
# A JDK 17+ and Maven (real Kafka brokers, Kafka's Java client), unless the
# machine has its own.
if ! command -v java >/dev/null 2>&1 || ! command -v javac >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
  pkgs="$pkgs default-jdk-headless maven"
fi

if command -v apt-get >/dev/null 2>&1 && command -v dpkg-query >/dev/null 2>&1; then
  missing=""
  for p in $pkgs; do
    case "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" in
      *"ok installed") ;;
      *) missing="$missing $p" ;;
    esac
  done
  [ -z "$missing" ] && exit 0
  if [ "$(id -u)" -eq 0 ]; then sudo=""
  elif command -v sudo >/dev/null 2>&1; then sudo="sudo"
  else
    echo "make $what needs these Debian packages; as root run:" >&2
    echo "  apt-get install -y$missing" >&2
    exit 1
  fi
  echo "== make $what installs the Debian packages it lacks:$missing"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  # shellcheck disable=SC2086
  $sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
  # the nginx package starts the system's nginx; the specs run their own
  case "$missing" in *" nginx"*) $sudo service nginx stop >/dev/null 2>&1 || true ;; esac
  exit 0
fi

# Not Debian: say what to install and stop.
echo "make $what installs its packages itself only on Debian/Ubuntu (apt-get)." >&2
if command -v brew >/dev/null 2>&1; then
  echo "On macOS: brew install pkg-config lua zlib snappy lz4 zstd openssl librdkafka luarocks openjdk maven" >&2
  echo "  && luarocks install luasocket busted luacheck luasec" >&2
elif command -v dnf >/dev/null 2>&1; then
  echo "On Fedora/RHEL: dnf install -y gcc make pkgconf lua lua-devel zlib-devel snappy-devel lz4-devel \\" >&2
  echo "  libzstd-devel openssl-devel librdkafka-devel lua-socket java-17-openjdk-devel maven luarocks" >&2
  echo "  && luarocks install busted luacheck luasec" >&2
else
  echo "Install the equivalents of these Debian packages:" >&2
  echo " " $pkgs >&2
fi
echo "Then run make $what again with LK_DEPS=skip." >&2
exit 1
