package alert

import (
	"strings"
	"time"

	"github.com/execid/correlator/pkg/vocab"
)

// Rules that read attribution wait for it to settle (issue 30): a process
// is often seen before the audit record that names its session is read,
// and what such a rule says of it then (no user, no session, an
// unattributed claim) is about to change. The caller (pkg/agent) evaluates
// an unsettled process with EvaluateUnsettled, holds it while a rule that
// reads attribution matches, and evaluates it with Evaluate once it has
// settled, with Input.Settled saying how and how long after.

// What settled a process's attribution (Settled.By), beside the join's
// verdict flags (vocab.FlagNoAuditRecord, FlagUncoveredExec,
// FlagPodMismatch, FlagDeniedExec, FlagFailedExec, FlagAuditIDReused,
// FlagAuditIDConflict), which name themselves.
const (
	// SettledAttributed: the process is attributed to a session.
	SettledAttributed = "attributed"
	// SettledAmbiguous: the join named several candidate sessions.
	SettledAmbiguous = "ambiguous"
	// SettledRecord: the audit record of the ID the process claims is
	// read, and the join did not attribute the process to it.
	SettledRecord = "record"
	// SettledHost: a host process; no exec session to wait for.
	SettledHost = "host"
	// SettledFinal: the join waits for nothing more for the process (a
	// container's own process, inheriting its parent's answer).
	SettledFinal = "final"
	// SettledWaitOver: the wait (the join's pending TTL) ended with
	// nothing changed; judged as it was.
	SettledWaitOver = "wait_over"
	// SettledOverCap and SettledStopping are judged before they settled
	// (Settled.Early): the agent held too many, or stopped.
	SettledOverCap  = "over_cap"
	SettledStopping = "stopping"
)

// Settled says how the attribution of the process an alert judged had
// settled, and how long the alert waited for it. It is in the payload of
// the alerts of rules that read attribution.
type Settled struct {
	// By is what settled it: see the Settled* constants and the join's
	// verdict flags.
	By string `json:"by"`
	// AfterSeconds is how long the alert was held for it: 0 when the
	// process had settled when first evaluated.
	AfterSeconds float64 `json:"afterSeconds"`
	// Early: judged before it settled (over_cap, stopping).
	Early bool `json:"early,omitempty"`
}

// NewSettled says that by settled the attribution after waiting d.
func NewSettled(by string, d time.Duration) *Settled {
	return &Settled{By: by, AfterSeconds: float64(d.Round(time.Millisecond).Milliseconds()) / 1000,
		Early: by == SettledOverCap || by == SettledStopping}
}

// waited renders how long the alert waited, as a Go duration ("0s" when
// it did not).
func (s *Settled) waited() string {
	if s == nil {
		return "0s"
	}
	return time.Duration(s.AfterSeconds * float64(time.Second)).Round(time.Millisecond).String()
}

// WaitsForAttribution reports whether the rule reads anything the
// attribution of a process can change (see readsAttribution): such a rule
// judges a process only once its attribution has settled. The others read
// what the process is (its place, pod labels, image, argv, the kernel's
// capture flags) and judge it at once.
func (r *Rule) WaitsForAttribution() bool { return r.waits }

// readsAttribution: the scope, a match key or a message field reads the
// session, the attribution, a claim, or a flag the join or the audit log
// sets.
func (r *Rule) readsAttribution() bool {
	if r.Scope == ScopeSession || r.Match.readsAttribution() {
		return true
	}
	for _, name := range references(r.Message) {
		if !processField(name) {
			return true
		}
	}
	return false
}

// readsAttribution: m, or a condition under it, reads the session (user,
// group, command, env, streaming options, subresource, other requests), the
// attribution, a claim, or a flag that is not the kernel's.
func (m *Match) readsAttribution() bool {
	if m.User != nil || m.Group != nil || m.Command != nil || m.EnvName != nil || len(m.Attribution) > 0 ||
		m.TTY != nil || m.Stdin != nil || m.Claimant != nil || m.ClaimedUser != nil || m.OtherUser != nil ||
		m.Subresource != nil {
		return true
	}
	if m.Flags != nil {
		for _, f := range append(append([]string(nil), m.Flags.AnyOf...), m.Flags.AllOf...) {
			if !captureFlags[f] {
				return true
			}
		}
	}
	for i := range m.AnyOf {
		if m.AnyOf[i].readsAttribution() {
			return true
		}
	}
	return m.Not != nil && m.Not.readsAttribution()
}

// captureFlags are the kernel's flags on a process's image: a record read
// later does not change them.
var captureFlags = map[string]bool{
	vocab.FlagEnvMismatch: true, vocab.FlagEnvRemoved: true, vocab.FlagRootUnverified: true,
	vocab.FlagRootIndirect: true, vocab.FlagBridgeArgv: true, vocab.FlagProcfsRoot: true,
	vocab.FlagDuplicateKey: true, vocab.FlagPlaceholder: true, vocab.FlagNonstandardID: true,
	vocab.FlagIDTruncated: true, vocab.FlagScanTruncated: true, vocab.FlagArgvTruncated: true,
	vocab.FlagScanError: true, vocab.FlagStaleLineage: true, vocab.FlagLineageFull: true,
}

// processField: a message field that reads the process (or the rule)
// alone, never its session, attribution or claim.
func processField(name string) bool {
	if strings.HasPrefix(name, "label.") {
		return true
	}
	switch name {
	case "rule", "severity", "description", "matched", "namespace", "pod", "container",
		"argv", "filename", "pid", "ppid", "processUID", "processID", "containerID":
		return true
	}
	return false
}
