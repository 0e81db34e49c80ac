package capture

import (
	"encoding/binary"
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mod     func(c *Config)
		wantErr string // a substring of the error; empty: valid
	}{
		{name: "defaults", mod: func(*Config) {}},
		{name: "one key", mod: func(c *Config) { c.Keys = []string{fxAuditKey} }},
		{name: "four keys", mod: func(c *Config) { c.Keys = []string{"A", "B", "C", "D"} }},
		{name: "no keys", mod: func(c *Config) { c.Keys = nil }, wantErr: "keys"},
		{name: "five keys", mod: func(c *Config) { c.Keys = []string{"A", "B", "C", "D", "E"} }, wantErr: "keys"},
		{name: "empty key", mod: func(c *Config) { c.Keys = []string{""} }, wantErr: "length"},
		{name: "key with '='", mod: func(c *Config) { c.Keys = []string{"A=B"} }, wantErr: "'='"},
		{name: "key ending with '='", mod: func(c *Config) { c.Keys = []string{fxAuditKey + "="} }, wantErr: "'='"},
		{name: "key with a tab", mod: func(c *Config) { c.Keys = []string{"A\tB"} }, wantErr: "printable"},
		{name: "key with a NUL", mod: func(c *Config) { c.Keys = []string{"A\x00"} }, wantErr: "printable"},
		{name: "key with DEL", mod: func(c *Config) { c.Keys = []string{"A\x7f"} }, wantErr: "printable"},
		{name: "key with non-ASCII", mod: func(c *Config) { c.Keys = []string{"CLÉ"} }, wantErr: "printable"},
		{name: "relaxed key", mod: func(c *Config) { c.Keys = []string{"Logging:LogLevel:Default", "a b~"} }},
		{name: "duplicate key", mod: func(c *Config) { c.Keys = []string{fxAuditKey, fxSPOKey, fxAuditKey} }, wantErr: "twice"},
		{name: "64-char key", mod: func(c *Config) { c.Keys = []string{strings.Repeat("K", 64)} }},
		{name: "65-char key", mod: func(c *Config) { c.Keys = []string{strings.Repeat("K", 65)} }, wantErr: "length"},
		{name: "bad second key", mod: func(c *Config) { c.Keys = []string{fxAuditKey, "X=Y"} }, wantErr: "'='"},
		{name: "budget 4 KiB", mod: func(c *Config) { c.ScanBudget = 4 << 10 }},
		{name: "budget below 4 KiB", mod: func(c *Config) { c.ScanBudget = 4<<10 - 1 }, wantErr: "scan budget"},
		{name: "budget zero", mod: func(c *Config) { c.ScanBudget = 0 }, wantErr: "scan budget"},
		{name: "budget 6 MiB", mod: func(c *Config) { c.ScanBudget = 6 << 20 }},
		{name: "budget above 6 MiB", mod: func(c *Config) { c.ScanBudget = 6<<20 + 1 }, wantErr: "scan budget"},
		{name: "ring 64 KiB", mod: func(c *Config) { c.RingBufferBytes = 64 << 10 }},
		{name: "ring 1 GiB", mod: func(c *Config) { c.RingBufferBytes = 1 << 30 }},
		{name: "ring not a power of two", mod: func(c *Config) { c.RingBufferBytes = 3 << 20 }, wantErr: "ring buffer"},
		{name: "ring power of two below 64 KiB", mod: func(c *Config) { c.RingBufferBytes = 32 << 10 }, wantErr: "ring buffer"},
		{name: "ring zero", mod: func(c *Config) { c.RingBufferBytes = 0 }, wantErr: "ring buffer"},
		{name: "lineage 64", mod: func(c *Config) { c.LineageEntries = 64 }},
		{name: "lineage 63", mod: func(c *Config) { c.LineageEntries = 63 }, wantErr: "lineage"},
		{name: "no pinning", mod: func(c *Config) { c.PinPath = "" }},
		{name: "relative pin path", mod: func(c *Config) { c.PinPath = "sys/fs/bpf/correlator" }, wantErr: "pin path"},
		{name: "dot pin path", mod: func(c *Config) { c.PinPath = "./correlator" }, wantErr: "pin path"},
		{name: "host proc root", mod: func(c *Config) { c.ProcRoot = "/host/proc" }},
		{name: "empty proc root", mod: func(c *Config) { c.ProcRoot = "" }, wantErr: "proc root"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.mod(&c)
			err := c.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tc.wantErr != "" && err == nil:
				t.Errorf("Validate() = nil, want an error about %q", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Errorf("Validate() = %v, want an error about %q", err, tc.wantErr)
			}
		})
	}
}

func TestConfigDefault(t *testing.T) {
	c := Default()
	if len(c.Keys) == 0 || c.Keys[0] != fxAuditKey {
		t.Errorf("Default().Keys = %q, want %q first", c.Keys, fxAuditKey)
	}
	// Default must hand out a fresh slice: callers append to it.
	c.Keys[0] = "CHANGED"
	if Default().Keys[0] != fxAuditKey {
		t.Errorf("Default() shares its Keys slice between calls")
	}
}

func TestKeyPattern(t *testing.T) {
	le := func(s string) uint64 {
		var b [8]byte
		copy(b[:], s)
		return binary.LittleEndian.Uint64(b[:])
	}
	tests := []struct {
		key        string
		wantPrefix uint64
		wantMask   uint64
	}{
		{fxAuditKey, le("KUBERNET"), ^uint64(0)},
		{"ID", 'I' | 'D'<<8 | '='<<16, 0xffffff},
		{"A", 'A' | '='<<8, 0xffff},
		{"ABCDEFG", le("ABCDEFG="), ^uint64(0)},
		{"ABCDEFGH", le("ABCDEFGH"), ^uint64(0)},
	}
	for _, tc := range tests {
		t.Run(tc.key, func(t *testing.T) {
			prefix, mask := keyPattern(tc.key)
			if prefix != tc.wantPrefix || mask != tc.wantMask {
				t.Errorf("keyPattern(%q) = (%#016x, %#016x), want (%#016x, %#016x)", tc.key, prefix, mask, tc.wantPrefix, tc.wantMask)
			}
			// What the BPF scan does with them: one 8-byte load at the
			// start of a variable, masked, compared.
			for _, tv := range []struct {
				env   string
				match bool
			}{
				{tc.key + "=value", true},
				{tc.key + "=", true},
				{tc.key + "X=value", len(tc.key) >= 8}, // the tail compare must reject it
				{"X" + tc.key + "=value", false},       // shifted
				{strings.ToLower(tc.key) + "=value", false},
			} {
				if got := le(tv.env)&mask == prefix; got != tv.match {
					t.Errorf("masked load of %q matches = %v, want %v", tv.env, got, tv.match)
				}
			}
		})
	}
}
