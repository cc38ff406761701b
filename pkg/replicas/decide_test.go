package replicas

import (
	"fmt"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	testingclock "k8s.io/utils/clock/testing"
)

func TestFairShares(t *testing.T) {
	for _, tc := range []struct {
		buckets int
		alive   []string
		counts  map[string]int
		want    map[string]int
	}{
		{2, []string{"a"}, nil, map[string]int{"a": 2}},
		{2, []string{"a", "b"}, map[string]int{"a": 2}, map[string]int{"a": 1, "b": 1}},
		// The remainder stays with those leading already: a third replica
		// (a rolling update's surge) moves nothing.
		{2, []string{"c", "a", "b"}, map[string]int{"a": 1, "b": 1}, map[string]int{"a": 1, "b": 1, "c": 0}},
		{3, []string{"a", "b"}, map[string]int{"b": 2, "a": 1}, map[string]int{"a": 1, "b": 2}},
		{4, []string{"a", "b", "c"}, nil, map[string]int{"a": 2, "b": 1, "c": 1}},
	} {
		got := fairShares(tc.buckets, tc.alive, tc.counts, map[string]bool{"a": true, "b": true, "c": true})
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("fairShares(%d, %v, %v) = %v, want %v", tc.buckets, tc.alive, tc.counts, got, tc.want)
		}
	}
	// A replica not seen renewing (perhaps dead) comes after the others.
	if got := fairShares(2, []string{"a", "b", "c"}, map[string]int{"c": 1}, map[string]bool{"b": true, "c": true}); got["a"] != 0 {
		t.Errorf("the remainder went to a replica not seen renewing: %v", got)
	}
}

func TestBucketOf(t *testing.T) {
	w := newSharesWorld(t)
	for _, tc := range []struct {
		name  string
		group string
		index int
		ok    bool
	}{
		{"ctl.queue.01-of-02", "ctl.queue", 1, true},
		{"ctl.queue.01-of-03", "", 0, false},    // another bucket count
		{"other.queue.01-of-02", "", 0, false},  // another component's
		{"ctlx.queue.01-of-02", "", 0, false},   // another component's, ours a prefix of its name
		{"ctl.replica.01-of-02x", "", 0, false}, // not a bucket
	} {
		group, index, ok := w.shares.bucketOf(tc.name)
		if group != tc.group || index != tc.index || ok != tc.ok {
			t.Errorf("bucketOf(%q) = %q, %d, %v, want %q, %d, %v", tc.name, group, index, ok, tc.group, tc.index, tc.ok)
		}
	}
}

// t0 is when the replica under test started; the tables count from it.
var t0 = time.Unix(1000, 0)

func TestSeenLeaseHeld(t *testing.T) {
	for _, tc := range []struct {
		name     string
		holder   string
		duration time.Duration
		since    time.Duration // since the Lease was seen to change
		want     bool
	}{
		{"just changed", "peer", testLease, 0, true},
		{"about to run out", "peer", testLease, testLease - time.Nanosecond, true},
		{"run out", "peer", testLease, testLease, false},
		{"long run out", "peer", testLease, 10 * testLease, false},
		{"no holder", "", testLease, 0, false},
		{"no duration", "peer", 0, 0, false},
	} {
		l := &seenLease{holder: tc.holder, duration: tc.duration, changed: t0}
		if got := l.held(t0.Add(tc.since)); got != tc.want {
			t.Errorf("%s: held %s after its change = %v, want %v", tc.name, tc.since, got, tc.want)
		}
	}
}

// sighting is a Lease as a refresh or a write sees it, at since t0.
type sighting struct {
	at       time.Duration
	name     string
	version  string
	holder   string // "" for none
	electing string // electingAnnotation
}

func (s sighting) lease() *coordinationv1.Lease {
	l := lease(s.name, s.holder)
	if s.holder == "" {
		l.Spec.HolderIdentity = nil
	}
	l.ResourceVersion = s.version
	if s.electing != "" {
		l.Annotations = map[string]string{electingAnnotation: s.electing}
	}
	return l
}

// sharesAt is a bucketShares (2 buckets, "me") started at t0 on a fake
// clock, having seen sightings; no API server.
func sharesAt(sightings []sighting) *bucketShares {
	s := newBucketShares(nil, "ctl", "me", "1", 2, testLease, testRetry, testingclock.NewFakeClock(t0))
	for _, seen := range sightings {
		s.observe(seen.lease(), t0.Add(seen.at))
	}
	return s
}

func TestObserve(t *testing.T) {
	const s = time.Second
	peer := func(at time.Duration, version string) sighting {
		return sighting{at: at, name: "ctl.replica.2", version: version, holder: "peer"}
	}
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for _, tc := range []struct {
		name      string
		sightings []sighting
		changed   time.Time
		freeSince time.Time // zero while held
		renewed   bool
		electing  []string
	}{
		{"first seen", []sighting{peer(0, "1")}, at(0), time.Time{}, false, nil},
		{"unchanged, held still", []sighting{peer(0, "1"), peer(14*s, "1")}, at(0), time.Time{}, false, nil},
		{"unchanged, run out", []sighting{peer(0, "1"), peer(20*s, "1")}, at(0), at(20 * s), false, nil},
		{"free since first seen run out", []sighting{peer(0, "1"), peer(20*s, "1"), peer(40*s, "1")}, at(0), at(20 * s), false, nil},
		{"renewed", []sighting{peer(0, "1"), peer(5*s, "2")}, at(5 * s), time.Time{}, true, nil},
		{"renewed once run out", []sighting{peer(0, "1"), peer(20*s, "1"), peer(25*s, "2")}, at(25 * s), time.Time{}, true, nil},
		{"released", []sighting{peer(0, "1"), {at: 5 * s, name: "ctl.replica.2", version: "2"}}, at(5 * s), at(5 * s), true, nil},
		{"never held", []sighting{{at: 3 * s, name: "ctl.replica.2", version: "1"}}, at(3 * s), at(3 * s), false, nil},
		{"electing", []sighting{{name: "ctl.replica.2", version: "1", holder: "peer", electing: "ctl.other/2,ctl.queue/2"}},
			at(0), time.Time{}, false, []string{"ctl.other/2", "ctl.queue/2"}},
		{"electing no more", []sighting{{name: "ctl.replica.2", version: "1", holder: "peer", electing: "ctl.queue/2"}, peer(5*s, "2")},
			at(5 * s), time.Time{}, true, nil},
	} {
		got := sharesAt(tc.sightings).seen["ctl.replica.2"]
		if !got.changed.Equal(tc.changed) || !got.freeSince.Equal(tc.freeSince) || got.renewed != tc.renewed || !slices.Equal(got.electing, tc.electing) {
			t.Errorf("%s: changed %s, free since %s, renewed %v, electing %q; want %s, %s, %v, %q", tc.name,
				got.changed.Sub(t0), got.freeSince.Sub(t0), got.renewed, got.electing,
				tc.changed.Sub(t0), tc.freeSince.Sub(t0), tc.renewed, tc.electing)
		}
	}
}

func TestDecide(t *testing.T) {
	const s = time.Second
	// Each sighting at another time is a change (a renewal, or a take).
	holds := func(at time.Duration, i int, holder string) sighting {
		return sighting{at: at, name: bucket(i), version: fmt.Sprint(at), holder: holder}
	}
	free := func(at time.Duration, i int) sighting {
		return sighting{at: at, name: bucket(i), version: fmt.Sprint(at)}
	}
	peerElecting := func(at time.Duration) sighting {
		return sighting{at: at, name: "ctl.replica.2", version: fmt.Sprint(at), holder: "peer", electing: "ctl.queue/2"}
	}
	peerStandingBy := func(at time.Duration) sighting {
		return sighting{at: at, name: "ctl.replica.2", version: fmt.Sprint(at), holder: "peer"}
	}
	for _, tc := range []struct {
		name      string
		sightings []sighting
		taking    string // a take in flight
		at        time.Duration
		lease     string
		want      bool // may write itself its holder
	}{
		{"alone, the first bucket", nil, "", 0, bucket(0), true},
		{"alone, every bucket", []sighting{holds(0, 0, "me")}, "", s, bucket(1), true},
		{"below its share", []sighting{peerElecting(0)}, "", 0, bucket(0), true},
		{"below its share, a peer standing by", []sighting{peerStandingBy(0)}, "", 0, bucket(0), true},
		{"beyond its share, never seen, since it started for less than a lease", []sighting{holds(0, 0, "me"), peerElecting(14 * s)}, "", 14 * s, bucket(1), false},
		{"beyond its share, never seen, since it started for a lease", []sighting{holds(15*s, 0, "me"), peerElecting(15 * s)}, "", 15 * s, bucket(1), true},
		{"beyond its share, a peer standing by", []sighting{holds(0, 0, "me"), peerStandingBy(0)}, "", 0, bucket(1), false},
		{"beyond its share, free for less than a lease", []sighting{free(10*s, 1), holds(24*s, 0, "me"), peerElecting(24 * s)}, "", 24 * s, bucket(1), false},
		{"beyond its share, free for a lease", []sighting{free(10*s, 1), holds(25*s, 0, "me"), peerElecting(25 * s)}, "", 25 * s, bucket(1), true},
		{"beyond its share, run out unseen less than a lease ago", []sighting{holds(0, 1, "peer"), holds(29*s, 0, "me"), peerElecting(29 * s)}, "", 29 * s, bucket(1), false},
		{"beyond its share, run out unseen a lease ago", []sighting{holds(0, 1, "peer"), holds(30*s, 0, "me"), peerElecting(30 * s)}, "", 30 * s, bucket(1), true},
		{"beyond its share, held", []sighting{holds(20*s, 1, "peer"), holds(30*s, 0, "me"), peerElecting(30 * s)}, "", 30 * s, bucket(1), false},
		{"beyond its share, a take in flight", []sighting{peerElecting(0)}, bucket(0), 0, bucket(1), false},
		{"the share of a peer alive", []sighting{peerElecting(5 * s), holds(5*s, 1, "peer"), holds(20*s, 0, "me"), peerElecting(20 * s)}, "", 20 * s, bucket(1), false},
		{"the share of a peer gone", []sighting{peerElecting(5 * s), holds(5*s, 1, "peer"), holds(20*s, 0, "me")}, "", 20 * s, bucket(1), true},
		{"renewing its share", []sighting{holds(0, 0, "me"), holds(0, 1, "me"), peerElecting(2 * s)}, "", 2 * s, bucket(0), true},
		{"renewing beyond its share, a peer electing", []sighting{holds(0, 0, "me"), holds(0, 1, "me"), peerElecting(2 * s)}, "", 2 * s, bucket(1), false},
		{"renewing beyond its share, a peer standing by", []sighting{holds(0, 0, "me"), holds(0, 1, "me"), peerStandingBy(2 * s)}, "", 2 * s, bucket(1), true},
		// The remainder (2 buckets, 3 replicas) goes to the peer seen
		// renewing, not to the one seen once (perhaps dead), though it is
		// electing and first by identity.
		{"renewing beyond its share, a peer seen once", []sighting{holds(0, 0, "me"), holds(0, 1, "me"),
			{at: 2 * s, name: "ctl.replica.2", version: "1", holder: "a-seen-once", electing: "ctl.queue/2"},
			{name: "ctl.replica.3", version: "1", holder: "z-renewing"}, {at: 2 * s, name: "ctl.replica.3", version: "2", holder: "z-renewing"}},
			"", 2 * s, bucket(1), true},
		{"not this component's", []sighting{holds(0, 0, "me"), peerElecting(0)}, "", 0, "other.queue.01-of-02", true},
	} {
		shares := sharesAt(tc.sightings)
		if tc.taking != "" {
			shares.taking[tc.taking] = true
		}
		if err := shares.decide(tc.lease, t0.Add(tc.at)); (err == nil) != tc.want {
			t.Errorf("%s: decide(%s) at %s: %v, want allowed: %v", tc.name, tc.lease, tc.at, err, tc.want)
		}
	}
}
