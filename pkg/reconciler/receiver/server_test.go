package receiver

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

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

// fixture is a server and a dispatcher over in-memory caches: what the
// server records in a Receiver's status is handed to the dispatcher as the
// informers would, and the fixture records what it wakes.
type fixture struct {
	t        *testing.T
	s        *server
	d        *dispatcher
	secrets  *secretMap
	indexers map[string]cache.Indexer // by kind
	now      time.Time
	records  int // status writes
	mu       sync.Mutex
	woken    []string // kind namespace/name
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t, secrets: &secretMap{secrets: map[string]*corev1.Secret{}}, indexers: map[string]cache.Indexer{},
		now: time.Unix(1700000000, 0)}
	for _, kind := range []string{"ClusterStore", "ClusterStack", "ClusterLifecycle", "Buildpack", "Receiver"} {
		f.indexers[kind] = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{repositoryIndex: repositoriesOf, webhookIndex: webhookPathOf})
	}
	var kinds []wakeable
	for _, kind := range []string{"ClusterStore", "ClusterStack", "ClusterLifecycle", "Buildpack"} {
		kinds = append(kinds, wakeable{kind: kind, namespaced: kind == "Buildpack", indexer: f.indexers[kind]})
	}
	f.d = &dispatcher{kinds: kinds, systemNamespace: "buildsmith", dispatched: map[types.UID]metav1.MicroTime{},
		enqueue: func(kind string, key types.NamespacedName) bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.woken = append(f.woken, fmt.Sprintf("%s %s", kind, key))
			return true
		}}
	opts := DefaultServerOptions()
	f.s = &server{receivers: f.indexers["Receiver"], secrets: f.secrets, kinds: kinds, systemNamespace: "buildsmith",
		opts: opts, synced: func() bool { return true },
		now: func() time.Time {
			f.now = f.now.Add(time.Millisecond) // a notification at each millisecond
			return f.now
		},
		record: func(_ context.Context, rc *v1alpha1.Receiver, n v1alpha1.ReceiverNotification) error {
			// As the informers hand the status write to every replica.
			f.records++
			updated := rc.DeepCopy()
			updated.Status.LastNotification = &n
			f.d.dispatch(updated)
			return nil
		},
		slots: newSlots(opts.Concurrent, opts.NamespaceConcurrent), rates: newNamespaceRates(opts.EventsPerSecond, opts.Burst),
		recent: map[types.UID]recorded{}}
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

func (f *fixture) takeWoken() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.woken
	f.woken = nil
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
	platform := f.readyReceiver("buildsmith", "registry", v1alpha1.ReceiverDistribution, "platform-token-0123456789")
	tenant := f.readyReceiver("team-a", "registry", v1alpha1.ReceiverDistribution, "tenant-token-0123456789")
	onlyOther := f.readyReceiver("buildsmith", "only-other", v1alpha1.ReceiverDistribution, "other-token-0123456789",
		v1alpha1.ReceiverResource{Kind: "ClusterStack", Name: "other"})
	notReady := f.readyReceiver("buildsmith", "not-ready", v1alpha1.ReceiverDistribution, "not-ready-token-0123456789")
	notReady.Status.MarkRetrying("SecretNotFound", "gone", "retrying")
	auth := func(token string) []string { return []string{"Authorization", "Bearer " + token} }
	run := distributionPush("registry.example.com", "stacks/run", "jammy")

	for _, tc := range []struct {
		name   string
		path   string
		body   []byte
		header []string
		status int
		woken  []string
	}{
		{"the platform's Receiver wakes the cluster kinds and its namespace's Buildpacks", platform.Status.WebhookPath, run, auth("platform-token-0123456789"),
			http.StatusAccepted, []string{"ClusterStack /base"}},
		{"the same push within a second: coalesced", platform.Status.WebhookPath, run, auth("platform-token-0123456789"), http.StatusAccepted, nil},
		// A multi-platform push: each platform's manifest by digest, then
		// the index under its tag; the last wakes again, the tag moved.
		{"a platform's manifest by digest", platform.Status.WebhookPath, distributionPush("registry.example.com", "stacks/run", ""),
			auth("platform-token-0123456789"), http.StatusAccepted, []string{"ClusterStack /base"}},
		{"then the index under its tag", platform.Status.WebhookPath, run, auth("platform-token-0123456789"),
			http.StatusAccepted, []string{"ClusterStack /base"}},
		{"a tenant's Receiver wakes its namespace's Buildpacks alone", tenant.Status.WebhookPath, run, auth("tenant-token-0123456789"),
			http.StatusAccepted, []string{"Buildpack team-a/go"}},
		{"a mirror is read too, and resources limit what is woken", onlyOther.Status.WebhookPath,
			distributionPush("mirror.example.com", "stacks/run", "jammy"), auth("other-token-0123456789"), http.StatusAccepted, []string{"ClusterStack /other"}},
		{"resources: the push of a stack it may not wake", onlyOther.Status.WebhookPath,
			distributionPush("registry.example.com", "stacks/build", "jammy"), auth("other-token-0123456789"), http.StatusAccepted, nil},
		{"a repository nothing reads", platform.Status.WebhookPath, distributionPush("registry.example.com", "apps/web", "1"),
			auth("platform-token-0123456789"), http.StatusAccepted, nil},
		{"another Receiver's token", platform.Status.WebhookPath, run, auth("tenant-token-0123456789"), http.StatusUnauthorized, nil},
		{"no token", platform.Status.WebhookPath, run, nil, http.StatusUnauthorized, nil},
		{"an unknown path", "/hook/0123", run, auth("platform-token-0123456789"), http.StatusNotFound, nil},
		{"a Receiver that is not Ready", notReady.Status.WebhookPath, run, auth("not-ready-token-0123456789"), http.StatusNotFound, nil},
		{"not JSON", platform.Status.WebhookPath, []byte("<html/>"), auth("platform-token-0123456789"), http.StatusBadRequest, nil},
		{"over a MiB", platform.Status.WebhookPath, bytes.Repeat([]byte(" "), receiver.MaxBody+1), auth("platform-token-0123456789"),
			http.StatusRequestEntityTooLarge, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := f.post(tc.path, tc.body, tc.header...)
			got := f.takeWoken()
			if w.Code != tc.status || fmt.Sprint(got) != fmt.Sprint(tc.woken) {
				t.Errorf("status %d, woken %v; want %d, %v", w.Code, got, tc.status, tc.woken)
			}
		})
	}

	// A second later the same push wakes the stack again.
	f.now = f.now.Add(coalesceWindow)
	if w := f.post(platform.Status.WebhookPath, run, auth("platform-token-0123456789")...); w.Code != http.StatusAccepted ||
		fmt.Sprint(f.takeWoken()) != "[ClusterStack /base]" {
		t.Errorf("a second later: status %d, want the stack woken again", w.Code)
	}

	// A new token: the old path is refused until the Receiver's status
	// has the new one.
	f.secrets.set("buildsmith", "registry-token", "rotated-0123456789")
	if w := f.post(platform.Status.WebhookPath, run, auth("rotated-0123456789")...); w.Code != http.StatusNotFound {
		t.Errorf("the old path after the token changed: %d, want 404", w.Code)
	}
}

// TestServerRateLimit: one namespace's Receivers sending more
// notifications that wake something than its burst are refused with 429
// and Retry-After, whichever of them sends; another namespace's are not.
// A notification like the last one, within a second, costs nothing and is
// not counted.
func TestServerRateLimit(t *testing.T) {
	f := newFixture(t)
	burst := f.s.opts.Burst
	for i := range burst + 10 {
		f.add(&v1alpha1.Buildpack{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: fmt.Sprint("bp-", i)},
			Spec: v1alpha1.BuildpackSpec{Image: fmt.Sprint("registry.example.com/x/y-", i)}})
	}
	f.add(&v1alpha1.Buildpack{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "bp"},
		Spec: v1alpha1.BuildpackSpec{Image: "registry.example.com/x/y-0"}})
	noisy := f.readyReceiver("team-a", "noisy", v1alpha1.ReceiverGeneric, "noisy-0123456789")
	second := f.readyReceiver("team-a", "second", v1alpha1.ReceiverGeneric, "second-0123456789")
	calm := f.readyReceiver("team-b", "calm", v1alpha1.ReceiverGeneric, "calm-token-0123456789")
	push := func(i int) []byte { return fmt.Appendf(nil, `{"repository": "registry.example.com/x/y-%d"}`, i) }
	codes := map[int]int{}
	for i := range burst + 10 {
		sender := noisy
		if i%2 == 1 {
			sender = second
		}
		w := f.post(sender.Status.WebhookPath, push(i))
		codes[w.Code]++
		if w.Code == http.StatusTooManyRequests && w.Header().Get("Retry-After") == "" {
			t.Error("a 429 without Retry-After")
		}
	}
	if codes[http.StatusAccepted] != burst || codes[http.StatusTooManyRequests] != 10 || f.records != burst {
		t.Errorf("answers to %d notifications at once: %v, %d recorded; want %d taken and recorded, the rest 429", burst+10, codes, f.records, burst)
	}
	if w := f.post(noisy.Status.WebhookPath, push(burst-2)); w.Code != http.StatusAccepted || f.records != burst {
		t.Errorf("the last notification again: %d, %d recorded; want 202, nothing recorded", w.Code, f.records)
	}
	if w := f.post(calm.Status.WebhookPath, push(0)); w.Code != http.StatusAccepted {
		t.Errorf("another namespace's notification: %d, want 202", w.Code)
	}
}

// TestServerSlots: one namespace's notifications read at once are bounded,
// so a slow sender holds its namespace's reads only.
func TestServerSlots(t *testing.T) {
	s := newSlots(3, 2)
	var releases []func()
	for _, ns := range []string{"a", "a"} {
		release, ok := s.take(ns)
		if !ok {
			t.Fatalf("slot %d of namespace %s refused", len(releases)+1, ns)
		}
		releases = append(releases, release)
	}
	if _, ok := s.take("a"); ok {
		t.Error("a third read of namespace a taken; want its 2 at most")
	}
	release, ok := s.take("b")
	if !ok {
		t.Fatal("namespace b refused while a is at its bound")
	}
	if _, ok := s.take("c"); ok {
		t.Error("a fourth read in all taken; want 3 at most")
	}
	release()
	releases[0]()
	if _, ok := s.take("a"); !ok {
		t.Error("namespace a refused after one of its reads ended")
	}
}

// TestDispatchOnce: a notification recorded wakes once on each replica;
// a status that goes back to an older one (a stale copy written), or the
// one a replica found when it started, wakes nothing.
func TestDispatchOnce(t *testing.T) {
	f := newFixture(t)
	f.add(&v1alpha1.Buildpack{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "go"},
		Spec: v1alpha1.BuildpackSpec{Image: "registry.example.com/buildpacks/go:1"}})
	rc := f.readyReceiver("team-a", "r", v1alpha1.ReceiverGeneric, "token-0123456789")
	at := func(seconds int64) *v1alpha1.Receiver {
		c := rc.DeepCopy()
		c.Status.LastNotification = &v1alpha1.ReceiverNotification{ReceivedAt: metav1.NewMicroTime(time.Unix(seconds, 0)),
			Repositories: []string{"registry.example.com/buildpacks/go"}}
		return c
	}
	f.d.seen(at(100))
	for _, tc := range []struct {
		rc    *v1alpha1.Receiver
		woken int
	}{{at(100), 0}, {at(101), 1}, {at(101), 0}, {at(99), 0}, {at(102), 1}} {
		if got := f.d.dispatch(tc.rc); got != tc.woken {
			t.Errorf("dispatch of the notification at %v: %d woken, want %d", tc.rc.Status.LastNotification.ReceivedAt.Unix(), got, tc.woken)
		}
	}
}

// TestReadToken: the token is the Secret's "token"; a missing Secret
// waits for it, one without a token is a mistake to mend.
func TestReadToken(t *testing.T) {
	secrets := &secretMap{secrets: map[string]*corev1.Secret{"team/empty": {Data: map[string][]byte{"other": []byte("x")}}}}
	secrets.set("team", "good", "t0k3n-0123456789")
	secrets.set("team", "short", "t0k3n")
	rc := func(secret string) *v1alpha1.Receiver {
		return &v1alpha1.Receiver{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "r"},
			Spec: v1alpha1.ReceiverSpec{SecretRef: v1alpha1.LocalSecretReference{Name: secret}}}
	}
	if token, err := readToken(context.Background(), secrets, rc("good")); err != nil || string(token) != "t0k3n-0123456789" {
		t.Errorf("readToken(good) = %q, %v", token, err)
	}
	for _, secret := range []string{"empty", "short"} {
		_, err := readToken(context.Background(), secrets, rc(secret))
		if f, ok := failure.As(err); !ok || f.Class != failure.Permanent || f.Reason != ReasonInvalidToken || !strings.Contains(err.Error(), `"token" of 16 characters`) {
			t.Errorf("readToken(%s): %v, want Permanent %s naming the key and the length", secret, err, ReasonInvalidToken)
		}
	}
	_, err := readToken(context.Background(), secrets, rc("missing"))
	if f, ok := failure.As(err); !ok || f.Class != failure.Waiting || f.Reason != registry.ReasonSecretNotFound {
		t.Errorf("readToken(missing): %v, want Waiting %s", err, registry.ReasonSecretNotFound)
	}
}
