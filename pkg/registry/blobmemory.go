package registry

import (
	"container/list"
	"strings"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// blobMemory remembers which blobs repositories hold: those the controller
// uploaded or mounted there, named in a manifest it PUT there, or in one it
// read from there. A push skips asking the registry about them, which is
// safe only on a registry that refuses a manifest whose blobs it lacks (see
// registryTraits): a blob deleted behind the controller's back (garbage
// collection) then fails the manifest PUT, and the push forgets the
// repository and tries again asking. It also says where else a blob was
// seen, to mount it from. Bounded by entries, the least recently used
// forgotten first.
type blobMemory struct {
	mu    sync.Mutex
	max   int
	order *list.List                           // of *rememberedBlob, most recent first
	repos map[string]map[v1.Hash]*list.Element // repository ("host/path") → its entries
	// repositoriesWith indexes the same entries by blob, to find a repository to
	// mount one from.
	repositoriesWith map[v1.Hash]map[string]struct{}
}

type rememberedBlob struct {
	repo string
	blob v1.Hash
}

func newBlobMemory(max int) *blobMemory {
	return &blobMemory{max: max, order: list.New(), repos: map[string]map[v1.Hash]*list.Element{},
		repositoriesWith: map[v1.Hash]map[string]struct{}{}}
}

// has says whether repo was seen having key.
func (m *blobMemory) has(repo string, key v1.Hash) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.repos[repo][key]
	if ok {
		m.order.MoveToFront(e)
	}
	return ok
}

// remember records that repo has keys.
func (m *blobMemory) remember(repo string, keys ...v1.Hash) {
	if m.max <= 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	blobs := m.repos[repo]
	if blobs == nil {
		blobs = map[v1.Hash]*list.Element{}
		m.repos[repo] = blobs
	}
	for _, key := range keys {
		if e, ok := blobs[key]; ok {
			m.order.MoveToFront(e)
			continue
		}
		blobs[key] = m.order.PushFront(&rememberedBlob{repo: repo, blob: key})
		if m.repositoriesWith[key] == nil {
			m.repositoriesWith[key] = map[string]struct{}{}
		}
		m.repositoriesWith[key][repo] = struct{}{}
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
		m.remove(e)
	}
}

// repositoryWith returns a repository of host ("host/path"), other than not, seen
// holding blob.
func (m *blobMemory) repositoryWith(host string, blob v1.Hash, not string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for repo := range m.repositoriesWith[blob] {
		if repo != not && strings.HasPrefix(repo, host+"/") {
			return repo, true
		}
	}
	return "", false
}

// len is the number of entries, for tests.
func (m *blobMemory) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.order.Len()
}

func (m *blobMemory) remove(e *list.Element) {
	b := m.order.Remove(e).(*rememberedBlob)
	blobs := m.repos[b.repo]
	delete(blobs, b.blob)
	if len(blobs) == 0 {
		delete(m.repos, b.repo)
	}
	delete(m.repositoriesWith[b.blob], b.repo)
	if len(m.repositoriesWith[b.blob]) == 0 {
		delete(m.repositoriesWith, b.blob)
	}
}
