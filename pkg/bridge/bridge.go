// Package bridge is correlator's exec bridge: a mutating admission webhook
// that gives every `kubectl exec` an ID the kernel can see, until clusters
// run KEP-6035 (kube-apiserver injecting KUBERNETES_EXEC_AUDIT_ID).
//
// For a pods/exec CONNECT it rewrites the command to
//
//	env <Key>=<fresh id> <command...>
//
// so the root the container runtime execs has argv[0] "env" and argv[1]
// "<Key>=<id>", and it returns the audit annotation {<Key>: <id>}, which the
// apiserver stores in the exec's audit event as "<webhook name>/<Key>"
// (vocab.BridgeWebhookName). The node agent captures the ID from the root's
// argv and joins it with the audit record through that annotation, as it
// does with the Security Profiles Operator's SPO_EXEC_REQUEST_UID.
//
// A caller cannot choose the ID: "<Key>=" assignments in a leading env
// prefix of the caller's command are overwritten with the bridge's ID and
// "-u <Key>" is dropped, and the ID the join trusts is the root's, which is
// always the bridge's own env. The decision (Mutator.Decide) is pure apart
// from the optional pod lookup; the HTTP handler, the TLS server and the
// certificate reloader around it are thin.
package bridge

import (
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/execid/correlator/pkg/vocab"
)

// Pod annotations the bridge reads (through the optional pod lookup).
const (
	// SkipAnnotation on a pod lists the containers whose execs are left
	// alone, comma-separated, or "*" for all of them: containers without an
	// `env` binary (distroless), where the rewritten command could not run.
	SkipAnnotation = "correlator.execid.io/bridge-skip"
	// SkipAll is the SkipAnnotation value that skips every container.
	SkipAll = "*"
)

// Defaults.
const (
	DefaultListen        = ":8443"
	DefaultMaxBodyBytes  = 8 << 20
	DefaultCertReload    = 30 * time.Second
	DefaultPodCacheTTL   = 30 * time.Second
	DefaultPodCacheSize  = 4096
	DefaultLookupTimeout = time.Second
	// MutatePath is where the apiserver posts AdmissionReviews.
	MutatePath = "/mutate"
)

// ErrInvalidKey is returned for a key the apiserver or env would refuse.
var ErrInvalidKey = errors.New("invalid bridge key")

// keyRe: an environment name that is also the name part of a qualified
// annotation key (the apiserver prefixes the webhook name), at most 63
// characters, starting and ending with an alphanumeric.
var keyRe = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_]{0,61}[A-Za-z0-9])?$`)

// Config is the bridge's configuration.
type Config struct {
	// Listen is the webhook's HTTPS address.
	Listen string
	// CertFile and KeyFile are the serving certificate and key (PEM),
	// re-read every CertReload so a rotated Secret is picked up.
	CertFile, KeyFile string
	CertReload        time.Duration
	// MetricsListen, when set, serves /metrics over plain HTTP there;
	// empty serves it on the webhook's own listener.
	MetricsListen string
	// Key is the environment key the command is prefixed with.
	Key string
	// MaxBodyBytes bounds an AdmissionReview; a larger one is answered 413
	// and the webhook's failurePolicy decides.
	MaxBodyBytes int64
	// PodLookup reads each exec's pod for SkipAnnotation and Windows pods
	// (needs get on pods); PodCacheTTL and PodCacheSize bound its cache
	// and LookupTimeout each lookup.
	PodLookup     bool
	PodCacheTTL   time.Duration
	PodCacheSize  int
	LookupTimeout time.Duration
	// Kubeconfig is the pod lookup's apiserver client; empty is the
	// pod's service account, in-cluster.
	Kubeconfig string
}

// Default returns the defaults.
func Default() Config {
	return Config{
		Listen:        DefaultListen,
		CertReload:    DefaultCertReload,
		Key:           vocab.BridgeKey,
		MaxBodyBytes:  DefaultMaxBodyBytes,
		PodCacheTTL:   DefaultPodCacheTTL,
		PodCacheSize:  DefaultPodCacheSize,
		LookupTimeout: DefaultLookupTimeout,
	}
}

// ValidateKey checks that key can be both an environment name and an
// audit annotation key.
func ValidateKey(key string) error {
	if !keyRe.MatchString(key) {
		return fmt.Errorf("validating key %q: %w: want letters, digits and _, starting with a letter, ending with a letter or digit, at most 63", key, ErrInvalidKey)
	}
	return nil
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if err := ValidateKey(c.Key); err != nil {
		return err
	}
	switch {
	case c.Listen == "":
		return errors.New("validating listen address: empty")
	case c.CertFile == "" || c.KeyFile == "":
		return errors.New("validating TLS: the apiserver calls webhooks over HTTPS only; give a certificate and a key")
	case c.CertReload <= 0:
		return fmt.Errorf("validating certificate reload interval %s: must be positive", c.CertReload)
	case c.MaxBodyBytes < 1024:
		return fmt.Errorf("validating max body bytes %d: at least 1024", c.MaxBodyBytes)
	case c.PodLookup && (c.PodCacheTTL <= 0 || c.PodCacheSize <= 0 || c.LookupTimeout <= 0):
		return errors.New("validating pod lookup: cache TTL, cache size and lookup timeout must be positive")
	}
	return nil
}
