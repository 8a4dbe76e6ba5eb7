#!/usr/bin/env bash
# A single-node Apache Kafka broker (KRaft, broker and controller in one process) for tests and
# local runs, fetched from Maven Central with mvn. No Docker, no download outside the registries.
#
#   scripts/kafka.sh start    fetch the jars once (cached), format fresh storage, start, wait
#   scripts/kafka.sh stop     stop it cleanly (SIGTERM, then SIGKILL after 30 s)
#   scripts/kafka.sh status   say whether it runs, and where
#
# Environment:
#   FEATURELOG_KAFKA_PORT   client port on 127.0.0.1 (default 9092; the controller takes port+1)
#   FEATURELOG_KAFKA_CACHE  where jars and broker data live (default .cache/kafka in the repo)
#   KAFKA_HEAP_OPTS         JVM heap flags (default -Xms256m -Xmx768m)
#   FEATURELOG_KAFKA_KEEP_DATA=1  start on the data of the previous run instead of fresh
#                           storage (tests use it to restart a broker in the middle of traffic)
#   FEATURELOG_KAFKA_SASL_SSL_PORT  also open a SASL_SSL listener on 127.0.0.1 at this port:
#                           TLS with a self-signed certificate for 127.0.0.1 and localhost (its
#                           PEM in <run dir>/secure/ca.pem) and SCRAM-SHA-512 for the user
#                           `featurelog`, password `featurelog-secret`, as a managed cluster
#                           (Amazon MSK, Confluent) asks clients to connect
# Exit codes: 0 done, 1 failed (the broker log's tail is printed), 2 bad usage.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
pom="$root/scripts/kafka/pom.xml"
cache=${FEATURELOG_KAFKA_CACHE:-$root/.cache/kafka}
port=${FEATURELOG_KAFKA_PORT:-9092}
controller_port=$((port + 1))
version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$pom")
libs="$cache/$version/libs"
run="$cache/run-$port"
pidfile="$run/kafka.pid"
log="$run/kafka.log"

say() { printf 'kafka.sh: %s\n' "$*" >&2; }

# running_pid, port_open, stop, status.
source "$root/scripts/lib/daemon.sh"

fetch() {
  if [[ -f $libs/.complete ]]; then return; fi
  command -v mvn >/dev/null || { say "mvn is not installed (apt-get install maven)"; exit 1; }
  say "fetching Apache Kafka $version from Maven Central into $libs"
  local tmp="$cache/$version/libs.tmp"
  rm -rf "$tmp"
  mkdir -p "$cache"
  if ! mvn -B -q -Dstyle.color=never -f "$pom" dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$tmp" >"$cache/mvn.log" 2>&1; then
    say "mvn could not resolve Kafka $version:"; tail -n 40 "$cache/mvn.log" >&2; exit 1
  fi
  rm -rf "$libs"
  mv "$tmp" "$libs"
  touch "$libs/.complete"
}

java_ok() {
  command -v java >/dev/null || { say "java is not installed (Kafka $version needs Java 17+)"; return 1; }
  local major
  major=$(java -XshowSettings:properties -version 2>&1 | sed -n 's/.*java.specification.version = \([0-9]*\).*/\1/p')
  if [[ -z $major || $major -lt 17 ]]; then
    say "Kafka $version needs Java 17 or newer; found ${major:-unknown}"
    return 1
  fi
}

secure_port=${FEATURELOG_KAFKA_SASL_SSL_PORT:-}
secure="$run/secure"
scram_user=featurelog
scram_password=featurelog-secret

# A self-signed certificate for 127.0.0.1 and localhost in a PKCS12 keystore, and its PEM for
# clients (librdkafka's ssl.ca.location). Made once per run directory.
make_keystore() {
  if [[ -f $secure/broker.p12 && -f $secure/ca.pem ]]; then return; fi
  command -v keytool >/dev/null || { say "keytool (from the JDK) is needed for the SASL_SSL listener"; exit 1; }
  rm -rf "$secure"
  mkdir -p "$secure"
  keytool -genkeypair -alias broker -keyalg RSA -keysize 2048 -validity 3650 \
    -dname "CN=localhost" -ext "SAN=ip:127.0.0.1,dns:localhost" \
    -keystore "$secure/broker.p12" -storetype PKCS12 -storepass featurelog -keypass featurelog \
    >>"$log" 2>&1 || { say "keytool could not make the broker's certificate:"; tail -n 20 "$log" >&2; exit 1; }
  keytool -exportcert -alias broker -rfc -keystore "$secure/broker.p12" -storetype PKCS12 \
    -storepass featurelog -file "$secure/ca.pem" >>"$log" 2>&1 || {
    say "keytool could not export the certificate:"; tail -n 20 "$log" >&2; exit 1; }
}

write_config() {
  mkdir -p "$run"
  local listeners="PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller_port"
  local advertised="PLAINTEXT://127.0.0.1:$port"
  local map="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
  if [[ -n $secure_port ]]; then
    listeners+=",SASL_SSL://127.0.0.1:$secure_port"
    advertised+=",SASL_SSL://127.0.0.1:$secure_port"
    map+=",SASL_SSL:SASL_SSL"
  fi
  cat >"$run/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller_port
listeners=$listeners
advertised.listeners=$advertised
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=$map
log.dirs=$run/data
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
PROPS
  if [[ -n $secure_port ]]; then
    make_keystore
    cat >>"$run/server.properties" <<PROPS
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.ssl.keystore.type=PKCS12
listener.name.sasl_ssl.ssl.keystore.location=$secure/broker.p12
listener.name.sasl_ssl.ssl.keystore.password=featurelog
listener.name.sasl_ssl.ssl.key.password=featurelog
PROPS
  fi
  cat >"$run/log4j2.properties" <<'PROPS'
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.apache.name = org.apache.kafka
logger.apache.level = WARN
PROPS
}

start() {
  if pid=$(running_pid); then
    say "already running (pid $pid) on 127.0.0.1:$port"
    return 0
  fi
  if port_open "$port" || port_open "$controller_port"; then
    say "port $port or $controller_port is taken by another process; set FEATURELOG_KAFKA_PORT"
    exit 1
  fi
  if [[ -n $secure_port ]] && port_open "$secure_port"; then
    say "port $secure_port (FEATURELOG_KAFKA_SASL_SSL_PORT) is taken by another process"
    exit 1
  fi
  java_ok || exit 1
  fetch
  write_config
  local cp="$libs/*" cluster_id
  local jvm=(java ${KAFKA_HEAP_OPTS:--Xms256m -Xmx768m} -XX:+UseG1GC -Djava.awt.headless=true
    "-Dlog4j2.configurationFile=$run/log4j2.properties" -cp "$cp")
  if [[ ${FEATURELOG_KAFKA_KEEP_DATA:-} == 1 && -f $run/data/meta.properties ]]; then
    say "keeping the data of the previous run"
  else
    # Fresh storage each start: tests must not depend on what an earlier run left behind.
    rm -rf "$run/data"
    cluster_id=$("${jvm[@]}" kafka.tools.StorageTool random-uuid 2>>"$log" | tail -n 1)
    local scram=()
    if [[ -n $secure_port ]]; then
      # SCRAM credentials live in the cluster metadata: KRaft takes them at format time.
      scram=(--add-scram "SCRAM-SHA-512=[name=$scram_user,password=$scram_password]")
    fi
    "${jvm[@]}" kafka.tools.StorageTool format -t "$cluster_id" -c "$run/server.properties" "${scram[@]}" >>"$log" 2>&1 || {
      say "formatting the storage failed:"; tail -n 30 "$log" >&2; exit 1; }
  fi
  say "starting Kafka $version on 127.0.0.1:$port (log: $log)"
  local from
  from=$(($(stat -c %s "$log" 2>/dev/null || echo 0) + 1))
  nohup "${jvm[@]}" kafka.Kafka "$run/server.properties" >>"$log" 2>&1 </dev/null &
  echo $! >"$pidfile"
  local deadline=$((SECONDS + 120))
  until port_open "$port" && tail -c +"$from" "$log" | grep -q 'Kafka Server started'; do
    if ! running_pid >/dev/null; then
      say "the broker exited during start-up:"; tail -n 40 "$log" >&2; exit 1
    fi
    if ((SECONDS > deadline)); then
      say "the broker did not start within 120 s:"; tail -n 40 "$log" >&2; stop; exit 1
    fi
    sleep 0.5
  done
  say "ready: FEATURELOG_KAFKA=127.0.0.1:$port"
  if [[ -n $secure_port ]]; then
    say "SASL_SSL on 127.0.0.1:$secure_port: SCRAM-SHA-512 user $scram_user, CA $secure/ca.pem"
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
