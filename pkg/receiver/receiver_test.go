package receiver

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
)

const token = "s3cr3t-token"

func sample(t *testing.T, file string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func signed(newHash func() hash.Hash, algorithm string, key string, body []byte) string {
	mac := hmac.New(newHash, []byte(key))
	mac.Write(body)
	return algorithm + "=" + hex.EncodeToString(mac.Sum(nil))
}

func headers(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

// pubsub wraps a notification in a Pub/Sub push request's envelope.
func pubsub(notification []byte) []byte {
	return fmt.Appendf(nil, `{"message": {"attributes": {}, "data": %q, "messageId": "2070443601311540",
 "publishTime": "2021-02-26T19:13:55.749Z"}, "subscription": "projects/myproject/subscriptions/mysubscription"}`,
		base64.StdEncoding.EncodeToString(notification))
}

// TestRead: each type's published sample, with its sender's authentication,
// gives the pushes it announces; the samples' other events are none.
func TestRead(t *testing.T) {
	github, githubPackage := sample(t, "github.json"), sample(t, "github-package.json")
	generic := []byte(`{"repository": "registry.example.com/stacks/run", "tag": "jammy"}`)
	for _, tc := range []struct {
		name, typ string
		header    http.Header
		body      []byte
		want      []Push
	}{
		// Of the envelope's three events, the first pushes a manifest (by
		// digest: no tag); the others upload blobs. Both of its hosts.
		{"distribution", v1alpha1.ReceiverDistribution, headers("Authorization", "Bearer "+token), sample(t, "distribution.json"),
			[]Push{{"registrycluster.local/library/test", ""}, {"example.com/library/test", ""}}},
		{"acr", v1alpha1.ReceiverACR, headers("Authorization", "Bearer "+token), sample(t, "acr.json"),
			[]Push{{"myregistry.azurecr.io/hello-world", "v1"}}},
		{"acr, unmasked", v1alpha1.ReceiverACR, headers("Authorization", "Bearer "+token), sample(t, "acr-unmasked.json"),
			[]Push{{"myregistry.azurecr.io/hello-world", "v1"}}},
		{"harbor", v1alpha1.ReceiverHarbor, headers("Authorization", token), sample(t, "harbor.json"),
			[]Push{{"hub.harbor.com/test-webhook/debian", "latest"}}},
		{"harbor, by digest", v1alpha1.ReceiverHarbor, headers("Authorization", "Bearer "+token), sample(t, "harbor-by-digest.json"),
			[]Push{{"localhost/harbor/alpine", ""}}},
		{"dockerhub", v1alpha1.ReceiverDockerHub, nil, sample(t, "dockerhub.json"),
			[]Push{{"index.docker.io/svendowideit/testhook", "latest"}}},
		{"quay", v1alpha1.ReceiverQuay, nil, sample(t, "quay.json"), []Push{{"quay.io/mynamespace/repository", "latest"}}},
		{"quay, updated_tags an object", v1alpha1.ReceiverQuay, nil, sample(t, "quay-legacy.json"),
			[]Push{{"quay.io/mynamespace/repository", "latest"}}},
		// GitHub's docs' example names no tag and no package URL: the
		// container of its owner and name.
		{"github registry_package", v1alpha1.ReceiverGitHub,
			headers("X-GitHub-Event", "registry_package", "X-Hub-Signature-256", signed(sha256.New, "sha256", token, github)), github,
			[]Push{{"ghcr.io/codertocat/hello-world-npm", ""}}},
		{"github package, a real delivery", v1alpha1.ReceiverGitHub,
			headers("X-GitHub-Event", "package", "X-Hub-Signature-256", signed(sha256.New, "sha256", token, githubPackage)), githubPackage,
			[]Push{{"ghcr.io/theryangeary/www", "0e2a89b"}}},
		{"github ping", v1alpha1.ReceiverGitHub,
			headers("X-GitHub-Event", "ping", "X-Hub-Signature-256", signed(sha256.New, "sha256", token, []byte(`{"zen":"x"}`))), []byte(`{"zen":"x"}`), nil},
		{"gcr", v1alpha1.ReceiverGCR, nil, pubsub(sample(t, "gcr-notification.json")),
			[]Push{{"us-west1-docker.pkg.dev/my-project/my-repo/hello-world", "1.1"}}},
		{"gcr by digest", v1alpha1.ReceiverGCR, nil,
			pubsub([]byte(`{"action":"INSERT","digest":"gcr.io/my-project/hello-world@sha256:6ec128e26cd5..."}`)),
			[]Push{{"gcr.io/my-project/hello-world", ""}}},
		{"gcr delete", v1alpha1.ReceiverGCR, nil,
			pubsub([]byte(`{"action":"DELETE","tag":"gcr.io/my-project/hello-world:1.1"}`)), nil},
		{"generic", v1alpha1.ReceiverGeneric, nil, generic, []Push{{"registry.example.com/stacks/run", "jammy"}}},
		{"generic-hmac sha256", v1alpha1.ReceiverGenericHMAC, headers("X-Signature", signed(sha256.New, "sha256", token, generic)), generic,
			[]Push{{"registry.example.com/stacks/run", "jammy"}}},
		{"generic-hmac sha512", v1alpha1.ReceiverGenericHMAC, headers("X-Signature", signed(sha512.New, "sha512", token, generic)), generic,
			[]Push{{"registry.example.com/stacks/run", "jammy"}}},
		{"generic, Docker Hub's default registry", v1alpha1.ReceiverGeneric, nil, []byte(`{"repository": "ubuntu"}`),
			[]Push{{"index.docker.io/library/ubuntu", ""}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Read(tc.typ, []byte(token), tc.header, tc.body)
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("Read = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// TestReadRefuses: a notification without the token, with another one, or
// signed with another key (or over another body) is unauthorized, whatever
// it says; one that is not the type's is malformed.
func TestReadRefuses(t *testing.T) {
	generic := []byte(`{"repository": "registry.example.com/stacks/run"}`)
	distribution := sample(t, "distribution.json")
	github := sample(t, "github-package.json")
	for _, tc := range []struct {
		name, typ string
		token     string
		header    http.Header
		body      []byte
		want      error
	}{
		{"no Authorization", v1alpha1.ReceiverDistribution, token, nil, distribution, ErrUnauthorized},
		{"another token", v1alpha1.ReceiverDistribution, token, headers("Authorization", "Bearer other"), distribution, ErrUnauthorized},
		{"the token without Bearer", v1alpha1.ReceiverACR, token, headers("Authorization", token), sample(t, "acr.json"), ErrUnauthorized},
		{"a prefix of the token", v1alpha1.ReceiverHarbor, token, headers("Authorization", token[:5]), sample(t, "harbor.json"), ErrUnauthorized},
		{"an empty token matches nothing", v1alpha1.ReceiverDistribution, "", headers("Authorization", "Bearer "), distribution, ErrUnauthorized},
		{"unsigned", v1alpha1.ReceiverGitHub, token, headers("X-GitHub-Event", "package"), github, ErrUnauthorized},
		{"signed with another key", v1alpha1.ReceiverGitHub, token,
			headers("X-GitHub-Event", "package", "X-Hub-Signature-256", signed(sha256.New, "sha256", "other", github)), github, ErrUnauthorized},
		{"signed over another body", v1alpha1.ReceiverGenericHMAC, token,
			headers("X-Signature", signed(sha256.New, "sha256", token, []byte(`{"repository": "x.example/y"}`))), generic, ErrUnauthorized},
		{"sha1", v1alpha1.ReceiverGenericHMAC, token, headers("X-Signature", "sha1=0000"), generic, ErrUnauthorized},
		{"not hex", v1alpha1.ReceiverGenericHMAC, token, headers("X-Signature", "sha256=zz"), generic, ErrUnauthorized},
		{"not JSON", v1alpha1.ReceiverGeneric, token, nil, []byte("<html>"), ErrMalformed},
		{"Pub/Sub data not base64", v1alpha1.ReceiverGCR, token, nil, []byte(`{"message": {"data": "%%%"}}`), ErrMalformed},
		{"an unknown type", "gitlab", token, nil, generic, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Read(tc.typ, []byte(tc.token), tc.header, tc.body)
			if !errors.Is(err, tc.want) || got != nil {
				t.Errorf("Read = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// TestReadBoundsPushes: an envelope of many events gives at most
// MaxPushes pushes, each once.
func TestReadBoundsPushes(t *testing.T) {
	body := []byte(`{"events": [`)
	for i := range 150 {
		if i > 0 {
			body = append(body, ',')
		}
		body = fmt.Appendf(body, `{"action": "push", "target": {"mediaType": "application/vnd.oci.image.manifest.v1+json",
 "repository": "team/app-%d", "tag": "1"}, "request": {"host": "registry.example.com"}}`, i%(2*MaxPushes))
		body = fmt.Appendf(body, `,{"action": "push", "target": {"mediaType": "application/vnd.oci.image.manifest.v1+json",
 "repository": "team/app-0", "tag": "1"}, "request": {"host": "registry.example.com"}}`)
	}
	body = append(body, "]}"...)
	got, err := Read(v1alpha1.ReceiverDistribution, []byte(token), headers("Authorization", "Bearer "+token), body)
	if err != nil || len(got) != MaxPushes || got[0] != (Push{"registry.example.com/team/app-0", "1"}) || got[1].Repository != "registry.example.com/team/app-1" {
		t.Errorf("Read: %d pushes (%v…), %v; want %d, each once", len(got), got[:min(len(got), 2)], err, MaxPushes)
	}
}

// TestReadBoundsValues: a body of more objects or strings than a
// notification has is refused before it is decoded, whatever it says.
func TestReadBoundsValues(t *testing.T) {
	events := []byte(`{"events": [`)
	for i := range maxContainers {
		if i > 0 {
			events = append(events, ',')
		}
		events = append(events, "{}"...)
	}
	events = append(events, "]}"...)
	tags := []byte(`{"docker_url": "quay.io/a/b", "updated_tags": [`)
	for i := range maxStrings {
		if i > 0 {
			tags = append(tags, ',')
		}
		tags = append(tags, `""`...)
	}
	tags = append(tags, "]}"...)
	for _, tc := range []struct {
		name, typ string
		header    http.Header
		body      []byte
	}{
		{"4,096 events", v1alpha1.ReceiverDistribution, headers("Authorization", "Bearer "+token), events},
		{"16,384 tags", v1alpha1.ReceiverQuay, nil, tags},
	} {
		if len(tc.body) > MaxBody {
			t.Fatalf("%s: %d bytes, over MaxBody: the server refuses it before", tc.name, len(tc.body))
		}
		if got, err := Read(tc.typ, []byte(token), tc.header, tc.body); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, %v; want ErrMalformed", tc.name, got, err)
		}
	}
}

// TestRepository: objects' references and notifications' repositories
// meet whatever host spelling each uses.
func TestRepository(t *testing.T) {
	for ref, want := range map[string]string{
		"ubuntu":                         "index.docker.io/library/ubuntu",
		"docker.io/library/ubuntu:24.04": "index.docker.io/library/ubuntu",
		"registry-1.docker.io/paketobuildpacks/run":                             "index.docker.io/paketobuildpacks/run",
		"Registry.Example.com:443/stacks/run@sha256:" + strings.Repeat("a", 64): "registry.example.com/stacks/run",
		"registry.example.com:5000/stacks/run:1":                                "registry.example.com:5000/stacks/run",
	} {
		if got, ok := Repository(ref); !ok || got != want {
			t.Errorf("Repository(%s) = %s, %v; want %s", ref, got, ok, want)
		}
	}
	if _, ok := Repository("UPPER/case"); ok {
		t.Error("Repository of an invalid reference: ok")
	}
	// A notification's own spellings.
	got, err := Read(v1alpha1.ReceiverGeneric, nil, nil, []byte(`{"repository": "REGISTRY.example.com:443/stacks/run"}`))
	if err != nil || len(got) != 1 || got[0].Repository != "registry.example.com/stacks/run" {
		t.Errorf("Read of an upper-case host with port 443: %v, %v", got, err)
	}
}

// TestWebhookPath: Flux's path for a Receiver, SHA-256 of token, name and
// namespace.
func TestWebhookPath(t *testing.T) {
	sum := sha256.Sum256([]byte("tokenappteam-a"))
	if got, want := WebhookPath([]byte("token"), "app", "team-a"), "/hook/"+hex.EncodeToString(sum[:]); got != want {
		t.Errorf("WebhookPath = %s, want %s", got, want)
	}
	if WebhookPath([]byte("token"), "app", "team-a") == WebhookPath([]byte("token"), "app", "team-b") {
		t.Error("two Receivers of one token and name share a path")
	}
}
