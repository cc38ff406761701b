// Package receiver reads registries' push notifications: which repositories
// were pushed to, once the sender has shown that it holds the Receiver's
// token. A notification is a hint and nothing in it is trusted beyond the
// repository it names — the controller re-reads every image it is woken
// for — and it is bounded before it is read: its size (MaxBody, which the
// server enforces), the values in it (maxContainers, maxStrings: a MiB of
// JSON may decode into a hundred times its size) and the pushes taken from
// it (MaxPushes).
package receiver

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
)

// Push is a repository a notification says was pushed to.
type Push struct {
	// Repository is as Repository names it: index.docker.io/library/ubuntu,
	// registry.example.com:5000/team/run.
	Repository string
	// Tag is the tag pushed; "" when the notification names none (a push
	// by digest).
	Tag string
}

// MaxBody bounds a notification's body: the largest published samples are
// GitHub's, about 20 KiB.
const MaxBody = 1 << 20

// MaxPushes bounds the pushes one notification may announce (the
// distribution registry batches its events); the rest are dropped.
const MaxPushes = 64

// Errors of a notification, each an HTTP status for the server.
var (
	// ErrUnauthorized: the sender did not show the token (401).
	ErrUnauthorized = errors.New("the notification does not carry the Receiver's token or signature")
	// ErrMalformed: not the notification the Receiver's type expects (400).
	ErrMalformed = errors.New("not a notification of the Receiver's type")
)

// WebhookPath is where the Receiver named name in namespace takes its
// notifications: /hook/ and the SHA-256 of the token, the name and the
// namespace, in hex, as Flux's Receivers make theirs (so that one path
// reveals neither the token nor another Receiver's path).
func WebhookPath(token []byte, name, namespace string) string {
	h := sha256.New()
	h.Write(token)
	h.Write([]byte(name))
	h.Write([]byte(namespace))
	return "/hook/" + hex.EncodeToString(h.Sum(nil))
}

// Read checks that a notification of type typ — its header and body —
// comes from whoever holds token, as typ's senders show it, and returns the
// pushes it announces: none for an event that is not a push (a ping, a
// deletion, a blob upload).
func Read(typ string, token []byte, header http.Header, body []byte) ([]Push, error) {
	format, ok := formats[typ]
	if !ok {
		return nil, fmt.Errorf("receiver type %q: %w", typ, ErrMalformed)
	}
	if format.authenticate != nil {
		if err := format.authenticate(token, header, body); err != nil {
			return nil, err
		}
	}
	if err := checkShape(body); err != nil {
		return nil, err
	}
	pushes, err := format.read(header, body)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return dedupe(pushes), nil
}

// format is how one type of sender writes and authenticates.
type format struct {
	authenticate func(token []byte, header http.Header, body []byte) error // nil: the path is the secret
	read         func(header http.Header, body []byte) ([]Push, error)
}

var formats = map[string]format{
	v1alpha1.ReceiverDistribution: {authenticate: bearer, read: readDistribution},
	v1alpha1.ReceiverACR:          {authenticate: bearer, read: readACR},
	v1alpha1.ReceiverHarbor:       {authenticate: harborAuthorization, read: readHarbor},
	v1alpha1.ReceiverGitHub:       {authenticate: githubSignature, read: readGitHub},
	v1alpha1.ReceiverGenericHMAC:  {authenticate: genericSignature, read: readGeneric},
	v1alpha1.ReceiverDockerHub:    {read: readDockerHub},
	v1alpha1.ReceiverQuay:         {read: readQuay},
	v1alpha1.ReceiverGCR:          {read: readGCR},
	v1alpha1.ReceiverGeneric:      {read: readGeneric},
}

// Limits of a notification's JSON, counted before it is decoded: the
// published samples hold at most about 60 objects and arrays and 700
// strings.
const (
	maxContainers = 4096  // objects and arrays
	maxStrings    = 16384 // strings, keys included
)

// checkShape refuses a body of more values than a notification has: each
// decodes into a struct or a string header far larger than its bytes.
// Brackets and quotes inside strings are counted too, which only makes the
// bound stricter.
func checkShape(body []byte) error {
	containers := bytes.Count(body, []byte("{")) + bytes.Count(body, []byte("["))
	if strings := bytes.Count(body, []byte(`"`)) / 2; containers > maxContainers || strings > maxStrings {
		return fmt.Errorf("%w: %d objects and arrays, %d strings; a notification has at most %d and %d",
			ErrMalformed, containers, strings, maxContainers, maxStrings)
	}
	return nil
}

// Repository is the repository an image reference names, as pushes name
// it: the registry's host in lower case, without HTTPS's port 443, and
// Docker Hub's hosts as index.docker.io; false when ref does not parse.
// The objects' references and the notifications' repositories both go
// through it, so that they meet.
func Repository(ref string) (string, bool) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", false
	}
	return repositoryName(r.Context()), true
}

func repositoryName(r name.Repository) string {
	host := strings.TrimSuffix(strings.ToLower(r.RegistryStr()), ":443")
	switch host {
	case "docker.io", "registry-1.docker.io", "registry.hub.docker.com":
		host = name.DefaultRegistry
	}
	return host + "/" + r.RepositoryStr()
}

// push is the Push of the repository named repo (host and path) and tag,
// or false when repo names none.
func push(repo, tag string) (Push, bool) {
	r, err := name.NewRepository(repo)
	if err != nil {
		return Push{}, false
	}
	if _, err := name.NewTag(r.Name()+":"+tag, name.StrictValidation); err != nil {
		tag = "" // a digest, or nothing, where a tag goes
	}
	return Push{Repository: repositoryName(r), Tag: tag}, true
}

// pushOfReference is the Push of an image reference, REPO:TAG or
// REPO@DIGEST.
func pushOfReference(ref string) (Push, bool) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return Push{}, false
	}
	tag := ""
	if t, ok := r.(name.Tag); ok {
		tag = t.TagStr()
	}
	return Push{Repository: repositoryName(r.Context()), Tag: tag}, true
}

// dedupe drops repeated pushes and keeps at most MaxPushes.
func dedupe(pushes []Push) []Push {
	var out []Push
	for _, p := range pushes {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
		if len(out) == MaxPushes {
			break
		}
	}
	return out
}
