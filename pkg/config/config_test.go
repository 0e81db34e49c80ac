package config

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

type settings struct {
	listen   string
	logs     []string
	insecure bool
	ttl      time.Duration
}

func flags(s *settings) *pflag.FlagSet {
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	fs.StringVar(&s.listen, "listen", "127.0.0.1:8080", "")
	fs.StringArrayVar(&s.logs, "audit-log", nil, "")
	fs.BoolVar(&s.insecure, "insecure-no-auth", false, "")
	fs.DurationVar(&s.ttl, "pending-ttl", 5*time.Minute, "")
	return fs
}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestApplyPrecedence(t *testing.T) {
	file := []byte("listen: 0.0.0.0:9000\naudit-log: [/a.log, /b.log]\npending-ttl: 2m\n")
	cases := []struct {
		name   string
		args   []string
		env    map[string]string
		listen string
		logs   string
		ttl    time.Duration
	}{
		{name: "file over default", listen: "0.0.0.0:9000", logs: "/a.log,/b.log", ttl: 2 * time.Minute},
		{name: "env over file", env: map[string]string{"CORRELATOR_LISTEN": ":1", "CORRELATOR_AUDIT_LOG": "/c.log,/d.log"},
			listen: ":1", logs: "/c.log,/d.log", ttl: 2 * time.Minute},
		{name: "flag over env", args: []string{"--listen", ":2", "--audit-log", "/e.log"}, env: map[string]string{"CORRELATOR_LISTEN": ":1"},
			listen: ":2", logs: "/e.log", ttl: 2 * time.Minute},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var s settings
			fs := flags(&s)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if err := Apply(fs, file, env(tc.env)); err != nil {
				t.Fatal(err)
			}
			if s.listen != tc.listen || strings.Join(s.logs, ",") != tc.logs || s.ttl != tc.ttl {
				t.Errorf("got listen=%q logs=%q ttl=%s", s.listen, strings.Join(s.logs, ","), s.ttl)
			}
		})
	}
}

func TestApplyErrors(t *testing.T) {
	cases := []struct {
		name, file string
		env        map[string]string
		want       string
	}{
		{name: "unknown key", file: "lisen: x\n", want: "unknown keys lisen"},
		{name: "bad duration in file", file: "pending-ttl: soon\n", want: "config file key pending-ttl"},
		{name: "bad bool in env", env: map[string]string{"CORRELATOR_INSECURE_NO_AUTH": "maybe"}, want: "CORRELATOR_INSECURE_NO_AUTH"},
		{name: "not yaml", file: "listen: [unclosed\n", want: "parsing config file"},
		{name: "nested map", file: "listen: {a: b}\n", want: "want a scalar"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var s settings
			err := Apply(flags(&s), []byte(tc.file), env(tc.env))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func FuzzApply(f *testing.F) {
	for _, s := range []string{"", "listen: x\n", "audit-log: [a, b]\n", "pending-ttl: 1s\ninsecure-no-auth: true\n", "- a\n- b\n", "{"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var s settings
		_ = Apply(flags(&s), b, env(nil)) // must not panic
	})
}
