package receiver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/receiver"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// secretMap serves Secrets from a map, as the Secret watches would.
type secretMap struct {
	mu      sync.Mutex
	secrets map[string]*corev1.Secret
}

func (m *secretMap) Get(_ context.Context, namespace, name string) (*corev1.Secret, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.secrets[namespace+"/"+name]; ok {
		return s, nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("secrets"), name)
}

func (m *secretMap) set(namespace, name, token string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.secrets[namespace+"/"+name] = &corev1.Secret{Data: map[string][]byte{TokenKey: []byte(token)}}
}

// fixture is a server over in-memory caches, recording the reconciles it
// asks for.
type fixture struct {
	t        *testing.T
	s        *server
	secrets  *secretMap
	indexers map[string]cache.Indexer // by kind
	now      time.Time
	mu       sync.Mutex
	patched  []string // kind namespace/name
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t, secrets: &secretMap{secrets: map[string]*corev1.Secret{}}, indexers: map[string]cache.Indexer{},
		now: time.Unix(1700000000, 0)}
	for _, kind := range []string{"ClusterStore", "ClusterStack", "ClusterLifecycle", "Buildpack", "Receiver"} {
		f.indexers[kind] = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{repositoryIndex: repositoriesOf, webhookIndex: webhookPathOf})
	}
	var kinds []wakeable
	wakers := map[string]wakeable{}
	for _, kind := range []string{"ClusterStore", "ClusterStack", "ClusterLifecycle", "Buildpack"} {
		k := wakeable{kind: kind, namespaced: kind == "Buildpack", indexer: f.indexers[kind],
			patch: func(_ context.Context, namespace, name string, data []byte) error {
				if !bytes.Contains(data, []byte(v1alpha1.ReconcileRequestedAtAnnotation)) {
					return errors.New("not a reconcile request")
				}
				f.mu.Lock()
				defer f.mu.Unlock()
				f.patched = append(f.patched, fmt.Sprintf("%s %s/%s", kind, namespace, name))
				return nil
			}}
		kinds = append(kinds, k)
		wakers[kind] = k
	}
	f.s = &server{receivers: f.indexers["Receiver"], secrets: f.secrets, kinds: kinds, systemNamespace: "buildsmith",
		opts: DefaultServerOptions(), waker: &waker{kinds: wakers, now: func() time.Time { return f.now }, woken: map[target]time.Time{}},
		synced: func() bool { return true }, slots: make(chan struct{}, 4), limiters: map[types.UID]*rate.Limiter{}}
	return f
}

// add puts objects in their kind's cache.
func (f *fixture) add(objects ...any) {
	for _, o := range objects {
		if err := f.indexers[strings.TrimPrefix(fmt.Sprintf("%T", o), "*v1alpha1.")].Add(o); err != nil {
			f.t.Fatal(err)
		}
	}
}

// readyReceiver is a Ready Receiver of type typ in f's cache, whose Secret
// f holds.
func (f *fixture) readyReceiver(namespace, name, typ, token string, resources ...v1alpha1.ReceiverResource) *v1alpha1.Receiver {
	rc := &v1alpha1.Receiver{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID(namespace + "-" + name)},
		Spec: v1alpha1.ReceiverSpec{Type: typ, SecretRef: v1alpha1.LocalSecretReference{Name: name + "-token"}, Resources: resources}}
	rc.Status.WebhookPath = receiver.WebhookPath([]byte(token), name, namespace)
	rc.Status.MarkReady()
	f.secrets.set(namespace, name+"-token", token)
	f.add(rc)
	return rc
}

func (f *fixture) post(path string, body []byte, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	for i := 0; i < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	f.s.ServeHTTP(w, r)
	return w
}

func (f *fixture) takePatched() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.patched
	f.patched = nil
	return p
}

func distributionPush(host, repository, tag string) []byte {
	return fmt.Appendf(nil, `{"events": [{"action": "push", "target": {"mediaType": "application/vnd.oci.image.index.v1+json",
 "repository": %q, "tag": %q}, "request": {"host": %q}}]}`, repository, tag, host)
}

// TestServer: what a notification wakes, and what it is refused for.
func TestServer(t *testing.T) {
	stack := &v1alpha1.ClusterStack{ObjectMeta: metav1.ObjectMeta{Name: "base"}, Spec: v1alpha1.ClusterStackSpec{
		BuildImage: v1alpha1.ImageSource{Image: "registry.example.com/stacks/build:jammy"},
		RunImage:   v1alpha1.RunImageSource{Image: "registry.example.com/stacks/run:jammy"}}}
	other := &v1alpha1.ClusterStack{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Spec: v1alpha1.ClusterStackSpec{
		BuildImage: v1alpha1.ImageSource{Image: "registry.example.com/other/build"},
		RunImage:   v1alpha1.RunImageSource{Image: "registry.example.com/other/run", Mirrors: []string{"mirror.example.com/stacks/run"}}}}
	teamA := &v1alpha1.Buildpack{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "go"},
		Spec: v1alpha1.BuildpackSpec{Image: "registry.example.com/stacks/run:jammy"}}
	teamB := &v1alpha1.Buildpack{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "go"},
		Spec: v1alpha1.BuildpackSpec{Image: "registry.example.com/stacks/run:jammy"}}
	f := newFixture(t)
	f.add(stack, other, teamA, teamB)
	platform := f.readyReceiver("buildsmith", "registry", v1alpha1.ReceiverDistribution, "platform-token")
	tenant := f.readyReceiver("team-a", "registry", v1alpha1.ReceiverDistribution, "tenant-token")
	onlyOther := f.readyReceiver("buildsmith", "only-other", v1alpha1.ReceiverDistribution, "other-token",
		v1alpha1.ReceiverResource{Kind: "ClusterStack", Name: "other"})
	notReady := f.readyReceiver("buildsmith", "not-ready", v1alpha1.ReceiverDistribution, "not-ready-token")
	notReady.Status.MarkRetrying("SecretNotFound", "gone", "retrying")
	auth := func(token string) []string { return []string{"Authorization", "Bearer " + token} }
	run := distributionPush("registry.example.com", "stacks/run", "jammy")

	for _, tc := range []struct {
		name    string
		path    string
		body    []byte
		header  []string
		status  int
		patched []string
	}{
		{"the platform's Receiver wakes the cluster kinds and its namespace's Buildpacks", platform.Status.WebhookPath, run, auth("platform-token"),
			http.StatusAccepted, []string{"ClusterStack /base"}},
		{"the same push within a second: coalesced", platform.Status.WebhookPath, run, auth("platform-token"), http.StatusAccepted, nil},
		{"a tenant's Receiver wakes its namespace's Buildpacks alone", tenant.Status.WebhookPath, run, auth("tenant-token"),
			http.StatusAccepted, []string{"Buildpack team-a/go"}},
		{"a mirror is read too, and resources limit what is woken", onlyOther.Status.WebhookPath,
			distributionPush("mirror.example.com", "stacks/run", "jammy"), auth("other-token"), http.StatusAccepted, []string{"ClusterStack /other"}},
		{"resources: the push of a stack it may not wake", onlyOther.Status.WebhookPath,
			distributionPush("registry.example.com", "stacks/build", "jammy"), auth("other-token"), http.StatusAccepted, nil},
		{"a repository nothing reads", platform.Status.WebhookPath, distributionPush("registry.example.com", "apps/web", "1"),
			auth("platform-token"), http.StatusAccepted, nil},
		{"another Receiver's token", platform.Status.WebhookPath, run, auth("tenant-token"), http.StatusUnauthorized, nil},
		{"no token", platform.Status.WebhookPath, run, nil, http.StatusUnauthorized, nil},
		{"an unknown path", "/hook/0123", run, auth("platform-token"), http.StatusNotFound, nil},
		{"a Receiver that is not Ready", notReady.Status.WebhookPath, run, auth("not-ready-token"), http.StatusNotFound, nil},
		{"not JSON", platform.Status.WebhookPath, []byte("<html/>"), auth("platform-token"), http.StatusBadRequest, nil},
		{"over a MiB", platform.Status.WebhookPath, bytes.Repeat([]byte(" "), receiver.MaxBody+1), auth("platform-token"),
			http.StatusRequestEntityTooLarge, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := f.post(tc.path, tc.body, tc.header...)
			got := f.takePatched()
			if w.Code != tc.status || fmt.Sprint(got) != fmt.Sprint(tc.patched) {
				t.Errorf("status %d, reconciles asked for %v; want %d, %v", w.Code, got, tc.status, tc.patched)
			}
		})
	}

	// A second later the same push wakes the stack again.
	f.now = f.now.Add(coalesceWindow)
	if w := f.post(platform.Status.WebhookPath, run, auth("platform-token")...); w.Code != http.StatusAccepted ||
		fmt.Sprint(f.takePatched()) != "[ClusterStack /base]" {
		t.Errorf("a second later: status %d, want the stack woken again", w.Code)
	}

	// A new token: the old path is refused until the Receiver's status
	// has the new one.
	f.secrets.set("buildsmith", "registry-token", "rotated")
	if w := f.post(platform.Status.WebhookPath, run, auth("rotated")...); w.Code != http.StatusNotFound {
		t.Errorf("the old path after the token changed: %d, want 404", w.Code)
	}
}

// TestServerRateLimit: a Receiver sending more than its burst is refused
// with 429 and Retry-After, without reading the body; another Receiver is
// not.
func TestServerRateLimit(t *testing.T) {
	f := newFixture(t)
	noisy := f.readyReceiver("team-a", "noisy", v1alpha1.ReceiverGeneric, "a")
	calm := f.readyReceiver("team-b", "calm", v1alpha1.ReceiverGeneric, "b")
	body := []byte(`{"repository": "registry.example.com/x/y"}`)
	codes := map[int]int{}
	for range f.s.opts.Burst + 10 {
		w := f.post(noisy.Status.WebhookPath, body)
		codes[w.Code]++
		if w.Code == http.StatusTooManyRequests && w.Header().Get("Retry-After") == "" {
			t.Error("a 429 without Retry-After")
		}
	}
	if codes[http.StatusAccepted] > f.s.opts.Burst+1 || codes[http.StatusTooManyRequests] < 9 {
		t.Errorf("answers to %d notifications at once: %v; want about %d taken, the rest 429", f.s.opts.Burst+10, codes, f.s.opts.Burst)
	}
	if w := f.post(calm.Status.WebhookPath, body); w.Code != http.StatusAccepted {
		t.Errorf("another Receiver's notification: %d, want 202", w.Code)
	}
}

// TestReadToken: the token is the Secret's "token"; a missing Secret
// waits for it, one without a token is a mistake to mend.
func TestReadToken(t *testing.T) {
	secrets := &secretMap{secrets: map[string]*corev1.Secret{"team/empty": {Data: map[string][]byte{"other": []byte("x")}}}}
	secrets.set("team", "good", "t0k3n")
	rc := func(secret string) *v1alpha1.Receiver {
		return &v1alpha1.Receiver{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "r"},
			Spec: v1alpha1.ReceiverSpec{SecretRef: v1alpha1.LocalSecretReference{Name: secret}}}
	}
	if token, err := readToken(context.Background(), secrets, rc("good")); err != nil || string(token) != "t0k3n" {
		t.Errorf("readToken(good) = %q, %v", token, err)
	}
	_, err := readToken(context.Background(), secrets, rc("missing"))
	if f, ok := failure.As(err); !ok || f.Class != failure.Waiting || f.Reason != registry.ReasonSecretNotFound {
		t.Errorf("readToken(missing): %v, want Waiting %s", err, registry.ReasonSecretNotFound)
	}
	_, err = readToken(context.Background(), secrets, rc("empty"))
	if f, ok := failure.As(err); !ok || f.Class != failure.Permanent || f.Reason != ReasonInvalidToken || !strings.Contains(err.Error(), `"token"`) {
		t.Errorf("readToken(empty): %v, want Permanent %s naming the key", err, ReasonInvalidToken)
	}
}
