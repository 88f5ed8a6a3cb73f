package sqlclass

import (
	"container/list"
	"strings"
	"sync"
)

const (
	// classifyCacheEntriesMax bounds the number of distinct query strings whose
	// classification is kept. A connection pool's application sends a few hundred
	// distinct statements at most; 4096 covers many applications per proxy.
	classifyCacheEntriesMax = 4096
	// classifyCacheSQLBytesMax is the longest query string that is cached. Longer
	// strings (bulk INSERTs with inline values, generated SQL) are rarely repeated
	// verbatim and would make the cache's memory unbounded in practice; with both
	// limits the keys take at most 4096 * 16 KiB = 64 MiB, and typically a few
	// hundred KiB.
	classifyCacheSQLBytesMax = 16 << 10
)

type cacheEntry struct {
	stmts []Statement // never modified after insertion; callers get copies
	err   error
}

type lruItem struct {
	key string
	val cacheEntry
}

// lru is a mutex-protected least-recently-used map with a fixed entry bound.
type lru struct {
	mu    sync.Mutex
	max   int
	ll    *list.List // front = most recently used; elements hold *lruItem
	items map[string]*list.Element
	// hits and misses count look-ups, for tests and metrics.
	hits, misses uint64
}

func newLRU(max int) *lru {
	return &lru{max: max, ll: list.New(), items: make(map[string]*list.Element)}
}

var classifyCache = newLRU(classifyCacheEntriesMax)

func (c *lru) get(key string) (cacheEntry, bool) {
	if len(key) > classifyCacheSQLBytesMax {
		return cacheEntry{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[key]; ok {
		c.ll.MoveToFront(e)
		c.hits++
		return e.Value.(*lruItem).val, true
	}
	c.misses++
	return cacheEntry{}, false
}

func (c *lru) put(key string, val cacheEntry) {
	if len(key) > classifyCacheSQLBytesMax {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[key]; ok {
		e.Value.(*lruItem).val = val
		c.ll.MoveToFront(e)
		return
	}
	// Clone: the key may be a substring of a large buffer that must not be pinned.
	key = strings.Clone(key)
	c.items[key] = c.ll.PushFront(&lruItem{key: key, val: val})
	for c.ll.Len() > c.max {
		old := c.ll.Back()
		c.ll.Remove(old)
		delete(c.items, old.Value.(*lruItem).key)
	}
}

func (c *lru) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len()
}
