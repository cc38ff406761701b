package clusterstack

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"knative.dev/pkg/controller"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cnb"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	"github.com/buildsmith/buildsmith/pkg/reconciler/reconcilertest"
	"github.com/buildsmith/buildsmith/pkg/registry"
	"github.com/buildsmith/buildsmith/test/registrytest"
	"github.com/buildsmith/buildsmith/test/sampleimages"
)

const stackID = "io.buildpacks.stacks.jammy"

var stackEnv = []string{"CNB_USER_ID=1000", "CNB_GROUP_ID=1001"}

func TestReconcile(t *testing.T) {
	opts := reconciler.DefaultOptions()
	f := registrytest.New(t)
	stackLabels := map[string]string{cnb.LabelStackID: stackID, cnb.LabelDistroName: "ubuntu", cnb.LabelDistroVersion: "22.04"}
	build := f.PushImage("stack/build:1", stackLabels, stackEnv...)
	f.PushImage("stack/run:1", stackLabels)
	f.PushImage("stack/run-other:1", map[string]string{cnb.LabelStackID: "other"})
	f.PushImage("stack/run-full:1", stackLabels)
	f.PushImage("stack/build-bare:1", nil, stackEnv...)
	f.PushImage("stack/run-bare:1", nil)
	f.PushImage("stack/run-bare-jammy:1", map[string]string{cnb.LabelStackID: stackID})
	buildDigest, _ := build.Digest()
	followed := map[string]string{} // tag → repository@digest
	for _, tag := range []string{"follow/build:1.2.0", "follow/build:1.2.3", "follow/build:1.3.0",
		"follow/run:1.2.0-jammy", "follow/run:1.3.0-jammy", "follow/run:1.4.0-noble", "follow/run:2.0.0-jammy"} {
		img := f.PushImage(tag, stackLabels, stackEnv...)
		digest, _ := img.Digest()
		followed[tag] = f.Addr + "/" + strings.Split(tag, ":")[0] + "@" + digest.String()
	}
	amd64 := v1.Platform{OS: "linux", Architecture: "amd64"}
	arm64 := v1.Platform{OS: "linux", Architecture: "arm64"}
	ppc := v1.Platform{OS: "linux", Architecture: "ppc64le"}
	pushIndex := func(repo string, uid int, platforms ...v1.Platform) {
		t.Helper()
		index, err := sampleimages.StackIndex(stackID, uid, platforms...)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.WriteIndex(f.Ref(repo), index); err != nil {
			t.Fatal(err)
		}
	}
	// sbomsOf are the SBOMs the images at repo carry (sampleimages' stack
	// images name their one layer), as status records them.
	sbomsOf := func(repo string) []v1alpha1.BaseSBOM {
		t.Helper()
		desc, err := remote.Get(f.Ref(repo))
		if err != nil {
			t.Fatal(err)
		}
		var images []v1.Image
		if index, err := desc.ImageIndex(); err == nil && desc.MediaType.IsIndex() {
			m, _ := index.IndexManifest()
			for _, d := range m.Manifests {
				img, _ := index.Image(d.Digest)
				images = append(images, img)
			}
		} else {
			img, _ := desc.Image()
			images = append(images, img)
		}
		var out []v1alpha1.BaseSBOM
		for _, img := range images {
			digest, _ := img.Digest()
			cf, _ := img.ConfigFile()
			out = append(out, v1alpha1.BaseSBOM{Image: f.Addr + "/" + strings.Split(repo, ":")[0] + "@" + digest.String(), DiffID: cf.RootFS.DiffIDs[0].String()})
		}
		return out
	}
	single, err := sampleimages.StackImage(stackID, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(f.Ref("stack/build-sbom:1"), single); err != nil {
		t.Fatal(err)
	}
	f.PushImage("stack/run-sbom-elsewhere:1", map[string]string{cnb.LabelStackID: stackID, cnb.LabelBaseSBOM: "sha256:" + strings.Repeat("0", 64)})
	many := []v1.Platform{amd64} // more than an index may have
	for i := range cnb.MaxIndexPlatforms {
		many = append(many, v1.Platform{OS: "linux", Architecture: fmt.Sprintf("arch%d", i)})
	}
	pushIndex("multi/run-many:1", 0, many...)
	pushIndex("multi/build:1", 1000, amd64, arm64)
	pushIndex("multi/run:1", 0, amd64, arm64)
	pushIndex("multi/run-amd64:1", 0, amd64)
	pushIndex("multi/run-ppc:1", 0, ppc)
	multi := func(build, run string) func(*v1alpha1.ClusterStackSpec) {
		return func(s *v1alpha1.ClusterStackSpec) {
			s.BuildImage.Image, s.RunImage.Image = f.Addr+"/"+build, f.Addr+"/"+run
		}
	}
	platforms := func(want ...v1alpha1.Platform) func(*testing.T, *v1alpha1.ClusterStack) {
		return func(t *testing.T, s *v1alpha1.ClusterStack) {
			if diff := cmp.Diff(want, s.Status.Platforms); diff != "" {
				t.Errorf("status.platforms (-want +got):\n%s", diff)
			}
			if s.Status.UserID != 1000 || s.Status.OS != "linux" || s.Status.Arch != "amd64" {
				t.Errorf("status: %+v", s.Status)
			}
		}
	}

	previous := v1alpha1.ClusterStackStatus{
		ID: stackID, UserID: 1000, GroupID: 1001, OS: "linux", Arch: "amd64",
		BuildImage: v1alpha1.ResolvedImage{Image: "old", LatestImage: f.Addr + "/stack/build@sha256:" + strings.Repeat("0", 64)},
	}
	previous.MarkReady()

	tests := []struct {
		name       string
		spec       func(*v1alpha1.ClusterStackSpec)
		generation int64 // of the object (default 1); status is of generation 1
		status     *v1alpha1.ClusterStackStatus
		objects    []runtime.Object
		fault      func()
		want       reconcilertest.Outcome
		validate   func(*testing.T, *v1alpha1.ClusterStack)
	}{{
		name: "ready",
		want: reconcilertest.Outcome{Ready: corev1.ConditionTrue, Requeue: reconcilertest.Resync, MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute,
			EventReasons: []string{"Ready"}},
		validate: func(t *testing.T, s *v1alpha1.ClusterStack) {
			want := v1alpha1.ClusterStackStatus{
				ID: stackID, UserID: 1000, GroupID: 1001, OS: "linux", Arch: "amd64",
				Platforms:  []v1alpha1.Platform{{OS: "linux", Arch: "amd64"}},
				Distro:     &v1alpha1.Distro{Name: "ubuntu", Version: "22.04"},
				BuildImage: v1alpha1.ResolvedImage{Image: f.Addr + "/stack/build:1", LatestImage: f.Addr + "/stack/build@" + buildDigest.String()},
			}
			got := s.Status.DeepCopy()
			got.ConditionedStatus, got.RunImage = v1alpha1.ConditionedStatus{}, v1alpha1.ResolvedRunImage{}
			if diff := cmp.Diff(&want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
			if !strings.HasPrefix(s.Status.RunImage.LatestImage, f.Addr+"/stack/run@sha256:") {
				t.Errorf("run image resolved to %q", s.Status.RunImage.LatestImage)
			}
		},
	}, {
		name: "run image mirrors are recorded for the builders",
		spec: func(s *v1alpha1.ClusterStackSpec) {
			s.RunImage.Mirrors = []string{"mirror.example.com/stack/run:1", "other.example.com/run:1"}
		},
		want: reconcilertest.Outcome{Ready: corev1.ConditionTrue, Requeue: reconcilertest.Resync, MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute,
			EventReasons: []string{"Ready"}},
		validate: func(t *testing.T, s *v1alpha1.ClusterStack) {
			if diff := cmp.Diff([]string{"mirror.example.com/stack/run:1", "other.example.com/run:1"}, s.Status.RunImage.Mirrors); diff != "" {
				t.Errorf("status.runImage.mirrors (-want +got):\n%s", diff)
			}
		},
	}, {
		name: "followed images: the highest tag in range, builders naming it, mirrors at it too",
		spec: func(s *v1alpha1.ClusterStackSpec) {
			s.BuildImage = v1alpha1.ImageSource{Image: f.Addr + "/follow/build", Policy: &v1alpha1.TagPolicy{Semver: v1alpha1.SemverPolicy{Range: "~1.2"}}}
			s.RunImage = v1alpha1.RunImageSource{Image: f.Addr + "/follow/run", Mirrors: []string{"mirror.example.com/run"},
				Policy: &v1alpha1.TagPolicy{Semver: v1alpha1.SemverPolicy{Range: "1.x"},
					FilterTags: &v1alpha1.TagFilter{Pattern: `^(?P<v>.*)-jammy$`, Extract: "$v"}}}
		},
		want: reconcilertest.Outcome{Ready: corev1.ConditionTrue, Requeue: reconcilertest.Resync, MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute,
			EventReasons: []string{"Ready"}},
		validate: func(t *testing.T, s *v1alpha1.ClusterStack) {
			build, run := s.Status.BuildImage, s.Status.RunImage
			if build.Image != f.Addr+"/follow/build:1.2.3" || build.LatestImage != followed["follow/build:1.2.3"] {
				t.Errorf("status.buildImage = %+v, want 1.2.3 at %s", build, followed["follow/build:1.2.3"])
			}
			if run.Image != f.Addr+"/follow/run:1.3.0-jammy" || run.LatestImage != followed["follow/run:1.3.0-jammy"] ||
				!cmp.Equal(run.Mirrors, []string{"mirror.example.com/run:1.3.0-jammy"}) {
				t.Errorf("status.runImage = %+v, want 1.3.0-jammy at %s", run, followed["follow/run:1.3.0-jammy"])
			}
			var tags []string
			for _, c := range s.Status.ChosenTags {
				tags = append(tags, c.Field+" "+c.Image+" "+c.Tag+" "+c.Version)
			}
			if want := []string{"spec.buildImage " + f.Addr + "/follow/build 1.2.3 1.2.3", "spec.runImage " + f.Addr + "/follow/run 1.3.0-jammy 1.3.0"}; !cmp.Equal(tags, want) {
				t.Errorf("status.chosenTags = %q, want %q", tags, want)
			}
		},
	}, {
		name: "more run images are resolved, each checked against the build image",
		spec: func(s *v1alpha1.ClusterStackSpec) {
			s.AdditionalRunImages = []v1alpha1.RunImageSource{{Image: f.Addr + "/stack/run-full:1", Mirrors: []string{"mirror.example.com/run-full:1"}}}
		},
		want: reconcilertest.Outcome{Ready: corev1.ConditionTrue, Requeue: reconcilertest.Resync, MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute,
			EventReasons: []string{"Ready"}},
		validate: func(t *testing.T, s *v1alpha1.ClusterStack) {
			runs := s.Status.AdditionalRunImages
			if len(runs) != 1 || runs[0].Image != f.Addr+"/stack/run-full:1" || !strings.HasPrefix(runs[0].LatestImage, f.Addr+"/stack/run-full@sha256:") ||
				!cmp.Equal(runs[0].Mirrors, []string{"mirror.example.com/run-full:1"}) {
				t.Errorf("status.additionalRunImages = %+v", runs)
			}
			if !strings.HasPrefix(s.Status.RunImage.LatestImage, f.Addr+"/stack/run@sha256:") {
				t.Errorf("status.runImage = %+v", s.Status.RunImage)
			}
		},
	}, {
		name: "an additional run image of another stack stalls it, named",
		spec: func(s *v1alpha1.ClusterStackSpec) {
			s.AdditionalRunImages = []v1alpha1.RunImageSource{{Image: f.Addr + "/stack/run-full:1"}, {Image: f.Addr + "/stack/run-other:1"}}
		},
		want: reconcilertest.Outcome{Ready: corev1.ConditionFalse, Reason: cnb.ReasonStackIDMismatch, Stalled: true, Requeue: reconcilertest.NoRequeue,
			EventReasons:    []string{cnb.ReasonStackIDMismatch},
			MessageContains: "spec.additionalRunImages[1] " + f.Addr + `/stack/run-other:1: run image has stack id "other"`},
	}, {
		name: "a stack without an id takes its images'",
		spec: func(s *v1alpha1.ClusterStackSpec) { s.ID = "" },
		want: reconcilertest.Outcome{Ready: corev1.ConditionTrue, Requeue: reconcilertest.Resync, MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute,
			EventReasons: []string{"Ready"}},
		validate: func(t *testing.T, s *v1alpha1.ClusterStack) {
			if s.Status.ID != stackID {
				t.Errorf("status.id = %q, want the images' %q", s.Status.ID, stackID)
			}
		},
	}, {
		name: "a stack without an id whose images carry two",
		spec: func(s *v1alpha1.ClusterStackSpec) {
			s.ID, s.BuildImage.Image, s.RunImage.Image = "", f.Addr+"/stack/build-bare:1", f.Addr+"/stack/run-bare:1"
			s.AdditionalRunImages = []v1alpha1.RunImageSource{{Image: f.Addr + "/stack/run-bare-jammy:1"}, {Image: f.Addr + "/stack/run-other:1"}}
		},
		want: reconcilertest.Outcome{Ready: corev1.ConditionFalse, Reason: cnb.ReasonStackIDMismatch, Stalled: true, Requeue: reconcilertest.NoRequeue,
			EventReasons:    []string{cnb.ReasonStackIDMismatch},
			MessageContains: "spec.additionalRunImages[1] " + f.Addr + `/stack/run-other:1: run image has stack id "other" (label io.buildpacks.stack.id), the stack says "` + stackID + `"`},
	}, {
		name: "platforms are those of every image: an additional run image of amd64 only",
		spec: func(s *v1alpha1.ClusterStackSpec) {
			multi("multi/build:1", "multi/run:1")(s)
			s.AdditionalRunImages = []v1alpha1.RunImageSource{{Image: f.Addr + "/multi/run-amd64:1"}}
		},
		want: reconcilertest.Outcome{Ready: corev1.ConditionTrue, Requeue: reconcilertest.Resync, MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute,
			EventReasons: []string{"Ready"}},
		validate: platforms(v1alpha1.Platform{OS: "linux", Arch: "amd64"}),
	}, {
		name:   "unchanged, registry answers 503: stays Ready, not UpToDate, status kept, waits on the repository's circuit",
		status: &previous,
		fault:  func() { f.Inject("", "/stack/run/manifests/", -1, registrytest.Answer(503, nil, "")) },
		want: reconcilertest.Outcome{Ready: corev1.ConditionTrue, Stale: registry.ReasonRegistryUnavailable,
			Requeue: reconcilertest.Circuit, MinDelay: 4 * time.Minute, MaxDelay: 6 * time.Minute,
			EventReasons:    []string{registry.ReasonRegistryUnavailable},
			MessageContains: "503"},
	}, {
		name:       "spec edited, registry answers 503: not Ready for the new generation, status kept",
		generation: 2,
		status:     &previous,
		fault:      func() { f.Inject("", "/stack/run/manifests/", -1, registrytest.Answer(503, nil, "")) },
		want: reconcilertest.Outcome{Ready: corev1.ConditionFalse, Reason: registry.ReasonRegistryUnavailable, Reconciling: true,
			Requeue: reconcilertest.Circuit, MinDelay: 4 * time.Minute, MaxDelay: 6 * time.Minute,
			EventReasons:    []string{registry.ReasonRegistryUnavailable},
			MessageContains: "503"},
	}, {
		name:   "unchanged, run image gone: waiting, not Ready (a real change, not a blip)",
		spec:   func(s *v1alpha1.ClusterStackSpec) { s.RunImage.Image = f.Addr + "/stack/run:404" },
		status: &previous,
		want: reconcilertest.Outcome{Ready: corev1.ConditionFalse, Reason: registry.ReasonImageNotFound, Reconciling: true,
			Requeue: reconcilertest.Poll, MinDelay: 48 * time.Second, MaxDelay: 72 * time.Second,
			EventReasons: []string{registry.ReasonImageNotFound}},
	}, {
		name: "rate limited: waits on the repository's circuit (probed after Retry-After)",
		fault: func() {
			f.Inject("", "/stack/run/manifests/", -1, registrytest.Answer(429, map[string]string{"Retry-After": "30"}, ""))
		},
		want: reconcilertest.Outcome{Ready: corev1.ConditionFalse, Reason: registry.ReasonRateLimited, Reconciling: true,
			Requeue: reconcilertest.Circuit, MinDelay: 4 * time.Minute, MaxDelay: 6 * time.Minute,
			EventReasons: []string{registry.ReasonRateLimited}},
	}, {
		name: "run image missing: waiting, polled",
		spec: func(s *v1alpha1.ClusterStackSpec) { s.RunImage.Image = f.Addr + "/stack/run:404" },
		want: reconcilertest.Outcome{Ready: corev1.ConditionFalse, Reason: registry.ReasonImageNotFound, Reconciling: true,
			Requeue: reconcilertest.Poll, MinDelay: 48 * time.Second, MaxDelay: 72 * time.Second,
			EventReasons: []string{registry.ReasonImageNotFound}},
	}, {
		name:   "run image of another stack: stalled, status kept",
		spec:   func(s *v1alpha1.ClusterStackSpec) { s.RunImage.Image = f.Addr + "/stack/run-other:1" },
		status: &previous,
		want: reconcilertest.Outcome{Ready: corev1.ConditionFalse, Reason: cnb.ReasonStackIDMismatch, Stalled: true, Requeue: reconcilertest.NoRequeue,
			EventReasons: []string{cnb.ReasonStackIDMismatch}, MessageContains: `"other"`},
	}, {
		name: "indexes: every platform both have",
		spec: multi("multi/build:1", "multi/run:1"),
		want: reconcilertest.Outcome{Ready: corev1.ConditionTrue, Requeue: reconcilertest.Resync, MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute,
			EventReasons: []string{"Ready"}},
		validate: func(t *testing.T, s *v1alpha1.ClusterStack) {
			platforms(v1alpha1.Platform{OS: "linux", Arch: "amd64"}, v1alpha1.Platform{OS: "linux", Arch: "arm64"})(t, s)
			// Each platform's image carries its SBOM, recorded by digest.
			if diff := cmp.Diff(sbomsOf("multi/build:1"), s.Status.BuildImage.SBOMs); diff != "" || len(s.Status.BuildImage.SBOMs) != 2 {
				t.Errorf("status.buildImage.sboms (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(sbomsOf("multi/run:1"), s.Status.RunImage.SBOMs); diff != "" {
				t.Errorf("status.runImage.sboms (-want +got):\n%s", diff)
			}
		},
	}, {
		name: "a plain image's SBOM, and a label naming no layer of its image",
		spec: func(s *v1alpha1.ClusterStackSpec) {
			s.BuildImage.Image, s.RunImage.Image = f.Addr+"/stack/build-sbom:1", f.Addr+"/stack/run-sbom-elsewhere:1"
		},
		want: reconcilertest.Outcome{Ready: corev1.ConditionTrue, Requeue: reconcilertest.Resync, MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute,
			EventReasons: []string{"Ready"}},
		validate: func(t *testing.T, s *v1alpha1.ClusterStack) {
			if diff := cmp.Diff(sbomsOf("stack/build-sbom:1"), s.Status.BuildImage.SBOMs); diff != "" || len(s.Status.BuildImage.SBOMs) != 1 {
				t.Errorf("status.buildImage.sboms (-want +got):\n%s", diff)
			}
			if s.Status.RunImage.SBOMs != nil {
				t.Errorf("status.runImage.sboms %+v: the label names no layer of the image", s.Status.RunImage.SBOMs)
			}
		},
	}, {
		name: "indexes: a run image for amd64 only makes an amd64 stack",
		spec: multi("multi/build:1", "multi/run-amd64:1"),
		want: reconcilertest.Outcome{Ready: corev1.ConditionTrue, Requeue: reconcilertest.Resync, MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute,
			EventReasons: []string{"Ready"}},
		validate: platforms(v1alpha1.Platform{OS: "linux", Arch: "amd64"}),
	}, {
		name: "a run image index of more platforms than an index may have: stalled, before they are read",
		spec: multi("multi/build:1", "multi/run-many:1"),
		want: reconcilertest.Outcome{Ready: corev1.ConditionFalse, Reason: cnb.ReasonTooManyPlatforms, Stalled: true, Requeue: reconcilertest.NoRequeue,
			EventReasons: []string{cnb.ReasonTooManyPlatforms}, MessageContains: "the run image is an index of 33 platforms, more than the 32"},
	}, {
		name: "indexes without a common platform: stalled",
		spec: multi("multi/build:1", "multi/run-ppc:1"),
		want: reconcilertest.Outcome{Ready: corev1.ConditionFalse, Reason: registry.ReasonPlatformNotFound, Stalled: true, Requeue: reconcilertest.NoRequeue,
			EventReasons: []string{registry.ReasonPlatformNotFound}, MessageContains: "linux/amd64"},
	}, {
		name: "unparsable reference: stalled",
		spec: func(s *v1alpha1.ClusterStackSpec) { s.BuildImage.Image = "UPPER/Case" },
		want: reconcilertest.Outcome{Ready: corev1.ConditionFalse, Reason: reconciler.ReasonInvalidSpec, Stalled: true, Requeue: reconcilertest.NoRequeue,
			EventReasons: []string{reconciler.ReasonInvalidSpec}, MessageContains: "spec.buildImage.image"},
	}, {
		name: "service account missing: waiting",
		spec: func(s *v1alpha1.ClusterStackSpec) {
			s.ServiceAccountRef = &v1alpha1.ServiceAccountRef{Name: "reader", Namespace: "buildsmith"}
		},
		want: reconcilertest.Outcome{Ready: corev1.ConditionFalse, Reason: registry.ReasonServiceAccountNotFound, Reconciling: true,
			Requeue: reconcilertest.Poll, MinDelay: 48 * time.Second, MaxDelay: 72 * time.Second,
			EventReasons: []string{registry.ReasonServiceAccountNotFound}, MessageContains: "buildsmith/reader"},
	}, {
		name: "service account without secrets: anonymous",
		spec: func(s *v1alpha1.ClusterStackSpec) {
			s.ServiceAccountRef = &v1alpha1.ServiceAccountRef{Name: "reader", Namespace: "buildsmith"}
		},
		objects: []runtime.Object{&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "reader", Namespace: "buildsmith"}}},
		want:    reconcilertest.Outcome{Ready: corev1.ConditionTrue, Requeue: reconcilertest.Resync, MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute, EventReasons: []string{"Ready"}},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer f.ClearFaults()
			stack := &v1alpha1.ClusterStack{
				ObjectMeta: metav1.ObjectMeta{Name: "jammy", Generation: 1},
				Spec: v1alpha1.ClusterStackSpec{
					ID:         stackID,
					BuildImage: v1alpha1.ImageSource{Image: f.Addr + "/stack/build:1"},
					RunImage:   v1alpha1.RunImageSource{Image: f.Addr + "/stack/run:1"},
				},
			}
			if tc.spec != nil {
				tc.spec(&stack.Spec)
			}
			if tc.generation != 0 {
				stack.Generation = tc.generation
			}
			if tc.status != nil {
				stack.Status = *tc.status.DeepCopy()
				stack.Status.ObservedGeneration = 1
			}
			if tc.fault != nil {
				tc.fault()
			}
			got, events, err := reconcileOnce(t, stack, opts, tc.objects...)
			reconcilertest.Check(t, got, err, events, tc.want)
			if tc.status != nil && !cmp.Equal(got.Status.BuildImage, tc.status.BuildImage) {
				t.Errorf("status.buildImage = %+v, want the previous %+v kept", got.Status.BuildImage, tc.status.BuildImage)
			}
			if tc.validate != nil {
				tc.validate(t, got)
			}
		})
	}
}

// TestFailingPlaceWaitsOnItsCircuit: a stack whose registry refuses
// connections, or whose run image's repository answers 503, waits on the
// circuit of that place (its requeue only a safety net, its status saying
// what it waits for) and is woken when the place answers again.
func TestFailingPlaceWaitsOnItsCircuit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		place string // after the registry's address
		fault func(f *registrytest.Registry)
		end   func(f *registrytest.Registry)
	}{
		{"refused", "", (*registrytest.Registry).Down, (*registrytest.Registry).Up},
		{"503 on the run image", "/stack/run", func(f *registrytest.Registry) {
			f.Inject("", "/stack/run/", -1, registrytest.Answer(503, nil, ""))
		}, (*registrytest.Registry).ClearFaults},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := registrytest.New(t)
			stackLabels := map[string]string{cnb.LabelStackID: stackID}
			f.PushImage("stack/build:1", stackLabels, stackEnv...)
			f.PushImage("stack/run:1", stackLabels)
			stack := &v1alpha1.ClusterStack{
				ObjectMeta: metav1.ObjectMeta{Name: "jammy", Generation: 1},
				Spec: v1alpha1.ClusterStackSpec{ID: stackID,
					BuildImage: v1alpha1.ImageSource{Image: f.Addr + "/stack/build:1"},
					RunImage:   v1alpha1.RunImageSource{Image: f.Addr + "/stack/run:1"}},
			}
			ctx, clients := reconcilertest.Setup(t, stack)
			client := registry.New(ctx, registry.Options{LoopbackRegistries: true})
			opts := reconciler.DefaultOptions()
			impl := reconcilertest.Controller(ctx, NewController(client, opts))

			tc.fault(f)
			err := reconcilertest.Sync(impl).Reconcile(ctx, "jammy")
			if ok, delay := controller.IsRequeueKey(err); !ok || delay < opts.RetryMaxDelay*8/10 {
				t.Fatalf("Reconcile = %v (requeue after %v), want the safety net of about %v", err, delay, opts.RetryMaxDelay)
			}
			place := f.Addr + tc.place
			var waiting int
			for _, c := range client.Circuits().Open() {
				if c.Place.String() == place {
					waiting = c.Waiters
				}
			}
			if waiting != 1 {
				t.Fatalf("%d keys wait on %s, want 1: %v", waiting, place, client.Circuits().Open())
			}
			got, _ := clients.Buildsmith.BuildsmithV1alpha1().ClusterStacks().Get(ctx, "jammy", metav1.GetOptions{})
			reconciling := got.Status.GetCondition(v1alpha1.ConditionReconciling)
			if reconciling == nil || !strings.Contains(reconciling.Message, "retrying when "+place+" answers again") {
				t.Errorf("Reconciling: %+v", reconciling)
			}
			tc.end(f)
			if key, ok := reconcilertest.Woken(impl, 3*time.Second); !ok {
				t.Fatal("not woken after the place answered again")
			} else if key.Name != "jammy" {
				t.Errorf("woke %v", key)
			}
		})
	}
}

// reconcileOnce runs the generated reconciler (status update included) on
// stack and returns the stored object, the returned error, and the events.
func reconcileOnce(t *testing.T, stack *v1alpha1.ClusterStack, opts reconciler.Options, objects ...runtime.Object) (*v1alpha1.ClusterStack, []string, error) {
	t.Helper()
	ctx, clients := reconcilertest.Setup(t, append([]runtime.Object{stack}, objects...)...)
	client := registry.New(ctx, registry.Options{LoopbackRegistries: true, Timeout: 5 * time.Second})
	err := reconcilertest.Sync(reconcilertest.Controller(ctx, NewController(client, opts))).Reconcile(ctx, stack.Name)
	got, getErr := clients.Buildsmith.BuildsmithV1alpha1().ClusterStacks().Get(ctx, stack.Name, metav1.GetOptions{})
	if getErr != nil {
		t.Fatal(getErr)
	}
	return got, clients.Events(), err
}
