package certgroup_test

import (
	"testing"

	"github.com/tashkent-db/tashkent/internal/certgroup"
	"github.com/tashkent-db/tashkent/internal/certifier"
)

// A member restarted from its disk re-applies its configuration changes
// before it can campaign: it must know all voters, never lead alone.
func TestRestartKnowsVoters(t *testing.T) {
	disk := newSimDir()
	cfg := certgroup.Config{ID: 1, Peers: []uint64{1, 2, 3}, Decode: certifier.DecodeEntryKeys}
	drive := func(c *certgroup.Core) {
		log, _, _, err := certgroup.OpenDiskLog(disk)
		if err != nil {
			t.Fatal(err)
		}
		for {
			b, ok := c.Ready()
			if !ok {
				return
			}
			if err := log.Save(b.HardState, b.Entries, b.MustSync); err != nil {
				t.Fatal(err)
			}
			c.Advance()
		}
	}
	c, err := certgroup.NewCore(cfg, certgroup.Persisted{})
	if err != nil {
		t.Fatal(err)
	}
	drive(c)
	if v := c.Status().Voters; len(v) != 3 {
		t.Fatalf("voters after bootstrap: %v", v)
	}
	_, p, _, err := certgroup.OpenDiskLog(disk)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("hard state %v, %d entries", p.HardState, len(p.Entries))
	c, err = certgroup.NewCore(cfg, p)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Campaign()
	drive(c)
	st := c.Status()
	if len(st.Voters) != 3 || st.Role == "leader" {
		t.Fatalf("after restart: %+v", st)
	}
}
