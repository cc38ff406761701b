package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const store = `apiVersion: experimental.kpack.pivotal.io/v1alpha1
kind: Store
metadata:
  name: sample-store
spec:
  sources:
  - image: gcr.io/paketo-buildpacks/java
  unknown: true
`

const storelessBuilder = `apiVersion: kpack.io/v1alpha2
kind: ClusterBuilder
metadata: {name: lonely}
spec:
  tag: gcr.io/sample/lonely
  stack: {name: base, kind: ClusterStack}
  order:
  - group:
    - id: paketo-buildpacks/nodejs
`

func TestRun(t *testing.T) {
	file := filepath.Join(t.TempDir(), "store.yaml")
	if err := os.WriteFile(file, []byte(store), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		args       []string
		stdin      string
		wantStatus int
		wantStdout string // a substring; "" for empty
		wantStderr string // a substring; "" for empty
	}{{
		name:       "no command",
		wantStatus: 1,
		wantStderr: "Usage:\n  kubectl buildsmith [flags]\n  kubectl buildsmith [command]",
	}, {
		name:       "help",
		args:       []string{"--help"},
		wantStdout: "Convert kpack builder manifests",
	}, {
		name:       "version",
		args:       []string{"version"},
		wantStdout: "kubectl-buildsmith dev\n",
	}, {
		name:       "version with an argument",
		args:       []string{"version", "--short"},
		wantStatus: 1,
		wantStderr: "kubectl-buildsmith version: unknown flag: --short\nSee 'kubectl buildsmith version -h' for help.\n",
	}, {
		name:       "version with an argument",
		args:       []string{"version", "short"},
		wantStatus: 1,
		wantStderr: `kubectl-buildsmith version: takes no arguments, got ["short"]`,
	}, {
		name:       "a single-dash long flag",
		args:       []string{"convert", "-max-input-bytes=10", "-f", "-"},
		wantStatus: 1,
		wantStderr: "kubectl-buildsmith convert: unknown shorthand flag: 'm' in -max-input-bytes=10",
	}, {
		name:       "unknown command",
		args:       []string{"frobnicate"},
		wantStatus: 1,
		wantStderr: `unknown command "frobnicate"`,
	}, {
		name:       "convert help",
		args:       []string{"convert", "-h"},
		wantStdout: "Usage:\n  kubectl buildsmith convert (-f FILE|- | --builder-toml FILE|- --tag REF) [flags]",
	}, {
		name:       "convert without -f",
		args:       []string{"convert"},
		wantStatus: 1,
		wantStderr: "give exactly one input",
	}, {
		name:       "convert a file",
		args:       []string{"convert", "-f", file},
		wantStdout: "kind: ClusterStore",
		wantStderr: "warning: Store/sample-store: spec.unknown: buildsmith has no such field; dropped\n",
	}, {
		name:       "convert stdin",
		args:       []string{"convert", "--filename", "-"},
		stdin:      store,
		wantStdout: "apiVersion: buildsmith.dev/v1alpha1",
		wantStderr: "warning: Store/sample-store: spec.unknown:",
	}, {
		name:       "convert a file that is not there",
		args:       []string{"convert", "-f", filepath.Join(t.TempDir(), "missing.yaml")},
		wantStatus: 1,
		wantStderr: "no such file or directory",
	}, {
		name:       "malformed input",
		args:       []string{"convert", "-f", "-"},
		stdin:      "a: [\n",
		wantStatus: 1,
		wantStderr: "kubectl-buildsmith convert: document 1 (starting at line 1): ",
	}, {
		name:       "an object that cannot be converted",
		args:       []string{"convert", "-f", "-"},
		stdin:      store + "---\n" + storelessBuilder,
		wantStatus: 1,
		wantStdout: "name: sample-store",
		wantStderr: "1 object(s) not converted",
	}, {
		name: "an object left out for several reasons counts once",
		args: []string{"convert", "-f", "-"},
		stdin: "apiVersion: kpack.io/v1alpha2\nkind: ClusterBuilder\nmetadata: {name: b}\nspec:\n  tag: gcr.io/sample/b\n" +
			"  stack: {name: base, kind: ClusterStack}\n  store: {name: s, kind: ClusterStore}\n  order:\n" +
			"  - group:\n    - {id: a, optional: \"yes\"}\n    - {id: b, optional: \"no\"}\n",
		wantStatus: 1,
		wantStderr: "\nkubectl-buildsmith convert: 1 object(s) not converted",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			status := run(tt.args, strings.NewReader(tt.stdin), &stdout, &stderr)
			if status != tt.wantStatus {
				t.Errorf("status %d, want %d; stderr:\n%s", status, tt.wantStatus, stderr.String())
			}
			check := func(stream, got, want string) {
				if want == "" && got != "" || !strings.Contains(got, want) {
					t.Errorf("%s:\n%s\nwant it to contain %q", stream, got, want)
				}
			}
			check("stdout", stdout.String(), tt.wantStdout)
			check("stderr", stderr.String(), tt.wantStderr)
		})
	}
}
