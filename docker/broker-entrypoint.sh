#!/bin/sh
# Start one broker from FLOODMARK_* environment variables, or run any other command given.
# FLOODMARK_BROKER_ID, FLOODMARK_ZOOKEEPER_CONNECT and FLOODMARK_ADVERTISED_HOST are required,
# FLOODMARK_PORT defaults to 9092 (each broker gets its own, so host:port works both on the
# compose network and from the host with brokerN in /etc/hosts);
# every other broker setting comes as FLOODMARK_CONF_<key with dots as underscores>=value,
# e.g. FLOODMARK_CONF_MIN_INSYNC_REPLICAS=2 -> min.insync.replicas=2.
set -eu
if [ "$#" -gt 0 ]; then exec "$@"; fi
conf=/tmp/server.properties
{
  echo "broker.id=${FLOODMARK_BROKER_ID}"
  echo "listeners=PLAINTEXT://0.0.0.0:${FLOODMARK_PORT:-9092}"
  echo "advertised.listeners=PLAINTEXT://${FLOODMARK_ADVERTISED_HOST}:${FLOODMARK_PORT:-9092}"
  echo "log.dirs=/var/lib/floodmark"
  echo "zookeeper.connect=${FLOODMARK_ZOOKEEPER_CONNECT}"
  env | sed -n 's/^FLOODMARK_CONF_\([^=]*\)=\(.*\)$/\1 \2/p' | while read -r key value; do
    echo "$(echo "$key" | tr 'A-Z_' 'a-z.')=${value}"
  done
} > "$conf"
exec floodmark-broker --config "$conf"
