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
# The streaming job keeps its checkpoint and Parquet totals on S3 through s3a, as
# sparkapplication.yaml's orders-stream does (docs/spark.md), by default on the in-cluster
# object store (spark/k8s/object-store.yaml) with the keys of the Secret s3-credentials:
#   S3_ENDPOINT=http://s3:8333 (empty: AWS itself, with the default credential chain)
#   S3_SECRET=s3-credentials  S3_PREFIX=s3a://spark/orders-stream
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

s3=()
if [ "$job" = stream ]; then
  S3_ENDPOINT=${S3_ENDPOINT-http://s3:8333}
  S3_SECRET=${S3_SECRET:-s3-credentials}
  S3_PREFIX=${S3_PREFIX:-s3a://spark/orders-stream}
  case " $* " in *" --output="*) ;; *) set -- "$@" "--output=$S3_PREFIX/totals" ;; esac
  case " $* " in *" --checkpoint="*) ;; *) set -- "$@" "--checkpoint=$S3_PREFIX/checkpoint" ;; esac
  if [ -n "$S3_ENDPOINT" ]; then
    s3+=(--conf "spark.hadoop.fs.s3a.endpoint=$S3_ENDPOINT"
         --conf spark.hadoop.fs.s3a.endpoint.region=us-east-1
         --conf spark.hadoop.fs.s3a.path.style.access=true
         --conf spark.hadoop.fs.s3a.input.stream.type=classic
         --conf spark.hadoop.fs.s3a.aws.credentials.provider=software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider)
    case "$S3_ENDPOINT" in http://*) s3+=(--conf spark.hadoop.fs.s3a.connection.ssl.enabled=false) ;; esac
    for pod in driver executor; do
      s3+=(--conf "spark.kubernetes.$pod.secretKeyRef.AWS_ACCESS_KEY_ID=$S3_SECRET:access-key"
           --conf "spark.kubernetes.$pod.secretKeyRef.AWS_SECRET_ACCESS_KEY=$S3_SECRET:secret-key")
    done
  fi
fi

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
  ${s3[@]+"${s3[@]}"} \
  "local:///opt/app/kafkube_spark/$job.py" \
  "--bootstrap-servers=$KAFKA_CLUSTER-bootstrap.$NAMESPACE.svc:9092" "$@"
