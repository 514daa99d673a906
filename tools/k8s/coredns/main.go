// coredns: CoreDNS with only the plugins the test cluster's real node uses.
//
// The stock build links every plugin, cloud SDKs (route53, azure, clouddns) included;
// compiling those took minutes on a 2-core machine. This is CoreDNS's documented way to
// build a custom set: import the plugins and list their directives in upstream order
// (core/dnsserver/zdirectives.go), then run coremain. Its client-go is the same release
// as tools/k8s/kube's, so those packages come from the Go build cache.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

// directives in the order CoreDNS v1.14 runs them (a subset of zdirectives.go).
var directives = []string{"bind", "ready", "health", "errors", "log", "cache", "kubernetes"}

func init() {
	dnsserver.Directives = directives
}

func main() {
	coremain.Run()
}
