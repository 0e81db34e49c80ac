package bridge

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	admissionv1 "k8s.io/api/admission/v1"
)

// FuzzExecRewrite: for any command (words split on NUL) env would run as
// given (Rewritable; any other is skipped unpatched), the patch applies,
// the result is [env, KEY=id, ...], the rest is the caller's command with
// only its own key's words changed or dropped, and sanitizing it again
// changes nothing.
func FuzzExecRewrite(f *testing.F) {
	for _, s := range []string{"sh", "env\x00" + k + "=x\x00sh", "env\x00-iu\x00" + k + "\x00sh",
		"env\x00-S\x00" + k + "=x sh", "/usr/bin/env\x00--uns=" + k + "\x00env\x00" + k + "=\x00id",
		"/opt/a=b/run\x00one\x00two", "-\x00sh"} {
		f.Add(s)
	}
	m := testMutator(f, nil)
	f.Fuzz(func(t *testing.T, s string) {
		cmd := strings.Split(s, "\x00")
		// JSON coerces invalid UTF-8, in the apiserver as here: compare
		// with the command as the webhook receives it.
		if err := json.Unmarshal(mustJSON(t, cmd), &cmd); err != nil {
			t.Fatal(err)
		}
		req := execRequest(t, "app", cmd...)
		d := m.Decide(t.Context(), req)
		if !Rewritable(cmd) {
			if d.Skip != SkipUnrewritable || d.Patch != nil || d.Err != nil {
				t.Fatalf("unrewritable %q: decision %+v", cmd, d)
			}
			return
		}
		if d.Patch == nil || d.Err != nil {
			t.Fatalf("decision %+v", d)
		}
		got := applyExec(t, req, d.Patch)
		mine := k + "=" + fixedID
		if len(got) < 2 || got[0] != "env" || got[1] != mine {
			t.Fatalf("command %q does not start with env %s", got, mine)
		}
		rest := got[2:]
		if len(rest) > len(cmd) {
			t.Fatalf("rest %q longer than %q", rest, cmd)
		}
		// rest is cmd with the caller's key words made ours, unset words
		// dropped, and clusters shortened ("-iu" to "-i"), nothing else.
		matches := func(c, w string) bool {
			return c == w || (w == mine && strings.HasPrefix(c, k+"=")) ||
				(strings.HasPrefix(w, "-") && strings.HasPrefix(c, w))
		}
		j := 0
		for _, w := range rest {
			for j < len(cmd) && !matches(cmd[j], w) {
				if !strings.HasPrefix(cmd[j], "-") && cmd[j] != k {
					t.Fatalf("%q dropped from %q giving %q", cmd[j], cmd, rest)
				}
				j++
			}
			if j == len(cmd) {
				t.Fatalf("word %q of %q not from %q", w, rest, cmd)
			}
			j++
		}
		again, _ := sanitize(rest, k, fixedID)
		if !slices.Equal(again, rest) {
			t.Fatalf("not a fixpoint:\n%q\n%q", rest, again)
		}
	})
}

// FuzzArgvFaithful: TestArgvFaithfulHost's property for any command, run
// through every env on the host: the first word is firstWords()[prog], or
// with prog past that list the first word of args; then args split on
// NUL, made valid UTF-8 as the apiserver passes words on. Inputs with a word containing "/" or naming a busybox or toybox
// applet are skipped: env would run a host program (busybox and toybox
// run their own applets first), not the printer.
func FuzzArgvFaithful(f *testing.F) {
	printer := buildPrinter(f)
	roots := map[string]string{}
	for name, envBin := range hostEnvs(f) {
		roots[name] = hostRoot(f, printer, envBin)
	}
	applets := appletNames()
	f.Add(uint8(0), "one\x00two")
	f.Add(uint8(5), "")
	f.Add(uint8(255), "a=b\x00run\x00-i")
	f.Fuzz(func(t *testing.T, prog uint8, args string) {
		var words []string
		if args != "" {
			words = strings.Split(args, "\x00")
		}
		for i, w := range words {
			words[i] = strings.ToValidUTF8(w, "\uFFFD") // as the apiserver passes it on
			if strings.Contains(w, "/") || applets[words[i]] {
				t.Skip("a word env might run outside the printer")
			}
		}
		for name, root := range roots {
			cmd := words
			if firsts := firstWords(root); int(prog) < len(firsts) {
				cmd = append([]string{firsts[prog]}, words...)
			}
			if len(cmd) > 0 {
				checkArgv(t, name, hostRun(root), cmd, &argvCounts{})
			}
		}
	})
}

// FuzzReview: whatever the body, the handler answers a well-formed
// AdmissionReview that allows the request.
func FuzzReview(f *testing.F) {
	f.Add(review(f, execRequest(f, "app", "sh")))
	f.Add(review(f, ephemeralRequest(f, debugPod("a"), debugPod())))
	f.Add([]byte(`{"request":{"uid":"x","resource":{"resource":"pods"},"subResource":"exec","operation":"CONNECT","object":null}}`))
	f.Add([]byte(`{`))
	h := NewHandler(testMutator(f, nil), DefaultMaxBodyBytes, zerolog.Nop(), nil)
	f.Fuzz(func(t *testing.T, body []byte) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, MutatePath, bytes.NewReader(body)))
		if w.Code != http.StatusOK {
			t.Fatalf("HTTP %d", w.Code)
		}
		var out admissionv1.AdmissionReview
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
			t.Fatal(err)
		}
		if out.Kind != "AdmissionReview" || out.APIVersion != "admission.k8s.io/v1" || out.Response == nil || !out.Response.Allowed {
			t.Fatalf("response %s", w.Body.Bytes())
		}
		if (out.Response.Patch == nil) != (out.Response.AuditAnnotations == nil) {
			t.Fatalf("patch and annotation disagree: %s", w.Body.Bytes())
		}
	})
}
