package e2e

import (
	"os/exec"
	"strings"
	"testing"
)

// TestMakeDemo runs the demo as `make demo` does (the tools are built by
// then) and checks that it ends with every object Ready, every builder
// rebuilt on a patched build image through the Receiver, and nothing left
// running.
func TestMakeDemo(t *testing.T) {
	cmd := exec.Command("go", "run", "./hack/demo", "--timeout", "2m")
	cmd.Dir = env.Root
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "demo: done") {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	for _, want := range []string{"builder.buildsmith.dev/demo   True", "clusterbuilder.buildsmith.dev/demo   True",
		`"id": "buildsmith-demo/greeting"`, "io.buildpacks.lifecycle.version",
		"builder demo-signed is signed with the cosign key of its ServiceAccount: 127.0.0.1:",
		"receiver.buildsmith.dev/registry", "rebuilt on the patched build image"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	if ps, _ := exec.Command("pgrep", "-f", "buildsmith-demo-").CombinedOutput(); len(strings.TrimSpace(string(ps))) > 0 {
		t.Errorf("processes left running after the demo: %s", ps)
	}
}
