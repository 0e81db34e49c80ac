package soak

import (
	"fmt"
	"io"
	"os"
)

// The agents' logs say what an agent did when a figure went wrong (the
// twenty-ninth hour's agent burned ten times its CPU per exec from its
// 45th minute, and its log went with the test's directory). So the soak
// copies them beside its figures, each up to maxLogCopy from its end.

// maxLogCopy bounds each agent log copied to SOAK_OUT.
const maxLogCopy = 8 << 20

// copyLogTail copies the last max bytes of src to dst.
func copyLogTail(src, dst string, max int64) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("copying agent log %s: %w", src, err)
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return fmt.Errorf("copying agent log %s: %w", src, err)
	}
	if fi.Size() > max {
		if _, err := in.Seek(fi.Size()-max, io.SeekStart); err != nil {
			return fmt.Errorf("copying agent log %s: %w", src, err)
		}
	}
	out, err := os.Create(dst)
	if err != nil {
		return fmt.Errorf("copying agent log %s: %w", src, err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copying agent log %s: %w", src, err)
	}
	return out.Close()
}
