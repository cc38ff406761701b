package cosign

import (
	"math"
	"runtime/debug"
	"testing"
)

// TestScryptMemoryHold: while decryptions run, the runtime's memory limit
// is what the rest of the process held, plus the growth the collector
// allows its heap, plus their scrypt memory, never above the operator's;
// after the last, the operator's again.
func TestScryptMemoryHold(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	for _, operator := range []int64{math.MaxInt64, 8 << 30, 64 << 20} {
		debug.SetMemoryLimit(operator)
		var m memoryHold
		releaseA := m.hold(64 << 20)
		withA, baseA, growthA := debug.SetMemoryLimit(-1), m.base, m.growth
		releaseB := m.hold(32 << 20)
		withBoth, base, growth := debug.SetMemoryLimit(-1), m.base, m.growth
		releaseA()
		withB := debug.SetMemoryLimit(-1)
		releaseB()
		after := debug.SetMemoryLimit(-1)

		if baseA <= 0 || growthA < 4<<20 || base < baseA || growth < growthA {
			t.Fatalf("held %d then %d, growth %d then %d: want what the process holds, and at least 4 MiB of growth, never less at the second",
				baseA, base, growthA, growth)
		}
		want := func(base, growth, keys int64) int64 { return min(operator, base+growth+keys) }
		if withA != want(baseA, growthA, 64<<20) || withBoth != want(base, growth, 96<<20) || withB != want(base, growth, 32<<20) || after != operator {
			t.Errorf("operator's limit %d: limits %d, %d, %d, then %d; want %d, %d, %d, then %d", operator, withA, withBoth, withB, after,
				want(baseA, growthA, 64<<20), want(base, growth, 96<<20), want(base, growth, 32<<20), operator)
		}
	}
}
