package certgroup

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// partitionFile is a fault point for real-process tests: while the file
// exists, this member drops every Raft message to and from the member ids
// it lists ("*" for all), as a network partition would. It is reread at
// most every partitionRereadInterval. Never set it in production.
type partitionFile struct {
	path string

	mu      sync.Mutex
	checked time.Time
	cut     map[uint64]bool
	all     bool
}

const partitionRereadInterval = 50 * time.Millisecond

func (p *partitionFile) isCut(peer uint64) bool {
	if p == nil || p.path == "" {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.checked) > partitionRereadInterval {
		p.checked = time.Now()
		p.cut, p.all = map[uint64]bool{}, false
		if b, err := os.ReadFile(p.path); err == nil {
			for _, f := range strings.FieldsFunc(string(b), func(r rune) bool { return r == ',' || r == ' ' || r == '\n' }) {
				if f == "*" {
					p.all = true
				} else if id, err := strconv.ParseUint(f, 10, 64); err == nil {
					p.cut[id] = true
				}
			}
		}
	}
	return p.all || p.cut[peer]
}
