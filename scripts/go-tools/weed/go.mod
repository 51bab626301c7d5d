// SeaweedFS (`weed mini`: an S3-compatible object store in one process), built here
// (scripts/go_tool.sh weed) for the Spark pipeline's checkpoints and Parquet output on kind.
// Its go.mod replaces one module, which `go install module@version` refuses, so this module
// requires it and repeats that replace.
module kafkube.local/weed

go 1.26.6

require github.com/seaweedfs/seaweedfs v0.0.0-20261109003541-7506e5f91cd6

replace github.com/tyler-smith/go-bip39 => github.com/cosmos/go-bip39 v1.0.0
