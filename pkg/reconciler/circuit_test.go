package reconciler

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
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
	client := registry.New(ctx, registry.Options{})
	f.Down()
	_, err := client.Resolve(ctx, f.Ref("team/app:1"), nil)
	if registry.Reason(err) != registry.ReasonRegistryUnavailable {
		t.Fatalf("Resolve: %v", err)
	}
	woken := make(chan string, 2)
	storePolicy := NewPolicy("ClusterStore", DefaultOptions(), client.Circuits())
	storePolicy.SetEnqueue(func(types.NamespacedName) { woken <- "store" })
	stackPolicy := NewPolicy("ClusterStack", DefaultOptions(), client.Circuits())
	stackPolicy.SetEnqueue(func(types.NamespacedName) { woken <- "stack" })
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
