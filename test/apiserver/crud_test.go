package apiserver

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	duckv1 "knative.dev/pkg/apis/duck/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/client/informers/externalversions"
)

// object is what every buildsmith kind is.
type object interface {
	metav1.Object
	duckv1.KRShaped
}

// typedClient is the part of a generated typed client the round trip uses.
type typedClient[T object] interface {
	Create(context.Context, T, metav1.CreateOptions) (T, error)
	Get(context.Context, string, metav1.GetOptions) (T, error)
	Update(context.Context, T, metav1.UpdateOptions) (T, error)
	UpdateStatus(context.Context, T, metav1.UpdateOptions) (T, error)
}

// kindCase describes one kind for roundTrip.
type kindCase[T object] struct {
	client typedClient[T]
	obj    T
	// checkDefaults checks what the API server's schema defaulted.
	checkDefaults func(t *testing.T, got T)
	// setStatus fills kind-specific status fields; status reads them back.
	setStatus func(T)
	status    func(T) any
	// setSpec changes the spec; spec reads it back.
	setSpec func(T)
	spec    func(T) any
	// list lists through a started informer's lister.
	list func(externalversions.SharedInformerFactory) ([]T, error)
}

func roundTrip[T object](t *testing.T, kc kindCase[T]) {
	ctx := context.Background()

	created, err := kc.client.Create(ctx, kc.obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	got, err := kc.client.Get(ctx, created.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if diff := cmp.Diff(kc.spec(created), kc.spec(got)); diff != "" {
		t.Errorf("spec read back differs (-created +got):\n%s", diff)
	}
	if kc.checkDefaults != nil {
		kc.checkDefaults(t, got)
	}

	// Status goes through the status subresource; spec changes sent with it
	// are dropped.
	specBefore := kc.spec(got)
	kc.setStatus(got)
	got.GetStatus().ObservedGeneration = got.GetGeneration()
	v1alpha1Status(got).MarkReady()
	kc.setSpec(got)
	updated, err := kc.client.UpdateStatus(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("UpdateStatus: %v", err)
	}
	if diff := cmp.Diff(specBefore, kc.spec(updated)); diff != "" {
		t.Errorf("UpdateStatus changed the spec (-before +after):\n%s", diff)
	}
	if !v1alpha1Status(updated).IsReady() || updated.GetStatus().ObservedGeneration != updated.GetGeneration() {
		t.Errorf("status not stored: %+v", updated.GetStatus())
	}
	wantStatus := kc.status(updated)

	// Spec goes through the main resource; status sent with it is dropped.
	kc.setSpec(updated)
	updated.GetStatus().Conditions = nil
	specWanted := kc.spec(updated)
	again, err := kc.client.Update(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if diff := cmp.Diff(specWanted, kc.spec(again)); diff != "" {
		t.Errorf("Update did not store the spec (-want +got):\n%s", diff)
	}
	if again.GetGeneration() != updated.GetGeneration()+1 {
		t.Errorf("generation = %d after a spec change, want %d", again.GetGeneration(), updated.GetGeneration()+1)
	}
	if !v1alpha1Status(again).IsReady() {
		t.Errorf("Update changed the status: %+v", again.GetStatus())
	}
	if diff := cmp.Diff(wantStatus, kc.status(again)); diff != "" {
		t.Errorf("kind-specific status changed by Update (-want +got):\n%s", diff)
	}

	// The generated informers and listers see it.
	factory := externalversions.NewSharedInformerFactory(client, 0)
	lister := func() ([]T, error) { return kc.list(factory) }
	if _, err := lister(); err != nil { // registers the informer
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	factory.Start(stop)
	syncCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for typ, ok := range factory.WaitForCacheSync(syncCtx.Done()) {
		if !ok {
			t.Fatalf("informer for %v did not sync", typ)
		}
	}
	listed, err := lister()
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var found bool
	for _, o := range listed {
		if o.GetName() == again.GetName() && o.GetNamespace() == again.GetNamespace() {
			found = true
			if o.GetResourceVersion() != again.GetResourceVersion() {
				t.Errorf("lister has resourceVersion %s, want %s", o.GetResourceVersion(), again.GetResourceVersion())
			}
		}
	}
	if !found {
		t.Errorf("lister does not list %s", again.GetName())
	}
}

// v1alpha1Status returns the condition helpers of any of our kinds.
func v1alpha1Status(o object) *v1alpha1.ConditionedStatus {
	switch o := any(o).(type) {
	case *v1alpha1.ClusterStore:
		return &o.Status.ConditionedStatus
	case *v1alpha1.ClusterStack:
		return &o.Status.ConditionedStatus
	case *v1alpha1.Builder:
		return &o.Status.ConditionedStatus
	case *v1alpha1.ClusterBuilder:
		return &o.Status.ConditionedStatus
	}
	panic("not a buildsmith kind")
}

func builderSpec() v1alpha1.BuilderSpec {
	return v1alpha1.BuilderSpec{
		Tag:   "registry.example.com/builders/go:latest",
		Stack: v1alpha1.StackRef{Name: "jammy"},
		Store: v1alpha1.StoreRef{Name: "default"},
		Order: []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "example/go"}, {ID: "example/procfile", Optional: true}}}},
	}
}

func builderStatus(s *v1alpha1.BuilderStatus) {
	s.LatestImage = "registry.example.com/builders/go@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	s.BuilderMetadata = []v1alpha1.BuildpackMetadata{{ID: "example/go", Version: "1.0.0", Homepage: "https://example.com"}}
	s.Order = []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "example/go", Version: "1.0.0"}}}}
	s.Stack = v1alpha1.BuiltStack{ID: "io.buildpacks.stacks.jammy", RunImage: "registry.example.com/run@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
	s.Lifecycle = v1alpha1.LifecycleStatus{Version: "0.21.0", APIs: v1alpha1.LifecycleAPIs{
		Buildpack: v1alpha1.APIVersions{Supported: []string{"0.7", "0.12"}},
		Platform:  v1alpha1.APIVersions{Deprecated: []string{}, Supported: []string{"0.13"}},
	}}
	s.ObservedStackGeneration, s.ObservedStoreGeneration = 2, 3
}

func TestRoundTripClusterStore(t *testing.T) {
	roundTrip(t, kindCase[*v1alpha1.ClusterStore]{
		client: client.BuildsmithV1alpha1().ClusterStores(),
		obj: &v1alpha1.ClusterStore{
			ObjectMeta: metav1.ObjectMeta{Name: "roundtrip"},
			Spec: v1alpha1.ClusterStoreSpec{
				Sources:           []v1alpha1.ImageSource{{Image: "registry.example.com/bp/go:1"}},
				ServiceAccountRef: &v1alpha1.ServiceAccountRef{Name: "reader", Namespace: "buildsmith"},
			},
		},
		setStatus: func(o *v1alpha1.ClusterStore) {
			o.Status.Buildpacks = []v1alpha1.StoreBuildpack{{
				ID: "example/go", Version: "1.0.0", API: "0.10", DiffID: "sha256:aa", Digest: "sha256:bb", Size: 42,
				StoreImage: v1alpha1.ImageSource{Image: "registry.example.com/bp/go@sha256:cc"},
				Order:      []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "x", Version: "1", Optional: true}}}},
				Stacks:     []v1alpha1.BuildpackStack{{ID: "*"}},
				Targets:    []v1alpha1.BuildpackTarget{{OS: "linux", Arch: "amd64", Distros: []v1alpha1.Distro{{Name: "ubuntu", Version: "22.04"}}}},
			}}
		},
		status: func(o *v1alpha1.ClusterStore) any { return o.Status.Buildpacks },
		setSpec: func(o *v1alpha1.ClusterStore) {
			o.Spec.Sources = append(o.Spec.Sources, v1alpha1.ImageSource{Image: "x:1"})
		},
		spec: func(o *v1alpha1.ClusterStore) any { return o.Spec },
		list: func(f externalversions.SharedInformerFactory) ([]*v1alpha1.ClusterStore, error) {
			return f.Buildsmith().V1alpha1().ClusterStores().Lister().List(labels.Everything())
		},
	})
}

func TestRoundTripClusterStack(t *testing.T) {
	roundTrip(t, kindCase[*v1alpha1.ClusterStack]{
		client: client.BuildsmithV1alpha1().ClusterStacks(),
		obj: &v1alpha1.ClusterStack{
			ObjectMeta: metav1.ObjectMeta{Name: "roundtrip"},
			Spec: v1alpha1.ClusterStackSpec{
				ID:         "io.buildpacks.stacks.jammy",
				BuildImage: v1alpha1.ImageSource{Image: "registry.example.com/build:1"},
				RunImage:   v1alpha1.RunImageSource{Image: "registry.example.com/run:1"},
			},
		},
		setStatus: func(o *v1alpha1.ClusterStack) {
			o.Status.ID, o.Status.Mixins = "io.buildpacks.stacks.jammy", []string{"build:git"}
			o.Status.UserID, o.Status.GroupID = 1000, 1001
			o.Status.OS, o.Status.Arch = "linux", "amd64"
			o.Status.Distro = &v1alpha1.Distro{Name: "ubuntu", Version: "22.04"}
			o.Status.BuildImage = v1alpha1.ResolvedImage{Image: "registry.example.com/build:1", LatestImage: "registry.example.com/build@sha256:aa"}
			o.Status.RunImage = v1alpha1.ResolvedRunImage{Image: "registry.example.com/run:1", LatestImage: "registry.example.com/run@sha256:bb"}
		},
		status: func(o *v1alpha1.ClusterStack) any {
			s := o.Status.DeepCopy()
			s.ConditionedStatus = v1alpha1.ConditionedStatus{}
			return s
		},
		setSpec: func(o *v1alpha1.ClusterStack) { o.Spec.RunImage.Image = "registry.example.com/run:2" },
		spec:    func(o *v1alpha1.ClusterStack) any { return o.Spec },
		list: func(f externalversions.SharedInformerFactory) ([]*v1alpha1.ClusterStack, error) {
			return f.Buildsmith().V1alpha1().ClusterStacks().Lister().List(labels.Everything())
		},
	})
}

func TestRoundTripBuilder(t *testing.T) {
	roundTrip(t, kindCase[*v1alpha1.Builder]{
		client: client.BuildsmithV1alpha1().Builders("default"),
		obj: &v1alpha1.Builder{
			ObjectMeta: metav1.ObjectMeta{Name: "roundtrip", Namespace: "default"},
			Spec:       v1alpha1.NamespacedBuilderSpec{BuilderSpec: builderSpec()},
		},
		checkDefaults: func(t *testing.T, got *v1alpha1.Builder) {
			if got.Spec.ServiceAccountName != "default" || got.Spec.Stack.Kind != "ClusterStack" || got.Spec.Store.Kind != "ClusterStore" {
				t.Errorf("schema defaults not applied: %+v", got.Spec)
			}
		},
		setStatus: func(o *v1alpha1.Builder) { builderStatus(&o.Status) },
		status: func(o *v1alpha1.Builder) any {
			s := o.Status.DeepCopy()
			s.ConditionedStatus = v1alpha1.ConditionedStatus{}
			return s
		},
		setSpec: func(o *v1alpha1.Builder) { o.Spec.AdditionalLabels = map[string]string{"team": "platform"} },
		spec:    func(o *v1alpha1.Builder) any { return o.Spec },
		list: func(f externalversions.SharedInformerFactory) ([]*v1alpha1.Builder, error) {
			return f.Buildsmith().V1alpha1().Builders().Lister().Builders("default").List(labels.Everything())
		},
	})
}

func TestRoundTripClusterBuilder(t *testing.T) {
	roundTrip(t, kindCase[*v1alpha1.ClusterBuilder]{
		client: client.BuildsmithV1alpha1().ClusterBuilders(),
		obj: &v1alpha1.ClusterBuilder{
			ObjectMeta: metav1.ObjectMeta{Name: "roundtrip"},
			Spec: v1alpha1.ClusterBuilderSpec{
				BuilderSpec:       builderSpec(),
				ServiceAccountRef: &v1alpha1.ServiceAccountRef{Name: "pusher", Namespace: "buildsmith"},
			},
		},
		setStatus: func(o *v1alpha1.ClusterBuilder) { builderStatus(&o.Status) },
		status: func(o *v1alpha1.ClusterBuilder) any {
			s := o.Status.DeepCopy()
			s.ConditionedStatus = v1alpha1.ConditionedStatus{}
			return s
		},
		setSpec: func(o *v1alpha1.ClusterBuilder) { o.Spec.Tag = "registry.example.com/builders/go:v2" },
		spec:    func(o *v1alpha1.ClusterBuilder) any { return o.Spec },
		list: func(f externalversions.SharedInformerFactory) ([]*v1alpha1.ClusterBuilder, error) {
			return f.Buildsmith().V1alpha1().ClusterBuilders().Lister().List(labels.Everything())
		},
	})
}
