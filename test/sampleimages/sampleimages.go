// Package sampleimages makes the images a CNB platform needs, from real
// files: a lifecycle image holding a lifecycle binary, buildpackages with
// buildpack.toml and bin/detect and bin/build scripts, and stack images. The
// demo seeds its registry with them and the e2e tests build on them.
//
// Lifecycle, Buildpackage, StackImage and Image make linux/amd64 images;
// ImageFor makes an image of a given platform.
package sampleimages

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
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
	return Image([]v1.Layer{layer}, map[string]string{
		"io.buildpacks.lifecycle.version": version,
		"io.buildpacks.lifecycle.apis":    LifecycleAPIs,
	})
}

// Buildpack is a buildpack of buildpack API 0.10 for linux.
type Buildpack struct {
	ID, Version string
	// Detect and Build are the bodies of bin/detect and bin/build (sh).
	Detect, Build string
}

// Buildpackage makes a buildpackage holding the buildpacks, one layer each,
// with the io.buildpacks.buildpack.layers label.
func Buildpackage(buildpacks ...Buildpack) (v1.Image, error) {
	var layers []v1.Layer
	label := map[string]map[string]any{}
	for _, bp := range buildpacks {
		dir := "cnb/buildpacks/" + strings.ReplaceAll(bp.ID, "/", "_") + "/"
		descriptor := fmt.Sprintf("api = \"0.10\"\n\n[buildpack]\n  id = %q\n  version = %q\n\n[[targets]]\n  os = \"linux\"\n", bp.ID, bp.Version)
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
		diffID, err := layer.DiffID()
		if err != nil {
			return nil, err
		}
		layers = append(layers, layer)
		if label[bp.ID] == nil {
			label[bp.ID] = map[string]any{}
		}
		label[bp.ID][bp.Version] = map[string]any{"api": "0.10", "targets": []map[string]string{{"os": "linux"}},
			"layerDiffID": diffID.String()}
	}
	raw, err := json.Marshal(label)
	if err != nil {
		return nil, err
	}
	return Image(layers, map[string]string{"io.buildpacks.buildpack.layers": string(raw)})
}

// StackImage makes a build (uid set) or run image of stack id.
func StackImage(id string, uid int) (v1.Image, error) {
	layer, err := Layer(File{Path: "etc/", Mode: 0o755}, File{Path: "etc/buildsmith-stack", Mode: 0o644, Content: []byte(id + "\n")})
	if err != nil {
		return nil, err
	}
	var env []string
	if uid != 0 {
		env = []string{fmt.Sprintf("CNB_USER_ID=%d", uid), fmt.Sprintf("CNB_GROUP_ID=%d", uid)}
	}
	return Image([]v1.Layer{layer}, map[string]string{"io.buildpacks.stack.id": id}, env...)
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
