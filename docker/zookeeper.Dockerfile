# A stand-in for the official zookeeper:3.8 image built from Debian's packages when no registry can
# be reached (docker/images.sh): Debian bookworm's ZooKeeper 3.8 jars on OpenJDK 17, a standalone
# server on 2181 with its data in /data and its transaction log in /datalog, configured from the
# same ZOO_* variables as the official image's entrypoint (the ones docker-compose.yml sets).
ARG DEBIAN_IMAGE=debian:bookworm-slim
FROM ${DEBIAN_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends zookeeper openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /data /datalog /conf
COPY docker/zookeeper-entrypoint.sh /usr/local/bin/zookeeper-entrypoint
RUN chmod +x /usr/local/bin/zookeeper-entrypoint
VOLUME ["/data", "/datalog"]
EXPOSE 2181
ENTRYPOINT ["zookeeper-entrypoint"]
