package testutil

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// RandomUUID returns a random RFC 4122 version 4 UUID in canonical form,
// the shape of a Kubernetes audit ID or pod UID.
func RandomUUID() string {
	var b [16]byte
	mustRead(b[:])
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// RandomContainerID returns 64 random lowercase hex characters, the shape
// of a containerd, CRI-O or docker container ID.
func RandomContainerID() string {
	var b [32]byte
	mustRead(b[:])
	return hex.EncodeToString(b[:])
}

// IsContainerID reports whether s has the shape of a 64-hex container ID.
func IsContainerID(s string) bool { return len(s) == 64 && isLowerHex(s) }

// IsUUID reports whether s is a lowercase canonical UUID.
func IsUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !isLowerHex(string(c)) {
				return false
			}
		}
	}
	return true
}

func isLowerHex(s string) bool {
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func mustRead(b []byte) {
	// crypto/rand.Read never returns an error on Linux (Go 1.24+); keep the
	// check so a broken entropy source cannot yield silent zero IDs.
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("reading random bytes: %v", err))
	}
}
