// Package pagetest loads the dashboard page (internal/dashboard) in
// headless Chromium for tests: the DOM after the page ran, and a
// screenshot with a few measures of its pixels. Debian's chromium package
// provides the browser; a test that needs it fails, naming the package,
// where it is missing.
package pagetest

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// chromiumRunMax bounds one run of headless Chromium.
const chromiumRunMax = 90 * time.Second

// NeedChromium finds Debian's chromium, or fails the test saying how to
// install it: the dashboard's tests are not skipped where it is missing.
func NeedChromium(t testing.TB) string {
	t.Helper()
	for _, p := range []string{"chromium", "/usr/bin/chromium"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	t.Fatal("headless Chromium is needed to test the dashboard page: apt-get install chromium (Debian's package; .ci/run installs it)")
	return ""
}

// RunChromium loads url in headless Chromium, a new profile each time,
// and returns what it prints; budget is the virtual time the page runs
// for (its timers fire as they would in that time; the page's requests
// are real and waited for).
func RunChromium(t testing.TB, url string, budget time.Duration, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), chromiumRunMax)
	defer cancel()
	all := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--user-data-dir=" + t.TempDir(), fmt.Sprintf("--virtual-time-budget=%d", budget.Milliseconds())}, args...)
	cmd := exec.CommandContext(ctx, NeedChromium(t), append(all, url)...)
	// Chromium starts helper processes; a run that overstays is ended
	// with its whole process group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v\n%s", url, err, stderr.String())
	}
	return stdout.Bytes()
}

// DumpDOM is the page's DOM after budget of its (virtual) time.
func DumpDOM(t testing.TB, url string, budget time.Duration) string {
	t.Helper()
	return string(RunChromium(t, url, budget, "--dump-dom"))
}

// Screenshot is a PNG screenshot of the page at width x height, decoded,
// taken after budget of its (virtual) time; the file is kept in dir.
func Screenshot(t testing.TB, url string, budget time.Duration, width, height int, dir string) image.Image {
	t.Helper()
	file := filepath.Join(dir, "dashboard.png")
	RunChromium(t, url, budget, "--screenshot="+file, fmt.Sprintf("--window-size=%d,%d", width, height), "--hide-scrollbars")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("chromium wrote no screenshot: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("screenshot %s is not a PNG: %v", file, err)
	}
	if got := img.Bounds().Size(); got.X != width || got.Y != height {
		t.Fatalf("screenshot is %dx%d, want %dx%d", got.X, got.Y, width, height)
	}
	return img
}

// Pixels counts the pixels of img within tolerance of each channel of
// rgb, and the distinct colours it has.
func Pixels(img image.Image, rgb [3]uint8, tolerance int) (near, colours int) {
	r, g, b := rgb[0], rgb[1], rgb[2]
	seen := map[uint32]bool{}
	bounds := img.Bounds()
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			pr, pg, pb := int(cr>>8), int(cg>>8), int(cb>>8)
			seen[uint32(pr)<<16|uint32(pg)<<8|uint32(pb)] = true
			if abs(pr-int(r)) <= tolerance && abs(pg-int(g)) <= tolerance && abs(pb-int(b)) <= tolerance {
				near++
			}
		}
	}
	return near, len(seen)
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// CriticalRGB is the page's colour of a critical alert (--critical in
// dashboard.css).
var CriticalRGB = [3]uint8{0xc6, 0x28, 0x28}
