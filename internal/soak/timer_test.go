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
			<-time.After(20 * time.Millisecond) // a slow server (not a wait for anything): the timer must include its time
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
	if d, w, err := tm.get(srv.URL + "/ok"); err != nil || d <= 0 || w < 0 {
		t.Errorf("GET /ok: %s, waited %s, %v", d, w, err)
	}
	if d, _, err := tm.get(srv.URL + "/slow"); err != nil || d < 20*time.Millisecond {
		t.Errorf("GET /slow: %s, %v; want at least the server's 20ms", d, err)
	}
	if _, _, err := tm.get(srv.URL + "/bad"); err == nil || !strings.Contains(err.Error(), "404") || !strings.Contains(err.Error(), "no such session") {
		t.Errorf("GET /bad: %v, want the 404 and its body", err)
	}
	if _, _, err := tm.get("http://127.0.0.1:1/nothing-listens"); err == nil {
		t.Error("GET on a closed port: no error")
	}
}

func TestParseTimed(t *testing.T) {
	for _, tc := range []struct {
		line      string
		d, waited time.Duration
		err       string
	}{
		{"1500000 0", 1500 * time.Microsecond, 0, ""},
		{"1500000 250000", 1500 * time.Microsecond, 250 * time.Microsecond, ""},
		{"7 -1", 7, unknownWait, ""},
		{"20 3 GET /x: 500 Internal Server Error: boom", 20, 3, "GET /x: 500 Internal Server Error: boom"},
		{"1500000", 0, 0, "want two counts"},
		{"1 -2", 0, 0, "not a count"},
		{"-1 0", 0, 0, "not a count"},
		{"", 0, 0, "reading the query timer's answer"},
		{"abc def", 0, 0, "reading the query timer's answer"},
	} {
		d, w, err := parseTimed(tc.line)
		if d != tc.d || w != tc.waited || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("parseTimed(%q) = %s, %s, %v; want %s, %s, %q", tc.line, d, w, err, tc.d, tc.waited, tc.err)
		}
	}
}
