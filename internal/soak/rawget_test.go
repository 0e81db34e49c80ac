package soak

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// connCounter serves h on loopback and counts the connections it accepted.
func connCounter(t *testing.T, h http.Handler) (*httptest.Server, func() int) {
	t.Helper()
	var mu sync.Mutex
	n := 0
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			n++
			mu.Unlock()
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// testHandler serves the paths the tests ask for; refused counts the
// requests for /refused.
func testHandler(refused *atomic.Int32) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/refused", func(w http.ResponseWriter, _ *http.Request) {
		refused.Add(1)
		http.Error(w, "no", http.StatusForbidden)
	})
	mux.HandleFunc("/small", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") })
	// Larger than net/http's buffer and flushed in pieces: chunked.
	mux.HandleFunc("/big", func(w http.ResponseWriter, _ *http.Request) {
		for range 10 {
			fmt.Fprint(w, strings.Repeat("x", 10000))
			w.(http.Flusher).Flush()
		}
	})
	mux.HandleFunc("/close", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Connection", "close")
		fmt.Fprint(w, "bye")
	})
	return mux
}

// TestBlockingClientKeepsItsConnection: GETs of fixed-length and chunked
// bodies, read whole, share one connection (a body left unread would break
// the next response's parse); a refusal says its status and body; a
// response that closes is followed by a new connection.
func TestBlockingClientKeepsItsConnection(t *testing.T) {
	var refused atomic.Int32
	srv, conns := connCounter(t, testHandler(&refused))
	c := newBlockingClient()
	defer c.close()
	for _, path := range []string{"/small", "/big", "/small", "/big"} {
		start := time.Now()
		first, err := c.get(srv.URL+path, start)
		took := time.Since(start)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if first <= 0 || first > took {
			t.Errorf("%s: first byte at %s of %s", path, first, took)
		}
	}
	if n := conns(); n != 1 {
		t.Errorf("four GETs took %d connections, want one kept alive", n)
	}
	if _, err := c.get(srv.URL+"/refused", time.Now()); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("a refusal: %v", err)
	}
	if n := refused.Load(); n != 1 {
		t.Errorf("a refusal was asked %d times, want once (answered in full, it is not retried)", n)
	}
	if _, err := c.get(srv.URL+"/close", time.Now()); err != nil {
		t.Fatal(err)
	}
	if c.fd >= 0 {
		t.Error("the connection the server closed is still held, to fail the next GET")
	}
	if _, err := c.get(srv.URL+"/small", time.Now()); err != nil {
		t.Fatal(err)
	}
	if n := conns(); n != 2 {
		t.Errorf("after a response that closed: %d connections, want 2", n)
	}
}

// TestBlockingClientDialsAgain: a kept-alive connection the server closed
// while idle is dialed again once, as net/http retries a GET; a server
// that is gone is an error (the control: no retry hides it).
func TestBlockingClientDialsAgain(t *testing.T) {
	srv, conns := connCounter(t, testHandler(new(atomic.Int32)))
	c := newBlockingClient()
	defer c.close()
	if _, err := c.get(srv.URL+"/small", time.Now()); err != nil {
		t.Fatal(err)
	}
	srv.CloseClientConnections()
	if _, err := c.get(srv.URL+"/small", time.Now()); err != nil {
		t.Fatalf("after the server closed the idle connection: %v", err)
	}
	if n := conns(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
	srv.Close()
	if _, err := c.get(srv.URL+"/small", time.Now()); err == nil {
		t.Error("a GET to a server that is gone did not fail")
	}
	for _, bad := range []string{"https://127.0.0.1:1/x", "http://localhost:1/x", "::"} {
		if _, err := c.get(bad, time.Now()); err == nil {
			t.Errorf("GET %q did not fail", bad)
		}
	}
}
