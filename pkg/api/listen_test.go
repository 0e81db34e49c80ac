package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/execid/correlator/internal/testutil"
)

// serve starts a Server on a loopback port and returns its address.
func serve(t *testing.T, h http.Handler, cfg ServerConfig) (*Server, string, <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(h, cfg)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testutil.EventuallyBound)
		defer cancel()
		s.Shutdown(ctx)
	})
	return s, ln.Addr().String(), done
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip sends a keep-alive GET on c and reads the response.
func roundTrip(t *testing.T, c net.Conn, br *bufio.Reader, path string) int {
	t.Helper()
	code, err := tryGet(c, br, path)
	if err != nil {
		t.Fatal(err)
	}
	return code
}

// tryGet sends a keep-alive GET on c and reads the response; the read deadline
// only stops a hang.
func tryGet(c net.Conn, br *bufio.Reader, path string) (int, error) {
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return 0, err
	}
	c.SetReadDeadline(time.Now().Add(testutil.EventuallyBound))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, fmt.Errorf("reading response to %s: %w", path, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// waitClosed waits for the server to close c; the read deadline only stops
// a hang.
func waitClosed(t *testing.T, c net.Conn, br *bufio.Reader, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(testutil.EventuallyBound))
	_, err := br.ReadByte()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: still open after %s, want closed by the server", what, testutil.EventuallyBound)
	}
	if err == nil {
		t.Fatalf("%s: read data, want the server to close it", what)
	}
}

func okHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
}

func TestIdleConnectionsClosed(t *testing.T) {
	_, addr, _ := serve(t, okHandler(), ServerConfig{ReadHeaderTimeout: 100 * time.Millisecond,
		IdleTimeout: 100 * time.Millisecond})

	silent := dial(t, addr) // connects, never sends a byte
	waitClosed(t, silent, bufio.NewReader(silent), "silent connection")

	partial := dial(t, addr) // starts a request, never finishes its headers
	io.WriteString(partial, "GET / HTTP/1.1\r\nHost: x\r\n")
	waitClosed(t, partial, bufio.NewReader(partial), "half-sent headers")

	// One request, then idle on keep-alive. A busy machine may stall this
	// client past the 100ms header timeout between dial and write, so the
	// server rightly closes it: retry on a fresh connection until served.
	var idle net.Conn
	var br *bufio.Reader
	testutil.EventuallyNil(t, func() error {
		idle = dial(t, addr)
		br = bufio.NewReader(idle)
		code, err := tryGet(idle, br, "/")
		if err == nil && code != 200 {
			t.Fatalf("request: %d", code)
		}
		return err
	})
	waitClosed(t, idle, br, "idle keep-alive connection")
}

func TestDefaultServerConfigBounded(t *testing.T) {
	d := DefaultServerConfig()
	if d.ReadHeaderTimeout <= 0 || d.ReadTimeout <= 0 || d.IdleTimeout <= 0 || d.MaxConns <= 0 {
		t.Fatalf("unbounded default: %+v", d)
	}
	if d.WriteTimeout <= d.ReadTimeout {
		t.Errorf("WriteTimeout %v must exceed ReadTimeout %v: it runs while the webhook body is read",
			d.WriteTimeout, d.ReadTimeout)
	}
	s := NewServer(okHandler(), ServerConfig{Addr: ":1", IdleTimeout: time.Second})
	if s.srv.IdleTimeout != time.Second || s.srv.ReadTimeout != d.ReadTimeout || s.cfg.MaxConns != d.MaxConns ||
		s.srv.Addr != ":1" {
		t.Errorf("zero fields not defaulted: %+v", s.cfg)
	}
}

// TestConnectionCap: a client beyond MaxConns waits in the accept queue
// and is served once a slot frees; it does not get a descriptor earlier.
func TestConnectionCap(t *testing.T) {
	var served atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { served.Add(1); w.Write([]byte("ok\n")) })
	s, addr, done := serve(t, h, ServerConfig{MaxConns: 2, IdleTimeout: time.Minute})

	c1, c2 := dial(t, addr), dial(t, addr)
	br1, br2 := bufio.NewReader(c1), bufio.NewReader(c2)
	roundTrip(t, c1, br1, "/")
	roundTrip(t, c2, br2, "/")

	c3 := dial(t, addr) // the kernel completes the handshake; the server does not accept it
	io.WriteString(c3, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	// Negative check: nothing answers within 300ms while at the cap (a slow
	// machine only makes it pass more easily); the positive control is the
	// answer below once a slot frees.
	c3.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	br3 := bufio.NewReader(c3)
	if _, err := br3.ReadByte(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("third connection answered past the cap of 2: %v", err)
	}
	if n := served.Load(); n != 2 {
		t.Fatalf("served %d requests, want 2 while at the cap", n)
	}

	c1.Close() // frees a slot: the waiting client is accepted and served
	c3.SetReadDeadline(time.Now().Add(testutil.EventuallyBound))
	resp, err := http.ReadResponse(br3, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("waiting client after a slot freed: %v %v", resp, err)
	}
	resp.Body.Close()

	// Shutdown returns even while Accept waits for a slot.
	ctx, cancel := context.WithTimeout(context.Background(), testutil.EventuallyBound)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown at the cap: %v", err)
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve returned %v, want ErrServerClosed", err)
	}
}

// TestLimitListenerManyClients: many clients against a small cap never
// hold more than cap accepted connections at once, and all are served.
func TestLimitListenerManyClients(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := newLimitListener(raw, 3)
	defer ln.Close()
	var open, peak atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := open.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			go func() { // echo one byte, then hang up
				b := make([]byte, 1)
				io.ReadFull(c, b)
				c.Write(b)
				open.Add(-1)
				c.Close()
			}()
		}
	}()
	const clients = 40
	errs := make(chan error, clients)
	for range clients {
		go func() {
			c, err := net.Dial("tcp", raw.Addr().String())
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(testutil.EventuallyBound)) // only stops a hang
			if _, err := c.Write([]byte{'x'}); err != nil {
				errs <- err
				return
			}
			_, err = io.ReadFull(c, make([]byte, 1))
			errs <- err
		}()
	}
	for range clients {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if p := peak.Load(); p > 3 || p < 1 {
		t.Errorf("peak open connections %d, want 1..3", p)
	}
	// Slots come back as the server side closes; at most the one a pending
	// Accept holds stays taken.
	testutil.Eventually(t, "every slot but a pending Accept's comes back", func() bool { return ln.open() <= 1 })
}
