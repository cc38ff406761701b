package reconciler

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"knative.dev/pkg/controller"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/registry"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// TestCircuitWaitsOfKindsSharingAName: a ClusterStore and a ClusterStack
// both named "demo" failing on the same down registry both wait on it, and
// both are woken.
func TestCircuitWaitsOfKindsSharingAName(t *testing.T) {
	f := registrytest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := registry.New(ctx, registry.Options{LoopbackRegistries: true})
	f.Down()
	_, err := client.As(nil).Resolve(ctx, f.Ref("team/app:1"))
	if registry.Classify(err).Reason != registry.ReasonRegistryUnavailable {
		t.Fatalf("Resolve: %v", err)
	}
	woken := make(chan string, 2)
	storePolicy := NewPolicy("ClusterStore", DefaultOptions(), client.Circuits(), func(types.NamespacedName) { woken <- "store" }, nil)
	stackPolicy := NewPolicy("ClusterStack", DefaultOptions(), client.Circuits(), func(types.NamespacedName) { woken <- "stack" }, nil)
	storePolicy.Finish(ctx, &v1alpha1.ClusterStore{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}, err)
	stackPolicy.Finish(ctx, &v1alpha1.ClusterStack{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}, err)
	if open := client.Circuits().Open(); len(open) != 1 || open[0].Waiters != 2 {
		t.Fatalf("open circuits %+v, want the registry's with 2 waiters", open)
	}
	f.Up()
	got := map[string]bool{}
	for range 2 {
		select {
		case k := <-woken:
			got[k] = true
		case <-time.After(3 * time.Second):
			t.Fatalf("woken: %v", got)
		}
	}
}

// TestObjectThatMovesOnStopsWaiting: an object that waited on a failing
// place and then fails for another reason no longer waits there, so the
// place is not probed on its behalf.
func TestObjectThatMovesOnStopsWaiting(t *testing.T) {
	f := registrytest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := registry.New(ctx, registry.Options{LoopbackRegistries: true})
	f.Down()
	_, err := client.As(nil).Resolve(ctx, f.Ref("team/app:1"))
	policy := NewPolicy("ClusterStore", DefaultOptions(), client.Circuits(), func(types.NamespacedName) {}, nil)
	store := &v1alpha1.ClusterStore{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}
	policy.Finish(ctx, store, err)
	if open := client.Circuits().Open(); len(open) != 1 || open[0].Waiters != 1 {
		t.Fatalf("open circuits %+v, want one with the store waiting", open)
	}
	policy.Finish(ctx, store, failure.Waitingf(registry.ReasonSecretNotFound, "secret gone"))
	if open := client.Circuits().Open(); len(open) != 1 || open[0].Waiters != 0 {
		t.Errorf("open circuits %+v, want the one circuit, nobody waiting", open)
	}
}

// TestHeldBackDuringWidespreadFailure: during a widespread failure of a
// registry (many of its repositories failing, none answering), a call to a
// repository not tried yet is held back. A Ready object so held stays
// Ready, Reconciling saying what it waits for, with no event; an object
// not Ready yet shows Ready=False with the reason, as any waiting one.
func TestHeldBackDuringWidespreadFailure(t *testing.T) {
	f := registrytest.New(t)
	f.Inject("", "/team/bad-", -1, registrytest.Answer(503, nil, ""))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := registry.New(ctx, registry.Options{LoopbackRegistries: true})
	var err error
	for i := 0; ; i++ {
		if _, err = client.As(nil).Resolve(ctx, f.Ref(fmt.Sprintf("team/bad-%d:1", i))); untried(err) {
			break // the registry's failure is widespread now
		}
		if i == 20 {
			t.Fatalf("20 repositories failing, and calls are still sent: %v", err)
		}
	}
	policy := NewPolicy("ClusterStore", DefaultOptions(), client.Circuits(), func(types.NamespacedName) {}, nil)

	ready := &v1alpha1.ClusterStore{ObjectMeta: metav1.ObjectMeta{Name: "ready"}}
	ready.Status.MarkReady()
	if event := policy.Finish(ctx, ready, err); controller.IsPermanentError(event) {
		t.Fatalf("Finish = %v", event)
	}
	c := ready.Status.GetCondition(v1alpha1.ConditionUpToDate)
	if !ready.Status.IsReady() || c == nil || !c.IsFalse() || c.Reason != registry.ReasonRegistryUnavailable ||
		!strings.Contains(c.Message, "; retrying when "+f.Addr+" answers again") ||
		ready.Status.GetCondition(v1alpha1.ConditionReconciling) != nil {
		t.Errorf("a Ready store held back: Ready %+v, UpToDate %+v, Reconciling %+v; want Ready kept, UpToDate saying why, no Reconciling",
			ready.Status.GetCondition(v1alpha1.ConditionReady), c, ready.Status.GetCondition(v1alpha1.ConditionReconciling))
	}

	fresh := &v1alpha1.ClusterStore{ObjectMeta: metav1.ObjectMeta{Name: "new"}}
	policy.Finish(ctx, fresh, err)
	if r := fresh.Status.GetCondition(v1alpha1.ConditionReady); r == nil || !r.IsFalse() || r.Reason != registry.ReasonRegistryUnavailable {
		t.Errorf("a new store held back: Ready %+v, want False %s", r, registry.ReasonRegistryUnavailable)
	}
}

// TestTenantOverFailingRegistriesLimit: a Builder whose namespace already
// waits on its quota of failing registries retries on its own backoff, and
// its Reconciling message names the flag; a Builder of another namespace
// failing on the same registry waits on its circuit as ever.
func TestTenantOverFailingRegistriesLimit(t *testing.T) {
	first, second := registrytest.New(t), registrytest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := registry.New(ctx, registry.Options{LoopbackRegistries: true, Circuits: registry.CircuitOptions{HostsPerTenant: 1}})
	first.Down()
	second.Down()
	policy := NewPolicy("Builder", DefaultOptions(), client.Circuits(), func(types.NamespacedName) {}, nil)
	finish := func(ns, name string, f *registrytest.Registry) *v1alpha1.Builder {
		t.Helper()
		_, err := client.As(nil).Resolve(ctx, f.Ref("team/"+name+":1"))
		if registry.Classify(err).Reason != registry.ReasonRegistryUnavailable {
			t.Fatalf("Resolve: %v", err)
		}
		b := &v1alpha1.Builder{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Generation: 1}}
		policy.Finish(ctx, b, err)
		return b
	}
	message := func(b *v1alpha1.Builder) string {
		if c := b.Status.GetCondition(v1alpha1.ConditionReconciling); c != nil {
			return c.Message
		}
		return ""
	}
	if b := finish("hostile", "a", first); !strings.Contains(message(b), "retrying when") {
		t.Errorf("first registry of the namespace: %q, want a circuit wait", message(b))
	}
	if b := finish("hostile", "b", second); !strings.Contains(message(b), "--max-failing-registries-per-namespace") {
		t.Errorf("second registry of the namespace: %q, want the limit named", message(b))
	}
	if b := finish("calm", "c", second); !strings.Contains(message(b), "retrying when") {
		t.Errorf("another namespace on the second registry: %q, want a circuit wait", message(b))
	}
}

// untried reports whether err is a call held back by a widespread failure.
func untried(err error) bool {
	pe, ok := registry.PlaceOf(err)
	return ok && pe.Untried
}
