package auditlog

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/authn"
)

// SourcesConfig is the audit ingestion an operator configures: files to
// follow and a webhook receiver; `run`, `audit watch` and `audit ship`
// share it.
type SourcesConfig struct {
	LogPaths      []string
	CheckpointDir string
	Backlog       bool
	WebhookListen string
	TokenFile     string
	TLSCert       string
	TLSKey        string
	ClientCA      string
	// FirehoseKeyFile holds the access keys Amazon Data Firehose sends.
	FirehoseKeyFile string
	MaxBody         int64
}

// Configured reports whether any source is asked for.
func (o *SourcesConfig) Configured() bool { return len(o.LogPaths) > 0 || o.WebhookListen != "" }

// ValidateWebhook applies the API's rule to the standalone webhook: without
// a token file or a client CA it must listen on loopback only.
func (o *SourcesConfig) ValidateWebhook() error {
	if o.WebhookListen == "" || o.TokenFile != "" || o.ClientCA != "" || o.FirehoseKeyFile != "" || authn.IsLoopback(o.WebhookListen) {
		return nil
	}
	return fmt.Errorf("validating --audit-webhook-listen %q: %w: give --audit-webhook-token-file, --audit-webhook-client-ca or --audit-webhook-firehose-access-key-file, or listen on 127.0.0.1",
		o.WebhookListen, authn.ErrInsecureListener)
}

// APIWebhook is the webhook served on the API listener: the same body
// bound as --audit-webhook-listen's, and tokens (nil: no authentication,
// only with --insecure-no-auth).
func (o *SourcesConfig) APIWebhook(tokens TokenChecker, sink Sink, log zerolog.Logger, m *Metrics) http.Handler {
	return NewWebhookHandler(WebhookConfig{MaxBodyBytes: o.MaxBody, Tokens: tokens}, sink, log, m)
}

// Sources builds the configured audit sources. Token files come from
// files, shared with the API; nil opens them alone.
func (o *SourcesConfig) Sources(files *authn.Files, log zerolog.Logger, m *Metrics) ([]Source, error) {
	if err := o.ValidateWebhook(); err != nil {
		return nil, err
	}
	var out []Source
	if len(o.LogPaths) > 0 {
		t, err := NewTailer(TailConfig{Paths: o.LogPaths, CheckpointDir: o.CheckpointDir, Backlog: o.Backlog}, log, m)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	if o.WebhookListen != "" {
		cfg := WebhookConfig{Listen: o.WebhookListen, MaxBodyBytes: o.MaxBody,
			TLSCertFile: o.TLSCert, TLSKeyFile: o.TLSKey, ClientCAFile: o.ClientCA}
		if files == nil {
			files = authn.NewFiles(log)
		}
		if o.TokenFile != "" {
			tf, err := files.Open(o.TokenFile)
			if err != nil {
				return nil, fmt.Errorf("opening --audit-webhook-token-file: %w", err)
			}
			cfg.Tokens = tf
		}
		if o.FirehoseKeyFile != "" {
			kf, err := files.Open(o.FirehoseKeyFile)
			if err != nil {
				return nil, fmt.Errorf("opening --audit-webhook-firehose-access-key-file: %w", err)
			}
			cfg.FirehoseKeys = kf
		}
		s, err := NewWebhookServer(cfg, log, m)
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

// RunSources runs every source into sink until ctx ends or one fails.
func RunSources(ctx context.Context, srcs []Source, sink Sink) error {
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
