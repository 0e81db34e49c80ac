package soak

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/execid/correlator/internal/testutil"
)

const auditKey = "KUBERNETES_EXEC_AUDIT_ID"

// pod is one runc container the agent knows through its pod map.
type pod struct {
	ctr                      *testutil.Container
	namespace, name, ctrName string
}

// load runs exec sessions through the runtime's exec path, as the kubelet
// lands `kubectl exec` (Jenkins agents, Tekton and Argo steps): each a
// shell that execs a paced run of short commands, some leaving a child
// behind, some long. Its records go to the agent's webhook once the
// session ends, retried until acknowledged, as kube-apiserver's webhook
// backend does.
type load struct {
	pods    []pod
	webhook string // the agent's webhook URL
	rate    float64

	// gap is the pause between two execs in a session, in µs; the pacer
	// adjusts it so the node sees rate execs/s.
	gap   atomic.Int64
	burst atomic.Bool // a burst: no pause, the machine's maximum

	sessions, idless atomic.Int64
	execErrs         atomic.Int64
	firstExecErr     atomic.Value
	acked            atomic.Int64
	postRetries      atomic.Int64

	mu      sync.Mutex
	toCheck []ackedReq // acknowledged, to be looked for in the store
	recent  []ackedReq // the last few, for the queries
}

// ackedReq is an exec request whose records the agent acknowledged.
type ackedReq struct {
	auditID, user, pod string
	at                 time.Time
}

const sessionUsers = 16

// session runs one exec session in p and posts its records.
func (l *load) session(ctx context.Context, rng *rand.Rand, p pod, n int64) {
	idless := n%10 == 9 // one in ten: a runtime that injects no ID (the heuristic's)
	execs := 20 + rng.IntN(80)
	var b strings.Builder
	// usleep and [ are busybox applets the shell runs without an exec;
	// /bin/true by path is an exec (the load), /bin/sleep left behind
	// outlives the session (a reparented child).
	fmt.Fprintf(&b, "i=0; while [ $i -lt %d ]; do /bin/true; usleep %d; i=$((i+1)); done", execs, l.gap.Load())
	if l.burst.Load() {
		fmt.Fprintf(&b, "; i=0; while [ $i -lt %d ]; do /bin/true; i=$((i+1)); done", execs*3)
	}
	switch {
	case n%7 == 0:
		b.WriteString("; /bin/sleep 30 >/dev/null 2>&1 & true")
	case n%13 == 0:
		b.WriteString("; /bin/sleep 5")
	}
	b.WriteString("; true")
	argv := []string{"/bin/sh", "-c", b.String()}
	req := testutil.ExecRequest{AuditID: testutil.RandomUUID(), User: fmt.Sprintf("soak-%d", n%sessionUsers),
		Groups: []string{"ci"}, Namespace: p.namespace, Pod: p.name, Container: p.ctrName, Command: argv,
		Received: time.Now()}
	var env []string
	if !idless {
		env = []string{auditKey + "=" + req.AuditID}
	}
	out, err := p.ctr.Exec(ctx, argv, env...)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		l.execErrs.Add(1)
		l.firstExecErr.CompareAndSwap(nil, fmt.Sprintf("%v: %s", err, out))
	}
	req.Duration = time.Since(req.Received)
	l.sessions.Add(1)
	if idless {
		l.idless.Add(1)
	}
	if !l.post(ctx, testutil.EventListOf(req)) {
		return
	}
	l.acked.Add(1)
	if idless {
		return // attributed by the heuristic, or ambiguous: nothing to verify
	}
	a := ackedReq{auditID: req.AuditID, user: req.User, pod: p.name, at: time.Now()}
	l.mu.Lock()
	l.toCheck = append(l.toCheck, a)
	l.recent = append(l.recent, a)
	if len(l.recent) > 64 {
		l.recent = l.recent[len(l.recent)-64:]
	}
	l.mu.Unlock()
}

// post delivers one webhook body until the agent acknowledges it: a
// refusal (the store full, the agent restarting) is retried with backoff,
// as kube-apiserver's webhook backend retries. It reports false only when
// ctx ended first.
func (l *load) post(ctx context.Context, body []byte) bool {
	hc := &http.Client{Timeout: 30 * time.Second}
	backoff := 100 * time.Millisecond
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.webhook, bytes.NewReader(body))
		if err != nil {
			return false
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
		l.postRetries.Add(1)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

// run keeps slots sessions going until ctx ends.
func (l *load) run(ctx context.Context, slots int) {
	var wg sync.WaitGroup
	var n atomic.Int64
	for s := range slots {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(s), uint64(time.Now().UnixNano())))
			for ctx.Err() == nil {
				i := n.Add(1)
				l.session(ctx, rng, l.pods[int(i)%len(l.pods)], i)
			}
		})
	}
	wg.Wait()
}

// pace adjusts the pause between execs every interval so that the node's
// exec rate (execsPerSec reads it from the agent) approaches the target.
func (l *load) pace(ctx context.Context, interval time.Duration, execsPerSec func() (float64, bool)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r, ok := execsPerSec()
		if !ok || r <= 0 || l.burst.Load() {
			continue
		}
		// The pause is most of an exec's period in a session: scale it by
		// the ratio, damped, within bounds.
		g := float64(l.gap.Load()) * (1 + 0.5*(r/l.rate-1))
		l.gap.Store(int64(min(max(g, 100), 1_000_000)))
	}
}

// due takes the acknowledged requests older than age, to be verified.
func (l *load) due(age time.Duration) []ackedReq {
	l.mu.Lock()
	defer l.mu.Unlock()
	cut := time.Now().Add(-age)
	i := 0
	for i < len(l.toCheck) && l.toCheck[i].at.Before(cut) {
		i++
	}
	out := l.toCheck[:i:i]
	l.toCheck = l.toCheck[i:]
	return out
}

// pick returns a recent acknowledged request for the queries.
func (l *load) pick(rng *rand.Rand) (ackedReq, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.recent) == 0 {
		return ackedReq{}, false
	}
	return l.recent[rng.IntN(len(l.recent))], true
}
