package clusterstore

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	rt "github.com/buildsmith/buildsmith/pkg/reconciler/reconcilertest"
	"github.com/buildsmith/buildsmith/pkg/registry"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// TestFollowsVersions: a source with a semver policy reads the highest
// version of its repository in range, by digest, and says which and since
// when in status.chosenTags; the same choice again keeps chosenAt; a new
// version pushed is chosen by the next reconcile; a range nothing matches
// waits (Reconciling, NoMatchingTag) and keeps the last good lists.
func TestFollowsVersions(t *testing.T) {
	f := registrytest.New(t)
	for _, v := range []string{"1.0.0", "1.1.0", "2.0.0"} {
		f.PushBuildpackage("bp/go:"+v, registrytest.Buildpack{ID: "example/go", Version: v, API: "0.10"})
	}
	f.PushBuildpackage("bp/go:latest", registrytest.Buildpack{ID: "example/go", Version: "2.0.0", API: "0.10"})
	repo := f.Addr + "/bp/go"
	store := &v1alpha1.ClusterStore{ObjectMeta: metav1.ObjectMeta{Name: "default", Generation: 1},
		Spec: v1alpha1.ClusterStoreSpec{Sources: []v1alpha1.ImageSource{{Image: repo, Policy: &v1alpha1.TagPolicy{
			Semver: v1alpha1.SemverPolicy{Range: ">=1.0.0 <2"}}}}}}
	ready := rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync, MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute}

	want := func(t *testing.T, got *v1alpha1.ClusterStore, version string) {
		t.Helper()
		digest, err := f.Resolve(repo + ":" + version)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Status.Buildpacks) != 1 || got.Status.Buildpacks[0].Version != version || got.Status.Buildpacks[0].StoreImage.Image != digest {
			t.Errorf("buildpacks %+v, want example/go@%s from %s", got.Status.Buildpacks, version, digest)
		}
		chosen := got.Status.ChosenTags
		if len(chosen) != 1 || chosen[0].Field != "spec.sources[0]" || chosen[0].Image != repo || chosen[0].Tag != version || chosen[0].Version != version ||
			chosen[0].LatestImage != digest || chosen[0].ChosenAt.IsZero() {
			t.Errorf("chosenTags %+v, want %s at %s", chosen, version, digest)
		}
	}

	got := reconcileStore(t, store, withEvents("Ready"), ready)
	want(t, got, "1.1.0")

	// Chosen again: chosenAt is the first choice's.
	got.Status.ChosenTags[0].ChosenAt = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	again := reconcileStore(t, got, withEvents(), ready)
	if at := again.Status.ChosenTags[0].ChosenAt; !at.Equal(&got.Status.ChosenTags[0].ChosenAt) {
		t.Errorf("chosenAt %v, want the first choice's %v", at, got.Status.ChosenTags[0].ChosenAt)
	}

	// A new version in range: chosen, from now.
	f.PushBuildpackage("bp/go:1.2.0", registrytest.Buildpack{ID: "example/go", Version: "1.2.0", API: "0.10"})
	newer := reconcileStore(t, again, withEvents(), ready)
	want(t, newer, "1.2.0")
	if at := newer.Status.ChosenTags[0].ChosenAt; !at.After(got.Status.ChosenTags[0].ChosenAt.Time) {
		t.Errorf("chosenAt %v of a new choice, want now", at)
	}

	// No version in range: waits for one, keeping what it has.
	none := newer.DeepCopy()
	none.Generation = 2
	none.Spec.Sources[0].Policy.Semver.Range = ">=3"
	waiting := reconcileStore(t, none, withEvents(reconciler.ReasonNoMatchingTag), rt.Outcome{
		Ready: corev1.ConditionFalse, Reason: reconciler.ReasonNoMatchingTag, Reconciling: true,
		Requeue: rt.Poll, MinDelay: 48 * time.Second, MaxDelay: 72 * time.Second,
		MessageContains: `has no tag of a version in semver ">=3", of its 5 tags (last listed:`,
	})
	want(t, waiting, "1.2.0")
	if n := f.Count("GET", "/bp/go/tags/list"); n != 4 {
		t.Errorf("%d listings, want one a reconcile", n)
	}
}

func withEvents(reasons ...string) []string { return reasons }

// reconcileStore reconciles store once, checks how it ended against want
// (with events of reasons), and returns it as the API server has it.
func reconcileStore(t *testing.T, store *v1alpha1.ClusterStore, reasons []string, want rt.Outcome) *v1alpha1.ClusterStore {
	t.Helper()
	ctx, clients := rt.Setup(t, store)
	impl := rt.Controller(ctx, NewController(registry.New(ctx, registry.Options{LoopbackRegistries: true}), reconciler.DefaultOptions()))
	err := rt.Sync(impl).Reconcile(ctx, store.Name)
	got, getErr := clients.Buildsmith.BuildsmithV1alpha1().ClusterStores().Get(context.Background(), store.Name, metav1.GetOptions{})
	if getErr != nil {
		t.Fatal(getErr)
	}
	want.EventReasons = reasons
	rt.Check(t, got, err, clients.Events(), want)
	return got
}
