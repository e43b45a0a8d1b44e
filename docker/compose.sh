#!/bin/sh
# `make compose-up` / `make compose-down`: the whole compose cluster for a person, idempotent.
#   docker/compose.sh up     engine (docker/engine.sh), images (docker/images.sh), `docker-compose up -d`,
#                            then wait until every broker's healthcheck passes; prints
#                            "kafka bootstrap servers: ..." for Kafka's clients (kcat,
#                            confluent-kafka): the brokers' KAFKA listeners; ends with
#                            "bootstrap servers: ..." for the host's CLI: the brokers' EXTERNAL
#                            listeners; both published on the host (docker-compose.yml; nothing is
#                            added to /etc/hosts)
#   docker/compose.sh down   `docker-compose down -v` (containers, network, volumes), and the engine
#                            if docker/engine.sh started it
# FLOODMARK_COMPOSE_TIMEOUT (default 180) bounds the wait for healthy brokers, in seconds.
set -eu
cd "$(dirname "$0")/.."
export COMPOSE_PROJECT_NAME=floodmark
EXTERNAL_HOST=${FLOODMARK_EXTERNAL_HOST:-127.0.0.1}
BOOTSTRAP=$EXTERNAL_HOST:29092,$EXTERNAL_HOST:29093,$EXTERNAL_HOST:29094
KAFKA_BOOTSTRAP=$EXTERNAL_HOST:29192,$EXTERNAL_HOST:29193,$EXTERNAL_HOST:29194
BROKERS="floodmark-broker-1 floodmark-broker-2 floodmark-broker-3"
STATE=${FLOODMARK_DOCKER_STATE:-/var/lib/floodmark-docker}

die() { echo "compose: error: $*" >&2; exit 1; }
say() { echo "compose: $*"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }

compose() {
  if [ -f .floodmark/compose.env ]; then set -a; . ./.floodmark/compose.env; set +a; fi
  docker-compose --profile client "$@"
}

health() { docker inspect --format '{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}' "$1" 2>/dev/null || echo missing; }

up() {
  t0=$(now)
  docker/engine.sh start || die "the container engine did not start (above)"
  t=$(now); docker/images.sh || die "the images did not build (above)"; say "images ready in $(since "$t")"
  t=$(now)
  compose up -d --no-build zookeeper broker1 broker2 broker3 || die "docker-compose up failed (above)"
  deadline=$(($(date +%s) + ${FLOODMARK_COMPOSE_TIMEOUT:-180}))
  while :; do
    waiting=""
    for c in $BROKERS; do
      [ "$(health "$c")" = healthy ] || waiting="$waiting $c($(health "$c"))"
    done
    [ -z "$waiting" ] && break
    if [ "$(date +%s)" -ge "$deadline" ]; then
      for c in $waiting; do
        c=${c%%(*}
        echo "--- $c: last log lines, last healthcheck output" >&2
        docker logs --tail 15 "$c" >&2 2>&1 || true
        docker inspect --format '{{range .State.Health.Log}}{{.Output}}{{end}}' "$c" 2>/dev/null | tail -3 >&2 || true
      done
      die "brokers not healthy after ${FLOODMARK_COMPOSE_TIMEOUT:-180} s:$waiting"
    fi
    sleep 1
  done
  say "cluster healthy in $(since "$t") (docker-compose up + healthchecks); compose-up took $(since "$t0")"
  echo "kafka bootstrap servers: $KAFKA_BOOTSTRAP"
  echo "bootstrap servers: $BOOTSTRAP"
}

down() {
  started_here=""
  if ! docker/engine.sh status >/dev/null 2>&1; then
    if [ -d "$STATE/docker/volumes" ] && [ -n "$(ls "$STATE/docker/volumes" 2>/dev/null | grep '^floodmark_' || true)" ]; then
      say "the engine is down but the cluster's volumes are still in $STATE: starting it to remove them"
      docker/engine.sh start
      started_here=yes
    fi
  fi
  if docker/engine.sh status >/dev/null 2>&1; then
    compose down --volumes --remove-orphans --timeout 60 || die "docker-compose down failed (above)"
  fi
  docker/engine.sh stop
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
