// Command render-config prints the node agent's configuration file as the
// Helm chart renders it, for `correlator run --config`:
//
//	go run ./deploy/cmd/render-config [-chart DIR] [helm template args...] > config.yaml
//
// Arguments after the flags go to `helm template` (--set key=value, -f
// values.yaml). helm is built at its pinned version on first use.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/execid/correlator/deploy"
)

func main() {
	chart := flag.String("chart", "deploy/helm/correlator", "chart directory")
	release := flag.String("release", "correlator", "release name")
	namespace := flag.String("namespace", "correlator", "release namespace")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *chart, *release, *namespace, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "render-config:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, chart, release, namespace string, args []string) error {
	dir, err := deploy.ToolDir()
	if err != nil {
		return err
	}
	helm, err := deploy.EnsureHelm(ctx, dir)
	if err != nil {
		return err
	}
	out, err := deploy.RenderChart(ctx, helm, chart, release, namespace, args...)
	if err != nil {
		return err
	}
	cfg, err := deploy.AgentConfig(out)
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(cfg)
	return err
}
