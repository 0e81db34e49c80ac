package join

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/vocab"
)

// debugID is the generated kubectl debug request's audit ID.
const debugID = "00000000-0000-4000-8000-0000000000d0"

// addDebug adds dave's kubectl debug through the exec bridge: a
// pods/ephemeralcontainers request naming container dbg, annotated with
// the bridge's ID, and the container the kubelet starts for it, any time
// after the request (an image pull can take a minute). Its init is the
// runtime's (container_init) with the ID in its env, so the kernel flags it
// root_unverified; it may exec its last command in place, and fork
// children. Beside it, what an attacker in the pod can do with the ID: an
// init of another container carrying it, an exec into dbg with it in the
// env (no bridge argv). Only the debug container's own processes are
// dave's, and they are exactly when the record is delivered.
func addDebug(rng *rand.Rand, sc *scenario) {
	bid := fmt.Sprintf("dbg-%d", rng.Intn(1000))
	rr := t0.Add(time.Duration(rng.Intn(20)) * time.Second)
	delivered := rng.Intn(6) != 0
	uri := ""
	if delivered {
		evs := debugEvents(bid, rr)
		sc.events = append(sc.events, evs...)
		uri = evs[0].RequestURI
	}
	start := rr.Add([]time.Duration{300 * time.Millisecond, 5 * time.Second, 70 * time.Second}[rng.Intn(3)])
	init := Process{Exec: capture.Exec{ProcessID: "d-r", ParentProcessID: "shim-d", Argv: []string{"sh", "-c", "id; sleep 1"},
		Filename: "/bin/sh", ContainerID: "ctr-dbg", PodUID: "uid-web", SessionRootID: "d-r"}, Start: start, ExecTime: start,
		Namespace: "ns", Pod: "web", Container: "dbg", ExecOrigin: capture.OriginContainerInit,
		Bridge: capture.KeyValue{Value: bid, Source: vocab.SourceEnv, Flags: []string{vocab.FlagRootUnverified}}}
	tree := []Process{init}
	if rng.Intn(2) == 0 {
		// `sh -c '...; sleep 1'` execs its last command in place.
		again := init
		again.Argv, again.Filename, again.ExecOrigin = []string{"sleep", "1"}, "/bin/sleep", capture.OriginInside
		again.ExecTime = start.Add(50 * time.Millisecond)
		again.Bridge.Source = vocab.SourceInherited
		tree = append(tree, again)
		if rng.Intn(2) == 0 {
			// and once more (`exec sh -c '...; exec cmd'`).
			third := again
			third.Argv, third.ExecTime = []string{"true"}, again.ExecTime.Add(50*time.Millisecond)
			tree = append(tree, third)
		}
	}
	for k := range rng.Intn(3) {
		c := init
		c.ProcessID, c.ParentProcessID, c.Argv, c.ExecOrigin = fmt.Sprintf("d-c%d", k), "d-r", []string{"id"}, capture.OriginInside
		c.Start = start.Add(time.Duration(1+rng.Intn(900)) * time.Millisecond)
		c.ExecTime, c.Bridge.Source = c.Start, vocab.SourceInherited
		tree = append(tree, c)
	}
	for _, p := range tree {
		sc.procs = append(sc.procs, p)
		sc.truth[p.ProcessID] = uri
		if delivered {
			w := want{attr: vocab.AttributionInherited, auditID: debugID}
			if p.ProcessID == "d-r" {
				w.attr = vocab.AttributionAuditID
			}
			sc.expect[p.ProcessID] = w
		}
	}
	if rng.Intn(2) == 0 {
		// Another container's init with the debug ID in its env.
		f := init
		f.ProcessID, f.ParentProcessID, f.SessionRootID = "d-forged-init", "shim-f", "d-forged-init"
		f.Container, f.ContainerID = "side", "ctr-side"
		f.Start, f.ExecTime = start.Add(time.Second), start.Add(time.Second)
		sc.procs = append(sc.procs, f)
		sc.truth[f.ProcessID] = ""
	}
	if rng.Intn(2) == 0 {
		// An exec into the debug container with the ID in its env alone.
		x := init
		x.ProcessID, x.ParentProcessID, x.SessionRootID = "d-exec", "runc-x", "d-exec"
		x.ExecOrigin = capture.OriginOtherCgroup
		x.Start, x.ExecTime = start.Add(2*time.Second), start.Add(2*time.Second)
		sc.procs = append(sc.procs, x)
		sc.truth[x.ProcessID] = ""
	}
}

// debugEvents renders dave's ephemeral container request as the apiserver
// logs it at level Request: the patch's body names the container, the
// bridge's annotation carries its ID.
func debugEvents(bid string, rr time.Time) []auditlog.Event {
	body, _ := json.Marshal(map[string]any{"spec": map[string]any{"ephemeralContainers": []map[string]any{
		{"name": "dbg", "image": "busybox", "command": []string{"sh", "-c", "id; sleep 1"}}}}})
	mk := func(stage string, at time.Time, status int32) auditlog.Event {
		ev := auditlog.Event{
			AuditID: debugID, Stage: stage, RequestURI: "/api/v1/namespaces/ns/pods/web/ephemeralcontainers", Verb: "patch",
			User:                     auditlog.UserInfo{Username: "dave", Groups: []string{"dev"}},
			ObjectRef:                &auditlog.ObjectReference{Resource: "pods", Namespace: "ns", Name: "web", Subresource: auditlog.SubresourceEphemeralContainers},
			RequestReceivedTimestamp: auditlog.Time{Time: rr}, StageTimestamp: auditlog.Time{Time: at},
			Annotations:   map[string]string{auditlog.AnnotationDecision: "allow", vocab.BridgeWebhookName + "/" + vocab.BridgeKey: bid},
			RequestObject: body,
		}
		if status != 0 {
			ev.ResponseStatus = &auditlog.Status{Code: status}
		}
		return ev
	}
	return []auditlog.Event{mk(auditlog.StageRequestReceived, rr, 0), mk(auditlog.StageResponseComplete, rr.Add(20*time.Millisecond), 200)}
}
