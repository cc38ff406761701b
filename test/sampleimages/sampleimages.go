// Package sampleimages makes the images a CNB platform needs, from real
// files: a lifecycle image holding a lifecycle binary, buildpackages with
// buildpack.toml and bin/detect and bin/build scripts, and stack images. The
// demo seeds its registry with them and the e2e tests build on them.
//
// Lifecycle, Buildpackage, StackImage and Image make linux/amd64 images.
// ImageFor and BuildpackageFor make an image of a given platform, and
// LifecycleIndex, StackIndex and BuildpackageIndex make OCI image indexes of
// one such image per platform, as multi-platform images are published.
// BuildpackageOfLayers labels layers made elsewhere (random ones, in
// registrytest) as a buildpackage. The same inputs always make the same
// digests.
package sampleimages

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// LifecycleAPIs are the APIs of lifecycle v0.21.0 (its api/apis.go), as the
// io.buildpacks.lifecycle.apis label lists them.
const LifecycleAPIs = `{"buildpack":{"deprecated":[],"supported":["0.7","0.8","0.9","0.10","0.11","0.12"]},` +
	`"platform":{"deprecated":[],"supported":["0.7","0.8","0.9","0.10","0.11","0.12","0.13","0.14","0.15"]}}`

// File is an entry of a layer.
type File struct {
	Path    string // without a leading slash; a trailing slash makes a directory
	Mode    int64
	Content []byte
	Link    string // the target, for a symlink
}

// Layer makes a layer of files with fixed times and root ownership.
func Layer(files ...File) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.Path, Mode: f.Mode, ModTime: time.Unix(315532801, 0)}
		switch {
		case f.Link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.Link
		case strings.HasSuffix(f.Path, "/"):
			h.Typeflag = tar.TypeDir
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Content))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Content); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// amd64 is the platform of Image, Lifecycle, Buildpackage and StackImage.
var amd64 = v1.Platform{OS: "linux", Architecture: "amd64"}

// Image makes a linux/amd64 OCI image of layers, labels and environment.
func Image(layers []v1.Layer, labels map[string]string, env ...string) (v1.Image, error) {
	return ImageFor(amd64, layers, labels, env...)
}

// ImageFor makes an OCI image of layers, labels and environment whose config
// carries platform (os, architecture, variant, os.version, os.features).
func ImageFor(platform v1.Platform, layers []v1.Layer, labels map[string]string, env ...string) (v1.Image, error) {
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layers...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf.OS, cf.Architecture, cf.Variant = platform.OS, platform.Architecture, platform.Variant
	cf.OSVersion, cf.OSFeatures = platform.OSVersion, platform.OSFeatures
	cf.Config.Labels, cf.Config.Env = labels, env
	return mutate.ConfigFile(img, cf)
}

// Lifecycle makes an image like buildpacksio/lifecycle from a lifecycle
// binary: /cnb/lifecycle/lifecycle, its phase names as symlinks,
// /cnb/lifecycle.toml, and the labels the lifecycle's image build sets.
func Lifecycle(binaryPath, version string) (v1.Image, error) {
	return lifecycleFor(amd64, binaryPath, version)
}

// LifecycleIndex makes an OCI image index of lifecycle images, one per entry
// of binaries, which maps a platform ("linux/arm64", "linux/arm/v7") to the
// path of the lifecycle binary built for it. Each image is laid out as
// Lifecycle lays it out, with the platform in its config and in its
// descriptor; the manifests are in the order of the platforms' names.
func LifecycleIndex(binaries map[string]string, version string) (v1.ImageIndex, error) {
	names := make([]string, 0, len(binaries))
	for name := range binaries {
		names = append(names, name)
	}
	sort.Strings(names)
	platforms := make([]v1.Platform, 0, len(names))
	for _, name := range names {
		p, err := v1.ParsePlatform(name)
		if err != nil {
			return nil, fmt.Errorf("platform %q: %w", name, err)
		}
		platforms = append(platforms, *p)
	}
	return indexOf(platforms, func(i int, p v1.Platform) (v1.Image, error) {
		return lifecycleFor(p, binaries[names[i]], version)
	})
}

func lifecycleFor(platform v1.Platform, binaryPath, version string) (v1.Image, error) {
	binary, err := os.ReadFile(binaryPath)
	if err != nil {
		return nil, err
	}
	files := []File{
		{Path: "cnb/", Mode: 0o755}, {Path: "cnb/lifecycle/", Mode: 0o755},
		{Path: "cnb/lifecycle/lifecycle", Mode: 0o755, Content: binary},
		{Path: "cnb/lifecycle.toml", Mode: 0o644, Content: []byte(fmt.Sprintf("[lifecycle]\n  version = %q\n", version))},
	}
	for _, phase := range []string{"analyzer", "builder", "creator", "detector", "exporter", "extender", "rebaser", "restorer"} {
		files = append(files, File{Path: "cnb/lifecycle/" + phase, Mode: 0o777, Link: "lifecycle"})
	}
	layer, err := Layer(files...)
	if err != nil {
		return nil, err
	}
	return ImageFor(platform, []v1.Layer{layer}, map[string]string{
		"io.buildpacks.lifecycle.version": version,
		"io.buildpacks.lifecycle.apis":    LifecycleAPIs,
	})
}

// Buildpack is a buildpack of buildpack API 0.10 for linux.
type Buildpack struct {
	ID, Version string
	// Detect and Build are the bodies of bin/detect and bin/build (sh).
	Detect, Build string
	// Licenses are the types of its [[buildpack.licenses]]. A package of
	// one buildpack with licenses carries them in its
	// io.buildpacks.buildpackage.metadata label too, as pack copies them;
	// without, the label is left out, so that the images made before
	// licenses were stay byte for byte the same.
	Licenses []string
}

// Buildpackage makes a linux/amd64 buildpackage holding the buildpacks, one
// layer each, with the io.buildpacks.buildpack.layers label. Its buildpacks'
// targets name only the os (linux), so they run on any architecture.
func Buildpackage(buildpacks ...Buildpack) (v1.Image, error) {
	return buildpackage(amd64, false, buildpacks)
}

// BuildpackageFor makes a buildpackage for platform: Buildpackage's layout,
// but the image is of platform, and each buildpack.toml and the
// io.buildpacks.buildpack.layers label give the one target os, arch (and
// arch-variant) of platform, so the layers of one platform differ from
// another's, as in real multi-platform buildpackages.
func BuildpackageFor(platform v1.Platform, buildpacks ...Buildpack) (v1.Image, error) {
	return buildpackage(platform, true, buildpacks)
}

// BuildpackageIndex makes an OCI image index of BuildpackageFor(p,
// buildpacks...) for each of platforms, in that order.
func BuildpackageIndex(platforms []v1.Platform, buildpacks ...Buildpack) (v1.ImageIndex, error) {
	return indexOf(platforms, func(_ int, p v1.Platform) (v1.Image, error) { return BuildpackageFor(p, buildpacks...) })
}

// buildpackage makes a buildpackage image of platform; withArch puts the
// platform's arch in the buildpacks' targets, which otherwise give the os
// linux alone.
func buildpackage(platform v1.Platform, withArch bool, buildpacks []Buildpack) (v1.Image, error) {
	target, targetTOML := map[string]string{"os": "linux"}, "[[targets]]\n  os = \"linux\"\n"
	if withArch {
		target = map[string]string{"os": platform.OS, "arch": platform.Architecture}
		targetTOML = fmt.Sprintf("[[targets]]\n  os = %q\n  arch = %q\n", platform.OS, platform.Architecture)
		if platform.Variant != "" {
			target["arch-variant"] = platform.Variant
			targetTOML += fmt.Sprintf("  arch-variant = %q\n", platform.Variant)
		}
	}
	layers := make([]BuildpackLayer, 0, len(buildpacks))
	for _, bp := range buildpacks {
		dir := "cnb/buildpacks/" + strings.ReplaceAll(bp.ID, "/", "_") + "/"
		descriptor := fmt.Sprintf("api = \"0.10\"\n\n[buildpack]\n  id = %q\n  version = %q\n\n", bp.ID, bp.Version)
		for _, l := range bp.Licenses {
			descriptor += fmt.Sprintf("[[buildpack.licenses]]\n  type = %q\n\n", l)
		}
		descriptor += targetTOML
		layer, err := Layer(
			File{Path: "cnb/", Mode: 0o755}, File{Path: "cnb/buildpacks/", Mode: 0o755},
			File{Path: dir, Mode: 0o755}, File{Path: dir + bp.Version + "/", Mode: 0o755},
			File{Path: dir + bp.Version + "/buildpack.toml", Mode: 0o644, Content: []byte(descriptor)},
			File{Path: dir + bp.Version + "/bin/", Mode: 0o755},
			File{Path: dir + bp.Version + "/bin/detect", Mode: 0o755, Content: []byte("#!/bin/sh\n" + bp.Detect)},
			File{Path: dir + bp.Version + "/bin/build", Mode: 0o755, Content: []byte("#!/bin/sh\nset -e\n" + bp.Build)},
		)
		if err != nil {
			return nil, err
		}
		layers = append(layers, BuildpackLayer{ID: bp.ID, Version: bp.Version, Layer: layer,
			Metadata: map[string]any{"api": "0.10", "targets": []map[string]string{target}}})
	}
	img, err := BuildpackageOfLayers(platform, layers...)
	if err != nil || len(buildpacks) != 1 || len(buildpacks[0].Licenses) == 0 {
		return img, err
	}
	return withPackageMetadata(img, buildpacks[0])
}

// withPackageMetadata is img with the io.buildpacks.buildpackage.metadata
// label pack writes for a package of bp: its id, version and licenses.
func withPackageMetadata(img v1.Image, bp Buildpack) (v1.Image, error) {
	licenses := make([]map[string]string, len(bp.Licenses))
	for i, l := range bp.Licenses {
		licenses[i] = map[string]string{"type": l}
	}
	raw, err := json.Marshal(map[string]any{"id": bp.ID, "version": bp.Version, "licenses": licenses})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	config := cf.Config.DeepCopy()
	config.Labels["io.buildpacks.buildpackage.metadata"] = string(raw)
	return mutate.Config(img, *config)
}

// Extension is an image extension of buildpack API 0.10 for linux.
type Extension struct {
	ID, Version string
	// Detect and Generate are the bodies of bin/detect and bin/generate
	// (sh); bin/generate writes Dockerfiles into $CNB_OUTPUT_DIR.
	Detect, Generate string
}

// ExtensionPackage makes a linux/amd64 extension package, as pack
// extension package makes one: each extension in a layer of its own under
// /cnb/extensions/<id>/<version>/, listed by the
// io.buildpacks.extension.layers label.
func ExtensionPackage(extensions ...Extension) (v1.Image, error) {
	layers := make([]v1.Layer, 0, len(extensions))
	label := map[string]map[string]map[string]any{}
	for _, ext := range extensions {
		dir := "cnb/extensions/" + strings.ReplaceAll(ext.ID, "/", "_") + "/"
		descriptor := fmt.Sprintf("api = \"0.10\"\n\n[extension]\n  id = %q\n  version = %q\n\n[[targets]]\n  os = \"linux\"\n", ext.ID, ext.Version)
		layer, err := Layer(
			File{Path: "cnb/", Mode: 0o755}, File{Path: "cnb/extensions/", Mode: 0o755},
			File{Path: dir, Mode: 0o755}, File{Path: dir + ext.Version + "/", Mode: 0o755},
			File{Path: dir + ext.Version + "/extension.toml", Mode: 0o644, Content: []byte(descriptor)},
			File{Path: dir + ext.Version + "/bin/", Mode: 0o755},
			File{Path: dir + ext.Version + "/bin/detect", Mode: 0o755, Content: []byte("#!/bin/sh\n" + ext.Detect)},
			File{Path: dir + ext.Version + "/bin/generate", Mode: 0o755, Content: []byte("#!/bin/sh\nset -e\n" + ext.Generate)},
		)
		if err != nil {
			return nil, err
		}
		diffID, err := layer.DiffID()
		if err != nil {
			return nil, err
		}
		layers = append(layers, layer)
		if label[ext.ID] == nil {
			label[ext.ID] = map[string]map[string]any{}
		}
		label[ext.ID][ext.Version] = map[string]any{"api": "0.10", "layerDiffID": diffID.String(),
			"targets": []map[string]string{{"os": "linux"}}}
	}
	raw, err := json.Marshal(label)
	if err != nil {
		return nil, err
	}
	return ImageFor(amd64, layers, map[string]string{"io.buildpacks.extension.layers": string(raw)})
}

// BuildpackLayer is a buildpack's layer in a buildpackage, and what the
// io.buildpacks.buildpack.layers label says of it besides the layer's diffID
// (api, targets).
type BuildpackLayer struct {
	ID, Version string
	Layer       v1.Layer
	Metadata    map[string]any
}

// BuildpackageOfLayers makes a buildpackage image of platform holding the
// buildpacks' layers, in that order, with the io.buildpacks.buildpack.layers
// label listing them.
func BuildpackageOfLayers(platform v1.Platform, buildpacks ...BuildpackLayer) (v1.Image, error) {
	layers := make([]v1.Layer, 0, len(buildpacks))
	label := map[string]map[string]map[string]any{}
	for _, bp := range buildpacks {
		diffID, err := bp.Layer.DiffID()
		if err != nil {
			return nil, err
		}
		layers = append(layers, bp.Layer)
		entry := map[string]any{"layerDiffID": diffID.String()}
		maps.Copy(entry, bp.Metadata)
		if label[bp.ID] == nil {
			label[bp.ID] = map[string]map[string]any{}
		}
		label[bp.ID][bp.Version] = entry
	}
	raw, err := json.Marshal(label)
	if err != nil {
		return nil, err
	}
	return ImageFor(platform, layers, map[string]string{"io.buildpacks.buildpack.layers": string(raw)})
}

// StackImage makes a linux/amd64 build (uid set) or run image of stack id.
func StackImage(id string, uid int) (v1.Image, error) {
	return stackImageFor(amd64, id, uid, "")
}

// StackIndex makes an OCI image index of StackImage's build (uid set) or run
// image of stack id for each of platforms, in that order.
func StackIndex(id string, uid int, platforms ...v1.Platform) (v1.ImageIndex, error) {
	return PatchedStackIndex(id, uid, "", platforms...)
}

// PatchedStackIndex is StackIndex with a patch applied: the file
// /etc/buildsmith-patch holding patch (none when it is ""), as a fix of the
// base image would change its files and its digest.
func PatchedStackIndex(id string, uid int, patch string, platforms ...v1.Platform) (v1.ImageIndex, error) {
	return indexOf(platforms, func(_ int, p v1.Platform) (v1.Image, error) { return stackImageFor(p, id, uid, patch) })
}

// stackImageFor is a stack image of one layer, which holds its SBOM too
// (/cnb/sbom/bom.cdx.json, named by the io.buildpacks.base.sbom label, as
// Paketo's stacks carry theirs).
func stackImageFor(platform v1.Platform, id string, uid int, patch string) (v1.Image, error) {
	files := []File{{Path: "etc/", Mode: 0o755}, {Path: "etc/buildsmith-stack", Mode: 0o644, Content: []byte(id + "\n")},
		{Path: "cnb/", Mode: 0o755}, {Path: "cnb/sbom/", Mode: 0o755},
		{Path: "cnb/sbom/bom.cdx.json", Mode: 0o644, Content: []byte(`{"bomFormat":"CycloneDX","specVersion":"1.4","version":1,"components":[]}` + "\n")}}
	if patch != "" {
		files = append(files, File{Path: "etc/buildsmith-patch", Mode: 0o644, Content: []byte(patch + "\n")})
	}
	layer, err := Layer(files...)
	if err != nil {
		return nil, err
	}
	diffID, err := layer.DiffID()
	if err != nil {
		return nil, err
	}
	var env []string
	if uid != 0 {
		env = []string{fmt.Sprintf("CNB_USER_ID=%d", uid), fmt.Sprintf("CNB_GROUP_ID=%d", uid)}
	}
	return ImageFor(platform, []v1.Layer{layer}, map[string]string{"io.buildpacks.stack.id": id, "io.buildpacks.base.sbom": diffID.String()}, env...)
}

// indexOf makes an OCI image index of image(i, platforms[i]) for each i, in
// that order, each manifest's descriptor carrying its platform. An index of no
// platforms, or of one platform twice, is an error.
func indexOf(platforms []v1.Platform, image func(int, v1.Platform) (v1.Image, error)) (v1.ImageIndex, error) {
	if len(platforms) == 0 {
		return nil, fmt.Errorf("an image index needs at least one platform")
	}
	seen := map[string]bool{}
	adds := make([]mutate.IndexAddendum, 0, len(platforms))
	for i, p := range platforms {
		if seen[p.String()] {
			return nil, fmt.Errorf("platform %s given twice", p)
		}
		seen[p.String()] = true
		img, err := image(i, p)
		if err != nil {
			return nil, fmt.Errorf("the %s image: %w", p, err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	return mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...), nil
}

// Files returns the regular files of img's flattened filesystem by path
// (without the leading slash), with their contents.
func Files(img v1.Image) (map[string]string, error) {
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		files[strings.TrimPrefix(h.Name, "/")] = string(b)
	}
}
