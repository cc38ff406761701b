package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// TestChartCRDs: the chart renders the CRDs of config/crd, whole (the
// same spec), labelled as the chart's and kept at helm uninstall;
// crds.keep=false lets uninstall delete them, crds.enabled=false leaves them
// out; the schema refuses values that are not booleans.
func TestChartCRDs(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(env.Root, "config", "crd", "*.yaml"))
	if err != nil || len(files) < 7 {
		t.Fatalf("config/crd: %d files, %v; want every kind's", len(files), err)
	}
	want := map[string]unstructured.Unstructured{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var u unstructured.Unstructured
		if err := yaml.Unmarshal(raw, &u.Object); err != nil {
			t.Fatal(err)
		}
		want[u.GetName()] = u
	}
	crdsOf := func(args ...string) map[string]unstructured.Unstructured {
		found := map[string]unstructured.Unstructured{}
		for key, u := range renderObjects(t, args...) {
			if strings.HasPrefix(key, "CustomResourceDefinition/") {
				found[u.GetName()] = u
			}
		}
		return found
	}

	rendered := crdsOf()
	if len(rendered) != len(want) {
		t.Fatalf("helm template: %d CRDs, want %d", len(rendered), len(want))
	}
	for name, w := range want {
		got := rendered[name]
		if diff := cmp.Diff(w.Object["spec"], got.Object["spec"]); diff != "" {
			t.Errorf("CRD %s: the chart's spec differs from config/crd's (-config/crd +chart):\n%s", name, diff)
		}
		if got.GetAnnotations()["helm.sh/resource-policy"] != "keep" || got.GetLabels()["app.kubernetes.io/instance"] != "buildsmith" ||
			got.GetAnnotations()["controller-gen.kubebuilder.io/version"] == "" {
			t.Errorf("CRD %s: annotations %v, labels %v; want controller-gen's, helm.sh/resource-policy keep and the chart's labels",
				name, got.GetAnnotations(), got.GetLabels())
		}
	}
	for name, got := range crdsOf("--set", "crds.keep=false") {
		if _, kept := got.GetAnnotations()["helm.sh/resource-policy"]; kept {
			t.Errorf("crds.keep=false: CRD %s still has helm.sh/resource-policy", name)
		}
	}
	if got := crdsOf("--set", "crds.enabled=false"); len(got) != 0 {
		t.Errorf("crds.enabled=false: %d CRDs rendered", len(got))
	}
	for _, bad := range []string{"crds.enabled=yes", "crds.keep=1", "crds.install=true"} {
		out, err := helm("template", "buildsmith", "charts/buildsmith", "--set", bad).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "crds") {
			t.Errorf("--set %s: %v, want a schema error naming crds:\n%s", bad, err, out)
		}
	}
}
