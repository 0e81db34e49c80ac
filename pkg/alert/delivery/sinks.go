package delivery

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/authn"
)

// SinkOptions configure a sink beyond its spec.
type SinkOptions struct {
	// TokenFile holds the webhook's bearer token or the Splunk HEC token
	// (first non-comment line). Tokens are never logged.
	TokenFile string
	// CAFile verifies an https or syslog+tls receiver (default: system roots).
	CAFile string
	// ServerName overrides the TLS server name.
	ServerName string
	// TLSConfig, when set, is used as is (CAFile and ServerName ignored).
	TLSConfig *tls.Config
	// Host names this node in syslog headers and HEC events (default: the
	// hostname).
	Host string
	// Version is correlator's version, for CEF headers.
	Version string
}

// NewDeliverer builds the sink a spec names. Elasticsearch is built by
// pkg/store/elasticsearch, so it is an error here.
func NewDeliverer(spec SinkSpec, opts SinkOptions, log zerolog.Logger) (Deliverer, error) {
	log = log.With().Str("component", "alert-sink").Str("sink", spec.String()).Logger()
	if opts.Host == "" {
		opts.Host, _ = os.Hostname()
	}
	switch spec.Kind {
	case KindFile:
		return newFileSink(spec.Path)
	case KindWebhook, KindSplunkHEC:
		return newHTTPSink(spec, opts)
	case KindSyslog:
		return newSyslogSink(spec, opts)
	case KindElasticsearch:
		return nil, errors.New("creating sink: elasticsearch sinks are built by pkg/store/elasticsearch")
	}
	return nil, fmt.Errorf("creating sink: unknown kind %q", spec.Kind)
}

func (o SinkOptions) tlsConfig() (*tls.Config, error) {
	if o.TLSConfig != nil {
		return o.TLSConfig.Clone(), nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.ServerName}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading CA file: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("reading CA file %s: no certificates in it", o.CAFile)
		}
	}
	return c, nil
}

func (o SinkOptions) token() (string, error) {
	if o.TokenFile == "" {
		return "", nil
	}
	return authn.FirstToken(o.TokenFile)
}
