#!/usr/bin/env bash
# A real RocketMQ 5 on 127.0.0.1 without containers: a NameServer (9876) and a Proxy in Local mode, which embeds the
# broker (gRPC 8081). Jars come from Maven Central into a cache; the store lives on /dev/shm (tmpfs) because the broker
# refuses writes above 90 % disk use of the store's partition, and survives `down`/`up` (an outage keeps messages).
#   scripts/rocketmq.sh up | down | status | topic NAME [GROUP...]
set -euo pipefail

VERSION=5.3.3
DIR=${ROCKETMQ_DIR:-$HOME/.cache/task-control-plane/rocketmq-$VERSION}
LIB=$DIR/lib
DATA=$DIR/data
STORE=${ROCKETMQ_STORE:-/dev/shm/task-control-plane-rocketmq-$VERSION}
NAMESRV=127.0.0.1:9876
TOPIC=${ROCKETMQ_TOPIC:-task-events}
GROUPS_=${ROCKETMQ_GROUPS:-notification-dispatcher}
# JDK 17 closes the JDK internals that RocketMQ's mmap'd store and netty reach into.
OPENS=(--add-opens java.base/java.lang=ALL-UNNAMED --add-opens java.base/java.nio=ALL-UNNAMED
  --add-opens java.base/jdk.internal.ref=ALL-UNNAMED --add-opens java.base/sun.nio.ch=ALL-UNNAMED
  --add-exports java.base/sun.nio.ch=ALL-UNNAMED)

log() { echo "rocketmq: $*" >&2; }
die() { log "$*"; exit 1; }

fetch() {
  [ -f "$LIB/.complete" ] && return 0
  command -v mvn >/dev/null || die "mvn is required to fetch RocketMQ $VERSION"
  log "fetching RocketMQ $VERSION jars into $LIB"
  local work
  work=$(mktemp -d)
  {
    echo '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
    echo '<groupId>local</groupId><artifactId>rocketmq-runtime</artifactId><version>1</version><dependencies>'
    for a in rocketmq-namesrv rocketmq-proxy rocketmq-tools; do
      echo "<dependency><groupId>org.apache.rocketmq</groupId><artifactId>$a</artifactId><version>$VERSION</version></dependency>"
    done
    echo '</dependencies></project>'
  } >"$work/pom.xml"
  rm -rf "$LIB.partial"
  if ! mvn -B -q -f "$work/pom.xml" org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$LIB.partial" >"$work/mvn.log" 2>&1; then
    cat "$work/mvn.log" >&2
    die "mvn could not fetch RocketMQ $VERSION"
  fi
  rm -rf "$work" "$LIB"
  touch "$LIB.partial/.complete"
  mv "$LIB.partial" "$LIB"
}

configure() {
  mkdir -p "$DATA/conf" "$DATA/logs" "$STORE"
  echo "bindAddress=127.0.0.1" >"$DATA/conf/namesrv.conf"
  cat >"$DATA/conf/broker.conf" <<EOF
brokerClusterName=DefaultCluster
brokerName=broker-a
brokerId=0
brokerRole=ASYNC_MASTER
flushDiskType=ASYNC_FLUSH
brokerIP1=127.0.0.1
bindAddress=127.0.0.1
namesrvAddr=$NAMESRV
listenPort=10911
storePathRootDir=$STORE
storePathCommitLog=$STORE/commitlog
mappedFileSizeCommitLog=67108864
mappedFileSizeConsumeQueue=600000
autoCreateTopicEnable=false
autoCreateSubscriptionGroup=false
EOF
  # minInvisibleTimeMillsForRecv: the consumer may ask for short invisible durations (the default floor is 10 s).
  # grpcShutdownTimeSeconds: on TERM the gRPC server waits this long for open client streams (default 30 s).
  cat >"$DATA/conf/rmq-proxy.json" <<EOF
{"rocketMQClusterName":"DefaultCluster","namesrvAddr":"$NAMESRV","proxyMode":"Local","localServeAddr":"127.0.0.1",
 "grpcServerPort":8081,"remotingListenPort":8080,"minInvisibleTimeMillsForRecv":1000,"grpcShutdownTimeSeconds":3}
EOF
}

# pid of a running component (its pid file names a live java process of the right class), or nothing
running() {
  local f=$DATA/$1.pid pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "$2"; then
    echo "$pid"
  else
    rm -f "$f"
    return 1
  fi
}

java_run() { # name heap main-class args...
  local name=$1 heap=$2 main=$3
  shift 3
  # setsid: the JVM must not die with the shell (or test process) that ran `up`.
  ROCKETMQ_HOME=$DATA setsid java -server -Xms"$heap" -Xmx"$heap" -XX:MaxDirectMemorySize=256m -XX:+UseSerialGC \
    -XX:TieredStopAtLevel=1 "${OPENS[@]}" -Duser.home="$DATA" -Drocketmq.home.dir="$DATA" \
    -cp "$LIB/*" "$main" "$@" >>"$DATA/logs/$name.out" 2>&1 </dev/null &
  echo $! >"$DATA/$name.pid"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# MQAdminStartup's JVM lingers ~3 s after its work (netty's graceful shutdown), so the commands run in one JVM that
# exits right away: `admin cmd args... ";" cmd args...` (the name server is appended to each command).
admin() {
  local dir=$DIR/admin
  if [ ! -f "$dir/Admin.class" ]; then
    mkdir -p "$dir"
    cat >"$dir/Admin.java" <<'JAVA'
import java.util.ArrayList;
import java.util.List;
import org.apache.rocketmq.tools.command.MQAdminStartup;
public class Admin {
  public static void main(String[] args) {
    List<String> cmd = new ArrayList<>();
    for (String a : args) {
      if (a.equals(";")) { run(cmd); cmd.clear(); } else cmd.add(a);
    }
    run(cmd);
    System.exit(0);
  }
  static void run(List<String> cmd) {
    if (cmd.isEmpty()) return;
    cmd.add("-n");
    cmd.add(System.getProperty("namesrv"));
    MQAdminStartup.main0(cmd.toArray(new String[0]), null);
  }
}
JAVA
    javac -nowarn -cp "$LIB/*" -d "$dir" "$dir/Admin.java" || die "cannot compile the admin helper"
  fi
  ROCKETMQ_HOME=$DATA java -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Duser.home="$DATA" \
    -Drocketmq.home.dir="$DATA" -Dnamesrv="$NAMESRV" -cp "$dir:$LIB/*" Admin "$@" 2>&1
}

wait_until() { # seconds description command...
  local limit=$1 what=$2 deadline
  shift 2
  deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || die "$what not ready after ${limit}s (logs in $DATA/logs)"
    sleep 0.5
  done
}

registered() { admin clusterList | grep -q broker-a; }

ensure_topic() { # topic groups...
  local topic=$1 args out
  shift
  args=(updateTopic -c DefaultCluster -t "$topic" -r 8 -w 8 -a +message.type=FIFO)
  for group in "$@"; do args+=(";" updateSubGroup -c DefaultCluster -g "$group" -o true); done
  out=$(admin "${args[@]}")
  # MQAdminStartup prints a failure and carries on: count the successes.
  [ "$(grep -c ' success' <<<"$out")" -eq $(($# + 1)) ] || die "creating topic $topic / groups $*: $out"
  log "topic $topic (FIFO) with orderly groups: $*"
}

up() {
  fetch
  configure
  if ! running namesrv NamesrvStartup >/dev/null; then
    java_run namesrv 128m org.apache.rocketmq.namesrv.NamesrvStartup -c "$DATA/conf/namesrv.conf"
    wait_until 60 "NameServer" port_open 9876
  fi
  if ! running proxy ProxyStartup >/dev/null; then
    java_run proxy 384m org.apache.rocketmq.proxy.ProxyStartup -pm Local -pc "$DATA/conf/rmq-proxy.json" \
      -bc "$DATA/conf/broker.conf" -n "$NAMESRV"
    wait_until 120 "Proxy gRPC port 8081" port_open 8081
    log "proxy listening after ${SECONDS}s"
  fi
  wait_until 60 "broker registration" registered
  # shellcheck disable=SC2086 # the groups are a space-separated list
  ensure_topic "$TOPIC" $GROUPS_
  log "up in ${SECONDS}s: namesrv $NAMESRV, proxy gRPC 127.0.0.1:8081, store $STORE, logs $DATA/logs"
}

stop() { # name class
  local pid
  pid=$(running "$1" "$2") || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 60); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "$1 ($pid) ignored TERM for 30s: KILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$DATA/$1.pid"
}

status() {
  local ns px
  ns=$(running namesrv NamesrvStartup) || ns=""
  px=$(running proxy ProxyStartup) || px=""
  if [ -n "$ns" ] && [ -n "$px" ] && port_open 8081; then
    echo "running (namesrv pid $ns, proxy pid $px)"
  else
    echo "stopped (namesrv pid ${ns:-none}, proxy pid ${px:-none})"
    return 1
  fi
}

case "${1:-}" in
  up) up ;;
  down)
    # the broker unregisters from the name server on its way down, but needs nothing from it: stop both at once
    stop proxy ProxyStartup &
    stop namesrv NamesrvStartup &
    wait
    log "down in ${SECONDS}s"
    ;;
  status) status ;;
  topic)
    [ $# -ge 2 ] || die "usage: $0 topic NAME [GROUP...]"
    status >/dev/null || die "not running: run '$0 up' first"
    shift
    ensure_topic "$@"
    ;;
  *) die "usage: $0 up|down|status|topic NAME [GROUP...]" ;;
esac
