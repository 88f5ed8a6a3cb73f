package certbench

import (
	"math"
	"strings"
	"testing"
	"time"
)

const exposition = `# HELP tashkent_certifier_reply_seconds Time ...
# TYPE tashkent_certifier_reply_seconds histogram
tashkent_certifier_reply_seconds_bucket{le="0.001"} 10
tashkent_certifier_reply_seconds_bucket{le="0.002"} 90
tashkent_certifier_reply_seconds_bucket{le="0.004"} 100
tashkent_certifier_reply_seconds_bucket{le="+Inf"} 100
tashkent_certifier_reply_seconds_sum 0.2
tashkent_certifier_reply_seconds_count 100
tashkent_certifier_entries_per_fsync_bucket{le="1"} 7
`

func TestHistogramQuantilesInterpolateInsideTheBucket(t *testing.T) {
	h, err := parseHistogram(strings.NewReader(exposition), replySecondsMetric)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.bounds) != 4 {
		t.Fatalf("%d buckets, want 4 (the other histogram's are not this one's)", len(h.bounds))
	}
	// 50th of 100: the 40th of the 80 in (1 ms, 2 ms].
	if got, want := h.quantile(0.5).Duration, 1500*time.Microsecond; got != want {
		t.Errorf("p50 %v, want %v", got, want)
	}
	// 99th: the 9th of the 10 in (2 ms, 4 ms].
	if got, want := h.quantile(0.99).Duration, 3800*time.Microsecond; got != want {
		t.Errorf("p99 %v, want %v", got, want)
	}
}

func TestHistogramDifferenceIsTheStepsObservations(t *testing.T) {
	h, _ := parseHistogram(strings.NewReader(exposition), replySecondsMetric)
	before := histogram{bounds: h.bounds, counts: []float64{10, 10, 10, 10}}
	d := h.minus(before)
	// Left: 80 in (1, 2], 10 in (2, 4]; p50 is the 45th: 45/80 of the way.
	if got, want := d.quantile(0.5).Duration, time.Millisecond+time.Duration(45.0/80*float64(time.Millisecond)); got != want {
		t.Errorf("p50 of the difference %v, want %v", got, want)
	}
	if got := (histogram{}).quantile(0.99); got.Duration != 0 || got.String() != "-" {
		t.Errorf("empty histogram p99 %v, want 0, shown as -", got)
	}
}

func TestMissingHistogramIsAnError(t *testing.T) {
	if _, err := parseHistogram(strings.NewReader("other_metric 1\n"), replySecondsMetric); err == nil {
		t.Fatal("no error for metrics without the histogram")
	}
}

// A quantile past the largest bucket is shown as over it, not as it.
func TestQuantileInTheInfBucketIsShownAsOver(t *testing.T) {
	h := histogram{bounds: []float64{0.001, math.Inf(1)}, counts: []float64{50, 100}}
	got := h.quantile(0.99)
	if !got.Over || got.Duration != time.Millisecond || got.String() != ">1ms" {
		t.Fatalf("p99 in the +Inf bucket: %+v shown as %q, want over 1ms shown as >1ms", got, got)
	}
}
