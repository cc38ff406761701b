//go:build tools

// Package tools pins promtool, which the tests run to check and unit-test the
// chart's alerting rules (test/monitoring).
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
