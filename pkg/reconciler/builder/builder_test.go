package builder

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"knative.dev/pkg/configmap"
	"knative.dev/pkg/controller"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cnb"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	rt "github.com/buildsmith/buildsmith/pkg/reconciler/reconcilertest"
	"github.com/buildsmith/buildsmith/pkg/registry"
	"github.com/buildsmith/buildsmith/test/registrytest"
	"github.com/buildsmith/buildsmith/test/sampleimages"
)

// fixture is a registry with a stack, a store's buildpackages and a
// lifecycle image, and the Ready ClusterStack and ClusterStore describing
// them, as their reconcilers would have written them.
type fixture struct {
	f     *registrytest.Registry
	stack *v1alpha1.ClusterStack
	store *v1alpha1.ClusterStore
	// client and lifecycle live across reconciles, as in the controller.
	client    *registry.Client
	lifecycle *LifecycleSource
}

func newFixture(t *testing.T) *fixture {
	f := registrytest.New(t)
	labels := map[string]string{cnb.LabelStackID: "io.buildpacks.stacks.jammy"}
	build := f.PushImage("stack/build:1", labels, "CNB_USER_ID=1000", "CNB_GROUP_ID=1000")
	f.PushImage("stack/run:1", labels)
	pushFakeLifecycle(t, f)
	goImage := f.PushBuildpackage("bp/go:1", registrytest.Buildpack{ID: "example/go", Version: "1.0.0", API: "0.10"},
		registrytest.Buildpack{ID: "example/go", Version: "1.1.0", API: "0.10"})
	futureImage := f.PushBuildpackage("bp/future:1", registrytest.Buildpack{ID: "example/future", Version: "1.0.0", API: "0.99"})

	buildDigest, _ := build.Digest()
	stack := &v1alpha1.ClusterStack{ObjectMeta: metav1.ObjectMeta{Name: "jammy", Generation: 3}}
	stack.Status = v1alpha1.ClusterStackStatus{ID: "io.buildpacks.stacks.jammy", UserID: 1000, GroupID: 1000, OS: "linux", Arch: "amd64",
		Platforms:  []v1alpha1.Platform{{OS: "linux", Arch: "amd64"}},
		BuildImage: v1alpha1.ResolvedImage{Image: f.Addr + "/stack/build:1", LatestImage: f.Addr + "/stack/build@" + buildDigest.String()},
		RunImage:   v1alpha1.ResolvedRunImage{Image: f.Addr + "/stack/run:1"}}
	stack.Status.ObservedGeneration = 3
	stack.Status.MarkReady()

	store := &v1alpha1.ClusterStore{ObjectMeta: metav1.ObjectMeta{Name: "default", Generation: 5}}
	for _, img := range []struct {
		repo  string
		image v1.Image
	}{{"bp/go", goImage}, {"bp/future", futureImage}} {
		digest, _ := img.image.Digest()
		cf, _ := img.image.ConfigFile()
		m, _ := img.image.Manifest()
		bps, err := cnb.Buildpackage(f.Addr+"/"+img.repo+"@"+digest.String(), cf, m)
		if err != nil {
			t.Fatal(err)
		}
		for i := range bps {
			bps[i].Platforms = []v1alpha1.Platform{{OS: "linux", Arch: "amd64"}}
		}
		store.Status.Buildpacks = append(store.Status.Buildpacks, bps...)
	}
	cnb.SortBuildpacks(store.Status.Buildpacks)
	store.Status.ObservedGeneration = 5
	store.Status.MarkReady()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	client := registry.New(ctx, registry.Options{LoopbackRegistries: true, Timeout: 5 * time.Second})
	return &fixture{f: f, stack: stack, store: store, client: client,
		lifecycle: NewLifecycleSource(time.Hour)}
}

func (x *fixture) builder(mutate func(*v1alpha1.Builder)) *v1alpha1.Builder {
	b := &v1alpha1.Builder{
		ObjectMeta: metav1.ObjectMeta{Name: "go", Namespace: "apps", Generation: 1},
		Spec: v1alpha1.NamespacedBuilderSpec{BuilderSpec: v1alpha1.BuilderSpec{
			Tag:   x.f.Addr + "/builders/go:latest",
			Stack: v1alpha1.StackRef{Kind: "ClusterStack", Name: "jammy"},
			Store: v1alpha1.StoreRef{Kind: "ClusterStore", Name: "default"},
			Order: []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "example/go"}}}},
		}, ServiceAccountName: "default"},
	}
	if mutate != nil {
		mutate(b)
	}
	return b
}

// config is the builder controllers' Config over the fixture's registry
// client and lifecycle source.
func (x *fixture) config() Config {
	return Config{Registry: x.client, Options: reconciler.DefaultOptions(), Lifecycle: x.lifecycle, Version: "test"}
}

// builderController is the Builder controller over the fake clients of ctx,
// the lifecycle-image ConfigMap naming lifecycle ("" for none).
func (x *fixture) builderController(ctx context.Context, lifecycle string) *controller.Impl {
	return rt.Controller(ctx, func(ctx context.Context, cmw configmap.Watcher) *controller.Impl {
		impl, _ := newBuilderController(ctx, cmw, x.config())
		return impl
	}, lifecycleConfigMap(lifecycle))
}

// lifecycleConfigMap is the lifecycle-image ConfigMap naming ref.
func lifecycleConfigMap(ref string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: LifecycleConfigMap}, Data: map[string]string{LifecycleImageKey: ref}}
}

// run reconciles b once with the fixture's objects (plus extra) and returns
// the stored builder, the events, the error and the registry traffic.
func (x *fixture) run(t *testing.T, b *v1alpha1.Builder, lifecycle string, extra ...runtime.Object) (*v1alpha1.Builder, []string, error, registry.Stats) {
	t.Helper()
	objects := append([]runtime.Object{b, x.stack, x.store,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "apps"}}}, extra...)
	ctx, clients := rt.Setup(t, objects...)
	client := x.client
	rec := rt.Sync(x.builderController(ctx, lifecycle))
	before := client.Stats()
	err := rec.Reconcile(ctx, b.Namespace+"/"+b.Name)
	traffic := client.Stats().Sub(before)
	got, getErr := clients.Buildsmith.BuildsmithV1alpha1().Builders(b.Namespace).Get(ctx, b.Name, metav1.GetOptions{})
	if getErr != nil {
		t.Fatal(getErr)
	}
	return got, clients.Events(), err, traffic
}

func TestBuilderReadyAndThenNoRedundantWork(t *testing.T) {
	x := newFixture(t)
	lifecycle := x.f.Addr + "/lifecycle:0.21.0"
	got, events, err, _ := x.run(t, x.builder(nil), lifecycle)
	rt.Check(t, got, err, events, rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync,
		MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute, EventReasons: []string{"Ready"}})

	s := got.Status
	tagged, err := x.f.Resolve(x.f.Addr + "/builders/go:latest")
	if err != nil {
		t.Fatal(err)
	}
	if s.LatestImage != tagged || !strings.HasPrefix(s.LatestImage, x.f.Addr+"/builders/go@sha256:") {
		t.Errorf("latestImage %q, the tag points at %q", s.LatestImage, tagged)
	}
	if diff := cmp.Diff([]v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "example/go", Version: "1.1.0"}}}}, s.Order); diff != "" {
		t.Errorf("resolved order (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]v1alpha1.BuildpackMetadata{{ID: "example/go", Version: "1.1.0", Source: "ClusterStore/default"}}, s.BuilderMetadata); diff != "" {
		t.Errorf("builderMetadata (-want +got):\n%s", diff)
	}
	if s.Stack != (v1alpha1.BuiltStack{ID: "io.buildpacks.stacks.jammy", RunImage: x.f.Addr + "/stack/run:1"}) ||
		s.Lifecycle.Version != "0.21.0" || len(s.Lifecycle.APIs.Platform.Supported) != 9 ||
		s.ObservedStackGeneration != 3 || s.ObservedStoreGeneration != 5 || s.Fingerprint == "" {
		t.Errorf("status: %+v", s)
	}

	// The same builder again, as the controller finds it at its resyncs:
	// one HEAD of the tag, nothing uploaded (the registry's /v2/ ping was
	// answered when the builder was pushed and is remembered).
	for i, want := range [][]string{
		{"HEAD /v2/builders/go/manifests/latest"},
		{"HEAD /v2/builders/go/manifests/latest"},
		{"HEAD /v2/builders/go/manifests/latest"},
	} {
		x.f.ForgetRequests()
		again, events, err, traffic := x.run(t, got, lifecycle)
		rt.Check(t, again, err, events, rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync,
			MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute})
		if diff := cmp.Diff(want, x.f.Requests()); diff != "" || traffic.TotalBytesUp() != 0 {
			t.Errorf("unchanged builder, resync %d: %d bytes up, requests (-want +got):\n%s", i+1, traffic.TotalBytesUp(), diff)
		}
		if again.Status.LatestImage != s.LatestImage {
			t.Errorf("latestImage changed: %s", again.Status.LatestImage)
		}
	}

	// Someone pushed over the tag: built and pushed again.
	x.f.Push("builders/go:latest")
	again, _, err, traffic := x.run(t, got, lifecycle)
	if !again.Status.IsReady() || traffic.Total("PUT") == 0 {
		t.Errorf("moved tag: ready %v, %v (%v)", again.Status.IsReady(), traffic.Requests, err)
	}
	if now, _ := x.f.Resolve(x.f.Addr + "/builders/go:latest"); now != s.LatestImage {
		t.Errorf("tag at %s after the rebuild, want %s (same inputs, same digest)", now, s.LatestImage)
	}
}

func TestBuilderFailures(t *testing.T) {
	x := newFixture(t)
	lifecycle := x.f.Addr + "/lifecycle:0.21.0"
	notReady := x.stack.DeepCopy()
	notReady.Name = "jammy-next"
	notReady.Generation = 4 // a new generation the stack reconciler has not seen yet
	tests := []struct {
		name      string
		builder   *v1alpha1.Builder
		lifecycle string
		extra     []runtime.Object
		setup     func(*fixture)
		want      rt.Outcome
	}{{
		name:    "stack not Ready for its generation",
		builder: x.builder(func(b *v1alpha1.Builder) { b.Spec.Stack.Name = "jammy-next" }), lifecycle: lifecycle,
		extra: []runtime.Object{notReady},
		want: rt.Outcome{Ready: corev1.ConditionFalse, Reason: ReasonStackNotReady, Reconciling: true, Requeue: rt.Poll,
			MinDelay: 48 * time.Second, MaxDelay: 72 * time.Second, EventReasons: []string{ReasonStackNotReady}, MessageContains: "jammy-next"},
	}, {
		name:    "stack missing",
		builder: x.builder(func(b *v1alpha1.Builder) { b.Spec.Stack.Name = "bionic" }), lifecycle: lifecycle,
		want: rt.Outcome{Ready: corev1.ConditionFalse, Reason: ReasonStackNotReady, Reconciling: true, Requeue: rt.Poll,
			MinDelay: 48 * time.Second, MaxDelay: 72 * time.Second, EventReasons: []string{ReasonStackNotReady}, MessageContains: "bionic"},
	}, {
		name:    "store missing",
		builder: x.builder(func(b *v1alpha1.Builder) { b.Spec.Store.Name = "other" }), lifecycle: lifecycle,
		want: rt.Outcome{Ready: corev1.ConditionFalse, Reason: ReasonStoreNotReady, Reconciling: true, Requeue: rt.Poll,
			MinDelay: 48 * time.Second, MaxDelay: 72 * time.Second, EventReasons: []string{ReasonStoreNotReady}},
	}, {
		name:    "no lifecycle configured",
		builder: x.builder(nil),
		want: rt.Outcome{Ready: corev1.ConditionFalse, Reason: ReasonLifecycleNotConfigured, Reconciling: true, Requeue: rt.Poll,
			MinDelay: 48 * time.Second, MaxDelay: 72 * time.Second, EventReasons: []string{ReasonLifecycleNotConfigured}},
	}, {
		name:    "not a lifecycle image",
		builder: x.builder(nil), lifecycle: x.f.Addr + "/stack/run:1",
		want: rt.Outcome{Ready: corev1.ConditionFalse, Reason: cnb.ReasonInvalidLifecycleImage, Stalled: true, Requeue: rt.NoRequeue,
			EventReasons: []string{cnb.ReasonInvalidLifecycleImage}},
	}, {
		name: "buildpack not in the store",
		builder: x.builder(func(b *v1alpha1.Builder) {
			b.Spec.Order = []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "example/ruby"}}}}
		}), lifecycle: lifecycle,
		want: rt.Outcome{Ready: corev1.ConditionFalse, Reason: cnb.ReasonBuildpackNotFound, Stalled: true, Requeue: rt.NoRequeue,
			EventReasons: []string{cnb.ReasonBuildpackNotFound}, MessageContains: "example/ruby"},
	}, {
		name: "buildpack API the lifecycle lacks",
		builder: x.builder(func(b *v1alpha1.Builder) {
			b.Spec.Order = []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "example/future"}}}}
		}), lifecycle: lifecycle,
		want: rt.Outcome{Ready: corev1.ConditionFalse, Reason: cnb.ReasonBuildpackAPIUnsupported, Stalled: true, Requeue: rt.NoRequeue,
			EventReasons: []string{cnb.ReasonBuildpackAPIUnsupported}, MessageContains: "example/future@1.0.0"},
	}, {
		name: "env the lifecycle cannot read: one file written twice",
		builder: x.builder(func(b *v1alpha1.Builder) {
			b.Spec.Env = []v1alpha1.BuildEnv{{Name: "GOFLAGS", Value: "-mod=vendor"}, {Name: "GOFLAGS", Value: "-trimpath"}}
		}), lifecycle: lifecycle,
		want: rt.Outcome{Ready: corev1.ConditionFalse, Reason: cnb.ReasonInvalidEnv, Stalled: true, Requeue: rt.NoRequeue,
			EventReasons: []string{cnb.ReasonInvalidEnv}, MessageContains: "GOFLAGS"},
	}, {
		name:    "push fails: nothing tagged",
		builder: x.builder(func(b *v1alpha1.Builder) { b.Spec.Tag = x.f.Addr + "/builders/failing:latest" }), lifecycle: lifecycle,
		setup: func(x *fixture) {
			x.f.Inject("PUT", "/builders/failing/manifests/", -1, registrytest.Answer(503, nil, ""))
		},
		want: rt.Outcome{Ready: corev1.ConditionFalse, Reason: registry.ReasonRegistryUnavailable, Reconciling: true, Requeue: rt.Circuit,
			MinDelay: 4 * time.Minute, MaxDelay: 6 * time.Minute, EventReasons: []string{registry.ReasonRegistryUnavailable}},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer x.f.ClearFaults()
			if tc.setup != nil {
				tc.setup(x)
			}
			b := tc.builder
			// A previous success: its latestImage must survive any failure.
			b.Status.LatestImage = x.f.Addr + "/builders/go@sha256:" + strings.Repeat("1", 64)
			b.Status.ObservedGeneration = 1
			b.Status.MarkReady()
			got, events, err, _ := x.run(t, b, tc.lifecycle, tc.extra...)
			rt.Check(t, got, err, events, tc.want)
			if got.Status.LatestImage != b.Status.LatestImage {
				t.Errorf("latestImage %q, want the previous one kept", got.Status.LatestImage)
			}
		})
	}
	if _, err := x.f.Resolve(x.f.Addr + "/builders/failing:latest"); err == nil {
		t.Error("a failed push left a tag")
	}
}

// TestBuildersShareStoreReads: a second builder over the same stack and
// store reads none of their images again (they are read by digest, and
// the registry client keeps what it read by digest).
func TestBuildersShareStoreReads(t *testing.T) {
	x := newFixture(t)
	lifecycle := x.f.Addr + "/lifecycle:0.21.0"
	if got, _, err, _ := x.run(t, x.builder(nil), lifecycle); !got.Status.IsReady() {
		t.Fatalf("first builder: %v", err)
	}
	x.f.ForgetRequests()
	second := x.builder(func(b *v1alpha1.Builder) { b.Name, b.Spec.Tag = "go-2", x.f.Addr+"/builders/go-2:latest" })
	if got, _, err, _ := x.run(t, second, lifecycle); !got.Status.IsReady() {
		t.Fatalf("second builder: %v", err)
	}
	for _, r := range x.f.Requests() {
		if strings.HasPrefix(r, "GET ") && (strings.Contains(r, "/bp/") || strings.Contains(r, "/stack/") || strings.Contains(r, "/lifecycle/")) {
			t.Errorf("the second builder read %s again", r)
		}
	}
}

// BenchmarkAssembleBuilder builds and pushes a builder of 10 buildpacks
// whose layers already live in the same registry, and reports what one
// push costs: requests, and bytes uploaded (only the new small layers, the
// config and the manifest: buildpack layers are mounted or skipped).
func BenchmarkAssembleBuilder(b *testing.B) {
	f := registrytest.New(b)
	labels := map[string]string{cnb.LabelStackID: "io.buildpacks.stacks.jammy"}
	build := f.PushImage("stack/build:1", labels, "CNB_USER_ID=1000", "CNB_GROUP_ID=1000")
	pushFakeLifecycle(b, f)
	var buildpacks []registrytest.Buildpack
	var order []v1alpha1.BuildpackRef
	for i := range 10 {
		id := fmt.Sprintf("example/bp-%d", i)
		buildpacks = append(buildpacks, registrytest.Buildpack{ID: id, Version: "1.0.0", API: "0.10", Size: 512 << 10})
		order = append(order, v1alpha1.BuildpackRef{ID: id})
	}
	pkg := f.PushBuildpackage("bp/all:1", buildpacks...)
	digest, _ := pkg.Digest()
	cf, _ := pkg.ConfigFile()
	m, _ := pkg.Manifest()
	store, err := cnb.Buildpackage(f.Addr+"/bp/all@"+digest.String(), cf, m)
	if err != nil {
		b.Fatal(err)
	}
	resolved, err := cnb.ResolveOrder([]v1alpha1.OrderEntry{{Group: order}}, nil, cnb.Pool{Buildpacks: store})
	if err != nil {
		b.Fatal(err)
	}
	buildDigest, _ := build.Digest()
	stack := &v1alpha1.ClusterStack{ObjectMeta: metav1.ObjectMeta{Name: "jammy"}, Status: v1alpha1.ClusterStackStatus{
		ID: "io.buildpacks.stacks.jammy", UserID: 1000, GroupID: 1000, OS: "linux", Arch: "amd64",
		BuildImage: v1alpha1.ResolvedImage{LatestImage: f.Addr + "/stack/build@" + buildDigest.String()},
		RunImage:   v1alpha1.ResolvedRunImage{Image: f.Addr + "/stack/run:1"}}}
	ctx := context.Background()
	client := registry.New(ctx, registry.Options{LoopbackRegistries: true})
	core := &Core{Base: reconciler.Base{Registry: client}, Lifecycle: NewLifecycleSource(time.Hour), Version: "bench"}
	core.Lifecycle.Update(lifecycleConfigMap(f.Addr + "/lifecycle:0.21.0"))
	platform := v1.Platform{OS: "linux", Architecture: "amd64"}
	lifecycleImage, err := core.Lifecycle.Image(ctx, client.As(nil))
	if err != nil {
		b.Fatal(err)
	}
	lifecycle, err := lifecycleImage.For(ctx, client.As(nil), platform)
	if err != nil {
		b.Fatal(err)
	}
	pb := platformBuild{platform: cnb.PlatformOf(platform), lifecycle: lifecycle, order: resolved,
		stack: &cnb.Stack{ID: "io.buildpacks.stacks.jammy", UserID: 1000, GroupID: 1000, OS: "linux", Arch: "amd64"}}
	before := client.Stats()
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		spec := &v1alpha1.BuilderSpec{AdditionalLabels: map[string]string{"n": fmt.Sprint(i)}} // a new image each time
		img, err := core.assemble(ctx, client.As(nil), stack, pb, spec, scratchDir{})
		if err != nil {
			b.Fatal(err)
		}
		tag, _ := name.NewTag(fmt.Sprintf("%s/builders/bench:%d", f.Addr, i))
		if _, err := client.As(nil).Write(ctx, tag, img); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.StopTimer()
	d := client.Stats().Sub(before)
	b.ReportMetric(float64(d.Total())/float64(i), "requests/op")
	b.ReportMetric(float64(d.TotalBytesUp())/float64(i), "bytes-up/op")
	var layerBytes int64
	for _, bp := range resolved.Buildpacks {
		layerBytes += bp.Size
	}
	b.ReportMetric(float64(layerBytes), "buildpack-layer-bytes")
	if up := d.TotalBytesUp() / int64(i); up > 64<<10 {
		b.Errorf("%d bytes uploaded per builder; the buildpack layers (%d bytes) were uploaded again", up, layerBytes)
	}
}

// TestClusterBuilder: the cluster-scoped kind goes through the same
// implementation, with credentials from serviceAccountRef.
func TestClusterBuilder(t *testing.T) {
	x := newFixture(t)
	cb := &v1alpha1.ClusterBuilder{
		ObjectMeta: metav1.ObjectMeta{Name: "go", Generation: 1},
		Spec: v1alpha1.ClusterBuilderSpec{BuilderSpec: x.builder(nil).Spec.BuilderSpec,
			ServiceAccountRef: &v1alpha1.ServiceAccountRef{Name: "pusher", Namespace: "buildsmith"}},
	}
	cb.Spec.Tag = x.f.Addr + "/builders/cluster-go:latest"
	reconcile := func(objects ...runtime.Object) (*v1alpha1.ClusterBuilder, []string, error) {
		ctx, clients := rt.Setup(t, append([]runtime.Object{cb, x.stack, x.store}, objects...)...)
		rec := rt.Sync(rt.Controller(ctx, NewClusterBuilderController(x.config()), lifecycleConfigMap(x.f.Addr+"/lifecycle:0.21.0")))
		err := rec.Reconcile(ctx, cb.Name)
		got, getErr := clients.Buildsmith.BuildsmithV1alpha1().ClusterBuilders().Get(ctx, cb.Name, metav1.GetOptions{})
		if getErr != nil {
			t.Fatal(getErr)
		}
		return got, clients.Events(), err
	}

	got, events, err := reconcile()
	rt.Check(t, got, err, events, rt.Outcome{Ready: corev1.ConditionFalse, Reason: registry.ReasonServiceAccountNotFound,
		Reconciling: true, Requeue: rt.Poll, MinDelay: 48 * time.Second, MaxDelay: 72 * time.Second,
		EventReasons: []string{registry.ReasonServiceAccountNotFound}, MessageContains: "buildsmith/pusher"})

	got, events, err = reconcile(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "pusher", Namespace: "buildsmith"}})
	rt.Check(t, got, err, events, rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync,
		MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute, EventReasons: []string{"Ready"}})
	if tagged, _ := x.f.Resolve(cb.Spec.Tag); got.Status.LatestImage != tagged || tagged == "" {
		t.Errorf("latestImage %q, tag at %q", got.Status.LatestImage, tagged)
	}
}

// pushFakeLifecycle pushes a lifecycle image whose "binary" is a stub: these
// tests assemble builders, they do not run them (test/e2e does).
func pushFakeLifecycle(tb testing.TB, f *registrytest.Registry) {
	tb.Helper()
	layer, err := sampleimages.Layer(sampleimages.File{Path: "cnb/lifecycle/lifecycle", Mode: 0o755, Content: []byte("ELF")})
	if err != nil {
		tb.Fatal(err)
	}
	f.PushLayers("lifecycle:0.21.0", []v1.Layer{layer},
		map[string]string{cnb.LabelLifecycleVer: "0.21.0", cnb.LabelLifecycleAPIs: sampleimages.LifecycleAPIs}, nil)
}

// TestBuilderEnvAndRunImageMirrors: spec.env becomes files of
// /cnb/build-config/env/ and the stack's run image mirrors reach the
// builder's metadata; changing the env builds a new image.
func TestBuilderEnvAndRunImageMirrors(t *testing.T) {
	x := newFixture(t)
	lifecycle := x.f.Addr + "/lifecycle:0.21.0"
	x.stack.Status.RunImage.Mirrors = []string{"mirror.example.com/stack/run:1"}
	b := x.builder(func(b *v1alpha1.Builder) {
		b.Spec.Env = []v1alpha1.BuildEnv{{Name: "GOFLAGS", Value: "-trimpath", Suffix: "append", Delim: " "}}
	})
	got, _, err, _ := x.run(t, b, lifecycle)
	if !got.Status.IsReady() {
		t.Fatalf("not Ready: %v %+v", err, got.Status.Conditions)
	}
	img := x.read(t, got.Status.LatestImage)
	files, err := sampleimages.Files(img)
	if err != nil {
		t.Fatal(err)
	}
	if files["cnb/build-config/env/GOFLAGS.append"] != "-trimpath" || files["cnb/build-config/env/GOFLAGS.delim"] != " " {
		t.Errorf("build-config env files: %q, %q", files["cnb/build-config/env/GOFLAGS.append"], files["cnb/build-config/env/GOFLAGS.delim"])
	}
	if run := files["cnb/run.toml"]; !strings.Contains(run, "mirror.example.com/stack/run:1") {
		t.Errorf("run.toml lacks the mirror:\n%s", run)
	}
	cf, _ := img.ConfigFile()
	if meta := cf.Config.Labels[cnb.LabelBuilderMetadata]; !strings.Contains(meta, `"mirrors":["mirror.example.com/stack/run:1"]`) {
		t.Errorf("builder metadata lacks the mirror: %s", meta)
	}

	got.Spec.Env[0].Value = "-race"
	again, _, err, traffic := x.run(t, got, lifecycle)
	if !again.Status.IsReady() || again.Status.LatestImage == got.Status.LatestImage || traffic.Total("PUT") == 0 {
		t.Errorf("a changed env was not built: %v, latestImage %s, %d PUTs", err, again.Status.LatestImage, traffic.Total("PUT"))
	}
}

// TestBuilderDescription: spec.description is the description of the
// pushed image's builder metadata label (where pack writes builder.toml's),
// and changing it builds the builder again.
func TestBuilderDescription(t *testing.T) {
	x := newFixture(t)
	lifecycle := x.f.Addr + "/lifecycle:0.21.0"
	description := func(ref string) string {
		t.Helper()
		cf, err := x.read(t, ref).ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		var meta struct {
			Description string `json:"description"`
		}
		if err := json.Unmarshal([]byte(cf.Config.Labels[cnb.LabelBuilderMetadata]), &meta); err != nil {
			t.Fatal(err)
		}
		return meta.Description
	}
	b := x.builder(func(b *v1alpha1.Builder) {
		b.Spec.Description = "Ubuntu 22.04 Jammy Jellyfish base image with buildpacks for Go"
	})
	got, _, err, _ := x.run(t, b, lifecycle)
	if !got.Status.IsReady() {
		t.Fatalf("not Ready: %v %+v", err, got.Status.Conditions)
	}
	if d := description(got.Status.LatestImage); d != b.Spec.Description {
		t.Errorf("builder metadata description %q, want %q", d, b.Spec.Description)
	}

	got.Spec.Description = "another description"
	got.Generation++
	again, _, err, traffic := x.run(t, got, lifecycle)
	if !again.Status.IsReady() || again.Status.LatestImage == got.Status.LatestImage || traffic.Total("PUT") == 0 {
		t.Fatalf("a changed description was not built: %v, latestImage %s, %d PUTs", err, again.Status.LatestImage, traffic.Total("PUT"))
	}
	if d := description(again.Status.LatestImage); d != "another description" {
		t.Errorf("builder metadata description %q after the change", d)
	}
}

// read reads an image the test pushed.
func (x *fixture) read(t *testing.T, ref string) v1.Image {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(r)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestBuilderStaysReadyThroughABlip: a Ready builder whose re-check (the
// HEAD of its tag) fails for a passing reason stays Ready, keeps its
// status and says why in UpToDate, with one event when it starts and one
// when it ends; a stack that is Ready with a failed re-check of its own
// changes nothing for it; and a builder that has to push new inputs and
// cannot is not Ready.
func TestBuilderStaysReadyThroughABlip(t *testing.T) {
	x := newFixture(t)
	lifecycle := x.f.Addr + "/lifecycle:0.21.0"
	built, _, _, _ := x.run(t, x.builder(nil), lifecycle)
	if !built.Status.IsReady() {
		t.Fatalf("not built: %+v", built.Status.Conditions)
	}

	x.f.Inject("HEAD", "/builders/go/manifests/", -1, registrytest.Answer(503, nil, ""))
	stale, events, err, traffic := x.run(t, built, lifecycle)
	rt.Check(t, stale, err, events, rt.Outcome{Ready: corev1.ConditionTrue, Stale: registry.ReasonRegistryUnavailable,
		Requeue: rt.Circuit, MinDelay: 4 * time.Minute, MaxDelay: 6 * time.Minute,
		EventReasons: []string{registry.ReasonRegistryUnavailable}, MessageContains: "503"})
	if diff := cmp.Diff(built.Status.Fingerprint, stale.Status.Fingerprint); diff != "" || stale.Status.LatestImage != built.Status.LatestImage ||
		stale.Status.GetCondition(v1alpha1.ConditionReady).LastTransitionTime != built.Status.GetCondition(v1alpha1.ConditionReady).LastTransitionTime {
		t.Errorf("a failed re-check changed the resolved status or Ready's transition: %+v", stale.Status)
	}
	if traffic.Total("PUT") != 0 {
		t.Errorf("a failed re-check pushed: %v", traffic.Requests)
	}
	// Again, still failing: no second event.
	again, events, err, _ := x.run(t, stale, lifecycle)
	rt.Check(t, again, err, events, rt.Outcome{Ready: corev1.ConditionTrue, Stale: registry.ReasonRegistryUnavailable,
		Requeue: rt.Circuit, MinDelay: 4 * time.Minute, MaxDelay: 6 * time.Minute})
	x.f.ClearFaults()
	x.waitCircuitsClosed(t)

	// The stack's own re-check failed: it is Ready, not UpToDate. The
	// builder neither turns not Ready nor rebuilds.
	x.stack.Status.MarkStale(registry.ReasonRegistryUnavailable, "GET …: 503")
	recovered, events, err, traffic := x.run(t, again, lifecycle)
	rt.Check(t, recovered, err, events, rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync,
		MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute, EventReasons: []string{"UpToDate"}})
	if traffic.Total("PUT") != 0 || recovered.Status.LatestImage != built.Status.LatestImage {
		t.Errorf("recovery beside a stale stack rebuilt: %v, latestImage %s", traffic.Requests, recovered.Status.LatestImage)
	}

	// The lifecycle-image ConfigMap's image is resolved again (a new
	// source, as after its resync interval) while its registry answers
	// 503: a re-check too.
	x.lifecycle = NewLifecycleSource(time.Hour)
	x.f.Inject("", "/lifecycle/manifests/", -1, registrytest.Answer(503, nil, ""))
	lifecycleStale, events, err, traffic := x.run(t, recovered, lifecycle)
	rt.Check(t, lifecycleStale, err, events, rt.Outcome{Ready: corev1.ConditionTrue, Stale: registry.ReasonRegistryUnavailable,
		Requeue: rt.Circuit, MinDelay: 4 * time.Minute, MaxDelay: 6 * time.Minute,
		EventReasons: []string{registry.ReasonRegistryUnavailable}, MessageContains: "lifecycle"})
	if traffic.Total("PUT") != 0 || lifecycleStale.Status.LatestImage != built.Status.LatestImage {
		t.Errorf("a failed lifecycle re-read pushed or changed the image: %v, latestImage %s", traffic.Requests, lifecycleStale.Status.LatestImage)
	}
	// The same failure once the stack has a new generation (reconciled):
	// the builder's inputs moved as far as its status tells, so the
	// failure is part of an update, and it is not Ready.
	x.stack.Generation, x.stack.Status.ObservedGeneration = 4, 4
	x.lifecycle = NewLifecycleSource(time.Hour)
	moved, events, err, _ := x.run(t, lifecycleStale, lifecycle)
	rt.Check(t, moved, err, events, rt.Outcome{Ready: corev1.ConditionFalse, Reason: registry.ReasonRegistryUnavailable, Reconciling: true,
		Requeue: rt.Circuit, MinDelay: 4 * time.Minute, MaxDelay: 6 * time.Minute, EventReasons: []string{registry.ReasonRegistryUnavailable}})
	x.stack.Generation, x.stack.Status.ObservedGeneration = 3, 3
	x.f.ClearFaults()
	x.waitCircuitsClosed(t)

	// New inputs (the stack's run image moved to another tag) and the push
	// fails: an update, not a re-check. Not Ready; the last image kept.
	x.stack.Status.RunImage.Image = x.f.Addr + "/stack/run:2"
	x.f.Inject("PUT", "/builders/go/manifests/", -1, registrytest.Answer(503, nil, ""))
	updating, events, err, _ := x.run(t, lifecycleStale, lifecycle)
	rt.Check(t, updating, err, events, rt.Outcome{Ready: corev1.ConditionFalse, Reason: registry.ReasonRegistryUnavailable, Reconciling: true,
		Requeue: rt.Circuit, MinDelay: 4 * time.Minute, MaxDelay: 6 * time.Minute, EventReasons: []string{registry.ReasonRegistryUnavailable}})
	if updating.Status.GetCondition(v1alpha1.ConditionUpToDate).IsTrue() {
		t.Error("UpToDate True after a failed update")
	}
	if updating.Status.LatestImage != built.Status.LatestImage {
		t.Errorf("latestImage %q, want the last good %q kept", updating.Status.LatestImage, built.Status.LatestImage)
	}
}

// waitCircuitsClosed waits for the circuits' probes (about once a second)
// to find every failing place answering again.
func (x *fixture) waitCircuitsClosed(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); len(x.client.Circuits().Open()) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("circuits still open: %v", x.client.Circuits().Open())
		}
	}
}

// TestBuilderPinnedRunImage: with spec.pinRunImage the run image (and its
// mirrors) are written by the digest the stack resolved, in run.toml, the
// metadata label and status; the builder is built again when the stack's run
// image moves. Without it, the tag, as before.
func TestBuilderPinnedRunImage(t *testing.T) {
	x := newFixture(t)
	lifecycle := x.f.Addr + "/lifecycle:0.21.0"
	digest := func(c byte) string { return "sha256:" + strings.Repeat(string(c), 64) }
	x.stack.Status.RunImage.LatestImage = x.f.Addr + "/stack/run@" + digest('a')
	x.stack.Status.RunImage.Mirrors = []string{"mirror.example.com/stack/run:1"}
	check := func(b *v1alpha1.Builder, image, mirror string) {
		t.Helper()
		if !b.Status.IsReady() || b.Status.Stack.RunImage != image {
			t.Fatalf("ready %v, status.stack.runImage %q, want %q (%+v)", b.Status.IsReady(), b.Status.Stack.RunImage, image, b.Status.Conditions)
		}
		img := x.read(t, b.Status.LatestImage)
		files, err := sampleimages.Files(img)
		if err != nil {
			t.Fatal(err)
		}
		if run := files["cnb/run.toml"]; !strings.Contains(run, `"`+image+`"`) || !strings.Contains(run, `"`+mirror+`"`) {
			t.Errorf("run.toml names neither %s nor %s:\n%s", image, mirror, run)
		}
		cf, _ := img.ConfigFile()
		if meta := cf.Config.Labels[cnb.LabelBuilderMetadata]; !strings.Contains(meta, image) {
			t.Errorf("builder metadata lacks %s: %s", image, meta)
		}
	}

	tagged, _, err, _ := x.run(t, x.builder(nil), lifecycle)
	if err != nil && !tagged.Status.IsReady() {
		t.Fatal(err)
	}
	check(tagged, x.f.Addr+"/stack/run:1", "mirror.example.com/stack/run:1")

	pinned, _, _, _ := x.run(t, x.builder(func(b *v1alpha1.Builder) { b.Spec.PinRunImage = true }), lifecycle)
	check(pinned, x.f.Addr+"/stack/run@"+digest('a'), "mirror.example.com/stack/run@"+digest('a'))

	// The run image moves under its tag: the pinned builder is built again.
	x.stack.Status.RunImage.LatestImage = x.f.Addr + "/stack/run@" + digest('b')
	moved, _, _, traffic := x.run(t, pinned, lifecycle)
	check(moved, x.f.Addr+"/stack/run@"+digest('b'), "mirror.example.com/stack/run@"+digest('b'))
	if moved.Status.LatestImage == pinned.Status.LatestImage || traffic.Total("PUT") == 0 {
		t.Errorf("the pinned builder was not built again: latestImage %s, %d PUTs", moved.Status.LatestImage, traffic.Total("PUT"))
	}
}

// TestBuilderAdditionalRunImages: a stack's additional run images follow its
// run image in /cnb/run.toml and the metadata label, pinned with the run
// image; one moving rebuilds a pinned builder.
func TestBuilderAdditionalRunImages(t *testing.T) {
	x := newFixture(t)
	lifecycle := x.f.Addr + "/lifecycle:0.21.0"
	digest := func(c byte) string { return "sha256:" + strings.Repeat(string(c), 64) }
	x.stack.Status.RunImage.LatestImage = x.f.Addr + "/stack/run@" + digest('a')
	x.stack.Status.AdditionalRunImages = []v1alpha1.ResolvedRunImage{{Image: x.f.Addr + "/stack/run-full:1",
		LatestImage: x.f.Addr + "/stack/run-full@" + digest('c'), Mirrors: []string{"mirror.example.com/run-full:1"}}}
	runImages := func(b *v1alpha1.Builder) (fromRunTOML, fromLabel []cnb.RunImage) {
		t.Helper()
		if !b.Status.IsReady() {
			t.Fatalf("not Ready: %+v", b.Status.Conditions)
		}
		img := x.read(t, b.Status.LatestImage)
		files, err := sampleimages.Files(img)
		if err != nil {
			t.Fatal(err)
		}
		var run struct {
			Images []struct {
				Image   string   `toml:"image"`
				Mirrors []string `toml:"mirrors"`
			} `toml:"images"`
		}
		if _, err := toml.Decode(files["cnb/run.toml"], &run); err != nil {
			t.Fatal(err)
		}
		for _, i := range run.Images {
			fromRunTOML = append(fromRunTOML, cnb.RunImage{Image: i.Image, Mirrors: i.Mirrors})
		}
		cf, _ := img.ConfigFile()
		var meta struct {
			Images []struct {
				Image   string   `json:"image"`
				Mirrors []string `json:"mirrors"`
			} `json:"images"`
		}
		if err := json.Unmarshal([]byte(cf.Config.Labels[cnb.LabelBuilderMetadata]), &meta); err != nil {
			t.Fatal(err)
		}
		for _, i := range meta.Images {
			fromLabel = append(fromLabel, cnb.RunImage{Image: i.Image, Mirrors: i.Mirrors})
		}
		return fromRunTOML, fromLabel
	}
	check := func(b *v1alpha1.Builder, want []cnb.RunImage) {
		t.Helper()
		fromRunTOML, fromLabel := runImages(b)
		if diff := cmp.Diff(want, fromRunTOML, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("run.toml images (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(want, fromLabel, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("metadata label images (-want +got):\n%s", diff)
		}
	}

	tagged, _, _, _ := x.run(t, x.builder(nil), lifecycle)
	check(tagged, []cnb.RunImage{{Image: x.f.Addr + "/stack/run:1"}, {Image: x.f.Addr + "/stack/run-full:1", Mirrors: []string{"mirror.example.com/run-full:1"}}})

	pinned, _, _, _ := x.run(t, x.builder(func(b *v1alpha1.Builder) { b.Spec.PinRunImage = true }), lifecycle)
	check(pinned, []cnb.RunImage{{Image: x.f.Addr + "/stack/run@" + digest('a')},
		{Image: x.f.Addr + "/stack/run-full@" + digest('c'), Mirrors: []string{"mirror.example.com/run-full@" + digest('c')}}})

	// The additional run image moves under its tag: built again.
	x.stack.Status.AdditionalRunImages[0].LatestImage = x.f.Addr + "/stack/run-full@" + digest('d')
	moved, _, _, _ := x.run(t, pinned, lifecycle)
	check(moved, []cnb.RunImage{{Image: x.f.Addr + "/stack/run@" + digest('a')},
		{Image: x.f.Addr + "/stack/run-full@" + digest('d'), Mirrors: []string{"mirror.example.com/run-full@" + digest('d')}}})
	if moved.Status.LatestImage == pinned.Status.LatestImage {
		t.Errorf("the pinned builder was not built again: latestImage %s", moved.Status.LatestImage)
	}

	// Two run images of one repository: by tag the lifecycle tells them
	// apart, pinned by digest it cannot; the pinned builder stalls, and
	// keeps its image.
	x.stack.Status.AdditionalRunImages[0] = v1alpha1.ResolvedRunImage{Image: x.f.Addr + "/stack/run:full", LatestImage: x.f.Addr + "/stack/run@" + digest('e')}
	tagged, _, _, _ = x.run(t, x.builder(nil), lifecycle)
	check(tagged, []cnb.RunImage{{Image: x.f.Addr + "/stack/run:1"}, {Image: x.f.Addr + "/stack/run:full"}})
	for name, b := range map[string]*v1alpha1.Builder{"pinned": moved} {
		t.Run(name, func(t *testing.T) {
			failed, events, err, _ := x.run(t, b, lifecycle)
			rt.Check(t, failed, err, events, rt.Outcome{Ready: corev1.ConditionFalse, Reason: ReasonRunImagesShareRepository, Stalled: true,
				Requeue: rt.NoRequeue, EventReasons: []string{ReasonRunImagesShareRepository},
				MessageContains: "run images 1 and 2 of ClusterStack jammy are both in " + x.f.Addr + "/stack/run: pinned by digest"})
			if failed.Status.LatestImage != b.Status.LatestImage {
				t.Errorf("latestImage %q, want %q kept", failed.Status.LatestImage, b.Status.LatestImage)
			}
		})
	}
}

// TestBuilderCopiedRunImage: with spec.copyRunImage the run image is copied
// into the builder's repository under its own digest, and run.toml names the
// copy, the stack's reference after it; a second builder of the repository
// finds the copy with one HEAD; a resync copies nothing.
func TestBuilderCopiedRunImage(t *testing.T) {
	x := newFixture(t)
	lifecycle := x.f.Addr + "/lifecycle:0.21.0"
	run, err := x.f.Resolve(x.f.Addr + "/stack/run:1")
	if err != nil {
		t.Fatal(err)
	}
	x.stack.Status.RunImage.LatestImage = run
	x.stack.Status.RunImage.Mirrors = []string{"mirror.example.com/stack/run:1"}
	digest := strings.TrimPrefix(run, x.f.Addr+"/stack/run@")
	copied := x.f.Addr + "/builders/go@" + digest
	copyTag := x.f.Addr + "/builders/go:run-" + strings.ReplaceAll(digest, ":", "-")

	b, _, err, _ := x.run(t, x.builder(func(b *v1alpha1.Builder) { b.Spec.CopyRunImage = true }), lifecycle)
	if !b.Status.IsReady() {
		t.Fatalf("not Ready: %v", err)
	}
	if b.Status.Stack.RunImage != copied {
		t.Errorf("status.stack.runImage %q, want the copy %q", b.Status.Stack.RunImage, copied)
	}
	if got, err := x.f.Resolve(copyTag); err != nil || got != copied {
		t.Errorf("%s points at %q (%v), want %s", copyTag, got, err, copied)
	}
	files, err := sampleimages.Files(x.read(t, b.Status.LatestImage))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("[[images]]\n  image = %q\n  mirrors = [%q, %q]\n", copied, run, "mirror.example.com/stack/run@"+digest)
	if got := files["cnb/run.toml"]; got != want {
		t.Errorf("run.toml:\n%s\nwant:\n%s", got, want)
	}

	// A second run image goes into a repository of its own beside the
	// builder's.
	full, err := x.f.Resolve(x.f.Addr + "/lifecycle:0.21.0") // any image will do
	if err != nil {
		t.Fatal(err)
	}
	x.stack.Status.AdditionalRunImages = []v1alpha1.ResolvedRunImage{{Image: x.f.Addr + "/lifecycle:0.21.0", LatestImage: full}}
	fullDigest := strings.TrimPrefix(full, x.f.Addr+"/lifecycle@")
	two, _, err, _ := x.run(t, x.builder(func(b *v1alpha1.Builder) {
		b.Name, b.Spec.Tag, b.Spec.CopyRunImage = "go-two-runs", x.f.Addr+"/builders/go:two-runs", true
	}), lifecycle)
	if !two.Status.IsReady() {
		t.Fatalf("builder of two run images: %v", err)
	}
	secondCopy := x.f.Addr + "/builders/go-run-2@" + fullDigest
	if got, err := x.f.Resolve(x.f.Addr + "/builders/go-run-2:run-" + strings.ReplaceAll(fullDigest, ":", "-")); err != nil || got != secondCopy {
		t.Errorf("second run image copied to %q (%v), want %s", got, err, secondCopy)
	}
	files, err = sampleimages.Files(x.read(t, two.Status.LatestImage))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(files["cnb/run.toml"], fmt.Sprintf("image = %q", secondCopy)) {
		t.Errorf("run.toml does not name the second copy %s:\n%s", secondCopy, files["cnb/run.toml"])
	}

	// A second run image of the stack's run repository: its copy has a
	// repository of its own, and the stack's reference, which the
	// lifecycle would take for the first run image's, is no mirror of it.
	x.f.PushImage("stack/run:full", nil)
	sameRepo, err := x.f.Resolve(x.f.Addr + "/stack/run:full")
	if err != nil {
		t.Fatal(err)
	}
	x.stack.Status.AdditionalRunImages = []v1alpha1.ResolvedRunImage{{Image: x.f.Addr + "/stack/run:full", LatestImage: sameRepo}}
	shared, _, err, _ := x.run(t, x.builder(func(b *v1alpha1.Builder) {
		b.Name, b.Spec.Tag, b.Spec.CopyRunImage = "go-shared", x.f.Addr+"/builders/go:shared", true
	}), lifecycle)
	if !shared.Status.IsReady() {
		t.Fatalf("builder of two run images of one repository, copied: %v", err)
	}
	files, err = sampleimages.Files(x.read(t, shared.Status.LatestImage))
	if err != nil {
		t.Fatal(err)
	}
	want = fmt.Sprintf("[[images]]\n  image = %q\n  mirrors = [%q, %q]\n\n[[images]]\n  image = %q\n",
		copied, run, "mirror.example.com/stack/run@"+digest, x.f.Addr+"/builders/go-run-2@"+strings.TrimPrefix(sameRepo, x.f.Addr+"/stack/run@"))
	if got := files["cnb/run.toml"]; got != want {
		t.Errorf("run.toml:\n%s\nwant:\n%s", got, want)
	}
	x.stack.Status.AdditionalRunImages = nil

	// Another builder of the repository: the copy is there.
	x.f.ForgetRequests()
	other, _, err, _ := x.run(t, x.builder(func(b *v1alpha1.Builder) {
		b.Name, b.Spec.Tag, b.Spec.CopyRunImage = "go-2", x.f.Addr+"/builders/go:two", true
	}), lifecycle)
	if !other.Status.IsReady() || other.Status.Stack.RunImage != copied {
		t.Fatalf("second builder: ready %v, run image %q (%v)", other.Status.IsReady(), other.Status.Stack.RunImage, err)
	}
	if n := x.f.Count("", "/manifests/run-"); n != 1 {
		t.Errorf("second builder: %d requests about the copy, want one HEAD: %q", n, x.f.Requests())
	}
	// A resync: one HEAD of the builder's tag, nothing of the copy.
	x.f.ForgetRequests()
	x.run(t, b, lifecycle)
	if got := x.f.Requests(); len(got) != 1 {
		t.Errorf("resync sent %q, want one HEAD", got)
	}
}
