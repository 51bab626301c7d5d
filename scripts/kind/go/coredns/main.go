// CoreDNS for the kind cluster with only the plugins kubeadm's default Corefile uses (and log,
// to debug it): the upstream command links every plugin, the cloud providers' SDKs among them,
// which made it the longest compile of a cold kind build for code never run here.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func init() {
	// The directives a Corefile may name, in the order CoreDNS's plugin.cfg gives them: a
	// query passes the plugins in this order whatever the Corefile's order.
	dnsserver.Directives = []string{"reload", "ready", "health", "prometheus", "errors", "log",
		"loadbalance", "cache", "kubernetes", "loop", "forward"}
}

func main() { coremain.Run() }
