//go:build tools

// Package tools pins the CNB lifecycle that tests and the demo run; the
// lifecycle's own go.mod decides its dependencies, apart from ours.
package tools

import _ "github.com/buildpacks/lifecycle/cmd/lifecycle"
