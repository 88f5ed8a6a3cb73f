package agent_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/agent"
	"github.com/tashkent-db/tashkent/internal/clustertest"
	"github.com/tashkent-db/tashkent/internal/pgtest"
)

// Outside mode ed no commit waits for the durability feed: the certifier
// answers a commit once it is durable. So the agent paces the feed instead
// of sending each certifier batch's advance, which would wake the server's
// feed worker about once per commit; the last advance still reaches
// tashkent.durable_version().
func TestTheDurabilityFeedIsPacedOutsideModeED(t *testing.T) {
	c, _ := startWithSchema(t, 1, clustertest.Options{Agent: func(_ int, cfg *agent.Config) {
		cfg.MetricsAddr = "127.0.0.1:0"
	}}, schema)
	metrics := "http://" + c.Agents[0].MetricsAddr().String() + "/metrics"
	start := time.Now()
	before := feedSends(t, metrics)
	const commits = 300
	last := write(t, c, 0, 1, commits)
	sent := feedSends(t, metrics) - before
	took := time.Since(start)
	if most := int(took/agent.FeedPace) + 2; sent > most {
		t.Errorf("the agent sent %d durable versions to the feed during %d commits in %v, want at most %d (one per %v)",
			sent, commits, took, most, agent.FeedPace)
	}
	conn := c.Connect(0)
	pgtest.AwaitDurableVersion(t, conn, int64(last), 5*time.Second)
}

// feedSends is the agent's count of durable versions sent to the feed.
func feedSends(t *testing.T, metricsURL string) int {
	t.Helper()
	const name = "tashkent_agent_durability_feed_sends_total "
	for _, line := range strings.Split(httpGet(t, metricsURL), "\n") {
		if v, ok := strings.CutPrefix(line, name); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return int(n)
		}
	}
	t.Fatalf("/metrics lacks %s", name)
	return 0
}
