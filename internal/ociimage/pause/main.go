// Command pause is the sandbox process of the node harness's pods: it holds
// the pod's namespaces open until it is told to stop, the way the kubelet's
// registry.k8s.io/pause does. It reaps any child reparented to it, and exits
// 0 on SIGINT or SIGTERM. It must build with CGO_ENABLED=0: the pause image
// has no libc.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
