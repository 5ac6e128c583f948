#!/usr/bin/env bash
# with-brokers.sh CMD...: runs CMD as the owner of the Kafka brokers the
# specs start (LK_KAFKA_OWNER), so the Lua runs of `make test` share one
# start of each cluster; every cluster this shell owns is stopped when CMD
# ends, fails or is interrupted (and the harness's watchdog stops them if
# this shell is killed).
H=$(cd "$(dirname "$0")" && pwd)
RUN="$H/../../../build/kafka/run"
export LK_KAFKA_OWNER=$$
cleanup() {
  for d in "$RUN"/*/; do
    [ -f "$d/owner" ] && [ "$(cat "$d/owner")" = "$LK_KAFKA_OWNER" ] && "$H/harness.sh" stop "$(basename "$d")"
  done
}
trap cleanup EXIT
trap 'exit 130' INT TERM
"$@"
