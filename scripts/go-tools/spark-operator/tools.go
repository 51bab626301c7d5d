//go:build tools

// Package tools names the one command this module exists to build, so `go mod tidy` keeps
// the Spark Operator and everything its command imports.
package tools

import _ "github.com/kubeflow/spark-operator/v2/cmd/operator"
