package main

import (
	"archive/tar"
	"bytes"
	"encoding/pem"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// UID and GID of the user the controller runs as: "nonroot" as distroless
// numbers it, so that a release built on a distroless base runs as the same
// user and the chart's securityContext fits both.
const (
	UID = 65532
	GID = 65532
)

// CertificatesPath is where Go (and most TLS stacks) look for the system's
// roots on Linux.
const CertificatesPath = "etc/ssl/certs/ca-certificates.crt"

// Platforms are those the controller image is built for.
var Platforms = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}

// Index returns the base: one image per platform, the same layer in each.
func Index() (v1.ImageIndex, error) {
	layer, err := Layer()
	if err != nil {
		return nil, err
	}
	var index v1.ImageIndex = mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range Platforms {
		img, err := mutate.AppendLayers(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON), layer)
		if err != nil {
			return nil, err
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		cf = cf.DeepCopy()
		cf.OS, cf.Architecture = p.OS, p.Architecture
		cf.Config.User = "65532:65532"
		cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=/" + CertificatesPath}
		if img, err = mutate.ConfigFile(img, cf); err != nil {
			return nil, err
		}
		platform := p
		index = mutate.AppendManifests(index, mutate.IndexAddendum{Add: img,
			Descriptor: v1.Descriptor{Platform: &platform}})
	}
	return index, nil
}

// Layer returns the base's one layer.
func Layer() (v1.Layer, error) {
	var roots bytes.Buffer
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			// A root distrusted after some date cannot say so in a PEM
			// file: leave it out rather than trust it for everything.
			continue
		}
		if err := pem.Encode(&roots, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate}); err != nil {
			return nil, err
		}
	}
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	for _, dir := range []string{"etc/", "etc/ssl/", "etc/ssl/certs/", "home/", "home/nonroot/", "tmp/"} {
		h := &tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755}
		switch dir {
		case "home/nonroot/":
			h.Mode, h.Uid, h.Gid = 0o700, UID, GID
		case "tmp/":
			h.Mode = 0o1777
		}
		if err := w.WriteHeader(h); err != nil {
			return nil, err
		}
	}
	for _, f := range []struct {
		name string
		data []byte
	}{
		{"etc/passwd", []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{"etc/group", []byte("root:x:0:\nnonroot:x:65532:\n")},
		{CertificatesPath, roots.Bytes()},
	} {
		if err := w.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644, Size: int64(len(f.data))}); err != nil {
			return nil, err
		}
		if _, err := w.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	data := b.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
}
