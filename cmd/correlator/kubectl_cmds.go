package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
)

func newWhoCmd(o *kubectlOptions) *cobra.Command {
	var container string
	cmd := &cobra.Command{
		Use:   "who POD",
		Short: "Who exec'd into a pod, when, and what they ran",
		Example: `  kubectl correlator who web-0 -n prod
  kubectl correlator who web-0 -n prod -c app -o wide   # with each session's processes`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, err := o.namespace()
			if err != nil {
				return err
			}
			src, err := o.source(cmd.Context(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			ans, err := src.Who(cmd.Context(), ns, args[0], container, o.filters(), o.limit, o.output != "")
			if err != nil {
				return err
			}
			if done, err := o.emit(cmd.OutOrStdout(), ans); done || err != nil {
				return firstErr(err, finish(cmd.ErrOrStderr(), ans.Nodes, ans.Unreachable))
			}
			if err := renderWho(cmd.OutOrStdout(), ans, o.output == "wide"); err != nil {
				return err
			}
			return finish(cmd.ErrOrStderr(), ans.Nodes, ans.Unreachable)
		},
	}
	o.addOutputFlags(cmd.Flags(), true)
	cmd.Flags().StringVarP(&container, "container", "c", "", "only sessions into this container")
	return cmd
}

func newClusterSessionsCmd(o *kubectlOptions) *cobra.Command {
	var user, group, pod, container, command string
	var allNamespaces bool
	cmd := &cobra.Command{
		Use:   "sessions",
		Short: "Exec sessions across the cluster, merged and newest first",
		Example: `  kubectl correlator sessions --user alice@example.com -A --since 24h
  kubectl correlator sessions -n prod --group system:masters -o wide`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := o.filters()
			for k, v := range map[string]string{"user": user, "group": group, "pod": pod, "container": container, "command": command} {
				if v != "" {
					q.Set(k, v)
				}
			}
			if !allNamespaces {
				ns, err := o.namespace()
				if err != nil {
					return err
				}
				q.Set("namespace", ns)
			}
			src, err := o.source(cmd.Context(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			ans, err := src.Sessions(cmd.Context(), q, o.limit)
			if err != nil {
				return err
			}
			if done, err := o.emit(cmd.OutOrStdout(), ans); done || err != nil {
				return firstErr(err, finish(cmd.ErrOrStderr(), ans.Nodes, ans.Unreachable))
			}
			if err := renderClusterSessions(cmd.OutOrStdout(), ans, o.output == "wide"); err != nil {
				return err
			}
			return finish(cmd.ErrOrStderr(), ans.Nodes, ans.Unreachable)
		},
	}
	o.addOutputFlags(cmd.Flags(), true)
	f := cmd.Flags()
	f.StringVar(&user, "user", "", "only sessions of this user (who asked, or who they impersonated)")
	f.StringVar(&group, "group", "", "only users in this group")
	f.StringVar(&pod, "pod", "", "only sessions into this pod")
	f.StringVarP(&container, "container", "c", "", "only sessions into this container")
	f.StringVar(&command, "command", "", "only commands containing this text")
	f.BoolVarP(&allNamespaces, "all-namespaces", "A", false, "every namespace (default: -n or the context's)")
	return cmd
}

func newClusterSessionCmd(o *kubectlOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "session AUDIT-ID",
		Short:   "One session and its process tree, from every node that holds it",
		Example: `  kubectl correlator session 6f1c2b7e-0a4d-4c1e-9a57-0d2f3c4b5a69`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := o.source(cmd.Context(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			ans, err := src.Session(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if done, err := o.emit(cmd.OutOrStdout(), ans); done || err != nil {
				return firstErr(err, finish(cmd.ErrOrStderr(), ans.Nodes, ans.Unreachable))
			}
			if len(ans.Items) == 0 {
				if err := finish(cmd.ErrOrStderr(), ans.Nodes, ans.Unreachable); err != nil {
					if errors.Is(err, errPartial) {
						fmt.Fprintf(cmd.ErrOrStderr(), "session %s: not on any node that answered\n", args[0])
					}
					return err
				}
				return fmt.Errorf("finding session %s: not on any of %d nodes", args[0], ans.Nodes)
			}
			if err := renderClusterSession(cmd.OutOrStdout(), ans); err != nil {
				return err
			}
			return finish(cmd.ErrOrStderr(), ans.Nodes, ans.Unreachable)
		},
	}
	o.addOutputFlags(cmd.Flags(), false)
	return cmd
}

func newAlertsCmd(o *kubectlOptions) *cobra.Command {
	var rule, severity, auditID string
	cmd := &cobra.Command{
		Use:     "alerts",
		Short:   "Alerts the agents raised, across the cluster, newest first",
		Example: `  kubectl correlator alerts --since 1h`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := o.filters()
			for k, v := range map[string]string{"rule": rule, "severity": severity, "auditID": auditID} {
				if v != "" {
					q.Set(k, v)
				}
			}
			src, err := o.source(cmd.Context(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			ans, err := src.Alerts(cmd.Context(), q, o.limit)
			if err != nil {
				return err
			}
			if done, err := o.emit(cmd.OutOrStdout(), ans); done || err != nil {
				return firstErr(err, finish(cmd.ErrOrStderr(), ans.Nodes, ans.Unreachable))
			}
			if err := renderAlerts(cmd.OutOrStdout(), ans); err != nil {
				return err
			}
			return finish(cmd.ErrOrStderr(), ans.Nodes, ans.Unreachable)
		},
	}
	o.addOutputFlags(cmd.Flags(), true)
	cmd.Flags().StringVar(&rule, "rule", "", "only this rule")
	cmd.Flags().StringVar(&severity, "severity", "", "only this severity")
	cmd.Flags().StringVar(&auditID, "audit-id", "", "only alerts about this session")
	return cmd
}

// firstErr is the first error that is not nil.
func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
