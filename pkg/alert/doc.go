// Package alert evaluates YAML rules over sessions and processes
// (join.Session, join.Process) and turns each match into a store.Alert
// with a stable ID (a hash of the rule, the audit ID, the process ID and
// the matched fact) for receivers to dedupe on. The shipped rules are
// rules/default.yaml; the format is rules/README.md.
//
// A rule that reads a process's attribution judges it only once that has
// settled (settle.go): the caller evaluates an unsettled process with
// Engine.EvaluateUnsettled, holds it while such a rule matches, and
// evaluates it with Engine.Evaluate once it has, saying how in
// Input.Settled.
//
// Delivering alerts to SIEMs is pkg/alert/delivery's.
package alert
