//go:build tools

// Package tools pins cosign, which the e2e tests run to verify the
// signatures the controller pushes (cosign verify --key).
package tools

import _ "github.com/sigstore/cosign/v3/cmd/cosign"
