# The e2e suite's client pods: the broker image plus confluent-kafka and tests/e2e/workload.py.
# Built by scripts/image.sh after the broker image (wheels from the host, as there).
ARG BASE=localhost/kafkube:dev
FROM ${BASE}

USER root
COPY build/e2e-wheels /tmp/wheels
RUN /opt/kafkube/bin/pip install --no-cache-dir --no-index --find-links /tmp/wheels \
      confluent-kafka && rm -rf /tmp/wheels
COPY tests/e2e/workload.py /opt/kafkube/workload.py
USER 1000:1000
ENTRYPOINT ["python3", "/opt/kafkube/workload.py"]
CMD ["--help"]
