package registry

import "testing"

// TestBoundedCache: the cache keeps what fits its byte bound, dropping the
// least recently used first; a value larger than the bound is not kept, and
// a replaced value's bytes are not counted twice.
func TestBoundedCache(t *testing.T) {
	c := newBoundedCache(100)
	c.Add("a", "A", 40)
	c.Add("b", "B", 40)
	c.Get("a") // b is now the least recently used
	c.Add("c", "C", 40)
	if _, ok := c.Get("b"); ok {
		t.Error("b kept past the bound")
	}
	for _, key := range []string{"a", "c"} {
		if _, ok := c.Get(key); !ok {
			t.Errorf("%s dropped", key)
		}
	}
	if c.Bytes() != 80 {
		t.Errorf("%d bytes held, want 80", c.Bytes())
	}
	c.Add("a", "A2", 50) // replaced: 50 + 40
	if v, _ := c.Get("a"); v != "A2" || c.Bytes() != 90 {
		t.Errorf("after replacing a: %v, %d bytes, want A2 and 90", v, c.Bytes())
	}
	c.Add("huge", "H", 101)
	if _, ok := c.Get("huge"); ok || c.Bytes() != 90 {
		t.Errorf("a value over the bound: kept %v, %d bytes held", ok, c.Bytes())
	}
}
