package node

import (
	"testing"
	"time"
)

// TestLateWindowRetention: the joiner holds nothing for a late record
// longer than the store keeps what it would change; a window within the
// retention is kept as given, 0 (none) too.
func TestLateWindowRetention(t *testing.T) {
	for _, tc := range []struct{ late, retention, want time.Duration }{
		{time.Hour, 30 * 24 * time.Hour, time.Hour},
		{time.Hour, 10 * time.Minute, 10 * time.Minute},
		{0, 10 * time.Minute, 0},
		{time.Hour, time.Hour, time.Hour},
		{time.Hour, 0, time.Hour}, // no retention (tests): nothing to clamp to
	} {
		if got := LateWindow(tc.late, tc.retention); got != tc.want {
			t.Errorf("LateWindow(%s, %s) = %s, want %s", tc.late, tc.retention, got, tc.want)
		}
	}
	// RetentionInterval, which the soak's retention leans on: a twelfth,
	// within 5s and an hour.
	for _, tc := range []struct{ window, want time.Duration }{
		{time.Minute, 5 * time.Second}, {10 * time.Minute, 50 * time.Second}, {30 * 24 * time.Hour, time.Hour},
	} {
		if got := RetentionInterval(tc.window); got != tc.want {
			t.Errorf("RetentionInterval(%s) = %s, want %s", tc.window, got, tc.want)
		}
	}
}
