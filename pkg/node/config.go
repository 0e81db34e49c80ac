package node

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/execid/correlator/pkg/agent"
	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/store/elasticsearch"
)

// Config is the node agent's settings, as `correlator run`'s flags set
// them (the flags name the fields in its errors).
type Config struct {
	PprofListen    string
	Listen         string
	Store          string // sqlite:PATH or elasticsearch
	TokenFile      string
	TLSCert        string
	TLSKey         string
	InsecureNoAuth bool
	AuthKubernetes bool
	PodMap         string
	CRISocket      string
	Retention      time.Duration
	NoCapture      bool
	Capture        capture.Config
	Agent          agent.Config
	Audit          auditlog.SourcesConfig
	ES             elasticsearch.Connection
	Alerts         AlertConfig
	Lookup         string // elasticsearch or nothing
	LookupPattern  string
	// Version is the build's, sent by the HTTP alert sinks.
	Version string
}

// Validate checks the settings up front, with errors that say what to do.
func (c *Config) Validate() error {
	var errs []error
	errs = append(errs, validateStore(c.Store, &c.ES), c.Alerts.validate(&c.ES))
	switch c.Lookup {
	case "":
	case "elasticsearch":
		if !c.ES.Configured() {
			errs = append(errs, errors.New("validating --audit-lookup elasticsearch: give --es-url"))
		}
	default:
		errs = append(errs, fmt.Errorf("validating --audit-lookup %q: want elasticsearch or nothing", c.Lookup))
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("validating --listen %q: %w", c.Listen, err))
	}
	switch {
	case c.InsecureNoAuth && !api.IsLoopback(c.Listen):
		errs = append(errs, fmt.Errorf("validating --insecure-no-auth: only allowed when --listen is a loopback address, not %q", c.Listen))
	case !c.InsecureNoAuth && c.TokenFile == "" && !c.AuthKubernetes:
		errs = append(errs, errors.New("validating authentication: the API requires --token-file or --auth-kubernetes (or --insecure-no-auth on loopback)"))
	}
	errs = append(errs, c.Audit.ValidateWebhook())
	errs = append(errs, validatePprof(c.PprofListen))
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, errors.New("validating TLS: give both --tls-cert and --tls-key, or neither"))
	}
	if c.Retention < time.Minute {
		errs = append(errs, fmt.Errorf("validating --retention %s: must be at least 1m", c.Retention))
	}
	if !c.NoCapture {
		errs = append(errs, c.Capture.Validate())
	}
	return errors.Join(errs...)
}

// RetentionInterval is how often retention runs for a window: a twelfth
// of it, so the store holds at most 13/12 of the window, between 5s (a
// soak's windows of minutes) and an hour (the default month).
func RetentionInterval(window time.Duration) time.Duration {
	return min(max(window/12, 5*time.Second), time.Hour)
}

// LateWindow is the late window the joiner holds processes for: at most
// the retention, since a late record could change only rows the store
// still keeps (one it had deleted would come back until the next pass).
// A soak's ten minutes of retention thus holds ten minutes, not an hour.
func LateWindow(late, retention time.Duration) time.Duration {
	if retention > 0 && late > retention {
		return retention
	}
	return late
}
