package registry

import (
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// remoteImage is an image whose manifest and config were read already and
// whose layers are ggcr remote layers: fetched only when read, and mountable
// (ggcr's remote.Write recognises *remote.MountableLayer and mounts it
// instead of uploading it). partial.CompressedToImage would wrap the layers
// and hide that, so this implements v1.Image itself.
type remoteImage struct {
	repo        name.Repository
	rawManifest []byte
	mediaType   types.MediaType
	manifest    *v1.Manifest
	rawConfig   []byte
	config      *v1.ConfigFile
	layer       func(v1.Hash) (v1.Layer, error)
}

var _ v1.Image = (*remoteImage)(nil)

func (i *remoteImage) MediaType() (types.MediaType, error) { return i.mediaType, nil }
func (i *remoteImage) RawManifest() ([]byte, error)        { return i.rawManifest, nil }
func (i *remoteImage) Manifest() (*v1.Manifest, error)     { return i.manifest.DeepCopy(), nil }
func (i *remoteImage) RawConfigFile() ([]byte, error)      { return i.rawConfig, nil }
func (i *remoteImage) ConfigFile() (*v1.ConfigFile, error) { return i.config.DeepCopy(), nil }
func (i *remoteImage) ConfigName() (v1.Hash, error)        { return i.manifest.Config.Digest, nil }
func (i *remoteImage) Size() (int64, error)                { return int64(len(i.rawManifest)), nil }
func (i *remoteImage) Digest() (v1.Hash, error)            { return partial.Digest(i) }

func (i *remoteImage) Layers() ([]v1.Layer, error) {
	layers := make([]v1.Layer, 0, len(i.manifest.Layers))
	for _, desc := range i.manifest.Layers {
		l, err := i.layer(desc.Digest)
		if err != nil {
			return nil, err
		}
		layers = append(layers, l)
	}
	return layers, nil
}

func (i *remoteImage) LayerByDigest(h v1.Hash) (v1.Layer, error) {
	for _, desc := range i.manifest.Layers {
		if desc.Digest == h {
			return i.layer(h)
		}
	}
	return nil, fmt.Errorf("image in %s has no layer %s", i.repo, h)
}

func (i *remoteImage) LayerByDiffID(h v1.Hash) (v1.Layer, error) {
	for n, diffID := range i.config.RootFS.DiffIDs {
		if diffID == h && n < len(i.manifest.Layers) {
			return i.layer(i.manifest.Layers[n].Digest)
		}
	}
	return nil, fmt.Errorf("image in %s has no layer with diffID %s", i.repo, h)
}

// choosePlatform picks the index entry for want: same os and architecture,
// and same variant when want names one. Entries without a platform (such as
// attestation manifests) never match.
func choosePlatform(manifests []v1.Descriptor, want v1.Platform) (v1.Descriptor, bool) {
	for _, m := range manifests {
		p := m.Platform
		if p == nil || p.OS != want.OS || p.Architecture != want.Architecture {
			continue
		}
		if want.Variant != "" && normalizeVariant(p) != normalizeVariant(&want) {
			continue
		}
		return m, true
	}
	return v1.Descriptor{}, false
}

// normalizeVariant treats arm64's default variant v8 as no variant, as
// container runtimes do.
func normalizeVariant(p *v1.Platform) string {
	if p.Architecture == "arm64" && p.Variant == "v8" {
		return ""
	}
	return p.Variant
}

func platformString(p v1.Platform) string {
	parts := []string{p.OS, p.Architecture}
	if p.Variant != "" {
		parts = append(parts, p.Variant)
	}
	return strings.Join(parts, "/")
}
