#!/bin/sh
# Fetches Apache Kafka's message definitions (common/message/*.json, the
# input of tools/gen-apis.py) from the kafka-clients jar of one release on
# Maven Central, with Maven, into a folder outside the repository:
#
#   tools/fetch-protocol.sh VERSION DIR    e.g. tools/fetch-protocol.sh 4.4.0 /tmp/kafka-defs/4.4.0
#
# DIR receives the JSON files, Kafka's README.md of the format, the jar's
# LICENSE and NOTICE, and a SOURCE.md naming the artifact (its first line is
# what gen-apis.py writes into csrc/apis.c's header). The files are Kafka's
# (Apache-2.0): never commit them; docs/development.md says how to regenerate.
set -eu
[ $# -eq 2 ] || { echo "usage: $0 VERSION DIR (e.g. 4.4.0 /tmp/kafka-defs/4.4.0)" >&2; exit 2; }
version=$1
dir=$2
case $version in
  *[!0-9.]* | "") echo "$0: version $version is not a release number like 4.4.0" >&2; exit 2 ;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
mvn -q dependency:copy -Dartifact="org.apache.kafka:kafka-clients:$version" -DoutputDirectory="$tmp"
jar="$tmp/kafka-clients-$version.jar"
[ -f "$jar" ] || { echo "$0: Maven did not deliver $jar" >&2; exit 1; }
mkdir -p "$dir"
rm -f "$dir"/*.json
unzip -q -o -j "$jar" 'common/message/*' -d "$dir"
unzip -q -o -j "$jar" LICENSE NOTICE -d "$dir" 2>/dev/null || true
sha=$(sha256sum "$jar" | cut -d' ' -f1)
n=$(ls "$dir"/*.json | wc -l)
cat > "$dir/SOURCE.md" <<EOF
# Kafka message definitions of kafka-clients $version (Maven Central)

$n JSON files from common/message/ of org.apache.kafka:kafka-clients:$version
(jar sha256 $sha), fetched by lua-kafka's tools/fetch-protocol.sh.
Apache-2.0 (LICENSE, NOTICE beside this file); not part of lua-kafka.
EOF
echo "$dir: $n definitions of kafka-clients $version"
