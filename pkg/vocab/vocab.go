// Package vocab holds the names that the kernel probe, the joiner, the
// stores, the alert rules and the API share: flags, attribution and source
// values, and the environment keys. It is a leaf: it imports nothing, so
// every package can spell a name the same way without importing another's
// implementation.
package vocab

// Environment keys the probe captures by default.
const (
	// AuditIDKey is the key kube-apiserver injects under KEP-6035.
	AuditIDKey = "KUBERNETES_EXEC_AUDIT_ID"
	// SPOKey is the key the Security Profiles Operator's exec webhook injects.
	SPOKey = "SPO_EXEC_REQUEST_UID"
	// BridgeKey is the default key correlator's own exec bridge (pkg/bridge,
	// `correlator bridge`) injects: the pods/exec command becomes
	// `env BridgeKey=<id> <command...>`, so argv[0] of the root the runtime
	// execs is "env" and argv[1] is "BridgeKey=<id>". The bridge's key is
	// configurable; this is the name both halves use by default.
	BridgeKey = "CORRELATOR_EXEC_ID"
)

// BridgeWebhookName is the exec bridge's webhook name in its
// MutatingWebhookConfiguration. The apiserver stores the bridge's audit
// annotation as "<BridgeWebhookName>/<key>", e.g.
// "exec.correlator.execid.io/CORRELATOR_EXEC_ID", with the id as its value.
const BridgeWebhookName = "exec.correlator.execid.io"

// PlaceholderID is the value KEP-6035 injects when the apiserver had no ID.
const PlaceholderID = "unknown"

// Attribution says how a process was tied to an exec session.
type Attribution string

const (
	// AttributionNone: not attributed (pending, flagged, or not an exec session).
	AttributionNone Attribution = ""
	// AttributionAuditID: a verified session root carrying the session's ID.
	AttributionAuditID Attribution = "audit_id"
	// AttributionInherited: a descendant whose ID the kernel carried through fork.
	AttributionInherited Attribution = "inherited"
	// AttributionHeuristic: an ID-less exec root matched by pod, time and argv.
	AttributionHeuristic Attribution = "heuristic"
	// AttributionAmbiguous: several sessions fit; see the candidates.
	AttributionAmbiguous Attribution = "ambiguous"
)

// Counted reports whether a process with this attribution belongs to its
// session (and counts in it).
func (a Attribution) Counted() bool {
	return a == AttributionAuditID || a == AttributionInherited || a == AttributionHeuristic
}

// Source says where the kernel found an ID.
type Source string

const (
	SourceNone      Source = ""
	SourceEnv       Source = "env"       // the session root's own environment
	SourceInherited Source = "inherited" // carried through fork by the kernel
	SourceProcfs    Source = "procfs"    // bootstrapped from /proc/<pid>/environ
)

// Capture flags: what the kernel saw about a key or an event.
const (
	FlagEnvMismatch    = "env_mismatch"
	FlagEnvRemoved     = "env_removed"
	FlagRootUnverified = "root_unverified"
	// FlagRootIndirect: the root's key was set by the first program the
	// runtime exec'd (SPO's env prefix), not by the runtime itself.
	FlagRootIndirect = "root_indirect"
	// FlagBridgeArgv: the root's value came from the `env KEY=<id>` argv
	// the exec bridge wrote into the request the runtime exec'd.
	FlagBridgeArgv = "bridge_argv"
	// FlagProcfsRoot: the session root was found in /proc by the agent at
	// start (nothing was pinned), never seen exec'd: its provenance is unknown.
	FlagProcfsRoot    = "procfs_root"
	FlagDuplicateKey  = "duplicate_key"
	FlagPlaceholder   = "placeholder"
	FlagNonstandardID = "nonstandard_id"
	FlagIDTruncated   = "id_truncated"
	FlagScanTruncated = "scan_truncated"
	FlagArgvTruncated = "argv_truncated"
	FlagScanError     = "scan_error"
	FlagStaleLineage  = "stale_lineage"
	FlagLineageFull   = "lineage_full"
)

// Join flags: what the joiner concluded about a process or a session.
const (
	// FlagPodMismatch: the record names another namespace, pod or container
	// (an ID replayed elsewhere), or the ID ran in more than one container.
	FlagPodMismatch = "pod_mismatch"
	// FlagDeniedExec: the record was refused (401/403 or decision forbid), yet
	// processes carry its ID.
	FlagDeniedExec = "denied_exec"
	// FlagFailedExec: the record failed with another 4xx/5xx code, yet
	// processes carry its ID.
	FlagFailedExec = "failed_exec"
	// FlagNoAuditRecord: the ID was still unmatched after the pending TTL.
	FlagNoAuditRecord = "no_audit_record"
	// FlagAuditIDReused: a verified root under an ID whose every request it
	// fits is already held by an earlier root (one request, one root): the
	// ID was reused, by a client's Audit-ID header or an uncovered exec.
	// Never attributed; it waits for a request of its own.
	FlagAuditIDReused = "audit_id_reused"
	// FlagUncoveredExec: an exec root the runtime exec'd that no allowed
	// exec request of its pod explains after the pending TTL: it bypassed
	// admission (nodes/proxy, the runtime on the node). Nobody's session.
	FlagUncoveredExec = "uncovered_exec"
	// FlagLateAuditRecord: the record that attributed the process reached
	// the joiner after the process's wait for it had ended (the pending
	// TTL, or an ID-less root's heuristic window): what was said before it
	// came (no_audit_record, uncovered_exec, an alert) was revised.
	// Process.RecordDelay says how late.
	FlagLateAuditRecord = "late_audit_record"
)

// Audit record flags: what the parser saw in the audit log.
const (
	// FlagAuditIDConflict: another, different request used the same auditID
	// (a client-supplied Audit-ID header, or aggregated apiservers).
	FlagAuditIDConflict = "audit_id_conflict"
	// FlagMissingAuditID: the event had no auditID.
	FlagMissingAuditID = "missing_audit_id"
	// FlagURIDecodeError: a query parameter was not valid percent-encoding; the
	// raw text was kept.
	FlagURIDecodeError = "uri_decode_error"
	// FlagAuditIDTruncated: the audit ID was longer than the bound kept per
	// record (auditlog.MaxAuditIDBytes) and is held as a prefix and a hash.
	FlagAuditIDTruncated = "audit_id_truncated"
	// FlagOptionsMismatch: the logged request body names a command,
	// container, stdin, tty or ports other than the URI's query, whose
	// values are kept.
	FlagOptionsMismatch = "request_options_mismatch"
	// FlagLegacyFormat: read from the legacy text format, which lacks
	// annotations, uid, extra and the stage timestamp.
	FlagLegacyFormat = "legacy_format"
)
