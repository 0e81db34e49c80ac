package soak

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCopyLogTail(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "agent-1.log")
	if err := os.WriteFile(src, []byte("first line\nsecond line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		max  int64
		want string
	}{{1 << 20, "first line\nsecond line\n"}, {12, "second line\n"}} {
		dst := filepath.Join(dir, "copy.log")
		if err := copyLogTail(src, dst, c.max); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(dst); err != nil || string(b) != c.want {
			t.Errorf("copyLogTail(max %d) = %q, %v; want %q", c.max, b, err, c.want)
		}
	}
	if err := copyLogTail(filepath.Join(dir, "none.log"), filepath.Join(dir, "x"), 1); err == nil {
		t.Error("a missing log was not an error")
	}
}
