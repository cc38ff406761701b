package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/test/controllertest"
)

// imageVersion is what `make image` stamps into the controller of this test;
// builders pushed by that controller record it.
const imageVersion = "v0.0.0-e2e"

// TestControllerImage builds the controller image as a user does, `make
// image` into the distribution registry (with auth, over plain HTTP), twice:
// the same commit must give the same digest. The image is read back (both
// platforms, a non-root user, the entrypoint, an SBOM beside it), and the
// controller binary taken from its layers — not a fresh go build — runs a
// store, a stack and a builder to Ready. Between the two, `make release`
// (checkRelease: the OCI chart installed, the plugin archives and their
// krew manifest).
func TestControllerImage(t *testing.T) {
	w := newFaultWorld(t, "image")
	auth := remote.WithAuth(&authn.Basic{Username: registryUser, Password: registryPassword})
	dockerDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dockerDir, "config.json"),
		dockerConfig(w.d.Addr, registryUser, registryPassword), 0o600); err != nil {
		t.Fatal(err)
	}
	repo := w.d.Addr + "/buildsmith/controller"
	makeImage := func() (string, time.Duration) {
		t.Helper()
		start := time.Now()
		cmd := exec.Command("make", "--no-print-directory", "image", "IMAGE_REPO="+repo, "INSECURE=1", "VERSION="+imageVersion)
		cmd.Dir = env.Root
		cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+dockerDir)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("make image: %v\n%s", err, lastLines(stderr.String(), 30))
		}
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		return lines[len(lines)-1], time.Since(start)
	}
	printed, took := makeImage()
	t.Logf("make image: %s in %v", printed, took.Round(time.Second))
	again, took := makeImage()
	t.Logf("make image again: %s in %v", again, took.Round(time.Second))
	ref, err := name.NewDigest(printed, name.Insecure)
	if err != nil {
		t.Fatalf("make image's last line %q is not an image by digest: %v", printed, err)
	}
	if again != printed {
		t.Errorf("the same commit built %s, then %s", printed, again)
	}

	// make release: the same image, the chart pinned to it (pushed beside
	// it), both signed with a key made by the real cosign (offline: a
	// signing config naming no transparency log), install.yaml, the kubectl
	// plugin.
	dist := t.TempDir()
	keys := releaseKeys(t)
	release := exec.Command("make", "--no-print-directory", "release", "IMAGE_REPO="+repo, "INSECURE=1",
		"VERSION="+imageVersion, "DIST="+dist)
	release.Dir = env.Root
	release.Env = append(os.Environ(), "DOCKER_CONFIG="+dockerDir, "COSIGN_KEY="+filepath.Join(keys, "cosign.key"),
		"COSIGN_PASSWORD="+releaseKeyPassword, "SIGNING_CONFIG="+filepath.Join(keys, "signing-config.json"))
	out, err := release.CombinedOutput()
	if err != nil {
		t.Fatalf("make release: %v\n%s", err, lastLines(string(out), 30))
	}
	if raw, err := os.ReadFile(filepath.Join(dist, "image.txt")); err != nil || strings.TrimSpace(string(raw)) != printed {
		t.Errorf("dist/image.txt: %q, %v; want %s", raw, err, printed)
	}
	if _, err := os.Stat(filepath.Join(dist, "buildsmith-"+strings.TrimPrefix(imageVersion, "v")+".tgz")); err != nil {
		t.Errorf("no chart in dist: %v", err)
	}
	r := madeRelease{imageRepo: repo, version: imageVersion, image: printed, dist: dist, output: string(out), registry: w.d.Addr,
		dockerConfig: dockerDir, keys: keys}
	checkSignatures(t, r)
	checkInstallYAML(t, r)
	checkRelease(t, r)

	index, err := remote.Index(ref, auth)
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	var controller string
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
		if cf.Config.User != "65532:65532" {
			t.Errorf("%s runs as %q, want the non-root 65532:65532", desc.Platform, cf.Config.User)
		}
		if !slices.Equal(cf.Config.Entrypoint, []string{"/ko-app/controller"}) {
			t.Errorf("%s entrypoint %q, want /ko-app/controller", desc.Platform, cf.Config.Entrypoint)
		}
		if got := cf.Config.Labels["org.opencontainers.image.version"]; got != imageVersion {
			t.Errorf("%s version label %q, want %s", desc.Platform, got, imageVersion)
		}
		files := imageFiles(t, img, "ko-app/controller", "etc/passwd", "etc/ssl/certs/ca-certificates.crt")
		if !strings.Contains(string(files["etc/passwd"]), ":65532:65532:") {
			t.Errorf("%s: /etc/passwd names no user 65532:\n%s", desc.Platform, files["etc/passwd"])
		}
		if len(files["etc/ssl/certs/ca-certificates.crt"]) == 0 {
			t.Errorf("%s has no root certificates", desc.Platform)
		}
		if desc.Platform.OS == runtime.GOOS && desc.Platform.Architecture == runtime.GOARCH {
			controller = filepath.Join(t.TempDir(), "controller")
			if err := os.WriteFile(controller, files["ko-app/controller"], 0o755); err != nil {
				t.Fatal(err)
			}
		}
		checkSBOM(t, ref.Context().Digest(desc.Digest.String()), auth)
		size, err := imageSize(img)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d bytes compressed", desc.Platform, size)
	}
	if got := strings.Join(platforms, ","); got != "linux/amd64,linux/arm64" {
		t.Errorf("platforms %s, want linux/amd64,linux/arm64", got)
	}
	if controller == "" {
		t.Fatalf("no image for this machine's %s/%s", runtime.GOOS, runtime.GOARCH)
	}

	// The image's own binary as the controller.
	controllertest.Start(t, controller, controllertest.Options{Kubeconfig: env.Kubeconfig,
		Namespace: systemNamespace, DisableHA: true})
	w.apply(t)
	w.waitReady(t, 2*time.Minute)
	b, err := client.BuildsmithV1alpha1().Builders(w.ns).Get(context.Background(), w.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	built, err := name.NewDigest(b.Status.LatestImage, name.Insecure)
	if err != nil {
		t.Fatalf("latestImage %q: %v", b.Status.LatestImage, err)
	}
	img, err := remote.Image(built, auth)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		CreatedBy struct{ Name, Version string } `json:"createdBy"`
	}
	if err := json.Unmarshal([]byte(cf.Config.Labels["io.buildpacks.builder.metadata"]), &meta); err != nil {
		t.Fatal(err)
	}
	if meta.CreatedBy.Version != imageVersion {
		t.Errorf("the builder was created by %+v, want buildsmith %s (the image's binary)", meta.CreatedBy, imageVersion)
	}
}

// imageFiles reads the named files from img's layers (the last layer that
// has one wins, as in the image's filesystem); each must be there.
func imageFiles(t *testing.T, img v1.Image, names ...string) map[string][]byte {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string][]byte{}
	r := tar.NewReader(rc)
	for {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if name := strings.TrimPrefix(h.Name, "/"); slices.Contains(names, name) {
			if files[name], err = io.ReadAll(r); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, name := range names {
		if _, ok := files[name]; !ok {
			t.Errorf("the image has no /%s", name)
		}
	}
	return files
}

// imageSize is the bytes a pull of img downloads: its layers, compressed.
func imageSize(img v1.Image) (int64, error) {
	layers, err := img.Layers()
	if err != nil {
		return 0, err
	}
	var total int64
	for _, l := range layers {
		size, err := l.Size()
		if err != nil {
			return 0, err
		}
		total += size
	}
	return total, nil
}

// checkSBOM reads the SPDX document ko pushes beside a platform's image (the
// tag sha256-<digest>.sbom) and looks for the controller's module in it.
func checkSBOM(t *testing.T, ref name.Digest, auth remote.Option) {
	t.Helper()
	tag := ref.Context().Tag(strings.Replace(ref.DigestStr(), ":", "-", 1) + ".sbom")
	sbom, err := remote.Image(tag, auth)
	if err != nil {
		t.Fatalf("no SBOM at %s: %v", tag, err)
	}
	layers, err := sbom.Layers()
	if err != nil || len(layers) == 0 {
		t.Fatalf("SBOM %s: %d layers, %v", tag, len(layers), err)
	}
	mt, err := layers[0].MediaType()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	doc, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mt), "spdx") || !bytes.Contains(doc, []byte("github.com/buildsmith/buildsmith")) {
		t.Errorf("SBOM %s: media type %s, mentions the module: %v", tag, mt, bytes.Contains(doc, []byte("github.com/buildsmith/buildsmith")))
	}
}
