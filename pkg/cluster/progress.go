package cluster

import (
	"fmt"
	"io"
	"os"

	"github.com/mattn/go-isatty"
)

// TerminalProgress is a Config.Progress that counts the nodes answered on
// w, or nil when w is not a terminal (a pipe or a file gets no
// carriage-return noise).
func TerminalProgress(w io.Writer) func(done, total int) {
	f, ok := w.(*os.File)
	if !ok || !(isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())) {
		return nil
	}
	return func(done, total int) {
		if done < total {
			fmt.Fprintf(w, "\rquerying nodes %d/%d", done, total)
		} else {
			fmt.Fprint(w, "\r\033[K")
		}
	}
}
