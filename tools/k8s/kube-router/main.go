// kube-router: only kube-router's NetworkPolicy controller (iptables + ipset), run as a
// host process of the test cluster's real node (tools/k8s/netpol.py).
//
// kube-router's own command also starts its BGP router and service proxy; k3s embeds just
// the policy controller (k3s pkg/agent/netpol), and this does the same: informers for
// pods, namespaces and NetworkPolicies from a kubeconfig, the node's addresses from
// --hostname-override, and no health or metrics server.
//
// Each completed full sync is counted in --sync-file (the number, rewritten), so a test can
// wait for the rules of the policies it just made: a sync that started after a change has
// finished once the count has gone up by two.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/cloudnativelabs/kube-router/v2/pkg/controllers/netpol"
	"github.com/cloudnativelabs/kube-router/v2/pkg/healthcheck"
	"github.com/cloudnativelabs/kube-router/v2/pkg/options"
	"github.com/cloudnativelabs/kube-router/v2/pkg/utils"
	"github.com/coreos/go-iptables/iptables"
	"github.com/vishvananda/netlink"
	v1core "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// links reads the host's links and addresses (utils.LocalLinkQuerier).
type links struct{}

func (links) LinkList() ([]netlink.Link, error) { return netlink.LinkList() }
func (links) AddrList(link netlink.Link, family int) ([]netlink.Addr, error) {
	return netlink.AddrList(link, family)
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the controller's client")
	node := flag.String("hostname-override", "", "name of the Node object of this host")
	serviceRange := flag.String("service-cluster-ip-range", "10.96.0.0/12", "the cluster's Service CIDR")
	nodePorts := flag.String("service-node-port-range", "30000-32767", "the cluster's NodePort range")
	syncPeriod := flag.Duration("iptables-sync-period", 5*time.Minute, "full sync at least this often")
	syncFile := flag.String("sync-file", "", "file the number of completed full syncs is written to")
	klog.InitFlags(nil)
	flag.Parse()
	if *kubeconfig == "" || *node == "" {
		fmt.Fprintln(os.Stderr, "kube-router: --kubeconfig and --hostname-override are required")
		os.Exit(2)
	}
	if err := run(*kubeconfig, *node, *serviceRange, *nodePorts, *syncPeriod, *syncFile); err != nil {
		klog.Errorf("kube-router: %v", err)
		os.Exit(1)
	}
}

func run(kubeconfig, node, serviceRange, nodePorts string, syncPeriod time.Duration, syncFile string) error {
	restConfig, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	config := options.NewKubeRouterConfig()
	config.ClusterIPCIDRs = []string{serviceRange}
	config.NodePortRange = nodePorts
	config.EnableIPv4, config.EnableIPv6 = true, false
	config.HostnameOverride = node
	config.IPTablesSyncPeriod = syncPeriod
	config.RunFirewall, config.RunRouter, config.RunServiceProxy = true, false, false
	config.MetricsEnabled = false

	stop := make(chan struct{})
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-signals; close(stop) }()

	factory := informers.NewSharedInformerFactory(client, 0)
	pods := factory.Core().V1().Pods().Informer()
	namespaces := factory.Core().V1().Namespaces().Informer()
	policies := factory.Networking().V1().NetworkPolicies().Informer()
	factory.Start(stop)
	factory.WaitForCacheSync(stop)

	ipt, err := iptables.NewWithProtocol(iptables.ProtocolIPv4)
	if err != nil {
		return fmt.Errorf("iptables: %w", err)
	}
	ipset, err := utils.NewIPSet(false)
	if err != nil {
		return fmt.Errorf("ipset: %w", err)
	}
	npc, err := netpol.NewNetworkPolicyController(client, config, pods, policies, namespaces, &sync.Mutex{}, links{},
		map[v1core.IPFamily]utils.IPTablesHandler{v1core.IPv4Protocol: ipt},
		map[v1core.IPFamily]utils.IPSetHandler{v1core.IPv4Protocol: ipset})
	if err != nil {
		return fmt.Errorf("network policy controller: %w", err)
	}
	pods.AddEventHandler(npc.PodEventHandler)
	namespaces.AddEventHandler(npc.NamespaceEventHandler)
	policies.AddEventHandler(npc.NetworkPolicyEventHandler)

	// The controller sends a heartbeat as each full sync starts; syncs run one at a time, so
	// heartbeat n+1 means sync n is done.
	heartbeats := make(chan *healthcheck.ControllerHeartbeat)
	go countSyncs(heartbeats, syncFile)
	var wg sync.WaitGroup
	wg.Add(1)
	go npc.Run(heartbeats, stop, &wg)
	<-stop
	wg.Wait()
	return nil
}

func countSyncs(heartbeats <-chan *healthcheck.ControllerHeartbeat, syncFile string) {
	started := 0
	for range heartbeats {
		if syncFile != "" && started > 0 {
			tmp := syncFile + ".tmp"
			if err := os.WriteFile(tmp, []byte(strconv.Itoa(started)+"\n"), 0o644); err == nil {
				_ = os.Rename(tmp, syncFile)
			}
		}
		started++
	}
}
