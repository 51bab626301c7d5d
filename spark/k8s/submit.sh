#!/usr/bin/env bash
# A job of spark/kafkube_spark on Kubernetes with plain spark-submit (cluster mode: the driver
# and its executors are pods of the Spark image), the same job sparkapplication.yaml runs
# through the Spark Operator.
#
#   spark/k8s/submit.sh batch  [job options...]
#   spark/k8s/submit.sh stream [job options...]
#
# The API server comes from the current kubeconfig context (KUBECONFIG as kubectl uses it)
# unless K8S_MASTER says otherwise; the job's options default to reading my-cluster's
# `orders` and writing `order-totals` in namespace kafka. Settings, with their defaults:
#   NAMESPACE=kafka  KAFKA_CLUSTER=my-cluster  SPARK_IMAGE=localhost/kafkube-spark:dev
#   SERVICE_ACCOUNT=spark (spark/k8s/rbac.yaml)  EXECUTORS=2
#   SPARK_SUBMIT=spark-submit (pyspark's, on PATH after `pip install pyspark`)
set -euo pipefail
job=${1:-}
case "$job" in
  batch|stream) shift ;;
  *) sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "$0" >&2; exit 2 ;;
esac
NAMESPACE=${NAMESPACE:-kafka}
KAFKA_CLUSTER=${KAFKA_CLUSTER:-my-cluster}
SPARK_IMAGE=${SPARK_IMAGE:-localhost/kafkube-spark:dev}
SERVICE_ACCOUNT=${SERVICE_ACCOUNT:-spark}
EXECUTORS=${EXECUTORS:-2}
SPARK_SUBMIT=${SPARK_SUBMIT:-spark-submit}
if [ -z "${K8S_MASTER:-}" ]; then
  K8S_MASTER=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
fi
[ "$#" -gt 0 ] || set -- "--topic=orders" "--result-topic=order-totals"

exec "$SPARK_SUBMIT" \
  --master "k8s://$K8S_MASTER" --deploy-mode cluster --name "orders-$job" \
  --conf "spark.kubernetes.namespace=$NAMESPACE" \
  --conf "spark.kubernetes.container.image=$SPARK_IMAGE" \
  --conf spark.kubernetes.container.image.pullPolicy=IfNotPresent \
  --conf "spark.kubernetes.authenticate.driver.serviceAccountName=$SERVICE_ACCOUNT" \
  --conf "spark.executor.instances=$EXECUTORS" \
  --conf spark.driver.memory=1g --conf spark.executor.memory=1g \
  --conf spark.executor.cores=1 --conf spark.sql.shuffle.partitions=4 \
  --conf spark.kubernetes.submission.waitAppCompletion=true \
  "local:///opt/app/kafkube_spark/$job.py" \
  "--bootstrap-servers=$KAFKA_CLUSTER-bootstrap.$NAMESPACE.svc:9092" "$@"
