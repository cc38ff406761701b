package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// statusFaultProxy is an HTTPS proxy in front of the kube-apiserver (it
// reaches it as an administrator) that can answer the status writes of one
// kind with an error of the API server's own making.
type statusFaultProxy struct {
	server *httptest.Server

	mu       sync.Mutex
	failing  string // path fragment of the status writes to refuse, "" for none
	refusals int
	answers  []func(http.ResponseWriter)
}

func startStatusFaultProxy(t *testing.T) *statusFaultProxy {
	t.Helper()
	upstream, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := rest.TransportFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(upstream)
	proxy.Transport = rt
	proxy.FlushInterval = -1 // watches stream
	p := &statusFaultProxy{}
	p.server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if answer := p.refusal(r); answer != nil {
			answer(w)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	p.server.StartTLS()
	t.Cleanup(p.server.Close)
	return p
}

// refusal returns the answer for r when it is a status write to refuse.
func (p *statusFaultProxy) refusal(r *http.Request) func(http.ResponseWriter) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failing == "" || r.Method != http.MethodPut || !strings.HasSuffix(r.URL.Path, "/status") ||
		!strings.Contains(r.URL.Path, p.failing) {
		return nil
	}
	answer := p.answers[p.refusals%len(p.answers)]
	p.refusals++
	return answer
}

// refuse makes status writes whose path contains fragment fail, in turn,
// with each of answers, until allow.
func (p *statusFaultProxy) refuse(fragment string, answers ...func(http.ResponseWriter)) {
	p.mu.Lock()
	p.failing, p.answers = fragment, answers
	p.mu.Unlock()
}

func (p *statusFaultProxy) allow() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failing = ""
	return p.refusals
}

// kubeconfig writes a kubeconfig that reaches the API server through p.
func (p *statusFaultProxy) kubeconfig(t *testing.T) string {
	t.Helper()
	config := clientcmdapi.NewConfig()
	config.Clusters["proxy"] = &clientcmdapi.Cluster{Server: p.server.URL, InsecureSkipTLSVerify: true}
	config.AuthInfos["proxy"] = &clientcmdapi.AuthInfo{}
	config.Contexts["proxy"] = &clientcmdapi.Context{Cluster: "proxy", AuthInfo: "proxy"}
	config.CurrentContext = "proxy"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*config, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// apiStatus answers as the kube-apiserver does, with a Status object.
func apiStatus(code int, reason, message string, header map[string]string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":%q,"reason":%q,"code":%d}`,
			message, reason, code)
	}
}

// TestStatusWritesRefusedAfterPush: the API server refuses the builders'
// status writes for 30 s (500 "etcdserver: leader changed", 429 and 429
// with Retry-After in turn: client-go waits out and resends the latter by
// itself, so only a 429 without one reaches the controller's own retry)
// while a builder is pushed; the builder is pushed exactly once and is
// Ready within seconds of the API server taking status writes again.
func TestStatusWritesRefusedAfterPush(t *testing.T) {
	w := newFaultWorld(t, "statuswrites")
	p := startStatusFaultProxy(t)
	startControllerWith(t, p.kubeconfig(t), systemNamespace, true)
	w.apply(t)
	if out, err := env.Kubectl("wait", "--for=condition=Ready", "--timeout=60s", "clusterstore/"+w.name, "clusterstack/"+w.name).CombinedOutput(); err != nil {
		t.Fatalf("kubectl wait: %v\n%s", err, out)
	}
	w.waitReady(t, 60*time.Second)

	p.refuse("/builders/",
		apiStatus(500, "InternalError", "etcdserver: leader changed", nil),
		apiStatus(429, "TooManyRequests", "the API server is busy", nil),
		apiStatus(429, "TooManyRequests", "the API server is busy", map[string]string{"Retry-After": "1"}))
	late := w.name + "-late"
	w.createBuilder(t, late)
	eventually(t, 30*time.Second, "the new builder pushed", func() (bool, string) {
		n := w.f.Count("PUT", "/builders/"+late+"/manifests/latest")
		return n > 0, fmt.Sprint(n, " manifest PUTs")
	})
	time.Sleep(30 * time.Second)
	refused := p.allow()
	allowed := time.Now()
	// The status-write backoff is capped at 4 s (jittered: 4.8 s at most).
	if out, err := env.Kubectl("wait", "--for=condition=Ready", "--timeout=10s", "-n", w.ns, "builder/"+late).CombinedOutput(); err != nil {
		t.Fatalf("not Ready 10s after the API server took status writes again: %v\n%s", err, out)
	}
	t.Logf("Ready %v after the API server took status writes again (%d refused)", time.Since(allowed).Round(100*time.Millisecond), refused)
	if refused < 5 {
		t.Errorf("%d status writes refused in 30 s: the retries are not coming", refused)
	}
	if n := w.f.Count("PUT", "/builders/"+late+"/manifests/latest"); n != 1 {
		t.Errorf("the builder was pushed %d times, want once", n)
	}
	b, err := client.BuildsmithV1alpha1().Builders(w.ns).Get(context.Background(), late, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tagged, _ := w.f.Resolve(w.f.Addr + "/builders/" + late + ":latest"); b.Status.LatestImage != tagged {
		t.Errorf("latestImage %q, the tag is at %q", b.Status.LatestImage, tagged)
	}
}
