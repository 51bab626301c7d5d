#!/bin/bash
# The Spark image's entrypoint. Spark on Kubernetes starts the driver pod's container with
# `driver <spark-submit arguments>` and each executor pod's with `executor`, passing the
# executor's settings as SPARK_* variables (Spark's documented pod contract). The Spark
# Operator's chart starts its pods with `controller start ...` or `webhook start ...` (it sets
# only the arguments): those run the operator's binary. Any other command runs as given (e.g.
# `python -m kafkube_spark.batch ...` in local mode).
set -euo pipefail

case "${1:-}" in
  driver)
    shift
    # Inside the pod the driver runs in client mode: the pod is the "client".
    exec "$SPARK_HOME/bin/spark-submit" \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS}" \
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=${SPARK_DRIVER_BIND_ADDRESS}" \
      --deploy-mode client "$@"
    ;;
  executor)
    shift
    # SPARK_JAVA_OPT_0, _1, ...: the executor JVM's options, in order.
    java_opts=()
    while IFS= read -r name; do
      java_opts+=("${!name}")
    done < <(compgen -e | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n)
    classpath="${SPARK_CONF_DIR:-$SPARK_HOME/conf}:$SPARK_HOME/jars/*"
    [ -z "${SPARK_CLASSPATH:-}" ] || classpath="$classpath:$SPARK_CLASSPATH"
    exec java -Xms"$SPARK_EXECUTOR_MEMORY" -Xmx"$SPARK_EXECUTOR_MEMORY" "${java_opts[@]}" \
      -cp "$classpath" org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "$SPARK_DRIVER_URL" --executor-id "$SPARK_EXECUTOR_ID" \
      --cores "$SPARK_EXECUTOR_CORES" --app-id "$SPARK_APPLICATION_ID" \
      --hostname "$SPARK_EXECUTOR_POD_IP" --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}"
    ;;
  controller|webhook|version)
    exec /usr/bin/spark-operator "$@"
    ;;
  *)
    exec "$@"
    ;;
esac
