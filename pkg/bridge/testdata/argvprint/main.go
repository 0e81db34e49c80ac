// Command argvprint is the program of the bridge's argv faithfulness tests:
// it writes "argv", then each word of its argv (argv[0] included), each
// followed by a NUL, and exits 0. Built static (CGO_ENABLED=0) by the
// tests, it runs in a busybox rootfs as on the host.
package main

import "os"

func main() {
	b := []byte("argv\x00")
	for _, a := range os.Args {
		b = append(b, a...)
		b = append(b, 0)
	}
	if _, err := os.Stdout.Write(b); err != nil {
		os.Exit(1)
	}
}
