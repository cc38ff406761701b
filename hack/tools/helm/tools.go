//go:build tools

// Package tools pins helm, for linting and installing the chart in tests.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
