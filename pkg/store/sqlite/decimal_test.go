package sqlite

import (
	"math"
	"strconv"
	"testing"
)

func TestParseDecimal(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"1772366400000000000", 1772366400000000000, true},
		{"-5", -5, true},
		{"007", 7, true},
		{strconv.FormatInt(math.MaxInt64, 10), math.MaxInt64, true},
		{strconv.FormatInt(math.MinInt64, 10), math.MinInt64, true},
		{"9223372036854775808", 0, false},  // MaxInt64+1
		{"-9223372036854775809", 0, false}, // MinInt64-1
		{"18446744073709551615", 0, false}, // 20 digits
		{"99999999999999999999", 0, false},
		{"", 0, false},
		{"-", 0, false},
		{"+5", 0, false}, // AppendInt never writes a plus
		{"1_000", 0, false},
		{"12a", 0, false},
		{" 1", 0, false},
		{"--1", 0, false},
	} {
		got, ok := parseDecimal([]byte(c.in))
		if got != c.want || ok != c.ok {
			t.Errorf("parseDecimal(%q) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// FuzzParseDecimal: what parseDecimal reads, strconv.ParseInt reads
// alike, and it reads all that AppendInt writes.
func FuzzParseDecimal(f *testing.F) {
	for _, s := range []string{"0", "-1", "9223372036854775807", "-9223372036854775808", "9223372036854775808", "+1", "1e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := parseDecimal([]byte(s))
		want, err := strconv.ParseInt(s, 10, 64)
		if ok && (err != nil || got != want) || !ok && err == nil && s == strconv.FormatInt(want, 10) {
			t.Fatalf("parseDecimal(%q) = %d, %v; strconv says %d, %v", s, got, ok, want, err)
		}
	})
}
