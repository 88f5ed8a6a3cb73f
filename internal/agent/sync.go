package agent

import (
	"context"
	"time"

	"github.com/tashkent-db/tashkent/internal/agent/wire"
)

// syncWaitMax bounds how long the agent asks the certifier for one Sync,
// whatever the backend allows (tashkent.sync_wait_timeout may be hours):
// a backend that still waits then hears why.
const syncWaitMax = time.Minute

// sync answers a backend's Sync (tashkent.sync_wait): the certifier's
// durable version, asked now, so that it covers every version the cluster
// acknowledged before the backend asked. The backend then waits until the
// replica has committed it. A run that is not serving cannot tell the
// backend anything it could wait for.
func (c *backendConn) sync(ctx context.Context, m wire.Sync) wire.Synced {
	r, why := c.a.servingRun(c.run)
	if r == nil {
		c.a.metrics.syncs.WithLabelValues("unavailable").Inc()
		return wire.Synced{Text: why}
	}
	sctx, cancel := context.WithTimeout(r.ctx, min(time.Duration(m.TimeoutMillis)*time.Millisecond, syncWaitMax))
	defer cancel()
	v, err := r.cert.SyncVersion(sctx)
	if err != nil {
		c.a.metrics.syncs.WithLabelValues("unavailable").Inc()
		return wire.Synced{Text: "the certifier did not answer: " + err.Error()}
	}
	c.a.metrics.syncs.WithLabelValues("known").Inc()
	return wire.Synced{Known: true, Version: v}
}
