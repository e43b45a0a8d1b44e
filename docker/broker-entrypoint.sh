#!/bin/sh
# Start one broker from FLOODMARK_* environment variables, or run any other command given.
# FLOODMARK_BROKER_ID and FLOODMARK_ZOOKEEPER_CONNECT are required; every other broker setting
# comes as FLOODMARK_CONF_<key with dots as underscores>=value, e.g.
# FLOODMARK_CONF_MIN_INSYNC_REPLICAS=2 -> min.insync.replicas=2, and the listeners (KIP-103) too:
# FLOODMARK_CONF_LISTENERS, FLOODMARK_CONF_ADVERTISED_LISTENERS,
# FLOODMARK_CONF_LISTENER_SECURITY_PROTOCOL_MAP, FLOODMARK_CONF_INTER_BROKER_LISTENER_NAME
# (docker-compose.yml sets INTERNAL, EXTERNAL and KAFKA). Without FLOODMARK_CONF_LISTENERS the broker
# listens on PLAINTEXT://0.0.0.0:9092 and advertises the container's hostname.
# The rendered file is /tmp/server.properties (the healthcheck reads its listeners there).
set -eu
if [ "$#" -gt 0 ]; then exec "$@"; fi
conf=/tmp/server.properties
{
  echo "broker.id=${FLOODMARK_BROKER_ID}"
  if [ -z "${FLOODMARK_CONF_LISTENERS:-}" ]; then
    echo "listeners=PLAINTEXT://0.0.0.0:9092"
    [ -n "${FLOODMARK_CONF_ADVERTISED_LISTENERS:-}" ] || echo "advertised.listeners=PLAINTEXT://$(hostname):9092"
  fi
  echo "log.dirs=/var/lib/floodmark"
  echo "zookeeper.connect=${FLOODMARK_ZOOKEEPER_CONNECT}"
  env | sed -n 's/^FLOODMARK_CONF_\([^=]*\)=\(.*\)$/\1 \2/p' | while read -r key value; do
    echo "$(echo "$key" | tr 'A-Z_' 'a-z.')=${value}"
  done
} > "$conf"
exec floodmark-broker --config "$conf"
