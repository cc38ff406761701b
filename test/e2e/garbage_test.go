package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/test/distribution"
)

// TestGarbageCollectedBlobs: the controller remembers which blobs a
// builder's repository holds and does not ask about them again (issue 29).
// The builder's image is deleted and the distribution registry's garbage
// collector run, behind the controller's back; pushed again, the builder's
// manifest is refused once for a blob the registry no longer has, and the
// push made again asking gives the whole image.
func TestGarbageCollectedBlobs(t *testing.T) {
	ctx := context.Background()
	d := distribution.New(t, env.Root+"/bin/registry",
		distribution.Options{Htpasswd: registryHtpasswd, LogLevel: "info", AccessLog: true, Delete: true})
	auth := remote.WithAuth(&authn.Basic{Username: registryUser, Password: registryPassword})
	const ns = "gc"
	objects := storeStack{Addr: d.Addr, Name: "gc", Buildpackages: []string{"buildpacks/hello:1.0.0"}, StackID: "io.buildpacks.stacks.gc",
		Account: &v1alpha1.ServiceAccountRef{Name: "builder", Namespace: ns}}
	objects.pushSamples(t, func(repo string, img v1.Image, err error) { pushAuthenticated(t, d.Addr, repo, img, err) })
	pullSecretNamespace(t, ns, dockerConfig(d.Addr, registryUser, registryPassword))
	useLifecycleImage(t, d.Addr+"/buildsmith/lifecycle:0.21.0")
	startController(t)
	objects.create(t)
	objects.createBuilder(t, ns, "gc", v1alpha1.NamespacedBuilderSpec{ServiceAccountName: "builder",
		BuilderSpec: v1alpha1.BuilderSpec{Order: helloOrder()}})
	builders := client.BuildsmithV1alpha1().Builders(ns)
	ready := func(what string) *v1alpha1.Builder {
		t.Helper()
		var b *v1alpha1.Builder
		eventually(t, 60*time.Second, what, func() (bool, string) {
			var err error
			if b, err = builders.Get(ctx, "gc", metav1.GetOptions{}); err != nil {
				return false, err.Error()
			}
			return b.Status.IsReady() && b.Status.LatestImage != "", fmt.Sprintf("%+v", b.Status.Conditions)
		})
		return b
	}
	first := ready("the builder to be Ready")

	// Behind the controller's back: the image deleted, its blobs
	// collected. The builder's own blobs (its config, the layers it
	// writes) are referenced by nothing else, so they go.
	pushed, err := name.NewDigest(first.Status.LatestImage)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Delete(pushed, auth); err != nil {
		t.Fatal(err)
	}
	out, err := d.CollectGarbage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "blob eligible for deletion") {
		t.Fatalf("the garbage collection deleted no blob:\n%s", out)
	}
	logBefore := logSize(t, d.Log)

	// Asked to reconcile, the controller finds the tag gone and pushes the
	// same builder again.
	b, err := builders.Get(ctx, "gc", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b.Annotations == nil {
		b.Annotations = map[string]string{}
	}
	b.Annotations[v1alpha1.ReconcileRequestedAtAnnotation] = time.Now().Format(time.RFC3339Nano)
	if _, err := builders.Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the builder's tag to be pushed again", func() (bool, string) {
		_, err := remote.Head(pushed.Context().Tag("latest"), auth)
		return err == nil, fmt.Sprint(err)
	})
	again := ready("the builder to be Ready again")
	if again.Status.LatestImage != first.Status.LatestImage {
		t.Errorf("latestImage %s, want the same image as before %s", again.Status.LatestImage, first.Status.LatestImage)
	}
	img, err := remote.Image(pushed, auth)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(img); err != nil {
		t.Errorf("the image pushed again is not whole: %v", err)
	}

	// The registry's word on the tag: refused once for a missing blob
	// (the memory trusted), then taken.
	log, err := os.ReadFile(d.Log)
	if err != nil {
		t.Fatal(err)
	}
	var puts []string
	for _, line := range strings.Split(string(log[logBefore:]), "\n") {
		if strings.Contains(line, `"PUT /v2/builders/gc/manifests/latest `) {
			puts = append(puts, statusOf(line))
		}
	}
	if strings.Join(puts, " ") != fmt.Sprintf("%d %d", http.StatusBadRequest, http.StatusCreated) {
		t.Errorf("PUTs of the tag answered %v, want 400 (a blob unknown) then 201; registry log:\n%s", puts, lastLines(string(log), 40))
	}
}

func logSize(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

// statusOf is the status of a combined-log-format line: the field after
// the quoted request.
func statusOf(line string) string {
	_, after, _ := strings.Cut(line, `HTTP/1.1" `)
	status, _, _ := strings.Cut(after, " ")
	return status
}
