//go:build !linux || !(amd64 || arm64) || libc.membrk || libc.memgrind

package sqlite

// trimCMemory does nothing where libc's allocator is not the one
// cmemory_linux.go reaches.
func trimCMemory() error { return nil }
