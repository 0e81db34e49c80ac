package alert

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/execid/correlator/pkg/vocab"
)

// Severities, lowest first.
var severities = []string{"info", "low", "medium", "high", "critical"}

// Rule scopes: what an alert is about, which decides its dedupe ID.
const (
	// ScopeAny (the default): the process when the input has one, else
	// the session.
	ScopeAny = ""
	// ScopeSession: one alert per session, whichever process showed it.
	ScopeSession = "session"
	// ScopeProcess: only inputs with a process.
	ScopeProcess = "process"
)

// Rule is one alerting rule. See rules/README.md for the YAML format.
type Rule struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Severity    string `json:"severity"`
	// Message is a template with $(field) references (Expand semantics).
	Message string `json:"message"`
	Scope   string `json:"scope,omitempty"`
	Match   Match  `json:"match"`

	compiled bool
	waits    bool // WaitsForAttribution
}

// Match is a rule's condition: every field that is set must match. A field
// about a session or process that the input lacks does not match.
type Match struct {
	// User matches the authenticated or the impersonated username.
	User *Patterns `json:"user,omitempty"`
	// Group matches any group of the authenticated or impersonated user.
	Group     *Patterns `json:"group,omitempty"`
	Namespace *Patterns `json:"namespace,omitempty"`
	Pod       *Patterns `json:"pod,omitempty"`
	Container *Patterns `json:"container,omitempty"`
	// Labels are pod labels; every listed label must exist and match.
	Labels map[string]*Patterns `json:"labels,omitempty"`
	// Command matches the space-joined session command or process argv.
	Command *Patterns `json:"command,omitempty"`
	// Argv matches the space-joined process argv alone: unlike command,
	// it never reads the session, so a rule on it need not wait for the
	// process's attribution (WaitsForAttribution).
	Argv     *Patterns `json:"argv,omitempty"`
	Filename *Patterns `json:"filename,omitempty"`
	// EnvName matches names the caller passed into the exec environment:
	// the session's --env list, and NAME=value words after a leading
	// `env` in the session command.
	EnvName     *Patterns           `json:"envName,omitempty"`
	Attribution []vocab.Attribution `json:"attribution,omitempty"`
	Flags       *FlagMatch          `json:"flags,omitempty"`
	TTY         *bool               `json:"tty,omitempty"`
	Stdin       *bool               `json:"stdin,omitempty"`
	// Claimant matches whether the process carried a session's ID without
	// being attributed to it (AuditID empty, ClaimedAuditID set).
	Claimant *bool `json:"claimant,omitempty"`
	// ClaimedUser matches the authenticated or impersonated username of
	// the session a claimant claimed (Input.Claimed); it never matches the
	// process's own session, and an unknown claimed session does not match.
	ClaimedUser *Patterns `json:"claimedUser,omitempty"`
	// OtherUser matches the authenticated or impersonated usernames of the
	// other requests that used the session's audit ID (Session.Conflicts),
	// less the session's own: a reused Audit-ID header by another user.
	OtherUser *Patterns `json:"otherUser,omitempty"`
	// Subresource matches the session's request: exec, attach, or
	// ephemeralcontainers (kubectl debug).
	Subresource *Patterns `json:"subresource,omitempty"`
	// AnyOf matches when at least one of its conditions does.
	AnyOf []Match `json:"anyOf,omitempty"`
	// Not matches when its condition does not.
	Not *Match `json:"not,omitempty"`
}

// FlagMatch matches the union of the session's and the process's flags.
type FlagMatch struct {
	AnyOf []string `json:"anyOf,omitempty"`
	AllOf []string `json:"allOf,omitempty"`
}

// RuleError is one rule that did not load.
type RuleError struct {
	Index int
	Name  string
	Err   error
}

func (e *RuleError) Error() string {
	if e.Name == "" {
		return fmt.Sprintf("rule %d: %v", e.Index, e.Err)
	}
	return fmt.Sprintf("rule %d (%s): %v", e.Index, e.Name, e.Err)
}

func (e *RuleError) Unwrap() error { return e.Err }

// ParseRules reads a YAML rule file ({rules: [...]}). It returns the rules
// that are valid and, joined, a *RuleError for each that is not, so that
// one bad rule does not disable the others. A file that is not YAML
// returns no rules.
func ParseRules(data []byte) ([]Rule, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("parsing rules: %w", err)
	}
	var f struct {
		Rules []json.RawMessage `json:"rules"`
	}
	if err := strictJSON(js, &f); err != nil {
		return nil, fmt.Errorf("parsing rules: %w", err)
	}
	var good []Rule
	var errs []error
	seen := map[string]bool{}
	for i, raw := range f.Rules {
		var r Rule
		err := strictJSON(raw, &r)
		if err != nil {
			var named struct{ Name string }
			_ = json.Unmarshal(raw, &named) // best effort, to name the rule in the error
			r.Name = named.Name
		}
		if err == nil {
			err = r.compile()
		}
		if err == nil && seen[r.Name] {
			err = errors.New("duplicate rule name")
		}
		if err != nil {
			errs = append(errs, &RuleError{Index: i, Name: r.Name, Err: err})
			continue
		}
		seen[r.Name] = true
		good = append(good, r)
	}
	return good, errors.Join(errs...)
}

// strictJSON decodes one JSON value, refusing unknown fields.
func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}

// compile validates the rule and builds its matchers.
func (r *Rule) compile() error {
	switch {
	case r.Name == "":
		return errors.New("no name")
	case strings.ContainsFunc(r.Name, func(c rune) bool { return c <= ' ' || c > '~' }):
		return errors.New("name must be printable ASCII without spaces")
	case !slices.Contains(severities, r.Severity):
		return fmt.Errorf("severity %q is not one of %s", r.Severity, strings.Join(severities, ", "))
	case r.Message == "":
		return errors.New("no message")
	case r.Scope != ScopeAny && r.Scope != ScopeSession && r.Scope != ScopeProcess:
		return fmt.Errorf("scope %q is not session or process", r.Scope)
	}
	for _, name := range references(r.Message) {
		if !knownField(name) {
			return fmt.Errorf("message refers to unknown field $(%s)", name)
		}
	}
	if r.Match.empty() {
		return errors.New("match is empty (a rule must match on something)")
	}
	if err := r.Match.compile("match"); err != nil {
		return err
	}
	r.waits = r.readsAttribution()
	r.compiled = true
	return nil
}

func (m *Match) empty() bool {
	return m.User == nil && m.Group == nil && m.Namespace == nil && m.Pod == nil &&
		m.Container == nil && len(m.Labels) == 0 && m.Command == nil && m.Argv == nil && m.Filename == nil &&
		m.EnvName == nil && len(m.Attribution) == 0 && m.Flags == nil && m.TTY == nil &&
		m.Stdin == nil && m.Claimant == nil && m.ClaimedUser == nil && m.OtherUser == nil && m.Subresource == nil && len(m.AnyOf) == 0 && m.Not == nil
}

func (m *Match) compile(at string) error {
	for _, f := range []struct {
		name string
		p    *Patterns
	}{{"user", m.User}, {"group", m.Group}, {"namespace", m.Namespace}, {"pod", m.Pod},
		{"container", m.Container}, {"command", m.Command}, {"argv", m.Argv}, {"filename", m.Filename}, {"envName", m.EnvName},
		{"claimedUser", m.ClaimedUser}, {"otherUser", m.OtherUser}, {"subresource", m.Subresource}} {
		if err := f.p.compile(); err != nil {
			return fmt.Errorf("%s.%s: %w", at, f.name, err)
		}
	}
	for k, p := range m.Labels {
		if p == nil {
			return fmt.Errorf("%s.labels.%s: no patterns", at, k)
		}
		if err := p.compile(); err != nil {
			return fmt.Errorf("%s.labels.%s: %w", at, k, err)
		}
	}
	if m.Flags != nil && len(m.Flags.AnyOf)+len(m.Flags.AllOf) == 0 {
		return fmt.Errorf("%s.flags: needs anyOf or allOf", at)
	}
	for i := range m.AnyOf {
		sub := fmt.Sprintf("%s.anyOf[%d]", at, i)
		if m.AnyOf[i].empty() {
			return fmt.Errorf("%s: empty condition", sub)
		}
		if err := m.AnyOf[i].compile(sub); err != nil {
			return err
		}
	}
	if m.Not != nil {
		if m.Not.empty() {
			return fmt.Errorf("%s.not: empty condition", at)
		}
		return m.Not.compile(at + ".not")
	}
	return nil
}
