package agent

import "time"

// SetStreamFrameWaitMax sets the wait for a streamed writeset's next
// frame, and returns what restores it.
func SetStreamFrameWaitMax(d time.Duration) (restore func()) {
	old := streamFrameWaitMax.Swap(int64(d))
	return func() { streamFrameWaitMax.Store(old) }
}

// FeedPace is how often at most a durability feed sends outside mode ed.
const FeedPace = feedPace
