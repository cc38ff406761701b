package e2e

import (
	"archive/tar"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/attest"
	"github.com/buildsmith/buildsmith/pkg/cosign"
	"github.com/buildsmith/buildsmith/pkg/registry"
	"github.com/buildsmith/buildsmith/test/cosigntest"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// TestAttestedBuilder: with --builder-attestations=all, a builder whose
// ServiceAccount has a key made by the real cosign carries its SBOM and its
// provenance on the distribution registry (no referrers API: the fallback
// tag), and the real `cosign verify-attestation --key` accepts both
// predicates, and refuses them with another key; every image and blob the
// SBOM names is in the registry. Its additional tags (one in its repository,
// one in another) hold the same image with its labels, and the copy in the
// other repository is signed and attested there, as cosign verifies it.
func TestAttestedBuilder(t *testing.T) {
	ctx := context.Background()
	keys, private := cosignKeyPairs(t)

	d := startDistribution(t)
	const ns = "attested"
	objects := storeStack{Addr: d.Addr, Name: "attested", Buildpackages: []string{"buildpacks/hello:1.0.0"}, StackID: "io.buildpacks.stacks.attested",
		Account: &v1alpha1.ServiceAccountRef{Name: "builder", Namespace: ns}}
	objects.pushSamples(t, func(repo string, img v1.Image, err error) { pushAuthenticated(t, d.Addr, repo, img, err) })
	config := dockerConfig(d.Addr, registryUser, registryPassword)
	pullSecretNamespace(t, ns, config)
	secret := cosigntest.Secret(ns, "cosign", private, "pw")
	secret.ResourceVersion = ""
	if _, err := kube.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa, err := kube.CoreV1().ServiceAccounts(ns).Get(ctx, "builder", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sa.Secrets = append(sa.Secrets, corev1.ObjectReference{Name: "cosign"})
	if _, err := kube.CoreV1().ServiceAccounts(ns).Update(ctx, sa, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	useLifecycleImage(t, d.Addr+"/buildsmith/lifecycle:0.21.0")
	startController(t, "--builder-attestations=all")
	objects.create(t)
	// Published to two more tags, one in another repository, labelled.
	additionalTags := []string{d.Addr + "/builders/app:v1", d.Addr + "/published/app:stable"}
	objects.createBuilder(t, ns, "app", v1alpha1.NamespacedBuilderSpec{ServiceAccountName: "builder",
		BuilderSpec: v1alpha1.BuilderSpec{Order: helloOrder(), Signing: &v1alpha1.Signing{Format: v1alpha1.SignatureFormatBoth},
			AdditionalTags: additionalTags, AdditionalLabels: map[string]string{"org.example.team": "platform"}}})

	var b *v1alpha1.Builder
	took := eventually(t, 90*time.Second, "the builder Ready with its attestations", func() (bool, string) {
		b, err = client.BuildsmithV1alpha1().Builders(ns).Get(ctx, "app", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		// Each kind in both repositories.
		return b.Status.IsReady() && len(b.Status.Attestations) == 4 && len(b.Status.Signatures) == 4,
			fmt.Sprintf("%+v %+v %+v", b.Status.Conditions, b.Status.Attestations, b.Status.Signatures)
	})
	t.Logf("Ready and attested in %v: %+v", took.Round(100*time.Millisecond), b.Status.Attestations)
	for _, a := range b.Status.Attestations {
		if a.ListedBy != registry.ListedByTag || a.SigningSecret != ns+"/cosign" {
			t.Errorf("attestation %+v: want listed by the fallback tag, signed by %s/cosign", a, ns)
		}
	}
	if s := b.Status.Signatures; s[0].Format != "" || s[1].Format != "" || s[2].Format != v1alpha1.SignatureFormatBundle || s[2].ListedBy != registry.ListedByTag {
		t.Errorf("status.signatures %+v: want the .sig tags', then bundles listed by the fallback tag", s)
	}
	latest, err := name.NewDigest(b.Status.LatestImage)
	if err != nil {
		t.Fatal(err)
	}
	published := d.Addr + "/published/app@" + latest.DigestStr()
	auth := authn.FromConfig(authn.AuthConfig{Username: registryUser, Password: registryPassword})
	for _, tag := range append(additionalTags, b.Spec.Tag) {
		ref, _ := name.ParseReference(tag)
		img, err := remote.Image(ref, remote.WithAuth(auth))
		if err != nil {
			t.Fatalf("reading %s: %v", tag, err)
		}
		digest, _ := img.Digest()
		config, _ := img.ConfigFile()
		if digest.String() != latest.DigestStr() || config == nil || config.Config.Labels["org.example.team"] != "platform" {
			t.Errorf("%s: %s, labels %v; want the builder %s, labelled", tag, digest, config, latest.DigestStr())
		}
	}

	// cosign reads the registry's credentials from a Docker config.
	docker := t.TempDir()
	if err := os.WriteFile(filepath.Join(docker, "config.json"), config, 0o600); err != nil {
		t.Fatal(err)
	}
	verifyAttestations(t, keys, b.Status.LatestImage, "DOCKER_CONFIG="+docker)
	verifyAttestations(t, keys, published, "DOCKER_CONFIG="+docker)
	verifySignatures(t, keys, []string{b.Status.LatestImage, published}, "DOCKER_CONFIG="+docker)
	downloadAttestations(t, b.Status.LatestImage, "DOCKER_CONFIG="+docker)
	checkSBOMDigests(t, b, authn.FromConfig(authn.AuthConfig{Username: registryUser, Password: registryPassword}))

	// The plugin prints both, read with the Docker credentials.
	plugin := filepath.Join(t.TempDir(), "kubectl-buildsmith")
	build := exec.Command("go", "build", "-o", plugin, "./cmd/kubectl-buildsmith")
	build.Dir = env.Root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/kubectl-buildsmith: %v\n%s", err, out)
	}
	for command, predicateType := range map[string]string{"sbom": attest.SPDXPredicateType, "provenance": attest.ProvenancePredicateType} {
		cmd := exec.Command(plugin, command, "--kubeconfig", env.Kubeconfig, "-n", ns, "builder/app")
		cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+docker)
		out, err := cmd.Output()
		var statement struct{ PredicateType string }
		if err != nil || json.Unmarshal(out, &statement) != nil || statement.PredicateType != predicateType {
			t.Errorf("kubectl buildsmith %s: %v, %.300s; want a statement of %s", command, err, out, predicateType)
		}
	}
}

// TestAttestedMultiPlatformBuilder: with --builder-attestations=signed, a
// two-platform builder's attestations refer to its index and name both
// platforms' images, on a registry with the referrers API (listed by it);
// the real cosign verify-attestation --key accepts both predicates of the
// index. Signed in cosign v3's format alone (spec.signing.format: bundle),
// the index and each platform's image carry a bundle, and no .sig tag,
// which the real cosign verify --key accepts.
func TestAttestedMultiPlatformBuilder(t *testing.T) {
	ctx := context.Background()
	keys, private := cosignKeyPairs(t)
	f := registrytest.NewWithReferrers(t)
	pushMultiPlatformSamples(t, f, "io.buildpacks.stacks.attestedmulti")
	const ns = "attested-multi"
	tenantNamespace(t, ns, "cosign")
	secret := cosigntest.Secret("", "cosign", private, "pw")
	secret.ResourceVersion = ""
	if _, err := kube.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	useLifecycleImage(t, f.Addr+"/buildsmith/lifecycle:0.21.0")
	startController(t, "--builder-attestations=signed")
	objects := storeStack{Addr: f.Addr, Name: "attested-multi", Buildpackages: []string{"buildpacks/hello:1"}, StackID: "io.buildpacks.stacks.attestedmulti"}
	objects.create(t)
	objects.createBuilder(t, ns, "multi", v1alpha1.NamespacedBuilderSpec{BuilderSpec: v1alpha1.BuilderSpec{Order: helloOrder(),
		Signing: &v1alpha1.Signing{Format: v1alpha1.SignatureFormatBundle}}})
	var b *v1alpha1.Builder
	eventually(t, 90*time.Second, "the two-platform builder Ready with its attestations", func() (bool, string) {
		var err error
		if b, err = client.BuildsmithV1alpha1().Builders(ns).Get(ctx, "multi", metav1.GetOptions{}); err != nil {
			return false, err.Error()
		}
		return b.Status.IsReady() && len(b.Status.Attestations) == 2 && len(b.Status.Signatures) == 3,
			fmt.Sprintf("%+v %+v %+v", b.Status.Conditions, b.Status.Attestations, b.Status.Signatures)
	})
	if len(b.Status.Platforms) != 2 {
		t.Fatalf("platforms %+v, want two", b.Status.Platforms)
	}
	for _, a := range b.Status.Attestations {
		if a.ListedBy != registry.ListedByAPI {
			t.Errorf("attestation %+v: want listed by the referrers API", a)
		}
	}
	images := []string{b.Status.LatestImage, b.Status.Platforms[0].Image, b.Status.Platforms[1].Image}
	for i, s := range b.Status.Signatures {
		if s.Image != images[i] || s.Format != v1alpha1.SignatureFormatBundle || s.ListedBy != registry.ListedByAPI {
			t.Errorf("signature %+v: want a bundle of %s listed by the referrers API", s, images[i])
		}
		if ref, err := name.NewDigest(s.Image); err == nil {
			if _, err := remote.Head(cosign.SignatureTag(ref.Context(), ref)); err == nil {
				t.Errorf("a .sig tag was written for %s", s.Image)
			}
		}
	}
	verifyAttestations(t, keys, b.Status.LatestImage)
	verifySignatures(t, keys, images)
	downloadAttestations(t, b.Status.LatestImage)
}

// downloadAttestations runs the real cosign download attestation on image
// for each predicate: one bundle each, of a statement of that predicate
// about image.
func downloadAttestations(t *testing.T, image string, environ ...string) {
	t.Helper()
	digest := mustDigest(t, image)
	for predicate, predicateType := range map[string]string{"slsaprovenance1": attest.ProvenancePredicateType, "spdxjson": attest.SPDXPredicateType} {
		cmd := exec.Command(filepath.Join(env.Root, "bin", "cosign"), "download", "attestation", "--predicate-type", predicate,
			"--allow-http-registry", image)
		cmd.Env = append(append(os.Environ(), "HOME="+t.TempDir()), environ...)
		out, err := cmd.Output()
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if err != nil || len(lines) != 1 {
			t.Errorf("cosign download attestation --predicate-type %s %s: %v, %d bundles:\n%.500s", predicate, image, err, len(lines), out)
			continue
		}
		var bundle struct {
			DSSEEnvelope struct{ Payload string } `json:"dsseEnvelope"`
		}
		var statement struct {
			PredicateType string
			Subject       []struct{ Digest map[string]string }
		}
		if err := json.Unmarshal([]byte(lines[0]), &bundle); err != nil {
			t.Errorf("cosign download attestation --predicate-type %s %s: %v:\n%.500s", predicate, image, err, out)
			continue
		}
		payload, _ := base64.StdEncoding.DecodeString(bundle.DSSEEnvelope.Payload)
		if err := json.Unmarshal(payload, &statement); err != nil || statement.PredicateType != predicateType || len(statement.Subject) == 0 ||
			"sha256:"+statement.Subject[0].Digest["sha256"] != digest.DigestStr() {
			t.Errorf("cosign download attestation --predicate-type %s %s: %v, a statement %+v", predicate, image, err, statement)
			continue
		}
		t.Logf("cosign download attestation --predicate-type %s: the bundle of a %s statement about %s", predicate, predicateType, image)
	}
}

// verifySignatures runs the real cosign verify on each image: accepted
// with signer's public key, refused with other's.
func verifySignatures(t *testing.T, keys string, images []string, environ ...string) {
	t.Helper()
	verify := func(key, image string) (string, error) {
		cmd := exec.Command(filepath.Join(env.Root, "bin", "cosign"), "verify", "--key", key, "--insecure-ignore-tlog=true", "--allow-http-registry", image)
		cmd.Env = append(append(os.Environ(), "HOME="+keys), environ...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, image := range images {
		if out, err := verify(filepath.Join(keys, "signer", "cosign.pub"), image); err != nil {
			t.Errorf("cosign verify %s: %v\n%s", image, err, out)
		} else {
			t.Logf("cosign verify %s: accepted", image)
		}
		if out, err := verify(filepath.Join(keys, "other", "cosign.pub"), image); err == nil {
			t.Errorf("cosign verify with another key accepted %s:\n%s", image, out)
		}
	}
}

// cosignKeyPairs makes two key pairs with the real cosign (password "pw"),
// in the directories signer and other of the directory returned, and
// returns signer's private key.
func cosignKeyPairs(t *testing.T) (dir string, private []byte) {
	t.Helper()
	dir = t.TempDir()
	for _, name := range []string{"signer", "other"} {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(filepath.Join(env.Root, "bin", "cosign"), "generate-key-pair")
		cmd.Dir, cmd.Env = filepath.Join(dir, name), append(os.Environ(), "COSIGN_PASSWORD=pw")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
		}
	}
	private, err := os.ReadFile(filepath.Join(dir, "signer", "cosign.key"))
	if err != nil {
		t.Fatal(err)
	}
	return dir, private
}

// verifyAttestations runs the real cosign verify-attestation on image for
// both predicates: accepted with signer's public key, refused with
// other's.
func verifyAttestations(t *testing.T, keys, image string, environ ...string) {
	t.Helper()
	verify := func(key, predicate string) (string, error) {
		cmd := exec.Command(filepath.Join(env.Root, "bin", "cosign"), "verify-attestation", "--key", key, "--type", predicate,
			"--insecure-ignore-tlog=true", "--allow-http-registry", image)
		cmd.Env = append(append(os.Environ(), "HOME="+keys), environ...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, predicate := range []string{"slsaprovenance1", "spdxjson"} {
		if out, err := verify(filepath.Join(keys, "signer", "cosign.pub"), predicate); err != nil {
			t.Errorf("cosign verify-attestation --type %s %s: %v\n%s", predicate, image, err, out)
		} else {
			t.Logf("cosign verify-attestation --type %s %s: accepted", predicate, image)
		}
		if out, err := verify(filepath.Join(keys, "other", "cosign.pub"), predicate); err == nil {
			t.Errorf("cosign verify-attestation --type %s with another key accepted %s:\n%s", predicate, image, out)
		}
	}
}

// checkSBOMDigests reads the SBOM out of the builder's signed SBOM
// attestation and checks, with ggcr (no buildsmith code), that every image
// it names by digest is in the registry, and every layer it names is in the
// repository of the buildpackage it names; and that it declares the license
// the buildpackage's label gives.
func checkSBOMDigests(t *testing.T, b *v1alpha1.Builder, auth authn.Authenticator) {
	t.Helper()
	var referrer string
	for _, a := range b.Status.Attestations {
		if a.PredicateType == attest.SPDXPredicateType {
			referrer = a.Referrer
		}
	}
	ref, err := name.NewDigest(referrer)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(ref, remote.WithAuth(auth))
	if err != nil {
		t.Fatal(err)
	}
	layers, _ := img.Layers()
	rc, err := layers[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var bundle struct {
		DSSEEnvelope struct{ Payload string } `json:"dsseEnvelope"`
	}
	if err := json.NewDecoder(rc).Decode(&bundle); err != nil {
		t.Fatal(err)
	}
	payload, _ := base64.StdEncoding.DecodeString(bundle.DSSEEnvelope.Payload)
	var statement struct {
		Predicate struct {
			Packages []struct {
				Name, VersionInfo, SourceInfo string
				LicenseDeclared               string
				Checksums                     []struct{ ChecksumValue string }
				ExternalRefs                  []struct{ ReferenceType, ReferenceLocator string }
			}
		}
	}
	if err := json.Unmarshal(payload, &statement); err != nil {
		t.Fatal(err)
	}
	checked, sboms, licensed := 0, 0, false
	for _, p := range statement.Predicate.Packages {
		if p.Name == helloBuildpack.ID {
			licensed = p.LicenseDeclared == helloBuildpack.Licenses[0]
		}
		for _, r := range p.ExternalRefs {
			if r.ReferenceType == attest.BaseSBOMReferenceType {
				checkBaseSBOM(t, r.ReferenceLocator, auth)
				sboms++
			}
		}
		var ref string
		switch {
		case strings.HasPrefix(p.VersionInfo, "sha256:"): // an image
			ref = p.Name + "@" + p.VersionInfo
			if _, err := remote.Head(mustDigest(t, ref), remote.WithAuth(auth)); err != nil {
				t.Errorf("the SBOM names %s, which the registry has not: %v", ref, err)
			}
		case strings.HasPrefix(p.SourceInfo, "from ") && len(p.Checksums) == 1: // a layer (a buildpack's) or an image (the lifecycle's)
			source := mustDigest(t, strings.TrimPrefix(p.SourceInfo, "from "))
			ref = source.Context().Digest("sha256:" + p.Checksums[0].ChecksumValue).String()
			if ref == source.String() {
				if _, err := remote.Head(source, remote.WithAuth(auth)); err != nil {
					t.Errorf("the SBOM names %s, which the registry has not: %v", ref, err)
				}
				break
			}
			layer, err := remote.Layer(mustDigest(t, ref), remote.WithAuth(auth))
			if err == nil {
				_, err = layer.Size()
			}
			if err != nil {
				t.Errorf("the SBOM names the layer %s of %s, which the registry has not: %v", ref, p.Name, err)
			}
		default:
			continue
		}
		checked++
	}
	if !licensed {
		t.Errorf("the SBOM does not declare %s's license %s, which its package's label gives: %+v", helloBuildpack.ID, helloBuildpack.Licenses[0], statement.Predicate.Packages)
	}
	if checked < 5 { // the builder, the build and run images, the lifecycle image, the buildpack's layer
		t.Errorf("checked %d of the SBOM's packages: %+v", checked, statement.Predicate.Packages)
	}
	if sboms < 2 { // the build image's and the run image's
		t.Errorf("the SBOM refers to %d SBOMs of the stack's images, want the build and the run image's", sboms)
	}
	t.Logf("every one of the %d digests the SBOM names is in the registry, and the %d stack SBOMs it refers to", checked, sboms)
}

// checkBaseSBOM checks, with ggcr, that the image a reference to a stack
// image's SBOM names (image#diffID) has the layer, and that the layer holds
// an SBOM where the CNB spec puts it.
func checkBaseSBOM(t *testing.T, locator string, auth authn.Authenticator) {
	t.Helper()
	image, diffID, ok := strings.Cut(locator, "#")
	hash, err := v1.NewHash(diffID)
	if !ok || err != nil {
		t.Errorf("a stack SBOM referred to as %q", locator)
		return
	}
	img, err := remote.Image(mustDigest(t, image), remote.WithAuth(auth))
	if err != nil {
		t.Errorf("the SBOM refers to a stack SBOM in %s, which the registry has not: %v", image, err)
		return
	}
	layer, err := img.LayerByDiffID(hash)
	if err != nil {
		t.Errorf("the SBOM refers to the layer %s of %s: %v", diffID, image, err)
		return
	}
	rc, err := layer.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Errorf("the layer %s of %s holds no /cnb/sbom/bom.*.json (%v)", diffID, image, err)
			return
		}
		if strings.HasPrefix(h.Name, "cnb/sbom/bom.") && strings.HasSuffix(h.Name, ".json") {
			return
		}
	}
}

func mustDigest(t *testing.T, ref string) name.Digest {
	t.Helper()
	d, err := name.NewDigest(ref)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
