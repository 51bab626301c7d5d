"""The integration tier: real broker processes on loopback (kafkube/harness), the
kube-apiserver control plane, Java, librdkafka and franz-go clients, Spark in local mode.
`make integration` runs it alone."""
