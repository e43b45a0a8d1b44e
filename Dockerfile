# floodmark broker and client image (SPEC 10): Python 3.11 with the project installed.
# The same image runs a broker (the default command) or the `floodmark` CLI (the client profile).
# FLOODMARK_BASE_IMAGE defaults to the official python:3.11-slim; without a registry,
# docker/images.sh builds localhost/python:3.11 from a debootstrapped Debian and passes it here.
ARG FLOODMARK_BASE_IMAGE=python:3.11-slim
FROM ${FLOODMARK_BASE_IMAGE}

# Java runs the Spark verification job (`floodmark verify`); iproute2 for diagnostics.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openjdk-17-jre-headless iproute2 \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/floodmark
# The dependencies first, from pyproject.toml alone, so that a change to the sources rebuilds
# only the small layers below (pyspark alone is some 300 MB).
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
      > /tmp/requirements.txt \
 && pip install --no-cache-dir -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt
COPY README.md ./
COPY broker ./broker
COPY controller ./controller
COPY client ./client
COPY zk ./zk
COPY devcluster ./devcluster
COPY chaos ./chaos
COPY ledger ./ledger
COPY verify ./verify
COPY cli ./cli
RUN pip install --no-cache-dir --no-deps .

COPY docker/broker-entrypoint.sh /usr/local/bin/broker-entrypoint
COPY docker/broker-healthcheck.py /usr/local/lib/floodmark-healthcheck.py
RUN chmod +x /usr/local/bin/broker-entrypoint
EXPOSE 9092 9192 19092
ENTRYPOINT ["broker-entrypoint"]
