package turns

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// turn is one reconcile in flight. It is the worker.Waiter of its context:
// its waits come in spells (from the first wait begun with none open to
// the last of them done), and once the spells add up to lendAfter its
// worker is lent.
type turn struct {
	turns     *Turns
	key       string
	tenant    *tenant
	heldSince time.Time // when it took its worker

	// Guarded by turns.mu.
	done         bool
	released     bool          // its worker given up: lent, or at the end
	openWaits    int           // waits begun and not done yet (they nest)
	spell        uint64        // counts the spells begun: a lend timer acts for its own spell only
	spellStart   time.Time     // when the current spell began
	waitedBefore time.Duration // in the spells that ended
	lendTimer    clock.Timer   // set during a spell, until the worker is lent
}

// Wait implements worker.Waiter: once the reconcile has waited lendAfter in
// all (a hang, or a run of slow answers and retries), its worker is lent.
func (tr *turn) Wait() (done func()) {
	t := tr.turns
	t.mu.Lock()
	defer t.mu.Unlock()
	if tr.done || tr.released {
		return func() {} // lent already, or a wait outliving the reconcile
	}
	if tr.openWaits++; tr.openWaits == 1 {
		tr.beginSpell()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			if tr.openWaits--; tr.openWaits == 0 {
				tr.waitedBefore += t.clock.Since(tr.spellStart)
				tr.stopLendTimer()
			}
		})
	}
}

// beginSpell starts a spell of waiting, and the timer that lends the
// worker when the spells add up to lendAfter; turns.mu must be held.
func (tr *turn) beginSpell() {
	t := tr.turns
	tr.spell++
	tr.spellStart = t.clock.Now()
	left := t.lendAfter - tr.waitedBefore
	if left <= 0 {
		tr.lendNow()
		return
	}
	spell := tr.spell
	// A fake clock calls f within its Step, its lock held; lend reads the
	// clock, so it runs on a goroutine of its own, as a real timer's does.
	tr.lendTimer = t.clock.AfterFunc(left, func() { go tr.lend(spell) })
}

// lend gives tr's worker to the next reconcile if the spell of waiting
// that set the timer goes on.
func (tr *turn) lend(spell uint64) {
	t := tr.turns
	t.mu.Lock()
	defer t.mu.Unlock()
	if tr.done || tr.released || tr.openWaits == 0 || tr.spell != spell {
		return
	}
	tr.lendNow()
}

// lendNow gives tr's worker to the next reconcile; turns.mu must be held.
func (tr *turn) lendNow() {
	tr.release(tr.turns.clock.Now())
	turnsLent.Add(context.Background(), 1, tr.turns.kind)
	tr.turns.dispatch()
}

// release gives up tr's worker, charging its tenant the time held;
// turns.mu must be held.
func (tr *turn) release(now time.Time) {
	tr.stopLendTimer()
	if tr.released {
		return
	}
	tr.released = true
	tr.turns.working--
	tr.tenant.served += now.Sub(tr.heldSince)
	delete(tr.tenant.holding, tr)
}

// stopLendTimer stops the lend timer, if any; turns.mu must be held.
func (tr *turn) stopLendTimer() {
	if tr.lendTimer != nil {
		tr.lendTimer.Stop()
		tr.lendTimer = nil
	}
}
