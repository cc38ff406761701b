package receiver

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/hex"
	"hash"
	"net/http"
	"strings"
)

// equal compares a secret in constant time.
func equal(got string, token []byte) bool {
	return len(token) > 0 && subtle.ConstantTimeCompare([]byte(got), token) == 1
}

// bearer: Authorization: Bearer TOKEN, as the distribution registry's and
// ACR's webhooks send the headers they are configured with.
func bearer(token []byte, header http.Header, _ []byte) error {
	got, ok := strings.CutPrefix(header.Get("Authorization"), "Bearer ")
	if !ok || !equal(got, token) {
		return ErrUnauthorized
	}
	return nil
}

// harborAuthorization: Harbor sends its webhook's "auth header" as the
// Authorization header, as configured: the token itself (or Bearer TOKEN).
func harborAuthorization(token []byte, header http.Header, body []byte) error {
	got := header.Get("Authorization")
	if equal(got, token) {
		return nil
	}
	return bearer(token, header, body)
}

// githubSignature: X-Hub-Signature-256: sha256=HEX, the HMAC-SHA256 of the
// body keyed by the webhook's secret.
func githubSignature(token []byte, header http.Header, body []byte) error {
	return checkHMAC(token, header.Get("X-Hub-Signature-256"), body, map[string]func() hash.Hash{"sha256": sha256.New})
}

// genericSignature: X-Signature: sha256=HEX or sha512=HEX, as Flux's
// generic-hmac Receivers take it (not sha1: too weak to take).
func genericSignature(token []byte, header http.Header, body []byte) error {
	return checkHMAC(token, header.Get("X-Signature"), body, map[string]func() hash.Hash{"sha256": sha256.New, "sha512": sha512.New})
}

// checkHMAC checks signature, ALGORITHM=HEX, against the HMAC of body
// keyed by token with one of algorithms.
func checkHMAC(token []byte, signature string, body []byte, algorithms map[string]func() hash.Hash) error {
	algorithm, sum, _ := strings.Cut(signature, "=")
	newHash, ok := algorithms[algorithm]
	if !ok || len(token) == 0 {
		return ErrUnauthorized
	}
	got, err := hex.DecodeString(sum)
	if err != nil {
		return ErrUnauthorized
	}
	mac := hmac.New(newHash, token)
	mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return ErrUnauthorized
	}
	return nil
}
