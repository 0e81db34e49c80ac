package elasticsearch

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/elastic/go-elasticsearch/v8"
)

// Config connects to a cluster and shapes the store. Zero fields take
// DefaultConfig's values.
type Config struct {
	// URLs are the cluster's node addresses.
	URLs []string
	// APIKey is the base64 "id:key" API key (the caller reads it from
	// --es-api-key-file); it overrides Username and Password.
	APIKey             string
	Username, Password string
	// CACert is a PEM file of CAs to trust instead of the system's.
	CACert string
	// IndexPrefix names the indices: <prefix>-sessions-<period>,
	// -processes-, -audit-, -alerts- and <prefix>-meta.
	IndexPrefix string
	// IndexPeriod is how much time one index holds (a day). The first
	// store to open a prefix records it in <prefix>-meta, and every later
	// one uses the recorded period, whatever its own setting.
	IndexPeriod time.Duration
	// Shards and Replicas set the indices' shards and replicas; 0 leaves
	// the cluster's defaults (Elastic Cloud Serverless refuses both).
	Shards, Replicas int
	// Retention is an alert sink's ILM delete age, used only where the
	// cluster has ILM (0 keeps alerts); a store's indices age out through
	// its retention passes.
	Retention time.Duration
	// RetentionMode says whether this process takes part in the cluster's
	// retention: RetentionLease (the default: agents take turns through a
	// lease) or RetentionOff (another role does it).
	RetentionMode string
	// LeaseTTL bounds how long a holder that stopped renewing keeps the
	// retention lease.
	LeaseTTL time.Duration
	// Holder names this process in the lease (default: host name and a
	// random suffix).
	Holder string
	// Refresh is the bulk refresh mode: "false" (the default: writes are
	// searchable within the index refresh interval, about a second),
	// "wait_for" (Write returns once they are searchable) or "true".
	Refresh string
	// FlushBytes is the bulk request size.
	FlushBytes int
	// RetryInitial and RetryMaxElapsed bound the backoff that retries
	// rejected (429) bulk items and failed bulk requests.
	RetryInitial, RetryMaxElapsed time.Duration
	// DefaultLimit, MaxLimit and SessionProcessLimit are the SQLite store's.
	DefaultLimit, MaxLimit, SessionProcessLimit int
	// Transport replaces the HTTP transport (tests).
	Transport http.RoundTripper
}

// Retention modes.
const (
	RetentionLease = "lease"
	RetentionOff   = "off"
)

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		IndexPrefix:         "correlator",
		IndexPeriod:         defaultPeriod,
		RetentionMode:       RetentionLease,
		LeaseTTL:            30 * time.Minute,
		Refresh:             "false",
		FlushBytes:          5 << 20,
		RetryInitial:        100 * time.Millisecond,
		RetryMaxElapsed:     time.Minute,
		DefaultLimit:        100,
		MaxLimit:            1000,
		SessionProcessLimit: 10000,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.IndexPrefix = cmp.Or(c.IndexPrefix, d.IndexPrefix)
	c.IndexPeriod = cmp.Or(c.IndexPeriod, d.IndexPeriod)
	c.RetentionMode = cmp.Or(c.RetentionMode, d.RetentionMode)
	c.LeaseTTL = cmp.Or(c.LeaseTTL, d.LeaseTTL)
	c.Refresh = cmp.Or(c.Refresh, d.Refresh)
	c.FlushBytes = cmp.Or(c.FlushBytes, d.FlushBytes)
	c.RetryInitial = cmp.Or(c.RetryInitial, d.RetryInitial)
	c.RetryMaxElapsed = cmp.Or(c.RetryMaxElapsed, d.RetryMaxElapsed)
	c.DefaultLimit = cmp.Or(c.DefaultLimit, d.DefaultLimit)
	c.MaxLimit = cmp.Or(c.MaxLimit, d.MaxLimit)
	c.SessionProcessLimit = cmp.Or(c.SessionProcessLimit, d.SessionProcessLimit)
	return c
}

// Validate reports settings that cannot work. It never echoes secrets.
func (c Config) Validate() error {
	var errs []error
	if len(c.URLs) == 0 {
		errs = append(errs, errors.New("no Elasticsearch URL"))
	}
	for _, u := range c.URLs {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			errs = append(errs, fmt.Errorf("elasticsearch URL %q: need http(s)://host[:port]", redactURL(u)))
		} else if p.User != nil {
			errs = append(errs, fmt.Errorf("elasticsearch URL %q: put credentials in the API key or username flags, not the URL", redactURL(u)))
		}
	}
	if !validPrefix(c.IndexPrefix) {
		errs = append(errs, fmt.Errorf("index prefix %q is not a valid lowercase index name", c.IndexPrefix))
	}
	if err := validPeriod(c.IndexPeriod); err != nil {
		errs = append(errs, err)
	}
	if c.RetentionMode != RetentionLease && c.RetentionMode != RetentionOff {
		errs = append(errs, fmt.Errorf("retention mode %q: want %s or %s", c.RetentionMode, RetentionLease, RetentionOff))
	}
	if c.Shards < 0 || c.Replicas < 0 || c.LeaseTTL < time.Minute {
		errs = append(errs, fmt.Errorf("shards %d and replicas %d must not be negative, lease TTL %s at least a minute",
			c.Shards, c.Replicas, c.LeaseTTL))
	}
	if !slices.Contains([]string{"false", "true", "wait_for"}, c.Refresh) {
		errs = append(errs, fmt.Errorf("refresh %q: want false, true or wait_for", c.Refresh))
	}
	if c.Retention < 0 || c.FlushBytes < 1 || c.RetryInitial < 0 || c.RetryMaxElapsed < 0 ||
		c.DefaultLimit < 1 || c.MaxLimit < c.DefaultLimit || c.SessionProcessLimit < 1 {
		errs = append(errs, fmt.Errorf("sizes and durations must be positive, with max limit %d >= default limit %d",
			c.MaxLimit, c.DefaultLimit))
	}
	return errors.Join(errs...)
}

func redactURL(s string) string {
	p, err := url.Parse(s)
	if err != nil {
		return "<unparsable>"
	}
	if p.User != nil {
		p.User = url.User("REDACTED")
	}
	return p.String()
}

// conn is a client plus the few REST helpers the store needs.
type conn struct {
	es  *elasticsearch.Client
	cfg Config
}

func dial(cfg Config) (*conn, error) {
	ec := elasticsearch.Config{
		Addresses:     cfg.URLs,
		APIKey:        cfg.APIKey,
		Username:      cfg.Username,
		Password:      cfg.Password,
		Transport:     cfg.Transport,
		RetryOnStatus: []int{429, 502, 503, 504},
		MaxRetries:    3,
		RetryBackoff: func(attempt int) time.Duration {
			b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(cfg.RetryInitial))
			var d time.Duration
			for range attempt {
				d = b.NextBackOff()
			}
			return d
		},
	}
	if cfg.CACert != "" {
		pem, err := os.ReadFile(cfg.CACert)
		if err != nil {
			return nil, fmt.Errorf("reading CA file: %w", err)
		}
		if cfg.Transport != nil {
			return nil, errors.New("configuring TLS: a CA file and a custom transport exclude each other")
		}
		ec.CACert = pem
	}
	es, err := elasticsearch.NewClient(ec)
	if err != nil {
		return nil, fmt.Errorf("creating Elasticsearch client: %w", err)
	}
	return &conn{es: es, cfg: cfg}, nil
}

// apiError is an error answer from the cluster.
type apiError struct {
	Status int
	Type   string
	Reason string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("elasticsearch answered %d %s: %s", e.Status, e.Type, e.Reason)
}

func readError(status int, body []byte) error {
	var eb struct {
		Error struct {
			Type   string `json:"type"`
			Reason string `json:"reason"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &eb) != nil || eb.Error.Type == "" {
		msg := string(body)
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return &apiError{Status: status, Type: "unknown", Reason: msg}
	}
	return &apiError{Status: status, Type: eb.Error.Type, Reason: eb.Error.Reason}
}

// do sends one request and decodes a 2xx JSON answer into out (if not nil).
func (c *conn) do(ctx context.Context, method, path string, q url.Values, body any, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(mustJSON(body))
	}
	u := path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return fmt.Errorf("building request: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := c.es.Perform(req)
	if err != nil {
		return fmt.Errorf("sending %s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return fmt.Errorf("reading answer to %s %s: %w", method, path, err)
	}
	if res.StatusCode > 299 {
		return readError(res.StatusCode, raw)
	}
	if out == nil {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // date_nanos sort values overflow float64
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("decoding answer to %s %s: %w", method, path, err)
	}
	return nil
}

// put PUTs body at path; an error of type okType counts as success.
func (c *conn) put(ctx context.Context, path string, body any, okType string) error {
	err := c.do(ctx, http.MethodPut, path, nil, body, nil)
	var ae *apiError
	if okType != "" && errors.As(err, &ae) && ae.Type == okType {
		return nil
	}
	return err
}
