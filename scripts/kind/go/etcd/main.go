// etcd of the release kubeadm expects, from the Go module proxy (Debian's 3.4 does not take the
// flags kubeadm passes): the upstream command's own entry point.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
