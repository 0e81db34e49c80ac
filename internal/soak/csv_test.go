package soak

import (
	"bytes"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

func fullSample() Sample {
	return Sample{
		At:            time.Date(2025, 3, 1, 12, 30, 45, 123456789, time.FixedZone("CET", 3600)),
		Elapsed:       3*time.Hour + 2*time.Second + 5,
		Agent:         2,
		Phase:         `disk-full, "quoted"`,
		RSSBytes:      48 << 20,
		AnonBytes:     30 << 20,
		HeapBytes:     21<<20 + 7,
		HeapKeptBytes: 25<<20 + 3,
		NextGCBytes:   24 << 20,
		Goroutines:    64,
		OpenFiles:     31,
		ExecRate:      52.125,
		CPUPerExecUS:  41.3,
		StoreBytes:    210 << 20,
		WALBytes:      4 << 20,
		RingDrops:     1,
		Evictions:     12,
		StoreDropped:  math.MaxInt64,
		Queries:       40,
		QueryP99MS:    0.1 + 0.2, // not a short decimal
		QueryFails:    3,
		Acked:         41000,
		Verified:      40990,
		Lost:          -1,
		NodeBusy:      0.4375,
		NodeSteal:     1.0 / 3,
	}
}

// sameSamples compares the times by instant, the rest exactly.
func sameSamples(t *testing.T, got, want []Sample) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d samples, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if !g.At.Equal(w.At) {
			t.Errorf("sample %d: At %v, want %v", i, g.At, w.At)
		}
		g.At, w.At = time.Time{}, time.Time{}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("sample %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
}

func TestCSVRoundTrip(t *testing.T) {
	full := fullSample()
	noAgent := Sample{At: full.At.Add(time.Second), Elapsed: -time.Duration(math.MaxInt64) - 1, Phase: "restarting"}
	cases := []struct {
		name    string
		samples []Sample
	}{
		{"none", nil},
		{"zero", []Sample{{}}},
		{"full", []Sample{full}},
		{"several", []Sample{full, noAgent, {Elapsed: time.Duration(math.MaxInt64), Phase: "line\nbreak"}}},
		{"local time", []Sample{{At: time.Now(), Elapsed: 1500 * time.Millisecond, Phase: " lead"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteCSV(&buf, c.samples); err != nil {
				t.Fatal(err)
			}
			got, err := ReadCSV(&buf)
			if err != nil {
				t.Fatalf("%v\n%s", err, buf.String())
			}
			sameSamples(t, got, c.samples)
		})
	}
}

func TestWriteCSVFormat(t *testing.T) {
	var buf bytes.Buffer
	s := fullSample()
	if err := WriteCSV(&buf, []Sample{s}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	wantHeader := "at,elapsed_s,agent,phase,rss_bytes,anon_bytes,heap_bytes,heap_kept_bytes,next_gc_bytes,goroutines,open_files,exec_rate,cpu_per_exec_us," +
		"store_bytes,wal_bytes,ring_drops,evictions,store_dropped,queries,query_p99_ms,query_fails,acked,verified,lost,node_busy,node_steal"
	if len(lines) != 2 || lines[0] != wantHeader {
		t.Fatalf("got\n%s", buf.String())
	}
	if !strings.HasPrefix(lines[1], `2025-03-01T11:30:45.123456789Z,10802.000000005,2,"disk-full, ""quoted""",50331648,`) ||
		!strings.HasSuffix(lines[1], ",0.4375,0.3333333333333333") {
		t.Errorf("row %q", lines[1])
	}
}

func TestSecondsCSV(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		text string
	}{
		{0, "0"},
		{1500 * time.Millisecond, "1.5"},
		{-time.Nanosecond, "-0.000000001"},
		{time.Duration(math.MaxInt64), "9223372036.854775807"},
		{time.Duration(math.MinInt64), "-9223372036.854775808"},
	} {
		if got := formatSeconds(c.d); got != c.text {
			t.Errorf("formatSeconds(%d) = %q, want %q", c.d, got, c.text)
		}
		if got, err := parseSeconds(c.text); err != nil || got != c.d {
			t.Errorf("parseSeconds(%q) = %d, %v, want %d", c.text, got, err, c.d)
		}
	}
	for _, bad := range []string{"", "-", ".5", "1.", "1e3", "+1", "1.0000000001", "9223372036.854775808",
		"-9223372036.854775809", "99999999999", " 1", "1h"} {
		if d, err := parseSeconds(bad); err == nil {
			t.Errorf("parseSeconds(%q) = %d, want an error", bad, d)
		}
	}
}

func TestReadCSVErrors(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteCSV(&buf, []Sample{fullSample()}); err != nil {
		t.Fatal(err)
	}
	good := strings.Split(buf.String(), "\n")
	header, row := good[0], good[1]
	for _, c := range []struct {
		name, in, want string
	}{
		{"empty", "", "line 1: no header"},
		{"wrong header", strings.Replace(header, "rss_bytes", "rss", 1) + "\n", `line 1, column 26: "rss", want "rss_bytes"`},
		{"short header", "at,elapsed_s\n", "wrong number of fields"},
		{"bad int", header + "\n" + strings.Replace(row, ",50331648,", ",5x,", 1) + "\n", "line 2, column 74 (rss_bytes)"},
		{"bad time", header + "\n" + "x" + row[1:] + "\n", "line 2, column 1 (at)"},
		{"bad seconds", header + "\n" + strings.Replace(row, ",10802.000000005,", ",1e4,", 1) + "\n", "line 2, column 32 (elapsed_s)"},
		{"short row", header + "\n1,2\n", "record on line 2: wrong number of fields"},
		{"bare quote", header + "\n" + `a"b` + row[1:] + "\n", "line 2, column 2"},
		{"carriage return", header + "\n" + strings.Replace(row, "disk-full", "disk\r-full", 1), "line 2, column 50 (phase): carriage return"},
		{"year out of range", header + "\n" + "0000-01-01T00:00:00+01:00" + row[len("2025-03-01T11:30:45.123456789Z"):], "year -1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ReadCSV(strings.NewReader(c.in))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// roundTrip writes rows, checks the text begins with prefix, and reads
// them back whole.
func roundTrip[T any](t *testing.T, rows []T, write func(io.Writer, []T) error, read func(io.Reader) ([]T, error), prefix string) {
	t.Helper()
	var buf bytes.Buffer
	if err := write(&buf, rows); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(buf.String(), prefix) {
		t.Errorf("got\n%s", buf.String())
	}
	got, err := read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rows) {
		t.Errorf("got %+v\nwant %+v", got, rows)
	}
}

func TestEventsCSVRoundTrip(t *testing.T) {
	start := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	roundTrip(t, []Event{
		{At: start.Add(time.Hour), Elapsed: time.Hour, What: "upgrade"},
		{At: start.Add(2*time.Hour + 1), Elapsed: 2*time.Hour + 1, What: "kill -9"},
		{At: start.Add(3 * time.Hour), Elapsed: 3 * time.Hour, What: "disk full, then \"freed\""},
	}, WriteEventsCSV, ReadEventsCSV, "at,elapsed_s,what\n2025-03-01T13:00:00Z,3600,upgrade\n")
	if _, err := ReadEventsCSV(strings.NewReader("at,elapsed_s,what\nx,1,upgrade\n")); err == nil ||
		!strings.Contains(err.Error(), "line 2, column 1 (at)") {
		t.Errorf("error %v, want one naming line 2, column 1", err)
	}
}

func TestQueriesCSVRoundTrip(t *testing.T) {
	start := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	roundTrip(t, []Query{
		{At: start.Add(2 * time.Second), Elapsed: 2 * time.Second, Kind: "who", Took: 1234567 * time.Nanosecond, FirstByte: time.Millisecond, TimerWaited: 250 * time.Microsecond, AgentWaited: 3 * time.Millisecond, AgentRan: 5 * time.Millisecond},
		{At: start.Add(time.Hour + 1), Elapsed: time.Hour + 1, Kind: "processes by command", Took: 18 * time.Millisecond, FirstByte: 9 * time.Millisecond, TimerWaited: unknownWait, AgentWaited: unknownWait, AgentRan: unknownWait},
	}, WriteQueriesCSV, ReadQueriesCSV, "at,elapsed_s,kind,took_s,first_byte_s,timer_waited_s,agent_waited_s,agent_ran_s\n2025-03-01T12:00:02Z,2,who,0.001234567,0.001,0.00025,0.003,0.005\n")
}

// FuzzReadCSV: any input is read or refused with an error, never a
// panic; what is read writes back and reads again to the same bytes.
func FuzzReadCSV(f *testing.F) {
	var buf bytes.Buffer
	if err := WriteCSV(&buf, []Sample{fullSample(), {Agent: 1}}); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		if s, err := ReadCSV(bytes.NewReader(b)); err == nil {
			var one, two bytes.Buffer
			if err := WriteCSV(&one, s); err != nil {
				t.Fatalf("read %+v, which does not write: %v", s, err)
			}
			s2, err := ReadCSV(bytes.NewReader(one.Bytes()))
			if err != nil {
				t.Fatalf("wrote %q, which does not read: %v", one.Bytes(), err)
			}
			if err := WriteCSV(&two, s2); err != nil || !bytes.Equal(one.Bytes(), two.Bytes()) {
				t.Fatalf("not stable: %q then %q (%v)", one.Bytes(), two.Bytes(), err)
			}
		}
		rereads(t, b, WriteEventsCSV, ReadEventsCSV)
		rereads(t, b, WriteQueriesCSV, ReadQueriesCSV)
	})
}

// rereads: what read takes from b writes, and what it writes reads again.
func rereads[T any](t *testing.T, b []byte, write func(io.Writer, []T) error, read func(io.Reader) ([]T, error)) {
	t.Helper()
	rows, err := read(bytes.NewReader(b))
	if err != nil {
		return
	}
	var one bytes.Buffer
	if err := write(&one, rows); err != nil {
		t.Fatalf("read %+v, which does not write: %v", rows, err)
	}
	if _, err := read(bytes.NewReader(one.Bytes())); err != nil {
		t.Fatalf("wrote %q, which does not read: %v", one.Bytes(), err)
	}
}
