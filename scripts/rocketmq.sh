#!/usr/bin/env bash
# A real RocketMQ 5 on 127.0.0.1 without containers: a NameServer (9876) and a Proxy in Local mode, which embeds the
# broker (gRPC 8081). Jars come from Maven Central into a cache; the store lives on /dev/shm (tmpfs) because the broker
# refuses writes above 90 % disk use of the store's partition, and survives `down`/`up` (an outage keeps messages).
#   scripts/rocketmq.sh up | down | status | topic NAME [GROUP...] (a FIFO topic, orderly groups) | drop NAME [GROUP...]
# A second instance (the soak's) takes a ROCKETMQ_DATA and ROCKETMQ_STORE of its own and other ports:
# ROCKETMQ_NAMESRV_PORT (9876), ROCKETMQ_PROXY_PORT (gRPC, 8081), ROCKETMQ_REMOTING_PORT (8080), ROCKETMQ_BROKER_PORT
# (10911; the broker also takes the port 2 below it and the one above it).
set -euo pipefail

VERSION=5.3.3
DIR=${ROCKETMQ_DIR:-$HOME/.cache/task-control-plane/rocketmq-$VERSION}
LIB=$DIR/lib
DATA=${ROCKETMQ_DATA:-$DIR/data}
STORE=${ROCKETMQ_STORE:-/dev/shm/task-control-plane-rocketmq-$VERSION}
NAMESRV_PORT=${ROCKETMQ_NAMESRV_PORT:-9876}
PROXY_PORT=${ROCKETMQ_PROXY_PORT:-8081}
REMOTING_PORT=${ROCKETMQ_REMOTING_PORT:-8080}
NAMESRV=127.0.0.1:$NAMESRV_PORT
BROKER=127.0.0.1:${ROCKETMQ_BROKER_PORT:-10911}
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
  printf 'bindAddress=127.0.0.1\nlistenPort=%s\n' "$NAMESRV_PORT" >"$DATA/conf/namesrv.conf"
  cat >"$DATA/conf/broker.conf" <<EOF
brokerClusterName=DefaultCluster
brokerName=broker-a
brokerId=0
brokerRole=ASYNC_MASTER
flushDiskType=ASYNC_FLUSH
brokerIP1=127.0.0.1
bindAddress=127.0.0.1
namesrvAddr=$NAMESRV
listenPort=${BROKER#*:}
storePathRootDir=$STORE
storePathCommitLog=$STORE/commitlog
mappedFileSizeCommitLog=67108864
mappedFileSizeConsumeQueue=600000
autoCreateTopicEnable=false
autoCreateSubscriptionGroup=false
timerFlushIntervalMs=10000
EOF
  # timerFlushIntervalMs: the timer wheel (which POP consumption needs: timerWheelEnable=false refuses every receive)
  # flushed its files every second, and its TimerFlushService thread kept 28-36% of a core busy on an idle broker
  # (top -H), beside every test and bench; every 10 s it no longer shows. The store is on /dev/shm anyway.
  # minInvisibleTimeMillsForRecv: the consumer may ask for short invisible durations (the default floor is 10 s).
  # grpcShutdownTimeSeconds: on TERM the gRPC server waits this long for open client streams (default 30 s).
  cat >"$DATA/conf/rmq-proxy.json" <<EOF
{"rocketMQClusterName":"DefaultCluster","namesrvAddr":"$NAMESRV","proxyMode":"Local","localServeAddr":"127.0.0.1",
 "grpcServerPort":$PROXY_PORT,"remotingListenPort":$REMOTING_PORT,"minInvisibleTimeMillsForRecv":1000,"grpcShutdownTimeSeconds":3}
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
  # The JVM's full tiered JIT (C2), not C1 alone (-XX:TieredStopAtLevel=1, which this script used before): with C1
  # only, the RocketMQ client alone (bench:propagation's ceiling, 1,000 messages/s) had send -> receive p99 0.8-2.2 s
  # on this 2-core machine, and the pipeline's commit -> Redis p50 0.6-2.4 s; with C2, p99 46-84 ms once warm (up to
  # 0.4 s, and worse, in the first minutes after a start, while it compiles) and p50 52-87 ms (same RSS, ~1 GB for the
  # proxy + broker). The short-lived admin helper below keeps C1: it starts faster.
  # setsid: the JVM must not die with the shell (or test process) that ran `up`.
  ROCKETMQ_HOME=$DATA setsid java -server -Xms"$heap" -Xmx"$heap" -XX:MaxDirectMemorySize=256m -XX:+UseSerialGC \
    "${OPENS[@]}" -Duser.home="$DATA" -Drocketmq.home.dir="$DATA" \
    -cp "$LIB/*" "$main" "$@" >>"$DATA/logs/$name.out" 2>&1 </dev/null &
  echo $! >"$DATA/$name.pid"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

ports_free() { # ports...: a RocketMQ of another ROCKETMQ_DIR (or anything else) must not answer in our place
  for port in "$@"; do
    ! port_open "$port" || die "port $port is taken by another process (ss -ltnp | grep $port)"
  done
}

# whether a process lives (a zombie, exited but not yet reaped by the shell that started it, does not)
alive() { local state; state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) && [ -n "$state" ] && [ "$state" != Z ]; }

listening() { # name class port: its own process listens (a JVM that died, e.g. on a taken port, fails at once)
  local pid
  pid=$(cat "$DATA/$1.pid" 2>/dev/null)
  [ -n "$pid" ] && alive "$pid" || die "$1 exited; $DATA/logs/$1.out ends with:
$(tail -n 20 "$DATA/logs/$1.out")"
  # just started: its command line may not be the JVM's yet (still the forked shell's, or setsid's), which `running`
  # took for a dead process (a soak's RocketMQ restart failed so, its proxy.out showing only the last start)
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "$2" || return 1
  port_open "$3"
}

# `admin registered` (exit 0 once the name server lists the broker), `admin create|register|drop TOPIC GROUP...`.
# One client and System.exit: MQAdminStartup shuts its client down after every command, up to 3 s (netty threads).
ADMIN_JAVA=$(cat <<'JAVA'
import java.util.*;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
public class Admin {
  public static void main(String[] args) {
    try {
      DefaultMQAdminExt admin = new DefaultMQAdminExt(5000);
      admin.setNamesrvAddr(System.getProperty("namesrv"));
      admin.start();
      String broker = System.getProperty("broker");
      List<String> a = new ArrayList<>(List.of(args));
      String mode = a.remove(0);
      if (mode.equals("registered")) {
        System.exit(admin.examineBrokerClusterInfo().getBrokerAddrTable().containsKey("broker-a") ? 0 : 1);
      }
      if (mode.equals("drop")) {
        for (String name : a.subList(1, a.size())) admin.deleteSubscriptionGroup(broker, name, true);
        admin.deleteTopicInBroker(Set.of(broker), a.get(0));
        admin.deleteTopicInNameServer(Set.of(System.getProperty("namesrv")), a.get(0));
        System.exit(0);
      }
      if (mode.equals("register")) {
        Properties p = new Properties();
        p.setProperty("brokerPermission", "6");
        admin.updateBrokerConfig(broker, p);
      }
      int queues = Integer.getInteger("queues", 8);
      TopicConfig topic = new TopicConfig(a.get(0), queues, queues);
      topic.setAttributes(new HashMap<>(Map.of("+message.type", "FIFO")));
      admin.createAndUpdateTopicConfig(broker, topic);
      for (String name : a.subList(1, a.size())) {
        SubscriptionGroupConfig group = new SubscriptionGroupConfig();
        group.setGroupName(name);
        group.setConsumeMessageOrderly(true);
        admin.createAndUpdateSubscriptionGroupConfig(broker, group);
      }
      System.exit(0);
    } catch (Throwable e) {
      e.printStackTrace();
      System.exit(1);
    }
  }
}
JAVA
)
admin() {
  local dir=$DIR/admin
  if [ ! -f "$dir/Admin.class" ] || [ "$(cat "$dir/Admin.java" 2>/dev/null)" != "$ADMIN_JAVA" ]; then
    # compiled aside and moved in: tests may call `topic` in parallel
    mkdir -p "$dir/$$"
    echo "$ADMIN_JAVA" >"$dir/$$/Admin.java"
    javac -nowarn -cp "$LIB/*" -d "$dir/$$" "$dir/$$/Admin.java" || die "cannot compile the admin helper"
    mv -f "$dir/$$/Admin.class" "$dir/Admin.class" && mv -f "$dir/$$/Admin.java" "$dir/Admin.java"
    rm -rf "${dir:?}/$$"
  fi
  ROCKETMQ_HOME=$DATA java -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Duser.home="$DATA" \
    -Drocketmq.home.dir="$DATA" -Dnamesrv="$NAMESRV" -Dbroker="$BROKER" -Dqueues="${ROCKETMQ_QUEUES:-8}" -cp "$dir:$LIB/*" Admin "$@" 2>&1
}

wait_until() { # seconds description command...
  local limit=$1 what=$2 deadline
  shift 2
  deadline=$((SECONDS + limit))
  until "$@"; do
    [ $SECONDS -lt $deadline ] || die "$what not ready after ${limit}s (logs in $DATA/logs)"
    sleep 0.5
  done
}

registered() { admin registered >/dev/null; }

topics() { # create|register|drop topic groups... (straight to the broker: the name server may not list it yet)
  local out
  for _ in 1 2 3; do
    if out=$(admin "$@"); then
      if [ "$1" = drop ]; then log "dropped topic $2 and groups: ${*:3}"; else log "topic $2 (FIFO), orderly groups: ${*:3}"; fi
      return 0
    fi
    sleep 1
  done
  die "$1 topic / groups ${*:2}: $out"
}

up() {
  fetch
  configure
  if ! running namesrv NamesrvStartup >/dev/null; then
    ports_free "$NAMESRV_PORT"
    java_run namesrv 128m org.apache.rocketmq.namesrv.NamesrvStartup -c "$DATA/conf/namesrv.conf"
    wait_until 60 "NameServer" listening namesrv NamesrvStartup "$NAMESRV_PORT"
  fi
  if ! running proxy ProxyStartup >/dev/null; then
    ports_free "$PROXY_PORT" "$REMOTING_PORT" "${BROKER#*:}"
    java_run proxy 384m org.apache.rocketmq.proxy.ProxyStartup -pm Local -pc "$DATA/conf/rmq-proxy.json" \
      -bc "$DATA/conf/broker.conf" -n "$NAMESRV"
    wait_until 120 "Proxy gRPC port $PROXY_PORT" listening proxy ProxyStartup "$PROXY_PORT"
    log "proxy listening after ${SECONDS}s"
  fi
  # register: a full registration with the name server now; the broker's own may come 10 s after its start, and
  # until then the name server refuses its topics ("has not registered"). The groups are a space-separated list.
  # shellcheck disable=SC2086
  topics register "$TOPIC" $GROUPS_
  wait_until 60 "broker registration" registered
  log "up in ${SECONDS}s: namesrv $NAMESRV, proxy gRPC 127.0.0.1:$PROXY_PORT, store $STORE, logs $DATA/logs"
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
  if [ -n "$ns" ] && [ -n "$px" ] && port_open "$PROXY_PORT"; then
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
  topic | drop)
    [ $# -ge 2 ] || die "usage: $0 $1 NAME [GROUP...]"
    status >/dev/null || die "not running: run '$0 up' first"
    topics "$([ "$1" = topic ] && echo create || echo drop)" "${@:2}"
    ;;
  *) die "usage: $0 up|down|status|topic NAME [GROUP...]|drop NAME [GROUP...]" ;;
esac
