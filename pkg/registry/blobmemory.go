package registry

import (
	"container/list"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// blobMemory remembers which blobs repositories hold: those the controller
// uploaded or mounted there, or named in a manifest it PUT there, and those of images it read
// from there. A push skips asking the registry about them. That is safe only
// on a registry that refuses a manifest whose blobs it lacks (see
// manifestChecks): a blob deleted behind the controller's back (garbage
// collection) then fails the manifest PUT, and the push forgets the
// repository and tries again with checks. The memory is bounded by entries,
// the least recently used forgotten first.
type blobMemory struct {
	mu    sync.Mutex
	max   int
	order *list.List                           // of *heldBlob, most recent first
	repos map[string]map[v1.Hash]*list.Element // repository ("host/path") → its entries
}

type heldBlob struct {
	repo string
	blob v1.Hash
}

// heldEntryBytes is about what one entry costs (the digest, a list element,
// two map slots), for the flag's help: 64k entries ≈ 13 MiB.
const heldEntryBytes = 200

func newBlobMemory(max int) *blobMemory {
	return &blobMemory{max: max, order: list.New(), repos: map[string]map[v1.Hash]*list.Element{}}
}

// holds says whether repo was seen holding key.
func (m *blobMemory) holds(repo string, key v1.Hash) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.repos[repo][key]
	if ok {
		m.order.MoveToFront(e)
	}
	return ok
}

// remember records that repo holds keys.
func (m *blobMemory) remember(repo string, keys ...v1.Hash) {
	if m.max <= 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	held := m.repos[repo]
	if held == nil {
		held = map[v1.Hash]*list.Element{}
		m.repos[repo] = held
	}
	for _, key := range keys {
		if e, ok := held[key]; ok {
			m.order.MoveToFront(e)
			continue
		}
		held[key] = m.order.PushFront(&heldBlob{repo: repo, blob: key})
	}
	for m.order.Len() > m.max {
		m.remove(m.order.Back())
	}
}

// forget drops everything remembered of repo: a registry said it lacks
// something the memory said it holds.
func (m *blobMemory) forget(repo string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.repos[repo] {
		m.order.Remove(e)
	}
	delete(m.repos, repo)
}

// len is the number of entries, for tests.
func (m *blobMemory) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.order.Len()
}

func (m *blobMemory) remove(e *list.Element) {
	b := m.order.Remove(e).(*heldBlob)
	held := m.repos[b.repo]
	delete(held, b.blob)
	if len(held) == 0 {
		delete(m.repos, b.repo)
	}
}
