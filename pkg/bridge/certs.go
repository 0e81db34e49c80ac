package bridge

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// CertReloader serves a certificate and key from files and re-reads them
// on a ticker, so a rotated Secret (cert-manager, or a helm upgrade) is
// served without a restart. Content, not mtime, decides: a Secret volume
// swaps a symlink, and copies can keep their times. A pair that does not
// load (a half-written update) keeps the old certificate until the next
// tick.
type CertReloader struct {
	certFile, keyFile string
	log               zerolog.Logger
	m                 *Metrics

	cur             atomic.Pointer[tls.Certificate]
	mu              sync.Mutex // serializes reloads; guards the bytes below
	certPEM, keyPEM []byte
}

// NewCertReloader loads the pair; a pair that does not load is an error.
func NewCertReloader(certFile, keyFile string, log zerolog.Logger, m *Metrics) (*CertReloader, error) {
	r := &CertReloader{certFile: certFile, keyFile: keyFile, log: log, m: m}
	if _, err := r.Reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// GetCertificate is the tls.Config callback.
func (r *CertReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.cur.Load(), nil
}

// Reload re-reads the files and reports whether the served pair changed.
func (r *CertReloader) Reload() (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := os.ReadFile(r.certFile)
	if err != nil {
		return false, fmt.Errorf("reading certificate %s: %w", r.certFile, err)
	}
	k, err := os.ReadFile(r.keyFile)
	if err != nil {
		return false, fmt.Errorf("reading key %s: %w", r.keyFile, err)
	}
	if r.cur.Load() != nil && bytes.Equal(c, r.certPEM) && bytes.Equal(k, r.keyPEM) {
		return false, nil
	}
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		return false, fmt.Errorf("loading certificate %s and key %s: %w", r.certFile, r.keyFile, err)
	}
	if pair.Leaf == nil {
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return false, fmt.Errorf("parsing certificate %s: %w", r.certFile, err)
		}
	}
	r.certPEM, r.keyPEM = c, k
	r.cur.Store(&pair)
	r.log.Info().Str("cert", r.certFile).Str("serial", pair.Leaf.SerialNumber.String()).
		Time("not_after", pair.Leaf.NotAfter).Msg("serving certificate loaded")
	return true, nil
}

// Run reloads every interval until ctx ends.
func (r *CertReloader) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, err := r.Reload()
		switch {
		case err != nil:
			r.m.reloaded(false)
			r.log.Warn().Err(err).Msg("serving certificate not reloaded; keeping the old one")
		case changed:
			r.m.reloaded(true)
		}
	}
}
