package builder

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"knative.dev/pkg/configmap"
	"knative.dev/pkg/controller"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	fakebuildpackinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/buildpack/fake"
	"github.com/buildsmith/buildsmith/pkg/cnb"
	rt "github.com/buildsmith/buildsmith/pkg/reconciler/reconcilertest"
	"github.com/buildsmith/buildsmith/pkg/registry"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// TestBuilderSources: a builder draws from spec.store and spec.sources;
// the first source holding an id and version has it, status says which
// source each buildpack came from and at which generation each source was;
// a source not Ready holds the builder, naming it; a buildpack none holds
// stalls it, naming them all.
func TestBuilderSources(t *testing.T) {
	x := newFixture(t)
	lifecycle := x.f.Addr + "/lifecycle:0.21.0"
	team := x.readyStore(t, "team", 2, "bp/team:1",
		registrytest.Buildpack{ID: "example/go", Version: "1.0.0", API: "0.10"}, // the default store's too, another layer
		registrytest.Buildpack{ID: "example/ruby", Version: "3.0.0", API: "0.10"})
	order := []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "example/go", Version: "1.0.0"}, {ID: "example/ruby"}}}}
	drawingFrom := func(store string, sources ...string) *v1alpha1.Builder {
		return x.builder(func(b *v1alpha1.Builder) {
			b.Spec.Store.Name = store
			for _, s := range sources {
				b.Spec.Sources = append(b.Spec.Sources, v1alpha1.SourceRef{Name: s})
			}
			b.Spec.Order = order
		})
	}

	got, events, err, _ := x.run(t, drawingFrom("default", "team"), lifecycle, team)
	rt.Check(t, got, err, events, rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync,
		MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute, EventReasons: []string{"Ready"}})
	wantMetadata := []v1alpha1.BuildpackMetadata{
		{ID: "example/go", Version: "1.0.0", Source: "ClusterStore/default"},
		{ID: "example/ruby", Version: "3.0.0", Source: "ClusterStore/team"},
	}
	if diff := cmp.Diff(wantMetadata, got.Status.BuilderMetadata); diff != "" {
		t.Errorf("status.builderMetadata (-want +got):\n%s", diff)
	}
	wantSources := []v1alpha1.ObservedSource{{Kind: "ClusterStore", Name: "default", Generation: 5}, {Kind: "ClusterStore", Name: "team", Generation: 2}}
	if diff := cmp.Diff(wantSources, got.Status.Sources); diff != "" {
		t.Errorf("status.sources (-want +got):\n%s", diff)
	}
	if got.Status.ObservedStoreGeneration != 5 {
		t.Errorf("observedStoreGeneration %d, want spec.store's, 5", got.Status.ObservedStoreGeneration)
	}
	layers := func(b *v1alpha1.Builder) string {
		cf, err := x.read(t, b.Status.LatestImage).ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		return cf.Config.Labels[cnb.LabelBuildpackLayers]
	}
	fromDefault := layers(got)
	if !strings.Contains(fromDefault, `"example/ruby"`) {
		t.Errorf("the team's buildpack is not in the builder: %s", fromDefault)
	}

	// The other way round, the team's copy of example/go is the one.
	swapped, events, err, _ := x.run(t, drawingFrom("team", "default"), lifecycle, team)
	rt.Check(t, swapped, err, events, rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync,
		MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute, EventReasons: []string{"Ready"}})
	if s := swapped.Status.BuilderMetadata[0].Source; s != "ClusterStore/team" {
		t.Errorf("example/go came from %s, want ClusterStore/team", s)
	}
	if fromTeam := layers(swapped); fromTeam == fromDefault {
		t.Errorf("the same example/go layer from either store: %s", fromTeam)
	}

	t.Run("a source that is not there", func(t *testing.T) {
		b := drawingFrom("default", "team", "ghost")
		got, events, err, _ := x.run(t, b, lifecycle, team)
		rt.Check(t, got, err, events, rt.Outcome{Ready: corev1.ConditionFalse, Reason: ReasonSourceNotReady, Reconciling: true,
			Requeue: rt.Poll, MinDelay: 48 * time.Second, MaxDelay: 72 * time.Second, EventReasons: []string{ReasonSourceNotReady},
			MessageContains: "ClusterStore ghost not found"})
	})
	t.Run("a buildpack in none of them", func(t *testing.T) {
		b := x.builder(func(b *v1alpha1.Builder) {
			b.Spec.Sources = []v1alpha1.SourceRef{{Kind: "ClusterStore", Name: "team"}}
			b.Spec.Order = []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "example/php"}}}}
		})
		b.Status = got.Status
		failed, events, err, _ := x.run(t, b, lifecycle, team)
		rt.Check(t, failed, err, events, rt.Outcome{Ready: corev1.ConditionFalse, Reason: cnb.ReasonBuildpackNotFound, Stalled: true,
			Requeue: rt.NoRequeue, EventReasons: []string{cnb.ReasonBuildpackNotFound},
			MessageContains: "buildpack example/php is not in any of ClusterStore/default, ClusterStore/team"})
		if failed.Status.LatestImage != got.Status.LatestImage {
			t.Errorf("latestImage %q, want %q kept", failed.Status.LatestImage, got.Status.LatestImage)
		}
	})
}

// readyStore is a Ready ClusterStore of generation holding a buildpackage
// of buildpacks pushed to repo.
func (x *fixture) readyStore(t *testing.T, name string, generation int64, repo string, buildpacks ...registrytest.Buildpack) *v1alpha1.ClusterStore {
	t.Helper()
	store := &v1alpha1.ClusterStore{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: generation}}
	own := *x
	own.store = store
	own.addToStore(t, repo, buildpacks...)
	store.Status.ObservedGeneration = generation
	store.Status.MarkReady()
	return store
}

// TestBuilderBuildpackSource: a Builder draws from a Buildpack of its own
// namespace beside ClusterStores, or from Buildpacks alone, without a
// store; one of another namespace is not there for it (SourceNotReady).
func TestBuilderBuildpackSource(t *testing.T) {
	x := newFixture(t)
	lifecycle := x.f.Addr + "/lifecycle:0.21.0"
	own := x.readyStore(t, "own", 4, "apps/php:1", registrytest.Buildpack{ID: "example/php", Version: "8.0.0", API: "0.10"})
	buildpack := func(namespace string) *v1alpha1.Buildpack {
		return &v1alpha1.Buildpack{ObjectMeta: metav1.ObjectMeta{Name: "php", Namespace: namespace, Generation: 4},
			Spec:   v1alpha1.BuildpackSpec{Image: x.f.Addr + "/apps/php:1"},
			Status: v1alpha1.BuildpackStatus{ConditionedStatus: own.Status.ConditionedStatus, Buildpacks: own.Status.Buildpacks}}
	}
	b := x.builder(func(b *v1alpha1.Builder) {
		b.Spec.Sources = []v1alpha1.SourceRef{{Kind: "Buildpack", Name: "php"}}
		b.Spec.Order = []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "example/php"}, {ID: "example/go"}}}}
	})

	got, events, err, _ := x.run(t, b, lifecycle, buildpack("apps"))
	rt.Check(t, got, err, events, rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync,
		MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute, EventReasons: []string{"Ready"}})
	wantMetadata := []v1alpha1.BuildpackMetadata{
		{ID: "example/go", Version: "1.1.0", Source: "ClusterStore/default"},
		{ID: "example/php", Version: "8.0.0", Source: "Buildpack/php"},
	}
	if diff := cmp.Diff(wantMetadata, got.Status.BuilderMetadata); diff != "" {
		t.Errorf("status.builderMetadata (-want +got):\n%s", diff)
	}
	wantSources := []v1alpha1.ObservedSource{{Kind: "ClusterStore", Name: "default", Generation: 5}, {Kind: "Buildpack", Name: "php", Generation: 4}}
	if diff := cmp.Diff(wantSources, got.Status.Sources); diff != "" {
		t.Errorf("status.sources (-want +got):\n%s", diff)
	}

	elsewhere, events, err, _ := x.run(t, b, lifecycle, buildpack("other"))
	rt.Check(t, elsewhere, err, events, rt.Outcome{Ready: corev1.ConditionFalse, Reason: ReasonSourceNotReady, Reconciling: true,
		Requeue: rt.Poll, MinDelay: 48 * time.Second, MaxDelay: 72 * time.Second, EventReasons: []string{ReasonSourceNotReady},
		MessageContains: "Buildpack apps/php not found"})

	// No store: the Buildpack alone, and no store generation observed.
	storeless := x.builder(func(b *v1alpha1.Builder) {
		b.Name = "storeless"
		b.Spec.Store = v1alpha1.StoreRef{}
		b.Spec.Sources = []v1alpha1.SourceRef{{Kind: "Buildpack", Name: "php"}}
		b.Spec.Order = []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "example/php"}}}}
	})
	alone, events, err, _ := x.run(t, storeless, lifecycle, buildpack("apps"))
	rt.Check(t, alone, err, events, rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync,
		MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute, EventReasons: []string{"Ready"}})
	if diff := cmp.Diff([]v1alpha1.ObservedSource{{Kind: "Buildpack", Name: "php", Generation: 4}}, alone.Status.Sources); diff != "" ||
		alone.Status.ObservedStoreGeneration != 0 {
		t.Errorf("status.sources (-want +got):\n%s; observedStoreGeneration %d", diff, alone.Status.ObservedStoreGeneration)
	}
	missing, events, err, _ := x.run(t, storeless, lifecycle, buildpack("other"))
	rt.Check(t, missing, err, events, rt.Outcome{Ready: corev1.ConditionFalse, Reason: ReasonSourceNotReady, Reconciling: true,
		Requeue: rt.Poll, MinDelay: 48 * time.Second, MaxDelay: 72 * time.Second, EventReasons: []string{ReasonSourceNotReady},
		MessageContains: "Buildpack apps/php not found"})
}

// TestBuilderWatchesItsBuildpack: a Builder is an observer of the Buildpack
// it draws from (so that the Buildpack becoming Ready or changing wakes it),
// not of one of the same name elsewhere, and a new generation of it counts
// as its inputs moving.
func TestBuilderWatchesItsBuildpack(t *testing.T) {
	x := newFixture(t)
	lifecycle := x.f.Addr + "/lifecycle:0.21.0"
	own := x.readyStore(t, "own", 4, "apps/php:1", registrytest.Buildpack{ID: "example/php", Version: "8.0.0", API: "0.10"})
	buildpack := func(namespace string, generation int64) *v1alpha1.Buildpack {
		bp := &v1alpha1.Buildpack{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Buildpack"},
			ObjectMeta: metav1.ObjectMeta{Name: "php", Namespace: namespace, Generation: generation},
			Spec:       v1alpha1.BuildpackSpec{Image: x.f.Addr + "/apps/php:1"},
			Status:     v1alpha1.BuildpackStatus{ConditionedStatus: own.Status.ConditionedStatus, Buildpacks: own.Status.Buildpacks}}
		bp.Status.ObservedGeneration = generation
		return bp
	}
	for _, storeless := range []bool{false, true} {
		t.Run(fmt.Sprintf("storeless=%v", storeless), func(t *testing.T) {
			watchesItsBuildpack(t, x, lifecycle, buildpack, storeless)
		})
	}
}

// watchesItsBuildpack is TestBuilderWatchesItsBuildpack for a builder with
// a store, or with none (storeless).
func watchesItsBuildpack(t *testing.T, x *fixture, lifecycle string, buildpack func(string, int64) *v1alpha1.Buildpack, storeless bool) {
	b := x.builder(func(b *v1alpha1.Builder) {
		b.Spec.Sources = []v1alpha1.SourceRef{{Kind: "Buildpack", Name: "php"}}
		b.Spec.Order = []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "example/php"}}}}
		if storeless {
			b.Spec.Store = v1alpha1.StoreRef{}
		}
	})
	ctx, clients := rt.Setup(t, b, x.stack, x.store, buildpack("apps", 4),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "apps"}})
	var r *BuilderReconciler
	impl := rt.Controller(ctx, func(ctx context.Context, cmw configmap.Watcher) *controller.Impl {
		impl, rec := newBuilderController(ctx, cmw, x.config())
		r = rec
		return impl
	}, lifecycleConfigMap(lifecycle))
	if err := rt.Sync(impl).Reconcile(ctx, "apps/go"); err != nil {
		if requeue, _ := controller.IsRequeueKey(err); !requeue {
			t.Fatal(err)
		}
	}
	key := types.NamespacedName{Namespace: "apps", Name: "go"}
	if got := r.Tracker.GetObservers(buildpack("apps", 4)); !slices.Contains(got, key) {
		t.Errorf("observers of Buildpack apps/php: %v, want %v among them", got, key)
	}
	if got := r.Tracker.GetObservers(buildpack("other", 4)); len(got) != 0 {
		t.Errorf("observers of Buildpack other/php: %v, want none", got)
	}
	built, err := clients.Buildsmith.BuildsmithV1alpha1().Builders("apps").Get(ctx, "go", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.inputsMoved(key, &built.Spec.BuilderSpec, &built.Status) {
		t.Error("inputs moved right after the builder was built from them")
	}
	if err := fakebuildpackinformer.Get(ctx).Informer().GetIndexer().Update(buildpack("apps", 5)); err != nil {
		t.Fatal(err)
	}
	if !r.inputsMoved(key, &built.Spec.BuilderSpec, &built.Status) {
		t.Error("a new generation of the Buildpack does not count as the inputs moving")
	}
}

// TestSourcesCostOfABuilder: what drawing from several sources costs the
// registry. The same two buildpacks, from one store's buildpackage or from
// a store and a Buildpack of a buildpackage each, built into a new
// repository on a registry where another builder was built before (the
// lifecycle, the stack and the registry's traits known); then the resync.
// Reported with -v (bench/results.md quotes it): a second source costs the
// reads of its buildpackage (a manifest and a config) and no more, and a
// resync stays one HEAD either way.
func TestSourcesCostOfABuilder(t *testing.T) {
	php := registrytest.Buildpack{ID: "example/php", Version: "8.0.0", API: "0.10", Size: 64 << 10}
	node := registrytest.Buildpack{ID: "example/node", Version: "2.0.0", API: "0.10", Size: 64 << 10}
	order := []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "example/php"}, {ID: "example/node"}}}}
	const oneStore, twoSources, flattened = "one store", "a store and a Buildpack", "one store, flattened"
	measure := func(kind string) (build, resync []string, traffic registry.Stats) {
		x := newFixture(t)
		lifecycle := x.f.Addr + "/lifecycle:0.21.0"
		warmUp, events, err, _ := x.run(t, x.builder(nil), lifecycle)
		rt.Check(t, warmUp, err, events, rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync,
			MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute, EventReasons: []string{"Ready"}})
		var extra []runtime.Object
		b := x.builder(func(b *v1alpha1.Builder) {
			b.Name, b.Spec.Tag, b.Spec.Order = "measured", x.f.Addr+"/builders/measured:latest", order
		})
		switch kind {
		case twoSources:
			own := x.readyStore(t, "node", 1, "apps/node:1", node)
			extra = append(extra, x.readyStore(t, "php", 1, "bp/php:1", php), &v1alpha1.Buildpack{
				ObjectMeta: metav1.ObjectMeta{Name: "node", Namespace: "apps", Generation: 1},
				Status:     v1alpha1.BuildpackStatus{ConditionedStatus: own.Status.ConditionedStatus, Buildpacks: own.Status.Buildpacks}})
			b.Spec.Store.Name, b.Spec.Sources = "php", []v1alpha1.SourceRef{{Kind: "Buildpack", Name: "node"}}
		default:
			extra = append(extra, x.readyStore(t, "both", 1, "bp/both:1", php, node))
			b.Spec.Store.Name = "both"
			if kind == flattened {
				b.Spec.Flatten = &v1alpha1.Flatten{All: true}
			}
		}
		x.f.ForgetRequests()
		got, events, err, traffic := x.run(t, b, lifecycle, extra...)
		rt.Check(t, got, err, events, rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync,
			MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute, EventReasons: []string{"Ready"}})
		build = x.f.Requests()
		x.f.ForgetRequests()
		x.run(t, got, lifecycle, extra...)
		return build, x.f.Requests(), traffic
	}
	builds, resyncs := map[string][]string{}, map[string][]string{}
	for _, kind := range []string{oneStore, twoSources, flattened} {
		var traffic registry.Stats
		builds[kind], resyncs[kind], traffic = measure(kind)
		t.Logf("%s: %d requests to build a new builder of 2 buildpacks (%d bytes up, %d down), %d to resync it: %q",
			kind, len(builds[kind]), traffic.TotalBytesUp(), traffic.TotalBytesDown(), len(resyncs[kind]), builds[kind])
		if len(resyncs[kind]) != 1 {
			t.Errorf("%s: the resync sent %q, want one HEAD", kind, resyncs[kind])
		}
	}
	if len(builds[twoSources]) != len(builds[oneStore])+2 {
		t.Errorf("from two sources %d requests, from one %d: want the second buildpackage's manifest and config more, no other",
			len(builds[twoSources]), len(builds[oneStore]))
	}
	// Flattened, the two layers are read (GET), and one is asked about
	// (HEAD: the repository may hold it from an earlier push) and uploaded
	// (POST, PUT) instead of two mounted (POST).
	if diff := cmp.Diff(map[string]int{"GET blob": 2, "HEAD blob": 1, "POST upload": 1, "PUT upload": 1, "POST mount": -2},
		requestKindsDiff(builds[oneStore], builds[flattened])); diff != "" {
		t.Errorf("a flattened builder's requests beside the unflattened one's (-want +got):\n%s", diff)
	}
}

// requestKindsDiff counts, by kind, the requests of b less those of a.
func requestKindsDiff(a, b []string) map[string]int {
	kind := func(r string) string {
		method, path, _ := strings.Cut(r, " ")
		switch {
		case strings.Contains(path, "mount="):
			return method + " mount"
		case strings.Contains(path, "/blobs/uploads/"):
			return method + " upload"
		case strings.Contains(path, "/blobs/"):
			return method + " blob"
		}
		return method + " manifest"
	}
	diff := map[string]int{}
	for _, r := range a {
		diff[kind(r)]--
	}
	for _, r := range b {
		diff[kind(r)]++
	}
	for k, n := range diff {
		if n == 0 {
			delete(diff, k)
		}
	}
	return diff
}
