package cosign

import (
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// scryptMemory keeps a decryption's memory from growing the rest of the
// heap. scrypt takes its memory (64 MiB for a key of cosign
// generate-key-pair) in one allocation, live while it runs: a collection
// meanwhile counts it, and the runtime then lets the heap grow by as much
// again (GOGC=100) with every tenant's garbage before collecting again. So
// while decryptions run, the runtime's soft memory limit is what the
// process holds, plus the growth the collector would allow it without the
// keys (its live heap), plus the keys: never less room than GOGC gives the
// rest of the process, never above the limit the operator set
// (GOMEMLIMIT). The heap is collected and returned to the system before a
// decryption (it comes on top of what is live, not of garbage) and after
// the last, at most once a second: a tenant changing its key's Secret in
// a loop does not make every tenant's heap be collected in a loop.
var scryptMemory memoryHold

// collectEvery is the least time between the collections of the hold.
const collectEvery = time.Second

type memoryHold struct {
	mu        sync.Mutex
	held      int64 // scrypt memory of the decryptions running
	base      int64 // what the rest of the process held, as the latest began
	growth    int64 // what the collector lets the heap grow by: its live heap
	previous  int64 // the memory limit before the first
	collected time.Time
}

// hold accounts for cost bytes until the function it returns is called.
func (m *memoryHold) hold(cost int64) (release func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held == 0 {
		m.previous = debug.SetMemoryLimit(-1)
		m.base, m.growth = 0, 0
		m.collect()
	}
	// Each decryption begins from what the rest of the process holds now
	// (a stream of them must not pin it to what it held at the first).
	held, live := runtimeMemory()
	m.base, m.growth = max(m.base, held-m.held), max(m.growth, live, 4<<20)
	m.held += cost
	m.setLimit()
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.held -= cost; m.held > 0 {
			m.setLimit()
			return
		}
		debug.SetMemoryLimit(m.previous)
		m.collect()
	}
}

// collect collects the heap and returns it to the system, unless it was
// done less than collectEvery ago.
func (m *memoryHold) collect() {
	if now := time.Now(); now.Sub(m.collected) >= collectEvery {
		debug.FreeOSMemory()
		m.collected = now
	}
}

func (m *memoryHold) setLimit() {
	if m.base > 0 { // else unknown: the limit is left as it is
		debug.SetMemoryLimit(min(m.previous, m.base+m.growth+m.held))
	}
}

// runtimeMemory is the memory the Go runtime holds from the system (what
// its soft limit counts: all it mapped but what it returned), and its live
// heap as of the last collection; 0, 0 when the runtime does not say.
func runtimeMemory() (held, live int64) {
	samples := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"},
		{Name: "/gc/heap/live:bytes"}}
	metrics.Read(samples)
	for _, s := range samples {
		if s.Value.Kind() != metrics.KindUint64 {
			return 0, 0
		}
	}
	return int64(samples[0].Value.Uint64() - samples[1].Value.Uint64()), int64(samples[2].Value.Uint64())
}
