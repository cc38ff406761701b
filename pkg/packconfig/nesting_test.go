package packconfig

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

// TestDeepNestingRefused: input nesting arrays or inline tables deeper
// than maxNesting is an error naming the limit, before the TOML parser
// (which recurses per level, and whose stack overflow kills the process)
// sees it; brackets in strings and comments do not count, and a string
// ends where the parser ends it (so none hides brackets from the count).
func TestDeepNestingRefused(t *testing.T) {
	const huge = 24 << 20 // issue 37: 24 MiB of "[" overflowed the stack
	deep := func(open, close string, n int) string {
		return strings.Repeat(open, n) + strings.Repeat(close, n)
	}
	for _, tc := range []struct {
		name    string
		in      string
		refused bool // with "nested more than 64 deep"
	}{
		{name: "24 MiB of [", in: strings.Repeat("[", huge), refused: true},
		{name: "24 MiB of {", in: strings.Repeat("{", huge), refused: true},
		{name: "a=[[[[… for 24 MiB", in: "a=" + strings.Repeat("[", huge), refused: true},
		{name: "a={a={… for 24 MiB", in: "a=" + strings.Repeat("{a=", huge/3), refused: true},
		{name: "arrays 65 deep", in: "a = " + deep("[", "]", 65), refused: true},
		{name: "arrays 64 deep", in: "a = " + deep("[", "]", 64)},
		{name: "inline tables 65 deep", in: "a = " + strings.Repeat("{b = ", 65) + "1" + strings.Repeat("}", 65), refused: true},
		{name: "brackets in strings and comments", in: "description = \"" + strings.Repeat("[", 100) + "\"\n" +
			"d = '" + strings.Repeat("{", 100) + "'\n# " + strings.Repeat("[", 100) + "\n" +
			"e = \"\"\"\n" + strings.Repeat("[", 100) + "\n\\\"\"\"\"\"\"\nf = '''" + strings.Repeat("[", 100) + "'''''\n"},
		{name: "after a multi-line string ending in quotes", in: `a = ["""x"""", ` + deep("[", "]", 65) + "]", refused: true},
		{name: "after a literal string ending in a backslash", in: `a = ['x\', ` + deep("[", "]", 65) + "]", refused: true},
		{name: "after an escaped quote", in: `a = ["x\"", ` + deep("[", "]", 65) + "]", refused: true},
		{name: "after a comment", in: "a = [ # [[[[\n" + deep("[", "]", 65) + "]", refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.in) < 1<<20 {
				// TOML the parser takes (65 levels are no trouble): the
				// scanner must read its strings as the parser does.
				var v map[string]any
				if err := toml.Unmarshal([]byte(tc.in), &v); err != nil {
					t.Fatalf("not TOML: %v", err)
				}
			}
			_, _, err := Convert(strings.NewReader(tc.in), Options{Tag: "registry.example.com/b:1"})
			nested := err != nil && strings.Contains(err.Error(), "arrays and tables nested more than 64 deep")
			if nested != tc.refused || !tc.refused && err != nil {
				t.Errorf("error %v; want refused for nesting: %v", err, tc.refused)
			}
		})
	}
}

// TestNestedBuilderTOMLConverts: a builder.toml using every nesting a real
// one does (arrays of tables, inline tables in arrays, tables of arrays of
// tables, brackets in its strings and comments) converts, and the real
// builder.toml files of testdata nest at most 4 deep.
func TestNestedBuilderTOMLConverts(t *testing.T) {
	in := `description = "A [builder] {with} brackets: [[[[ {{{{"
# [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[
[[buildpacks]]
  uri = "docker://gcr.io/paketo-buildpacks/go:4.11.0"
[[buildpacks]]
  image = "gcr.io/paketo-buildpacks/java:13.0.0"
[[order]]
  [[order.group]]
    id = "paketo-buildpacks/go"
    version = "4.11.0"
[[order]]
  group = [{ id = "paketo-buildpacks/java", optional = true }, { id = "paketo-buildpacks/go" }]
[[targets]]
  os = "linux"
  arch = "amd64"
  [[targets.distributions]]
    name = "ubuntu"
    versions = ["22.04", "24.04"]
[stack]
  id = "io.buildpacks.stacks.jammy"
  build-image = "paketobuildpacks/build-jammy-base:latest"
  run-image = "paketobuildpacks/run-jammy-base:latest"
  run-image-mirrors = ["gcr.io/paketo-buildpacks/run-jammy-base:latest"]
`
	out, _, err := Convert(strings.NewReader(in), Options{Tag: "registry.example.com/b:1"})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out, []byte("kind: ClusterBuilder")) || !bytes.Contains(out, []byte("paketo-buildpacks/java")) {
		t.Errorf("no ClusterBuilder with the java group:\n%s", out)
	}

	files, err := filepath.Glob("testdata/*.toml")
	if err != nil || len(files) == 0 {
		t.Fatalf("testdata: %v, %v", files, err)
	}
	for _, file := range files {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		// Refused beyond 4 deep: no real file nests deeper.
		if err := checkNesting(text, 4); err != nil {
			t.Errorf("%s: %v", file, err)
		}
	}
}
