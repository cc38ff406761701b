package builder

import (
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cnb"
	rt "github.com/buildsmith/buildsmith/pkg/reconciler/reconcilertest"
	"github.com/buildsmith/buildsmith/test/sampleimages"
)

// TestBuilderNamesClusterLifecycle: a builder that names a ClusterLifecycle
// takes its lifecycle from the digest the ClusterLifecycle recorded,
// whatever the lifecycle-image ConfigMap says (here: nothing); a new digest
// there rebuilds it; a missing or failing ClusterLifecycle makes it wait,
// keeping its image.
func TestBuilderNamesClusterLifecycle(t *testing.T) {
	x := newFixture(t)
	old := x.clusterLifecycle("lifecycle:0.21.0", "0.21.0")
	b := x.builder(func(b *v1alpha1.Builder) {
		b.Spec.Lifecycle = &v1alpha1.LifecycleRef{Kind: "ClusterLifecycle", Name: "pinned"}
	})
	got, events, err, _ := x.run(t, b, "", old)
	rt.Check(t, got, err, events, rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync,
		MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute, EventReasons: []string{"Ready"}})
	if s := got.Status.Lifecycle; s.Image != old.Status.Image.LatestImage || s.Version != "0.21.0" {
		t.Errorf("status.lifecycle %+v, want the ClusterLifecycle's %s", s, old.Status.Image.LatestImage)
	}
	first := got.Status.LatestImage

	// The same ClusterLifecycle again: nothing to rebuild.
	again, _, err, traffic := x.run(t, got, "", old)
	if !again.Status.IsReady() || again.Status.LatestImage != first || traffic.Total("PUT") != 0 {
		t.Errorf("unchanged: ready %v, latestImage %s (was %s), %d PUTs (%v)", again.Status.IsReady(), again.Status.LatestImage, first, traffic.Total("PUT"), err)
	}

	// The ClusterLifecycle now records another lifecycle: a new builder.
	next := x.clusterLifecycle("lifecycle:0.22.0", "0.22.0")
	rebuilt, _, err, _ := x.run(t, got, "", next)
	if !rebuilt.Status.IsReady() || rebuilt.Status.LatestImage == first || rebuilt.Status.Lifecycle.Version != "0.22.0" ||
		rebuilt.Status.Lifecycle.Image != next.Status.Image.LatestImage {
		t.Errorf("after the ClusterLifecycle changed: ready %v, latestImage %s (was %s), lifecycle %+v (%v)",
			rebuilt.Status.IsReady(), rebuilt.Status.LatestImage, first, rebuilt.Status.Lifecycle, err)
	}
	img := x.read(t, rebuilt.Status.LatestImage)
	if cf, _ := img.ConfigFile(); !strings.Contains(cf.Config.Labels[cnb.LabelBuilderMetadata], `"version":"0.22.0"`) {
		t.Errorf("builder metadata: %s", cf.Config.Labels[cnb.LabelBuilderMetadata])
	}

	notReady := next.DeepCopy()
	notReady.Generation++ // not reconciled yet
	for name, extra := range map[string][]*v1alpha1.ClusterLifecycle{"missing": nil, "not Ready": {notReady}} {
		t.Run(name, func(t *testing.T) {
			var objects []runtime.Object
			for _, o := range extra {
				objects = append(objects, o)
			}
			waiting, events, err, _ := x.run(t, rebuilt, "", objects...)
			rt.Check(t, waiting, err, events, rt.Outcome{Ready: corev1.ConditionFalse, Reason: ReasonLifecycleNotReady, Reconciling: true,
				Requeue: rt.Poll, MinDelay: 48 * time.Second, MaxDelay: 72 * time.Second, EventReasons: []string{ReasonLifecycleNotReady},
				MessageContains: "ClusterLifecycle pinned"})
			if waiting.Status.LatestImage != rebuilt.Status.LatestImage {
				t.Errorf("latestImage %q, want %q kept", waiting.Status.LatestImage, rebuilt.Status.LatestImage)
			}
		})
	}
}

// clusterLifecycle pushes a fake lifecycle of version to repo and returns
// the Ready ClusterLifecycle "pinned" its reconciler would have made of it.
func (x *fixture) clusterLifecycle(repo, version string) *v1alpha1.ClusterLifecycle {
	layer, err := sampleimages.Layer(sampleimages.File{Path: "cnb/lifecycle/lifecycle", Mode: 0o755, Content: []byte("ELF " + version)})
	if err != nil {
		panic(err)
	}
	img := x.f.PushLayers(repo, []v1.Layer{layer},
		map[string]string{cnb.LabelLifecycleVer: version, cnb.LabelLifecycleAPIs: sampleimages.LifecycleAPIs}, nil)
	digest, _ := img.Digest()
	lc := &v1alpha1.ClusterLifecycle{ObjectMeta: metav1.ObjectMeta{Name: "pinned", Generation: 1}}
	lc.Status.Image = v1alpha1.ResolvedImage{Image: x.f.Addr + "/" + repo,
		LatestImage: x.f.Addr + "/" + strings.Split(repo, ":")[0] + "@" + digest.String()}
	lc.Status.Version = version
	lc.Status.Platforms = []v1alpha1.Platform{{OS: "linux", Arch: "amd64"}}
	lc.Status.ObservedGeneration = 1
	lc.Status.MarkReady()
	return lc
}

// TestUsesDefaultLifecycle: a new lifecycle-image
// ConfigMap reconciles the builders that take their lifecycle from it,
// not those that name a ClusterLifecycle.
func TestUsesDefaultLifecycle(t *testing.T) {
	named := &v1alpha1.LifecycleRef{Kind: "ClusterLifecycle", Name: "pinned"}
	for _, tc := range []struct {
		obj  any
		want bool
	}{
		{&v1alpha1.Builder{}, true},
		{&v1alpha1.Builder{Spec: v1alpha1.NamespacedBuilderSpec{BuilderSpec: v1alpha1.BuilderSpec{Lifecycle: named}}}, false},
		{&v1alpha1.ClusterBuilder{}, true},
		{&v1alpha1.ClusterBuilder{Spec: v1alpha1.ClusterBuilderSpec{BuilderSpec: v1alpha1.BuilderSpec{Lifecycle: named}}}, false},
		{&v1alpha1.ClusterStack{}, false},
	} {
		if got := usesDefaultLifecycle(tc.obj); got != tc.want {
			t.Errorf("usesDefaultLifecycle(%T %+v) = %v, want %v", tc.obj, tc.obj, got, tc.want)
		}
	}
}
