package cnb

import (
	"archive/tar"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

func TestValidateEnv(t *testing.T) {
	for _, tt := range []struct {
		name  string
		env   []EnvVar
		valid bool
	}{
		{name: "none", valid: true},
		{name: "every suffix", valid: true, env: []EnvVar{
			{Name: "BP_JVM_VERSION", Value: "21"},
			{Name: "BP_LOG_LEVEL", Value: "DEBUG", Suffix: EnvDefault},
			{Name: "CGO_ENABLED", Value: "0", Suffix: EnvOverride},
			{Name: "PATH", Value: "/opt/tools/bin", Suffix: EnvPrepend, Delim: ":"},
			{Name: "JAVA_TOOL_OPTIONS", Value: "-Xss1m", Suffix: EnvAppend, Delim: " "},
			{Name: "GOFLAGS", Value: "-mod=vendor", Suffix: EnvAppend}, // no delimiter: joined as is
		}},
		{name: "an empty value", valid: true, env: []EnvVar{{Name: "NO_PROXY", Value: ""}}},
		{name: "one name, two suffixes", valid: true, env: []EnvVar{
			{Name: "PATH", Value: "/a", Suffix: EnvPrepend, Delim: ":"}, {Name: "PATH", Value: "/z", Suffix: EnvAppend, Delim: ":"}}},
		{name: "no name", env: []EnvVar{{Value: "x"}}},
		{name: "= in the name", env: []EnvVar{{Name: "A=B", Value: "x"}}},
		{name: "a dot in the name", env: []EnvVar{{Name: "A.append", Value: "x"}}},
		{name: "a slash in the name", env: []EnvVar{{Name: "../A", Value: "x"}}},
		{name: "CNB_ name", env: []EnvVar{{Name: "CNB_PLATFORM_API", Value: "0.13"}}},
		{name: "unknown suffix", env: []EnvVar{{Name: "A", Value: "x", Suffix: "replace"}}},
		{name: "delimiter with override", env: []EnvVar{{Name: "A", Value: "x", Suffix: EnvOverride, Delim: ":"}}},
		{name: "delimiter without suffix", env: []EnvVar{{Name: "A", Value: "x", Delim: ":"}}},
		{name: "a variable twice", env: []EnvVar{{Name: "A", Value: "x", Suffix: EnvOverride}, {Name: "A", Value: "y", Suffix: EnvOverride}}},
		{name: "two delimiters for one name", env: []EnvVar{
			{Name: "PATH", Value: "/a", Suffix: EnvPrepend, Delim: ":"}, {Name: "PATH", Value: "/z", Suffix: EnvAppend, Delim: ";"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateEnv(tt.env)
			if tt.valid {
				if err != nil {
					t.Errorf("ValidateEnv: %v", err)
				}
				return
			}
			if e, ok := failure.As(err); !ok || e.Reason != ReasonInvalidEnv || e.Class != failure.Permanent {
				t.Errorf("err = %v, want a permanent %s", err, ReasonInvalidEnv)
			}
		})
	}
}

// layerHeader is what the tests check of a tar entry.
type layerHeader struct {
	Name     string
	Mode     int64
	UID, GID int
	Dir      bool
}

func readLayer(t *testing.T, l v1.Layer) ([]layerHeader, map[string]string) {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var hs []layerHeader
	files := map[string]string{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return hs, files
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(epoch) {
			t.Errorf("%s modified %s, want %s", h.Name, h.ModTime, epoch)
		}
		hs = append(hs, layerHeader{h.Name, h.Mode, h.Uid, h.Gid, h.Typeflag == tar.TypeDir})
		if h.Typeflag == tar.TypeReg {
			b, _ := io.ReadAll(tr)
			files[h.Name] = string(b)
		}
	}
}

// configLayer is the last layer of a builder: its configuration files.
func configLayer(t *testing.T, spec BuilderSpec) v1.Layer {
	t.Helper()
	img, err := AssembleBuilder(spec)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	return layers[len(layers)-1]
}

func TestAssembleBuilderEnv(t *testing.T) {
	spec := builderSpec(t)
	spec.Env = []EnvVar{
		{Name: "PATH", Value: "/opt/tools/bin", Suffix: EnvPrepend, Delim: ":"},
		{Name: "BP_JVM_VERSION", Value: "21"},
		{Name: "CGO_ENABLED", Value: "0", Suffix: EnvOverride},
		{Name: "BP_LOG_LEVEL", Value: "DEBUG", Suffix: EnvDefault},
		{Name: "JAVA_TOOL_OPTIONS", Value: "-Xss1m", Suffix: EnvAppend, Delim: " "},
		{Name: "PATH", Value: "/opt/late/bin", Suffix: EnvAppend, Delim: ":"},
		{Name: "NO_PROXY", Value: ""},
	}
	headers, files := readLayer(t, configLayer(t, spec))
	const env = "cnb/build-config/env/"
	wantHeaders := []layerHeader{
		{"cnb/", 0o755, 0, 0, true},
		{"cnb/build-config/", 0o755, 0, 0, true},
		{env, 0o755, 0, 0, true},
		{env + "BP_JVM_VERSION", 0o644, 0, 0, false},
		{env + "BP_LOG_LEVEL.default", 0o644, 0, 0, false},
		{env + "CGO_ENABLED.override", 0o644, 0, 0, false},
		{env + "JAVA_TOOL_OPTIONS.append", 0o644, 0, 0, false},
		{env + "JAVA_TOOL_OPTIONS.delim", 0o644, 0, 0, false},
		{env + "NO_PROXY", 0o644, 0, 0, false},
		{env + "PATH.append", 0o644, 0, 0, false},
		{env + "PATH.delim", 0o644, 0, 0, false},
		{env + "PATH.prepend", 0o644, 0, 0, false},
		{"cnb/order.toml", 0o644, 0, 0, false},
		{"cnb/run.toml", 0o644, 0, 0, false},
		{"cnb/stack.toml", 0o644, 0, 0, false},
	}
	if diff := cmp.Diff(wantHeaders, headers); diff != "" {
		t.Errorf("files layer (-want +got):\n%s", diff)
	}
	wantEnv := map[string]string{
		env + "BP_JVM_VERSION":           "21",
		env + "BP_LOG_LEVEL.default":     "DEBUG",
		env + "CGO_ENABLED.override":     "0",
		env + "JAVA_TOOL_OPTIONS.append": "-Xss1m",
		env + "JAVA_TOOL_OPTIONS.delim":  " ",
		env + "NO_PROXY":                 "",
		env + "PATH.append":              "/opt/late/bin",
		env + "PATH.delim":               ":",
		env + "PATH.prepend":             "/opt/tools/bin",
	}
	for name := range files {
		if !strings.HasPrefix(name, env) {
			delete(files, name)
		}
	}
	if diff := cmp.Diff(wantEnv, files); diff != "" {
		t.Errorf("env files (-want +got):\n%s", diff)
	}
}

func TestAssembleBuilderEnvKeepsDigests(t *testing.T) {
	without, err := AssembleBuilder(builderSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	spec := builderSpec(t)
	spec.Env = []EnvVar{}
	empty, err := AssembleBuilder(spec)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := without.Digest()
	b, _ := empty.Digest()
	if a != b {
		t.Errorf("an empty env changed the digest: %s, %s", a, b)
	}

	// Variables given in another order make the same layer.
	digest := func(env ...EnvVar) v1.Hash {
		spec := builderSpec(t)
		spec.Env = env
		d, err := configLayer(t, spec).Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	x, y := EnvVar{Name: "X", Value: "1"}, EnvVar{Name: "Y", Value: "2", Suffix: EnvAppend, Delim: ","}
	if digest(x, y) != digest(y, x) {
		t.Error("env order changed the layer")
	}
}

func TestAssembleBuilderRefusesInvalidEnv(t *testing.T) {
	spec := builderSpec(t)
	spec.Env = []EnvVar{{Name: "CNB_USER_ID", Value: "0"}}
	_, err := AssembleBuilder(spec)
	if e, ok := failure.As(err); !ok || e.Reason != ReasonInvalidEnv {
		t.Errorf("err = %v, want %s", err, ReasonInvalidEnv)
	}
}
