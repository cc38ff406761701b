//go:build tools

// Package tools pins ko, which builds the controller image without Docker.
package tools

import _ "github.com/google/ko"
