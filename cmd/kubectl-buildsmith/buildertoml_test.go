package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// builderTOML is a pack builder.toml with a buildpack beside it, a
// directory, which pack reads as a path and not as the image "go".
const builderTOML = `description = "Go on Jammy"

[[buildpacks]]
uri = "docker://registry.example.com/buildpacks/go:4.0.0"
version = "4.0.0"

[[buildpacks]]
uri = "go"

[[order]]
[[order.group]]
id = "example/go"
version = "4.0.0"

[stack]
id = "io.buildpacks.stacks.jammy"
build-image = "registry.example.com/stacks/build:1"
run-image = "registry.example.com/stacks/run:1"

[lifecycle]
version = "0.21.0"
`

func TestConvertBuilderTOML(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "builder.toml")
	if err := os.WriteFile(file, []byte(builderTOML), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "go"), 0o755); err != nil {
		t.Fatal(err)
	}
	pathWarning := `: buildpacks[1].uri: "go" is a path on the machine that runs pack`
	tests := []convertCase{{
		name: "a file",
		args: []string{"--builder-toml", file, "--tag", "registry.example.com/builders/go:1"},
		wantStdout: []string{"kind: ClusterStore\nmetadata:\n  name: go\n", "kind: ClusterStack\n", "kind: ClusterLifecycle\nmetadata:\n  name: lifecycle-0.21.0\n",
			"kind: ClusterBuilder\nmetadata:\n  name: go\nspec:\n  description: Go on Jammy\n"},
		// Beside the builder.toml, "go" is a directory.
		wantStderr: []string{"warning: " + file + pathWarning},
	}, {
		name:       "stdin, into a namespace",
		args:       []string{"--builder-toml", "-", "--tag", "registry.example.com/builders/go:1", "-n", "apps", "--name", "golang", "--service-account", "pusher"},
		stdin:      builderTOML,
		wantStdout: []string{"name: apps-golang\n", "kind: Builder\nmetadata:\n  name: golang\n  namespace: apps\n", "serviceAccountName: pusher\n"},
		// Read from stdin, "go" is looked for in the working directory,
		// where there is none: it is the image docker.io/library/go.
	}, {
		name:       "no tag",
		args:       []string{"--builder-toml", file},
		wantStatus: 1,
		wantStderr: []string{"kubectl-buildsmith convert: --builder-toml needs --tag"},
	}, {
		name:       "both inputs",
		args:       []string{"--builder-toml", file, "-f", file, "--tag", "r.example.com/b:1"},
		wantStatus: 1,
		wantStderr: []string{"give exactly one input"},
	}, {
		name:       "builder.toml flags without it",
		args:       []string{"-f", file, "-n", "apps"},
		wantStatus: 1,
		wantStderr: []string{"--tag, --name, -n, --stack-id, --service-account and --flatten are for --builder-toml"},
	}, {
		name:       "not TOML",
		args:       []string{"--builder-toml", "-", "--tag", "r.example.com/b:1"},
		stdin:      "apiVersion: v1\nkind: List\n",
		wantStatus: 1,
		wantStderr: []string{"kubectl-buildsmith convert: stdin: not a builder.toml: toml: line 1"},
	}, {
		name:       "a ClusterBuilder's ServiceAccount needs a namespace",
		args:       []string{"--builder-toml", file, "--tag", "r.example.com/b:1", "--service-account", "pusher"},
		wantStatus: 1,
		wantStderr: []string{`kubectl-buildsmith convert: service account "pusher": a ClusterBuilder's is NAMESPACE/NAME`},
	}, {
		name:       "an object left out: exit status 1, the rest written",
		args:       []string{"--builder-toml", "-", "--tag", "r.example.com/b:1"},
		stdin:      strings.Replace(builderTOML, `run-image = "registry.example.com/stacks/run:1"`, "", 1),
		wantStatus: 1,
		wantStdout: []string{"kind: ClusterStore\n", "kind: ClusterLifecycle\n", "kind: ClusterBuilder\n"},
		wantStderr: []string{"warning: stdin: run.images: missing", "kubectl-buildsmith convert: 1 object(s) not converted; see the warnings above\n"},
	}, {
		name: "the sample converts with no warning",
		args: []string{"--builder-toml", filepath.Join("..", "..", "config", "samples", "pack", "builder.toml"),
			"--tag", "localhost:5000/buildsmith-demo/builders/from-pack:latest"},
		wantStdout: []string{"kind: ClusterStore\n", "kind: ClusterStack\n", "additionalRunImages:\n", "kind: ClusterLifecycle\n", "kind: ClusterBuilder\n"},
	}, {
		name:       "larger than --max-input-bytes",
		args:       []string{"--builder-toml", file, "--tag", "r.example.com/b:1", "--max-input-bytes", "100"},
		wantStatus: 1,
		wantStderr: []string{"the input is larger than --max-input-bytes=100"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, tt.check)
	}
}

// convertCase is a run of convert and what it must give.
type convertCase struct {
	name       string
	args       []string
	stdin      string
	wantStatus int
	wantStdout []string // substrings, in order
	wantStderr []string // substrings; none: empty
}

func (tt convertCase) check(t *testing.T) {
	var stdout, stderr bytes.Buffer
	status := run(append([]string{"convert"}, tt.args...), strings.NewReader(tt.stdin), &stdout, &stderr)
	if status != tt.wantStatus {
		t.Errorf("status %d, want %d; stderr:\n%s", status, tt.wantStatus, stderr.String())
	}
	rest := stdout.String()
	for _, want := range tt.wantStdout {
		i := strings.Index(rest, want)
		if i < 0 {
			t.Errorf("stdout lacks %q (or has it out of order):\n%s", want, stdout.String())
			break
		}
		rest = rest[i+len(want):]
	}
	if len(tt.wantStderr) == 0 && stderr.Len() > 0 {
		t.Errorf("stderr:\n%s\nwant none", stderr.String())
	}
	for _, want := range tt.wantStderr {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr:\n%s\nwant it to contain %q", stderr.String(), want)
		}
	}
	for _, line := range strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n") {
		if line != "" && !strings.HasPrefix(line, "warning: ") && !strings.HasPrefix(line, "kubectl-buildsmith convert: ") &&
			line != "See 'kubectl buildsmith convert -h' for help." {
			t.Errorf("a stderr line that is neither a warning, an error nor where help is: %q", line)
		}
	}
}

// TestConvertBuilderTOMLDeepNesting: a builder.toml nesting deeper than
// the TOML parser can recurse without overflowing the stack (issue 37:
// 24 MiB of "[") is an error naming the limit, not a crash.
func TestConvertBuilderTOMLDeepNesting(t *testing.T) {
	for name, in := range map[string]string{
		"24 MiB of [":          strings.Repeat("[", 24<<20),
		"24 MiB of {":          strings.Repeat("{", 24<<20),
		"24 MiB of a=[[[[…":    "a=" + strings.Repeat("[", 24<<20),
		"24 MiB of a={a={a={…": "a=" + strings.Repeat("{a=", 8<<20),
	} {
		t.Run(name, convertCase{args: []string{"--builder-toml", "-", "--tag", "r.example.com/b:1"}, stdin: in, wantStatus: 1,
			wantStderr: []string{"kubectl-buildsmith convert: stdin: not a builder.toml: line 1: arrays and tables nested more than 64 deep\n"}}.check)
	}
}
