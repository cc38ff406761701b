package clusterlifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgotesting "k8s.io/client-go/testing"
	"knative.dev/pkg/configmap"
	"knative.dev/pkg/controller"
	pkgtesting "knative.dev/pkg/reconciler/testing"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cnb"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	rt "github.com/buildsmith/buildsmith/pkg/reconciler/reconcilertest"
	"github.com/buildsmith/buildsmith/pkg/registry"
	"github.com/buildsmith/buildsmith/test/registrytest"
	"github.com/buildsmith/buildsmith/test/sampleimages"
)

// TestTable runs knative's TableTest: every status update and event of a
// reconcile, to the letter, for a plain image, an index, and one row of
// each failure class.
func TestTable(t *testing.T) {
	f := registrytest.New(t)
	binary := filepath.Join(t.TempDir(), "lifecycle")
	if err := os.WriteFile(binary, []byte("ELF"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain, err := sampleimages.Lifecycle(binary, "0.21.0")
	if err != nil {
		t.Fatal(err)
	}
	f.Write("lifecycle:0.21.0", plain)
	plainDigest, _ := plain.Digest()
	index := lifecycleIndex(t, map[string]string{"linux/amd64": "0.21.0", "linux/arm64": "0.21.0"}, binary)
	if err := remote.WriteIndex(f.Ref("lifecycle:multi"), index); err != nil {
		t.Fatal(err)
	}
	indexDigest, _ := index.Digest()
	mixed := lifecycleIndex(t, map[string]string{"linux/amd64": "0.21.0", "linux/arm64": "0.20.0"}, binary)
	if err := remote.WriteIndex(f.Ref("lifecycle:mixed"), mixed); err != nil {
		t.Fatal(err)
	}
	mixedDigest, _ := mixed.Digest()
	binaries := map[string]string{} // more platforms than an index may have
	for i := range cnb.MaxIndexPlatforms + 1 {
		binaries[fmt.Sprintf("linux/arch%d", i)] = binary
	}
	many, err := sampleimages.LifecycleIndex(binaries, "0.21.0")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(f.Ref("lifecycle:many"), many); err != nil {
		t.Fatal(err)
	}
	manyDigest, _ := many.Digest()
	// linux/arm64 named again and again (as aarch64 too): read and recorded once.
	arm, err := sampleimages.LifecycleIndex(map[string]string{"linux/arm64": binary}, "0.21.0")
	if err != nil {
		t.Fatal(err)
	}
	armManifest, _ := arm.IndexManifest()
	armImage, _ := arm.Image(armManifest.Manifests[0].Digest)
	repeated := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for i := range 3 * cnb.MaxIndexPlatforms {
		arch := map[bool]string{true: "arm64", false: "aarch64"}[i%2 == 0]
		repeated = mutate.AppendManifests(repeated, mutate.IndexAddendum{Add: armImage,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch, OSVersion: fmt.Sprint(i)}}})
	}
	if err := remote.WriteIndex(f.Ref("lifecycle:repeated"), repeated); err != nil {
		t.Fatal(err)
	}
	repeatedDigest, _ := repeated.Digest()
	tooMany := fmt.Sprintf("%s/lifecycle@%s is an index of 33 platforms, more than the 32 an index may have here", f.Addr, manyDigest)
	notDigest, _ := f.PushImage("not-a-lifecycle:1", nil).Digest()
	f.Inject("", "/lifecycle-503/manifests/", -1, registrytest.Answer(503, nil, ""))
	var apis v1alpha1.LifecycleAPIs
	if err := json.Unmarshal([]byte(sampleimages.LifecycleAPIs), &apis); err != nil {
		t.Fatal(err)
	}

	lifecycle := func(image string, status func(*v1alpha1.ClusterLifecycleStatus)) *v1alpha1.ClusterLifecycle {
		lc := &v1alpha1.ClusterLifecycle{
			ObjectMeta: metav1.ObjectMeta{Name: "lifecycle", Generation: 1},
			Spec:       v1alpha1.ClusterLifecycleSpec{ImageSource: v1alpha1.ImageSource{Image: f.Addr + "/" + image}},
		}
		if status != nil {
			lc.Status.ObservedGeneration = 1
			status(&lc.Status)
		}
		return lc
	}
	resolved := func(image, digest string, platforms ...v1alpha1.Platform) func(*v1alpha1.ClusterLifecycleStatus) {
		return func(s *v1alpha1.ClusterLifecycleStatus) {
			s.Image = v1alpha1.ResolvedImage{Image: f.Addr + "/" + image, LatestImage: f.Addr + "/lifecycle@" + digest}
			s.Version, s.APIs, s.Platforms = "0.21.0", apis, platforms
		}
	}
	amd64, arm64 := v1alpha1.Platform{OS: "linux", Arch: "amd64"}, v1alpha1.Platform{OS: "linux", Arch: "arm64"}
	ready := func(image, digest string, platforms ...v1alpha1.Platform) func(*v1alpha1.ClusterLifecycleStatus) {
		return func(s *v1alpha1.ClusterLifecycleStatus) {
			resolved(image, digest, platforms...)(s)
			s.MarkReady()
		}
	}
	notLifecycle := fmt.Sprintf("%s/not-a-lifecycle@%s lacks the labels %s and %s: not a lifecycle image",
		f.Addr, notDigest, cnb.LabelLifecycleVer, cnb.LabelLifecycleAPIs)
	mismatch := fmt.Sprintf("%s/lifecycle@%s: the linux/arm64 lifecycle is 0.20.0, the linux/amd64 one 0.21.0: every platform must have the same version",
		f.Addr, mixedDigest)
	unavailable := fmt.Sprintf("GET http://%s/v2/lifecycle-503/manifests/1: unexpected status code 503 Service Unavailable", f.Addr)

	rows := pkgtesting.TableTest{{
		Name:              "ready: a plain image",
		Key:               "lifecycle",
		Objects:           []runtime.Object{lifecycle("lifecycle:0.21.0", nil)},
		WantErr:           true, // the resync requeue
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: lifecycle("lifecycle:0.21.0", ready("lifecycle:0.21.0", plainDigest.String(), amd64))}},
		WantEvents:        []string{pkgtesting.Eventf(corev1.EventTypeNormal, "Ready", "ClusterLifecycle is Ready")},
	}, {
		Name:              "ready: an index, every platform read",
		Key:               "lifecycle",
		Objects:           []runtime.Object{lifecycle("lifecycle:multi", nil)},
		WantErr:           true,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: lifecycle("lifecycle:multi", ready("lifecycle:multi", indexDigest.String(), amd64, arm64))}},
		WantEvents:        []string{pkgtesting.Eventf(corev1.EventTypeNormal, "Ready", "ClusterLifecycle is Ready")},
	}, {
		Name:    "permanent: not a lifecycle image",
		Key:     "lifecycle",
		Objects: []runtime.Object{lifecycle("not-a-lifecycle:1", nil)},
		WantErr: true,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: lifecycle("not-a-lifecycle:1", func(s *v1alpha1.ClusterLifecycleStatus) {
			s.MarkStalled(cnb.ReasonInvalidLifecycleImage, notLifecycle)
		})}},
		WantEvents: []string{pkgtesting.Eventf(corev1.EventTypeWarning, cnb.ReasonInvalidLifecycleImage, "%s", notLifecycle)},
	}, {
		Name:              "ready: an index naming one platform many times, read and recorded once",
		Key:               "lifecycle",
		Objects:           []runtime.Object{lifecycle("lifecycle:repeated", nil)},
		WantErr:           true,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: lifecycle("lifecycle:repeated", ready("lifecycle:repeated", repeatedDigest.String(), arm64))}},
		WantEvents:        []string{pkgtesting.Eventf(corev1.EventTypeNormal, "Ready", "ClusterLifecycle is Ready")},
	}, {
		Name:    "permanent: an index of more platforms than may be read",
		Key:     "lifecycle",
		Objects: []runtime.Object{lifecycle("lifecycle:many", nil)},
		WantErr: true,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: lifecycle("lifecycle:many", func(s *v1alpha1.ClusterLifecycleStatus) {
			s.MarkStalled(cnb.ReasonTooManyPlatforms, tooMany)
		})}},
		WantEvents: []string{pkgtesting.Eventf(corev1.EventTypeWarning, cnb.ReasonTooManyPlatforms, "%s", tooMany)},
	}, {
		Name:    "permanent: an index whose platforms have different lifecycles",
		Key:     "lifecycle",
		Objects: []runtime.Object{lifecycle("lifecycle:mixed", nil)},
		WantErr: true,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: lifecycle("lifecycle:mixed", func(s *v1alpha1.ClusterLifecycleStatus) {
			s.MarkStalled(cnb.ReasonInvalidLifecycleImage, mismatch)
		})}},
		WantEvents: []string{pkgtesting.Eventf(corev1.EventTypeWarning, cnb.ReasonInvalidLifecycleImage, "%s", mismatch)},
	}, {
		Name:    "transient, unchanged: the registry answers 503; stays Ready, the resolved status stays, UpToDate says why",
		Key:     "lifecycle",
		Objects: []runtime.Object{lifecycle("lifecycle-503:1", ready("lifecycle-503:1", plainDigest.String(), amd64))},
		WantErr: true,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: lifecycle("lifecycle-503:1", func(s *v1alpha1.ClusterLifecycleStatus) {
			ready("lifecycle-503:1", plainDigest.String(), amd64)(s)
			s.MarkStale(registry.ReasonRegistryUnavailable, unavailable+"; "+
				reconciler.WaitingMessage(registry.Place{Host: f.Addr, Repository: "lifecycle-503"}, 5*time.Minute))
		})}},
		WantEvents: []string{pkgtesting.Eventf(corev1.EventTypeWarning, registry.ReasonRegistryUnavailable, "%s", unavailable)},
	}, {
		Name: "transient, spec edited: the registry answers 503; not Ready for the new generation, the resolved status stays",
		Key:  "lifecycle",
		Objects: []runtime.Object{edited(withImage(lifecycle("lifecycle:0.21.0", ready("lifecycle:0.21.0", plainDigest.String(), amd64)),
			f.Addr+"/lifecycle-503:1"))},
		WantErr: true,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: edited(withImage(lifecycle("lifecycle:0.21.0", func(s *v1alpha1.ClusterLifecycleStatus) {
			resolved("lifecycle:0.21.0", plainDigest.String(), amd64)(s)
			s.ObservedGeneration = 2
			s.MarkRetrying(registry.ReasonRegistryUnavailable, unavailable,
				reconciler.WaitingMessage(registry.Place{Host: f.Addr, Repository: "lifecycle-503"}, 5*time.Minute))
		}), f.Addr+"/lifecycle-503:1"))}},
		WantEvents: []string{pkgtesting.Eventf(corev1.EventTypeWarning, registry.ReasonRegistryUnavailable, "%s", unavailable)},
	}, {
		Name:    "permanent: the image does not parse",
		Key:     "lifecycle",
		Objects: []runtime.Object{lifecycle("Bad:Image:x", nil)},
		WantErr: true,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: lifecycle("Bad:Image:x", func(s *v1alpha1.ClusterLifecycleStatus) {
			s.MarkStalled(reconciler.ReasonInvalidSpec, invalidImage(f.Addr+"/Bad:Image:x"))
		})}},
		WantEvents: []string{pkgtesting.Eventf(corev1.EventTypeWarning, reconciler.ReasonInvalidSpec, "%s", invalidImage(f.Addr+"/Bad:Image:x"))},
	}}
	rows.Test(t, rt.TableFactory(func(ctx context.Context, cmw configmap.Watcher) *controller.Impl {
		return NewController(registry.New(ctx, registry.Options{LoopbackRegistries: true}), reconciler.DefaultOptions())(ctx, cmw)
	}))
}

// edited is lc with a new generation, its status still of the last one.
func edited(lc *v1alpha1.ClusterLifecycle) *v1alpha1.ClusterLifecycle {
	lc.Generation = 2
	return lc
}

// withImage points lc's spec at image, keeping its status (the spec
// changed after the last success).
func withImage(lc *v1alpha1.ClusterLifecycle, image string) *v1alpha1.ClusterLifecycle {
	lc.Spec.Image = image
	return lc
}

// invalidImage is the message of an unparsable spec.image.
func invalidImage(image string) string {
	lc := &v1alpha1.ClusterLifecycle{Spec: v1alpha1.ClusterLifecycleSpec{ImageSource: v1alpha1.ImageSource{Image: image}}}
	return lc.Validate(context.Background()).Error()
}

// lifecycleIndex is an index of lifecycle images, one per platform, each
// of the version versions gives it.
func lifecycleIndex(t *testing.T, versions map[string]string, binary string) v1.ImageIndex {
	t.Helper()
	var index v1.ImageIndex = empty.Index
	for _, platform := range []string{"linux/amd64", "linux/arm64"} {
		one, err := sampleimages.LifecycleIndex(map[string]string{platform: binary}, versions[platform])
		if err != nil {
			t.Fatal(err)
		}
		m, err := one.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		img, err := one.Image(m.Manifests[0].Digest)
		if err != nil {
			t.Fatal(err)
		}
		index = mutate.AppendManifests(index, mutate.IndexAddendum{Add: img, Descriptor: m.Manifests[0]})
	}
	return index
}
