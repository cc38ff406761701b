package builder

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cnb"
	rt "github.com/buildsmith/buildsmith/pkg/reconciler/reconcilertest"
	"github.com/buildsmith/buildsmith/test/sampleimages"
)

// TestBuilderExtensions: spec.orderExtensions puts the store's image
// extensions into the builder, resolved in status; an extension the store
// lacks, or a lifecycle without the platform API that runs extensions,
// stalls the builder naming it, and keeps its image.
func TestBuilderExtensions(t *testing.T) {
	x := newFixture(t)
	img, err := sampleimages.ExtensionPackage(sampleimages.Extension{ID: "example/curl", Version: "1.0.0", Detect: "exit 0\n", Generate: "true\n"})
	if err != nil {
		t.Fatal(err)
	}
	x.f.Write("ext/curl:1", img)
	digest, _ := img.Digest()
	cf, _ := img.ConfigFile()
	m, _ := img.Manifest()
	pkg, err := cnb.ReadPackage(x.f.Addr+"/ext/curl@"+digest.String(), cf, m)
	if err != nil {
		t.Fatal(err)
	}
	for i := range pkg.Extensions {
		pkg.Extensions[i].Platforms = []v1alpha1.Platform{{OS: "linux", Arch: "amd64"}}
	}
	x.store.Status.Extensions = pkg.Extensions
	lifecycle := x.f.Addr + "/lifecycle:0.21.0"
	withExtensions := func(id string) *v1alpha1.Builder {
		return x.builder(func(b *v1alpha1.Builder) {
			b.Spec.OrderExtensions = []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: id}}}}
		})
	}

	plain, _, err, _ := x.run(t, x.builder(nil), lifecycle)
	if !plain.Status.IsReady() {
		t.Fatalf("the builder without extensions: %v", err)
	}
	got, events, err, _ := x.run(t, withExtensions("example/curl"), lifecycle)
	rt.Check(t, got, err, events, rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync,
		MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute, EventReasons: []string{"Ready"}})
	if o := got.Status.OrderExtensions; len(o) != 1 || !reflect.DeepEqual(o[0].Group[0], v1alpha1.BuildpackRef{ID: "example/curl", Version: "1.0.0"}) {
		t.Errorf("status.orderExtensions: %+v", o)
	}
	if got.Status.Fingerprint == plain.Status.Fingerprint {
		t.Error("the same fingerprint with and without extensions")
	}
	files, err := sampleimages.Files(x.read(t, got.Status.LatestImage))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := files["cnb/extensions/example_curl/1.0.0/bin/generate"]; !ok {
		t.Error("the extension is not in /cnb/extensions")
	}
	if !strings.Contains(files["cnb/order.toml"], "[[order-extensions]]") {
		t.Errorf("order.toml:\n%s", files["cnb/order.toml"])
	}

	old := x.fakeLifecycle(t, "lifecycle:0.9", "0.9.0",
		`{"buildpack":{"supported":["0.10"]},"platform":{"supported":["0.7","0.8","0.9"]}}`)
	x.checkStalled(t, got.Status, map[string]stalled{
		"an extension the store lacks": {withExtensions("example/ghost"), lifecycle, cnb.ReasonBuildpackNotFound,
			"orderExtensions: extension example/ghost is not in the store"},
		"a lifecycle without extensions": {withExtensions("example/curl"), old, cnb.ReasonPlatformAPIUnsupported,
			"image extensions need platform API 0.10 or later; lifecycle 0.9.0 supports 0.7, 0.8, 0.9"},
	})
}
