package registry

import (
	"sync"

	"k8s.io/utils/lru"
)

// boundedCache is an LRU cache bounded by the bytes its values hold, not
// their count: a registry decides how large a manifest and a config are
// (up to maxManifestSize and maxConfigSize), so a count alone would let a
// thousand large images hold gigabytes.
type boundedCache struct {
	mu    sync.Mutex
	max   int64
	bytes int64
	lru   *lru.Cache // key → sized
}

type sized struct {
	value any
	size  int64
}

func newBoundedCache(maxBytes int64) *boundedCache {
	c := &boundedCache{max: maxBytes}
	// The eviction func runs under the lru's lock, within Add or
	// RemoveOldest, which run under c.mu.
	c.lru = lru.NewWithEvictionFunc(0, func(_ lru.Key, v any) { c.bytes -= v.(sized).size })
	return c
}

func (c *boundedCache) Get(key string) (any, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.lru.Get(key)
	if !ok {
		return nil, false
	}
	return v.(sized).value, true
}

// Add keeps value, of size bytes, dropping the least recently used values
// until the cache is within its bound; a value larger than the bound is
// not kept.
func (c *boundedCache) Add(key string, value any, size int64) {
	if size > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Remove(key) // a replaced value's bytes go first
	c.lru.Add(key, sized{value: value, size: size})
	c.bytes += size
	for c.bytes > c.max {
		c.lru.RemoveOldest()
	}
}

// Bytes is what the cache holds now.
func (c *boundedCache) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}
