package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/execid/correlator/pkg/cluster"
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
			if err := o.checkSelector(selector); err != nil {
				return err
			}
			ns, err := o.namespace()
			if err != nil {
				return err
			}
			src, err := o.source(cmd.Context(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if selector != "" {
				return o.whoIn(cmd, src, ns, selector, container)
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
	cmd.Flags().StringVarP(&selector, "selector", "l", "", selectorHelp)
	return cmd
}

// whoIn is who -l.
func (o *kubectlOptions) whoIn(cmd *cobra.Command, src source, ns, selector, container string) error {
	ss, sel, err := selectPods(cmd.Context(), src, ns, selector, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	ans, err := ss.WhoIn(cmd.Context(), sel, container, o.filters(), o.limit, o.output != "")
	if err != nil {
		return err
	}
	for _, p := range ans.Skipped {
		fmt.Fprintf(cmd.ErrOrStderr(), "pod %s/%s is on no node: skipped\n", p.Namespace, p.Name)
	}
	if done, err := o.emit(cmd.OutOrStdout(), ans); done || err != nil {
		return firstErr(err, finish(cmd.ErrOrStderr(), ans.Nodes, ans.Unreachable))
	}
	if err := renderWhoIn(cmd.OutOrStdout(), ans, o.output == "wide"); err != nil {
		return err
	}
	return finish(cmd.ErrOrStderr(), ans.Nodes, ans.Unreachable)
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
			if err := o.checkSelector(selector); err != nil {
				return err
			}
			q := o.filters()
			for k, v := range map[string]string{"user": user, "group": group, "pod": pod, "container": container, "command": command} {
				if v != "" {
					q.Set(k, v)
				}
			}
			ns := ""
			if !allNamespaces {
				var err error
				if ns, err = o.namespace(); err != nil {
					return err
				}
				q.Set("namespace", ns)
			}
			src, err := o.source(cmd.Context(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			var ans cluster.Answer[cluster.Session]
			if selector == "" {
				ans, err = src.Sessions(cmd.Context(), q, o.limit)
			} else {
				var ss selectingSource
				var sel cluster.Selection
				if ss, sel, err = selectPods(cmd.Context(), src, ns, selector, cmd.ErrOrStderr()); err == nil {
					ans, err = ss.SessionsIn(cmd.Context(), sel, q, o.limit)
				}
			}
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
			if err := o.checkSelector(selector); err != nil {
				return err
			}
			ns := ""
			if selector != "" && !allNamespaces {
				var err error
				if ns, err = o.namespace(); err != nil {
					return err
				}
			}
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
			var ans cluster.Answer[cluster.Alert]
			if selector == "" {
				ans, err = src.Alerts(cmd.Context(), q, o.limit)
			} else {
				var ss selectingSource
				var sel cluster.Selection
				if ss, sel, err = selectPods(cmd.Context(), src, ns, selector, cmd.ErrOrStderr()); err == nil {
					ans, err = ss.AlertsIn(cmd.Context(), sel, q, o.limit)
				}
			}
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
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "only alerts about the pods that match now: "+selectorHelp)
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "with -l: select pods in every namespace (default: -n or the context's)")
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
