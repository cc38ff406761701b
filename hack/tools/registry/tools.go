//go:build tools

// Package tools pins the reference OCI registry (distribution) that the demo
// and the e2e tests run, with its own dependencies, apart from ours.
package tools

import _ "github.com/distribution/distribution/v3/cmd/registry"
