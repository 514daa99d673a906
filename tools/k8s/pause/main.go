// pause: the sandbox ("pause") process of every pod on the test cluster's real node.
// It holds the pod's namespaces, reaps zombies and exits on SIGINT/SIGTERM, like
// registry.k8s.io/pause, so the node never needs to pull an image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for { // reap every exited child (pid 1 in a shared pid namespace)
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
