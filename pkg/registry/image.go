package registry

import (
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/buildsmith/buildsmith/pkg/cnb"
)

// remoteImage is an image whose manifest and config were read already and
// whose layers are lazy remote layers (see describedLayer).
// partial.CompressedToImage would wrap the layers and hide that they are
// mountable, so this implements v1.Image itself.
type remoteImage struct {
	repo        name.Repository
	rawManifest []byte
	mediaType   types.MediaType
	manifest    *v1.Manifest
	rawConfig   []byte
	config      *v1.ConfigFile
	layers      []v1.Layer
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
func (i *remoteImage) Layers() ([]v1.Layer, error)         { return append([]v1.Layer(nil), i.layers...), nil }

func (i *remoteImage) LayerByDigest(h v1.Hash) (v1.Layer, error) {
	for n, desc := range i.manifest.Layers {
		if desc.Digest == h {
			return i.layers[n], nil
		}
	}
	return nil, fmt.Errorf("image in %s has no layer %s", i.repo, h)
}

func (i *remoteImage) LayerByDiffID(h v1.Hash) (v1.Layer, error) {
	for n, diffID := range i.config.RootFS.DiffIDs {
		if diffID == h {
			return i.layers[n], nil
		}
	}
	return nil, fmt.Errorf("image in %s has no layer with diffID %s", i.repo, h)
}

// describedLayer is a remote layer that answers everything but its content
// from the manifest and config that list it. ggcr's own remote layers know
// only their digest: asking one for its diffID downloads and decompresses
// it, its size costs a HEAD, and its media type is always docker's. Building
// an image on a describedLayer (mutate.Append, remote.Write) reads none of
// its bytes; wrapped in a *remote.MountableLayer, remote.Write mounts it from
// its repository, or skips it when the target already has it.
type describedLayer struct {
	v1.Layer // the lazy remote layer, for Compressed and Uncompressed
	desc     v1.Descriptor
	diffID   v1.Hash
}

func (l *describedLayer) Digest() (v1.Hash, error)            { return l.desc.Digest, nil }
func (l *describedLayer) DiffID() (v1.Hash, error)            { return l.diffID, nil }
func (l *describedLayer) Size() (int64, error)                { return l.desc.Size, nil }
func (l *describedLayer) MediaType() (types.MediaType, error) { return l.desc.MediaType, nil }

// Descriptor keeps the manifest's descriptor (annotations, URLs) as is.
func (l *describedLayer) Descriptor() (*v1.Descriptor, error) {
	d := l.desc
	return &d, nil
}

// choosePlatform picks the first index entry for want, by the one platform
// rule of buildsmith (cnb.Platform.Matches: containerd's normalised names, a
// field left empty matches any). Entries without a platform (such as
// attestation manifests) never match.
func choosePlatform(manifests []v1.Descriptor, want v1.Platform) (v1.Descriptor, bool) {
	for _, m := range manifests {
		if m.Platform != nil && cnb.PlatformOf(*m.Platform).Matches(cnb.PlatformOf(want)) {
			return m, true
		}
	}
	return v1.Descriptor{}, false
}
