package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// releaseKeyPassword seals the keys releaseKeys makes.
const releaseKeyPassword = "release-pw"

// offlineSigningConfig is a Sigstore signing config naming no service: cosign
// signs with the key alone, recording the signature in no transparency log
// (none can be reached here).
const offlineSigningConfig = `{"mediaType": "application/vnd.dev.sigstore.signingconfig.v0.2+json",
 "caUrls": [], "oidcUrls": [], "rekorTlogUrls": [], "tsaUrls": [],
 "rekorTlogConfig": {"selector": "ANY"}, "tsaConfig": {"selector": "ANY"}}
`

// releaseKeys makes a cosign key pair with the real cosign (cosign.key,
// cosign.pub, sealed with releaseKeyPassword) and an offline signing
// config (signing-config.json) in a new directory, and returns it.
func releaseKeys(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	generate := exec.Command(filepath.Join(env.Root, "bin", "cosign"), "generate-key-pair")
	generate.Dir = dir
	generate.Env = append(os.Environ(), "COSIGN_PASSWORD="+releaseKeyPassword, "HOME="+dir)
	if out, err := generate.CombinedOutput(); err != nil {
		t.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "signing-config.json"), []byte(offlineSigningConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// cosignCmd runs the real cosign as a user verifying a release would: with
// the Docker config logged in to the registry, and the transparency log not
// checked (the release was signed offline).
func cosignCmd(r madeRelease, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(env.Root, "bin", "cosign"), args...)
	cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+r.dockerConfig, "HOME="+r.dockerConfig)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// checkSignatures: the release's cosign.pub is its key's, and with it
// `cosign verify` accepts the image's index, each platform's image and the
// pushed chart, and `cosign verify-blob` checksums.txt; another key is
// refused on each, and so is a checksums.txt changed by a byte.
func checkSignatures(t *testing.T, r madeRelease) {
	t.Helper()
	pub := filepath.Join(r.dist, "cosign.pub")
	published, err := os.ReadFile(pub)
	if err != nil {
		t.Fatal(err)
	}
	if generated, _ := os.ReadFile(filepath.Join(r.keys, "cosign.pub")); !bytes.Equal(bytes.TrimSpace(published), bytes.TrimSpace(generated)) {
		t.Errorf("dist/cosign.pub:\n%s\nis not the signing key's public key:\n%s", published, generated)
	}
	other := filepath.Join(releaseKeys(t), "cosign.pub")

	image, err := name.NewDigest(r.image, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	signed := []string{image.Context().Digest(image.DigestStr()).String()}
	index, err := remote.Index(image, remote.WithAuth(&authn.Basic{Username: registryUser, Password: registryPassword}))
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, desc := range manifest.Manifests {
		signed = append(signed, image.Context().Digest(desc.Digest.String()).String())
	}
	chart, err := os.ReadFile(filepath.Join(r.dist, "chart.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// oci://HOST/PATH/buildsmith:X.Y.Z@sha256:…, by digest alone.
	repo, digest, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(string(chart)), "oci://"), "@")
	signed = append(signed, repo[:strings.LastIndex(repo, ":")]+"@"+digest)

	for _, ref := range signed {
		if out, err := cosignCmd(r, "verify", "--key", pub, "--insecure-ignore-tlog=true", "--allow-http-registry", ref); err != nil {
			t.Errorf("cosign verify --key dist/cosign.pub %s: %v\n%s", ref, err, out)
		}
		// cosign v3 signs in Sigstore bundles: "no matching attestations".
		if out, err := cosignCmd(r, "verify", "--key", other, "--insecure-ignore-tlog=true", "--allow-http-registry", ref); err == nil ||
			!strings.Contains(out, "no matching") {
			t.Errorf("cosign verify with another key of %s: %v, want no matching signature\n%s", ref, err, out)
		}
	}
	t.Logf("cosign verify --key dist/cosign.pub: the image's index, its %d images and the chart", len(manifest.Manifests))

	sums, bundle := filepath.Join(r.dist, "checksums.txt"), filepath.Join(r.dist, "checksums.txt.sigstore.json")
	if out, err := cosignCmd(r, "verify-blob", "--key", pub, "--bundle", bundle, "--insecure-ignore-tlog=true", sums); err != nil {
		t.Errorf("cosign verify-blob checksums.txt: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(sums)
	if err != nil {
		t.Fatal(err)
	}
	changed := filepath.Join(t.TempDir(), "checksums.txt")
	if err := os.WriteFile(changed, append(raw, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := cosignCmd(r, "verify-blob", "--key", pub, "--bundle", bundle, "--insecure-ignore-tlog=true", changed); err == nil {
		t.Errorf("cosign verify-blob accepted a changed checksums.txt:\n%s", out)
	}
}

// checkInstallYAML: dist/install.yaml installs with `kubectl apply
// --server-side -f` alone — the namespace, every CRD (kept at helm uninstall,
// labelled as the chart's), the controller running the release's image.
// Everything but the CRDs (envtest's, which the other tests use) is
// deleted afterwards.
func checkInstallYAML(t *testing.T, r madeRelease) {
	t.Helper()
	file := filepath.Join(r.dist, "install.yaml")
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var objects []unstructured.Unstructured
	crds := 0
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("install.yaml: %v", err)
		}
		switch u.GetKind() {
		case "":
			continue
		case "CustomResourceDefinition":
			crds++
			if u.GetAnnotations()["helm.sh/resource-policy"] != "keep" || u.GetLabels()["app.kubernetes.io/name"] != "buildsmith" {
				t.Errorf("install.yaml: CRD %s has annotations %v, labels %v; want helm.sh/resource-policy keep and the chart's labels",
					u.GetName(), u.GetAnnotations(), u.GetLabels())
			}
			continue
		}
		objects = append(objects, u)
	}
	want, err := filepath.Glob(filepath.Join(env.Root, "config", "crd", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if crds != len(want) || len(objects) == 0 || objects[0].GetKind() != "Namespace" {
		t.Fatalf("install.yaml: %d CRDs and %d other objects; want config/crd's %d, and the namespace first of the others",
			crds, len(objects), len(want))
	}
	t.Cleanup(func() {
		for i := len(objects) - 1; i >= 0; i-- {
			u := objects[i]
			if out, err := env.Kubectl("delete", "--ignore-not-found", "--wait=false", "-n", u.GetNamespace(),
				resourceOf(u), u.GetName()).CombinedOutput(); err != nil {
				t.Logf("kubectl delete %s %s: %v\n%s", u.GetKind(), u.GetName(), err, out)
			}
		}
	})
	if out, err := env.Kubectl("apply", "--server-side", "-f", file).CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply --server-side -f install.yaml: %v\n%s", err, out)
	}
	deployment, err := kube.AppsV1().Deployments("buildsmith").Get(context.Background(), "buildsmith-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("after kubectl apply -f install.yaml: %v", err)
	}
	if got := deployment.Spec.Template.Spec.Containers[0].Image; got != r.image {
		t.Errorf("install.yaml's controller runs %s, want the release's %s", got, r.image)
	}
	for _, u := range objects {
		if out, err := env.Kubectl("get", "-n", u.GetNamespace(), resourceOf(u), u.GetName()).CombinedOutput(); err != nil {
			t.Errorf("after kubectl apply -f install.yaml, no %s %s/%s: %v\n%s", u.GetKind(), u.GetNamespace(), u.GetName(), err, out)
		}
	}
	t.Logf("kubectl apply --server-side -f install.yaml: %d CRDs and %d objects", crds, len(objects))
}

// resourceOf is u's kind as kubectl takes it: kind.group.
func resourceOf(u unstructured.Unstructured) string {
	if group := u.GroupVersionKind().Group; group != "" {
		return strings.ToLower(u.GetKind()) + "." + group
	}
	return strings.ToLower(u.GetKind())
}

// TestReleaseNeedsAKey: make release without COSIGN_KEY refuses, naming
// it, before it builds or writes anything: a release is signed, or
// unsigned by an explicit COSIGN_KEY=none.
func TestReleaseNeedsAKey(t *testing.T) {
	dist := t.TempDir()
	cmd := exec.Command(filepath.Join(env.Root, "hack", "release.sh"))
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "COSIGN_KEY=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, "VERSION=v1.2.3", "IMAGE_REPO=registry.invalid/buildsmith", "DIST="+dist)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "COSIGN_KEY names the cosign key") || !strings.Contains(string(out), "COSIGN_KEY=none") {
		t.Errorf("hack/release.sh without COSIGN_KEY: %v, want a refusal naming COSIGN_KEY and COSIGN_KEY=none:\n%s", err, out)
	}
	if entries, _ := os.ReadDir(dist); len(entries) > 0 {
		t.Errorf("hack/release.sh without COSIGN_KEY wrote %d files in DIST", len(entries))
	}
}

// TestReleaseWorkflowSigns: the release workflow gives make release the
// project's key (not none) and attaches what a user verifies with: the
// public key, the signed checksums and install.yaml.
func TestReleaseWorkflowSigns(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(env.Root, ".github", "workflows", "release.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var workflow struct {
		Jobs map[string]struct {
			Steps []struct {
				Run string            `json:"run"`
				Env map[string]string `json:"env"`
			} `json:"steps"`
		} `json:"jobs"`
	}
	if err := yaml.Unmarshal(raw, &workflow); err != nil {
		t.Fatal(err)
	}
	var key, attached string
	for _, step := range workflow.Jobs["release"].Steps {
		run := strings.TrimSpace(step.Run)
		if strings.HasPrefix(run, "make release ") {
			key = step.Env["COSIGN_KEY"]
		}
		if strings.Contains(run, "gh release create") {
			attached = run
		}
	}
	if key == "" || key == "none" {
		t.Errorf("release workflow: make release with COSIGN_KEY %q, want the project's key", key)
	}
	for _, file := range []string{"dist/cosign.pub", "dist/checksums.txt.sigstore.json", "dist/install.yaml", "dist/checksums.txt"} {
		if !strings.Contains(attached, file) {
			t.Errorf("release workflow: gh release create does not attach %s:\n%s", file, attached)
		}
	}
}
