package cosign

import (
	"math"
	"runtime/debug"
	"testing"
)

// TestScryptMemoryHold: while decryptions run, the runtime's memory limit
// is what the process held plus their scrypt memory and the headroom, never
// above the operator's; after the last, the operator's again.
func TestScryptMemoryHold(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	for _, operator := range []int64{math.MaxInt64, 8 << 30, 64 << 20} {
		debug.SetMemoryLimit(operator)
		var m memoryHold
		releaseA := m.hold(64 << 20)
		withA := debug.SetMemoryLimit(-1)
		releaseB := m.hold(32 << 20)
		withBoth := debug.SetMemoryLimit(-1)
		releaseA()
		withB := debug.SetMemoryLimit(-1)
		releaseB()
		after := debug.SetMemoryLimit(-1)

		base := m.base
		want := func(held int64) int64 { return min(operator, base+held+holdHeadroom(base)) }
		if base <= 0 || withA != want(64<<20) || withBoth != want(96<<20) || withB != want(32<<20) || after != operator {
			t.Errorf("operator's limit %d, process held %d: limits %d, %d, %d, then %d; want %d, %d, %d, then %d",
				operator, base, withA, withBoth, withB, after, want(64<<20), want(96<<20), want(32<<20), operator)
		}
	}
}
