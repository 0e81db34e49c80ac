package auditlog

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/testutil"
)

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestWebhookContentEncoding: gzip bodies are inflated within MaxBodyBytes;
// any other encoding is refused with 415 and a JSON error, not parsed as
// if it were plain.
func TestWebhookContentEncoding(t *testing.T) {
	const maxBody = 64 << 10
	c := newCollector()
	m := newTestMetrics(t)
	srv := httptest.NewServer(NewWebhookHandler(WebhookConfig{MaxBodyBytes: maxBody}, c.sink, zerolog.Nop(), m))
	defer srv.Close()
	plain := eventList(stageLine("enc", StageResponseStarted))
	// Inflates to 4x the bound from about 1 KiB: a small gzip bomb.
	bomb := gzipped(t, append(eventList(stageLine("bomb", StageResponseStarted)), bytes.Repeat([]byte(" "), 4*maxBody)...))
	for _, tc := range []struct {
		name, encoding string
		body           []byte
		want           int
		reason         string // refusal counted; "" for none
		events         int    // events the sink takes
	}{
		{"absent", "", plain, 200, "", 1},
		{"identity", "identity", plain, 200, "", 1},
		{"gzip", "gzip", gzipped(t, plain), 200, "", 1},
		{"GZIP, padded", " GZIP ", gzipped(t, plain), 200, "", 1},
		{"x-gzip", "x-gzip", gzipped(t, plain), 200, "", 1},
		{"gzip that is not", "gzip", plain, 400, refusedUnreadable, 0},
		{"gzip cut short", "gzip", gzipped(t, plain)[:40], 400, refusedUnreadable, 0},
		{"gzip inflating past the bound", "gzip", bomb, 413, refusedTooLarge, 0},
		{"br", "br", plain, 415, refusedEncoding, 0},
		{"deflate", "deflate", plain, 415, refusedEncoding, 0},
		{"two encodings", "gzip, br", gzipped(t, plain), 415, refusedEncoding, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.body) > maxBody {
				t.Fatalf("test body of %d bytes is over the bound before inflation", len(tc.body))
			}
			before, n := refusals(m), c.count()
			req, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(tc.body))
			if tc.encoding != "" {
				req.Header.Set("Content-Encoding", tc.encoding)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.want)
			}
			if got := c.count() - n; got != tc.events {
				t.Errorf("sink took %d events, want %d", got, tc.events)
			}
			after := refusals(m)
			for _, r := range refusalReasons {
				if want := before[r] + map[bool]float64{true: 1}[r == tc.reason]; after[r] != want {
					t.Errorf("refused{reason=%q} = %v, want %v", r, after[r], want)
				}
			}
			if tc.want < 300 {
				return
			}
			var body struct{ Error string }
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("error Content-Type %q", ct)
			}
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Error == "" {
				t.Errorf("error body not {\"error\": ...}: %v %+v", err, body)
			}
			if tc.want == 415 && resp.Header.Get("Accept-Encoding") != "gzip" {
				t.Errorf("415 without Accept-Encoding: gzip")
			}
		})
	}
}

// TestWebhookServerBounded: the standalone server's timeouts are set, and
// the write bound outlasts the read bound it includes.
func TestWebhookServerBounded(t *testing.T) {
	ws, err := NewWebhookServer(WebhookConfig{Listen: "127.0.0.1:0"}, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := ws.httpServer(newCollector().sink)
	if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.IdleTimeout <= 0 || srv.WriteTimeout <= srv.ReadTimeout {
		t.Fatalf("unbounded: read header %v, read %v, write %v, idle %v",
			srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout)
	}
	if ws.cfg.MaxConns != DefaultWebhookMaxConns || DefaultWebhookMaxConns <= 0 {
		t.Fatalf("MaxConns %d, want the default %d", ws.cfg.MaxConns, DefaultWebhookMaxConns)
	}
}

// TestWebhookServerConnCap: a sender beyond MaxConns waits in the accept
// queue and is served once a connection closes.
func TestWebhookServerConnCap(t *testing.T) {
	ws, err := NewWebhookServer(WebhookConfig{Listen: "127.0.0.1:0", MaxConns: 2}, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr, col := serveWebhook(t, ws)
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	send := func(c net.Conn, id string) {
		body := eventList(stageLine(id, StageResponseStarted))
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}
	status := func(c net.Conn, br *bufio.Reader, within time.Duration) (int, error) {
		c.SetReadDeadline(time.Now().Add(within))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	c1, br1 := dial()
	c2, br2 := dial()
	for i, c := range []struct {
		c  net.Conn
		br *bufio.Reader
	}{{c1, br1}, {c2, br2}} {
		send(c.c, fmt.Sprintf("held-%d", i))
		if code, err := status(c.c, c.br, testutil.EventuallyBound); code != 200 {
			t.Fatalf("connection %d: %d %v", i, code, err)
		}
	}
	c3, br3 := dial() // the kernel completes the handshake; the server does not accept it
	send(c3, "waiting")
	// Only a bound on seeing nothing: a server without the cap answers in
	// well under this.
	if _, err := status(c3, br3, 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("third connection answered past the cap of 2: %v", err)
	}
	if col.has("waiting") {
		t.Fatal("third connection's events taken past the cap of 2")
	}
	c1.Close() // frees a slot
	if code, err := status(c3, br3, testutil.EventuallyBound); code != 200 {
		t.Fatalf("waiting sender after a slot freed: %d %v", code, err)
	}
	if !col.has("waiting") {
		t.Fatal("waiting sender's events not taken")
	}
}

// TestWebhookInflightBudget: concurrent senders share one body budget, so
// many large POSTs at once cannot hold more memory than it; the one past
// it is asked to come back (429), and is accepted once the first is done.
func TestWebhookInflightBudget(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	sink := func(context.Context, []Event) error {
		entered <- struct{}{}
		<-release
		return nil
	}
	m := newTestMetrics(t)
	body := eventList(stageLine("a", StageResponseStarted))
	budget := int64(len(body)) + 1 // one body at a time
	h := NewWebhookHandler(WebhookConfig{MaxBodyBytes: budget, MaxInflightBytes: budget}, sink, zerolog.Nop(), m)
	srv := httptest.NewServer(h)
	defer srv.Close()
	first := make(chan int, 1)
	go func() { first <- post(t, srv.Client(), srv.URL, "", body) }()
	<-entered // the first request holds its body inside the sink
	before := refusals(m)[refusedBusy]
	if got := post(t, srv.Client(), srv.URL, "", body); got != http.StatusTooManyRequests {
		t.Errorf("a second body past the budget: %d, want 429", got)
	}
	if refusals(m)[refusedBusy] != before+1 {
		t.Error("the refusal was not counted as busy")
	}
	close(release)
	if got := <-first; got != http.StatusOK {
		t.Fatalf("first request: %d", got)
	}
	entered = make(chan struct{}, 1) // control: with the budget free again, accepted
	if got := post(t, srv.Client(), srv.URL, "", body); got != http.StatusOK {
		t.Errorf("after the first finished: %d, want 200", got)
	}
}
