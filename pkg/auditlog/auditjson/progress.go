package auditjson

import (
	"fmt"
	"os"
	"time"

	"github.com/mattn/go-isatty"
)

// startProgress draws a status line on a terminal stderr; the returned func
// clears it.
func (p *parser) startProgress(paths []string) func() {
	f, ok := p.errOut.(*os.File)
	if !ok || !(isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())) {
		return func() {}
	}
	var size int64
	for _, path := range paths {
		if st, err := os.Stat(path); err == nil && st.Mode().IsRegular() && path != "-" {
			size += st.Size()
		} else {
			size = -1
			break
		}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(finished)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				fmt.Fprint(f, "\r\033[K")
				return
			case <-tick.C:
				fmt.Fprint(f, "\r\033[K"+progressLine(p.bytes.Load(), size, p.events.Load(), time.Since(start)))
			}
		}
	}()
	return func() { close(done); <-finished }
}

func progressLine(read, size, events int64, elapsed time.Duration) string {
	secs := max(elapsed.Seconds(), 0.001)
	s := fmt.Sprintf("%.1f MB", float64(read)/1e6)
	if size > 0 {
		s += fmt.Sprintf(" / %.1f MB", float64(size)/1e6)
	}
	s += fmt.Sprintf(", %.0f MB/s, %.0f records/s", float64(read)/1e6/secs, float64(events)/secs)
	if size > 0 && read > 0 && read < size {
		eta := time.Duration(float64(size-read) / (float64(read) / secs) * float64(time.Second))
		s += ", ETA " + eta.Round(time.Second).String()
	}
	return s
}
