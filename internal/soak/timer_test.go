package soak

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

// TestTimer: the timer, this test binary started as a child, GETs what it
// is asked on a real socket, times it, and says why a query failed; the
// timer's answer is read as it writes it.
func TestTimer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			// A slow server (not a wait for anything): 20 ms to its first
			// byte, 20 more to its last; the timer must tell them apart.
			<-time.After(20 * time.Millisecond)
			w.Write([]byte(`{"items":`))
			w.(http.Flusher).Flush()
			<-time.After(20 * time.Millisecond)
			w.Write([]byte(`[]}`))
			return
		}
		if r.URL.Path == "/bad" {
			http.Error(w, "no such session", http.StatusNotFound)
			return
		}
		w.Write([]byte(`{"items":[]}`))
	}))
	defer srv.Close()
	tm, err := startTimer(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer tm.close()
	// The timer reads its threads' waits (a wait of 0 is one read).
	if tm, err := tm.get(srv.URL + "/ok"); err != nil || tm.took <= 0 || tm.waited < 0 || tm.firstByte <= 0 || tm.firstByte > tm.took {
		t.Errorf("GET /ok: %+v, %v", tm, err)
	}
	// The first byte comes after the server's 20 ms; the body's second
	// part 20 ms after it.
	if tm, err := tm.get(srv.URL + "/slow"); err != nil || tm.firstByte < 20*time.Millisecond || tm.took-tm.firstByte < 20*time.Millisecond {
		t.Errorf("GET /slow: %+v, %v; want the first byte after the server's 20ms and the last 20ms after it", tm, err)
	}
	if _, err := tm.get(srv.URL + "/bad"); err == nil || !strings.Contains(err.Error(), "404") || !strings.Contains(err.Error(), "no such session") {
		t.Errorf("GET /bad: %v, want the 404 and its body", err)
	}
	if _, err := tm.get("http://127.0.0.1:1/nothing-listens"); err == nil {
		t.Error("GET on a closed port: no error")
	}
}

func TestParseTimed(t *testing.T) {
	for _, tc := range []struct {
		line string
		want timing
		err  string
	}{
		{"1500000 0 900000", timing{took: 1500 * time.Microsecond, firstByte: 900 * time.Microsecond}, ""},
		{"1500000 250000 1400000", timing{took: 1500 * time.Microsecond, waited: 250 * time.Microsecond, firstByte: 1400 * time.Microsecond}, ""},
		{"7 -1 5", timing{took: 7, waited: unknownWait, firstByte: 5}, ""},
		{"20 3 0 GET /x: 500 Internal Server Error: boom", timing{took: 20, waited: 3}, "GET /x: 500 Internal Server Error: boom"},
		{"1500000 0", timing{}, "want three counts"},
		{"1 -2 1", timing{}, "not a count"},
		{"-1 0 0", timing{}, "not a count"},
		{"1 0 -1", timing{}, "not a count"},
		{"", timing{}, "reading the query timer's answer"},
		{"abc def ghi", timing{}, "reading the query timer's answer"},
	} {
		got, err := parseTimed(tc.line)
		if got != tc.want || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("parseTimed(%q) = %+v, %v; want %+v, %q", tc.line, got, err, tc.want, tc.err)
		}
	}
}
