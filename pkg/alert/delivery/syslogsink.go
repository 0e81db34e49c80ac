package delivery

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/execid/correlator/pkg/store"
)

// maxUDPMessage keeps a datagram within what UDP can carry.
const maxUDPMessage = 65000

// syslogSink sends RFC 5424 messages over UDP (one per datagram), TCP with
// octet-counting framing (RFC 6587 3.4.1) or TLS (RFC 5425, same framing).
type syslogSink struct {
	spec   SinkSpec
	host   string
	procID string
	ver    string
	tlsc   *tls.Config

	mu   sync.Mutex
	conn net.Conn
	buf  []byte
}

func newSyslogSink(spec SinkSpec, opts SinkOptions) (*syslogSink, error) {
	s := &syslogSink{spec: spec, host: opts.Host, procID: strconv.Itoa(os.Getpid()), ver: opts.Version}
	if spec.Network == "tls" {
		c, err := opts.tlsConfig()
		if err != nil {
			return nil, fmt.Errorf("creating syslog sink: %w", err)
		}
		if c.ServerName == "" {
			c.ServerName, _, _ = net.SplitHostPort(spec.Addr)
		}
		s.tlsc = c
	}
	return s, nil
}

func (s *syslogSink) Name() string { return s.spec.String() }

func (s *syslogSink) dial(ctx context.Context) (net.Conn, error) {
	switch s.spec.Network {
	case "tls":
		d := tls.Dialer{Config: s.tlsc}
		return d.DialContext(ctx, "tcp", s.spec.Addr)
	default:
		var d net.Dialer
		return d.DialContext(ctx, s.spec.Network, s.spec.Addr)
	}
}

func (s *syslogSink) Deliver(ctx context.Context, alerts []store.Alert) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil && s.spec.Network != "udp" && peerClosed(s.conn) {
		s.conn.Close() // a write now would vanish into a dead connection
		s.conn = nil
	}
	if s.conn == nil {
		c, err := s.dial(ctx)
		if err != nil {
			return fmt.Errorf("connecting to %s: %w", s.Name(), err)
		}
		s.conn = c
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = s.conn.SetWriteDeadline(dl)
	} else {
		_ = s.conn.SetWriteDeadline(time.Time{})
	}
	err := s.write(alerts)
	if err != nil {
		s.conn.Close()
		s.conn = nil
		return fmt.Errorf("sending batch to %s: %w", s.Name(), err)
	}
	return nil
}

func (s *syslogSink) write(alerts []store.Alert) error {
	if s.spec.Network == "udp" {
		for i := range alerts {
			msg := formatSyslog(&alerts[i], s.spec.Facility, s.host, s.procID, s.ver, s.spec.Format, maxUDPMessage)
			if _, err := s.conn.Write(msg); err != nil {
				return err
			}
		}
		return nil
	}
	b := s.buf[:0]
	for i := range alerts {
		msg := formatSyslog(&alerts[i], s.spec.Facility, s.host, s.procID, s.ver, s.spec.Format, 0)
		b = strconv.AppendInt(b, int64(len(msg)), 10)
		b = append(b, ' ')
		b = append(b, msg...)
	}
	s.buf = b
	_, err := s.conn.Write(b)
	return err
}

func (s *syslogSink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return nil
	}
	err := s.conn.Close()
	s.conn = nil
	return err
}

// peerClosed reports whether the receiver has closed the stream (syslog
// receivers never send, so any readable byte or EOF means trouble).
func peerClosed(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
	var b [1]byte
	_, err := c.Read(b[:])
	_ = c.SetReadDeadline(time.Time{})
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return true
}
