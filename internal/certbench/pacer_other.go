//go:build !linux

package certbench

import (
	"errors"
	"time"
)

func newPreciseTicker(time.Time, time.Duration) (ticker, error) {
	return nil, errors.New("no timerfd on this system")
}
