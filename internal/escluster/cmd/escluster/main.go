// Command escluster brings the tests' shared Elasticsearch cluster (package
// internal/escluster) up and down; `make test` runs it around go test.
//
//	escluster up      start the cluster, or find it up; print its URLs,
//	                  comma-separated, on stdout
//	escluster down    stop its nodes and remove its state directory
//	escluster status  its nodes and health; exit status 1 unless green
//
// The CORRELATOR_ES_* variables of docs/testing-es.md configure it.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/execid/correlator/internal/escluster"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: escluster up|down|status")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, os.Args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "escluster %s: %v\n", os.Args[1], err)
	}
	os.Exit(code)
}

func run(ctx context.Context, cmd string) (int, error) {
	cfg, err := escluster.ConfigFromEnv()
	if err != nil {
		return 1, err
	}
	switch cmd {
	case "up":
		c, err := escluster.Up(ctx, cfg, os.Stderr)
		if err != nil {
			return 1, err
		}
		fmt.Println(strings.Join(c.URLs(), ","))
		return 0, nil
	case "down":
		if err := escluster.Down(cfg, os.Stderr); err != nil {
			return 1, err
		}
		return 0, nil
	case "status":
		green, err := escluster.Status(ctx, cfg, os.Stdout)
		if err != nil || !green {
			return 1, err
		}
		return 0, nil
	default:
		return 2, fmt.Errorf("unknown command %q (want up, down or status)", cmd)
	}
}
