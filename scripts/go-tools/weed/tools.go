//go:build tools

// Package tools names the one command this module exists to build, so `go mod tidy` keeps
// SeaweedFS and everything its command imports.
package tools

import _ "github.com/seaweedfs/seaweedfs/weed"
