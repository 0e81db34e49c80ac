package main

import (
	"errors"
	"strings"

	"github.com/spf13/cobra"

	"github.com/execid/correlator/pkg/cluster"
	"github.com/execid/correlator/pkg/render"
)

func newWhoCmd(o *kubectlOptions) *cobra.Command {
	var container, selector string
	cmd := &cobra.Command{
		Use:   "who (POD | -l SELECTOR)",
		Short: "Who exec'd into a pod, or the pods a label selector matches, when, and what they ran",
		Long: strings.TrimSpace(`
Who exec'd into POD, asking only the agent on its node (every node when
the pod is gone). With -l, every pod in the namespace that matches the
label selector now, asking only the agents on those pods' nodes; a
matching pod on no node is skipped and named. A deleted pod has no labels
to match: ask for it by name.

` + leavesNothing),
		Example: `  kubectl correlator who web-0 -n prod
  kubectl correlator who web-0 -n prod -c app -o wide   # with each session's processes
  kubectl correlator who -l app=web -n prod`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) == 1 && selector != "":
				return errors.New("who: give a POD or -l SELECTOR, not both")
			case len(args) == 0 && selector == "":
				return errors.New("who: give a POD or -l SELECTOR")
			}
			if err := cluster.CheckSelector(selector, o.elasticsearch != ""); err != nil {
				return err
			}
			ns, err := o.namespace()
			if err != nil {
				return err
			}
			ctx, cancel := o.bounded(cmd)
			defer cancel()
			ask, err := o.asker(ctx, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			processes := o.format != render.Table
			if selector != "" {
				ans, err := ask.WhoIn(ctx, container, o.query(ns, selector), processes)
				if err != nil {
					return err
				}
				return o.show(cmd, ans.Incomplete(), func(p *render.Printer) error { return p.WhoIn(ans) })
			}
			ans, err := ask.Who(ctx, args[0], container, o.query(ns, ""), processes)
			if err != nil {
				return err
			}
			return o.show(cmd, ans.Incomplete(), func(p *render.Printer) error { return p.Who(ans) })
		},
	}
	o.addOutputFlags(cmd.Flags(), true)
	cmd.Flags().StringVarP(&container, "container", "c", "", "only sessions into this container")
	cmd.Flags().StringVarP(&selector, "selector", "l", "", selectorHelp)
	return cmd
}

func newClusterSessionsCmd(o *kubectlOptions) *cobra.Command {
	var user, group, pod, container, command, selector string
	var allNamespaces bool
	cmd := &cobra.Command{
		Use:   "sessions",
		Short: "Exec sessions across the cluster, merged and newest first",
		Long: `Exec sessions across the cluster, from every node's agent, merged and
newest first.

` + leavesNothing,
		Example: `  kubectl correlator sessions --user alice@example.com -A --since 24h
  kubectl correlator sessions -n prod --group system:masters -o wide
  kubectl correlator sessions -l app=web -A   # sessions into the pods labelled app=web now`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cluster.CheckSelector(selector, o.elasticsearch != ""); err != nil {
				return err
			}
			ns := ""
			if !allNamespaces {
				var err error
				if ns, err = o.namespace(); err != nil {
					return err
				}
			}
			q := o.query(ns, selector).Filter(map[string]string{"namespace": ns, "user": user, "group": group, "pod": pod,
				"container": container, "command": command})
			ctx, cancel := o.bounded(cmd)
			defer cancel()
			ask, err := o.asker(ctx, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			ans, err := ask.Sessions(ctx, q)
			if err != nil {
				return err
			}
			return o.show(cmd, ans.Incomplete(), func(p *render.Printer) error { return p.Sessions(ans) })
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
	f.StringVarP(&selector, "selector", "l", "", "only sessions into the pods that match now: "+selectorHelp)
	return cmd
}

func newClusterSessionCmd(o *kubectlOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "session AUDIT-ID",
		Short: "One session and its process tree, from every node that holds it",
		Long: `One session and its process tree, from every node's agent that holds it.

` + leavesNothing,
		Example: `  kubectl correlator session 6f1c2b7e-0a4d-4c1e-9a57-0d2f3c4b5a69`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := o.bounded(cmd)
			defer cancel()
			ask, err := o.asker(ctx, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			ans, err := ask.Session(ctx, args[0])
			if err != nil {
				return err
			}
			if len(ans.Items) == 0 && !o.format.Machine() {
				o.unanswered(cmd.ErrOrStderr(), ans.Incomplete())
				return ask.Missing(ans, args[0])
			}
			return o.show(cmd, ans.Incomplete(), func(p *render.Printer) error { return p.SessionViews(ans) })
		},
	}
	o.addOutputFlags(cmd.Flags(), false)
	return cmd
}

func newAlertsCmd(o *kubectlOptions) *cobra.Command {
	var rule, severity, auditID, selector string
	var allNamespaces bool
	cmd := &cobra.Command{
		Use:   "alerts",
		Short: "Alerts the agents raised, across the cluster, newest first",
		Long: strings.TrimSpace(`
Alerts the agents raised, across the cluster, newest first. With -l, only
the alerts about the pods that match the label selector now, in -n's
namespace or, with -A, every namespace: the pod of the alert's session,
or else of its process, as the alert's payload records it. Alerts about
pods that no longer exist never match.

` + leavesNothing),
		Example: `  kubectl correlator alerts --since 1h
  kubectl correlator alerts -l app=web -A`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cluster.CheckSelector(selector, o.elasticsearch != ""); err != nil {
				return err
			}
			ns := ""
			if selector != "" && !allNamespaces {
				var err error
				if ns, err = o.namespace(); err != nil {
					return err
				}
			}
			q := o.query(ns, selector).Filter(map[string]string{"rule": rule, "severity": severity, "auditID": auditID})
			ctx, cancel := o.bounded(cmd)
			defer cancel()
			ask, err := o.asker(ctx, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			ans, err := ask.Alerts(ctx, q)
			if err != nil {
				return err
			}
			return o.show(cmd, ans.Incomplete(), func(p *render.Printer) error { return p.Alerts(ans) })
		},
	}
	o.addOutputFlags(cmd.Flags(), true)
	cmd.Flags().StringVar(&rule, "rule", "", "only this rule")
	cmd.Flags().StringVar(&severity, "severity", "", "only this severity")
	cmd.Flags().StringVar(&auditID, "audit-id", "", "only alerts about this session")
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "only alerts about the pods that match now: "+selectorHelp)
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "with -l: select pods in every namespace (default: -n or the context's)")
	return cmd
}

// selectorHelp is the -l flag's help, shared by the commands.
const selectorHelp = "only pods matching this label selector (kubectl's syntax: app=web,tier!=db, env in (a,b)); " +
	"pods that no longer exist have no labels and never match"
