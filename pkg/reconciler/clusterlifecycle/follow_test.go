package clusterlifecycle

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	rt "github.com/buildsmith/buildsmith/pkg/reconciler/reconcilertest"
	"github.com/buildsmith/buildsmith/pkg/registry"
	"github.com/buildsmith/buildsmith/test/registrytest"
	"github.com/buildsmith/buildsmith/test/sampleimages"
)

// TestFollowsVersions: a ClusterLifecycle following 0.20.x reads the
// highest such tag, by digest; status.image names that tag (builders read
// the digest) and status.chosenTags says which.
func TestFollowsVersions(t *testing.T) {
	f := registrytest.New(t)
	binary := filepath.Join(t.TempDir(), "lifecycle")
	if err := os.WriteFile(binary, []byte("ELF"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"0.20.1", "0.20.4", "0.21.0"} {
		img, err := sampleimages.Lifecycle(binary, v)
		if err != nil {
			t.Fatal(err)
		}
		f.Write("lifecycle:"+v, img)
	}
	digest, err := f.Resolve(f.Addr + "/lifecycle:0.20.4")
	if err != nil {
		t.Fatal(err)
	}
	lc := &v1alpha1.ClusterLifecycle{ObjectMeta: metav1.ObjectMeta{Name: "lifecycle", Generation: 1},
		Spec: v1alpha1.ClusterLifecycleSpec{ImageSource: v1alpha1.ImageSource{Image: f.Addr + "/lifecycle",
			Policy: &v1alpha1.TagPolicy{Semver: v1alpha1.SemverPolicy{Range: "~0.20"}}}}}
	ctx, clients := rt.Setup(t, lc)
	impl := rt.Controller(ctx, NewController(registry.New(ctx, registry.Options{LoopbackRegistries: true}), reconciler.DefaultOptions()))
	err = rt.Sync(impl).Reconcile(ctx, lc.Name)
	got, getErr := clients.Buildsmith.BuildsmithV1alpha1().ClusterLifecycles().Get(ctx, lc.Name, metav1.GetOptions{})
	if getErr != nil {
		t.Fatal(getErr)
	}
	rt.Check(t, got, err, clients.Events(), rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync,
		MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute, EventReasons: []string{"Ready"}})
	if got.Status.Image.Image != f.Addr+"/lifecycle:0.20.4" || got.Status.Image.LatestImage != digest || got.Status.Version != "0.20.4" {
		t.Errorf("status: image %+v, version %s; want 0.20.4 at %s", got.Status.Image, got.Status.Version, digest)
	}
	if c := got.Status.ChosenTags; len(c) != 1 || c[0].Field != "spec.image" || c[0].Tag != "0.20.4" || c[0].LatestImage != digest {
		t.Errorf("status.chosenTags %+v, want spec.image at 0.20.4", c)
	}
}
