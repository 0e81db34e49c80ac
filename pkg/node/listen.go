package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/execid/correlator/pkg/auditlog"
)

// listen binds the API's address and the standalone audit webhook's, so a
// taken port fails the start, before the probes load. Nothing is served
// until Run.
func (n *Node) listen() error {
	ln, err := n.srv.Listen()
	if err != nil {
		return fmt.Errorf("binding --listen: %w", err)
	}
	n.ln = ln
	n.cl.add("closing the API listener", closeListener(ln))
	for i, s := range n.srcs {
		ws, ok := s.(*auditlog.WebhookServer)
		if !ok {
			continue
		}
		ln, err := net.Listen("tcp", n.cfg.Audit.WebhookListen)
		if err != nil {
			return fmt.Errorf("binding --audit-webhook-listen: %w", err)
		}
		n.cl.add("closing the audit webhook listener", closeListener(ln))
		n.srcs[i] = boundWebhook{ws, ln}
	}
	return nil
}

// closeListener closes a listener a failed start bound; after Run, serving
// has closed it already.
func closeListener(ln net.Listener) func() error {
	return func() error {
		if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			return err
		}
		return nil
	}
}

// boundWebhook is the standalone audit webhook on the listener New bound.
type boundWebhook struct {
	srv *auditlog.WebhookServer
	ln  net.Listener
}

func (b boundWebhook) Run(ctx context.Context, sink auditlog.Sink) error {
	return b.srv.Serve(ctx, b.ln, sink)
}

// checkTLS loads the API's key pair at start. The server loads it again
// when it serves, in Run, after the probes are attached: a missing or bad
// file must fail the start instead.
func checkTLS(cert, key string) error {
	if cert == "" {
		return nil
	}
	if _, err := tls.LoadX509KeyPair(cert, key); err != nil {
		return fmt.Errorf("loading --tls-cert %s and --tls-key %s: %w", cert, key, err)
	}
	return nil
}

// storeName is --store as errors name it, with the cluster's URLs, their
// passwords redacted: the error goes to the log.
func storeName(cfg *Config) string {
	if cfg.Store != "elasticsearch" {
		return cfg.Store
	}
	urls := make([]string, len(cfg.ES.URLs))
	for i, s := range cfg.ES.URLs {
		urls[i] = "(an unparsable URL)"
		if u, err := url.Parse(s); err == nil {
			urls[i] = u.Redacted()
		}
	}
	return "elasticsearch (" + strings.Join(urls, ", ") + ")"
}
