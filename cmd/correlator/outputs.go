package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/spf13/pflag"

	"github.com/execid/correlator/pkg/alert"
	"github.com/execid/correlator/pkg/alert/delivery"
	"github.com/execid/correlator/pkg/authn"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/store/elasticsearch"
	"github.com/execid/correlator/pkg/store/sqlite"
)

// esOptions are the Elasticsearch connection flags, shared by the store,
// the audit lookup, the alert sink and `audit ship`.
type esOptions struct {
	urls        []string
	apiKeyFile  string
	username    string
	passwordEnv string
	caCert      string
	indexPrefix string
	refresh     string
	retention   time.Duration
}

func (o *esOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringArrayVar(&o.urls, "es-url", nil, "Elasticsearch node URL (repeatable)")
	fs.StringVar(&o.apiKeyFile, "es-api-key-file", "", "file holding the Elasticsearch API key (base64 id:key)")
	fs.StringVar(&o.username, "es-username", "", "Elasticsearch user (basic auth; the password comes from $CORRELATOR_ES_PASSWORD)")
	fs.StringVar(&o.caCert, "es-ca-cert", "", "PEM file of CAs that signed the cluster's certificates")
	fs.StringVar(&o.indexPrefix, "es-index-prefix", "correlator", "prefix of correlator's indices and alert data stream")
	fs.StringVar(&o.refresh, "es-refresh", "false", "bulk refresh mode: false, wait_for or true")
	fs.DurationVar(&o.retention, "es-alert-retention", 90*24*time.Hour, "ILM delete age of the alerts data stream")
	o.passwordEnv = "CORRELATOR_ES_PASSWORD"
}

func (o *esOptions) configured() bool { return len(o.urls) > 0 }

// config reads the secrets; they go into the client config, never a log.
func (o *esOptions) config() (elasticsearch.Config, error) {
	c := elasticsearch.DefaultConfig()
	c.URLs, c.CACert, c.IndexPrefix, c.Refresh, c.Retention = o.urls, o.caCert, o.indexPrefix, o.refresh, o.retention
	if len(c.URLs) == 0 {
		return c, errors.New("validating Elasticsearch: give --es-url")
	}
	if o.apiKeyFile != "" {
		key, err := authn.FirstToken(o.apiKeyFile)
		if err != nil {
			return c, fmt.Errorf("reading --es-api-key-file: %w", err)
		}
		c.APIKey = key
	}
	if o.username != "" {
		c.Username, c.Password = o.username, os.Getenv(o.passwordEnv)
	}
	return c, c.Validate()
}

// alertOptions are the rules and sinks.
type alertOptions struct {
	rulesFile   string
	sinks       []string
	spoolDir    string
	spoolBytes  int64
	allowGroups []string
	tokenFile   string
	caFile      string
}

func (o *alertOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.rulesFile, "rules", "", "YAML alert rules (default: the shipped rules)")
	fs.StringArrayVar(&o.sinks, "alert-sink", nil, "alert destination (repeatable): file:PATH, webhook:URL, splunk-hec:URL, "+
		"syslog+udp://HOST:PORT, syslog+tcp://…, syslog+tls://… (?format=cef), elasticsearch:URL")
	fs.StringVar(&o.spoolDir, "alert-spool-dir", "/var/lib/correlator/alerts", "on-disk spool of undelivered alerts, one directory per sink")
	fs.Int64Var(&o.spoolBytes, "alert-spool-max-bytes", 256<<20, "bound of each sink's spool; the oldest alerts are dropped past it")
	fs.StringArrayVar(&o.allowGroups, "alert-shell-allow-group", []string{"system:masters"},
		"groups whose interactive shells the shipped rules do not alert on (repeatable)")
	fs.StringVar(&o.tokenFile, "alert-token-file", "", "bearer token (webhook) or HEC token (splunk-hec) for the HTTP sinks")
	fs.StringVar(&o.caFile, "alert-ca-file", "", "PEM file of CAs for the HTTPS and syslog+tls sinks")
}

// rules loads the rules file, or the shipped rules.
func (o *alertOptions) rules() ([]alert.Rule, error) {
	if o.rulesFile == "" {
		return alert.DefaultRulesWith(alert.DefaultOptions{ShellAllowGroups: o.allowGroups})
	}
	b, err := os.ReadFile(o.rulesFile)
	if err != nil {
		return nil, fmt.Errorf("reading --rules: %w", err)
	}
	rules, err := alert.ParseRules(b)
	if err != nil {
		return nil, fmt.Errorf("parsing --rules %s: %w", o.rulesFile, err)
	}
	return rules, nil
}

// validate parses what can be checked before anything starts.
func (o *alertOptions) validate(es *esOptions) error {
	var errs []error
	if _, err := o.rules(); err != nil {
		errs = append(errs, err)
	}
	for i, s := range o.sinks {
		spec, err := delivery.ParseSinkSpec(s)
		if err != nil {
			// The spec may hold credentials: name it by position.
			errs = append(errs, fmt.Errorf("validating --alert-sink number %d: %w", i+1, err))
			continue
		}
		if spec.Kind == "elasticsearch" && spec.URL == "" && !es.configured() {
			errs = append(errs, errors.New("validating --alert-sink elasticsearch: give its URL or --es-url"))
		}
	}
	return errors.Join(errs...)
}

// build makes the rule engine and, with sinks, the dispatcher.
func (o *alertOptions) build(ctx context.Context, es *esOptions, log zerolog.Logger, reg prometheus.Registerer) (*alert.Engine, *delivery.Dispatcher, error) {
	rules, err := o.rules()
	if err != nil {
		return nil, nil, err
	}
	eng, err := alert.NewEngine(rules, log, reg)
	if err != nil {
		return nil, nil, err
	}
	if len(o.sinks) == 0 {
		return eng, nil, nil
	}
	var sinks []delivery.Deliverer
	closeAll := func() {
		for _, s := range sinks {
			s.Close()
		}
	}
	for _, s := range o.sinks {
		spec, err := delivery.ParseSinkSpec(s)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		var d delivery.Deliverer
		if spec.Kind == "elasticsearch" {
			var cfg elasticsearch.Config
			if cfg, err = es.config(); err != nil && spec.URL == "" {
				closeAll()
				return nil, nil, err
			}
			if spec.URL != "" {
				cfg.URLs = []string{spec.URL}
			}
			d, err = elasticsearch.NewAlertSink(ctx, cfg, log, reg)
		} else {
			d, err = delivery.NewDeliverer(spec, delivery.SinkOptions{TokenFile: o.tokenFile, CAFile: o.caFile, Version: version}, log)
		}
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("creating alert sink %s: %w", spec, err)
		}
		sinks = append(sinks, d)
	}
	disp, err := delivery.NewDispatcher(delivery.DispatcherConfig{SpoolDir: o.spoolDir, SpoolMaxBytes: o.spoolBytes}, sinks, log, reg)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return eng, disp, nil
}

// backend is a store the agent writes and the API reads.
type backend interface {
	store.Backend
	RunRetention(ctx context.Context, maxAge, interval time.Duration) error
}

// openBackend opens --store: sqlite:PATH or elasticsearch.
func openBackend(ctx context.Context, storeURL string, es *esOptions, log zerolog.Logger, reg prometheus.Registerer) (backend, error) {
	if p, ok := strings.CutPrefix(storeURL, "sqlite:"); ok {
		return sqlite.Open(p, sqlite.Config{}, log)
	}
	cfg, err := es.config()
	if err != nil {
		return nil, err
	}
	return elasticsearch.Open(ctx, cfg, log, reg)
}

// validateStore checks --store's form.
func validateStore(storeURL string, es *esOptions) error {
	switch {
	case strings.HasPrefix(storeURL, "sqlite:") && len(storeURL) > len("sqlite:"):
		return nil
	case storeURL == "elasticsearch":
		if !es.configured() {
			return errors.New("validating --store elasticsearch: give --es-url")
		}
		return nil
	}
	return fmt.Errorf("validating --store %q: want sqlite:PATH or elasticsearch", storeURL)
}
