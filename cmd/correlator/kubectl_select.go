package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"

	"github.com/execid/correlator/pkg/cluster"
)

// selectingSource answers -l: the pods a label selector picks come from
// kube-apiserver, and only the agents behind it (cluster.Client) are
// asked for them.
type selectingSource interface {
	SelectPods(ctx context.Context, namespace, selector string) (cluster.Selection, error)
	SessionsIn(ctx context.Context, sel cluster.Selection, q url.Values, limit int) (cluster.Answer[cluster.Session], error)
	WhoIn(ctx context.Context, sel cluster.Selection, container string, q url.Values, limit int, processes bool) (cluster.WhoInAnswer, error)
	AlertsIn(ctx context.Context, sel cluster.Selection, q url.Values, limit int) (cluster.Answer[cluster.Alert], error)
}

// errSelectorES: the Elasticsearch source has no pods to select.
var errSelectorES = errors.New("selecting pods with -l: not supported with --elasticsearch")

// checkSelector refuses a bad selector, or -l with Elasticsearch, before
// anything is asked.
func (o *kubectlOptions) checkSelector(selector string) error {
	if selector == "" {
		return nil
	}
	if o.elasticsearch != "" {
		return errSelectorES
	}
	_, err := cluster.ParseSelector(selector)
	return err
}

// selectPods lists the pods selector matches in namespace ("": all) with
// src, which must be the agents' source.
func selectPods(ctx context.Context, src source, namespace, selector string,
	stderr io.Writer) (selectingSource, cluster.Selection, error) {
	ss, ok := src.(selectingSource)
	if !ok {
		return nil, cluster.Selection{}, errSelectorES
	}
	sel, err := ss.SelectPods(ctx, namespace, selector)
	if err != nil {
		return nil, sel, err
	}
	if len(sel.Pods) == 0 {
		where := "any namespace"
		if namespace != "" {
			where = "namespace " + namespace
		}
		fmt.Fprintf(stderr, "no pods in %s match %q\n", where, selector)
	}
	return ss, sel, nil
}

// selectorHelp is the -l flag's help, shared by the commands.
const selectorHelp = "only pods matching this label selector (kubectl's syntax: app=web,tier!=db, env in (a,b)); " +
	"pods that no longer exist have no labels and never match"
