package bridge

import (
	"slices"
	"testing"

	"github.com/execid/correlator/pkg/vocab"
)

const k = vocab.BridgeKey

// TestExecRewrite: every command comes out as [env, KEY=id, ...] with the
// caller's own key in a leading env prefix overwritten or dropped, and
// everything else kept in order.
func TestExecRewrite(t *testing.T) {
	id := fixedID
	mine := k + "=" + id
	for _, c := range []struct {
		name    string
		cmd     []string
		want    []string // after env, KEY=id
		actions []string
	}{
		{"plain", []string{"sh"}, []string{"sh"}, nil},
		{"args kept", []string{"sh", "-c", "echo " + k + "=x"}, []string{"sh", "-c", "echo " + k + "=x"}, nil},
		{"caller env key", []string{"env", k + "=evil", "sh"}, []string{"env", mine, "sh"}, []string{KeyOverwritten}},
		{"absolute env -i", []string{"/usr/bin/env", "-i", k + "=evil", "PATH=/bin", "sh"},
			[]string{"/usr/bin/env", "-i", mine, "PATH=/bin", "sh"}, []string{KeyOverwritten}},
		{"twice and nested", []string{"env", k + "=a", "env", "-", k + "=b", "id"},
			[]string{"env", mine, "env", "-", mine, "id"}, []string{KeyOverwritten, KeyOverwritten}},
		{"empty value", []string{"env", k + "=", "sh"}, []string{"env", mine, "sh"}, []string{KeyOverwritten}},
		{"other key untouched", []string{"env", k + "X=1", "sh"}, []string{"env", k + "X=1", "sh"}, nil},
		{"SPO prefix kept", []string{"env", vocab.SPOKey + "=u", "sh"}, []string{"env", vocab.SPOKey + "=u", "sh"}, nil},
		{"unset", []string{"env", "-u", k, "sh"}, []string{"env", "sh"}, []string{KeyUnsetDropped}},
		{"unset attached", []string{"env", "-u" + k, "sh"}, []string{"env", "sh"}, []string{KeyUnsetDropped}},
		{"unset clustered", []string{"env", "-iu", k, "sh"}, []string{"env", "-i", "sh"}, []string{KeyUnsetDropped}},
		{"unset long", []string{"env", "--unset=" + k, "--unset", k, "sh"}, []string{"env", "sh"}, []string{KeyUnsetDropped, KeyUnsetDropped}},
		{"unset abbreviated", []string{"env", "--uns=" + k, "sh"}, []string{"env", "sh"}, []string{KeyUnsetDropped}},
		{"unset other", []string{"env", "-u", "HOME", "sh"}, []string{"env", "-u", "HOME", "sh"}, nil},
		{"chdir then key", []string{"env", "-C", "/tmp", k + "=x", "sh"}, []string{"env", "-C", "/tmp", mine, "sh"}, []string{KeyOverwritten}},
		{"double dash", []string{"env", "--", k + "=x", "sh"}, []string{"env", "--", mine, "sh"}, []string{KeyOverwritten}},
		{"busybox env", []string{"busybox", "env", k + "=x", "sh"}, []string{"busybox", "env", mine, "sh"}, []string{KeyOverwritten}},
		{"split string", []string{"env", "-S", k + "=x sh"}, []string{"env", "-S", k + "=x sh"}, []string{KeyUnparsed}},
		{"split string clean", []string{"env", "-S", "sh -c id"}, []string{"env", "-S", "sh -c id"}, nil},
		{"unknown option", []string{"env", "--bogus", k + "=x", "sh"}, []string{"env", "--bogus", k + "=x", "sh"}, []string{KeyUnparsed}},
		{"after the command", []string{"sh", "-c", "env " + k + "=x id"}, []string{"sh", "-c", "env " + k + "=x id"}, nil},
		{"env alone", []string{"env"}, []string{"env"}, nil},
		{"dangling -u", []string{"env", "-u"}, []string{"env", "-u"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := execRequest(t, "app", c.cmd...)
			d := testMutator(t, nil).Decide(t.Context(), req)
			if d.Kind != KindExec || d.ID != id || d.Skip != "" || d.Err != nil {
				t.Fatalf("decision %+v", d)
			}
			got := applyExec(t, req, d.Patch)
			if want := append([]string{"env", mine}, c.want...); !slices.Equal(got, want) {
				t.Errorf("command\n got %q\nwant %q", got, want)
			}
			if r := Rewrite(c.cmd, k, id); !slices.Equal(r, got) {
				t.Errorf("Rewrite %q, the patch makes %q", r, got)
			}
			if !slices.Equal(d.CallerKey, c.actions) {
				t.Errorf("caller key actions %v, want %v", d.CallerKey, c.actions)
			}
		})
	}
}

// TestExecPatchSmall: an untouched command is prepended to, not copied,
// so a huge command costs a small patch.
func TestExecPatchSmall(t *testing.T) {
	cmd := make([]string, 100000)
	for i := range cmd {
		cmd[i] = "argument-of-some-length"
	}
	cmd[0] = "sh"
	req := execRequest(t, "app", cmd...)
	d := testMutator(t, nil).Decide(t.Context(), req)
	if len(d.Patch) > 256 {
		t.Errorf("patch for a %d-word command is %d bytes", len(cmd), len(d.Patch))
	}
	if got := applyExec(t, req, d.Patch); len(got) != len(cmd)+2 || got[2] != "sh" {
		t.Errorf("patched command has %d words, starts %q", len(got), got[:3])
	}
}

func TestNewID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id, err := NewID(testMutator(t, nil).rand)
		if err != nil {
			t.Fatal(err)
		}
		seen[id] = true
	}
	if len(seen) != 1 {
		t.Fatalf("fixed randomness gave %d IDs", len(seen))
	}
	m, err := NewMutator(k, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	clear(seen)
	for range 1000 {
		id, err := NewID(m.rand)
		if err != nil {
			t.Fatal(err)
		}
		if len(id) != 36 || id[14] != '4' || !slices.Contains([]byte("89ab"), id[19]) {
			t.Fatalf("%q is not a UUIDv4", id)
		}
		seen[id] = true
	}
	if len(seen) != 1000 {
		t.Errorf("crypto/rand gave %d distinct IDs of 1000", len(seen))
	}
}

func TestValidateKey(t *testing.T) {
	for key, ok := range map[string]bool{
		k: true, vocab.SPOKey: true, "X": true, "A1": true,
		"": false, "_X": false, "X_": false, "1X": false, "A=B": false, "A-B": false, "A.B": false,
		"A23456789012345678901234567890123456789012345678901234567890123":  true,
		"A234567890123456789012345678901234567890123456789012345678901234": false,
	} {
		if err := ValidateKey(key); (err == nil) != ok {
			t.Errorf("ValidateKey(%q) = %v, want ok=%v", key, err, ok)
		}
	}
}
