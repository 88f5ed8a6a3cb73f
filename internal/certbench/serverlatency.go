package certbench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The certifier's own latency, from receiving a request to handing its
// reply to gRPC (fsync included), is read from its Prometheus histogram
// tashkent_certifier_reply_seconds before and after a step. Reported beside
// the latency the clients see, it separates what the certifier takes from
// what the two gRPC stacks, the loopback and the generator itself (which
// shares the machine's cores) add.

const replySecondsMetric = "tashkent_certifier_reply_seconds_bucket"

// histogram is a cumulative Prometheus histogram: counts[i] observations
// at or below bounds[i] (the last bound is +Inf).
type histogram struct {
	bounds []float64
	counts []float64
}

// scrapeReplySeconds reads the reply-latency histogram from a certifier's
// metrics URL.
func scrapeReplySeconds(ctx context.Context, url string) (histogram, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return histogram{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return histogram{}, fmt.Errorf("certifier metrics at %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return histogram{}, fmt.Errorf("certifier metrics at %s: %s", url, resp.Status)
	}
	return parseHistogram(resp.Body, replySecondsMetric)
}

// parseHistogram reads one histogram's buckets from the text exposition
// format: lines `name{le="0.001"} 42`.
func parseHistogram(r io.Reader, name string) (histogram, error) {
	var h histogram
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name+`{le="`)
		if !ok {
			continue
		}
		le, count, ok := strings.Cut(rest, `"} `)
		if !ok {
			return histogram{}, fmt.Errorf("metric line %q: unexpected shape", line)
		}
		bound, err1 := strconv.ParseFloat(le, 64) // "+Inf" parses as +Inf
		n, err2 := strconv.ParseFloat(strings.TrimSpace(count), 64)
		if err1 != nil || err2 != nil {
			return histogram{}, fmt.Errorf("metric line %q: unexpected numbers", line)
		}
		h.bounds, h.counts = append(h.bounds, bound), append(h.counts, n)
	}
	if err := sc.Err(); err != nil {
		return histogram{}, err
	}
	if len(h.bounds) == 0 {
		return histogram{}, fmt.Errorf("no %s in the certifier's metrics", name)
	}
	return h, nil
}

// minus is the histogram of the observations made between earlier and h.
func (h histogram) minus(earlier histogram) histogram {
	d := histogram{bounds: h.bounds, counts: make([]float64, len(h.counts))}
	for i := range h.counts {
		d.counts[i] = h.counts[i]
		if i < len(earlier.counts) {
			d.counts[i] -= earlier.counts[i]
		}
	}
	return d
}

// quantile interpolates linearly inside the bucket holding the q-quantile
// (as Prometheus' histogram_quantile does); 0 when empty. A quantile in the
// +Inf bucket is reported as over the largest finite bound (Over).
func (h histogram) quantile(q float64) ServerLatency {
	d, over := h.quantileOf(q)
	return ServerLatency{Duration: d, Over: over}
}

func (h histogram) quantileOf(q float64) (time.Duration, bool) {
	if len(h.counts) == 0 || h.counts[len(h.counts)-1] == 0 {
		return 0, false
	}
	rank := q * h.counts[len(h.counts)-1]
	i := sort.SearchFloat64s(h.counts, rank)
	if i >= len(h.bounds)-1 {
		return seconds(h.bounds[len(h.bounds)-2]), true
	}
	lower, below := 0.0, 0.0
	if i > 0 {
		lower, below = h.bounds[i-1], h.counts[i-1]
	}
	inBucket := h.counts[i] - below
	if inBucket <= 0 {
		return seconds(h.bounds[i]), false
	}
	return seconds(lower + (h.bounds[i]-lower)*(rank-below)/inBucket), false
}

// ServerLatency is a quantile of the certifier's reply latency.
type ServerLatency struct {
	time.Duration      // 0: not measured
	Over          bool // above the histogram's largest bucket, Duration
}

func (l ServerLatency) String() string {
	switch {
	case l.Duration == 0:
		return "-"
	case l.Over:
		return ">" + l.Round(time.Millisecond).String()
	}
	return l.Round(time.Microsecond).String()
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
