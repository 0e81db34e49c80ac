// Package delivery delivers alerts to SIEM sinks at least once: a file, a
// webhook, Splunk HEC, syslog RFC 5424 with an optional CEF body
// (Elasticsearch lives in pkg/store/elasticsearch and implements
// Deliverer).
//
// Dispatcher.Submit writes each alert to every sink's bounded on-disk
// spool before it returns, and a loop per sink reads the spool and retries
// with exponential backoff until the sink accepts the batch. Receivers
// dedupe on the alert's ID. A spool frees what it delivered at once and
// stops short of a small reserve of free disk space; an alert it cannot
// hold is counted in correlator_alert_dropped_total and logged, never
// dropped in silence.
package delivery
