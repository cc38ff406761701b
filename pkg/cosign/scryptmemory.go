package cosign

import (
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// scryptMemory keeps a decryption's memory from growing the rest of the
// heap. scrypt takes its memory (64 MiB for a key of cosign
// generate-key-pair) in one allocation, live while it runs: a collection
// meanwhile counts it, and the runtime then lets the heap grow to twice
// that (GOGC) with every tenant's garbage before collecting again, about
// as much again as the key itself. So while decryptions run, the
// runtime's soft memory limit is what the rest of the process held when
// the latest began, plus their scrypt memory and some headroom (never
// above the limit the operator set, GOMEMLIMIT): the collector keeps the
// rest of the heap where it was, and the peak is what was held plus the
// keys. The heap is collected and returned to the system before the first
// (the decryption comes on top of what is live, not of garbage) and after
// the last.
var scryptMemory memoryHold

// holdHeadroom is what the rest of the process may grow by while a key is
// decrypted before the collector works harder to keep it there: 32 MiB,
// or a quarter of what it held, if more.
func holdHeadroom(base int64) int64 { return max(32<<20, base/4) }

type memoryHold struct {
	mu       sync.Mutex
	held     int64 // scrypt memory of the decryptions running
	base     int64 // what the process held when the first began
	previous int64 // the memory limit before it
}

// hold accounts for cost bytes until the function it returns is called.
func (m *memoryHold) hold(cost int64) (release func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held == 0 {
		debug.FreeOSMemory()
		m.base, m.previous = processMemory(), debug.SetMemoryLimit(-1)
	} else {
		// Decryptions back to back (a tenant's keys, one after the
		// other) must not pin the rest of the process to what it held
		// when the first began: each starts from what it holds now.
		m.base = max(m.base, processMemory()-m.held)
	}
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
		debug.FreeOSMemory()
	}
}

func (m *memoryHold) setLimit() {
	if m.base > 0 { // else unknown: the limit is left as it is
		debug.SetMemoryLimit(min(m.previous, m.base+m.held+holdHeadroom(m.base)))
	}
}

// processMemory is the memory the Go runtime holds from the system (what
// its soft limit counts): all it mapped but what it has returned.
func processMemory() int64 {
	samples := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(samples)
	if samples[0].Value.Kind() != metrics.KindUint64 || samples[1].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(samples[0].Value.Uint64() - samples[1].Value.Uint64())
}
