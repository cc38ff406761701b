package apiserver

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestBuilderTOMLOutputs applies (server-side dry run) what `kubectl
// buildsmith convert --builder-toml` wrote for each builder.toml of
// pkg/packconfig/testdata (Paketo's and Heroku's among them): the CRD
// schemas, CEL rules included, accept every object, and the API server
// keeps the builder's description.
func TestBuilderTOMLOutputs(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(env.Root, "pkg", "packconfig", "testdata", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no outputs in pkg/packconfig/testdata: %v", err)
	}
	// The namespaced Builder's namespace.
	if out, err := env.Kubectl("create", "namespace", "team-a").CombinedOutput(); err != nil && !strings.Contains(string(out), "AlreadyExists") {
		t.Fatalf("kubectl create namespace: %v\n%s", err, out)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			out, err := env.Kubectl("apply", "--dry-run=server", "-o", "yaml", "-f", file).CombinedOutput()
			if err != nil {
				t.Fatalf("kubectl apply --dry-run=server -f %s: %v\n%s", file, err, out)
			}
			if !strings.Contains(string(out), "description: ") {
				t.Errorf("the API server dropped the builder's description:\n%s", out)
			}
		})
	}
}
