#!/bin/sh
# The compose brokers advertise broker1:9092, broker2:9093, broker3:9094 (one listener that works on
# the compose network and, with the ports published, from the host). On the host those names need
# to resolve to 127.0.0.1:
#   docker/hosts.sh add       append "127.0.0.1 broker1 broker2 broker3" to /etc/hosts (marked)
#   docker/hosts.sh remove    remove the marked line again
# Nothing is written when the names already resolve to 127.0.0.1; /etc/hosts is rewritten in
# place (it may be a bind mount).
set -eu
MARK="# floodmark compose (docker/hosts.sh)"
NAMES="broker1 broker2 broker3"
die() { echo "hosts: error: $*" >&2; exit 1; }

case "${1:-}" in
  add)
    grep -qF "$MARK" /etc/hosts && exit 0
    todo=""
    for name in $NAMES; do
      addr=$(getent hosts "$name" | awk '{print $1; exit}')
      case "$addr" in
        "") todo="$todo $name" ;;
        127.0.0.1 | ::1) ;;
        *) die "$name resolves to $addr on this host, not to the published ports on 127.0.0.1" ;;
      esac
    done
    [ -z "$todo" ] && exit 0
    [ -w /etc/hosts ] || die "cannot write /etc/hosts; add this line as root: 127.0.0.1$todo"
    printf '127.0.0.1%s %s\n' "$todo" "$MARK" >> /etc/hosts
    echo "hosts: /etc/hosts maps$todo to 127.0.0.1 (removed by make compose-down)"
    ;;
  remove)
    grep -qF "$MARK" /etc/hosts || exit 0
    kept=$(grep -vF "$MARK" /etc/hosts)
    printf '%s\n' "$kept" > /etc/hosts
    ;;
  *) echo "usage: $0 add|remove" >&2; exit 2 ;;
esac
