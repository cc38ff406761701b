package buildpack

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cnb"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	rt "github.com/buildsmith/buildsmith/pkg/reconciler/reconcilertest"
	"github.com/buildsmith/buildsmith/pkg/registry"
	"github.com/buildsmith/buildsmith/test/registrytest"
	"github.com/buildsmith/buildsmith/test/sampleimages"
)

// TestReconcile: a Buildpack lists what its image holds, read with its
// namespace's ServiceAccount; a failure keeps the last lists.
func TestReconcile(t *testing.T) {
	f := registrytest.New(t)
	f.PushBuildpackage("team/go:1", registrytest.Buildpack{ID: "example/go", Version: "1.0.0", API: "0.10"},
		registrytest.Buildpack{ID: "example/go", Version: "1.1.0", API: "0.11"})
	f.PushBuildpackage("team/go:1.1.0", registrytest.Buildpack{ID: "example/go", Version: "1.0.0", API: "0.10"},
		registrytest.Buildpack{ID: "example/go", Version: "1.1.0", API: "0.11"})
	f.PushImage("stack/build:1", nil)
	curl, err := sampleimages.ExtensionPackage(sampleimages.Extension{ID: "example/curl", Version: "1.0.0", Detect: "exit 0\n", Generate: "true\n"})
	if err != nil {
		t.Fatal(err)
	}
	f.Write("team/curl:1", curl)
	// Indexes of 33 platforms, one of them named 33 times (read once).
	var many []v1.Platform
	for i := range 33 {
		many = append(many, v1.Platform{OS: "linux", Architecture: "arm", Variant: fmt.Sprintf("v%d", i)})
	}
	for repo, platforms := range map[string][]v1.Platform{"team/wide:1": many, "team/narrow:1": many[:1]} {
		idx, err := sampleimages.BuildpackageIndex(platforms, sampleimages.Buildpack{ID: "example/wide", Version: "1.0.0", Detect: "exit 0\n", Build: "exit 0\n"})
		if err != nil {
			t.Fatal(err)
		}
		if repo == "team/narrow:1" {
			m, _ := idx.IndexManifest()
			child, _ := idx.Image(m.Manifests[0].Digest)
			for range 32 {
				idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: child, Descriptor: v1.Descriptor{Platform: &many[0]}})
			}
		}
		if err := remote.WriteIndex(f.Ref(repo), idx); err != nil {
			t.Fatal(err)
		}
	}
	previous := []v1alpha1.StoreBuildpack{{ID: "example/old", Version: "0.1.0", DiffID: "sha256:1", Digest: "sha256:2"}}
	ready := rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync, MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute, EventReasons: []string{"Ready"}}

	tests := []struct {
		name     string
		image    string
		policy   string // a semver range the image (a repository) follows
		account  string // the ServiceAccount named; "" is default
		previous bool
		fault    func()
		want     rt.Outcome
		// wantBuildpacks, wantExtensions: id@version in status order;
		// nil buildpacks: the previous lists kept.
		wantBuildpacks, wantExtensions []string
	}{
		{name: "a buildpackage", image: "team/go:1", want: ready,
			wantBuildpacks: []string{"example/go@1.0.0", "example/go@1.1.0"}},
		{name: "following versions: the highest in range", image: "team/go", policy: "<2", want: ready,
			wantBuildpacks: []string{"example/go@1.0.0", "example/go@1.1.0"}},
		{name: "following versions, none in range: waits, the previous lists kept", image: "team/go", policy: ">=2", previous: true,
			want: rt.Outcome{Ready: corev1.ConditionFalse, Reason: reconciler.ReasonNoMatchingTag, Reconciling: true,
				Requeue: rt.Poll, MinDelay: 48 * time.Second, MaxDelay: 72 * time.Second, EventReasons: []string{reconciler.ReasonNoMatchingTag},
				MessageContains: `has no tag of a version in semver ">=2", of its 2 tags`}},
		{name: "following versions, the tag list unreadable: waits, the previous lists kept", image: "team/go", policy: "*", previous: true,
			fault: func() { f.Inject("GET", "/team/go/tags/list", -1, registrytest.Answer(200, nil, "<html>")) },
			want: rt.Outcome{Ready: corev1.ConditionFalse, Reason: registry.ReasonInvalidTagList, Reconciling: true,
				Requeue: rt.Poll, MinDelay: 48 * time.Second, MaxDelay: 72 * time.Second, EventReasons: []string{registry.ReasonInvalidTagList}}},
		{name: "an extension package", image: "team/curl:1", want: ready,
			wantBuildpacks: []string{}, wantExtensions: []string{"example/curl@1.0.0"}},
		{name: "unavailable: the previous lists kept", image: "team/go:1", previous: true,
			fault: func() { f.Inject("", "/team/go/manifests/", -1, registrytest.Answer(502, nil, "")) },
			want: rt.Outcome{Ready: corev1.ConditionTrue, Stale: registry.ReasonRegistryUnavailable,
				Requeue: rt.Circuit, MinDelay: 4 * time.Minute, MaxDelay: 6 * time.Minute,
				EventReasons: []string{registry.ReasonRegistryUnavailable}}},
		{name: "not a buildpackage", image: "stack/build:1",
			want: rt.Outcome{Ready: corev1.ConditionFalse, Reason: cnb.ReasonInvalidBuildpackage, Stalled: true, Requeue: rt.NoRequeue,
				EventReasons: []string{cnb.ReasonInvalidBuildpackage}}},
		{name: "an index of too many platforms", image: "team/wide:1",
			want: rt.Outcome{Ready: corev1.ConditionFalse, Reason: cnb.ReasonTooManyPlatforms, Stalled: true, Requeue: rt.NoRequeue,
				EventReasons: []string{cnb.ReasonTooManyPlatforms}, MessageContains: "an index of 33 platforms, more than the 32"}},
		{name: "an index naming one platform many times", image: "team/narrow:1", want: ready,
			wantBuildpacks: []string{"example/wide@1.0.0"}},
		{name: "missing", image: "team/ruby:1",
			want: rt.Outcome{Ready: corev1.ConditionFalse, Reason: registry.ReasonImageNotFound, Reconciling: true,
				Requeue: rt.Poll, MinDelay: 48 * time.Second, MaxDelay: 72 * time.Second, EventReasons: []string{registry.ReasonImageNotFound}}},
		{name: "a ServiceAccount that is not there", image: "team/go:1", account: "reader",
			want: rt.Outcome{Ready: corev1.ConditionFalse, Reason: registry.ReasonServiceAccountNotFound, Reconciling: true,
				Requeue: rt.Poll, MinDelay: 48 * time.Second, MaxDelay: 72 * time.Second,
				EventReasons: []string{registry.ReasonServiceAccountNotFound}, MessageContains: "team/reader"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer f.ClearFaults()
			bp := &v1alpha1.Buildpack{ObjectMeta: metav1.ObjectMeta{Name: "go", Namespace: "team", Generation: 1},
				Spec: v1alpha1.BuildpackSpec{Image: f.Addr + "/" + tc.image, ServiceAccountName: tc.account}}
			if tc.policy != "" {
				bp.Spec.Policy = &v1alpha1.TagPolicy{Semver: v1alpha1.SemverPolicy{Range: tc.policy}}
			}
			if tc.previous {
				bp.Status.Buildpacks = previous
				bp.Status.ObservedGeneration = 1
				bp.Status.MarkReady()
			}
			if tc.fault != nil {
				tc.fault()
			}
			ctx, clients := rt.Setup(t, []runtime.Object{bp,
				&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "team"}}}...)
			client := registry.New(ctx, registry.Options{LoopbackRegistries: true, Timeout: 5 * time.Second})
			impl := rt.Controller(ctx, NewController(client, reconciler.DefaultOptions()))
			err := rt.Sync(impl).Reconcile(ctx, bp.Namespace+"/"+bp.Name)
			got, getErr := clients.Buildsmith.BuildsmithV1alpha1().Buildpacks(bp.Namespace).Get(ctx, bp.Name, metav1.GetOptions{})
			if getErr != nil {
				t.Fatal(getErr)
			}
			rt.Check(t, got, err, clients.Events(), tc.want)
			if tc.wantBuildpacks == nil {
				if diff := cmp.Diff(bp.Status.Buildpacks, got.Status.Buildpacks); diff != "" {
					t.Errorf("buildpacks not kept (-before +after):\n%s", diff)
				}
				return
			}
			ids := func(modules []v1alpha1.StoreBuildpack) []string {
				out := []string{}
				for _, m := range modules {
					out = append(out, m.ID+"@"+m.Version)
				}
				return out
			}
			if diff := cmp.Diff(tc.wantBuildpacks, ids(got.Status.Buildpacks)); diff != "" {
				t.Errorf("buildpacks (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(append([]string{}, tc.wantExtensions...), ids(got.Status.Extensions)); diff != "" {
				t.Errorf("extensions (-want +got):\n%s", diff)
			}
			for _, m := range got.Status.Buildpacks {
				if !strings.HasPrefix(m.StoreImage.Image, f.Addr+"/"+strings.Split(tc.image, ":")[0]+"@sha256:") || m.DiffID == "" || len(m.Platforms) != 1 {
					t.Errorf("buildpack %s@%s: from %q, diffId %q, platforms %v; want by digest, with both", m.ID, m.Version,
						m.StoreImage.Image, m.DiffID, m.Platforms)
				}
			}
		})
	}
}
