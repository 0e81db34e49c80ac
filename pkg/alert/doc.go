// Package alert evaluates YAML rules over sessions and processes and
// delivers the resulting alerts to SIEM sinks (a file, a webhook, Splunk
// HEC, syslog RFC 5424 with an optional CEF body; Elasticsearch lives in
// pkg/store/elasticsearch and implements Deliverer).
//
// Delivery is at least once: Dispatcher.Submit writes each alert to every
// sink's bounded on-disk spool before it returns, and a loop per sink reads
// the spool and retries with exponential backoff until the sink accepts the
// batch. Every alert carries a stable ID (a hash of the rule, the audit
// ID, the process ID and the matched fact) for the receiver to dedupe on.
// A spool frees what it delivered at once and stops short of a small
// reserve of free disk space; an alert it cannot hold is counted in
// correlator_alert_dropped_total and logged, never dropped in silence.
package alert
