package main

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/spf13/pflag"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
)

// fakeAPIServer answers what reconcile and status ask an API server: lists
// (of nothing), and GETs and merge PATCHes of Builders. It records every
// request.
type fakeAPIServer struct {
	*httptest.Server
	// get answers the n-th GET (from 0) of a Builder: a status code and,
	// for 200, nil when the controller has not handled the reconcile
	// requested, or how it marks the Builder's status when it has.
	get func(name string, n int) (int, func(*v1alpha1.BuilderStatus))

	mu        sync.Mutex
	requests  []fakeRequest
	requested map[string]string // the reconcile-requested-at of each Builder
	gets      map[string]int
}

// fakeRequest is what the tests check of a request.
type fakeRequest struct {
	method, path string
	header       http.Header
}

func newFakeAPIServer(t *testing.T, tls bool) *fakeAPIServer {
	s := &fakeAPIServer{requested: map[string]string{}, gets: map[string]int{}}
	s.Server = httptest.NewUnstartedServer(s)
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes the tests make fail
	if tls {
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	return s
}

func (s *fakeAPIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, fakeRequest{method: r.Method, path: r.URL.Path, header: r.Header.Clone()})
	// /apis/buildsmith.dev/v1alpha1[/namespaces/NAMESPACE]/RESOURCE[/NAME]
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/apis/buildsmith.dev/v1alpha1/"), "/")
	namespace := ""
	if len(parts) > 2 && parts[0] == "namespaces" {
		namespace, parts = parts[1], parts[2:]
	}
	switch {
	case len(parts) == 1 && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, map[string]any{"apiVersion": "buildsmith.dev/v1alpha1", "kind": "List", "items": []any{}})
	case len(parts) == 2 && parts[0] == "builders" && r.Method == http.MethodPatch:
		var patch struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &patch); err != nil {
			writeJSON(w, http.StatusBadRequest, metav1.Status{Status: metav1.StatusFailure, Code: http.StatusBadRequest, Message: err.Error()})
			return
		}
		s.requested[parts[1]] = patch.Metadata.Annotations[v1alpha1.ReconcileRequestedAtAnnotation]
		writeJSON(w, http.StatusOK, s.builder(namespace, parts[1], nil))
	case len(parts) == 2 && parts[0] == "builders" && r.Method == http.MethodGet && s.get != nil:
		n := s.gets[parts[1]]
		s.gets[parts[1]]++
		code, mark := s.get(parts[1], n)
		if code != http.StatusOK {
			reason := metav1.StatusReasonInternalError
			if code == http.StatusNotFound {
				reason = metav1.StatusReasonNotFound
			}
			writeJSON(w, code, metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
				Status: metav1.StatusFailure, Code: int32(code), Reason: reason, Message: "builders " + parts[1] + ": " + string(reason)})
			return
		}
		writeJSON(w, http.StatusOK, s.builder(namespace, parts[1], mark))
	default:
		writeJSON(w, http.StatusNotFound, metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
			Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound, Message: r.Method + " " + r.URL.Path})
	}
}

// builder is a Builder whose reconcile request the controller has handled
// when mark is not nil, marking its status.
func (s *fakeAPIServer) builder(namespace, name string, mark func(*v1alpha1.BuilderStatus)) *v1alpha1.Builder {
	b := &v1alpha1.Builder{
		TypeMeta:   metav1.TypeMeta{APIVersion: "buildsmith.dev/v1alpha1", Kind: "Builder"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Generation: 1},
	}
	if mark != nil {
		b.Status.LastHandledReconcileAt = s.requested[name]
		b.Status.ObservedGeneration = 1
		mark(&b.Status)
	}
	return b
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// takeRequests returns the requests made so far, and forgets them.
func (s *fakeAPIServer) takeRequests() []fakeRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.requests
	s.requests = nil
	return r
}

// writeKubeconfig writes a kubeconfig of two clusters, each with its user
// and context: decoy (the current context, namespace decoy-ns, token
// decoy-token; a plain HTTP server) and right (namespace right-ns, token right-token; a TLS
// server, whose CA it holds). It returns its path and the path of a file
// of right's CA certificate.
func writeKubeconfig(t *testing.T, decoy, right *fakeAPIServer) (kubeconfig, caFile string) {
	dir := t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: right.Certificate().Raw})
	caFile = filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca, 0o600); err != nil {
		t.Fatal(err)
	}
	config := clientcmdapi.NewConfig()
	config.Clusters["decoy"] = &clientcmdapi.Cluster{Server: decoy.URL}
	config.Clusters["right"] = &clientcmdapi.Cluster{Server: right.URL, CertificateAuthorityData: ca}
	config.AuthInfos["decoy-user"] = &clientcmdapi.AuthInfo{Token: "decoy-token"}
	config.AuthInfos["right-user"] = &clientcmdapi.AuthInfo{Token: "right-token"}
	config.Contexts["decoy-context"] = &clientcmdapi.Context{Cluster: "decoy", AuthInfo: "decoy-user", Namespace: "decoy-ns"}
	config.Contexts["right-context"] = &clientcmdapi.Context{Cluster: "right", AuthInfo: "right-user", Namespace: "right-ns"}
	config.CurrentContext = "decoy-context"
	kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*config, kubeconfig); err != nil {
		t.Fatal(err)
	}
	return kubeconfig, caFile
}

// TestConnectionFlags checks that reconcile and status take kubectl's
// connection flags, and go where they say, as whom they say.
func TestConnectionFlags(t *testing.T) {
	decoy, right := newFakeAPIServer(t, false), newFakeAPIServer(t, true)
	kubeconfig, caFile := writeKubeconfig(t, decoy, right)
	for _, tc := range []struct {
		args   []string
		server *fakeAPIServer // that the requests go to
		method string
		path   string            // of the last request
		header map[string]string // headers of every request, values joined with ","
	}{
		// decoy is plain HTTP, to which clientcmd sends no credentials.
		{[]string{"status"}, decoy, "GET", "/apis/buildsmith.dev/v1alpha1/namespaces/decoy-ns/receivers", map[string]string{"Authorization": ""}},
		{[]string{"status", "--context", "right-context"}, right, "GET", "/apis/buildsmith.dev/v1alpha1/namespaces/right-ns/receivers",
			map[string]string{"Authorization": "Bearer right-token"}},
		{[]string{"status", "--context=right-context", "-n", "team"}, right, "GET", "/apis/buildsmith.dev/v1alpha1/namespaces/team/receivers",
			map[string]string{"Authorization": "Bearer right-token"}},
		{[]string{"status", "-A", "--context", "right-context"}, right, "GET", "/apis/buildsmith.dev/v1alpha1/receivers", nil},
		// The current context, with its cluster and user overridden.
		{[]string{"status", "--cluster", "right", "--user", "right-user", "--namespace", "team"}, right, "GET",
			"/apis/buildsmith.dev/v1alpha1/namespaces/team/receivers", map[string]string{"Authorization": "Bearer right-token"}},
		{[]string{"status", "-s", right.URL, "--certificate-authority", caFile, "--token", "flag-token",
			"--as", "alice", "--as-group", "dev", "--as-group", "ops", "--as-uid", "42", "--as-user-extra", "scopes=a", "--as-user-extra=scopes=b"},
			right, "GET", "/apis/buildsmith.dev/v1alpha1/namespaces/decoy-ns/receivers",
			map[string]string{"Authorization": "Bearer flag-token", "Impersonate-User": "alice", "Impersonate-Group": "dev,ops",
				"Impersonate-Uid": "42", "Impersonate-Extra-Scopes": "a,b"}},
		{[]string{"status", "--server", right.URL, "--insecure-skip-tls-verify"}, right, "GET",
			"/apis/buildsmith.dev/v1alpha1/namespaces/decoy-ns/receivers", map[string]string{"Authorization": "Bearer decoy-token"}},
		// Flags after the argument, as kubectl takes them.
		{[]string{"reconcile", "builder/app", "--context", "right-context", "-n", "team"}, right, "PATCH",
			"/apis/buildsmith.dev/v1alpha1/namespaces/team/builders/app", map[string]string{"Authorization": "Bearer right-token"}},
	} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"--kubeconfig", kubeconfig}, tc.args[1:]...)
		if code := run(append([]string{tc.args[0]}, args...), nil, &stdout, &stderr); code != 0 {
			t.Errorf("%q: exit %d: %s", tc.args, code, stderr.String())
			continue
		}
		other := decoy
		if tc.server == decoy {
			other = right
		}
		if r := other.takeRequests(); len(r) > 0 {
			t.Errorf("%q: %d requests to the other server, the first %s %s", tc.args, len(r), r[0].method, r[0].path)
		}
		requests := tc.server.takeRequests()
		if len(requests) == 0 {
			t.Errorf("%q: no request", tc.args)
			continue
		}
		if last := requests[len(requests)-1]; last.method != tc.method || last.path != tc.path {
			t.Errorf("%q: the last request is %s %s, want %s %s", tc.args, last.method, last.path, tc.method, tc.path)
		}
		for _, r := range requests {
			for key, want := range tc.header {
				if got := strings.Join(r.header.Values(key), ","); got != want {
					t.Errorf("%q: %s %s: %s %q, want %q", tc.args, r.method, r.path, key, got, want)
				}
			}
		}
	}

	// Without the CA, the TLS server is not trusted: the flags above are
	// what made it so.
	var stdout, stderr bytes.Buffer
	if code := run([]string{"status", "--kubeconfig", kubeconfig, "--server", right.URL}, nil, &stdout, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "certificate") {
		t.Errorf("status with --server of a TLS server whose CA is not given: exit %d, stderr %q; want exit 1 and a certificate error", code, stderr.String())
	}
	// A context the kubeconfig does not have is an error, not the current one.
	stderr.Reset()
	if code := run([]string{"status", "--kubeconfig", kubeconfig, "--context", "missing"}, nil, &stdout, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), `context "missing" does not exist`) {
		t.Errorf("status --context missing: exit %d, stderr %q; want exit 1, context not found", code, stderr.String())
	}
	if r := slices.Concat(decoy.takeRequests(), right.takeRequests()); len(r) > 0 {
		t.Errorf("%d requests (%s %s first) from commands that must not have reached a server", len(r), r[0].method, r[0].path)
	}
}

// TestRequestTimeout checks --request-timeout: 30s by default, as before
// the flag; 0 for none.
func TestRequestTimeout(t *testing.T) {
	decoy, right := newFakeAPIServer(t, false), newFakeAPIServer(t, true)
	kubeconfig, _ := writeKubeconfig(t, decoy, right)
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{nil, 30 * time.Second},
		{[]string{"--request-timeout", "5s"}, 5 * time.Second},
		{[]string{"--request-timeout=2"}, 2 * time.Second}, // seconds, as kubectl reads it
		{[]string{"--request-timeout", "0"}, 0},
	} {
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		cf := newConnectionFlags()
		cf.AddFlags(fs)
		if err := fs.Parse(append([]string{"--kubeconfig", kubeconfig}, tc.args...)); err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		config, err := cf.ToRESTConfig()
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if config.Timeout != tc.want {
			t.Errorf("%q: timeout %v, want %v", tc.args, config.Timeout, tc.want)
		}
	}
}

// TestConnectionFlagsHelp checks that -h lists kubectl's connection flags,
// as kubectl does (pflag's double dashes), status its output flag, and
// reconcile every kind.
func TestConnectionFlagsHelp(t *testing.T) {
	for _, command := range []string{"reconcile", "status"} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{command, "-h"}, nil, &stdout, &stderr); code != 0 {
			t.Fatalf("%s -h: exit %d: %s", command, code, stderr.String())
		}
		help := stdout.String()
		wants := []string{"--kubeconfig string", "--context string", "-n, --namespace string", "-s, --server string",
			"--token string", "--as string", "--as-group stringArray", "--as-uid string", "--as-user-extra stringArray", "--insecure-skip-tls-verify ",
			"--certificate-authority string", "--request-timeout string", `(default "30s")`}
		switch command {
		case "status":
			wants = append(wants, "-A, --all-namespaces", "-o, --output string", "(wide, json, yaml,", "jsonpath")
		case "reconcile":
			wants = append(wants, "--wait", "--timeout duration", "clusterstore, buildpack, clusterstack, clusterlifecycle, clusterbuilder, builder")
		}
		for _, want := range wants {
			if !strings.Contains(help, want) {
				t.Errorf("%s -h does not list %q:\n%s", command, want, help)
			}
		}
		for _, unwanted := range []string{"panic", "(default false)", "(default [])", "--password", "--username", "--proxy-url"} {
			if strings.Contains(help, unwanted) {
				t.Errorf("%s -h has %q:\n%s", command, unwanted, help)
			}
		}
	}
}

// TestReconcileWait checks reconcile --wait against a fake API server whose
// Builders answer as the names say.
func TestReconcileWait(t *testing.T) {
	decoy, right := newFakeAPIServer(t, false), newFakeAPIServer(t, true)
	kubeconfig, _ := writeKubeconfig(t, decoy, right)
	ready := func(s *v1alpha1.BuilderStatus) {
		s.LatestImage = "registry.example.com/team/app@sha256:" + strings.Repeat("a", 64)
		s.MarkReady()
	}
	right.get = func(name string, n int) (int, func(*v1alpha1.BuilderStatus)) {
		switch {
		case name == "ready-later" && n < 2, name == "ignored":
			return http.StatusOK, nil
		case name == "ready-later":
			return http.StatusOK, ready
		case name == "flaky" && n == 0, name == "unreadable":
			return http.StatusInternalServerError, nil
		case name == "flaky":
			return http.StatusOK, ready
		case name == "stalled":
			return http.StatusOK, func(s *v1alpha1.BuilderStatus) {
				s.MarkStalled("BuildpackNotFound", "the store has no buildpack example/hello")
			}
		}
		return http.StatusNotFound, nil // deleted since the request
	}
	for _, tc := range []struct {
		name    string
		timeout string
		code    int
		out     string
		error   string
		gets    int // how many GETs at least
	}{
		{"ready-later", "1m", 0, "builder/ready-later: Ready registry.example.com/team/app@sha256:", "", 3},
		{"flaky", "1m", 0, "builder/flaky: Ready registry.example.com/team/app@sha256:", "", 2},
		{"stalled", "1m", 1, "reconcile requested", "builder/stalled: not Ready, and will not be without a change: Ready=False BuildpackNotFound: the store has no buildpack example/hello", 1},
		{"deleted", "1m", 1, "reconcile requested", `builder/deleted: builders deleted: NotFound`, 1},
		{"ignored", "1s", 1, "reconcile requested", "builder/ignored: the controller has not acted on the request after 1s (is it running?); no Ready condition yet", 2},
		{"unreadable", "1s", 1, "reconcile requested", "builder/unreadable: not read within 1s: ", 2},
	} {
		var stdout, stderr bytes.Buffer
		start := time.Now()
		code := run([]string{"reconcile", "builder/" + tc.name, "--wait", "--timeout", tc.timeout, "--kubeconfig", kubeconfig, "--context", "right-context"},
			nil, &stdout, &stderr)
		elapsed := time.Since(start)
		if code != tc.code || !strings.Contains(stdout.String(), tc.out) || (tc.error != "" && !strings.Contains(stderr.String(), tc.error)) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
				tc.name, code, stdout.String(), stderr.String(), tc.code, tc.out, tc.error)
		}
		// Done when the answer says so, not when the timeout runs out.
		if tc.timeout == "1m" && elapsed > 20*time.Second {
			t.Errorf("%s: took %v", tc.name, elapsed)
		}
		right.mu.Lock()
		gets := right.gets[tc.name]
		right.mu.Unlock()
		if gets < tc.gets {
			t.Errorf("%s: %d GETs, want at least %d", tc.name, gets, tc.gets)
		}
	}
}
