package main

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/execid/correlator/pkg/node"
	"github.com/execid/correlator/pkg/store/elasticsearch"
)

// esFlags binds the Elasticsearch connection flags, shared by the store,
// the audit lookup, the alert sink and `audit ship`.
func esFlags(fs *pflag.FlagSet, es *elasticsearch.Connection) {
	*es = elasticsearch.Connection{Config: elasticsearch.DefaultConfig(), PasswordEnv: "CORRELATOR_ES_PASSWORD"}
	fs.StringArrayVar(&es.URLs, "es-url", nil, "Elasticsearch node URL (repeatable)")
	fs.StringVar(&es.APIKeyFile, "es-api-key-file", "", "file holding the Elasticsearch API key (base64 id:key)")
	fs.StringVar(&es.Username, "es-username", "", "Elasticsearch user (basic auth; the password comes from $CORRELATOR_ES_PASSWORD)")
	fs.StringVar(&es.CACert, "es-ca-cert", "", "PEM file of CAs that signed the cluster's certificates")
	fs.StringVar(&es.IndexPrefix, "es-index-prefix", "correlator", "prefix of correlator's indices (<prefix>-processes-<day>, ...)")
	fs.DurationVar(&es.IndexPeriod, "es-index-period", 24*time.Hour, "time one index holds; the first agent on a prefix records it and the rest follow")
	fs.StringVar(&es.RetentionMode, "es-retention", elasticsearch.RetentionLease,
		"this process's part in the cluster's retention: lease (take turns with the others, one pass an hour per cluster) or off")
	fs.IntVar(&es.Shards, "es-shards", 0, "primary shards of each new index (0: the cluster's default)")
	fs.IntVar(&es.Replicas, "es-replicas", 0, "replicas of each new index (0: the cluster's default)")
	fs.StringVar(&es.Refresh, "es-refresh", "false", "bulk refresh mode: false, wait_for or true")
	fs.DurationVar(&es.Retention, "es-alert-retention", 90*24*time.Hour,
		"an Elasticsearch alert sink's ILM delete age, where the cluster has ILM (a store's retention drops alert indices too)")
}

// alertFlags binds the rules and sinks.
func alertFlags(fs *pflag.FlagSet, o *node.AlertConfig) {
	fs.StringVar(&o.RulesFile, "rules", "", "YAML alert rules (default: the shipped rules)")
	fs.StringArrayVar(&o.Sinks, "alert-sink", nil, "alert destination (repeatable): file:PATH, webhook:URL, splunk-hec:URL, "+
		"syslog+udp://HOST:PORT, syslog+tcp://…, syslog+tls://… (?format=cef), elasticsearch:URL")
	fs.StringVar(&o.SpoolDir, "alert-spool-dir", "/var/lib/correlator/alerts", "on-disk spool of undelivered alerts, one directory per sink")
	fs.Int64Var(&o.SpoolBytes, "alert-spool-max-bytes", 256<<20, "bound of each sink's spool; the oldest alerts are dropped past it")
	fs.StringArrayVar(&o.AllowGroups, "alert-shell-allow-group", []string{"system:masters"},
		"groups whose interactive shells the shipped rules do not alert on (repeatable)")
	fs.StringVar(&o.TokenFile, "alert-token-file", "", "bearer token (webhook) or HEC token (splunk-hec) for the HTTP sinks")
	fs.StringVar(&o.CAFile, "alert-ca-file", "", "PEM file of CAs for the HTTPS and syslog+tls sinks")
}
