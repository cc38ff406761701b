package kpack

import (
	"fmt"
	"strings"
	"testing"
)

// storeWithSources is a kpack ClusterStore with n distinct sources.
func storeWithSources(n int) string {
	var b strings.Builder
	b.WriteString("apiVersion: kpack.io/v1alpha2\nkind: ClusterStore\nmetadata:\n  name: big\nspec:\n  sources:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - image: registry.example.com/buildpacks/bp-%d:1.0.%d\n", i, i)
	}
	return b.String()
}

// BenchmarkConvertStoreSources converts a ClusterStore of N sources. The
// time per source must not grow with N: it was quadratic (issue 28: 2,000
// sources 3 s, 8,000 49 s, 32,000 over 10 minutes), each new source being
// compared with all the earlier ones by parsing them again.
func BenchmarkConvertStoreSources(b *testing.B) {
	for _, n := range []int{2000, 8000, 32000} {
		in := storeWithSources(n)
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				out, warnings, err := Convert(strings.NewReader(in))
				if err != nil || len(warnings) > 0 || len(out) == 0 {
					b.Fatalf("Convert: %v, %d warnings", err, len(warnings))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/source")
		})
	}
}

// BenchmarkConvertJSONStream converts N ClusterStores given as a stream of
// JSON objects, one a line (jq -c '.items[]'): linear in N too.
func BenchmarkConvertJSONStream(b *testing.B) {
	for _, n := range []int{1000, 4000} {
		var in strings.Builder
		for i := range n {
			fmt.Fprintf(&in, `{"apiVersion":"kpack.io/v1alpha2","kind":"ClusterStore","metadata":{"name":"store-%d"},`+
				`"spec":{"sources":[{"image":"registry.example.com/buildpacks/bp-%d:1"}]}}`+"\n", i, i)
		}
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			b.SetBytes(int64(in.Len()))
			for b.Loop() {
				out, warnings, err := Convert(strings.NewReader(in.String()))
				if err != nil || len(warnings) > 0 || strings.Count(string(out), "kind: ClusterStore\n") != n {
					b.Fatalf("Convert: %v, %d warnings, output not %d stores", err, len(warnings), n)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/object")
		})
	}
}
