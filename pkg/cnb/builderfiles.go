package cnb

import (
	"archive/tar"
	"bytes"
	"io"
	"sort"
	"time"

	"github.com/BurntSushi/toml"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
)

// epoch is the modification time of every file buildsmith writes, the one
// reproducible builds use (the zip epoch, 1980-01-01T00:00:01Z), so that the
// same inputs give the same layer digests.
var epoch = time.Date(1980, time.January, 1, 0, 0, 1, 0, time.UTC)

// tarEntry is a file or directory of a layer buildsmith writes.
type tarEntry struct {
	path     string // without leading slash
	mode     int64
	uid, gid int
	content  []byte // nil for a directory
}

// directoriesLayer makes the directories the lifecycle expects: /workspace
// and /layers owned by the build user, the rest by root.
func directoriesLayer(uid, gid int, mediaType types.MediaType) (v1.Layer, error) {
	entries := []tarEntry{
		{path: "cnb", mode: 0o755},
		{path: "cnb/build-config", mode: 0o755},
		{path: "cnb/build-config/env", mode: 0o755},
		{path: "cnb/buildpacks", mode: 0o755},
		{path: "cnb/extensions", mode: 0o755},
		{path: "layers", mode: 0o755, uid: uid, gid: gid},
		{path: "platform", mode: 0o755},
		{path: "platform/env", mode: 0o755},
		{path: "workspace", mode: 0o755, uid: uid, gid: gid},
	}
	return tarLayer(entries, mediaType)
}

// configFilesLayer holds /cnb/order.toml, /cnb/run.toml (read by platform
// API 0.12 and later), /cnb/stack.toml (read before 0.12): the builder
// cannot know which platform API the platform will use; and the build-time
// env files, if any.
func configFilesLayer(spec BuilderSpec, mediaType types.MediaType) (v1.Layer, error) {
	order, err := encodeTOML(orderTOML{Order: tomlOrder(spec.Order), OrderExtensions: tomlOrder(spec.OrderExtensions)})
	if err != nil {
		return nil, err
	}
	image := runImageTOML{Image: spec.RunImage, Mirrors: spec.RunImageMirrors}
	images := []runImageTOML{image}
	for _, more := range spec.AdditionalRunImages {
		images = append(images, runImageTOML(more))
	}
	run, err := encodeTOML(runTOML{Images: images})
	if err != nil {
		return nil, err
	}
	stack, err := encodeTOML(stackTOML{RunImage: image})
	if err != nil {
		return nil, err
	}
	env, err := envEntries(spec.Env)
	if err != nil {
		return nil, err
	}
	entries := append([]tarEntry{
		{path: "cnb", mode: 0o755},
		{path: "cnb/order.toml", mode: 0o644, content: order},
		{path: "cnb/run.toml", mode: 0o644, content: run},
		{path: "cnb/stack.toml", mode: 0o644, content: stack},
	}, env...)
	if system := systemOf(spec.System); system != nil {
		raw, err := encodeTOML(systemTOML{System: *system})
		if err != nil {
			return nil, err
		}
		entries = append(entries, tarEntry{path: "cnb/system.toml", mode: 0o644, content: raw})
	}
	return tarLayer(entries, mediaType)
}

// tarLayer writes entries, sorted by path, with fixed times and owners.
func tarLayer(entries []tarEntry, mediaType types.MediaType) (v1.Layer, error) {
	sort.Slice(entries, func(i, j int) bool { return entries[i].path < entries[j].path })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name: e.path, Mode: e.mode, Uid: e.uid, Gid: e.gid, ModTime: epoch,
			AccessTime: epoch, ChangeTime: epoch, Format: tar.FormatPAX,
		}
		if e.content == nil {
			h.Typeflag, h.Name = tar.TypeDir, e.path+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.content))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.content); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(mediaType))
}

// TOML files of the lifecycle.

type orderTOML struct {
	Order           []groupTOML `toml:"order"`
	OrderExtensions []groupTOML `toml:"order-extensions,omitempty"`
}

// groupTOML is an order group of /cnb/order.toml; its JSON is the group
// as pack writes it into the order labels.
type groupTOML struct {
	Group []refTOML `toml:"group" json:"group"`
}

type refTOML struct {
	ID       string   `toml:"id" json:"id"`
	Version  string   `toml:"version" json:"version,omitempty"`
	Optional bool     `toml:"optional,omitempty" json:"optional,omitempty"`
	ExecEnv  []string `toml:"exec-env,omitempty" json:"exec-env,omitempty"`
}

type runTOML struct {
	Images []runImageTOML `toml:"images"`
}

type stackTOML struct {
	RunImage runImageTOML `toml:"run-image"`
}

type runImageTOML struct {
	Image   string   `toml:"image"`
	Mirrors []string `toml:"mirrors,omitempty"`
}

// systemTOML is /cnb/system.toml; its JSON is the label pack writes.
type systemTOML struct {
	System systemLists `toml:"system"`
}

type systemLists struct {
	Pre  systemList `toml:"pre,omitempty" json:"pre,omitzero"`
	Post systemList `toml:"post,omitempty" json:"post,omitzero"`
}

type systemList struct {
	Buildpacks []moduleRef `toml:"buildpacks,omitempty" json:"buildpacks,omitempty"`
}

type moduleRef struct {
	ID      string `toml:"id" json:"id"`
	Version string `toml:"version" json:"version"`
}

// systemOf is what /cnb/system.toml and its label hold; nil when there are
// no system buildpacks (neither is written then).
func systemOf(s *v1alpha1.SystemBuildpacks) *systemLists {
	if s == nil || len(s.Pre)+len(s.Post) == 0 {
		return nil
	}
	list := func(refs []v1alpha1.SystemBuildpackRef) systemList {
		var out systemList
		for _, ref := range refs {
			out.Buildpacks = append(out.Buildpacks, moduleRef(ref))
		}
		return out
	}
	return &systemLists{Pre: list(s.Pre), Post: list(s.Post)}
}

func tomlOrder(order []v1alpha1.OrderEntry) []groupTOML {
	out := make([]groupTOML, len(order))
	for i, entry := range order {
		for _, ref := range entry.Group {
			out[i].Group = append(out[i].Group, refTOML{ID: ref.ID, Version: ref.Version, Optional: ref.Optional, ExecEnv: ref.ExecEnv})
		}
	}
	return out
}

func encodeTOML(v any) ([]byte, error) {
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
