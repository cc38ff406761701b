package reconciler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

func secret(namespace, name, value string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(value)}}
}

// changes records the Secrets SecretWatches hands to subscribers. A
// change reaches them once the watch's store holds it: a read after it
// reads it.
type changes struct {
	mu      sync.Mutex
	names   []string
	changed chan struct{} // closed, and replaced, at each change
}

func newChanges() *changes { return &changes{changed: make(chan struct{})} }

func (c *changes) add(obj any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := obj.(*corev1.Secret); ok {
		c.names = append(c.names, s.Namespace+"/"+s.Name)
		close(c.changed)
		c.changed = make(chan struct{})
	}
}

func (c *changes) seen() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.names...)
}

// await returns once cond holds of the changes seen, woken by each.
func (c *changes) await(t *testing.T, what string, cond func(seen []string) bool) {
	t.Helper()
	for {
		c.mu.Lock()
		ok, changed := cond(c.names), c.changed
		c.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-time.After(5 * time.Second): // reached only when the test fails
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func contains(name string) func([]string) bool {
	return func(seen []string) bool { return slices.Contains(seen, name) }
}

// TestSecretWatchesReadOnlyWhatIsAsked: a Secret is read (and watched) only
// once someone asks for it; its changes, creation included, reach the
// subscribers and the next read; the Secrets beside it are neither read nor
// passed on.
func TestSecretWatchesReadOnlyWhatIsAsked(t *testing.T) {
	client := fake.NewClientset(secret("team", "registry", "v1"), secret("team", "helm-release", "big"))
	s := NewSecretWatches(t.Context(), client, time.Hour, DefaultSecretLimits())
	got := newChanges()
	s.Subscribe(got.add)

	if s.Watched() != 0 {
		t.Fatalf("%d Secrets watched before any read", s.Watched())
	}
	read, err := s.Get(t.Context(), "team", "registry")
	if err != nil || string(read.Data[corev1.DockerConfigJsonKey]) != "v1" {
		t.Fatalf("Get: %v, %v", read, err)
	}
	if _, err := s.Get(t.Context(), "team", "missing"); !apierrors.IsNotFound(err) {
		t.Fatalf("Get of a missing Secret: %v, want NotFound", err)
	}
	if s.Watched() != 2 {
		t.Errorf("%d Secrets watched, want the 2 asked for", s.Watched())
	}
	for _, action := range client.Actions() {
		if action.GetVerb() == "list" {
			t.Errorf("listed Secrets (%v): only get and watch may be used", action)
		}
		if get, ok := action.(k8stesting.GetAction); ok && get.GetName() == "helm-release" {
			t.Errorf("read a Secret nobody asked for: %v", action)
		}
	}
	if len(got.seen()) != 0 {
		t.Errorf("the first reads were passed on as changes: %v", got.seen())
	}

	ctx := context.Background()
	if _, err := client.CoreV1().Secrets("team").Update(ctx, secret("team", "registry", "v2"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Secrets("team").Create(ctx, secret("team", "missing", "now here"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Secrets("team").Update(ctx, secret("team", "helm-release", "bigger"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got.await(t, "both changes", func(seen []string) bool {
		return slices.Contains(seen, "team/registry") && slices.Contains(seen, "team/missing")
	})
	for _, name := range got.seen() {
		if name != "team/registry" && name != "team/missing" {
			t.Errorf("passed on a change of %s, which nobody asked for", name)
		}
	}
	if read, err := s.Get(t.Context(), "team", "registry"); err != nil || string(read.Data[corev1.DockerConfigJsonKey]) != "v2" {
		t.Errorf("the updated Secret: %v, %v", read, err)
	}
	if read, err := s.Get(t.Context(), "team", "missing"); err != nil || string(read.Data[corev1.DockerConfigJsonKey]) != "now here" {
		t.Errorf("the created Secret: %v, %v", read, err)
	}
}

// TestSecretWatchesForgetIdle: a Secret not read for the idle time is no
// longer watched (nor held); reading it again watches it again.
func TestSecretWatchesForgetIdle(t *testing.T) {
	client := fake.NewClientset(secret("team", "a", "1"), secret("team", "b", "2"))
	s := NewSecretWatches(t.Context(), client, time.Minute, DefaultSecretLimits())
	clock := clocktesting.NewFakeClock(time.Now())
	s.clock = clock
	for _, name := range []string{"a", "b"} {
		if _, err := s.Get(t.Context(), "team", name); err != nil {
			t.Fatal(err)
		}
	}
	clock.Step(40 * time.Second)
	if _, err := s.Get(t.Context(), "team", "a"); err != nil {
		t.Fatal(err)
	}
	clock.Step(30 * time.Second)
	if !s.forgetIdle() || s.Watched() != 1 {
		t.Fatalf("after b's idle minute: %d watched, want a only", s.Watched())
	}
	clock.Step(time.Minute)
	if s.forgetIdle() || s.Watched() != 0 {
		t.Fatalf("after a's idle minute: %d watched, want none", s.Watched())
	}
	if read, err := s.Get(t.Context(), "team", "b"); err != nil || read.Name != "b" {
		t.Fatalf("read again: %v, %v", read, err)
	}
}

// TestSecretWatchesReportRefusal: when the API server refuses the read
// (RBAC narrower than the controller was told), Get says so at once rather
// than waiting out its timeout: SecretForbidden, waiting (RBAC is fixed
// without touching the object, so it polls), naming the Secret and what
// the controller needs. The watch is closed, so that its reflector does
// not ask again in the background: each later read asks once.
func TestSecretWatchesReportRefusal(t *testing.T) {
	client := fake.NewClientset()
	var mu sync.Mutex
	gets := 0
	client.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		gets++
		mu.Unlock()
		return true, nil, apierrors.NewForbidden(corev1.Resource("secrets"), "registry",
			fmt.Errorf(`User "system:serviceaccount:buildsmith:buildsmith-controller" cannot get resource "secrets" in the namespace "team"`))
	})
	asked := func() int {
		mu.Lock()
		defer mu.Unlock()
		return gets
	}
	s := NewSecretWatches(t.Context(), client, time.Hour, DefaultSecretLimits())
	s.syncTimeout = time.Minute
	start := time.Now()
	w, err := s.watch(types.NamespacedName{Namespace: "team", Name: "registry"}) // the watch Get starts
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Get(t.Context(), "team", "registry")
	if !apierrors.IsForbidden(err) {
		t.Fatalf("Get: %v, want Forbidden", err)
	}
	if took := time.Since(start); took >= s.syncTimeout {
		t.Errorf("took %v: waited out the timeout", took)
	}
	if f, ok := failure.As(err); !ok || f.Class != failure.Waiting || f.Reason != ReasonSecretForbidden ||
		!strings.Contains(err.Error(), "team/registry") || !strings.Contains(err.Error(), "get and watch on Secrets in namespace team") {
		t.Errorf("Get: %v, want a waiting %s naming the Secret and the verbs needed", err, ReasonSecretForbidden)
	}
	if s.Watched() != 0 {
		t.Errorf("%d Secrets still watched after a forbidden read", s.Watched())
	}
	// Its reflector would have asked again within 1.6 s: it has returned,
	// and asks no more.
	select {
	case <-w.stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("the refused Secret's watch still runs")
	}
	before := asked()
	if _, err := s.Get(t.Context(), "team", "registry"); !apierrors.IsForbidden(err) {
		t.Fatalf("Get again: %v, want Forbidden", err)
	}
	if n := asked() - before; n != 1 {
		t.Errorf("the next read asked %d times, want once", n)
	}
}

// TestSecretWatchesNamespaces: with Namespaces set, a Secret elsewhere is
// refused before any request and nothing is watched for it, while those
// of the namespaces listed are read as ever.
func TestSecretWatchesNamespaces(t *testing.T) {
	client := fake.NewClientset(secret("builds", "registry", "v1"), secret("team", "registry", "v1"))
	limits := DefaultSecretLimits()
	limits.Namespaces = []string{"builds"}
	s := NewSecretWatches(t.Context(), client, time.Hour, limits)
	_, err := s.Get(t.Context(), "team", "registry")
	if f, ok := failure.As(err); !ok || f.Class != failure.Permanent || f.Reason != ReasonSecretNamespaceNotAllowed ||
		!strings.Contains(err.Error(), "team/registry") || !strings.Contains(err.Error(), "--secret-namespaces") {
		t.Errorf("a Secret of an unlisted namespace: %v, want a permanent %s naming it and the flag", err, ReasonSecretNamespaceNotAllowed)
	}
	if len(client.Actions()) != 0 || s.Watched() != 0 {
		t.Errorf("requests %v, %d watched: want none for a refused Secret", client.Actions(), s.Watched())
	}
	if read, err := s.Get(t.Context(), "builds", "registry"); err != nil || read.Namespace != "builds" {
		t.Errorf("a Secret of a listed namespace: %v, %v", read, err)
	}
}

// TestSecretWatchLimits: one tenant asking for more Secrets than its
// namespace may have watched is told so (SecretWatchLimit, naming the flag)
// while another tenant's Secrets are read as ever; the total bound holds
// too; a Secret over the size limit is kept without its data and refused
// (SecretTooLarge), and read again once it shrinks.
func TestSecretWatchLimits(t *testing.T) {
	client := fake.NewClientset(secret("calm", "registry", "v1"))
	limits := SecretLimits{WatchesPerNamespace: 3, Watches: 5, Size: 64}
	s := NewSecretWatches(t.Context(), client, time.Hour, limits)

	for i := range 3 {
		if _, err := s.Get(t.Context(), "hostile", fmt.Sprintf("made-up-%d", i)); !apierrors.IsNotFound(err) {
			t.Fatalf("Get %d: %v, want NotFound", i, err)
		}
	}
	_, err := s.Get(t.Context(), "hostile", "one-more")
	if f, ok := failure.As(err); !ok || f.Reason != ReasonSecretWatchLimit || f.Class != failure.Waiting ||
		!strings.Contains(err.Error(), "--max-secret-watches-per-namespace") {
		t.Errorf("a fourth Secret of one namespace: %v, want a Waiting %s naming the flag", err, ReasonSecretWatchLimit)
	}
	if _, err := s.Get(t.Context(), "hostile", "made-up-0"); !apierrors.IsNotFound(err) {
		t.Errorf("a Secret already watched: %v, want it read as before", err)
	}
	if read, err := s.Get(t.Context(), "calm", "registry"); err != nil || string(read.Data[corev1.DockerConfigJsonKey]) != "v1" {
		t.Errorf("another tenant's Secret: %v, %v", read, err)
	}
	if s.Watched() != 4 {
		t.Errorf("%d Secrets watched, want 4", s.Watched())
	}

	// The total: 4 watched, one more fits, then none in any namespace.
	if _, err := s.Get(t.Context(), "third", "a"); !apierrors.IsNotFound(err) {
		t.Fatalf("Get: %v", err)
	}
	_, err = s.Get(t.Context(), "fourth", "a")
	if f, ok := failure.As(err); !ok || f.Reason != ReasonSecretWatchLimit || !strings.Contains(err.Error(), "--max-secret-watches)") {
		t.Errorf("past the total: %v, want %s naming --max-secret-watches", err, ReasonSecretWatchLimit)
	}

	// Size: a fresh set, so that the watch bounds are out of the way.
	big := secret("calm", "big", strings.Repeat("x", 1000))
	client = fake.NewClientset(big)
	s = NewSecretWatches(t.Context(), client, time.Hour, limits)
	_, err = s.Get(t.Context(), "calm", "big")
	if f, ok := failure.As(err); !ok || f.Reason != ReasonSecretTooLarge || f.Class != failure.Permanent ||
		!strings.Contains(err.Error(), "--max-secret-size") {
		t.Errorf("a 1 KB Secret with a 64 B limit: %v, want a permanent %s naming the flag", err, ReasonSecretTooLarge)
	}
	got := newChanges()
	s.Subscribe(got.add)
	if _, err := client.CoreV1().Secrets("calm").Update(context.Background(), secret("calm", "big", "small"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got.await(t, "the shrunk Secret", contains("calm/big"))
	if read, err := s.Get(t.Context(), "calm", "big"); err != nil || string(read.Data[corev1.DockerConfigJsonKey]) != "small" {
		t.Errorf("the shrunk Secret: %v, %v", read, err)
	}

	// Annotations count: a byte of data under 1 KB of them is refused, and
	// labels, which nothing reads, are not kept.
	noted := secret("calm", "noted", "x")
	noted.Annotations = map[string]string{"tenant.example/note": strings.Repeat("n", 1000)}
	labelled := secret("calm", "labelled", "x")
	labelled.Labels = map[string]string{"tenant.example/label": "v"}
	client = fake.NewClientset(noted, labelled)
	s = NewSecretWatches(t.Context(), client, time.Hour, limits)
	_, err = s.Get(t.Context(), "calm", "noted")
	if f, ok := failure.As(err); !ok || f.Reason != ReasonSecretTooLarge || !strings.Contains(err.Error(), "bytes of data and annotations") {
		t.Errorf("1 KB of annotations with a 64 B limit: %v, want %s counting the annotations", err, ReasonSecretTooLarge)
	}
	if read, err := s.Get(t.Context(), "calm", "labelled"); err != nil || read.Labels != nil || string(read.Data[corev1.DockerConfigJsonKey]) != "x" {
		t.Errorf("a labelled Secret: %+v, %v, want its data without its labels", read, err)
	}
}
