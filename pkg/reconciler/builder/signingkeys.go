package builder

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/buildsmith/buildsmith/pkg/cosign"
	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/registry"
	"github.com/buildsmith/buildsmith/pkg/worker"
)

// SigningLimits bound what tenants' signing keys cost the controller: the
// scrypt work of decrypting each (cosign.Limits), the decrypted keys it
// keeps, and the signature images it checks and extends. Zero fields
// take the defaults.
type SigningLimits struct {
	cosign.Limits
	// MaxKeys bounds the parsed keys (and parse errors) kept, the least
	// recently used dropped first; 0: DefaultMaxSigningKeys.
	MaxKeys int
	// KeyIdle is how long a parsed key nobody uses is kept; 0:
	// DefaultSigningKeyIdle. Every resync uses the keys in use: shorter
	// than the resync interval, each resync decrypts them again.
	KeyIdle time.Duration
	// MaxSignatureLayers bounds the layers of a signature image (the
	// .sig tag) that is checked for the keys' signatures and extended
	// with them; 0: DefaultMaxSignatureLayers.
	MaxSignatureLayers int
}

// The defaults of SigningLimits. A parsed key is a few KiB, and each is
// parsed once per Secret version: the bound keeps a tenant's thousand
// Secrets from filling the heap, not the keys in use from being reused.
const (
	DefaultMaxSigningKeys = 512
	DefaultSigningKeyIdle = time.Hour
)

func (l SigningLimits) maxKeys() int {
	if l.MaxKeys <= 0 {
		return DefaultMaxSigningKeys
	}
	return l.MaxKeys
}

// DefaultMaxSignatureLayers bounds a signature image's layers. The image
// at an image's .sig tag holds one layer per signature of that one image
// digest: one per key that signed it (this builder's, a CI's cosign sign,
// another builder pushing the same image), a handful in practice. Its
// layers are the registry's to choose, and each layer holding the payload
// costs an ECDSA verification per key to check (~2 ms on P-521): 64 keeps
// a check within 64 verifications per key and extending it cheap, while
// leaving room for many signers.
const DefaultMaxSignatureLayers = 64

func (l SigningLimits) maxSignatureLayers() int {
	if l.MaxSignatureLayers <= 0 {
		return DefaultMaxSignatureLayers
	}
	return l.MaxSignatureLayers
}

func (l SigningLimits) keyIdle() time.Duration {
	if l.KeyIdle <= 0 {
		return DefaultSigningKeyIdle
	}
	return l.KeyIdle
}

// signingKeys are the cosign keys of the Secrets in use, parsed once per
// Secret version: decrypting one costs scrypt's 64 MiB and ~0.2 s of CPU,
// too much for every resync of every builder, and the builders that ask
// for a version while it is parsed share that one parse. What is kept is
// bounded: MaxKeys entries, none unused for KeyIdle, none whose Secret the
// watch says changed or went (a private key taken out of its Secret after
// a compromise leaves the heap then, not at the next restart). An error is
// kept like a key, for its version only: a fixed Secret is a new version.
// The zero value works, with the default limits.
type signingKeys struct {
	limits SigningLimits
	// parse is parseSigningSecret; tests count and hold its calls.
	parse func(context.Context, *corev1.Secret, cosign.Limits) (signingKey, error)
	now   func() time.Time

	mu      sync.Mutex
	entries map[types.NamespacedName]*keyEntry
	lru     list.List   // of *keyEntry, the most recently used first
	sweep   *time.Timer // drops the idle entries while there are any
}

// keyEntry is one Secret version's key, parsed or being parsed.
type keyEntry struct {
	id              types.NamespacedName
	resourceVersion string
	elem            *list.Element // in lru; nil once dropped
	lastUsed        time.Time

	// done is closed once key and err are set. Until then the parse runs
	// for the callers waiting on it; when the last leaves, it is
	// cancelled (a turn to decrypt nobody waits for goes to another key).
	done     chan struct{}
	finished bool
	key      signingKey
	err      error
	waiting  int
	cancel   context.CancelFunc
}

// configure sets the limits and, when secrets tells of changes (as
// reconciler.SecretWatches does), drops the key of each Secret it says
// changed or was deleted. Called before the keys are used.
func (s *signingKeys) configure(limits SigningLimits, secrets registry.SecretReader) {
	s.limits = limits
	if w, ok := secrets.(interface{ Subscribe(func(any)) }); ok {
		w.Subscribe(s.forget)
	}
}

// of returns the signing keys of secrets, in their order, each with the
// bound of the signature images it signs into. A Secret that does not
// parse is a Permanent error naming it; ctx ending while a key is
// decrypted, an error of that.
func (s *signingKeys) of(ctx context.Context, secrets []*corev1.Secret) ([]signingKey, error) {
	keys := make([]signingKey, 0, len(secrets))
	for _, secret := range secrets {
		k, err := s.get(ctx, secret)
		if err != nil {
			return nil, err
		}
		k.maxSignatureLayers = s.limits.maxSignatureLayers()
		keys = append(keys, k)
	}
	return keys, nil
}

func (s *signingKeys) get(ctx context.Context, secret *corev1.Secret) (signingKey, error) {
	if secret.ResourceVersion == "" {
		// Nothing tells its versions apart (a fake's Secret): parsed
		// each time.
		return s.parser()(ctx, secret, s.limits.Limits)
	}
	e := s.join(ctx, secret)
	defer s.leave(e)
	select {
	case <-e.done:
		return e.key, e.err
	default:
	}
	// The parse may wait for a turn behind other tenants' keys: the
	// reconcile's worker is lent meanwhile.
	defer worker.Wait(ctx)()
	select {
	case <-e.done:
		return e.key, e.err
	case <-ctx.Done():
		return signingKey{}, fmt.Errorf("secret %s: waiting for its cosign key to be decrypted: %w", e.id, ctx.Err())
	}
}

// join returns the entry of secret's version, counting the caller among
// its waiters, and starts its parse if it is new.
func (s *signingKeys) join(ctx context.Context, secret *corev1.Secret) *keyEntry {
	id := types.NamespacedName{Namespace: secret.Namespace, Name: secret.Name}
	now := s.clock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropIdle(now)
	e := s.entries[id]
	if e != nil && e.resourceVersion != secret.ResourceVersion {
		s.drop(e) // the old version's key goes now, not at eviction
		e = nil
	}
	if e == nil {
		e = &keyEntry{id: id, resourceVersion: secret.ResourceVersion, done: make(chan struct{})}
		// The parse is no one caller's: it outlives the one that started
		// it while others wait, and its waits lend nobody's worker.
		var parse context.Context
		parse, e.cancel = context.WithCancel(worker.With(context.WithoutCancel(ctx), nil))
		go s.run(parse, e, secret)
		if s.entries == nil {
			s.entries = map[types.NamespacedName]*keyEntry{}
		}
		s.entries[id] = e
		e.elem = s.lru.PushFront(e)
		for s.lru.Len() > s.limits.maxKeys() {
			s.drop(s.lru.Back().Value.(*keyEntry))
		}
		if s.sweep == nil {
			s.sweep = time.AfterFunc(s.limits.keyIdle()/2, s.sweepIdle)
		}
	} else {
		s.lru.MoveToFront(e.elem)
	}
	e.lastUsed = now
	e.waiting++
	return e
}

// run parses e's Secret. Only keys and Permanent errors are kept: any
// other error (the parse cancelled) is for the callers waiting now.
func (s *signingKeys) run(ctx context.Context, e *keyEntry, secret *corev1.Secret) {
	key, err := s.parser()(ctx, secret, s.limits.Limits)
	s.mu.Lock()
	e.key, e.err, e.finished = key, err, true
	if f, ok := failure.As(err); err != nil && (!ok || f.Class != failure.Permanent) {
		s.drop(e)
	}
	e.cancel()
	s.mu.Unlock()
	close(e.done)
}

// leave counts a caller of join out; the last to leave a parse still
// running cancels it, and a later caller starts another.
func (s *signingKeys) leave(e *keyEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.waiting--; e.waiting == 0 && !e.finished {
		e.cancel()
		s.drop(e)
	}
}

// forget drops the key of the Secret obj (a *corev1.Secret or its
// tombstone), which its watch says was created, changed or deleted: a new
// version is parsed when it is next used, a deleted one is gone. A delete
// hands over the last version, as a re-list hands over an unchanged one:
// both drop the key, the re-list at the cost of one more decryption.
func (s *signingKeys) forget(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	secret, ok := obj.(*corev1.Secret)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.entries[types.NamespacedName{Namespace: secret.Namespace, Name: secret.Name}]; e != nil {
		s.drop(e)
	}
}

// drop removes e from the cache (its waiters still get its result); s.mu
// must be held.
func (s *signingKeys) drop(e *keyEntry) {
	if s.entries[e.id] == e {
		delete(s.entries, e.id)
	}
	if e.elem != nil {
		s.lru.Remove(e.elem)
		e.elem = nil
	}
}

// dropIdle drops the entries unused for KeyIdle, the least recently used
// being last; s.mu must be held.
func (s *signingKeys) dropIdle(now time.Time) {
	idle := s.limits.keyIdle()
	for back := s.lru.Back(); back != nil; back = s.lru.Back() {
		e := back.Value.(*keyEntry)
		if now.Sub(e.lastUsed) < idle || e.waiting > 0 {
			return
		}
		s.drop(e)
	}
}

// sweepIdle drops the idle entries when no builder asks for keys (all of
// them deleted, say), and again in KeyIdle/2 while some are left.
func (s *signingKeys) sweepIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropIdle(s.clock())
	if s.lru.Len() == 0 {
		s.sweep = nil
		return
	}
	s.sweep.Reset(s.limits.keyIdle() / 2)
}

// cached is how many Secret versions are kept, parsed or being parsed.
func (s *signingKeys) cached() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lru.Len()
}

func (s *signingKeys) parser() func(context.Context, *corev1.Secret, cosign.Limits) (signingKey, error) {
	if s.parse != nil {
		return s.parse
	}
	return parseSigningSecret
}

func (s *signingKeys) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}
