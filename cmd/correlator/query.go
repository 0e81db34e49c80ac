package main

import (
	"fmt"
	"net/url"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/render"
)

// queryOptions are the flags every responder command shares.
type queryOptions struct {
	server, tokenFile, caFile, output string
	format                            render.Format
	insecureSkipVerify                bool
	user, group, namespace, pod       string
	container, since, until, command  string
	limit                             int
	all                               bool
}

func (o *queryOptions) addConnFlags(f *pflag.FlagSet) {
	f.StringVar(&o.server, "server", envOr("CORRELATOR_SERVER", "http://127.0.0.1:8080"), "correlator API server URL")
	f.StringVar(&o.tokenFile, "token-file", os.Getenv("CORRELATOR_TOKEN_FILE"), "file holding the bearer token")
	f.StringVar(&o.caFile, "ca-file", "", "CA bundle that signed the server's certificate")
	f.BoolVar(&o.insecureSkipVerify, "insecure-skip-tls-verify", false, "do not verify the server's certificate")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table, wide, json or yaml")
}

func (o *queryOptions) addFilterFlags(f *pflag.FlagSet) {
	f.StringVar(&o.user, "user", "", "only this user")
	f.StringVar(&o.group, "group", "", "only users in this group")
	f.StringVarP(&o.namespace, "namespace", "n", "", "only this namespace")
	f.StringVar(&o.pod, "pod", "", "only this pod")
	f.StringVar(&o.container, "container", "", "only this container")
	f.StringVar(&o.since, "since", "", "only after this time (RFC 3339, or a duration such as 24h)")
	f.StringVar(&o.until, "until", "", "only before this time")
	f.StringVar(&o.command, "command", "", "only commands containing this text")
	f.IntVar(&o.limit, "limit", 50, "rows per page")
	f.BoolVar(&o.all, "all", false, "follow every page")
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func (o *queryOptions) values() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"user": o.user, "group": o.group, "namespace": o.namespace, "pod": o.pod,
		"container": o.container, "since": o.since, "until": o.until, "command": o.command} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if o.limit > 0 {
		q.Set("limit", fmt.Sprint(o.limit))
	}
	return q
}

func (o *queryOptions) client() (*api.Client, error) {
	var err error
	if o.format, err = render.ParseFormat(o.output); err != nil {
		return nil, fmt.Errorf("validating --output: %w", err)
	}
	return api.NewClient(api.ClientConfig{Server: o.server, TokenFile: o.tokenFile, CAFile: o.caFile,
		InsecureSkipVerify: o.insecureSkipVerify})
}

func newSessionsCmd() *cobra.Command {
	o := &queryOptions{}
	cmd := &cobra.Command{
		Use:   "sessions",
		Short: "List exec sessions with the user who opened each",
		Long: `Lists the exec sessions an agent's API holds, with the user who opened each.

` + leavesNothing,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			all, err := api.Collect(cmd.Context(), o.values(), o.all, c.Sessions)
			if err != nil {
				return err
			}
			return render.New(cmd.OutOrStdout(), o.format).SessionPage(all)
		},
	}
	o.addConnFlags(cmd.Flags())
	o.addFilterFlags(cmd.Flags())
	return cmd
}

func newSessionCmd() *cobra.Command {
	o := &queryOptions{}
	cmd := &cobra.Command{
		Use:   "session AUDIT-ID",
		Short: "Show one session: who, from where, and its process tree",
		Long: `Shows one session from an agent's API: who opened it, from where, and its
process tree.

` + leavesNothing,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			v, err := c.Session(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return render.New(cmd.OutOrStdout(), o.format).Session(v)
		},
	}
	o.addConnFlags(cmd.Flags())
	return cmd
}

func newProcessesCmd() *cobra.Command {
	o := &queryOptions{}
	var auditID, attribution string
	cmd := &cobra.Command{
		Use:   "processes",
		Short: "List processes and the session and user each is attributed to",
		Long: `Lists the processes an agent's API holds, with the session and user each
is attributed to.

` + leavesNothing,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			q := o.values()
			if auditID != "" {
				q.Set("auditID", auditID)
			}
			if attribution != "" {
				q.Set("attribution", attribution)
			}
			all, err := api.Collect(cmd.Context(), q, o.all, c.Processes)
			if err != nil {
				return err
			}
			return render.New(cmd.OutOrStdout(), o.format).ProcessPage(all)
		},
	}
	o.addConnFlags(cmd.Flags())
	o.addFilterFlags(cmd.Flags())
	cmd.Flags().StringVar(&auditID, "audit-id", "", "only processes of this session")
	cmd.Flags().StringVar(&attribution, "attribution", "", "only audit_id, inherited, heuristic or ambiguous")
	return cmd
}
