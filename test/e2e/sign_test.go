package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/test/cosigntest"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// TestSignedBuilder: a key pair made by the real cosign (generate-key-pair),
// in a Secret of the builder's ServiceAccount as kpack documents it, and a
// P-384 key pair in cosign's format (generate-key-pair makes P-256 keys
// only) sign a two-platform builder: the real `cosign verify --key`, as
// plainly run, accepts the index and each platform's image with either
// public key, and refuses them with another key.
func TestSignedBuilder(t *testing.T) {
	ctx := context.Background()
	cosignBin := filepath.Join(env.Root, "bin", "cosign")
	keys := t.TempDir()
	generate := func(dir, password string) {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(cosignBin, "generate-key-pair")
		cmd.Dir, cmd.Env = dir, append(os.Environ(), "COSIGN_PASSWORD="+password)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
		}
	}
	generate(filepath.Join(keys, "signer"), "s3cret")
	generate(filepath.Join(keys, "other"), "")
	private, err := os.ReadFile(filepath.Join(keys, "signer", "cosign.key"))
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p384Public, err := x509.MarshalPKIXPublicKey(&p384.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(keys, "p384"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(keys, "p384", "cosign.pub"),
		pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: p384Public}), 0o644); err != nil {
		t.Fatal(err)
	}

	f := registrytest.New(t)
	pushMultiPlatformSamples(t, f, "io.buildpacks.stacks.signed")

	const ns = "signed"
	// The Secrets as kpack's docs and `cosign generate-key-pair k8s://…`
	// make them: no type, the two keys; listed in the account's secrets.
	tenantNamespace(t, ns, "cosign", "cosign-p384")
	for _, s := range []*corev1.Secret{cosigntest.Secret("", "cosign", private, "s3cret"),
		cosigntest.Secret("", "cosign-p384", cosigntest.Encrypt(t, p384, "p384"), "p384")} {
		s.ResourceVersion = ""
		if _, err := kube.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	useLifecycleImage(t, f.Addr+"/buildsmith/lifecycle:0.21.0")
	startController(t)
	objects := storeStack{Addr: f.Addr, Name: "signed", Buildpackages: []string{"buildpacks/hello:1"}, StackID: "io.buildpacks.stacks.signed"}
	objects.create(t)
	objects.createBuilder(t, ns, "signed", v1alpha1.NamespacedBuilderSpec{BuilderSpec: v1alpha1.BuilderSpec{Order: helloOrder()}})

	var b *v1alpha1.Builder
	eventually(t, 60*time.Second, "signed builder Ready", func() (bool, string) {
		b, err = client.BuildsmithV1alpha1().Builders(ns).Get(ctx, "signed", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return b.Status.IsReady() && len(b.Status.Signatures) == 6, fmt.Sprintf("%+v %+v", b.Status.Conditions, b.Status.Signatures)
	})
	out, _ := env.Kubectl("get", "-n", ns, "builder/signed", "-o", "jsonpath={.status.signatures}").CombinedOutput()
	t.Logf("status.signatures: %s", out)
	images := []string{b.Status.LatestImage}
	for _, p := range b.Status.Platforms {
		images = append(images, p.Image)
	}
	if len(images) != 3 {
		t.Fatalf("want an index of two platforms, got %+v", b.Status.Platforms)
	}
	verify := func(key, image string) (string, error) {
		cmd := exec.Command(cosignBin, "verify", "--key", key, "--insecure-ignore-tlog=true", "--allow-http-registry", image)
		cmd.Env = append(os.Environ(), "COSIGN_EXPERIMENTAL=0", "HOME="+keys)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, image := range images {
		for _, signer := range []string{"signer", "p384"} {
			if out, err := verify(filepath.Join(keys, signer, "cosign.pub"), image); err != nil {
				t.Errorf("cosign verify --key %s/cosign.pub %s: %v\n%s", signer, image, err, out)
			} else {
				t.Logf("cosign verify --key %s/cosign.pub %s:\n%s", signer, image, out)
			}
		}
		if out, err := verify(filepath.Join(keys, "other", "cosign.pub"), image); err == nil {
			t.Errorf("cosign verify with another key accepted %s:\n%s", image, out)
		} else if !strings.Contains(out, "no matching signatures") && !strings.Contains(out, "no matching attestations") {
			// cosign v3 verifies the bundles among the referrers when
			// there are any (the index's attestations, by default), and
			// the .sig tag when there are none (the platforms' images).
			t.Errorf("cosign verify with another key failed, but not on the signature: %v\n%s", err, out)
		}
	}
}
