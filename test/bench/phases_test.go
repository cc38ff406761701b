package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/buildsmith/buildsmith/test/registrytest"
)

// phase is one measured step of a scenario: how long it took, whether it
// finished, and the registry requests it caused.
type phase struct {
	name string
	took time.Duration
	ok   bool
	cost cost
}

// phases measures the steps of a scenario on one registry.
type phases struct {
	f    *registrytest.Registry
	w    *world
	list []phase
}

// measure runs one step, counting the requests the registry saw in it.
func (p *phases) measure(t testing.TB, name string, run func() (time.Duration, bool)) {
	t.Helper()
	p.f.Traffic().Reset()
	took, ok := run()
	time.Sleep(time.Second) // late requeues and status writes
	p.list = append(p.list, phase{name, took, ok, p.w.cost(p.f.Traffic().Requests())})
}

// rows are the steps as a table of "phase, took, requests/builder,
// manifest PUTs/builder, bytes up/builder, requests by kind", per builder
// of n.
func (p *phases) rows(n int) [][]string {
	var out [][]string
	for _, ph := range p.list {
		took := ph.took.Round(100 * time.Millisecond).String()
		if !ph.ok {
			took = "not all in " + took
		}
		out = append(out, []string{ph.name, took, perBuilder(ph.cost.requests, n), perBuilder(ph.cost.manifestPuts, n),
			fmt.Sprintf("%d B", ph.cost.bytesIn/int64(n)), kinds(ph.cost.byKind)})
	}
	return out
}

// phaseHeader is the header of phases.rows.
var phaseHeader = []string{"phase", "took", "requests/builder", "manifest PUTs/builder", "bytes up/builder", "requests by kind"}

func perBuilder(v, n int) string { return fmt.Sprintf("%.1f", float64(v)/float64(n)) }
