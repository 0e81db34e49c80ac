package sqlite

import (
	"fmt"
	"testing"
)

// BenchmarkEachLineNewest: a command search reads each run of a pod back
// to front; make soak found that scan a quarter of the agent's query CPU.
func BenchmarkEachLineNewest(b *testing.B) {
	var lines [][]byte
	for i := range 200 {
		lines = append(lines, fmt.Appendf(nil, `{"s":%d,"c":%d,"q":%d,"argv":["/bin/true"],"detail":{"exitCode":0,"flags":["x"]}}`, 1e18+i, i%7, i))
	}
	body := runBody(lines)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		n := 0
		if err := eachLineNewest(body, func([]byte) bool { n++; return true }); err != nil || n != len(lines) {
			b.Fatalf("%d lines, %v", n, err)
		}
	}
}
