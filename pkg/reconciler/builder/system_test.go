package builder

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cnb"
	rt "github.com/buildsmith/buildsmith/pkg/reconciler/reconcilertest"
	"github.com/buildsmith/buildsmith/test/registrytest"
	"github.com/buildsmith/buildsmith/test/sampleimages"
)

// TestBuilderSystemBuildpacks: spec.system puts the system buildpacks into
// the builder with /cnb/system.toml, resolved in status; a system buildpack
// the store lacks, or a lifecycle too old to read system.toml, stalls the
// builder naming it, and keeps its image.
func TestBuilderSystemBuildpacks(t *testing.T) {
	x := newFixture(t)
	x.addToStore(t, "bp/certs:1", registrytest.Buildpack{ID: "example/certs", Version: "2.0.0", API: "0.10"})
	lifecycle := x.f.Addr + "/lifecycle:0.21.0"
	withSystem := func(pre, post string) *v1alpha1.Builder {
		return x.builder(func(b *v1alpha1.Builder) {
			b.Spec.System = &v1alpha1.SystemBuildpacks{Pre: []v1alpha1.SystemBuildpackRef{{ID: pre}}, Post: []v1alpha1.SystemBuildpackRef{{ID: post}}}
		})
	}

	got, events, err, _ := x.run(t, withSystem("example/certs", "example/go"), lifecycle)
	rt.Check(t, got, err, events, rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync,
		MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute, EventReasons: []string{"Ready"}})
	want := &v1alpha1.SystemBuildpacks{Pre: []v1alpha1.SystemBuildpackRef{{ID: "example/certs", Version: "2.0.0"}},
		Post: []v1alpha1.SystemBuildpackRef{{ID: "example/go", Version: "1.1.0"}}}
	if diff := cmp.Diff(want, got.Status.System); diff != "" {
		t.Errorf("status.system (-want +got):\n%s", diff)
	}
	img := x.read(t, got.Status.LatestImage)
	files, err := sampleimages.Files(img)
	if err != nil {
		t.Fatal(err)
	}
	if toml := files["cnb/system.toml"]; !strings.Contains(toml, `id = "example/certs"`) || !strings.Contains(toml, `version = "2.0.0"`) {
		t.Errorf("cnb/system.toml:\n%s", toml)
	}
	cf, _ := img.ConfigFile()
	if !strings.Contains(cf.Config.Labels[cnb.LabelBuildpackLayers], `"example/certs":{"2.0.0"`) {
		t.Errorf("the pre buildpack is not in the builder: %s", cf.Config.Labels[cnb.LabelBuildpackLayers])
	}
	if !strings.Contains(cf.Config.Labels[cnb.LabelBuildpackSystem], `"example/certs"`) {
		t.Errorf("label %s: %s", cnb.LabelBuildpackSystem, cf.Config.Labels[cnb.LabelBuildpackSystem])
	}

	// A lifecycle without platform API 0.15 would ignore system.toml.
	old := x.fakeLifecycle(t, "lifecycle:0.20.0", "0.20.0",
		`{"buildpack":{"supported":["0.10"]},"platform":{"supported":["0.12","0.13","0.14"]}}`)
	x.checkStalled(t, got.Status, map[string]stalled{
		"a system buildpack the store lacks": {withSystem("example/certs", "example/ghost"), lifecycle, cnb.ReasonBuildpackNotFound,
			"system post buildpacks: buildpack example/ghost is not in the store"},
		"a lifecycle without platform API 0.15": {withSystem("example/certs", "example/go"), old, cnb.ReasonPlatformAPIUnsupported,
			"system buildpacks need platform API 0.15 or later; lifecycle 0.20.0 supports 0.12, 0.13, 0.14"},
	})
}

// stalled is a builder that must stall (with the lifecycle image named
// lifecycle): with reason, and a message containing message.
type stalled struct {
	builder                    *v1alpha1.Builder
	lifecycle, reason, message string
}

// checkStalled runs each case's builder from the status before (a Ready
// one) and checks that it stalls as the case says, keeping its image.
func (x *fixture) checkStalled(t *testing.T, before v1alpha1.BuilderStatus, cases map[string]stalled) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b := tc.builder
			b.Status = before
			failed, events, err, _ := x.run(t, b, tc.lifecycle)
			rt.Check(t, failed, err, events, rt.Outcome{Ready: corev1.ConditionFalse, Reason: tc.reason, Stalled: true,
				Requeue: rt.NoRequeue, EventReasons: []string{tc.reason}, MessageContains: tc.message})
			if failed.Status.LatestImage != before.LatestImage {
				t.Errorf("latestImage %q, want %q kept", failed.Status.LatestImage, before.LatestImage)
			}
		})
	}
}

// addToStore pushes a buildpackage of buildpacks to repo and adds them to
// the fixture's Ready store, as the store's reconciler would.
func (x *fixture) addToStore(t *testing.T, repo string, buildpacks ...registrytest.Buildpack) {
	t.Helper()
	img := x.f.PushBuildpackage(repo, buildpacks...)
	digest, _ := img.Digest()
	cf, _ := img.ConfigFile()
	m, _ := img.Manifest()
	bps, err := cnb.Buildpackage(x.f.Addr+"/"+strings.Split(repo, ":")[0]+"@"+digest.String(), cf, m)
	if err != nil {
		t.Fatal(err)
	}
	for i := range bps {
		bps[i].Platforms = []v1alpha1.Platform{{OS: "linux", Arch: "amd64"}}
	}
	x.store.Status.Buildpacks = append(x.store.Status.Buildpacks, bps...)
	cnb.SortBuildpacks(x.store.Status.Buildpacks)
}

// fakeLifecycle pushes a lifecycle image of version with the APIs label
// apis to repo, and returns its reference.
func (x *fixture) fakeLifecycle(t *testing.T, repo, version, apis string) string {
	t.Helper()
	layer, err := sampleimages.Layer(sampleimages.File{Path: "cnb/lifecycle/lifecycle", Mode: 0o755, Content: []byte("ELF " + version)})
	if err != nil {
		t.Fatal(err)
	}
	x.f.PushLayers(repo, []v1.Layer{layer}, map[string]string{cnb.LabelLifecycleVer: version, cnb.LabelLifecycleAPIs: apis}, nil)
	return x.f.Addr + "/" + repo
}
