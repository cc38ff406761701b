//go:build tools

// Package tools pins krew, which the e2e tests run to install the release's
// kubectl plugin from its krew manifest as a user would.
package tools

import _ "sigs.k8s.io/krew/cmd/krew"
