#!/bin/sh
# Standalone ZooKeeper from Debian's jars, configured like the official image: ZOO_TICK_TIME,
# ZOO_INIT_LIMIT, ZOO_SYNC_LIMIT, ZOO_MAX_CLIENT_CNXNS, ZOO_4LW_COMMANDS_WHITELIST,
# ZOO_AUTOPURGE_PURGEINTERVAL, ZOO_AUTOPURGE_SNAPRETAINCOUNT; data in /data, log in /datalog.
set -eu
if [ "$#" -gt 0 ]; then exec "$@"; fi
cat > /conf/zoo.cfg <<CFG
dataDir=/data
dataLogDir=/datalog
clientPort=2181
tickTime=${ZOO_TICK_TIME:-2000}
initLimit=${ZOO_INIT_LIMIT:-5}
syncLimit=${ZOO_SYNC_LIMIT:-2}
maxClientCnxns=${ZOO_MAX_CLIENT_CNXNS:-60}
4lw.commands.whitelist=${ZOO_4LW_COMMANDS_WHITELIST:-srvr}
autopurge.purgeInterval=${ZOO_AUTOPURGE_PURGEINTERVAL:-0}
autopurge.snapRetainCount=${ZOO_AUTOPURGE_SNAPRETAINCOUNT:-3}
admin.enableServer=false
CFG
cp=""
for jar in zookeeper zookeeper-jute slf4j-api slf4j-simple netty-handler netty-transport netty-common \
    netty-buffer netty-codec netty-resolver netty-transport-native-epoll netty-transport-native-unix-common; do
  cp="$cp:/usr/share/java/$jar.jar"
done
exec java ${JVMFLAGS:--Xmx256m -XX:+UseSerialGC} -Dorg.slf4j.simpleLogger.defaultLogLevel=${ZOO_LOG_LEVEL:-warn} \
  -cp "${cp#:}" org.apache.zookeeper.server.ZooKeeperServerMain /conf/zoo.cfg
