// Package monitoring tests what the chart ships for monitoring the
// controller — the alerting rules of its PrometheusRule and the Grafana
// dashboard of its ConfigMap — as `helm template` renders them: the rules
// with promtool (bin/promtool, hack/tools.sh) against series named as the
// controller exports them, the dashboard's queries against the same names.
package monitoring

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/otlptranslator"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// repoRoot is the directory holding go.mod, above the test's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// tool is bin/NAME, built by hack/tools.sh (make test builds it first).
func tool(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join(repoRoot(t), "bin", name)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s: %v (build it with hack/tools.sh %s)", path, err, name)
	}
	return path
}

// render is `helm template` of the chart (release buildsmith, namespace
// buildsmith) with args, by kind/name.
func render(t *testing.T, args ...string) map[string]unstructured.Unstructured {
	t.Helper()
	root := repoRoot(t)
	tmp := t.TempDir()
	cmd := exec.Command(tool(t, "helm"), append([]string{"template", "buildsmith", "charts/buildsmith", "--namespace", "buildsmith"}, args...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+tmp, "HELM_CONFIG_HOME="+tmp, "HELM_DATA_HOME="+tmp)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template %q: %v\n%s", args, err, stderr.String())
	}
	objects := map[string]unstructured.Unstructured{}
	for _, doc := range strings.Split(strings.TrimPrefix(string(out), "---\n"), "\n---\n") {
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("helm template %q: %v\n%s", args, err, doc)
		}
		if u.GetKind() != "" {
			objects[u.GetKind()+"/"+u.GetName()] = u
		}
	}
	return objects
}

// ofKind are the rendered objects of a kind.
func ofKind(objects map[string]unstructured.Unstructured, kind string) []unstructured.Unstructured {
	var found []unstructured.Unstructured
	for key, u := range objects {
		if strings.HasPrefix(key, kind+"/") {
			found = append(found, u)
		}
	}
	return found
}

// instrument is a metric instrument the controller's code creates.
type instrument struct {
	kind, name, unit string // kind: the otel Meter method, e.g. Int64ObservableGauge
	at               string // file:offset, for messages
}

var (
	instrumentCall = regexp.MustCompile(`\b((?:Int64|Float64)(?:Observable)?(?:Counter|UpDownCounter|Histogram|Gauge))\(\s*"(buildsmith\.[^"]+)"`)
	unitOption     = regexp.MustCompile(`WithUnit\("([^"]*)"\)`)
)

// instruments are the buildsmith.* instruments created in the non-test Go
// files of cmd/ and pkg/: the source of every metric the controller exports
// beside knative's own.
func instruments(t *testing.T) []instrument {
	t.Helper()
	root := repoRoot(t)
	var found []instrument
	for _, dir := range []string{"cmd", "pkg"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			for _, m := range instrumentCall.FindAllSubmatchIndex(src, -1) {
				call := string(src[m[0]:callEnd(src, m[1])])
				in := instrument{kind: string(src[m[2]:m[3]]), name: string(src[m[4]:m[5]]), at: rel}
				if u := unitOption.FindStringSubmatch(call); u != nil {
					in.unit = u[1]
				}
				found = append(found, in)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(found) == 0 {
		t.Fatal("no buildsmith.* metric instruments found in cmd/ or pkg/")
	}
	return found
}

// callEnd is the end of the call whose arguments start at from (just past
// its opening parenthesis' first argument): the closing parenthesis that
// balances it, string literals skipped.
func callEnd(src []byte, from int) int {
	depth := 1
	for i := from; i < len(src); i++ {
		switch src[i] {
		case '"':
			for i++; i < len(src) && src[i] != '"'; i++ {
				if src[i] == '\\' {
					i++
				}
			}
		case '`':
			for i++; i < len(src) && src[i] != '`'; i++ {
			}
		case '(':
			depth++
		case ')':
			if depth--; depth == 0 {
				return i + 1
			}
		}
	}
	return len(src)
}

// exported are the names of the series the controller exports for its
// instruments: each instrument is made again, with its kind and unit, in an
// OpenTelemetry meter provider with the Prometheus exporter set up as knative
// sets it up for metrics-protocol prometheus (the translation strategy of
// knative.dev/pkg/observability/metrics), and the names are what that
// exporter serves (a histogram's _bucket, _sum and _count).
func exported(t *testing.T) map[string]instrument {
	t.Helper()
	ctx := context.Background()
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
	if err != nil {
		t.Fatal(err)
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer func() { _ = provider.Shutdown(ctx) }()
	meter := provider.Meter("test/monitoring")
	ins := instruments(t)
	for _, in := range ins {
		unit := metric.WithUnit(in.unit)
		int64s := metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error { o.Observe(1); return nil })
		float64s := metric.WithFloat64Callback(func(_ context.Context, o metric.Float64Observer) error { o.Observe(1); return nil })
		switch in.kind {
		case "Int64Counter":
			c, err := meter.Int64Counter(in.name, unit)
			fatalIf(t, in, err)
			c.Add(ctx, 1)
		case "Float64Counter":
			c, err := meter.Float64Counter(in.name, unit)
			fatalIf(t, in, err)
			c.Add(ctx, 1)
		case "Int64UpDownCounter":
			c, err := meter.Int64UpDownCounter(in.name, unit)
			fatalIf(t, in, err)
			c.Add(ctx, 1)
		case "Float64UpDownCounter":
			c, err := meter.Float64UpDownCounter(in.name, unit)
			fatalIf(t, in, err)
			c.Add(ctx, 1)
		case "Int64Histogram":
			h, err := meter.Int64Histogram(in.name, unit)
			fatalIf(t, in, err)
			h.Record(ctx, 1)
		case "Float64Histogram":
			h, err := meter.Float64Histogram(in.name, unit)
			fatalIf(t, in, err)
			h.Record(ctx, 1)
		case "Int64Gauge":
			g, err := meter.Int64Gauge(in.name, unit)
			fatalIf(t, in, err)
			g.Record(ctx, 1)
		case "Float64Gauge":
			g, err := meter.Float64Gauge(in.name, unit)
			fatalIf(t, in, err)
			g.Record(ctx, 1)
		case "Int64ObservableCounter":
			_, err := meter.Int64ObservableCounter(in.name, unit, int64s)
			fatalIf(t, in, err)
		case "Float64ObservableCounter":
			_, err := meter.Float64ObservableCounter(in.name, unit, float64s)
			fatalIf(t, in, err)
		case "Int64ObservableUpDownCounter":
			_, err := meter.Int64ObservableUpDownCounter(in.name, unit, int64s)
			fatalIf(t, in, err)
		case "Float64ObservableUpDownCounter":
			_, err := meter.Float64ObservableUpDownCounter(in.name, unit, float64s)
			fatalIf(t, in, err)
		case "Int64ObservableGauge":
			_, err := meter.Int64ObservableGauge(in.name, unit, int64s)
			fatalIf(t, in, err)
		case "Float64ObservableGauge":
			_, err := meter.Float64ObservableGauge(in.name, unit, float64s)
			fatalIf(t, in, err)
		default:
			t.Fatalf("%s: %s of %s: an instrument kind this test does not know", in.at, in.name, in.kind)
		}
	}
	families, err := registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]instrument{}
	for _, in := range ins {
		byName[strings.ReplaceAll(in.name, ".", "_")] = in
	}
	names := map[string]instrument{}
	for _, f := range families {
		name := f.GetName()
		if !strings.HasPrefix(name, "buildsmith_") {
			continue // the exporter's target_info
		}
		in := instrumentOf(byName, name)
		if f.GetType() == dto.MetricType_HISTOGRAM {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[name+suffix] = in
			}
			continue
		}
		names[name] = in
	}
	if len(names) < len(ins) {
		t.Fatalf("the exporter served %d buildsmith series names for %d instruments: %v", len(names), len(ins), sorted(names))
	}
	return names
}

// instrumentOf is the instrument an exported family name comes from: its
// name with dots made underscores, before the suffixes the exporter adds.
func instrumentOf(byName map[string]instrument, family string) instrument {
	for name := family; name != ""; {
		if in, ok := byName[name]; ok {
			return in
		}
		i := strings.LastIndex(name, "_")
		if i < 0 {
			break
		}
		name = name[:i]
	}
	return instrument{name: family}
}

func fatalIf(t *testing.T, in instrument, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %s: %v", in.at, in.name, err)
	}
}

func sorted[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

var scrapedName = regexp.MustCompile(`"(buildsmith_[a-z0-9_]+)"`)

// TestExportedNames: the names this package derives from the code are those
// the end-to-end tests find when they scrape the real controller
// (test/e2e: TestPrometheusMetrics, TestReplicas…), so that the rules and the
// dashboard are checked against names that exist.
func TestExportedNames(t *testing.T) {
	names := exported(t)
	t.Logf("exported: %v", sorted(names))
	root := repoRoot(t)
	files, err := filepath.Glob(filepath.Join(root, "test", "e2e", "*_test.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("test/e2e: %v %v", files, err)
	}
	scraped := map[string]bool{}
	var e2eSources string
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		e2eSources += string(src)
		for _, m := range scrapedName.FindAllStringSubmatch(string(src), -1) {
			scraped[m[1]] = true
		}
	}
	if len(scraped) < 5 {
		t.Fatalf("test/e2e asserts only %v: too few names to check against", sorted(scraped))
	}
	for _, name := range sorted(scraped) {
		if _, ok := names[name]; !ok {
			t.Errorf("test/e2e scrapes %s from the controller, but this test derives %v", name, sorted(names))
		}
	}
	// The runtime's series the dashboard reads are checked there too.
	for name := range podMetrics {
		if strings.HasPrefix(name, "go_") && !strings.Contains(e2eSources, `"`+name+`"`) {
			t.Errorf("the dashboard reads %s, which no test in test/e2e scrapes from the controller", name)
		}
	}
}

// promqlNoise is what metricNames strips from an expression before reading
// names: string literals, label matchers, ranges and offsets' durations,
// and the label lists of by, without, on, ignoring and group_*.
var (
	promqlStrings  = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	promqlMatchers = regexp.MustCompile(`\{[^{}]*\}`)
	promqlRanges   = regexp.MustCompile(`\[[^\[\]]*\]`)
	promqlGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	promqlIdent    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	promqlKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true,
		"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
		"inf": true, "nan": true, "atan2": true, "start": true, "end": true}
)

// metricNames are the metric names a PromQL expression selects: the
// identifiers left once strings, matchers, ranges and label lists are gone
// that are neither keywords nor called (functions and aggregations).
func metricNames(expr string) []string {
	e := promqlStrings.ReplaceAllString(expr, `""`)
	e = promqlMatchers.ReplaceAllString(e, " ")
	e = promqlRanges.ReplaceAllString(e, " ")
	e = promqlGrouping.ReplaceAllString(e, " ")
	var names []string
	for _, loc := range promqlIdent.FindAllStringIndex(e, -1) {
		name := e[loc[0]:loc[1]]
		if loc[0] > 0 && (e[loc[0]-1] >= '0' && e[loc[0]-1] <= '9' || e[loc[0]-1] == '.') {
			continue // a number's exponent or a duration's unit: 1e3, 5m
		}
		if promqlKeywords[strings.ToLower(name)] || strings.HasPrefix(strings.TrimLeft(e[loc[1]:], " \t\n"), "(") {
			continue
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names
}

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`sum by (namespace, kind) (increase(buildsmith_reconciles_total{outcome=~"transient|waiting"}[15m])) > 0`, []string{"buildsmith_reconciles_total"}},
		{`absent(buildsmith_leader_buckets)`, []string{"buildsmith_leader_buckets"}},
		{`histogram_quantile(0.9, sum by (kind, le) (rate(buildsmith_turns_wait_seconds_bucket{namespace=~".*"}[5m])))`, []string{"buildsmith_turns_wait_seconds_bucket"}},
		{"a / on (x) group_left (y) b unless c offset 1h > bool 1e3", []string{"a", "b", "c"}},
		{`sum(up{job="x"}) without (pod) or vector(0)`, []string{"up"}},
		{`{__name__="x"}`, nil},
	} {
		if got := metricNames(tc.expr); !slices.Equal(got, tc.want) {
			t.Errorf("metricNames(%s) = %v, want %v", tc.expr, got, tc.want)
		}
	}
}
