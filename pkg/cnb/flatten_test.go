package cnb

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/failure"
)

func TestPlanFlatten(t *testing.T) {
	bp := func(id, diffID string, children ...string) v1alpha1.StoreBuildpack {
		m := v1alpha1.StoreBuildpack{ID: id, Version: "1.0.0", DiffID: diffID}
		if len(children) > 0 {
			var group []v1alpha1.BuildpackRef
			for _, c := range children {
				group = append(group, v1alpha1.BuildpackRef{ID: c, Version: "1.0.0"})
			}
			m.Order = []v1alpha1.OrderEntry{{Group: group}}
		}
		return m
	}
	// Sorted as the builder has them; java's layer holds jdk too (a
	// flattened buildpackage), and java's order names jdk and maven.
	modules := []v1alpha1.StoreBuildpack{
		bp("go", "d-go"), bp("java", "d-java", "jdk", "maven"), bp("jdk", "d-java"), bp("maven", "d-maven"),
		bp("node", "d-node"), bp("procfile", "d-procfile"),
	}
	for _, tc := range []struct {
		name    string
		flatten v1alpha1.Flatten
		want    [][]int // by module index, the last group being all
	}{{
		name: "nothing",
		want: [][]int{nil},
	}, {
		name:    "all",
		flatten: v1alpha1.Flatten{All: true},
		want:    [][]int{{0, 1, 3, 4, 5}}, // jdk's layer is java's
	}, {
		name:    "a meta-buildpack brings its order; all takes the rest but the exceptions",
		flatten: v1alpha1.Flatten{Groups: []v1alpha1.FlattenGroup{{Buildpacks: []string{"java"}}}, All: true, Except: []string{"procfile@1.0.0"}},
		want:    [][]int{{1, 3}, {0, 4}},
	}, {
		name:    "a layer goes with the first group naming one of its buildpacks",
		flatten: v1alpha1.Flatten{Groups: []v1alpha1.FlattenGroup{{Buildpacks: []string{"go", "jdk"}}, {Buildpacks: []string{"java", "node"}}}},
		want:    [][]int{{0, 1}, {3, 4}, nil},
	}, {
		name:    "an excepted buildpack's layer stays out of all, with the buildpacks sharing it",
		flatten: v1alpha1.Flatten{All: true, Except: []string{"jdk"}},
		want:    [][]int{{0, 3, 4, 5}},
	}, {
		name:    "names this platform lacks are skipped (CheckFlatten checked them against every platform)",
		flatten: v1alpha1.Flatten{Groups: []v1alpha1.FlattenGroup{{Buildpacks: []string{"go", "ruby"}}, {Buildpacks: []string{"node", "procfile"}}}, All: true, Except: []string{"python"}},
		want:    [][]int{{0}, {4, 5}, {1, 3}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := planFlatten(modules, &tc.flatten)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("groups (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckFlatten(t *testing.T) {
	modules := []v1alpha1.StoreBuildpack{{ID: "go", Version: "1.0.0"}, {ID: "node", Version: "2.0.0"}}
	if err := CheckFlatten(modules, &v1alpha1.Flatten{Groups: []v1alpha1.FlattenGroup{{Buildpacks: []string{"go", "node@2.0.0"}}}}); err != nil {
		t.Errorf("names the builder has: %v", err)
	}
	err := CheckFlatten(modules, &v1alpha1.Flatten{Groups: []v1alpha1.FlattenGroup{{Buildpacks: []string{"go@2.0.0", "ruby"}}}, All: true, Except: []string{"python"}})
	want := "spec.flatten names go@2.0.0, ruby, python, which the builder does not have (it has go@1.0.0, node@2.0.0)"
	if f, ok := failure.As(err); !ok || f.Class != failure.Permanent || f.Reason != ReasonFlattenNotInBuilder || err.Error() != want {
		t.Errorf("error = %v, want Permanent %s: %s", err, ReasonFlattenNotInBuilder, want)
	}
}

// buildpackLayers are three buildpacks in three layers, each with the
// directories above it, as buildpackages have them.
func buildpackLayers(t *testing.T) []BuildpackLayer {
	t.Helper()
	var out []BuildpackLayer
	for _, id := range []string{"example/go", "example/node", "example/procfile"} {
		dir := "cnb/buildpacks/" + strings.ReplaceAll(id, "/", "_")
		l, err := tarLayer([]tarEntry{
			{path: "cnb", mode: 0o755}, {path: "cnb/buildpacks", mode: 0o755}, {path: dir, mode: 0o755}, {path: dir + "/1.0.0", mode: 0o755},
			{path: dir + "/1.0.0/buildpack.toml", mode: 0o644, content: []byte("api = \"0.10\"\n# " + id)},
			{path: dir + "/1.0.0/bin/detect", mode: 0o755, content: []byte("#!/bin/sh\nexit 0\n")},
		}, types.OCILayer)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, BuildpackLayer{Buildpack: v1alpha1.StoreBuildpack{ID: id, Version: "1.0.0", DiffID: diffID(t, l)}, Layer: l})
	}
	return out
}

func readUncompressed(bp BuildpackLayer, read func(io.Reader) error) error {
	rc, err := bp.Layer.Uncompressed()
	if err != nil {
		return err
	}
	defer rc.Close()
	return read(rc)
}

func TestFlatten(t *testing.T) {
	bps := buildpackLayers(t)
	opts := FlattenOptions{Dir: t.TempDir(), Budget: NewFlattenBudget(1 << 20), MediaType: types.OCILayer, Read: readUncompressed}
	got, err := Flatten(bps, &v1alpha1.Flatten{Groups: []v1alpha1.FlattenGroup{{Buildpacks: []string{"example/procfile", "example/go"}}}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	goLayer, node, procfile := got[0], got[1], got[2]
	if !cmp.Equal(node.Buildpack, bps[1].Buildpack) || node.Layer != bps[1].Layer {
		t.Errorf("node, in no group, changed: %+v", node.Buildpack)
	}
	if goLayer.Buildpack.DiffID != procfile.Buildpack.DiffID || goLayer.Buildpack.DiffID == bps[0].Buildpack.DiffID {
		t.Fatalf("go and procfile do not share a new layer: %s, %s", goLayer.Buildpack.DiffID, procfile.Buildpack.DiffID)
	}
	if goLayer.Buildpack.ID != "example/go" || procfile.Buildpack.ID != "example/procfile" {
		t.Errorf("buildpacks renamed: %s, %s", goLayer.Buildpack.ID, procfile.Buildpack.ID)
	}
	digest, err := goLayer.Layer.Digest()
	if err != nil {
		t.Fatal(err)
	}
	size, _ := goLayer.Layer.Size()
	if goLayer.Buildpack.Digest != digest.String() || goLayer.Buildpack.Size != size {
		t.Errorf("buildpack says digest %s size %d, the layer %s %d", goLayer.Buildpack.Digest, goLayer.Buildpack.Size, digest, size)
	}
	if mt, _ := goLayer.Layer.MediaType(); mt != types.OCILayer {
		t.Errorf("media type %s", mt)
	}
	// Each buildpack's files, in the builder's order (go before procfile),
	// and each directory once.
	want := []string{
		"cnb/", "cnb/buildpacks/", "cnb/buildpacks/example_go/", "cnb/buildpacks/example_go/1.0.0/",
		"cnb/buildpacks/example_go/1.0.0/bin/detect", "cnb/buildpacks/example_go/1.0.0/buildpack.toml",
		"cnb/buildpacks/example_procfile/", "cnb/buildpacks/example_procfile/1.0.0/",
		"cnb/buildpacks/example_procfile/1.0.0/bin/detect", "cnb/buildpacks/example_procfile/1.0.0/buildpack.toml",
	}
	if diff := cmp.Diff(want, entryNames(t, goLayer)); diff != "" {
		t.Errorf("flattened layer (-want +got):\n%s", diff)
	}

	// The same layers, in another order and flattened somewhere else,
	// give the same layer: another controller makes the same builder.
	again, err := Flatten([]BuildpackLayer{bps[2], bps[1], bps[0]}, &v1alpha1.Flatten{All: true, Except: []string{"example/node"}},
		FlattenOptions{Dir: t.TempDir(), Budget: NewFlattenBudget(1 << 20), MediaType: types.OCILayer, Read: readUncompressed})
	if err != nil {
		t.Fatal(err)
	}
	if again[0].Buildpack.Digest != goLayer.Buildpack.Digest {
		t.Errorf("flattened again: digest %s, first %s", again[0].Buildpack.Digest, goLayer.Buildpack.Digest)
	}

	// Another platform of the same buildpack layers takes the layer made
	// for the first, reading nothing.
	made := map[string]BuildpackLayer{}
	reads := 0
	counting := FlattenOptions{Dir: t.TempDir(), Budget: NewFlattenBudget(1 << 20), MediaType: types.OCILayer, Made: made,
		Read: func(bp BuildpackLayer, read func(io.Reader) error) error { reads++; return readUncompressed(bp, read) }}
	first, err := Flatten(bps, &v1alpha1.Flatten{All: true}, counting)
	if err != nil {
		t.Fatal(err)
	}
	readsBefore := reads
	second, err := Flatten(bps, &v1alpha1.Flatten{All: true}, counting)
	if err != nil {
		t.Fatal(err)
	}
	if readsBefore != 3 || reads != 3 || second[0].Buildpack.Digest != first[0].Buildpack.Digest {
		t.Errorf("flattened twice with one Made: %d reads, then %d; digests %s, %s; want 3 reads, then none, one digest",
			readsBefore, reads-readsBefore, first[0].Buildpack.Digest, second[0].Buildpack.Digest)
	}

	// A remembered layer is made only when read, and comes out as it was.
	memory := mapMemory{}
	remembering := counting
	remembering.Made, remembering.Remembered = nil, memory
	if _, err := Flatten(bps, &v1alpha1.Flatten{All: true}, remembering); err != nil {
		t.Fatal(err)
	}
	readsBefore = reads
	lazy, err := Flatten(bps, &v1alpha1.Flatten{All: true}, remembering)
	if err != nil {
		t.Fatal(err)
	}
	if reads != readsBefore || lazy[0].Buildpack.Digest != first[0].Buildpack.Digest {
		t.Errorf("a remembered layer: %d reads before its content is asked for, digest %s; want none, %s", reads-readsBefore, lazy[0].Buildpack.Digest, first[0].Buildpack.Digest)
	}
	if got := entryNames(t, lazy[0]); len(got) != len(entryNames(t, first[0])) || reads != readsBefore+3 {
		t.Errorf("the remembered layer read: %d entries after %d reads", len(got), reads-readsBefore)
	}

	// A builder of them has one layer fewer, and the layers label names
	// the flattened layer for both.
	spec := builderSpec(t)
	before, err := AssembleBuilder(spec)
	if err != nil {
		t.Fatal(err)
	}
	spec.Buildpacks, err = Flatten(spec.Buildpacks, &v1alpha1.Flatten{All: true}, opts)
	if err != nil {
		t.Fatal(err)
	}
	after, err := AssembleBuilder(spec)
	if err != nil {
		t.Fatal(err)
	}
	beforeLayers, _ := before.Layers()
	afterLayers, _ := after.Layers()
	if len(afterLayers) != len(beforeLayers)-1 {
		t.Errorf("flattened builder has %d layers, the other %d", len(afterLayers), len(beforeLayers))
	}
	cf, err := after.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	flat := spec.Buildpacks[0].Buildpack.DiffID
	if label := cf.Config.Labels[LabelBuildpackLayers]; strings.Count(label, flat) != 3 {
		t.Errorf("layers label names the flattened layer %d times, want 3 (every buildpack):\n%s", strings.Count(label, flat), label)
	}
}

func entryNames(t *testing.T, bp BuildpackLayer) []string {
	t.Helper()
	var names []string
	if err := readUncompressed(bp, func(r io.Reader) error {
		tr := tar.NewReader(r)
		for {
			hdr, err := tr.Next()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			names = append(names, hdr.Name)
		}
	}); err != nil {
		t.Fatal(err)
	}
	return names
}

func TestFlattenFailures(t *testing.T) {
	all := &v1alpha1.Flatten{All: true}
	registryFails := &failure.Error{Class: failure.Transient, Reason: "RegistryUnavailable", Err: errors.New("connection reset")}
	for name, tc := range map[string]struct {
		opts       FlattenOptions
		wantClass  failure.Class
		wantReason string
		wantIs     error
	}{
		"too large": {
			opts:      FlattenOptions{Budget: NewFlattenBudget(4096)},
			wantClass: failure.Permanent, wantReason: ReasonFlattenTooLarge,
		},
		"scratch directory missing": {
			opts:      FlattenOptions{Dir: "/nonexistent/buildsmith"},
			wantClass: failure.Transient, wantReason: ReasonScratchUnavailable,
		},
		"the registry fails to give a layer: its error, as classified": {
			opts: FlattenOptions{Read: func(bp BuildpackLayer, read func(io.Reader) error) error {
				if bp.Buildpack.ID == "example/node" {
					return registryFails
				}
				return readUncompressed(bp, read)
			}},
			wantIs: registryFails,
		},
		"a layer that is not a tar archive": {
			opts: FlattenOptions{Read: func(bp BuildpackLayer, read func(io.Reader) error) error {
				return read(strings.NewReader(strings.Repeat("not a tar ", 100)))
			}},
			wantClass: failure.Permanent, wantReason: ReasonInvalidBuildpackLayer,
		},
		"long names count against the budget": {
			opts: FlattenOptions{Budget: NewFlattenBudget(64 << 10), Read: func(bp BuildpackLayer, read func(io.Reader) error) error {
				return read(bytes.NewReader(longNamesTar(t, 40, 2048)))
			}},
			wantClass: failure.Permanent, wantReason: ReasonFlattenTooLarge,
		},
		"a name longer than a path can be": {
			opts: FlattenOptions{Read: func(bp BuildpackLayer, read func(io.Reader) error) error {
				return read(bytes.NewReader(longNamesTar(t, 1, 5000)))
			}},
			wantClass: failure.Permanent, wantReason: ReasonInvalidBuildpackLayer,
		},
	} {
		t.Run(name, func(t *testing.T) {
			opts := tc.opts
			if opts.Dir == "" {
				opts.Dir = t.TempDir()
			}
			if opts.Budget == nil {
				opts.Budget = NewFlattenBudget(1 << 20)
			}
			if opts.Read == nil {
				opts.Read = readUncompressed
			}
			_, err := Flatten(buildpackLayers(t), all, opts)
			if tc.wantIs != nil {
				if !errors.Is(err, tc.wantIs) {
					t.Fatalf("error = %v, want %v", err, tc.wantIs)
				}
			} else if f, ok := failure.As(err); !ok || f.Class != tc.wantClass || f.Reason != tc.wantReason {
				t.Fatalf("error = %v (%+v), want %s %s", err, f, tc.wantClass, tc.wantReason)
			}
			if opts.Dir != "/nonexistent/buildsmith" {
				// What was written stays for the caller to remove with
				// the directory; nothing is written elsewhere.
				if files, _ := filepath.Glob(filepath.Join(opts.Dir, "*")); len(files) > 1 {
					t.Errorf("scratch files: %v", files)
				}
			}
		})
	}
	if _, err := os.Stat("/nonexistent/buildsmith"); err == nil {
		t.Error("a scratch directory was made")
	}
}

// longNamesTar is a tar of n empty files whose names are length bytes long
// (PAX headers hold them), 40 such names weighing some 80 KiB in headers
// and nothing in content.
func longNamesTar(t *testing.T, n, length int) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for i := range n {
		name := fmt.Sprintf("cnb/buildpacks/%d/", i) + strings.Repeat("x", length)
		if err := tw.WriteHeader(&tar.Header{Name: name[:length], Typeflag: tar.TypeReg, Mode: 0o644, Format: tar.FormatPAX}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// mapMemory is a FlattenMemory without bounds, for tests.
type mapMemory map[string]FlattenedLayer

func (m mapMemory) Get(key string) (FlattenedLayer, bool) { l, ok := m[key]; return l, ok }
func (m mapMemory) Add(key string, l FlattenedLayer)      { m[key] = l }
func (m mapMemory) Forget(key string)                     { delete(m, key) }

// TestFlattenChecksDiffIDs: a buildpack layer whose content is not the
// DiffID its buildpackage declares cannot be flattened
// (InvalidBuildpackLayer), and nothing is remembered of it: a tenant
// declaring another builder's DiffIDs over bytes of its own poisons no
// memory. Reading a remembered layer made of such bytes fails, and leaves
// the memory as it was for the builders whose bytes are right; a
// remembered layer that comes out as another digest is forgotten.
func TestFlattenChecksDiffIDs(t *testing.T) {
	all := &v1alpha1.Flatten{All: true}
	bps := buildpackLayers(t)
	// The tenant's: bps's DiffIDs, over the bytes of other layers.
	other := buildpackLayers(t)
	for i := range other {
		other[i].Layer = randomTarLayer(t)
	}
	memory := mapMemory{}
	opts := func() FlattenOptions {
		return FlattenOptions{Dir: t.TempDir(), Budget: NewFlattenBudget(1 << 20), MediaType: types.OCILayer, Read: readUncompressed, Remembered: memory}
	}
	isInvalid := func(err error) bool {
		f, ok := failure.As(err)
		return ok && f.Reason == ReasonInvalidBuildpackLayer && strings.Contains(err.Error(), "not the DiffID")
	}

	if _, err := Flatten(other, all, opts()); !isInvalid(err) {
		t.Fatalf("declared DiffIDs over other bytes: %v, want %s naming the DiffID", err, ReasonInvalidBuildpackLayer)
	}
	if len(memory) != 0 {
		t.Fatalf("remembered %d layers of content that is not what it declares", len(memory))
	}

	good, err := Flatten(bps, all, opts())
	if err != nil {
		t.Fatal(err)
	}
	lazy, err := Flatten(other, all, opts()) // remembered: made when read
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lazy[0].Layer.Compressed(); !isInvalid(err) {
		t.Errorf("reading the tenant's remembered layer: %v, want %s", err, ReasonInvalidBuildpackLayer)
	}
	again, err := Flatten(bps, all, opts())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := again[0].Layer.Compressed(); err != nil || again[0].Buildpack.Digest != good[0].Buildpack.Digest {
		t.Errorf("the right bytes after the tenant's: %v, digest %s, want %s", err, again[0].Buildpack.Digest, good[0].Buildpack.Digest)
	}

	for key, l := range memory {
		l.Digest = "sha256:" + strings.Repeat("0", 64)
		memory[key] = l
	}
	wrong, err := Flatten(bps, all, opts())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wrong[0].Layer.Compressed(); err == nil || len(memory) != 0 {
		t.Errorf("a remembered layer coming out as another digest: %v, %d remembered, want an error and it forgotten", err, len(memory))
	}
}

// randomTarLayer is a layer of one file of random content.
func randomTarLayer(t *testing.T) v1.Layer {
	t.Helper()
	l, err := tarLayer([]tarEntry{{path: "cnb/x", mode: 0o644, content: []byte(fmt.Sprint(time.Now().UnixNano()))}}, types.OCILayer)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestFlattenChargesEveryByteRead: a layer of a million copies of one
// directory (about 1000:1 compressed) is charged for every byte read, not
// for the entries kept: against a budget of 1 MiB, it fails FlattenTooLarge
// having read about 1 MiB of it.
func TestFlattenChargesEveryByteRead(t *testing.T) {
	var tarball bytes.Buffer
	tw := tar.NewWriter(&tarball)
	for range 20_000 { // 10 MiB of headers
		if err := tw.WriteHeader(&tar.Header{Name: "cnb/buildpacks/", Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
			t.Fatal(err)
		}
	}
	_ = tw.Close()
	var read int64
	opts := FlattenOptions{Dir: t.TempDir(), Budget: NewFlattenBudget(1 << 20), MediaType: types.OCILayer,
		Read: func(bp BuildpackLayer, copyLayer func(io.Reader) error) error {
			r := &countingReader{r: bytes.NewReader(tarball.Bytes())}
			defer func() { read += r.n }()
			return copyLayer(r)
		}}
	_, err := Flatten(buildpackLayers(t), &v1alpha1.Flatten{All: true}, opts)
	if f, ok := failure.As(err); !ok || f.Reason != ReasonFlattenTooLarge {
		t.Fatalf("error = %v, want %s", err, ReasonFlattenTooLarge)
	}
	if read > 1<<20+64<<10 {
		t.Errorf("read %d bytes against a budget of 1 MiB", read)
	}
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// ustarBlock is a tar header block of name, typeflag and size, checksummed.
func ustarBlock(name string, typeflag byte, size int) []byte {
	b := make([]byte, 512)
	copy(b, name)
	copy(b[100:], "0000644\x00")
	copy(b[108:], "0000000\x00")
	copy(b[116:], "0000000\x00")
	copy(b[124:], fmt.Sprintf("%011o\x00", size))
	copy(b[136:], "00000000000\x00")
	b[156] = typeflag
	copy(b[257:], "ustar\x0000")
	copy(b[148:], "        ")
	sum := 0
	for _, c := range b {
		sum += int(c)
	}
	copy(b[148:], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

// sparseTar is a tar of one PAX 1.0 sparse file of a terabyte, all hole:
// a few blocks that a tar reader turns into a terabyte of zeros.
func sparseTar() []byte {
	record := func(k, v string) string {
		line := " " + k + "=" + v + "\n"
		n := len(line)
		for len(fmt.Sprint(n+len(fmt.Sprint(n)))) != len(fmt.Sprint(n)) {
			n++
		}
		n += len(fmt.Sprint(n + len(fmt.Sprint(n))))
		return fmt.Sprint(n) + line
	}
	pax := record("GNU.sparse.major", "1") + record("GNU.sparse.minor", "0") +
		record("GNU.sparse.name", "cnb/hole") + record("GNU.sparse.realsize", "1099511627776")
	pad := func(b []byte) []byte { return append(b, make([]byte, (512-len(b)%512)%512)...) }
	var out []byte
	out = append(out, ustarBlock("PaxHeaders/hole", 'x', len(pax))...)
	out = append(out, pad([]byte(pax))...)
	out = append(out, ustarBlock("hole", '0', 512)...)
	out = append(out, pad([]byte("0\n"))...) // the sparse map: no data
	return append(out, make([]byte, 1024)...)
}

// TestFlattenRefusesSparseFiles: a sparse entry, whose holes a tar reader
// makes without reading a byte, is refused (InvalidBuildpackLayer) having
// read a few blocks, not written a terabyte.
func TestFlattenRefusesSparseFiles(t *testing.T) {
	tr := tar.NewReader(bytes.NewReader(sparseTar()))
	hdr, err := tr.Next()
	if err != nil || hdr.Size != 1<<40 {
		t.Fatalf("the sparse tar reads as %+v, %v; want an entry of 1 TiB", hdr, err)
	}
	opts := FlattenOptions{Dir: t.TempDir(), Budget: NewFlattenBudget(1 << 20), MediaType: types.OCILayer,
		Read: func(bp BuildpackLayer, copyLayer func(io.Reader) error) error {
			return copyLayer(bytes.NewReader(sparseTar()))
		}}
	_, err = Flatten(buildpackLayers(t), &v1alpha1.Flatten{All: true}, opts)
	if f, ok := failure.As(err); !ok || f.Reason != ReasonInvalidBuildpackLayer || !strings.Contains(err.Error(), "sparse") {
		t.Fatalf("error = %v, want %s saying it is sparse", err, ReasonInvalidBuildpackLayer)
	}
}
