package e2e

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestKpackManifestsBecomeReady: a team's kpack manifests (a ClusterStack,
// a ClusterBuildpack and a Builder without a store that names the
// buildpack by object) go through `kubectl buildsmith convert` into
// `kubectl apply`; `kubectl buildsmith reconcile --wait` then sees the
// builder Ready, pushed by the controller to the distribution registry, and
// `kubectl buildsmith status` lists it.
func TestKpackManifestsBecomeReady(t *testing.T) {
	w := newFaultWorld(t, "kpack")
	startController(t)
	plugin := filepath.Join(t.TempDir(), "kubectl-buildsmith")
	build := exec.Command("go", "build", "-o", plugin, "./cmd/kubectl-buildsmith")
	build.Dir = env.Root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/kubectl-buildsmith: %v\n%s", err, out)
	}
	kpack := fmt.Sprintf(`apiVersion: kpack.io/v1alpha2
kind: ClusterStack
metadata:
  name: %[1]s
spec:
  id: io.buildpacks.stacks.faults
  buildImage:
    image: %[2]s/stack/build:1
  runImage:
    image: %[2]s/stack/run:1
  serviceAccountRef:
    name: default
    namespace: %[3]s
---
apiVersion: kpack.io/v1alpha2
kind: ClusterBuildpack
metadata:
  name: hello
spec:
  image: %[2]s/buildpacks/hello:1.0.0
  serviceAccountRef:
    name: default
    namespace: %[3]s
---
apiVersion: kpack.io/v1alpha2
kind: Builder
metadata:
  name: %[1]s
  namespace: %[3]s
spec:
  tag: %[2]s/builders/%[1]s
  serviceAccountName: default
  stack:
    name: %[1]s
    kind: ClusterStack
  order:
  - group:
    - name: hello
      kind: ClusterBuildpack
      id: example/hello
`, w.name, w.f.Addr, w.ns)

	var converted, warnings bytes.Buffer
	convert := exec.Command(plugin, "convert", "-f", "-")
	convert.Stdin, convert.Stdout, convert.Stderr = strings.NewReader(kpack), &converted, &warnings
	if err := convert.Run(); err != nil {
		t.Fatalf("kubectl buildsmith convert: %v\n%s", err, warnings.String())
	}
	t.Logf("convert said:\n%s", warnings.String())
	// The store the builder takes from its ClusterBuildpack, and the
	// order entry that names it, are announced.
	for _, want := range []string{"spec.store", "ClusterBuildpack/hello"} {
		if !strings.Contains(warnings.String(), want) {
			t.Errorf("convert's warnings do not mention %s:\n%s", want, warnings.String())
		}
	}
	apply := env.Kubectl("apply", "-f", "-")
	apply.Stdin = &converted
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s\nof:\n%s", err, out, converted.String())
	}

	reconcile := exec.Command(plugin, "reconcile", "builder/"+w.name, "-n", w.ns, "--wait", "--timeout", "60s", "--kubeconfig", env.Kubeconfig)
	out, err := reconcile.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl buildsmith reconcile --wait: %v\n%s", err, out)
	}
	if want := fmt.Sprintf("builder/%s: Ready %s/builders/%s@sha256:", w.name, w.f.Addr, w.name); !strings.Contains(string(out), want) {
		t.Errorf("reconcile --wait printed %q, want %q", out, want)
	}
	if n := w.f.Count("PUT", "/builders/"+w.name+"/manifests/latest"); n != 1 {
		t.Errorf("the builder was pushed %d times, want 1", n)
	}

	status := exec.Command(plugin, "status", "-n", w.ns, "--kubeconfig", env.Kubeconfig)
	out, err = status.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl buildsmith status: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[1] == "builder/"+w.name {
			if f[2] != "True" {
				t.Errorf("status: %q", line)
			}
			return
		}
	}
	t.Errorf("status does not list builder/%s:\n%s", w.name, out)
}
