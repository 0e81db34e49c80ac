package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/authn"
)

// auditSourceOptions are the audit-ingestion flags; the agent command reuses
// them through addFlags and sources.
type auditSourceOptions struct {
	logPaths      []string
	checkpointDir string
	backlog       bool
	webhookListen string
	tokenFile     string
	tlsCert       string
	tlsKey        string
	clientCA      string
	// firehoseKeyFile holds the access keys Amazon Data Firehose sends.
	firehoseKeyFile string
	maxBody         int64
	// tokens shares token files with the API; nil opens them alone.
	tokens *tokenFiles
}

func (o *auditSourceOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringArrayVar(&o.logPaths, "audit-log", nil, "audit log file to follow (repeatable)")
	fs.StringVar(&o.checkpointDir, "audit-checkpoint-dir", "/var/lib/correlator/audit", "where tail offsets are kept across restarts (empty: none)")
	fs.BoolVar(&o.backlog, "audit-backlog", false, "on first start also read rotated files (.gz included), oldest first")
	fs.StringVar(&o.webhookListen, "audit-webhook-listen", "", "address for the audit webhook receiver, e.g. :8443; without a token file or client CA only a loopback address")
	fs.StringVar(&o.tokenFile, "audit-webhook-token-file", "", "file of bearer tokens webhook senders may present, one per line, # comments (reloaded when it changes)")
	fs.StringVar(&o.tlsCert, "audit-webhook-tls-cert", "", "webhook server certificate (PEM)")
	fs.StringVar(&o.tlsKey, "audit-webhook-tls-key", "", "webhook server key (PEM)")
	fs.StringVar(&o.clientCA, "audit-webhook-client-ca", "", "CA bundle client certificates must chain to (enables verification)")
	fs.StringVar(&o.firehoseKeyFile, "audit-webhook-firehose-access-key-file", "", "file of access keys Amazon Data Firehose HTTP endpoint deliveries may carry (X-Amz-Firehose-Access-Key), one per line, # comments (reloaded when it changes); without it Firehose deliveries are refused")
	fs.Int64Var(&o.maxBody, "audit-webhook-max-body-bytes", auditlog.DefaultMaxBodyBytes, "largest webhook request body accepted")
}

// validateWebhook applies the API's rule to the standalone webhook: without
// a token file or a client CA it must listen on loopback only.
func (o *auditSourceOptions) validateWebhook() error {
	if o.webhookListen == "" || o.tokenFile != "" || o.clientCA != "" || o.firehoseKeyFile != "" || authn.IsLoopback(o.webhookListen) {
		return nil
	}
	return fmt.Errorf("validating --audit-webhook-listen %q: %w: give --audit-webhook-token-file, --audit-webhook-client-ca or --audit-webhook-firehose-access-key-file, or listen on 127.0.0.1",
		o.webhookListen, authn.ErrInsecureListener)
}

// apiWebhook is the webhook served on the API listener: the same body
// bound as --audit-webhook-listen's, and tokens (nil: no authentication,
// only with --insecure-no-auth).
func (o *auditSourceOptions) apiWebhook(tokens auditlog.TokenChecker, sink auditlog.Sink, log zerolog.Logger, m *auditlog.Metrics) http.Handler {
	return auditlog.NewWebhookHandler(auditlog.WebhookConfig{MaxBodyBytes: o.maxBody, Tokens: tokens}, sink, log, m)
}

// sources builds the configured audit sources.
func (o *auditSourceOptions) sources(log zerolog.Logger, m *auditlog.Metrics) ([]auditlog.Source, error) {
	if err := o.validateWebhook(); err != nil {
		return nil, err
	}
	var out []auditlog.Source
	if len(o.logPaths) > 0 {
		t, err := auditlog.NewTailer(auditlog.TailConfig{Paths: o.logPaths, CheckpointDir: o.checkpointDir, Backlog: o.backlog}, log, m)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	if o.webhookListen != "" {
		cfg := auditlog.WebhookConfig{Listen: o.webhookListen, MaxBodyBytes: o.maxBody,
			TLSCertFile: o.tlsCert, TLSKeyFile: o.tlsKey, ClientCAFile: o.clientCA}
		files := o.tokens
		if files == nil {
			files = newTokenFiles(log)
		}
		if o.tokenFile != "" {
			tf, err := files.open(o.tokenFile)
			if err != nil {
				return nil, fmt.Errorf("opening --audit-webhook-token-file: %w", err)
			}
			cfg.Tokens = tf
		}
		if o.firehoseKeyFile != "" {
			kf, err := files.open(o.firehoseKeyFile)
			if err != nil {
				return nil, fmt.Errorf("opening --audit-webhook-firehose-access-key-file: %w", err)
			}
			cfg.FirehoseKeys = kf
		}
		s, err := auditlog.NewWebhookServer(cfg, log, m)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, errors.New("configuring audit sources: give --audit-log or --audit-webhook-listen")
	}
	return out, nil
}

func newAuditWatchCmd(g *globalOptions) *cobra.Command {
	var o auditSourceOptions
	var maxRecords int
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Follow audit log files and/or receive the audit webhook; print sessions as they change",
		Long: `Follows audit log files and/or receives the apiserver's audit webhook and
prints each streaming session (exec, attach, port-forward) as a JSON line
whenever its record changes.

` + leavesNothing,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := g.logger()
			metrics, err := auditlog.NewMetrics(prometheus.NewRegistry())
			if err != nil {
				return err
			}
			srcs, err := o.sources(log, metrics)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return watch(ctx, srcs, auditlog.NewMerger(auditlog.MergerConfig{MaxRecords: maxRecords}), json.NewEncoder(cmd.OutOrStdout()))
		},
	}
	o.addFlags(cmd.Flags())
	cmd.Flags().IntVar(&maxRecords, "max-records", auditlog.DefaultMaxRecords, "sessions held in memory for merging")
	return cmd
}

// watch runs the sources into one merger and prints every updated record.
func watch(ctx context.Context, srcs []auditlog.Source, m *auditlog.Merger, enc *json.Encoder) error {
	enc.SetEscapeHTML(false)
	var mu sync.Mutex
	sink := func(_ context.Context, evs []auditlog.Event) error {
		mu.Lock()
		defer mu.Unlock()
		for _, ev := range evs {
			for _, r := range m.Add(ev).Updated {
				if err := enc.Encode(&r); err != nil {
					return fmt.Errorf("writing record: %w", err)
				}
			}
		}
		return nil
	}
	return runSources(ctx, srcs, sink)
}

// runSources runs every source into sink until ctx ends or one fails.
func runSources(ctx context.Context, srcs []auditlog.Source, sink auditlog.Sink) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(srcs))
	for _, s := range srcs {
		go func() {
			err := s.Run(ctx, sink)
			if err != nil {
				cancel()
			}
			errs <- err
		}()
	}
	var all []error
	for range srcs {
		if err := <-errs; err != nil && !errors.Is(err, context.Canceled) {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}
