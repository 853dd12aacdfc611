package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/redis/go-redis/v9"
)

// TestCPUProfile: -cpuprofile writes a CPU profile covering the run, in
// pprof's format (gzipped protobuf, sample types cpu/nanoseconds), once
// lockproxy has shut down; a file that cannot be created stops the start.
func TestCPUProfile(t *testing.T) {
	m := redisproc.ForTest(t, 1)
	path := writeConfig(t, "listen = \"127.0.0.1:0\"\nmetrics_listen = \"\"\n[quorum]\nmasters = [\""+m[0].Addr+"\"]\nbootstrap = true\nprobe_interval = \"0s\"\n")
	prof := filepath.Join(t.TempDir(), "cpu.pprof")
	p := startRun(t, "-config", path, "-cpuprofile", prof)
	listen, _, _ := p.addrs()
	c := redis.NewClient(&redis.Options{Addr: listen, MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	waitFor(t, func() bool { return c.Do(ctx, "SET", "profiled:up", "t", "NX", "PX", 10000).Err() == nil }, "the master to answer")
	for i := 0; i < 2000; i++ {
		if err := c.Do(ctx, "SET", "profiled:"+strconv.Itoa(i), "t", "NX", "PX", 10000).Err(); err != nil {
			t.Fatalf("SET NX PX through lockproxy: %v", err)
		}
	}
	if code := p.stop(); code != 0 {
		t.Fatalf("exit status %d after the signal, want 0", code)
	}
	f, err := os.Open(prof)
	if err != nil {
		t.Fatalf("no profile after shutdown: %v", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("the profile is not gzipped (pprof's format): %v", err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("reading the profile: %v", err)
	}
	for _, s := range []string{"samples", "count", "cpu", "nanoseconds"} {
		if !bytes.Contains(data, []byte(s)) {
			t.Errorf("the profile's string table lacks the CPU sample type %q (%d bytes)", s, len(data))
		}
	}

	code, _, stderr := runOnce(t, "-config", path, "-cpuprofile", filepath.Join(t.TempDir(), "missing", "cpu.pprof"))
	if code != 2 || !strings.Contains(stderr, "-cpuprofile:") || !strings.Contains(stderr, "no such file or directory") {
		t.Fatalf("-cpuprofile into a missing directory: exit %d, stderr %q; want exit 2 naming the flag and the cause", code, stderr)
	}
}
