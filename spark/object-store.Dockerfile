# The e2e cluster's object store: SeaweedFS's `weed`, whose `weed mini` runs an S3 API (port
# 8333) over a master, a volume server and a filer in one process, keeping everything under
# its -dir (a PersistentVolume: spark/k8s/object-store.yaml). The streaming job's checkpoint
# and Parquet output live there, as they would in a real S3 bucket.
#
# The binary is built on the host from the Go module proxy (scripts/go_tool.sh weed, copied
# to build/s3-bin by scripts/image.sh spark), so the build needs no network. Elsewhere:
#   cp "$(bash scripts/go_tool.sh weed)" build/s3-bin/ && docker build -f spark/object-store.Dockerfile .
ARG BASE=debian:bookworm-slim
FROM ${BASE}

COPY build/s3-bin/weed /usr/bin/weed
RUN useradd --uid 1000 --user-group --no-create-home --home-dir /data weed \
 && mkdir -p /data && chown weed:weed /data
USER 1000:1000
WORKDIR /data
EXPOSE 8333
ENTRYPOINT ["/usr/bin/weed"]
