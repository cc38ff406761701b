package clusterstore

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cnb"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	rt "github.com/buildsmith/buildsmith/pkg/reconciler/reconcilertest"
	"github.com/buildsmith/buildsmith/pkg/registry"
	"github.com/buildsmith/buildsmith/test/registrytest"
	"github.com/buildsmith/buildsmith/test/sampleimages"
)

func TestReconcile(t *testing.T) {
	f := registrytest.New(t)
	goImage := f.PushBuildpackage("bp/go:1", registrytest.Buildpack{ID: "example/go", Version: "1.0.0", API: "0.10"},
		registrytest.Buildpack{ID: "example/go", Version: "1.1.0", API: "0.11"})
	f.PushBuildpackage("bp/node:1", registrytest.Buildpack{ID: "example/node", Version: "2.0.0", API: "0.10"})
	// Same id@version as bp/go:1, other contents.
	f.PushBuildpackage("bp/go-fork:1", registrytest.Buildpack{ID: "example/go", Version: "1.0.0", API: "0.10"})
	f.PushImage("stack/build:1", nil)
	goDigest, _ := goImage.Digest()
	multi, err := sampleimages.BuildpackageIndex([]v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}},
		sampleimages.Buildpack{ID: "example/multi", Version: "1.0.0", Detect: "exit 0\n", Build: "exit 0\n"})
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(f.Ref("bp/multi:1"), multi); err != nil {
		t.Fatal(err)
	}
	curl, err := sampleimages.ExtensionPackage(sampleimages.Extension{ID: "example/curl", Version: "1.0.0", Detect: "exit 0\n", Generate: "true\n"})
	if err != nil {
		t.Fatal(err)
	}
	f.Write("ext/curl:1", curl)
	// pack copies buildpack.toml's licenses into this label.
	licensed, err := registrytest.Buildpackage(registrytest.Buildpack{ID: "example/java", Version: "3.0.0", API: "0.10"})
	if err != nil {
		t.Fatal(err)
	}
	f.Write("bp/java:1", withLabel(t, licensed, cnb.LabelBuildpackageMetadata,
		`{"id":"example/java","version":"3.0.0","homepage":"https://example.com","licenses":[{"type":"Apache-2.0"},{"uri":"https://example.com/eula"}]}`))

	previous := []v1alpha1.StoreBuildpack{{ID: "example/old", Version: "0.1.0", DiffID: "sha256:1", Digest: "sha256:2"}}
	tests := []struct {
		name     string
		sources  []string
		previous bool
		fault    func()
		want     rt.Outcome
		// wantBuildpacks: id@version in status order; nil: the previous list kept.
		wantBuildpacks []string
		wantExtensions []string
		validate       func(*testing.T, []v1alpha1.StoreBuildpack)
	}{{
		name:           "ready",
		sources:        []string{"bp/node:1", "bp/go:1"},
		want:           rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync, MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute, EventReasons: []string{"Ready"}},
		wantBuildpacks: []string{"example/go@1.0.0", "example/go@1.1.0", "example/node@2.0.0"},
	}, {
		name:           "an index: each buildpack with the platforms it is there for, and their targets",
		sources:        []string{"bp/multi:1", "bp/node:1"},
		want:           rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync, MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute, EventReasons: []string{"Ready"}},
		wantBuildpacks: []string{"example/multi@1.0.0", "example/node@2.0.0"},
		validate: func(t *testing.T, bps []v1alpha1.StoreBuildpack) {
			both := []v1alpha1.Platform{{OS: "linux", Arch: "amd64"}, {OS: "linux", Arch: "arm64"}}
			if diff := cmp.Diff(both, bps[0].Platforms); diff != "" {
				t.Errorf("platforms of the index's buildpack (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]v1alpha1.BuildpackTarget{{OS: "linux", Arch: "amd64"}, {OS: "linux", Arch: "arm64"}}, bps[0].Targets); diff != "" {
				t.Errorf("targets of the index's buildpack (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(both[:1], bps[1].Platforms); diff != "" {
				t.Errorf("platforms of a plain image's buildpack (-want +got):\n%s", diff)
			}
		},
	}, {
		name:           "the licenses a package's label declares",
		sources:        []string{"bp/java:1", "bp/node:1"},
		want:           rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync, MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute, EventReasons: []string{"Ready"}},
		wantBuildpacks: []string{"example/java@3.0.0", "example/node@2.0.0"},
		validate: func(t *testing.T, bps []v1alpha1.StoreBuildpack) {
			want := []v1alpha1.BuildpackLicense{{Type: "Apache-2.0"}, {URI: "https://example.com/eula"}}
			if diff := cmp.Diff(want, bps[0].Licenses); diff != "" || bps[1].Licenses != nil {
				t.Errorf("licenses of example/java (-want +got):\n%s; of example/node: %v", diff, bps[1].Licenses)
			}
		},
	}, {
		name:           "an extension package beside a buildpackage",
		sources:        []string{"bp/node:1", "ext/curl:1"},
		want:           rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync, MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute, EventReasons: []string{"Ready"}},
		wantBuildpacks: []string{"example/node@2.0.0"},
		wantExtensions: []string{"example/curl@1.0.0"},
	}, {
		name:     "one source unavailable: the whole previous list is kept",
		sources:  []string{"bp/node:1", "bp/go:1"},
		previous: true,
		fault:    func() { f.Inject("", "/bp/node/manifests/", -1, registrytest.Answer(502, nil, "")) },
		want: rt.Outcome{Ready: corev1.ConditionFalse, Reason: registry.ReasonRegistryUnavailable, Reconciling: true,
			Requeue: rt.Circuit, MinDelay: 4 * time.Minute, MaxDelay: 6 * time.Minute,
			EventReasons: []string{registry.ReasonRegistryUnavailable}},
	}, {
		name:     "same buildpack with other contents in two sources",
		sources:  []string{"bp/go:1", "bp/go-fork:1"},
		previous: true,
		want: rt.Outcome{Ready: corev1.ConditionFalse, Reason: cnb.ReasonDuplicateBuildpack, Stalled: true, Requeue: rt.NoRequeue,
			EventReasons: []string{cnb.ReasonDuplicateBuildpack}, MessageContains: "example/go@1.0.0"},
	}, {
		name:    "not a buildpackage",
		sources: []string{"stack/build:1"},
		want: rt.Outcome{Ready: corev1.ConditionFalse, Reason: cnb.ReasonInvalidBuildpackage, Stalled: true, Requeue: rt.NoRequeue,
			EventReasons: []string{cnb.ReasonInvalidBuildpackage}},
	}, {
		name:    "source missing",
		sources: []string{"bp/go:1", "bp/ruby:1"},
		want: rt.Outcome{Ready: corev1.ConditionFalse, Reason: registry.ReasonImageNotFound, Reconciling: true,
			Requeue: rt.Poll, MinDelay: 48 * time.Second, MaxDelay: 72 * time.Second, EventReasons: []string{registry.ReasonImageNotFound}},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer f.ClearFaults()
			store := &v1alpha1.ClusterStore{ObjectMeta: metav1.ObjectMeta{Name: "default", Generation: 2}}
			for _, s := range tc.sources {
				store.Spec.Sources = append(store.Spec.Sources, v1alpha1.ImageSource{Image: f.Addr + "/" + s})
			}
			if tc.previous {
				store.Status.Buildpacks = previous
				store.Status.ObservedGeneration = 1
				store.Status.MarkReady()
			}
			if tc.fault != nil {
				tc.fault()
			}
			ctx, clients := rt.Setup(t, store)
			client := registry.New(ctx, registry.Options{LoopbackRegistries: true, Timeout: 5 * time.Second})
			impl := rt.Controller(ctx, NewController(client, reconciler.DefaultOptions()))
			err := rt.Sync(impl).Reconcile(ctx, store.Name)
			got, getErr := clients.Buildsmith.BuildsmithV1alpha1().ClusterStores().Get(ctx, store.Name, metav1.GetOptions{})
			if getErr != nil {
				t.Fatal(getErr)
			}
			rt.Check(t, got, err, clients.Events(), tc.want)

			if tc.wantBuildpacks == nil {
				if diff := cmp.Diff(store.Status.Buildpacks, got.Status.Buildpacks); diff != "" {
					t.Errorf("buildpacks not kept (-before +after):\n%s", diff)
				}
				return
			}
			var ids []string
			for _, bp := range got.Status.Buildpacks {
				ids = append(ids, bp.ID+"@"+bp.Version)
			}
			if diff := cmp.Diff(tc.wantBuildpacks, ids); diff != "" {
				t.Errorf("buildpacks (-want +got):\n%s", diff)
			}
			var extensions []string
			for _, ext := range got.Status.Extensions {
				extensions = append(extensions, ext.ID+"@"+ext.Version)
				if ext.DiffID == "" || ext.API == "" || len(ext.Platforms) != 1 {
					t.Errorf("incomplete extension %+v", ext)
				}
			}
			if diff := cmp.Diff(tc.wantExtensions, extensions); diff != "" {
				t.Errorf("extensions (-want +got):\n%s", diff)
			}
			if tc.validate != nil {
				tc.validate(t, got.Status.Buildpacks)
			}
			for _, bp := range got.Status.Buildpacks {
				if bp.ID == "example/go" && bp.StoreImage.Image != f.Addr+"/bp/go@"+goDigest.String() {
					t.Errorf("%s@%s from %s, want by digest", bp.ID, bp.Version, bp.StoreImage.Image)
				}
				if bp.Digest == "" || bp.DiffID == "" || bp.Size == 0 || bp.API == "" {
					t.Errorf("incomplete buildpack %+v", bp)
				}
			}
		})
	}
}

// TestFailureKeepsTheNewestStatus: a reconcile that starts from an informer
// copy older than the status on the API server (an enqueue that beat the
// watch event) and fails writes its failure onto the API server's status,
// not the stale one: the buildpacks listed meanwhile stay.
func TestFailureKeepsTheNewestStatus(t *testing.T) {
	f := registrytest.New(t)
	f.Inject("", "/bp/go/manifests/", -1, registrytest.Answer(502, nil, ""))
	stale := &v1alpha1.ClusterStore{ObjectMeta: metav1.ObjectMeta{Name: "default", Generation: 1, ResourceVersion: "1"},
		Spec: v1alpha1.ClusterStoreSpec{Sources: []v1alpha1.ImageSource{{Image: f.Addr + "/bp/go:1"}}}}
	ctx, clients := rt.Setup(t, stale)
	newest := stale.DeepCopy()
	newest.ResourceVersion = "2"
	newest.Status.Buildpacks = []v1alpha1.StoreBuildpack{{ID: "example/go", Version: "1.0.0", DiffID: "sha256:1", Digest: "sha256:2"}}
	newest.Status.ObservedGeneration = 1
	newest.Status.MarkReady()
	stores := clients.Buildsmith.BuildsmithV1alpha1().ClusterStores()
	if _, err := stores.UpdateStatus(ctx, newest, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	impl := rt.Controller(ctx, NewController(registry.New(ctx, registry.Options{LoopbackRegistries: true}), reconciler.DefaultOptions()))
	err := rt.Sync(impl).Reconcile(ctx, stale.Name)
	got, getErr := stores.Get(ctx, stale.Name, metav1.GetOptions{})
	if getErr != nil {
		t.Fatal(getErr)
	}
	// The newest status is Ready for this generation: the failed re-check
	// keeps it Ready, saying so in UpToDate alone.
	rt.Check(t, got, err, clients.Events(), rt.Outcome{Ready: corev1.ConditionTrue, Stale: registry.ReasonRegistryUnavailable,
		Requeue: rt.Circuit, MinDelay: 4 * time.Minute, MaxDelay: 6 * time.Minute,
		EventReasons: []string{registry.ReasonRegistryUnavailable}})
	if diff := cmp.Diff(newest.Status.Buildpacks, got.Status.Buildpacks); diff != "" {
		t.Errorf("buildpacks of the newest status not kept (-newest +got):\n%s", diff)
	}
}

// withLabel is img with the label set.
func withLabel(t *testing.T, img v1.Image, label, value string) v1.Image {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg := cf.Config.DeepCopy()
	cfg.Labels[label] = value
	out, err := mutate.Config(img, *cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
