# floodmark broker and client image (SPEC 10): python:3.11-slim with the project installed.
# The same image runs a broker (the default command) or the `floodmark` CLI (the client profile).
FROM python:3.11-slim

# Java runs the Spark verification job (`floodmark verify`); iproute2 for diagnostics.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openjdk-17-jre-headless iproute2 \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/floodmark
COPY pyproject.toml README.md ./
COPY broker ./broker
COPY controller ./controller
COPY client ./client
COPY zk ./zk
COPY devcluster ./devcluster
COPY chaos ./chaos
COPY ledger ./ledger
COPY verify ./verify
COPY cli ./cli
RUN pip install --no-cache-dir .

COPY docker/broker-entrypoint.sh /usr/local/bin/broker-entrypoint
RUN chmod +x /usr/local/bin/broker-entrypoint
EXPOSE 9092
ENTRYPOINT ["broker-entrypoint"]
