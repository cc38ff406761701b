package cosign

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"io"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/test/cosigntest"
)

// newKey returns private (nil: a new ECDSA P-256 key) encrypted with
// password, as cosign generate-key-pair writes it.
func newKey(t *testing.T, password string, private any) []byte {
	t.Helper()
	if private == nil {
		var err error
		if private, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			t.Fatal(err)
		}
	}
	return cosigntest.Encrypt(t, private, password)
}

func TestParseKey(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	good := newKey(t, "s3cret", nil)
	plainDER, _ := x509.MarshalPKCS8PrivateKey(p384)
	for _, tc := range []struct {
		name     string
		key      []byte
		password string
		wantErr  string // "" for a key
	}{
		{name: "ECDSA P-256, as cosign generate-key-pair makes", key: good, password: "s3cret"},
		{name: "ECDSA P-384", key: newKey(t, "", p384)},
		{name: "the COSIGN PEM type of older cosign", key: []byte(strings.ReplaceAll(string(good), "SIGSTORE", "COSIGN")), password: "s3cret"},
		{name: "wrong password", key: good, password: "guess",
			wantErr: "secret apps/signing: cosign.key does not decrypt with cosign.password (wrong password, or not a cosign key)"},
		{name: "not PEM", key: []byte("hello"), wantErr: "secret apps/signing: cosign.key is not PEM"},
		{name: "an unencrypted key", key: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: plainDER}),
			wantErr: `secret apps/signing: cosign.key is a "PRIVATE KEY" PEM block, not an encrypted cosign private key`},
		{name: "an RSA key", key: newKey(t, "x", rsaKey), password: "x",
			wantErr: "secret apps/signing: cosign.key is a *rsa.PrivateKey key; buildsmith signs with ECDSA keys (what cosign generate-key-pair makes)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, err := ParseKey("secret apps/signing", tc.key, []byte(tc.password))
			if tc.wantErr == "" {
				if err != nil || !strings.HasPrefix(key.ID, "sha256:") || len(key.ID) != 71 {
					t.Fatalf("ParseKey: %v, key ID %v", err, key)
				}
				return
			}
			f, ok := failure.As(err)
			if !ok || f.Class != failure.Permanent || f.Reason != ReasonInvalidSigningKey || err.Error() != tc.wantErr {
				t.Errorf("error %v (%+v), want Permanent %s %q", err, f, ReasonInvalidSigningKey, tc.wantErr)
			}
		})
	}
}

func TestPayloadAndTag(t *testing.T) {
	image, err := name.NewDigest("registry.example.com/builders/go@sha256:" + strings.Repeat("ab", 32))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"critical":{"identity":{"docker-reference":"registry.example.com/builders/go"},` +
		`"image":{"docker-manifest-digest":"sha256:` + strings.Repeat("ab", 32) + `"},` +
		`"type":"cosign container image signature"},"optional":null}`
	if got := string(Payload(image)); got != want {
		t.Errorf("payload:\n%s\nwant:\n%s", got, want)
	}
	if got := SignatureTag(image.Context(), image).String(); got != "registry.example.com/builders/go:sha256-"+strings.Repeat("ab", 32)+".sig" {
		t.Errorf("tag %s", got)
	}
	elsewhere, _ := name.NewRepository("other.example.com/signatures")
	if got := SignatureTag(elsewhere, image).String(); got != "other.example.com/signatures:sha256-"+strings.Repeat("ab", 32)+".sig" {
		t.Errorf("tag in another repository: %s", got)
	}
}

// TestSignatureImage: a signature verifies with its key only; the image
// holds the payload as a layer with the signature annotation; a second
// signer's signature is appended, and Signed finds each signer's.
func TestSignatureImage(t *testing.T) {
	first, err := ParseKey("first", newKey(t, "", nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	second, err := ParseKey("second", newKey(t, "", nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	image, err := name.NewDigest("registry.example.com/b@sha256:" + strings.Repeat("cd", 32))
	if err != nil {
		t.Fatal(err)
	}
	payload := Payload(image)
	sig, err := first.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	if !first.Verifies(payload, sig) || second.Verifies(payload, sig) || first.Verifies([]byte("other"), sig) {
		t.Fatal("a signature verifies with the wrong key or payload, or not with its own")
	}

	for _, docker := range []bool{false, true} {
		img, err := SignatureImage(nil, []Signature{{Payload: payload, Signature: sig}}, docker)
		if err != nil {
			t.Fatal(err)
		}
		m, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		wantManifest, wantConfig := types.OCIManifestSchema1, types.OCIConfigJSON
		if docker {
			wantManifest, wantConfig = types.DockerManifestSchema2, types.DockerConfigJSON
		}
		if m.MediaType != wantManifest || m.Config.MediaType != wantConfig || len(m.Layers) != 1 ||
			m.Layers[0].MediaType != PayloadMediaType || m.Layers[0].Annotations[SignatureAnnotation] != sig {
			t.Errorf("docker %v: manifest %+v", docker, m)
		}
		layers, _ := img.Layers()
		rc, err := layers[0].Compressed()
		if err != nil {
			t.Fatal(err)
		}
		content, _ := io.ReadAll(rc)
		_ = rc.Close()
		if string(content) != string(payload) {
			t.Errorf("docker %v: layer holds %q, want the payload", docker, content)
		}
		if !Signed(m, payload, first) || Signed(m, payload, second) || Signed(nil, payload, first) {
			t.Errorf("Signed: first %v, second %v", Signed(m, payload, first), Signed(m, payload, second))
		}

		// A second signer appends.
		sig2, _ := second.Sign(payload)
		both, err := SignatureImage(img, []Signature{{Payload: payload, Signature: sig2}}, docker)
		if err != nil {
			t.Fatal(err)
		}
		m2, _ := both.Manifest()
		if len(m2.Layers) != 2 || m2.MediaType != wantManifest || !Signed(m2, payload, first) || !Signed(m2, payload, second) {
			t.Errorf("docker %v: after the second signer: %+v", docker, m2)
		}
	}
}
