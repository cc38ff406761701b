package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"

	"github.com/buildsmith/buildsmith/test/registrytest"
	"github.com/buildsmith/buildsmith/test/sampleimages"
)

// samplesRegistry is the registry host the samples name.
const samplesRegistry = "localhost:5000"

// TestSamplesGoReady applies the store, stack and lifecycle of config/samples, pointed
// at a test registry holding images of the names they use, and waits for
// kubectl to see them Ready.
func TestSamplesGoReady(t *testing.T) {
	f := registrytest.New(t)
	f.PushBuildpackage("buildsmith-demo/buildpacks/hello:1.0.0",
		registrytest.Buildpack{ID: "buildsmith-demo/hello", Version: "1.0.0", API: "0.10"})
	// The sample store follows greeting's 1.x versions: 1.1.0 of these.
	for _, v := range []string{"0.9.0", "1.0.0", "1.1.0", "2.0.0"} {
		f.PushBuildpackage("buildsmith-demo/buildpacks/greeting:"+v,
			registrytest.Buildpack{ID: "buildsmith-demo/greeting", Version: v, API: "0.10"})
	}
	labels := map[string]string{"io.buildpacks.stack.id": "dev.buildsmith.stacks.demo"}
	f.PushImage("buildsmith-demo/stack/build:1.0.0", labels, "CNB_USER_ID=1000", "CNB_GROUP_ID=1000")
	f.PushImage("buildsmith-demo/stack/run:1.0.0", labels)
	curl, err := sampleimages.ExtensionPackage(curlExtension)
	push(t, f, "buildsmith-demo/extensions/curl:1.0.0", curl, err)
	lifecycle, err := sampleimages.Lifecycle(filepath.Join(env.Root, "bin", "lifecycle"), "0.21.0")
	push(t, f, "buildsmith-demo/lifecycle:0.21.0", lifecycle, err)
	startController(t)

	var manifests []string
	for _, sample := range []string{"clusterstore.yaml", "clusterstack.yaml", "clusterlifecycle.yaml"} {
		raw, err := os.ReadFile(filepath.Join(env.Root, "config", "samples", sample))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(raw), samplesRegistry) {
			t.Fatalf("%s does not use %s", sample, samplesRegistry)
		}
		manifests = append(manifests, strings.ReplaceAll(string(raw), samplesRegistry, f.Addr))
	}
	apply := env.Kubectl("apply", "-f", "-")
	apply.Stdin = strings.NewReader(strings.Join(manifests, "\n---\n"))
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	wait := env.Kubectl("wait", "--for=condition=Ready", "--timeout=60s", "clusterstore/demo", "clusterstack/demo", "clusterlifecycle/lifecycle-0-21")
	if out, err := wait.CombinedOutput(); err != nil {
		store, _ := client.BuildsmithV1alpha1().ClusterStores().Get(context.Background(), "demo", metav1.GetOptions{})
		t.Fatalf("kubectl wait: %v\n%s\nstore status: %+v", err, out, store.Status)
	}
	out, err := env.Kubectl("get", "clusterstore/demo", "clusterstack/demo", "clusterlifecycle/lifecycle-0-21").CombinedOutput() // earlier tests leave objects of their own
	// Rows whose READY column says True.
	ready := 0
	for _, line := range strings.Split(string(out), "\n") {
		if fields := strings.Fields(line); len(fields) > 1 && fields[1] == "True" {
			ready++
		}
	}
	if err != nil || ready != 3 {
		t.Errorf("kubectl get clusterstore/demo clusterstack/demo clusterlifecycle/lifecycle-0-21: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	eventually(t, 10*time.Second, "store lists the sample buildpacks", func() (bool, string) {
		s, err := client.BuildsmithV1alpha1().ClusterStores().Get(context.Background(), "demo", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		chosen := len(s.Status.ChosenTags) == 1 && s.Status.ChosenTags[0].Tag == "1.1.0" &&
			slices.ContainsFunc(s.Status.Buildpacks, func(bp v1alpha1.StoreBuildpack) bool {
				return bp.ID == "buildsmith-demo/greeting" && bp.Version == "1.1.0"
			})
		return len(s.Status.Buildpacks) == 2 && len(s.Status.Extensions) == 1 && chosen,
			fmt.Sprintf("%+v %+v %+v", s.Status.Buildpacks, s.Status.Extensions, s.Status.ChosenTags)
	})
}
