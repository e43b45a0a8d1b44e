# A stand-in for python:3.11-slim built from a local Debian base when no registry can be reached
# (docker/images.sh): Debian bookworm's Python 3.11 in a venv on PATH, so `python` and
# `pip install .` behave as in the official image (Debian's own python3 refuses system-wide pip).
ARG DEBIAN_IMAGE=debian:bookworm-slim
FROM ${DEBIAN_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /usr/local/python \
 && /usr/local/python/bin/pip install --no-cache-dir --upgrade pip \
      --cert /etc/ssl/certs/ca-certificates.crt
# the CA bundle of the Debian base (with the build host's CAs, see docker/images.sh) for pip and requests
ENV PATH=/usr/local/python/bin:$PATH \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt \
    PYTHONUNBUFFERED=1
CMD ["python3"]
