package main

import (
	"archive/tar"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// TestIndex: one image per platform, each running as the non-root user
// with the same layer, and the same bytes every time (a build of the same
// commit must give the same digest).
func TestIndex(t *testing.T) {
	index, err := Index()
	if err != nil {
		t.Fatal(err)
	}
	again, err := Index()
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := index.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Errorf("two builds differ: %s, %s", d1, d2)
	}
	manifest, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, desc := range manifest.Manifests {
		platforms = append(platforms, desc.Platform.String())
		img, err := index.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if got := cf.Platform().String(); got != desc.Platform.String() {
			t.Errorf("image for %s says it is for %s", desc.Platform, got)
		}
		if cf.Config.User != "65532:65532" {
			t.Errorf("%s runs as %q, want 65532:65532", desc.Platform, cf.Config.User)
		}
	}
	if got := strings.Join(platforms, ","); got != "linux/amd64,linux/arm64" {
		t.Errorf("platforms %s, want linux/amd64,linux/arm64", got)
	}
}

// TestLayer: the user and group exist, and the certificates are PEM roots
// Go can use.
func TestLayer(t *testing.T) {
	layer, err := Layer()
	if err != nil {
		t.Fatal(err)
	}
	files := readLayer(t, layer)
	if !strings.Contains(files["etc/passwd"], "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot 65532:\n%s", files["etc/passwd"])
	}
	if !strings.Contains(files["etc/group"], "nonroot:x:65532:") {
		t.Errorf("/etc/group has no nonroot 65532:\n%s", files["etc/group"])
	}
	rest, roots := []byte(files[CertificatesPath]), 0
	for {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			t.Fatalf("root %d: %v", roots, err)
		}
		roots++
	}
	if roots < 100 {
		t.Errorf("%d root certificates, want the Mozilla bundle (over 100)", roots)
	}
	if !x509.NewCertPool().AppendCertsFromPEM([]byte(files[CertificatesPath])) {
		t.Error("the certificate file does not load into a pool")
	}
}

func readLayer(t *testing.T, layer v1.Layer) map[string]string {
	t.Helper()
	rc, err := layer.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]string{}
	r := tar.NewReader(rc)
	for {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.ModTime.Unix() > 0 {
			t.Errorf("%s has a time (%v): builds would differ", h.Name, h.ModTime)
		}
		data, _ := io.ReadAll(r)
		files[h.Name] = string(data)
	}
}
