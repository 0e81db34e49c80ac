package node

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/alert"
	"github.com/execid/correlator/pkg/alert/delivery"
	"github.com/execid/correlator/pkg/store/elasticsearch"
)

// AlertConfig is the rules and sinks.
type AlertConfig struct {
	RulesFile   string
	Sinks       []string
	SpoolDir    string
	SpoolBytes  int64
	AllowGroups []string
	// TokenFile and CAFile are the HTTP and TLS sinks' credentials.
	TokenFile string
	CAFile    string
}

// rules loads the rules file, or the shipped rules.
func (o *AlertConfig) rules() ([]alert.Rule, error) {
	if o.RulesFile == "" {
		return alert.DefaultRulesWith(alert.DefaultOptions{ShellAllowGroups: o.AllowGroups})
	}
	b, err := os.ReadFile(o.RulesFile)
	if err != nil {
		return nil, fmt.Errorf("reading --rules: %w", err)
	}
	rules, err := alert.ParseRules(b)
	if err != nil {
		return nil, fmt.Errorf("parsing --rules %s: %w", o.RulesFile, err)
	}
	return rules, nil
}

// validate parses what can be checked before anything starts.
func (o *AlertConfig) validate(es *elasticsearch.Connection) error {
	var errs []error
	if _, err := o.rules(); err != nil {
		errs = append(errs, err)
	}
	for i, s := range o.Sinks {
		spec, err := delivery.ParseSinkSpec(s)
		if err != nil {
			// The spec may hold credentials: name it by position.
			errs = append(errs, fmt.Errorf("validating --alert-sink number %d: %w", i+1, err))
			continue
		}
		if spec.Kind == "elasticsearch" && spec.URL == "" && !es.Configured() {
			errs = append(errs, errors.New("validating --alert-sink elasticsearch: give its URL or --es-url"))
		}
	}
	return errors.Join(errs...)
}

// build makes the rule engine and, with sinks, the dispatcher.
func (o *AlertConfig) build(ctx context.Context, es *elasticsearch.Connection, version string, log zerolog.Logger, reg prometheus.Registerer) (*alert.Engine, *delivery.Dispatcher, error) {
	rules, err := o.rules()
	if err != nil {
		return nil, nil, err
	}
	eng, err := alert.NewEngine(rules, log, reg)
	if err != nil {
		return nil, nil, err
	}
	if len(o.Sinks) == 0 {
		return eng, nil, nil
	}
	var sinks []delivery.Deliverer
	closeAll := func() {
		for _, s := range sinks {
			s.Close()
		}
	}
	for _, s := range o.Sinks {
		d, err := o.sink(ctx, s, es, version, log, reg)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		sinks = append(sinks, d)
	}
	disp, err := delivery.NewDispatcher(delivery.DispatcherConfig{SpoolDir: o.SpoolDir, SpoolMaxBytes: o.SpoolBytes}, sinks, log, reg)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return eng, disp, nil
}

// sink makes one --alert-sink's deliverer.
func (o *AlertConfig) sink(ctx context.Context, s string, es *elasticsearch.Connection, version string, log zerolog.Logger, reg prometheus.Registerer) (delivery.Deliverer, error) {
	spec, err := delivery.ParseSinkSpec(s)
	if err != nil {
		return nil, err
	}
	var d delivery.Deliverer
	if spec.Kind == "elasticsearch" {
		var cfg elasticsearch.Config
		if cfg, err = es.Resolve(); err != nil && spec.URL == "" {
			return nil, err
		}
		if spec.URL != "" {
			cfg.URLs = []string{spec.URL}
		}
		d, err = elasticsearch.NewAlertSink(ctx, cfg, log, reg)
	} else {
		d, err = delivery.NewDeliverer(spec, delivery.SinkOptions{TokenFile: o.TokenFile, CAFile: o.CAFile, Version: version}, log)
	}
	if err != nil {
		return nil, fmt.Errorf("creating alert sink %s: %w", spec, err)
	}
	return d, nil
}
