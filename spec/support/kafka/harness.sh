#!/usr/bin/env bash
# Real Apache Kafka brokers for the specs: KRaft combined nodes on 127.0.0.1,
# started from Kafka's own jars (resolved by Maven into ~/.m2, once per machine).
# Kafka 2.x has no KRaft worth the name: it runs in ZooKeeper mode, brokers
# beside one ZooKeeper node the harness starts from the same classpath (Kafka's
# POM brings ZooKeeper's jars) and stops with them.
#
#   harness.sh classpath VERSION              resolve the jars; prints the classpath file
#   harness.sh start NAME VERSION NODES OWNER start NODES (1 or 3) combined nodes (2.x: brokers and a
#                                             ZooKeeper); prints the env file
#                                             (KAFKA_JVM_OPTS replaces the test JVM settings)
#   harness.sh stop NAME                      SIGKILL every node, remove the data
#   harness.sh kill NAME NODE                 SIGKILL one node (its data stays)
#   harness.sh restart NAME NODE              start a killed node again on its data, wait until ready
#   harness.sh status NAME                    exit 0 when every node of NAME is alive
#
# Every broker has the listeners PLAINTEXT, SASL_PLAINTEXT, SSL (no client
# certificate), MTLS (SSL, client certificate required) and SASL_SSL; SASL
# users are alice/alice-secret for PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512
# (SCRAM credentials written at format time), bob/bob-secret for PLAIN.
# Certificates (a CA, the broker's, a client's) are made with openssl.
#
# A watchdog per run kills the JVMs (brokers and ZooKeeper) and removes the data as soon as the
# OWNER process is gone, so an interrupted busted never leaves a broker.
# Every wait has a deadline; a failure names the step and the log file.
set -euo pipefail
# the sanitizer run preloads ASan into the specs' processes; never into a JVM
unset LD_PRELOAD

H=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$H/../../.." && pwd)
C="$ROOT/build/kafka"
mkdir -p "$C/run"
# the physical path: the brokers' files must not depend on a symlink on the
# way (make mutants links each scratch copy's build/kafka here and replaces
# the copy between mutants; a broker that writes while the link is gone
# loses its only log directory and shuts down)
C=$(cd "$C" && pwd -P)

die() { echo "kafka harness: $*" >&2; exit 1; }

# zk_mode VERSION: true for the versions run in ZooKeeper mode (2.x; KRaft was
# early access there and lacks SCRAM, transactions and more)
zk_mode() { case "$1" in 0.*|1.*|2.*) return 0 ;; *) return 1 ;; esac; }

# pidfiles DIR: every JVM of a cluster (the nodes, then ZooKeeper if any)
pidfiles() { local p; for p in "$1"/node*/pid "$1"/zk/pid; do [ -f "$p" ] && echo "$p"; done; return 0; }

classpath() {
  local v=$1 cp="$C/cp-$1.txt" extra
  if [ ! -s "$cp" ]; then
    case "$v" in
      2.*|3.*) extra="-Dkafka.reload4j" ;;
      4.0.*|4.1.0|4.1.1) extra="-Dlog4j.version=2.24.3" ;;
      *) extra="-Dlog4j.version=2.25.3" ;;
    esac
    timeout 600 mvn -q -B -f "$H/pom.xml" dependency:build-classpath -Dkafka.version="$v" $extra \
      -Dmdep.outputFile="$cp.tmp" >"$C/mvn-$v.log" 2>&1 \
      || { rm -f "$cp.tmp"; die "maven could not resolve Kafka $v (log: $C/mvn-$v.log)"; }
    mv "$cp.tmp" "$cp"
  fi
  echo "$cp"
}

log_opts() {
  case "$1" in
    2.*|3.*) echo "-Dlog4j.configuration=file:$H/log4j.properties" ;;
    *) echo "-Dlog4j2.configurationFile=file:$H/log4j2.properties" ;;
  esac
}

# free_ports N: N distinct TCP ports no socket uses, in any state, chosen below the
# kernel's ephemeral range: a port the kernel may hand to an outgoing connection (ours, a
# broker's, nginx's) could be taken between choosing it and binding it, and a chaos case
# restarts a killed node on the ports it had, long after they were chosen
free_ports() {
  local n=$1 got=() p used lo=32768 span
  read -r lo _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
  [ "$lo" -gt 12000 ] || lo=32768 # a host whose ephemeral range starts low: stay below 32768 anyway
  span=$((lo - 11000))
  used=$(ss -Htan | awk '{print $4}' | sed 's/.*://' | sort -u)
  while [ ${#got[@]} -lt "$n" ]; do
    p=$((11000 + RANDOM % span))
    if ! grep -qx "$p" <<<"$used" && [[ " ${got[*]-} " != *" $p "* ]]; then got+=("$p"); fi
  done
  echo "${got[@]}"
}

make_certs() {
  local d=$1 pass=test-pass
  (
    cd "$d"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 3650 \
      -subj "/CN=lua-kafka test CA" 2>/dev/null
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' > broker.ext
    openssl req -newkey rsa:2048 -nodes -keyout broker.key -out broker.csr -subj "/CN=localhost" 2>/dev/null
    openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile broker.ext -out broker.pem 2>/dev/null
    openssl pkcs12 -export -in broker.pem -inkey broker.key -certfile ca.pem -name broker \
      -out broker.p12 -passout pass:$pass
    openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj "/CN=lua-client" 2>/dev/null
    openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 \
      -out client.pem 2>/dev/null
    openssl pkey -in client.key -aes256 -passout pass:client-pass -out client-enc.key
    # a second CA nobody trusts, for the untrusted-CA cases
    openssl req -x509 -newkey rsa:2048 -nodes -keyout other-ca.key -out other-ca.pem -days 3650 \
      -subj "/CN=untrusted CA" 2>/dev/null
    rm -f ./*.csr ./*.srl broker.ext
  ) || die "openssl could not make the test certificates in $d"
}

# write_props DIR NODE NODES VOTERS: server.properties of one combined node
# (VOTERS "zk:PORT": a ZooKeeper-mode broker of the ZooKeeper on PORT)
write_props() {
  local d=$1 n=$2 nodes=$3 voters=$4 nd="$1/node$2" rf=1 isr=1
  # shellcheck disable=SC1090
  . "$nd/ports"
  [ "$nodes" -gt 1 ] && { rf=3; isr=2; }
  if [[ $voters == zk:* ]]; then
    # the KRaft-only settings below are unknown here (a warning each, no harm);
    # a short ZooKeeper session lets a killed broker's registration expire soon
    cat > "$nd/server.properties" <<EOF
broker.id=$n
zookeeper.connect=127.0.0.1:${voters#zk:}
zookeeper.session.timeout.ms=6000
listeners=PLAINTEXT://127.0.0.1:$PLAINTEXT,SASL_PLAINTEXT://127.0.0.1:$SASL_PLAINTEXT,SSL://127.0.0.1:$SSL,MTLS://127.0.0.1:$MTLS,SASL_SSL://127.0.0.1:$SASL_SSL
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL,MTLS:SSL,SASL_SSL:SASL_SSL
EOF
  else
    cat > "$nd/server.properties" <<EOF
process.roles=broker,controller
node.id=$n
controller.quorum.voters=$voters
controller.listener.names=CONTROLLER
listeners=PLAINTEXT://127.0.0.1:$PLAINTEXT,CONTROLLER://127.0.0.1:$CONTROLLER,SASL_PLAINTEXT://127.0.0.1:$SASL_PLAINTEXT,SSL://127.0.0.1:$SSL,MTLS://127.0.0.1:$MTLS,SASL_SSL://127.0.0.1:$SASL_SSL
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL,MTLS:SSL,SASL_SSL:SASL_SSL
EOF
  fi
  cat >> "$nd/server.properties" <<EOF
advertised.listeners=PLAINTEXT://127.0.0.1:$PLAINTEXT,SASL_PLAINTEXT://127.0.0.1:$SASL_PLAINTEXT,SSL://127.0.0.1:$SSL,MTLS://127.0.0.1:$MTLS,SASL_SSL://127.0.0.1:$SASL_SSL
inter.broker.listener.name=PLAINTEXT
log.dirs=$nd/data
num.partitions=1
default.replication.factor=$rf
min.insync.replicas=$isr
auto.create.topics.enable=true
delete.topic.enable=true
offsets.topic.replication.factor=$rf
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$isr
group.initial.rebalance.delay.ms=0
offsets.topic.num.partitions=3
transaction.state.log.num.partitions=3
# timed-out transactions aborted within 0.5 s (default 10 s): eos_spec's coordinator-timeout case
transaction.abort.timed.out.transaction.cleanup.interval.ms=500
log.cleaner.dedupe.buffer.size=16777216
num.network.threads=2
num.io.threads=2
background.threads=2
num.replica.fetchers=1
group.min.session.timeout.ms=1000
group.consumer.heartbeat.interval.ms=1000
group.consumer.min.heartbeat.interval.ms=1000
group.consumer.session.timeout.ms=10000
group.consumer.min.session.timeout.ms=6000
broker.heartbeat.interval.ms=500
broker.session.timeout.ms=3000
log.segment.bytes=67108864
# no deletion by time: specs write records with fixed timestamps from 2023
# (exact round trips), and the 5-minute retention check deleted them under
# the 7-day default, moving "earliest" to the end mid-spec
log.retention.ms=-1
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret" user_bob="bob-secret";
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="broker";
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret" user_bob="bob-secret";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="broker";
# KIP-368 re-authentication: OAUTHBEARER sessions end with the token (or
# after 60 s); SCRAM-SHA-256 sessions on SASL_PLAINTEXT after 2 s, so the
# specs see the broker's session_lifetime_ms and re-authenticate
listener.name.sasl_plaintext.oauthbearer.connections.max.reauth.ms=60000
listener.name.sasl_ssl.oauthbearer.connections.max.reauth.ms=60000
listener.name.sasl_plaintext.scram-sha-256.connections.max.reauth.ms=2000
ssl.keystore.type=PKCS12
ssl.keystore.location=$d/broker.p12
ssl.keystore.password=test-pass
ssl.key.password=test-pass
ssl.truststore.type=PEM
ssl.truststore.location=$d/ca.pem
ssl.client.auth=none
listener.name.mtls.ssl.client.auth=required
EOF
  # a cluster's own settings (realkafka.cluster's props; LK_KAFKA_PROPS at start)
  [ -f "$d/extra.properties" ] && cat "$d/extra.properties" >> "$nd/server.properties"
  return 0
}

# jvm_opts NODEDIR VERSION: test settings (small heap, C1 only: fast start,
# little CPU), or the KAFKA_JVM_OPTS the run was started with (benchmarks)
jvm_opts() {
  local base="-Xms64m -Xmx384m -XX:+UseSerialGC -XX:TieredStopAtLevel=1"
  [ -s "$1/../jvm_opts" ] && base=$(cat "$1/../jvm_opts")
  echo "$base -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true -Djava.io.tmpdir=$1/tmp $(log_opts "$2")"
}

launch_node() {
  local d=$1 n=$2 v nd="$1/node$2"
  v=$(cat "$d/version")
  mkdir -p "$nd/tmp"
  # shellcheck disable=SC2046
  nohup java $(jvm_opts "$nd" "$v") -cp "$(cat "$(classpath "$v")")" kafka.Kafka "$nd/server.properties" \
    </dev/null >>"$nd/broker.log" 2>&1 &
  echo $! > "$nd/pid"
}

# wait_ready DIR NODE... : every node logged "Kafka Server started" (2.x: "[KafkaServer id=N] started")
# (deadline 180 s)
wait_ready() {
  local d=$1; shift
  local deadline=$((SECONDS + 180)) n pending
  while :; do
    pending=""
    for n in "$@"; do
      grep -qE 'Kafka Server started|\] started \(kafka\.server\.KafkaServer\)' "$d/node$n/broker.log" 2>/dev/null && continue
      if ! kill -0 "$(cat "$d/node$n/pid")" 2>/dev/null; then
        # a port taken between choosing it and binding it: the caller retries on others
        if grep -qE 'Unable to start acceptor|Address already in use|BindException' "$d/node$n/broker.log"; then
          # say which port and who held it: the next failure explains itself
          local port
          port=$(grep -m1 -oE '127\.0\.0\.1:[0-9]+' <(grep -E -A3 'Unable to start acceptor|Address already in use|BindException' "$d/node$n/broker.log") | sed 's/.*://')
          echo "kafka harness: node $n could not bind port ${port:-?}: $(ss -Htanp 2>/dev/null | grep -E ":${port:-none}\b" | head -3 | tr -s ' ' | tr '\n' ';')" >>"$d/bind-failures"
          return 2
        fi
        die "node $n exited during start-up (log: $d/node$n/broker.log): $(grep -m1 -E 'ERROR|Exception' "$d/node$n/broker.log" || true)"
      fi
      pending="$pending $n"
    done
    [ -z "$pending" ] && return 0
    [ $SECONDS -ge $deadline ] && die "node(s)$pending not ready after 180 s (log: $d/node${pending# }/broker.log)"
    sleep 0.2
  done
}

# start_zk DIR PORT: the one standalone ZooKeeper node of a 2.x cluster, ready
# when it answers ruok (deadline 60 s); returns 2 when its port was taken
start_zk() {
  local d=$1 port=$2 z="$1/zk" v answer deadline=$((SECONDS + 60))
  v=$(cat "$d/version")
  mkdir -p "$z/data" "$z/tmp"
  # tickTime 500: sessions of 1-10 s, so the brokers' 6 s session is allowed
  cat > "$z/zoo.cfg" <<EOF
dataDir=$z/data
clientPort=$port
clientPortAddress=127.0.0.1
tickTime=500
initLimit=10
syncLimit=5
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok
EOF
  # shellcheck disable=SC2046
  nohup java -Xms16m -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
    -Djava.io.tmpdir="$z/tmp" $(log_opts "$v") -cp "$(cat "$(classpath "$v")")" \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$z/zoo.cfg" </dev/null >>"$z/zk.log" 2>&1 &
  echo $! > "$z/pid"
  while :; do
    answer=$(timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"; echo ruok >&3; cat <&3' _ "$port" 2>/dev/null || true)
    [ "$answer" = imok ] && return 0
    if ! kill -0 "$(cat "$z/pid")" 2>/dev/null; then
      if grep -qE 'Address already in use|BindException' "$z/zk.log"; then
        echo "kafka harness: ZooKeeper could not bind port $port: $(ss -Htanp 2>/dev/null | grep -E ":$port\b" | head -3 | tr -s ' ' | tr '\n' ';')" >>"$d/bind-failures"
        return 2
      fi
      die "ZooKeeper exited during start-up (log: $z/zk.log): $(grep -m1 -E 'ERROR|Exception' "$z/zk.log" || true)"
    fi
    [ $SECONDS -ge $deadline ] && die "ZooKeeper not ready after 60 s (log: $z/zk.log)"
    sleep 0.2
  done
}

# zk_scram DIR: alice's SCRAM credentials written to ZooKeeper before the brokers
# start (ZooKeeper mode's counterpart of the format-time --add-scram)
zk_scram() {
  local d=$1 v
  v=$(cat "$d/version")
  # shellcheck disable=SC2046
  timeout 120 java -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.io.tmpdir="$d/zk/tmp" $(log_opts "$v") \
    -cp "$(cat "$(classpath "$v")")" kafka.admin.ConfigCommand --zookeeper "127.0.0.1:$(cat "$d/zk/port")" \
    --alter --entity-type users --entity-name alice \
    --add-config 'SCRAM-SHA-256=[password=alice-secret],SCRAM-SHA-512=[password=alice-secret]' >"$d/zk/scram.log" 2>&1 \
    || die "writing the SCRAM credentials failed (log: $d/zk/scram.log): $(tail -3 "$d/zk/scram.log")"
}

start() {
  local name=$1 v=$2 nodes=$3 owner=$4 d="$C/run/$1" cp voters="" n ports i
  [ -e "$d" ] && { stop "$name"; }
  cp=$(classpath "$v")
  mkdir -p "$d"
  echo "$v" > "$d/version"
  echo "$owner" > "$d/owner"
  [ -n "${KAFKA_JVM_OPTS:-}" ] && echo "$KAFKA_JVM_OPTS" > "$d/jvm_opts"
  [ -n "${LK_KAFKA_PROPS:-}" ] && printf '%s\n' "$LK_KAFKA_PROPS" > "$d/extra.properties"
  make_certs "$d"
  # the watchdog: kill the JVMs and drop the data once the owner is gone
  setsid nohup bash -c '
    d=$1; owner=$2
    while [ -d "$d" ] && kill -0 "$owner" 2>/dev/null; do sleep 1; done
    for p in "$d"/node*/pid "$d"/zk/pid; do [ -f "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null; done
    sleep 0.5; rm -rf "$d"' _ "$d" "$owner" </dev/null >/dev/null 2>&1 &
  echo $! > "$d/watchdog.pid"
  local attempt rc
  for attempt in 1 2 3 4 5; do
    voters=""
    # (one more port in ZooKeeper mode: ZooKeeper's, the last)
    read -r -a ports <<<"$(free_ports $((nodes * 6 + 1)))"
    for n in $(seq 1 "$nodes"); do
      i=$(((n - 1) * 6))
      mkdir -p "$d/node$n"
      cat > "$d/node$n/ports" <<EOF
PLAINTEXT=${ports[$i]}
CONTROLLER=${ports[$((i + 1))]}
SASL_PLAINTEXT=${ports[$((i + 2))]}
SSL=${ports[$((i + 3))]}
MTLS=${ports[$((i + 4))]}
SASL_SSL=${ports[$((i + 5))]}
EOF
      voters="$voters${voters:+,}$n@127.0.0.1:${ports[$((i + 1))]}"
    done
    rc=0
    if zk_mode "$v"; then
      voters="zk:${ports[$((nodes * 6))]}"
      mkdir -p "$d/zk" && echo "${ports[$((nodes * 6))]}" > "$d/zk/port"
      start_zk "$d" "${ports[$((nodes * 6))]}" || rc=$?
      [ $rc -eq 0 ] && zk_scram "$d"
    fi
    if [ $rc -eq 0 ]; then
      for n in $(seq 1 "$nodes"); do
        write_props "$d" "$n" "$nodes" "$voters"
        zk_mode "$v" && continue # (ZooKeeper mode: no format step)
        rm -rf "$d/node$n/data" # (a retry formats afresh: StorageTool refuses a formatted directory)
        # shellcheck disable=SC2046
        timeout 120 java $(jvm_opts "$d/node$n" "$v" | sed 's/-Xmx384m/-Xmx192m/') -cp "$(cat "$cp")" kafka.tools.StorageTool format \
          -t "${LK_KAFKA_CLUSTER_ID:-lua-kafka-tests-000001}" -c "$d/node$n/server.properties" \
          --add-scram 'SCRAM-SHA-256=[name=alice,password=alice-secret]' \
          --add-scram 'SCRAM-SHA-512=[name=alice,password=alice-secret]' >"$d/node$n/format.log" 2>&1 \
          || die "formatting node $n failed (log: $d/node$n/format.log): $(tail -3 "$d/node$n/format.log")"
      done
      for n in $(seq 1 "$nodes"); do launch_node "$d" "$n"; done
      wait_ready "$d" $(seq 1 "$nodes") || rc=$?
    fi
    [ $rc -eq 0 ] && break
    # the JVMs of this attempt gone (each waited for, up to 10 s) before their data is
    for p in $(pidfiles "$d"); do kill -9 "$(cat "$p")" 2>/dev/null || true; done
    for p in $(pidfiles "$d"); do
      local until=$((SECONDS + 10))
      while kill -0 "$(cat "$p")" 2>/dev/null && [ $SECONDS -lt $until ]; do sleep 0.05; done
    done
    rm -rf "$d"/node* "$d"/zk
    [ "$attempt" -eq 5 ] && die "no free ports after 5 attempts (a port was taken each time): $(cat "$d/bind-failures")"
  done
  {
    echo "version=$v"
    echo "nodes=$nodes"
    echo "dir=$d"
    zk_mode "$v" && echo "zookeeper=127.0.0.1:$(cat "$d/zk/port")"
    for l in PLAINTEXT SASL_PLAINTEXT SSL MTLS SASL_SSL; do
      local list=""
      for n in $(seq 1 "$nodes"); do list="$list${list:+,}127.0.0.1:$(sed -n "s/^$l=//p" "$d/node$n/ports")"; done
      echo "$l=$list"
    done
  } > "$d/env"
  echo "$d/env"
}

stop() {
  local d="$C/run/$1" p
  [ -d "$d" ] || return 0
  [ -f "$d/watchdog.pid" ] && kill -9 "$(cat "$d/watchdog.pid")" 2>/dev/null || true
  for p in $(pidfiles "$d"); do kill -9 "$(cat "$p")" 2>/dev/null || true; done
  for p in $(pidfiles "$d"); do
    local deadline=$((SECONDS + 10))
    while kill -0 "$(cat "$p")" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.05; done
  done
  rm -rf "$d"
}

status() {
  local d="$C/run/$1" p
  [ -f "$d/env" ] || return 1
  kill -0 "$(cat "$d/owner")" 2>/dev/null || return 1
  for p in $(pidfiles "$d"); do kill -0 "$(cat "$p")" 2>/dev/null || return 1; done
}

cmd=${1:-}
case "$cmd" in
  classpath) classpath "$2" ;;
  start) [ $# -eq 5 ] || die "usage: harness.sh start NAME VERSION NODES OWNER_PID"; start "$2" "$3" "$4" "$5" ;;
  stop) stop "$2" ;;
  kill) p="$C/run/$2/node$3/pid"; kill -9 "$(cat "$p")" 2>/dev/null || true
        deadline=$((SECONDS + 10)); while kill -0 "$(cat "$p")" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.05; done ;;
  restart) d="$C/run/$2"; mv "$d/node$3/broker.log" "$d/node$3/broker.log.$(date +%s%N)"
           launch_node "$d" "$3"
           wait_ready "$d" "$3" || die "node $3 could not restart on its ports: $(cat "$d/bind-failures" 2>/dev/null)" ;;
  status) status "$2" ;;
  *) die "usage: harness.sh classpath|start|stop|kill|restart|status ..." ;;
esac
