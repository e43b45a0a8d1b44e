#!/bin/sh
# The container engine for the compose cluster, started by hand (these machines have no systemd):
# Debian's docker.io 20.10 (dockerd + containerd + runc, pulled in by the docker-compose package).
#
#   docker/engine.sh start    install what is missing with apt, start containerd + dockerd, wait
#   docker/engine.sh stop     stop what `start` started and clean up after it (see below)
#   docker/engine.sh status   exit 0 when an engine answers on the socket
#
# dockerd runs in the host network namespace with --iptables=false --ip-forward=false --bridge=none:
# with its defaults it would set the host's iptables FORWARD policy to DROP (breaking the local
# runner's network-namespace partitions) and create docker0. Published ports then work on the
# host through docker-proxy, which is all the compose cluster needs; user networks (the compose
# network `floodmark`) still get embedded DNS. containerd is started separately with its root and
# state under the state dir and its CRI plugin disabled.
#
# Idempotent: `start` with an engine already answering on the socket does nothing (and `stop`
# leaves an engine alone that this script did not start). State: $FLOODMARK_DOCKER_STATE
# (default /var/lib/floodmark-docker: images, volumes, logs), $FLOODMARK_DOCKER_RUN (default
# /run/floodmark-docker: sockets, pid files). The socket is Docker's default one,
# unix:///var/run/docker.sock, so `docker`, `docker-compose` and the chaos docker backend find it
# without DOCKER_HOST.
set -eu

STATE=${FLOODMARK_DOCKER_STATE:-/var/lib/floodmark-docker}
RUN=${FLOODMARK_DOCKER_RUN:-/run/floodmark-docker}
SOCK=/var/run/docker.sock
CTRD_SOCK=$RUN/containerd/containerd.sock
LOGS=$STATE/logs

die() { echo "engine: error: $*" >&2; exit 1; }
say() { echo "engine: $*"; }

# a failed start takes down what it started (containerd, a half-started dockerd) before the error
fail() { touch "$RUN/started-by-floodmark"; stop >/dev/null 2>&1 || true; die "$@"; }

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

answering() { docker -H "unix://$SOCK" version --format '{{.Server.Version}}' >/dev/null 2>&1; }

install_missing() {
  missing=""
  command -v docker-compose >/dev/null || missing="$missing docker-compose"
  command -v dockerd >/dev/null || missing="$missing docker.io"
  command -v containerd >/dev/null || missing="$missing containerd"
  command -v runc >/dev/null || missing="$missing runc"
  command -v debootstrap >/dev/null || missing="$missing debootstrap"
  [ -z "$missing" ] && return 0
  [ "$(id -u)" = 0 ] || die "missing:$missing; run as root (apt-get install -y$missing)"
  command -v apt-get >/dev/null || die "missing:$missing and no apt-get to install them"
  say "installing with apt:$missing"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null) \
    || die "apt-get install$missing failed"
}

forward_policy() { iptables -S FORWARD 2>/dev/null | sed -n 's/^-P FORWARD //p'; }

start() {
  if answering; then
    say "an engine already answers on $SOCK; using it"
    return 0
  fi
  [ "$(id -u)" = 0 ] || die "starting dockerd needs root"
  install_missing
  mkdir -p "$STATE" "$RUN/containerd" "$LOGS"
  [ -f "$RUN/forward-policy" ] || forward_policy > "$RUN/forward-policy" || true
  [ -e /etc/docker/key.json ] || touch "$RUN/remove-key-json"

  if ! alive "$RUN/containerd.pid"; then
    cat > "$RUN/containerd.toml" <<EOF
version = 2
root = "$STATE/containerd"
state = "$RUN/containerd/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$CTRD_SOCK"
[ttrpc]
  address = "$CTRD_SOCK.ttrpc"
[debug]
  address = "$RUN/containerd/debug.sock"
EOF
    setsid containerd --config "$RUN/containerd.toml" >>"$LOGS/containerd.log" 2>&1 </dev/null &
    echo $! > "$RUN/containerd.pid"
    i=0
    until [ -S "$CTRD_SOCK" ]; do
      i=$((i + 1))
      alive "$RUN/containerd.pid" || fail "containerd exited at start; see $LOGS/containerd.log: $(tail -3 "$LOGS/containerd.log")"
      [ $i -lt 150 ] || fail "containerd did not create $CTRD_SOCK within 15 s; see $LOGS/containerd.log"
      sleep 0.1
    done
  fi

  rm -f "$SOCK"
  setsid dockerd \
    --data-root "$STATE/docker" --exec-root "$RUN/exec" --pidfile "$RUN/dockerd.pid" \
    -H "unix://$SOCK" --containerd "$CTRD_SOCK" \
    --iptables=false --ip-forward=false --ip-masq=false --bridge=none \
    --storage-driver overlay2 >>"$LOGS/dockerd.log" 2>&1 </dev/null &
  echo $! > "$RUN/dockerd.launcher.pid"
  i=0
  until answering; do
    i=$((i + 1))
    kill -0 "$(cat "$RUN/dockerd.launcher.pid")" 2>/dev/null \
      || fail "dockerd exited at start; see $LOGS/dockerd.log: $(tail -3 "$LOGS/dockerd.log")"
    [ $i -lt 300 ] || fail "dockerd did not answer on $SOCK within 30 s; see $LOGS/dockerd.log"
    sleep 0.1
  done
  touch "$RUN/started-by-floodmark"
  say "dockerd $(docker -H "unix://$SOCK" version --format '{{.Server.Version}}') ready on unix://$SOCK (state $STATE)"
}

stop_pid() {  # pidfile, name, seconds
  alive "$1" || { rm -f "$1"; return 0; }
  pid=$(cat "$1")
  kill -TERM "$pid" 2>/dev/null || true
  i=0
  while kill -0 "$pid" 2>/dev/null; do
    i=$((i + 1))
    if [ $i -ge $(($3 * 10)) ]; then
      say "$2 ($pid) still running after $3 s; killing it"
      kill -KILL "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.1
  done
  rm -f "$1"
}

stop() {
  if [ ! -f "$RUN/started-by-floodmark" ] && ! alive "$RUN/containerd.pid"; then
    if answering; then say "the engine on $SOCK was not started by docker/engine.sh; leaving it running"; fi
    return 0
  fi
  # dockerd stops the running containers itself on SIGTERM (their own stop timeouts, up to 60 s)
  [ -f "$RUN/dockerd.pid" ] || cp "$RUN/dockerd.launcher.pid" "$RUN/dockerd.pid" 2>/dev/null || true
  stop_pid "$RUN/dockerd.pid" dockerd 90
  rm -f "$RUN/dockerd.launcher.pid"
  # shims of containers that outlived dockerd belong to our containerd (its socket is in their argv)
  for pid in $(pgrep -f "containerd-shim.*$RUN/containerd" 2>/dev/null || true); do
    kill -KILL "$pid" 2>/dev/null || true
  done
  stop_pid "$RUN/containerd.pid" containerd 15
  # what dockerd leaves behind on the host (MACHINE-NOTES "Containers")
  if grep -qs " $RUN/exec" /proc/mounts || grep -qs " $STATE/docker" /proc/mounts; then
    grep -E " ($RUN/exec|$STATE/docker)[/ ]" /proc/mounts | awk '{print $2}' | sort -r | while read -r m; do
      umount -l "$m" 2>/dev/null || true
    done
  fi
  rm -f "$SOCK"
  rm -rf /run/docker/plugins "$RUN/exec" "$RUN/containerd" "$RUN/containerd.toml"
  rmdir /run/docker 2>/dev/null || true
  # the shims put their sockets under /run/containerd/s whatever the config says; empty dirs only
  rmdir /run/containerd/s /run/containerd 2>/dev/null || true
  [ -f "$RUN/remove-key-json" ] && rm -f /etc/docker/key.json "$RUN/remove-key-json" && rmdir /etc/docker 2>/dev/null || true
  for d in /sys/fs/cgroup/*/docker /sys/fs/cgroup/docker; do
    [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
  # --bridge=none: no docker0 is made; one left by an earlier dockerd with its defaults goes too
  ip link show docker0 >/dev/null 2>&1 && ip link delete docker0 2>/dev/null || true
  if [ -s "$RUN/forward-policy" ]; then
    before=$(cat "$RUN/forward-policy")
    now=$(forward_policy)
    if [ -n "$now" ] && [ "$now" != "$before" ]; then
      iptables -P FORWARD "$before" && say "restored the iptables FORWARD policy to $before"
    fi
  fi
  rm -f "$RUN/forward-policy" "$RUN/started-by-floodmark"
  rmdir "$RUN" 2>/dev/null || true
  say "stopped"
}

status() {
  if answering; then
    owner="not started by docker/engine.sh"
    [ -f "$RUN/started-by-floodmark" ] && owner="started by docker/engine.sh, state $STATE"
    say "running on unix://$SOCK ($owner)"
  else
    say "not running"
    return 1
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
