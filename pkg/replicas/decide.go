package replicas

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// seenLease is a Lease as this replica last saw it. As in client-go, a
// Lease is held until its duration has passed since this replica saw it
// change: the holder's clock is never compared with ours.
type seenLease struct {
	holder    string
	version   string
	duration  time.Duration
	changed   time.Time
	freeSince time.Time // zero while held
	// renewed: seen to change since first seen. A replica's Lease seen
	// once only may be a dead one's, not yet run out.
	renewed bool
	// electing: a replica's Lease's electingAnnotation.
	electing []string
}

func (l *seenLease) held(now time.Time) bool {
	return l.holder != "" && now.Before(l.changed.Add(l.duration))
}

// bucketLease matches knative's bucket Lease names:
// <component>.<queue>.<NN>-of-<MM>.
var bucketLease = regexp.MustCompile(`^(.+)\.(\d+)-of-(\d+)$`)

// observe records a Lease as seen now. mu is held.
func (s *bucketShares) observe(l *coordinationv1.Lease, now time.Time) {
	seen, known := s.seen[l.Name]
	if !known {
		seen = &seenLease{}
		s.seen[l.Name] = seen
	}
	if !known || seen.version != l.ResourceVersion {
		seen.renewed = known
		seen.version, seen.changed, seen.holder, seen.duration = l.ResourceVersion, now, "", 0
		if l.Spec.HolderIdentity != nil {
			seen.holder = *l.Spec.HolderIdentity
		}
		if l.Spec.LeaseDurationSeconds != nil {
			seen.duration = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
		}
		seen.electing = nil
		if v := l.Annotations[electingAnnotation]; v != "" {
			seen.electing = strings.Split(v, ",")
		}
	}
	switch {
	case seen.held(now):
		seen.freeSince = time.Time{}
	case seen.freeSince.IsZero():
		seen.freeSince = now
	}
}

// isReplica says whether a Lease is a replica's own (announcing it).
func (s *bucketShares) isReplica(name string) bool {
	return strings.HasPrefix(name, s.replicaPrefix)
}

// bucketOf parses a bucket Lease's name into its reconciler's Lease prefix
// ("<component>.<queue>") and the bucket's index, for this component's
// Leases of the configured bucket count only (Leases of another count are
// left over from an earlier configuration, or a rollout's other pods').
func (s *bucketShares) bucketOf(name string) (group string, index int, ok bool) {
	m := bucketLease.FindStringSubmatch(name)
	if m == nil || !strings.HasPrefix(m[1], s.component+".") {
		return "", 0, false
	}
	index, err1 := strconv.Atoi(m[2])
	of, err2 := strconv.Atoi(m[3])
	if err1 != nil || err2 != nil || of != s.buckets {
		return "", 0, false
	}
	return m[1], index, true
}

// leads says whether this replica holds the bucket Lease name, as far as
// it knows. mu is held.
func (s *bucketShares) leads(name string, now time.Time) bool {
	l := s.seen[name]
	return l != nil && l.held(now) && l.holder == s.id
}

// decide says whether this replica may write itself as the holder of the
// bucket Lease name now: nil, or why not. mu is held.
func (s *bucketShares) decide(name string, now time.Time) error {
	group, index, ok := s.bucketOf(name)
	if !ok {
		return nil
	}
	// The replicas alive (announced, electing yet or not), those electing
	// this group's buckets, and how many of them each leads.
	key := electingKey(group, s.buckets)
	alive, renewing, electing := []string{s.id}, map[string]bool{s.id: true}, map[string]bool{s.id: true}
	for n, l := range s.seen {
		if s.isReplica(n) && l.held(now) && l.holder != s.id {
			alive = append(alive, l.holder)
			renewing[l.holder] = l.renewed
			electing[l.holder] = slices.Contains(l.electing, key)
		}
	}
	counts := map[string]int{}
	var mine []int
	for n, l := range s.seen {
		if g, i, ok := s.bucketOf(n); ok && g == group && l.held(now) && !s.taking[n] {
			counts[l.holder]++
			if l.holder == s.id {
				mine = append(mine, i)
			}
		}
	}
	for n := range s.taking {
		if g, i, _ := s.bucketOf(n); g == group {
			counts[s.id]++
			mine = append(mine, i)
		}
	}
	share := fairShares(s.buckets, alive, counts, renewing)
	if s.leads(name, now) {
		// A renewal: keep the first buckets of the share, hand the others
		// back while a replica electing them is below its share (not one
		// that has only announced itself: it cannot take them yet).
		slices.Sort(mine)
		if slices.Index(mine, index) < share[s.id] {
			return nil
		}
		for _, id := range alive {
			if electing[id] && counts[id] < share[id] {
				return fmt.Errorf("handing %s to a replica below its share: this one leads %d of %d buckets, its share is %d",
					name, counts[s.id], s.buckets, share[s.id])
			}
		}
		return nil
	}
	if counts[s.id] < share[s.id] {
		return nil
	}
	free := s.started // not there yet: free since this replica started
	if l := s.seen[name]; l != nil {
		free = l.freeSince
		switch {
		case l.held(now):
			free = now // held still, as far as this replica knows (its elector may know better)
		case free.IsZero():
			// Held when last seen, run out since without this replica
			// seeing it again (a refresh failed): free since it ran out.
			free = l.changed.Add(l.duration)
		}
	}
	if now.Sub(free) >= s.lease {
		return nil // nobody below their share took it
	}
	return fmt.Errorf("leaving %s to a replica below its share until it has been free for %s: this one leads %d of %d buckets, its share is %d",
		name, s.lease, counts[s.id], s.buckets, share[s.id])
}

// fairShares splits buckets over the replicas alive: as evenly as they
// go, the remainder to those leading most already, so that a new count moves
// as few buckets as it can; then to those seen renewing their Lease (a
// Lease seen once may be a dead replica's); then by identity.
func fairShares(buckets int, alive []string, counts map[string]int, renewing map[string]bool) map[string]int {
	order := slices.Clone(alive)
	slices.SortFunc(order, func(a, b string) int {
		if counts[a] != counts[b] {
			return counts[b] - counts[a]
		}
		if renewing[a] != renewing[b] {
			if renewing[a] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	share := map[string]int{}
	for i, id := range order {
		share[id] = buckets / len(order)
		if i < buckets%len(order) {
			share[id]++
		}
	}
	return share
}
