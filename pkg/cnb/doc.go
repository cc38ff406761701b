// Package cnb is the Cloud Native Buildpacks knowledge of buildsmith, as
// pure functions over image configs and labels: what a stack's images say
// about it, which buildpacks a buildpackage holds, how an order resolves
// against a store, and how a builder image (and an index of them) is
// assembled. No registry or Kubernetes access happens here; errors
// are classified with package failure.
package cnb
