package auditlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
)

// benchMB sizes the generated log; AUDIT_BENCH_MB=200 for the figure.
func benchMB() int {
	if n, err := strconv.Atoi(os.Getenv("AUDIT_BENCH_MB")); err == nil && n > 0 {
		return n
	}
	return 32
}

var benchData = sync.OnceValue(func() []byte { return genAuditLog(benchMB()<<20, 1) })

// genAuditLog writes a realistic apiserver log: get/list/watch/update/patch
// at Metadata and RequestResponse levels, pod bodies whose probes say
// "exec", and one exec session (three stages) per ~1000 events.
func genAuditLog(size int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	var buf bytes.Buffer
	users := []string{`{"username":"system:serviceaccount:kube-system:replicaset-controller","uid":"2f0f7c37-5d2a-4b8e-a0a8-5b7d0c4b8a10","groups":["system:serviceaccounts","system:serviceaccounts:kube-system","system:authenticated"]}`,
		`{"username":"system:node:ip-10-0-1-23.ec2.internal","groups":["system:nodes","system:authenticated"],"extra":{"authentication.kubernetes.io/credential-id":["X509SHA256=5c1b"]}}`,
		`{"username":"system:kube-scheduler","groups":["system:authenticated"]}`,
		`{"username":"alice@example.com","groups":["oidc:sre","system:authenticated"]}`}
	podBody := func(name string) string {
		return `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"` + name + `","namespace":"shop","uid":"7d1e2c3b-4a5f-4e6d-8c7b-9a0f1e2d3c4b","resourceVersion":"` + strconv.Itoa(r.IntN(1e7)) + `","labels":{"app":"web","pod-template-hash":"7d9c5"},"annotations":{"kubectl.kubernetes.io/restartedAt":"2026-03-01T00:00:00Z"}},` +
			`"spec":{"containers":[{"name":"app","image":"registry.example.com/shop/web:1.42.0","ports":[{"containerPort":8080,"protocol":"TCP"}],"env":[{"name":"LOG_LEVEL","value":"info"},{"name":"DB_HOST","value":"db.shop.svc"}],` +
			`"livenessProbe":{"exec":{"command":["/bin/sh","-c","curl -fs localhost:8080/healthz"]},"periodSeconds":10},"readinessProbe":{"httpGet":{"path":"/ready","port":8080}},"resources":{"requests":{"cpu":"100m","memory":"128Mi"}}}],"nodeName":"ip-10-0-1-23.ec2.internal","serviceAccountName":"web"},` +
			`"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2026-03-01T00:00:10Z"}],"podIP":"10.0.3.17","startTime":"2026-03-01T00:00:00Z"}}`
	}
	n := 0
	for buf.Len() < size {
		n++
		id := fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", r.Uint32(), r.IntN(1<<16), r.IntN(1<<12), r.IntN(1<<12), r.Uint64()&(1<<48-1))
		ts := fmt.Sprintf("2026-03-04T10:%02d:%02d.%06dZ", (n/60000)%60, (n/1000)%60, r.IntN(1e6))
		user := users[r.IntN(len(users))]
		pod := fmt.Sprintf("web-7d9c5-%05d", r.IntN(100000))
		if n%1000 == 0 {
			uri := `/api/v1/namespaces/shop/pods/` + pod + `/exec?command=sh\u0026command=-c\u0026command=cat+%2Fetc%2Fhosts\u0026container=app\u0026stdin=true\u0026stdout=true\u0026tty=true`
			for _, stage := range []string{"RequestReceived", "ResponseStarted", "ResponseComplete"} {
				status := `,"responseStatus":{"metadata":{},"code":101}`
				if stage == "RequestReceived" {
					status = ""
				}
				fmt.Fprintf(&buf, `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"%s","stage":"%s","requestURI":"%s","verb":"get","user":%s,"sourceIPs":["10.0.0.7"],"userAgent":"kubectl/v1.35.0 (linux/amd64) kubernetes/66452049","objectRef":{"resource":"pods","namespace":"shop","name":"%s","apiVersion":"v1","subresource":"exec"}%s,"requestReceivedTimestamp":"%s","stageTimestamp":"%s","annotations":{"authorization.k8s.io/decision":"allow","authorization.k8s.io/reason":""}}`+"\n",
					id, stage, uri, users[3], pod, status, ts, ts)
			}
			continue
		}
		head := `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"%s","auditID":"` + id + `","stage":"ResponseComplete","requestURI":"%s","verb":"%s","user":` + user + `,"sourceIPs":["10.0.1.23"],"userAgent":"kube-controller-manager/v1.35.0 (linux/amd64) kubernetes/66452049","objectRef":{"resource":"pods","namespace":"shop","name":"` + pod + `","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200}`
		tail := `,"requestReceivedTimestamp":"` + ts + `","stageTimestamp":"` + ts + `","annotations":{"authorization.k8s.io/decision":"allow","authorization.k8s.io/reason":"RBAC: allowed by ClusterRoleBinding \"system:controller:replicaset-controller\""}}` + "\n"
		switch k := r.IntN(100); {
		case k < 45:
			fmt.Fprintf(&buf, head+tail, "Metadata", "/api/v1/namespaces/shop/pods/"+pod, "get")
		case k < 60:
			fmt.Fprintf(&buf, head+tail, "Metadata", `/api/v1/namespaces/shop/pods?allowWatchBookmarks=true\u0026resourceVersion=123\u0026watch=true`, "watch")
		case k < 75:
			fmt.Fprintf(&buf, head+`,"responseObject":`+podBody(pod)+tail, "RequestResponse", "/api/v1/namespaces/shop/pods/"+pod, "get")
		case k < 88:
			fmt.Fprintf(&buf, head+`,"requestObject":`+podBody(pod)+`,"responseObject":`+podBody(pod)+tail, "RequestResponse", "/api/v1/namespaces/shop/pods/"+pod+"/status", "update")
		case k < 97:
			fmt.Fprintf(&buf, head+`,"requestObject":{"metadata":{"labels":{"canary":"true"}}}`+tail, "Request", "/api/v1/namespaces/shop/pods/"+pod, "patch")
		default:
			items := make([]string, 5+r.IntN(30))
			for i := range items {
				items[i] = podBody(fmt.Sprintf("web-7d9c5-%05d", i))
			}
			fmt.Fprintf(&buf, head+`,"responseObject":{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"99"},"items":[`+strings.Join(items, ",")+`]}`+tail, "RequestResponse", `/api/v1/namespaces/shop/pods?limit=500`, "list")
		}
	}
	return buf.Bytes()
}

func BenchmarkDecode(b *testing.B) {
	data := benchData()
	d := NewDecoder(DecoderConfig{}, zerolog.Nop(), nil)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	var c Counts
	for b.Loop() {
		var err error
		c, err = d.Decode(bytes.NewReader(data), "bench", func([]Event) error { return nil })
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(c.Events), "events/op")
	b.ReportMetric(float64(c.Streaming), "streaming/op")
	if c.SkippedTotal() != 0 || c.Streaming == 0 {
		b.Fatalf("counts %+v", c)
	}
}

// fullEvent is every field of audit.k8s.io/v1 Event, for the baseline.
type fullEvent struct {
	Kind             string            `json:"kind"`
	APIVersion       string            `json:"apiVersion"`
	Level            string            `json:"level"`
	AuditID          string            `json:"auditID"`
	Stage            string            `json:"stage"`
	RequestURI       string            `json:"requestURI"`
	Verb             string            `json:"verb"`
	User             UserInfo          `json:"user"`
	ImpersonatedUser *UserInfo         `json:"impersonatedUser"`
	SourceIPs        []string          `json:"sourceIPs"`
	UserAgent        string            `json:"userAgent"`
	ObjectRef        *ObjectReference  `json:"objectRef"`
	ResponseStatus   *fullStatus       `json:"responseStatus"`
	RequestObject    json.RawMessage   `json:"requestObject"`
	ResponseObject   json.RawMessage   `json:"responseObject"`
	RequestReceived  Time              `json:"requestReceivedTimestamp"`
	StageTimestamp   Time              `json:"stageTimestamp"`
	Annotations      map[string]string `json:"annotations"`
	AuthenticationMD json.RawMessage   `json:"authenticationMetadata"`
}

type fullStatus struct {
	Metadata json.RawMessage `json:"metadata"`
	Status   string          `json:"status"`
	Message  string          `json:"message"`
	Reason   string          `json:"reason"`
	Details  json.RawMessage `json:"details"`
	Code     int32           `json:"code"`
}

// BenchmarkDecodeBaseline is the naive reader: encoding/json of every line
// into a complete Event struct.
func BenchmarkDecodeBaseline(b *testing.B) {
	data := benchData()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		n := 0
		for sc.Scan() {
			var ev fullEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				b.Fatal(err)
			}
			n++
		}
	}
}

// BenchmarkParseLineNonExec checks the fast path allocates nothing.
func BenchmarkParseLineNonExec(b *testing.B) {
	lines := bytes.Split(genAuditLog(2<<20, 2), []byte("\n"))
	var plain [][]byte
	for _, l := range lines {
		if len(l) > 0 && !mayBeStreaming(l) {
			plain = append(plain, l)
		}
	}
	p := NewParser(0)
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		p.ParseLine(plain[i%len(plain)])
		i++
	}
}

func TestParseLineNonExecAllocs(t *testing.T) {
	lines := bytes.Split(genAuditLog(256<<10, 3), []byte("\n"))
	p := NewParser(0)
	for _, l := range lines {
		if len(l) == 0 || mayBeStreaming(l) {
			continue
		}
		if n := testing.AllocsPerRun(5, func() { p.ParseLine(l) }); n != 0 {
			t.Fatalf("%v allocs for a non-exec line", n)
		}
	}
}
