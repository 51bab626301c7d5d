# The broker's image: `kafkube broker` by default. The operator's image adds the operator's
# extra on top of it (operator/Dockerfile), so this one does not carry kopf or kafka-python.
#
# The base is a build argument, so the same file builds from a registry anywhere
#   docker build -t kafkube:dev .
# and here, where there is no registry, from a base made locally with debootstrap
#   buildah bud --build-arg BASE=localhost/kafkube-base:bookworm -t kafkube:dev .
# (scripts/image.sh does the latter). The wheels are built on the host first
# (`pip wheel -w build/wheels .`), so the build itself needs no network.
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}

COPY build/wheels /tmp/wheels
RUN python3 -m venv /opt/kafkube \
 && /opt/kafkube/bin/pip install --no-cache-dir --no-index --find-links /tmp/wheels kafkube \
 && rm -rf /tmp/wheels \
 && useradd --uid 1000 --user-group --no-create-home --home-dir /var/lib/kafkube kafkube \
 && mkdir -p /var/lib/kafkube \
 && chown kafkube:kafkube /var/lib/kafkube

ENV PATH=/opt/kafkube/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
USER 1000:1000
WORKDIR /var/lib/kafkube
VOLUME /var/lib/kafkube
# Kafka clients, Prometheus metrics
EXPOSE 9092 9404
ENTRYPOINT ["kafkube"]
CMD ["broker"]
